//! Debian packages whose libraries elf-loader's tests load (real C++ libraries: ICU and
//! RocksDB, each loaded twice by `elf-loader/tests/it/cxx_debian.rs`). Libraries are not
//! programs on the PATH, so they are checked by file; the missing packages are installed
//! with one apt-get run.

use anyhow::Result;
use std::path::Path;

/// (library file that must exist, Debian package that provides it).
const LIBRARIES: &[(&str, &str)] = &[
    ("/usr/lib/x86_64-linux-gnu/libicuuc.so.72", "libicu72"),
    (
        "/usr/lib/x86_64-linux-gnu/librocksdb.so.7.8",
        "librocksdb7.8",
    ),
];

/// Installs the packages of the libraries that are missing.
pub fn ensure() -> Result<()> {
    crate::steps::ensure_apt_packages(
        LIBRARIES,
        |file| Path::new(file).exists(),
        "C++ libraries that elf-loader's tests load twice",
    )
}
