//! One relocation of any kind, with every check (`Image::apply`, the general path of
//! the relocation loops): each x86-64 relocation type, the definitions TLS relocations
//! refer to, and the symbol resolution through the scope.

use super::relocate::{record_binding, RelocCx, UNRESOLVED};
use super::{lookup_scope_at, Def, Image, ScopeItem};
use crate::elf::{consts::*, gnu_hash, Rela, Sym};
use crate::error::{Error, Result};
use crate::overrides::Overrides;
use crate::tls::{self, TlsIndex};
use std::sync::Arc;

impl Image {
    fn sym_name(&self, i: u32) -> String {
        if i == 0 || i >= self.info.nsyms {
            return String::new();
        }
        self.str_at(self.sym(i).name)
            .map(|s| String::from_utf8_lossy(s).into_owned())
            .unwrap_or_default()
    }

    /// Applies one relocation of any supported type, with every check.
    pub(super) fn apply(self: &Arc<Self>, r: &Rela, cx: &mut RelocCx<'_>) -> Result<()> {
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
                // A descriptor {function, argument} (see tls/entries.rs), as glibc makes them:
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
