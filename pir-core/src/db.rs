//! The encoded database: `k` binary fuse filters side by side (the square
//! layout), stored as centred `i8` plaintext elements in a panel layout the
//! kernels stream through.
//!
//! Layout: columns are grouped into panels of up to [`PANEL_COLS`] columns
//! (the last panel is narrower, a multiple of [`LANE_COLS`]); inside a panel,
//! rows are taken four at a time and for each column the four entries are
//! contiguous. One 64-byte load then holds 4 rows x 16 columns, exactly the
//! operand of an 8-bit dot-product instruction.

use std::ops::Range;

use rayon::prelude::*;

use crate::error::ParamError;
use crate::fuse::{Arity, FuseGeometry};
use crate::params::{LweParams, LWE_DIMENSION};
use crate::record::record_elems;

/// Columns per panel.
pub const PANEL_COLS: usize = 64;
/// Columns per SIMD lane group (16 x i32 in a 512-bit register).
pub const LANE_COLS: usize = 16;
/// Largest number of partitions we build or accept.
pub const MAX_PARTITIONS: u32 = 1 << 16;
/// Largest value we store.
pub const MAX_VALUE_BYTES: u32 = 1 << 16;

/// Everything a client needs to know about a database besides the hint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DbShape {
    pub lwe: LweParams,
    pub geometry: FuseGeometry,
    /// Packing factor k: number of partitions laid side by side.
    pub partitions: u32,
    pub value_bytes: u32,
    /// Seed of the key -> partition hash.
    pub partition_seed: u64,
    /// Filter seed of each partition.
    pub filter_seeds: Vec<u64>,
}

impl DbShape {
    /// Plaintext elements per record (`w`).
    pub fn record_elems(&self) -> usize {
        record_elems(self.value_bytes as usize, self.lwe.plaintext_bits)
    }

    /// Database rows (filter cells rounded up to a multiple of 4).
    pub fn rows(&self) -> usize {
        (self.geometry.array_length() as usize).next_multiple_of(4)
    }

    /// Database columns: `k * w`.
    pub fn cols(&self) -> usize {
        self.partitions as usize * self.record_elems()
    }

    /// Columns rounded up to whole SIMD lane groups.
    pub fn padded_cols(&self) -> usize {
        self.cols().next_multiple_of(LANE_COLS)
    }

    /// Checks a shape read from the wire.
    pub fn validate(&self) -> Result<(), ParamError> {
        self.lwe.validate()?;
        self.geometry.validate()?;
        if self.partitions == 0 || self.partitions > MAX_PARTITIONS {
            return Err(ParamError::Shape("partition count out of range"));
        }
        if self.filter_seeds.len() != self.partitions as usize {
            return Err(ParamError::Shape("one filter seed per partition"));
        }
        if self.value_bytes > MAX_VALUE_BYTES {
            return Err(ParamError::Shape("values too large"));
        }
        if (self.rows() as u64).saturating_mul(self.padded_cols() as u64) > 1 << 40 {
            return Err(ParamError::Shape("database too large"));
        }
        Ok(())
    }
}

/// How many partitions to lay side by side.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Packing {
    /// Minimise query + response bytes while the hint stays within the budget.
    Auto { hint_budget_bytes: u64 },
    /// As `Auto` with a budget of `hint_floor_bytes` while that keeps
    /// query + response within `lookup_bytes`; past that (large bases,
    /// where a fixed budget would make every lookup megabytes), the
    /// smallest hint that meets the target, at most `hint_cap_bytes`, and
    /// where even the cap cannot, the least query + response under it.
    ForLookup {
        lookup_bytes: u64,
        hint_floor_bytes: u64,
        hint_cap_bytes: u64,
    },
    /// Exactly this many (1 = plain ChalametPIR).
    Fixed(u32),
}

impl Packing {
    /// `"auto"` (choose under a hint budget of `hint_budget_mib` MiB) or a
    /// partition count from 1 to [`MAX_PARTITIONS`]: how configs and command
    /// lines name a packing.
    pub fn parse(s: &str, hint_budget_mib: u64) -> Result<Packing, ParamError> {
        match s.trim() {
            "auto" => Ok(Packing::Auto {
                hint_budget_bytes: hint_budget_mib.saturating_mul(1 << 20),
            }),
            k => match k.parse::<u32>() {
                Ok(k @ 1..=MAX_PARTITIONS) => Ok(Packing::Fixed(k)),
                _ => Err(ParamError::Shape(
                    "packing must be \"auto\" or a partition count from 1 to 65536",
                )),
            },
        }
    }
}

