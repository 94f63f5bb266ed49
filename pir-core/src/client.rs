//! The PIR client: holds the setup data (seed, shape, hint), never the
//! public matrix. The key-independent, expensive part of a query
//! (`b0 = s.A + e`) is made ahead of time as a [`PreparedQuery`]; the online
//! step only adds the key's filter positions.

use rand::{CryptoRng, Rng};
use rayon::prelude::*;
use zeroize::Zeroize;

use crate::db::DbShape;
use crate::error::{DecodeError, WireError};
use crate::keys::{record_tag, KeyDigest};
use crate::matrix::PublicMatrix;

use crate::record::decode_record;
use crate::wire::{Query, Response, SetupData, SetupId};

/// A client for one snapshot.
pub struct PirClient {
    setup: SetupData,
    id: SetupId,
}

/// `s` and `b0 = s.A + e` for one future query. Used once (it is moved into
/// [`PirClient::query`]) and wiped when dropped.
pub struct PreparedQuery {
    setup_id: SetupId,
    secret: Vec<i8>,
    b0: Vec<u32>,
}

impl Drop for PreparedQuery {
    fn drop(&mut self) {
        self.secret.zeroize();
        self.b0.zeroize();
    }
}

impl std::fmt::Debug for PreparedQuery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PreparedQuery(..)")
    }
}

/// What the client keeps between sending a query and decoding its answer.
/// Wiped when dropped.
pub struct PendingAnswer {
    setup_id: SetupId,
    secret: Vec<i8>,
    key: Vec<u8>,
    partition: u32,
}

impl Drop for PendingAnswer {
    fn drop(&mut self) {
        self.secret.zeroize();
        self.key.zeroize();
    }
}

/// Decoded answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Lookup {
    /// The key's value.
    Found(Vec<u8>),
    /// The key is not in this database.
    Absent,
}

/// What a setup may ask of the client. A hostile server could otherwise
/// announce a geometry that makes every prepared query gigabytes; a setup
/// beyond any limit is refused before anything is allocated for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClientLimits {
    /// Database rows (each prepared query holds 4 bytes per row).
    pub max_rows: u64,
    /// Partitions laid side by side (k).
    pub max_partitions: u32,
    /// Bytes of setup data (mostly the hint).
    pub max_setup_bytes: u64,
    /// Bytes of one prepared query (`b0` and the secret).
    pub max_prepared_bytes: u64,
}

impl Default for ClientLimits {
    /// What a wallet can afford: a 16 MiB prepared query, a 256 MiB hint.
    fn default() -> Self {
        ClientLimits {
            max_rows: 1 << 22,
            max_partitions: 4096,
            max_setup_bytes: 256 << 20,
            max_prepared_bytes: 16 << 20,
        }
    }
}

/// Why setup data was refused.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum SetupError {
    #[error(transparent)]
    Wire(#[from] WireError),
    #[error("the setup asks for {what} = {value}, over this client's limit of {limit}")]
    OverLimit {
        what: &'static str,
        value: u64,
        limit: u64,
    },
    #[error(
        "the setup's {bits}-bit plaintext over {rows} rows breaks the correctness bound (at most {allowed} bits)"
    )]
    CorrectnessBound { rows: u64, bits: u32, allowed: u32 },
}

impl ClientLimits {
    /// Checks a setup's size and announced geometry.
    pub fn check(&self, shape: &DbShape, setup_bytes: u64) -> Result<(), SetupError> {
        let rows = shape.rows() as u64;
        let prepared = 4 * rows + shape.lwe.dimension as u64;
        for (what, value, limit) in [
            ("setup bytes", setup_bytes, self.max_setup_bytes),
            ("rows", rows, self.max_rows),
            (
                "partitions",
                shape.partitions as u64,
                self.max_partitions as u64,
            ),
            ("prepared-query bytes", prepared, self.max_prepared_bytes),
        ] {
            if value > limit {
                return Err(SetupError::OverLimit { what, value, limit });
            }
        }
        Ok(())
    }

    /// Checks setup bytes before parsing them: the size, then (from the
    /// header, without reading the hint) the geometry.
    fn check_bytes(&self, bytes: &[u8]) -> Result<(), SetupError> {
        if bytes.len() as u64 > self.max_setup_bytes {
            return Err(SetupError::OverLimit {
                what: "setup bytes",
                value: bytes.len() as u64,
                limit: self.max_setup_bytes,
            });
        }
        Ok(())
    }
}

