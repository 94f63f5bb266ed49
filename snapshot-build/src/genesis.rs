//! The `genesis` source: a chain's genesis JSON; its `alloc` is the full
//! state at block 0.

use std::path::Path;
use std::time::Instant;

use alloy_consensus::{Header, EMPTY_OMMER_ROOT_HASH, EMPTY_ROOT_HASH};
use alloy_genesis::Genesis;
use alloy_primitives::{Bloom, B256, B64};
use serde::de::IgnoredAny;
use serde::Deserialize;

use protocol::storage::{PrivateStorage, StorageRecord};

use crate::pipeline::ExportedState;
use protocol::account::AccountRecord;
use protocol::manifest::SnapshotKind;

/// Mainnet's genesis, bundled for the demo.
pub const MAINNET_GENESIS: &str = include_str!("../data/mainnet-genesis.json");

/// A genesis file that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum GenesisError {
    #[error("{path}: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("not a genesis file: {0}")]
    Json(#[from] serde_json::Error),
    #[error("no `alloc` object: not a genesis file")]
    NoAlloc,
    #[error("the genesis names no chain id (config.chainId): pass one")]
    NoChainId,
    #[error("the file's stateRoot {file} is not the root of its alloc ({computed}): a damaged or edited genesis")]
    StateRootMismatch { file: B256, computed: B256 },
}

/// What alloy's `Genesis` does not keep, or keeps with a default where
/// the file's silence matters: whether there is an `alloc` and a chain id,
/// and the file's `stateRoot`.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct FileOnly {
    alloc: Option<IgnoredAny>,
    state_root: Option<B256>,
    config: Option<ChainIdOnly>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ChainIdOnly {
    chain_id: Option<u64>,
}

/// Parses a genesis file's text (alloy's `Genesis`). `chain_id` overrides
/// (or supplies) the chain id of `config.chainId`. The state root is
/// computed from the alloc and must equal the file's `stateRoot` where it
/// has one.
pub fn parse_genesis(
    text: &str,
    chain_id: Option<u64>,
    source: &str,
) -> Result<ExportedState, GenesisError> {
    parse_genesis_listed(text, chain_id, source, &PrivateStorage::default())
}

/// [`parse_genesis`], with every storage slot the alloc gives the
/// `listed` contracts (a listed contract the alloc leaves out, or a slot
/// it does not set, holds 0).
pub fn parse_genesis_listed(
    text: &str,
    chain_id: Option<u64>,
    source: &str,
    listed: &PrivateStorage,
) -> Result<ExportedState, GenesisError> {
    let started = Instant::now();
    let file: FileOnly = serde_json::from_str(text)?;
    file.alloc.ok_or(GenesisError::NoAlloc)?;
    let chain_id = chain_id
        .or_else(|| file.config.and_then(|c| c.chain_id))
        .ok_or(GenesisError::NoChainId)?;
    let genesis: Genesis = serde_json::from_str(text)?;
    let mut state = alloc_state(&genesis.alloc, chain_id, 0, listed, source);
    let state_root = state.state_root.expect("computed");
    if let Some(stated) = file.state_root.filter(|&r| r != state_root) {
        return Err(GenesisError::StateRootMismatch {
            file: stated,
            computed: state_root,
        });
    }
    state.block_hash = genesis_block_hash(&genesis, state_root);
    state.block_time = Some(genesis.timestamp);
    state.export_s = started.elapsed().as_secs_f64();
    Ok(state)
}

/// Every account of `alloc` (a genesis file's, or a node's dump) as the
/// full state of `chain_id` at `block`, with the storage of the contracts
/// `listed` holds and the state root the alloc implies; no block hash or
/// time (the caller knows them).
pub fn alloc_state(
    alloc: &std::collections::BTreeMap<alloy_primitives::Address, alloy_genesis::GenesisAccount>,
    chain_id: u64,
    block: u64,
    listed: &PrivateStorage,
    source: &str,
) -> ExportedState {
    let started = Instant::now();
    let records = alloc
        .iter()
        .map(|(address, account)| {
            let trie = alloy_trie::TrieAccount::from(account.clone());
            AccountRecord::new(*address, account.balance, account.nonce.unwrap_or(0))
                .with_trie(trie.code_hash, trie.storage_root)
        })
        .collect();
    ExportedState {
        chain_id,
        block_number: block,
        block_hash: None,
        state_root: Some(alloy_trie::root::state_root_ref_unhashed(alloc)),
        block_time: None,
        parent_hash: None,
        kind: SnapshotKind::Full,
        source: source.to_string(),
        records,
        storage: alloc_storage(alloc, listed),
        listed: listed.clone(),
        export_s: started.elapsed().as_secs_f64(),
        codes: alloc
            .values()
            .filter_map(|a| a.code.clone())
            .filter(|c| !c.is_empty())
            .collect(),
    }
}

