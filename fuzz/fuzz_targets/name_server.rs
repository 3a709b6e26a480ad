#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| rivet_fuzz::name_server(data));
