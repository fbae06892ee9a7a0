//! Real C++ libraries from Debian's packages, loaded by path into two namespaces each:
//! ICU's `libicuuc` and RocksDB's `librocksdb` (installed by `cargo xtask test`). Both use
//! `std::call_once`, so they reference libstdc++'s thread-local
//! `_ZSt15__once_callable@GLIBCXX_3.4.11` and `_ZSt11__once_call@GLIBCXX_3.4.11`
//! (`DTPMOD64`/`DTPOFF64` against a versioned TLS symbol of a shared system library);
//! RocksDB also has thread-local variables of its own and background threads. Each copy
//! computes a known result, and each has its own global state.

use elf_loader::{CustomLibrary, DependencyPolicy, Namespace};
use std::ffi::{c_char, c_int, c_uchar, c_void, CStr, CString};
use std::path::PathBuf;

const LIBDIR: &str = "/usr/lib/x86_64-linux-gnu";

/// `lib<stem>.so.<version>` in the system library directory, by its shortest name (the
/// soname link: `libicuuc.so.72`, `librocksdb.so.7.8`).
fn system_library(stem: &str, package: &str) -> PathBuf {
    let prefix = format!("lib{stem}.so.");
    std::fs::read_dir(LIBDIR)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(&prefix))
        })
        .min_by_key(|p| p.as_os_str().len())
        .unwrap_or_else(|| {
            panic!(
                "no {LIBDIR}/{prefix}* (Debian package {package}; `cargo xtask test` installs it)"
            )
        })
}

/// The library references libstdc++'s thread-local once-state (what the test is about).
fn assert_references_once_callable(path: &std::path::Path) {
    let out = std::process::Command::new("readelf")
        .args(["-W", "--dyn-syms"])
        .arg(path)
        .output()
        .unwrap();
    let syms = String::from_utf8_lossy(&out.stdout);
    assert!(
        syms.lines()
            .any(|l| l.contains(" TLS ") && l.contains("_ZSt15__once_callable@GLIBCXX_3.4.11")),
        "{} does not reference std::__once_callable",
        path.display()
    );
}

macro_rules! f {
    ($lib:expr, $name:expr, $ty:ty) => {{
        let name: &str = &$name;
        // SAFETY: the library's C API function has the declared signature. The library stays loaded while the test calls it.
        unsafe { $lib.get::<$ty>(name).unwrap_or_else(|e| panic!("{e}")).into_raw() }
    }};
}

// ---------------------------------------------------------------- ICU (libicuuc)

struct Icu {
    _ns: Namespace,
    lib: CustomLibrary,
    suffix: String,
}

impl Icu {
    fn load(path: &std::path::Path, name: &str) -> Icu {
        // ICU's C functions carry the major version: u_strToUpper_72.
        let major = path
            .file_name()
            .unwrap()
            .to_str()
            .unwrap()
            .rsplit('.')
            .next()
            .unwrap()
            .to_string();
        let ns = Namespace::new(name);
        // SAFETY: loading runs the initialisers of this test's (or the machine's) libraries.
        let lib = unsafe { ns.load(path) }.unwrap();
        Icu {
            _ns: ns,
            lib,
            suffix: format!("_{major}"),
        }
    }

    fn set_default_locale(&self, locale: &str) {
        let set = f!(
            self.lib,
            format!("uloc_setDefault{}", self.suffix),
            extern "C" fn(*const c_char, *mut c_int)
        );
        let c = CString::new(locale).unwrap();
        let mut status = 0;
        set(c.as_ptr(), &mut status);
        assert!(status <= 0, "uloc_setDefault({locale}): ICU error {status}");
    }

    fn default_locale(&self) -> String {
        let get = f!(
            self.lib,
            format!("uloc_getDefault{}", self.suffix),
            extern "C" fn() -> *const c_char
        );
        // SAFETY: ICU returns a NUL-terminated string it owns.
        unsafe { CStr::from_ptr(get()) }
            .to_string_lossy()
            .into_owned()
    }

    /// `u_strToUpper` in the default locale (`locale` NULL).
    fn upper(&self, s: &str) -> String {
        let to_upper = f!(
            self.lib,
            format!("u_strToUpper{}", self.suffix),
            extern "C" fn(*mut u16, i32, *const u16, i32, *const c_char, *mut c_int) -> i32
        );
        let src: Vec<u16> = s.encode_utf16().collect();
        let mut dst = vec![0u16; src.len() * 3 + 8];
        let mut status = 0;
        let n = to_upper(
            dst.as_mut_ptr(),
            dst.len() as i32,
            src.as_ptr(),
            src.len() as i32,
            std::ptr::null(),
            &mut status,
        );
        assert!(status <= 0, "u_strToUpper: ICU error {status}");
        String::from_utf16(&dst[..n as usize]).unwrap()
    }
}

