//! CREATE INDEX's sort within a memory bound (maintenance_work_mem), as
//! PostgreSQL's tuplesort does for btree: entries gather in memory; when
//! they outgrow the bound they are sorted and written out as a *run* to a
//! spill file, and at the end the runs are merged in one pass (a binary
//! heap over the runs' next entries), each run read back through a buffer
//! of its own. An input that fits is sorted in memory and never touches
//! the file.
//!
//! Entries sort by key (the index's comparator), then TID, the order every
//! base structure's build takes. Each carries whether its heap tuple is
//! live, for the unique check.
//!
//! When the comparator is byte order (`byte_ordered`), every entry also
//! carries its key's first eight bytes as one number (`keys::key_head`),
//! PostgreSQL's abbreviated keys: the sort and the merge of runs compare
//! those in place and ask the comparator only where they are equal. A
//! comparison that followed each entry to its key's bytes was half of a
//! CREATE INDEX of 5M int8 keys.
//!
//! A run record is `key length (u32 LE) | key | block (u32 LE) | offset
//! (u16 LE) | alive (u8)`.

use std::cmp::Ordering;

use crate::keys::key_head;
use crate::tid::Tid;

/// Where runs go once the entries outgrow memory: an append-only byte
/// file read back at positions it reported (PostgreSQL's BufFile in the
/// extension, whose positions are (segment, offset) pairs; a `Vec<u8>` in
/// tests). Every append comes before the first read.
pub trait SpillFile {
    type Pos: Copy;
    /// The position the next append writes at.
    fn tell(&mut self) -> Self::Pos;
    fn append(&mut self, bytes: &[u8]);
    /// Reads up to `buf.len()` bytes at `pos`; returns how many it read
    /// (fewer only at the end of the file) and the position after them.
    fn read_at(&mut self, pos: Self::Pos, buf: &mut [u8]) -> (usize, Self::Pos);
}

impl SpillFile for Vec<u8> {
    type Pos = usize;
    fn tell(&mut self) -> usize {
        self.len()
    }
    fn append(&mut self, bytes: &[u8]) {
        self.extend_from_slice(bytes);
    }
    fn read_at(&mut self, pos: usize, buf: &mut [u8]) -> (usize, usize) {
        let n = buf.len().min(self.len().saturating_sub(pos));
        buf[..n].copy_from_slice(&self[pos..pos + n]);
        (n, pos + n)
    }
}

/// One entry of the build, in sorted order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SortedEntry {
    pub key: Vec<u8>,
    pub tid: Tid,
    /// The heap tuple is live (not just recently dead): only live tuples
    /// conflict in a unique build.
    pub alive: bool,
}

/// An entry held in memory: where its key is in the key bytes.
#[derive(Clone, Copy)]
struct Item {
    /// `key_head` of the key when the sorter is byte-ordered, else 0.
    abbrev: u64,
    key_off: usize,
    key_len: u32,
    tid: Tid,
    alive: bool,
}

/// Memory an entry costs besides its key bytes.
const ITEM_BYTES: usize = std::mem::size_of::<Item>();
/// Bytes of a run record besides its key.
const RECORD_FIXED: usize = 4 + 4 + 2 + 1;
/// Bounds of a run's read buffer: the memory bound shared among the runs,
/// but never below one page nor above what a read needs to be efficient.
const MIN_READ_BUFFER: usize = 8192;
const MAX_READ_BUFFER: usize = 256 * 1024;
/// Bytes written to the file at a time while a run is written.
const WRITE_CHUNK: usize = 64 * 1024;

/// A run in the file: where it starts and how many bytes it holds.
struct RunExtent<P> {
    start: P,
    bytes: u64,
}

/// Gathers entries, spilling sorted runs once they outgrow `mem_limit`.
pub struct BuildSorter<F: SpillFile, C: FnMut(&[u8], &[u8]) -> Ordering> {
    cmp: C,
    /// The comparator is byte order: items carry abbreviated keys.
    byte_ordered: bool,
    mem_limit: usize,
    keys: Vec<u8>,
    items: Vec<Item>,
    file: Option<F>,
    runs: Vec<RunExtent<F::Pos>>,
    count: u64,
}

