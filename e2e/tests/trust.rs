//! A signed snapshot is read only as it was signed (issue: "a signed
//! snapshot can still be read wrong"). anvil from a genesis file, the
//! follower's library building a base at block 1 and a one-block delta per
//! block above it (no whole tables: every level is read by PIR), an
//! attester signing them, an honest PIR server, and in front of it relays
//! that each change one thing:
//!
//! - under a quorum-1 proxy: the manifest's `format`; its `storage`; its
//!   `files` and `hint_bytes`, pointing at a forged table the relay
//!   serves; its `canaries` removed; a delta's setup swapped for another
//!   level's (a real, forged database); a shift of part of every record
//!   of the newest delta's answers only (no signature is touched);
//! - under a proxy with no quorum (the setup's seed and the upstream
//!   checks only): the `storage` again (its setup was built for another
//!   manifest); a `block_hash` removed (its setup's seed no longer matches, or the
//!   upstream cannot confirm it); a view ahead of anvil's head (anvil
//!   reverted);
//!   a catalog of another chain (the bundled mainnet genesis).
//!
//! Each read at the tampered view is an error that names what failed, never
//! a value; every other read is anvil's. After the detected shift, a proxy
//! started again on the same cache reads nothing kept from the tampered
//! request: it answers the right balance.

use crate::common;

use std::path::Path;
use std::sync::Arc;

use axum::body::Bytes;
use common::*;
use proxy::ProxyConfig;
use serde_json::{json, Value};
use snapshotter::attest::{Attester, Outcome};
use snapshotter::follow::run_once;
use test_support::{write_genesis, Anvil, ALL_DEV_ACCOUNTS};

/// anvil's dev key 1: the attester's.
const ATTESTER_KEY: &str = "0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d";
const ATTESTER: &str = "0x70997970c51812dc3a010c7d01b50e0d17dc79c8";

/// The account whose balance the deltas change.
fn fresh() -> String {
    format!("0x{}", "11".repeat(20))
}

/// Follows to anvil's head. `fold`: every delta folded into a new base at
/// once (the genesis base cannot be attested); else deltas stay deltas,
/// never merged. No level publishes a whole table.
async fn follow(store: &Path, genesis: &Path, anvil: &Anvil, fold: bool) -> u64 {
    let head = anvil.head().await;
    let mut config = follow_config(store, &anvil.url, genesis, 0, 1000, 1000);
    config.build.whole_table_max_records = 0;
    match fold {
        true => {
            config.levels.rebase_fraction = 0.0;
            config.levels.rebase_min_records = 1;
        }
        false => config.levels.rebase_fraction = 1e9,
    }
    while run_once(config.clone()).await.unwrap() < head {}
    head
}

async fn attest(store: &Path, anvil: &Anvil) {
    let node = snapshotter::sources::rpc::RpcSource::connect(&anvil.url, Default::default())
        .await
        .unwrap();
    let store = snapshotter::SnapshotStore::open(store).unwrap();
    let outcomes = Attester::new(store, node, ATTESTER_KEY)
        .unwrap()
        .attest_store()
        .await
        .unwrap();
    for (id, outcome) in outcomes {
        if id.block > 0 {
            assert_eq!(outcome, Outcome::Signed, "{id}");
        }
    }
}

async fn proxy(server: &str, anvil: &Anvil, cache: &Path, quorum: bool) -> String {
    let attesters = match quorum {
        true => vec![ATTESTER.parse().unwrap()],
        false => Vec::new(),
    };
    start_proxy_with(ProxyConfig {
        pir_server: server.to_string(),
        upstream: Some(anvil.url.clone()),
        cache_dir: cache.to_path_buf(),
        attesters,
        attest_quorum: 1,
        ..Default::default()
    })
    .await
}

async fn balance(url: &str, who: &str, block: u64) -> Result<Value, String> {
    test_support::rpc(url, "eth_getBalance", json!([who, format!("{block:#x}")])).await
}

/// A relay that rewrites the catalog's entries with `edit` (given each
/// entry's id).
fn catalog_edit(edit: impl Fn(&str, &mut Value) + Send + Sync + 'static) -> Rewrite {
    Arc::new(move |path, body| {
        if path != "/v1/snapshots" {
            return body;
        }
        let mut catalog: Value = serde_json::from_slice(&body).unwrap();
        for entry in catalog["snapshots"].as_array_mut().unwrap() {
            let id = entry["id"].as_str().unwrap().to_string();
            edit(&id, entry);
        }
        serde_json::to_vec(&catalog).unwrap().into()
    })
}

