//! Canonical blocks: with a header source the wallet already trusts (the
//! proxy's upstream node; later a light client), a view is read only if
//! its chain is the source's and its block hash is the source's at that
//! number. The questions name a chain and a block number, never an
//! address. Nothing fails open: a view the source contradicts, one that
//! names no block hash, and one the source cannot confirm (it does not have
//! the block yet after a wait, or does not answer) are not read, unless
//! the reader is set to read unconfirmed views (`read_unconfirmed_views`),
//! which then reads the last two kinds as before.
//!
//! A confirmation is not kept for good: a view's block may be reorged
//! away after it was confirmed while the PIR server, stuck or lying, goes
//! on serving it. Every read asks the source again for the hash at the
//! view's number, and reads that wait together share one question (one
//! answered after they began, whatever it was: an outage costs the reads
//! waiting together one question's wait, not one each). A view the
//! source now contradicts, or no longer has, is not read; one the source
//! cannot be asked about now (an outage) stays read as last confirmed
//! (logged at `debug`).

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use alloy_primitives::B256;

use crate::ReadError;

/// The block hash at a number, as the source has it (`Ok(None)`: it has
/// no such block yet).
pub type BlockHashSource = Arc<
    dyn Fn(u64) -> Pin<Box<dyn Future<Output = Result<Option<B256>, String>> + Send>> + Send + Sync,
>;

/// The chain id of the source.
pub type ChainIdSource =
    Arc<dyn Fn() -> Pin<Box<dyn Future<Output = Result<u64, String>> + Send>> + Send + Sync>;

/// A header source: its chain and its blocks' hashes.
#[derive(Clone)]
pub struct HeaderSource {
    pub chain_id: ChainIdSource,
    pub block_hash: BlockHashSource,
}

/// The source, what it confirmed, and whether unconfirmed views are read.
pub struct CanonicalCheck {
    source: HeaderSource,
    /// The source's chain, once it said.
    chain: Mutex<Option<u64>>,
    /// By block number: the last hash the source confirmed there, and
    /// when; a read locks its block's entry while it asks, so that reads
    /// waiting together share the question.
    confirmed: Mutex<HashMap<u64, Arc<tokio::sync::Mutex<Kept>>>>,
    read_unconfirmed: bool,
    /// How long a read waits for the source to have a view's block.
    ahead_wait: Duration,
}

/// What is kept of one block number: the hash the source last confirmed
/// there, and its last answer (any: a hash, none, a failure) with when it
/// came, which reads that began before it share.
#[derive(Clone, Debug, Default)]
struct Kept {
    confirmed: Option<B256>,
    last: Option<(Result<Option<B256>, String>, tokio::time::Instant)>,
}

/// Most confirmed hashes remembered (a few hours of mainnet blocks).
const REMEMBERED: usize = 4096;

/// Longest one question to the source may take.
const PATIENCE: Duration = Duration::from_secs(2);

/// Longest a read waits for the source to have a view's block (a PIR
/// server that follows a faster node is a block or so ahead): a mainnet
/// block's time.
pub const AHEAD_WAIT: Duration = Duration::from_secs(12);

/// Between two questions while waiting for a block.
const POLL: Duration = Duration::from_millis(250);

impl CanonicalCheck {
    pub fn new(source: HeaderSource, read_unconfirmed: bool) -> Self {
        CanonicalCheck {
            source,
            chain: Mutex::new(None),
            confirmed: Mutex::new(HashMap::new()),
            read_unconfirmed,
            ahead_wait: AHEAD_WAIT,
        }
    }

    /// The source's chain id (asked once, then remembered).
    pub async fn chain(&self) -> Result<u64, String> {
        if let Some(chain) = *self.chain.lock().expect("lock") {
            return Ok(chain);
        }
        let asked = tokio::time::timeout(PATIENCE, (self.source.chain_id)()).await;
        let chain = asked.unwrap_or_else(|_| Err("no answer in time".into()))?;
        *self.chain.lock().expect("lock") = Some(chain);
        Ok(chain)
    }

