use alloy_primitives::{address, b256, bytes, Address, Bytes, B256, U256};

use super::*;
use crate::overrides::{AccountOverride, OverrideRules};

fn block() -> BlockContext {
    BlockContext {
        chain_id: 31337,
        number: 100,
        timestamp: 1_800_000_000,
        header: Some(HeaderFacts {
            base_fee: Some(7),
            coinbase: address!("00000000000000000000000000000000000000c0"),
            mix_hash: b256!("1111111111111111111111111111111111111111111111111111111111111111"),
            difficulty: U256::ZERO,
            gas_limit: 30_000_000,
            parent_hash: b256!("2222222222222222222222222222222222222222222222222222222222222222"),
            excess_blob_gas: Some(0),
            gas_used: 0,
            blob_gas_used: Some(0),
        }),
    }
}

const CONTRACT: Address = address!("00000000000000000000000000000000000000aa");
const OTHER: Address = address!("00000000000000000000000000000000000000bb");

fn contract(known: &mut KnownState, at: Address, code: Bytes) {
    known.add_account(
        at,
        AccountFacts {
            exists: true,
            balance: U256::ZERO,
            nonce: 1,
            has_code: true,
        },
    );
    known.add_code(at, code);
}

/// Runs until done, answering reads from `answer` and counting rounds.
fn settle(
    known: &mut KnownState,
    args: &CallArgs,
    answer: impl Fn(&Need, &mut KnownState),
) -> (Outcome, usize) {
    settle_in(&block(), known, args, answer)
}

fn settle_in(
    block: &BlockContext,
    known: &mut KnownState,
    args: &CallArgs,
    answer: impl Fn(&Need, &mut KnownState),
) -> (Outcome, usize) {
    for round in 1..10 {
        match run(block, SpecId::PRAGUE, args, known) {
            Outcome::Needs { reads, inner } if inner.is_empty() => {
                for need in &reads {
                    answer(need, known);
                }
            }
            other => return (other, round),
        }
    }
    panic!("no end in 10 rounds")
}

fn absent(need: &Need, known: &mut KnownState) {
    if let Need::Account(a) = need {
        known.add_account(
            *a,
            AccountFacts {
                exists: false,
                balance: U256::ZERO,
                nonce: 0,
                has_code: false,
            },
        );
    }
}

#[test]
fn a_slot_read_is_gathered_then_answered() {
    // SLOAD(0), return it: PUSH0 SLOAD PUSH0 MSTORE PUSH1 32 PUSH0 RETURN
    let mut known = KnownState::new([CONTRACT]);
    contract(&mut known, CONTRACT, bytes!("5f545f5260205ff3"));
    let args = CallArgs {
        to: Some(CONTRACT),
        ..Default::default()
    };
    let (outcome, rounds) = settle(&mut known, &args, |need, known| match need {
        Need::Slot { contract, slot } => known.add_slot(*contract, *slot, U256::from(42)),
        other => absent(other, known),
    });
    let Outcome::Done(CallResult::Success { output, .. }) = outcome else {
        panic!("{outcome:?}")
    };
    assert_eq!(U256::from_be_slice(&output), U256::from(42));
    assert_eq!(rounds, 2, "the sender, coinbase and slot in one round");
}

#[test]
fn storage_not_held_is_unanswerable_never_zero() {
    let mut known = KnownState::new([]);
    contract(&mut known, CONTRACT, bytes!("5f545f5260205ff3"));
    let args = CallArgs {
        to: Some(CONTRACT),
        ..Default::default()
    };
    let (outcome, _) = settle(&mut known, &args, absent);
    assert_eq!(
        outcome,
        Outcome::Unanswerable(Unanswerable::Storage(CONTRACT))
    );
}

/// Code that calls `OTHER` with no input and returns its first word, or
/// reverts with 0xdead when the call failed.
fn caller_of_other() -> Bytes {
    // PUSH1 32 PUSH0 PUSH0 PUSH0 PUSH20 OTHER GAS STATICCALL
    // ISZERO PUSH1 fail JUMPI PUSH1 32 PUSH0 RETURN
    // fail: JUMPDEST PUSH2 dead PUSH0 MSTORE PUSH1 2 PUSH1 30 REVERT
    let mut code = vec![0x60, 0x20, 0x5f, 0x5f, 0x5f, 0x73];
    code.extend_from_slice(OTHER.as_slice());
    code.extend_from_slice(&[0x5a, 0xfa, 0x15, 0x60, 0x00, 0x57, 0x60, 0x20, 0x5f, 0xf3]);
    let fail = code.len() as u8;
    let at = code.len() - 6;
    code[at] = fail;
    code.extend_from_slice(&[
        0x5b, 0x61, 0xde, 0xad, 0x5f, 0x52, 0x60, 0x02, 0x60, 0x1e, 0xfd,
    ]);
    Bytes::from(code)
}

