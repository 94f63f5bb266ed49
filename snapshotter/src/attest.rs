//! `ethpir-snapshot attest`: check each snapshot of a store against a node
//! of one's own and sign what held (EIP-712, [`protocol::attest`]); the
//! signatures are kept beside the snapshots, and the server's catalog
//! carries them.
//!
//! What is checked: the block hash and state root the manifest names are
//! the node's at that block; the records of the view the snapshot tops give
//! that state root (and each listed contract its storage root,
//! [`crate::verify::verify_state_root`]); a delta is exported again from
//! the node and its `records.bin` must be the same bytes (its digest).

use alloy_primitives::Address;
use alloy_signer::SignerSync;
use alloy_signer_local::PrivateKeySigner;
use protocol::attest::{signing_hash, Attestation};

use crate::manifest::{SnapshotId, SnapshotKind};
use crate::sources::rpc::RpcSource;
use crate::store::{SnapshotStore, StoredSnapshot};

/// Why the attester cannot run at all.
#[derive(Debug, thiserror::Error)]
pub enum AttesterError {
    #[error("the key file does not hold a hex private key: {0}")]
    Key(String),
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
}

/// What became of one snapshot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Checked and signed now.
    Signed,
    /// Signed by this key before.
    AlreadySigned,
    /// An active set or a historical snapshot (part of a state), or another
    /// chain than the node's.
    NotAttestable(&'static str),
    /// A check failed: not signed.
    Refused(String),
}

/// A store, a node and a key.
pub struct Attester {
    store: SnapshotStore,
    node: RpcSource,
    signer: PrivateKeySigner,
}

impl Attester {
    /// `key_hex`: the private key, hex (with or without `0x`).
    pub fn new(
        store: SnapshotStore,
        node: RpcSource,
        key_hex: &str,
    ) -> Result<Self, AttesterError> {
        let signer: PrivateKeySigner = key_hex
            .trim()
            .parse()
            .map_err(|e: alloy_signer_local::LocalSignerError| AttesterError::Key(e.to_string()))?;
        Ok(Attester {
            store,
            node,
            signer,
        })
    }

    /// The address that signs.
    pub fn address(&self) -> Address {
        self.signer.address()
    }

    /// Checks and signs every snapshot of the store this key has not
    /// signed yet.
    pub async fn attest_store(&self) -> Result<Vec<(SnapshotId, Outcome)>, AttesterError> {
        let all = self.store.list()?;
        let mut out = Vec::with_capacity(all.len());
        for snap in &all {
            let outcome = self.attest(snap, &all).await;
            if let Outcome::Refused(why) = &outcome {
                tracing::warn!(snapshot = %snap.id, why, "not attested");
            }
            out.push((snap.id, outcome));
        }
        Ok(out)
    }

    async fn attest(&self, snap: &StoredSnapshot, all: &[StoredSnapshot]) -> Outcome {
        let m = &snap.manifest;
        if !m.kind.is_whole_state() {
            return Outcome::NotAttestable("not a whole state");
        }
        if m.chain_id != self.node.chain_id {
            return Outcome::NotAttestable("another chain than the node's");
        }
        let mine = self.address();
        if self
            .store
            .attestations(snap)
            .iter()
            .any(|a| a.signer == mine)
        {
            return Outcome::AlreadySigned;
        }
        if let Err(why) = self.check(snap, all).await {
            return Outcome::Refused(why);
        }
        match self.sign(snap) {
            Ok(()) => Outcome::Signed,
            Err(why) => Outcome::Refused(why),
        }
    }

    /// Every check of the module's doc, in order.
    async fn check(&self, snap: &StoredSnapshot, all: &[StoredSnapshot]) -> Result<(), String> {
        let m = &snap.manifest;
        let (hash, root, _) = self
            .node
            .block_header(m.block_number)
            .await
            .map_err(|e| e.to_string())?;
        if m.block_hash != Some(hash) || m.state_root != Some(root) {
            return Err(format!(
                "block {} is {hash} with state root {root} on the node, the manifest names {:?} and {:?}",
                m.block_number, m.block_hash, m.state_root
            ));
        }
        let levels = view_topped_by(snap, all)?;
        let store = self.store.clone();
        tokio::task::spawn_blocking(move || {
            crate::verify::verify_state_root(&store, &levels[0], &levels[1..], Some(root))
        })
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| e.to_string())?;
        if let SnapshotKind::Delta { from } = m.kind {
            self.same_delta_on_node(snap, from).await?;
        }
        Ok(())
    }

    /// The delta exported again from the node: the same `records.bin`.
    async fn same_delta_on_node(&self, snap: &StoredSnapshot, from: u64) -> Result<(), String> {
        let m = &snap.manifest;
        let mut again = self
            .node
            .export_delta(from, m.block_number, &m.storage)
            .await
            .map_err(|e| e.to_string())?;
        again.records.sort_unstable_by_key(|r| r.key);
        again.storage.sort_unstable_by_key(|s| s.key);
        let bytes = crate::records::encode_records(&again.records, &again.storage);
        let digest = protocol::sha3_hex(&bytes);
        match digest == m.content_digest {
            true => Ok(()),
            false => Err(format!(
                "exported again from the node, its records have digest {digest}, the snapshot's {}",
                m.content_digest
            )),
        }
    }

    fn sign(&self, snap: &StoredSnapshot) -> Result<(), String> {
        let hash = signing_hash(&snap.manifest).map_err(|e| e.to_string())?;
        let signature = self
            .signer
            .sign_hash_sync(&hash)
            .map_err(|e| e.to_string())?;
        let attestation = Attestation {
            signer: self.address(),
            signature,
        };
        self.store
            .add_attestation(snap, &attestation)
            .map_err(|e| e.to_string())
    }
}

/// The levels of the view `snap` tops, base first: itself for a full
/// snapshot; for a delta from block F, the store's view at F and it.
fn view_topped_by(
    snap: &StoredSnapshot,
    all: &[StoredSnapshot],
) -> Result<Vec<StoredSnapshot>, String> {
    let SnapshotKind::Delta { from } = snap.manifest.kind else {
        return Ok(vec![snap.clone()]);
    };
    let views = protocol::view::Views::build(&crate::levels::as_entries(all));
    let below = views
        .at(snap.manifest.chain_id, from)
        .filter(|v| v.complete)
        .ok_or_else(|| format!("no whole view at block {from}, where the delta starts"))?;
    let mut levels: Vec<StoredSnapshot> = below
        .snapshots
        .iter()
        .filter_map(|id| all.iter().find(|s| &s.id == id).cloned())
        .collect();
    levels.push(snap.clone());
    Ok(levels)
}
