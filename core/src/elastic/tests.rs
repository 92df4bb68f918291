//! Key-bit tests and the elastic tree against a BTreeMap oracle.

use super::*;
use proptest::prelude::*;

proptest! {
    /// The nine-bit reading orders keys exactly as bytes_cmp does, and the
    /// discriminating bit is where they first differ, 0 in the smaller.
    #[test]
    fn disc_bit_agrees_with_bytes_cmp(a in proptest::collection::vec(prop_oneof![Just(0u8), Just(0xff), any::<u8>()], 0..20), b in proptest::collection::vec(prop_oneof![Just(0u8), Just(0xff), any::<u8>()], 0..20), share in 0usize..20) {
        let mut b = b;
        let s = share.min(a.len());
        b.splice(0..0, a[..s].iter().copied());
        let d = disc_bit(&a, &b);
        prop_assert_eq!(d, disc_bit(&b, &a));
        match bytes_cmp(&a, &b) {
            Ordering::Equal => prop_assert_eq!(d, DUP),
            o => {
                prop_assert!(d != DUP);
                for p in 0..d { prop_assert_eq!(key_bit(&a, p), key_bit(&b, p)); }
                let (lo, hi) = if o == Ordering::Less { (&a, &b) } else { (&b, &a) };
                prop_assert_eq!(key_bit(lo, d), 0);
                prop_assert_eq!(key_bit(hi, d), 1);
            }
        }
    }
}
