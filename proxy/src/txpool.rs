//! `txpool_contentFrom(address)` without naming the address: the node is
//! asked for its whole pool (`txpool_content`, which names no one) and
//! the address's own part is picked here, shaped as geth shapes it:
//! `{"pending": {nonce: tx, ...}, "queued": {...}}`. Always so, whatever
//! the gate lets through: the answer is the same, and private. (A pool
//! whose content passes the proxy's reply bound, 64 MiB, gets an error.)

use alloy_primitives::Address;
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use crate::activity::Reason;
use crate::error::ProxyError;
use crate::upstream::Upstream;

/// The answer to `txpool_contentFrom` read from the whole pool; None
/// where this is not that method.
pub async fn content_from(
    upstream: &Upstream,
    method: &str,
    params: Option<&RawValue>,
) -> Option<Result<Value, ProxyError>> {
    if method != "txpool_contentFrom" {
        return None;
    }
    let address = match asked_address(params) {
        Ok(address) => address,
        Err(e) => return Some(Err(e)),
    };
    let pool = upstream
        .call("txpool_content", None, Reason::NotPrivateMethod)
        .await;
    Some(pool.and_then(|pool| {
        let unreadable = |why: String| {
            ProxyError::UpstreamUnavailable(format!("the node's txpool_content: {why}"))
        };
        let pool: Value =
            serde_json::from_str(pool.get()).map_err(|e| unreadable(e.to_string()))?;
        part_of(&pool, &address).ok_or_else(|| unreadable("not a pool's content".into()))
    }))
}

/// `txpool_contentFrom`'s one parameter, an address.
fn asked_address(params: Option<&RawValue>) -> Result<Address, ProxyError> {
    let bad = |why: String| ProxyError::BadParams(format!("invalid argument 0: {why}"));
    let params: Vec<Value> =
        serde_json::from_str(params.map_or("[]", RawValue::get)).map_err(|e| bad(e.to_string()))?;
    match params.as_slice() {
        [Value::String(text)] => ethpir_client::parse_address(text).map_err(bad),
        _ => Err(bad("one address expected".into())),
    }
}

/// `address`'s transactions in each section of a pool as
/// `txpool_content` gives it (sections keyed by sender, any case); None
/// where the reply is not a pool's content.
fn part_of(pool: &Value, address: &Address) -> Option<Value> {
    let section = |name: &str| {
        let senders = pool.get(name)?.as_object()?;
        let own = senders
            .iter()
            .find(|(sender, _)| sender.parse::<Address>().is_ok_and(|s| s == *address));
        Some(own.map_or_else(|| Value::Object(Map::new()), |(_, txs)| txs.clone()))
    };
    Some(serde_json::json!({"pending": section("pending")?, "queued": section("queued")?}))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_part_of_the_pool_whatever_the_case_of_its_key() {
        let pool = serde_json::json!({
            "pending": {
                "0x0c2c51a0990AeE1d73C1228de158688341557508": {"0": {"nonce": "0x0"}},
                "0x00000000000000000000000000000000000000aa": {"3": {"nonce": "0x3"}},
            },
            "queued": {},
        });
        let sender: Address = "0x0c2c51a0990aee1d73c1228de158688341557508"
            .parse()
            .unwrap();
        let part = part_of(&pool, &sender).unwrap();
        assert_eq!(
            part,
            serde_json::json!({"pending": {"0": {"nonce": "0x0"}}, "queued": {}})
        );
        let nobody = part_of(&pool, &Address::ZERO).unwrap();
        assert_eq!(nobody, serde_json::json!({"pending": {}, "queued": {}}));
        // A reply that is no pool's content is not an empty pool.
        for broken in [serde_json::json!(null), serde_json::json!({"pending": {}})] {
            assert_eq!(part_of(&broken, &sender), None, "{broken}");
        }
    }

    #[test]
    fn its_parameter_is_one_address() {
        let raw = |s: &str| RawValue::from_string(s.to_string()).unwrap();
        let one = r#"["0x0000000000000000000000000000000000000001"]"#;
        assert!(asked_address(Some(&raw(one))).is_ok());
        let unprefixed = r#"["0000000000000000000000000000000000000001"]"#;
        for bad in [
            r#"[]"#,
            r#"["0x01"]"#,
            r#"[1]"#,
            r#"["0x00", "0x00"]"#,
            unprefixed,
        ] {
            let refused = asked_address(Some(&raw(bad))).unwrap_err();
            assert_eq!(refused.code(), crate::error::INVALID_PARAMS_CODE, "{bad}");
        }
    }
}
