//! Mapping a parsed library into memory: one reserved address range, each `PT_LOAD`
//! mapped from the file with `MAP_PRIVATE` (read-only pages stay shared with every other
//! mapping of the file), bss zeroed, RELRO made read-only after relocation, and the
//! whole range unmapped on drop.

use crate::elf::{consts::*, ElfInfo, PAGE};
use crate::error::{Error, Result};
use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::Path;

/// A library's reserved and mapped address range; unmapped when dropped.
#[derive(Debug)]
pub struct Mapping {
    /// Start of the reservation.
    pub start: usize,
    /// Length of the reservation.
    pub len: usize,
    /// Load bias: runtime address = bias + link-time address.
    pub bias: usize,
}

fn prot(flags: u32) -> i32 {
    let mut p = libc::PROT_NONE;
    if flags & PF_R != 0 {
        p |= libc::PROT_READ;
    }
    if flags & PF_W != 0 {
        p |= libc::PROT_WRITE;
    }
    if flags & PF_X != 0 {
        p |= libc::PROT_EXEC;
    }
    p
}

fn os_err(path: &Path, what: &'static str) -> Error {
    Error::Io {
        path: path.to_path_buf(),
        what,
        source: std::io::Error::last_os_error(),
    }
}

impl Mapping {
    /// Reserves address space for `info` and maps its `PT_LOAD` segments from `file`.
    ///
    /// As glibc does, the first segment's file mapping is made over the whole span at
    /// once (that mapping is the reservation: one `mmap` fewer), the other segments
    /// are mapped over it, and the gaps between segments, if any, are made
    /// inaccessible. Libraries whose segments need more than page alignment get an
    /// anonymous reservation first, trimmed to the alignment.
    pub fn map(info: &ElfInfo, file: &File) -> Result<Mapping> {
        let path = &info.path;
        let span = (info.max_vaddr - info.min_vaddr) as usize;
        let align = info.max_align as usize;
        let first = info.loads[0];
        if align <= PAGE as usize && first.filesz > 0 {
            // SAFETY: a new private file mapping at an address the kernel picks; no
            // existing mapping is affected. Pages past the first segment are replaced
            // below before anything reads them.
            let raw = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    span,
                    prot(first.flags),
                    libc::MAP_PRIVATE,
                    file.as_raw_fd(),
                    (first.offset - first.vaddr % PAGE) as libc::off_t,
                )
            };
            if raw == libc::MAP_FAILED {
                return Err(os_err(path, "map PT_LOAD segment (mmap)"));
            }
            let start = raw as usize;
            let mapping = Mapping {
                start,
                len: span,
                bias: start.wrapping_sub(info.min_vaddr as usize),
            };
            // From here on, dropping `mapping` unmaps the whole span.
            mapping.map_segment(path, &first, file, true)?;
            for seg in &info.loads[1..] {
                mapping.map_segment(path, seg, file, false)?;
            }
            mapping.close_gaps(info)?;
            return Ok(mapping);
        }
        let extra = if align > PAGE as usize { align } else { 0 };
        // SAFETY: an anonymous PROT_NONE reservation at an address the kernel picks; no
        // existing mapping is affected.
        let raw = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                span + extra,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if raw == libc::MAP_FAILED {
            return Err(os_err(path, "reserve address space (mmap)"));
        }
        let raw = raw as usize;
        let start = (raw + align - 1) & !(align - 1);
        if extra != 0 {
            // Trim the reservation to the aligned span.
            // SAFETY: both ranges lie inside the reservation we just made and own.
            unsafe {
                if start > raw {
                    libc::munmap(raw as *mut _, start - raw);
                }
                let end = start + span;
                let raw_end = raw + span + extra;
                if raw_end > end {
                    libc::munmap(end as *mut _, raw_end - end);
                }
            }
        }
        let mapping = Mapping {
            start,
            len: span,
            bias: start.wrapping_sub(info.min_vaddr as usize),
        };
        for seg in &info.loads {
            mapping.map_segment(path, seg, file, false)?;
        }
        Ok(mapping)
    }

    /// Makes the pages between segments inaccessible (after [`Mapping::map`] mapped the
    /// first segment over the whole span).
    fn close_gaps(&self, info: &ElfInfo) -> Result<()> {
        for pair in info.loads.windows(2) {
            let end = (pair[0].vaddr + pair[0].memsz).div_ceil(PAGE) * PAGE;
            let next = pair[1].vaddr & !(PAGE - 1);
            if next > end {
                // SAFETY: whole pages inside our own mapping that no segment covers.
                let rc = unsafe {
                    libc::mprotect(
                        self.bias.wrapping_add(end as usize) as *mut _,
                        (next - end) as usize,
                        libc::PROT_NONE,
                    )
                };
                if rc != 0 {
                    return Err(os_err(
                        &info.path,
                        "protect the gap between segments (mprotect)",
                    ));
                }
            }
        }
        Ok(())
    }

    /// Maps one segment's file contents (unless `file_mapped`: already there) and its
    /// bss.
    fn map_segment(
        &self,
        path: &Path,
        seg: &crate::elf::Phdr,
        file: &File,
        file_mapped: bool,
    ) -> Result<()> {
        let p = prot(seg.flags);
        let page_vaddr = seg.vaddr & !(PAGE - 1);
        let delta = seg.vaddr - page_vaddr;
        let file_page = seg.offset - delta;
        let addr = self.bias.wrapping_add(page_vaddr as usize);
        let file_end = seg.vaddr + seg.filesz; // link-time end of file contents
        if seg.filesz > 0 && !file_mapped {
            let len = (delta + seg.filesz) as usize;
            // SAFETY: MAP_FIXED over part of our own reservation (checked by the parser to
            // lie inside [min_vaddr, max_vaddr)); nothing else lives there.
            let r = unsafe {
                libc::mmap(
                    addr as *mut _,
                    len,
                    p,
                    libc::MAP_PRIVATE | libc::MAP_FIXED,
                    file.as_raw_fd(),
                    file_page as libc::off_t,
                )
            };
            if r == libc::MAP_FAILED {
                return Err(os_err(path, "map PT_LOAD segment (mmap)"));
            }
        }
        if seg.memsz > seg.filesz {
            // bss: zero the rest of the last file page, then map anonymous zero pages.
            let zero_start = self.bias.wrapping_add(file_end as usize);
            let page_end = (zero_start + PAGE as usize - 1) & !(PAGE as usize - 1);
            if seg.filesz > 0 && zero_start < page_end {
                let writable = p & libc::PROT_WRITE != 0;
                // SAFETY: the page holds the end of this segment's file contents in our
                // own private mapping; we make it writable briefly if needed.
                unsafe {
                    let page = (zero_start & !(PAGE as usize - 1)) as *mut libc::c_void;
                    if !writable {
                        libc::mprotect(page, PAGE as usize, p | libc::PROT_WRITE);
                    }
                    std::ptr::write_bytes(zero_start as *mut u8, 0, page_end - zero_start);
                    if !writable {
                        libc::mprotect(page, PAGE as usize, p);
                    }
                }
            }
            let anon_start = if seg.filesz > 0 { page_end } else { addr };
            let mem_end = self.bias.wrapping_add((seg.vaddr + seg.memsz) as usize);
            let anon_end = (mem_end + PAGE as usize - 1) & !(PAGE as usize - 1);
            if anon_end > anon_start {
                // SAFETY: MAP_FIXED anonymous pages inside our own reservation.
                let r = unsafe {
                    libc::mmap(
                        anon_start as *mut _,
                        anon_end - anon_start,
                        p,
                        libc::MAP_PRIVATE | libc::MAP_FIXED | libc::MAP_ANONYMOUS,
                        -1,
                        0,
                    )
                };
                if r == libc::MAP_FAILED {
                    return Err(os_err(path, "map bss (mmap)"));
                }
            }
        }
        Ok(())
    }

    /// For a `DT_TEXTREL` library: makes every non-writable `PT_LOAD` writable too
    /// (`on`, before relocation; its other permissions kept, as glibc does), or gives
    /// them back their own permissions (after relocation).
    pub fn text_writable(&self, info: &ElfInfo, on: bool) -> Result<()> {
        for l in info.loads.iter().filter(|l| l.flags & PF_W == 0) {
            let start = self.bias.wrapping_add(l.vaddr as usize) & !(PAGE as usize - 1);
            let end = self.bias.wrapping_add((l.vaddr + l.memsz) as usize);
            let end = (end + PAGE as usize - 1) & !(PAGE as usize - 1);
            let p = prot(l.flags) | if on { libc::PROT_WRITE } else { 0 };
            // SAFETY: whole pages of one PT_LOAD of our own private mapping; only the
            // protection changes.
            let rc = unsafe { libc::mprotect(start as *mut _, end - start, p) };
            if rc != 0 {
                return Err(os_err(
                    &info.path,
                    if on {
                        "make a segment writable for text relocations (mprotect)"
                    } else {
                        "restore a segment's protection after text relocations (mprotect)"
                    },
                ));
            }
        }
        Ok(())
    }

    /// Makes the `PT_GNU_RELRO` range read-only (after relocation).
    pub fn protect_relro(&self, info: &ElfInfo) -> Result<()> {
        let Some(r) = info.relro else { return Ok(()) };
        let start = self.bias.wrapping_add(r.vaddr as usize) & !(PAGE as usize - 1);
        let end = self.bias.wrapping_add((r.vaddr + r.memsz) as usize) & !(PAGE as usize - 1);
        if end > start {
            // SAFETY: the range lies inside a writable PT_LOAD of our mapping (checked by
            // the parser); only the protection changes.
            let rc = unsafe { libc::mprotect(start as *mut _, end - start, libc::PROT_READ) };
            if rc != 0 {
                return Err(os_err(&info.path, "protect PT_GNU_RELRO (mprotect)"));
            }
        }
        Ok(())
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: the range is our own reservation; the owner guarantees that no code or
        // data in it is used any more (fini has run).
        unsafe {
            libc::munmap(self.start as *mut _, self.len);
        }
    }
}

