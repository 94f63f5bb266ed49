//! `refresh-bench`: what a wallet's balance refresh costs, first and then
//! every few blocks, through the proxy's own executor on loopback
//! (snapshotter levels, PIR server, private reader, the call run in revm
//! over privately read state). Prints one JSON line.
//!
//! The chain: a random base of 2^N accounts, `--tokens` listed tokens
//! (each a contract with a plain balances mapping at slot 0, and code that
//! reads it), Multicall3 (its deployed code, `data/multicall3-runtime.hex`);
//! every block changes `--changes-per-block` accounts and as many token
//! balances (the wallet's among them, now and then), published as a delta
//! at once. The wallet: `--wallet-accounts` accounts, each refreshed as
//! MetaMask does (one `aggregate3` of `balanceOf` on every token and
//! Multicall3's `getEthBalance`), every `--refresh-every` blocks at the
//! newest view's block, each answer checked against the simulated chain.
#![forbid(unsafe_code)]

use std::collections::HashMap;
use std::time::{Duration, Instant};

use alloy_primitives::{Address, Bytes, B256, U256};
use alloy_sol_types::SolCall;
use anyhow::{bail, Context, Result};
use clap::Parser;
use ethpir_client::{BlockSelector, PrivateReader};
use protocol::storage::{PrivateStorage, StorageRecord};
use protocol::tokens::{
    Getter, IMulticall3, MappingLayout, SlotIndex, TokenEntry, IERC20, MULTICALL3,
};
use proxy::calls::Answerable;
use proxy::execute::{Executed, Executor};
use rand::{Rng, SeedableRng};
use serde_json::json;
use snapshotter::levels::{LevelPolicy, Levels};
use snapshotter::pipeline::ExportedState;
use snapshotter::settings::BuildSettings;
use snapshotter::{AccountRecord, SnapshotKind, SnapshotStore};
use system_bench::{cpu_model, percentile, serve_and_read, served, splitmix};

