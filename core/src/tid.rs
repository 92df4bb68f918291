//! Heap tuple identifiers, as PostgreSQL's ItemPointerData but plain Rust.

/// A heap TID: block number and 1-based line pointer offset.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Tid {
    pub block: u32,
    pub offset: u16,
}

impl Tid {
    pub const fn new(block: u32, offset: u16) -> Self {
        Tid { block, offset }
    }
    /// Packs into 48 bits preserving order.
    pub const fn to_u64(self) -> u64 {
        ((self.block as u64) << 16) | self.offset as u64
    }
    pub const fn from_u64(v: u64) -> Self {
        Tid { block: (v >> 16) as u32, offset: (v & 0xffff) as u16 }
    }
}
