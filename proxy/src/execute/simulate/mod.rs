//! `eth_simulateV1` run here, over state read privately in rounds, as geth
//! runs it ([`call_exec::simulate`]): several blocks, block and state
//! overrides, `validation`, `traceTransfers`, `returnFullTransactions`,
//! geth's errors and limits. Every account and word it reads is read by
//! PIR, none from the hot tier (the calls name the wallet throughout).
//!
//! The one thing not geth's: a simulated block's `stateRoot` needs the
//! state trie's nodes along every path it changed, which the snapshots do
//! not hold. It is given as zero, and so the block's `hash` (made of its
//! header), the next block's `parentHash` and the logs' `blockHash` are
//! this header's, not the node's. A call that reads a simulated block's
//! hash with `BLOCKHASH` cannot be answered so: it takes the fallback, as
//! a call's unanswerable read does (refused while the gate keeps address
//! reads from the upstream); one that calls the history contract after
//! the first block is refused. Every other field is the node's (the
//! transactions', receipts' and withdrawals' roots, the bloom, sizes,
//! fees, gas, logs, data).

mod answer;
mod params;

pub use answer::simulate_answer;
pub use params::{simulation_of, SimRequest};

use call_exec::simulate::{BaseBlock, SimBlockDone, SimOutcome, Simulation};

use super::*;

pub use super::geth::GethError;

/// geth's code for a simulation past its EVM time (an internal error).
const TIMED_OUT: i32 = -32603;

/// What a simulation gave: geth's error, or its blocks.
pub enum Simulated {
    Failed(GethError),
    Ran(Box<Ran>),
}

/// A simulation that ran: its blocks as settled, and what they gave.
pub struct Ran {
    pub simulation: Arc<Simulation>,
    pub extras: Vec<params::BlockExtra>,
    pub blocks: Vec<SimBlockDone>,
    pub full_transactions: bool,
}

impl Executor {
    /// Runs `request` at its view over contracts `held`, reading what it
    /// lacks in rounds (every key by PIR).
    pub async fn simulate(
        &self,
        request: &SimRequest,
        held: PrivateStorage,
    ) -> Result<Result<Simulated, String>, ReadError> {
        let mut session = match self.open(&request.at, held, Vec::new()).await? {
            Ok(session) => session,
            Err(why) => return Ok(Err(why)),
        };
        let (Some(header), Some(hash)) = (
            session.block.header.clone(),
            self.manifest_hash(&session.view),
        ) else {
            return Ok(Err(
                "the view's block header could not be had from the upstream".into(),
            ));
        };
        let base = params::Base {
            number: session.block.number,
            timestamp: session.block.timestamp,
            coinbase: header.coinbase,
            gas_limit: header.gas_limit,
        };
        let chain = match params::settle_chain(request, &base) {
            Ok(chain) => chain,
            Err(e) => return Ok(Ok(Simulated::Failed(e))),
        };
        let (blocks, extras): (Vec<_>, Vec<_>) = chain.into_iter().unzip();
        let simulation = Arc::new(Simulation {
            base: BaseBlock {
                context: session.block.clone(),
                hash,
                gas_used: header.gas_used,
                blob_gas_used: header.blob_gas_used,
            },
            blocks,
            validation: request.validation,
            trace_transfers: request.trace_transfers,
            latest: self.latest,
        });
        let outcome = self.simulate_in(&mut session, &simulation).await?;
        let requests = self.pad_requests(&session).await?;
        log_cost("eth_simulateV1", None, &session, requests);
        Ok(outcome.map(|outcome| match outcome {
            Err(e) => Simulated::Failed(e),
            Ok(blocks) => Simulated::Ran(Box::new(Ran {
                simulation,
                extras,
                blocks,
                full_transactions: request.full_transactions,
            })),
        }))
    }

    /// The rounds of a simulation: run, read what it lacked, run again.
    async fn simulate_in(
        &self,
        session: &mut Session,
        simulation: &Arc<Simulation>,
    ) -> Result<Result<Result<Vec<SimBlockDone>, GethError>, String>, ReadError> {
        let mut pending = first_keys(simulation);
        for _ in 0..MAX_ROUNDS {
            if let Some(why) = self.session_round(session, pending, usize::MAX).await? {
                return Ok(Err(why));
            }
            session.rounds += 1;
            let known = std::mem::take(&mut session.reads.known);
            // (The request is shared with the blocking run, not copied.)
            let run = Arc::clone(simulation);
            let ((outcome, known), took) = self
                .on_evm(session, move |deadline| {
                    let outcome = call_exec::simulate::simulate_until(&run, &known, deadline);
                    (outcome, known)
                })
                .await?;
            session.reads.known = known;
            session.evm_time += took;
            match outcome {
                SimOutcome::Done(blocks) => return Ok(Ok(Ok(blocks))),
                SimOutcome::Failed { code, message } => {
                    return Ok(Ok(Err(GethError::new(code, message))))
                }
                SimOutcome::Unsupported(why) => return Ok(Ok(Err(GethError::unsupported(&why)))),
                SimOutcome::Unanswerable(why) => return Ok(Err(describe(&why))),
                SimOutcome::TimedOut => {
                    // geth's simulator names it an internal error.
                    session.timed_out = true;
                    let message = self.timeout_message();
                    return Ok(Ok(Err(GethError::new(TIMED_OUT, message))));
                }
                SimOutcome::Needs(needs) => {
                    pending = self.keys_of(&mut session.reads, needs).await?;
                }
            }
        }
        Ok(Err(format!("more than {MAX_ROUNDS} rounds of reads")))
    }
}

/// The keys a simulation surely reads, asked in its first round: every
/// call's sender and target, every account overridden.
fn first_keys(simulation: &Simulation) -> Vec<ReadKey> {
    let mut keys: Vec<ReadKey> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    let mut add = |a: Address| {
        if keys.len() < MAX_KEYS / 2 && seen.insert(a) {
            keys.push(ReadKey::Account(a));
        }
    };
    for block in &simulation.blocks {
        for (address, _) in &block.overrides {
            add(*address);
        }
        for call in &block.calls {
            add(call.from);
            if let Some(to) = call.to {
                add(to);
            }
        }
    }
    keys
}
