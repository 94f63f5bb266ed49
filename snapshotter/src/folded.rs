//! A base's records (read in place) with newer ones laid over them: what
//! a view holds, in key order, as a fold writes it and as its state root
//! is recomputed.

use std::ops::Range;

use protocol::storage::StorageRecord;
use protocol::view::newest_of;

use crate::account::AccountRecord;
use crate::records::{Records, RecordsFile};

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

    /// The accounts of the view whose key's first nibble is in `nibbles`.
    /// An account a delta found empty (EIP-161: no nonce, balance, code or
    /// storage) was deleted by the chain when its block touched it: left
    /// out. One the base holds empty is in the state (a genesis can hold
    /// such accounts): kept.
    pub fn accounts_of(
        &self,
        nibbles: Range<u8>,
    ) -> impl Iterator<Item = AccountRecord> + Send + '_ {
        let base = self.base.accounts_of(nibbles.clone());
        let newer = &self.newer.accounts[of_nibbles(&self.newer.accounts, nibbles, |r| r.key[0])];
        let base = base.map(|i| (self.base.account(i), false));
        let newer = newer.iter().map(|r| (r.clone(), true));
        newest_of(base, newer, |(r, _)| r.key)
            .filter(|(r, from_delta)| !(*from_delta && r.is_empty()))
            .map(|(r, _)| r)
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
