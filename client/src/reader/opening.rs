//! Opening and keeping levels: setups, whole tables, code tables and the
//! hot tier, each downloaded once and held.

use super::*;

impl PrivateReader {
    /// Downloads ahead, in the background, the codes the manifest of a
    /// base lists as its most common (at most `prefetch_codes`), so that
    /// an `eth_getCode` of one of them asks the server nothing.
    pub(super) fn prefetch_codes(&self, entry: &CatalogEntry) {
        let (Some(table), n) = (entry.manifest.codes, self.prefetch_codes) else {
            return;
        };
        let places: Vec<u32> = entry
            .manifest
            .common_codes
            .iter()
            .take(n)
            .copied()
            .collect();
        if places.is_empty() {
            return;
        }
        let (codes, link, level) = (self.codes.clone(), self.link.clone(), entry.id.url_form());
        tokio::spawn(async move {
            let fetched = codes.prefetch(&link, &level, &table, &places).await;
            tracing::debug!(snapshot = %level, fetched, "common codes prefetched");
        });
    }

    /// Clients for every level of `view`, loading setups not loaded yet.
    pub(super) async fn open_view(&self, view: View) -> Result<ViewClient, ReadError> {
        let adopted = self.catalog.adopted();
        let needed: u64 = view
            .snapshots
            .iter()
            .filter_map(|id| adopted.entries.get(id))
            .map(crate::levels::opening_bytes)
            .fold(0, u64::saturating_add);
        if needed > self.max_view_bytes {
            return Err(ReadError::Unreadable {
                snapshot: view.snapshots.last().map(|id| id.url_form()).unwrap_or_default(),
                why: format!(
                    "its view's {} levels need {} MiB of setup data and tables, over max_view_setup_mib ({} MiB)",
                    view.snapshots.len(),
                    needed >> 20,
                    self.max_view_bytes >> 20
                ),
            });
        }
        drop(adopted);
        let mut levels = Vec::with_capacity(view.snapshots.len());
        for id in &view.snapshots {
            levels.push(self.open(id).await?);
        }
        let hot = match self.hot_tier {
            crate::config::HotTierUse::Ahead => self.open_hot(&levels).await,
            crate::config::HotTierUse::Off => None,
        };
        Ok(ViewClient { view, levels, hot })
    }

    /// The hot tier standing on one of `levels` ([`protocol::view::hot_for`]),
    /// held whole. `None` when there is none, or it cannot be had now (the
    /// view is then read by PIR as without one); a table that fails its
    /// digest stops private reads, as any level's.
    pub(super) async fn open_hot(&self, levels: &[Level]) -> Option<crate::levels::HotTier> {
        let manifests: Vec<&protocol::Manifest> =
            levels.iter().map(|l| &l.entry().manifest).collect();
        let (entry, on) = self.hot_standing(&manifests)?;
        if let Some(Level::Whole(level)) = self.loaded(&entry.id) {
            return Some(crate::levels::HotTier { level, on });
        }
        // Only whole, within the budgets a view's levels have: a tier is
        // never opened by PIR (its setup is not needed).
        let bytes = entry.manifest.files.get(crate::levels::TABLE_FILE)?.bytes;
        let view_bytes = levels
            .iter()
            .map(|l| crate::levels::opening_bytes(l.entry()))
            .fold(bytes, u64::saturating_add);
        let failed = *self.hot_failed.lock().expect("lock");
        let recently = failed.is_some_and(|(id, at)| id == entry.id && at.elapsed() < HOT_RETRY);
        if bytes > self.limits.max_setup_bytes || view_bytes > self.max_view_bytes || recently {
            return None;
        }
        // Being downloaded: read by PIR meanwhile rather than wait for it
        // (a server may stall it). A started reader downloads it in a task
        // of its own; one not shared yet, here.
        if self.opening_now(&entry.id) {
            return None;
        }
        if let Some(me) = self.me.get().cloned() {
            let id = entry.id;
            tokio::spawn(async move {
                if let Some(reader) = me.upgrade() {
                    reader.load_hot(id).await;
                }
            });
            return None;
        }
        match self.load_hot(entry.id).await {
            Some(Level::Whole(level)) => Some(crate::levels::HotTier { level, on }),
            _ => None,
        }
    }

