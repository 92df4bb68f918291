//! What hasis's INSERT, UPDATE and STAMP WAL records carry, format 2: the
//! fewest bytes from which redo rebuilds the primary's change.
//!
//! Format 1 logged each new item whole (28 bytes of length and row header
//! before the payload), the extent's parameters and page version in every
//! insert, and all 22 MVCC bytes of every stamp. Under pgbench TPC-B those
//! bytes were a third of hasis's WAL. Format 2 leaves out what redo knows
//! already, as heap's records do:
//!
//! - A new version's xmin is the record's own transaction id (`xl_xid`:
//!   XLogInsert stamps the inserting (sub)transaction's id), its xmax is 0
//!   and its ctid its own TID; when all three hold (every plain insert and
//!   update) the item's MVCC fields shrink to the two infomask words.
//! - Command ids are not logged. Redo writes `FIRST_COMMAND_ID` and clears
//!   `HEAP_COMBOCID`, as heap's redo does: a command id matters only to
//!   the transaction that wrote it, which neither a standby nor a
//!   recovered primary runs. So a page's cid bytes may differ between
//!   primary and standby; every other byte is the same.
//! - A stamp keeps the version's xmin (it is on the page) and, in an
//!   UPDATE record, takes the new version's TID as ctid.
//! - The extent's parameters are read from its header block in redo; the
//!   page version only when a delta block is new (it stamps the block).
//!
//! INSERT / UPDATE insert part:
//! ```text
//!  0  1  flags: 0x01 new delta block, 0x02 payload LZ4-packed,
//!                0x04 MVCC implied, 0x08 payload as a diff
//!  1  2  slot
//!  3  1  delta block index (0-based in the delta part)
//!  4  2  byte offset of the item in that block
//! [6  4  page version]                    only with 0x01
//!  then the item: 0x04 set   len u16, natts u16, infomask u16, infomask2 u16
//!                 0x04 clear len u16, the 26-byte row header
//! [   2  prefix, 2  suffix, 2  runs n,   only with 0x08
//!     n × (2 kept, 2 new)]
//!  then the payload (LZ4 block with 0x02; its plain length is len - 28),
//!  with 0x08 only its new bytes: those between the prefix and the suffix
//!  it shares with the old version's payload, or with n > 0 (the two
//!  middles are as long) the `new` bytes of each run, which follow `kept`
//!  bytes of the old middle at the same place
//! ```
//!
//! A HOT update whose old version is a delta item logs the new payload as
//! a diff against the old one: heap's prefix/suffix compression of
//! `log_heap_update`, and runs inside the middle, because an update
//! changes a few fields and the unchanged ones between them (TPC-C's
//! stock: ten 24-byte district strings between the quantity and the
//! year-to-date counters) were most of its UPDATE bytes. Redo reads the old payload from
//! the old version's block, which the same record registers (block 1, or
//! block 3); see `src/hasis/wal.rs` for when the primary may do this.
//! Stamp: `at` u16, xmax u32, infomask u16, infomask2 u16, and in a STAMP
//! record the ctid (block u32, offset u16).

use super::delta::{pack_payload, unpack_payload, ITEM_HDR, MAX_PAYLOAD};
use super::layout::{rd16, rd32, wr16};
use super::row::{Mvcc, RowHeader};
use super::{corrupt, Result};
use crate::tid::Tid;

/// PostgreSQL's `FirstCommandId`.
pub const FIRST_COMMAND_ID: u32 = 0;
/// infomask bit: `t_cid` holds a combo command id (htup_details.h).
pub const HEAP_COMBOCID: u16 = 0x0020;

const FLAG_FRESH: u8 = 0x01;
const FLAG_PACKED: u8 = 0x02;
const FLAG_IMPLIED: u8 = 0x04;
const FLAG_DIFF: u8 = 0x08;

/// A shared prefix and suffix shorter than this together are not worth
/// the six bytes that say how long they are.
const DIFF_MIN_SHARED: usize = 8;
/// Bytes of a run's header: a run keeps fewer equal bytes than this only
/// where merging them into the new bytes would cost more.
const RUN_HDR: usize = 4;

/// Where an insert's item goes, as logged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InsertPlace {
    pub slot: u16,
    pub delta_index: u8,
    /// The delta block is new: redo initializes it with `version`.
    pub fresh: bool,
    pub offset: u16,
    pub version: u32,
}