#[test]
fn an_inner_call_reading_storage_not_held_is_set_apart_and_answered_elsewhere() {
    let mut known = KnownState::new([]);
    contract(&mut known, CONTRACT, caller_of_other());
    contract(&mut known, OTHER, bytes!("5f545f5260205ff3"));
    let args = CallArgs {
        to: Some(CONTRACT),
        ..Default::default()
    };
    let (outcome, _) = settle(&mut known, &args, absent);
    let Outcome::Needs { inner, reads } = outcome else {
        panic!("{outcome:?}")
    };
    assert!(reads.is_empty());
    assert_eq!(inner.len(), 1, "{inner:?}");
    let call = inner[0].clone();
    assert_eq!((call.caller, call.target), (CONTRACT, OTHER));
    assert!(call.input.is_empty());
    // The frame's gas (all but 1/64 of what the caller had), and the
    // node asked with that plus the intrinsic cost; past EIP-7825's cap,
    // the node's own.
    assert!(call.gas_limit > 1_000_000, "{call:?}");
    let small = InnerCall {
        gas_limit: 100_000,
        ..call.clone()
    };
    assert_eq!(small.upstream_gas(), Some(121_000));
    let large = InnerCall {
        gas_limit: 40_000_000,
        ..call.clone()
    };
    assert_eq!(large.upstream_gas(), None);

    // Answered elsewhere: its data in place of the call.
    let mut answered = known.clone();
    let word = B256::with_last_byte(9);
    answered.add_inner(call.clone(), InnerAnswer::Returned(Bytes::from(word.0)));
    let Outcome::Done(CallResult::Success { output, .. }) =
        run(&block(), SpecId::PRAGUE, &args, &answered)
    else {
        panic!("not done")
    };
    assert_eq!(output.as_ref(), word.as_slice());

    // Failed (private-only settings): the caller sees a failed call.
    known.add_inner(call, InnerAnswer::Reverted(Bytes::new()));
    let outcome = run(&block(), SpecId::PRAGUE, &args, &known);
    assert_eq!(
        outcome,
        Outcome::Done(CallResult::Revert {
            output: bytes!("dead"),
            gas_used: match &outcome {
                Outcome::Done(CallResult::Revert { gas_used, .. }) => *gas_used,
                _ => 0,
            }
        })
    );
}

#[test]
fn only_the_block_before_has_a_hash() {
    // PUSH1 n BLOCKHASH PUSH0 MSTORE PUSH1 32 PUSH0 RETURN
    let code = |n: u8| Bytes::from(vec![0x60, n, 0x40, 0x5f, 0x52, 0x60, 0x20, 0x5f, 0xf3]);
    let mut known = KnownState::new([]);
    contract(&mut known, CONTRACT, code(99));
    let args = CallArgs {
        to: Some(CONTRACT),
        ..Default::default()
    };
    let (outcome, _) = settle(&mut known, &args, absent);
    let Outcome::Done(CallResult::Success { output, .. }) = outcome else {
        panic!("{outcome:?}")
    };
    let parent = block().header.unwrap().parent_hash;
    assert_eq!(output.as_ref(), parent.as_slice());
    contract(&mut known, CONTRACT, code(98));
    let (outcome, _) = settle(&mut known, &args, absent);
    assert_eq!(outcome, Outcome::Unanswerable(Unanswerable::BlockHash(98)));
}

#[test]
fn the_sender_must_hold_the_value_sent() {
    let mut known = KnownState::new([]);
    contract(&mut known, CONTRACT, bytes!("00"));
    let args = CallArgs {
        to: Some(CONTRACT),
        value: U256::from(5),
        from: Some(OTHER),
        ..Default::default()
    };
    let (outcome, _) = settle(&mut known, &args, absent);
    assert_eq!(
        outcome,
        Outcome::Done(CallResult::Invalid {
            message: "insufficient funds for gas * price + value".into()
        })
    );
}

#[test]
fn mainnet_forks_by_block_and_time() {
    assert_eq!(spec_for(1, 100, 0, SpecId::OSAKA), SpecId::FRONTIER);
    assert_eq!(spec_for(1, 13_000_000, 0, SpecId::OSAKA), SpecId::LONDON);
    assert_eq!(
        spec_for(1, 20_000_000, 1_720_000_000, SpecId::OSAKA),
        SpecId::CANCUN
    );
    assert_eq!(
        spec_for(1, 23_000_000, 1_800_000_000, SpecId::OSAKA),
        SpecId::OSAKA
    );
    assert_eq!(spec_for(31337, 1, 0, SpecId::PRAGUE), SpecId::PRAGUE);
}

