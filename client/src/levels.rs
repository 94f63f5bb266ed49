//! The levels of a view (a base and the deltas above it) and how each is
//! read: by PIR queries, or downloaded whole when it is small. A lookup
//! asks every level; the freshest level holding the key wins, and absent
//! from every level of a complete view is balance 0, nonce 0 (an account)
//! or the word 0 (a slot of a contract the view holds).

use std::collections::BTreeMap;
use std::sync::Arc;

use alloy_primitives::{Address, B256, U256};
use pir_core::{ClientError, Lookup};
use protocol::account::{AccountValue, CodeRef, ValueLayout};
use protocol::api::CatalogEntry;
use protocol::codes::CodeTable;
use protocol::storage::{decode_word, StoredWord};
use protocol::view::View;
use protocol::SnapshotId;

use crate::pool::SnapshotClient;
use crate::ReadError;

pub use protocol::manifest::TABLE_FILE;

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
    /// Which code the account has, in the code table of the level it was
    /// found in (`code_table`).
    pub code: CodeRef,
    pub code_table: Option<CodeTable>,
}

/// A privately read storage slot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SlotState {
    pub word: U256,
    /// Id of the level it was found in (the view's top when absent).
    pub snapshot: String,
    /// The block of the view it was read from.
    pub block: u64,
    /// Absent from every level of a complete view that holds the
    /// contract: the word is 0 (never written, or cleared).
    pub absent: bool,
    /// `word` is only the low part of a wide word (format 4): set between
    /// the reads of its two parts, never in what
    /// [`crate::PrivateReader::read`] returns (it reads the high part and
    /// joins them).
    pub low_part: bool,
}

/// What one level holds for a key: its value's bytes, or nothing.
pub type Found = Option<Vec<u8>>;

/// What a key is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReadKey {
    /// An account's balance and nonce.
    Account(Address),
    /// A storage slot of a contract.
    Slot { contract: Address, slot: B256 },
    /// The high part of a slot's wide word (its own record, format 4),
    /// read after the slot's value said so.
    HighPart { contract: Address, slot: B256 },
}

impl ReadKey {
    /// The PIR key.
    pub fn pir_key(&self) -> B256 {
        match self {
            ReadKey::Account(a) => protocol::pir_key(a),
            ReadKey::Slot { contract, slot } => protocol::storage::storage_key_of(contract, slot),
            ReadKey::HighPart { contract, slot } => {
                protocol::storage::high_part_key(&protocol::storage::storage_key_of(contract, slot))
            }
        }
    }
}

/// A key's read, by kind.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KeyState {
    Account(AccountState),
    Slot(SlotState),
}

impl KeyState {
    /// The block of the view it was read from.
    pub fn block(&self) -> u64 {
        match self {
            KeyState::Account(a) => a.block,
            KeyState::Slot(s) => s.block,
        }
    }

    /// The level it was found in (the view's top when absent).
    pub fn snapshot(&self) -> &str {
        match self {
            KeyState::Account(a) => &a.snapshot,
            KeyState::Slot(s) => &s.snapshot,
        }
    }
}

/// The freshest level's value of a key: its bytes (`None`: absent from a
/// complete view), the level and the view's block.
pub struct Hit {
    pub value: Option<Vec<u8>>,
    pub snapshot: String,
    pub block: u64,
    /// How the level's values are laid out, and its code table.
    pub layout: ValueLayout,
    pub code_table: Option<CodeTable>,
    /// Taken from the hot tier.
    pub from_tier: bool,
}

impl Hit {
    /// A slot's word (or a wide word's part) of `contract`.
    fn decode_slot(self, contract: &Address, high: bool) -> Result<KeyState, ReadError> {
        let absent = self.value.is_none();
        let unverifiable =
            |e: &dyn std::fmt::Display| ReadError::Unverifiable(format!("{}: {e}", self.snapshot));
        let (word, low_part) = match &self.value {
            Some(v) => match decode_word(v).map_err(|e| unverifiable(&e))? {
                StoredWord::Word(w) => (w, false),
                StoredWord::Low(_) if high => {
                    return Err(unverifiable(&"a wide word's high part is itself wide"))
                }
                StoredWord::Low(w) => (w, true),
                StoredWord::TooWide => {
                    return Err(ReadError::TooWide {
                        contract: *contract,
                        snapshot: self.snapshot,
                    })
                }
            },
            None if high => return Err(unverifiable(&"a wide word's high part is missing")),
            None => (U256::ZERO, false),
        };
        Ok(KeyState::Slot(SlotState {
            word,
            snapshot: self.snapshot,
            block: self.block,
            absent,
            low_part,
        }))
    }

