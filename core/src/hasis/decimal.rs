//! Numeric values as scaled integers, for the column part's decimal
//! encoding (`column`, flag `0x20`).
//!
//! A column part stores values as opaque bytes; a `numeric` value is a
//! varlena of a 1-byte header, a 2-byte "short" header (sign, display scale,
//! weight) and base-10000 digits, 9 to 11 bytes for a TPC-H price. Within
//! one part the values of a `numeric(p, s)` column share their display scale
//! `s`, so each is an integer `x = value * 10^s` and the part can store
//! `x - min` in a few bytes, as it packs integer columns.
//!
//! The encoding is a pure transform of bytes: `parse` accepts a value only
//! when `write` gives back exactly the same bytes, so a value of any type
//! that happens to look like a numeric round-trips too, and nothing here
//! needs to know the column's type (compaction's redo has no catalog).
//!
//! The short format, as PostgreSQL writes it (`numeric.c`, `make_result`):
//!
//! ```text
//! byte 0      varlena 1-byte header: (total length << 1) | 1
//! bytes 1-2   n_header, little-endian:
//!               0x8000        short format (0xC000 masked)
//!               0x2000        negative
//!               0x1F80 >> 7   display scale (0..63)
//!               0x0040        weight is negative
//!               0x003F        weight, 6 bits (-64..63 with the sign bit)
//! bytes 3..   int16 digits, base 10000, most significant first; no
//!             leading or trailing zero digit; zero has no digits, weight 0
//!             and is positive
//! ```

/// The longest value `write` produces: 1 + 2 header bytes and at most 6
/// base-10000 digits (an i64 times 10^3 has at most 22 decimal digits).
pub const MAX_LEN: usize = 3 + 2 * 6;

const SHORT: u16 = 0x8000;
const FORMAT_MASK: u16 = 0xC000;
const SIGN_NEG: u16 = 0x2000;
const DSCALE_MASK: u16 = 0x1F80;
const DSCALE_SHIFT: u32 = 7;
const WEIGHT_SIGN: u16 = 0x0040;
const WEIGHT_MASK: u16 = 0x003F;
/// Largest display scale of the short format.
pub const DSCALE_MAX: u8 = 63;
const NBASE: u128 = 10_000;

/// A numeric value as `scaled / 10^dscale`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Decimal {
    pub dscale: u8,
    pub scaled: i64,
}

/// `v` as a scaled integer, when `v` is a numeric in PostgreSQL's canonical
/// short format whose value times `10^dscale` is an integer that fits an
/// i64, and `write` of the result gives `v` back byte for byte.
pub fn parse(v: &[u8]) -> Option<Decimal> {
    let h = *v.first()?;
    // A 1-byte varlena header (0x01 alone is a TOAST pointer).
    if h & 1 == 0 || h == 1 {
        return None;
    }
    let len = (h >> 1) as usize;
    if len != v.len() || len < 3 || !(len - 3).is_multiple_of(2) {
        return None;
    }
    let n_header = u16::from_le_bytes([v[1], v[2]]);
    if n_header & FORMAT_MASK != SHORT {
        return None;
    }
    let dscale = ((n_header & DSCALE_MASK) >> DSCALE_SHIFT) as i32;
    let weight = if n_header & WEIGHT_SIGN != 0 { (n_header & WEIGHT_MASK) as i32 - 64 } else { (n_header & WEIGHT_MASK) as i32 };
    let mut x: i128 = 0;
    for (i, d) in v[3..].chunks_exact(2).enumerate() {
        let digit = i16::from_le_bytes([d[0], d[1]]);
        if !(0..=9999).contains(&digit) {
            return None;
        }
        if digit == 0 {
            continue;
        }
        // This digit is worth digit * 10000^(weight - i) = digit * 10^p / 10^dscale.
        let p = 4 * (weight - i as i32) + dscale;
        let term = if p >= 0 {
            if p > 24 {
                return None;
            }
            (digit as i128) * 10i128.pow(p as u32)
        } else {
            // Digits below the display scale must be zeros.
            let div = if -p <= 4 { 10i128.pow((-p) as u32) } else { return None };
            if digit as i128 % div != 0 {
                return None;
            }
            digit as i128 / div
        };
        x = x.checked_add(term)?;
        if x > i64::MAX as i128 {
            return None;
        }
    }
    let scaled = if n_header & SIGN_NEG != 0 { -(x as i64) } else { x as i64 };
    let d = Decimal { dscale: dscale as u8, scaled };
    let mut out = [0u8; MAX_LEN];
    let n = write(d, &mut out)?;
    (out[..n] == *v).then_some(d)
}

