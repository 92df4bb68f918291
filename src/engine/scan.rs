//! Index scans: amgettuple (both directions), amgetbitmap, mark/restore,
//! array keys, NULL searches and index-only scans, for every AM the engine
//! runs.
//!
//! A scan is a sequence of *subscans*, one per combination of `= ANY(array)`
//! elements (taken in index order, so output stays ordered when the array is
//! on the leading column). A subscan reads the matching dynamic-stage
//! entries (state::snapshot) together with the base structure they
//! complement, and merges them with the base structure's cursor (a
//! `BaseCursor`), emitting (key, TID) pairs in index order. The position is
//! the last pair returned, so mark/restore and direction changes re-seek by
//! key. The returned key lives in one buffer of the scan, reused per item.

use std::cmp::Ordering;
use std::rc::Rc;

use pg_hybrid_core::keys::{self as ck, ColumnKind};
use pg_hybrid_core::tid::Tid;
use pgrx::pg_sys;
use pgrx::prelude::*;

use super::ams;
use super::base::{BaseCursor, Dir, HotTierSettings, ScanRange};
use super::meta::BaseInfo;
use super::dynscan::{DynPeek, DynReader};
use super::predlock;
use super::build::tid_to_item;
use super::state::{self, SlotState};
use crate::keys::{index_desc, IndexDesc};
use crate::shmem::{self, SlotRef};

#[derive(Clone)]
enum CondKind {
    Cmp(u16),
    IsNull,
    IsNotNull,
}

#[derive(Clone)]
struct Cond {
    col: usize,
    kind: CondKind,
    /// Full column encoding of the argument (marker included).
    enc: Vec<u8>,
    /// Raw argument bytes for opaque columns.
    raw: Vec<u8>,
}

impl Cond {
    /// Makes this condition a copy of `other`, in its own buffers.
    fn assign(&mut self, other: &Cond) {
        self.col = other.col;
        self.kind = other.kind.clone();
        self.enc.clear();
        self.enc.extend_from_slice(&other.enc);
        self.raw.clear();
        self.raw.extend_from_slice(&other.raw);
    }
}

struct ArrayKey {
    elems: Vec<Cond>,
}

/// Dynamic-stage entries a cursor stepped over because they were hinted
/// dead, and the keys of the first and the last of them: at close, the
/// cursor prunes that key range of the stage (`state::prune_dead_range`),
/// so the scans after it do not step over them again. A range whose low
/// end is all deleted rows (TPC-C's new_order, read by Delivery and then
/// deleted) is the case: inserts never come back to those keys to prune
/// them, and until a merge every scan of the range walked them.
#[derive(Default)]
struct DeadSeen {
    count: u32,
    first: Vec<u8>,
    last: Vec<u8>,
}

/// Dead entries a cursor must have stepped over before its close prunes
/// them: a few are cheaper to skip than an exclusive lock is to take.
const PRUNE_AFTER_DEAD: u32 = 8;

/// Whether the last key the conditions were evaluated on matched (posting
/// lists repeat a key for every TID).
#[derive(Default)]
struct MatchMemo {
    key: Vec<u8>,
    valid: bool,
    matched: bool,
}

struct Cursor {
    conds: Vec<Cond>,
    lower: Vec<u8>,
    upper: Option<Vec<u8>>,
    dynamic: DynReader,
    base: Box<dyn BaseCursor>,
    /// The bounds say everything the conditions say, so forward items past
    /// the dynamic stage can come without keys from a structure that stores
    /// none (compact elastic leaves then read no key per entry).
    /// Some((lower strict, upper strict)).
    keyless: Option<(bool, bool)>,
    /// The bounds say what the conditions say, but for strict ends and a
    /// one-sided range's NULLs (`bounds_imply`): entries are tested by
    /// `passes`, not decoded.
    implied: Option<Implied>,
    memo: MatchMemo,
    slot: SlotRef,
    /// Registered reader of the base's generation for as long as the cursor
    /// is open, so its pages are not recycled under it (readers.rs); a
    /// closed cursor keeps it for the next one while the generation is
    /// current (`ScanState::open_cursor` hands it to `start_scan`).
    reader: Option<super::readers::ReaderToken>,
    /// The last item this cursor returned (its key is in the scan's key
    /// buffer), for re-seeking after a merge.
    returned: Option<Tid>,
    point_hash: Option<u64>,
    /// The range is one key (equality on every key column): `ScanRange::point`.
    point: bool,
    /// The last item came from the dynamic stage.
    from_dynamic: bool,
    dead_seen: DeadSeen,
    /// The index's hot tier (tiered indexes), and whether this point read
    /// found the key's whole record there and so leaves the base alone.
    hot: Option<HotTierSettings>,
    base_skipped: bool,
    /// The metapage snapshot the cursor reads (a promotion checks that
    /// nothing moved since).
    info: BaseInfo,
    /// SIREAD locks of the range, taken as the cursor reads a wide one.
    locks: predlock::ScanLocks,
}

impl Cursor {
    /// Ends the cursor. It is kept whole for the next subscan or rescan
    /// (`ScanState::spare`): its base parked, its reader registration, and
    /// every buffer, so a nested-loop probe allocates nothing.
    fn close(&mut self, desc: &IndexDesc) {
        // One shared counter for every backend: touched only by scans that
        // read keys from the heap, not by every probe.
        let fetches = self.base.key_fetches();
        if fetches > 0 {
            state::add_key_fetches(self.slot, fetches);
        }
        self.base.park();
        if self.dead_seen.count >= PRUNE_AFTER_DEAD {
            state::prune_dead_range(self.slot, desc, &self.dead_seen.first, &self.dead_seen.last, self.dead_seen.count);
        }
        self.dead_seen.count = 0;
    }

    /// The item just returned (its key in `key`) is hinted dead.
    fn note_dead(&mut self, key: &[u8]) {
        if !self.from_dynamic {
            return;
        }
        let d = &mut self.dead_seen;
        if d.count == 0 {
            d.first.clear();
            d.first.extend_from_slice(key);
        }
        d.last.clear();
        d.last.extend_from_slice(key);
        d.count += 1;
    }
}

