//! Which rules a block runs under.

use revm::primitives::eip4844::{
    BLOB_BASE_FEE_UPDATE_FRACTION_CANCUN, BLOB_BASE_FEE_UPDATE_FRACTION_PRAGUE,
};
use revm::primitives::hardfork::SpecId;

/// Ethereum mainnet's chain id.
const MAINNET: u64 = 1;

/// Mainnet's forks by block number (before the merge's timestamps).
const MAINNET_BY_BLOCK: &[(u64, SpecId)] = &[
    (15_537_394, SpecId::MERGE),
    (12_965_000, SpecId::LONDON),
    (12_244_000, SpecId::BERLIN),
    (9_069_000, SpecId::ISTANBUL),
    (7_280_000, SpecId::PETERSBURG),
    (4_370_000, SpecId::BYZANTIUM),
    (2_675_000, SpecId::SPURIOUS_DRAGON),
    (2_463_000, SpecId::TANGERINE),
    (1_150_000, SpecId::HOMESTEAD),
];

/// Mainnet's forks by timestamp, newest first.
const MAINNET_BY_TIME: &[(u64, SpecId)] = &[
    (1_764_798_551, SpecId::OSAKA),
    (1_746_612_311, SpecId::PRAGUE),
    (1_710_338_135, SpecId::CANCUN),
    (1_681_338_455, SpecId::SHANGHAI),
];

/// The rules of block `number` at `timestamp` on `chain_id`: mainnet's
/// forks on mainnet; on other chains (test and development chains) the
/// newest rules revm knows that a node runs by default (`latest`),
/// unless the operator names them.
pub fn spec_for(chain_id: u64, number: u64, timestamp: u64, latest: SpecId) -> SpecId {
    if chain_id != MAINNET {
        return latest;
    }
    if let Some((_, spec)) = MAINNET_BY_TIME.iter().find(|(t, _)| timestamp >= *t) {
        return *spec;
    }
    MAINNET_BY_BLOCK
        .iter()
        .find(|(n, _)| number >= *n)
        .map_or(SpecId::FRONTIER, |(_, spec)| *spec)
}

/// A block's blob parameters: its target and most blobs, and the blob base
/// fee's update fraction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlobSchedule {
    pub target: u64,
    pub max: u64,
    pub update_fraction: u64,
}

/// Mainnet's blob-parameter-only forks (EIP-7892) by timestamp, newest
/// first.
const MAINNET_BPO: &[(u64, BlobSchedule)] = &[
    (
        1_767_747_671,
        BlobSchedule {
            target: 14,
            max: 21,
            update_fraction: 11_684_671,
        },
    ),
    (
        1_765_290_071,
        BlobSchedule {
            target: 10,
            max: 15,
            update_fraction: 8_346_193,
        },
    ),
];

/// The blob parameters of a block at `timestamp` under `spec`: mainnet's
/// forks on mainnet, the fork's own elsewhere (a chain's own schedule is
/// not known here: [`blob_schedule_known`]).
pub fn blob_schedule(chain_id: u64, spec: SpecId, timestamp: u64) -> BlobSchedule {
    if chain_id == MAINNET {
        if let Some((_, schedule)) = MAINNET_BPO.iter().find(|(t, _)| timestamp >= *t) {
            return *schedule;
        }
    }
    match spec.is_enabled_in(SpecId::PRAGUE) {
        true => BlobSchedule {
            target: 6,
            max: 9,
            update_fraction: BLOB_BASE_FEE_UPDATE_FRACTION_PRAGUE,
        },
        false => BlobSchedule {
            target: 3,
            max: 6,
            update_fraction: BLOB_BASE_FEE_UPDATE_FRACTION_CANCUN,
        },
    }
}

/// Whether [`blob_schedule`] knows the chain's own (mainnet's), past the
/// forks' defaults.
pub fn blob_schedule_known(chain_id: u64) -> bool {
    chain_id == MAINNET
}