    /// Downloads the hot tier `id`; a failure is remembered (not tried
    /// again for [`HOT_RETRY`]).
    pub(super) async fn load_hot(&self, id: SnapshotId) -> Option<Level> {
        match self.open(&id).await {
            Ok(level) => Some(level),
            Err(e) => {
                tracing::info!(snapshot = %id.url_form(), error = %e, "hot tier not loaded: its keys are read by PIR");
                *self.hot_failed.lock().expect("lock") = Some((id, std::time::Instant::now()));
                None
            }
        }
    }

    /// The hot tier `view` reads, if the reader uses one and it has
    /// loaded it.
    pub fn hot_of(&self, view: &View) -> Option<CatalogEntry> {
        if self.hot_tier == crate::config::HotTierUse::Off {
            return None;
        }
        let entries: Vec<CatalogEntry> = view
            .snapshots
            .iter()
            .filter_map(|id| self.entry(id))
            .collect();
        let manifests: Vec<&protocol::Manifest> = entries.iter().map(|e| &e.manifest).collect();
        let (hot, _) = self.hot_standing(&manifests)?;
        self.loaded(&hot.id).map(|l| l.entry().clone())
    }

    /// The catalog's hot tier standing on one of a view's levels
    /// (`levels`, base first), and the index of that level.
    pub(super) fn hot_standing(
        &self,
        levels: &[&protocol::Manifest],
    ) -> Option<(CatalogEntry, usize)> {
        let adopted = self.catalog.adopted();
        let (entry, on) = protocol::view::hot_for(levels, adopted.entries.values())?;
        Some((entry.clone(), on))
    }

    pub(super) fn loaded(&self, id: &SnapshotId) -> Option<Level> {
        self.snapshots.read().expect("lock").get(id).cloned()
    }

    /// Whether `id` is being opened (its download under way) now.
    pub(super) fn opening_now(&self, id: &SnapshotId) -> bool {
        let opening = self.opening.lock().expect("opening");
        opening.get(id).is_some_and(|lock| lock.try_lock().is_err())
    }

    /// The client of one listed snapshot, its setup (or table) loaded if
    /// need be.
    pub(super) async fn open(&self, id: &SnapshotId) -> Result<Level, ReadError> {
        if let Some(level) = self.loaded(id) {
            return Ok(level);
        }
        let lock = {
            let mut opening = self.opening.lock().expect("opening");
            // Levels no one is opening now are forgotten.
            opening.retain(|_, lock| Arc::strong_count(lock) > 1);
            opening.entry(*id).or_default().clone()
        };
        let _one_at_a_time = lock.lock().await;
        if let Some(level) = self.loaded(id) {
            return Ok(level);
        }
        let entry = self
            .catalog
            .entry(id)
            .ok_or_else(|| ReadError::Retired(id.url_form()))?;
        let held = match self.cached_table(&entry).await {
            Some(table) => Some(table),
            None => self.built_here(&entry).await,
        };
        let level = match held {
            Some(table) => Level::Whole(table),
            None => match whole_table_bytes(&entry) {
                Some(bytes) if bytes <= self.limits.max_setup_bytes => {
                    Level::Whole(self.open_whole(entry, bytes).await?)
                }
                _ => {
                    self.prefetch_codes(&entry);
                    let snap = self.open_snapshot(entry).await?;
                    tokio::spawn(refill(Arc::downgrade(&snap)));
                    Level::Pir(snap)
                }
            },
        };
        self.hold_code_table(level.entry());
        tracing::info!(snapshot = %id.url_form(), read = ?level.mode(), "private snapshot ready");
        self.snapshots
            .write()
            .expect("lock")
            .insert(*id, level.clone());
        Ok(level)
    }

