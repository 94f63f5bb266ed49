//! LWE parameters and the choice of plaintext modulus.
//!
//! We keep ChalametPIR's lattice parameters: dimension 1774, ciphertext
//! modulus q = 2^32, secret and error drawn uniformly from {-1, 0, 1}. What
//! varies with the database is the plaintext modulus p = 2^bits. Decoding a
//! response element fails only if the accumulated error `e . D_j` reaches
//! `q / (2p)`; `docs/security.md` derives the bound used here.

use crate::error::ParamError;

/// LWE secret dimension (ChalametPIR / FrodoPIR choice for 128-bit security).
pub const LWE_DIMENSION: u32 = 1774;
/// Bytes in the seed from which the public matrix is expanded.
pub const SEED_BYTES: usize = 32;
/// Widest plaintext element we encode: database entries are stored as `i8`
/// so that the answer and hint kernels can use 8-bit integer dot products.
pub const MAX_PLAINTEXT_BITS: u32 = 8;
/// Target: a whole response decodes wrongly with probability at most 2^-40.
pub const CORRECTNESS_TARGET_LOG2: f64 = -40.0;

/// Lattice parameters of one database. q is fixed at 2^32.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LweParams {
    /// Secret dimension n.
    pub dimension: u32,
    /// log2 of the plaintext modulus p.
    pub plaintext_bits: u32,
}

impl LweParams {
    /// Picks the widest plaintext modulus (at most 2^8) for which a response
    /// over `rows` database rows decodes its `elems` elements correctly with
    /// probability at least `1 - 2^-40`.
    pub fn for_rows(rows: u64, elems: u64) -> Result<Self, ParamError> {
        (1..=MAX_PLAINTEXT_BITS)
            .rev()
            .find(|&bits| log2_failure_probability(rows, bits, elems) <= CORRECTNESS_TARGET_LOG2)
            .map(|plaintext_bits| LweParams {
                dimension: LWE_DIMENSION,
                plaintext_bits,
            })
            .ok_or(ParamError::TooManyRows(rows))
    }

    /// Plaintext modulus p.
    pub fn plaintext_modulus(&self) -> u32 {
        1 << self.plaintext_bits
    }

    /// Scaling factor q / p that lifts a plaintext into the ciphertext space.
    pub fn delta(&self) -> u32 {
        1u32 << (32 - self.plaintext_bits)
    }

    /// Checks parameters read from the wire.
    pub fn validate(&self) -> Result<(), ParamError> {
        if self.dimension != LWE_DIMENSION {
            return Err(ParamError::Dimension(self.dimension));
        }
        if !(1..=MAX_PLAINTEXT_BITS).contains(&self.plaintext_bits) {
            return Err(ParamError::PlaintextBits(self.plaintext_bits));
        }
        Ok(())
    }
}

/// Upper bound (log2) on the probability that any of `elems` response
/// elements of an honest response carries noise of `q / (4p)` or more over a
/// database of `rows` rows with p = 2^bits.
///
/// The noise in one element is `X = sum_i e_i * d_i` with `e_i` uniform in
/// {-1,0,1} and `|d_i| <= p/2` (entries are stored centred). Hoeffding gives
/// `P(|X| >= t) <= 2 exp(-2 t^2 / (rows * p^2))`. Decoding is correct while
/// `|X| < q / (2p)`; the client also rejects any element with
/// `|X| >= q / (4p)` as corrupted, so we bound that event:
/// `P <= 2 exp(-q^2 / (8 rows p^4))` per element, and a union bound over
/// the elements.
pub fn log2_failure_probability(rows: u64, bits: u32, elems: u64) -> f64 {
    let rows = rows.max(1) as f64;
    let q = 2f64.powi(32);
    let p = 2f64.powi(bits as i32);
    let exponent = q * q / (8.0 * rows * p.powi(4));
    1.0 + (elems.max(1) as f64).log2() - exponent * std::f64::consts::LOG2_E
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eight_bits_up_to_millions_of_rows() {
        for rows in [1u64, 1_000, 300_000, 5_000_000] {
            assert_eq!(LweParams::for_rows(rows, 48).unwrap().plaintext_bits, 8);
        }
    }

    #[test]
    fn narrower_plaintext_for_huge_row_counts() {
        let p = LweParams::for_rows(80_000_000, 48).unwrap();
        assert!(p.plaintext_bits < 8);
        assert!(log2_failure_probability(80_000_000, p.plaintext_bits, 48) <= -40.0);
        assert!(LweParams::for_rows(u64::MAX, 48).is_err());
    }

    #[test]
    fn delta_times_p_is_q() {
        let p = LweParams::for_rows(1000, 1).unwrap();
        assert_eq!(p.delta() as u64 * p.plaintext_modulus() as u64, 1u64 << 32);
    }
}
