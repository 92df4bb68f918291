//! The hash path against a BTreeSet oracle: random batches, colliding
//! hashes, byte-different equal keys, growth, long chains, crashes after
//! every step, concurrent readers, corruption.

use super::page::*;
use super::*;
use proptest::prelude::*;
use std::collections::{BTreeMap, BTreeSet};

// ---------------------------------------------------------------------------
// Helpers

/// FNV-1a over the ASCII-lowercased key: keys equal up to case have equal
/// hashes, as the glue's hash of a case-insensitive type would.
fn fnv(k: &[u8]) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for &b in k {
        h ^= b.to_ascii_lowercase() as u32;
        h = h.wrapping_mul(0x0100_0193);
    }
    h
}

#[derive(Clone, Copy, Debug)]
enum Mode {
    Full,
    /// Force collisions: hash = fnv % m.
    Mod(u32),
}

fn hash_of(mode: Mode, k: &[u8]) -> u32 {
    match mode {
        Mode::Full => fnv(k),
        Mode::Mod(m) => fnv(k) % m,
    }
}

type Oracle = BTreeSet<(u32, Vec<u8>, Tid)>;

use crate::test_rng::Rng;

/// Key number `id` in a case spelled by `case` bits; 1..~40 bytes.
fn key(id: u64, case: u64) -> Vec<u8> {
    let mut k = format!("key{id}").into_bytes();
    k.extend(std::iter::repeat_n(b'x', (id % 37) as usize));
    for (i, b) in k.iter_mut().enumerate() {
        if case >> (i % 64) & 1 == 1 {
            *b = b.to_ascii_uppercase();
        }
    }
    k
}

fn tid(x: u64) -> Tid {
    Tid::new((x / 97) as u32, (x % 97) as u16 + 1)
}

struct World {
    area: HashArea<MemPool>,
    oracle: Oracle,
    mode: Mode,
}

impl World {
    fn new(cap: usize, cfg: Config, mode: Mode) -> World {
        World { area: HashArea::create(MemPool::new(cap), cfg).unwrap(), oracle: Oracle::new(), mode }
    }

    fn entries<'a>(&self, items: &'a [(Vec<u8>, Tid)]) -> Vec<Entry<'a>> {
        items.iter().map(|(k, t)| Entry::new(hash_of(self.mode, k), k, *t)).collect()
    }

    fn insert(&mut self, items: &[(Vec<u8>, Tid)]) -> InsertReport {
        let ents = self.entries(items);
        let r = self.area.insert_batch(&ents).unwrap();
        for e in &ents {
            self.oracle.insert((e.hash, e.key.to_vec(), e.tid));
        }
        r
    }

    fn remove_dead(&mut self, dead: impl Fn(Tid) -> bool) -> u64 {
        let n = self.area.remove(&mut |t| dead(t)).unwrap();
        let before = self.oracle.len();
        self.oracle.retain(|(_, _, t)| !dead(*t));
        assert_eq!(n as usize, before - self.oracle.len());
        n
    }

    fn remove_entries(&mut self, items: &[(Vec<u8>, Tid)]) -> u64 {
        let ents = self.entries(items);
        let n = self.area.remove_entries(&ents).unwrap();
        let mut gone = 0;
        for e in &ents {
            if self.oracle.remove(&(e.hash, e.key.to_vec(), e.tid)) {
                gone += 1;
            }
        }
        assert_eq!(n, gone);
        n
    }

    fn check(&self, probes: usize) {
        check_area(&self.area, &self.oracle, self.mode, probes);
    }
}

fn contents(a: &HashArea<MemPool>) -> Oracle {
    let mut out = Oracle::new();
    a.for_each_entry(&mut |e| {
        assert!(out.insert((e.hash, e.key.to_vec(), e.tid)), "entry listed twice");
    })
    .unwrap();
    out
}

/// TIDs a lookup returns, sorted (a TID appears once per stored spelling
/// the callback accepts).
fn lookup_tids(a: &HashArea<MemPool>, mode: Mode, k: &[u8], ci: bool) -> Vec<Tid> {
    let mut out = Vec::new();
    let mut eq = |x: &[u8]| if ci { x.eq_ignore_ascii_case(k) } else { x == k };
    a.lookup(hash_of(mode, k), &mut eq, &mut out).unwrap();
    out.sort();
    out
}

fn expected_tids(o: &Oracle, mode: Mode, k: &[u8], ci: bool) -> Vec<Tid> {
    let h = hash_of(mode, k);
    let mut v: Vec<Tid> = o.iter().filter(|(hh, kk, _)| *hh == h && if ci { kk.eq_ignore_ascii_case(k) } else { kk == k }).map(|x| x.2).collect();
    v.sort();
    v
}

fn expected(o: &Oracle, mode: Mode, k: &[u8], ci: bool) -> BTreeSet<Tid> {
    expected_tids(o, mode, k, ci).into_iter().collect()
}

/// verify is clean, the contents are the oracle, the header counts agree,
/// and lookups (exact and case-insensitive) of up to `probes` stored keys
/// plus some absent ones match.
fn check_area(a: &HashArea<MemPool>, o: &Oracle, mode: Mode, probes: usize) {
    let r = a.verify();
    assert!(r.is_ok(), "verify: {:?}", &r.errors[..r.errors.len().min(5)]);
    assert_eq!(r.entries as usize, o.len());
    assert_eq!(contents(a), *o);
    let s = a.stats().unwrap();
    assert_eq!(s.entries as usize, o.len());
    assert_eq!(s.pages, r.pages);
    assert_eq!(s.overflow_pages, r.overflow_pages);
    assert_eq!(s.entry_bytes, r.bytes);
    assert!(a.pool.max_step_pages <= MAX_STEP_PAGES);
    let keys: BTreeSet<&Vec<u8>> = o.iter().map(|x| &x.1).collect();
    let step = (keys.len() / probes.max(1)).max(1);
    for k in keys.iter().step_by(step) {
        for ci in [false, true] {
            assert_eq!(lookup_tids(a, mode, k, ci), expected_tids(o, mode, k, ci), "lookup {:?} ci={ci}", String::from_utf8_lossy(k));
        }
    }
    for absent in [&b"no such key"[..], b"KEY", b"k"] {
        assert_eq!(lookup_tids(a, mode, absent, true), expected_tids(o, mode, absent, true));
    }
}

fn batch(rng: &mut Rng, n: usize, ids: u64, tids: u64) -> Vec<(Vec<u8>, Tid)> {
    (0..n).map(|_| (key(rng.below(ids), rng.next()), tid(rng.below(tids)))).collect()
}

// ---------------------------------------------------------------------------
// Basics

