//! Key-bit tests and the elastic tree against a BTreeMap oracle.

use super::*;
use proptest::prelude::*;

proptest! {
    /// The nine-bit reading orders keys exactly as bytes_cmp does, and the
    /// discriminating bit is where they first differ, 0 in the smaller.
    #[test]
    fn disc_bit_agrees_with_bytes_cmp(a in proptest::collection::vec(prop_oneof![Just(0u8), Just(0xff), any::<u8>()], 0..20), b in proptest::collection::vec(prop_oneof![Just(0u8), Just(0xff), any::<u8>()], 0..20), share in 0usize..20) {
        let mut b = b;
        let s = share.min(a.len());
        b.splice(0..0, a[..s].iter().copied());
        let d = disc_bit(&a, &b);
        prop_assert_eq!(d, disc_bit(&b, &a));
        match bytes_cmp(&a, &b) {
            Ordering::Equal => prop_assert_eq!(d, DUP),
            o => {
                prop_assert!(d != DUP);
                for p in 0..d { prop_assert_eq!(key_bit(&a, p), key_bit(&b, p)); }
                let (lo, hi) = if o == Ordering::Less { (&a, &b) } else { (&b, &a) };
                prop_assert_eq!(key_bit(lo, d), 0);
                prop_assert_eq!(key_bit(hi, d), 1);
            }
        }
    }
}

// ---------------------------------------------------------------------------
// The elastic tree against a BTreeSet oracle.

use super::tree::*;
use std::collections::{BTreeMap, BTreeSet};
use std::ops::{Bound, RangeBounds};

/// The "heap": TID -> key; pruned TIDs answer None. Counts fetches.
#[derive(Default)]
pub(super) struct Heap {
    pub(super) keys: BTreeMap<Tid, Vec<u8>>,
    pub(super) pruned: BTreeSet<Tid>,
    pub(super) fetches: usize,
}

impl KeyFetcher for Heap {
    fn fetch(&mut self, tid: Tid, out: &mut Vec<u8>) -> bool {
        self.fetches += 1;
        out.clear();
        if self.pruned.contains(&tid) {
            return false;
        }
        match self.keys.get(&tid) {
            Some(k) => {
                out.extend_from_slice(k);
                true
            }
            None => false,
        }
    }
}

struct World {
    tree: ElasticTree<MemPool>,
    heap: Heap,
    oracle: BTreeSet<(Vec<u8>, Tid)>,
    next_tid: u64,
}

fn small_cfg(bound_pages: Option<u64>, body: usize) -> Config {
    Config {
        size_bound: bound_pages.map(|p| p * (body + PAGE_OVERHEAD) as u64),
        tree_level: 3,
        slack: 2,
        ..Config::default()
    }
}

impl World {
    fn new(body: usize, cfg: Config) -> World {
        World { tree: ElasticTree::create(MemPool::new(body), cfg).unwrap(), heap: Heap::default(), oracle: BTreeSet::new(), next_tid: 1 << 16 | 1 }
    }

    fn tid(&mut self) -> Tid {
        self.next_tid += 1;
        let t = Tid::from_u64(self.next_tid);
        if t.offset == 0 { self.tid() } else { t }
    }

    fn insert_keys(&mut self, keys: Vec<Vec<u8>>) {
        let mut batch: Vec<(Vec<u8>, Tid)> = keys.into_iter().map(|k| (k, self.tid())).collect();
        batch.sort_by(|a, b| cmp_pair(&a.0, a.1, &b.0, b.1));
        for (k, t) in &batch {
            self.heap.keys.insert(*t, k.clone());
            self.oracle.insert((k.clone(), *t));
        }
        self.tree.insert_batch(&batch, &mut self.heap).unwrap();
    }

    fn delete_where(&mut self, mut pred: impl FnMut(&[u8], Tid) -> bool) -> u64 {
        let dead: BTreeSet<Tid> = self.oracle.iter().filter(|(k, t)| pred(k, *t)).map(|x| x.1).collect();
        self.oracle.retain(|(_, t)| !dead.contains(t));
        let n = self.tree.bulk_delete(&mut |t| dead.contains(&t), &mut self.heap).unwrap();
        for t in &dead {
            self.heap.keys.remove(t);
            self.heap.pruned.remove(t);
        }
        n
    }

    fn live(&self) -> Vec<(Vec<u8>, Tid)> {
        self.oracle.iter().filter(|x| !self.heap.pruned.contains(&x.1)).cloned().collect()
    }

