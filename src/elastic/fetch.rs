//! Reading an entry's key from the heap, for compact leaves, which store no
//! keys (core/src/elastic/README.md, "The pruned-key rule").
//!
//! The fetch ignores visibility: any tuple version reachable from the TID
//! (the root line pointer, or the tuple a HOT redirect points at) carries the
//! indexed key, since HOT never changes indexed columns. A line pointer that
//! is dead or unused means the tuple was pruned: the entry is dead for every
//! snapshot, and the fetch says so.

use std::rc::Rc;

use pg_hybrid_core::elastic::KeyFetcher;
use pg_hybrid_core::tid::Tid;
use pgrx::pg_sys;
use pgrx::prelude::*;

use crate::keys::IndexDesc;

thread_local! {
    /// Last size seen of each heap (by relfilenode), so a probe does not pay
    /// smgrnblocks' system call.
    static HEAP_BLOCKS: std::cell::RefCell<std::collections::HashMap<u32, u32>> = std::cell::RefCell::new(std::collections::HashMap::new());
}

const LP_NORMAL: u32 = 1;
const LP_REDIRECT: u32 = 2;

pub struct HeapFetcher {
    heap: pg_sys::Relation,
    desc: Rc<IndexDesc>,
    /// Heap attribute number of each index column.
    attnums: Vec<usize>,
    heap_natts: usize,
    values: Vec<pg_sys::Datum>,
    nulls: Vec<bool>,
    /// The index columns' datums, gathered from `values` (reused per fetch).
    key_values: Vec<pg_sys::Datum>,
    key_nulls: Vec<bool>,
    cxt: pg_sys::MemoryContext,
    /// The last key read, so the candidate a search fetched is not read
    /// again by the scan that returns it.
    last: Option<(Tid, bool, Vec<u8>)>,
    /// Heap blocks when last looked (smgrnblocks is a system call).
    heap_blocks: u32,
    pub fetches: u64,
}

/// Raises the ERROR for an index elastic_btree cannot key-fetch: an
/// expression column.
pub unsafe fn check_fetchable(index: pg_sys::Relation) {
    let ind = (*index).rd_index;
    // Keys are read straight from heap pages by TID; another table access
    // method's pages (hasis's hybrid pages) are not heap pages.
    let table = pg_sys::RelationIdGetRelation((*ind).indrelid);
    let table_am = (*(*table).rd_rel).relam;
    pg_sys::RelationClose(table);
    if table_am != pg_sys::HEAP_TABLE_AM_OID {
        crate::raise(
            PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED,
            format!("elastic_btree index \"{}\" needs a heap table", crate::storage::page::rel_name(index)),
            "Compact leaves read keys back from heap pages by TID. Use hybrid_btree or btree on tables of other access methods.",
        );
    }
    for i in 0..(*ind).indnatts as usize {
        if *(*ind).indkey.values.as_ptr().add(i) == 0 {
            crate::raise(
                PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED,
                format!("elastic_btree index \"{}\" cannot index expressions", crate::storage::page::rel_name(index)),
                "Compact leaves read keys back from the heap, which needs plain columns. Index the columns themselves, or use hybrid_btree.",
            );
        }
    }
}

impl HeapFetcher {
    pub unsafe fn open(index: pg_sys::Relation, desc: Rc<IndexDesc>) -> HeapFetcher {
        let heap_oid = (*(*index).rd_index).indrelid;
        let heap = pg_sys::relation_open(heap_oid, pg_sys::AccessShareLock as i32);
        let ind = (*index).rd_index;
        let attnums = (0..(*ind).indnatts as usize).map(|i| *(*ind).indkey.values.as_ptr().add(i) as usize).collect::<Vec<_>>();
        let heap_natts = (*(*heap).rd_att).natts as usize;
        let cxt = pg_sys::AllocSetContextCreateExtended(
            pg_sys::CurrentMemoryContext,
            c"elastic_btree key fetch".as_ptr(),
            pg_sys::ALLOCSET_SMALL_MINSIZE as usize,
            pg_sys::ALLOCSET_SMALL_INITSIZE as usize,
            pg_sys::ALLOCSET_SMALL_MAXSIZE as usize,
        );
        HeapFetcher {
            heap,
            desc,
            attnums,
            heap_natts,
            values: vec![pg_sys::Datum::from(0usize); heap_natts],
            nulls: vec![true; heap_natts],
            key_values: Vec::new(),
            key_nulls: Vec::new(),
            cxt,
            last: None,
            heap_blocks: HEAP_BLOCKS.with(|m| m.borrow().get(&(*heap).rd_node.relNode.to_u32()).copied().unwrap_or(0)),
            fetches: 0,
        }
    }