impl Packing {
    /// The packing factor for `keys` records of `elems` elements.
    pub fn partitions(&self, keys: usize, arity: Arity, elems: usize) -> u32 {
        match *self {
            Packing::Fixed(k) => k.clamp(1, MAX_PARTITIONS),
            Packing::Auto { hint_budget_bytes } => {
                choose_partitions(keys, arity, elems, hint_budget_bytes)
            }
            Packing::ForLookup {
                lookup_bytes,
                hint_floor_bytes,
                hint_cap_bytes,
            } => choose_for_lookup(
                keys,
                arity,
                elems,
                lookup_bytes,
                hint_floor_bytes,
                hint_cap_bytes,
            ),
        }
    }
}

/// What a database of `keys` records of `value_bytes` bytes would be,
/// estimated before building it (`ethpir-snapshot plan`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Plan {
    pub partitions: u32,
    pub rows: u64,
    /// Elements per record.
    pub elems: usize,
    pub plaintext_bits: u32,
    pub query_bytes: u64,
    pub response_bytes: u64,
    pub hint_bytes: u64,
    /// The encoded database (one byte per element).
    pub database_bytes: u64,
}

/// Estimates the database [`EncodedDb::encode`] would build, by the same
/// choices (packing, then plaintext bits for the correctness bound).
pub fn plan(keys: usize, value_bytes: usize, options: &EncodeOptions) -> Result<Plan, ParamError> {
    let mut bits = crate::params::MAX_PLAINTEXT_BITS;
    loop {
        let elems = record_elems(value_bytes, bits);
        let k = options.packing.partitions(keys, options.arity, elems);
        let rows = estimated_rows(keys, options.arity, k).next_multiple_of(4);
        let checked = k as u64 * elems as u64;
        let lwe = LweParams::for_rows(rows, checked)?;
        if lwe.plaintext_bits < bits {
            bits = lwe.plaintext_bits;
            continue;
        }
        return Ok(Plan {
            partitions: k,
            rows,
            elems,
            plaintext_bits: bits,
            query_bytes: 4 * rows,
            response_bytes: 4 * checked,
            hint_bytes: 4 * LWE_DIMENSION as u64 * checked,
            database_bytes: rows * checked,
        });
    }
}

/// Default hint budget: small enough for a phone to download and keep.
pub const DEFAULT_HINT_BUDGET: u64 = 32 << 20;

impl Default for Packing {
    fn default() -> Self {
        Packing::Auto {
            hint_budget_bytes: DEFAULT_HINT_BUDGET,
        }
    }
}

/// Options of [`EncodedDb::encode`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EncodeOptions {
    pub arity: Arity,
    pub packing: Packing,
}

impl Default for EncodeOptions {
    fn default() -> Self {
        EncodeOptions {
            arity: Arity::Three,
            packing: Packing::default(),
        }
    }
}

/// Rows of the fullest of `k` partitions of `keys` keys, estimated before
/// the filters exist (the mean plus three standard deviations).
fn estimated_rows(keys: usize, arity: Arity, k: u32) -> u64 {
    let per = keys.div_ceil(k as usize);
    let fullest = per + 3 * (per as f64).sqrt().ceil() as usize + 1;
    FuseGeometry::for_keys(arity, fullest, 0).array_length() as u64
}

/// Query + response bytes and hint bytes of a packing choice, estimated
/// before the filters exist.
pub fn estimate_sizes(keys: usize, arity: Arity, elems: usize, k: u32) -> (u64, u64) {
    let rows = estimated_rows(keys, arity, k);
    let traffic = 4 * rows + 4 * k as u64 * elems as u64;
    let hint = 4 * LWE_DIMENSION as u64 * k as u64 * elems as u64;
    (traffic, hint)
}

/// Chooses the packing factor: the `k` with the least query + response
/// bytes whose hint fits the budget (at least 1).
pub fn choose_partitions(keys: usize, arity: Arity, elems: usize, hint_budget_bytes: u64) -> u32 {
    let max_k = (keys.max(1) as u64).min(MAX_PARTITIONS as u64) as u32;
    let mut best = (u64::MAX, 1);
    for k in 1..=max_k {
        let (traffic, hint) = estimate_sizes(keys, arity, elems, k);
        if hint > hint_budget_bytes && k > 1 {
            break;
        }
        if traffic < best.0 {
            best = (traffic, k);
        }
    }
    best.1
}

