//! Compact leaf: front-coded or gap-coded keys, each with its whole posting list of heap
//! TIDs, restart points for binary search, no per-entry line pointers.
//!
//! TIDs are coded as one number `v = block * R + offset`, where `R` is the
//! leaf's largest offset plus one. A heap offset rarely exceeds ~300, so this
//! costs log2(300) bits instead of the 16 a `(block << 16) | offset` packing
//! would, and a posting list becomes an ascending run of integers whose gaps
//! are small varints. With the CHAIN flag, the first TID of a non-restart
//! entry is a signed gap from the previous entry's last TID: in a table loaded
//! in key order (serial keys, timestamps) that gap is a byte or less.
//!
//! With the FIXTID flag, the first TID of every entry is a fixed-width
//! little-endian number of as many bytes as the leaf's largest TID value
//! needs: TIDs in random heap order (a unique key loaded out of heap order)
//! are uniform over the heap, and LEB128 spends a fourth byte on every value
//! of 2^21 or more where three bytes hold the number.
//!
//! With the KDELTA flag (fixed-length keys of at most 16 bytes), a key after
//! a restart is the varint difference to the previous key read as a
//! big-endian number: one byte for a serial key instead of a shared-length
//! byte and the last byte.
//!
//! Each flag (FIXLEN, SINGLE, CHAIN, FIXTID, KDELTA) is chosen per leaf at `finish`, from
//! sizes the builder keeps for every choice as entries come in, so a leaf is
//! as small as this format allows for its content.

use super::*;
use crate::tid::Tid;

pub(crate) const HDR: usize = 14;
const F_FIXLEN: u8 = 0x01;
const F_SINGLE: u8 = 0x02;
const F_CHAIN: u8 = 0x04;
/// Restart keys live in the restart slots (fence slots, see `Slots`); set on
/// every FIXLEN leaf written since format 0x01 gained it, accepted absent.
const F_FENCE: u8 = 0x08;
/// First TIDs are `tidw` (header byte 13) bytes, little-endian; never with
/// CHAIN.
const F_FIXTID: u8 = 0x10;
/// Keys (fixed length <= 16, fenced) after a restart are varint gaps from
/// the previous key read as a big-endian number.
const F_KDELTA: u8 = 0x20;
const F_ALL: u8 = F_FIXLEN | F_SINGLE | F_CHAIN | F_FENCE | F_FIXTID | F_KDELTA;
/// Widest FIXTID number: TID values stay below 2^48.
const MAX_TIDW: usize = 6;

/// Bytes a FIXTID leaf spends on each first TID when its largest value is `v`.
#[inline]
fn fixed_tid_width(v: u64) -> usize {
    crate::varint::fixed_len(v as u128)
}

/// TID values stay below 2^48 (u32 block times R <= 2^16); the reciprocal
/// division in `LeafView::tid` is exact only there.
const V_LIMIT: u64 = 1 << 48;

#[inline]
fn tv(t: Tid, r: u64) -> u64 {
    t.block as u64 * r + t.offset as u64
}

#[derive(Clone, Copy, Debug)]
struct Ent {
    kend: u32,
    tend: u32,
    restart: bool,
}

/// Totals the builder would have after a tentative append.
#[derive(Clone, Copy, Debug)]
struct Acct {
    kc: KeyCosts,
    cnt: usize,
    single: bool,
    maxoff: u16,
    tid_abs: usize,
    tid_chain: usize,
    /// Varint bytes of the TIDs after each entry's first: the same under
    /// every coding of first TIDs.
    tid_rest: usize,
    /// Largest TID value in the leaf (the FIXTID width comes from it; all
    /// TIDs, not only first ones, so that dropping TIDs never widens it).
    max_v: u64,
    nents: usize,
    last_v: u64,
    nrestarts: usize,
}

impl Acct {
    fn empty() -> Acct {
        Acct {
            kc: KeyCosts::default(),
            cnt: 0,
            single: true,
            maxoff: 0,
            tid_abs: 0,
            tid_chain: 0,
            tid_rest: 0,
            max_v: 0,
            nents: 0,
            last_v: 0,
            nrestarts: 0,
        }
    }

    fn set_tid_costs(&mut self, c: TidCosts) {
        self.tid_abs = c.abs;
        self.tid_chain = c.chain;
        self.tid_rest = c.rest;
        self.max_v = c.max_v;
        self.last_v = c.last_v;
    }

    /// TID bytes under FIXTID.
    fn tid_fixed(&self) -> usize {
        self.nents * fixed_tid_width(self.max_v) + self.tid_rest
    }

    /// How the leaf codes its first TIDs: the smallest coding, the older one
    /// on a tie.
    fn tid_coding(&self) -> TidCoding {
        let fixed = self.tid_fixed();
        if fixed < self.tid_abs && fixed < self.tid_chain {
            TidCoding::Fixed
        } else if self.tid_chain < self.tid_abs {
            TidCoding::Chain
        } else {
            TidCoding::Plain
        }
    }

    fn size(&self) -> usize {
        HDR + SLOT * self.nrestarts
            + self.kc.leaf_total()
            + if self.single { 0 } else { self.cnt }
            + self.tid_abs.min(self.tid_chain).min(self.tid_fixed())
    }
}

/// The coding of each entry's first TID (further TIDs are always varint
/// gaps).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum TidCoding {
    /// `varint(v)`.
    Plain,
    /// `varint(zigzag(v - previous entry's last v))`, restarts plain.
    Chain,
    /// `v` in `fixed_tid_width(max v)` bytes, little-endian.
    Fixed,
}

/// TID sizes of a leaf's entries under every coding (`LeafBuilder::tid_costs`).
struct TidCosts {
    abs: usize,
    chain: usize,
    rest: usize,
    max_v: u64,
    last_v: u64,
}

/// Packs sorted entries into one leaf body of at most `cap` bytes.
///
/// Entries must come in comparator order. Each `add` takes a key and its TIDs
/// in strictly ascending order. Adding the same key bytes again right after it
/// (with TIDs above the ones already there) extends that entry's posting list.
#[derive(Clone, Debug)]
pub struct LeafBuilder {
    cap: usize,
    interval: usize,
    keys: Vec<u8>,
    tids: Vec<Tid>,
    ents: Vec<Ent>,
    since_restart: usize,
    a: Acct,
}

impl LeafBuilder {
    /// A builder for bodies of `cap` bytes (`MIN_BODY..=MAX_BODY`), with a
    /// restart every `DEFAULT_RESTART_INTERVAL` entries.
    pub fn new(cap: usize) -> Self {
        Self::with_restart_interval(cap, DEFAULT_RESTART_INTERVAL)
    }

    /// Fewer restarts make leaves smaller and in-leaf searches longer.
    pub fn with_restart_interval(cap: usize, interval: usize) -> Self {
        assert!((MIN_BODY..=MAX_BODY).contains(&cap), "leaf body capacity {cap} out of range");
        assert!(interval >= 1);
        LeafBuilder {
            cap,
            interval,
            keys: Vec::new(),
            tids: Vec::new(),
            ents: Vec::new(),
            since_restart: 0,
            a: Acct::empty(),
        }
    }

    pub fn cap(&self) -> usize {
        self.cap
    }

    /// Changes the capacity of the body being built. Lowering it below the
    /// current size is not allowed.
    pub(crate) fn set_cap(&mut self, cap: usize) {
        assert!(cap <= MAX_BODY && cap >= self.size());
        self.cap = cap;
    }

    pub fn is_empty(&self) -> bool {
        self.ents.is_empty()
    }

    pub fn nkeys(&self) -> usize {
        self.ents.len()
    }

    pub fn ntids(&self) -> usize {
        self.tids.len()
    }

    /// Bytes `finish` would write now.
    pub fn size(&self) -> usize {
        self.a.size()
    }

    fn kstart(&self, i: usize) -> usize {
        if i == 0 {
            0
        } else {
            self.ents[i - 1].kend as usize
        }
    }

    fn tstart(&self, i: usize) -> usize {
        if i == 0 {
            0
        } else {
            self.ents[i - 1].tend as usize
        }
    }

    fn key(&self, i: usize) -> &[u8] {
        &self.keys[self.kstart(i)..self.ents[i].kend as usize]
    }