/// The non-zero slots the alloc gives the contracts `listed` holds (every
/// contract, for a whole-state snapshot).
fn alloc_storage(
    alloc: &std::collections::BTreeMap<alloy_primitives::Address, alloy_genesis::GenesisAccount>,
    listed: &PrivateStorage,
) -> Vec<StorageRecord> {
    alloc
        .iter()
        .filter(|(c, _)| listed.holds(c))
        .filter_map(|(c, account)| Some((*c, account.storage.as_ref()?)))
        .flat_map(|(c, slots)| {
            slots
                .iter()
                .filter(|(_, word)| !word.is_zero())
                .map(move |(slot, word)| StorageRecord::new(c, *slot, (*word).into()))
        })
        .collect()
}

/// Reads and parses a genesis file.
pub fn read_genesis(path: &Path, chain_id: Option<u64>) -> Result<ExportedState, GenesisError> {
    read_genesis_listed(path, chain_id, &PrivateStorage::default())
}

/// Reads and parses a genesis file, with the storage of `listed`.
pub fn read_genesis_listed(
    path: &Path,
    chain_id: Option<u64>,
    listed: &PrivateStorage,
) -> Result<ExportedState, GenesisError> {
    let text = std::fs::read_to_string(path).map_err(|source| GenesisError::Read {
        path: path.display().to_string(),
        source,
    })?;
    let source = format!("genesis:{}", path.display());
    parse_genesis_listed(&text, chain_id, &source, listed)
}

/// The bundled mainnet genesis (chain id 1).
pub fn mainnet() -> ExportedState {
    parse_genesis(MAINNET_GENESIS, Some(1), "genesis:mainnet (bundled)")
        .expect("bundled genesis parses")
}

