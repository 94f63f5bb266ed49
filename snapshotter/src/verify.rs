//! Checking a published snapshot: file digests, formats, consistency, and
//! private lookups of sampled accounts through the real PIR path.

use pir_core::{Lookup, PirClient};
use rand::seq::IndexedRandom;

use crate::account::{decode_value, encode_value};
use crate::records::decode_records;
use crate::store::{SnapshotStore, StoreError, StoredSnapshot, RECORDS_FILE};

/// Problems found in a snapshot.
fn invalid(snap: &StoredSnapshot, problem: impl Into<String>) -> StoreError {
    StoreError::Invalid {
        id: snap.id.clone(),
        problem: problem.into(),
    }
}

/// Verifies one snapshot; with `lookups > 0`, also answers that many
/// sampled accounts (and as many absent keys) through PIR and checks them.
pub fn verify(
    store: &SnapshotStore,
    snap: &StoredSnapshot,
    lookups: usize,
) -> Result<(), StoreError> {
    let records_bytes = store.read_checked(snap, RECORDS_FILE)?;
    if crate::store::sha3_hex(&records_bytes) != snap.manifest.content_digest {
        return Err(invalid(snap, "content digest does not match records.bin"));
    }
    let records =
        decode_records(&records_bytes).map_err(|e| invalid(snap, format!("records.bin: {e}")))?;
    if records.len() as u64 != snap.manifest.record_count {
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
    for r in records.choose_multiple(&mut rng, lookups) {
        let (query, pending) = client
            .query(client.prepare(&mut rng), r.key.as_slice())
            .map_err(|e| invalid(snap, e.to_string()))?;
        let response = server
            .answer(&query)
            .map_err(|e| invalid(snap, e.to_string()))?;
        match client
            .decode(pending, &response)
            .map_err(|e| invalid(snap, e.to_string()))?
        {
            Lookup::Found(v)
                if v == encode_value(r.balance, r.nonce, width) && decode_value(&v).is_ok() => {}
            other => {
                return Err(invalid(
                    snap,
                    format!("private lookup of {} gave {other:?}", r.key),
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
