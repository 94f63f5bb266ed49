//! `eth_createAccessList` as geth makes it, over a session's privately
//! read state.

use super::*;

/// Most runs of `eth_createAccessList` (each with the list the last one
/// touched) before it settles.
const ACCESS_LIST_RUNS: usize = 8;

impl Executor {
    /// `eth_createAccessList` as geth makes it: run with the list the last
    /// run touched until a run touches no other; that list, and the gas
    /// the call uses with it (and how it ended).
    pub async fn access_list(
        &self,
        args: &CallArgs,
        sel: &BlockSelector,
        held: PrivateStorage,
    ) -> Result<Result<(Touched, CallResult), String>, ReadError> {
        let mut session = match self.open(sel, held, Vec::new()).await? {
            Ok(session) => session,
            Err(why) => return Ok(Err(why)),
        };
        // As geth: the call's own list is where the first run starts,
        // each entry once (geth's tracer keeps a set); each later run is
        // given what the last one touched.
        let mut list = call_exec::warm_set(&args.access_list);
        let mut paid = call_exec::listing(&list);
        let mut settled = None;
        for _ in 0..ACCESS_LIST_RUNS {
            let (result, touched) = match self
                .run_traced(&mut session, args, Vec::new(), &paid)
                .await?
            {
                Ok(run) => run,
                Err(why) => return Ok(Err(why)),
            };
            // Past the request's EVM time: geth's timeout error.
            if touched == list || session.timed_out {
                settled = Some(result);
                break;
            }
            paid = call_exec::listing(&touched);
            list = touched;
        }
        let requests = self.pad_requests(&session).await?;
        log_cost("eth_createAccessList", args.to, &session, requests);
        // A timeout is geth's error whatever else the runs did: never the
        // fallback (upstream).
        if let Some(timeout) = self.timed_out(&session) {
            return Ok(Ok((list, timeout)));
        }
        if let Some(why) = apart_taints_gas(&session) {
            return Ok(Err(why));
        }
        Ok(match settled {
            Some(result) => Ok((list, result)),
            None => Err(format!(
                "the access list did not settle in {ACCESS_LIST_RUNS} runs"
            )),
        })
    }
}

/// `eth_createAccessList`'s answer: the list, the gas used with it, and
/// why the call failed where it did (geth's fields); a call the node
/// would not even run (an empty authorization list, too little balance
/// for its gas) is geth's error, not a list.
pub fn access_list_answer(
    list: &Touched,
    result: &CallResult,
) -> Result<Value, jsonrpsee::types::ErrorObjectOwned> {
    let (gas, error) = match result {
        CallResult::Success { gas_used, .. } => (*gas_used, None),
        // geth names the revert, not its reason, here.
        CallResult::Revert { gas_used, .. } => (*gas_used, Some("execution reverted".into())),
        CallResult::Halt { gas_used, message } => (*gas_used, Some(message.clone())),
        CallResult::Invalid { message } => {
            let message = format!("failed to apply transaction: {message}");
            let failed =
                jsonrpsee::types::ErrorObjectOwned::owned(EXECUTION_FAILED, message, None::<()>);
            return Err(failed);
        }
    };
    let items: Vec<Value> = list
        .iter()
        .map(|(address, slots)| serde_json::json!({"address": address, "storageKeys": slots}))
        .collect();
    let mut answer = serde_json::json!({
        "accessList": items,
        "gasUsed": alloy_primitives::U64::from(gas),
    });
    if let Some(error) = error {
        answer["error"] = Value::String(error);
    }
    Ok(answer)
}