#[test]
fn empty_table() {
    let w = World::new(BODY_CAP, Config::default(), Mode::Full);
    assert_eq!(w.area.header_block(), 0);
    w.check(10);
    let s = w.area.stats().unwrap();
    assert_eq!((s.buckets, s.entries, s.pages, s.directory_pages, s.overflow_pages), (2, 0, 4, 1, 0));
    assert_eq!(s.fill_target, (BODY_CAP * 75 / 100) as u32);
    assert_eq!(w.area.reachable_blocks().unwrap(), vec![0, 1, 2, 3]);
    let h = w.area.header().unwrap();
    assert_eq!((h.lowmask, h.highmask, h.maxbucket), (1, 3, 1));
    for n in [1u32, 4, 64] {
        let w = World::new(256, Config { initial_buckets: n, ..Config::default() }, Mode::Full);
        let h = w.area.header().unwrap();
        assert_eq!((h.lowmask, h.highmask, h.maxbucket), (n - 1, 2 * n - 1, n - 1));
        w.check(1);
    }
}

#[test]
fn insert_is_idempotent_and_dedups() {
    let mut w = World::new(512, Config::default(), Mode::Full);
    let mut rng = Rng(7);
    let items = batch(&mut rng, 300, 100, 1000);
    let distinct: BTreeSet<_> = items.iter().cloned().collect();
    let r = w.insert(&items);
    assert_eq!(r.inserted as usize, distinct.len());
    assert_eq!((r.inserted + r.present) as usize, items.len());
    w.check(100);
    let steps = w.area.pool.steps;
    let r = w.insert(&items);
    assert_eq!((r.inserted, r.present, r.splits), (0, items.len() as u64, 0));
    assert_eq!(w.area.pool.steps, steps, "a batch of present entries writes nothing");
    // Reversed order, mixed with new entries.
    let mut more = batch(&mut rng, 200, 150, 1000);
    more.extend(items.iter().rev().cloned());
    w.insert(&more);
    w.check(200);
}

#[test]
fn colliding_hashes_and_case_equal_keys() {
    for mode in [Mode::Mod(7), Mode::Mod(1), Mode::Full] {
        let mut w = World::new(384, Config::default(), mode);
        let mut rng = Rng(11);
        for _ in 0..6 {
            // Few ids, many spellings: byte-different keys that eq accepts.
            let b = batch(&mut rng, 150, 40, 5000);
            w.insert(&b);
            w.check(60);
        }
        // lookup_matches reports the stored spellings.
        let k = key(3, 0);
        let mut m = Matches::new();
        assert!(w.area.lookup_matches(hash_of(mode, &k), &mut |x| x.eq_ignore_ascii_case(&k), &mut m, usize::MAX).unwrap());
        let got: BTreeSet<(Vec<u8>, Tid)> = m.iter().map(|(k, t)| (k.to_vec(), t)).collect();
        let want: BTreeSet<(Vec<u8>, Tid)> = w.oracle.iter().filter(|x| x.1.eq_ignore_ascii_case(&k)).map(|x| (x.1.clone(), x.2)).collect();
        assert_eq!(got, want);
        assert!(want.iter().map(|x| &x.0).collect::<BTreeSet<_>>().len() > 1, "several spellings stored");
        w.remove_dead(|t| t.offset % 3 == 0);
        w.check(60);
    }
}

#[test]
fn eq_called_once_per_run_of_equal_keys() {
    let mut w = World::new(BODY_CAP, Config::default(), Mode::Mod(1));
    let items: Vec<_> = (0..50).map(|i| (b"same".to_vec(), tid(i))).chain((0..5).map(|i| (b"other".to_vec(), tid(i)))).collect();
    w.insert(&items);
    let mut calls = 0;
    let mut out = Vec::new();
    w.area.lookup(0, &mut |k| { calls += 1; k == b"same" }, &mut out).unwrap();
    assert_eq!(out.len(), 50);
    assert_eq!(calls, 2);
}

#[test]
fn bad_input_rejected() {
    let mut w = World::new(256, Config::default(), Mode::Full);
    let long = vec![b'a'; max_key_len(256) + 1];
    let ok = vec![b'a'; max_key_len(256)];
    assert_eq!(max_key_len(BODY_CAP), MAX_KEY);
    assert!(matches!(w.area.insert_batch(&[Entry::new(1, &long, tid(1))]), Err(Error::KeyTooLong { .. })));
    assert!(matches!(w.area.insert_batch(&[Entry::new(1, b"", tid(1))]), Err(Error::BadInput(_))));
    w.insert(&[(ok.clone(), tid(1)), (ok, tid(2))]);
    w.check(5);
    for cfg in [Config { initial_buckets: 3, ..Config::default() }, Config { fill_pct: 5, ..Config::default() }, Config { initial_buckets: 1 << 20, ..Config::default() }] {
        assert!(matches!(HashArea::create(MemPool::new(256), cfg), Err(Error::BadInput(_))));
    }
    assert!(HashArea::create(MemPool::new(100), Config::default()).is_err());
    let mut m = MemPool::new(256);
    let b = m.alloc().unwrap();
    let five: Vec<Change> = (0..5).map(|_| Change::Write { blk: b, body: vec![0; 256] }).collect();
    assert!(matches!(m.apply(five), Err(Error::BadInput(_))));
}

// ---------------------------------------------------------------------------
// Growth, chains, VACUUM

#[test]
fn grows_to_thousands_of_buckets() {
    let mut w = World::new(512, Config::default(), Mode::Full);
    let mut rng = Rng(3);
    let mut next = 0u64;
    for round in 0..50 {
        let items: Vec<_> = (0..1000)
            .map(|_| {
                next += 1;
                (key(next, rng.next()), tid(rng.below(1 << 20)))
            })
            .collect();
        w.insert(&items);
        if round % 10 == 9 {
            w.check(300);
        }
    }
    let s = w.area.stats().unwrap();
    assert!(s.buckets > 3000, "{s:?}");
    assert!(s.directory_pages > 20);
    // Splits keep the table at or under its target.
    assert!(s.entry_bytes <= s.fill_target as u64 * s.buckets, "{s:?}");
    assert!(s.avg_fill > 0.4, "{s:?}");
    assert!(w.area.verify().max_chain <= 4);
    w.remove_dead(|t| t.block % 2 == 0);
    w.check(300);
    assert!(w.area.pool.max_step_pages <= MAX_STEP_PAGES);
}

