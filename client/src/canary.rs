//! Canaries: queries of keys whose answer at every PIR level of the view
//! is known already (a base's published canaries, answers kept from
//! before), mixed into a request at random positions. On the wire they
//! are queries like any other; a request in which one reads anything but
//! the known answer fails closed. A server that alters answers without
//! knowing which query is which (a blind shift, a random subset) hits a
//! canary with the odds docs/security.md ("Blind shifts") works out.

use std::collections::HashMap;
use std::sync::Arc;

use alloy_primitives::B256;
use rand::seq::{IndexedRandom, SliceRandom};

use crate::answers::AnswerCache;
use crate::levels::Found;
use crate::pool::SnapshotClient;
use crate::ReadError;

/// Kept answers looked at per level when choosing canaries.
const KEPT_CANDIDATES: usize = 64;

/// A canary: its key and its known answer at each PIR level, in order.
#[derive(Clone, Debug)]
pub struct Canary {
    pub key: B256,
    pub expected: Vec<Found>,
}

/// Up to `count` canaries for `levels` (the PIR levels of a view), none of
/// them among `avoid` (the request's own keys): keys whose answer every
/// level is known to give, present in at least one.
pub fn choose(
    answers: &AnswerCache,
    levels: &[(usize, &Arc<SnapshotClient>)],
    avoid: &[B256],
    count: usize,
) -> Vec<Canary> {
    if count == 0 || levels.is_empty() {
        return Vec::new();
    }
    // What each level is known to hold: its manifest's canaries, then
    // what it answered before.
    let known: Vec<HashMap<B256, Found>> = levels
        .iter()
        .map(|(_, snap)| {
            let published = snap
                .entry
                .manifest
                .canaries
                .iter()
                .map(|c| (c.key, Some(c.value.to_vec())));
            let kept = answers.some_present(snap.setup_digest(), KEPT_CANDIDATES);
            published.chain(kept).collect()
        })
        .collect();
    let mut candidates: Vec<Canary> = known[0]
        .keys()
        .filter(|k| !avoid.contains(k))
        .filter_map(|key| {
            let expected: Vec<Found> = known
                .iter()
                .enumerate()
                .map(|(l, level)| {
                    level
                        .get(key)
                        .cloned()
                        .or_else(|| answers.known(levels[l].1.setup_digest(), &[*key]).pop()?)
                })
                .collect::<Option<_>>()?;
            expected.iter().any(Option::is_some).then_some(Canary {
                key: *key,
                expected,
            })
        })
        .collect();
    candidates.sort_unstable_by_key(|c| c.key);
    candidates
        .choose_multiple(&mut rand::rng(), count)
        .cloned()
        .collect()
}

/// What each query of a request is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// The i-th key the request reads.
    Real(usize),
    /// The i-th canary.
    Canary(usize),
    /// A random key (a filler, or a key the view cannot hold).
    Random,
}

/// The queries of a request: its real keys, `random` random keys and the
/// canaries, in a random order; each with its role.
pub fn arrange(real: &[B256], random: usize, canaries: &[Canary]) -> Vec<(B256, Role)> {
    let mut queries: Vec<(B256, Role)> = real
        .iter()
        .enumerate()
        .map(|(i, k)| (*k, Role::Real(i)))
        .chain((0..random).map(|_| (B256::from(rand::random::<[u8; 32]>()), Role::Random)))
        .chain(
            canaries
                .iter()
                .enumerate()
                .map(|(i, c)| (c.key, Role::Canary(i))),
        )
        .collect();
    queries.shuffle(&mut rand::rng());
    queries
}

/// Fails when a canary of the request read anything but its known answer
/// at some level: `found[l][q]` is level l's answer to query q.
pub fn check(
    roles: &[Role],
    canaries: &[Canary],
    found: &[Vec<Found>],
    levels: &[(usize, &Arc<SnapshotClient>)],
) -> Result<(), ReadError> {
    for (q, role) in roles.iter().enumerate() {
        let Role::Canary(c) = role else { continue };
        for (l, (_, snap)) in levels.iter().enumerate() {
            if found[l][q] != canaries[*c].expected[l] {
                return Err(ReadError::Unverifiable(format!(
                    "{}: a record whose answer is known read otherwise (canary)",
                    snap.entry.id.url_form()
                )));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_holds_every_query_once_in_some_order() {
        let real = [B256::repeat_byte(1), B256::repeat_byte(2)];
        let canaries = [Canary {
            key: B256::repeat_byte(9),
            expected: vec![Some(vec![1])],
        }];
        let queries = arrange(&real, 3, &canaries);
        assert_eq!(queries.len(), 6);
        let roles: Vec<Role> = queries.iter().map(|q| q.1).collect();
        for role in [Role::Real(0), Role::Real(1), Role::Canary(0)] {
            assert_eq!(roles.iter().filter(|r| **r == role).count(), 1);
        }
        assert_eq!(roles.iter().filter(|r| **r == Role::Random).count(), 3);
        let at = |role| queries.iter().find(|q| q.1 == role).unwrap().0;
        assert_eq!(at(Role::Real(1)), real[1]);
        assert_eq!(at(Role::Canary(0)), canaries[0].key);
    }
}
