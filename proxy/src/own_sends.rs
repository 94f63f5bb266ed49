//! The wallet's own transactions, followed in whole blocks. A wallet polls
//! the receipt of what it sent by hash (`eth_getTransactionReceipt`, and
//! viem first `eth_getTransactionByHash`), and a hash names its sender: to
//! the reading upstream, which serves every other read of this machine,
//! that would tie the sender to all of them, whatever endpoint the send
//! went to. So after a send through the proxy (`receipts_by_block`), those
//! calls for its hash are answered here: the transaction from the raw bytes
//! that were sent (its signer recovered here), the receipt from
//! `eth_getBlockReceipts` of each block since the send, with its header,
//! read once each while a send is unfound. The reading upstream sees whole
//! blocks read while something is pending, never which transaction.
//!
//! Every number the upstream gives is bounded before it is used (a poll
//! reads at most [`MOST_BLOCKS_PER_POLL`] blocks, a head never makes the
//! cursor wrap), the state is locked only between network calls, and one
//! poll reads blocks at a time.

use std::collections::VecDeque;

use alloy_consensus::transaction::{Recovered, SignerRecoverable};
use alloy_consensus::TxEnvelope;
use alloy_eips::eip2718::Decodable2718;
use alloy_primitives::{Bytes, B256};
use serde_json::value::RawValue;
use serde_json::Value;

use crate::activity::Reason;
use crate::error::ProxyError;
use crate::upstream::Upstream;

/// Most sends followed at once; the oldest found one is forgotten first,
/// else the oldest (its hash is then asked upstream as any other).
const MOST_FOLLOWED: usize = 256;
/// Most blocks read for one poll: a wallet that polls again after a long
/// pause catches up over several polls (each answered "not yet").
const MOST_BLOCKS_PER_POLL: u64 = 16;
/// Blocks before the upstream's head at the send that are read too: a
/// send that lands while its head is read, or a head one behind.
const BLOCKS_BEFORE_SEND: u64 = 2;
/// Blocks after which a send never found is no longer followed (dropped,
/// replaced): about 3.4 hours of mainnet blocks.
const FOLLOWED_BLOCKS: u64 = 1024;
/// The newest blocks read, kept by hash: a reorganisation that replaces
/// them is read again.
const BLOCKS_KEPT: usize = 32;

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

/// The sends whose transaction is in their params (the rest, such as
/// `eth_sendTransaction`, which the node signs, are asked by hash).
fn carries_raw_transaction(method: &str) -> bool {
    matches!(
        method,
        "eth_sendRawTransaction"
            | "eth_sendRawTransactionConditional"
            | "eth_sendPrivateTransaction"
    )
}

/// One send followed.
struct Followed {
    hash: B256,
    /// The transaction as sent and its signer.
    sent: (Bytes, Recovered<TxEnvelope>),
    /// The first block it may be in.
    since: u64,
    /// Its receipt, once a block held it, and that block's number and time.
    found: Option<Found>,
}

#[derive(Clone)]
struct Found {
    receipt: Value,
    block: u64,
    time: u64,
}

#[derive(Default)]
struct Following {
    sends: VecDeque<Followed>,
    /// The first block not read yet.
    next_block: Option<u64>,
    /// The newest blocks read, with their hashes.
    read: VecDeque<(u64, B256)>,
}

impl Following {
    fn unfound(&self) -> bool {
        self.sends.iter().any(|f| f.found.is_none())
    }

    /// Makes room for one more: the oldest found send goes first.
    fn make_room(&mut self) {
        if self.sends.len() < MOST_FOLLOWED {
            return;
        }
        match self.sends.iter().position(|f| f.found.is_some()) {
            Some(at) => {
                self.sends.remove(at);
            }
            None => {
                self.sends.pop_front();
            }
        }
    }

