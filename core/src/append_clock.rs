//! When entries of a staged index's delta log were appended, sampled, so
//! that the age of the oldest entry not yet merged (griffin's sync lag) can
//! be told without a timestamp per entry.
//!
//! A *mark* says "the entry at delta-log position `pos` was appended no
//! earlier than `at`": the inserter reads the clock before it appends.
//! Inserters offer a mark for every append; one is kept when the newest
//! mark is at least `resolution` older, so a burst of appends costs one
//! mark. The log hands out positions in order, so the oldest unmerged
//! entry, at position `merged_upto`, was appended no earlier than the
//! newest mark at or below that position, and `oldest_unmerged` returns
//! that mark's time: the lag it gives is never less than the true one, and
//! more by about the gap between two kept marks.
//!
//! The marks live in a fixed array (shared memory, no allocation), sorted
//! by position; a mark offered out of order (another backend, which read
//! the clock later, noted a later position first) is not kept, but lowers
//! the time of the marks at or above its position, which it bounds too. Marks below
//! `merged_upto` are dropped except the newest of them (the bound for the
//! oldest unmerged entry). When the array is still full, the inner mark
//! whose removal leaves the smallest gap goes, so a backlog of any age
//! keeps marks spread over it: the error stays near 1/`MARKS` of the
//! backlog's age, or `resolution` when that is larger.
//!
//! Plain data; the caller serializes access (the engine holds the index's
//! slot lock exclusively to note, shared to read).