/// The plaintext width a setup announces must keep the correctness bound
/// for its final row count: a server cannot pick a wider one to make honest
/// answers fail the noise check.
fn check_bound(shape: &DbShape) -> Result<(), SetupError> {
    let rows = shape.rows() as u64;
    let allowed = crate::params::LweParams::for_rows(rows, shape.cols() as u64)
        .map(|p| p.plaintext_bits)
        .unwrap_or(0);
    if shape.lwe.plaintext_bits > allowed {
        return Err(SetupError::CorrectnessBound {
            rows,
            bits: shape.lwe.plaintext_bits,
            allowed,
        });
    }
    Ok(())
}

/// Why decoding refused a response.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum ClientError {
    #[error(transparent)]
    Decode(#[from] DecodeError),
    #[error("the response was altered or made for another query (noise check failed)")]
    Corrupted,
    #[error("the prepared query belongs to another snapshot")]
    WrongSetup,
    /// Every element of the key's record moved by the same whole number
    /// of plaintext steps: the noise check cannot see such a shift, and
    /// the tag alone would read it as "absent" (docs/security.md, "Blind
    /// shifts").
    #[error("the response was shifted by whole plaintext steps (tampering)")]
    Shifted,
}

/// Uniform ternary samples in {-1, 0, 1} (rejection-sampled bytes).
fn ternary(rng: &mut (impl Rng + ?Sized), out: &mut [i8]) {
    let mut buf = [0u8; 64];
    let mut filled = 0;
    while filled < out.len() {
        rng.fill_bytes(&mut buf);
        for &b in &buf {
            if b < 255 && filled < out.len() {
                out[filled] = (b % 3) as i8 - 1;
                filled += 1;
            }
        }
    }
    buf.zeroize();
}

/// A ternary secret `s` of `n` entries and `b0 = s.A + e` over `rows`
/// columns of `matrix`: the rows of `A` where `s` is 0 are never expanded,
/// the others are added or subtracted (no multiplications), a tile of
/// columns per task on all cores of the current rayon pool. A batch of one
/// ([`prepare_b0_many`]), measured as fast as a pass of its own.
pub fn prepare_b0(
    matrix: &PublicMatrix,
    n: usize,
    rows: usize,
    rng: &mut (impl CryptoRng + ?Sized),
) -> (Vec<i8>, Vec<u32>) {
    prepare_b0_many(matrix, n, rows, 1, rng)
        .pop()
        .expect("a batch of one")
}

/// Queries accumulated together by one task of [`prepare_b0_many`]: their
/// tiles of `b0` (a block of columns each) stay in a core's L2 cache while
/// one expanded tile of `A` is added to each of them.
const PREPARE_GROUP: usize = 96;

/// [`prepare_b0`] for `count` queries at once, the same numbers as `count`
/// calls in a row with the same `rng` (each query's secret, then its
/// error): every tile of `A` is expanded once per group of queries instead
/// of once per query, so a batch costs about one query's expansion plus
/// the additions. What a first refresh of dozens of keys waits on.
pub fn prepare_b0_many(
    matrix: &PublicMatrix,
    n: usize,
    rows: usize,
    count: usize,
    rng: &mut (impl CryptoRng + ?Sized),
) -> Vec<(Vec<i8>, Vec<u32>)> {
    prepare_b0_many_with(crate::kernel::active(), matrix, n, rows, count, rng)
}

