//! Before relocating, the loader makes the pages that relocations write present with
//! `MADV_POPULATE_WRITE` (one call per run of pages instead of one fault per page). The
//! pages must be exactly those holding a relocation target: fewer would only cost
//! faults, more would make memory private that no relocation needs. Checked against the
//! target pages computed from the file, through the `loaded` trace event.

use crate::common;

use elf_loader::elf::{consts::PF_W, ElfInfo};
use std::collections::BTreeSet;
use std::path::Path;

/// Distinct pages (link-time page numbers) holding a relocation target inside a
/// writable segment.
fn target_pages(path: &Path) -> usize {
    let data = std::fs::read(path).unwrap();
    let info = ElfInfo::parse(path, &data).unwrap();
    let w: Vec<_> = info
        .loads
        .iter()
        .filter(|l| l.flags & PF_W != 0)
        .map(|l| (l.vaddr, l.vaddr + l.memsz))
        .collect();
    assert!(!w.is_empty(), "{}: a writable segment", path.display());
    let mut pages = BTreeSet::new();
    for t in [info.rela, info.jmprel] {
        for r in info.file_relocs(&data, t) {
            if w.iter().any(|&(lo, hi)| r.offset >= lo && r.offset < hi) {
                pages.insert(r.offset / 4096);
            }
        }
    }
    pages.len()
}

/// Whether this kernel has `MADV_POPULATE_WRITE` (Linux 5.14+).
fn kernel_populates() -> bool {
    // SAFETY: a private anonymous page of our own, populated then unmapped.
    unsafe {
        let p = libc::mmap(
            std::ptr::null_mut(),
            4096,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        );
        assert_ne!(p, libc::MAP_FAILED);
        let ok = libc::madvise(p, 4096, libc::MADV_POPULATE_WRITE) == 0;
        libc::munmap(p, 4096);
        ok
    }
}

/// Loads `path` into a fresh namespace and returns the `prefaulted_pages` field of
/// its `loaded` event.
fn prefaulted(path: &Path) -> usize {
    let ns = elf_loader::Namespace::new("prefault");
    let text = common::capture_log(|| {
        // SAFETY: loading runs the initialisers of this test's (or the machine's) libraries.
        unsafe { ns.load(path) }.unwrap();
    });
    let line = text
        .lines()
        .find(|l| l.contains("loaded") && l.contains(&*path.to_string_lossy()))
        .unwrap_or_else(|| panic!("no loaded event for {}:\n{text}", path.display()));
    line.split_whitespace()
        .find_map(|w| w.strip_prefix("prefaulted_pages="))
        .unwrap_or_else(|| panic!("no prefaulted_pages in {line}"))
        .parse()
        .unwrap()
}

#[test]
fn exactly_the_relocated_pages_are_populated() {
    let populates = kernel_populates();
    let mut libs = vec![
        common::build_so("counter", &["counter.c"], &[]),
        // Two writable segments, each with relocation targets.
        common::build_so(
            "twoseg",
            &["twoseg.c"],
            &["-Wl,--section-start=.farptrs=0x400000"],
        ),
    ];
    libs.extend(common::libpython());
    for lib in libs {
        let want = if populates { target_pages(&lib) } else { 0 };
        assert_eq!(prefaulted(&lib), want, "{}", lib.display());
    }
}
