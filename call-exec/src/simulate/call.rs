//! A simulated call: the transaction it becomes (geth's defaults), run and
//! committed.

use super::*;
use revm::context::result::{ExecResultAndState, InvalidTransaction};

/// The transaction a call becomes: geth's defaults (the state's nonce,
/// the block's gas left within the budget, zero fees), or why the
/// request fails.
fn transaction(
    call: &SimCall,
    chain_id: u64,
    state_nonce: u64,
    gas_left: u64,
    budget: u64,
) -> Result<(SimTx, bool), Stop> {
    let wanted = call.gas.unwrap_or(gas_left);
    if gas_left < wanted {
        return Err(Stop::Failed(
            -38015,
            format!("block gas limit reached: remaining: {gas_left}, required: {wanted}"),
        ));
    }
    let gas = wanted.min(budget);
    if let Some(other) = call.chain_id.filter(|c| *c != U256::from(chain_id)) {
        return Err(Stop::Failed(
            -32000,
            format!("chainId does not match node's (have={other}, want={chain_id})"),
        ));
    }
    if call.authorizations.is_some() && call.blob_hashes.is_some() {
        return Err(Stop::Unsupported(
            "a call naming both delegations and blobs".into(),
        ));
    }
    if call.to.is_none() && state_nonce == u64::MAX {
        return Err(Stop::Unsupported(
            "a creation from an account whose nonce is at its most".into(),
        ));
    }
    let (tx_type, cap, tip) = type_and_fees(call)?;
    let tx = SimTx {
        tx_type,
        nonce: call.nonce.unwrap_or(state_nonce),
        gas,
        max_fee_per_gas: cap,
        max_priority_fee_per_gas: tip,
        max_fee_per_blob_gas: call.max_fee_per_blob_gas.unwrap_or(0),
    };
    Ok((tx, gas < wanted))
}

/// The transaction's type and its fee cap and tip, as geth's defaults make
/// them (`gasPrice` a legacy transaction's, both caps zero unless named).
fn type_and_fees(call: &SimCall) -> Result<(u8, u128, u128), Stop> {
    let named_1559 = call.max_fee_per_gas.is_some() || call.max_priority_fee_per_gas.is_some();
    if call.gas_price.is_some() && named_1559 {
        return Err(Stop::Failed(
            -32000,
            "both gasPrice and (maxFeePerGas or maxPriorityFeePerGas) specified".into(),
        ));
    }
    let typed_fields =
        !call.access_list.is_empty() || call.authorizations.is_some() || call.blob_hashes.is_some();
    if call.gas_price.is_some() && typed_fields {
        return Err(Stop::Unsupported(
            "a call naming gasPrice with typed fields (an access list, blobs, delegations)".into(),
        ));
    }
    let tx_type = match (
        call.gas_price.is_some(),
        &call.authorizations,
        &call.blob_hashes,
    ) {
        (true, ..) => 0,
        (false, Some(_), _) => 4,
        (false, None, Some(_)) => 3,
        (false, None, None) => 2,
    };
    let (cap, tip) = match call.gas_price {
        Some(price) => (price, price),
        None => (
            call.max_fee_per_gas.unwrap_or(0),
            call.max_priority_fee_per_gas.unwrap_or(0),
        ),
    };
    Ok((tx_type, cap, tip))
}

/// geth's first check of a transaction under `validation` (before its
/// fees, where revm checks them first).
fn check_nonce(from: Address, tx: u64, state: u64, gas: u64) -> Result<(), Stop> {
    let (code, message) = match tx.cmp(&state) {
        std::cmp::Ordering::Greater => (
            -38011,
            format!("nonce too high: address {from}, tx: {tx} state: {state}"),
        ),
        std::cmp::Ordering::Less => (
            -38010,
            format!("nonce too low: address {from}, tx: {tx} state: {state}"),
        ),
        std::cmp::Ordering::Equal if state == u64::MAX => (
            -32603,
            format!("nonce has max value: address {from}, nonce: {state}"),
        ),
        std::cmp::Ordering::Equal => return Ok(()),
    };
    Err(Stop::Failed(
        code,
        format!("err: {message} (supplied gas {gas})"),
    ))
}

