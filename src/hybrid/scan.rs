//! Index scans: amgettuple (both directions), amgetbitmap, mark/restore,
//! array keys, NULL searches and index-only scans.
//!
//! A scan is a sequence of *subscans*, one per combination of `= ANY(array)`
//! elements (taken in index order, so output stays ordered when the array is
//! on the leading column). A subscan copies the matching dynamic-stage
//! entries out of shared memory together with the static stage they
//! complement (state::snapshot) and merges them with a walk over static
//! leaves, emitting (key, TID) pairs in index order. The position is the
//! last pair returned, so mark/restore and direction changes re-seek by key.

use std::cmp::Ordering;
use std::rc::Rc;

use pg_hybrid_core::keys::{self as ck, ColumnKind};
use pg_hybrid_core::tid::Tid;
use pgrx::pg_sys;
use pgrx::prelude::*;

use super::build::tid_to_item;
use super::meta::StaticInfo;
use super::state;
use super::static_io::{self, LeafData};
use crate::keys::{index_desc, IndexDesc};
use crate::shmem::{self, SlotRef};
use crate::storage::page::NO_BLOCK;

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

struct ArrayKey {
    elems: Vec<Cond>,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Dir {
    Fwd,
    Bwd,
}

struct StaticCursor {
    leaf: Option<LeafData>,
    ei: isize,
    ti: isize,
    done: bool,
    checked: Option<(u32, isize)>,
}

struct Cursor {
    conds: Vec<Cond>,
    lower: Vec<u8>,
    upper: Option<Vec<u8>>,
    stat: StaticInfo,
    dyn_items: Vec<(Vec<u8>, Tid)>,
    dyn_pos: isize,
    st: StaticCursor,
    /// elastic_btree: the tree cursor that stands in for `st`.
    el: Option<crate::elastic::scan::ElasticCursor>,
    /// elastic_btree: the bounds say everything the conditions say, so
    /// forward items past the dynamic stage can come without keys (compact
    /// leaves then read no key per entry). Some((lower strict, upper strict)).
    keyless: Option<(bool, bool)>,
    /// Registered reader of `stat`'s generation for as long as the cursor
    /// lives, so its pages are not recycled under it (readers.rs).
    _reader: super::readers::ReaderToken,
}

pub struct ScanState {
    desc: Rc<IndexDesc>,
    slot: SlotRef,
    base: Vec<Cond>,
    arrays: Vec<ArrayKey>,
    impossible: bool,
    nsub: usize,
    sub: isize,
    cur: Option<Cursor>,
    dir: Dir,
    last: Option<(Vec<u8>, Tid)>,
    exhausted: bool,
    started: bool,
    mark: Option<(isize, Option<(Vec<u8>, Tid)>, bool)>,
    tuple_cxt: pg_sys::MemoryContext,
    /// Items must carry their keys (index-only scans).
    want_keys: bool,
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

/// For a one-column index: Some((lower strict, upper strict)) when the
/// conditions are exactly one equality, or a lower and/or an upper bound,
/// on the column, so an entry between the bounds' positions matches
/// without looking at its key. NULLs sort outside the bounds.
fn implied_bounds(desc: &IndexDesc, conds: &[Cond]) -> Option<(bool, bool)> {
    if desc.natts != 1 || conds.iter().any(|c| c.col != 0 || !matches!(c.kind, CondKind::Cmp(_))) {
        return None;
    }
    let strat = |c: &Cond| match c.kind {
        CondKind::Cmp(s) => s,
        _ => 0,
    };
    if conds.len() == 1 && strat(&conds[0]) == 3 {
        return Some((false, false));
    }
    let desc_col = desc.cols[0].order.desc;
    // Physical lower / upper strategies (a DESC column flips them).
    let (lo, lo_strict, hi_strict) = if desc_col { ([1u16, 2], 1u16, 5u16) } else { ([4u16, 5], 5u16, 1u16) };
    if conds.len() == 1 {
        // One side: the other is the edge of the non-NULL keys
        // (Cursor::start passes it), so NULLs stay out as `matches` would
        // keep them out.
        let a = strat(&conds[0]);
        return Some(if lo.contains(&a) { (a == lo_strict, false) } else { (false, a == hi_strict) });
    }
    if conds.len() != 2 {
        return None;
    }
    let (a, b) = (strat(&conds[0]), strat(&conds[1]));
    let (l, u) = if lo.contains(&a) && !lo.contains(&b) && b != 3 {
        (a, b)
    } else if lo.contains(&b) && !lo.contains(&a) && a != 3 {
        (b, a)
    } else {
        return None;
    };
    Some((l == lo_strict, u == hi_strict))
}

/// Physical lower and upper bound prefixes implied by the conditions.
fn bounds(desc: &IndexDesc, conds: &[Cond]) -> (Vec<u8>, Option<Vec<u8>>) {
    // Equalities on leading columns extend both bounds; the first column
    // without one contributes its range bounds and ends the prefix.
    let mut lower = Vec::new();
    let mut upper = Vec::new();
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
    let upper = if upper.is_empty() { None } else { Some(upper) };
    (lower, upper)
}

impl ScanState {
    unsafe fn encode_arg(&self, col: usize, d: pg_sys::Datum, subtype: pg_sys::Oid) -> (Vec<u8>, Vec<u8>) {
        let desc = &self.desc;
        let typid = if subtype == pg_sys::InvalidOid { desc.cols[col].typid } else { subtype };
        let mut enc = Vec::new();
        desc.encode_value(col, typid, d, &mut enc);
        let raw = if desc.cols[col].kind == ColumnKind::Opaque { crate::keys::varlena_bytes(d).to_vec() } else { Vec::new() };
        (enc, raw)
    }

