//! A dynamic symbol table in memory, with GNU/SysV hash lookup and version checks.
//!
//! Used for the libraries this loader maps (built from the validated [`ElfInfo`]) and
//! for the system loader's libraries (built from their `link_map`'s dynamic section):
//! looking a symbol up in libc this way costs a hash probe instead of a `dlvsym` call,
//! which is what keeps relocating libpython (1,600 libc/libm imports) cheap.

use crate::elf::{consts::*, ElfInfo, Sym};
use std::ffi::{c_int, c_void};

#[derive(Debug, Clone, Copy)]
struct Gnu {
    bloom: usize,
    bloom_size: u32,
    bloom_shift: u32,
    buckets: usize,
    nbuckets: u32,
    chains: usize,
    symoffset: u32,
}

#[derive(Debug, Clone, Copy)]
struct Sysv {
    buckets: usize,
    nbucket: u32,
    chains: usize,
    nchain: u32,
}

/// A symbol table view. All addresses are absolute; the memory they point to stays
/// mapped as long as the owner (an image, or a system library we hold open) lives.
#[derive(Debug)]
pub(crate) struct SymTab {
    /// Load bias of the object (added to symbol values).
    pub bias: usize,
    symtab: usize,
    /// Number of symbols.
    pub nsyms: u32,
    strtab: usize,
    strsz: usize,
    gnu: Option<Gnu>,
    sysv: Option<Sysv>,
    versym: Option<usize>,
    /// Version names by version index (defined and needed).
    versions: Vec<Option<String>>,
}

// SAFETY: a read-only view of immutable tables; the owner keeps them mapped.
unsafe impl Send for SymTab {}
// SAFETY: as above: only reads.
unsafe impl Sync for SymTab {}

#[inline]
fn rd32(a: usize) -> u32 {
    // SAFETY: callers pass addresses inside tables that were bounds-checked (custom
    // images) or that the system loader mapped (system libraries).
    unsafe { std::ptr::read_unaligned(a as *const u32) }
}

impl SymTab {
    /// The tables of a library mapped at `bias`, as validated by the parser.
    pub fn from_info(info: &ElfInfo, bias: usize) -> SymTab {
        let at = |v: u64| bias.wrapping_add(v as usize);
        SymTab {
            bias,
            symtab: at(info.symtab.vaddr),
            nsyms: info.nsyms,
            strtab: at(info.strtab.vaddr),
            strsz: info.strtab.len as usize,
            gnu: info.gnu_hash.map(|g| {
                let base = at(g.table.vaddr);
                let buckets = base + 16 + g.bloom_size as usize * 8;
                Gnu {
                    bloom: base + 16,
                    bloom_size: g.bloom_size,
                    bloom_shift: g.bloom_shift,
                    buckets,
                    nbuckets: g.nbuckets,
                    chains: buckets + g.nbuckets as usize * 4,
                    symoffset: g.symoffset,
                }
            }),
            sysv: info.sysv_hash.map(|h| {
                let base = at(h.table.vaddr);
                Sysv {
                    buckets: base + 8,
                    nbucket: h.nbucket,
                    chains: base + 8 + h.nbucket as usize * 4,
                    nchain: h.nchain,
                }
            }),
            versym: info.versym.map(|t| at(t.vaddr)),
            versions: info
                .versions
                .iter()
                .map(|v| v.as_ref().map(|v| v.name.clone()))
                .collect(),
        }
    }

    /// The tables of a library the system loader has loaded (`handle` from `dlopen`),
    /// read from its dynamic section. `None` if it has no GNU hash table or something
    /// looks wrong (callers then use `dlvsym`).
    ///
    /// # Safety
    /// `handle` must be a live `dlopen` handle that stays open while the view is used.
    pub unsafe fn from_system(handle: *mut c_void) -> Option<SymTab> {
        extern "C" {
            fn dlinfo(handle: *mut c_void, request: c_int, arg: *mut c_void) -> c_int;
        }
        const RTLD_DI_LINKMAP: c_int = 2;
        #[repr(C)]
        struct LinkMap {
            l_addr: usize,
            l_name: *const u8,
            l_ld: *const u64,
        }
        let mut lm: *const LinkMap = std::ptr::null();
        // SAFETY: caller's contract (live handle); RTLD_DI_LINKMAP stores a link_map*.
        if unsafe { dlinfo(handle, RTLD_DI_LINKMAP, &mut lm as *mut _ as *mut c_void) } != 0
            || lm.is_null()
        {
            return None;
        }
        // SAFETY: glibc's link_map starts with the public fields.
        let (l_addr, d) = unsafe { ((*lm).l_addr, (*lm).l_ld) };
        // SAFETY: caller's contract: the library stays loaded.
        unsafe { Self::from_dynamic(l_addr, d) }
    }