/// [`prepare_b0_many`] with a given kernel (the tests check each one the
/// CPU has against the others).
pub fn prepare_b0_many_with(
    kernel: crate::kernel::Kernel,
    matrix: &PublicMatrix,
    n: usize,
    rows: usize,
    count: usize,
    rng: &mut (impl CryptoRng + ?Sized),
) -> Vec<(Vec<i8>, Vec<u32>)> {
    let mut drawn: Vec<(Vec<i8>, Vec<i8>)> = (0..count)
        .map(|_| {
            let mut secret = vec![0i8; n];
            ternary(rng, &mut secret);
            let mut error = vec![0i8; rows];
            ternary(rng, &mut error);
            (secret, error)
        })
        .collect();
    let groups = count.div_ceil(PREPARE_GROUP).max(1);
    let per_group = count.div_ceil(groups).max(1);
    let secrets: Vec<&[i8]> = drawn.iter().map(|(s, _)| s.as_slice()).collect();
    let tile_cols = prepare_tile_cols(matrix);
    let tiles = rows.div_ceil(tile_cols);
    let mut b0s: Vec<Vec<u32>> = vec![vec![0u32; rows]; count];
    let parts: Vec<(usize, usize, Vec<u32>)> = (0..tiles)
        .flat_map(|t| (0..groups).map(move |g| (t, g)))
        .collect::<Vec<_>>()
        .into_par_iter()
        .map(|(t, g)| {
            let first = (g * per_group).min(count);
            let last = (first + per_group).min(count);
            let start = t * tile_cols;
            let width = tile_cols.min(rows - start);
            let acc = accumulate_group(kernel, matrix, &secrets[first..last], start, width);
            (t, g, acc)
        })
        .collect();
    for (t, g, mut acc) in parts {
        let first = (g * per_group).min(count);
        let start = t * tile_cols;
        for (q, tile) in acc.chunks(tile_cols.min(rows - start)).enumerate() {
            b0s[first + q][start..start + tile.len()].copy_from_slice(tile);
        }
        acc.zeroize();
    }
    drawn
        .iter_mut()
        .zip(b0s)
        .map(|((secret, error), mut b0)| {
            for (b, &e) in b0.iter_mut().zip(error.iter()) {
                *b = b.wrapping_add(e as i32 as u32);
            }
            error.zeroize();
            (std::mem::take(secret), b0)
        })
        .collect()
}

/// Rows of `A` expanded, then added into a group's tiles, together
/// ([`crate::kernel::add_signed_rows`], whose tables take rows three at a
/// time): each group tile is loaded and stored once per 96 rows.
const ROWS_AT_ONCE: usize = 96;

/// Columns of one task of [`prepare_b0_many`]: TurboSHAKE128 expands whole
/// blocks of [`crate::matrix::BLOCK_COLS`]; AES from any fourth column,
/// and half a block keeps 96 queries' tiles (384 KiB) within a core's L2
/// cache on more CPUs (measured 30 against 22 entries a nanosecond on a
/// Zen 3 core).
fn prepare_tile_cols(matrix: &PublicMatrix) -> usize {
    match matrix.expansion() {
        crate::matrix::Expansion::Aes128Ctr => crate::matrix::BLOCK_COLS / 2,
        crate::matrix::Expansion::TurboShake128 => crate::matrix::BLOCK_COLS,
    }
}

/// Entries between the starts of two expanded rows: 64 bytes past a tile's
/// width, so that rows of 2,048 columns (8 KiB) do not map the same
/// columns to one L1 cache set.
fn row_stride(width: usize) -> usize {
    width + 16
}

/// Columns `start .. start + width` of `s.A` for each secret of a group,
/// one after another: each row of `A` expanded once for all of them, and
/// rows where every secret is 0 never expanded.
fn accumulate_group(
    kernel: crate::kernel::Kernel,
    matrix: &PublicMatrix,
    secrets: &[&[i8]],
    start: usize,
    width: usize,
) -> Vec<u32> {
    let queries = secrets.len();
    let mut acc = vec![0u32; queries * width];
    let stride = row_stride(width);
    let mut rows = vec![0u32; ROWS_AT_ONCE * stride];
    let mut signs = vec![0i8; ROWS_AT_ONCE * queries];
    let mut picked: Vec<u32> = Vec::with_capacity(ROWS_AT_ONCE);
    let n = secrets.first().map_or(0, |s| s.len());
    let mut next = 0;
    while next < n {
        picked.clear();
        while picked.len() < ROWS_AT_ONCE && next < n {
            let at = picked.len() * queries;
            for (sign, secret) in signs[at..at + queries].iter_mut().zip(secrets) {
                *sign = secret[next];
            }
            if signs[at..at + queries].iter().any(|&s| s != 0) {
                picked.push(next as u32);
            }
            next += 1;
        }
        let rows = &mut rows[..picked.len() * stride];
        matrix.expand_rows_segment_with(kernel, &picked, start, (width, stride), rows);
        let signs = &signs[..picked.len() * queries];
        crate::kernel::add_signed_rows(kernel, &mut acc, width, signs, rows, stride);
    }
    rows.zeroize();
    signs.zeroize();
    picked.zeroize();
    acc
}

impl PirClient {
    /// A client from parsed setup data.
    pub fn new(setup: SetupData) -> Self {
        let digest = SetupData::digest_of(&setup.to_bytes());
        PirClient {
            id: SetupData::id_of(&digest),
            setup,
        }
    }

