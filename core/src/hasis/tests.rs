//! Hybrid pages against a model: random inserts, updates, deletes,
//! compactions and vacuums on an `Extent`, checked after every step
//! against a BTreeMap of slot -> version.

use super::compact::{apply, CompactionRecord, Placement};
use super::extent::Extent;
use super::header::DirEntry;
use super::layout::{Geometry, Params, MAX_OFFSET};
use super::row::{ColumnDesc, MinMaxOrder, Mvcc, Row, Schema};
use super::*;
use crate::tid::Tid;
use proptest::prelude::*;
use std::collections::{BTreeMap, BTreeSet};

fn schema() -> Schema {
    Schema::new(vec![
        ColumnDesc::fixed(4, MinMaxOrder::SignedInt),
        ColumnDesc::varlena(),
        ColumnDesc::fixed(8, MinMaxOrder::Float),
        ColumnDesc::fixed(3, MinMaxOrder::None),
        ColumnDesc::varlena(),
    ])
    .unwrap()
}

/// xorshift64*: deterministic values from a proptest seed.
struct Rng(u64);
impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

fn random_row(rng: &mut Rng, wide: usize) -> Row {
    let natts = if rng.below(6) == 0 { rng.below(5) as usize } else { 5 };
    let mut values = Vec::with_capacity(natts);
    for c in 0..natts {
        if rng.below(5) == 0 {
            values.push(None);
            continue;
        }
        let v = match c {
            0 => (rng.next() as i32).to_le_bytes().to_vec(),
            2 => (rng.next() as f64 / 7.0).to_le_bytes().to_vec(),
            3 => vec![rng.next() as u8; 3],
            _ => {
                let len = if rng.below(8) == 0 { rng.below(wide as u64 + 1) } else { rng.below(24) } as usize;
                (0..len).map(|i| (i as u8).wrapping_add(rng.next() as u8 & 7)).collect()
            }
        };
        values.push(Some(v));
    }
    Row { values }
}

#[derive(Default, Clone)]
struct Model {
    versions: BTreeMap<u16, (Mvcc, Row)>,
    dead: BTreeSet<u16>,
}

fn check(ext: &Extent, model: &Model, s: &Schema) -> std::result::Result<(), TestCaseError> {
    let page = ext.open(s).map_err(|e| TestCaseError::fail(format!("open: {e}")))?;
    let g = ext.geometry;
    for slot in 0..g.params.max_slots {
        let got = page.get(slot).unwrap();
        match (model.versions.get(&slot), got) {
            (Some((m, r)), SlotContent::Version(v)) => {
                prop_assert_eq!(v.header.mvcc, *m, "slot {}", slot);
                prop_assert_eq!(&v.row, r, "slot {}", slot);
                prop_assert_eq!(v.header.slot, slot);
            }
            (None, SlotContent::Dead) => prop_assert!(model.dead.contains(&slot), "slot {} dead", slot),
            (None, SlotContent::Unused) => prop_assert!(!model.dead.contains(&slot), "slot {} unused", slot),
            (want, got) => prop_assert!(false, "slot {}: model {:?}, page {:?}", slot, want, got),
        }
        let t = g.tid(5000, slot).unwrap();
        prop_assert!(t.offset >= 1 && t.offset <= MAX_OFFSET);
        prop_assert_eq!(g.slot(5000, t).unwrap(), slot);
    }
    let scanned: Vec<u16> = page.scan().unwrap().iter().map(|v| v.slot).collect();
    prop_assert_eq!(scanned, model.versions.keys().copied().collect::<Vec<_>>());
    Ok(())
}

/// Decisions as a function of (seed, slot, mvcc): deleted versions are
/// sometimes removed, others stay or move. Every tenth kept version gets an
/// infomask bit set, as a freezing oracle would.
fn decide(seed: u64, slot: u16, m: &mut Mvcc) -> Placement {
    let mut r = Rng::new(seed ^ (slot as u64) << 20);
    let p = if m.xmax != 0 && r.below(2) == 0 {
        Placement::Remove
    } else if r.below(3) == 0 {
        Placement::Stay
    } else {
        Placement::Column
    };
    if p != Placement::Remove && r.below(10) == 0 {
        m.infomask |= 0x0300;
    }
    p
}

