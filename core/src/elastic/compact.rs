//! The compact leaf (format 0x12): a SeqTree (paper section 5).
//!
//! No keys are stored. For entries 0..n sorted by (key, TID) the leaf keeps
//! * BlindiBits: `bits[i]` = first bit in which key i and key i+1 differ
//!   (nine-bit reading, see `super::key_bit`), [`DUP`] if they are equal;
//! * BlindiTree: the top `level` levels of the blind trie as an implicit
//!   binary tree (node k has children 2k+1, 2k+2); a node holds the index
//!   of the smallest bit of its range, `ET` if the range has one entry;
//! * the TIDs.
//!
//! A search walks the tree on the searched key's bits, scans the remaining
//! range as a SeqTrie, fetches the one candidate key, compares, and finds
//! the lower bound from the first differing bit (module docs of `locate`).
//! Bit and TID arrays are allocated for `alloc` entries, n <= alloc <=
//! capacity, and grow by `slack` entries at a time (breathing, 5.4).

use super::*;

/// Header bytes.
pub const HDR: usize = 16;
/// Bytes per TID.
pub const TID_BYTES: usize = 6;
/// Marks a BlindiTree node whose range holds a single entry.
pub const ET: u16 = u16::MAX;
/// Deepest BlindiTree the format accepts (1023 nodes).
pub const MAX_LEVEL: u8 = 10;
/// Default BlindiTree depth. The paper (6.4) finds search throughput peaks
/// at level 5 for 128-entry leaves and 6 for 256-512; our leaves hold
/// 500-1100 entries, and inserts arrive in merge batches that rebuild the
/// tree once per batch, so the insert-side cost of deep trees (the reason
/// the paper's elastic tree uses 2) barely matters here. Level 6 leaves
/// ranges of about 16 entries for the sequential part, for 126 bytes.
pub const DEFAULT_LEVEL: u8 = 6;
/// Default breathing slack (paper 6.4: 4 gets nearly all the savings).
pub const DEFAULT_SLACK: u8 = 4;
/// Longest key whose bit positions fit u16 below [`DUP`].
pub const MAX_COMPACT_KEY: usize = 7000;

const F_NARROW: u8 = 0x01;
const F_HIKEY: u8 = 0x02;
/// The BlindiTree is not maintained (mid-batch); searches skip it.
const F_STALE: u8 = 0x04;
const F_ALL: u8 = F_NARROW | F_HIKEY | F_STALE;
/// Narrow bits are stored as `bit - base` in one byte; this value is DUP.
const NARROW_DUP: u8 = 0xFF;
/// Room kept below the smallest bit when choosing `base`, so a new key that
/// differs earlier than every current pair still fits the narrow form.
const NARROW_MARGIN: u16 = 40;

#[inline]
fn rd16(b: &[u8], off: usize) -> u16 {
    u16::from_le_bytes([b[off], b[off + 1]])
}

#[inline]
fn wr16(b: &mut [u8], off: usize, v: u16) {
    b[off..off + 2].copy_from_slice(&v.to_le_bytes());
}

#[inline]
const fn nodes(level: u8) -> usize {
    (1usize << level) - 1
}

/// The decoded header and array offsets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hdr {
    pub n: usize,
    pub capacity: usize,
    pub alloc: usize,
    pub level: u8,
    pub slack: u8,
    pub narrow: bool,
    pub stale: bool,
    pub base: u16,
    hk: Option<(usize, usize)>,
    tree_off: usize,
    bits_off: usize,
    tids_off: usize,
    pub end: usize,
}

impl Hdr {
    #[inline]
    fn width(&self) -> usize {
        if self.narrow {
            1
        } else {
            2
        }
    }
}

/// Bytes a compact body needs.
pub fn body_size(level: u8, hikey_len: Option<usize>, alloc: usize, narrow: bool) -> usize {
    HDR + hikey_len.map_or(0, |k| k + TID_BYTES) + 2 * nodes(level) + alloc * (if narrow { 1 } else { 2 } + TID_BYTES)
}

/// Most entries a body of `cap` bytes can hold with one-byte bits. A leaf
/// whose bits need two bytes reports `Full` before reaching it and splits.
pub fn max_entries(cap: usize, level: u8, hikey_len: Option<usize>) -> usize {
    let fixed = body_size(level, hikey_len, 0, true);
    cap.saturating_sub(fixed) / (1 + TID_BYTES)
}

fn layout(level: u8, hk_len: Option<usize>, alloc: usize, narrow: bool) -> (usize, usize, usize, usize) {
    let tree_off = HDR + hk_len.map_or(0, |k| k + TID_BYTES);
    let bits_off = tree_off + 2 * nodes(level);
    let tids_off = bits_off + alloc * if narrow { 1 } else { 2 };
    let end = tids_off + alloc * TID_BYTES;
    (tree_off, bits_off, tids_off, end)
}

pub fn parse_hdr(b: &[u8]) -> Result<Hdr> {
    if b.len() < HDR || b.len() > MAX_BODY {
        return corrupt("compact body size out of range");
    }
    if b[0] != FORMAT_COMPACT_LEAF {
        return corrupt("wrong format byte for a compact leaf");
    }
    let flags = b[1];
    if flags & !F_ALL != 0 {
        return corrupt("unknown flags in compact leaf");
    }
    let level = b[2];
    if level > MAX_LEVEL {
        return corrupt("BlindiTree level too deep");
    }
    let slack = b[3];
    let n = rd16(b, 4) as usize;
    let capacity = rd16(b, 6) as usize;
    let alloc = rd16(b, 8) as usize;
    let base = rd16(b, 10);
    let hk_len = rd16(b, 12) as usize;
    if n > alloc || alloc > capacity {
        return corrupt("compact leaf counts out of order");
    }
    let hk = if flags & F_HIKEY != 0 { Some(hk_len) } else { None };
    if hk.is_none() && hk_len != 0 {
        return corrupt("high key length without a high key");
    }
    let narrow = flags & F_NARROW != 0;
    let (tree_off, bits_off, tids_off, end) = layout(level, hk, alloc, narrow);
    if end > b.len() {
        return corrupt("compact leaf arrays run past the body");
    }
    Ok(Hdr {
        n,
        capacity,
        alloc,
        level,
        slack,
        narrow,
        stale: flags & F_STALE != 0,
        base,
        hk: hk.map(|l| (HDR, l)),
        tree_off,
        bits_off,
        tids_off,
        end,
    })
}

