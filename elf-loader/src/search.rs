//! Finding a library by name as glibc's `dlopen` does: the caller's `DT_RPATH` (when it
//! has no `DT_RUNPATH`), `LD_LIBRARY_PATH`, the caller's `DT_RUNPATH`, `/etc/ld.so.cache`,
//! then the default directories (skipped, with the cache, for a caller linked with
//! `-z nodeflib`). `$ORIGIN` expands to the caller's directory. The cache is read here
//! (its "glibc-ld.so.cache1.1" format), not through `ldconfig -p`.
//!
//! Not done, as glibc does: the `glibc-hwcaps/x86-64-v*` and legacy `x86_64`/`tls`
//! subdirectories of each directory (Debian 12 installs no library there), and the
//! executable's `DT_RPATH` for a custom library's own `dlopen` (glibc's loader-chain
//! rule; here only the calling library's).

use std::path::{Path, PathBuf};

/// glibc's default directories on Debian x86-64 (`ld.so --help`: "system search path"),
/// searched after the cache.
pub const SYSTEM_DIRS: &[&str] = &[
    "/lib/x86_64-linux-gnu",
    "/usr/lib/x86_64-linux-gnu",
    "/lib",
    "/usr/lib",
];

/// The cache file `ldconfig` writes.
pub const LD_SO_CACHE: &str = "/etc/ld.so.cache";

/// Where a name was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Found {
    /// The file.
    pub path: PathBuf,
    /// Found in the cache or a default directory: a library of the system (shared
    /// through the system loader by the default dependency policy).
    pub system: bool,
}

/// The search path of one caller, in order.
pub(crate) struct SearchPath {
    /// Directories before the cache (RPATH, `LD_LIBRARY_PATH`, RUNPATH).
    pub dirs: Vec<PathBuf>,
    /// Whether the cache and the default directories are searched (not with
    /// `DF_1_NODEFLIB`).
    pub defaults: bool,
}

impl SearchPath {
    /// The search path of a library with these dynamic entries, in `origin`
    /// (`LD_LIBRARY_PATH` as it is now).
    pub fn of_library(
        rpath: Option<&str>,
        runpath: Option<&str>,
        origin: &Path,
        nodeflib: bool,
    ) -> SearchPath {
        let expand = |list: &str| -> Vec<PathBuf> {
            let o = origin.to_string_lossy();
            list.split(':')
                .filter(|s| !s.is_empty())
                .map(|s| PathBuf::from(s.replace("${ORIGIN}", &o).replace("$ORIGIN", &o)))
                .collect()
        };
        let mut dirs = Vec::new();
        if runpath.is_none() {
            if let Some(rp) = rpath {
                dirs.extend(expand(rp));
            }
        }
        if let Ok(ld) = std::env::var("LD_LIBRARY_PATH") {
            dirs.extend(expand(&ld));
        }
        if let Some(rp) = runpath {
            dirs.extend(expand(rp));
        }
        SearchPath {
            dirs,
            defaults: !nodeflib,
        }
    }

    /// The search path of `dlopen` called from the main program: glibc's own list for
    /// it (`dlinfo(RTLD_DI_SERINFO)`: the executable's `DT_RPATH`, `LD_LIBRARY_PATH` as
    /// at start-up, its `DT_RUNPATH`), without the default directories, which
    /// [`SearchPath::find`] adds after the cache.
    pub fn of_program() -> SearchPath {
        let mut dirs = Vec::new();
        let mut defaults = true;
        match program_serinfo() {
            Some(mut list) => {
                // glibc 2.36 leaves the entries' flags 0: the default directories are
                // the list's tail (absent for a `-z nodeflib` program).
                let mut saw_default = false;
                while list
                    .last()
                    .is_some_and(|(d, _)| SYSTEM_DIRS.iter().any(|s| Path::new(s) == d))
                {
                    list.pop();
                    saw_default = true;
                }
                dirs.extend(list.into_iter().map(|(d, _)| d));
                defaults = saw_default;
            }
            None => {
                if let Ok(ld) = std::env::var("LD_LIBRARY_PATH") {
                    dirs.extend(ld.split(':').filter(|s| !s.is_empty()).map(PathBuf::from));
                }
            }
        }
        SearchPath { dirs, defaults }
    }

    /// Finds `name` (no `/`): the directories, the cache, the default directories.
    /// Otherwise `Err` with what was searched, for the message.
    pub fn find(&self, name: &str) -> Result<Found, String> {
        for d in &self.dirs {
            let p = d.join(name);
            if p.is_file() {
                return Ok(Found {
                    path: p,
                    system: false,
                });
            }
        }
        if self.defaults {
            if let Some(p) = cache_lookup(Path::new(LD_SO_CACHE), name) {
                if p.is_file() {
                    return Ok(Found {
                        path: p,
                        system: true,
                    });
                }
            }
            for d in SYSTEM_DIRS {
                let p = Path::new(d).join(name);
                if p.is_file() {
                    return Ok(Found {
                        path: p,
                        system: true,
                    });
                }
            }
        }
        let mut searched: Vec<String> = self.dirs.iter().map(|d| d.display().to_string()).collect();
        if self.defaults {
            searched.push(LD_SO_CACHE.to_string());
            searched.extend(SYSTEM_DIRS.iter().map(|d| d.to_string()));
        } else {
            searched.push("(not the cache or default directories: DF_1_NODEFLIB)".into());
        }
        Err(searched.join(":"))
    }
}