#[test]
fn long_overflow_chain_one_hash() {
    let mut w = World::new(256, Config::default(), Mode::Mod(1));
    let items: Vec<_> = (0..3000u64).map(|i| (key(i, 0), tid(i))).collect();
    for c in items.chunks(700) {
        w.insert(c);
    }
    w.check(50);
    let r = w.area.verify();
    assert!(r.max_chain > 400, "{r:?}");
    let s = w.area.stats().unwrap();
    // Splits still happen (the other buckets are empty), bounded by bytes.
    assert!(s.buckets > 100);
    // Every key in the chain is found; eq sees only hash 0 keys.
    let mut out = Vec::new();
    w.area.lookup(0, &mut |_| true, &mut out).unwrap();
    assert_eq!(out.len(), 3000);
    // VACUUM most of it: empty overflow pages are unlinked and retired.
    w.remove_dead(|t| t.offset > 1);
    w.check(50);
    let s2 = w.area.stats().unwrap();
    assert!(s2.overflow_pages < s.overflow_pages / 4, "{s:?} {s2:?}");
    assert_eq!(w.area.verify().empty_overflow_pages, 0);
    let retired = w.area.pool.retired_blocks();
    assert!(!retired.is_empty());
    assert_eq!(w.area.pool.recycle_retired(), retired.len());
    // Recycled blocks are reused by later inserts.
    w.insert(&items[..1000]);
    w.check(50);
    let live = w.area.pool.live_blocks();
    assert!(retired.iter().any(|b| live.contains(b)));
}

#[test]
fn one_key_many_tids_presence_is_exact() {
    // A low-cardinality column: one key, thousands of TIDs, one chain of
    // a single hash. Re-running a batch finds every entry (by a search
    // among the equal-hash slots, not a walk), and a mixed batch adds
    // exactly the new ones.
    let mut w = World::new(256, Config::default(), Mode::Full);
    let items: Vec<_> = (0..3000u64).map(|i| (key(7, 0), tid(i * 3))).collect();
    for c in items.chunks(500) {
        w.insert(c);
    }
    w.check(20);
    assert!(w.area.verify().max_chain > 100);
    let r = w.insert(&items);
    assert_eq!((r.inserted, r.present), (0, 3000));
    let mixed: Vec<_> = (0..2000u64).map(|i| (key(7, 0), tid(i * 3 + (i % 2)))).collect();
    let r = w.insert(&mixed);
    assert_eq!((r.inserted, r.present), (1000, 1000));
    w.check(20);
    let mut out = Vec::new();
    w.area.lookup(hash_of(Mode::Full, &key(7, 0)), &mut |_| true, &mut out).unwrap();
    assert_eq!(out.len(), 4000);
    // A limited probe stops before the page after the one that passed the
    // limit; an unlimited one reads the whole chain.
    let h = hash_of(Mode::Full, &key(7, 0));
    let mut n = 0;
    let mut p = w.area.probe(h);
    assert!(!w.area.run_probe_upto(&mut p, &mut |_| true, &mut |_, _| n += 1, 100).unwrap());
    assert!(n > 100 && n < 4000, "{n}");
    let (mut n, mut p) = (0, w.area.probe(h));
    assert!(w.area.run_probe_upto(&mut p, &mut |_| true, &mut |_, _| n += 1, 4000).unwrap());
    assert_eq!(n, 4000);
}

#[test]
fn inserts_fill_first_page_with_room() {
    // Entries never move: an insert into a chain only adds.
    let mut w = World::new(256, Config { fill_pct: 1000, ..Config::default() }, Mode::Mod(1));
    let items: Vec<_> = (0..60u64).map(|i| (key(i, 0), tid(i))).collect();
    w.insert(&items);
    let place = |a: &HashArea<MemPool>| -> BTreeMap<Tid, u32> {
        let mut m = BTreeMap::new();
        let h = a.header().unwrap();
        let mut blk = {
            let d = a.pool.read(h.dirs[0]).unwrap();
            DirView::parse(d).unwrap().slot(0).unwrap()
        };
        while blk != NO_BLOCK {
            let b = a.pool.read(blk).unwrap();
            let v = BucketView::parse(b).unwrap();
            for e in v.entries() {
                m.insert(e.unwrap().tid, blk);
            }
            blk = v.next;
        }
        m
    };
    let before = place(&w.area);
    w.remove_dead(|t| t.block == 0 && t.offset % 2 == 0);
    let mid = place(&w.area);
    for (t, b) in &mid {
        assert_eq!(before[t], *b);
    }
    let more: Vec<_> = (100..130u64).map(|i| (key(i, 0), tid(i))).collect();
    w.insert(&more);
    let after = place(&w.area);
    for (t, b) in &mid {
        assert_eq!(after[t], *b, "entry moved on insert");
    }
    w.check(20);
}

#[test]
fn directory_full_stops_splitting() {
    let mut w = World::new(128, Config::default(), Mode::Full);
    let max = max_buckets(128);
    let mut rng = Rng(5);
    for _ in 0..12 {
        let b = batch(&mut rng, 1000, 1 << 30, 1 << 30);
        w.insert(&b);
    }
    let s = w.area.stats().unwrap();
    assert_eq!(s.buckets, max);
    assert!(s.overflow_pages > 0);
    w.check(200);
    assert!(!w.area.split_one().unwrap());
}

// ---------------------------------------------------------------------------
// Crashes

/// Runs `op` once to count its steps, then for every k < steps: crash after
/// k steps, restart, check the table is valid and holds between `before`
/// and `after` (`shrinks`: after <= contents <= before), that every entry
/// in both is found, rerun `op`, compare with `after`, sweep orphans.
fn crash_every_step(base: &HashArea<MemPool>, mode: Mode, before: &Oracle, after: &Oracle, op: &dyn Fn(&mut HashArea<MemPool>) -> Result<()>) -> u64 {
    let hb = base.header_block();
    let mut full = HashArea::open(base.pool.clone(), hb).unwrap();
    let s0 = full.pool.steps;
    op(&mut full).unwrap();
    let total = full.pool.steps - s0;
    assert_eq!(contents(&full), *after);
    assert!(total > 0);
    let both: Vec<_> = before.intersection(after).collect();
    for k in 0..total {
        let mut pool = base.pool.clone();
        pool.crash_after(k);
        let mut a = HashArea::open(pool, hb).unwrap();
        assert_eq!(op(&mut a), Err(Error::Crashed), "k={k}");
        let mut pool = a.into_pool();
        pool.restart();
        let mut a = HashArea::open(pool, hb).unwrap();
        let r = a.verify();
        assert!(r.is_ok(), "after crash at {k}: {:?}", r.errors);
        let c = contents(&a);
        let (lo, hi) = if before.is_subset(after) { (before, after) } else { (after, before) };
        assert!(lo.is_subset(&c) && c.is_subset(hi), "crash at {k}: contents outside the operation's range");
        for (h, key, t) in &both {
            let mut out = Vec::new();
            a.lookup(*h, &mut |x| x == key.as_slice(), &mut out).unwrap();
            assert!(out.contains(t), "crash at {k}: entry present before and after is not found");
        }
        op(&mut a).unwrap();
        check_area(&a, after, mode, 30);
        let reach = a.reachable_blocks().unwrap();
        a.pool.reclaim_orphans(&reach);
        assert_eq!(a.pool.live_blocks(), reach);
        check_area(&a, after, mode, 10);
        assert!(a.pool.max_step_pages <= MAX_STEP_PAGES);
    }
    total
}

