//! The `eth_call`s the proxy answers privately, and their answers encoded
//! exactly as the contract returns them:
//!
//! - a listed getter (`balanceOf(holder)`, or another `f(address)` backed
//!   by a mapping, e.g. `getShares`) of a listed contract;
//! - Multicall3's `getEthBalance(addr)` (the account's balance) and its
//!   address-free views of the block (`getBlockNumber`, `getChainId`,
//!   `getCurrentBlockTimestamp`);
//! - Multicall3's batches (`aggregate`, `tryAggregate`, `aggregate3`,
//!   `aggregate3Value` with zero values, `blockAndAggregate`,
//!   `tryBlockAndAggregate`) whose every inner call is one of the above;
//! - the BalanceChecker's `balances(users, tokens)` when every token is
//!   listed (its `balanceOf`) or the zero address (ETH).
//!
//! Every call also reads the account of each contract it runs: where the
//! account does not exist at that block, a call to it runs no code (the
//! node answers `0x`; inside a batch, success with no return data; the
//! BalanceChecker counts such a token as 0). (An account that exists
//! without code is not told apart until account records carry their code
//! hash.) The inner calls answered never fail, so `allowFailure` and
//! `requireSuccess` never change an answer.
//!
//! Not private (the call goes its usual way): other views of Multicall3
//! (`getBasefee`, `getBlockHash`, coinbase, difficulty, gas limit: the
//! snapshots do not hold them), nested batches, a value sent, anything
//! not canonically encoded.

use std::collections::HashMap;

use alloy_primitives::{Address, Bytes, B256, U256};
use alloy_sol_types::{SolCall, SolValue};
use ethpir_client::{KeyState, ReadKey};
use protocol::storage::PrivateStorage;
use protocol::tokens::{Getter, IBalanceChecker, IMulticall3, MULTICALL3};

/// What may be answered privately at a view: the contracts its base holds
/// (as far as the proxy trusts the catalog) and the BalanceChecker of
/// its chain.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Answerable {
    pub storage: PrivateStorage,
    pub balance_checker: Option<Address>,
}

/// A fact of the view's block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockFact {
    Number,
    ChainId,
    Timestamp,
}

/// One private call: what it returns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Inner {
    /// A listed getter of `target`: the slot's word.
    Getter { target: Address, slot: ReadKey },
    /// Multicall3's `getEthBalance(addr)`.
    EthBalance(Address),
    /// Multicall3's view of the block.
    Block(BlockFact),
}

/// One entry of the BalanceChecker's answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Checked {
    /// A user's ETH balance (token 0x0).
    Eth(Address),
    /// A listed token's `balanceOf(user)`; 0 where the token has no account.
    Token { token: Address, slot: ReadKey },
}

/// The contract's answer, by its shape.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Body {
    /// One call's return data (a getter, `getEthBalance`, a block view).
    Single(Inner),
    /// `Result[]`: `aggregate3`, `aggregate3Value`, `tryAggregate`.
    Results(Vec<Inner>),
    /// `(blockNumber, bytes[])`: `aggregate`.
    Aggregate(Vec<Inner>),
    /// `(blockNumber, blockHash, Result[])`: `blockAndAggregate`,
    /// `tryBlockAndAggregate`.
    BlockAndAggregate(Vec<Inner>),
    /// The BalanceChecker's `uint256[]`.
    Balances(Vec<Checked>),
}

/// A private `eth_call`: the contract called and its answer's plan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CallPlan {
    pub to: Address,
    pub body: Body,
}

/// The plan of `to`'s answer to `data`, when it is private at a view
/// that can answer `what`.
pub fn plan_call(to: Address, data: &[u8], what: &Answerable) -> Option<CallPlan> {
    let body = if to == MULTICALL3 {
        multicall_body(data, &what.storage)?
    } else if Some(to) == what.balance_checker {
        Body::Balances(checker_entries(data, &what.storage)?)
    } else {
        Body::Single(getter(&what.storage, to, data)?)
    };
    Some(CallPlan { to, body })
}

/// Exactly the canonical encoding of a call (a call with trailing bytes
/// runs the same code, but is not what a wallet sends).
fn decode<C: SolCall>(data: &[u8]) -> Option<C> {
    let call = C::abi_decode(data).ok()?;
    (call.abi_encode() == data).then_some(call)
}