pub struct ScanState {
    /// The index's (OID, relfilenode), which keys `desc` (keys::index_desc)
    /// and the backend's warm scans.
    rel_key: (u32, u32),
    desc: Rc<IndexDesc>,
    slot: SlotRef,
    /// Conditions other than array keys.
    fixed: Vec<Cond>,
    arrays: Vec<ArrayKey>,
    impossible: bool,
    nsub: usize,
    sub: isize,
    cur: Option<Box<Cursor>>,
    /// The last closed cursor, reused by the next one (`Cursor::close`).
    spare: Option<Box<Cursor>>,
    /// Buffers of earlier scan keys' conditions, reused by `preprocess`.
    cond_pool: Vec<Cond>,
    dir: Dir,
    /// The last item returned: its key (empty for keyless items) and TID.
    last_key: Vec<u8>,
    last_tid: Option<Tid>,
    exhausted: bool,
    started: bool,
    mark: Option<Mark>,
    /// Where index-only scans form the `xs_itup` that `itup_layout` cannot
    /// (NULLs, variable-length columns), made on the first as a child of
    /// `scan_cxt`, the context the scan began in.
    tuple_cxt: pg_sys::MemoryContext,
    scan_cxt: pg_sys::MemoryContext,
    /// How index-only tuples are formed without palloc, made on the first.
    itup_layout: Option<FixedTuple>,
    /// The scan's snapshot, for predicate locks.
    snapshot: pg_sys::Snapshot,
    /// Items must carry their keys (index-only scans).
    want_keys: bool,
    /// The index's vacuum_epoch when the cursor opened, which killed-tuple
    /// hints (killed.rs) must match, and whether this scan may skip them.
    killed_epoch: u64,
    skip_killed: bool,
    /// The TID amgettuple returned last (what `kill_prior_tuple` is about).
    prior_tid: Option<Tid>,
}

/// A marked position (ammarkpos).
#[derive(Clone)]
struct Mark {
    sub: isize,
    last: Option<(Vec<u8>, Tid)>,
    exhausted: bool,
}

fn logical_cmp(desc: &IndexDesc, c: &Cond, s: &ck::ColumnSlice) -> Ordering {
    let col = &desc.cols[c.col];
    if col.kind == ColumnKind::Opaque {
        desc.opaque_cmp(c.col, s.payload, &c.raw)
    } else {
        let o = ck::bytes_cmp(s.encoded, &c.enc);
        if col.order.desc {
            o.reverse()
        } else {
            o
        }
    }
}

fn matches(desc: &IndexDesc, conds: &[Cond], key: &[u8]) -> bool {
    if conds.is_empty() {
        return true;
    }
    let mut cols: [Option<ck::ColumnSlice>; 32] = [None; 32];
    for (i, c) in desc.schema.columns(key).enumerate().take(desc.nkeyatts.min(32)) {
        match c {
            Ok(c) => cols[i] = Some(c),
            Err(_) => return false,
        }
    }
    conds.iter().all(|c| {
        let Some(s) = cols.get(c.col).copied().flatten() else { return false };
        match c.kind {
            CondKind::IsNull => s.null,
            CondKind::IsNotNull => !s.null,
            CondKind::Cmp(strategy) => {
                if s.null {
                    return false;
                }
                let o = logical_cmp(desc, c, &s);
                match strategy {
                    1 => o == Ordering::Less,
                    2 => o != Ordering::Greater,
                    3 => o == Ordering::Equal,
                    4 => o != Ordering::Less,
                    5 => o == Ordering::Greater,
                    _ => false,
                }
            }
        }
    })
}

/// What the bounds `bounds_into` derives from a scan's conditions say of
/// them, when they say everything: the conditions are equalities (or IS
/// NULL) on leading columns, then nothing or one bound on each side of the
/// next column, and nothing else. A key between the bounds (prefix
/// comparisons, both ends inclusive) then satisfies every condition unless
/// it equals a strict bound's prefix, or the range is open on one side
/// (NULLs sort past an open end).
struct BoundsCover {
    /// (lower strict, upper strict).
    strict: (bool, bool),
    /// The range column has a bound on one side only.
    one_sided: bool,
    /// No IS NULL among the conditions.
    only_cmp: bool,
}

fn bounds_cover(desc: &IndexDesc, conds: &[Cond]) -> Option<BoundsCover> {
    if conds.is_empty() {
        return None;
    }
    let mut cover = BoundsCover { strict: (false, false), one_sided: false, only_cmp: conds.iter().all(|c| matches!(c.kind, CondKind::Cmp(_))) };
    let mut used = 0;
    for col in 0..desc.nkeyatts {
        let on_col = conds.iter().filter(|c| c.col == col).count();
        if on_col == 0 {
            break;
        }
        if conds.iter().any(|c| c.col == col && matches!(c.kind, CondKind::Cmp(3) | CondKind::IsNull)) {
            if on_col != 1 {
                return None;
            }
            used += 1;
            continue;
        }
        // The column's physical lower / upper strategies (DESC flips them).
        let (lo, lo_strict, hi_strict): ([u16; 2], u16, u16) = if desc.cols[col].order.desc { ([1, 2], 1, 5) } else { ([4, 5], 5, 1) };
        let strat = |c: &Cond| match c.kind {
            CondKind::Cmp(s) if c.col == col => Some(s),
            _ => None,
        };
        let lows = conds.iter().filter_map(strat).filter(|s| lo.contains(s));
        let highs = conds.iter().filter_map(strat).filter(|s| !lo.contains(s));
        let (low, high) = (lows.clone().next(), highs.clone().next());
        if lows.count() > 1 || highs.count() > 1 || conds.iter().any(|c| c.col == col && !matches!(c.kind, CondKind::Cmp(_))) {
            return None;
        }
        cover.strict = (low == Some(lo_strict), high == Some(hi_strict));
        cover.one_sided = low.is_none() || high.is_none();
        used += on_col;
        break;
    }
    (used == conds.len()).then_some(cover)
}

/// What the bounds of a merged cursor say about the entries between them
/// (`bounds_imply`).
#[derive(Clone, Copy)]
struct Implied {
    /// Strict lower / upper bound: an entry whose prefix equals it fails.
    strict: (bool, bool),
    /// A range open on one side (`k >= $1`, `k < $1`, after equalities on
    /// the columns before): the range column's bytes start at this offset,
    /// and the open side runs into the column's NULLs, which fail. Every
    /// value's encoding starts with MARK_VALUE, a NULL's with a marker
    /// below or above it.
    value_at: Option<usize>,
}

/// For the merged cursor: Some when entries between the bounds need only
/// the strict-bound test and, for a one-sided range, a look at one byte
/// (`passes`). Only where key bytes order like the values (no opaque
/// column): there a key whose prefix equals a bound's bytes has equal
/// values, and bytes between two bounds are values between them.
fn bounds_imply(desc: &IndexDesc, conds: &[Cond]) -> Option<Implied> {
    if !desc.memcmp {
        return None;
    }
    let cover = bounds_cover(desc, conds)?;
    if !cover.one_sided {
        return Some(Implied { strict: cover.strict, value_at: None });
    }
    // The equalities before the range column are the entries' first bytes
    // (memcmp: equal values have equal bytes), as in `bounds_into`.
    let mut prefix = 0;
    for col in 0..desc.nkeyatts {
        match conds.iter().find(|c| c.col == col && matches!(c.kind, CondKind::Cmp(3) | CondKind::IsNull)) {
            Some(c) => prefix += c.enc.len(),
            None => break,
        }
    }
    Some(Implied { strict: cover.strict, value_at: Some(prefix) })
}

