//! The proxy's page and the server's page in a real browser (Debian's
//! headless Chromium): anvil from the test genesis, the follower's library
//! building a base and deltas into a store, a PIR server over it and a
//! proxy with anvil as its upstream (default settings: the listed
//! contracts only). A token deployed after the base and listed nowhere is
//! called through the proxy; a balance is read. The proxy's page then
//! shows one more private read and one forwarded `eth_call` naming that
//! token (and one address named), and neither the balance's account nor
//! the token's holder anywhere on it or in `/status.json`; a page asked
//! for by another host name is refused. The server's page shows the view
//! at the head, the follower's head, and the lookups of the last minute.
//! A screenshot of each page is taken (into `ETHPIR_SCREENSHOTS` when set:
//! docs/images is made so).

use crate::common;

use alloy_primitives::{Address, U256};
use alloy_sol_types::SolCall;
use common::*;
use serde_json::{json, Value};
use test_support::browser;
use test_support::{proxy_status, Anvil, DEV_ACCOUNTS};

alloy_sol_types::sol! {
    interface IToken {
        function initialize(address newOwner);
        function mint(address to, uint256 amount);
        function balanceOf(address holder) returns (uint256);
    }
}

/// The count in a page's methods table: `method`'s cell `column` (1:
/// answered privately, 2: sent upstream), 0 where it has no row.
fn count_in(dom: &str, method: &str, column: usize) -> u64 {
    let Some(start) = dom.find(&format!("<td>{method}</td>")) else {
        return 0;
    };
    let row = &dom[start..dom[start..].find("</tr>").map_or(dom.len(), |e| start + e)];
    let cell = row
        .split("<td class=\"n\">")
        .nth(column)
        .unwrap_or_default();
    cell.split('<')
        .next()
        .unwrap_or_default()
        .parse()
        .unwrap_or(0)
}

/// The text between `id="ID">` and the next `<`.
fn text_of<'a>(dom: &'a str, id: &str) -> &'a str {
    let marker = format!("id=\"{id}\">");
    let start = dom.find(&marker).unwrap_or_else(|| panic!("no #{id}")) + marker.len();
    dom[start..].split('<').next().unwrap_or_default()
}

fn hex_of(a: &Address) -> String {
    alloy_primitives::hex::encode(a.as_slice())
}

/// Where screenshots go: `ETHPIR_SCREENSHOTS`, else `fallback`.
fn screenshot_dir(fallback: &std::path::Path) -> std::path::PathBuf {
    match std::env::var_os("ETHPIR_SCREENSHOTS") {
        Some(dir) => {
            let dir = std::path::PathBuf::from(dir);
            std::fs::create_dir_all(&dir).unwrap();
            dir
        }
        None => fallback.to_path_buf(),
    }
}

async fn deploy_unlisted_token(anvil: &Anvil, holder: Address) -> Address {
    let token: Address = anvil
        .deploy(DEV_ACCOUNTS[0], &test_contract("FlaggedToken"))
        .await
        .parse()
        .unwrap();
    send(
        anvil,
        0,
        token,
        IToken::initializeCall { newOwner: dev(0) }.abi_encode(),
    )
    .await;
    let mint = IToken::mintCall {
        to: holder,
        amount: U256::from(5),
    };
    send(anvil, 0, token, mint.abi_encode()).await;
    token
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn both_pages_show_what_happened_and_never_the_address() {
    let dir = tempfile::tempdir().unwrap();
    let (anvil, follower, server) = followed_chain(dir.path(), 1000).await;
    let cache = tempfile::tempdir().unwrap();
    let proxy = start_proxy(&server, Some(anvil.url.clone()), cache.path()).await;
    let holder = dev(2);
    let token = deploy_unlisted_token(&anvil, holder).await;
    let head = anvil.head().await;
    test_support::eventually("the proxy's view reaches the head", || async {
        let view = proxy_status(&proxy).await["viewBlock"].as_u64()?;
        (view >= head).then_some(())
    })
    .await;

    let before = browser::dom(&format!("{proxy}/")).await;
    let private_before = count_in(&before, "eth_getBalance", 1);
    let read = dev(1);
    let got = test_support::rpc(&proxy, "eth_getBalance", json!([read, "latest"]))
        .await
        .unwrap();
    assert_eq!(got, json!(anvil.balance(&read.to_string(), head).await));
    let call = call_object(token, &IToken::balanceOfCall { holder }.abi_encode());
    let got = test_support::rpc(&proxy, "eth_call", json!([call, "latest"]))
        .await
        .unwrap();
    assert_eq!(got, json!(format!("0x{:064x}", 5)));

    let after = browser::dom(&format!("{proxy}/")).await;
    assert_eq!(count_in(&after, "eth_getBalance", 1), private_before + 1);
    assert_eq!(
        count_in(&after, "eth_call", 2),
        1,
        "the unlisted token's call"
    );
    let lower = after.to_lowercase();
    assert!(lower.contains(&hex_of(&token)), "the token is named");
    assert_eq!(
        text_of(&after, "addresses"),
        "2",
        "the holder and the token"
    );
    for hidden in [read, holder] {
        assert!(!lower.contains(&hex_of(&hidden)), "{hidden} is on the page");
    }
    the_status_json_agrees(&proxy, token, &[read, holder]).await;

    let server_dom = browser::dom(&format!("{server}/")).await;
    assert_eq!(text_of(&server_dom, "view"), head.to_string());
    assert_eq!(text_of(&server_dom, "head"), head.to_string());
    assert_ne!(text_of(&server_dom, "lps"), "0.00", "the proxy's lookups");
    assert!(
        server_dom.contains(&format!("-{head}-")),
        "the newest level listed"
    );

    let shots = screenshot_dir(dir.path());
    browser::screenshot(&format!("{proxy}/"), &shots.join("proxy-page.png"), 1500).await;
    browser::screenshot(&format!("{server}/"), &shots.join("server-page.png"), 1000).await;
    follower.stop().await;
    anvil.stop().await;
}

/// `/status.json` says the same as the page, names no hidden address,
/// and is refused to a request for another host name.
async fn the_status_json_agrees(proxy: &str, token: Address, hidden: &[Address]) {
    let http = reqwest::Client::new();
    let body = http
        .get(format!("{proxy}/status.json"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let lower = body.to_lowercase();
    for a in hidden {
        assert!(!lower.contains(&hex_of(a)), "{a} in status.json");
    }
    let status: Value = serde_json::from_str(&body).unwrap();
    let named = &status["activity"]["named"];
    assert_eq!(named.as_array().map(Vec::len), Some(1), "{named}");
    assert_eq!(named[0]["method"], "eth_call");
    assert_eq!(named[0]["reason"], "not-held");
    let contract: Address = named[0]["contract"].as_str().unwrap().parse().unwrap();
    assert_eq!(contract, token);
    let refused = http
        .get(format!("{proxy}/status.json"))
        .header("host", "wallet.example")
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 403);
}