/// `dlinfo(dlopen(NULL), RTLD_DI_SERINFO)`: glibc's search directories for `dlopen`
/// from the main program, with their `LA_SER_*` flags (0 in glibc 2.36).
fn program_serinfo() -> Option<Vec<(PathBuf, u32)>> {
    #[repr(C)]
    struct Serpath {
        name: *const libc::c_char,
        flags: libc::c_uint,
    }
    #[repr(C)]
    struct Serinfo {
        size: libc::size_t,
        cnt: libc::c_uint,
    }
    const RTLD_DI_SERINFO: libc::c_int = 4;
    const RTLD_DI_SERINFOSIZE: libc::c_int = 5;
    // The main program's handle (dlopen(NULL): no load happens), closed when `main`
    // is dropped.
    // SAFETY: no library is loaded, so no initialiser runs.
    let main = unsafe {
        libloading::os::unix::Library::open(None::<&str>, libc::RTLD_LAZY | libc::RTLD_NOLOAD)
    }
    .ok()?;
    let h = main.into_raw();
    // SAFETY: `h` is the live handle just opened; `main` owns it again.
    let main = unsafe { libloading::os::unix::Library::from_raw(h) };
    let mut head = Serinfo { size: 0, cnt: 0 };
    // SAFETY: RTLD_DI_SERINFOSIZE fills a Dl_serinfo's size and count.
    let rc = unsafe { libc::dlinfo(h, RTLD_DI_SERINFOSIZE, (&raw mut head).cast()) };
    if rc != 0 || head.size < std::mem::size_of::<Serinfo>() {
        return None;
    }
    // A buffer of `size` bytes, 8-aligned, with size and count preset (as glibc asks).
    let mut buf = vec![0u64; head.size.div_ceil(8)];
    let info = buf.as_mut_ptr().cast::<Serinfo>();
    // SAFETY: `buf` holds at least `size` bytes, suitably aligned for Dl_serinfo.
    unsafe {
        (*info).size = head.size;
        (*info).cnt = head.cnt;
    }
    // SAFETY: the buffer is as large as glibc said; it writes the paths into it.
    let rc = unsafe { libc::dlinfo(h, RTLD_DI_SERINFO, info.cast()) };
    drop(main);
    if rc != 0 {
        return None;
    }
    let offset = std::mem::size_of::<libc::size_t>() + std::mem::size_of::<libc::size_t>();
    let mut out = Vec::new();
    for i in 0..head.cnt as usize {
        // SAFETY: dls_serpath[i] for i < cnt lies in the buffer (after size and cnt,
        // padded to 8), and its name points into the same buffer, NUL-terminated.
        let (name, flags) = unsafe {
            let sp = buf
                .as_ptr()
                .cast::<u8>()
                .add(offset + i * std::mem::size_of::<Serpath>())
                .cast::<Serpath>();
            (
                std::ffi::CStr::from_ptr((*sp).name)
                    .to_string_lossy()
                    .into_owned(),
                (*sp).flags,
            )
        };
        // glibc lists directories with a trailing slash.
        let name = name
            .strip_suffix('/')
            .filter(|n| !n.is_empty())
            .unwrap_or(&name);
        out.push((PathBuf::from(name), flags));
    }
    Some(out)
}

/// Looks `name` up in the cache file at `path` ("glibc-ld.so.cache1.1"): the path of
/// the x86-64 entry for that soname without hwcaps (the baseline library), if any.
pub(crate) fn cache_lookup(path: &Path, name: &str) -> Option<PathBuf> {
    let data = std::fs::read(path).ok()?;
    parse_cache(&data)
        .into_iter()
        .find(|(key, _)| key == name)
        .map(|(_, v)| PathBuf::from(v))
}

