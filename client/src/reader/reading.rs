//! Reading a call's keys: lookups of accounts, codes and slots at a view,
//! answered from the tier, kept answers or PIR queries.

use super::*;

impl PrivateReader {
    /// Reads accounts at the block `sel` names: one result per address.
    pub async fn lookup(
        &self,
        sel: &BlockSelector,
        addresses: &[Address],
    ) -> Vec<Result<AccountState, ReadError>> {
        let keys: Vec<ReadKey> = addresses.iter().map(|a| ReadKey::Account(*a)).collect();
        self.lookup_keys(sel, &keys)
            .await
            .into_iter()
            .map(|r| {
                r.map(|state| match state {
                    KeyState::Account(a) => a,
                    KeyState::Slot(_) => unreachable!("an account key reads an account"),
                })
            })
            .collect()
    }

    /// The code of an account read privately ([`Self::lookup`]): none,
    /// or its bytes, proved against the level's code table and checked by
    /// their hash (see [`crate::code`]).
    pub async fn code_of(
        &self,
        account: &AccountState,
    ) -> Result<alloy_primitives::Bytes, ReadError> {
        if let Some(reason) = self.distrusted() {
            return Err(ReadError::Distrusted(reason));
        }
        let held =
            |t: &protocol::codes::CodeTable| self.codes.holds_table(&account.snapshot, t.root);
        if crate::code::is_delta(&account.snapshot)
            && !account.code_table.as_ref().is_some_and(held)
        {
            // Not downloaded in the background yet (or it failed): every
            // missing one now.
            self.hold_missing_code_tables().await?;
        }
        self.codes.code_of(&self.link, account).await
    }

    /// Reads storage slots `(contract, slot)` at the block `sel` names:
    /// one result per slot. A contract whose storage the view does not
    /// hold is [`ReadError::NotListed`] (nothing about it is sent).
    pub async fn lookup_slots(
        &self,
        sel: &BlockSelector,
        slots: &[(Address, B256)],
    ) -> Vec<Result<SlotState, ReadError>> {
        let keys: Vec<ReadKey> = slots
            .iter()
            .map(|(contract, slot)| ReadKey::Slot {
                contract: *contract,
                slot: *slot,
            })
            .collect();
        self.lookup_keys(sel, &keys)
            .await
            .into_iter()
            .map(|r| {
                r.map(|state| match state {
                    KeyState::Slot(s) => s,
                    KeyState::Account(_) => unreachable!("a slot key reads a slot"),
                })
            })
            .collect()
    }

    /// Reads accounts and slots at the block `sel` names, together (one
    /// request per batch): one result per key.
    ///
    /// When a level of the view was retired in the meantime (a merge, a
    /// reorg), or the block asked for is newer than the catalog's newest
    /// (behind a load balancer, a replica still picking up a snapshot
    /// another replica already listed), the catalog is fetched again and
    /// the lookup repeated: at most [`CATALOG_RETRIES`] times, a little
    /// longer apart each time (1.5 s in all), since replicas pick up a
    /// snapshot within their rescan interval.
    pub async fn lookup_keys(
        &self,
        sel: &BlockSelector,
        keys: &[ReadKey],
    ) -> Vec<Result<KeyState, ReadError>> {
        self.lookup_keys_as(sel, keys, Waking::Yes).await
    }

    pub(super) async fn lookup_keys_as(
        &self,
        sel: &BlockSelector,
        keys: &[ReadKey],
        waking: Waking,
    ) -> Vec<Result<KeyState, ReadError>> {
        let mut attempt = 0;
        loop {
            let results = match self.select_as(sel, waking).await {
                Ok(view) => self.read(&view, keys).await,
                Err(e) => all_failed(keys.len(), &e),
            };
            let retired = results
                .iter()
                .any(|r| matches!(r, Err(ReadError::Retired(_))));
            let ahead = results.iter().any(|r| ahead_of_catalog(sel, r));
            if !(retired || ahead) || attempt == CATALOG_RETRIES {
                return results;
            }
            attempt += 1;
            tracing::debug!(
                retired,
                ahead,
                "view not in this catalog; fetching it again"
            );
            tokio::time::sleep(std::time::Duration::from_millis(100 * attempt as u64)).await;
            // A retired level is first retried on the catalog as it is
            // (a lagging replica catches up within its rescan); only then
            // is an older catalog forced on (a reorg removed levels).
            if let Err(e) = self.refresh_with(retired && attempt >= 3).await {
                return all_failed(keys.len(), &e);
            }
        }
    }

