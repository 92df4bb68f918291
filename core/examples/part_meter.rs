//! Attributes a hasis relation's metered physical bytes (LZ4 per 4 KB,
//! repeated-word blocks free: `csd_meter`) to the parts of its extents:
//! header block, directory, meta, row headers, each column's mini-page
//! (with its encoding), zero units and delta blocks; per row too. A tool
//! for deciding where the layout loses to the drive's compression.
//!
//! Usage (the relation's segment files in order, e.g. from
//! `pg_relation_filepath`, with the server stopped or after a CHECKPOINT;
//! the table's size reloptions must be the defaults):
//!
//!     cargo run --release --example part_meter -- base/DB/REL base/DB/REL.1
use pg_hybrid_core::csd_meter::classify_unit;
use pg_hybrid_core::hasis::column::{ColumnMeta, ColumnPart};
use pg_hybrid_core::hasis::header::ExtentHeader;
use pg_hybrid_core::hasis::layout::{Geometry, Params, BLCKSZ};
use std::collections::BTreeMap;

/// How a column's mini-page holds its values, for the report.
fn encoding(m: &ColumnMeta) -> String {
    match (m.dict, m.packed, m.short_ends, m.decimal) {
        (true, ..) => " dict".into(),
        (_, Some(w), ..) => format!(" packed{w}"),
        (_, _, true, _) => " short-ends".into(),
        (.., Some(f)) => format!(" decimal{}", f.width),
        _ => String::new(),
    }
}

fn main() {
    let mut data = Vec::new();
    for f in std::env::args().skip(1) {
        data.extend(std::fs::read(&f).unwrap());
    }
    let g = Geometry::new(Params::default()).unwrap();
    let eb = g.extent_blocks();
    let nblocks = data.len() / BLCKSZ;
    let blk = |b: usize| &data[b * BLCKSZ..(b + 1) * BLCKSZ];
    let mut acc: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    let mut scratch = Vec::new();
    let mut add = |k: String, unit: &[u8]| {
        let u: &[u8; 4096] = unit.try_into().unwrap();
        let p = classify_unit(u, &mut scratch).physical_bytes();
        let e = acc.entry(k).or_insert((0, 0));
        e.0 += 4096;
        e.1 += p;
    };
    let mut e = 0;
    let mut rows = 0u64;
    loop {
        let start = 1 + e * eb;
        if start + eb > nblocks {
            break;
        }
        let h = ExtentHeader::read(blk(start), &g).unwrap();
        for half in 0..2 {
            add("a header block".into(), &blk(start)[half * 4096..(half + 1) * 4096]);
            add("b directory".into(), &blk(start + 1)[half * 4096..(half + 1) * 4096]);
        }
        let mut owner: Vec<String> = vec!["z zero/unused units".into(); g.column_units()];
        if h.column_units > 0 {
            let blocks: Vec<&[u8]> = (0..g.params.column_blocks as usize).map(|i| blk(start + g.column_block(i))).collect();
            let part = ColumnPart::parse(&g, blocks, h.column_units as usize, h.column_rows as usize, None).unwrap();
            rows += part.nrows() as u64;
            owner[0] = "c meta".into();
            let first_col = part.column_meta(0).map(|m| m.first_unit as usize).unwrap_or(1);
            for u in 1..first_col {
                owner[u] = "d row headers".into();
            }
            for c in 0..part.ncols() {
                let m = part.column_meta(c).unwrap();
                let used = (m.len as usize).div_ceil(4072);
                for u in m.first_unit as usize..(m.first_unit + m.units) as usize {
                    let tag = if u - (m.first_unit as usize) < used { "" } else { " pad" };
                    owner[u] = format!("col{:02}{}{}", c, encoding(m), tag);
                }
            }
        }
        for u in 0..g.column_units() {
            let b = blk(start + g.column_block(u / 2));
            add(owner[u].clone(), &b[(u % 2) * 4096..(u % 2 + 1) * 4096]);
        }
        for d in 0..g.params.delta_blocks as usize {
            let b = blk(start + g.delta_block(d));
            add("y delta".into(), &b[..4096]);
            add("y delta".into(), &b[4096..]);
        }
        e += 1;
    }
    let tot: u64 = acc.values().map(|v| v.1).sum();
    println!("extents {e} rows {rows}; physical total {:.1} MB", tot as f64 / 1e6);
    for (k, (l, p)) in &acc {
        println!("{:28} logical {:9.1} MB physical {:8.1} MB  ratio {:.3}  share {:.3}  bytes/row {:.2}", k, *l as f64 / 1e6, *p as f64 / 1e6, *p as f64 / *l as f64, *p as f64 / tot as f64, *p as f64 / rows as f64);
    }
}
