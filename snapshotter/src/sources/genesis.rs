//! The `genesis` source: a chain's genesis JSON; its `alloc` is the full
//! state at block 0.

use std::path::Path;
use std::time::Instant;

use alloy_primitives::{keccak256, Address, B256, U256};
use alloy_rlp::Encodable;
use serde_json::Value;

use crate::account::AccountRecord;
use crate::manifest::SnapshotKind;
use crate::pipeline::ExportedState;

/// Mainnet's genesis, bundled for the demo.
pub const MAINNET_GENESIS: &str = include_str!("../../data/mainnet-genesis.json");

/// A genesis file that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum GenesisError {
    #[error("{path}: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("not JSON: {0}")]
    Json(#[from] serde_json::Error),
    #[error("no `alloc` object: not a genesis file")]
    NoAlloc,
    #[error("alloc entry '{entry}': {problem}")]
    Entry { entry: String, problem: String },
    #[error("the genesis names no chain id (config.chainId): pass one")]
    NoChainId,
}

fn number(v: &Value, what: &str, entry: &str) -> Result<U256, GenesisError> {
    let bad = |problem: String| GenesisError::Entry {
        entry: entry.to_string(),
        problem,
    };
    match v {
        Value::String(s) => {
            let s = s.trim();
            let parsed = if let Some(hex) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
                if hex.is_empty() {
                    Ok(U256::ZERO)
                } else {
                    U256::from_str_radix(hex, 16)
                }
            } else {
                U256::from_str_radix(s, 10)
            };
            parsed.map_err(|e| bad(format!("{what} '{s}': {e}")))
        }
        Value::Number(n) => n
            .as_u64()
            .map(U256::from)
            .ok_or_else(|| bad(format!("{what} {n} is not a whole number"))),
        other => Err(bad(format!("{what} is {other}, not a number"))),
    }
}

/// Parses a genesis file's text. `chain_id` overrides (or supplies) the
/// chain id of `config.chainId`.
pub fn parse_genesis(
    text: &str,
    chain_id: Option<u64>,
    source: &str,
) -> Result<ExportedState, GenesisError> {
    let started = Instant::now();
    let json: Value = serde_json::from_str(text)?;
    let alloc = json
        .get("alloc")
        .and_then(Value::as_object)
        .ok_or(GenesisError::NoAlloc)?;
    let mut records = Vec::with_capacity(alloc.len());
    for (entry, account) in alloc {
        let hex = entry
            .strip_prefix("0x")
            .or_else(|| entry.strip_prefix("0X"))
            .unwrap_or(entry);
        let address: Address = hex.parse().map_err(|e| GenesisError::Entry {
            entry: entry.clone(),
            problem: format!("not an address: {e}"),
        })?;
        let balance = match account.get("balance") {
            Some(v) => number(v, "balance", entry)?,
            None => U256::ZERO,
        };
        let nonce = match account.get("nonce") {
            Some(v) => {
                let n = number(v, "nonce", entry)?;
                u64::try_from(n).map_err(|_| GenesisError::Entry {
                    entry: entry.clone(),
                    problem: "nonce exceeds 64 bits".into(),
                })?
            }
            None => 0,
        };
        records.push(AccountRecord::new(address, balance, nonce));
    }
    let chain_id = chain_id
        .or_else(|| json.pointer("/config/chainId").and_then(Value::as_u64))
        .ok_or(GenesisError::NoChainId)?;
    let field = |name: &str| json.get(name).and_then(Value::as_str);
    let state_root = field("stateRoot").and_then(|s| s.parse::<B256>().ok());
    let block_time =
        field("timestamp").and_then(|s| u64::from_str_radix(s.trim_start_matches("0x"), 16).ok());
    Ok(ExportedState {
        chain_id,
        block_number: 0,
        block_hash: genesis_block_hash(&json),
        state_root,
        block_time,
        kind: SnapshotKind::Full,
        source: source.to_string(),
        records,
        export_s: started.elapsed().as_secs_f64(),
    })
}

/// Reads and parses a genesis file.
pub fn read_genesis(path: &Path, chain_id: Option<u64>) -> Result<ExportedState, GenesisError> {
    let text = std::fs::read_to_string(path).map_err(|source| GenesisError::Read {
        path: path.display().to_string(),
        source,
    })?;
    parse_genesis(&text, chain_id, &format!("genesis:{}", path.display()))
}

