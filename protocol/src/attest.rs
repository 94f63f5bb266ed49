//! Attestations: an operator's signature that a snapshot is the chain's
//! state at its block, made after checking it against a node of their own
//! (`ethpir-snapshot attest`). EIP-712 typed data, so that a wallet's
//! signer shows what is signed; the signature recovers its signer, so an
//! attestation verifies itself and any server may relay it.

use alloy_primitives::{Address, Signature, B256};
use alloy_sol_types::{eip712_domain, sol, Eip712Domain, SolStruct};
use serde::{Deserialize, Serialize};

use crate::manifest::Manifest;

sol! {
    /// What an attester signs: the snapshot (`<chain>-<block>-<kind>`), the
    /// block it is at, what binds it to the chain, the digests of what it
    /// serves, its code table (size and Merkle root; 0 and zero for none),
    /// which its values name codes by, and the digest of its whole manifest
    /// ([`Manifest::signed_digest`]: every field a client reads, these
    /// included). The fields before the last are there for a signer's
    /// display; the last binds the rest.
    struct SnapshotAttestation {
        string snapshot;
        uint64 chainId;
        uint64 blockNumber;
        bytes32 blockHash;
        bytes32 stateRoot;
        bytes32 setupDigest;
        bytes32 recordsDigest;
        uint32 codeCount;
        bytes32 codeRoot;
        bytes32 manifestDigest;
    }
}

/// The EIP-712 domain of every attestation. Version 3 signs the whole
/// manifest's digest (version 2 left `format`, `storage`, `files`, the
/// PIR parameters and the canaries outside the signature).
pub const DOMAIN: Eip712Domain = eip712_domain! {
    name: "ethpir snapshot",
    version: "3",
};

/// Most attestations a catalog entry may carry (a client refuses more).
pub const MAX_PER_SNAPSHOT: usize = 16;

/// One signature over a snapshot's [`SnapshotAttestation`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Attestation {
    /// Who signed (what the signature must recover to).
    pub signer: Address,
    /// 65 bytes: r, s, v.
    pub signature: Signature,
}

/// Why a snapshot cannot be attested, or an attestation does not hold.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AttestError {
    #[error("the manifest names no block hash or no state root: nothing binds it to the chain")]
    Unbound,
    #[error(
        "the signature does not recover to its signer {claimed} (it recovers to {recovered:?})"
    )]
    WrongSigner {
        claimed: Address,
        recovered: Option<Address>,
    },
}

/// The typed data of `manifest`'s attestation.
pub fn typed_data(manifest: &Manifest) -> Result<SnapshotAttestation, AttestError> {
    let (Some(block_hash), Some(state_root)) = (manifest.block_hash, manifest.state_root) else {
        return Err(AttestError::Unbound);
    };
    Ok(SnapshotAttestation {
        snapshot: manifest.id().url_form(),
        chainId: manifest.chain_id,
        blockNumber: manifest.block_number,
        blockHash: block_hash,
        stateRoot: state_root,
        setupDigest: digest_word(&manifest.pir.setup_digest),
        recordsDigest: digest_word(&manifest.content_digest),
        codeCount: manifest.codes.map_or(0, |c| c.count),
        codeRoot: manifest.codes.map_or(B256::ZERO, |c| c.root),
        manifestDigest: manifest.signed_digest(),
    })
}

/// The EIP-712 hash a signer signs for `manifest`.
pub fn signing_hash(manifest: &Manifest) -> Result<B256, AttestError> {
    Ok(typed_data(manifest)?.eip712_signing_hash(&DOMAIN))
}

impl Attestation {
    /// Checks that the signature is `signer`'s over `manifest`.
    pub fn verify(&self, manifest: &Manifest) -> Result<(), AttestError> {
        self.verify_hash(&signing_hash(manifest)?)
    }

    /// Checks that the signature is `signer`'s over `hash` (a manifest's
    /// [`signing_hash`], computed once for all its attestations).
    pub fn verify_hash(&self, hash: &B256) -> Result<(), AttestError> {
        let recovered = self.signature.recover_address_from_prehash(hash).ok();
        match recovered == Some(self.signer) {
            true => Ok(()),
            false => Err(AttestError::WrongSigner {
                claimed: self.signer,
                recovered,
            }),
        }
    }
}

/// A SHA3-256 digest (64 hex digits, checked where it was parsed) as a word.
fn digest_word(digest: &crate::Sha3Digest) -> B256 {
    digest.as_str().parse().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloy_primitives::Bytes;
    use alloy_signer::SignerSync;

    /// One change to a manifest.
    type Change = Box<dyn Fn(&mut Manifest)>;

    /// A bound manifest of chain 1 at block 7.
    fn manifest() -> Manifest {
        let mut m = crate::testing::entry(1, 7, crate::SnapshotKind::Full, &[]).manifest;
        m.block_hash = Some(B256::repeat_byte(1));
        m.state_root = Some(B256::repeat_byte(2));
        m
    }

    #[test]
    fn every_field_a_client_reads_is_under_the_signature() {
        let signer = alloy_signer_local::PrivateKeySigner::random();
        let m = manifest();
        let attestation = Attestation {
            signer: signer.address(),
            signature: signer.sign_hash_sync(&signing_hash(&m).unwrap()).unwrap(),
        };
        assert_eq!(attestation.verify(&m), Ok(()));
        // Build timings are not read, and not signed.
        let mut timed = m.clone();
        timed.build.hint_s = 12.5;
        assert_eq!(attestation.verify(&timed), Ok(()));
        let table = crate::manifest::FileDigest {
            bytes: 9,
            sha3_256: crate::sha3_hex(b"table"),
        };
        let changes: Vec<(&str, Change)> = vec![
            ("format", Box::new(|m| m.format = 2)),
            (
                "storage",
                Box::new(|m| m.storage.contracts.push(Address::repeat_byte(9))),
            ),
            (
                "files",
                Box::new(move |m| {
                    m.files.insert("table.bin".into(), table.clone());
                }),
            ),
            ("hint bytes", Box::new(|m| m.pir.hint_bytes += 1)),
            ("value bytes", Box::new(|m| m.pir.value_bytes = 44)),
            (
                "canaries",
                Box::new(|m| {
                    m.canaries.push(crate::manifest::Canary {
                        key: B256::repeat_byte(3),
                        value: Bytes::from(vec![0; 24]),
                    })
                }),
            ),
            ("common codes", Box::new(|m| m.common_codes.push(1))),
            ("block time", Box::new(|m| m.block_time = Some(1))),
            ("record count", Box::new(|m| m.record_count += 1)),
            ("source", Box::new(|m| m.source.push('x'))),
        ];
        for (what, change) in changes {
            let mut changed = m.clone();
            change(&mut changed);
            assert!(
                matches!(
                    attestation.verify(&changed),
                    Err(AttestError::WrongSigner { .. })
                ),
                "{what} is not signed"
            );
        }
    }
}