#[test]
fn crash_after_every_step_of_an_insert_batch() {
    let mode = Mode::Mod(64);
    let mut w = World::new(256, Config::default(), mode);
    let mut rng = Rng(17);
    w.insert(&batch(&mut rng, 120, 60, 400));
    // 40 entries of one hash first (one bucket gains several overflow pages
    // in one go), then a mix with repeats and entries already present.
    let target = hash_of(mode, b"same0");
    let mut items: Vec<_> = (0..u64::MAX).map(|i| (format!("same{i}").into_bytes(), tid(i))).filter(|(k, _)| hash_of(mode, k) == target).take(40).collect();
    items.extend(batch(&mut rng, 100, 80, 400));
    items.extend(w.oracle.iter().take(20).map(|x| (x.1.clone(), x.2)));
    let before = w.oracle.clone();
    let ents = w.entries(&items);
    let mut after = before.clone();
    after.extend(ents.iter().map(|e| (e.hash, e.key.to_vec(), e.tid)));
    let steps = crash_every_step(&w.area, mode, &before, &after, &|a| a.insert_batch(&ents).map(|_| ()));
    assert!(steps > 20, "{steps}");
    // The batch split buckets too.
    let mut full = HashArea::open(w.area.pool.clone(), 0).unwrap();
    assert!(full.insert_batch(&ents).unwrap().splits > 0);
}

#[test]
fn crash_after_every_step_of_a_split() {
    let mode = Mode::Full;
    // No automatic splits: buckets grow long chains, then split_one.
    let mut w = World::new(256, Config { fill_pct: 1000, ..Config::default() }, mode);
    let mut rng = Rng(23);
    w.insert(&batch(&mut rng, 200, 1000, 100000));
    assert!(w.area.verify().max_chain >= 5);
    let o = w.oracle.clone();
    let steps = crash_every_step(&w.area, mode, &o, &o, &|a| a.split_one().map(|_| ()));
    assert!(steps >= 6, "{steps}");
    // A split that adds a directory page (bucket 60 on a 256-byte body).
    let mut w = World::new(256, Config { initial_buckets: 32, fill_pct: 1000 }, mode);
    w.insert(&batch(&mut rng, 400, 1000, 100000));
    while w.area.header().unwrap().maxbucket < 59 {
        assert!(w.area.split_one().unwrap());
    }
    assert_eq!(w.area.header().unwrap().dirs.len(), 1);
    let o = w.oracle.clone();
    crash_every_step(&w.area, mode, &o, &o, &|a| a.split_one().map(|_| ()));
    w.area.split_one().unwrap();
    assert_eq!(w.area.header().unwrap().dirs.len(), 2);
    w.check(100);
}

#[test]
fn crash_after_every_step_of_a_vacuum() {
    let mode = Mode::Mod(5);
    let mut w = World::new(256, Config::default(), mode);
    let mut rng = Rng(29);
    w.insert(&batch(&mut rng, 400, 300, 2000));
    let before = w.oracle.clone();
    let dead = |t: Tid| !t.offset.is_multiple_of(3);
    let after: Oracle = before.iter().filter(|x| !dead(x.2)).cloned().collect();
    crash_every_step(&w.area, mode, &before, &after, &|a| a.remove(&mut |t| dead(t)).map(|_| ()));
    let gone: Vec<_> = before.iter().filter(|x| x.2.block % 2 == 0).map(|x| (x.1.clone(), x.2)).collect();
    let ents = w.entries(&gone);
    let after: Oracle = before.iter().filter(|x| x.2.block % 2 != 0).cloned().collect();
    crash_every_step(&w.area, mode, &before, &after, &|a| a.remove_entries(&ents).map(|_| ()));
}

// ---------------------------------------------------------------------------
// Readers interleaved with writers, one page at a time

struct Reader {
    probe: Probe,
    key: Vec<u8>,
    /// Entries present at the start and not removed since.
    must: BTreeSet<Tid>,
    /// Everything it may see: present at start or inserted since.
    may: BTreeSet<Tid>,
    found: BTreeSet<Tid>,
}

#[test]
fn readers_interleaved_with_writers() {
    let mode = Mode::Mod(13);
    let mut w = World::new(256, Config::default(), mode);
    let mut rng = Rng(31);
    let mut next_tid = 0u64;
    let mut fresh = |rng: &mut Rng, n: usize| -> Vec<(Vec<u8>, Tid)> {
        (0..n)
            .map(|_| {
                next_tid += 1;
                (key(rng.below(50), 0), tid(next_tid))
            })
            .collect()
    };
    w.insert(&fresh(&mut rng, 200));
    let mut readers: Vec<Reader> = Vec::new();
    let (mut done, mut restarts, mut inserted) = (0, 0, 0);
    for _ in 0..8000 {
        match rng.below(20) {
            0 => {
                let k = key(rng.below(50), 0);
                let must = expected(&w.oracle, mode, &k, false);
                let probe = if rng.below(2) == 0 {
                    w.area.probe(hash_of(mode, &k))
                } else {
                    // A cached header, possibly stale.
                    Probe::with_header(0, &w.area.header().unwrap(), hash_of(mode, &k))
                };
                readers.push(Reader { probe, key: k, may: must.clone(), must, found: BTreeSet::new() });
            }
            1..=12 if !readers.is_empty() => {
                let i = rng.below(readers.len() as u64) as usize;
                let r = &mut readers[i];
                let blk = r.probe.next_block().unwrap();
                let body = w.area.pool.read(blk).unwrap();
                let k = r.key.clone();
                let found = &mut r.found;
                r.probe.feed(body, &mut |x| x == k.as_slice(), &mut |_, t| assert!(found.insert(t))).unwrap();
                if r.probe.next_block().is_none() {
                    let r = readers.swap_remove(i);
                    assert!(r.must.is_subset(&r.found), "reader missed an entry present throughout");
                    assert!(r.found.is_subset(&r.may), "reader saw an entry that never existed");
                    restarts += r.probe.restarts();
                    done += 1;
                }
            }
            1..=16 => {
                let n = rng.below(30) as usize + 1;
                inserted += n;
                let items = fresh(&mut rng, n);
                w.insert(&items);
                for r in &mut readers {
                    r.may.extend(items.iter().filter(|x| x.0 == r.key).map(|x| x.1));
                }
            }
            19 => {
                w.area.split_one().unwrap();
            }
            _ => {
                let victims: Vec<_> = w.oracle.iter().filter(|_| rng.below(20) == 0).map(|x| (x.1.clone(), x.2)).collect();
                w.remove_entries(&victims);
                for r in &mut readers {
                    for v in &victims {
                        r.must.remove(&v.1);
                    }
                }
            }
        }
        if readers.is_empty() {
            w.area.pool.recycle_retired();
        }
    }
    assert!(done > 300, "{done} readers finished, {inserted} entries inserted, {} left", w.oracle.len());
    assert!(restarts > 0, "some reader raced a split");
    w.check(50);
}