#[derive(Clone, Debug)]
enum Op {
    Insert(u64),
    Update(u64),
    Delete(u64),
    Compact(u64),
    Vacuum,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        5 => any::<u64>().prop_map(Op::Insert),
        3 => any::<u64>().prop_map(Op::Update),
        2 => any::<u64>().prop_map(Op::Delete),
        1 => any::<u64>().prop_map(Op::Compact),
        1 => Just(Op::Vacuum),
    ]
}

fn geometries() -> impl Strategy<Value = (Params, usize)> {
    prop_oneof![
        // Tiny: compaction hits the column area limit and the delta fills.
        // (5 columns need 7 units = 4 blocks at the least.)
        Just((Params { column_blocks: 4, delta_blocks: 3, compact_trigger: 2, max_slots: 300 }, 900)),
        // Wide varlena values in a small area.
        Just((Params { column_blocks: 5, delta_blocks: 2, compact_trigger: 1, max_slots: 200 }, 3000)),
        // The defaults.
        Just((Params::default(), 200)),
    ]
}

/// What a run went through, so tests can insist the interesting states
/// were reached.
#[derive(Default, Debug)]
struct Stats {
    compactions: usize,
    /// Delta versions the oracle sent to the column part that stayed in
    /// the delta part because the column area was full.
    demoted: usize,
    removed: usize,
    no_space: usize,
    reused_slots: usize,
    column_versions_stamped: usize,
}

fn run(params: Params, wide: usize, ops: &[Op]) -> std::result::Result<Stats, TestCaseError> {
    let mut st = Stats::default();
    let g = Geometry::new(params).unwrap();
    let s = schema();
    let mut ext = Extent::new(&g);
    let mut model = Model::default();
    let mut xid = 100u32;
    let mut ever_used = 0usize;
    for op in ops {
        match *op {
            Op::Insert(seed) => {
                let row = random_row(&mut Rng::new(seed), wide);
                xid += 1;
                let m = Mvcc { xmin: xid, ..Mvcc::default() };
                match ext.insert(&s, m, &row) {
                    Ok(slot) => {
                        prop_assert!(!model.versions.contains_key(&slot) && !model.dead.contains(&slot));
                        if (slot as usize) < ever_used {
                            st.reused_slots += 1;
                        }
                        ever_used = ever_used.max(slot as usize + 1);
                        model.versions.insert(slot, (m, row));
                    }
                    Err(Error::NoSpace) => st.no_space += 1,
                    Err(e) => prop_assert!(false, "insert: {}", e),
                }
            }
            Op::Update(seed) | Op::Delete(seed) => {
                let live: Vec<u16> = model.versions.iter().filter(|(_, (m, _))| m.xmax == 0).map(|(s, _)| *s).collect();
                if live.is_empty() {
                    continue;
                }
                let mut rng = Rng::new(seed);
                let old = live[rng.below(live.len() as u64) as usize];
                xid += 1;
                let mut stamp = model.versions[&old].0;
                stamp.xmax = xid;
                stamp.cid = rng.below(3) as u32;
                if matches!(op, Op::Update(_)) {
                    let row = random_row(&mut rng, wide);
                    let m = Mvcc { xmin: xid, ..Mvcc::default() };
                    match ext.insert(&s, m, &row) {
                        Ok(new) => {
                            ever_used = ever_used.max(new as usize + 1);
                            model.versions.insert(new, (m, row));
                            // The old version points at its successor
                            // (what TM_Updated returns).
                            stamp.ctid = g.tid(5000, new).unwrap();
                        }
                        Err(Error::NoSpace) => {
                            st.no_space += 1;
                            continue;
                        }
                        Err(e) => prop_assert!(false, "update insert: {}", e),
                    }
                }
                if matches!(ext.open(&s).unwrap().entry(old), DirEntry::Column { .. }) {
                    st.column_versions_stamped += 1;
                }
                ext.set_mvcc(old, &stamp).map_err(|e| TestCaseError::fail(format!("stamp: {e}")))?;
                model.versions.get_mut(&old).unwrap().0 = stamp;
            }
            Op::Compact(seed) => {
                let before = ext.clone();
                let rec = ext
                    .compact(&s, &mut |slot, m: &mut Mvcc| decide(seed, slot, m))
                    .map_err(|e| TestCaseError::fail(format!("compact: {e}")))?;
                // The model applies the same decisions.
                let mut next = BTreeMap::new();
                for (&slot, (m, row)) in &model.versions {
                    let mut m = *m;
                    if decide(seed, slot, &mut m) == Placement::Remove {
                        model.dead.insert(slot);
                    } else {
                        next.insert(slot, (m, row.clone()));
                    }
                }
                model.versions = next;
                st.compactions += 1;
                st.removed += rec.removed.len();
                let old_mvcc: BTreeMap<u16, Mvcc> =
                    before.open(&s).unwrap().delta_items().iter().map(|d| (d.header.slot, d.header.mvcc)).collect();
                st.demoted += rec
                    .delta_items
                    .iter()
                    .filter(|it| {
                        let slot = u16::from_le_bytes([it[2], it[3]]);
                        decide(seed, slot, &mut old_mvcc[&slot].clone()) == Placement::Column
                    })
                    .count();
                prop_assert_eq!(ext.header().unwrap().version, before.header().unwrap().version + 1);
                // Redo: the decoded record rebuilds the same bytes on the
                // pre-compaction image.
                for compress in [false, true] {
                    let bytes = rec.encode(compress).unwrap();
                    let back = CompactionRecord::decode(&bytes).unwrap();
                    prop_assert_eq!(&back, &rec);
                    let mut redo = before.clone();
                    redo.apply(&back).unwrap();
                    prop_assert!(redo == ext, "redo differs from primary");
                }
                // Column rows are in slot order and every delta item is in
                // a block the header counts.
                let page = ext.open(&s).unwrap();
                for (r, cr) in page.column_rows().iter().enumerate() {
                    prop_assert_eq!(page.entry(cr.header.slot), DirEntry::Column { row: r as u16 });
                }
            }
            Op::Vacuum => {
                let dead: Vec<u16> = model.dead.iter().copied().collect();
                ext.set_unused(&dead).map_err(|e| TestCaseError::fail(format!("vacuum: {e}")))?;
                model.dead.clear();
            }
        }
        check(&ext, &model, &s)?;
    }
    Ok(st)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Every slot's content equals the model's after any sequence; a slot
    /// keeps its version (its TID) across compactions; every TID offset is
    /// 1..=291; redo from the decoded record reproduces the primary's bytes.
    #[test]
    fn random_sequences_match_the_model((params, wide) in geometries(), ops in proptest::collection::vec(op(), 1..120)) {
        run(params, wide, &ops).map(|_| ())?;
    }
}

