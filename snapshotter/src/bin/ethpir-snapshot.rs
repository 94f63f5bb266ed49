//! `ethpir-snapshot`: export Ethereum account state into PIR snapshots.
#![forbid(unsafe_code)]

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use anyhow::{bail, Context, Result};
use clap::{Args, Parser, Subcommand};
use gpu_kernels::Device;
use indicatif::{ProgressBar, ProgressStyle};
use std::io::Write as _;

use pir_core::Packing;
use protocol::storage::PrivateStorage;
use snapshotter::follow::{self, FollowConfig, StorageScope};
use snapshotter::pipeline::{BuildError, BuildOptions, ExportedState};
use snapshotter::progress::{ProgressEvent, ProgressFn, Step};
use snapshotter::settings::{BuildSettings, LayoutSettings};
#[cfg(feature = "reth")]
use snapshotter::sources::reth::{export_base, RethMode};
use snapshotter::sources::rpc::{self, RpcOptions, RpcSource, Traces};
use snapshotter::sources::{genesis, Base, PublishError};
use snapshotter::store::{SnapshotStore, StoreError};
use snapshotter::{tokens, SnapshotId};

#[derive(Parser)]
#[command(
    name = "ethpir-snapshot",
    version,
    about = "Export Ethereum account state into PIR snapshots and keep a snapshot store",
    long_about = "Export Ethereum account state into private-information-retrieval (PIR) snapshots.\n\n\
A build reads accounts from a source (a genesis file, a JSON-RPC node, a reth datadir), encodes them \
as a keyword-PIR database (binary fuse filters), builds the hint (on a CUDA GPU when there is one, \
else on all CPU cores) and publishes the snapshot atomically into the store: \
<store>/<chain id>/<block>-<kind>/. A killed build never leaves a half-written snapshot.\n\n\
Examples:\n  \
ethpir-snapshot --store ./store build genesis --mainnet\n  \
ethpir-snapshot --store ./store build genesis --file genesis.json --chain-id 11155111\n  \
ethpir-snapshot --store ./store build rpc --url http://127.0.0.1:8545 --window 256\n  \
ethpir-snapshot --store ./store build reth --datadir ~/.local/share/reth/mainnet --chain-id 1\n  \
ethpir-snapshot --store ./store run --url http://127.0.0.1:8545 --genesis genesis.json\n  \
ethpir-snapshot --store ./store list\n  \
ethpir-snapshot --store ./replica pull --from http://primary:8546 --every 1\n  \
ethpir-snapshot --store ./store verify --lookups 16\n  \
ethpir-snapshot --store ./store verify --state-root --url http://127.0.0.1:8545\n  \
ethpir-snapshot --store ./store attest --url http://127.0.0.1:8545 --key-file attester.key\n  \
ethpir-snapshot tokens detect --url http://127.0.0.1:8545 --token 0x..."
)]
struct Cli {
    /// The snapshot store directory.
    #[arg(
        long,
        global = true,
        default_value = "./ethpir-store",
        env = "ETHPIR_STORE"
    )]
    store: PathBuf,
    /// Log filter (error, warn, info, debug, or a tracing filter).
    #[arg(long, global = true, default_value = "info", env = "ETHPIR_LOG")]
    log: String,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Build one snapshot now and publish it (for cron and systemd timers).
    Build {
        #[command(subcommand)]
        source: Source,
    },
    /// Follow the chain head: a base (genesis file or reth datadir), then a
    /// delta for every new block, merged down as they accumulate, retired
    /// when no recent view needs them. Rides out node outages; stops on
    /// Ctrl-C (a build in progress still publishes atomically).
    #[command(
        long_about = "Follow the chain head and keep the store's newest view at most a block behind it.\n\n\
First a base: the full state from --genesis FILE (then every block since, from the node) or from \
--datadir RETH_DATADIR (at its head). An RPC node cannot list its accounts, so without either the \
follower refuses (unless the store already holds a base for the chain). Then every new block \
becomes a small delta snapshot on top of the newest view; deltas are merged a fanout at a time \
and folded into a new base when they grow large ([levels] in the config). The node must offer \
trace_block (internal transfers, selfdestructs) unless --allow-incomplete.\n\n\
Examples:\n  \
ethpir-snapshot run --store ./store --url http://127.0.0.1:8545 --genesis genesis.json\n  \
ethpir-snapshot run --store ./store --url http://127.0.0.1:8545 --datadir ~/.local/share/reth/mainnet\n  \
ethpir-snapshot run --config configs/snapshotter.toml --once"
    )]
    Run(RunArgs),
    /// Keep this store a copy of a primary's: fetch what its server lists
    /// (every file checked against its manifest's digest before an atomic
    /// publish), remove what it retired; once, or every --every seconds.
    #[command(
        long_about = "Keep this store a copy of a primary's, for replicas and shards on other machines.\n\n\
The follower publishes once, on the primary, whose ethpir-server runs with export_files = true. \
Every other machine runs `pull`: it fetches the snapshots the primary's server lists that this store \
lacks (files streamed to disk, refused past their manifest's size, checked against its digests, then \
published with the same atomic rename as a build) and removes those the primary no longer lists. \
The local ethpir-server picks them up on its next rescan.\n\nExamples:\n  \
ethpir-snapshot --store /var/lib/ethpir/store pull --from http://primary.internal:8546\n  \
ethpir-snapshot --store /var/lib/ethpir/store pull --from http://primary.internal:8546 --every 1"
    )]
    Pull {
        /// Base URL of the primary's ethpir-server (export_files = true).
        #[arg(long)]
        from: String,
        /// Pull again every this many seconds (fractions allowed) until
        /// Ctrl-C; without it, pull once and exit.
        #[arg(long)]
        every: Option<f64>,
        /// Longest one file may take to download, seconds.
        #[arg(long, default_value_t = 3600)]
        file_timeout_secs: u64,
    },
    /// List the snapshots in the store.
    List {
        /// Print the manifests as JSON lines.
        #[arg(long)]
        json: bool,
    },
    /// Check the store's snapshots against your own node and sign those that hold.
    #[command(
        long_about = "Check each snapshot of the store against a node of your own and sign what holds, \
so that proxies can require your signature (`attesters`, `attest_quorum`).\n\n\
Checked: the block hash and state root the manifest names are the node's; a full snapshot's records \
give that state root and each listed contract its storage root (as `verify --state-root`: minutes at \
mainnet's size), and its database built again from its records gives the same setup digest (as long \
as a base build); a delta is exported again from the node, every account proved against that state \
root, and must be the same records, byte for byte (seconds). Signed: EIP-712 typed data (domain \"ethpir snapshot\", version 1) over the snapshot id, chain \
id, block number, block hash, state root, setup digest and records digest, with the key in \
--key-file (hex private key; keep it 0600). Kept in <store>/.attestations/; the server's catalog \
carries them, and they verify themselves, so any server may relay them. Active sets and historical \
snapshots are not attested. With --every, runs again every SECS seconds.\n\n\
Example:\n  ethpir-snapshot --store ./store attest --url http://127.0.0.1:8545 --key-file attester.key --every 12"
    )]
    Attest {
        /// Your node (JSON-RPC over HTTP), at the snapshots' chain.
        #[arg(long)]
        url: String,
        /// A file holding the hex private key that signs.
        #[arg(long)]
        key_file: PathBuf,
        /// Run again every this many seconds (once when absent).
        #[arg(long)]
        every: Option<u64>,
    },
    /// Check snapshots: digests, formats, and private lookups of sampled accounts;
    /// with --state-root, the Merkle-Patricia state root their records imply.
    #[command(
        long_about = "Check snapshots: file digests, formats, the setup against the database, and \
private lookups of sampled accounts and slots through the real PIR path.\n\n\
With --state-root, also recompute, for the view at each snapshot's block (its base and the deltas \
above it), the Merkle-Patricia state root from every account's balance, nonce, code hash and storage \
root (streamed, on every core), and each listed contract's storage root from its slots; compare them \
with the manifest's state root, the contracts' accounts, and with --url the node's header at that \
block. Active sets and historical snapshots hold a part of the state only: skipped."
    )]
    Verify {
        /// Snapshots to check (`<chain>/<block>-<kind>`); all when none.
        ids: Vec<SnapshotId>,
        /// Accounts looked up privately per snapshot (0: files and formats only).
        #[arg(long, default_value_t = 8)]
        lookups: usize,
        /// Recompute the state root (and listed contracts' storage roots).
        #[arg(long)]
        state_root: bool,
        /// A node whose headers the state roots must equal (with --state-root).
        #[arg(long, requires = "state_root")]
        url: Option<String>,
    },
    /// What a database of N accounts would be with these layout settings
    /// (no store needed): partitions, rows, query, response, hint and
    /// database bytes, for a base and for the other levels.
    #[command(
        long_about = "Estimate the PIR database of N accounts before building it, with the same choices \
a build makes (packing, then plaintext bits for the correctness bound): partitions k, rows, bytes per \
lookup (query + response), hint and database bytes. One line for a base (a full snapshot) and one for \
the other levels.\n\nExamples:\n  ethpir-snapshot plan --accounts 350000000\n  \
ethpir-snapshot plan --accounts 16777216 --hint-budget-mib 32 --json"
    )]
    Plan(PlanArgs),
    /// ERC-20 tokens: where a token keeps its balances (for the token list
    /// that makes its balanceOf private).
    Tokens {
        #[command(subcommand)]
        command: TokensCommand,
    },
    /// Apply the retention policy now.
    Prune {
        #[arg(long)]
        chain_id: u64,
        #[command(flatten)]
        retention: RetentionArgs,
    },
}

