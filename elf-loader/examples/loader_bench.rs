//! Measurement driver for `cargo xtask bench loader` (run by xtask, one measurement per
//! child process where the system loader keeps state: a second `dlopen` of the same
//! file costs nothing, and `dlmopen` namespaces cannot be freed).
//!
//! Each mode prints `key=value` lines:
//! - `load ours|dlopen|dlmopen LIB [--deps-loaded]`: one load (map + relocate + init) of
//!   LIB: `us=` (wall clock), `cpu_us=` (CPU time of the loading thread), `faults=`
//!   (minor faults). With `--deps-loaded`, LIB's `DT_NEEDED` libraries are loaded by the
//!   system loader first (untimed), as in a process that already uses them: both loaders
//!   then find them loaded, and neither searches for them.
//! - `sym LIB`: `sym_ns=` (ours) and `sym_ns_dlsym=` over every exported function name.
//! - `rss LIB N`: memory added per extra loaded (not initialised) copy.
//! - `max ours|dlmopen LIB CAP`: loads and initialises CAP copies of libpython,
//!   printing `copies=` after each one that works.
//! - `tls`: `tls_ns=` for a TLS access in a custom-loaded library, `tls_ns_system=` for
//!   the same library loaded by the system (general dynamic; `tls_ld_*` local dynamic,
//!   `tls_desc_*`/`tls_desc_ld_*` through TLS descriptors), with `*_ratio_paired` (the
//!   median of the per-round ratios) and `*_ratio_p10`/`*_ratio_p90`.

use elf_loader::{CustomLibrary, Namespace, SymbolProvider};
use std::ffi::{c_char, c_int, c_void, CString};
use std::hint::black_box;
use std::time::Instant;

extern "C" {
    fn dlmopen(lmid: libc::c_long, file: *const c_char, flags: c_int) -> *mut c_void;
}
const LM_ID_NEWLM: libc::c_long = -1;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    match a.as_slice() {
        ["load", how, lib] => load(how, lib),
        ["load", how, lib, "--deps-loaded"] => {
            preload_needed(lib);
            load(how, lib)
        }
        ["sym", lib] => sym(lib),
        ["rss", lib, n] => rss(lib, n.parse().expect("count")),
        ["max", how, lib, cap] => max(how, lib, cap.parse().expect("cap")),
        ["tls"] => tls(),
        _ => {
            eprintln!("usage: loader_bench load|sym|rss|max|tls ...");
            std::process::exit(2);
        }
    }
}

fn cstr(s: &str) -> CString {
    CString::new(s).expect("no NUL")
}

fn dl_error() -> String {
    // SAFETY: dlerror returns NULL or a NUL-terminated string.
    let e = unsafe { libc::dlerror() };
    if e.is_null() {
        return "unknown".into();
    }
    // SAFETY: as above.
    unsafe { std::ffi::CStr::from_ptr(e) }
        .to_string_lossy()
        .into_owned()
}

/// What one load cost: wall-clock time, CPU time of the loading thread (not inflated
/// when other processes preempt it) and minor page faults.
struct Cost {
    wall: Instant,
    cpu_ns: u64,
    faults: i64,
}

impl Cost {
    fn start() -> Cost {
        let faults = minflt();
        let cpu_ns = thread_cpu_ns();
        Cost {
            wall: Instant::now(),
            cpu_ns,
            faults,
        }
    }

    /// Takes the readings, then prints them (printing is not measured).
    fn finish(self) {
        let us = self.wall.elapsed().as_secs_f64() * 1e6;
        let cpu_us = (thread_cpu_ns() - self.cpu_ns) as f64 / 1e3;
        let faults = minflt() - self.faults;
        println!("us={us}");
        println!("cpu_us={cpu_us}");
        println!("faults={faults}");
    }
}

fn thread_cpu_ns() -> u64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec we pass.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

fn minflt() -> i64 {
    // SAFETY: getrusage fills the zeroed struct we pass.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) };
    ru.ru_minflt
}

/// Loads `lib`'s `DT_NEEDED` libraries with the system loader (by name, as a process
/// linked against them would have them).
fn preload_needed(lib: &str) {
    // Mapped, not read: reading the whole library would stream it through the caches
    // and leave freed memory behind, which changes what the measured load costs.
    let file = std::fs::File::open(lib).expect("open library");
    let len = file.metadata().expect("stat").len() as usize;
    // SAFETY: a private read-only mapping of the whole file, unmapped below.
    let map = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ,
            libc::MAP_PRIVATE,
            std::os::fd::AsRawFd::as_raw_fd(&file),
            0,
        )
    };
    assert_ne!(map, libc::MAP_FAILED, "mmap {lib}");
    // SAFETY: the mapping holds len readable bytes until munmap.
    let data = unsafe { std::slice::from_raw_parts(map as *const u8, len) };
    let needed = elf_loader::elf::ElfInfo::parse(std::path::Path::new(lib), data)
        .expect("parse")
        .needed;
    // SAFETY: our mapping; `data` is not used any more.
    unsafe { libc::munmap(map, len) };
    for name in &needed {
        // SAFETY: a system library the measured one needs (its initialisers run anyway
        // when the library is loaded); kept loaded for the rest of the process.
        let l = unsafe {
            libloading::os::unix::Library::open(
                Some(name.as_str()),
                libc::RTLD_NOW | libc::RTLD_LOCAL,
            )
        }
        .unwrap_or_else(|e| panic!("dlopen {name}: {e}"));
        std::mem::forget(l);
    }
}