/// A listed getter's call of `target`.
fn getter(storage: &PrivateStorage, target: Address, data: &[u8]) -> Option<Inner> {
    let selector: [u8; 4] = data.get(..4)?.try_into().ok()?;
    let entry = storage.getter(&target, selector)?;
    let holder = entry.function.holder_in(data)?;
    Some(Inner::Getter {
        target,
        slot: ReadKey::Slot {
            contract: target,
            slot: entry.balance_slot_of(&holder),
        },
    })
}

/// A call Multicall3 makes to itself, when private.
fn multicall_view(data: &[u8]) -> Option<Inner> {
    if let Some(call) = decode::<IMulticall3::getEthBalanceCall>(data) {
        return Some(Inner::EthBalance(call.addr));
    }
    let fact = if decode::<IMulticall3::getBlockNumberCall>(data).is_some() {
        BlockFact::Number
    } else if decode::<IMulticall3::getChainIdCall>(data).is_some() {
        BlockFact::ChainId
    } else if decode::<IMulticall3::getCurrentBlockTimestampCall>(data).is_some() {
        BlockFact::Timestamp
    } else {
        return None;
    };
    Some(Inner::Block(fact))
}

/// One call inside a Multicall3 batch, when private.
fn inner(storage: &PrivateStorage, target: Address, data: &[u8]) -> Option<Inner> {
    match target == MULTICALL3 {
        true => multicall_view(data),
        false => getter(storage, target, data),
    }
}

fn inners<'a>(
    storage: &PrivateStorage,
    calls: impl IntoIterator<Item = (Address, &'a Bytes)>,
) -> Option<Vec<Inner>> {
    calls
        .into_iter()
        .map(|(target, data)| inner(storage, target, data))
        .collect()
}

/// The answer's plan of a call to Multicall3.
fn multicall_body(data: &[u8], storage: &PrivateStorage) -> Option<Body> {
    if let Some(view) = multicall_view(data) {
        return Some(Body::Single(view));
    }
    let plain = |calls: &[IMulticall3::Call]| {
        inners(storage, calls.iter().map(|c| (c.target, &c.callData)))
    };
    if let Some(call) = decode::<IMulticall3::aggregate3Call>(data) {
        let calls = call.calls.iter().map(|c| (c.target, &c.callData));
        return Some(Body::Results(inners(storage, calls)?));
    }
    if let Some(call) = decode::<IMulticall3::aggregate3ValueCall>(data) {
        if call.calls.iter().any(|c| !c.value.is_zero()) {
            return None;
        }
        let calls = call.calls.iter().map(|c| (c.target, &c.callData));
        return Some(Body::Results(inners(storage, calls)?));
    }
    if let Some(call) = decode::<IMulticall3::tryAggregateCall>(data) {
        return Some(Body::Results(plain(&call.calls)?));
    }
    if let Some(call) = decode::<IMulticall3::aggregateCall>(data) {
        return Some(Body::Aggregate(plain(&call.calls)?));
    }
    if let Some(call) = decode::<IMulticall3::blockAndAggregateCall>(data) {
        return Some(Body::BlockAndAggregate(plain(&call.calls)?));
    }
    if let Some(call) = decode::<IMulticall3::tryBlockAndAggregateCall>(data) {
        return Some(Body::BlockAndAggregate(plain(&call.calls)?));
    }
    None
}

/// The entries of a BalanceChecker `balances(users, tokens)` call whose
/// every token is listed (its `balanceOf`) or the zero address.
fn checker_entries(data: &[u8], storage: &PrivateStorage) -> Option<Vec<Checked>> {
    let call = decode::<IBalanceChecker::balancesCall>(data)?;
    let balance_of = Getter::balance_of().selector();
    let tokens: Vec<Option<&protocol::tokens::TokenEntry>> = call
        .tokens
        .iter()
        .map(|t| match t.is_zero() {
            true => Some(None),
            false => storage.getter(t, balance_of).map(Some),
        })
        .collect::<Option<_>>()?;
    let entries = call.users.iter().flat_map(|user| {
        tokens.iter().map(move |token| match token {
            None => Checked::Eth(*user),
            Some(entry) => Checked::Token {
                token: entry.address,
                slot: ReadKey::Slot {
                    contract: entry.address,
                    slot: entry.balance_slot_of(user),
                },
            },
        })
    });
    Some(entries.collect())
}

