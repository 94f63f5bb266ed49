//! End-to-end tests only (see `tests/`): the proxy and the client crate
//! against real servers, nodes and wallets. Nothing here is linked by a
//! program.
#![forbid(unsafe_code)]
