//! Views: the snapshots that together give the state at one block.
//!
//! A view is a base (a full snapshot at block B: absent means balance 0)
//! and deltas above it, each holding the state at its block of every
//! account changed since the block of the level below (brief section 4).
//! A lookup asks every snapshot of the view; the freshest hit wins.
//! Server and proxy compute views with this one function, from manifests
//! alone, so a client never trusts a server's word on how levels chain.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::api::CatalogEntry;
use crate::manifest::SnapshotKind;

/// The snapshots that give the state at `block`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct View {
    pub chain_id: u64,
    pub block: u64,
    /// Snapshot ids (URL form), base first, freshest last.
    pub snapshots: Vec<String>,
    /// The base is a full snapshot: an address absent from every level
    /// has balance 0 and nonce 0.
    pub complete: bool,
}

impl View {
    /// Better views first: complete ones, then those with fewer levels
    /// (fewer queries per lookup), then by id so the choice is stable.
    fn rank(&self) -> (bool, usize, &[String]) {
        (!self.complete, self.snapshots.len(), &self.snapshots)
    }

    fn better_than(&self, other: &View) -> bool {
        self.rank() < other.rank()
    }
}

/// The best view at every block some snapshot can answer for, per chain,
/// oldest block first. A delta counts only on top of a complete view at
/// its `from` block; a delta whose parent is missing makes no view.
pub fn views(entries: &[CatalogEntry]) -> Vec<View> {
    let mut sorted: Vec<&CatalogEntry> = entries.iter().collect();
    sorted.sort_by_key(|e| (e.manifest.chain_id, e.manifest.block_number, e.id.clone()));
    let mut best: BTreeMap<(u64, u64), View> = BTreeMap::new();
    for e in sorted {
        let m = &e.manifest;
        let candidate = match m.kind {
            SnapshotKind::Delta { from } => match best.get(&(m.chain_id, from)) {
                Some(below) if below.complete && from < m.block_number => {
                    let mut snapshots = below.snapshots.clone();
                    snapshots.push(e.id.clone());
                    View {
                        chain_id: m.chain_id,
                        block: m.block_number,
                        snapshots,
                        complete: true,
                    }
                }
                _ => continue,
            },
            kind => View {
                chain_id: m.chain_id,
                block: m.block_number,
                snapshots: vec![e.id.clone()],
                complete: kind.is_complete(),
            },
        };
        let slot = best.entry((m.chain_id, m.block_number));
        match slot {
            std::collections::btree_map::Entry::Vacant(v) => {
                v.insert(candidate);
            }
            std::collections::btree_map::Entry::Occupied(mut o) => {
                if candidate.better_than(o.get()) {
                    o.insert(candidate);
                }
            }
        }
    }
    best.into_values().collect()
}

/// The newest view of a chain (`None`: any chain), the best at its block.
pub fn newest(views: &[View], chain_id: Option<u64>) -> Option<&View> {
    views
        .iter()
        .filter(|v| chain_id.is_none_or(|c| v.chain_id == c))
        .max_by(|a, b| a.block.cmp(&b.block).then(b.rank().cmp(&a.rank())))
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

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(block: u64, kind: SnapshotKind) -> CatalogEntry {
        crate::testing::entry(1, block, kind, &[])
    }

    fn ids(v: &View) -> Vec<&str> {
        v.snapshots.iter().map(String::as_str).collect()
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
}