    /// Decoded as `key`'s kind; a value that is not one is a failed
    /// verification.
    pub fn decode(self, key: &ReadKey) -> Result<KeyState, ReadError> {
        let absent = self.value.is_none();
        let unverifiable =
            |e: &dyn std::fmt::Display| ReadError::Unverifiable(format!("{}: {e}", self.snapshot));
        match key {
            ReadKey::Account(_) => {
                let value = match &self.value {
                    Some(v) => {
                        protocol::decode_value(v, self.layout).map_err(|e| unverifiable(&e))?
                    }
                    None => AccountValue {
                        balance: U256::ZERO,
                        nonce: 0,
                        code: CodeRef::None,
                    },
                };
                if let CodeRef::Table(n) = value.code {
                    if self.code_table.is_none_or(|t| n > t.count) {
                        return Err(unverifiable(&format!("code entry {n} is not in its table")));
                    }
                }
                Ok(KeyState::Account(AccountState {
                    balance: value.balance,
                    nonce: value.nonce,
                    snapshot: self.snapshot,
                    block: self.block,
                    absent,
                    code: value.code,
                    code_table: self.code_table,
                }))
            }
            ReadKey::Slot { contract, .. } | ReadKey::HighPart { contract, .. } => {
                let high = matches!(key, ReadKey::HighPart { .. });
                self.decode_slot(contract, high)
            }
        }
    }
}

/// How a level is read, for status and logs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadMode {
    /// By PIR queries (its setup downloaded).
    Pir,
    /// Its table downloaded whole (or found in the disk cache).
    Whole,
    /// Its table built here from the levels it merges, already held:
    /// nothing downloaded, no query.
    Merged,
}

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

    pub fn mode(&self) -> ReadMode {
        match self {
            Level::Pir(_) => ReadMode::Pir,
            Level::Whole(w) => w.mode,
        }
    }
}

/// A level held whole: read locally.
pub struct WholeLevel {
    pub entry: CatalogEntry,
    pub table: protocol::table::Table,
    /// [`ReadMode::Whole`] or [`ReadMode::Merged`].
    pub mode: ReadMode,
}

impl WholeLevel {
    /// Values of `keys` in this level (`None`: nothing to read).
    pub fn read(&self, keys: &[Option<B256>]) -> Vec<Found> {
        keys.iter()
            .map(|k| self.table.get(&(*k)?.0).map(<[u8]>::to_vec))
            .collect()
    }
}

/// A view with a client for each of its levels, base first.
pub struct ViewClient {
    pub view: View,
    pub levels: Vec<Level>,
    /// The hot tier it reads, if any ([`protocol::view::hot_for`]).
    pub hot: Option<HotTier>,
}

/// A hot tier held whole, and the level of the view it stands on: it
/// holds the state at that level's block, so it answers over that level
/// and those below, under the levels above.
#[derive(Clone)]
pub struct HotTier {
    pub level: Arc<WholeLevel>,
    /// The index in [`ViewClient::levels`] of the level it stands on.
    pub on: usize,
}

impl ViewClient {
    /// The freshest level's id: names the view in logs and the replay.
    pub fn top(&self) -> String {
        self.levels
            .last()
            .expect("a view has a level")
            .entry()
            .id
            .url_form()
    }

    /// Whether the hot tier holds `key`: then no PIR level at or below
    /// the one it stands on is asked for it (only those above it, which
    /// may hold a newer value).
    pub fn hot_holds(&self, key: &B256) -> bool {
        self.hot
            .as_ref()
            .is_some_and(|hot| hot.level.table.get(&key.0).is_some())
    }

