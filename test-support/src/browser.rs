//! Debian's headless Chromium, run as a real browser over a page on
//! loopback: the DOM after its scripts ran, and a screenshot. Each run is
//! a process group of its own with a fresh profile, killed whole when it
//! ends or overruns, so that no renderer or zygote outlives the test.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

/// The longest one browser run may take.
const RUN_LIMIT: Duration = Duration::from_secs(90);

/// The browser: `ETHPIR_CHROMIUM`, else Debian's `/usr/bin/chromium`
/// (scripts/install-test-deps.sh installs it).
pub fn chromium() -> PathBuf {
    let path = std::env::var_os("ETHPIR_CHROMIUM")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/bin/chromium"));
    assert!(
        path.exists(),
        "{} not found: run scripts/install-test-deps.sh (Debian's chromium), or set ETHPIR_CHROMIUM",
        path.display()
    );
    path
}

/// Runs Chromium headless on `url` with `extra` arguments, in a process
/// group that is killed whole afterwards; its stdout.
async fn run(url: &str, extra: &[String]) -> String {
    let profile = tempfile_dir();
    let mut child = tokio::process::Command::new(chromium())
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-dev-shm-usage",
            "--hide-scrollbars",
            // Lets the page's scripts run (and fetch) before the dump.
            "--virtual-time-budget=4000",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(extra)
        .arg(url)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
        .expect("chromium starts");
    let pid = child.id().expect("a running child");
    let mut stdout = child.stdout.take().expect("piped");
    let read = async {
        let mut out = String::new();
        tokio::io::AsyncReadExt::read_to_string(&mut stdout, &mut out)
            .await
            .expect("chromium's output");
        let status = child.wait().await.expect("chromium exits");
        (out, status)
    };
    let done = tokio::time::timeout(RUN_LIMIT, read).await;
    let _ = std::process::Command::new("kill")
        .args(["-KILL", "--", &format!("-{pid}")])
        .stderr(Stdio::null())
        .status();
    let _ = std::fs::remove_dir_all(&profile);
    let (out, status) = done.unwrap_or_else(|_| panic!("chromium on {url}: over {RUN_LIMIT:?}"));
    assert!(status.success(), "chromium on {url}: {status}");
    out
}

fn tempfile_dir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "ethpir-chromium-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos())
    ));
    std::fs::create_dir_all(&dir).expect("a profile folder");
    dir
}

/// The page's DOM once its scripts have run.
pub async fn dom(url: &str) -> String {
    run(url, &["--dump-dom".to_string()]).await
}

/// A screenshot of the page (1280 x `height` CSS pixels) at `png`; checks
/// that a PNG was written.
pub async fn screenshot(url: &str, png: &Path, height: u32) {
    run(
        url,
        &[
            format!("--screenshot={}", png.display()),
            format!("--window-size=1280,{height}"),
        ],
    )
    .await;
    let bytes = std::fs::read(png).unwrap_or_else(|e| panic!("{}: {e}", png.display()));
    assert!(
        bytes.starts_with(b"\x89PNG\r\n\x1a\n") && bytes.len() > 10_000,
        "{} is not a screenshot",
        png.display()
    );
}