    fn ptids(&self, i: usize) -> &[Tid] {
        &self.tids[self.tstart(i)..self.ents[i].tend as usize]
    }

    pub fn first_key(&self) -> Option<&[u8]> {
        (!self.ents.is_empty()).then(|| self.key(0))
    }

    pub fn last_key(&self) -> Option<&[u8]> {
        self.ents.len().checked_sub(1).map(|i| self.key(i))
    }

    /// Adds `key` with (a prefix of) `tids`; returns how many TIDs were taken:
    /// all if they fit, a prefix if the posting list must continue in the next
    /// leaf (the caller starts a new leaf and adds the rest under the same
    /// key), 0 if nothing fits. An empty builder always takes at least one TID
    /// of a key up to `cap / 3` bytes long.
    pub fn add(&mut self, key: &[u8], tids: &[Tid]) -> usize {
        self.add_impl(key, tids, None)
    }

    pub(crate) fn add_impl(&mut self, key: &[u8], tids: &[Tid], force_restart: Option<bool>) -> usize {
        if tids.is_empty() {
            return 0;
        }
        assert!(
            tids.windows(2).all(|w| w[0] < w[1]),
            "posting list must be strictly ascending"
        );
        if self.ents.len() >= MAX_BODY || self.tids.len() + 1 >= MAX_BODY {
            return 0;
        }
        let last = self.ents.len().checked_sub(1);
        let merge = match last {
            Some(i) => crate::keys::bytes_eq(self.key(i), key) && *self.ptids(i).last().unwrap() < tids[0],
            None => false,
        };
        let restart = !merge
            && (self.ents.is_empty() || force_restart.unwrap_or(self.since_restart >= self.interval));
        // The u16 TID counter bounds how many may come in.
        let room = MAX_BODY - 1 - self.tids.len();
        let n = tids.len().min(room);

        let full = self.plan(key, &tids[..n], merge, restart);
        let (take, acct) = if full.size() <= self.cap {
            (n, full)
        } else {
            // Size grows with the prefix length, so bisect for the longest
            // prefix that fits.
            let (mut lo, mut hi) = (0usize, n);
            let mut best = None;
            while hi - lo > 1 {
                let mid = (lo + hi) / 2;
                let p = self.plan(key, &tids[..mid], merge, restart);
                if p.size() <= self.cap {
                    lo = mid;
                    best = Some(p);
                } else {
                    hi = mid;
                }
            }
            match best {
                Some(p) => (lo, p),
                None => {
                    // lo is 0 unless the loop never ran (n == 1).
                    return 0;
                }
            }
        };
        if take == 0 {
            return 0;
        }
        self.a = acct;
        self.tids.extend_from_slice(&tids[..take]);
        if merge {
            self.ents.last_mut().unwrap().tend = self.tids.len() as u32;
        } else {
            self.keys.extend_from_slice(key);
            self.ents.push(Ent { kend: self.keys.len() as u32, tend: self.tids.len() as u32, restart });
            self.since_restart = if restart { 1 } else { self.since_restart + 1 };
        }
        take
    }

    /// TID sizes under every coding, for all entries under R.
    fn tid_costs(&self, r: u64) -> TidCosts {
        let mut c = TidCosts { abs: 0, chain: 0, rest: 0, max_v: 0, last_v: 0 };
        let mut prev = 0u64;
        for i in 0..self.ents.len() {
            let t = self.ptids(i);
            let v0 = tv(t[0], r);
            c.abs += var_len(v0);
            c.chain += if self.ents[i].restart {
                var_len(v0)
            } else {
                var_len(zigzag(v0 as i64 - prev as i64))
            };
            prev = v0;
            for &x in &t[1..] {
                let v = tv(x, r);
                let d = var_len(v - prev - 1);
                c.abs += d;
                c.chain += d;
                c.rest += d;
                prev = v;
            }
            c.max_v = c.max_v.max(prev);
        }
        c.last_v = prev;
        c
    }

    fn plan(&self, key: &[u8], tids: &[Tid], merge: bool, restart: bool) -> Acct {
        let mut a = self.a;
        if tids.is_empty() {
            return a;
        }
        let newmax = tids.iter().map(|t| t.offset).max().unwrap().max(a.maxoff);
        let r = newmax as u64 + 1;
        if newmax != a.maxoff {
            a.set_tid_costs(self.tid_costs(r));
            a.maxoff = newmax;
        }
        let mut prev = a.last_v;
        let mut rest = tids;
        if merge {
            let old = self.ptids(self.ents.len() - 1).len();
            a.cnt = a.cnt - var_len(old as u64) + var_len((old + tids.len()) as u64);
            a.single = false;
        } else {
            let prev_key = self.ents.len().checked_sub(1).map(|i| self.key(i));
            a.kc.add(prev_key, key, restart);
            a.cnt += var_len(tids.len() as u64);
            a.single = a.single && tids.len() == 1;
            a.nrestarts += restart as usize;
            a.nents += 1;
            let v0 = tv(tids[0], r);
            a.tid_abs += var_len(v0);
            a.tid_chain += if restart { var_len(v0) } else { var_len(zigzag(v0 as i64 - prev as i64)) };
            prev = v0;
            rest = &tids[1..];
        }
        for &x in rest {
            let v = tv(x, r);
            let d = var_len(v - prev - 1);
            a.tid_abs += d;
            a.tid_chain += d;
            a.tid_rest += d;
            prev = v;
        }
        a.max_v = a.max_v.max(prev);
        a.last_v = prev;
        a
    }

    /// Recomputes every total from the stored entries.
    fn recompute(&mut self) {
        let mut a = Acct::empty();
        a.maxoff = self.tids.iter().map(|t| t.offset).max().unwrap_or(0);
        let r = a.maxoff as u64 + 1;
        let mut since = 0;
        for i in 0..self.ents.len() {
            let e = self.ents[i];
            let prev_key = i.checked_sub(1).map(|j| self.key(j));
            a.kc.add(prev_key, self.key(i), e.restart);
            let n = self.ptids(i).len();
            a.cnt += var_len(n as u64);
            a.single &= n == 1;
            a.nrestarts += e.restart as usize;
            a.nents += 1;
            since = if e.restart { 1 } else { since + 1 };
        }
        a.set_tid_costs(self.tid_costs(r));
        self.a = a;
        self.since_restart = since;
    }

    /// Keeps the first `keep` TIDs (cutting the posting list they end in) and
    /// returns what was removed, in order, as (key, tids) entries.
    pub(crate) fn truncate_tids(&mut self, keep: usize) -> Vec<(Vec<u8>, Vec<Tid>)> {
        let mut removed = Vec::new();
        if keep >= self.tids.len() {
            return removed;
        }
        // First entry that loses TIDs.
        let first = self.ents.iter().position(|e| e.tend as usize > keep).unwrap();
        for i in first..self.ents.len() {
            let ts = self.tstart(i).max(keep);
            removed.push((self.key(i).to_vec(), self.tids[ts..self.ents[i].tend as usize].to_vec()));
        }
        let keep_ents = if self.tstart(first) < keep { first + 1 } else { first };
        self.ents.truncate(keep_ents);
        if let Some(e) = self.ents.last_mut() {
            e.tend = keep as u32;
        }
        self.keys.truncate(self.ents.last().map_or(0, |e| e.kend as usize));
        self.tids.truncate(keep);
        self.recompute();
        removed
    }

