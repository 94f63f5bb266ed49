//! JSON-RPC 2.0 over HTTP: single calls and batches. Private methods go
//! through the PIR reader; a few are answered locally; everything else goes
//! to the configured upstream or gets -32601.

use std::sync::Arc;

use alloy_primitives::{Address, U256};
use serde_json::{json, Value};

use std::collections::HashMap;

use crate::block::{parse_block, BlockSelector};
use crate::reader::{AccountState, PrivateReader, ReadError, SnapshotGroup};

pub const PARSE_ERROR: i64 = -32700;
pub const INVALID_REQUEST: i64 = -32600;
pub const METHOD_NOT_FOUND: i64 = -32601;
pub const INVALID_PARAMS: i64 = -32602;
pub const INTERNAL_ERROR: i64 = -32603;
/// No snapshot for the requested block.
pub const NO_SNAPSHOT: i64 = -32001;
/// The account is not in an active/historical snapshot.
pub const NOT_IN_PRIVATE_SET: i64 = -32002;
/// The PIR server could not be reached or refused.
pub const PIR_UNAVAILABLE: i64 = -32003;
/// The private answer did not verify (damaged or altered).
pub const UNVERIFIABLE: i64 = -32004;
/// The upstream node could not be reached.
pub const UPSTREAM_UNAVAILABLE: i64 = -32005;

/// Methods answered privately.
pub const PRIVATE_METHODS: [&str; 2] = ["eth_getBalance", "eth_getTransactionCount"];

pub struct RpcService {
    pub reader: Arc<PrivateReader>,
    pub upstream: Option<String>,
    pub private_fallback: bool,
    http: reqwest::Client,
}

fn error(id: &Value, code: i64, message: impl Into<String>, data: Option<Value>) -> Value {
    let mut err = json!({"code": code, "message": message.into()});
    if let Some(d) = data {
        err["data"] = d;
    }
    json!({"jsonrpc": "2.0", "id": id, "error": err})
}

fn result(id: &Value, value: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "result": value})
}

fn quantity(v: U256) -> String {
    format!("{v:#x}")
}

impl RpcService {
    pub fn new(
        reader: Arc<PrivateReader>,
        upstream: Option<String>,
        private_fallback: bool,
        timeout: std::time::Duration,
    ) -> Self {
        RpcService {
            reader,
            upstream,
            private_fallback,
            http: reqwest::Client::builder()
                .timeout(timeout)
                .build()
                .expect("HTTP client"),
        }
    }

    /// Handles one HTTP body. `None`: nothing to send (only notifications).
    pub async fn handle(&self, body: &[u8]) -> Option<Value> {
        let parsed: Value = match serde_json::from_slice(body) {
            Ok(v) => v,
            Err(e) => {
                return Some(error(
                    &Value::Null,
                    PARSE_ERROR,
                    format!("parse error: {e}"),
                    None,
                ))
            }
        };
        match parsed {
            Value::Array(calls) if calls.is_empty() => {
                Some(error(&Value::Null, INVALID_REQUEST, "empty batch", None))
            }
            Value::Array(calls) => {
                let mut prefetched = self.prefetch_private(&calls).await;
                let answers = futures_util::future::join_all(
                    calls
                        .iter()
                        .enumerate()
                        .map(|(i, c)| self.call(c, prefetched.remove(&i))),
                )
                .await;
                let answers: Vec<Value> = answers.into_iter().flatten().collect();
                (!answers.is_empty()).then_some(Value::Array(answers))
            }
            call => self.call(&call, None).await,
        }
    }

    /// Reads the well-formed private calls of a batch together: one PIR
    /// batch per snapshot instead of one round trip per call. Calls that
    /// are malformed or name no snapshot are left to the normal path,
    /// which reports their errors.
    async fn prefetch_private(
        &self,
        calls: &[Value],
    ) -> HashMap<usize, Result<AccountState, ReadError>> {
        let mut groups: HashMap<String, SnapshotGroup> = HashMap::new();
        for (i, c) in calls.iter().enumerate() {
            let private = c.get("jsonrpc").and_then(Value::as_str) == Some("2.0")
                && c.get("method")
                    .and_then(Value::as_str)
                    .is_some_and(|m| PRIVATE_METHODS.contains(&m));
            if !private {
                continue;
            }
            let Ok((address, selector)) = parse_private_params(c.get("params")) else {
                continue;
            };
            if let Ok(snap) = self.reader.select(&selector) {
                groups
                    .entry(snap.entry.id.clone())
                    .or_insert_with(|| (snap.clone(), Vec::new()))
                    .1
                    .push((i, address));
            }
        }
        let mut out = HashMap::new();
        for (snap, members) in groups.into_values().filter(|g| g.1.len() > 1) {
            let addresses: Vec<Address> = members.iter().map(|(_, a)| *a).collect();
            for ((i, _), result) in members
                .iter()
                .zip(self.reader.read(&snap, &addresses).await)
            {
                out.insert(*i, result);
            }
        }
        out
    }