/// What redo knows of a new version without the record saying it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Implied {
    /// The record's transaction id.
    pub xid: u32,
    /// The new version's own TID.
    pub own: Tid,
}

/// A new version's MVCC fields as redo rebuilds them from the infomask
/// words.
pub fn implied_mvcc(imp: &Implied, infomask: u16, infomask2: u16) -> Mvcc {
    Mvcc { xmin: imp.xid, xmax: 0, cid: FIRST_COMMAND_ID, ctid: imp.own, infomask: infomask & !HEAP_COMBOCID, infomask2 }
}

/// Encodes an insert and its item (`delta::encode_item`'s bytes) into
/// `out`; `implied` is what redo will know. With `old_payload` (a HOT
/// update's old version, which redo can read) the payload may be logged as
/// a diff against it.
pub fn encode_insert(place: &InsertPlace, item: &[u8], implied: &Implied, old_payload: Option<&[u8]>, out: &mut Vec<u8>) {
    let header = RowHeader::decode(&item[2..ITEM_HDR]);
    let m = header.mvcc;
    let is_implied = m.xmin == implied.xid && m.xmax == 0 && m.ctid == implied.own && header.slot == place.slot;
    let payload = &item[ITEM_HDR..];
    let shared = old_payload.map(|old| SharedEnds::of(old, payload)).filter(|s| s.prefix + s.suffix >= DIFF_MIN_SHARED);
    // With a diff: the middle's runs against the old middle (none: the
    // middle whole) and the new bytes logged.
    let (runs, fresh): (Vec<Run>, std::borrow::Cow<[u8]>) = match (shared, old_payload) {
        (Some(s), Some(old)) => {
            let middle = &payload[s.prefix..payload.len() - s.suffix];
            let runs = Run::find(&old[s.prefix..old.len() - s.suffix], middle);
            let new_bytes: usize = runs.iter().map(|r| r.new).sum();
            if !runs.is_empty() && RUN_HDR * runs.len() + new_bytes < middle.len() {
                let mut fresh = Vec::with_capacity(new_bytes);
                let mut at = 0;
                for r in &runs {
                    fresh.extend_from_slice(&middle[at + r.kept..at + r.kept + r.new]);
                    at += r.kept + r.new;
                }
                (runs, fresh.into())
            } else {
                (Vec::new(), middle.into())
            }
        }
        _ => (Vec::new(), payload.into()),
    };
    let logged: &[u8] = &fresh;
    let packed = pack_payload(logged);
    let flags = if place.fresh { FLAG_FRESH } else { 0 }
        | if packed.is_some() { FLAG_PACKED } else { 0 }
        | if is_implied { FLAG_IMPLIED } else { 0 }
        | if shared.is_some() { FLAG_DIFF } else { 0 };
    out.push(flags);
    out.extend_from_slice(&place.slot.to_le_bytes());
    out.push(place.delta_index);
    out.extend_from_slice(&place.offset.to_le_bytes());
    if place.fresh {
        out.extend_from_slice(&place.version.to_le_bytes());
    }
    out.extend_from_slice(&item[0..2]);
    if is_implied {
        out.extend_from_slice(&header.natts.to_le_bytes());
        out.extend_from_slice(&m.infomask.to_le_bytes());
        out.extend_from_slice(&m.infomask2.to_le_bytes());
    } else {
        out.extend_from_slice(&item[2..ITEM_HDR]);
    }
    if let Some(s) = shared {
        out.extend_from_slice(&(s.prefix as u16).to_le_bytes());
        out.extend_from_slice(&(s.suffix as u16).to_le_bytes());
        out.extend_from_slice(&(runs.len() as u16).to_le_bytes());
        for r in &runs {
            out.extend_from_slice(&(r.kept as u16).to_le_bytes());
            out.extend_from_slice(&(r.new as u16).to_le_bytes());
        }
    }
    out.extend_from_slice(packed.as_deref().unwrap_or(logged));
}

/// How many leading and trailing bytes a new payload shares with the old
/// one (not overlapping in either).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct SharedEnds {
    prefix: usize,
    suffix: usize,
}

impl SharedEnds {
    fn of(old: &[u8], new: &[u8]) -> SharedEnds {
        let limit = old.len().min(new.len());
        let prefix = old.iter().zip(new).take_while(|(a, b)| a == b).count().min(limit);
        let suffix = old[prefix..].iter().rev().zip(new[prefix..].iter().rev()).take_while(|(a, b)| a == b).count();
        SharedEnds { prefix, suffix }
    }
}

