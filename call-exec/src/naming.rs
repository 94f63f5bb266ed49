//! Which reads of a call name the wallet: the keys a PIR server must not
//! be able to test for by choosing what its hot tier holds.
//!
//! A call names accounts: its sender, its target, every address its
//! call data holds (an argument, a Multicall3 batch's targets and the
//! holders inside their call data: any 20 bytes of it, packed or in a
//! word), every account a state override names, every address an inner
//! call is given or returns (a word that holds one) and every account a
//! CREATE or CREATE2 makes. Every storage slot of a named account names
//! (a Safe's nonce and owners, a smart account's own storage, whoever
//! calls it and however), and so does a slot the EVM derived from what
//! the call names: a `KECCAK256` whose input holds a named address or a
//! hash derived so before (or a slot up to 2^32 words past one: a
//! struct's member, an array's element, a nested mapping's inner key), a
//! word of the call data that is no number (a slot computed off-chain:
//! `extsload`), or a slot up to 2^32 words past such a hash. An address a
//! derived hash ends in (a CREATE2 account of the wallet's) is named in
//! turn. Call data past 64 KiB is not scanned: every slot of such a call
//! names.
//! Everything else a call reads (a pool's reserves, a token's total
//! supply, a proxy's implementation slot) is shared by everyone who calls
//! the same code, and may come from a tier.
//!
//! Conservative by design: a word that only looks like an address, or a
//! mapping keyed by a number the call carries, is counted as naming, and
//! costs a PIR query; a key that names the wallet and is missed would let
//! the server test for it. Derived hashes are recomputed in every run, so
//! a slot a run needs was derived in that run before it was read.

use std::collections::{BTreeSet, HashSet};

use alloy_primitives::{keccak256, Address, B256, U256};
use revm::bytecode::opcode;
use revm::context::ContextTr;
use revm::interpreter::interpreter_types::{Jumps, MemoryTr, StackTr};
use revm::interpreter::{
    CallInputs, CallOutcome, CreateInputs, CreateOutcome, Interpreter, InterpreterTypes,
};
use revm::Inspector;

use crate::{CallArgs, Need};

/// Most bytes of call data scanned for addresses.
const CALL_DATA_SCANNED: usize = 64 * 1024;
/// Most bytes of a `KECCAK256` input scanned (a mapping key's is 64; an
/// EIP-712 struct's a few hundred): larger inputs (code, blobs of data)
/// derive no slot a wallet reads.
const HASH_INPUT_SCANNED: usize = 64 * 1024;
/// Words past a derived hash that still name (a struct's fields, an
/// array's elements).
const STRUCT_WORDS: u64 = 1 << 32;

/// What a call names: its accounts, the contracts whose every slot names
/// it, and the hashes the EVM derived from them (the inspector fills
/// these in as the run goes).
#[derive(Clone, Debug, Default)]
pub struct Naming {
    accounts: HashSet<Address>,
    derived: BTreeSet<U256>,
    /// Call data past what is scanned: every slot names.
    unscanned: bool,
}

impl Naming {
    /// The accounts `args` names: sender (the zero address when none),
    /// target and every 20-byte window of its call data (but the zero
    /// address: zero padding names no one).
    pub fn of_call(args: &CallArgs) -> Self {
        let mut accounts = HashSet::new();
        let data = &args.input[..args.input.len().min(CALL_DATA_SCANNED)];
        accounts.extend(data.windows(20).map(Address::from_slice));
        accounts.remove(&Address::ZERO);
        // The accounts that sign its delegations are the wallet's own.
        let own: HashSet<Address> = std::iter::once(args.from.unwrap_or_default())
            .chain(args.to)
            .chain(args.authorities())
            .collect();
        accounts.extend(&own);
        accounts.extend(args.authorizations.iter().flatten().map(|a| a.address));
        accounts.extend(args.access_list.iter().map(|item| item.address));
        // The accounts it overrides, and any address their new code,
        // words and moved precompiles hold.
        let mut unscanned = args.input.len() > CALL_DATA_SCANNED;
        for (address, over) in &args.overrides {
            accounts.insert(*address);
            accounts.extend(over.move_precompile_to);
            let code: &[u8] = over.code.as_ref().map_or(&[], |c| c.as_ref());
            unscanned |= code.len() > CALL_DATA_SCANNED;
            let code = &code[..code.len().min(CALL_DATA_SCANNED)];
            accounts.extend(code.windows(20).map(Address::from_slice));
            // Every word's last 20 bytes (a packed word holds an owner
            // behind a timestamp: ERC721A's).
            let words = over.state.iter().chain(&over.state_diff).flatten();
            accounts.extend(words.map(|(_, v)| Address::from_slice(&v[12..])));
        }
        accounts.remove(&Address::ZERO);
        accounts.extend(&own);
        // Words of the call data that are no number or address: slots
        // computed off-chain (`extsload`), or hashes of the wallet's; and
        // every slot its access list names.
        let hash_like = U256::from(1) << 160;
        let listed = args.access_list.iter().flat_map(|item| &item.storage_keys);
        let derived = data
            .windows(32)
            .map(U256::from_be_slice)
            .filter(|w| *w >= hash_like)
            .chain(listed.map(|slot| U256::from_be_bytes(slot.0)))
            .collect();
        Naming {
            accounts,
            derived,
            unscanned,
        }
    }

