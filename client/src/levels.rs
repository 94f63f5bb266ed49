//! The levels of a view (a base and the deltas above it) and how each is
//! read: by PIR queries, or downloaded whole when it is small. A lookup
//! asks every level; the freshest level holding the key wins, and absent
//! from every level of a complete view is balance 0, nonce 0.

use std::sync::Arc;

use alloy_primitives::{B256, U256};
use pir_core::{ClientError, Lookup};
use protocol::api::CatalogEntry;
use protocol::view::View;

use crate::pool::SnapshotClient;
use crate::ReadError;

/// The name of a whole table in a manifest's file list (the store's
/// `TABLE_FILE`; a client does not link the store).
pub const TABLE_FILE: &str = "table.bin";

/// A privately read account.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AccountState {
    pub balance: U256,
    pub nonce: u64,
    /// Id of the level it was found in (the view's top when absent).
    pub snapshot: String,
    /// The block of the view it was read from.
    pub block: u64,
    /// Absent from every level of a complete view: balance and nonce are 0.
    pub absent: bool,
}

/// What one level holds for a key: (balance, nonce), or nothing.
pub type Found = Option<(U256, u64)>;

/// How one level of a view is read.
#[derive(Clone)]
pub enum Level {
    /// By PIR queries.
    Pir(Arc<SnapshotClient>),
    /// Downloaded whole (a small level: cheaper than its hint); read
    /// locally, no query.
    Whole(Arc<WholeLevel>),
}

impl Level {
    pub fn entry(&self) -> &CatalogEntry {
        match self {
            Level::Pir(s) => &s.entry,
            Level::Whole(w) => &w.entry,
        }
    }
}

/// A level downloaded whole.
pub struct WholeLevel {
    pub entry: CatalogEntry,
    pub table: protocol::table::Table,
}

impl WholeLevel {
    /// Values of `keys` in this level.
    pub fn read(&self, keys: &[B256]) -> Result<Vec<Found>, ReadError> {
        keys.iter()
            .map(|k| match self.table.get(&k.0) {
                Some(v) => protocol::decode_value(v)
                    .map(Some)
                    .map_err(|e| ReadError::Unverifiable(format!("{}: {e}", self.entry.id))),
                None => Ok(None),
            })
            .collect()
    }
}

/// A view with a client for each of its levels, base first.
pub struct ViewClient {
    pub view: View,
    pub levels: Vec<Level>,
}

impl ViewClient {
    /// The freshest level's id: names the view in logs and the replay.
    pub fn top(&self) -> &str {
        &self.levels.last().expect("a view has a level").entry().id
    }

    /// The answer for query `i` given what each level found
    /// (`found[level][query]`): the freshest level holding the key; absent
    /// from every level of a complete view is 0/0.
    pub fn freshest(&self, found: &[Vec<Found>], i: usize) -> Result<AccountState, ReadError> {
        let hit = self
            .levels
            .iter()
            .zip(found)
            .rev()
            .find_map(|(level, values)| values[i].map(|v| (level, v)));
        let state = |snapshot: &str, (balance, nonce), absent| AccountState {
            balance,
            nonce,
            snapshot: snapshot.to_string(),
            block: self.view.block,
            absent,
        };
        match hit {
            Some((level, value)) => Ok(state(&level.entry().id, value, false)),
            None if self.view.complete => Ok(state(self.top(), (U256::ZERO, 0), true)),
            None => Err(ReadError::NotInPrivateSet {
                snapshot: self.top().to_string(),
                kind: self.levels[0].entry().manifest.kind.name(),
            }),
        }
    }
}

/// The bytes of a delta's whole table, when it has one cheaper to
/// download than its hint. Bases are always read by PIR (their tables,
/// when small, serve other clients).
pub fn whole_table_bytes(entry: &CatalogEntry) -> Option<u64> {
    if !matches!(entry.manifest.kind, protocol::SnapshotKind::Delta { .. }) {
        return None;
    }
    let bytes = entry.manifest.files.get(TABLE_FILE)?.bytes;
    (bytes < entry.manifest.pir.hint_bytes).then_some(bytes)
}

/// Decodes one level's answers: the value each query found, or `None`.
/// Any failed check (noise, checksum, setup, value encoding, count) fails
/// the whole request.
pub fn decode_level(
    snap: &SnapshotClient,
    answer: &[u8],
    pendings: Vec<pir_core::PendingAnswer>,
) -> Result<Vec<Found>, ReadError> {
    let responses = pir_core::wire::decode_responses(answer).map_err(|e| {
        ReadError::Unverifiable(format!("{}: malformed response: {e}", snap.entry.id))
    })?;
    if responses.len() != pendings.len() {
        return Err(ReadError::Unverifiable(format!(
            "{}: {} answers to {} queries",
            snap.entry.id,
            responses.len(),
            pendings.len()
        )));
    }
    pendings
        .into_iter()
        .zip(&responses)
        .map(
            |(pending, response)| match snap.client.decode(pending, response) {
                Ok(Lookup::Found(v)) => protocol::decode_value(&v)
                    .map(Some)
                    .map_err(|e| ReadError::Unverifiable(e.to_string())),
                Ok(Lookup::Absent) => Ok(None),
                Err(
                    e @ (ClientError::Corrupted | ClientError::Decode(_) | ClientError::WrongSetup),
                ) => Err(ReadError::Unverifiable(format!("{}: {e}", snap.entry.id))),
            },
        )
        .collect()
}
