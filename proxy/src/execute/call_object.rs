//! The call objects of `eth_call` (as wallets send them) and the node's
//! answers to a call that ended (its data, or geth's error).

use super::*;

/// The call object of `eth_call`: what the call runs with. Fields that
/// change state before it runs (overrides) or that this executor does
/// not model (blobs, authorizations) make it not executable here.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct CallObject {
    from: Option<Address>,
    to: Option<Address>,
    gas: Option<alloy_primitives::U64>,
    gas_price: Option<U256>,
    max_fee_per_gas: Option<U256>,
    max_priority_fee_per_gas: Option<U256>,
    value: Option<U256>,
    data: Option<Bytes>,
    input: Option<Bytes>,
    /// Inert here: a call's type follows from its fee fields.
    #[serde(rename = "type")]
    _type: Option<Value>,
    #[serde(rename = "chainId")]
    _chain_id: Option<Value>,
    #[serde(rename = "nonce")]
    _nonce: Option<Value>,
    #[serde(rename = "accessList")]
    _access_list: Option<Value>,
}

/// The call `eth_call(params)` asks for, and at which block, when it can
/// be executed here: a call (not a creation), no state or block
/// overrides, `data` and `input` the same where both are given.
pub fn call_of(params: Option<&RawValue>) -> Option<(CallArgs, BlockSelector)> {
    let params: Vec<Value> = serde_json::from_str(params?.get()).ok()?;
    if params.is_empty() || params.len() > 2 {
        return None;
    }
    let object: CallObject = serde_json::from_value(params[0].clone()).ok()?;
    let block = crate::storage::block_at(&params, 1)?;
    let input = match (object.data, object.input) {
        (Some(d), Some(i)) if d != i => return None,
        (Some(d), _) | (None, Some(d)) => d,
        (None, None) => Bytes::new(),
    };
    // A fee field past u128 is not a call a node runs either.
    let fee = |v: Option<U256>| match v {
        None => Some(None),
        Some(v) => u128::try_from(v).ok().map(Some),
    };
    let args = CallArgs {
        from: object.from,
        to: object.to?,
        gas: object.gas.map(|g| g.to::<u64>()),
        gas_price: fee(object.gas_price)?,
        max_fee_per_gas: fee(object.max_fee_per_gas)?,
        max_priority_fee_per_gas: fee(object.max_priority_fee_per_gas)?,
        value: object.value.unwrap_or_default(),
        input,
    };
    Some((args, block))
}

/// The node's answer to a call that ended so: its return data, or the
/// error geth gives (a revert: code 3 with its data and reason).
pub fn node_answer(result: &CallResult) -> Result<Bytes, jsonrpsee::types::ErrorObjectOwned> {
    use jsonrpsee::types::ErrorObjectOwned;
    match result {
        CallResult::Success { output, .. } => Ok(output.clone()),
        CallResult::Revert { output, .. } => Err(ErrorObjectOwned::owned(
            REVERTED,
            revert_message(output),
            Some(output.clone()),
        )),
        CallResult::Halt { message, .. } | CallResult::Invalid { message } => Err(
            ErrorObjectOwned::owned(EXECUTION_FAILED, message.clone(), None::<()>),
        ),
    }
}

/// geth's message for a revert: its reason where the data is an
/// `Error(string)` or a `Panic(uint256)`.
pub(super) fn revert_message(data: &[u8]) -> String {
    use alloy_sol_types::{Panic, Revert, SolError};
    if let Ok(revert) = Revert::abi_decode(data) {
        return format!("execution reverted: {}", revert.reason);
    }
    if let Ok(panic) = Panic::abi_decode(data) {
        let code = panic.code;
        let reason = panic
            .kind()
            .map(|k| k.as_str().to_string())
            .unwrap_or_else(|| format!("unknown panic code: {code:#x}"));
        return format!("execution reverted: {reason}");
    }
    "execution reverted".into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn raw(v: Value) -> Box<RawValue> {
        serde_json::value::to_raw_value(&v).unwrap()
    }

    #[test]
    fn call_objects_as_wallets_send_them() {
        let to = Address::repeat_byte(0xaa);
        let (args, block) = call_of(Some(&raw(json!([{"to": to, "input": "0x1234", "gas": "0x5208", "type": "0x2", "maxFeePerGas": "0x10"}, "0x10"])))).unwrap();
        assert_eq!(args.to, to);
        assert_eq!(args.input.as_ref(), [0x12, 0x34]);
        assert_eq!(args.gas, Some(21_000));
        assert_eq!(args.max_fee_per_gas, Some(16));
        assert_eq!(block, BlockSelector::Number(16));
        // Overrides, a creation, differing data and input, unknown fields.
        for params in [
            json!([{"to": to}, "latest", {}]),
            json!([{"data": "0x00"}]),
            json!([{"to": to, "data": "0x00", "input": "0x01"}]),
            json!([{"to": to, "blobVersionedHashes": []}]),
        ] {
            assert!(call_of(Some(&raw(params.clone()))).is_none(), "{params}");
        }
    }

    #[test]
    fn access_lists_read_as_nodes_give_them() {
        let a = Address::repeat_byte(0xaa);
        let list: Touched = [(a, [B256::with_last_byte(1)].into())].into();
        let ok = CallResult::Success {
            output: Bytes::new(),
            gas_used: 0x5208,
        };
        assert_eq!(
            access_list_answer(&list, &ok),
            json!({"accessList": [{"address": a, "storageKeys": [B256::with_last_byte(1)]}], "gasUsed": "0x5208"})
        );
        let halted = CallResult::Halt {
            message: "out of gas".into(),
            gas_used: 7,
        };
        assert_eq!(
            access_list_answer(&Touched::new(), &halted)["error"],
            "out of gas"
        );
        let e = node_answer(&halted).unwrap_err();
        assert_eq!((e.code(), e.message()), (EXECUTION_FAILED, "out of gas"));
    }

    #[test]
    fn reverts_read_as_geth_gives_them() {
        use alloy_sol_types::{Revert, SolError};
        let data = Bytes::from(Revert::from("no").abi_encode());
        let e = node_answer(&CallResult::Revert {
            output: data.clone(),
            gas_used: 1,
        })
        .unwrap_err();
        assert_eq!(e.code(), 3);
        assert_eq!(e.message(), "execution reverted: no");
        assert_eq!(
            e.data().map(|d| d.get().to_string()),
            Some(format!("\"{data}\""))
        );
        let empty = node_answer(&CallResult::Revert {
            output: Bytes::new(),
            gas_used: 1,
        })
        .unwrap_err();
        assert_eq!(empty.message(), "execution reverted");
    }
}