#[derive(Subcommand)]
enum TokensCommand {
    /// Find the storage mapping that holds a token's balances, by comparing
    /// balanceOf of holders with every candidate slot, and print the token
    /// list entry (TOML). Exit status 2 when the token is not a plain
    /// mapping (rebasing tokens, packed balances, other layouts).
    #[command(
        long_about = "Find where an ERC-20 keeps its balances, so that its balanceOf can be read privately.\n\n\
At the node's head, balanceOf of up to three holders with a balance (given with --holder, else \
recipients of the token's Transfer events in the last --log-window blocks) is compared with every \
candidate storage entry: mapping slot indices 0..=--max-index in Solidity's and Vyper's layouts and \
OpenZeppelin's ERC-7201 ERC-20 namespace. If exactly one candidate matches every holder, the token \
list entry is printed (append it to your list); if none does, the token is non-standard (rebasing, \
balances packed with flags, kept in another contract) and the exit status is 2.\n\nExamples:\n  \
ethpir-snapshot tokens detect --url http://127.0.0.1:8545 --token 0xdAC17F958D2ee523a2206206994597C13D831ec7\n  \
ethpir-snapshot tokens detect --url $RPC --token 0x... --holder 0xab...,0xcd... --symbol USDT >> tokens.toml"
    )]
    Detect(DetectArgs),
}

#[derive(Args)]
struct DetectArgs {
    /// Node URL (http or https).
    #[arg(long, env = "ETHPIR_RPC_URL")]
    url: String,
    /// The token contract.
    #[arg(long)]
    token: alloy_primitives::Address,
    /// Holders to check (comma-separated or repeated); default: recent
    /// Transfer recipients.
    #[arg(long = "holder", value_delimiter = ',')]
    holders: Vec<alloy_primitives::Address>,
    /// The token's symbol, copied into the entry for readers of the list.
    #[arg(long, default_value = "")]
    symbol: String,
    /// The getter whose answers are looked for in a mapping: any
    /// `name(address)` returning a uint256 (a staking pool's
    /// `getShares(address)`, say).
    #[arg(long, default_value = protocol::tokens::Getter::BALANCE_OF, value_name = "SIGNATURE")]
    function: protocol::tokens::Getter,
    /// Blocks of Transfer events searched for holders.
    #[arg(long, default_value_t = 10_000)]
    log_window: u64,
    /// Highest plain mapping slot index tried.
    #[arg(long, default_value_t = 255)]
    max_index: u64,
}

