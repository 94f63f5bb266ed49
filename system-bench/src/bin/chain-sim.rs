//! `chain-sim`: a synthetic chain driven through the real snapshotter
//! levels (delta builds, merges, retention), PIR server and private reader on
//! loopback. Prints one JSON line.
//!
//! The chain: a random base of 2^N accounts; every block changes
//! `--changes-per-block` accounts, 80% existing ones (skewed towards a hot
//! set, as real activity is) and 20% new, a few emptied to 0/0. Each block
//! is published as a delta the moment it is "seen"; lookups run
//! concurrently at random times (a Poisson process), each checked against
//! the simulator's own state at the block the proxy answered from.
//!
//! With `--hot-share F --hot-accounts N`, a share F of the changes land
//! on a hot set of N accounts (and holders) and the rest uniformly, as a
//! model of mainnet's skew. With `--idle-blocks N`, no lookups run: a
//! wallet reads once, a proxy goes idle for N blocks beside an always-on
//! one, and the wallet reads again (what idle and catching up cost).
//!
//! With `--log2-slots S`, a listed token's balances are in the snapshots
//! too: 2^S holders in the base, `--slot-changes-per-block` balance slots
//! changed per block, and half the lookups are a wallet's 20-balance view
//! (20 slots read in one request, as the proxy reads one `aggregate3`).
#![forbid(unsafe_code)]

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use alloy_primitives::{Address, U256};
use anyhow::{Context, Result};
use clap::Parser;
use ethpir_client::{BlockSelector, PrivateReader};
use protocol::storage::{PrivateStorage, StorageRecord};
use protocol::tokens::{MappingLayout, SlotIndex, TokenEntry};
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};
use snapshotter::levels::{LevelPolicy, Levels};
use snapshotter::pipeline::ExportedState;
use snapshotter::settings::BuildSettings;
use snapshotter::{AccountRecord, SnapshotKind, SnapshotStore};
use system_bench::{cpu_model, read_from, serve_and_read, served, splitmix};

#[derive(Parser, Clone)]
#[command(
    name = "chain-sim",
    about = "A synthetic chain through the real snapshotter, PIR server and proxy: freshness, bytes, CPU, wrong answers (JSON)",
    long_about = "A synthetic chain through the real snapshotter levels, PIR server and private reader on loopback.\n\n\
A random base of 2^N accounts is built as a full snapshot; then every block changes \
--changes-per-block accounts (80% existing, skewed to a hot set, 20% new, some emptied) and is \
published as a delta at once, merged and retired as the follower does. Lookups run concurrently \
at random times and are checked against the simulated state. Prints one JSON line: lag behind the \
head, bytes per lookup, background bytes, server CPU per block, answer time, wrong answers.\n\n\
Example: cargo run --release --bin chain-sim -- --log2-accounts 24 --changes-per-block 2500 --blocks 300"
)]
struct Args {
    /// log2 of the number of accounts in the base.
    #[arg(long, default_value_t = 24)]
    log2_accounts: u32,
    /// Accounts changed per block.
    #[arg(long, default_value_t = 2500)]
    changes_per_block: usize,
    /// Blocks simulated after the base.
    #[arg(long, default_value_t = 300)]
    blocks: u64,
    /// Simulated block time, ms (mainnet: 12000; shorter compresses the run,
    /// which only makes the targets harder).
    #[arg(long, default_value_t = 3000)]
    block_time_ms: u64,
    /// Lookups per block, on average (at random times).
    #[arg(long, default_value_t = 2.0)]
    lookups_per_block: f64,
    /// Deltas merged at a time.
    #[arg(long, default_value_t = 8)]
    fanout: u64,
    /// Blocks whose views are kept.
    #[arg(long, default_value_t = 64)]
    keep_blocks: u64,
    /// Working directory (the store and the proxy's cache; emptied first).
    #[arg(long, default_value = "./chain-sim-data")]
    dir: std::path::PathBuf,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// log2 of the token's holders in the base (0: no token slots).
    #[arg(long, default_value_t = 0)]
    log2_slots: u32,
    /// Token balance slots changed per block.
    #[arg(long, default_value_t = 0)]
    slot_changes_per_block: usize,
    /// Share of the changes that go to a hot set (mainnet's routers,
    /// exchange wallets, fee recipients, a big token's busiest holders),
    /// the rest uniform over the base (and new accounts). Unset: the
    /// older skew (an account's index drawn as N * u^3).
    #[arg(long, value_parser = share)]
    hot_share: Option<f64>,
    /// Accounts in the hot set: the base's first N (with a token, its
    /// first N holders' balance slots too).
    #[arg(long, default_value_t = 5000)]
    hot_accounts: usize,
    /// An idle span: the wallet reads its keys once, then nothing for
    /// this many blocks (no other lookups run), then every key again.
    /// Measures what an idle proxy downloads and what catching up costs,
    /// beside an always-on proxy over the same span (`--blocks` is not
    /// used then). 0: lookups all along.
    #[arg(long, default_value_t = 0)]
    idle_blocks: u64,
    /// The idle proxy's `idle_secs` in an --idle-blocks run.
    #[arg(long, default_value_t = 10)]
    idle_secs: u64,
}