impl<F: SpillFile, C: FnMut(&[u8], &[u8]) -> Ordering> BuildSorter<F, C> {
    /// `mem_limit`: bytes of keys plus per-entry bookkeeping held before a
    /// run is written (at least one entry is always held).
    pub fn new(mem_limit: usize, cmp: C) -> Self {
        BuildSorter { cmp, byte_ordered: false, mem_limit, keys: Vec::new(), items: Vec::new(), file: None, runs: Vec::new(), count: 0 }
    }

    /// Declares the comparator to be byte order (`memcmp`, an index whose
    /// keys are all order-preserving encodings): entries then sort on
    /// abbreviated keys first (module comment). Call before the first
    /// `push`.
    pub fn byte_ordered(mut self) -> Self {
        assert!(self.count == 0, "byte_ordered after entries were pushed");
        self.byte_ordered = true;
        self
    }

    fn abbrev(&self, key: &[u8]) -> u64 {
        if self.byte_ordered {
            key_head(key)
        } else {
            0
        }
    }

    /// Adds one entry; when memory is full, the entries held are written
    /// to the file (`open` creates it the first time) as one sorted run.
    pub fn push(&mut self, key: &[u8], tid: Tid, alive: bool, open: impl FnOnce() -> F) {
        let held = self.keys.len() + self.items.len() * ITEM_BYTES;
        if !self.items.is_empty() && held + key.len() + ITEM_BYTES > self.mem_limit {
            if self.file.is_none() {
                self.file = Some(open());
            }
            self.spill();
        }
        let key_off = self.keys.len();
        self.keys.extend_from_slice(key);
        self.items.push(Item { abbrev: self.abbrev(key), key_off, key_len: key.len() as u32, tid, alive });
        self.count += 1;
    }

    /// Entries pushed so far.
    pub fn len(&self) -> u64 {
        self.count
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Runs written to the file so far (0 while everything fits).
    pub fn runs(&self) -> usize {
        self.runs.len()
    }

    fn sort_items(&mut self) {
        let keys = &self.keys;
        let cmp = &mut self.cmp;
        self.items.sort_unstable_by(|a, b| {
            a.abbrev
                .cmp(&b.abbrev)
                .then_with(|| cmp(&keys[a.key_off..a.key_off + a.key_len as usize], &keys[b.key_off..b.key_off + b.key_len as usize]))
                .then(a.tid.cmp(&b.tid))
        });
    }

    /// Writes the entries held as one sorted run, and forgets them.
    fn spill(&mut self) {
        self.sort_items();
        let file = self.file.as_mut().expect("a run is written only once the spill file exists");
        let start = file.tell();
        let mut chunk: Vec<u8> = Vec::with_capacity(WRITE_CHUNK);
        let mut bytes = 0u64;
        for it in &self.items {
            let key = &self.keys[it.key_off..it.key_off + it.key_len as usize];
            chunk.extend_from_slice(&it.key_len.to_le_bytes());
            chunk.extend_from_slice(key);
            chunk.extend_from_slice(&it.tid.block.to_le_bytes());
            chunk.extend_from_slice(&it.tid.offset.to_le_bytes());
            chunk.push(it.alive as u8);
            if chunk.len() >= WRITE_CHUNK {
                file.append(&chunk);
                bytes += chunk.len() as u64;
                chunk.clear();
            }
        }
        if !chunk.is_empty() {
            file.append(&chunk);
            bytes += chunk.len() as u64;
        }
        self.runs.push(RunExtent { start, bytes });
        self.keys.clear();
        self.items.clear();
    }

    /// Every entry in order: from memory when no run was written, else the
    /// entries still held become the last run and all runs are merged.
    pub fn finish(mut self) -> SortedStream<F, C> {
        if self.runs.is_empty() {
            self.sort_items();
            return SortedStream { source: Source::Memory { keys: self.keys, items: self.items.into_iter() }, cmp: self.cmp, left: self.count };
        }
        if !self.items.is_empty() {
            self.spill();
        }
        self.keys = Vec::new();
        self.items = Vec::new();
        let mut file = self.file.take().expect("runs were written to a file");
        let buffer = (self.mem_limit / self.runs.len()).clamp(MIN_READ_BUFFER, MAX_READ_BUFFER);
        let byte_ordered = self.byte_ordered;
        let mut readers: Vec<RunReader<F::Pos>> = self.runs.iter().map(|r| RunReader::new(r, buffer, byte_ordered)).collect();
        for r in readers.iter_mut() {
            r.advance(&mut file);
        }
        let mut heap: Vec<usize> = (0..readers.len()).filter(|&i| readers[i].head.is_some()).collect();
        let mut cmp = self.cmp;
        // Heapify: a min-heap of run numbers by their next entries.
        for i in (0..heap.len() / 2).rev() {
            sift_down(&mut heap, i, &readers, &mut cmp);
        }
        SortedStream { source: Source::Runs { file, readers, heap }, cmp, left: self.count }
    }
}

/// Reads one run back, a buffer at a time.
struct RunReader<P> {
    pos: P,
    /// Bytes of the run not yet read into the buffer.
    unread: u64,
    buf: Vec<u8>,
    /// buf[at..filled] is read but not yet decoded.
    at: usize,
    filled: usize,
    /// The run's next entry, and its abbreviated key (0 unless the
    /// sorter is byte-ordered).
    head: Option<SortedEntry>,
    abbrev: u64,
    byte_ordered: bool,
}

impl<P: Copy> RunReader<P> {
    fn new(run: &RunExtent<P>, buffer: usize, byte_ordered: bool) -> Self {
        RunReader { pos: run.start, unread: run.bytes, buf: vec![0; buffer], at: 0, filled: 0, head: None, abbrev: 0, byte_ordered }
    }

