#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| headway_fuzz::url(data));
