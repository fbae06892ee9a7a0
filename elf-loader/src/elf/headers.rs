//! The first phase: the ELF header and the program headers (`ElfInfo::parse_headers`,
//! and `ElfInfo::parse`, both phases over a whole file), and the x86 ISA level a file
//! needs (`PT_GNU_PROPERTY`) against the CPU's.

use super::consts::*;
use super::reader::{page_down, page_up, Placement, Reader, MAX_TLS_ALIGN, PAGE};
use super::{ElfInfo, Phdr, Table};
use crate::error::{Error, Result};
use object::elf as oelf;
use object::LittleEndian as LE;
use std::path::Path;

impl ElfInfo {
    /// Parses and validates `data`, the whole contents of the file at `path`.
    pub fn parse(path: &Path, data: &[u8]) -> Result<ElfInfo> {
        let r = Reader::whole(path, data);
        let mut info = Self::parse_headers(path, &r)?;
        info.parse_dynamic(&r)?;
        Ok(info)
    }

    /// The first phase: the ELF header and program headers (from `r`, which need only
    /// hold the start of the file), with every `PT_LOAD` checked against the file size.
    pub(crate) fn parse_headers(path: &Path, r: &Reader<'_>) -> Result<ElfInfo> {
        let bad = |item: String| Error::malformed(path, item);
        // `e_ident` first (16 bytes: a short file is refused for what it is), then the
        // whole header.
        let ident = r.bytes(0, 16, "ELF identification")?;
        let (magic, class, data, version) = (&ident[0..4], ident[4], ident[5], ident[6]);
        if magic != oelf::ELFMAG {
            return Err(bad("bad magic in e_ident (not an ELF file)".into()));
        }
        if class != oelf::ELFCLASS64.0 {
            return Err(Error::unsupported(
                path,
                format!("e_ident[EI_CLASS] = {class} (only ELFCLASS64)"),
            ));
        }
        if data != oelf::ELFDATA2LSB.0 {
            return Err(Error::unsupported(
                path,
                format!("e_ident[EI_DATA] = {data} (only little-endian)"),
            ));
        }
        if version != oelf::EV_CURRENT.0 {
            return Err(bad(format!("e_ident[EI_VERSION] = {version} (expected 1)")));
        }
        let header: &oelf::FileHeader64<LE> = r.pod(0, "ELF header")?;
        let e_type = header.e_type.get(LE).0;
        if e_type != oelf::ET_DYN.0 {
            return Err(Error::unsupported(
                path,
                format!("e_type = {e_type} (only ET_DYN shared objects can be loaded)"),
            ));
        }
        let machine = header.e_machine.get(LE).0;
        if machine != oelf::EM_X86_64.0 {
            return Err(Error::unsupported(
                path,
                format!("e_machine = {machine} (only EM_X86_64 = 62)"),
            ));
        }
        let phoff = header.e_phoff.get(LE);
        let phentsize = header.e_phentsize.get(LE);
        let phnum = header.e_phnum.get(LE);
        if phentsize != 56 {
            return Err(bad(format!("e_phentsize = {phentsize} (expected 56)")));
        }
        if phnum == 0 || phnum == 0xffff {
            return Err(bad(format!(
                "e_phnum = {phnum} (no usable program headers)"
            )));
        }
        let table: &[oelf::ProgramHeader64<LE>] = r.pods(
            phoff,
            u64::from(phnum),
            "program header table (e_phoff, e_phnum)",
        )?;
        let phdrs: Vec<Phdr> = table
            .iter()
            .map(|p| Phdr {
                kind: p.p_type.get(LE).0,
                flags: p.p_flags.get(LE).0,
                offset: p.p_offset.get(LE),
                vaddr: p.p_vaddr.get(LE),
                filesz: p.p_filesz.get(LE),
                memsz: p.p_memsz.get(LE),
                align: p.p_align.get(LE),
            })
            .collect();

        let mut loads: Vec<Phdr> = Vec::new();
        let mut dynamic = None;
        let mut tls = None;
        let mut eh_frame_hdr = None;
        let mut relro = None;
        let mut property = None;
        const LIMIT: u64 = 1 << 40; // no sane library spans a terabyte
        for (i, p) in phdrs.iter().enumerate() {
            match p.kind {
                PT_LOAD => {
                    if p.memsz == 0 {
                        continue;
                    }
                    if p.filesz > p.memsz {
                        return Err(bad(format!(
                            "program header {i} (PT_LOAD): p_filesz {:#x} > p_memsz {:#x}",
                            p.filesz, p.memsz
                        )));
                    }
                    if p.vaddr >= LIMIT || p.memsz >= LIMIT {
                        return Err(bad(format!(
                            "program header {i} (PT_LOAD): p_vaddr {:#x} / p_memsz {:#x} out of range",
                            p.vaddr, p.memsz
                        )));
                    }
                    r.in_file(
                        p.offset,
                        p.filesz,
                        format_args!("program header {i} (PT_LOAD) contents"),
                    )?;
                    if p.offset % PAGE != p.vaddr % PAGE {
                        return Err(bad(format!(
                            "program header {i} (PT_LOAD): p_offset {:#x} and p_vaddr {:#x} differ modulo the page size",
                            p.offset, p.vaddr
                        )));
                    }
                    if p.align > 1 && (!p.align.is_power_of_two() || p.align > (1 << 30)) {
                        return Err(bad(format!(
                            "program header {i} (PT_LOAD): p_align {:#x} is not a power of two up to 1 GiB",
                            p.align
                        )));
                    }
                    if let Some(prev) = loads.last() {
                        if p.vaddr < prev.vaddr + prev.memsz {
                            return Err(bad(format!(
                                "program header {i} (PT_LOAD) at {:#x} overlaps or precedes the previous PT_LOAD ending at {:#x}",
                                p.vaddr,
                                prev.vaddr + prev.memsz
                            )));
                        }
                    }
                    loads.push(*p);
                }
                PT_DYNAMIC => dynamic = Some(*p),
                PT_TLS => tls = Some(*p),
                PT_GNU_EH_FRAME => eh_frame_hdr = Some(*p),
                PT_GNU_RELRO => relro = Some(*p),
                PT_GNU_PROPERTY => property = Some(*p),
                PT_INTERP => {
                    return Err(Error::unsupported(
                        path,
                        "PT_INTERP present: this is an executable (PIE), not a shared library",
                    ))
                }
                _ => {}
            }
        }
        if loads.is_empty() {
            return Err(bad("no PT_LOAD program header".into()));
        }
        let dynamic = dynamic.ok_or_else(|| bad("no PT_DYNAMIC program header".into()))?;
        let min_vaddr = page_down(loads[0].vaddr);
        let last = loads[loads.len() - 1];
        let max_vaddr =
            page_up(last.vaddr + last.memsz).ok_or_else(|| bad("PT_LOAD end overflows".into()))?;
        let max_align = loads
            .iter()
            .map(|p| p.align)
            .max()
            .unwrap_or(PAGE)
            .max(PAGE);

        let info = ElfInfo {
            path: path.to_path_buf(),
            phdrs,
            loads,
            phoff,
            dynamic,
            tls,
            eh_frame_hdr,
            relro,
            property,
            isa_needed: 0,
            min_vaddr,
            max_vaddr,
            max_align,
            needed: Vec::new(),
            soname: None,
            rpath: None,
            runpath: None,
            symtab: Table::default(),
            nsyms: 0,
            strtab: Table::default(),
            gnu_hash: None,
            sysv_hash: None,
            versym: None,
            versions: Vec::new(),
            rela: Table::default(),
            relacount: 0,
            jmprel: Table::default(),
            relr: Table::default(),
            init: None,
            fini: None,
            init_array: Table::default(),
            fini_array: Table::default(),
            static_tls: false,
            textrel: false,
            nodelete: false,
            nodeflib: false,
        };
        if let Some(t) = info.tls {
            if t.filesz > t.memsz
                || t.memsz > (1 << 30)
                || (t.align > 1 && !t.align.is_power_of_two())
            {
                return Err(bad(format!(
                    "PT_TLS: p_filesz {:#x}, p_memsz {:#x}, p_align {:#x} are inconsistent",
                    t.filesz, t.memsz, t.align
                )));
            }
            // Each thread's block is allocated with this alignment: an absurd one could
            // not be honoured (the largest in Debian's libraries is a cache line or a page).
            if t.align > MAX_TLS_ALIGN {
                return Err(bad(format!(
                    "PT_TLS: p_align {:#x} is larger than {MAX_TLS_ALIGN:#x}",
                    t.align
                )));
            }
        }
        if let Some(rr) = info.relro {
            let ok = info.loads.iter().any(|l| {
                l.flags & PF_W != 0
                    && rr.vaddr >= l.vaddr
                    && rr.vaddr + rr.memsz <= l.vaddr + l.memsz
            });
            if !ok && rr.memsz != 0 {
                return Err(bad(format!(
                    "PT_GNU_RELRO {:#x}+{:#x} is not inside a writable PT_LOAD",
                    rr.vaddr, rr.memsz
                )));
            }
        }
        Ok(info)
    }