impl CallPlan {
    /// Every key the answer needs, each once: the contract called's
    /// account, then each inner call's.
    pub fn keys(&self) -> Vec<ReadKey> {
        let mut keys = vec![ReadKey::Account(self.to)];
        let mut add = |k: ReadKey| {
            if !keys.contains(&k) {
                keys.push(k);
            }
        };
        let inner_keys = |i: &Inner| -> Vec<ReadKey> {
            match i {
                Inner::Getter { target, slot } => vec![ReadKey::Account(*target), *slot],
                Inner::EthBalance(a) => vec![ReadKey::Account(*a)],
                Inner::Block(_) => Vec::new(),
            }
        };
        match &self.body {
            Body::Single(i) => inner_keys(i).into_iter().for_each(&mut add),
            Body::Results(calls) | Body::Aggregate(calls) | Body::BlockAndAggregate(calls) => {
                calls.iter().flat_map(inner_keys).for_each(&mut add)
            }
            Body::Balances(entries) => {
                for e in entries {
                    match e {
                        Checked::Eth(a) => add(ReadKey::Account(*a)),
                        Checked::Token { token, slot } => {
                            add(ReadKey::Account(*token));
                            add(*slot);
                        }
                    }
                }
            }
        }
        keys
    }
}

/// What an answer is made from: each key's state at the view, and the
/// view's block.
pub struct Facts {
    pub states: HashMap<ReadKey, KeyState>,
    pub block: u64,
    pub chain_id: u64,
    /// The block's timestamp, when the snapshots record it.
    pub timestamp: Option<u64>,
}

/// Why an answer cannot be made from what was read.
#[derive(Debug, thiserror::Error)]
pub enum AnswerError {
    #[error("the snapshot does not record block {0}'s timestamp")]
    NoTimestamp(u64),
    #[error("a key of the call was not read")]
    Missing,
}

impl Facts {
    fn exists(&self, account: &Address) -> Result<bool, AnswerError> {
        match self.states.get(&ReadKey::Account(*account)) {
            Some(KeyState::Account(a)) => Ok(!a.absent),
            _ => Err(AnswerError::Missing),
        }
    }

    /// A key's word: a slot's, or an account's balance.
    pub fn word(&self, key: &ReadKey) -> Result<U256, AnswerError> {
        match self.states.get(key) {
            Some(KeyState::Account(a)) => Ok(a.balance),
            Some(KeyState::Slot(s)) => Ok(s.word),
            None => Err(AnswerError::Missing),
        }
    }

    fn fact(&self, fact: BlockFact) -> Result<U256, AnswerError> {
        Ok(U256::from(match fact {
            BlockFact::Number => self.block,
            BlockFact::ChainId => self.chain_id,
            BlockFact::Timestamp => self.timestamp.ok_or(AnswerError::NoTimestamp(self.block))?,
        }))
    }

    /// An inner call's return data: a uint256, or nothing where a getter's
    /// contract has no account (a call to no code returns nothing).
    fn returned(&self, call: &Inner) -> Result<Bytes, AnswerError> {
        let word = match call {
            Inner::Getter { target, slot } => match self.exists(target)? {
                true => self.word(slot)?,
                false => return Ok(Bytes::new()),
            },
            Inner::EthBalance(a) => self.word(&ReadKey::Account(*a))?,
            Inner::Block(fact) => self.fact(*fact)?,
        };
        Ok(Bytes::from(word.abi_encode()))
    }

    fn results(&self, calls: &[Inner]) -> Result<Vec<IMulticall3::Result>, AnswerError> {
        calls
            .iter()
            .map(|c| {
                Ok(IMulticall3::Result {
                    success: true,
                    returnData: self.returned(c)?,
                })
            })
            .collect()
    }

    fn checked(&self, entry: &Checked) -> Result<U256, AnswerError> {
        match entry {
            Checked::Eth(a) => self.word(&ReadKey::Account(*a)),
            Checked::Token { token, slot } => match self.exists(token)? {
                true => self.word(slot),
                false => Ok(U256::ZERO),
            },
        }
    }
}

