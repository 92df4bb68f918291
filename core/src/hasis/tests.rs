//! Hybrid pages against a model: random inserts, updates (plain and HOT),
//! deletes, compactions and vacuums on an `Extent`, checked after every
//! step against a BTreeMap of slot -> version and a model of the HOT
//! chains (root slot -> members, redirects).

use super::compact::{apply, CompactionRecord, DecodedRecord, Oracle, Placement, RECORD_FORMAT, RECORD_FORMAT_ROWS};
use super::extent::Extent;
use super::header::DirEntry;
use super::hot::{ChainLink, Chains};
use super::layout::{Geometry, Params, MAX_OFFSET};
use super::column::ColumnRow;
use super::row::{ColumnDesc, MinMaxOrder, Mvcc, Row, RowHeader, Schema, Width};
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

// ---------------------------------------------------------------------------
// HOT flags as the test's "glue" keeps them: heap's infomask2 bits.

/// HEAP_ONLY_TUPLE: no index entry names this version.
const HEAP_ONLY: u16 = 0x8000;
/// HEAP_HOT_UPDATED: the successor (ctid) is a heap-only version.
const HOT_UPDATED: u16 = 0x4000;
/// The block number the tests give the extent's first block (TIDs).
const EXTENT_START: u32 = 5000;

fn heap_only(m: &Mvcc) -> bool {
    m.infomask2 & HEAP_ONLY != 0
}

/// What the glue would read from a version's MVCC fields.
fn link_of(g: &Geometry, m: &Mvcc) -> ChainLink {
    let next = if m.infomask2 & HOT_UPDATED != 0 && m.xmax != 0 { g.slot(EXTENT_START, m.ctid).ok() } else { None };
    ChainLink { heap_only: heap_only(m), next, xmin: m.xmin, updater: m.xmax }
}

/// An oracle with both methods: `decide` from a closure, `link` from the
/// test's HOT flags. Records the calls to check the protocol (one
/// `decide` then one `link` per version, same slot, link sees the
/// rewritten fields).
struct TestOracle<F: FnMut(u16, &mut Mvcc) -> Placement> {
    g: Geometry,
    decide: F,
    /// (slot, mvcc after decide) of the last decide not yet followed by link.
    pending: Option<(u16, Mvcc)>,
    linked: Vec<u16>,
    protocol_errors: Vec<String>,
}

impl<F: FnMut(u16, &mut Mvcc) -> Placement> TestOracle<F> {
    fn new(g: Geometry, decide: F) -> Self {
        TestOracle { g, decide, pending: None, linked: Vec::new(), protocol_errors: Vec::new() }
    }
}

impl<F: FnMut(u16, &mut Mvcc) -> Placement> Oracle for TestOracle<F> {
    fn decide(&mut self, slot: u16, mvcc: &mut Mvcc) -> Placement {
        if let Some((s, _)) = self.pending {
            self.protocol_errors.push(format!("decide({slot}) after decide({s}) without link"));
        }
        let p = (self.decide)(slot, mvcc);
        self.pending = Some((slot, *mvcc));
        p
    }
    fn link(&mut self, slot: u16, mvcc: &Mvcc) -> ChainLink {
        match self.pending.take() {
            Some((s, m)) if s == slot && m == *mvcc => {}
            other => self.protocol_errors.push(format!("link({slot}, {mvcc:?}) after {other:?}")),
        }
        self.linked.push(slot);
        link_of(&self.g, mvcc)
    }
}

// ---------------------------------------------------------------------------
// The model

#[derive(Default, Clone)]
struct Model {
    versions: BTreeMap<u16, (Mvcc, Row)>,
    /// Slots compaction made `Dead` (VACUUM has not freed them yet).
    dead: BTreeSet<u16>,
    /// Every chain: root slot -> the versions a walk from it returns, in
    /// chain order. A version never HOT-updated is a chain of one. The
    /// root is the first member, unless compaction removed it: then the
    /// root slot is a redirect to the first member.
    chains: BTreeMap<u16, Vec<u16>>,
}

impl Model {
    fn redirect(&self, root: u16) -> Option<u16> {
        match self.versions.contains_key(&root) {
            true => None,
            false => self.chains.get(&root).map(|m| m[0]),
        }
    }
    fn root_of(&self, slot: u16) -> Option<u16> {
        self.chains.iter().find(|(_, m)| m.contains(&slot)).map(|(&r, _)| r)
    }
    /// The slot an insert must take: the lowest one without a version,
    /// a dead entry or a redirect (slots above the high-water mark are all
    /// free, so this is the lowest unused slot below it, else the mark).
    fn lowest_free(&self) -> u16 {
        (0u16..).find(|s| !self.versions.contains_key(s) && !self.dead.contains(s) && !self.chains.contains_key(s)).unwrap()
    }
}

/// A walk on the page by hand, through `HybridPage::get`: a redirect to a
/// heap-only version, or a non-heap-only version, then ctid links of
/// HOT-updated versions to heap-only versions whose xmin is the updater.
fn walk_page(page: &HybridPage, g: &Geometry, root: u16) -> Vec<u16> {
    let version = |slot: u16| match page.get(slot) {
        Ok(SlotContent::Version(v)) => Some(v.header.mvcc),
        _ => None,
    };
    let mut out = Vec::new();
    let mut cur = match page.get(root) {
        Ok(SlotContent::Redirect(t)) => match version(t) {
            Some(m) if heap_only(&m) => t,
            _ => return out,
        },
        Ok(SlotContent::Version(v)) if !heap_only(&v.header.mvcc) => root,
        _ => return out,
    };
    loop {
        let m = version(cur).unwrap();
        out.push(cur);
        if out.len() > g.max_slots() || m.infomask2 & HOT_UPDATED == 0 || m.xmax == 0 {
            break;
        }
        let Ok(n) = g.slot(EXTENT_START, m.ctid) else { break };
        match version(n) {
            Some(nm) if heap_only(&nm) && nm.xmin == m.xmax => cur = n,
            _ => break,
        }
    }
    out
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
            (None, SlotContent::Unused) => {
                prop_assert!(!model.dead.contains(&slot), "slot {} unused", slot);
                prop_assert!(!model.chains.contains_key(&slot), "slot {} unused but a chain root", slot);
            }
            (None, SlotContent::Redirect(t)) => {
                prop_assert_eq!(model.redirect(slot), Some(t), "slot {} redirect", slot);
                // A redirect always names a heap-only version.
                match page.get(t).unwrap() {
                    SlotContent::Version(v) => prop_assert!(heap_only(&v.header.mvcc), "redirect {} -> {} not heap-only", slot, t),
                    other => prop_assert!(false, "redirect {} -> {}: {:?}", slot, t, other),
                }
            }
            (want, got) => prop_assert!(false, "slot {}: model {:?}, page {:?}", slot, want, got),
        }
        let t = g.tid(EXTENT_START, slot).unwrap();
        prop_assert!(t.offset >= 1 && t.offset <= MAX_OFFSET);
        prop_assert_eq!(g.slot(EXTENT_START, t).unwrap(), slot);
    }
    let scan = page.scan().unwrap();
    let scanned: Vec<u16> = scan.iter().map(|v| v.slot).collect();
    prop_assert_eq!(scanned, model.versions.keys().copied().collect::<Vec<_>>());

    // HOT chains: the page's chain starts are the model's roots, and a walk
    // from each (by hot.rs and by hand) gives the model's members.
    let mut chains = Chains::new();
    let mut starts = BTreeSet::new();
    for v in &scan {
        let l = link_of(&g, &v.header.mvcc);
        if !l.heap_only {
            starts.insert(v.slot);
        }
        chains.add_version(v.slot, l);
    }
    for slot in 0..page.header().slot_hwm {
        if let DirEntry::Redirect { slot: t } = page.entry(slot) {
            chains.add_redirect(slot, t);
            starts.insert(slot);
        }
    }
    prop_assert_eq!(&starts, &model.chains.keys().copied().collect::<BTreeSet<_>>());
    let mut members_seen = BTreeSet::new();
    for (&root, members) in &model.chains {
        prop_assert!(!members.is_empty(), "empty chain at {}", root);
        prop_assert_eq!(&chains.walk(root), members, "Chains::walk({})", root);
        prop_assert_eq!(&walk_page(&page, &g, root), members, "walk by hand from {}", root);
        for (i, &m) in members.iter().enumerate() {
            prop_assert!(members_seen.insert(m), "slot {} in two chains", m);
            prop_assert!(!matches!(page.entry(m), DirEntry::Unused | DirEntry::Dead), "chain member {} unused/dead", m);
            // Members after the first are heap-only; the first is the root
            // itself (not heap-only) or a redirect's heap-only target.
            prop_assert_eq!(heap_only(&model.versions[&m].0), i > 0 || m != root, "member {} of {}", m, root);
        }
    }
    // Every version is in exactly one chain: no heap-only version is
    // unreachable.
    prop_assert_eq!(&members_seen, &model.versions.keys().copied().collect::<BTreeSet<_>>());
    prop_assert_eq!(chains.roots().len(), scan.len());
    Ok(())
}

