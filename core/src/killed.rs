//! Killed-tuple hints: a fixed, lock-free table of TIDs found dead to all,
//! shared by every backend scanning one index (the extension keeps one per
//! index, in one block of its shared-memory arena; `src/engine/killed.rs`
//! says when a hint is safe to use). Open addressing over `KILLED_CELLS` 8-byte cells, up to
//! `PROBES` cells from a TID's home cell; a full neighbourhood overwrites
//! the home cell. It is a cache: a lost hint costs a heap visit, a found
//! one is exactly a TID inserted with the same owner and epoch.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::tid::Tid;

/// Cells per index (8 bytes each): with the owner word, the table fills
/// one 8 kB block of the extension's shared-memory arena.
pub const KILLED_CELLS: usize = crate::dynamic::DYN_BLOCK_SIZE / 8 - 1;
/// Cells a TID may occupy, from its home cell on.
const PROBES: usize = 8;
const TAG_SHIFT: u32 = 48;
/// A cell whose hint was taken back (`forget`): not empty, so probes go on
/// past it, and its tag (high bit clear) matches no epoch, so inserts reuse
/// it.
const FORGOTTEN: u64 = 1 << TAG_SHIFT;

/// Dead TIDs of one index (in its shared-memory slot: all atomics, no
/// pointers, valid when zeroed). A cell is 0 (empty)
/// or `tag(epoch) << 48 | block << 16 | offset`; the tag is never 0.
#[repr(C)]
pub struct KilledTable {
    /// Whose hints these are (the caller's identity of the index); 0 = none
    /// yet.
    owner: AtomicU64,
    cells: [AtomicU64; KILLED_CELLS],
}

const _: () = assert!(std::mem::size_of::<KilledTable>() == crate::dynamic::DYN_BLOCK_SIZE);

fn tag(epoch: u64) -> u64 {
    (epoch & 0x7fff) | 0x8000
}

fn cell_value(tid: Tid, epoch: u64) -> u64 {
    tag(epoch) << TAG_SHIFT | (tid.block as u64) << 16 | tid.offset as u64
}