/// A share in 0..=1.
fn share(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(f) if (0.0..=1.0).contains(&f) => Ok(f),
        _ => Err(format!("{s:?} is not a share between 0 and 1")),
    }
}

/// Accounts a wallet reads in an --idle-blocks run (with a token, also
/// one view of `TOKEN_VIEW` balances).
const WALLET_ACCOUNTS: usize = 3;

/// Balances a wallet's token view reads at once (one `aggregate3`).
const TOKEN_VIEW: usize = 20;

/// The simulated token: a plain balances mapping at slot 0.
fn token_entry() -> TokenEntry {
    TokenEntry {
        chain_id: CHAIN_ID,
        address: Address::repeat_byte(0x70),
        symbol: "SIM".into(),
        function: Default::default(),
        balance_slot: SlotIndex::Position(0),
        layout: MappingLayout::Solidity,
        source: "chain-sim".into(),
    }
}

fn listed(with_token: bool) -> PrivateStorage {
    PrivateStorage {
        tokens: with_token.then(token_entry).into_iter().collect(),
        ..Default::default()
    }
}

const CHAIN_ID: u64 = 1;

/// The simulated chain: the base (derived from the index, so 2^24 accounts
/// need no table) and every change since, per address.
struct Chain {
    seed: u64,
    base_len: usize,
    /// Changes per address: (block, balance, nonce), oldest first.
    history: HashMap<Address, Vec<(u64, U256, u64)>>,
    /// Addresses created after the base (targets of later changes).
    created: Vec<Address>,
    /// Token holders in the base: accounts 0..slot_base_len.
    slot_base_len: usize,
    /// Token balance changes per holder (account index): (block, word).
    slot_history: HashMap<usize, Vec<(u64, U256)>>,
    /// `--hot-share` and the hot set's size.
    hot: Option<(f64, usize)>,
}

impl Chain {
    fn base_address(&self, i: usize) -> Address {
        let a = splitmix(self.seed ^ (i as u64) << 1);
        let b = splitmix(a);
        let c = splitmix(b);
        let mut bytes = [0u8; 20];
        bytes[..8].copy_from_slice(&a.to_le_bytes());
        bytes[8..16].copy_from_slice(&b.to_le_bytes());
        bytes[16..].copy_from_slice(&c.to_le_bytes()[..4]);
        Address::from(bytes)
    }

    fn base_value(&self, i: usize) -> (U256, u64) {
        let r = splitmix(self.seed.wrapping_add(0x5eed) ^ i as u64);
        (U256::from(r >> 4), r % 1000)
    }

    fn base_records(&self) -> Vec<AccountRecord> {
        (0..self.base_len)
            .map(|i| {
                let (balance, nonce) = self.base_value(i);
                AccountRecord::new(self.base_address(i), balance, nonce)
            })
            .collect()
    }

    /// A base holder's token balance.
    fn base_word(&self, i: usize) -> U256 {
        match i < self.slot_base_len {
            true => U256::from(splitmix(self.seed.wrapping_add(0x70c) ^ i as u64) >> 8),
            false => U256::ZERO,
        }
    }

    /// The token balance slot of account `i`.
    fn slot_of(&self, i: usize) -> StorageRecord {
        let holder = self.base_address(i);
        let slot = token_entry().balance_slot_of(&holder);
        StorageRecord::new(token_entry().address, slot, U256::ZERO)
    }

    fn base_slots(&self) -> Vec<StorageRecord> {
        (0..self.slot_base_len)
            .map(|i| StorageRecord {
                value: self.base_word(i),
                ..self.slot_of(i)
            })
            .collect()
    }

    /// Account `i`'s token balance at `block`.
    fn slot_truth(&self, i: usize, block: u64) -> U256 {
        let changed = self
            .slot_history
            .get(&i)
            .and_then(|h| h.iter().rev().find(|(b, _)| *b <= block));
        changed.map_or_else(|| self.base_word(i), |&(_, w)| w)
    }

    /// A skewed pick of a holder (a few new ones beyond the base's).
    fn pick_holder(&self, rng: &mut impl Rng) -> usize {
        let u: f64 = rng.random();
        let spread = self.slot_base_len as f64 * 1.05;
        let i = match self.hot {
            Some((share, hot)) if rng.random_bool(share) => {
                rng.random_range(0..hot.clamp(1, self.slot_base_len.max(1)))
            }
            Some(_) => (spread * u) as usize,
            None => (spread * u * u * u) as usize,
        };
        i.min(self.base_len - 1)
    }

