//! Encoding records into the database a group of partitions at a time, so
//! that a base of 10^8 records never has all its keys, values and filter
//! cells in memory at once.
//!
//! The records are read from a [`RecordSource`] (a file on disk, or a
//! slice) as often as needed: one pass counts the keys of each partition
//! (which fixes the filters' geometry), then one pass per group of
//! contiguous partitions gathers that group's records, builds their
//! filters and lays their columns out into the panel bytes a [`PanelSink`]
//! hands out (a memory-mapped `db.bin`, or a vector). A partition's
//! filter seeds derive from its index alone, and its keys are taken in
//! the source's order, so the bytes do not depend on how the partitions
//! are grouped: a build within a small memory budget equals one built
//! whole, bit for bit.

use std::ops::Range;

use rand::Rng;
use rayon::prelude::*;

use crate::db::{
    panel_width, DbShape, EncodeOptions, EncodedDb, MAX_PARTITIONS, MAX_VALUE_BYTES, PANEL_COLS,
};
use crate::error::{EncodeError, ParamError};
use crate::fuse::{peel, FuseGeometry};
use crate::keys::{mix64, record_tag, KeyDigest};
use crate::params::LweParams;
use crate::record::{encode_record, record_elems};

/// Seeds tried per partition before the filter is made larger.
const SEEDS_PER_GEOMETRY: u32 = 64;
/// Times the filters are made larger before the encoder gives up.
const GEOMETRY_GROWTHS: u32 = 4;
/// Records read together by one task of a pass.
const CHUNK_RECORDS: usize = 1 << 14;
/// Chunks of a pass in flight at once (their gathered records are
/// moved into the group's partitions before the next ones are read).
const CHUNKS_IN_FLIGHT: usize = 64;

/// Records an encoder reads, as many times as it needs, in the same
/// order each time.
pub trait RecordSource: Sync {
    /// How many records there are.
    fn len(&self) -> usize;
    /// Whether there are none.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Bytes of every value.
    fn value_bytes(&self) -> usize;
    /// Record `i`: its key into `key` (cleared first), its value into
    /// `value` (exactly [`RecordSource::value_bytes`] long).
    fn read(&self, i: usize, key: &mut Vec<u8>, value: &mut [u8]);
}

/// Records held in memory as `(key, value)` pairs, every value of
/// `value_bytes` bytes (checked by [`SliceSource::new`]).
pub struct SliceSource<'a, K, V> {
    records: &'a [(K, V)],
    value_bytes: usize,
}

impl<'a, K: AsRef<[u8]>, V: AsRef<[u8]>> SliceSource<'a, K, V> {
    /// Checks that every value has `value_bytes` bytes.
    pub fn new(records: &'a [(K, V)], value_bytes: usize) -> Result<Self, EncodeError> {
        if let Some(index) = records
            .iter()
            .position(|(_, v)| v.as_ref().len() != value_bytes)
        {
            return Err(EncodeError::ValueLength {
                index,
                expected: value_bytes,
                got: records[index].1.as_ref().len(),
            });
        }
        Ok(SliceSource {
            records,
            value_bytes,
        })
    }
}

impl<K, V> RecordSource for SliceSource<'_, K, V>
where
    K: AsRef<[u8]> + Sync,
    V: AsRef<[u8]> + Sync,
{
    fn len(&self) -> usize {
        self.records.len()
    }

    fn value_bytes(&self) -> usize {
        self.value_bytes
    }

    fn read(&self, i: usize, key: &mut Vec<u8>, value: &mut [u8]) {
        let (k, v) = &self.records[i];
        key.clear();
        key.extend_from_slice(k.as_ref());
        value.copy_from_slice(v.as_ref());
    }
}

/// Where the encoder lays out the panel bytes.
pub trait PanelSink {
    /// Zeroed bytes for the panels of a database of `shape` (its filter
    /// seeds not chosen yet: zeros), `shape.rows() * shape.padded_cols()`
    /// long. Asked again, for a larger shape, when the filters must grow;
    /// what was written before is then discarded.
    fn panels(&mut self, shape: &DbShape) -> std::io::Result<&mut [i8]>;
}