    unsafe fn preprocess(&mut self, keys: &[pg_sys::ScanKeyData]) {
        self.base.clear();
        self.arrays.clear();
        self.impossible = false;
        for k in keys {
            let col = (k.sk_attno - 1) as usize;
            let flags = k.sk_flags as u32;
            if flags & pg_sys::SK_SEARCHNULL != 0 {
                let mut enc = Vec::new();
                ck::enc_null(&mut enc, self.desc.cols[col].order);
                self.base.push(Cond { col, kind: CondKind::IsNull, enc, raw: Vec::new() });
                continue;
            }
            if flags & pg_sys::SK_SEARCHNOTNULL != 0 {
                self.base.push(Cond { col, kind: CondKind::IsNotNull, enc: Vec::new(), raw: Vec::new() });
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
                    "hybrid_btree does not support row comparison scan keys"
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
                    let (enc, raw) = self.encode_arg(col, *elems.add(i), elemtype);
                    conds.push(Cond { col, kind: CondKind::Cmp(strategy), enc, raw });
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
                    self.base.push(c);
                }
                continue;
            }
            let (enc, raw) = self.encode_arg(col, k.sk_argument, k.sk_subtype);
            self.base.push(Cond { col, kind: CondKind::Cmp(strategy), enc, raw });
        }
        self.nsub = self.arrays.iter().map(|a| a.elems.len()).product::<usize>().max(1);
        if self.impossible {
            self.nsub = 0;
        }
    }

    fn sub_conds(&self, sub: usize) -> Vec<Cond> {
        let mut conds = self.base.clone();
        let mut rest = sub;
        // Mixed radix with the first array most significant, so subscans
        // follow index order on the leading array column.
        let mut idx = vec![0usize; self.arrays.len()];
        for (i, a) in self.arrays.iter().enumerate().rev() {
            idx[i] = rest % a.elems.len();
            rest /= a.elems.len();
        }
        for (i, a) in self.arrays.iter().enumerate() {
            conds.push(a.elems[idx[i]].clone());
        }
        conds
    }

