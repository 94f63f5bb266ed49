//! The wallet's own transactions, followed in whole blocks. A wallet polls
//! the receipt of what it sent by hash (`eth_getTransactionReceipt`, and
//! viem first `eth_getTransactionByHash`), and a hash names its sender: to
//! the reading upstream, which serves every other read of this machine,
//! that would tie the sender to all of them, whatever endpoint the send
//! went to. So after a send through the proxy (`receipts_by_block`), those
//! calls for its hash are answered here: the transaction from the raw bytes
//! that were sent (its signer recovered here), the receipt from
//! `eth_getBlockReceipts` of each block since the send, read once each
//! while a send is unfound. The reading upstream sees whole blocks read
//! while something is pending, never which transaction.

use std::collections::VecDeque;

use alloy_consensus::transaction::SignerRecoverable;
use alloy_consensus::TxEnvelope;
use alloy_eips::eip2718::Decodable2718;
use alloy_primitives::{keccak256, Bytes, B256};
use serde_json::value::RawValue;
use serde_json::Value;

use crate::activity::Reason;
use crate::error::ProxyError;
use crate::upstream::Upstream;

/// Most sends followed at once; the oldest is forgotten (its hash is then
/// asked upstream as any other).
const MOST_FOLLOWED: usize = 256;
/// Most blocks read for one poll: a wallet that polls again after a long
/// pause catches up over several polls (each answered "not yet").
const MOST_BLOCKS_PER_POLL: u64 = 16;

/// The methods answered here for a followed hash.
#[derive(Clone, Copy, PartialEq, Eq)]
enum ByHash {
    Receipt,
    Transaction,
    RawTransaction,
}

impl ByHash {
    fn of(method: &str) -> Option<Self> {
        match method {
            "eth_getTransactionReceipt" => Some(ByHash::Receipt),
            "eth_getTransactionByHash" => Some(ByHash::Transaction),
            "eth_getRawTransactionByHash" => Some(ByHash::RawTransaction),
            _ => None,
        }
    }
}

/// One send followed.
struct Followed {
    hash: B256,
    /// The transaction as sent, its signer recovered (None for
    /// `eth_sendTransaction`, which the node signed).
    sent: Option<(Bytes, alloy_consensus::transaction::Recovered<TxEnvelope>)>,
    /// Its receipt, once a block held it, and that block's time.
    receipt: Option<Value>,
    block_time: Option<u64>,
}

#[derive(Default)]
struct Following {
    sends: VecDeque<Followed>,
    /// The first block not read yet.
    next_block: Option<u64>,
}

impl Following {
    fn unfound(&self) -> bool {
        self.sends.iter().any(|f| f.receipt.is_none())
    }
}

/// The sends this proxy made, followed in whole blocks.
pub struct OwnSends {
    enabled: bool,
    following: tokio::sync::Mutex<Following>,
}

impl OwnSends {
    /// Follows sends when `enabled` (`receipts_by_block`).
    pub fn new(enabled: bool) -> Self {
        OwnSends {
            enabled,
            following: Default::default(),
        }
    }

    /// Notes a send the endpoint accepted (`method` with `params`,
    /// answered `result`), from the reading upstream's head on (`reads`).
    /// A send that cannot be followed (no head, bytes that are no
    /// transaction) is left to be asked by hash as before.
    pub async fn note(
        &self,
        reads: Option<&Upstream>,
        method: &str,
        params: Option<&RawValue>,
        result: &RawValue,
    ) {
        let (Some(reads), true) = (reads, self.enabled) else {
            return;
        };
        let answered: Option<B256> = serde_json::from_str(result.get()).ok();
        let followed = match method {
            "eth_sendRawTransaction"
            | "eth_sendRawTransactionConditional"
            | "eth_sendPrivateTransaction" => match sent_transaction(params) {
                Some((raw, tx)) => Followed {
                    hash: keccak256(&raw),
                    sent: Some((raw, tx)),
                    receipt: None,
                    block_time: None,
                },
                None => return,
            },
            "eth_sendTransaction" => match answered {
                Some(hash) => Followed {
                    hash,
                    sent: None,
                    receipt: None,
                    block_time: None,
                },
                None => return,
            },
            _ => return,
        };
        if answered.is_some_and(|a| a != followed.hash) {
            tracing::warn!(answered = ?answered, sent = %followed.hash, "the send endpoint answered another hash than the transaction's; its receipt is looked for by the transaction's");
        }
        let Some(head) = reads.head().await else {
            tracing::info!("no head from the upstream: this send's receipt will be asked by hash");
            return;
        };
        let mut following = self.following.lock().await;
        let next = match following.next_block {
            Some(next) if following.unfound() => next.min(head),
            _ => head,
        };
        following.next_block = Some(next);
        following.sends.push_back(followed);
        if following.sends.len() > MOST_FOLLOWED {
            following.sends.pop_front();
        }
    }

