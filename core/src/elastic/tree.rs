//! The elastic B+tree over a page pool.
//!
//! Every modification is a sequence of *steps*; a step is at most
//! [`MAX_STEP_PAGES`] page changes handed to [`PagePool::apply`] together,
//! which the PostgreSQL glue turns into one GenericXLog record. The tree is
//! consistent between any two steps, so a crash between them loses nothing
//! (splits are done top-down: a parent is split first when it lacks room for
//! the downlink, then the caller re-descends).
//!
//! The state machine (paper section 4): `Normal` below `shrink_pct` of the
//! bound; `Shrinking` from there on (a full standard leaf becomes a compact
//! leaf of twice its entries instead of splitting; a full compact leaf
//! doubles its capacity up to the cap, then splits into compact leaves);
//! `Expanding` once the size falls under `expand_pct` (compact leaves that
//! an insert or VACUUM touches revert to standard leaves, splitting if they
//! do not fit one page); back to `Normal` when no compact leaf is left.

use std::cell::Cell;
use std::ops::Bound;

use super::compact::{self, CompactView, Inserted, Located, Raw, Shape};
use super::slotted::{self, Kind, SlotView};
use super::*;

/// No block (PostgreSQL's InvalidBlockNumber).
pub const NO_BLOCK: u32 = u32::MAX;
/// Most pages one step may change: GenericXLog's MAX_GENERIC_XLOG_PAGES.
pub const MAX_STEP_PAGES: usize = 4;
/// An inner merge leaves the union at most this full, so the next few
/// splits below it do not split it again at once.
const INNER_MERGE_FILL_PCT: usize = 75;
const MAX_HEIGHT: usize = 40;
/// Fill limit of a compact page made by the shrink pass.
pub const SHRINK_FILL_PCT: usize = 90;
/// Left share of a rightmost-page split, as nbtree's default fillfactor.
pub const RIGHTMOST_SPLIT_PCT: usize = 90;
/// Bytes of PostgreSQL page around a body: 24-byte header, 32-byte special.
pub const PAGE_OVERHEAD: usize = 56;

/// What the glue keeps in the page's special area.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PageMeta {
    /// 0 for leaves.
    pub level: u8,
    pub left: u32,
    pub right: u32,
}

impl PageMeta {
    pub const fn new(level: u8) -> Self {
        PageMeta { level, left: NO_BLOCK, right: NO_BLOCK }
    }
}

/// One page change of a step.
#[derive(Clone, Debug)]
pub enum Change {
    /// The whole page: special-area fields and body (`body_cap` bytes).
    Write { blk: u32, meta: PageMeta, body: Vec<u8> },
    /// The page is no longer part of the tree (recycle it).
    Free(u32),
}

impl Change {
    fn blk(&self) -> u32 {
        match self {
            Change::Write { blk, .. } | Change::Free(blk) => *blk,
        }
    }
}

/// Pages as the tree sees them. The glue implements this over buffers and
/// GenericXLog; [`MemPool`] is the in-memory one for tests.
pub trait PagePool {
    /// Body bytes of every page ([`BODY_CAP`] on PostgreSQL).
    fn body_cap(&self) -> usize;
    /// Bytes a page counts against the size bound.
    fn page_bytes(&self) -> u64 {
        (self.body_cap() + PAGE_OVERHEAD) as u64
    }
    /// A block to write in the next step (new or recycled). Its content is
    /// undefined until a step writes it.
    fn alloc(&mut self) -> Result<u32>;
    /// A readable page: on PostgreSQL a guard holding the buffer pin and
    /// share lock, released on drop; in memory a plain slice.
    type Page<'a>: std::ops::Deref<Target = [u8]>
    where
        Self: 'a;
    fn read(&self, blk: u32) -> Result<(PageMeta, Self::Page<'_>)>;
    /// Applies the changes atomically; at most [`MAX_STEP_PAGES`] of them,
    /// on distinct blocks.
    fn apply(&mut self, step: Vec<Change>) -> Result<()>;
    /// Pages the index occupies (the size the bound is about).
    fn pages_in_use(&self) -> u64;
}

/// In-memory pool; records the largest step it was given.
#[derive(Clone, Debug)]
pub struct MemPool {
    cap: usize,
    pages: Vec<Option<(PageMeta, Vec<u8>)>>,
    free: Vec<u32>,
    in_use: u64,
    pub steps: u64,
    pub max_step_pages: usize,
}

impl MemPool {
    pub fn new(body_cap: usize) -> Self {
        MemPool { cap: body_cap, pages: Vec::new(), free: Vec::new(), in_use: 0, steps: 0, max_step_pages: 0 }
    }
    /// Mutable access to a page's special-area fields, for corruption tests.
    pub fn meta_mut(&mut self, blk: u32) -> Option<&mut PageMeta> {
        self.pages.get_mut(blk as usize).and_then(|p| p.as_mut()).map(|p| &mut p.0)
    }
    /// Mutable access to a page body, for corruption tests.
    pub fn body_mut(&mut self, blk: u32) -> Option<&mut Vec<u8>> {
        self.pages.get_mut(blk as usize).and_then(|p| p.as_mut()).map(|p| &mut p.1)
    }
}

impl PagePool for MemPool {
    fn body_cap(&self) -> usize {
        self.cap
    }
    fn alloc(&mut self) -> Result<u32> {
        self.in_use += 1;
        if let Some(b) = self.free.pop() {
            self.pages[b as usize] = Some((PageMeta::new(0), vec![0; self.cap]));
            return Ok(b);
        }
        self.pages.push(Some((PageMeta::new(0), vec![0; self.cap])));
        Ok((self.pages.len() - 1) as u32)
    }
    type Page<'a> = &'a [u8];
    fn read(&self, blk: u32) -> Result<(PageMeta, &[u8])> {
        match self.pages.get(blk as usize) {
            Some(Some((m, b))) => Ok((*m, b.as_slice())),
            _ => corrupt("link to a block that is not in use"),
        }
    }
    fn apply(&mut self, step: Vec<Change>) -> Result<()> {
        if step.len() > MAX_STEP_PAGES {
            return Err(Error::BadInput("step changes more than four pages"));
        }
        let mut blks: Vec<u32> = step.iter().map(Change::blk).collect();
        blks.sort_unstable();
        blks.dedup();
        if blks.len() != step.len() {
            return Err(Error::BadInput("step changes a page twice"));
        }
        self.steps += 1;
        self.max_step_pages = self.max_step_pages.max(step.len());
        for c in step {
            match c {
                Change::Write { blk, meta, body } => {
                    if body.len() != self.cap {
                        return Err(Error::BadInput("page body of the wrong size"));
                    }
                    match self.pages.get_mut(blk as usize) {
                        Some(slot @ Some(_)) => *slot = Some((meta, body)),
                        _ => return Err(Error::BadInput("write to an unallocated block")),
                    }
                }
                Change::Free(blk) => match self.pages.get_mut(blk as usize) {
                    Some(slot @ Some(_)) => {
                        *slot = None;
                        self.free.push(blk);
                        self.in_use -= 1;
                    }
                    _ => return Err(Error::BadInput("free of an unallocated block")),
                },
            }
        }
        Ok(())
    }
    fn pages_in_use(&self) -> u64 {
        self.in_use
    }
}

// ---------------------------------------------------------------------------
// Configuration, state, statistics

/// Elasticity state (paper section 4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    Normal = 0,
    Shrinking = 1,
    Expanding = 2,
}

impl State {
    fn from_u8(v: u8) -> Option<State> {
        match v {
            0 => Some(State::Normal),
            1 => Some(State::Shrinking),
            2 => Some(State::Expanding),
            _ => None,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            State::Normal => "normal",
            State::Shrinking => "shrinking",
            State::Expanding => "expanding",
        }
    }
}

/// Reloptions of an elastic index.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Config {
    /// Soft bound on the index size in bytes; `None`: never shrink.
    pub size_bound: Option<u64>,
    /// Enter `Shrinking` at this percentage of the bound (paper: 90).
    pub shrink_pct: u32,
    /// Enter `Expanding` below this percentage of the bound. The paper's
    /// run shrinks at 1289 MB and expands at 1081 MB, 84% of that; 84% of
    /// 90% is 75.
    pub expand_pct: u32,
    /// BlindiTree depth of new compact leaves.
    pub tree_level: u8,
    /// Breathing slack `s` of new compact leaves.
    pub slack: u8,
    /// Capacity cap of compact leaves before they split; 0 = as many as fit.
    pub max_compact: usize,
    /// At or above the bound itself, a standard leaf that receives inserts
    /// is compacted even if not full, so the size stops growing sooner.
    pub compact_over_bound: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            size_bound: None,
            shrink_pct: 90,
            expand_pct: 75,
            tree_level: compact::DEFAULT_LEVEL,
            slack: compact::DEFAULT_SLACK,
            max_compact: 0,
            compact_over_bound: true,
        }
    }
}

impl Config {
    /// Rejects settings the tree cannot honour (reloption validation).
    pub fn validate(&self, page_bytes: u64) -> Result<()> {
        if !(1..=100).contains(&self.shrink_pct) || self.expand_pct >= self.shrink_pct {
            return Err(Error::BadInput("thresholds must satisfy 0 <= expand_pct < shrink_pct <= 100"));
        }
        if self.tree_level > compact::MAX_LEVEL {
            return Err(Error::BadInput("BlindiTree level above 10"));
        }
        if let Some(b) = self.size_bound {
            if b < 4 * page_bytes {
                return Err(Error::BadInput("size_bound smaller than four pages"));
            }
        }
        Ok(())
    }
}

/// Counters for `index_stats`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    pub standard_leaves: u64,
    pub compact_leaves: u64,
    pub inner_pages: u64,
    pub pages: u64,
    pub bytes: u64,
    pub key_fetches: u64,
    /// Dead entries dropped because their key could not be fetched.
    pub dead_dropped: u64,
    pub height: u8,
    /// Events since this handle was opened.
    pub events: Events,
}

/// What the elasticity machinery did (since the tree handle was opened).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Events {
    pub leaf_splits: u64,
    pub inner_splits: u64,
    /// Standard -> compact in place (instead of a split).
    pub compactions: u64,
    /// Compact -> standard in place.
    pub expansions: u64,
    pub capacity_doublings: u64,
    pub capacity_halvings: u64,
    pub leaf_merges: u64,
    /// Inner pages merged into a sibling, and roots that gave way to their
    /// only child.
    pub inner_merges: u64,
}

impl Stats {
    pub fn leaves(&self) -> u64 {
        self.standard_leaves + self.compact_leaves
    }
}

/// What `verify` saw.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VerifyReport {
    pub standard_leaves: u64,
    pub compact_leaves: u64,
    pub inner_pages: u64,
    pub entries: u64,
    /// Compact entries whose key could not be fetched.
    pub dead_entries: u64,
    /// Pages the compact leaves would take beyond their own as standard
    /// leaves (entry size from each leaf's high key), for the expand rule.
    pub expansion_pages: u64,
}

/// One scanned entry. Standard leaves give the key (index-only scans);
/// compact leaves only the TID.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScanItem {
    pub key: Option<Vec<u8>>,
    pub tid: Tid,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    Forward,
    Backward,
}

// ---------------------------------------------------------------------------
// Leaves of either form

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Form {
    Standard,
    Compact,
}

