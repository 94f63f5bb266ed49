//! The hot tier (brief section 17): the state most transactions read,
//! published whole so that a wallet reads it with no PIR query.
//!
//! PIR hides which key is read; a key that every client downloads needs
//! no hiding. A swap reads a few keys that name its holder (its account,
//! its balance and allowance slots) and many more that every swapper on
//! that pool reads (the router's, the pool's, the tokens' and their
//! proxies' implementation slots). The follower counts, over a window of
//! blocks, how many distinct senders' transactions read or wrote each key
//! (the node's `prestateTracer`, which lists reads as well as writes;
//! state diffs see only writes), and keeps the keys of at least
//! `min_senders` senders, most first, within a byte budget, at each base's
//! block, so that it answers over the base and the deltas above it
//! overlay it. Senders, not transactions: an active wallet's own account
//! and balance slots are touched by many of its own transactions, and a
//! tier of "keys many transactions touched" would hold them. The rule and
//! its parameters are in the manifest (signed), and an attester chooses
//! again from its own node's traces ([`chosen_keys`]) and signs only a
//! tier of the same keys; the values are the chain's, checked like every
//! level's.

use std::collections::{BTreeSet, HashMap};

use alloy_primitives::{keccak256, Address, B256, U256};
use serde::Deserialize;

use protocol::manifest::SnapshotKind;
use protocol::storage::{PrivateStorage, StorageRecord};

use crate::folded::Folded;
use crate::records::Records;
use crate::store::{SnapshotStore, StoredSnapshot};

/// `[hot]` in the follower's config: whether and how the hot tier is
/// chosen.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HotPolicy {
    /// The tier's budget: its table's bytes, MiB (0: no hot tier).
    pub max_mib: u64,
    /// Blocks of activity it is chosen from, up to its block.
    pub window: u64,
    /// Keys read or written by the transactions of at least this many
    /// distinct senders in the window: a key of one wallet (its account,
    /// its balances) is touched by its own transactions and by the few
    /// that pay it, a router's or a pool's by every swapper.
    pub min_senders: u32,
}

/// The default and the least `min_senders` a tier is built with: fewer
/// would let one wallet and a friend make a key hot.
pub const MIN_SENDERS: u32 = 3;

/// The longest window an attester traces again (a day of mainnet blocks
/// is 7,200): a manifest naming more is refused, not traced.
pub const MAX_WINDOW: u64 = 65_536;

impl Default for HotPolicy {
    fn default() -> Self {
        HotPolicy {
            max_mib: 0,
            window: 256,
            min_senders: 8,
        }
    }
}

impl HotPolicy {
    pub fn enabled(&self) -> bool {
        self.max_mib > 0 && self.window > 0
    }

    /// The kind of the tier it builds (its parameters in the manifest).
    pub fn kind(&self) -> SnapshotKind {
        SnapshotKind::Hot {
            window: self.window,
            min_senders: self.min_senders.max(MIN_SENDERS),
            max_mib: self.max_mib,
        }
    }

    /// The policy a tier's kind names (`None`: not a tier).
    pub fn of_kind(kind: &SnapshotKind) -> Option<Self> {
        match *kind {
            SnapshotKind::Hot {
                window,
                min_senders,
                max_mib,
            } => Some(HotPolicy {
                max_mib,
                window,
                min_senders,
            }),
            _ => None,
        }
    }

    /// Entries the budget holds, each `entry_bytes` in the table.
    pub fn max_entries(&self, entry_bytes: u64) -> usize {
        let budget = self.max_mib.saturating_mul(1 << 20);
        usize::try_from(budget / entry_bytes.max(1)).unwrap_or(usize::MAX)
    }

    /// Entries the budget holds over a base whose values are
    /// `value_bytes` (a table entry is its key prefix and its value).
    pub fn max_entries_over(&self, value_bytes: u32) -> usize {
        self.max_entries(protocol::table::KEY_PREFIX as u64 + u64::from(value_bytes))
    }
}

/// A key of the state: an account, or a slot of a contract.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum HotKey {
    Account(Address),
    Slot(Address, B256),
}

/// How many distinct senders' transactions touched each key.
#[derive(Default, Debug)]
pub struct Activity {
    counts: HashMap<HotKey, u32>,
    /// Each (key, sender) counted once.
    seen: std::collections::HashSet<(HotKey, Address)>,
    pub transactions: u64,
}

impl Activity {
    /// One transaction of `sender` and its keys (a sender counted once
    /// per key, however many of its transactions touch it).
    pub fn add_transaction(&mut self, sender: Address, touched: &BTreeSet<HotKey>) {
        for key in touched {
            if self.seen.insert((*key, sender)) {
                *self.counts.entry(*key).or_default() += 1;
            }
        }
        self.transactions += 1;
    }