    /// Reads `GNU_PROPERTY_X86_ISA_1_NEEDED` from `PT_GNU_PROPERTY` (when that lies in a
    /// loaded segment; malformed notes are ignored, as they say nothing) and refuses an
    /// object that needs an ISA level this CPU lacks, as glibc does ("CPU ISA level is
    /// lower than required").
    pub(super) fn check_isa_level(&mut self, r: &Reader<'_>) -> Result<()> {
        let Some(p) = self.property else {
            return Ok(());
        };
        let Ok(t) = self.table(
            r,
            p.vaddr,
            p.filesz.min(4096),
            Placement::Any,
            "PT_GNU_PROPERTY",
        ) else {
            return Ok(());
        };
        let Ok(notes) = r.bytes(t.file_off, t.len, "PT_GNU_PROPERTY") else {
            return Ok(());
        };
        let u32_at = |b: &[u8], o: usize| -> Option<u32> {
            Some(u32::from_le_bytes(b.get(o..o + 4)?.try_into().ok()?))
        };
        let mut at = 0usize;
        while let (Some(namesz), Some(descsz), Some(kind)) = (
            u32_at(notes, at),
            u32_at(notes, at + 4),
            u32_at(notes, at + 8),
        ) {
            let name_end = at + 12 + (namesz as usize).next_multiple_of(4);
            let desc = name_end.next_multiple_of(8);
            let end = desc.saturating_add(descsz as usize);
            let Some(d) = notes.get(desc..end) else { break };
            if kind == NT_GNU_PROPERTY_TYPE_0 && notes.get(at + 12..at + 16) == Some(b"GNU\0") {
                let mut q = 0usize;
                while let (Some(pt), Some(sz)) = (u32_at(d, q), u32_at(d, q + 4)) {
                    if pt == GNU_PROPERTY_X86_ISA_1_NEEDED && sz == 4 {
                        self.isa_needed = u32_at(d, q + 8).unwrap_or(0);
                    }
                    q = (q + 8).saturating_add(sz as usize).next_multiple_of(8);
                }
            }
            at = end.next_multiple_of(8);
        }
        let have = cpu_isa_levels();
        if self.isa_needed & have != self.isa_needed {
            return Err(Error::unsupported(
                &self.path,
                format!(
                    "CPU ISA level is lower than required (GNU_PROPERTY_X86_ISA_1_NEEDED {:#x}, this CPU has {have:#x}: bit 0 baseline, 1 x86-64-v2, 2 v3, 3 v4), as glibc refuses it",
                    self.isa_needed
                ),
            ));
        }
        Ok(())
    }
}