/// Where a searched key stands relative to the candidate the blind search
/// found, and what follows for the lower bound.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Located {
    /// The leaf is empty.
    Empty,
    /// The key is present: entries `[s, e)` carry it.
    Equal { s: usize, e: usize },
    /// The key is absent; `pos` is the first entry with a larger key.
    /// `d` is the first bit where the key differs from candidate `j`.
    Greater { j: usize, d: u16, pos: usize },
    Less { j: usize, d: u16, pos: usize },
    /// The candidate's key could not be fetched: entry `j` is dead.
    Dead { j: usize },
}

/// A read-only view of a compact leaf. `parse` validates the header and
/// that every array lies inside the body, so element reads are in bounds;
/// tree nodes are checked as they are followed.
#[derive(Clone, Copy, Debug)]
pub struct CompactView<'a> {
    b: &'a [u8],
    pub h: Hdr,
}

impl<'a> CompactView<'a> {
    pub fn parse(b: &'a [u8]) -> Result<Self> {
        Ok(CompactView { b, h: parse_hdr(b)? })
    }

    #[inline]
    pub fn len(&self) -> usize {
        self.h.n
    }
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.h.n == 0
    }

    /// BlindiBits[i], 0 <= i < len-1.
    #[inline]
    pub fn bit(&self, i: usize) -> u16 {
        if self.h.narrow {
            let v = self.b[self.h.bits_off + i];
            if v == NARROW_DUP {
                DUP
            } else {
                self.h.base.saturating_add(v as u16)
            }
        } else {
            rd16(self.b, self.h.bits_off + 2 * i)
        }
    }

    #[inline]
    pub fn tid(&self, i: usize) -> Tid {
        let o = self.h.tids_off + TID_BYTES * i;
        let b = self.b;
        Tid::new(u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]), u16::from_le_bytes([b[o + 4], b[o + 5]]))
    }

    pub fn tids(&self) -> Vec<Tid> {
        (0..self.h.n).map(|i| self.tid(i)).collect()
    }

    pub fn bits(&self) -> Vec<u16> {
        (0..self.h.n.saturating_sub(1)).map(|i| self.bit(i)).collect()
    }

    #[inline]
    fn node(&self, k: usize) -> u16 {
        rd16(self.b, self.h.tree_off + 2 * k)
    }

    pub fn high_key(&self) -> Option<(&'a [u8], Tid)> {
        self.h.hk.map(|(off, len)| {
            let t = off + len;
            let b = self.b;
            (&b[off..t], Tid::new(u32::from_le_bytes(b[t..t + 4].try_into().unwrap()), u16::from_le_bytes([b[t + 4], b[t + 5]])))
        })
    }

    /// Bytes in use; the rest of the body is a hole for the page image.
    pub fn used_bytes(&self) -> usize {
        self.h.end
    }

    /// The blind search: the only entry whose key can equal `key`.
    pub fn blind(&self, key: &[u8]) -> Result<usize> {
        let n = self.h.n;
        if n == 0 {
            return Ok(0);
        }
        let (mut lo, mut hi) = (0usize, n - 1);
        if !self.h.stale {
            let mut k = 0usize;
            for _ in 0..self.h.level {
                if lo == hi {
                    break;
                }
                let r = self.node(k) as usize;
                if r < lo || r >= hi {
                    return corrupt("BlindiTree node outside its range");
                }
                let b = self.bit(r);
                if b != DUP && key_bit(key, b) == 1 {
                    k = 2 * k + 2;
                    lo = r + 1;
                } else {
                    k = 2 * k + 1;
                    hi = r;
                }
            }
        }
        Ok(self.seq_scan(key, lo, hi))
    }

    /// SeqTrie search of entries [lo, hi]: a hit on bit b moves the
    /// candidate past it; a miss hides every later bit > b (those keys have
    /// b set, the searched key does not) until a smaller bit comes.
    #[inline]
    fn seq_scan(&self, key: &[u8], lo: usize, hi: usize) -> usize {
        let mut j = lo;
        let mut thr = u32::MAX;
        if self.h.narrow {
            let base = self.h.base;
            let s = &self.b[self.h.bits_off + lo..self.h.bits_off + hi];
            for (x, &v) in s.iter().enumerate() {
                if (v as u32) < thr {
                    if v != NARROW_DUP && key_bit(key, base.saturating_add(v as u16)) == 1 {
                        j = lo + x + 1;
                        thr = u32::MAX;
                    } else {
                        thr = v as u32;
                    }
                }
            }
        } else {
            for i in lo..hi {
                let b = self.bit(i);
                if (b as u32) < thr {
                    if b != DUP && key_bit(key, b) == 1 {
                        j = i + 1;
                        thr = u32::MAX;
                    } else {
                        thr = b as u32;
                    }
                }
            }
        }
        j
    }

    /// Blind search, one key fetch, and the second stage: if the key is
    /// absent, the first differing bit `d` with the candidate says on which
    /// side it falls, and the lower bound is the next boundary, scanning
    /// away from the candidate, whose bit is below `d` (the keys in between
    /// agree with the candidate through bit d).
    pub fn locate<F: KeyFetcher + ?Sized>(&self, key: &[u8], f: &mut F, buf: &mut Vec<u8>) -> Result<Located> {
        let n = self.h.n;
        if n == 0 {
            return Ok(Located::Empty);
        }
        let j = self.blind(key)?;
        buf.clear();
        if !f.fetch(self.tid(j), buf) {
            return Ok(Located::Dead { j });
        }
        let d = disc_bit(key, buf);
        if d == DUP {
            let mut s = j;
            while s > 0 && self.bit(s - 1) == DUP {
                s -= 1;
            }
            let mut e = j + 1;
            while e < n && self.bit(e - 1) == DUP {
                e += 1;
            }
            return Ok(Located::Equal { s, e });
        }
        if key_bit(key, d) == 1 {
            let pos = self.first_below(j, d).map_or(n, |i| i + 1);
            Ok(Located::Greater { j, d, pos })
        } else {
            let pos = self.last_below(j, d).map_or(0, |i| i + 1);
            Ok(Located::Less { j, d, pos })
        }
    }

    /// First i >= from with bits[i] < d. Narrow bits are compared as raw
    /// bytes (a plain slice search the compiler vectorises); d at or below
    /// `base` means no stored bit can be smaller.
    #[inline]
    fn first_below(&self, from: usize, d: u16) -> Option<usize> {
        let nb = self.h.n.saturating_sub(1);
        if from >= nb {
            return None;
        }
        if self.h.narrow {
            if d <= self.h.base {
                return None;
            }
            let lim = (d - self.h.base).min(NARROW_DUP as u16) as u8;
            let s = &self.b[self.h.bits_off + from..self.h.bits_off + nb];
            return s.iter().position(|&v| v < lim).map(|p| from + p);
        }
        (from..nb).find(|&i| self.bit(i) < d)
    }

    /// Last i < before with bits[i] < d.
    #[inline]
    fn last_below(&self, before: usize, d: u16) -> Option<usize> {
        if before == 0 {
            return None;
        }
        if self.h.narrow {
            if d <= self.h.base {
                return None;
            }
            let lim = (d - self.h.base).min(NARROW_DUP as u16) as u8;
            let s = &self.b[self.h.bits_off..self.h.bits_off + before];
            return s.iter().rposition(|&v| v < lim);
        }
        (0..before).rev().find(|&i| self.bit(i) < d)
    }

    /// First entry >= `t`. One key fetch unless the candidate is dead; then
    /// a binary search over fetched keys (see `search_by_fetch`).
    pub fn search<F: KeyFetcher + ?Sized>(&self, t: &Target, f: &mut F, buf: &mut Vec<u8>) -> Result<usize> {
        match self.locate(t.key, f, buf)? {
            Located::Empty => Ok(0),
            Located::Equal { s, e } => Ok(self.pos_in_run(s, e, t.tid)),
            Located::Greater { pos, .. } | Located::Less { pos, .. } => Ok(pos),
            Located::Dead { .. } => self.search_by_fetch(t, f, buf),
        }
    }

    /// Position of a TID bound among the equal-key entries [s, e).
    fn pos_in_run(&self, s: usize, e: usize, tp: TidPos) -> usize {
        match tp {
            TidPos::First => s,
            TidPos::Last => e,
            TidPos::At(x) => {
                let (mut lo, mut hi) = (s, e);
                while lo < hi {
                    let m = (lo + hi) / 2;
                    if self.tid(m) < x {
                        lo = m + 1;
                    } else {
                        hi = m;
                    }
                }
                lo
            }
        }
    }

    /// The pruned-key fallback: binary search on positions with fetched
    /// keys, probing outward from the midpoint past entries whose key is
    /// gone. Invariant: every live entry before `lo` is < t and every live
    /// entry at or after `hi` is >= t, so the answer never skips a live
    /// entry; where a dead entry lands does not matter.
    pub fn search_by_fetch<F: KeyFetcher + ?Sized>(&self, t: &Target, f: &mut F, buf: &mut Vec<u8>) -> Result<usize> {
        let (mut lo, mut hi) = (0usize, self.h.n);
        'outer: while lo < hi {
            let mid = lo + (hi - lo) / 2;
            for dist in 0..(hi - lo) * 2 {
                let k = if dist % 2 == 0 { mid + dist / 2 } else { mid.wrapping_sub(dist / 2 + 1) };
                if k < lo || k >= hi {
                    continue;
                }
                buf.clear();
                if f.fetch(self.tid(k), buf) {
                    if cmp_entry(buf, self.tid(k), t) == Ordering::Less {
                        lo = k + 1;
                    } else {
                        hi = k;
                    }
                    continue 'outer;
                }
            }
            // Every entry in [lo, hi) is dead: any position there is right.
            return Ok(lo);
        }
        Ok(lo)
    }

    /// Structural checks without keys: header, tree consistent with bits.
    pub fn verify_structure(&self) -> Result<()> {
        if !self.h.stale {
            let want = build_tree_nodes(&self.bits(), self.h.level);
            for (k, w) in want.iter().enumerate() {
                if self.node(k) != *w {
                    return corrupt("BlindiTree does not match BlindiBits");
                }
            }
        }
        for i in 1..self.h.n {
            if self.bit(i - 1) == DUP && self.tid(i - 1) >= self.tid(i) {
                return corrupt("duplicate keys out of TID order");
            }
        }
        Ok(())
    }

    /// Full check with keys: every bit agrees with the fetched keys, keys
    /// ascend, all are below the high key. Dead entries are skipped: the
    /// bit between two live entries must be the minimum of the bits
    /// between them. Returns the number of dead entries.
    pub fn verify_keys<F: KeyFetcher + ?Sized>(&self, f: &mut F) -> Result<usize> {
        self.verify_structure()?;
        let mut dead = 0;
        let mut prev: Option<(usize, Vec<u8>)> = None;
        let mut minbit = DUP;
        for i in 0..self.h.n {
            let mut k = Vec::new();
            if !f.fetch(self.tid(i), &mut k) {
                dead += 1;
                if i + 1 < self.h.n {
                    minbit = minbit.min(self.bit(i));
                }
                continue;
            }
            if let Some((pi, pk)) = &prev {
                if cmp_pair(pk, self.tid(*pi), &k, self.tid(i)) != Ordering::Less {
                    return corrupt("compact leaf keys out of order");
                }
                if disc_bit(pk, &k) != minbit {
                    return corrupt("BlindiBits disagree with the keys");
                }
            }
            if let Some((hk, ht)) = self.high_key() {
                if cmp_pair(&k, self.tid(i), hk, ht) != Ordering::Less {
                    return corrupt("compact entry not below the high key");
                }
            }
            minbit = if i + 1 < self.h.n { self.bit(i) } else { DUP };
            prev = Some((i, k));
        }
        Ok(dead)
    }
}

