//! What glibc 2.36 accepts on x86-64 beyond the common relocations, each checked against
//! the system loader running the same file: text relocations (`DT_TEXTREL`: the code
//! segment written while relocating, then given back its protection), `R_X86_64_SIZE64`
//! and `R_X86_64_SIZE32`, and a `DT_REL` table (which glibc ignores on x86-64) or a
//! `DT_PREINIT_ARRAY` (which glibc runs only for the executable) that do not stop a load;
//! and what glibc refuses, refused alike: an x86 ISA level the CPU lacks.

use crate::common;

use elf_loader::elf::ElfInfo;
use elf_loader::{Namespace, SymbolProvider};
use std::ffi::{c_char, c_int, CString};

macro_rules! f {
    ($lib:expr, $name:expr, $ty:ty) => {{
        let name: &str = $name;
        // SAFETY: the fixture's C function has the declared signature. The library stays loaded while the test calls it.
        unsafe { $lib.get::<$ty>(name).unwrap_or_else(|e| panic!("{e}")).into_raw() }
    }};
}

/// The permissions (`r-xp`, ...) of the mapping holding `addr`, from `/proc/self/maps`.
fn perms_at(addr: usize) -> String {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    for line in maps.lines() {
        let mut it = line.split_whitespace();
        let range = it.next().unwrap();
        let perms = it.next().unwrap();
        let (lo, hi) = range.split_once('-').unwrap();
        let (lo, hi) = (
            usize::from_str_radix(lo, 16).unwrap(),
            usize::from_str_radix(hi, 16).unwrap(),
        );
        if addr >= lo && addr < hi {
            return perms.to_string();
        }
    }
    panic!("{addr:#x} is not mapped");
}

/// The system loader's view of the same file: `dlopen` + `dlsym`.
fn system_sym(path: &std::path::Path, name: &str) -> usize {
    let c = CString::new(path.to_str().unwrap()).unwrap();
    let n = CString::new(name).unwrap();
    // SAFETY: plain dlopen/dlsym of a fixture.
    unsafe {
        let h = libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL);
        assert!(!h.is_null(), "dlopen {}", path.display());
        let s = libc::dlsym(h, n.as_ptr());
        assert!(!s.is_null(), "dlsym {name}");
        s as usize
    }
}

#[test]
fn text_relocations_load_twice_and_the_code_is_read_only_again() {
    let so = common::build_so(
        "textrel",
        &["textrel.c"],
        &["-fno-PIC", "-mcmodel=large", "-Wl,-z,notext"],
    );
    let data = std::fs::read(&so).unwrap();
    let info = ElfInfo::parse(&so, &data).unwrap();
    assert!(info.textrel, "the fixture has DT_TEXTREL");
    let code = info.loads.iter().find(|l| l.flags & 1 != 0).unwrap();
    let in_code = info
        .file_relocs(&data, info.rela)
        .iter()
        .filter(|r| r.offset >= code.vaddr && r.offset < code.vaddr + code.memsz)
        .count();
    assert!(in_code >= 2, "relocations in the code segment: {in_code}");
    elf_loader::elf::check_bytes(&so, &data).unwrap();

    let copies: Vec<_> = (0..2)
        .map(|i| {
            let ns = Namespace::new(&format!("textrel-{i}"));
            // SAFETY: loading runs the initialisers of this test's (or the machine's) libraries.
            let lib = unsafe { ns.load(&so) }.unwrap_or_else(|e| panic!("{e}"));
            (ns, lib)
        })
        .collect();
    let mut counters = Vec::new();
    for (i, (_, lib)) in copies.iter().enumerate() {
        let bump = f!(lib, "bump", extern "C" fn() -> c_int);
        let addr = f!(lib, "counter_addr", extern "C" fn() -> *mut c_int);
        let len_of = f!(lib, "len_of", extern "C" fn(*const c_char) -> usize);
        for _ in 0..=i {
            bump();
        }
        // SAFETY: the copy's `int counter`.
        let counter = unsafe { *addr() };
        assert_eq!(counter, i as c_int + 1, "each copy's own counter");
        assert_eq!(len_of(c"text relocations".as_ptr()), 16);
        counters.push(addr() as usize);
        assert_eq!(perms_at(bump as usize), "r-xp", "code read-only again");
    }
    assert_ne!(counters[0], counters[1]);
    // The system loader accepts it too (and gives the same answers).
    // SAFETY: `size_t len_of(const char *)`.
    let sys_len: extern "C" fn(*const c_char) -> usize =
        unsafe { std::mem::transmute(system_sym(&so, "len_of")) };
    assert_eq!(sys_len(c"abc".as_ptr()), 3);
}

