#![no_main]

mod plant;

libfuzzer_sys::fuzz_target!(init: plant::seeds("result_meta"), |data: &[u8]| headway_fuzz::result_meta(data));
