//! A wall-clock limit on a run, as geth's `--rpc.evmtimeout` limits a
//! call: checked every [`CHECK_EVERY`] instructions; once passed, every
//! frame halts at its next instruction, so that the whole transaction
//! unwinds at once, and the run's outcome is the timeout (what it read or
//! lacked meanwhile is thrown away).

use std::time::Instant;

use revm::interpreter::{InstructionResult, Interpreter, InterpreterTypes};

/// Instructions between two looks at the clock (a look costs tens of
/// nanoseconds; this many instructions take microseconds).
const CHECK_EVERY: u32 = 1024;

/// A run's deadline, checked as it steps.
#[derive(Debug, Default)]
pub(crate) struct Timer {
    deadline: Option<Instant>,
    /// Instructions until the next look at the clock.
    until_check: u32,
    passed: bool,
}

impl Timer {
    /// A timer for `deadline` (`None`: none); one already past halts the
    /// run at its first instruction.
    pub(crate) fn new(deadline: Option<Instant>) -> Self {
        Timer {
            deadline,
            until_check: 0,
            passed: false,
        }
    }

    /// Whether the deadline passed during the run.
    pub(crate) fn passed(&self) -> bool {
        self.passed
    }

    /// A frame starts or ends: the clock is read at the next instruction
    /// (a precompile's work, however long, runs no instruction).
    pub(crate) fn at_call(&mut self) {
        self.until_check = 0;
    }

    /// Before each instruction: halts the frame once the deadline passed.
    pub(crate) fn step<I: InterpreterTypes>(&mut self, interp: &mut Interpreter<I>) {
        if !self.passed {
            let Some(deadline) = self.deadline else {
                return;
            };
            if self.until_check > 0 {
                self.until_check -= 1;
                return;
            }
            self.until_check = CHECK_EVERY;
            if Instant::now() < deadline {
                return;
            }
            self.passed = true;
        }
        interp.halt(InstructionResult::OutOfGas);
    }
}
