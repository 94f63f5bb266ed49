//! Storage reads the proxy answers privately, when the view holds the
//! contract (its base lists it, see `protocol::storage::PrivateStorage`):
//!
//! - `eth_getStorageAt(contract, slot, block)`, and
//!   `eth_getStorageValues({contract: [slot, ...], ...}, block)`;
//! - the `eth_call`s of [`crate::calls`]: listed getters (`balanceOf`,
//!   `getShares`, ...), Multicall3's `getEthBalance` and block views and
//!   its batches of them (MetaMask's balance refresh), the BalanceChecker
//!   (its token detection): one PIR batch for all the keys of a call.
//!
//! Anything else, and a call that only partly qualifies (one inner call to
//! an unlisted token, a value sent, state overrides), is not private: it
//! goes upstream under the configured policy, never half private. Answers
//! are ABI-encoded exactly as the contract would return them.

use std::collections::{BTreeMap, HashMap};

use alloy_eips::BlockId;
use alloy_primitives::{Address, Bytes, B256, U256};
use ethpir_client::block::selector;
use ethpir_client::{BlockSelector, KeyState, PrivateReader, ReadError, ReadKey};
use protocol::storage::PrivateStorage;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;

use crate::calls::{self, Answerable};
use crate::error::ProxyError;

/// The catalog's list for a view, less the getters whose entry is not
/// the trusted list's: those are read as any unlisted contract's calls.
pub fn checked_list(
    catalog: PrivateStorage,
    pinned: &protocol::tokens::TokenList,
) -> PrivateStorage {
    let (kept, dropped): (Vec<_>, Vec<_>) = catalog.tokens.into_iter().partition(|t| {
        pinned
            .getter(t.chain_id, &t.address, t.function.selector())
            .is_some_and(|p| p.balance_slot == t.balance_slot && p.layout == t.layout)
    });
    for t in &dropped {
        tracing::debug!(token = %t.address, function = %t.function, "the catalog's entry differs from the pinned list's (or is not in it): not read privately");
    }
    PrivateStorage {
        tokens: kept,
        contracts: catalog.contracts,
        whole_state: catalog.whole_state,
    }
}

/// What a private read answers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answer {
    /// `eth_getStorageAt`: the slot's word, 32 bytes.
    Word(ReadKey),
    /// `eth_getStorageValues`: each contract's words, in the order asked.
    Words(Vec<(Address, Vec<ReadKey>)>),
    /// `eth_call`: what the contract returns (it runs in the executor;
    /// the keys are its first round's).
    Call,
}

/// A read answerable privately: which keys (storage slots, accounts), at
/// which block, and how the answer is made of them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StorageRead {
    pub block: BlockSelector,
    /// Every key the answer needs, each once.
    pub keys: Vec<ReadKey>,
    pub answer: Answer,
}

