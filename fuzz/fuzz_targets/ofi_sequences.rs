#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| rivet_fuzz::ofi_sequences(data));
