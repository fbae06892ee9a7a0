//! The second phase: the dynamic section (`ElfInfo::parse_dynamic`, which calls the
//! parts in the other files in order): its entries and flags, the string table and
//! the names in it, init/fini.

use super::consts::*;
use super::reader::{Placement, Reader};
use super::ElfInfo;
use crate::error::{Error, Result};
use object::elf as oelf;
use object::LittleEndian as LE;
use std::path::PathBuf;

/// The entries of a dynamic section: (index, tag, value), up to `DT_NULL`.
pub(super) struct Dynamic {
    entries: Vec<(u64, u64, u64)>,
}

impl Dynamic {
    /// The value of the first entry with `tag`.
    pub(super) fn get(&self, tag: u64) -> Option<u64> {
        self.entries.iter().find(|e| e.1 == tag).map(|e| e.2)
    }
}

/// The string table, for the names the dynamic section and version tables refer to.
pub(super) struct Strings<'a> {
    bytes: &'a [u8],
    size: u64,
    path: PathBuf,
}

impl Strings<'_> {
    /// The NUL-terminated string at `off`, or an error naming `what`.
    pub(super) fn get(&self, off: u64, what: &dyn std::fmt::Display) -> Result<String> {
        let s = self.bytes.get(off as usize..).unwrap_or(&[]);
        match s.iter().position(|&b| b == 0) {
            Some(n) if off < self.size => Ok(String::from_utf8_lossy(&s[..n]).into_owned()),
            _ => Err(Error::malformed(
                &self.path,
                format!(
                    "{what}: string offset {off:#x} outside DT_STRTAB (size {:#x}) or unterminated",
                    self.size
                ),
            )),
        }
    }
}

impl ElfInfo {
    /// The second phase: the dynamic section and every table it points to, read through
    /// `r` (the whole file, or its mapped segments), in parts: the entries and flags, the
    /// string table and the names in it, the hash tables (which give the number of
    /// symbols), the symbol table, the relocation tables, init/fini, the versions.
    pub(crate) fn parse_dynamic(&mut self, r: &Reader<'_>) -> Result<()> {
        if let Some(t) = self.tls {
            if t.filesz > 0 {
                self.table(
                    r,
                    t.vaddr,
                    t.filesz,
                    Placement::Any,
                    "PT_TLS initialisation image",
                )?;
            }
        }
        let dynamic = self.dynamic_entries(r)?;
        self.check_isa_level(r)?;
        self.apply_dynamic_flags(&dynamic)?;
        let strings = self.string_table(r, &dynamic)?;
        self.dynamic_names(&dynamic, &strings)?;
        if let Some(addr) = dynamic.get(DT_HASH) {
            self.parse_sysv_hash(r, addr)?;
        }
        if let Some(addr) = dynamic.get(DT_GNU_HASH) {
            self.parse_gnu_hash(r, addr)?;
        }
        self.parse_symtab(r, &dynamic)?;
        self.parse_relocation_tables(r, &dynamic)?;
        self.parse_init_fini(r, &dynamic)?;
        self.parse_versions(r, &dynamic, &strings)
    }

    fn bad(&self, item: String) -> Error {
        Error::malformed(&self.path, item)
    }