#[test]
fn cached_header_reroutes_after_splits() {
    let mode = Mode::Full;
    let mut w = World::new(256, Config::default(), mode);
    let mut rng = Rng(37);
    w.insert(&batch(&mut rng, 50, 1000, 1000));
    let old = w.area.header().unwrap();
    w.insert(&batch(&mut rng, 2000, 1000, 100000));
    assert!(w.area.header().unwrap().maxbucket > old.maxbucket * 8);
    let mut restarted = 0;
    for (h, k, t) in w.oracle.iter().step_by(7) {
        let mut p = Probe::with_header(0, &old, *h);
        let mut got = Vec::new();
        w.area.run_probe(&mut p, &mut |x| x == k.as_slice(), &mut |_, t| got.push(t)).unwrap();
        assert!(got.contains(t));
        restarted += p.restarts();
        assert!(p.pages_read() >= 2);
    }
    assert!(restarted > 0);
}

// ---------------------------------------------------------------------------
// Random workloads

#[derive(Clone, Debug)]
enum Op {
    Insert(Vec<(u16, u8, u16)>),
    ReInsert(u8),
    Dead(u8, u8),
    RemoveSome(u8),
}

fn op_strategy() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => proptest::collection::vec((0u16..300, any::<u8>(), 0u16..2000), 1..250).prop_map(Op::Insert),
        1 => any::<u8>().prop_map(Op::ReInsert),
        1 => (2u8..6, 0u8..6).prop_map(|(m, r)| Op::Dead(m, r % m)),
        1 => any::<u8>().prop_map(Op::RemoveSome),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 40, ..ProptestConfig::default() })]

    #[test]
    fn random_workloads_match_oracle(
        cap in prop_oneof![Just(256usize), Just(384), Just(512), Just(1024)],
        nb in prop_oneof![Just(1u32), Just(2), Just(4)],
        fill in prop_oneof![Just(30u32), Just(75), Just(250)],
        m in prop_oneof![Just(0u32), Just(3), Just(7), Just(101)],
        ops in proptest::collection::vec(op_strategy(), 1..10),
    ) {
        let mode = if m == 0 { Mode::Full } else { Mode::Mod(m) };
        let mut w = World::new(cap, Config { initial_buckets: nb, fill_pct: fill }, mode);
        for op in ops {
            match op {
                Op::Insert(v) => {
                    let items: Vec<_> = v.iter().map(|&(k, c, t)| (key(k as u64, c as u64), tid(t as u64))).collect();
                    w.insert(&items);
                }
                Op::ReInsert(n) => {
                    let items: Vec<_> = w.oracle.iter().step_by(n as usize % 5 + 1).map(|x| (x.1.clone(), x.2)).collect();
                    let r = w.insert(&items);
                    prop_assert_eq!(r.inserted, 0);
                }
                Op::Dead(md, r) => {
                    w.remove_dead(|t| t.offset % md as u16 == r as u16);
                }
                Op::RemoveSome(n) => {
                    let mut items: Vec<_> = w.oracle.iter().step_by(n as usize % 4 + 1).map(|x| (x.1.clone(), x.2)).collect();
                    items.push((b"absent".to_vec(), tid(1)));
                    w.remove_entries(&items);
                }
            }
            w.check(40);
        }
    }

    /// Arbitrary bodies never make a view or a probe panic or read out of
    /// bounds; with a valid prefix they reach deeper checks.
    #[test]
    fn random_bodies_never_panic(mut body in proptest::collection::vec(any::<u8>(), 128..700), ty in 0u8..4, fix_counts in any::<bool>()) {
        if ty > 0 {
            let magic = [MAGIC_HEADER, MAGIC_DIRECTORY, MAGIC_BUCKET][ty as usize - 1];
            body[0..4].copy_from_slice(&magic.to_le_bytes());
            body[4] = VERSION;
            body[5] = ty;
            body[7] = 0;
            if ty == 3 {
                body[6] &= 1;
                if fix_counts {
                    // A plausible slot count and upper.
                    let n = body[20] as usize % 8;
                    body[20..22].copy_from_slice(&(n as u16).to_le_bytes());
                    let up = (BUCKET_HDR + n * SLOT + body[22] as usize % 64).min(body.len());
                    body[22..24].copy_from_slice(&(up as u16).to_le_bytes());
                }
            }
        }
        if let Ok(h) = HeaderView::parse(&body) {
            let _ = h.to_owned();
            let _ = h.dir_block(0);
        }
        if let Ok(d) = DirView::parse(&body) {
            for i in 0..d.per_page() + 2 { let _ = d.slot(i); }
        }
        if let Ok(v) = BucketView::parse(&body) {
            for i in 0..v.len() + 2 {
                let _ = v.entry(i);
                let _ = v.entry_span(i);
            }
            let _ = v.lower_bound(body[0] as u32);
            let _ = v.free();
        }
        for start in 0..3 {
            let mut p = Probe::new(0, 7);
            if start == 1 {
                let _ = p.feed(&build_header_like(body.len()), &mut |_| true, &mut |_, _| {});
            }
            if start == 2 {
                let _ = p.feed(&build_header_like(body.len()), &mut |_| true, &mut |_, _| {});
                let _ = p.feed(&build_directory(body.len(), 0, &[5, 6]), &mut |_| true, &mut |_, _| {});
            }
            let _ = p.feed(&body, &mut |_| true, &mut |_, _| {});
            let _ = p.feed(&body, &mut |_| true, &mut |_, _| {});
        }
    }
}

fn build_header_like(cap: usize) -> Vec<u8> {
    Header { cap: cap as u32, lowmask: 1, highmask: 3, maxbucket: 1, fill: 100, nentries: 0, npages: 10, entry_bytes: 0, dirs: vec![9] }.to_body()
}

