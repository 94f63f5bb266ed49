//! Replicas behind a real nginx (Debian's package, installed by
//! scripts/install-test-deps.sh) with the shipped configs/nginx-ethpir.conf:
//! three `ethpir-server` processes serve one store while the follower
//! publishes a delta per block of a moving anvil chain; one proxy keeps
//! one URL, nginx's. 32 wallets read for 20 s while one replica is killed
//! with SIGKILL and started again: every answer equals anvil's at the
//! block `ethpir_status` reports, and no lookup fails (a query cut off by
//! the kill goes to another replica: nginx's next upstream, then the
//! proxy's one resend of the same bytes).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use serde_json::json;
use snapshotter::follow::{self, FollowConfig, SourceConfig, Timing};
use snapshotter::levels::LevelPolicy;
use snapshotter::settings::BuildSettings;
use test_support::{
    checking_client, free_port, idle_genesis_accounts, proxy_status, write_genesis, Anvil, Process,
    ALL_DEV_ACCOUNTS, DEV_ACCOUNTS,
};

const SERVER: &str = env!("CARGO_BIN_EXE_ethpir-server");
const WALLETS: usize = 32;
const LOAD: Duration = Duration::from_secs(20);

/// nginx from Debian's package, run as a child in a folder of its own.
struct Nginx {
    _child: tokio::process::Child,
    url: String,
}

fn nginx_binary() -> PathBuf {
    ["/usr/sbin/nginx", "/usr/local/sbin/nginx", "/usr/bin/nginx"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
        .expect("nginx not found: run scripts/install-test-deps.sh (Debian package nginx-light)")
}

/// configs/nginx-ethpir.conf with its listen port and replicas replaced.
fn site_config(listen: u16, replicas: &[u16]) -> String {
    let shipped = include_str!("../../configs/nginx-ethpir.conf");
    let mut site = shipped.replace(
        "listen 127.0.0.1:8546;",
        &format!("listen 127.0.0.1:{listen};"),
    );
    for (i, port) in replicas.iter().enumerate() {
        let from = format!("server 127.0.0.1:{} ", 8547 + i);
        assert!(
            site.contains(&from),
            "the shipped config lists three replicas"
        );
        site = site.replace(&from, &format!("server 127.0.0.1:{port} "));
    }
    site
}

impl Nginx {
    async fn start(dir: &Path, replicas: &[u16]) -> Nginx {
        let port = free_port();
        std::fs::write(dir.join("ethpir.conf"), site_config(port, replicas)).unwrap();
        let d = dir.display();
        // One process, no master and no workers: killing the child (on
        // drop too) ends all of nginx; a master killed outright would leave
        // its worker orphaned, still listening. It runs as the user who
        // started it, so it can write the temporary files of large query
        // bodies here.
        let main = format!(
            "master_process off;\ndaemon off;\npid {d}/nginx.pid;\nerror_log {d}/error.log warn;\n\
             events {{ worker_connections 512; }}\n\
             http {{\n access_log off;\n client_body_temp_path {d}/body;\n proxy_temp_path {d}/proxy;\n\
             fastcgi_temp_path {d}/fastcgi;\n uwsgi_temp_path {d}/uwsgi;\n scgi_temp_path {d}/scgi;\n\
             include {d}/ethpir.conf;\n}}\n"
        );
        std::fs::write(dir.join("nginx.conf"), main).unwrap();
        let child = tokio::process::Command::new(nginx_binary())
            .args(["-p", &d.to_string(), "-c", &format!("{d}/nginx.conf")])
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .expect("nginx starts");
        let url = format!("http://127.0.0.1:{port}");
        let http = reqwest::Client::new();
        let health = format!("{url}/healthz");
        test_support::eventually("nginx forwards /healthz", || async {
            let ok = http.get(&health).send().await.ok()?.status().is_success();
            ok.then_some(())
        })
        .await;
        Nginx { _child: child, url }
    }
}

fn follower_config(store: &Path, anvil: &Anvil, genesis: &Path) -> FollowConfig {
    FollowConfig {
        store: Some(store.to_path_buf()),
        source: SourceConfig {
            url: Some(anvil.url.clone()),
            genesis: Some(genesis.to_path_buf()),
            ..Default::default()
        },
        // One confirmation: see e2e/tests/follow.rs.
        follow: Timing {
            poll_ms: 100,
            confirmations: 1,
            ws_url: None,
            ..Default::default()
        },
        levels: LevelPolicy {
            fanout: 4,
            keep_blocks: 6,
            ..Default::default()
        },
        hot: Default::default(),
        build: BuildSettings {
            device: snapshotter::settings::Device::Cpu,
            ..Default::default()
        },
    }
}

async fn start_proxy(pir_server: &str, upstream: &str, cache: &Path) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let config = proxy::ProxyConfig {
        listen: addr,
        pir_server: pir_server.to_string(),
        upstream: Some(upstream.to_string()),
        cache_dir: cache.to_path_buf(),
        refresh_secs: 0.2,
        request_timeout_secs: 10,
        ..Default::default()
    };
    tokio::spawn(proxy::serve_on(listener, config, std::future::pending()));
    format!("http://{addr}")
}