pub(super) fn run_call(
    run: &BlockRun,
    call: &SimCall,
    done: &SimBlockDone,
    budget: &mut u64,
    tracer: &mut logs::CallLogs,
    db: &mut SimDb,
) -> Result<SimCallDone, Stop> {
    let sim = run.sim;
    let sender = db.basic(call.from).ok().flatten().unwrap_or_default();
    let gas_left = run.block.gas_limit.saturating_sub(done.gas_used);
    let chain_id = sim.base.context.chain_id;
    let (tx, gas_capped) = transaction(call, chain_id, sender.nonce, gas_left, *budget)?;
    if sim.validation {
        check_nonce(call.from, tx.nonce, sender.nonce, tx.gas)?;
    }
    tracer.reset();
    let out = execute(run, call, &tx, &sender, tracer, db)?;
    // A system contract made by a call (its deployer is any address here)
    // would run its code with gas of its own in every later block.
    let made = |a: &Address| out.state.get(a).is_some_and(|acc| acc.is_created());
    if let Some(system) = SYSTEM_CONTRACTS.iter().find(|a| made(a)) {
        return Err(Stop::Unsupported(format!(
            "a call creating the system contract {system}"
        )));
    }
    db.commit(out.state);
    // geth's nonce wraps past 2^64 - 1; revm's stays.
    if sender.nonce == u64::MAX && call.to.is_some() {
        let mut info = db.basic(call.from).ok().flatten().unwrap_or_default();
        info.nonce = 0;
        db.insert_account_info(call.from, info);
    }
    let done = call_done(out.result, tx, tracer.take(), gas_capped);
    *budget = budget.saturating_sub(done.gas_used);
    Ok(done)
}

/// The transaction's environment for revm. Without `validation`, a blob
/// call naming no blob fee cap pays the block's blob price (geth skips the
/// cap's check then, and charges the price).
fn tx_env(run: &BlockRun, call: &SimCall, tx: &SimTx) -> TxEnv {
    let sim = run.sim;
    let blob_price = run
        .facts
        .env
        .blob_excess_gas_and_price
        .map_or(0, |b| b.blob_gasprice);
    let uncapped = uncapped_blobs(run, call, tx);
    let mut env = TxEnv {
        tx_type: tx.tx_type,
        caller: call.from,
        gas_limit: tx.gas,
        gas_price: tx.max_fee_per_gas,
        gas_priority_fee: (tx.tx_type != 0).then_some(tx.max_priority_fee_per_gas),
        kind: call.to.map_or(TxKind::Create, TxKind::Call),
        value: call.value,
        data: call.input.clone(),
        nonce: tx.nonce,
        chain_id: Some(sim.base.context.chain_id),
        access_list: call.access_list.clone(),
        blob_hashes: call.blob_hashes.clone().unwrap_or_default(),
        max_fee_per_blob_gas: match uncapped {
            true => blob_price,
            false => tx.max_fee_per_blob_gas,
        },
        ..Default::default()
    };
    env.set_recovered_authorization(call.authorizations.clone().unwrap_or_default());
    env
}

