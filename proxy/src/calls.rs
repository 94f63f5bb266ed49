//! The `eth_call` shapes whose reads are known before the call runs: the
//! first round's keys of the executor ([`crate::execute`]), so that the
//! common calls settle in one PIR request. The contract's own code decides
//! every answer; these rules only predict what it will read:
//!
//! - a listed getter (`balanceOf(holder)`, or another `f(address)` backed
//!   by a mapping, e.g. `getShares`) of a listed contract: its account and
//!   the mapping's slot;
//! - Multicall3's `getEthBalance(addr)` (the account), its block views,
//!   and its batches (`aggregate`, `tryAggregate`, `aggregate3`,
//!   `aggregate3Value` with zero values, `blockAndAggregate`,
//!   `tryBlockAndAggregate`) whose every inner call is one of these;
//! - the BalanceChecker's `balances(users, tokens)` when every token is
//!   listed (its `balanceOf`) or the zero address (ETH).
//!
//! A call they do not predict still runs: its reads are found in rounds.

use alloy_primitives::{Address, Bytes};
use alloy_sol_types::SolCall;
use ethpir_client::ReadKey;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::tests::{balance_of, plan_of, token};
    use alloy_primitives::U256;
    use serde_json::json;

    fn keys_of(to: Address, data: Vec<u8>) -> Vec<ReadKey> {
        plan_of("eth_call", json!([{"to": to, "data": Bytes::from(data)}]))
            .expect("predicted")
            .keys
    }

    fn slot_of(t: Address, h: &Address) -> ReadKey {
        ReadKey::Slot {
            contract: t,
            slot: token(t.0[0]).balance_slot_of(h),
        }
    }

    #[test]
    fn every_multicall3_batch_form_predicts_its_inner_reads() {
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
        let want = vec![
            ReadKey::Account(MULTICALL3),
            ReadKey::Account(a),
            slot_of(a, &h),
            ReadKey::Account(h),
        ];
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
            IMulticall3::aggregateCall {
                calls: calls.clone(),
            }
            .abi_encode(),
            IMulticall3::blockAndAggregateCall {
                calls: calls.clone(),
            }
            .abi_encode(),
            IMulticall3::tryBlockAndAggregateCall {
                requireSuccess: true,
                calls: calls.clone(),
            }
            .abi_encode(),
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
            assert_eq!(keys_of(MULTICALL3, data), want);
        }
        // A value sent with an inner call, an unlisted target, a view the
        // rules do not know: nothing predicted (the call still runs).
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
    }

    #[test]
    fn the_balance_checker_predicts_listed_tokens_and_eth() {
        let checker = Address::repeat_byte(0xbc);
        let users = vec![Address::repeat_byte(0x11), Address::repeat_byte(0x22)];
        let (a, b) = (Address::repeat_byte(0xaa), Address::repeat_byte(0xbb));
        let tokens = vec![Address::ZERO, a, b];
        let data = IBalanceChecker::balancesCall {
            users: users.clone(),
            tokens: tokens.clone(),
        }
        .abi_encode();
        let keys = keys_of(checker, data);
        assert_eq!(keys[0], ReadKey::Account(checker));
        for u in &users {
            for want in [ReadKey::Account(*u), slot_of(a, u), slot_of(b, u)] {
                assert!(keys.contains(&want), "{want:?}");
            }
        }
        // An unlisted token, or another contract: nothing predicted.
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
    }
}
