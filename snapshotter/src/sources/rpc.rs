//! The `rpc` source: any Ethereum JSON-RPC node, through alloy-provider
//! (typed blocks, receipts and parity traces; `AnyNetwork`, so that a
//! transaction type alloy does not know yet is still read for its sender
//! and recipient).
//!
//! Active set: every account touched in a window of blocks (senders,
//! recipients, created contracts, fee recipients, withdrawal recipients,
//! and call-trace participants where the node offers `trace_block`), read at
//! one block with batched `eth_getBalance` / `eth_getTransactionCount`
//! requests, a bounded number in flight, retried with backoff.

use std::collections::{BTreeMap, BTreeSet};
use std::future::{Future, IntoFuture};
use std::time::{Duration, Instant};

use alloy_consensus::Transaction as _;
use alloy_eips::{BlockId, BlockNumberOrTag};
use alloy_primitives::{keccak256, Address, Bytes, B256, U256, U64};
use alloy_provider::ext::TraceApi;
use alloy_provider::network::{AnyNetwork, AnyRpcBlock, TransactionResponse as _};
use alloy_provider::transport::{TransportError, TransportResult};
use alloy_provider::{Provider, RootProvider};
use alloy_rpc_client::{ClientBuilder, RpcClient};
use alloy_rpc_types_trace::parity::{Action, LocalizedTransactionTrace, TraceOutput};
use futures_util::stream::{self, StreamExt, TryStreamExt};

use protocol::storage::{PrivateStorage, StorageRecord};

mod ranges;
mod tracers;

use super::changes::{Changed, SystemCalls};
use crate::account::AccountRecord;
use crate::manifest::SnapshotKind;
use crate::pipeline::ExportedState;
use crate::progress::{report, ProgressEvent, ProgressFn, Step};
use protocol::account::EMPTY_CODE_HASH;

/// `eth_getProof`'s slots: none (the account alone).
const NO_SLOTS: [B256; 0] = [];

/// Contracts the protocol writes at every block, outside any transaction.
const SYSTEM_CONTRACTS: [Address; 4] = [
    alloy_eips::eip4788::BEACON_ROOTS_ADDRESS,
    alloy_eips::eip2935::HISTORY_STORAGE_ADDRESS,
    alloy_eips::eip7002::WITHDRAWAL_REQUEST_PREDEPLOY_ADDRESS,
    alloy_eips::eip7251::CONSOLIDATION_REQUEST_PREDEPLOY_ADDRESS,
];

/// What the records need of an `eth_getProof` answer.
#[derive(Debug, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct ProvedAccount {
    balance: U256,
    nonce: U64,
    code_hash: B256,
    storage_hash: B256,
    account_proof: Vec<Bytes>,
}

impl ProvedAccount {
    /// The record of `address`, its proof checked against the block's
    /// state `root`: in the state (even empty: a node may keep touched
    /// empty accounts, as anvil does), or not (deleted). Without a root to
    /// check against, an empty account is taken as deleted (EIP-161). A node
    /// answering zero hashes for an absent account reads as one without
    /// code or storage.
    fn record(&self, address: Address, root: Option<B256>) -> Result<AccountRecord, String> {
        let or = |hash: B256, none: B256| if hash.is_zero() { none } else { hash };
        let account = AccountRecord::new(address, self.balance, self.nonce.to::<u64>()).with_trie(
            or(self.code_hash, protocol::account::EMPTY_CODE_HASH),
            or(self.storage_hash, protocol::account::EMPTY_STORAGE_ROOT),
        );
        let Some(root) = root else {
            return Ok(match account.is_empty() {
                true => AccountRecord::deleted(address),
                false => account,
            });
        };
        let key = alloy_trie::Nibbles::unpack(account.key);
        let proves =
            |value| alloy_trie::proof::verify_proof(root, key, value, &self.account_proof).is_ok();
        if proves(Some(crate::state_root::leaf(&account))) {
            Ok(account)
        } else if account.is_empty() && proves(None) {
            Ok(AccountRecord::deleted(address))
        } else {
            Err(format!(
                "the proof of {address} does not match state root {root} (balance {}, nonce {})",
                account.balance, account.nonce
            ))
        }
    }
}

/// Why the node could not give us what we need.
#[derive(Debug, thiserror::Error)]
pub enum RpcSourceError {
    #[error("invalid node URL '{0}'")]
    Url(String),
    #[error("node at {url} unreachable after {attempts} attempts: {last}")]
    Unreachable {
        url: String,
        attempts: u32,
        last: String,
    },
    #[error("the node no longer has the state of block {block} (pruned; use an archive node): {message}")]
    Pruned { block: u64, message: String },
    #[error("block {block} is beyond the node's head {head}")]
    FutureBlock { block: u64, head: u64 },
    #[error("node error on {method}: {message}")]
    Node {
        method: &'static str,
        message: String,
    },
    #[error("unexpected reply to {method}: {message}")]
    Reply {
        method: &'static str,
        message: String,
    },
    #[error("block {block} changed while it was read (a reorg); it will be read again")]
    Reorged { block: u64 },
    #[error("the node's state dump gives the state root {dumped}, its header of block {block} {header} (a block mined while it dumped; anvil's genesis header names no real root, so a dump needs block 1 or later; geth's debug_accountRange leaves out slots it holds no preimage of: --cache.preimages from its first block): it will be asked again")]
    DumpMismatch {
        block: u64,
        dumped: B256,
        header: B256,
    },
}

