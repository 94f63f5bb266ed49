use alloy_primitives::{address, b256, bytes, Address, Bytes, B256, U256};

use super::*;
use crate::{AccountFacts, HeaderFacts};

const HOLDER: Address = address!("00000000000000000000000000000000000000c0");
const PAYEE: Address = address!("00000000000000000000000000000000000000c1");
const CONTRACT: Address = address!("00000000000000000000000000000000000000aa");

fn base() -> BaseBlock {
    BaseBlock {
        context: BlockContext {
            chain_id: 31337,
            number: 100,
            timestamp: 1_800_000_000,
            header: Some(HeaderFacts {
                base_fee: Some(1_000),
                coinbase: Address::ZERO,
                mix_hash: B256::ZERO,
                difficulty: U256::ZERO,
                gas_limit: 30_000_000,
                parent_hash: b256!(
                    "2222222222222222222222222222222222222222222222222222222222222222"
                ),
                excess_blob_gas: Some(0),
                gas_used: 15_000_000,
                blob_gas_used: Some(0),
            }),
        },
        hash: b256!("3333333333333333333333333333333333333333333333333333333333333333"),
        gas_used: 15_000_000,
        blob_gas_used: Some(0),
    }
}

fn block(number: u64, calls: Vec<SimCall>) -> SimBlock {
    SimBlock {
        number,
        timestamp: 1_800_000_000 + 12 * (number - 100),
        // Past the budget: a call's gas is what is left of the budget.
        gas_limit: 60_000_000,
        calls,
        ..Default::default()
    }
}

fn sim(blocks: Vec<SimBlock>) -> Simulation {
    Simulation {
        base: base(),
        blocks,
        validation: false,
        trace_transfers: true,
        latest: SpecId::PRAGUE,
    }
}

fn account(balance: u64, nonce: u64) -> AccountFacts {
    AccountFacts {
        exists: true,
        balance: U256::from(balance),
        nonce,
        has_code: false,
    }
}

/// Runs until done, every account it lacks absent (the system contracts
/// too) and every word zero.
fn settle(sim: &Simulation, known: &mut KnownState) -> (SimOutcome, usize) {
    for round in 1..10 {
        match simulate(sim, known) {
            SimOutcome::Needs(needs) => {
                for need in needs {
                    match need {
                        Need::Account(a) if known.account(&a).is_none() => known.add_account(
                            a,
                            AccountFacts {
                                exists: false,
                                ..account(0, 0)
                            },
                        ),
                        Need::Slot { contract, slot } => known.add_slot(contract, slot, U256::ZERO),
                        _ => {}
                    }
                }
            }
            other => return (other, round),
        }
    }
    panic!("no end in 10 rounds")
}

fn transfer(value: u64) -> SimCall {
    SimCall {
        from: HOLDER,
        to: Some(PAYEE),
        value: U256::from(value),
        ..Default::default()
    }
}

#[test]
fn value_moves_through_blocks_with_nonces_and_transfer_logs() {
    let mut known = KnownState::whole_state();
    known.add_account(HOLDER, account(5_000, 7));
    let blocks = vec![
        block(101, vec![transfer(1_000), transfer(2_000)]),
        block(102, vec![transfer(2_000)]),
    ];
    let (outcome, rounds) = settle(&sim(blocks), &mut known);
    let SimOutcome::Done(done) = outcome else {
        panic!("{outcome:?}")
    };
    assert!(rounds >= 2, "the payee is read in a second round");
    let calls: Vec<&SimCallDone> = done.iter().flat_map(|b| &b.calls).collect();
    assert_eq!(
        calls.iter().map(|c| c.tx.nonce).collect::<Vec<_>>(),
        [7, 8, 9],
        "nonces from the state, carried across blocks"
    );
    assert!(calls
        .iter()
        .all(|c| c.failure.is_none() && c.gas_used == 21_000));
    // The budget: each call's gas is what is left of it.
    assert_eq!(calls[1].tx.gas, GAS_CAP - 21_000);
    assert_eq!(calls[2].tx.gas, GAS_CAP - 42_000);
    assert!(calls.iter().all(|c| c.gas_capped));
    // traceTransfers: one log each, indexes counted over the block.
    let log = &calls[1].logs[0];
    assert_eq!(log.log.address, TRANSFER_LOG_ADDRESS);
    assert_eq!(log.index, 1);
    assert_eq!(log.log.topics()[2], PAYEE.into_word());
    assert_eq!(calls[2].logs[0].index, 0, "a new block counts from 0");
    // Not in the receipts.
    assert!(calls.iter().all(|c| c.receipt_logs.is_empty()));
    // Without validation, the base fee is 0.
    assert_eq!(done[0].base_fee, 0);
    assert_eq!(done[1].gas_used, 21_000);
}

