//! HOT chains inside a hybrid page (heap's heap-only tuples, README "HOT").
//!
//! An UPDATE that changes no indexed column and finds room in the old
//! version's extent makes the new version *heap-only*: it gets no index
//! entries, and the old version is marked HOT-updated with a link (`ctid`)
//! to it. Index entries point at the chain's **root** slot; a fetch walks
//! the chain from there. When compaction removes the root while later
//! members live, the root's slot becomes a `Redirect` to the first live
//! member, so index entries keep leading to the row; removed heap-only
//! members have no index entries and become `Unused` at once.
//!
//! The core does not interpret MVCC fields: the glue describes each
//! version by a [`ChainLink`] (from heap's infomask bits and xids) and
//! this module does the chain algebra: [`Chains::roots`] for index builds
//! (heap_get_root_tuples) and [`Chains::resolve`] for compaction
//! (heap_prune_chain's redirect / unused / dead decisions).

use std::collections::BTreeMap;

/// What the glue reads from one version's MVCC fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChainLink {
    /// No index entry points at this version's slot (HEAP_ONLY_TUPLE).
    pub heap_only: bool,
    /// The slot of the next chain member if this version was HOT-updated
    /// (HEAP_HOT_UPDATED with a valid updater, successor in this extent).
    pub next: Option<u16>,
    /// The inserting transaction.
    pub xmin: u32,
    /// The transaction that updated this version (valid when `next` is).
    pub updater: u32,
}

/// A set of slots of one page, one bit per slot: compaction asks of every
/// version of an extent (a few thousand) whether it goes, and walks every
/// chain; ordered trees made that a fifth of a compaction's time.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SlotSet {
    words: Vec<u64>,
}

impl SlotSet {
    pub fn new() -> SlotSet {
        SlotSet::default()
    }
    /// Adds `slot`; false if it was there.
    pub fn insert(&mut self, slot: u16) -> bool {
        let (w, bit) = (slot as usize / 64, 1u64 << (slot % 64));
        if w >= self.words.len() {
            self.words.resize(w + 1, 0);
        }
        let had = self.words[w] & bit != 0;
        self.words[w] |= bit;
        !had
    }
    pub fn contains(&self, slot: u16) -> bool {
        self.words.get(slot as usize / 64).is_some_and(|w| w & (1u64 << (slot % 64)) != 0)
    }
    /// The slots in ascending order.
    pub fn iter(&self) -> impl Iterator<Item = u16> + '_ {
        self.words.iter().enumerate().flat_map(|(i, &w)| {
            let mut rest = w;
            std::iter::from_fn(move || {
                if rest == 0 {
                    return None;
                }
                let b = rest.trailing_zeros();
                rest &= rest - 1;
                Some((i * 64 + b as usize) as u16)
            })
        })
    }
}

impl FromIterator<u16> for SlotSet {
    fn from_iter<I: IntoIterator<Item = u16>>(it: I) -> SlotSet {
        let mut s = SlotSet::new();
        for slot in it {
            s.insert(slot);
        }
        s
    }
}

/// The chains of one page version: every version's link and every
/// redirect entry, indexed by slot.
#[derive(Clone, Debug, Default)]
pub struct Chains {
    links: Vec<Option<ChainLink>>,
    redirects: Vec<Option<u16>>,
}

/// What compaction does to the slots of chains whose members it removes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Resolution {
    /// Removed roots whose whole chain is gone (and redirects left with no
    /// live member): `Dead` until VACUUM has removed their index entries.
    pub dead: Vec<u16>,
    /// Removed heap-only versions: no index entry names them, so their
    /// slots are free at once.
    pub unused: Vec<u16>,
    /// Root slots (removed roots, or redirects whose target went) that now
    /// lead to the first live member of their chain.
    pub redirects: Vec<(u16, u16)>,
    /// Versions the oracle would remove but that must stay: an earlier
    /// member of their chain stays, and a walk must still reach them.
    pub kept: Vec<u16>,
    /// Removed versions that leave no `Dead` slot behind (the unused
    /// heap-only ones and the redirected roots): gone for good, as heap's
    /// pruning reclaims a tuple without leaving an LP_DEAD item, so they
    /// no longer count as dead tuples for autovacuum.
    pub reclaimed: usize,
}

/// Chains longer than this are corrupt (a cycle): a page has fewer slots.
const MAX_CHAIN: usize = 1 << 16;

/// Chains up to this long are checked for a cycle by looking through the
/// members so far; longer ones (a hot row's versions) with a `SlotSet`.
const SHORT_CHAIN: usize = 16;

fn put<T>(v: &mut Vec<Option<T>>, slot: u16, value: T) {
    if slot as usize >= v.len() {
        v.resize_with(slot as usize + 1, || None);
    }
    v[slot as usize] = Some(value);
}