#[test]
fn size_relocations_agree_with_the_system_loader() {
    let so = common::build_so("sizereloc", &["sizereloc.c"], &[]);
    let data = std::fs::read(&so).unwrap();
    let info = ElfInfo::parse(&so, &data).unwrap();
    let kinds: Vec<u32> = info
        .file_relocs(&data, info.rela)
        .iter()
        .map(|r| r.kind)
        .collect();
    assert!(kinds.contains(&32) && kinds.contains(&33), "{kinds:?}");
    #[repr(C)]
    #[derive(Debug, PartialEq, Clone, Copy)]
    struct Sizes {
        table: u64,
        tzname_plus_3: u64,
        environ: u32,
        table_minus_1: u32,
    }
    let expected = Sizes {
        table: 40,
        tzname_plus_3: 19,
        environ: 8,
        table_minus_1: 39,
    };
    // SAFETY: `sizes` is the layout above in the fixture's data.
    let sys = unsafe { *(system_sym(&so, "sizes") as *const Sizes) };
    assert_eq!(sys, expected, "the system loader's values");
    for i in 0..2 {
        let ns = Namespace::new(&format!("size-{i}"));
        // SAFETY: loading runs the initialisers of this test's (or the machine's) libraries.
        let lib = unsafe { ns.load(&so) }.unwrap();
        // SAFETY: as above, in this copy.
        let ours = unsafe { *(lib.sym("sizes").unwrap() as *const Sizes) };
        assert_eq!(ours, expected);
    }
}

/// `DT_REL` (glibc on x86-64 never processes it) and `DT_PREINIT_ARRAY` (glibc runs it
/// only for the executable) in a shared object: glibc loads it, ignoring both, and so
/// does this loader (they used to be refused).
#[test]
fn ignored_dt_rel_and_preinit_array_as_glibc() {
    let so = common::build_so(
        "counter_spare",
        &["counter.c"],
        &["-Wl,--spare-dynamic-tags=6"],
    );
    let mut data = std::fs::read(&so).unwrap();
    let info = ElfInfo::parse(&so, &data).unwrap();
    let d = info.dynamic;
    let tag_at = |data: &[u8], i: u64| {
        let o = (d.offset + 16 * i) as usize;
        u64::from_le_bytes(data[o..o + 8].try_into().unwrap())
    };
    let first_null = (0..d.filesz / 16).find(|&i| tag_at(&data, i) == 0).unwrap();
    assert!(first_null + 5 <= d.filesz / 16, "spare DT_NULL slots");
    let put = |data: &mut Vec<u8>, i: u64, tag: u64, val: u64| {
        let o = (d.offset + 16 * (first_null + i)) as usize;
        data[o..o + 8].copy_from_slice(&tag.to_le_bytes());
        data[o + 8..o + 16].copy_from_slice(&val.to_le_bytes());
    };
    // DT_REL (17) over the DT_RELA table, DT_RELSZ (18) one entry, DT_RELENT (19);
    // DT_PREINIT_ARRAY (32) over the init array, DT_PREINIT_ARRAYSZ (33).
    put(&mut data, 0, 17, info.rela.vaddr);
    put(&mut data, 1, 18, 16);
    put(&mut data, 2, 19, 16);
    put(&mut data, 3, 32, info.init_array.vaddr);
    put(&mut data, 4, 33, 8);
    let patched = common::out_dir().join("libcounter_rel_preinit.so");
    std::fs::write(&patched, &data).unwrap();
    elf_loader::elf::check_bytes(&patched, &data).unwrap();
    // SAFETY: `int bump(void)`.
    let sys_bump: extern "C" fn() -> c_int =
        unsafe { std::mem::transmute(system_sym(&patched, "bump")) };
    assert_eq!(sys_bump(), 1, "the system loader loads it");
    for i in 0..2 {
        let ns = Namespace::new(&format!("rel-preinit-{i}"));
        // SAFETY: loading runs the initialisers of this test's (or the machine's) libraries.
        let lib = unsafe { ns.load(&patched) }.unwrap_or_else(|e| panic!("{e}"));
        let bump = f!(lib, "bump", extern "C" fn() -> c_int);
        assert_eq!(bump(), 1);
        // SAFETY: `int initialized` (set to 42 by the constructor, once).
        let initialized = unsafe { *(lib.sym("initialized").unwrap() as *const c_int) };
        assert_eq!(initialized, 42);
    }
}

