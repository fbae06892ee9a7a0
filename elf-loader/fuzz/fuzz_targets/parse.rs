//! Fuzz target: the ELF parser and table walker (`elf::check_bytes`) on arbitrary bytes.
//! Run with `cargo +nightly fuzz run parse` from `elf-loader/`; the corpus in
//! `corpus/parse` is replayed by `tests/isolated/bad_input.rs` on stable in every test run.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = elf_loader::elf::check_bytes(std::path::Path::new("fuzz-input.so"), data);
});
