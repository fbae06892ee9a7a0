//! ELF parsing with validation: the file header, program headers, the dynamic section
//! and the dynamic tables (symbols, strings, hash tables, versions, relocations).
//!
//! Everything is read from the file's bytes with bounds checks; every table the loader
//! later reads from the mapped image is checked here to lie inside the file-backed part
//! (the memory part, for init/fini arrays) of one readable `PT_LOAD` segment, so
//! reading it after mapping cannot fault.
//! A malformed file gives [`Error::Malformed`] naming the file and the item.
//!
//! The structures are `object`'s zero-copy `read::elf` types (`FileHeader64`,
//! `ProgramHeader64`, `Dyn64`, `Sym64`, `Rela64`, the hash headers, `Verdef`,
//! `Verneed` and their aux entries), read in place through a bounds-checked `Reader`
//! over the parts of the file at hand (the header page, then the mapped segments: the
//! whole file is never read into memory). The validation is ours: `object`'s own
//! `ElfFile` needs the whole file contiguous and its errors do not name the item and
//! offset, which the loader's errors (and the fuzz oracle that compares them) do.

use crate::error::{Error, Result};
use object::elf as oelf;
use object::LittleEndian as LE;
use std::path::{Path, PathBuf};

/// ELF constants used by the loader (x86_64, 64-bit, little-endian only).
#[allow(missing_docs)]
pub mod consts {
    pub const PT_LOAD: u32 = 1;
    pub const PT_DYNAMIC: u32 = 2;
    pub const PT_INTERP: u32 = 3;
    pub const PT_PHDR: u32 = 6;
    pub const PT_TLS: u32 = 7;
    pub const PT_GNU_EH_FRAME: u32 = 0x6474_e550;
    pub const PT_GNU_STACK: u32 = 0x6474_e551;
    pub const PT_GNU_RELRO: u32 = 0x6474_e552;
    pub const PT_GNU_PROPERTY: u32 = 0x6474_e553;
    pub const NT_GNU_PROPERTY_TYPE_0: u32 = 5;
    pub const GNU_PROPERTY_X86_ISA_1_NEEDED: u32 = 0xc000_8002;
    pub const PF_X: u32 = 1;
    pub const PF_W: u32 = 2;
    pub const PF_R: u32 = 4;

    pub const DT_NULL: u64 = 0;
    pub const DT_NEEDED: u64 = 1;
    pub const DT_PLTRELSZ: u64 = 2;
    pub const DT_HASH: u64 = 4;
    pub const DT_STRTAB: u64 = 5;
    pub const DT_SYMTAB: u64 = 6;
    pub const DT_RELA: u64 = 7;
    pub const DT_RELASZ: u64 = 8;
    pub const DT_RELAENT: u64 = 9;
    pub const DT_STRSZ: u64 = 10;
    pub const DT_SYMENT: u64 = 11;
    pub const DT_INIT: u64 = 12;
    pub const DT_FINI: u64 = 13;
    pub const DT_SONAME: u64 = 14;
    pub const DT_RPATH: u64 = 15;
    pub const DT_SYMBOLIC: u64 = 16;
    pub const DT_REL: u64 = 17;
    pub const DT_PLTREL: u64 = 20;
    pub const DT_TEXTREL: u64 = 22;
    pub const DT_JMPREL: u64 = 23;
    pub const DT_BIND_NOW: u64 = 24;
    pub const DT_INIT_ARRAY: u64 = 25;
    pub const DT_FINI_ARRAY: u64 = 26;
    pub const DT_INIT_ARRAYSZ: u64 = 27;
    pub const DT_FINI_ARRAYSZ: u64 = 28;
    pub const DT_RUNPATH: u64 = 29;
    pub const DT_FLAGS: u64 = 30;
    pub const DT_PREINIT_ARRAY: u64 = 32;
    pub const DT_RELSZ: u64 = 18;
    pub const DT_RELRSZ: u64 = 35;
    pub const DT_RELR: u64 = 36;
    pub const DT_RELRENT: u64 = 37;
    pub const DT_GNU_HASH: u64 = 0x6fff_fef5;
    pub const DT_TLSDESC_PLT: u64 = 0x6fff_fef6;
    pub const DT_RELACOUNT: u64 = 0x6fff_fff9;
    pub const DT_FLAGS_1: u64 = 0x6fff_fffb;
    pub const DT_VERSYM: u64 = 0x6fff_fff0;
    pub const DT_VERDEF: u64 = 0x6fff_fffc;
    pub const DT_VERDEFNUM: u64 = 0x6fff_fffd;
    pub const DT_VERNEED: u64 = 0x6fff_fffe;
    pub const DT_VERNEEDNUM: u64 = 0x6fff_ffff;
    pub const DF_TEXTREL: u64 = 4;
    pub const DF_STATIC_TLS: u64 = 0x10;
    pub const DF_1_NODELETE: u64 = 0x8;
    pub const DF_1_NOOPEN: u64 = 0x40;
    pub const DF_1_NODEFLIB: u64 = 0x800;
    pub const DF_1_PIE: u64 = 0x0800_0000;

