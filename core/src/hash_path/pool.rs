//! The page layer under the hash path: the trait the glue implements, and
//! an in-memory implementation for tests that can simulate a crash.

use super::*;

/// One page change of a step.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    /// The whole body of `blk` (`body_cap` bytes).
    Write { blk: u32, body: Vec<u8> },
    /// Entries added to the bucket page `blk`, encoded by
    /// [`encode_adds`](super::page::encode_adds): the new body is
    /// [`apply_adds`](super::page::apply_adds) of the current one. A sync
    /// adds a few entries to most bucket pages; the glue logs these bytes
    /// and replays the same function, rather than diffing whole pages.
    Add { blk: u32, adds: Vec<u8> },
    /// `blk` is no longer reachable from the header. Readers that started
    /// before this step may still be on it, so the glue must not reuse it
    /// before every such reader is gone (retire by generation). Counts as
    /// one of the step's blocks.
    Retire(u32),
}

impl Change {
    pub fn blk(&self) -> u32 {
        match self {
            Change::Write { blk, .. } | Change::Add { blk, .. } | Change::Retire(blk) => *blk,
        }
    }
}

/// Pages as the hash path sees them. The glue implements this over buffers
/// and GenericXLog; [`MemPool`] is the in-memory one for tests.
pub trait HashPages {
    /// Body bytes of every page ([`BODY_CAP`] on PostgreSQL).
    fn body_cap(&self) -> usize;
    /// A block to write in a later step (new or recycled). Its content is
    /// undefined until a step writes it; until then it is an orphan.
    fn alloc(&mut self) -> Result<u32>;
    /// A readable body: on PostgreSQL a guard holding the buffer pin and
    /// share lock, released on drop; in memory a plain slice. The hash path
    /// holds at most one guard at a time and drops it before `apply`.
    type Page<'a>: std::ops::Deref<Target = [u8]>
    where
        Self: 'a;
    fn read(&self, blk: u32) -> Result<Self::Page<'_>>;
    /// Applies the changes atomically (one WAL record): at most
    /// [`MAX_STEP_PAGES`] changes, on distinct blocks.
    fn apply(&mut self, step: Vec<Change>) -> Result<()>;
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Slot {
    Free,
    Live(Vec<u8>),
    /// Retired: still readable (a reader may be on it), not reusable until
    /// `recycle_retired`.
    Retired(Vec<u8>),
}

/// In-memory pool. Records the number of steps and the largest step; can
/// simulate a crash after N more steps (that step and all later ones fail
/// with [`Error::Crashed`] and change nothing).
#[derive(Clone, Debug)]
pub struct MemPool {
    cap: usize,
    pages: Vec<Slot>,
    free: Vec<u32>,
    pub steps: u64,
    pub max_step_pages: usize,
    crash_at: Option<u64>,
    pub crashed: bool,
}

impl MemPool {
    pub fn new(body_cap: usize) -> Self {
        MemPool { cap: body_cap, pages: Vec::new(), free: Vec::new(), steps: 0, max_step_pages: 0, crash_at: None, crashed: false }
    }

    /// Lets `n` more steps through, then "crashes": every later step fails.
    pub fn crash_after(&mut self, n: u64) {
        self.crash_at = Some(self.steps + n);
    }

    /// The restart after a crash: steps go through again.
    pub fn restart(&mut self) {
        self.crash_at = None;
        self.crashed = false;
    }

    /// Makes every retired block reusable (no reader can be on it anymore).
    pub fn recycle_retired(&mut self) -> usize {
        let mut n = 0;
        for (i, s) in self.pages.iter_mut().enumerate() {
            if matches!(s, Slot::Retired(_)) {
                *s = Slot::Free;
                self.free.push(i as u32);
                n += 1;
            }
        }
        n
    }

    /// The orphan sweep: frees every live block not in `reachable` (pages a
    /// crash left allocated but unlinked). Returns them.
    pub fn reclaim_orphans(&mut self, reachable: &[u32]) -> Vec<u32> {
        let keep: std::collections::HashSet<u32> = reachable.iter().copied().collect();
        let mut out = Vec::new();
        for (i, s) in self.pages.iter_mut().enumerate() {
            if matches!(s, Slot::Live(_)) && !keep.contains(&(i as u32)) {
                *s = Slot::Free;
                self.free.push(i as u32);
                out.push(i as u32);
            }
        }
        out
    }