/// For a base structure that stores no keys (`BaseCursor::keyless`), on a
/// one-column index: Some((lower strict, upper strict)) when an entry
/// between the bounds' positions matches without looking at its key.
/// Cursor::start closes an open side at the edge of the non-NULL keys.
fn keyless_bounds(desc: &IndexDesc, conds: &[Cond]) -> Option<(bool, bool)> {
    if desc.natts != 1 {
        return None;
    }
    bounds_cover(desc, conds).filter(|c| c.only_cmp).map(|c| c.strict)
}

/// Whether `key`, between the cursor's bounds, satisfies its conditions:
/// the strict-bound test `bounds_imply` allows, or every condition.
fn passes(desc: &IndexDesc, implied: Option<Implied>, conds: &[Cond], lower: &[u8], upper: Option<&[u8]>, key: &[u8]) -> bool {
    match implied {
        Some(Implied { strict: (ls, us), value_at }) => {
            value_at.is_none_or(|at| key.get(at) == Some(&ck::MARK_VALUE))
                && !(ls && desc.compare_prefix(key, lower) == Ordering::Equal)
                && !(us && upper.is_some_and(|u| desc.compare_prefix(key, u) == Ordering::Equal))
        }
        None => matches(desc, conds, key),
    }
}

/// Physical lower and upper bound prefixes implied by the conditions, into
/// `lower` and `upper` (an empty upper bound is none).
fn bounds_into(desc: &IndexDesc, conds: &[Cond], lower: &mut Vec<u8>, upper: &mut Vec<u8>) {
    // Equalities on leading columns extend both bounds; the first column
    // without one contributes its range bounds and ends the prefix.
    lower.clear();
    upper.clear();
    for col in 0..desc.nkeyatts {
        let eq = conds.iter().find(|c| {
            c.col == col && matches!(c.kind, CondKind::Cmp(3) | CondKind::IsNull)
        });
        if let Some(c) = eq {
            lower.extend_from_slice(&c.enc);
            upper.extend_from_slice(&c.enc);
            continue;
        }
        let desc_col = desc.cols[col].order.desc;
        let (lo_strats, hi_strats): (&[u16], &[u16]) = if desc_col { (&[1, 2], &[4, 5]) } else { (&[4, 5], &[1, 2]) };
        if let Some(c) = conds.iter().find(|c| c.col == col && matches!(c.kind, CondKind::Cmp(s) if lo_strats.contains(&s))) {
            lower.extend_from_slice(&c.enc);
        }
        if let Some(c) = conds.iter().find(|c| c.col == col && matches!(c.kind, CondKind::Cmp(s) if hi_strats.contains(&s))) {
            upper.extend_from_slice(&c.enc);
        }
        break;
    }
}

impl ScanState {
    /// A comparison condition on `col` with argument `d`, in buffers of an
    /// earlier scan key when there are any (a rescan allocates nothing).
    unsafe fn cmp_cond(&mut self, col: usize, strategy: u16, d: pg_sys::Datum, subtype: pg_sys::Oid) -> Cond {
        let mut c = self.cond_pool.pop().unwrap_or(Cond { col, kind: CondKind::IsNotNull, enc: Vec::new(), raw: Vec::new() });
        c.col = col;
        c.kind = CondKind::Cmp(strategy);
        c.enc.clear();
        c.raw.clear();
        let desc = &self.desc;
        let typid = if subtype == pg_sys::InvalidOid { desc.cols[col].typid } else { subtype };
        desc.encode_value(col, typid, d, &mut c.enc);
        if desc.cols[col].kind == ColumnKind::Opaque {
            c.raw.extend_from_slice(crate::keys::varlena_bytes(d));
        }
        c
    }

    unsafe fn preprocess(&mut self, keys: &[pg_sys::ScanKeyData]) {
        self.cond_pool.append(&mut self.fixed);
        // An IN list's conditions too: TPC-C's New-Order looks up 5 to 15
        // items by `i_id IN (...)` in each transaction.
        for a in self.arrays.drain(..) {
            self.cond_pool.extend(a.elems);
        }
        self.impossible = false;
        for k in keys {
            let col = (k.sk_attno - 1) as usize;
            let flags = k.sk_flags as u32;
            if flags & pg_sys::SK_SEARCHNULL != 0 {
                let mut enc = Vec::new();
                ck::enc_null(&mut enc, self.desc.cols[col].order);
                self.fixed.push(Cond { col, kind: CondKind::IsNull, enc, raw: Vec::new() });
                continue;
            }
            if flags & pg_sys::SK_SEARCHNOTNULL != 0 {
                self.fixed.push(Cond { col, kind: CondKind::IsNotNull, enc: Vec::new(), raw: Vec::new() });
                continue;
            }
            if flags & pg_sys::SK_ISNULL != 0 {
                self.impossible = true;
                continue;
            }
            if flags & pg_sys::SK_ROW_HEADER != 0 {
                pgrx::ereport!(
                    ERROR,
                    PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED,
                    "pg_hybrid indexes do not support row comparison scan keys"
                );
            }
            let strategy = k.sk_strategy;
            if flags & pg_sys::SK_SEARCHARRAY != 0 {
                let arr = pg_sys::pg_detoast_datum(k.sk_argument.cast_mut_ptr()) as *mut pg_sys::ArrayType;
                let elemtype = (*arr).elemtype;
                let (mut typlen, mut byval, mut align) = (0i16, false, 0 as std::os::raw::c_char);
                pg_sys::get_typlenbyvalalign(elemtype, &mut typlen, &mut byval, &mut align);
                let mut elems: *mut pg_sys::Datum = std::ptr::null_mut();
                let mut nulls: *mut bool = std::ptr::null_mut();
                let mut n = 0i32;
                pg_sys::deconstruct_array(arr, elemtype, typlen as i32, byval, align, &mut elems, &mut nulls, &mut n);
                let mut conds = Vec::new();
                for i in 0..n as usize {
                    if *nulls.add(i) {
                        continue;
                    }
                    conds.push(self.cmp_cond(col, strategy, *elems.add(i), elemtype));
                }
                if conds.is_empty() {
                    self.impossible = true;
                    continue;
                }
                let desc = self.desc.clone();
                let cmp_elems = |a: &Cond, b: &Cond| {
                    // Physical order of the column: encodings compare in it.
                    if desc.cols[col].kind == ColumnKind::Opaque {
                        let o = desc.opaque_cmp(col, &a.raw, &b.raw);
                        if desc.cols[col].order.desc { o.reverse() } else { o }
                    } else {
                        a.enc.cmp(&b.enc)
                    }
                };
                conds.sort_by(|a, b| cmp_elems(a, b));
                conds.dedup_by(|a, b| cmp_elems(a, b) == Ordering::Equal);
                if strategy == 3 {
                    self.arrays.push(ArrayKey { elems: conds });
                } else {
                    // x < ANY(a) is x < max(a); x > ANY(a) is x > min(a) (logical order).
                    let want_max = matches!(strategy, 1 | 2);
                    let phys_last = want_max != self.desc.cols[col].order.desc;
                    let c = if phys_last { conds.pop().unwrap() } else { conds.swap_remove(0) };
                    self.fixed.push(c);
                }
                continue;
            }
            let c = self.cmp_cond(col, strategy, k.sk_argument, k.sk_subtype);
            self.fixed.push(c);
        }
        self.nsub = self.arrays.iter().map(|a| a.elems.len()).product::<usize>().max(1);
        if self.impossible {
            self.nsub = 0;
        }
    }