#[test]
fn without_a_header_its_facts_are_unanswerable() {
    // COINBASE PUSH0 MSTORE PUSH1 32 PUSH0 RETURN
    let mut known = KnownState::new([]);
    contract(&mut known, CONTRACT, bytes!("415f5260205ff3"));
    let args = CallArgs {
        to: Some(CONTRACT),
        ..Default::default()
    };
    let headless = BlockContext {
        header: None,
        ..block()
    };
    let (outcome, _) = settle_in(&headless, &mut known, &args, absent);
    assert_eq!(
        outcome,
        Outcome::Unanswerable(Unanswerable::BlockField(0x41))
    );
    // With it, the header's coinbase.
    let (outcome, _) = settle(&mut known, &args, absent);
    let Outcome::Done(CallResult::Success { output, .. }) = outcome else {
        panic!("{outcome:?}")
    };
    assert_eq!(&output[12..], block().header.unwrap().coinbase.as_slice());
}

#[test]
fn the_blob_base_fee_of_an_unknown_schedule_is_unanswerable() {
    // BLOBBASEFEE PUSH0 MSTORE PUSH1 32 PUSH0 RETURN
    let mut known = KnownState::new([]);
    contract(&mut known, CONTRACT, bytes!("4a5f5260205ff3"));
    let args = CallArgs {
        to: Some(CONTRACT),
        ..Default::default()
    };
    // No excess blob gas: the price is 1 whatever the schedule.
    let (outcome, _) = settle(&mut known, &args, absent);
    let Outcome::Done(CallResult::Success { output, .. }) = outcome else {
        panic!("{outcome:?}")
    };
    assert_eq!(U256::from_be_slice(&output), U256::from(1));
    // Some excess, off mainnet: it depends on the chain's schedule.
    let mut excess = block();
    excess.header.as_mut().unwrap().excess_blob_gas = Some(10_000_000);
    let (outcome, _) = settle_in(&excess, &mut known, &args, absent);
    assert_eq!(
        outcome,
        Outcome::Unanswerable(Unanswerable::BlockField(0x4a))
    );
}

#[test]
fn a_traced_run_lists_what_it_touched() {
    // SLOAD(0), return it; the sender is left out of the list.
    let mut known = KnownState::new([CONTRACT]);
    contract(&mut known, CONTRACT, bytes!("5f545f5260205ff3"));
    let args = CallArgs {
        to: Some(CONTRACT),
        from: Some(OTHER),
        ..Default::default()
    };
    settle(&mut known, &args, |need, known| match need {
        Need::Slot { contract, slot } => known.add_slot(*contract, *slot, U256::from(1)),
        other => absent(other, known),
    });
    let none = AccessList::default();
    let (outcome, touched) = run_traced(&block(), SpecId::PRAGUE, &args, &known, &none);
    assert!(matches!(outcome, Outcome::Done(CallResult::Success { .. })));
    let want: Touched = [(CONTRACT, [B256::ZERO].into())].into();
    assert_eq!(touched, want);
    // With that list the slot is warm: the run costs less.
    let gas = |outcome: Outcome| match outcome {
        Outcome::Done(CallResult::Success { gas_used, .. }) => gas_used,
        other => panic!("{other:?}"),
    };
    let listed = listing(&touched);
    let (again, _) = run_traced(&block(), SpecId::PRAGUE, &args, &known, &listed);
    let warm = gas(again);
    assert_ne!(warm, gas(outcome));
    // Each entry is paid, a repeated one too (EIP-2930 counts entries):
    // 2,400 for the account and 1,900 for the slot again.
    let mut twice = listed.clone();
    twice.0.extend(listed.0.iter().cloned());
    let (repeated, _) = run_traced(&block(), SpecId::PRAGUE, &args, &known, &twice);
    assert_eq!(gas(repeated), warm + 2_400 + 1_900);
}

#[test]
fn a_whole_state_reads_any_contracts_storage() {
    // The same read as above, of a contract no list names.
    let mut known = KnownState::whole_state();
    contract(&mut known, CONTRACT, bytes!("5f545f5260205ff3"));
    let args = CallArgs {
        to: Some(CONTRACT),
        ..Default::default()
    };
    let (outcome, _) = settle(&mut known, &args, |need, known| match need {
        Need::Slot { contract, slot } => known.add_slot(*contract, *slot, U256::from(7)),
        other => absent(other, known),
    });
    let Outcome::Done(CallResult::Success { output, .. }) = outcome else {
        panic!("{outcome:?}")
    };
    assert_eq!(U256::from_be_slice(&output), U256::from(7));
}

