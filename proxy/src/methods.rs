//! The methods the proxy knows, by class: one home for the lists that the
//! gate (what may go upstream) and the page (what it counts by name)
//! both read.

/// Methods that read no state by address: blocks, transactions and
/// receipts by hash or number (raw too), fees and gas
/// prices, sends, the chain's identity and configuration, the pool's
/// status and whole content, filters and subscriptions by id. Log filters and
/// subscriptions are judged by what they name (`crate::gate`).
pub const NO_ADDRESS_METHODS: &[&str] = &[
    "eth_blockNumber",
    "eth_chainId",
    "net_version",
    "net_listening",
    "net_peerCount",
    "web3_clientVersion",
    "web3_sha3",
    "eth_protocolVersion",
    "eth_syncing",
    "eth_mining",
    "eth_hashrate",
    "eth_accounts",
    "eth_gasPrice",
    "eth_maxPriorityFeePerGas",
    "eth_blobBaseFee",
    "eth_feeHistory",
    "eth_getBlockByNumber",
    "eth_getBlockByHash",
    "eth_getBlockReceipts",
    "eth_getBlockTransactionCountByNumber",
    "eth_getBlockTransactionCountByHash",
    "eth_getUncleCountByBlockNumber",
    "eth_getUncleCountByBlockHash",
    "eth_getUncleByBlockNumberAndIndex",
    "eth_getUncleByBlockHashAndIndex",
    "eth_getTransactionByHash",
    "eth_getRawTransactionByHash",
    "eth_getTransactionByBlockNumberAndIndex",
    "eth_getTransactionByBlockHashAndIndex",
    "eth_getTransactionReceipt",
    "eth_sendRawTransaction",
    "eth_sendTransaction",
    "eth_newBlockFilter",
    "eth_newPendingTransactionFilter",
    "eth_getFilterChanges",
    "eth_getFilterLogs",
    "eth_uninstallFilter",
    "eth_unsubscribe",
    "eth_baseFee",
    "eth_config",
    "eth_capabilities",
    "debug_getRawBlock",
    "debug_getRawHeader",
    "debug_getRawReceipts",
    "debug_getRawTransaction",
    "txpool_status",
    "txpool_content",
    "txpool_inspect",
];

/// Methods that trace a block or a transaction by number or hash: they
/// name no address, but their options choose the tracer, and a
/// JavaScript tracer reads any account it likes (`db.getBalance(...)`):
/// the gate admits them only with geth's built-in tracers
/// (`crate::gate`).
pub const TRACE_METHODS: &[&str] = &[
    "debug_traceTransaction",
    "debug_traceBlockByNumber",
    "debug_traceBlockByHash",
];

/// Methods that read state by address (or sign with the wallet's keys,
/// or are the proxy's own).
pub const STATE_METHODS: &[&str] = &[
    "eth_getBalance",
    "eth_getTransactionCount",
    "eth_getCode",
    "eth_getStorageAt",
    "eth_getStorageValues",
    "eth_getProof",
    "eth_call",
    "eth_estimateGas",
    "eth_createAccessList",
    "eth_getLogs",
    "eth_newFilter",
    "eth_subscribe",
    "eth_simulateV1",
    "eth_callMany",
    "debug_traceCall",
    "trace_call",
    "eth_sign",
    "personal_sign",
    "eth_signTypedData_v4",
    "ethpir_status",
    "ethpir_trustReset",
];

/// Whether `method` is one of the methods the proxy knows by name.
pub fn is_known(method: &str) -> bool {
    STATE_METHODS.contains(&method)
        || NO_ADDRESS_METHODS.contains(&method)
        || TRACE_METHODS.contains(&method)
}