    /// The token balances `block` changes, recorded; its storage records.
    fn next_slots(&mut self, block: u64, changes: usize, rng: &mut impl Rng) -> Vec<StorageRecord> {
        let mut touched: HashMap<usize, U256> = HashMap::new();
        for _ in 0..changes {
            let i = self.pick_holder(rng);
            let old = self.slot_truth(i, block);
            let word = match rng.random_bool(0.05) {
                true => U256::ZERO,
                false => old / U256::from(2u8) + U256::from(rng.random::<u32>()),
            };
            touched.insert(i, word);
        }
        touched
            .into_iter()
            .map(|(i, word)| {
                self.slot_history.entry(i).or_default().push((block, word));
                StorageRecord {
                    value: word,
                    ..self.slot_of(i)
                }
            })
            .collect()
    }

    /// An account's state at `block` (`base`: its index in the base).
    fn truth(&self, address: &Address, base: Option<usize>, block: u64) -> (U256, u64) {
        let changed = self
            .history
            .get(address)
            .and_then(|h| h.iter().rev().find(|(b, _, _)| *b <= block));
        match (changed, base) {
            (Some(&(_, balance, nonce)), _) => (balance, nonce),
            (None, Some(i)) => self.base_value(i),
            (None, None) => (U256::ZERO, 0),
        }
    }

    /// With `--hot-share`, that often one of the hot set.
    fn pick_hot(&self, rng: &mut impl Rng) -> Option<(Address, Option<usize>)> {
        let (share, hot) = self.hot?;
        rng.random_bool(share).then(|| {
            let i = rng.random_range(0..hot.clamp(1, self.base_len));
            (self.base_address(i), Some(i))
        })
    }

    /// A pick of an existing account: uniform with `--hot-share` (the hot
    /// set is drawn apart), else skewed (index ~ N * u^3).
    fn pick_existing(&self, rng: &mut impl Rng) -> (Address, Option<usize>) {
        if !self.created.is_empty() && rng.random_bool(0.2) {
            return (self.created[rng.random_range(0..self.created.len())], None);
        }
        let u: f64 = rng.random();
        let i = match self.hot {
            Some(_) => (self.base_len as f64 * u) as usize,
            None => ((self.base_len as f64) * u * u * u) as usize,
        };
        let i = i.min(self.base_len - 1);
        (self.base_address(i), Some(i))
    }

    /// The changes of `block`, recorded in the history; its delta records.
    fn next_block(&mut self, block: u64, changes: usize, rng: &mut impl Rng) -> Vec<AccountRecord> {
        let mut touched: HashMap<Address, (U256, u64)> = HashMap::new();
        for _ in 0..changes {
            let hot = self.pick_hot(rng);
            let (address, value) = if hot.is_some() || rng.random_bool(0.8) {
                let (a, base) = hot.unwrap_or_else(|| self.pick_existing(rng));
                let (balance, nonce) = self.truth(&a, base, block);
                if rng.random_bool(0.02) {
                    (a, (U256::ZERO, 0))
                } else {
                    let spent = balance / U256::from(rng.random_range(2u64..20));
                    (
                        a,
                        (balance - spent + U256::from(rng.random::<u32>()), nonce + 1),
                    )
                }
            } else {
                let a = Address::from(rng.random::<[u8; 20]>());
                self.created.push(a);
                (a, (U256::from(rng.random::<u64>() >> 8), 0))
            };
            touched.insert(address, value);
        }
        touched
            .into_iter()
            .map(|(a, (balance, nonce))| {
                self.history
                    .entry(a)
                    .or_default()
                    .push((block, balance, nonce));
                AccountRecord::new(a, balance, nonce)
            })
            .collect()
    }
}

/// CPU seconds this process has used (user + system).
fn cpu_seconds() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return 0.0;
    };
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // Fields after the command: state is 0, utime 11, stime 12 (clock ticks of 10 ms).
    (ticks(11) + ticks(12)) / 100.0
}

fn delta_state(
    block: u64,
    records: Vec<AccountRecord>,
    storage: Vec<StorageRecord>,
    with_token: bool,
) -> ExportedState {
    ExportedState {
        chain_id: CHAIN_ID,
        block_number: block,
        block_hash: None,
        state_root: None,
        block_time: None,
        parent_hash: None,
        kind: SnapshotKind::Delta { from: block - 1 },
        source: "chain-sim".into(),
        storage,
        listed: listed(with_token),
        records,
        export_s: 0.0,
        codes: Vec::new(),
    }
}

/// What the lookup task shares with the chain's loop: the chain, its
/// head, the stop flag and what the lookups saw.
type LookupShared = (
    Arc<RwLock<Chain>>,
    Arc<AtomicU64>,
    Arc<AtomicBool>,
    Arc<Mutex<LookupStats>>,
);

/// What the lookup task saw.
#[derive(Default)]
struct LookupStats {
    lags: Vec<u64>,
    latencies_ms: Vec<f64>,
    levels: Vec<usize>,
    wrong: Vec<String>,
    failed: Vec<String>,
    /// Token views: latency and bytes (up + down) of each.
    view_ms: Vec<f64>,
    view_bytes: Vec<(u64, u64)>,
}

