//! The paper's Compression rule (4.4), optional: a leaf body compressed with
//! LZ4 (block format). Only leaves are compressed, so a point query
//! decompresses at most one page. The uncompressed body is an ordinary plain
//! leaf of up to `MAX_BODY` bytes, so everything after decompression is the
//! plain-leaf code.

use super::leaf::HDR;
use super::*;
use crate::tid::Tid;
use lz4_flex::block::{compress_into, decompress_into, get_maximum_output_size};
use std::borrow::Cow;

pub(crate) const CHDR: usize = 6;

/// Bytes a compressed page keeps free when built, so that an in-place VACUUM
/// (which recompresses a smaller but differently-shaped body) almost always
/// fits; see `rewrite_leaf_without`.
fn slack(cap: usize) -> usize {
    cap / 64
}

fn compress_to(plain: &[u8], comp: &mut Vec<u8>) -> usize {
    let need = get_maximum_output_size(plain.len());
    if comp.len() < need {
        comp.resize(need, 0);
    }
    compress_into(plain, comp).expect("output sized by get_maximum_output_size")
}

/// Packs entries into leaf bodies that are LZ4-compressed when that pays.
///
/// Same contract as `LeafBuilder::add`. `finish` may keep some of the
/// entries it was given for the next page (when the compressed body turns
/// out not to fit), so after `finish` the builder need not be empty; keep
/// calling `finish` until it is.
pub struct CompressedLeafBuilder {
    cap: usize,
    /// Uncompressed bodies known to fit when compressed, learned from the
    /// previous pages; the staging builder starts each page at this limit.
    learned: usize,
    stage: LeafBuilder,
    plain: Vec<u8>,
    comp: Vec<u8>,
}

impl CompressedLeafBuilder {
    pub fn new(cap: usize) -> Self {
        assert!((MIN_BODY..=MAX_BODY).contains(&cap), "leaf body capacity {cap} out of range");
        CompressedLeafBuilder {
            cap,
            learned: cap,
            stage: LeafBuilder::new(cap),
            plain: vec![0; MAX_BODY],
            comp: Vec::new(),
        }
    }

    fn budget(&self) -> usize {
        self.cap - CHDR - slack(self.cap)
    }

    pub fn is_empty(&self) -> bool {
        self.stage.is_empty()
    }

    pub fn nkeys(&self) -> usize {
        self.stage.nkeys()
    }

    pub fn ntids(&self) -> usize {
        self.stage.ntids()
    }

    pub fn first_key(&self) -> Option<&[u8]> {
        self.stage.first_key()
    }

    pub fn last_key(&self) -> Option<&[u8]> {
        self.stage.last_key()
    }

    /// Takes (a prefix of) `tids` under `key`; see `LeafBuilder::add`.
    pub fn add(&mut self, key: &[u8], tids: &[Tid]) -> usize {
        let mut taken = self.stage.add(key, tids);
        while taken < tids.len() && self.stage.cap() < MAX_BODY {
            // The staging body is full at its limit; compress it once to see
            // how much more the page could hold, and raise the limit by that
            // ratio. A few compressions per page, not one per entry.
            let u = self.stage.encode(&mut self.plain);
            let c = compress_to(&self.plain[..u], &mut self.comp);
            if c > self.budget() {
                break;
            }
            let target = ((u as u64 * self.budget() as u64 / c.max(1) as u64) * 31 / 32) as usize;
            let target = target.min(MAX_BODY);
            if target < self.stage.cap() + self.stage.cap() / 16 {
                break;
            }
            self.stage.set_cap(target);
            taken += self.stage.add(key, &tids[taken..]);
        }
        taken
    }

    /// Writes one page body into `out` (at least `cap` bytes) and returns its
    /// used length: compressed if that is smaller and fits, else plain.
    /// Entries that did not fit stay in the builder for the next page.
    pub fn finish(&mut self, out: &mut [u8]) -> usize {
        assert!(out.len() >= self.cap.min(MAX_BODY));
        let mut carry: Vec<(Vec<u8>, Vec<Tid>)> = Vec::new();
        let used = loop {
            let u = self.stage.encode(&mut self.plain);
            let c = compress_to(&self.plain[..u], &mut self.comp);
            if u <= self.cap && u <= c + CHDR {
                out[..u].copy_from_slice(&self.plain[..u]);
                break u;
            }
            if c <= self.budget() || (u <= self.cap && c + CHDR <= self.cap) {
                out[0] = FORMAT_LEAF_LZ4;
                out[1] = 0;
                wr_u16(out, 2, u);
                wr_u16(out, 4, c);
                out[CHDR..CHDR + c].copy_from_slice(&self.comp[..c]);
                if u > self.learned {
                    self.learned = u;
                }
                break CHDR + c;
            }
            // Too big compressed: keep a proportional share of the TIDs and
            // try again. Size is roughly linear in content, so this converges
            // in one or two rounds.
            let n = self.stage.ntids();
            let keep = (n as u64 * self.budget() as u64 / c as u64 * 63 / 64) as usize;
            let keep = keep.clamp(1, n.saturating_sub(1).max(1));
            let mut tail = self.stage.truncate_tids(keep);
            self.learned = self.learned.min(self.stage.size()).max(self.cap);
            tail.append(&mut carry);
            carry = tail;
        };
        self.stage.reset();
        self.stage.set_cap(MAX_BODY);
        for (k, t) in &carry {
            let n = self.stage.add(k, t);
            assert_eq!(n, t.len(), "carried entries come from a body that fit");
        }
        let lim = self.learned.max(self.stage.size());
        self.stage.set_cap(lim);
        used
    }
}

