//! Test helpers shared by the crates' end-to-end tests: a real `anvil` node
//! (npm `@foundry-rs/anvil`, installed by `scripts/install-test-deps.sh`)
//! started on a free loopback port and killed on drop, and a minimal
//! JSON-RPC client for driving it.
#![forbid(unsafe_code)]

pub mod browser;

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use serde_json::value::RawValue;
use serde_json::{json, Value};

/// The first funded dev accounts of anvil (unlocked: no keys needed).
pub const DEV_ACCOUNTS: [&str; 4] = [
    "0xf39fd6e51aad88f6f4ce6ab8827279cfffb92266",
    "0x70997970c51812dc3a010c7d01b50e0d17dc79c8",
    "0x3c44cdddb6a900fa2b585dd299e03d12fa4293bc",
    "0x90f79bf6eb2c4f870365e785982e1f101e93b906",
];

/// Finds a Foundry tool: `$ANVIL` / `$CAST`, then the native binary npm put
/// in the project's `.tools` (the install script's), then `PATH`.
///
/// npm's `.bin/anvil` is a Node wrapper that spawns the native binary as a
/// child: killing the wrapper orphans the node, so tests never start it.
pub fn foundry_tool(name: &str) -> PathBuf {
    if let Some(p) = std::env::var_os(name.to_ascii_uppercase()) {
        return PathBuf::from(p);
    }
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    native_foundry_binary(&root.join(".tools/node_modules/@foundry-rs"), name)
        .unwrap_or_else(|| PathBuf::from(name))
}

/// `<dir>/<name>-<platform>/bin/<name>`: the platform package npm installed.
fn native_foundry_binary(dir: &std::path::Path, name: &str) -> Option<PathBuf> {
    let prefix = format!("{name}-");
    std::fs::read_dir(dir)
        .ok()?
        .filter_map(Result::ok)
        .filter(|e| {
            e.file_name()
                .to_str()
                .is_some_and(|n| n.starts_with(&prefix))
        })
        .map(|e| e.path().join("bin").join(name))
        .find(|p| p.is_file())
}

/// The project's `.tools/node_modules` (npm packages the install script
/// puts there).
pub fn node_modules() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.tools/node_modules")
}

/// The creation bytecode of an OpenZeppelin Contracts 4.9.6 contract, from
/// the compiled artifact the npm package ships.
pub fn openzeppelin_bytecode(name: &str) -> Vec<u8> {
    let path = node_modules().join(format!(
        "@openzeppelin/contracts/build/contracts/{name}.json"
    ));
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (run scripts/install-test-deps.sh)", path.display()));
    let artifact: Value = serde_json::from_str(&text).expect("an artifact is JSON");
    hex_bytes(artifact["bytecode"].as_str().expect("a bytecode field"))
}

/// Multicall3's creation bytecode as viem ships it (for its deployless
/// multicall), read from viem's compiled constants.
pub fn multicall3_bytecode() -> Vec<u8> {
    let path = node_modules().join("viem/_esm/constants/contracts.js");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (run scripts/install-test-deps.sh)", path.display()));
    let marker = "multicall3Bytecode = '";
    let start = text.find(marker).expect("viem's multicall3Bytecode") + marker.len();
    let end = start + text[start..].find('\'').expect("a closing quote");
    hex_bytes(&text[start..end])
}

/// The runtime code `init_code` deploys, as a hex string: run on a
/// throwaway anvil (for a genesis file that holds a contract from the
/// start, as mainnet's holds Multicall3).
pub async fn runtime_code(init_code: &[u8]) -> String {
    let anvil = Anvil::start().await;
    let deployed = anvil.deploy(DEV_ACCOUNTS[0], init_code).await;
    let code = anvil.rpc("eth_getCode", json!([deployed, "latest"])).await;
    code.as_str().expect("hex code").to_string()
}

fn hex_bytes(hex: &str) -> Vec<u8> {
    let digits = hex.trim_start_matches("0x").as_bytes();
    assert!(digits.len().is_multiple_of(2), "odd hex");
    digits
        .chunks(2)
        .map(|pair| u8::from_str_radix(std::str::from_utf8(pair).unwrap(), 16).expect("hex"))
        .collect()
}

/// A loopback port free at the moment of the call.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .expect("loopback port")
        .local_addr()
        .expect("addr")
        .port()
}

