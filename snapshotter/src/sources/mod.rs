//! Where account state comes from.

pub use snapshot_build::genesis;
#[cfg(feature = "reth")]
pub mod reth;
pub mod rpc;