    /// Makes at least `need` bytes available at `at` (false: the run ends
    /// before).
    fn have<F: SpillFile<Pos = P>>(&mut self, need: usize, file: &mut F) -> bool {
        if self.filled - self.at >= need {
            return true;
        }
        self.buf.copy_within(self.at..self.filled, 0);
        self.filled -= self.at;
        self.at = 0;
        if self.buf.len() < need {
            // A record longer than the buffer.
            self.buf.resize(need, 0);
        }
        while self.filled < need && self.unread > 0 {
            let want = (self.buf.len() - self.filled).min(self.unread.min(usize::MAX as u64) as usize);
            let (n, next) = file.read_at(self.pos, &mut self.buf[self.filled..self.filled + want]);
            assert!(n > 0, "spill file ended inside a run");
            self.pos = next;
            self.unread -= n as u64;
            self.filled += n;
        }
        self.filled - self.at >= need
    }

    /// Decodes the run's next entry into `head` (None at its end).
    fn advance<F: SpillFile<Pos = P>>(&mut self, file: &mut F) {
        self.head = None;
        if !self.have(4, file) {
            assert!(self.filled == self.at, "spill file run ends inside a record");
            return;
        }
        let key_len = u32::from_le_bytes(self.buf[self.at..self.at + 4].try_into().unwrap()) as usize;
        assert!(self.have(4 + key_len + RECORD_FIXED - 4, file), "spill file run ends inside a record");
        let r = &self.buf[self.at + 4..self.at + 4 + key_len + RECORD_FIXED - 4];
        let key = r[..key_len].to_vec();
        let t = &r[key_len..];
        let tid = Tid::new(u32::from_le_bytes(t[0..4].try_into().unwrap()), u16::from_le_bytes(t[4..6].try_into().unwrap()));
        self.abbrev = if self.byte_ordered { key_head(&key) } else { 0 };
        self.head = Some(SortedEntry { key, tid, alive: t[6] != 0 });
        self.at += 4 + key_len + RECORD_FIXED - 4;
    }
}

fn less<P, C: FnMut(&[u8], &[u8]) -> Ordering>(a: usize, b: usize, readers: &[RunReader<P>], cmp: &mut C) -> bool {
    let (x, y) = (readers[a].head.as_ref().unwrap(), readers[b].head.as_ref().unwrap());
    readers[a].abbrev.cmp(&readers[b].abbrev).then_with(|| cmp(&x.key, &y.key)).then(x.tid.cmp(&y.tid)) == Ordering::Less
}

fn sift_down<P, C: FnMut(&[u8], &[u8]) -> Ordering>(heap: &mut [usize], mut i: usize, readers: &[RunReader<P>], cmp: &mut C) {
    loop {
        let (l, r) = (2 * i + 1, 2 * i + 2);
        let mut least = i;
        if l < heap.len() && less(heap[l], heap[least], readers, cmp) {
            least = l;
        }
        if r < heap.len() && less(heap[r], heap[least], readers, cmp) {
            least = r;
        }
        if least == i {
            return;
        }
        heap.swap(i, least);
        i = least;
    }
}

enum Source<F: SpillFile> {
    Memory { keys: Vec<u8>, items: std::vec::IntoIter<Item> },
    Runs { file: F, readers: Vec<RunReader<F::Pos>>, heap: Vec<usize> },
}

/// The sorted entries of a `BuildSorter`.
pub struct SortedStream<F: SpillFile, C: FnMut(&[u8], &[u8]) -> Ordering> {
    source: Source<F>,
    cmp: C,
    left: u64,
}

impl<F: SpillFile, C: FnMut(&[u8], &[u8]) -> Ordering> SortedStream<F, C> {
    /// The spill file, if runs were written (to close it).
    pub fn file(&mut self) -> Option<&mut F> {
        match &mut self.source {
            Source::Memory { .. } => None,
            Source::Runs { file, .. } => Some(file),
        }
    }
}

impl<F: SpillFile, C: FnMut(&[u8], &[u8]) -> Ordering> Iterator for SortedStream<F, C> {
    type Item = SortedEntry;

