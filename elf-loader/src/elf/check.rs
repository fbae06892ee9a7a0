//! Checks over a parsed file without mapping it: `check_bytes` (the fuzz oracle and the
//! bad-input tests' walk over every table the loader reads), the ifunc and code checks
//! the loader shares, and the tools' reads of symbols, names and relocations from the
//! file's bytes.

use super::consts::*;
use super::relocs::{irelative_reason, reloc_name, walk_relr};
use super::{ElfInfo, Rela, Sym, Table};
use crate::error::{Error, Result};
use object::elf as oelf;
use object::LittleEndian as LE;
use std::path::Path;

impl ElfInfo {
    /// Whether the link-time address `vaddr` lies inside an executable `PT_LOAD`.
    pub fn is_code(&self, vaddr: u64) -> bool {
        self.loads
            .iter()
            .any(|l| l.flags & PF_X != 0 && vaddr >= l.vaddr && vaddr - l.vaddr < l.memsz)
    }

    /// Checks that a defined `STT_GNU_IFUNC` symbol's value (its resolver, which the
    /// loader calls) is code of the library: a corrupt value must be an error, not a
    /// jump to data or to an address outside the mapping.
    /// `name` gives the symbol's name for the message.
    pub fn check_ifunc_symbol(
        &self,
        path: &Path,
        i: u32,
        s: &Sym,
        name: impl FnOnce() -> Option<Vec<u8>>,
    ) -> Result<()> {
        if s.kind() == STT_GNU_IFUNC
            && s.is_defined()
            && (s.shndx == SHN_ABS || !self.is_code(s.value))
        {
            return Err(Error::malformed(
                path,
                format!(
                    "symbol {i} ({}): STT_GNU_IFUNC resolver {:#x} is not inside an executable segment",
                    String::from_utf8_lossy(&name().unwrap_or_default()),
                    s.value
                ),
            ));
        }
        Ok(())
    }

    /// Reads symbol `i` from the file bytes (for tools and the fuzz target); `None` if
    /// it is not in `data`.
    pub fn file_sym(&self, data: &[u8], i: u32) -> Option<Sym> {
        if i >= self.nsyms {
            return None;
        }
        let o = self.symtab.file_off.checked_add(u64::from(i) * 24)?;
        read_sym(file_range(data, o, 24)?)
    }

    /// Reads a name from the string table in the file bytes.
    pub fn file_str<'a>(&self, data: &'a [u8], off: u32) -> Option<&'a [u8]> {
        let tab = file_range(data, self.strtab.file_off, self.strtab.len)?;
        let s = tab.get(off as usize..)?;
        let n = s.iter().position(|&b| b == 0)?;
        Some(&s[..n])
    }

    /// Reads the relocations of `table` from the file bytes (none if the table is not in
    /// `data`; a partial last entry is left out).
    pub fn file_relocs(&self, data: &[u8], table: Table) -> Vec<Rela> {
        let Some(bytes) = file_range(data, table.file_off, table.len) else {
            return Vec::new();
        };
        bytes.chunks_exact(24).filter_map(read_rela).collect()
    }

    /// The version index of symbol `i` from the file bytes (`None` without DT_VERSYM or
    /// if it is not in `data`).
    pub fn file_versym(&self, data: &[u8], i: u32) -> Option<u16> {
        let t = self.versym?;
        let o = t.file_off.checked_add(u64::from(i) * 2)?;
        let b = file_range(data, o, 2)?;
        Some(u16::from_le_bytes([b[0], b[1]]))
    }
}

/// What [`check_bytes`] found in a well-formed file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckSummary {
    /// Number of dynamic symbols.
    pub symbols: u32,
    /// Number of relocations (DT_RELA + DT_JMPREL + the words DT_RELR relocates).
    pub relocations: usize,
    /// `DT_NEEDED` names.
    pub needed: Vec<String>,
    /// Whether the file has a `PT_TLS` segment.
    pub has_tls: bool,
}

