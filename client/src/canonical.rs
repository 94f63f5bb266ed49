//! Canonical blocks: with a header source the wallet already trusts (the
//! proxy's upstream node; later a light client), a view is read only if
//! its block hash is the source's at that number. The question names a
//! block number, never an address. A view the source contradicts is left
//! unused and logged; one it cannot judge (the source does not have the
//! block yet, or is down; a snapshot without a block hash) is read as
//! before.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use alloy_primitives::B256;

use crate::ReadError;

/// The block hash at a number, as the source has it (`Ok(None)`: it has
/// no such block yet).
pub type BlockHashSource = Arc<
    dyn Fn(u64) -> Pin<Box<dyn Future<Output = Result<Option<B256>, String>> + Send>> + Send + Sync,
>;

/// The source and the hashes it confirmed.
pub struct CanonicalCheck {
    source: BlockHashSource,
    confirmed: Mutex<HashMap<u64, B256>>,
}

/// Most confirmed hashes remembered (a few hours of mainnet blocks).
const REMEMBERED: usize = 4096;

/// Longest a read waits for the source: a source that is down or slow
/// must not hold private reads up (the view is then read unchecked).
const PATIENCE: std::time::Duration = std::time::Duration::from_secs(2);

impl CanonicalCheck {
    pub fn new(source: BlockHashSource) -> Self {
        CanonicalCheck {
            source,
            confirmed: Mutex::new(HashMap::new()),
        }
    }

    /// Whether the view at `block` whose hash is `hash` may be read: an
    /// error when the source has another block there.
    pub async fn check(&self, block: u64, hash: Option<B256>) -> Result<(), ReadError> {
        let Some(hash) = hash else {
            return Ok(());
        };
        if self.confirmed.lock().expect("lock").get(&block) == Some(&hash) {
            return Ok(());
        }
        let asked = tokio::time::timeout(PATIENCE, (self.source)(block)).await;
        match asked.unwrap_or_else(|_| Err("no answer in time".into())) {
            Ok(Some(theirs)) if theirs == hash => {
                let mut confirmed = self.confirmed.lock().expect("lock");
                if confirmed.len() >= REMEMBERED {
                    confirmed.clear();
                }
                confirmed.insert(block, hash);
                Ok(())
            }
            Ok(Some(theirs)) => {
                tracing::warn!(block, view = %hash, node = %theirs, "the PIR server's view is not the upstream's block: not read");
                Err(ReadError::NotCanonical {
                    block,
                    view: hash,
                    node: theirs,
                })
            }
            Ok(None) => Ok(()),
            Err(e) => {
                tracing::debug!(block, error = %e, "the block hash could not be checked");
                Ok(())
            }
        }
    }
}