/// `plan`: the database of a size, laid out as a build would.
#[derive(Args)]
struct PlanArgs {
    /// Accounts (records) in the database.
    #[arg(long)]
    accounts: usize,
    /// Storage slots beside them (the whole state: every contract's;
    /// mainnet 2025 ~1.1e9 beside ~2.9e8 accounts). Wide words add one
    /// record each: count them here too.
    #[arg(long, default_value_t = 0)]
    slots: usize,
    /// Value bytes per record: 24 (balances below 2^128) or 40.
    #[arg(long, default_value_t = 24)]
    value_bytes: usize,
    /// Row shards behind the router: each holds and scans a share of
    /// the rows (printed per shard).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..))]
    shards: u64,
    /// Memory read bandwidth of one core, GB/s, for the time one pass
    /// over a shard's database takes on one core (a pass is
    /// memory-bound for a lone query; measure yours with pir-bench).
    #[arg(long, default_value_t = 19.0)]
    core_gbs: f64,
    #[command(flatten)]
    layout: LayoutSettings,
    #[command(flatten)]
    hot: HotPlan,
    #[command(flatten)]
    gpu: GpuPlan,
    /// JSON lines instead of a table.
    #[arg(long)]
    json: bool,
}

/// What a hot tier changes for a swap (`plan --hot-mib`): the keys a
/// swap's first estimate reads, how many of them name the holder, and
/// how often a tier is published.
#[derive(Args)]
struct HotPlan {
    /// The hot tier's budget, MiB (0: none; `[hot] max_mib`).
    #[arg(long, default_value_t = 0.0)]
    hot_mib: f64,
    /// Keys a swap's first estimate reads (96: a router swap measured on
    /// anvil with Uniswap V2 code; docs/operations.md).
    #[arg(long, default_value_t = 96)]
    swap_keys: u64,
    /// Of those, the keys that name the holder (its account, its balance
    /// and allowance slots): what the tier leaves to PIR.
    #[arg(long, default_value_t = 3)]
    holder_keys: u64,
    /// PIR requests of the estimate without the tier (one canary each).
    #[arg(long, default_value_t = 5)]
    swap_requests: u64,
    /// Hours between tiers (one with each base).
    #[arg(long, default_value_t = 24.0)]
    hot_every_hours: f64,
}

impl HotPlan {
    /// The tier's lines beside a base whose lookup sends `query_bytes`
    /// up and whose values are `value_bytes` wide (JSON with `json`).
    fn write(
        &self,
        out: &mut impl std::io::Write,
        query_bytes: u64,
        value_bytes: usize,
        json: bool,
    ) -> Result<()> {
        if self.hot_mib <= 0.0 {
            return Ok(());
        }
        let mib = |b: f64| b / (1 << 20) as f64;
        let entry = (protocol::table::KEY_PREFIX + value_bytes) as f64;
        let entries = (self.hot_mib * (1 << 20) as f64 / entry) as u64;
        let per_hour = self.hot_mib / self.hot_every_hours.max(1e-9);
        let query = query_bytes as f64;
        // Without the tier: every key and a canary per request. With it:
        // the holder's keys, at worst each in a request of its own.
        let without = (self.swap_keys + self.swap_requests) as f64 * query;
        let with = (2 * self.holder_keys) as f64 * query;
        if json {
            let line = serde_json::json!({
                "hot_mib": self.hot_mib, "hot_entries": entries, "hot_mib_per_hour": per_hour,
                "swap_estimate_up_bytes": without, "swap_estimate_up_bytes_with_hot": with,
            });
            writeln!(out, "{line}")?;
            return Ok(());
        }
        writeln!(out, "hot tier: {:.1} MiB ({entries} entries of {entry} B), downloaded once per tier: {per_hour:.2} MiB an hour always on (a tier every {} h)", self.hot_mib, self.hot_every_hours)?;
        writeln!(out, "a swap's first estimate: {} keys + {} canaries = {:.1} MiB up; with the tier: {} keys + {} canaries = {:.1} MiB up", self.swap_keys, self.swap_requests, mib(without), self.holder_keys, self.holder_keys, mib(with))?;
        Ok(())
    }
}

/// What answering the base from GPU memory takes (`plan --lookups-per-s`):
/// GPUs to hold it, a lone lookup's and a batch's time, lookups a second.
/// The defaults are one H200's, measured with `gpu-selftest
/// --bench-answers` at 2^30 keys (docs/benchmarks.md, "Answers from GPU
/// memory").
#[derive(Args)]
struct GpuPlan {
    /// Memory of one GPU, GiB (80: an H100; 141: an H200).
    #[arg(long, default_value_t = 141.0)]
    gpu_memory_gib: f64,
    /// Database bytes one GPU scans a second for a lone query, GB/s.
    #[arg(long, default_value_t = 3700.0)]
    gpu_scan_gbs: f64,
    /// Database bytes one GPU answers a second per query of a batch of
    /// 64 (its queries times the database over the batch's time), GB/s.
    #[arg(long, default_value_t = 22500.0)]
    gpu_batch_gbs: f64,
    /// Wallet lookups a second to size the GPUs for (0: none).
    #[arg(long, default_value_t = 0.0)]
    lookups_per_s: f64,
}

impl GpuPlan {
    /// The GPU lines for a base of `database_bytes` whose queries are
    /// `query_bytes` (JSON with `json`).
    fn write(
        &self,
        out: &mut impl std::io::Write,
        database_bytes: u64,
        query_bytes: u64,
        json: bool,
    ) -> Result<()> {
        if self.lookups_per_s <= 0.0 {
            return Ok(());
        }
        let db = database_bytes as f64;
        // A GPU holds its rows, a full batch's queries and their planes
        // (the server's default batching.max_queries, 256), and leaves a
        // tenth free (the server's rule).
        let per_gpu =
            self.gpu_memory_gib * (1u64 << 30) as f64 * 0.9 - 256.0 * 2.0 * query_bytes as f64;
        let to_hold = (db / per_gpu.max(1.0)).ceil().max(1.0);
        let for_load = (self.lookups_per_s * db / (self.gpu_batch_gbs * 1e9)).ceil();
        let gpus = to_hold.max(for_load);
        // Row shards: every GPU scans its share, in parallel.
        let lone_ms = db / gpus / (self.gpu_scan_gbs * 1e9) * 1e3;
        let batch_ms = 64.0 * db / gpus / (self.gpu_batch_gbs * 1e9) * 1e3;
        let lookups_per_s = self.gpu_batch_gbs * 1e9 * gpus / db;
        let ingress = self.lookups_per_s * query_bytes as f64 / 1e9;
        if json {
            let line = serde_json::json!({
                "gpus_to_hold": to_hold, "gpus_for_load": for_load, "gpus": gpus,
                "lone_lookup_ms": lone_ms, "batch_64_ms": batch_ms,
                "lookups_per_s_capacity": lookups_per_s, "query_ingress_gbs": ingress,
            });
            writeln!(out, "{line}")?;
            return Ok(());
        }
        writeln!(out, "GPUs ({:.0} GiB, {:.0} GB/s lone, {:.0} GB/s a query batched): {to_hold} to hold the base, {for_load} for {:.0} lookups/s: {gpus} as row shards", self.gpu_memory_gib, self.gpu_scan_gbs, self.gpu_batch_gbs, self.lookups_per_s)?;
        writeln!(out, "on {gpus} GPUs: a lone lookup {lone_ms:.1} ms, a batch of 64 {batch_ms:.1} ms, {lookups_per_s:.0} lookups/s; queries arrive at {ingress:.1} GB/s")?;
        Ok(())
    }
}

