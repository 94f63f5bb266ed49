//! The `dump` source: the whole state a node hands over over JSON-RPC,
//! what a node without a genesis file or a datadir offers for a base:
//! anvil's `anvil_dumpState` (every account with its code and every
//! storage slot, at its newest block, in one reply) or geth's
//! `debug_accountRange` (pages of accounts by key, each with its code and
//! storage, at a block). The caller checks the state root it implies
//! against the node's header of that block before using it.

use std::collections::BTreeMap;
use std::io::Read;

use alloy_genesis::GenesisAccount;
use alloy_primitives::{Address, Bytes, B256, U256};
use serde::Deserialize;

use protocol::storage::PrivateStorage;

use crate::pipeline::ExportedState;

/// Largest dump read, decompressed: a development chain's state is a few
/// MiB; a reply that inflates past this is refused, not held.
pub const MAX_DUMP_JSON_BYTES: u64 = 2 << 30;

/// A dump that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum DumpError {
    #[error("the state dump is not gzip: {0}")]
    Gzip(std::io::Error),
    #[error("the state dump inflates past {MAX_DUMP_JSON_BYTES} bytes (a development chain's is a few MiB)")]
    TooLarge,
    #[error("the state dump is not anvil's JSON: {0}")]
    Json(#[from] serde_json::Error),
    /// geth names an account by address only where it recorded the
    /// preimage of its key.
    #[error("debug_accountRange names account key {key} by no address: geth holds no preimage of it (start geth with --cache.preimages from its first block to dump its state by address, or build the base from a genesis file or a reth datadir)")]
    NoPreimage { key: String },
    #[error("debug_accountRange's account {address}: {why}")]
    BadAccount { address: Address, why: String },
    /// Its slots do not give the storage root geth gives it: geth left
    /// out slots it holds no preimage of.
    #[error("debug_accountRange's account {address}: its slots give storage root {slots}, geth's is {geth} (geth holds no preimage of some of its slots: run it with --cache.preimages from its first block)")]
    MissingSlots {
        address: Address,
        slots: B256,
        geth: B256,
    },
}

/// A whole state by address, as a genesis file's alloc holds it.
pub type Alloc = BTreeMap<Address, GenesisAccount>;

/// One reply of geth's `debug_accountRange`: accounts in key order, each
/// with its code and storage, and the key the next page starts at
/// (absent after the last page).
#[derive(Debug, Deserialize)]
pub struct AccountRangePage {
    accounts: BTreeMap<String, RangeAccount>,
    #[serde(default)]
    pub next: Option<Bytes>,
}

/// An account as geth's dump writes it (its `codeHash` is recomputed from
/// its code).
#[derive(Debug, Deserialize)]
struct RangeAccount {
    /// Its storage root, which the slots given must make.
    root: B256,
    /// In decimal.
    balance: String,
    nonce: u64,
    #[serde(default)]
    code: Option<Bytes>,
    /// Slot (its preimage) to word, in hex without `0x` or leading zeros;
    /// geth leaves out a slot whose preimage it lacks.
    #[serde(default)]
    storage: BTreeMap<B256, String>,
    #[serde(default)]
    address: Option<Address>,
    #[serde(default)]
    key: Option<Bytes>,
}

impl AccountRangePage {
    /// How many accounts the page holds.
    pub fn len(&self) -> usize {
        self.accounts.len()
    }

    /// The key (an account's hash) the page starts at, where geth gives
    /// it.
    pub fn first_key(&self) -> Option<&[u8]> {
        let keys = self
            .accounts
            .values()
            .filter_map(|a| a.key.as_ref().map(|k| k.as_ref()));
        keys.min()
    }

    /// How many records (accounts and slots) the page holds.
    pub fn records(&self) -> usize {
        let slots: usize = self.accounts.values().map(|a| a.storage.len()).sum();
        self.accounts.len() + slots
    }

    pub fn is_empty(&self) -> bool {
        self.accounts.is_empty()
    }

    /// Adds the page's accounts to `alloc` by address; an account geth
    /// cannot name is an error (a base needs every account).
    pub fn add_to(self, alloc: &mut Alloc) -> Result<(), DumpError> {
        for (name, account) in self.accounts {
            let Some(address) = account.address else {
                let key = account.key.map_or(name, |k| k.to_string());
                return Err(DumpError::NoPreimage { key });
            };
            let bad = |why: String| DumpError::BadAccount { address, why };
            let balance = U256::from_str_radix(&account.balance, 10)
                .map_err(|e| bad(format!("balance {:?}: {e}", account.balance)))?;
            let mut storage = BTreeMap::new();
            for (slot, word) in account.storage {
                let value = U256::from_str_radix(word.trim_start_matches("0x"), 16)
                    .map_err(|e| bad(format!("slot {slot}: word {word:?}: {e}")))?;
                storage.insert(slot, B256::from(value));
            }
            let words = storage
                .iter()
                .map(|(slot, word)| (*slot, U256::from_be_bytes(word.0)));
            let slots = alloy_trie::root::storage_root_unhashed(words);
            if slots != account.root {
                let geth = account.root;
                return Err(DumpError::MissingSlots {
                    address,
                    slots,
                    geth,
                });
            }
            let code = account.code.filter(|c| !c.is_empty());
            let genesis = GenesisAccount {
                nonce: Some(account.nonce),
                balance,
                code,
                storage: Some(storage),
                private_key: None,
            };
            alloc.insert(address, genesis);
        }
        Ok(())
    }
}