#[derive(Parser)]
#[command(
    name = "refresh-bench",
    about = "A wallet's balance refresh (MetaMask's aggregate3) through the proxy's executor on loopback: bytes, PIR requests and time of the first refresh and of the steady state (JSON)",
    long_about = "A wallet's balance refresh through the proxy's own executor (Multicall3's code run in revm over privately read state) on loopback.\n\n\
A random base of 2^N accounts with --tokens listed tokens is built as a full snapshot; every block \
then changes --changes-per-block accounts and token balances and is published as a delta. Every \
--refresh-every blocks the wallet refreshes its accounts as MetaMask does (one aggregate3 of \
balanceOf on every token and getEthBalance per account), each answer checked. Prints one JSON \
line: the first refresh's PIR bytes, requests, rounds and time, the steady state's, and wrong answers.\n\n\
Example: cargo run --release --bin refresh-bench -- --log2-accounts 24 --blocks 40"
)]
struct Args {
    /// log2 of the number of accounts in the base.
    #[arg(long, default_value_t = 24)]
    log2_accounts: u32,
    /// Listed tokens, each refreshed for every wallet account.
    #[arg(long, default_value_t = 20)]
    tokens: usize,
    /// Holders of each token in the base, besides the wallet.
    #[arg(long, default_value_t = 4096)]
    holders_per_token: usize,
    /// The wallet's accounts.
    #[arg(long, default_value_t = 3)]
    wallet_accounts: usize,
    /// Accounts changed per block (as many token balances too).
    #[arg(long, default_value_t = 2500)]
    changes_per_block: usize,
    /// Chance per block that one of the wallet's balances (ETH or a token)
    /// changes.
    #[arg(long, default_value_t = 0.3)]
    wallet_churn: f64,
    /// Blocks simulated after the base.
    #[arg(long, default_value_t = 40)]
    blocks: u64,
    /// Blocks between refreshes.
    #[arg(long, default_value_t = 4)]
    refresh_every: u64,
    /// Simulated block time, ms.
    #[arg(long, default_value_t = 1000)]
    block_time_ms: u64,
    /// Working directory (the store and the reader's cache; emptied first).
    #[arg(long, default_value = "./refresh-bench-data")]
    dir: std::path::PathBuf,
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

const CHAIN_ID: u64 = 1;

/// A token's code: `balanceOf(holder)` (any selector) returns the word at
/// the holder's place in the mapping at slot 0.
const TOKEN_CODE: [u8; 20] = [
    0x60, 0x04, 0x35, // PUSH1 4 CALLDATALOAD: the holder
    0x5f, 0x52, // PUSH0 MSTORE
    0x5f, 0x60, 0x20, 0x52, // slot 0 after it
    0x60, 0x40, 0x5f, 0x20, // KECCAK256 of the 64 bytes
    0x54, 0x5f, 0x52, // SLOAD, stored at 0
    0x60, 0x20, 0x5f, 0xf3, // RETURN 32 bytes
];

/// Multicall3's deployed code (viem's creation code run on anvil).
fn multicall3_code() -> Bytes {
    let hex = include_str!("../../data/multicall3-runtime.hex");
    hex.trim().parse().expect("hex code")
}

fn token(t: usize) -> TokenEntry {
    let mut address = [0x70u8; 20];
    address[18..].copy_from_slice(&(t as u16).to_be_bytes());
    TokenEntry {
        chain_id: CHAIN_ID,
        address: Address::from(address),
        symbol: format!("T{t}"),
        function: Getter::balance_of(),
        balance_slot: SlotIndex::Position(0),
        layout: MappingLayout::Solidity,
        source: "refresh-bench".into(),
    }
}

/// The simulated chain: every account's and token balance's value now
/// and its changes since the base (block, value), newest last.
struct Chain {
    tokens: Vec<TokenEntry>,
    wallet: Vec<Address>,
    accounts: HashMap<Address, Vec<(u64, U256, u64)>>,
    balances: HashMap<(usize, Address), Vec<(u64, U256)>>,
    /// Every address of the base, for picking changes.
    addresses: Vec<Address>,
}

impl Chain {
    /// The base: 2^N random accounts (the wallet's first), the token and
    /// Multicall3 contract accounts, each token's holders.
    fn new(args: &Args) -> Self {
        let n = 1usize << args.log2_accounts;
        let address = |i: usize| {
            let a = splitmix(args.seed ^ (i as u64) << 1);
            let (b, c) = (splitmix(a), splitmix(splitmix(a)));
            let mut bytes = [0u8; 20];
            bytes[..8].copy_from_slice(&a.to_le_bytes());
            bytes[8..16].copy_from_slice(&b.to_le_bytes());
            bytes[16..].copy_from_slice(&c.to_le_bytes()[..4]);
            Address::from(bytes)
        };
        let addresses: Vec<Address> = (0..n).map(address).collect();
        let tokens: Vec<TokenEntry> = (0..args.tokens).map(token).collect();
        let mut accounts: HashMap<Address, Vec<(u64, U256, u64)>> = addresses
            .iter()
            .enumerate()
            .map(|(i, a)| {
                let r = splitmix(args.seed.wrapping_add(0x5eed) ^ i as u64);
                (*a, vec![(0, U256::from(r >> 4), r % 1000)])
            })
            .collect();
        for c in tokens.iter().map(|t| t.address).chain([MULTICALL3]) {
            accounts.insert(c, vec![(0, U256::ZERO, 1)]);
        }
        // The caller (no `from`: the zero address) exists too.
        accounts.insert(Address::ZERO, vec![(0, U256::from(1u8), 0)]);
        let wallet = addresses[..args.wallet_accounts].to_vec();
        let mut balances = HashMap::new();
        for t in 0..tokens.len() {
            let holders = wallet.iter().copied().chain(
                (0..args.holders_per_token)
                    .map(|k| addresses[splitmix(k as u64 ^ t as u64) as usize % n]),
            );
            for (k, holder) in holders.enumerate() {
                let word = U256::from(splitmix((t * 1_000_003 + k) as u64) >> 8);
                balances.insert((t, holder), vec![(0, word)]);
            }
        }
        Chain {
            tokens,
            wallet,
            accounts,
            balances,
            addresses,
        }
    }

    fn listed(&self) -> PrivateStorage {
        PrivateStorage {
            tokens: self.tokens.clone(),
            ..Default::default()
        }
    }

    fn account_record(&self, a: &Address, history: &[(u64, U256, u64)]) -> AccountRecord {
        let &(_, balance, nonce) = history.last().expect("a value");
        let record = AccountRecord::new(*a, balance, nonce);
        let code = match self.code_of(a) {
            Some(code) => alloy_primitives::keccak256(code),
            None => return record,
        };
        record.with_trie(code, B256::ZERO)
    }

