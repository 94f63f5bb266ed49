//! Levels: a chain's base and the deltas above it in the store, and the
//! policy that keeps the newest view short (brief section 4).
//!
//! Every new block becomes a one-block delta on top of the newest view.
//! Deltas are tiered by span: a delta of span s is of tier
//! floor(log_fanout(s)). When the top of the view holds `fanout` deltas of
//! one tier, they are merged into one delta of the next tier (their
//! records, the newest value of each account; emptied accounts stay 0/0 to
//! hide older values). So a view holds at most `fanout - 1` deltas per tier
//! and a lookup asks O(fanout * log(blocks) / log(fanout)) small snapshots
//! besides the base. When the deltas together hold more than
//! `rebase_fraction` of the base (and at least `rebase_min_records`), the
//! view is folded into a new full base. Pinned heights get a full snapshot
//! of their own. Snapshots no view of the last `keep_blocks` blocks uses are
//! removed (the server retires them at its next rescan; a proxy in the
//! middle of a lookup retries on the new catalog).
//!
//! Everything here is store-local: merges and rebases read `records.bin`
//! (digest-checked) and never ask a node.

use std::collections::{BTreeMap, BTreeSet};

use protocol::view::View;
use serde::Deserialize;

use crate::hot::{HotKey, HotPolicy};
use crate::manifest::{KindTag, SnapshotId, SnapshotKind};
use crate::pipeline::{
    build_and_publish, build_and_publish_streamed, BuildError, BuildOptions, ExportedState,
};
use crate::records::{write_record_stream, Records, RecordsFile};
use crate::store::{SnapshotStore, StoreError, StoredSnapshot, RECORDS_FILE};
use protocol::view::names_parent;

/// How deltas are merged and kept: `[levels]` in the follower's config.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LevelPolicy {
    /// Deltas of one tier merged into one of the next tier.
    pub fanout: u64,
    /// Fold the deltas into a new base when they hold this fraction of the
    /// base's records ...
    pub rebase_fraction: f64,
    /// ... and at least this many records.
    pub rebase_min_records: u64,
    /// Keep every snapshot a view of the last this-many blocks uses (older
    /// views disappear unless pinned).
    pub keep_blocks: u64,
    /// Heights that keep a full snapshot (and their view) for good.
    pub pinned: Vec<u64>,
}

impl Default for LevelPolicy {
    fn default() -> Self {
        LevelPolicy {
            fanout: 8,
            rebase_fraction: 0.25,
            rebase_min_records: 1 << 20,
            keep_blocks: 64,
            pinned: Vec::new(),
        }
    }
}

pub use crate::folded::LevelsError;

/// What one update did, for logs and benchmarks.
#[derive(Clone, Debug, Default)]
pub struct UpdateReport {
    /// Snapshots published (the new delta first, then merges, rebases).
    pub published: Vec<String>,
    /// Snapshots removed by retention.
    pub removed: Vec<String>,
    /// Seconds spent building merges and rebases.
    pub compact_s: f64,
}

/// The levels of one chain in a store.
pub struct Levels {
    store: SnapshotStore,
    chain_id: u64,
    policy: LevelPolicy,
    build: BuildOptions,
    /// Levels whose files were checked (id and content digest): published
    /// snapshots never change, so each is hashed once per process.
    checked: std::sync::Mutex<BTreeSet<(String, protocol::Sha3Digest)>>,
}

/// Catalog entries for a chain's snapshots in the store.
fn entries(store: &SnapshotStore, chain_id: u64) -> Result<Vec<StoredSnapshot>, StoreError> {
    Ok(store
        .list()?
        .into_iter()
        .filter(|s| s.id.chain_id == chain_id)
        .collect())
}

