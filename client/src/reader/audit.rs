//! Audits of the hot tier against the levels it stands on, in queries a
//! request sends anyway. A key the tier answered (one that names no one:
//! a pool's reserves, a token's implementation) is queued; the random
//! keys a request asks in place of kept answers, of keys the view cannot
//! hold and of the ladder's padding then ask queued keys instead, of
//! every PIR level. PIR hides which key a query asks, so the server sees
//! the request it would have seen; the answers say what the levels hold
//! for those keys, and a tier value that differs is a forgery, recorded
//! as one caught on a key that names the wallet is ([`PrivateReader::tier_forged`]).
//! The newest keys are audited first, so that a call's padding rounds
//! and free queries audit what it read itself. A forged key is then
//! corrected: from then on it is answered with the levels' value (the
//! wire unchanged: the tier still "answers" it, locally), and a call that
//! read the tier's value runs again or withholds its answer
//! ([`PrivateReader::tier_key_forged`]). A key not audited yet still has
//! the tier's value (docs/security.md).

use std::collections::{HashMap, HashSet, VecDeque};

use super::*;

/// Most keys waiting for an audit; the oldest go first when more come.
const MOST_QUEUED: usize = 1024;
/// Most keys remembered as audited (then forgotten, and audited again
/// when read again), and most remembered as forged.
const MOST_AUDITED: usize = 1 << 16;
/// Tiers audited at once (views of older blocks have older tiers; a
/// server publishing a tier every block makes several current).
const MOST_TIERS: usize = 4;

/// The levels' values of a forged key (the answers of the PIR levels an
/// audit asked, by level): what it reads in their place.
pub(super) type Correction = Vec<(SnapshotId, Found)>;

/// The tier keys waiting for an audit (each with its kind, to be compared
/// as what it is), those done, and those found forged, of the last
/// [`MOST_TIERS`] tiers.
#[derive(Default)]
pub(super) struct TierAudits {
    tiers: VecDeque<(SnapshotId, OneTier)>,
}

#[derive(Default)]
struct OneTier {
    /// Each with its PIR key (hashed once), the newest first.
    queued: VecDeque<(B256, ReadKey)>,
    done: HashSet<B256>,
    corrected: HashMap<B256, Correction>,
}

impl TierAudits {
    /// The audits of `tier`, now the most recently used; the least
    /// recently used tier's dropped to make room.
    fn of_tier(&mut self, tier: SnapshotId) -> &mut OneTier {
        let audits = match self.tiers.iter().position(|(t, _)| *t == tier) {
            Some(at) => self.tiers.remove(at).expect("found").1,
            None => {
                if self.tiers.len() == MOST_TIERS {
                    self.tiers.pop_front();
                }
                OneTier::default()
            }
        };
        self.tiers.push_back((tier, audits));
        &mut self.tiers.back_mut().expect("just pushed").1
    }

    /// Queues `keys` of `tier` not audited yet ahead of those queued
    /// before (one queued already moves ahead: read again, it is the
    /// newest); the oldest go when the queue is full. A wide word's high
    /// part is not queued: it is never compared (each level picks its
    /// own width), and would take a stand-in from a key that is.
    pub(super) fn queue(&mut self, tier: SnapshotId, keys: impl Iterator<Item = ReadKey>) {
        let mut keys = keys
            .filter(|key| !matches!(key, ReadKey::HighPart { .. }))
            .peekable();
        if keys.peek().is_none() {
            return;
        }
        let audits = self.of_tier(tier);
        for key in keys {
            let pir = key.pir_key();
            if audits.done.contains(&pir) {
                continue;
            }
            audits.queued.retain(|(k, _)| *k != pir);
            if audits.queued.len() == MOST_QUEUED {
                audits.queued.pop_back();
            }
            audits.queued.push_front((pir, key));
        }
    }

    /// Up to `count` queued keys of `tier`, none of `avoid` (a request's
    /// own keys), taken off the queue (put back by [`Self::requeue`] when
    /// their request fails, marked by [`Self::finish`] once compared).
    pub(super) fn take(&mut self, tier: SnapshotId, count: usize, avoid: &[B256]) -> Vec<ReadKey> {
        if count == 0 || self.get(tier).is_none() {
            return Vec::new();
        }
        let audits = self.of_tier(tier);
        let mut taken = Vec::new();
        let mut left = VecDeque::new();
        while let Some((pir, key)) = audits.queued.pop_front() {
            match taken.len() < count && !avoid.contains(&pir) {
                true => taken.push(key),
                false => left.push_back((pir, key)),
            }
        }
        audits.queued = left;
        taken
    }

    /// Puts keys whose request failed back at the queue's front.
    pub(super) fn requeue(&mut self, tier: SnapshotId, keys: &[ReadKey]) {
        if keys.is_empty() {
            return;
        }
        let audits = self.of_tier(tier);
        for key in keys.iter().rev() {
            audits.queued.push_front((key.pir_key(), *key));
        }
        audits.queued.truncate(MOST_QUEUED);
    }