    /// One call; `None` for a notification.
    async fn call(
        &self,
        call: &Value,
        prefetched: Option<Result<AccountState, ReadError>>,
    ) -> Option<Value> {
        let Some(obj) = call.as_object() else {
            return Some(error(
                &Value::Null,
                INVALID_REQUEST,
                "a request must be an object",
                None,
            ));
        };
        let id = obj.get("id").cloned();
        let reply_id = match &id {
            None => Value::Null,
            Some(v @ (Value::Null | Value::String(_) | Value::Number(_))) => v.clone(),
            Some(_) => {
                return Some(error(
                    &Value::Null,
                    INVALID_REQUEST,
                    "id must be a string, a number or null",
                    None,
                ))
            }
        };
        if obj.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
            return Some(error(
                &reply_id,
                INVALID_REQUEST,
                "jsonrpc must be \"2.0\"",
                None,
            ));
        }
        let Some(method) = obj.get("method").and_then(Value::as_str) else {
            return Some(error(
                &reply_id,
                INVALID_REQUEST,
                "method must be a string",
                None,
            ));
        };
        let params = obj.get("params");
        if params.is_some_and(|p| !p.is_array() && !p.is_object()) {
            return Some(error(
                &reply_id,
                INVALID_REQUEST,
                "params must be an array or an object",
                None,
            ));
        }
        let answer = self
            .dispatch(method, params, &reply_id, call, prefetched)
            .await;
        id.map(|_| answer)
    }

    async fn dispatch(
        &self,
        method: &str,
        params: Option<&Value>,
        id: &Value,
        raw: &Value,
        prefetched: Option<Result<AccountState, ReadError>>,
    ) -> Value {
        match method {
            "eth_getBalance" | "eth_getTransactionCount" => {
                self.private(method, params, id, raw, prefetched).await
            }
            "eth_chainId" | "net_version" => match self.reader.chain_id() {
                Ok(Some(c)) if method == "eth_chainId" => result(id, json!(format!("{c:#x}"))),
                Ok(Some(c)) => result(id, json!(c.to_string())),
                Ok(None) => error(
                    id,
                    PIR_UNAVAILABLE,
                    "no snapshot loaded yet: chain unknown",
                    None,
                ),
                Err(e) => error(id, INTERNAL_ERROR, e.to_string(), None),
            },
            "web3_clientVersion" => result(
                id,
                json!(format!("ethpir-proxy/{}", env!("CARGO_PKG_VERSION"))),
            ),
            _ => self.forward(raw, id, method).await,
        }
    }

    async fn forward(&self, raw: &Value, id: &Value, method: &str) -> Value {
        let Some(upstream) = &self.upstream else {
            return error(
                id,
                METHOD_NOT_FOUND,
                format!("method {method} is not available (no upstream configured)"),
                None,
            );
        };
        tracing::debug!(method, "forwarding upstream");
        let sent = self
            .http
            .post(upstream)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(raw.to_string())
            .send()
            .await;
        let body = match sent {
            Ok(r) => r.bytes().await,
            Err(e) => {
                return error(
                    id,
                    UPSTREAM_UNAVAILABLE,
                    "upstream unavailable",
                    Some(json!(e.to_string())),
                )
            }
        };
        match body
            .map_err(|e| e.to_string())
            .and_then(|b| serde_json::from_slice::<Value>(b.as_ref()).map_err(|e| e.to_string()))
        {
            Ok(v) if v.is_object() => v,
            Ok(_) => error(
                id,
                UPSTREAM_UNAVAILABLE,
                "upstream sent an unexpected reply",
                None,
            ),
            Err(e) => error(
                id,
                UPSTREAM_UNAVAILABLE,
                "upstream sent an unreadable reply",
                Some(json!(e)),
            ),
        }
    }

    async fn private(
        &self,
        method: &str,
        params: Option<&Value>,
        id: &Value,
        raw: &Value,
        prefetched: Option<Result<AccountState, ReadError>>,
    ) -> Value {
        let (address, selector) = match parse_private_params(params) {
            Ok(p) => p,
            Err(e) => return error(id, INVALID_PARAMS, e, None),
        };
        let outcome = match prefetched {
            Some(done) => done,
            None => match self.reader.select(&selector) {
                Ok(snap) => self
                    .reader
                    .read(&snap, &[address])
                    .await
                    .pop()
                    .expect("one result per address"),
                Err(e) => Err(e),
            },
        };
        match outcome {
            Ok(state) => {
                tracing::info!(snapshot = %state.snapshot, method, "answered privately");
                if method == "eth_getBalance" {
                    result(id, json!(quantity(state.balance)))
                } else {
                    result(id, json!(format!("{:#x}", state.nonce)))
                }
            }
            Err(e @ (ReadError::NoSnapshot { .. } | ReadError::NotInPrivateSet { .. }))
                if self.private_fallback && self.upstream.is_some() =>
            {
                tracing::warn!(method, reason = %e, "private answer unavailable; forwarding upstream as configured (reveals the address)");
                self.forward(raw, id, method).await
            }
            Err(e) => {
                tracing::info!(method, error = %e, "private read failed");
                read_error(id, &e)
            }
        }
    }
}

