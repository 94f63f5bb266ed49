//! The catalog kept fresh (polled, or waited for where the server holds
//! catalog requests), the chain bound, and a block selector's view chosen.

use super::*;

impl PrivateReader {
    /// Fetches the catalog (a 304 when unchanged), drops clients of
    /// vanished snapshots and loads the newest view's setups. Returns how
    /// many snapshots the catalog lists.
    pub async fn refresh(&self) -> Result<usize, ReadError> {
        self.refresh_with(false).await
    }

    /// [`Self::refresh`]; `force` adopts a catalog even if it is behind
    /// the one adopted (see [`Catalog::adopt`]).
    pub(super) async fn refresh_with(&self, force: bool) -> Result<usize, ReadError> {
        let listed = self.refresh_catalog(force).await?;
        if let Some(view) = self.catalog.newest() {
            if let Err(e) = self.open_view(view).await {
                tracing::warn!(error = %e, "newest view not loaded");
            }
        }
        Ok(listed)
    }

    /// Fetches and adopts the catalog, and drops the levels it no longer
    /// lists; loads nothing. Returns how many snapshots it lists.
    pub(super) async fn refresh_catalog(&self, force: bool) -> Result<usize, ReadError> {
        let one_at_a_time = self.refreshing.lock().await;
        *self.last_catalog.lock().expect("lock") = Some(std::time::Instant::now());
        let judged = match self.catalog.fetch(&self.link).await? {
            Some(fetched) => Some(self.catalog.judge(fetched).await?),
            None => None,
        };
        if let Some(adopted) = judged.and_then(|body| self.catalog.adopt(body, force)) {
            self.snapshots.write().expect("lock").retain(|id, s| {
                adopted
                    .entries
                    .get(id)
                    .is_some_and(|e| e.manifest == s.entry().manifest)
            });
            self.codes.retain_tables(|level| {
                level
                    .parse::<SnapshotId>()
                    .is_ok_and(|id| adopted.entries.contains_key(&id))
            });
            self.answers.retain(|digest| {
                adopted
                    .entries
                    .values()
                    .any(|e| e.manifest.pir.setup_digest == *digest)
            });
        }
        drop(one_at_a_time);
        Ok(self.catalog.len())
    }

    /// Reads a view only when `source` confirms it (its chain, its block
    /// hash at its number): see [`crate::canonical`]. The reader is bound
    /// to the source's chain as soon as it says which (the catalog's
    /// entries of other chains set aside). Set once; a second call is
    /// ignored.
    pub fn check_blocks_with(self: &Arc<Self>, source: crate::canonical::HeaderSource) {
        let check = crate::canonical::CanonicalCheck::new(source, self.read_unconfirmed);
        if self.canonical.set(Arc::new(check)).is_err() {
            return;
        }
        tokio::spawn(bind_to_source_chain(Arc::downgrade(self)));
    }

    /// The view a block selector names, every level loaded; with a header
    /// source, only if the source confirms it.
    pub async fn select(&self, sel: &BlockSelector) -> Result<ViewClient, ReadError> {
        self.select_as(sel, Waking::Yes).await
    }

    pub(super) async fn select_as(
        &self,
        sel: &BlockSelector,
        waking: Waking,
    ) -> Result<ViewClient, ReadError> {
        if waking == Waking::Yes {
            *self.last_selector.lock().expect("lock") = sel.clone();
        }
        let lagging = self.loaded_view_within_lag(sel);
        if waking == Waking::Yes && self.wake() && lagging.is_none() {
            // Back from idle: the catalog as it is now, and its newest
            // view loaded, before the answer.
            if let Err(e) = self.refresh().await {
                tracing::debug!(error = %e, "catching up from idle failed");
            }
        }
        let view = match lagging {
            Some(view) => view,
            None => self.catalog.view_for(sel)?,
        };
        if let Some(check) = self.canonical.get() {
            let hash = view
                .snapshots
                .last()
                .and_then(|id| self.catalog.block_hash(id));
            check.check(view.chain_id, view.block, hash).await?;
        }
        self.open_view(view).await
    }