/// Looks up random accounts at random times until `stop`, checking each
/// answer against the chain at the block it came from.
async fn lookups(
    reader: Arc<PrivateReader>,
    (chain, head, stop, stats): LookupShared,
    mean_gap: Duration,
    seed: u64,
) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let with_token = chain.read().expect("chain lock").slot_base_len > 0;
    while !stop.load(Ordering::SeqCst) {
        let u: f64 = rng.random::<f64>().max(1e-9);
        tokio::time::sleep(mean_gap.mul_f64(-u.ln()).min(mean_gap * 10)).await;
        if with_token && rng.random_bool(0.5) {
            token_view(&reader, &chain, &stats, &mut rng).await;
            continue;
        }
        let (address, base) = {
            let c = chain.read().expect("chain lock");
            match rng.random_range(0..10) {
                0..4 => c.pick_existing(&mut rng),
                4..8 => {
                    let i = rng.random_range(0..c.base_len);
                    (c.base_address(i), Some(i))
                }
                _ => (Address::from(rng.random::<[u8; 20]>()), None),
            }
        };
        let at_head = head.load(Ordering::SeqCst);
        let started = Instant::now();
        let result = reader
            .lookup(&BlockSelector::Newest, &[address])
            .await
            .pop()
            .expect("one result");
        let ms = started.elapsed().as_secs_f64() * 1e3;
        let mut s = stats.lock().expect("stats lock");
        match result {
            Ok(state) => {
                let want = chain
                    .read()
                    .expect("chain lock")
                    .truth(&address, base, state.block);
                record_answer(&mut s, &reader, address, &state, want, at_head, ms);
            }
            Err(e) => s.failed.push(e.to_string()),
        }
    }
}

/// One answer's facts: wrong or not, the lag behind the head, the latency
/// and how many levels its view has.
fn record_answer(
    s: &mut LookupStats,
    reader: &PrivateReader,
    address: Address,
    state: &ethpir_client::AccountState,
    want: (U256, u64),
    at_head: u64,
    ms: f64,
) {
    if (state.balance, state.nonce) != want {
        s.wrong.push(format!(
            "{address} at {}: {:?} vs {want:?}",
            state.block,
            (state.balance, state.nonce)
        ));
    }
    s.lags.push(at_head.saturating_sub(state.block));
    s.latencies_ms.push(ms);
    let levels = reader
        .views()
        .iter()
        .find(|v| v.block == state.block)
        .map_or(0, |v| v.snapshots.len());
    s.levels.push(levels);
}

/// A wallet's token view: `TOKEN_VIEW` balances in one request, each
/// checked against the chain at the view's block.
async fn token_view(
    reader: &PrivateReader,
    chain: &RwLock<Chain>,
    stats: &Mutex<LookupStats>,
    rng: &mut impl Rng,
) {
    let (holders, slots): (Vec<usize>, Vec<(Address, alloy_primitives::B256)>) = {
        let c = chain.read().expect("chain lock");
        (0..TOKEN_VIEW)
            .map(|_| {
                let i = c.pick_holder(rng);
                let holder = c.base_address(i);
                let entry = token_entry();
                (i, (entry.address, entry.balance_slot_of(&holder)))
            })
            .unzip()
    };
    let (up0, down0) = reader.lookup_traffic();
    let started = Instant::now();
    let results = reader.lookup_slots(&BlockSelector::Newest, &slots).await;
    let ms = started.elapsed().as_secs_f64() * 1e3;
    let (up, down) = reader.lookup_traffic();
    let mut s = stats.lock().expect("stats lock");
    for (i, result) in holders.iter().zip(results) {
        match result {
            Ok(state) => {
                let want = chain
                    .read()
                    .expect("chain lock")
                    .slot_truth(*i, state.block);
                if state.word != want {
                    s.wrong.push(format!(
                        "token balance of account {i} at {}: {} vs {want}",
                        state.block, state.word
                    ));
                }
            }
            Err(e) => s.failed.push(e.to_string()),
        }
    }
    s.view_ms.push(ms);
    s.view_bytes.push((up - up0, down - down0));
}

fn percentile<T: Copy + PartialOrd>(values: &[T], p: f64) -> Option<T> {
    let mut v = values.to_vec();
    v.sort_by(|a, b| a.partial_cmp(b).expect("comparable"));
    (!v.is_empty()).then(|| v[((v.len() - 1) as f64 * p).round() as usize])
}