/// The x86-64 ISA levels of this CPU, as glibc counts them for
/// `GNU_PROPERTY_X86_ISA_1_NEEDED`: bit 0 baseline, 1 x86-64-v2, 2 v3, 3 v4 (each level
/// only with the ones below it).
pub fn cpu_isa_levels() -> u32 {
    use std::arch::is_x86_feature_detected as has;
    let v2 = has!("cmpxchg16b")
        && has!("popcnt")
        && has!("sse3")
        && has!("sse4.1")
        && has!("sse4.2")
        && has!("ssse3");
    let v3 = v2
        && has!("avx")
        && has!("avx2")
        && has!("bmi1")
        && has!("bmi2")
        && has!("f16c")
        && has!("fma")
        && has!("lzcnt")
        && has!("movbe")
        && has!("xsave");
    let v4 = v3
        && has!("avx512f")
        && has!("avx512bw")
        && has!("avx512cd")
        && has!("avx512dq")
        && has!("avx512vl");
    1 | u32::from(v2) << 1 | u32::from(v3) << 2 | u32::from(v4) << 3
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_non_elf_and_truncated_headers() {
        let p = Path::new("x.so");
        let e = ElfInfo::parse(p, b"hello").unwrap_err().to_string();
        assert!(
            e.contains("x.so") && e.contains("ELF identification"),
            "{e}"
        );
        let e = ElfInfo::parse(p, b"\x7fELF\x02\x01\x01\0\0\0\0\0\0\0\0\0")
            .unwrap_err()
            .to_string();
        assert!(e.contains("ELF header"), "{e}");
        let e = ElfInfo::parse(p, b"\x7fELG\x02\x01\x01\0\0\0\0\0\0\0\0\0")
            .unwrap_err()
            .to_string();
        assert!(e.contains("magic"), "{e}");
    }
}
