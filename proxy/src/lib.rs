//! The wallet-facing JSON-RPC proxy and historical replay. Filled by the server/proxy issue.
