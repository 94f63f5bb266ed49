//! Storage reads the proxy answers privately, when the view holds the
//! contract (its base lists it, see `protocol::storage::PrivateStorage`):
//!
//! - `eth_getStorageAt(contract, slot, block)`;
//! - `eth_call` to a listed token whose data is `balanceOf(holder)`: the
//!   holder's entry of the token's balances mapping;
//! - `eth_call` to Multicall3 of `getEthBalance(addr)` (the account's
//!   balance, from its account record);
//! - `eth_call` to Multicall3 of `aggregate3` or `tryAggregate` whose inner
//!   calls are all such `balanceOf` or `getEthBalance` reads (what
//!   MetaMask's balance refresh sends): one PIR batch for all of them.
//!
//! Every call to Multicall3 also reads Multicall3's own account: at a
//! block where no account is there yet (absent from the view: it has no
//! code either) the node answers `0x`, and so does the proxy. (An account
//! that exists without code, e.g. one sent ETH before Multicall3 was
//! deployed at its address, is not told apart until account records carry
//! their code hash.)
//!
//! Anything else, and a call that only partly qualifies (one inner call to
//! an unlisted token, a value sent, state overrides), is not private: it
//! goes upstream under the configured policy, never half private. Answers
//! are ABI-encoded exactly as the contract would return them.

use alloy_eips::BlockId;
use alloy_primitives::{Address, Bytes, B256, U256};
use alloy_sol_types::SolCall;
use ethpir_client::block::selector;
use ethpir_client::{BlockSelector, KeyState, PrivateReader, ReadError, ReadKey};
use protocol::storage::PrivateStorage;
use protocol::tokens::{IMulticall3, IERC20, MULTICALL3};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;

/// The catalog's list for a view, less the tokens whose entry differs
/// from the pinned list's (when there is one): those are read as any
/// unlisted contract's calls.
pub fn checked_list(
    catalog: PrivateStorage,
    pinned: Option<&protocol::tokens::TokenList>,
) -> PrivateStorage {
    let Some(pinned) = pinned else {
        return catalog;
    };
    let (kept, dropped): (Vec<_>, Vec<_>) = catalog.tokens.into_iter().partition(|t| {
        pinned
            .get(t.chain_id, &t.address)
            .is_some_and(|p| p.balance_slot == t.balance_slot && p.layout == t.layout)
    });
    for t in &dropped {
        tracing::debug!(token = %t.address, "the catalog's entry differs from the pinned list's (or is not in it): not read privately");
    }
    PrivateStorage {
        tokens: kept,
        contracts: catalog.contracts,
    }
}

/// How the words read become the answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Shape {
    /// `eth_getStorageAt`: the word, 32 bytes.
    Word,
    /// `balanceOf`: the word as the ABI's `uint256`.
    Balance,
    /// `aggregate3`: `Result[]`, every call a success.
    Aggregate3,
    /// `tryAggregate`: `Result[]`, every call a success.
    TryAggregate,
}

/// A storage read answerable privately: which keys (storage slots, and
/// accounts whose balance a call returns), at which block, and the shape
/// of the answer. A read of Multicall3 has Multicall3's account as its
/// last key: whether it exists at that block.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StorageRead {
    pub block: BlockSelector,
    pub keys: Vec<ReadKey>,
    pub shape: Shape,
    /// The call is to Multicall3: its last key is Multicall3's account.
    pub multicall: bool,
}

impl StorageRead {
    /// The storage slots read (tests, logs).
    pub fn slots(&self) -> Vec<(Address, B256)> {
        self.keys
            .iter()
            .filter_map(|k| match k {
                ReadKey::Slot { contract, slot } => Some((*contract, *slot)),
                ReadKey::Account(_) => None,
            })
            .collect()
    }
}

/// The call object of `eth_call`, as far as a private answer depends on
/// it: fields that would change what the call returns make it ineligible.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct CallObject {
    to: Option<Address>,
    data: Option<Bytes>,
    input: Option<Bytes>,
    value: Option<U256>,
    /// Fields that do not change what a view function returns.
    #[serde(flatten)]
    rest: std::collections::BTreeMap<String, Value>,
}

/// Fields of a call object that leave a `balanceOf`'s answer unchanged.
const INERT_FIELDS: [&str; 9] = [
    "from",
    "gas",
    "gasPrice",
    "maxFeePerGas",
    "maxPriorityFeePerGas",
    "type",
    "chainId",
    "nonce",
    "accessList",
];

