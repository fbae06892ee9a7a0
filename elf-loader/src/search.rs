//! Finding a library by name as glibc 2.36's `_dl_map_object` (`elf/dl-load.c`) does,
//! in its order:
//!
//! 1. when the loading object has no `DT_RUNPATH`: the `DT_RPATH` of the loading
//!    object, then of the object that loaded it, and so on up the chain of loaders
//!    (`l_loader`; an object with a `DT_RUNPATH` has its `DT_RPATH` ignored but the
//!    walk goes on through it), then the executable's `DT_RPATH`;
//! 2. `LD_LIBRARY_PATH` as it was when the process started (glibc reads it once; a
//!    later `setenv`, e.g. `os.environ[...] = ...` in one interpreter, changes nothing);
//! 3. the loading object's own `DT_RUNPATH` (its direct dependencies and `dlopen`s only);
//! 4. `/etc/ld.so.cache`, then the default directories; for a loading object linked
//!    with `-z nodeflib` (`DF_1_NODEFLIB`) neither the default directories nor a cache
//!    entry inside them.
//!
//! Every directory of steps 1-3 and the default directories is tried with glibc's
//! subdirectories first: `glibc-hwcaps/x86-64-v4`, `-v3`, `-v2` (those the CPU
//! supports), then the legacy ones (`tls`, the platform, `x86_64`, combined as glibc
//! 2.36 combines them), then the directory itself. In path lists, `$ORIGIN` (the
//! directory of the object whose list it is; the executable's for `LD_LIBRARY_PATH`),
//! `$LIB` and `$PLATFORM` (also as `${...}`) are expanded; an element whose token
//! cannot be expanded is dropped; an empty element is the current directory. A file of
//! another ELF class or machine is skipped and the search goes on, as glibc's
//! `open_verify` does. The cache is read here (its "glibc-ld.so.cache1.1" format), not
//! through `ldconfig -p`.
//!
//! Not done as glibc does: cache entries for `glibc-hwcaps` subdirectories (skipped:
//! Debian 12's `ldconfig` writes none), `LD_LIBRARY_PATH` for a set-user-id program
//! (ignored here as by glibc: `AT_SECURE` is honoured), `glibc.rtld` tunables and
//! `LD_PRELOAD` (a process-wide matter of the system loader).

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

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

/// What `$LIB` expands to: glibc's `DL_DST_LIB` as Debian builds it (`ld.so
/// --list-diagnostics` prints it as `dl_dst_lib`).
pub const DST_LIB: &str = "lib/x86_64-linux-gnu";

/// Where a name was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Found {
    /// The file.
    pub path: PathBuf,
    /// Found in the cache or a default directory: a library of the system (shared
    /// through the system loader by the default dependency policy).
    pub system: bool,
}

/// One object of a chain of loaders, as the search reads it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Link<'a> {
    /// `DT_RPATH`.
    pub rpath: Option<&'a str>,
    /// `DT_RUNPATH`.
    pub runpath: Option<&'a str>,
    /// The directory of the object's file (`$ORIGIN`).
    pub origin: &'a Path,
}

impl Link<'_> {
    /// glibc ignores an object's `DT_RPATH` when it also has a `DT_RUNPATH`
    /// (`elf/get-dynamic-info.h`).
    fn effective_rpath(&self) -> Option<&str> {
        if self.runpath.is_some() {
            None
        } else {
            self.rpath
        }
    }
}

/// The search path of one lookup, in order.
pub(crate) struct SearchPath {
    /// Directories before the cache (RPATHs, `LD_LIBRARY_PATH`, RUNPATH), expanded.
    pub dirs: Vec<PathBuf>,
    /// The loading object has `DF_1_NODEFLIB`: no default directories, and no cache
    /// entry inside them.
    pub nodeflib: bool,
}

