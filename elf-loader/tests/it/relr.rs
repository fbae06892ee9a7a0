//! `DT_RELR` (packed relative relocations, glibc 2.36 / binutils 2.38
//! `-z pack-relative-relocs`): Debian 12's own libraries that use it (glibc's `libm`,
//! `libmvec` and `libresolv`; each checked to have a `DT_RELR` entry) loaded by path into
//! two namespaces each and called in both copies, with each copy's own data; and a
//! fixture linked with `-z pack-relative-relocs` whose pointer tables exercise address
//! entries, full and partial bitmaps and gaps longer than a bitmap, loaded twice.

use crate::common;

use elf_loader::elf::{check_bytes, ElfInfo};
use elf_loader::{CustomLibrary, Namespace, SymbolProvider};
use std::ffi::{c_char, c_double, c_int, c_void, CStr};
use std::path::{Path, PathBuf};

const LIBDIR: &str = "/usr/lib/x86_64-linux-gnu";

/// A system library that must have `DT_RELR` (what the test is about).
fn relr_library(name: &str) -> PathBuf {
    let p = Path::new(LIBDIR).join(name);
    let data = std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    let info = ElfInfo::parse(&p, &data).unwrap();
    assert!(info.relr.len > 0, "{} has no DT_RELR", p.display());
    // The parser's oracle walks it too, and agrees with the loader.
    check_bytes(&p, &data).unwrap();
    p
}

macro_rules! f {
    ($lib:expr, $name:expr, $ty:ty) => {{
        let name: &str = $name;
        // SAFETY: the library's C function has the declared signature. The library stays loaded while the test calls it.
        unsafe { $lib.get::<$ty>(name).unwrap_or_else(|e| panic!("{e}")).into_raw() }
    }};
}

/// Two copies of `name`, each in a namespace of its own.
fn two_copies(name: &str) -> [(Namespace, CustomLibrary); 2] {
    let p = relr_library(name);
    ["a", "b"].map(|n| {
        let ns = Namespace::new(&format!("relr-{name}-{n}"));
        // SAFETY: loading runs the initialisers of this test's (or the machine's) libraries.
        let lib =
            unsafe { ns.load(&p) }.unwrap_or_else(|e| panic!("load {} into {n}: {e}", p.display()));
        (ns, lib)
    })
}

#[test]
fn debian_libm_twice() {
    let copies = two_copies("libm.so.6");
    let [(_, a), (_, b)] = &copies;
    let signgam = |l: &CustomLibrary| l.sym("signgam").expect("signgam") as *const c_int;
    assert_ne!(signgam(a), signgam(b), "each copy has its own signgam");
    for (lib, x) in [(a, 0.5), (b, 0.25)] {
        let cos = f!(lib, "cos", extern "C" fn(c_double) -> c_double);
        let exp = f!(lib, "exp", extern "C" fn(c_double) -> c_double);
        let pow = f!(lib, "pow", extern "C" fn(c_double, c_double) -> c_double);
        let nextafter = f!(
            lib,
            "nextafter",
            extern "C" fn(c_double, c_double) -> c_double
        );
        // The same answers as the process's own libm (std calls it).
        assert_eq!(cos(x), x.cos());
        assert_eq!(exp(x), x.exp());
        assert_eq!(pow(x, 3.5), x.powf(3.5));
        assert_eq!(nextafter(1.0, 2.0), 1.0 + f64::EPSILON);
    }
    // lgamma sets the calling copy's signgam only.
    let lgamma_a = f!(a, "lgamma", extern "C" fn(c_double) -> c_double);
    let lgamma_b = f!(b, "lgamma", extern "C" fn(c_double) -> c_double);
    // SAFETY: each copy's `int signgam`, in its mapped data segment.
    let (sa, sb) = unsafe { (&*signgam(a), &*signgam(b)) };
    lgamma_b(2.5);
    assert_eq!(*sb, 1);
    let v = lgamma_a(-0.5);
    assert!((v - 1.2655121234846454).abs() < 1e-12, "{v}");
    assert_eq!(*sa, -1, "copy a's signgam set by its lgamma(-0.5)");
    assert_eq!(*sb, 1, "copy b's signgam untouched");
}