impl CallObject {
    /// The call's data, when the call object is one whose answer is the
    /// contract's view (no value sent, no unknown fields).
    fn plain_data(&self) -> Option<&Bytes> {
        if self.value.is_some_and(|v| !v.is_zero()) {
            return None;
        }
        if self
            .rest
            .keys()
            .any(|k| !INERT_FIELDS.contains(&k.as_str()))
        {
            return None;
        }
        match (&self.data, &self.input) {
            (Some(d), Some(i)) if d != i => None,
            (Some(d), _) | (None, Some(d)) => Some(d),
            (None, None) => None,
        }
    }
}

/// The storage read `method(params)` asks for, if it can be answered
/// privately; `listed` gives the contracts the view at a block holds.
pub fn plan(
    method: &str,
    params: Option<&RawValue>,
    listed: impl Fn(&BlockSelector) -> Option<PrivateStorage>,
) -> Option<StorageRead> {
    let params: Vec<Value> = serde_json::from_str(params?.get()).ok()?;
    match method {
        "eth_getStorageAt" => plan_get_storage(&params, &listed),
        "eth_call" => plan_call(&params, &listed),
        _ => None,
    }
}

/// The block parameter at `at` (absent or null: latest).
fn block_at(params: &[Value], at: usize) -> Option<BlockSelector> {
    match params.get(at) {
        None | Some(Value::Null) => Some(BlockSelector::Newest),
        Some(v) => serde_json::from_value::<BlockId>(v.clone())
            .ok()
            .map(|b| selector(Some(b))),
    }
}

fn plan_get_storage(
    params: &[Value],
    listed: &impl Fn(&BlockSelector) -> Option<PrivateStorage>,
) -> Option<StorageRead> {
    if params.len() > 3 {
        return None;
    }
    let contract = ethpir_client::parse_address(params.first()?.as_str()?).ok()?;
    // A slot is a quantity of at most 32 bytes (nodes take both forms).
    let slot: U256 = serde_json::from_value(params.get(1)?.clone()).ok()?;
    let block = block_at(params, 2)?;
    if !listed(&block)?.holds(&contract) {
        return None;
    }
    Some(StorageRead {
        block,
        keys: vec![ReadKey::Slot {
            contract,
            slot: B256::from(slot),
        }],
        shape: Shape::Word,
        multicall: false,
    })
}

fn plan_call(
    params: &[Value],
    listed: &impl Fn(&BlockSelector) -> Option<PrivateStorage>,
) -> Option<StorageRead> {
    // A third parameter (state overrides) changes what storage holds.
    if params.len() > 2 {
        return None;
    }
    let call: CallObject = serde_json::from_value(params.first()?.clone()).ok()?;
    let block = block_at(params, 1)?;
    let to = call.to?;
    let data = call.plain_data()?;
    let storage = listed(&block)?;
    let (mut keys, shape) = match to == MULTICALL3 {
        true => multicall_keys(data, &storage)?,
        false => (vec![balance_slot(&storage, to, data)?], Shape::Balance),
    };
    let multicall = to == MULTICALL3;
    if multicall {
        keys.push(ReadKey::Account(MULTICALL3));
    }
    Some(StorageRead {
        block,
        keys,
        shape,
        multicall,
    })
}

/// The slot holding the balance `data` (a `balanceOf` call) asks `token`
/// for, when `token` is listed.
fn balance_slot(storage: &PrivateStorage, token: Address, data: &[u8]) -> Option<ReadKey> {
    let entry = storage.token(&token)?;
    let call = IERC20::balanceOfCall::abi_decode(data).ok()?;
    // Exactly the canonical encoding: a call with trailing bytes runs the
    // same code, but is not what a wallet sends.
    if call.abi_encode() != data {
        return None;
    }
    Some(ReadKey::Slot {
        contract: token,
        slot: entry.balance_slot_of(&call.holder),
    })
}

/// The account whose balance `data` (Multicall3's `getEthBalance(addr)`,
/// canonically encoded) asks for.
fn eth_balance_key(data: &[u8]) -> Option<ReadKey> {
    let call = IMulticall3::getEthBalanceCall::abi_decode(data).ok()?;
    (call.abi_encode() == data).then_some(ReadKey::Account(call.addr))
}

/// What one call inside a Multicall3 batch reads, when it is private: a
/// listed token's `balanceOf`, or Multicall3's own `getEthBalance`.
fn inner_key(storage: &PrivateStorage, target: Address, data: &[u8]) -> Option<ReadKey> {
    match target == MULTICALL3 {
        true => eth_balance_key(data),
        false => balance_slot(storage, target, data),
    }
}