impl Chains {
    pub fn new() -> Chains {
        Chains::default()
    }
    pub fn add_version(&mut self, slot: u16, link: ChainLink) {
        put(&mut self.links, slot, link);
    }
    pub fn add_redirect(&mut self, slot: u16, target: u16) {
        put(&mut self.redirects, slot, target);
    }

    fn link(&self, slot: u16) -> Option<ChainLink> {
        self.links.get(slot as usize).copied().flatten()
    }

    fn redirect(&self, slot: u16) -> Option<u16> {
        self.redirects.get(slot as usize).copied().flatten()
    }

    /// The members of the chain starting at `start` (a root version or a
    /// redirect), in chain order. A walk stops where the chain ends, where
    /// the next slot holds no heap-only version, or where the next
    /// version's xmin is not its predecessor's updater (the slot was
    /// reused), as heap_hot_search_buffer stops.
    pub fn walk(&self, start: u16) -> Vec<u16> {
        let mut out = Vec::new();
        let mut cur = match self.redirect(start) {
            Some(t) => match self.link(t) {
                Some(l) if l.heap_only => t,
                _ => return out,
            },
            None => match self.link(start) {
                Some(l) if !l.heap_only => start,
                _ => return out,
            },
        };
        let mut seen: Option<SlotSet> = None;
        loop {
            let repeated = match &mut seen {
                Some(s) => !s.insert(cur),
                None => out.contains(&cur),
            };
            if repeated || out.len() >= MAX_CHAIN {
                break;
            }
            out.push(cur);
            if seen.is_none() && out.len() >= SHORT_CHAIN {
                seen = Some(out.iter().copied().collect());
            }
            let l = self.link(cur).expect("chain member has a link");
            let Some(n) = l.next else { break };
            match self.link(n) {
                Some(nl) if nl.heap_only && nl.xmin == l.updater => cur = n,
                _ => break,
            }
        }
        out
    }

