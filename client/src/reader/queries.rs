//! The PIR queries of a read: its keys split into the levels' parts, one
//! request for every level of the view, padded up the query ladder.

use super::*;

impl PrivateReader {
    /// What each PIR level holds for `keys`, one list per level.
    ///
    /// A `shared` key the hot tier holds is asked only of the PIR levels
    /// above it (every client holds the tier: reading it names nothing);
    /// the rest, the wallet's own keys whether the tier holds them or
    /// not, of every PIR level. With PIR levels above the tier, a
    /// read that asks anything sends both requests at once (one with a
    /// random filler when its part has nothing to ask), as a cover
    /// lookup does: the server sees the same shape whatever the keys.
    pub(super) async fn read_pir_parts(
        &self,
        view: &ViewClient,
        pir: &[(usize, &Arc<SnapshotClient>)],
        (asked, keys): (&[ReadKey], &[Option<B256>]),
        shared: &[bool],
        pad_to: usize,
    ) -> Result<Vec<(usize, Vec<Found>)>, ReadError> {
        let (hot, cold): (Vec<usize>, Vec<usize>) = (0..keys.len())
            .partition(|&i| shared[i] && keys[i].is_some_and(|k| view.hot_holds(&k)));
        let above: Vec<(usize, &Arc<SnapshotClient>)> = pir
            .iter()
            .filter(|(l, _)| view.above_hot().is_some_and(|above| *l >= above))
            .copied()
            .collect();
        let (cold_part, hot_part) = (self.part(pir, keys, &cold), self.part(&above, keys, &hot));
        // The tier answers the hot part's keys: each is audited in the
        // free queries of a request of every PIR level, this one or later.
        self.queue_audits(view, asked, &hot);
        let round = cold_part.asks() || hot_part.asks();
        let both = round && !above.is_empty();
        if round {
            cover::count_round();
        }
        // The part above the tier first: each request notes its count
        // ([`cover::count_rung`]) as it is first polled, so the request to
        // every PIR level (the round's main one, whose count cover rounds
        // copy) notes it last.
        let (hot_found, cold_found) = tokio::join!(
            self.read_part(hot_part, pad_to, both, None),
            self.read_part(cold_part, pad_to, both, Some(view))
        );
        let mut found: BTreeMap<usize, Vec<Found>> = pir
            .iter()
            .map(|(l, _)| (*l, vec![None; keys.len()]))
            .collect();
        for (part, found_in) in [(&cold, cold_found?), (&hot, hot_found?)] {
            for (l, values) in found_in {
                let level = found.get_mut(&l).expect("a PIR level");
                for (&i, value) in part.iter().zip(values) {
                    level[i] = value;
                }
            }
        }
        Ok(found.into_iter().collect())
    }

    /// A round of `count` stand-ins ([`Self::request`]'s: keys of the
    /// tier waiting for an audit, else random keys) to the PIR levels of
    /// `view`, shaped as a round of as many keys the view cannot hold is.
    pub(super) async fn stand_in_round(
        &self,
        view: &ViewClient,
        count: usize,
    ) -> Result<(), ReadError> {
        let pir: Vec<(usize, &Arc<SnapshotClient>)> = view
            .levels
            .iter()
            .enumerate()
            .filter_map(|(i, level)| match level {
                Level::Pir(snap) => Some((i, snap)),
                Level::Whole(_) => None,
            })
            .collect();
        // Keys not held: none is asked, each is a stand-in.
        let asked = vec![ReadKey::Account(Address::ZERO); count];
        let (keys, shared) = (vec![None; count], vec![false; count]);
        let pad_to = self.request_limits().1;
        let parts = (asked.as_slice(), keys.as_slice());
        match self
            .read_pir_parts(view, &pir, parts, &shared, pad_to)
            .await
        {
            Ok(_) => Ok(()),
            // A failed verification fails every read after it, as a real
            // round's does (else a server could tell padding by failing
            // it).
            Err(ReadError::Unverifiable(why)) => {
                self.forget_answers_of(view);
                Err(self.link.distrust(why))
            }
            Err(e) => Err(e),
        }
    }