    /// The addresses among `args`'s ABI arguments (words after the
    /// selector whose first 12 bytes are zero and whose value is past
    /// 2^64: no amount or index), in order, each once, at most `max`: the
    /// accounts a call names that its run is likely to read (a router's
    /// pool, a transfer's recipient), so that they are asked with its
    /// first round.
    pub fn arguments(args: &CallArgs, max: usize) -> Vec<Address> {
        let data = args.input.get(4..).unwrap_or_default();
        let mut out: Vec<Address> = Vec::new();
        for word in data.chunks_exact(32).take(CALL_DATA_SCANNED / 32) {
            match abi_address(word) {
                Some(address) if !out.contains(&address) => {
                    out.push(address);
                    if out.len() == max {
                        break;
                    }
                }
                _ => {}
            }
        }
        out
    }

    /// Whether `account` is one the call names.
    pub fn names_account(&self, account: &Address) -> bool {
        self.accounts.contains(account)
    }

    /// Whether `slot` was derived from what the call names (or lies up to
    /// [`STRUCT_WORDS`] words past such a hash).
    pub fn names_slot(&self, slot: &B256) -> bool {
        self.unscanned || self.within_derived(U256::from_be_bytes(slot.0))
    }

    /// Whether `word` is a derived hash or lies up to [`STRUCT_WORDS`]
    /// words past one.
    fn within_derived(&self, word: U256) -> bool {
        self.derived
            .range(..=word)
            .next_back()
            .is_some_and(|base| word - *base < U256::from(STRUCT_WORDS))
    }

    /// Names the addresses ABI words of `data` hold (an inner call's
    /// arguments, its return data): a word whose first 12 bytes are zero
    /// and whose value is past 2^64 (no amount, index or flag: a `true`
    /// returned names no one).
    fn name_words(&mut self, data: &[u8]) {
        let data = &data[..data.len().min(CALL_DATA_SCANNED)];
        for word in data.chunks_exact(32) {
            if let Some(address) = abi_address(word) {
                self.accounts.insert(address);
            }
        }
    }

    /// Whether a read the run lacked names the call's wallet.
    pub fn names(&self, need: &Need) -> bool {
        match need {
            Need::Account(a) | Need::Code(a) => self.names_account(a),
            Need::Slot { contract, slot } => {
                self.accounts.contains(contract) || self.names_slot(slot)
            }
        }
    }

    /// Notes a `KECCAK256` of `input`: its hash is derived when the input
    /// holds a named address (any 20 bytes; not the zero address, which
    /// every small number's padding holds) or a derived hash (any 32).
    fn hashed(&mut self, input: &[u8]) {
        let named = input.windows(20).any(|w| {
            let address = Address::from_slice(w);
            address != Address::ZERO && self.accounts.contains(&address)
        }) || input
            .windows(32)
            .any(|w| self.within_derived(U256::from_be_slice(w)));
        if named {
            let hash = keccak256(input);
            // A CREATE2 address of the wallet's ends in such a hash.
            self.accounts.insert(Address::from_slice(&hash[12..]));
            self.derived.insert(U256::from_be_bytes(hash.0));
        }
    }
}

