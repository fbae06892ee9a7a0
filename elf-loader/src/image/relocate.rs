//! Relocating an image (`Image::relocate`): the loops over its relocation tables, with
//! the fast paths for the common kinds (the rest goes to `reloc_kinds.rs`), `DT_RELR`,
//! the target pages made present first, and a relocation plan replayed.

use super::{Image, RelocStats, ScopeItem};
use crate::elf::{consts::*, reloc_name, Rela};
use crate::error::{Error, Result};
use crate::overrides::Overrides;
use crate::tls;
use object::elf::Rela64;
use object::LittleEndian;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// A symbol value not resolved yet (in the relocation cache).
pub(super) const UNRESOLVED: usize = usize::MAX;

/// State shared by the relocation loops of one image.
pub(super) struct RelocCx<'a> {
    /// Where symbols are looked up.
    pub(super) scope: &'a [ScopeItem],
    /// `scope` starts with the loader's overrides and then the image itself, so a
    /// symbol the image exports (and the overrides do not replace) binds to its own
    /// definition without a hash lookup: the overrides, when so.
    pub(super) self_first: Option<&'static Overrides>,
    /// Resolved values by symbol index.
    pub(super) cache: &'a mut [usize],
    /// Relocations applied after all others (ifuncs).
    pub(super) deferred: &'a mut Vec<Rela>,
    /// Counts.
    pub(super) stats: &'a mut RelocStats,
    /// Other custom images that relocations bound to (glibc's `l_reldeps`).
    pub(super) bound: &'a mut Vec<Arc<Image>>,
    /// The resolutions being recorded for a relocation plan (none when replaying one).
    pub(super) record: Option<&'a mut Vec<(u32, crate::plan::Planned)>>,
}

impl Image {
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
    pub(super) fn check_target(&self, r: &Rela, size: u64) -> Result<*mut u8> {
        let ok = self
            .writable
            .iter()
            .any(|&(start, end)| r.offset >= start && r.offset <= end.saturating_sub(size));
        if !ok {
            return Err(self.reloc_err(r, "", "target is not inside a writable segment"));
        }
        Ok(self.addr(r.offset) as *mut u8)
    }

    pub(super) fn reloc_err(&self, r: &Rela, symbol: &str, reason: &str) -> Error {
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
    pub(super) fn near_entry(&self, v: usize) -> usize {
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
}

/// Notes that relocations bound to `other` (once per image).
pub(super) fn record_binding(bound: &mut Vec<Arc<Image>>, other: &Arc<Image>) {
    if !bound.iter().any(|b| Arc::ptr_eq(b, other)) {
        bound.push(other.clone());
    }
}