    /// A delta's whole code table, downloaded in the background when the
    /// level is opened (every client alike, read or not), so that reading
    /// a code of one of its accounts names no level (see [`crate::code`]).
    pub(super) fn hold_code_table(&self, entry: &CatalogEntry) {
        let Some(summary) = crate::code::delta_code_table(entry) else {
            return;
        };
        if self.codes.holds_table(&entry.id.url_form(), summary.root) {
            return;
        }
        let (codes, link, id) = (self.codes.clone(), self.link.clone(), entry.id);
        let most = self.limits.max_setup_bytes;
        tokio::spawn(async move {
            if let Err(e) = codes.hold_table(&link, &id, &summary, most).await {
                tracing::debug!(snapshot = %id.url_form(), error = %e, "code table not held yet");
            }
        });
    }

    /// The code tables of every delta loaded that lacks one, fetched now
    /// (all of them, so the fetch names no level); the first error.
    pub(super) async fn hold_missing_code_tables(&self) -> Result<(), ReadError> {
        let mut first = Ok(());
        for level in self.snapshots() {
            let entry = level.entry();
            let Some(summary) = crate::code::delta_code_table(entry) else {
                continue;
            };
            let most = self.limits.max_setup_bytes;
            let held = self
                .codes
                .hold_table(&self.link, &entry.id, &summary, most)
                .await;
            if first.is_ok() {
                first = held;
            }
        }
        first
    }

    /// A level's table already in the disk cache (downloaded, or built
    /// here, before a restart), whatever its size against its setup.
    pub(super) async fn cached_table(&self, entry: &CatalogEntry) -> Option<Arc<WholeLevel>> {
        let file = entry.manifest.files.get(crate::levels::TABLE_FILE)?;
        if file.bytes > self.limits.max_setup_bytes {
            return None;
        }
        let bytes = self.cache.cached(Artifact::Table, &file.sha3_256).await?;
        let table = protocol::table::Table::parse(bytes, self.limits.max_setup_bytes).ok()?;
        Some(Arc::new(WholeLevel {
            entry: entry.clone(),
            table,
            mode: ReadMode::Whole,
        }))
    }

    /// A merged delta's table built here from the levels it merges, when
    /// that costs fewer downloaded bytes than its table or setup: a reader
    /// that follows the head holds the small deltas whole already, so each
    /// merge above them costs it nothing (and is read with no query). The
    /// table built is the one published only if its digest is the
    /// manifest's; anything else (another value width, a piece retired
    /// meanwhile) leaves the level to be downloaded as before.
    pub(super) async fn built_here(&self, entry: &CatalogEntry) -> Option<Arc<WholeLevel>> {
        let file = entry.manifest.files.get(crate::levels::TABLE_FILE)?.clone();
        if file.bytes > self.limits.max_setup_bytes {
            return None;
        }
        let direct = whole_table_bytes(entry).unwrap_or(entry.manifest.pir.hint_bytes);
        let held: BTreeMap<SnapshotId, Arc<WholeLevel>> = self
            .snapshots
            .read()
            .expect("lock")
            .iter()
            .filter_map(|(id, level)| match level {
                Level::Whole(w) => Some((*id, w.clone())),
                Level::Pir(_) => None,
            })
            .collect();
        let adopted = self.catalog.adopted();
        let (chain, cost) =
            cheapest_cover(entry, adopted.entries.values(), |id| held.contains_key(id))?;
        if cost >= direct {
            return None;
        }
        let mut pieces = Vec::with_capacity(chain.len());
        for id in &chain {
            let piece = match held.get(id) {
                Some(w) => w.clone(),
                None => self.open_piece(id).await?,
            };
            pieces.push(piece);
        }
        let expected = file.clone();
        let built = tokio::task::spawn_blocking(move || {
            let tables: Vec<&protocol::table::Table> = pieces.iter().map(|w| &w.table).collect();
            let bytes = protocol::table::overlay(&tables)?;
            let matches = bytes.len() as u64 == expected.bytes
                && protocol::sha3_hex(&bytes) == expected.sha3_256;
            matches.then_some(bytes)
        })
        .await
        .ok()?;
        let Some(bytes) = built else {
            tracing::debug!(snapshot = %entry.id.url_form(), "the levels it merges do not make its table; downloading it");
            return None;
        };
        self.cache
            .keep(Artifact::Table, &file.sha3_256, &bytes)
            .await;
        let table = protocol::table::Table::parse(bytes, self.limits.max_setup_bytes).ok()?;
        Some(Arc::new(WholeLevel {
            entry: entry.clone(),
            table,
            mode: ReadMode::Merged,
        }))
    }