    unsafe fn open_cursor(&self, index: pg_sys::Relation, sub: usize) -> Cursor {
        let conds = self.sub_conds(sub);
        let (lower, upper) = bounds(&self.desc, &conds);
        let desc = &self.desc;
        let point = {
            let full_eq = (0..desc.nkeyatts).all(|c| conds.iter().any(|x| x.col == c && matches!(x.kind, CondKind::Cmp(3))));
            if full_eq && desc.hashable && upper.as_deref() == Some(&lower[..]) {
                Some(pg_hybrid_core::bloom::key_hash(&lower))
            } else {
                None
            }
        };
        let snap = state::snapshot(index, desc, self.slot, &lower, upper.as_deref(), point, &mut |k| matches(desc, &conds, k));
        let el = if crate::elastic::is_elastic(index) {
            let mut c = crate::elastic::scan::ElasticCursor::new(index, desc.clone(), &snap.stat);
            c.slot = Some(self.slot);
            Some(c)
        } else {
            None
        };
        let el_present = el.is_some();
        let keyless = if el.is_some() && !self.want_keys && !conds.is_empty() { implied_bounds(desc, &conds) } else { None };
        Cursor {
            keyless,
            el,
            conds,
            lower,
            upper,
            stat: snap.stat,
            dyn_items: snap.items,
            dyn_pos: 0,
            st: StaticCursor { leaf: None, ei: 0, ti: 0, done: snap.stat.root == NO_BLOCK || el_present, checked: None },
            _reader: snap.reader,
        }
    }
}

impl Cursor {
    /// Positions at the first item of the range in `dir`.
    unsafe fn start(&mut self, index: pg_sys::Relation, desc: &IndexDesc, dir: Dir) {
        self.dyn_pos = if dir == Dir::Fwd { 0 } else { self.dyn_items.len() as isize - 1 };
        if let Some(el) = self.el.as_mut() {
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
                    el.start(edir(dir), &lo, Some(&hi), true, (ls, us))
                }
                None => el.start(edir(dir), &self.lower, self.upper.as_deref(), desc.natts == 1, (false, false)),
            }
            return;
        }
        if self.st.done {
            return;
        }
        let stat = self.stat;
        match dir {
            Dir::Fwd => {
                let blk = if self.lower.is_empty() {
                    stat.first_leaf
                } else {
                    let lower = self.lower.clone();
                    static_io::descend(index, &stat, &mut |k| desc.compare_prefix(k, &lower), false)
                };
                let mut leaf = static_io::load_leaf(index, blk, &stat);
                let lower = &self.lower;
                let ei = if lower.is_empty() { 0 } else { leaf.seek(|k| desc.compare_prefix(k, lower)) };
                self.st.leaf = Some(leaf);
                self.st.ei = ei as isize;
                self.st.ti = 0;
            }
            Dir::Bwd => {
                let blk = match &self.upper {
                    None => stat.last_leaf,
                    Some(u) => {
                        let u = u.clone();
                        static_io::descend(index, &stat, &mut |k| desc.compare_prefix(k, &u), true)
                    }
                };
                let leaf = static_io::load_leaf(index, blk, &stat);
                let n = match &self.upper {
                    None => leaf.len(),
                    Some(u) => leaf.seek_after(|k| desc.compare_prefix(k, u)),
                };
                self.st.leaf = Some(leaf);
                self.st.ei = n as isize - 1;
                self.st.ti = isize::MAX; // last TID of the entry
            }
        }
    }

    /// Positions strictly after (key, tid) in `dir` (or at it when `inclusive`).
    unsafe fn seek_after(&mut self, index: pg_sys::Relation, desc: &IndexDesc, dir: Dir, key: &[u8], tid: Tid, inclusive: bool) {
        let cmp_item = |k: &[u8], t: Tid| desc.compare(k, key).then(t.cmp(&tid));
        let n = self.dyn_items.len();
        self.dyn_pos = match dir {
            Dir::Fwd => self.dyn_items.partition_point(|(k, t)| {
                let o = cmp_item(k, *t);
                o == Ordering::Less || (!inclusive && o == Ordering::Equal)
            }) as isize,
            Dir::Bwd => {
                self.dyn_items.partition_point(|(k, t)| {
                    let o = cmp_item(k, *t);
                    o == Ordering::Less || (inclusive && o == Ordering::Equal)
                }) as isize
                    - 1
            }
        };
        let _ = n;
        self.st.checked = None;
        if let Some(el) = self.el.as_mut() {
            el.seek_after(edir(dir), key, tid, inclusive);
            return;
        }
        if self.stat.root == NO_BLOCK {
            self.st.done = true;
            return;
        }
        self.st.done = false;
        let stat = self.stat;
        let kk = key.to_vec();
        let blk = static_io::descend(index, &stat, &mut |k| desc.compare(k, &kk), dir == Dir::Bwd);
        let mut leaf = static_io::load_leaf(index, blk, &stat);
        // Flatten the position search over (entry, tid).
        let ei = leaf.seek(|k| desc.compare(k, key));
        let (ei, ti) = if ei < leaf.len() && desc.compare(&leaf.get(ei).0, key) == Ordering::Equal {
            let tids = &leaf.get(ei).1;
            let ti = tids.partition_point(|t| *t < tid || (!inclusive && dir == Dir::Fwd && *t == tid) || (inclusive && dir == Dir::Bwd && *t == tid));
            (ei as isize, ti as isize)
        } else {
            (ei as isize, 0)
        };
        self.st.leaf = Some(leaf);
        match dir {
            Dir::Fwd => {
                self.st.ei = ei;
                self.st.ti = ti;
            }
            Dir::Bwd => {
                // The item before (ei, ti).
                self.st.ei = ei;
                self.st.ti = ti - 1;
                if self.st.ti < 0 {
                    self.st.ei -= 1;
                    self.st.ti = isize::MAX;
                }
            }
        }
    }

    /// Moves the static cursor onto a valid, matching entry; sets done at the
    /// end of the range.
    unsafe fn settle(&mut self, index: pg_sys::Relation, desc: &IndexDesc, dir: Dir) {
        loop {
            if self.st.done {
                return;
            }
            let leaf = self.st.leaf.as_mut().unwrap();
            let len = leaf.len() as isize;
            if dir == Dir::Fwd && self.st.ei < 0 {
                self.st.ei = 0;
                self.st.ti = 0;
                continue;
            }
            if dir == Dir::Bwd && self.st.ei >= len && len > 0 {
                self.st.ei = len - 1;
                self.st.ti = isize::MAX;
                continue;
            }
            if self.st.ei >= len || self.st.ei < 0 {
                let next = if dir == Dir::Fwd { leaf.right } else { leaf.left };
                if next == NO_BLOCK {
                    self.st.done = true;
                    return;
                }
                let l = static_io::load_leaf(index, next, &self.stat);
                self.st.ei = if dir == Dir::Fwd { 0 } else { l.len() as isize - 1 };
                self.st.ti = if dir == Dir::Fwd { 0 } else { isize::MAX };
                self.st.leaf = Some(l);
                self.st.checked = None;
                continue;
            }
            let blk = leaf.blk;
            let (key, tids) = leaf.get(self.st.ei as usize);
            let nt = tids.len() as isize;
            if self.st.ti == isize::MAX {
                self.st.ti = nt - 1;
            }
            if self.st.ti >= nt || self.st.ti < 0 || nt == 0 {
                self.step_entry(dir);
                continue;
            }
            let here = (blk, self.st.ei);
            if self.st.checked == Some(here) {
                return;
            }
            match dir {
                Dir::Fwd => {
                    if let Some(u) = &self.upper {
                        if desc.compare_prefix(key, u) == Ordering::Greater {
                            self.st.done = true;
                            return;
                        }
                    }
                }
                Dir::Bwd => {
                    if !self.lower.is_empty() && desc.compare_prefix(key, &self.lower) == Ordering::Less {
                        self.st.done = true;
                        return;
                    }
                }
            }
            if matches(desc, &self.conds, key) {
                self.st.checked = Some(here);
                return;
            }
            self.step_entry(dir);
        }
    }

    fn step_entry(&mut self, dir: Dir) {
        match dir {
            Dir::Fwd => {
                self.st.ei += 1;
                self.st.ti = 0;
            }
            Dir::Bwd => {
                self.st.ei -= 1;
                self.st.ti = isize::MAX;
            }
        }
    }

    fn step_static(&mut self, dir: Dir) {
        match dir {
            Dir::Fwd => self.st.ti += 1,
            Dir::Bwd => self.st.ti -= 1,
        }
    }

    /// The key of the last item returned, for a re-seek: items returned
    /// without keys (`keyless`) have theirs read from the heap now. The
    /// item was returned to this scan, so its tuple cannot have been pruned
    /// unless it was dead to the scan's snapshot too.
    unsafe fn key_for_seek(&mut self, index: pg_sys::Relation, key: Vec<u8>, tid: Tid) -> Vec<u8> {
        if !key.is_empty() {
            return key;
        }
        match self.el.as_mut().and_then(|el| el.key_of(tid)) {
            Some(k) => k,
            None => crate::raise(
                PgSqlErrorCode::ERRCODE_T_R_SERIALIZATION_FAILURE,
                format!("elastic_btree index \"{}\": the scan position's heap tuple was pruned", crate::storage::page::rel_name(index)),
                "Run the statement again.",
            ),
        }
    }

    /// The elastic tree's next entry in range that matches the conditions.
    unsafe fn settle_elastic(&mut self, desc: &IndexDesc, dir: Dir) -> Option<(Vec<u8>, Tid)> {
        let el = self.el.as_mut()?;
        loop {
            let (k, t) = el.peek(edir(dir))?;
            let out_of_range = match dir {
                Dir::Fwd => self.upper.as_ref().is_some_and(|u| desc.compare_prefix(&k, u) == Ordering::Greater),
                Dir::Bwd => !self.lower.is_empty() && desc.compare_prefix(&k, &self.lower) == Ordering::Less,
            };
            if out_of_range {
                el.done = true;
                return None;
            }
            if matches(desc, &self.conds, &k) {
                return Some((k, t));
            }
            el.advance(edir(dir));
        }
    }

    /// Returns the next (key, tid) in `dir`, or None at the end of the range.
    unsafe fn next(&mut self, index: pg_sys::Relation, desc: &IndexDesc, dir: Dir) -> Option<(Vec<u8>, Tid)> {
        if self.keyless.is_some() && dir == Dir::Fwd && self.dyn_pos as usize >= self.dyn_items.len() {
            if let Some(el) = self.el.as_mut().filter(|e| e.bounded_forward()) {
                // Past the dynamic entries: the tree's entries in the
                // searched range, in order, without keys.
                let t = el.peek_tid()?;
                el.advance(edir(dir));
                return Some((Vec::new(), t));
            }
        }
        let s = if self.el.is_some() {
            self.settle_elastic(desc, dir)
        } else {
            self.settle(index, desc, dir);
            self.static_item()
        };
        self.merge_next(s, desc, dir)
    }

    fn static_item(&mut self) -> Option<(Vec<u8>, Tid)> {
        if self.st.done {
            None
        } else {
            let ei = self.st.ei as usize;
            let leaf = self.st.leaf.as_mut().unwrap();
            let (k, tids) = leaf.get(ei);
            Some((k.clone(), tids[self.st.ti as usize]))
        }
    }

    /// Takes the next of the static entry `s` and the dynamic one in `dir`.
    fn merge_next(&mut self, s: Option<(Vec<u8>, Tid)>, desc: &IndexDesc, dir: Dir) -> Option<(Vec<u8>, Tid)> {
        let d = if self.dyn_pos >= 0 && (self.dyn_pos as usize) < self.dyn_items.len() {
            let (k, t) = &self.dyn_items[self.dyn_pos as usize];
            Some((k, *t))
        } else {
            None
        };
        let take_static = match (&s, &d) {
            (None, None) => return None,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (Some((sk, st)), Some((dk, dt))) => {
                let o = desc.compare(sk, dk).then(st.cmp(dt));
                if dir == Dir::Fwd { o != Ordering::Greater } else { o != Ordering::Less }
            }
        };
        if take_static {
            let out = s.unwrap();
            let t = out.1;
            // An entry present in both stages (re-inserted TID) is returned once.
            if let Some((dk, dt)) = d {
                if dt == t && desc.compare(dk, &out.0) == Ordering::Equal {
                    self.dyn_pos += if dir == Dir::Fwd { 1 } else { -1 };
                }
            }
            match self.el.as_mut() {
                Some(el) => el.advance(edir(dir)),
                None => self.step_static(dir),
            }
            Some(out)
        } else {
            let (k, t) = d.unwrap();
            let out = (k.clone(), t);
            self.dyn_pos += if dir == Dir::Fwd { 1 } else { -1 };
            Some(out)
        }
    }
}