/// The full state of `chain_id` at `block` from geth's account ranges
/// (`alloc`), with the storage `listed` holds and the state root it
/// implies (the caller compares it with the node's header).
pub fn account_range_state(
    alloc: &Alloc,
    chain_id: u64,
    block: u64,
    listed: &PrivateStorage,
) -> ExportedState {
    let source = format!("dump:debug_accountRange@{block}");
    crate::genesis::alloc_state(alloc, chain_id, block, listed, &source)
}

/// What of anvil's dump a base needs (the blocks and transactions it also
/// carries are skipped).
#[derive(Deserialize)]
struct AnvilDump {
    best_block_number: u64,
    accounts: BTreeMap<Address, GenesisAccount>,
}

/// Parses anvil's dump (gzip-compressed JSON) into the full state of
/// `chain_id` at the block it names, with the storage of the contracts
/// `listed` holds (every contract's for the whole state), and the state
/// root its accounts imply (`state_root`: the caller compares it with the
/// node's header). No block hash or time: the caller reads the header.
pub fn parse_anvil_dump(
    gzipped: &[u8],
    chain_id: u64,
    listed: &PrivateStorage,
) -> Result<ExportedState, DumpError> {
    let json = inflate(gzipped, MAX_DUMP_JSON_BYTES)?;
    let dump: AnvilDump = serde_json::from_slice(&json)?;
    let source = format!("dump:anvil_dumpState@{}", dump.best_block_number);
    Ok(crate::genesis::alloc_state(
        &dump.accounts,
        chain_id,
        dump.best_block_number,
        listed,
        &source,
    ))
}