    /// Everything the tree answers agrees with the oracle on live entries.
    fn check(&mut self, probes: &[Vec<u8>]) {
        let rep = self.tree.verify(&mut self.heap).unwrap();
        // Pruned entries may or may not still be there; live ones must.
        assert!(rep.entries as usize >= self.live().len() && rep.entries as usize <= self.oracle.len(), "{rep:?}");
        assert!(self.tree.pool.max_step_pages <= MAX_STEP_PAGES);
        let live = self.live();
        let pr = self.heap.pruned.clone();
        let strip = |v: Vec<ScanItem>| -> Vec<Tid> { v.into_iter().map(|i| i.tid).filter(|t| !pr.contains(t)).collect() };
        let all = strip(self.tree.scan(Bound::Unbounded, Bound::Unbounded, Direction::Forward, &mut self.heap).unwrap());
        assert_eq!(all, live.iter().map(|x| x.1).collect::<Vec<_>>());
        let mut back = strip(self.tree.scan(Bound::Unbounded, Bound::Unbounded, Direction::Backward, &mut self.heap).unwrap());
        back.reverse();
        assert_eq!(back, all);
        for (i, p) in probes.iter().enumerate() {
            let want: Vec<Tid> = live.iter().filter(|x| &x.0 == p).map(|x| x.1).collect();
            let got: Vec<Tid> = self.tree.lookup(p, &mut self.heap).unwrap().into_iter().filter(|t| !pr.contains(t)).collect();
            assert_eq!(got, want, "lookup {p:?}");
            let q = &probes[(i * 7 + 3) % probes.len()];
            let (a, b) = if p <= q { (p, q) } else { (q, p) };
            for (lo, hi) in [
                (Bound::Included(a.as_slice()), Bound::Included(b.as_slice())),
                (Bound::Excluded(a.as_slice()), Bound::Excluded(b.as_slice())),
                (Bound::Included(a.as_slice()), Bound::Unbounded),
                (Bound::Unbounded, Bound::Excluded(b.as_slice())),
            ] {
                let want: Vec<Tid> = live.iter().filter(|x| (lo, hi).contains(&x.0.as_slice())).map(|x| x.1).collect();
                let fwd = strip(self.tree.scan(lo, hi, Direction::Forward, &mut self.heap).unwrap());
                assert_eq!(fwd, want, "forward {lo:?}..{hi:?}");
                let mut bwd = strip(self.tree.scan(lo, hi, Direction::Backward, &mut self.heap).unwrap());
                bwd.reverse();
                assert_eq!(bwd, want, "backward {lo:?}..{hi:?}");
            }
        }
    }
}

fn rand_keys(seed: &mut u64, n: usize, f: impl Fn(u64) -> Vec<u8>) -> Vec<Vec<u8>> {
    (0..n)
        .map(|_| {
            *seed ^= *seed << 13;
            *seed ^= *seed >> 7;
            *seed ^= *seed << 17;
            f(*seed)
        })
        .collect()
}

fn int_key(x: u64) -> Vec<u8> {
    let mut k = vec![crate::keys::MARK_VALUE];
    k.extend_from_slice(&(x % 1_000_000).to_be_bytes());
    k
}

#[test]
fn grows_shrinks_and_reverts() {
    let body = 512;
    let mut w = World::new(body, small_cfg(Some(60), body));
    let mut seed = 0x9e3779b97f4a7c15;
    let probes = rand_keys(&mut seed.clone(), 40, int_key);
    let mut max_pages = 0;
    for round in 0..25 {
        let ks = rand_keys(&mut seed, 100, int_key);
        w.insert_keys(ks);
        max_pages = max_pages.max(w.tree.pool.pages_in_use());
        if round % 5 == 4 {
            w.check(&probes);
        }
    }
    let st = w.tree.stats();
    assert_eq!(w.tree.state(), State::Shrinking);
    assert!(st.compact_leaves > 0, "{st:?}");
    // 2500 keys in standard leaves need ~ 2500 / 18 = 140 pages; the
    // bound is 60 and all keys fit compact: the size stays within +10%.
    assert!(max_pages <= 66, "peak {max_pages} pages, {st:?}");
    w.check(&probes);
    // Delete 80% and vacuum: the index expands back.
    let mut n = 0u64;
    w.delete_where(|_, _| {
        n += 1;
        !n.is_multiple_of(5)
    });
    w.check(&probes);
    w.tree.expand_some(10_000, &mut w.heap).unwrap();
    w.delete_where(|_, _| false);
    let st = w.tree.stats();
    assert_eq!(st.compact_leaves, 0, "{st:?}");
    assert_eq!(w.tree.state(), State::Normal);
    w.check(&probes);
}

#[test]
fn duplicates_and_variable_length_keys() {
    let body = 384;
    let mut w = World::new(body, small_cfg(Some(12), body));
    let mut seed = 12345u64;
    let words = |x: u64| -> Vec<u8> {
        let len = (x % 7) as usize;
        (0..len).map(|i| b"ab\0\xff"[((x >> (4 + 2 * i)) % 4) as usize]).collect()
    };
    let probes = rand_keys(&mut seed.clone(), 30, words);
    for _ in 0..12 {
        let ks = rand_keys(&mut seed, 60, words);
        w.insert_keys(ks);
    }
    assert!(w.tree.stats().compact_leaves > 0);
    w.check(&probes);
    w.delete_where(|k, _| k.len() % 2 == 0);
    w.check(&probes);
}

#[test]
fn pruned_tuples_in_the_tree() {
    let body = 512;
    let mut w = World::new(body, small_cfg(Some(10), body));
    let mut seed = 777u64;
    let probes = rand_keys(&mut seed.clone(), 40, int_key);
    for _ in 0..6 {
        let ks = rand_keys(&mut seed, 100, int_key);
        w.insert_keys(ks);
    }
    assert!(w.tree.stats().compact_leaves > 0);
    // Prune a third of the heap without telling the index.
    let victims: Vec<Tid> = w.oracle.iter().map(|x| x.1).filter(|t| t.to_u64() % 3 == 0).collect();
    w.heap.pruned.extend(victims);
    w.check(&probes);
    // Inserts still land right, dropping dead entries they meet.
    for _ in 0..4 {
        let ks = rand_keys(&mut seed, 100, int_key);
        w.insert_keys(ks);
        w.check(&probes);
    }
    assert!(w.tree.stats().dead_dropped > 0);
    // VACUUM takes the rest.
    let pruned = w.heap.pruned.clone();
    w.delete_where(|_, t| pruned.contains(&t));
    w.check(&probes);
}