impl ScanState {
    /// Next item of the whole scan in `dir`.
    unsafe fn next_item(&mut self, index: pg_sys::Relation, dir: Dir) -> Option<(Vec<u8>, Tid)> {
        if self.nsub == 0 {
            return None;
        }
        if !self.started || self.exhausted && self.cur.is_none() {
            // A fresh scan, or a scan restarted after running off an end.
            if !self.started {
                count_index_scan(index);
            }
            self.started = true;
            self.exhausted = false;
            self.sub = if dir == Dir::Fwd { 0 } else { self.nsub as isize - 1 };
            let mut c = self.open_cursor(index, self.sub as usize);
            c.start(index, &self.desc.clone(), dir);
            self.cur = Some(c);
            self.dir = dir;
        } else if dir != self.dir {
            self.dir = dir;
            if let (Some(c), Some((k, t))) = (self.cur.as_mut(), self.last.clone()) {
                let k = c.key_for_seek(index, k, t);
                c.seek_after(index, &self.desc.clone(), dir, &k, t, false);
            }
        }
        loop {
            let desc = self.desc.clone();
            let c = self.cur.as_mut()?;
            if let Some(item) = c.next(index, &desc, dir) {
                self.last = Some(item.clone());
                return Some(item);
            }
            let next_sub = self.sub + if dir == Dir::Fwd { 1 } else { -1 };
            if next_sub < 0 || next_sub >= self.nsub as isize {
                self.cur = None;
                self.exhausted = true;
                self.started = true;
                return None;
            }
            self.sub = next_sub;
            let mut c = self.open_cursor(index, self.sub as usize);
            c.start(index, &desc, dir);
            self.cur = Some(c);
        }
    }
}