/// Panel bytes in memory.
#[derive(Default)]
pub struct VecSink(pub Vec<i8>);

impl PanelSink for VecSink {
    fn panels(&mut self, shape: &DbShape) -> std::io::Result<&mut [i8]> {
        self.0 = Vec::new();
        self.0 = vec![0i8; shape.rows() * shape.padded_cols()];
        Ok(&mut self.0)
    }
}

/// Bytes of working memory a record of a group costs: its index, digest
/// and encoded elements while gathered, and its share of the group's
/// filter cells (at most 1.25 cells a key) until they are laid out. (The
/// peeling's hashes and order live only while one partition is built.)
fn group_bytes_per_record(elems: usize) -> usize {
    4 + 16 + elems + (5 * elems).div_ceil(4)
}

// The in-memory encoder is `EncodedDb`'s, written here so that the
// database's module does not depend on the encoder's.
impl EncodedDb {
    /// Encodes `records` (`key`, `value` of exactly `value_bytes` bytes)
    /// in memory, in one group ([`encode_into`] builds
    /// large databases within a memory budget).
    pub fn encode<K, V>(
        records: &[(K, V)],
        value_bytes: usize,
        options: &EncodeOptions,
        rng: &mut impl Rng,
    ) -> Result<Self, EncodeError>
    where
        K: AsRef<[u8]> + Sync,
        V: AsRef<[u8]> + Sync,
    {
        let source = SliceSource::new(records, value_bytes)?;
        let mut sink = VecSink::default();
        let shape = encode_into(&source, options, usize::MAX, rng, &mut sink)?;
        Ok(EncodedDb::owned(shape, sink.0))
    }
}

/// Refuses a source the encoder cannot lay out; its value bytes.
fn check_source(source: &dyn RecordSource) -> Result<usize, EncodeError> {
    if source.is_empty() {
        return Err(EncodeError::Empty);
    }
    if source.value_bytes() > MAX_VALUE_BYTES as usize {
        return Err(ParamError::Shape("values too large").into());
    }
    if source.len() > u32::MAX as usize {
        return Err(ParamError::Shape("too many records").into());
    }
    Ok(source.value_bytes())
}

/// Encodes every record of `source` into the panel bytes `sink` gives,
/// using at most about `memory_budget` bytes for the records of one group
/// of partitions (plus 2 bytes a record: each one's partition); returns
/// the database's shape.
pub fn encode_into(
    source: &dyn RecordSource,
    options: &EncodeOptions,
    memory_budget: usize,
    rng: &mut impl Rng,
    sink: &mut dyn PanelSink,
) -> Result<DbShape, EncodeError> {
    let value_bytes = check_source(source)?;
    let partition_seed: u64 = rng.random();
    let filter_base: u64 = rng.random();
    let mut bits = crate::params::MAX_PLAINTEXT_BITS;
    let mut partitioned: Option<Partitioned> = None;
    loop {
        let elems = record_elems(value_bytes, bits);
        let k = options
            .packing
            .partitions(source.len(), options.arity, elems);
        if partitioned.as_ref().is_none_or(|p| p.k != k) {
            partitioned.take();
            partitioned = Some(Partitioned::new(source, partition_seed, k));
        }
        let partitioned = partitioned.as_ref().expect("partitioned above");
        let fullest = partitioned.counts.iter().copied().max().unwrap_or(0) as usize;
        let geometry = FuseGeometry::for_keys(options.arity, fullest, 0);
        // The client checks the noise of every element of a response
        // (k x w of them), so the bound counts them all.
        let checked = k as u64 * elems as u64;
        let lwe = LweParams::for_rows(geometry.array_length() as u64, checked)?;
        if lwe.plaintext_bits < bits {
            bits = lwe.plaintext_bits;
            continue;
        }
        let plan = Plan {
            source,
            counts: &partitioned.counts,
            of_record: &partitioned.of_record,
            elems,
            lwe,
            value_bytes,
            partition_seed,
            filter_base,
            group_records: (memory_budget / group_bytes_per_record(elems)).max(1),
        };
        let shape = plan.fill(geometry, sink)?;
        // The filters may have grown while being built: the bound must
        // hold for the final row count too.
        let lwe = LweParams::for_rows(shape.rows() as u64, checked)?;
        if lwe.plaintext_bits < bits {
            bits = lwe.plaintext_bits;
            continue;
        }
        return Ok(shape);
    }
}