#[derive(Args)]
struct RunArgs {
    /// Config file (see configs/snapshotter.toml); the flags below override it.
    #[arg(long)]
    config: Option<PathBuf>,
    /// The node to follow (JSON-RPC over HTTP).
    #[arg(long)]
    url: Option<String>,
    /// The node's WebSocket endpoint (ws://...): new heads are followed
    /// as it announces them (eth_subscribe newHeads) instead of polled
    /// every `poll_ms` (which stays the fallback).
    #[arg(long)]
    ws_url: Option<String>,
    /// Base: the chain's genesis file.
    #[arg(long, conflicts_with = "datadir")]
    genesis: Option<PathBuf>,
    /// Base: a reth datadir (needs the reth feature).
    #[arg(long)]
    datadir: Option<PathBuf>,
    /// Base: geth's offline export of its whole state, the output of `geth
    /// snapshot dump` (run with geth stopped; no preimages needed),
    /// streamed within the build's memory budget and checked against the
    /// state root of the node's block it is of (one of its newest 1,024).
    #[arg(long, value_name = "FILE", conflicts_with_all = ["genesis", "datadir"])]
    geth_dump: Option<PathBuf>,
    /// Base: the node's own dump of its whole state at its head
    /// (anvil_dumpState; geth's debug_accountRange, geth run with
    /// --cache.preimages from its first block), checked against that
    /// block's state root.
    #[arg(long, conflicts_with_all = ["genesis", "datadir", "geth_dump"])]
    dump: bool,
    /// Follow a node with neither the prestate tracer nor trace_block
    /// (accounts only; some changes are then missed).
    #[arg(long)]
    allow_incomplete: bool,
    /// Which of the node's tracers says what each block changed: auto
    /// (prestate, else parity), prestate (debug_traceBlockByNumber), parity
    /// (trace_*) or blocks (blocks and receipts only).
    #[arg(long, value_enum)]
    changes: Option<snapshotter::sources::changes::ChangeTracer>,
    /// Where to build hints: auto, cpu or cuda.
    #[arg(long)]
    device: Option<Device>,
    /// One step and exit: the base if missing, then the blocks up to the head.
    #[arg(long)]
    once: bool,
    /// Which storage the snapshots hold (overrides `[source] storage`):
    /// `listed` or `all` (every slot of every contract: the whole state;
    /// following it needs the node's trace_replayBlockTransactions).
    #[arg(long, value_enum)]
    storage: Option<StorageScope>,
}

#[derive(Subcommand)]
enum Source {
    /// The state at block 0 from a genesis JSON (its `alloc`).
    Genesis(GenesisArgs),
    /// Accounts from a JSON-RPC node: the active set of the last --window
    /// blocks, (--historical) chosen accounts at an older block, or
    /// (--dump) the full state at its head from the node's own dump
    /// (anvil_dumpState, geth's debug_accountRange), checked against that
    /// block's state root.
    Rpc(RpcArgs),
    /// Accounts from a reth datadir, opened read-only (the node may keep
    /// running): the full state at the head (default), the active set of
    /// the last --window blocks, or the full state at an older --block.
    Reth(RethArgs),
}

#[derive(Args)]
struct GenesisArgs {
    /// The genesis file.
    #[arg(long, conflicts_with = "mainnet", required_unless_present = "mainnet")]
    file: Option<PathBuf>,
    /// Use the bundled Ethereum mainnet genesis (8,893 accounts).
    #[arg(long)]
    mainnet: bool,
    /// Chain id, when the file has no config.chainId.
    #[arg(long)]
    chain_id: Option<u64>,
    #[command(flatten)]
    storage: StorageArgs,
    #[command(flatten)]
    build: BuildArgs,
}

/// Contracts whose storage goes into a full snapshot beside the accounts.
#[derive(Args, Clone, Default)]
struct StorageArgs {
    /// A token list (`[[token]]` entries, as `tokens detect` prints and
    /// configs/tokens-mainnet.toml ships, and `[[contract]]` entries,
    /// contracts listed whole): every storage slot of the chain's tokens
    /// and contracts is exported, so that the proxy runs their calls
    /// privately.
    #[arg(long)]
    tokens: Option<PathBuf>,
    /// Another contract whose every storage slot is exported (repeat for
    /// more): its calls and eth_getStorageAt are answered privately.
    #[arg(long = "contract")]
    contracts: Vec<alloy_primitives::Address>,
    /// Which storage the snapshot holds: `listed` (the contracts above) or
    /// `all` (every slot of every contract: the whole state, which the
    /// manifest claims; a proxy then runs any contract's calls privately).
    #[arg(long, value_enum, default_value_t = StorageScope::Listed)]
    storage: StorageScope,
}

impl StorageArgs {
    /// The contracts of `chain_id` to export.
    fn listed(&self, chain_id: u64) -> Result<PrivateStorage> {
        let source = snapshotter::follow::SourceConfig {
            tokens: self.tokens.clone(),
            contracts: self.contracts.clone(),
            storage: self.storage,
            ..Default::default()
        };
        Ok(source.private_storage(chain_id)?)
    }
}