    /// The keys touched by at least `min_senders` distinct senders, most
    /// first (ties by key, so that the same activity gives the same
    /// tier), at most `max`.
    pub fn select(&self, min_senders: u32, max: usize) -> Vec<HotKey> {
        let mut hot: Vec<(u32, HotKey)> = self
            .counts
            .iter()
            .filter(|(_, n)| **n >= min_senders.max(1))
            .map(|(k, n)| (*n, *k))
            .collect();
        hot.sort_unstable_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        hot.into_iter().take(max).map(|(_, k)| k).collect()
    }
}

/// The tier's keys of what a transaction touched: each account, and each
/// slot of it.
fn keys_of(touched: &std::collections::BTreeMap<Address, BTreeSet<B256>>) -> BTreeSet<HotKey> {
    touched
        .iter()
        .flat_map(|(address, slots)| {
            std::iter::once(HotKey::Account(*address))
                .chain(slots.iter().map(move |slot| HotKey::Slot(*address, *slot)))
        })
        .collect()
}

/// The keys the rule of `policy` chooses for a tier at block `to` over a
/// base of `value_bytes` values, from `node`'s traces of the window
/// (`concurrency` blocks asked at once): the follower's choice, and the
/// attester's again. A block the node cannot trace (pruned state) is left
/// out (logged); none traced at all is a failure.
pub async fn chosen_keys(
    node: &crate::sources::rpc::RpcSource,
    to: u64,
    policy: &HotPolicy,
    value_bytes: u32,
    concurrency: usize,
) -> Result<Vec<HotKey>, crate::sources::rpc::RpcSourceError> {
    use futures_util::StreamExt as _;
    let from = to.saturating_sub(policy.window.max(1) - 1).max(1);
    let mut activity = Activity::default();
    let mut blocks = futures_util::stream::iter(from..=to)
        .map(|b| node.touched_keys(b))
        .buffered(concurrency.max(1));
    let (mut traced, mut last_error) = (0u64, None);
    while let Some(block) = blocks.next().await {
        match block {
            Ok(txs) => {
                traced += 1;
                for (sender, touched) in &txs {
                    activity.add_transaction(*sender, &keys_of(touched));
                }
            }
            Err(e) => last_error = Some(e),
        }
    }
    if let Some(e) = last_error {
        if traced == 0 {
            return Err(e);
        }
        tracing::warn!(traced, blocks = to + 1 - from, error = %e, "some blocks of the window not traced");
    }
    let min_senders = policy.min_senders.max(MIN_SENDERS);
    let keys = activity.select(min_senders, policy.max_entries_over(value_bytes));
    tracing::info!(
        from,
        to,
        transactions = activity.transactions,
        chosen = keys.len(),
        "hot keys chosen"
    );
    Ok(keys)
}

/// The tier's records: each chosen key's value in `folded` (the view at
/// the tier's block). An account the view does not hold is left out
/// (read by PIR as before: absent from the tier means nothing); a slot
/// of a contract whose storage the view holds is kept with its word,
/// 0 included (absent from such a view means 0). Slots of contracts the
/// view does not hold are left out.
pub fn records_of(folded: &Folded<'_>, keys: &[HotKey], held: &PrivateStorage) -> Records {
    let mut records = Records::default();
    for key in keys {
        match *key {
            HotKey::Account(address) => {
                if let Some(mut account) = folded.account(&keccak256(address)) {
                    account.address = Some(address);
                    records.accounts.push(account);
                }
            }
            HotKey::Slot(contract, slot) if held.holds(&contract) => {
                let pir_key = protocol::storage::storage_key_of(&contract, &slot);
                let word = folded.slot(&pir_key).map_or(U256::ZERO, |s| s.value);
                records
                    .storage
                    .push(StorageRecord::new(contract, slot, word));
            }
            HotKey::Slot(..) => {}
        }
    }
    records
}

/// Checks a hot tier against the levels it stands on in `store` (`all`:
/// the store's snapshots): every account and slot it holds has the value
/// the view at its block holds (a slot absent there is 0), and every level
/// of that view is `trusted`. Those levels must be checked against the
/// node on their own (`verify --state-root` checks the view's root next;
/// the attester trusts only levels it signed), so that a tier that agrees
/// with them holds the chain's values. The number of records checked.
pub fn check_against_view(
    store: &SnapshotStore,
    hot: &StoredSnapshot,
    all: &[StoredSnapshot],
    trusted: impl Fn(&StoredSnapshot) -> bool,
) -> Result<usize, String> {
    let levels = levels_under(hot, all)?;
    if let Some(untrusted) = levels.iter().find(|l| !trusted(l)) {
        return Err(format!(
            "the level {} it stands on is not checked (not attested by this key)",
            untrusted.id
        ));
    }
    let held = crate::folded::records(store, hot).map_err(|e| e.to_string())?;
    crate::folded::with_view(store, &levels, |folded| Ok(differences(folded, &held)))
        .map_err(|e| e.to_string())?
        .map_or(Ok(held.accounts.len() + held.storage.len()), Err)
}

