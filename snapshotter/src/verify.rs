//! Checking a published snapshot: file digests, formats, consistency, and
//! private lookups of sampled accounts through the real PIR path.

use pir_core::wire::{decode_db, SetupData};
use pir_core::{Lookup, PirClient, PirServer};
use rand::seq::IndexedRandom;

use crate::account::{decode_value, encode_value};
use crate::records::decode_records;
use crate::store::{SnapshotStore, StoreError, StoredSnapshot, DB_FILE, RECORDS_FILE, SETUP_FILE};

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
    let db = decode_db(&store.read_checked(snap, DB_FILE)?)
        .map_err(|e| invalid(snap, format!("db.bin: {e}")))?;
    let setup_bytes = store.read_checked(snap, SETUP_FILE)?;
    let setup = SetupData::from_bytes(&setup_bytes)
        .map_err(|e| invalid(snap, format!("setup.bin: {e}")))?;
    if &setup.shape != db.shape() {
        return Err(invalid(
            snap,
            "setup.bin and db.bin describe different databases",
        ));
    }
    if hex::encode(SetupData::digest_of(&setup_bytes)) != snap.manifest.pir.setup_digest {
        return Err(invalid(snap, "setup digest differs from the manifest"));
    }
    if lookups == 0 {
        return Ok(());
    }
    let server = PirServer::from_parts(db, setup.seed, setup.hint)
        .map_err(|e| invalid(snap, e.to_string()))?;
    let client =
        PirClient::from_setup_bytes(&setup_bytes).map_err(|e| invalid(snap, e.to_string()))?;
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
