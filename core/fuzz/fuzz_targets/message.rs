#![no_main]

mod plant;

libfuzzer_sys::fuzz_target!(init: plant::seeds("message"), |data: &[u8]| headway_fuzz::message(data));