#[test]
fn compact_probe_costs_one_fetch() {
    let body = 2048;
    let mut w = World::new(body, Config { size_bound: Some(4 * (2048 + 56) as u64), ..Config::default() });
    let mut seed = 4242u64;
    for _ in 0..20 {
        let ks = rand_keys(&mut seed, 100, int_key);
        w.insert_keys(ks);
    }
    assert!(w.tree.stats().standard_leaves == 0 || w.tree.stats().compact_leaves > 0);
    let keys: Vec<Vec<u8>> = w.oracle.iter().map(|x| x.0.clone()).take(200).collect();
    let before = w.tree.stats().key_fetches;
    for k in &keys {
        assert!(!w.tree.lookup(k, &mut w.heap).unwrap().is_empty());
    }
    let per = (w.tree.stats().key_fetches - before) as f64 / keys.len() as f64;
    assert!(per <= 1.1, "{per} fetches per probe");
}

#[test]
fn corrupt_pages_give_errors() {
    let body = 512;
    let mut w = World::new(body, small_cfg(Some(10), body));
    let mut seed = 99u64;
    for _ in 0..5 {
        let ks = rand_keys(&mut seed, 80, int_key);
        w.insert_keys(ks);
    }
    let pages = w.tree.pool.pages_in_use() as u32;
    let mut rng = 1u64;
    // ELASTIC_FUZZ_TRIALS raises the count for long runs.
    let trials: u32 = std::env::var("ELASTIC_FUZZ_TRIALS").ok().and_then(|v| v.parse().ok()).unwrap_or(600);
    for trial in 0..trials {
        // Open a healthy copy, then corrupt it under the open tree, as a
        // torn or bit-flipped page would appear to a running backend.
        let mut t = ElasticTree::open(w.tree.pool.clone(), w.tree.meta_block(), *w.tree.config()).unwrap();
        let blk = trial % (pages + 2);
        if let Some(b) = t.pool.body_mut(blk) {
            for _ in 0..1 + trial % 6 {
                rng = rng.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                let pos = (rng >> 33) as usize % b.len().min(if trial % 2 == 0 { 64 } else { b.len() });
                b[pos] = (rng >> 20) as u8;
            }
        }
        if trial % 3 == 0 {
            // Links and levels live in the special area: scramble them too.
            rng = rng.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            if let Some(m) = t.pool.meta_mut((rng >> 40) as u32 % (pages + 1)) {
                match (rng >> 20) % 3 {
                    0 => m.right = (rng >> 8) as u32 % (pages + 1),
                    1 => m.left = (rng >> 8) as u32 % (pages + 1),
                    _ => m.level = (rng >> 8) as u8 % 4,
                }
            }
        }
        let _ = t.verify(&mut w.heap);
        let _ = t.scan(Bound::Unbounded, Bound::Unbounded, Direction::Forward, &mut w.heap);
        let _ = t.scan(Bound::Unbounded, Bound::Unbounded, Direction::Backward, &mut w.heap);
        let _ = t.lookup(&int_key(5), &mut w.heap);
        let ks = rand_keys(&mut seed, 30, int_key);
        let mut batch: Vec<(Vec<u8>, Tid)> = ks.into_iter().enumerate().map(|(i, k)| (k, Tid::new(900_000 + i as u32, 1))).collect();
        batch.sort();
        let _ = t.insert_batch(&batch, &mut w.heap);
        let _ = t.bulk_delete(&mut |x| x.block % 3 == 0, &mut w.heap);
    }
}

#[test]
fn bad_input_rejected() {
    let mut w = World::new(512, small_cfg(None, 512));
    let big = vec![7u8; 1000];
    assert!(matches!(w.tree.insert(&big, Tid::new(1, 1), &mut w.heap), Err(Error::KeyTooLong(_))));
    let unsorted = vec![(vec![2u8], Tid::new(1, 1)), (vec![1u8], Tid::new(1, 2))];
    assert!(matches!(w.tree.insert_batch(&unsorted, &mut w.heap), Err(Error::BadInput(_))));
    let bad = Config { shrink_pct: 50, expand_pct: 60, ..Config::default() };
    assert!(ElasticTree::create(MemPool::new(512), bad).is_err());
    let tiny = Config { size_bound: Some(100), ..Config::default() };
    assert!(ElasticTree::create(MemPool::new(512), tiny).is_err());
}

/// Parameters of one random elastic workload (see `run_workload`).
#[derive(Debug, Clone)]
struct Workload {
    ops: Vec<(u8, u64)>,
    bound: u64,
    short: bool,
    max_compact: usize,
    level: u8,
}

fn workload_strategy() -> impl Strategy<Value = Workload> {
    (proptest::collection::vec((0u8..11, any::<u64>()), 5..40), 8u64..40, any::<bool>(), prop_oneof![Just(0usize), 20usize..40], 0u8..5)
        .prop_map(|(ops, bound, short, max_compact, level)| Workload { ops, bound, short, max_compact, level })
}