/// Adds to `delta` (a delta over `view`) a zero record for every slot
/// that a contract of `destroyed` holds in the view's levels and the
/// delta does not write, so that its old words read as the 0 the chain
/// now has. The slots are found by the contract's hash in each level's
/// `records.bin` (a whole scan: only chains before Cancun destroy
/// storage). Returns how many were added.
pub fn hide_destroyed(
    store: &SnapshotStore,
    view: &[StoredSnapshot],
    delta: &mut ExportedState,
    destroyed: &[alloy_primitives::Address],
) -> Result<usize, LevelsError> {
    if destroyed.is_empty() {
        return Ok(0);
    }
    let hashed: BTreeSet<alloy_primitives::B256> =
        destroyed.iter().map(alloy_primitives::keccak256).collect();
    let mut written: BTreeSet<alloy_primitives::B256> =
        delta.storage.iter().map(|s| s.key).collect();
    let mut added = 0;
    for level in view {
        let mapped = store.map_checked(level, RECORDS_FILE)?;
        let file = RecordsFile::new((*mapped).as_ref()).map_err(|e| LevelsError::Damaged {
            id: level.id.url_form(),
            reason: format!("{RECORDS_FILE}: {e}"),
        })?;
        for i in 0..file.slots() {
            let slot = file.slot(i);
            if hashed.contains(&slot.hashed_contract) && written.insert(slot.key) {
                let mut zero = protocol::storage::StorageRecord::from_hashed(
                    slot.hashed_contract,
                    slot.hashed_slot,
                    alloy_primitives::U256::ZERO,
                );
                zero.contract = slot.contract;
                delta.storage.push(zero);
                added += 1;
            }
        }
    }
    tracing::info!(
        block = delta.block_number,
        contracts = destroyed.len(),
        slots = added,
        "destroyed contracts' earlier slots hidden"
    );
    Ok(added)
}

/// A delta's tier: floor(log_fanout(span)).
fn tier(snap: &StoredSnapshot, fanout: u64) -> u32 {
    let SnapshotKind::Delta { from } = snap.manifest.kind else {
        return u32::MAX;
    };
    let mut span = snap.manifest.block_number.saturating_sub(from).max(1);
    let mut t = 0;
    while span >= fanout.max(2) {
        span /= fanout.max(2);
        t += 1;
    }
    t
}

impl Levels {
    pub fn new(
        store: SnapshotStore,
        chain_id: u64,
        policy: LevelPolicy,
        build: BuildOptions,
    ) -> Self {
        Levels {
            store,
            chain_id,
            policy,
            build,
            checked: Default::default(),
        }
    }

    pub fn store(&self) -> &SnapshotStore {
        &self.store
    }

    pub fn chain_id(&self) -> u64 {
        self.chain_id
    }

    /// Every view of the chain in the store.
    fn views(&self) -> Result<(Vec<View>, BTreeMap<SnapshotId, StoredSnapshot>), StoreError> {
        let snaps = entries(&self.store, self.chain_id)?;
        let views = protocol::view::views(&crate::store::as_entries(&snaps));
        let by_id = snaps.into_iter().map(|s| (s.id, s)).collect();
        Ok((views, by_id))
    }

    /// The newest complete view (a full base and the deltas above it),
    /// base first; `None` while the chain has no full snapshot.
    pub fn newest_view(&self) -> Result<Option<Vec<StoredSnapshot>>, StoreError> {
        let (views, by_id) = self.views()?;
        let complete: Vec<View> = views.into_iter().filter(|v| v.complete).collect();
        Ok(
            protocol::view::newest(&complete, Some(self.chain_id)).map(|v| {
                v.snapshots
                    .iter()
                    .filter_map(|id| by_id.get(id).cloned())
                    .collect()
            }),
        )
    }

    /// Checks the files of the newest view's levels against their
    /// manifests (each level once per process) and returns the view. A
    /// damaged level is removed with every level above it, so that the next
    /// delta rebuilds those blocks from the node; the error says what was
    /// found.
    pub fn check_newest(&self) -> Result<Option<Vec<StoredSnapshot>>, LevelsError> {
        let Some(view) = self.newest_view()? else {
            return Ok(None);
        };
        for (i, level) in view.iter().enumerate() {
            let id = level.id.url_form();
            let seen = (id.clone(), level.manifest.content_digest.clone());
            if self.checked.lock().expect("lock").contains(&seen) {
                continue;
            }
            let damage = level
                .manifest
                .files
                .keys()
                .find_map(|name| self.store.check_file(level, name).err());
            match damage {
                None => {
                    self.checked.lock().expect("lock").insert(seen);
                }
                Some(e) => {
                    for above in &view[i..] {
                        self.store.remove(&above.id)?;
                        tracing::error!(snapshot = %above.id, "removed: it is damaged or chains on a damaged level");
                    }
                    return Err(LevelsError::Damaged {
                        id,
                        reason: e.to_string(),
                    });
                }
            }
        }
        Ok(Some(view))
    }