/// Checks that a hot tier holds exactly the records of `chosen` (the keys
/// its rule chooses, applied again by the checker) in the view it stands
/// on: none left out, none added.
pub fn check_chosen_keys(
    store: &SnapshotStore,
    hot: &StoredSnapshot,
    all: &[StoredSnapshot],
    chosen: &[HotKey],
) -> Result<(), String> {
    let levels = levels_under(hot, all)?;
    let base = &levels.first().ok_or("an empty view")?.manifest;
    let held = crate::folded::records(store, hot).map_err(|e| e.to_string())?;
    let expected = crate::folded::with_view(store, &levels, |folded| {
        Ok(records_of(folded, chosen, &base.storage))
    })
    .map_err(|e| e.to_string())?;
    let keys = |r: &Records| -> BTreeSet<B256> {
        let accounts = r.accounts.iter().map(|a| a.key);
        accounts.chain(r.storage.iter().map(|s| s.key)).collect()
    };
    let (held, expected) = (keys(&held), keys(&expected));
    if held == expected {
        return Ok(());
    }
    let added = held.difference(&expected).count();
    let left_out = expected.difference(&held).count();
    Err(format!(
        "its keys are not the ones its rule chooses from this node's traces: {added} not chosen, {left_out} chosen but left out"
    ))
}

/// The levels of the view a hot tier stands on (its base first), in
/// `all`: the view at its block, which it must stand on.
fn levels_under(
    hot: &StoredSnapshot,
    all: &[StoredSnapshot],
) -> Result<Vec<StoredSnapshot>, String> {
    let m = &hot.manifest;
    let views = protocol::view::Views::build(&crate::store::as_entries(all));
    let view = views
        .at(m.chain_id, m.block_number)
        .filter(|v| v.complete)
        .ok_or_else(|| {
            format!(
                "no complete view at block {} to check it against",
                m.block_number
            )
        })?;
    let levels: Vec<StoredSnapshot> = view
        .snapshots
        .iter()
        .filter_map(|id| all.iter().find(|s| &s.id == id).cloned())
        .collect();
    let top = &levels.last().ok_or("an empty view")?.manifest;
    if !protocol::view::stands_on(m, top) {
        return Err(format!(
            "it does not stand on the view at block {} (another block hash, state root or storage claim)",
            m.block_number
        ));
    }
    Ok(levels)
}

/// The first record of `held` whose value `folded` does not have.
fn differences(folded: &Folded<'_>, held: &Records) -> Option<String> {
    for a in &held.accounts {
        let same = folded.account(&a.key).is_some_and(|v| {
            (v.balance, v.nonce, v.code_hash, v.storage_root)
                == (a.balance, a.nonce, a.code_hash, a.storage_root)
        });
        if !same {
            return Some(format!(
                "account {:?} ({}) is not the view's",
                a.address, a.key
            ));
        }
    }
    for s in &held.storage {
        let word = folded.slot(&s.key).map_or(U256::ZERO, |v| v.value);
        if word != s.value {
            return Some(format!("slot {} holds {}, the view {word}", s.key, s.value));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(keys: &[HotKey]) -> BTreeSet<HotKey> {
        keys.iter().copied().collect()
    }

    #[test]
    fn the_most_touched_keys_are_chosen_within_the_budget() {
        let (router, pool, holder) = (
            Address::with_last_byte(1),
            Address::with_last_byte(2),
            Address::with_last_byte(3),
        );
        let reserve = HotKey::Slot(pool, B256::with_last_byte(8));
        let mut activity = Activity::default();
        // Five swappers: each touches the router, the pool and its reserve
        // once per transaction (twice in one counts once), and itself.
        for i in 10..15u8 {
            let sender = Address::with_last_byte(i);
            let me = HotKey::Account(sender);
            activity.add_transaction(
                sender,
                &set(&[HotKey::Account(router), HotKey::Account(pool), reserve, me]),
            );
        }
        // A busy holder: ten transactions of its own touch its account and
        // its balance slot, and the reserve.
        let balance = HotKey::Slot(pool, B256::with_last_byte(9));
        for _ in 0..10 {
            activity.add_transaction(holder, &set(&[HotKey::Account(holder), balance, reserve]));
        }
        assert_eq!(activity.transactions, 15);
        let chosen = activity.select(3, 10);
        assert_eq!(
            chosen,
            [reserve, HotKey::Account(router), HotKey::Account(pool)],
            "most senders first, ties by key; one sender's keys left out, however busy"
        );
        assert_eq!(activity.select(3, 1), [reserve], "the budget");
        assert_eq!(activity.select(6, 10), [reserve]);
        assert_eq!(activity.select(7, 10), []);
        let policy = HotPolicy {
            max_mib: 1,
            ..HotPolicy::default()
        };
        assert_eq!(policy.max_entries(64), 16_384);
        assert!(!HotPolicy::default().enabled());
    }
}
