//! A base's records (read in place) with newer ones laid over them: what
//! a view holds, in key order, as a fold writes it and as its state root
//! is recomputed.

use std::collections::BTreeMap;
use std::ops::Range;

use alloy_primitives::B256;

use protocol::storage::StorageRecord;
use protocol::view::newest_of;

use crate::account::AccountRecord;
use crate::pipeline::BuildError;
use crate::records::{decode_records, Records, RecordsFile};
use crate::store::{SnapshotStore, StoreError, StoredSnapshot, RECORDS_FILE};

/// Why the levels could not be updated (or a level read: the folds
/// and merges of `crate::levels` read levels through here).
#[derive(Debug, thiserror::Error)]
pub enum LevelsError {
    #[error(transparent)]
    Build(#[from] BuildError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("snapshot {id} is damaged: {reason}")]
    Damaged { id: String, reason: String },
}

/// A base and the newer records of the deltas above it (overlaid, newest
/// each).
pub struct Folded<'a> {
    pub base: &'a RecordsFile<'a>,
    pub newer: &'a Records,
}

impl Folded<'_> {
    /// Every account of the view.
    pub fn accounts(&self) -> impl Iterator<Item = AccountRecord> + Send + '_ {
        self.accounts_of(0..16)
    }

    /// The accounts of the view whose key's first nibble is in `nibbles`
    /// (those a delta deleted left out).
    pub fn accounts_of(
        &self,
        nibbles: Range<u8>,
    ) -> impl Iterator<Item = AccountRecord> + Send + '_ {
        let base = self.base.accounts_of(nibbles.clone());
        let newer = &self.newer.accounts[of_nibbles(&self.newer.accounts, nibbles, |r| r.key[0])];
        let base = base.map(|i| self.base.account(i));
        newest_of(base, newer.iter().cloned(), |r| r.key).filter(|r| !r.deleted)
    }

    /// The view's account whose key is `key`, if it has one.
    pub fn account(&self, key: &B256) -> Option<AccountRecord> {
        match self.newer.accounts.binary_search_by(|r| r.key.cmp(key)) {
            Ok(i) => Some(self.newer.accounts[i].clone()).filter(|r| !r.deleted),
            Err(_) => self.base.find_account(key),
        }
    }

    /// The view's slot whose PIR key is `key`, if it holds one (a slot
    /// cleared to 0 by a delta is held, with the word 0).
    pub fn slot(&self, key: &B256) -> Option<StorageRecord> {
        match self.newer.storage.binary_search_by(|s| s.key.cmp(key)) {
            Ok(i) => Some(self.newer.storage[i].clone()),
            Err(_) => self.base.find_slot(key),
        }
    }

    /// Every slot of the view, slots cleared to 0 left out.
    pub fn slots(&self) -> impl Iterator<Item = StorageRecord> + '_ {
        let base = (0..self.base.slots()).map(|i| self.base.slot(i));
        newest_of(base, self.newer.storage.iter().cloned(), |s| s.key)
            .filter(|s| !s.value.is_zero())
    }
}

/// The indices of the key-sorted `items` whose key's first nibble
/// (`first_byte >> 4`) is in `nibbles`.
pub fn of_nibbles<T>(
    items: &[T],
    nibbles: Range<u8>,
    first_byte: impl Fn(&T) -> u8,
) -> Range<usize> {
    let start = items.partition_point(|t| first_byte(t) >> 4 < nibbles.start);
    let end = items.partition_point(|t| first_byte(t) >> 4 < nibbles.end);
    start..end.max(start)
}

/// A level's records and slots (digest-checked).
pub fn records(store: &SnapshotStore, snap: &StoredSnapshot) -> Result<Records, LevelsError> {
    let bytes = store.read_checked(snap, RECORDS_FILE)?;
    decode_records(&bytes).map_err(|e| LevelsError::Damaged {
        id: snap.id.url_form(),
        reason: format!("{RECORDS_FILE}: {e}"),
    })
}

/// `f` on the state of `view` (base first): its base's `records.bin`
/// read in place with the deltas' records (small) overlaid in memory.
pub fn with_view<T>(
    store: &SnapshotStore,
    view: &[StoredSnapshot],
    f: impl FnOnce(&Folded<'_>) -> Result<T, LevelsError>,
) -> Result<T, LevelsError> {
    let newer = overlay(store, &view[1..])?;
    let mapped = store.map_checked(&view[0], RECORDS_FILE)?;
    let base = RecordsFile::new((*mapped).as_ref()).map_err(|e| LevelsError::Damaged {
        id: view[0].id.url_form(),
        reason: format!("{RECORDS_FILE}: {e}"),
    })?;
    f(&Folded {
        base: &base,
        newer: &newer,
    })
}

/// The records of `levels` (oldest first; deltas, small) overlaid: the
/// newest value of each account and of each slot, in key order.
pub fn overlay(store: &SnapshotStore, levels: &[StoredSnapshot]) -> Result<Records, LevelsError> {
    overlay_with(store, levels, &Pending::default())
}

/// A delta's records not published yet (in any order).
#[derive(Default)]
pub struct Pending<'a> {
    pub accounts: &'a [AccountRecord],
    pub storage: &'a [StorageRecord],
}

/// [`overlay`], with `pending` on top of the levels.
pub fn overlay_with(
    store: &SnapshotStore,
    levels: &[StoredSnapshot],
    pending: &Pending<'_>,
) -> Result<Records, LevelsError> {
    let mut accounts: BTreeMap<B256, AccountRecord> = BTreeMap::new();
    let mut slots = BTreeMap::new();
    for level in levels {
        let records = records(store, level)?;
        accounts.extend(records.accounts.into_iter().map(|r| (r.key, r)));
        slots.extend(records.storage.into_iter().map(|s| (s.key, s)));
    }
    accounts.extend(pending.accounts.iter().map(|r| (r.key, r.clone())));
    slots.extend(pending.storage.iter().map(|s| (s.key, s.clone())));
    Ok(Records {
        accounts: accounts.into_values().collect(),
        storage: slots.into_values().collect(),
    })
}