/// The gzip stream inflated, refused once it passes `limit` bytes (read
/// no further: a small reply may inflate to any size).
fn inflate(gzipped: &[u8], limit: u64) -> Result<Vec<u8>, DumpError> {
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(gzipped)
        .take(limit + 1)
        .read_to_end(&mut out)
        .map_err(DumpError::Gzip)?;
    match out.len() as u64 > limit {
        true => Err(DumpError::TooLarge),
        false => Ok(out),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn gzip(text: &str) -> Vec<u8> {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        e.write_all(text.as_bytes()).unwrap();
        e.finish().unwrap()
    }

    /// anvil's shape: nonces as numbers, balances and words in hex, the
    /// blocks beside the accounts.
    const DUMP: &str = r#"{"block":{"number":"0x2"},"best_block_number":2,"blocks":[{}],
        "accounts":{
        "0x00000000000000000000000000000000000000aa":{"nonce":1,"balance":"0x0","code":"0x6000",
            "storage":{"0x0000000000000000000000000000000000000000000000000000000000000001":"0x0000000000000000000000000000000000000000000000000000000000000005",
                       "0x0000000000000000000000000000000000000000000000000000000000000002":"0x0000000000000000000000000000000000000000000000000000000000000000"}},
        "0x00000000000000000000000000000000000000bb":{"nonce":3,"balance":"0xde0b6b3a7640000","code":"0x","storage":{}}},
        "historical_states":null}"#;

    #[test]
    fn a_dump_is_the_state_at_its_block_with_every_slot() {
        let whole = PrivateStorage::whole_state();
        let state = parse_anvil_dump(&gzip(DUMP), 31337, &whole).unwrap();
        assert_eq!((state.chain_id, state.block_number), (31337, 2));
        assert_eq!(state.records.len(), 2);
        let eoa: Address = "0x00000000000000000000000000000000000000bb"
            .parse()
            .unwrap();
        let eoa = state
            .records
            .iter()
            .find(|r| r.address == Some(eoa))
            .unwrap();
        assert_eq!(
            (eoa.balance, eoa.nonce),
            (U256::from(10u64).pow(U256::from(18)), 3)
        );
        assert_eq!(state.storage.len(), 1, "the zero word is not a record");
        assert_eq!(state.storage[0].value, U256::from(5));
        assert_eq!(
            state.storage[0].hashed_slot,
            alloy_primitives::keccak256(B256::with_last_byte(1))
        );
        assert_eq!(state.codes.len(), 1);
        assert!(state.state_root.is_some() && state.block_hash.is_none());
        // Listed storage only: no slot of an unlisted contract.
        let none = parse_anvil_dump(&gzip(DUMP), 31337, &PrivateStorage::default()).unwrap();
        assert!(none.storage.is_empty());
        assert_eq!(
            none.state_root, state.state_root,
            "the root covers every slot"
        );
    }

    /// geth's shape: balances in decimal, words trimmed and without `0x`,
    /// accounts keyed by address where it knows the preimage.
    fn range() -> String {
        let slot_root =
            alloy_trie::root::storage_root_unhashed([(B256::with_last_byte(1), U256::from(5))]);
        let empty = alloy_trie::EMPTY_ROOT_HASH;
        format!(
            r#"{{"root":"5e5a","accounts":{{
        "0x00000000000000000000000000000000000000Aa":{{"balance":"1000000000000000000","nonce":3,
            "root":"{slot_root}","codeHash":"0xc5","code":"0x6000",
            "storage":{{"0x0000000000000000000000000000000000000000000000000000000000000001":"05"}},
            "address":"0x00000000000000000000000000000000000000aa","key":"0x01"}},
        "0x00000000000000000000000000000000000000bB":{{"balance":"0","nonce":0,"root":"{empty}","codeHash":"0xc5",
            "address":"0x00000000000000000000000000000000000000bb","key":"0x02"}}}},
        "next":"0x03"}}"#
        )
    }

    #[test]
    fn an_account_range_page_is_read_by_address() {
        let page: AccountRangePage = serde_json::from_str(&range()).unwrap();
        assert_eq!(page.next, Some(Bytes::from_static(&[3])));
        assert_eq!((page.len(), page.records()), (2, 3));
        let mut alloc = Alloc::new();
        page.add_to(&mut alloc).unwrap();
        let contract: Address = "0x00000000000000000000000000000000000000aa"
            .parse()
            .unwrap();
        let account = &alloc[&contract];
        assert_eq!(account.balance, U256::from(10u64).pow(U256::from(18)));
        assert_eq!(account.nonce, Some(3));
        assert_eq!(
            account.storage.as_ref().unwrap()[&B256::with_last_byte(1)],
            B256::with_last_byte(5)
        );
        let state = account_range_state(&alloc, 7, 9, &PrivateStorage::whole_state());
        assert_eq!((state.records.len(), state.storage.len()), (2, 1));
        assert_eq!(state.block_number, 9);
    }

    #[test]
    fn an_account_geth_cannot_name_is_refused() {
        let nameless = format!(
            r#"{{"root":"5e","accounts":{{"pre(0xabcd)":{{"balance":"0","nonce":0,
            "root":"{}","codeHash":"0xc5","key":"0xabcd"}}}}}}"#,
            alloy_trie::EMPTY_ROOT_HASH
        );
        let page: AccountRangePage = serde_json::from_str(&nameless).unwrap();
        let refused = page.add_to(&mut Alloc::new()).unwrap_err();
        assert!(
            refused.to_string().contains("--cache.preimages"),
            "{refused}"
        );
        let bad = range().replace("\"05\"", "\"zz\"");
        let page: AccountRangePage = serde_json::from_str(&bad).unwrap();
        assert!(matches!(
            page.add_to(&mut Alloc::new()),
            Err(DumpError::BadAccount { .. })
        ));
        // A slot geth left out (no preimage): the storage root says so.
        let missing = range().replace("\"05\"", "\"06\"");
        let page: AccountRangePage = serde_json::from_str(&missing).unwrap();
        let refused = page.add_to(&mut Alloc::new()).unwrap_err();
        assert!(
            matches!(refused, DumpError::MissingSlots { .. }),
            "{refused}"
        );
    }

    #[test]
    fn a_broken_dump_is_a_clear_error() {
        assert!(matches!(
            parse_anvil_dump(b"not gzip", 1, &PrivateStorage::default()),
            Err(DumpError::Gzip(_))
        ));
        assert!(matches!(
            parse_anvil_dump(
                &gzip(&DUMP[..DUMP.len() / 2]),
                1,
                &PrivateStorage::default()
            ),
            Err(DumpError::Json(_))
        ));
        assert!(matches!(
            parse_anvil_dump(&gzip(r#"{"accounts":{}}"#), 1, &PrivateStorage::default()),
            Err(DumpError::Json(_))
        ));
        // 1 MiB of zeros is a few KiB of gzip: refused past the bound.
        let bomb = gzip(&"0".repeat(1 << 20));
        assert!(bomb.len() < 8 << 10);
        assert!(matches!(inflate(&bomb, 1000), Err(DumpError::TooLarge)));
        assert_eq!(inflate(&bomb, 1 << 20).unwrap().len(), 1 << 20);
        let mut truncated = gzip(DUMP);
        truncated.truncate(truncated.len() - 12);
        assert!(parse_anvil_dump(&truncated, 1, &PrivateStorage::default()).is_err());
    }
}