/// What glibc refuses is refused: a library whose `GNU_PROPERTY_X86_ISA_1_NEEDED` asks
/// for an ISA level the CPU lacks (bit 4: no level any CPU has) fails with glibc's
/// words, under both loaders; one that needs levels this CPU has loads under both.
#[test]
fn an_isa_level_the_cpu_lacks_is_refused_as_glibc() {
    let levels = elf_loader::elf::cpu_isa_levels();
    let too_high = common::build_so("isa_high", &["isa.c"], &["-DISA_NEEDED=0x10"]);
    let ours = common::build_so(
        "isa_ours",
        &["isa.c"],
        &[&format!("-DISA_NEEDED={levels:#x}")],
    );
    let data = std::fs::read(&too_high).unwrap();
    assert!(
        elf_loader::elf::check_bytes(&too_high, &data).is_err(),
        "the oracle agrees"
    );
    // SAFETY: loading runs the initialisers of this test's (or the machine's) libraries.
    let e = unsafe { Namespace::new("isa-high").load(&too_high) }
        .err()
        .expect("refused")
        .to_string();
    assert!(
        e.contains("CPU ISA level is lower than required") && e.contains("0x10"),
        "{e}"
    );
    let c = CString::new(too_high.to_str().unwrap()).unwrap();
    // SAFETY: plain dlopen/dlerror.
    let glibc = unsafe {
        assert!(
            libc::dlopen(c.as_ptr(), libc::RTLD_NOW).is_null(),
            "glibc refuses it too"
        );
        std::ffi::CStr::from_ptr(libc::dlerror())
            .to_string_lossy()
            .into_owned()
    };
    assert!(
        glibc.contains("CPU ISA level is lower than required"),
        "{glibc}"
    );
    let info = ElfInfo::parse(&ours, &std::fs::read(&ours).unwrap()).unwrap();
    assert_eq!(info.isa_needed, levels);
    // SAFETY: loading runs the initialisers of this test's (or the machine's) libraries.
    let lib = unsafe { Namespace::new("isa-ours").load(&ours) }.unwrap();
    let ok = f!(lib, "isa_ok", extern "C" fn() -> c_int);
    assert_eq!(ok(), 1);
    assert_ne!(system_sym(&ours, "isa_ok"), 0);
}

/// A version the library needs from a dependency that does not define it is refused
/// before anything is relocated, in glibc's words: the counter fixture's `DT_VERNEED`
/// entry for libc.so.6 renamed to `bump` (a string of its own `.dynstr`).
#[test]
fn a_version_the_dependency_lacks_is_refused_as_glibc() {
    let so = common::build_so("counter", &["counter.c"], &[]);
    let mut data = std::fs::read(&so).unwrap();
    let info = ElfInfo::parse(&so, &data).unwrap();
    let d = info.dynamic;
    let verneed = (0..d.filesz / 16)
        .map(|i| (d.offset + 16 * i) as usize)
        .find(|&o| u64::from_le_bytes(data[o..o + 8].try_into().unwrap()) == 0x6fff_fffe)
        .map(|o| u64::from_le_bytes(data[o + 8..o + 16].try_into().unwrap()))
        .unwrap();
    let seg = info
        .loads
        .iter()
        .find(|l| verneed >= l.vaddr && verneed < l.vaddr + l.filesz)
        .unwrap();
    let vn = (seg.offset + verneed - seg.vaddr) as usize;
    let u32_at = |d: &[u8], o: usize| u32::from_le_bytes(d[o..o + 4].try_into().unwrap());
    let file = info
        .file_str(&data, u32_at(&data, vn + 4))
        .unwrap()
        .to_vec();
    assert_eq!(file, b"libc.so.6");
    let aux = vn + u32_at(&data, vn + 8) as usize;
    let strtab =
        &data[info.strtab.file_off as usize..(info.strtab.file_off + info.strtab.len) as usize];
    let bump = strtab.windows(6).position(|w| w == b"\0bump\0").unwrap() + 1;
    data[aux + 8..aux + 12].copy_from_slice(&(bump as u32).to_le_bytes());
    let patched = common::out_dir().join("libcounter_badversion.so");
    std::fs::write(&patched, &data).unwrap();
    // SAFETY: loading runs the initialisers of this test's (or the machine's) libraries.
    let e = unsafe { Namespace::new("badversion").load(&patched) }
        .err()
        .expect("refused")
        .to_string();
    assert!(
        e.contains("libc.so.6: version `bump' not found (required by")
            && e.contains("libcounter_badversion.so"),
        "{e}"
    );
    let c = CString::new(patched.to_str().unwrap()).unwrap();
    // SAFETY: plain dlopen/dlerror.
    let glibc = unsafe {
        assert!(
            libc::dlopen(c.as_ptr(), libc::RTLD_NOW).is_null(),
            "glibc refuses it too"
        );
        std::ffi::CStr::from_ptr(libc::dlerror())
            .to_string_lossy()
            .into_owned()
    };
    assert!(
        glibc.contains("version `bump' not found (required by"),
        "{glibc}"
    );
}
