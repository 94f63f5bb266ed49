//! Checking a published snapshot: file digests, formats, consistency, and
//! private lookups of sampled accounts through the real PIR path.

use pir_core::{Lookup, PirClient, PirServer};
use rand::seq::index::sample;

use crate::account::decode_value;
use crate::records::account_value;
use protocol::account::{AccountValue, ValueLayout};

/// What a sampled record's lookup must give.
enum Expected {
    /// An account's value (a format-1 value carries no code to compare).
    Account(AccountValue),
    /// A slot's value, byte for byte.
    Bytes(Vec<u8>),
}

impl Expected {
    fn is(&self, found: &[u8], layout: ValueLayout) -> bool {
        match self {
            Expected::Bytes(b) => b == found,
            Expected::Account(want) => decode_value(found, layout).is_ok_and(|got| {
                (got.balance, got.nonce) == (want.balance, want.nonce)
                    && (layout == ValueLayout::Plain || got.code == want.code)
            }),
        }
    }
}
use crate::records::RecordsFile;
use crate::store::{SnapshotStore, StoreError, StoredSnapshot, RECORDS_FILE};
use protocol::storage::{encode_word, high_part_record};

/// Problems found in a snapshot.
fn invalid(snap: &StoredSnapshot, problem: impl Into<String>) -> StoreError {
    StoreError::Invalid {
        id: snap.id,
        problem: problem.into(),
    }
}

/// Verifies one snapshot; with `lookups > 0`, also answers that many
/// sampled accounts, as many sampled storage slots (and a few absent
/// keys) through PIR and checks them.
pub fn verify(
    store: &SnapshotStore,
    snap: &StoredSnapshot,
    lookups: usize,
) -> Result<Verified, StoreError> {
    // The file against its digest, streamed, then read in place.
    let mapped = store.map_checked(snap, RECORDS_FILE)?;
    let records = checked_records(snap, (*mapped).as_ref())?;
    // Digests, formats, the setup matching the database and the manifest.
    let server = store.load_server(snap, None)?;
    if lookups == 0 {
        return Ok(Verified::default());
    }
    let client = PirClient::from_setup_bytes(server.setup_bytes())
        .map_err(|e| invalid(snap, e.to_string()))?;
    let layout = snap.manifest.layout();
    let (mut looked_up, started) = (0, std::time::Instant::now());
    let mut lookup = |key: &[u8]| {
        looked_up += 1;
        private_lookup(&client, &server, &mut rand::rng(), key)
    };
    for (key, want) in sampled(store, snap, &records, lookups, &mut rand::rng())? {
        match lookup(key.as_slice()).map_err(|e| invalid(snap, e))? {
            Lookup::Found(v) if want.is(&v, layout) => {}
            other => {
                return Err(invalid(
                    snap,
                    format!("private lookup of {key} gave {other:?}"),
                ))
            }
        }
    }
    for _ in 0..lookups.min(4) {
        let key: [u8; 32] = rand::random();
        if lookup(&key).map_err(|e| invalid(snap, e))? != Lookup::Absent {
            return Err(invalid(snap, "a random key decoded as present"));
        }
    }
    Ok(Verified {
        lookups: looked_up,
        lookup_s: started.elapsed().as_secs_f64() / f64::from(looked_up.max(1)),
    })
}

/// What [`verify`] read privately.
#[derive(Clone, Copy, Debug, Default)]
pub struct Verified {
    /// Private lookups made and checked (sampled records, absent keys).
    pub lookups: u32,
    /// Seconds one took on average: query, the server's pass over the
    /// database, decoding.
    pub lookup_s: f64,
}

/// `records.bin` (already digest-checked) parsed and checked against the
/// manifest's digest and counts.
fn checked_records<'a>(
    snap: &StoredSnapshot,
    bytes: &'a [u8],
) -> Result<RecordsFile<'a>, StoreError> {
    if snap.manifest.files.get(RECORDS_FILE).map(|f| &f.sha3_256)
        != Some(&snap.manifest.content_digest)
    {
        return Err(invalid(snap, "content digest does not match records.bin"));
    }
    let records = RecordsFile::new(bytes)
        .and_then(|f| f.check().map(|()| f))
        .map_err(|e| invalid(snap, format!("records.bin: {e}")))?;
    let total = records.accounts() + records.slots();
    if total as u64 != snap.manifest.record_count
        || records.slots() as u64 != snap.manifest.storage_records
    {
        return Err(invalid(snap, "record count differs from the manifest"));
    }
    Ok(records)
}