/// `ethpir_answer_seconds_sum / _count` from the server's metrics.
async fn answer_ms(http: &reqwest::Client, server: &str) -> Option<f64> {
    let text = http
        .get(format!("{server}/metrics"))
        .send()
        .await
        .ok()?
        .text()
        .await
        .ok()?;
    let value = |name: &str| {
        text.lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().last())
            .and_then(|v| v.parse::<f64>().ok())
    };
    let (sum, count) = (
        value("ethpir_answer_seconds_sum")?,
        value("ethpir_answer_seconds_count")?,
    );
    (count > 0.0).then(|| sum / count * 1e3)
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    protocol::logging::init(&std::env::var("ETHPIR_LOG").unwrap_or_else(|_| "warn".into()))?;
    let kernel = pir_core::kernel::init_from_env().context(pir_core::kernel::KERNEL_ENV)?;
    let (chain, levels, base_build_s, expansion) = build_base(&args).await?;
    let with_token = chain.slot_base_len > 0;
    let (server, reader) = serve_and_read(args.dir.join("store"), args.dir.join("cache")).await?;
    let built = BaseFigures {
        base_build_s,
        expansion: expansion.name(),
        kernel: kernel.name(),
    };
    match args.idle_blocks {
        0 => lookups_run(&args, chain, levels, &server, reader, with_token, built).await,
        _ => idle_run(&args, chain, levels, &server, reader, built, with_token).await,
    }
}

/// What the base's build says of the run (every mode prints it).
struct BaseFigures {
    base_build_s: f64,
    expansion: &'static str,
    kernel: &'static str,
}

/// An empty store with the chain's base built and published in it (the
/// follower's level policy and build settings): the chain, the levels,
/// the build's seconds and the public matrix's expansion.
async fn build_base(args: &Args) -> Result<(Chain, Arc<Levels>, f64, pir_core::Expansion)> {
    let _ = std::fs::remove_dir_all(&args.dir);
    let store = SnapshotStore::open(args.dir.join("store"))?;
    let chain = new_chain(args);
    let with_token = chain.slot_base_len > 0;
    let policy = LevelPolicy {
        fanout: args.fanout,
        keep_blocks: args.keep_blocks,
        ..Default::default()
    };
    // The follower's shipped defaults: a base packed for a 1.5 MiB lookup
    // (hint 32..512 MiB), the levels under a 32 MiB hint, AES expansion.
    let build = BuildSettings::default().options(None)?;
    let expansion = build.expansion;
    let levels = Arc::new(Levels::new(store, CHAIN_ID, policy, build));
    eprintln!("building the base of 2^{} accounts...", args.log2_accounts);
    let base_build_s = publish_base(&levels, &chain, with_token).await?;
    Ok((chain, levels, base_build_s, expansion))
}

/// The chain run with lookups all along: one JSON line of freshness,
/// bytes, server CPU and wrong answers.
async fn lookups_run(
    args: &Args,
    chain: Chain,
    levels: Arc<Levels>,
    server: &str,
    reader: Arc<PrivateReader>,
    with_token: bool,
    built: BaseFigures,
) -> Result<()> {
    let (up0, down0) = reader.traffic();
    let (lup0, ldown0) = reader.lookup_traffic();
    let chain = Arc::new(RwLock::new(chain));
    let run = run_chain(args, chain, levels, reader.clone(), with_token, None).await?;
    let (up, down) = reader.traffic();
    let (lup, ldown) = reader.lookup_traffic();
    let answer_ms = answer_ms(&reqwest::Client::new(), server).await;
    let stats = &run.stats;
    let n = stats.latencies_ms.len().max(1) as f64;
    let view_up: u64 = stats.view_bytes.iter().map(|b| b.0).sum();
    let view_down: u64 = stats.view_bytes.iter().map(|b| b.1).sum();
    let background = (up - up0) - (lup - lup0) + (down - down0) - (ldown - ldown0);
    let mut out = run_json(args, &run);
    let figures = json!({
        "base_build_s": built.base_build_s,
        // What the reader fetched before the run: the base's setup (hint)
        // and the first catalog.
        "initial_download_bytes": down0,
        "expansion": built.expansion,
        "lookup_bytes_up": (lup - lup0 - view_up) as f64 / n,
        "lookup_bytes_down": (ldown - ldown0 - view_down) as f64 / n,
        "background_bytes_per_300_blocks": background as f64 * 300.0 / args.blocks as f64,
        "answer_ms_per_lookup": answer_ms,
        "kernel": built.kernel,
    });
    if let (Some(out), Value::Object(more)) = (out.as_object_mut(), figures) {
        out.extend(more);
    }
    for w in stats.wrong.iter().chain(&stats.failed).take(5) {
        eprintln!("problem: {w}");
    }
    println!("{out}");
    Ok(())
}

/// The seeded synthetic chain the arguments describe.
fn new_chain(args: &Args) -> Chain {
    Chain {
        seed: args.seed,
        base_len: 1usize << args.log2_accounts,
        history: HashMap::new(),
        created: Vec::new(),
        slot_base_len: match args.log2_slots {
            0 => 0,
            s => (1usize << s).min(1usize << args.log2_accounts),
        },
        slot_history: HashMap::new(),
        hot: args.hot_share.map(|share| (share, args.hot_accounts)),
    }
}