    /// Chain starts: every version that is not heap-only, then every
    /// redirect, each in slot order.
    fn starts(&self) -> impl Iterator<Item = u16> + '_ {
        let roots = self.links.iter().enumerate().filter(|(_, l)| l.is_some_and(|l| !l.heap_only)).map(|(s, _)| s as u16);
        let redirects = self.redirects.iter().enumerate().filter(|(_, r)| r.is_some()).map(|(s, _)| s as u16);
        roots.chain(redirects)
    }

    /// The root slot of every version reachable from a chain start (a root
    /// is its own root). Heap-only versions no chain reaches have none.
    pub fn roots(&self) -> BTreeMap<u16, u16> {
        let mut out = BTreeMap::new();
        for s in self.starts() {
            for m in self.walk(s) {
                out.insert(m, s);
            }
        }
        out
    }

    /// Compaction's decisions for the versions in `removed` (the oracle's
    /// "dead to everyone"): only a prefix of a chain goes. Its root slot
    /// becomes a redirect to the first member that stays, or `Dead` when
    /// none does; its heap-only members become `Unused`. Later members the
    /// oracle would remove stay, since a walk from the root must still
    /// reach every member after a live one. Removed heap-only versions no
    /// chain reaches become `Unused`; other removed versions `Dead`.
    pub fn resolve(&self, removed: &SlotSet) -> Resolution {
        let mut r = Resolution::default();
        let mut handled = SlotSet::new();
        for s in self.starts() {
            let members = self.walk(s);
            let is_redirect = self.redirect(s).is_some();
            let first_live = members.iter().position(|&m| !removed.contains(m));
            let cut = first_live.unwrap_or(members.len());
            for (i, &m) in members.iter().enumerate() {
                handled.insert(m);
                if i < cut {
                    if m != s {
                        r.unused.push(m);
                    }
                } else if removed.contains(m) {
                    r.kept.push(m);
                }
            }
            match (first_live, is_redirect) {
                // The root itself stays, or the redirect still names the
                // first live member.
                (Some(0), _) => {}
                (Some(i), _) => {
                    r.redirects.push((s, members[i]));
                    if !is_redirect {
                        r.reclaimed += 1;
                    }
                }
                (None, true) => r.dead.push(s),
                (None, false) => {
                    if removed.contains(s) {
                        r.dead.push(s);
                    }
                }
            }
            // A removed root version with an empty walk cannot happen (a
            // root's walk holds at least itself).
        }
        for m in removed.iter() {
            if handled.contains(m) {
                continue;
            }
            match self.link(m) {
                Some(l) if l.heap_only => r.unused.push(m),
                _ => r.dead.push(m),
            }
        }
        r.reclaimed += r.unused.len();
        r.dead.sort_unstable();
        r.unused.sort_unstable();
        r.redirects.sort_unstable();
        r.kept.sort_unstable();
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root(next: Option<u16>, xmin: u32, updater: u32) -> ChainLink {
        ChainLink { heap_only: false, next, xmin, updater }
    }
    fn only(next: Option<u16>, xmin: u32, updater: u32) -> ChainLink {
        ChainLink { heap_only: true, next, xmin, updater }
    }
    fn set(v: &[u16]) -> SlotSet {
        v.iter().copied().collect()
    }

    /// 0 -> 3 -> 5 (xids 10 -> 11 -> 12), plus an unrelated root 1.
    fn chain() -> Chains {
        let mut c = Chains::new();
        c.add_version(0, root(Some(3), 10, 11));
        c.add_version(3, only(Some(5), 11, 12));
        c.add_version(5, only(None, 12, 0));
        c.add_version(1, root(None, 7, 0));
        c
    }

    #[test]
    fn walks_and_roots() {
        let c = chain();
        assert_eq!(c.walk(0), vec![0, 3, 5]);
        assert_eq!(c.walk(3), Vec::<u16>::new(), "a heap-only version starts no chain");
        let r = c.roots();
        assert_eq!(r.get(&5), Some(&0));
        assert_eq!(r.get(&1), Some(&1));
    }

    #[test]
    fn reused_slot_ends_the_chain() {
        let mut c = chain();
        // Slot 5 now holds an unrelated heap-only version (xmin 99).
        c.add_version(5, only(None, 99, 0));
        assert_eq!(c.walk(0), vec![0, 3]);
        assert!(!c.roots().contains_key(&5));
    }

    #[test]
    fn removing_a_prefix_redirects_the_root() {
        let c = chain();
        let r = c.resolve(&set(&[0, 3]));
        assert_eq!(r, Resolution { dead: vec![], unused: vec![3], redirects: vec![(0, 5)], kept: vec![], reclaimed: 2 });
        // Later: the redirect's target goes too.
        let mut c2 = Chains::new();
        c2.add_redirect(0, 5);
        c2.add_version(5, only(Some(7), 12, 13));
        c2.add_version(7, only(None, 13, 0));
        assert_eq!(c2.resolve(&set(&[5])).redirects, vec![(0, 7)]);
        assert_eq!(c2.resolve(&set(&[5])).unused, vec![5]);
        assert_eq!(c2.resolve(&set(&[5])).reclaimed, 1, "a retargeted redirect reclaims its old target only");
        let all = c2.resolve(&set(&[5, 7]));
        assert_eq!((all.dead, all.unused, all.redirects, all.reclaimed), (vec![0], vec![5, 7], vec![], 2));
        // A redirect whose target is still there is left alone.
        assert_eq!(c2.resolve(&set(&[])), Resolution::default());
    }

    #[test]
    fn whole_chain_dead_and_members_after_a_live_one() {
        let c = chain();
        let r = c.resolve(&set(&[0, 3, 5]));
        assert_eq!((r.dead, r.unused, r.reclaimed), (vec![0], vec![3, 5], 2), "the dead root waits for VACUUM");
        // The root stays (say its updater aborted... or a snapshot needs
        // it): a removed member after it must stay reachable.
        let r = c.resolve(&set(&[3]));
        assert_eq!(r.kept, vec![3]);
        assert!(r.unused.is_empty() && r.dead.is_empty() && r.redirects.is_empty());
    }

    #[test]
    fn orphans() {
        let mut c = chain();
        // An aborted HOT update's new version: its predecessor's link was
        // never set (or the xmin does not match).
        c.add_version(9, only(None, 50, 0));
        c.add_version(2, root(None, 8, 0));
        let r = c.resolve(&set(&[9, 2]));
        assert_eq!((r.dead, r.unused), (vec![2], vec![9]));
    }

    #[test]
    fn slot_sets() {
        let mut s = SlotSet::new();
        assert!(s.insert(300) && s.insert(0) && s.insert(63) && s.insert(64));
        assert!(!s.insert(63));
        assert!(s.contains(300) && s.contains(64) && !s.contains(65) && !s.contains(60000));
        assert_eq!(s.iter().collect::<Vec<_>>(), vec![0, 63, 64, 300]);
        assert_eq!(SlotSet::new().iter().count(), 0);
    }

    #[test]
    fn long_chains_and_their_cycles() {
        // 0 -> 1 -> ... -> 39, then 39 -> 20 (a cycle past SHORT_CHAIN).
        let mut c = Chains::new();
        c.add_version(0, root(Some(1), 1, 2));
        for s in 1..40u16 {
            let next = if s == 39 { 20 } else { s + 1 };
            c.add_version(s, only(Some(next), 2, 2));
        }
        assert_eq!(c.walk(0), (0..40).collect::<Vec<u16>>());
        let r = c.resolve(&(0..30).collect());
        assert_eq!(r.redirects, vec![(0, 30)]);
        assert_eq!(r.unused, (1..30).collect::<Vec<u16>>());
    }

    #[test]
    fn cycles_terminate() {
        let mut c = Chains::new();
        c.add_version(0, root(Some(1), 1, 2));
        c.add_version(1, only(Some(2), 2, 2));
        c.add_version(2, only(Some(1), 2, 2));
        assert_eq!(c.walk(0), vec![0, 1, 2]);
        let _ = c.resolve(&set(&[0, 1, 2]));
    }
}