/// Parses `data` as a shared library and walks every table the loader reads (symbol
/// names, versions, relocations and their targets) without mapping or running
/// anything: the oracle of the fuzz target and of the bad-input tests. Errors are the
/// ones the loader would give.
pub fn check_bytes(path: &Path, data: &[u8]) -> Result<CheckSummary> {
    let info = ElfInfo::parse(path, data)?;
    for i in 1..info.nsyms {
        let s = info
            .file_sym(data, i)
            .ok_or_else(|| Error::malformed(path, format!("symbol {i} unreadable")))?;
        info.file_str(data, s.name).ok_or_else(|| {
            Error::malformed(
                path,
                format!("symbol {i}: name offset {:#x} outside DT_STRTAB", s.name),
            )
        })?;
        info.check_ifunc_symbol(path, i, &s, || {
            info.file_str(data, s.name).map(<[u8]>::to_vec)
        })?;
        if let Some(v) = info.file_versym(data, i) {
            let idx = (v & 0x7fff) as usize;
            if idx >= 2 && info.versions.get(idx).is_none_or(|v| v.is_none()) {
                return Err(Error::malformed(
                    path,
                    format!("symbol {i}: version index {idx} is not defined"),
                ));
            }
        }
    }
    let ranges = info.reloc_ranges();
    let relr = |k: usize| {
        let o = (info.relr.file_off + 8 * k as u64) as usize;
        data.get(o..o + 8)
            .map_or(0, |b| u64::from_le_bytes(b.try_into().expect("8 bytes")))
    };
    let mut relocations = walk_relr(path, (info.relr.len / 8) as usize, relr, &ranges, |_| {})?;
    for table in [info.rela, info.jmprel] {
        for r in info.file_relocs(data, table) {
            relocations += 1;
            if r.sym >= info.nsyms && r.sym != 0 {
                return Err(Error::Relocation {
                    path: path.to_path_buf(),
                    kind: reloc_name(r.kind),
                    offset: r.offset,
                    symbol: String::new(),
                    reason: format!(
                        "symbol index {} is beyond the {} dynamic symbols",
                        r.sym, info.nsyms
                    ),
                });
            }
            let size = match r.kind {
                R_X86_64_NONE => continue,
                R_X86_64_32 | R_X86_64_PC32 | R_X86_64_SIZE32 => 4,
                R_X86_64_64 | R_X86_64_PC64 | R_X86_64_GLOB_DAT | R_X86_64_JUMP_SLOT
                | R_X86_64_RELATIVE | R_X86_64_RELATIVE64 | R_X86_64_IRELATIVE
                | R_X86_64_DTPMOD64 | R_X86_64_DTPOFF64 | R_X86_64_TPOFF64 | R_X86_64_SIZE64 => 8,
                R_X86_64_TLSDESC => 16,
                other => {
                    return Err(Error::Relocation {
                        path: path.to_path_buf(),
                        kind: reloc_name(other),
                        offset: r.offset,
                        symbol: String::new(),
                        reason: "unsupported relocation type".into(),
                    })
                }
            };
            let ok = ranges.iter().any(|&(start, end)| {
                r.offset >= start && r.offset.checked_add(size).is_some_and(|e| e <= end)
            });
            if !ok {
                return Err(Error::Relocation {
                    path: path.to_path_buf(),
                    kind: reloc_name(r.kind),
                    offset: r.offset,
                    symbol: String::new(),
                    reason: "target is not inside a writable segment".into(),
                });
            }
            if r.kind == R_X86_64_IRELATIVE && !info.is_code(r.addend as u64) {
                return Err(Error::Relocation {
                    path: path.to_path_buf(),
                    kind: reloc_name(r.kind),
                    offset: r.offset,
                    symbol: String::new(),
                    reason: irelative_reason(r.addend),
                });
            }
        }
    }
    Ok(CheckSummary {
        symbols: info.nsyms,
        relocations,
        needed: info.needed.clone(),
        has_tls: info.tls.is_some(),
    })
}

