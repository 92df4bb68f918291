//! The engine's side of a tiered index's hot tier (`BaseStructure::hot_tier`,
//! `core/src/hot_tier.rs`): counters and the CLOCK hand in the slot,
//! sampled promotion of point reads, the sweep that keeps the tier within
//! its bound, and settling after merges. The base structure is the cold
//! tier; the dynamic stage's tree holds the hot tier's records beside the
//! unmerged entries. src/tiered/README.md draws the protocol.

use std::cmp::Ordering;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering as AtomicOrdering};

use pg_hybrid_core::hot_tier;
use pg_hybrid_core::tid::Tid;
use pgrx::pg_sys;

use super::base::{BaseCursor, Dir, HotTierSettings, ScanRange};
use super::meta::BaseInfo;
use super::state::{DualStageState, SlotState};
use crate::keys::IndexDesc;
use crate::shmem::{ArenaPool, SlotRef};

/// Longest CLOCK hand kept; a longer key is kept truncated (a prefix sorts
/// before the key, so the next step only looks at a few entries again).
const HAND_MAX: usize = 256;
/// Records one sweep step looks at under the slot's exclusive lock.
const SWEEP_RECORDS: usize = 256;
/// Promotions stop while less than this share of the arena is free.
const ARENA_RESERVE: f64 = 0.25;
/// A key with more cold entries than this is not promoted (a key with many
/// versions would take the hot tier's room for one record).
const PROMOTE_MAX_ENTRIES: usize = 64;

/// Hot-tier state of a slot (shared memory, part of `DualStageState`).
#[repr(C)]
pub struct HotState {
    /// Point reads of the index and those answered by the hot tier alone.
    pub point_reads: AtomicU64,
    pub hot_hits: AtomicU64,
    pub promotions: AtomicU64,
    /// Records evicted by sweeps, and sweep steps run.
    pub evictions: AtomicU64,
    pub sweeps: AtomicU64,
    /// The tier is filling (`hot_tier::filling_after`): every point read
    /// that had to read the cold tier promotes until it is full, then
    /// `sample_rate` applies. Set by promotions under the slot's exclusive
    /// lock, read without it.
    filling: AtomicBool,
    /// The CLOCK hand: where the next sweep step starts (the slot's
    /// exclusive lock guards it).
    hand_len: u32,
    hand_set: bool,
    hand: [u8; HAND_MAX],
}

impl HotState {
    pub fn clear(&mut self) {
        self.point_reads = AtomicU64::new(0);
        self.hot_hits = AtomicU64::new(0);
        self.promotions = AtomicU64::new(0);
        self.evictions = AtomicU64::new(0);
        self.sweeps = AtomicU64::new(0);
        self.filling = AtomicBool::new(true);
        self.hand_len = 0;
        self.hand_set = false;
    }

    fn hand(&self) -> Option<Vec<u8>> {
        self.hand_set.then(|| self.hand[..self.hand_len as usize].to_vec())
    }

    fn set_hand(&mut self, h: Option<&[u8]>) {
        match h {
            Some(k) => {
                let n = k.len().min(HAND_MAX);
                self.hand[..n].copy_from_slice(&k[..n]);
                self.hand_len = n as u32;
                self.hand_set = true;
            }
            None => self.hand_set = false,
        }
    }
}

/// Whether stored key `k` has the key columns of marker key `m`.
fn same_key(desc: &IndexDesc, m: &[u8], k: &[u8]) -> bool {
    desc.compare_prefix(k, m) == Ordering::Equal
}

/// After a merge moved the dynamic stage's entries below `cutoff` into the
/// cold tier: those of hot records stay as clean copies, the rest leave,
/// and so does every entry whose TID the merge pruned from the cold tier.
/// Caller holds the slot lock exclusively.
pub fn settle(st: &mut DualStageState, desc: &IndexDesc, cutoff: u64, pruned: &mut dyn FnMut(Tid) -> bool) {
    hot_tier::settle_after_merge(&mut st.tree, &mut ArenaPool, &mut |m, k| same_key(desc, m, k), cutoff, pruned);
}

/// The entry of an insert whose delta record a merge took into the cold
/// tier before the insert reached the tree (`hot_tier::adopt_merged`): a
/// record of its key takes it as a clean copy. Caller holds the slot lock
/// exclusively.
pub fn adopt_merged(st: &mut DualStageState, desc: &IndexDesc, key: &[u8], tid: Tid) {
    let mut cmp = |a: &[u8], b: &[u8]| desc.compare(a, b);
    hot_tier::adopt_merged(&mut st.tree, &mut ArenaPool, &mut cmp, &mut |m, k| same_key(desc, m, k), desc.keycols(key), key, tid);
}