/// Writes `d` in the canonical short format into `out`; returns its length,
/// or None when the display scale is past the short format's.
pub fn write(d: Decimal, out: &mut [u8; MAX_LEN]) -> Option<usize> {
    if d.dscale > DSCALE_MAX {
        return None;
    }
    // Pad the scale to whole base-10000 digits: value = y / 10000^k.
    let pad = (4 - d.dscale as u32 % 4) % 4;
    let k = (d.dscale as i32 + pad as i32) / 4;
    // Base-10000 digits, least significant first. In u64 when the padded
    // value fits (any value below 1.8e16: divisions by a constant there are
    // multiplications, where u128 ones are library calls), else in u128.
    let mut groups = [0u16; 8];
    let mut n = 0;
    match d.scaled.unsigned_abs().checked_mul(10u64.pow(pad)) {
        Some(mut y) => {
            while y > 0 {
                groups[n] = (y % NBASE as u64) as u16;
                y /= NBASE as u64;
                n += 1;
            }
        }
        None => {
            let mut y = d.scaled.unsigned_abs() as u128 * 10u128.pow(pad);
            while y > 0 {
                groups[n] = (y % NBASE) as u16;
                y /= NBASE;
                n += 1;
            }
        }
    }
    let (neg, weight, digits) = if n == 0 {
        (false, 0, &groups[..0])
    } else {
        let low = groups[..n].iter().position(|&g| g != 0).unwrap_or(0);
        (d.scaled < 0, n as i32 - 1 - k, &groups[low..n])
    };
    if !(-64..=63).contains(&weight) {
        return None;
    }
    let len = 3 + 2 * digits.len();
    out[0] = ((len as u8) << 1) | 1;
    let n_header = SHORT
        | if neg { SIGN_NEG } else { 0 }
        | ((d.dscale as u16) << DSCALE_SHIFT)
        | if weight < 0 { WEIGHT_SIGN } else { 0 }
        | (weight as u16 & WEIGHT_MASK);
    out[1..3].copy_from_slice(&n_header.to_le_bytes());
    for (i, g) in digits.iter().rev().enumerate() {
        out[3 + 2 * i..5 + 2 * i].copy_from_slice(&(*g as i16).to_le_bytes());
    }
    Some(len)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// PostgreSQL's bytes of some values (1-byte varlena header), as
    /// `make_result` forms them.
    fn pg(neg: bool, dscale: u16, weight: i32, digits: &[i16]) -> Vec<u8> {
        let len = 3 + 2 * digits.len();
        let mut v = vec![((len as u8) << 1) | 1];
        let h = 0x8000 | if neg { 0x2000 } else { 0 } | (dscale << 7) | if weight < 0 { 0x40 } else { 0 } | (weight as u16 & 0x3F);
        v.extend_from_slice(&h.to_le_bytes());
        for d in digits {
            v.extend_from_slice(&d.to_le_bytes());
        }
        v
    }

    #[test]
    fn known_values() {
        // 12345.67 at scale 2: digits 1 2345 6700, weight 1.
        assert_eq!(parse(&pg(false, 2, 1, &[1, 2345, 6700])), Some(Decimal { dscale: 2, scaled: 1_234_567 }));
        // -0.05 at scale 2: digit 500, weight -1.
        assert_eq!(parse(&pg(true, 2, -1, &[500])), Some(Decimal { dscale: 2, scaled: -5 }));
        // 0.00: no digits.
        assert_eq!(parse(&pg(false, 2, 0, &[])), Some(Decimal { dscale: 2, scaled: 0 }));
        // 20000 at scale 0: digit 2, weight 1 (trailing zero digit stripped).
        assert_eq!(parse(&pg(false, 0, 1, &[2])), Some(Decimal { dscale: 0, scaled: 20_000 }));
        // 0.000001 at scale 6: weight -2, digit 100.
        assert_eq!(parse(&pg(false, 6, -2, &[100])), Some(Decimal { dscale: 6, scaled: 1 }));
    }

    #[test]
    fn rejects_what_does_not_round_trip() {
        // Negative zero, a trailing zero digit, a leading zero digit.
        assert_eq!(parse(&pg(true, 2, 0, &[])), None);
        assert_eq!(parse(&pg(false, 2, 0, &[5, 0])), None);
        assert_eq!(parse(&pg(false, 2, 1, &[0, 5])), None);
        // A digit past the display scale (1.23 shown at scale 1).
        assert_eq!(parse(&pg(false, 1, 0, &[1, 2300])), None);
        // A digit out of range, NaN, a long-format header, a 4-byte varlena header.
        assert_eq!(parse(&pg(false, 2, 0, &[10000])), None);
        assert_eq!(parse(&[7, 0x00, 0xC0]), None);
        assert_eq!(parse(&[7, 0x02, 0x00]), None);
        assert_eq!(parse(&[28, 0, 0, 0, 0x00, 0x81]), None);
        // Text that is not a numeric; a length that disagrees.
        assert_eq!(parse(b"\x0bhello"), None);
        let mut v = pg(false, 2, 1, &[1, 2345]);
        v.push(0);
        assert_eq!(parse(&v), None);
        assert_eq!(parse(&[]), None);
        assert_eq!(parse(&[1]), None);
    }

    #[test]
    fn extremes_round_trip() {
        for &scaled in &[i64::MAX, i64::MIN + 1, 1, -1, 9999, 10_000, 99_999_999] {
            for dscale in [0u8, 1, 2, 3, 4, 5, 7, 8, 17, 40, 63] {
                let d = Decimal { dscale, scaled };
                let mut out = [0u8; MAX_LEN];
                let n = write(d, &mut out).unwrap();
                assert_eq!(parse(&out[..n]), Some(d), "{d:?}");
            }
        }
        // i64::MIN has no positive counterpart: not a value parse accepts.
        let mut out = [0u8; MAX_LEN];
        let n = write(Decimal { dscale: 0, scaled: i64::MIN }, &mut out).unwrap();
        assert_eq!(parse(&out[..n]), None);
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2000))]

        /// Every scaled integer round-trips through its bytes.
        #[test]
        fn write_then_parse(scaled in (i64::MIN + 1)..=i64::MAX, dscale in 0u8..=63) {
            let d = Decimal { dscale, scaled };
            let mut out = [0u8; MAX_LEN];
            let n = write(d, &mut out).unwrap();
            proptest::prop_assert_eq!(parse(&out[..n]), Some(d));
        }

        /// Any bytes parse to nothing or to a value that writes them back.
        #[test]
        fn parse_is_exact(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..16)) {
            if let Some(d) = parse(&bytes) {
                let mut out = [0u8; MAX_LEN];
                let n = write(d, &mut out).unwrap();
                proptest::prop_assert_eq!(&out[..n], &bytes[..]);
            }
        }
    }
}