/// The bundled mainnet genesis (chain id 1).
pub fn mainnet() -> ExportedState {
    parse_genesis(MAINNET_GENESIS, Some(1), "genesis:mainnet (bundled)")
        .expect("bundled genesis parses")
}

/// The hash of a pre-London genesis header (15 fields), computed from the
/// file's fields; `None` when the file has London-or-later fields, whose
/// header this does not rebuild.
fn genesis_block_hash(json: &Value) -> Option<B256> {
    if json.get("baseFeePerGas").is_some() {
        return None;
    }
    let s = |name: &str| json.get(name).and_then(Value::as_str);
    let bytes =
        |name: &str| -> Option<Vec<u8>> { hex::decode(s(name)?.trim_start_matches("0x")).ok() };
    let uint = |name: &str| -> Option<U256> {
        U256::from_str_radix(s(name).unwrap_or("0x0").trim_start_matches("0x"), 16).ok()
    };
    let parent: B256 = s("parentHash")
        .unwrap_or("0x0000000000000000000000000000000000000000000000000000000000000000")
        .parse()
        .ok()?;
    let coinbase: Address = s("coinbase")
        .unwrap_or("0x0000000000000000000000000000000000000000")
        .parse()
        .ok()?;
    let state_root: B256 = s("stateRoot")?.parse().ok()?;
    let mix: B256 = s("mixHash")
        .unwrap_or("0x0000000000000000000000000000000000000000000000000000000000000000")
        .parse()
        .ok()?;
    let nonce_u =
        u64::from_str_radix(s("nonce").unwrap_or("0x0").trim_start_matches("0x"), 16).ok()?;
    // keccak256(rlp([])) and the root of an empty trie.
    let empty_list: B256 = "0x1dcc4de8dec75d7aab85b567b6ccd41ad312451b948a7413f0a142fd40d49347"
        .parse()
        .ok()?;
    let empty_trie: B256 = "0x56e81f171bcc55a6ff8345e692c0f86e5b48e01b996cadc001622fb5e363b421"
        .parse()
        .ok()?;
    let mut fields: Vec<u8> = Vec::new();
    parent.encode(&mut fields);
    empty_list.encode(&mut fields);
    coinbase.encode(&mut fields);
    state_root.encode(&mut fields);
    empty_trie.encode(&mut fields);
    empty_trie.encode(&mut fields);
    alloy_primitives::Bloom::ZERO.encode(&mut fields);
    uint("difficulty")?.encode(&mut fields);
    uint("number")?.encode(&mut fields);
    uint("gasLimit")?.encode(&mut fields);
    uint("gasUsed")?.encode(&mut fields);
    uint("timestamp")?.encode(&mut fields);
    bytes("extraData")
        .unwrap_or_default()
        .as_slice()
        .encode(&mut fields);
    mix.encode(&mut fields);
    alloy_primitives::B64::from(nonce_u.to_be_bytes()).encode(&mut fields);
    let mut out = Vec::new();
    alloy_rlp::Header {
        list: true,
        payload_length: fields.len(),
    }
    .encode(&mut out);
    out.extend_from_slice(&fields);
    Some(keccak256(&out))
}

#[cfg(test)]
mod tests {
    use super::*;

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
    }

    #[test]
    fn sepolia_genesis_parses_mixed_case_and_prefixes() {
        let text = include_str!("../../data/sepolia-genesis.json");
        let state = parse_genesis(text, Some(11155111), "test").unwrap();
        assert_eq!(state.records.len(), 15);
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
            Err(GenesisError::Entry { .. })
        ));
        let bad_bal =
            r#"{"alloc":{"0x0000000000000000000000000000000000000001":{"balance":"0xqq"}}}"#;
        assert!(matches!(
            parse_genesis(bad_bal, Some(1), "t"),
            Err(GenesisError::Entry { .. })
        ));
        let no_chain = r#"{"alloc":{}}"#;
        assert!(matches!(
            parse_genesis(no_chain, None, "t"),
            Err(GenesisError::NoChainId)
        ));
    }
}