/// Runs sweep steps until the hot tier's live bytes are under 90% of the
/// bound, or two full turns of the hand did not get there (the rest is
/// dirty entries, which only a merge moves down). Takes the slot lock
/// exclusively, one step at a time.
pub fn sweep_to_bound(slot: SlotRef, desc: &IndexDesc, settings: &HotTierSettings) {
    let goal = hot_tier::sweep_goal(settings.hot_bytes);
    let mut wraps = 0;
    loop {
        let _g = slot.exclusive();
        let st = slot.state();
        if hot_tier::live_bytes(&st.tree) <= goal || st.tree.nentries == 0 {
            return;
        }
        let hand = st.hot.hand();
        let s = hot_tier::sweep(
            &mut st.tree,
            &mut ArenaPool,
            &mut |a, b| desc.compare(a, b),
            &mut |m, k| same_key(desc, m, k),
            hand.as_deref(),
            SWEEP_RECORDS,
        );
        st.hot.sweeps.fetch_add(1, AtomicOrdering::Relaxed);
        st.hot.evictions.fetch_add(s.evicted as u64, AtomicOrdering::Relaxed);
        st.hot.set_hand(s.next_hand.as_deref());
        if s.next_hand.is_none() {
            // A full turn: give the blocks of emptied leaves back.
            st.tree.repack(&mut ArenaPool);
            wraps += 1;
            if wraps == 2 {
                return;
            }
        }
    }
}

/// Whether the hot tier is over its bound (a sweep is due).
pub fn over_bound(st: &DualStageState, settings: &HotTierSettings) -> bool {
    hot_tier::live_bytes(&st.tree) > settings.hot_bytes
}

/// The chance that a point read which had to read the cold tier promotes
/// the key (see `HotState::filling`). The paper's F trades warm-up speed
/// for resistance to thrash (a large F fills the tier quickly, a small one
/// keeps one-off reads from pushing hot records out); thrash only costs
/// once something has to be evicted, so a tier with room takes every
/// record it is offered and F applies from the time it is full.
pub fn promotion_rate(st: &DualStageState, settings: &HotTierSettings) -> f64 {
    if st.hot.filling.load(AtomicOrdering::Relaxed) {
        1.0
    } else {
        settings.sample_rate
    }
}

/// Records whether the tier is filling (`hot_tier::filling_after`); the
/// caller holds the slot lock exclusively.
fn note_fill(st: &DualStageState, settings: &HotTierSettings) {
    let was = st.hot.filling.load(AtomicOrdering::Relaxed);
    let now = hot_tier::filling_after(hot_tier::live_bytes(&st.tree), settings.hot_bytes, was);
    st.hot.filling.store(now, AtomicOrdering::Relaxed);
}