/// Builds and publishes the chain's base; the seconds it took.
async fn publish_base(levels: &Arc<Levels>, chain: &Chain, with_token: bool) -> Result<f64> {
    let t = Instant::now();
    let base = ExportedState {
        chain_id: CHAIN_ID,
        block_number: 0,
        block_hash: None,
        state_root: None,
        block_time: None,
        parent_hash: None,
        kind: SnapshotKind::Full,
        source: "chain-sim".into(),
        storage: chain.base_slots(),
        listed: listed(with_token),
        records: chain.base_records(),
        export_s: 0.0,
        codes: Vec::new(),
    };
    let l = levels.clone();
    tokio::task::spawn_blocking(move || l.publish(base)).await??;
    Ok(t.elapsed().as_secs_f64())
}

/// What the chain's run measured.
struct ChainRun {
    cpu_per_block: Vec<f64>,
    publish_s: Vec<f64>,
    unserved: u32,
    stats: LookupStats,
}

/// Runs the chain block by block (a delta published each), lookups
/// running beside it, until the last block.
async fn run_chain(
    args: &Args,
    chain: Arc<RwLock<Chain>>,
    levels: Arc<Levels>,
    reader: Arc<PrivateReader>,
    with_token: bool,
    mut idle: Option<&mut IdleWatch>,
) -> Result<ChainRun> {
    let head = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let stats = Arc::new(Mutex::new(LookupStats::default()));
    let block_time = Duration::from_millis(args.block_time_ms);
    // An idle span has no lookups: its wallet reads before and after.
    let lookup_task = idle.is_none().then(|| {
        let gap = block_time.div_f64(args.lookups_per_block.max(0.01));
        let shared = (chain.clone(), head.clone(), stop.clone(), stats.clone());
        tokio::spawn(lookups(reader.clone(), shared, gap, args.seed ^ 0x100c))
    });
    let mut rng = rand::rngs::StdRng::seed_from_u64(args.seed);
    let mut run = ChainRun {
        cpu_per_block: Vec::new(),
        publish_s: Vec::new(),
        unserved: 0,
        stats: LookupStats::default(),
    };
    let start = Instant::now();
    for block in 1..=args.blocks {
        tokio::time::sleep_until((start + block_time * (block as u32 - 1)).into()).await;
        let (records, slots) = next_changes(&chain, block, args, with_token, &mut rng);
        head.store(block, Ordering::SeqCst);
        let seen = Instant::now();
        let cpu = cpu_seconds();
        let l = levels.clone();
        let delta = delta_state(block, records, slots, with_token);
        tokio::task::spawn_blocking(move || l.publish(delta)).await??;
        run.cpu_per_block.push(cpu_seconds() - cpu);
        let wait = block_time
            .saturating_sub(seen.elapsed())
            .max(Duration::from_secs(2));
        match served(&reader, block, wait).await {
            Some(_) => run.publish_s.push(seen.elapsed().as_secs_f64()),
            None => run.unserved += 1,
        }
        if let Some(watch) = idle.as_deref_mut() {
            watch.look(block);
        }
        if block % 10 == 0 {
            eprintln!("block {block}/{}", args.blocks);
        }
    }
    stop.store(true, Ordering::SeqCst);
    if let Some(task) = lookup_task {
        task.await?;
    }
    run.stats = std::mem::take(&mut *stats.lock().expect("stats lock"));
    Ok(run)
}

/// The next block's account changes and (with the token) slot changes.
fn next_changes(
    chain: &RwLock<Chain>,
    block: u64,
    args: &Args,
    with_token: bool,
    rng: &mut rand::rngs::StdRng,
) -> (Vec<AccountRecord>, Vec<StorageRecord>) {
    let mut c = chain.write().expect("chain lock");
    let records = c.next_block(block, args.changes_per_block, rng);
    let slots = match with_token {
        true => c.next_slots(block, args.slot_changes_per_block, rng),
        false => Vec::new(),
    };
    (records, slots)
}

/// The run's figures as JSON (the traffic and build figures are added by
/// `main`).
fn run_json(args: &Args, run: &ChainRun) -> Value {
    let stats = &run.stats;
    json!({
        "bench": "chain-sim",
        "log2_accounts": args.log2_accounts,
        "changes_per_block": args.changes_per_block,
        "blocks": args.blocks,
        "block_time_ms": args.block_time_ms,
        "fanout": args.fanout,
        "keep_blocks": args.keep_blocks,
        "lag_blocks_p50": percentile(&stats.lags, 0.5),
        "lag_blocks_max": stats.lags.iter().max(),
        "server_cpu_s_per_block": run.cpu_per_block.iter().sum::<f64>() / args.blocks as f64,
        "server_cpu_s_per_block_max": run.cpu_per_block.iter().cloned().fold(0.0, f64::max),
        "lookup_ms_p50": percentile(&stats.latencies_ms, 0.5),
        "lookup_ms_p99": percentile(&stats.latencies_ms, 0.99),
        "levels_per_lookup_max": stats.levels.iter().max(),
        "head_delta_publish_s": percentile(&run.publish_s, 0.5),
        "head_delta_publish_s_max": percentile(&run.publish_s, 1.0),
        "blocks_not_served_in_time": run.unserved,
        "lookups": stats.latencies_ms.len(),
        "failed_lookups": stats.failed.len(),
        "wrong_answers": stats.wrong.len(),
        "log2_slots": args.log2_slots,
        "slot_changes_per_block": args.slot_changes_per_block,
        "token_views": stats.view_ms.len(),
        "token_view_balances": TOKEN_VIEW,
        "token_view_ms_p50": percentile(&stats.view_ms, 0.5),
        "token_view_ms_p99": percentile(&stats.view_ms, 0.99),
        "token_view_bytes": (stats.view_bytes.iter().map(|b| b.0 + b.1).sum::<u64>()) as f64 / stats.view_ms.len().max(1) as f64,
        "cpu_model": cpu_model(),
        "cores": std::thread::available_parallelism().map_or(1, |n| n.get()),
    })
}