// ---------------------------------------------------------------------------
// Corruption

/// A table with two directory pages, overflow pages and entries; returns
/// (world, a primary block with entries, an overflow block, its bucket).
fn corruptible() -> (World, u32, u32, u32) {
    let mode = Mode::Mod(200);
    let mut w = World::new(256, Config { initial_buckets: 64, fill_pct: 1000 }, mode);
    let mut rng = Rng(41);
    w.insert(&batch(&mut rng, 150, 400, 5000));
    let h = w.area.header().unwrap();
    assert_eq!(h.dirs.len(), 2);
    // Find a chain with an overflow page.
    for b in 0..=h.maxbucket {
        let d = DirView::parse(w.area.pool.read(h.dirs[b as usize / h.per_page()]).unwrap()).unwrap();
        let p = d.slot(b as usize % h.per_page()).unwrap();
        let v = BucketView::parse(w.area.pool.read(p).unwrap()).unwrap();
        if v.next != NO_BLOCK && !v.is_empty() {
            let next = v.next;
            return (w, p, next, b);
        }
    }
    panic!("no overflow chain");
}

fn exercise(pool: MemPool, w: &World, keys: &[(u32, Vec<u8>)]) -> (Vec<Error>, bool) {
    let mut a = HashArea::attach(pool, 0);
    let mut errs = Vec::new();
    let mut note = |r: Result<()>| {
        if let Err(e) = r {
            errs.push(e);
        }
    };
    let rep = a.verify();
    note(a.header().map(|_| ()));
    note(a.stats().map(|_| ()));
    note(a.reachable_blocks().map(|_| ()));
    note(a.for_each_entry(&mut |_| {}));
    let mut out = Vec::new();
    for (h, k) in keys {
        note(a.lookup(*h, &mut |x| x == k.as_slice(), &mut out));
    }
    let items: Vec<_> = (0..30u64).map(|i| (key(i + 9000, 0), tid(i))).collect();
    let ents = w.entries(&items);
    note(a.insert_batch(&ents).map(|_| ()));
    note(a.remove_entries(&ents[..10]).map(|_| ()));
    note(a.remove(&mut |t| t.offset == 3).map(|_| ()));
    note(a.split_one().map(|_| ()));
    let _ = a.verify();
    (errs, rep.is_ok())
}

#[test]
fn corrupt_pages_give_typed_errors() {
    let (w, prim, ovf, bucket) = corruptible();
    let h = w.area.header().unwrap();
    let keys: Vec<(u32, Vec<u8>)> = w.oracle.iter().map(|x| (x.0, x.1.clone())).collect::<BTreeSet<_>>().into_iter().collect();
    let targets = [(0u32, PageKind::Header), (h.dirs[0], PageKind::Directory), (h.dirs[1], PageKind::Directory), (prim, PageKind::Bucket), (ovf, PageKind::Bucket)];
    let mut flagged = 0;
    for &(blk, kind) in &targets {
        for off in 0..256 {
            for flip in [0x01u8, 0x80, 0xff] {
                let mut pool = w.area.pool.clone();
                pool.body_mut(blk).unwrap()[off] ^= flip;
                // Identity bytes: magic, version, type, flags, reserved.
                if off < 8 {
                    let a = HashArea::attach(pool.clone(), 0);
                    let rep = a.verify();
                    assert!(!rep.is_ok(), "blk {blk} off {off} flip {flip:#x} not caught by verify");
                    // A lookup through the page reports it, typed.
                    let through = keys.iter().find(|(hh, _)| match kind {
                        PageKind::Header => true,
                        PageKind::Directory => (h.bucket_of(*hh) as usize / h.per_page()) == h.dirs.iter().position(|&d| d == blk).unwrap(),
                        _ => h.bucket_of(*hh) == bucket,
                    });
                    let (hh, k) = through.unwrap();
                    let mut out = Vec::new();
                    match a.lookup(*hh, &mut |x| x == k.as_slice(), &mut out) {
                        Err(Error::Corrupt { blk: b, kind: kd, .. }) => {
                            assert_eq!((b, kd), (blk, kind), "off {off} flip {flip:#x}");
                        }
                        other => panic!("blk {blk} off {off} flip {flip:#x}: {other:?}"),
                    }
                }
                let (errs, ok) = exercise(pool, &w, &keys);
                if !ok {
                    flagged += 1;
                }
                assert!(errs.iter().all(|e| e.is_corrupt() || matches!(e, Error::BadInput(_))), "{errs:?}");
            }
        }
    }
    assert!(flagged > 500, "verify flagged only {flagged} corruptions");
}

#[test]
fn verify_catches_misplaced_and_misordered_entries() {
    let (w, prim, _, bucket) = corruptible();
    let h = w.area.header().unwrap();
    let body = w.area.pool.read(prim).unwrap().to_vec();
    let v = BucketView::parse(&body).unwrap();
    let mut ents: Vec<Entry> = v.entries().map(|e| e.unwrap()).collect();
    // Replace the first entry's hash with one that maps elsewhere.
    let other = (0..u32::MAX).find(|x| h.bucket_of(*x) != bucket).unwrap();
    let mut moved = ents.clone();
    moved[0].hash = other;
    moved.sort();
    let nb = build_bucket(256, bucket, v.next, v.stamp, true, &moved).unwrap();
    let mut pool = w.area.pool.clone();
    *pool.body_mut(prim).unwrap() = nb;
    let rep = HashArea::attach(pool, 0).verify();
    assert!(rep.errors.iter().any(|e| e.contains("belongs in bucket")), "{:?}", rep.errors);
    assert_eq!(rep.errors.len(), 1, "counts still agree: only the misplacement is reported");
    // Swap two slots: order broken.
    let mut pool = w.area.pool.clone();
    let b = pool.body_mut(prim).unwrap();
    let (s0, s1) = (BUCKET_HDR, BUCKET_HDR + SLOT);
    let tmp: Vec<u8> = b[s0..s0 + SLOT].to_vec();
    b.copy_within(s1..s1 + SLOT, s0);
    b[s1..s1 + SLOT].copy_from_slice(&tmp);
    let rep = HashArea::attach(pool, 0).verify();
    assert!(rep.errors.iter().any(|e| e.contains("order")), "{:?}", rep.errors);
    // Same (key, TID) twice in a bucket (on another page of the chain).
    ents.truncate(1);
    let dup = build_bucket(256, bucket, NO_BLOCK, v.stamp, false, &ents).unwrap();
    let mut pool = w.area.pool.clone();
    let mut blk = prim;
    loop {
        let nx = BucketView::parse(pool.read(blk).unwrap()).unwrap().next;
        if nx == NO_BLOCK {
            break;
        }
        blk = nx;
    }
    *pool.body_mut(blk).unwrap() = dup;
    let rep = HashArea::attach(pool, 0).verify();
    assert!(rep.errors.iter().any(|e| e.contains("duplicate")), "{:?}", rep.errors);
}