    /// A client from the setup bytes the server publishes, within the
    /// default [`ClientLimits`].
    pub fn from_setup_bytes(bytes: &[u8]) -> Result<Self, SetupError> {
        Self::from_setup_bytes_limited(bytes, &ClientLimits::default())
    }

    /// A client from setup bytes, refusing a setup beyond `limits` or one
    /// whose plaintext width breaks the correctness bound.
    pub fn from_setup_bytes_limited(
        bytes: &[u8],
        limits: &ClientLimits,
    ) -> Result<Self, SetupError> {
        limits.check_bytes(bytes)?;
        let setup = SetupData::from_bytes(bytes)?;
        limits.check(&setup.shape, bytes.len() as u64)?;
        check_bound(&setup.shape)?;
        let digest = SetupData::digest_of(bytes);
        Ok(PirClient {
            id: SetupData::id_of(&digest),
            setup,
        })
    }

    pub fn setup(&self) -> &SetupData {
        &self.setup
    }

    pub fn setup_id(&self) -> SetupId {
        self.id
    }

    /// Bytes the client holds: the hint, the filter seeds and the shape.
    pub fn state_bytes(&self) -> usize {
        self.setup.hint.len() * 4
            + self.setup.shape.filter_seeds.len() * 8
            + std::mem::size_of::<Self>()
    }

    /// Makes the key-independent part of a query: secret `s` and
    /// `b0 = s.A + e`, streaming `A` block by block on all cores.
    pub fn prepare(&self, rng: &mut (impl CryptoRng + ?Sized)) -> PreparedQuery {
        let shape = &self.setup.shape;
        let n = shape.lwe.dimension as usize;
        let (secret, b0) = prepare_b0(&self.setup.matrix, n, shape.rows(), rng);
        PreparedQuery {
            setup_id: self.id,
            secret,
            b0,
        }
    }

    /// `count` prepared queries made together ([`prepare_b0_many`]):
    /// the same work as one [`Self::prepare`] for the expansion of `A`,
    /// plus an addition per query.
    pub fn prepare_many(
        &self,
        count: usize,
        rng: &mut (impl CryptoRng + ?Sized),
    ) -> Vec<PreparedQuery> {
        let shape = &self.setup.shape;
        let n = shape.lwe.dimension as usize;
        prepare_b0_many(&self.setup.matrix, n, shape.rows(), count, rng)
            .into_iter()
            .map(|(secret, b0)| PreparedQuery {
                setup_id: self.id,
                secret,
                b0,
            })
            .collect()
    }

    /// The online step: consumes a prepared query, adds `Delta` at the key's
    /// filter positions. Returns the query to send and what decoding needs.
    pub fn query(
        &self,
        mut prepared: PreparedQuery,
        key: &[u8],
    ) -> Result<(Query, PendingAnswer), ClientError> {
        if prepared.setup_id != self.id {
            return Err(ClientError::WrongSetup);
        }
        let shape = &self.setup.shape;
        let digest = KeyDigest::of(key);
        let partition = digest.partition(shape.partition_seed, shape.partitions);
        let hash = digest.filter_hash(shape.filter_seeds[partition as usize]);
        let mut vector = std::mem::take(&mut prepared.b0);
        let delta = shape.lwe.delta();
        for &pos in &shape.geometry.positions(hash)[..shape.geometry.arity.get()] {
            vector[pos as usize] = vector[pos as usize].wrapping_add(delta);
        }
        let pending = PendingAnswer {
            setup_id: self.id,
            secret: std::mem::take(&mut prepared.secret),
            key: key.to_vec(),
            partition,
        };
        Ok((
            Query {
                setup_id: self.id,
                vector,
            },
            pending,
        ))
    }