/// A running node, anvil or geth ([`Node::start_geth`]), in a process
/// group of its own; the whole group is killed when it is dropped or
/// stopped, so no node outlives its test.
pub struct Node {
    child: tokio::process::Child,
    pub url: String,
    pub port: u16,
}

/// Most tests run anvil.
pub type Anvil = Node;

impl Node {
    /// Starts anvil (chain id 31337, instant mining) on a free loopback port.
    pub async fn start() -> Anvil {
        Anvil::start_with(&[]).await
    }

    /// Starts anvil with extra arguments (`--init GENESIS`, `--block-time N`).
    pub async fn start_with(extra: &[&str]) -> Anvil {
        let bin = foundry_tool("anvil");
        let mut last = String::new();
        for _ in 0..3 {
            let port = free_port();
            let child = tokio::process::Command::new(&bin)
                .args([
                    "--host",
                    "127.0.0.1",
                    "--port",
                    &port.to_string(),
                    "--silent",
                    "--accounts",
                    "6",
                ])
                .args(extra)
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .process_group(0)
                .kill_on_drop(true)
                .spawn();
            let child = match child {
                Ok(c) => c,
                Err(e) => panic!(
                    "cannot start {} ({e}): run scripts/install-test-deps.sh",
                    bin.display()
                ),
            };
            let anvil = Node {
                child,
                url: format!("http://127.0.0.1:{port}"),
                port,
            };
            if anvil.answers().await {
                return anvil;
            }
            last = format!("anvil on port {port} did not answer");
        }
        panic!("{last}");
    }

    /// Whether the node answers JSON-RPC within [`PATIENCE`].
    async fn answers(&self) -> bool {
        let up = poll(PATIENCE, || async {
            self.try_rpc("eth_chainId", json!([])).await.ok()
        })
        .await;
        up.is_some()
    }

    /// Starts geth (`--dev`: a block per transaction, as anvil mines) on
    /// [`write_genesis_with`]'s chain with `extra` accounts, in `dir`: the
    /// config and system contracts of geth's dev chain (every fork at 0),
    /// [`DEV_ACCOUNTS`]`[0]`'s key in its keystore, unlocked, and the
    /// `eth`, `debug` and `net` namespaces on loopback. Returns the node
    /// and the genesis file it was initialised with.
    pub async fn start_geth(dir: &std::path::Path, extra: Vec<(String, Value)>) -> (Node, PathBuf) {
        Node::start_geth_with(dir, extra, &[]).await
    }

    /// [`Node::start_geth`] with more of geth's flags, given to its `init`
    /// too (`--cache.preimages`: the genesis accounts' preimages kept).
    pub async fn start_geth_with(
        dir: &std::path::Path,
        extra: Vec<(String, Value)>,
        flags: &[&str],
    ) -> (Node, PathBuf) {
        let geth = geth_binary();
        let genesis = dir.join("geth-genesis.json");
        write_geth_genesis(&geth, &genesis, extra);
        let data = dir.join("geth-data");
        let (key, password) = (dir.join("dev-key"), dir.join("password"));
        std::fs::write(&key, DEV_KEY).unwrap();
        std::fs::write(&password, "").unwrap();
        let path = |p: &std::path::Path| p.to_str().expect("a UTF-8 path").to_string();
        let (data_s, password_s) = (path(&data), path(&password));
        run_geth(
            &geth,
            &[
                "account",
                "import",
                "--lightkdf",
                "--datadir",
                &data_s,
                "--password",
                &password_s,
                &path(&key),
            ],
        );
        let init = ["init", "--datadir", &data_s, &path(&genesis)];
        run_geth(&geth, &[flags, &init[..]].concat());
        (Node::restart_geth(dir, flags).await, genesis)
    }

    /// Starts geth again over the datadir [`Node::start_geth_with`] made
    /// in `dir`, with the same `flags`.
    pub async fn restart_geth(dir: &std::path::Path, flags: &[&str]) -> Node {
        let path = |p: &std::path::Path| p.to_str().expect("a UTF-8 path").to_string();
        let (data, password) = (path(&dir.join("geth-data")), path(&dir.join("password")));
        let dev = ["--dev", "--datadir", &data, "--password", &password];
        let dev = [&dev[..], &["--authrpc.port", "0"], flags].concat();
        spawn_geth(&geth_binary(), &dev).await
    }

