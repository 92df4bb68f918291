//! What a drive with transparent compression stores for a file (design.md §6).
//!
//! A computational storage drive (CSD), and zram which emulates one here,
//! compresses every 4 KB block on its own with LZ4 and stores a block that is
//! one 8-byte word repeated (all zeros above all) for nothing. The meter
//! charges each 4 KB block of a file the way zram does:
//!
//! - a block filled with one repeated 8-byte word: 0 bytes (zram's
//!   `same_pages`; an all-zero block is the common case: unused pages,
//!   padding, file holes);
//! - otherwise the size of its LZ4 block compression, at most 4096 (zram
//!   stores a block that does not compress as the raw page).
//!
//! The figure exists on any filesystem; on a zram device it tracks the
//! device's own `compr_data_size` (tests/csd.sh checks within 1%). It is a
//! model of the drive, not of PostgreSQL: the caller feeds it the bytes a
//! relation's files hold.

/// The drive's compression unit.
pub const UNIT: usize = 4096;

/// How the drive stores one 4 KB block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnitStorage {
    /// One 8-byte word repeated: stored as that word in the device's table.
    SameFilled,
    /// LZ4-compressed to this many bytes (less than [`UNIT`]).
    Compressed(u32),
    /// Does not compress: stored raw, [`UNIT`] bytes.
    Raw,
}

impl UnitStorage {
    pub fn physical_bytes(self) -> u64 {
        match self {
            UnitStorage::SameFilled => 0,
            UnitStorage::Compressed(n) => n as u64,
            UnitStorage::Raw => UNIT as u64,
        }
    }
}

/// Classifies one 4 KB block. `scratch` is reused between calls so metering a
/// large file allocates once.
pub fn classify_unit(unit: &[u8; UNIT], scratch: &mut Vec<u8>) -> UnitStorage {
    let first = &unit[..8];
    if unit.chunks_exact(8).all(|w| w == first) {
        return UnitStorage::SameFilled;
    }
    let bound = lz4_flex::block::get_maximum_output_size(UNIT);
    if scratch.len() < bound {
        scratch.resize(bound, 0);
    }
    // The bound makes compress_into infallible; a failure would be a bug in
    // the bound, and the honest answer for it is "stored raw".
    match lz4_flex::block::compress_into(unit, scratch) {
        Ok(n) if n < UNIT => UnitStorage::Compressed(n as u32),
        _ => UnitStorage::Raw,
    }
}

/// Running totals over the blocks of one file (or fork, or relation).
#[derive(Debug, Default, Clone)]
pub struct Meter {
    /// 4 KB blocks seen.
    pub units: u64,
    /// Blocks stored for free (one repeated word, zeros included).
    pub free_units: u64,
    /// Blocks that did not compress and are stored raw.
    pub raw_units: u64,
    /// Bytes the drive stores for the blocks seen.
    pub physical_bytes: u64,
    scratch: Vec<u8>,
}

impl Meter {
    pub fn new() -> Meter {
        Meter::default()
    }

    /// Bytes the file holds (what a drive without compression stores).
    pub fn logical_bytes(&self) -> u64 {
        self.units * UNIT as u64
    }

    /// Adds a run of bytes from a file, starting on a 4 KB boundary. A tail
    /// shorter than 4 KB is charged as the filesystem block it occupies:
    /// padded with zeros.
    pub fn add(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(UNIT);
        for chunk in &mut chunks {
            let unit: &[u8; UNIT] = chunk.try_into().expect("chunks_exact yields UNIT bytes");
            self.add_unit(unit);
        }
        let tail = chunks.remainder();
        if !tail.is_empty() {
            let mut unit = [0u8; UNIT];
            unit[..tail.len()].copy_from_slice(tail);
            self.add_unit(&unit);
        }
    }

    fn add_unit(&mut self, unit: &[u8; UNIT]) {
        let storage = classify_unit(unit, &mut self.scratch);
        self.units += 1;
        match storage {
            UnitStorage::SameFilled => self.free_units += 1,
            UnitStorage::Raw => self.raw_units += 1,
            UnitStorage::Compressed(_) => {}
        }
        self.physical_bytes += storage.physical_bytes();
    }

    /// Adds another meter's totals (a relation is the sum of its forks).
    pub fn merge(&mut self, other: &Meter) {
        self.units += other.units;
        self.free_units += other.free_units;
        self.raw_units += other.raw_units;
        self.physical_bytes += other.physical_bytes;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_rng::Rng;

    #[test]
    fn zero_and_same_filled_blocks_are_free() {
        let mut m = Meter::new();
        m.add(&[0u8; 3 * UNIT]);
        let mut word = [0u8; UNIT];
        for w in word.chunks_exact_mut(8) {
            w.copy_from_slice(&0xDEAD_BEEF_0102_0304u64.to_le_bytes());
        }
        m.add(&word);
        assert_eq!(m.units, 4);
        assert_eq!(m.free_units, 4);
        assert_eq!(m.physical_bytes, 0);
        assert_eq!(m.logical_bytes(), 4 * UNIT as u64);
    }

    #[test]
    fn one_byte_off_is_not_free() {
        let mut unit = [0u8; UNIT];
        unit[UNIT - 1] = 1;
        let mut scratch = Vec::new();
        match classify_unit(&unit, &mut scratch) {
            UnitStorage::Compressed(n) => assert!(n > 0 && n < 64, "{n}"),
            other => panic!("{other:?}"),
        }
        // A repeated 4-byte pattern that is not a repeated 8-byte word still
        // compresses: the rule is the device's, word by word.
        let mut half = [0u8; UNIT];
        half[..UNIT / 2].fill(7);
        assert!(matches!(classify_unit(&half, &mut scratch), UnitStorage::Compressed(_)));
    }

    #[test]
    fn random_blocks_are_stored_raw() {
        let mut rng = Rng(11);
        let mut m = Meter::new();
        let bytes: Vec<u8> = (0..2 * UNIT).map(|_| rng.next() as u8).collect();
        m.add(&bytes);
        assert_eq!(m.raw_units, 2);
        assert_eq!(m.physical_bytes, 2 * UNIT as u64);
    }

    #[test]
    fn a_short_tail_is_a_zero_padded_block() {
        let mut m = Meter::new();
        m.add(&[5u8; UNIT + 100]);
        assert_eq!(m.units, 2);
        // The first block is one repeated word; the tail is 100 bytes of 5
        // then zeros: it compresses to a few bytes.
        assert_eq!(m.free_units, 1);
        assert!(m.physical_bytes > 0 && m.physical_bytes < 64);
    }

    #[test]
    fn the_physical_figure_never_exceeds_the_logical_one_and_merges_add_up() {
        let mut rng = Rng(5);
        let mut total = Meter::new();
        for round in 0..40 {
            let mut part = Meter::new();
            // Half-random, half-repetitive blocks of varying mix.
            let len = UNIT * (1 + round % 3) + (rng.next() % 500) as usize;
            let bytes: Vec<u8> = (0..len)
                .map(|i| if (i / 64) % (1 + round % 4) == 0 { rng.next() as u8 } else { (i % 7) as u8 })
                .collect();
            part.add(&bytes);
            assert!(part.physical_bytes <= part.logical_bytes());
            assert_eq!(part.units, len.div_ceil(UNIT) as u64);
            total.merge(&part);
        }
        assert!(total.physical_bytes <= total.logical_bytes());
        assert!(total.physical_bytes > 0);
    }
}