/// Random insert / delete / prune workloads crossing the bound both ways,
/// checked against the oracle after every step; returns the elasticity
/// events the workload caused before the final shrink.
fn run_workload(wl: &Workload) -> std::result::Result<Events, TestCaseError> {
    let body = 400;
    let bound = wl.bound;
    let short = wl.short;
    let cfg = Config { max_compact: wl.max_compact, tree_level: wl.level, ..small_cfg(Some(bound), body) };
    let mut w = World::new(body, cfg);
    let keyf = move |x: u64| if short { vec![(x % 40) as u8, ((x >> 8) % 3) as u8] } else { int_key(x % 5000) };
    let probes: Vec<Vec<u8>> = (0..20u64).map(|i| keyf(i.wrapping_mul(0x9e3779b97f4a7c15))).collect();
    for &(op, seed) in &wl.ops {
        let mut s = seed | 1;
        match op {
            0..=5 => { let ks = rand_keys(&mut s, 1 + (seed % 120) as usize, keyf); w.insert_keys(ks); }
            6 | 7 => { let m = 2 + seed % 4; w.delete_where(|_, t| t.to_u64() % m == seed % m); }
            8 => { let victims: Vec<Tid> = w.oracle.iter().map(|x| x.1).filter(|t| (t.to_u64() ^ seed) % 11 == 0).collect(); w.heap.pruned.extend(victims); }
            _ if seed % 2 == 0 => { w.tree.expand_some(3, &mut w.heap).unwrap(); }
            _ => { w.tree.shrink_some(3, 50, &mut w.heap).unwrap(); }
        }
        w.check(&probes);
    }
    let events = w.tree.stats().events;
    // Shrink the data far below the bound: everything reverts.
    let mut n = 0u64;
    w.delete_where(|_, _| { n += 1; !n.is_multiple_of(10) });
    w.check(&probes);
    w.tree.expand_some(100_000, &mut w.heap).unwrap();
    w.delete_where(|_, _| false);
    // VACUUM's merges (inner pages too) may take the tree below the
    // expansion threshold only as it ends: expand once more.
    w.tree.expand_some(100_000, &mut w.heap).unwrap();
    w.check(&probes);
    // The tree expands only where every compact leaf reverted would stay
    // under the shrink threshold (update_state); where so, it has.
    let page = (body + PAGE_OVERHEAD) as u64;
    let expanded = w.tree.size_bytes() + w.tree.verify(&mut w.heap).unwrap().expansion_pages * page;
    if w.tree.size_bytes() < bound * page * cfg.expand_pct as u64 / 100 && expanded < bound * page * cfg.shrink_pct as u64 / 100 {
        prop_assert_eq!(w.tree.stats().compact_leaves, 0);
        prop_assert_eq!(w.tree.state(), State::Normal);
    }
    Ok(events)
}

/// Every elasticity path runs somewhere in a fixed set of random workloads.
/// The seed is fixed so the coverage claim does not depend on luck (a random
/// 24-case run once produced no expansion at all); the random property test
/// below keeps exploring new cases.
#[test]
fn workloads_exercise_every_path() {
    use proptest::test_runner::{Config as RunnerConfig, RngSeed, TestRunner};
    let mut runner = TestRunner::new(RunnerConfig { cases: 48, rng_seed: RngSeed::Fixed(0x0e1a_571c), failure_persistence: None, ..RunnerConfig::default() });
    let total = std::cell::RefCell::new(Events::default());
    runner
        .run(&workload_strategy(), |wl| {
            let e = run_workload(&wl)?;
            let mut t = total.borrow_mut();
            t.leaf_splits += e.leaf_splits;
            t.inner_splits += e.inner_splits;
            t.compactions += e.compactions;
            t.expansions += e.expansions;
            t.capacity_doublings += e.capacity_doublings;
            t.capacity_halvings += e.capacity_halvings;
            t.leaf_merges += e.leaf_merges;
            Ok(())
        })
        .unwrap();
    let e = total.into_inner();
    assert!(e.leaf_splits > 0 && e.inner_splits > 0 && e.compactions > 0 && e.expansions > 0, "{e:?}");
    assert!(e.capacity_doublings > 0 && e.capacity_halvings > 0 && e.leaf_merges > 0, "{e:?}");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// Random insert / delete / prune workloads crossing the bound both ways.
    #[test]
    fn random_workload_matches_oracle(wl in workload_strategy()) {
        run_workload(&wl)?;
    }
}

/// The benchmark's goal (b) at the core level, on real 8 KB bodies: under a
/// bound of 40% (int8) / 25% (32-byte text) of the unbounded tree's size,
/// every key stays indexed and the size stays within the bound + 10%.
#[test]
fn realistic_bounds_hold() {
    for (name, frac, keyf) in [
        ("int8", 0.40, int_key as fn(u64) -> Vec<u8>),
        ("text32", 0.25, (|x: u64| {
            let mut k = vec![crate::keys::MARK_VALUE];
            let mut y = x;
            for _ in 0..32 {
                k.push(b'a' + (y % 26) as u8);
                y = y.rotate_left(5).wrapping_mul(0x2545F4914F6CDD1D);
            }
            k
        }) as fn(u64) -> Vec<u8>),
    ] {
        let n_batches = 40;
        let mk = |seed: u64| {
            let mut s = seed;
            (0..n_batches).map(|_| rand_keys(&mut s, 800, |x| keyf(x.wrapping_mul(7)))).collect::<Vec<_>>()
        };
        let mut free = World::new(BODY_CAP, Config::default());
        for b in mk(5) {
            free.insert_keys(b);
        }
        let full_pages = free.tree.pool.pages_in_use();
        let bound_pages = (full_pages as f64 * frac) as u64;
        let mut w = World::new(BODY_CAP, Config { size_bound: Some(bound_pages * (BODY_CAP + PAGE_OVERHEAD) as u64), ..Config::default() });
        let mut peak = 0;
        for b in mk(5) {
            w.insert_keys(b);
            peak = peak.max(w.tree.pool.pages_in_use());
        }
        let st = w.tree.stats();
        let entries = w.tree.count_entries().unwrap();
        eprintln!("{name}: unbounded {full_pages} pages; bound {bound_pages}, peak {peak}; {st:?}; {:.1} B/entry", st.bytes as f64 / entries as f64);
        assert_eq!(entries as usize, w.oracle.len());
        assert!(peak as f64 <= bound_pages as f64 * 1.1, "{name}: peak {peak} pages over bound {bound_pages} + 10%");
        let probes: Vec<Vec<u8>> = w.oracle.iter().step_by(97).map(|x| x.0.clone()).collect();
        w.check(&probes);
    }
}