    /// The tables of a library the system loader has mapped at `l_addr` with its
    /// dynamic section at `dynamic`.
    ///
    /// # Safety
    /// The library must stay loaded while the view is used.
    pub unsafe fn from_dynamic(l_addr: usize, dynamic: *const u64) -> Option<SymTab> {
        let mut d = dynamic;
        if d.is_null() {
            return None;
        }
        // glibc relocates most d_ptr entries in place; small values are still
        // link-time addresses.
        let abs = |v: u64| -> usize {
            let v = v as usize;
            if v < l_addr {
                l_addr.wrapping_add(v)
            } else {
                v
            }
        };
        let (mut gnu, mut symtab, mut strtab, mut strsz, mut versym) = (0, 0, 0, 0, 0);
        let (mut verdef, mut verdefnum) = (0, 0);
        loop {
            // SAFETY: the dynamic section of a loaded library, DT_NULL-terminated.
            let (tag, val) = unsafe { (*d, *d.add(1)) };
            match tag {
                DT_NULL => break,
                DT_GNU_HASH => gnu = abs(val),
                DT_SYMTAB => symtab = abs(val),
                DT_STRTAB => strtab = abs(val),
                DT_STRSZ => strsz = val as usize,
                DT_VERSYM => versym = abs(val),
                DT_VERDEF => verdef = abs(val),
                DT_VERDEFNUM => verdefnum = val as usize,
                _ => {}
            }
            // SAFETY: next entry; the section is terminated by DT_NULL.
            d = unsafe { d.add(2) };
        }
        if gnu == 0 || symtab == 0 || strtab == 0 {
            return None;
        }
        let nbuckets = rd32(gnu);
        let symoffset = rd32(gnu + 4);
        let bloom_size = rd32(gnu + 8);
        let bloom_shift = rd32(gnu + 12);
        if nbuckets == 0 || bloom_size == 0 || !bloom_size.is_power_of_two() || bloom_shift >= 64 {
            return None;
        }
        let buckets = gnu + 16 + bloom_size as usize * 8;
        let chains = buckets + nbuckets as usize * 4;
        // The symbol count: the chain that starts highest runs to the last symbol
        // (hashed symbols are sorted by bucket), so walk only that one.
        let mut start = 0;
        for b in 0..nbuckets as usize {
            start = start.max(rd32(buckets + b * 4));
        }
        let mut nsyms = symoffset;
        if start >= symoffset {
            let mut i = start;
            while rd32(chains + (i - symoffset) as usize * 4) & 1 == 0 {
                i += 1;
            }
            nsyms = i + 1;
        }
        let mut versions: Vec<Option<String>> = Vec::new();
        let mut at = verdef;
        for _ in 0..verdefnum.min(0x8000) {
            if at == 0 {
                break;
            }
            // SAFETY: an Elf64_Verdef entry of a loaded library, read in place (`Verdef`'s
            // fields are byte arrays, alignment 1).
            let vd = unsafe { &*(at as *const object::elf::Verdef<object::LittleEndian>) };
            let le = object::LittleEndian;
            let (ndx, cnt, aux, next) = (
                vd.vd_ndx.get(le).0,
                vd.vd_cnt.get(le),
                vd.vd_aux.get(le),
                vd.vd_next.get(le),
            );
            if cnt > 0 {
                let name_off = rd32(at + aux as usize) as usize;
                if name_off < strsz {
                    // SAFETY: a NUL-terminated string inside DT_STRTAB.
                    let name = unsafe {
                        std::ffi::CStr::from_ptr((strtab + name_off) as *const std::ffi::c_char)
                    };
                    let idx = (ndx & 0x7fff) as usize;
                    if versions.len() <= idx {
                        versions.resize(idx + 1, None);
                    }
                    versions[idx] = Some(name.to_string_lossy().into_owned());
                }
            }
            if next == 0 {
                break;
            }
            at += next as usize;
        }
        Some(SymTab {
            bias: l_addr,
            symtab,
            nsyms,
            strtab,
            strsz,
            gnu: Some(Gnu {
                bloom: gnu + 16,
                bloom_size,
                bloom_shift,
                buckets,
                nbuckets,
                chains,
                symoffset,
            }),
            sysv: None,
            versym: (versym != 0).then_some(versym),
            versions,
        })
    }