fn read_error(id: &Value, e: &ReadError) -> Value {
    match e {
        ReadError::NoSnapshot {
            requested,
            available,
        } => error(
            id,
            NO_SNAPSHOT,
            format!("no private snapshot for {requested}"),
            Some(json!({"available_blocks": available})),
        ),
        ReadError::NotInPrivateSet { snapshot, kind } => error(
            id,
            NOT_IN_PRIVATE_SET,
            "account not in the private set",
            Some(json!({"snapshot": snapshot, "kind": kind})),
        ),
        ReadError::Backend(reason) | ReadError::Setup { reason, .. } => error(
            id,
            PIR_UNAVAILABLE,
            "PIR server unavailable",
            Some(json!(reason)),
        ),
        ReadError::Unverifiable(reason) => error(
            id,
            UNVERIFIABLE,
            "private answer failed verification",
            Some(json!(reason)),
        ),
        ReadError::AmbiguousChain(chains) => {
            error(id, INTERNAL_ERROR, e.to_string(), Some(json!(chains)))
        }
    }
}

/// `[address, block?]` of eth_getBalance / eth_getTransactionCount.
fn parse_private_params(params: Option<&Value>) -> Result<(Address, BlockSelector), String> {
    let list: &[Value] = match params {
        Some(Value::Array(a)) => a,
        None => &[],
        Some(_) => return Err("params must be [address, block]".into()),
    };
    if list.is_empty() || list.len() > 2 {
        return Err("params must be [address, block]".into());
    }
    let address = list[0]
        .as_str()
        .ok_or("address must be a 0x-prefixed hex string")?;
    Ok((parse_address(address)?, parse_block(list.get(1))?))
}

/// A 20-byte hex address (any case; a mixed-case one must carry a valid checksum).
pub fn parse_address(s: &str) -> Result<Address, String> {
    let hex = s
        .strip_prefix("0x")
        .ok_or_else(|| format!("invalid address '{s}': missing 0x"))?;
    if hex.len() != 40 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(format!("invalid address '{s}': need 40 hex digits"));
    }
    let address: Address = s.parse().map_err(|_| format!("invalid address '{s}'"))?;
    let mixed =
        hex.bytes().any(|b| b.is_ascii_lowercase()) && hex.bytes().any(|b| b.is_ascii_uppercase());
    if mixed && address.to_checksum(None) != s {
        return Err(format!("invalid address '{s}': bad EIP-55 checksum"));
    }
    Ok(address)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses() {
        assert!(parse_address("0x000d836201318ec6899a67540690382780743280").is_ok());
        assert!(parse_address("0x000D836201318EC6899A67540690382780743280").is_ok());
        assert!(parse_address("0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed").is_ok());
        assert!(parse_address("0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAeD").is_err());
        for bad in [
            "",
            "0x",
            "000d836201318ec6899a67540690382780743280",
            "0x000d83620131",
            "0xzz0d836201318ec6899a67540690382780743280",
        ] {
            assert!(parse_address(bad).is_err(), "{bad}");
        }
    }
}