// ---------------------------------------------------------------------------
// Building and rewriting

/// Leftmost minimum of bits[lo..hi], DUP counting as the largest.
fn argmin(bits: &[u16], lo: usize, hi: usize) -> usize {
    let mut m = lo;
    for i in lo + 1..hi {
        if bits[i] < bits[m] {
            m = i;
        }
    }
    m
}

/// The BlindiTree for `bits` (paper 5.3): node k of range [lo, hi] of
/// entries points at the smallest bit in it, its children at the ranges on
/// either side; single-entry ranges are ET.
pub fn build_tree_nodes(bits: &[u16], level: u8) -> Vec<u16> {
    let mut out = vec![ET; nodes(level)];
    if bits.is_empty() {
        return out;
    }
    // (node, lo, hi) over entries; ranges are inclusive.
    let mut stack = vec![(0usize, 0usize, bits.len())];
    while let Some((k, lo, hi)) = stack.pop() {
        if k >= out.len() || lo == hi {
            continue;
        }
        let r = argmin(bits, lo, hi);
        out[k] = r as u16;
        stack.push((2 * k + 1, lo, r));
        stack.push((2 * k + 2, r + 1, hi));
    }
    out
}

/// Bits and TIDs of a compact leaf, owned: the form splits, merges and
/// conversions work on.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Raw {
    /// bits[i] between entry i and i+1; len = tids.len() - 1 (or 0).
    pub bits: Vec<u16>,
    pub tids: Vec<Tid>,
}

