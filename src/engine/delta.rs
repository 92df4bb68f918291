//! The delta log: the durable form of the dynamic stage.
//!
//! Every insert appends (position, key, TID) to the tail page of a chain of
//! WAL-logged pages; the shared-memory dynamic stage is an index over this
//! log. Positions grow by one per insert and are never reused, so "merged"
//! is simply `pos < merged_upto`.
//!
//! Body of a delta page: `next_pos: u64` then records
//! `varint(pos - first_pos) varint(key_len) key tid_block:u32le tid_off:u16le`.

use std::sync::atomic::{AtomicU32, Ordering as AtomicOrdering};

use pg_hybrid_core::tid::Tid;
use pg_hybrid_core::varint;
use pgrx::pg_sys;

use super::meta::{self, META_BLOCK};
use crate::storage::alloc::alloc_page;
use crate::storage::buffer::{Buf, Lock};
use crate::storage::page::{self, PageKind, BODY_CAP, NO_BLOCK};
use crate::storage::wal::WalRecord;

const HDR: usize = 8;

pub struct DeltaRecord {
    pub pos: u64,
    pub key: Vec<u8>,
    pub tid: Tid,
}

pub fn record_len(pos_off: u64, key: &[u8]) -> usize {
    varint::len_u64(pos_off) + varint::len_u64(key.len() as u64) + key.len() + 6
}

fn encode_record(out: &mut Vec<u8>, pos_off: u64, key: &[u8], tid: Tid) {
    varint::put_u64(out, pos_off);
    varint::put_u64(out, key.len() as u64);
    out.extend_from_slice(key);
    out.extend_from_slice(&tid.block.to_le_bytes());
    out.extend_from_slice(&tid.offset.to_le_bytes());
}

/// Parses a delta page body; Err on malformed content.
pub fn parse(body: &[u8], first_pos: u64) -> Result<(u64, Vec<DeltaRecord>), &'static str> {
    if body.len() < HDR {
        return Err("delta page body too short");
    }
    let next_pos = u64::from_le_bytes(body[..8].try_into().unwrap());
    let mut out = Vec::new();
    let mut i = HDR;
    while i < body.len() {
        let (off, n) = varint::get_u64(&body[i..]).ok_or("bad record position")?;
        i += n;
        let (klen, n) = varint::get_u64(&body[i..]).ok_or("bad record key length")?;
        i += n;
        let klen = klen as usize;
        if i + klen + 6 > body.len() {
            return Err("record overruns page");
        }
        let key = body[i..i + klen].to_vec();
        i += klen;
        let block = u32::from_le_bytes(body[i..i + 4].try_into().unwrap());
        let offset = u16::from_le_bytes(body[i + 4..i + 6].try_into().unwrap());
        i += 6;
        let pos = first_pos.checked_add(off).ok_or("record position overflow")?;
        if pos >= next_pos {
            return Err("record position beyond page end position");
        }
        out.push(DeltaRecord { pos, key, tid: Tid::new(block, offset) });
    }
    Ok((next_pos, out))
}

unsafe fn next_pos_of(page: pg_sys::Page) -> u64 {
    let b = page::body(page);
    if b.len() < HDR {
        0
    } else {
        u64::from_le_bytes(b[..8].try_into().unwrap())
    }
}

unsafe fn init_delta(page: pg_sys::Page, first_pos: u64) {
    page::init_page(page, PageKind::Delta, 0, 0);
    page::opaque_mut(page).first_pos = first_pos;
    page::body_mut(page)[..8].copy_from_slice(&first_pos.to_le_bytes());
    page::set_body_len(page, HDR);
}

unsafe fn append_to(page: pg_sys::Page, key: &[u8], tid: Tid) -> u64 {
    let first = page::opaque(page).first_pos;
    let pos = next_pos_of(page);
    let mut rec = Vec::with_capacity(record_len(pos - first, key));
    encode_record(&mut rec, pos - first, key, tid);
    super::wal::apply_append(page, &rec);
    pos
}