    /// The index of the first level above the hot tier (`None` without
    /// one): the levels a key the tier holds is still asked of.
    pub fn above_hot(&self) -> Option<usize> {
        self.hot.as_ref().map(|hot| hot.on + 1)
    }

    /// The contracts whose storage the view holds: its base's list.
    pub fn storage(&self) -> &protocol::storage::PrivateStorage {
        &self.levels[0].entry().manifest.storage
    }

    /// Whether the view can answer `key` at all: an account, or a slot
    /// of a contract whose storage it holds.
    pub fn holds(&self, key: &ReadKey) -> Result<(), ReadError> {
        match key {
            ReadKey::Slot { contract, .. } | ReadKey::HighPart { contract, .. }
                if !self.storage().holds(contract) =>
            {
                Err(ReadError::NotListed {
                    contract: *contract,
                    snapshot: self.top(),
                })
            }
            _ => Ok(()),
        }
    }

    /// The answer for query `i` (of `key`) given what each level found
    /// (`found[level][query]`): the freshest level holding the key, the
    /// hot tier over the levels it stands on; absent from every level of
    /// a complete view is 0.
    pub fn freshest(
        &self,
        found: &[Vec<Found>],
        i: usize,
        key: &ReadKey,
    ) -> Result<KeyState, ReadError> {
        Ok(self.freshest_from(found, i, key)?.0)
    }

    /// [`Self::freshest`], and whether the hot tier gave it.
    pub fn freshest_from(
        &self,
        found: &[Vec<Found>],
        i: usize,
        key: &ReadKey,
    ) -> Result<(KeyState, bool), ReadError> {
        let hit = self.hit(found, i, key, Tier::Read)?;
        let from_tier = hit.from_tier;
        Ok((hit.decode(key)?, from_tier))
    }

    /// [`Self::freshest`] of a key the tier was found forging: the levels'
    /// value, those below the tier read from `below` (what an audit's
    /// answers said each held), never the tier's. `None` where `below`
    /// lacks a PIR level of this view under the tier (the audit saw
    /// another chain of levels: a merge), or where the view cannot say.
    pub fn freshest_corrected(
        &self,
        found: &[Vec<Found>],
        i: usize,
        key: &ReadKey,
        below: &[(SnapshotId, Found)],
    ) -> Option<KeyState> {
        let under = self.above_hot().unwrap_or(0);
        let covered = self.levels[..under.min(self.levels.len())]
            .iter()
            .all(|level| match level {
                Level::Pir(_) => below.iter().any(|(id, _)| *id == level.entry().id),
                Level::Whole(_) => true,
            });
        if !covered {
            return None;
        }
        let column: Vec<Vec<Found>> = self
            .levels
            .iter()
            .zip(found)
            .map(|(level, values)| {
                let read = values.get(i).cloned().flatten();
                let audited = below.iter().find(|(id, _)| *id == level.entry().id);
                vec![read.or_else(|| audited.and_then(|(_, value)| value.clone()))]
            })
            .collect();
        self.hit(&column, 0, key, Tier::Skipped)
            .and_then(|hit| hit.decode(key))
            .ok()
    }

    /// [`Self::freshest`] of a key that names the wallet: decided by the
    /// levels the PIR request read, never by the hot tier, whose value
    /// (when it would have answered) is compared with theirs. The answer,
    /// and whether the tier disagrees: a tier stands on a level and holds
    /// that level's state, so a value of its own that differs from the
    /// levels' is a forgery (the operator's, who builds both).
    pub fn freshest_named(
        &self,
        found: &[Vec<Found>],
        i: usize,
        key: &ReadKey,
    ) -> (Result<KeyState, ReadError>, bool) {
        let read = self
            .hit(found, i, key, Tier::Skipped)
            .and_then(|h| h.decode(key));
        let tier = match self.hit(found, i, key, Tier::Read) {
            // A wide word's high part exists only where a level splits the
            // word (each level picks its own width): its low part is
            // compared instead.
            _ if matches!(key, ReadKey::HighPart { .. }) => return (read, false),
            Ok(hit) if hit.from_tier => hit.decode(key),
            // The tier would not have answered: nothing to compare.
            _ => return (read, false),
        };
        let disagrees = match (&read, &tier) {
            (Ok(read), Ok(tier)) => !same_state(read, tier),
            // The levels' value reads, the tier's does not: it is no value.
            (Ok(_), Err(_)) => true,
            // The levels cannot say (an incomplete view without the key):
            // nothing to compare with.
            (Err(_), _) => false,
        };
        (read, disagrees)
    }