    /// The code of a contract of the chain.
    fn code_of(&self, a: &Address) -> Option<Bytes> {
        if *a == MULTICALL3 {
            return Some(multicall3_code());
        }
        self.tokens
            .iter()
            .any(|t| t.address == *a)
            .then(|| Bytes::from(TOKEN_CODE.to_vec()))
    }

    fn slot_record(&self, t: usize, holder: &Address, word: U256) -> StorageRecord {
        let entry = &self.tokens[t];
        StorageRecord::new(entry.address, entry.balance_slot_of(holder), word)
    }

    fn base(&self) -> ExportedState {
        let records = self
            .accounts
            .iter()
            .map(|(a, h)| self.account_record(a, h))
            .collect();
        let storage = self
            .balances
            .iter()
            .map(|((t, holder), h)| self.slot_record(*t, holder, h[0].1))
            .collect();
        let mut base = state(0, SnapshotKind::Full, records, storage, self.listed());
        base.codes = vec![multicall3_code(), Bytes::from(TOKEN_CODE.to_vec())];
        base
    }

    /// The changes of `block`, recorded; its delta.
    fn next_block(&mut self, block: u64, args: &Args, rng: &mut impl Rng) -> ExportedState {
        let mut accounts: Vec<Address> = (0..args.changes_per_block)
            .map(|_| self.addresses[rng.random_range(0..self.addresses.len())])
            .collect();
        let mut slots: Vec<(usize, Address)> = (0..args.changes_per_block)
            .map(|_| {
                let holder = self.addresses[rng.random_range(0..self.addresses.len())];
                (rng.random_range(0..self.tokens.len()), holder)
            })
            .collect();
        if rng.random_bool(args.wallet_churn) {
            let holder = self.wallet[rng.random_range(0..self.wallet.len())];
            match rng.random_bool(0.5) {
                true => accounts.push(holder),
                false => slots.push((rng.random_range(0..self.tokens.len()), holder)),
            }
        }
        let mut records = HashMap::new();
        for a in accounts {
            let history = self.accounts.entry(a).or_default();
            let (balance, nonce) = history.last().map_or((U256::ZERO, 0), |v| (v.1, v.2));
            let next = (
                balance / U256::from(2u8) + U256::from(rng.random::<u32>()),
                nonce + 1,
            );
            history.retain(|v| v.0 != block);
            history.push((block, next.0, next.1));
            records.insert(a, self.account_record(&a, &[(block, next.0, next.1)]));
        }
        let mut storage = HashMap::new();
        for (t, holder) in slots {
            let word = U256::from(rng.random::<u64>() >> 4);
            let history = self.balances.entry((t, holder)).or_default();
            history.retain(|v| v.0 != block);
            history.push((block, word));
            storage.insert((t, holder), self.slot_record(t, &holder, word));
        }
        let kind = SnapshotKind::Delta { from: block - 1 };
        let (records, storage) = (
            records.into_values().collect(),
            storage.into_values().collect(),
        );
        state(block, kind, records, storage, self.listed())
    }

    fn eth_at(&self, a: &Address, block: u64) -> U256 {
        let history = self.accounts.get(a).map(Vec::as_slice).unwrap_or_default();
        history
            .iter()
            .rev()
            .find(|v| v.0 <= block)
            .map_or(U256::ZERO, |v| v.1)
    }

    fn token_at(&self, t: usize, holder: &Address, block: u64) -> U256 {
        let history = self
            .balances
            .get(&(t, *holder))
            .map(Vec::as_slice)
            .unwrap_or_default();
        history
            .iter()
            .rev()
            .find(|v| v.0 <= block)
            .map_or(U256::ZERO, |v| v.1)
    }

