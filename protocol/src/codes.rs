//! A snapshot's code table: the distinct code hashes of its accounts
//! (contract code and EIP-7702 delegation designators alike), sorted, which
//! its account values name by place (`CodeRef::Table(n)`, from 1).
//!
//! The manifest carries the table's size and Merkle root, so that a client
//! that learns an account's place `n` privately (from its PIR value) can
//! ask any server for entry `n` with a proof of it, check the proof against
//! the root, and then fetch the code by its hash from a content-addressed
//! route, checking keccak256. The place costs the value 4 bytes (the full
//! hash would cost 32 in every value of the database); the proof is ~22
//! hashes at mainnet's few million codes.
//!
//! The tree: the leaves are the hashes; each level pairs neighbours as
//! `keccak256(left || right)`, and the last node of an odd level moves up
//! unchanged. The table's size fixes every level's size, so a proof has
//! exactly one shape for a place.

use alloy_primitives::{keccak256, B256};
use serde::{Deserialize, Serialize};

use crate::account::EMPTY_CODE_HASH;

/// The most bytes of one code a client takes (EIP-170 allows 24,576 and
/// EIP-7907 proposes 48 KiB; a test chain may raise the limit).
pub const MAX_CODE_BYTES: usize = 1 << 20;

/// Most places a manifest lists as common codes.
pub const MAX_COMMON_CODES: usize = 64;

/// The places of the `MAX_COMMON_CODES` codes most accounts have (at
/// least two accounts each), most first, ties by place: from each
/// place's count of accounts.
pub fn common_places(counts: impl IntoIterator<Item = (u32, u64)>) -> Vec<u32> {
    let mut common: Vec<(u32, u64)> = counts.into_iter().filter(|&(_, n)| n >= 2).collect();
    common.sort_unstable_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    common.truncate(MAX_COMMON_CODES);
    common.into_iter().map(|(p, _)| p).collect()
}

/// The size and root of a snapshot's code table, as its manifest lists them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CodeTable {
    pub count: u32,
    pub root: B256,
}

/// `GET /v1/snapshots/<id>/codes/<n>`: entry `n` of a snapshot's code
/// table and the sibling hashes from its leaf up to the root.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CodeProof {
    pub hash: B256,
    pub siblings: Vec<B256>,
}

/// Why a code table's entry or a code is not what the snapshot says.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CodeError {
    #[error("entry {index} is outside a code table of {count}")]
    OutOfTable { index: u32, count: u32 },
    #[error("the proof of entry {index} does not lead to the table's root")]
    BadProof { index: u32 },
    #[error("code of {len} bytes is longer than the {MAX_CODE_BYTES} a client takes")]
    TooLong { len: usize },
    #[error("code whose keccak256 is {got}, not the {want} asked for")]
    WrongCode { want: B256, got: B256 },
    #[error("a code table of {bytes} bytes for {count} entries")]
    TableSize { bytes: usize, count: u32 },
    #[error("the code table does not have the root its manifest names")]
    TableRoot,
}

/// The table of these code hashes: sorted, each once, without the empty
/// code (an account without code has no entry) and without zero (unknown).
pub fn table_of(hashes: impl IntoIterator<Item = B256>) -> Vec<B256> {
    let mut table: Vec<B256> = hashes
        .into_iter()
        .filter(|h| *h != EMPTY_CODE_HASH && !h.is_zero())
        .collect();
    table.sort_unstable();
    table.dedup();
    table
}

/// The place (from 1) of `hash` in a sorted table.
pub fn place_of(table: &[B256], hash: &B256) -> Option<u32> {
    table
        .binary_search(hash)
        .ok()
        .map(|i| u32::try_from(i + 1).expect("a table of at most 2^32 - 2 codes"))
}

fn parent(left: &B256, right: &B256) -> B256 {
    let mut both = [0u8; 64];
    both[..32].copy_from_slice(left.as_slice());
    both[32..].copy_from_slice(right.as_slice());
    keccak256(both)
}

fn level_up(level: &[B256]) -> Vec<B256> {
    level
        .chunks(2)
        .map(|pair| match pair {
            [l, r] => parent(l, r),
            [single] => *single,
            _ => unreachable!("chunks of two"),
        })
        .collect()
}

/// A code table as its route sends it (32 bytes a hash), checked against
/// its summary: every hash, or why not.
pub fn parse_table(bytes: &[u8], summary: &CodeTable) -> Result<Vec<B256>, CodeError> {
    if bytes.len() != summary.count as usize * 32 {
        return Err(CodeError::TableSize {
            bytes: bytes.len(),
            count: summary.count,
        });
    }
    let hashes: Vec<B256> = bytes.chunks_exact(32).map(B256::from_slice).collect();
    match CodeTree::new(hashes.clone()).summary() == Some(*summary) {
        true => Ok(hashes),
        false => Err(CodeError::TableRoot),
    }
}

/// Every level of a table's tree, from the leaves up: what a server keeps
/// to prove any entry in a few hashes (twice the table's size).
pub struct CodeTree {
    levels: Vec<Vec<B256>>,
}

impl CodeTree {
    pub fn new(table: Vec<B256>) -> Self {
        let mut levels = vec![table];
        while levels.last().expect("a level").len() > 1 {
            let up = level_up(levels.last().expect("a level"));
            levels.push(up);
        }
        CodeTree { levels }
    }

    /// The table's hashes, in order.
    pub fn leaves(&self) -> &[B256] {
        &self.levels[0]
    }

    /// The table's size and root (`None` for an empty table).
    pub fn summary(&self) -> Option<CodeTable> {
        let count = u32::try_from(self.levels[0].len())
            .ok()
            .filter(|&c| c > 0)?;
        Some(CodeTable {
            count,
            root: self.levels.last().expect("a level")[0],
        })
    }

