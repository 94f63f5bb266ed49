//! Where account state comes from.

pub mod genesis;
#[cfg(feature = "reth")]
pub mod reth;
pub mod rpc;