/// Where the keys fall under one partition seed and count: each record's
/// partition (2 bytes a record: `k` is at most 2^16) and each partition's
/// number of keys.
struct Partitioned {
    k: u32,
    of_record: Vec<u16>,
    counts: Vec<u32>,
}

impl Partitioned {
    /// One pass over the source: every key hashed once. The gathering
    /// passes read only their group's records after this.
    fn new(source: &dyn RecordSource, seed: u64, k: u32) -> Self {
        assert!(
            k as usize <= MAX_PARTITIONS as usize,
            "partitions fit 16 bits"
        );
        let chunks = source.len().div_ceil(CHUNK_RECORDS);
        let of_chunk: Vec<Vec<u16>> = (0..chunks)
            .into_par_iter()
            .map_init(
                || (Vec::new(), vec![0u8; source.value_bytes()]),
                |(key, value), c| {
                    chunk_range(source, c)
                        .map(|i| {
                            source.read(i, key, value);
                            KeyDigest::of(key).partition(seed, k) as u16
                        })
                        .collect()
                },
            )
            .collect();
        let mut of_record = Vec::with_capacity(source.len());
        let mut counts = vec![0u32; k as usize];
        for chunk in of_chunk {
            for &p in &chunk {
                counts[p as usize] += 1;
            }
            of_record.extend_from_slice(&chunk);
        }
        Partitioned {
            k,
            of_record,
            counts,
        }
    }
}

fn chunk_range(source: &dyn RecordSource, chunk: usize) -> Range<usize> {
    chunk * CHUNK_RECORDS..((chunk + 1) * CHUNK_RECORDS).min(source.len())
}

/// The keys of one partition, in the source's order.
#[derive(Default)]
struct Members {
    /// Index of each key in the source (for error reports).
    index: Vec<u32>,
    digest: Vec<KeyDigest>,
    /// `tag || value` of each key in plaintext elements, `elems` apiece.
    record: Vec<u8>,
}

/// A partition's filter: the seed that peeled, and its cells (`cells x
/// w` elements mod p).
struct Filter {
    seed: u64,
    cells: Vec<u8>,
}

/// What one task of a gathering pass found of the group: `(partition in
/// the group, index, digest)` of each key, and their encoded records.
struct Found {
    keys: Vec<(u32, u32, KeyDigest)>,
    records: Vec<u8>,
}

/// One pass's worth of fixed choices.
struct Plan<'a> {
    source: &'a dyn RecordSource,
    counts: &'a [u32],
    /// Each record's partition.
    of_record: &'a [u16],
    elems: usize,
    lwe: LweParams,
    value_bytes: usize,
    partition_seed: u64,
    filter_base: u64,
    /// Records a group may hold.
    group_records: usize,
}