#[derive(Args)]
struct RpcArgs {
    /// Node URL (http or https).
    #[arg(long, env = "ETHPIR_RPC_URL")]
    url: String,
    /// Active set: accounts touched in this many blocks up to --block.
    #[arg(long, default_value_t = 128)]
    window: u64,
    /// Block to read at (default: the node's head).
    #[arg(long)]
    block: Option<u64>,
    /// Historical snapshot at --block of --addresses or of the accounts
    /// touched in --from-block..=--to-block.
    #[arg(long, requires = "block")]
    historical: bool,
    /// File with one address per line (historical).
    #[arg(long, requires = "historical")]
    addresses: Option<PathBuf>,
    /// First block of the range whose touched accounts to include (historical).
    #[arg(long, requires = "historical")]
    from_block: Option<u64>,
    /// Last block of that range (default: --block).
    #[arg(long, requires = "from_block")]
    to_block: Option<u64>,
    /// A full snapshot at the node's head from the node's dump of its
    /// whole state (anvil_dumpState; geth's debug_accountRange, geth run
    /// with --cache.preimages from its first block; held in memory: for
    /// test and development chains), checked against the head's state
    /// root; with `--storage all`, every slot of every contract.
    #[arg(long, conflicts_with_all = ["historical", "block"])]
    dump: bool,
    #[command(flatten)]
    storage: StorageArgs,
    /// Accounts per JSON-RPC batch.
    #[arg(long, default_value_t = 100)]
    batch_size: usize,
    /// Batches in flight.
    #[arg(long, default_value_t = 4)]
    concurrency: usize,
    /// Call traces (trace_block): auto, on, off.
    #[arg(long, default_value = "auto", value_parser = ["auto", "on", "off"])]
    traces: String,
    #[command(flatten)]
    build: BuildArgs,
}

#[derive(Args)]
struct RethArgs {
    /// The reth datadir (holding db/mdbx.dat).
    #[arg(long)]
    datadir: PathBuf,
    /// The chain's id (the datadir does not record it).
    #[arg(long)]
    chain_id: u64,
    /// Active set of this many blocks instead of the full state.
    #[arg(long, conflicts_with = "block")]
    window: Option<u64>,
    /// The full state at this older block (a full snapshot: absent = 0).
    #[arg(long)]
    block: Option<u64>,
    #[command(flatten)]
    storage: StorageArgs,
    #[command(flatten)]
    build: BuildArgs,
}

impl Source {
    fn build_args(&self) -> &BuildArgs {
        match self {
            Source::Genesis(a) => &a.build,
            Source::Rpc(a) => &a.build,
            Source::Reth(a) => &a.build,
        }
    }
}

#[derive(Args, Clone)]
struct BuildArgs {
    #[command(flatten)]
    settings: BuildSettings,
    /// Do not draw progress bars.
    #[arg(long)]
    no_progress: bool,
    #[command(flatten)]
    retention: RetentionArgs,
}

#[derive(Args, Clone)]
struct RetentionArgs {
    /// Keep this many newest non-historical snapshots per chain (0: keep all).
    #[arg(long, default_value_t = 0)]
    keep_latest: usize,
    /// Block heights never removed by retention.
    #[arg(long = "pin", value_delimiter = ',')]
    pinned: Vec<u64>,
}

impl BuildArgs {
    fn options(&self) -> Result<BuildOptions> {
        Ok(self.settings.options(self.progress())?)
    }

    fn progress(&self) -> Option<ProgressFn> {
        (!self.no_progress).then(terminal_bars)
    }
}

/// Draws the library's progress events as bars on stderr (hidden when it is
/// not a terminal).
fn terminal_bars() -> ProgressFn {
    let bars: Mutex<HashMap<Step, ProgressBar>> = Mutex::new(HashMap::new());
    Arc::new(move |event| {
        let mut bars = bars.lock().expect("progress lock");
        match event {
            ProgressEvent::Begin { step, total } => {
                let bar = match total {
                    Some(n) => ProgressBar::new(n).with_style(
                        ProgressStyle::with_template(&format!(
                            "{{bar:40}} {{pos}}/{{len}} {} {{per_sec}} {{elapsed}}",
                            step.label()
                        ))
                        .expect("valid template"),
                    ),
                    None => {
                        let s = ProgressBar::new_spinner().with_message(step.label());
                        s.enable_steady_tick(std::time::Duration::from_millis(120));
                        s
                    }
                };
                bars.insert(step, bar);
            }
            ProgressEvent::Advance { step, by } => {
                if let Some(bar) = bars.get(&step) {
                    bar.inc(by);
                }
            }
            ProgressEvent::End { step } => {
                if let Some(bar) = bars.remove(&step) {
                    bar.finish_and_clear();
                }
            }
        }
    })
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    protocol::logging::init(&cli.log)?;
    let kernel = pir_core::kernel::init_from_env().context(pir_core::kernel::KERNEL_ENV)?;
    tracing::debug!(%kernel, "PIR product kernel");
    let open_store = || {
        SnapshotStore::open(&cli.store)
            .with_context(|| format!("opening the store {}", cli.store.display()))
    };
    match &cli.command {
        Command::Run(args) => run_follower(&cli.store, cli_store_given(), args),
        Command::Build { source } => build(&open_store()?, source),
        Command::List { json } => list(&open_store()?, *json),
        Command::Pull {
            from,
            every,
            file_timeout_secs,
        } => pull(&open_store()?, from, *every, *file_timeout_secs),
        Command::Plan(args) => plan(args),
        Command::Verify {
            ids,
            lookups,
            state_root,
            url,
        } => {
            let store = open_store()?;
            verify(&store, ids, *lookups)?;
            match state_root {
                true => verify_state_roots(&store, ids, url.as_deref()),
                false => Ok(()),
            }
        }
        Command::Attest {
            url,
            key_file,
            every,
        } => attest(open_store()?, url, key_file, *every),
        Command::Prune {
            chain_id,
            retention,
        } => prune(&open_store()?, *chain_id, retention),
        Command::Tokens {
            command: TokensCommand::Detect(args),
        } => detect_token(args),
    }
}