/// Chooses the packing factor for a per-lookup target (see
/// [`Packing::ForLookup`]). Query + response shrink with `k` until the
/// response dominates, while the hint grows with `k`: past the floor, the
/// first `k` that meets the target has the smallest hint that does.
pub fn choose_for_lookup(
    keys: usize,
    arity: Arity,
    elems: usize,
    lookup_bytes: u64,
    hint_floor_bytes: u64,
    hint_cap_bytes: u64,
) -> u32 {
    let within_floor = choose_partitions(keys, arity, elems, hint_floor_bytes);
    if estimate_sizes(keys, arity, elems, within_floor).0 <= lookup_bytes {
        return within_floor;
    }
    let max_k = (keys.max(1) as u64).min(MAX_PARTITIONS as u64) as u32;
    for k in within_floor..=max_k {
        let (traffic, hint) = estimate_sizes(keys, arity, elems, k);
        if hint > hint_cap_bytes && k > 1 {
            break;
        }
        if traffic <= lookup_bytes {
            return k;
        }
    }
    choose_partitions(keys, arity, elems, hint_cap_bytes)
}

/// Bytes that stay put while a database answers from them: a memory map
/// of its file, shared by every worker through the page cache.
pub type SharedBytes = std::sync::Arc<dyn AsRef<[u8]> + Send + Sync>;

/// Where a database's panel bytes live.
enum DbBytes {
    /// Built here, or read whole.
    Owned(Vec<i8>),
    /// `len` bytes at `offset` of a mapped file: only the pages of the rows
    /// served are ever touched.
    Shared {
        bytes: SharedBytes,
        offset: usize,
        len: usize,
    },
}

impl DbBytes {
    fn as_slice(&self) -> &[i8] {
        match self {
            DbBytes::Owned(v) => v,
            DbBytes::Shared { bytes, offset, len } => {
                bytemuck::cast_slice(&(**bytes).as_ref()[*offset..*offset + *len])
            }
        }
    }
}

/// The encoded database a server answers from: all its rows, or a shard's
/// contiguous range of them ([`crate::shard::shard_rows`]).
pub struct EncodedDb {
    shape: DbShape,
    data: DbBytes,
    /// The rows answered from (all of them unless a shard).
    served: Range<usize>,
}

impl std::fmt::Debug for EncodedDb {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EncodedDb")
            .field("shape", &self.shape)
            .field("bytes", &self.bytes())
            .field("served", &self.served)
            .finish()
    }
}

impl EncodedDb {
    pub(crate) fn owned(shape: DbShape, data: Vec<i8>) -> Self {
        let served = 0..shape.rows();
        EncodedDb {
            shape,
            data: DbBytes::Owned(data),
            served,
        }
    }

    /// Rebuilds a database from its shape and panel bytes (as stored on disk).
    pub fn from_parts(shape: DbShape, data: Vec<i8>) -> Result<Self, ParamError> {
        shape.validate()?;
        if data.len() != shape.rows() * shape.padded_cols() {
            return Err(ParamError::Shape("database bytes do not match its shape"));
        }
        let db = EncodedDb::owned(shape, data);
        db.check_range()?;
        Ok(db)
    }

    /// A database whose panel bytes are `bytes[offset..]` of a shared
    /// buffer (a memory-mapped `db.bin`), answering only the rows in
    /// `served` (all of them, or a shard's [`crate::shard::shard_rows`]). Only the
    /// served rows are read, here to check their range and later to
    /// answer: a shard's memory holds its rows, not the file.
    pub fn from_shared(
        shape: DbShape,
        bytes: SharedBytes,
        offset: usize,
        served: Range<usize>,
    ) -> Result<Self, ParamError> {
        shape.validate()?;
        let len = shape.rows() * shape.padded_cols();
        if (*bytes).as_ref().len().checked_sub(offset) != Some(len) {
            return Err(ParamError::Shape("database bytes do not match its shape"));
        }
        if served.start >= served.end
            || served.end > shape.rows()
            || !served.start.is_multiple_of(4)
            || !served.end.is_multiple_of(4)
        {
            return Err(ParamError::Shape("served rows outside the database"));
        }
        let db = EncodedDb {
            shape,
            data: DbBytes::Shared { bytes, offset, len },
            served,
        };
        db.check_range()?;
        Ok(db)
    }

    /// Every served element within the plaintext range (the kernels'
    /// sums rely on it).
    fn check_range(&self) -> Result<(), ParamError> {
        let limit = 1i16 << (self.shape.lwe.plaintext_bits - 1);
        let out_of_range = (0..self.panels()).into_par_iter().any(|p| {
            self.served_panel_bytes(p)
                .iter()
                .any(|&v| (v as i16) < -limit || v as i16 >= limit)
        });
        match out_of_range {
            true => Err(ParamError::Shape(
                "database element outside the plaintext range",
            )),
            false => Ok(()),
        }
    }

