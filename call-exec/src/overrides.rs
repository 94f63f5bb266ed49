//! State and block overrides as geth applies them, for every method that
//! takes them: `eth_simulateV1`'s blocks, and `eth_call`'s,
//! `eth_estimateGas`'s and `eth_createAccessList`'s third and fourth
//! parameters. Each is written here once.

use alloy_primitives::{keccak256, Address, Bytes, B256, U256};
use revm::bytecode::Bytecode;
use revm::context::BlockEnv;
use revm::database::CacheDB;
use revm::database_interface::Database;
use revm::primitives::KECCAK_EMPTY;

use crate::db::RoundDb;
use crate::precompiles::BlockPrecompiles;
use crate::system::SYSTEM_CONTRACTS;
use crate::SpecId;

/// The state a run's overrides are applied to.
pub(crate) type OverDb<'a> = CacheDB<RoundDb<'a>>;

/// A state override of one account.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AccountOverride {
    pub balance: Option<U256>,
    pub nonce: Option<u64>,
    pub code: Option<Bytes>,
    /// The whole storage.
    pub state: Option<Vec<(B256, B256)>>,
    /// Words changed.
    pub state_diff: Option<Vec<(B256, B256)>>,
    /// `movePrecompileToAddress`.
    pub move_precompile_to: Option<Address>,
}

/// `eth_call`'s block overrides (its fourth parameter): the fields of the
/// block the call runs in that it replaces. (`beaconRoot` and
/// `withdrawals` geth refuses for these methods: never set here.)
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BlockOverrides {
    pub number: Option<u64>,
    pub difficulty: Option<U256>,
    pub time: Option<u64>,
    pub gas_limit: Option<u64>,
    pub fee_recipient: Option<Address>,
    pub prev_randao: Option<B256>,
    pub base_fee: Option<u64>,
    pub blob_base_fee: Option<u128>,
}

impl BlockOverrides {
    /// `env` with these fields replaced. (The base fee a call that names
    /// no price sees stays zero, as geth's `NoBaseFee` leaves it: the
    /// caller applies that after.)
    pub(crate) fn apply(&self, env: &mut BlockEnv) {
        if let Some(number) = self.number {
            env.number = U256::from(number);
        }
        if let Some(difficulty) = self.difficulty {
            env.difficulty = difficulty;
        }
        if let Some(time) = self.time {
            env.timestamp = U256::from(time);
        }
        if let Some(gas_limit) = self.gas_limit {
            env.gas_limit = gas_limit;
        }
        if let Some(coinbase) = self.fee_recipient {
            env.beneficiary = coinbase;
        }
        if let Some(randao) = self.prev_randao {
            env.prevrandao = Some(randao);
        }
        if let Some(fee) = self.base_fee {
            env.basefee = fee;
        }
        if let (Some(price), Some(set)) =
            (self.blob_base_fee, env.blob_excess_gas_and_price.as_mut())
        {
            set.blob_gasprice = price;
        }
    }
}

/// Which method's rules the overrides follow: geth applies them alike
/// but runs each method's EVM with other precompiles.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum OverrideRules {
    /// `eth_call`: the precompiles as the overrides leave them.
    #[default]
    Call,
    /// `eth_estimateGas`: overrides checked as a call's, but geth's
    /// estimator runs the fork's own precompiles (a precompile moved or
    /// overridden with code runs where it always does).
    Estimate,
    /// `eth_createAccessList`: geth applies the overrides with no
    /// precompile known (a move is refused: "not a precompile"), and runs
    /// the fork's own precompiles.
    AccessList,
    /// `eth_simulateV1`'s blocks: as a call's, and no system contract
    /// (each block calls them) may be overridden.
    Simulation,
}

/// Why overrides are not applied.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum OverrideError {
    /// geth refuses them (-32000, its words).
    Refused(String),
    /// What is not done here (a noun phrase).
    Unsupported(String),
}

/// Applies state overrides, in ascending address order (geth's), under
/// `rules`: the precompiles the method then runs (for a call, as the
/// overrides leave them: one overridden is none there, one moved runs at
/// its new address).
pub(crate) fn apply_state(
    spec: SpecId,
    overrides: &[(Address, AccountOverride)],
    db: &mut OverDb,
    rules: OverrideRules,
) -> Result<BlockPrecompiles, OverrideError> {
    let mut precompiles = BlockPrecompiles::new(spec);
    // geth's access list applies them with no precompile known.
    let known = |p: &BlockPrecompiles, a: &Address| {
        rules != OverrideRules::AccessList && p.is_precompile(a)
    };
    let mut moved_to = std::collections::HashSet::new();
    for (address, over) in overrides {
        if moved_to.contains(address) {
            return Err(OverrideError::Refused(format!(
                "account {address} has already been overridden by a precompile"
            )));
        }
        let is_precompile = known(&precompiles, address);
        let system = |a: &Address| SYSTEM_CONTRACTS.contains(a);
        let moved_onto_system = over.move_precompile_to.as_ref().is_some_and(system);
        if rules == OverrideRules::Simulation && (system(address) || moved_onto_system) {
            return Err(OverrideError::Unsupported(format!(
                "an override of the system contract {address} (or a precompile moved onto one)"
            )));
        }
        if let Some(to) = over.move_precompile_to {
            if !is_precompile {
                return Err(OverrideError::Refused(format!(
                    "account {address} is not a precompile"
                )));
            }
            if overrides.iter().any(|(a, _)| *a == to) {
                return Err(OverrideError::Refused(format!(
                    "account {to} is already overridden"
                )));
            }
            precompiles.relocate(*address, to);
            moved_to.insert(to);
        }
        if is_precompile {
            precompiles.remove(*address);
        }
        override_account(db, *address, over)?;
    }
    Ok(match rules {
        OverrideRules::Call | OverrideRules::Simulation => precompiles,
        OverrideRules::Estimate | OverrideRules::AccessList => BlockPrecompiles::new(spec),
    })
}

/// One account's override: its nonce, balance and code, then its whole
/// storage (`state`) or some words (`stateDiff`).
fn override_account(
    db: &mut OverDb,
    address: Address,
    over: &AccountOverride,
) -> Result<(), OverrideError> {
    if over.state.is_some() && over.state_diff.is_some() {
        return Err(OverrideError::Refused(format!(
            "account {address} has both 'state' and 'stateDiff'"
        )));
    }
    let mut info = db.basic(address).ok().flatten().unwrap_or_default();
    if let Some(nonce) = over.nonce {
        info.nonce = nonce;
    }
    if let Some(balance) = over.balance {
        info.balance = balance;
    }
    if let Some(code) = &over.code {
        info.code_hash = match code.is_empty() {
            true => KECCAK_EMPTY,
            false => keccak256(code),
        };
        // (Bytes a delegation's prefix begins that are no delegation: revm
        // holds no such code.)
        let bytecode = Bytecode::new_raw_checked(code.clone()).map_err(|_| {
            OverrideError::Unsupported(format!(
                "code beginning 0xef01 that is no delegation ({address})"
            ))
        })?;
        info.code = Some(bytecode);
    }
    db.insert_account_info(address, info);
    let word =
        |(slot, value): &(B256, B256)| (U256::from_be_bytes(slot.0), U256::from_be_bytes(value.0));
    if let Some(state) = &over.state {
        let _ = db.replace_account_storage(address, state.iter().map(word).collect());
    }
    if let Some(diff) = &over.state_diff {
        for (slot, value) in diff.iter().map(word) {
            let _ = db.insert_account_storage(address, slot, value);
        }
    }
    Ok(())
}