    fn next(&mut self) -> Option<SortedEntry> {
        let out = match &mut self.source {
            Source::Memory { keys, items } => {
                let it = items.next()?;
                SortedEntry { key: keys[it.key_off..it.key_off + it.key_len as usize].to_vec(), tid: it.tid, alive: it.alive }
            }
            Source::Runs { file, readers, heap } => {
                let &top = heap.first()?;
                let out = readers[top].head.take().expect("a run in the heap has a next entry");
                readers[top].advance(file);
                if readers[top].head.is_none() {
                    let last = heap.pop().unwrap();
                    if !heap.is_empty() {
                        heap[0] = last;
                    }
                }
                if !heap.is_empty() {
                    sift_down(heap, 0, readers, &mut self.cmp);
                }
                out
            }
        };
        self.left -= 1;
        Some(out)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left as usize, Some(self.left as usize))
    }
}

impl<F: SpillFile, C: FnMut(&[u8], &[u8]) -> Ordering> ExactSizeIterator for SortedStream<F, C> {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_rng::Rng;
    use proptest::prelude::*;

    /// Keys compared by their bytes reversed: not the byte order, so a
    /// sorter that ignored its comparator would fail.
    fn reversed(a: &[u8], b: &[u8]) -> Ordering {
        a.iter().rev().cmp(b.iter().rev())
    }

    fn sorted_oracle(input: &[(Vec<u8>, Tid, bool)]) -> Vec<SortedEntry> {
        let mut v: Vec<SortedEntry> = input.iter().map(|(k, t, a)| SortedEntry { key: k.clone(), tid: *t, alive: *a }).collect();
        v.sort_by(|x, y| reversed(&x.key, &y.key).then(x.tid.cmp(&y.tid)));
        v
    }

    fn run_sorter(input: &[(Vec<u8>, Tid, bool)], mem: usize) -> (Vec<SortedEntry>, usize, usize) {
        run_with(BuildSorter::new(mem, reversed), input)
    }

