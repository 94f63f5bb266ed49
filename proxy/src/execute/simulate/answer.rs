//! `eth_simulateV1`'s answer as geth writes it: each block's header (its
//! transactions', receipts' and withdrawals' roots, bloom, size and hash
//! made as a node makes them, its state root zero: see the module's
//! doc), its transactions (hashes, or whole with
//! `returnFullTransactions`) and each call's result and logs.

use alloy_consensus::{
    proofs, transaction::RlpEcdsaEncodableTx, Eip658Value, Header, Receipt, ReceiptEnvelope,
    ReceiptWithBloom, TxEip1559, TxEip4844, TxEip7702, TxLegacy, EMPTY_OMMER_ROOT_HASH,
};
use alloy_eips::eip2718::Encodable2718;
use alloy_primitives::{keccak256, Bloom, TxKind, B64, U64};
use alloy_rlp::Encodable;
use call_exec::simulate::{CallFailure, SimBlock, SimBlockDone, SimCall, SimCallDone, SimTx};
use serde_json::json;

use super::params::BlockExtra;
use super::{GethError, Ran, Simulated};
use crate::execute::call_object::revert_message;
use crate::execute::*;

/// geth's code for a call that failed other than by a revert.
const VM_ERROR: i32 = -32015;

/// The answer to a simulation: its blocks, or geth's error.
pub fn simulate_answer(simulated: &Simulated) -> Result<Value, jsonrpsee::types::ErrorObjectOwned> {
    match simulated {
        Simulated::Failed(e) => Err(GethError::into_object(e.clone())),
        Simulated::Ran(ran) => Ok(Value::Array(blocks(ran))),
    }
}

/// A transaction as a simulated block holds it: unsigned (v, r, s zero).
struct Encoded {
    hash: B256,
    /// EIP-2718's encoding (a legacy one's RLP list).
    bytes: Vec<u8>,
}

fn blocks(ran: &Ran) -> Vec<Value> {
    let chain_id = ran.simulation.base.context.chain_id;
    let mut parent_hash = ran.simulation.base.hash;
    let settled = ran.simulation.blocks.iter().zip(&ran.extras);
    let mut out = Vec::with_capacity(ran.blocks.len());
    for ((block, extra), done) in settled.zip(&ran.blocks) {
        let txs: Vec<Encoded> = (done.calls.iter().zip(&block.calls).enumerate())
            .map(|(i, (call_done, call))| encode(chain_id, call, &call_done.tx, extra, i))
            .collect();
        let (receipts, bloom) = receipts(done);
        let header = header(block, done, extra, parent_hash, &txs, &receipts, bloom);
        let hash = header.hash_slow();
        out.push(block_json(ran, block, done, extra, &header, hash, &txs));
        parent_hash = hash;
    }
    out
}

/// A transaction's unsigned encoding: `type || rlp([fields.., 0, 0, 0])`
/// (a legacy one without the type).
fn unsigned<T: RlpEcdsaEncodableTx>(tx_type: u8, tx: &T) -> Vec<u8> {
    let mut out = Vec::new();
    if tx_type != 0 {
        out.push(tx_type);
    }
    let header = alloy_rlp::Header {
        list: true,
        payload_length: tx.rlp_encoded_fields_length() + 3,
    };
    header.encode(&mut out);
    tx.rlp_encode_fields(&mut out);
    out.extend_from_slice(&[alloy_rlp::EMPTY_STRING_CODE; 3]);
    out
}

fn encode(chain_id: u64, call: &SimCall, tx: &SimTx, extra: &BlockExtra, i: usize) -> Encoded {
    let bytes = match tx.tx_type {
        0 => unsigned(0, &legacy(call, tx)),
        3 => unsigned(3, &blob(chain_id, call, tx)),
        4 => {
            let signed = extra.signed.get(i).cloned().flatten().unwrap_or_default();
            unsigned(4, &delegating(chain_id, call, tx, signed))
        }
        _ => unsigned(2, &dynamic(chain_id, call, tx)),
    };
    Encoded {
        hash: keccak256(&bytes),
        bytes,
    }
}

fn legacy(call: &SimCall, tx: &SimTx) -> TxLegacy {
    TxLegacy {
        chain_id: None,
        nonce: tx.nonce,
        gas_price: tx.max_fee_per_gas,
        gas_limit: tx.gas,
        to: call.to.map_or(TxKind::Create, TxKind::Call),
        value: call.value,
        input: call.input.clone(),
    }
}