    /// Reads keys privately from every level of one view, in as few
    /// requests as the server's batch limit allows. One result per key.
    /// A wide storage word (format 4) is read whole: its high part in one
    /// more request, after the value that says so. Every key is read as
    /// if no hot tier held it (see [`Self::read_sharing`]).
    pub async fn read(
        &self,
        view: &ViewClient,
        keys: &[ReadKey],
    ) -> Vec<Result<KeyState, ReadError>> {
        self.read_sharing(view, keys, &vec![false; keys.len()])
            .await
    }

    /// [`Self::read`], where the keys marked in `shared` (one flag per
    /// key) may be read from the hot tier: keys that do not name the
    /// wallet (a pool's reserves, a token's supply, a proxy's
    /// implementation slot). Every other key is asked of every PIR level
    /// whether or not the tier holds it, so that what the server sees
    /// never depends on whether its tier holds the wallet's keys: a
    /// server that chose a tier holding a candidate's account and slots
    /// would otherwise see that wallet's requests shrink.
    pub async fn read_sharing(
        &self,
        view: &ViewClient,
        keys: &[ReadKey],
        shared: &[bool],
    ) -> Vec<Result<KeyState, ReadError>> {
        let mut out = self.read_values(view, keys, shared).await;
        let wide: Vec<(usize, ReadKey)> = out
            .iter()
            .zip(keys)
            .enumerate()
            .filter_map(|(i, (result, key))| match (result, key) {
                (Ok(KeyState::Slot(s)), ReadKey::Slot { contract, slot }) if s.low_part => {
                    let high = ReadKey::HighPart {
                        contract: *contract,
                        slot: *slot,
                    };
                    Some((i, high))
                }
                _ => None,
            })
            .collect();
        if wide.is_empty() {
            return out;
        }
        let high_keys: Vec<ReadKey> = wide.iter().map(|(_, k)| *k).collect();
        let high_shared: Vec<bool> = wide.iter().map(|(i, _)| shared[*i]).collect();
        let highs = self.read_values(view, &high_keys, &high_shared).await;
        for ((i, _), high) in wide.into_iter().zip(highs) {
            let low = std::mem::replace(&mut out[i], Err(ReadError::Backend(String::new())));
            out[i] = join_high_part(low, high);
        }
        out
    }

    /// [`ViewClient::freshest`] of a key that names no one: where the
    /// tier was found forging it, the levels' value instead (with the
    /// request it had: the wire unchanged), an account's code still the
    /// tier's reference (which code is not compared; the levels' would
    /// cost a download the tier spared). Where that value cannot be had
    /// without a request more (a wide word's high part), or at all, or
    /// an account would gain or lose code, the tier's: a value the tier
    /// gave is noted ([`cover::count_from_tier`]), so that a call that
    /// read one found forged runs again or is withheld.
    fn freshest_shared(
        &self,
        view: &ViewClient,
        found: &[Vec<Found>],
        i: usize,
        key: &ReadKey,
    ) -> Result<KeyState, ReadError> {
        let corrected = self
            .correction(view, key)
            .and_then(|levels| view.freshest_corrected(found, i, key, &levels));
        // (The tier's value is decoded only where it is used: one that
        // does not decode, a forger's, never hides a correction.)
        let tier = view.freshest_from(found, i, key);
        let has_code = |a: &AccountState| a.code != protocol::CodeRef::None;
        match (corrected, tier) {
            (Some(KeyState::Slot(s)), _) if !s.low_part => Ok(KeyState::Slot(s)),
            (Some(KeyState::Account(mut a)), Ok((KeyState::Account(t), _)))
                if has_code(&a) == has_code(&t) =>
            {
                (a.code, a.code_table, a.snapshot) = (t.code, t.code_table, t.snapshot);
                Ok(KeyState::Account(a))
            }
            // The tier's account does not even decode: the levels', its
            // code theirs; noted, so that the call runs again over it.
            (Some(KeyState::Account(a)), Err(_)) => {
                cover::count_from_tier(*key);
                Ok(KeyState::Account(a))
            }
            (_, Ok((tier, from_tier))) => {
                if from_tier {
                    cover::count_from_tier(*key);
                }
                Ok(tier)
            }
            (_, Err(e)) => Err(e),
        }
    }