fn load(how: &str, lib: &str) {
    let c = cstr(lib);
    let cost = Cost::start();
    match how {
        "ours" => {
            // SAFETY: loading runs the initialisers of this test's (or the machine's) libraries.
            let l = unsafe { Namespace::new("bench").load(lib) }.expect("load");
            cost.finish();
            std::mem::forget(l);
        }
        "dlopen" => {
            // The peer measured: a raw dlopen, as a C program calls it (not libloading,
            // whose error handling would be counted too).
            // SAFETY: plain dlopen.
            let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
            cost.finish();
            assert!(!h.is_null(), "dlopen: {}", dl_error());
        }
        "dlmopen" => {
            // SAFETY: plain dlmopen into a new namespace.
            let h = unsafe { dlmopen(LM_ID_NEWLM, c.as_ptr(), libc::RTLD_NOW) };
            cost.finish();
            assert!(!h.is_null(), "dlmopen: {}", dl_error());
        }
        other => panic!("unknown loader {other}"),
    }
}

/// Names of the exported functions of `lib` (from its dynamic symbol table).
fn exported_names(lib: &str) -> Vec<String> {
    let data = std::fs::read(lib).expect("read library");
    let info = elf_loader::elf::ElfInfo::parse(std::path::Path::new(lib), &data).expect("parse");
    (1..info.nsyms)
        .filter_map(|i| {
            let s = info.file_sym(&data, i)?;
            let wanted = s.is_defined()
                && s.kind() == elf_loader::elf::consts::STT_FUNC
                && s.bind() == elf_loader::elf::consts::STB_GLOBAL;
            wanted.then_some(())?;
            Some(String::from_utf8_lossy(info.file_str(&data, s.name)?).into_owned())
        })
        .collect()
}

fn sym(lib: &str) {
    let names = exported_names(lib);
    let cnames: Vec<CString> = names.iter().map(|n| cstr(n)).collect();
    // SAFETY: loading runs the initialisers of this test's (or the machine's) libraries.
    let ours = unsafe { Namespace::new("bench").load(lib) }.expect("load");
    let c = cstr(lib);
    // The peer measured below is a raw dlsym (libloading's `get` would add its dlerror
    // handling to each lookup); the handle is a raw dlopen's for the same reason.
    // SAFETY: plain dlopen.
    let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    assert!(!h.is_null(), "dlopen: {}", dl_error());
    let rounds = 20;
    let mut best_ours = f64::MAX;
    let mut best_sys = f64::MAX;
    for _ in 0..rounds {
        let t = Instant::now();
        for n in &names {
            black_box(ours.sym(black_box(n)).expect("found"));
        }
        best_ours = best_ours.min(t.elapsed().as_secs_f64() * 1e9 / names.len() as f64);
        let t = Instant::now();
        for n in &cnames {
            // SAFETY: valid handle and name.
            let p = unsafe { libc::dlsym(h, black_box(n.as_ptr())) };
            black_box(p);
        }
        best_sys = best_sys.min(t.elapsed().as_secs_f64() * 1e9 / names.len() as f64);
    }
    println!("names={}", names.len());
    println!("sym_ns={best_ours}");
    println!("sym_ns_dlsym={best_sys}");
    std::mem::forget(ours);
}

/// (private, resident) bytes of the process, from smaps_rollup.
fn memory() -> (f64, f64) {
    let t = std::fs::read_to_string("/proc/self/smaps_rollup").expect("smaps_rollup");
    let kb = |key: &str| -> f64 {
        t.lines()
            .find(|l| l.starts_with(key))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
            * 1024.0
    };
    (kb("Private_Clean:") + kb("Private_Dirty:"), kb("Rss:"))
}

