#![no_main]

mod plant;

libfuzzer_sys::fuzz_target!(init: plant::seeds("celery_dead"), |data: &[u8]| headway_fuzz::celery_dead(data));