    unsafe fn read(&mut self, tid: Tid, out: &mut Vec<u8>) -> bool {
        // The heap only grows while index entries point into it (VACUUM
        // removes them before truncating), so the size is looked up again
        // only when a TID is past the last size seen.
        if tid.block >= self.heap_blocks {
            self.heap_blocks = pg_sys::RelationGetNumberOfBlocksInFork(self.heap, pg_sys::ForkNumber::MAIN_FORKNUM);
            let (node, n) = ((*self.heap).rd_node.relNode.to_u32(), self.heap_blocks);
            HEAP_BLOCKS.with(|m| m.borrow_mut().insert(node, n));
        }
        if tid.offset == 0 || tid.block >= self.heap_blocks {
            return false;
        }
        let buf = pg_sys::ReadBufferExtended(self.heap, pg_sys::ForkNumber::MAIN_FORKNUM, tid.block, pg_sys::ReadBufferMode::RBM_NORMAL, std::ptr::null_mut());
        pg_sys::LockBuffer(buf, pg_sys::BUFFER_LOCK_SHARE as i32);
        let found = self.read_locked(buf, tid, out);
        pg_sys::UnlockReleaseBuffer(buf);
        pg_sys::MemoryContextReset(self.cxt);
        found
    }

    unsafe fn read_locked(&mut self, buf: pg_sys::Buffer, tid: Tid, out: &mut Vec<u8>) -> bool {
        let page = pg_sys::BufferGetPage(buf);
        let hdr = page as *const pg_sys::PageHeaderData;
        let hdr_size = std::mem::offset_of!(pg_sys::PageHeaderData, pd_linp);
        if pg_sys::PageIsNew(page) || ((*hdr).pd_lower as usize) < hdr_size {
            return false;
        }
        let maxoff = ((*hdr).pd_lower as usize - hdr_size) / std::mem::size_of::<pg_sys::ItemIdData>();
        let item = |off: usize| -> Option<&pg_sys::ItemIdData> {
            if off == 0 || off > maxoff {
                None
            } else {
                Some(&*(*hdr).pd_linp.as_ptr().add(off - 1))
            }
        };
        let mut off = tid.offset as usize;
        let Some(mut lp) = item(off) else { return false };
        // A redirect leads to the HOT chain's first live member (redirects
        // never chain).
        if lp.lp_flags() == LP_REDIRECT {
            off = lp.lp_off() as usize;
            match item(off) {
                Some(l) => lp = l,
                None => return false,
            }
        }
        if lp.lp_flags() != LP_NORMAL {
            return false; // pruned
        }
        // The entry's key is that of the chain's last member: CREATE INDEX
        // indexes the live version of a HOT chain under the root's TID, and
        // earlier versions may have other keys ("broken" chains); HOT
        // updates made since the index exists never change its columns.
        let mut th = (page as *mut u8).add(lp.lp_off() as usize) as pg_sys::HeapTupleHeader;
        let mut len = lp.lp_len();
        for _ in 0..maxoff {
            if ((*th).t_infomask2 as u32) & pg_sys::HEAP_HOT_UPDATED == 0 {
                break;
            }
            let next = &(*th).t_ctid;
            let next_blk = ((next.ip_blkid.bi_hi as u32) << 16) | next.ip_blkid.bi_lo as u32;
            if next_blk != tid.block {
                break;
            }
            let Some(nlp) = item(next.ip_posid as usize) else { break };
            if nlp.lp_flags() != LP_NORMAL {
                break;
            }
            let nth = (page as *mut u8).add(nlp.lp_off() as usize) as pg_sys::HeapTupleHeader;
            // The successor must be the version this one was updated to (a
            // pruned, aborted successor's slot may hold another tuple).
            let prev_xmax = if ((*th).t_infomask as u32) & pg_sys::HEAP_XMAX_IS_MULTI != 0 {
                pg_sys::HeapTupleGetUpdateXid(th)
            } else {
                (*th).t_choice.t_heap.t_xmax
            };
            if ((*nth).t_infomask2 as u32) & pg_sys::HEAP_ONLY_TUPLE == 0 || (*nth).t_choice.t_heap.t_xmin != prev_xmax {
                break;
            }
            th = nth;
            len = nlp.lp_len();
        }
        let mut tup: pg_sys::HeapTupleData = std::mem::zeroed();
        tup.t_data = th;
        tup.t_len = len;
        tup.t_tableOid = (*self.heap).rd_id;
        let old = pg_sys::MemoryContextSwitchTo(self.cxt);
        pg_sys::heap_deform_tuple(&mut tup, (*self.heap).rd_att, self.values.as_mut_ptr(), self.nulls.as_mut_ptr());
        let (mut vals, mut nulls) = (std::mem::take(&mut self.key_values), std::mem::take(&mut self.key_nulls));
        vals.clear();
        nulls.clear();
        for &a in &self.attnums {
            if a == 0 || a > self.heap_natts {
                pg_sys::MemoryContextSwitchTo(old);
                return false;
            }
            if a > ((*th).t_infomask2 as u32 & pg_sys::HEAP_NATTS_MASK) as usize {
                // Added by ALTER TABLE after this tuple was written: its
                // value is the column's missing-value default.
                let mut isnull = false;
                vals.push(pg_sys::getmissingattr((*self.heap).rd_att, a as i32, &mut isnull));
                nulls.push(isnull);
                continue;
            }
            vals.push(self.values[a - 1]);
            nulls.push(self.nulls[a - 1]);
        }
        // Detoasting an out-of-line value reads the TOAST table, which
        // needs a snapshot; a merge worker holds none (engine/worker.rs).
        let tupdesc = (*self.heap).rd_att;
        let external = self.attnums.iter().zip(vals.iter().zip(&nulls)).any(|(&a, (&v, &null))| {
            !null && (*(*tupdesc).attrs.as_ptr().add(a - 1)).attlen == -1 && is_external(v)
        });
        let pushed = external && !pg_sys::ActiveSnapshotSet();
        if pushed {
            pg_sys::PushActiveSnapshot(pg_sys::GetLatestSnapshot());
        }
        self.desc.encode_tuple(vals.as_ptr(), nulls.as_ptr(), out);
        if pushed {
            pg_sys::PopActiveSnapshot();
        }
        (self.key_values, self.key_nulls) = (vals, nulls);
        pg_sys::MemoryContextSwitchTo(old);
        true
    }
}

