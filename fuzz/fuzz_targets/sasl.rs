#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| lockkeeper_server::fuzzing::sasl(data));