/// Marks kept per index.
pub const MARKS: usize = 32;

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Mark {
    /// Delta-log position of the entry.
    pub pos: u64,
    /// When it was appended (microseconds, any epoch).
    pub at: i64,
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct AppendClock {
    marks: [Mark; MARKS],
    len: u32,
    /// Whether `last_pos` holds a position (an entry was noted).
    noted: bool,
    /// The highest position noted: nothing at or above `merged_upto` is
    /// waiting when this is below it.
    last_pos: u64,
}

impl Default for AppendClock {
    fn default() -> Self {
        AppendClock { marks: [Mark::default(); MARKS], len: 0, noted: false, last_pos: 0 }
    }
}

impl AppendClock {
    /// Forgets everything (a reset slot, a rebuilt stage).
    pub fn clear(&mut self) {
        self.len = 0;
        self.noted = false;
        self.last_pos = 0;
    }

    fn marks(&self) -> &[Mark] {
        &self.marks[..self.len as usize]
    }

    /// The entry at `pos` was appended at `at`; entries below
    /// `merged_upto` are merged already. Keeps a mark when the newest one is
    /// at least `resolution` older than `at` (or there is none).
    pub fn note(&mut self, pos: u64, at: i64, merged_upto: u64, resolution: i64) {
        if !self.noted || pos > self.last_pos {
            self.last_pos = pos;
        }
        self.noted = true;
        if pos < merged_upto {
            return;
        }
        if let Some(newest) = self.marks().last() {
            if pos <= newest.pos {
                // Out of order: this entry, appended before the marked ones
                // at or above it, bounds their times too.
                let n = self.len as usize;
                for m in self.marks[..n].iter_mut().rev().take_while(|m| m.pos >= pos) {
                    m.at = m.at.min(at);
                }
                return;
            }
            if at < newest.at.saturating_add(resolution) {
                return;
            }
        }
        self.drop_merged(merged_upto);
        if self.len as usize == MARKS {
            self.thin();
        }
        self.marks[self.len as usize] = Mark { pos, at };
        self.len += 1;
    }

    /// Drops the marks below `merged_upto` but the newest of them.
    fn drop_merged(&mut self, merged_upto: u64) {
        let below = self.marks().iter().take_while(|m| m.pos <= merged_upto).count();
        if below > 1 {
            let n = self.len as usize;
            self.marks.copy_within(below - 1..n, 0);
            self.len -= (below - 1) as u32;
        }
    }

    /// Removes the inner mark whose neighbours are closest in time, so the
    /// marks stay spread over the whole backlog. The first (the bound for
    /// the oldest entry) and the last stay.
    fn thin(&mut self) {
        let m = self.marks();
        let Some(i) = (1..m.len() - 1).min_by_key(|&i| m[i + 1].at - m[i - 1].at) else { return };
        let n = self.len as usize;
        self.marks.copy_within(i + 1..n, i);
        self.len -= 1;
    }

    /// A time no later than the append of the oldest entry at or above
    /// `merged_upto`: the newest mark at or below its position, else the
    /// oldest mark (entries below every mark were not noted: a stage rebuilt
    /// from the log, see the engine's README). None when no entry at or
    /// above `merged_upto` was noted.
    pub fn oldest_unmerged(&self, merged_upto: u64) -> Option<i64> {
        if !self.noted || self.last_pos < merged_upto {
            return None;
        }
        let m = self.marks();
        let below = m.iter().take_while(|k| k.pos <= merged_upto).count();
        match below {
            0 => m.first().map(|k| k.at),
            n => Some(m[n - 1].at),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn one_mark_per_burst() {
        let mut c = AppendClock::default();
        for p in 0..100 {
            c.note(p, 1000 + p as i64, 0, 10_000);
        }
        assert_eq!(c.marks().len(), 1);
        assert_eq!(c.oldest_unmerged(0), Some(1000));
        assert_eq!(c.oldest_unmerged(50), Some(1000));
        assert_eq!(c.oldest_unmerged(100), None);
    }

    #[test]
    fn merged_marks_go_but_the_bound_stays() {
        let mut c = AppendClock::default();
        for p in 0..10 {
            c.note(p, p as i64 * 100, 0, 50);
        }
        assert_eq!(c.marks().len(), 10);
        c.note(10, 1000, 7, 50);
        assert_eq!(c.marks()[0], Mark { pos: 7, at: 700 });
        assert_eq!(c.oldest_unmerged(7), Some(700));
        assert_eq!(c.oldest_unmerged(9), Some(900));
        assert_eq!(c.oldest_unmerged(11), None);
    }

    #[test]
    fn an_out_of_order_note_keeps_no_mark() {
        let mut c = AppendClock::default();
        c.note(11, 20, 0, 1);
        c.note(10, 10, 0, 1);
        assert_eq!(c.marks(), &[Mark { pos: 11, at: 10 }]);
        assert_eq!(c.oldest_unmerged(10), Some(10));
        assert_eq!(c.oldest_unmerged(11), Some(10));
    }

    #[test]
    fn thinning_keeps_the_oldest_and_spreads_the_rest() {
        let mut c = AppendClock::default();
        for p in 0..1000u64 {
            c.note(p, p as i64 * 10, 0, 10);
        }
        assert_eq!(c.marks().len(), MARKS);
        assert_eq!(c.marks()[0].pos, 0);
        let gaps: Vec<i64> = c.marks().windows(2).map(|w| w[1].at - w[0].at).collect();
        let widest = *gaps.iter().max().unwrap();
        // 10,000 µs of appends over 32 marks: no gap wider than a few
        // times the even spread.
        assert!(widest <= 4 * 10_000 / MARKS as i64, "gaps {gaps:?}");
    }

    proptest! {
        /// Against the true append times, with notes arriving a little out
        /// of order (each backend reads the clock, appends, then notes under
        /// the lock): the oldest unmerged entry was never appended before
        /// the reported time, and the reported time trails it by no more
        /// than the widest gap between kept marks, the resolution, or the
        /// out-of-order slack.
        #[test]
        fn bound_holds(steps in proptest::collection::vec((1u64..40, 0i64..300, 0u64..4, any::<bool>()), 1..300), resolution in 1i64..200) {
            let mut c = AppendClock::default();
            let mut times: Vec<i64> = Vec::new();
            let mut now = 0i64;
            let mut merged = 0u64;
            for (burst, pause, merge, swap) in steps {
                now += pause;
                let first = times.len() as u64;
                for _ in 0..burst {
                    now += 1;
                    times.push(now);
                }
                // Notes of the burst; with `swap`, neighbours trade places.
                let mut order: Vec<u64> = (first..times.len() as u64).collect();
                if swap {
                    for pair in order.chunks_mut(2) {
                        pair.reverse();
                    }
                }
                for pos in order {
                    c.note(pos, times[pos as usize], merged, resolution);
                }
                if merge == 0 {
                    merged = times.len() as u64 - (burst / 2);
                }
                match c.oldest_unmerged(merged) {
                    None => prop_assert!(merged as usize >= times.len()),
                    Some(t) => {
                        let truth = times[merged as usize];
                        prop_assert!(t <= truth, "reported {t} after the true {truth}");
                        let widest = c.marks().windows(2).map(|w| w[1].at - w[0].at).max().unwrap_or(0);
                        prop_assert!(truth - t <= widest.max(resolution) + 2,
                            "reported {t}, true {truth}, widest gap {widest}, marks {:?}", c.marks());
                    }
                }
            }
        }
    }
}