/// Part of an equal-length middle: `kept` bytes as in the old middle, then
/// `new` bytes of its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Run {
    kept: usize,
    new: usize,
}

impl Run {
    /// The runs that turn `old` into `new` (as long; else none), equal
    /// stretches shorter than a run header merged into the new bytes
    /// around them. Both middles start and end with a differing byte
    /// (`SharedEnds`), so the last run ends with new bytes.
    fn find(old: &[u8], new: &[u8]) -> Vec<Run> {
        let mut runs: Vec<Run> = Vec::new();
        if old.len() != new.len() || new.is_empty() {
            return runs;
        }
        let mut at = 0;
        while at < new.len() {
            let kept = old[at..].iter().zip(&new[at..]).take_while(|(a, b)| a == b).count();
            let start = at + kept;
            let mut end = start;
            while end < new.len() && old[end] != new[end] {
                end += 1;
            }
            match runs.last_mut() {
                // Too short an equal stretch: the previous run takes it.
                Some(last) if kept < RUN_HDR => last.new += kept + (end - start),
                _ => runs.push(Run { kept, new: end - start }),
            }
            at = end;
        }
        runs
    }
}

/// Whether an encoded insert logs its payload as a diff, so that redo must
/// hand `decode_item` the old version's payload.
pub fn is_diff(b: &[u8]) -> bool {
    b.first().is_some_and(|f| f & FLAG_DIFF != 0)
}

/// The place an encoded insert names, read before the item so that redo
/// can compute the new version's TID from its slot.
pub fn decode_place(b: &[u8]) -> Result<(InsertPlace, usize)> {
    if b.len() < 6 {
        return corrupt("short insert in a WAL record");
    }
    let flags = b[0];
    if flags & !(FLAG_FRESH | FLAG_PACKED | FLAG_IMPLIED | FLAG_DIFF) != 0 {
        return corrupt("unknown insert flags in a WAL record");
    }
    let fresh = flags & FLAG_FRESH != 0;
    let mut place = InsertPlace { slot: rd16(b, 1), delta_index: b[3], fresh, offset: rd16(b, 4), version: 0 };
    let mut at = 6;
    if fresh {
        if b.len() < 10 {
            return corrupt("short insert in a WAL record");
        }
        place.version = rd32(b, 6);
        at = 10;
    }
    Ok((place, at))
}