    /// The bytes of panel `p` that hold the served rows.
    fn served_panel_bytes(&self, p: usize) -> &[i8] {
        let group_bytes = panel_width(self.shape.padded_cols(), p) * 4;
        &self.panel(p)[self.served.start / 4 * group_bytes..self.served.end / 4 * group_bytes]
    }

    pub fn shape(&self) -> &DbShape {
        &self.shape
    }

    /// The rows answered from: all of them, or a shard's range.
    pub fn served_rows(&self) -> Range<usize> {
        self.served.clone()
    }

    /// Whether every row is served (not a shard).
    pub fn is_whole(&self) -> bool {
        self.served == (0..self.shape.rows())
    }

    /// The panel-layout elements (of every row, served or not).
    pub fn data(&self) -> &[i8] {
        self.data.as_slice()
    }

    /// Bytes of encoded database an answer scans.
    pub fn bytes(&self) -> usize {
        self.served.len() * self.shape.padded_cols()
    }

    /// Number of panels.
    pub fn panels(&self) -> usize {
        self.shape.padded_cols().div_ceil(PANEL_COLS)
    }

    /// `(first column, width)` of panel `p`.
    pub fn panel_columns(&self, p: usize) -> (usize, usize) {
        (p * PANEL_COLS, panel_width(self.shape.padded_cols(), p))
    }

    /// The bytes of panel `p`.
    pub fn panel(&self, p: usize) -> &[i8] {
        let rows = self.shape.rows();
        let start = p * PANEL_COLS * rows;
        &self.data()[start..start + panel_width(self.shape.padded_cols(), p) * rows]
    }

    /// Element `(row, col)` (centred), for tests and the GPU layout check.
    pub fn get(&self, row: usize, col: usize) -> i8 {
        let (p, jj) = (col / PANEL_COLS, col % PANEL_COLS);
        let width = panel_width(self.shape.padded_cols(), p);
        self.panel(p)[(row / 4) * width * 4 + jj * 4 + row % 4]
    }
}

/// Width of panel `p` in a database of `padded` columns.
pub fn panel_width(padded: usize, p: usize) -> usize {
    (padded - p * PANEL_COLS).min(PANEL_COLS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packing_parses_auto_and_counts() {
        assert_eq!(
            Packing::parse("auto", 2),
            Ok(Packing::Auto {
                hint_budget_bytes: 2 << 20
            })
        );
        assert_eq!(Packing::parse("7", 32), Ok(Packing::Fixed(7)));
        for bad in ["0", "-1", "x", "65537", ""] {
            assert!(Packing::parse(bad, 32).is_err(), "{bad}");
        }
    }

    #[test]
    fn auto_packing_balances_traffic_under_budget() {
        let k = choose_partitions(1 << 20, Arity::Three, 48, 40 << 20);
        let (traffic, hint) = estimate_sizes(1 << 20, Arity::Three, 48, k);
        assert!(k > 16, "k = {k}");
        assert!(hint <= 40 << 20);
        assert!(traffic <= 128 << 10, "traffic {traffic}");
        assert_eq!(choose_partitions(1, Arity::Three, 48, 1), 1);
    }

    #[test]
    fn lookup_target_packing_takes_the_smallest_hint_that_meets_it() {
        let (keys, elems) = (1 << 24, 48);
        let target = 1536 << 10;
        let floor = 32 << 20;
        let k = choose_for_lookup(keys, Arity::Three, elems, target, floor, 512 << 20);
        let (traffic, hint) = estimate_sizes(keys, Arity::Three, elems, k);
        assert!(traffic <= target, "traffic {traffic}");
        assert!(hint <= 512 << 20);
        // 2^26 keys miss the target under the floor: the hint grew, and
        // k - 1 would have missed it.
        let big = choose_for_lookup(keys << 2, Arity::Three, elems, target, floor, 512 << 20);
        let (traffic, hint) = estimate_sizes(keys << 2, Arity::Three, elems, big);
        assert!(traffic <= target && hint > floor, "k = {big}");
        let (smaller, _) = estimate_sizes(keys << 2, Arity::Three, elems, big - 1);
        assert!(smaller > target, "k - 1 would have met the target");
        // Small bases keep the floor's rule (least traffic under it).
        let small = choose_for_lookup(1 << 20, Arity::Three, elems, target, floor, 512 << 20);
        assert_eq!(
            small,
            choose_partitions(1 << 20, Arity::Three, elems, floor)
        );
        // A cap too small for the target: the least traffic under the cap.
        let capped = choose_for_lookup(keys, Arity::Three, elems, 1024, 1 << 20, 8 << 20);
        assert_eq!(
            capped,
            choose_partitions(keys, Arity::Three, elems, 8 << 20)
        );
    }
}
