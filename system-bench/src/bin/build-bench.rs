//! `build-bench`: one base build of random accounts through the real
//! pipeline (records.bin written, encoded from it into db.bin laid out in
//! place, hint on all cores or the GPU, atomic publish), with its phases'
//! seconds and the process's peak memory; one JSON line. By default the
//! accounts are made in memory first (as an export of a JSON-RPC node or
//! a plain-state datadir hands them over), so the peak includes them;
//! `--streamed` makes them one at a time in key order straight into
//! records.bin, as a hashed-state export can; `--slots N` adds N storage
//! slots of the accounts' contracts (a whole-state base, streamed too).
#![forbid(unsafe_code)]

use std::time::Instant;

use anyhow::{Context, Result};
use clap::Parser;
use serde_json::json;
use snapshotter::pipeline::{
    build_and_publish, build_and_publish_streamed, peak_rss_bytes, resolve_packing, BuildOptions,
    HintBudget,
};
use snapshotter::records::write_record_stream;
use snapshotter::slot_sort::SlotSorter;
use snapshotter::SnapshotStore;
use system_bench::AnonPeak;

#[derive(Parser)]
#[command(
    name = "build-bench",
    about = "Time a base build of random accounts and measure its peak memory",
    long_about = "Builds one full snapshot of random accounts into a fresh store under --dir with \
the same pipeline as `ethpir-snapshot build` (hint on the GPU when there is one, else all cores), and \
prints one JSON line: seconds per phase, peak resident memory (VmHWM: every page the process had \
mapped at once, the page cache of records.bin and db.bin included) and peak anonymous memory \
(RssAnon sampled every 50 ms: what the build itself holds), file sizes and the PIR shape. The \
store is removed afterwards unless --keep."
)]
struct Args {
    /// log2 of the number of accounts.
    #[arg(long, default_value_t = 24)]
    log2_accounts: u32,
    /// The number of accounts (instead of 2^--log2-accounts), e.g.
    /// 350000000 for mainnet's order.
    #[arg(long)]
    accounts: Option<u64>,
    /// Make the accounts one at a time in key order straight into
    /// records.bin (a hashed-state export), instead of all in memory first.
    #[arg(long)]
    streamed: bool,
    /// Storage slots besides the accounts: a whole-state base (every
    /// slot of every contract claimed held), streamed. The slots belong
    /// to the accounts' contracts (one account in five), skewed as on
    /// mainnet: a few contracts hold most of them. They are sorted by key
    /// within --encode-memory-mib, in runs spilled beside the store, as a
    /// reth datadir's are.
    #[arg(long, default_value_t = 0, requires = "streamed")]
    slots: u64,
    /// The encoder's working memory, MiB.
    #[arg(long, default_value_t = 1024)]
    encode_memory_mib: u64,
    /// Where the store is built.
    #[arg(long, default_value = "./build-bench-data")]
    dir: std::path::PathBuf,
    /// Where the hint is built, as the snapshotter's --device: auto (a
    /// CUDA GPU when one is usable, else all cores), cpu or cuda.
    #[arg(long, default_value = "auto")]
    device: gpu_kernels::Device,
    /// Keep the store.
    #[arg(long)]
    keep: bool,
    /// Then recompute the base's state root as `verify --state-root` does
    /// (records.bin digest-checked, then the trie on every core), timed.
    #[arg(long)]
    state_root: bool,
}

fn main() -> Result<()> {
    let args = Args::parse();
    protocol::logging::init("warn")?;
    let count = args.accounts.unwrap_or(1 << args.log2_accounts);
    let dir = args.dir.join(format!("store-{count}"));
    if dir.exists() {
        std::fs::remove_dir_all(&dir).with_context(|| format!("clearing {}", dir.display()))?;
    }
    let store = SnapshotStore::open(&dir)?;
    let anon = AnonPeak::start();
    // The packing `ethpir-snapshot build` gives a base by default
    // (hint_budget_mib = "auto": the per-lookup target of 1.5 MiB).
    let (packing, base_packing) = resolve_packing("auto", HintBudget::Auto, 1536, 512)?;
    let options = BuildOptions {
        packing,
        base_packing,
        encode_memory_bytes: usize::try_from(args.encode_memory_mib << 20)?,
        hint: std::sync::Arc::new(args.device),
        ..Default::default()
    };
    let (snap, made_s, build_s) = build(&store, &args, count, &options)?;
    let state_root_s = match args.state_root {
        true => Some(time_state_root(&store, &snap)?),
        false => None,
    };
    println!(
        "{}",
        report(&snap.manifest, &args, made_s, build_s, state_root_s, &anon)
    );
    if !args.keep {
        std::fs::remove_dir_all(&dir)?;
    }
    Ok(())
}