    pub const STB_LOCAL: u8 = 0;
    pub const STB_GLOBAL: u8 = 1;
    pub const STB_WEAK: u8 = 2;
    pub const STB_GNU_UNIQUE: u8 = 10;
    pub const STT_NOTYPE: u8 = 0;
    pub const STT_OBJECT: u8 = 1;
    pub const STT_FUNC: u8 = 2;
    pub const STT_COMMON: u8 = 5;
    pub const STT_TLS: u8 = 6;
    pub const STT_GNU_IFUNC: u8 = 10;
    pub const SHN_UNDEF: u16 = 0;
    pub const SHN_ABS: u16 = 0xfff1;

    pub const R_X86_64_NONE: u32 = 0;
    pub const R_X86_64_64: u32 = 1;
    pub const R_X86_64_PC32: u32 = 2;
    pub const R_X86_64_COPY: u32 = 5;
    pub const R_X86_64_GLOB_DAT: u32 = 6;
    pub const R_X86_64_JUMP_SLOT: u32 = 7;
    pub const R_X86_64_RELATIVE: u32 = 8;
    pub const R_X86_64_32: u32 = 10;
    pub const R_X86_64_DTPMOD64: u32 = 16;
    pub const R_X86_64_DTPOFF64: u32 = 17;
    pub const R_X86_64_TPOFF64: u32 = 18;
    pub const R_X86_64_PC64: u32 = 24;
    pub const R_X86_64_SIZE32: u32 = 32;
    pub const R_X86_64_SIZE64: u32 = 33;
    pub const R_X86_64_TLSDESC: u32 = 36;
    pub const R_X86_64_IRELATIVE: u32 = 37;
    pub const R_X86_64_RELATIVE64: u32 = 38;
}
use consts::*;

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

/// One program header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Phdr {
    /// `p_type`.
    pub kind: u32,
    /// `p_flags` (PF_R, PF_W, PF_X).
    pub flags: u32,
    /// `p_offset`.
    pub offset: u64,
    /// `p_vaddr`.
    pub vaddr: u64,
    /// `p_filesz`.
    pub filesz: u64,
    /// `p_memsz`.
    pub memsz: u64,
    /// `p_align`.
    pub align: u64,
}

/// One dynamic symbol (`Elf64_Sym`).
#[derive(Debug, Clone, Copy)]
pub struct Sym {
    /// Offset of the name in the string table.
    pub name: u32,
    /// Binding and type.
    pub info: u8,
    /// Visibility.
    pub other: u8,
    /// Section index (0 = undefined).
    pub shndx: u16,
    /// Value (link-time address, or TLS offset for STT_TLS).
    pub value: u64,
    /// Size in bytes.
    pub size: u64,
}

impl Sym {
    /// From `object`'s `Elf64_Sym` (in place in the file or the mapping).
    #[inline]
    pub fn from_object(s: &oelf::Sym64<LE>) -> Sym {
        Sym {
            name: s.st_name.get(LE),
            info: s.st_info.0,
            other: s.st_other.0,
            shndx: s.st_shndx.get(LE).0,
            value: s.st_value.get(LE),
            size: s.st_size.get(LE),
        }
    }
    /// `STB_*`.
    pub fn bind(&self) -> u8 {
        self.info >> 4
    }
    /// `STT_*`.
    pub fn kind(&self) -> u8 {
        self.info & 0xf
    }
    /// Whether the symbol is defined in this object.
    pub fn is_defined(&self) -> bool {
        self.shndx != SHN_UNDEF
    }
}

/// One relocation with addend (`Elf64_Rela`).
#[derive(Debug, Clone, Copy)]
pub struct Rela {
    /// Link-time address of the place to patch.
    pub offset: u64,
    /// Symbol index (high 32 bits of `r_info`).
    pub sym: u32,
    /// Relocation type (low 32 bits of `r_info`).
    pub kind: u32,
    /// Addend.
    pub addend: i64,
}

impl Rela {
    /// From `object`'s `Elf64_Rela` (in place in the file or the mapping).
    #[inline]
    pub fn from_object(r: &oelf::Rela64<LE>) -> Rela {
        let info = r.r_info.get(LE);
        Rela {
            offset: r.r_offset.get(LE),
            sym: (info >> 32) as u32,
            kind: info as u32,
            addend: r.r_addend.get(LE),
        }
    }
}