    /// For `latest` with a `max_lag`: the newest view whose levels are all
    /// loaded, when it is at most that many blocks older than the
    /// catalog's newest.
    pub(super) fn loaded_view_within_lag(&self, sel: &BlockSelector) -> Option<View> {
        let (BlockSelector::Newest, Some(lag)) = (sel, self.idle.max_lag) else {
            return None;
        };
        let newest = self.catalog.newest()?.block;
        let loaded = self.snapshots.read().expect("lock");
        self.views()
            .into_iter()
            .rev()
            .take_while(|v| v.block.saturating_add(lag) >= newest)
            .find(|v| v.snapshots.iter().all(|id| loaded.contains_key(id)))
    }
}

/// Fetches the catalog every `every` until the reader is dropped; with
/// `first_of` (the server's redacted URL) the first fetch is at once and
/// its outcome said at info (a server not reachable yet is retried on the
/// same beat).
pub(super) async fn keep_fresh(
    reader: Weak<PrivateReader>,
    every: std::time::Duration,
    first_of: Option<String>,
) {
    let mut tick = tokio::time::interval(every);
    // A fetch slower than the beat (a slow server) delays the next one
    // instead of a burst of them.
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut first = first_of;
    if first.is_none() {
        tick.tick().await;
    }
    // Whether the last refresh after a wait fetched nothing new (then
    // the next round polls: a server whose waits end at once on a
    // catalog this reader does not adopt costs a poll's rate).
    let mut stalled = false;
    loop {
        // While reading, a server that holds catalog requests tells of a
        // new catalog the moment it has one (and every wait's end brings
        // a refresh too); polled otherwise (and idle).
        let waited = match stalled {
            false => wait_for_catalog(&reader).await,
            true => None,
        };
        if waited.is_none() {
            tick.tick().await;
        }
        let Some(reader) = reader.upgrade() else {
            return;
        };
        let seen = reader.catalog.seen_etag();
        // Idle: the catalog now and then, nothing loaded.
        let refreshed = match reader.is_idle() {
            true if !reader.idle_catalog_due() => continue,
            true => reader.refresh_catalog(false).await,
            false => reader.refresh().await,
        };
        match (refreshed, first.take()) {
            (Ok(n), Some(server)) => {
                tracing::info!(snapshots = n, %server, "connected to the PIR server")
            }
            (Err(e), Some(server)) => {
                tracing::warn!(error = %e, %server, "PIR server not reachable yet; retrying in the background")
            }
            (Ok(_), None) => {}
            (Err(e), None) => tracing::warn!(error = %e, "catalog refresh failed"),
        }
        stalled = waited == Some(true) && reader.catalog.seen_etag() == seen;
    }
}

/// How long a wait for a new catalog is held at most.
const CATALOG_HOLD: std::time::Duration = std::time::Duration::from_secs(20);

/// Waits for the server to announce a new catalog
/// ([`Catalog::wait_for_change`]) while the reader is not idle: whether
/// one came; `None` to poll instead. Two waits are at least 50 ms apart
/// (a server that answers "changed" at once costs a bounded rate).
async fn wait_for_catalog(reader: &Weak<PrivateReader>) -> Option<bool> {
    let strong = reader.upgrade()?;
    if strong.is_idle() {
        return None;
    }
    let started = std::time::Instant::now();
    let changed = strong
        .catalog
        .wait_for_change(&strong.link, CATALOG_HOLD)
        .await;
    drop(strong);
    let spacing = std::time::Duration::from_millis(50);
    if let Some(rest) = spacing.checked_sub(started.elapsed()) {
        tokio::time::sleep(rest).await;
    }
    changed
}

/// Binds the reader to its header source's chain once the source says
/// which (asked again a little later each time it does not answer), and
/// adopts the catalog again with other chains set aside.
pub(super) async fn bind_to_source_chain(reader: Weak<PrivateReader>) {
    for attempt in 0.. {
        let Some(strong) = reader.upgrade() else {
            return;
        };
        let Some(check) = strong.canonical.get().cloned() else {
            return;
        };
        match check.chain().await {
            Ok(chain) => {
                if strong.catalog.bind_chain(chain) {
                    tracing::info!(chain, "reading the upstream's chain");
                    if let Err(e) = strong.refresh_with(true).await {
                        tracing::debug!(error = %e, "catalog not fetched again yet");
                    }
                }
                return;
            }
            Err(e) => tracing::debug!(error = %e, "the upstream's chain id not known yet"),
        }
        drop(strong);
        let (base, cap) = (
            std::time::Duration::from_millis(200),
            std::time::Duration::from_secs(30),
        );
        tokio::time::sleep(protocol::retry::backoff(base, cap, attempt)).await;
    }
}