    /// Forgets what blocks from `number` on held (a reorganisation
    /// replaced them) and reads them again.
    fn rewind_to(&mut self, number: u64) {
        for followed in &mut self.sends {
            if followed.found.as_ref().is_some_and(|f| f.block >= number) {
                followed.found = None;
            }
        }
        self.read.retain(|(n, _)| *n < number);
        self.next_block = Some(self.next_block.map_or(number, |n| n.min(number)));
    }
}

/// The sends this proxy made, followed in whole blocks.
pub struct OwnSends {
    enabled: bool,
    following: std::sync::Mutex<Following>,
    /// One poll reads blocks at a time.
    reading: tokio::sync::Mutex<()>,
}

impl OwnSends {
    /// Follows sends when `enabled` (`receipts_by_block`).
    pub fn new(enabled: bool) -> Self {
        OwnSends {
            enabled,
            following: Default::default(),
            reading: Default::default(),
        }
    }

    /// The reading upstream's head before a send of `method`, where the
    /// send will be followed (read first, so that the block it lands in is
    /// never below it).
    pub async fn head_before_send(&self, reads: Option<&Upstream>, method: &str) -> Option<u64> {
        match (self.enabled && carries_raw_transaction(method), reads) {
            (true, Some(reads)) => reads.head().await,
            _ => None,
        }
    }

    /// Notes a send the endpoint accepted (`method` with `params`,
    /// answered `result`; the reading upstream's head was `head` before
    /// it). The transaction's own hash where the endpoint answered another
    /// (the wallet is given the true one: a made-up hash polled upstream
    /// would tie this machine to the endpoint's records). A send that
    /// cannot be followed (no head, bytes that are no transaction) is left
    /// to be asked by hash.
    pub fn note(
        &self,
        head: Option<u64>,
        method: &str,
        params: Option<&RawValue>,
        result: &RawValue,
    ) -> Option<B256> {
        if !self.enabled || !carries_raw_transaction(method) {
            return None;
        }
        let (raw, tx) = sent_transaction(params)?;
        let hash = *tx.inner().tx_hash();
        // (An answer that is no hash is passed on as the endpoint sent it.)
        let answered: Option<B256> = serde_json::from_str(result.get()).ok();
        let corrected = answered.filter(|a| *a != hash).map(|_| {
            tracing::warn!(answered = ?answered, sent = %hash, "the send endpoint answered another hash than the transaction's: the wallet is given the transaction's");
            hash
        });
        let Some(head) = head else {
            tracing::info!("no head from the upstream: this send's receipt will be asked by hash");
            return corrected;
        };
        let since = head.saturating_sub(BLOCKS_BEFORE_SEND);
        let mut following = self.following.lock().expect("lock");
        if following.sends.iter().any(|f| f.hash == hash) {
            return corrected;
        }
        let next = match following.next_block {
            Some(next) if following.unfound() => next.min(since),
            _ => since,
        };
        following.next_block = Some(next);
        following.make_room();
        following.sends.push_back(Followed {
            hash,
            sent: (raw, tx),
            since,
            found: None,
        });
        corrected
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
        if !self.follows(&hash) {
            return None;
        }
        {
            let _one_reader = self.reading.lock().await;
            if let Err(e) = self.catch_up(reads).await {
                return Some(Err(e));
            }
        }
        let following = self.following.lock().expect("lock");
        // (Forgotten meanwhile: answered as unknown, never asked upstream.)
        let Some(followed) = following.sends.iter().find(|f| f.hash == hash) else {
            return Some(Ok(Value::Null));
        };
        Some(Ok(match kind {
            ByHash::Receipt => followed
                .found
                .as_ref()
                .map_or(Value::Null, |f| f.receipt.clone()),
            ByHash::RawTransaction => serde_json::json!(followed.sent.0),
            ByHash::Transaction => transaction_object(followed),
        }))
    }

    fn follows(&self, hash: &B256) -> bool {
        let following = self.following.lock().expect("lock");
        following.sends.iter().any(|f| f.hash == *hash)
    }