/// A version name from `DT_VERDEF` or `DT_VERNEED`, by version index.
#[derive(Debug, Clone)]
pub struct VersionName {
    /// The version string, e.g. `GLIBC_2.2.5`.
    pub name: String,
    /// For a needed version: the file it is expected from (e.g. `libc.so.6`).
    pub file: Option<String>,
    /// For a defined version: whether it is the base (the file's own name) entry.
    pub is_base: bool,
    /// For a needed version: `VER_FLG_WEAK` (its absence is not an error).
    pub weak: bool,
}

/// A contiguous table, as a file offset (for parsing) and a link-time address (for the
/// mapped image); its length in bytes has been checked against both.
#[derive(Debug, Clone, Copy, Default)]
pub struct Table {
    /// Offset in the file.
    pub file_off: u64,
    /// Link-time virtual address.
    pub vaddr: u64,
    /// Length in bytes.
    pub len: u64,
}

/// The GNU hash table's header fields (the arrays follow at fixed offsets).
#[derive(Debug, Clone, Copy)]
pub struct GnuHash {
    /// The whole table.
    pub table: Table,
    /// Number of buckets.
    pub nbuckets: u32,
    /// Index of the first symbol in the hash table.
    pub symoffset: u32,
    /// Number of 64-bit bloom words.
    pub bloom_size: u32,
    /// Bloom shift.
    pub bloom_shift: u32,
}

/// The SysV hash table's header.
#[derive(Debug, Clone, Copy)]
pub struct SysvHash {
    /// The whole table.
    pub table: Table,
    /// Number of buckets.
    pub nbucket: u32,
    /// Number of chain entries (= number of symbols).
    pub nchain: u32,
}

/// Everything the loader needs from one ELF shared object, validated.
#[derive(Debug, Clone)]
pub struct ElfInfo {
    /// The file, for messages.
    pub path: PathBuf,
    /// All program headers.
    pub phdrs: Vec<Phdr>,
    /// `PT_LOAD` headers, in address order.
    pub loads: Vec<Phdr>,
    /// File offset of the program header table.
    pub phoff: u64,
    /// `PT_DYNAMIC`.
    pub dynamic: Phdr,
    /// `PT_TLS`, if the object has thread-local storage.
    pub tls: Option<Phdr>,
    /// `PT_GNU_EH_FRAME`, if present.
    pub eh_frame_hdr: Option<Phdr>,
    /// `PT_GNU_RELRO`, if present.
    pub relro: Option<Phdr>,
    /// `PT_GNU_PROPERTY`, if present.
    pub property: Option<Phdr>,
    /// The x86 ISA levels the object needs (`GNU_PROPERTY_X86_ISA_1_NEEDED`: bit 0
    /// baseline, 1 x86-64-v2, 2 v3, 3 v4), 0 if it does not say.
    pub isa_needed: u32,
    /// Lowest `PT_LOAD` address, page-aligned down.
    pub min_vaddr: u64,
    /// End of the highest `PT_LOAD` (memsz), page-aligned up.
    pub max_vaddr: u64,
    /// Largest `PT_LOAD` alignment (at least the page size).
    pub max_align: u64,
    /// `DT_NEEDED` names, in order.
    pub needed: Vec<String>,
    /// `DT_SONAME`.
    pub soname: Option<String>,
    /// `DT_RPATH` (colon-separated), used only when there is no `DT_RUNPATH`.
    pub rpath: Option<String>,
    /// `DT_RUNPATH` (colon-separated).
    pub runpath: Option<String>,
    /// `.dynsym`.
    pub symtab: Table,
    /// Number of dynamic symbols.
    pub nsyms: u32,
    /// `.dynstr`.
    pub strtab: Table,
    /// `DT_GNU_HASH`.
    pub gnu_hash: Option<GnuHash>,
    /// `DT_HASH`.
    pub sysv_hash: Option<SysvHash>,
    /// `DT_VERSYM` (one u16 per symbol).
    pub versym: Option<Table>,
    /// Version names by version index (both defined and needed versions).
    pub versions: Vec<Option<VersionName>>,
    /// `DT_RELA` relocations.
    pub rela: Table,
    /// `DT_RELACOUNT`: the leading RELATIVE relocations.
    pub relacount: u64,
    /// `DT_JMPREL` relocations.
    pub jmprel: Table,
    /// `DT_RELR` packed relative relocations (8-byte entries; see [`walk_relr`]).
    pub relr: Table,
    /// `DT_INIT`.
    pub init: Option<u64>,
    /// `DT_FINI`.
    pub fini: Option<u64>,
    /// `DT_INIT_ARRAY` (entries are 8 bytes).
    pub init_array: Table,
    /// `DT_FINI_ARRAY`.
    pub fini_array: Table,
    /// `DF_STATIC_TLS`: the object uses the initial-exec TLS model.
    pub static_tls: bool,
    /// `DT_TEXTREL` or `DF_TEXTREL`: relocations may target non-writable segments,
    /// which are made writable while the library is relocated (as glibc does).
    pub textrel: bool,
    /// `DF_1_NODELETE` (linked with `-z nodelete`): never unloaded by `dlclose`.
    pub nodelete: bool,
    /// `DF_1_NODEFLIB` (linked with `-z nodeflib`): its `dlopen`s and dependencies are
    /// not searched in the cache or the default directories.
    pub nodeflib: bool,
}

