//! `pir-bench`: times pir-core on a random key-value database and, with
//! `--peer`, the published ChalametPIR 0.8.0 crates on the same records in
//! the same process. Prints one JSON object per implementation, then the
//! ratios (reference / ours).
#![forbid(unsafe_code)]

mod machine;

use std::collections::HashMap;
use std::time::Instant;

use anyhow::{ensure, Context, Result};
use clap::Parser;
use pir_core::kernel::{self, Kernel};
use pir_core::wire::{decode_responses, encode_queries};
use pir_core::{Arity, EncodeOptions, EncodedDb, Lookup, Packing, PirClient, PirServer};
use rand::{Rng, RngCore, SeedableRng};
use rand_chacha::ChaCha20Rng;
use serde_json::{json, Map, Value};

#[derive(Parser, Debug)]
#[command(
    name = "pir-bench",
    about = "Benchmark the PIR engine (and, with --peer, ChalametPIR 0.8.0) on a random database",
    long_about = "Builds a random database of 2^N keys, runs setup, client setup, query preparation, \
                  online queries, single and batched answers and decoding, checks every answer, and \
                  prints one JSON line per implementation. Timings are medians over --reps runs."
)]
struct Args {
    /// Only measure query preparation (`b0 = s.A + e`) for a database of
    /// this many rows (393216: the 1.5 MiB mainnet shape), on one core:
    /// TurboSHAKE128 with every kernel the CPU has (each expands `A` its own
    /// way), then AES-128 in counter mode.
    #[arg(long)]
    prepare_rows: Option<usize>,
    /// With --prepare-rows: also prepare this many queries on all cores,
    /// one by one and then as one batch (what a first refresh of that many
    /// keys waits on), AES-128 only.
    #[arg(long)]
    prepare_batch: Option<usize>,
    /// log2 of the number of keys.
    #[arg(long, default_value_t = 16)]
    log2_keys: u32,
    /// Bytes per key.
    #[arg(long, default_value_t = 20)]
    key_bytes: usize,
    /// Bytes per value.
    #[arg(long, default_value_t = 40)]
    value_bytes: usize,
    /// Binary fuse filter arity.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u8).range(3..=4))]
    arity: u8,
    /// Queries per batched answer.
    #[arg(long, default_value_t = 16)]
    batch: usize,
    /// Packing factor k: "auto" (choose under --hint-budget-mib) or a number (1 = plain ChalametPIR).
    #[arg(long, default_value = "auto")]
    packing: String,
    /// Hint budget for automatic packing, MiB.
    #[arg(long, default_value_t = 32)]
    hint_budget_mib: u64,
    /// Pack as a base is packed: the smallest hint (at least
    /// --hint-budget-mib, at most --hint-cap-mib) that keeps a lookup's
    /// query + response under this many KiB (the snapshotter's default for
    /// bases: 1536). Overrides --packing.
    #[arg(long)]
    lookup_target_kib: Option<u64>,
    /// The largest hint --lookup-target-kib may choose, MiB.
    #[arg(long, default_value_t = 512)]
    hint_cap_mib: u64,
    /// Public-matrix expansion of the measured setup: aes128-ctr or turboshake128.
    #[arg(long, default_value_t = pir_core::Expansion::default())]
    expansion: pir_core::Expansion,
    /// Where the hint is built and the answers computed: cpu, cuda (an NVIDIA GPU, the
    /// database held in its memory, its name in the output) or auto.
    #[arg(long, default_value = "cpu")]
    device: gpu_kernels::Device,
    /// Product kernel: auto (the best this CPU has, or $ETHPIR_KERNEL), avx512-vnni, avx2 or
    /// portable. A kernel the CPU lacks is refused.
    #[arg(long, default_value = "auto")]
    kernel: String,
    /// Skip measuring the machine's memory read bandwidth (it reads a buffer of 4x the
    /// last-level cache, at least 1 GiB).
    #[arg(long)]
    no_memread: bool,
    /// Repetitions per timing (median reported).
    #[arg(long, default_value_t = 5)]
    reps: usize,
    /// Also run the published chalametpir_server / chalametpir_client 0.8.0.
    #[arg(long)]
    peer: bool,
    /// RNG seed of the database.
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn time_ms<T>(f: impl FnOnce() -> T) -> (T, f64) {
    let t = Instant::now();
    let out = f();
    (out, t.elapsed().as_secs_f64() * 1e3)
}

fn main() -> Result<()> {
    let args = Args::parse();
    if let Some(rows) = args.prepare_rows {
        if let Some(count) = args.prepare_batch {
            return bench_prepare_batch(rows, count, args.reps);
        }
        return bench_prepare(rows, args.reps);
    }
    ensure!(args.log2_keys <= 26, "--log2-keys at most 26");
    ensure!(
        args.reps >= 1 && args.batch >= 1,
        "--reps and --batch must be positive"
    );
    let chosen = match args.kernel.as_str() {
        "auto" => kernel::kernel_from_env()?.unwrap_or_else(Kernel::best),
        name => Kernel::parse_supported(name)?,
    };
    kernel::select(chosen)?;
    let n = 1usize << args.log2_keys;
    let mut rng = ChaCha20Rng::seed_from_u64(args.seed);
    let records: Vec<(Vec<u8>, Vec<u8>)> = (0..n)
        .map(|_| {
            let mut k = vec![0u8; args.key_bytes];
            let mut v = vec![0u8; args.value_bytes];
            rng.fill_bytes(&mut k);
            rng.fill_bytes(&mut v);
            (k, v)
        })
        .collect();
    let probes: Vec<usize> = (0..args.reps.max(args.batch))
        .map(|_| rng.random_range(0..n))
        .collect();

    let mut ours = bench_ours(&args, &records, &probes)?;
    add_machine(&mut ours, !args.no_memread);
    println!("{}", Value::Object(ours.clone()));
    if args.peer {
        let peer = bench_reference(&args, &records, &probes)?;
        println!("{}", Value::Object(peer.clone()));
        let ratios = ratios(&peer, &ours);
        println!("{}", json!({ "ratios": ratios }));
    }
    Ok(())
}

/// The reference's figure over ours, for every figure both have.
fn ratios(peer: &Map<String, Value>, ours: &Map<String, Value>) -> Map<String, Value> {
    let mut ratios = Map::new();
    for key in [
        "setup_s",
        "client_setup_s",
        "query_ms",
        "respond_ms",
        "respond_batch_ms_per_query",
        "decode_ms",
        "query_bytes",
        "response_bytes",
        "client_state_bytes",
        "hint_bytes",
    ] {
        if let (Some(r), Some(o)) = (peer[key].as_f64(), ours[key].as_f64()) {
            ratios.insert(key.into(), json!(r / o));
        }
    }
    // The reference has no separate preparation: compare its whole query with our preparation.
    if let (Some(r), Some(o)) = (peer["query_ms"].as_f64(), ours["prepare_ms"].as_f64()) {
        ratios.insert("query_ms_vs_prepare_ms".into(), json!(r / o));
    }
    ratios
}

/// Our server and client over the records, and what making them cost.
struct Ours {
    server: PirServer,
    /// The database held on the GPU (`--device cuda`, or `auto` with one).
    answers: Option<gpu_kernels::GpuAnswers>,
    client: PirClient,
    shape: pir_core::DbShape,
    db_bytes: usize,
    report: gpu_kernels::HintReport,
    encode_ms: f64,
    hint_ms: f64,
    client_setup_ms: f64,
}

fn setup_ours(args: &Args, records: &[(Vec<u8>, Vec<u8>)], rng: &mut ChaCha20Rng) -> Result<Ours> {
    let packing = match args.lookup_target_kib {
        Some(kib) => Packing::ForLookup {
            lookup_bytes: kib << 10,
            hint_floor_bytes: args.hint_budget_mib << 20,
            hint_cap_bytes: args.hint_cap_mib << 20,
        },
        None => Packing::parse(&args.packing, args.hint_budget_mib).context("--packing")?,
    };
    let arity = Arity::from_u8(args.arity).context("--arity")?;
    let (db, encode_ms) = time_ms(|| {
        EncodedDb::encode(
            records,
            args.value_bytes,
            &EncodeOptions { arity, packing },
            &mut *rng,
        )
    });
    let db = db?;
    let matrix = pir_core::PublicMatrix::new(args.expansion, rng.random());
    let db_bytes = db.bytes();
    let shape = db.shape().clone();
    let hint_start = Instant::now();
    let (hint, report) = gpu_kernels::build_hint(&db, &matrix, args.device)
        .map_err(|e| anyhow::anyhow!("hint on {}: {e}", args.device))?;
    let hint_ms = hint_start.elapsed().as_secs_f64() * 1e3;
    let server = PirServer::from_parts(db, matrix, hint)?;
    let batch = args.batch.max(1);
    let answers = match gpu_kernels::hold_for_answers(server.db(), args.device, batch, 0)? {
        gpu_kernels::AnswerPlace::Gpu(gpu) => Some(gpu),
        gpu_kernels::AnswerPlace::Cpu(_) | gpu_kernels::AnswerPlace::CpuForNow(_) => None,
    };
    let (client, client_setup_ms) = time_ms(|| PirClient::from_setup_bytes(server.setup_bytes()));
    Ok(Ours {
        client: client?,
        server,
        answers,
        shape,
        db_bytes,
        report,
        encode_ms,
        hint_ms,
        client_setup_ms,
    })
}

/// Per-lookup times (ms) of each step, and the wire sizes.
#[derive(Default)]
struct LookupTimes {
    prepare: Vec<f64>,
    online: Vec<f64>,
    respond: Vec<f64>,
    decode: Vec<f64>,
    query_len: usize,
    response_len: usize,
}

/// One lookup at a time of the probed keys, each step timed and every
/// answer checked.
fn time_lookups(
    ours: &Ours,
    records: &[(Vec<u8>, Vec<u8>)],
    probes: &[usize],
    rng: &mut ChaCha20Rng,
) -> Result<LookupTimes> {
    let client = &ours.client;
    let mut t = LookupTimes::default();
    for &i in probes {
        let (key, value) = &records[i];
        let (prepared, ms) = time_ms(|| client.prepare(&mut *rng));
        t.prepare.push(ms);
        let ((query, pending), ms) = time_ms(|| {
            let (q, p) = client.query(prepared, key).expect("same setup");
            (encode_queries(&[q]), p)
        });
        t.online.push(ms);
        t.query_len = query.len();
        let (answer, ms) = time_ms(|| respond(ours, &query));
        t.respond.push(ms);
        let answer = answer?;
        t.response_len = answer.len();
        let (found, ms) = time_ms(|| -> Result<Lookup> {
            let responses = decode_responses(&answer)?;
            Ok(client.decode(pending, &responses[0])?)
        });
        t.decode.push(ms);
        ensure!(
            found? == Lookup::Found(value.clone()),
            "ours: wrong answer for key {i}"
        );
    }
    Ok(t)
}

/// Three batches of the probed keys answered in one pass each: ms per
/// query of a `batch` (the batch size asked for), every answer checked.
fn time_batches(
    ours: &Ours,
    records: &[(Vec<u8>, Vec<u8>)],
    (probes, batch): (&[usize], usize),
    rng: &mut ChaCha20Rng,
) -> Result<Vec<f64>> {
    let client = &ours.client;
    let mut batch_ms = Vec::new();
    for _ in 0..3 {
        let mut pendings = Vec::new();
        let mut queries = Vec::new();
        for &i in probes {
            let (q, p) = client.query(client.prepare(&mut *rng), &records[i].0)?;
            queries.push(q);
            pendings.push((i, p));
        }
        let body = encode_queries(&queries);
        let (answer, ms) = time_ms(|| respond(ours, &body));
        batch_ms.push(ms / batch as f64);
        let responses = decode_responses(&answer?)?;
        for ((i, p), r) in pendings.into_iter().zip(&responses) {
            ensure!(
                client.decode(p, r)? == Lookup::Found(records[i].1.clone()),
                "ours: wrong batched answer"
            );
        }
    }
    Ok(batch_ms)
}

/// A batch's response bytes, from GPU memory when the database is held
/// there, else from all CPU cores.
fn respond(ours: &Ours, body: &[u8]) -> Result<Vec<u8>> {
    let Some(gpu) = &ours.answers else {
        return Ok(ours.server.answer_bytes(body)?.0);
    };
    let queries = ours.server.checked_queries(body)?;
    let vecs: Vec<&[u32]> = queries.iter().map(|q| q.vector.as_slice()).collect();
    let (answers, _) = gpu.answer(&vecs)?;
    let responses: Vec<pir_core::Response> = answers
        .into_iter()
        .map(|elems| pir_core::Response { elems })
        .collect();
    Ok(pir_core::wire::encode_responses(&responses))
}

fn bench_ours(
    args: &Args,
    records: &[(Vec<u8>, Vec<u8>)],
    probes: &[usize],
) -> Result<Map<String, Value>> {
    let mut rng = ChaCha20Rng::seed_from_u64(args.seed ^ 0x5eed);
    let ours = setup_ours(args, records, &mut rng)?;
    let single: Vec<usize> = probes.iter().take(args.reps).copied().collect();
    let t = time_lookups(&ours, records, &single, &mut rng)?;
    let batched: Vec<usize> = probes.iter().take(args.batch).copied().collect();
    let batch_ms = time_batches(&ours, records, (&batched, args.batch), &mut rng)?;
    Ok(ours_json(args, &ours, t, batch_ms))
}

/// Our figures as the JSON line the benchmark prints.
fn ours_json(args: &Args, ours: &Ours, t: LookupTimes, batch_ms: Vec<f64>) -> Map<String, Value> {
    let (shape, report) = (&ours.shape, &ours.report);
    let respond_ms = median(t.respond);
    let threads = rayon::current_num_threads();
    let mut m = Map::new();
    m.insert("impl".into(), json!("ours"));
    m.insert("log2_keys".into(), json!(args.log2_keys));
    m.insert("key_bytes".into(), json!(args.key_bytes));
    m.insert("value_bytes".into(), json!(args.value_bytes));
    m.insert("arity".into(), json!(args.arity));
    m.insert("k".into(), json!(shape.partitions));
    m.insert("rows".into(), json!(shape.rows()));
    m.insert("cols".into(), json!(shape.cols()));
    m.insert("plaintext_bits".into(), json!(shape.lwe.plaintext_bits));
    m.insert("kernel".into(), json!(pir_core::kernel::kernel_name()));
    m.insert("expansion".into(), json!(args.expansion.name()));
    m.insert("device".into(), json!(report.device.to_string()));
    if report.device == gpu_kernels::Device::Cuda {
        m.insert("gpu".into(), json!(report.detail));
    }
    m.insert(
        "answer_device".into(),
        json!(match &ours.answers {
            Some(gpu) => format!("cuda ({})", gpu.name()),
            None => "cpu".into(),
        }),
    );
    m.insert("threads".into(), json!(threads));
    m.insert("encode_s".into(), json!(ours.encode_ms / 1e3));
    m.insert("hint_s".into(), json!(ours.hint_ms / 1e3));
    m.insert(
        "setup_s".into(),
        json!((ours.encode_ms + ours.hint_ms) / 1e3),
    );
    m.insert("client_setup_s".into(), json!(ours.client_setup_ms / 1e3));
    m.insert("prepare_ms".into(), json!(median(t.prepare)));
    m.insert("query_ms".into(), json!(median(t.online)));
    m.insert("respond_ms".into(), json!(respond_ms));
    m.insert("respond_batch_ms_per_query".into(), json!(median(batch_ms)));
    m.insert("batch".into(), json!(args.batch));
    m.insert("decode_ms".into(), json!(median(t.decode)));
    m.insert("hint_bytes".into(), json!(ours.server.setup_bytes().len()));
    m.insert("query_bytes".into(), json!(t.query_len));
    m.insert("response_bytes".into(), json!(t.response_len));
    m.insert(
        "client_state_bytes".into(),
        json!(ours.client.state_bytes()),
    );
    m.insert("db_bytes".into(), json!(ours.db_bytes));
    m.insert(
        "scan_gbps_per_core".into(),
        json!(ours.db_bytes as f64 / (respond_ms / 1e3) / threads as f64 / 1e9),
    );
    m
}

/// Names the machine and, when asked, sets the scan against the memory read
/// bandwidth measured now.
/// `--prepare-rows`: one JSON line per (expansion, kernel) (median of
/// `reps` preparations on a one-thread pool), with the speed-up over the
/// portable (scalar TurboSHAKE128) path measured first in the same run.
/// AES-128 runs once, with the best kernel: on the CPU's AES instructions
/// (`pir_core::aes_ni`, VAES where it has them; the `aes` crate's cipher,
/// with its own AES-NI or ARMv8 detection, where the CPU lacks them or
/// the kernel is the portable one).
fn bench_prepare(rows: usize, reps: usize) -> Result<()> {
    use pir_core::{Expansion, PublicMatrix};
    let pool = rayon::ThreadPoolBuilder::new().num_threads(1).build()?;
    let n = pir_core::params::LWE_DIMENSION as usize;
    let mut rng = ChaCha20Rng::seed_from_u64(7);
    let seed: [u8; 32] = rng.random();
    let mut portable_ms = None;
    let runs = Kernel::supported()
        .into_iter()
        .rev()
        .map(|kernel| (Expansion::TurboShake128, kernel))
        .chain([(Expansion::Aes128Ctr, kernel::Kernel::best())]);
    for (expansion, kernel) in runs {
        kernel::select(kernel)?;
        let matrix = PublicMatrix::new(expansion, seed);
        let times: Vec<f64> = (0..reps.max(1))
            .map(|_| {
                time_ms(|| {
                    pool.install(|| pir_core::client::prepare_b0(&matrix, n, rows, &mut rng))
                })
                .1
            })
            .collect();
        let ms = median(times);
        let base = *portable_ms.get_or_insert(ms);
        let mut line = Map::new();
        line.insert("bench".into(), json!("prepare"));
        line.insert("rows".into(), json!(rows));
        line.insert("threads".into(), json!(1));
        line.insert("expansion".into(), json!(expansion.name()));
        line.insert("kernel".into(), json!(kernel.name()));
        line.insert("prepare_ms".into(), json!(ms));
        line.insert("speedup_vs_portable".into(), json!(base / ms));
        // About 2/3 of the n rows of A are expanded (s is 0 on the rest).
        let expanded = (2 * n / 3 * rows * 4) as f64;
        line.insert("expand_gb_per_s".into(), json!(expanded / ms / 1e6));
        line.insert("reps".into(), json!(reps));
        add_machine(&mut line, false);
        println!("{}", Value::Object(line));
    }
    Ok(())
}

/// `--prepare-rows R --prepare-batch C`: one JSON line: `C` queries on all
/// cores prepared one after another, then as one batch (medians of `reps`).
fn bench_prepare_batch(rows: usize, count: usize, reps: usize) -> Result<()> {
    use pir_core::client::{prepare_b0, prepare_b0_many};
    use pir_core::{Expansion, PublicMatrix};
    let n = pir_core::params::LWE_DIMENSION as usize;
    let mut rng = ChaCha20Rng::seed_from_u64(7);
    let matrix = PublicMatrix::new(Expansion::Aes128Ctr, rng.random());
    let mut one_by_one = Vec::new();
    let mut batched = Vec::new();
    for _ in 0..reps.max(1) {
        one_by_one.push(
            time_ms(|| (0..count).for_each(|_| drop(prepare_b0(&matrix, n, rows, &mut rng)))).1,
        );
        batched.push(time_ms(|| prepare_b0_many(&matrix, n, rows, count, &mut rng)).1);
    }
    let (alone_ms, batch_ms) = (median(one_by_one), median(batched));
    let mut line = Map::new();
    line.insert("bench".into(), json!("prepare-batch"));
    line.insert("rows".into(), json!(rows));
    line.insert("queries".into(), json!(count));
    line.insert("threads".into(), json!(rayon::current_num_threads()));
    line.insert("expansion".into(), json!(Expansion::Aes128Ctr.name()));
    line.insert("kernel".into(), json!(kernel::active().name()));
    line.insert("one_by_one_ms".into(), json!(alone_ms));
    line.insert("batch_ms".into(), json!(batch_ms));
    line.insert("speedup".into(), json!(alone_ms / batch_ms));
    line.insert("reps".into(), json!(reps));
    add_machine(&mut line, false);
    println!("{}", Value::Object(line));
    Ok(())
}

fn add_machine(m: &mut Map<String, Value>, memread: bool) {
    m.insert("cpu_model".into(), json!(machine::cpu_model()));
    m.insert("cpu_flags".into(), json!(machine::simd_flags()));
    m.insert("llc_bytes".into(), json!(machine::llc_bytes()));
    if !memread {
        return;
    }
    let bw = machine::memread_gbps(3);
    let per_core = bw["memread_gbps_per_core"].as_f64().unwrap_or(f64::NAN);
    let scan = m["scan_gbps_per_core"].as_f64().unwrap_or(f64::NAN);
    if let Value::Object(fields) = bw {
        m.extend(fields);
    }
    m.insert("scan_vs_memread".into(), json!(scan / per_core));
}

/// What the reference's lookups of the probes took, and their sizes.
struct ReferenceLookups {
    query_ms: Vec<f64>,
    respond: Vec<f64>,
    decode: Vec<f64>,
    query_len: usize,
    response_len: usize,
}

/// Looks up each distinct probe with the reference (at most `reps`),
/// checking every answer.
fn reference_lookups(
    args: &Args,
    client: &mut chalametpir_client::Client,
    server: &chalametpir_server::Server,
    records: &[(Vec<u8>, Vec<u8>)],
    probes: &[usize],
) -> Result<ReferenceLookups> {
    let mut out = ReferenceLookups {
        query_ms: Vec::new(),
        respond: Vec::new(),
        decode: Vec::new(),
        query_len: 0,
        response_len: 0,
    };
    let mut seen = std::collections::HashSet::new();
    for &i in probes.iter().filter(|&&i| seen.insert(i)).take(args.reps) {
        let (key, value) = &records[i];
        let (query, ms) = time_ms(|| client.query(key));
        out.query_ms.push(ms);
        let query = query.map_err(|e| anyhow::anyhow!("reference query: {e:?}"))?;
        out.query_len = query.len();
        let (response, ms) = time_ms(|| server.respond(&query));
        out.respond.push(ms);
        let response = response.map_err(|e| anyhow::anyhow!("reference respond: {e:?}"))?;
        out.response_len = response.len();
        let (got, ms) = time_ms(|| client.process_response(key, &response));
        out.decode.push(ms);
        ensure!(
            got.ok().as_ref() == Some(value),
            "reference: wrong answer for key {i}"
        );
    }
    Ok(out)
}

fn bench_reference(
    args: &Args,
    records: &[(Vec<u8>, Vec<u8>)],
    probes: &[usize],
) -> Result<Map<String, Value>> {
    use chalametpir_client::Client;
    use chalametpir_server::{Server, SEED_BYTE_LEN};
    let mut rng = ChaCha20Rng::seed_from_u64(args.seed ^ 0xc4a1);
    let mut seed = [0u8; SEED_BYTE_LEN];
    rng.fill_bytes(&mut seed);
    let db: HashMap<&[u8], &[u8]> = records
        .iter()
        .map(|(k, v)| (k.as_slice(), v.as_slice()))
        .collect();
    let (setup, setup_ms) = time_ms(|| {
        if args.arity == 3 {
            Server::setup::<3>(&seed, db)
        } else {
            Server::setup::<4>(&seed, db)
        }
    });
    let (server, hint_bytes, filter_bytes) =
        setup.map_err(|e| anyhow::anyhow!("reference setup: {e:?}"))?;
    let (client, client_setup_ms) = time_ms(|| Client::setup(&seed, &hint_bytes, &filter_bytes));
    let mut client = client.map_err(|e| anyhow::anyhow!("reference client setup: {e:?}"))?;

    let ReferenceLookups {
        query_ms,
        respond,
        decode,
        query_len,
        response_len,
    } = reference_lookups(args, &mut client, &server, records, probes)?;
    let respond_ms = median(respond);
    // The reference answers queries one by one; it has no batch path.
    let rows = (query_len.saturating_sub(8)) / 4;
    let m = json!({
        "impl": "chalametpir-0.8",
        "log2_keys": args.log2_keys,
        "key_bytes": args.key_bytes,
        "value_bytes": args.value_bytes,
        "arity": args.arity,
        "k": 1,
        "rows": rows,
        "setup_s": setup_ms / 1e3,
        "client_setup_s": client_setup_ms / 1e3,
        "prepare_ms": Value::Null,
        "query_ms": median(query_ms),
        "respond_ms": respond_ms,
        "respond_batch_ms_per_query": respond_ms,
        "decode_ms": median(decode),
        "hint_bytes": hint_bytes.len() + filter_bytes.len(),
        "query_bytes": query_len,
        "response_bytes": response_len,
        // The reference client keeps the whole public matrix (n x rows u32) and the hint.
        "client_state_bytes": 4 * 1774 * rows + hint_bytes.len(),
        "threads": rayon::current_num_threads(),
    });
    Ok(m.as_object().expect("a JSON object").clone())
}