    /// The conditions of subscan `sub` into `conds` (reusing its buffers).
    fn sub_conds_into(&self, sub: usize, conds: &mut Vec<Cond>) {
        // Mixed radix with the first array most significant, so subscans
        // follow index order on the leading array column.
        let mut rest = sub;
        let mut pick_buf = [0usize; 32];
        let mut pick_vec;
        let picks: &mut [usize] = if self.arrays.len() <= pick_buf.len() {
            &mut pick_buf[..self.arrays.len()]
        } else {
            pick_vec = vec![0; self.arrays.len()];
            &mut pick_vec
        };
        for (i, a) in self.arrays.iter().enumerate().rev() {
            picks[i] = rest % a.elems.len();
            rest /= a.elems.len();
        }
        let wanted = self.fixed.iter().chain(self.arrays.iter().zip(picks.iter()).map(|(a, &j)| &a.elems[j]));
        let mut n = 0;
        for c in wanted {
            match conds.get_mut(n) {
                Some(slot) => slot.assign(c),
                None => conds.push(c.clone()),
            }
            n += 1;
        }
        conds.truncate(n);
    }

    /// Closes the current cursor, keeping it for the next one.
    fn close_cursor(&mut self) {
        if let Some(mut old) = self.cur.take() {
            old.close(&self.desc);
            self.spare = Some(old);
        }
    }

    /// Opens the cursor of subscan `sub`, in the last closed cursor's
    /// buffers when there is one.
    unsafe fn open_cursor(&mut self, index: pg_sys::Relation, sub: usize, dir: Dir) -> Box<Cursor> {
        let mut spare = self.spare.take();
        let held = spare.as_mut().and_then(|c| c.reader.take());
        let mut conds = spare.as_mut().map(|c| std::mem::take(&mut c.conds)).unwrap_or_default();
        let mut lower = spare.as_mut().map(|c| std::mem::take(&mut c.lower)).unwrap_or_default();
        let mut upper = spare.as_mut().and_then(|c| c.upper.take()).unwrap_or_default();
        self.sub_conds_into(sub, &mut conds);
        bounds_into(&self.desc, &conds, &mut lower, &mut upper);
        let upper = if upper.is_empty() { None } else { Some(upper) };
        let desc = &self.desc;
        // Equality on every key column: one key, the range a hash path
        // answers; its bytes' hash, when they are canonical, for the Bloom
        // filter and the key filter.
        let point = (0..desc.nkeyatts).all(|c| conds.iter().any(|x| x.col == c && matches!(x.kind, CondKind::Cmp(3)))) && upper.as_deref() == Some(&lower[..]);
        let point_hash = if point && desc.hashable { Some(pg_hybrid_core::bloom::key_hash(&lower)) } else { None };
        let start = state::start_scan(index, desc, self.slot, point_hash, held);
        self.killed_epoch = start.base.vacuum_epoch;
        // SIREAD locks on the range (or where a wide one starts) before
        // reading it (predlock.rs).
        let locks = predlock::lock_scan(index, self.slot, start.lockmap, &lower, upper.as_deref(), dir == Dir::Fwd, self.snapshot);
        let none = skip_dynamic(start.dynamic_may_contain);
        let hot = if point { ams::base(index).hot_tier(index) } else { None };
        match spare {
            Some(mut c) => {
                c.hot = hot;
                c.base_skipped = false;
                c.info = start.base;
                c.base.reopen(index, &start.base);
                c.keyless = if c.base.keyless() && !self.want_keys { keyless_bounds(desc, &conds) } else { None };
                c.implied = bounds_imply(desc, &conds);
                c.dynamic.reset(start.base.generation, start.base.merged_upto, &lower, upper.as_deref(), none);
                c.conds = conds;
                c.lower = lower;
                c.upper = upper;
                c.memo.valid = false;
                c.reader = Some(start.reader);
                c.returned = None;
                c.point_hash = point_hash;
                c.point = point;
                c.locks = locks;
                c
            }
            None => {
                let base = ams::base(index).cursor(index, desc, &start.base);
                let keyless = if base.keyless() && !self.want_keys { keyless_bounds(desc, &conds) } else { None };
                let dynamic = DynReader::new(self.slot, desc.clone(), start.base.generation, start.base.merged_upto, &lower, upper.as_deref(), none);
                Box::new(Cursor {
                    keyless,
                    implied: bounds_imply(desc, &conds),
                    base,
                    conds,
                    lower,
                    upper,
                    dynamic,
                    memo: MatchMemo::default(),
                    slot: self.slot,
                    reader: Some(start.reader),
                    returned: None,
                    point_hash,
                    point,
                    from_dynamic: false,
                    dead_seen: DeadSeen::default(),
                    hot,
                    base_skipped: false,
                    info: start.base,
                    locks,
                })
            }
        }
    }
}

