//! Inner calls: the top-level contract's calls to others, watched so
//! that one whose reads cannot be answered privately is answered on its
//! own, elsewhere, and the rest of a batch stays private.

use std::cell::RefCell;
use std::collections::HashSet;
use std::rc::Rc;

use alloy_primitives::Bytes;
use revm::bytecode::opcode;
use revm::context::ContextTr;
use revm::interpreter::interpreter_types::Jumps;
use revm::interpreter::{
    CallInputs, CallOutcome, CallScheme, Gas, InstructionResult, Interpreter, InterpreterResult,
    InterpreterTypes,
};
use revm::Inspector;

use crate::timer::Timer;
use crate::{InnerAnswer, InnerCall, KnownState, Need, Unanswerable};

/// Most inner calls one run sets apart to be answered elsewhere: past
/// them, the call as a whole is unanswerable here. Each keeps its input,
/// and each is one request elsewhere: a call made of thousands (a loop of
/// calls whose callee reads what cannot be answered) is no batch a wallet
/// sends, and would cost memory and requests without bound.
pub(crate) const MAX_INNER_APART: usize = 64;

/// What a run noted.
#[derive(Debug, Default)]
pub(crate) struct Trace {
    /// Reads the state lacks, each once, in the order met.
    pub(crate) misses: Vec<Need>,
    seen: HashSet<Need>,
    /// The first unanswerable read outside any inner call that could take
    /// it apart.
    pub(crate) unanswerable: Option<Unanswerable>,
    /// Inner calls under which an unanswerable read was made.
    pub(crate) inner_unanswerable: Vec<InnerCall>,
    /// The inner call running, when it could be answered apart.
    current: Option<InnerCall>,
    /// An answer taken elsewhere was put in place of a call.
    substituted: bool,
    /// Gas was observed after that (see [`crate::Unanswerable::GasAfterInner`]).
    pub(crate) gas_after_inner: bool,
    /// The run passed its deadline and was halted.
    pub(crate) timed_out: bool,
}

impl Trace {
    pub(crate) fn miss(&mut self, need: Need) {
        if self.seen.insert(need) {
            self.misses.push(need);
        }
    }

    /// Gas was observed here: it matters only after a substitution.
    fn gas_observed(&mut self) {
        self.gas_after_inner |= self.substituted;
    }

    pub(crate) fn unanswerable(&mut self, why: Unanswerable) {
        // One answer serves every call of the same key (gas aside).
        let key = self.current.as_ref().map(InnerCall::key);
        let known = |c: &InnerCall| Some(c.key()) == key;
        match &self.current {
            Some(_) if self.inner_unanswerable.iter().any(known) => {}
            Some(call) if self.inner_unanswerable.len() < MAX_INNER_APART => {
                self.inner_unanswerable.push(call.clone())
            }
            _ => {
                self.unanswerable.get_or_insert(why);
            }
        }
    }
}

/// Frames of the top-level call ([`Trace`]'s `current`), and the answers
/// taken elsewhere put in place of their calls.
pub(crate) struct InnerCalls<'a> {
    known: &'a KnownState,
    trace: Rc<RefCell<Trace>>,
    /// Frames open: 1 inside the top-level call, 2 inside its calls.
    depth: usize,
    /// Something in the transaction changed state (a storage write, a
    /// creation, value moved): an inner call after it could see other
    /// state than a call of its own would, so it is not taken apart.
    wrote: bool,
    /// Whether the block's header is known: else its facts are
    /// unanswerable.
    header_known: bool,
    /// Whether the blob base fee is known: off mainnet, past zero excess
    /// blob gas, it depends on a blob schedule not known here.
    blob_fee_known: bool,
    /// The run's deadline.
    timer: Timer,
}

/// Opcodes that read a fact only the block's header has.
const HEADER_FACTS: [u8; 5] = [
    opcode::COINBASE,
    opcode::DIFFICULTY,
    opcode::GASLIMIT,
    opcode::BASEFEE,
    opcode::BLOBBASEFEE,
];

/// Frames whose calls are the inner calls: the top-level contract's own.
const INNER_DEPTH: usize = 2;