/// The bytes the node returns for `plan` at the view `facts` describe:
/// `0x` where the contract called has no account.
pub fn answer(plan: &CallPlan, facts: &Facts) -> Result<Bytes, AnswerError> {
    if !facts.exists(&plan.to)? {
        return Ok(Bytes::new());
    }
    let block = U256::from(facts.block);
    let encoded = match &plan.body {
        Body::Single(call) => return facts.returned(call),
        Body::Results(calls) => {
            IMulticall3::aggregate3Call::abi_encode_returns(&facts.results(calls)?)
        }
        Body::Aggregate(calls) => {
            let data = calls
                .iter()
                .map(|c| facts.returned(c))
                .collect::<Result<Vec<_>, _>>()?;
            let ret = IMulticall3::aggregateReturn {
                blockNumber: block,
                returnData: data,
            };
            IMulticall3::aggregateCall::abi_encode_returns(&ret)
        }
        // Multicall3 returns `blockhash(block.number)`: always zero (the
        // EVM knows only the hashes of the blocks before).
        Body::BlockAndAggregate(calls) => {
            let ret = IMulticall3::blockAndAggregateReturn {
                blockNumber: block,
                blockHash: B256::ZERO,
                returnData: facts.results(calls)?,
            };
            IMulticall3::blockAndAggregateCall::abi_encode_returns(&ret)
        }
        Body::Balances(entries) => {
            let balances = entries
                .iter()
                .map(|e| facts.checked(e))
                .collect::<Result<Vec<U256>, _>>()?;
            IBalanceChecker::balancesCall::abi_encode_returns(&balances)
        }
    };
    Ok(Bytes::from(encoded))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::tests::{balance_of, facts, plan_of};
    use crate::storage::StorageRead;
    use protocol::tokens::IERC20;
    use serde_json::json;

    fn call_to(to: Address, data: Vec<u8>) -> StorageRead {
        plan_of("eth_call", json!([{"to": to, "data": Bytes::from(data)}])).expect("private")
    }

    fn answered(read: &StorageRead, absent: impl Fn(&ReadKey) -> bool) -> Bytes {
        let value = |k: &ReadKey| match k {
            ReadKey::Account(a) => U256::from(a.0[0]),
            ReadKey::Slot { slot, .. } => U256::from(slot.0[31]),
        };
        let v = crate::storage::answer(read, &facts(read, value, absent)).unwrap();
        serde_json::from_value(v).unwrap()
    }

    fn no_absent(_: &ReadKey) -> bool {
        false
    }

    #[test]
    fn every_multicall3_batch_form_and_its_views() {
        let h = Address::repeat_byte(0x11);
        let a = Address::repeat_byte(0xaa);
        let eth = Bytes::from(IMulticall3::getEthBalanceCall { addr: h }.abi_encode());
        let number = Bytes::from(IMulticall3::getBlockNumberCall {}.abi_encode());
        let plain = |target, data| IMulticall3::Call {
            target,
            callData: data,
        };
        let calls = vec![
            plain(a, balance_of(h)),
            plain(MULTICALL3, eth.clone()),
            plain(MULTICALL3, number.clone()),
        ];
        let slot =
            |t: Address| U256::from(crate::storage::tests::token(t.0[0]).balance_slot_of(&h).0[31]);
        let want = [slot(a), U256::from(0x11), U256::from(16)];
        let words = |returned: Vec<Bytes>| -> Vec<U256> {
            returned.iter().map(|r| U256::from_be_slice(r)).collect()
        };

        let read = call_to(
            MULTICALL3,
            IMulticall3::aggregateCall {
                calls: calls.clone(),
            }
            .abi_encode(),
        );
        let out =
            IMulticall3::aggregateCall::abi_decode_returns(&answered(&read, no_absent)).unwrap();
        assert_eq!(out.blockNumber, U256::from(16));
        assert_eq!(words(out.returnData), want);

        for data in [
            IMulticall3::blockAndAggregateCall {
                calls: calls.clone(),
            }
            .abi_encode(),
            IMulticall3::tryBlockAndAggregateCall {
                requireSuccess: true,
                calls: calls.clone(),
            }
            .abi_encode(),
        ] {
            let read = call_to(MULTICALL3, data);
            let out =
                IMulticall3::blockAndAggregateCall::abi_decode_returns(&answered(&read, no_absent))
                    .unwrap();
            assert_eq!(
                (out.blockNumber, out.blockHash),
                (U256::from(16), B256::ZERO)
            );
            assert!(out.returnData.iter().all(|r| r.success));
            assert_eq!(
                words(out.returnData.into_iter().map(|r| r.returnData).collect()),
                want
            );
        }

        let call3 = |target, data| IMulticall3::Call3 {
            target,
            allowFailure: false,
            callData: data,
        };
        let value = |target, data, value: u64| IMulticall3::Call3Value {
            target,
            allowFailure: true,
            value: U256::from(value),
            callData: data,
        };
        for data in [
            IMulticall3::tryAggregateCall {
                requireSuccess: false,
                calls: calls.clone(),
            }
            .abi_encode(),
            IMulticall3::aggregate3Call {
                calls: vec![
                    call3(a, balance_of(h)),
                    call3(MULTICALL3, eth.clone()),
                    call3(MULTICALL3, number.clone()),
                ],
            }
            .abi_encode(),
            IMulticall3::aggregate3ValueCall {
                calls: vec![
                    value(a, balance_of(h), 0),
                    value(MULTICALL3, eth.clone(), 0),
                    value(MULTICALL3, number.clone(), 0),
                ],
            }
            .abi_encode(),
        ] {
            let read = call_to(MULTICALL3, data);
            let out = IMulticall3::aggregate3Call::abi_decode_returns(&answered(&read, no_absent))
                .unwrap();
            assert_eq!(words(out.into_iter().map(|r| r.returnData).collect()), want);
        }

        // A value sent with an inner call, an unlisted target, a view the
        // snapshots do not hold: not private.
        let valued = IMulticall3::aggregate3ValueCall {
            calls: vec![value(a, balance_of(h), 1)],
        };
        let unlisted = IMulticall3::aggregateCall {
            calls: vec![plain(Address::repeat_byte(0xdd), balance_of(h))],
        };
        let basefee = IMulticall3::aggregateCall {
            calls: vec![plain(
                MULTICALL3,
                Bytes::from(alloy_primitives::hex!("3e64a696")),
            )],
        };
        for data in [
            valued.abi_encode(),
            unlisted.abi_encode(),
            basefee.abi_encode(),
        ] {
            assert!(plan_of(
                "eth_call",
                json!([{"to": MULTICALL3, "data": Bytes::from(data)}])
            )
            .is_none());
        }

        // A token with no account yet: success, no return data; Multicall3
        // with no account: `0x` for the whole call.
        let read = call_to(
            MULTICALL3,
            IMulticall3::aggregateCall {
                calls: calls.clone(),
            }
            .abi_encode(),
        );
        let token_absent = |k: &ReadKey| *k == ReadKey::Account(a);
        let out =
            IMulticall3::aggregateCall::abi_decode_returns(&answered(&read, token_absent)).unwrap();
        assert!(out.returnData[0].is_empty());
        let multicall_absent = |k: &ReadKey| *k == ReadKey::Account(MULTICALL3);
        assert!(answered(&read, multicall_absent).is_empty());

        // The block's views alone: chain id and timestamp from the view.
        let read = call_to(MULTICALL3, IMulticall3::getChainIdCall {}.abi_encode());
        assert_eq!(
            U256::from_be_slice(&answered(&read, no_absent)),
            U256::from(1)
        );
        let read = call_to(
            MULTICALL3,
            IMulticall3::getCurrentBlockTimestampCall {}.abi_encode(),
        );
        assert_eq!(
            U256::from_be_slice(&answered(&read, no_absent)),
            U256::from(1_700_000_000u64)
        );
    }

    #[test]
    fn the_balance_checker_reads_listed_tokens_and_eth() {
        let checker = Address::repeat_byte(0xbc);
        let users = vec![Address::repeat_byte(0x11), Address::repeat_byte(0x22)];
        let (a, b) = (Address::repeat_byte(0xaa), Address::repeat_byte(0xbb));
        let tokens = vec![Address::ZERO, a, b];
        let data = IBalanceChecker::balancesCall {
            users: users.clone(),
            tokens: tokens.clone(),
        }
        .abi_encode();
        let read = call_to(checker, data);
        assert_eq!(read.keys[0], ReadKey::Account(checker));
        let b_absent = |k: &ReadKey| *k == ReadKey::Account(b);
        let out =
            IBalanceChecker::balancesCall::abi_decode_returns(&answered(&read, b_absent)).unwrap();
        let slot = |t: Address, u: &Address| {
            U256::from(crate::storage::tests::token(t.0[0]).balance_slot_of(u).0[31])
        };
        let want: Vec<U256> = users
            .iter()
            .flat_map(|u| [U256::from(u.0[0]), slot(a, u), U256::ZERO])
            .collect();
        assert_eq!(
            out, want,
            "entry j + tokens.len() * i; a token with no account is 0"
        );
        // An unlisted token, or another contract: not private.
        let unlisted = IBalanceChecker::balancesCall {
            users: users.clone(),
            tokens: vec![Address::repeat_byte(0xdd)],
        };
        assert!(plan_of(
            "eth_call",
            json!([{"to": checker, "data": Bytes::from(unlisted.abi_encode())}])
        )
        .is_none());
        let elsewhere = IBalanceChecker::balancesCall { users, tokens };
        assert!(plan_of(
            "eth_call",
            json!([{"to": a, "data": Bytes::from(elsewhere.abi_encode())}])
        )
        .is_none());
        let _ = IERC20::balanceOfCall::SELECTOR;
    }
}