    /// Symbol `i` (must be < nsyms).
    #[inline]
    pub fn sym(&self, i: u32) -> Sym {
        debug_assert!(i < self.nsyms);
        let p = self.symtab + i as usize * 24;
        // SAFETY: i < nsyms and the table holds nsyms entries; `Sym64`'s fields are byte
        // arrays (alignment 1), read in place (the same loads as by hand).
        Sym::from_object(unsafe { &*(p as *const object::elf::Sym64<object::LittleEndian>) })
    }

    /// The string at `off` in the string table, without its NUL.
    pub fn str_at(&self, off: u32) -> Option<&[u8]> {
        let off = off as usize;
        if off >= self.strsz {
            return None;
        }
        let p = (self.strtab + off) as *const std::ffi::c_char;
        // SAFETY: the string table has strsz bytes, so [p, p + strsz - off) is readable;
        // strnlen reads no further.
        let n = unsafe { libc::strnlen(p, self.strsz - off) };
        if n == self.strsz - off {
            return None; // unterminated
        }
        // SAFETY: n bytes from p lie inside the string table.
        Some(unsafe { std::slice::from_raw_parts(p as *const u8, n) })
    }

    /// Whether the string at `off` equals `name` (without scanning past it).
    #[inline]
    fn name_eq(&self, off: u32, name: &[u8]) -> bool {
        let off = off as usize;
        if off + name.len() >= self.strsz {
            return false;
        }
        // SAFETY: off + len < strsz, inside the string table.
        let s =
            unsafe { std::slice::from_raw_parts((self.strtab + off) as *const u8, name.len() + 1) };
        s[..name.len()] == *name && s[name.len()] == 0
    }

    /// The version index of symbol `i`.
    pub fn versym(&self, i: u32) -> Option<u16> {
        let v = self.versym?;
        // SAFETY: DT_VERSYM holds one u16 per symbol; i < nsyms.
        Some(unsafe { std::ptr::read_unaligned((v + i as usize * 2) as *const u16) })
    }

    /// The version name a reference from symbol `i` asks for (`None` if unversioned).
    pub fn wanted_version(&self, i: u32) -> Option<&str> {
        let v = self.versym(i)? & 0x7fff;
        if v < 2 {
            return None;
        }
        self.versions.get(v as usize)?.as_deref()
    }

    /// Whether the object defines (`DT_VERDEF`) the version `name`.
    pub fn defines_version(&self, name: &str) -> bool {
        self.versions.iter().flatten().any(|v| v == name)
    }

    fn version_ok(&self, i: u32, version: Option<&str>) -> bool {
        let Some(vs) = self.versym(i) else {
            return true;
        };
        let idx = vs & 0x7fff;
        match version {
            Some(want) => {
                idx < 2 || self.versions.get(idx as usize).and_then(|v| v.as_deref()) == Some(want)
            }
            None => vs & 0x8000 == 0,
        }
    }

    #[inline]
    fn candidate(&self, i: u32, name: &[u8], version: Option<&str>) -> Option<Sym> {
        let s = self.sym(i);
        if !s.is_defined() || !matches!(s.bind(), STB_GLOBAL | STB_WEAK | STB_GNU_UNIQUE) {
            return None;
        }
        // STV_INTERNAL (1) and STV_HIDDEN (2) are not visible from outside.
        if matches!(s.other & 3, 1 | 2) || !self.name_eq(s.name, name) {
            return None;
        }
        self.version_ok(i, version).then_some(s)
    }