    /// The most keys a request asks, and the query count it is padded to
    /// (0: none): a request has at most the server's batch of queries,
    /// exactly `pad_batches_to` when padding; room is left for the
    /// canaries.
    pub(super) fn request_limits(&self) -> (usize, usize) {
        let max_batch = self.catalog.max_batch();
        let canaries = self.canaries_per_request;
        match self.pad_to > 1 {
            true => {
                let total = self.pad_to.min(max_batch);
                (total.saturating_sub(canaries).max(1), total)
            }
            false => (max_batch.saturating_sub(canaries).max(1), 0),
        }
    }

    /// [`Self::read`] without completing wide words.
    pub(super) async fn read_values(
        &self,
        view: &ViewClient,
        keys: &[ReadKey],
        shared: &[bool],
    ) -> Vec<Result<KeyState, ReadError>> {
        let (per_batch, pad_to) = self.request_limits();
        let mut out = Vec::with_capacity(keys.len());
        for (chunk, shared) in keys.chunks(per_batch).zip(shared.chunks(per_batch)) {
            if let Some(reason) = self.distrusted() {
                out.extend(all_failed(chunk.len(), &ReadError::Distrusted(reason)));
                continue;
            }
            let results = match self.read_batch(view, chunk, shared, pad_to).await {
                Ok(results) => results,
                Err(e) => all_failed(chunk.len(), &e),
            };
            // A failed verification anywhere fails the whole batch, and
            // every read after it (fail closed).
            let failed = results.iter().find_map(|r| match r {
                Err(ReadError::Unverifiable(why)) => Some(why.clone()),
                _ => None,
            });
            match failed {
                Some(why) => {
                    self.forget_answers_of(view);
                    out.extend(all_failed(chunk.len(), &self.link.distrust(why)))
                }
                None => out.extend(results),
            }
        }
        out
    }

    /// One request: the same queries (the keys not answered before, the
    /// canaries, then random fillers up to `pad_to` when padding) to every
    /// PIR level of the view, in a random order; none at all when every
    /// PIR level answered every key before (see [`crate::answers`]). What
    /// the server sees never depends on the keys' kind or on the level
    /// that holds them, but for the hot tier: a `shared` key it holds (a
    /// set every client downloads) goes in a request of its own, to the
    /// PIR levels above the tier only (none, when the tier stands on the
    /// newest PIR level); a key that names the wallet is read as if no
    /// tier held it. A key the view cannot hold (a slot of a contract
    /// it does not list) is replaced by a random one, and answered with
    /// why.
    pub(super) async fn read_batch(
        &self,
        view: &ViewClient,
        asked: &[ReadKey],
        shared: &[bool],
        pad_to: usize,
    ) -> Result<Vec<Result<KeyState, ReadError>>, ReadError> {
        let held: Vec<Result<(), ReadError>> = asked.iter().map(|k| view.holds(k)).collect();
        let keys: Vec<Option<B256>> = asked
            .iter()
            .zip(&held)
            .map(|(k, held)| held.is_ok().then(|| k.pir_key()))
            .collect();
        // found[level][key]: the value each level holds, if any.
        let mut found: Vec<Vec<Found>> = vec![Vec::new(); view.levels.len()];
        let mut pir: Vec<(usize, &Arc<SnapshotClient>)> = Vec::new();
        for (i, level) in view.levels.iter().enumerate() {
            match level {
                Level::Whole(w) => found[i] = w.read(&keys),
                Level::Pir(snap) => pir.push((i, snap)),
            }
        }
        if !pir.is_empty() {
            for (l, values) in self
                .read_pir_parts(view, &pir, (asked, &keys), shared, pad_to)
                .await?
            {
                found[l] = values;
            }
        }
        Ok(asked
            .iter()
            .zip(held)
            .enumerate()
            .map(|(i, (key, held))| {
                held?;
                match shared[i] {
                    true => self.freshest_shared(view, &found, i, key),
                    false => {
                        let (state, forged) = view.freshest_named(&found, i, key);
                        if forged {
                            self.tier_forged(view);
                        }
                        state
                    }
                }
            })
            .collect())
    }
}