impl Raw {
    pub fn from_view(v: &CompactView) -> Raw {
        Raw { bits: v.bits(), tids: v.tids() }
    }

    /// From keys in (key, TID) order.
    pub fn from_keys<'k>(entries: impl IntoIterator<Item = (&'k [u8], Tid)>) -> Result<Raw> {
        let mut r = Raw::default();
        let mut prev: Option<&[u8]> = None;
        for (k, t) in entries {
            if k.len() > MAX_COMPACT_KEY {
                return Err(Error::KeyTooLong(k.len()));
            }
            if let Some(p) = prev {
                r.bits.push(disc_bit(p, k));
            }
            r.tids.push(t);
            prev = Some(k);
        }
        Ok(r)
    }

    pub fn len(&self) -> usize {
        self.tids.len()
    }
    pub fn is_empty(&self) -> bool {
        self.tids.is_empty()
    }

    /// Drops entry `j`. The bit between its neighbours is the smaller of
    /// the two around it (first difference of a and c, with a < b < c, is
    /// min(diff(a,b), diff(b,c))), so no key is needed.
    pub fn remove(&mut self, j: usize) {
        let n = self.tids.len();
        self.tids.remove(j);
        if n <= 1 {
            return;
        }
        if j == 0 {
            self.bits.remove(0);
        } else if j == n - 1 {
            self.bits.remove(n - 2);
        } else {
            self.bits[j - 1] = self.bits[j - 1].min(self.bits[j]);
            self.bits.remove(j);
        }
    }

    /// Drops every entry whose TID is dead; returns how many.
    pub fn retain_live(&mut self, mut dead: impl FnMut(Tid) -> bool) -> usize {
        let n = self.tids.len();
        let (mut bits, mut tids) = (Vec::with_capacity(self.bits.len()), Vec::with_capacity(n));
        let mut run = DUP; // min of bits since the last kept entry
        for i in 0..n {
            if !dead(self.tids[i]) {
                if !tids.is_empty() {
                    bits.push(run);
                }
                tids.push(self.tids[i]);
                run = DUP;
            }
            if i + 1 < n {
                run = run.min(self.bits[i]);
            }
        }
        self.bits = bits;
        self.tids = tids;
        n - self.tids.len()
    }

    /// Splits off entries [m, n); the bit between m-1 and m disappears.
    pub fn split_off(&mut self, m: usize) -> Raw {
        let tids = self.tids.split_off(m);
        if m == 0 {
            return Raw { bits: std::mem::take(&mut self.bits), tids };
        }
        let bits = self.bits.split_off(m.min(self.bits.len()));
        self.bits.truncate(m - 1);
        Raw { bits, tids }
    }

    /// Appends `other`, whose first key differs from our last at `junction`.
    pub fn append(&mut self, other: &Raw, junction: u16) {
        if !self.tids.is_empty() && !other.tids.is_empty() {
            self.bits.push(junction);
        }
        self.bits.extend_from_slice(&other.bits);
        self.tids.extend_from_slice(&other.tids);
    }
}

/// Parameters of a compact leaf being written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    pub capacity: usize,
    pub level: u8,
    pub slack: u8,
}

impl Default for Shape {
    fn default() -> Self {
        Shape { capacity: 0, level: DEFAULT_LEVEL, slack: DEFAULT_SLACK }
    }
}

/// Whether a leaf with these bits is stored NARROW (one byte a bit).
pub fn fits_narrow(bits: &[u16]) -> bool {
    choose_base(bits).0
}

fn choose_base(bits: &[u16]) -> (bool, u16) {
    let (mut lo, mut hi) = (DUP, 0u16);
    for &b in bits {
        if b != DUP {
            lo = lo.min(b);
            hi = hi.max(b);
        }
    }
    if lo == DUP {
        return (true, 0);
    }
    let base = lo.saturating_sub(NARROW_MARGIN);
    (hi - base < NARROW_DUP as u16, base)
}

