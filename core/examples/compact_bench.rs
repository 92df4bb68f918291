//! Times major compaction on real extents, without a server: every extent
//! of a hasis relation that has a delta part is planned, applied and
//! encoded as the background worker would, with every version visible to
//! all (moved into the column part) except HOT-updated ones (removed),
//! as if the removal horizon had passed them all. Prints the time per
//! extent of each phase (best of the repetitions), so a change to the
//! compaction code can be judged on the same pages, free of the noise of a
//! running benchmark.
//!
//! Usage (the relation's segment files in order, e.g. from
//! `pg_relation_filepath`, after a CHECKPOINT;
//! the columns as `int4`, `int8` or `var` (any varlena), in table order;
//! pgbench_accounts is the default):
//!
//!     cargo run --release --example compact_bench -- [--columns int4,int4,int4,var] [--repeat 5] base/DB/REL
use pg_hybrid_core::hasis::compact::{apply, plan_with_sources, Oracle, Placement};
use pg_hybrid_core::hasis::header::ExtentHeader;
use pg_hybrid_core::hasis::hot::ChainLink;
use pg_hybrid_core::hasis::layout::{Geometry, Params, BLCKSZ};
use pg_hybrid_core::hasis::row::{ColumnDesc, MinMaxOrder, Mvcc, Schema};
use pg_hybrid_core::hasis::HybridPage;
use std::time::{Duration, Instant};

/// heap's infomask bits the oracle reads.
const HEAP_XMAX_INVALID: u16 = 0x0800;
const HEAP_HOT_UPDATED: u16 = 0x4000;
const HEAP_ONLY_TUPLE: u16 = 0x8000;

/// Versions whose updater is set go (dead to all), the others move into
/// the column part; chain links from heap's HOT bits.
struct EverythingSettled {
    g: Geometry,
    first: u32,
}

impl Oracle for EverythingSettled {
    fn decide(&mut self, _slot: u16, m: &mut Mvcc) -> Placement {
        if m.infomask & HEAP_XMAX_INVALID == 0 && m.xmax != 0 {
            Placement::Remove
        } else {
            Placement::Column
        }
    }
    fn link(&mut self, _slot: u16, m: &Mvcc) -> ChainLink {
        let updated = m.infomask2 & HEAP_HOT_UPDATED != 0 && m.infomask & HEAP_XMAX_INVALID == 0 && m.xmax != 0;
        let next = if updated { self.g.slot(self.first, m.ctid).ok() } else { None };
        ChainLink { heap_only: m.infomask2 & HEAP_ONLY_TUPLE != 0, next, xmin: m.xmin, updater: m.xmax }
    }
}

#[derive(Default, Clone, Copy)]
struct Phases {
    open: Duration,
    plan: Duration,
    apply: Duration,
    encode: Duration,
}

fn main() {
    let mut files = Vec::new();
    let mut columns = "int4,int4,int4,var".to_string();
    let mut repeat = 5;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--columns" => columns = args.next().expect("--columns LIST"),
            "--repeat" => repeat = args.next().expect("--repeat N").parse().expect("a number"),
            _ => files.push(a),
        }
    }
    let descs = columns
        .split(',')
        .map(|c| match c {
            "int4" => ColumnDesc::fixed(4, MinMaxOrder::SignedInt),
            "int8" => ColumnDesc::fixed(8, MinMaxOrder::SignedInt),
            "var" => ColumnDesc::varlena(),
            other => panic!("unknown column kind {other} (int4, int8, var)"),
        })
        .collect();
    let schema = Schema::new(descs).unwrap();
    let mut data = Vec::new();
    for f in &files {
        data.extend(std::fs::read(f).unwrap());
    }
    // The size reloptions, from the first extent's header block (README
    // "Header block").
    let rd = |at: usize| u16::from_le_bytes([data[BLCKSZ + at], data[BLCKSZ + at + 1]]);
    let params = Params { column_blocks: rd(24), delta_blocks: rd(26), max_slots: rd(30), compact_trigger: rd(32) };
    let g = Geometry::new(params).unwrap();
    let eb = g.extent_blocks();
    let nblocks = data.len() / BLCKSZ;
    let mut extents = Vec::new();
    let mut e = 0;
    while 1 + e * eb + eb <= nblocks {
        let start = 1 + e * eb;
        let blocks: Vec<&[u8]> = (0..eb).map(|b| &data[(start + b) * BLCKSZ..(start + b + 1) * BLCKSZ]).collect();
        let h = ExtentHeader::read(blocks[0], &g);
        if h.is_ok_and(|h| h.delta_used > 0) {
            extents.push((start as u32, blocks));
        }
        e += 1;
    }
    assert!(!extents.is_empty(), "no extent with a delta part");
    let mut best: Option<Phases> = None;
    let mut total = 0usize;
    for _ in 0..repeat {
        let mut p = Phases::default();
        for (first, blocks) in &extents {
            let t = Instant::now();
            let page = HybridPage::open(&g, &schema, blocks).unwrap();
            p.open += t.elapsed();
            let t = Instant::now();
            let planned = plan_with_sources(page, &schema, &mut EverythingSettled { g, first: *first }).unwrap();
            p.plan += t.elapsed();
            let t = Instant::now();
            let out = apply(&g, &planned.record).unwrap();
            p.apply += t.elapsed();
            let t = Instant::now();
            let body = planned.record.encode(true).unwrap();
            p.encode += t.elapsed();
            total += out.column_rows as usize + body.len() % 2;
        }
        let sum = |x: &Phases| x.open + x.plan + x.apply + x.encode;
        if best.is_none_or(|b| sum(&p) < sum(&b)) {
            best = Some(p);
        }
    }
    let b = best.unwrap();
    let n = extents.len() as f64;
    let us = |d: Duration| d.as_secs_f64() * 1e6 / n;
    println!(
        "{} extents, per extent (best of {}): open {:.0} us, plan {:.0} us, apply {:.0} us, encode {:.0} us, total {:.0} us ({} rows)",
        extents.len(),
        repeat,
        us(b.open),
        us(b.plan),
        us(b.apply),
        us(b.encode),
        us(b.open + b.plan + b.apply + b.encode),
        total / repeat
    );
}