impl Cursor {
    /// Positions at the first item of the range in `dir`.
    unsafe fn start(&mut self, index: pg_sys::Relation, desc: &IndexDesc, dir: Dir) {
        let (conds, implied, lower, upper) = (&self.conds, self.implied, &self.lower, self.upper.as_deref());
        self.dynamic.start(index, dir, &mut |k| passes(desc, implied, conds, lower, upper, k));
        self.memo.valid = false;
        self.returned = None;
        self.base_skipped = false;
        if let Some(hot) = self.hot {
            self.slot.state().hot.point_reads.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            if self.dynamic.complete() {
                // The hot tier holds every entry of the key: no page of
                // the cold tier is read.
                self.base_skipped = true;
                return;
            }
            if dir == Dir::Fwd && super::hot::sampled(super::hot::promotion_rate(self.slot.state(), &hot)) {
                super::hot::promote(self.slot, desc, &mut *self.base, &self.info, &self.lower, &hot);
            }
        }
        match self.keyless {
            Some((ls, us)) => {
                // A missing bound is the edge of the non-NULL keys: every
                // non-NULL key of a one-column index starts with
                // MARK_VALUE, NULLs with a marker below or above it.
                let (lo, ls) = if self.lower.is_empty() { (vec![ck::MARK_VALUE], false) } else { (self.lower.clone(), ls) };
                let (hi, us) = match &self.upper {
                    Some(u) => (u.clone(), us),
                    None => (vec![ck::MARK_NULL_LAST], true),
                };
                self.base.start(dir, &ScanRange { lower: &lo, upper: Some(&hi), whole_key: true, strict: (ls, us), point: self.point });
            }
            None => self.base.start(dir, &ScanRange { lower: &self.lower, upper: self.upper.as_deref(), whole_key: desc.natts == 1, strict: (false, false), point: self.point }),
        }
    }

    /// Positions strictly after (key, tid) in `dir` (or at it when `inclusive`).
    unsafe fn seek_after(&mut self, index: pg_sys::Relation, desc: &IndexDesc, dir: Dir, key: &[u8], tid: Tid) {
        let (conds, implied, lower, upper) = (&self.conds, self.implied, &self.lower, self.upper.as_deref());
        self.dynamic.seek_after(index, dir, key, tid, &mut |k| passes(desc, implied, conds, lower, upper, k));
        self.memo.valid = false;
        // Both tiers from here on: an entry in both is returned once.
        self.base_skipped = false;
        self.base.seek_range(&ScanRange { lower, upper, whole_key: desc.natts == 1, strict: (false, false), point: self.point });
        self.base.seek_after(dir, key, tid, false);
        self.returned = Some(tid);
    }

    /// A merge moved the dynamic stage into a new generation of the base
    /// structure: both streams are opened again in it, after the last item
    /// returned (or at the range's start).
    unsafe fn reseek(&mut self, index: pg_sys::Relation, desc: &Rc<IndexDesc>, dir: Dir, last_key: &[u8]) {
        let start = state::start_scan(index, desc, self.slot, self.point_hash, None);
        state::add_key_fetches(self.slot, self.base.key_fetches());
        self.base = ams::base(index).cursor(index, desc, &start.base);
        self.info = start.base;
        self.reader = Some(start.reader);
        self.dynamic.reset(start.base.generation, start.base.merged_upto, &self.lower, self.upper.as_deref(), skip_dynamic(start.dynamic_may_contain));
        match self.returned {
            Some(t) => {
                let k = self.key_for_seek(index, last_key, t);
                self.seek_after(index, desc, dir, &k, t);
            }
            None => self.start(index, desc, dir),
        }
    }

    /// The key of the last item returned, for a re-seek: items returned
    /// without keys (`keyless`) have theirs read from the heap now. The
    /// item was returned to this scan, so its tuple cannot have been pruned
    /// unless it was dead to the scan's snapshot too.
    unsafe fn key_for_seek(&mut self, index: pg_sys::Relation, key: &[u8], tid: Tid) -> Vec<u8> {
        if !key.is_empty() {
            return key.to_vec();
        }
        match self.base.key_of(tid) {
            Some(k) => k,
            None => crate::raise(
                PgSqlErrorCode::ERRCODE_T_R_SERIALIZATION_FAILURE,
                format!("index \"{}\": the scan position's heap tuple was pruned", crate::storage::page::rel_name(index)),
                "Run the statement again.",
            ),
        }
    }

    /// Moves the base cursor to its next entry in range that matches the
    /// conditions, and returns it (None at the end of the range).
    unsafe fn settle_base(&mut self, desc: &IndexDesc, dir: Dir) -> Option<(&[u8], Tid)> {
        if self.base_skipped {
            return None;
        }
        loop {
            let (k, _) = self.base.peek(dir)?;
            let out_of_range = match dir {
                Dir::Fwd => self.upper.as_ref().is_some_and(|u| desc.compare_prefix(k, u) == Ordering::Greater),
                Dir::Bwd => !self.lower.is_empty() && desc.compare_prefix(k, &self.lower) == Ordering::Less,
            };
            if out_of_range {
                self.base.stop();
                return None;
            }
            let memo = &mut self.memo;
            let ok = if self.implied.is_some() {
                passes(desc, self.implied, &self.conds, &self.lower, self.upper.as_deref(), k)
            } else if memo.valid && memo.key == k {
                memo.matched
            } else {
                memo.key.clear();
                memo.key.extend_from_slice(k);
                memo.valid = true;
                memo.matched = matches(desc, &self.conds, k);
                memo.matched
            };
            if ok {
                return self.base.peek(dir);
            }
            self.base.advance(dir);
        }
    }

    /// The next (key, TID) in `dir`: the key goes to `key_out` (left empty
    /// for keyless items), which holds the previous item's key on entry.
    /// None at the end of the range.
    unsafe fn next(&mut self, index: pg_sys::Relation, desc: &Rc<IndexDesc>, dir: Dir, key_out: &mut Vec<u8>) -> Option<Tid> {
        if !self.locks.progressive() {
            let t = self.next_inner(index, desc, dir, key_out);
            if t.is_some() {
                self.returned = t;
            }
            return t;
        }
        // A wide SERIALIZABLE range: what the streams found may lie past
        // the partitions locked so far. Lock up to it, then read again from
        // the last item returned (predlock::ScanLocks).
        let prev_key = key_out.clone();
        loop {
            let t = self.next_inner(index, desc, dir, key_out);
            let found = t.map(|_| if key_out.is_empty() { None } else { Some(desc.keycols(key_out)) });
            let Some(needed) = self.locks.needs(found, dir == Dir::Fwd) else {
                if t.is_some() {
                    self.returned = t;
                }
                return t;
            };
            self.locks.extend(index, needed);
            key_out.clear();
            key_out.extend_from_slice(&prev_key);
            match self.returned {
                Some(rt) => {
                    let k = self.key_for_seek(index, &prev_key, rt);
                    self.seek_after(index, desc, dir, &k, rt);
                }
                None => self.start(index, desc, dir),
            }
        }
    }