impl KeyFetcher for HeapFetcher {
    fn fetch(&mut self, tid: Tid, out: &mut Vec<u8>) -> bool {
        if let Some((t, found, k)) = &self.last {
            if *t == tid {
                out.clear();
                out.extend_from_slice(k);
                return *found;
            }
        }
        out.clear();
        self.fetches += 1;
        let found = unsafe { self.read(tid, out) };
        match &mut self.last {
            Some((t, f, k)) => {
                *t = tid;
                *f = found;
                k.clear();
                k.extend_from_slice(out);
            }
            None => self.last = Some((tid, found, out.clone())),
        }
        found
    }
}

impl Drop for HeapFetcher {
    fn drop(&mut self) {
        if std::thread::panicking() {
            return;
        }
        unsafe {
            pg_sys::MemoryContextDelete(self.cxt);
            pg_sys::relation_close(self.heap, pg_sys::AccessShareLock as i32);
        }
    }
}

/// Whether a varlena datum is a pointer to an out-of-line (TOAST) value:
/// a 1-byte header of 0x01 (PostgreSQL's VARATT_IS_EXTERNAL on
/// little-endian machines, the only kind Debian's amd64 server is).
unsafe fn is_external(d: pg_sys::Datum) -> bool {
    *(d.cast_mut_ptr::<u8>()) == 0x01
}