/// Whether to ask the node for call traces.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Traces {
    /// Use `trace_block` if the node has it.
    #[default]
    Auto,
    On,
    Off,
}

/// Tuning of the source.
#[derive(Clone)]
pub struct RpcOptions {
    /// Accounts per JSON-RPC batch (two calls each).
    pub batch_size: usize,
    /// Batches in flight at once.
    pub concurrency: usize,
    /// Attempts per request before giving up.
    pub attempts: u32,
    pub traces: Traces,
    /// Where a delta learns what blocks changed (`Auto` until
    /// [`RpcSource::probe_changes`] chose).
    pub changes: super::changes::ChangeTracer,
    /// Where the account export reports progress (none: silent).
    pub progress: Option<ProgressFn>,
}

impl std::fmt::Debug for RpcOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RpcOptions")
            .field("batch_size", &self.batch_size)
            .field("concurrency", &self.concurrency)
            .field("attempts", &self.attempts)
            .field("traces", &self.traces)
            .field("changes", &self.changes)
            .field("progress", &self.progress.is_some())
            .finish()
    }
}

impl Default for RpcOptions {
    fn default() -> Self {
        RpcOptions {
            batch_size: 100,
            concurrency: 4,
            attempts: 6,
            traces: Traces::Auto,
            changes: Default::default(),
            progress: None,
        }
    }
}

/// A connected node.
pub struct RpcSource {
    provider: RootProvider<AnyNetwork>,
    /// The provider's client, for batches of account reads.
    client: RpcClient,
    /// The same HTTP client, for the one reply read with a byte bound of
    /// its own (the state dump).
    http: reqwest::Client,
    url: String,
    pub chain_id: u64,
    options: RpcOptions,
    /// Where codes already read are kept: an export reads only the codes
    /// it does not hold.
    code_store: Option<crate::store::SnapshotStore>,
}

fn is_pruned(message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    [
        "missing trie node",
        "state not available",
        "header not found",
        "historical state",
        "pruned",
        "state histories haven't been fully indexed",
    ]
    .iter()
    .any(|p| m.contains(p))
}

/// Longest a connection to the node may take to open.
const NODE_CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);
/// The method of a development node's whole-state dump (anvil's).
const DUMP_METHOD: &str = "anvil_dumpState";
/// Largest reply to `anvil_dumpState` read: the hex of a development
/// chain's gzipped state, a few MiB.
pub const MAX_DUMP_REPLY_BYTES: u64 = 512 << 20;
/// Longest one request to the node may take (a batch of proofs, a block's
/// traces on mainnet: seconds; a node that takes longer is asked again).
const NODE_REQUEST_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

impl RpcSource {
    /// A transport error's text with the node URL (which may carry an API
    /// key in its path) replaced by its redacted form.
    fn scrub(&self, text: String) -> String {
        text.replace(&self.url, &protocol::url::redact(&self.url))
    }

    /// Connects and reads the chain id (retrying while the node is down).
    pub async fn connect(url: &str, options: RpcOptions) -> Result<Self, RpcSourceError> {
        let parsed: reqwest::Url = url
            .parse()
            .map_err(|_| RpcSourceError::Url(protocol::url::redact(url)))?;
        // Every request bounded in time: a node that never answers one is
        // asked again (the follower's retries), never waited on forever.
        let http = reqwest::Client::builder()
            .connect_timeout(NODE_CONNECT_TIMEOUT)
            .timeout(NODE_REQUEST_TIMEOUT)
            .build()
            .map_err(|e| RpcSourceError::Url(format!("{}: {e}", protocol::url::redact(url))))?;
        let client = ClientBuilder::default().http_with_client(http.clone(), parsed);
        let mut source = RpcSource {
            provider: RootProvider::new(client.clone()),
            client,
            http,
            url: url.to_string(),
            chain_id: 0,
            options,
            code_store: None,
        };
        source.chain_id = source
            .retry("eth_chainId", None, || source.provider.get_chain_id())
            .await?;
        Ok(source)
    }

    /// Exports read only the codes `store` does not keep (each export
    /// otherwise reads every code its accounts have).
    /// The tracer deltas read changes with ([`Self::probe_changes`]'s
    /// choice).
    pub fn with_changes(mut self, tracer: super::changes::ChangeTracer) -> Self {
        use super::changes::ChangeTracer;
        self.options.traces = match tracer {
            ChangeTracer::Blocks => Traces::Off,
            _ => Traces::On,
        };
        self.options.changes = tracer;
        self
    }