    /// Writes the body without resetting; returns its length.
    pub(crate) fn encode(&self, out: &mut [u8]) -> usize {
        let size = self.size();
        assert!(out.len() >= size, "leaf output buffer too small");
        let fixed = self.a.kc.fixed().filter(|_| !self.ents.is_empty());
        let single = self.a.single && !self.ents.is_empty();
        let coding = self.a.tid_coding();
        let tidw = fixed_tid_width(self.a.max_v);
        let r = self.a.maxoff as u64 + 1;
        let mut flags = 0;
        if fixed.is_some() {
            flags |= F_FIXLEN;
        }
        if single {
            flags |= F_SINGLE;
        }
        match coding {
            TidCoding::Plain => {}
            TidCoding::Chain => flags |= F_CHAIN,
            TidCoding::Fixed => flags |= F_FIXTID,
        }
        // Fence slots whenever keys are fixed-length: the restart key moves
        // from its entry into its slot, so the size is the same.
        let fence = fixed.is_some();
        if fence {
            flags |= F_FENCE;
        }
        let gaps = self.a.kc.delta_coded();
        if gaps {
            flags |= F_KDELTA;
        }
        let mut pos = HDR;
        let mut slots = Vec::with_capacity(self.a.nrestarts);
        let mut prev_v = 0u64;
        for i in 0..self.ents.len() {
            let e = self.ents[i];
            if e.restart {
                slots.push(SlotOut { off: pos, idx: i });
            }
            if gaps && !e.restart {
                put_var(out, &mut pos, key_gap(self.key(i - 1), self.key(i)).expect("KDELTA keys ascend"));
            } else if !(e.restart && fence) {
                let prev_key = if i == 0 { &[][..] } else { self.key(i - 1) };
                put_key(out, &mut pos, prev_key, self.key(i), e.restart, fixed.is_some());
            }
            let t = self.ptids(i);
            if !single {
                put_var(out, &mut pos, t.len() as u64);
            }
            let v0 = tv(t[0], r);
            match coding {
                TidCoding::Fixed => {
                    out[pos..pos + tidw].copy_from_slice(&v0.to_le_bytes()[..tidw]);
                    pos += tidw;
                }
                TidCoding::Chain if !e.restart => put_var(out, &mut pos, zigzag(v0 as i64 - prev_v as i64)),
                _ => put_var(out, &mut pos, v0),
            }
            prev_v = v0;
            for &x in &t[1..] {
                let v = tv(x, r);
                put_var(out, &mut pos, v - prev_v - 1);
                prev_v = v;
            }
        }
        let restart_off = pos;
        write_slots(out, &mut pos, &slots, fence.then_some(|i: usize| self.key(i)));
        out[0] = FORMAT_LEAF;
        out[1] = flags;
        wr_u16(out, 2, self.ents.len());
        wr_u16(out, 4, self.tids.len());
        wr_u16(out, 6, self.a.maxoff as usize);
        wr_u16(out, 8, restart_off);
        wr_u16(out, 10, slots.len());
        out[12] = fixed.unwrap_or(0) as u8;
        out[13] = if coding == TidCoding::Fixed { tidw as u8 } else { 0 };
        debug_assert_eq!(pos, size);
        pos
    }

    /// Writes the body into `out` (at least `size()` bytes; `cap` always
    /// suffices), resets the builder and returns the used length.
    pub fn finish(&mut self, out: &mut [u8]) -> usize {
        let n = self.encode(out);
        self.reset();
        n
    }

    pub fn reset(&mut self) {
        self.keys.clear();
        self.tids.clear();
        self.ents.clear();
        self.since_restart = 0;
        self.a = Acct::empty();
    }

    #[cfg(test)]
    fn check_acct(&self) {
        let mut c = self.clone();
        c.recompute();
        assert_eq!(format!("{:?}", c.a), format!("{:?}", self.a));
    }
}

/// A parsed leaf body. Parsing checks the header and restart array; entries
/// are checked as they are decoded, so every accessor returns a `Result`.
#[derive(Clone, Copy, Debug)]
pub struct LeafView<'a> {
    /// `body[..restart_off]`: decoding can never run into the restart array.
    area: &'a [u8],
    flags: u8,
    nkeys: usize,
    ntids: usize,
    r: u64,
    recip: u128,
    fixed: Option<usize>,
    /// Bytes of each first TID under FIXTID, else 0.
    tidw: usize,
    slots: Slots<'a>,
}

impl<'a> LeafView<'a> {
    /// Parses a plain leaf body; `body` may extend past the used length.
    pub fn parse(body: &'a [u8]) -> Res<Self> {
        if body.len() < HDR {
            return corrupt("leaf body shorter than its header");
        }
        if body[0] != FORMAT_LEAF {
            return corrupt("not a plain leaf body");
        }
        let flags = body[1];
        if flags & !F_ALL != 0 {
            return corrupt("unknown leaf flags");
        }
        let tidw = body[13] as usize;
        if flags & F_FIXTID != 0 {
            if flags & F_CHAIN != 0 || tidw == 0 || tidw > MAX_TIDW {
                return corrupt("bad fixed TID width");
            }
        } else if tidw != 0 {
            return corrupt("unknown leaf flags");
        }
        let nkeys = rd_u16(body, 2) as usize;
        let ntids = rd_u16(body, 4) as usize;
        let r = rd_u16(body, 6) as u64 + 1;
        let restart_off = rd_u16(body, 8) as usize;
        let nslots = rd_u16(body, 10) as usize;
        let fixed = (flags & F_FIXLEN != 0).then_some(body[12] as usize);
        if fixed == Some(0) {
            return corrupt("fixed key length of zero");
        }
        if flags & F_FENCE != 0 && fixed.is_none() {
            return corrupt("fence slots without a fixed key length");
        }
        if flags & F_KDELTA != 0 && (flags & F_FENCE == 0 || fixed.is_some_and(|l| l > KDELTA_MAX_LEN)) {
            return corrupt("key gaps without fence slots of at most 16 bytes");
        }
        let fence = if flags & F_FENCE != 0 { fixed.unwrap_or(0) } else { 0 };
        if restart_off < HDR || restart_off + nslots * (SLOT + fence) > body.len() {
            return corrupt("leaf restart array out of bounds");
        }
        if ntids < nkeys || (flags & F_SINGLE != 0 && ntids != nkeys) || (nkeys == 0 && ntids != 0) {
            return corrupt("leaf counts inconsistent");
        }
        if nkeys == 0 && restart_off != HDR {
            return corrupt("empty leaf with entries");
        }
        let slots = Slots::parse(body, restart_off, nslots, fence, HDR, restart_off, nkeys)?;
        Ok(LeafView {
            area: &body[..restart_off],
            flags,
            nkeys,
            ntids,
            r,
            recip: (1u128 << 64) / r as u128 + 1,
            fixed,
            tidw,
            slots,
        })
    }

    pub fn nkeys(&self) -> usize {
        self.nkeys
    }

    pub fn ntids(&self) -> usize {
        self.ntids
    }

    /// Bytes of the body in use (header, entries, restart array).
    pub fn used_len(&self) -> usize {
        self.area.len() + self.slots.len_bytes()
    }

    /// The restart interval is not stored; this is the number of restarts.
    pub fn nrestarts(&self) -> usize {
        self.slots.n
    }

    #[inline]
    fn tid(&self, v: u64) -> Res<Tid> {
        // v < 2^48 and R <= 2^16 make the reciprocal quotient exact.
        let block = ((v as u128 * self.recip) >> 64) as u64;
        if block > u32::MAX as u64 {
            return corrupt("TID block out of range");
        }
        Ok(Tid { block: block as u32, offset: (v - block * self.r) as u16 })
    }