/// The item of an encoded insert whose place `decode_place` read (`b` is
/// the whole insert part); `old_payload` is the old version's payload when
/// `is_diff` says the record needs it.
pub fn decode_item(b: &[u8], place: &InsertPlace, implied: &Implied, old_payload: Option<&[u8]>) -> Result<Vec<u8>> {
    let flags = b[0];
    let at = if place.fresh { 10 } else { 6 };
    let rest = &b[at..];
    if rest.len() < 2 {
        return corrupt("short item in a WAL record");
    }
    let len = rd16(rest, 0) as usize;
    if !(ITEM_HDR..=ITEM_HDR + MAX_PAYLOAD).contains(&len) {
        return corrupt("item length out of range in a WAL record");
    }
    let mut item = vec![0u8; ITEM_HDR];
    wr16(&mut item, 0, len as u16);
    let body = if flags & FLAG_IMPLIED != 0 {
        if rest.len() < 8 {
            return corrupt("short item header in a WAL record");
        }
        let header = RowHeader { slot: place.slot, natts: rd16(rest, 2), mvcc: implied_mvcc(implied, rd16(rest, 4), rd16(rest, 6)) };
        header.encode(&mut item[2..ITEM_HDR]);
        &rest[8..]
    } else {
        if rest.len() < ITEM_HDR {
            return corrupt("short item header in a WAL record");
        }
        item[2..ITEM_HDR].copy_from_slice(&rest[2..ITEM_HDR]);
        &rest[ITEM_HDR..]
    };
    let plain = len - ITEM_HDR;
    // A diff: the old payload's shared ends, and the runs of the middle.
    struct Diff<'o> {
        prefix: &'o [u8],
        suffix: &'o [u8],
        old_middle: &'o [u8],
        runs: Vec<Run>,
    }
    let (body, diff) = if flags & FLAG_DIFF != 0 {
        let Some(old) = old_payload else { return corrupt("diff of a HOT update replayed without its old version") };
        if body.len() < 6 {
            return corrupt("short diff in a WAL record");
        }
        let shared = SharedEnds { prefix: rd16(body, 0) as usize, suffix: rd16(body, 2) as usize };
        let nruns = rd16(body, 4) as usize;
        if shared.prefix + shared.suffix > plain.min(old.len()) {
            return corrupt("diff longer than its payload in a WAL record");
        }
        if body.len() < 6 + RUN_HDR * nruns {
            return corrupt("short diff in a WAL record");
        }
        let runs: Vec<Run> = (0..nruns).map(|i| Run { kept: rd16(body, 6 + RUN_HDR * i) as usize, new: rd16(body, 8 + RUN_HDR * i) as usize }).collect();
        let old_middle = &old[shared.prefix..old.len() - shared.suffix];
        let middle = plain - shared.prefix - shared.suffix;
        if nruns > 0 && (old_middle.len() != middle || runs.iter().map(|r| r.kept + r.new).sum::<usize>() != middle) {
            return corrupt("diff runs do not cover the payload in a WAL record");
        }
        let d = Diff { prefix: &old[..shared.prefix], suffix: &old[old.len() - shared.suffix..], old_middle, runs };
        (&body[6 + RUN_HDR * nruns..], Some(d))
    } else {
        (body, None)
    };
    let (prefix, suffix) = diff.as_ref().map_or((&[][..], &[][..]), |d| (d.prefix, d.suffix));
    let middle = plain - prefix.len() - suffix.len();
    let logged = match &diff {
        Some(d) if !d.runs.is_empty() => d.runs.iter().map(|r| r.new).sum(),
        _ => middle,
    };
    let unpacked;
    let fresh: &[u8] = if flags & FLAG_PACKED != 0 {
        unpacked = unpack_payload(body, logged)?;
        &unpacked
    } else {
        if body.len() != logged {
            return corrupt("item payload length mismatch in a WAL record");
        }
        body
    };
    item.extend_from_slice(prefix);
    match &diff {
        Some(d) if !d.runs.is_empty() => {
            let (mut at, mut from) = (0, 0);
            for r in &d.runs {
                item.extend_from_slice(&d.old_middle[at..at + r.kept]);
                item.extend_from_slice(&fresh[from..from + r.new]);
                at += r.kept + r.new;
                from += r.new;
            }
        }
        _ => item.extend_from_slice(fresh),
    }
    item.extend_from_slice(suffix);
    Ok(item)
}

/// A stamp of a version's MVCC fields at byte `at` of its block (the
/// byte where `Mvcc::encode` writes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stamp {
    pub at: u16,
    pub xmax: u32,
    pub infomask: u16,
    pub infomask2: u16,
}

/// A stamp's bytes without and with the ctid.
pub const STAMP_LEN: usize = 10;
pub const STAMP_WITH_CTID_LEN: usize = STAMP_LEN + 6;

impl Stamp {
    pub fn of(at: u16, m: &Mvcc) -> Stamp {
        Stamp { at, xmax: m.xmax, infomask: m.infomask, infomask2: m.infomask2 }
    }

