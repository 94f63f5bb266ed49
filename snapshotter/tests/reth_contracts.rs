//! The `reth` source against real reth 2.5.1 datadirs whose chains
//! deployed contracts and wrote storage (v1 and v2 layouts, made by
//! `scripts/make-reth-fixtures.py` from a dev node): two ERC-20s (balances
//! at slot 0 and at slot 2), Multicall3 at its canonical address,
//! approvals, words cleared to zero, self-destructs, an EIP-7702
//! delegation that wrote an EOA's storage. Checked against the node's own
//! answers at every block (the oracle beside each datadir): accounts at
//! every block, code hashes and storage roots at the head, every storage
//! word of the contracts at every block (the change sets of both layouts
//! undone), the head's state root recomputed from the export, and token
//! balances read through PIR from `build reth [--block N] --tokens FILE`.
#![cfg(feature = "reth")]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use alloy_primitives::{Address, B256, U256};
use protocol::storage::{decode_word, high_part_key, join_word, storage_key_of, StoredWord};
use protocol::tokens::{MappingLayout, SlotIndex, TokenEntry, TokenList};
use serde_json::Value;
use snapshotter::slot_sort::SlotSorter;
use snapshotter::sources::reth::{Layout, RethDatadir, RethMode};
use snapshotter::{SnapshotStore, StoredSnapshot};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/reth")
        .join(name)
}

/// A datadir unpacked into a temporary directory (MDBX needs a writable
/// directory for its lock file, even read-only), with its oracle.
struct Fixture {
    _dir: tempfile::TempDir,
    datadir: PathBuf,
    oracle: Oracle,
}

fn open(layout: &str) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let file =
        std::fs::File::open(fixture(&format!("reth-2.5.1-contracts-{layout}.tar.zst"))).unwrap();
    let decoder = ruzstd::decoding::StreamingDecoder::new(file).unwrap();
    tar::Archive::new(decoder).unpack(dir.path()).unwrap();
    let datadir = dir.path().join(format!("reth-contracts-{layout}"));
    let file =
        std::fs::File::open(fixture(&format!("oracle-contracts-{layout}.json.zst"))).unwrap();
    let decoder = ruzstd::decoding::StreamingDecoder::new(file).unwrap();
    let oracle = Oracle::parse(&serde_json::from_reader(decoder).unwrap());
    Fixture {
        _dir: dir,
        datadir,
        oracle,
    }
}

/// An account as the node's `eth_getProof` gave it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Account {
    balance: U256,
    nonce: u64,
    code_hash: B256,
    storage_root: B256,
}

/// The node's answers (the module text of `make-reth-fixtures.py`).
struct Oracle {
    chain_id: u64,
    head: u64,
    contracts: BTreeMap<String, Address>,
    /// (token, its balances mapping's slot).
    tokens: Vec<(Address, u64)>,
    hashes: Vec<B256>,
    state_roots: Vec<B256>,
    /// By block: the accounts its transactions touched (the tracer's).
    touched: Vec<Vec<Address>>,
    /// By block: every account the chain touched.
    state: Vec<BTreeMap<Address, Account>>,
    /// By block: every slot the chain ever wrote, by account (zero words
    /// included).
    storage: Vec<BTreeMap<Address, BTreeMap<B256, U256>>>,
}

fn parse<T: std::str::FromStr>(v: &Value) -> T
where
    T::Err: std::fmt::Debug,
{
    v.as_str().unwrap().parse().unwrap()
}