    /// Reads again what a reorganisation replaced, then the blocks since
    /// the last one read while a send is unfound, and forgets sends never
    /// found in [`FOLLOWED_BLOCKS`].
    async fn catch_up(&self, reads: &Upstream) -> Result<(), ProxyError> {
        self.rewind_reorganised(reads).await;
        let Some(head) = self.unfound_next().map(|_| reads.head()) else {
            return Ok(());
        };
        let head = head
            .await
            .ok_or_else(|| ProxyError::UpstreamUnavailable("no head".into()))?;
        for _ in 0..MOST_BLOCKS_PER_POLL {
            let Some(number) = self.unfound_next().filter(|n| *n <= head) else {
                break;
            };
            let Some((hash, time, receipts)) = read_block(reads, number).await? else {
                break;
            };
            let mut following = self.following.lock().expect("lock");
            if !keep_found(&mut following, (number, hash, time), receipts) {
                // The block changed between its header and its receipts
                // (a reorganisation meanwhile): read again next poll.
                break;
            }
            following.read.push_back((number, hash));
            if following.read.len() > BLOCKS_KEPT {
                following.read.pop_front();
            }
            following.next_block = number.checked_add(1);
            let past = |f: &Followed| {
                f.found.is_none() && f.since.saturating_add(FOLLOWED_BLOCKS) < number
            };
            following.sends.retain(|f| !past(f));
        }
        Ok(())
    }

    /// The next block to read, while a send is unfound.
    fn unfound_next(&self) -> Option<u64> {
        let following = self.following.lock().expect("lock");
        following
            .unfound()
            .then_some(following.next_block)
            .flatten()
    }

    /// Compares the newest blocks read with the upstream's blocks at those
    /// numbers (a reorganisation replaces the newest first) and reads again
    /// from the first one replaced. An upstream that does not answer, or
    /// has no block there yet (a lagging backend), leaves them.
    async fn rewind_reorganised(&self, reads: &Upstream) {
        for _ in 0..BLOCKS_KEPT {
            let newest = self.following.lock().expect("lock").read.back().copied();
            let Some((number, hash)) = newest else { return };
            match reads.block_hash_at(number).await {
                Ok(Some(now)) if now != hash => {
                    tracing::info!(
                        block = number,
                        "a block read for a send was reorganised away: read again"
                    );
                    self.following.lock().expect("lock").rewind_to(number);
                }
                _ => return,
            }
        }
    }
}

/// Keeps each receipt of `receipts` (block `number`, `hash`, `time`) that
/// is a followed send's; false (nothing kept) where one says it is of
/// another block.
fn keep_found(
    following: &mut Following,
    (number, hash, time): (u64, B256, u64),
    receipts: Vec<Value>,
) -> bool {
    let field = |r: &Value, name: &str| -> Option<B256> {
        serde_json::from_value(r.get(name)?.clone()).ok()
    };
    if receipts.iter().any(|r| field(r, "blockHash") != Some(hash)) {
        return false;
    }
    for receipt in receipts {
        let tx = field(&receipt, "transactionHash");
        let waiting = following
            .sends
            .iter_mut()
            .find(|f| Some(f.hash) == tx && f.found.is_none());
        if let Some(followed) = waiting {
            followed.found = Some(Found {
                receipt,
                block: number,
                time,
            });
        }
    }
    true
}

/// The raw transaction a send's params carry (first, or as the first
/// object's `tx`, as `eth_sendPrivateTransaction` has it), decoded and its
/// signer recovered.
fn sent_transaction(params: Option<&RawValue>) -> Option<(Bytes, Recovered<TxEnvelope>)> {
    let params: Vec<Value> = serde_json::from_str(params?.get()).ok()?;
    let first = params.into_iter().next()?;
    let raw = match first {
        Value::Object(mut fields) => fields.remove("tx")?,
        raw => raw,
    };
    let raw: Bytes = serde_json::from_value(raw).ok()?;
    let tx = TxEnvelope::decode_2718_exact(&raw).ok()?;
    let signer = tx.recover_signer().ok()?;
    Some((raw, Recovered::new_unchecked(tx, signer)))
}