    /// Appends the stamp, and `ctid` where redo cannot know it.
    pub fn encode(&self, ctid: Option<Tid>, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.at.to_le_bytes());
        out.extend_from_slice(&self.xmax.to_le_bytes());
        out.extend_from_slice(&self.infomask.to_le_bytes());
        out.extend_from_slice(&self.infomask2.to_le_bytes());
        if let Some(t) = ctid {
            out.extend_from_slice(&t.block.to_le_bytes());
            out.extend_from_slice(&t.offset.to_le_bytes());
        }
    }

    /// Reads a stamp (`with_ctid`: and its ctid) from the start of `b`.
    pub fn decode(b: &[u8], with_ctid: bool) -> Result<(Stamp, Option<Tid>)> {
        let need = if with_ctid { STAMP_WITH_CTID_LEN } else { STAMP_LEN };
        if b.len() < need {
            return corrupt("short stamp in a WAL record");
        }
        let s = Stamp { at: rd16(b, 0), xmax: rd32(b, 2), infomask: rd16(b, 6), infomask2: rd16(b, 8) };
        let ctid = with_ctid.then(|| Tid::new(rd32(b, 10), rd16(b, 14)));
        Ok((s, ctid))
    }

    /// The version's MVCC fields after the stamp: xmin stays, the command
    /// id is `FIRST_COMMAND_ID` (see the module comment).
    pub fn apply(&self, old: &Mvcc, ctid: Tid) -> Mvcc {
        Mvcc { xmin: old.xmin, xmax: self.xmax, cid: FIRST_COMMAND_ID, ctid, infomask: self.infomask & !HEAP_COMBOCID, infomask2: self.infomask2 }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hasis::delta::encode_item;

    fn mvcc(xmin: u32, xmax: u32, cid: u32, ctid: Tid, infomask: u16) -> Mvcc {
        Mvcc { xmin, xmax, cid, ctid, infomask, infomask2: 0x4003 }
    }

    fn roundtrip(place: InsertPlace, header: RowHeader, payload: &[u8], imp: Implied) -> (Vec<u8>, Vec<u8>) {
        let item = encode_item(&header, payload).unwrap();
        let mut wire = Vec::new();
        encode_insert(&place, &item, &imp, None, &mut wire);
        assert!(!is_diff(&wire));
        let (p2, _) = decode_place(&wire).unwrap();
        assert_eq!(p2, InsertPlace { version: if place.fresh { place.version } else { 0 }, ..place });
        let back = decode_item(&wire, &p2, &imp, None).unwrap();
        (wire, back)
    }

    #[test]
    fn implied_insert_keeps_everything_but_the_command_id() {
        let own = Tid::new(40, 7);
        let imp = Implied { xid: 1234, own };
        let header = RowHeader { slot: 6, natts: 3, mvcc: mvcc(1234, 0, 5, own, 0x0800 | HEAP_COMBOCID) };
        let payload: Vec<u8> = (0..20).collect();
        let place = InsertPlace { slot: 6, delta_index: 2, fresh: false, offset: 900, version: 77 };
        let (wire, back) = roundtrip(place, header, &payload, imp);
        assert_eq!(wire.len(), 6 + 2 + 6 + payload.len());
        let got = RowHeader::decode(&back[2..ITEM_HDR]);
        assert_eq!(got.mvcc, Mvcc { cid: FIRST_COMMAND_ID, infomask: 0x0800, ..header.mvcc });
        assert_eq!((got.slot, got.natts), (6, 3));
        assert_eq!(&back[ITEM_HDR..], &payload[..]);
    }

    #[test]
    fn other_inserts_carry_their_row_header() {
        let own = Tid::new(40, 7);
        let imp = Implied { xid: 1234, own };
        // A speculative token in ctid, another transaction's xmin (a
        // rewrite), a set xmax: all logged whole.
        for m in [mvcc(1234, 0, 0, Tid::new(99, 0xfffe), 0x0800), mvcc(17, 0, 0, own, 0x0900), mvcc(1234, 1240, 0, own, 0)] {
            let header = RowHeader { slot: 6, natts: 1, mvcc: m };
            let place = InsertPlace { slot: 6, delta_index: 0, fresh: true, offset: 32, version: 9 };
            let payload = [1u8, 2, 3, 4];
            let (wire, back) = roundtrip(place, header, &payload, imp);
            assert_eq!(wire.len(), 10 + ITEM_HDR + 4);
            assert_eq!(RowHeader::decode(&back[2..ITEM_HDR]), header);
        }
    }

    #[test]
    fn compressible_payloads_are_packed() {
        let own = Tid::new(1, 1);
        let imp = Implied { xid: 5, own };
        let header = RowHeader { slot: 0, natts: 2, mvcc: mvcc(5, 0, 0, own, 0x0800) };
        let mut payload = vec![0u8, 0, 0, 7];
        payload.extend(std::iter::repeat_n(b' ', 120));
        let place = InsertPlace { slot: 0, delta_index: 0, fresh: false, offset: 32, version: 1 };
        let (wire, back) = roundtrip(place, header, &payload, imp);
        assert!(wire.len() < 6 + 8 + payload.len() / 2, "{} bytes", wire.len());
        assert_eq!(&back[ITEM_HDR..], &payload[..]);
    }

    #[test]
    fn malformed_inserts_are_errors() {
        let own = Tid::new(1, 1);
        let imp = Implied { xid: 5, own };
        let header = RowHeader { slot: 0, natts: 2, mvcc: mvcc(5, 0, 0, own, 0x0800) };
        let mut payload = vec![9u8; 4];
        payload.extend(std::iter::repeat_n(b'x', 100));
        let item = encode_item(&header, &payload).unwrap();
        let mut wire = Vec::new();
        encode_insert(&InsertPlace { slot: 0, delta_index: 0, fresh: false, offset: 32, version: 1 }, &item, &imp, None, &mut wire);
        for cut in 0..wire.len() {
            if let Ok((p, _)) = decode_place(&wire[..cut]) {
                assert!(decode_item(&wire[..cut], &p, &imp, None).is_err(), "cut at {cut}");
            }
        }
        let mut bad = wire.clone();
        bad[0] |= 0x80;
        assert!(decode_place(&bad).is_err());
        let mut bad = wire.clone();
        let n = bad.len();
        bad[n - 1] ^= 0xff;
        bad[n - 2] ^= 0xff;
        let (p, _) = decode_place(&bad).unwrap();
        let _ = decode_item(&bad, &p, &imp, None); // an error or other bytes, never a panic
    }

    /// A HOT update's new version: what redo knows, its header, its place.
    fn update_fixture() -> (Implied, RowHeader, InsertPlace) {
        let own = Tid::new(3, 9);
        let imp = Implied { xid: 77, own };
        let header = RowHeader { slot: 9, natts: 4, mvcc: mvcc(77, 0, 0, own, 0x0800) };
        (imp, header, InsertPlace { slot: 9, delta_index: 1, fresh: false, offset: 400, version: 2 })
    }

    /// A HOT update's payload against its old one: logged as the bytes
    /// between their shared ends, rebuilt exactly; cut or damaged records
    /// and a missing or shorter old payload are errors, never a panic.
    #[test]
    fn updates_log_a_diff_against_the_old_payload() {
        let (imp, header, place) = update_fixture();
        let mut old: Vec<u8> = (0..200u32).map(|i| (i * 7 % 251) as u8).collect();
        let cases: Vec<Vec<u8>> = vec![
            { let mut n = old.clone(); n[50] ^= 1; n[52] ^= 1; n }, // a field in the middle
            { let mut n = old.clone(); n[0] ^= 1; n }, // first byte
            { let mut n = old.clone(); n[199] ^= 1; n }, // last byte
            { let mut n = old.clone(); n.insert(100, 5); n }, // longer
            { let mut n = old.clone(); n.remove(100); n }, // shorter
            old.clone(), // unchanged
            { let mut n = old.clone(); n.truncate(10); n }, // a prefix of the old
            (0..200u32).map(|i| (i * 13 % 241) as u8).collect(), // all different
        ];
        for new in &cases {
            let item = encode_item(&header, new).unwrap();
            let mut wire = Vec::new();
            encode_insert(&place, &item, &imp, Some(&old), &mut wire);
            let (p, _) = decode_place(&wire).unwrap();
            let back = decode_item(&wire, &p, &imp, is_diff(&wire).then_some(&old[..])).unwrap();
            assert_eq!(&back[ITEM_HDR..], &new[..]);
            let shared = SharedEnds::of(&old, new);
            assert!(shared.prefix + shared.suffix <= old.len().min(new.len()));
            if shared.prefix + shared.suffix >= DIFF_MIN_SHARED {
                assert!(is_diff(&wire));
                let runs = Run::find(&old[shared.prefix..old.len() - shared.suffix], &new[shared.prefix..new.len() - shared.suffix]);
                let middle = new.len() - shared.prefix - shared.suffix;
                let fresh: usize = runs.iter().map(|r| r.new).sum();
                let with_runs = 6 + 8 + 6 + RUN_HDR * runs.len() + fresh;
                assert!(wire.len() == with_runs || wire.len() == 6 + 8 + 6 + middle, "{} bytes", wire.len());
                assert!(wire.len() <= 6 + 8 + 6 + middle);
                assert!(decode_item(&wire, &p, &imp, None).is_err());
                assert!(decode_item(&wire, &p, &imp, Some(&old[..shared.prefix + shared.suffix - 1])).is_err());
                for cut in 0..wire.len() {
                    if let Ok((p, _)) = decode_place(&wire[..cut]) {
                        assert!(decode_item(&wire[..cut], &p, &imp, Some(&old)).is_err(), "cut at {cut}");
                    }
                }
            } else {
                assert!(!is_diff(&wire), "{shared:?}");
            }
        }
        // Fields changed far apart in a row of equal length: runs.
        let mut new = old.clone();
        new[10..14].copy_from_slice(&[1, 2, 3, 4]);
        new[150..154].copy_from_slice(&[5, 6, 7, 8]);
        new[156] ^= 0xff; // 2 equal bytes between: merged into the run
        let item = encode_item(&header, &new).unwrap();
        let mut wire = Vec::new();
        encode_insert(&place, &item, &imp, Some(&old), &mut wire);
        assert_eq!(wire.len(), 6 + 8 + 6 + 2 * RUN_HDR + 4 + 7);
        let (p, _) = decode_place(&wire).unwrap();
        assert_eq!(&decode_item(&wire, &p, &imp, Some(&old)).unwrap()[ITEM_HDR..], &new[..]);
        for cut in 0..wire.len() {
            if let Ok((p, _)) = decode_place(&wire[..cut]) {
                assert!(decode_item(&wire[..cut], &p, &imp, Some(&old)).is_err(), "cut at {cut}");
            }
        }
        // Runs naming more bytes than the payload has are an error.
        let mut bad = wire.clone();
        bad[6 + 8 + 6] ^= 0x40;
        let (p, _) = decode_place(&bad).unwrap();
        assert!(decode_item(&bad, &p, &imp, Some(&old)).is_err());
        // A diff whose middle compresses is packed too.
        old = vec![b' '; 300];
        let mut new = old.clone();
        new[100..220].fill(b'z');
        let item = encode_item(&header, &new).unwrap();
        let mut wire = Vec::new();
        encode_insert(&place, &item, &imp, Some(&old), &mut wire);
        assert!(wire.len() < 6 + 8 + 6 + 60, "{} bytes", wire.len());
        let (p, _) = decode_place(&wire).unwrap();
        assert_eq!(&decode_item(&wire, &p, &imp, Some(&old)).unwrap()[ITEM_HDR..], &new[..]);
    }

    /// Random payloads and random edits: every diff rebuilds the new
    /// payload, and is never longer than the middle logged whole.
    #[test]
    fn random_diffs_roundtrip() {
        let (imp, header, place) = update_fixture();
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut rnd = move |n: usize| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed % n as u64) as usize
        };
        for _ in 0..2000 {
            let len = 1 + rnd(400);
            let old: Vec<u8> = (0..len).map(|_| if rnd(3) == 0 { b' ' } else { rnd(256) as u8 }).collect();
            let mut new = old.clone();
            for _ in 0..rnd(6) {
                let at = rnd(new.len().max(1));
                match rnd(4) {
                    0 if !new.is_empty() => new[at] = rnd(256) as u8,
                    1 => new.insert(at.min(new.len()), rnd(256) as u8),
                    2 if new.len() > 1 => {
                        new.remove(at);
                    }
                    _ => {
                        let start = at.min(new.len());
                        let n = rnd(8).min(new.len() - start);
                        for b in &mut new[start..start + n] {
                            *b = rnd(256) as u8;
                        }
                    }
                }
            }
            let item = encode_item(&header, &new).unwrap();
            let mut wire = Vec::new();
            encode_insert(&place, &item, &imp, Some(&old), &mut wire);
            let (p, _) = decode_place(&wire).unwrap();
            let back = decode_item(&wire, &p, &imp, is_diff(&wire).then_some(&old[..])).unwrap();
            assert_eq!(&back[ITEM_HDR..], &new[..]);
        }
    }

    #[test]
    fn stamps_roundtrip() {
        let old = mvcc(10, 0, 3, Tid::new(1, 1), 0x0800 | 0x0100);
        let new = Mvcc { xmax: 12, cid: 4, ctid: Tid::new(8, 3), infomask: 0x0100 | HEAP_COMBOCID, infomask2: 0x4003 | 0x8000, ..old };
        let s = Stamp::of(500, &new);
        for with in [false, true] {
            let mut out = Vec::new();
            s.encode(with.then_some(new.ctid), &mut out);
            assert_eq!(out.len(), if with { STAMP_WITH_CTID_LEN } else { STAMP_LEN });
            let (s2, ctid) = Stamp::decode(&out, with).unwrap();
            assert_eq!(s2, s);
            assert_eq!(ctid, with.then_some(new.ctid));
            let m = s2.apply(&old, new.ctid);
            assert_eq!(m, Mvcc { cid: FIRST_COMMAND_ID, infomask: 0x0100, ..new });
            assert!(Stamp::decode(&out[..out.len() - 1], with).is_err());
        }
    }
}
