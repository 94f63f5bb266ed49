//! Views: the snapshots that together give the state at one block.
//!
//! A view is a base (a full snapshot at block B: absent means balance 0)
//! and deltas above it, each holding the state at its block of every
//! account changed since the block of the level below (brief section 4).
//! A lookup asks every snapshot of the view; the freshest hit wins.
//! Server and proxy compute views with this one function, from manifests
//! alone, so a client never trusts a server's word on how levels chain.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};

// The type is the API's (the catalog lists views); how they are made is here.
use crate::api::CatalogEntry;
pub use crate::api::View;
#[cfg(test)]
use crate::manifest::KindTag;
use crate::manifest::{SnapshotId, SnapshotKind};

/// Most levels a view may have: what one multi-snapshot request carries
/// (a lookup asks every level at once). A delta that would make a deeper
/// view makes none.
pub const MAX_DEPTH: usize = crate::multi::MAX_PARTS;

/// One way to the state at a block: a snapshot on top of the view below
/// it (a delta's parent), without copying that view.
#[derive(Clone, Copy, Debug)]
struct Node {
    id: SnapshotId,
    /// Its entry, in the order [`Views::build`] reads them.
    entry: u32,
    parent: Option<u32>,
    depth: u16,
    complete: bool,
}

/// The best view at every block some snapshot can answer for, kept as a
/// tree of levels (each view points at the view it stands on), so that a
/// catalog of n snapshots takes O(n) memory however deep its chains, and
/// a view is spelled out only when asked for.
#[derive(Clone, Debug, Default)]
pub struct Views {
    nodes: Vec<Node>,
    /// The best node at each `(chain, block)`.
    best: BTreeMap<(u64, u64), u32>,
    /// The snapshots that stand in some view (the best at their block or
    /// not: a piece of a merge still chains).
    chained: BTreeSet<SnapshotId>,
}

impl Views {
    /// The views the entries form. A delta counts only on top of a
    /// complete view at its `from` block, and only while the view stays
    /// within [`MAX_DEPTH`] levels; a delta whose parent is missing makes
    /// no view. Levels must chain and agree ([`chains_onto`]): a delta
    /// that names another parent block hash than the level below has, or
    /// claims other storage than it (a listed-only delta on a whole-state
    /// base), makes no view. O(n log n) time, O(n) memory.
    pub fn build(entries: &[CatalogEntry]) -> Views {
        let mut order: Vec<&CatalogEntry> = entries.iter().collect();
        order.sort_by_key(|e| (e.manifest.chain_id, e.manifest.block_number, e.id));
        let mut views = Views::default();
        for (i, e) in order.iter().enumerate() {
            let m = &e.manifest;
            let (parent, depth, complete) = match m.kind {
                // A hot tier stands on a level, in no view of its own.
                SnapshotKind::Hot { .. } => continue,
                SnapshotKind::Delta { from } => {
                    let Some(&below) = views.best.get(&(m.chain_id, from)) else {
                        continue;
                    };
                    let b = views.nodes[below as usize];
                    if !b.complete || from >= m.block_number || b.depth as usize >= MAX_DEPTH {
                        continue;
                    }
                    if !chains_onto(m, &order[b.entry as usize].manifest) {
                        continue;
                    }
                    (Some(below), b.depth + 1, true)
                }
                kind => (None, 1, kind.is_complete()),
            };
            let node = views.nodes.len() as u32;
            views.chained.insert(e.id);
            views.nodes.push(Node {
                id: e.id,
                entry: i as u32,
                parent,
                depth,
                complete,
            });
            let better = match views.best.get(&(m.chain_id, m.block_number)) {
                Some(&held) => views.rank(node, held) == Ordering::Less,
                None => true,
            };
            if better {
                views.best.insert((m.chain_id, m.block_number), node);
            }
        }
        views
    }

    /// Better views first: complete ones, then those with fewer levels
    /// (fewer queries per lookup), then by ids so the choice is stable.
    fn rank(&self, a: u32, b: u32) -> Ordering {
        let (na, nb) = (self.nodes[a as usize], self.nodes[b as usize]);
        (!na.complete, na.depth)
            .cmp(&(!nb.complete, nb.depth))
            .then_with(|| self.ids(a).cmp(&self.ids(b)))
    }

    /// The ids of a node's view, base first.
    fn ids(&self, node: u32) -> Vec<SnapshotId> {
        let mut ids = Vec::with_capacity(self.nodes[node as usize].depth as usize);
        let mut at = Some(node);
        while let Some(n) = at {
            let n = self.nodes[n as usize];
            ids.push(n.id);
            at = n.parent;
        }
        ids.reverse();
        ids
    }

