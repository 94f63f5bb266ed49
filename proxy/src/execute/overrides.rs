//! State and block overrides as geth reads them from JSON-RPC parameters:
//! `eth_simulateV1`'s blocks name them, and so do `eth_call`'s,
//! `eth_estimateGas`'s and `eth_createAccessList`'s third and fourth
//! parameters. Each is read here once, into call-exec's overrides (which
//! apply them, [`call_exec::overrides`]).

use std::collections::BTreeMap;

use alloy_primitives::{Address, Bytes, B256, U256, U64};
use call_exec::overrides::AccountOverride;
use serde::Deserialize;
use serde_json::Value;

use super::geth::{geth_field_names, GethError};

/// Most accounts one block (or call) overrides, and words one override
/// sets (a bound on work; geth's is the request's size).
pub(super) const MAX_OVERRIDES: usize = 1_024;
const MAX_WORDS: usize = 4_096;

fn invalid(message: String) -> GethError {
    GethError::new(-32602, message)
}

/// A block's overrides as named.
#[derive(Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BlockOverrides {
    pub(super) number: Option<U256>,
    pub(super) difficulty: Option<U256>,
    pub(super) time: Option<U64>,
    pub(super) gas_limit: Option<U64>,
    pub(super) fee_recipient: Option<Address>,
    pub(super) prev_randao: Option<B256>,
    pub(super) base_fee_per_gas: Option<U256>,
    pub(super) blob_base_fee: Option<U256>,
    pub(super) beacon_root: Option<B256>,
    pub(super) withdrawals: Option<Vec<WithdrawalJson>>,
}

/// A withdrawal (every field may be left out, as geth reads it).
#[derive(Clone, Copy, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct WithdrawalJson {
    #[serde(default)]
    pub(super) index: U64,
    #[serde(default)]
    pub(super) validator_index: U64,
    #[serde(default)]
    pub(super) address: Address,
    #[serde(default)]
    pub(super) amount: U64,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct OverrideJson {
    nonce: Option<U64>,
    code: Option<Bytes>,
    balance: Option<U256>,
    state: Option<BTreeMap<B256, B256>>,
    state_diff: Option<BTreeMap<B256, B256>>,
    move_precompile_to_address: Option<Address>,
}

/// The state overrides of `eth_call`, `eth_estimateGas` and
/// `eth_createAccessList` (their third parameter: an account's fields by
/// address), read as geth reads them and as `eth_simulateV1`'s blocks
/// name theirs; in ascending address order.
pub fn state_overrides_of(value: &Value) -> Result<Vec<(Address, AccountOverride)>, GethError> {
    if value.is_null() {
        return Ok(Vec::new());
    }
    let named = geth_field_names(value.clone())
        .ok_or_else(|| GethError::not_run("an object naming one field twice"))?;
    let accounts: BTreeMap<Address, OverrideJson> =
        serde_json::from_value(named).map_err(|e| invalid(format!("invalid argument 2: {e}")))?;
    if accounts.len() > MAX_OVERRIDES {
        return Err(invalid(format!(
            "more than {MAX_OVERRIDES} accounts overridden"
        )));
    }
    accounts
        .into_iter()
        .map(|(address, o)| Ok((address, account_override(o)?)))
        .collect()
}

/// The block overrides of `eth_call` and `eth_estimateGas` (their fourth
/// parameter), as geth reads them; geth's error for the two it refuses
/// for these methods.
pub fn call_block_overrides_of(
    value: &Value,
) -> Result<Option<call_exec::overrides::BlockOverrides>, GethError> {
    if value.is_null() {
        return Ok(None);
    }
    let named = geth_field_names(value.clone())
        .ok_or_else(|| GethError::not_run("an object naming one field twice"))?;
    let o: BlockOverrides =
        serde_json::from_value(named).map_err(|e| invalid(format!("invalid argument 3: {e}")))?;
    let refused = |field: &str| {
        GethError::new(
            -32000,
            format!("block override \"{field}\" is not supported for this RPC method"),
        )
    };
    if o.beacon_root.is_some() {
        return Err(refused("beaconRoot"));
    }
    if o.withdrawals.is_some() {
        return Err(refused("withdrawals"));
    }
    let past =
        |what: &str| GethError::not_run(&format!("a block override of the {what} past 64 bits"));
    Ok(Some(call_exec::overrides::BlockOverrides {
        number: o
            .number
            .map(|n| u64::try_from(n).map_err(|_| past("number")))
            .transpose()?,
        difficulty: o.difficulty,
        time: o.time.map(|t| t.to()),
        gas_limit: o.gas_limit.map(|g| g.to()),
        fee_recipient: o.fee_recipient,
        prev_randao: o.prev_randao,
        base_fee: o
            .base_fee_per_gas
            .map(|f| u64::try_from(f).map_err(|_| past("base fee")))
            .transpose()?,
        blob_base_fee: o
            .blob_base_fee
            .map(|f| u128::try_from(f).map_err(|_| past("blob base fee")))
            .transpose()?,
    }))
}

pub(super) fn account_override(o: OverrideJson) -> Result<AccountOverride, GethError> {
    let words = |map: Option<BTreeMap<B256, B256>>| -> Result<_, GethError> {
        match map {
            Some(m) if m.len() > MAX_WORDS => Err(invalid(format!(
                "more than {MAX_WORDS} storage words overridden"
            ))),
            m => Ok(m.map(|m| m.into_iter().collect())),
        }
    };
    Ok(AccountOverride {
        balance: o.balance,
        nonce: o.nonce.map(|n| n.to()),
        code: o.code,
        state: words(o.state)?,
        state_diff: words(o.state_diff)?,
        move_precompile_to: o.move_precompile_to_address,
    })
}
