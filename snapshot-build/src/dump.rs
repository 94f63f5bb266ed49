//! The `dump` source: the whole state a development node hands over in
//! one reply (anvil's `anvil_dumpState`: every account with its code and
//! every storage slot, at the node's newest block). It is what a JSON-RPC
//! node without a genesis file or a datadir offers for a base; the caller
//! checks the state root it implies against the node's header of that
//! block before using it.

use std::collections::BTreeMap;
use std::io::Read;

use alloy_genesis::GenesisAccount;
use alloy_primitives::Address;
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
    use alloy_primitives::{B256, U256};
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
