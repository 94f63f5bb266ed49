//! The Merkle-Patricia roots a snapshot's records imply: the state root
//! (every account, by its code hash and storage root) and the storage
//! root of each listed contract (every slot of it), recomputed with
//! alloy-trie so that they can be compared with the block header's.
//!
//! Records come sorted by key (keccak256 of the address), the order the
//! trie needs, so the state root is streamed: each of the 16 subtries under
//! the first nibble of the key is hashed on a thread of its own, from an
//! iterator over its part of the records, and the 16 hashes make the root
//! branch. Nothing but the builders' stacks is held.

use alloy_primitives::{B256, U256};
use alloy_trie::{HashBuilder, Nibbles, TrieAccount};

use crate::account::AccountRecord;

/// Why a root cannot be recomputed.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RootError {
    #[error(
        "account {0} has no code hash or storage root in the records (its source could not \
         read them, or the snapshot was written before records carried them)"
    )]
    Unknown(B256),
}

/// The records of one part of the key space, in key order.
pub type Part<'a> = Box<dyn Iterator<Item = AccountRecord> + Send + 'a>;

/// The state root of the accounts that `part(n)` gives for each first key
/// nibble `n` (0..16), each in key order: every one of them is in the
/// trie (a view leaves out what its deltas deleted, [`crate::folded`]).
pub fn state_root<'a>(part: impl Fn(u8) -> Part<'a> + Sync) -> Result<B256, RootError> {
    let subtries: Vec<Result<Option<B256>, RootError>> = std::thread::scope(|scope| {
        let part = &part;
        let threads: Vec<_> = (0..16u8)
            .map(|n| scope.spawn(move || subtrie_root(part(n))))
            .collect();
        threads
            .into_iter()
            .map(|t| t.join().expect("a subtrie thread panicked"))
            .collect()
    });
    let subtries = subtries.into_iter().collect::<Result<Vec<_>, _>>()?;
    if subtries.iter().all(Option::is_some) {
        // A root branch with 16 children, each referenced by its hash (an
        // account leaf's encoding is never under 32 bytes, so no child is
        // inlined).
        let mut root = HashBuilder::default();
        for (n, hash) in subtries.into_iter().enumerate() {
            root.add_branch(Nibbles::from_nibbles([n as u8]), hash.unwrap(), false);
        }
        return Ok(root.root());
    }
    // A small state (some nibble unused): its root is not a full branch;
    // one builder over every part, in order.
    let mut whole = HashBuilder::default();
    for n in 0..16u8 {
        for account in part(n) {
            add_account(&mut whole, &account, 0)?;
        }
    }
    Ok(whole.root())
}

/// The hash of the subtrie under one first nibble: the root of the trie of
/// its keys without that nibble. `None` when it holds no account.
fn subtrie_root(accounts: Part<'_>) -> Result<Option<B256>, RootError> {
    let mut builder = HashBuilder::default();
    let mut any = false;
    for account in accounts {
        add_account(&mut builder, &account, 1)?;
        any = true;
    }
    Ok(any.then(|| builder.root()))
}

/// Adds `account`'s leaf, its key without the first `skip` nibbles.
fn add_account(
    builder: &mut HashBuilder,
    account: &AccountRecord,
    skip: usize,
) -> Result<(), RootError> {
    if !account.trie_known() {
        return Err(RootError::Unknown(account.key));
    }
    let key = Nibbles::unpack(account.key);
    builder.add_leaf(key.slice(skip..), &leaf(account));
    Ok(())
}

/// `account`'s value in the state trie: the RLP of (nonce, balance,
/// storage root, code hash).
pub fn leaf(account: &AccountRecord) -> Vec<u8> {
    alloy_rlp::encode(TrieAccount::new(
        account.nonce,
        account.balance,
        account.storage_root,
        account.code_hash,
    ))
}

/// The storage root of one contract's `words` (hashed slot, word; any
/// order, each slot once; zero words are not in the trie).
pub fn storage_root(mut words: Vec<(B256, U256)>) -> B256 {
    words.retain(|(_, w)| !w.is_zero());
    words.sort_unstable_by_key(|(slot, _)| *slot);
    alloy_trie::root::storage_root(words)
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloy_primitives::{keccak256, Address};

    fn accounts(n: u32) -> Vec<AccountRecord> {
        let mut out: Vec<AccountRecord> = (0..n)
            .map(|i| {
                let a = Address::left_padding_from(&i.to_be_bytes());
                let r =
                    AccountRecord::new(a, U256::from(i) * U256::from(1_000_003u64), i as u64 % 7);
                match i % 5 {
                    0 => r.with_trie(keccak256(i.to_le_bytes()), keccak256(i.to_be_bytes())),
                    _ => r,
                }
            })
            .collect();
        out.sort_by_key(|r| r.key);
        out
    }

    fn root_by_parts(records: &[AccountRecord]) -> Result<B256, RootError> {
        state_root(|n| Box::new(records.iter().filter(move |r| r.key[0] >> 4 == n).cloned()))
    }

    fn alloy_root(records: &[AccountRecord]) -> B256 {
        alloy_trie::root::state_root(records.iter().map(|r| {
            let leaf = TrieAccount::new(r.nonce, r.balance, r.storage_root, r.code_hash);
            (r.key, leaf)
        }))
    }

    #[test]
    fn parallel_parts_give_alloys_root_large_and_small() {
        for n in [0, 1, 2, 5, 40, 3000] {
            let records = accounts(n);
            assert_eq!(
                root_by_parts(&records).unwrap(),
                alloy_root(&records),
                "{n} accounts"
            );
        }
    }

    #[test]
    fn the_bundled_mainnet_genesis_gives_mainnets_genesis_root() {
        let genesis = crate::sources::genesis::mainnet();
        let mut records = genesis.records.clone();
        records.sort_by_key(|r| r.key);
        let want: B256 = "0xd7f8974fb5ac78d9ac099b9ad5018bedc2ce0a72dad1827a1709da30580f0544"
            .parse()
            .unwrap();
        assert_eq!(root_by_parts(&records).unwrap(), want);
    }

    #[test]
    fn unknown_trie_fields_are_refused() {
        let mut records = accounts(300);
        let unknown = records[7].clone().without_trie();
        records[7] = unknown.clone();
        assert_eq!(
            root_by_parts(&records),
            Err(RootError::Unknown(unknown.key))
        );
    }

    #[test]
    fn storage_roots_skip_zero_words() {
        let one = (keccak256(B256::with_last_byte(1)), U256::from(5));
        let zero = (keccak256(B256::with_last_byte(2)), U256::ZERO);
        let want =
            alloy_trie::root::storage_root_unhashed([(B256::with_last_byte(1), U256::from(5))]);
        assert_eq!(storage_root(vec![zero, one]), want);
        assert_eq!(storage_root(vec![zero]), crate::account::EMPTY_STORAGE_ROOT);
    }
}
