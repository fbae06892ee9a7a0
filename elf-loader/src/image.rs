//! A mapped library (`Image`): symbol lookup in its own tables (GNU and SysV hash,
//! versions), relocation against a resolution scope, and init/fini calls. The
//! relocation is in two child modules: `relocate` (the loops over the tables) and
//! `reloc_kinds` (each relocation kind).

use crate::elf::{consts::*, gnu_hash, ElfInfo, Sym};
use crate::error::{Error, Result};
use crate::map::Mapping;
use crate::overrides::Overrides;
use crate::symtab::SymTab;
use crate::system::{SymbolProvider, SystemLibrary};
use crate::tls::TlsIndex;
use std::ffi::{c_char, c_int, CString};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, Weak};

mod reloc_kinds;
mod relocate;

/// One library mapped by this loader.
///
/// Its methods live in three files: `image.rs` (lookups in its own symbol tables,
/// `add_reldeps`, the init/fini checks and calls), `image/relocate.rs` (`relocate`: the
/// relocation loops, `DT_RELR`, target pre-population, replaying a plan) and
/// `image/reloc_kinds.rs` (`apply`: each relocation kind, and the symbol resolution
/// it uses).
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