    /// The proof of entry `index` (from 1).
    pub fn proof(&self, index: u32) -> Option<CodeProof> {
        let leaves = &self.levels[0];
        let mut i = (index as usize)
            .checked_sub(1)
            .filter(|&i| i < leaves.len())?;
        let hash = leaves[i];
        let mut siblings = Vec::new();
        for level in &self.levels[..self.levels.len() - 1] {
            if let Some(s) = level.get(i ^ 1) {
                siblings.push(*s);
            }
            i /= 2;
        }
        Some(CodeProof { hash, siblings })
    }
}

impl CodeTable {
    /// The hash at entry `index` (from 1), when `proof` shows it is there.
    pub fn verify(&self, index: u32, proof: &CodeProof) -> Result<B256, CodeError> {
        if index == 0 || index > self.count {
            return Err(CodeError::OutOfTable {
                index,
                count: self.count,
            });
        }
        let bad = CodeError::BadProof { index };
        let mut i = (index - 1) as usize;
        let mut len = self.count as usize;
        let mut node = proof.hash;
        let mut siblings = proof.siblings.iter();
        while len > 1 {
            let sibling = i ^ 1;
            if sibling < len {
                let s = siblings.next().ok_or(CodeError::BadProof { index })?;
                node = if i.is_multiple_of(2) {
                    parent(&node, s)
                } else {
                    parent(s, &node)
                };
            }
            i /= 2;
            len = len.div_ceil(2);
        }
        if siblings.next().is_some() || node != self.root {
            return Err(bad);
        }
        Ok(proof.hash)
    }
}

/// `code` when its keccak256 is `want` and it is not too long.
pub fn check_code(want: &B256, code: &[u8]) -> Result<(), CodeError> {
    if code.len() > MAX_CODE_BYTES {
        return Err(CodeError::TooLong { len: code.len() });
    }
    let got = keccak256(code);
    if &got != want {
        return Err(CodeError::WrongCode { want: *want, got });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hashes(n: usize) -> Vec<B256> {
        table_of((0..n as u64).map(|i| keccak256(i.to_le_bytes())))
    }

    #[test]
    fn every_entry_proves_in_tables_of_every_shape() {
        for n in 1..=17 {
            let table = hashes(n);
            let tree = CodeTree::new(table.clone());
            let summary = tree.summary().unwrap();
            assert_eq!(summary.count as usize, n);
            for index in 1..=n as u32 {
                let p = tree.proof(index).unwrap();
                assert_eq!(summary.verify(index, &p), Ok(table[index as usize - 1]));
                // Another entry's hash, a sibling too many or too few, or
                // another place: refused.
                let mut wrong = p.clone();
                wrong.hash = keccak256(b"other");
                assert!(summary.verify(index, &wrong).is_err());
                let mut longer = p.clone();
                longer.siblings.push(B256::ZERO);
                assert!(summary.verify(index, &longer).is_err());
                if !p.siblings.is_empty() {
                    let mut shorter = p.clone();
                    shorter.siblings.pop();
                    assert!(summary.verify(index, &shorter).is_err());
                    let other = if index == 1 { 2 } else { index - 1 };
                    assert!(summary.verify(other, &p).is_err());
                }
            }
            assert!(tree.proof(0).is_none());
            assert!(tree.proof(n as u32 + 1).is_none());
            let p = tree.proof(1).unwrap();
            assert!(matches!(
                summary.verify(n as u32 + 1, &p),
                Err(CodeError::OutOfTable { .. })
            ));
        }
        assert!(CodeTree::new(Vec::new()).summary().is_none());
    }

    #[test]
    fn tables_leave_out_no_code_and_unknown_and_repeat_nothing() {
        let a = keccak256(b"a");
        let table = table_of([a, EMPTY_CODE_HASH, B256::ZERO, a]);
        assert_eq!(table, vec![a]);
        assert_eq!(place_of(&table, &a), Some(1));
        assert_eq!(place_of(&table, &EMPTY_CODE_HASH), None);
    }

    #[test]
    fn common_codes_are_the_most_shared() {
        let counts = [(1, 2), (2, 1), (3, 3), (7, 1)];
        assert_eq!(common_places(counts), vec![3, 1]);
        let many = (1..200u32).map(|p| (p, 2));
        assert_eq!(common_places(many).len(), MAX_COMMON_CODES);
    }

    #[test]
    fn code_is_checked_by_its_hash() {
        let code = [0xef, 0x01, 0x00];
        assert_eq!(check_code(&keccak256(code), &code), Ok(()));
        assert!(matches!(
            check_code(&keccak256([1]), &code),
            Err(CodeError::WrongCode { .. })
        ));
        let long = vec![0u8; MAX_CODE_BYTES + 1];
        assert!(matches!(
            check_code(&keccak256(&long), &long),
            Err(CodeError::TooLong { .. })
        ));
    }

    #[test]
    fn a_whole_table_is_checked_against_its_root() {
        let table: Vec<B256> = (1..=5u8).map(B256::repeat_byte).collect();
        let summary = CodeTree::new(table.clone()).summary().unwrap();
        let bytes: Vec<u8> = table.iter().flat_map(|h| h.0).collect();
        assert_eq!(parse_table(&bytes, &summary), Ok(table));
        assert!(matches!(
            parse_table(&bytes[..64], &summary),
            Err(CodeError::TableSize { .. })
        ));
        let mut swapped = bytes.clone();
        swapped[..32].copy_from_slice(&[9; 32]);
        assert_eq!(parse_table(&swapped, &summary), Err(CodeError::TableRoot));
    }
}