/// The `len` bytes of `data` at file offset `off`, if all of them are there.
fn file_range(data: &[u8], off: u64, len: u64) -> Option<&[u8]> {
    let start = usize::try_from(off).ok()?;
    let end = start.checked_add(usize::try_from(len).ok()?)?;
    data.get(start..end)
}

/// Decodes an `Elf64_Sym` from (at least) 24 bytes; `None` if `b` is shorter.
pub fn read_sym(b: &[u8]) -> Option<Sym> {
    let (s, _) = object::pod::from_bytes::<oelf::Sym64<LE>>(b).ok()?;
    Some(Sym::from_object(s))
}

/// Decodes an `Elf64_Rela` from (at least) 24 bytes; `None` if `b` is shorter.
pub fn read_rela(b: &[u8]) -> Option<Rela> {
    let (r, _) = object::pod::from_bytes::<oelf::Rela64<LE>>(b).ok()?;
    Some(Rela::from_object(r))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The parser's public entry points (behind the `elf-parser` feature, for tools) give
    /// `None`, nothing or an error on short or inconsistent input, never a panic:
    /// `read_rela(&[0; 3])` used to panic, and an `ElfInfo` whose tables point past the
    /// end of the address space overflowed in the file readers.
    #[test]
    fn parser_entry_points_never_panic_on_short_or_inconsistent_input() {
        for n in 0..24 {
            assert!(read_rela(&[0; 24][..n]).is_none(), "{n} bytes");
            assert!(read_sym(&[0; 24][..n]).is_none(), "{n} bytes");
        }
        assert_eq!(read_rela(&[0; 24]).map(|r| r.kind), Some(R_X86_64_NONE));
        assert!(read_sym(&[0; 24]).is_some());

        // A real library (libgcc_s, which Rust's std links for unwinding; libc is an
        // executable too), then the same description with every table out of reach.
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        let lib = maps
            .lines()
            .filter_map(|l| l.split_whitespace().nth(5))
            .find(|p| p.contains("/libgcc_s.so"))
            .expect("the test links libgcc_s");
        let data = std::fs::read(lib).unwrap();
        let p = Path::new(lib);
        let info = ElfInfo::parse(p, &data).unwrap();
        check_bytes(p, &data).unwrap();
        assert!(info.file_sym(&data, 1).is_some());
        let far = Table {
            file_off: u64::MAX - 7,
            vaddr: u64::MAX - 7,
            len: u64::MAX,
        };
        let mut bad = info.clone();
        bad.symtab = far;
        bad.strtab = far;
        bad.versym = Some(far);
        bad.nsyms = u32::MAX;
        for l in &mut bad.loads {
            l.vaddr = u64::MAX - 1;
            l.memsz = u64::MAX;
        }
        for i in [0, 1, u32::MAX - 1] {
            assert!(bad.file_sym(&data, i).is_none());
            assert!(bad.file_versym(&data, i).is_none());
            assert!(bad.file_str(&data, i).is_none());
        }
        assert!(bad.file_relocs(&data, far).is_empty());
        assert!(bad.file_relocs(&data[..30], info.rela).len() <= 1);
        assert!(bad.reloc_ranges().iter().all(|&(s, e)| s <= e));

        // A short prefix of the file is an error naming the file, not a panic (a longer
        // one may hold all the loader reads: the section headers at the end are not).
        for n in (0..256).chain([1024, 4096]) {
            let e = check_bytes(p, &data[..n]).expect_err("a truncated library");
            assert!(e.to_string().contains("libgcc_s.so"), "{e}");
        }
        for n in [data.len() / 2, data.len() - 1] {
            let _ = check_bytes(p, &data[..n]);
        }
    }
}