/// Builds the base of `count` synthetic accounts: the snapshot, the
/// seconds making the accounts took (held ones only) and the build's.
fn build(
    store: &SnapshotStore,
    args: &Args,
    count: u64,
    options: &BuildOptions,
) -> Result<(snapshotter::StoredSnapshot, f64, f64)> {
    let started = Instant::now();
    let (snap, made_s) = if args.streamed {
        let mut meta = system_bench::synthetic_base(Vec::new(), 0.0);
        let contracts = match args.slots {
            0 => Vec::new(),
            _ => {
                meta.listed = protocol::storage::PrivateStorage::whole_state();
                system_bench::contract_keys(count)
            }
        };
        let runs = store.scratch_dir("slot-runs");
        let snap = build_and_publish_streamed(store, &meta, options, |w| {
            // As a reth v2 base does: the slots sorted by key in runs
            // within the encoder's memory, merged as they are written.
            let mut sorter = SlotSorter::new(runs, options.encode_memory_bytes);
            for slot in system_bench::synthetic_slots(args.slots, &contracts) {
                sorter.push(slot)?;
            }
            let accounts = system_bench::hashed_accounts_in_order(count);
            sorter
                .finish()?
                .write_with(|slots| write_record_stream(count, accounts, args.slots, slots, w))
        })?;
        (snap, 0.0)
    } else {
        let records = system_bench::random_accounts(count, count);
        let made_s = started.elapsed().as_secs_f64();
        let state = system_bench::synthetic_base(records, made_s);
        (build_and_publish(store, state, options)?, made_s)
    };
    Ok((snap, made_s, started.elapsed().as_secs_f64() - made_s))
}

/// The JSON line of one build.
fn report(
    m: &snapshotter::Manifest,
    args: &Args,
    made_s: f64,
    build_s: f64,
    state_root_s: Option<f64>,
    anon: &AnonPeak,
) -> serde_json::Value {
    let file = |name: &str| m.files.get(name).map_or(0, |f| f.bytes);
    json!({
        "bench": "base-build",
        "records": m.record_count,
        "slots": args.slots,
        "whole_state": m.storage.whole_state,
        "streamed": args.streamed,
        "encode_memory_mib": args.encode_memory_mib,
        "accounts_made_s": made_s,
        "build_s": build_s,
        "state_root_s": state_root_s,
        "encode_s": m.build.encode_s,
        "hint_s": m.build.hint_s,
        "write_s": m.build.write_s,
        "hint_device": m.build.hint_device,
        "peak_rss_mib": peak_rss_bytes().map(|b| b >> 20),
        "peak_anon_mib": anon.mib(),
        "k": m.pir.partitions,
        "rows": m.pir.rows,
        "db_mib": file(snapshotter::store::DB_FILE) >> 20,
        "records_mib": file(snapshotter::store::RECORDS_FILE) >> 20,
        "setup_mib": file(snapshotter::store::SETUP_FILE) >> 20,
        "query_plus_response_kib": (m.pir.query_bytes + m.pir.response_bytes) >> 10,
        "cpu": system_bench::cpu_model(),
        "cores": std::thread::available_parallelism().map(usize::from).unwrap_or(1),
        "kernel": pir_core::kernel::active().name(),
    })
}

/// Seconds `verify --state-root` takes on the base (the digest check of
/// records.bin included), and the root it gives.
fn time_state_root(store: &SnapshotStore, snap: &snapshotter::StoredSnapshot) -> Result<f64> {
    let started = Instant::now();
    let check = snapshotter::verify::view_state_root(store, snap, &[])?;
    let seconds = started.elapsed().as_secs_f64();
    eprintln!("state root {} in {seconds:.1} s", check.root);
    Ok(seconds)
}