impl Plan<'_> {
    fn partitions(&self) -> u32 {
        self.counts.len() as u32
    }

    /// Builds every partition's filter into the sink's panels, growing the
    /// filters when some partition will not peel.
    fn fill(
        &self,
        mut geometry: FuseGeometry,
        sink: &mut dyn PanelSink,
    ) -> Result<DbShape, EncodeError> {
        let k = self.partitions();
        for extra in 0..GEOMETRY_GROWTHS {
            if extra > 0 {
                geometry.segment_count += 1;
            }
            let mut shape = DbShape {
                lwe: self.lwe,
                geometry,
                partitions: k,
                value_bytes: self.value_bytes as u32,
                partition_seed: self.partition_seed,
                filter_seeds: vec![0; k as usize],
            };
            let bytes = sink.panels(&shape)?;
            assert_eq!(
                bytes.len(),
                shape.rows() * shape.padded_cols(),
                "the sink's panel bytes"
            );
            let mut panels = split_panels(bytes, shape.rows(), shape.padded_cols());
            let mut complete = true;
            for group in self.groups() {
                let Some(seeds) = self.build_group(&shape, group.clone(), extra, &mut panels)?
                else {
                    complete = false;
                    break;
                };
                shape.filter_seeds[group.start as usize..group.end as usize]
                    .copy_from_slice(&seeds);
            }
            if complete {
                return Ok(shape);
            }
        }
        Err(EncodeError::FilterConstruction(
            GEOMETRY_GROWTHS * SEEDS_PER_GEOMETRY,
        ))
    }

    /// Contiguous runs of partitions of at most `group_records` records
    /// (at least one partition each).
    fn groups(&self) -> Vec<Range<u32>> {
        let mut groups = Vec::new();
        let (mut start, mut held) = (0u32, 0usize);
        for (p, &count) in self.counts.iter().enumerate() {
            let p = p as u32;
            if p > start && held + count as usize > self.group_records {
                groups.push(start..p);
                (start, held) = (p, 0);
            }
            held += count as usize;
        }
        groups.push(start..self.partitions());
        groups
    }

    /// Gathers, builds and lays out one group; `None` when a partition
    /// would not peel at this geometry.
    fn build_group(
        &self,
        shape: &DbShape,
        group: Range<u32>,
        extra: u32,
        panels: &mut [(usize, &mut [i8])],
    ) -> Result<Option<Vec<u64>>, EncodeError> {
        let members = self.gather(group.clone());
        let built: Vec<Result<Option<Filter>, EncodeError>> = members
            .par_iter()
            .enumerate()
            .map(|(i, m)| {
                check_unique(m)?;
                Ok(self.build_partition(&shape.geometry, group.start + i as u32, extra, m))
            })
            .collect();
        drop(members);
        let mut seeds = Vec::with_capacity(built.len());
        let mut columns = Vec::with_capacity(built.len());
        for b in built {
            let Some(filter) = b? else {
                return Ok(None);
            };
            seeds.push(filter.seed);
            columns.push(filter.cells);
        }
        let first_col = group.start as usize * self.elems;
        let end_col = group.end as usize * self.elems;
        let touched = first_col / PANEL_COLS..end_col.div_ceil(PANEL_COLS);
        panels[touched]
            .par_iter_mut()
            .for_each(|(p, panel)| fill_panel(shape, &columns, group.start as usize, *p, panel));
        Ok(Some(seeds))
    }

    /// The group's keys, partition by partition, each in the source's
    /// order (one pass over the source).
    fn gather(&self, group: Range<u32>) -> Vec<Members> {
        let (elems, bits) = (self.elems, self.lwe.plaintext_bits);
        let mut members: Vec<Members> = self.counts[group.start as usize..group.end as usize]
            .iter()
            .map(|&n| Members {
                index: Vec::with_capacity(n as usize),
                digest: Vec::with_capacity(n as usize),
                record: Vec::with_capacity(n as usize * elems),
            })
            .collect();
        let chunks = self.source.len().div_ceil(CHUNK_RECORDS);
        for batch in (0..chunks).step_by(CHUNKS_IN_FLIGHT) {
            let found: Vec<Found> = (batch..(batch + CHUNKS_IN_FLIGHT).min(chunks))
                .into_par_iter()
                .map(|c| {
                    let (mut key, mut value) = (Vec::new(), vec![0u8; self.value_bytes]);
                    let (mut keys, mut records) = (Vec::new(), Vec::new());
                    for i in chunk_range(self.source, c) {
                        let p = self.of_record[i] as u32;
                        if group.contains(&p) {
                            self.source.read(i, &mut key, &mut value);
                            let digest = KeyDigest::of(&key);
                            let at = records.len();
                            records.resize(at + elems, 0);
                            encode_record(
                                record_tag(&key, &value),
                                &value,
                                bits,
                                &mut records[at..],
                            );
                            keys.push((p - group.start, i as u32, digest));
                        }
                    }
                    Found { keys, records }
                })
                .collect();
            for Found { keys, records } in found {
                for ((p, index, digest), record) in
                    keys.into_iter().zip(records.chunks_exact(elems))
                {
                    let m = &mut members[p as usize];
                    m.index.push(index);
                    m.digest.push(digest);
                    m.record.extend_from_slice(record);
                }
            }
        }
        members
    }

    /// Partition `p`'s filter cells (`cells x w` elements mod p) and the
    /// seed that peeled, or `None` when no seed did at this geometry.
    fn build_partition(
        &self,
        geometry: &FuseGeometry,
        p: u32,
        extra: u32,
        m: &Members,
    ) -> Option<Filter> {
        let elems = self.elems;
        let modulus = 1u16 << self.lwe.plaintext_bits;
        let cells = geometry.array_length() as usize;
        (0..SEEDS_PER_GEOMETRY).find_map(|attempt| {
            let seed = mix64(
                self.filter_base
                    ^ mix64(((p as u64) << 32) | attempt as u64 | ((extra as u64) << 24)),
            );
            let hashes: Vec<u64> = m.digest.iter().map(|d| d.filter_hash(seed)).collect();
            let order = peel(geometry, &hashes)?;
            let mut column = vec![0u8; cells * elems];
            for &(local, cell) in order.iter().rev() {
                let record = &m.record[local as usize * elems..][..elems];
                let positions = geometry.positions(hashes[local as usize]);
                for (e, &r) in record.iter().enumerate() {
                    let mut v = r as u16;
                    for &pos in &positions[..geometry.arity.get()] {
                        if pos != cell {
                            v = v + modulus - column[pos as usize * elems + e] as u16;
                        }
                    }
                    column[cell as usize * elems + e] = (v % modulus) as u8;
                }
            }
            Some(Filter {
                seed,
                cells: column,
            })
        })
    }
}