/// The honest chain and store: a base at block 1 (signed), deltas at
/// blocks 2 and 3 (signed), `fresh()` paid at blocks 1 and 3.
struct Chain {
    anvil: Anvil,
    store: std::path::PathBuf,
    head: u64,
    /// anvil's state before blocks 2 and 3 (`evm_revert` goes back to it).
    before_deltas: Value,
    _dir: tempfile::TempDir,
}

async fn chain() -> Chain {
    let dir = tempfile::tempdir().unwrap();
    let genesis = dir.path().join("genesis.json");
    write_genesis(&genesis);
    let anvil = Anvil::start_from_genesis(&genesis).await;
    let store = dir.path().join("store");
    let pay = |from: usize, value: &str| json!({"from": ALL_DEV_ACCOUNTS[from], "to": fresh(), "value": value});
    anvil.send(pay(0, "0x1000")).await;
    follow(&store, &genesis, &anvil, true).await;
    let before_deltas = anvil.rpc("evm_snapshot", json!([])).await;
    anvil.send(pay(1, "0x20")).await;
    follow(&store, &genesis, &anvil, false).await;
    anvil.send(pay(2, "0x3")).await;
    let head = follow(&store, &genesis, &anvil, false).await;
    assert_eq!(head, 3);
    attest(&store, &anvil).await;
    Chain {
        anvil,
        store,
        head,
        before_deltas,
        _dir: dir,
    }
}

impl Chain {
    fn snapshot(&self, id: &str) -> snapshotter::StoredSnapshot {
        let store = snapshotter::SnapshotStore::open(&self.store).unwrap();
        store
            .list()
            .unwrap()
            .into_iter()
            .find(|s| s.id.url_form() == id)
            .unwrap_or_else(|| panic!("no {id}"))
    }

    /// The read at the head through a proxy in front of `rewrite` (quorum
    /// 1 or none): its error, which must name `names`; any value fails.
    async fn refused(&self, rewrite: Rewrite, quorum: bool, names: &str) -> String {
        let server = start_server(&self.store).await;
        let (relay, _) = start_relay(&server, rewrite).await;
        let cache = tempfile::tempdir().unwrap();
        let proxy = proxy(&relay, &self.anvil, cache.path(), quorum).await;
        let head = self.head;
        let error = test_support::eventually(&format!("an error naming '{names}'"), || async {
            match balance(&proxy, &fresh(), head).await {
                Ok(v) => panic!("a tampered view was read: {v}"),
                Err(e) => e.contains(names).then_some(e),
            }
        })
        .await;
        eprintln!("refused: {error}");
        error
    }
}

const DELTA3: &str = "4242-3-delta-2";
const DELTA2: &str = "4242-2-delta-1";
/// anvil's dev key 2: a second attester.
const SECOND_KEY: &str = "0x5de4111afa1a4b94908f83103eb1f1706367c2e68ca870fc3fb9a804e8ab365a";
const BASE1: &str = "4242-1-full";

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_signed_snapshot_is_read_only_as_it_was_signed() {
    let chain = chain().await;
    let right = json!(chain.anvil.balance(&fresh(), chain.head).await);

    // The honest server through an untouched relay: every level by PIR,
    // the right balance.
    let server = start_server(&chain.store).await;
    let cache = tempfile::tempdir().unwrap();
    let honest = proxy(&server, &chain.anvil, cache.path(), true).await;
    let got = test_support::eventually("the honest view", || async {
        balance(&honest, &fresh(), chain.head).await.ok()
    })
    .await;
    assert_eq!(got, right);
    let status = test_support::proxy_status(&honest).await;
    let levels = status["levels"].as_array().unwrap();
    assert_eq!(levels.len(), 3, "{status}");
    assert!(levels.iter().all(|l| l["read"] == "pir"), "{status}");

    // Fields outside the old signature, each changed alone.
    let format = catalog_edit(|_, e| e["format"] = json!(2));
    chain.refused(format, true, "manifest format 2").await;
    let storage = catalog_edit(|id, e| {
        if id == BASE1 {
            e["storage"] = json!({"contracts": ["0x00000000000000000000000000000000000000c0"]});
        }
    });
    chain.refused(storage.clone(), true, "attestations").await;
    // Without a quorum, the manifest is still bound to its own setup.
    chain
        .refused(storage, false, "not built for this manifest")
        .await;
    chain
        .refused(forged_table(&chain), true, "attestations")
        .await;
    let no_canaries = catalog_edit(|id, e| {
        if id == DELTA3 {
            e.as_object_mut().unwrap().remove("canaries");
        }
    });
    chain.refused(no_canaries, true, "attestations").await;
    chain.refused(swapped_setup(&chain), true, "digest").await;

    shift_on_the_delta_only(&chain, &right).await;

    // What the upstream checks, without a quorum.
    let unbound = catalog_edit(|_, e| {
        e.as_object_mut().unwrap().remove("block_hash");
    });
    // (Its setup's seed was drawn from the block hash too: the proxy stops
    // at the setup, or at the upstream check, whichever comes first.)
    chain.refused(unbound, false, "block hash").await;
    other_chain(&chain).await;
    ahead_of_the_upstream(chain).await;
}

