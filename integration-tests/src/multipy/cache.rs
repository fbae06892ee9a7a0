//! The on-disk cache the layer keeps (compiled runners, marshalled bootstraps, Python
//! installations' probes): where it is, how a file is named after its inputs, and how
//! one is written without a reader ever seeing it torn.

use std::path::{Path, PathBuf};

/// Writes a cache file (best effort) under a temporary name unique to this process and
/// call, renamed into place: a reader in another thread or process sees the old file or
/// the whole new one, never a torn one.
pub(crate) fn write_cache_file(file: &Path, bytes: &[u8]) {
    static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let seq = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tmp = file.with_extension(format!("tmp{}-{seq}", std::process::id()));
    let _ = std::fs::create_dir_all(cache_dir());
    if std::fs::write(&tmp, bytes).is_err() || std::fs::rename(&tmp, file).is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
}

/// The directory the compiled runners are cached in: `$MULTIPY_CACHE_DIR`, else
/// `$XDG_CACHE_HOME/multipy`, else `~/.cache/multipy`, else the temporary directory.
pub fn cache_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("MULTIPY_CACHE_DIR") {
        return PathBuf::from(d);
    }
    if let Some(d) = std::env::var_os("XDG_CACHE_HOME") {
        return PathBuf::from(d).join("multipy");
    }
    if let Some(h) = std::env::var_os("HOME") {
        return PathBuf::from(h).join(".cache").join("multipy");
    }
    std::env::temp_dir().join("multipy")
}

/// FNV-1a over the bytes: names the cached runner after its source and inputs.
pub(crate) fn fnv(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for p in parts {
        for b in p.iter().chain(&[0u8]) {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    h
}