impl Oracle {
    fn parse(v: &Value) -> Oracle {
        let head = v["head"].as_u64().unwrap();
        let blocks = v["blocks"].as_array().unwrap();
        let at = |n: u64| &v["state"][n.to_string()];
        let account = |a: &Value| Account {
            balance: U256::from_str_radix(a["balance"].as_str().unwrap(), 10).unwrap(),
            nonce: a["nonce"].as_u64().unwrap(),
            code_hash: parse(&a["codeHash"]),
            storage_root: parse(&a["storageRoot"]),
        };
        let words = |slots: &Value| -> BTreeMap<B256, U256> {
            slots
                .as_object()
                .unwrap()
                .iter()
                .map(|(slot, word)| (slot.parse().unwrap(), parse(word)))
                .collect()
        };
        Oracle {
            chain_id: v["chainId"].as_u64().unwrap(),
            head,
            contracts: v["contracts"]
                .as_object()
                .unwrap()
                .iter()
                .map(|(name, a)| (name.clone(), parse(a)))
                .collect(),
            tokens: v["tokens"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| (parse(&t["address"]), t["balanceSlot"].as_u64().unwrap()))
                .collect(),
            hashes: blocks.iter().map(|b| parse(&b["hash"])).collect(),
            state_roots: blocks.iter().map(|b| parse(&b["stateRoot"])).collect(),
            touched: blocks
                .iter()
                .map(|b| b["touched"].as_array().unwrap().iter().map(parse).collect())
                .collect(),
            state: (0..=head)
                .map(|n| {
                    at(n)
                        .as_object()
                        .unwrap()
                        .iter()
                        .map(|(a, acc)| (a.parse().unwrap(), account(acc)))
                        .collect()
                })
                .collect(),
            storage: (0..=head)
                .map(|n| {
                    v["storage"][n.to_string()]
                        .as_object()
                        .map(|m| {
                            m.iter()
                                .map(|(a, slots)| (a.parse().unwrap(), words(slots)))
                                .collect()
                        })
                        .unwrap_or_default()
                })
                .collect(),
        }
    }

    /// Every account whose storage the chain wrote (the contracts, and
    /// the EOA whose delegation wrote its own).
    fn with_storage(&self) -> Vec<Address> {
        let mut all: Vec<Address> = self
            .storage
            .iter()
            .flat_map(|by_account| by_account.keys().copied())
            .collect();
        all.sort();
        all.dedup();
        all
    }

    /// The non-zero words of `accounts` at block `n` by PIR key.
    fn words_at(&self, n: u64, accounts: &[Address]) -> BTreeMap<B256, U256> {
        let mut out = BTreeMap::new();
        for a in accounts {
            for (slot, word) in self.storage[n as usize].get(a).into_iter().flatten() {
                if !word.is_zero() {
                    out.insert(storage_key_of(a, slot), *word);
                }
            }
        }
        out
    }

    /// The token list of the two ERC-20s (OpenZeppelin 4.9.6's presets).
    fn token_list(&self) -> TokenList {
        TokenList {
            tokens: self
                .tokens
                .iter()
                .map(|&(address, slot)| TokenEntry {
                    chain_id: self.chain_id,
                    address,
                    symbol: String::new(),
                    function: Default::default(),
                    balance_slot: SlotIndex::Position(slot),
                    layout: MappingLayout::Solidity,
                    source: "test: scripts/make-reth-fixtures.py".into(),
                })
                .collect(),
            ..Default::default()
        }
    }
}

/// Hashes, state roots and every account at every block, with its code
/// hash and storage root (from the change sets below the head); the state
/// root the records give at each block is the one in reth's header.
fn check_accounts(reth: &RethDatadir, oracle: &Oracle) {
    assert_eq!(reth.head().unwrap(), oracle.head);
    let hashes = reth.block_hashes().unwrap();
    let headers = reth.headers().unwrap();
    let mut with_code = 0;
    for n in 0..=oracle.head {
        let root = oracle.state_roots[n as usize];
        assert_eq!(hashes[&n], oracle.hashes[n as usize], "hash of block {n}");
        assert_eq!(headers[&n].0, root, "root of block {n}");
        let records = reth.state_at(n).unwrap();
        assert_eq!(
            state_root(&records),
            root,
            "the records' state root at block {n}"
        );
        let state: BTreeMap<B256, Account> = records
            .into_iter()
            .map(|r| {
                let account = Account {
                    balance: r.balance,
                    nonce: r.nonce,
                    code_hash: r.code_hash,
                    storage_root: r.storage_root,
                };
                (r.key, account)
            })
            .collect();
        for (address, want) in &oracle.state[n as usize] {
            match state.get(&snapshotter::pir_key(address)) {
                Some(got) => assert_eq!(got, want, "{address} at block {n}"),
                None => assert_eq!(
                    (want.nonce, want.balance),
                    (0, U256::ZERO),
                    "{address} at {n}"
                ),
            }
        }
        with_code = state
            .values()
            .filter(|a| a.code_hash != protocol::account::EMPTY_CODE_HASH)
            .count();
    }
    assert!(with_code >= 5, "contracts at the head: {with_code}");
}