#[test]
fn icu_twice_each_copy_with_its_own_default_locale() {
    let path = system_library("icuuc", "libicu72");
    assert_references_once_callable(&path);
    let tr = Icu::load(&path, "icu-tr");
    let en = Icu::load(&path, "icu-en");
    assert_ne!(
        tr.lib.address_range(),
        en.lib.address_range(),
        "two copies of libicuuc"
    );
    // Global state: each copy has its own default locale (a static in libicuuc, set
    // under its global mutex, which ICU initialises through std::call_once).
    tr.set_default_locale("tr_TR");
    en.set_default_locale("en_US");
    assert_eq!(tr.default_locale(), "tr_TR");
    assert_eq!(en.default_locale(), "en_US");
    // Known results: Turkish upper-cases i to İ (U+0130); English to I; ß is SS in both.
    assert_eq!(tr.upper("istanbul straße"), "İSTANBUL STRASSE");
    assert_eq!(en.upper("istanbul straße"), "ISTANBUL STRASSE");
    // Many threads at once on both copies: the same answers.
    std::thread::scope(|s| {
        for t in 0..6 {
            let icu = if t % 2 == 0 { &tr } else { &en };
            let want = if t % 2 == 0 { "İ" } else { "I" };
            s.spawn(move || {
                for _ in 0..200 {
                    assert_eq!(icu.upper("i"), want);
                }
            });
        }
    });
    // Switching one copy's locale leaves the other's alone.
    tr.set_default_locale("de_DE");
    assert_eq!(tr.upper("i"), "I");
    assert_eq!(en.default_locale(), "en_US");
}

// ---------------------------------------------------------------- RocksDB

struct Rocks {
    _ns: Namespace,
    lib: CustomLibrary,
}

type Err = *mut c_char;

impl Rocks {
    fn load(path: &std::path::Path, name: &str) -> Rocks {
        // RocksDB registers its command-line flags with gflags from static constructors;
        // gflags' registry is process-global state that refuses a second registration
        // of the same flag, so each copy needs its own libgflags too (the policy's
        // per-namespace list), as each would get with dlmopen.
        let policy = DependencyPolicy {
            private_prefixes: vec!["libgflags.so".into()],
            ..DependencyPolicy::default()
        };
        let ns = Namespace::with_policy(name, policy);
        // SAFETY: loading runs the initialisers of this test's (or the machine's) libraries.
        let lib = unsafe { ns.load(path) }.unwrap();
        Rocks { _ns: ns, lib }
    }

    fn check(&self, err: Err, what: &str) {
        if !err.is_null() {
            // SAFETY: RocksDB's error strings are malloc'd, NUL-terminated.
            let msg = unsafe { CStr::from_ptr(err) }
                .to_string_lossy()
                .into_owned();
            f!(self.lib, "rocksdb_free", extern "C" fn(*mut c_void))(err as *mut c_void);
            panic!("{what}: {msg}");
        }
    }

    fn open(&self, dir: &std::path::Path) -> *mut c_void {
        let options = f!(
            self.lib,
            "rocksdb_options_create",
            extern "C" fn() -> *mut c_void
        )();
        f!(
            self.lib,
            "rocksdb_options_set_create_if_missing",
            extern "C" fn(*mut c_void, c_uchar)
        )(options, 1);
        let open = f!(
            self.lib,
            "rocksdb_open",
            extern "C" fn(*mut c_void, *const c_char, *mut Err) -> *mut c_void
        );
        let c = CString::new(dir.to_str().unwrap()).unwrap();
        let mut err: Err = std::ptr::null_mut();
        let db = open(options, c.as_ptr(), &mut err);
        self.check(err, "rocksdb_open");
        f!(
            self.lib,
            "rocksdb_options_destroy",
            extern "C" fn(*mut c_void)
        )(options);
        db
    }

    fn put(&self, db: *mut c_void, key: &str, value: &str) {
        let wo = f!(
            self.lib,
            "rocksdb_writeoptions_create",
            extern "C" fn() -> *mut c_void
        )();
        let put = f!(
            self.lib,
            "rocksdb_put",
            extern "C" fn(*mut c_void, *mut c_void, *const u8, usize, *const u8, usize, *mut Err)
        );
        let mut err: Err = std::ptr::null_mut();
        put(
            db,
            wo,
            key.as_ptr(),
            key.len(),
            value.as_ptr(),
            value.len(),
            &mut err,
        );
        self.check(err, "rocksdb_put");
        f!(
            self.lib,
            "rocksdb_writeoptions_destroy",
            extern "C" fn(*mut c_void)
        )(wo);
    }