fn dynamic(chain_id: u64, call: &SimCall, tx: &SimTx) -> TxEip1559 {
    TxEip1559 {
        chain_id,
        nonce: tx.nonce,
        gas_limit: tx.gas,
        max_fee_per_gas: tx.max_fee_per_gas,
        max_priority_fee_per_gas: tx.max_priority_fee_per_gas,
        to: call.to.map_or(TxKind::Create, TxKind::Call),
        value: call.value,
        access_list: call.access_list.clone(),
        input: call.input.clone(),
    }
}

/// (A blob or delegating transaction creates nothing: its `to` is the
/// call's, which the run refused otherwise.)
fn blob(chain_id: u64, call: &SimCall, tx: &SimTx) -> TxEip4844 {
    let d = dynamic(chain_id, call, tx);
    TxEip4844 {
        chain_id,
        nonce: d.nonce,
        gas_limit: d.gas_limit,
        max_fee_per_gas: d.max_fee_per_gas,
        max_priority_fee_per_gas: d.max_priority_fee_per_gas,
        to: call.to.unwrap_or_default(),
        value: d.value,
        access_list: d.access_list,
        blob_versioned_hashes: call.blob_hashes.clone().unwrap_or_default(),
        max_fee_per_blob_gas: tx.max_fee_per_blob_gas,
        input: d.input,
    }
}

fn delegating(
    chain_id: u64,
    call: &SimCall,
    tx: &SimTx,
    signed: Vec<call_exec::SignedAuthorization>,
) -> TxEip7702 {
    let d = dynamic(chain_id, call, tx);
    TxEip7702 {
        chain_id,
        nonce: d.nonce,
        gas_limit: d.gas_limit,
        max_fee_per_gas: d.max_fee_per_gas,
        max_priority_fee_per_gas: d.max_priority_fee_per_gas,
        to: call.to.unwrap_or_default(),
        value: d.value,
        access_list: d.access_list,
        authorization_list: signed,
        input: d.input,
    }
}

/// Each call's receipt (EIP-2718's encoding), and the block's bloom.
fn receipts(done: &SimBlockDone) -> (Vec<Vec<u8>>, Bloom) {
    let mut cumulative = 0;
    let mut bloom = Bloom::ZERO;
    let mut encoded = Vec::with_capacity(done.calls.len());
    for call in &done.calls {
        cumulative += call.gas_used;
        let receipt = Receipt {
            status: Eip658Value::Eip658(call.failure.is_none()),
            cumulative_gas_used: cumulative,
            logs: call.receipt_logs.clone(),
        };
        let with_bloom: ReceiptWithBloom<Receipt> = receipt.with_bloom();
        bloom |= with_bloom.logs_bloom;
        let envelope = match call.tx.tx_type {
            0 => ReceiptEnvelope::Legacy(with_bloom),
            3 => ReceiptEnvelope::Eip4844(with_bloom),
            4 => ReceiptEnvelope::Eip7702(with_bloom),
            _ => ReceiptEnvelope::Eip1559(with_bloom),
        };
        encoded.push(envelope.encoded_2718());
    }
    (encoded, bloom)
}

/// The trie root of `items` by index, each as `bytes` gives it.
fn trie_root<T>(items: &[T], bytes: impl Fn(&T) -> &[u8]) -> B256 {
    proofs::ordered_trie_root_with_encoder(items, |item: &T, buf: &mut Vec<u8>| {
        buf.extend_from_slice(bytes(item))
    })
}

/// EIP-7685's hash of a block's requests.
fn requests_hash(requests: &[Bytes]) -> B256 {
    use sha2::{Digest, Sha256};
    let mut all = Sha256::new();
    for request in requests.iter().filter(|r| r.len() > 1) {
        all.update(Sha256::digest(request));
    }
    B256::from_slice(&all.finalize())
}

fn header(
    block: &SimBlock,
    done: &SimBlockDone,
    extra: &BlockExtra,
    parent_hash: B256,
    txs: &[Encoded],
    receipts: &[Vec<u8>],
    bloom: Bloom,
) -> Header {
    let spec = done.spec;
    let cancun = spec.is_enabled_in(SpecId::CANCUN);
    Header {
        parent_hash,
        ommers_hash: EMPTY_OMMER_ROOT_HASH,
        beneficiary: block.coinbase,
        // Not made here: the state trie's nodes are not held.
        state_root: B256::ZERO,
        transactions_root: trie_root(txs, |t| &t.bytes),
        receipts_root: trie_root(receipts, |r| r),
        logs_bloom: bloom,
        difficulty: U256::ZERO,
        number: block.number,
        gas_limit: block.gas_limit,
        gas_used: done.gas_used,
        timestamp: block.timestamp,
        extra_data: Bytes::new(),
        mix_hash: block.prevrandao,
        nonce: B64::ZERO,
        base_fee_per_gas: spec.is_enabled_in(SpecId::LONDON).then_some(done.base_fee),
        withdrawals_root: spec
            .is_enabled_in(SpecId::SHANGHAI)
            .then(|| proofs::calculate_withdrawals_root(&extra.withdrawals)),
        blob_gas_used: cancun.then_some(done.blob_gas_used),
        excess_blob_gas: cancun.then_some(done.excess_blob_gas),
        parent_beacon_block_root: cancun.then_some(block.beacon_root),
        requests_hash: spec
            .is_enabled_in(SpecId::PRAGUE)
            .then(|| requests_hash(&done.requests)),
        ..Default::default()
    }
}

