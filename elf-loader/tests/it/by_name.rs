//! Loading by bare name, as `dlopen` searches: `Namespace::load("libz.so.1")` finds
//! Debian's zlib through `/etc/ld.so.cache` (the file glibc's `dlopen` opens) and loads a
//! copy per namespace; a name found nowhere is an error listing everything searched;
//! the C runtime's libraries are refused by name. In a child process started with
//! `LD_LIBRARY_PATH` (glibc reads it at start-up): a directory there comes before the
//! cache. From custom code, `dlopen` by name searches the calling library's path, and a
//! library linked with `-z nodeflib` does not search the cache or the default
//! directories, as glibc (checked against glibc in the child).

use crate::common;

use elf_loader::{Namespace, SymbolProvider};
use std::ffi::{c_char, c_int, c_ulong, c_void, CStr, CString};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::Command;

type Compress = extern "C" fn(*mut u8, *mut c_ulong, *const u8, c_ulong) -> c_int;

/// The opener fixture with `DF_1_NODEFLIB` in `DT_FLAGS_1` (GNU ld ignores
/// `-z nodeflib` for shared objects: the entry is written into a spare slot).
fn nodeflib_opener() -> std::path::PathBuf {
    let so = common::build_so(
        "opener_spare",
        &["opener.c"],
        &["-Wl,--spare-dynamic-tags=2"],
    );
    let mut data = std::fs::read(&so).unwrap();
    let info = elf_loader::elf::ElfInfo::parse(&so, &data).unwrap();
    let d = info.dynamic;
    let at = (0..d.filesz / 16)
        .map(|i| (d.offset + 16 * i) as usize)
        .find(|&o| data[o..o + 8] == [0; 8])
        .unwrap();
    data[at..at + 8].copy_from_slice(&0x6fff_fffbu64.to_le_bytes());
    data[at + 8..at + 16].copy_from_slice(&0x800u64.to_le_bytes());
    let out = common::out_dir().join("libopener_nodeflib.so");
    // Written aside (a name of this call's own: tests of this process run it at once
    // too) and renamed: tests running at once may be reading it.
    static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tmp = common::out_dir().join(format!(
        "libopener_nodeflib.so.{}.{call}",
        std::process::id()
    ));
    std::fs::write(&tmp, data).unwrap();
    std::fs::rename(&tmp, &out).unwrap();
    assert!(
        elf_loader::elf::ElfInfo::parse(&out, &std::fs::read(&out).unwrap())
            .unwrap()
            .nodeflib
    );
    out
}

/// The public head of glibc's `struct link_map`.
#[repr(C)]
struct LinkMap {
    l_addr: usize,
    l_name: *const c_char,
}

/// The file the system's `dlopen` opens for `name` (device, inode).
fn system_file(name: &str) -> (u64, u64) {
    let c = CString::new(name).unwrap();
    // SAFETY: plain dlopen and dlinfo(RTLD_DI_LINKMAP) of the handle.
    let path = unsafe {
        let h = libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL);
        assert!(!h.is_null(), "the system finds {name}");
        let mut lm: *mut LinkMap = std::ptr::null_mut();
        assert_eq!(
            libc::dlinfo(h, libc::RTLD_DI_LINKMAP, (&raw mut lm).cast()),
            0
        );
        CStr::from_ptr((*lm).l_name).to_str().unwrap().to_string()
    };
    let m = std::fs::metadata(path).unwrap();
    (m.dev(), m.ino())
}

#[test]
fn libz_by_bare_name_twice() {
    let copies: Vec<_> = ["a", "b"]
        .iter()
        .map(|n| {
            let ns = Namespace::new(&format!("byname-{n}"));
            // SAFETY: loading runs the initialisers of this test's (or the machine's) libraries.
            let lib = unsafe { ns.load("libz.so.1") }.unwrap_or_else(|e| panic!("{e}"));
            (ns, lib)
        })
        .collect();
    let paths: Vec<_> = copies
        .iter()
        .map(|(ns, _)| ns.library_paths()[0].clone())
        .collect();
    assert!(paths[0].is_absolute(), "{paths:?}");
    let m = std::fs::metadata(&paths[0]).unwrap();
    assert_eq!(
        (m.dev(), m.ino()),
        system_file("libz.so.1"),
        "the file glibc's dlopen opens"
    );
    let (a, b) = (&copies[0].1, &copies[1].1);
    assert_ne!(a.sym("compress"), b.sym("compress"), "two copies");
    for lib in [a, b] {
        // SAFETY: zlib's `int compress(Bytef *, uLongf *, const Bytef *, uLong)` and
        // `int uncompress(...)` (the same signature).
        let (compress, uncompress) = unsafe {
            (
                lib.get::<Compress>("compress").unwrap().into_raw(),
                lib.get::<Compress>("uncompress").unwrap().into_raw(),
            )
        };
        let input = b"by bare name, by bare name, by bare name".repeat(20);
        let mut packed = vec![0u8; 1024];
        let mut n = packed.len() as c_ulong;
        assert_eq!(
            compress(
                packed.as_mut_ptr(),
                &mut n,
                input.as_ptr(),
                input.len() as c_ulong
            ),
            0
        );
        assert!((n as usize) < input.len());
        let mut out = vec![0u8; input.len()];
        let mut m = out.len() as c_ulong;
        assert_eq!(uncompress(out.as_mut_ptr(), &mut m, packed.as_ptr(), n), 0);
        assert_eq!(out, input);
    }
}