    fn view(&self, (chain_id, block): (u64, u64), node: u32) -> View {
        View {
            chain_id,
            block,
            snapshots: self.ids(node),
            complete: self.nodes[node as usize].complete,
        }
    }

    /// The best view at `block` of `chain`.
    pub fn at(&self, chain_id: u64, block: u64) -> Option<View> {
        let node = *self.best.get(&(chain_id, block))?;
        Some(self.view((chain_id, block), node))
    }

    /// The newest view of a chain (`None`: any chain), the best at its block.
    pub fn newest(&self, chain_id: Option<u64>) -> Option<View> {
        self.best
            .iter()
            .filter(|((c, _), _)| chain_id.is_none_or(|want| *c == want))
            .max_by(|(a, na), (b, nb)| a.1.cmp(&b.1).then(self.rank(**nb, **na)))
            .map(|(at, node)| self.view(*at, *node))
    }

    /// The blocks a chain (`None`: any chain) has a view at, oldest first.
    pub fn blocks(&self, chain_id: Option<u64>) -> Vec<u64> {
        let mut blocks: Vec<u64> = self
            .best
            .keys()
            .filter(|(c, _)| chain_id.is_none_or(|want| *c == want))
            .map(|(_, b)| *b)
            .collect();
        blocks.sort_unstable();
        blocks
    }

    /// Every view, spelled out, by chain then block.
    pub fn all(&self) -> Vec<View> {
        self.best
            .iter()
            .map(|(at, node)| self.view(*at, *node))
            .collect()
    }

    pub fn is_empty(&self) -> bool {
        self.best.is_empty()
    }

    /// Whether a snapshot stands in some view.
    pub fn holds(&self, id: &SnapshotId) -> bool {
        self.chained.contains(id)
    }
}

/// The best view at every block some snapshot can answer for, per chain,
/// oldest block first ([`Views::build`], spelled out).
pub fn views(entries: &[CatalogEntry]) -> Vec<View> {
    Views::build(entries).all()
}

/// The newest view of a chain (`None`: any chain), the best at its block.
pub fn newest(views: &[View], chain_id: Option<u64>) -> Option<&View> {
    let rank = |v: &View| (!v.complete, v.snapshots.len(), v.snapshots.clone());
    views
        .iter()
        .filter(|v| chain_id.is_none_or(|c| v.chain_id == c))
        .max_by(|a, b| a.block.cmp(&b.block).then(rank(b).cmp(&rank(a))))
}

/// The hot tier a view reads, of `hots` (any entries: others are
/// skipped), and the index among `levels` (the view's manifests, base
/// first) of the level it stands on: the newest hot tier of the view's
/// chain at the block of one of its levels, naming that level's block
/// hash (where both are known, as [`chains_onto`]) and claiming the same
/// storage. It holds the state at that block, so it answers under the
/// levels above it and over the level it stands on and those below. A
/// hot tier of another fork names another hash and stands on nothing.
pub fn hot_for<'a>(
    levels: &[&crate::manifest::Manifest],
    hots: impl IntoIterator<Item = &'a CatalogEntry>,
) -> Option<(&'a CatalogEntry, usize)> {
    hots.into_iter()
        .filter(|e| matches!(e.manifest.kind, SnapshotKind::Hot { .. }))
        .filter_map(|e| {
            let on = levels.iter().rposition(|l| stands_on(&e.manifest, l))?;
            Some((e, on))
        })
        .max_by_key(|(e, on)| (*on, e.manifest.block_number))
}

/// Whether a hot tier stands on `level`: the same chain, block and storage
/// claim, and no other block hash or state root (where both are known).
pub fn stands_on(hot: &crate::manifest::Manifest, level: &crate::manifest::Manifest) -> bool {
    let differ = |a: Option<alloy_primitives::B256>, b: Option<alloy_primitives::B256>| {
        names_parent(a, b) == Some(false)
    };
    hot.chain_id == level.chain_id
        && hot.block_number == level.block_number
        && hot.storage == level.storage
        && !differ(hot.block_hash, level.block_hash)
        && !differ(hot.state_root, level.state_root)
}

