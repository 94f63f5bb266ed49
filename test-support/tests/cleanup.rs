//! A node a test started never outlives it: dropped or stopped, anvil and
//! anything it started are gone.

use std::time::Duration;

use test_support::{processes_on_port, Anvil};

async fn gone(port: u16) -> bool {
    for _ in 0..50 {
        if processes_on_port(port).is_empty() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
}

#[tokio::test]
async fn dropped_and_stopped_nodes_leave_no_process() {
    let anvil = Anvil::start().await;
    let port = anvil.port;
    assert!(
        !processes_on_port(port).is_empty(),
        "anvil should be running"
    );
    drop(anvil);
    assert!(
        gone(port).await,
        "left behind: {:?}",
        processes_on_port(port)
    );

    let anvil = Anvil::start().await;
    let port = anvil.port;
    anvil.stop().await;
    assert!(
        gone(port).await,
        "left behind: {:?}",
        processes_on_port(port)
    );
}