    pub fn with_code_store(mut self, store: crate::store::SnapshotStore) -> Self {
        self.code_store = Some(store);
        self
    }

    /// The codes of `records` at block `at` that the code store lacks
    /// (one read per distinct code), each checked against the code hash
    /// the account's proof gave.
    async fn read_codes(
        &self,
        records: &[AccountRecord],
        at: u64,
    ) -> Result<Vec<Bytes>, RpcSourceError> {
        let kept = |h: &B256| self.code_store.as_ref().is_some_and(|s| s.has_code(h));
        let mut wanted: BTreeMap<B256, Address> = BTreeMap::new();
        for r in records {
            let Some(address) = r.address else { continue };
            if r.code_hash != EMPTY_CODE_HASH && !r.code_hash.is_zero() && !kept(&r.code_hash) {
                wanted.entry(r.code_hash).or_insert(address);
            }
        }
        let mut codes = Vec::with_capacity(wanted.len());
        for (hash, address) in wanted {
            let code = self.code_at(address, at).await?;
            if keccak256(&code) != hash {
                return Err(RpcSourceError::Reply {
                    method: "eth_getCode",
                    message: format!(
                        "the code of {address} is not the code hash its proof gives ({hash})"
                    ),
                });
            }
            codes.push(code);
        }
        Ok(codes)
    }

    /// One request (`request` makes it afresh for each attempt), retried
    /// with exponential backoff on transport errors; the node's own error
    /// and a reply of the wrong shape are not retried.
    async fn retry<R, F, Fut>(
        &self,
        method: &'static str,
        block: Option<u64>,
        mut request: F,
    ) -> Result<R, RpcSourceError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = TransportResult<R>>,
    {
        let mut last = String::new();
        for attempt in 0..self.options.attempts.max(1) {
            if attempt > 0 {
                tokio::time::sleep(backoff(attempt)).await;
            }
            match request().await {
                Ok(v) => return Ok(v),
                Err(TransportError::ErrorResp(e)) => {
                    return Err(classify(method, block, e.message.to_string()))
                }
                Err(TransportError::DeserError { err, .. }) => {
                    return Err(RpcSourceError::Reply {
                        method,
                        message: err.to_string(),
                    })
                }
                Err(e) => {
                    last = self.scrub(e.to_string());
                    tracing::debug!(method, attempt, error = %last, "request failed; retrying");
                }
            }
        }
        Err(RpcSourceError::Unreachable {
            url: protocol::url::redact(&self.url),
            attempts: self.options.attempts.max(1),
            last,
        })
    }

