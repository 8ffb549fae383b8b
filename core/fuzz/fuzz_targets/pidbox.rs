#![no_main]

mod plant;

libfuzzer_sys::fuzz_target!(init: plant::seeds("pidbox"), |data: &[u8]| headway_fuzz::pidbox(data));