/// A leaf body of either form, read-only.
#[derive(Clone, Copy, Debug)]
pub enum Leaf<'a> {
    Std(SlotView<'a>),
    Compact(CompactView<'a>),
}

impl<'a> Leaf<'a> {
    pub fn parse(b: &'a [u8]) -> Result<Self> {
        match b.first() {
            Some(&FORMAT_STD_LEAF) => Ok(Leaf::Std(SlotView::parse(b, Kind::Leaf)?)),
            Some(&FORMAT_COMPACT_LEAF) => Ok(Leaf::Compact(CompactView::parse(b)?)),
            _ => corrupt("not a leaf body"),
        }
    }
    pub fn form(&self) -> Form {
        match self {
            Leaf::Std(_) => Form::Standard,
            Leaf::Compact(_) => Form::Compact,
        }
    }
    pub fn len(&self) -> usize {
        match self {
            Leaf::Std(v) => v.len(),
            Leaf::Compact(v) => v.len(),
        }
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    pub fn high_key(&self) -> Result<Option<(&'a [u8], Tid)>> {
        match self {
            Leaf::Std(v) => Ok(v.high_key()?.map(|e| (e.key, e.tid))),
            Leaf::Compact(v) => Ok(v.high_key()),
        }
    }
    /// First entry >= `t`.
    pub fn search<F: KeyFetcher + ?Sized>(&self, t: &Target, f: &mut F, buf: &mut Vec<u8>) -> Result<usize> {
        match self {
            Leaf::Std(v) => v.lower_bound(t),
            Leaf::Compact(v) => v.search(t, f, buf),
        }
    }
    /// `search` for a `t` known to be >= every entry before `from` (the
    /// end of a range whose start is at `from`): standard leaves look at
    /// the entries after `from` first; compact ones search as `search`.
    pub fn search_from<F: KeyFetcher + ?Sized>(&self, t: &Target, from: usize, f: &mut F, buf: &mut Vec<u8>) -> Result<usize> {
        match self {
            Leaf::Std(v) => v.lower_bound_from(t, from),
            Leaf::Compact(v) => v.search(t, f, buf),
        }
    }
    pub fn item(&self, i: usize) -> Result<ScanItem> {
        match self {
            Leaf::Std(v) => {
                let e = v.entry(i)?;
                Ok(ScanItem { key: Some(e.key.to_vec()), tid: e.tid })
            }
            Leaf::Compact(v) => {
                if i >= v.len() {
                    return corrupt("compact index out of range");
                }
                Ok(ScanItem { key: None, tid: v.tid(i) })
            }
        }
    }
    /// The TID of entry `i`, without copying a key.
    pub fn item_tid(&self, i: usize) -> Result<Tid> {
        match self {
            Leaf::Std(v) => Ok(v.entry(i)?.tid),
            Leaf::Compact(v) => {
                if i >= v.len() {
                    return corrupt("compact index out of range");
                }
                Ok(v.tid(i))
            }
        }
    }
    /// Entries with keys; compact leaves fetch each key and drop the dead.
    pub fn gather<F: KeyFetcher + ?Sized>(&self, f: &mut F) -> Result<(Vec<Owned>, usize)> {
        match self {
            Leaf::Std(v) => Ok((v.entries()?.into_iter().map(|e| (e.key.to_vec(), e.tid)).collect(), 0)),
            Leaf::Compact(v) => {
                let mut out = Vec::with_capacity(v.len());
                let mut dead = 0;
                for i in 0..v.len() {
                    let mut k = Vec::new();
                    if f.fetch(v.tid(i), &mut k) {
                        out.push((k, v.tid(i)));
                    } else {
                        dead += 1;
                    }
                }
                Ok((out, dead))
            }
        }
    }
}

/// Standard leaf body -> compact leaf body of `capacity` (>= entries) in
/// `out` (same size). False if it would not fit or a key is too long.
pub fn standard_to_compact(std_body: &[u8], out: &mut [u8], capacity: usize, level: u8, slack: u8) -> Result<bool> {
    let v = SlotView::parse(std_body, Kind::Leaf)?;
    let ents = v.entries()?;
    if ents.iter().any(|e| e.key.len() > compact::MAX_COMPACT_KEY) {
        return Ok(false);
    }
    let hk = v.high_key()?.map(|e| (e.key, e.tid));
    let raw = Raw::from_keys(ents.iter().map(|e| (e.key, e.tid)))?;
    match compact::write(out, &raw, Shape { capacity: capacity.max(ents.len()), level, slack }, hk) {
        Ok(()) => Ok(true),
        Err(Error::NoSpace) => Ok(false),
        Err(e) => Err(e),
    }
}

/// Compact leaf body -> standard leaf body in `out`, fetching every key;
/// entries whose key is gone are dead and dropped. `Ok(None)` if the live
/// entries do not fit one page (split first), else the number dropped.
pub fn compact_to_standard<F: KeyFetcher + ?Sized>(c_body: &[u8], out: &mut [u8], f: &mut F) -> Result<Option<usize>> {
    let leaf = Leaf::Compact(CompactView::parse(c_body)?);
    let hk = leaf.high_key()?;
    let (ents, dead) = leaf.gather(f)?;
    if !SlotView::fits(out.len(), Kind::Leaf, ents.iter().map(|e| e.0.len()), hk.map(|h| h.0.len())) {
        return Ok(None);
    }
    slotted::build(out, Kind::Leaf, ents.iter().map(|(k, t)| (k.as_slice(), *t, 0)), hk)?;
    Ok(Some(dead))
}

/// A key and its TID, owned.
pub type Owned = (Vec<u8>, Tid);

fn hk_ref(h: &Option<Owned>) -> Option<(&[u8], Tid)> {
    h.as_ref().map(|(k, t)| (k.as_slice(), *t))
}

// ---------------------------------------------------------------------------
// Metapage

const META_LEN: usize = 12;

fn meta_body(cap: usize, root: u32, height: u8, state: State) -> Vec<u8> {
    let mut b = vec![0u8; cap];
    b[0] = FORMAT_META;
    b[1] = state as u8;
    b[2] = height;
    b[4..8].copy_from_slice(&root.to_le_bytes());
    b[8..12].copy_from_slice(b"ELST");
    b
}

fn parse_meta(b: &[u8]) -> Result<(u32, u8, State)> {
    if b.len() < META_LEN || b[0] != FORMAT_META || &b[8..12] != b"ELST" {
        return corrupt("not an elastic metapage");
    }
    let state = State::from_u8(b[1]).ok_or(Error::Corrupt("unknown elasticity state"))?;
    let height = b[2];
    if height == 0 || height as usize > MAX_HEIGHT {
        return corrupt("tree height out of range");
    }
    Ok((u32::from_le_bytes(b[4..8].try_into().unwrap()), height, state))
}

// ---------------------------------------------------------------------------
// The tree

/// Path from the root: (inner block, index of the child taken).
type Path = Vec<(u32, usize)>;

pub struct ElasticTree<P: PagePool> {
    pub pool: P,
    cfg: Config,
    meta_blk: u32,
    root: u32,
    height: u8,
    state: State,
    std_leaves: u64,
    compact_leaves: u64,
    inner_pages: u64,
    fetches: Cell<u64>,
    dead_dropped: u64,
    /// Where the shrink pass resumes: (parent block, child index).
    shrink_cursor: Option<(u32, usize)>,
    /// Extra pages reverting every compact leaf would take (as of the last
    /// walk).
    expansion_pages: u64,
    /// Entries the last walk counted.
    walked_entries: u64,
    /// Public operations started, and the one the last walk belongs to.
    op: u64,
    counted_op: u64,
    ev: Events,
}

/// Two neighbours under one parent that a merge joins: the left one is
/// freed, the right one survives.
struct MergedPair {
    lblk: u32,
    lmeta: PageMeta,
    rblk: u32,
    rmeta: PageMeta,
}

fn write(blk: u32, meta: PageMeta, body: Vec<u8>) -> Change {
    Change::Write { blk, meta, body }
}

impl<P: PagePool> ElasticTree<P> {
    /// A new empty index: a metapage and an empty standard root leaf.
    pub fn create(mut pool: P, cfg: Config) -> Result<Self> {
        let cap = pool.body_cap();
        if !(MIN_BODY..=MAX_BODY).contains(&cap) {
            return Err(Error::BadInput("body size out of range"));
        }
        cfg.validate(pool.page_bytes())?;
        let meta_blk = pool.alloc()?;
        let root = pool.alloc()?;
        let mut leaf = vec![0u8; cap];
        slotted::init(&mut leaf, Kind::Leaf, None)?;
        pool.apply(vec![
            write(meta_blk, PageMeta::new(0), meta_body(cap, root, 1, State::Normal)),
            write(root, PageMeta::new(0), leaf),
        ])?;
        let mut t = ElasticTree {
            pool,
            cfg,
            meta_blk,
            root,
            height: 1,
            state: State::Normal,
            std_leaves: 1,
            compact_leaves: 0,
            inner_pages: 0,
            fetches: Cell::new(0),
            dead_dropped: 0,
            shrink_cursor: None,
            expansion_pages: 0,
            walked_entries: 0,
            op: 1,
            counted_op: 0,
            ev: Events::default(),
        };
        t.update_state()?;
        Ok(t)
    }

    /// Opens an existing index; counts leaf forms by walking the tree.
    pub fn open(pool: P, meta_blk: u32, cfg: Config) -> Result<Self> {
        cfg.validate(pool.page_bytes())?;
        let mut t = Self::open_reader(pool, meta_blk)?;
        t.cfg = cfg;
        t.recount()?;
        Ok(t)
    }

    /// Opens an index for reading only: no leaf-form recount (counters stay
    /// zero), so a scan or a probe costs no more than its descent.
    pub fn open_reader(pool: P, meta_blk: u32) -> Result<Self> {
        let (root, height, state) = parse_meta(&pool.read(meta_blk)?.1)?;
        let mut t = Self::open_at(pool, meta_blk, root, height);
        t.state = state;
        Ok(t)
    }

    /// A reader that starts descents at `root` without reading the
    /// metapage. A root that has split since it was read still works: it is
    /// the leftmost node of its level, and descents move right from it.
    pub fn open_at(pool: P, meta_blk: u32, root: u32, height: u8) -> Self {
        ElasticTree {
            pool,
            cfg: Config::default(),
            meta_blk,
            root,
            height,
            state: State::Normal,
            std_leaves: 0,
            compact_leaves: 0,
            inner_pages: 0,
            fetches: Cell::new(0),
            dead_dropped: 0,
            shrink_cursor: None,
            expansion_pages: 0,
            walked_entries: 0,
            op: 1,
            counted_op: 0,
            ev: Events::default(),
        }
    }

    /// The root block (for readers' `open_at`).
    pub fn root(&self) -> u32 {
        self.root
    }

    /// The leaf where `t` is or would be (`None`: the rightmost leaf),
    /// moving right past concurrent splits.
    pub fn leaf_for(&self, t: Option<&Target>) -> Result<u32> {
        Ok(self.descend(t)?.1)
    }

    /// The leaf the last inner page on the way to `t` points to, not read:
    /// a reader that reads it next moves right past concurrent splits
    /// itself (high key <= `t`, as `descend` does), and so reads the leaf
    /// once, not twice.
    pub fn leaf_unread(&self, t: &Target) -> Result<u32> {
        Ok(self.descend_to(Some(t), false)?.1)
    }

    /// Fetches made through this handle so far.
    pub fn key_fetches(&self) -> u64 {
        self.fetches.get()
    }

    pub fn config(&self) -> &Config {
        &self.cfg
    }
    pub fn meta_block(&self) -> u32 {
        self.meta_blk
    }
    pub fn state(&self) -> State {
        self.state
    }
    pub fn size_bytes(&self) -> u64 {
        self.pool.pages_in_use() * self.pool.page_bytes()
    }

    pub fn stats(&self) -> Stats {
        Stats {
            standard_leaves: self.std_leaves,
            compact_leaves: self.compact_leaves,
            inner_pages: self.inner_pages,
            pages: self.pool.pages_in_use(),
            bytes: self.size_bytes(),
            key_fetches: self.fetches.get(),
            dead_dropped: self.dead_dropped,
            height: self.height,
            events: self.ev,
        }
    }

    fn cap(&self) -> usize {
        self.pool.body_cap()
    }

    /// Most sibling hops any walk can take; more means a link cycle.
    fn max_hops(&self) -> u64 {
        self.pool.pages_in_use() + 2
    }

    /// Entries in the leaves (dead ones included), by walking the leaf
    /// level and reading each header: for bytes_per_entry.
    pub fn count_entries(&self) -> Result<u64> {
        let (_, mut blk) = self.descend(Some(&Target::first(b"")))?;
        let mut n = 0u64;
        for _ in 0..self.max_hops() {
            let (m, b) = self.pool.read(blk)?;
            n += Leaf::parse(&b)?.len() as u64;
            if m.right == NO_BLOCK {
                return Ok(n);
            }
            blk = m.right;
        }
        corrupt("sibling chain does not end")
    }

    fn shape(&self, capacity: usize) -> Shape {
        Shape { capacity, level: self.cfg.tree_level, slack: self.cfg.slack }
    }

    fn max_compact(&self, hk_len: Option<usize>) -> usize {
        let phys = compact::max_entries(self.cap(), self.cfg.tree_level, hk_len);
        if self.cfg.max_compact == 0 {
            phys
        } else {
            self.cfg.max_compact.min(phys)
        }
    }

    fn counting<'f, F: KeyFetcher + ?Sized>(&self, f: &'f mut F) -> CountingFetcher<'f, F> {
        CountingFetcher::new(f)
    }

    fn add_fetches(&self, n: u64) {
        self.fetches.set(self.fetches.get() + n);
    }

    fn read_owned(&self, blk: u32) -> Result<(PageMeta, Vec<u8>)> {
        let (m, b) = self.pool.read(blk)?;
        if b.len() != self.cap() {
            return corrupt("page body of the wrong size");
        }
        Ok((m, b.to_vec()))
    }

    // ------------------------------------------------------------ state

    /// Re-evaluates the elasticity state from the current size; a change is
    /// one metapage step.
    pub fn update_state(&mut self) -> Result<State> {
        let Some(bound) = self.cfg.size_bound else {
            // No bound (or it was dropped): revert whatever is compact.
            let want = if self.compact_leaves > 0 { State::Expanding } else { State::Normal };
            if want != self.state {
                self.set_state(want)?;
            }
            return Ok(self.state);
        };
        let size = self.size_bytes() as u128;
        let shrink = bound as u128 * self.cfg.shrink_pct as u128 / 100;
        let expand = bound as u128 * self.cfg.expand_pct as u128 / 100;
        let extra = if self.state == State::Shrinking && size < expand {
            (self.fresh_expansion_pages()? * self.pool.page_bytes()) as u128
        } else {
            0
        };
        let next = match self.state {
            State::Normal if size >= shrink => State::Shrinking,
            // Only when reverting every compact leaf would stay under the
            // shrink threshold: compaction itself takes the size far below
            // the expand threshold, and expanding then would only grow it
            // back into shrinking (oscillation). The paper's leaves shrink
            // one overflow at a time; ours also by the shrink pass.
            State::Shrinking if size < expand && size + extra < shrink => State::Expanding,
            State::Expanding if size >= shrink => State::Shrinking,
            State::Expanding if self.compact_leaves == 0 => State::Normal,
            s => s,
        };
        if next != self.state {
            self.set_state(next)?;
        }
        Ok(self.state)
    }

    fn set_state(&mut self, s: State) -> Result<()> {
        self.state = s;
        self.write_meta_step(vec![])
    }

    fn write_meta_step(&mut self, mut others: Vec<Change>) -> Result<()> {
        others.push(write(self.meta_blk, PageMeta::new(0), meta_body(self.cap(), self.root, self.height, self.state)));
        self.pool.apply(others)
    }

    fn over_bound(&self) -> bool {
        self.cfg.compact_over_bound && self.cfg.size_bound.is_some_and(|b| self.size_bytes() >= b)
    }

    // ------------------------------------------------------------ descent

    /// Root-to-leaf path for `t` (`None`: the rightmost leaf). At every
    /// level it moves right while `t` is at or above the page's high key
    /// (Lehman and Yao): never needed single-threaded, but it is the rule
    /// that keeps a concurrent reader right when it raced a split, and the
    /// glue follows the same code path.
    fn descend(&self, t: Option<&Target>) -> Result<(Path, u32)> {
        self.descend_to(t, true)
    }

    /// `descend`; without `read_leaf`, the leaf's block as the parent
    /// names it, unread (the root's when the root is a leaf).
    fn descend_to(&self, t: Option<&Target>, read_leaf: bool) -> Result<(Path, u32)> {
        let mut path = Vec::new();
        let mut blk = self.root;
        let mut hops = 0u64;
        let mut want_level: Option<u8> = None;
        loop {
            let (mut m, mut b) = self.pool.read(blk)?;
            if want_level.is_some_and(|l| l != m.level) {
                return corrupt("child level does not match parent");
            }
            if let Some(t) = t {
                loop {
                    let hk = if m.level == 0 { Leaf::parse(&b)?.high_key()? } else { SlotView::parse(&b, Kind::Inner)?.high_key()?.map(|e| (e.key, e.tid)) };
                    match hk {
                        Some((k, tid)) if m.right != NO_BLOCK && cmp_entry(k, tid, t) != Ordering::Greater => {
                            hops += 1;
                            if hops > self.max_hops() {
                                return corrupt("sibling chain does not end");
                            }
                            blk = m.right;
                            (m, b) = self.pool.read(blk)?;
                        }
                        _ => break,
                    }
                }
            } else {
                // The rightmost page of each level: a concurrent split (or
                // a reader's stale root) may have put pages right of it.
                while m.right != NO_BLOCK {
                    hops += 1;
                    if hops > self.max_hops() {
                        return corrupt("sibling chain does not end");
                    }
                    blk = m.right;
                    (m, b) = self.pool.read(blk)?;
                }
            }
            if m.level == 0 {
                return Ok((path, blk));
            }
            if path.len() >= MAX_HEIGHT {
                return corrupt("tree deeper than any real tree");
            }
            let v = SlotView::parse(&b, Kind::Inner)?;
            let i = match t {
                Some(t) => v.child_index(t)?,
                None => v.len().checked_sub(1).ok_or(Error::Corrupt("inner node without children"))?,
            };
            path.push((blk, i));
            blk = v.entry(i)?.child;
            want_level = Some(m.level - 1);
            if !read_leaf && m.level == 1 {
                return Ok((path, blk));
            }
        }
    }

    // ------------------------------------------------------------ reads

    /// All TIDs with key `key`. One key fetch per compact leaf touched,
    /// unless the candidate entry is dead.
    pub fn lookup<F: KeyFetcher + ?Sized>(&self, key: &[u8], f: &mut F) -> Result<Vec<Tid>> {
        let mut cf = self.counting(f);
        let r = self.lookup_inner(key, &mut cf);
        self.add_fetches(cf.count);
        r
    }

    fn lookup_inner<F: KeyFetcher + ?Sized>(&self, key: &[u8], f: &mut F) -> Result<Vec<Tid>> {
        let (_, mut blk) = self.descend(Some(&Target::first(key)))?;
        let mut out = Vec::new();
        let mut buf = Vec::new();
        for _ in 0..self.max_hops() {
            let (m, b) = self.pool.read(blk)?;
            let leaf = Leaf::parse(&b)?;
            match leaf {
                Leaf::Std(v) => {
                    let mut i = v.lower_bound(&Target::first(key))?;
                    while i < v.len() {
                        let e = v.entry(i)?;
                        if e.key != key {
                            break;
                        }
                        out.push(e.tid);
                        i += 1;
                    }
                }
                Leaf::Compact(v) => match v.locate(key, f, &mut buf)? {
                    Located::Equal { s, e } => out.extend((s..e).map(|i| v.tid(i))),
                    Located::Dead { .. } => {
                        let s = v.search_by_fetch(&Target::first(key), f, &mut buf)?;
                        let e = v.search_by_fetch(&Target::last(key), f, &mut buf)?;
                        out.extend((s..e.max(s)).map(|i| v.tid(i)));
                    }
                    _ => {}
                },
            }
            // Equal keys continue in the right sibling only if the high key
            // (the right page's lower bound) still has this key.
            match leaf.high_key()? {
                Some((hk, _)) if hk == key && m.right != NO_BLOCK => blk = m.right,
                _ => return Ok(out),
            }
        }
        corrupt("sibling chain does not end")
    }

    /// Entries in `[lo, hi]` (per the bounds) in `dir` order.
    pub fn scan<F: KeyFetcher + ?Sized>(
        &self,
        lo: Bound<&[u8]>,
        hi: Bound<&[u8]>,
        dir: Direction,
        f: &mut F,
    ) -> Result<Vec<ScanItem>> {
        let mut c = Cursor::new(lo, hi, dir);
        let mut out = Vec::new();
        while let Some(batch) = c.next_leaf(self, f)? {
            out.extend(batch);
        }
        Ok(out)
    }

    // ------------------------------------------------------------ inserts

    /// Inserts one entry (a batch of one).
    pub fn insert<F: KeyFetcher + ?Sized>(&mut self, key: &[u8], tid: Tid, f: &mut F) -> Result<()> {
        self.insert_batch(&[(key.to_vec(), tid)], f)
    }

    /// Applies a batch sorted by (key, TID) into the leaves in place: each
    /// leaf receives its whole run in one step; overflows are resolved by
    /// conversion, capacity doubling or a split (each one step) and the
    /// batch resumes. Entries already present are skipped.
    pub fn insert_batch<F: KeyFetcher + ?Sized>(&mut self, batch: &[(Vec<u8>, Tid)], f: &mut F) -> Result<()> {
        self.op += 1;
        let maxk = max_key_len(self.cap());
        for (i, (k, t)) in batch.iter().enumerate() {
            if k.len() > maxk {
                return Err(Error::KeyTooLong(k.len()));
            }
            if i > 0 && cmp_pair(&batch[i - 1].0, batch[i - 1].1, k, *t) != Ordering::Less {
                return Err(Error::BadInput("insert batch not sorted by (key, TID)"));
            }
        }
        let mut cf = self.counting(f);
        let r = self.insert_batch_inner(batch, &mut cf);
        self.add_fetches(cf.count);
        r
    }

    fn insert_batch_inner<F: KeyFetcher + ?Sized>(&mut self, batch: &[(Vec<u8>, Tid)], f: &mut F) -> Result<()> {
        let mut i = 0;
        let mut guard = 0u64;
        while i < batch.len() {
            guard += 1;
            if guard > 64 * (batch.len() as u64 + 1000) {
                return corrupt("insert makes no progress");
            }
            self.update_state()?;
            let (path, blk) = self.descend(Some(&Target::at(&batch[i].0, batch[i].1)))?;
            let (meta, mut body) = self.read_owned(blk)?;
            let leaf = Leaf::parse(&body)?;
            let end = match leaf.high_key()? {
                None => batch.len(),
                Some((hk, ht)) => i + batch[i..].partition_point(|(k, t)| cmp_pair(k, *t, hk, ht) == Ordering::Less),
            };
            if end == i {
                return corrupt("descent reached a leaf whose high key is below the key");
            }
            let form = leaf.form();
            if form == Form::Compact && self.state != State::Shrinking {
                // Expanding (or normal with leftovers): revert before writing.
                self.expand_leaf(&path, blk, f)?;
                continue;
            }
            let mut converted = false;
            if form == Form::Standard && leaf.len() >= 2 && self.state == State::Shrinking && self.over_bound() {
                if let Some(nb) = self.std_to_compact(&leaf, leaf.len() * 2)? {
                    body = nb;
                    converted = true;
                }
            }
            let (consumed, full, dropped) = insert_into_leaf(&mut body, &batch[i..end], f)?;
            self.dead_dropped += dropped as u64;
            if consumed > 0 || converted || dropped > 0 {
                self.pool.apply(vec![write(blk, meta, body)])?;
                if converted {
                    self.std_leaves = self.std_leaves.saturating_sub(1);
                    self.compact_leaves += 1;
                    self.ev.compactions += 1;
                }
            }
            i += consumed;
            if full {
                let before = self.pool.pages_in_use();
                self.overflow(&path, blk, f)?;
                if self.pool.pages_in_use() > before && self.state == State::Shrinking && self.over_bound() {
                    // Not the two halves just made: they would merge back
                    // and split again on the next insert (no progress).
                    let right = self.pool.read(blk)?.0.right;
                    self.shrink_some_inner(1, 8, &[blk, right], f)?;
                }
            }
        }
        self.update_state()?;
        Ok(())
    }

    /// A compact body for a standard leaf's entries, or None if it would
    /// not hold more than it does now.
    fn std_to_compact(&self, leaf: &Leaf, want_cap: usize) -> Result<Option<Vec<u8>>> {
        let (ents, _) = leaf.gather(&mut |_: Tid, _: &mut Vec<u8>| false)?;
        let hk = leaf.high_key()?.map(|(k, t)| (k.to_vec(), t));
        let maxc = self.max_compact(hk.as_ref().map(|h| h.0.len()));
        let capacity = want_cap.min(maxc);
        if capacity <= ents.len() || ents.iter().any(|(k, _)| k.len() > compact::MAX_COMPACT_KEY) {
            return Ok(None);
        }
        let raw = Raw::from_keys(ents.iter().map(|(k, t)| (k.as_slice(), *t)))?;
        let mut b = vec![0u8; self.cap()];
        match compact::write(&mut b, &raw, self.shape(capacity), hk_ref(&hk)) {
            Ok(()) => Ok(Some(b)),
            Err(Error::NoSpace) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// A full leaf: convert, double, expand or split (one step, or one
    /// inner split after which the caller re-descends).
    fn overflow<F: KeyFetcher + ?Sized>(&mut self, path: &Path, blk: u32, f: &mut F) -> Result<()> {
        let (meta, body) = self.read_owned(blk)?;
        let leaf = Leaf::parse(&body)?;
        match (leaf, self.state) {
            (Leaf::Std(_), State::Shrinking) => {
                if let Some(nb) = self.std_to_compact(&leaf, leaf.len() * 2)? {
                    self.pool.apply(vec![write(blk, meta, nb)])?;
                    self.std_leaves = self.std_leaves.saturating_sub(1);
                    self.compact_leaves += 1;
                    self.ev.compactions += 1;
                    return Ok(());
                }
                self.split_leaf(path, blk, Form::Standard, f)
            }
            (Leaf::Std(_), _) => self.split_leaf(path, blk, Form::Standard, f),
            (Leaf::Compact(v), State::Shrinking) => {
                let maxc = self.max_compact(v.high_key().map(|h| h.0.len()));
                if v.len() >= v.h.capacity && v.h.capacity < maxc {
                    let mut nb = body.clone();
                    compact::set_capacity(&mut nb, (v.h.capacity * 2).min(maxc))?;
                    self.ev.capacity_doublings += 1;
                    return self.pool.apply(vec![write(blk, meta, nb)]);
                }
                self.split_leaf(path, blk, Form::Compact, f)
            }
            (Leaf::Compact(_), _) => self.expand_leaf(path, blk, f),
        }
    }

    /// Turns a compact leaf back into standard form: in place if its live
    /// entries fit one page, else one split whose halves become standard
    /// where they fit.
    fn expand_leaf<F: KeyFetcher + ?Sized>(&mut self, path: &Path, blk: u32, f: &mut F) -> Result<()> {
        let (meta, body) = self.read_owned(blk)?;
        let leaf = Leaf::parse(&body)?;
        let hk = leaf.high_key()?.map(|(k, t)| (k.to_vec(), t));
        let (ents, dead) = leaf.gather(f)?;
        if SlotView::fits(self.cap(), Kind::Leaf, ents.iter().map(|e| e.0.len()), hk.as_ref().map(|h| h.0.len())) {
            let nb = self.std_body(&ents, hk_ref(&hk))?;
            self.pool.apply(vec![write(blk, meta, nb)])?;
            self.dead_dropped += dead as u64;
            self.compact_leaves = self.compact_leaves.saturating_sub(1);
            self.std_leaves += 1;
            self.ev.expansions += 1;
            return Ok(());
        }
        self.split_leaf(path, blk, Form::Standard, f)
    }

    fn std_body(&self, ents: &[Owned], hk: Option<(&[u8], Tid)>) -> Result<Vec<u8>> {
        let mut b = vec![0u8; self.cap()];
        slotted::build(&mut b, Kind::Leaf, ents.iter().map(|(k, t)| (k.as_slice(), *t, 0)), hk)?;
        Ok(b)
    }

    /// A leaf body for keyed entries in the preferred form, falling back to
    /// the other form if it does not fit.
    fn leaf_body(&self, ents: &[Owned], hk: Option<(&[u8], Tid)>, prefer: Form, capacity: usize) -> Result<(Vec<u8>, Form)> {
        let try_std = |s: &Self| -> Result<Option<Vec<u8>>> {
            if SlotView::fits(s.cap(), Kind::Leaf, ents.iter().map(|e| e.0.len()), hk.map(|h| h.0.len())) {
                Ok(Some(s.std_body(ents, hk)?))
            } else {
                Ok(None)
            }
        };
        let try_compact = |s: &Self| -> Result<Option<Vec<u8>>> {
            if ents.iter().any(|(k, _)| k.len() > compact::MAX_COMPACT_KEY) {
                return Ok(None);
            }
            let raw = Raw::from_keys(ents.iter().map(|(k, t)| (k.as_slice(), *t)))?;
            let mut b = vec![0u8; s.cap()];
            match compact::write(&mut b, &raw, s.shape(capacity.max(ents.len())), hk) {
                Ok(()) => Ok(Some(b)),
                Err(Error::NoSpace) => Ok(None),
                Err(e) => Err(e),
            }
        };
        let order = if prefer == Form::Standard { [Form::Standard, Form::Compact] } else { [Form::Compact, Form::Standard] };
        for form in order {
            let r = if form == Form::Standard { try_std(self)? } else { try_compact(self)? };
            if let Some(b) = r {
                return Ok((b, form));
            }
        }
        Err(Error::NoSpace)
    }

    /// Splits leaf `blk` in one step of at most four pages (left, right,
    /// right's right sibling, parent), or, if the parent has no room for the
    /// downlink, splits the parent instead and returns (the caller
    /// re-descends). `halves` is the form the halves should take: standard
    /// halves of a compact leaf fall back to compact where they do not fit.
    fn split_leaf<F: KeyFetcher + ?Sized>(&mut self, path: &Path, blk: u32, halves: Form, f: &mut F) -> Result<()> {
        let (meta, body) = self.read_owned(blk)?;
        let leaf = Leaf::parse(&body)?;
        // A lopsided split (rightmost / leftmost page) can leave the larger
        // half without room for a long separator as its high key; then split
        // in the middle.
        let pct = self.split_pct(&meta);
        let halves_at = match self.split_halves(&meta, blk, &leaf, halves, pct, f)? {
            Some(h) => h,
            None if pct != 50 => match self.split_halves(&meta, blk, &leaf, halves, 50, f)? {
                Some(h) => h,
                None => return Err(Error::NoSpace),
            },
            None => return Err(Error::NoSpace),
        };
        let Some((lbody, rbody, lform, rform, sep)) = halves_at else { return Ok(()) };
        let old_form = leaf.form();
        if !self.publish_split(path, blk, meta, &sep, lbody, rbody)? {
            return Ok(());
        }
        self.ev.leaf_splits += 1;
        for (form, d) in [(old_form, -1i64), (lform, 1), (rform, 1)] {
            let c = if form == Form::Standard { &mut self.std_leaves } else { &mut self.compact_leaves };
            *c = (*c as i64 + d) as u64;
        }
        Ok(())
    }

    /// The two halves of a split at `pct` percent and their separator;
    /// `None` if a half does not fit its page, `Some(None)` if the leaf was
    /// rewritten instead (every middle entry dead).
    #[allow(clippy::type_complexity)]
    fn split_halves<F: KeyFetcher + ?Sized>(
        &mut self,
        meta: &PageMeta,
        blk: u32,
        leaf: &Leaf,
        halves: Form,
        pct: usize,
        f: &mut F,
    ) -> Result<Option<Option<(Vec<u8>, Vec<u8>, Form, Form, Owned)>>> {
        let hk = leaf.high_key()?.map(|(k, t)| (k.to_vec(), t));
        let fit = |r: Result<(Vec<u8>, Form, u64)>| -> Result<Option<(Vec<u8>, Form, u64)>> {
            match r {
                Ok(x) => Ok(Some(x)),
                Err(Error::NoSpace) => Ok(None),
                Err(e) => Err(e),
            }
        };
        match leaf {
            Leaf::Std(v) => {
                let sp = slotted::split_point_at(v, pct)?;
                let ents = v.entries()?;
                let sep = separator_at(disc_bit(ents[sp - 1].key, ents[sp].key), ents[sp].key, ents[sp].tid);
                let mut l = vec![0u8; self.cap()];
                let mut r = vec![0u8; self.cap()];
                for (b, part, h) in [(&mut l, &ents[..sp], Some((&sep.0[..], sep.1))), (&mut r, &ents[sp..], hk_ref(&hk))] {
                    match slotted::build(b, Kind::Leaf, part.iter().map(|e| (e.key, e.tid, 0)), h) {
                        Ok(()) => {}
                        Err(Error::NoSpace) => return Ok(None),
                        Err(e) => return Err(e),
                    }
                }
                Ok(Some(Some((l, r, Form::Standard, Form::Standard, sep))))
            }
            Leaf::Compact(v) => {
                let mut raw = Raw::from_view(v);
                let cap = v.h.capacity;
                // The separator must be a real key: fetch the middle entry's,
                // dropping dead middles (they are dead for everyone).
                let sep = loop {
                    if raw.len() < 2 {
                        let mut nb = vec![0u8; self.cap()];
                        compact::write(&mut nb, &raw, Shape { capacity: cap, level: v.h.level, slack: v.h.slack }, hk_ref(&hk))?;
                        self.pool.apply(vec![write(blk, *meta, nb)])?;
                        return Ok(Some(None));
                    }
                    let m = split_index(raw.len(), pct);
                    let mut k = Vec::new();
                    if f.fetch(raw.tids[m], &mut k) {
                        break separator_at(raw.bits[m - 1], &k, raw.tids[m]);
                    }
                    raw.remove(m);
                    self.dead_dropped += 1;
                };
                let m = split_index(raw.len(), pct);
                let right = raw.split_off(m);
                let shape = Shape { capacity: cap, level: self.cfg.tree_level, slack: self.cfg.slack };
                let make = |s: &Self, r: &Raw, h: Option<(&[u8], Tid)>, f: &mut F| -> Result<(Vec<u8>, Form, u64)> {
                    if halves == Form::Standard {
                        let lv_body = {
                            let mut tmp = vec![0u8; s.cap()];
                            compact::write(&mut tmp, r, shape, None)?;
                            tmp
                        };
                        let lv = Leaf::parse(&lv_body)?;
                        let (ents, dead) = lv.gather(f)?;
                        let (b, form) = s.leaf_body(&ents, h, Form::Standard, cap)?;
                        return Ok((b, form, dead as u64));
                    }
                    let mut b = vec![0u8; s.cap()];
                    compact::write(&mut b, r, shape, h)?;
                    Ok((b, Form::Compact, 0))
                };
                let Some((l, lf, d1)) = fit(make(self, &raw, Some((&sep.0, sep.1)), f))? else { return Ok(None) };
                let Some((r, rf, d2)) = fit(make(self, &right, hk_ref(&hk), f))? else { return Ok(None) };
                self.dead_dropped += d1 + d2;
                Ok(Some(Some((l, r, lf, rf, sep))))
            }
        }
    }

    /// Share of a splitting page that stays left: 90% for the rightmost
    /// page of a level (ascending keys, sorted bulk loads: the left page
    /// will get no more inserts), 10% for the leftmost (descending keys,
    /// the mirror case), else 50%.
    fn split_pct(&self, meta: &PageMeta) -> usize {
        if meta.right == NO_BLOCK {
            RIGHTMOST_SPLIT_PCT
        } else if meta.left == NO_BLOCK {
            100 - RIGHTMOST_SPLIT_PCT
        } else {
            50
        }
    }

    /// Writes a split of `blk` (whose ancestors are `path`) into halves
    /// `lbody` | `rbody` around `sep` as one step: the halves, the right
    /// neighbour's back link, and the separator in the parent — or, for the
    /// root, a new root above the halves and the metapage. When the parent
    /// has no room for `sep`, splits the parent instead (its own step) and
    /// returns false; the caller's split happens on the next try.
    fn publish_split(&mut self, path: &[(u32, usize)], blk: u32, meta: PageMeta, sep: &(Vec<u8>, Tid), lbody: Vec<u8>, rbody: Vec<u8>) -> Result<bool> {
        if let Some(&(pblk, pidx)) = path.last() {
            let (pmeta, mut pbody) = self.read_owned(pblk)?;
            if SlotView::parse(&pbody, Kind::Inner)?.free_space() < Kind::Inner.entry_size(sep.0.len()) {
                self.split_inner(&path[..path.len() - 1], pblk)?;
                return Ok(false);
            }
            let nblk = self.pool.alloc()?;
            if !slotted::insert_at(&mut pbody, Kind::Inner, pidx + 1, &sep.0, sep.1, nblk)? {
                return corrupt("parent lost its free space");
            }
            let mut step = vec![write(pblk, pmeta, pbody)];
            self.link_split(&mut step, blk, meta, nblk, lbody, rbody)?;
            self.pool.apply(step)?;
        } else {
            if self.height as usize >= MAX_HEIGHT {
                return corrupt("tree too tall");
            }
            let nblk = self.pool.alloc()?;
            let rblk = self.pool.alloc()?;
            let mut root = vec![0u8; self.cap()];
            slotted::build(&mut root, Kind::Inner, [(&b""[..], Tid::default(), blk), (&sep.0[..], sep.1, nblk)], None)?;
            let level = meta.level.checked_add(1).ok_or(Error::Corrupt("page level out of range"))?;
            let mut step = vec![write(rblk, PageMeta::new(level), root)];
            self.link_split(&mut step, blk, meta, nblk, lbody, rbody)?;
            self.root = rblk;
            self.height = self.height.checked_add(1).ok_or(Error::Corrupt("tree too tall"))?;
            self.inner_pages += 1;
            self.write_meta_step(step)?;
        }
        Ok(true)
    }

    /// Adds the two halves of a split of `blk` (new right page `nblk`) and
    /// the right neighbour's back link to `step`.
    fn link_split(&self, step: &mut Vec<Change>, blk: u32, meta: PageMeta, nblk: u32, lbody: Vec<u8>, rbody: Vec<u8>) -> Result<()> {
        let rmeta = PageMeta { level: meta.level, left: blk, right: meta.right };
        let lmeta = PageMeta { right: nblk, ..meta };
        if meta.right != NO_BLOCK {
            let (mut m2, b2) = self.read_owned(meta.right)?;
            m2.left = nblk;
            step.push(write(meta.right, m2, b2));
        }
        step.push(write(blk, lmeta, lbody));
        step.push(write(nblk, rmeta, rbody));
        Ok(())
    }

    /// Splits inner page `blk` (whose ancestors are `path`) in one step, or
    /// its parent first if that lacks room.
    fn split_inner(&mut self, path: &[(u32, usize)], blk: u32) -> Result<()> {
        let (meta, body) = self.read_owned(blk)?;
        let v = SlotView::parse(&body, Kind::Inner)?;
        let hk = v.high_key()?.map(|e| (e.key.to_vec(), e.tid));
        let sp = slotted::split_point_at(&v, self.split_pct(&meta))?;
        let ents = v.entries()?;
        let sep = (ents[sp].key.to_vec(), ents[sp].tid);
        let mut l = vec![0u8; self.cap()];
        let mut r = vec![0u8; self.cap()];
        slotted::build(&mut l, Kind::Inner, ents[..sp].iter().map(|e| (e.key, e.tid, e.child)), Some((&sep.0, sep.1)))?;
        // The right half's first key is never compared (its low bound is
        // `sep`, in the parent and as the left half's high key): it is
        // stored empty, nbtree's minus infinity. Whole, a long separator
        // took a third of the new page, which then split again at the
        // next separator, and so did each page above it up to the root:
        // one level per leaf split (`long_shared_prefixes_keep_the_tree_low`).
        let right = std::iter::once((&b""[..], Tid::default(), ents[sp].child)).chain(ents[sp + 1..].iter().map(|e| (e.key, e.tid, e.child)));
        slotted::build(&mut r, Kind::Inner, right, hk_ref(&hk))?;
        if !self.publish_split(path, blk, meta, &sep, l, r)? {
            return Ok(());
        }
        self.inner_pages += 1;
        self.ev.inner_splits += 1;
        Ok(())
    }

    // ------------------------------------------------------------ expansion

    /// Reverts up to `max_steps` compact leaves (one step each: an in-place
    /// conversion or a split), left to right. For VACUUM or a background
    /// pass in the expanding state (the paper's search-triggered expansion
    /// without making searches write). Returns the steps taken.
    pub fn expand_some<F: KeyFetcher + ?Sized>(&mut self, max_steps: usize, f: &mut F) -> Result<usize> {
        self.op += 1;
        let mut cf = self.counting(f);
        let r = self.expand_some_inner(max_steps, &mut cf);
        self.add_fetches(cf.count);
        r
    }

    fn expand_some_inner<F: KeyFetcher + ?Sized>(&mut self, max_steps: usize, f: &mut F) -> Result<usize> {
        if self.update_state()? == State::Shrinking {
            return Ok(0);
        }
        let mut steps = 0;
        let (_, mut blk) = self.descend(Some(&Target::first(b"")))?;
        let mut hops = 0;
        // One pass left to right; a leaf is revisited until it is standard
        // (a split leaves its left half, possibly still compact, in place).
        while steps < max_steps {
            hops += 1;
            if hops > 2 * self.max_hops() + 2 * max_steps as u64 {
                return corrupt("sibling chain does not end");
            }
            // Read guards never outlive a write: take what we need, drop it.
            let (right, compact_hk) = {
                let (m, b) = self.pool.read(blk)?;
                match Leaf::parse(&b)? {
                    Leaf::Compact(v) => (m.right, Some(v.high_key().map(|(k, t)| (k.to_vec(), t)))),
                    Leaf::Std(_) => (m.right, None),
                }
            };
            if let Some(hk) = compact_hk {
                let path = self.path_to(blk, hk.as_ref())?;
                self.expand_leaf(&path, blk, f)?;
                steps += 1;
                continue;
            }
            if right == NO_BLOCK {
                break;
            }
            blk = right;
        }
        self.update_state()?;
        Ok(steps)
    }

    /// The path to leaf `blk` whose high key is `hk`: descend to the last
    /// entry before the high key (or the rightmost leaf).
    fn path_to(&self, blk: u32, hk: Option<&Owned>) -> Result<Path> {
        let (path, got) = match hk {
            Some((k, t)) => {
                // Largest target below (k, t): (k, t-1) or (k, First).
                let tgt = if t.to_u64() > 0 { Target::at(k, Tid::from_u64(t.to_u64() - 1)) } else { Target::first(k) };
                self.descend(Some(&tgt))?
            }
            None => self.descend(None)?,
        };
        if got != blk {
            return corrupt("leaf not reachable from the root by its high key");
        }
        Ok(path)
    }

    // ------------------------------------------------------------ VACUUM

    /// Removes entries whose TID `dead` reports (ambulkdelete), applies the
    /// underflow rules (compact capacity halving, reverting compact leaves
    /// outside the shrinking state) and merges nearly empty leaves into a
    /// sibling under the same parent. Returns the entries removed.
    pub fn bulk_delete<F: KeyFetcher + ?Sized>(&mut self, dead: &mut dyn FnMut(Tid) -> bool, f: &mut F) -> Result<u64> {
        self.op += 1;
        let mut cf = self.counting(f);
        let r = self.bulk_delete_inner(dead, &mut cf);
        self.add_fetches(cf.count);
        let r = r?;
        self.update_state()?;
        Ok(r)
    }

    fn bulk_delete_inner<F: KeyFetcher + ?Sized>(&mut self, dead: &mut dyn FnMut(Tid) -> bool, f: &mut F) -> Result<u64> {
        let mut removed = 0;
        if self.height == 1 {
            removed += self.vacuum_leaf(self.root, dead, f)?;
            return Ok(removed);
        }
        // Walk the parents of the leaves left to right.
        let (path, _) = self.descend(Some(&Target::first(b"")))?;
        let mut pblk = path.last().ok_or(Error::Corrupt("tree height disagrees with the root page"))?.0;
        let mut hops = 0;
        loop {
            hops += 1;
            if hops > self.max_hops() {
                return corrupt("sibling chain does not end");
            }
            let mut i = 0;
            loop {
                let (child, n) = {
                    let (_, pb) = self.pool.read(pblk)?;
                    let pv = SlotView::parse(&pb, Kind::Inner)?;
                    if i >= pv.len() {
                        break;
                    }
                    (pv.entry(i)?.child, pv.len())
                };
                removed += self.vacuum_leaf(child, dead, f)?;
                if n >= 2 && self.underfull(child)? {
                    let j = if i + 1 < n { i } else { i - 1 };
                    let prefer = if self.state == State::Shrinking { Form::Compact } else { Form::Standard };
                    if self.merge_leaves(pblk, j, dead, f, prefer, 75)? {
                        // The merged leaf sits at j; revisit it if it is new to us.
                        i = j;
                        continue;
                    }
                }
                i += 1;
            }
            let (m, _) = self.pool.read(pblk)?;
            if m.right == NO_BLOCK {
                break;
            }
            pblk = m.right;
        }
        self.merge_inner_levels()?;
        Ok(removed)
    }

    fn vacuum_leaf<F: KeyFetcher + ?Sized>(&mut self, blk: u32, dead: &mut dyn FnMut(Tid) -> bool, f: &mut F) -> Result<u64> {
        let (meta, mut body) = self.read_owned(blk)?;
        let removed = match body.first() {
            Some(&FORMAT_STD_LEAF) => slotted::remove_tids(&mut body, Kind::Leaf, &mut *dead)?,
            Some(&FORMAT_COMPACT_LEAF) => compact::remove_tids(&mut body, &mut *dead)?,
            _ => return corrupt("not a leaf body"),
        };
        let mut changed = removed > 0;
        if let Leaf::Compact(v) = Leaf::parse(&body)? {
            if self.state != State::Shrinking {
                let hk = v.high_key().map(|(k, t)| (k.to_vec(), t));
                let (ents, d) = Leaf::Compact(v).gather(f)?;
                if SlotView::fits(self.cap(), Kind::Leaf, ents.iter().map(|e| e.0.len()), hk.as_ref().map(|h| h.0.len())) {
                    body = self.std_body(&ents, hk_ref(&hk))?;
                    self.dead_dropped += d as u64;
                    self.compact_leaves = self.compact_leaves.saturating_sub(1);
                    self.std_leaves += 1;
                    self.ev.expansions += 1;
                    changed = true;
                }
            } else if v.len() * 2 < v.h.capacity {
                // Paper: a compact leaf of capacity 2k keeps at least k+1.
                let newcap = (v.h.capacity / 2).max(v.h.alloc);
                if newcap < v.h.capacity {
                    compact::set_capacity(&mut body, newcap)?;
                    self.ev.capacity_halvings += 1;
                    changed = true;
                }
            }
        }
        if changed {
            self.pool.apply(vec![write(blk, meta, body)])?;
        }
        Ok(removed as u64)
    }

    fn underfull(&self, blk: u32) -> Result<bool> {
        let (_, b) = self.pool.read(blk)?;
        Ok(match Leaf::parse(&b)? {
            Leaf::Std(v) => v.used_bytes() < self.cap() / 4,
            Leaf::Compact(v) => v.len() < self.max_compact(v.high_key().map(|h| h.0.len())) / 4,
        })
    }

    /// Merges children `j` and `j+1` of `pblk` into child j+1's page and
    /// frees child j's: one step of parent, freed page, its left neighbour
    /// (link), survivor. Only if the union fits `fill_pct`% of a page in the
    /// `prefer`red form (a standard union falls back to compact). A compact
    /// union is spliced from the two bit arrays and needs only the two keys
    /// at the junction; a standard one fetches every compact key.
    fn merge_leaves<F: KeyFetcher + ?Sized>(
        &mut self,
        pblk: u32,
        j: usize,
        dead: &mut dyn FnMut(Tid) -> bool,
        f: &mut F,
        prefer: Form,
        fill_pct: usize,
    ) -> Result<bool> {
        let (pmeta, pbody) = self.read_owned(pblk)?;
        let pv = SlotView::parse(&pbody, Kind::Inner)?;
        let (lblk, rblk) = (pv.entry(j)?.child, pv.entry(j + 1)?.child);
        let (lmeta, lbody) = self.read_owned(lblk)?;
        let (rmeta, rbody) = self.read_owned(rblk)?;
        if lmeta.right != rblk || rmeta.left != lblk || lmeta.level != 0 || rmeta.level != 0 {
            return corrupt("sibling links disagree with the parent");
        }
        let (l, r) = (Leaf::parse(&lbody)?, Leaf::parse(&rbody)?);
        let hk = r.high_key()?.map(|(k, t)| (k.to_vec(), t));
        let maxc = self.max_compact(hk.as_ref().map(|h| h.0.len()));
        let capacity = match (l, r) {
            (Leaf::Compact(a), Leaf::Compact(b)) => a.h.capacity.max(b.h.capacity),
            (Leaf::Compact(a), _) | (_, Leaf::Compact(a)) => a.h.capacity,
            _ => (l.len() + r.len()) * 2,
        }
        .min(maxc);
        let mut dropped = 0usize;
        let built = if prefer == Form::Compact {
            if l.len() + r.len() > 2 * maxc {
                return Ok(false);
            }
            let (mut lraw, lkeys) = raw_of(&l, dead)?;
            let (rraw, rkeys) = raw_of(&r, dead)?;
            if lraw.len() + rraw.len() > maxc * fill_pct / 100 {
                return Ok(false);
            }
            let mut rraw = rraw;
            // The two keys around the junction; dead ones are dropped.
            let mut lastk = Vec::new();
            let mut firstk = Vec::new();
            while let Some(&t) = lraw.tids.last() {
                if let Some(ks) = &lkeys {
                    lastk.clone_from(&ks[lraw.len() - 1]);
                    break;
                }
                if f.fetch(t, &mut lastk) {
                    break;
                }
                lraw.remove(lraw.len() - 1);
                dropped += 1;
            }
            let mut skip = 0;
            while let Some(&t) = rraw.tids.first() {
                if let Some(ks) = &rkeys {
                    firstk.clone_from(&ks[skip]);
                    break;
                }
                if f.fetch(t, &mut firstk) {
                    break;
                }
                rraw.remove(0);
                skip += 1;
                dropped += 1;
            }
            let junction = disc_bit(&lastk, &firstk);
            lraw.append(&rraw, junction);
            // The fill limit in bytes, not entries: keys whose bits spread
            // wide take two bytes a bit, and a merged page that the next
            // insert overflows would only be split again (and merged again).
            let used = compact::body_size(self.cfg.tree_level, hk.as_ref().map(|h| h.0.len()), lraw.len() + self.cfg.slack as usize, compact::fits_narrow(&lraw.bits));
            if used > self.cap() * fill_pct / 100 {
                return Ok(false);
            }
            let mut b = vec![0u8; self.cap()];
            match compact::write(&mut b, &lraw, self.shape(capacity.max(lraw.len())), hk_ref(&hk)) {
                Ok(()) => Some((b, Form::Compact)),
                Err(Error::NoSpace) => None,
                Err(e) => return Err(e),
            }
        } else {
            let (mut ents, d1) = l.gather(f)?;
            let (rents, d2) = r.gather(f)?;
            dropped += d1 + d2;
            ents.extend(rents);
            ents.retain(|(_, t)| !dead(*t));
            let need: usize = ents.iter().map(|e| Kind::Leaf.entry_size(e.0.len())).sum::<usize>()
                + hk.as_ref().map_or(0, |h| h.0.len() + slotted::TUPLE_HDR);
            if need > self.cap() * fill_pct / 100 {
                return Ok(false);
            }
            match self.leaf_body(&ents, hk_ref(&hk), Form::Standard, capacity) {
                Ok(x) => Some(x),
                Err(Error::NoSpace) => None,
                Err(e) => return Err(e),
            }
        };
        let Some((nb, form)) = built else { return Ok(false) };
        // The union's low bound is separator j, made when the freed page
        // split off its left neighbour. Where that neighbour is under the
        // same parent, both may take a shorter one (below).
        let shorter = if j >= 1 && pv.entry(j - 1)?.child == lmeta.left {
            let sep = pv.entry(j)?;
            self.shorter_low_bound((sep.key, sep.tid), &nb, f)?
        } else {
            None
        };
        let pair = MergedPair { lblk, lmeta, rblk, rmeta };
        self.apply_merge((pblk, pmeta, pbody), j, pair, nb, shorter.as_ref())?;
        self.dead_dropped += dropped as u64;
        self.ev.leaf_merges += 1;
        for (fm, d) in [(l.form(), -1i64), (r.form(), -1), (form, 1)] {
            let c = if fm == Form::Standard { &mut self.std_leaves } else { &mut self.compact_leaves };
            *c = (*c as i64 + d) as u64;
        }
        Ok(true)
    }

    /// Writes the merge of children `j` and `j+1` of the parent (a leaf or
    /// an inner merge) as one step: the parent's entry j points at the
    /// survivor `pair.rblk` (with separator `shorter`, if given) and entry
    /// j+1 goes; the freed page's left neighbour links to the survivor
    /// (with `shorter` as its high key); the survivor takes body `nb`.
    fn apply_merge(&mut self, parent: (u32, PageMeta, Vec<u8>), j: usize, pair: MergedPair, nb: Vec<u8>, shorter: Option<&Owned>) -> Result<()> {
        let (pblk, pmeta, mut pbody) = parent;
        slotted::set_child(&mut pbody, j, pair.rblk)?;
        slotted::remove_at(&mut pbody, Kind::Inner, j + 1)?;
        if let Some(sep) = shorter {
            pbody = self.with_separator(&pbody, j, sep)?;
        }
        let mut step = vec![write(pblk, pmeta, pbody), Change::Free(pair.lblk)];
        if pair.lmeta.left != NO_BLOCK {
            let (mut m, b) = self.read_owned(pair.lmeta.left)?;
            m.right = pair.rblk;
            let b = match shorter {
                Some(sep) => self.with_high_key(&b, sep)?,
                None => b,
            };
            step.push(write(pair.lmeta.left, m, b));
        }
        step.push(write(pair.rblk, PageMeta { left: pair.lmeta.left, ..pair.rmeta }, nb));
        self.pool.apply(step)
    }

    /// A shorter low bound for leaf body `body` whose low bound is `sep`:
    /// the shortest prefix of its first key above `sep` (the left
    /// neighbour's entries are all below `sep`, so any bound between `sep`
    /// and the first key separates the same entries). None if it would not
    /// be shorter, the leaf is empty, or its first key is dead. Separators
    /// are made by splits from the keys present at the time; without this
    /// a long one (two long keys that shared a prefix) outlived its keys
    /// for good, and inner pages full of them could not merge.
    fn shorter_low_bound<F: KeyFetcher + ?Sized>(&self, sep: (&[u8], Tid), body: &[u8], f: &mut F) -> Result<Option<Owned>> {
        let mut first = Vec::new();
        match Leaf::parse(body)? {
            Leaf::Std(v) => match v.len() {
                0 => return Ok(None),
                _ => first.extend_from_slice(v.entry(0)?.key),
            },
            Leaf::Compact(v) => {
                if v.is_empty() || !f.fetch(v.tid(0), &mut first) {
                    return Ok(None);
                }
            }
        }
        if bytes_cmp(sep.0, &first) != Ordering::Less {
            return Ok(None);
        }
        let p = separator_at(disc_bit(sep.0, &first), &first, Tid::default());
        Ok((p.0.len() < sep.0.len()).then_some(p))
    }

    /// Inner body `body` with entry `j`'s separator replaced by `sep`.
    fn with_separator(&self, body: &[u8], j: usize, sep: &Owned) -> Result<Vec<u8>> {
        let v = SlotView::parse(body, Kind::Inner)?;
        let hk = v.high_key()?.map(|e| (e.key.to_vec(), e.tid));
        let ents = v.entries()?;
        let mut nb = vec![0u8; self.cap()];
        let items = ents.iter().enumerate().map(|(i, e)| if i == j { (&sep.0[..], sep.1, e.child) } else { (e.key, e.tid, e.child) });
        slotted::build(&mut nb, Kind::Inner, items, hk_ref(&hk))?;
        Ok(nb)
    }

    /// Leaf body `body` with high key `hk` (same entries, same form).
    fn with_high_key(&self, body: &[u8], hk: &Owned) -> Result<Vec<u8>> {
        let mut nb = vec![0u8; self.cap()];
        match Leaf::parse(body)? {
            Leaf::Std(v) => {
                let ents = v.entries()?;
                slotted::build(&mut nb, Kind::Leaf, ents.iter().map(|e| (e.key, e.tid, 0)), Some((&hk.0[..], hk.1)))?;
            }
            Leaf::Compact(v) => {
                let shape = Shape { capacity: v.h.capacity, level: v.h.level, slack: v.h.slack };
                compact::write(&mut nb, &Raw::from_view(&v), shape, Some((&hk.0[..], hk.1)))?;
            }
        }
        Ok(nb)
    }

    /// After VACUUM's leaf pass: merges neighbouring inner pages under one
    /// parent, level by level from the leaves' parents up, where one of
    /// the pair is under a quarter full and the union fits
    /// `INNER_MERGE_FILL_PCT`% of a page; then a root left with one child
    /// gives way to that child. Without this, inner pages only ever grew:
    /// leaves emptied by VACUUM stayed behind as only children, and churn
    /// with long keys left chains of one-child pages 40 levels deep.
    fn merge_inner_levels(&mut self) -> Result<()> {
        // Top down: a merge above puts more pages of the level below under
        // one parent, where they can merge in turn.
        let mut level = self.height.saturating_sub(2);
        while level >= 1 {
            let (path, _) = self.descend(Some(&Target::first(b"")))?;
            let at = self.height as usize - 2 - level as usize;
            let mut pblk = path.get(at).ok_or(Error::Corrupt("tree height disagrees with the root page"))?.0;
            let mut hops = 0;
            loop {
                hops += 1;
                if hops > self.max_hops() {
                    return corrupt("sibling chain does not end");
                }
                let mut j = 0;
                loop {
                    let pair = {
                        let (_, pb) = self.pool.read(pblk)?;
                        let pv = SlotView::parse(&pb, Kind::Inner)?;
                        if j + 1 >= pv.len() {
                            break;
                        }
                        (pv.entry(j)?.child, pv.entry(j + 1)?.child)
                    };
                    if (self.inner_underfull(pair.0)? || self.inner_underfull(pair.1)?) && self.merge_inner(pblk, j)? {
                        // The union sits at j: try it with its next neighbour.
                        continue;
                    }
                    j += 1;
                }
                let (m, _) = self.pool.read(pblk)?;
                if m.right == NO_BLOCK {
                    break;
                }
                pblk = m.right;
            }
            level -= 1;
        }
        while self.height > 1 {
            let child = {
                let (m, b) = self.pool.read(self.root)?;
                let v = SlotView::parse(&b, Kind::Inner)?;
                if v.len() != 1 {
                    return Ok(());
                }
                if m.right != NO_BLOCK || m.left != NO_BLOCK {
                    return corrupt("the root has siblings");
                }
                v.entry(0)?.child
            };
            // The child moves into the root's block, so the root never
            // changes block: readers that start at a root they remember
            // (the engine's metapage keeps one) stay right, and a reader
            // that read the old root still follows its downlink to the
            // child, which is deleted with its content intact until the
            // recycle horizon passes it.
            let (cmeta, cbody) = self.read_owned(child)?;
            if cmeta.left != NO_BLOCK || cmeta.right != NO_BLOCK {
                return corrupt("an only child has siblings");
            }
            self.height -= 1;
            self.inner_pages = self.inner_pages.saturating_sub(1);
            self.write_meta_step(vec![write(self.root, cmeta, cbody), Change::Free(child)])?;
            self.ev.inner_merges += 1;
            self.shrink_cursor = None;
        }
        Ok(())
    }

    /// Under a quarter full, or a single child: a page of one long
    /// separator (and a long high key) is not a quarter empty but adds a
    /// level without a branch.
    fn inner_underfull(&self, blk: u32) -> Result<bool> {
        let (_, b) = self.pool.read(blk)?;
        let v = SlotView::parse(&b, Kind::Inner)?;
        Ok(v.len() < 2 || v.used_bytes() < self.cap() / 4)
    }

    /// Merges inner children `j` and `j+1` of `pblk` into child j+1's page
    /// and frees child j's, in the leaf merge's step (parent, freed page,
    /// its left neighbour, survivor), if the union fits
    /// `INNER_MERGE_FILL_PCT`% of a page. The right page's first entry
    /// takes the parent's separator as its key: that is its exact low
    /// bound.
    fn merge_inner(&mut self, pblk: u32, j: usize) -> Result<bool> {
        let (pmeta, pbody) = self.read_owned(pblk)?;
        let (lblk, rblk, rsep) = {
            let pv = SlotView::parse(&pbody, Kind::Inner)?;
            let r = pv.entry(j + 1)?;
            (pv.entry(j)?.child, r.child, (r.key.to_vec(), r.tid))
        };
        let (lmeta, lbody) = self.read_owned(lblk)?;
        let (rmeta, rbody) = self.read_owned(rblk)?;
        if lmeta.right != rblk || rmeta.left != lblk || lmeta.level != rmeta.level || lmeta.level == 0 || lmeta.level + 1 != pmeta.level {
            return corrupt("sibling links disagree with the parent");
        }
        let (lv, rv) = (SlotView::parse(&lbody, Kind::Inner)?, SlotView::parse(&rbody, Kind::Inner)?);
        let hk = rv.high_key()?.map(|e| (e.key.to_vec(), e.tid));
        let (le, re) = (lv.entries()?, rv.entries()?);
        let Some((rfirst, rrest)) = re.split_first() else { return corrupt("inner node without children") };
        let ents: Vec<(&[u8], Tid, u32)> = le
            .iter()
            .map(|e| (e.key, e.tid, e.child))
            .chain(std::iter::once((&rsep.0[..], rsep.1, rfirst.child)))
            .chain(rrest.iter().map(|e| (e.key, e.tid, e.child)))
            .collect();
        // A page with one child adds a level without a branch: it merges
        // whenever the union fits at all (with separators of 2 kB that is
        // three of them), others only into a union with room to spare.
        let fill = if le.len() < 2 || re.len() < 2 { 100 } else { INNER_MERGE_FILL_PCT };
        if !SlotView::fits(self.cap() * fill / 100, Kind::Inner, ents.iter().map(|e| e.0.len()), hk.as_ref().map(|h| h.0.len())) {
            return Ok(false);
        }
        let mut nb = vec![0u8; self.cap()];
        slotted::build(&mut nb, Kind::Inner, ents.iter().copied(), hk_ref(&hk))?;
        self.apply_merge((pblk, pmeta, pbody), j, MergedPair { lblk, lmeta, rblk, rmeta }, nb, None)?;
        self.inner_pages = self.inner_pages.saturating_sub(1);
        self.ev.inner_merges += 1;
        // The shrink pass's cursor may name the freed page.
        self.shrink_cursor = None;
        Ok(true)
    }

    /// In the shrinking state, merges neighbouring leaves under one parent
    /// into compact pages (90% full at most), up to `max_steps` merges,
    /// resuming where the last pass stopped. This reclaims leaves that were
    /// standard when shrinking began and get no more inserts (ascending
    /// keys: the paper's split-driven policy never revisits them). The
    /// insert path runs one merge per split while over the bound, so growth
    /// beyond it is page-neutral as long as such pairs exist.
    /// `max_pairs` bounds the neighbour pairs examined (one header read
    /// each, two page reads); the insert path uses 1 merge / 8 pairs per
    /// split, a background pass may use more.
    pub fn shrink_some<F: KeyFetcher + ?Sized>(&mut self, max_steps: usize, max_pairs: usize, f: &mut F) -> Result<usize> {
        self.op += 1;
        let mut cf = self.counting(f);
        let r = self.shrink_some_inner(max_steps, max_pairs, &[], &mut cf);
        self.add_fetches(cf.count);
        r
    }

    fn shrink_some_inner<F: KeyFetcher + ?Sized>(&mut self, max_steps: usize, max_pairs: usize, avoid: &[u32], f: &mut F) -> Result<usize> {
        if self.state != State::Shrinking || self.height < 2 {
            return Ok(0);
        }
        let (mut pblk, mut j) = match self.shrink_cursor {
            Some((b, j)) if self.pool.read(b).is_ok_and(|(m, _)| m.level == 1) => (b, j),
            _ => (self.leftmost_parent()?, 0),
        };
        let mut steps = 0;
        let mut pairs = 0;
        while steps < max_steps && pairs < max_pairs {
            pairs += 1;
            let pair = {
                let (m, b) = self.pool.read(pblk)?;
                let pv = SlotView::parse(&b, Kind::Inner)?;
                if j + 1 >= pv.len() {
                    Err(m.right)
                } else {
                    Ok((pv.entry(j)?.child, pv.entry(j + 1)?.child))
                }
            };
            let (lc, rc) = match pair {
                Ok(p) => p,
                Err(right) => {
                    pblk = if right == NO_BLOCK { self.leftmost_parent()? } else { right };
                    j = 0;
                    continue;
                }
            };
            let small = !avoid.contains(&lc) && !avoid.contains(&rc) && {
                let (_, lb) = self.pool.read(lc)?;
                let (_, rb) = self.pool.read(rc)?;
                let (ll, rl) = (Leaf::parse(&lb)?, Leaf::parse(&rb)?);
                let maxc = self.max_compact(rl.high_key()?.map(|h| h.0.len()));
                ll.len() + rl.len() <= maxc * SHRINK_FILL_PCT / 100
            };
            if small && self.merge_leaves(pblk, j, &mut |_| false, f, Form::Compact, SHRINK_FILL_PCT)?
            {
                steps += 1;
            } else {
                j += 1;
            }
        }
        self.shrink_cursor = Some((pblk, j));
        Ok(steps)
    }

    fn leftmost_parent(&self) -> Result<u32> {
        let (path, _) = self.descend(Some(&Target::first(b"")))?;
        path.last().map(|p| p.0).ok_or(Error::Corrupt("no parent level"))
    }

    // ------------------------------------------------------------ checks

    /// The expansion estimate, walked again at most once per public
    /// operation (it goes stale as leaves convert; a stale value let a build
    /// flip between shrinking and expanding without progress).
    fn fresh_expansion_pages(&mut self) -> Result<u64> {
        if self.counted_op != self.op {
            self.recount()?;
        }
        Ok(self.expansion_pages)
    }

    /// Walks the tree again for the counters the state rules use (after a
    /// pass that removed many entries).
    pub fn refresh_counts(&mut self) -> Result<()> {
        self.recount()
    }

    fn recount(&mut self) -> Result<()> {
        self.counted_op = self.op;
        let r = self.walk(None)?;
        self.std_leaves = r.standard_leaves;
        self.compact_leaves = r.compact_leaves;
        self.inner_pages = r.inner_pages;
        self.expansion_pages = r.expansion_pages;
        self.walked_entries = r.entries;
        Ok(())
    }

    /// Entries in the leaves as of the last walk (`open`, `refresh_counts`).
    pub fn walked_entries(&self) -> u64 {
        self.walked_entries
    }

    /// amcheck-like: every page parses; inner entries ascend and bound
    /// their children; each page's high key is the bound its parent gives;
    /// leaves link left and right in key order; compact leaves' bits agree
    /// with their fetched keys and trees with their bits; capacities hold;
    /// the leaf-form counters match.
    pub fn verify<F: KeyFetcher + ?Sized>(&self, f: &mut F) -> Result<VerifyReport> {
        let mut cf = self.counting(f);
        let r = self.walk(Some(&mut cf));
        self.add_fetches(cf.count);
        let r = r?;
        if r.standard_leaves != self.std_leaves || r.compact_leaves != self.compact_leaves || r.inner_pages != self.inner_pages {
            return corrupt("leaf counters disagree with the tree");
        }
        Ok(r)
    }

    fn walk(&self, mut f: Option<&mut dyn KeyFetcher>) -> Result<VerifyReport> {
        let mut rep = VerifyReport::default();
        // (block, low bound, high bound, expected level)
        let mut level_blocks: Vec<(u32, Option<Owned>, Option<Owned>)> = vec![(self.root, None, None)];
        let mut level = self.height as i32 - 1;
        let mut pages = 1u64;
        while level >= 0 {
            let mut next = Vec::new();
            let mut prev_blk = NO_BLOCK;
            for (idx, (blk, low, high)) in level_blocks.iter().enumerate() {
                let (m, b) = self.pool.read(*blk)?;
                if m.level as i32 != level {
                    return corrupt("page level does not match its depth");
                }
                if m.left != prev_blk {
                    return corrupt("left link does not point at the previous page");
                }
                let want_right = level_blocks.get(idx + 1).map_or(NO_BLOCK, |x| x.0);
                if m.right != want_right {
                    return corrupt("right link does not point at the next page");
                }
                prev_blk = *blk;
                let hk_ok = |hk: Option<(&[u8], Tid)>| match (hk, high) {
                    (None, None) => true,
                    (Some((k, t)), Some((hk2, ht2))) => k == hk2.as_slice() && t == *ht2,
                    _ => false,
                };
                let below_low = |k: &[u8], t: Tid| low.as_ref().is_some_and(|(lk, lt)| cmp_pair(k, t, lk, *lt) == Ordering::Less);
                if level > 0 {
                    let v = SlotView::parse(&b, Kind::Inner)?;
                    v.verify()?;
                    rep.inner_pages += 1;
                    if v.is_empty() {
                        return corrupt("inner node without children");
                    }
                    if !hk_ok(v.high_key()?.map(|e| (e.key, e.tid))) {
                        return corrupt("inner high key differs from the parent's bound");
                    }
                    let ents = v.entries()?;
                    for (i, e) in ents.iter().enumerate() {
                        if i > 0 && below_low(e.key, e.tid) {
                            return corrupt("separator below the page's low bound");
                        }
                        let lo = if i == 0 { low.clone() } else { Some((e.key.to_vec(), e.tid)) };
                        let hi = ents.get(i + 1).map(|x| (x.key.to_vec(), x.tid)).or_else(|| high.clone());
                        next.push((e.child, lo, hi));
                    }
                } else {
                    let leaf = Leaf::parse(&b)?;
                    if !hk_ok(leaf.high_key()?) {
                        return corrupt("leaf high key differs from the parent's bound");
                    }
                    rep.entries += leaf.len() as u64;
                    match leaf {
                        Leaf::Std(v) => {
                            v.verify()?;
                            rep.standard_leaves += 1;
                            if !v.is_empty() {
                                let e = v.entry(0)?;
                                if below_low(e.key, e.tid) {
                                    return corrupt("leaf entry below the page's low bound");
                                }
                            }
                        }
                        Leaf::Compact(v) => {
                            rep.compact_leaves += 1;
                            let klen = v.high_key().map_or(16, |h| h.0.len());
                            let std_bytes = v.len() * Kind::Leaf.entry_size(klen);
                            let usable = self.cap() * SHRINK_FILL_PCT / 100;
                            rep.expansion_pages += (std_bytes.div_ceil(usable) as u64).saturating_sub(1);
                            if self.cfg.max_compact != 0 && v.h.capacity > self.cfg.max_compact.max(v.h.alloc) {
                                return corrupt("compact capacity above the cap");
                            }
                            v.verify_structure()?;
                            if let Some(f) = f.as_deref_mut() {
                                rep.dead_entries += v.verify_keys(f)? as u64;
                                for i in 0..v.len() {
                                    let mut k = Vec::new();
                                    if f.fetch(v.tid(i), &mut k) {
                                        if below_low(&k, v.tid(i)) {
                                            return corrupt("compact entry below the page's low bound");
                                        }
                                        break;
                                    }
                                }
                            }
                        }
                    }
                }
            }
            pages += next.len() as u64;
            level_blocks = next;
            level -= 1;
            if level >= 0 && level_blocks.is_empty() {
                return corrupt("inner level without children");
            }
        }
        let _ = pages;
        Ok(rep)
    }
}

/// A leaf's bits and TIDs without dead entries, and the keys if it is a
/// standard leaf (no fetch needed).
fn raw_of(leaf: &Leaf, dead: &mut dyn FnMut(Tid) -> bool) -> Result<(Raw, Option<Vec<Vec<u8>>>)> {
    match leaf {
        Leaf::Std(v) => {
            let ents: Vec<_> = v.entries()?.into_iter().filter(|e| !dead(e.tid)).collect();
            let raw = Raw::from_keys(ents.iter().map(|e| (e.key, e.tid)))?;
            Ok((raw, Some(ents.iter().map(|e| e.key.to_vec()).collect())))
        }
        Leaf::Compact(v) => {
            let mut raw = Raw::from_view(v);
            raw.retain_live(dead);
            Ok((raw, None))
        }
    }
}

/// The separator between a split's halves: the shortest prefix of the right
/// half's first key that sorts above the left half's last key, with the
/// smallest TID (nbtree's suffix truncation). `bit` is the discriminating
/// bit of the two keys (`disc_bit`, nine bits a byte, so the keys first
/// differ in byte `bit / 9`); equal keys keep the whole key and the right
/// entry's TID. The parent and the left half's high key store only this
/// prefix: with long keys that share no long prefix an inner page keeps
/// its fan-out (full 2 kB separators left three children a page, and
/// `tree too tall` followed).
fn separator_at(bit: u16, right_key: &[u8], right_tid: Tid) -> Owned {
    if bit == DUP {
        return (right_key.to_vec(), right_tid);
    }
    let n = (bit as usize / 9 + 1).min(right_key.len());
    (right_key[..n].to_vec(), Tid::default())
}

/// Index of the first entry of the right half when splitting n (>= 2)
/// entries with `pct`% on the left.
fn split_index(n: usize, pct: usize) -> usize {
    (n * pct / 100).clamp(1, n - 1)
}

/// Inserts a run of sorted entries into one leaf body until it is full.
/// Returns (entries consumed, full, dead entries dropped).
fn insert_into_leaf<F: KeyFetcher + ?Sized>(body: &mut [u8], ents: &[(Vec<u8>, Tid)], f: &mut F) -> Result<(usize, bool, usize)> {
    let mut dropped = 0;
    match body.first() {
        Some(&FORMAT_STD_LEAF) => {
            for (n, (k, t)) in ents.iter().enumerate() {
                let v = SlotView::parse(body, Kind::Leaf)?;
                let p = v.lower_bound(&Target::at(k, *t))?;
                if p < v.len() {
                    let e = v.entry(p)?;
                    if e.key == k.as_slice() && e.tid == *t {
                        continue;
                    }
                }
                if !slotted::insert_at(body, Kind::Leaf, p, k, *t, 0)? {
                    return Ok((n, true, 0));
                }
            }
            Ok((ents.len(), false, 0))
        }
        Some(&FORMAT_COMPACT_LEAF) => {
            let mut res = (ents.len(), false);
            for (n, (k, t)) in ents.iter().enumerate() {
                if compact::insert(body, k, *t, f, false, &mut dropped)? == Inserted::Full {
                    res = (n, true);
                    break;
                }
            }
            compact::rebuild_tree(body)?;
            Ok((res.0, res.1, dropped))
        }
        _ => corrupt("not a leaf body"),
    }
}

/// A scan position, nbtree style: each call returns one leaf's matching
/// entries, so the glue holds one page at a time.
pub struct Cursor {
    lo: Bound<Vec<u8>>,
    hi: Bound<Vec<u8>>,
    dir: Direction,
    next: Option<u32>,
    started: bool,
    hops: u64,
}

fn lo_target(b: &Bound<Vec<u8>>) -> Option<Target<'_>> {
    match b {
        Bound::Included(k) => Some(Target::first(k)),
        Bound::Excluded(k) => Some(Target::last(k)),
        Bound::Unbounded => None,
    }
}

fn hi_target(b: &Bound<Vec<u8>>) -> Option<Target<'_>> {
    match b {
        Bound::Included(k) => Some(Target::last(k)),
        Bound::Excluded(k) => Some(Target::first(k)),
        Bound::Unbounded => None,
    }
}

