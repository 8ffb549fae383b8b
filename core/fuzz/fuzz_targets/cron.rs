#![no_main]

mod plant;

libfuzzer_sys::fuzz_target!(init: plant::seeds("cron"), |data: &[u8]| headway_fuzz::cron(data));
