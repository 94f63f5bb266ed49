//! Binary fuse filters (Graf & Lemire), 3-wise and 4-wise, used here as an
//! additive key -> row map: a key's record is the sum (mod p) of the database
//! rows at its `arity` positions. This module only finds the positions and
//! the peeling order; `db` fills in the rows.

use crate::error::ParamError;

/// Largest segment length we build or accept.
pub const MAX_SEGMENT_LENGTH: u32 = 1 << 18;
/// Largest filter we accept from the wire (cells).
pub const MAX_ARRAY_LENGTH: u32 = 1 << 30;

/// How many database rows a key touches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arity {
    Three = 3,
    Four = 4,
}

impl Arity {
    pub fn get(self) -> usize {
        self as usize
    }

    pub fn from_u8(v: u8) -> Result<Self, ParamError> {
        match v {
            3 => Ok(Arity::Three),
            4 => Ok(Arity::Four),
            _ => Err(ParamError::Geometry("arity must be 3 or 4")),
        }
    }
}

/// The shape of a filter: shared by every partition of a database.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FuseGeometry {
    pub arity: Arity,
    pub segment_length: u32,
    pub segment_count: u32,
}

impl FuseGeometry {
    /// Geometry for `keys` keys; `extra_segments` grows the array after
    /// repeated construction failures.
    pub fn for_keys(arity: Arity, keys: usize, extra_segments: u32) -> Self {
        let n = keys.max(2) as f64;
        let (seg_exp, size_factor) = match arity {
            Arity::Three => (
                n.ln() / 3.33f64.ln() + 2.25,
                (0.875 + 0.25 * 1e6f64.ln() / n.ln()).max(1.125),
            ),
            Arity::Four => (
                n.ln() / 2.91f64.ln() - 0.5,
                (0.77 + 0.305 * 6e5f64.ln() / n.ln()).max(1.075),
            ),
        };
        let segment_length =
            (1u32 << seg_exp.floor().clamp(2.0, 18.0) as u32).min(MAX_SEGMENT_LENGTH);
        let capacity = (n * size_factor).round() as u64;
        let segments = capacity.div_ceil(segment_length as u64);
        let segment_count =
            segments.saturating_sub(arity.get() as u64 - 1).max(1) as u32 + extra_segments;
        FuseGeometry {
            arity,
            segment_length,
            segment_count,
        }
    }

    /// Number of cells (database rows before padding).
    pub fn array_length(&self) -> u32 {
        (self.segment_count + self.arity.get() as u32 - 1) * self.segment_length
    }

    /// Checks a geometry read from the wire.
    pub fn validate(&self) -> Result<(), ParamError> {
        if !self.segment_length.is_power_of_two() || self.segment_length > MAX_SEGMENT_LENGTH {
            return Err(ParamError::Geometry(
                "segment length must be a power of two <= 2^18",
            ));
        }
        if self.segment_count == 0 {
            return Err(ParamError::Geometry("no segments"));
        }
        let cells =
            (self.segment_count as u64 + self.arity.get() as u64 - 1) * self.segment_length as u64;
        if cells > MAX_ARRAY_LENGTH as u64 {
            return Err(ParamError::Geometry("filter too large"));
        }
        Ok(())
    }

    /// The cells of a key with filter hash `hash`. Only the first
    /// `arity` entries are meaningful; they are pairwise distinct.
    #[inline]
    pub fn positions(&self, hash: u64) -> [u32; 4] {
        let mask = (self.segment_length - 1) as u64;
        let span = self.segment_count as u64 * self.segment_length as u64;
        let h0 = ((hash as u128 * span as u128) >> 64) as u64;
        let h1 = (h0 + self.segment_length as u64) ^ ((hash >> 18) & mask);
        let h2 = (h0 + 2 * self.segment_length as u64) ^ (hash & mask);
        let h3 = match self.arity {
            Arity::Three => 0,
            Arity::Four => {
                (h0 + 3 * self.segment_length as u64) ^ (crate::keys::mix64(hash) & mask)
            }
        };
        [h0 as u32, h1 as u32, h2 as u32, h3 as u32]
    }
}

/// Peels the hypergraph of `hashes`. On success returns, in peeling order,
/// `(key index, cell)` pairs: assigning cells in reverse order lets each key
/// fix its own cell last. `None` when this seed does not peel.
pub fn peel(geometry: &FuseGeometry, hashes: &[u64]) -> Option<Vec<(u32, u32)>> {
    let cells = geometry.array_length() as usize;
    let arity = geometry.arity.get();
    let mut count = vec![0u32; cells];
    let mut xor_keys = vec![0u32; cells];
    for (idx, &h) in hashes.iter().enumerate() {
        for &pos in &geometry.positions(h)[..arity] {
            count[pos as usize] += 1;
            xor_keys[pos as usize] ^= idx as u32;
        }
    }
    let mut stack: Vec<u32> = (0..cells as u32)
        .filter(|&c| count[c as usize] == 1)
        .collect();
    let mut order = Vec::with_capacity(hashes.len());
    while let Some(cell) = stack.pop() {
        if count[cell as usize] != 1 {
            continue;
        }
        let idx = xor_keys[cell as usize];
        order.push((idx, cell));
        for &pos in &geometry.positions(hashes[idx as usize])[..arity] {
            count[pos as usize] -= 1;
            xor_keys[pos as usize] ^= idx;
            if count[pos as usize] == 1 {
                stack.push(pos);
            }
        }
    }
    (order.len() == hashes.len()).then_some(order)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::mix64;

    #[test]
    fn positions_are_distinct_and_in_range() {
        for arity in [Arity::Three, Arity::Four] {
            for n in [1usize, 10, 1000, 100_000] {
                let g = FuseGeometry::for_keys(arity, n, 0);
                g.validate().unwrap();
                for i in 0..10_000u64 {
                    let p = g.positions(mix64(i));
                    let p = &p[..arity.get()];
                    assert!(p.iter().all(|&c| c < g.array_length()));
                    for a in 0..p.len() {
                        for b in a + 1..p.len() {
                            assert_ne!(p[a], p[b]);
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn peels_random_sets() {
        for arity in [Arity::Three, Arity::Four] {
            for n in [1usize, 2, 3, 17, 1000, 50_000] {
                let ok = (0..20u64).any(|seed| {
                    let hashes: Vec<u64> = (0..n as u64).map(|i| mix64(i ^ (seed << 40))).collect();
                    let g = FuseGeometry::for_keys(arity, n, 0);
                    peel(&g, &hashes).is_some()
                });
                assert!(ok, "arity {arity:?} n {n}");
            }
        }
    }
}
