//! Slotted bodies: the standard leaf (format 0x11) and the inner node
//! (format 0x13). Both hold (key, TID) entries sorted by (key, TID); inner
//! entries also carry a child block number.
//!
//! A slot array of u16 tuple offsets grows up from the header, tuples grow
//! down from the end of the body, and the hole between them is free. That
//! is PostgreSQL's own page shape, so the glue can put the hole between
//! `pd_lower` and `pd_upper` and full-page images skip it. Searches binary
//! search the slots and compare keys in place: no allocation, no decoding.
//! Every read is bounds-checked, so a corrupt body gives `Error::Corrupt`,
//! never a panic.

use super::*;

/// Header bytes.
pub const HDR: usize = 12;
/// Fixed bytes of a tuple before its key: klen u16, TID (u32 block, u16 offset).
pub const TUPLE_HDR: usize = 8;
/// Child block number after the TID in inner tuples.
pub const INNER_EXTRA: usize = 4;

const F_HIKEY: u8 = 0x01;

/// Which of the two slotted formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Leaf,
    Inner,
}

impl Kind {
    #[inline]
    pub const fn format(self) -> u8 {
        match self {
            Kind::Leaf => FORMAT_STD_LEAF,
            Kind::Inner => FORMAT_INNER,
        }
    }
    #[inline]
    const fn extra(self) -> usize {
        match self {
            Kind::Leaf => 0,
            Kind::Inner => INNER_EXTRA,
        }
    }
    /// Body bytes one entry with a `klen`-byte key takes, slot included.
    #[inline]
    pub const fn entry_size(self, klen: usize) -> usize {
        2 + TUPLE_HDR + self.extra() + klen
    }
}

/// One entry, borrowed from the body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry<'a> {
    pub key: &'a [u8],
    pub tid: Tid,
    /// Child block (inner nodes); 0 in leaves.
    pub child: u32,
}

#[inline]
fn rd16(b: &[u8], off: usize) -> usize {
    u16::from_le_bytes([b[off], b[off + 1]]) as usize
}

#[inline]
fn wr16(b: &mut [u8], off: usize, v: usize) {
    b[off..off + 2].copy_from_slice(&(v as u16).to_le_bytes());
}

/// A read-only view of a slotted body. `parse` checks the header in O(1);
/// each entry access checks its own tuple.
#[derive(Clone, Copy, Debug)]
pub struct SlotView<'a> {
    b: &'a [u8],
    kind: Kind,
    n: usize,
    upper: usize,
    frag: usize,
    hikey_off: usize,
}

impl<'a> SlotView<'a> {
    pub fn parse(b: &'a [u8], kind: Kind) -> Result<Self> {
        if b.len() < HDR || b.len() > MAX_BODY {
            return corrupt("slotted body size out of range");
        }
        if b[0] != kind.format() {
            return corrupt("wrong format byte for a slotted body");
        }
        let flags = b[1];
        if flags & !F_HIKEY != 0 {
            return corrupt("unknown flags in slotted body");
        }
        let n = rd16(b, 2);
        let upper = rd16(b, 4);
        let frag = rd16(b, 6);
        let hikey_off = rd16(b, 8);
        if HDR + 2 * n > upper || upper > b.len() {
            return corrupt("slot array overlaps tuples");
        }
        if frag > b.len() - upper {
            return corrupt("fragmented space larger than tuple area");
        }
        if (flags & F_HIKEY != 0) != (hikey_off != 0) || (hikey_off != 0 && hikey_off < upper) {
            return corrupt("bad high key offset");
        }
        Ok(SlotView { b, kind, n, upper, frag, hikey_off })
    }