/// An idle proxy's traffic from the moment it went idle.
struct IdleWatch {
    reader: Arc<PrivateReader>,
    /// When it went idle, its traffic (up + down) then, and the head.
    went_idle: Option<(Instant, u64, u64)>,
}

impl IdleWatch {
    /// Notes the moment the reader went idle (looked at after every
    /// block, `block` the head).
    fn look(&mut self, block: u64) {
        if self.went_idle.is_none() && self.reader.is_idle() {
            self.went_idle = Some((Instant::now(), total(&self.reader), block));
        }
    }
}

/// Bytes a reader sent and received so far.
fn total(reader: &PrivateReader) -> u64 {
    let (up, down) = reader.traffic();
    up + down
}

/// The wallet of an --idle-blocks run: `WALLET_ACCOUNTS` accounts of the
/// base outside the hot set, and (with the token) a view of balances.
struct Wallet {
    accounts: Vec<usize>,
    holders: Vec<usize>,
}

impl Wallet {
    fn new(chain: &Chain, rng: &mut impl Rng) -> Self {
        let cold = chain.hot.map_or(0, |(_, hot)| hot).min(chain.base_len - 1);
        let pick =
            |rng: &mut dyn rand::RngCore, len: usize| rng.random_range(cold.min(len - 1)..len);
        Wallet {
            accounts: (0..WALLET_ACCOUNTS)
                .map(|_| pick(rng, chain.base_len))
                .collect(),
            holders: match chain.slot_base_len {
                0 => Vec::new(),
                len => (0..TOKEN_VIEW).map(|_| pick(rng, len)).collect(),
            },
        }
    }

    /// Reads every key at the newest view, each checked against the
    /// chain: the view's block and what was wrong.
    async fn read(
        &self,
        reader: &PrivateReader,
        chain: &RwLock<Chain>,
    ) -> Result<(u64, Vec<String>)> {
        let (addresses, slots) = {
            let c = chain.read().expect("chain lock");
            let entry = token_entry();
            let addresses: Vec<Address> =
                self.accounts.iter().map(|&i| c.base_address(i)).collect();
            let slots: Vec<_> = self
                .holders
                .iter()
                .map(|&i| (entry.address, entry.balance_slot_of(&c.base_address(i))))
                .collect();
            (addresses, slots)
        };
        let accounts = reader.lookup(&BlockSelector::Newest, &addresses).await;
        let words = reader.lookup_slots(&BlockSelector::Newest, &slots).await;
        let c = chain.read().expect("chain lock");
        let mut wrong = Vec::new();
        let mut blocks = Vec::new();
        for (&i, state) in self.accounts.iter().zip(accounts) {
            let state = state.context("a wallet account")?;
            let want = c.truth(&c.base_address(i), Some(i), state.block);
            if (state.balance, state.nonce) != want {
                wrong.push(format!("account {i} at {}", state.block));
            }
            blocks.push(state.block);
        }
        for (&i, state) in self.holders.iter().zip(words) {
            let state = state.context("a wallet token balance")?;
            if state.word != c.slot_truth(i, state.block) {
                wrong.push(format!("token balance of account {i} at {}", state.block));
            }
            blocks.push(state.block);
        }
        let block = blocks.iter().copied().min().unwrap_or(0);
        if blocks.iter().any(|&b| b != block) {
            wrong.push(format!("answers from several views: {blocks:?}"));
        }
        Ok((block, wrong))
    }
}

/// What an --idle-blocks run measured.
struct IdleFigures {
    /// Idle bytes per wall-clock hour, per block, per hour of 12-s blocks.
    idle: Option<(f64, f64, f64)>,
    always_on_bytes: u64,
    catch_up_block: u64,
    catch_up_bytes: u64,
    catch_up_s: f64,
    wrong: Vec<String>,
}

