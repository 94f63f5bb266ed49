//! What a run touched, as an EIP-2930 access list (`eth_createAccessList`):
//! every account a run reads or calls and every storage slot it reads or
//! writes, less the sender and the precompiles (warm from the start
//! anyway), as reth and anvil list them.

use std::collections::{BTreeMap, BTreeSet, HashSet};

use alloy_primitives::{Address, B256};
use revm::bytecode::opcode;
use revm::interpreter::interpreter_types::{InputsTr, Jumps, StackTr};
use revm::interpreter::{Interpreter, InterpreterTypes};
use revm::Inspector;

/// Accounts and their slots, in order.
pub type Touched = BTreeMap<Address, BTreeSet<B256>>;

pub(crate) struct AccessRecorder {
    excluded: HashSet<Address>,
    pub(crate) touched: Touched,
}

impl AccessRecorder {
    pub(crate) fn new(excluded: impl IntoIterator<Item = Address>) -> Self {
        AccessRecorder {
            excluded: excluded.into_iter().collect(),
            touched: Touched::new(),
        }
    }

    /// With `list` (an access list the run starts with) already listed,
    /// the excluded accounts' entries left out.
    pub(crate) fn seeded(mut self, list: &Touched) -> Self {
        for (address, slots) in list {
            if let Some(listed) = self.account(*address) {
                listed.extend(slots);
            }
        }
        self
    }

    fn account(&mut self, address: Address) -> Option<&mut BTreeSet<B256>> {
        match self.excluded.contains(&address) {
            true => None,
            false => Some(self.touched.entry(address).or_default()),
        }
    }
}

/// The stack's word `n` from the top.
fn peek<S: StackTr>(stack: &S, n: usize) -> Option<B256> {
    let data = stack.data();
    data.len()
        .checked_sub(n + 1)
        .map(|i| B256::from(data[i].to_be_bytes::<32>()))
}

impl<CTX, INTR: InterpreterTypes> Inspector<CTX, INTR> for AccessRecorder {
    fn step(&mut self, interp: &mut Interpreter<INTR>, _context: &mut CTX) {
        match interp.bytecode.opcode() {
            opcode::SLOAD | opcode::SSTORE => {
                let contract = interp.input.target_address();
                if let (Some(slot), Some(slots)) = (peek(&interp.stack, 0), self.account(contract))
                {
                    slots.insert(slot);
                }
            }
            opcode::EXTCODECOPY
            | opcode::EXTCODEHASH
            | opcode::EXTCODESIZE
            | opcode::BALANCE
            | opcode::SELFDESTRUCT => {
                if let Some(word) = peek(&interp.stack, 0) {
                    self.account(Address::from_word(word));
                }
            }
            opcode::DELEGATECALL | opcode::CALL | opcode::STATICCALL | opcode::CALLCODE => {
                if let Some(word) = peek(&interp.stack, 1) {
                    self.account(Address::from_word(word));
                }
            }
            _ => {}
        }
    }
}
