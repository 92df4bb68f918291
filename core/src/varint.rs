//! LEB128 unsigned varints: 7 bits per byte, high bit set on all but the last.

/// Appends `v` to `out`; returns the number of bytes written.
pub fn put_u64(out: &mut Vec<u8>, mut v: u64) -> usize {
    let start = out.len();
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
    out.len() - start
}

/// Bytes `put_u64` would write for `v`.
pub fn len_u64(v: u64) -> usize {
    let bits = 64 - (v | 1).leading_zeros() as usize;
    bits.div_ceil(7)
}

/// Bytes a fixed-width field needs to hold `v` (at least one): what a
/// coding that gives up varints for a fixed width per value pays.
pub fn fixed_len(v: u128) -> usize {
    ((128 - v.leading_zeros()) as usize).div_ceil(8).max(1)
}

/// Decodes a varint at the start of `buf`: (value, bytes consumed), or None if
/// the buffer ends inside the varint or it is longer than 10 bytes.
pub fn get_u64(buf: &[u8]) -> Option<(u64, usize)> {
    let mut v: u64 = 0;
    for (i, &b) in buf.iter().enumerate().take(10) {
        v |= ((b & 0x7f) as u64) << (7 * i);
        if b & 0x80 == 0 {
            return Some((v, i + 1));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn roundtrip(v in any::<u64>()) {
            let mut out = Vec::new();
            let n = put_u64(&mut out, v);
            prop_assert_eq!(n, out.len());
            prop_assert_eq!(n, len_u64(v));
            prop_assert_eq!(get_u64(&out), Some((v, n)));
        }
    }

    #[test]
    fn truncated() {
        assert_eq!(get_u64(&[0x80]), None);
        assert_eq!(get_u64(&[]), None);
    }
}