/// `--idle-blocks`: a wallet reads its keys at the base through a proxy
/// that goes idle after `--idle-secs`; the chain runs `--idle-blocks`
/// blocks without reads (an always-on proxy following it); then the
/// wallet reads every key again. One JSON line.
async fn idle_run(
    args: &Args,
    chain: Chain,
    levels: Arc<Levels>,
    server: &str,
    always_on: Arc<PrivateReader>,
    built: BaseFigures,
    with_token: bool,
) -> Result<()> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(args.seed ^ 0x1d1e);
    let wallet = Wallet::new(&chain, &mut rng);
    let chain = Arc::new(RwLock::new(chain));
    let idle = read_from(
        server,
        args.dir.join("idle-cache"),
        Some(Duration::from_secs(args.idle_secs)),
    )
    .await?;
    let (_, mut wrong) = wallet.read(&idle, &chain).await?;
    let (run, idle_rates, always_on_bytes) =
        idle_span(args, &chain, levels, &always_on, &idle, with_token).await?;
    let before = total(&idle);
    let started = Instant::now();
    let (block, more_wrong) = wallet.read(&idle, &chain).await?;
    let catch_up_s = started.elapsed().as_secs_f64();
    wrong.extend(more_wrong);
    if block != args.idle_blocks {
        wrong.push(format!(
            "caught up to block {block}, not the newest ({})",
            args.idle_blocks
        ));
    }
    for w in wrong.iter().take(5) {
        eprintln!("problem: {w}");
    }
    let figures = IdleFigures {
        idle: idle_rates,
        always_on_bytes,
        catch_up_block: block,
        catch_up_bytes: total(&idle) - before,
        catch_up_s,
        wrong,
    };
    let keys = wallet.accounts.len() + wallet.holders.len();
    println!("{}", idle_json(args, &built, keys, &figures, &run));
    Ok(())
}

/// The idle span: `--idle-blocks` blocks with no reads, `always_on`
/// following them. The run, the idle proxy's rates once idle (bytes per
/// wall-clock hour, per block, per hour of 12-s blocks) and what the
/// always-on proxy downloaded.
async fn idle_span(
    args: &Args,
    chain: &Arc<RwLock<Chain>>,
    levels: Arc<Levels>,
    always_on: &Arc<PrivateReader>,
    idle: &Arc<PrivateReader>,
    with_token: bool,
) -> Result<(ChainRun, Option<(f64, f64, f64)>, u64)> {
    let mut watch = IdleWatch {
        reader: idle.clone(),
        went_idle: None,
    };
    let always_on_before = total(always_on);
    let span_args = Args {
        blocks: args.idle_blocks,
        ..args.clone()
    };
    let run = run_chain(
        &span_args,
        chain.clone(),
        levels,
        always_on.clone(),
        with_token,
        Some(&mut watch),
    )
    .await?;
    let always_on_bytes = total(always_on) - always_on_before;
    let rates = watch.went_idle.map(|(at, bytes, block)| {
        let spent = (total(idle) - bytes) as f64;
        let blocks = (args.idle_blocks - block).max(1) as f64;
        (
            spent / at.elapsed().as_secs_f64().max(1e-3) * 3600.0,
            spent / blocks,
            spent / blocks * 300.0,
        )
    });
    Ok((run, rates, always_on_bytes))
}

/// An --idle-blocks run's JSON line.
fn idle_json(
    args: &Args,
    built: &BaseFigures,
    keys: usize,
    f: &IdleFigures,
    run: &ChainRun,
) -> Value {
    json!({
        "bench": "chain-sim",
        "mode": "idle",
        "log2_accounts": args.log2_accounts,
        "changes_per_block": args.changes_per_block,
        "hot_share": args.hot_share,
        "hot_accounts": args.hot_accounts,
        "log2_slots": args.log2_slots,
        "slot_changes_per_block": args.slot_changes_per_block,
        "block_time_ms": args.block_time_ms,
        "fanout": args.fanout,
        "keep_blocks": args.keep_blocks,
        "idle_secs": args.idle_secs,
        "base_build_s": built.base_build_s,
        "expansion": built.expansion,
        "kernel": built.kernel,
        "wallet_keys": keys,
        "idle_bytes_per_hour": f.idle.map(|i| i.0),
        "idle_bytes_per_block": f.idle.map(|i| i.1),
        "idle_bytes_per_hour_at_12s_blocks": f.idle.map(|i| i.2),
        "catch_up_blocks": f.catch_up_block,
        "catch_up_bytes": f.catch_up_bytes,
        "catch_up_s": f.catch_up_s,
        "always_on_bytes_same_span": f.always_on_bytes,
        "catch_up_over_always_on": f.catch_up_bytes as f64 / f.always_on_bytes.max(1) as f64,
        "blocks_not_served_in_time": run.unserved,
        "server_cpu_s_per_block": run.cpu_per_block.iter().sum::<f64>() / args.idle_blocks as f64,
        "wrong_answers": f.wrong.len(),
        "cpu_model": cpu_model(),
        "cores": std::thread::available_parallelism().map_or(1, |n| n.get()),
    })
}