/// Decisions as a function of (seed, slot, mvcc): deleted versions are
/// sometimes removed, others stay or move. Every tenth kept version gets an
/// infomask bit set, as a freezing oracle would. Chains are not consulted,
/// so a member in the middle or at the end of a chain may be "removed"
/// while an earlier member stays.
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
    /// An update whose new version is heap-only, in the same extent.
    HotUpdate(u64),
    Delete(u64),
    Compact(u64),
    /// A bulk insert's batch of 1 to 8 new rows appended by a compaction.
    Bulk(u64),
    Vacuum,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        5 => any::<u64>().prop_map(Op::Insert),
        2 => any::<u64>().prop_map(Op::Update),
        3 => any::<u64>().prop_map(Op::HotUpdate),
        2 => any::<u64>().prop_map(Op::Delete),
        1 => any::<u64>().prop_map(Op::Compact),
        1 => any::<u64>().prop_map(Op::Bulk),
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
    /// HOT updates done (heap-only version inserted, old one stamped).
    hot_updates: usize,
    /// Redirects a compaction made or retargeted.
    redirects_made: usize,
    /// Heap-only versions a compaction removed, their slots `Unused` at once.
    unused_at_compaction: usize,
    /// Slots made `Unused` by a compaction that a later insert took.
    reused_unused_at_compaction: usize,
    /// Versions the oracle said Remove that stayed: an earlier member of
    /// their chain stayed.
    kept_after_live: usize,
    /// Whole chains (longer than one version) that left a `Dead` root.
    dead_chains: usize,
    /// set_unused calls with a non-dead slot, refused.
    vacuum_refusals: usize,
    /// Bytes of the compaction records by reference (format 4) and in
    /// full (format 3), both compressed and not.
    by_reference_bytes: usize,
    full_bytes: usize,
    /// Rows bulk batches appended.
    bulk_rows: usize,
}

struct Run {
    g: Geometry,
    s: Schema,
    wide: usize,
    ext: Extent,
    model: Model,
    xid: u32,
    ever_used: usize,
    /// Slots a compaction made `Unused` and no insert took since.
    freed_at_compaction: BTreeSet<u16>,
    st: Stats,
}

type TestResult<T = ()> = std::result::Result<T, TestCaseError>;

impl Run {
    fn new(params: Params, wide: usize) -> Run {
        let g = Geometry::new(params).unwrap();
        Run {
            g,
            s: schema(),
            wide,
            ext: Extent::new_at(&g, Some(EXTENT_START)),
            model: Model::default(),
            xid: 100,
            ever_used: 0,
            freed_at_compaction: BTreeSet::new(),
            st: Stats::default(),
        }
    }

    /// Inserts a version; None if the extent is full.
    fn insert(&mut self, m: Mvcc, row: Row) -> TestResult<Option<u16>> {
        match self.ext.insert(&self.s, m, &row) {
            Ok(slot) => {
                // Lowest free slot first; never a dead slot, a redirect or
                // a chain member.
                prop_assert_eq!(slot, self.model.lowest_free(), "insert took a slot that is not the lowest free one");
                prop_assert!(self.model.root_of(slot).is_none());
                if (slot as usize) < self.ever_used {
                    self.st.reused_slots += 1;
                }
                if self.freed_at_compaction.remove(&slot) {
                    self.st.reused_unused_at_compaction += 1;
                }
                self.ever_used = self.ever_used.max(slot as usize + 1);
                self.model.versions.insert(slot, (m, row));
                Ok(Some(slot))
            }
            Err(Error::NoSpace) => {
                self.st.no_space += 1;
                Ok(None)
            }
            Err(e) => Err(TestCaseError::fail(format!("insert: {e}"))),
        }
    }

    fn step(&mut self, op: &Op) -> TestResult {
        let g = self.g;
        match *op {
            Op::Insert(seed) => {
                let row = random_row(&mut Rng::new(seed), self.wide);
                self.xid += 1;
                let m = Mvcc { xmin: self.xid, ..Mvcc::default() };
                if let Some(slot) = self.insert(m, row)? {
                    self.model.chains.insert(slot, vec![slot]);
                }
            }
            Op::Update(seed) | Op::Delete(seed) | Op::HotUpdate(seed) => {
                let live: Vec<u16> = self.model.versions.iter().filter(|(_, (m, _))| m.xmax == 0).map(|(s, _)| *s).collect();
                if live.is_empty() {
                    return Ok(());
                }
                let mut rng = Rng::new(seed);
                let old = live[rng.below(live.len() as u64) as usize];
                self.xid += 1;
                let mut stamp = self.model.versions[&old].0;
                stamp.xmax = self.xid;
                stamp.cid = rng.below(3) as u32;
                let hot = matches!(op, Op::HotUpdate(_));
                if matches!(op, Op::Update(_) | Op::HotUpdate(_)) {
                    let row = random_row(&mut rng, self.wide);
                    let m = Mvcc { xmin: self.xid, infomask2: if hot { HEAP_ONLY } else { 0 }, ..Mvcc::default() };
                    let Some(new) = self.insert(m, row)? else { return Ok(()) };
                    // The old version points at its successor (what
                    // TM_Updated returns, and the HOT chain's link).
                    stamp.ctid = g.tid(EXTENT_START, new).unwrap();
                    if hot {
                        stamp.infomask2 |= HOT_UPDATED;
                        // A live version ends its chain; the new version
                        // extends it.
                        let root = self.model.root_of(old).unwrap();
                        let chain = self.model.chains.get_mut(&root).unwrap();
                        prop_assert_eq!(chain.last(), Some(&old));
                        chain.push(new);
                        self.st.hot_updates += 1;
                    } else {
                        self.model.chains.insert(new, vec![new]);
                    }
                }
                if matches!(self.ext.open(&self.s).unwrap().entry(old), DirEntry::Column { .. }) {
                    self.st.column_versions_stamped += 1;
                }
                self.ext.set_mvcc(old, &stamp).map_err(|e| TestCaseError::fail(format!("stamp: {e}")))?;
                self.model.versions.get_mut(&old).unwrap().0 = stamp;
            }
            Op::Compact(seed) => self.compact(seed, Vec::new())?,
            Op::Bulk(seed) => {
                let mut rng = Rng::new(seed);
                let n = 1 + rng.below(8) as usize;
                self.xid += 1;
                let m = Mvcc { xmin: self.xid, ..Mvcc::default() };
                let rows: Vec<(Mvcc, Row)> = (0..n).map(|_| (m, random_row(&mut rng, self.wide))).collect();
                self.compact(seed, rows)?
            }
            Op::Vacuum => self.vacuum()?,
        }
        check(&self.ext, &self.model, &self.s)
    }