/// The entries of a dynamic section: (index, tag, value), up to `DT_NULL`.
struct Dynamic {
    entries: Vec<(u64, u64, u64)>,
}

impl Dynamic {
    /// The value of the first entry with `tag`.
    fn get(&self, tag: u64) -> Option<u64> {
        self.entries.iter().find(|e| e.1 == tag).map(|e| e.2)
    }
}

/// The string table, for the names the dynamic section and version tables refer to.
struct Strings<'a> {
    bytes: &'a [u8],
    size: u64,
    path: PathBuf,
}

impl Strings<'_> {
    /// The NUL-terminated string at `off`, or an error naming `what`.
    fn get(&self, off: u64, what: &dyn std::fmt::Display) -> Result<String> {
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

/// Where a validated table must live.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Placement {
    /// Inside the file-backed part of any PT_LOAD.
    Any,
    /// Inside the memory part (filesz or memsz) of any PT_LOAD (init/fini arrays).
    Memory,
}

/// Bounds-checked reads by file offset, from the whole file or from the parts of it that
/// are at hand (the header, the mapped segments).
pub(crate) struct Reader<'a> {
    path: &'a Path,
    /// (file offset, bytes) ranges available.
    ranges: Vec<(u64, &'a [u8])>,
    /// The file's length.
    file_len: u64,
}

impl<'a> Reader<'a> {
    /// A reader over the whole file's bytes.
    pub(crate) fn whole(path: &'a Path, data: &'a [u8]) -> Self {
        Reader {
            path,
            ranges: vec![(0, data)],
            file_len: data.len() as u64,
        }
    }

    /// A reader over some ranges of a file of `file_len` bytes.
    pub(crate) fn ranges(path: &'a Path, ranges: Vec<(u64, &'a [u8])>, file_len: u64) -> Self {
        Reader {
            path,
            ranges,
            file_len,
        }
    }

    fn past_end(&self, off: u64, len: u64, what: impl std::fmt::Display) -> Error {
        Error::malformed(
            self.path,
            format!(
                "{what} at file offset {off:#x} (+{len:#x}) is past the end of the file ({:#x} bytes)",
                self.file_len
            ),
        )
    }

    /// Checks that `[off, off+len)` lies inside the file.
    fn in_file(&self, off: u64, len: u64, what: impl std::fmt::Display) -> Result<()> {
        match off.checked_add(len) {
            Some(end) if end <= self.file_len => Ok(()),
            _ => Err(self.past_end(off, len, what)),
        }
    }

    fn bytes(&self, off: u64, len: u64, what: impl std::fmt::Display) -> Result<&'a [u8]> {
        self.in_file(off, len, &what)?;
        let end = off + len;
        for &(start, data) in &self.ranges {
            if off >= start && end <= start + data.len() as u64 {
                return Ok(&data[(off - start) as usize..(end - start) as usize]);
            }
        }
        Err(Error::malformed(
            self.path,
            format!("{what} at file offset {off:#x} (+{len:#x}) is not inside a loaded segment"),
        ))
    }
    /// The `T` (one of `object`'s ELF structures, whose fields are byte arrays: any
    /// alignment) at `off`, in place.
    fn pod<T: object::pod::Pod>(&self, off: u64, what: impl std::fmt::Display) -> Result<&'a T> {
        let b = self.bytes(off, std::mem::size_of::<T>() as u64, &what)?;
        object::pod::from_bytes::<T>(b)
            .map(|(v, _)| v)
            .map_err(|()| {
                Error::malformed(
                    self.path,
                    format!("{what} at file offset {off:#x} cannot be read"),
                )
            })
    }
    /// `count` consecutive `T`s at `off`, in place.
    fn pods<T: object::pod::Pod>(
        &self,
        off: u64,
        count: u64,
        what: impl std::fmt::Display,
    ) -> Result<&'a [T]> {
        let b = self.bytes(
            off,
            count.saturating_mul(std::mem::size_of::<T>() as u64),
            &what,
        )?;
        object::pod::slice_from_bytes::<T>(b, count as usize)
            .map(|(v, _)| v)
            .map_err(|()| {
                Error::malformed(
                    self.path,
                    format!("{what} at file offset {off:#x} cannot be read"),
                )
            })
    }
}

/// The system page size (4 KiB on x86_64 Linux).
pub const PAGE: u64 = 4096;