/// The address an ABI word (32 bytes) holds: its first 12 bytes zero and
/// its value past 2^64 (an amount, an index or a flag is none).
fn abi_address(word: &[u8]) -> Option<Address> {
    let (high, low) = word.split_at(12);
    let large = low[..12].iter().any(|b| *b != 0);
    (high.iter().all(|b| *b == 0) && large).then(|| Address::from_slice(low))
}

/// The inspector that watches `KECCAK256` for [`Naming`].
pub(crate) struct NamingWatch {
    pub(crate) naming: Naming,
}

impl<CTX: ContextTr, INTR: InterpreterTypes> Inspector<CTX, INTR> for NamingWatch {
    fn call(&mut self, context: &mut CTX, inputs: &mut CallInputs) -> Option<CallOutcome> {
        let input = inputs.input.as_bytes(context);
        self.naming.name_words(input.get(4..).unwrap_or_default());
        None
    }

    fn call_end(&mut self, _context: &mut CTX, _inputs: &CallInputs, outcome: &mut CallOutcome) {
        self.naming.name_words(outcome.output());
    }

    fn create_end(
        &mut self,
        _context: &mut CTX,
        _inputs: &CreateInputs,
        outcome: &mut CreateOutcome,
    ) {
        self.naming.accounts.extend(outcome.address);
    }