/// Fibonacci hashing of the packed TID: neighbouring TIDs (one heap page's
/// tuples) land far apart. The top 12 bits choose the home cell, the 8
/// below them the table (`table_for`).
fn mix(tid: Tid) -> u64 {
    ((tid.block as u64) << 16 | tid.offset as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

fn home(tid: Tid) -> usize {
    (mix(tid) >> 52) as usize % KILLED_CELLS
}

/// Which of `ntables` tables (blocks) holds the hint of `tid`, for an
/// index whose hints span several.
pub fn table_for(tid: Tid, ntables: usize) -> usize {
    ((mix(tid) >> 44) & 0xff) as usize % ntables.max(1)
}

impl KilledTable {
    /// Forgets every hint and gives the table to `owner` (0: nobody yet;
    /// the first insert claims it).
    pub fn clear(&self, owner: u64) {
        for c in &self.cells {
            c.store(0, Ordering::Relaxed);
        }
        self.owner.store(owner, Ordering::Relaxed);
    }

    /// Records that `tid` is dead to all, as seen by a scan of `epoch` of
    /// the index `owner` (not 0).
    pub fn insert(&self, owner: u64, tid: Tid, epoch: u64) {
        match self.owner.load(Ordering::Relaxed) {
            o if o == owner => {}
            0 => {
                // First hint since the slot was (re)initialised.
                if self.owner.compare_exchange(0, owner, Ordering::Relaxed, Ordering::Relaxed).is_err()
                    && self.owner.load(Ordering::Relaxed) != owner
                {
                    return;
                }
            }
            _ => return,
        }
        let v = cell_value(tid, epoch);
        let t = tag(epoch);
        let h = home(tid);
        // One pass over the neighbourhood: the hint may sit past a free cell
        // (forgotten, or another epoch's), which must not take a second
        // copy that `forget` would leave behind. Nothing lies past an empty
        // cell: inserts fill the first free one, and only `clear` empties.
        // A lost race for the free cell looks again.
        for _ in 0..2 {
            let mut free: Option<(usize, u64)> = None;
            for i in 0..PROBES {
                let at = (h + i) % KILLED_CELLS;
                let cur = self.cells[at].load(Ordering::Relaxed);
                if cur == v {
                    return;
                }
                // An empty cell, or a hint of another epoch (dead weight).
                if free.is_none() && (cur == 0 || cur >> TAG_SHIFT != t) {
                    free = Some((at, cur));
                }
                if cur == 0 {
                    break;
                }
            }
            let Some((at, cur)) = free else { break };
            if self.cells[at].compare_exchange(cur, v, Ordering::Relaxed, Ordering::Relaxed).is_ok() {
                return;
            }
        }
        // Every cell holds a current hint: replace the home one.
        self.cells[h].store(v, Ordering::Relaxed);
    }

    /// Whether a scan of `epoch` on the index `owner` may skip `tid`.
    pub fn contains(&self, owner: u64, tid: Tid, epoch: u64) -> bool {
        if owner == 0 || self.owner.load(Ordering::Relaxed) != owner {
            return false;
        }
        let v = cell_value(tid, epoch);
        let h = home(tid);
        for i in 0..PROBES {
            let cur = self.cells[(h + i) % KILLED_CELLS].load(Ordering::Relaxed);
            if cur == v {
                return true;
            }
            if cur == 0 {
                // Inserts fill the first free cell; cells become 0 only
                // when the whole table is cleared.
                return false;
            }
        }
        false
    }

    /// The TIDs hinted for scans of `epoch` on the index `owner`, in cell
    /// order (a snapshot: inserts may run concurrently).
    pub fn hints(&self, owner: u64, epoch: u64) -> Vec<Tid> {
        if owner == 0 || self.owner.load(Ordering::Relaxed) != owner {
            return Vec::new();
        }
        let t = tag(epoch);
        self.cells
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .filter(|&v| v != 0 && v >> TAG_SHIFT == t)
            .map(|v| Tid { block: (v >> 16) as u32, offset: v as u16 })
            .collect()
    }

    /// Takes back the hint of `tid` (its index entry is gone, so the cell
    /// is better spent on another): the cell stays non-empty for the
    /// probes of `contains` and is free for the next insert. Every copy
    /// goes: two backends inserting the same hint at once can both place
    /// it.
    pub fn forget(&self, owner: u64, tid: Tid, epoch: u64) {
        if owner == 0 || self.owner.load(Ordering::Relaxed) != owner {
            return;
        }
        let v = cell_value(tid, epoch);
        let h = home(tid);
        for i in 0..PROBES {
            let c = &self.cells[(h + i) % KILLED_CELLS];
            match c.load(Ordering::Relaxed) {
                0 => return,
                cur if cur == v => {
                    let _ = c.compare_exchange(v, FORGOTTEN, Ordering::Relaxed, Ordering::Relaxed);
                }
                _ => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashSet;

    fn table() -> Box<KilledTable> {
        // Valid when zeroed, like shared memory.
        let t: Box<KilledTable> = unsafe { Box::new(std::mem::zeroed()) };
        t.clear(0);
        t
    }

    fn tid(b: u32, o: u16) -> Tid {
        Tid { block: b, offset: o }
    }

    #[test]
    fn hints_match_owner_and_epoch_only() {
        let t = table();
        t.insert(7, tid(3, 4), 1);
        assert!(t.contains(7, tid(3, 4), 1));
        assert!(!t.contains(7, tid(3, 4), 2), "another epoch");
        assert!(!t.contains(8, tid(3, 4), 1), "another index");
        assert!(!t.contains(7, tid(3, 5), 1));
        // The first owner keeps the table until it is cleared.
        t.insert(8, tid(1, 1), 1);
        assert!(!t.contains(8, tid(1, 1), 1));
        t.clear(8);
        assert!(!t.contains(7, tid(3, 4), 1));
        t.insert(8, tid(1, 1), 1);
        assert!(t.contains(8, tid(1, 1), 1));
        assert!(!t.contains(0, tid(1, 1), 1));
    }

    #[test]
    fn tables_share_the_load() {
        let mut per = [0usize; 8];
        for b in 0..1000u32 {
            for o in 1..20u16 {
                per[table_for(tid(b, o), 8)] += 1;
            }
        }
        let (lo, hi) = (per.iter().min().unwrap(), per.iter().max().unwrap());
        assert!(*lo > 19000 / 8 * 8 / 10 && *hi < 19000 / 8 * 12 / 10, "{per:?}");
        assert_eq!(table_for(tid(5, 5), 1), 0);
    }

    #[test]
    fn epoch_tags_wrap_but_clear_drops_old_hints() {
        let t = table();
        t.insert(1, tid(9, 9), 5);
        // 2^15 epochs later the tag repeats: VACUUM clears on every bump, so
        // no hint lives that long.
        assert!(t.contains(1, tid(9, 9), 5 + 0x8000));
        t.clear(1);
        assert!(!t.contains(1, tid(9, 9), 5 + 0x8000));
    }

    #[test]
    fn stale_epochs_are_overwritten_first() {
        let t = table();
        // Fill far beyond capacity with epoch 1, then epoch 2 hints must
        // still find room in cells holding epoch-1 hints.
        for i in 0..(KILLED_CELLS as u32 * 2) {
            t.insert(1, tid(i, 1), 1);
        }
        for i in 0..200u32 {
            t.insert(1, tid(100_000 + i, 2), 2);
        }
        let found = (0..200u32).filter(|&i| t.contains(1, tid(100_000 + i, 2), 2)).count();
        assert_eq!(found, 200);
    }

    #[test]
    fn forgotten_hints_free_their_cells_and_keep_probes_going() {
        let t = table();
        // Two TIDs with the same home cell: the second sits after the first.
        let a = tid(1, 1);
        let b = (2..100_000u32).map(|blk| tid(blk, 1)).find(|&x| home(x) == home(a)).unwrap();
        t.insert(1, a, 3);
        t.insert(1, b, 3);
        let mut listed = t.hints(1, 3);
        listed.sort();
        assert_eq!(listed, vec![a, b]);
        assert!(t.hints(1, 4).is_empty() && t.hints(2, 3).is_empty());
        t.forget(1, a, 3);
        assert!(!t.contains(1, a, 3));
        assert!(t.contains(1, b, 3), "a probe goes on past a forgotten cell");
        assert_eq!(t.hints(1, 3), vec![b]);
        // The freed cell takes the next hint of its neighbourhood.
        t.insert(1, a, 3);
        assert!(t.contains(1, a, 3) && t.contains(1, b, 3));
        // A hint made again while a free cell lies before it is not
        // copied there: forgetting it once takes it back.
        t.forget(1, a, 3);
        t.insert(1, b, 3);
        t.forget(1, b, 3);
        assert!(!t.contains(1, b, 3), "no second copy of b in a's freed cell");
        t.insert(1, a, 3);
        t.insert(1, b, 3);
        // Forgetting what is not there changes nothing.
        t.forget(1, tid(9, 9), 3);
        t.forget(2, b, 3);
        assert!(t.contains(1, b, 3));
    }

    proptest! {
        #[test]
        fn prop_found_means_inserted(ops in prop::collection::vec((0u8..5, 0u32..300, 1u16..4, 0u64..3), 1..3000)) {
            let t = table();
            let mut owner = 1u64;
            let mut inserted: HashSet<(u64, u32, u16, u64)> = HashSet::new();
            for (op, b, o, e) in ops {
                match op {
                    0 | 1 => {
                        t.insert(owner, tid(b, o), e);
                        inserted.insert((owner, b, o, e));
                        // Just inserted: found (nothing ran in between).
                        prop_assert!(t.contains(owner, tid(b, o), e));
                    }
                    2 => {
                        let f = t.contains(owner, tid(b, o), e);
                        prop_assert!(!f || inserted.contains(&(owner, b, o, e)), "found a hint never made");
                    }
                    3 => {
                        t.forget(owner, tid(b, o), e);
                        inserted.remove(&(owner, b, o, e));
                        prop_assert!(!t.contains(owner, tid(b, o), e));
                    }
                    _ => {
                        if b % 7 == 0 {
                            owner = 1 + (b as u64 % 3);
                            t.clear(owner);
                            inserted.clear();
                        }
                    }
                }
            }
        }
    }
}
