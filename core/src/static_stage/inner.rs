//! Inner node: child block numbers in a fixed-width array (O(1) `child(i)`),
//! then front-coded separators with the same key coding and restart array
//! as leaves. Separator `i` is the first key of child `i`; we cannot shorten
//! it to a prefix between neighbours because the order may not be memcmp.

use super::*;

pub(crate) const IHDR: usize = 10;
const F_FIXLEN: u8 = 0x01;

/// Packs (separator, child) pairs, in order, into one inner body.
#[derive(Clone, Debug)]
pub struct InnerBuilder {
    cap: usize,
    interval: usize,
    keys: Vec<u8>,
    kends: Vec<u32>,
    children: Vec<u32>,
    kc: KeyCosts,
    nrestarts: usize,
}

impl InnerBuilder {
    pub fn new(cap: usize) -> Self {
        Self::with_restart_interval(cap, DEFAULT_RESTART_INTERVAL)
    }

    pub fn with_restart_interval(cap: usize, interval: usize) -> Self {
        assert!((MIN_BODY..=MAX_BODY).contains(&cap), "inner body capacity {cap} out of range");
        assert!(interval >= 1);
        InnerBuilder {
            cap,
            interval,
            keys: Vec::new(),
            kends: Vec::new(),
            children: Vec::new(),
            kc: KeyCosts::default(),
            nrestarts: 0,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.children.is_empty()
    }

    pub fn nchildren(&self) -> usize {
        self.children.len()
    }

    fn size_with(&self, kc: &KeyCosts, n: usize, nr: usize) -> usize {
        IHDR + 4 * n + kc.total() + SLOT * nr
    }

    pub fn size(&self) -> usize {
        self.size_with(&self.kc, self.children.len(), self.nrestarts)
    }

    fn key(&self, i: usize) -> &[u8] {
        let s = if i == 0 { 0 } else { self.kends[i - 1] as usize };
        &self.keys[s..self.kends[i] as usize]
    }

    pub fn first_key(&self) -> Option<&[u8]> {
        (!self.children.is_empty()).then(|| self.key(0))
    }

    /// Adds a child whose first key is `sep`; false if the node is full.
    /// An empty node takes any separator up to `cap / 3` bytes.
    pub fn add(&mut self, sep: &[u8], child: u32) -> bool {
        let n = self.children.len();
        if n >= MAX_BODY / 4 {
            return false;
        }
        let restart = n.is_multiple_of(self.interval);
        let prev = n.checked_sub(1).map(|i| self.key(i));
        let kc = self.kc.with(prev, sep, restart);
        if self.size_with(&kc, n + 1, self.nrestarts + restart as usize) > self.cap {
            return false;
        }
        self.kc = kc;
        self.nrestarts += restart as usize;
        self.keys.extend_from_slice(sep);
        self.kends.push(self.keys.len() as u32);
        self.children.push(child);
        true
    }

    /// Writes the body (at most `cap` bytes), resets, returns the used length.
    pub fn finish(&mut self, out: &mut [u8]) -> usize {
        let size = self.size();
        assert!(out.len() >= size, "inner output buffer too small");
        let n = self.children.len();
        let fixed = self.kc.fixed().filter(|_| n > 0);
        let mut pos = IHDR;
        for &c in &self.children {
            out[pos..pos + 4].copy_from_slice(&c.to_le_bytes());
            pos += 4;
        }
        let mut slots = Vec::with_capacity(self.nrestarts);
        for i in 0..n {
            let restart = i.is_multiple_of(self.interval);
            if restart {
                slots.push(SlotOut { off: pos, idx: i });
            }
            let prev = if i == 0 { &[][..] } else { self.key(i - 1) };
            put_key(out, &mut pos, prev, self.key(i), restart, fixed.is_some());
        }
        let restart_off = pos;
        write_slots(out, &mut pos, &slots, None::<fn(usize) -> &'static [u8]>);
        out[0] = FORMAT_INNER;
        out[1] = if fixed.is_some() { F_FIXLEN } else { 0 };
        wr_u16(out, 2, n);
        wr_u16(out, 4, restart_off);
        wr_u16(out, 6, slots.len());
        out[8] = fixed.unwrap_or(0) as u8;
        out[9] = 0;
        debug_assert_eq!(pos, size);
        self.keys.clear();
        self.kends.clear();
        self.children.clear();
        self.kc = KeyCosts::default();
        self.nrestarts = 0;
        pos
    }
}

/// A parsed inner body.
#[derive(Clone, Copy, Debug)]
pub struct InnerView<'a> {
    body: &'a [u8],
    area: &'a [u8],
    n: usize,
    fixed: Option<usize>,
    slots: Slots<'a>,
}

impl<'a> InnerView<'a> {
    pub fn parse(body: &'a [u8]) -> Res<Self> {
        if body.len() < IHDR {
            return corrupt("inner body shorter than its header");
        }
        if body[0] != FORMAT_INNER {
            return corrupt("not an inner body");
        }
        if body[1] & !F_FIXLEN != 0 || body[9] != 0 {
            return corrupt("unknown inner flags");
        }
        let n = rd_u16(body, 2) as usize;
        let restart_off = rd_u16(body, 4) as usize;
        let nslots = rd_u16(body, 6) as usize;
        let fixed = (body[1] & F_FIXLEN != 0).then_some(body[8] as usize);
        if fixed == Some(0) {
            return corrupt("fixed key length of zero");
        }
        let first = IHDR + 4 * n;
        if n == 0 {
            return corrupt("inner node without children");
        }
        if restart_off < first || restart_off + nslots * SLOT > body.len() {
            return corrupt("inner restart array out of bounds");
        }
        let slots = Slots::parse(body, restart_off, nslots, 0, first, restart_off, n)?;
        Ok(InnerView { body, area: &body[..restart_off], n, fixed, slots })
    }