thread_local! {
    static RNG: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// A draw with probability `rate` (xorshift per backend).
pub fn sampled(rate: f64) -> bool {
    if rate >= 1.0 {
        return true;
    }
    RNG.with(|r| {
        let mut x = r.get();
        if x == 0 {
            x = (unsafe { pg_sys::MyProcPid } as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        }
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        r.set(x);
        ((x >> 11) as f64 / (1u64 << 53) as f64) < rate
    })
}

/// Upward migration of the record of `keycols` (a point read that had to
/// read the cold tier drew it): reads the key's cold entries with `base`
/// (a cursor of generation `info`, which the caller's reader registration
/// keeps readable) and, if no merge, VACUUM or promotion changed anything
/// since `info`, copies them into the hot tier behind the key's marker.
/// Returns whether it promoted. Never on a standby (it never migrates).
pub unsafe fn promote(slot: SlotRef, desc: &IndexDesc, base: &mut dyn BaseCursor, info: &BaseInfo, keycols: &[u8], settings: &HotTierSettings) -> bool {
    if pg_sys::RecoveryInProgress() {
        return false;
    }
    // The arena is every index's: when it runs short, hot tiers stop
    // growing (the others' dynamic stages need it, and an insert that
    // cannot get a block even after its merge is an ERROR).
    if crate::shmem::header().free_fraction() < ARENA_RESERVE {
        return false;
    }
    base.start(Dir::Fwd, &ScanRange { lower: keycols, upper: Some(keycols), whole_key: false, strict: (false, false), point: true });
    let mut keys: Vec<u8> = Vec::new();
    let mut items: Vec<(usize, usize, Tid)> = Vec::new();
    while let Some((k, t)) = base.peek(Dir::Fwd) {
        if desc.compare_prefix(k, keycols) != Ordering::Equal {
            break;
        }
        if items.len() == PROMOTE_MAX_ENTRIES {
            return false;
        }
        items.push((keys.len(), k.len(), t));
        keys.extend_from_slice(k);
        base.advance(Dir::Fwd);
    }
    base.stop();
    if items.is_empty() {
        return false;
    }
    let entries: Vec<(&[u8], Tid)> = items.iter().map(|&(o, l, t)| (&keys[o..o + l], t)).collect();
    let marker = desc.keycols(entries[0].0);
    let promoted = {
        let _g = slot.exclusive();
        let st = slot.state();
        let unchanged = st.valid
            && st.base.generation == info.generation
            && st.base.merged_upto == info.merged_upto
            && st.base.vacuum_epoch == info.vacuum_epoch;
        let mut cmp = |a: &[u8], b: &[u8]| desc.compare(a, b);
        if !unchanged || hot_tier::touch(&st.tree, &ArenaPool, &mut cmp, marker) {
            false
        } else {
            match hot_tier::promote(&mut st.tree, &mut ArenaPool, &mut cmp, marker, &entries) {
                Ok(()) => {
                    if let Some(h) = desc.key_hash(marker) {
                        st.bloom_add(h);
                    }
                    st.hot.promotions.fetch_add(1, AtomicOrdering::Relaxed);
                    note_fill(st, settings);
                    true
                }
                // The arena is short: the clean copies that went in are
                // harmless (the next sweep or merge drops them).
                Err(_) => false,
            }
        }
    };
    if promoted {
        let over = {
            let _g = slot.shared();
            over_bound(slot.state(), settings)
        };
        if over {
            sweep_to_bound(slot, desc, settings);
        }
    }
    promoted
}

/// The hot tier's figures for `pg_hybrid.index_stats`.
pub struct HotFigures {
    /// Records (markers), their entries (clean copies and unmerged
    /// entries of hot keys), and the unmerged entries of every key.
    pub records: i64,
    pub entries: i64,
    pub dirty: i64,
    pub bytes: i64,
    pub hit_ratio: Option<f64>,
    pub promotions: i64,
    pub evictions: i64,
    pub sweeps: i64,
    /// Point reads of the index since the slot was made, and those the hot
    /// tier answered alone (their ratio is `hit_ratio`).
    pub point_reads: i64,
    pub hot_hits: i64,
}

/// Counts the hot tier's records and entries (clean copies and unmerged
/// entries; markers are records) under the slot's shared lock.
pub fn figures(slot: SlotRef, desc: &IndexDesc) -> HotFigures {
    let _g = slot.shared();
    let st = slot.state();
    let (mut records, mut entries, mut dirty) = (0i64, 0i64, 0i64);
    let mut in_record: Option<Vec<u8>> = None;
    let merged = st.base.merged_upto;
    st.tree.scan_all(&ArenaPool, |k: &[u8], t: Tid, p: u64| {
        match hot_tier::classify(t, p) {
            hot_tier::HotKind::Marker { .. } => {
                records += 1;
                in_record = Some(k.to_vec());
                return true;
            }
            hot_tier::HotKind::Dirty { pos } if pos >= merged => dirty += 1,
            _ => {}
        }
        if in_record.as_deref().is_some_and(|m| same_key(desc, m, k)) {
            entries += 1;
        } else {
            in_record = None;
        }
        true
    });
    let reads = st.hot.point_reads.load(AtomicOrdering::Relaxed);
    let hits = st.hot.hot_hits.load(AtomicOrdering::Relaxed);
    HotFigures {
        records,
        entries,
        dirty,
        bytes: hot_tier::live_bytes(&st.tree) as i64,
        hit_ratio: (reads > 0).then(|| hits as f64 / reads as f64),
        promotions: st.hot.promotions.load(AtomicOrdering::Relaxed) as i64,
        evictions: st.hot.evictions.load(AtomicOrdering::Relaxed) as i64,
        sweeps: st.hot.sweeps.load(AtomicOrdering::Relaxed) as i64,
        point_reads: reads as i64,
        hot_hits: hits as i64,
    }
}

/// A hot record as `pg_hybrid.verify` checks it.
pub struct HotRecord {
    pub marker: Vec<u8>,
    /// Its entries' TIDs, each with whether it is a clean copy.
    pub entries: Vec<(Tid, bool)>,
}

/// The hot tier's records, copied under the slot's shared lock, with the
/// base they complement.
pub fn records(slot: SlotRef, desc: &IndexDesc) -> (BaseInfo, Vec<HotRecord>) {
    let _g = slot.shared();
    let st = slot.state();
    let mut out: Vec<HotRecord> = Vec::new();
    let mut open = false;
    st.tree.scan_all(&ArenaPool, |k: &[u8], t: Tid, p: u64| {
        let kind = hot_tier::classify(t, p);
        if let hot_tier::HotKind::Marker { .. } = kind {
            out.push(HotRecord { marker: k.to_vec(), entries: Vec::new() });
            open = true;
            return true;
        }
        match out.last_mut() {
            Some(r) if open && same_key(desc, &r.marker, k) => r.entries.push((t, kind == hot_tier::HotKind::Clean)),
            _ => open = false,
        }
        true
    });
    (st.base, out)
}