    /// Whether the hot tier's value of `key` differs from the levels' (the
    /// comparison [`Self::freshest_named`] makes), its PIR levels' values
    /// read from `asked` (each one's answer to a query of it), its whole
    /// levels' from their tables. False where a PIR level was not asked.
    pub fn tier_disagrees(&self, key: &ReadKey, asked: &[(usize, Found)]) -> bool {
        let pir_key = key.pir_key();
        let mut found: Vec<Vec<Found>> = Vec::with_capacity(self.levels.len());
        for (l, level) in self.levels.iter().enumerate() {
            let value = match level {
                Level::Whole(w) => w.read(&[Some(pir_key)]).pop().flatten(),
                Level::Pir(_) => match asked.iter().find(|(i, _)| *i == l) {
                    Some((_, value)) => value.clone(),
                    None => return false,
                },
            };
            found.push(vec![value]);
        }
        self.freshest_named(&found, 0, key).1
    }

    /// The freshest value of query `i`: the levels above the hot tier,
    /// the tier (unless `tier` skips it), then the levels below it.
    fn hit(
        &self,
        found: &[Vec<Found>],
        i: usize,
        key: &ReadKey,
        tier: Tier,
    ) -> Result<Hit, ReadError> {
        let in_level = |l: usize| {
            let value = found[l][i].as_ref()?;
            Some((self.levels[l].entry(), value.clone(), false))
        };
        let above = self.above_hot().unwrap_or(0);
        let hit = (above..self.levels.len())
            .rev()
            .find_map(in_level)
            .or_else(|| {
                let hot = self.hot.as_ref().filter(|_| tier == Tier::Read)?;
                let key = key.pir_key();
                let value = hot.level.table.get(&key.0)?;
                Some((&hot.level.entry, value.to_vec(), true))
            })
            .or_else(|| (0..above).rev().find_map(in_level));
        match hit {
            Some((entry, value, from_tier)) => Ok(Hit {
                value: Some(value),
                snapshot: entry.id.url_form(),
                block: self.view.block,
                layout: entry.manifest.layout(),
                code_table: entry.manifest.codes,
                from_tier,
            }),
            None if self.view.complete => Ok(Hit {
                value: None,
                snapshot: self.top(),
                block: self.view.block,
                layout: ValueLayout::WithCode,
                code_table: None,
                from_tier: false,
            }),
            None => Err(ReadError::NotInPrivateSet {
                snapshot: self.top(),
                kind: self.levels[0].entry().manifest.kind.name(),
            }),
        }
    }
}

/// Whether a lookup may take the hot tier's value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Tier {
    Read,
    Skipped,
}

/// Whether two reads of one key (from different levels) hold the same
/// state: balance, nonce and whether (not which: each level numbers its
/// own code table) the account has code; a slot's word.
///
/// What a level cannot say is not held against it: a code it does not
/// know (`Unknown`), and the high bits of a wide word stored whole in one
/// level and split in another (each level picks its width from its own
/// values; its low bits are compared).
fn same_state(a: &KeyState, b: &KeyState) -> bool {
    match (a, b) {
        (KeyState::Account(a), KeyState::Account(b)) => {
            let unknown = |c: &CodeRef| *c == CodeRef::Unknown;
            let same_code = unknown(&a.code)
                || unknown(&b.code)
                || std::mem::discriminant(&a.code) == std::mem::discriminant(&b.code);
            a.balance == b.balance && a.nonce == b.nonce && same_code
        }
        // Stored whole in one level, split in another: the low part's
        // bits (a compact value's, all but its flag byte) must agree.
        (KeyState::Slot(a), KeyState::Slot(b)) if a.low_part != b.low_part => {
            let bits = (protocol::account::COMPACT_VALUE_BYTES - 1) * 8;
            let low = |w: U256| w & ((U256::from(1u8) << bits) - U256::from(1u8));
            low(a.word) == low(b.word)
        }
        (KeyState::Slot(a), KeyState::Slot(b)) => a.word == b.word,
        _ => false,
    }
}