    /// [`hide_destroyed`] in this store.
    pub fn hide_destroyed(
        &self,
        view: &[StoredSnapshot],
        delta: &mut ExportedState,
        destroyed: &[alloy_primitives::Address],
    ) -> Result<usize, LevelsError> {
        hide_destroyed(&self.store, view, delta, destroyed)
    }

    /// Publishes a delta (or a base), then merges, rebases, pins and
    /// retires as the policy says.
    pub fn publish(&self, state: ExportedState) -> Result<UpdateReport, LevelsError> {
        let mut report = UpdateReport::default();
        match build_and_publish(&self.store, state, &self.build) {
            Ok(s) => report.published.push(s.id.url_form()),
            Err(BuildError::Store(StoreError::Exists(id))) => {
                tracing::info!(snapshot = %id, "already published")
            }
            Err(e) => return Err(e.into()),
        }
        let t = std::time::Instant::now();
        while let Some(id) = self.compact_once()? {
            report.published.push(id);
        }
        report.compact_s = t.elapsed().as_secs_f64();
        report.removed = self.retire()?;
        Ok(report)
    }

    /// One merge, rebase or pin if one is due; the id it published.
    fn compact_once(&self) -> Result<Option<String>, LevelsError> {
        let Some(view) = self.newest_view()? else {
            return Ok(None);
        };
        let base = &view[0];
        let deltas = &view[1..];
        let top = view.last().expect("a view has a level");
        let fanout = self.policy.fanout.max(2);
        // Merge: `fanout` deltas of one tier at the top of the view.
        if let Some(last) = deltas.last() {
            let t = tier(last, fanout);
            let run = deltas
                .iter()
                .rev()
                .take_while(|d| tier(d, fanout) == t)
                .count();
            if run as u64 >= fanout {
                let merged = &deltas[deltas.len() - fanout as usize..];
                return Ok(Some(self.merge(merged)?));
            }
        }
        // Rebase: the deltas outgrew their share of the base.
        let delta_records: u64 = deltas.iter().map(|d| d.manifest.record_count).sum();
        let threshold = (base.manifest.record_count as f64 * self.policy.rebase_fraction) as u64;
        if !deltas.is_empty() && delta_records >= threshold.max(self.policy.rebase_min_records) {
            return Ok(Some(self.fold(&view, "rebase")?));
        }
        // Pin: a full snapshot of its own at a pinned height.
        let pinned = self.policy.pinned.contains(&top.id.block);
        if pinned && top.id.kind != KindTag::Full {
            return Ok(Some(self.fold(&view, "pinned height")?));
        }
        Ok(None)
    }

    /// A state like `top`'s (block, hash, root, time) with other records;
    /// the listed contracts are the base's (`levels[0]`).
    pub(crate) fn like(
        levels: &[StoredSnapshot],
        kind: SnapshotKind,
        source: String,
        records: Records,
    ) -> ExportedState {
        let top = levels.last().expect("a level");
        let m = &top.manifest;
        ExportedState {
            chain_id: m.chain_id,
            block_number: m.block_number,
            block_hash: m.block_hash,
            state_root: m.state_root,
            block_time: m.block_time,
            // A merged delta stands where its first piece stood.
            parent_hash: match kind {
                SnapshotKind::Delta { .. } => levels[0].manifest.parent_hash,
                _ => None,
            },
            kind,
            source,
            records: records.accounts,
            storage: records.storage,
            listed: levels[0].manifest.storage.clone(),
            export_s: 0.0,
            codes: Vec::new(),
        }
    }

    /// Merges adjacent deltas (oldest first) into one.
    fn merge(&self, deltas: &[StoredSnapshot]) -> Result<String, LevelsError> {
        let SnapshotKind::Delta { from } = deltas[0].manifest.kind else {
            unreachable!("merge takes deltas");
        };
        let top = deltas.last().expect("at least two deltas");
        let records = crate::folded::overlay(&self.store, deltas)?;
        let source = format!("merge:{}..{}", deltas[0].id, top.id);
        tracing::info!(
            from,
            to = top.id.block,
            deltas = deltas.len(),
            records = records.accounts.len(),
            slots = records.storage.len(),
            "merging deltas"
        );
        let state = Self::like(deltas, SnapshotKind::Delta { from }, source, records);
        let published = build_and_publish(&self.store, state, &self.build)?;
        Ok(published.id.url_form())
    }