    /// A compaction; with `rows`, a bulk insert's (`Extent::append_planned`):
    /// as many of them as the column part takes go in, in fresh slots.
    fn compact(&mut self, seed: u64, mut rows: Vec<(Mvcc, Row)>) -> TestResult {
        let before = self.ext.clone();
        let hwm = before.header().unwrap().slot_hwm;
        // The glue's oracle places a bulk insert's own rows in the column part.
        let bulk_decide = move |slot: u16, m: &mut Mvcc| if slot >= hwm { Placement::Column } else { decide(seed, slot, m) };
        let bulk = !rows.is_empty();
        if bulk {
            // Fresh slots only, and fewer rows until none is turned back.
            rows.truncate(self.g.max_slots().saturating_sub(hwm as usize));
            loop {
                if rows.is_empty() {
                    self.st.no_space += 1;
                    return Ok(());
                }
                // The same oracle as the append below, HOT links included:
                // chains decide what moves, so a plan without them can fit
                // rows that the real one turns back.
                let mut trial = TestOracle::new(self.g, bulk_decide);
                let planned = compact::plan_appending(before.open(&self.s).unwrap(), &self.s, &mut trial, appended_rows(&self.g, hwm, &self.s, &rows))
                    .map_err(|e| TestCaseError::fail(format!("plan_appending: {e}")))?;
                if planned.turned_back == 0 {
                    break;
                }
                let keep = rows.len() - planned.turned_back;
                rows.truncate(keep);
            }
            for (j, (m, row)) in rows.iter().enumerate() {
                let slot = hwm + j as u16;
                let m = Mvcc { ctid: self.g.tid(EXTENT_START, slot).unwrap(), ..*m };
                self.model.versions.insert(slot, (m, row.clone()));
                self.model.chains.insert(slot, vec![slot]);
                self.ever_used = self.ever_used.max(slot as usize + 1);
            }
            self.st.bulk_rows += rows.len();
        }
        let s = &self.s;
        let mut oracle = TestOracle::new(self.g, bulk_decide);
        let planned = match bulk {
            true => self.ext.append_planned(s, &mut oracle, EXTENT_START, &rows),
            false => self.ext.compact_planned(s, &mut oracle),
        }
        .map_err(|e| TestCaseError::fail(format!("compact: {e}")))?;
        prop_assert_eq!(planned.turned_back, 0);
        let rec = planned.record.clone();
        prop_assert_eq!(rec.slot_hwm, if bulk { hwm + rows.len() as u16 } else { 0 });
        prop_assert_eq!(self.ext.header().unwrap().slot_hwm, hwm + rows.len() as u16);
        for (j, _) in rows.iter().enumerate() {
            // Offered to the column part and not turned back.
            let in_column = matches!(self.ext.open(s).unwrap().entry(hwm + j as u16), DirEntry::Column { .. });
            prop_assert!(in_column, "appended row {} not in the column part", j);
        }
        prop_assert!(oracle.protocol_errors.is_empty(), "{:?}", oracle.protocol_errors);
        prop_assert!(oracle.pending.is_none(), "decide without link at the end");
        let mut linked = oracle.linked.clone();
        linked.sort_unstable();
        prop_assert_eq!(linked, self.model.versions.keys().copied().collect::<Vec<_>>(), "one decide+link per version");

        // The model applies the same decisions, chain by chain: only a
        // prefix of a chain goes; members after a kept one stay.
        let model = &self.model;
        let (mut dead, mut unused, mut redirects) = (Vec::new(), Vec::new(), Vec::new());
        let mut versions = BTreeMap::new();
        let mut chains = BTreeMap::new();
        for (&root, members) in &model.chains {
            let decided: Vec<(Mvcc, Placement)> = members
                .iter()
                .map(|m| {
                    let mut mv = model.versions[m].0;
                    let p = if *m >= hwm { Placement::Column } else { decide(seed, *m, &mut mv) };
                    (mv, p)
                })
                .collect();
            let first_live = decided.iter().position(|(_, p)| *p != Placement::Remove);
            let cut = first_live.unwrap_or(members.len());
            unused.extend(members[..cut].iter().copied().filter(|&m| m != root));
            match first_live {
                None => {
                    dead.push(root);
                    if members.len() > 1 || model.redirect(root).is_some() {
                        self.st.dead_chains += 1;
                    }
                }
                Some(i) => {
                    if i > 0 {
                        redirects.push((root, members[i]));
                    }
                    self.st.kept_after_live += decided[i..].iter().filter(|(_, p)| *p == Placement::Remove).count();
                    for j in i..members.len() {
                        versions.insert(members[j], (decided[j].0, model.versions[&members[j]].1.clone()));
                    }
                    chains.insert(root, members[i..].to_vec());
                }
            }
        }
        dead.sort_unstable();
        unused.sort_unstable();
        prop_assert_eq!(&rec.dead, &dead, "record's dead slots");
        prop_assert_eq!(&rec.unused, &unused, "record's unused slots");
        prop_assert_eq!(&rec.redirects, &redirects, "record's redirects");
        let before_page = before.open(s).unwrap();
        for &u in &unused {
            // Only heap-only versions become unused at once.
            match before_page.get(u).unwrap() {
                SlotContent::Version(v) => prop_assert!(heap_only(&v.header.mvcc)),
                other => prop_assert!(false, "unused {} was {:?}", u, other),
            }
        }
        // Versions removed. (rec.entries_released() also counts a redirect
        // that was retargeted or died, which removes no version by itself.)
        let removed_now = self.model.versions.len() - versions.len();
        let was_version = |s: &u16| self.model.versions.contains_key(s);
        let roots_removed = dead.iter().filter(|&s| was_version(s)).count() + redirects.iter().filter(|(r, _)| was_version(r)).count();
        prop_assert_eq!(removed_now, unused.len() + roots_removed);
        prop_assert!(rec.entries_released() >= removed_now);
        self.st.removed += removed_now;
        self.model.versions = versions;
        self.model.chains = chains;
        self.model.dead.extend(dead.iter().copied());
        self.freed_at_compaction.extend(unused.iter().copied());
        self.st.compactions += 1;
        self.st.redirects_made += redirects.len();
        self.st.unused_at_compaction += unused.len();

        let old_mvcc: BTreeMap<u16, Mvcc> = before_page.delta_items().iter().map(|d| (d.header.slot, d.header.mvcc)).collect();
        self.st.demoted += rec
            .delta_items
            .iter()
            .filter(|it| {
                let slot = u16::from_le_bytes([it[2], it[3]]);
                slot < hwm && decide(seed, slot, &mut old_mvcc[&slot].clone()) == Placement::Column
            })
            .count();
        prop_assert_eq!(self.ext.header().unwrap().version, before.header().unwrap().version + 1);
        // Redo: the decoded record rebuilds the same bytes on the
        // pre-compaction image.
        for compress in [false, true] {
            let bytes = rec.encode(compress).unwrap();
            let back = CompactionRecord::decode(&bytes).unwrap();
            prop_assert_eq!(&back, &rec);
            let mut redo = before.clone();
            redo.apply(&back).unwrap();
            prop_assert!(redo == self.ext, "redo differs from primary");
            // A format-2 record of the same compaction (written before
            // format 3) decodes to the same record.
            let old = CompactionRecord::decode(&rec.encode_format_2(compress).unwrap()).unwrap();
            prop_assert_eq!(&old, &rec);
            if bulk {
                // Appended rows have no source in the old page.
                prop_assert!(rec.encode_by_reference(&planned.sources, s, compress).is_err());
                self.st.full_bytes += bytes.len();
                continue;
            }
            // By reference (format 4): the values come from the old page.
            let by_ref = rec.encode_by_reference(&planned.sources, s, compress).unwrap();
            prop_assert!(matches!(CompactionRecord::decode(&by_ref), Err(Error::BadInput(_))));
            let DecodedRecord::ByReference(rr) = CompactionRecord::decode_any(&by_ref).unwrap() else {
                return Err(TestCaseError::fail("format 4 decoded as a full record"));
            };
            let resolved = rr.resolve(&before.open(&rr.schema).unwrap()).unwrap();
            prop_assert_eq!(&resolved, &rec);
            // Against the page after the compaction (another version):
            // refused, not misapplied.
            prop_assert!(rr.resolve(&self.ext.open(s).unwrap()).is_err());
            self.st.by_reference_bytes += by_ref.len();
            self.st.full_bytes += bytes.len();
        }
        // Column rows are in slot order and every delta item is in a block
        // the header counts.
        let page = self.ext.open(s).unwrap();
        for (r, cr) in page.column_rows().iter().enumerate() {
            prop_assert_eq!(page.entry(cr.header.slot), DirEntry::Column { row: r as u16 });
        }
        Ok(())
    }