#[test]
fn a_call_beyond_its_balance_fails_the_request_as_geth_does() {
    let mut known = KnownState::whole_state();
    known.add_account(HOLDER, account(500, 0));
    let (outcome, _) = settle(&sim(vec![block(101, vec![transfer(1_000)])]), &mut known);
    let SimOutcome::Failed { code, message } = outcome else {
        panic!("{outcome:?}")
    };
    assert_eq!(code, -38014, "{message}");
    // An override gives it the balance.
    let mut funded = block(101, vec![transfer(1_000)]);
    funded.overrides = vec![(
        HOLDER,
        AccountOverride {
            balance: Some(U256::from(1_000)),
            ..Default::default()
        },
    )];
    let (outcome, _) = settle(&sim(vec![funded]), &mut known);
    assert!(matches!(outcome, SimOutcome::Done(_)), "{outcome:?}");
}

#[test]
fn explicit_gas_past_the_block_fails_and_a_revert_is_the_calls_own() {
    let mut known = KnownState::whole_state();
    known.add_account(HOLDER, account(0, 0));
    let mut big = transfer(0);
    big.gas = Some(60_000_001);
    let (outcome, _) = settle(&sim(vec![block(101, vec![big])]), &mut known);
    assert!(
        matches!(outcome, SimOutcome::Failed { code: -38015, .. }),
        "{outcome:?}"
    );
    // A contract that reverts with data: the call fails, the request not.
    known.add_account(
        CONTRACT,
        AccountFacts {
            has_code: true,
            ..account(0, 1)
        },
    );
    // PUSH1 0x2a PUSH1 0 MSTORE PUSH1 32 PUSH1 0 REVERT
    known.add_code(CONTRACT, bytes!("602a60005260206000fd"));
    let call = SimCall {
        from: HOLDER,
        to: Some(CONTRACT),
        ..Default::default()
    };
    let (outcome, _) = settle(&sim(vec![block(101, vec![call])]), &mut known);
    let SimOutcome::Done(done) = outcome else {
        panic!("{outcome:?}")
    };
    let call = &done[0].calls[0];
    let Some(CallFailure::Reverted(data)) = &call.failure else {
        panic!("{call:?}")
    };
    assert_eq!(U256::from_be_slice(data), U256::from(42));
    assert!(call.output.is_empty() && call.logs.is_empty());
}

#[test]
fn an_older_blocks_hash_is_unanswerable() {
    let mut known = KnownState::whole_state();
    known.add_account(HOLDER, account(0, 0));
    known.add_account(
        CONTRACT,
        AccountFacts {
            has_code: true,
            ..account(0, 1)
        },
    );
    // PUSH1 50 BLOCKHASH PUSH1 0 MSTORE PUSH1 32 PUSH1 0 RETURN
    known.add_code(CONTRACT, bytes!("60324060005260206000f3"));
    let call = SimCall {
        from: HOLDER,
        to: Some(CONTRACT),
        ..Default::default()
    };
    let (outcome, _) = settle(&sim(vec![block(101, vec![call])]), &mut known);
    assert!(
        matches!(
            outcome,
            SimOutcome::Unanswerable(Unanswerable::BlockHash(50))
        ),
        "{outcome:?}"
    );
}

#[test]
fn a_moved_precompile_runs_at_its_new_address_for_one_block() {
    let mut known = KnownState::whole_state();
    known.add_account(HOLDER, account(0, 0));
    let identity = address!("0000000000000000000000000000000000000004");
    let echo = |to| SimCall {
        from: HOLDER,
        to: Some(to),
        input: bytes!("1234"),
        ..Default::default()
    };
    let mut moved = block(101, vec![echo(PAYEE), echo(identity)]);
    moved.overrides = vec![(
        identity,
        AccountOverride {
            move_precompile_to: Some(PAYEE),
            ..Default::default()
        },
    )];
    let after = block(102, vec![echo(PAYEE), echo(identity)]);
    let (outcome, _) = settle(&sim(vec![moved.clone(), after]), &mut known);
    let SimOutcome::Done(done) = outcome else {
        panic!("{outcome:?}")
    };
    let outputs: Vec<&[u8]> = done
        .iter()
        .flat_map(|b| &b.calls)
        .map(|c| c.output.as_ref())
        .collect();
    // Moved: it echoes at PAYEE, 0x04 is a plain account; the next block
    // has the fork's precompiles again.
    assert_eq!(outputs, [&[0x12, 0x34][..], &[], &[], &[0x12, 0x34]]);
    // Moving what is no precompile is geth's error.
    moved.overrides[0].0 = CONTRACT;
    let (outcome, _) = settle(&sim(vec![moved]), &mut known);
    assert!(
        matches!(outcome, SimOutcome::Failed { code: -32000, .. }),
        "{outcome:?}"
    );
}