    /// The node's own dump of its whole state at its newest block
    /// (anvil's `anvil_dumpState`: gzipped JSON, what a development chain
    /// offers instead of a genesis file or a datadir), read within
    /// [`MAX_DUMP_REPLY_BYTES`]; `None` when the node has no such method.
    pub async fn dump_state(&self) -> Result<Option<Bytes>, RpcSourceError> {
        let body =
            serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": DUMP_METHOD, "params": []});
        let request = self
            .http
            .post(&self.url)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body.to_string());
        let bounds = api_client::fetch::Bounds {
            size: api_client::fetch::Size::AtMost(MAX_DUMP_REPLY_BYTES),
            first_byte: NODE_REQUEST_TIMEOUT,
            whole: NODE_REQUEST_TIMEOUT * 5,
            idle: Some(NODE_REQUEST_TIMEOUT),
        };
        let reply = |message: String| RpcSourceError::Reply {
            method: DUMP_METHOD,
            message,
        };
        let fetched = api_client::fetch::fetch(request, DUMP_METHOD, bounds, &|_| {})
            .await
            .map_err(|e| match e.is_oversized() {
                true => reply(e.to_string()),
                false => RpcSourceError::Unreachable {
                    url: protocol::url::redact(&self.url),
                    attempts: 1,
                    last: e.to_string(),
                },
            })?;
        #[derive(serde::Deserialize)]
        struct Reply {
            result: Option<Bytes>,
            error: Option<serde_json::Value>,
        }
        let parsed: Reply = serde_json::from_slice(&fetched.body)
            .map_err(|e| reply(format!("HTTP {}: {e}", fetched.status)))?;
        match (parsed.result, parsed.error) {
            (Some(dump), _) => Ok(Some(dump)),
            // -32601: not a method of this node (geth, reth, a provider).
            (None, Some(e)) if e["code"] == -32601 => Ok(None),
            (None, Some(e)) => Err(RpcSourceError::Node {
                method: DUMP_METHOD,
                message: e["message"].as_str().unwrap_or("no message").to_string(),
            }),
            (None, None) => Err(reply("neither a result nor an error".into())),
        }
    }

    /// The full state at the node's newest block from its own dump
    /// (anvil's [`Self::dump_state`], else geth's `debug_accountRange`),
    /// with the storage `listed` holds (every slot for the whole state),
    /// checked whole against the state root of the node's header of that
    /// block; `None` when the node offers neither.
    pub async fn export_dump(
        &self,
        listed: &PrivateStorage,
    ) -> Result<Option<ExportedState>, RpcSourceError> {
        let (chain_id, listed) = (self.chain_id, listed.clone());
        // Inflating and hashing the whole state: off the async threads.
        let mut state = match self.dump_state().await? {
            Some(dump) => tokio::task::spawn_blocking(move || {
                crate::sources::dump::parse_anvil_dump(&dump, chain_id, &listed)
            })
            .await
            .expect("parsing the dump panicked")
            .map_err(|e| RpcSourceError::Reply {
                method: DUMP_METHOD,
                message: e.to_string(),
            })?,
            None => {
                let block = self.head().await?;
                let (hash, _, _) = self.block_header(block).await?;
                let Some(alloc) = self.account_ranges(block, hash).await? else {
                    return Ok(None);
                };
                tokio::task::spawn_blocking(move || {
                    crate::sources::dump::account_range_state(&alloc, chain_id, block, &listed)
                })
                .await
                .expect("hashing the account ranges panicked")
            }
        };
        let (hash, root, time) = self.block_header(state.block_number).await?;
        let dumped = state.state_root.unwrap_or_default();
        if dumped != root {
            return Err(RpcSourceError::DumpMismatch {
                block: state.block_number,
                dumped,
                header: root,
            });
        }
        state.block_hash = Some(hash);
        state.block_time = Some(time);
        Ok(Some(state))
    }

    /// The node's head block.
    pub async fn head(&self) -> Result<u64, RpcSourceError> {
        self.retry("eth_blockNumber", None, || self.provider.get_block_number())
            .await
    }

    /// Block `n` with its transactions (`full`) or only their hashes.
    async fn block(&self, n: u64, full: bool) -> Result<AnyRpcBlock, RpcSourceError> {
        let number = BlockNumberOrTag::Number(n);
        let block = self
            .retry("eth_getBlockByNumber", Some(n), || {
                let request = self.provider.get_block_by_number(number);
                match full {
                    true => request.full(),
                    false => request.hashes(),
                }
                .into_future()
            })
            .await?;
        match block {
            Some(b) => Ok(b),
            None => Err(RpcSourceError::FutureBlock {
                block: n,
                head: self.head().await?,
            }),
        }
    }

    /// `(hash, state root, timestamp)` of a block (read without its
    /// transactions: an export reads it twice, around the accounts).
    pub async fn block_header(&self, n: u64) -> Result<(B256, B256, u64), RpcSourceError> {
        let header = self.block(n, false).await?.header.clone();
        Ok((header.hash, header.state_root, header.timestamp))
    }

    /// The state root of the node's block at `manifest`'s height, unless
    /// the manifest names another block there (`Err` inside: which).
    pub async fn root_of(
        &self,
        manifest: &crate::manifest::Manifest,
    ) -> Result<Result<B256, String>, RpcSourceError> {
        let (hash, root, _) = self.block_header(manifest.block_number).await?;
        Ok(match manifest.block_hash {
            Some(named) if named != hash => Err(format!(
                "block {} is {named} in the manifest, {hash} on the node",
                manifest.block_number
            )),
            _ => Ok(root),
        })
    }

    /// Every account touched in blocks `from..=to`: those the blocks name
    /// and, every time, the system contracts whose storage a block writes
    /// without a transaction (EIP-4788 beacon roots, EIP-2935 block
    /// hashes, EIP-7002 and EIP-7251 request queues; a chain before their
    /// fork reads them as empty accounts).
    pub async fn touched(&self, from: u64, to: u64) -> Result<BTreeSet<Address>, RpcSourceError> {
        Ok(self.touched_traced(from, to).await?.0)
    }

    /// [`Self::touched`], with what the call traces say of lifetimes:
    /// the `SELFDESTRUCT`s and the contracts created, by block.
    async fn touched_traced(
        &self,
        from: u64,
        to: u64,
    ) -> Result<(BTreeSet<Address>, Lifetimes), RpcSourceError> {
        let mut out = BTreeSet::from(SYSTEM_CONTRACTS);
        let mut lives = Lifetimes::default();
        let mut traces = self.options.traces;
        for n in from..=to {
            let block = self.block(n, true).await?;
            out.extend(block_participants(&block));
            lives.blocks.push(system_calls_of(&block));
            if block.transactions.is_empty() {
                continue;
            }
            out.extend(self.created_contracts(n).await?);
            if traces == Traces::Off {
                continue;
            }
            match self.traces(n).await {
                Ok(t) => {
                    out.extend(t.iter().flat_map(trace_participants));
                    lives.add(n, &t);
                }
                Err(e) if traces == Traces::Auto => {
                    tracing::info!(error = %e, "node offers no trace_block; using blocks and receipts only");
                    traces = Traces::Off;
                }
                Err(e) => return Err(e),
            }
        }
        Ok((out, lives))
    }

    /// The node's `web3_clientVersion`, lower case (empty where it has
    /// none).
    pub async fn client_version(&self) -> Result<String, RpcSourceError> {
        let version = self
            .retry("web3_clientVersion", None, || {
                self.provider.get_client_version().into_future()
            })
            .await;
        Ok(answered(version)?.unwrap_or_default().to_ascii_lowercase())
    }

    /// The miners of `block`'s uncles.
    async fn uncle_miners(&self, block: &AnyRpcBlock) -> Result<Vec<Address>, RpcSourceError> {
        let n = block.header.number;
        let mut out = Vec::new();
        for i in 0..block.uncles.len() as u64 {
            let uncle = self
                .retry("eth_getUncleByBlockNumberAndIndex", Some(n), || {
                    self.provider.get_uncle(BlockId::number(n), i).into_future()
                })
                .await?;
            out.extend(uncle.map(|u| u.header.beneficiary));
        }
        Ok(out)
    }

    /// The contracts that block `n`'s transactions created (its receipts).
    async fn created_contracts(&self, n: u64) -> Result<Vec<Address>, RpcSourceError> {
        let receipts = self
            .retry("eth_getBlockReceipts", Some(n), || {
                self.provider
                    .get_block_receipts(BlockId::number(n))
                    .into_future()
            })
            .await?
            .unwrap_or_default();
        Ok(receipts.iter().filter_map(|r| r.contract_address).collect())
    }

    /// Block `n`'s parity call traces.
    async fn traces(&self, n: u64) -> Result<Vec<LocalizedTransactionTrace>, RpcSourceError> {
        self.retry("trace_block", Some(n), || {
            self.provider.trace_block(BlockId::number(n))
        })
        .await
    }

    /// Balances, nonces, code hashes and storage roots of `addresses` at
    /// block `at`, each proved against the block's state `root` when given
    /// (which also tells an empty account in the state from a deleted one).
    pub async fn read_accounts(
        &self,
        addresses: &[Address],
        at: u64,
        root: Option<B256>,
    ) -> Result<Vec<AccountRecord>, RpcSourceError> {
        let progress = &self.options.progress;
        let step = Step::ExportAccounts;
        let total = Some(addresses.len() as u64);
        report(progress, ProgressEvent::Begin { step, total });
        let block = BlockId::number(at);
        let chunks: Vec<Vec<Address>> = addresses
            .chunks(self.options.batch_size.max(1))
            .map(<[Address]>::to_vec)
            .collect();
        let results: Result<Vec<Vec<AccountRecord>>, RpcSourceError> =
            stream::iter(chunks.into_iter().map(|chunk| async move {
                let out = self.read_batch(&chunk, block, at, root).await?;
                let by = chunk.len() as u64;
                report(progress, ProgressEvent::Advance { step, by });
                Ok::<_, RpcSourceError>(out)
            }))
            .buffered(self.options.concurrency.max(1))
            .try_collect()
            .await;
        report(progress, ProgressEvent::End { step });
        let results: Vec<Vec<AccountRecord>> = results?;
        Ok(results.into_iter().flatten().collect())
    }

    async fn read_batch(
        &self,
        chunk: &[Address],
        block: BlockId,
        at: u64,
        root: Option<B256>,
    ) -> Result<Vec<AccountRecord>, RpcSourceError> {
        let mut last = String::new();
        for attempt in 0..self.options.attempts.max(1) {
            if attempt > 0 {
                tokio::time::sleep(backoff(attempt)).await;
            }
            let mut batch = self.client.new_batch();
            let mut waiters = Vec::with_capacity(chunk.len());
            for a in chunk {
                let proof = batch
                    .add_call::<_, ProvedAccount>("eth_getProof", &(a, NO_SLOTS, block))
                    .map_err(|e| RpcSourceError::Reply {
                        method: "eth_getProof",
                        message: e.to_string(),
                    })?;
                waiters.push((*a, proof));
            }
            if let Err(e) = batch.send().await {
                last = self.scrub(e.to_string());
                tracing::debug!(attempt, error = %last, "batch failed; retrying");
                continue;
            }
            let mut out = Vec::with_capacity(chunk.len());
            let mut transient = None;
            for (a, proof) in waiters {
                match proof.await {
                    Ok(p) => {
                        out.push(p.record(a, root).map_err(|message| RpcSourceError::Reply {
                            method: "eth_getProof",
                            message,
                        })?)
                    }
                    Err(TransportError::ErrorResp(e)) => {
                        return Err(classify("eth_getProof", Some(at), e.message.to_string()));
                    }
                    Err(e) => transient = Some(self.scrub(e.to_string())),
                }
            }
            match transient {
                None => return Ok(out),
                Some(e) => last = e,
            }
        }
        Err(RpcSourceError::Unreachable {
            url: protocol::url::redact(&self.url),
            attempts: self.options.attempts.max(1),
            last,
        })
    }

    /// The accounts touched in the `window` blocks ending at `at` (the head
    /// when `None`), read at that block.
    pub async fn export_active(
        &self,
        window: u64,
        at: Option<u64>,
    ) -> Result<ExportedState, RpcSourceError> {
        let started = Instant::now();
        let head = self.head().await?;
        let at = at.unwrap_or(head);
        if at > head {
            return Err(RpcSourceError::FutureBlock { block: at, head });
        }
        let from = at.saturating_sub(window.max(1) - 1);
        let addresses: Vec<Address> = self.touched(from, at).await?.into_iter().collect();
        tracing::info!(
            from,
            to = at,
            accounts = addresses.len(),
            "active set collected"
        );
        self.export(
            addresses,
            at,
            SnapshotKind::Active {
                window: window.max(1),
            },
            started,
        )
        .await
    }

    /// `eth_call` of `data` to `to` at block `at`: what the contract
    /// returns.
    pub async fn call(&self, to: Address, data: Bytes, at: u64) -> Result<Bytes, RpcSourceError> {
        let request = CallRequest { to, data };
        let block = BlockId::number(at);
        self.retry("eth_call", Some(at), || {
            self.client
                .request::<_, Bytes>("eth_call", (&request, block))
                .into_future()
        })
        .await
    }

    /// The bytecode size of `address` at block `at` (0: not a contract).
    pub async fn code_size(&self, address: Address, at: u64) -> Result<usize, RpcSourceError> {
        Ok(self.code_at(address, at).await?.len())
    }

    /// The code of `address` at block `at` (empty: not a contract).
    async fn code_at(&self, address: Address, at: u64) -> Result<Bytes, RpcSourceError> {
        self.retry("eth_getCode", Some(at), || {
            self.provider
                .get_code_at(address)
                .block_id(BlockId::number(at))
                .into_future()
        })
        .await
    }

    /// Storage words of `address` at block `at`, one per slot, in batches
    /// of the source's batch size.
    pub async fn storage(
        &self,
        address: Address,
        slots: &[B256],
        at: u64,
    ) -> Result<Vec<B256>, RpcSourceError> {
        let block = BlockId::number(at);
        let mut out = Vec::with_capacity(slots.len());
        for chunk in slots.chunks(self.options.batch_size.max(1)) {
            let words = self
                .retry("eth_getStorageAt", Some(at), || async {
                    let mut batch = self.client.new_batch();
                    let waiters = chunk
                        .iter()
                        .map(|slot| {
                            batch.add_call::<_, B256>("eth_getStorageAt", &(address, slot, block))
                        })
                        .collect::<TransportResult<Vec<_>>>()?;
                    batch.send().await?;
                    let mut words = Vec::with_capacity(waiters.len());
                    for waiter in waiters {
                        words.push(waiter.await?);
                    }
                    Ok(words)
                })
                .await?;
            out.extend(words);
        }
        Ok(out)
    }

    /// The recipients of `token`'s ERC-20 `Transfer` events in blocks
    /// `from..=to`, first seen first, each once.
    pub async fn transfer_recipients(
        &self,
        token: Address,
        from: u64,
        to: u64,
    ) -> Result<Vec<Address>, RpcSourceError> {
        use alloy_sol_types::SolEvent;
        let filter = LogFilter {
            address: token,
            topics: [protocol::tokens::IERC20::Transfer::SIGNATURE_HASH],
            from_block: U64::from(from),
            to_block: U64::from(to),
        };
        let logs = self
            .retry("eth_getLogs", Some(to), || {
                self.client
                    .request::<_, Vec<LogTopics>>("eth_getLogs", (&filter,))
                    .into_future()
            })
            .await?;
        let mut seen = BTreeSet::new();
        Ok(logs
            .iter()
            .filter_map(|log| log.topics.get(2))
            .map(|topic| Address::from_word(*topic))
            .filter(|a| seen.insert(*a))
            .collect())
    }

    /// The words of `slots` at block `at`, as storage records.
    async fn read_slots(
        &self,
        slots: &BTreeMap<Address, BTreeSet<B256>>,
        at: u64,
    ) -> Result<Vec<StorageRecord>, RpcSourceError> {
        let mut out = Vec::new();
        for (contract, written) in slots {
            let written: Vec<B256> = written.iter().copied().collect();
            let words = self.storage(*contract, &written, at).await?;
            out.extend(
                written
                    .iter()
                    .zip(words)
                    .map(|(slot, word)| StorageRecord::new(*contract, *slot, word.into())),
            );
        }
        Ok(out)
    }

    /// The keys each transaction of block `n` read or wrote: every
    /// account and slot of its prestate (the node's `prestateTracer`,
    /// codes left out), one set per transaction, with its sender (the
    /// block's transactions, in order).
    pub async fn touched_keys(&self, n: u64) -> Result<Vec<TxTouched>, RpcSourceError> {
        #[derive(Debug, serde::Deserialize)]
        struct TxPrestate {
            // (A transaction the tracer failed on carries an error and no
            // result: it counts as touching nothing.)
            #[serde(default)]
            result: BTreeMap<Address, PrestateAccount>,
        }
        #[derive(Debug, serde::Deserialize)]
        struct PrestateAccount {
            #[serde(default)]
            storage: BTreeMap<B256, serde_json::Value>,
        }
        let config =
            serde_json::json!({"tracer": "prestateTracer", "tracerConfig": {"disableCode": true}});
        let traces: Vec<TxPrestate> = self
            .retry("debug_traceBlockByNumber", Some(n), || {
                self.provider.raw_request(
                    "debug_traceBlockByNumber".into(),
                    (U64::from(n), config.clone()),
                )
            })
            .await?;
        let block = self.block(n, true).await?;
        let senders: Vec<Address> = block.transactions.txns().map(|tx| tx.from()).collect();
        if senders.len() != traces.len() {
            return Err(RpcSourceError::Reply {
                method: "debug_traceBlockByNumber",
                message: format!(
                    "{} traces for block {n}'s {} transactions",
                    traces.len(),
                    senders.len()
                ),
            });
        }
        Ok(senders
            .into_iter()
            .zip(traces)
            .map(|(sender, tx)| {
                let touched = tx
                    .result
                    .into_iter()
                    .map(|(address, account)| (address, account.storage.into_keys().collect()))
                    .collect();
                (sender, touched)
            })
            .collect())
    }

    /// Whether the node answers `trace_block` (asked on its head block).
    pub async fn has_traces(&self) -> Result<bool, RpcSourceError> {
        let head = self.head().await?;
        Ok(answered(self.traces(head).await)?.is_some())
    }

    /// A delta: every account touched in blocks `(from, to]`, and every
    /// slot of the `listed` contracts written in them, read at `to`
    /// (accounts emptied or destroyed read as 0/0, cleared slots as 0).
    /// The block's hash is read before and after, so that a reorg in
    /// between is caught rather than mixing two chains.
    pub async fn export_delta(
        &self,
        from: u64,
        to: u64,
        listed: &PrivateStorage,
    ) -> Result<NodeDelta, RpcSourceError> {
        let started = Instant::now();
        let (parent, _, _) = self.block_header(from).await?;
        let (hash, _, _) = self.block_header(to).await?;
        let Changed { accounts, written } = self.changed(listed, from + 1, to).await?;
        let addresses: Vec<Address> = accounts.into_iter().collect();
        tracing::debug!(
            from,
            to,
            accounts = addresses.len(),
            contracts = written.slots.len(),
            destroyed = written.destroyed.len(),
            "changed accounts and slots collected"
        );
        let mut state = self
            .export(addresses, to, SnapshotKind::Delta { from }, started)
            .await?;
        state.storage = self.read_slots(&written.slots, to).await?;
        state.listed = listed.clone();
        if self.block_header(to).await?.0 != hash || state.block_hash != Some(hash) {
            return Err(RpcSourceError::Reorged { block: to });
        }
        // The blocks read stand on `parent` (its hash unchanged over the
        // read, as `to`'s): the level below must be of that hash.
        if self.block_header(from).await?.0 != parent {
            return Err(RpcSourceError::Reorged { block: from });
        }
        state.parent_hash = Some(parent);
        Ok(NodeDelta {
            state,
            destroyed: written.destroyed.into_iter().collect(),
        })
    }

    /// Chosen accounts at an older block (an archive node keeps them).
    pub async fn export_historical(
        &self,
        addresses: Vec<Address>,
        at: u64,
    ) -> Result<ExportedState, RpcSourceError> {
        let head = self.head().await?;
        if at > head {
            return Err(RpcSourceError::FutureBlock { block: at, head });
        }
        self.export(addresses, at, SnapshotKind::Historical, Instant::now())
            .await
    }

    async fn export(
        &self,
        mut addresses: Vec<Address>,
        at: u64,
        kind: SnapshotKind,
        started: Instant,
    ) -> Result<ExportedState, RpcSourceError> {
        addresses.sort_unstable();
        addresses.dedup();
        let (hash, root, time) = self.block_header(at).await?;
        let records = self.read_accounts(&addresses, at, Some(root)).await?;
        let codes = self.read_codes(&records, at).await?;
        if self.block_header(at).await?.0 != hash {
            return Err(RpcSourceError::Reorged { block: at });
        }
        let export_s = started.elapsed().as_secs_f64();
        tracing::info!(
            block = at,
            accounts = records.len(),
            export_s,
            rate = records.len() as f64 / export_s.max(1e-9),
            "exported over JSON-RPC"
        );
        Ok(ExportedState {
            chain_id: self.chain_id,
            block_number: at,
            block_hash: Some(hash),
            state_root: Some(root),
            block_time: Some(time),
            parent_hash: None,
            kind,
            source: format!("rpc:{}", protocol::url::redact(&self.url)),
            records,
            storage: Vec::new(),
            listed: Default::default(),
            export_s,
            codes,
        })
    }
}

