//! The system contracts a block calls (EIP-4788, 2935, 7002, 7251) and the
//! deposit contract's event: what no override may replace and no call may
//! create here.

use alloy_primitives::{address, Address, B256};

/// EIP-4788's beacon roots contract.
pub const BEACON_ROOTS: Address = address!("0x000F3df6D732807Ef1319fB7B8bB8522d0Beac02");
/// EIP-2935's history storage contract.
pub const HISTORY_STORAGE: Address = address!("0x0000F90827F1C53a10cb7A02335B175320002935");
/// EIP-7002's withdrawal requests contract.
pub(crate) const WITHDRAWAL_REQUESTS: Address =
    address!("0x00000961Ef480Eb55e80D19ad83579A64c007002");
/// EIP-7251's consolidation requests contract.
pub(crate) const CONSOLIDATION_REQUESTS: Address =
    address!("0x0000BBdDc7CE488642fb579F8B00f3a590007251");
/// The deposit contract's `DepositEvent` (EIP-6110 reads such logs of a
/// chain's deposit contract as requests): refused wherever it is seen.
pub(crate) const DEPOSIT_EVENT: B256 =
    alloy_primitives::b256!("0x649bbc62d0e31342afea4e5cd82d4049e7e1ee912fc0889aa790803be39038c5");
/// The system contracts a block calls: their code runs with a gas of its
/// own in every block, so no override may replace it.
pub(crate) const SYSTEM_CONTRACTS: [Address; 4] = [
    BEACON_ROOTS,
    HISTORY_STORAGE,
    WITHDRAWAL_REQUESTS,
    CONSOLIDATION_REQUESTS,
];