/// Queries a replica has answered (its own /metrics).
async fn answered(replica: &str) -> u64 {
    let Ok(resp) = reqwest::get(format!("{replica}/metrics")).await else {
        return 0;
    };
    let text = resp.text().await.unwrap_or_default();
    text.lines()
        .filter(|l| l.starts_with("ethpir_queries_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn replicas_behind_nginx_survive_a_killed_replica_while_the_follower_publishes() {
    let dir = tempfile::tempdir().unwrap();
    let genesis = dir.path().join("genesis.json");
    write_genesis(&genesis);
    let args = [
        "--init",
        genesis.to_str().unwrap(),
        "--chain-id",
        "4242",
        "--block-time",
        "1",
    ];
    let anvil = Anvil::start_with(&args).await;
    let store = dir.path().join("store");
    let (stop_follower, stopped) = tokio::sync::oneshot::channel::<()>();
    let follower = tokio::spawn(follow::run(
        follower_config(&store, &anvil, &genesis),
        async move {
            let _ = stopped.await;
        },
    ));
    let serve: Vec<String> = ["--store", store.to_str().unwrap(), "--rescan-secs", "0.2"]
        .map(String::from)
        .to_vec();
    let mut replicas = Vec::new();
    for _ in 0..3 {
        replicas.push(Process::start(Path::new(SERVER), &serve).await);
    }
    let ports: Vec<u16> = replicas.iter().map(|r| r.port).collect();
    let nginx = Nginx::start(dir.path(), &ports).await;
    let cache = tempfile::tempdir().unwrap();
    let proxy = start_proxy(&nginx.url, &anvil.url, cache.path()).await;
    let has_view = || async { proxy_status(&proxy).await["viewBlock"].as_u64() };
    test_support::eventually("the proxy has a view through nginx", has_view).await;

    let mut who: Vec<String> = idle_genesis_accounts();
    who.extend(ALL_DEV_ACCOUNTS.iter().map(|a| a.to_string()));
    let addresses = Arc::new(RwLock::new(who));
    let stop = Arc::new(AtomicBool::new(false));
    let progress = Arc::new(AtomicUsize::new(0));
    let wallets: Vec<_> = (0..WALLETS)
        .map(|i| {
            let (proxy, node) = (proxy.clone(), anvil.url.clone());
            let (who, stop, progress) = (addresses.clone(), stop.clone(), progress.clone());
            tokio::spawn(checking_client(i, proxy, node, who, stop, progress))
        })
        .collect();

    // The chain moves (a transfer a block to a fresh address) while one
    // replica is killed at 5 s and back at 10 s.
    let started = tokio::time::Instant::now();
    let mut killed = false;
    let mut k = 0u8;
    while started.elapsed() < LOAD {
        let to = format!("0x{}", format!("{:02x}", 0x60 + k).repeat(20));
        let value = format!("{:#x}", 0x100 + k as u64);
        anvil
            .send(json!({"from": DEV_ACCOUNTS[1], "to": to, "value": value}))
            .await;
        addresses.write().unwrap().push(to);
        k += 1;
        if !killed && started.elapsed() >= Duration::from_secs(5) {
            replicas[1].kill().await;
            killed = true;
            tokio::time::sleep_until(started + Duration::from_secs(10)).await;
            replicas[1].restart().await;
        }
    }
    stop.store(true, Ordering::SeqCst);
    let mut lookups = 0;
    for w in wallets {
        lookups += w
            .await
            .unwrap()
            .unwrap_or_else(|e| panic!("a wallet failed: {e}"));
    }
    assert!(lookups >= WALLETS, "only {lookups} lookups in {LOAD:?}");
    eprintln!("{lookups} lookups by {WALLETS} wallets, 0 wrong, 0 failed");

    // nginx sends the restarted replica work again.
    let back = &replicas[1].url;
    let before = answered(back).await;
    let proxy_again = proxy.clone();
    // Each probe reads an address never read (a key read before at this
    // base is answered from the proxy's kept answers, with no query).
    let probes = std::sync::atomic::AtomicU64::new(0);
    test_support::eventually("the restarted replica answers again", || async {
        let n = probes.fetch_add(1, Ordering::SeqCst);
        let who = format!("0x{:040x}", 0xfeed_0000_0000u64 + n);
        test_support::rpc(&proxy_again, "eth_getBalance", json!([who, "latest"]))
            .await
            .ok()?;
        (answered(back).await > before).then_some(())
    })
    .await;

    stop_follower.send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(30), follower)
        .await
        .expect("the follower stops")
        .unwrap()
        .unwrap();
}