/// Refuses a partition in which two keys have the same digest (the same
/// key twice, or a 128-bit collision).
fn check_unique(m: &Members) -> Result<(), EncodeError> {
    let mut order: Vec<u32> = (0..m.digest.len() as u32).collect();
    order.sort_unstable_by_key(|&i| (m.digest[i as usize].base, m.index[i as usize]));
    match order
        .windows(2)
        .find(|w| m.digest[w[0] as usize].base == m.digest[w[1] as usize].base)
    {
        Some(pair) => Err(EncodeError::DuplicateKey {
            index: m.index[pair[1] as usize] as usize,
        }),
        None => Ok(()),
    }
}

/// Writes into panel `p` the columns of the partitions whose cell arrays
/// are `columns` (the first of them partition `first`), centring every
/// element; the panel's other columns are left as they are.
fn fill_panel(shape: &DbShape, columns: &[Vec<u8>], first: usize, p: usize, panel: &mut [i8]) {
    let cells = shape.geometry.array_length() as usize;
    let elems = shape.record_elems();
    let width = panel_width(shape.padded_cols(), p);
    let modulus = 1i16 << shape.lwe.plaintext_bits;
    let half = modulus / 2;
    let owned = first * elems..(first + columns.len()) * elems;
    for jj in 0..width {
        let j = p * PANEL_COLS + jj;
        if !owned.contains(&j) {
            continue;
        }
        let (part, e) = (j / elems - first, j % elems);
        let src = &columns[part];
        for r in 0..cells {
            let v = src[r * elems + e] as i16;
            let centred = if v >= half { v - modulus } else { v };
            panel[(r / 4) * width * 4 + jj * 4 + r % 4] = centred as i8;
        }
    }
}