/// The block's size: its RLP `[header, transactions, uncles, withdrawals]`.
fn size(
    header: &Header,
    txs: &[Encoded],
    withdrawals: Option<&[alloy_eips::eip4895::Withdrawal]>,
) -> usize {
    let item = |tx: &Encoded| match tx.bytes.first() {
        // A typed transaction is a string of its encoding; a legacy one
        // its list.
        Some(b) if *b < 0x7f => tx.bytes.as_slice().length(),
        _ => tx.bytes.len(),
    };
    let list = |payload: usize| {
        alloy_rlp::Header {
            list: true,
            payload_length: payload,
        }
        .length()
            + payload
    };
    let mut payload = header.length() + list(txs.iter().map(item).sum()) + list(0);
    if let Some(withdrawals) = withdrawals {
        payload += list(withdrawals.iter().map(Encodable::length).sum());
    }
    list(payload)
}

fn quantity(n: u64) -> Value {
    json!(U64::from(n))
}

fn block_json(
    ran: &Ran,
    block: &SimBlock,
    done: &SimBlockDone,
    extra: &BlockExtra,
    header: &Header,
    hash: B256,
    txs: &[Encoded],
) -> Value {
    let mut out = header_json(header, hash, txs, extra);
    let fields = out.as_object_mut().expect("an object");
    let at = Placed {
        number: header.number,
        timestamp: header.timestamp,
        hash,
        base_fee: done.base_fee,
    };
    let transactions: Vec<Value> = match ran.full_transactions {
        false => txs.iter().map(|t| json!(t.hash)).collect(),
        true => full_transactions(
            &at,
            block,
            done,
            extra,
            txs,
            ran.simulation.base.context.chain_id,
        ),
    };
    fields.insert("transactions".into(), Value::Array(transactions));
    let calls = done
        .calls
        .iter()
        .zip(txs)
        .enumerate()
        .map(|(i, (call, tx))| call_json(&at, call, tx.hash, i));
    fields.insert("calls".into(), Value::Array(calls.collect()));
    out
}

/// A block's header as a node writes it (each fork's fields where the
/// header has them), with its size.
fn header_json(header: &Header, hash: B256, txs: &[Encoded], extra: &BlockExtra) -> Value {
    let withdrawals = &extra.withdrawals;
    let listed = header
        .withdrawals_root
        .is_some()
        .then_some(withdrawals.as_slice());
    let mut out = json!({
        "number": quantity(header.number),
        "hash": hash,
        "parentHash": header.parent_hash,
        "nonce": header.nonce,
        "mixHash": header.mix_hash,
        "sha3Uncles": header.ommers_hash,
        "logsBloom": header.logs_bloom,
        "stateRoot": header.state_root,
        "miner": header.beneficiary,
        "difficulty": header.difficulty,
        "extraData": header.extra_data,
        "gasLimit": quantity(header.gas_limit),
        "gasUsed": quantity(header.gas_used),
        "timestamp": quantity(header.timestamp),
        "transactionsRoot": header.transactions_root,
        "receiptsRoot": header.receipts_root,
        "size": quantity(size(header, txs, listed) as u64),
        "uncles": [],
    });
    let fields = out.as_object_mut().expect("an object");
    if let Some(fee) = header.base_fee_per_gas {
        fields.insert("baseFeePerGas".into(), quantity(fee));
    }
    if let Some(root) = header.withdrawals_root {
        fields.insert("withdrawalsRoot".into(), json!(root));
        fields.insert("withdrawals".into(), json!(withdrawals));
    }
    if let (Some(used), Some(excess)) = (header.blob_gas_used, header.excess_blob_gas) {
        fields.insert("blobGasUsed".into(), quantity(used));
        fields.insert("excessBlobGas".into(), quantity(excess));
    }
    if let Some(root) = header.parent_beacon_block_root {
        fields.insert("parentBeaconBlockRoot".into(), json!(root));
    }
    if let Some(requests) = header.requests_hash {
        fields.insert("requestsHash".into(), json!(requests));
    }
    out
}

/// Where a block's transactions and logs are.
struct Placed {
    number: u64,
    timestamp: u64,
    hash: B256,
    base_fee: u64,
}