    /// Marks a key of `tier` audited.
    pub(super) fn finish(&mut self, tier: SnapshotId, key: B256) {
        let audits = self.of_tier(tier);
        if audits.done.len() >= MOST_AUDITED {
            audits.done.clear();
        }
        audits.done.insert(key);
    }

    /// Notes a key of `tier` found forged, with the levels' values.
    pub(super) fn correct(&mut self, tier: SnapshotId, key: B256, levels: Correction) {
        let audits = self.of_tier(tier);
        // (A forger of more keys than this has the oldest read from its
        // tier again until audited again: a call that reads one then
        // answers it forged, bounded memory first.)
        if audits.corrected.len() >= MOST_AUDITED {
            audits.corrected.clear();
            audits.done.clear();
        }
        audits.corrected.insert(key, levels);
    }

    /// Whether a key of `tier` was audited.
    pub(super) fn audited(&self, tier: SnapshotId, key: &B256) -> bool {
        self.get(tier)
            .is_some_and(|audits| audits.done.contains(key))
    }

    /// The levels' values of a key of `tier` found forged.
    pub(super) fn correction(&self, tier: SnapshotId, key: &B256) -> Option<&Correction> {
        self.get(tier)?.corrected.get(key)
    }

    /// The audits of `tier`, where it has any (its use not counted).
    fn get(&self, tier: SnapshotId) -> Option<&OneTier> {
        let (_, audits) = self.tiers.iter().find(|(t, _)| *t == tier)?;
        Some(audits)
    }
}

impl PrivateReader {
    /// Notes the keys of `part` (indices into `asked`) that `view`'s tier
    /// holds and answers, for an audit.
    pub(super) fn queue_audits(&self, view: &ViewClient, asked: &[ReadKey], part: &[usize]) {
        let Some(hot) = &view.hot else { return };
        let held = part.iter().filter_map(|&i| asked.get(i).copied());
        let mut audits = self.audits.lock().expect("lock");
        audits.queue(hot.level.entry.id, held);
    }

    /// Up to `count` keys to audit in a request of every PIR level of
    /// `view` (none without a tier), none of `avoid`.
    pub(super) fn audit_keys(
        &self,
        view: &ViewClient,
        count: usize,
        avoid: &[B256],
    ) -> Vec<ReadKey> {
        let Some(hot) = &view.hot else {
            return Vec::new();
        };
        let mut audits = self.audits.lock().expect("lock");
        audits.take(hot.level.entry.id, count, avoid)
    }

    /// Puts back the keys a failed request was to audit.
    pub(super) fn requeue_audits(&self, view: Option<&ViewClient>, keys: &[ReadKey]) {
        let Some(hot) = view.and_then(|v| v.hot.as_ref()) else {
            return;
        };
        let mut audits = self.audits.lock().expect("lock");
        audits.requeue(hot.level.entry.id, keys);
    }

    /// Compares each audited key's answers with `view`'s tier, as its
    /// kind; a difference is recorded as a forgery. `audited`: the keys,
    /// asked as real keys from index `first` on (`roles`: each query's
    /// role; `found[l]`: the request's level `l`'s answers).
    pub(super) fn check_audits(
        &self,
        view: &ViewClient,
        pir: &[(usize, &Arc<SnapshotClient>)],
        (audited, first): (&[ReadKey], usize),
        roles: &[canary::Role],
        found: &[Vec<Found>],
    ) {
        let Some(hot) = &view.hot else { return };
        for (q, role) in roles.iter().enumerate() {
            let canary::Role::Real(i) = role else {
                continue;
            };
            let Some(key) = i.checked_sub(first).and_then(|j| audited.get(j)) else {
                continue;
            };
            let asked: Vec<(usize, Found)> = pir
                .iter()
                .zip(found)
                .map(|((l, _), values)| (*l, values[q].clone()))
                .collect();
            let forged = view.tier_disagrees(key, &asked);
            let mut audits = self.audits.lock().expect("lock");
            audits.finish(hot.level.entry.id, key.pir_key());
            if forged {
                tracing::debug!("an audited key of the hot tier reads otherwise at its base");
                let levels = asked
                    .into_iter()
                    .filter_map(|(l, value)| Some((view.levels.get(l)?.entry().id, value)))
                    .collect();
                audits.correct(hot.level.entry.id, key.pir_key(), levels);
                drop(audits);
                self.tier_forged(view);
            }
        }
    }

    /// The levels' values of `key` where `view`'s tier was found forging
    /// it.
    pub(super) fn correction(&self, view: &ViewClient, key: &ReadKey) -> Option<Correction> {
        let hot = view.hot.as_ref()?;
        let audits = self.audits.lock().expect("lock");
        audits
            .correction(hot.level.entry.id, &key.pir_key())
            .cloned()
    }

