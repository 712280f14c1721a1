#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| blkprof_fuzz::report_render(data));