    fn get(&self, db: *mut c_void, key: &str) -> Option<String> {
        let ro = f!(
            self.lib,
            "rocksdb_readoptions_create",
            extern "C" fn() -> *mut c_void
        )();
        let get = f!(
            self.lib,
            "rocksdb_get",
            extern "C" fn(
                *mut c_void,
                *mut c_void,
                *const u8,
                usize,
                *mut usize,
                *mut Err,
            ) -> *mut u8
        );
        let mut err: Err = std::ptr::null_mut();
        let mut len = 0usize;
        let v = get(db, ro, key.as_ptr(), key.len(), &mut len, &mut err);
        self.check(err, "rocksdb_get");
        f!(
            self.lib,
            "rocksdb_readoptions_destroy",
            extern "C" fn(*mut c_void)
        )(ro);
        if v.is_null() {
            return None;
        }
        // SAFETY: RocksDB returns a malloc'd buffer of `len` bytes.
        let s = String::from_utf8(unsafe { std::slice::from_raw_parts(v, len) }.to_vec()).unwrap();
        f!(self.lib, "rocksdb_free", extern "C" fn(*mut c_void))(v as *mut c_void);
        Some(s)
    }

    /// Flushes the memtable and compacts everything (RocksDB's background threads).
    fn flush_and_compact(&self, db: *mut c_void) {
        let fo = f!(
            self.lib,
            "rocksdb_flushoptions_create",
            extern "C" fn() -> *mut c_void
        )();
        let mut err: Err = std::ptr::null_mut();
        f!(
            self.lib,
            "rocksdb_flush",
            extern "C" fn(*mut c_void, *mut c_void, *mut Err)
        )(db, fo, &mut err);
        self.check(err, "rocksdb_flush");
        f!(
            self.lib,
            "rocksdb_flushoptions_destroy",
            extern "C" fn(*mut c_void)
        )(fo);
        f!(
            self.lib,
            "rocksdb_compact_range",
            extern "C" fn(*mut c_void, *const u8, usize, *const u8, usize)
        )(db, std::ptr::null(), 0, std::ptr::null(), 0);
    }

    /// (number of keys, sum of the values' numbers) over an iterator.
    fn scan(&self, db: *mut c_void) -> (usize, u64) {
        let ro = f!(
            self.lib,
            "rocksdb_readoptions_create",
            extern "C" fn() -> *mut c_void
        )();
        let it = f!(
            self.lib,
            "rocksdb_create_iterator",
            extern "C" fn(*mut c_void, *mut c_void) -> *mut c_void
        )(db, ro);
        let first = f!(
            self.lib,
            "rocksdb_iter_seek_to_first",
            extern "C" fn(*mut c_void)
        );
        let valid = f!(
            self.lib,
            "rocksdb_iter_valid",
            extern "C" fn(*mut c_void) -> c_uchar
        );
        let next = f!(self.lib, "rocksdb_iter_next", extern "C" fn(*mut c_void));
        let value = f!(
            self.lib,
            "rocksdb_iter_value",
            extern "C" fn(*mut c_void, *mut usize) -> *const u8
        );
        let (mut n, mut sum) = (0, 0u64);
        first(it);
        while valid(it) != 0 {
            let mut len = 0;
            let v = value(it, &mut len);
            // SAFETY: the iterator's current value, `len` bytes.
            let s = std::str::from_utf8(unsafe { std::slice::from_raw_parts(v, len) }).unwrap();
            sum += s.parse::<u64>().unwrap();
            n += 1;
            next(it);
        }
        f!(self.lib, "rocksdb_iter_destroy", extern "C" fn(*mut c_void))(it);
        f!(
            self.lib,
            "rocksdb_readoptions_destroy",
            extern "C" fn(*mut c_void)
        )(ro);
        (n, sum)
    }

    /// The calling thread's perf counter `metric` after `rocksdb_perfcontext_reset` and
    /// one `get` (thread-local state of this copy).
    fn perf_after_get(&self, db: *mut c_void, key: &str, metric: c_int) -> u64 {
        let ctx = f!(
            self.lib,
            "rocksdb_perfcontext_create",
            extern "C" fn() -> *mut c_void
        )();
        f!(
            self.lib,
            "rocksdb_perfcontext_reset",
            extern "C" fn(*mut c_void)
        )(ctx);
        assert!(self.get(db, key).is_some());
        let v = f!(
            self.lib,
            "rocksdb_perfcontext_metric",
            extern "C" fn(*mut c_void, c_int) -> u64
        )(ctx, metric);
        f!(
            self.lib,
            "rocksdb_perfcontext_destroy",
            extern "C" fn(*mut c_void)
        )(ctx);
        v
    }

