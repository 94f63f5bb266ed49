//! `ethpir-snapshot attest`: check each snapshot of a store against a node
//! of one's own and sign what held (EIP-712, [`protocol::attest`]); the
//! signatures are kept beside the snapshots, and the server's catalog
//! carries them.
//!
//! What is checked: the block hash and state root the manifest names are
//! the node's at that block. A full snapshot: its records give that state
//! root, and each listed contract its storage root
//! ([`crate::verify::verify_state_root`]; minutes at mainnet's size), and
//! the PIR database built again from its records gives the same setup
//! (builds are deterministic: `same_setup_from_records`). A
//! delta: exported again from the node, every account read with its
//! Merkle proof against that state root, its `records.bin` must be the same
//! bytes (its digest); seconds, so that attesting keeps up with the head
//! (its whole view's root is what `verify --state-root` recomputes). Both
//! kinds are then built again from their records: the setup, the table,
//! the canaries and every other field a client reads must come out as the
//! manifest says, since the signature binds the whole manifest
//! ([`protocol::Manifest::signed_digest`]).

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
            let outcome = self.attest(snap).await;
            if let Outcome::Refused(why) = &outcome {
                tracing::warn!(snapshot = %snap.id, why, "not attested");
            }
            out.push((snap.id, outcome));
        }
        Ok(out)
    }

    async fn attest(&self, snap: &StoredSnapshot) -> Outcome {
        let m = &snap.manifest;
        if !m.kind.is_whole_state() && !matches!(m.kind, SnapshotKind::Hot { .. }) {
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
        if let Err(why) = self.check(snap).await {
            return Outcome::Refused(why);
        }
        match self.sign(snap) {
            Ok(()) => Outcome::Signed,
            Err(why) => Outcome::Refused(why),
        }
    }

    /// Every check of the module's doc, in order.
    async fn check(&self, snap: &StoredSnapshot) -> Result<(), String> {
        let m = &snap.manifest;
        let root = self.node.root_of(m).await.map_err(|e| e.to_string())??;
        if m.state_root != Some(root) {
            return Err(format!(
                "block {} has state root {root} on the node, the manifest names {:?}",
                m.block_number, m.state_root
            ));
        }
        let kind = m.kind;
        if let SnapshotKind::Delta { from } = kind {
            self.same_delta_on_node(snap, from).await?;
        }
        let chosen = match crate::hot::HotPolicy::of_kind(&kind) {
            Some(policy) => Some(self.hot_keys_on_node(snap, &policy).await?),
            None => None,
        };
        let store = self.store.clone();
        let level = snap.clone();
        let mine = self.address();
        tokio::task::spawn_blocking(move || {
            match kind {
                SnapshotKind::Delta { .. } => {}
                // Its values are the view's it stands on (whose levels are
                // checked against the node in turn).
                SnapshotKind::Hot { .. } => {
                    let all = store.list().map_err(|e| e.to_string())?;
                    let signed =
                        |l: &StoredSnapshot| store.attestations(l).iter().any(|a| a.signer == mine);
                    let chosen = chosen.as_deref().unwrap_or_default();
                    crate::hot::check_chosen_keys(&store, &level, &all, chosen)?;
                    crate::hot::check_against_view(&store, &level, &all, signed)?;
                }
                _ => {
                    crate::verify::verify_state_root(&store, &level, &[], Some(root))
                        .map_err(|e| e.to_string())?;
                }
            }
            same_build_from_records(&store, &level)
        })
        .await
        .map_err(|e| e.to_string())?
    }

    /// The keys a hot tier's rule chooses from this node's traces of its
    /// window, over the base its view stands on.
    async fn hot_keys_on_node(
        &self,
        snap: &StoredSnapshot,
        policy: &crate::hot::HotPolicy,
    ) -> Result<Vec<crate::hot::HotKey>, String> {
        if policy.window > crate::hot::MAX_WINDOW {
            return Err(format!(
                "its window of {} blocks is over the {} an attester traces",
                policy.window,
                crate::hot::MAX_WINDOW
            ));
        }
        if policy.min_senders < crate::hot::MIN_SENDERS {
            return Err(format!(
                "its rule keeps keys of {} sender(s): fewer than {} name a wallet",
                policy.min_senders,
                crate::hot::MIN_SENDERS
            ));
        }
        let m = &snap.manifest;
        let value_bytes = m.pir.value_bytes;
        let to = m.block_number;
        crate::hot::chosen_keys(&self.node, to, policy, value_bytes, 4)
            .await
            .map_err(|e| format!("its window traced again: {e}"))
    }

    /// The delta exported again from the node: the same `records.bin`.
    /// A delta that destroys storage (before Cancun) also holds a zero
    /// record for every earlier slot of the destroyed contracts, which only
    /// the levels below list: each complete view of this store at `from`
    /// supplies them in turn, and one must give the same bytes (every such
    /// zero is what the chain has, whichever view listed the slot).
    async fn same_delta_on_node(&self, snap: &StoredSnapshot, from: u64) -> Result<(), String> {
        let m = &snap.manifest;
        let delta = self
            .node
            .export_delta(from, m.block_number, &m.storage)
            .await
            .map_err(|e| e.to_string())?;
        // It must stand where the node's blocks stand (a delta of one
        // fork on a level of another is refused, whatever its records).
        if m.parent_hash.is_some() && delta.state.parent_hash != m.parent_hash {
            return Err(format!(
                "the delta names block {from} of hash {:?} as its parent; the node's block {from} is {:?}",
                m.parent_hash, delta.state.parent_hash
            ));
        }
        let candidates = match delta.destroyed.is_empty() {
            true => vec![delta.state],
            false => {
                let store = self.store.clone();
                tokio::task::spawn_blocking(move || {
                    with_destroyed_hidden(&store, delta.state, &delta.destroyed, from)
                })
                .await
                .map_err(|e| e.to_string())??
            }
        };
        let mut digests = Vec::new();
        for mut again in candidates {
            again.records.sort_unstable_by_key(|r| r.key);
            again.storage.sort_unstable_by_key(|s| s.key);
            let bytes = crate::records::encode_records(&again.records, &again.storage);
            let digest = protocol::sha3_hex(&bytes);
            if digest == m.content_digest {
                return same_code_table(&again, m);
            }
            digests.push(digest.to_string());
        }
        Err(format!(
            "exported again from the node, its records have digest {}, the snapshot's {}",
            digests.join(" or "),
            m.content_digest
        ))
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

/// The delta's records as the node gives them, with a zero record for
/// each earlier slot of the `destroyed` contracts, once per complete view
/// of `store` at block `from` (the levels the delta was published over).
fn with_destroyed_hidden(
    store: &SnapshotStore,
    delta: crate::pipeline::ExportedState,
    destroyed: &[Address],
    from: u64,
) -> Result<Vec<crate::pipeline::ExportedState>, String> {
    let snaps = store.list().map_err(|e| e.to_string())?;
    let views = protocol::view::views(&crate::store::as_entries(&snaps));
    let mut out = Vec::new();
    for view in views.iter().filter(|v| v.complete && v.block == from) {
        let levels: Vec<StoredSnapshot> = view
            .snapshots
            .iter()
            .filter_map(|id| snaps.iter().find(|s| s.id == *id).cloned())
            .collect();
        let mut state = delta.clone();
        crate::levels::hide_destroyed(store, &levels, &mut state, destroyed)
            .map_err(|e| e.to_string())?;
        out.push(state);
    }
    match out.is_empty() {
        true => Err(format!(
            "it destroys {} contract(s)' storage, and no complete view of this store at block {from} lists their earlier slots",
            destroyed.len()
        )),
        false => Ok(out),
    }
}

/// The code table `state`'s records make is the manifest's.
fn same_code_table(
    state: &crate::pipeline::ExportedState,
    m: &protocol::Manifest,
) -> Result<(), String> {
    let table = protocol::codes::table_of(state.records.iter().map(|r| r.code_hash));
    match protocol::codes::CodeTree::new(table).summary() == m.codes {
        true => Ok(()),
        false => Err("its records make another code table than the manifest's".into()),
    }
}

/// Builds `snap`'s database again from its `records.bin` (streamed from
/// the mapped file, as a fold writes one) with the parameters its
/// manifest and setup name, in a scratch store beside the store, and
/// compares the manifests: every field a client reads (setup and table
/// digests, PIR parameters, canaries, code table, contracts held) must be
/// what the records make, so that what is signed is what was rebuilt.
fn same_build_from_records(store: &SnapshotStore, snap: &StoredSnapshot) -> Result<(), String> {
    let m = &snap.manifest;
    let options = rebuild_options(store, snap)?;
    let mapped = store
        .map_checked(snap, crate::store::RECORDS_FILE)
        .map_err(|e| e.to_string())?;
    let records =
        crate::records::RecordsFile::new((*mapped).as_ref()).map_err(|e| e.to_string())?;
    let scratch_dir = store.root().join(".attest-scratch");
    let _ = std::fs::remove_dir_all(&scratch_dir);
    let scratch = SnapshotStore::open(&scratch_dir).map_err(|e| e.to_string())?;
    let meta = crate::levels::Levels::like(
        std::slice::from_ref(snap),
        m.kind,
        m.source.clone(),
        Default::default(),
    );
    let (accounts, slots) = (records.accounts(), records.slots());
    let rebuilt = crate::pipeline::build_and_publish_streamed(&scratch, &meta, &options, |w| {
        crate::records::write_record_stream(
            accounts as u64,
            (0..accounts).map(|i| records.account(i)),
            slots as u64,
            (0..slots).map(|i| records.slot(i)),
            w,
        )
    });
    let _ = std::fs::remove_dir_all(&scratch_dir);
    let rebuilt = rebuilt.map_err(|e| e.to_string())?;
    match differing_fields(m, &rebuilt.manifest) {
        fields if fields.is_empty() => Ok(()),
        fields => Err(format!(
            "built again from its records, its manifest differs in {} (setup digest {} rebuilt, {} served)",
            fields.join(", "),
            rebuilt.manifest.pir.setup_digest,
            m.pir.setup_digest
        )),
    }
}

/// The manifest fields a client reads in which `served` and `rebuilt`
/// differ (not the build's timings, source text or time).
fn differing_fields(served: &protocol::Manifest, rebuilt: &protocol::Manifest) -> Vec<String> {
    let fields = |m: &protocol::Manifest| {
        let mut m = m.clone();
        m.build = Default::default();
        m.source.clear();
        m.created_at.clear();
        match serde_json::to_value(&m) {
            Ok(serde_json::Value::Object(map)) => map,
            _ => Default::default(),
        }
    };
    let (a, b) = (fields(served), fields(rebuilt));
    let mut names: Vec<String> = a
        .keys()
        .chain(b.keys())
        .filter(|k| a.get(*k) != b.get(*k))
        .cloned()
        .collect();
    names.sort();
    names.dedup();
    names
}

/// The build options that made `snap`: its manifest's arity and
/// partitions, its setup's matrix expansion (the hint on the CPU: the
/// GPU's is the same bits).
fn rebuild_options(
    store: &SnapshotStore,
    snap: &StoredSnapshot,
) -> Result<crate::pipeline::BuildOptions, String> {
    let m = &snap.manifest;
    let setup = store
        .read_checked(snap, crate::store::SETUP_FILE)
        .map_err(|e| e.to_string())?;
    let expansion = pir_core::PirClient::from_setup_bytes(&setup)
        .map_err(|e| e.to_string())?
        .setup()
        .matrix
        .expansion();
    // A table again exactly where the snapshot has one.
    let whole_table_max_records = match m.files.contains_key(crate::store::TABLE_FILE) {
        true => usize::MAX,
        false => 0,
    };
    Ok(crate::pipeline::BuildOptions {
        arity: pir_core::Arity::from_u8(m.pir.arity).map_err(|e| e.to_string())?,
        packing: pir_core::Packing::Fixed(m.pir.partitions),
        base_packing: None,
        expansion,
        whole_table_max_records,
        ..Default::default()
    })
}