fn call_json(at: &Placed, call: &SimCallDone, tx_hash: B256, index: usize) -> Value {
    let logs: Vec<Value> = call
        .logs
        .iter()
        .map(|log| {
            json!({
                "address": log.log.address,
                "topics": log.log.topics(),
                "data": log.log.data.data,
                "blockNumber": quantity(at.number),
                "transactionHash": tx_hash,
                "transactionIndex": quantity(index as u64),
                "blockHash": at.hash,
                "blockTimestamp": quantity(at.timestamp),
                "logIndex": quantity(log.index),
                "removed": false,
            })
        })
        .collect();
    let mut out = json!({
        "returnData": call.output,
        "logs": logs,
        "gasUsed": quantity(call.gas_used),
        "maxUsedGas": quantity(call.max_used_gas),
        "status": quantity(u64::from(call.failure.is_none())),
    });
    let error = match &call.failure {
        None => return out,
        Some(CallFailure::Reverted(data)) => {
            json!({"message": revert_message(data), "code": REVERTED, "data": data})
        }
        Some(CallFailure::Halted(message)) => {
            let capped = match call.gas_capped {
                true => " (gas limit was capped by the RPC server's global gas cap)",
                false => "",
            };
            json!({"message": format!("{message}{capped}"), "code": VM_ERROR})
        }
    };
    out["error"] = error;
    out
}

/// Every transaction whole, as geth writes a simulated block's (its
/// sender the call's, its signature zero).
fn full_transactions(
    at: &Placed,
    block: &SimBlock,
    done: &SimBlockDone,
    extra: &BlockExtra,
    txs: &[Encoded],
    chain_id: u64,
) -> Vec<Value> {
    // geth keys senders by hash: calls whose transactions are the same
    // show the last one's.
    let sender_of = |hash: &B256| {
        let last = txs.iter().rposition(|t| t.hash == *hash).unwrap_or(0);
        block.calls[last].from
    };
    let placed = done.calls.iter().zip(&block.calls).zip(txs).enumerate();
    placed
        .map(|(i, ((call_done, call), tx))| {
            let sim = &call_done.tx;
            let mut out = json!({
                "blockHash": at.hash,
                "blockNumber": quantity(at.number),
                "blockTimestamp": quantity(at.timestamp),
                "from": sender_of(&tx.hash),
                "gas": quantity(sim.gas),
                "hash": tx.hash,
                "input": call.input,
                "nonce": quantity(sim.nonce),
                "to": call.to,
                "transactionIndex": quantity(i as u64),
                "value": call.value,
                "type": quantity(u64::from(sim.tx_type)),
                "v": "0x0",
                "r": "0x0",
                "s": "0x0",
            });
            let fields = out.as_object_mut().expect("an object");
            let signed = || extra.signed.get(i).cloned().flatten().unwrap_or_default();
            fee_fields(fields, at, call, sim, chain_id, signed);
            out
        })
        .collect()
}

/// A full transaction's fee fields and those of its type: a legacy one's
/// price (and the chain id geth derives from a zero `v`); a typed one's
/// caps, its price in the block, its access list, blobs, delegations.
fn fee_fields(
    fields: &mut serde_json::Map<String, Value>,
    at: &Placed,
    call: &SimCall,
    sim: &SimTx,
    chain_id: u64,
    signed: impl FnOnce() -> Vec<call_exec::SignedAuthorization>,
) {
    if sim.tx_type == 0 {
        fields.insert("gasPrice".into(), json!(U256::from(sim.max_fee_per_gas)));
        // geth derives it from v = 0: (0 - 35) / 2 as a u64.
        fields.insert("chainId".into(), json!("0x7fffffffffffffee"));
        return;
    }
    let price = u128::from(at.base_fee)
        .saturating_add(sim.max_priority_fee_per_gas)
        .min(sim.max_fee_per_gas);
    let quantity128 = |n: u128| json!(U256::from(n));
    fields.insert("gasPrice".into(), quantity128(price));
    fields.insert("maxFeePerGas".into(), quantity128(sim.max_fee_per_gas));
    fields.insert(
        "maxPriorityFeePerGas".into(),
        quantity128(sim.max_priority_fee_per_gas),
    );
    fields.insert("accessList".into(), json!(call.access_list));
    fields.insert("chainId".into(), quantity(chain_id));
    fields.insert("yParity".into(), json!("0x0"));
    if sim.tx_type == 3 {
        fields.insert(
            "maxFeePerBlobGas".into(),
            quantity128(sim.max_fee_per_blob_gas),
        );
        fields.insert("blobVersionedHashes".into(), json!(call.blob_hashes));
    }
    if sim.tx_type == 4 {
        fields.insert("authorizationList".into(), json!(signed()));
    }
}