fn edir(d: Dir) -> crate::elastic::scan::Dir {
    match d {
        Dir::Fwd => crate::elastic::scan::Dir::Fwd,
        Dir::Bwd => crate::elastic::scan::Dir::Bwd,
    }
}

unsafe fn state<'a>(scan: pg_sys::IndexScanDesc) -> &'a mut ScanState {
    &mut *((*scan).opaque as *mut ScanState)
}

#[pg_guard]
pub unsafe extern "C-unwind" fn ambeginscan(index: pg_sys::Relation, nkeys: i32, norderbys: i32) -> pg_sys::IndexScanDesc {
    crate::require_preload();
    let scan = pg_sys::RelationGetIndexScan(index, nkeys, norderbys);
    let desc = index_desc(index);
    let slot = shmem::slot_for(index);
    let tuple_cxt = pg_sys::AllocSetContextCreateExtended(
        pg_sys::CurrentMemoryContext,
        c"hybrid_btree index-only tuples".as_ptr(),
        pg_sys::ALLOCSET_SMALL_MINSIZE as usize,
        pg_sys::ALLOCSET_SMALL_INITSIZE as usize,
        pg_sys::ALLOCSET_SMALL_MAXSIZE as usize,
    );
    let st = Box::new(ScanState {
        desc,
        slot,
        base: Vec::new(),
        arrays: Vec::new(),
        impossible: false,
        nsub: 1,
        sub: 0,
        cur: None,
        dir: Dir::Fwd,
        last: None,
        exhausted: false,
        started: false,
        mark: None,
        tuple_cxt,
        want_keys: true,
    });
    (*scan).opaque = Box::into_raw(st) as *mut std::ffi::c_void;
    (*scan).xs_itupdesc = (*index).rd_att;
    scan
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
    st.preprocess(ks);
    st.cur = None;
    st.last = None;
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
    let Some((key, tid)) = st.next_item(index, dir) else { return false };
    (*scan).xs_heaptid = tid_to_item(tid);
    (*scan).xs_recheck = false;
    if (*scan).xs_want_itup {
        pg_sys::MemoryContextReset(st.tuple_cxt);
        let old = pg_sys::MemoryContextSwitchTo(st.tuple_cxt);
        let n = st.desc.natts;
        let mut values = vec![pg_sys::Datum::from(0usize); n];
        let mut nulls = vec![true; n];
        st.desc.decode(&key, &mut values, &mut nulls);
        (*scan).xs_itup = pg_sys::index_form_tuple((*index).rd_att, values.as_mut_ptr(), nulls.as_mut_ptr());
        pg_sys::MemoryContextSwitchTo(old);
    }
    true
}