// ---------------------------------------------------------------------------
// Format

#[test]
fn bucket_page_bytes() {
    let ents = [Entry::new(0x0000_0007, b"ab", Tid::new(5, 1)), Entry::new(0x0000_0007, b"b", Tid::new(2, 9))];
    let b = build_bucket(128, 3, NO_BLOCK, 5, true, &ents).unwrap();
    assert_eq!(&b[..24], &[b'G', b'R', b'F', b'B', 1, 3, 1, 0, 3, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 5, 0, 0, 0, 2, 0, 0x6f, 0]);
    // slots: (7, 0x77) (7, 0x6f)
    assert_eq!(&b[24..36], &[7, 0, 0, 0, 0x77, 0, 7, 0, 0, 0, 0x6f, 0]);
    // entries from the end: "ab" at 119, "b" at 111
    assert_eq!(&b[119..128], &[5, 0, 0, 0, 1, 0, 2, b'a', b'b']);
    assert_eq!(&b[111..119], &[2, 0, 0, 0, 9, 0, 1, b'b']);
    let v = BucketView::parse(&b).unwrap();
    assert_eq!(v.entry(1).unwrap(), ents[1]);
    assert_eq!(v.free(), 128 - 24 - 2 * SLOT - 17);
    let d = build_directory(128, 0, &[4, 5]);
    assert_eq!(&d[..24], &[b'G', b'R', b'F', b'D', 1, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 4, 0, 0, 0, 5, 0, 0, 0]);
    // The README's empty header on 8136-byte bodies.
    let w = World::new(BODY_CAP, Config::default(), Mode::Full);
    let hb = w.area.pool.read(0).unwrap();
    let mut want = vec![0x47, 0x52, 0x46, 0x48, 1, 1, 0, 0, 0xc8, 0x1f, 0, 0, 1, 0, 0, 0, 3, 0, 0, 0, 1, 0, 0, 0, 0xd6, 0x17, 0, 0, 1, 0, 0, 0];
    want.extend([0; 8]);
    want.extend([4, 0, 0, 0, 0, 0, 0, 0]);
    want.extend([0; 8]);
    want.extend([1, 0, 0, 0]);
    assert_eq!(&hb[..60], &want[..]);
    assert!(hb[60..].iter().all(|&x| x == 0));
    let hdr = Header { cap: 128, lowmask: 1, highmask: 3, maxbucket: 1, fill: 96, nentries: 0, npages: 4, entry_bytes: 0, dirs: vec![1] }.to_body();
    assert_eq!(&hdr[..8], b"GRFH\x01\x01\x00\x00");
    assert_eq!(Header::parse(&hdr).unwrap().dirs, vec![1]);
}

#[test]
fn add_to_bucket_changes_few_bytes() {
    let keys: Vec<Vec<u8>> = (0..40u64).map(|i| key(i, 0)).collect();
    let mut ents: Vec<Entry> = keys.iter().enumerate().map(|(i, k)| Entry::new(fnv(k), k, tid(i as u64))).collect();
    ents.sort();
    let old: Vec<Entry> = ents.iter().enumerate().filter(|(i, _)| i % 8 != 7).map(|x| *x.1).collect();
    let new: Vec<Entry> = ents.iter().enumerate().filter(|(i, _)| i % 8 == 7).map(|x| *x.1).collect();
    let body = build_bucket(4096, 0, NO_BLOCK, 1, true, &old).unwrap();
    let grown = add_to_bucket(&body, &new).unwrap();
    let v = BucketView::parse(&grown).unwrap();
    let got: Vec<Entry> = v.entries().map(|e| e.unwrap()).collect();
    assert_eq!(got, ents);
    // Old entry bodies did not move: the entry area only grew downwards.
    let old_upper = BucketView::parse(&body).unwrap().upper();
    assert_eq!(&body[old_upper..], &grown[old_upper..]);
    let first = ents.iter().position(|e| *e == new[0]).unwrap();
    let changed = body.iter().zip(&grown).enumerate().filter(|(_, (a, b))| a != b).map(|x| x.0).collect::<Vec<_>>();
    assert!(changed.iter().all(|&i| i < 24 || i >= BUCKET_HDR + SLOT * first));
    assert_eq!(BucketView::parse(&grown).unwrap().free(), 4096 - BUCKET_HDR - ents.iter().map(|e| e.cost()).sum::<usize>());
    assert!(add_to_bucket(&grown, &new[..1]).is_err(), "already present");
}

#[test]
fn cached_directory_reads_one_page() {
    let mode = Mode::Full;
    let mut w = World::new(512, Config::default(), mode);
    let mut rng = Rng(41);
    w.insert(&batch(&mut rng, 400, 1000, 1000));
    let hdr = w.area.header().unwrap();
    let dir = w.area.primaries(&hdr).unwrap();
    assert_eq!(dir.len(), hdr.maxbucket as usize + 1);
    // A fresh cache: the primary page first; one page unless it overflows.
    let before: Vec<(u32, Vec<u8>, Tid)> = w.oracle.iter().cloned().collect();
    let mut one_page = 0;
    for (h, k, t) in before.iter().step_by(3) {
        let mut p = Probe::with_directory(0, &hdr, *h, |b| dir.get(b as usize).copied());
        let mut got = Vec::new();
        w.area.run_probe(&mut p, &mut |x| x == k.as_slice(), &mut |_, t| got.push(t)).unwrap();
        assert!(got.contains(t));
        assert_eq!(p.restarts(), 0);
        one_page += (p.pages_read() == 1) as u32;
    }
    assert!(one_page > 0);
    // Splits since the cache was taken: the old chains are still readable
    // (retired blocks wait for their readers), and a chain written by a
    // split after the cache routes the probe again from the header; either
    // way every entry present when the cache was taken is found.
    w.insert(&batch(&mut rng, 2000, 1000, 100000));
    assert!(w.area.header().unwrap().maxbucket > hdr.maxbucket);
    for (h, k, t) in before.iter().step_by(5) {
        let mut p = Probe::with_directory(0, &hdr, *h, |b| dir.get(b as usize).copied());
        let mut got = Vec::new();
        w.area.run_probe(&mut p, &mut |x| x == k.as_slice(), &mut |_, t| got.push(t)).unwrap();
        assert!(got.contains(t));
    }
}

