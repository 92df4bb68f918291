//! Pages, buffers and WAL shared by every pg_hybrid access method.
//!
//! Every page pg_hybrid writes carries a [`page::PageOpaque`] in its special
//! area with a magic number and a format version; every read goes through
//! [`page::check_page`], so a foreign or corrupt page is an ERROR with
//! `ERRCODE_INDEX_CORRUPTED`, never undefined behaviour.

pub mod alloc;
pub mod buffer;
pub mod meter;
pub mod page;
pub mod pgstat;
pub mod wal;
