//! A mapped library (`Image`): symbol lookup in its own tables (GNU and SysV hash,
//! versions), relocation against a resolution scope, and init/fini calls.

use crate::elf::{consts::*, gnu_hash, reloc_name, ElfInfo, Rela, Sym};
use crate::error::{Error, Result};
use crate::map::Mapping;
use crate::overrides::Overrides;
use crate::symtab::SymTab;
use crate::system::{SymbolProvider, SystemLibrary};
use crate::tls::{self, TlsIndex};
use object::elf::Rela64;
use object::LittleEndian;
use std::ffi::{c_char, c_int, CString};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, Weak};

/// One library mapped by this loader.
pub(crate) struct Image {
    /// Unique id (for traces and handles).
    pub id: u64,
    /// The file it was loaded from.
    pub path: PathBuf,
    /// The file's identity and version (the key of its relocation plans).
    pub stamp: crate::plan::FileStamp,
    /// The path as a C string (dladdr's dli_fname, the link map's l_name).
    pub c_path: CString,
    /// Parsed headers and tables.
    pub info: ElfInfo,
    /// The mapping (unmapped on drop).
    pub map: Mapping,
    /// The program headers as `dl_iterate_phdr` reports them.
    pub raw_phdrs: Box<[libc::Elf64_Phdr]>,
    /// The dynamic symbol table in the mapping.
    pub tab: SymTab,
    /// Link-time ranges relocation targets must lie inside: the writable segments (and
    /// for a `DT_TEXTREL` library every segment, see `ElfInfo::reloc_ranges`).
    pub writable: Vec<(u64, u64)>,
    /// Our TLS module id, if the library has PT_TLS.
    pub tls_module: Option<u64>,
    /// Direct dependencies (set once loaded).
    pub deps: OnceLock<Vec<Dep>>,
    /// The image that loaded this one (glibc's `l_loader`): the library whose
    /// `DT_NEEDED` entry or `dlopen` asked for it; `None` for a load through the API.
    /// Its `DT_RPATH` is searched for this image's dependencies (`search.rs`).
    pub loader: Option<Weak<Image>>,
    /// Extra providers searched after the library's dependencies.
    pub search: Vec<Arc<dyn SymbolProvider>>,
    /// Init functions have run.
    pub initialized: AtomicBool,
    /// Fini functions have run.
    pub finalized: AtomicBool,
    /// C++ `thread_local` destructors registered by this image's code, not run yet.
    pub tls_dtors: std::sync::atomic::AtomicUsize,
    /// Opens not closed yet: `dlopen` calls from loaded code, plus one for a load through
    /// the API (never closed: such a library leaves with its namespace). glibc's
    /// `l_direct_opencount`.
    pub opens: std::sync::atomic::AtomicUsize,
    /// Never unloaded by `dlclose` (`RTLD_NODELETE`, `DF_1_NODELETE`).
    pub nodelete: AtomicBool,
    /// Set when the image is selected for unloading (once).
    pub unloading: AtomicBool,
    /// Other custom images this one bound symbols of (relocations, `dlsym`).
    pub reldeps: parking_lot::Mutex<Vec<Weak<Image>>>,
    /// The arguments of this image's dynamic TLS descriptors (`R_X86_64_TLSDESC`),
    /// which its code reads as long as it is mapped.
    #[expect(
        clippy::vec_box,
        reason = "descriptors point at each TlsIndex: they must not move when the Vec grows"
    )]
    pub tlsdesc_args: parking_lot::Mutex<Vec<Box<TlsIndex>>>,
    /// The registered `.eh_frame` start, for deregistration.
    pub eh_frame: parking_lot::Mutex<Option<usize>>,
}

/// A dependency: another custom image, or a library of the system loader.
#[derive(Clone)]
pub(crate) enum Dep {
    Custom(Weak<Image>),
    System(Arc<SystemLibrary>),
}

/// One place a symbol is looked for, in order.
#[derive(Clone)]
pub(crate) enum ScopeItem {
    /// The loader's own dl* and __tls_get_addr entries.
    Overrides(&'static Overrides),
    Custom(Arc<Image>),
    System(Arc<SystemLibrary>),
    Provider(Arc<dyn SymbolProvider>),
}

impl ScopeItem {
    /// The item as a relocation plan records it (see `plan.rs`).
    pub(crate) fn plan_key(&self) -> crate::plan::KeyItem {
        use crate::plan::KeyItem;
        match self {
            ScopeItem::Overrides(_) => KeyItem::Overrides,
            ScopeItem::Custom(img) => KeyItem::Custom(img.stamp),
            ScopeItem::System(lib) => {
                let (name, handle, bias) = lib.plan_identity();
                KeyItem::System {
                    name: name.to_string(),
                    handle,
                    bias,
                }
            }
            ScopeItem::Provider(_) => KeyItem::Provider,
        }
    }