#[pg_guard]
pub unsafe extern "C-unwind" fn amgetbitmap(scan: pg_sys::IndexScanDesc, tbm: *mut pg_sys::TIDBitmap) -> i64 {
    let st = state(scan);
    let index = (*scan).indexRelation;
    st.cur = None;
    st.started = false;
    st.want_keys = false;
    let mut n = 0i64;
    let mut batch: Vec<pg_sys::ItemPointerData> = Vec::with_capacity(256);
    while let Some((_, tid)) = st.next_item(index, Dir::Fwd) {
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
        let st = Box::from_raw(p);
        pg_sys::MemoryContextDelete(st.tuple_cxt);
        (*scan).opaque = std::ptr::null_mut();
    }
}

#[pg_guard]
pub unsafe extern "C-unwind" fn ammarkpos(scan: pg_sys::IndexScanDesc) {
    let st = state(scan);
    st.mark = Some((st.sub, st.last.clone(), st.exhausted));
}

#[pg_guard]
pub unsafe extern "C-unwind" fn amrestrpos(scan: pg_sys::IndexScanDesc) {
    let st = state(scan);
    let index = (*scan).indexRelation;
    let Some((sub, last, exhausted)) = st.mark.clone() else {
        pgrx::error!("hybrid_btree: restore without a marked position");
    };
    st.last = last.clone();
    st.exhausted = exhausted;
    match last {
        None => {
            st.cur = None;
            st.started = false;
        }
        Some((k, t)) if !exhausted => {
            st.sub = sub;
            let mut c = st.open_cursor(index, sub as usize);
            let k = c.key_for_seek(index, k, t);
            c.seek_after(index, &st.desc.clone(), st.dir, &k, t, false);
            st.cur = Some(c);
            st.started = true;
        }
        Some(_) => {
            st.cur = None;
            st.started = true;
        }
    }
}

#[pg_guard]
pub unsafe extern "C-unwind" fn amcanreturn(index: pg_sys::Relation, attno: i32) -> bool {
    // Compact leaves hold no keys: an index-only scan would read the heap
    // for every entry to learn its key. An elastic index with a size bound
    // (one that makes compact leaves) is planned through the heap instead;
    // decided from the reloptions, so planning reads no page.
    if crate::elastic::is_elastic(index) && crate::elastic::options::size_bound(index).is_some() {
        return false;
    }
    let desc = index_desc(index);
    attno >= 1 && (attno as usize) <= desc.natts && desc.cols[attno as usize - 1].returnable
}

/// pgstat_count_index_scan(), a macro in C: feeds idx_scan of pg_stat_*_indexes.
unsafe fn count_index_scan(rel: pg_sys::Relation) {
    if (*rel).pgstat_info.is_null() {
        if !(*rel).pgstat_enabled {
            return;
        }
        pg_sys::pgstat_assoc_relation(rel);
        if (*rel).pgstat_info.is_null() {
            return;
        }
    }
    (*(*rel).pgstat_info).t_counts.t_numscans += 1;
}