/// Two runs sorted by key merged into one, in key order: a key in both
/// takes `newer`'s value (the freshest level wins, as in a lookup). What a
/// merge of levels keeps, on the snapshotter's records and on the
/// proxy's tables alike.
pub fn newest_of<T, K: Ord>(
    older: impl Iterator<Item = T>,
    newer: impl Iterator<Item = T>,
    key: impl Fn(&T) -> K,
) -> impl Iterator<Item = T> {
    let (mut older, mut newer) = (older.peekable(), newer.peekable());
    std::iter::from_fn(move || match (older.peek(), newer.peek()) {
        (Some(o), Some(n)) => match key(o).cmp(&key(n)) {
            std::cmp::Ordering::Less => older.next(),
            std::cmp::Ordering::Greater => newer.next(),
            std::cmp::Ordering::Equal => {
                older.next();
                newer.next()
            }
        },
        (Some(_), None) => older.next(),
        (None, _) => newer.next(),
    })
}

/// Whether `delta` may stand on `below` (the top level of the view at
/// its `from` block): the parent block hash it names is `below`'s block
/// hash (where both are known: a base from a genesis file with London at
/// block 0 names none, a delta of an older build no parent; an attested
/// level always has its hash), and it claims the same storage (the
/// contracts held, or the whole state), so that a view is whole only if
/// every level says so.
pub fn chains_onto(delta: &crate::manifest::Manifest, below: &crate::manifest::Manifest) -> bool {
    names_parent(delta.parent_hash, below.block_hash) != Some(false)
        && delta.storage == below.storage
}