/// The keys of a call to Multicall3: `getEthBalance`, or a batch whose
/// every call is a `balanceOf` of a listed token or a `getEthBalance`.
fn multicall_keys(data: &[u8], storage: &PrivateStorage) -> Option<(Vec<ReadKey>, Shape)> {
    if let Some(key) = eth_balance_key(data) {
        return Some((vec![key], Shape::Balance));
    }
    let (inner, shape): (Vec<(Address, Bytes)>, Shape) =
        if let Ok(call) = IMulticall3::aggregate3Call::abi_decode(data) {
            let calls = call.calls.into_iter().map(|c| (c.target, c.callData));
            (calls.collect(), Shape::Aggregate3)
        } else if let Ok(call) = IMulticall3::tryAggregateCall::abi_decode(data) {
            let calls = call.calls.into_iter().map(|c| (c.target, c.callData));
            (calls.collect(), Shape::TryAggregate)
        } else {
            return None;
        };
    let keys = inner
        .iter()
        .map(|(target, data)| inner_key(storage, *target, data))
        .collect::<Option<Vec<_>>>()?;
    Some((keys, shape))
}

/// The answer, as the node would give it, to a read whose words are
/// `words` (one per key, in order: a slot's word, an account's balance).
/// A call to Multicall3 at a block where it has no code answers `0x`.
pub fn answer(read: &StorageRead, words: &[U256], multicall_deployed: bool) -> Value {
    if read.multicall && !multicall_deployed {
        return serde_json::to_value(Bytes::new()).expect("hex");
    }
    let uint = |w: &U256| Bytes::from(IERC20::balanceOfCall::abi_encode_returns(w));
    let results = || -> Vec<IMulticall3::Result> {
        words
            .iter()
            .map(|w| IMulticall3::Result {
                success: true,
                returnData: uint(w),
            })
            .collect()
    };
    let bytes = match read.shape {
        Shape::Word => return serde_json::to_value(B256::from(words[0])).expect("hex"),
        Shape::Balance => uint(&words[0]),
        Shape::Aggregate3 => {
            Bytes::from(IMulticall3::aggregate3Call::abi_encode_returns(&results()))
        }
        Shape::TryAggregate => {
            Bytes::from(IMulticall3::tryAggregateCall::abi_encode_returns(&results()))
        }
    };
    serde_json::to_value(bytes).expect("hex")
}

/// A storage read, planned and read ahead with the other storage reads of
/// the same block in a JSON-RPC batch (one PIR request for them all),
/// carried in the call's extensions: its handler neither plans nor reads
/// it again.
#[derive(Clone, Debug)]
pub struct PrefetchedSlots {
    pub read: StorageRead,
    pub results: Vec<Result<KeyState, ReadError>>,
}

/// Reads the slots of several storage reads of one block in one PIR batch:
/// each read with its results, in order.
pub async fn read_together(
    reader: &PrivateReader,
    block: &BlockSelector,
    reads: Vec<StorageRead>,
) -> Vec<PrefetchedSlots> {
    let keys: Vec<ReadKey> = reads.iter().flat_map(|r| r.keys.clone()).collect();
    let mut results = reader.lookup_keys(block, &keys).await.into_iter();
    reads
        .into_iter()
        .map(|read| {
            let results = results.by_ref().take(read.keys.len()).collect();
            PrefetchedSlots { read, results }
        })
        .collect()
}

/// What a private read found: a word per key the answer is made of (a
/// slot's word, an account's balance), whether Multicall3 has code there
/// (for a call to it), and the level the last key was found in.
pub struct Words {
    pub words: Vec<U256>,
    pub multicall_deployed: bool,
    pub snapshot: String,
}

