//! Where account state comes from.

pub mod genesis;
pub mod reth;
pub mod rpc;