    /// Whether a lookup of symbol `i`'s own name with `version` in this table finds
    /// symbol `i` itself: it is defined, global or weak, visible, reachable through the
    /// hash table and of that version. (The lookup returns the first match in the hash
    /// chain; a second exported definition of the same name and version would be a
    /// duplicate definition, which linkers refuse.) This is the specification of
    /// `SymTab::exports_own`, which relocation uses; the tests check that they agree.
    #[cfg(test)]
    pub fn exports(&self, i: u32, version: Option<&str>) -> bool {
        if i >= self.nsyms {
            return false;
        }
        let hashed = match (self.gnu, self.sysv) {
            (Some(g), _) => i >= g.symoffset,
            (None, Some(h)) => i < h.nchain,
            (None, None) => false,
        };
        if !hashed {
            return false;
        }
        let s = self.sym(i);
        s.is_defined()
            && matches!(s.bind(), STB_GLOBAL | STB_WEAK | STB_GNU_UNIQUE)
            && !matches!(s.other & 3, 1 | 2)
            && self.version_ok(i, version)
    }

    /// `exports(i, wanted_version(i))`, without comparing version names: the version a
    /// symbol's own reference asks for is its own version index's name, so only the
    /// hidden bit matters when that index names no version.
    #[inline]
    pub fn exports_own(&self, i: u32) -> bool {
        if i >= self.nsyms {
            return false;
        }
        let hashed = match (self.gnu, self.sysv) {
            (Some(g), _) => i >= g.symoffset,
            (None, Some(h)) => i < h.nchain,
            (None, None) => false,
        };
        if !hashed {
            return false;
        }
        let s = self.sym(i);
        if !s.is_defined()
            || !matches!(s.bind(), STB_GLOBAL | STB_WEAK | STB_GNU_UNIQUE)
            || matches!(s.other & 3, 1 | 2)
        {
            return false;
        }
        match self.versym(i) {
            None => true,
            Some(vs) => {
                let idx = (vs & 0x7fff) as usize;
                (idx >= 2 && matches!(self.versions.get(idx), Some(Some(_)))) || vs & 0x8000 == 0
            }
        }
    }

    /// Looks `name` (with GNU hash `hash`) up among the exported symbols.
    pub fn lookup(&self, name: &[u8], hash: u32, version: Option<&str>) -> Option<Sym> {
        if let Some(g) = self.gnu {
            // SAFETY: inside the GNU hash table's bloom words.
            let word = unsafe {
                std::ptr::read_unaligned(
                    (g.bloom + ((hash / 64) % g.bloom_size) as usize * 8) as *const u64,
                )
            };
            let mask = (1u64 << (hash % 64)) | (1u64 << ((hash >> g.bloom_shift) % 64));
            if word & mask != mask {
                return None;
            }
            let mut i = rd32(g.buckets + (hash % g.nbuckets) as usize * 4);
            if i == 0 {
                return None;
            }
            loop {
                if i >= self.nsyms || i < g.symoffset {
                    return None;
                }
                let h = rd32(g.chains + (i - g.symoffset) as usize * 4);
                if (h | 1) == (hash | 1) {
                    if let Some(s) = self.candidate(i, name, version) {
                        return Some(s);
                    }
                }
                if h & 1 == 1 {
                    return None;
                }
                i += 1;
            }
        }
        let h = self.sysv?;
        let hv = crate::elf::sysv_hash(name);
        let mut i = rd32(h.buckets + (hv % h.nbucket) as usize * 4);
        let mut steps = 0;
        while i != 0 && i < h.nchain && i < self.nsyms && steps <= h.nchain {
            if let Some(s) = self.candidate(i, name, version) {
                return Some(s);
            }
            i = rd32(h.chains + i as usize * 4);
            steps += 1;
        }
        None
    }