    /// The dynamic section's entries up to `DT_NULL`.
    fn dynamic_entries(&self, r: &Reader<'_>) -> Result<Dynamic> {
        let bad = |item: String| self.bad(item);
        let d = self.dynamic;
        if d.filesz % 16 != 0 || d.filesz == 0 {
            return Err(bad(format!(
                "PT_DYNAMIC size {:#x} is not a non-zero multiple of 16",
                d.filesz
            )));
        }
        // The dynamic section is read by file offset here, and by address once mapped
        // (the debugger's `l_ld`, `dl_iterate_phdr`'s program headers): both must name the
        // same bytes of one loaded segment (glibc's `dlopen` crashes on a file where they
        // do not).
        let inside = self.loads.iter().any(|l| {
            d.vaddr >= l.vaddr
                && d.vaddr
                    .checked_add(d.memsz.max(d.filesz))
                    .is_some_and(|e| e <= l.vaddr + l.memsz)
                && d.offset.checked_sub(l.offset) == Some(d.vaddr - l.vaddr)
        });
        if !inside {
            return Err(bad(format!(
                "PT_DYNAMIC (address {:#x}, file offset {:#x}) is not inside a PT_LOAD segment",
                d.vaddr, d.offset
            )));
        }
        let table: &[oelf::Dyn64<LE>] = r.pods(d.offset, d.filesz / 16, "PT_DYNAMIC contents")?;
        let mut entries = Vec::new();
        for (i, e) in table.iter().enumerate() {
            let (tag, val) = (e.d_tag.get(LE).0 as u64, e.d_val.get(LE));
            if tag == DT_NULL {
                return Ok(Dynamic { entries });
            }
            entries.push((i as u64, tag, val));
        }
        Err(bad("dynamic section has no DT_NULL terminator".into()))
    }