/// Probe cost in one leaf of 8136 bytes: standard binary search vs compact
/// blind search + one fetch (the fetch itself is a map lookup here).
/// `cargo test --release -p pg_hybrid_core elastic::tests::bench -- --ignored --nocapture`
#[test]
#[ignore]
fn bench_leaf_probes() {
    use std::time::Instant;
    let mut seed = 31337u64;
    let mut keys = rand_keys(&mut seed, 420, |x| int_key(x % 100_000_000));
    keys.sort();
    keys.dedup();
    let ents: Vec<(Vec<u8>, Tid)> = keys.iter().enumerate().map(|(i, k)| (k.clone(), Tid::new(i as u32, 1))).collect();
    let mut std_body = vec![0u8; BODY_CAP];
    slotted::build(&mut std_body, slotted::Kind::Leaf, ents.iter().map(|(k, t)| (k.as_slice(), *t, 0)), None).unwrap();
    let mut more = rand_keys(&mut seed, 1100, |x| int_key(x % 100_000_000));
    more.sort();
    more.dedup();
    let cents: Vec<(Vec<u8>, Tid)> = more.iter().enumerate().map(|(i, k)| (k.clone(), Tid::new(i as u32, 1))).collect();
    let mut c_body = vec![0u8; BODY_CAP];
    compact::write_from_keys(&mut c_body, cents.iter().map(|(k, t)| (k.as_slice(), *t)), compact::Shape { capacity: 1139, ..Default::default() }, None).unwrap();
    let v = slotted::SlotView::parse(&std_body, slotted::Kind::Leaf).unwrap();
    let cv = compact::CompactView::parse(&c_body).unwrap();
    let by_tid: Vec<Vec<u8>> = cents.iter().map(|x| x.0.clone()).collect();
    let mut fetch = |t: Tid, out: &mut Vec<u8>| {
        out.clear();
        out.extend_from_slice(&by_tid[t.block as usize]);
        true
    };
    let rounds = 200_000;
    let t0 = Instant::now();
    let mut acc = 0;
    for i in 0..rounds {
        acc += v.lower_bound(&Target::first(&keys[i % keys.len()])).unwrap();
    }
    let std_ns = t0.elapsed().as_nanos() as f64 / rounds as f64;
    let mut buf = Vec::new();
    let t0 = Instant::now();
    for i in 0..rounds {
        acc += cv.search(&Target::first(&more[i % more.len()]), &mut fetch, &mut buf).unwrap();
    }
    let c_ns = t0.elapsed().as_nanos() as f64 / rounds as f64;
    let miss: Vec<Vec<u8>> = rand_keys(&mut seed, 1000, |x| int_key(x % 100_000_000));
    let t0 = Instant::now();
    for i in 0..rounds {
        acc += cv.search(&Target::first(&miss[i % miss.len()]), &mut fetch, &mut buf).unwrap();
    }
    let cm_ns = t0.elapsed().as_nanos() as f64 / rounds as f64;
    eprintln!("standard leaf ({} entries, {} B used): {std_ns:.0} ns/probe", v.len(), v.used_bytes());
    eprintln!("compact leaf ({} entries, {} B used, narrow {}): {c_ns:.0} ns/probe hit, {cm_ns:.0} ns/probe miss ({acc})", cv.len(), cv.used_bytes(), cv.h.narrow);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// standard -> compact -> standard is the identity on live entries and
    /// drops exactly the pruned ones.
    #[test]
    fn conversions_round_trip(keys in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..12), 1..40), prune in proptest::collection::vec(any::<bool>(), 40), hk in any::<bool>()) {
        let mut ents: Vec<(Vec<u8>, Tid)> = keys.into_iter().enumerate().map(|(i, k)| (k, Tid::new(i as u32, 1))).collect();
        ents.sort_by(|a, b| cmp_pair(&a.0, a.1, &b.0, b.1));
        let high = if hk { Some((vec![0xffu8; 13], Tid::new(0, 1))) } else { None };
        let mut std_body = vec![0u8; 1024];
        slotted::build(&mut std_body, slotted::Kind::Leaf, ents.iter().map(|(k, t)| (k.as_slice(), *t, 0)), high.as_ref().map(|(k, t)| (k.as_slice(), *t))).unwrap();
        let mut c = vec![0u8; 1024];
        prop_assert!(standard_to_compact(&std_body, &mut c, ents.len() * 2, 4, 4).unwrap());
        let mut heap = Heap::default();
        for (i, (k, t)) in ents.iter().enumerate() {
            heap.keys.insert(*t, k.clone());
            if prune[i] { heap.pruned.insert(*t); }
        }
        let cv = compact::CompactView::parse(&c).unwrap();
        prop_assert_eq!(cv.verify_keys(&mut heap).unwrap(), heap.pruned.len());
        let mut back = vec![0u8; 1024];
        let dropped = compact_to_standard(&c, &mut back, &mut heap).unwrap().unwrap();
        prop_assert_eq!(dropped, heap.pruned.len());
        let v = slotted::SlotView::parse(&back, slotted::Kind::Leaf).unwrap();
        v.verify().unwrap();
        let got: Vec<(Vec<u8>, Tid)> = v.entries().unwrap().iter().map(|e| (e.key.to_vec(), e.tid)).collect();
        let want: Vec<(Vec<u8>, Tid)> = ents.iter().filter(|x| !heap.pruned.contains(&x.1)).cloned().collect();
        prop_assert_eq!(got, want);
        prop_assert_eq!(v.high_key().unwrap().map(|e| (e.key.to_vec(), e.tid)), high);
    }
}