    /// The runtime address of a defined non-TLS symbol, calling ifunc resolvers.
    pub fn address(&self, s: &Sym) -> usize {
        let a = if s.shndx == SHN_ABS {
            s.value as usize
        } else {
            self.bias.wrapping_add(s.value as usize)
        };
        if s.kind() == STT_GNU_IFUNC {
            // SAFETY: an ifunc resolver of a relocated library; on x86_64 resolvers take
            // no arguments and return the implementation's address.
            let f: extern "C" fn() -> usize = unsafe { std::mem::transmute(a) };
            return f();
        }
        a
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::elf::gnu_hash;

    /// `exports(i, wanted_version(i))` is the shortcut relocation takes for a library's
    /// references to its own symbols; it must agree with the full hash lookup of the
    /// symbol's name and version, which must find that very entry.
    fn check_exports_agrees_with_lookup(tab: &SymTab, what: &str) -> (usize, usize) {
        let (mut shortcut, mut defined) = (0, 0);
        for i in 1..tab.nsyms {
            let s = tab.sym(i);
            let Some(name) = tab.str_at(s.name) else {
                continue;
            };
            let version = tab.wanted_version(i);
            assert_eq!(
                tab.exports_own(i),
                tab.exports(i, version),
                "{what}: symbol {i}"
            );
            if s.is_defined() && s.bind() != STB_LOCAL {
                defined += 1;
            }
            let found = tab.lookup(name, gnu_hash(name), version);
            if tab.exports(i, version) {
                shortcut += 1;
                let f = found.unwrap_or_else(|| {
                    panic!("{what}: symbol {i} exported but not found by lookup")
                });
                assert_eq!(
                    (f.name, f.value, f.info, f.other, f.shndx),
                    (s.name, s.value, s.info, s.other, s.shndx),
                    "{what}: lookup of symbol {i} ({}) found another entry",
                    String::from_utf8_lossy(name)
                );
            }
        }
        (shortcut, defined)
    }

    /// One symbol of a generated table.
    #[derive(Debug, Clone)]
    struct GenSym {
        /// Index into a small name pool (so names repeat).
        name: usize,
        defined: bool,
        bind: u8,
        /// st_other & 3.
        vis: u8,
        /// Version index (0 local, 1 global, 2 "V1", 3 "V2"), before the hidden bit.
        ver: u16,
        hidden: bool,
    }

    const NAMES: [&str; 5] = ["alpha", "beta", "gamma", "PyType_Ready", "memcpy"];

    fn gen_sym() -> impl proptest::strategy::Strategy<Value = GenSym> {
        use proptest::prelude::*;
        (
            0..NAMES.len(),
            any::<bool>(),
            prop_oneof![Just(STB_LOCAL), Just(STB_GLOBAL), Just(STB_WEAK)],
            prop_oneof![Just(0u8), Just(0), Just(1), Just(2), Just(3)],
            0u16..4,
            any::<bool>(),
        )
            .prop_map(|(name, defined, bind, vis, ver, hidden)| GenSym {
                name,
                defined,
                bind,
                vis,
                ver,
                hidden,
            })
    }

    /// The memory behind a generated [`SymTab`] (the view points into it).
    struct Built {
        _strtab: Vec<u8>,
        _syms: Vec<u8>,
        _hash: Vec<u32>,
        _versym: Vec<u16>,
        tab: SymTab,
    }

    /// Builds the tables a linker would: symbols below `unhashed` are outside the GNU
    /// hash table; the others are ordered by bucket, with a real bloom filter. With
    /// `sysv`, a SysV hash table over every symbol instead.
    fn build(syms: &[GenSym], unhashed: usize, nbuckets: u32, sysv: bool) -> Built {
        let mut strtab = vec![0u8];
        let name_off: Vec<u32> = NAMES
            .iter()
            .map(|n| {
                let off = strtab.len() as u32;
                strtab.extend_from_slice(n.as_bytes());
                strtab.push(0);
                off
            })
            .collect();
        // Index 0 is the null symbol; generated symbols follow, the hashed ones sorted
        // by bucket (stable, so equal names keep their relative order).
        let mut order: Vec<&GenSym> = syms.iter().collect();
        let split = unhashed.min(order.len());
        let bucket = |g: &GenSym| gnu_hash(NAMES[g.name].as_bytes()) % nbuckets;
        if !sysv {
            order[split..].sort_by_key(|g| bucket(g));
        }
        let n = order.len() + 1;
        let mut symbytes = vec![0u8; n * 24];
        let mut versym = vec![0u16; n];
        for (k, g) in order.iter().enumerate() {
            let i = k + 1;
            let e = &mut symbytes[i * 24..i * 24 + 24];
            e[0..4].copy_from_slice(&name_off[g.name].to_le_bytes());
            e[4] = (g.bind << 4) | STT_FUNC;
            e[5] = g.vis;
            let shndx: u16 = if g.defined { 12 } else { SHN_UNDEF };
            e[6..8].copy_from_slice(&shndx.to_le_bytes());
            // The value identifies the entry.
            e[8..16].copy_from_slice(&(i as u64 * 16).to_le_bytes());
            versym[i] = g.ver | if g.hidden { 0x8000 } else { 0 };
        }
        let mut hash: Vec<u32> = Vec::new();
        let (gnu, sysv_t);
        if sysv {
            let nbucket = nbuckets;
            let mut buckets = vec![0u32; nbucket as usize];
            let mut chains = vec![0u32; n];
            for (i, chain) in chains.iter_mut().enumerate().skip(1) {
                let name = NAMES[order[i - 1].name].as_bytes();
                let b = (crate::elf::sysv_hash(name) % nbucket) as usize;
                *chain = buckets[b];
                buckets[b] = i as u32;
            }
            hash.push(nbucket);
            hash.push(n as u32);
            hash.extend(buckets);
            hash.extend(chains);
            gnu = None;
            sysv_t = Some(());
        } else {
            let symoffset = (split + 1) as u32;
            let bloom_size = 2u32;
            let shift = 6u32;
            let mut bloom = [0u64; 2];
            let mut buckets = vec![0u32; nbuckets as usize];
            let mut chains = Vec::new();
            for i in symoffset as usize..n {
                let h = gnu_hash(NAMES[order[i - 1].name].as_bytes());
                let w = ((h / 64) % bloom_size) as usize;
                bloom[w] |= (1u64 << (h % 64)) | (1u64 << ((h >> shift) % 64));
                let b = (h % nbuckets) as usize;
                if buckets[b] == 0 {
                    buckets[b] = i as u32;
                }
                let last = i + 1 == n
                    || gnu_hash(NAMES[order[i].name].as_bytes()) % nbuckets != h % nbuckets;
                chains.push((h & !1) | u32::from(last));
            }
            hash.extend([nbuckets, symoffset, bloom_size, shift]);
            for w in bloom {
                hash.push(w as u32);
                hash.push((w >> 32) as u32);
            }
            hash.extend(buckets);
            hash.extend(chains);
            gnu = Some((symoffset, bloom_size, shift));
            sysv_t = None;
        }
        let base = hash.as_ptr() as usize;
        let tab = SymTab {
            bias: 0,
            symtab: symbytes.as_ptr() as usize,
            nsyms: n as u32,
            strtab: strtab.as_ptr() as usize,
            strsz: strtab.len(),
            gnu: gnu.map(|(symoffset, bloom_size, bloom_shift)| {
                let buckets = base + 16 + bloom_size as usize * 8;
                Gnu {
                    bloom: base + 16,
                    bloom_size,
                    bloom_shift,
                    buckets,
                    nbuckets,
                    chains: buckets + nbuckets as usize * 4,
                    symoffset,
                }
            }),
            sysv: sysv_t.map(|()| Sysv {
                buckets: base + 8,
                nbucket: nbuckets,
                chains: base + 8 + nbuckets as usize * 4,
                nchain: n as u32,
            }),
            versym: Some(versym.as_ptr() as usize),
            versions: vec![None, None, Some("V1".into()), Some("V2".into())],
        };
        Built {
            _strtab: strtab,
            _syms: symbytes,
            _hash: hash,
            _versym: versym,
            tab,
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig { cases: 512, ..Default::default() })]
        /// Over generated tables (repeated names, local/global/weak, every visibility,
        /// defined and undefined, versions with and without the hidden bit, symbols
        /// outside the GNU hash table, GNU or SysV hashing): whenever the shortcut says
        /// a symbol binds to itself, the full lookup finds that very entry, unless the
        /// table holds a duplicate definition (same name, acceptable version), which
        /// linkers refuse.
        #[test]
        fn exports_agrees_with_lookup_on_generated_tables(
            syms in proptest::collection::vec(gen_sym(), 1..24),
            unhashed in 0usize..6,
            nbuckets in 1u32..5,
            sysv in proptest::prelude::any::<bool>(),
        ) {
            let b = build(&syms, unhashed, nbuckets, sysv);
            let tab = &b.tab;
            for i in 1..tab.nsyms {
                let s = tab.sym(i);
                let name = tab.str_at(s.name).expect("name");
                let version = tab.wanted_version(i);
                proptest::prop_assert_eq!(tab.exports_own(i), tab.exports(i, version), "symbol {}", i);
                if !tab.exports(i, version) {
                    continue;
                }
                let visible = |j: u32| {
                    let t = tab.sym(j);
                    t.is_defined()
                        && matches!(t.bind(), STB_GLOBAL | STB_WEAK)
                        && !matches!(t.other & 3, 1 | 2)
                        && tab.version_ok(j, version)
                        && tab.str_at(t.name) == Some(name)
                };
                let duplicate = (1..tab.nsyms).any(|j| j != i && visible(j));
                if duplicate {
                    continue;
                }
                let found = tab.lookup(name, gnu_hash(name), version);
                proptest::prop_assert_eq!(
                    found.map(|f| f.value),
                    Some(s.value),
                    "symbol {} ({}, version {:?})", i, String::from_utf8_lossy(name), version
                );
            }
        }
    }

