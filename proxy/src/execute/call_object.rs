//! The call objects of `eth_call` (as wallets send them) and the node's
//! answers to a call that ended (its data, or geth's error).

use super::geth::{geth_field_names, GethError};
use super::*;

/// The call object of `eth_call`: what the call runs with, of every
/// transaction type (access lists, blobs' hashes, 7702 delegations).
/// Fields that change state before it runs (overrides) or that are no
/// call's (a blob sidecar) make it not executable here.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct CallObject {
    from: Option<Address>,
    to: Option<Address>,
    gas: Option<alloy_primitives::U64>,
    gas_price: Option<U256>,
    max_fee_per_gas: Option<U256>,
    max_priority_fee_per_gas: Option<U256>,
    max_fee_per_blob_gas: Option<U256>,
    value: Option<U256>,
    data: Option<Bytes>,
    input: Option<Bytes>,
    access_list: Option<Vec<AccessListEntry>>,
    authorization_list: Option<Vec<AuthorizationEntry>>,
    blob_versioned_hashes: Option<Vec<B256>>,
    /// Inert here: a call's type follows from its fields.
    #[serde(rename = "type")]
    _type: Option<Value>,
    #[serde(rename = "chainId")]
    _chain_id: Option<Value>,
    #[serde(rename = "nonce")]
    _nonce: Option<Value>,
}

/// An EIP-2930 access list's entry.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct AccessListEntry {
    pub(super) address: Address,
    #[serde(default)]
    pub(super) storage_keys: Vec<B256>,
}

/// An EIP-7702 authorization as nodes write it.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct AuthorizationEntry {
    chain_id: U256,
    address: Address,
    nonce: alloy_primitives::U64,
    y_parity: alloy_primitives::U8,
    r: U256,
    s: U256,
}

impl AuthorizationEntry {
    /// With the account its signature recovers: recovered once, here,
    /// not at every run of the call.
    pub(super) fn recovered(self) -> call_exec::RecoveredAuthorization {
        self.signed().into_recovered()
    }

    /// As signed (a transaction's encoding holds it so).
    pub(super) fn signed(&self) -> call_exec::SignedAuthorization {
        let inner = call_exec::Authorization {
            chain_id: self.chain_id,
            address: self.address,
            nonce: self.nonce.to(),
        };
        call_exec::SignedAuthorization::new_unchecked(inner, self.y_parity.to(), self.r, self.s)
    }
}

/// At most this many authorizations a call may carry: what the gas cap
/// pays for (25,000 gas each, EIP-7702), as geth bounds them.
pub(super) const MAX_AUTHORIZATIONS: usize = (call_exec::GAS_CAP / 25_000) as usize;

/// At most this many access-list entries, slots and blobs' hashes a call
/// may name (a node's transaction pool bounds them by gas; a call object
/// is bounded by the request's size already, this by work).
pub(super) const MAX_LISTED: usize = 4_096;

/// The call `eth_call(params)` asks for (or `eth_estimateGas`'s,
/// `eth_createAccessList`'s), and at which block, when it can be executed
/// here: `data` and `input` the same where both are given, at most
/// `max_params` parameters (the state overrides third, the block
/// overrides fourth). `Some(Err)`: geth's error for its overrides.
pub fn call_of(
    params: Option<&RawValue>,
    max_params: usize,
) -> Option<Result<(CallArgs, BlockSelector), GethError>> {
    let params: Vec<Value> = serde_json::from_str(params?.get()).ok()?;
    if params.is_empty() {
        return None;
    }
    if params.len() > max_params {
        let many = format!("too many arguments, want at most {max_params}");
        return Some(Err(GethError::new(-32602, many)));
    }
    let overrides = match params.get(2) {
        Some(value) => match super::overrides::state_overrides_of(value) {
            Ok(overrides) => overrides,
            Err(e) => return Some(Err(e)),
        },
        None => Vec::new(),
    };
    let block_overrides = match params.get(3) {
        Some(value) => match super::overrides::call_block_overrides_of(value) {
            Ok(overrides) => overrides,
            Err(e) => return Some(Err(e)),
        },
        None => None,
    };
    let call = call_args(&params, overrides, block_overrides)?;
    Some(Ok(call))
}