/// Code that calls `OTHER`, then returns the gas left (a quoter
/// measuring `gasleft()` around a call).
fn gas_after_call() -> Bytes {
    // PUSH0 PUSH0 PUSH0 PUSH0 PUSH20 OTHER GAS STATICCALL POP
    // GAS PUSH0 MSTORE PUSH1 32 PUSH0 RETURN
    let mut code = vec![0x5f, 0x5f, 0x5f, 0x5f, 0x73];
    code.extend_from_slice(OTHER.as_slice());
    code.extend_from_slice(&[0x5a, 0xfa, 0x50, 0x5a, 0x5f, 0x52, 0x60, 0x20, 0x5f, 0xf3]);
    Bytes::from(code)
}

#[test]
fn gas_observed_after_an_answer_taken_elsewhere_is_unanswerable() {
    let mut known = KnownState::new([]);
    contract(&mut known, CONTRACT, gas_after_call());
    contract(&mut known, OTHER, bytes!("5f545f5260205ff3"));
    let args = CallArgs {
        to: Some(CONTRACT),
        ..Default::default()
    };
    let (outcome, _) = settle(&mut known, &args, absent);
    let Outcome::Needs { inner, .. } = outcome else {
        panic!("{outcome:?}")
    };
    known.add_inner(
        inner[0].clone(),
        InnerAnswer::Returned(Bytes::from(B256::ZERO.0)),
    );
    // The node's gas left would count the call's own gas: no answer.
    assert_eq!(
        run(&block(), SpecId::PRAGUE, &args, &known),
        Outcome::Unanswerable(Unanswerable::GasAfterInner)
    );
    // Run here in full (its storage held), the same code is answered.
    let mut held = KnownState::new([OTHER]);
    contract(&mut held, CONTRACT, gas_after_call());
    contract(&mut held, OTHER, bytes!("5f545f5260205ff3"));
    let (outcome, _) = settle(&mut held, &args, |need, known| match need {
        Need::Slot { contract, slot } => known.add_slot(*contract, *slot, U256::from(1)),
        other => absent(other, known),
    });
    assert!(
        matches!(outcome, Outcome::Done(CallResult::Success { .. })),
        "{outcome:?}"
    );
}

/// A run past its deadline is halted and its outcome is the timeout, what
/// it read meanwhile thrown away; without a deadline the same loop runs
/// out of gas as the node's would.
#[test]
fn a_run_past_its_deadline_is_halted() {
    // JUMPDEST PUSH0 JUMP: a loop until the gas is gone.
    let mut known = KnownState::new([CONTRACT]);
    contract(&mut known, CONTRACT, bytes!("5b5f56"));
    let args = CallArgs {
        to: Some(CONTRACT),
        ..Default::default()
    };
    let (outcome, _) = settle(&mut known, &args, absent);
    assert!(
        matches!(&outcome, Outcome::Done(CallResult::Halt { message, .. }) if message == OUT_OF_GAS),
        "{outcome:?}"
    );
    let started = std::time::Instant::now();
    let (outcome, _, _) = run_named_until(
        &block(),
        SpecId::PRAGUE,
        &args,
        &known,
        &args.access_list,
        Some(started),
    );
    assert!(matches!(outcome, Outcome::TimedOut), "{outcome:?}");
    // Reads the run lacked before its deadline (the sender's account) do
    // not outlive it.
    let mut lacking = KnownState::new([CONTRACT]);
    contract(&mut lacking, CONTRACT, bytes!("5b5f56"));
    let (outcome, _, _) = run_named_until(
        &block(),
        SpecId::PRAGUE,
        &args,
        &lacking,
        &args.access_list,
        Some(started),
    );
    assert!(matches!(outcome, Outcome::TimedOut), "{outcome:?}");
}