impl Cursor {
    pub fn new(lo: Bound<&[u8]>, hi: Bound<&[u8]>, dir: Direction) -> Self {
        Cursor { lo: lo.map(|k| k.to_vec()), hi: hi.map(|k| k.to_vec()), dir, next: None, started: false, hops: 0 }
    }

    /// The next leaf's matching entries in scan order; `None` when done.
    pub fn next_leaf<P: PagePool, F: KeyFetcher + ?Sized>(&mut self, tree: &ElasticTree<P>, f: &mut F) -> Result<Option<Vec<ScanItem>>> {
        let mut cf = tree.counting(f);
        let r = self.next_leaf_inner(tree, &mut cf);
        tree.add_fetches(cf.count);
        r
    }

    fn next_leaf_inner<P: PagePool, F: KeyFetcher + ?Sized>(&mut self, tree: &ElasticTree<P>, f: &mut F) -> Result<Option<Vec<ScanItem>>> {
        let lo = lo_target(&self.lo);
        let hi = hi_target(&self.hi);
        let mut buf = Vec::new();
        let first = !self.started;
        let blk = if first {
            self.started = true;
            let start = if self.dir == Direction::Forward { lo.or(Some(Target::first(b""))) } else { hi };
            tree.descend(start.as_ref())?.1
        } else {
            match self.next {
                Some(b) => b,
                None => return Ok(None),
            }
        };
        self.hops += 1;
        if self.hops > tree.max_hops() {
            return corrupt("sibling chain does not end");
        }
        let (m, b) = tree.pool.read(blk)?;
        if m.level != 0 {
            return corrupt("sibling link leaves the leaf level");
        }
        let leaf = Leaf::parse(&b)?;
        let n = leaf.len();
        let hk = leaf.high_key()?;
        let mut out = Vec::new();
        match self.dir {
            Direction::Forward => {
                let from = match (&lo, first) {
                    (Some(t), true) => leaf.search(t, f, &mut buf)?,
                    _ => 0,
                };
                // The end is in this leaf unless the high key is below it.
                let (to, last) = match &hi {
                    None => (n, false),
                    Some(t) => match hk {
                        Some((k, tid)) if cmp_entry(k, tid, t) == Ordering::Less => (n, false),
                        _ => (leaf.search(t, f, &mut buf)?, true),
                    },
                };
                for i in from..to.max(from) {
                    out.push(leaf.item(i)?);
                }
                self.next = if last || m.right == NO_BLOCK { None } else { Some(m.right) };
            }
            Direction::Backward => {
                let to = match (&hi, first) {
                    (Some(t), true) => leaf.search(t, f, &mut buf)?,
                    _ => n,
                };
                let from = match &lo {
                    Some(t) if to > 0 => leaf.search(t, f, &mut buf)?,
                    _ => 0,
                };
                for i in (from..to.max(from)).rev() {
                    out.push(leaf.item(i)?);
                }
                self.next = if from > 0 || m.left == NO_BLOCK { None } else { Some(m.left) };
            }
        }
        Ok(Some(out))
    }
}