    /// Folds a whole view into a full snapshot at its block (accounts a
    /// delta deleted, and slots cleared to 0, dropped: absent means 0 in a
    /// full snapshot). The base's `records.bin` is read in place and merged
    /// in key order with the deltas' records (small, overlaid in memory)
    /// and streamed into the new base's `records.bin`: a mainnet base is
    /// never held.
    fn fold(&self, view: &[StoredSnapshot], why: &str) -> Result<String, LevelsError> {
        let top = view.last().expect("a view has a level");
        crate::folded::with_view(&self.store, view, |folded| {
            let (accounts, slots) = (folded.accounts().count(), folded.slots().count());
            tracing::info!(
                block = top.id.block,
                records = accounts,
                slots,
                why,
                "folding the view into a full snapshot"
            );
            let source = format!("fold:{}..{}", view[0].id, top.id);
            let meta = Self::like(view, SnapshotKind::Full, source, Records::default());
            let published = build_and_publish_streamed(&self.store, &meta, &self.build, |w| {
                let (accounts, slots) = (accounts as u64, slots as u64);
                write_record_stream(accounts, folded.accounts(), slots, folded.slots(), w)
            })?;
            Ok(published.id.url_form())
        })
    }

    /// Publishes the hot tier of `keys` at the block of `view`'s top
    /// level (`view`: a view's levels up to the one the tier stands on,
    /// base first), with each key's value there. A tier of another fork
    /// at that block is replaced; one of this block hash is kept. The id
    /// published, or `None` when nothing was (already there, or no key
    /// held).
    pub fn publish_hot(
        &self,
        view: &[StoredSnapshot],
        keys: &[HotKey],
        policy: &HotPolicy,
    ) -> Result<Option<String>, LevelsError> {
        let top = view.last().expect("a view has a level");
        if self.hot_on(top, policy).is_some() {
            return Ok(None);
        }
        let id = SnapshotId::new(self.chain_id, top.id.block, &policy.kind());
        if self.store.get(&id).is_ok() {
            self.store.remove(&id)?;
            tracing::info!(snapshot = %id, "hot tier of another fork removed");
        }
        let records = crate::folded::with_view(&self.store, view, |folded| {
            Ok(crate::hot::records_of(
                folded,
                keys,
                &view[0].manifest.storage,
            ))
        })?;
        if records.accounts.is_empty() {
            return Ok(None);
        }
        tracing::info!(
            block = top.id.block,
            accounts = records.accounts.len(),
            slots = records.storage.len(),
            chosen = keys.len(),
            "building the hot tier"
        );
        self.publish_hot_records(view, records, policy)
    }

    /// Publishes `records` as the hot tier of `policy` over `view` (its
    /// levels, base first), replacing one of another fork: the build
    /// phase of [`Self::publish_hot`]. The records are taken as they are
    /// (a test's forging operator builds a tier of its own with it).
    pub fn publish_hot_records(
        &self,
        view: &[StoredSnapshot],
        records: Records,
        policy: &HotPolicy,
    ) -> Result<Option<String>, LevelsError> {
        let top = view.last().expect("a view has a level");
        let id = SnapshotId::new(self.chain_id, top.id.block, &policy.kind());
        if self.store.get(&id).is_ok() {
            self.store.remove(&id)?;
        }
        let source = format!("hot:{}-blocks-to-{}", policy.window, top.id);
        let state = Self::like(view, policy.kind(), source, records);
        let published = build_and_publish(&self.store, state, &self.build)?;
        Ok(Some(published.id.url_form()))
    }

    /// The hot tier of `policy`'s kind standing on `level` (its block and
    /// block hash), if the store holds one.
    pub fn hot_on(&self, level: &StoredSnapshot, policy: &HotPolicy) -> Option<StoredSnapshot> {
        let id = SnapshotId::new(self.chain_id, level.id.block, &policy.kind());
        let tier = self.store.get(&id).ok()?;
        (tier.manifest.block_hash == level.manifest.block_hash).then_some(tier)
    }