/// `lookups` sampled accounts and as many sampled slots, each with what
/// its lookup must read.
fn sampled(
    store: &SnapshotStore,
    snap: &StoredSnapshot,
    records: &RecordsFile,
    lookups: usize,
    rng: &mut impl rand::Rng,
) -> Result<Vec<(alloy_primitives::B256, Expected)>, StoreError> {
    let width = snap.manifest.pir.value_bytes as usize;
    let codes = store.read_code_table(snap)?;
    let mut expected = Vec::new();
    for i in sample(rng, records.accounts(), lookups.min(records.accounts())) {
        let r = records.account(i);
        expected.push((r.key, Expected::Account(account_value(&r, &codes))));
    }
    for i in sample(rng, records.slots(), lookups.min(records.slots())) {
        let s = records.slot(i);
        let value = encode_word(s.value, width).map_err(|e| invalid(snap, e.to_string()))?;
        expected.push((s.key, Expected::Bytes(value)));
        // A wide word's high part has a record of its own.
        let high = high_part_record(&s.key, s.value, width);
        if let Some((key, value)) = high.map_err(|e| invalid(snap, e.to_string()))? {
            expected.push((key, Expected::Bytes(value)));
        }
    }
    Ok(expected)
}

/// One private lookup of `key`, asked of `server` as a client asks it.
fn private_lookup(
    client: &PirClient,
    server: &PirServer,
    rng: &mut (impl rand::Rng + rand::CryptoRng),
    key: &[u8],
) -> Result<Lookup, String> {
    let (query, pending) = client
        .query(client.prepare(rng), key)
        .map_err(|e| e.to_string())?;
    let response = server.answer(&query).map_err(|e| e.to_string())?;
    client.decode(pending, &response).map_err(|e| e.to_string())
}

/// What `verify --state-root` recomputed for one view.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StateRootCheck {
    pub block: u64,
    /// The state root the view's records imply.
    pub root: alloy_primitives::B256,
    /// Listed contracts whose storage root was recomputed from their slots.
    pub contracts: usize,
}

/// Recomputes the state root of the view of `base` and the `deltas`
/// above it (oldest first; their files digest-checked) and checks the
/// storage root of each contract the base lists against its account.
pub fn view_state_root(
    store: &SnapshotStore,
    base: &StoredSnapshot,
    deltas: &[StoredSnapshot],
) -> Result<StateRootCheck, StoreError> {
    view_state_root_with(store, base, deltas, &Default::default())
}

/// [`view_state_root`] with `pending` overlaid on top: a delta's records
/// not published yet, so that a delta can be checked before it is
/// published.
pub fn view_state_root_with(
    store: &SnapshotStore,
    base: &StoredSnapshot,
    deltas: &[StoredSnapshot],
    pending: &crate::folded::Pending<'_>,
) -> Result<StateRootCheck, StoreError> {
    let top = deltas.last().unwrap_or(base);
    if base.manifest.kind != crate::manifest::SnapshotKind::Full {
        return Err(invalid(
            base,
            "a state root needs a whole state: a full snapshot and its deltas",
        ));
    }
    let mapped = store.map_checked(base, RECORDS_FILE)?;
    let base_file = RecordsFile::new((*mapped).as_ref())
        .map_err(|e| invalid(base, format!("records.bin: {e}")))?;
    let newer = crate::folded::overlay_with(store, deltas, pending)
        .map_err(|e| invalid(top, e.to_string()))?;
    let folded = crate::folded::Folded {
        base: &base_file,
        newer: &newer,
    };
    let root = crate::state_root::state_root(|n| Box::new(folded.accounts_of(n..n + 1)))
        .map_err(|e| invalid(top, e.to_string()))?;
    let contracts = match base.manifest.storage.whole_state {
        true => check_whole_storage(&folded),
        false => check_storage_roots(&folded, &base.manifest.storage.all_contracts()),
    }
    .map_err(|problem| invalid(top, problem))?;
    Ok(StateRootCheck {
        block: top.manifest.block_number,
        root,
        contracts,
    })
}