/// Writes a compact leaf holding `raw`. Capacity is raised to the entry
/// count if lower; `alloc` is the count plus slack, cut to what fits.
/// `NoSpace` if even the entries alone do not fit.
pub fn write(b: &mut [u8], raw: &Raw, shape: Shape, hikey: Option<(&[u8], Tid)>) -> Result<()> {
    write_with(b, raw, shape, hikey, None)
}

fn write_with(b: &mut [u8], raw: &Raw, shape: Shape, hikey: Option<(&[u8], Tid)>, force_wide: Option<bool>) -> Result<()> {
    let n = raw.len();
    if b.len() < MIN_BODY || b.len() > MAX_BODY {
        return Err(Error::BadInput("body size out of range"));
    }
    if shape.level > MAX_LEVEL {
        return Err(Error::BadInput("BlindiTree level too deep"));
    }
    if raw.bits.len() != n.saturating_sub(1) {
        return Err(Error::BadInput("bit count does not match entry count"));
    }
    if let Some((k, _)) = hikey {
        if k.len() > MAX_COMPACT_KEY {
            return Err(Error::KeyTooLong(k.len()));
        }
    }
    let capacity = shape.capacity.max(n).min(u16::MAX as usize);
    let (mut narrow, base) = choose_base(&raw.bits);
    if force_wide == Some(true) {
        narrow = false;
    }
    let hk_len = hikey.map(|(k, _)| k.len());
    let mut alloc = (n + shape.slack as usize).min(capacity).max(n);
    while alloc > n && body_size(shape.level, hk_len, alloc, narrow) > b.len() {
        alloc -= 1;
    }
    if body_size(shape.level, hk_len, alloc, narrow) > b.len() {
        return Err(Error::NoSpace);
    }
    let (tree_off, bits_off, tids_off, _end) = layout(shape.level, hk_len, alloc, narrow);
    b[0] = FORMAT_COMPACT_LEAF;
    b[1] = if narrow { F_NARROW } else { 0 } | if hikey.is_some() { F_HIKEY } else { 0 };
    b[2] = shape.level;
    b[3] = shape.slack;
    wr16(b, 4, n as u16);
    wr16(b, 6, capacity as u16);
    wr16(b, 8, alloc as u16);
    wr16(b, 10, base);
    wr16(b, 12, hk_len.unwrap_or(0) as u16);
    wr16(b, 14, 0);
    if let Some((k, t)) = hikey {
        b[HDR..HDR + k.len()].copy_from_slice(k);
        put_tid(b, HDR + k.len(), t);
    }
    for (k, v) in build_tree_nodes(&raw.bits, shape.level).iter().enumerate() {
        wr16(b, tree_off + 2 * k, *v);
    }
    for (i, &x) in raw.bits.iter().enumerate() {
        put_bit(b, bits_off, narrow, base, i, x);
    }
    for (i, &t) in raw.tids.iter().enumerate() {
        put_tid(b, tids_off + TID_BYTES * i, t);
    }
    Ok(())
}

#[inline]
fn put_tid(b: &mut [u8], off: usize, t: Tid) {
    b[off..off + 4].copy_from_slice(&t.block.to_le_bytes());
    b[off + 4..off + 6].copy_from_slice(&t.offset.to_le_bytes());
}

#[inline]
fn put_bit(b: &mut [u8], bits_off: usize, narrow: bool, base: u16, i: usize, x: u16) {
    if narrow {
        b[bits_off + i] = if x == DUP { NARROW_DUP } else { (x - base) as u8 };
    } else {
        wr16(b, bits_off + 2 * i, x);
    }
}

#[inline]
fn narrow_fits(h: &Hdr, x: u16) -> bool {
    x == DUP || (x >= h.base && x - h.base < NARROW_DUP as u16)
}

/// Builds from entries with keys (a standard leaf being compacted).
pub fn write_from_keys<'k>(
    b: &mut [u8],
    entries: impl IntoIterator<Item = (&'k [u8], Tid)>,
    shape: Shape,
    hikey: Option<(&[u8], Tid)>,
) -> Result<()> {
    let raw = Raw::from_keys(entries)?;
    write(b, &raw, shape, hikey)
}

fn shape_of(h: &Hdr) -> Shape {
    Shape { capacity: h.capacity, level: h.level, slack: h.slack }
}

fn hikey_owned(v: &CompactView) -> Option<(Vec<u8>, Tid)> {
    v.high_key().map(|(k, t)| (k.to_vec(), t))
}

/// Rewrites the body from `raw` keeping shape and high key.
fn rewrite(b: &mut [u8], raw: &Raw, force_wide: Option<bool>) -> Result<()> {
    let v = CompactView::parse(b)?;
    let shape = shape_of(&v.h);
    let stale = v.h.stale;
    let hk = hikey_owned(&v);
    write_with(b, raw, shape, hk.as_ref().map(|(k, t)| (k.as_slice(), *t)), force_wide)?;
    if stale {
        b[1] |= F_STALE;
    }
    Ok(())
}

/// Rebuilds the BlindiTree and clears the stale flag.
pub fn rebuild_tree(b: &mut [u8]) -> Result<()> {
    let v = CompactView::parse(b)?;
    let nodes = build_tree_nodes(&v.bits(), v.h.level);
    let off = v.h.tree_off;
    for (k, x) in nodes.iter().enumerate() {
        wr16(b, off + 2 * k, *x);
    }
    b[1] &= !F_STALE;
    Ok(())
}

/// Sets the logical capacity (doubling in the shrinking state, halving on
/// underflow). Never below the entry count or the allocation.
pub fn set_capacity(b: &mut [u8], capacity: usize) -> Result<()> {
    let h = parse_hdr(b)?;
    let c = capacity.max(h.alloc).min(u16::MAX as usize);
    wr16(b, 6, c as u16);
    Ok(())
}

/// Removes entry `j` in place (its key is gone, so it is dead for everyone).
pub fn remove_at(b: &mut [u8], j: usize) -> Result<()> {
    let v = CompactView::parse(b)?;
    if j >= v.h.n {
        return Err(Error::BadInput("remove past the end"));
    }
    let mut raw = Raw::from_view(&v);
    raw.remove(j);
    let keep_tree = !v.h.stale;
    rewrite(b, &raw, None)?;
    if keep_tree {
        rebuild_tree(b)?;
    }
    Ok(())
}

