//! `build-bench`: one base build of 2^N random accounts through the real
//! pipeline (encode, hint on all cores or the GPU, files streamed to disk,
//! atomic publish), with its phases' seconds and the process's peak
//! resident memory; one JSON line. The accounts are made in memory first
//! (as an export would hand them over), so the peak includes them.
#![forbid(unsafe_code)]

use std::time::Instant;

use anyhow::{Context, Result};
use clap::Parser;
use serde_json::json;
use snapshotter::pipeline::{
    build_and_publish, peak_rss_bytes, resolve_packing, BuildOptions, HintBudget,
};
use snapshotter::SnapshotStore;

#[derive(Parser)]
#[command(
    name = "build-bench",
    about = "Time a base build of 2^N random accounts and measure its peak memory",
    long_about = "Builds one full snapshot of 2^N random accounts into a fresh store under --dir with \
the same pipeline as `ethpir-snapshot build` (hint on the GPU when there is one, else all cores), and \
prints one JSON line: seconds per phase, peak resident memory (VmHWM, accounts included), file sizes \
and the PIR shape. The store is removed afterwards unless --keep."
)]
struct Args {
    /// log2 of the number of accounts.
    #[arg(long, default_value_t = 24)]
    log2_accounts: u32,
    /// Where the store is built.
    #[arg(long, default_value = "./build-bench-data")]
    dir: std::path::PathBuf,
    /// Keep the store.
    #[arg(long)]
    keep: bool,
}

fn main() -> Result<()> {
    let args = Args::parse();
    protocol::logging::init("warn")?;
    let dir = args.dir.join(format!("store-{}", args.log2_accounts));
    if dir.exists() {
        std::fs::remove_dir_all(&dir).with_context(|| format!("clearing {}", dir.display()))?;
    }
    let store = SnapshotStore::open(&dir)?;
    let started = Instant::now();
    let records = demo::bench::accounts(args.log2_accounts);
    let made_s = started.elapsed().as_secs_f64();
    let state = demo::bench::synthetic_base(records, made_s);
    let built = Instant::now();
    // The packing `ethpir-snapshot build` gives a base by default
    // (hint_budget_mib = "auto": the per-lookup target of 1.5 MiB).
    let (packing, base_packing) = resolve_packing("auto", HintBudget::Auto, 1536, 512)?;
    let options = BuildOptions {
        packing,
        base_packing,
        ..Default::default()
    };
    let snap = build_and_publish(&store, state, &options)?;
    let build_s = built.elapsed().as_secs_f64();
    let m = &snap.manifest;
    let file = |name: &str| m.files.get(name).map_or(0, |f| f.bytes);
    println!(
        "{}",
        json!({
            "bench": "base-build",
            "log2_accounts": args.log2_accounts,
            "records": m.record_count,
            "accounts_made_s": made_s,
            "build_s": build_s,
            "encode_s": m.build.encode_s,
            "hint_s": m.build.hint_s,
            "write_s": m.build.write_s,
            "hint_device": m.build.hint_device,
            "peak_rss_mib": peak_rss_bytes().map(|b| b >> 20),
            "k": m.pir.partitions,
            "db_mib": file(snapshotter::store::DB_FILE) >> 20,
            "records_mib": file(snapshotter::store::RECORDS_FILE) >> 20,
            "setup_mib": file(snapshotter::store::SETUP_FILE) >> 20,
            "cpu": demo::bench::cpu_model(),
            "cores": std::thread::available_parallelism().map(usize::from).unwrap_or(1),
            "kernel": pir_core::kernel::active().name(),
        })
    );
    if !args.keep {
        std::fs::remove_dir_all(&dir)?;
    }
    Ok(())
}
