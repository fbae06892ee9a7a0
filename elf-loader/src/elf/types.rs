//! What the parser gives: `ElfInfo` (everything the loader needs from one file, validated)
//! and the items it holds (program headers, symbols, relocations, version names, tables,
//! hash table headers).

use super::consts::*;
use object::elf as oelf;
use object::LittleEndian as LE;
use std::path::PathBuf;

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
///
/// Its methods are in the parser's files, one part each (`src/elf/`): `headers.rs`
/// (`parse`, the first phase, the ISA level), `reader.rs` (a table by address),
/// `dynamic.rs` (the second phase: the dynamic section, strings, init/fini),
/// `symbols.rs` (hash tables, symbol table), `relocs.rs` (relocation tables,
/// `reloc_ranges`), `versions.rs`, and `check.rs` (`is_code`, `check_ifunc_symbol`, the
/// reads from the file's bytes).
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
    /// `DT_RELR` packed relative relocations (8-byte entries; see [`walk_relr`](super::walk_relr)).
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