    /// geth's offline export of the head state of the datadir
    /// [`Node::start_geth_with`] made in `dir` (`geth snapshot dump`; geth
    /// must be stopped, [`Node::shutdown`]), written to `out`.
    pub fn geth_snapshot_dump(dir: &std::path::Path, out: &std::path::Path) {
        let data = dir.join("geth-data");
        let data = data.to_str().expect("a UTF-8 path");
        let dump = run_geth(&geth_binary(), &["snapshot", "dump", "--datadir", data]);
        std::fs::write(out, dump).expect("the dump written");
    }

    /// Starts an archive geth (hash scheme: every block's state kept, to
    /// be traced and read at any block) over a chain of blocks, as hive's
    /// rpc-compat simulator does: `genesis` initialised, `chain` (RLP
    /// blocks) imported, then `fcu` (an `engine_forkchoiceUpdated`
    /// request) sent to its engine API to set its head, safe and
    /// finalized blocks. Namespaces `eth`, `debug`, `net`, `web3` and
    /// `txpool` on loopback.
    pub async fn start_geth_chain(
        dir: &std::path::Path,
        genesis: &std::path::Path,
        chain: &std::path::Path,
        fcu: &std::path::Path,
    ) -> Node {
        let geth = geth_binary();
        let path = |p: &std::path::Path| p.to_str().expect("a UTF-8 path").to_string();
        let data = path(&dir.join("geth-data"));
        let archive = ["--state.scheme", "hash", "--gcmode", "archive"];
        let datadir = ["--datadir", data.as_str()];
        run_geth(
            &geth,
            &[&datadir[..], &archive[..2], &["init", &path(genesis)]].concat(),
        );
        run_geth(
            &geth,
            &[&datadir[..], &archive, &["import", &path(chain)]].concat(),
        );
        let secret = dir.join("jwt.hex");
        let key: [u8; 32] = std::array::from_fn(|i| (i as u8).wrapping_mul(37).wrapping_add(11));
        std::fs::write(&secret, hex_of(&key)).unwrap();
        let engine_port = free_port().to_string();
        let engine = [
            "--authrpc.addr",
            "127.0.0.1",
            "--authrpc.port",
            &engine_port,
            "--authrpc.jwtsecret",
            &path(&secret),
        ];
        let node = spawn_geth(&geth, &[&datadir[..], &archive, &engine].concat()).await;
        let request = std::fs::read(fcu).expect("the forkchoice request");
        let url = format!("http://127.0.0.1:{engine_port}");
        let answer = engine_call(&url, &key, request).await;
        assert_eq!(
            answer["result"]["payloadStatus"]["status"], "VALID",
            "geth's answer to the forkchoice update: {answer}"
        );
        node
    }

    /// Starts anvil on [`write_genesis`]'s chain from `genesis`, holding
    /// what the file holds and nothing more (no CREATE2 deployer added):
    /// its states are then exactly a genesis base and the blocks since.
    pub async fn start_from_genesis(genesis: &std::path::Path) -> Anvil {
        let chain = GENESIS_CHAIN_ID.to_string();
        let file = genesis.to_str().expect("a UTF-8 path");
        Anvil::start_with(&[
            "--init",
            file,
            "--chain-id",
            &chain,
            "--disable-default-create2-deployer",
        ])
        .await
    }

    async fn try_rpc(&self, method: &str, params: Value) -> Result<Value, String> {
        rpc(&self.url, method, params).await
    }

    /// A JSON-RPC call that must succeed.
    pub async fn rpc(&self, method: &str, params: Value) -> Value {
        self.try_rpc(method, params)
            .await
            .unwrap_or_else(|e| panic!("{method}: {e}"))
    }

    /// Sends a transaction from an unlocked dev account; returns its receipt.
    pub async fn send(&self, tx: Value) -> Value {
        let hash = self.rpc("eth_sendTransaction", json!([tx])).await;
        // (geth answers an error while it indexes its first blocks.)
        let mined = || async {
            let receipt = self
                .try_rpc("eth_getTransactionReceipt", json!([hash]))
                .await;
            receipt.ok().filter(|r| !r.is_null())
        };
        eventually(&format!("transaction {hash} mined"), mined).await
    }