/// Creates the first delta page (at build time). Returns its block.
pub unsafe fn create_log(rel: pg_sys::Relation, first_pos: u64) -> u32 {
    let b = alloc_page(rel);
    let mut w = WalRecord::start(rel);
    init_delta(w.register_new(&b), first_pos);
    w.finish();
    b.blkno()
}

/// Appends one record; returns its log position.
/// `tail_hint` remembers the tail block across calls (it lives in shared
/// memory); a Delta page without a right-link is the tail, whatever the hint
/// was, so a stale hint only costs a metapage read.
pub unsafe fn append(rel: pg_sys::Relation, key: &[u8], tid: Tid, tail_hint: &AtomicU32) -> u64 {
    loop {
        // Relations never shrink and the slot belongs to this relfilenode,
        // so a hint always names an existing block.
        let hint = tail_hint.load(AtomicOrdering::Relaxed);
        let tail_blk = if hint != 0 { hint } else { meta::read(rel).delta_tail };
        let tail = Buf::read(rel, tail_blk, Lock::Exclusive);
        let op = *page::opaque(tail.page());
        let is_tail = !pg_sys::PageIsNew(tail.page())
            && op.magic == page::PAGE_MAGIC
            && op.kind == PageKind::Delta as u8
            && op.right == NO_BLOCK;
        if !is_tail {
            if hint == 0 {
                page::check_page(rel, tail_blk, tail.page(), &[PageKind::Delta]);
            }
            tail_hint.store(0, AtomicOrdering::Relaxed);
            continue;
        }
        page::check_page(rel, tail_blk, tail.page(), &[PageKind::Delta]);
        tail_hint.store(tail_blk, AtomicOrdering::Relaxed);
        let pos = next_pos_of(tail.page());
        let need = record_len(pos - op.first_pos, key);
        if op.body_len as usize + need <= BODY_CAP {
            let mut rec = Vec::with_capacity(need);
            encode_record(&mut rec, pos - op.first_pos, key, tid);
            super::wal::log_append(rel, tail.buffer(), &rec);
            return pos;
        }
        // Link a new tail page: old tail, new page and metapage in one record.
        let newb = alloc_page(rel);
        let metab = Buf::read(rel, META_BLOCK, Lock::Exclusive);
        let mut m = meta::load(rel, &metab);
        if m.delta_tail != tail_blk {
            continue;
        }
        let mut w = WalRecord::start(rel);
        let tp = w.register(&tail);
        let np = w.register_new(&newb);
        let mp = w.register(&metab);
        init_delta(np, pos);
        page::opaque_mut(np).left = tail_blk;
        page::opaque_mut(tp).right = newb.blkno();
        let got = append_to(np, key, tid);
        m.delta_tail = newb.blkno();
        m.delta_pages += 1;
        meta::store(mp, &m);
        w.finish();
        tail_hint.store(newb.blkno(), AtomicOrdering::Relaxed);
        return got;
    }
}

/// The position the next append will get.
pub unsafe fn end_pos(rel: pg_sys::Relation, tail_blk: u32) -> (u64, u32) {
    let mut blk = tail_blk;
    loop {
        let b = Buf::read(rel, blk, Lock::Share);
        page::check_page(rel, blk, b.page(), &[PageKind::Delta]);
        let op = page::opaque(b.page());
        if op.right == NO_BLOCK {
            return (next_pos_of(b.page()), blk);
        }
        blk = op.right;
    }
}

/// Reads every record with `min_pos <= pos < max_pos` from `start_blk` on.
/// Returns the records, the end position seen and the last block visited.
pub unsafe fn read_from(
    rel: pg_sys::Relation,
    start_blk: u32,
    min_pos: u64,
    max_pos: u64,
) -> (Vec<DeltaRecord>, u64, u32) {
    read_chain(rel, start_blk, min_pos, max_pos, false).expect("a strict chain read raises instead")
}