/// Deltas and active sets from the change sets: a delta `(from, to]`
/// holds every account whose balance or nonce changed in it, each as the
/// node had it at `to` (0/0 where it no longer exists), and only accounts
/// the node's tracer saw touched; an active set likewise at the head.
fn check_deltas_and_active_sets(reth: &RethDatadir, oracle: &Oracle) {
    let head = oracle.head;
    let touched = |from: u64, to: u64| -> Vec<Address> {
        (from + 1..=to)
            .flat_map(|n| oracle.touched[n as usize].iter().copied())
            .collect()
    };
    let changed = |from: u64, to: u64| -> Vec<Address> {
        let at = |n: u64, a: &Address| {
            oracle.state[n as usize]
                .get(a)
                .map(|x| (x.nonce, x.balance))
                .unwrap_or_default()
        };
        touched(from, to)
            .into_iter()
            .filter(|a| at(from, a) != at(to, a))
            .collect()
    };
    for (from, to) in [(0, head), (10, 20), (head / 2, head - 1), (head - 1, head)] {
        let delta = reth.export_delta(from, to, oracle.chain_id).unwrap();
        let got: BTreeMap<Address, (u64, U256)> = delta
            .records
            .iter()
            .map(|r| (r.address.unwrap(), (r.nonce, r.balance)))
            .collect();
        let seen = touched(from, to);
        for (address, state) in &got {
            assert!(
                seen.contains(address),
                "{address} in ({from}, {to}] but not touched"
            );
            let want = oracle.state[to as usize]
                .get(address)
                .map(|x| (x.nonce, x.balance))
                .unwrap_or_default();
            assert_eq!(*state, want, "{address} at {to}");
        }
        for address in changed(from, to) {
            assert!(
                got.contains_key(&address),
                "{address} changed in ({from}, {to}]"
            );
        }
    }
    for window in [1, 5, 40] {
        let active = reth
            .export(RethMode::Active { window }, oracle.chain_id)
            .unwrap();
        let got: Vec<Address> = active.records.iter().map(|r| r.address.unwrap()).collect();
        let seen = touched(head - window, head);
        assert!(
            got.iter().all(|a| seen.contains(a)),
            "active set of {window}"
        );
        for address in changed(head - window, head) {
            assert!(
                got.contains(&address),
                "{address} changed in the last {window}"
            );
        }
    }
}

/// The state root of `records` (in any order: a v1 head comes by address).
fn state_root(records: &[snapshotter::AccountRecord]) -> B256 {
    let mut records = records.to_vec();
    records.sort_by_key(|r| r.key);
    let records = &records;
    snapshotter::state_root::state_root(|nibble| {
        Box::new(
            records
                .iter()
                .filter(move |r| r.key[0] >> 4 == nibble)
                .cloned(),
        )
    })
    .unwrap()
}

/// Every word the chain wrote, at every block, from the datadir's storage
/// and its change sets undone: the node's words, zero ones absent.
fn check_storage_at_every_block(reth: &RethDatadir, oracle: &Oracle) {
    let accounts = oracle.with_storage();
    for name in ["plain", "slotted", "vault", "delegated"] {
        assert!(
            accounts.contains(&oracle.contracts[name]),
            "{name} wrote storage"
        );
    }
    let mut changed = 0;
    for n in 0..=oracle.head {
        let got: BTreeMap<B256, U256> = reth
            .storage_at(n, &accounts)
            .unwrap()
            .into_iter()
            .map(|s| {
                assert!(s.contract.is_some_and(|c| accounts.contains(&c)));
                (s.key, s.value)
            })
            .collect();
        let want = oracle.words_at(n, &accounts);
        assert_eq!(got, want, "storage at block {n}");
        changed += usize::from(n > 0 && want != oracle.words_at(n - 1, &accounts));
    }
    assert!(changed > 50, "storage changed in {changed} blocks only");
    // Only the listed contracts' words.
    let plain = oracle.contracts["plain"];
    let only_plain = reth.storage_at(oracle.head / 2, &[plain]).unwrap();
    assert_eq!(
        only_plain.len(),
        oracle.words_at(oracle.head / 2, &[plain]).len()
    );
}

