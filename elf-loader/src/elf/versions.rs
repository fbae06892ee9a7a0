//! Symbol versions: `DT_VERSYM`, `DT_VERDEF` and `DT_VERNEED`, the version names by index.

use super::consts::*;
use super::dynamic::{Dynamic, Strings};
use super::reader::{Placement, Reader};
use super::{ElfInfo, VersionName};
use crate::error::{Error, Result};
use object::elf as oelf;
use object::LittleEndian as LE;

impl ElfInfo {
    /// `DT_VERSYM`, `DT_VERDEF` and `DT_VERNEED`: the version names by index.
    pub(super) fn parse_versions(
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
}
