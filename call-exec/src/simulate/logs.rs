//! The logs of a simulated call as geth's `eth_simulateV1` reports them:
//! taken as the EVM emits them (not from the receipt), frame by frame, a
//! reverted frame's dropped; with `traceTransfers`, a synthetic ERC-20
//! `Transfer` log from [`TRANSFER_LOG_ADDRESS`] for every value a frame
//! moves (not a `DELEGATECALL`'s or `CALLCODE`'s), at the frame's start.
//! The log index counts every log of the block taken so far, those later
//! dropped included (as geth's tracer counts them).

use alloy_primitives::{address, b256, Address, Bytes, Log, LogData, B256, U256};
use revm::context::ContextTr;
use revm::interpreter::{
    CallInputs, CallOutcome, CallScheme, CreateInputs, CreateOutcome, Interpreter,
};
use revm::Inspector;

use crate::timer::Timer;

/// The address geth's `traceTransfers` logs come from.
pub const TRANSFER_LOG_ADDRESS: Address = address!("0xeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeee");

/// `keccak256("Transfer(address,address,uint256)")`.
const TRANSFER_TOPIC: B256 =
    b256!("0xddf252ad1be2c89b69c2b068fc378daa952ba7f163c4a11628f55a4df523b3ef");

/// One log of a simulated call, with its index in the block.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SimLog {
    pub log: Log,
    pub index: u64,
}

/// The tracer: one per block (its count runs over the block's calls).
#[derive(Debug, Default)]
pub(crate) struct CallLogs {
    trace_transfers: bool,
    /// The logs of each open frame (the call's own frame first).
    frames: Vec<Vec<SimLog>>,
    /// Of the open create frames, where their transfer log waits for the
    /// address created (frame, position), when they moved value.
    pending_creates: Vec<Option<(usize, usize)>>,
    /// The logs of the call's frame when it ended.
    ended: Option<Vec<SimLog>>,
    /// Logs taken in the block so far.
    count: u64,
    /// The history contract (EIP-2935) holds a hash not known here in
    /// this block: a call to it is to be refused.
    pub(crate) history_unknown: bool,
    /// A call went to it then.
    pub(crate) reads_history: bool,
    /// The simulation's deadline.
    timer: Timer,
}

impl CallLogs {
    pub(crate) fn new(trace_transfers: bool) -> Self {
        CallLogs {
            trace_transfers,
            ..Default::default()
        }
    }

    /// Halts the calls once `deadline` passes ([`Self::timed_out`]).
    pub(crate) fn deadline(mut self, deadline: Option<std::time::Instant>) -> Self {
        self.timer = Timer::new(deadline);
        self
    }

    /// Whether a call was halted at the deadline.
    pub(crate) fn timed_out(&self) -> bool {
        self.timer.passed()
    }

    /// Starts a call of the block: what the last one left is dropped.
    pub(crate) fn reset(&mut self) {
        self.frames.clear();
        self.pending_creates.clear();
        self.ended = None;
    }

    /// The logs of the call that ran (none when it failed).
    pub(crate) fn take(&mut self) -> Vec<SimLog> {
        self.ended.take().unwrap_or_default()
    }

    fn add(&mut self, emitter: Address, topics: Vec<B256>, data: Bytes) -> Option<(usize, usize)> {
        let index = self.count;
        self.count += 1;
        let frame = self.frames.len().checked_sub(1)?;
        let log = Log {
            address: emitter,
            data: LogData::new_unchecked(topics, data),
        };
        let logs = &mut self.frames[frame];
        logs.push(SimLog { log, index });
        Some((frame, logs.len() - 1))
    }

    fn transfer(&mut self, from: Address, to: Address, value: U256) -> Option<(usize, usize)> {
        if !self.trace_transfers || value.is_zero() {
            return None;
        }
        let topics = vec![TRANSFER_TOPIC, from.into_word(), to.into_word()];
        let data = Bytes::from(value.to_be_bytes::<32>().to_vec());
        self.add(TRANSFER_LOG_ADDRESS, topics, data)
    }

    fn enter(&mut self) {
        self.frames.push(Vec::new());
    }

    /// A frame ended: its logs go to the frame that made it, unless it
    /// failed (the call's own frame's, to the call's result).
    fn exit(&mut self, failed: bool) {
        let Some(mut logs) = self.frames.pop() else {
            return;
        };
        if failed {
            logs.clear();
        }
        match self.frames.last_mut() {
            Some(parent) => parent.extend(logs),
            None => self.ended = Some(logs),
        }
    }
}

impl<CTX: ContextTr> Inspector<CTX> for CallLogs {
    fn step(&mut self, interp: &mut Interpreter, _context: &mut CTX) {
        self.timer.step(interp);
    }

    fn log(&mut self, _context: &mut CTX, log: Log) {
        let (topics, data) = log.data.split();
        self.add(log.address, topics, data);
    }

    fn call(&mut self, _context: &mut CTX, inputs: &mut CallInputs) -> Option<CallOutcome> {
        self.timer.at_call();
        self.enter();
        if inputs.target_address == super::HISTORY_STORAGE
            || inputs.bytecode_address == super::HISTORY_STORAGE
        {
            self.reads_history |= self.history_unknown;
        }
        let moves = !matches!(
            inputs.scheme,
            CallScheme::DelegateCall | CallScheme::CallCode
        );
        if let (true, Some(value)) = (moves, inputs.transfer_value()) {
            self.transfer(inputs.caller, inputs.target_address, value);
        }
        None
    }

    fn call_end(&mut self, _context: &mut CTX, _inputs: &CallInputs, outcome: &mut CallOutcome) {
        self.timer.at_call();
        self.exit(!outcome.result.is_ok());
    }

    fn create(&mut self, _context: &mut CTX, inputs: &mut CreateInputs) -> Option<CreateOutcome> {
        self.enter();
        // The address is known when the frame is made: the log is put in
        // its place now, its recipient set when the frame ends.
        let at = self.transfer(inputs.caller(), Address::ZERO, inputs.value());
        self.pending_creates.push(at);
        None
    }

    fn create_end(
        &mut self,
        _context: &mut CTX,
        _inputs: &CreateInputs,
        outcome: &mut CreateOutcome,
    ) {
        if let (Some(Some((frame, i))), Some(created)) =
            (self.pending_creates.pop(), outcome.address)
        {
            if let Some(entry) = self.frames.get_mut(frame).and_then(|f| f.get_mut(i)) {
                let mut topics = entry.log.topics().to_vec();
                topics[2] = created.into_word();
                entry.log.data = LogData::new_unchecked(topics, entry.log.data.data.clone());
            }
        }
        self.exit(!outcome.result.is_ok());
    }

    fn selfdestruct(&mut self, contract: Address, target: Address, value: U256) {
        self.transfer(contract, target, value);
    }
}
