//! `eth_estimateGas` as geth computes it, over a session's privately read
//! state.

use super::*;

/// What `eth_estimateGas` gives.
#[derive(Debug)]
pub enum Estimated {
    /// The least gas (within geth's 1.5 %) with which the call succeeds.
    Gas(u64),
    /// It fails at the most gas it may have: the node's error.
    Failed(CallResult),
    /// It runs out of gas even at the most it may have.
    Exceeds(u64),
}

/// `eth_estimateGas`'s answer: the gas, or the node's error (a revert
/// as code 3; "gas required exceeds allowance" where even the most gas
/// does not do).
pub fn estimate_answer(estimated: &Estimated) -> Result<Value, jsonrpsee::types::ErrorObjectOwned> {
    use jsonrpsee::types::ErrorObjectOwned;
    let failed = |message: String| ErrorObjectOwned::owned(EXECUTION_FAILED, message, None::<()>);
    match estimated {
        Estimated::Gas(gas) => Ok(serde_json::json!(alloy_primitives::U64::from(*gas))),
        Estimated::Failed(result) => match node_answer(result) {
            Err(error) => Err(error),
            Ok(_) => Err(failed("no estimate".into())),
        },
        Estimated::Exceeds(hi) => Err(failed(format!("gas required exceeds allowance ({hi})"))),
    }
}

/// The most gas an estimate may give: the call's own gas, else the
/// block's gas limit (overridden, or the header's; the gas cap without
/// either), never past the cap.
fn ceiling(session: &Session, args: &CallArgs) -> u64 {
    let overridden = args.block_overrides.as_ref().and_then(|o| o.gas_limit);
    let block = overridden.unwrap_or_else(|| {
        session
            .block
            .header
            .as_ref()
            .map_or(call_exec::GAS_CAP, |h| h.gas_limit)
    });
    args.gas
        .filter(|g| *g >= TX_GAS)
        .unwrap_or(block)
        .min(call_exec::GAS_CAP)
}

/// geth's tolerance of an estimate above the least gas that works
/// (wallets add a margin anyway).
const ESTIMATE_ERROR_RATIO: f64 = 0.015;
/// Gas of a plain transfer.
const TX_GAS: u64 = 21_000;
/// Gas a call passes to a value transfer's recipient for free.
const CALL_STIPEND: u64 = 2_300;

impl Executor {
    /// `eth_estimateGas` as geth computes it: the call at the most gas it
    /// may have (the block's limit, the gas cap, what the sender can pay),
    /// then an optimistic guess from the gas it used, then a bisection,
    /// every run over the same privately read state (later runs read
    /// nothing new, or little).
    pub async fn estimate(
        &self,
        args: &CallArgs,
        sel: &BlockSelector,
        held: PrivateStorage,
        first: Vec<ReadKey>,
    ) -> Result<Result<Estimated, String>, ReadError> {
        let mut session = match self.open(sel, held, Vec::new()).await? {
            Ok(session) => session,
            Err(why) => return Ok(Err(why)),
        };
        let estimated = self.estimate_in(&mut session, args, first).await;
        let requests = self.pad_requests(&session).await?;
        log_cost("eth_estimateGas", args.to, &session, requests);
        // A timeout is geth's error whatever else the runs did (no run
        // follows it): never an estimate made of them, nor the fallback.
        if let Some(timeout) = self.timed_out(&session) {
            return Ok(Ok(Estimated::Failed(timeout)));
        }
        if let Some(why) = apart_taints_gas(&session) {
            return Ok(Err(why));
        }
        estimated
    }