    /// Whether the view of chain `chain` at `block` whose hash is `hash`
    /// may be read: see the module's doc.
    pub async fn check(&self, chain: u64, block: u64, hash: Option<B256>) -> Result<(), ReadError> {
        match self.chain().await {
            Ok(theirs) if theirs != chain => {
                return Err(ReadError::OtherChain {
                    chain: theirs,
                    catalog: vec![chain],
                })
            }
            Ok(_) => {}
            Err(why) => self.unconfirmed(block, format!("the upstream's chain id: {why}"))?,
        }
        let Some(hash) = hash else {
            return match self.read_unconfirmed {
                true => Ok(()),
                false => Err(ReadError::Unbound { block }),
            };
        };
        let began = tokio::time::Instant::now();
        let entry = self.entry(block);
        let mut kept = entry.lock().await;
        let was_confirmed = kept.confirmed == Some(hash);
        let asked = match &kept.last {
            // Answered after this read began (to a read that waited with
            // it): shared, whatever it was.
            Some((answer, at)) if *at >= began => answer.clone(),
            // A block confirmed before is asked once (it was there); a new
            // one is waited for a little (the server may be ahead).
            _ => {
                let answer = match was_confirmed {
                    true => self.hash_once(block).await,
                    false => self.hash_at(block).await,
                };
                kept.last = Some((answer.clone(), tokio::time::Instant::now()));
                answer
            }
        };
        self.judge(block, hash, asked, &mut kept)
    }

    /// What the source's answer `asked` at `block` says of a view whose
    /// hash is `hash` (`kept`: that block's entry, updated).
    fn judge(
        &self,
        block: u64,
        hash: B256,
        asked: Result<Option<B256>, String>,
        kept: &mut Kept,
    ) -> Result<(), ReadError> {
        let was_confirmed = kept.confirmed == Some(hash);
        match asked {
            Ok(Some(theirs)) if theirs == hash => {
                kept.confirmed = Some(hash);
                Ok(())
            }
            Ok(Some(theirs)) => {
                kept.confirmed = None;
                tracing::warn!(block, view = %hash, node = %theirs, "the PIR server's view is not the upstream's block: not read");
                Err(ReadError::NotCanonical {
                    block,
                    view: hash,
                    node: theirs,
                })
            }
            Ok(None) if was_confirmed => {
                kept.confirmed = None;
                tracing::warn!(block, view = %hash, "the upstream no longer has the view's block (reorged to a shorter chain): not read");
                self.unconfirmed(block, "the upstream no longer has the block".into())
            }
            Ok(None) => self.unconfirmed(
                block,
                format!(
                    "the upstream does not have the block (waited {} s)",
                    self.ahead_wait.as_secs()
                ),
            ),
            Err(why) if was_confirmed => {
                tracing::debug!(block, %why, "the upstream did not answer: the view stays read as last confirmed");
                Ok(())
            }
            Err(why) => self.unconfirmed(block, why),
        }
    }

    /// The entry of `block` in what was confirmed (made empty).
    fn entry(&self, block: u64) -> Arc<tokio::sync::Mutex<Kept>> {
        let mut confirmed = self.confirmed.lock().expect("lock");
        if confirmed.len() >= REMEMBERED && !confirmed.contains_key(&block) {
            confirmed.clear();
        }
        confirmed.entry(block).or_default().clone()
    }

    /// The source's hash at `block`, asked once.
    async fn hash_once(&self, block: u64) -> Result<Option<B256>, String> {
        let asked = tokio::time::timeout(PATIENCE, (self.source.block_hash)(block)).await;
        asked.unwrap_or_else(|_| Err("no answer in time".into()))
    }