    /// A piece of a merge not held yet: its table downloaded (or read from
    /// the cache) and kept as a level of its own. `None` when it cannot
    /// be had (the merge is then downloaded instead).
    pub(super) async fn open_piece(&self, id: &SnapshotId) -> Option<Arc<WholeLevel>> {
        let entry = self.catalog.entry(id)?;
        let bytes = entry.manifest.files.get(crate::levels::TABLE_FILE)?.bytes;
        if bytes > self.limits.max_setup_bytes {
            return None;
        }
        self.hold_code_table(&entry);
        match self.open_whole(entry, bytes).await {
            Ok(piece) => {
                self.snapshots
                    .write()
                    .expect("lock")
                    .entry(*id)
                    .or_insert_with(|| Level::Whole(piece.clone()));
                Some(piece)
            }
            Err(e) => {
                tracing::debug!(snapshot = %id.url_form(), error = %e, "a piece of a merge not loaded");
                None
            }
        }
    }

    /// Downloads (or reads from the cache) a level's table of exactly
    /// `bytes`, checked against the digest its manifest lists.
    pub(super) async fn open_whole(
        &self,
        entry: CatalogEntry,
        bytes: u64,
    ) -> Result<Arc<WholeLevel>, ReadError> {
        let digest = entry.manifest.files[crate::levels::TABLE_FILE]
            .sha3_256
            .clone();
        let table_bytes = self
            .cache
            .verified(
                &self.link,
                &entry,
                Artifact::Table,
                &digest,
                Size::Exactly(bytes),
            )
            .await?;
        let max_entries = self.limits.max_setup_bytes;
        let table = protocol::table::Table::parse(table_bytes, max_entries).map_err(|e| {
            self.link
                .distrust(format!("snapshot {}: table: {e}", entry.id.url_form()))
        })?;
        Ok(Arc::new(WholeLevel {
            entry,
            table,
            mode: ReadMode::Whole,
        }))
    }

    pub(super) async fn open_snapshot(
        &self,
        entry: CatalogEntry,
    ) -> Result<Arc<SnapshotClient>, ReadError> {
        let announced = entry.manifest.pir.hint_bytes;
        let limit = self.limits.max_setup_bytes;
        if announced > limit {
            return Err(self.link.distrust(format!(
                "snapshot {} announces {announced} bytes of setup data, over the limit of {limit}",
                entry.id.url_form()
            )));
        }
        let digest = entry.manifest.pir.setup_digest.clone();
        let bytes = self
            .cache
            .verified(
                &self.link,
                &entry,
                Artifact::Setup,
                &digest,
                // (The manifest's setup length: more is a lie, and the
                // download's deadline is its size's.)
                Size::AtMost(announced),
            )
            .await?;
        let limits = self.limits;
        let client = tokio::task::spawn_blocking(move || {
            PirClient::from_setup_bytes_limited(&bytes, &limits)
        })
        .await
        .map_err(|e| ReadError::Backend(format!("loading a setup failed: {e}")))?
        .map_err(|e| {
            self.link
                .distrust(format!("snapshot {}: {e}", entry.id.url_form()))
        })?;
        // The setup's public matrix seed is drawn from the manifest's
        // fields that decide decoding (protocol::manifest::BuildSeeds): a
        // manifest changed after the build names another one.
        let seeds = entry.manifest.build_seeds();
        if client.setup().matrix.seed() != &seeds.matrix.0 {
            return Err(self.link.distrust(format!(
                "snapshot {}: its setup was not built for this manifest (its format, contracts held, code table, table or records digest, chain, block, block hash or kind were changed)",
                entry.id.url_form()
            )));
        }
        let first_fill = self
            .largest_request
            .load(std::sync::atomic::Ordering::Relaxed);
        Ok(Arc::new(SnapshotClient::new(
            entry,
            client,
            self.pool_size,
            first_fill,
        )))
    }
}