#[test]
fn long_mixed_sequence_default_geometry() {
    let mut rng = Rng::new(42);
    let ops: Vec<Op> = (0..1200)
        .map(|_| match rng.below(20) {
            0..=9 => Op::Insert(rng.next()),
            10..=13 => Op::Update(rng.next()),
            14..=16 => Op::Delete(rng.next()),
            17..=18 => Op::Compact(rng.next()),
            _ => Op::Vacuum,
        })
        .collect();
    let st = run(Params::default(), 300, &ops).unwrap();
    assert!(st.compactions > 100 && st.removed > 100 && st.reused_slots > 50 && st.column_versions_stamped > 50, "{st:?}");
}

/// A small extent under the same mix: the column area overflows (delta
/// versions turned back), the extent fills up (NoSpace), slots are reused.
#[test]
fn long_mixed_sequence_small_extent() {
    let mut rng = Rng::new(4242);
    let ops: Vec<Op> = (0..1500)
        .map(|_| match rng.below(20) {
            0..=10 => Op::Insert(rng.next()),
            11..=13 => Op::Update(rng.next()),
            14..=15 => Op::Delete(rng.next()),
            16..=18 => Op::Compact(rng.next()),
            _ => Op::Vacuum,
        })
        .collect();
    let st = run(Params { column_blocks: 5, delta_blocks: 3, compact_trigger: 2, max_slots: 300 }, 900, &ops).unwrap();
    assert!(
        st.demoted > 20 && st.no_space > 20 && st.reused_slots > 20 && st.column_versions_stamped > 20,
        "{st:?}"
    );
}