/// Reads the headers with `pread`, maps the segments, then parses the dynamic section
/// and its tables from the mapped segments (each table page is faulted in once, in the
/// mapping that relocation and lookups use afterwards).
pub(crate) fn parse_and_map(
    path: &Path,
    file: &std::fs::File,
    file_len: u64,
) -> Result<(ElfInfo, Mapping)> {
    use std::os::unix::fs::FileExt;
    let io = |what: &'static str| {
        move |e: std::io::Error| Error::Io {
            path: path.to_path_buf(),
            what,
            source: e,
        }
    };
    if file_len == 0 {
        return Err(Error::malformed(path, "empty file"));
    }
    let read_at = |len: u64| -> Result<Vec<u8>> {
        let len = len.min(file_len) as usize;
        let mut buf = vec![0u8; len];
        file.read_exact_at(&mut buf, 0)
            .map_err(io("read headers"))?;
        Ok(buf)
    };
    let mut header = read_at(4096)?;
    if header.len() >= 64 {
        // Program headers beyond the first page: read up to their end.
        let phoff = u64::from_le_bytes(header[32..40].try_into().expect("8 bytes"));
        let phnum = u64::from(u16::from_le_bytes([header[56], header[57]]));
        let end = phoff.saturating_add(phnum * 56);
        if end > header.len() as u64 && end <= file_len {
            header = read_at(end)?;
        }
    }
    let mut info = ElfInfo::parse_headers(
        path,
        &crate::elf::Reader::ranges(path, vec![(0, &header)], file_len),
    )?;
    let map = Mapping::map(&info, file)?;
    let ranges: Vec<(u64, &[u8])> = info
        .loads
        .iter()
        .filter(|l| l.filesz > 0 && l.flags & crate::elf::consts::PF_R != 0)
        .map(|l| {
            // SAFETY: the segment's file contents are mapped (readable) at bias+vaddr for
            // filesz bytes; the slices are only used before `map` is returned.
            let data = unsafe {
                std::slice::from_raw_parts(
                    map.bias.wrapping_add(l.vaddr as usize) as *const u8,
                    l.filesz as usize,
                )
            };
            (l.offset, data)
        })
        .collect();
    info.parse_dynamic(&crate::elf::Reader::ranges(path, ranges, file_len))?;
    Ok((info, map))
}