/// Decompresses a compressed leaf body into a plain one for `LeafView`.
pub fn decompress_leaf(body: &[u8]) -> Res<Vec<u8>> {
    if body.len() < CHDR || body[0] != FORMAT_LEAF_LZ4 {
        return corrupt("not a compressed leaf body");
    }
    if body[1] != 0 {
        return corrupt("unknown compressed leaf flags");
    }
    let ulen = rd_u16(body, 2) as usize;
    let clen = rd_u16(body, 4) as usize;
    if ulen < HDR {
        return corrupt("compressed leaf too short");
    }
    let src = match body.get(CHDR..CHDR + clen) {
        Some(s) => s,
        None => return corrupt("compressed leaf runs past its body"),
    };
    let mut out = vec![0; ulen];
    match decompress_into(src, &mut out) {
        Ok(n) if n == ulen => Ok(out),
        _ => corrupt("bad LZ4 data"),
    }
}

/// A leaf body of either format as a plain body.
pub fn leaf_body(body: &[u8]) -> Res<Cow<'_, [u8]>> {
    match body.first() {
        Some(&FORMAT_LEAF) => Ok(Cow::Borrowed(body)),
        Some(&FORMAT_LEAF_LZ4) => decompress_leaf(body).map(Cow::Owned),
        _ => corrupt("not a leaf body"),
    }
}

/// Used bytes of a leaf body of either format.
pub fn leaf_used_len(body: &[u8]) -> Res<usize> {
    match body.first() {
        Some(&FORMAT_LEAF) => Ok(LeafView::parse(body)?.used_len()),
        Some(&FORMAT_LEAF_LZ4) if body.len() >= CHDR => Ok(CHDR + rd_u16(body, 4) as usize),
        _ => corrupt("not a leaf body"),
    }
}

