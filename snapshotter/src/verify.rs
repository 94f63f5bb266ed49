//! Checking a published snapshot: file digests, formats, consistency, and
//! private lookups of sampled accounts through the real PIR path.

use pir_core::{Lookup, PirClient};
use rand::seq::index::sample;

use crate::account::{decode_value, encode_value};
use crate::records::RecordsFile;
use crate::store::{SnapshotStore, StoreError, StoredSnapshot, RECORDS_FILE};
use protocol::storage::encode_word;

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
) -> Result<(), StoreError> {
    // The file against its digest, streamed, then read in place.
    let mapped = store.map_checked(snap, RECORDS_FILE)?;
    if snap.manifest.files.get(RECORDS_FILE).map(|f| &f.sha3_256)
        != Some(&snap.manifest.content_digest)
    {
        return Err(invalid(snap, "content digest does not match records.bin"));
    }
    let records = RecordsFile::new((*mapped).as_ref())
        .and_then(|f| f.check().map(|()| f))
        .map_err(|e| invalid(snap, format!("records.bin: {e}")))?;
    let total = records.accounts() + records.slots();
    if total as u64 != snap.manifest.record_count
        || records.slots() as u64 != snap.manifest.storage_records
    {
        return Err(invalid(snap, "record count differs from the manifest"));
    }
    // Digests, formats, the setup matching the database and the manifest.
    let server = store.load_server(snap, None)?;
    if lookups == 0 {
        return Ok(());
    }
    let client = PirClient::from_setup_bytes(server.setup_bytes())
        .map_err(|e| invalid(snap, e.to_string()))?;
    let mut rng = rand::rng();
    let width = snap.manifest.pir.value_bytes as usize;
    // Sampled accounts and sampled slots, each with the value it must have.
    let mut expected: Vec<(alloy_primitives::B256, Vec<u8>)> = Vec::new();
    for i in sample(
        &mut rng,
        records.accounts(),
        lookups.min(records.accounts()),
    ) {
        let r = records.account(i);
        expected.push((r.key, encode_value(r.balance, r.nonce, width)));
    }
    for i in sample(&mut rng, records.slots(), lookups.min(records.slots())) {
        let s = records.slot(i);
        let value = encode_word(s.value, width).map_err(|e| invalid(snap, e.to_string()))?;
        expected.push((s.key, value));
    }
    for (key, value) in expected {
        let (query, pending) = client
            .query(client.prepare(&mut rng), key.as_slice())
            .map_err(|e| invalid(snap, e.to_string()))?;
        let response = server
            .answer(&query)
            .map_err(|e| invalid(snap, e.to_string()))?;
        match client
            .decode(pending, &response)
            .map_err(|e| invalid(snap, e.to_string()))?
        {
            Lookup::Found(v) if v == value && decode_value(&v).is_ok() => {}
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
        let (query, pending) = client
            .query(client.prepare(&mut rng), &key)
            .map_err(|e| invalid(snap, e.to_string()))?;
        let response = server
            .answer(&query)
            .map_err(|e| invalid(snap, e.to_string()))?;
        if client
            .decode(pending, &response)
            .map_err(|e| invalid(snap, e.to_string()))?
            != Lookup::Absent
        {
            return Err(invalid(snap, "a random key decoded as present"));
        }
    }
    Ok(())
}
