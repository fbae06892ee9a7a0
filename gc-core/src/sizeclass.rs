//! Size classes of the pool allocator.
//!
//! Cells (header word + payload) come in 55 sizes from 16 to 2032 bytes, every one a
//! multiple of 16 so payloads stay 16-aligned. Up to 256 bytes the step is 16; above,
//! each class is the largest multiple of 16 that fits one more cell into a 16 KiB page,
//! so that no class wastes more than 2.4% of a page (Julia's 49 classes follow the same
//! idea). The largest payload is 2032 - 8 = 2024 bytes: [`MAX_INTERNAL_OBJ_SIZE`].

/// Size of a pool page.
pub const PAGE_SIZE: usize = 16 * 1024;
/// log2 of [`PAGE_SIZE`].
pub const PAGE_SHIFT: usize = 14;
/// Offset in a page of the first cell (its header word); the first payload is then at
/// offset 16, 16-aligned.
pub const FIRST_CELL: usize = 8;
/// Cell sizes, header included.
pub const CELL_SIZES: [u16; 55] = [
    16, 32, 48, 64, 80, 96, 112, 128, 144, 160, 176, 192, 208, 224, 240, 256, 272, 288, 304, 320,
    336, 352, 368, 384, 400, 416, 432, 448, 464, 480, 496, 528, 544, 560, 576, 592, 624, 640, 672,
    704, 736, 768, 816, 848, 896, 960, 1008, 1088, 1168, 1248, 1360, 1488, 1632, 1808, 2032,
];
/// Number of size classes.
pub const NUM_CLASSES: usize = CELL_SIZES.len();
/// The largest payload allocated in a pool; larger objects are external (big) objects.
pub const MAX_INTERNAL_OBJ_SIZE: usize = CELL_SIZES[NUM_CLASSES - 1] as usize - 8;

/// Class index for each cell size in 16-byte granules (`(payload + 8 + 15) / 16`).
static CLASS_OF_GRANULES: [u8; 128] = class_table();

const fn class_table() -> [u8; 128] {
    let mut table = [0u8; 128];
    let mut granules = 0;
    while granules < 128 {
        let need = if granules == 0 { 16 } else { granules * 16 };
        let mut class = 0;
        while (CELL_SIZES[class] as usize) < need {
            class += 1;
        }
        table[granules] = class as u8;
        granules += 1;
    }
    table
}

/// The table [`class_of`] reads (indexed by `(size + 8 + 15) >> 4`), for the compat
/// header's inline allocation path.
pub(crate) fn class_table_ptr() -> *const u8 {
    CLASS_OF_GRANULES.as_ptr()
}

/// The size class of a payload of `size` bytes (1..=[`MAX_INTERNAL_OBJ_SIZE`]).
#[inline]
pub fn class_of(size: usize) -> usize {
    debug_assert!(size <= MAX_INTERNAL_OBJ_SIZE);
    CLASS_OF_GRANULES[(size + 8 + 15) >> 4] as usize
}

/// Number of cells of class `class` in one page.
pub const fn cells_per_page(class: usize) -> usize {
    (PAGE_SIZE - FIRST_CELL) / CELL_SIZES[class] as usize
}

/// Multiplier for dividing a byte offset by a cell size without a division:
/// `(offset * magic) >> 32 == offset / size` for every offset below a page.
pub const fn div_magic(size: usize) -> u64 {
    (1u64 << 32) / size as u64 + 1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_are_sorted_aligned_and_pack_pages() {
        for w in CELL_SIZES.windows(2) {
            assert!(w[0] < w[1]);
        }
        for (i, &s) in CELL_SIZES.iter().enumerate() {
            assert_eq!(s % 16, 0, "class {i}");
            let n = cells_per_page(i);
            let waste = PAGE_SIZE - FIRST_CELL - n * s as usize;
            assert!(
                waste * 1000 / PAGE_SIZE <= 24,
                "class {i} ({s} bytes) wastes {waste}"
            );
        }
        assert_eq!(MAX_INTERNAL_OBJ_SIZE, 2024);
    }

    #[test]
    fn class_of_gives_smallest_fitting_class() {
        for size in 1..=MAX_INTERNAL_OBJ_SIZE {
            let c = class_of(size);
            assert!(CELL_SIZES[c] as usize >= size + 8, "size {size}");
            if c > 0 {
                assert!((CELL_SIZES[c - 1] as usize) < size + 8, "size {size}");
            }
        }
    }

    #[test]
    fn div_magic_is_exact_within_a_page() {
        for &s in CELL_SIZES.iter() {
            let m = div_magic(s as usize);
            for off in 0..PAGE_SIZE as u64 {
                assert_eq!((off * m) >> 32, off / s as u64, "size {s} offset {off}");
            }
        }
    }
}