impl SearchPath {
    /// The search path for a name needed (or `dlopen`ed) by `chain[0]`, whose loader
    /// is `chain[1]`, and so on (the last is an object loaded through the API, whose
    /// loader is the program). `nodeflib` is `chain[0]`'s `DF_1_NODEFLIB`.
    pub fn of_chain(chain: &[Link<'_>], nodeflib: bool) -> SearchPath {
        let mut dirs = Vec::new();
        let loader_runpath = chain.first().and_then(|l| l.runpath);
        if loader_runpath.is_none() {
            for l in chain {
                if let Some(rp) = l.effective_rpath() {
                    dirs.extend(expand_list(rp, ":", Some(l.origin)));
                }
            }
            let exe = program();
            if let Some(rp) = exe.link().effective_rpath() {
                dirs.extend(expand_list(rp, ":", exe.origin.as_deref()));
            }
        }
        dirs.extend(startup_library_path());
        if let (Some(rp), Some(l)) = (loader_runpath, chain.first()) {
            dirs.extend(expand_list(rp, ":", Some(l.origin)));
        }
        SearchPath { dirs, nodeflib }
    }

    /// The search path of `dlopen` called from the main program: glibc's own list for
    /// it (`dlinfo(RTLD_DI_SERINFO)`: the executable's `DT_RPATH`, `LD_LIBRARY_PATH` as
    /// at start-up, its `DT_RUNPATH`), without the default directories, which
    /// [`SearchPath::find`] adds after the cache.
    pub fn of_program() -> SearchPath {
        let mut dirs = Vec::new();
        let mut nodeflib = false;
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
                nodeflib = !saw_default;
            }
            None => {
                let exe = program();
                dirs = Self::of_chain(&[exe.link()], false).dirs;
            }
        }
        SearchPath { dirs, nodeflib }
    }

    /// Finds `name` (no `/`): the directories, the cache, the default directories.
    /// Otherwise `Err` with what was searched, for the message.
    pub fn find(&self, name: &str) -> Result<Found, String> {
        for d in &self.dirs {
            if let Some(p) = find_in_dir(d, name) {
                return Ok(Found {
                    path: p,
                    system: false,
                });
            }
        }
        if let Some(p) = cache_lookup(Path::new(LD_SO_CACHE), name) {
            let in_default = SYSTEM_DIRS.iter().any(|d| p.starts_with(d));
            if !(self.nodeflib && in_default) && is_candidate(&p) {
                return Ok(Found {
                    path: p,
                    system: true,
                });
            }
        }
        if !self.nodeflib {
            for d in SYSTEM_DIRS {
                if let Some(p) = find_in_dir(Path::new(d), name) {
                    return Ok(Found {
                        path: p,
                        system: true,
                    });
                }
            }
        }
        let mut searched: Vec<String> = self
            .dirs
            .iter()
            .map(|d| match d.as_os_str().is_empty() {
                true => "(current directory)".to_string(),
                false => d.display().to_string(),
            })
            .collect();
        searched.push(LD_SO_CACHE.to_string());
        if self.nodeflib {
            searched.push("(not the default directories: DF_1_NODEFLIB)".into());
        } else {
            searched.extend(SYSTEM_DIRS.iter().map(|d| d.to_string()));
        }
        Err(searched.join(":"))
    }
}

/// `name` in `dir` or, before it, in one of glibc's subdirectories of it
/// ([`subdirectories`]): the first file there that is an x86-64 ELF object of class 64.
fn find_in_dir(dir: &Path, name: &str) -> Option<PathBuf> {
    subdirectories()
        .iter()
        .map(|sub| dir.join(sub).join(name))
        .chain(std::iter::once(dir.join(name)))
        .find(|p| is_candidate(p))
}

/// A file glibc's `open_verify` would take: a regular file whose ELF header says class
/// 64 and machine x86-64 (another class or machine is skipped). A file that is not ELF
/// at all is taken (and its load then fails naming it, as glibc's does).
fn is_candidate(p: &Path) -> bool {
    use std::io::Read;
    // A regular file only (checked before opening: opening a FIFO blocks).
    if !std::fs::metadata(p).is_ok_and(|m| m.is_file()) {
        return false;
    }
    let Ok(mut f) = std::fs::File::open(p) else {
        return false;
    };
    let mut head = [0u8; 20];
    if f.read_exact(&mut head).is_err() || head[..4] != *b"\x7fELF" {
        return true;
    }
    let class64 = head[4] == 2;
    let machine = u16::from_le_bytes([head[18], head[19]]);
    class64 && machine == 62
}

