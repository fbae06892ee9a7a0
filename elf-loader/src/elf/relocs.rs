//! Relocation tables: `DT_RELA`, `DT_JMPREL` and `DT_RELR` located and sized, the ranges
//! relocations may write, the `DT_RELR` walk, and the names of relocation types.

use super::consts::*;
use super::dynamic::Dynamic;
use super::reader::{Placement, Reader};
use super::ElfInfo;
use crate::error::{Error, Result};
use std::path::Path;

/// The name of an x86_64 relocation type, for messages.
pub fn reloc_name(kind: u32) -> String {
    match kind {
        R_X86_64_NONE => "R_X86_64_NONE".into(),
        R_X86_64_64 => "R_X86_64_64".into(),
        R_X86_64_PC32 => "R_X86_64_PC32".into(),
        R_X86_64_COPY => "R_X86_64_COPY".into(),
        R_X86_64_GLOB_DAT => "R_X86_64_GLOB_DAT".into(),
        R_X86_64_JUMP_SLOT => "R_X86_64_JUMP_SLOT".into(),
        R_X86_64_RELATIVE => "R_X86_64_RELATIVE".into(),
        R_X86_64_32 => "R_X86_64_32".into(),
        R_X86_64_DTPMOD64 => "R_X86_64_DTPMOD64".into(),
        R_X86_64_DTPOFF64 => "R_X86_64_DTPOFF64".into(),
        R_X86_64_TPOFF64 => "R_X86_64_TPOFF64".into(),
        R_X86_64_PC64 => "R_X86_64_PC64".into(),
        R_X86_64_SIZE32 => "R_X86_64_SIZE32".into(),
        R_X86_64_SIZE64 => "R_X86_64_SIZE64".into(),
        R_X86_64_TLSDESC => "R_X86_64_TLSDESC".into(),
        R_X86_64_IRELATIVE => "R_X86_64_IRELATIVE".into(),
        R_X86_64_RELATIVE64 => "R_X86_64_RELATIVE64".into(),
        other => format!("type {other}"),
    }
}

impl ElfInfo {
    /// `DT_RELA`, `DT_JMPREL`, `DT_RELR` and their sizes.
    pub(super) fn parse_relocation_tables(
        &mut self,
        r: &Reader<'_>,
        dynamic: &Dynamic,
    ) -> Result<()> {
        let path = self.path.clone();
        let bad = |item: String| Error::malformed(&path, item);
        let get = |tag: u64| dynamic.get(tag);
        let name = |tag: u64| -> &'static str {
            match tag {
                DT_RELA => "DT_RELA",
                DT_JMPREL => "DT_JMPREL",
                _ => "dynamic entry",
            }
        };
        // Relocation tables.
        if let Some(addr) = get(DT_RELA) {
            let sz = get(DT_RELASZ).ok_or_else(|| bad("DT_RELA without DT_RELASZ".into()))?;
            if sz % 24 != 0 {
                return Err(bad(format!("DT_RELASZ {sz:#x} is not a multiple of 24")));
            }
            self.rela = self.table(r, addr, sz, Placement::Any, name(DT_RELA))?;
            self.relacount = get(DT_RELACOUNT).unwrap_or(0);
            if self.relacount > sz / 24 {
                return Err(bad(format!(
                    "DT_RELACOUNT {} exceeds the {} DT_RELA entries",
                    self.relacount,
                    sz / 24
                )));
            }
        }
        if let Some(addr) = get(DT_JMPREL) {
            let sz = get(DT_PLTRELSZ).ok_or_else(|| bad("DT_JMPREL without DT_PLTRELSZ".into()))?;
            if sz % 24 != 0 {
                return Err(bad(format!("DT_PLTRELSZ {sz:#x} is not a multiple of 24")));
            }
            self.jmprel = self.table(r, addr, sz, Placement::Any, name(DT_JMPREL))?;
        }
        if let Some(addr) = get(DT_RELR) {
            let sz = get(DT_RELRSZ).ok_or_else(|| bad("DT_RELR without DT_RELRSZ".into()))?;
            if sz % 8 != 0 {
                return Err(bad(format!("DT_RELRSZ {sz:#x} is not a multiple of 8")));
            }
            self.relr = self.table(r, addr, sz, Placement::Any, "DT_RELR")?;
        }
        Ok(())
    }

    /// The link-time ranges `[start, end)` that relocations may write: the writable
    /// `PT_LOAD` segments, and for a `DT_TEXTREL` library every `PT_LOAD` (the others
    /// are made writable while it is relocated, as glibc does).
    pub fn reloc_ranges(&self) -> Vec<(u64, u64)> {
        self.loads
            .iter()
            .filter(|l| self.textrel || l.flags & PF_W != 0)
            .map(|l| (l.vaddr, l.vaddr.saturating_add(l.memsz)))
            .collect()
    }
}