fn rss(lib: &str, n: usize) {
    let data = std::fs::read(lib).expect("read library");
    let info = elf_loader::elf::ElfInfo::parse(std::path::Path::new(lib), &data).expect("parse");
    drop(data);
    let writable: u64 = info
        .loads
        .iter()
        .filter(|l| l.flags & elf_loader::elf::consts::PF_W != 0)
        .map(|l| l.memsz)
        .sum();
    let writable_file: u64 = info
        .loads
        .iter()
        .filter(|l| l.flags & elf_loader::elf::consts::PF_W != 0)
        .map(|l| l.filesz)
        .sum();
    // A first copy, so that every read-only page is already mapped once.
    // SAFETY: loading runs the initialisers of this test's (or the machine's) libraries.
    let mut keep: Vec<CustomLibrary> =
        vec![unsafe { Namespace::new("first").load(lib) }.expect("load")];
    let (p0, r0) = memory();
    for i in 0..n {
        // SAFETY: loading runs the initialisers of this test's (or the machine's) libraries.
        keep.push(unsafe { Namespace::new(&format!("copy{i}")).load(lib) }.expect("load"));
    }
    let (p1, r1) = memory();
    let mb = 1024.0 * 1024.0;
    println!("writable_load_mb={}", writable as f64 / mb);
    println!("writable_file_mb={}", writable_file as f64 / mb);
    println!("rss_per_copy_mb={}", (p1 - p0) / n as f64 / mb);
    println!("rss_resident_per_copy_mb={}", (r1 - r0) / n as f64 / mb);
    std::mem::forget(keep);
}

type InitFn = unsafe extern "C" fn(c_int);
type RunFn = unsafe extern "C" fn(*const c_char) -> c_int;
type SaveFn = unsafe extern "C" fn() -> *mut c_void;
type RestoreFn = unsafe extern "C" fn(*mut c_void);

fn max(how: &str, lib: &str, cap: usize) {
    let code = cstr("x = sum(range(100))\nimport math\nassert math.sqrt(x) > 70");
    let mut keep = Vec::new();
    for i in 0..cap {
        let (init, run, save, restore): (InitFn, RunFn, SaveFn, RestoreFn) = match how {
            "ours" => {
                // SAFETY: loading runs the initialisers of this test's (or the machine's) libraries.
                let l = match unsafe { Namespace::new(&format!("py{i}")).load(lib) } {
                    Ok(l) => l,
                    Err(e) => {
                        println!("stopped={e}");
                        return;
                    }
                };
                // SAFETY: the C API functions have these signatures; detached from the
                // borrow of `l`, which `keep` holds until the copies are used no more.
                let r = unsafe {
                    (
                        l.get::<InitFn>("Py_InitializeEx")
                            .expect("C API")
                            .into_raw(),
                        l.get::<RunFn>("PyRun_SimpleString")
                            .expect("C API")
                            .into_raw(),
                        l.get::<SaveFn>("PyEval_SaveThread")
                            .expect("C API")
                            .into_raw(),
                        l.get::<RestoreFn>("PyEval_RestoreThread")
                            .expect("C API")
                            .into_raw(),
                    )
                };
                keep.push(l);
                r
            }
            "dlmopen" => {
                let c = cstr(lib);
                // SAFETY: plain dlmopen.
                let h = unsafe { dlmopen(LM_ID_NEWLM, c.as_ptr(), libc::RTLD_NOW) };
                if h.is_null() {
                    println!("stopped={}", dl_error());
                    return;
                }
                let f = |n: &str| {
                    let c = cstr(n);
                    // SAFETY: valid handle and name.
                    let p = unsafe { libc::dlsym(h, c.as_ptr()) };
                    assert!(!p.is_null(), "{n}");
                    p as usize
                };
                // SAFETY: as above.
                unsafe {
                    (
                        std::mem::transmute::<usize, InitFn>(f("Py_InitializeEx")),
                        std::mem::transmute::<usize, RunFn>(f("PyRun_SimpleString")),
                        std::mem::transmute::<usize, SaveFn>(f("PyEval_SaveThread")),
                        std::mem::transmute::<usize, RestoreFn>(f("PyEval_RestoreThread")),
                    )
                }
            }
            other => panic!("unknown loader {other}"),
        };
        // SAFETY: a fresh copy: initialise it, run code, release its GIL.
        unsafe {
            init(0);
            let rc = run(code.as_ptr());
            if rc != 0 {
                println!("stopped=copy {i} failed to run code");
                return;
            }
            let ts = save();
            black_box(restore);
            black_box(ts);
        }
        println!("copies={}", i + 1);
    }
    std::mem::forget(keep);
}

/// Nanoseconds per call of `f`, over `iters` calls. One function (not inlined) times
/// both loaders' copies, so that the calling loop's code and its placement (which moves
/// such small figures by a fraction of a nanosecond) are the same for both.
#[inline(never)]
fn time_calls(f: extern "C" fn() -> c_int, iters: usize) -> f64 {
    let f = black_box(f);
    let t = Instant::now();
    for _ in 0..iters {
        black_box(f());
    }
    t.elapsed().as_secs_f64() * 1e9 / iters as f64
}