/// Inserts until the extent is full, then compacts everything toward the
/// column part: with wide varlena columns the column area cannot take all
/// rows, the rest stays in the delta part, and nothing is lost.
#[test]
fn wide_varlena_overflow_keeps_rows_in_delta() {
    let s = Schema::new(vec![ColumnDesc::varlena(), ColumnDesc::varlena(), ColumnDesc::fixed(8, MinMaxOrder::SignedInt)]).unwrap();
    let g = Geometry::new(Params { column_blocks: 4, delta_blocks: 4, compact_trigger: 2, max_slots: 500 }).unwrap();
    let mut ext = Extent::new(&g);
    let mut rows = BTreeMap::new();
    for i in 0..1000u32 {
        let row = Row::new(vec![
            Some(vec![b'x'; 1500 + (i as usize * 97) % 1200]),
            Some(vec![b'y'; (i as usize * 31) % 900]),
            Some((i as i64).to_le_bytes().to_vec()),
        ]);
        match ext.insert(&s, Mvcc { xmin: i + 3, ..Mvcc::default() }, &row) {
            Ok(slot) => {
                rows.insert(slot, row);
            }
            Err(Error::NoSpace) => break,
            Err(e) => panic!("{e}"),
        }
    }
    assert!(rows.len() > 5);
    let rec = ext.compact(&s, &mut |_, _: &mut Mvcc| Placement::Column).unwrap();
    assert!(!rec.column_rows.is_empty());
    assert!(!rec.delta_items.is_empty(), "the column area should have overflowed");
    // The rows kept in delta are the highest slots.
    let max_col = rec.column_rows.iter().map(|r| r.header.slot).max().unwrap();
    let min_delta = rec.delta_items.iter().map(|it| u16::from_le_bytes([it[2], it[3]])).min().unwrap();
    assert!(max_col < min_delta);
    let page = ext.open(&s).unwrap();
    assert!(page.header().column_units as usize <= g.column_units());
    for (slot, row) in &rows {
        match page.get(*slot).unwrap() {
            SlotContent::Version(v) => assert_eq!(&v.row, row),
            other => panic!("slot {slot}: {other:?}"),
        }
    }
    // Values straddle units and blocks in the column part.
    let col = page.column_rows();
    assert!(col.iter().map(|r| r.row.values[0].as_ref().unwrap().len()).sum::<usize>() > 4072);
    // Compacting again changes nothing but the version: still consistent.
    ext.compact(&s, &mut |_, _: &mut Mvcc| Placement::Column).unwrap();
    assert_eq!(ext.open(&s).unwrap().scan().unwrap().len(), rows.len());
}

#[test]
fn too_wide_row_is_an_error() {
    let s = Schema::new(vec![ColumnDesc::varlena(), ColumnDesc::varlena()]).unwrap();
    let g = Geometry::new(Params::default()).unwrap();
    let mut ext = Extent::new(&g);
    let row = Row::new(vec![Some(vec![1; 5000]), Some(vec![2; 5000])]);
    assert!(matches!(ext.insert(&s, Mvcc::default(), &row), Err(Error::RowTooWide { .. })));
    let row = Row::new(vec![Some(vec![1; 9000])]);
    assert!(matches!(ext.insert(&s, Mvcc::default(), &row), Err(Error::RowTooWide { .. })));
    // The widest row that fits takes one delta block of its own.
    let max = delta::MAX_PAYLOAD - 1 - 2 - 2; // bitmap byte, two lengths
    let row = Row::new(vec![Some(vec![1; max]), Some(vec![])]);
    assert_eq!(ext.insert(&s, Mvcc::default(), &row).unwrap(), 0);
    assert_eq!(ext.insert(&s, Mvcc::default(), &Row::new(vec![None])).unwrap(), 1);
    assert_eq!(ext.header().unwrap().delta_used, 2);
}