    /// `key`'s state in `view` where its tier was found forging it: the
    /// levels' value (the whole levels' read here, the PIR levels' from
    /// the audit's answers), as a read that the tier answered would have
    /// been (no level above the tier held the key). `None` where no
    /// forgery of it was found, or the levels' value cannot be had
    /// ([`ViewClient::freshest_corrected`]).
    pub fn corrected_state(&self, view: &ViewClient, key: &ReadKey) -> Option<KeyState> {
        let levels = self.correction(view, key)?;
        let pir_key = Some(key.pir_key());
        let found: Vec<Vec<Found>> = view
            .levels
            .iter()
            .map(|level| match level {
                Level::Whole(w) => w.read(&[pir_key]),
                Level::Pir(_) => vec![None],
            })
            .collect();
        view.freshest_corrected(&found, 0, key, &levels)
    }

    /// Whether `key` of `view`'s tier was audited (and found forged or
    /// not).
    pub fn tier_key_audited(&self, view: &ViewClient, key: &ReadKey) -> bool {
        let Some(hot) = &view.hot else { return true };
        let audits = self.audits.lock().expect("lock");
        audits.audited(hot.level.entry.id, &key.pir_key())
    }

    /// Whether `view`'s tier was found forging `key`: a request that read
    /// the tier's value of it answered with a forged value.
    pub fn tier_key_forged(&self, view: &ViewClient, key: &ReadKey) -> bool {
        let Some(hot) = &view.hot else { return false };
        let audits = self.audits.lock().expect("lock");
        audits
            .correction(hot.level.entry.id, &key.pir_key())
            .is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_key_is_audited_once_newest_first_per_tier() {
        let tier: SnapshotId = "1-8-hot".parse().unwrap();
        let other: SnapshotId = "1-9-hot".parse().unwrap();
        let key = |b: u8| ReadKey::Account(Address::repeat_byte(b));
        let pir = |b: u8| key(b).pir_key();
        let mut audits = TierAudits::default();
        audits.queue(tier, [key(1), key(2), key(1)].into_iter());
        let taken = audits.take(tier, 5, &[pir(2)]);
        assert_eq!(taken, [key(1)]);
        // A failed request puts its keys back; a compared one is done.
        audits.requeue(tier, &taken);
        assert_eq!(audits.take(tier, 1, &[]), [key(1)]);
        audits.finish(tier, pir(1));
        // The newest first.
        audits.queue(tier, [key(1), key(3)].into_iter());
        assert_eq!(audits.take(tier, 5, &[]), [key(3), key(2)]);
        // A forged key's correction, of its tier only.
        audits.correct(tier, pir(3), vec![(tier, None)]);
        assert!(audits.correction(tier, &pir(3)).is_some());
        assert!(audits.correction(tier, &pir(2)).is_none());
        assert!(audits.correction(other, &pir(3)).is_none());
        assert!(audits.take(tier, 5, &[]).is_empty());
        // A key read again moves ahead.
        audits.queue(tier, [key(4), key(5), key(4)].into_iter());
        assert_eq!(audits.take(tier, 5, &[]), [key(4), key(5)]);
        // Another tier's audits leave this one's as they are.
        audits.queue(other, [key(1)].into_iter());
        assert_eq!(audits.take(other, 5, &[]), [key(1)]);
        assert!(audits.audited(tier, &pir(1)) && !audits.audited(other, &pir(1)));
        assert!(audits.correction(tier, &pir(3)).is_some());
        // Past MOST_TIERS tiers, the least recently used is dropped; an
        // empty queueing or taking touches none; a high part is never
        // queued. (Used so far: `tier`, then `other`.)
        let newer = |block: u64| -> SnapshotId { format!("1-{block}-hot").parse().unwrap() };
        for block in 10..10 + MOST_TIERS as u64 - 2 {
            audits.queue(newer(block), [key(1)].into_iter());
            audits.queue(tier, std::iter::empty());
            assert!(audits.take(newer(99), 5, &[]).is_empty());
        }
        audits.finish(tier, pir(9));
        audits.queue(newer(20), [key(1)].into_iter());
        assert!(audits.correction(tier, &pir(3)).is_some(), "used since");
        let high = ReadKey::HighPart {
            contract: Address::repeat_byte(6),
            slot: B256::repeat_byte(7),
        };
        audits.queue(tier, [high].into_iter());
        assert!(audits.take(tier, 5, &[]).is_empty());
        for block in 21..21 + MOST_TIERS as u64 {
            audits.queue(newer(block), [key(1)].into_iter());
        }
        assert!(audits.correction(tier, &pir(3)).is_none(), "dropped");
    }
}