    async fn estimate_in(
        &self,
        session: &mut Session,
        args: &CallArgs,
        first: Vec<ReadKey>,
    ) -> Result<Result<Estimated, String>, ReadError> {
        let mut hi = ceiling(session, args);
        let mut top = match self.attempt(session, args, hi, first).await? {
            Ok(result) => result,
            Err(why) => return Ok(Err(why)),
        };
        // The sender must afford the gas at its fee cap (its account was
        // read by the first run).
        if let Some(allowance) = self.affordable(session, args).filter(|a| *a < hi) {
            hi = allowance;
            top = match self.attempt(session, args, hi, Vec::new()).await? {
                Ok(result) => result,
                Err(why) => return Ok(Err(why)),
            };
        }
        // geth's shortcut: a call with no data to an account without code
        // (as the overrides leave it) is a plain transfer.
        let plain_transfer = args.input.is_empty()
            && args.to.is_some_and(|to| {
                match overridden(args, &to).and_then(|o| o.code.as_ref()) {
                    Some(code) => code.is_empty(),
                    None => session
                        .reads
                        .known
                        .account(&to)
                        .is_some_and(|a| !a.has_code),
                }
            });
        if plain_transfer {
            let transfer = self.attempt(session, args, TX_GAS, Vec::new()).await?;
            if let Ok(CallResult::Success { .. }) = transfer {
                return Ok(Ok(Estimated::Gas(TX_GAS)));
            }
        }
        let used = match &top {
            CallResult::Success { gas_used, .. } => *gas_used,
            CallResult::Halt { message, .. } if message == call_exec::OUT_OF_GAS => {
                return Ok(Ok(Estimated::Exceeds(hi)))
            }
            _ => return Ok(Ok(Estimated::Failed(top))),
        };
        Ok(self
            .bisect(session, args, used, hi)
            .await?
            .map(Estimated::Gas))
    }

    /// The least gas (within [`ESTIMATE_ERROR_RATIO`]) between the gas a
    /// run used and `hi`, with which the call succeeds: an optimistic
    /// guess first, then halves, skewed low (geth's search).
    async fn bisect(
        &self,
        session: &mut Session,
        args: &CallArgs,
        used: u64,
        mut hi: u64,
    ) -> Result<Result<u64, String>, ReadError> {
        let mut lo = used.saturating_sub(1);
        let optimistic = used.saturating_add(CALL_STIPEND).saturating_mul(64) / 63;
        if optimistic < hi {
            match self.attempt(session, args, optimistic, Vec::new()).await? {
                Ok(CallResult::Success { .. }) => hi = optimistic,
                Ok(_) => lo = optimistic,
                Err(why) => return Ok(Err(why)),
            }
        }
        while lo + 1 < hi {
            if (hi - lo) as f64 / (hi as f64) < ESTIMATE_ERROR_RATIO {
                break;
            }
            let mid = ((hi + lo) / 2).min(lo.saturating_mul(2));
            match self.attempt(session, args, mid, Vec::new()).await? {
                Ok(CallResult::Success { .. }) => hi = mid,
                Ok(_) => lo = mid,
                Err(why) => return Ok(Err(why)),
            }
        }
        Ok(Ok(hi))
    }

    /// One run of the call with `gas`.
    async fn attempt(
        &self,
        session: &mut Session,
        args: &CallArgs,
        gas: u64,
        first: Vec<ReadKey>,
    ) -> Result<Result<CallResult, String>, ReadError> {
        let args = CallArgs {
            gas: Some(gas),
            ..args.clone()
        };
        self.run(session, &args, first).await
    }

    /// The most gas the sender can pay at the call's fee cap, when it
    /// names one.
    fn affordable(&self, session: &Session, args: &CallArgs) -> Option<u64> {
        let cap = args.max_fee_per_gas.or(args.gas_price).filter(|c| *c > 0)?;
        let sender = args.from.unwrap_or_default();
        // The balance as the overrides leave it (geth estimates over them).
        let balance = match overridden(args, &sender).and_then(|o| o.balance) {
            Some(balance) => balance,
            None => session.reads.known.account(&sender)?.balance,
        };
        let left = balance.saturating_sub(args.value);
        let allowance = left / U256::from(cap);
        Some(u64::try_from(allowance).unwrap_or(u64::MAX))
    }
}

/// `account`'s state override in `args`, if any.
fn overridden<'a>(
    args: &'a CallArgs,
    account: &Address,
) -> Option<&'a call_exec::overrides::AccountOverride> {
    args.overrides
        .iter()
        .find(|(a, _)| a == account)
        .map(|(_, o)| o)
}