/// A reader that read the header of version v and then meets a block of
/// version v+1 gets VersionMismatch, never a mixed page.
#[test]
fn readers_detect_a_concurrent_compaction() {
    let s = schema();
    let g = Geometry::new(Params::default()).unwrap();
    let mut ext = Extent::new(&g);
    for i in 0..200u64 {
        ext.insert(&s, Mvcc { xmin: 5, ..Mvcc::default() }, &random_row(&mut Rng::new(i), 100)).unwrap();
    }
    ext.compact(&s, &mut |_, _: &mut Mvcc| Placement::Column).unwrap();
    for i in 0..50u64 {
        ext.insert(&s, Mvcc { xmin: 6, ..Mvcc::default() }, &random_row(&mut Rng::new(1000 + i), 100)).unwrap();
    }
    let old = ext.clone();
    ext.compact(&s, &mut |_, _: &mut Mvcc| Placement::Column).unwrap();
    // Header of the old version, one column block of the new.
    let mut mixed = old.blocks.clone();
    mixed[g.column_block(0)] = ext.blocks[g.column_block(0)].clone();
    assert!(matches!(HybridPage::open(&g, &s, &mixed), Err(Error::VersionMismatch { expected: 2, found: 3 })));
    // Header of the old version, the first delta block of the new one,
    // which the compaction emptied and zeroed: version 0 to the reader.
    assert_eq!(ext.header().unwrap().delta_used, 0);
    let mut mixed = old.blocks.clone();
    mixed[g.delta_block(0)] = ext.blocks[g.delta_block(0)].clone();
    assert!(matches!(HybridPage::open(&g, &s, &mixed), Err(Error::VersionMismatch { expected: 2, found: 0 })));
    // The directory block is stamped too.
    let mut mixed = old.blocks.clone();
    mixed[g.directory_block(0)] = ext.blocks[g.directory_block(0)].clone();
    assert!(matches!(HybridPage::open(&g, &s, &mixed), Err(Error::VersionMismatch { .. })));
    // Each version alone reads the same rows.
    let a: Vec<_> = HybridPage::open(&g, &s, &old.blocks).unwrap().scan().unwrap().into_iter().map(|v| (v.slot, v.row)).collect();
    let b: Vec<_> = ext.open(&s).unwrap().scan().unwrap().into_iter().map(|v| (v.slot, v.row)).collect();
    assert_eq!(a, b);
}

#[test]
fn dead_slots_wait_for_vacuum() {
    let s = schema();
    let g = Geometry::new(Params::default()).unwrap();
    let mut ext = Extent::new(&g);
    let row = Row::new(vec![Some(vec![1, 2, 3, 4])]);
    for _ in 0..3 {
        ext.insert(&s, Mvcc::default(), &row).unwrap();
    }
    ext.set_mvcc(1, &Mvcc { xmax: 9, ..Mvcc::default() }).unwrap();
    ext.compact(&s, &mut |slot, _: &mut Mvcc| if slot == 1 { Placement::Remove } else { Placement::Column }).unwrap();
    assert_eq!(ext.open(&s).unwrap().get(1).unwrap(), SlotContent::Dead);
    // A dead slot is not reused before VACUUM...
    assert_eq!(ext.insert(&s, Mvcc::default(), &row).unwrap(), 3);
    assert!(ext.set_mvcc(1, &Mvcc::default()).is_err());
    assert!(ext.set_unused(&[0]).is_err());
    ext.set_unused(&[1]).unwrap();
    // ...and is after.
    assert_eq!(ext.insert(&s, Mvcc::default(), &row).unwrap(), 1);
}

#[test]
fn tid_of_successor_survives_compaction() {
    let s = schema();
    let g = Geometry::new(Params::default()).unwrap();
    let mut ext = Extent::new(&g);
    let start = 77u32;
    let a = ext.insert(&s, Mvcc { xmin: 10, ..Mvcc::default() }, &Row::new(vec![Some(vec![1; 4])])).unwrap();
    ext.compact(&s, &mut |_, _: &mut Mvcc| Placement::Column).unwrap();
    let b = ext.insert(&s, Mvcc { xmin: 11, ..Mvcc::default() }, &Row::new(vec![Some(vec![2; 4])])).unwrap();
    let succ = g.tid(start, b).unwrap();
    ext.set_mvcc(a, &Mvcc { xmin: 10, xmax: 11, ctid: succ, ..Mvcc::default() }).unwrap();
    ext.compact(&s, &mut |_, _: &mut Mvcc| Placement::Column).unwrap();
    let page = ext.open(&s).unwrap();
    let SlotContent::Version(old) = page.get(a).unwrap() else { panic!() };
    assert_eq!(old.header.mvcc.ctid, succ);
    let SlotContent::Version(new) = page.get(g.slot(start, succ).unwrap()).unwrap() else { panic!() };
    assert_eq!(new.row.values[0], Some(vec![2; 4]));
    assert!(matches!(new.location, DirEntry::Column { .. }));
    assert_eq!(succ, Tid::new(start, b + 1));
}

