//! The schedule against a real anvil: builds as blocks arrive, rides out a
//! node outage, stops on request. Also: the example config parses.

use std::time::Duration;

use serde_json::json;
use snapshotter::schedule::{run, ScheduleConfig};
use snapshotter::SnapshotStore;
use test_support::{Anvil, DEV_ACCOUNTS};

#[test]
fn example_config_parses() {
    let c = ScheduleConfig::from_file(std::path::Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../configs/snapshotter.toml"
    )))
    .unwrap();
    assert_eq!(c.schedule.every_blocks, 64);
    c.build.options().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schedule_builds_as_blocks_arrive_and_survives_an_outage() {
    let anvil = Anvil::start().await;
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        r#"
store = "{}"
[source]
url = "{}"
window = 4
[schedule]
every_blocks = 2
poll_secs = 1
confirmations = 0
[build]
device = "cpu"
[retention]
keep_latest = 2
"#,
        dir.path().join("store").display(),
        anvil.url
    );
    let config: ScheduleConfig = toml::from_str(&text).unwrap();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let runner = tokio::spawn(run(config, async move {
        let _ = stop_rx.await;
    }));
    let store = SnapshotStore::open(dir.path().join("store")).unwrap();
    for i in 0..6u64 {
        anvil.send(json!({"from": DEV_ACCOUNTS[0], "to": format!("0x{:040x}", 0x1000 + i), "value": "0x1"})).await;
        tokio::time::sleep(Duration::from_millis(700)).await;
    }
    let mut built = Vec::new();
    for _ in 0..40 {
        built = store.list().unwrap().iter().map(|s| s.id.block).collect();
        if built.len() >= 2 && built.iter().max() >= Some(&4) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert!(built.len() >= 2, "schedule built {built:?}");
    assert!(built.len() <= 2, "retention keeps 2: {built:?}");
    // The node goes away: the schedule keeps running.
    anvil.stop().await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        !runner.is_finished(),
        "schedule gave up during a node outage"
    );
    stop_tx.send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(10), runner)
        .await
        .expect("schedule stops")
        .unwrap()
        .unwrap();
    for s in store.list().unwrap() {
        snapshotter::verify::verify(&store, &s, 2).unwrap();
    }
}
