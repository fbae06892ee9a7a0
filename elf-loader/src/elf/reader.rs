//! Bounds-checked reads: `Reader` by file offset (over the whole file or the parts at
//! hand), and `ElfInfo::table`, a table by link-time address checked to lie in one
//! readable `PT_LOAD`; the page size and page rounding.

use super::consts::*;
use super::{ElfInfo, Table};
use crate::error::{Error, Result};
use std::path::Path;

/// Where a validated table must live.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Placement {
    /// Inside the file-backed part of any PT_LOAD.
    Any,
    /// Inside the memory part (filesz or memsz) of any PT_LOAD (init/fini arrays).
    Memory,
}

/// Bounds-checked reads by file offset, from the whole file or from the parts of it that
/// are at hand (the header, the mapped segments).
pub(crate) struct Reader<'a> {
    path: &'a Path,
    /// (file offset, bytes) ranges available.
    ranges: Vec<(u64, &'a [u8])>,
    /// The file's length.
    file_len: u64,
}

impl<'a> Reader<'a> {
    /// A reader over the whole file's bytes.
    pub(crate) fn whole(path: &'a Path, data: &'a [u8]) -> Self {
        Reader {
            path,
            ranges: vec![(0, data)],
            file_len: data.len() as u64,
        }
    }

    /// A reader over some ranges of a file of `file_len` bytes.
    pub(crate) fn ranges(path: &'a Path, ranges: Vec<(u64, &'a [u8])>, file_len: u64) -> Self {
        Reader {
            path,
            ranges,
            file_len,
        }
    }

    fn past_end(&self, off: u64, len: u64, what: impl std::fmt::Display) -> Error {
        Error::malformed(
            self.path,
            format!(
                "{what} at file offset {off:#x} (+{len:#x}) is past the end of the file ({:#x} bytes)",
                self.file_len
            ),
        )
    }

    /// Checks that `[off, off+len)` lies inside the file.
    pub(super) fn in_file(&self, off: u64, len: u64, what: impl std::fmt::Display) -> Result<()> {
        match off.checked_add(len) {
            Some(end) if end <= self.file_len => Ok(()),
            _ => Err(self.past_end(off, len, what)),
        }
    }

    pub(super) fn bytes(
        &self,
        off: u64,
        len: u64,
        what: impl std::fmt::Display,
    ) -> Result<&'a [u8]> {
        self.in_file(off, len, &what)?;
        let end = off + len;
        for &(start, data) in &self.ranges {
            if off >= start && end <= start + data.len() as u64 {
                return Ok(&data[(off - start) as usize..(end - start) as usize]);
            }
        }
        Err(Error::malformed(
            self.path,
            format!("{what} at file offset {off:#x} (+{len:#x}) is not inside a loaded segment"),
        ))
    }
    /// The `T` (one of `object`'s ELF structures, whose fields are byte arrays: any
    /// alignment) at `off`, in place.
    pub(super) fn pod<T: object::pod::Pod>(
        &self,
        off: u64,
        what: impl std::fmt::Display,
    ) -> Result<&'a T> {
        let b = self.bytes(off, std::mem::size_of::<T>() as u64, &what)?;
        object::pod::from_bytes::<T>(b)
            .map(|(v, _)| v)
            .map_err(|()| {
                Error::malformed(
                    self.path,
                    format!("{what} at file offset {off:#x} cannot be read"),
                )
            })
    }
    /// `count` consecutive `T`s at `off`, in place.
    pub(super) fn pods<T: object::pod::Pod>(
        &self,
        off: u64,
        count: u64,
        what: impl std::fmt::Display,
    ) -> Result<&'a [T]> {
        let b = self.bytes(
            off,
            count.saturating_mul(std::mem::size_of::<T>() as u64),
            &what,
        )?;
        object::pod::slice_from_bytes::<T>(b, count as usize)
            .map(|(v, _)| v)
            .map_err(|()| {
                Error::malformed(
                    self.path,
                    format!("{what} at file offset {off:#x} cannot be read"),
                )
            })
    }
}

/// The system page size (4 KiB on x86_64 Linux).
pub const PAGE: u64 = 4096;

/// The largest `PT_TLS` alignment accepted (1 MiB).
pub const MAX_TLS_ALIGN: u64 = 1 << 20;

pub(super) fn page_down(x: u64) -> u64 {
    x & !(PAGE - 1)
}

pub(super) fn page_up(x: u64) -> Option<u64> {
    x.checked_add(PAGE - 1).map(|v| v & !(PAGE - 1))
}

impl ElfInfo {
    /// Finds the PT_LOAD holding `[vaddr, vaddr+len)` and returns the table's file offset.
    pub(super) fn table(
        &self,
        r: &Reader<'_>,
        vaddr: u64,
        len: u64,
        placement: Placement,
        what: impl std::fmt::Display,
    ) -> Result<Table> {
        let end = vaddr.checked_add(len).ok_or_else(|| {
            Error::malformed(
                &self.path,
                format!("{what} at {vaddr:#x} (+{len:#x}) overflows"),
            )
        })?;
        for l in &self.loads {
            let limit = match placement {
                Placement::Memory => l.memsz,
                _ => l.filesz,
            };
            if vaddr >= l.vaddr && end <= l.vaddr + limit {
                if l.flags & PF_R == 0 {
                    return Err(Error::malformed(
                        &self.path,
                        format!("{what} at {vaddr:#x} lies in a PT_LOAD segment without PF_R"),
                    ));
                }
                let file_off = l.offset + (vaddr - l.vaddr);
                if placement != Placement::Memory {
                    r.bytes(file_off, len, what)?;
                }
                return Ok(Table {
                    file_off,
                    vaddr,
                    len,
                });
            }
        }
        Err(Error::malformed(
            &self.path,
            format!("{what} at {vaddr:#x} (+{len:#x}) is not inside any PT_LOAD segment's file contents"),
        ))
    }
}
