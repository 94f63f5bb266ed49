//! The block parameter of eth_getBalance / eth_getTransactionCount: alloy's
//! [`BlockId`] (tags, quantities, hashes and EIP-1898 objects), mapped to
//! what the snapshots can answer.

use alloy_eips::{BlockId, BlockNumberOrTag};
use alloy_primitives::B256;
use serde_json::Value;

/// Which state a call asks about.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum BlockSelector {
    /// latest / safe / finalized / pending: the newest view.
    Newest,
    Number(u64),
    Hash(B256),
}

impl From<BlockId> for BlockSelector {
    fn from(id: BlockId) -> Self {
        match id {
            BlockId::Hash(h) => BlockSelector::Hash(h.block_hash),
            BlockId::Number(BlockNumberOrTag::Number(n)) => BlockSelector::Number(n),
            BlockId::Number(BlockNumberOrTag::Earliest) => BlockSelector::Number(0),
            BlockId::Number(
                BlockNumberOrTag::Latest
                | BlockNumberOrTag::Pending
                | BlockNumberOrTag::Safe
                | BlockNumberOrTag::Finalized,
            ) => BlockSelector::Newest,
        }
    }
}

/// The selector of an optional block parameter (absent or null: latest).
pub fn selector(block: Option<BlockId>) -> BlockSelector {
    block.map_or(BlockSelector::Newest, BlockSelector::from)
}

/// Parses a block parameter given as JSON (the replay's input).
pub fn parse_block(v: Option<&Value>) -> Result<BlockSelector, String> {
    match v {
        None | Some(Value::Null) => Ok(BlockSelector::Newest),
        Some(v) => serde_json::from_value::<BlockId>(v.clone())
            .map(BlockSelector::from)
            .map_err(|e| format!("invalid block parameter {v}: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_form() {
        assert_eq!(parse_block(None), Ok(BlockSelector::Newest));
        for tag in ["latest", "safe", "finalized", "pending"] {
            assert_eq!(parse_block(Some(&json!(tag))), Ok(BlockSelector::Newest));
        }
        assert_eq!(
            parse_block(Some(&json!("earliest"))),
            Ok(BlockSelector::Number(0))
        );
        assert_eq!(
            parse_block(Some(&json!("0x1a"))),
            Ok(BlockSelector::Number(26))
        );
        assert_eq!(
            parse_block(Some(&json!("0x0"))),
            Ok(BlockSelector::Number(0))
        );
        let h = "0xd4e56740f876aef8c010b86a40d5f56745a118d0906a34e69aec8c0db1cb8fa3";
        assert_eq!(
            parse_block(Some(&json!(h))),
            Ok(BlockSelector::Hash(h.parse().unwrap()))
        );
        assert_eq!(
            parse_block(Some(&json!({"blockHash": h, "requireCanonical": true}))),
            Ok(BlockSelector::Hash(h.parse().unwrap()))
        );
        assert_eq!(
            parse_block(Some(&json!({"blockNumber": "0x5"}))),
            Ok(BlockSelector::Number(5))
        );
        for bad in [
            json!("1a"),
            json!("0x"),
            json!("0xzz"),
            json!("yesterday"),
            json!({}),
            json!("0x12345678901234567"),
            json!([1]),
        ] {
            assert!(parse_block(Some(&bad)).is_err(), "{bad}");
        }
    }
}