/// VACUUM: drops entries whose TID is dead; shrinks the allocation back to
/// count + slack. Returns how many went.
pub fn remove_tids(b: &mut [u8], dead: impl FnMut(Tid) -> bool) -> Result<usize> {
    let v = CompactView::parse(b)?;
    let mut raw = Raw::from_view(&v);
    let gone = raw.retain_live(dead);
    if gone > 0 {
        rewrite(b, &raw, None)?;
        rebuild_tree(b)?;
    }
    Ok(gone)
}

/// Result of an insert.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Inserted {
    Yes,
    /// The same (key, TID) is already there.
    Present,
    /// At capacity, or no room to breathe: the caller doubles, splits or
    /// converts. The body may still have changed (dead entries dropped).
    Full,
}

/// Inserts (key, tid) with one key fetch. A candidate whose key cannot be
/// fetched is dead and is removed on the spot (safe: nobody can see it),
/// and the search retries; `dropped` counts them. With `keep_tree` false
/// the BlindiTree is marked stale and searches scan sequentially until
/// `rebuild_tree` (batch inserts rebuild once at the end).
pub fn insert<F: KeyFetcher + ?Sized>(
    b: &mut [u8],
    key: &[u8],
    tid: Tid,
    f: &mut F,
    keep_tree: bool,
    dropped: &mut usize,
) -> Result<Inserted> {
    if key.len() > MAX_COMPACT_KEY {
        return Err(Error::KeyTooLong(key.len()));
    }
    let mut buf = Vec::new();
    loop {
        let v = CompactView::parse(b)?;
        let h = v.h;
        let (pos, newbit) = match v.locate(key, f, &mut buf)? {
            Located::Empty => (0, None),
            Located::Dead { j } => {
                remove_at(b, j)?;
                *dropped += 1;
                continue;
            }
            Located::Equal { s, e } => {
                let p = v.pos_in_run(s, e, TidPos::At(tid));
                if p < e && v.tid(p) == tid {
                    return Ok(Inserted::Present);
                }
                // A new duplicate: DUP goes on the side facing its run.
                (p, Some((if p > s { p - 1 } else { p }, DUP)))
            }
            // Key j (< key) agrees with key pos-1 through d, so d separates
            // pos-1 from the new key, and the old bit at pos-1 (< d) now
            // separates the new key from pos.
            Located::Greater { d, pos, .. } => (pos, Some((pos - 1, d))),
            Located::Less { d, pos, .. } => (pos, Some((pos, d))),
        };
        if h.n + 1 > h.capacity {
            return Ok(Inserted::Full);
        }
        let mut h = h;
        if let Some((_, x)) = newbit {
            if h.narrow && !narrow_fits(&h, x) {
                let raw = Raw::from_view(&v);
                if body_size(h.level, h.hk.map(|x| x.1), h.alloc, false) > b.len() {
                    return Ok(Inserted::Full);
                }
                rewrite(b, &raw, Some(true))?;
                h = parse_hdr(b)?;
            }
        }
        if h.n == h.alloc {
            // Breathe: room for `slack` more entries, or as many as fit.
            let mut grow = (h.slack.max(1) as usize).min(h.capacity - h.alloc);
            while grow > 0 && body_size(h.level, h.hk.map(|x| x.1), h.alloc + grow, h.narrow) > b.len() {
                grow -= 1;
            }
            if grow == 0 {
                return Ok(Inserted::Full);
            }
            let w = h.width();
            let (from, to) = (h.tids_off, h.tids_off + grow * w);
            b.copy_within(from..from + TID_BYTES * h.n, to);
            wr16(b, 8, (h.alloc + grow) as u16);
            h = parse_hdr(b)?;
        }
        // Shift and place.
        let w = h.width();
        if let Some((bi, x)) = newbit {
            let nb = h.n - 1; // bits in use before (n >= 1 here)
            let s = h.bits_off + bi * w;
            b.copy_within(s..h.bits_off + nb * w, s + w);
            put_bit(b, h.bits_off, h.narrow, h.base, bi, x);
        }
        let s = h.tids_off + pos * TID_BYTES;
        b.copy_within(s..h.tids_off + h.n * TID_BYTES, s + TID_BYTES);
        put_tid(b, s, tid);
        wr16(b, 4, (h.n + 1) as u16);
        if keep_tree && !h.stale {
            rebuild_tree(b)?;
        } else {
            b[1] |= F_STALE;
        }
        return Ok(Inserted::Yes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    use crate::elastic::tests::Heap;

    fn sorted(mut e: Vec<(Vec<u8>, Tid)>) -> Vec<(Vec<u8>, Tid)> {
        e.sort_by(|a, b| cmp_pair(&a.0, a.1, &b.0, b.1));
        e.dedup();
        e
    }

    fn entries_strategy() -> impl Strategy<Value = Vec<(Vec<u8>, Tid)>> {
        // Short keys over a small alphabet: many prefixes and duplicates.
        proptest::collection::vec(
            (proptest::collection::vec(prop_oneof![Just(0u8), Just(1), Just(0x80), Just(0xff), any::<u8>()], 0..5), 0u32..40, 1u16..4),
            0..120,
        )
        .prop_map(|v| {
            let mut seen = BTreeSet::new();
            sorted(v.into_iter().filter(|(_, b, o)| seen.insert((*b, *o))).map(|(k, b, o)| (k, Tid::new(b, o))).collect())
        })
    }

    fn heap_of(e: &[(Vec<u8>, Tid)]) -> Heap {
        Heap { keys: e.iter().map(|(k, t)| (*t, k.clone())).collect(), pruned: BTreeSet::new(), fetches: 0 }
    }

    fn oracle_lb(e: &[(Vec<u8>, Tid)], t: &Target) -> usize {
        e.partition_point(|(k, tid)| cmp_entry(k, *tid, t) == Ordering::Less)
    }

    #[test]
    fn paper_example() {
        // Figure 2: keys 165, 166, 170, 171, 214, 233, 235 (as one byte).
        let ks: Vec<u8> = vec![165, 166, 170, 171, 214, 233, 235];
        let e: Vec<(Vec<u8>, Tid)> = ks.iter().enumerate().map(|(i, &k)| (vec![k], Tid::new(i as u32, 1))).collect();
        let raw = Raw::from_keys(e.iter().map(|(k, t)| (k.as_slice(), *t))).unwrap();
        // The paper writes these as 9-bit numbers with a leading 0; our bit 0
        // is the "byte follows" flag, so bit numbers coincide.
        assert_eq!(raw.bits, vec![7, 5, 8, 2, 3, 7]);
        let nodes = build_tree_nodes(&raw.bits, 3);
        assert_eq!(&nodes[..3], &[3, 1, 4]);
        let mut b = vec![0u8; 512];
        write(&mut b, &raw, Shape { capacity: 16, level: 3, slack: 2 }, None).unwrap();
        let v = CompactView::parse(&b).unwrap();
        let mut h = heap_of(&e);
        let mut buf = Vec::new();
        assert_eq!(v.search(&Target::first(&[186]), &mut h, &mut buf).unwrap(), 4);
        assert_eq!(h.fetches, 1);
        for (i, (k, _)) in e.iter().enumerate() {
            assert_eq!(v.search(&Target::first(k), &mut h, &mut buf).unwrap(), i);
        }
    }

    /// The example drawn in README.md, byte for byte.
    #[test]
    fn readme_layout() {
        let e: Vec<(Vec<u8>, Tid)> = [165u8, 166, 170, 171, 214, 233, 235].iter().enumerate().map(|(i, &k)| (vec![k], Tid::new(i as u32, 1))).collect();
        let mut b = vec![0u8; 256];
        write_from_keys(&mut b, e.iter().map(|(k, t)| (k.as_slice(), *t)), Shape { capacity: 16, level: 3, slack: 2 }, None).unwrap();
        let want_hdr = [0x12, 0x01, 0x03, 0x02, 7, 0, 16, 0, 9, 0, 0, 0, 0, 0, 0, 0];
        assert_eq!(&b[..16], &want_hdr);
        assert_eq!(&b[16..30], &[3, 0, 1, 0, 4, 0, 0, 0, 2, 0, 0xff, 0xff, 5, 0]);
        assert_eq!(&b[30..36], &[7, 5, 8, 2, 3, 7]);
        assert_eq!(&b[39..51], &[0, 0, 0, 0, 1, 0, 1, 0, 0, 0, 1, 0]);
        assert_eq!(CompactView::parse(&b).unwrap().used_bytes(), 39 + 9 * 6);
    }

    #[test]
    fn prefix_keys_and_dups() {
        let e = sorted(vec![
            (vec![], Tid::new(1, 1)),
            (vec![0], Tid::new(2, 1)),
            (vec![0], Tid::new(3, 1)),
            (vec![0, 0], Tid::new(4, 1)),
            (vec![0, 0], Tid::new(5, 1)),
            (vec![0, 0, 0], Tid::new(6, 1)),
            (vec![1], Tid::new(7, 1)),
        ]);
        let mut b = vec![0u8; 512];
        write_from_keys(&mut b, e.iter().map(|(k, t)| (k.as_slice(), *t)), Shape { capacity: 32, ..Shape::default() }, None).unwrap();
        let v = CompactView::parse(&b).unwrap();
        v.verify_structure().unwrap();
        let mut h = heap_of(&e);
        assert_eq!(v.verify_keys(&mut h).unwrap(), 0);
        let mut buf = Vec::new();
        for probe in [vec![], vec![0], vec![0, 0], vec![0, 0, 0], vec![0, 1], vec![1], vec![2]] {
            for t in [Target::first(&probe), Target::last(&probe), Target::at(&probe, Tid::new(3, 1))] {
                assert_eq!(v.search(&t, &mut h, &mut buf).unwrap(), oracle_lb(&e, &t), "{probe:?} {t:?}");
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]

        /// Search against a sorted-array oracle, every tree depth, one fetch.
        #[test]
        fn search_matches_oracle(e in entries_strategy(), probes in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..5), 1..20), level in 0u8..7) {
            let mut b = vec![0u8; 4096];
            write_from_keys(&mut b, e.iter().map(|(k, t)| (k.as_slice(), *t)), Shape { capacity: 200, level, slack: 3 }, None).unwrap();
            let v = CompactView::parse(&b).unwrap();
            v.verify_structure().unwrap();
            let mut h = heap_of(&e);
            prop_assert_eq!(v.verify_keys(&mut h).unwrap(), 0);
            let mut buf = Vec::new();
            let probes: Vec<Vec<u8>> = probes.into_iter().chain(e.iter().map(|x| x.0.clone())).collect();
            for p in &probes {
                for t in [Target::first(p), Target::last(p), Target::at(p, Tid::new(20, 2))] {
                    h.fetches = 0;
                    let got = v.search(&t, &mut h, &mut buf).unwrap();
                    prop_assert_eq!(got, oracle_lb(&e, &t));
                    prop_assert!(h.fetches <= 1);
                }
            }
        }

        /// Random pruned subsets: searches still bracket every live entry.
        #[test]
        fn pruned_keys_never_misplace(e in entries_strategy(), mask in proptest::collection::vec(any::<bool>(), 120), probes in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..5), 1..20)) {
            let mut b = vec![0u8; 4096];
            write_from_keys(&mut b, e.iter().map(|(k, t)| (k.as_slice(), *t)), Shape { capacity: 200, level: 3, slack: 3 }, None).unwrap();
            let v = CompactView::parse(&b).unwrap();
            let mut h = heap_of(&e);
            for (i, (_, t)) in e.iter().enumerate() {
                if mask[i] { h.pruned.insert(*t); }
            }
            prop_assert_eq!(v.verify_keys(&mut h).unwrap(), h.pruned.len());
            let mut buf = Vec::new();
            let probes: Vec<Vec<u8>> = probes.into_iter().chain(e.iter().map(|x| x.0.clone())).collect();
            for p in &probes {
                for t in [Target::first(p), Target::last(p), Target::at(p, Tid::new(20, 2))] {
                    let got = v.search(&t, &mut h, &mut buf).unwrap();
                    for (i, (k, tid)) in e.iter().enumerate() {
                        if h.pruned.contains(tid) { continue; }
                        let less = cmp_entry(k, *tid, &t) == Ordering::Less;
                        prop_assert_eq!(i < got, less, "live entry {} on the wrong side of {}", i, got);
                    }
                }
            }
        }

        /// Inserts one by one (with and without the tree kept) and deletes,
        /// against a BTreeSet; pruned candidates get dropped on insert.
        #[test]
        fn insert_delete_match_oracle(e in entries_strategy(), level in 0u8..6, keep in any::<bool>(), prune in proptest::collection::vec(0usize..200, 0..5), del in proptest::collection::vec(any::<bool>(), 120)) {
            let mut b = vec![0u8; 2048];
            write(&mut b, &Raw::default(), Shape { capacity: 300, level, slack: 2 }, Some((&[0xff, 0xff, 0xff, 0xff, 0xff, 0xff], Tid::new(0, 0)))).unwrap();
            let mut h = heap_of(&e);
            let mut oracle: BTreeSet<(Vec<u8>, Tid)> = BTreeSet::new();
            // Insert in a shuffled order (reverse halves interleaved).
            let mut order: Vec<usize> = (0..e.len()).collect();
            order.sort_by_key(|&i| (i * 7919) % (e.len().max(1)));
            for (step, &i) in order.iter().enumerate() {
                let (k, t) = &e[i];
                if prune.contains(&step) && !oracle.is_empty() {
                    // Prune some live entry from the heap: it is dead now.
                    if let Some(victim) = oracle.iter().find(|x| !h.pruned.contains(&x.1)) {
                        h.pruned.insert(victim.1);
                    }
                }
                let mut dropped = 0;
                let r = insert(&mut b, k, *t, &mut h, keep, &mut dropped).unwrap();
                prop_assert_eq!(r, Inserted::Yes);
                oracle.insert((k.clone(), *t));
                if !keep { rebuild_tree(&mut b).unwrap(); }
                let v = CompactView::parse(&b).unwrap();
                v.verify_structure().unwrap();
                let live: Vec<Tid> = v.tids().into_iter().filter(|t| !h.pruned.contains(t)).collect();
                let want: Vec<Tid> = oracle.iter().filter(|x| !h.pruned.contains(&x.1)).map(|x| x.1).collect();
                prop_assert_eq!(live, want);
            }
            let mut dropped = 0;
            if let Some((k, t)) = e.first() {
                if !h.pruned.contains(t) {
                    prop_assert_eq!(insert(&mut b, k, *t, &mut h, true, &mut dropped).unwrap(), Inserted::Present);
                }
            }
            rebuild_tree(&mut b).unwrap();
            prop_assert!(CompactView::parse(&b).unwrap().verify_keys(&mut h).is_ok());
            // VACUUM a random subset and re-check.
            let dead: BTreeSet<Tid> = e.iter().enumerate().filter(|(i, _)| del[*i]).map(|(_, x)| x.1).collect();
            remove_tids(&mut b, |t| dead.contains(&t)).unwrap();
            let v = CompactView::parse(&b).unwrap();
            v.verify_structure().unwrap();
            prop_assert!(v.verify_keys(&mut h).is_ok());
            prop_assert!(v.tids().iter().all(|t| !dead.contains(t)));
        }

        /// Split and merge of raw parts keep every search right.
        #[test]
        fn split_merge(e in entries_strategy(), at in 0usize..200) {
            prop_assume!(e.len() >= 2);
            let m = 1 + at % (e.len() - 1);
            let mut raw = Raw::from_keys(e.iter().map(|(k, t)| (k.as_slice(), *t))).unwrap();
            let whole = raw.clone();
            let right = raw.split_off(m);
            prop_assert_eq!(&raw, &Raw::from_keys(e[..m].iter().map(|(k, t)| (k.as_slice(), *t))).unwrap());
            prop_assert_eq!(&right, &Raw::from_keys(e[m..].iter().map(|(k, t)| (k.as_slice(), *t))).unwrap());
            let mut merged = raw.clone();
            merged.append(&right, disc_bit(&e[m - 1].0, &e[m].0));
            prop_assert_eq!(merged, whole);
        }

        #[test]
        fn random_bytes_never_panic(body in proptest::collection::vec(any::<u8>(), 0..600), key in proptest::collection::vec(any::<u8>(), 0..6), fmt in prop_oneof![Just(FORMAT_COMPACT_LEAF), any::<u8>()], flags in 0u8..8, level in 0u8..4) {
            let mut body = body;
            if body.len() >= HDR { body[0] = fmt; body[1] = flags; body[2] = level; }
            let mut heap = |_t: Tid, out: &mut Vec<u8>| { out.extend_from_slice(&[1, 2, 3]); true };
            if let Ok(v) = CompactView::parse(&body) {
                let mut buf = Vec::new();
                let _ = v.search(&Target::first(&key), &mut heap, &mut buf);
                let _ = v.search_by_fetch(&Target::last(&key), &mut heap, &mut buf);
                let _ = v.verify_keys(&mut heap);
                let _ = v.high_key();
                let mut c = body.clone();
                let mut d = 0;
                let _ = insert(&mut c, &key, Tid::new(9, 9), &mut heap, true, &mut d);
                let mut c = body.clone();
                let _ = remove_tids(&mut c, |t| t.offset % 2 == 0);
                let mut c = body.clone();
                let _ = rebuild_tree(&mut c);
            }
        }
    }
}