    /// MetaMask's refresh of the wallet: per account, `balanceOf` on every
    /// token, then Multicall3's `getEthBalance`; and the answers the
    /// chain gives at `block`, in that order.
    fn refresh(&self, block: u64) -> (Bytes, Vec<U256>) {
        let mut calls = Vec::new();
        let mut want = Vec::new();
        for holder in &self.wallet {
            for (t, entry) in self.tokens.iter().enumerate() {
                calls.push(IMulticall3::Call3 {
                    target: entry.address,
                    allowFailure: true,
                    callData: IERC20::balanceOfCall { holder: *holder }
                        .abi_encode()
                        .into(),
                });
                want.push(self.token_at(t, holder, block));
            }
            calls.push(IMulticall3::Call3 {
                target: MULTICALL3,
                allowFailure: true,
                callData: IMulticall3::getEthBalanceCall { addr: *holder }
                    .abi_encode()
                    .into(),
            });
            want.push(self.eth_at(holder, block));
        }
        let data = IMulticall3::aggregate3Call { calls }.abi_encode();
        (data.into(), want)
    }
}

fn state(
    block: u64,
    kind: SnapshotKind,
    records: Vec<AccountRecord>,
    storage: Vec<StorageRecord>,
    listed: PrivateStorage,
) -> ExportedState {
    ExportedState {
        chain_id: CHAIN_ID,
        block_number: block,
        block_hash: None,
        state_root: None,
        block_time: Some(1_700_000_000 + block * 12),
        parent_hash: None,
        kind,
        source: "refresh-bench".into(),
        storage,
        listed,
        records,
        export_s: 0.0,
        codes: Vec::new(),
    }
}

/// One refresh: PIR bytes (up, down), requests, milliseconds, the
/// executor's rounds and the keys it read.
struct Refresh {
    up: u64,
    down: u64,
    requests: u64,
    ms: f64,
    /// Of `ms`, in the EVM (every round).
    evm_ms: f64,
    rounds: usize,
    keys: usize,
}

/// Refreshes the wallet at the newest view as the proxy answers the call
/// (the rules' first keys, the executor's rounds); checks every balance.
async fn refresh(
    reader: &std::sync::Arc<PrivateReader>,
    chain: &Chain,
    wrong: &mut Vec<String>,
) -> Result<Refresh> {
    let block = reader.newest_view().context("no view")?.block;
    let (data, want) = chain.refresh(block);
    let params = serde_json::value::to_raw_value(
        &json!([{"to": MULTICALL3, "data": data}, format!("{block:#x}")]),
    )?;
    let answerable = |sel: &BlockSelector| {
        Some(Answerable {
            storage: reader.private_storage(sel)?,
            balance_checker: None,
        })
    };
    let first = proxy::storage::plan("eth_call", Some(&params), answerable)
        .map(|read| read.keys)
        .unwrap_or_default();
    let (args, sel) = proxy::execute::call_of(Some(&params), 2)
        .context("not a call")?
        .map_err(|e| anyhow::anyhow!("{}", e.message))?;
    let executor = Executor::from_config(reader.clone(), None, &Default::default());
    let held = reader.private_storage(&sel).context("no view")?;
    let (up0, down0) = reader.lookup_traffic();
    let requests0 = reader.lookup_requests();
    let started = Instant::now();
    let done = match executor
        .execute(&args, &sel, held, first, Vec::new())
        .await?
    {
        Executed::Answered(done) => done,
        Executed::NotPrivate(why) => bail!("not answered privately: {why}"),
    };
    let ms = started.elapsed().as_secs_f64() * 1e3;
    let (up, down) = reader.lookup_traffic();
    let requests = reader.lookup_requests() - requests0;
    let bytes = proxy::execute::node_answer(&done.result)
        .map_err(|e| anyhow::anyhow!("the call failed: {}", e.message()))?;
    let results = IMulticall3::aggregate3Call::abi_decode_returns(&bytes)?;
    for (i, (r, w)) in results.iter().zip(&want).enumerate() {
        let got = U256::from_be_slice(&r.returnData);
        if !r.success || got != *w {
            wrong.push(format!("call {i} at block {block}: {got} vs {w}"));
        }
    }
    if results.len() != want.len() {
        bail!("{} results for {} calls", results.len(), want.len());
    }
    Ok(Refresh {
        up: up - up0,
        down: down - down0,
        requests,
        ms,
        evm_ms: done.evm_time.as_secs_f64() * 1e3,
        rounds: done.rounds,
        keys: done.keys,
    })
}

/// The store, the levels, the server and an always-on reader over the
/// base: the reader and the levels to publish deltas with.
async fn start(
    args: &Args,
    chain: &Chain,
) -> Result<(std::sync::Arc<PrivateReader>, std::sync::Arc<Levels>, f64)> {
    let _ = std::fs::remove_dir_all(&args.dir);
    let store_dir = args.dir.join("store");
    let store = SnapshotStore::open(&store_dir)?;
    let policy = LevelPolicy::default();
    let levels = std::sync::Arc::new(Levels::new(
        store,
        CHAIN_ID,
        policy,
        BuildSettings::default().options(None)?,
    ));
    eprintln!("building the base of 2^{} accounts...", args.log2_accounts);
    let t = Instant::now();
    let l = levels.clone();
    let base = chain.base();
    tokio::task::spawn_blocking(move || l.publish(base)).await??;
    let base_build_s = t.elapsed().as_secs_f64();
    let (_, reader) = serve_and_read(store_dir, args.dir.join("cache")).await?;
    Ok((reader, levels, base_build_s))
}

/// The chain's blocks published one by one, each served before the next,
/// the wallet refreshed every `--refresh-every` blocks: those refreshes.
async fn follow_and_refresh(
    args: &Args,
    chain: &mut Chain,
    reader: &std::sync::Arc<PrivateReader>,
    levels: &std::sync::Arc<Levels>,
    wrong: &mut Vec<String>,
) -> Result<Vec<Refresh>> {
    let mut steady = Vec::new();
    let mut rng = rand::rngs::StdRng::seed_from_u64(args.seed);
    let block_time = Duration::from_millis(args.block_time_ms);
    for block in 1..=args.blocks {
        let next = Instant::now() + block_time;
        let delta = chain.next_block(block, args, &mut rng);
        let l = levels.clone();
        tokio::task::spawn_blocking(move || l.publish(delta)).await??;
        if served(reader, block, Duration::from_secs(30))
            .await
            .is_none()
        {
            bail!("block {block} not served within 30 s");
        }
        if block % args.refresh_every.max(1) == 0 {
            steady.push(refresh(reader, chain, wrong).await?);
        }
        tokio::time::sleep_until(next.into()).await;
    }
    Ok(steady)
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    protocol::logging::init(&std::env::var("ETHPIR_LOG").unwrap_or_else(|_| "warn".into()))?;
    let kernel = pir_core::kernel::init_from_env().context(pir_core::kernel::KERNEL_ENV)?;
    let mut chain = Chain::new(&args);
    let (reader, levels, base_build_s) = start(&args, &chain).await?;
    let mut wrong = Vec::new();
    let first = refresh(&reader, &chain, &mut wrong).await?;
    let steady = follow_and_refresh(&args, &mut chain, &reader, &levels, &mut wrong).await?;
    let steady_bytes: Vec<f64> = steady.iter().map(|r| (r.up + r.down) as f64).collect();
    let steady_requests: Vec<f64> = steady.iter().map(|r| r.requests as f64).collect();
    let steady_rounds: Vec<f64> = steady.iter().map(|r| r.rounds as f64).collect();
    let mut steady_ms: Vec<f64> = steady.iter().map(|r| r.ms).collect();
    steady_ms.sort_by(f64::total_cmp);
    let first_bytes = (first.up + first.down) as f64;
    let mean = steady_bytes.iter().sum::<f64>() / steady_bytes.len().max(1) as f64;
    let out = json!({
        "bench": "refresh-bench",
        "log2_accounts": args.log2_accounts,
        "tokens": args.tokens,
        "wallet_accounts": args.wallet_accounts,
        "changes_per_block": args.changes_per_block,
        "wallet_churn": args.wallet_churn,
        "blocks": args.blocks,
        "refresh_every": args.refresh_every,
        "base_build_s": base_build_s,
        "balances_per_refresh": args.wallet_accounts * (args.tokens + 1),
        "keys_per_refresh": first.keys,
        "first_refresh_bytes_up": first.up,
        "first_refresh_bytes_down": first.down,
        "first_refresh_ms": first.ms,
        "first_refresh_requests": first.requests,
        "first_refresh_rounds": first.rounds,
        "first_refresh_evm_ms": first.evm_ms,
        "steady_evm_ms_max": steady.iter().map(|r| r.evm_ms).fold(0.0, f64::max),
        "steady_requests_max": steady_requests.iter().cloned().fold(0.0, f64::max),
        "steady_rounds_max": steady_rounds.iter().cloned().fold(0.0, f64::max),
        "steady_refreshes": steady.len(),
        "steady_bytes_mean": mean,
        "steady_bytes_max": steady_bytes.iter().cloned().fold(0.0, f64::max),
        "steady_over_first": mean / first_bytes.max(1.0),
        "steady_ms_p50": percentile(&steady_ms, 0.5),
        "steady_ms_max": percentile(&steady_ms, 1.0),
        "wrong_answers": wrong.len(),
        "kernel": kernel.name(),
        "cpu_model": cpu_model(),
        "cores": std::thread::available_parallelism().map_or(1, |n| n.get()),
    });
    for w in wrong.iter().take(5) {
        eprintln!("wrong: {w}");
    }
    println!("{out}");
    Ok(())
}