/// A delta as the node gives it. A destroyed contract's storage is gone
/// at once, but the state diff lists only the slots its last transaction
/// touched: its other slots, still in the levels below, must be hidden by
/// zero records, which only the holder of those levels can list
/// ([`crate::follow`] does it from its store).
#[derive(Debug)]
pub struct NodeDelta {
    pub state: ExportedState,
    pub destroyed: Vec<Address>,
}

/// A transaction's sender, and every account it read or wrote with the
/// slots of it (its prestate).
pub type TxTouched = (Address, BTreeMap<Address, BTreeSet<B256>>);

/// What block `block`'s system calls write, by its header's fields.
fn system_calls_of(block: &AnyRpcBlock) -> SystemCalls {
    SystemCalls {
        number: block.header.number,
        timestamp: block.header.timestamp,
        beacon_root: block.header.parent_beacon_block_root.is_some(),
        requests: block.header.requests_hash.is_some(),
    }
}

/// Who block `block` names: its fee recipient, its transactions' senders
/// and recipients, its withdrawals' recipients.
fn block_participants(block: &AnyRpcBlock) -> Vec<Address> {
    let mut out = vec![block.header.beneficiary];
    for tx in block.transactions.txns() {
        out.push(tx.from());
        out.extend(tx.to());
    }
    let withdrawals = block.withdrawals.iter().flat_map(|w| w.iter());
    out.extend(withdrawals.map(|w| w.address));
    out
}