/// `tokens detect`: prints the list entry, or says why there is none.
fn detect_token(args: &DetectArgs) -> Result<()> {
    let runtime = tokio::runtime::Runtime::new()?;
    let (chain_id, detection) = runtime.block_on(async {
        let source = RpcSource::connect(&args.url, RpcOptions::default()).await?;
        let options = tokens::DetectOptions {
            holders: args.holders.clone(),
            log_window: args.log_window,
            max_index: args.max_index,
            function: args.function.clone(),
            ..Default::default()
        };
        let detection = tokens::detect(&source, args.token, &options).await?;
        anyhow::Ok((source.chain_id, detection))
    })?;
    match detection.entry(chain_id, args.token, &args.symbol) {
        Some(entry) => {
            let list = protocol::tokens::TokenList {
                tokens: vec![entry],
                ..Default::default()
            };
            print!("{}", list.to_toml());
            Ok(())
        }
        None => {
            if let tokens::Detection::NonStandard { reason, block } = &detection {
                println!(
                    "# {} is non-standard at block {block}: {reason}",
                    args.token
                );
            }
            std::process::exit(2);
        }
    }
}

/// Whether `--store` (or ETHPIR_STORE) was given rather than defaulted.
fn cli_store_given() -> bool {
    std::env::args().any(|a| a == "--store" || a.starts_with("--store="))
        || std::env::var_os("ETHPIR_STORE").is_some()
}

/// `run`: the follower, or one step of it with `--once`.
fn run_follower(store: &std::path::Path, store_given: bool, args: &RunArgs) -> Result<()> {
    let mut config = match &args.config {
        Some(path) => FollowConfig::from_file(path)?,
        None => FollowConfig::default(),
    };
    if store_given || config.store.is_none() {
        config.store = Some(store.to_path_buf());
    }
    let source = &mut config.source;
    source.url = args.url.clone().or(source.url.take());
    if args.genesis.is_some() || args.datadir.is_some() || args.geth_dump.is_some() || args.dump {
        source.genesis = args.genesis.clone();
        source.datadir = args.datadir.clone();
        source.geth_dump = args.geth_dump.clone();
        source.dump = args.dump;
    }
    source.allow_incomplete |= args.allow_incomplete;
    source.changes = args.changes.unwrap_or(source.changes);
    source.storage = args.storage.unwrap_or(source.storage);
    config.follow.ws_url = args.ws_url.clone().or(config.follow.ws_url.take());
    if let Some(device) = args.device {
        config.build.device = device;
    }
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(async {
        if args.once {
            let block = follow::run_once(config).await?;
            println!("{block}");
        } else {
            follow::run(config, async {
                let _ = tokio::signal::ctrl_c().await;
            })
            .await?;
        }
        Ok(())
    })
}

/// `pull`: once, or every `every` seconds until Ctrl-C (a failed pass is
/// logged and tried again).
fn pull(store: &SnapshotStore, from: &str, every: Option<f64>, file_timeout: u64) -> Result<()> {
    let puller =
        snapshotter::pull::Puller::new(from, std::time::Duration::from_secs(file_timeout))?;
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(async {
        let Some(every) = every else {
            let report = puller.pull_once(store).await?;
            println!(
                "pulled {} snapshot(s) ({} bytes), removed {}, {} new attestation(s)",
                report.fetched.len(),
                report.bytes,
                report.removed.len(),
                report.attestations
            );
            return Ok(());
        };
        let mut tick = tokio::time::interval(protocol::config::seconds(every, 0.1, 1e9));
        let stop = tokio::signal::ctrl_c();
        tokio::pin!(stop);
        loop {
            tokio::select! {
                _ = &mut stop => return Ok(()),
                _ = tick.tick() => {
                    if let Err(e) = puller.pull_once(store).await {
                        tracing::warn!(error = %e, "pull failed; trying again");
                    }
                }
            }
        }
    })
}

/// `build`: export from the source, build, publish, apply retention.
fn build(store: &SnapshotStore, source: &Source) -> Result<()> {
    let build = source.build_args();
    let options = build.options()?;
    let base = match source {
        Source::Genesis(args) => Base::Held(export_genesis(args)?),
        Source::Rpc(args) => Base::Held(export_rpc(args)?),
        Source::Reth(args) => export_reth(args)?,
    };
    snapshotter::failpoint::hit("export");
    let chain_id = base.meta().chain_id;
    match base.publish(store, &options) {
        Ok(snap) => println!("{}", snap.path.display()),
        Err(PublishError::Build(BuildError::Store(StoreError::Exists(id)))) => {
            tracing::info!(snapshot = %id, "already published; nothing to do");
        }
        Err(e) => return Err(e.into()),
    }
    prune(store, chain_id, &build.retention)
}

fn export_genesis(args: &GenesisArgs) -> Result<ExportedState> {
    match (&args.file, args.mainnet) {
        (_, true) => {
            let listed = args.storage.listed(1)?;
            let mut state = genesis::mainnet();
            // Mainnet's genesis has no contracts: listing one only records
            // that its storage (empty) is held.
            state.listed = listed;
            Ok(state)
        }
        (Some(f), false) => {
            let chain_id = match args.chain_id {
                Some(c) => c,
                None => {
                    genesis::read_genesis(f, None)
                        .with_context(|| format!("reading genesis {}", f.display()))?
                        .chain_id
                }
            };
            genesis::read_genesis_listed(f, Some(chain_id), &args.storage.listed(chain_id)?)
                .with_context(|| format!("reading genesis {}", f.display()))
        }
        (None, false) => bail!("--file or --mainnet"),
    }
}

#[cfg(feature = "reth")]
fn export_reth(args: &RethArgs) -> Result<Base> {
    let mode = match (args.window, args.block) {
        (Some(window), _) => RethMode::Active { window },
        (None, Some(block)) => RethMode::FullAt { block },
        (None, None) => RethMode::Full,
    };
    let listed = args.storage.listed(args.chain_id)?;
    Ok(export_base(&args.datadir, mode, args.chain_id, listed)?)
}

#[cfg(not(feature = "reth"))]
fn export_reth(_: &RethArgs) -> Result<Base> {
    bail!("this build has no reth support: rebuild with `cargo build --release -p snapshotter --features reth` (needs libclang-dev)")
}