    /// Sends `data` from the unlocked dev account `from`, to `to` or as a
    /// contract creation, with gas enough for a contract deployment; the
    /// receipt, which must say the transaction succeeded.
    pub async fn transact(&self, from: &str, to: Option<&str>, data: &[u8]) -> Value {
        let hex: String = data.iter().map(|b| format!("{b:02x}")).collect();
        let mut tx = json!({"from": from, "data": format!("0x{hex}"), "gas": "0x4c4b40"});
        if let Some(to) = to {
            tx["to"] = json!(to);
        }
        let receipt = self.send(tx).await;
        assert_eq!(receipt["status"], "0x1", "transaction failed: {receipt}");
        receipt
    }

    /// Deploys `init_code` from `from`: the new contract's address.
    pub async fn deploy(&self, from: &str, init_code: &[u8]) -> String {
        let receipt = self.transact(from, None, init_code).await;
        receipt["contractAddress"]
            .as_str()
            .expect("a creation's receipt names the contract")
            .to_string()
    }

    pub async fn head(&self) -> u64 {
        quantity(&self.rpc("eth_blockNumber", json!([])).await)
    }

    pub async fn balance(&self, address: &str, block: u64) -> String {
        self.rpc("eth_getBalance", json!([address, format!("{block:#x}")]))
            .await
            .as_str()
            .unwrap()
            .to_string()
    }

    pub async fn nonce(&self, address: &str, block: u64) -> String {
        self.rpc(
            "eth_getTransactionCount",
            json!([address, format!("{block:#x}")]),
        )
        .await
        .as_str()
        .unwrap()
        .to_string()
    }

    /// The node's process id (also its process group id).
    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// Stops the node as an operator does (SIGINT: geth writes its state
    /// out first) and waits for it to exit; killed after [`PATIENCE`].
    pub async fn shutdown(mut self) {
        if let Some(pid) = self.child.id() {
            let _ = std::process::Command::new("kill")
                .args(["-INT", &pid.to_string()])
                .status();
        }
        if tokio::time::timeout(PATIENCE, self.child.wait())
            .await
            .is_err()
        {
            self.stop().await;
        }
    }

    /// Stops the node now and waits for it to exit.
    pub async fn stop(mut self) {
        self.kill_group();
        let _ = self.child.kill().await;
    }

    fn kill_group(&self) {
        if let Some(pid) = self.child.id() {
            // The child leads its own group: `kill -KILL -PID` ends it and
            // anything it started.
            let _ = std::process::Command::new("kill")
                .args(["-KILL", "--", &format!("-{pid}")])
                .stderr(Stdio::null())
                .status();
        }
    }
}

impl Drop for Anvil {
    fn drop(&mut self) {
        self.kill_group();
    }
}

/// The private key of [`DEV_ACCOUNTS`]`[0]` (Foundry's and Hardhat's
/// well-known first test key).
const DEV_KEY: &str = "ac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80";

/// geth: `$GETH`, then the one the install script built into
/// `.tools/geth/bin`, then `PATH`.
pub fn geth_binary() -> PathBuf {
    if let Some(p) = std::env::var_os("GETH") {
        return PathBuf::from(p);
    }
    let built = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.tools/geth/bin/geth");
    match built.is_file() {
        true => built,
        false => PathBuf::from("geth"),
    }
}