/// `eth_call`'s transaction object: the two fields a read needs (`data`,
/// which every node reads; newer ones also take `input`).
#[derive(Clone, Debug, serde::Serialize)]
struct CallRequest {
    to: Address,
    data: Bytes,
}

/// `eth_getLogs`'s filter: one contract, one event.
#[derive(Clone, Debug, serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct LogFilter {
    address: Address,
    topics: [B256; 1],
    from_block: U64,
    to_block: U64,
}

/// The part of a log that `transfer_recipients` reads.
#[derive(Debug, serde::Deserialize)]
struct LogTopics {
    topics: Vec<B256>,
}

/// Who a call trace names: callers and callees, creators and what they
/// created, self-destructed contracts and their beneficiaries, reward
/// recipients (uncles' included).
/// What call traces say of contracts' lifetimes: (block, contract).
#[derive(Debug, Default)]
struct Lifetimes {
    destructs: Vec<(u64, Address)>,
    created: BTreeSet<(u64, Address)>,
    /// What each block's system calls write (not in the traces).
    blocks: Vec<SystemCalls>,
}

impl Lifetimes {
    /// Block `n`'s traces.
    fn add(&mut self, n: u64, traces: &[LocalizedTransactionTrace]) {
        for t in traces {
            if let Action::Selfdestruct(d) = &t.trace.action {
                self.destructs.push((n, d.address));
            }
            if let Some(TraceOutput::Create(created)) = &t.trace.result {
                self.created.insert((n, created.address));
            }
        }
    }
}