    fn vacuum(&mut self) -> TestResult {
        let dead: Vec<u16> = self.model.dead.iter().copied().collect();
        // set_unused accepts only Dead slots: a redirect, a version (root
        // or heap-only) or an unused slot in the list makes the whole call
        // fail and change nothing.
        let hwm = self.ext.header().unwrap().slot_hwm;
        let m = &self.model;
        let probes: Vec<u16> = [
            m.chains.keys().copied().find(|&r| m.redirect(r).is_some()),
            m.versions.iter().find(|(_, (mv, _))| heap_only(mv)).map(|(&s, _)| s),
            m.versions.iter().find(|(_, (mv, _))| !heap_only(mv)).map(|(&s, _)| s),
            (0..hwm).find(|s| !m.versions.contains_key(s) && !m.dead.contains(s) && !m.chains.contains_key(s)),
        ]
        .into_iter()
        .flatten()
        .collect();
        for p in probes {
            let before = self.ext.clone();
            let mut list = dead.clone();
            list.insert(list.len() / 2, p);
            prop_assert!(self.ext.set_unused(&list).is_err(), "set_unused accepted non-dead slot {}", p);
            prop_assert!(self.ext == before, "a refused set_unused changed the extent");
            self.st.vacuum_refusals += 1;
            if self.model.redirect(p).is_some() {
                prop_assert!(self.ext.set_mvcc(p, &Mvcc::default()).is_err(), "stamp on redirect {}", p);
            }
        }
        self.ext.set_unused(&dead).map_err(|e| TestCaseError::fail(format!("vacuum: {e}")))?;
        self.model.dead.clear();
        Ok(())
    }
}

/// A bulk insert's rows as `plan_appending` takes them.
fn appended_rows(g: &Geometry, hwm: u16, s: &Schema, rows: &[(Mvcc, Row)]) -> Vec<compact::AppendedRow> {
    rows.iter()
        .enumerate()
        .map(|(j, (m, row))| {
            let slot = hwm + j as u16;
            let header = RowHeader { slot, natts: row.values.len() as u16, mvcc: Mvcc { ctid: g.tid(EXTENT_START, slot).unwrap(), ..*m } };
            compact::AppendedRow { header, item: delta::encode_item(&header, &row::encode_payload(s, row).unwrap()).unwrap() }
        })
        .collect()
}

fn run(params: Params, wide: usize, ops: &[Op]) -> std::result::Result<Stats, TestCaseError> {
    let mut r = Run::new(params, wide);
    for op in ops {
        r.step(op)?;
    }
    Ok(r.st)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Every slot's content equals the model's after any sequence; a slot
    /// keeps its version (its TID) across compactions; every TID offset is
    /// 1..=291; HOT chains walk to the model's members; redo from the
    /// decoded record reproduces the primary's bytes.
    #[test]
    fn random_sequences_match_the_model((params, wide) in geometries(), ops in proptest::collection::vec(op(), 1..120)) {
        run(params, wide, &ops).map(|_| ())?;
    }
}

fn mixed_ops(seed: u64, n: usize, weights: [u64; 6]) -> Vec<Op> {
    let mut rng = Rng::new(seed);
    let total: u64 = weights.iter().sum();
    (0..n)
        .map(|_| {
            let mut x = rng.below(total);
            let mut k = 0;
            while x >= weights[k] {
                x -= weights[k];
                k += 1;
            }
            match k {
                0 => Op::Insert(rng.next()),
                1 => Op::Update(rng.next()),
                2 => Op::HotUpdate(rng.next()),
                3 => Op::Delete(rng.next()),
                4 => Op::Compact(rng.next()),
                _ => Op::Vacuum,
            }
        })
        .collect()
}

fn assert_hot_reached(st: &Stats) {
    assert!(
        st.hot_updates > 20
            && st.redirects_made > 0
            && st.unused_at_compaction > 0
            && st.reused_unused_at_compaction > 0
            && st.kept_after_live > 0
            && st.dead_chains > 0
            && st.vacuum_refusals > 0,
        "{st:?}"
    );
}

/// Bulk batches fill extents through compactions that append (the glue's
/// COPY path), between HOT updates and deletes whose versions the same
/// compactions move, keep or remove; redo of each record rebuilds the
/// primary's bytes (`Run::compact`).
#[test]
fn bulk_batches_append_into_the_column_part() {
    for (params, wide) in [(Params::default(), 40), (Params { column_blocks: 4, delta_blocks: 3, compact_trigger: 2, max_slots: 300 }, 900)] {
        let mut rng = Rng::new(7);
        let mut ops: Vec<Op> = (0..400)
            .map(|i| match i % 6 {
                0..=2 => Op::Bulk(rng.next()),
                3 => Op::HotUpdate(rng.next()),
                4 => Op::Delete(rng.next()),
                _ => Op::Insert(rng.next()),
            })
            .collect();
        ops.push(Op::Vacuum);
        let st = run(params, wide, &ops).unwrap();
        assert!(st.bulk_rows > 100 && st.hot_updates > 10, "{st:?}");
        // The tiny extent fills: batches are cut to what fits, then refused.
        assert!(params.max_slots > 300 || st.no_space > 0, "{st:?}");
    }
}

#[test]
fn long_mixed_sequence_default_geometry() {
    // insert, update, HOT update, delete, compact, vacuum
    let ops = mixed_ops(42, 1200, [9, 2, 5, 3, 2, 1]);
    let st = run(Params::default(), 300, &ops).unwrap();
    assert!(st.compactions > 100 && st.removed > 100 && st.reused_slots > 50 && st.column_versions_stamped > 50, "{st:?}");
    assert_hot_reached(&st);
    // Rows up to 300 bytes of random values: a record by reference logs
    // their (random) headers only.
    assert!(st.by_reference_bytes * 3 < st.full_bytes, "{st:?}");
}

/// A small extent under the same mix: the column area overflows (delta
/// versions turned back), the extent fills up (NoSpace), slots are reused.
#[test]
fn long_mixed_sequence_small_extent() {
    let ops = mixed_ops(4242, 1500, [8, 1, 6, 2, 3, 1]);
    let st = run(Params { column_blocks: 5, delta_blocks: 3, compact_trigger: 2, max_slots: 300 }, 900, &ops).unwrap();
    assert!(
        st.demoted > 20 && st.no_space > 20 && st.reused_slots > 20 && st.column_versions_stamped > 20,
        "{st:?}"
    );
    assert_hot_reached(&st);
}

/// Long HOT chains: mostly HOT updates of few rows, so chains grow, lose
/// prefixes to compaction (redirects retargeted again and again) and die.
#[test]
fn long_hot_chains() {
    let ops = mixed_ops(77, 1000, [2, 1, 12, 2, 3, 1]);
    let st = run(Params { column_blocks: 4, delta_blocks: 3, compact_trigger: 2, max_slots: 300 }, 200, &ops).unwrap();
    assert_hot_reached(&st);
    assert!(st.redirects_made > 50 && st.kept_after_live > 50, "{st:?}");
}

/// Inserts until the extent is full, then compacts everything toward the
/// column part: with wide varlena columns the column area cannot take all
/// rows, the rest stays in the delta part, and nothing is lost.
#[test]
fn wide_varlena_overflow_keeps_rows_in_delta() {
    let s = Schema::new(vec![ColumnDesc::varlena(), ColumnDesc::varlena(), ColumnDesc::fixed(8, MinMaxOrder::SignedInt)]).unwrap();
    let g = Geometry::new(Params { column_blocks: 4, delta_blocks: 4, compact_trigger: 2, max_slots: 500 }).unwrap();
    let mut ext = Extent::new_at(&g, Some(EXTENT_START));
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
    let planned = ext.compact_planned(&s, &mut |_, _: &mut Mvcc| Placement::Column).unwrap();
    // Versions had to stay out: the header will say the part is full.
    assert_eq!(planned.column_full, Some(true));
    let rec = planned.record;
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
    // Compacting again changes nothing but the version: still consistent,
    // and still full. Versions that stay where they are offer nothing: no
    // verdict.
    assert_eq!(ext.compact_planned(&s, &mut |_, _: &mut Mvcc| Placement::Column).unwrap().column_full, Some(true));
    assert_eq!(ext.compact_planned(&s, &mut |_, _: &mut Mvcc| Placement::Stay).unwrap().column_full, None);
    assert_eq!(ext.open(&s).unwrap().scan().unwrap().len(), rows.len());
}

/// A column part that takes every version offered is not full.
#[test]
fn column_part_with_room_is_not_full() {
    let s = Schema::new(vec![ColumnDesc::varlena(), ColumnDesc::fixed(8, MinMaxOrder::SignedInt)]).unwrap();
    let g = Geometry::new(Params::default()).unwrap();
    let mut ext = Extent::new_at(&g, Some(EXTENT_START));
    for i in 0..50u32 {
        let row = Row::new(vec![Some(vec![b'v'; 20]), Some((i as i64).to_le_bytes().to_vec())]);
        ext.insert(&s, Mvcc { xmin: i + 3, ..Mvcc::default() }, &row).unwrap();
    }
    let planned = ext.compact_planned(&s, &mut |_, _: &mut Mvcc| Placement::Column).unwrap();
    assert_eq!(planned.column_full, Some(false));
    assert!(planned.record.delta_items.is_empty());
}