/// The words of `read`, read privately (one PIR batch) unless `ahead`
/// holds its results already; or the first failure.
pub async fn read_words(
    reader: &PrivateReader,
    read: &StorageRead,
    ahead: Option<Vec<Result<KeyState, ReadError>>>,
) -> Result<Words, ReadError> {
    let results = match ahead {
        Some(results) => results,
        None => reader.lookup_keys(&read.block, &read.keys).await,
    };
    let mut states = results
        .into_iter()
        .collect::<Result<Vec<KeyState>, ReadError>>()?;
    let multicall_deployed = match read.multicall {
        true => match states.pop() {
            Some(KeyState::Account(m)) => !m.absent,
            _ => false,
        },
        false => false,
    };
    let snapshot = match states.last() {
        Some(KeyState::Account(a)) => a.snapshot.clone(),
        Some(KeyState::Slot(s)) => s.snapshot.clone(),
        None => String::new(),
    };
    let words = states
        .into_iter()
        .map(|s| match s {
            KeyState::Account(a) => a.balance,
            KeyState::Slot(s) => s.word,
        })
        .collect();
    Ok(Words {
        words,
        multicall_deployed,
        snapshot,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use protocol::tokens::{MappingLayout, SlotIndex, TokenEntry};

    fn token(byte: u8) -> TokenEntry {
        TokenEntry {
            chain_id: 1,
            address: Address::repeat_byte(byte),
            symbol: String::new(),
            balance_slot: SlotIndex::Position(2),
            layout: MappingLayout::Solidity,
            source: "test".into(),
        }
    }

    fn listed() -> PrivateStorage {
        PrivateStorage {
            tokens: vec![token(0xaa), token(0xbb)],
            contracts: vec![Address::repeat_byte(0xcc)],
        }
    }

    fn raw(v: Value) -> Box<RawValue> {
        RawValue::from_string(v.to_string()).unwrap()
    }

    fn plan_of(method: &str, params: Value) -> Option<StorageRead> {
        plan(method, Some(&raw(params)), |_| Some(listed()))
    }

    fn balance_of(holder: Address) -> Bytes {
        IERC20::balanceOfCall { holder }.abi_encode().into()
    }

    #[test]
    fn a_pinned_list_keeps_only_the_tokens_it_agrees_with() {
        let catalog = listed();
        assert_eq!(checked_list(catalog.clone(), None), catalog);
        let mut moved = token(0xbb);
        moved.balance_slot = SlotIndex::Position(9);
        let pinned = protocol::tokens::TokenList {
            tokens: vec![token(0xaa), moved],
        };
        let checked = checked_list(catalog.clone(), Some(&pinned));
        assert_eq!(checked.tokens, vec![token(0xaa)], "0xbb names another slot");
        assert_eq!(checked.contracts, catalog.contracts);
        let holder = Address::repeat_byte(0x11);
        let call =
            serde_json::json!([{"to": Address::repeat_byte(0xbb), "data": balance_of(holder)}]);
        let planned = plan("eth_call", Some(&raw(call)), |_| Some(checked.clone()));
        assert!(
            planned.is_none(),
            "a dropped token's balanceOf is not private"
        );
    }

    #[test]
    fn storage_reads_of_listed_contracts_only() {
        let c = Address::repeat_byte(0xcc);
        let read = plan_of("eth_getStorageAt", serde_json::json!([c, "0x5", "0x10"])).unwrap();
        assert_eq!(read.slots(), vec![(c, B256::with_last_byte(5))]);
        assert_eq!(read.block, BlockSelector::Number(16));
        assert_eq!(read.shape, Shape::Word);
        // A token's storage is held too; an unlisted contract is not.
        assert!(plan_of(
            "eth_getStorageAt",
            serde_json::json!([Address::repeat_byte(0xaa), "0x0"])
        )
        .is_some());
        assert!(plan_of(
            "eth_getStorageAt",
            serde_json::json!([Address::repeat_byte(0xdd), "0x0"])
        )
        .is_none());
        // No view at that block: not private.
        let none = plan(
            "eth_getStorageAt",
            Some(&raw(serde_json::json!([c, "0x0"]))),
            |_| None,
        );
        assert!(none.is_none());
        assert_eq!(
            answer(&read, &[U256::from(7)], false),
            serde_json::json!(format!("0x{:064x}", 7))
        );
    }

    #[test]
    fn balance_of_calls_to_listed_tokens() {
        let holder = Address::repeat_byte(0x11);
        let t = Address::repeat_byte(0xaa);
        let call =
            serde_json::json!([{"to": t, "data": balance_of(holder), "from": holder}, "latest"]);
        let read = plan_of("eth_call", call).unwrap();
        assert_eq!(
            read.slots(),
            vec![(t, token(0xaa).balance_slot_of(&holder))]
        );
        assert_eq!(
            answer(&read, &[U256::from(5)], false),
            serde_json::json!(format!("0x{:064x}", 5))
        );
        // Unlisted token, other function, value sent, overrides, trailing
        // bytes, data and input disagreeing: all go their usual way.
        let unlisted = Address::repeat_byte(0xdd);
        let mut long = balance_of(holder).to_vec();
        long.push(0);
        for params in [
            serde_json::json!([{"to": unlisted, "data": balance_of(holder)}]),
            serde_json::json!([{"to": t, "data": "0x18160ddd"}]),
            serde_json::json!([{"to": t, "data": balance_of(holder), "value": "0x1"}]),
            serde_json::json!([{"to": t, "data": balance_of(holder)}, "latest", {}]),
            serde_json::json!([{"to": t, "data": Bytes::from(long)}]),
            serde_json::json!([{"to": t, "data": balance_of(holder), "input": "0x00"}]),
            serde_json::json!([{"to": t, "data": balance_of(holder), "blobVersionedHashes": []}]),
        ] {
            assert!(plan_of("eth_call", params.clone()).is_none(), "{params}");
        }
        // `input` alone, and the same bytes in both, qualify.
        let both =
            serde_json::json!([{"to": t, "input": balance_of(holder), "data": balance_of(holder)}]);
        assert!(plan_of("eth_call", both).is_some());
    }

    #[test]
    fn multicalls_of_balances_are_one_read_or_none() {
        let h = Address::repeat_byte(0x11);
        let (a, b) = (Address::repeat_byte(0xaa), Address::repeat_byte(0xbb));
        let call3 = |target: Address| IMulticall3::Call3 {
            target,
            allowFailure: true,
            callData: balance_of(h),
        };
        let data = IMulticall3::aggregate3Call {
            calls: vec![call3(a), call3(b)],
        }
        .abi_encode();
        let params = serde_json::json!([{"to": MULTICALL3, "data": Bytes::from(data)}]);
        let read = plan_of("eth_call", params).unwrap();
        assert_eq!(read.shape, Shape::Aggregate3);
        assert_eq!(read.slots().len(), 2);
        assert_eq!(read.keys.last(), Some(&ReadKey::Account(MULTICALL3)));
        let encoded = answer(&read, &[U256::from(1), U256::from(2)], true);
        let bytes: Bytes = serde_json::from_value(encoded).unwrap();
        let back = IMulticall3::aggregate3Call::abi_decode_returns(&bytes).unwrap();
        assert_eq!(back.len(), 2);
        assert!(back.iter().all(|r| r.success));
        assert_eq!(
            IERC20::balanceOfCall::abi_decode_returns(&back[1].returnData).unwrap(),
            U256::from(2)
        );

        let data = IMulticall3::tryAggregateCall {
            requireSuccess: false,
            calls: vec![IMulticall3::Call {
                target: a,
                callData: balance_of(h),
            }],
        }
        .abi_encode();
        let params = serde_json::json!([{"to": MULTICALL3, "data": Bytes::from(data)}]);
        assert_eq!(
            plan_of("eth_call", params).unwrap().shape,
            Shape::TryAggregate
        );

        // MetaMask's refresh: balanceOf and Multicall3's own getEthBalance
        // mixed; each holder's ETH balance is its account's.
        let eth = IMulticall3::Call3 {
            target: MULTICALL3,
            allowFailure: true,
            callData: IMulticall3::getEthBalanceCall { addr: h }
                .abi_encode()
                .into(),
        };
        let data = IMulticall3::aggregate3Call {
            calls: vec![call3(a), eth.clone()],
        }
        .abi_encode();
        let params = serde_json::json!([{"to": MULTICALL3, "data": Bytes::from(data)}]);
        let read = plan_of("eth_call", params).unwrap();
        assert_eq!(
            read.keys[1..],
            [ReadKey::Account(h), ReadKey::Account(MULTICALL3)]
        );
        let words = [U256::from(3), U256::from(4)];
        let bytes: Bytes = serde_json::from_value(answer(&read, &words, true)).unwrap();
        let back = IMulticall3::aggregate3Call::abi_decode_returns(&bytes).unwrap();
        let eth_back = IMulticall3::getEthBalanceCall::abi_decode_returns(&back[1].returnData);
        assert_eq!(eth_back.unwrap(), U256::from(4));
        // Before Multicall3 has code: what the node answers, `0x`.
        assert_eq!(answer(&read, &words, false), serde_json::json!("0x"));
        // getEthBalance alone, and not to Multicall3 (another contract's
        // function of that name): only the first is private.
        let alone = IMulticall3::getEthBalanceCall { addr: h }.abi_encode();
        let params = serde_json::json!([{"to": MULTICALL3, "data": Bytes::from(alone.clone())}]);
        let read = plan_of("eth_call", params).unwrap();
        assert_eq!(
            read.keys,
            [ReadKey::Account(h), ReadKey::Account(MULTICALL3)]
        );
        assert_eq!(read.shape, Shape::Balance);
        let elsewhere = serde_json::json!([{"to": a, "data": Bytes::from(alone)}]);
        assert!(plan_of("eth_call", elsewhere).is_none());

        // One inner call that does not qualify: the whole call goes its
        // usual way.
        let mixed = IMulticall3::aggregate3Call {
            calls: vec![call3(a), call3(Address::repeat_byte(0xdd))],
        }
        .abi_encode();
        let params = serde_json::json!([{"to": MULTICALL3, "data": Bytes::from(mixed)}]);
        assert!(plan_of("eth_call", params).is_none());
    }
}