fn trace_participants(trace: &LocalizedTransactionTrace) -> Vec<Address> {
    let mut out = match &trace.trace.action {
        Action::Call(call) => vec![call.from, call.to],
        Action::Create(create) => vec![create.from],
        Action::Selfdestruct(destruct) => vec![destruct.address, destruct.refund_address],
        Action::Reward(reward) => vec![reward.author],
    };
    if let Some(TraceOutput::Create(created)) = &trace.trace.result {
        out.push(created.address);
    }
    out
}

/// What the node answered, or `None` where it has no such answer (its
/// own error, or a reply of another shape: a method it lacks); a
/// transport failure stays an error.
pub(super) fn answered<T>(result: Result<T, RpcSourceError>) -> Result<Option<T>, RpcSourceError> {
    match result {
        Ok(v) => Ok(Some(v)),
        Err(RpcSourceError::Node { .. } | RpcSourceError::Reply { .. }) => Ok(None),
        Err(e) => Err(e),
    }
}

fn classify(method: &'static str, block: Option<u64>, message: String) -> RpcSourceError {
    match block {
        Some(block) if is_pruned(&message) => RpcSourceError::Pruned { block, message },
        _ => RpcSourceError::Node { method, message },
    }
}

/// Wait before retry `attempt` of a request: 200 ms doubling, at most 10 s.
fn backoff(attempt: u32) -> Duration {
    protocol::retry::backoff(Duration::from_millis(200), Duration::from_secs(10), attempt)
}

/// Reads an address list: one 0x address per line; `#` comments.
pub fn read_address_file(path: &std::path::Path) -> anyhow::Result<Vec<Address>> {
    let text =
        std::fs::read_to_string(path).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    text.lines()
        .enumerate()
        .map(|(i, l)| (i, l.split('#').next().unwrap_or("").trim()))
        .filter(|(_, l)| !l.is_empty())
        .map(|(i, l)| {
            l.parse::<Address>().map_err(|e| {
                anyhow::anyhow!("{}:{}: '{l}' is not an address: {e}", path.display(), i + 1)
            })
        })
        .collect()
}