/// geth with `args` and its HTTP JSON-RPC (`eth`, `debug`, `net`, `web3`,
/// `txpool`) on a free loopback port, no peers, in a process group of its
/// own; once it answers.
async fn spawn_geth(geth: &std::path::Path, args: &[&str]) -> Node {
    let port = free_port();
    let child = tokio::process::Command::new(geth)
        .args(args)
        .args(["--http", "--http.addr", "127.0.0.1"])
        .args(["--http.port", &port.to_string()])
        .args(["--http.api", "eth,debug,net,web3,txpool"])
        .args(["--nodiscover", "--ipcdisable", "--port", "0"])
        .args(["--verbosity", "2"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {} ({e})", geth.display()));
    let node = Node {
        child,
        url: format!("http://127.0.0.1:{port}"),
        port,
    };
    assert!(node.answers().await, "geth on port {port} did not answer");
    node
}

/// A call to an engine API: `body` posted with a JWT (HS256 over `key`,
/// issued now), polled until the endpoint answers; its JSON answer.
async fn engine_call(url: &str, key: &[u8], body: Vec<u8>) -> Value {
    let http = reqwest::Client::new();
    let send = || async {
        let response = http
            .post(url)
            .header("content-type", "application/json")
            .header("authorization", format!("Bearer {}", engine_jwt(key)))
            .body(body.clone())
            .send()
            .await
            .ok()?;
        serde_json::from_slice::<Value>(&response.bytes().await.ok()?).ok()
    };
    eventually("the engine API answers", send).await
}

/// An engine API token (EIP-3675's JWT: HS256, `iat` now).
fn engine_jwt(key: &[u8]) -> String {
    use base64::Engine as _;
    use hmac::Mac as _;
    let b64 = |bytes: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("a clock after 1970")
        .as_secs();
    let header = b64(br#"{"alg":"HS256","typ":"JWT"}"#);
    let claims = b64(format!(r#"{{"iat":{now}}}"#).as_bytes());
    let signed = format!("{header}.{claims}");
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(key).expect("any key length");
    mac.update(signed.as_bytes());
    format!("{signed}.{}", b64(&mac.finalize().into_bytes()))
}

fn hex_of(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// One geth command that must succeed: its output.
fn run_geth(geth: &std::path::Path, args: &[&str]) -> Vec<u8> {
    let out = std::process::Command::new(geth)
        .args(args)
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "cannot run {} ({e}): run scripts/install-test-deps.sh",
                geth.display()
            )
        });
    assert!(
        out.status.success(),
        "geth {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// geth's dev genesis (`geth --dev dumpgenesis`: its fork schedule and
/// system contracts) with [`write_genesis_with`]'s chain id and accounts.
fn write_geth_genesis(geth: &std::path::Path, path: &std::path::Path, extra: Vec<(String, Value)>) {
    let dumped = run_geth(geth, &["--dev", "dumpgenesis"]);
    let mut dev: Value = serde_json::from_slice(&dumped).expect("geth's genesis is JSON");
    dev["config"]["chainId"] = json!(GENESIS_CHAIN_ID);
    let alloc = dev["alloc"].as_object_mut().expect("an alloc");
    alloc.extend(genesis_alloc(extra));
    std::fs::write(path, serde_json::to_vec_pretty(&dev).unwrap()).unwrap();
}

/// Live (not zombie) processes whose command line has `--port <port>`:
/// what a test checks to prove that a node it stopped is gone.
pub fn processes_on_port(port: u16) -> Vec<u32> {
    let port = port.to_string();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let args: Vec<&[u8]> = cmdline.split(|&b| b == 0).collect();
            let listens = args
                .windows(2)
                .any(|w| w[0] == b"--port" && w[1] == port.as_bytes());
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let zombie = stat
                .rsplit_once(')')
                .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z'));
            listens && !zombie
        })
        .collect()
}

/// POSTs a JSON-RPC body; the parsed reply.
async fn post_json(http: &reqwest::Client, url: &str, body: String) -> Result<Value, String> {
    let resp = http
        .post(url)
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .map_err(|e| e.to_string())?;
    serde_json::from_slice(&resp.bytes().await.map_err(|e| e.to_string())?)
        .map_err(|e| e.to_string())
}

/// JSON params passed as they are (an array, an object or nothing).
struct JsonParams(Value);

impl jsonrpsee::core::traits::ToRpcParams for JsonParams {
    fn to_rpc_params(self) -> Result<Option<Box<RawValue>>, serde_json::Error> {
        match self.0 {
            Value::Null => Ok(None),
            v => serde_json::value::to_raw_value(&v).map(Some),
        }
    }
}

/// A JSON-RPC call over HTTP through jsonrpsee's client: the `result`, or
/// the error object (or the transport failure) as text.
pub async fn rpc(url: &str, method: &str, params: Value) -> Result<Value, String> {
    use jsonrpsee::core::client::{ClientT, Error};
    let client = jsonrpsee::http_client::HttpClient::builder()
        .request_timeout(PATIENCE)
        .build(url)
        .map_err(|e| e.to_string())?;
    match client.request(method, JsonParams(params)).await {
        Ok(v) => Ok(v),
        Err(Error::Call(e)) => Err(serde_json::to_string(&e).expect("an error object")),
        Err(e) => Err(e.to_string()),
    }
}

/// The full JSON-RPC reply (result or error) of one call.
pub async fn rpc_raw(http: &reqwest::Client, url: &str, body: &str) -> Value {
    post_json(http, url, body.to_string())
        .await
        .expect("a JSON reply")
}

/// A hex quantity as u64.
pub fn quantity(v: &Value) -> u64 {
    u64::from_str_radix(v.as_str().expect("hex string").trim_start_matches("0x"), 16)
        .expect("hex quantity")
}

/// A scripted history on anvil: transfers to fresh addresses, a contract
/// creation with value and a transfer between funded accounts, one block
/// each. Returns, per block, the accounts it touched (miner included).
pub async fn make_history(anvil: &Anvil) -> Vec<(u64, Vec<String>)> {
    let fresh = |i: u8| format!("0x{}", format!("{i:02x}").repeat(20));
    let mut out = Vec::new();
    let steps: Vec<Value> = vec![
        json!({"from": DEV_ACCOUNTS[0], "to": fresh(0x11), "value": "0xde0b6b3a7640000"}),
        json!({"from": DEV_ACCOUNTS[1], "to": fresh(0x22), "value": "0x1bc16d674ec80000"}),
        json!({"from": DEV_ACCOUNTS[0], "data": "0x6080604052", "value": "0x5"}),
        json!({"from": DEV_ACCOUNTS[2], "to": DEV_ACCOUNTS[0], "value": "0x2386f26fc10000"}),
        json!({"from": DEV_ACCOUNTS[1], "to": fresh(0x33), "value": "0x1"}),
        json!({"from": DEV_ACCOUNTS[3], "to": fresh(0x11), "value": "0x29a2241af62c0000"}),
    ];
    for tx in steps {
        let receipt = anvil.send(tx.clone()).await;
        let block = quantity(&receipt["blockNumber"]);
        let header = anvil
            .rpc(
                "eth_getBlockByNumber",
                json!([format!("{block:#x}"), false]),
            )
            .await;
        let mut touched = vec![
            tx["from"].as_str().unwrap().to_lowercase(),
            header["miner"].as_str().unwrap().to_lowercase(),
        ];
        if let Some(to) = tx.get("to").and_then(Value::as_str) {
            touched.push(to.to_lowercase());
        }
        if let Some(c) = receipt.get("contractAddress").and_then(Value::as_str) {
            touched.push(c.to_lowercase());
        }
        touched.sort();
        touched.dedup();
        out.push((block, touched));
    }
    out
}

/// anvil's six funded dev accounts (`--accounts 6`), in order.
pub const ALL_DEV_ACCOUNTS: [&str; 6] = [
    DEV_ACCOUNTS[0],
    DEV_ACCOUNTS[1],
    DEV_ACCOUNTS[2],
    DEV_ACCOUNTS[3],
    "0x15d34aaf54267db7d7c367839aaf71a00a2c6a65",
    "0x9965507d1a55bcc2695c58ba16fb37d819b0a4dc",
];

/// Chain id of [`write_genesis`]'s chain.
pub const GENESIS_CHAIN_ID: u64 = 4242;

/// Accounts of [`write_genesis`] that no test transaction touches.
pub fn idle_genesis_accounts() -> Vec<String> {
    (1..=24u8)
        .map(|i| format!("0x{}", format!("{:02x}", 0xa0 + i).repeat(20)))
        .collect()
}

/// Writes a genesis file for `anvil --init FILE --chain-id 4242`: the dev
/// accounts (anvil funds them with 10,000 ETH whatever the file says, so
/// the file says so too) and idle accounts with assorted balances and
/// nonces that no test touches.
pub fn write_genesis(path: &std::path::Path) {
    write_genesis_with(path, Vec::new());
}

/// [`write_genesis`]'s file with `extra` accounts (address, account as
/// the alloc holds it) in its alloc too.
pub fn write_genesis_with(path: &std::path::Path, extra: Vec<(String, Value)>) {
    let genesis = json!({
        "config": {"chainId": GENESIS_CHAIN_ID},
        "nonce": "0x0",
        "timestamp": "0x0",
        "gasLimit": "0x1c9c380",
        "difficulty": "0x0",
        "extraData": "0x",
        "alloc": genesis_alloc(extra),
    });
    std::fs::write(path, serde_json::to_vec_pretty(&genesis).unwrap()).unwrap();
}

/// [`write_genesis`]'s accounts, with `extra` (address, account).
fn genesis_alloc(extra: Vec<(String, Value)>) -> serde_json::Map<String, Value> {
    let mut alloc = serde_json::Map::new();
    for a in ALL_DEV_ACCOUNTS {
        alloc.insert(a.to_string(), json!({"balance": "0x21e19e0c9bab2400000"}));
    }
    for (i, a) in idle_genesis_accounts().into_iter().enumerate() {
        let balance = format!("{:#x}", 1_000_003u64 * (i as u64 + 1) * (i as u64 + 7));
        alloc.insert(
            a,
            json!({"balance": balance, "nonce": format!("{:#x}", i % 5)}),
        );
    }
    alloc.extend(extra);
    alloc
}

/// A CREATE2 factory for the genesis alloc (salt 0, the calldata as init
/// code), at [`CREATE2_FACTORY`].
pub const CREATE2_FACTORY_CODE: &str = "0x365f5f375f365f5ff55000";
pub const CREATE2_FACTORY: &str = "0x00000000000000000000000000000000000fac70";

/// Init code for [`CREATE2_FACTORY`]: SSTORE(1, 9), then a runtime that
/// destroys itself (SELFDESTRUCT to the caller) on empty calldata and
/// else stores its first calldata word at slot 3; created again at the
/// same address after its destruction (before Cancun).
pub const REBORN_INIT_CODE: &str = "6009600155600e600f5f39600e5ff33615600b575f35600355005b33ff";

/// Init code of a contract that sends the value it receives on to the
/// address in the first calldata word (an internal transfer, seen only in
/// call traces).
pub const FORWARDER_INIT_CODE: &str = "0x600f600c600039600f6000f36000600060006000346000355af100";

/// Calldata for the forwarder: send the call's value to `to`.
pub fn forward_to(to: &str) -> String {
    format!("0x{:0>64}", to.trim_start_matches("0x"))
}

/// How long a test waits for something that must happen: generous enough
/// for a loaded 2-core machine, finite so that a hung test still fails.
pub const PATIENCE: Duration = Duration::from_secs(120);

/// Polls `probe` every 50 ms until it yields a value, for at most `limit`;
/// `None` if it never did. Tests wait this way, never by a fixed sleep.
pub async fn poll<T, F, Fut>(limit: Duration, mut probe: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if let Some(v) = probe().await {
            return Some(v);
        }
        if tokio::time::Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Polls `probe` until it yields a value, for at most [`PATIENCE`];
/// panics naming `what` if it never does.
pub async fn eventually<T, F, Fut>(what: &str, probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    match poll(PATIENCE, probe).await {
        Some(v) => v,
        None => panic!("{what}: not within {} s", PATIENCE.as_secs()),
    }
}

/// A program of ours (`ethpir-server`) run as a real process on a loopback
/// port: started with `--listen 127.0.0.1:<port>` added to its arguments,
/// killed with SIGKILL on [`Self::kill`] or drop, and started again on the
/// same port by [`Self::restart`] (what a supervisor does after a crash).
pub struct Process {
    bin: PathBuf,
    args: Vec<String>,
    child: Option<tokio::process::Child>,
    pub port: u16,
    pub url: String,
}

impl Process {
    /// Starts `bin args --listen 127.0.0.1:<free port>` and waits until
    /// `GET /healthz` answers; a port taken meanwhile is tried again.
    pub async fn start(bin: &std::path::Path, args: &[String]) -> Process {
        for _ in 0..3 {
            let port = free_port();
            let mut p = Process {
                bin: bin.to_path_buf(),
                args: args.to_vec(),
                child: None,
                port,
                url: format!("http://127.0.0.1:{port}"),
            };
            if p.spawn().await {
                return p;
            }
        }
        panic!("{} did not come up on three ports", bin.display());
    }

    /// Spawns the program on `self.port`; whether `/healthz` answered.
    async fn spawn(&mut self) -> bool {
        let child = tokio::process::Command::new(&self.bin)
            .args(&self.args)
            .args(["--listen", &format!("127.0.0.1:{}", self.port)])
            .env("ETHPIR_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", self.bin.display()));
        let child = std::sync::Mutex::new(child);
        let http = reqwest::Client::new();
        let health = format!("{}/healthz", self.url);
        let up = poll(PATIENCE, || async {
            if let Ok(Some(_)) = child.lock().expect("lock").try_wait() {
                return Some(false); // exited: the port was taken
            }
            let ok = http.get(&health).send().await.ok()?.status().is_success();
            ok.then_some(true)
        })
        .await;
        self.child = Some(child.into_inner().expect("lock"));
        up == Some(true)
    }

    /// SIGKILL, and waits for the process to be gone.
    pub async fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill().await;
        }
    }

    /// Starts the program again on the same port (after [`Self::kill`]).
    pub async fn restart(&mut self) {
        self.kill().await;
        assert!(self.spawn().await, "{} did not come back", self.url);
    }
}

/// The proxy's `ethpir_status`.
pub async fn proxy_status(proxy: &str) -> Value {
    rpc(proxy, "ethpir_status", json!([])).await.unwrap()
}

/// A read of anvil at a block: while anvil mines under load its state
/// lookups can briefly lag the block number it has announced ("block
/// height is N but requested was N+1"); such a read is repeated until
/// anvil's state has the block (within [`PATIENCE`]). Any other error is
/// returned as it is.
async fn node_read(url: &str, method: &str, params: Value) -> Result<Value, String> {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        match rpc(url, method, params.clone()).await {
            Err(e) if e.contains("BlockOutOfRange") && tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            other => return other,
        }
    }
}