/// The hash of a pre-London genesis header (alloy's `Header`, 15 fields);
/// `None` for a London-or-later genesis, whose header fields depend on
/// the forks active at block 0 (a hash this got wrong would make every
/// read by block hash fail, so none is claimed).
fn genesis_block_hash(genesis: &Genesis, state_root: B256) -> Option<B256> {
    if genesis.base_fee_per_gas.is_some() || genesis.config.is_london_active_at_block(0) {
        return None;
    }
    let header = Header {
        parent_hash: genesis.parent_hash.unwrap_or_default(),
        ommers_hash: EMPTY_OMMER_ROOT_HASH,
        beneficiary: genesis.coinbase,
        state_root,
        transactions_root: EMPTY_ROOT_HASH,
        receipts_root: EMPTY_ROOT_HASH,
        logs_bloom: Bloom::ZERO,
        difficulty: genesis.difficulty,
        number: genesis.number.unwrap_or(0),
        gas_limit: genesis.gas_limit,
        gas_used: 0,
        timestamp: genesis.timestamp,
        extra_data: genesis.extra_data.clone(),
        mix_hash: genesis.mix_hash,
        nonce: B64::from(genesis.nonce),
        ..Default::default()
    };
    Some(header.hash_slow())
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloy_primitives::U256;

    #[test]
    fn mainnet_genesis_totals() {
        let state = mainnet();
        assert_eq!(state.records.len(), 8893);
        let total: U256 = state.records.iter().map(|r| r.balance).sum();
        // 72,009,990.49948 ETH
        assert_eq!(
            total,
            U256::from(7_200_999_049_948u64) * U256::from(10u64).pow(U256::from(13u64))
        );
        assert_eq!(
            state.block_hash,
            Some(
                "0xd4e56740f876aef8c010b86a40d5f56745a118d0906a34e69aec8c0db1cb8fa3"
                    .parse()
                    .unwrap()
            )
        );
        assert_eq!(state.chain_id, 1);
        assert_eq!(
            state.state_root,
            Some(
                "0xd7f8974fb5ac78d9ac099b9ad5018bedc2ce0a72dad1827a1709da30580f0544"
                    .parse()
                    .unwrap()
            )
        );
    }

    #[test]
    fn sepolia_genesis_parses_mixed_case_and_prefixes() {
        let text = include_str!("../data/sepolia-genesis.json");
        let state = parse_genesis(text, Some(11155111), "test").unwrap();
        assert_eq!(state.records.len(), 15);
    }

    #[test]
    fn listed_contracts_storage_comes_from_the_alloc() {
        let token = "0x00000000000000000000000000000000000000aa";
        let other = "0x00000000000000000000000000000000000000bb";
        let text = format!(
            r#"{{"config":{{"chainId":5}},"alloc":{{
                "{token}":{{"balance":"0x0","code":"0x00","storage":{{
                    "0x01":"0x05","0x02":"0x00","0x03":"0x{wide}"}}}},
                "{other}":{{"balance":"0x1","code":"0x00","storage":{{"0x01":"0x07"}}}}}}}}"#,
            wide = "ff".repeat(32)
        );
        let listed = PrivateStorage {
            contracts: vec![token.parse().unwrap()],
            ..Default::default()
        };
        let state = parse_genesis_listed(&text, None, "t", &listed).unwrap();
        assert_eq!(state.records.len(), 2);
        let token: alloy_primitives::Address = token.parse().unwrap();
        let mut want = vec![
            StorageRecord::new(token, B256::with_last_byte(1), U256::from(5)),
            StorageRecord::new(token, B256::with_last_byte(3), U256::MAX),
        ];
        let mut got = state.storage.clone();
        got.sort_by_key(|s| s.key);
        want.sort_by_key(|s| s.key);
        assert_eq!(got, want, "zero words and unlisted contracts left out");
        assert_eq!(state.listed, listed);
        assert!(parse_genesis(&text, None, "t").unwrap().storage.is_empty());
        // The whole state: every contract's non-zero slots.
        let all = PrivateStorage::whole_state();
        let state = parse_genesis_listed(&text, None, "t", &all).unwrap();
        assert_eq!(state.storage.len(), 3);
        assert_eq!(state.listed, all);
    }

    #[test]
    fn malformed_genesis_is_a_clear_error() {
        assert!(matches!(
            parse_genesis("{", Some(1), "t"),
            Err(GenesisError::Json(_))
        ));
        assert!(matches!(
            parse_genesis("{}", Some(1), "t"),
            Err(GenesisError::NoAlloc)
        ));
        let bad_addr = r#"{"alloc":{"0xzz":{"balance":"1"}}}"#;
        assert!(matches!(
            parse_genesis(bad_addr, Some(1), "t"),
            Err(GenesisError::Json(_))
        ));
        let bad_bal =
            r#"{"alloc":{"0x0000000000000000000000000000000000000001":{"balance":"0xqq"}}}"#;
        assert!(matches!(
            parse_genesis(bad_bal, Some(1), "t"),
            Err(GenesisError::Json(_))
        ));
        let big_nonce = r#"{"alloc":{"0x0000000000000000000000000000000000000001":{"balance":"0x1","nonce":"0x10000000000000000"}}}"#;
        assert!(matches!(
            parse_genesis(big_nonce, Some(1), "t"),
            Err(GenesisError::Json(_))
        ));
        let mut edited: serde_json::Value = serde_json::from_str(MAINNET_GENESIS).unwrap();
        edited["alloc"]["000d836201318ec6899a67540690382780743280"]["balance"] = "0x1".into();
        assert!(matches!(
            parse_genesis(&edited.to_string(), Some(1), "t"),
            Err(GenesisError::StateRootMismatch { .. })
        ));
        let no_chain = r#"{"alloc":{}}"#;
        assert!(parse_genesis(no_chain, Some(1), "t")
            .unwrap()
            .storage
            .is_empty());
        assert!(matches!(
            parse_genesis(no_chain, None, "t"),
            Err(GenesisError::NoChainId)
        ));
    }
}