/// A sorted load (CREATE INDEX through insert_batch, or ascending keys)
/// leaves pages ~90% full, as nbtree's rightmost splits do.
#[test]
fn sorted_load_fills_pages() {
    let mut w = World::new(BODY_CAP, Config::default());
    let keys: Vec<Vec<u8>> = (0..20_000u64).map(int_key).collect();
    for chunk in keys.chunks(5000) {
        w.insert_keys(chunk.to_vec());
    }
    let st = w.tree.stats();
    // 19 bytes per int8 entry: 428 per full page; 20000 / 428 = 47 pages.
    assert!(st.standard_leaves <= 47 * 100 / 88, "{st:?}");
    w.check(&[int_key(5), int_key(19_999), int_key(20_000)]);
    // The same ascending load under a bound that all keys fit in compact
    // form (20000 / (0.9 * 1139) = 20 leaves): leaves that were standard
    // when shrinking began get merged into compact pages by the shrink
    // pass, so the size stays within the bound + 10%.
    let bound = 24;
    let mut w = World::new(BODY_CAP, Config { size_bound: Some(bound * (BODY_CAP + PAGE_OVERHEAD) as u64), ..Config::default() });
    let mut peak = 0;
    for chunk in keys.chunks(500) {
        w.insert_keys(chunk.to_vec());
        peak = peak.max(w.tree.pool.pages_in_use());
    }
    let st = w.tree.stats();
    assert!(peak as f64 <= bound as f64 * 1.1, "peak {peak}: {st:?}");
    w.check(&[int_key(5), int_key(19_999)]);
    // Descending: the leftmost page splits 10/90, the mirror of the above.
    let mut w = World::new(BODY_CAP, Config { size_bound: Some(bound * (BODY_CAP + PAGE_OVERHEAD) as u64), ..Config::default() });
    let mut peak = 0;
    for chunk in keys.chunks(500).rev() {
        w.insert_keys(chunk.to_vec());
        peak = peak.max(w.tree.pool.pages_in_use());
    }
    let st = w.tree.stats();
    assert!(peak as f64 <= bound as f64 * 1.1, "descending peak {peak}: {st:?}");
    w.check(&[int_key(5), int_key(19_999)]);
}

/// Multi-column keys whose bits differ far apart (bool, interval, text,
/// int2) under the smallest bound: a bound the data can never fit must not
/// make inserts loop (found by the SQL tests: "insert makes no progress").
#[test]
fn unreachable_bound_with_wide_keys_progresses() {
    let key = |g: u64| {
        let mut k = vec![1u8, (g % 3 == 0) as u8];
        k.push(1);
        let hours = match g % 4 {
            0 => 24,
            1 => 24,
            2 => 720,
            _ => g % 100,
        };
        k.extend_from_slice(&(0x8000_0000_0000_0000u64 | hours * 3_600_000_000).to_be_bytes());
        k.extend_from_slice(&[0x80, 0, 0, 0, 0x80, 0, 0, 0]);
        k.push(1);
        let t = match g % 7 {
            0 => String::new(),
            1 => "a".into(),
            2 => "a b".into(),
            _ => format!("w{}", g * 7 % 1000),
        };
        k.extend_from_slice(t.as_bytes());
        k.push(0);
        k.push(1);
        k.extend_from_slice(&(((g % 3000) as i16 - 1500) as u16 ^ 0x8000).to_be_bytes());
        k
    };
    for (bound_pages, other) in [(4u64, 0), (8, 0), (4, 2), (4, 3)] {
        let cfg = Config { size_bound: Some(bound_pages * (BODY_CAP + PAGE_OVERHEAD) as u64), ..Config::default() };
        // `other` pages outside the tree count against the bound too (the
        // glue's metapage and delta log).
        let mut w = World::with_other_pages(cfg, other);
        w.insert_keys((1..=1000).map(key).collect());
        w.insert_keys((1001..=4000).map(key).collect());
        assert_eq!(w.tree.count_entries().unwrap() as usize, w.oracle.len());
        let probes: Vec<Vec<u8>> = w.oracle.iter().step_by(37).map(|x| x.0.clone()).collect();
        w.check(&probes);
    }
}

/// The same with the exact keys PostgreSQL encoded for (bool, interval,
/// text COLLATE "C", int2) rows (testdata/multicol_keys.txt: key hex, TID).
#[test]
fn unreachable_bound_real_keys_progresses() {
    let batch = keys_file(include_str!("testdata/multicol_keys.txt"));
    for other in [0u64, 2] {
        let cfg = Config { size_bound: Some(4 * (BODY_CAP + PAGE_OVERHEAD) as u64), ..Config::default() };
        let mut w = World::with_other_pages(cfg, other);
        for (k, t) in &batch {
            w.heap.keys.insert(*t, k.clone());
            w.oracle.insert((k.clone(), *t));
        }
        w.tree.insert_batch(&batch, &mut w.heap).unwrap();
        assert_eq!(w.tree.count_entries().unwrap() as usize, w.oracle.len());
    }
}