    /// The answer to `method` when it asks about a followed send by hash:
    /// the receipt (null until a block holds it), the transaction, its raw
    /// bytes. None for anything else.
    pub async fn answer(
        &self,
        reads: &Upstream,
        method: &str,
        params: Option<&RawValue>,
    ) -> Option<Result<Value, ProxyError>> {
        let kind = ByHash::of(method).filter(|_| self.enabled)?;
        let (hash,): (B256,) = serde_json::from_str(params?.get()).ok()?;
        let mut following = self.following.lock().await;
        let at = following.sends.iter().position(|f| f.hash == hash)?;
        if kind != ByHash::Receipt && following.sends[at].sent.is_none() {
            return None;
        }
        forget_if_reorganised(&mut following, at, reads).await;
        if following.sends[at].receipt.is_none() {
            if let Err(e) = read_new_blocks(&mut following, reads).await {
                return Some(Err(e));
            }
        }
        let followed = &following.sends[at];
        Some(Ok(match kind {
            ByHash::Receipt => followed.receipt.clone().unwrap_or(Value::Null),
            ByHash::RawTransaction => serde_json::json!(followed.sent.as_ref()?.0),
            ByHash::Transaction => transaction_object(followed)?,
        }))
    }
}

/// Forgets the receipt of send `at` when the upstream's block at its
/// number is no longer the one that held it (a reorganisation), and reads
/// again from that block on. An upstream that does not answer leaves it.
async fn forget_if_reorganised(following: &mut Following, at: usize, reads: &Upstream) {
    let Some(receipt) = &following.sends[at].receipt else {
        return;
    };
    let field = |name: &str| receipt.get(name).cloned();
    let held_by: Option<B256> = field("blockHash").and_then(|v| serde_json::from_value(v).ok());
    let number = field("blockNumber")
        .and_then(|v| serde_json::from_value::<alloy_primitives::U64>(v).ok())
        .map(|n| n.to::<u64>());
    let (Some(held_by), Some(number)) = (held_by, number) else {
        return;
    };
    match reads.block_hash_at(number).await {
        Ok(now) if now != Some(held_by) => {
            tracing::info!(
                block = number,
                "a followed send's block was reorganised away: looked for again"
            );
            let followed = &mut following.sends[at];
            followed.receipt = None;
            followed.block_time = None;
            let next = following.next_block.map_or(number, |n| n.min(number));
            following.next_block = Some(next);
        }
        _ => {}
    }
}

/// The raw transaction a send's params carry (first, or as the first
/// object's `tx`, as `eth_sendPrivateTransaction` has it), decoded and its
/// signer recovered.
fn sent_transaction(
    params: Option<&RawValue>,
) -> Option<(Bytes, alloy_consensus::transaction::Recovered<TxEnvelope>)> {
    let params: Vec<Value> = serde_json::from_str(params?.get()).ok()?;
    let first = params.into_iter().next()?;
    let raw = match first {
        Value::Object(mut fields) => fields.remove("tx")?,
        raw => raw,
    };
    let raw: Bytes = serde_json::from_value(raw).ok()?;
    let tx = TxEnvelope::decode_2718_exact(&raw).ok()?;
    let signer = tx.recover_signer().ok()?;
    Some((
        raw,
        alloy_consensus::transaction::Recovered::new_unchecked(tx, signer),
    ))
}