impl StorageRead {
    /// The storage slots read (tests, logs).
    pub fn slots(&self) -> Vec<(Address, B256)> {
        self.keys
            .iter()
            .filter_map(|k| match k {
                ReadKey::Slot { contract, slot } => Some((*contract, *slot)),
                ReadKey::Account(_) | ReadKey::HighPart { .. } => None,
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

/// Fields of a call object that leave a view's answer unchanged.
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
/// privately; `answerable` says what the view at a block can answer.
pub fn plan(
    method: &str,
    params: Option<&RawValue>,
    answerable: impl Fn(&BlockSelector) -> Option<Answerable>,
) -> Option<StorageRead> {
    let params: Vec<Value> = serde_json::from_str(params?.get()).ok()?;
    match method {
        "eth_getStorageAt" | "eth_getStorageValues" => match storage_args(method, &params).ok()? {
            StorageArgs::At {
                contract,
                slot,
                block,
            } => plan_get_storage(contract, slot, block, &answerable),
            StorageArgs::Values { asked, block } => {
                plan_get_storage_values(asked, block, &answerable)
            }
        },
        "eth_call" => plan_eth_call(&params, &answerable),
        _ => None,
    }
}

/// geth's reading of a storage key (`eth_getStorageAt`'s second
/// parameter): hex, `0x` optional, an odd length padded, at most 32
/// bytes. Its error is geth's words.
pub fn storage_key(text: &str) -> Result<B256, String> {
    let digits = text
        .strip_prefix("0x")
        .or_else(|| text.strip_prefix("0X"))
        .unwrap_or(text);
    let padded = match digits.len() % 2 {
        1 => format!("0{digits}"),
        _ => digits.to_string(),
    };
    if padded.len() > 64 {
        return Err(format!(
            "storage key too long (want at most 32 bytes): {text:?}"
        ));
    }
    // (The hex decoder would take a second `0x`; geth does not.)
    let bytes = match padded.bytes().all(|b| b.is_ascii_hexdigit()) {
        true => alloy_primitives::hex::decode(&padded).ok(),
        false => None,
    };
    let bytes = bytes.ok_or_else(|| format!("invalid hex in storage key: {text:?}"))?;
    Ok(B256::left_padding_from(&bytes))
}

/// What the node refuses in a storage read's parameters, refused here
/// with its code ([`storage_args`]'s refusal), so that nothing is read or
/// sent for it.
pub fn refused_params(method: &str, params: Option<&RawValue>) -> Option<ProxyError> {
    if !matches!(method, "eth_getStorageAt" | "eth_getStorageValues") {
        return None;
    }
    let Ok(params) = serde_json::from_str::<Vec<Value>>(params.map_or("[]", RawValue::get)) else {
        let why = "params must be an array of the method's arguments";
        return Some(ProxyError::BadParams(why.into()));
    };
    storage_args(method, &params).err()
}

/// A storage read's arguments, as geth reads them.
enum StorageArgs {
    /// `eth_getStorageAt(contract, slot, block)`.
    At {
        contract: Address,
        slot: B256,
        block: BlockSelector,
    },
    /// `eth_getStorageValues({contract: [slot, ...], ...}, block)`.
    Values {
        asked: BTreeMap<Address, Vec<B256>>,
        block: BlockSelector,
    },
}

/// `eth_getStorageAt`'s or `eth_getStorageValues`'s arguments (any other
/// method is read as the latter), or geth's refusal of them (-32602;
/// -38026 past its slot bound): not the method's number of arguments, an
/// address or a key that is not one, a block that is not one, no slot or
/// more than [`MAX_STORAGE_VALUES`].
fn storage_args(method: &str, params: &[Value]) -> Result<StorageArgs, ProxyError> {
    let invalid = |why: String| Err(ProxyError::BadParams(why));
    let (arguments, block_at_index) = match method {
        "eth_getStorageAt" => (2..=3, 2),
        _ => (1..=2, 1),
    };
    if !arguments.contains(&params.len()) {
        return invalid(format!("{} arguments, want {arguments:?}", params.len()));
    }
    let Some(block) = block_at(params, block_at_index) else {
        return invalid(format!("invalid argument {block_at_index}: not a block"));
    };
    if method == "eth_getStorageAt" {
        let contract = params[0]
            .as_str()
            .ok_or_else(|| "an address is a hex string".to_string())
            .and_then(ethpir_client::parse_address);
        let contract = match contract {
            Ok(contract) => contract,
            Err(why) => return invalid(format!("invalid argument 0: {why}")),
        };
        let Some(key) = params[1].as_str() else {
            return invalid("invalid argument 1: a storage key is a hex string".into());
        };
        let slot = storage_key(key).map_err(ProxyError::BadParams)?;
        return Ok(StorageArgs::At {
            contract,
            slot,
            block,
        });
    }
    let asked: BTreeMap<Address, Vec<B256>> = match serde_json::from_value(params[0].clone()) {
        Ok(asked) => asked,
        Err(e) => return invalid(format!("invalid argument 0: {e}")),
    };
    match slot_count_refusal(asked.values().map(Vec::len).sum()) {
        Some(refusal) => Err(refusal),
        None => Ok(StorageArgs::Values { asked, block }),
    }
}

/// geth's bounds on `eth_getStorageValues`: one slot at least, at most
/// [`MAX_STORAGE_VALUES`] in all.
fn slot_count_refusal(slots: usize) -> Option<ProxyError> {
    match slots {
        0 => Some(ProxyError::BadParams("empty request".into())),
        n if n > MAX_STORAGE_VALUES => Some(ProxyError::LimitExceeded(format!(
            "too many slots (max {MAX_STORAGE_VALUES})"
        ))),
        _ => None,
    }
}

/// The block parameter at `at` (absent or null: latest).
pub(crate) fn block_at(params: &[Value], at: usize) -> Option<BlockSelector> {
    match params.get(at) {
        None | Some(Value::Null) => Some(BlockSelector::Newest),
        Some(v) => serde_json::from_value::<BlockId>(v.clone())
            .ok()
            .map(|b| selector(Some(b))),
    }
}

/// `eth_getStorageAt` of a contract the view at `block` holds.
fn plan_get_storage(
    contract: Address,
    slot: B256,
    block: BlockSelector,
    answerable: &impl Fn(&BlockSelector) -> Option<Answerable>,
) -> Option<StorageRead> {
    if !answerable(&block)?.storage.holds(&contract) {
        return None;
    }
    let key = ReadKey::Slot { contract, slot };
    Some(StorageRead {
        block,
        keys: vec![key],
        answer: Answer::Word(key),
    })
}

/// Slots `eth_getStorageValues` may ask at once (geth's bound).
const MAX_STORAGE_VALUES: usize = 1024;

/// `eth_getStorageValues` (its slots within geth's bounds, each a
/// 32-byte word: [`storage_args`]) where every contract is held.
fn plan_get_storage_values(
    asked: BTreeMap<Address, Vec<B256>>,
    block: BlockSelector,
    answerable: &impl Fn(&BlockSelector) -> Option<Answerable>,
) -> Option<StorageRead> {
    let storage = answerable(&block)?.storage;
    if !asked.keys().all(|c| storage.holds(c)) {
        return None;
    }
    let words: Vec<(Address, Vec<ReadKey>)> = asked
        .into_iter()
        .map(|(contract, slots)| {
            let keys = slots
                .into_iter()
                .map(|slot| ReadKey::Slot { contract, slot });
            (contract, keys.collect())
        })
        .collect();
    // Every key once, first asked first.
    let mut seen = std::collections::HashSet::new();
    let keys: Vec<ReadKey> = words
        .iter()
        .flat_map(|(_, k)| k.iter().copied())
        .filter(|k| seen.insert(*k))
        .collect();
    Some(StorageRead {
        block,
        keys,
        answer: Answer::Words(words),
    })
}

fn plan_eth_call(
    params: &[Value],
    answerable: &impl Fn(&BlockSelector) -> Option<Answerable>,
) -> Option<StorageRead> {
    // A third parameter (state overrides) changes what storage holds.
    if params.len() > 2 {
        return None;
    }
    let call: CallObject = serde_json::from_value(params.first()?.clone()).ok()?;
    let block = block_at(params, 1)?;
    let to = call.to?;
    let data = call.plain_data()?;
    let keys = calls::first_keys(to, data, &answerable(&block)?)?;
    Some(StorageRead {
        block,
        keys,
        answer: Answer::Call,
    })
}

/// The answer to `eth_getStorageAt`, as the node gives it: the word, 32
/// bytes. (An `eth_call` is executed, never answered from its plan.)
pub fn answer(read: &StorageRead, found: &Found) -> Result<Value, ReadError> {
    let word = |key: &ReadKey| match found.states.get(key) {
        Some(KeyState::Slot(s)) => Ok(serde_json::to_value(B256::from(s.word)).expect("hex")),
        _ => Err(ReadError::Backend("the slot was not read".into())),
    };
    match &read.answer {
        Answer::Word(key) => word(key),
        // As geth: keyed by the contract in lower case.
        Answer::Words(words) => words
            .iter()
            .map(|(contract, keys)| {
                let values = keys.iter().map(word).collect::<Result<Vec<_>, _>>()?;
                Ok((format!("{contract:#x}"), Value::Array(values)))
            })
            .collect::<Result<serde_json::Map<_, _>, _>>()
            .map(Value::Object),
        Answer::Call => Err(ReadError::Backend(
            "an eth_call is executed, not planned".into(),
        )),
    }
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

/// What a private read found, and the level its first key was found in.
pub struct Found {
    pub states: HashMap<ReadKey, KeyState>,
    pub snapshot: String,
}

/// The keys of `read`, read privately (one PIR batch) unless `ahead`
/// holds their results already; or the first failure.
pub async fn read_facts(
    reader: &PrivateReader,
    read: &StorageRead,
    ahead: Option<Vec<Result<KeyState, ReadError>>>,
) -> Result<Found, ReadError> {
    let results = match ahead {
        Some(results) => results,
        None => reader.lookup_keys(&read.block, &read.keys).await,
    };
    let states = results
        .into_iter()
        .collect::<Result<Vec<KeyState>, ReadError>>()?;
    let snapshot = match states.first() {
        Some(state) => state.snapshot().to_string(),
        None => return Err(ReadError::Backend("a read of no keys".into())),
    };
    let states = read.keys.iter().copied().zip(states).collect();
    Ok(Found { states, snapshot })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use alloy_sol_types::SolCall;
    use ethpir_client::SlotState;
    use protocol::tokens::{
        Getter, IMulticall3, MappingLayout, SlotIndex, TokenEntry, IERC20, MULTICALL3,
    };

    pub fn token(byte: u8) -> TokenEntry {
        TokenEntry {
            chain_id: 1,
            address: Address::repeat_byte(byte),
            symbol: String::new(),
            function: Getter::balance_of(),
            balance_slot: SlotIndex::Position(2),
            layout: MappingLayout::Solidity,
            source: "test".into(),
        }
    }

    pub fn listed() -> Answerable {
        let mut shares = token(0xee);
        shares.function = "getShares(address)".parse().unwrap();
        shares.balance_slot = SlotIndex::Position(3);
        Answerable {
            storage: PrivateStorage {
                tokens: vec![token(0xaa), token(0xbb), shares],
                contracts: vec![Address::repeat_byte(0xcc)],
                ..Default::default()
            },
            balance_checker: Some(Address::repeat_byte(0xbc)),
        }
    }

    fn raw(v: Value) -> Box<RawValue> {
        RawValue::from_string(v.to_string()).unwrap()
    }

    pub fn plan_of(method: &str, params: Value) -> Option<StorageRead> {
        plan(method, Some(&raw(params)), |_| Some(listed()))
    }

    pub fn balance_of(holder: Address) -> Bytes {
        IERC20::balanceOfCall { holder }.abi_encode().into()
    }

    /// What a read of `read`'s keys found: each slot's word `value(key)`.
    pub fn found(read: &StorageRead, value: impl Fn(&ReadKey) -> U256) -> Found {
        let states = read
            .keys
            .iter()
            .filter_map(|k| {
                let ReadKey::Slot { .. } = k else { return None };
                let state = KeyState::Slot(SlotState {
                    word: value(k),
                    snapshot: "s".into(),
                    block: 16,
                    absent: false,
                    low_part: false,
                });
                Some((*k, state))
            })
            .collect();
        Found {
            states,
            snapshot: "s".into(),
        }
    }

    #[test]
    fn a_pinned_list_keeps_only_the_getters_it_agrees_with() {
        let catalog = listed().storage;
        let same = protocol::tokens::TokenList {
            tokens: catalog.tokens.clone(),
            ..Default::default()
        };
        assert_eq!(checked_list(catalog.clone(), &same), catalog);
        let none = checked_list(catalog.clone(), &Default::default());
        assert!(none.tokens.is_empty(), "nothing trusted, nothing private");
        let mut moved = token(0xbb);
        moved.balance_slot = SlotIndex::Position(9);
        let pinned = protocol::tokens::TokenList {
            tokens: vec![token(0xaa), moved],
            ..Default::default()
        };
        let checked = checked_list(catalog.clone(), &pinned);
        assert_eq!(
            checked.tokens,
            vec![token(0xaa)],
            "0xbb names another slot, 0xee's getter is not pinned"
        );
        assert_eq!(checked.contracts, catalog.contracts);
        let holder = Address::repeat_byte(0x11);
        let call =
            serde_json::json!([{"to": Address::repeat_byte(0xbb), "data": balance_of(holder)}]);
        let answerable = Answerable {
            storage: checked,
            balance_checker: None,
        };
        let planned = plan("eth_call", Some(&raw(call)), |_| Some(answerable.clone()));
        assert!(
            planned.is_none(),
            "a dropped token's balanceOf is not private"
        );
    }

    #[test]
    fn storage_values_of_held_contracts_are_planned() {
        let c = Address::repeat_byte(0xcc);
        let word = |n: u8| B256::with_last_byte(n);
        let asked = serde_json::json!([{c.to_string(): [word(1), word(2), word(1)]}, "0x10"]);
        let read = plan_of("eth_getStorageValues", asked).unwrap();
        assert_eq!(read.keys.len(), 2, "each slot read once");
        let Answer::Words(words) = &read.answer else {
            panic!("{:?}", read.answer)
        };
        assert_eq!(words[0].1.len(), 3, "answered as asked");
        let unheld = serde_json::json!([{Address::repeat_byte(9).to_string(): [word(1)]}]);
        let short = serde_json::json!([{c.to_string(): ["0x1"]}]);
        let many: Vec<B256> = (0..=MAX_STORAGE_VALUES).map(|_| word(1)).collect();
        for params in [
            unheld,
            short,
            serde_json::json!([{}]),
            serde_json::json!([{c.to_string(): many}]),
        ] {
            assert!(
                plan_of("eth_getStorageValues", params.clone()).is_none(),
                "{params}"
            );
        }
    }

    #[test]
    fn storage_reads_of_listed_contracts_only() {
        let c = Address::repeat_byte(0xcc);
        let read = plan_of("eth_getStorageAt", serde_json::json!([c, "0x5", "0x10"])).unwrap();
        assert_eq!(read.slots(), vec![(c, B256::with_last_byte(5))]);
        assert_eq!(read.block, BlockSelector::Number(16));
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
            answer(&read, &found(&read, |_| U256::from(7))).unwrap(),
            serde_json::json!(format!("0x{:064x}", 7))
        );
    }

    /// geth's reading of a key: hex with or without `0x` (never decimal),
    /// odd lengths padded, at most 32 bytes; what it refuses is refused
    /// here with its code, before anything is read or sent.
    #[test]
    fn storage_keys_are_read_as_geth_reads_them() {
        assert_eq!(storage_key("10").unwrap(), B256::with_last_byte(0x10));
        assert_eq!(storage_key("0x5").unwrap(), B256::with_last_byte(5));
        assert_eq!(
            storage_key(&format!("0x{}", "0".repeat(64))).unwrap(),
            B256::ZERO
        );
        assert!(storage_key(&format!("0x{}", "0".repeat(65))).is_err());
        assert!(storage_key("0xasdf").is_err());
        assert!(storage_key("0x0x12").is_err(), "one 0x, as geth");
        let refused = |method: &str, params: serde_json::Value| {
            refused_params(method, Some(&raw(params))).map(|e| e.code())
        };
        let c = Address::repeat_byte(0xcc);
        let invalid = Some(jsonrpsee::types::error::INVALID_PARAMS_CODE);
        assert_eq!(
            refused("eth_getStorageAt", serde_json::json!([c, "0xzz"])),
            invalid
        );
        for fine in [
            serde_json::json!([c, "0x1"]),
            serde_json::json!([c, "0x1", "latest"]),
        ] {
            assert_eq!(refused("eth_getStorageAt", fine), None);
        }
        // Every malformed shape is refused, never forwarded.
        for params in [
            serde_json::json!([c, 5]),
            serde_json::json!([c]),
            serde_json::json!({"address": c, "key": "0x1"}),
            serde_json::json!(["0x01", "0x1"]),
            serde_json::json!([c, "0x1", "nonsense"]),
            serde_json::json!([c, "0x1", "latest", 4]),
        ] {
            let refusal = refused("eth_getStorageAt", params.clone());
            assert_eq!(refusal, invalid, "{params}");
        }
        for params in [
            serde_json::json!(["0x01"]),
            serde_json::json!([{c.to_string(): ["0x1"]}]),
            serde_json::json!([{c.to_string(): "0x1"}]),
        ] {
            let refusal = refused("eth_getStorageValues", params.clone());
            assert_eq!(refusal, invalid, "{params}");
        }
        let empty = serde_json::json!([{c.to_string(): []}]);
        assert_eq!(refused("eth_getStorageValues", empty), invalid);
        let many = vec![B256::ZERO; MAX_STORAGE_VALUES + 1];
        let over = serde_json::json!([{c.to_string(): many}]);
        let limit = Some(crate::error::LIMIT_EXCEEDED);
        assert_eq!(refused("eth_getStorageValues", over), limit);
    }

    #[test]
    fn getter_calls_to_listed_contracts() {
        let holder = Address::repeat_byte(0x11);
        let t = Address::repeat_byte(0xaa);
        let call =
            serde_json::json!([{"to": t, "data": balance_of(holder), "from": holder}, "latest"]);
        let read = plan_of("eth_call", call).unwrap();
        assert_eq!(
            read.slots(),
            vec![(t, token(0xaa).balance_slot_of(&holder))]
        );
        assert_eq!(read.keys[0], ReadKey::Account(t), "the token's account");
        assert!(
            answer(&read, &found(&read, |_| U256::from(5))).is_err(),
            "a call is executed, not answered from its plan"
        );
        // Another listed getter, at its own slot; balanceOf of that
        // contract is not listed.
        let shares = Address::repeat_byte(0xee);
        let get_shares: Getter = "getShares(address)".parse().unwrap();
        let data = Bytes::from(get_shares.calldata(&holder));
        assert_eq!(data[..4], [0xf0, 0x4d, 0xa6, 0x5b]);
        let read = plan_of(
            "eth_call",
            serde_json::json!([{"to": shares, "data": data}]),
        )
        .unwrap();
        let mut entry = token(0xee);
        entry.balance_slot = SlotIndex::Position(3);
        assert_eq!(read.slots(), vec![(shares, entry.balance_slot_of(&holder))]);
        assert!(plan_of(
            "eth_call",
            serde_json::json!([{"to": shares, "data": balance_of(holder)}])
        )
        .is_none());
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
    fn a_multicall_reads_multicall3s_account_too() {
        let h = Address::repeat_byte(0x11);
        let data = IMulticall3::getEthBalanceCall { addr: h }.abi_encode();
        let params = serde_json::json!([{"to": MULTICALL3, "data": Bytes::from(data)}]);
        let read = plan_of("eth_call", params).unwrap();
        assert_eq!(
            read.keys,
            [ReadKey::Account(MULTICALL3), ReadKey::Account(h)]
        );
        assert_eq!(read.answer, Answer::Call);
    }
}