fn export_rpc(args: &RpcArgs) -> Result<ExportedState> {
    let options = RpcOptions {
        batch_size: args.batch_size,
        concurrency: args.concurrency,
        traces: match args.traces.as_str() {
            "on" => Traces::On,
            "off" => Traces::Off,
            _ => Traces::Auto,
        },
        progress: args.build.progress(),
        ..Default::default()
    };
    let s = &args.storage;
    if !args.dump
        && (s.tokens.is_some() || !s.contracts.is_empty() || s.storage != StorageScope::Listed)
    {
        bail!("--tokens, --contract and --storage apply to a full snapshot (--dump); an active set or a historical snapshot holds accounts only");
    }
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(async {
        let node = RpcSource::connect(&args.url, options).await?;
        if args.dump {
            let listed = args.storage.listed(node.chain_id)?;
            return node.export_dump(&listed).await?.with_context(|| {
                format!(
                    "the node at {} offers no state dump (anvil_dumpState, debug_accountRange)",
                    protocol::url::redact(&args.url)
                )
            });
        }
        if !args.historical {
            return Ok(node.export_active(args.window, args.block).await?);
        }
        let at = args.block.context("--historical needs --block")?;
        let list = match (&args.addresses, args.from_block) {
            (Some(f), _) => rpc::read_address_file(f)?,
            (None, Some(from)) => node
                .touched(from, args.to_block.unwrap_or(at))
                .await?
                .into_iter()
                .collect(),
            (None, None) => bail!("--historical needs --addresses or --from-block"),
        };
        Ok(node.export_historical(list, at).await?)
    })
}

/// `list`: one line per snapshot, or the manifests as JSON lines.
/// `plan`: the estimated database of a base and of a level.
fn plan(args: &PlanArgs) -> Result<()> {
    let records = args.accounts.saturating_add(args.slots);
    let (value_bytes, shards, json) = (args.value_bytes, args.shards, args.json);
    let (arity, packing, base_packing) = args.layout.resolve()?;
    let kinds = [
        ("base", base_packing.unwrap_or(packing)),
        ("level", packing),
    ];
    // Written, not printed: a closed pipe (`| head`) ends it with an error.
    let mut out = std::io::stdout().lock();
    if !json {
        writeln!(
            out,
            "records: {} accounts + {} slots = {records}; {shards} shard(s)",
            args.accounts, args.slots
        )?;
        writeln!(out, "kind   packing  k      rows        query KiB  response KiB  lookup KiB  hint MiB  database MiB  shard MiB  pass s/core")?;
    }
    let mut base = None;
    for (kind, packing) in kinds {
        let p = plan_row(&mut out, args, (kind, arity, packing), records)?;
        if kind == "base" {
            base = Some(p);
        }
    }
    let base = base.expect("a base row");
    args.hot
        .write(&mut out, base.query_bytes, value_bytes, json)?;
    args.gpu
        .write(&mut out, base.database_bytes, base.query_bytes, json)?;
    Ok(())
}

/// One row of `plan` (a base's or a level's shape); the shape's plan.
fn plan_row(
    out: &mut impl std::io::Write,
    args: &PlanArgs,
    (kind, arity, packing): (&str, pir_core::Arity, Packing),
    records: usize,
) -> Result<pir_core::db::Plan> {
    let (value_bytes, shards) = (args.value_bytes, args.shards);
    let options = pir_core::EncodeOptions { arity, packing };
    let p = pir_core::db::plan(records, value_bytes, &options)
        .with_context(|| format!("{records} accounts"))?;
    let kib = |b: u64| b as f64 / 1024.0;
    let mib = |b: u64| b as f64 / (1 << 20) as f64;
    let lookup = p.query_bytes + p.response_bytes;
    let shard_bytes = p.database_bytes.div_ceil(shards);
    let pass_s = shard_bytes as f64 / (args.core_gbs * 1e9);
    if args.json {
        let line = serde_json::json!({
            "accounts": args.accounts, "slots": args.slots, "records": records,
            "shards": shards, "shard_database_bytes": shard_bytes, "pass_s_per_core": pass_s,
            "kind": kind, "packing": format!("{packing:?}"),
            "partitions": p.partitions, "rows": p.rows, "plaintext_bits": p.plaintext_bits,
            "query_bytes": p.query_bytes, "response_bytes": p.response_bytes,
            "lookup_bytes": lookup, "hint_bytes": p.hint_bytes, "database_bytes": p.database_bytes,
        });
        writeln!(out, "{line}")?;
        return Ok(p);
    }
    let name = match packing {
        Packing::Fixed(_) => "fixed",
        Packing::Auto { .. } => "budget",
        Packing::ForLookup { .. } => "target",
    };
    writeln!(
        out,
        "{kind:<6} {name:<8} {:<6} {:<11} {:<10.1} {:<13.1} {:<11.1} {:<9.1} {:<13.1} {:<10.1} {:.3}",
        p.partitions,
        p.rows,
        kib(p.query_bytes),
        kib(p.response_bytes),
        kib(lookup),
        mib(p.hint_bytes),
        mib(p.database_bytes),
        mib(shard_bytes),
        pass_s
    )?;
    Ok(p)
}

fn list(store: &SnapshotStore, json: bool) -> Result<()> {
    for s in store.list()? {
        if json {
            println!("{}", serde_json::to_string(&s.manifest)?);
            continue;
        }
        let m = &s.manifest;
        println!(
            "{:<28} {:>9} accounts  k={:<4} hint {:>7.1} MiB  query {:>6.1} KiB  created {}",
            s.id.to_string(),
            m.record_count,
            m.pir.partitions,
            m.pir.hint_bytes as f64 / (1 << 20) as f64,
            m.pir.query_bytes as f64 / 1024.0,
            m.created_at
        );
    }
    Ok(())
}

/// `verify`: check the named snapshots (all when none).
fn verify(store: &SnapshotStore, ids: &[SnapshotId], lookups: usize) -> Result<()> {
    let snaps = if ids.is_empty() {
        store.list()?
    } else {
        ids.iter()
            .map(|id| store.get(id))
            .collect::<Result<Vec<_>, _>>()?
    };
    let mut bad = 0;
    for s in &snaps {
        match snapshotter::verify::verify(store, s, lookups) {
            Ok(v) if v.lookups > 0 => println!(
                "ok      {} ({} private lookups, {:.0} ms each)",
                s.id,
                v.lookups,
                v.lookup_s * 1e3
            ),
            Ok(_) => println!("ok      {}", s.id),
            Err(e) => {
                bad += 1;
                println!("FAILED  {}: {e}", s.id);
            }
        }
    }
    if bad > 0 {
        bail!("{bad} of {} snapshots failed verification", snaps.len());
    }
    Ok(())
}