/// The head's state root recomputed from the export (accounts with the
/// code hashes and storage roots walked from the datadir) equals the one
/// reth wrote in the head's header.
fn check_head_state_root(reth: &RethDatadir, oracle: &Oracle) {
    let dir = tempfile::tempdir().unwrap();
    let store = SnapshotStore::open(dir.path()).unwrap();
    let state = reth.export(RethMode::Full, oracle.chain_id).unwrap();
    let root = oracle.state_roots[oracle.head as usize];
    assert_eq!(state.state_root, Some(root));
    let published =
        snapshotter::pipeline::build_and_publish(&store, state, &Default::default()).unwrap();
    snapshotter::verify::verify_state_root(&store, &published, &[], Some(root)).unwrap();
}

/// `ethpir-snapshot build reth --tokens FILE [--block N]`: every word the
/// chain wrote into the tokens (balances, allowances, the unlimited one
/// as too wide for a value, supplies) and every account's ether, read
/// through PIR, equal the node's at that block (a zero word reads absent,
/// as a never-written slot does).
fn check_cli_build(datadir: &Path, oracle: &Oracle, block: Option<u64>) {
    let dir = tempfile::tempdir().unwrap();
    let tokens_file = dir.path().join("tokens.toml");
    std::fs::write(&tokens_file, oracle.token_list().to_toml()).unwrap();
    let store_dir = dir.path().join("store");
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_ethpir-snapshot"));
    command
        .arg("--store")
        .arg(&store_dir)
        .args(["--log", "warn", "build", "reth", "--datadir"])
        .arg(datadir)
        .args(["--chain-id", &oracle.chain_id.to_string(), "--tokens"])
        .arg(&tokens_file)
        .args(["--no-progress", "--device", "cpu"]);
    if let Some(block) = block {
        command.args(["--block", &block.to_string()]);
    }
    let out = command.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let store = SnapshotStore::open(&store_dir).unwrap();
    let snap = store.list().unwrap().pop().unwrap();
    let n = block.unwrap_or(oracle.head);
    assert_eq!(snap.manifest.block_number, n);
    let tokens: Vec<Address> = oracle.tokens.iter().map(|t| t.0).collect();
    let words = oracle.words_at(n, &tokens);
    assert_eq!(snap.manifest.storage_records, words.len() as u64);
    let reader = Reader::new(&store, &snap);
    let width = snap.manifest.pir.value_bytes as usize;
    // A word as the database holds it: whole, or a wide one's low part
    // joined with its high part's record.
    let word_at = |key: &B256| -> Option<(U256, bool)> {
        match decode_word(&reader.read(key)?).unwrap() {
            StoredWord::Word(w) => Some((w, false)),
            StoredWord::Low(low) => {
                let high = reader.read(&high_part_key(key)).expect("a high part");
                let StoredWord::Word(high) = decode_word(&high).unwrap() else {
                    panic!("a high part is a plain word")
                };
                Some((join_word(low, high, width), true))
            }
            StoredWord::TooWide => panic!("format 4 holds every word"),
        }
    };
    let mut wide = 0;
    for token in &tokens {
        for slot in oracle.storage[oracle.head as usize][token].keys() {
            let key = storage_key_of(token, slot);
            let got = word_at(&key);
            assert_eq!(
                got.map(|(w, _)| w),
                words.get(&key).copied(),
                "{token} slot {slot} at block {n}"
            );
            wide += usize::from(got.is_some_and(|(_, wide)| wide));
        }
    }
    if n == oracle.head {
        // The unlimited approval (allowances at slot 3 of the preset:
        // `allowances[owner][spender]`), among words as wide as role ids.
        // (Dev account 2: reth's dev chain funds anvil's accounts.)
        let owner: Address = test_support::ALL_DEV_ACCOUNTS[2].parse().unwrap();
        let spender = oracle.contracts["multicall3"];
        let inner = MappingLayout::Solidity.slot(&owner, &SlotIndex::Position(3));
        let slot = MappingLayout::Solidity.slot(&spender, &SlotIndex::Word(inner));
        let key = storage_key_of(&oracle.tokens[1].0, &slot);
        assert_eq!(words.get(&key), Some(&U256::MAX));
        assert_eq!(word_at(&key), Some((U256::MAX, true)));
        assert!(wide > 1, "{wide} words wide");
    }
    let unwritten = storage_key_of(&tokens[0], &B256::repeat_byte(0x77));
    assert_eq!(reader.read(&unwritten), None);
    for (address, account) in &oracle.state[n as usize] {
        let (balance, nonce) = match reader.read(&snapshotter::pir_key(address)) {
            Some(v) => snapshotter::decode_value(&v, snapshotter::ValueLayout::WithCode)
                .unwrap()
                .balance_nonce(),
            None => (U256::ZERO, 0),
        };
        assert_eq!(
            (balance, nonce),
            (account.balance, account.nonce),
            "{address} at {n}"
        );
    }
}