/// Whether a delta that names `parent` as its parent block hash stands on
/// a level of block hash `below`; `None` where either is unknown. The one
/// rule for clients, the follower and its repairs.
pub fn names_parent(
    parent: Option<alloy_primitives::B256>,
    below: Option<alloy_primitives::B256>,
) -> Option<bool> {
    Some(parent? == below?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(block: u64, kind: SnapshotKind) -> CatalogEntry {
        crate::testing::entry(1, block, kind, &[])
    }

    fn ids(v: &View) -> Vec<String> {
        v.snapshots.iter().map(|id| id.url_form()).collect()
    }

    #[test]
    fn deltas_chain_on_the_base_and_merges_shorten_views() {
        let d = |from, block| entry(block, SnapshotKind::Delta { from });
        let entries = vec![
            entry(10, SnapshotKind::Full),
            d(10, 11),
            d(11, 12),
            d(12, 13),
            d(10, 12), // a merge of the first two
            d(20, 21), // parent missing: no view
        ];
        let all = views(&entries);
        let at = |b: u64| all.iter().find(|v| v.block == b);
        assert_eq!(ids(at(10).unwrap()), ["1-10-full"]);
        assert_eq!(ids(at(11).unwrap()), ["1-10-full", "1-11-delta-10"]);
        // Two ways to block 12: the merged delta wins (one level fewer).
        assert_eq!(ids(at(12).unwrap()), ["1-10-full", "1-12-delta-10"]);
        assert_eq!(
            ids(at(13).unwrap()),
            ["1-10-full", "1-12-delta-10", "1-13-delta-12"]
        );
        assert!(at(21).is_none());
        assert!(all.iter().all(|v| v.complete));
        assert_eq!(newest(&all, Some(1)).unwrap().block, 13);
        assert!(newest(&all, Some(2)).is_none());
    }

    #[test]
    fn levels_chain_by_parent_hash_and_agree_on_the_storage_claim() {
        use alloy_primitives::B256;
        let hash = |b: u64| B256::with_last_byte(b as u8);
        let level = |block: u64, kind: SnapshotKind, parent: Option<u64>| {
            let mut e = entry(block, kind);
            e.manifest.block_hash = Some(hash(block));
            e.manifest.parent_hash = parent.map(hash);
            e.manifest.storage = crate::storage::PrivateStorage::whole_state();
            e
        };
        let base = level(10, SnapshotKind::Full, None);
        let chained = level(11, SnapshotKind::Delta { from: 10 }, Some(10));
        let all = views(&[base.clone(), chained.clone()]);
        assert_eq!(all.len(), 2, "a delta naming the base's hash chains");
        // A delta of another fork: it names another block 10.
        let mut orphan_top = chained.clone();
        orphan_top.manifest.parent_hash = Some(hash(99));
        assert_eq!(views(&[base.clone(), orphan_top]).len(), 1);
        // A listed-only delta on a whole-state base: the view would read
        // every slot it does not list as zero.
        let mut listed = chained.clone();
        listed.manifest.storage = Default::default();
        let all = views(&[base.clone(), listed]);
        assert_eq!(all.len(), 1, "no view at 11");
        assert_eq!(all[0].block, 10);
        // A delta of an older build names no parent, a base from a
        // genesis file may name no hash: chained by block.
        let mut older = chained.clone();
        older.manifest.parent_hash = None;
        assert_eq!(views(&[base.clone(), older]).len(), 2);
        let mut unhashed = base;
        unhashed.manifest.block_hash = None;
        assert_eq!(views(&[unhashed, chained]).len(), 2);
    }

    #[test]
    fn a_hot_tier_stands_on_the_newest_level_of_its_block_and_hash() {
        use alloy_primitives::B256;
        let hash = |b: u64| B256::with_last_byte(b as u8);
        let hashed = |block: u64, kind: SnapshotKind| {
            let mut e = entry(block, kind);
            e.manifest.block_hash = Some(hash(block));
            e
        };
        let hot = |block: u64| {
            hashed(
                block,
                SnapshotKind::Hot {
                    window: 8,
                    min_senders: 3,
                    max_mib: 1,
                },
            )
        };
        let base = hashed(10, SnapshotKind::Full);
        let delta = hashed(12, SnapshotKind::Delta { from: 10 });
        let top = hashed(13, SnapshotKind::Delta { from: 12 });
        let entries = vec![base.clone(), delta.clone(), top.clone(), hot(10), hot(12)];
        // Hot tiers make no view of their own.
        let all = views(&entries);
        assert_eq!(all.len(), 3);
        assert!(all
            .iter()
            .all(|v| v.snapshots.iter().all(|id| id.kind != KindTag::Hot)));
        let levels = [&base.manifest, &delta.manifest, &top.manifest];
        let (found, on) = hot_for(&levels, &entries).unwrap();
        assert_eq!((found.manifest.block_number, on), (12, 1), "the newest");
        // The view at 10 (the base alone) reads the base's.
        let (found, on) = hot_for(&levels[..1], &entries).unwrap();
        assert_eq!((found.manifest.block_number, on), (10, 0));
        // Another fork's block 12, another chain, another storage claim,
        // a block no level has: none of them stands.
        let mut fork = hot(12);
        fork.manifest.block_hash = Some(hash(99));
        let mut chain = hot(12);
        chain.manifest.chain_id = 2;
        let mut storage = hot(12);
        storage.manifest.storage = crate::storage::PrivateStorage::whole_state();
        let mut root = hot(12);
        root.manifest.state_root = Some(hash(7));
        let mut levels_rooted = delta.clone();
        levels_rooted.manifest.state_root = Some(hash(8));
        let rooted = [&base.manifest, &levels_rooted.manifest];
        assert!(
            hot_for(&rooted, std::slice::from_ref(&root)).is_none(),
            "another state root"
        );
        let strays = [fork, chain, storage, hot(11)];
        assert!(hot_for(&levels, &strays).is_none());
        assert!(hot_for(&[], &entries).is_none());
    }

    #[test]
    fn incomplete_snapshots_make_one_level_views_and_carry_no_delta() {
        let entries = vec![
            entry(5, SnapshotKind::Active { window: 4 }),
            entry(6, SnapshotKind::Delta { from: 5 }),
            entry(5, SnapshotKind::Full),
        ];
        let all = views(&entries);
        // At 5 the full snapshot beats the active set; the delta chains on it.
        assert_eq!(ids(&all[0]), ["1-5-full"]);
        assert_eq!(ids(&all[1]), ["1-5-full", "1-6-delta-5"]);
        let only_active = views(&entries[..2]);
        assert_eq!(only_active.len(), 1);
        assert!(!only_active[0].complete);
    }

    #[test]
    fn chains_deeper_than_a_request_make_no_view_and_cost_linear_memory() {
        let n = 10_000u64;
        let mut entries = vec![entry(0, SnapshotKind::Full)];
        entries.extend((1..=n).map(|b| entry(b, SnapshotKind::Delta { from: b - 1 })));
        let built = Views::build(&entries);
        assert_eq!(built.nodes.len(), MAX_DEPTH);
        let newest = built.newest(Some(1)).unwrap();
        assert_eq!(newest.block, MAX_DEPTH as u64 - 1);
        assert_eq!(newest.snapshots.len(), MAX_DEPTH);
        assert!(built.at(1, MAX_DEPTH as u64).is_none());
        assert_eq!(built.blocks(Some(1)).len(), MAX_DEPTH);
        // The same chain on a missing base makes nothing at all.
        assert!(Views::build(&entries[1..]).is_empty());
    }
}