/// glibc 2.36's subdirectories of every search directory, tried in this order before
/// the directory itself: the `glibc-hwcaps` levels this CPU supports (highest first),
/// then the legacy hardware-capability directories. Computed once.
pub(crate) fn subdirectories() -> &'static [String] {
    static SUBS: OnceLock<Vec<String>> = OnceLock::new();
    SUBS.get_or_init(|| {
        let mut out: Vec<String> = x86_64_levels()
            .into_iter()
            .rev()
            .map(|v| format!("glibc-hwcaps/x86-64-v{v}"))
            .collect();
        out.extend(legacy_subdirectories(&platform(), hwcap_avx512_1()));
        out
    })
}

/// The legacy subdirectories (`elf/dl-hwcaps.c`, `_dl_important_hwcaps`, legacy part)
/// without the empty one: every combination of the components `tls`, the platform,
/// `avx512_1` (when the CPU has it) and `x86_64`, in that order within a path, the
/// combinations enumerated as glibc does (a binary count down, the first component the
/// highest bit). Duplicates (the platform is `x86_64` too) are kept once.
fn legacy_subdirectories(platform: &str, avx512_1: bool) -> Vec<String> {
    let mut comps = vec!["tls", platform];
    if avx512_1 {
        comps.push("avx512_1");
    }
    comps.push("x86_64");
    let n = comps.len();
    let mut out: Vec<String> = Vec::new();
    for mask in (1..1u32 << n).rev() {
        let path: Vec<&str> = (0..n)
            .filter(|i| mask & (1 << (n - 1 - i)) != 0)
            .map(|i| comps[i])
            .collect();
        let p = path.join("/");
        if !out.contains(&p) {
            out.push(p);
        }
    }
    out
}

/// The x86-64 micro-architecture levels (2, 3, 4) this CPU supports, as glibc's
/// `sysdeps/x86/get-isa-level.h` defines them.
fn x86_64_levels() -> Vec<u32> {
    use std::arch::x86_64::__cpuid;
    let (leaf1, ext1) = (__cpuid(1), __cpuid(0x8000_0001));
    let movbe = leaf1.ecx & (1 << 22) != 0;
    let lahf = ext1.ecx & 1 != 0;
    let v2 = std::arch::is_x86_feature_detected!("cmpxchg16b")
        && lahf
        && std::arch::is_x86_feature_detected!("popcnt")
        && std::arch::is_x86_feature_detected!("sse3")
        && std::arch::is_x86_feature_detected!("sse4.1")
        && std::arch::is_x86_feature_detected!("sse4.2")
        && std::arch::is_x86_feature_detected!("ssse3");
    let v3 = v2
        && std::arch::is_x86_feature_detected!("avx")
        && std::arch::is_x86_feature_detected!("avx2")
        && std::arch::is_x86_feature_detected!("bmi1")
        && std::arch::is_x86_feature_detected!("bmi2")
        && std::arch::is_x86_feature_detected!("f16c")
        && std::arch::is_x86_feature_detected!("fma")
        && std::arch::is_x86_feature_detected!("lzcnt")
        && movbe
        && std::arch::is_x86_feature_detected!("xsave");
    let v4 = v3 && avx512_1();
    [(2, v2), (3, v3), (4, v4)]
        .into_iter()
        .filter(|(_, ok)| *ok)
        .map(|(v, _)| v)
        .collect()
}

/// glibc's `HWCAP_X86_AVX512_1`: AVX512F, CD, BW, DQ and VL usable.
fn avx512_1() -> bool {
    std::arch::is_x86_feature_detected!("avx512f")
        && std::arch::is_x86_feature_detected!("avx512cd")
        && std::arch::is_x86_feature_detected!("avx512bw")
        && std::arch::is_x86_feature_detected!("avx512dq")
        && std::arch::is_x86_feature_detected!("avx512vl")
}