#[test]
fn debian_libmvec_twice() {
    use std::arch::x86_64::{__m128d, _mm_set_pd, _mm_storeu_pd};
    let copies = two_copies("libmvec.so.1");
    let [(_, a), (_, b)] = &copies;
    assert_ne!(a.sym("_ZGVbN2v_cos"), b.sym("_ZGVbN2v_cos"));
    for lib in [a, b] {
        // The SSE2 variant: two doubles in %xmm0 (every x86-64 CPU has SSE2).
        let vcos = f!(lib, "_ZGVbN2v_cos", extern "C" fn(__m128d) -> __m128d);
        let vexp = f!(lib, "_ZGVbN2v_exp", extern "C" fn(__m128d) -> __m128d);
        let mut out = [0.0f64; 2];
        // SAFETY: SSE2 intrinsics (baseline on x86-64) on local values.
        unsafe {
            _mm_storeu_pd(out.as_mut_ptr(), vcos(_mm_set_pd(1.0, 0.5)));
        }
        assert!(
            (out[0] - 0.5f64.cos()).abs() < 1e-15 && (out[1] - 1.0f64.cos()).abs() < 1e-15,
            "{out:?}"
        );
        // SAFETY: as above.
        unsafe {
            _mm_storeu_pd(out.as_mut_ptr(), vexp(_mm_set_pd(2.0, 1.0)));
        }
        assert!(
            (out[0] - 1.0f64.exp()).abs() < 1e-14 && (out[1] - 2.0f64.exp()).abs() < 1e-14,
            "{out:?}"
        );
    }
}

#[test]
fn debian_libresolv_twice() {
    let copies = two_copies("libresolv.so.2");
    let [(_, a), (_, b)] = &copies;
    let mut last = Vec::new();
    for lib in [a, b] {
        let parse_ttl = f!(
            lib,
            "ns_parse_ttl",
            extern "C" fn(*const c_char, *mut u64) -> c_int
        );
        let count = f!(
            lib,
            "__dn_count_labels",
            extern "C" fn(*const c_char) -> c_int
        );
        let p_time = f!(lib, "__p_time", extern "C" fn(u32) -> *const c_char);
        let net_pton = f!(
            lib,
            "inet_net_pton",
            extern "C" fn(c_int, *const c_char, *mut c_void, usize) -> c_int
        );
        let mut ttl = 0u64;
        assert_eq!(parse_ttl(c"1h30m".as_ptr(), &mut ttl), 0);
        assert_eq!(ttl, 5400);
        assert_eq!(count(c"www.example.com".as_ptr()), 3);
        let mut addr = [0u8; 4];
        let bits = net_pton(
            libc::AF_INET,
            c"192.168.1.0/24".as_ptr(),
            addr.as_mut_ptr().cast(),
            4,
        );
        assert_eq!((bits, addr), (24, [192, 168, 1, 0]));
        // __p_time formats into a static buffer: each copy's own.
        let s = p_time(3600 + 60 + 1);
        // SAFETY: a NUL-terminated string in the copy's data.
        let text = unsafe { CStr::from_ptr(s) }.to_str().unwrap().to_string();
        assert!(text.contains('1'), "{text}");
        last.push((s as usize, text));
    }
    assert_ne!(
        last[0].0, last[1].0,
        "each copy formats into its own buffer"
    );
    assert_eq!(last[0].1, last[1].1);
}

#[test]
fn packed_fixture_twice() {
    let so = common::build_so("relr", &["relr.c"], &["-Wl,-z,pack-relative-relocs"]);
    let data = std::fs::read(&so).unwrap();
    let info = ElfInfo::parse(&so, &data).unwrap();
    let entries = (info.relr.len / 8) as usize;
    assert!(entries >= 8, "address entries and bitmaps: {entries}");
    let summary = check_bytes(&so, &data).unwrap();
    assert!(summary.relocations > 160, "{summary:?}");
    let copies: Vec<(Namespace, CustomLibrary)> = (0..2)
        .map(|i| {
            let ns = Namespace::new(&format!("relr-fixture-{i}"));
            // SAFETY: loading runs the initialisers of this test's (or the machine's) libraries.
            let lib = unsafe { ns.load(&so) }.unwrap();
            (ns, lib)
        })
        .collect();
    let mut values = Vec::new();
    for (_, lib) in &copies {
        let check = f!(lib, "relr_check", extern "C" fn() -> c_int);
        let bump = f!(lib, "bump", extern "C" fn() -> c_int);
        let vals = f!(lib, "relr_values", extern "C" fn() -> *mut c_void);
        assert_eq!(check(), 0, "every packed pointer relocated");
        assert_eq!(bump(), 1);
        assert_eq!(bump(), 2);
        values.push(vals() as usize);
    }
    assert_ne!(values[0], values[1]);
}