fn tls() {
    let dir = std::env::temp_dir().join("elf-loader-bench");
    std::fs::create_dir_all(&dir).expect("temp dir");
    let src = dir.join("tlsbench.c");
    std::fs::write(
        &src,
        "__thread int tls_counter;\nstatic __thread int tls_local;\n\
         int tls_bump(void) { return ++tls_counter; }\n\
         int tls_bump_ld(void) { return ++tls_local; }\n",
    )
    .expect("write source");
    // The default TLS dialect (__tls_get_addr) and TLS descriptors (gnu2).
    let build = |name: &str, extra: &[&str]| {
        let so = dir.join(name);
        let status = cc::Build::new()
            .cargo_metadata(false)
            .cargo_warnings(false)
            .target("x86_64-unknown-linux-gnu")
            .host("x86_64-unknown-linux-gnu")
            .opt_level(2)
            .get_compiler()
            .to_command()
            .args(["-shared", "-fPIC"])
            .args(extra)
            .arg("-o")
            .arg(&so)
            .arg(&src)
            .status()
            .expect("run cc");
        assert!(status.success(), "cc failed");
        so
    };
    let gd = build("libtlsbench.so", &[]);
    let desc = build("libtlsbench_desc.so", &["-mtls-dialect=gnu2"]);
    let ns = Namespace::new("tls");
    // SAFETY: loading runs the initialisers of this test's (or the machine's) libraries.
    let ours = [
        unsafe { ns.load(&gd) }.expect("load"),
        unsafe { ns.load(&desc) }.expect("load"),
    ];
    let sys: Vec<libloading::os::unix::Library> = [&gd, &desc]
        .iter()
        .map(|p| {
            // SAFETY: the benchmark's own library, built above (no initialisers).
            unsafe { libloading::os::unix::Library::open(Some(p.as_os_str()), libc::RTLD_NOW) }
                .unwrap_or_else(|e| panic!("dlopen {}: {e}", p.display()))
        })
        .collect();
    type Bump = extern "C" fn() -> c_int;
    let ours_fn = |k: usize, name: &str| -> Bump {
        // SAFETY: `int f(void)` in the source above; `ours` outlives the measurements.
        unsafe { ours[k].get::<Bump>(name).expect("sym").into_raw() }
    };
    let sys_fn = |k: usize, name: &str| -> Bump {
        // SAFETY: `int f(void)` in the source above; `sys` outlives the measurements.
        unsafe { *sys[k].get::<Bump>(name.as_bytes()).expect("dlsym") }
    };
    // (key, ours, system): general dynamic and local dynamic through __tls_get_addr,
    // and the same two through TLS descriptors.
    let cases: Vec<(&str, Bump, Bump)> = [
        ("tls", 0, "tls_bump"),
        ("tls_ld", 0, "tls_bump_ld"),
        ("tls_desc", 1, "tls_bump"),
        ("tls_desc_ld", 1, "tls_bump_ld"),
    ]
    .into_iter()
    .map(|(key, k, name)| (key, ours_fn(k, name), sys_fn(k, name)))
    .collect();
    // Rounds of 1M calls each, ours and the system's alternating (which goes first
    // changes every round) and the cases rotating, so that drifting machine noise hits
    // both alike; medians, and the median of the per-round ratios with its spread.
    let rounds = 21;
    let iters = 1_000_000;
    let mut t: Vec<(Vec<f64>, Vec<f64>)> = vec![(Vec::new(), Vec::new()); cases.len()];
    for round in 0..rounds {
        for i in 0..cases.len() {
            let c = (i + round) % cases.len();
            let (_, o, s) = cases[c];
            if round % 2 == 0 {
                t[c].0.push(time_calls(o, iters));
                t[c].1.push(time_calls(s, iters));
            } else {
                t[c].1.push(time_calls(s, iters));
                t[c].0.push(time_calls(o, iters));
            }
        }
    }
    let sorted = |mut v: Vec<f64>| {
        v.sort_by(|a, b| a.total_cmp(b));
        v
    };
    for (c, (key, _, _)) in cases.iter().enumerate() {
        let (o, s) = &t[c];
        let ratios = sorted(o.iter().zip(s).map(|(a, b)| a / b).collect());
        let (o, s) = (sorted(o.clone()), sorted(s.clone()));
        let n = ratios.len();
        println!("{key}_ns={}", o[n / 2]);
        println!("{key}_ns_system={}", s[n / 2]);
        println!("{key}_ratio_paired={}", ratios[n / 2]);
        // The 10th and 90th percentiles of the per-round ratios.
        println!("{key}_ratio_p10={}", ratios[n / 10]);
        println!("{key}_ratio_p90={}", ratios[n - 1 - n / 10]);
    }
    std::mem::forget(ours);
}