/// Whether the CPU is Intel's (`GenuineIntel`): glibc names its own x86-64 platform and
/// sets the `avx512_1` hardware capability only there (`arch_kind_intel`).
fn intel() -> bool {
    let v = std::arch::x86_64::__cpuid(0);
    [v.ebx, v.edx, v.ecx] == [b"Genu", b"ineI", b"ntel"].map(|w| u32::from_le_bytes(*w))
}

/// Whether AVX512ER and AVX512PF (Xeon Phi's) are present (CPUID leaf 7, EBX bits 27 and
/// 26); usable when AVX512CD is.
fn avx512_er_pf() -> (bool, bool) {
    let l7 = std::arch::x86_64::__cpuid_count(7, 0);
    (l7.ebx & (1 << 27) != 0, l7.ebx & (1 << 26) != 0)
}

/// glibc's legacy hardware capability `avx512_1` (`sysdeps/x86/cpu-features.c`): on an
/// Intel CPU without AVX512ER, AVX512CD, BW, DQ and VL usable.
fn hwcap_avx512_1() -> bool {
    intel() && !avx512_er_pf().0 && avx512_1()
}

/// The platform name glibc's loader puts in place of the kernel's on x86-64
/// (`sysdeps/x86/cpu-features.c`, `init_cpu_features`): on an Intel CPU, `xeon_phi` when
/// AVX512CD, ER and PF are usable, else `haswell` when AVX2, FMA, BMI1, BMI2, LZCNT,
/// MOVBE and POPCNT are; elsewhere none (the kernel's `AT_PLATFORM` stays).
fn glibc_platform() -> Option<&'static str> {
    if !intel() {
        return None;
    }
    let (er, pf) = avx512_er_pf();
    if std::arch::is_x86_feature_detected!("avx512cd") && er && pf {
        return Some("xeon_phi");
    }
    let movbe = std::arch::x86_64::__cpuid(1).ecx & (1 << 22) != 0;
    let haswell = std::arch::is_x86_feature_detected!("avx2")
        && std::arch::is_x86_feature_detected!("fma")
        && std::arch::is_x86_feature_detected!("bmi1")
        && std::arch::is_x86_feature_detected!("bmi2")
        && std::arch::is_x86_feature_detected!("lzcnt")
        && movbe
        && std::arch::is_x86_feature_detected!("popcnt");
    haswell.then_some("haswell")
}

/// `$PLATFORM`, glibc's `dl_platform`: its own name for this CPU where it has one
/// ([`glibc_platform`]: `haswell` on most Intel CPUs since 2013), else the kernel's
/// `AT_PLATFORM`, `x86_64` if absent. Computed once.
pub(crate) fn platform() -> String {
    static PLATFORM: OnceLock<String> = OnceLock::new();
    PLATFORM.get_or_init(kernel_or_glibc_platform).clone()
}

fn kernel_or_glibc_platform() -> String {
    if let Some(p) = glibc_platform() {
        return p.into();
    }
    // SAFETY: getauxval is always safe to call; AT_PLATFORM's value, when present, is
    // the address of a NUL-terminated string the kernel placed on the initial stack,
    // which lives as long as the process.
    let p = unsafe { libc::getauxval(libc::AT_PLATFORM) } as *const libc::c_char;
    if p.is_null() {
        return "x86_64".into();
    }
    // SAFETY: as above.
    unsafe { std::ffi::CStr::from_ptr(p) }
        .to_string_lossy()
        .into_owned()
}

/// glibc's `is_dst`: the length of the token `name` at the start of `s` (just after a
/// `$`), as `NAME` not followed by an identifier character or as `{NAME}`, else 0.
fn dst_len(s: &str, name: &str) -> usize {
    if let Some(rest) = s.strip_prefix('{') {
        if rest.strip_prefix(name).is_some_and(|r| r.starts_with('}')) {
            return name.len() + 2;
        }
        return 0;
    }
    match s.strip_prefix(name) {
        Some(r) if !r.starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_') => name.len(),
        _ => 0,
    }
}