    unsafe fn next_inner(&mut self, index: pg_sys::Relation, desc: &Rc<IndexDesc>, dir: Dir, key_out: &mut Vec<u8>) -> Option<Tid> {
        // The dynamic side first: a refill may find the stage merged.
        let (conds, implied, lower, upper) = (&self.conds, self.implied, &self.lower, self.upper.as_deref());
        let mut filter = |k: &[u8]| passes(desc, implied, conds, lower, upper, k);
        if let DynPeek::Stale = self.dynamic.peek(index, &mut filter) {
            self.reseek(index, desc, dir, key_out);
            return self.next_inner(index, desc, dir, key_out);
        }
        if self.keyless.is_some() && dir == Dir::Fwd && !self.base_skipped && self.dynamic.exhausted() && self.base.bounded_forward() {
            // Past the dynamic entries: the structure's entries in the
            // searched range, in order, without keys.
            let t = self.base.peek_tid()?;
            self.base.advance(dir);
            key_out.clear();
            self.from_dynamic = false;
            return Some(t);
        }
        let from_base = match self.settle_base(desc, dir) {
            Some((k, t)) => {
                key_out.clear();
                key_out.extend_from_slice(k);
                Some(t)
            }
            None => None,
        };
        let (conds, implied, lower, upper) = (&self.conds, self.implied, &self.lower, self.upper.as_deref());
        let mut filter = |k: &[u8]| passes(desc, implied, conds, lower, upper, k);
        let d = match self.dynamic.peek(index, &mut filter) {
            DynPeek::Item(k, t) => Some((k, t)),
            DynPeek::End => None,
            DynPeek::Stale => unreachable!("checked above; no refill happens in between"),
        };
        let take_base = match (from_base, d) {
            (None, None) => return None,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (Some(bt), Some((dk, dt))) => {
                let o = desc.compare(key_out, dk).then(bt.cmp(&dt));
                if dir == Dir::Fwd { o != Ordering::Greater } else { o != Ordering::Less }
            }
        };
        if take_base {
            let t = from_base.unwrap();
            // An entry present in both stages (re-inserted TID) is returned once.
            let dup = d.is_some_and(|(dk, dt)| dt == t && desc.compare(dk, key_out) == Ordering::Equal);
            if dup {
                self.dynamic.advance();
            }
            self.base.advance(dir);
            self.from_dynamic = false;
            Some(t)
        } else {
            let (k, t) = d.unwrap();
            key_out.clear();
            key_out.extend_from_slice(k);
            self.dynamic.advance();
            self.from_dynamic = true;
            Some(t)
        }
    }
}

impl ScanState {
    /// Next item of the whole scan in `dir`; its key is in `last_key`.
    unsafe fn next_item(&mut self, index: pg_sys::Relation, dir: Dir) -> Option<Tid> {
        if self.nsub == 0 {
            return None;
        }
        let desc = self.desc.clone();
        if !self.started || self.exhausted && self.cur.is_none() {
            // A fresh scan, or a scan restarted after running off an end.
            if !self.started {
                crate::storage::pgstat::count_scan(index);
            }
            self.started = true;
            self.exhausted = false;
            self.sub = if dir == Dir::Fwd { 0 } else { self.nsub as isize - 1 };
            self.close_cursor();
            let mut c = self.open_cursor(index, self.sub as usize, dir);
            c.start(index, &desc, dir);
            self.cur = Some(c);
            self.dir = dir;
        } else if dir != self.dir {
            self.dir = dir;
            if let (Some(c), Some(t)) = (self.cur.as_mut(), self.last_tid) {
                let k = c.key_for_seek(index, &self.last_key, t);
                c.seek_after(index, &desc, dir, &k, t);
            }
        }
        loop {
            let c = self.cur.as_mut()?;
            if let Some(t) = c.next(index, &desc, dir, &mut self.last_key) {
                self.last_tid = Some(t);
                if self.skip_killed && super::killed::is_marked(self.slot, t, self.killed_epoch) {
                    // Dead to all: what btree's LP_DEAD items are.
                    c.note_dead(&self.last_key);
                    continue;
                }
                return Some(t);
            }
            let next_sub = self.sub + dir.step();
            if next_sub < 0 || next_sub >= self.nsub as isize {
                self.close_cursor();
                self.exhausted = true;
                self.started = true;
                return None;
            }
            self.sub = next_sub;
            self.close_cursor();
            let mut c = self.open_cursor(index, self.sub as usize, dir);
            c.start(index, &desc, dir);
            self.cur = Some(c);
        }
    }
}

/// Whether a cursor may leave the dynamic stage unread: it was empty (or
/// the Bloom filter ruled the key out) when the scan started. Not under
/// SERIALIZABLE: the SIREAD locks are taken after that look, and an entry
/// inserted in between has met no lock, so the scan must read it (and meet
/// its writer through the heap tuple).
fn skip_dynamic(dynamic_may_contain: bool) -> bool {
    !dynamic_may_contain && !predlock::serializable()
}

unsafe fn state<'a>(scan: pg_sys::IndexScanDesc) -> &'a mut ScanState {
    &mut *((*scan).opaque as *mut ScanState)
}

thread_local! {
    /// Scans this backend ended lately, kept whole: the next scan of the
    /// index takes one instead of building its state, cursor,
    /// base cursor and buffers again, and finding its description and slot.
    /// An OLTP statement scans an index once; a scan's setup and teardown then
    /// cost as much as a probe through the hash path (about 1 µs of griffin's
    /// 2.6 against btree's 0.1).
    ///
    /// What a kept scan holds is what a rescan keeps: no pins, no locks, no
    /// snapshot (its cursor is parked). Pointers into the ended scan (its
    /// relation, its memory context) are replaced when it is taken: the
    /// relcache entry may have been rebuilt meanwhile. Its reader registration
    /// stays until the transaction ends (readers.rs), so the statements of one
    /// transaction register once. Kept in a `ManuallyDrop`: dropping scans
    /// while the backend's thread-locals are torn down at exit would reach for
    /// the others (the window pool, the reader table) and shared memory.
    static WARM: std::mem::ManuallyDrop<std::cell::RefCell<Vec<Box<ScanState>>>> =
        const { std::mem::ManuallyDrop::new(std::cell::RefCell::new(Vec::new())) };
}

/// Scans a backend keeps warm, in all. TPC-C's transactions touch about a
/// dozen indexes, and its `(a, b) IN ((..), ...)` lists are BitmapOrs with
/// one scan per element, all open at once: New-Order's of stock's key (5 to
/// 15 items), Delivery's of orders' and order_line's (one per district).
/// Keeping one scan per index built and dropped the others in every such
/// statement (about 5 µs of a TPC-C transaction's 900).
const WARM_SCANS: usize = 64;
/// Scans kept of one index, so one wide BitmapOr does not push out every
/// other index's.
const WARM_PER_INDEX: usize = 32;