#[test]
fn lower_bound_matches_binary_search() {
    let mut rng = Rng(43);
    for round in 0..300 {
        let n = rng.below(300) as usize;
        let mut items: Vec<(u32, Vec<u8>, Tid)> = (0..n)
            .map(|i| {
                // even spreads, clusters, runs of one hash, the extremes
                let h = match round % 4 {
                    0 => rng.below(1 << 32) as u32,
                    1 => (rng.below(64) as u32) << 26,
                    2 => 0x8000_0000 + rng.below(8) as u32,
                    _ => [0, 1, u32::MAX - 1, u32::MAX][rng.below(4) as usize],
                };
                (h, vec![b'k', (i % 251) as u8], Tid::new(i as u32, 1))
            })
            .collect();
        items.sort();
        items.dedup();
        let entries: Vec<Entry> = items.iter().map(|(h, k, t)| Entry::new(*h, k, *t)).collect();
        let Ok(body) = page::build_bucket(8136, 0, NO_BLOCK, 0, true, &entries) else { continue };
        let v = page::BucketView::parse(&body).unwrap();
        let mut probes: Vec<u32> = items.iter().map(|e| e.0).collect();
        probes.extend([0, 1, u32::MAX, 0x7fff_ffff, 0x8000_0000]);
        probes.extend((0..20).map(|_| rng.below(1 << 32) as u32));
        for h in probes {
            assert_eq!(v.lower_bound(h), v.lower_bound_binary(h), "round {round}, n {n}, hash {h:#x}");
        }
    }
}

/// A step's `Change::Add` carries encoded entries; the glue logs them and
/// WAL redo replays `apply_adds`, so it must equal `add_to_bucket` of the
/// decoded entries, and refuse what it cannot decode.
#[test]
fn bucket_additions_round_trip() {
    let keys: Vec<Vec<u8>> = (0..40u64).map(|i| key(i, 0)).collect();
    let mut ents: Vec<Entry> = keys.iter().enumerate().map(|(i, k)| Entry::new(fnv(k), k, tid(i as u64))).collect();
    ents.sort();
    let (old, new) = ents.split_at(25);
    let body = build_bucket(4096, 3, NO_BLOCK, 5, true, old).unwrap();
    let adds = encode_adds(new);
    assert_eq!(decode_adds(&adds).unwrap(), new.to_vec());
    assert_eq!(apply_adds(&body, &adds).unwrap(), add_to_bucket(&body, new).unwrap());
    assert_eq!(decode_adds(&[]).unwrap(), Vec::<Entry>::new());
    // Cut anywhere inside the last entry: an error, never a shorter list.
    let last = encode_adds(&new[..new.len() - 1]).len();
    for cut in last + 1..adds.len() {
        assert!(decode_adds(&adds[..cut]).is_err(), "cut at {cut}");
    }
    // An entry already on the page is refused, as add_to_bucket refuses it.
    assert!(apply_adds(&body, &encode_adds(&old[..1])).is_err());
    // Through a pool: an Add is one page change of a step.
    let mut pool = MemPool::new(4096);
    let b = pool.alloc().unwrap();
    pool.apply(vec![Change::Write { blk: b, body: body.clone() }]).unwrap();
    pool.apply(vec![Change::Add { blk: b, adds: adds.clone() }]).unwrap();
    assert_eq!(pool.read(b).unwrap(), &add_to_bucket(&body, new).unwrap()[..]);
    // A failing add fails the whole step.
    let c = pool.alloc().unwrap();
    let before = pool.read(b).unwrap().to_vec();
    assert!(pool.apply(vec![Change::Write { blk: c, body: body.clone() }, Change::Add { blk: b, adds }]).is_err());
    assert_eq!(pool.read(b).unwrap(), &before[..]);
}

/// The in-place add (what a sync and WAL redo do to a bucket page) leaves
/// the page holding exactly the old and the new entries in slot order, as
/// a page built from all of them would; where it refuses (an entry already
/// there, entries that do not fit) the page is unchanged and `check_adds`
/// refuses too.
#[test]
fn in_place_add_matches_a_built_page() {
    let mut rng = Rng(0x1a2b);
    let mut applied = 0;
    for round in 0..300 {
        let n = rng.below(120) as usize;
        let m = 1 + rng.below(30) as usize;
        // Few distinct hashes in some rounds, so entries tie on the hash
        // and are ordered by key and TID.
        let hashes = if round % 3 == 0 { 4 } else { 1 << 32 };
        let mut all: Vec<(u32, Vec<u8>, Tid)> = (0..n + m)
            .map(|_| {
                let k = key(rng.below(50), rng.below(3));
                (rng.below(hashes) as u32, k, tid(rng.below(1000)))
            })
            .collect();
        all.sort();
        all.dedup();
        // A random split into what is on the page and what is added.
        let mut old = Vec::new();
        let mut new = Vec::new();
        for e in &all {
            if rng.below(4) == 0 { new.push(e.clone()) } else { old.push(e.clone()) }
        }
        fn as_entries(v: &[(u32, Vec<u8>, Tid)]) -> Vec<Entry<'_>> {
            v.iter().map(|(h, k, t)| Entry::new(*h, k, *t)).collect()
        }
        let (oe, ne, ae) = (as_entries(&old), as_entries(&new), as_entries(&all));
        let Ok(body) = build_bucket(4096, 7, NO_BLOCK, 2, true, &oe) else { continue };
        let adds = encode_adds(&ne);
        let mut page = body.clone();
        match add_to_bucket_in_place(&mut page, &ne) {
            Ok(()) => {
                check_adds(&body, &adds).unwrap();
                let v = BucketView::parse(&page).unwrap();
                let got: Vec<Entry> = v.entries().map(|e| e.unwrap()).collect();
                assert_eq!(got, ae, "round {round}");
                assert_eq!(v.stamp, BucketView::parse(&body).unwrap().stamp);
                // Redo's path gives the same bytes.
                let mut again = body.clone();
                apply_adds_in_place(&mut again, &adds).unwrap();
                assert_eq!(again, page);
                applied += 1;
            }
            Err(_) => {
                assert_eq!(page, body, "round {round}: a refused add changed the page");
                assert!(check_adds(&body, &adds).is_err());
            }
        }
        // An entry already on the page: refused, page unchanged.
        if let (Some(o), false) = (oe.first(), ne.is_empty()) {
            let mut dup = vec![*o];
            dup.retain(|e| !ne.contains(e));
            let mut p2 = body.clone();
            assert!(add_to_bucket_in_place(&mut p2, &dup).is_err());
            assert_eq!(p2, body);
            assert!(check_adds(&body, &encode_adds(&dup)).is_err());
        }
    }
    assert!(applied > 200, "only {applied} rounds added entries");
}