    /// The first key, borrowed from the page.
    pub fn first_key(&self) -> Res<Option<&'a [u8]>> {
        if self.nkeys == 0 {
            return Ok(None);
        }
        self.slots.restart_key(self.area, 0, self.fixed).map(Some)
    }

    pub fn last_key(&self) -> Res<Option<Vec<u8>>> {
        if self.nkeys == 0 {
            return Ok(None);
        }
        let c = self.cursor(self.nkeys - 1)?;
        Ok(Some(c.key().to_vec()))
    }

    fn cursor_at_slot(&self, s: usize) -> LeafCursor<'a> {
        LeafCursor { v: *self, at: CursorAt::before(self.slots.off(s), self.slots.idx(s), s) }
    }

    fn end_cursor(&self) -> LeafCursor<'a> {
        LeafCursor { v: *self, at: CursorAt::before(self.area.len(), self.nkeys, self.slots.n) }
    }

    /// The cursor `s` was, on these bytes again (None when they are not
    /// the leaf it was suspended on: another entry count or body length).
    pub fn resume(&self, s: SuspendedCursor) -> Option<LeafCursor<'a>> {
        if s.nkeys != self.nkeys || s.area_len != self.area.len() || s.at.pos > self.area.len() {
            return None;
        }
        Some(LeafCursor { v: *self, at: s.at })
    }

    /// A cursor on entry `i` (past the end if `i >= nkeys`).
    pub fn cursor(&self, i: usize) -> Res<LeafCursor<'a>> {
        if i >= self.nkeys {
            return Ok(self.end_cursor());
        }
        // Last restart at or before i.
        let (mut lo, mut hi) = (0, self.slots.n);
        while hi - lo > 1 {
            let mid = (lo + hi) / 2;
            if self.slots.idx(mid) <= i {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        let mut c = self.cursor_at_slot(lo);
        while c.at.next <= i {
            if !c.step(false)? {
                break;
            }
        }
        if !c.at.on || c.at.next != i + 1 {
            return corrupt("restart array does not lead to the entry");
        }
        Ok(c)
    }

    /// Index of the first entry for which `before` is false, given that it is
    /// true for a prefix of the entries; and a cursor on that entry.
    fn partition(&self, before: &mut impl FnMut(&[u8]) -> bool) -> Res<(usize, LeafCursor<'a>)> {
        if self.nkeys == 0 {
            return Ok((0, self.end_cursor()));
        }
        let s = self.slots.search(self.area, self.fixed, before)?;
        if s == 0 {
            let mut c = self.cursor_at_slot(0);
            c.step(false)?;
            return Ok((0, c));
        }
        let end = if s < self.slots.n { self.slots.idx(s) } else { self.nkeys };
        let mut c = self.cursor_at_slot(s - 1);
        c.step(false)?;
        while c.at.next < end {
            c.step(false)?;
            if !before(&c.at.key) {
                return Ok((c.at.next - 1, c));
            }
        }
        // The whole group is before the bound; the answer is the next restart.
        c.step(false)?;
        Ok((end, c))
    }

    /// Index of the first entry whose key is >= the bound, `nkeys` if none.
    /// `cmp(stored)` must return `stored.cmp(bound)` under the index order.
    pub fn seek(&self, mut cmp: impl FnMut(&[u8]) -> Ordering) -> Res<usize> {
        self.partition(&mut lt(&mut cmp)).map(|(i, _)| i)
    }

    /// Index of the first entry whose key is > the bound, `nkeys` if none;
    /// the entry before it (if any) is the last one <= the bound.
    pub fn seek_after(&self, mut cmp: impl FnMut(&[u8]) -> Ordering) -> Res<usize> {
        self.partition(&mut le(&mut cmp)).map(|(i, _)| i)
    }

    /// A cursor on the first entry >= the bound, for scans that go on reading
    /// forward from there without decoding anything twice.
    pub fn seek_cursor(&self, mut cmp: impl FnMut(&[u8]) -> Ordering) -> Res<LeafCursor<'a>> {
        self.partition(&mut lt(&mut cmp)).map(|(_, c)| c)
    }

    /// Entry `i`: its key and posting list.
    pub fn entry(&self, i: usize) -> Res<(Vec<u8>, Vec<Tid>)> {
        if i >= self.nkeys {
            return corrupt("entry index out of range");
        }
        let mut c = self.cursor(i)?;
        let t = c.tids()?.to_vec();
        Ok((c.at.key.to_vec(), t))
    }

    /// Iterates over all entries from the first.
    pub fn iter(&self) -> LeafIter<'a> {
        LeafIter { c: if self.nkeys == 0 { self.end_cursor() } else { self.cursor_at_slot(0) }, done: false }
    }

    /// Decodes the whole leaf, checking that every byte and count adds up.
    pub fn decode_all(&self) -> Res<Vec<(Vec<u8>, Vec<Tid>)>> {
        let mut out = Vec::with_capacity(self.nkeys);
        if self.nkeys == 0 {
            return Ok(out);
        }
        let mut c = self.cursor_at_slot(0);
        let mut total = 0;
        // Groups come from the spare buffers the leaf writer gives back
        // (`spare`): a merge step decodes every entry it rewrites.
        loop {
            let mut g = super::spare::take();
            if !c.step_with(Some(&mut g.1))? {
                super::spare::give(g);
                break;
            }
            total += g.1.len();
            g.0.extend_from_slice(&c.at.key);
            out.push(g);
        }
        if total != self.ntids || c.at.pos != self.area.len() || c.at.slot != self.slots.n {
            return corrupt("leaf entries do not add up to its header");
        }
        Ok(out)
    }

    /// Decodes the whole leaf into flat arrays: four allocations per leaf
    /// instead of two per entry, for scans that copy a leaf out.
    pub fn decode_flat(&self) -> Res<FlatLeaf> {
        let mut f = FlatLeaf {
            keys: Vec::with_capacity(self.area.len() * 2),
            key_ends: Vec::with_capacity(self.nkeys),
            tids: Vec::with_capacity(self.ntids),
            tid_ends: Vec::with_capacity(self.nkeys),
        };
        if self.nkeys == 0 {
            return Ok(f);
        }
        let mut c = self.cursor_at_slot(0);
        while c.step_with(Some(&mut f.tids))? {
            f.keys.extend_from_slice(&c.at.key);
            f.key_ends.push(f.keys.len() as u32);
            f.tid_ends.push(f.tids.len() as u32);
        }
        if f.tids.len() != self.ntids || c.at.pos != self.area.len() || c.at.slot != self.slots.n {
            return corrupt("leaf entries do not add up to its header");
        }
        Ok(f)
    }

    /// Full check for amcheck-like verification: every entry decodes, the
    /// counts add up and keys never go down under `cmp(a, b)`.
    pub fn verify(&self, mut cmp: impl FnMut(&[u8], &[u8]) -> Ordering) -> Res<()> {
        self.slots.check_all()?;
        let all = self.decode_all()?;
        for w in all.windows(2) {
            if cmp(&w[0].0, &w[1].0) == Ordering::Greater {
                return corrupt("leaf keys out of order");
            }
        }
        Ok(())
    }

    /// VACUUM in place: re-encodes the leaf into `out` without the TIDs for
    /// which `dead` is true; keys left with no TIDs disappear. Returns (used
    /// length, TIDs removed). The result is never longer than this leaf (each
    /// surviving restart entry stays a restart, so no key is re-expanded), so
    /// `out` as large as the page body always suffices; `out` may not overlap
    /// `self`, so copy the page first as nbtree does.
    pub fn rewrite_without(&self, mut dead: impl FnMut(Tid) -> bool, out: &mut [u8]) -> Res<(usize, usize)> {
        let cap = out.len().min(MAX_BODY);
        if cap < HDR {
            return Err(FormatError::NoSpace);
        }
        let mut b = LeafBuilder::with_restart_interval(cap.max(MIN_BODY), DEFAULT_RESTART_INTERVAL);
        b.cap = cap;
        let mut removed = 0;
        let mut live = Vec::new();
        let mut need_restart = false;
        let mut total = 0;
        if self.nkeys > 0 {
            let mut c = self.cursor_at_slot(0);
            while c.step(true)? {
                total += c.at.tids.len();
                if c.at.restart {
                    need_restart = true;
                }
                live.clear();
                live.extend(c.at.tids.iter().copied().filter(|&t| !dead(t)));
                removed += c.at.tids.len() - live.len();
                if live.is_empty() {
                    continue;
                }
                if b.add_impl(&c.at.key, &live, Some(need_restart)) != live.len() {
                    return Err(FormatError::NoSpace);
                }
                need_restart = false;
            }
            if total != self.ntids || c.at.pos != self.area.len() || c.at.slot != self.slots.n {
                return corrupt("leaf entries do not add up to its header");
            }
        }
        let used = b.finish(out);
        Ok((used, removed))
    }
}

/// Reads a leaf forward, one entry at a time, reusing its key buffer.
#[derive(Clone, Debug)]
pub struct LeafCursor<'a> {
    v: LeafView<'a>,
    at: CursorAt,
}