    /// Removes what no view of the last `keep_blocks` blocks uses (pinned
    /// heights, active sets and historical snapshots are left alone).
    pub fn retire(&self) -> Result<Vec<String>, LevelsError> {
        let (views, by_id) = self.views()?;
        let Some(newest) = views.iter().filter(|v| v.complete).map(|v| v.block).max() else {
            return Ok(Vec::new());
        };
        let horizon = newest.saturating_sub(self.policy.keep_blocks);
        let mut keep: BTreeSet<SnapshotId> = BTreeSet::new();
        for v in &views {
            if v.block >= horizon || self.policy.pinned.contains(&v.block) {
                keep.extend(v.snapshots.iter().copied());
            }
        }
        let mut removed = Vec::new();
        for (id, snap) in &by_id {
            // A hot tier goes with the level it stands on.
            if snap.id.kind == KindTag::Hot {
                let stands = keep.iter().filter_map(|k| by_id.get(k)).any(|level| {
                    level.id.block == snap.id.block
                        && names_parent(snap.manifest.block_hash, level.manifest.block_hash)
                            != Some(false)
                });
                if !stands {
                    self.store.remove(&snap.id)?;
                    tracing::info!(snapshot = %snap.id, "hot tier retired with its level");
                    removed.push(id.url_form());
                }
                continue;
            }
            let managed = matches!(snap.id.kind, KindTag::Full | KindTag::Delta);
            if !managed || keep.contains(id) || snap.id.block >= horizon {
                continue;
            }
            self.store.remove(&snap.id)?;
            tracing::info!(snapshot = %snap.id, "retired");
            removed.push(id.url_form());
        }
        Ok(removed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::account::AccountRecord;
    use crate::folded::Folded;
    use alloy_primitives::{Address, B256, U256};
    use protocol::storage::StorageRecord;

    fn state(block: u64, kind: SnapshotKind, records: Vec<AccountRecord>) -> ExportedState {
        ExportedState {
            chain_id: 7,
            block_number: block,
            block_hash: None,
            state_root: None,
            block_time: None,
            parent_hash: None,
            kind,
            source: "test".into(),
            records,
            storage: Vec::new(),
            listed: Default::default(),
            export_s: 0.0,
            codes: Vec::new(),
        }
    }

    fn acct(i: u8, balance: u64) -> AccountRecord {
        AccountRecord::new(Address::repeat_byte(i), U256::from(balance), 1)
    }

    /// The streamed fold's merge writes exactly the records.bin the
    /// in-memory overlay (newest value of each key, emptied accounts and
    /// cleared slots left out) would.
    #[test]
    fn a_streamed_fold_writes_what_the_overlay_would() {
        let contract = Address::repeat_byte(0xcc);
        let slot =
            |i: u8, v: u64| StorageRecord::new(contract, B256::repeat_byte(i), U256::from(v));
        let sorted = |mut r: Records| {
            r.accounts.sort_unstable_by_key(|a| a.key);
            r.storage.sort_unstable_by_key(|s| s.key);
            r
        };
        let base = sorted(Records {
            accounts: (0..60u8).map(|i| acct(i, 1_000 + i as u64)).collect(),
            storage: (0..30u8).map(|i| slot(i, 7 + i as u64)).collect(),
        });
        // Changed, deleted and new accounts; changed, cleared, new slots.
        let emptied = AccountRecord::deleted(Address::repeat_byte(3));
        let newer = sorted(Records {
            accounts: vec![acct(1, 5), emptied, acct(200, 9), acct(59, 1 << 40)],
            storage: vec![slot(2, 99), slot(4, 0), slot(250, 1)],
        });
        let mut accounts: BTreeMap<B256, AccountRecord> =
            base.accounts.iter().map(|r| (r.key, r.clone())).collect();
        accounts.extend(newer.accounts.iter().map(|r| (r.key, r.clone())));
        let mut slots: BTreeMap<B256, StorageRecord> =
            base.storage.iter().map(|s| (s.key, s.clone())).collect();
        slots.extend(newer.storage.iter().map(|s| (s.key, s.clone())));
        let expected_accounts: Vec<AccountRecord> =
            accounts.into_values().filter(|r| !r.deleted).collect();
        let expected_slots: Vec<StorageRecord> =
            slots.into_values().filter(|s| !s.value.is_zero()).collect();
        let expected = crate::records::encode_records(&expected_accounts, &expected_slots);

        let base_bytes = crate::records::encode_records(&base.accounts, &base.storage);
        let file = RecordsFile::new(&base_bytes).unwrap();
        let folded = Folded {
            base: &file,
            newer: &newer,
        };
        let (a, s) = (
            folded.accounts().count() as u64,
            folded.slots().count() as u64,
        );
        assert_eq!((a, s), (60, 30));
        let mut streamed = Vec::new();
        write_record_stream(a, folded.accounts(), s, folded.slots(), &mut streamed).unwrap();
        assert!(streamed == expected, "the streamed fold differs");
    }

    /// A hot tier holds the view's values at the level it stands on
    /// (an account the view lacks left out, a slot it lacks as 0), a
    /// tier of other values fails the check, and a tier goes when its
    /// level is retired.
    #[test]
    fn a_hot_tier_holds_the_views_values_and_goes_with_its_level() {
        use crate::hot::{check_against_view, HotKey, HotPolicy};
        let dir = tempfile::tempdir().unwrap();
        let policy = LevelPolicy {
            keep_blocks: 1,
            pinned: vec![12],
            ..Default::default()
        };
        let l = levels(dir.path(), policy);
        let contract = Address::repeat_byte(0xcc);
        let whole = |mut s: ExportedState| {
            s.listed = protocol::storage::PrivateStorage::whole_state();
            s
        };
        let mut base = whole(state(
            10,
            SnapshotKind::Full,
            (1..=20).map(|i| acct(i, 100 + i as u64)).collect(),
        ));
        base.storage = vec![StorageRecord::new(
            contract,
            B256::repeat_byte(1),
            U256::from(5u8),
        )];
        l.publish(base).unwrap();
        l.publish(whole(state(
            11,
            SnapshotKind::Delta { from: 10 },
            vec![acct(1, 7)],
        )))
        .unwrap();
        let hot = HotPolicy {
            max_mib: 1,
            ..Default::default()
        };
        let keys = [
            HotKey::Account(Address::repeat_byte(1)),
            HotKey::Account(Address::repeat_byte(2)),
            HotKey::Account(Address::repeat_byte(99)),
            HotKey::Slot(contract, B256::repeat_byte(1)),
            HotKey::Slot(contract, B256::repeat_byte(2)),
        ];
        let view = l.newest_view().unwrap().unwrap();
        assert_eq!(
            l.publish_hot(&view[..1], &keys, &hot).unwrap().as_deref(),
            Some("7-10-hot")
        );
        assert_eq!(
            l.publish_hot(&view[..1], &keys, &hot).unwrap(),
            None,
            "already there"
        );
        let all = l.store().list().unwrap();
        let tier = all.iter().find(|s| s.id.kind == KindTag::Hot).unwrap();
        assert_eq!(check_against_view(l.store(), tier, &all, |_| true), Ok(4));
        let unchecked = check_against_view(l.store(), tier, &all, |_| false).unwrap_err();
        assert!(unchecked.contains("not checked"), "{unchecked}");
        let records = crate::folded::records(l.store(), tier).unwrap();
        assert_eq!(
            records
                .accounts
                .iter()
                .find(|a| a.address == Some(Address::repeat_byte(1)))
                .unwrap()
                .balance,
            U256::from(101u64),
            "the value at the base's block, under the delta"
        );
        assert_eq!(
            records
                .storage
                .iter()
                .map(|s| s.value)
                .collect::<Vec<_>>()
                .len(),
            2
        );
        // Other values at block 11: refused.
        let mut wrong = whole(state(11, hot.kind(), vec![acct(1, 8)]));
        wrong.source = "tampered".into();
        build_and_publish(l.store(), wrong, &BuildOptions::default()).unwrap();
        let all = l.store().list().unwrap();
        let wrong = all.iter().find(|s| s.id.url_form() == "7-11-hot").unwrap();
        let refused = check_against_view(l.store(), wrong, &all, |_| true).unwrap_err();
        assert!(refused.contains("is not the view's"), "{refused}");
        // A pinned fold at 12, then a block more: the levels below the
        // horizon go, and the tiers standing on them with them.
        l.publish(whole(state(
            12,
            SnapshotKind::Delta { from: 11 },
            vec![acct(3, 1)],
        )))
        .unwrap();
        let report = l
            .publish(whole(state(
                13,
                SnapshotKind::Delta { from: 12 },
                vec![acct(4, 1)],
            )))
            .unwrap();
        assert!(
            report.removed.contains(&"7-10-hot".to_string()),
            "{:?}",
            report.removed
        );
        assert!(
            report.removed.contains(&"7-11-hot".to_string()),
            "{:?}",
            report.removed
        );
    }

    fn levels(dir: &std::path::Path, policy: LevelPolicy) -> Levels {
        let opts = BuildOptions::default();
        Levels::new(SnapshotStore::open(dir).unwrap(), 7, policy, opts)
    }

    fn view_ids(l: &Levels) -> Vec<String> {
        l.newest_view()
            .unwrap()
            .unwrap()
            .iter()
            .map(|s| s.id.url_form())
            .collect()
    }

    #[test]
    fn deltas_merge_by_tier_and_fold_into_a_base() {
        let dir = tempfile::tempdir().unwrap();
        let policy = LevelPolicy {
            fanout: 2,
            rebase_min_records: 1_000,
            keep_blocks: 1,
            ..Default::default()
        };
        let l = levels(dir.path(), policy);
        l.publish(state(0, SnapshotKind::Full, vec![acct(1, 10), acct(2, 20)]))
            .unwrap();
        for b in 1..=4u64 {
            let kind = SnapshotKind::Delta { from: b - 1 };
            l.publish(state(b, kind, vec![acct(1, 10 + b), acct(2 + b as u8, b)]))
                .unwrap();
        }
        // 4 one-block deltas with fanout 2: two merges into (0,2], (2,4],
        // then those into (0,4].
        assert_eq!(view_ids(&l), ["7-0-full", "7-4-delta-0"]);
        let top = l.newest_view().unwrap().unwrap().pop().unwrap();
        assert_eq!(top.manifest.kind, SnapshotKind::Delta { from: 0 });
        let merged = crate::folded::records(l.store(), &top).unwrap().accounts;
        assert_eq!(merged.len(), 5, "account 1 and one new account per block");
        let one = merged
            .iter()
            .find(|r| r.address == Some(Address::repeat_byte(1)));
        assert_eq!(one.unwrap().balance, U256::from(14));
        // Retention kept only what views of blocks 3 and 4 use.
        let left: Vec<String> = l
            .store()
            .list()
            .unwrap()
            .iter()
            .map(|s| s.id.url_form())
            .collect();
        assert!(!left.contains(&"7-1-delta-0".to_string()), "{left:?}");

        // A pinned height folds its view into a full snapshot; an emptied
        // account leaves the full snapshot (absent = 0).
        let l = Levels::new(
            l.store().clone(),
            7,
            LevelPolicy {
                fanout: 8,
                pinned: vec![5],
                ..Default::default()
            },
            l.build.clone(),
        );
        l.publish(state(
            5,
            SnapshotKind::Delta { from: 4 },
            vec![AccountRecord::deleted(Address::repeat_byte(2))],
        ))
        .unwrap();
        assert_eq!(view_ids(&l), ["7-5-full"]);
        let full = l.newest_view().unwrap().unwrap().pop().unwrap();
        assert_eq!(full.manifest.record_count, 5, "6 accounts, one deleted");
    }

    #[test]
    fn storage_slots_merge_and_fold_like_accounts() {
        use protocol::storage::{PrivateStorage, StorageRecord};
        let dir = tempfile::tempdir().unwrap();
        let policy = LevelPolicy {
            fanout: 2,
            pinned: vec![2],
            ..Default::default()
        };
        let l = levels(dir.path(), policy);
        let token = Address::repeat_byte(0xee);
        let listed = PrivateStorage {
            contracts: vec![token],
            ..Default::default()
        };
        let slot =
            |i: u8, v: u64| StorageRecord::new(token, B256::with_last_byte(i), U256::from(v));
        let with_slots = |mut st: ExportedState, slots: Vec<StorageRecord>| {
            st.storage = slots;
            st.listed = listed.clone();
            st
        };
        let base = state(0, SnapshotKind::Full, vec![acct(1, 10)]);
        l.publish(with_slots(base, vec![slot(1, 5), slot(2, 6)]))
            .unwrap();
        let full = l.newest_view().unwrap().unwrap().pop().unwrap();
        assert_eq!(full.manifest.record_count, 3);
        assert_eq!(full.manifest.storage_records, 2);
        assert_eq!(full.manifest.storage, listed);
        crate::verify::verify(l.store(), &full, 4).unwrap();
        // Block 1 changes slot 1 and clears slot 2; block 2 writes slot 3.
        // The delta's own list is ignored in favour of the base's.
        let d1 = state(1, SnapshotKind::Delta { from: 0 }, vec![acct(1, 11)]);
        l.publish(with_slots(d1, vec![slot(1, 7), slot(2, 0)]))
            .unwrap();
        let mut d2 = with_slots(
            state(2, SnapshotKind::Delta { from: 1 }, vec![acct(1, 12)]),
            vec![slot(3, 9)],
        );
        d2.listed = PrivateStorage::default();
        d2.listed.contracts.push(token);
        l.publish(d2).unwrap();
        // Fanout 2 merged the two deltas, then the pinned height folded
        // the view: slot 2 (cleared) leaves, slots 1 and 3 have their
        // newest words.
        assert_eq!(view_ids(&l), ["7-2-full"]);
        let folded = l.newest_view().unwrap().unwrap().pop().unwrap();
        let records = crate::folded::records(l.store(), &folded).unwrap();
        let words: Vec<(B256, U256)> = records
            .storage
            .iter()
            .map(|s| (s.hashed_slot, s.value))
            .collect();
        let mut want = vec![
            (
                alloy_primitives::keccak256(B256::with_last_byte(1)),
                U256::from(7),
            ),
            (
                alloy_primitives::keccak256(B256::with_last_byte(3)),
                U256::from(9),
            ),
        ];
        want.sort();
        let mut got = words;
        got.sort();
        assert_eq!(got, want);
        assert_eq!(folded.manifest.storage, listed);
        crate::verify::verify(l.store(), &folded, 4).unwrap();
    }

    #[test]
    fn storage_of_an_unlisted_contract_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let l = levels(dir.path(), LevelPolicy::default());
        let mut st = state(0, SnapshotKind::Full, vec![acct(1, 10)]);
        st.storage = vec![protocol::storage::StorageRecord::new(
            Address::repeat_byte(3),
            B256::ZERO,
            U256::from(1),
        )];
        assert!(matches!(
            l.publish(st),
            Err(LevelsError::Build(BuildError::UnlistedStorage(_)))
        ));
    }

    #[test]
    fn a_damaged_delta_is_removed_with_what_chains_on_it() {
        let dir = tempfile::tempdir().unwrap();
        let l = levels(dir.path(), LevelPolicy::default());
        l.publish(state(0, SnapshotKind::Full, vec![acct(1, 10)]))
            .unwrap();
        l.publish(state(1, SnapshotKind::Delta { from: 0 }, vec![acct(1, 11)]))
            .unwrap();
        l.publish(state(2, SnapshotKind::Delta { from: 1 }, vec![acct(1, 12)]))
            .unwrap();
        let d1 = l.store().path_of(&"7/1-delta-0".parse().unwrap());
        let records = d1.join(RECORDS_FILE);
        let mut bytes = std::fs::read(&records).unwrap();
        bytes.truncate(bytes.len() - 3);
        std::fs::write(&records, bytes).unwrap();
        let err = l.check_newest().unwrap_err();
        assert!(err.to_string().contains("7-1-delta-0"), "{err}");
        assert!(err.to_string().contains(RECORDS_FILE), "{err}");
        assert_eq!(view_ids(&l), ["7-0-full"]);
        l.check_newest().unwrap();

        // A byte flipped in a database file, same length: caught the same way.
        l.publish(state(1, SnapshotKind::Delta { from: 0 }, vec![acct(1, 11)]))
            .unwrap();
        let db = l
            .store()
            .path_of(&"7/1-delta-0".parse().unwrap())
            .join(crate::store::DB_FILE);
        let mut bytes = std::fs::read(&db).unwrap();
        bytes[100] ^= 1;
        std::fs::write(&db, bytes).unwrap();
        let err = l.check_newest().unwrap_err();
        assert!(err.to_string().contains(crate::store::DB_FILE), "{err}");
        assert_eq!(view_ids(&l), ["7-0-full"]);
    }
}