#[test]
fn too_wide_row_is_an_error() {
    let s = Schema::new(vec![ColumnDesc::varlena(), ColumnDesc::varlena()]).unwrap();
    let g = Geometry::new(Params::default()).unwrap();
    let mut ext = Extent::new_at(&g, Some(EXTENT_START));
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
    let mut ext = Extent::new_at(&g, Some(EXTENT_START));
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
    let mut ext = Extent::new_at(&g, Some(EXTENT_START));
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
    let mut ext = Extent::new_at(&g, Some(EXTENT_START));
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
fn record_by_reference_rejects_corruption() {
    let s = schema();
    let g = Geometry::new(Params::default()).unwrap();
    let mut ext = Extent::new_at(&g, Some(EXTENT_START));
    for i in 0..40u64 {
        ext.insert(&s, Mvcc { xmin: 5, ..Mvcc::default() }, &random_row(&mut Rng::new(i), 50)).unwrap();
    }
    ext.compact(&s, &mut |_, _: &mut Mvcc| Placement::Column).unwrap();
    for i in 40..70u64 {
        ext.insert(&s, Mvcc { xmin: 6, ..Mvcc::default() }, &random_row(&mut Rng::new(i), 50)).unwrap();
    }
    let before = ext.clone();
    let planned = ext.compact_planned(&s, &mut |slot, _: &mut Mvcc| match slot % 3 {
        0 => Placement::Remove,
        1 => Placement::Stay,
        _ => Placement::Column,
    })
    .unwrap();
    let old_page = before.open(&s).unwrap();
    for compress in [false, true] {
        let bytes = planned.record.encode_by_reference(&planned.sources, &s, compress).unwrap();
        let DecodedRecord::ByReference(rr) = CompactionRecord::decode_any(&bytes).unwrap() else { panic!("format 4 decoded in full") };
        assert_eq!(rr.resolve(&old_page).unwrap(), planned.record);
        // Every truncation and every flipped bit: an error or some record,
        // never a panic; a resolved record still has to build.
        for cut in 0..bytes.len() {
            assert!(CompactionRecord::decode_any(&bytes[..cut]).is_err());
        }
        for bit in 0..bytes.len() * 8 {
            let mut b = bytes.clone();
            b[bit / 8] ^= 1 << (bit % 8);
            if let Ok(DecodedRecord::ByReference(r)) = CompactionRecord::decode_any(&b) {
                if let Ok(rec) = r.resolve(&old_page) {
                    let _ = apply(&g, &rec);
                }
            }
        }
    }
    // Sources that do not match the record are refused when encoding.
    let mut bad = planned.sources.clone();
    bad.column_rows.pop();
    assert!(matches!(planned.record.encode_by_reference(&bad, &s, false), Err(Error::BadInput(_))));
}

#[test]
fn record_rejects_corruption() {
    let s = schema();
    let g = Geometry::new(Params::default()).unwrap();
    let mut ext = Extent::new_at(&g, Some(EXTENT_START));
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
    r.dead.push(r.column_rows[0].header.slot);
    assert!(apply(&g, &r).is_err());
    let mut r = rec.clone();
    r.params.delta_blocks = 9;
    assert!(matches!(apply(&g, &r), Err(Error::BadParams(_))));
}

#[test]
fn corrupt_extents_give_errors_not_panics() {
    let s = schema();
    let g = Geometry::new(Params { column_blocks: 2, delta_blocks: 2, compact_trigger: 1, max_slots: 200 }).unwrap();
    let mut ext = Extent::new_at(&g, Some(EXTENT_START));
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
    let mut ext = Extent::new_at(&g, Some(EXTENT_START));
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

/// The chains of the page as hot.rs sees them, with the test's flags.
fn page_chains(ext: &Extent, s: &Schema) -> Chains {
    let page = ext.open(s).unwrap();
    let mut c = Chains::new();
    for v in page.scan().unwrap() {
        c.add_version(v.slot, link_of(&ext.geometry, &v.header.mvcc));
    }
    for slot in 0..page.header().slot_hwm {
        if let DirEntry::Redirect { slot: t } = page.entry(slot) {
            c.add_redirect(slot, t);
        }
    }
    c
}

/// One chain by hand: a removed middle member stays, a removed prefix
/// leaves a redirect (retargeted later), removed heap-only slots are free
/// at once, a whole dead chain leaves a Dead root for VACUUM.
#[test]
fn hot_chain_prefixes_redirects_and_reuse() {
    let s = schema();
    let g = Geometry::new(Params::default()).unwrap();
    let mut ext = Extent::new_at(&g, Some(EXTENT_START));
    let row = |v: u8| Row::new(vec![Some(vec![v; 4])]);
    let tid = |slot: u16| g.tid(EXTENT_START, slot).unwrap();
    let ver = |xmin: u32, flags: u16| Mvcc { xmin, infomask2: flags, ..Mvcc::default() };
    let removing = |set: Vec<u16>| {
        TestOracle::new(g, move |slot, _: &mut Mvcc| if set.contains(&slot) { Placement::Remove } else { Placement::Column })
    };
    let get = |ext: &Extent, slot: u16| ext.open(&s).unwrap().get(slot).unwrap();

    // a (xmin 10) -HOT-> b (11) -HOT-> c (12); x unrelated.
    let a = ext.insert(&s, ver(10, 0), &row(1)).unwrap();
    let x = ext.insert(&s, ver(20, 0), &row(9)).unwrap();
    let b = ext.insert(&s, ver(11, HEAP_ONLY), &row(2)).unwrap();
    ext.set_mvcc(a, &Mvcc { xmax: 11, ctid: tid(b), ..ver(10, HOT_UPDATED) }).unwrap();
    let c = ext.insert(&s, ver(12, HEAP_ONLY), &row(3)).unwrap();
    ext.set_mvcc(b, &Mvcc { xmax: 12, ctid: tid(c), ..ver(11, HEAP_ONLY | HOT_UPDATED) }).unwrap();
    assert_eq!((a, x, b, c), (0, 1, 2, 3));
    assert_eq!(page_chains(&ext, &s).walk(a), vec![a, b, c]);

    // The oracle would remove b, but a stays: b must stay too.
    let mut o = removing(vec![b]);
    let rec = ext.compact(&s, &mut o).unwrap();
    assert!(rec.dead.is_empty() && rec.unused.is_empty() && rec.redirects.is_empty(), "{rec:?}");
    assert_eq!(o.linked.len(), 4);
    assert_eq!(page_chains(&ext, &s).walk(a), vec![a, b, c]);

    // a and b go: a redirects to c, b is free at once.
    let before = ext.clone();
    let rec = ext.compact(&s, &mut removing(vec![a, b])).unwrap();
    assert_eq!((rec.dead.clone(), rec.unused.clone(), rec.redirects.clone()), (vec![], vec![b], vec![(a, c)]));
    assert_eq!(get(&ext, a), SlotContent::Redirect(c));
    assert_eq!(get(&ext, b), SlotContent::Unused);
    assert_eq!(page_chains(&ext, &s).walk(a), vec![c]);
    assert_eq!(page_chains(&ext, &s).roots().get(&c), Some(&a), "index entries of a still lead to the row");
    for compress in [false, true] {
        let mut redo = before.clone();
        redo.apply(&CompactionRecord::decode(&rec.encode(compress).unwrap()).unwrap()).unwrap();
        assert!(redo == ext);
    }
    // A redirect is neither a version nor dead.
    assert!(ext.set_mvcc(a, &Mvcc::default()).is_err());
    assert!(ext.set_unused(&[a]).is_err());
    // b's slot is the lowest free one: the next insert takes it.
    assert_eq!(ext.insert(&s, ver(30, 0), &row(4)).unwrap(), b);

    // c -HOT-> e, then c goes: the redirect is retargeted.
    let e = ext.insert(&s, ver(13, HEAP_ONLY), &row(5)).unwrap();
    ext.set_mvcc(c, &Mvcc { xmax: 13, ctid: tid(e), ..ver(12, HEAP_ONLY | HOT_UPDATED) }).unwrap();
    assert_eq!(page_chains(&ext, &s).walk(a), vec![c, e]);
    let rec = ext.compact(&s, &mut removing(vec![c])).unwrap();
    assert_eq!((rec.dead.clone(), rec.unused.clone(), rec.redirects.clone()), (vec![], vec![c], vec![(a, e)]));
    assert_eq!(get(&ext, a), SlotContent::Redirect(e));

    // e is deleted and goes: the whole chain is gone, a is Dead.
    ext.set_mvcc(e, &Mvcc { xmax: 14, ..ver(13, HEAP_ONLY) }).unwrap();
    let rec = ext.compact(&s, &mut removing(vec![e])).unwrap();
    assert_eq!((rec.dead.clone(), rec.unused.clone(), rec.redirects.clone()), (vec![a], vec![e], vec![]));
    assert_eq!(get(&ext, a), SlotContent::Dead);
    assert_eq!(get(&ext, e), SlotContent::Unused);
    assert!(page_chains(&ext, &s).walk(a).is_empty());
    ext.set_unused(&[a]).unwrap();
    assert_eq!(ext.insert(&s, ver(40, 0), &row(6)).unwrap(), a);
    let live: Vec<u16> = ext.open(&s).unwrap().scan().unwrap().iter().map(|v| v.slot).collect();
    assert_eq!(live, vec![a, x, b]);
}

/// A format-1 record (before HOT: only the dead slots) still decodes and
/// replays. It is a format-2 record with empty HOT lists, minus those two
/// zero counts at the end of the body.
#[test]
fn format_1_records_still_replay() {
    let s = schema();
    let g = Geometry::new(Params::default()).unwrap();
    let mut ext = Extent::new_at(&g, Some(EXTENT_START));
    for i in 0..60u64 {
        ext.insert(&s, Mvcc { xmin: 5, ..Mvcc::default() }, &random_row(&mut Rng::new(i), 50)).unwrap();
    }
    for slot in (0..60).step_by(4) {
        ext.set_mvcc(slot, &Mvcc { xmin: 5, xmax: 6, ..Mvcc::default() }).unwrap();
    }
    let before = ext.clone();
    let rec = ext
        .compact(&s, &mut |slot, m: &mut Mvcc| match () {
            _ if m.xmax != 0 => Placement::Remove,
            _ if slot % 3 == 0 => Placement::Stay,
            _ => Placement::Column,
        })
        .unwrap();
    assert_eq!(rec.dead.len(), 15);
    assert!(rec.unused.is_empty() && rec.redirects.is_empty());

    let v2 = rec.encode_format_2(false).unwrap();
    assert_eq!((v2[4], v2[5]), (2, 0));
    let body = &v2[32..];
    assert_eq!(&body[body.len() - 4..], &[0u8; 4], "empty unused and redirect lists");
    let make = |format: u8, body: &[u8], compress: bool| {
        let mut header = v2[..32].to_vec();
        header[4] = format;
        reframe(&header, body, compress)
    };
    let v1_body = &body[..body.len() - 4];
    assert_eq!(make(2, body, false), v2);
    for compress in [false, true] {
        let v1 = make(1, v1_body, compress);
        let back = CompactionRecord::decode(&v1).unwrap();
        assert_eq!(back, rec);
        let mut redo = before.clone();
        redo.apply(&back).unwrap();
        assert!(redo == ext, "format-1 redo differs from the primary");
        // Re-encoding writes the current format.
        let v3 = back.encode(false).unwrap();
        assert_eq!(v3[4], RECORD_FORMAT);
        assert_eq!(v3, rec.encode(false).unwrap());
        assert_eq!(back.encode_format_2(false).unwrap(), v2);
        // Format 1 with the HOT lists, or format 2 without them, is corrupt.
        assert!(matches!(CompactionRecord::decode(&make(1, body, compress)), Err(Error::Corrupt(_))));
        assert!(matches!(CompactionRecord::decode(&make(2, v1_body, compress)), Err(Error::Corrupt(_))));
    }
}

// ---------------------------------------------------------------------------
// Compaction record format 3 (column-wise): roundtrips, old formats, size,
// corruption.

/// pgbench_accounts as the glue describes it: aid, bid, abalance (int4),
/// filler char(84). The glue stores bpchar as a varlena with its 1-byte
/// header; `fixed_filler` makes it an 84-byte fixed column instead.
fn accounts_schema(fixed_filler: bool) -> Schema {
    let int4 = ColumnDesc::fixed(4, MinMaxOrder::SignedInt);
    let filler = if fixed_filler { ColumnDesc::fixed(84, MinMaxOrder::None) } else { ColumnDesc::varlena() };
    Schema::new(vec![int4, int4, int4, filler]).unwrap()
}

/// Every kind of column the record stores differently: integers of each
/// width (differences), floats and short byte strings (byte planes), a
/// fixed column wider than the planes limit, varlena.
fn all_kinds_schema() -> Schema {
    Schema::new(vec![
        ColumnDesc::fixed(1, MinMaxOrder::SignedInt),
        ColumnDesc::fixed(2, MinMaxOrder::UnsignedInt),
        ColumnDesc::fixed(8, MinMaxOrder::SignedInt),
        ColumnDesc::fixed(8, MinMaxOrder::Float),
        ColumnDesc::fixed(16, MinMaxOrder::Bytes),
        ColumnDesc::fixed(17, MinMaxOrder::None),
        ColumnDesc::fixed(3, MinMaxOrder::None),
        ColumnDesc::varlena(),
    ])
    .unwrap()
}

/// A bpchar(84) of `prefix` and blanks, as the glue stores it (1-byte
/// varlena header, then the characters) or as a fixed value.
fn filler(prefix: &[u8], fixed: bool) -> Vec<u8> {
    let mut v = if fixed { Vec::new() } else { vec![((84 + 1) << 1) | 1] };
    v.extend_from_slice(prefix);
    v.resize(v.len() + 84 - prefix.len(), b' ');
    v
}

/// How a random record fills a column, chosen per column and record.
#[derive(Clone, Copy, Debug)]
enum ValueShape {
    /// Counts up with the row (a key), with some gaps.
    Sequential,
    /// One value in most rows.
    MostlyEqual,
    /// Small numbers, or short strings.
    Small,
    /// Any bytes.
    Random,
}

fn random_value(rng: &mut Rng, d: &ColumnDesc, shape: ValueShape, row: usize, fixed_filler_84: bool) -> Vec<u8> {
    match d.width {
        Width::Fixed(84) if d.order == MinMaxOrder::None && fixed_filler_84 => {
            let prefix: Vec<u8> = (0..rng.below(4)).map(|_| b'a' + rng.below(26) as u8).collect();
            filler(&prefix, true)
        }
        Width::Fixed(n) => {
            let n = n as usize;
            let word: u64 = match shape {
                ValueShape::Sequential => 1_000 + row as u64 + rng.below(2),
                ValueShape::MostlyEqual if rng.below(10) != 0 => 7,
                ValueShape::Small => rng.below(2000).wrapping_sub(1000),
                _ => rng.next(),
            };
            let mut v: Vec<u8> = word.to_le_bytes().iter().copied().cycle().take(n).collect();
            if n > 8 && matches!(shape, ValueShape::Random) {
                v.iter_mut().for_each(|b| *b = rng.next() as u8);
            }
            v
        }
        Width::Varlena => match shape {
            ValueShape::Random => (0..rng.below(300)).map(|_| rng.next() as u8).collect(),
            ValueShape::Small => (0..rng.below(5)).map(|_| rng.next() as u8).collect(),
            _ => {
                let prefix: Vec<u8> = (0..rng.below(4)).map(|_| b'a' + rng.below(26) as u8).collect();
                filler(&prefix, false)
            }
        },
    }
}

/// Random MVCC fields with the shapes pages have: one loader xid or later
/// ones close together, hint bits, ctid = own TID unless updated; now and
/// then anything at all.
fn random_mvcc(rng: &mut Rng, slot: u16, natts: u16) -> Mvcc {
    if rng.below(20) == 0 {
        return Mvcc {
            xmin: rng.next() as u32,
            xmax: rng.next() as u32,
            cid: rng.next() as u32,
            ctid: Tid::new(rng.next() as u32, rng.next() as u16),
            infomask: rng.next() as u16,
            infomask2: rng.next() as u16,
        };
    }
    let updated = rng.below(4) == 0;
    let own = Tid::new(EXTENT_START + (slot / MAX_OFFSET) as u32, slot % MAX_OFFSET + 1);
    let xmin = if rng.below(3) == 0 { 1000 } else { 5000 + rng.below(3000) as u32 };
    Mvcc {
        xmin,
        xmax: if updated { xmin + 1 + rng.below(50) as u32 } else { 0 },
        cid: rng.below(3) as u32,
        ctid: if updated { Tid::new(EXTENT_START + rng.below(20) as u32, 1 + rng.below(MAX_OFFSET as u64) as u16) } else { own },
        infomask: if updated { 0x0102 } else { 0x0902 },
        infomask2: natts | if rng.below(3) == 0 { HEAP_ONLY } else { 0 } | if updated { HOT_UPDATED } else { 0 },
    }
}

fn random_slot_list(rng: &mut Rng) -> Vec<u16> {
    let mut v: Vec<u16> = (0..rng.below(12)).map(|_| rng.below(4070) as u16).collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// A random record over `s`: column rows in slot order with random natts,
/// NULLs and value shapes, delta items whose payloads may have more
/// columns than the record's column descriptions, HOT lists. Not
/// necessarily one `apply` accepts: encode and decode do not care.
fn random_record(seed: u64, s: &Schema) -> CompactionRecord {
    let mut rng = Rng::new(seed);
    let shapes: Vec<ValueShape> = s
        .columns
        .iter()
        .map(|_| match rng.below(4) {
            0 => ValueShape::Sequential,
            1 => ValueShape::MostlyEqual,
            2 => ValueShape::Small,
            _ => ValueShape::Random,
        })
        .collect();
    let fixed_84 = rng.below(2) == 0;
    let random_row = |rng: &mut Rng, row: usize| {
        let natts = if rng.below(8) == 0 { rng.below(s.len() as u64 + 1) as usize } else { s.len() };
        let values = (0..natts)
            .map(|c| (rng.below(10) != 0).then(|| random_value(rng, &s.columns[c], shapes[c], row, fixed_84)))
            .collect();
        Row { values }
    };
    let nrows = match rng.below(8) {
        0 => 0,
        1 => 1 + rng.below(3) as usize,
        _ => rng.below(600) as usize,
    };
    let mut column_rows = Vec::with_capacity(nrows);
    let mut slot = rng.below(3) as u16;
    for i in 0..nrows {
        let row = random_row(&mut rng, i);
        let natts = row.values.len() as u16;
        column_rows.push(ColumnRow { header: RowHeader { slot, natts, mvcc: random_mvcc(&mut rng, slot, natts) }, row });
        slot += 1 + if rng.below(5) == 0 { rng.below(4) as u16 } else { 0 };
    }
    let mut delta_items = Vec::new();
    // Sometimes payloads all of one length (what format 3 stores as byte
    // planes); they are opaque to the record, so any bytes do.
    let uniform = (rng.below(3) == 0).then(|| rng.below(120) as usize);
    for i in 0..rng.below(250) as usize {
        let row = random_row(&mut rng, i);
        let natts = row.values.len() as u16;
        let slot = if rng.below(10) == 0 { rng.next() as u16 } else { 3000 + i as u16 };
        let header = RowHeader { slot, natts, mvcc: random_mvcc(&mut rng, slot, natts) };
        let payload = match uniform {
            Some(len) => (0..len).map(|k| if k % 5 == 0 { rng.next() as u8 } else { k as u8 }).collect(),
            None => row::encode_payload(s, &row).unwrap(),
        };
        delta_items.push(delta::encode_item(&header, &payload).unwrap());
    }
    let ncols = column_rows.iter().map(|r| r.row.values.len()).max().unwrap_or(0);
    let mut redirects: Vec<(u16, u16)> = random_slot_list(&mut rng).into_iter().map(|r| (r, rng.below(4070) as u16)).collect();
    redirects.dedup_by_key(|r| r.0);
    CompactionRecord {
        params: Params::default(),
        old_version: rng.next() as u32 >> 1,
        new_version: 0,
        columns: s.columns[..ncols].to_vec(),
        column_rows,
        delta_items,
        dead: random_slot_list(&mut rng),
        unused: random_slot_list(&mut rng),
        redirects,
        slot_hwm: if rng.below(3) == 0 { 1 + rng.below(4070) as u16 } else { 0 },
    }
    .with_next_version()
}

impl CompactionRecord {
    fn with_next_version(mut self) -> Self {
        self.new_version = self.old_version + 1;
        self
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    /// Random records come back equal from format 3, compressed or not,
    /// and from format 2 (what older primaries wrote).
    #[test]
    fn record_format_3_roundtrip(seed in any::<u64>(), kind in 0..3u8) {
        let s = match kind {
            0 => accounts_schema(false),
            1 => accounts_schema(true),
            _ => all_kinds_schema(),
        };
        let rec = random_record(seed, &s);
        for compress in [false, true] {
            let bytes = rec.encode(compress).unwrap();
            prop_assert_eq!(bytes[4], RECORD_FORMAT);
            prop_assert_eq!(&CompactionRecord::decode(&bytes).unwrap(), &rec);
            let old = rec.encode_format_2(compress).unwrap();
            prop_assert_eq!(old[4], RECORD_FORMAT_ROWS);
            prop_assert_eq!(&CompactionRecord::decode(&old).unwrap(), &rec);
        }
    }
}

/// Records at the edges: nothing at all, columns without rows, rows
/// without values, all NULL, integer extremes (differences wrap).
#[test]
fn record_format_3_edge_cases() {
    let s = all_kinds_schema();
    let base = CompactionRecord {
        params: Params::default(),
        old_version: 1,
        new_version: 2,
        columns: vec![],
        column_rows: vec![],
        delta_items: vec![],
        dead: vec![],
        unused: vec![],
        redirects: vec![],
        slot_hwm: 0,
    };
    let row = |slot: u16, values: Vec<Option<Vec<u8>>>| ColumnRow {
        header: RowHeader { slot, natts: values.len() as u16, mvcc: Mvcc { xmin: u32::MAX - slot as u32, ..Mvcc::default() } },
        row: Row { values },
    };
    let extremes = |c: &ColumnDesc, hi: bool| match c.width {
        Width::Fixed(n) => vec![if hi { 0xff } else { 0x00 }; n as usize],
        Width::Varlena => vec![0x80; if hi { 300 } else { 0 }],
    };
    let mut records = vec![base.clone(), CompactionRecord { columns: s.columns.clone(), ..base.clone() }];
    records.push(CompactionRecord { column_rows: vec![row(0, vec![]), row(4069, vec![])], ..base.clone() });
    records.push(CompactionRecord {
        columns: s.columns.clone(),
        column_rows: (0..9).map(|i| row(i * 500, vec![None; s.len()])).collect(),
        ..base.clone()
    });
    records.push(CompactionRecord {
        columns: s.columns.clone(),
        column_rows: (0..20u16)
            .map(|i| row(65535 - 20 + i, s.columns.iter().map(|c| Some(extremes(c, i % 3 == 1))).collect()))
            .collect(),
        delta_items: vec![delta::encode_item(&RowHeader { slot: 65535, ..RowHeader::default() }, &[]).unwrap()],
        ..base.clone()
    });
    for rec in records {
        for compress in [false, true] {
            assert_eq!(CompactionRecord::decode(&rec.encode(compress).unwrap()).unwrap(), rec);
            assert_eq!(CompactionRecord::decode(&rec.encode_format_2(compress).unwrap()).unwrap(), rec);
        }
    }
    // What format 2 refused to encode, format 3 refuses too.
    let mut bad = CompactionRecord { columns: s.columns.clone(), column_rows: vec![row(0, vec![Some(vec![1, 2])])], ..base.clone() };
    assert!(matches!(bad.encode(false), Err(Error::BadInput(_))));
    bad.column_rows[0].header.natts = 2;
    assert!(matches!(bad.encode(false), Err(Error::BadInput(_))));
    let bad = CompactionRecord { delta_items: vec![vec![0; 10]], ..base.clone() };
    assert!(matches!(bad.encode(false), Err(Error::BadInput(_))));
}

/// A pgbench_accounts page at compaction: `nrows` column rows with
/// sequential aids (a few gaps where versions went), bid mostly equal,
/// abalance mostly 0 and otherwise small, blank filler, the loader's xmin
/// and hint bits on most rows, ctid = own TID; then `nitems` delta items,
/// the new versions of random accounts (xids counting up, some of them
/// updated again and pointing at their successor).
fn accounts_record(nrows: usize, nitems: usize, fixed_filler: bool) -> CompactionRecord {
    let s = accounts_schema(fixed_filler);
    let mut rng = Rng::new(12345);
    let own = |slot: u16| Tid::new(EXTENT_START + (slot / MAX_OFFSET) as u32, slot % MAX_OFFSET + 1);
    let row = |aid: i32, abalance: i32| {
        Row::new(vec![
            Some(aid.to_le_bytes().to_vec()),
            Some((1 + (aid - 1) / 100_000).to_le_bytes().to_vec()),
            Some(abalance.to_le_bytes().to_vec()),
            Some(filler(b"", fixed_filler)),
        ])
    };
    let mut column_rows = Vec::new();
    let mut gaps = Vec::new();
    let mut slot = 0u16;
    let mut next_xid = 20_000u32;
    while column_rows.len() < nrows {
        let aid = 1_300_001 + slot as i32;
        let updated = rng.below(6) == 0;
        let (xmin, infomask, infomask2, abalance) = match updated {
            false => (733, 0x0902, 4, 0),
            true => {
                next_xid += 1 + rng.below(4) as u32;
                (next_xid, 0x2902, 4 | HEAP_ONLY, rng.below(10_001) as i32 - 5000)
            }
        };
        let mvcc = Mvcc { xmin, xmax: 0, cid: 0, ctid: own(slot), infomask, infomask2 };
        column_rows.push(ColumnRow { header: RowHeader { slot, natts: 4, mvcc }, row: row(aid, abalance) });
        slot += 1;
        if rng.below(30) == 0 {
            // A removed heap-only version's slot.
            gaps.push(slot);
            slot += 1;
        }
    }
    let mut delta_items = Vec::new();
    let mut xid = 90_000u32;
    for i in 0..nitems {
        let slot = slot + i as u16;
        xid += 1 + rng.below(3) as u32;
        let updated_again = rng.below(5) == 0;
        let mvcc = Mvcc {
            xmin: xid,
            xmax: if updated_again { xid + 7 + rng.below(40) as u32 } else { 0 },
            cid: 0,
            ctid: if updated_again { own(slot + 1 + rng.below(30) as u16) } else { own(slot) },
            infomask: if updated_again { 0x2102 } else { 0x2802 },
            infomask2: 4 | HEAP_ONLY | if updated_again { HOT_UPDATED } else { 0 },
        };
        let r = row(1 + rng.below(10_000_000) as i32, rng.below(100_001) as i32 - 50_000);
        let header = RowHeader { slot, natts: 4, mvcc };
        delta_items.push(delta::encode_item(&header, &row::encode_payload(&s, &r).unwrap()).unwrap());
    }
    CompactionRecord {
        params: Params::default(),
        old_version: 41,
        new_version: 42,
        columns: s.columns.clone(),
        column_rows,
        delta_items,
        dead: vec![],
        unused: gaps,
        redirects: vec![],
        slot_hwm: 0,
    }
}

/// Format 3 is what makes compaction records small: under pgbench they
/// were about 19 KB each (LZ4) in format 2. Run with --nocapture to read
/// the sizes.
#[test]
fn record_format_3_is_smaller_on_pgbench_pages() {
    let g = Geometry::new(Params::default()).unwrap();
    for (name, nrows, nitems, fixed) in [
        ("900 column rows", 900, 0, false),
        ("900 column rows, fixed char(84)", 900, 0, true),
        ("400 delta items", 0, 400, false),
        ("600 column rows + 400 delta items", 600, 400, false),
    ] {
        let rec = accounts_record(nrows, nitems, fixed);
        // A record apply accepts: the page is a real one.
        apply(&g, &rec).unwrap();
        let v2 = rec.encode_format_2(true).unwrap();
        let v3 = rec.encode(true).unwrap();
        let raw = rec.encode(false).unwrap().len();
        eprintln!(
            "compaction record, {name}: format 2 {} bytes, format 3 {} bytes ({:.1}%; uncompressed {raw})",
            v2.len(),
            v3.len(),
            100.0 * v3.len() as f64 / v2.len() as f64
        );
        assert_eq!(CompactionRecord::decode(&v3).unwrap(), rec);
        assert!(v3.len() * 10 < v2.len() * 7, "{name}: format 3 ({}) not 30% smaller than format 2 ({})", v3.len(), v2.len());
    }
}

/// Rewraps `body` in `template`'s header with the lengths and compression
/// flag fixed up, so a damaged body reaches the body decoder.
fn reframe(template: &[u8], body: &[u8], compress: bool) -> Vec<u8> {
    use super::layout::wr32;
    let mut out = template[..32].to_vec();
    let stored = if compress { lz4_flex::block::compress(body) } else { body.to_vec() };
    out[5] = compress as u8;
    wr32(&mut out, 24, body.len() as u32);
    wr32(&mut out, 28, stored.len() as u32);
    out.extend_from_slice(&stored);
    out
}

/// Truncated or bit-flipped format-3 records give `Error::Corrupt` or a
/// record (which then applies or fails cleanly); never a panic.
#[test]
fn record_format_3_rejects_truncation_and_survives_bit_flips() {
    let g = Geometry::new(Params::default()).unwrap();
    let mut records = vec![accounts_record(40, 15, false)];
    for s in [accounts_schema(false), all_kinds_schema(), accounts_schema(true)] {
        // A record with something in every part, small enough to damage
        // at every byte.
        records.push((0u64..)
            .map(|seed| {
                let mut rec = random_record(seed, &s);
                rec.column_rows.truncate(60);
                rec.delta_items.truncate(15);
                rec.columns = s.columns.clone();
                rec
            })
            .find(|r| {
                r.column_rows.len() > 20
                    && r.column_rows.iter().any(|cr| cr.row.values.contains(&None))
                    && !r.delta_items.is_empty()
                    && !r.dead.is_empty()
                    && !r.redirects.is_empty()
            })
            .unwrap());
    }
    for rec in records {
        let plain = rec.encode(false).unwrap();
        assert_eq!(plain[5], 0);
        let body = &plain[32..];
        for compress in [false, true] {
            assert_eq!(CompactionRecord::decode(&reframe(&plain, body, compress)).unwrap(), rec);
            // Every proper prefix of the body runs out of bytes somewhere.
            for cut in 0..body.len() {
                let m = reframe(&plain, &body[..cut], compress);
                assert!(matches!(CompactionRecord::decode(&m), Err(Error::Corrupt(_))), "cut {cut}");
            }
            let whole = rec.encode(compress).unwrap();
            for cut in 0..whole.len() {
                assert!(CompactionRecord::decode(&whole[..cut]).is_err());
            }
        }
        // Bit flips anywhere in the body (lengths, counts, natts, bitmaps,
        // values) and in the compressed stream.
        let (mut corrupt, mut decoded) = (0, 0);
        for pos in 0..body.len() {
            for flip in [0x01u8, 0x80, 0x5a] {
                let mut b = body.to_vec();
                b[pos] ^= flip;
                match CompactionRecord::decode(&reframe(&plain, &b, false)) {
                    Ok(r) => {
                        decoded += 1;
                        let _ = apply(&g, &r);
                        let _ = r.encode(true);
                    }
                    Err(Error::Corrupt(_)) => corrupt += 1,
                    Err(e) => panic!("flip at {pos}: {e:?}"),
                }
            }
        }
        assert!(corrupt > 0 && decoded > 0, "{corrupt} {decoded}");
        let packed = rec.encode(true).unwrap();
        assert_eq!(packed[5], 1);
        for pos in 32..packed.len() {
            let mut m = packed.clone();
            m[pos] ^= 1 << (pos % 8);
            if let Ok(r) = CompactionRecord::decode(&m) {
                let _ = apply(&g, &r);
            }
        }
        // Lengths from the header that disagree with the body.
        for (off, v) in [(24usize, 0u32), (24, u32::MAX), (28, 0), (28, u32::MAX)] {
            let mut m = packed.clone();
            m[off..off + 4].copy_from_slice(&v.to_le_bytes());
            assert!(CompactionRecord::decode(&m).is_err());
        }
    }
}