    /// The keys at `part` (indices into `keys`) to be read from `levels`,
    /// with what each level answered before (looked up once a read).
    pub(super) fn part<'a>(
        &self,
        levels: &'a [(usize, &'a Arc<SnapshotClient>)],
        keys: &[Option<B256>],
        part: &[usize],
    ) -> Part<'a> {
        let keys: Vec<Option<B256>> = part.iter().map(|&i| keys[i]).collect();
        let present: Vec<B256> = keys.iter().flatten().copied().collect();
        let known: Vec<Vec<Option<Found>>> = levels
            .iter()
            .map(|(_, snap)| self.answers.known(snap.setup_digest(), &present))
            .collect();
        // Keys some PIR level has not answered yet, each once.
        let mut unknown: Vec<B256> = present
            .iter()
            .enumerate()
            .filter(|(j, _)| known.iter().any(|level| level[*j].is_none()))
            .map(|(_, k)| *k)
            .collect();
        unknown.sort_unstable();
        unknown.dedup();
        let unheld = keys.len() - present.len();
        let distinct: std::collections::HashSet<&B256> = present.iter().collect();
        let kept = distinct.len() - unknown.len();
        Part {
            levels,
            keys,
            known,
            unknown,
            unheld,
            kept,
            kept_asks: self.kept_as_fresh,
        }
    }

    /// What each level of `part` holds for its keys (`None`: a key the
    /// view does not hold): the answers kept from before, and one request
    /// for the rest, whose verified answers are kept in turn. Nothing
    /// when it has no level, or no key and no `force`; with `force`, a
    /// request goes even when every key was answered before (one random
    /// filler then: see [`Self::read_pir_parts`]). `audit`: the view
    /// whose tier the request's free queries audit (a request of every
    /// PIR level).
    pub(super) async fn read_part(
        &self,
        part: Part<'_>,
        pad_to: usize,
        force: bool,
        audit: Option<&ViewClient>,
    ) -> Result<Vec<(usize, Vec<Found>)>, ReadError> {
        let Part {
            levels,
            keys,
            known,
            unknown,
            unheld,
            kept,
            kept_asks,
        } = part;
        if levels.is_empty() || (keys.is_empty() && !force) {
            return Ok(Vec::new());
        }
        // A request that goes (for keys not answered before, or kept
        // answers that are to look fresh) asks a random key in place of
        // each kept answer: its query count is the one a first read sends,
        // whatever was read before.
        let goes = !unknown.is_empty() || unheld > 0 || force || kept_asks;
        let unheld = unheld + if goes { kept } else { 0 };
        let nothing = unknown.is_empty() && unheld == 0;
        let fresh = match nothing && !force {
            true => {
                // Answered from kept answers: released no sooner than the
                // request a first read sends would have been.
                if self.kept_delay {
                    let rung = self.first_read_rung(kept);
                    tokio::time::sleep(self.fresh_like_delay(rung)).await;
                }
                vec![HashMap::new(); levels.len()]
            }
            false => {
                let unheld = unheld + usize::from(nothing);
                self.request(levels, &unknown, unheld, pad_to, audit)
                    .await?
            }
        };
        Ok(levels
            .iter()
            .zip(known)
            .zip(fresh)
            .map(|(((i, _), known), fresh)| {
                let mut known = known.into_iter();
                let values = keys
                    .iter()
                    .map(|k| {
                        let k = (*k)?;
                        let before = known.next().flatten();
                        before.unwrap_or_else(|| fresh.get(&k).cloned().flatten())
                    })
                    .collect();
                (*i, values)
            })
            .collect())
    }

    /// The queries per level a request of `keys` new keys sends: the
    /// fixed count when padding batches, else its rung of the ladder (the
    /// keys and the canaries when there is none).
    pub(super) fn first_read_rung(&self, keys: usize) -> usize {
        let max_batch = self.catalog.max_batch();
        let wanted = keys + self.canaries_per_request;
        match (self.pad_to > 1, self.ladder > 0) {
            (true, _) => self.pad_to.min(max_batch),
            (false, true) => ladder_count(wanted, self.ladder, max_batch),
            (false, false) => wanted,
        }
    }

    /// One request reading `unknown` from every PIR level, with `unheld`
    /// random keys, the canaries and (to `pad_to`) random fillers mixed
    /// in, keys of `audit`'s tier in place of random ones where some wait
    /// for an audit; the canaries checked, the audits compared, each
    /// level's answers to `unknown` kept and returned.
    pub(super) async fn request(
        &self,
        pir: &[(usize, &Arc<SnapshotClient>)],
        unknown: &[B256],
        unheld: usize,
        pad_to: usize,
        audit: Option<&ViewClient>,
    ) -> Result<Vec<HashMap<B256, Found>>, ReadError> {
        // Timed whole (queries made, the round trip, answers decoded and
        // checked): what a kept answer waits in its place.
        let started = std::time::Instant::now();
        let slots = self.slots_past(unknown.len() + unheld, pad_to);
        let (audited, canaries, random) = self.free_queries(pir, unknown, unheld, slots, audit)?;
        self.pir_keys
            .fetch_add(unknown.len() as u64, std::sync::atomic::Ordering::Relaxed);
        // The audited keys ride as real ones past `unknown`.
        let audited_keys = audited.iter().map(ReadKey::pir_key);
        let asked: Vec<B256> = unknown.iter().copied().chain(audited_keys).collect();
        let arranged = canary::arrange(&asked, random, &canaries, pir.len());
        let answered = self.query_levels(pir, &arranged.keys).await;
        // Keys whose audit did not happen wait for the next one.
        let answered = answered.inspect_err(|_| self.requeue_audits(audit, &audited))?;
        let found: Vec<Vec<Found>> = answered.into_iter().map(|(_, v)| v).collect();
        let roles = arranged.roles;
        // Only answers whose request's canaries held are kept.
        canary::check(&roles, &canaries, &found, pir)?;
        if let Some(view) = audit {
            self.check_audits(view, pir, (&audited, unknown.len()), &roles, &found);
        }
        let per_level = arranged.keys.first().map_or(0, Vec::len);
        self.timed_request(per_level, started.elapsed());
        let mut fresh = vec![HashMap::new(); pir.len()];
        for (l, values) in found.into_iter().enumerate() {
            let mut by_key: HashMap<B256, Found> = HashMap::new();
            for (role, value) in roles.iter().zip(values) {
                match role {
                    canary::Role::Real(i) if *i < unknown.len() => {
                        by_key.insert(unknown[*i], value);
                    }
                    _ => {}
                }
            }
            let kept: Vec<Found> = unknown.iter().map(|k| by_key[k].clone()).collect();
            self.answers.keep(pir[l].1.setup_digest(), unknown, &kept);
            fresh[l] = by_key;
        }
        Ok(fresh)
    }

    /// How many queries a request of `real` keys (stand-ins included)
    /// sends past them: up to `pad_to`, else up to its rung of the
    /// ladder, else the canaries alone. With padding, each is a canary
    /// where answers are known, a random filler where not (or an audit).
    fn slots_past(&self, real: usize, pad_to: usize) -> usize {
        let padded = match (pad_to > 0, self.ladder > 0) {
            (true, _) => Some(pad_to),
            (false, true) => Some(ladder_count(
                real + self.canaries_per_request,
                self.ladder,
                self.catalog.max_batch(),
            )),
            (false, false) => None,
        };
        match padded {
            Some(total) => total.saturating_sub(real),
            None => self.canaries_per_request,
        }
    }

    /// What a request's queries past its keys ask: `unheld` stand-ins
    /// (random keys in place of keys the view cannot hold or of kept
    /// answers) and `slots` beyond them (the canaries it must carry and
    /// the padding). Past the canaries it must carry, keys of `audit`'s
    /// tier waiting for an audit come first, then known answers (more
    /// canaries), then random keys. The keys audited, the canaries, and
    /// how many random keys.
    fn free_queries(
        &self,
        pir: &[(usize, &Arc<SnapshotClient>)],
        unknown: &[B256],
        unheld: usize,
        slots: usize,
        audit: Option<&ViewClient>,
    ) -> Result<(Vec<ReadKey>, Vec<canary::Canary>, usize), ReadError> {
        let free = unheld + slots.saturating_sub(self.canaries_per_request);
        let audited = audit.map_or_else(Vec::new, |view| self.audit_keys(view, free, unknown));
        let in_unheld = audited.len().min(unheld);
        let in_slots = audited.len() - in_unheld;
        let canaries = canary::choose(&self.answers, pir, unknown, slots - in_slots)?;
        let random = (unheld - in_unheld) + (slots - in_slots - canaries.len());
        Ok((audited, canaries, random))
    }

    /// One request with as many queries to every PIR level (`level_keys`:
    /// each level's keys, in order); each level's decoded values.
    pub(super) async fn query_levels(
        &self,
        levels: &[(usize, &Arc<SnapshotClient>)],
        level_keys: &[Vec<B256>],
    ) -> Result<Vec<(usize, Vec<Found>)>, ReadError> {
        let mut bodies = Vec::with_capacity(levels.len());
        let mut pendings = Vec::with_capacity(levels.len());
        let per_level = level_keys.first().map_or(0, Vec::len);
        self.largest_request
            .fetch_max(per_level, std::sync::atomic::Ordering::Relaxed);
        cover::count_rung(per_level);

        for ((_, snap), keys) in levels.iter().zip(level_keys) {
            let mut queries = Vec::with_capacity(keys.len());
            let mut level_pendings = Vec::with_capacity(keys.len());
            let prepared = snap.take_prepared(keys.len()).await?;
            for (key, prepared) in keys.iter().zip(prepared) {
                let (q, p) = snap
                    .client
                    .query(prepared, key.as_slice())
                    .map_err(|e| ReadError::Unverifiable(e.to_string()))?;
                queries.push(q);
                level_pendings.push(p);
            }
            bodies.push(encode_queries(&queries));
            pendings.push(level_pendings);
        }
        let ids: Vec<String> = levels.iter().map(|(_, s)| s.entry.id.url_form()).collect();
        let parts: Vec<(&str, &[u8])> = ids
            .iter()
            .zip(&bodies)
            .map(|(id, b)| (id.as_str(), b.as_slice()))
            .collect();
        // Views are at most a request deep (protocol::view::MAX_DEPTH):
        // an error here is a bug, answered as one, never a panic.
        let request = protocol::multi::encode_request(&parts)
            .map_err(|e| ReadError::Backend(format!("request not encodable: {e}")))?;
        let expected = protocol::multi::response_bytes(
            levels.iter().map(|(_, s)| s.response_bytes(per_level)),
        );
        let body = self.post_query(request, expected).await?;
        let answers = protocol::multi::decode_response(&body)
            .map_err(|e| ReadError::Unverifiable(format!("malformed response: {e}")))?;
        if answers.len() != levels.len() {
            return Err(ReadError::Unverifiable(format!(
                "{} answers for {} snapshots",
                answers.len(),
                levels.len()
            )));
        }
        let mut out = Vec::with_capacity(levels.len());
        for (((i, snap), answer), level_pendings) in levels.iter().zip(&answers).zip(pendings) {
            out.push((*i, decode_level(snap, answer, level_pendings)?));
            // Answered: refill the pool now, off the request path.
            snap.want_more();
        }
        Ok(out)
    }

    /// POSTs a multi-snapshot request whose answer must be exactly
    /// `expected` bytes; the response body.
    ///
    /// A request that meets a broken connection or a 5xx (a replica dying
    /// behind a load balancer, a shard missing behind a router) is sent
    /// once more with the same bytes: the server sees nothing it has not
    /// seen (docs/security.md, "Retries"). Nothing else is retried: not a
    /// wrong-sized answer, and never a verification failure.
    pub(super) async fn post_query(
        &self,
        request: Vec<u8>,
        expected: u64,
    ) -> Result<Vec<u8>, ReadError> {
        let request = bytes::Bytes::from(request);
        let mut attempt = 0;
        let resp = loop {
            let sent = self
                .link
                .post_lookup("query", request.clone(), Size::Exactly(expected))
                .await;
            let retry = match &sent {
                Err(e) => matches!(e, FetchError::Transport { .. }),
                Ok(resp) => resp.status.is_server_error(),
            };
            if !retry || attempt == 1 {
                break sent;
            }
            attempt += 1;
            tracing::debug!("query failed on the way; sending the same bytes once more");
        }
        .map_err(|e| match e.is_oversized() {
            // An answer of another size than the setups fix is not an
            // answer to these queries.
            true => ReadError::Unverifiable(e.to_string()),
            false => e.into(),
        })?;
        if resp.status.is_success() {
            return Ok(resp.body);
        }
        let reason = serde_json::from_slice::<ApiError>(&resp.body)
            .map(|e| e.error)
            .unwrap_or_default();
        match resp.status {
            StatusCode::NOT_FOUND => Err(ReadError::Retired(reason)),
            status => Err(ReadError::Backend(format!("HTTP {status} {reason}"))),
        }
    }
}

/// The query count a request of `wanted` queries is padded to: the least
/// of `from, 2 from, 4 from, ...` that holds them, but never past the
/// server's batch (`max_batch`) unless `wanted` is.
pub(super) fn ladder_count(wanted: usize, from: usize, max_batch: usize) -> usize {
    let mut count = from.max(1);
    while count < wanted {
        count = count.saturating_mul(2);
    }
    count.min(max_batch.max(wanted))
}

#[cfg(test)]
mod tests {
    use super::ladder_count;

    #[test]
    fn query_counts_climb_a_ladder() {
        let counts: Vec<usize> = (1..=9).map(|n| ladder_count(n, 2, 64)).collect();
        assert_eq!(counts, [2, 2, 4, 4, 8, 8, 8, 8, 16]);
        assert_eq!(ladder_count(40, 2, 48), 48, "never past the server's batch");
        assert_eq!(ladder_count(50, 2, 48), 50, "unless the request is");
        assert_eq!(ladder_count(3, 4, 64), 4);
        assert_eq!(ladder_count(0, 0, 64), 1);
    }
}