/// (int8, text) keys with a few 900-byte texts under a bound (found by the
/// SQL tests: "page body full" at CREATE INDEX, "insert makes no progress"
/// with low thresholds).
#[test]
fn long_keys_under_a_bound() {
    let key = |g: u64| {
        let mut k = vec![1u8];
        k.extend_from_slice(&((g % 1201) ^ (1 << 63)).to_be_bytes());
        k.push(1);
        if g % 50 == 1 {
            k.extend(std::iter::repeat_n(b'y', 900));
        } else {
            k.push(b'a');
        }
        k.extend_from_slice(&[0, 1]);
        k
    };
    for (bound_kb, shrink, expand) in [(256u64, 90u32, 75u32), (128, 90, 75), (64, 50, 31), (256, 50, 31)] {
        let cfg = Config { size_bound: Some(bound_kb * 1024), shrink_pct: shrink, expand_pct: expand, ..Config::default() };
        let mut w = World::with_other_pages(cfg, 2);
        let mut batch: Vec<(Vec<u8>, Tid)> = (1..=20000u64).map(|g| (key(g), Tid::new((g / 100) as u32 + 1, (g % 100) as u16 + 1))).collect();
        batch.sort_by(|a, b| cmp_pair(&a.0, a.1, &b.0, b.1));
        for (k, t) in &batch {
            w.heap.keys.insert(*t, k.clone());
            w.oracle.insert((k.clone(), *t));
        }
        for chunk in batch.chunks(4096) {
            w.tree.insert_batch(chunk, &mut w.heap).unwrap_or_else(|e| panic!("bound {bound_kb}kB {shrink}/{expand}: {e:?}"));
        }
        assert_eq!(w.tree.count_entries().unwrap() as usize, w.oracle.len());
    }
}

/// Short words mixed with 300- and 901-byte keys, in random batches (the
/// merge path) under a bound, then most deleted (expanding).
#[test]
fn long_and_short_keys_random_batches() {
    let mut rng = crate::test_rng::Rng(7);
    let mut next = move || rng.next();
    for bound_kb in [64u64, 256] {
        let cfg = Config { size_bound: Some(bound_kb * 1024), ..Config::default() };
        let mut w = World::new(BODY_CAP, cfg);
        for _ in 0..12 {
            let keys: Vec<Vec<u8>> = (0..1500)
                .map(|_| {
                    let r = next();
                    let len = match r % 40 { 0 => 300, 1 => 901, _ => (r >> 8) as usize % 21 };
                    let mut k = vec![1u8];
                    k.extend((0..len).map(|i| b'a' + ((r >> (i % 50)) % 26) as u8));
                    k.extend_from_slice(&[0, 1]);
                    k
                })
                .collect();
            w.insert_keys(keys);
        }
        assert_eq!(w.tree.count_entries().unwrap() as usize, w.oracle.len());
        let probes: Vec<Vec<u8>> = w.oracle.iter().step_by(53).map(|x| x.0.clone()).collect();
        w.check(&probes);
        w.delete_where(|_, t| t.offset % 5 != 0);
        assert_eq!(w.tree.count_entries().unwrap() as usize, w.oracle.len());
        w.check(&probes);
    }
}

/// (int8, text) keys of the differential test's seed 4 (NULLs, UTF-8, 300-
/// and 901-byte words) built under 64kB with thresholds 50/31 and 2 pages
/// outside the tree: "insert makes no progress".
#[test]
fn seed4_low_thresholds_progress() {
    let batch = keys_file(include_str!("testdata/seed4_keys.txt"));
    for (shrink, expand) in [(50u32, 31u32), (90, 75)] {
        let cfg = Config { size_bound: Some(64 * 1024), shrink_pct: shrink, expand_pct: expand, ..Config::default() };
        let mut w = World::with_other_pages(cfg, 2);
        for (k, t) in &batch {
            w.heap.keys.insert(*t, k.clone());
            w.oracle.insert((k.clone(), *t));
        }
        for chunk in batch.chunks(4096) {
            w.tree.insert_batch(chunk, &mut w.heap).unwrap_or_else(|e| panic!("{shrink}/{expand}: {e:?} {:?}", w.tree.stats()));
            w.tree.update_state().unwrap();
        }
        assert_eq!(w.tree.count_entries().unwrap() as usize, w.oracle.len());
    }
}

/// Lines of `key-hex block offset`, as dumped from PostgreSQL's encodings.
fn keys_file(text: &str) -> Vec<(Vec<u8>, Tid)> {
    text.lines()
        .map(|l| {
            let mut it = l.split(' ');
            let hex = it.next().unwrap();
            let key = (0..hex.len()).step_by(2).map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap()).collect();
            (key, Tid::new(it.next().unwrap().parse().unwrap(), it.next().unwrap().parse().unwrap()))
        })
        .collect()
}

impl World {
    /// A tree whose pool already holds `other` pages outside it (the glue's
    /// metapage and delta log count against the bound too).
    fn with_other_pages(cfg: Config, other: u64) -> World {
        let mut pool = MemPool::new(BODY_CAP);
        for _ in 0..other {
            pool.alloc().unwrap();
        }
        let mut w = World::new(BODY_CAP, cfg);
        w.tree = ElasticTree::create(pool, cfg).unwrap();
        w
    }
}