/// One wallet of a load test through a proxy: looks up addresses
/// round-robin at the view's block (`ethpir_status`), and now and then at
/// `latest`, comparing with anvil; counts its lookups in `progress` and
/// returns their number, or the first mismatch or failure.
pub async fn checking_client(
    i: usize,
    proxy: String,
    anvil_url: String,
    addresses: Arc<RwLock<Vec<String>>>,
    stop: Arc<AtomicBool>,
    progress: Arc<AtomicUsize>,
) -> Result<usize, String> {
    let node = |method: &'static str, params: Value| {
        let url = anvil_url.clone();
        async move { node_read(&url, method, params).await }
    };
    let mut lookups = 0;
    let mut k = i;
    while !stop.load(Ordering::SeqCst) {
        let address = {
            let all = addresses.read().unwrap();
            all[k % all.len()].clone()
        };
        k += 7;
        progress.fetch_add(1, Ordering::SeqCst);
        let before = proxy_status(&proxy).await["viewBlock"].as_u64().unwrap();
        if lookups % 5 == 4 {
            let got = rpc(&proxy, "eth_getBalance", json!([address, "latest"])).await?;
            let after = proxy_status(&proxy).await["viewBlock"].as_u64().unwrap();
            below_head(&anvil_url, after).await?;
            let mut matched = false;
            for b in before..=after {
                matched |=
                    node("eth_getBalance", json!([address, format!("{b:#x}")])).await? == got;
            }
            if !matched {
                let around = anvil_around(&node, "eth_getBalance", &address, before, after).await?;
                return Err(format!(
                    "{address} at latest ({before}..={after}): {got}; anvil {around:?}"
                ));
            }
        } else {
            below_head(&anvil_url, before).await?;
            let at = format!("{before:#x}");
            for method in ["eth_getBalance", "eth_getTransactionCount"] {
                let got = rpc(&proxy, method, json!([address, at])).await;
                let want = node(method, json!([address, at])).await?;
                if got.as_ref() != Ok(&want) {
                    let around = anvil_around(&node, method, &address, before, before).await?;
                    return Err(format!(
                        "{method} {address} at {before}: {got:?}, anvil {around:?}"
                    ));
                }
            }
        }
        lookups += 1;
    }
    Ok(lookups)
}