/// The bytes of a delta's whole table, when it is read whole: its table
/// is cheaper to download than its hint, or it publishes no canary (a
/// level is never read by PIR unchecked). Bases are always read by PIR
/// (their tables, when small, serve other clients).
pub fn whole_table_bytes(entry: &CatalogEntry) -> Option<u64> {
    let bytes = entry.manifest.files.get(TABLE_FILE)?.bytes;
    match entry.manifest.kind {
        // Read whole by every client, whatever its size.
        protocol::SnapshotKind::Hot { .. } => return Some(bytes),
        protocol::SnapshotKind::Delta { .. } => {}
        _ => return None,
    }
    let cheaper = bytes < entry.manifest.pir.hint_bytes;
    (cheaper || entry.manifest.canaries.is_empty()).then_some(bytes)
}

/// The bytes a level costs to open at most: its table when it is read
/// whole, else its setup.
pub fn opening_bytes(entry: &CatalogEntry) -> u64 {
    whole_table_bytes(entry).unwrap_or(entry.manifest.pir.hint_bytes)
}

/// The cheapest way to build `target`'s table from other levels: a chain
/// of deltas of `catalog` (oldest first) that together span `target`'s
/// blocks (from its parent's block to its own), each with a table, and
/// the bytes of the pieces not `held` yet (held ones cost nothing). Their
/// tables laid over one another are `target`'s table when `target` is
/// their merge (the digest says). `None` for a level that is not a delta
/// with a table, or when no chain spans it.
pub fn cheapest_cover<'a>(
    target: &CatalogEntry,
    catalog: impl IntoIterator<Item = &'a CatalogEntry>,
    held: impl Fn(&SnapshotId) -> bool,
) -> Option<(Vec<SnapshotId>, u64)> {
    let protocol::SnapshotKind::Delta { from } = target.manifest.kind else {
        return None;
    };
    target.manifest.files.get(TABLE_FILE)?;
    let to = target.manifest.block_number;
    // Pieces: (from, to, cost, id), by their parent's block.
    let mut pieces: Vec<(u64, u64, u64, SnapshotId)> = catalog
        .into_iter()
        .filter(|e| e.id != target.id && e.manifest.chain_id == target.manifest.chain_id)
        .filter_map(|e| {
            let protocol::SnapshotKind::Delta { from: f } = e.manifest.kind else {
                return None;
            };
            let table = e.manifest.files.get(TABLE_FILE)?;
            let b = e.manifest.block_number;
            let cost = if held(&e.id) { 0 } else { table.bytes };
            (from <= f && f < b && b <= to).then_some((f, b, cost, e.id))
        })
        .collect();
    pieces.sort_unstable();
    // Cheapest chain to each block from `from`. A piece ending at block b
    // starts below b, so every block's best is settled before pieces
    // starting there are tried.
    let mut best: BTreeMap<u64, (u64, Option<usize>)> = BTreeMap::from([(from, (0, None))]);
    for (i, &(f, b, cost, _)) in pieces.iter().enumerate() {
        let Some(&(reached, _)) = best.get(&f) else {
            continue;
        };
        let total = reached + cost;
        if best.get(&b).is_none_or(|&(known, _)| total < known) {
            best.insert(b, (total, Some(i)));
        }
    }
    let &(cost, mut last) = best.get(&to)?;
    let mut chain = Vec::new();
    while let Some(i) = last {
        let (f, _, _, id) = pieces[i];
        chain.push(id);
        last = best[&f].1;
    }
    chain.reverse();
    Some((chain, cost))
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
        ReadError::Unverifiable(format!(
            "{}: malformed response: {e}",
            snap.entry.id.url_form()
        ))
    })?;
    if responses.len() != pendings.len() {
        return Err(ReadError::Unverifiable(format!(
            "{}: {} answers to {} queries",
            snap.entry.id.url_form(),
            responses.len(),
            pendings.len()
        )));
    }
    pendings
        .into_iter()
        .zip(&responses)
        .map(
            |(pending, response)| match snap.client.decode(pending, response) {
                Ok(Lookup::Found(v)) => Ok(Some(v)),
                Ok(Lookup::Absent) => Ok(None),
                Err(
                    e @ (ClientError::Corrupted
                    | ClientError::Shifted
                    | ClientError::Decode(_)
                    | ClientError::WrongSetup),
                ) => Err(ReadError::Unverifiable(format!(
                    "{}: {e}",
                    snap.entry.id.url_form()
                ))),
            },
        )
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use protocol::manifest::FileDigest;
    use protocol::SnapshotKind;

    /// A delta of chain 1 over `(from, block]` whose table has `bytes`.
    fn delta(from: u64, block: u64, bytes: u64) -> CatalogEntry {
        let table = FileDigest {
            bytes,
            sha3_256: protocol::sha3_hex(format!("{from}-{block}").as_bytes()),
        };
        protocol::testing::entry(
            1,
            block,
            SnapshotKind::Delta { from },
            &[(TABLE_FILE, table)],
        )
    }

    #[test]
    fn a_merge_is_built_from_the_cheapest_chain_that_spans_it() {
        // Blocks 0..4 one at a time, their merges (0,2] and (2,4], and
        // the merge of all four.
        let ones: Vec<CatalogEntry> = (0..4).map(|b| delta(b, b + 1, 100)).collect();
        let (low, high, all) = (delta(0, 2, 150), delta(2, 4, 150), delta(0, 4, 280));
        let mut catalog = ones.clone();
        catalog.extend([low.clone(), high.clone(), all.clone()]);
        let ids = |v: &[&CatalogEntry]| v.iter().map(|e| e.id).collect::<Vec<_>>();
        // Every one-block delta held: they build everything, for nothing.
        let held_ones = |id: &SnapshotId| ones.iter().any(|e| e.id == *id);
        let (chain, cost) = cheapest_cover(&all, &catalog, held_ones).unwrap();
        assert_eq!(cost, 0);
        assert_eq!(chain.len(), 4, "{chain:?}");
        // The newest one-block delta not held yet (published with the merge
        // above it): only it is downloaded.
        let all_but_last = |id: &SnapshotId| ones[..3].iter().any(|e| e.id == *id);
        let (chain, cost) = cheapest_cover(&high, &catalog, all_but_last).unwrap();
        assert_eq!((chain, cost), (ids(&[&ones[2], &ones[3]]), 100));
        // Nothing held: the cheapest downloads (the two merges below).
        let (chain, cost) = cheapest_cover(&all, &catalog, |_| false).unwrap();
        assert_eq!((chain, cost), (ids(&[&low, &high]), 300));
        // A gap (block 2..3 missing): no chain.
        let gapped: Vec<CatalogEntry> = catalog
            .iter()
            .filter(|e| e.id != ones[2].id && e.id != high.id)
            .cloned()
            .collect();
        assert!(cheapest_cover(&all, &gapped, |_| true).is_none());
        // Not a delta, or a delta without a table: no chain.
        let mut tableless = all.clone();
        tableless.manifest.files.clear();
        assert!(cheapest_cover(&tableless, &catalog, |_| true).is_none());
        let mut full = all.clone();
        full.manifest.kind = SnapshotKind::Full;
        assert!(cheapest_cover(&full, &catalog, |_| true).is_none());
        // Another chain's deltas do not count.
        let other: Vec<CatalogEntry> = catalog
            .iter()
            .cloned()
            .map(|mut e| {
                e.manifest.chain_id = 2;
                e.id.chain_id = 2;
                e
            })
            .collect();
        assert!(cheapest_cover(&all, &other, |_| true).is_none());
    }
}