/// A contract that makes 100 inner calls to OTHER, each a STATICCALL
/// with all its gas (less each time) and one word of memory as input, the
/// counter written into that word first when `distinct`; OTHER reads a
/// block's hash that cannot be answered (BLOCKHASH(NUMBER - 2)).
fn hundred_inner_calls(distinct: bool) -> (KnownState, CallArgs) {
    let mut code = vec![0x5f, 0x5b]; // PUSH0 (i) JUMPDEST, at 1
    if distinct {
        code.extend([0x80, 0x5f, 0x52]); // DUP1 PUSH0 MSTORE
    }
    code.extend([0x5f, 0x5f, 0x60, 0x20, 0x5f]); // retSize retOffset argsSize argsOffset
    code.push(0x73); // PUSH20 OTHER
    code.extend(OTHER.0);
    code.extend([0x5a, 0xfa, 0x50]); // GAS STATICCALL POP
    code.extend([0x60, 0x01, 0x01]); // PUSH1 1 ADD
    code.extend([0x80, 0x60, 0x64, 0x11]); // DUP1 PUSH1 100 GT
    code.extend([0x60, 0x01, 0x57, 0x00]); // PUSH1 1 JUMPI STOP
    let mut known = KnownState::new([CONTRACT]);
    contract(&mut known, CONTRACT, Bytes::from(code));
    // PUSH1 2 NUMBER SUB BLOCKHASH STOP
    contract(&mut known, OTHER, bytes!("600243034000"));
    let args = CallArgs {
        to: Some(CONTRACT),
        ..Default::default()
    };
    (known, args)
}

/// A run that sets apart more inner calls than [`inner::MAX_INNER_APART`]
/// is unanswerable as a whole, never a list without bound.
#[test]
fn inner_calls_set_apart_are_bounded() {
    let (mut known, args) = hundred_inner_calls(true);
    let (outcome, _) = settle(&mut known, &args, absent);
    assert!(
        matches!(outcome, Outcome::Unanswerable(Unanswerable::BlockHash(_))),
        "{outcome:?}"
    );
}

/// The same inner call made again (its gas aside) is set apart once: one
/// answer serves it everywhere, and repeats do not use up the bound.
#[test]
fn an_inner_call_repeated_is_set_apart_once() {
    let (mut known, args) = hundred_inner_calls(false);
    let (outcome, _) = settle(&mut known, &args, absent);
    let Outcome::Needs { reads, inner } = outcome else {
        panic!("{outcome:?}")
    };
    assert!(reads.is_empty());
    assert_eq!(inner.len(), 1, "{inner:?}");
}

/// A creation whose init code asks the identity precompile (0x04) to echo
/// the word 42 and returns what it answered; 0x04 overridden with code
/// that returns 99. Each method runs it with geth's precompiles: a call
/// with the override's (the code runs), an estimate with the fork's (the
/// precompile runs); an access list refuses a precompile moved (geth
/// applies its overrides with no precompile known).
#[test]
fn overrides_follow_each_methods_precompiles() {
    let identity = address!("0000000000000000000000000000000000000004");
    let init = bytes!("602a5f5260205f60205f60045afa5060205ff3");
    let code = AccountOverride {
        code: Some(bytes!("60635f5260205ff3")),
        ..Default::default()
    };
    let run_as = |rules, over: AccountOverride| {
        let args = CallArgs {
            to: None,
            input: init.clone(),
            overrides: vec![(identity, over)],
            override_rules: rules,
            ..Default::default()
        };
        settle(&mut KnownState::new([]), &args, absent).0
    };
    let word = |outcome: Outcome| match outcome {
        Outcome::Done(CallResult::Success { output, .. }) => U256::from_be_slice(&output),
        other => panic!("{other:?}"),
    };
    assert_eq!(
        word(run_as(OverrideRules::Call, code.clone())),
        U256::from(99)
    );
    assert_eq!(
        word(run_as(OverrideRules::Estimate, code.clone())),
        U256::from(42)
    );
    assert_eq!(
        word(run_as(OverrideRules::AccessList, code)),
        U256::from(42)
    );
    let moved = AccountOverride {
        move_precompile_to: Some(OTHER),
        ..Default::default()
    };
    let Outcome::Done(CallResult::Invalid { message }) = run_as(OverrideRules::AccessList, moved)
    else {
        panic!("a move under an access list's rules")
    };
    assert!(message.contains("is not a precompile"), "{message}");
    // A system contract may be overridden for a call (no block runs its
    // system calls), never in a simulated block.
    let system = AccountOverride {
        balance: Some(U256::from(1)),
        ..Default::default()
    };
    let args = CallArgs {
        to: Some(crate::simulate::BEACON_ROOTS),
        overrides: vec![(crate::simulate::BEACON_ROOTS, system)],
        ..Default::default()
    };
    let (outcome, _) = settle(&mut KnownState::new([]), &args, absent);
    assert!(
        matches!(outcome, Outcome::Done(CallResult::Success { .. })),
        "{outcome:?}"
    );
}