/// Waits (within [`PATIENCE`]) until anvil's head is past `block`. With
/// `--block-time`, anvil answers for its head block from the state it is
/// already changing while it mines the next one, so a read at the head can
/// see the next block's transactions; every block below the head is
/// settled. The follower keeps its deltas a confirmation behind, but a
/// genesis base is at block 0 from the start, while block 0 may still be
/// the head: compare nothing at a block until anvil has moved past it.
async fn below_head(anvil_url: &str, block: u64) -> Result<(), String> {
    let past = || async {
        let head = rpc(anvil_url, "eth_blockNumber", json!([])).await.ok()?;
        (quantity(&head) > block).then_some(())
    };
    poll(PATIENCE, past)
        .await
        .ok_or_else(|| format!("anvil's head did not pass block {block}"))
}

/// anvil's answers from two blocks before `from` to two after `to`, for
/// the message of a mismatch.
async fn anvil_around<F, Fut>(
    node: &F,
    method: &'static str,
    address: &str,
    from: u64,
    to: u64,
) -> Result<Vec<(u64, Value)>, String>
where
    F: Fn(&'static str, Value) -> Fut,
    Fut: std::future::Future<Output = Result<Value, String>>,
{
    let mut out = Vec::new();
    for b in from.saturating_sub(2)..=to + 2 {
        out.push((b, node(method, json!([address, format!("{b:#x}")])).await?));
    }
    Ok(out)
}