/// Separators are the shortest prefix that tells the halves of a split
/// apart: 2 kB keys that differ in their first 9 bytes leave inner pages
/// with 9-byte separators (whole keys left three children a page).
#[test]
fn long_keys_get_short_separators() {
    let mut w = World::new(BODY_CAP, Config::default());
    let keys: Vec<Vec<u8>> = (0..3000u64)
        .map(|i| {
            let mut k = vec![1u8];
            k.extend_from_slice(&(i * 7919 % 100003).to_be_bytes());
            k.push(1);
            k.extend(std::iter::repeat_n(b'q', (i as usize * 37) % 2600));
            k
        })
        .collect();
    w.insert_keys(keys);
    let s = w.tree.stats();
    assert!(s.leaves() > 900 && s.inner_pages <= 5 && s.height == 3, "{s:?}");
    let probes: Vec<Vec<u8>> = w.oracle.iter().step_by(97).map(|x| x.0.clone()).collect();
    w.check(&probes);
}

/// Churn of long keys over a fixed set of short ones (sqlsmith's updates
/// of an (int8, text) index): each round inserts 2000 keys of up to 2.6 kB,
/// a few with a 10-byte prefix in common, and VACUUM removes them again.
/// Inner pages merge, the root gives way to an only child, and a merge of
/// two leaves shortens their low bound, so the tree stays within a few
/// times the size of its live keys (leaves merge below a quarter full, as
/// designed: 152 pages at the start, 468 after, height 4). Before, it grew by ~70
/// pages a round, 24 levels after the second, and the merge worker hit
/// `tree too tall` (40 levels); without the shorter low bounds (and first keys still whole), 769.
#[test]
fn churn_with_long_keys_keeps_the_tree_small() {
    let mut rng = crate::test_rng::Rng(11);
    let mut next = move || rng.next();
    let short = |r: u64| {
        let mut k = vec![1u8];
        k.extend_from_slice(&(r % 100003).to_be_bytes());
        k.push(1);
        k.extend(format!("{r:032x}").bytes());
        k.extend_from_slice(&[0, 1]);
        k
    };
    let mut w = World::new(BODY_CAP, Config::default());
    let keys: Vec<Vec<u8>> = (0..20000).map(|_| short(next())).collect();
    w.insert_keys(keys);
    let base_pages = w.tree.pool.pages_in_use();
    for _ in 0..100 {
        let before = w.next_tid;
        let keys: Vec<Vec<u8>> = (0..2000)
            .map(|_| {
                let r = next();
                let mut k = short(r);
                k.truncate(10);
                k.extend(std::iter::repeat_n(b'q', (r >> 20) as usize % 2600));
                k
            })
            .collect();
        w.insert_keys(keys);
        w.delete_where(|_, t| t.to_u64() > before);
    }
    let s = w.tree.stats();
    assert!(s.height <= 6 && w.tree.pool.pages_in_use() <= 4 * base_pages, "{s:?}, {} pages, {base_pages} at the start", w.tree.pool.pages_in_use());
    assert!(s.events.inner_merges > 0, "{s:?}");
    let probes: Vec<Vec<u8>> = w.oracle.iter().step_by(211).map(|x| x.0.clone()).collect();
    w.check(&probes);
}



/// Long keys that share 1.5-2.5 kB prefixes, so their separators cannot be
/// truncated: 400 of them go in as one sorted batch (a merge) and VACUUM
/// takes them out again, 12 times, beside 5000 short keys. With whole keys
/// as the first entry of a split's right half, each inner page on the
/// right edge took one separator before it split again, every leaf split
/// reached the root, and the first batch ended in `tree too tall` (40
/// levels; the SQL form of this in sql/elastic.sql had 2604 pages for 5000
/// entries). Now the right half's first key is empty, and an inner page
/// with one child merges with its neighbour: height 7 after the first
/// batch, 8 and 527 pages at the end (the leaves the long keys left stay
/// only children where the separators above them stay long).
#[test]
fn long_shared_prefixes_keep_the_tree_low() {
    let mut w = World::new(BODY_CAP, Config::default());
    let key = |k: u64, t: &[u8]| {
        let mut v = vec![1u8];
        v.extend_from_slice(&(k ^ (1 << 63)).to_be_bytes());
        v.push(1);
        v.extend_from_slice(t);
        v.extend_from_slice(&[0, 1]);
        v
    };
    let keys: Vec<Vec<u8>> = (1..=5000u64).map(|g| key(g, format!("{:032x}", g * 2654435761).as_bytes())).collect();
    w.insert_keys(keys);
    for r in 0..12u64 {
        let before = w.next_tid;
        let keys: Vec<Vec<u8>> = (1..=400u64)
            .map(|g| {
                let mut t = vec![b'q'; 1500 + ((g * 37 + r) % 1000) as usize];
                t.extend(g.to_string().bytes());
                key(100000 + g % 40, &t)
            })
            .collect();
        w.insert_keys(keys);
        if r == 0 {
            // 400 keys of ~2 kB: about 140 leaves; inner pages hold two or
            // three separators each.
            assert!(w.tree.stats().height <= 7, "{:?}", w.tree.stats());
        }
        w.delete_where(|_, t| t.to_u64() > before);
    }
    let s = w.tree.stats();
    assert!(s.height <= 9 && w.tree.pool.pages_in_use() < 600, "{s:?}, {} pages", w.tree.pool.pages_in_use());
    let probes: Vec<Vec<u8>> = w.oracle.iter().step_by(97).map(|x| x.0.clone()).collect();
    w.check(&probes);
}