    /// Decodes the answer to a query: the value, or [`Lookup::Absent`].
    pub fn decode(
        &self,
        pending: PendingAnswer,
        response: &Response,
    ) -> Result<Lookup, ClientError> {
        if pending.setup_id != self.id {
            return Err(ClientError::WrongSetup);
        }
        let shape = &self.setup.shape;
        let cols = shape.cols();
        if response.elems.len() != cols {
            return Err(DecodeError::ResponseLength {
                expected: cols,
                got: response.elems.len(),
            }
            .into());
        }
        let w = shape.record_elems();
        let first = pending.partition as usize * w;
        // s . M over every column, and the noise of every element checked:
        // a server that perturbs any partition's columns makes every lookup
        // fail alike, whichever partition holds the key.
        let mut sm = vec![0u32; cols];
        let kernel = crate::kernel::active();
        for (i, &s) in pending.secret.iter().enumerate() {
            let row = &self.setup.hint[i * cols..(i + 1) * cols];
            crate::kernel::add_signed_row(kernel, &mut sm, &[s], row);
        }
        let bits = shape.lwe.plaintext_bits;
        let delta = shape.lwe.delta();
        let mut noisy = 0u32;
        let mut plain = vec![0u8; cols];
        for ((p, &r), &m) in plain.iter_mut().zip(&response.elems).zip(&sm) {
            let x = r.wrapping_sub(m);
            let rounded = x.wrapping_add(delta / 2) >> (32 - bits);
            let noise = x.wrapping_sub(rounded << (32 - bits)) as i32;
            noisy |= (noise.unsigned_abs() >= delta / 4) as u32;
            *p = (rounded & ((1 << bits) - 1)) as u8;
        }
        if noisy != 0 {
            sm.zeroize();
            plain.zeroize();
            return Err(ClientError::Corrupted);
        }
        let mut elems = plain[first..first + w].to_vec();
        plain.zeroize();
        sm.zeroize();
        let lookup = read_record(&elems, bits, shape.value_bytes as usize, &pending.key);
        elems.zeroize();
        lookup
    }
}

/// What the decoded record `elems` says of `key`: its value when the tag
/// holds, [`ClientError::Shifted`] when it holds only once every element
/// is moved back by the same whole number of steps, else absent.
fn read_record(
    elems: &[u8],
    bits: u32,
    value_bytes: usize,
    key: &[u8],
) -> Result<Lookup, ClientError> {
    let (tag, value) = decode_record(elems, bits, value_bytes);
    if tag == record_tag(key, &value) {
        return Ok(Lookup::Found(value));
    }
    match uniformly_shifted(elems, bits, value_bytes, key) {
        true => Err(ClientError::Shifted),
        false => Ok(Lookup::Absent),
    }
}

/// Whether a record that fails its tag carries `key`'s tag once every
/// element is moved back by the same whole number of plaintext steps: what
/// a server (or a relay) that adds a multiple of Delta to every element of
/// an answer makes of a present key. An absent key's elements are the sum
/// of unrelated filter slots: a valid tag at some shift is a 2^-64 chance
/// per shift tried (2^bits - 1 of them).
fn uniformly_shifted(elems: &[u8], bits: u32, value_bytes: usize, key: &[u8]) -> bool {
    let mask = ((1u32 << bits) - 1) as u8;
    let mut moved = vec![0u8; elems.len()];
    let found = (1..=mask).any(|k| {
        for (m, &e) in moved.iter_mut().zip(elems) {
            *m = e.wrapping_sub(k) & mask;
        }
        let (tag, mut value) = decode_record(&moved, bits, value_bytes);
        let hit = tag == record_tag(key, &value);
        value.zeroize();
        hit
    });
    moved.zeroize();
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand_chacha::ChaCha20Rng;

    /// A batch is the same numbers as preparing its queries one by one
    /// with the same random stream: group edges, a partial last tile,
    /// both expansions.
    #[test]
    fn a_batch_prepares_what_one_by_one_does() {
        for expansion in Expansion::ALL {
            let matrix = PublicMatrix::new(expansion, [7u8; 32]);
            for (n, rows, count) in [
                (40, 2 * BLOCK + 300, 1),
                (41, 2 * BLOCK + 300, crate::kernel::TABLES_FROM + 1),
                (33, 900, PREPARE_GROUP + 5),
                (64, BLOCK, 3),
            ] {
                let mut one = ChaCha20Rng::seed_from_u64(count as u64);
                let alone: Vec<_> = (0..count)
                    .map(|_| prepare_b0(&matrix, n, rows, &mut one))
                    .collect();
                let mut many = ChaCha20Rng::seed_from_u64(count as u64);
                let batch = prepare_b0_many(&matrix, n, rows, count, &mut many);
                assert!(
                    batch == alone,
                    "{expansion:?} n={n} rows={rows} count={count}"
                );
            }
        }
    }

    const BLOCK: usize = crate::matrix::BLOCK_COLS;
    use crate::matrix::Expansion;
}
