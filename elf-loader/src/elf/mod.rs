//! ELF parsing with validation: the file header, program headers, the dynamic section
//! and the dynamic tables (symbols, strings, hash tables, versions, relocations).
//!
//! Everything is read from the file's bytes with bounds checks; every table the loader
//! later reads from the mapped image is checked here to lie inside the file-backed part
//! (the memory part, for init/fini arrays) of one readable `PT_LOAD` segment, so
//! reading it after mapping cannot fault.
//! A malformed file gives [`Error::Malformed`](crate::Error::Malformed) naming the file and the item.
//!
//! The structures are `object`'s zero-copy `read::elf` types (`FileHeader64`,
//! `ProgramHeader64`, `Dyn64`, `Sym64`, `Rela64`, the hash headers, `Verdef`,
//! `Verneed` and their aux entries), read in place through a bounds-checked `Reader`
//! over the parts of the file at hand (the header page, then the mapped segments: the
//! whole file is never read into memory). The validation is ours: `object`'s own
//! `ElfFile` needs the whole file contiguous and its errors do not name the item and
//! offset, which the loader's errors (and the fuzz oracle that compares them) do.

//!
//! Where the parts live (each an `impl ElfInfo` block or free functions, in the order the
//! parser runs):
//! - `types.rs`: `ElfInfo` and the items it holds (`Phdr`, `Sym`, `Rela`, `Table`, ...);
//! - `consts.rs`: the ELF constants;
//! - `reader.rs`: the bounds-checked `Reader` and `ElfInfo::table`;
//! - `headers.rs`: the first phase, the ELF header and program headers, and the ISA level;
//! - `dynamic.rs`: the second phase, the dynamic section's entries, flags, strings, names
//!   and init/fini;
//! - `symbols.rs`: the hash tables, the symbol table and the hash functions;
//! - `relocs.rs`: the relocation tables, the writable ranges, the `DT_RELR` walk;
//! - `versions.rs`: the symbol versions;
//! - `check.rs`: `check_bytes` (the fuzz oracle) and the reads from the file's bytes.

mod check;
#[allow(missing_docs)]
pub mod consts;
mod dynamic;
mod headers;
mod reader;
mod relocs;
mod symbols;
mod types;
mod versions;

pub use check::{check_bytes, read_rela, read_sym, CheckSummary};
pub use headers::cpu_isa_levels;
pub(crate) use reader::Reader;
pub use reader::{MAX_TLS_ALIGN, PAGE};
pub(crate) use relocs::irelative_reason;
pub use relocs::{reloc_name, walk_relr};
pub use symbols::{gnu_hash, sysv_hash};
pub use types::{ElfInfo, GnuHash, Phdr, Rela, Sym, SysvHash, Table, VersionName};
