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
    /// serves, and its code table (size and Merkle root; 0 and zero for
    /// none), which its values name codes by.
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
    }
}

/// The EIP-712 domain of every attestation.
pub const DOMAIN: Eip712Domain = eip712_domain! {
    name: "ethpir snapshot",
    version: "2",
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
    })
}

/// The EIP-712 hash a signer signs for `manifest`.
pub fn signing_hash(manifest: &Manifest) -> Result<B256, AttestError> {
    Ok(typed_data(manifest)?.eip712_signing_hash(&DOMAIN))
}

impl Attestation {
    /// Checks that the signature is `signer`'s over `manifest`.
    pub fn verify(&self, manifest: &Manifest) -> Result<(), AttestError> {
        let hash = signing_hash(manifest)?;
        let recovered = self.signature.recover_address_from_prehash(&hash).ok();
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
