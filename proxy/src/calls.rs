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

/// Keys in the order first named, each once.
#[derive(Default)]
struct Keys(Vec<ReadKey>);

impl Keys {
    fn add(&mut self, key: ReadKey) {
        if !self.0.contains(&key) {
            self.0.push(key);
        }
    }
}

/// The keys `to`'s answer to `data` reads, each once, when the rules know
/// the call's shape at a view that can answer `what`: the contract
/// called's account, then each inner call's reads.
pub fn first_keys(to: Address, data: &[u8], what: &Answerable) -> Option<Vec<ReadKey>> {
    let mut keys = Keys(vec![ReadKey::Account(to)]);
    if to == MULTICALL3 {
        multicall_keys(data, &what.storage, &mut keys)?;
    } else if Some(to) == what.balance_checker {
        checker_keys(data, &what.storage, &mut keys)?;
    } else {
        getter_keys(&what.storage, to, data, &mut keys)?;
    }
    Some(keys.0)
}

/// Exactly the canonical encoding of a call (a call with trailing bytes
/// runs the same code, but is not what a wallet sends).
fn decode<C: SolCall>(data: &[u8]) -> Option<C> {
    let call = C::abi_decode(data).ok()?;
    (call.abi_encode() == data).then_some(call)
}

/// A listed getter's call of `target`: its account and the mapping's slot.
fn getter_keys(
    storage: &PrivateStorage,
    target: Address,
    data: &[u8],
    keys: &mut Keys,
) -> Option<()> {
    let selector: [u8; 4] = data.get(..4)?.try_into().ok()?;
    let entry = storage.getter(&target, selector)?;
    let holder = entry.function.holder_in(data)?;
    keys.add(ReadKey::Account(target));
    keys.add(ReadKey::Slot {
        contract: target,
        slot: entry.balance_slot_of(&holder),
    });
    Some(())
}

/// A call Multicall3 makes to itself: `getEthBalance` reads the account,
/// its views of the block read nothing.
fn multicall_view_keys(data: &[u8], keys: &mut Keys) -> Option<()> {
    if let Some(call) = decode::<IMulticall3::getEthBalanceCall>(data) {
        keys.add(ReadKey::Account(call.addr));
        return Some(());
    }
    let block_view = decode::<IMulticall3::getBlockNumberCall>(data).is_some()
        || decode::<IMulticall3::getChainIdCall>(data).is_some()
        || decode::<IMulticall3::getCurrentBlockTimestampCall>(data).is_some();
    block_view.then_some(())
}

/// A call to Multicall3: one of its views, or a batch whose every inner
/// call is a listed getter or one of its views.
fn multicall_keys(data: &[u8], storage: &PrivateStorage, keys: &mut Keys) -> Option<()> {
    if multicall_view_keys(data, keys).is_some() {
        return Some(());
    }
    batch_calls(data)?
        .iter()
        .try_for_each(|(target, data)| match *target == MULTICALL3 {
            true => multicall_view_keys(data, keys),
            false => getter_keys(storage, *target, data, keys),
        })
}

/// The inner calls of a Multicall3 batch, every form (`aggregate3Value`
/// only when no value is sent).
fn batch_calls(data: &[u8]) -> Option<Vec<(Address, Bytes)>> {
    let plain =
        |calls: Vec<IMulticall3::Call>| calls.into_iter().map(|c| (c.target, c.callData)).collect();
    if let Some(call) = decode::<IMulticall3::aggregate3Call>(data) {
        return Some(
            call.calls
                .into_iter()
                .map(|c| (c.target, c.callData))
                .collect(),
        );
    }
    if let Some(call) = decode::<IMulticall3::aggregate3ValueCall>(data) {
        if call.calls.iter().any(|c| !c.value.is_zero()) {
            return None;
        }
        return Some(
            call.calls
                .into_iter()
                .map(|c| (c.target, c.callData))
                .collect(),
        );
    }
    if let Some(call) = decode::<IMulticall3::tryAggregateCall>(data) {
        return Some(plain(call.calls));
    }
    if let Some(call) = decode::<IMulticall3::aggregateCall>(data) {
        return Some(plain(call.calls));
    }
    if let Some(call) = decode::<IMulticall3::blockAndAggregateCall>(data) {
        return Some(plain(call.calls));
    }
    if let Some(call) = decode::<IMulticall3::tryBlockAndAggregateCall>(data) {
        return Some(plain(call.calls));
    }
    None
}

/// A BalanceChecker `balances(users, tokens)` call whose every token is
/// listed (its `balanceOf`) or the zero address (the user's account).
fn checker_keys(data: &[u8], storage: &PrivateStorage, keys: &mut Keys) -> Option<()> {
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
    for user in &call.users {
        for token in &tokens {
            match token {
                None => keys.add(ReadKey::Account(*user)),
                Some(entry) => {
                    keys.add(ReadKey::Account(entry.address));
                    keys.add(ReadKey::Slot {
                        contract: entry.address,
                        slot: entry.balance_slot_of(user),
                    });
                }
            }
        }
    }
    Some(())
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
