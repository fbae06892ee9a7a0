//! The hash tables (`DT_HASH`, `DT_GNU_HASH`: their chains give the number of symbols),
//! the symbol table, and the two hash functions.

use super::consts::*;
use super::dynamic::Dynamic;
use super::reader::{Placement, Reader};
use super::{ElfInfo, GnuHash, SysvHash};
use crate::error::{Error, Result};
use object::elf as oelf;
use object::LittleEndian as LE;

impl ElfInfo {
    /// `DT_HASH` at `addr`: its header, and every chain checked to end.
    pub(super) fn parse_sysv_hash(&mut self, r: &Reader<'_>, addr: u64) -> Result<()> {
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
    pub(super) fn parse_gnu_hash(&mut self, r: &Reader<'_>, addr: u64) -> Result<()> {
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
    pub(super) fn parse_symtab(&mut self, r: &Reader<'_>, dynamic: &Dynamic) -> Result<()> {
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
}

fn chains_off_len(fixed: u64, nsyms: u32, symoffset: u32) -> Option<u64> {
    fixed.checked_add(u64::from(nsyms.checked_sub(symoffset)?) * 4)
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
}
