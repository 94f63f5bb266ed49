//! The precompiles as geth's state overrides leave them (a call's, or a
//! simulated block's): a precompile whose address is overridden is no
//! precompile there (its address runs the account's code, if any), and
//! one moved (`movePrecompileToAddress`) runs at its new address. The set
//! is made again for every call and every simulated block. The addresses warm at a transaction's start
//! stay the fork's own (geth warms those, not the moved ones).

use std::collections::{HashMap, HashSet};

use alloy_primitives::Address;
use revm::context::{Cfg, ContextTr};
use revm::handler::{EthPrecompiles, PrecompileProvider};
use revm::interpreter::{CallInputs, InterpreterResult};
use revm::primitives::AddressSet;

use crate::SpecId;

/// The fork's precompiles, with a block's moves and removals.
#[derive(Clone, Debug)]
pub(crate) struct BlockPrecompiles {
    eth: EthPrecompiles,
    /// New address → the precompile's own.
    moved: HashMap<Address, Address>,
    /// Addresses overridden: no precompile runs there.
    removed: HashSet<Address>,
}

impl BlockPrecompiles {
    pub(crate) fn new(spec: SpecId) -> Self {
        BlockPrecompiles {
            eth: EthPrecompiles::new(spec),
            moved: HashMap::new(),
            removed: HashSet::new(),
        }
    }

    pub(crate) fn is_precompile(&self, address: &Address) -> bool {
        self.eth.contains(address)
    }

    /// `from`'s precompile no longer runs there.
    pub(crate) fn remove(&mut self, from: Address) {
        self.removed.insert(from);
    }

    /// `from`'s precompile runs at `to` (geth's map: the last move to an
    /// address wins).
    pub(crate) fn relocate(&mut self, from: Address, to: Address) {
        self.moved.insert(to, from);
        self.removed.remove(&to);
    }

    /// The precompile that runs at `address`, if any.
    fn runs_at(&self, address: &Address) -> Option<Address> {
        if let Some(from) = self.moved.get(address) {
            return Some(*from);
        }
        (!self.removed.contains(address) && self.eth.contains(address)).then_some(*address)
    }
}

impl<CTX: ContextTr> PrecompileProvider<CTX> for BlockPrecompiles {
    type Output = InterpreterResult;

    fn set_spec(&mut self, spec: <CTX::Cfg as Cfg>::Spec) -> bool {
        <EthPrecompiles as PrecompileProvider<CTX>>::set_spec(&mut self.eth, spec)
    }

    fn run(
        &mut self,
        context: &mut CTX,
        inputs: &CallInputs,
    ) -> Result<Option<InterpreterResult>, String> {
        match self.runs_at(&inputs.bytecode_address) {
            None => Ok(None),
            Some(at) if at == inputs.bytecode_address => self.eth.run(context, inputs),
            Some(at) => {
                let mut moved = inputs.clone();
                moved.bytecode_address = at;
                self.eth.run(context, &moved)
            }
        }
    }

    fn warm_addresses(&self) -> &AddressSet {
        self.eth.warm_addresses()
    }

    fn contains(&self, address: &Address) -> bool {
        self.runs_at(address).is_some()
    }
}