/// The newest delta's catalog entry names a table (and a hint larger than
/// it, so that the table would be read whole); the relay serves a forged
/// one, whose digest the entry names.
fn forged_table(chain: &Chain) -> Rewrite {
    let delta = chain.snapshot(DELTA3);
    let width = delta.manifest.pir.value_bytes as usize;
    let key = protocol::pir_key(&fresh().parse().unwrap());
    let value = protocol::encode_value(
        &protocol::AccountValue {
            balance: alloy_primitives::U256::from(1_000_000u64),
            nonce: 0,
            code: protocol::CodeRef::None,
        },
        width,
    );
    let table = protocol::table::encode_table(&[(key.0, value)], width).unwrap();
    let digest = protocol::sha3_hex(&table);
    let bytes = table.len();
    let catalog = catalog_edit(move |id, e| {
        if id == DELTA3 {
            e["files"]["table.bin"] = json!({"bytes": bytes, "sha3_256": digest});
            e["pir"]["hint_bytes"] = json!(1u64 << 30);
        }
    });
    let table = Bytes::from(table);
    Arc::new(move |path, body| match path {
        p if p == format!("/v1/snapshots/{DELTA3}/table") => table.clone(),
        p => catalog(p, body),
    })
}

/// The newest delta's setup answered with the other delta's (a real
/// database of the same chain, built by the same code).
fn swapped_setup(chain: &Chain) -> Rewrite {
    let other = chain.snapshot(DELTA2);
    let store = snapshotter::SnapshotStore::open(&chain.store).unwrap();
    let forged = Bytes::from(store.read_checked(&other, "setup.bin").unwrap());
    Arc::new(move |path, body| match path {
        p if p == format!("/v1/snapshots/{DELTA3}/setup") => forged.clone(),
        _ => body,
    })
}

/// Adds `by` to the first element of every partition's record (`w`
/// elements a record) of the last snapshot's answers in a multi-snapshot
/// query response (the view's freshest level): a shift no tag check alone
/// can tell from an absent key.
fn shift_last_level(by: u32, w: usize) -> Rewrite {
    Arc::new(move |path, body| {
        if path != "/v1/query" {
            return body;
        }
        let Ok(parts) = protocol::multi::decode_response(&body) else {
            return body;
        };
        let mut parts: Vec<Vec<u8>> = parts.into_iter().map(<[u8]>::to_vec).collect();
        if parts.len() < 2 {
            return body;
        }
        let last = parts.len() - 1;
        let mut responses = pir_core::wire::decode_responses(&parts[last]).unwrap();
        for r in &mut responses {
            r.elems
                .iter_mut()
                .step_by(w)
                .for_each(|e| *e = e.wrapping_add(by));
        }
        parts[last] = pir_core::wire::encode_responses(&responses);
        Bytes::from(protocol::multi::encode_response(&parts))
    })
}

/// A blind shift of part of the newest delta's records only (the base
/// answers honestly, no signature changes): without a canary on the
/// delta, the account reads "absent" there and its block-1 balance comes
/// back. It is
/// caught; a proxy started again on the same cache, in front of the honest
/// server, reads the right balance (nothing kept from the tampered
/// request).
async fn shift_on_the_delta_only(chain: &Chain, right: &Value) {
    let delta = chain.snapshot(DELTA3);
    let store = snapshotter::SnapshotStore::open(&chain.store).unwrap();
    let setup = store.read_checked(&delta, "setup.bin").unwrap();
    let shape = pir_core::wire::SetupData::from_bytes(&setup).unwrap().shape;
    let server = start_server(&chain.store).await;
    let shift = shift_last_level(shape.lwe.delta(), shape.record_elems());
    let (relay, _) = start_relay(&server, shift).await;
    let cache = tempfile::tempdir().unwrap();
    let shifted = proxy(&relay, &chain.anvil, cache.path(), true).await;
    let stale = json!(chain.anvil.balance(&fresh(), 1).await);
    let error = test_support::eventually("the shift caught", || async {
        match balance(&shifted, &fresh(), chain.head).await {
            Ok(v) => panic!("a shifted delta was read: {v} (stale: {stale})"),
            Err(e) => e.contains("failed verification").then_some(e),
        }
    })
    .await;
    assert!(error.contains(DELTA3), "{error}");
    let again = proxy(&server, &chain.anvil, cache.path(), true).await;
    let got = test_support::eventually("read again after the restart", || async {
        balance(&again, &fresh(), chain.head).await.ok()
    })
    .await;
    assert_eq!(&got, right, "a kept answer from the tampered request");
}

