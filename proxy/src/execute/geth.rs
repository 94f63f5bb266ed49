//! How geth reads JSON-RPC parameters and how it answers what it refuses:
//! keys matched to fields whatever their case (Go's JSON), and its errors,
//! for every method run here.

use serde_json::Value;

/// An error as geth gives it (the whole request fails).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GethError {
    pub code: i32,
    pub message: String,
}

/// The code of what is not simulated here (the request is refused, never
/// sent upstream): the gate's.
pub const NOT_DONE_HERE: i32 = -32601;

impl GethError {
    pub(super) fn new(code: i32, message: String) -> Self {
        GethError { code, message }
    }

    /// What `eth_simulateV1` does not simulate here (refused, never sent
    /// upstream).
    pub(super) fn unsupported(what: &str) -> Self {
        GethError::new(
            NOT_DONE_HERE,
            format!("eth_simulateV1 runs here, privately, and does not simulate {what}"),
        )
    }

    /// What `eth_call`, `eth_estimateGas` and `eth_createAccessList` do
    /// not run here (refused, never sent upstream).
    pub fn not_run(what: &str) -> Self {
        GethError::new(
            NOT_DONE_HERE,
            format!("this call runs here, privately, and {what} is not run here"),
        )
    }

    pub fn into_object(self) -> jsonrpsee::types::ErrorObjectOwned {
        jsonrpsee::types::ErrorObjectOwned::owned(self.code, self.message, None::<()>)
    }
}

/// Every field name of the call objects and of `eth_simulateV1`'s options
/// as geth names them. geth reads JSON as Go does, matching a key to a
/// field whatever its case (`"TO"`, `"MaxFeePerGas"`), so
/// [`geth_field_names`] renames such keys to these before they are read.
pub(super) const GETH_FIELDS: &[&str] = &[
    // A call (`TransactionArgs`), its access list and authorizations.
    "from",
    "to",
    "gas",
    "gasPrice",
    "maxFeePerGas",
    "maxPriorityFeePerGas",
    "maxFeePerBlobGas",
    "value",
    "nonce",
    "data",
    "input",
    "chainId",
    "type",
    "accessList",
    "authorizationList",
    "blobVersionedHashes",
    "blobs",
    "address",
    "storageKeys",
    "yParity",
    "r",
    "s",
    // eth_simulateV1: the options, a block's overrides and withdrawals,
    // an account's overrides.
    "blockStateCalls",
    "traceTransfers",
    "validation",
    "returnFullTransactions",
    "blockOverrides",
    "stateOverrides",
    "calls",
    "number",
    "difficulty",
    "time",
    "gasLimit",
    "feeRecipient",
    "prevRandao",
    "baseFeePerGas",
    "blobBaseFee",
    "beaconRoot",
    "withdrawals",
    "index",
    "validatorIndex",
    "amount",
    "code",
    "balance",
    "state",
    "stateDiff",
    "movePrecompileToAddress",
];

/// Whether `key` names `field` as Go's JSON compares them
/// (`bytes.EqualFold`): ASCII letters in either case, and the two other
/// letters that fold to an ASCII one (the Kelvin sign to `k`, the long s
/// to `s`). `field` is ASCII.
fn go_names(key: &str, field: &str) -> bool {
    let folded = key.chars().map(|c| match c {
        '\u{212A}' => 'k',
        '\u{017F}' => 's',
        c => c.to_ascii_lowercase(),
    });
    folded.eq(field.chars().map(|c| c.to_ascii_lowercase()))
}

/// The longest of [`GETH_FIELDS`], in characters: a longer key names none.
pub(super) const LONGEST_FIELD: usize = 23;

/// `value` with every key of its objects, at any depth, that names a field
/// of [`GETH_FIELDS`] but for case renamed to that field, as geth reads
/// it. `None` when two keys of one object then name the same field: Go
/// keeps the later of the two, an order a JSON map here does not keep.
/// Keys that are data (the addresses of state overrides, slots) name no
/// field and are kept.
pub(super) fn geth_field_names(value: Value) -> Option<Value> {
    match value {
        Value::Object(map) => {
            let mut named = serde_json::Map::new();
            for (key, inner) in map {
                let field = match key.len() > 3 * LONGEST_FIELD {
                    true => None,
                    false => GETH_FIELDS.iter().find(|f| go_names(&key, f)),
                };
                let key = match field {
                    Some(field) => field.to_string(),
                    None => key,
                };
                if named.insert(key, geth_field_names(inner)?).is_some() {
                    return None;
                }
            }
            Some(Value::Object(named))
        }
        Value::Array(items) => items
            .into_iter()
            .map(geth_field_names)
            .collect::<Option<_>>()
            .map(Value::Array),
        other => Some(other),
    }
}