/// The (soname, path) entries of an ld.so.cache file for x86-64 libraries without
/// hwcaps, in file order; nothing if the file is not in the new format (glibc 2.32+
/// writes only that one; an old-format prefix, from `ldconfig -c compat`, is skipped).
/// Malformed entries are skipped: a damaged cache means a slower search, never a crash.
pub(crate) fn parse_cache(data: &[u8]) -> Vec<(String, String)> {
    const MAGIC_NEW: &[u8] = b"glibc-ld.so.cache1.1";
    const MAGIC_OLD: &[u8] = b"ld.so-1.7.0";
    // x86-64: FLAG_ELF_LIBC6 | FLAG_X8664_LIB64.
    const FLAGS_X8664: u32 = 0x0303;
    let u32_at = |d: &[u8], o: usize| -> Option<u32> {
        Some(u32::from_le_bytes(d.get(o..o + 4)?.try_into().ok()?))
    };
    // The new format follows an old one, if there is one (aligned to 8 after it).
    let mut start = 0;
    if data.starts_with(MAGIC_OLD) {
        let Some(n) = u32_at(data, 12) else {
            return Vec::new();
        };
        let end = 16 + n as usize * 12;
        start = end.next_multiple_of(8);
    }
    let Some(cache) = data.get(start..) else {
        return Vec::new();
    };
    if !cache.starts_with(MAGIC_NEW) || cache.len() < 48 {
        return Vec::new();
    }
    let Some(nlibs) = u32_at(cache, 20) else {
        return Vec::new();
    };
    // Offsets in the entries are from the start of the new-format header.
    let string_at = |off: u32| -> Option<String> {
        let s = cache.get(off as usize..)?;
        let n = s.iter().position(|&b| b == 0)?;
        String::from_utf8(s[..n].to_vec()).ok()
    };
    let mut out = Vec::new();
    for i in 0..nlibs as usize {
        let e = 48 + i * 24;
        let (Some(flags), Some(key), Some(value)) =
            (u32_at(cache, e), u32_at(cache, e + 4), u32_at(cache, e + 8))
        else {
            break;
        };
        let hwcap = cache
            .get(e + 16..e + 24)
            .map_or(1, |b| u64::from_le_bytes(b.try_into().expect("8 bytes")));
        if flags != FLAGS_X8664 || hwcap != 0 {
            continue;
        }
        if let (Some(k), Some(v)) = (string_at(key), string_at(value)) {
            out.push((k, v));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A new-format cache with the given (flags, hwcap, key, value) entries.
    fn cache(entries: &[(u32, u64, &str, &str)]) -> Vec<u8> {
        let mut d = b"glibc-ld.so.cache1.1".to_vec();
        d.extend((entries.len() as u32).to_le_bytes());
        d.extend(0u32.to_le_bytes()); // len_strings (unused here)
        d.extend([2, 0, 0, 0]); // flags: little-endian
        d.extend([0u8; 16]); // extension offset, unused
        let strings_at = 48 + 24 * entries.len();
        let mut strings = Vec::new();
        for (flags, hwcap, k, v) in entries {
            let ko = (strings_at + strings.len()) as u32;
            strings.extend(k.as_bytes());
            strings.push(0);
            let vo = (strings_at + strings.len()) as u32;
            strings.extend(v.as_bytes());
            strings.push(0);
            d.extend(flags.to_le_bytes());
            d.extend(ko.to_le_bytes());
            d.extend(vo.to_le_bytes());
            d.extend(0u32.to_le_bytes());
            d.extend(hwcap.to_le_bytes());
        }
        d.extend(strings);
        d
    }

    #[test]
    fn parses_x86_64_entries_and_skips_the_others() {
        let d = cache(&[
            (0x0303, 0, "libz.so.1", "/lib/x86_64-linux-gnu/libz.so.1"),
            (0x0003, 0, "libz.so.1", "/lib/i386-linux-gnu/libz.so.1"),
            (
                0x0303,
                1 << 62,
                "libfoo.so",
                "/usr/lib/glibc-hwcaps/x86-64-v3/libfoo.so",
            ),
            (0x0303, 0, "libfoo.so", "/usr/lib/libfoo.so"),
        ]);
        assert_eq!(
            parse_cache(&d),
            vec![
                ("libz.so.1".into(), "/lib/x86_64-linux-gnu/libz.so.1".into()),
                ("libfoo.so".into(), "/usr/lib/libfoo.so".into()),
            ]
        );
        // Damage: truncated anywhere, wrong magic, offsets out of range: no panic.
        for cut in 0..d.len() {
            let _ = parse_cache(&d[..cut]);
        }
        let mut bad = d.clone();
        bad[0] = b'X';
        assert!(parse_cache(&bad).is_empty());
        let mut bad = d;
        bad[48 + 4..48 + 8].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(
            parse_cache(&bad).len(),
            1,
            "the entry with a bad key is skipped"
        );
    }

    #[test]
    fn the_systems_cache_agrees_with_the_files() {
        // Every entry of this machine's cache names an existing file with that name
        // (ldconfig writes the soname as the key).
        let Ok(data) = std::fs::read(LD_SO_CACHE) else {
            return;
        };
        let entries = parse_cache(&data);
        assert!(entries.len() > 10, "{} entries", entries.len());
        assert!(entries.iter().any(|(k, _)| k == "libc.so.6"));
        for (k, v) in entries.iter().take(50) {
            assert!(v.ends_with(k.as_str()), "{k} -> {v}");
        }
    }
}