/// A PIR server of another chain (the bundled mainnet genesis, chain 1)
/// behind a proxy whose upstream is anvil (chain 4242): nothing is read,
/// and `eth_chainId` is the upstream's.
async fn other_chain(chain: &Chain) {
    let dir = tempfile::tempdir().unwrap();
    let server = start_genesis_server(dir.path()).await;
    let cache = tempfile::tempdir().unwrap();
    let proxy = proxy(&server, &chain.anvil, cache.path(), false).await;
    let error = test_support::eventually("another chain refused", || async {
        match balance(&proxy, &fresh(), 0).await {
            Ok(v) => panic!("another chain's snapshot was read: {v}"),
            Err(e) => e.contains("another chain").then_some(e),
        }
    })
    .await;
    assert!(error.contains("4242"), "{error}");
    test_support::eventually("eth_chainId is the upstream's", || async {
        let id = test_support::rpc(&proxy, "eth_chainId", json!([])).await;
        (id.ok()? == json!("0x1092")).then_some(())
    })
    .await;
}

/// anvil taken back to block 1: the views at blocks 2 and 3 are ahead of
/// it, and are not read (after the wait for the upstream).
async fn ahead_of_the_upstream(chain: Chain) {
    let reverted = chain
        .anvil
        .rpc("evm_revert", json!([chain.before_deltas]))
        .await;
    assert_eq!(reverted, json!(true));
    assert_eq!(chain.anvil.head().await, 1);
    let server = start_server(&chain.store).await;
    let cache = tempfile::tempdir().unwrap();
    let proxy = proxy(&server, &chain.anvil, cache.path(), true).await;
    let error = test_support::eventually("the view ahead refused", || async {
        match balance(&proxy, &fresh(), chain.head).await {
            Ok(v) => panic!("a view ahead of the upstream was read: {v}"),
            Err(e) => e.contains("not confirmed").then_some(e),
        }
    })
    .await;
    assert!(error.contains("does not have the block"), "{error}");
    chain.anvil.stop().await;
}

/// The attester builds a delta again from its records before it signs: a
/// delta whose records are honest (the node exports them again, byte for
/// byte) but whose setup is another database's, its manifest naming that
/// setup's digest, is refused, and the refusal names the setup.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_attester_rebuilds_a_delta_before_it_signs() {
    let chain = chain().await;
    let (forged, other) = (chain.snapshot(DELTA3), chain.snapshot(DELTA2));
    std::fs::copy(other.path.join("setup.bin"), forged.path.join("setup.bin")).unwrap();
    let manifest_path = forged.path.join("manifest.json");
    let mut manifest: Value =
        serde_json::from_slice(&std::fs::read(&manifest_path).unwrap()).unwrap();
    manifest["pir"] = serde_json::to_value(&other.manifest.pir).unwrap();
    manifest["files"]["setup.bin"] =
        serde_json::to_value(&other.manifest.files["setup.bin"]).unwrap();
    std::fs::write(
        &manifest_path,
        serde_json::to_vec_pretty(&manifest).unwrap(),
    )
    .unwrap();

    let node = snapshotter::sources::rpc::RpcSource::connect(&chain.anvil.url, Default::default())
        .await
        .unwrap();
    let store = snapshotter::SnapshotStore::open(&chain.store).unwrap();
    let outcomes = Attester::new(store, node, SECOND_KEY)
        .unwrap()
        .attest_store()
        .await
        .unwrap();
    let outcome = |id: &str| {
        outcomes
            .iter()
            .find(|(s, _)| s.url_form() == id)
            .map(|(_, o)| o.clone())
            .unwrap()
    };
    assert_eq!(outcome(BASE1), Outcome::Signed);
    assert_eq!(outcome(DELTA2), Outcome::Signed);
    match outcome(DELTA3) {
        Outcome::Refused(why) => assert!(why.contains("pir"), "{why}"),
        other => panic!("a forged delta was attested: {other:?}"),
    }
    chain.anvil.stop().await;
}
