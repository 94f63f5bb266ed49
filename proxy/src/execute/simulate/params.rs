//! `eth_simulateV1`'s parameters as geth reads them, and its chain of
//! blocks as geth's `sanitizeChain` settles it (numbers in order, gaps
//! filled with empty blocks, times 12 s apart unless named, the fee
//! recipient and gas limit carried from block to block).

use std::collections::BTreeMap;

use alloy_eips::eip4895::Withdrawal;
use alloy_primitives::{Address, Bytes, B256, U256, U64};
use call_exec::simulate::{AccountOverride, SimBlock, SimCall};
use ethpir_client::BlockSelector;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;

use super::super::call_object::{
    AccessListEntry, AuthorizationEntry, MAX_AUTHORIZATIONS, MAX_LISTED,
};
use super::super::geth::{geth_field_names, GethError};
use super::super::overrides::{
    account_override, BlockOverrides, OverrideJson, WithdrawalJson, MAX_OVERRIDES,
};

/// geth's most blocks in one request (gaps filled included).
pub const MAX_BLOCKS: u64 = 256;
/// geth's most calls in one block, and in one request.
const MAX_CALLS_PER_BLOCK: usize = 5_000;
const MAX_CALLS: usize = 10_000;
/// Most withdrawals one block credits (a bound on work; geth's is the
/// request's size).
const MAX_WITHDRAWALS: usize = 1_024;
/// geth's timestamp step between simulated blocks.
const TIME_STEP: u64 = 12;

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Options {
    #[serde(default)]
    block_state_calls: Vec<BlockJson>,
    #[serde(default)]
    trace_transfers: bool,
    #[serde(default)]
    validation: bool,
    #[serde(default)]
    return_full_transactions: bool,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct BlockJson {
    block_overrides: Option<BlockOverrides>,
    state_overrides: Option<BTreeMap<Address, OverrideJson>>,
    calls: Option<Vec<CallJson>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct CallJson {
    from: Option<Address>,
    to: Option<Address>,
    gas: Option<U64>,
    gas_price: Option<U256>,
    max_fee_per_gas: Option<U256>,
    max_priority_fee_per_gas: Option<U256>,
    max_fee_per_blob_gas: Option<U256>,
    value: Option<U256>,
    nonce: Option<U64>,
    data: Option<Bytes>,
    input: Option<Bytes>,
    chain_id: Option<U256>,
    access_list: Option<Vec<AccessListEntry>>,
    authorization_list: Option<Vec<AuthorizationEntry>>,
    blob_versioned_hashes: Option<Vec<B256>>,
    blobs: Option<Value>,
}

/// A request, read: its blocks as named, and how to answer.
pub struct SimRequest {
    pub blocks: Vec<RequestedBlock>,
    pub validation: bool,
    pub trace_transfers: bool,
    pub full_transactions: bool,
    pub at: BlockSelector,
}

/// One block as the request names it.
pub struct RequestedBlock {
    overrides: BlockOverrides,
    state: Vec<(Address, AccountOverride)>,
    calls: Vec<SimCall>,
    signed: Vec<Option<Vec<call_exec::SignedAuthorization>>>,
}

/// A simulated block's facts beside the engine's, which its answer holds:
/// its withdrawals as named (the root holds their indexes), and each
/// call's delegations as signed (a transaction's hash holds them).
#[derive(Clone, Debug, Default)]
pub struct BlockExtra {
    pub withdrawals: Vec<Withdrawal>,
    pub signed: Vec<Option<Vec<call_exec::SignedAuthorization>>>,
}

fn invalid(message: String) -> GethError {
    GethError::new(-32602, message)
}

fn too_many(message: String) -> GethError {
    GethError::new(-38026, message)
}

/// Reads `eth_simulateV1`'s parameters (the options and the block) as geth
/// reads them; geth's error where it refuses them.
pub fn simulation_of(params: Option<&RawValue>) -> Result<SimRequest, GethError> {
    let params: Vec<Value> = match params {
        None => Vec::new(),
        Some(raw) => serde_json::from_str(raw.get())
            .map_err(|e| invalid(format!("invalid arguments: {e}")))?,
    };
    if params.is_empty() {
        return Err(invalid("missing value for required argument 0".into()));
    }
    if params.len() > 2 {
        return Err(invalid("too many arguments, want at most 2".into()));
    }
    let options = options_of(&params[0])?;
    let at = match params.get(1) {
        None | Some(Value::Null) => BlockSelector::Newest,
        Some(_) => crate::storage::block_at(&params, 1)
            .ok_or_else(|| invalid("invalid argument 1: not a block".into()))?,
    };
    if options.block_state_calls.is_empty() {
        return Err(invalid("empty input".into()));
    }
    if options.block_state_calls.len() as u64 > MAX_BLOCKS {
        return Err(too_many("too many blocks".into()));
    }
    let mut total = 0;
    for block in &options.block_state_calls {
        let calls = block.calls.as_ref().map_or(0, Vec::len);
        if calls > MAX_CALLS_PER_BLOCK {
            return Err(too_many(format!(
                "too many calls in block: {calls} > {MAX_CALLS_PER_BLOCK}"
            )));
        }
        total += calls;
        if total > MAX_CALLS {
            return Err(too_many(format!("too many calls: {total} > {MAX_CALLS}")));
        }
    }
    let blocks = options
        .block_state_calls
        .into_iter()
        .map(requested_block)
        .collect::<Result<_, _>>()?;
    Ok(SimRequest {
        blocks,
        validation: options.validation,
        trace_transfers: options.trace_transfers,
        full_transactions: options.return_full_transactions,
        at,
    })
}

/// The options (argument 0) as geth reads them: keys whatever their case.
fn options_of(value: &Value) -> Result<Options, GethError> {
    match value {
        Value::Null => Ok(Options {
            block_state_calls: Vec::new(),
            trace_transfers: false,
            validation: false,
            return_full_transactions: false,
        }),
        value => {
            let named = geth_field_names(value.clone())
                .ok_or_else(|| GethError::unsupported("an object naming one field twice"))?;
            serde_json::from_value(named).map_err(|e| invalid(format!("invalid argument 0: {e}")))
        }
    }
}

fn requested_block(block: BlockJson) -> Result<RequestedBlock, GethError> {
    let overrides = block.block_overrides.unwrap_or_default();
    if overrides
        .withdrawals
        .as_ref()
        .is_some_and(|w| w.len() > MAX_WITHDRAWALS)
    {
        return Err(invalid(format!(
            "more than {MAX_WITHDRAWALS} withdrawals in a block"
        )));
    }
    if overrides.difficulty.is_some_and(|d| !d.is_zero()) {
        return Err(GethError::unsupported(
            "a block with a difficulty (before the merge)",
        ));
    }
    let accounts = block.state_overrides.unwrap_or_default();
    if accounts.len() > MAX_OVERRIDES {
        return Err(invalid(format!(
            "more than {MAX_OVERRIDES} accounts overridden"
        )));
    }
    let state = accounts
        .into_iter()
        .map(|(address, o)| Ok((address, account_override(o)?)))
        .collect::<Result<_, GethError>>()?;
    let mut calls = Vec::new();
    let mut signed = Vec::new();
    for call in block.calls.unwrap_or_default() {
        signed.push(
            call.authorization_list
                .as_ref()
                .map(|list| list.iter().map(AuthorizationEntry::signed).collect()),
        );
        calls.push(sim_call(call)?);
    }
    Ok(RequestedBlock {
        overrides,
        state,
        calls,
        signed,
    })
}

fn sim_call(call: CallJson) -> Result<SimCall, GethError> {
    let fee = |v: Option<U256>| match v {
        None => Ok(None),
        Some(v) => u128::try_from(v)
            .map(Some)
            .map_err(|_| invalid("a fee past 2^128".into())),
    };
    let listed = call.access_list.unwrap_or_default();
    let slots: usize = listed.iter().map(|e| e.storage_keys.len()).sum();
    let hashes = call.blob_versioned_hashes.as_ref().map_or(0, Vec::len);
    let authorizations = call.authorization_list.as_ref().map_or(0, Vec::len);
    if listed.len() + slots + hashes > MAX_LISTED || authorizations > MAX_AUTHORIZATIONS {
        return Err(invalid(
            "a call names too many access-list entries, blobs or delegations".into(),
        ));
    }
    if call.blobs.is_some() {
        return Err(GethError::unsupported("a call carrying blobs (a sidecar)"));
    }
    let items = listed.into_iter().map(|entry| call_exec::AccessListItem {
        address: entry.address,
        storage_keys: entry.storage_keys,
    });
    Ok(SimCall {
        from: call.from.unwrap_or_default(),
        to: call.to,
        gas: call.gas.map(|g| g.to()),
        gas_price: fee(call.gas_price)?,
        max_fee_per_gas: fee(call.max_fee_per_gas)?,
        max_priority_fee_per_gas: fee(call.max_priority_fee_per_gas)?,
        value: call.value.unwrap_or_default(),
        // geth: `input` wins over `data`.
        input: call.input.or(call.data).unwrap_or_default(),
        nonce: call.nonce.map(|n| n.to()),
        access_list: call_exec::AccessList(items.collect()),
        authorizations: call.authorization_list.map(|list| {
            list.into_iter()
                .map(AuthorizationEntry::recovered)
                .collect()
        }),
        blob_hashes: call.blob_versioned_hashes,
        max_fee_per_blob_gas: fee(call.max_fee_per_blob_gas)?,
        chain_id: call.chain_id,
    })
}

/// What a simulated chain starts from: the base block's number, time, fee
/// recipient and gas limit.
pub struct Base {
    pub number: u64,
    pub timestamp: u64,
    pub coinbase: Address,
    pub gas_limit: u64,
}

/// The chain of blocks `request` makes after `base` (gaps filled), with
/// each one's withdrawals; geth's error where the blocks are out of order.
pub fn settle_chain(
    request: &SimRequest,
    base: &Base,
) -> Result<Vec<(SimBlock, BlockExtra)>, GethError> {
    let (mut number, mut time) = (base.number, base.timestamp);
    let (mut coinbase, mut gas_limit) = (base.coinbase, base.gas_limit);
    let mut chain = Vec::new();
    for block in &request.blocks {
        let o = &block.overrides;
        let wanted = match o.number {
            Some(n) => u64::try_from(n).map_err(|_| too_many("too many blocks".into()))?,
            // (A view at the last number there is has no next block.)
            None => number
                .checked_add(1)
                .ok_or_else(|| too_many("too many blocks".into()))?,
        };
        if wanted <= number {
            return Err(GethError::new(
                -38020,
                format!("block numbers must be in order: {wanted} <= {number}"),
            ));
        }
        if wanted - base.number > MAX_BLOCKS {
            return Err(too_many("too many blocks".into()));
        }
        for n in number + 1..wanted {
            time = time.wrapping_add(TIME_STEP);
            chain.push((
                SimBlock {
                    number: n,
                    timestamp: time,
                    gas_limit,
                    coinbase,
                    ..Default::default()
                },
                BlockExtra::default(),
            ));
        }
        number = wanted;
        let stamp = match o.time {
            Some(t) if t.to::<u64>() <= time => {
                return Err(GethError::new(
                    -38021,
                    format!(
                        "block timestamps must be in order: {} <= {time}",
                        t.to::<u64>()
                    ),
                ))
            }
            Some(t) => t.to::<u64>(),
            None => time.wrapping_add(TIME_STEP),
        };
        time = stamp;
        coinbase = o.fee_recipient.unwrap_or(coinbase);
        gas_limit = o.gas_limit.map_or(gas_limit, |g| g.to());
        chain.push(settled_block(block, number, time, coinbase, gas_limit)?);
    }
    Ok(chain)
}

fn settled_block(
    block: &RequestedBlock,
    number: u64,
    timestamp: u64,
    coinbase: Address,
    gas_limit: u64,
) -> Result<(SimBlock, BlockExtra), GethError> {
    let o = &block.overrides;
    let withdrawals = withdrawals_of(o);
    let (base_fee, blob_base_fee) = fees_of(o)?;
    Ok((
        SimBlock {
            number,
            timestamp,
            gas_limit,
            coinbase,
            prevrandao: o.prev_randao.unwrap_or_default(),
            base_fee,
            blob_base_fee,
            beacon_root: o.beacon_root.unwrap_or_default(),
            withdrawals: withdrawals.iter().map(|w| (w.address, w.amount)).collect(),
            overrides: block.state.clone(),
            calls: block.calls.clone(),
        },
        BlockExtra {
            withdrawals,
            signed: block.signed.clone(),
        },
    ))
}

fn withdrawals_of(o: &BlockOverrides) -> Vec<Withdrawal> {
    let each = |w: &WithdrawalJson| Withdrawal {
        index: w.index.to(),
        validator_index: w.validator_index.to(),
        address: w.address,
        amount: w.amount.to(),
    };
    o.withdrawals.iter().flatten().map(each).collect()
}

/// A block's base fee and blob base fee, as named.
fn fees_of(o: &BlockOverrides) -> Result<(Option<u64>, Option<u128>), GethError> {
    let base_fee = match o.base_fee_per_gas {
        None => None,
        Some(fee) => {
            Some(u64::try_from(fee).map_err(|_| GethError::unsupported("a base fee past 2^64"))?)
        }
    };
    let blob_base_fee = match o.blob_base_fee {
        None => None,
        Some(fee) => Some(
            u128::try_from(fee)
                .map_err(|_| GethError::unsupported("a blob base fee past 2^128"))?,
        ),
    };
    Ok((base_fee, blob_base_fee))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn simulation(v: Value) -> Result<SimRequest, GethError> {
        simulation_of(Some(&serde_json::value::to_raw_value(&v).unwrap()))
    }

    /// geth reads a key whatever its case: a call's `"TO"` is its `to`,
    /// never a creation with an unknown field ignored.
    #[test]
    fn keys_are_read_whatever_their_case() {
        let (from, to) = (Address::repeat_byte(1), Address::repeat_byte(2));
        let request = simulation(json!([{"BlockStateCalls": [{"Calls": [{"From": from, "TO": to, "VALUE": "0x5"}],
            "StateOverrides": {format!("{to:#x}"): {"Balance": "0x7"}}}], "TraceTransfers": true}, "latest"]))
        .unwrap();
        assert!(request.trace_transfers);
        let block = &request.blocks[0];
        let call = &block.calls[0];
        assert_eq!(
            (call.from, call.to, call.value),
            (from, Some(to), U256::from(5))
        );
        assert_eq!(block.state.len(), 1);
        assert_eq!(block.state[0].0, to);
        assert_eq!(block.state[0].1.balance, Some(U256::from(7)));
        let twice = json!([{"blockStateCalls": [{"calls": [{"to": to, "To": to}]}]}]);
        assert_eq!(
            simulation(twice).err().map(|e| e.code),
            Some(super::super::geth::NOT_DONE_HERE)
        );
    }
}
