//! A node a test started never outlives it: dropped or stopped, anvil and
//! anything it started are gone.

use test_support::{processes_on_port, Anvil};

async fn gone(port: u16) -> bool {
    let empty = || async { processes_on_port(port).is_empty().then_some(()) };
    test_support::poll(test_support::PATIENCE, empty)
        .await
        .is_some()
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