unsafe fn rel_key(index: pg_sys::Relation) -> (u32, u32) {
    ((*index).rd_id.to_u32(), (*index).rd_node.relNode.to_u32())
}

/// The kept scan of `index` that ended last, if there is one and its slot
/// still holds the index.
unsafe fn take_warm(index: pg_sys::Relation) -> Option<Box<ScanState>> {
    let key = rel_key(index);
    let st = WARM.with(|w| {
        let mut w = w.borrow_mut();
        let i = w.iter().rposition(|s| s.rel_key == key)?;
        Some(w.remove(i))
    })?;
    // A scan dropped here deregisters its reader (after the borrow).
    shmem::registry::still_for(index, st.slot).then_some(st)
}

/// Keeps an ended scan for a later scan of its index. The list is in the
/// order scans ended; what it drops to make room is the scan of the same
/// index that ended longest ago when the index has `WARM_PER_INDEX`, else
/// the scan that ended longest ago.
fn keep_warm(st: Box<ScanState>) {
    let evicted = WARM.with(|w| {
        let mut w = w.borrow_mut();
        let same = w.iter().filter(|s| s.rel_key == st.rel_key).count();
        let evicted = if same >= WARM_PER_INDEX {
            w.iter().position(|s| s.rel_key == st.rel_key).map(|i| w.remove(i))
        } else if w.len() >= WARM_SCANS {
            Some(w.remove(0))
        } else {
            None
        };
        w.push(st);
        evicted
    });
    // Dropped after the borrow: its reader may deregister.
    drop(evicted);
}

#[pg_guard]
pub unsafe extern "C-unwind" fn ambeginscan(index: pg_sys::Relation, nkeys: i32, norderbys: i32) -> pg_sys::IndexScanDesc {
    crate::require_preload();
    let scan = pg_sys::RelationGetIndexScan(index, nkeys, norderbys);
    let st = match take_warm(index) {
        Some(mut st) => {
            st.scan_cxt = pg_sys::CurrentMemoryContext;
            st
        }
        None => new_scan_state(index),
    };
    (*scan).opaque = Box::into_raw(st) as *mut std::ffi::c_void;
    (*scan).xs_itupdesc = (*index).rd_att;
    scan
}

unsafe fn new_scan_state(index: pg_sys::Relation) -> Box<ScanState> {
    let desc = index_desc(index);
    let slot = shmem::slot_for(index);
    Box::new(ScanState {
        rel_key: rel_key(index),
        desc,
        slot,
        fixed: Vec::new(),
        arrays: Vec::new(),
        impossible: false,
        nsub: 1,
        sub: 0,
        cur: None,
        spare: None,
        cond_pool: Vec::new(),
        dir: Dir::Fwd,
        last_key: Vec::new(),
        last_tid: None,
        exhausted: false,
        started: false,
        mark: None,
        tuple_cxt: std::ptr::null_mut(),
        scan_cxt: pg_sys::CurrentMemoryContext,
        itup_layout: None,
        snapshot: std::ptr::null_mut(),
        want_keys: true,
        killed_epoch: 0,
        skip_killed: false,
        prior_tid: None,
    })
}

#[pg_guard]
pub unsafe extern "C-unwind" fn amrescan(
    scan: pg_sys::IndexScanDesc,
    keys: pg_sys::ScanKey,
    nkeys: i32,
    _orderbys: pg_sys::ScanKey,
    _norderbys: i32,
) {
    let st = state(scan);
    if !keys.is_null() && nkeys > 0 && (*scan).numberOfKeys > 0 {
        std::ptr::copy(keys, (*scan).keyData, (*scan).numberOfKeys as usize);
    }
    let ks = if (*scan).numberOfKeys > 0 {
        std::slice::from_raw_parts((*scan).keyData, (*scan).numberOfKeys as usize)
    } else {
        &[]
    };
    st.close_cursor();
    st.preprocess(ks);
    st.last_tid = None;
    st.prior_tid = None;
    st.started = false;
    st.exhausted = false;
    st.mark = None;
}

#[pg_guard]
pub unsafe extern "C-unwind" fn amgettuple(scan: pg_sys::IndexScanDesc, direction: pg_sys::ScanDirection::Type) -> bool {
    let st = state(scan);
    let dir = if direction == pg_sys::ScanDirection::BackwardScanDirection { Dir::Bwd } else { Dir::Fwd };
    let index = (*scan).indexRelation;
    st.want_keys = (*scan).xs_want_itup;
    st.snapshot = (*scan).xs_snapshot;
    if (*scan).kill_prior_tuple {
        if let Some(t) = st.prior_tid {
            super::killed::mark(st.slot, t, st.killed_epoch);
        }
    }
    st.skip_killed = super::killed::usable(scan);
    let Some(tid) = st.next_item(index, dir) else {
        st.prior_tid = None;
        return false;
    };
    st.prior_tid = Some(tid);
    (*scan).xs_heaptid = tid_to_item(tid);
    (*scan).xs_recheck = false;
    if (*scan).xs_want_itup {
        // An index has at most INDEX_MAX_KEYS (32) columns.
        let n = st.desc.natts.min(32);
        let mut values = [pg_sys::Datum::from(0usize); 32];
        let mut nulls = [true; 32];
        st.desc.decode(&st.last_key, &mut values[..n], &mut nulls[..n]);
        let layout = st.itup_layout.get_or_insert_with(|| FixedTuple::of((*index).rd_att));
        match layout.form(&values[..n], &nulls[..n]) {
            Some(t) => (*scan).xs_itup = t,
            None => {
                if st.tuple_cxt.is_null() {
                    st.tuple_cxt = pg_sys::AllocSetContextCreateExtended(
                        st.scan_cxt,
                        c"pg_hybrid index-only tuples".as_ptr(),
                        pg_sys::ALLOCSET_SMALL_MINSIZE as usize,
                        pg_sys::ALLOCSET_SMALL_INITSIZE as usize,
                        pg_sys::ALLOCSET_SMALL_MAXSIZE as usize,
                    );
                } else {
                    pg_sys::MemoryContextReset(st.tuple_cxt);
                }
                let old = pg_sys::MemoryContextSwitchTo(st.tuple_cxt);
                (*scan).xs_itup = pg_sys::index_form_tuple((*index).rd_att, values.as_mut_ptr(), nulls.as_mut_ptr());
                pg_sys::MemoryContextSwitchTo(old);
            }
        }
    }
    true
}