    fn close(&self, db: *mut c_void) {
        f!(self.lib, "rocksdb_close", extern "C" fn(*mut c_void))(db);
    }
}

/// `rocksdb_perfcontext_metric` ids and `rocksdb_set_perf_level` levels (rocksdb/c.h).
const ROCKSDB_DISABLE: c_int = 1;
const ROCKSDB_ENABLE_COUNT: c_int = 2;
const ROCKSDB_GET_READ_BYTES: c_int = 7;

#[test]
fn rocksdb_twice_each_copy_with_its_own_env_and_thread_local_perf_state() {
    let path = system_library("rocksdb", "librocksdb7.8");
    assert_references_once_callable(&path);
    let tmp = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("elf-loader-rocksdb");
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp).unwrap();
    let copies = [
        Rocks::load(&path, "rocksdb-a"),
        Rocks::load(&path, "rocksdb-b"),
    ];

    // Global state: each copy's default Env (a singleton) has its own thread pools.
    let mut envs = Vec::new();
    for (i, r) in copies.iter().enumerate() {
        let env = f!(
            r.lib,
            "rocksdb_create_default_env",
            extern "C" fn() -> *mut c_void
        )();
        f!(
            r.lib,
            "rocksdb_env_set_background_threads",
            extern "C" fn(*mut c_void, c_int)
        )(env, 2 + i as c_int);
        envs.push(env);
    }
    for (i, r) in copies.iter().enumerate() {
        let get = f!(
            r.lib,
            "rocksdb_env_get_background_threads",
            extern "C" fn(*mut c_void) -> c_int
        );
        assert_eq!(get(envs[i]), 2 + i as c_int, "copy {i}'s default Env");
    }

    // Known results: 1,000 keys written from 4 threads, flushed, compacted on the
    // background threads, read back by an iterator and by gets from 4 threads.
    let dbs: Vec<*mut c_void> = copies
        .iter()
        .enumerate()
        .map(|(i, r)| r.open(&tmp.join(format!("db{i}"))))
        .collect();
    let dbs_addr: Vec<usize> = dbs.iter().map(|&d| d as usize).collect();
    std::thread::scope(|s| {
        for (i, r) in copies.iter().enumerate() {
            for t in 0..4 {
                let db = dbs_addr[i];
                s.spawn(move || {
                    for k in (t..1000).step_by(4) {
                        r.put(
                            db as *mut c_void,
                            &format!("key{k:04}"),
                            &(k * (i + 1)).to_string(),
                        );
                    }
                });
            }
        }
    });
    for (i, r) in copies.iter().enumerate() {
        r.flush_and_compact(dbs[i]);
        let expected: u64 = (0..1000u64).map(|k| k * (i as u64 + 1)).sum();
        assert_eq!(r.scan(dbs[i]), (1000, expected), "copy {i}'s database");
    }
    std::thread::scope(|s| {
        for (i, r) in copies.iter().enumerate() {
            let db = dbs_addr[i];
            s.spawn(move || {
                for k in (0..1000).step_by(7) {
                    let want = (k * (i + 1)).to_string();
                    assert_eq!(r.get(db as *mut c_void, &format!("key{k:04}")), Some(want));
                }
            });
        }
    });

    // Thread-local state of each copy (RocksDB's own thread_local perf level and
    // context): counting enabled in copy B only, on the same thread.
    f!(
        copies[0].lib,
        "rocksdb_set_perf_level",
        extern "C" fn(c_int)
    )(ROCKSDB_DISABLE);
    f!(
        copies[1].lib,
        "rocksdb_set_perf_level",
        extern "C" fn(c_int)
    )(ROCKSDB_ENABLE_COUNT);
    let a = copies[0].perf_after_get(dbs[0], "key0999", ROCKSDB_GET_READ_BYTES);
    let b = copies[1].perf_after_get(dbs[1], "key0999", ROCKSDB_GET_READ_BYTES);
    assert_eq!(a, 0, "copy A counts nothing (its perf level is disabled)");
    assert_eq!(b, "1998".len() as u64, "copy B counted the bytes it read");

    for (i, r) in copies.iter().enumerate() {
        r.close(dbs[i]);
        f!(r.lib, "rocksdb_env_destroy", extern "C" fn(*mut c_void))(envs[i]);
    }
    // RocksDB is not made to be unloaded (its ThreadLocalPtr keeps a pthread key whose
    // destructor runs RocksDB code in every thread that used a database, whenever that
    // thread exits), under glibc or here: the copies stay loaded until the process exits.
    std::mem::forget(copies);
    let _ = std::fs::remove_dir_all(&tmp);
}