/// Walks a `DT_RELR` table (glibc 2.36, binutils 2.38 `-z pack-relative-relocs`): `f` is
/// called with the link-time address of every word to relocate (by adding the load
/// bias), in table order, after that word has been checked to lie in one of `ranges`
/// (link-time `[start, end)`, see [`ElfInfo::reloc_ranges`]). `count` entries are read
/// through `entry`. An even entry is the address of a word to relocate; an odd entry is
/// a bitmap of the 63 words after the previous entry's last word (bit `i + 1` for word
/// `i`), each set bit a word to relocate. Returns the number of words.
///
/// A bitmap before any address, an address outside the ranges, or a set bit whose word
/// runs past the segment is an error naming the entry: nothing outside the library's
/// segments is ever written.
pub fn walk_relr(
    path: &Path,
    count: usize,
    entry: impl Fn(usize) -> u64,
    ranges: &[(u64, u64)],
    mut f: impl FnMut(u64),
) -> Result<usize> {
    // Whether the words [lo, hi) lie in one range.
    let inside = |lo: u64, hi: u64| ranges.iter().any(|&(s, e)| lo >= s && hi <= e && lo < hi);
    let bad = |k: usize, what: String| Error::malformed(path, format!("DT_RELR entry {k}: {what}"));
    // The link-time address of the word after the last one an entry covered.
    let mut next: Option<u64> = None;
    let mut words = 0;
    for k in 0..count {
        let e = entry(k);
        if e & 1 == 0 {
            match e.checked_add(8) {
                Some(end) if inside(e, end) => {}
                _ => {
                    return Err(bad(
                        k,
                        format!("address {e:#x} is not inside a writable segment"),
                    ))
                }
            }
            f(e);
            words += 1;
            next = Some(e + 8);
            continue;
        }
        let Some(base) = next else {
            return Err(bad(
                k,
                format!("bitmap {e:#x} with no address entry before it"),
            ));
        };
        let bits = e >> 1;
        if bits != 0 {
            // Set bits are words base + 8 * i for i in [low, high]; 63 bits at most,
            // so these cannot overflow unless `base` is near the top of the space.
            let low = u64::from(bits.trailing_zeros());
            let high = u64::from(63 - bits.leading_zeros());
            let first = base.checked_add(8 * low);
            let end = base.checked_add(8 * high + 8);
            let ok = matches!((first, end), (Some(a), Some(b)) if inside(a, b));
            if !ok {
                // Not all in one segment: the first word that is in none names the error.
                let mut b = bits;
                while b != 0 {
                    let i = u64::from(b.trailing_zeros());
                    let w = base.checked_add(8 * i);
                    if !w.is_some_and(|w| w.checked_add(8).is_some_and(|x| inside(w, x))) {
                        return Err(bad(
                            k,
                            format!(
                                "bitmap {e:#x} (bit {}) relocates the word at {:#x}, past the writable segment",
                                i + 1,
                                base.wrapping_add(8 * i)
                            ),
                        ));
                    }
                    b &= b - 1;
                }
            }
            let mut b = bits;
            while b != 0 {
                f(base + 8 * u64::from(b.trailing_zeros()));
                words += 1;
                b &= b - 1;
            }
        }
        next = base.checked_add(63 * 8);
    }
    Ok(words)
}

/// Why an `R_X86_64_IRELATIVE` relocation with this addend is refused.
pub(crate) fn irelative_reason(addend: i64) -> String {
    format!(
        "ifunc resolver {:#x} (the addend) is not inside an executable segment of the library",
        addend as u64
    )
}
