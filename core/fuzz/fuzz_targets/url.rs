#![no_main]

mod plant;

libfuzzer_sys::fuzz_target!(init: plant::seeds("url"), |data: &[u8]| headway_fuzz::url(data));