/// Reads the blocks since the last one read, up to the upstream's head
/// (at most [`MOST_BLOCKS_PER_POLL`]), and keeps the receipts of followed
/// sends found in them.
async fn read_new_blocks(following: &mut Following, reads: &Upstream) -> Result<(), ProxyError> {
    let Some(mut next) = following.next_block else {
        return Ok(());
    };
    let head = reads
        .head()
        .await
        .ok_or_else(|| ProxyError::UpstreamUnavailable("no head".into()))?;
    let last = head.min(next + MOST_BLOCKS_PER_POLL - 1);
    while next <= last && following.unfound() {
        let Some(receipts) = block_receipts(reads, next).await? else {
            break;
        };
        for receipt in receipts {
            keep_if_followed(following, reads, receipt).await;
        }
        next += 1;
        following.next_block = Some(next);
    }
    Ok(())
}

/// Keeps `receipt` where it is a followed send's, with its block's time
/// (from the block's header, checked against its hash).
async fn keep_if_followed(following: &mut Following, reads: &Upstream, receipt: Value) {
    let field = |name: &str| receipt.get(name).cloned();
    let hash: Option<B256> = field("transactionHash").and_then(|h| serde_json::from_value(h).ok());
    let waiting = following
        .sends
        .iter_mut()
        .find(|f| Some(f.hash) == hash && f.receipt.is_none());
    let Some(followed) = waiting else {
        return;
    };
    let block: Option<B256> = field("blockHash").and_then(|h| serde_json::from_value(h).ok());
    if let Some(block) = block {
        followed.block_time = reads.header_by_hash(block).await.map(|h| h.timestamp);
    }
    followed.receipt = Some(receipt);
}

/// The receipts of block `number` (None while the upstream has no such
/// block).
async fn block_receipts(reads: &Upstream, number: u64) -> Result<Option<Vec<Value>>, ProxyError> {
    let params = serde_json::value::to_raw_value(&[format!("{number:#x}")])
        .map_err(|e| ProxyError::UpstreamUnavailable(e.to_string()))?;
    let raw = reads
        .call(
            "eth_getBlockReceipts",
            Some(params),
            Reason::NotPrivateMethod,
        )
        .await?;
    serde_json::from_str(raw.get())
        .map_err(|e| ProxyError::UpstreamUnavailable(format!("eth_getBlockReceipts: {e}")))
}

/// The transaction as geth gives it by hash (`newRPCTransaction`):
/// pending (no block, `gasPrice` its fee cap) until its receipt is found,
/// then with the block, its time, the index and the price paid.
fn transaction_object(followed: &Followed) -> Option<Value> {
    use alloy_consensus::Transaction as _;
    let (_, tx) = followed.sent.as_ref()?;
    let receipt = followed.receipt.as_ref();
    let field = |name: &str| receipt.and_then(|r| r.get(name)).cloned();
    let number = |name: &str| {
        field(name).and_then(|v| serde_json::from_value::<alloy_primitives::U64>(v).ok())
    };
    let paid = field("effectiveGasPrice")
        .and_then(|v| serde_json::from_value::<alloy_primitives::U128>(v).ok())
        .map(|p| p.to());
    let object = alloy_rpc_types_eth::Transaction {
        inner: tx.clone(),
        block_hash: field("blockHash").and_then(|v| serde_json::from_value(v).ok()),
        block_number: number("blockNumber").map(|n| n.to()),
        transaction_index: number("transactionIndex").map(|n| n.to()),
        effective_gas_price: paid.or(Some(tx.max_fee_per_gas())),
        block_timestamp: followed.block_time,
    };
    let mut object = serde_json::to_value(object).ok()?;
    let time = followed.block_time.map(|t| format!("{t:#x}"));
    object["blockTimestamp"] = serde_json::json!(time);
    Some(object)
}