    fn step(&mut self, interp: &mut Interpreter<INTR>, _context: &mut CTX) {
        if interp.bytecode.opcode() != opcode::KECCAK256 {
            return;
        }
        let data = interp.stack.data();
        let (Some(offset), Some(size)) = (
            data.len().checked_sub(1).map(|i| data[i]),
            data.len().checked_sub(2).map(|i| data[i]),
        ) else {
            return;
        };
        let (Ok(offset), Ok(size)) = (usize::try_from(offset), usize::try_from(size)) else {
            return; // the opcode fails on its own
        };
        if size == 0 || size > HASH_INPUT_SCANNED {
            return;
        }
        // Memory past its end reads as zeros (the opcode expands it).
        let mut input = vec![0u8; size];
        let have = interp.memory.size();
        if offset < have {
            let end = offset.saturating_add(size).min(have);
            input[..end - offset].copy_from_slice(&interp.memory.slice(offset..end));
        }
        self.naming.hashed(&input);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn word(a: Address) -> [u8; 32] {
        B256::left_padding_from(a.as_slice()).0
    }

    #[test]
    fn a_mapping_slot_of_a_named_address_names_it() {
        let holder = Address::repeat_byte(0x11);
        let spender = Address::repeat_byte(0x22);
        let token = Address::repeat_byte(0x33);
        let mut input = vec![0x70, 0xa0, 0x82, 0x31];
        input.extend(word(holder));
        let args = CallArgs {
            to: Some(token),
            input: input.into(),
            ..Default::default()
        };
        let mut naming = Naming::of_call(&args);
        assert!(naming.names_account(&holder) && naming.names_account(&token));
        assert!(naming.names_account(&Address::ZERO), "the zero sender");
        assert!(!naming.names_account(&spender));
        // balances[holder] at mapping slot 9; allowances[holder][spender].
        let balance_input = [word(holder), B256::with_last_byte(9).0].concat();
        naming.hashed(&balance_input);
        let balance = keccak256(&balance_input);
        assert!(naming.names_slot(&balance));
        let inner = keccak256([word(holder), B256::with_last_byte(10).0].concat());
        naming.hashed(&[word(holder), B256::with_last_byte(10).0].concat());
        let allowance_input = [word(spender), inner.0].concat();
        naming.hashed(&allowance_input);
        assert!(naming.names_slot(&keccak256(&allowance_input)), "nested");
        // A struct's field a few words past the hash.
        let field =
            B256::from((U256::from_be_bytes(balance.0) + U256::from(3)).to_be_bytes::<32>());
        assert!(naming.names_slot(&field));
        // A slot of another holder, a plain slot, the total supply.
        let other = [word(spender), B256::with_last_byte(9).0].concat();
        naming.hashed(&other);
        assert!(!naming.names_slot(&keccak256(&other)));
        assert!(!naming.names_slot(&B256::with_last_byte(2)));
        assert!(!naming.names(&Need::Slot {
            contract: spender,
            slot: B256::with_last_byte(2)
        }));
        // Every slot of the target (a smart account's own storage).
        assert!(naming.names(&Need::Slot {
            contract: token,
            slot: B256::with_last_byte(2)
        }));
        // A slot the call data carries (computed off-chain), and the
        // address a derived hash ends in (CREATE2).
        let precomputed = keccak256(b"a slot of the wallet's");
        let mut data = vec![0xf1, 0x35, 0x5f, 0x2a];
        data.extend(precomputed.0);
        let carried = Naming::of_call(&CallArgs {
            input: data.into(),
            ..Default::default()
        });
        assert!(carried.names_slot(&precomputed));
        assert!(naming.names_account(&Address::from_slice(&balance[12..])));
        assert!(naming.names(&Need::Slot {
            contract: token,
            slot: balance
        }));
        assert!(!naming.names(&Need::Account(spender)));
    }

    #[test]
    fn the_rule_errs_toward_naming() {
        let (holder, token, safe) = (
            Address::repeat_byte(0x11),
            Address::repeat_byte(0x33),
            Address::repeat_byte(0x55),
        );
        // A Safe named only in the call data (Multicall3's aggregate3 of
        // its nonce): every slot of it names, fixed ones included.
        let mut input = vec![0x82, 0xad, 0x56, 0xcb];
        input.extend(word(safe));
        let mut naming = Naming::of_call(&CallArgs {
            to: Some(Address::repeat_byte(0xca)),
            input: input.into(),
            ..Default::default()
        });
        for slot in [B256::with_last_byte(5), B256::repeat_byte(0x36)] {
            assert!(naming.names(&Need::Slot {
                contract: safe,
                slot
            }));
        }
        // users[holder].rewardDebt[token]: the inner mapping sits one word
        // past the hash of the holder's key (a struct's second member),
        // and its key's hash names too.
        naming.accounts.insert(holder);
        let user = [word(holder), B256::with_last_byte(3).0].concat();
        naming.hashed(&user);
        let member = U256::from_be_bytes(keccak256(&user).0) + U256::from(1);
        let debt = [word(token), member.to_be_bytes::<32>()].concat();
        naming.hashed(&debt);
        assert!(naming.names_slot(&keccak256(&debt)));
        // An inner call's address argument or result names; a `true`, an
        // amount or an index does not.
        let mut returned = word(Address::repeat_byte(0x77)).to_vec();
        returned.extend(U256::from(1).to_be_bytes::<32>());
        returned.extend(U256::from(10u64.pow(18)).to_be_bytes::<32>());
        naming.name_words(&returned);
        assert!(naming.names_account(&Address::repeat_byte(0x77)));
        assert!(!naming.names_account(&Address::with_last_byte(1)));
        // An overridden account, and an address its new code holds.
        let mut code = vec![0x73];
        code.extend(Address::repeat_byte(0x99).as_slice());
        let over = crate::overrides::AccountOverride {
            code: Some(code.into()),
            ..Default::default()
        };
        let overridden = Naming::of_call(&CallArgs {
            overrides: vec![(Address::repeat_byte(0x88), over)],
            ..Default::default()
        });
        assert!(overridden.names_account(&Address::repeat_byte(0x88)));
        assert!(overridden.names_account(&Address::repeat_byte(0x99)));
    }

    #[test]
    fn the_arguments_that_are_addresses() {
        let (pool, holder) = (Address::repeat_byte(0x44), Address::repeat_byte(0x11));
        let mut input = vec![1, 2, 3, 4];
        input.extend(word(pool));
        input.extend(U256::from(1000u64).to_be_bytes::<32>());
        input.extend(word(holder));
        input.extend(word(pool));
        input.extend(U256::MAX.to_be_bytes::<32>());
        let args = CallArgs {
            input: input.into(),
            ..Default::default()
        };
        assert_eq!(Naming::arguments(&args, 8), [pool, holder]);
        assert_eq!(Naming::arguments(&args, 1), [pool]);
        assert!(Naming::arguments(&CallArgs::default(), 8).is_empty());
    }
}