impl<'a> InnerCalls<'a> {
    pub(crate) fn new(
        known: &'a KnownState,
        trace: Rc<RefCell<Trace>>,
        moves_value: bool,
        header_known: bool,
    ) -> Self {
        InnerCalls {
            known,
            trace,
            depth: 0,
            wrote: moves_value,
            header_known,
            blob_fee_known: true,
            timer: Timer::new(None),
        }
    }

    /// Halts the run once `deadline` passes ([`Trace`]'s `timed_out`).
    pub(crate) fn deadline(mut self, deadline: Option<std::time::Instant>) -> Self {
        self.timer = Timer::new(deadline);
        self
    }

    /// Whether BLOBBASEFEE may be read (else it is unanswerable).
    pub(crate) fn blob_fee_known(mut self, known: bool) -> Self {
        self.blob_fee_known = known;
        self
    }
}

/// The outcome of an inner call answered elsewhere: its data, and no gas
/// spent.
fn answered(answer: &InnerAnswer, inputs: &CallInputs) -> CallOutcome {
    let (result, output) = match answer {
        InnerAnswer::Returned(data) => (InstructionResult::Return, data.clone()),
        InnerAnswer::Reverted(data) => (InstructionResult::Revert, data.clone()),
    };
    CallOutcome::new(
        InterpreterResult::new(result, output, Gas::new(inputs.gas_limit)),
        inputs.return_memory_offset.clone(),
    )
}

fn out_of_gas(result: InstructionResult) -> bool {
    matches!(
        result,
        InstructionResult::OutOfGas
            | InstructionResult::MemoryOOG
            | InstructionResult::MemoryLimitOOG
            | InstructionResult::PrecompileOOG
            | InstructionResult::InvalidOperandOOG
            | InstructionResult::ReentrancySentryOOG
    )
}

impl<CTX: ContextTr, INTR: InterpreterTypes> Inspector<CTX, INTR> for InnerCalls<'_> {
    fn step(&mut self, interp: &mut Interpreter<INTR>, _context: &mut CTX) {
        self.timer.step(interp);
        if self.timer.passed() {
            self.trace.borrow_mut().timed_out = true;
            return;
        }
        let op = interp.bytecode.opcode();
        if op == opcode::GAS {
            self.trace.borrow_mut().gas_observed();
        }
        let unknown_fee = op == opcode::BLOBBASEFEE && !self.blob_fee_known;
        if (!self.header_known && HEADER_FACTS.contains(&op)) || unknown_fee {
            self.trace
                .borrow_mut()
                .unanswerable(Unanswerable::BlockField(op));
        }
        if matches!(
            op,
            opcode::SSTORE
                | opcode::TSTORE
                | opcode::CREATE
                | opcode::CREATE2
                | opcode::SELFDESTRUCT
        ) {
            self.wrote = true;
        }
    }

    fn call(&mut self, context: &mut CTX, inputs: &mut CallInputs) -> Option<CallOutcome> {
        self.timer.at_call();
        self.depth += 1;
        if inputs.transfers_value() && self.depth > 1 {
            self.wrote = true;
        }
        if self.depth != INNER_DEPTH {
            return None;
        }
        let apart = matches!(inputs.scheme, CallScheme::Call | CallScheme::StaticCall)
            && !inputs.transfers_value()
            && !self.wrote;
        if !apart {
            self.trace.borrow_mut().current = None;
            return None;
        }
        let call = InnerCall {
            caller: inputs.caller,
            target: inputs.target_address,
            input: Bytes::copy_from_slice(&inputs.input.as_bytes(context)),
            gas_limit: inputs.gas_limit,
        };
        if let Some(answer) = self.known.inner.get(&call.key()) {
            self.trace.borrow_mut().substituted = true;
            return Some(answered(answer, inputs));
        }
        self.trace.borrow_mut().current = Some(call);
        None
    }

    fn call_end(&mut self, _context: &mut CTX, _inputs: &CallInputs, outcome: &mut CallOutcome) {
        self.timer.at_call();
        // A frame out of gas after a substitution: with the node's gas it
        // might not have run out (or might have, earlier).
        if out_of_gas(outcome.result.result) {
            self.trace.borrow_mut().gas_observed();
        }
        if self.depth == INNER_DEPTH {
            self.trace.borrow_mut().current = None;
        }
        self.depth = self.depth.saturating_sub(1);
    }
}