/// Where a `LeafCursor` is in the leaf, and the current entry it decoded.
#[derive(Clone, Debug)]
struct CursorAt {
    /// Byte offset of the next entry.
    pos: usize,
    /// Index of the next entry.
    next: usize,
    /// Next restart slot expected.
    slot: usize,
    on: bool,
    key: KeyBuf,
    tid_pos: usize,
    tid_cnt: usize,
    /// Value the current entry's first TID is chained from.
    base: u64,
    restart: bool,
    last_v: u64,
    tids: Vec<Tid>,
    tids_ok: bool,
}

impl CursorAt {
    /// Before the entry at byte `pos`, entry index `next`, restart slot `slot`.
    fn before(pos: usize, next: usize, slot: usize) -> CursorAt {
        CursorAt { pos, next, slot, on: false, key: KeyBuf::new(), tid_pos: 0, tid_cnt: 0, base: 0, restart: false, last_v: 0, tids: Vec::new(), tids_ok: false }
    }
}

/// A `LeafCursor` without the bytes it reads: its caller gives up the
/// page's lock between two windows of a scan, and `LeafView::resume` goes
/// on from here instead of searching the restart array again and stepping
/// from the slot to the entry (a 50-row scan refills its window five
/// times). Valid for the same leaf bytes only, which a pinned static leaf
/// keeps.
pub struct SuspendedCursor {
    nkeys: usize,
    area_len: usize,
    at: CursorAt,
}

impl SuspendedCursor {
    /// Index of the entry the cursor's `advance` moves to.
    pub fn next_index(&self) -> usize {
        self.at.next
    }
}

impl<'a> LeafCursor<'a> {
    /// This cursor without its borrow of the leaf (`LeafView::resume`).
    pub fn suspend(self) -> SuspendedCursor {
        SuspendedCursor { nkeys: self.v.nkeys, area_len: self.v.area.len(), at: self.at }
    }

    /// Moves to the next entry and appends its TIDs to `out` in the same
    /// pass over its posting list; false once past the last.
    pub fn advance_into(&mut self, out: &mut Vec<Tid>) -> Res<bool> {
        self.step_with(Some(out))
    }

    /// Moves to the next entry; false (and invalid) past the last. With
    /// `out`, the entry's TIDs are appended there.
    fn step_with(&mut self, out: Option<&mut Vec<Tid>>) -> Res<bool> {
        let v = &self.v;
        self.at.tids_ok = false;
        if self.at.next >= v.nkeys {
            self.at.on = false;
            self.at.next = v.nkeys;
            return Ok(false);
        }
        let restart = self.at.slot < v.slots.n && v.slots.idx(self.at.slot) == self.at.next;
        if restart {
            if v.slots.off(self.at.slot) != self.at.pos {
                return corrupt("restart offset does not match the entries");
            }
            self.at.slot += 1;
        }
        let mut rd = Rd::new(v.area, self.at.pos);
        if restart && v.slots.fenced() {
            self.at.key.set(0, v.slots.fence_key(self.at.slot - 1));
        } else if v.flags & F_KDELTA != 0 {
            read_key_gap(&mut rd, &mut self.at.key, v.fixed.unwrap_or(0))?;
        } else {
            read_key(&mut rd, &mut self.at.key, restart, v.fixed)?;
        }
        let cnt = if v.flags & F_SINGLE != 0 { 1 } else { rd.var()? as usize };
        if cnt == 0 || cnt > rd.remaining() {
            return corrupt("bad posting list length");
        }
        self.at.tid_pos = rd.pos;
        self.at.tid_cnt = cnt;
        self.at.base = self.at.last_v;
        self.at.restart = restart;
        self.at.last_v = walk(v, restart, self.at.base, cnt, &mut rd, out)?;
        self.at.pos = rd.pos;
        self.at.next += 1;
        self.at.on = true;
        Ok(true)
    }

    fn step(&mut self, materialize: bool) -> Res<bool> {
        if !materialize {
            return self.step_with(None);
        }
        let mut t = std::mem::take(&mut self.at.tids);
        t.clear();
        let r = self.step_with(Some(&mut t));
        self.at.tids = t;
        self.at.tids_ok = matches!(r, Ok(true));
        r
    }

    /// Moves to the next entry; false once past the last.
    pub fn advance(&mut self) -> Res<bool> {
        self.step(false)
    }

    /// Whether the cursor is on an entry.
    pub fn valid(&self) -> bool {
        self.at.on
    }

    /// Index of the current entry (`nkeys` past the end).
    pub fn index(&self) -> usize {
        if self.at.on {
            self.at.next - 1
        } else {
            self.v.nkeys
        }
    }

    /// Key of the current entry (empty if not on one).
    pub fn key(&self) -> &[u8] {
        if self.at.on {
            &self.at.key
        } else {
            &[]
        }
    }

    pub fn tid_count(&self) -> usize {
        if self.at.on {
            self.at.tid_cnt
        } else {
            0
        }
    }

    /// Posting list of the current entry, decoded on first use.
    pub fn tids(&mut self) -> Res<&[Tid]> {
        if !self.at.on {
            return Ok(&[]);
        }
        if !self.at.tids_ok {
            self.at.tids.clear();
            let mut rd = Rd::new(self.v.area, self.at.tid_pos);
            walk(&self.v, self.at.restart, self.at.base, self.at.tid_cnt, &mut rd, Some(&mut self.at.tids))?;
            self.at.tids_ok = true;
        }
        Ok(&self.at.tids)
    }
}

/// Reads one posting list from `rd`, appending to `out` if given; returns
/// the last TID value (the chain base of the next entry).
#[inline]
fn walk(v: &LeafView<'_>, restart: bool, base: u64, cnt: usize, rd: &mut Rd<'_>, mut out: Option<&mut Vec<Tid>>) -> Res<u64> {
    let mut x = if v.tidw != 0 {
        let b = rd.bytes(v.tidw)?;
        let mut le = [0u8; 8];
        le[..b.len()].copy_from_slice(b);
        u64::from_le_bytes(le)
    } else if restart || v.flags & F_CHAIN == 0 {
        rd.var()?
    } else {
        match (base as i64).checked_add(unzigzag(rd.var()?)) {
            Some(y) if y >= 0 => y as u64,
            _ => return corrupt("TID chain out of range"),
        }
    };
    if x >= V_LIMIT {
        return corrupt("TID out of range");
    }
    if let Some(o) = out.as_deref_mut() {
        o.reserve(cnt);
        o.push(v.tid(x)?);
    }
    for _ in 1..cnt {
        let d = rd.var()?;
        x = match x.checked_add(d).and_then(|y| y.checked_add(1)) {
            Some(y) if y < V_LIMIT => y,
            _ => return corrupt("TID out of range"),
        };
        if let Some(o) = out.as_deref_mut() {
            o.push(v.tid(x)?);
        }
    }
    Ok(x)
}

/// A whole leaf decoded into flat arrays (see `LeafView::decode_flat`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FlatLeaf {
    pub keys: Vec<u8>,
    /// End of key `i` in `keys`; key `i` starts where key `i - 1` ends.
    pub key_ends: Vec<u32>,
    pub tids: Vec<Tid>,
    /// End of posting list `i` in `tids`.
    pub tid_ends: Vec<u32>,
}

impl FlatLeaf {
    pub fn len(&self) -> usize {
        self.key_ends.len()
    }

    pub fn is_empty(&self) -> bool {
        self.key_ends.is_empty()
    }

    pub fn key(&self, i: usize) -> &[u8] {
        let s = if i == 0 { 0 } else { self.key_ends[i - 1] as usize };
        &self.keys[s..self.key_ends[i] as usize]
    }

    pub fn tids(&self, i: usize) -> &[Tid] {
        let s = if i == 0 { 0 } else { self.tid_ends[i - 1] as usize };
        &self.tids[s..self.tid_ends[i] as usize]
    }
}

/// Owned entries of a leaf in order; stops after the first error.
pub struct LeafIter<'a> {
    c: LeafCursor<'a>,
    done: bool,
}