#[test]
fn record_rejects_corruption() {
    let s = schema();
    let g = Geometry::new(Params::default()).unwrap();
    let mut ext = Extent::new(&g);
    for i in 0..40u64 {
        ext.insert(&s, Mvcc { xmin: 5, ..Mvcc::default() }, &random_row(&mut Rng::new(i), 50)).unwrap();
    }
    let before = ext.clone();
    let rec = ext.compact(&s, &mut |slot, _: &mut Mvcc| if slot % 3 == 0 { Placement::Stay } else { Placement::Column }).unwrap();
    for compress in [false, true] {
        let bytes = rec.encode(compress).unwrap();
        for cut in 0..bytes.len() {
            assert!(CompactionRecord::decode(&bytes[..cut]).is_err());
        }
        let mut m = bytes.clone();
        m[0] ^= 1;
        assert_eq!(CompactionRecord::decode(&m), Err(Error::BadMagic));
        let mut m = bytes.clone();
        m[4] = 7;
        assert_eq!(CompactionRecord::decode(&m), Err(Error::BadFormatVersion(7)));
        // Byte flips decode to an error or to a record that applies or
        // fails cleanly; never a panic.
        for pos in 0..bytes.len() {
            let mut m = bytes.clone();
            m[pos] ^= 0x5a;
            if let Ok(r) = CompactionRecord::decode(&m) {
                let _ = apply(&g, &r);
                let _ = before.clone().apply(&r);
            }
        }
    }
    // A record for another version, or with a slot twice, is refused.
    let mut r = rec.clone();
    r.old_version += 1;
    r.new_version += 1;
    assert!(before.clone().apply(&r).is_err());
    let mut r = rec.clone();
    r.removed.push(r.column_rows[0].header.slot);
    assert!(apply(&g, &r).is_err());
    let mut r = rec.clone();
    r.params.delta_blocks = 9;
    assert!(matches!(apply(&g, &r), Err(Error::BadParams(_))));
}

#[test]
fn corrupt_extents_give_errors_not_panics() {
    let s = schema();
    let g = Geometry::new(Params { column_blocks: 2, delta_blocks: 2, compact_trigger: 1, max_slots: 200 }).unwrap();
    let mut ext = Extent::new(&g);
    for i in 0..60u64 {
        ext.insert(&s, Mvcc { xmin: 5, ..Mvcc::default() }, &random_row(&mut Rng::new(i), 40)).unwrap();
    }
    ext.compact(&s, &mut |slot, _: &mut Mvcc| if slot % 4 == 0 { Placement::Stay } else { Placement::Column }).unwrap();
    for i in 0..10u64 {
        ext.insert(&s, Mvcc { xmin: 6, ..Mvcc::default() }, &random_row(&mut Rng::new(100 + i), 40)).unwrap();
    }
    assert!(ext.open(&s).is_ok());
    let mut rng = Rng::new(7);
    let mut errors = 0;
    for _ in 0..3000 {
        let mut m = ext.clone();
        let b = rng.below(g.extent_blocks() as u64) as usize;
        let pos = 24 + rng.below(8192 - 24) as usize;
        m.blocks[b][pos] ^= 1 << rng.below(8);
        match m.open(&s) {
            Ok(p) => {
                let _ = p.scan();
            }
            Err(_) => errors += 1,
        }
    }
    assert!(errors > 0);
    // A wrong schema is refused, not misread.
    let other = Schema::new(vec![ColumnDesc::fixed(8, MinMaxOrder::SignedInt)]).unwrap();
    assert!(ext.open(&other).is_err());
}

#[test]
fn empty_and_fully_removed_pages() {
    let s = schema();
    let g = Geometry::new(Params::default()).unwrap();
    let mut ext = Extent::new(&g);
    assert!(ext.open(&s).unwrap().scan().unwrap().is_empty());
    let rec = ext.compact(&s, &mut |_, _: &mut Mvcc| Placement::Column).unwrap();
    assert!(rec.column_rows.is_empty() && rec.delta_items.is_empty());
    for _ in 0..10 {
        ext.insert(&s, Mvcc { xmax: 3, ..Mvcc::default() }, &Row::new(vec![None, None])).unwrap();
    }
    ext.compact(&s, &mut |_, _: &mut Mvcc| Placement::Column).unwrap();
    ext.compact(&s, &mut |_, _: &mut Mvcc| Placement::Remove).unwrap();
    let h = ext.header().unwrap();
    assert_eq!((h.column_rows, h.column_units, h.delta_used), (0, 0, 0));
    // All column and delta blocks went back to zero: free on the drive.
    for i in g.column_block(0)..g.extent_blocks() {
        assert!(ext.blocks[i].iter().all(|&x| x == 0), "block {i}");
    }
    ext.set_unused(&(0..10).collect::<Vec<_>>()).unwrap();
    assert_eq!(ext.header().unwrap().slot_hwm, 0);
}