    #[inline]
    pub fn len(&self) -> usize {
        self.n
    }
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }
    pub fn kind(&self) -> Kind {
        self.kind
    }

    #[inline]
    fn tuple(&self, off: usize) -> Result<Entry<'a>> {
        let b = self.b;
        let fixed = TUPLE_HDR + self.kind.extra();
        if off < self.upper || off + fixed > b.len() {
            return corrupt("tuple offset out of range");
        }
        let klen = rd16(b, off);
        let kstart = off + fixed;
        if kstart + klen > b.len() {
            return corrupt("tuple runs past the body");
        }
        let tid = Tid::new(
            u32::from_le_bytes(b[off + 2..off + 6].try_into().unwrap()),
            u16::from_le_bytes([b[off + 6], b[off + 7]]),
        );
        let child = if self.kind == Kind::Inner {
            u32::from_le_bytes(b[off + 8..off + 12].try_into().unwrap())
        } else {
            0
        };
        Ok(Entry { key: &b[kstart..kstart + klen], tid, child })
    }

    /// Entry `i` (< len).
    #[inline]
    pub fn entry(&self, i: usize) -> Result<Entry<'a>> {
        if i >= self.n {
            return corrupt("slot index out of range");
        }
        self.tuple(rd16(self.b, HDR + 2 * i))
    }

    /// Byte size of tuple `i` (without its slot).
    fn tuple_len(&self, i: usize) -> Result<usize> {
        let e = self.entry(i)?;
        Ok(TUPLE_HDR + self.kind.extra() + e.key.len())
    }

    /// The page's upper bound: every entry is < the high key; `None` on the
    /// rightmost page of a level.
    pub fn high_key(&self) -> Result<Option<Entry<'a>>> {
        if self.hikey_off == 0 {
            return Ok(None);
        }
        self.tuple(self.hikey_off).map(Some)
    }

    /// First position whose entry is >= `t`; `len()` if none.
    pub fn lower_bound(&self, t: &Target) -> Result<usize> {
        self.lower_bound_in(t, 0, self.n)
    }

    /// First position in `lo..hi` whose entry is >= `t`, `hi` if none, for
    /// a `t` above every entry before `lo`.
    fn lower_bound_in(&self, t: &Target, mut lo: usize, mut hi: usize) -> Result<usize> {
        while lo < hi {
            let mid = (lo + hi) / 2;
            let e = self.entry(mid)?;
            if cmp_entry(e.key, e.tid, t) == Ordering::Less {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        Ok(lo)
    }

    /// First position at or after `from` whose entry is >= `t`, for a `t`
    /// known to be >= every entry before `from` (a range's end searched
    /// from its start): the few entries after `from` are tried one by one
    /// before a binary search of the rest, so a point's end, usually one
    /// entry on, costs a comparison or two instead of a whole search.
    pub fn lower_bound_from(&self, t: &Target, from: usize) -> Result<usize> {
        const STEPS: usize = 4;
        let from = from.min(self.n);
        let near = (from + STEPS).min(self.n);
        for i in from..near {
            let e = self.entry(i)?;
            if cmp_entry(e.key, e.tid, t) != Ordering::Less {
                return Ok(i);
            }
        }
        self.lower_bound_in(t, near, self.n)
    }

    /// Inner nodes: the index of the child whose range holds `t`, i.e. the
    /// last entry <= `t`. Entry 0's separator is never compared: it stands
    /// for minus infinity within this page (the parent bounds the page).
    pub fn child_index(&self, t: &Target) -> Result<usize> {
        if self.n == 0 {
            return corrupt("inner node without children");
        }
        let (mut lo, mut hi) = (1, self.n);
        while lo < hi {
            let mid = (lo + hi) / 2;
            let e = self.entry(mid)?;
            if cmp_entry(e.key, e.tid, t) == Ordering::Greater {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        Ok(lo - 1)
    }

    /// Bytes available for new entries (slots and tuples), counting space
    /// a compaction would reclaim.
    pub fn free_space(&self) -> usize {
        self.upper - (HDR + 2 * self.n) + self.frag
    }

    /// Bytes holding live data.
    pub fn used_bytes(&self) -> usize {
        self.b.len() - self.free_space()
    }

    /// The free hole `[lo, hi)` between the slots and the tuples, for
    /// `pd_lower` / `pd_upper`.
    pub fn hole(&self) -> (usize, usize) {
        (HDR + 2 * self.n, self.upper)
    }

    /// All entries in order.
    pub fn entries(&self) -> Result<Vec<Entry<'a>>> {
        (0..self.n).map(|i| self.entry(i)).collect()
    }

    /// Whether entries with these key lengths (and high key) fit a fresh body.
    pub fn fits(cap: usize, kind: Kind, key_lens: impl IntoIterator<Item = usize>, hikey: Option<usize>) -> bool {
        let mut need = HDR + hikey.map_or(0, |k| kind.entry_size(k) - 2);
        for k in key_lens {
            need += kind.entry_size(k);
            if need > cap {
                return false;
            }
        }
        need <= cap
    }

    /// Full structural check: tuples inside the body, non-overlapping, and
    /// entries strictly ascending (inner entry 0 included: its stored key is
    /// empty or the page's low bound) and below the high key.
    pub fn verify(&self) -> Result<()> {
        let mut spans: Vec<(usize, usize)> = Vec::with_capacity(self.n + 1);
        let mut prev: Option<Entry> = None;
        for i in 0..self.n {
            let off = rd16(self.b, HDR + 2 * i);
            let e = self.tuple(off)?;
            spans.push((off, off + TUPLE_HDR + self.kind.extra() + e.key.len()));
            if let Some(p) = prev {
                if cmp_pair(p.key, p.tid, e.key, e.tid) != Ordering::Less {
                    return corrupt("entries out of order");
                }
            }
            prev = Some(e);
        }
        if let Some(h) = self.high_key()? {
            spans.push((self.hikey_off, self.hikey_off + TUPLE_HDR + self.kind.extra() + h.key.len()));
            if let Some(p) = prev {
                if cmp_pair(p.key, p.tid, h.key, h.tid) != Ordering::Less {
                    return corrupt("entry not below the high key");
                }
            }
        }
        spans.sort_unstable();
        let mut live = 0;
        for w in spans.windows(2) {
            if w[0].1 > w[1].0 {
                return corrupt("overlapping tuples");
            }
        }
        for s in &spans {
            live += s.1 - s.0;
        }
        if live + self.frag != self.b.len() - self.upper {
            return corrupt("tuple area accounting mismatch");
        }
        Ok(())
    }
}

fn write_tuple(b: &mut [u8], off: usize, kind: Kind, key: &[u8], tid: Tid, child: u32) {
    wr16(b, off, key.len());
    b[off + 2..off + 6].copy_from_slice(&tid.block.to_le_bytes());
    b[off + 6..off + 8].copy_from_slice(&tid.offset.to_le_bytes());
    let mut k = off + TUPLE_HDR;
    if kind == Kind::Inner {
        b[k..k + 4].copy_from_slice(&child.to_le_bytes());
        k += 4;
    }
    b[k..k + key.len()].copy_from_slice(key);
}

/// Makes `b` an empty body of `kind` with an optional high key.
pub fn init(b: &mut [u8], kind: Kind, hikey: Option<(&[u8], Tid)>) -> Result<()> {
    if b.len() < MIN_BODY || b.len() > MAX_BODY {
        return Err(Error::BadInput("body size out of range"));
    }
    let mut upper = b.len();
    let mut hk_off = 0;
    if let Some((k, t)) = hikey {
        let sz = TUPLE_HDR + kind.extra() + k.len();
        if HDR + sz > b.len() {
            return Err(Error::NoSpace);
        }
        upper -= sz;
        hk_off = upper;
        write_tuple(b, upper, kind, k, t, 0);
    }
    b[0] = kind.format();
    b[1] = if hikey.is_some() { F_HIKEY } else { 0 };
    wr16(b, 2, 0);
    wr16(b, 4, upper);
    wr16(b, 6, 0);
    wr16(b, 8, hk_off);
    wr16(b, 10, 0);
    Ok(())
}

/// Builds a body from entries already in order. `NoSpace` if they do not fit.
pub fn build<'k>(
    b: &mut [u8],
    kind: Kind,
    entries: impl IntoIterator<Item = (&'k [u8], Tid, u32)>,
    hikey: Option<(&[u8], Tid)>,
) -> Result<()> {
    init(b, kind, hikey)?;
    let mut n = 0;
    let mut upper = rd16(b, 4);
    for (k, t, c) in entries {
        let sz = TUPLE_HDR + kind.extra() + k.len();
        if HDR + 2 * (n + 1) + sz > upper {
            return Err(Error::NoSpace);
        }
        upper -= sz;
        write_tuple(b, upper, kind, k, t, c);
        wr16(b, HDR + 2 * n, upper);
        n += 1;
    }
    wr16(b, 2, n);
    wr16(b, 4, upper);
    Ok(())
}

/// Rewrites the tuple area without holes. Rare (only when an insert needs
/// space freed by earlier deletions), so it may allocate.
fn defragment(b: &mut [u8], kind: Kind) -> Result<()> {
    let v = SlotView::parse(b, kind)?;
    let hk = v.high_key()?.map(|e| (e.key.to_vec(), e.tid));
    let ents: Vec<(Vec<u8>, Tid, u32)> =
        v.entries()?.into_iter().map(|e| (e.key.to_vec(), e.tid, e.child)).collect();
    build(b, kind, ents.iter().map(|(k, t, c)| (k.as_slice(), *t, *c)), hk.as_ref().map(|(k, t)| (k.as_slice(), *t)))
}

/// Inserts an entry at slot `i`, shifting later slots. Returns false, with
/// the body unchanged, if it does not fit. The caller keeps the order.
pub fn insert_at(b: &mut [u8], kind: Kind, i: usize, key: &[u8], tid: Tid, child: u32) -> Result<bool> {
    let v = SlotView::parse(b, kind)?;
    if i > v.n {
        return Err(Error::BadInput("insert position past the end"));
    }
    let need = kind.entry_size(key.len());
    if need > v.free_space() {
        return Ok(false);
    }
    let (n, mut upper) = (v.n, v.upper);
    if HDR + 2 * n + need > upper {
        defragment(b, kind)?;
        upper = rd16(b, 4);
    }
    let sz = need - 2;
    upper -= sz;
    write_tuple(b, upper, kind, key, tid, child);
    let s = HDR + 2 * i;
    b.copy_within(s..HDR + 2 * n, s + 2);
    wr16(b, s, upper);
    wr16(b, 2, n + 1);
    wr16(b, 4, upper);
    Ok(true)
}

/// Removes the entry at slot `i`; its tuple bytes become fragmentation.
pub fn remove_at(b: &mut [u8], kind: Kind, i: usize) -> Result<()> {
    let v = SlotView::parse(b, kind)?;
    let len = v.tuple_len(i)?;
    let (n, frag, upper) = (v.n, v.frag, v.upper);
    let off = rd16(b, HDR + 2 * i);
    let s = HDR + 2 * i;
    b.copy_within(s + 2..HDR + 2 * n, s);
    wr16(b, 2, n - 1);
    if off == upper {
        // The lowest tuple: give it straight back to the hole.
        wr16(b, 4, upper + len);
        wr16(b, 6, frag);
    } else {
        wr16(b, 6, frag + len);
    }
    Ok(())
}

/// Leaves: removes every entry whose TID `dead` says is dead (VACUUM).
/// Returns how many went. One pass over the slots, tuples stay in place.
pub fn remove_tids(b: &mut [u8], kind: Kind, mut dead: impl FnMut(Tid) -> bool) -> Result<usize> {
    let v = SlotView::parse(b, kind)?;
    let (n, mut frag) = (v.n, v.frag);
    let _ = v;
    let mut kept = 0;
    for i in 0..n {
        let off = rd16(b, HDR + 2 * i);
        // Slots below i are rewritten as we go; the header stays valid.
        let (tid, klen) = {
            let e = SlotView::parse(b, kind)?.tuple(off)?;
            (e.tid, e.key.len())
        };
        if dead(tid) {
            frag += TUPLE_HDR + kind.extra() + klen;
        } else {
            wr16(b, HDR + 2 * kept, off);
            kept += 1;
        }
    }
    wr16(b, 2, kept);
    wr16(b, 6, frag);
    Ok(n - kept)
}

/// Replaces the child block of inner entry `i` (used when a downlink moves).
pub fn set_child(b: &mut [u8], i: usize, child: u32) -> Result<()> {
    let v = SlotView::parse(b, Kind::Inner)?;
    v.entry(i)?;
    let off = rd16(b, HDR + 2 * i);
    b[off + TUPLE_HDR..off + TUPLE_HDR + 4].copy_from_slice(&child.to_le_bytes());
    Ok(())
}

/// Where to split `v` into two bodies: the first index of the right half,
/// chosen so both halves hold about the same bytes (1..len-1). The left
/// half also gets a high key equal to the right half's first entry, which
/// is counted.
pub fn split_point(v: &SlotView) -> Result<usize> {
    split_point_at(v, 50)
}

/// As `split_point`, with the left half taking about `left_pct`% of the
/// bytes (nbtree splits the rightmost page 90/10 so ascending loads leave
/// full pages behind).
pub fn split_point_at(v: &SlotView, left_pct: usize) -> Result<usize> {
    if v.len() < 2 {
        return Err(Error::BadInput("splitting a page with fewer than two entries"));
    }
    let sizes: Vec<usize> = (0..v.len()).map(|i| v.tuple_len(i).map(|l| l + 2)).collect::<Result<_>>()?;
    let total: usize = sizes.iter().sum();
    let goal = total * left_pct.clamp(1, 99) / 100;
    // Left gets [0, i) plus the high key copy of entry i: splitting before
    // the last entry would leave it exactly as full as the page was (with
    // a few long keys a 90% split of a rightmost page did, and the retry
    // split it again: one level more each time).
    let last = if v.len() >= 3 { v.len() - 2 } else { v.len() - 1 };
    let mut acc = 0;
    for (i, s) in sizes.iter().enumerate() {
        if i > 0 && acc + s >= goal {
            return Ok(i.min(last));
        }
        acc += s;
    }
    Ok(last)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn t(n: u32) -> Tid {
        Tid::new(n, 1)
    }

    #[test]
    fn insert_search_remove() {
        let mut b = vec![0u8; 256];
        init(&mut b, Kind::Leaf, Some((b"zz", t(9)))).unwrap();
        for (i, k) in [b"b".as_slice(), b"d", b"a", b"c"].iter().enumerate() {
            let v = SlotView::parse(&b, Kind::Leaf).unwrap();
            let p = v.lower_bound(&Target::at(k, t(i as u32))).unwrap();
            assert!(insert_at(&mut b, Kind::Leaf, p, k, t(i as u32), 0).unwrap());
        }
        let v = SlotView::parse(&b, Kind::Leaf).unwrap();
        v.verify().unwrap();
        let keys: Vec<&[u8]> = v.entries().unwrap().iter().map(|e| e.key).collect();
        assert_eq!(keys, vec![b"a".as_slice(), b"b", b"c", b"d"]);
        assert_eq!(v.lower_bound(&Target::first(b"c")).unwrap(), 2);
        assert_eq!(v.lower_bound(&Target::last(b"c")).unwrap(), 3);
        assert_eq!(v.high_key().unwrap().unwrap().key, b"zz");
        remove_at(&mut b, Kind::Leaf, 1).unwrap();
        let v = SlotView::parse(&b, Kind::Leaf).unwrap();
        v.verify().unwrap();
        assert_eq!(v.len(), 3);
    }

    #[test]
    fn fills_then_defragments() {
        let mut b = vec![0u8; 200];
        init(&mut b, Kind::Leaf, None).unwrap();
        let mut n = 0u32;
        while insert_at(&mut b, Kind::Leaf, n as usize, &n.to_be_bytes(), t(n), 0).unwrap() {
            n += 1;
        }
        assert!(n > 5);
        // Free the middle, then fill again: needs a defragment.
        remove_tids(&mut b, Kind::Leaf, |x| x.block % 2 == 1).unwrap();
        let v = SlotView::parse(&b, Kind::Leaf).unwrap();
        v.verify().unwrap();
        let k = 1000u32.to_be_bytes();
        let p = v.lower_bound(&Target::first(&k)).unwrap();
        assert!(insert_at(&mut b, Kind::Leaf, p, &k, t(1000), 0).unwrap());
        SlotView::parse(&b, Kind::Leaf).unwrap().verify().unwrap();
    }

    #[test]
    fn inner_child_index() {
        let mut b = vec![0u8; 256];
        let ents = [(b"".as_slice(), t(0), 10u32), (b"m", t(0), 11), (b"t", t(5), 12)];
        build(&mut b, Kind::Inner, ents.iter().copied(), None).unwrap();
        let v = SlotView::parse(&b, Kind::Inner).unwrap();
        v.verify().unwrap();
        assert_eq!(v.child_index(&Target::first(b"a")).unwrap(), 0);
        assert_eq!(v.child_index(&Target::first(b"m")).unwrap(), 0);
        assert_eq!(v.child_index(&Target::at(b"m", t(0))).unwrap(), 1);
        assert_eq!(v.child_index(&Target::last(b"m")).unwrap(), 1);
        assert_eq!(v.child_index(&Target::at(b"t", t(4))).unwrap(), 1);
        assert_eq!(v.child_index(&Target::at(b"t", t(5))).unwrap(), 2);
        assert_eq!(v.entry(2).unwrap().child, 12);
    }

    proptest! {
        #[test]
        fn random_ops_match_oracle(ops in proptest::collection::vec((any::<bool>(), proptest::collection::vec(0u8..4, 0..6), 0u32..50), 1..200)) {
            let mut b = vec![0u8; 600];
            init(&mut b, Kind::Leaf, None).unwrap();
            let mut oracle: std::collections::BTreeSet<(Vec<u8>, Tid)> = Default::default();
            for (ins, k, tb) in ops {
                let tid = t(tb);
                let v = SlotView::parse(&b, Kind::Leaf).unwrap();
                let p = v.lower_bound(&Target::at(&k, tid)).unwrap();
                let exists = p < v.len() && { let e = v.entry(p).unwrap(); e.key == k.as_slice() && e.tid == tid };
                prop_assert_eq!(exists, oracle.contains(&(k.clone(), tid)));
                if ins && !exists {
                    if insert_at(&mut b, Kind::Leaf, p, &k, tid, 0).unwrap() {
                        oracle.insert((k, tid));
                    }
                } else if !ins && exists {
                    remove_at(&mut b, Kind::Leaf, p).unwrap();
                    oracle.remove(&(k, tid));
                }
                let v = SlotView::parse(&b, Kind::Leaf).unwrap();
                v.verify().unwrap();
                let got: Vec<(Vec<u8>, Tid)> = v.entries().unwrap().iter().map(|e| (e.key.to_vec(), e.tid)).collect();
                let want: Vec<(Vec<u8>, Tid)> = oracle.iter().cloned().collect();
                prop_assert_eq!(got, want);
            }
        }

        #[test]
        fn search_from_a_start_matches_a_whole_search(keys in proptest::collection::btree_set((proptest::collection::vec(0u8..4, 0..4), 0u32..8), 0..40), a in (proptest::collection::vec(0u8..4, 0..4), 0u32..9), b in (proptest::collection::vec(0u8..4, 0..4), 0u32..9), last in any::<bool>()) {
            let mut body = vec![0u8; 2048];
            init(&mut body, Kind::Leaf, None).unwrap();
            for (i, (k, tb)) in keys.iter().enumerate() {
                prop_assert!(insert_at(&mut body, Kind::Leaf, i, k, t(*tb), 0).unwrap());
            }
            let v = SlotView::parse(&body, Kind::Leaf).unwrap();
            // a range [start, end) with start <= end, as a scan searches it
            let (lo, hi) = if (&a.0, a.1) <= (&b.0, b.1) { (a, b) } else { (b, a) };
            let start = Target::at(&lo.0, t(lo.1));
            let end = if last { Target::last(&hi.0) } else { Target::at(&hi.0, t(hi.1)) };
            let from = v.lower_bound(&start).unwrap();
            prop_assert_eq!(v.lower_bound_from(&end, from).unwrap(), v.lower_bound(&end).unwrap());
        }

        #[test]
        fn random_bytes_never_panic(body in proptest::collection::vec(any::<u8>(), 0..400), k in proptest::collection::vec(any::<u8>(), 0..8), first in prop_oneof![Just(FORMAT_STD_LEAF), Just(FORMAT_INNER), any::<u8>()]) {
            let mut body = body;
            if !body.is_empty() { body[0] = first; }
            for kind in [Kind::Leaf, Kind::Inner] {
                if let Ok(v) = SlotView::parse(&body, kind) {
                    let _ = v.lower_bound(&Target::first(&k));
                    let _ = v.lower_bound_from(&Target::last(&k), 1);
                    let _ = v.child_index(&Target::last(&k));
                    let _ = v.high_key();
                    let _ = v.entries();
                    let _ = v.verify();
                    let _ = split_point(&v);
                    let mut c = body.clone();
                    let _ = insert_at(&mut c, kind, 0, &k, Tid::new(1, 1), 7);
                    let mut c = body.clone();
                    let _ = remove_tids(&mut c, kind, |t| t.block % 2 == 0);
                    let mut c = body.clone();
                    if !v.is_empty() { let _ = remove_at(&mut c, kind, 0); }
                }
            }
        }
    }
}