    /// Blocks allocated and not retired.
    pub fn live_blocks(&self) -> Vec<u32> {
        (0..self.pages.len() as u32).filter(|&i| matches!(self.pages[i as usize], Slot::Live(_))).collect()
    }

    /// Blocks retired and not yet recycled.
    pub fn retired_blocks(&self) -> Vec<u32> {
        (0..self.pages.len() as u32).filter(|&i| matches!(self.pages[i as usize], Slot::Retired(_))).collect()
    }

    /// Mutable access to a live page body, for corruption tests.
    pub fn body_mut(&mut self, blk: u32) -> Option<&mut Vec<u8>> {
        match self.pages.get_mut(blk as usize) {
            Some(Slot::Live(b)) => Some(b),
            _ => None,
        }
    }
}

impl HashPages for MemPool {
    fn body_cap(&self) -> usize {
        self.cap
    }

    fn alloc(&mut self) -> Result<u32> {
        if let Some(b) = self.free.pop() {
            self.pages[b as usize] = Slot::Live(vec![0; self.cap]);
            return Ok(b);
        }
        if self.pages.len() >= NO_BLOCK as usize {
            return Err(Error::Pool("out of blocks".into()));
        }
        self.pages.push(Slot::Live(vec![0; self.cap]));
        Ok((self.pages.len() - 1) as u32)
    }

    type Page<'a> = &'a [u8];

    fn read(&self, blk: u32) -> Result<&[u8]> {
        match self.pages.get(blk as usize) {
            Some(Slot::Live(b)) | Some(Slot::Retired(b)) => Ok(b.as_slice()),
            _ => Err(Error::Corrupt { blk, kind: PageKind::Block, why: "link to a block that is not in use" }),
        }
    }

    fn apply(&mut self, step: Vec<Change>) -> Result<()> {
        if self.crash_at.is_some_and(|c| self.steps >= c) {
            self.crashed = true;
            return Err(Error::Crashed);
        }
        if step.is_empty() {
            return Err(Error::BadInput("empty step"));
        }
        if step.len() > MAX_STEP_PAGES {
            return Err(Error::BadInput("step changes more than four pages"));
        }
        let mut blks: Vec<u32> = step.iter().map(Change::blk).collect();
        blks.sort_unstable();
        blks.dedup();
        if blks.len() != step.len() {
            return Err(Error::BadInput("step changes a page twice"));
        }
        // Check everything first: a step is all or nothing.
        for c in &step {
            let live = matches!(self.pages.get(c.blk() as usize), Some(Slot::Live(_)));
            match c {
                Change::Write { body, .. } if body.len() != self.cap => return Err(Error::BadInput("page body of the wrong size")),
                Change::Write { .. } | Change::Add { .. } if !live => return Err(Error::BadInput("write to a block that is not live")),
                Change::Retire(_) if !live => return Err(Error::BadInput("retire of a block that is not live")),
                _ => {}
            }
        }
        // Adds are computed before anything changes, so a bad one fails the
        // whole step.
        let mut step = step;
        for c in step.iter_mut() {
            if let Change::Add { blk, adds } = c {
                let Some(Slot::Live(old)) = self.pages.get(*blk as usize) else { unreachable!("checked live above") };
                let body = super::page::apply_adds(old, adds).map_err(|e| e.at(*blk))?;
                *c = Change::Write { blk: *blk, body };
            }
        }
        self.steps += 1;
        self.max_step_pages = self.max_step_pages.max(step.len());
        for c in step {
            match c {
                Change::Write { blk, body } => self.pages[blk as usize] = Slot::Live(body),
                Change::Add { .. } => unreachable!("made a write above"),
                Change::Retire(blk) => {
                    let s = std::mem::replace(&mut self.pages[blk as usize], Slot::Free);
                    if let Slot::Live(b) = s {
                        self.pages[blk as usize] = Slot::Retired(b);
                    }
                }
            }
        }
        Ok(())
    }
}