    pub fn nchildren(&self) -> usize {
        self.n
    }

    pub fn used_len(&self) -> usize {
        self.area.len() + self.slots.len_bytes()
    }

    /// Block number of child `i`. Panics if `i >= nchildren()` (a caller bug,
    /// not corruption: the array was bounds-checked by `parse`).
    pub fn child(&self, i: usize) -> u32 {
        assert!(i < self.n, "child index {i} out of range");
        let o = IHDR + 4 * i;
        u32::from_le_bytes(self.body[o..o + 4].try_into().unwrap())
    }

    /// All child block numbers, in order.
    pub fn children(&self) -> impl Iterator<Item = u32> + 'a {
        self.body[IHDR..IHDR + 4 * self.n]
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
    }

    /// Separator `i` (the first key of child `i`).
    pub fn sep(&self, i: usize) -> Res<Vec<u8>> {
        if i >= self.n {
            return corrupt("separator index out of range");
        }
        let s = (0..self.slots.n).rev().find(|&s| self.slots.idx(s) <= i).unwrap_or(0);
        let mut key = KeyBuf::new();
        let mut rd = Rd::new(self.area, self.slots.off(s));
        for j in self.slots.idx(s)..=i {
            read_key(&mut rd, &mut key, j == self.slots.idx(s), self.fixed)?;
        }
        Ok(key.to_vec())
    }

    /// Full check for verification: entries add up to the header and
    /// separators never go down under `cmp`.
    pub fn verify(&self, mut cmp: impl FnMut(&[u8], &[u8]) -> Ordering) -> Res<()> {
        self.slots.check_all()?;
        let seps = self.seps()?;
        if seps.windows(2).any(|w| cmp(&w[0], &w[1]) == Ordering::Greater) {
            return corrupt("inner separators out of order");
        }
        Ok(())
    }

    /// All separators, checking the entries add up to the header.
    pub fn seps(&self) -> Res<Vec<Vec<u8>>> {
        let mut out = Vec::with_capacity(self.n);
        let mut key = KeyBuf::new();
        let mut rd = Rd::new(self.area, self.slots.off(0));
        let mut s = 0;
        for i in 0..self.n {
            let restart = s < self.slots.n && self.slots.idx(s) == i;
            if restart {
                if self.slots.off(s) != rd.pos {
                    return corrupt("restart offset does not match the entries");
                }
                s += 1;
            }
            read_key(&mut rd, &mut key, restart, self.fixed)?;
            out.push(key.to_vec());
        }
        if rd.pos != self.area.len() || s != self.slots.n {
            return corrupt("inner entries do not fill their area");
        }
        Ok(out)
    }

    /// Number of leading separators for which `before` holds.
    fn partition(&self, before: &mut impl FnMut(&[u8]) -> bool) -> Res<usize> {
        let s = self.slots.search(self.area, self.fixed, before)?;
        if s == 0 {
            return Ok(0);
        }
        let start = self.slots.idx(s - 1);
        let end = if s < self.slots.n { self.slots.idx(s) } else { self.n };
        let mut rd = Rd::new(self.area, self.slots.off(s - 1));
        let mut key = KeyBuf::new();
        read_key(&mut rd, &mut key, true, self.fixed)?;
        for j in start + 1..end {
            read_key(&mut rd, &mut key, false, self.fixed)?;
            if !before(&key) {
                return Ok(j);
            }
        }
        Ok(end)
    }