/// `read_from` for a hot standby's sync: replay may switch a merge's last
/// step and free the chain's first pages while the walk is on them, so a
/// valid pg_hybrid page of another kind on the way is None (the caller
/// reads the metapage again and retries) rather than corruption.
pub unsafe fn read_from_during_replay(
    rel: pg_sys::Relation,
    start_blk: u32,
    min_pos: u64,
    max_pos: u64,
) -> Option<(Vec<DeltaRecord>, u64, u32)> {
    read_chain(rel, start_blk, min_pos, max_pos, true)
}

unsafe fn read_chain(
    rel: pg_sys::Relation,
    start_blk: u32,
    min_pos: u64,
    max_pos: u64,
    moved_ok: bool,
) -> Option<(Vec<DeltaRecord>, u64, u32)> {
    let mut out = Vec::new();
    let mut blk = start_blk;
    let mut end = min_pos;
    let mut last = start_blk;
    while blk != NO_BLOCK {
        let b = Buf::read(rel, blk, Lock::Share);
        let expect: &[PageKind] = if moved_ok { &[] } else { &[PageKind::Delta] };
        if page::check_page(rel, blk, b.page(), expect) != PageKind::Delta {
            return None;
        }
        let op = *page::opaque(b.page());
        let (next_pos, recs) = parse(page::body(b.page()), op.first_pos)
            .unwrap_or_else(|e| page::corrupted(&page::rel_name(rel), blk, e));
        out.extend(recs.into_iter().filter(|r| r.pos >= min_pos && r.pos < max_pos));
        end = end.max(next_pos);
        last = blk;
        if next_pos >= max_pos {
            break;
        }
        blk = op.right;
    }
    Some((out, end, last))
}

/// Blocks of the chain from `head` that lie entirely below `upto` and are
/// not the tail: after a merge to `upto` they hold nothing live.
pub unsafe fn pages_below(rel: pg_sys::Relation, head: u32, upto: u64) -> (Vec<u32>, u32) {
    let mut out = Vec::new();
    let mut blk = head;
    loop {
        let b = Buf::read(rel, blk, Lock::Share);
        page::check_page(rel, blk, b.page(), &[PageKind::Delta]);
        let op = page::opaque(b.page());
        if op.right == NO_BLOCK || next_pos_of(b.page()) > upto {
            return (out, blk);
        }
        out.push(blk);
        blk = op.right;
    }
}

/// VACUUM of one delta page: drops records whose TID is dead or which are
/// already merged. Returns (records removed that were live-stage, records kept).
pub unsafe fn vacuum_page(
    rel: pg_sys::Relation,
    blk: u32,
    merged_upto: u64,
    dead: &mut dyn FnMut(Tid) -> bool,
) -> (u64, u64, u32) {
    let b = Buf::read(rel, blk, Lock::Exclusive);
    page::check_page(rel, blk, b.page(), &[PageKind::Delta]);
    let op = *page::opaque(b.page());
    let (next_pos, recs) = parse(page::body(b.page()), op.first_pos)
        .unwrap_or_else(|e| page::corrupted(&page::rel_name(rel), blk, e));
    let mut removed = 0u64;
    let mut kept = Vec::new();
    let n = recs.len();
    for r in recs {
        if r.pos < merged_upto {
            continue;
        }
        if dead(r.tid) {
            removed += 1;
        } else {
            kept.push(r);
        }
    }
    let nkept = kept.len() as u64;
    if kept.len() != n {
        let mut body = Vec::with_capacity(BODY_CAP);
        body.extend_from_slice(&next_pos.to_le_bytes());
        for r in &kept {
            encode_record(&mut body, r.pos - op.first_pos, &r.key, r.tid);
        }
        let mut w = WalRecord::start(rel);
        let p = w.register(&b);
        page::body_mut(p)[..body.len()].copy_from_slice(&body);
        page::set_body_len(p, body.len());
        w.finish();
    }
    (removed, nkept, op.right)
}