/// VACUUM for a leaf of either format: `LeafView::rewrite_without`, then,
/// for a compressed leaf, whichever of plain and recompressed is smaller.
///
/// A plain leaf always fits. A compressed one almost always does (build
/// leaves `cap / 64` bytes free for this), but LZ4 output is not monotone in
/// its input, so removing TIDs can in principle make it larger: then this
/// returns `Err(NoSpace)` and `out` is unspecified.
pub fn rewrite_leaf_without(body: &[u8], dead: impl FnMut(Tid) -> bool, out: &mut [u8]) -> Res<(usize, usize)> {
    match body.first() {
        Some(&FORMAT_LEAF) => LeafView::parse(body)?.rewrite_without(dead, out),
        Some(&FORMAT_LEAF_LZ4) => {
            let plain = decompress_leaf(body)?;
            let view = LeafView::parse(&plain)?;
            let mut scratch = vec![0; MAX_BODY];
            let (u, removed) = view.rewrite_without(dead, &mut scratch)?;
            let mut comp = Vec::new();
            let c = compress_to(&scratch[..u], &mut comp);
            if u <= out.len() && u <= c + CHDR {
                out[..u].copy_from_slice(&scratch[..u]);
                Ok((u, removed))
            } else if CHDR + c <= out.len() {
                out[0] = FORMAT_LEAF_LZ4;
                out[1] = 0;
                wr_u16(out, 2, u);
                wr_u16(out, 4, c);
                out[CHDR..CHDR + c].copy_from_slice(&comp[..c]);
                Ok((CHDR + c, removed))
            } else {
                Err(FormatError::NoSpace)
            }
        }
        _ => corrupt("not a leaf body"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Repetitive secondary-index-like content: compresses well.
    fn entries(n: u32) -> Vec<(Vec<u8>, Vec<Tid>)> {
        (0..n)
            .map(|i| {
                let k = format!("customer-{:08}-region-north", i / 3).into_bytes();
                let mut k = k;
                k.push((i % 3) as u8);
                (k, (0..4).map(|j| Tid::new(i * 4 + j, 1)).collect())
            })
            .collect()
    }

    fn pack(e: &[(Vec<u8>, Vec<Tid>)], cap: usize) -> Vec<Vec<u8>> {
        let mut b = CompressedLeafBuilder::new(cap);
        let mut pages = Vec::new();
        let mut out = vec![0; cap];
        for (k, t) in e {
            let mut rest = &t[..];
            while !rest.is_empty() {
                let n = b.add(k, rest);
                rest = &rest[n..];
                if !rest.is_empty() {
                    let u = b.finish(&mut out);
                    pages.push(out[..u].to_vec());
                }
            }
        }
        while !b.is_empty() {
            let u = b.finish(&mut out);
            pages.push(out[..u].to_vec());
        }
        pages
    }

    fn unpack(pages: &[Vec<u8>]) -> Vec<(Vec<u8>, Vec<Tid>)> {
        let mut all: Vec<(Vec<u8>, Vec<Tid>)> = Vec::new();
        for p in pages {
            let plain = leaf_body(p).unwrap();
            assert_eq!(leaf_used_len(p).unwrap(), p.len());
            for (k, t) in LeafView::parse(&plain).unwrap().decode_all().unwrap() {
                match all.last_mut() {
                    Some((lk, lt)) if *lk == k => lt.extend(t),
                    _ => all.push((k, t)),
                }
            }
        }
        all
    }

    #[test]
    fn compressed_roundtrip_and_ratio() {
        let e = entries(20000);
        let pages = pack(&e, 8100);
        assert!(pages.iter().all(|p| p.len() <= 8100));
        assert!(pages.iter().filter(|p| p[0] == FORMAT_LEAF_LZ4).count() >= pages.len() - 1);
        assert_eq!(unpack(&pages), e);
        let plain = {
            let mut b = LeafBuilder::new(8100);
            let mut n = 1;
            for (k, t) in &e {
                if b.add(k, t) < t.len() {
                    let mut o = vec![0; 8100];
                    b.finish(&mut o);
                    n += 1;
                    b.add(k, t);
                }
            }
            n
        };
        eprintln!("lz4 leaves: {} pages vs {} plain", pages.len(), plain);
        assert!(pages.len() * 3 < plain * 2);
    }

    #[test]
    fn incompressible_stays_plain() {
        // Random-looking keys and TIDs: LZ4 cannot win, pages stay plain.
        let mut x = 0x9e3779b97f4a7c15u64;
        let mut e: Vec<(Vec<u8>, Vec<Tid>)> = (0..3000)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x.to_be_bytes().to_vec(), vec![Tid::new((x >> 40) as u32, (x % 250) as u16 + 1)])
            })
            .collect();
        e.sort();
        e.dedup_by(|a, b| a.0 == b.0);
        let pages = pack(&e, 2000);
        assert_eq!(unpack(&pages), e);
        assert!(pages.iter().all(|p| p[0] == FORMAT_LEAF));
    }

    #[test]
    fn huge_posting_list_compressed() {
        let e = vec![(b"k".to_vec(), (0..60000u32).map(|i| Tid::new(i, 1)).collect::<Vec<_>>())];
        let pages = pack(&e, 1000);
        assert_eq!(unpack(&pages), e);
    }

    #[test]
    fn rewrite_compressed() {
        let e = entries(3000);
        let pages = pack(&e, 8100);
        let dead = |t: Tid| t.block.is_multiple_of(3);
        let mut got = Vec::new();
        for p in &pages {
            let mut out = vec![0; 8100];
            let (u, _) = rewrite_leaf_without(p, dead, &mut out).unwrap();
            got.push(out[..u].to_vec());
        }
        let want: Vec<_> = e
            .iter()
            .map(|(k, t)| (k.clone(), t.iter().copied().filter(|&x| !dead(x)).collect::<Vec<_>>()))
            .filter(|x| !x.1.is_empty())
            .collect();
        assert_eq!(unpack(&got), want);
    }

    proptest! {
        #[test]
        fn prop_compressed_corrupt(n in 1u32..400, flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6), cut in any::<prop::sample::Index>()) {
            let pages = pack(&entries(n), 1000);
            let mut body = pages[0].clone();
            for (i, x) in &flips {
                let i = i.index(body.len());
                body[i] ^= *x;
            }
            let c = cut.index(body.len() + 1);
            for b in [&body[..], &body[..c]] {
                if let Ok(plain) = leaf_body(b) {
                    crate::static_stage::leaf::tests::exercise(&plain);
                }
                let mut out = vec![0; 1000];
                let _ = rewrite_leaf_without(b, |t| t.block % 2 == 0, &mut out);
                let _ = leaf_used_len(b);
            }
        }
    }
}
