//! The `rpc` source against a real anvil node: snapshots at several heights
//! hold exactly anvil's balances and nonces, and the active set is exactly
//! the accounts touched in the window.

use std::collections::BTreeSet;

use alloy_primitives::{Address, U256};
use snapshotter::pipeline::{build_and_publish, BuildOptions};
use snapshotter::records::decode_records;
use snapshotter::sources::rpc::{RpcOptions, RpcSource, RpcSourceError};
use snapshotter::store::{SnapshotStore, RECORDS_FILE};
use snapshotter::SnapshotKind;
use test_support::{make_history, Anvil};

fn opts() -> RpcOptions {
    RpcOptions {
        progress: None,
        batch_size: 3,
        attempts: 2,
        ..Default::default()
    }
}

async fn check_against_anvil(anvil: &Anvil, state: &snapshotter::ExportedState) {
    for r in &state.records {
        let a = format!("{:#x}", r.address.expect("rpc records carry addresses"));
        let balance = anvil.balance(&a, state.block_number).await;
        let nonce = anvil.nonce(&a, state.block_number).await;
        assert_eq!(
            format!("{:#x}", r.balance),
            balance,
            "balance of {a} at {}",
            state.block_number
        );
        assert_eq!(
            format!("{:#x}", r.nonce),
            nonce,
            "nonce of {a} at {}",
            state.block_number
        );
    }
}

/// EIP-4788, EIP-2935, EIP-7002 and EIP-7251's contracts.
const SYSTEM_CONTRACTS: [&str; 4] = [
    "0x000f3df6d732807ef1319fb7b8bb8522d0beac02",
    "0x0000f90827f1c53a10cb7a02335b175320002935",
    "0x00000961ef480eb55e80d19ad83579a64c007002",
    "0x0000bbddc7ce488642fb579f8b00f3a590007251",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn active_and_historical_snapshots_match_anvil() {
    let anvil = Anvil::start().await;
    let history = make_history(&anvil).await;
    let head = anvil.head().await;
    let node = RpcSource::connect(&anvil.url, opts()).await.unwrap();
    assert_eq!(node.chain_id, 31337);
    // anvil answers trace_block, and its parity traces parse (typed): the
    // active sets below are read with traces.
    assert!(node.has_traces().await.unwrap());

    for (window, at) in [(3u64, head), (2, head - 2), (head, head)] {
        let state = node.export_active(window, Some(at)).await.unwrap();
        assert_eq!(state.kind, SnapshotKind::Active { window });
        // What the blocks name, and the system contracts every block
        // writes (anvil has EIP-2935's; the others read as deleted).
        let expected: BTreeSet<String> = history
            .iter()
            .filter(|(b, _)| *b + window > at && *b <= at)
            .flat_map(|(_, t)| t.iter().cloned())
            .chain(SYSTEM_CONTRACTS.map(String::from))
            .collect();
        let got: BTreeSet<String> = state
            .records
            .iter()
            .map(|r| format!("{:#x}", r.address.unwrap()))
            .collect();
        assert_eq!(
            got, expected,
            "active set of the {window} blocks up to {at}"
        );
        check_against_anvil(&anvil, &state).await;
        let header = anvil
            .rpc(
                "eth_getBlockByNumber",
                serde_json::json!([format!("{at:#x}"), false]),
            )
            .await;
        assert_eq!(
            format!("{:#x}", state.block_hash.unwrap()),
            header["hash"].as_str().unwrap()
        );
        assert_eq!(
            format!("{:#x}", state.state_root.unwrap()),
            header["stateRoot"].as_str().unwrap()
        );
    }

    // Historical: the dev accounts and every touched account at block 2.
    let mut list: Vec<Address> = test_support::DEV_ACCOUNTS
        .iter()
        .map(|a| a.parse().unwrap())
        .collect();
    list.extend(
        history
            .iter()
            .flat_map(|(_, t)| t.iter().map(|a| a.parse::<Address>().unwrap())),
    );
    let state = node.export_historical(list.clone(), 2).await.unwrap();
    assert_eq!(state.kind, SnapshotKind::Historical);
    check_against_anvil(&anvil, &state).await;
    assert!(
        state.records.iter().any(|r| r.balance == U256::ZERO),
        "accounts funded later are read as empty at block 2"
    );

    // Through the pipeline into a store, and back.
    let dir = tempfile::tempdir().unwrap();
    let store = SnapshotStore::open(dir.path()).unwrap();
    let build = BuildOptions {
        progress: None,
        ..Default::default()
    };
    let published = build_and_publish(&store, state.clone(), &build).unwrap();
    snapshotter::verify::verify(&store, &published, 8).unwrap();
    let stored = decode_records(&store.read_checked(&published, RECORDS_FILE).unwrap()).unwrap();
    assert_eq!(stored.accounts.len(), state.records.len());

    // A block beyond the head is a clear error.
    assert!(matches!(
        node.export_active(2, Some(head + 10)).await,
        Err(RpcSourceError::FutureBlock { .. })
    ));
    anvil.stop().await;
}

#[tokio::test]
async fn unreachable_node_is_a_clear_error() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let err = RpcSource::connect(&format!("http://127.0.0.1:{port}"), opts())
        .await
        .err()
        .expect("nothing listens there");
    assert!(
        matches!(err, RpcSourceError::Unreachable { attempts: 2, .. }),
        "{err}"
    );
    assert!(matches!(
        RpcSource::connect("not a url", opts()).await,
        Err(RpcSourceError::Url(_))
    ));
}