/// The IndexTuple of an index whose columns are all fixed-length and
/// passed by value (int2/4/8, float, date, timestamp, ...), formed in
/// place as `index_form_tuple` would form it for a row without NULLs:
/// an index-only scan returns a tuple per row, and a palloc, a size
/// computation and a fill per row cost index-only probes and ranges more
/// than btree pays to point into its page. `xs_itup` stays valid until
/// the next amgettuple, as the API asks.
pub struct FixedTuple {
    /// (offset from the tuple's start, attlen) of each column; None when
    /// some column is not fixed-length by value.
    cols: Option<Vec<(usize, i16)>>,
    buf: Box<[u64]>,
}

impl FixedTuple {
    unsafe fn of(tupdesc: pg_sys::TupleDesc) -> FixedTuple {
        let natts = (*tupdesc).natts as usize;
        // Data starts at MAXALIGN(sizeof(IndexTupleData)) without a null bitmap.
        let mut off = 8usize;
        let mut cols = Vec::with_capacity(natts);
        for i in 0..natts {
            let a = &*(*tupdesc).attrs.as_ptr().add(i);
            if !a.attbyval || !matches!(a.attlen, 1 | 2 | 4 | 8) {
                return FixedTuple { cols: None, buf: Box::new([]) };
            }
            let align = match a.attalign as u8 {
                b'c' => 1,
                b's' => 2,
                b'i' => 4,
                _ => 8,
            };
            off = off.div_ceil(align) * align;
            cols.push((off, a.attlen));
            off += a.attlen as usize;
        }
        let size = off.div_ceil(8) * 8;
        FixedTuple { cols: Some(cols), buf: vec![0u64; size / 8].into_boxed_slice() }
    }

    /// The formed tuple, or None (NULLs, or columns this cannot form).
    unsafe fn form(&mut self, values: &[pg_sys::Datum], nulls: &[bool]) -> Option<pg_sys::IndexTuple> {
        let cols = self.cols.as_ref()?;
        if nulls.iter().any(|&n| n) {
            return None;
        }
        let size = self.buf.len() * 8;
        let b = std::slice::from_raw_parts_mut(self.buf.as_mut_ptr() as *mut u8, size);
        b.fill(0);
        // t_tid stays zero (index_form_tuple leaves it for the caller);
        // t_info is the size: no null bitmap, no variable-width column.
        b[6..8].copy_from_slice(&(size as u16).to_ne_bytes());
        for (&(off, len), v) in cols.iter().zip(values) {
            let d = v.value() as u64;
            match len {
                1 => b[off] = d as u8,
                2 => b[off..off + 2].copy_from_slice(&(d as u16).to_ne_bytes()),
                4 => b[off..off + 4].copy_from_slice(&(d as u32).to_ne_bytes()),
                _ => b[off..off + 8].copy_from_slice(&d.to_ne_bytes()),
            }
        }
        Some(self.buf.as_mut_ptr() as pg_sys::IndexTuple)
    }
}

#[pg_guard]
pub unsafe extern "C-unwind" fn amgetbitmap(scan: pg_sys::IndexScanDesc, tbm: *mut pg_sys::TIDBitmap) -> i64 {
    let st = state(scan);
    let index = (*scan).indexRelation;
    st.close_cursor();
    st.started = false;
    st.want_keys = false;
    st.snapshot = (*scan).xs_snapshot;
    st.skip_killed = super::killed::usable(scan);
    let mut n = 0i64;
    let mut batch: Vec<pg_sys::ItemPointerData> = Vec::with_capacity(256);
    while let Some(tid) = st.next_item(index, Dir::Fwd) {
        batch.push(tid_to_item(tid));
        n += 1;
        if batch.len() == 256 {
            pg_sys::tbm_add_tuples(tbm, batch.as_mut_ptr(), batch.len() as i32, false);
            batch.clear();
            pg_sys::check_for_interrupts!();
        }
    }
    if !batch.is_empty() {
        pg_sys::tbm_add_tuples(tbm, batch.as_mut_ptr(), batch.len() as i32, false);
    }
    n
}

#[pg_guard]
pub unsafe extern "C-unwind" fn amendscan(scan: pg_sys::IndexScanDesc) {
    let p = (*scan).opaque as *mut ScanState;
    if !p.is_null() {
        let mut st = Box::from_raw(p);
        (*scan).opaque = std::ptr::null_mut();
        st.close_cursor();
        if !st.tuple_cxt.is_null() {
            pg_sys::MemoryContextDelete(st.tuple_cxt);
            st.tuple_cxt = std::ptr::null_mut();
        }
        // No pointer of this scan's may reach the next (take_warm); the
        // position is reset by the next scan's amrescan, which comes before
        // any read.
        st.scan_cxt = std::ptr::null_mut();
        st.snapshot = std::ptr::null_mut();
        if let Some(c) = st.spare.as_mut() {
            c.locks = predlock::ScanLocks::Complete;
        }
        keep_warm(st);
    }
}

#[pg_guard]
pub unsafe extern "C-unwind" fn ammarkpos(scan: pg_sys::IndexScanDesc) {
    let st = state(scan);
    let last = st.last_tid.map(|t| (st.last_key.clone(), t));
    st.mark = Some(Mark { sub: st.sub, last, exhausted: st.exhausted });
}

#[pg_guard]
pub unsafe extern "C-unwind" fn amrestrpos(scan: pg_sys::IndexScanDesc) {
    let st = state(scan);
    let index = (*scan).indexRelation;
    let Some(mark) = st.mark.clone() else {
        pgrx::error!("restore without a marked position");
    };
    st.exhausted = mark.exhausted;
    match mark.last {
        None => {
            st.last_tid = None;
            st.close_cursor();
            st.started = false;
        }
        Some((k, t)) => {
            st.last_key.clear();
            st.last_key.extend_from_slice(&k);
            st.last_tid = Some(t);
            if mark.exhausted {
                st.close_cursor();
            } else {
                st.sub = mark.sub;
                let desc = st.desc.clone();
                st.close_cursor();
                let mut c = st.open_cursor(index, mark.sub as usize, st.dir);
                let k = c.key_for_seek(index, &k, t);
                c.seek_after(index, &desc, st.dir, &k, t);
                st.cur = Some(c);
            }
            st.started = true;
        }
    }
}

#[pg_guard]
pub unsafe extern "C-unwind" fn amcanreturn(index: pg_sys::Relation, attno: i32) -> bool {
    let desc = index_desc(index);
    ams::base(index).can_return(index, &desc, attno)
}