    #[test]
    fn self_binding_shortcut_equals_the_hash_lookup() {
        // The system's libc and libm (read in place, as relocation does) carry several
        // versions of one name (memcpy@GLIBC_2.2.5 and memcpy@@GLIBC_2.14, ...) and
        // hidden versions.
        for name in ["libc.so.6", "libm.so.6"] {
            // SAFETY: the C runtime's libraries (libm may not be loaded yet: its
            // initialisers are the C runtime's, safe to run), kept loaded (NODELETE) as
            // the loader keeps them.
            let lib = unsafe {
                libloading::os::unix::Library::open(
                    Some(name),
                    libc::RTLD_NOW | libc::RTLD_LOCAL | libc::RTLD_NODELETE,
                )
            }
            .expect("open");
            let h = lib.into_raw();
            // SAFETY: `lib` owns the live handle again and outlives the table's use.
            let lib = unsafe { libloading::os::unix::Library::from_raw(h) };
            // SAFETY: the handle stays open (`lib`) while `tab` is used.
            let tab = unsafe { SymTab::from_system(h) }.expect("symbol table of a system library");
            let (shortcut, defined) = check_exports_agrees_with_lookup(&tab, name);
            drop(lib);
            assert!(
                shortcut > 100 && shortcut <= defined,
                "{name}: {shortcut} of {defined}"
            );
        }
        // libpython, when the machine's CPython has one: almost every exported
        // definition takes the shortcut.
        let out = std::process::Command::new("python3")
            .args([
                "-c",
                "import os, sysconfig; print(os.path.join(sysconfig.get_config_var('LIBDIR'), sysconfig.get_config_var('INSTSONAME') or ''))",
            ])
            .output();
        if let Ok(out) = out {
            let p = std::path::PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
            if p.is_file() {
                let file = std::fs::File::open(&p).expect("open");
                let len = file.metadata().expect("stat").len();
                let (info, map) = crate::map::parse_and_map(&p, &file, len).expect("parse and map");
                let tab = SymTab::from_info(&info, map.bias);
                let (shortcut, defined) = check_exports_agrees_with_lookup(&tab, "libpython");
                assert!(
                    shortcut * 10 >= defined * 9,
                    "{}: only {shortcut} of {defined} definitions take the shortcut",
                    p.display()
                );
            }
        }
    }
}