    fn run_with<C: FnMut(&[u8], &[u8]) -> Ordering>(mut s: BuildSorter<Vec<u8>, C>, input: &[(Vec<u8>, Tid, bool)]) -> (Vec<SortedEntry>, usize, usize) {
        let mut opened = 0;
        for (k, t, a) in input {
            s.push(k, *t, *a, || {
                opened += 1;
                Vec::new()
            });
        }
        let runs = s.runs();
        let stream = s.finish();
        assert_eq!(stream.len(), input.len());
        (stream.collect(), runs, opened)
    }

    fn random_input(rng: &mut Rng, n: usize, max_key: usize) -> Vec<(Vec<u8>, Tid, bool)> {
        (0..n)
            .map(|i| {
                let len = rng.below(max_key as u64 + 1) as usize;
                let key: Vec<u8> = (0..len).map(|_| rng.below(4) as u8).collect();
                (key, Tid::new(rng.below(1000) as u32, (i + 1) as u16), rng.below(5) != 0)
            })
            .collect()
    }

    #[test]
    fn fits_in_memory_without_a_file() {
        let mut rng = Rng(7);
        let input = random_input(&mut rng, 500, 6);
        let (out, runs, opened) = run_sorter(&input, 1 << 20);
        assert_eq!((runs, opened), (0, 0));
        assert_eq!(out, sorted_oracle(&input));
    }

    #[test]
    fn spills_runs_and_merges_them() {
        let mut rng = Rng(11);
        let input = random_input(&mut rng, 5000, 12);
        let (out, runs, opened) = run_sorter(&input, 4096);
        assert!(runs > 10, "expected many runs, got {runs}");
        assert_eq!(opened, 1, "one spill file for every run");
        assert_eq!(out, sorted_oracle(&input));
    }

    #[test]
    fn records_longer_than_a_read_buffer() {
        // Keys of 20 KB, more than MIN_READ_BUFFER, with a bound that makes
        // a run of each (the last one written by `finish`).
        let input: Vec<(Vec<u8>, Tid, bool)> = (0..6u8).map(|i| (vec![5 - i; 20_000], Tid::new(i as u32, 1), i % 2 == 0)).collect();
        let (out, runs, _) = run_sorter(&input, 100);
        assert_eq!(runs, 5);
        assert_eq!(out, sorted_oracle(&input));
    }

    #[test]
    fn empty_input() {
        let (out, runs, opened) = run_sorter(&[], 0);
        assert!(out.is_empty());
        assert_eq!((runs, opened), (0, 0));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        /// Whatever the bound, the stream is the input sorted by (key, TID),
        /// every entry once with its liveness.
        #[test]
        fn any_bound_sorts_like_the_oracle(seed in 1u64..u64::MAX, n in 0usize..600, max_key in 0usize..40, mem in 0usize..3000) {
            let mut rng = Rng(seed);
            let input = random_input(&mut rng, n, max_key);
            let (out, _, opened) = run_sorter(&input, mem);
            prop_assert!(opened <= 1);
            prop_assert_eq!(out, sorted_oracle(&input));
        }

        /// A byte-ordered sorter (abbreviated keys) gives the byte order
        /// of (key, TID), in memory and through runs; keys of bytes 0..4
        /// and up to 12 long tie on their heads often, and are prefixes
        /// of one another.
        #[test]
        fn byte_ordered_sorts_like_the_oracle(seed in 1u64..u64::MAX, n in 0usize..600, max_key in 0usize..13, mem in 0usize..3000) {
            let mut rng = Rng(seed);
            let input = random_input(&mut rng, n, max_key);
            let (out, _, opened) = run_with(BuildSorter::new(mem, |a: &[u8], b: &[u8]| a.cmp(b)).byte_ordered(), &input);
            prop_assert!(opened <= 1);
            let mut want: Vec<SortedEntry> = input.iter().map(|(k, t, a)| SortedEntry { key: k.clone(), tid: *t, alive: *a }).collect();
            want.sort_by(|x, y| x.key.cmp(&y.key).then(x.tid.cmp(&y.tid)));
            prop_assert_eq!(out, want);
        }
    }
}