/// The head streamed from the hashed accounts table into records.bin (v2;
/// what `build reth` does there) is the export held in memory, byte for
/// byte, storage included. A v1 datadir's plain state is not in key
/// order: refused.
fn check_streamed_head(reth: &RethDatadir, oracle: &Oracle) {
    let accounts = oracle.with_storage();
    let build = |streamed: bool| {
        let dir = tempfile::tempdir().unwrap();
        let store = SnapshotStore::open(dir.path()).unwrap();
        let slots = reth.storage(&accounts).unwrap();
        let published = if streamed {
            let mut meta = reth.head_metadata(oracle.chain_id).unwrap();
            meta.listed.contracts = accounts.clone();
            snapshotter::pipeline::build_and_publish_streamed(
                &store,
                &meta,
                &Default::default(),
                |w| {
                    let mut sorter = SlotSorter::new(dir.path().join("runs"), usize::MAX);
                    slots.into_iter().try_for_each(|s| sorter.push(s))?;
                    reth.write_full_state(sorter.finish()?, w)
                },
            )
        } else {
            let mut state = reth.export(RethMode::Full, oracle.chain_id).unwrap();
            state.storage = slots;
            state.listed.contracts = accounts.clone();
            snapshotter::pipeline::build_and_publish(&store, state, &Default::default())
        };
        (dir, store, published)
    };
    let (_held_dir, _, held) = build(false);
    let held = held.unwrap();
    let (_dir, store, streamed) = build(true);
    match reth.layout {
        Layout::V2 => {
            let streamed = streamed.unwrap();
            let (a, b) = (&streamed.manifest, &held.manifest);
            assert_eq!(a.content_digest, b.content_digest, "the same records.bin");
            assert_eq!(
                (
                    a.record_count,
                    a.storage_records,
                    a.block_hash,
                    a.state_root
                ),
                (
                    b.record_count,
                    b.storage_records,
                    b.block_hash,
                    b.state_root
                )
            );
            assert_eq!(a.storage, b.storage);
            snapshotter::verify::verify(&store, &streamed, 16).unwrap();
        }
        Layout::V1 => {
            assert!(streamed.is_err());
            assert!(store.list().unwrap().is_empty());
        }
    }
}