/// Block `number`'s hash, time and receipts (None while the upstream has
/// no such block).
async fn read_block(
    reads: &Upstream,
    number: u64,
) -> Result<Option<(B256, u64, Vec<Value>)>, ProxyError> {
    let unreadable = |e: String| ProxyError::UpstreamUnavailable(format!("block {number}: {e}"));
    let Some((hash, time)) = reads.block_at(number).await.map_err(unreadable)? else {
        return Ok(None);
    };
    let params = serde_json::value::to_raw_value(&[format!("{number:#x}")])
        .map_err(|e| unreadable(e.to_string()))?;
    let raw = reads
        .call(
            "eth_getBlockReceipts",
            Some(params),
            Reason::NotPrivateMethod,
        )
        .await?;
    let receipts: Option<Vec<Value>> = serde_json::from_str(raw.get())
        .map_err(|e| unreadable(format!("eth_getBlockReceipts: {e}")))?;
    Ok(receipts.map(|r| (hash, time, r)))
}

/// The transaction as geth gives it by hash (`newRPCTransaction`):
/// pending (no block, `gasPrice` its fee cap) until its receipt is found,
/// then with the block, its time, the index and the price paid.
fn transaction_object(followed: &Followed) -> Value {
    use alloy_consensus::Transaction as _;
    let tx = &followed.sent.1;
    let found = followed.found.as_ref();
    let field = |name: &str| found.and_then(|f| f.receipt.get(name)).cloned();
    let number = |name: &str| {
        field(name).and_then(|v| serde_json::from_value::<alloy_primitives::U64>(v).ok())
    };
    let paid = field("effectiveGasPrice")
        .and_then(|v| serde_json::from_value::<alloy_primitives::U128>(v).ok())
        .map(|p| p.to());
    let time = found.map(|f| f.time);
    let object = alloy_rpc_types_eth::Transaction {
        inner: tx.clone(),
        block_hash: field("blockHash").and_then(|v| serde_json::from_value(v).ok()),
        block_number: found.map(|f| f.block),
        transaction_index: number("transactionIndex").map(|n| n.to()),
        effective_gas_price: paid.or(Some(tx.max_fee_per_gas())),
        block_timestamp: time,
    };
    let mut object = serde_json::to_value(object).unwrap_or(Value::Null);
    if let Value::Object(fields) = &mut object {
        fields.insert(
            "blockTimestamp".into(),
            serde_json::json!(time.map(|t| format!("{t:#x}"))),
        );
    }
    object
}

#[cfg(test)]
mod tests {
    use super::*;

    fn followed(n: u16, found: bool) -> Followed {
        let tx = alloy_consensus::TxLegacy::default();
        let signed = alloy_consensus::Signed::new_unhashed(
            tx,
            alloy_primitives::Signature::test_signature(),
        );
        let envelope = TxEnvelope::Legacy(signed);
        Followed {
            hash: B256::left_padding_from(&n.to_be_bytes()),
            sent: (
                Bytes::new(),
                Recovered::new_unchecked(envelope, Default::default()),
            ),
            since: 10,
            found: found.then_some(Found {
                receipt: Value::Null,
                block: 12,
                time: 0,
            }),
        }
    }

    #[test]
    fn room_is_made_by_found_sends_first_and_a_reorganisation_reads_again() {
        let mut following = Following::default();
        following.sends.push_back(followed(1, false));
        following.sends.push_back(followed(2, true));
        for i in 3..=MOST_FOLLOWED as u16 {
            following.sends.push_back(followed(i, false));
        }
        following.make_room();
        assert!(following
            .sends
            .iter()
            .all(|f| f.hash != B256::repeat_byte(2)));
        following.sends.push_back(followed(2, true));
        following.next_block = Some(20);
        following.read.extend([(11, B256::ZERO), (12, B256::ZERO)]);
        following.rewind_to(12);
        assert_eq!(following.next_block, Some(12));
        assert_eq!(following.read, [(11, B256::ZERO)]);
        assert!(following.sends.iter().all(|f| f.found.is_none()));
    }
}
