#![no_main]

mod plant;

libfuzzer_sys::fuzz_target!(init: plant::seeds("celery"), |data: &[u8]| headway_fuzz::celery(data));