#[test]
fn a_name_found_nowhere_lists_what_was_searched() {
    // SAFETY: loading runs the initialisers of this test's (or the machine's) libraries.
    let e = unsafe { Namespace::new("byname-missing").load("libno_such_library_anywhere.so.7") }
        .err()
        .expect("not found")
        .to_string();
    for part in [
        "libno_such_library_anywhere.so.7: cannot open shared object file",
        "searched:",
        "/etc/ld.so.cache",
        "/lib/x86_64-linux-gnu",
        "/usr/lib/x86_64-linux-gnu",
        ":/lib:",
        "/usr/lib",
    ] {
        assert!(e.contains(part), "{part:?} in {e}");
    }
    // SAFETY: loading runs the initialisers of this test's (or the machine's) libraries.
    let e = unsafe { Namespace::new("byname-libc").load("libc.so.6") }
        .err()
        .expect("refused")
        .to_string();
    assert!(e.contains("libc.so.6") && e.contains("C runtime"), "{e}");
}

/// dlopen(name) from custom code: found through the cache (zlib, shared through the
/// system loader by the default policy), or not searched there under `-z nodeflib`.
#[test]
fn dlopen_by_name_from_custom_code() {
    let so = common::build_so("opener", &["opener.c"], &[]);
    // SAFETY: loading runs the initialisers of this test's (or the machine's) libraries.
    let lib = unsafe { Namespace::new("opener").load(&so) }.unwrap();
    // SAFETY: `void *open_name(const char *)` in opener.c.
    let open: extern "C" fn(*const c_char) -> *mut c_void = unsafe {
        lib.get::<extern "C" fn(*const c_char) -> *mut c_void>("open_name")
            .unwrap()
            .into_raw()
    };
    assert!(!open(c"libz.so.1".as_ptr()).is_null());
    let nodeflib = nodeflib_opener();
    // SAFETY: loading runs the initialisers of this test's (or the machine's) libraries.
    let lib = unsafe { Namespace::new("opener-nodeflib").load(&nodeflib) }.unwrap();
    type Open = extern "C" fn(*const c_char) -> *mut c_void;
    type Error = extern "C" fn() -> *const c_char;
    // SAFETY: as above, and `const char *open_error(void)`.
    let (open, error) = unsafe {
        (
            lib.get::<Open>("open_name").unwrap(),
            lib.get::<Error>("open_error").unwrap(),
        )
    };
    assert!(
        open(c"libz.so.1".as_ptr()).is_null(),
        "no cache, no default directories"
    );
    // SAFETY: dlerror's message.
    let msg = unsafe { CStr::from_ptr(error()) }
        .to_string_lossy()
        .into_owned();
    assert!(
        msg.contains("libz.so.1") && msg.contains("DF_1_NODEFLIB"),
        "{msg}"
    );
}

/// The checks that need `LD_LIBRARY_PATH` set at start-up (or a process where zlib has
/// not been opened by the system loader yet) run in a child process.
#[test]
fn in_a_child_process_with_ld_library_path() {
    if std::env::var_os("BY_NAME_CHILD").is_some() {
        return child();
    }
    let dir = common::out_dir().join("by-name-ldpath");
    std::fs::create_dir_all(&dir).unwrap();
    // A library called libz.so.1 that is not zlib (the counter fixture).
    let counter = common::build_so("counter", &["counter.c"], &[]);
    std::fs::copy(&counter, dir.join("libz.so.1")).unwrap();
    nodeflib_opener();
    let ld = match std::env::var("LD_LIBRARY_PATH") {
        Ok(old) => format!("{}:{old}", dir.display()),
        Err(_) => dir.display().to_string(),
    };
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "by_name::in_a_child_process_with_ld_library_path",
            "--nocapture",
        ])
        .env("BY_NAME_CHILD", "1")
        .env("BY_NAME_DIR", &dir)
        .env("LD_LIBRARY_PATH", ld)
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && text.contains("1 passed"), "{text}");
}

fn child() {
    let dir = std::path::PathBuf::from(std::env::var("BY_NAME_DIR").unwrap());
    // glibc: a -z nodeflib library's dlopen("libz.so.1") searches neither the cache
    // nor the default directories (zlib is not loaded in this process yet).
    let opener = common::out_dir().join("libopener_nodeflib.so");
    let c = CString::new(opener.to_str().unwrap()).unwrap();
    // SAFETY: plain dlopen/dlsym of the fixture; `void *open_name(const char *)`.
    let sys_open: extern "C" fn(*const c_char) -> *mut c_void = unsafe {
        let h = libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL);
        assert!(!h.is_null());
        std::mem::transmute(libc::dlsym(h, c"open_name".as_ptr()))
    };
    // With LD_LIBRARY_PATH holding our libz.so.1, glibc finds that one: drop the
    // directory from the comparison by asking for a name only the cache knows.
    assert!(
        sys_open(c"libbz2.so.1.0".as_ptr()).is_null(),
        "glibc: nodeflib skips the cache"
    );
    assert!(
        !sys_open(c"libz.so.1".as_ptr()).is_null(),
        "glibc: LD_LIBRARY_PATH is searched"
    );
    // Ours, from the API: LD_LIBRARY_PATH before the cache.
    let ns = Namespace::new("byname-ldpath");
    // SAFETY: loading runs the initialisers of this test's (or the machine's) libraries.
    let lib = unsafe { ns.load("libz.so.1") }.unwrap();
    assert_eq!(ns.library_paths()[0], dir.join("libz.so.1"));
    assert!(lib.sym("bump").is_some(), "the counter fixture, not zlib");
    assert!(
        Path::new("/usr/lib/x86_64-linux-gnu/libz.so.1").exists()
            || Path::new("/lib/x86_64-linux-gnu/libz.so.1").exists()
    );
}
