//! The state of one run: what is known, and a note of every read that is
//! not (answered as "absent" for the rest of the run).

use std::cell::RefCell;
use std::convert::Infallible;
use std::rc::Rc;

use alloy_primitives::{Address, B256, U256};
use revm::bytecode::Bytecode;
use revm::primitives::{StorageKey, StorageValue, KECCAK_EMPTY};
use revm::state::AccountInfo;
use revm::{Database, DatabaseRef};

use crate::inner::Trace;
use crate::{BlockContext, KnownState, Need, Unanswerable};

pub(crate) struct RoundDb<'a> {
    known: &'a KnownState,
    block: &'a BlockContext,
    trace: Rc<RefCell<Trace>>,
    /// Blocks from the block's own on have the zero hash (a call's).
    no_hash_past_block: bool,
}

impl<'a> RoundDb<'a> {
    pub(crate) fn new(
        known: &'a KnownState,
        block: &'a BlockContext,
        trace: Rc<RefCell<Trace>>,
    ) -> Self {
        RoundDb {
            known,
            block,
            trace,
            no_hash_past_block: false,
        }
    }

    /// Reads the hash of the block's own number and later ones as zero,
    /// as geth's `eth_call` does under a block override of its number.
    pub(crate) fn no_hash_past_block(mut self) -> Self {
        self.no_hash_past_block = true;
        self
    }

    fn miss(&self, need: Need) {
        self.trace.borrow_mut().miss(need);
    }
}

impl Database for RoundDb<'_> {
    type Error = Infallible;

    fn basic(&mut self, address: Address) -> Result<Option<AccountInfo>, Infallible> {
        self.basic_ref(address)
    }

    fn code_by_hash(&mut self, code_hash: B256) -> Result<Bytecode, Infallible> {
        self.code_by_hash_ref(code_hash)
    }

    fn storage(&mut self, address: Address, index: StorageKey) -> Result<StorageValue, Infallible> {
        self.storage_ref(address, index)
    }

    fn block_hash(&mut self, number: u64) -> Result<B256, Infallible> {
        self.block_hash_ref(number)
    }
}

/// The same by shared reference (what a simulation's cache over the
/// round's state reads through): a miss is noted all the same.
impl DatabaseRef for RoundDb<'_> {
    type Error = Infallible;

    fn basic_ref(&self, address: Address) -> Result<Option<AccountInfo>, Infallible> {
        let Some(facts) = self.known.accounts.get(&address) else {
            self.miss(Need::Account(address));
            return Ok(None);
        };
        if !facts.exists {
            return Ok(None);
        }
        let (code_hash, code) = match facts.has_code {
            false => (KECCAK_EMPTY, Bytecode::default()),
            true => match self.known.codes.get(&address) {
                Some((hash, code)) => (*hash, code.clone()),
                None => {
                    self.miss(Need::Code(address));
                    (KECCAK_EMPTY, Bytecode::default())
                }
            },
        };
        Ok(Some(AccountInfo::new(
            facts.balance,
            facts.nonce,
            code_hash,
            code,
        )))
    }

    /// Never asked: every account comes with its code.
    fn code_by_hash_ref(&self, _code_hash: B256) -> Result<Bytecode, Infallible> {
        Ok(Bytecode::default())
    }

    fn storage_ref(&self, address: Address, index: StorageKey) -> Result<StorageValue, Infallible> {
        let slot = B256::from(index);
        if let Some(word) = self.known.slots.get(&(address, slot)) {
            return Ok(*word);
        }
        match self.known.accounts.get(&address) {
            // No account, or one without code: no storage.
            Some(facts) if !facts.exists || !facts.has_code => return Ok(U256::ZERO),
            None => self.miss(Need::Account(address)),
            Some(_) if self.known.holds(&address) => self.miss(Need::Slot {
                contract: address,
                slot,
            }),
            Some(_) => self
                .trace
                .borrow_mut()
                .unanswerable(Unanswerable::Storage(address)),
        }
        Ok(U256::ZERO)
    }

    fn block_hash_ref(&self, number: u64) -> Result<B256, Infallible> {
        // Under a call's block override of the number past the block's
        // own: geth's hash function, which walks back from the block's
        // real header, has none there. (A simulation's blocks past the
        // base have hashes: not known here.)
        if self.no_hash_past_block && number >= self.block.number {
            return Ok(B256::ZERO);
        }
        if let Some(header) = &self.block.header {
            if number.checked_add(1) == Some(self.block.number) {
                return Ok(header.parent_hash);
            }
        }
        self.trace
            .borrow_mut()
            .unanswerable(Unanswerable::BlockHash(number));
        Ok(B256::ZERO)
    }
}