/// The largest `PT_TLS` alignment accepted (1 MiB).
pub const MAX_TLS_ALIGN: u64 = 1 << 20;

fn page_down(x: u64) -> u64 {
    x & !(PAGE - 1)
}

fn page_up(x: u64) -> Option<u64> {
    x.checked_add(PAGE - 1).map(|v| v & !(PAGE - 1))
}

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

    /// Finds the PT_LOAD holding `[vaddr, vaddr+len)` and returns the table's file offset.
    fn table(
        &self,
        r: &Reader<'_>,
        vaddr: u64,
        len: u64,
        placement: Placement,
        what: impl std::fmt::Display,
    ) -> Result<Table> {
        let end = vaddr.checked_add(len).ok_or_else(|| {
            Error::malformed(
                &self.path,
                format!("{what} at {vaddr:#x} (+{len:#x}) overflows"),
            )
        })?;
        for l in &self.loads {
            let limit = match placement {
                Placement::Memory => l.memsz,
                _ => l.filesz,
            };
            if vaddr >= l.vaddr && end <= l.vaddr + limit {
                if l.flags & PF_R == 0 {
                    return Err(Error::malformed(
                        &self.path,
                        format!("{what} at {vaddr:#x} lies in a PT_LOAD segment without PF_R"),
                    ));
                }
                let file_off = l.offset + (vaddr - l.vaddr);
                if placement != Placement::Memory {
                    r.bytes(file_off, len, what)?;
                }
                return Ok(Table {
                    file_off,
                    vaddr,
                    len,
                });
            }
        }
        Err(Error::malformed(
            &self.path,
            format!("{what} at {vaddr:#x} (+{len:#x}) is not inside any PT_LOAD segment's file contents"),
        ))
    }

    /// Reads `GNU_PROPERTY_X86_ISA_1_NEEDED` from `PT_GNU_PROPERTY` (when that lies in a
    /// loaded segment; malformed notes are ignored, as they say nothing) and refuses an
    /// object that needs an ISA level this CPU lacks, as glibc does ("CPU ISA level is
    /// lower than required").
    fn check_isa_level(&mut self, r: &Reader<'_>) -> Result<()> {
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

    /// `DT_HASH` at `addr`: its header, and every chain checked to end.
    fn parse_sysv_hash(&mut self, r: &Reader<'_>, addr: u64) -> Result<()> {
        let path = self.path.clone();
        let bad = |item: String| Error::malformed(&path, item);
        let head = self.table(r, addr, 8, Placement::Any, "DT_HASH header")?;
        let h: &oelf::HashHeader<LE> = r.pod(head.file_off, "DT_HASH header")?;
        let (nbucket, nchain) = (h.bucket_count.get(LE), h.chain_count.get(LE));
        let len = 8 + (u64::from(nbucket) + u64::from(nchain)) * 4;
        let table = self.table(r, addr, len, Placement::Any, "DT_HASH table")?;
        if nbucket == 0 {
            return Err(bad("DT_HASH has zero buckets".into()));
        }
        // Every bucket and chain entry is a symbol index below nchain, and the
        // chains end (at index 0). A linker puts each symbol on one chain: an index
        // met twice is a chain that goes round a cycle or runs into another bucket's.
        let words = r.bytes(table.file_off + 8, len - 8, "DT_HASH table")?;
        let word = |k: u64| {
            let k = k as usize * 4;
            u32::from_le_bytes(words[k..k + 4].try_into().expect("4 bytes"))
        };
        // The bucket (+1) whose chain has passed each symbol index.
        let mut seen_by = vec![0u32; nchain as usize];
        for b in 0..nbucket {
            let mut i = word(u64::from(b));
            while i != 0 {
                if i >= nchain {
                    return Err(bad(format!(
                        "DT_HASH chain of bucket {b} reaches symbol index {i}, beyond nchain {nchain}"
                    )));
                }
                match seen_by[i as usize] {
                    0 => seen_by[i as usize] = b + 1,
                    o if o == b + 1 => {
                        return Err(bad(format!(
                            "DT_HASH chains do not end: the chain of bucket {b} goes round a cycle at symbol index {i}"
                        )))
                    }
                    o => {
                        return Err(bad(format!(
                            "DT_HASH chains do not end where they should: symbol index {i} is on the chains of buckets {} and {b}",
                            o - 1
                        )))
                    }
                }
                i = word(u64::from(nbucket) + u64::from(i));
            }
        }
        self.sysv_hash = Some(SysvHash {
            table,
            nbucket,
            nchain,
        });
        Ok(())
    }

    /// `DT_GNU_HASH` at `addr`: its header, buckets and chains (the last chain gives the
    /// number of symbols).
    fn parse_gnu_hash(&mut self, r: &Reader<'_>, addr: u64) -> Result<()> {
        let path = self.path.clone();
        let bad = |item: String| Error::malformed(&path, item);
        let head = self.table(r, addr, 16, Placement::Any, "DT_GNU_HASH header")?;
        let h: &oelf::GnuHashHeader<LE> = r.pod(head.file_off, "DT_GNU_HASH header")?;
        let nbuckets = h.bucket_count.get(LE);
        let symoffset = h.symbol_base.get(LE);
        let bloom_size = h.bloom_count.get(LE);
        let bloom_shift = h.bloom_shift.get(LE);
        if nbuckets == 0 || bloom_size == 0 || !bloom_size.is_power_of_two() || bloom_shift >= 64 {
            return Err(bad(format!(
                "DT_GNU_HASH header: nbuckets {nbuckets}, bloom size {bloom_size}, bloom shift {bloom_shift} are invalid"
            )));
        }
        let fixed = 16 + u64::from(bloom_size) * 8 + u64::from(nbuckets) * 4;
        let fixed_t = self.table(r, addr, fixed, Placement::Any, "DT_GNU_HASH buckets")?;
        // The chain array runs from symoffset to the last symbol; find its end.
        let buckets_off = fixed_t.file_off + 16 + u64::from(bloom_size) * 8;
        let buckets = r.bytes(buckets_off, u64::from(nbuckets) * 4, "DT_GNU_HASH buckets")?;
        let mut max_index: Option<u32> = None;
        for (b, chunk) in buckets.chunks_exact(4).enumerate() {
            let v = u32::from_le_bytes(chunk.try_into().expect("4 bytes"));
            if v != 0 {
                if v < symoffset {
                    return Err(bad(format!(
                        "DT_GNU_HASH bucket {b} = {v} is below symoffset {symoffset}"
                    )));
                }
                max_index = Some(max_index.map_or(v, |m| m.max(v)));
            }
        }
        let mut nsyms = symoffset;
        if let Some(start) = max_index {
            // The chain of the highest bucket runs to the last symbol: walk it over
            // what the segment holds after the chain array's start.
            let chains_off = buckets_off + u64::from(nbuckets) * 4;
            let chains_vaddr = addr + (chains_off - fixed_t.file_off);
            let seg = self
                .loads
                .iter()
                .find(|l| chains_vaddr >= l.vaddr && chains_vaddr < l.vaddr + l.filesz)
                .ok_or_else(|| bad("DT_GNU_HASH chains are outside every PT_LOAD".into()))?;
            let avail = seg.vaddr + seg.filesz - chains_vaddr;
            let chains = r.bytes(chains_off, avail - avail % 4, "DT_GNU_HASH chain")?;
            let mut i = start;
            loop {
                let at = (i - symoffset) as usize * 4;
                let Some(word) = chains.get(at..at + 4) else {
                    return Err(bad(format!(
                        "DT_GNU_HASH chain from bucket value {start} runs past its segment"
                    )));
                };
                if u32::from_le_bytes(word.try_into().expect("4 bytes")) & 1 == 1 {
                    break;
                }
                i = i
                    .checked_add(1)
                    .ok_or_else(|| bad("DT_GNU_HASH chain never ends".into()))?;
            }
            nsyms = i + 1;
        }
        let len = (chains_off_len(fixed, nsyms, symoffset))
            .ok_or_else(|| bad("DT_GNU_HASH size overflows".into()))?;
        let table = self.table(r, addr, len, Placement::Any, "DT_GNU_HASH table")?;
        self.gnu_hash = Some(GnuHash {
            table,
            nbuckets,
            symoffset,
            bloom_size,
            bloom_shift,
        });
        self.nsyms = nsyms;
        Ok(())
    }

    /// `DT_SYMTAB`, as long as the hash tables say, not overlapping the other tables.
    fn parse_symtab(&mut self, r: &Reader<'_>, dynamic: &Dynamic) -> Result<()> {
        let path = self.path.clone();
        let bad = |item: String| Error::malformed(&path, item);
        let get = |tag: u64| dynamic.get(tag);
        let name = |_: u64| "DT_SYMTAB";
        if let Some(h) = self.sysv_hash {
            self.nsyms = self.nsyms.max(h.nchain);
        }
        if self.gnu_hash.is_none() && self.sysv_hash.is_none() {
            return Err(bad(
                "neither DT_GNU_HASH nor DT_HASH present (symbols cannot be looked up)".into(),
            ));
        }
        let symtab_addr = get(DT_SYMTAB).ok_or_else(|| bad("no DT_SYMTAB".into()))?;
        self.symtab = self.table(
            r,
            symtab_addr,
            u64::from(self.nsyms) * 24,
            Placement::Any,
            name(DT_SYMTAB),
        )?;

        // The symbol count comes from the hash tables; a GNU hash chain that does not end
        // where the symbols do makes it run on over the tables after the symbol table
        // (the string table, the hash tables themselves), which no linker lays out so.
        let sym_end = symtab_addr + u64::from(self.nsyms) * 24;
        for (t, what) in [
            (Some(self.strtab), "DT_STRTAB"),
            (self.gnu_hash.map(|g| g.table), "DT_GNU_HASH"),
            (self.sysv_hash.map(|h| h.table), "DT_HASH"),
        ] {
            let Some(t) = t else { continue };
            if t.len > 0 && symtab_addr < t.vaddr + t.len && t.vaddr < sym_end {
                let why = if self.gnu_hash.is_some() {
                    "DT_GNU_HASH chains do not end within the symbol table: "
                } else {
                    ""
                };
                return Err(bad(format!(
                    "{why}DT_SYMTAB of {} symbols ({symtab_addr:#x}..{sym_end:#x}) overlaps {what} ({:#x}..{:#x})",
                    self.nsyms,
                    t.vaddr,
                    t.vaddr + t.len
                )));
            }
        }
        Ok(())
    }

    /// `DT_RELA`, `DT_JMPREL`, `DT_RELR` and their sizes.
    fn parse_relocation_tables(&mut self, r: &Reader<'_>, dynamic: &Dynamic) -> Result<()> {
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

    /// `DT_VERSYM`, `DT_VERDEF` and `DT_VERNEED`: the version names by index.
    fn parse_versions(
        &mut self,
        r: &Reader<'_>,
        dynamic: &Dynamic,
        strings: &Strings<'_>,
    ) -> Result<()> {
        let path = self.path.clone();
        let bad = |item: String| Error::malformed(&path, item);
        let get = |tag: u64| dynamic.get(tag);
        let string = |off: u64, what: &dyn std::fmt::Display| strings.get(off, what);
        // Versions.
        if let Some(addr) = get(DT_VERSYM) {
            self.versym = Some(self.table(
                r,
                addr,
                u64::from(self.nsyms) * 2,
                Placement::Any,
                "DT_VERSYM",
            )?);
        }
        let mut versions: Vec<Option<VersionName>> = Vec::new();
        let mut put = |idx: u16, v: VersionName| {
            let idx = (idx & 0x7fff) as usize;
            if versions.len() <= idx {
                versions.resize(idx + 1, None);
            }
            versions[idx] = Some(v);
        };
        if let Some(addr) = get(DT_VERDEF) {
            let num = get(DT_VERDEFNUM).unwrap_or(0);
            let mut at = addr;
            for n in 0..num.min(0x8000) {
                let t = self.table(
                    r,
                    at,
                    20,
                    Placement::Any,
                    format_args!("DT_VERDEF entry {n}"),
                )?;
                let vd: &oelf::Verdef<LE> =
                    r.pod(t.file_off, format_args!("DT_VERDEF entry {n}"))?;
                let version = vd.vd_version.get(LE);
                if version != 1 {
                    return Err(bad(format!("DT_VERDEF entry {n}: vd_version {version}")));
                }
                let flags = vd.vd_flags.get(LE).0;
                let ndx = vd.vd_ndx.get(LE).0;
                let cnt = vd.vd_cnt.get(LE);
                let aux = vd.vd_aux.get(LE);
                let next = vd.vd_next.get(LE);
                if cnt > 0 {
                    let a = self.table(
                        r,
                        at + u64::from(aux),
                        8,
                        Placement::Any,
                        format_args!("DT_VERDEF entry {n} aux"),
                    )?;
                    let vda: &oelf::Verdaux<LE> =
                        r.pod(a.file_off, format_args!("DT_VERDEF entry {n} aux"))?;
                    let name_off = vda.vda_name.get(LE);
                    let name = string(
                        u64::from(name_off),
                        &format_args!("DT_VERDEF entry {n} name"),
                    )?;
                    put(
                        ndx,
                        VersionName {
                            name,
                            file: None,
                            is_base: flags & 1 != 0,
                            weak: false,
                        },
                    );
                }
                if next == 0 {
                    break;
                }
                at = at
                    .checked_add(u64::from(next))
                    .ok_or_else(|| bad("DT_VERDEF chain overflows".into()))?;
            }
        }
        if let Some(addr) = get(DT_VERNEED) {
            let num = get(DT_VERNEEDNUM).unwrap_or(0);
            let mut at = addr;
            for n in 0..num.min(0x8000) {
                let t = self.table(
                    r,
                    at,
                    16,
                    Placement::Any,
                    format_args!("DT_VERNEED entry {n}"),
                )?;
                let vn: &oelf::Verneed<LE> =
                    r.pod(t.file_off, format_args!("DT_VERNEED entry {n}"))?;
                let version = vn.vn_version.get(LE);
                if version != 1 {
                    return Err(bad(format!("DT_VERNEED entry {n}: vn_version {version}")));
                }
                let cnt = vn.vn_cnt.get(LE);
                let file_off = vn.vn_file.get(LE);
                let file = string(
                    u64::from(file_off),
                    &format_args!("DT_VERNEED entry {n} file"),
                )?;
                let mut aux = at.checked_add(u64::from(vn.vn_aux.get(LE)));
                let next = vn.vn_next.get(LE);
                for k in 0..cnt {
                    let a_addr = aux.ok_or_else(|| bad("DT_VERNEED aux overflows".into()))?;
                    let a = self.table(
                        r,
                        a_addr,
                        16,
                        Placement::Any,
                        format_args!("DT_VERNEED entry {n} aux {k}"),
                    )?;
                    let vna: &oelf::Vernaux<LE> =
                        r.pod(a.file_off, format_args!("DT_VERNEED entry {n} aux {k}"))?;
                    let vna_flags = vna.vna_flags.get(LE).0;
                    let other = vna.vna_other.get(LE).0;
                    let name_off = vna.vna_name.get(LE);
                    let name = string(
                        u64::from(name_off),
                        &format_args!("DT_VERNEED entry {n} aux {k} name"),
                    )?;
                    put(
                        other,
                        VersionName {
                            name,
                            file: Some(file.clone()),
                            is_base: false,
                            weak: vna_flags & 2 != 0,
                        },
                    );
                    let anext = vna.vna_next.get(LE);
                    if anext == 0 {
                        break;
                    }
                    aux = a_addr.checked_add(u64::from(anext));
                }
                if next == 0 {
                    break;
                }
                at = at
                    .checked_add(u64::from(next))
                    .ok_or_else(|| bad("DT_VERNEED chain overflows".into()))?;
            }
        }
        self.versions = versions;
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

/// Why an `R_X86_64_IRELATIVE` relocation with this addend is refused.
pub(crate) fn irelative_reason(addend: i64) -> String {
    format!(
        "ifunc resolver {:#x} (the addend) is not inside an executable segment of the library",
        addend as u64
    )
}

fn chains_off_len(fixed: u64, nsyms: u32, symoffset: u32) -> Option<u64> {
    fixed.checked_add(u64::from(nsyms.checked_sub(symoffset)?) * 4)
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

/// The GNU hash of a symbol name (djb2: `h = h * 33 + c`, from 5381).
///
/// Four characters per step (`h * 33^4 + c0 * 33^3 + c1 * 33^2 + c2 * 33 + c3`, all
/// wrapping), which shortens the chain of dependent multiplications fourfold; the
/// result is the same as the one-character loop (checked in the tests).
#[inline]
pub fn gnu_hash(name: &[u8]) -> u32 {
    const P1: u32 = 33;
    const P2: u32 = 33 * 33;
    const P3: u32 = 33 * 33 * 33;
    const P4: u32 = 33 * 33 * 33 * 33;
    let mut h: u32 = 5381;
    let mut chunks = name.chunks_exact(4);
    for c in &mut chunks {
        h = h
            .wrapping_mul(P4)
            .wrapping_add(u32::from(c[0]).wrapping_mul(P3))
            .wrapping_add(u32::from(c[1]).wrapping_mul(P2))
            .wrapping_add(u32::from(c[2]).wrapping_mul(P1))
            .wrapping_add(u32::from(c[3]));
    }
    for &c in chunks.remainder() {
        h = h.wrapping_mul(33).wrapping_add(u32::from(c));
    }
    h
}

/// The SysV ELF hash of a symbol name.
pub fn sysv_hash(name: &[u8]) -> u32 {
    let mut h: u32 = 0;
    for &c in name {
        h = (h << 4).wrapping_add(u32::from(c));
        let g = h & 0xf000_0000;
        if g != 0 {
            h ^= g >> 24;
        }
        h &= !g;
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unrolled_gnu_hash_equals_the_simple_loop() {
        let simple = |name: &[u8]| {
            let mut h: u32 = 5381;
            for &c in name {
                h = h.wrapping_mul(33).wrapping_add(u32::from(c));
            }
            h
        };
        for name in [
            &b""[..],
            b"a",
            b"ab",
            b"abc",
            b"abcd",
            b"abcde",
            b"PyUnicode_FromStringAndSize",
            b"\xff\xfe\xfd\xfc\xfb",
        ] {
            assert_eq!(gnu_hash(name), simple(name), "{name:?}");
        }
    }

    #[test]
    fn hashes_match_known_values() {
        // Values from the ELF gABI / GNU hash documentation.
        assert_eq!(sysv_hash(b""), 0);
        assert_eq!(gnu_hash(b""), 5381);
        assert_eq!(gnu_hash(b"printf"), 0x156b_2bb8);
        assert_eq!(sysv_hash(b"printf"), 0x0779_05a6);
    }

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
