//! The JSON-RPC methods the proxy answers itself, as typed jsonrpsee
//! traits: what a wallet calls (the private reads and a few local ones) and
//! the proxy's own `ethpir_` namespace, whose generated client the
//! `trust-reset` command and the tests use. [`crate::rpc`] implements them.

use alloy_eips::BlockId;
use alloy_primitives::{Address, Bytes, U256, U64};
use jsonrpsee::core::SubscriptionResult;
use jsonrpsee::proc_macros::rpc;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

use crate::error::ProxyError;

/// The `eth_` reads the proxy answers privately, by PIR (this trait is
/// where the list of private methods comes from: `rpc::module`).
#[rpc(server, namespace = "eth")]
pub trait PrivateReadApi {
    /// `eth_getBalance`, read by PIR.
    #[method(name = "getBalance", with_extensions)]
    async fn get_balance(
        &self,
        address: CheckedAddress,
        block: Option<BlockId>,
    ) -> Result<U256, ProxyError>;

    /// `eth_getTransactionCount`, read by PIR.
    #[method(name = "getTransactionCount", with_extensions)]
    async fn get_transaction_count(
        &self,
        address: CheckedAddress,
        block: Option<BlockId>,
    ) -> Result<U64, ProxyError>;

    /// `eth_getCode`, read by PIR (the account's code reference) and the
    /// server's content-addressed code route, checked by keccak256.
    #[method(name = "getCode", with_extensions)]
    async fn get_code(
        &self,
        address: CheckedAddress,
        block: Option<BlockId>,
    ) -> Result<Bytes, ProxyError>;
}

/// The other `eth_` methods the proxy answers: the chain id from the
/// snapshots, subscriptions piped to the upstream.
#[rpc(server, namespace = "eth")]
pub trait EthApi {
    /// `eth_chainId`, from the snapshots (no upstream needed).
    #[method(name = "chainId")]
    fn chain_id(&self) -> Result<U64, ProxyError>;

    /// `eth_subscribe`: the same subscription opened upstream (WebSocket
    /// only), its notifications relayed until either side closes.
    #[subscription(name = "subscribe" => "subscription", unsubscribe = "unsubscribe", item = Box<serde_json::value::RawValue>)]
    async fn subscribe(&self, kind: String, options: Option<Value>) -> SubscriptionResult;
}

/// `net_version` and `web3_clientVersion`, answered locally.
#[rpc(server)]
pub trait NodeInfoApi {
    #[method(name = "net_version")]
    fn net_version(&self) -> Result<String, ProxyError>;

    #[method(name = "web3_clientVersion")]
    fn client_version(&self) -> Result<String, ProxyError>;
}

/// The proxy's own methods.
#[rpc(server, client, namespace = "ethpir")]
pub trait EthpirApi {
    /// What the proxy reads from and how fresh it is.
    #[method(name = "status", with_extensions)]
    async fn status(&self) -> Result<Status, ProxyError>;

    /// Trusts the PIR server again after a verification failure.
    #[method(name = "trustReset")]
    fn trust_reset(&self) -> Result<TrustReset, ProxyError>;
}

/// An address parameter: 20 hex bytes in any case; a mixed-case one must
/// carry a valid EIP-55 checksum (alloy's `Address` alone does not check it).
#[derive(Clone, Copy, Debug, Serialize)]
pub struct CheckedAddress(pub Address);

impl<'de> Deserialize<'de> for CheckedAddress {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        ethpir_client::parse_address(&s)
            .map(CheckedAddress)
            .map_err(serde::de::Error::custom)
    }
}

/// `ethpir_status`: the block `latest` answers from and the levels of that
/// view, the blocks other views answer, the upstream's head, the bytes
/// moved and whether private reads are on.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Status {
    pub chain_id: Option<u64>,
    pub view_block: Option<u64>,
    pub complete: Option<bool>,
    /// Whether the newest view holds the whole state (every slot of every
    /// contract, as its base's manifest claims): then every call runs
    /// here and no read naming an address needs the upstream.
    #[serde(default)]
    pub whole_state: bool,
    pub view_blocks: Vec<u64>,
    pub head_block: Option<u64>,
    pub levels: Vec<LevelStatus>,
    /// The hot tier the newest view reads, if any (downloaded whole).
    #[serde(default)]
    pub hot: Option<LevelStatus>,
    /// Hot tiers caught holding a value their base disagrees with (read
    /// by PIR for a key that names the wallet): forged by the server's
    /// operator. The wallet's own keys are answered by PIR; the rest still
    /// comes from the tier. Not served to a web page or an extension.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub forged_tiers: Vec<String>,
    /// What this proxy has read and moved: served only to a program on
    /// this machine (no `Origin`), never to a web page or a browser
    /// extension, through which any page could watch them rise (a first
    /// read asks a key, a kept answer does not).
    #[serde(flatten, default, skip_serializing_if = "Option::is_none")]
    pub counters: Option<Counters>,
    pub private_reads: PrivateReads,
}

/// [`Status`]'s counters.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Counters {
    /// Keys asked of the PIR levels since start (canaries and fillers
    /// not counted): what the hot tier saves shows here.
    pub pir_keys: u64,
    pub bytes_up: u64,
    pub bytes_down: u64,
    /// No private read for `idle_secs`: no new level is loaded, the
    /// catalog is fetched every `idle_refresh_secs`.
    pub idle: bool,
}

/// One level (snapshot) of the newest view.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct LevelStatus {
    pub id: String,
    pub kind: String,
    pub block: u64,
    pub records: u64,
    pub setup_bytes: u64,
    pub read: LevelRead,
}

/// How the proxy reads a level.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum LevelRead {
    /// Downloaded whole (a small delta; no query).
    Whole,
    /// Built by the proxy from the deltas it merges, which it held
    /// already (a merge above small deltas; nothing downloaded, no query).
    Merged,
    /// By PIR queries.
    Pir,
}

/// Whether private reads go out: `"on"`, or `{"stopped": reason}` after a
/// verification failure.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum PrivateReads {
    On,
    Stopped(String),
}

/// `ethpir_trustReset`'s answer: why reads had stopped, if they had.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct TrustReset {
    pub was_distrusted: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn private_reads_wire_form() {
        assert_eq!(serde_json::to_value(PrivateReads::On).unwrap(), "on");
        assert_eq!(
            serde_json::to_value(PrivateReads::Stopped("bad".into())).unwrap(),
            serde_json::json!({"stopped": "bad"})
        );
    }
}
