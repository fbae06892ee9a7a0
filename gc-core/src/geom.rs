//! Cell geometry of pool pages: the one place that packs and unpacks it.
//!
//! A page of size class `c` holds cells of `CELL_SIZES[c]` bytes (header word included)
//! from `FIRST_CELL` on; the payload of cell `i` starts at
//! `page + FIRST_CELL + i * cell + HEADER_SIZE`. Finding the cell of an address divides
//! its offset by the cell size, as a multiplication by the size's division magic
//! ([`crate::sizeclass::div_magic`]).
//!
//! Two words carry geometry: a page's layout word ([`layout_word`], in `PageMeta`: cell
//! size and class, 0 while the page is free) and the geometry word of its page-table
//! entry ([`Geom`]: cell size and division magic, plus, while the page waits for its lazy
//! sweep, the sweep's parameters, [`Geom::waiting`]). Every reader decodes them here.

use crate::object::{Header, HEADER_SIZE};
use crate::sizeclass::{cells_per_page, div_magic, CELL_SIZES, FIRST_CELL, NUM_CLASSES, PAGE_SIZE};

/// A page-table entry's geometry word: division magic in bits 0..32, cell size (header
/// included, below 2^16) in bits 32..48; the bits above are clear except while the page
/// waits for its lazy sweep ([`Geom::waiting`]).
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
#[repr(transparent)]
pub(crate) struct Geom(u64);

/// Set (bit 63) while the page waits for the lazy sweep of the last collection: its
/// allocation bitmap still has the bits of the cells that collection found dead, so a
/// lookup that finds a cell's bit set decides from the cell's header, with the sweep's
/// parameters the bits below carry (bit 62: the collection was full; bit 61: its
/// old-mark parity; bit 60: the `MARK` bit of its young-marked state; bits 48..60: the
/// low bits of the collection's number, so that a lookup that slept through two
/// collections sees the word change). Published by `PageAlloc::begin_sweep` for every
/// page it leaves to the sweep, with the world stopped; cleared when the page is swept,
/// after its new bitmap is stored.
const WAITING: u64 = 1 << 63;
const WAIT_FULL: u64 = 1 << 62;
const WAIT_PARITY: u64 = 1 << 61;
const WAIT_YOUNG_PARITY: u64 = 1 << 60;
const WAIT_EPOCH_SHIFT: u32 = 48;
const WAIT_EPOCH_MASK: u64 = 0xfff;

/// The geometry of each size class.
static CLASS_GEOM: [Geom; NUM_CLASSES] = {
    let mut t = [Geom(0); NUM_CLASSES];
    let mut i = 0;
    while i < NUM_CLASSES {
        let cell = CELL_SIZES[i] as u64;
        t[i] = Geom(div_magic(cell as usize) | cell << 32);
        i += 1;
    }
    t
};

/// Cells per page of each size class.
static CELLS_PER_PAGE: [u16; NUM_CLASSES] = {
    let mut t = [0u16; NUM_CLASSES];
    let mut i = 0;
    while i < NUM_CLASSES {
        t[i] = cells_per_page(i) as u16;
        i += 1;
    }
    t
};

impl Geom {
    /// The geometry of size class `class`.
    #[inline(always)]
    pub(crate) fn of_class(class: usize) -> Geom {
        CLASS_GEOM[class]
    }

    /// The geometry a page-table entry's word holds.
    #[inline(always)]
    pub(crate) fn from_word(word: u64) -> Geom {
        Geom(word)
    }

    /// The word a page-table entry stores.
    #[inline(always)]
    pub(crate) fn word(self) -> u64 {
        self.0
    }

    /// The magic of [`Geom::index`]: a cell's index is its payload's offset from the
    /// page's first payload times this, shifted right by 32.
    #[inline(always)]
    pub(crate) fn magic(self) -> u32 {
        self.0 as u32
    }

    /// Cell size, header included (0 for the all-zero word of a never-used entry).
    #[inline(always)]
    pub(crate) fn cell(self) -> usize {
        ((self.0 >> 32) & 0xffff) as usize
    }

    /// The index of the cell at byte `off` from the first payload of the page: `off /
    /// cell` for every offset within a page.
    #[inline(always)]
    fn index(self, off: usize) -> usize {
        ((off as u64 * (self.0 & 0xffff_ffff)) >> 32) as usize
    }

    /// The cell of the page of `p` whose payload `p` points to the beginning, interior or
    /// one past the end of: its index and its payload address. `None` for the bytes of
    /// the page before the first payload and for a header word past its first byte (an
    /// index past the page's last cell is returned: it never has an allocation bit).
    #[inline(always)]
    pub(crate) fn locate(self, p: usize) -> Option<(usize, usize)> {
        self.locate_cell(self.cell(), p)
    }

    /// [`Geom::locate`] for a geometry that is not waiting for its sweep (the lookup's
    /// fast path, which has just compared it): the bits above the cell size are clear,
    /// so the size needs no mask (one instruction less on the hottest lookup).
    #[inline(always)]
    pub(crate) fn locate_settled(self, p: usize) -> Option<(usize, usize)> {
        debug_assert!(!self.is_waiting());
        self.locate_cell((self.0 >> 32) as usize, p)
    }