#[test]
fn the_base_blocks_own_hash_is_read() {
    let mut known = KnownState::whole_state();
    known.add_account(HOLDER, account(0, 0));
    known.add_account(
        CONTRACT,
        AccountFacts {
            has_code: true,
            ..account(0, 1)
        },
    );
    // PUSH1 100 BLOCKHASH PUSH1 0 MSTORE PUSH1 32 PUSH1 0 RETURN
    known.add_code(
        CONTRACT,
        Bytes::from_static(&[0x60, 100, 0x40, 0x60, 0, 0x52, 0x60, 32, 0x60, 0, 0xf3]),
    );
    let call = SimCall {
        from: HOLDER,
        to: Some(CONTRACT),
        ..Default::default()
    };
    let (outcome, _) = settle(&sim(vec![block(101, vec![call])]), &mut known);
    let SimOutcome::Done(done) = outcome else {
        panic!("{outcome:?}")
    };
    assert_eq!(done[0].calls[0].output.as_ref(), base().hash.as_slice());
}

#[test]
fn a_system_contracts_code_is_never_overridden() {
    let mut known = KnownState::whole_state();
    let mut looped = block(101, Vec::new());
    looped.overrides = vec![(
        BEACON_ROOTS,
        AccountOverride {
            // JUMPDEST PUSH0 JUMP: a loop run by every block's system call.
            code: Some(bytes!("5b5f56")),
            ..Default::default()
        },
    )];
    let (outcome, _) = settle(&sim(vec![looped]), &mut known);
    assert!(matches!(outcome, SimOutcome::Unsupported(_)), "{outcome:?}");
}

#[test]
fn geths_order_and_types_of_refusals() {
    let mut known = KnownState::whole_state();
    known.add_account(HOLDER, account(0, u64::MAX));
    // A creation from a nonce at its most is refused, not reported done.
    let create = SimCall {
        from: HOLDER,
        input: bytes!("00"),
        ..Default::default()
    };
    let (outcome, _) = settle(&sim(vec![block(101, vec![create])]), &mut known);
    assert!(matches!(outcome, SimOutcome::Unsupported(_)), "{outcome:?}");
    // Too little balance and too little gas: geth names the balance.
    known.add_account(HOLDER, account(0, 0));
    let mut poor = transfer(1);
    poor.gas = Some(1);
    let (outcome, _) = settle(&sim(vec![block(101, vec![poor])]), &mut known);
    assert!(
        matches!(outcome, SimOutcome::Failed { code: -38014, .. }),
        "{outcome:?}"
    );
    // Delegations and blobs at once: refused.
    let mut both = transfer(0);
    both.authorizations = Some(Vec::new());
    both.blob_hashes = Some(vec![B256::with_last_byte(1)]);
    let (outcome, _) = settle(&sim(vec![block(101, vec![both])]), &mut known);
    assert!(matches!(outcome, SimOutcome::Unsupported(_)), "{outcome:?}");
    // Another chain's id: geth's -32000.
    let mut elsewhere = transfer(0);
    elsewhere.chain_id = Some(U256::from(1));
    let (outcome, _) = settle(&sim(vec![block(101, vec![elsewhere])]), &mut known);
    assert!(
        matches!(outcome, SimOutcome::Failed { code: -32000, .. }),
        "{outcome:?}"
    );
}

#[test]
fn a_blob_call_without_a_blob_fee_cap_runs_without_validation() {
    let mut known = KnownState::whole_state();
    known.add_account(HOLDER, account(1_000_000_000, 0));
    let mut blob = transfer(0);
    let mut hash = [0u8; 32];
    hash[0] = 1;
    blob.blob_hashes = Some(vec![B256::from(hash)]);
    let (outcome, _) = settle(&sim(vec![block(101, vec![blob])]), &mut known);
    let SimOutcome::Done(done) = outcome else {
        panic!("{outcome:?}")
    };
    assert_eq!(done[0].calls[0].tx.tx_type, 3);
    assert_eq!(done[0].blob_gas_used, GAS_PER_BLOB);
}

#[test]
fn a_blob_fee_the_sender_cannot_pay_is_refused_not_wrapped() {
    let mut known = KnownState::whole_state();
    known.add_account(HOLDER, account(1, 0));
    let mut blob = transfer(0);
    let mut hash = [0u8; 32];
    hash[0] = 1;
    blob.blob_hashes = Some(vec![B256::from(hash)]);
    let (outcome, _) = settle(&sim(vec![block(101, vec![blob])]), &mut known);
    assert!(matches!(outcome, SimOutcome::Unsupported(_)), "{outcome:?}");
}

#[test]
fn a_call_creating_a_system_contract_is_refused() {
    // EIP-4788's deployer, at its first nonce, makes the contract's
    // address (absent on this chain).
    let deployer = address!("0B799C86a49DEeb90402691F1041aa3AF2d3C875");
    assert_eq!(deployer.create(0), BEACON_ROOTS);
    let mut known = KnownState::whole_state();
    known.add_account(deployer, account(0, 0));
    let create = SimCall {
        from: deployer,
        // PUSH1 1 PUSH1 0 RETURN: one byte of code.
        input: bytes!("60016000f3"),
        ..Default::default()
    };
    let (outcome, _) = settle(&sim(vec![block(101, vec![create])]), &mut known);
    assert!(matches!(outcome, SimOutcome::Unsupported(_)), "{outcome:?}");
}