/// The whole state at the head (`storage = "all"`): every slot of every
/// contract. A v2 datadir's base streams it, its slots sorted in runs
/// spilled within a budget of 12 slots and merged as
/// `records.bin` is written: the same bytes as a base built from the
/// slots held, its records give the head's state root with every
/// contract's storage root, and no run is left behind.
fn check_whole_state_base(datadir: &Path, oracle: &Oracle, layout: Layout) {
    use snapshotter::pipeline::{build_and_publish, BuildOptions};
    use snapshotter::sources::{reth::export_base, Base};
    let whole = protocol::storage::PrivateStorage::whole_state();
    let budget = 12 * std::mem::size_of::<protocol::storage::StorageRecord>();
    let dir = tempfile::tempdir().unwrap();
    let store = SnapshotStore::open(dir.path()).unwrap();
    let base = export_base(datadir, RethMode::Full, oracle.chain_id, whole.clone()).unwrap();
    assert_eq!(matches!(base, Base::Streamed(_)), layout == Layout::V2);
    let within = BuildOptions {
        encode_memory_bytes: budget,
        ..Default::default()
    };
    let snap = base.publish(&store, &within).unwrap();
    let m = &snap.manifest;
    assert!(m.storage.whole_state);
    let per_run = budget / std::mem::size_of::<protocol::storage::StorageRecord>();
    assert!(
        m.storage_records as usize > 2 * per_run,
        "{} slots",
        m.storage_records
    );
    let root = m.state_root.expect("the head's root");
    snapshotter::verify::verify_state_root(&store, &snap, &[], Some(root)).unwrap();
    let leftovers = std::fs::read_dir(dir.path().join(".staging"))
        .map(|d| d.count())
        .unwrap_or(0);
    assert_eq!(leftovers, 0, "no run left in the staging folder");

    let reth = RethDatadir::open(datadir).unwrap();
    let mut state = reth.export(RethMode::Full, oracle.chain_id).unwrap();
    state.storage = reth.storage_all().unwrap();
    state.listed = whole;
    drop(reth);
    let held_dir = tempfile::tempdir().unwrap();
    let held_store = SnapshotStore::open(held_dir.path()).unwrap();
    let held = build_and_publish(&held_store, state, &Default::default()).unwrap();
    assert_eq!(
        m.content_digest, held.manifest.content_digest,
        "the same records.bin"
    );
}

/// Private lookups in one snapshot.
struct Reader {
    server: pir_core::PirServer,
    client: pir_core::PirClient,
}

impl Reader {
    fn new(store: &SnapshotStore, snap: &StoredSnapshot) -> Reader {
        let server = store.load_server(snap, None).unwrap();
        let client = pir_core::PirClient::from_setup_bytes(server.setup_bytes()).unwrap();
        Reader { server, client }
    }

    fn read(&self, key: &B256) -> Option<Vec<u8>> {
        let mut rng = rand::rng();
        let (query, pending) = self
            .client
            .query(self.client.prepare(&mut rng), key.as_slice())
            .unwrap();
        let response = self.server.answer(&query).unwrap();
        match self.client.decode(pending, &response).unwrap() {
            pir_core::Lookup::Found(v) => Some(v),
            pir_core::Lookup::Absent => None,
        }
    }
}

fn check_layout(layout: &str, want: Layout) {
    let fixture = open(layout);
    let reth = RethDatadir::open(&fixture.datadir).unwrap();
    assert_eq!(reth.layout, want);
    let oracle = &fixture.oracle;
    check_accounts(&reth, oracle);
    check_deltas_and_active_sets(&reth, oracle);
    check_storage_at_every_block(&reth, oracle);
    check_head_state_root(&reth, oracle);
    check_streamed_head(&reth, oracle);
    drop(reth);
    check_whole_state_base(&fixture.datadir, oracle, want);
    // Block 3 (the first token just created, the second not yet), halfway,
    // the block before the head, and the head itself.
    for block in [Some(3), Some(oracle.head / 2), Some(oracle.head - 1), None] {
        check_cli_build(&fixture.datadir, oracle, block);
    }
}

#[test]
fn v1_datadir_with_contracts_matches_the_node() {
    check_layout("v1", Layout::V1);
}

#[test]
fn v2_datadir_with_contracts_matches_the_node() {
    check_layout("v2", Layout::V2);
}