/// Expands the dynamic string tokens of `s` as glibc's `_dl_dst_substitute` does:
/// `$ORIGIN` (`origin`), `$LIB`, `$PLATFORM`, each also as `${...}`; any other `$` is
/// kept. `None` when a token cannot be expanded (no origin): glibc drops that element.
pub(crate) fn expand_dst(s: &str, origin: Option<&Path>) -> Option<String> {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(k) = rest.find('$') {
        out.push_str(&rest[..k]);
        let after = &rest[k + 1..];
        let (len, repl) = if let n @ 1.. = dst_len(after, "ORIGIN") {
            (n, Some(origin?.to_string_lossy().into_owned()))
        } else if let n @ 1.. = dst_len(after, "PLATFORM") {
            (n, Some(platform()))
        } else if let n @ 1.. = dst_len(after, "LIB") {
            (n, Some(DST_LIB.to_string()))
        } else {
            (0, None)
        };
        match repl {
            Some(r) => {
                out.push_str(&r);
                rest = &after[len..];
            }
            None => {
                out.push('$');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    Some(out)
}

/// A path list split on `seps` (`:` for `DT_RPATH`/`DT_RUNPATH`, `:;` for
/// `LD_LIBRARY_PATH`), each element expanded ([`expand_dst`]): an element that cannot be
/// expanded or expands to nothing is dropped, an empty element is the current
/// directory (glibc's `fillin_rpath`).
pub(crate) fn expand_list(list: &str, seps: &str, origin: Option<&Path>) -> Vec<PathBuf> {
    list.split(|c| seps.contains(c))
        .filter_map(|e| {
            if e.is_empty() {
                return Some(PathBuf::new());
            }
            let x = expand_dst(e, origin)?;
            (!x.is_empty()).then(|| PathBuf::from(x))
        })
        .collect()
}

/// The executable, as the search reads it.
pub(crate) struct Program {
    rpath: Option<String>,
    runpath: Option<String>,
    /// Its directory (`$ORIGIN`), if known.
    origin: Option<PathBuf>,
}

impl Program {
    fn link(&self) -> Link<'_> {
        Link {
            rpath: self.rpath.as_deref(),
            runpath: self.runpath.as_deref(),
            origin: self.origin.as_deref().unwrap_or(Path::new("")),
        }
    }
}

/// The executable's `DT_RPATH`, `DT_RUNPATH` and directory, read once from its dynamic
/// section in memory (the first object `dl_iterate_phdr` reports).
pub(crate) fn program() -> &'static Program {
    static P: OnceLock<Program> = OnceLock::new();
    P.get_or_init(|| {
        let origin = std::fs::read_link("/proc/self/exe")
            .ok()
            .and_then(|p| p.parent().map(Path::to_path_buf));
        let (mut rpath, mut runpath) = (None, None);
        let mut first = true;
        crate::phdr::for_each_system_object(|o| {
            if !std::mem::take(&mut first) {
                return true;
            }
            // SAFETY: the main program's dynamic section, mapped for the process's
            // lifetime (see `read_program_paths`).
            (rpath, runpath) = unsafe { read_program_paths(o) };
            true
        });
        Program {
            rpath,
            runpath,
            origin,
        }
    })
}

/// The executable's directory (`$ORIGIN` of the program), if known.
pub(crate) fn program_origin() -> Option<PathBuf> {
    program().origin.clone()
}

/// `DT_RPATH` and `DT_RUNPATH` of a system object from its `PT_DYNAMIC` in memory.
///
/// # Safety
/// `o` describes an object mapped for the process's lifetime (the main program).
unsafe fn read_program_paths(
    o: &crate::phdr::SystemObject<'_>,
) -> (Option<String>, Option<String>) {
    const DT_NULL: i64 = 0;
    const DT_STRTAB: i64 = 5;
    const DT_RPATH: i64 = 15;
    const DT_RUNPATH: i64 = 29;
    let Some(dynamic) = o.phdrs.iter().find(|p| p.p_type == libc::PT_DYNAMIC) else {
        return (None, None);
    };
    // glibc relocates the address entries of a writable dynamic section in place
    // (`elf/get-dynamic-info.h`); a read-only one keeps link-time addresses.
    let writable = o.phdrs.iter().any(|p| {
        p.p_type == libc::PT_LOAD
            && p.p_flags & libc::PF_W != 0
            && (p.p_vaddr..p.p_vaddr + p.p_memsz).contains(&dynamic.p_vaddr)
    });
    let mut at = o.addr.wrapping_add(dynamic.p_vaddr as usize) as *const [i64; 2];
    let (mut strtab, mut rp, mut rn) = (None, None, None);
    for _ in 0..dynamic.p_memsz / 16 {
        // SAFETY: inside the mapped PT_DYNAMIC (the caller's contract).
        let [tag, val] = unsafe { *at };
        match tag {
            DT_NULL => break,
            DT_STRTAB => {
                strtab = Some(if writable {
                    val as usize
                } else {
                    o.addr.wrapping_add(val as usize)
                })
            }
            DT_RPATH => rp = Some(val as usize),
            DT_RUNPATH => rn = Some(val as usize),
            _ => {}
        }
        // SAFETY: the next entry of the same section (bounded by p_memsz).
        at = unsafe { at.add(1) };
    }
    let Some(strtab) = strtab else {
        return (None, None);
    };
    let string = |off: Option<usize>| {
        off.map(|off| {
            // SAFETY: DT_RPATH/DT_RUNPATH are offsets of NUL-terminated strings in the
            // mapped DT_STRTAB.
            unsafe { std::ffi::CStr::from_ptr((strtab + off) as *const libc::c_char) }
                .to_string_lossy()
                .into_owned()
        })
    };
    (string(rp), string(rn))
}

/// `LD_LIBRARY_PATH` as the process started with it (glibc reads it once, in `ld.so`):
/// read from `/proc/self/environ`, which holds the environment as `execve` passed it
/// whatever `setenv` did since; expanded with the executable's `$ORIGIN`. Empty for a
/// set-user-id program (`AT_SECURE`), as glibc ignores it there.
pub(crate) fn startup_library_path() -> Vec<PathBuf> {
    static DIRS: OnceLock<Vec<PathBuf>> = OnceLock::new();
    DIRS.get_or_init(|| {
        // SAFETY: getauxval is always safe to call.
        if unsafe { libc::getauxval(libc::AT_SECURE) } != 0 {
            return Vec::new();
        }
        let value = match std::fs::read("/proc/self/environ") {
            Ok(env) => env
                .split(|&b| b == 0)
                .find_map(|kv| kv.strip_prefix(b"LD_LIBRARY_PATH="))
                .map(|v| String::from_utf8_lossy(v).into_owned()),
            Err(_) => std::env::var("LD_LIBRARY_PATH").ok(),
        };
        match value {
            Some(v) if !v.is_empty() => expand_list(&v, ":;", program().origin.as_deref()),
            _ => Vec::new(),
        }
    })
    .clone()
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
    fn dynamic_string_tokens_expand_as_glibcs() {
        let o = Path::new("/o");
        let x = |s: &str| expand_dst(s, Some(o));
        assert_eq!(x("$ORIGIN/lib").as_deref(), Some("/o/lib"));
        assert_eq!(x("${ORIGIN}/lib").as_deref(), Some("/o/lib"));
        assert_eq!(x("$ORIGIN").as_deref(), Some("/o"));
        assert_eq!(x("$LIB").as_deref(), Some(DST_LIB));
        assert_eq!(x("a/$PLATFORM/b"), Some(format!("a/{}/b", platform())));
        // Not a token: followed by an identifier character, or unknown, or unclosed.
        assert_eq!(x("$ORIGINAL/x").as_deref(), Some("$ORIGINAL/x"));
        assert_eq!(x("$FOO/x").as_deref(), Some("$FOO/x"));
        assert_eq!(x("${ORIGIN/x").as_deref(), Some("${ORIGIN/x"));
        assert_eq!(x("a$").as_deref(), Some("a$"));
        // $ORIGIN without an origin: the element is dropped.
        assert_eq!(expand_dst("$ORIGIN/x", None), None);
        assert_eq!(
            expand_dst("$LIB/x", None).as_deref(),
            Some("lib/x86_64-linux-gnu/x")
        );
        // Lists: empty elements are the current directory, unexpandable ones dropped.
        assert_eq!(
            expand_list("/a::$ORIGIN/b;/c", ":", Some(o)),
            vec![
                PathBuf::from("/a"),
                PathBuf::new(),
                PathBuf::from("/o/b;/c")
            ]
        );
        assert_eq!(
            expand_list("/a;/b", ":;", None),
            vec![PathBuf::from("/a"), PathBuf::from("/b")]
        );
        assert_eq!(
            expand_list("$ORIGIN:/a", ":", None),
            vec![PathBuf::from("/a")]
        );
    }

    #[test]
    fn legacy_subdirectories_combine_as_glibcs() {
        // What glibc 2.36 tried on this kind of machine (LD_DEBUG=libs), without the
        // repeated x86_64 entries.
        assert_eq!(
            legacy_subdirectories("x86_64", false),
            [
                "tls/x86_64/x86_64",
                "tls/x86_64",
                "tls",
                "x86_64/x86_64",
                "x86_64"
            ]
        );
        let with_avx512 = legacy_subdirectories("x86_64", true);
        assert_eq!(with_avx512[0], "tls/x86_64/avx512_1/x86_64");
        assert_eq!(with_avx512.len(), 13, "{with_avx512:?}");
        assert!(with_avx512.contains(&"avx512_1".to_string()));
    }

    /// The subdirectories, `$LIB` and `$PLATFORM` agree with what this machine's
    /// `ld.so` says it searches and substitutes.
    #[test]
    fn subdirectories_and_tokens_match_this_machines_ld_so() {
        let ld_so = "/lib64/ld-linux-x86-64.so.2";
        let Ok(help) = std::process::Command::new(ld_so).arg("--help").output() else {
            return;
        };
        let help = String::from_utf8_lossy(&help.stdout);
        let searched: Vec<String> = help
            .lines()
            .skip_while(|l| !l.starts_with("Subdirectories of glibc-hwcaps"))
            .skip(1)
            .take_while(|l| l.starts_with("  "))
            .filter(|l| l.contains("searched"))
            .map(|l| format!("glibc-hwcaps/{}", l.split_whitespace().next().unwrap()))
            .collect();
        let ours: Vec<&String> = subdirectories()
            .iter()
            .filter(|s| s.starts_with("glibc-hwcaps/"))
            .collect();
        assert_eq!(ours, searched.iter().collect::<Vec<_>>(), "{help}");
        let diag = std::process::Command::new(ld_so)
            .arg("--list-diagnostics")
            .output()
            .unwrap();
        let diag = String::from_utf8_lossy(&diag.stdout);
        assert!(
            diag.contains(&format!("dl_dst_lib=\"{DST_LIB}\"")),
            "{diag}"
        );
        assert!(
            diag.contains(&format!("dl_platform=\"{}\"", platform())),
            "{diag}"
        );
    }

    /// The whole list of subdirectories, legacy ones included, in the order this
    /// machine's `ld.so` searches an `LD_LIBRARY_PATH` directory (`LD_DEBUG=libs`).
    #[test]
    fn subdirectories_are_searched_in_the_order_of_this_machines_ld_so() {
        let dir = "/nonexistent-elf-loader-probe";
        let Ok(out) = std::process::Command::new("/bin/true")
            .env("LD_LIBRARY_PATH", dir)
            .env("LD_DEBUG", "libs")
            .output()
        else {
            return;
        };
        let text = String::from_utf8_lossy(&out.stderr);
        let Some(line) = text.lines().find(|l| l.contains("search path=")) else {
            return;
        };
        let list = line.split("search path=").nth(1).unwrap();
        let list = list.split_whitespace().next().unwrap();
        let theirs: Vec<&str> = list
            .split(':')
            .map(|p| p.strip_prefix(dir).unwrap().trim_start_matches('/'))
            .collect();
        let mut ours: Vec<&str> = subdirectories().iter().map(String::as_str).collect();
        ours.push("");
        assert_eq!(ours, theirs, "{line}");
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