impl Iterator for LeafIter<'_> {
    type Item = Res<(Vec<u8>, Vec<Tid>)>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        match self.c.step(true) {
            Ok(true) => Some(Ok((self.c.at.key.to_vec(), std::mem::take(&mut self.c.at.tids)))),
            Ok(false) => {
                self.done = true;
                None
            }
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use proptest::prelude::*;

    fn t(b: u32, o: u16) -> Tid {
        Tid::new(b, o)
    }

    fn build(entries: &[(Vec<u8>, Vec<Tid>)], cap: usize) -> (Vec<u8>, usize) {
        let mut b = LeafBuilder::new(cap);
        for (k, ts) in entries {
            assert_eq!(b.add(k, ts), ts.len());
            b.check_acct();
        }
        let mut out = vec![0xAA; cap];
        let n = b.finish(&mut out);
        out.truncate(n);
        (out, n)
    }

    #[test]
    fn empty_leaf() {
        let mut b = LeafBuilder::new(100);
        let mut out = vec![0; 100];
        let n = b.finish(&mut out);
        assert_eq!(n, HDR);
        let v = LeafView::parse(&out[..n]).unwrap();
        assert_eq!((v.nkeys(), v.ntids()), (0, 0));
        assert_eq!(v.seek(|k| k.cmp(b"x")).unwrap(), 0);
        assert!(v.decode_all().unwrap().is_empty());
        assert!(!v.cursor(0).unwrap().valid());
        assert_eq!(v.first_key().unwrap(), None);
    }

    #[test]
    fn roundtrip_and_seek() {
        let mut e = Vec::new();
        for i in 0..500u32 {
            let k = format!("key{:05}", i * 3).into_bytes();
            let n = (i % 7) as usize + 1;
            e.push((k, (0..n as u32).map(|j| t(i * 10 + j, (j * 37 % 290) as u16 + 1)).collect::<Vec<_>>()));
        }
        let (body, used) = build(&e, 8100);
        let v = LeafView::parse(&body).unwrap();
        assert_eq!(v.used_len(), used);
        assert_eq!(v.decode_all().unwrap(), e);
        assert_eq!(v.iter().collect::<Res<Vec<_>>>().unwrap(), e);
        for i in 0..1500u32 {
            let bound = format!("key{:05}", i).into_bytes();
            let want = e.partition_point(|(k, _)| *k < bound);
            assert_eq!(v.seek(|k| k.cmp(&bound)).unwrap(), want);
            let want_after = e.partition_point(|(k, _)| *k <= bound);
            assert_eq!(v.seek_after(|k| k.cmp(&bound)).unwrap(), want_after);
            let mut c = v.seek_cursor(|k| k.cmp(&bound)).unwrap();
            assert_eq!(c.index(), want);
            if want < e.len() {
                assert_eq!(c.key(), &e[want].0[..]);
                assert_eq!(c.tids().unwrap(), &e[want].1[..]);
                assert!(c.advance().unwrap() == (want + 1 < e.len()));
            }
        }
        for i in [0, 1, 15, 16, 17, 499] {
            assert_eq!(v.entry(i).unwrap(), e[i]);
        }
        assert_eq!(v.last_key().unwrap().unwrap(), e[499].0);
    }

    /// Windows of a scan, each decoded by a cursor resumed where the last
    /// one stopped (`suspend`, `resume`, `advance_into`), read what
    /// `decode_all` reads; a suspended cursor does not resume on other bytes.
    #[test]
    fn suspended_cursors_resume() {
        let mut e = Vec::new();
        for i in 0..400u32 {
            let k = format!("k{:06}", i * 5).into_bytes();
            let n = (i % 5) as usize + 1;
            e.push((k, (0..n as u32).map(|j| t(i * 3 + j, (j * 11 % 290) as u16 + 1)).collect::<Vec<_>>()));
        }
        let (body, _) = build(&e, 8100);
        let v = LeafView::parse(&body).unwrap();
        for start in [0usize, 1, 15, 16, 17, 200, 398, 399] {
            let mut size = 1;
            let mut got: Vec<(Vec<u8>, Vec<Tid>)> = Vec::new();
            let mut c = v.cursor(start).unwrap();
            let mut tids = c.tids().unwrap().to_vec();
            got.push((c.key().to_vec(), tids.clone()));
            loop {
                // one window of `size` entries after the first
                let mut end = false;
                for _ in 0..size {
                    tids.clear();
                    if !c.advance_into(&mut tids).unwrap() {
                        end = true;
                        break;
                    }
                    got.push((c.key().to_vec(), tids.clone()));
                }
                if end {
                    break;
                }
                let s = c.suspend();
                assert_eq!(s.next_index(), start + got.len());
                let again = LeafView::parse(&body).unwrap();
                c = again.resume(s).unwrap();
                size = (size * 2).min(64);
            }
            assert_eq!(got, e[start..].to_vec(), "from {start}");
            assert!(!c.valid());
        }
        let (other, _) = build(&e[..100], 8100);
        let s = v.cursor(3).unwrap().suspend();
        assert!(LeafView::parse(&other).unwrap().resume(s).is_none());
    }

    #[test]
    fn split_posting_list() {
        let tids: Vec<Tid> = (0..5000u32).map(|i| t(i * 7, (i % 200) as u16 + 1)).collect();
        let mut b = LeafBuilder::new(1000);
        assert_eq!(b.add(b"a", &tids[..3]), 3);
        let n = b.add(b"k", &tids[3..]);
        assert!(n > 0 && n < tids.len() - 3);
        assert!(b.size() <= 1000);
        let mut out = vec![0; 1000];
        let used = b.finish(&mut out);
        assert!(used > 950, "leaf should be nearly full, used {used}");
        let v = LeafView::parse(&out[..used]).unwrap();
        assert_eq!(v.entry(1).unwrap().1, tids[3..3 + n].to_vec());
        // Key of exactly cap/3 always fits an empty leaf with one TID.
        let big = vec![7u8; 1000 / 3];
        let mut b = LeafBuilder::new(1000);
        assert_eq!(b.add(&big, &[t(u32::MAX, u16::MAX)]), 1);
    }

    #[test]
    fn same_key_merges_into_last_entry() {
        let mut b = LeafBuilder::new(500);
        b.add(b"a", &[t(1, 1)]);
        b.add(b"a", &[t(1, 2), t(2, 1)]);
        b.add(b"b", &[t(0, 1)]);
        b.check_acct();
        assert_eq!(b.nkeys(), 2);
        let mut out = vec![0; 500];
        let n = b.finish(&mut out);
        let v = LeafView::parse(&out[..n]).unwrap();
        assert_eq!(v.entry(0).unwrap().1, vec![t(1, 1), t(1, 2), t(2, 1)]);
    }

    /// The README's example, byte for byte: key gaps and fence slots for
    /// fixed-length keys; the layouts written before F_KDELTA (front-coded
    /// keys) and before F_FENCE (restart keys at their entries) still read.
    #[test]
    fn fence_slots_layout_and_old_layout() {
        let e: Vec<_> = [(1000u64, 1u16), (1003, 2), (1010, 3)]
            .iter()
            .map(|&(k, o)| (k.to_be_bytes().to_vec(), vec![t(5, o)]))
            .collect();
        let (body, used) = build(&e, 500);
        let gaps: &[u8] = &[
            0x01, 0x2b, 3, 0, 3, 0, 3, 0, 0x13, 0, 1, 0, 8, 0, // header
            0x15, // restart entry: no key, v = 21
            3, 0x16, 7, 0x17, // key gap, v
            0x0e, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x03, 0xe8, // slot + fence key
        ];
        assert_eq!(&body[..used], gaps);
        let fenced: &[u8] = &[
            0x01, 0x0b, 3, 0, 3, 0, 3, 0, 0x15, 0, 1, 0, 8, 0, // header
            0x15, // restart entry: no key, v = 21
            7, 0xeb, 0x16, 7, 0xf2, 0x17, // shared 7 + last byte, v
            0x0e, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x03, 0xe8, // slot + fence key
        ];
        let old: &[u8] = &[
            0x01, 0x03, 3, 0, 3, 0, 3, 0, 0x1d, 0, 1, 0, 8, 0, // header
            0, 0, 0, 0, 0, 0, 0x03, 0xe8, 0x15, // restart entry with its key
            7, 0xeb, 0x16, 7, 0xf2, 0x17, //
            0x0e, 0, 0, 0, // slot
        ];
        assert_eq!(old.len(), fenced.len());
        assert_eq!(gaps.len() + 2, fenced.len());
        for b in [gaps, fenced, old] {
            let v = LeafView::parse(b).unwrap();
            assert_eq!(v.decode_all().unwrap(), e);
            assert_eq!(v.used_len(), b.len());
            assert_eq!(v.seek(|k| k.cmp(&1003u64.to_be_bytes()[..])).unwrap(), 1);
            assert_eq!(v.seek(|k| k.cmp(&1004u64.to_be_bytes()[..])).unwrap(), 2);
            assert_eq!(v.first_key().unwrap().unwrap(), &1000u64.to_be_bytes()[..]);
            let mut out = vec![0; 500];
            let (n, removed) = v.rewrite_without(|x| x == t(5, 1), &mut out).unwrap();
            assert_eq!(removed, 1);
            assert!(n <= b.len());
            assert_eq!(LeafView::parse(&out[..n]).unwrap().decode_all().unwrap(), e[1..].to_vec());
        }
        // Fence flag without FIXLEN is corruption, not a misread; so are key
        // gaps without fence slots, and a gap that overflows the key.
        let mut bad = fenced.to_vec();
        bad[1] = 0x0a;
        assert!(LeafView::parse(&bad).is_err());
        bad = gaps.to_vec();
        bad[1] = 0x23;
        assert!(LeafView::parse(&bad).is_err());
        let mut wide = LeafBuilder::new(500);
        wide.add(&[0xff, 0xfe], &[t(1, 1)]);
        wide.add(&[0xff, 0xff], &[t(1, 2)]);
        let mut two = vec![0; 500];
        let n = wide.finish(&mut two);
        assert_eq!(two[1] & F_KDELTA, F_KDELTA);
        assert_eq!(two[15], 1);
        two[15] = 2;
        assert!(LeafView::parse(&two[..n]).unwrap().decode_all().is_err());
    }

    #[test]
    fn key_gaps_for_engine_encoded_integers() {
        // The engine's int8 encoding: a marker byte and the value's 8 bytes
        // (sign bit flipped). Serial keys cost one gap byte each.
        let key = |v: i64| {
            let mut k = vec![0x02];
            k.extend_from_slice(&((v as u64) ^ (1 << 63)).to_be_bytes());
            k
        };
        let e: Vec<_> = (-150..150i64).map(|v| (key(v), vec![t(7, (v + 151) as u16)])).collect();
        let (body, used) = build(&e, 8100);
        assert_eq!(body[1] & F_KDELTA, F_KDELTA);
        let v = LeafView::parse(&body[..used]).unwrap();
        assert_eq!(v.decode_all().unwrap(), e);
        assert_eq!(v.seek(|k| k.cmp(&key(3)[..])).unwrap(), 153);
        // 16-byte keys whose gap needs more than 64 bits stay front-coded.
        let wide: Vec<_> = [0u128, 1 << 70, (1 << 70) + 1]
            .iter()
            .enumerate()
            .map(|(i, &x)| (x.to_be_bytes().to_vec(), vec![t(1, i as u16 + 1)]))
            .collect();
        let (body, used) = build(&wide, 500);
        assert_eq!(body[1] & F_KDELTA, 0);
        assert_eq!(LeafView::parse(&body[..used]).unwrap().decode_all().unwrap(), wide);
        // 17-byte keys (uuid columns) are never gap-coded.
        let long: Vec<_> = (0..50u8).map(|i| (vec![i; 17], vec![t(1, i as u16 + 1)])).collect();
        let (body, _) = build(&long, 2000);
        assert_eq!(body[1] & F_KDELTA, 0);
    }

    #[test]
    fn chain_flag_for_correlated_tids() {
        let e: Vec<_> = (0..300u64)
            .map(|i| ((1_000_000 + i * 3).to_be_bytes().to_vec(), vec![t(5000 + (i / 100) as u32, (i % 100) as u16 + 1)]))
            .collect();
        let (body, used) = build(&e, 8100);
        assert_eq!(body[1], F_FIXLEN | F_SINGLE | F_CHAIN | F_FENCE | F_KDELTA);
        // 1 key gap byte + 1 TID byte per entry.
        assert!(used < 300 * 3, "used {used}");
        assert_eq!(LeafView::parse(&body).unwrap().decode_all().unwrap(), e);
    }

    #[test]
    fn fixed_tids_for_a_heap_out_of_key_order() {
        // A unique key over a 5M-row heap in another order: TID values up to
        // about 2^22.3, 42% of them under 2^21. LEB128 spends 4 bytes on
        // most; FIXTID 3 on each.
        let mut x = 0x9E3779B97F4A7C15u64;
        let e: Vec<_> = (0..400u64)
            .map(|i| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let row = x % 5_000_000;
                (((1u64 << 40) + i * 1000).to_be_bytes().to_vec(), vec![t((row / 185) as u32, (row % 185) as u16 + 1)])
            })
            .collect();
        let (body, used) = build(&e, 8100);
        assert_eq!(body[1], F_FIXLEN | F_SINGLE | F_FENCE | F_FIXTID | F_KDELTA);
        assert_eq!(body[13], 3);
        let v = LeafView::parse(&body[..used]).unwrap();
        assert_eq!(v.decode_all().unwrap(), e);
        for (i, (k, tids)) in e.iter().enumerate() {
            assert_eq!(v.seek(|s| s.cmp(k)).unwrap(), i);
            assert_eq!(v.entry(i).unwrap().1, *tids);
        }
        // Without FIXTID the same leaf would be larger: plain varints cost
        // more than three bytes a TID on average here.
        let mut b = LeafBuilder::new(8100);
        for (k, tids) in &e {
            b.add(k, tids);
        }
        assert!(b.a.tid_abs > b.a.tid_fixed() + e.len() / 4, "abs {} fixed {}", b.a.tid_abs, b.a.tid_fixed());
        // A width the reader cannot take, or FIXTID with CHAIN, is corrupt.
        let mut bad = body[..used].to_vec();
        bad[13] = 7;
        assert!(LeafView::parse(&bad).is_err());
        bad[13] = 3;
        bad[1] |= F_CHAIN;
        assert!(LeafView::parse(&bad).is_err());
        bad[1] = body[1];
        bad[13] = 0;
        assert!(LeafView::parse(&bad).is_err());
    }

    #[test]
    fn vacuum_never_widens_fixed_tids() {
        // First TIDs all take two bytes (v = block * 101 + offset < 2^16, but
        // most >= 2^14, three varint bytes), and one posting list goes on to a
        // TID of about 2^20. Dropping that list's first TID makes the large
        // one a first TID: the width must have counted it from the start, or
        // the rewritten leaf would be larger than the page it replaces.
        // Blocks in random order, so that chained gaps cost as much as
        // plain values.
        let mut x = 0x2545F4914F6CDD1Du64;
        let mut e: Vec<_> = (0..300u64)
            .map(|i| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (((1u64 << 40) + i * 7).to_be_bytes().to_vec(), vec![t(200 + (x % 400) as u32, 100)])
            })
            .collect();
        e[150].1 = vec![t(170, 1), t(10_000, 50)];
        // Another posting list keeps the leaf out of SINGLE after the VACUUM.
        e[20].1 = vec![t(300, 1), t(301, 1)];
        let mut b = LeafBuilder::new(8100);
        for (k, tids) in &e {
            assert_eq!(b.add(k, tids), tids.len());
        }
        let mut body = vec![0; 8100];
        let n = b.finish(&mut body);
        let v = LeafView::parse(&body[..n]).unwrap();
        let mut out = vec![0; n];
        let (used, removed) = v.rewrite_without(|x| x == t(170, 1), &mut out).unwrap();
        assert_eq!(removed, 1);
        assert!(used <= n);
        let mut want = e.clone();
        want[150].1 = vec![t(10_000, 50)];
        assert_eq!(LeafView::parse(&out[..used]).unwrap().decode_all().unwrap(), want);
    }

    #[test]
    fn truncate_tids_returns_tail() {
        let mut b = LeafBuilder::new(4000);
        b.add(b"a", &[t(1, 1), t(1, 2)]);
        b.add(b"b", &[t(1, 3), t(1, 4), t(1, 5)]);
        b.add(b"c", &[t(0, 1)]);
        let tail = b.truncate_tids(3);
        b.check_acct();
        assert_eq!(tail, vec![(b"b".to_vec(), vec![t(1, 4), t(1, 5)]), (b"c".to_vec(), vec![t(0, 1)])]);
        assert_eq!((b.nkeys(), b.ntids()), (2, 3));
        let tail = b.truncate_tids(2);
        assert_eq!(tail, vec![(b"b".to_vec(), vec![t(1, 3)])]);
        assert_eq!(b.nkeys(), 1);
        b.check_acct();
    }

    fn arb_entries() -> impl Strategy<Value = Vec<(Vec<u8>, Vec<Tid>)>> {
        let key = (0..4usize, prop::collection::vec(prop::sample::select(vec![0u8, 1, 2, 0x7f, 0x80, 255]), 0..6))
            .prop_map(|(p, s)| {
                let mut k = [&b""[..], b"a", b"abc", b"abcdefgh"][p].to_vec();
                k.extend(s);
                k
            });
        let tid = (prop_oneof![4 => 0u32..50, 1 => any::<u32>()], prop_oneof![4 => 1u16..300, 1 => any::<u16>()])
            .prop_map(|(b, o)| Tid::new(b, o));
        // TIDs spread evenly over a heap of up to 60k blocks, nothing larger:
        // the leaves FIXTID codes (a table not in key order).
        let spread = (0u32..60_000, 1u16..200).prop_map(|(b, o)| Tid::new(b, o));
        let tids = prop_oneof![
            3 => prop::collection::btree_set(tid.clone(), 1..3),
            1 => prop::collection::btree_set(tid, 1..60),
        ];
        let spread_tids = prop_oneof![
            3 => prop::collection::btree_set(spread.clone(), 1..2),
            1 => prop::collection::btree_set(spread, 1..20),
        ];
        // A third of the cases have fixed-length keys only (FIXLEN and fence
        // slots); mixed lengths almost never produce such a leaf.
        let fixed_key = (0u64..4000).prop_map(|x| (x * 37).to_be_bytes().to_vec());
        prop_oneof![
            4 => prop::collection::btree_map(key, tids.clone(), 0..120),
            2 => prop::collection::btree_map(fixed_key.clone(), tids, 0..120),
            1 => prop::collection::btree_map(fixed_key, spread_tids, 0..120),
        ]
        .prop_map(|m| m.into_iter().map(|(k, s)| (k, s.into_iter().collect())).collect())
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

        #[test]
        fn prop_roundtrip_seek(e in arb_entries(), bounds in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..10), 1..20), interval in 1usize..20) {
            let mut b = LeafBuilder::with_restart_interval(MAX_BODY, interval);
            for (k, ts) in &e {
                prop_assert_eq!(b.add(k, ts), ts.len());
            }
            b.check_acct();
            let mut out = vec![0; MAX_BODY];
            let n = b.finish(&mut out);
            let v = LeafView::parse(&out[..n]).unwrap();
            prop_assert_eq!(v.used_len(), n);
            prop_assert_eq!(&v.decode_all().unwrap(), &e);
            let f = v.decode_flat().unwrap();
            prop_assert_eq!(f.len(), e.len());
            for (i, (k, ts)) in e.iter().enumerate() {
                prop_assert_eq!(f.key(i), &k[..]);
                prop_assert_eq!(f.tids(i), &ts[..]);
            }
            let mut all_bounds = bounds.clone();
            all_bounds.extend(e.iter().map(|x| x.0.clone()));
            for bound in &all_bounds {
                let want = e.partition_point(|(k, _)| k < bound);
                prop_assert_eq!(v.seek(|k| k.cmp(bound)).unwrap(), want);
                let want = e.partition_point(|(k, _)| k <= bound);
                prop_assert_eq!(v.seek_after(|k| k.cmp(bound)).unwrap(), want);
            }
            // Cursor from every index walks to the end.
            for i in (0..e.len()).step_by(7) {
                let mut c = v.cursor(i).unwrap();
                let mut j = i;
                while c.valid() {
                    prop_assert_eq!(c.key(), &e[j].0[..]);
                    prop_assert_eq!(c.tids().unwrap(), &e[j].1[..]);
                    c.advance().unwrap();
                    j += 1;
                }
                prop_assert_eq!(j, e.len());
            }
        }

        #[test]
        fn prop_fill_respects_cap(e in arb_entries(), cap in 64usize..600) {
            let mut b = LeafBuilder::new(cap);
            let mut got: Vec<(Vec<u8>, Vec<Tid>)> = Vec::new();
            for (k, ts) in &e {
                if k.len() > cap / 3 { continue; }
                let n = b.add(k, ts);
                prop_assert!(b.size() <= cap);
                if n == 0 { break; }
                got.push((k.clone(), ts[..n].to_vec()));
                if n < ts.len() { break; }
            }
            b.check_acct();
            let mut out = vec![0; cap];
            let used = b.finish(&mut out);
            prop_assert!(used <= cap);
            prop_assert_eq!(LeafView::parse(&out[..used]).unwrap().decode_all().unwrap(), got);
        }

        #[test]
        fn prop_rewrite_without(e in arb_entries(), modulus in 1u32..6, interval in 1usize..20) {
            let mut b = LeafBuilder::with_restart_interval(MAX_BODY, interval);
            for (k, ts) in &e {
                b.add(k, ts);
            }
            let mut out = vec![0; MAX_BODY];
            let n = b.finish(&mut out);
            let v = LeafView::parse(&out[..n]).unwrap();
            let dead = |t: Tid| (t.block ^ t.offset as u32).is_multiple_of(modulus);
            let want: Vec<_> = e.iter()
                .map(|(k, ts)| (k.clone(), ts.iter().copied().filter(|&t| !dead(t)).collect::<Vec<_>>()))
                .filter(|(_, ts)| !ts.is_empty())
                .collect();
            // Output exactly as large as the old body: it must fit.
            let mut out2 = vec![0; n];
            let (used, removed) = v.rewrite_without(dead, &mut out2).unwrap();
            prop_assert!(used <= n);
            prop_assert_eq!(removed, v.ntids() - want.iter().map(|x| x.1.len()).sum::<usize>());
            let v2 = LeafView::parse(&out2[..used]).unwrap();
            prop_assert_eq!(&v2.decode_all().unwrap(), &want);
            for (k, _) in &e {
                let w = want.partition_point(|(x, _)| x < k);
                prop_assert_eq!(v2.seek(|x| x.cmp(k)).unwrap(), w);
            }
        }

        #[test]
        fn prop_corrupt_never_panics(e in arb_entries(), flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6), cut in any::<prop::sample::Index>()) {
            let mut b = LeafBuilder::new(MAX_BODY);
            for (k, ts) in &e {
                b.add(k, ts);
            }
            let mut out = vec![0; MAX_BODY];
            let n = b.finish(&mut out);
            let mut body = out[..n].to_vec();
            for (i, x) in &flips {
                let i = i.index(body.len());
                body[i] ^= *x;
            }
            exercise(&body);
            let c = cut.index(body.len() + 1);
            exercise(&body[..c]);
        }
    }

    /// Runs every reader over `body`; only panics count as failures.
    pub(crate) fn exercise(body: &[u8]) {
        if let Ok(v) = LeafView::parse(body) {
            let _ = v.decode_all();
            let _ = v.decode_flat();
            let _ = v.iter().count();
            let _ = v.first_key();
            let _ = v.last_key();
            for bound in [&b""[..], b"a", b"abc\x01", b"\xff"] {
                let _ = v.seek(|k| k.cmp(bound));
                let _ = v.seek_after(|k| k.cmp(bound));
                if let Ok(mut c) = v.seek_cursor(|k| k.cmp(bound)) {
                    for _ in 0..40 {
                        let _ = c.tids();
                        match c.advance() {
                            Ok(true) => {}
                            _ => break,
                        }
                    }
                }
            }
            for i in 0..v.nkeys().min(40) {
                let _ = v.entry(i);
            }
            let mut out = vec![0; MAX_BODY];
            let _ = v.rewrite_without(|t| t.offset % 2 == 0, &mut out);
            let _ = v.verify(|a, b| a.cmp(b));
        }
    }
}
