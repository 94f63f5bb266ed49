//! A simulated block's environment (its rules, base fee and blob facts,
//! as they follow from its parent), its state overrides, and its system
//! calls.

use super::*;

/// One block's environment: its rules, base fee and blob facts.
pub(super) struct BlockFacts {
    pub(super) spec: SpecId,
    pub(super) env: BlockEnv,
    pub(super) base_fee: u64,
    pub(super) excess_blob_gas: u64,
}

pub(super) fn block_facts(
    sim: &Simulation,
    block: &SimBlock,
    parent: &Parent,
) -> Result<BlockFacts, Stop> {
    let chain = sim.base.context.chain_id;
    let spec = crate::spec_for(chain, block.number, block.timestamp, sim.latest);
    if !spec.is_enabled_in(SpecId::MERGE) {
        return Err(Stop::Unsupported("a block before the merge".into()));
    }
    let base_fee = match (block.base_fee, sim.validation) {
        (Some(fee), _) => fee,
        (None, true) => fees::next_base_fee(parent.gas_used, parent.gas_limit, parent.base_fee),
        (None, false) => 0,
    };
    let mut env = BlockEnv {
        number: U256::from(block.number),
        timestamp: U256::from(block.timestamp),
        gas_limit: block.gas_limit,
        basefee: base_fee,
        beneficiary: block.coinbase,
        prevrandao: Some(block.prevrandao),
        difficulty: U256::ZERO,
        ..Default::default()
    };
    env.blob_excess_gas_and_price = None;
    let excess_blob_gas = match spec.is_enabled_in(SpecId::CANCUN) {
        true => blob_facts(sim, block, parent, spec, &mut env)?,
        false => 0,
    };
    Ok(BlockFacts {
        spec,
        env,
        base_fee,
        excess_blob_gas,
    })
}

/// A Cancun block's blob facts, set in `env`: its excess blob gas (from
/// the parent's, under the block's schedule) and blob base fee (named, or
/// from the excess).
fn blob_facts(
    sim: &Simulation,
    block: &SimBlock,
    parent: &Parent,
    spec: SpecId,
    env: &mut BlockEnv,
) -> Result<u64, Stop> {
    let chain = sim.base.context.chain_id;
    let mut excess_blob_gas = 0;
    let schedule = blob_schedule(chain, spec, block.timestamp);
    let parent_spec = crate::spec_for(chain, parent.number, parent.timestamp, sim.latest);
    let (excess, used) = (
        parent.excess_blob_gas.unwrap_or(0),
        parent.blob_gas_used.unwrap_or(0),
    );
    // Under every fork's target, no excess follows, whatever the
    // chain's schedule; past it, only a schedule known here says.
    let least_target = 3 * GAS_PER_BLOB;
    if !blob_schedule_known(chain) && excess.saturating_add(used) >= least_target {
        return Err(Stop::Unsupported(
            "the blob fees of a chain whose blob schedule is not known here".into(),
        ));
    }
    if parent_spec.is_enabled_in(SpecId::CANCUN) {
        excess_blob_gas = fees::next_excess_blob_gas(
            excess,
            used,
            parent.base_fee,
            &schedule,
            spec.is_enabled_in(SpecId::OSAKA),
        );
    }
    env.set_blob_excess_gas_and_price(excess_blob_gas, schedule.update_fraction);
    if let (Some(price), Some(set)) = (block.blob_base_fee, env.blob_excess_gas_and_price.as_mut())
    {
        set.blob_gasprice = price;
    }
    Ok(excess_blob_gas)
}

/// Applies a block's state overrides ([`crate::overrides`]): the block's
/// precompiles as they leave them.
pub(super) fn apply_overrides(
    facts: &BlockFacts,
    block: &SimBlock,
    db: &mut SimDb,
) -> Result<BlockPrecompiles, Stop> {
    crate::overrides::apply_state(
        facts.spec,
        &block.overrides,
        db,
        crate::overrides::OverrideRules::Simulation,
    )
    .map_err(|e| match e {
        OverrideError::Refused(message) => Stop::Failed(-32000, message),
        OverrideError::Unsupported(what) => Stop::Unsupported(what),
    })
}

/// A system call of the block (EIP-4788, 2935, 7002, 7251), committed; its
/// output. A contract the state lacks does nothing.
pub(super) fn system_call(
    sim: &Simulation,
    facts: &BlockFacts,
    db: &mut SimDb,
    contract: Address,
    data: Vec<u8>,
) -> Result<Bytes, Stop> {
    let has_code = db
        .basic(contract)
        .ok()
        .flatten()
        .is_some_and(|info| info.code_hash != KECCAK_EMPTY);
    if !has_code {
        return Ok(Bytes::new());
    }
    let mut evm = Context::mainnet()
        .with_db(&mut *db)
        .with_cfg(cfg(sim, facts.spec))
        .with_block(facts.env.clone())
        .build_mainnet();
    let result = evm.system_call(contract, Bytes::from(data));
    drop(evm);
    match result {
        Ok(out) => {
            db.commit(out.state);
            match out.result {
                ExecutionResult::Success { output, .. } => Ok(output.into_data()),
                _ => Err(Stop::Failed(
                    -32000,
                    format!("system call to {contract} failed to execute"),
                )),
            }
        }
        Err(e) => Err(Stop::Failed(
            -32603,
            format!("system call to {contract}: {e}"),
        )),
    }
}

/// Credits a block's withdrawals (gwei) after its calls.
pub(super) fn credit_withdrawals(block: &SimBlock, db: &mut SimDb) {
    for (address, gwei) in &block.withdrawals {
        let mut info = db.basic(*address).ok().flatten().unwrap_or_default();
        info.balance = info
            .balance
            .saturating_add(U256::from(*gwei) * U256::from(1_000_000_000u64));
        db.insert_account_info(*address, info);
    }
}

/// geth's settings for simulated transactions: the checks of a
/// transaction's nonce only with `validation`, no sender-code check, no
/// per-transaction gas cap, the block's gas counted here.
pub(super) fn cfg(sim: &Simulation, spec: SpecId) -> CfgEnv {
    let mut cfg = CfgEnv::new_with_spec(spec);
    cfg.chain_id = sim.base.context.chain_id;
    cfg.disable_nonce_check = !sim.validation;
    cfg.disable_eip3607 = true;
    cfg.disable_block_gas_limit = true;
    cfg.tx_gas_limit_cap = Some(u64::MAX);
    cfg
}