    /// The source's hash at `block`, waiting up to [`AHEAD_WAIT`] while it
    /// does not have the block yet.
    async fn hash_at(&self, block: u64) -> Result<Option<B256>, String> {
        let deadline = tokio::time::Instant::now() + self.ahead_wait;
        loop {
            let found = self.hash_once(block).await?;
            if found.is_some() || tokio::time::Instant::now() + POLL > deadline {
                return Ok(found);
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// A view the source could not confirm: read only when so set.
    fn unconfirmed(&self, block: u64, why: String) -> Result<(), ReadError> {
        match self.read_unconfirmed {
            true => {
                tracing::warn!(block, %why, "view read unconfirmed (read_unconfirmed_views)");
                Ok(())
            }
            false => Err(ReadError::Unconfirmed { block, why }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A source of chain 7 whose blocks are `blocks` (number, hash), or
    /// one that fails.
    fn source(blocks: Vec<(u64, B256)>, fails: bool) -> HeaderSource {
        let blocks = Arc::new(blocks);
        HeaderSource {
            chain_id: Arc::new(move || {
                Box::pin(async move {
                    match fails {
                        true => Err("connection refused".to_string()),
                        false => Ok(7),
                    }
                })
            }),
            block_hash: Arc::new(move |n| {
                let blocks = blocks.clone();
                Box::pin(async move {
                    match fails {
                        true => Err("connection refused".to_string()),
                        false => Ok(blocks.iter().find(|b| b.0 == n).map(|b| b.1)),
                    }
                })
            }),
        }
    }

    fn check(source: HeaderSource, read_unconfirmed: bool) -> CanonicalCheck {
        let mut check = CanonicalCheck::new(source, read_unconfirmed);
        check.ahead_wait = Duration::from_millis(300);
        check
    }

    #[tokio::test]
    async fn nothing_the_source_cannot_confirm_is_read() {
        let (h1, h2) = (B256::repeat_byte(1), B256::repeat_byte(2));
        let strict = check(source(vec![(1, h1)], false), false);
        assert_eq!(strict.check(7, 1, Some(h1)).await, Ok(()));
        assert!(matches!(
            strict.check(7, 1, Some(h2)).await,
            Err(ReadError::NotCanonical { .. })
        ));
        assert_eq!(
            strict.check(8, 1, Some(h1)).await,
            Err(ReadError::OtherChain {
                chain: 7,
                catalog: vec![8]
            })
        );
        assert_eq!(
            strict.check(7, 1, None).await,
            Err(ReadError::Unbound { block: 1 })
        );
        // Ahead of the source: waited for, then refused.
        let started = std::time::Instant::now();
        let ahead = strict.check(7, 2, Some(h2)).await;
        assert!(
            matches!(ahead, Err(ReadError::Unconfirmed { block: 2, .. })),
            "{ahead:?}"
        );
        assert!(started.elapsed() >= Duration::from_millis(250));
        let down = check(source(vec![], true), false);
        assert!(matches!(
            down.check(7, 1, Some(h1)).await,
            Err(ReadError::Unconfirmed { .. })
        ));

        // Read all the same only when so set; never a contradicted view.
        let lax = check(source(vec![(1, h1)], false), true);
        assert_eq!(lax.check(7, 1, None).await, Ok(()));
        assert_eq!(lax.check(7, 2, Some(h2)).await, Ok(()));
        assert!(lax.check(7, 1, Some(h2)).await.is_err());
        assert!(lax.check(8, 1, Some(h1)).await.is_err());
        let lax_down = check(source(vec![], true), true);
        assert_eq!(lax_down.check(7, 1, Some(h1)).await, Ok(()));
    }

    /// The blocks of a source that changes: `None` while it is down.
    type Blocks = Arc<Mutex<Option<Vec<(u64, B256)>>>>;

    /// A source whose blocks change (reorgs) and that can go down.
    fn changing(blocks: Blocks) -> HeaderSource {
        HeaderSource {
            chain_id: Arc::new(|| Box::pin(async { Ok(7) })),
            block_hash: Arc::new(move |n| {
                let blocks = blocks.lock().unwrap().clone();
                Box::pin(async move {
                    let blocks = blocks.ok_or("connection refused")?;
                    Ok(blocks.iter().find(|b| b.0 == n).map(|b| b.1))
                })
            }),
        }
    }

    #[tokio::test]
    async fn a_view_reorged_away_after_its_confirmation_is_not_read() {
        let (h1, h2) = (B256::repeat_byte(1), B256::repeat_byte(2));
        let blocks = Arc::new(Mutex::new(Some(vec![(1, h1), (2, h2)])));
        let strict = check(changing(blocks.clone()), false);
        assert_eq!(strict.check(7, 2, Some(h2)).await, Ok(()));
        // The source down: the last confirmation stands.
        *blocks.lock().unwrap() = None;
        assert_eq!(strict.check(7, 2, Some(h2)).await, Ok(()));
        // Block 2 reorged away (to a shorter chain): not read at once.
        *blocks.lock().unwrap() = Some(vec![(1, h1)]);
        let started = std::time::Instant::now();
        assert!(matches!(
            strict.check(7, 2, Some(h2)).await,
            Err(ReadError::Unconfirmed { block: 2, .. })
        ));
        assert!(
            started.elapsed() < Duration::from_millis(250),
            "not waited for"
        );
        // Replaced by another block 2: contradicted.
        let other = B256::repeat_byte(3);
        *blocks.lock().unwrap() = Some(vec![(1, h1), (2, other)]);
        assert!(matches!(
            strict.check(7, 2, Some(h2)).await,
            Err(ReadError::NotCanonical { block: 2, .. })
        ));
        // Once contradicted, an outage does not bring it back.
        *blocks.lock().unwrap() = None;
        assert!(strict.check(7, 2, Some(h2)).await.is_err());
        // Confirmed again when the source has it again.
        *blocks.lock().unwrap() = Some(vec![(2, h2)]);
        assert_eq!(strict.check(7, 2, Some(h2)).await, Ok(()));
    }
}