/// Runs the transaction over the block's state (not committed): its
/// result and state, or geth's refusal of it.
fn execute(
    run: &BlockRun,
    call: &SimCall,
    tx: &SimTx,
    sender: &revm::state::AccountInfo,
    tracer: &mut logs::CallLogs,
    db: &mut SimDb,
) -> Result<ExecResultAndState<ExecutionResult>, Stop> {
    let sim = run.sim;
    let mut cfg = cfg(sim, run.facts.spec);
    // geth skips the fee checks only without validation and with no fee
    // named (or both zero).
    cfg.disable_base_fee =
        !sim.validation && tx.max_fee_per_gas == 0 && tx.max_priority_fee_per_gas == 0;
    let context = Context::mainnet()
        .with_db(&mut *db)
        .with_cfg(cfg)
        .with_block(run.facts.env.clone());
    let mut evm = revm::context::Evm::new_with_inspector(
        context,
        &mut *tracer,
        EthInstructions::new_mainnet_with_spec(run.facts.spec),
        run.precompiles.clone(),
    );
    match evm.inspect_tx(tx_env(run, call, tx)) {
        Ok(out) => Ok(out),
        Err(EVMError::Transaction(invalid)) => {
            // geth checks the balance before the intrinsic gas (and
            // after the fees, as revm does).
            let gas_first = matches!(
                invalid,
                InvalidTransaction::CallGasCostMoreThanGasLimit { .. }
                    | InvalidTransaction::GasFloorMoreThanGasLimit { .. }
            );
            // Without a blob fee cap, geth's check leaves the blobs out
            // and its balance then wraps below zero: not followed here.
            let blob_fee_unpaid = uncapped_blobs(run, call, tx)
                && matches!(invalid, InvalidTransaction::LackOfFundForMaxFee { .. })
                && !cannot_pay(call, tx, sender);
            if blob_fee_unpaid {
                return Err(Stop::Unsupported(
                    "a blob call whose sender cannot pay the blob fee (geth's balance would wrap)"
                        .into(),
                ));
            }
            let (code, message) = match gas_first && cannot_pay(call, tx, sender) {
                true => fees::refusal(&InvalidTransaction::LackOfFundForMaxFee {
                    fee: Box::new(cost(call, tx)),
                    balance: Box::new(sender.balance),
                }),
                false => fees::refusal(&invalid),
            };
            Err(Stop::Failed(
                code,
                format!("err: {message} (supplied gas {})", tx.gas),
            ))
        }
        Err(e) => Err(Stop::Failed(-32603, e.to_string())),
    }
}

/// A call's result as geth reports it: its data, gas, the tracer's logs
/// and the receipt's (none when it failed).
fn call_done(
    result: ExecutionResult,
    tx: SimTx,
    logs: Vec<SimLog>,
    gas_capped: bool,
) -> SimCallDone {
    let gas = match &result {
        ExecutionResult::Success { gas, .. }
        | ExecutionResult::Revert { gas, .. }
        | ExecutionResult::Halt { gas, .. } => *gas,
    };
    let (output, failure, receipt_logs, logs) = match result {
        ExecutionResult::Success {
            output,
            logs: receipt,
            ..
        } => (output.into_data(), None, receipt, logs),
        ExecutionResult::Revert { output, .. } => (
            Bytes::new(),
            Some(CallFailure::Reverted(output)),
            Vec::new(),
            Vec::new(),
        ),
        ExecutionResult::Halt { reason, .. } => (
            Bytes::new(),
            Some(CallFailure::Halted(crate::halt_message(&reason))),
            Vec::new(),
            Vec::new(),
        ),
    };
    SimCallDone {
        tx,
        output,
        gas_used: gas.tx_gas_used(),
        max_used_gas: gas.total_gas_spent().max(gas.floor_gas()),
        logs,
        receipt_logs,
        failure,
        gas_capped,
    }
}

/// What geth's balance check asks of the sender: the gas at the fee cap,
/// the value, and the blobs at their cap.
fn cost(call: &SimCall, tx: &SimTx) -> U256 {
    let blobs = call.blob_hashes.as_ref().map_or(0, |h| h.len() as u64);
    let gas = U256::from(tx.gas).saturating_mul(U256::from(tx.max_fee_per_gas));
    let blob_gas = U256::from(GAS_PER_BLOB * blobs);
    gas.saturating_add(call.value)
        .saturating_add(blob_gas.saturating_mul(U256::from(tx.max_fee_per_blob_gas)))
}

/// Whether the sender cannot pay [`cost`] (checked before anything else
/// of the transaction's but its nonce and fees, as geth checks it).
fn cannot_pay(call: &SimCall, tx: &SimTx, sender: &revm::state::AccountInfo) -> bool {
    sender.balance < cost(call, tx)
}

/// A blob call without `validation` naming no blob fee cap (geth skips
/// the cap's check and charges the block's blob price).
fn uncapped_blobs(run: &BlockRun, call: &SimCall, tx: &SimTx) -> bool {
    !run.sim.validation && tx.max_fee_per_blob_gas == 0 && call.blob_hashes.is_some()
}
