//! The block parameter of eth_getBalance / eth_getTransactionCount.

use alloy_primitives::B256;
use serde_json::Value;

/// Which state a call asks about.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BlockSelector {
    /// latest / safe / finalized / pending: the newest snapshot.
    Newest,
    Number(u64),
    Hash(B256),
}

/// Parses a block tag, number, hash or EIP-1898 object.
pub fn parse_block(v: Option<&Value>) -> Result<BlockSelector, String> {
    let Some(v) = v else {
        return Ok(BlockSelector::Newest);
    };
    match v {
        Value::Null => Ok(BlockSelector::Newest),
        Value::String(s) => parse_block_str(s),
        Value::Object(o) => {
            if o.contains_key("blockNumber") && o.contains_key("blockHash") {
                return Err("block object must have blockNumber or blockHash, not both".into());
            }
            if let Some(n) = o.get("blockNumber") {
                return match n.as_str().map(parse_block_str) {
                    Some(Ok(sel @ (BlockSelector::Number(_) | BlockSelector::Newest))) => Ok(sel),
                    _ => Err("blockNumber must be a hex quantity or a tag".into()),
                };
            }
            if let Some(h) = o.get("blockHash") {
                let h = h.as_str().ok_or("blockHash must be a string")?;
                return h
                    .parse::<B256>()
                    .map(BlockSelector::Hash)
                    .map_err(|_| format!("invalid block hash '{h}'"));
            }
            Err("block object needs blockNumber or blockHash".into())
        }
        other => Err(format!("invalid block parameter {other}")),
    }
}

fn parse_block_str(s: &str) -> Result<BlockSelector, String> {
    match s {
        "latest" | "safe" | "finalized" | "pending" => Ok(BlockSelector::Newest),
        "earliest" => Ok(BlockSelector::Number(0)),
        _ => {
            let hex = s.strip_prefix("0x").ok_or_else(|| {
                format!("invalid block '{s}': use a tag, a 0x quantity or a 0x block hash")
            })?;
            if hex.len() == 64 {
                return s
                    .parse::<B256>()
                    .map(BlockSelector::Hash)
                    .map_err(|_| format!("invalid block hash '{s}'"));
            }
            if hex.is_empty() || hex.len() > 16 || (hex.len() > 1 && hex.starts_with('0')) {
                return Err(format!("invalid block number '{s}'"));
            }
            u64::from_str_radix(hex, 16)
                .map(BlockSelector::Number)
                .map_err(|_| format!("invalid block number '{s}'"))
        }
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
            json!("0x01"),
            json!("0xzz"),
            json!(5),
            json!({}),
            json!({"blockNumber": 5}),
            json!("0x12345678901234567"),
        ] {
            assert!(parse_block(Some(&bad)).is_err(), "{bad}");
        }
    }
}