/// The call object and block of `params`, with its overrides.
fn call_args(
    params: &[Value],
    overrides: Vec<(Address, call_exec::overrides::AccountOverride)>,
    block_overrides: Option<call_exec::overrides::BlockOverrides>,
) -> Option<(CallArgs, BlockSelector)> {
    let object: CallObject = serde_json::from_value(geth_field_names(params[0].clone())?).ok()?;
    let block = crate::storage::block_at(params, 1)?;
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
    let listed = object.access_list.unwrap_or_default();
    // Named but empty, a list still makes the call its type (refused
    // as a node refuses it): kept as named.
    let authorizations = object.authorization_list;
    let slots: usize = listed.iter().map(|e| e.storage_keys.len()).sum();
    let hashes = object.blob_versioned_hashes;
    let hash_count = hashes.as_ref().map_or(0, Vec::len);
    let authorization_count = authorizations.as_ref().map_or(0, Vec::len);
    if listed.len() + slots + hash_count > MAX_LISTED || authorization_count > MAX_AUTHORIZATIONS {
        return None;
    }
    // As given: each entry is paid, a repeated one too.
    let items = listed.into_iter().map(|entry| call_exec::AccessListItem {
        address: entry.address,
        storage_keys: entry.storage_keys,
    });
    let access_list = call_exec::AccessList(items.collect());
    let args = CallArgs {
        from: object.from,
        to: object.to,
        gas: object.gas.map(|g| g.to::<u64>()),
        gas_price: fee(object.gas_price)?,
        max_fee_per_gas: fee(object.max_fee_per_gas)?,
        max_priority_fee_per_gas: fee(object.max_priority_fee_per_gas)?,
        value: object.value.unwrap_or_default(),
        input,
        access_list,
        authorizations: authorizations.map(|list| {
            list.into_iter()
                .map(AuthorizationEntry::recovered)
                .collect()
        }),
        blob_hashes: hashes,
        max_fee_per_blob_gas: fee(object.max_fee_per_blob_gas)?,
        overrides,
        block_overrides,
        // The method's, set by its caller.
        override_rules: Default::default(),
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
    use super::super::geth::{GETH_FIELDS, LONGEST_FIELD};
    use super::*;
    use serde_json::json;

    fn raw(v: Value) -> Box<RawValue> {
        serde_json::value::to_raw_value(&v).unwrap()
    }

    /// `eth_call(params)`'s call, when it runs here.
    fn call(params: &Value) -> Option<(CallArgs, BlockSelector)> {
        call_of(Some(&raw(params.clone())), 4).map(|r| r.expect("no geth error"))
    }

    #[test]
    fn call_objects_as_wallets_send_them() {
        let to = Address::repeat_byte(0xaa);
        let (args, block) = call(&json!([{"to": to, "input": "0x1234", "gas": "0x5208", "type": "0x2", "maxFeePerGas": "0x10"}, "0x10"])).unwrap();
        assert_eq!(args.to, Some(to));
        assert_eq!(args.input.as_ref(), [0x12, 0x34]);
        assert_eq!(args.gas, Some(21_000));
        assert_eq!(args.max_fee_per_gas, Some(16));
        assert_eq!(block, BlockSelector::Number(16));
        // Every transaction type's fields.
        let slot = B256::with_last_byte(7);
        let auth = json!({"chainId": "0x1", "address": to, "nonce": "0x2", "yParity": "0x1", "r": "0x5", "s": "0x6"});
        let typed = json!([{"to": to, "accessList": [{"address": to, "storageKeys": [slot]}],
            "authorizationList": [auth], "blobVersionedHashes": [slot], "maxFeePerBlobGas": "0x9"}]);
        let (args, _) = call(&typed).unwrap();
        assert_eq!(call_exec::warm_set(&args.access_list)[&to], [slot].into());
        let authorizations = args.authorizations.as_deref().unwrap();
        assert_eq!(authorizations[0].nonce, 2);
        assert_eq!(authorizations[0].address, to);
        assert_eq!(
            args.authorities().count(),
            0,
            "r = 5, s = 6 recover no account"
        );
        assert_eq!(
            (args.blob_hashes, args.max_fee_per_blob_gas),
            (Some(vec![slot]), Some(9))
        );
        // Named empty, a list is kept as named (the run is refused).
        let empty = json!([{"to": to, "authorizationList": [], "blobVersionedHashes": []}]);
        let (args, _) = call(&empty).unwrap();
        assert_eq!(args.authorizations, Some(vec![]));
        assert_eq!(args.blob_hashes, Some(vec![]));
        let many: Vec<Value> = (0..=MAX_LISTED).map(|_| json!({"address": to})).collect();
        assert!(call(&json!([{"to": to, "accessList": many}])).is_none());
        // More delegations than the gas cap pays for: refused before any
        // signature is recovered.
        let auths: Vec<Value> = (0..=MAX_AUTHORIZATIONS).map(|_| auth.clone()).collect();
        let delegating = json!([{"to": to, "authorizationList": auths}]);
        assert!(call(&delegating).is_none());
        // Differing data and input, unknown fields.
        for params in [
            json!([{"to": to, "data": "0x00", "input": "0x01"}]),
            json!([{"to": to, "blobs": []}]),
        ] {
            assert!(call(&params).is_none(), "{params}");
        }
        // A creation; state and block overrides, whatever their keys' case.
        let (created, _) = call(&json!([{"data": "0x00"}])).unwrap();
        assert_eq!((created.to, created.input.as_ref()), (None, &[0][..]));
        let overridden = json!([{"to": to}, "latest",
            {format!("{to:#x}"): {"Balance": "0x5", "code": "0x60", "stateDiff": {format!("{slot:#x}"): format!("{slot:#x}")}}},
            {"time": "0x64", "BaseFeePerGas": "0x7", "feeRecipient": to}]);
        let (args, _) = call(&overridden).unwrap();
        let (account, over) = &args.overrides[0];
        assert_eq!((*account, over.balance), (to, Some(U256::from(5))));
        assert_eq!(over.code.as_ref().map(|c| c.to_vec()), Some(vec![0x60]));
        assert_eq!(over.state_diff, Some(vec![(slot, slot)]));
        let block = args.block_overrides.unwrap();
        assert_eq!(
            (block.time, block.base_fee, block.fee_recipient),
            (Some(100), Some(7), Some(to))
        );
        // geth's refusals: a beacon root or withdrawals in a call's block
        // overrides, words that are no override.
        for (params, code) in [
            (
                json!([{"to": to}, "latest", {}, {"beaconRoot": slot}]),
                -32000,
            ),
            (
                json!([{"to": to}, "latest", {}, {"withdrawals": []}]),
                -32000,
            ),
            (json!([{"to": to}, "latest", {"0x12": {}}]), -32602),
        ] {
            let refused = call_of(Some(&raw(params.clone())), 4).unwrap();
            assert_eq!(refused.map(|_| ()).unwrap_err().code, code, "{params}");
        }
        // Past four parameters (three for an access list, which takes no
        // block overrides): geth's error.
        let four = json!([{"to": to}, "latest", {}, {}]);
        let refused = call_of(Some(&raw(four.clone())), 3).unwrap();
        assert_eq!(refused.map(|_| ()).unwrap_err().code, -32602);
        assert!(call_of(Some(&raw(four)), 4).unwrap().is_ok());
    }

    #[test]
    fn keys_are_read_whatever_their_case_as_geth_reads_them() {
        let to = Address::repeat_byte(0xaa);
        let slot = B256::with_last_byte(7);
        let (args, block) = call(&json!([{"TO": to, "Input": "0x1234",
            "MAXFEEPERGAS": "0x10", "accesslist": [{"ADDRESS": to, "StorageKeys": [slot]}]}, "0x10"]))
        .unwrap();
        assert_eq!(
            (args.to, args.input.as_ref()),
            (Some(to), &[0x12, 0x34][..])
        );
        assert_eq!(args.max_fee_per_gas, Some(16));
        assert_eq!(call_exec::warm_set(&args.access_list)[&to], [slot].into());
        assert_eq!(block, BlockSelector::Number(16));
        // Go folds the Kelvin sign to k and the long s to s.
        let kelvin =
            json!([{"to": to, "accessList": [{"address": to, "storage\u{212A}eys": [slot]}]}]);
        let (args, _) = call(&kelvin).unwrap();
        assert_eq!(call_exec::warm_set(&args.access_list)[&to], [slot].into());
        assert_eq!(
            GETH_FIELDS.iter().map(|f| f.len()).max(),
            Some(LONGEST_FIELD)
        );
        let folded = geth_field_names(json!({"\u{017F}tate": {}, "CODE": "0x"})).unwrap();
        assert_eq!(folded, json!({"state": {}, "code": "0x"}));
        // Data keys (an override's address, a slot) are kept as they are.
        let data = json!({"stateOverrides": {format!("{to:#x}"): {"STATEDIFF": {format!("{slot:#x}"): format!("{slot:#x}")}}}});
        let kept = geth_field_names(data).unwrap();
        assert!(kept["stateOverrides"][format!("{to:#x}")]["stateDiff"].is_object());
        // One field named twice: which came later is not known here.
        assert!(call(&json!([{"to": to, "TO": to}])).is_none());
        assert!(geth_field_names(json!([{"Data": "0x", "data": "0x"}])).is_none());
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
            access_list_answer(&list, &ok).unwrap(),
            json!({"accessList": [{"address": a, "storageKeys": [B256::with_last_byte(1)]}], "gasUsed": "0x5208"})
        );
        let halted = CallResult::Halt {
            message: "out of gas".into(),
            gas_used: 7,
        };
        assert_eq!(
            access_list_answer(&Touched::new(), &halted).unwrap()["error"],
            "out of gas"
        );
        // geth's access list names a revert without its reason.
        let reverted = CallResult::Revert {
            output: alloy_primitives::Bytes::from_static(b"\x08\xc3\x79\xa0"),
            gas_used: 9,
        };
        let answer = access_list_answer(&Touched::new(), &reverted).unwrap();
        assert_eq!(answer["error"], "execution reverted");
        // A call the node would not run is its error, not a list.
        let invalid = CallResult::Invalid {
            message: "EIP-7702 transaction with empty auth list".into(),
        };
        let refused = access_list_answer(&Touched::new(), &invalid).unwrap_err();
        assert_eq!(refused.code(), EXECUTION_FAILED);
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