/// The panels of `data` (`rows x padded` elements), each with its index.
pub(crate) fn split_panels(data: &mut [i8], rows: usize, padded: usize) -> Vec<(usize, &mut [i8])> {
    let mut out = Vec::new();
    let mut rest = data;
    let mut p = 0;
    while !rest.is_empty() {
        let (head, tail) = rest.split_at_mut(panel_width(padded, p) * rows);
        out.push((p, head));
        rest = tail;
        p += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use rand::{RngCore, SeedableRng};
    use rand_chacha::ChaCha20Rng;

    use super::*;
    use crate::db::{EncodedDb, Packing};
    use crate::fuse::Arity;

    fn records(n: usize, value_bytes: usize, seed: u64) -> Vec<(Vec<u8>, Vec<u8>)> {
        let mut rng = ChaCha20Rng::seed_from_u64(seed);
        (0..n)
            .map(|_| {
                let (mut k, mut v) = (vec![0u8; 32], vec![0u8; value_bytes]);
                rng.fill_bytes(&mut k);
                rng.fill_bytes(&mut v);
                (k, v)
            })
            .collect()
    }

    /// Encodes within `budget` bytes a group; the panel bytes and shape.
    fn encode_within(
        records: &[(Vec<u8>, Vec<u8>)],
        value_bytes: usize,
        options: &EncodeOptions,
        budget: usize,
    ) -> Result<(DbShape, Vec<i8>), EncodeError> {
        let source = SliceSource::new(records, value_bytes)?;
        let mut sink = VecSink::default();
        let mut rng = ChaCha20Rng::seed_from_u64(7);
        let shape = encode_into(&source, options, budget, &mut rng, &mut sink)?;
        Ok((shape, sink.0))
    }

    #[test]
    fn small_groups_build_the_same_database_bit_for_bit() {
        for (n, value_bytes, arity, k) in [
            (5_000, 24, Arity::Three, 13),
            (3_000, 40, Arity::Four, 7),
            (2_000, 3, Arity::Three, 1),
        ] {
            let rs = records(n, value_bytes, n as u64);
            let options = EncodeOptions {
                arity,
                packing: Packing::Fixed(k),
            };
            let whole = encode_within(&rs, value_bytes, &options, usize::MAX).unwrap();
            // A budget of about one partition, and of less than one record:
            // many groups, then one partition per group.
            let one_partition = n / k as usize * 100;
            for budget in [one_partition, 1] {
                let grouped = encode_within(&rs, value_bytes, &options, budget).unwrap();
                assert_eq!(grouped.0, whole.0, "shape, n = {n}, budget {budget}");
                assert!(grouped.1 == whole.1, "bytes, n = {n}, budget {budget}");
            }
            // And what the in-memory encoder makes from the same draws.
            let db = EncodedDb::encode(
                &rs,
                value_bytes,
                &options,
                &mut ChaCha20Rng::seed_from_u64(7),
            )
            .unwrap();
            assert_eq!(db.shape(), &whole.0);
            assert!(db.data() == whole.1.as_slice());
        }
    }

    #[test]
    fn a_repeated_key_is_refused_in_any_group() {
        let mut rs = records(4_000, 8, 1);
        rs[3_210].0 = rs[17].0.clone();
        let options = EncodeOptions {
            arity: Arity::Three,
            packing: Packing::Fixed(9),
        };
        for budget in [usize::MAX, 1] {
            match encode_within(&rs, 8, &options, budget) {
                Err(EncodeError::DuplicateKey { index }) => assert_eq!(index, 3_210),
                other => panic!("{:?}", other.map(|(s, _)| s)),
            }
        }
    }

    #[test]
    fn values_of_another_length_and_empty_sources_are_refused() {
        let mut rs = records(10, 8, 2);
        rs[4].1.push(0);
        assert!(matches!(
            SliceSource::new(&rs, 8),
            Err(EncodeError::ValueLength {
                index: 4,
                expected: 8,
                got: 9
            })
        ));
        let none: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
        assert!(matches!(
            encode_within(&none, 8, &EncodeOptions::default(), 1),
            Err(EncodeError::Empty)
        ));
    }

    /// A sink that refuses to give bytes: its error comes back.
    struct FullDisk;
    impl PanelSink for FullDisk {
        fn panels(&mut self, _: &DbShape) -> std::io::Result<&mut [i8]> {
            Err(std::io::Error::other("no space left"))
        }
    }

    #[test]
    fn a_sink_error_is_returned() {
        let rs = records(100, 8, 3);
        let source = SliceSource::new(&rs, 8).unwrap();
        let err = encode_into(
            &source,
            &EncodeOptions::default(),
            usize::MAX,
            &mut ChaCha20Rng::seed_from_u64(1),
            &mut FullDisk,
        )
        .unwrap_err();
        assert!(matches!(err, EncodeError::Output(_)), "{err}");
    }
}
