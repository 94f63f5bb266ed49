//! The fee facts of a simulated block that follow from its parent (the
//! base fee, the excess blob gas and the blob base fee), and geth's codes
//! for a transaction it refuses.

use crate::spec::BlobSchedule;
use revm::context::result::InvalidTransaction;
use revm::context_interface::block::BlobExcessGasAndPrice;
use revm::primitives::eip4844::GAS_PER_BLOB;

/// EIP-1559: the base fee after a parent that used `gas_used` of
/// `gas_limit` at `base_fee` (London's rule; elasticity 2, change 1/8).
pub(crate) fn next_base_fee(gas_used: u64, gas_limit: u64, base_fee: u64) -> u64 {
    let target = gas_limit / 2;
    if target == 0 || gas_used == target {
        return base_fee;
    }
    let base = u128::from(base_fee);
    if gas_used > target {
        let delta = base * u128::from(gas_used - target) / u128::from(target) / 8;
        let raised = base + delta.max(1);
        u64::try_from(raised).unwrap_or(u64::MAX)
    } else {
        let delta = base * u128::from(target - gas_used) / u128::from(target) / 8;
        (base - delta.min(base)) as u64
    }
}

/// The blob base fee at `excess` blob gas.
pub(crate) fn blob_price(excess: u64, schedule: &BlobSchedule) -> u128 {
    BlobExcessGasAndPrice::new(excess, schedule.update_fraction).blob_gasprice
}

/// EIP-4844's excess blob gas after a parent with `excess` and `used`
/// blob gas at `base_fee`, under the child's `schedule` (with Osaka's
/// EIP-7918: while blobs cost less than execution, the excess only grows).
pub(crate) fn next_excess_blob_gas(
    excess: u64,
    used: u64,
    base_fee: u64,
    schedule: &BlobSchedule,
    osaka: bool,
) -> u64 {
    let target_gas = schedule.target * GAS_PER_BLOB;
    let total = excess.saturating_add(used);
    if total < target_gas {
        return 0;
    }
    const BLOB_BASE_COST: u128 = 1 << 13;
    if osaka && BLOB_BASE_COST * u128::from(base_fee) > blob_price(excess, schedule) {
        return excess + used * (schedule.max - schedule.target) / schedule.max;
    }
    total - target_gas
}

/// geth's JSON-RPC code for a transaction `eth_simulateV1` refuses (the
/// whole request fails with it), and its words.
pub(crate) fn refusal(invalid: &InvalidTransaction) -> (i32, String) {
    use InvalidTransaction as I;
    let code = match invalid {
        I::NonceTooLow { .. } => -38010,
        I::NonceTooHigh { .. } => -38011,
        I::GasPriceLessThanBasefee => -38012,
        I::CallGasCostMoreThanGasLimit { .. } => -38013,
        I::LackOfFundForMaxFee { .. } | I::OverflowPaymentInTransaction => -38014,
        I::CreateInitCodeSizeLimit => -38025,
        I::PriorityFeeGreaterThanMaxFee => -32602,
        _ => -32603,
    };
    let message = match invalid {
        I::NonceTooLow { tx, state } => format!("nonce too low: tx: {tx} state: {state}"),
        I::NonceTooHigh { tx, state } => format!("nonce too high: tx: {tx} state: {state}"),
        I::NonceOverflowInTransaction => "nonce has max value".into(),
        I::GasPriceLessThanBasefee => "max fee per gas less than block base fee".into(),
        I::CallGasCostMoreThanGasLimit {
            initial_gas,
            gas_limit,
        } => format!("intrinsic gas too low: have {gas_limit}, want {initial_gas}"),
        I::GasFloorMoreThanGasLimit {
            gas_floor,
            gas_limit,
        } => {
            format!("insufficient gas for floor data gas cost: have {gas_limit}, want {gas_floor}")
        }
        I::LackOfFundForMaxFee { fee, balance } => {
            format!("insufficient funds for gas * price + value: have {balance} want {fee}")
        }
        I::PriorityFeeGreaterThanMaxFee => {
            "max priority fee per gas higher than max fee per gas".into()
        }
        I::CreateInitCodeSizeLimit => "max initcode size exceeded".into(),
        I::EmptyAuthorizationList => "EIP-7702 transaction with empty auth list".into(),
        I::EmptyBlobs => "blob transaction missing blob hashes".into(),
        I::BlobCreateTransaction => "blob transaction of type create".into(),
        other => other.to_string(),
    };
    (code, message)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::blob_schedule;
    use revm::primitives::hardfork::SpecId;

    #[test]
    fn the_base_fee_follows_london() {
        // At the target: unchanged; full: +1/8; empty: -1/8.
        assert_eq!(next_base_fee(15, 30, 1_000), 1_000);
        assert_eq!(next_base_fee(30, 30, 1_000), 1_125);
        assert_eq!(next_base_fee(0, 30, 1_000), 875);
        // Above the target, it rises by at least 1.
        assert_eq!(next_base_fee(16, 30, 1), 2);
    }

    #[test]
    fn the_excess_blob_gas_stays_zero_below_the_target() {
        let schedule = blob_schedule(1, SpecId::OSAKA, 1_767_747_671);
        assert_eq!(schedule.target, 14);
        assert_eq!(next_excess_blob_gas(0, GAS_PER_BLOB, 0, &schedule, true), 0);
        let over = 20 * GAS_PER_BLOB;
        assert_eq!(
            next_excess_blob_gas(0, over, 0, &schedule, true),
            over - 14 * GAS_PER_BLOB
        );
    }
}