    /// Whether both items are the same library (custom images by identity, system
    /// libraries by identity or by `dlopen` handle).
    pub(crate) fn same(&self, other: &ScopeItem) -> bool {
        match (self, other) {
            (ScopeItem::Overrides(a), ScopeItem::Overrides(b)) => std::ptr::eq(*a, *b),
            (ScopeItem::Custom(a), ScopeItem::Custom(b)) => Arc::ptr_eq(a, b),
            (ScopeItem::System(a), ScopeItem::System(b)) => a.same_library(b),
            (ScopeItem::Provider(a), ScopeItem::Provider(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }
}

/// What a symbol reference resolved to.
pub(crate) enum Def {
    /// A definition in the image being relocated.
    Own(Sym),
    Custom(Arc<Image>, Sym),
    Addr(usize),
    /// A thread-local symbol of the system loader's (or a provider's) TLS.
    SystemTls(TlsIndex),
}

/// A symbol value not resolved yet (in the relocation cache).
const UNRESOLVED: usize = usize::MAX;

/// State shared by the relocation loops of one image.
struct RelocCx<'a> {
    /// Where symbols are looked up.
    scope: &'a [ScopeItem],
    /// `scope` starts with the loader's overrides and then the image itself, so a
    /// symbol the image exports (and the overrides do not replace) binds to its own
    /// definition without a hash lookup: the overrides, when so.
    self_first: Option<&'static Overrides>,
    /// Resolved values by symbol index.
    cache: &'a mut [usize],
    /// Relocations applied after all others (ifuncs).
    deferred: &'a mut Vec<Rela>,
    /// Counts.
    stats: &'a mut RelocStats,
    /// Other custom images that relocations bound to (glibc's `l_reldeps`).
    bound: &'a mut Vec<Arc<Image>>,
    /// The resolutions being recorded for a relocation plan (none when replaying one).
    record: Option<&'a mut Vec<(u32, crate::plan::Planned)>>,
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

pub(crate) fn next_id() -> u64 {
    NEXT_ID.fetch_add(1, Ordering::Relaxed)
}

/// Relocation counts for traces and tests.
#[derive(Debug, Default, Clone, Copy)]
pub struct RelocStats {
    /// RELATIVE relocations.
    pub relative: usize,
    /// Symbolic relocations (64, GLOB_DAT, JUMP_SLOT, ...).
    pub symbolic: usize,
    /// IRELATIVE relocations.
    pub irelative: usize,
    /// TLS relocations (DTPMOD64, DTPOFF64, TPOFF64).
    pub tls: usize,
    /// Symbolic references resolved inside the library itself.
    pub self_bound: usize,
    /// Weak undefined references left at 0.
    pub weak_zero: usize,
    /// Pages of the writable segment made present before relocation
    /// (`MADV_POPULATE_WRITE`; 0 where the kernel does not support it).
    pub prefaulted_pages: usize,
    /// Symbols whose value came from the relocation plan of an earlier copy of the
    /// same file (see `plan.rs`) instead of a lookup.
    pub planned: usize,
}

impl Image {
    #[inline]
    fn ptr(&self, vaddr: u64) -> *const u8 {
        self.map.bias.wrapping_add(vaddr as usize) as *const u8
    }

    /// Runtime address of a link-time address.
    pub fn addr(&self, vaddr: u64) -> usize {
        self.map.bias.wrapping_add(vaddr as usize)
    }

    /// Symbol `i` (must be < nsyms).
    #[inline]
    pub fn sym(&self, i: u32) -> Sym {
        self.tab.sym(i)
    }

    /// The string at `off` in DT_STRTAB, without its NUL.
    pub fn str_at(&self, off: u32) -> Option<&[u8]> {
        self.tab.str_at(off)
    }

    /// The version a reference from symbol `i` asks for (`None` if unversioned).
    pub fn wanted_version(&self, i: u32) -> Option<&str> {
        self.tab.wanted_version(i)
    }

    /// Looks `name` up in this library's own exported symbols.
    #[inline]
    pub fn lookup_own(&self, name: &[u8], hash: u32, version: Option<&str>) -> Option<Sym> {
        self.tab.lookup(name, hash, version)
    }

    /// The runtime address of a defined non-TLS symbol, calling ifunc resolvers.
    pub fn sym_address(&self, s: &Sym) -> usize {
        self.tab.address(s)
    }

    /// Looks a name up in this library and exports the address (for `sym`).
    pub fn export(&self, name: &str, version: Option<&str>) -> Option<usize> {
        let s = self.lookup_own(name.as_bytes(), gnu_hash(name.as_bytes()), version)?;
        if s.kind() == STT_TLS {
            return None;
        }
        Some(self.sym_address(&s))
    }

    /// The TLS index of an exported thread-local symbol.
    pub fn export_tls(&self, name: &str) -> Option<TlsIndex> {
        let s = self.lookup_own(name.as_bytes(), gnu_hash(name.as_bytes()), None)?;
        (s.kind() == STT_TLS).then_some(())?;
        Some(TlsIndex {
            module: self.tls_module?,
            offset: s.value,
        })
    }

    /// The nearest defined symbol at or below `addr` (for dladdr).
    pub fn symbol_at(&self, addr: usize) -> Option<(&[u8], usize)> {
        let mut best: Option<(u32, usize)> = None;
        for i in 1..self.info.nsyms {
            let s = self.sym(i);
            if !s.is_defined() || s.kind() == STT_TLS || s.shndx == SHN_ABS {
                continue;
            }
            let a = self.addr(s.value);
            if a <= addr
                && (s.size == 0 || addr < a + s.size as usize || a == addr)
                && best.is_none_or(|(_, b)| a > b)
            {
                best = Some((i, a));
            }
        }
        let (i, a) = best?;
        Some((self.str_at(self.sym(i).name)?, a))
    }

    /// The writable segment (link-time `[start, end)`) holding `offset`, if any. The
    /// relocation loops' fast paths check targets against one segment: the one holding
    /// a table's first target (most libraries have one writable segment; wheels
    /// repaired by patchelf have several, with most targets in the first ones).
    fn writable_holding(&self, offset: u64) -> Option<(u64, u64)> {
        self.writable
            .iter()
            .copied()
            .find(|&(start, end)| offset >= start && offset < end)
    }

    /// The link-time target of entry `k` of a relocation table.
    ///
    /// # Safety
    /// `k` must be below the entry count of a table (at `table`) that the parser
    /// checked to lie inside a mapped, readable segment.
    unsafe fn target_at(table: *const u8, k: usize) -> u64 {
        // SAFETY: the caller's contract.
        unsafe { std::ptr::read_unaligned(table.add(k * 24) as *const u64) }
    }

    /// Checks that a relocation target `[offset, offset+size)` lies in a writable segment.
    #[inline]
    fn check_target(&self, r: &Rela, size: u64) -> Result<*mut u8> {
        let ok = self
            .writable
            .iter()
            .any(|&(start, end)| r.offset >= start && r.offset <= end.saturating_sub(size));
        if !ok {
            return Err(self.reloc_err(r, "", "target is not inside a writable segment"));
        }
        Ok(self.addr(r.offset) as *mut u8)
    }

    fn reloc_err(&self, r: &Rela, symbol: &str, reason: &str) -> Error {
        Error::Relocation {
            path: self.path.clone(),
            kind: reloc_name(r.kind),
            offset: r.offset,
            symbol: symbol.to_string(),
            reason: reason.to_string(),
        }
    }

    /// Applies all relocations, resolving symbols through `scope`.
    ///
    /// Three loops, cheapest first: the `DT_RELACOUNT` prefix of RELATIVE relocations;
    /// then the rest of `DT_RELA` and `DT_JMPREL`, where RELATIVE and the symbolic
    /// relocations libraries are made of (`64`, `GLOB_DAT`, `JUMP_SLOT`) against a symbol
    /// already resolved take a few instructions each ([`Image::relocate_table`]); every
    /// other entry (first use of a symbol, TLS, ifuncs, rare types, anything out of
    /// bounds) goes through the general [`Image::apply`], which checks and reports.
    ///
    /// `DT_RELR` comes first, as with glibc. A `DT_TEXTREL` library's read-only segments
    /// are writable (keeping their other permissions) while it is relocated, its ifunc
    /// resolvers included, as glibc does.
    pub fn relocate(self: &Arc<Self>, scope: &[ScopeItem]) -> Result<RelocStats> {
        if !self.info.textrel {
            return self.relocate_all(scope);
        }
        self.map.text_writable(&self.info, true)?;
        let r = self.relocate_all(scope);
        self.map.text_writable(&self.info, false)?;
        r
    }

    fn relocate_all(self: &Arc<Self>, scope: &[ScopeItem]) -> Result<RelocStats> {
        let mut stats = RelocStats::default();
        // Resolved symbol values by symbol index (usize::MAX: not resolved yet); 8 bytes
        // per symbol, so that relocating libpython touches few fresh heap pages.
        let mut cache: Vec<usize> = vec![UNRESOLVED; self.info.nsyms as usize];
        let mut deferred: Vec<Rela> = Vec::new();
        let mut bound: Vec<Arc<Image>> = Vec::new();
        // A plan recorded by an earlier copy of this file with a scope of the same
        // shape gives the symbols' values without lookups; otherwise this load records
        // one.
        let planning = crate::plan::enabled();
        let key: Vec<crate::plan::KeyItem> = if planning {
            scope.iter().map(ScopeItem::plan_key).collect()
        } else {
            Vec::new()
        };
        let replayed =
            planning && self.replay_plan(scope, &key, &mut cache, &mut bound, &mut stats);
        let mut record: Option<Vec<(u32, crate::plan::Planned)>> =
            (planning && !replayed).then(Vec::new);
        let total = (self.info.rela.len / 24) as usize;
        let relacount = (self.info.relacount as usize).min(total);
        stats.prefaulted_pages = self.prefault_targets(relacount);
        stats.relative += self.relocate_relr()?;
        // Fast path: the leading RELATIVE relocations (DT_RELACOUNT), in a tight loop
        // over the raw table; anything unexpected goes to the general path.
        let table = self.addr(self.info.rela.vaddr) as *const u8;
        let bias = self.map.bias;
        let mut n = 0;
        // SAFETY: entry 0 exists when relacount > 0 (relacount <= total).
        let primary = (relacount > 0)
            .then(|| unsafe { Self::target_at(table, 0) })
            .and_then(|off| self.writable_holding(off));
        if let Some((lo, hi)) = primary {
            while n < relacount {
                // SAFETY: n < relacount <= entries of the DT_RELA table, which the parser
                // checked to lie inside a mapped segment; `Rela64`'s fields are byte
                // arrays (alignment 1), read in place.
                let e = unsafe { &*(table.add(n * 24) as *const Rela64<LittleEndian>) };
                let (offset, info, addend) = (
                    e.r_offset.get(LittleEndian),
                    e.r_info.get(LittleEndian),
                    e.r_addend.get(LittleEndian) as u64,
                );
                if info as u32 != R_X86_64_RELATIVE || offset < lo || offset > hi.saturating_sub(8)
                {
                    break;
                }
                // SAFETY: the target lies inside the (only) writable segment.
                unsafe {
                    std::ptr::write_unaligned(
                        bias.wrapping_add(offset as usize) as *mut usize,
                        bias.wrapping_add(addend as usize),
                    )
                };
                n += 1;
            }
            stats.relative += n;
        }
        let rest = crate::elf::Table {
            file_off: self.info.rela.file_off + n as u64 * 24,
            vaddr: self.info.rela.vaddr + n as u64 * 24,
            len: self.info.rela.len - n as u64 * 24,
        };
        let self_first = match scope {
            [ScopeItem::Overrides(o), ScopeItem::Custom(i), ..] if Arc::ptr_eq(i, self) => Some(*o),
            _ => None,
        };
        let mut cx = RelocCx {
            scope,
            self_first,
            cache: &mut cache,
            deferred: &mut deferred,
            stats: &mut stats,
            bound: &mut bound,
            record: record.as_mut(),
        };
        self.relocate_table(rest, &mut cx)?;
        self.relocate_table(self.info.jmprel, &mut cx)?;
        self.add_reldeps(&bound);
        // IRELATIVE and references to our own ifuncs run resolvers last, when every
        // other relocation of this image is in place.
        for r in deferred {
            let p = self.check_target(&r, 8)?;
            let value = if r.kind == R_X86_64_IRELATIVE {
                let resolver = self.addr(r.addend as u64);
                // SAFETY: an IRELATIVE addend is the address of an ifunc resolver in this
                // image, checked to lie in an executable segment before it was deferred;
                // resolvers take no arguments and return an address.
                let f: extern "C" fn() -> usize = unsafe { std::mem::transmute(resolver) };
                stats.irelative += 1;
                f()
            } else {
                let s = self.sym(r.sym);
                self.sym_address(&s).wrapping_add(r.addend as usize)
            };
            // SAFETY: checked target inside a writable segment.
            unsafe { std::ptr::write_unaligned(p as *mut usize, value) };
        }
        if let Some(entries) = record {
            crate::plan::store(self.stamp, key, entries);
        }
        Ok(stats)
    }

    /// Fills `cache` from the relocation plan of an earlier copy of this file loaded
    /// with a scope of the same shape, if there is one (see `plan.rs`): each planned
    /// symbol's value for this copy, so that the relocation loops take them from the
    /// cache as if this load had looked them up. Records the bindings to other custom
    /// images that the lookups would have recorded. Returns whether a plan was used.
    fn replay_plan(
        self: &Arc<Self>,
        scope: &[ScopeItem],
        key: &[crate::plan::KeyItem],
        cache: &mut [usize],
        bound: &mut Vec<Arc<Image>>,
        stats: &mut RelocStats,
    ) -> bool {
        use crate::plan::Planned;
        let Some(plan) = crate::plan::find(&self.stamp, key) else {
            return false;
        };
        for &(i, p) in &plan.entries {
            let value = match p {
                Planned::Own(sym) => {
                    stats.self_bound += 1;
                    self.sym_address(&sym)
                }
                Planned::Scope { pos, sym } => match scope.get(pos as usize) {
                    Some(ScopeItem::Custom(img)) => {
                        if Arc::ptr_eq(img, self) {
                            stats.self_bound += 1;
                        } else {
                            record_binding(bound, img);
                        }
                        img.sym_address(&sym)
                    }
                    // The plan matched this scope item by item, so position `pos` is
                    // the custom library it was recorded with; anything else is left
                    // to the lookup.
                    _ => continue,
                },
                Planned::Abs(a) => self.near_entry(a),
            };
            if let Some(slot) = cache.get_mut(i as usize) {
                *slot = value;
                stats.planned += 1;
            }
        }
        true
    }

    /// `v`, or for the loader's `__tls_get_addr` the copy of its fast path next to
    /// this image (see `tls::near_entries`: a call to code in another 4 GiB region costs
    /// a few cycles).
    #[inline]
    fn near_entry(&self, v: usize) -> usize {
        if v == tls::tls_get_addr_entry() {
            tls::near_entries(self.map.start).tls_get_addr
        } else {
            v
        }
    }

    /// Entry `k` of the `DT_RELR` table in the mapping.
    fn relr_entry(&self, k: usize) -> u64 {
        // SAFETY: callers pass k below the entry count of DT_RELR, which the parser
        // checked to lie inside a mapped, readable segment.
        unsafe {
            std::ptr::read_unaligned(self.ptr(self.info.relr.vaddr + 8 * k as u64) as *const u64)
        }
    }

    /// Applies `DT_RELR` (packed relative relocations: each word gets the load bias
    /// added); every word is checked to lie in a relocatable segment first (see
    /// [`crate::elf::walk_relr`]). Returns the number of words relocated.
    fn relocate_relr(&self) -> Result<usize> {
        let count = (self.info.relr.len / 8) as usize;
        if count == 0 {
            return Ok(0);
        }
        let bias = self.map.bias;
        crate::elf::walk_relr(
            &self.path,
            count,
            |k| self.relr_entry(k),
            &self.writable,
            |a| {
                let p = bias.wrapping_add(a as usize) as *mut usize;
                // SAFETY: `walk_relr` checked that the 8-byte word at `a` lies inside one
                // of this image's relocatable (writable) segments.
                unsafe {
                    std::ptr::write_unaligned(p, std::ptr::read_unaligned(p).wrapping_add(bias))
                };
            },
        )
    }

    /// Makes the pages that relocation will write private and present before it writes
    /// them, with `MADV_POPULATE_WRITE` over each run of such pages (Linux 5.14+; on
    /// older kernels, or on any error, nothing happens and the writes fault as usual).
    /// The pages are exactly those holding a relocation target, so the library's private
    /// memory is what the copy-on-write faults would have made private anyway; the
    /// kernel breaks copy-on-write for a run in one call instead of taking one fault
    /// per page. Returns the number of pages populated.
    ///
    /// The targets of the `DT_RELACOUNT` prefix are visited page by page: linkers sort
    /// those relocations by address, so a binary search finds the first entry on the
    /// next page (every page marked holds a target even if the table is not sorted;
    /// unsorted tables only leave some pages to the faults). The other relocations are
    /// few enough to scan.
    fn prefault_targets(&self, relacount: usize) -> usize {
        static UNSUPPORTED: AtomicBool = AtomicBool::new(false);
        if UNSUPPORTED.load(Ordering::Relaxed) {
            return 0;
        }
        let (Some(lo), Some(hi)) = (
            self.writable.iter().map(|w| w.0).min(),
            self.writable.iter().map(|w| w.1).max(),
        ) else {
            return 0;
        };
        const PAGE: u64 = crate::elf::PAGE;
        let first = lo & !(PAGE - 1);
        let npages = (hi.saturating_sub(first)).div_ceil(PAGE) as usize;
        if npages == 0 {
            return 0;
        }
        let mut bits = vec![0u64; npages.div_ceil(64)];
        // Several writable segments (patchelf'd wheels): pages between them may be
        // read-only or unmapped, so only targets inside a segment mark their page.
        let several = self.writable.len() > 1;
        let writable = &self.writable;
        // One comparison: offsets below `first` wrap around to huge page numbers. (A
        // target past `hi` on the last page marks that page, which is mapped; such a
        // relocation is refused later anyway.)
        let mut mark = |off: u64| {
            if several && !writable.iter().any(|&(s, e)| off >= s && off < e) {
                return;
            }
            let p = off.wrapping_sub(first) / PAGE;
            if p < npages as u64 {
                bits[(p / 64) as usize] |= 1 << (p % 64);
            }
        };
        let rela = self.ptr(self.info.rela.vaddr);
        let total = (self.info.rela.len / 24) as usize;
        let off_at = |table: *const u8, k: usize| -> u64 {
            // SAFETY: callers pass k below the entry count of a relocation table that
            // the parser checked to lie inside a mapped, readable segment.
            unsafe { std::ptr::read_unaligned(table.add(k * 24) as *const u64) }
        };
        let mut k = 0;
        while k < relacount {
            let off = off_at(rela, k);
            mark(off);
            let next = (off | (PAGE - 1)).saturating_add(1);
            let (mut l, mut r) = (k + 1, relacount);
            while l < r {
                let m = l + (r - l) / 2;
                if off_at(rela, m) < next {
                    l = m + 1;
                } else {
                    r = m;
                }
            }
            k = l;
        }
        for k in relacount..total {
            mark(off_at(rela, k));
        }
        let jmprel = self.ptr(self.info.jmprel.vaddr);
        for k in 0..(self.info.jmprel.len / 24) as usize {
            mark(off_at(jmprel, k));
        }
        // DT_RELR's words (a malformed table is reported by the relocation that follows;
        // only words inside a segment are marked).
        let _ = crate::elf::walk_relr(
            &self.path,
            (self.info.relr.len / 8) as usize,
            |k| self.relr_entry(k),
            writable,
            &mut mark,
        );
        let mut populated = 0;
        let mut p = 0;
        let set = |p: usize| bits[p / 64] & (1 << (p % 64)) != 0;
        while p < npages {
            if !set(p) {
                p += 1;
                continue;
            }
            let start = p;
            while p < npages && set(p) {
                p += 1;
            }
            let addr = self.addr(first + start as u64 * PAGE);
            // SAFETY: whole pages of this image's writable segment (its mapping is page
            // aligned and private); populating only faults them in, contents unchanged.
            let rc = unsafe {
                libc::madvise(
                    addr as *mut libc::c_void,
                    (p - start) * PAGE as usize,
                    libc::MADV_POPULATE_WRITE,
                )
            };
            if rc != 0 {
                if std::io::Error::last_os_error().raw_os_error() == Some(libc::EINVAL) {
                    // A kernel without MADV_POPULATE_WRITE: do not ask again.
                    UNSUPPORTED.store(true, Ordering::Relaxed);
                }
                break;
            }
            populated += p - start;
        }
        populated
    }

    /// Applies one relocation table. The common cases are handled inline: RELATIVE, and
    /// `64`/`GLOB_DAT`/`JUMP_SLOT` against a symbol whose value is cached, each with its
    /// target inside the (single) writable segment; they do exactly what
    /// [`Image::apply`] would do for them. Everything else goes to `apply`.
    fn relocate_table(self: &Arc<Self>, t: crate::elf::Table, cx: &mut RelocCx<'_>) -> Result<()> {
        let count = (t.len / 24) as usize;
        let table = self.ptr(t.vaddr);
        let bias = self.map.bias;
        // The writable segment holding the table's first target (the only one, for
        // what linkers produce): a target is in it when `offset - lo <= span` (one
        // comparison). Targets elsewhere take the general path, which checks each
        // against all writable segments.
        // SAFETY: entry 0 exists when count > 0.
        let primary = (count > 0)
            .then(|| unsafe { Self::target_at(table, 0) })
            .and_then(|off| self.writable_holding(off));
        let (fast, lo, span) = match primary {
            Some((lo, hi)) if hi >= lo.saturating_add(8) => (true, lo, hi - 8 - lo),
            _ => (false, 0, 0),
        };
        let (mut relative, mut symbolic) = (0, 0);
        for k in 0..count {
            // SAFETY: k < count entries of a relocation table that the parser checked to
            // lie inside a mapped, readable segment; `Rela64` is read in place (byte-array
            // fields, alignment 1).
            let e = unsafe { &*(table.add(k * 24) as *const Rela64<LittleEndian>) };
            let (offset, info, addend) = (
                e.r_offset.get(LittleEndian),
                e.r_info.get(LittleEndian),
                e.r_addend.get(LittleEndian),
            );
            let kind = info as u32;
            let sym = (info >> 32) as usize;
            if fast && offset.wrapping_sub(lo) <= span {
                let target = bias.wrapping_add(offset as usize) as *mut usize;
                if kind == R_X86_64_RELATIVE {
                    // SAFETY: an 8-byte target inside the writable segment (checked
                    // against its bounds just above).
                    unsafe {
                        std::ptr::write_unaligned(target, bias.wrapping_add(addend as usize))
                    };
                    relative += 1;
                    continue;
                }
                if matches!(kind, R_X86_64_64 | R_X86_64_GLOB_DAT | R_X86_64_JUMP_SLOT) {
                    // cache[0] is never set (symbol 0 is not a symbol), so it is never
                    // taken here.
                    if let Some(&v) = cx.cache.get(sym) {
                        if v != UNRESOLVED {
                            // glibc adds the addend for all three (linkers write 0
                            // for GLOB_DAT and JUMP_SLOT).
                            // SAFETY: as above.
                            unsafe {
                                std::ptr::write_unaligned(target, v.wrapping_add(addend as usize))
                            };
                            symbolic += 1;
                            continue;
                        }
                    }
                }
            }
            let r = Rela {
                offset,
                sym: sym as u32,
                kind,
                addend,
            };
            self.apply(&r, cx)?;
        }
        cx.stats.relative += relative;
        cx.stats.symbolic += symbolic;
        Ok(())
    }

    fn sym_name(&self, i: u32) -> String {
        if i == 0 || i >= self.info.nsyms {
            return String::new();
        }
        self.str_at(self.sym(i).name)
            .map(|s| String::from_utf8_lossy(s).into_owned())
            .unwrap_or_default()
    }

    /// Applies one relocation of any supported type, with every check.
    fn apply(self: &Arc<Self>, r: &Rela, cx: &mut RelocCx<'_>) -> Result<()> {
        let (scope, self_first) = (cx.scope, cx.self_first);
        let cache = &mut *cx.cache;
        let deferred = &mut *cx.deferred;
        let stats = &mut *cx.stats;
        let bound = &mut *cx.bound;
        if r.sym >= self.info.nsyms && r.sym != 0 {
            return Err(self.reloc_err(
                r,
                "",
                &format!(
                    "symbol index {} is beyond the {} dynamic symbols",
                    r.sym, self.info.nsyms
                ),
            ));
        }
        match r.kind {
            R_X86_64_NONE => Ok(()),
            R_X86_64_RELATIVE | R_X86_64_RELATIVE64 => {
                let p = self.check_target(r, 8)?;
                // SAFETY: checked target.
                unsafe { std::ptr::write_unaligned(p as *mut usize, self.addr(r.addend as u64)) };
                stats.relative += 1;
                Ok(())
            }
            R_X86_64_IRELATIVE => {
                self.check_target(r, 8)?;
                // The resolver is called once every relocation is in place: it must be
                // code of this library, not data or an address outside the mapping.
                if !self.info.is_code(r.addend as u64) {
                    return Err(self.reloc_err(r, "", &crate::elf::irelative_reason(r.addend)));
                }
                deferred.push(*r);
                Ok(())
            }
            R_X86_64_64 | R_X86_64_GLOB_DAT | R_X86_64_JUMP_SLOT | R_X86_64_32 | R_X86_64_PC32
            | R_X86_64_PC64 => {
                let size = if matches!(r.kind, R_X86_64_32 | R_X86_64_PC32) {
                    4
                } else {
                    8
                };
                let p = self.check_target(r, size)?;
                stats.symbolic += 1;
                // As glibc: symbol + addend for GLOB_DAT and JUMP_SLOT too.
                let addend = r.addend;
                let base = if r.sym == 0 {
                    0
                } else if cache[r.sym as usize] != UNRESOLVED {
                    cache[r.sym as usize]
                } else {
                    if self.sym(r.sym).kind() == STT_TLS {
                        return Err(self.reloc_err(
                            r,
                            &self.sym_name(r.sym),
                            "non-TLS relocation against a TLS symbol",
                        ));
                    }
                    let (def, stable) = self.resolve_at(r, scope, self_first)?;
                    if let (Some(rec), Some(pos), Some(d)) = (cx.record.as_mut(), stable, &def) {
                        let planned = match d {
                            Def::Own(sym) if sym.kind() != STT_GNU_IFUNC => {
                                Some(crate::plan::Planned::Own(*sym))
                            }
                            Def::Custom(img, sym)
                                if sym.kind() != STT_GNU_IFUNC || !Arc::ptr_eq(img, self) =>
                            {
                                Some(crate::plan::Planned::Scope {
                                    pos: pos as u32,
                                    sym: *sym,
                                })
                            }
                            Def::Addr(a) => Some(crate::plan::Planned::Abs(*a)),
                            _ => None,
                        };
                        if let Some(p) = planned {
                            rec.push((r.sym, p));
                        }
                    }
                    let v = match def {
                        None => {
                            stats.weak_zero += 1;
                            0
                        }
                        Some(d @ (Def::Own(_) | Def::Custom(..))) => {
                            let (img, sym): (&Image, Sym) = match &d {
                                Def::Custom(img, sym) => (img, *sym),
                                Def::Own(sym) => (self, *sym),
                                _ => unreachable!("matched above"),
                            };
                            if !std::ptr::eq(img, &**self) {
                                if let Def::Custom(other, _) = &d {
                                    record_binding(bound, other);
                                }
                            } else {
                                stats.self_bound += 1;
                                if sym.kind() == STT_GNU_IFUNC {
                                    if size != 8 || matches!(r.kind, R_X86_64_PC64) {
                                        return Err(self.reloc_err(
                                            r,
                                            &self.sym_name(r.sym),
                                            "ifunc through a non-absolute relocation",
                                        ));
                                    }
                                    // Our own ifunc: resolve after every other relocation.
                                    let mut d = *r;
                                    d.addend = addend;
                                    deferred.push(d);
                                    return Ok(());
                                }
                            }
                            img.sym_address(&sym)
                        }
                        Some(Def::Addr(a)) => a,
                        Some(Def::SystemTls(..)) => {
                            return Err(self.reloc_err(
                                r,
                                &self.sym_name(r.sym),
                                "resolved to a TLS symbol",
                            ));
                        }
                    };
                    let v = self.near_entry(v);
                    cache[r.sym as usize] = v;
                    v
                };
                let value = base.wrapping_add(addend as usize);
                // SAFETY: checked target of `size` bytes in a writable segment.
                unsafe {
                    match r.kind {
                        R_X86_64_PC32 => {
                            let v = (value as i64).wrapping_sub(p as i64);
                            let v32 = i32::try_from(v).map_err(|_| {
                                self.reloc_err(
                                    r,
                                    &self.sym_name(r.sym),
                                    "PC-relative value overflows 32 bits",
                                )
                            })?;
                            std::ptr::write_unaligned(p as *mut i32, v32)
                        }
                        R_X86_64_PC64 => std::ptr::write_unaligned(
                            p as *mut usize,
                            value.wrapping_sub(p as usize),
                        ),
                        R_X86_64_32 => {
                            let v32 = u32::try_from(value).map_err(|_| {
                                self.reloc_err(r, &self.sym_name(r.sym), "value overflows 32 bits")
                            })?;
                            std::ptr::write_unaligned(p as *mut u32, v32)
                        }
                        _ => std::ptr::write_unaligned(p as *mut usize, value),
                    }
                }
                Ok(())
            }
            R_X86_64_SIZE32 | R_X86_64_SIZE64 => {
                // The size of the symbol's definition, plus the addend (glibc's reading).
                let size = if r.kind == R_X86_64_SIZE32 { 4 } else { 8 };
                let p = self.check_target(r, size)?;
                stats.symbolic += 1;
                let def = if r.sym == 0 {
                    None
                } else {
                    self.resolve(r, scope, self_first)?
                };
                let sym_size = match def {
                    None => 0,
                    Some(Def::Own(s)) => s.size,
                    Some(Def::Custom(img, s)) => {
                        if !Arc::ptr_eq(&img, self) {
                            record_binding(bound, &img);
                        }
                        s.size
                    }
                    Some(Def::Addr(a)) => system_symbol_size(a).ok_or_else(|| {
                        self.reloc_err(r, &self.sym_name(r.sym), "the size of the system library's definition is unknown (dladdr1 found no symbol table entry)")
                    })?,
                    Some(Def::SystemTls(_)) => {
                        return Err(self.reloc_err(r, &self.sym_name(r.sym), "size of a system library's TLS symbol"))
                    }
                };
                let value = sym_size.wrapping_add(r.addend as u64);
                if size == 4 {
                    let v32 = u32::try_from(value).map_err(|_| {
                        self.reloc_err(r, &self.sym_name(r.sym), "value overflows 32 bits")
                    })?;
                    // SAFETY: checked 4-byte target in a relocatable segment.
                    unsafe { std::ptr::write_unaligned(p as *mut u32, v32) };
                } else {
                    // SAFETY: checked 8-byte target in a relocatable segment.
                    unsafe { std::ptr::write_unaligned(p as *mut u64, value) };
                }
                Ok(())
            }
            R_X86_64_TLSDESC => {
                // A descriptor {function, argument} (see tls.rs), as glibc makes them:
                // static TLS -> return the offset; dynamic -> look the block up.
                let p = self.check_target(r, 16)?;
                stats.tls += 1;
                let def = self.tls_def(r, scope, self_first, bound)?;
                let name = self.sym_name(r.sym);
                let entries = tls::near_entries(self.map.start);
                let dynamic = |ti: TlsIndex| {
                    let b = Box::new(ti);
                    let d = tls::tlsdesc_dynamic(&entries, &b);
                    self.tlsdesc_args.lock().push(b);
                    d
                };
                let desc = match def {
                    None => tls::tlsdesc_undefweak(&entries, r.addend as u64),
                    Some(Def::Custom(img, s)) => {
                        let module = img.tls_module.ok_or_else(|| {
                            self.reloc_err(r, &name, "defining library has no PT_TLS")
                        })?;
                        let offset = s.value.wrapping_add(r.addend as u64);
                        match tls::static_offset(module) {
                            // In the loader's static pool: a constant offset, as glibc's
                            // descriptors for its surplus static TLS.
                            Ok(off) => tls::tlsdesc_static(&entries, off.wrapping_add(offset)),
                            Err(_) => dynamic(TlsIndex { module, offset }),
                        }
                    }
                    Some(Def::SystemTls(ti)) => {
                        let static_off = (ti.module & tls::OUR_MODULE == 0)
                            .then(|| tls::static_tls_offset(tls::address_in_thread(&ti)))
                            .flatten();
                        match static_off {
                            Some(off) => {
                                tls::tlsdesc_static(&entries, off.wrapping_add(r.addend as u64))
                            }
                            None => dynamic(TlsIndex {
                                module: ti.module,
                                offset: ti.offset.wrapping_add(r.addend as u64),
                            }),
                        }
                    }
                    Some(_) => {
                        return Err(self.reloc_err(
                            r,
                            &name,
                            "symbol resolved to a non-TLS definition",
                        ))
                    }
                };
                // SAFETY: checked 16-byte target in a relocatable segment. The argument
                // is written before the function, as glibc does (nothing runs the
                // library's code during relocation anyway).
                unsafe {
                    std::ptr::write_unaligned((p as *mut u64).add(1), desc[1]);
                    std::ptr::write_unaligned(p as *mut u64, desc[0]);
                }
                Ok(())
            }
            R_X86_64_DTPMOD64 | R_X86_64_DTPOFF64 | R_X86_64_TPOFF64 => {
                let p = self.check_target(r, 8)?;
                stats.tls += 1;
                let def = self.tls_def(r, scope, self_first, bound)?;
                let name = self.sym_name(r.sym);
                let value: u64 = match (r.kind, def) {
                    (_, None) => 0,
                    (R_X86_64_DTPMOD64, Some(Def::Custom(img, _))) => img
                        .tls_module
                        .ok_or_else(|| self.reloc_err(r, &name, "defining library has no PT_TLS"))?,
                    (R_X86_64_DTPOFF64, Some(Def::Custom(_, s))) => s.value.wrapping_add(r.addend as u64),
                    (R_X86_64_DTPMOD64, Some(Def::SystemTls(ti))) => ti.module,
                    (R_X86_64_DTPOFF64, Some(Def::SystemTls(ti))) => ti.offset.wrapping_add(r.addend as u64),
                    (R_X86_64_TPOFF64, Some(Def::SystemTls(ti))) if ti.module & tls::OUR_MODULE == 0 => {
                        // Initial-exec access to a variable in the system's static TLS:
                        // its offset from the thread pointer is the same in every thread.
                        let addr = tls::address_in_thread(&ti);
                        let off = tls::static_tls_offset(addr).ok_or_else(|| {
                            self.reloc_err(r, &name, "symbol is not in the system's static TLS block (its library was loaded with dlopen and uses dynamic TLS)")
                        })?;
                        off.wrapping_add(r.addend as u64)
                    }
                    (R_X86_64_TPOFF64, Some(Def::Custom(img, s))) => {
                        // Initial-exec access to a module in the loader's static pool: its
                        // block is at this offset from every thread's thread pointer.
                        let module = img.tls_module.ok_or_else(|| {
                            self.reloc_err(r, &name, "the defining library has no TLS segment")
                        })?;
                        let off = tls::static_offset(module).map_err(|why| {
                            self.reloc_err(
                                r,
                                &name,
                                &format!(
                                    "initial-exec TLS needs a static TLS offset, a part of the loader's {}-byte static pool, which its library did not get: {why}; or build it with -ftls-model=global-dynamic",
                                    tls::STATIC_POOL_SIZE
                                ),
                            )
                        })?;
                        off.wrapping_add(s.value).wrapping_add(r.addend as u64)
                    }
                    (R_X86_64_TPOFF64, Some(Def::SystemTls(_))) => {
                        return Err(self.reloc_err(
                            r,
                            &name,
                            "initial-exec TLS against a variable whose blocks are allocated per thread (a custom-loaded module's TLS outside the static pool)",
                        ))
                    }
                    (_, Some(_)) => return Err(self.reloc_err(r, &name, "symbol resolved to a non-TLS definition")),
                };
                // SAFETY: checked target.
                unsafe { std::ptr::write_unaligned(p as *mut u64, value) };
                Ok(())
            }
            R_X86_64_COPY => Err(self.reloc_err(
                r,
                &self.sym_name(r.sym),
                "copy relocations belong to executables",
            )),
            _ => Err(self.reloc_err(r, &self.sym_name(r.sym), "unsupported relocation type")),
        }
    }

    /// The definition a TLS relocation refers to: symbol 0 is this module itself
    /// (local-dynamic, or a local symbol folded into the addend); a defined TLS symbol of
    /// a custom library as `Def::Custom` (its binding recorded); a system library's as
    /// `Def::SystemTls`; `None` for a weak undefined one.
    fn tls_def(
        self: &Arc<Self>,
        r: &Rela,
        scope: &[ScopeItem],
        self_first: Option<&Overrides>,
        bound: &mut Vec<Arc<Image>>,
    ) -> Result<Option<Def>> {
        if r.sym == 0 {
            return Ok(Some(Def::Custom(
                self.clone(),
                Sym {
                    name: 0,
                    info: STT_TLS,
                    other: 0,
                    shndx: 1,
                    value: 0,
                    size: 0,
                },
            )));
        }
        let s = self.sym(r.sym);
        if s.kind() != STT_TLS {
            return Err(self.reloc_err(
                r,
                &self.sym_name(r.sym),
                "TLS relocation against a non-TLS symbol",
            ));
        }
        Ok(match self.resolve(r, scope, self_first)? {
            Some(Def::Own(s)) => Some(Def::Custom(self.clone(), s)),
            Some(Def::Custom(other, s)) => {
                if !Arc::ptr_eq(&other, self) {
                    record_binding(bound, &other);
                }
                Some(Def::Custom(other, s))
            }
            d => d,
        })
    }

    /// Records that this image uses symbols of `others` (which then stay loaded as long
    /// as it does, even when they are not among its dependencies: glibc's `l_reldeps`).
    pub fn add_reldeps(&self, others: &[Arc<Image>]) {
        let mut r = self.reldeps.lock();
        for o in others {
            if !std::ptr::eq(&**o, self) && !r.iter().any(|w| std::ptr::eq(w.as_ptr(), &**o)) {
                r.push(Arc::downgrade(o));
            }
        }
    }

    /// Resolves the symbol of relocation `r` through `scope`; `Ok(None)` for a weak
    /// undefined symbol found nowhere.
    ///
    /// With `self_first` (the scope is the loader's overrides, then this image, then
    /// the rest), a symbol this image exports binds to its own definition without a hash
    /// lookup: the lookup would find that very entry, since it is the first match in its
    /// hash chain for its name and version (see `SymTab::exports_own`).
    fn resolve(
        self: &Arc<Self>,
        r: &Rela,
        scope: &[ScopeItem],
        self_first: Option<&Overrides>,
    ) -> Result<Option<Def>> {
        Ok(self.resolve_at(r, scope, self_first)?.0)
    }

    /// [`Image::resolve`], also telling whether the answer may go into a relocation
    /// plan: `Some(pos)` when it holds for any scope matching this one item by item
    /// (`pos` is the scope position of a custom definition; unused for the others),
    /// `None` when it could change (see `lookup_scope_at`) or nothing was found.
    fn resolve_at(
        self: &Arc<Self>,
        r: &Rela,
        scope: &[ScopeItem],
        self_first: Option<&Overrides>,
    ) -> Result<(Option<Def>, Option<usize>)> {
        let s = self.sym(r.sym);
        let name = self.str_at(s.name).ok_or_else(|| {
            self.reloc_err(r, "", &format!("symbol {} has a bad name offset", r.sym))
        })?;
        // A defined symbol that is local or hidden binds to itself (no lookup).
        if s.is_defined() && (s.bind() == STB_LOCAL || s.other & 3 == 2 || s.other & 3 == 1) {
            return Ok((Some(Def::Own(s)), Some(0)));
        }
        let is_tls = s.kind() == STT_TLS;
        if let Some(overrides) = self_first {
            if self.tab.exports_own(r.sym) && (is_tls || overrides.get(name).is_none()) {
                return Ok((Some(Def::Own(s)), Some(0)));
            }
        }
        let version = self.wanted_version(r.sym);
        let hash = gnu_hash(name);
        if let Some((d, stable)) = lookup_scope_at(scope, name, hash, version, is_tls) {
            return Ok((Some(d), stable));
        }
        if s.bind() == STB_WEAK {
            return Ok((None, None));
        }
        Err(Error::UndefinedSymbol {
            path: self.path.clone(),
            symbol: String::from_utf8_lossy(name).into_owned(),
            version: version.map(|v| format!("@{v}")).unwrap_or_default(),
            offset: r.offset,
        })
    }

    /// Whether `addr` lies inside an executable segment of this image.
    fn is_code(&self, addr: usize) -> bool {
        self.info.loads.iter().any(|l| {
            l.flags & PF_X != 0 && addr >= self.addr(l.vaddr) && addr < self.addr(l.vaddr + l.memsz)
        })
    }

    /// The relocated entries of an init/fini array (0 and -1 entries skipped).
    fn array_entries(&self, t: crate::elf::Table) -> Vec<usize> {
        (0..t.len / 8)
            .map(|i| {
                // SAFETY: the array lies in a readable part of our mapping (parser).
                unsafe { std::ptr::read_unaligned(self.ptr(t.vaddr + i * 8) as *const usize) }
            })
            .filter(|&v| v != 0 && v != usize::MAX)
            .collect()
    }

    /// Checks, after relocation, that every init and fini function is code of this
    /// image: a corrupt array must give an error, not a jump to a random address.
    pub fn check_init_fini(&self) -> Result<()> {
        for (t, what) in [
            (self.info.init_array, "DT_INIT_ARRAY"),
            (self.info.fini_array, "DT_FINI_ARRAY"),
        ] {
            for (i, v) in self.array_entries(t).into_iter().enumerate() {
                if !self.is_code(v) {
                    return Err(Error::malformed(
                        &self.path,
                        format!("{what} entry {i} = {v:#x} is not inside an executable segment of the library"),
                    ));
                }
            }
        }
        Ok(())
    }

    /// Runs DT_INIT and DT_INIT_ARRAY with (argc, argv, envp).
    pub fn run_init(&self) {
        if self.initialized.swap(true, Ordering::AcqRel) {
            return;
        }
        let (argc, argv, envp) = init_args();
        let _span = tracing::debug_span!("init", library = %self.path.display()).entered();
        type InitFn = extern "C" fn(c_int, *const *const c_char, *const *const c_char);
        if let Some(init) = self.info.init {
            // SAFETY: DT_INIT is inside an executable segment of this relocated image
            // (checked by the parser) and has the init calling convention.
            let f: InitFn = unsafe { std::mem::transmute(self.addr(init)) };
            f(argc, argv, envp);
        }
        for v in self.array_entries(self.info.init_array) {
            // SAFETY: a relocated INIT_ARRAY entry, checked by `check_init_fini` to be
            // code of this image.
            let f: InitFn = unsafe { std::mem::transmute(v) };
            f(argc, argv, envp);
        }
    }

    /// Runs DT_FINI_ARRAY in reverse, then DT_FINI (once, and only after init).
    pub fn run_fini(&self) {
        if !self.initialized.load(Ordering::Acquire) || self.finalized.swap(true, Ordering::AcqRel)
        {
            return;
        }
        let _span = tracing::debug_span!("fini", library = %self.path.display()).entered();
        for v in self.array_entries(self.info.fini_array).into_iter().rev() {
            if !self.is_code(v) {
                // Checked at load; only a library that rewrote its own (RELRO) array
                // gets here.
                tracing::warn!(library = %self.path.display(), entry = v, "skipping a FINI_ARRAY entry outside the library's code");
                continue;
            }
            // SAFETY: a relocated FINI_ARRAY entry that is code of this image.
            let f: extern "C" fn() = unsafe { std::mem::transmute(v) };
            f();
        }
        if let Some(fini) = self.info.fini {
            // SAFETY: DT_FINI is inside an executable segment of this image.
            let f: extern "C" fn() = unsafe { std::mem::transmute(self.addr(fini)) };
            f();
        }
    }
}

/// The `st_size` of the system loader's symbol at exactly `addr` (`dladdr1`).
fn system_symbol_size(addr: usize) -> Option<u64> {
    const RTLD_DL_SYMENT: libc::c_int = 1;
    // SAFETY: Dl_info is plain data; all-zero is a valid value.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    let mut sym: *mut libc::c_void = std::ptr::null_mut();
    // SAFETY: valid out-pointers; dladdr1 only reads the system loader's tables.
    let ok = unsafe { libc::dladdr1(addr as *const _, &mut info, &mut sym, RTLD_DL_SYMENT) };
    if ok == 0 || sym.is_null() || info.dli_saddr as usize != addr {
        return None;
    }
    // SAFETY: with RTLD_DL_SYMENT, `sym` points at the symbol's Elf64_Sym in the
    // system loader's (mapped, readable) symbol table.
    Some(unsafe { (*(sym as *const libc::Elf64_Sym)).st_size })
}

/// Notes that relocations bound to `other` (once per image).
fn record_binding(bound: &mut Vec<Arc<Image>>, other: &Arc<Image>) {
    if !bound.iter().any(|b| Arc::ptr_eq(b, other)) {
        bound.push(other.clone());
    }
}

/// Looks a symbol up through a scope, in order. System libraries are searched in
/// their own symbol tables first (fast); only if no item has the symbol are they asked
/// through `dlvsym`, which also searches their dependencies.
///
/// Also tells whether the answer holds for any scope that matches
/// this one item by item (a relocation plan may record it): `Some(position of the item
/// that defined it)` for a definition found in an item's own symbol table, among the
/// loader's overrides, or through `dlvsym` on a specific library's handle, when no item
/// before it could answer differently later. The process's global scope
/// (`RTLD_DEFAULT`, which `dlopen(RTLD_GLOBAL)` extends) and `SymbolProvider`s can:
/// once one of them has been asked without success, and for anything found through
/// them or by the `dlvsym` fallback, the answer is `None`.
pub(crate) fn lookup_scope_at(
    scope: &[ScopeItem],
    name: &[u8],
    hash: u32,
    version: Option<&str>,
    is_tls: bool,
) -> Option<(Def, Option<usize>)> {
    let mut cname: Option<CString> = None;
    let mut cver: Option<Option<CString>> = None;
    let mut slow = false;
    // No item asked so far could give another answer later.
    let mut stable = true;
    // Handles already asked through dlsym/dlvsym, without success.
    let mut asked: Vec<*mut std::ffi::c_void> = Vec::new();
    for (pos, item) in scope.iter().enumerate() {
        let here = stable.then_some(pos);
        match item {
            ScopeItem::Overrides(overrides) => {
                if !is_tls {
                    if let Some(a) = overrides.get(name) {
                        return Some((Def::Addr(a), here));
                    }
                }
            }
            ScopeItem::Custom(img) => {
                if let Some(s) = img.lookup_own(name, hash, version) {
                    if (s.kind() == STT_TLS) == is_tls {
                        return Some((Def::Custom(img.clone(), s), here));
                    }
                }
            }
            ScopeItem::System(lib) => {
                if let Some(tab) = lib.symtab() {
                    // The library's own table (thread-local symbols included, versioned
                    // or not); what it lacks may come from its dependencies: asked
                    // through dlvsym below if nothing else in the scope has it.
                    slow = true;
                    if let Some(s) = tab.lookup(name, hash, version) {
                        if s.kind() != STT_TLS {
                            if !is_tls {
                                return Some((Def::Addr(tab.address(&s)), here));
                            }
                        } else if let (true, Some(module)) = (is_tls, lib.tls_module()) {
                            return Some((
                                Def::SystemTls(TlsIndex {
                                    module,
                                    offset: s.value,
                                }),
                                here,
                            ));
                        }
                    }
                    continue;
                }
                let n = cname.get_or_insert_with(|| CString::new(name).unwrap_or_default());
                let v = cver.get_or_insert_with(|| version.and_then(|v| CString::new(v).ok()));
                let process_scope = lib.dl_handle() == libc::RTLD_DEFAULT;
                let here = here.filter(|_| !process_scope);
                if is_tls {
                    if let Some(ti) = lib.tls_lookup_c(n, v.as_deref()) {
                        return Some((Def::SystemTls(ti), here));
                    }
                } else {
                    if let Some(a) = lib.lookup_c(n, v.as_deref()) {
                        return Some((Def::Addr(a), here));
                    }
                    asked.push(lib.dl_handle());
                }
                if process_scope {
                    stable = false;
                }
            }
            ScopeItem::Provider(p) => {
                let n = std::str::from_utf8(name).ok()?;
                if is_tls {
                    if let Some(ti) = p.tls_sym(n) {
                        return Some((Def::SystemTls(ti), None));
                    }
                } else if let Some(a) = p.sym_versioned(n, version) {
                    return Some((Def::Addr(a), None));
                }
                stable = false;
            }
        }
    }
    if slow {
        let n = cname.get_or_insert_with(|| CString::new(name).unwrap_or_default());
        let v = cver.get_or_insert_with(|| version.and_then(|v| CString::new(v).ok()));
        for item in scope {
            if let ScopeItem::System(lib) = item {
                // The same handle gives the same answer: ask each one once (the C
                // runtime's start-up libraries and the global scope all go through
                // RTLD_DEFAULT, and a failed dlsym costs an error message).
                let h = lib.dl_handle();
                if asked.contains(&h) {
                    continue;
                }
                if is_tls {
                    if let Some(ti) = lib.tls_lookup_c(n, v.as_deref()) {
                        return Some((Def::SystemTls(ti), None));
                    }
                } else if let Some(a) = lib.lookup_c(n, v.as_deref()) {
                    return Some((Def::Addr(a), None));
                }
                asked.push(h);
            }
        }
    }
    None
}

/// The (argc, argv, envp) passed to init functions: the process's own arguments.
pub(crate) fn init_args() -> (c_int, *const *const c_char, *const *const c_char) {
    struct Args {
        _strings: Vec<CString>,
        ptrs: Vec<*const c_char>,
    }
    // SAFETY: the pointers point into `_strings`, which lives as long as the static.
    unsafe impl Send for Args {}
    // SAFETY: immutable after construction.
    unsafe impl Sync for Args {}
    static ARGS: OnceLock<Args> = OnceLock::new();
    let a = ARGS.get_or_init(|| {
        let strings: Vec<CString> = std::env::args_os()
            .map(|a| CString::new(a.as_encoded_bytes()).unwrap_or_default())
            .collect();
        let mut ptrs: Vec<*const c_char> = strings.iter().map(|s| s.as_ptr()).collect();
        ptrs.push(std::ptr::null());
        Args {
            _strings: strings,
            ptrs,
        }
    });
    extern "C" {
        static environ: *const *const c_char;
    }
    // SAFETY: reading the C library's `environ` pointer.
    let envp = unsafe { environ };
    ((a.ptrs.len() - 1) as c_int, a.ptrs.as_ptr(), envp)
}