    /// The flags and the entries glibc checks or refuses.
    fn apply_dynamic_flags(&mut self, dynamic: &Dynamic) -> Result<()> {
        let path = self.path.clone();
        let bad = |item: String| Error::malformed(&path, item);
        let get = |tag: u64| dynamic.get(tag);
        let entries = &dynamic.entries[..];
        // Every tag glibc 2.36 acts on for a shared object on x86-64 is handled here or
        // below; unknown tags are ignored, as glibc ignores them. Refused (each naming
        // the entry) is only what glibc refuses too.
        for (i, tag, val) in entries {
            match *tag {
                DT_FLAGS => {
                    self.textrel |= val & DF_TEXTREL != 0;
                    self.static_tls |= val & DF_STATIC_TLS != 0;
                }
                DT_TEXTREL => self.textrel = true,
                DT_FLAGS_1 => {
                    // glibc's dlopen refuses both (every load here is a dlopen).
                    if val & DF_1_PIE != 0 {
                        return Err(Error::unsupported(
                            &path,
                            format!("dynamic entry {i}: DT_FLAGS_1 has DF_1_PIE: cannot dynamically load a position-independent executable"),
                        ));
                    }
                    if val & DF_1_NOOPEN != 0 {
                        return Err(Error::unsupported(
                            &path,
                            format!("dynamic entry {i}: DT_FLAGS_1 has DF_1_NOOPEN: the shared object cannot be dlopen()ed"),
                        ));
                    }
                    self.nodelete |= val & DF_1_NODELETE != 0;
                    self.nodeflib |= val & DF_1_NODEFLIB != 0;
                }
                // glibc asserts these (a fatal "Inconsistency detected by ld.so").
                DT_PLTREL if *val != DT_RELA => {
                    return Err(bad(format!(
                        "dynamic entry {i}: DT_PLTREL = {val} (x86-64 has only DT_RELA)"
                    )))
                }
                DT_SYMENT if *val != 24 => {
                    return Err(bad(format!(
                        "dynamic entry {i}: DT_SYMENT = {val} (expected 24)"
                    )))
                }
                DT_RELAENT if *val != 24 => {
                    return Err(bad(format!(
                        "dynamic entry {i}: DT_RELAENT = {val} (expected 24)"
                    )))
                }
                DT_RELRENT if *val != 8 => {
                    return Err(bad(format!(
                        "dynamic entry {i}: DT_RELRENT = {val} (expected 8)"
                    )))
                }
                // glibc on x86-64 never processes DT_REL (ELF_MACHINE_NO_REL) and runs
                // DT_PREINIT_ARRAY only for the executable: both are ignored, as there.
                DT_REL if get(DT_RELSZ).unwrap_or(0) != 0 => {
                    tracing::warn!(library = %path.display(), "dynamic entry {i}: DT_REL relocations are ignored on x86-64 (as glibc ignores them)");
                }
                DT_PREINIT_ARRAY => {
                    tracing::debug!(library = %path.display(), "dynamic entry {i}: DT_PREINIT_ARRAY of a shared object is not run (as with glibc)");
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// `DT_STRTAB` (checked to lie in a segment) and a reader of its strings.
    fn string_table<'r>(&mut self, r: &'r Reader<'_>, dynamic: &Dynamic) -> Result<Strings<'r>> {
        let bad = |item: String| self.bad(item);
        let strtab_addr = dynamic
            .get(DT_STRTAB)
            .ok_or_else(|| bad("no DT_STRTAB".into()))?;
        let strsz = dynamic
            .get(DT_STRSZ)
            .ok_or_else(|| bad("no DT_STRSZ".into()))?;
        self.strtab = self.table(r, strtab_addr, strsz, Placement::Any, "DT_STRTAB")?;
        let bytes = r.bytes(self.strtab.file_off, strsz, "DT_STRTAB")?;
        Ok(Strings {
            bytes,
            size: strsz,
            path: self.path.clone(),
        })
    }

    /// `DT_NEEDED`, `DT_SONAME`, `DT_RPATH`, `DT_RUNPATH`.
    fn dynamic_names(&mut self, dynamic: &Dynamic, strings: &Strings<'_>) -> Result<()> {
        let string = |off: u64, what: &dyn std::fmt::Display| strings.get(off, what);
        let entries = &dynamic.entries[..];
        for (i, tag, val) in entries {
            match *tag {
                DT_NEEDED => self.needed.push(string(
                    *val,
                    &format_args!("dynamic entry {i} (DT_NEEDED)"),
                )?),
                DT_SONAME => {
                    self.soname = Some(string(
                        *val,
                        &format_args!("dynamic entry {i} (DT_SONAME)"),
                    )?)
                }
                DT_RPATH => {
                    self.rpath = Some(string(*val, &format_args!("dynamic entry {i} (DT_RPATH)"))?)
                }
                DT_RUNPATH => {
                    self.runpath = Some(string(
                        *val,
                        &format_args!("dynamic entry {i} (DT_RUNPATH)"),
                    )?)
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// `DT_INIT`, `DT_FINI` (checked to be code) and the init/fini arrays.
    fn parse_init_fini(&mut self, r: &Reader<'_>, dynamic: &Dynamic) -> Result<()> {
        let path = self.path.clone();
        let bad = |item: String| Error::malformed(&path, item);
        let get = |tag: u64| dynamic.get(tag);
        self.init = get(DT_INIT);
        self.fini = get(DT_FINI);
        for (a, s, slot, what) in [
            (DT_INIT_ARRAY, DT_INIT_ARRAYSZ, 0, "DT_INIT_ARRAY"),
            (DT_FINI_ARRAY, DT_FINI_ARRAYSZ, 1, "DT_FINI_ARRAY"),
        ] {
            if let Some(addr) = get(a) {
                let sz = get(s).unwrap_or(0);
                if sz % 8 != 0 {
                    return Err(bad(format!("{what} size {sz:#x} is not a multiple of 8")));
                }
                let t = self.table(r, addr, sz, Placement::Memory, what)?;
                if slot == 0 {
                    self.init_array = t;
                } else {
                    self.fini_array = t;
                }
            }
        }
        for (f, what) in [(self.init, "DT_INIT"), (self.fini, "DT_FINI")] {
            if let Some(addr) = f {
                if !self
                    .loads
                    .iter()
                    .any(|l| l.flags & PF_X != 0 && addr >= l.vaddr && addr < l.vaddr + l.memsz)
                {
                    return Err(bad(format!(
                        "{what} {addr:#x} is not inside an executable segment"
                    )));
                }
            }
        }
        Ok(())
    }
}
