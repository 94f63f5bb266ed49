//! Canaries: queries of keys whose answer at a PIR level is known
//! already (the level's published canaries, answers it gave before under
//! canaries that held), mixed into a request at random positions. Each
//! level's query vector is its own, so a canary position carries a key
//! known at each level (not one key known at all of them): every PIR level
//! of a request is checked, deltas as well as bases. On the wire they are
//! queries like any other; a request in which one reads anything but the
//! known answer fails closed. A server that alters answers without knowing
//! which query is which (a blind shift, a random subset, one level only)
//! hits a canary with the odds docs/security.md ("Blind shifts") works out.
//! A PIR level for which no canary is known is not read by PIR at all.

use std::collections::BTreeMap;
use std::sync::Arc;

use alloy_primitives::B256;
use rand::seq::{IndexedRandom, SliceRandom};

use crate::answers::AnswerCache;
use crate::levels::Found;
use crate::pool::SnapshotClient;
use crate::ReadError;

/// Kept answers looked at per level when choosing canaries.
const KEPT_CANDIDATES: usize = 64;

/// A canary position: at each PIR level (in order) a key and the value
/// that level is known to hold for it.
#[derive(Clone, Debug)]
pub struct Canary {
    pub at_level: Vec<(B256, Vec<u8>)>,
}

/// `count` canaries for `levels` (the PIR levels of a request), none of
/// their keys among `avoid` (the request's own keys): at each level a key
/// it is known to hold, from its manifest's canaries and the answers it
/// gave before. A level with no such key fails the request (it is not
/// read by PIR unchecked).
pub fn choose(
    answers: &AnswerCache,
    levels: &[(usize, &Arc<SnapshotClient>)],
    avoid: &[B256],
    count: usize,
) -> Result<Vec<Canary>, ReadError> {
    if count == 0 || levels.is_empty() {
        return Ok(Vec::new());
    }
    let mut rng = rand::rng();
    let mut picks: Vec<Vec<(B256, Vec<u8>)>> = Vec::with_capacity(levels.len());
    for (_, snap) in levels {
        let known = known_present(answers, snap, avoid);
        if known.is_empty() {
            return Err(ReadError::Unreadable {
                snapshot: snap.entry.id.url_form(),
                why:
                    "it publishes no canary and no answer of it is known: not read by PIR unchecked"
                        .into(),
            });
        }
        // Distinct keys while there are enough, repeated past that (each
        // query vector is fresh: a repeat looks like any other query).
        let mut level: Vec<(B256, Vec<u8>)> =
            known.choose_multiple(&mut rng, count).cloned().collect();
        while level.len() < count {
            level.push(known.choose(&mut rng).expect("not empty").clone());
        }
        picks.push(level);
    }
    Ok((0..count)
        .map(|c| Canary {
            at_level: picks.iter().map(|level| level[c].clone()).collect(),
        })
        .collect())
}

/// The keys `snap` is known to hold, with their values, sorted by key:
/// its published canaries and what it answered before.
fn known_present(
    answers: &AnswerCache,
    snap: &SnapshotClient,
    avoid: &[B256],
) -> Vec<(B256, Vec<u8>)> {
    let published = snap
        .entry
        .manifest
        .canaries
        .iter()
        .map(|c| (c.key, c.value.to_vec()));
    let kept = answers
        .some_present(snap.setup_digest(), KEPT_CANDIDATES)
        .into_iter()
        .filter_map(|(k, v)| Some((k, v?)));
    let known: BTreeMap<B256, Vec<u8>> = published
        .chain(kept)
        .filter(|(k, _)| !avoid.contains(k))
        .collect();
    known.into_iter().collect()
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

/// The queries of a request in a random order: each one's role, and its
/// key at each of `levels` PIR levels (`keys[level][query]`: the same at
/// every level but for canaries).
pub struct Arranged {
    pub roles: Vec<Role>,
    pub keys: Vec<Vec<B256>>,
}

/// Arranges a request: its real keys, `random` random keys and the
/// canaries, shuffled.
pub fn arrange(real: &[B256], random: usize, canaries: &[Canary], levels: usize) -> Arranged {
    let mut roles: Vec<(Role, Option<B256>)> = real
        .iter()
        .enumerate()
        .map(|(i, k)| (Role::Real(i), Some(*k)))
        .chain((0..random).map(|_| (Role::Random, Some(B256::from(rand::random::<[u8; 32]>())))))
        .chain((0..canaries.len()).map(|i| (Role::Canary(i), None)))
        .collect();
    roles.shuffle(&mut rand::rng());
    let keys = (0..levels)
        .map(|l| {
            roles
                .iter()
                .map(|(role, key)| match (role, key) {
                    (Role::Canary(c), _) => canaries[*c].at_level[l].0,
                    (_, key) => key.expect("real and random keys are set"),
                })
                .collect()
        })
        .collect();
    Arranged {
        roles: roles.into_iter().map(|(role, _)| role).collect(),
        keys,
    }
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
            if found[l][q].as_ref() != Some(&canaries[*c].at_level[l].1) {
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
            at_level: vec![
                (B256::repeat_byte(9), vec![1]),
                (B256::repeat_byte(8), vec![2]),
            ],
        }];
        let arranged = arrange(&real, 3, &canaries, 2);
        assert_eq!(arranged.roles.len(), 6);
        for role in [Role::Real(0), Role::Real(1), Role::Canary(0)] {
            assert_eq!(arranged.roles.iter().filter(|r| **r == role).count(), 1);
        }
        let randoms = arranged
            .roles
            .iter()
            .filter(|r| **r == Role::Random)
            .count();
        assert_eq!(randoms, 3);
        let at = |level: usize, role| {
            let q = arranged.roles.iter().position(|r| *r == role).unwrap();
            arranged.keys[level][q]
        };
        assert_eq!(at(0, Role::Real(1)), real[1]);
        assert_eq!(at(1, Role::Real(1)), real[1]);
        // Each level's canary is its own key.
        assert_eq!(at(0, Role::Canary(0)), B256::repeat_byte(9));
        assert_eq!(at(1, Role::Canary(0)), B256::repeat_byte(8));
        // Random keys are the same at every level.
        for (q, role) in arranged.roles.iter().enumerate() {
            if *role == Role::Random {
                assert_eq!(arranged.keys[0][q], arranged.keys[1][q]);
            }
        }
    }
}