    #[inline(always)]
    fn locate_cell(self, cell: usize, p: usize) -> Option<(usize, usize)> {
        let first = (p & !(PAGE_SIZE - 1)) + FIRST_CELL + HEADER_SIZE;
        let off = p.checked_sub(first)?;
        let idx = self.index(off);
        let start = idx * cell;
        // `off - start == cell - 8` is one past the end of cell `idx`; above, p is in the
        // header word of the next cell.
        if off - start > cell.wrapping_sub(HEADER_SIZE) {
            return None;
        }
        Some((idx, first + start))
    }

    /// The index of the cell whose payload starts exactly at `p`, if that cell lies
    /// wholly inside the page.
    #[inline]
    pub(crate) fn start_index(self, p: usize) -> Option<usize> {
        let cell = self.cell();
        let first = (p & !(PAGE_SIZE - 1)) + FIRST_CELL + HEADER_SIZE;
        let off = p.checked_sub(first)?;
        let idx = self.index(off);
        (idx * cell == off && FIRST_CELL + (idx + 1) * cell <= PAGE_SIZE).then_some(idx)
    }

    /// The index of the cell whose payload is at `obj` (a payload address of this
    /// geometry's page).
    #[inline(always)]
    pub(crate) fn index_of_payload(self, obj: usize) -> usize {
        // Pages are PAGE_SIZE-aligned: the offset needs no load of the page's base.
        self.index((obj & (PAGE_SIZE - 1)) - FIRST_CELL - HEADER_SIZE)
    }

    /// Whether the page waits for its lazy sweep (one compare).
    #[inline(always)]
    pub(crate) fn is_waiting(self) -> bool {
        self.0 >= WAITING
    }

    /// Whether the geometry words `self` and `other` describe the same cell size.
    #[inline]
    pub(crate) fn same_cell(self, other: Geom) -> bool {
        self.cell() == other.cell()
    }

    /// This geometry flagged as waiting for the sweep of a collection (`full`, old-mark
    /// `parity`, `young_marked` as in [`Header::is_dead`]; `epoch` its number).
    pub(crate) fn waiting(
        self,
        full: bool,
        parity: usize,
        young_marked: usize,
        epoch: u32,
    ) -> Geom {
        debug_assert!(self.0 < 1 << WAIT_EPOCH_SHIFT);
        debug_assert!(Header::valid_parities(parity, young_marked));
        let mut g = self.0 | WAITING | (epoch as u64 & WAIT_EPOCH_MASK) << WAIT_EPOCH_SHIFT;
        if full {
            g |= WAIT_FULL;
        }
        if Header::parity_is_set(parity) {
            g |= WAIT_PARITY;
        }
        if Header::parity_is_set(young_marked) {
            g |= WAIT_YOUNG_PARITY;
        }
        Geom(g)
    }

    /// Whether the allocated object with header word `h` is live on a page whose
    /// geometry is this waiting one (the sweep's rule, [`Header::is_dead`]).
    #[inline]
    pub(crate) fn live_while_waiting(self, h: Header) -> bool {
        let parity = Header::parity(self.0 & WAIT_PARITY != 0);
        let young_marked = Header::young_marked(Header::parity(self.0 & WAIT_YOUNG_PARITY != 0));
        h.is_allocated() && !h.is_dead(self.0 & WAIT_FULL != 0, parity, young_marked)
    }
}

/// A page's layout word for size class `class`: cell size in bits 0..16, class in bits
/// 16..24 (0 is a free page's).
#[inline]
pub(crate) fn layout_word(class: usize) -> u64 {
    CELL_SIZES[class] as u64 | (class as u64) << 16
}

/// The cell size and size class a layout word holds; `None` for a free page's.
#[inline(always)]
pub(crate) fn from_layout_word(word: u64) -> Option<(usize, usize)> {
    let cell = (word & 0xffff) as usize;
    (cell != 0).then_some((cell, ((word >> 16) & 0xff) as usize))
}

/// Cells in a page of size class `class`.
#[inline(always)]
pub(crate) fn cells_in_page(class: usize) -> usize {
    CELLS_PER_PAGE[class] as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locate_finds_every_payload_byte_and_one_past_the_end() {
        let page = 0x7000_0000_0000usize;
        for class in 0..NUM_CLASSES {
            let g = Geom::of_class(class);
            let cell = g.cell();
            for idx in 0..cells_in_page(class) {
                let payload = page + FIRST_CELL + idx * cell + HEADER_SIZE;
                assert_eq!(g.locate(payload), Some((idx, payload)));
                assert_eq!(g.locate_settled(payload + 8), g.locate(payload + 8));
                assert_eq!(g.locate(payload + cell - HEADER_SIZE), Some((idx, payload)));
                assert_eq!(g.start_index(payload), Some(idx));
                assert_eq!(g.index_of_payload(payload), idx);
                if cell > 16 {
                    assert_eq!(g.start_index(payload + 8), None);
                }
            }
            assert_eq!(g.locate(page + FIRST_CELL), None, "a header byte");
            assert_eq!(g.locate(page), None, "before the first cell");
            let (cell_size, c) = from_layout_word(layout_word(class)).unwrap();
            assert_eq!((cell_size, c), (cell, class));
        }
        assert_eq!(from_layout_word(0), None);
    }

    #[test]
    fn waiting_words_keep_the_geometry_and_the_sweep_parameters() {
        let g = Geom::of_class(3);
        let w = g.waiting(true, Header::parity(true), Header::young_marked(0), 5);
        assert!(w.is_waiting() && !g.is_waiting());
        assert!(w.same_cell(g));
        assert_eq!(
            w.locate(0x7000_0000_0000 + 64),
            g.locate(0x7000_0000_0000 + 64)
        );
    }
}