/// Whether a hot tier's values are the view's at its block (printed).
fn hot_is_the_views(
    store: &SnapshotStore,
    snap: &snapshotter::store::StoredSnapshot,
    all: &[snapshotter::store::StoredSnapshot],
) -> bool {
    let block = snap.manifest.block_number;
    match snapshotter::hot::check_against_view(store, snap, all, |_| true) {
        Ok(n) => {
            println!(
                "ok      {}: its {n} records are the view's at block {block}",
                snap.id
            );
            true
        }
        Err(e) => {
            println!("FAILED  {}: {e}", snap.id);
            false
        }
    }
}

/// `verify --state-root`: the state root of the view at each named
/// snapshot's block (all snapshots when none), against its manifest and,
/// with `url`, the node's header.
fn verify_state_roots(store: &SnapshotStore, ids: &[SnapshotId], url: Option<&str>) -> Result<()> {
    let all = store.list()?;
    let named: Vec<_> = all
        .iter()
        .filter(|s| ids.is_empty() || ids.contains(&s.id))
        .cloned()
        .collect();
    let views = protocol::view::Views::build(&snapshotter::store::as_entries(&all));
    let runtime = tokio::runtime::Runtime::new()?;
    let node = match url {
        Some(url) => Some(runtime.block_on(RpcSource::connect(url, RpcOptions::default()))?),
        None => None,
    };
    let mut bad = 0;
    for snap in &named {
        let (chain, block) = (snap.manifest.chain_id, snap.manifest.block_number);
        // A hot tier: its values the view's at its block, whose root is
        // then checked as any.
        let is_hot = matches!(snap.manifest.kind, protocol::SnapshotKind::Hot { .. });
        if is_hot && !hot_is_the_views(store, snap, &all) {
            bad += 1;
            continue;
        }
        let view = match views.at(chain, block).filter(|v| v.complete) {
            Some(v) if snap.manifest.kind.is_whole_state() || is_hot => v,
            _ => {
                println!("skip    {}: not a whole state (an active set, a historical snapshot, or a delta without its base)", snap.id);
                continue;
            }
        };
        let levels: Vec<_> = view
            .snapshots
            .iter()
            .filter_map(|id| all.iter().find(|s| &s.id == id).cloned())
            .collect();
        let top = &levels.last().expect("a view has a level").manifest;
        let header = match &node {
            Some(node) => Some(runtime.block_on(node.root_of(top))?),
            None => None,
        };
        let checked = header.map_or(Ok(None), |h| h.map(Some)).and_then(|root| {
            snapshotter::verify::verify_state_root(store, &levels[0], &levels[1..], root)
                .map_err(|e| e.to_string())
        });
        match checked {
            Ok(c) => println!(
                "ok      {}: state root {} at block {} ({} listed contracts' storage)",
                snap.id, c.root, c.block, c.contracts
            ),
            Err(e) => {
                bad += 1;
                println!("FAILED  {}: {e}", snap.id);
            }
        }
    }
    if bad > 0 {
        bail!("{bad} of {} state roots failed verification", named.len());
    }
    Ok(())
}

/// `attest`: check and sign the store's snapshots, once or every `every`
/// seconds.
fn attest(
    store: SnapshotStore,
    url: &str,
    key_file: &std::path::Path,
    every: Option<u64>,
) -> Result<()> {
    let key = std::fs::read_to_string(key_file)
        .with_context(|| format!("reading the key file {}", key_file.display()))?;
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(async {
        let node = RpcSource::connect(url, RpcOptions::default())
            .await?
            .with_code_store(store.clone());
        let attester = snapshotter::attest::Attester::new(store, node, &key)?;
        tracing::info!(signer = %attester.address(), "attesting");
        loop {
            for (id, outcome) in attester.attest_store().await? {
                use snapshotter::attest::Outcome;
                match outcome {
                    Outcome::Signed => println!("signed  {id}"),
                    Outcome::Refused(why) => println!("REFUSED {id}: {why}"),
                    Outcome::AlreadySigned | Outcome::NotAttestable(_) => {}
                }
            }
            match every {
                Some(secs) => tokio::time::sleep(std::time::Duration::from_secs(secs.max(1))).await,
                None => return Ok(()),
            }
        }
    })
}

/// `prune`: apply the retention policy.
fn prune(store: &SnapshotStore, chain_id: u64, retention: &RetentionArgs) -> Result<()> {
    if retention.keep_latest == 0 {
        return Ok(());
    }
    for id in store.apply_retention(chain_id, retention.keep_latest, &retention.pinned)? {
        tracing::info!(snapshot = %id, "removed by retention");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::GpuPlan;

    fn gpu_line(plan: &GpuPlan, database_bytes: u64) -> serde_json::Value {
        let mut out = Vec::new();
        plan.write(&mut out, database_bytes, 3_538_944, true)
            .unwrap();
        serde_json::from_slice(&out).unwrap()
    }

    /// The GPU count is the larger of what holds the base and what
    /// answers the load, and the load's figures follow from it.
    #[test]
    fn gpus_hold_the_base_and_answer_the_load() {
        let mut plan = GpuPlan {
            gpu_memory_gib: 141.0,
            gpu_scan_gbs: 3700.0,
            gpu_batch_gbs: 22500.0,
            lookups_per_s: 1600.0,
        };
        // Mainnet's whole state (66.4 GB): one card holds it, five answer.
        let line = gpu_line(&plan, 66_390_000_000);
        assert_eq!(line["gpus_to_hold"], 1.0);
        assert_eq!(line["gpus"], 5.0);
        assert!(line["lookups_per_s_capacity"].as_f64().unwrap() >= 1600.0);
        // A base four H100s must hold, under a light load.
        plan.gpu_memory_gib = 80.0;
        plan.lookups_per_s = 10.0;
        let line = gpu_line(&plan, 250_000_000_000);
        assert_eq!(line["gpus_to_hold"], 4.0);
        assert_eq!(line["gpus"], 4.0);
        // No load named: no GPU lines.
        plan.lookups_per_s = 0.0;
        let mut out = Vec::new();
        plan.write(&mut out, 1, 1, true).unwrap();
        assert!(out.is_empty());
    }
}