/// [`view_state_root`], then the root compared with the top level's
/// manifest and with `header_root` (the node's header, when given). Any
/// difference is an error that says which.
pub fn verify_state_root(
    store: &SnapshotStore,
    base: &StoredSnapshot,
    deltas: &[StoredSnapshot],
    header_root: Option<alloy_primitives::B256>,
) -> Result<StateRootCheck, StoreError> {
    let top = deltas.last().unwrap_or(base);
    let check = view_state_root(store, base, deltas)?;
    let root = check.root;
    match top.manifest.state_root {
        None => {
            return Err(invalid(
                top,
                format!("its manifest names no state root (the records give {root})"),
            ))
        }
        Some(named) if named != root => {
            return Err(invalid(
                top,
                format!("the records give state root {root}, the manifest names {named}"),
            ))
        }
        Some(_) => {}
    }
    if let Some(header) = header_root.filter(|h| *h != root) {
        return Err(invalid(
            top,
            format!(
                "the records give state root {root}, the node's header at block {} has {header}",
                check.block
            ),
        ));
    }
    Ok(check)
}

/// Under a whole-state claim: every account's storage root from the slots
/// the view holds of it (none: the empty root), so that a slot left out,
/// added or changed anywhere is caught; and no slot of an account the
/// records lack. The slots are grouped by contract in memory (a pass per
/// contract, as for listed ones, would be one pass per account).
/// Returns how many accounts with storage were checked.
fn check_whole_storage(folded: &crate::folded::Folded<'_>) -> Result<usize, String> {
    use alloy_primitives::{B256, U256};
    let mut by_contract: std::collections::HashMap<B256, Vec<(B256, U256)>> =
        std::collections::HashMap::new();
    for s in folded.slots().filter(|s| !s.value.is_zero()) {
        by_contract
            .entry(s.hashed_contract)
            .or_default()
            .push((s.hashed_slot, s.value));
    }
    let mut checked = 0;
    for account in folded.accounts() {
        let words = by_contract.remove(&account.key).unwrap_or_default();
        let computed = crate::state_root::storage_root(words);
        if account.storage_root.is_zero() {
            return Err(format!(
                "account {} has no storage root in the records, though the snapshot claims the whole state",
                account.key
            ));
        }
        if account.storage_root != computed {
            return Err(format!(
                "account {}: the slots the snapshot holds give storage root {computed}, its account has {} (the whole state is claimed)",
                account.key, account.storage_root
            ));
        }
        checked += usize::from(computed != crate::account::EMPTY_STORAGE_ROOT);
    }
    if let Some(stray) = by_contract.keys().next() {
        return Err(format!(
            "slots of {stray}, an account the records do not hold"
        ));
    }
    Ok(checked)
}

/// Each listed contract's storage root, from every slot the view holds of
/// it, against its account's (a contract without an account holds no
/// slot). Returns how many were checked. One pass over the slots per
/// contract, so that only one contract's words are held at a time (a
/// listed token of mainnet has millions).
fn check_storage_roots(
    folded: &crate::folded::Folded<'_>,
    contracts: &[alloy_primitives::Address],
) -> Result<usize, String> {
    for contract in contracts {
        let hashed = alloy_primitives::keccak256(contract);
        let words: Vec<_> = folded
            .slots()
            .filter(|s| s.hashed_contract == hashed)
            .map(|s| (s.hashed_slot, s.value))
            .collect();
        let computed = crate::state_root::storage_root(words);
        let held = folded
            .account(&hashed)
            .map_or(crate::account::EMPTY_STORAGE_ROOT, |a| a.storage_root);
        if held.is_zero() {
            return Err(format!(
                "listed contract {contract} has no storage root in the records"
            ));
        }
        if held != computed {
            return Err(format!(
                "listed contract {contract}: its slots give storage root {computed}, its account has {held}"
            ));
        }
    }
    Ok(contracts.len())
}