    /// The last child whose separator is strictly less than the bound (0 if
    /// none): where a search for the first entry >= bound starts. A posting
    /// list split across leaves makes entries equal to a separator possible at
    /// the end of the previous child, hence "strictly"; the search then moves
    /// right along the siblings.
    pub fn find_child(&self, mut cmp: impl FnMut(&[u8]) -> Ordering) -> Res<usize> {
        Ok(self.partition(&mut lt(&mut cmp))?.saturating_sub(1))
    }

    /// The last child whose separator is <= the bound (0 if none): where the
    /// last entry <= bound lives, for backward scans.
    pub fn find_child_le(&self, mut cmp: impl FnMut(&[u8]) -> Ordering) -> Res<usize> {
        Ok(self.partition(&mut le(&mut cmp))?.saturating_sub(1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn build(seps: &[Vec<u8>], cap: usize) -> Vec<u8> {
        let mut b = InnerBuilder::new(cap);
        for (i, s) in seps.iter().enumerate() {
            assert!(b.add(s, 1000 + i as u32));
        }
        let mut out = vec![0; cap];
        let n = b.finish(&mut out);
        out.truncate(n);
        out
    }

    #[test]
    fn fills_and_finds() {
        let mut b = InnerBuilder::new(512);
        let mut n = 0u64;
        while b.add(&(n * 1000).to_be_bytes(), n as u32) {
            n += 1;
        }
        let mut out = vec![0; 512];
        let used = b.finish(&mut out);
        assert!(used > 512 - 20, "used {used}");
        let v = InnerView::parse(&out[..used]).unwrap();
        assert_eq!(v.nchildren() as u64, n);
        assert_eq!(v.children().count() as u64, n);
        for q in 0..n * 1000 + 2000 {
            let bound = q.to_be_bytes();
            let lt = (0..n).filter(|i| i * 1000 < q).count();
            let le = (0..n).filter(|i| i * 1000 <= q).count();
            assert_eq!(v.find_child(|k| k.cmp(&bound)).unwrap(), lt.saturating_sub(1));
            assert_eq!(v.find_child_le(|k| k.cmp(&bound)).unwrap(), le.saturating_sub(1));
        }
        assert_eq!(v.sep(3).unwrap(), 3000u64.to_be_bytes());
        assert_eq!(v.child(3), 3);
    }

    proptest! {
        #[test]
        fn prop_inner(set in prop::collection::btree_set(prop::collection::vec(0u8..4, 0..8), 1..200), bounds in prop::collection::vec(prop::collection::vec(0u8..4, 0..8), 0..30)) {
            let seps: Vec<Vec<u8>> = set.into_iter().collect();
            let body = build(&seps, MAX_BODY);
            let v = InnerView::parse(&body).unwrap();
            prop_assert_eq!(v.used_len(), body.len());
            prop_assert_eq!(&v.seps().unwrap(), &seps);
            for (i, s) in seps.iter().enumerate() {
                prop_assert_eq!(&v.sep(i).unwrap(), s);
                prop_assert_eq!(v.child(i), 1000 + i as u32);
            }
            for bound in bounds.iter().chain(seps.iter()) {
                let lt = seps.partition_point(|s| s < bound);
                let le = seps.partition_point(|s| s <= bound);
                prop_assert_eq!(v.find_child(|k| k.cmp(bound)).unwrap(), lt.saturating_sub(1));
                prop_assert_eq!(v.find_child_le(|k| k.cmp(bound)).unwrap(), le.saturating_sub(1));
            }
        }

        #[test]
        fn prop_inner_corrupt(set in prop::collection::btree_set(prop::collection::vec(0u8..4, 0..8), 1..100), flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6), cut in any::<prop::sample::Index>()) {
            let seps: Vec<Vec<u8>> = set.into_iter().collect();
            let mut body = build(&seps, MAX_BODY);
            for (i, x) in &flips {
                let i = i.index(body.len());
                body[i] ^= *x;
            }
            let c = cut.index(body.len() + 1);
            for b in [&body[..], &body[..c]] {
                if let Ok(v) = InnerView::parse(b) {
                    let _ = v.seps();
                    let _ = v.verify(|a, b| a.cmp(b));
                    for i in 0..v.nchildren().min(50) {
                        let _ = v.sep(i);
                        let _ = v.child(i);
                    }
                    for bound in [&b""[..], b"\x01", b"\x02\x02", b"\x03\x03\x03"] {
                        let _ = v.find_child(|k| k.cmp(bound));
                        let _ = v.find_child_le(|k| k.cmp(bound));
                    }
                }
            }
        }
    }
}
