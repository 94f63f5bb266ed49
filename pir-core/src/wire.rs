//! Versioned, length-checked binary formats: setup data, queries and
//! responses. Every integer is little-endian. Every message starts with an
//! 8-byte header: `b"EPIR"`, format version, message kind, two zero bytes.
//! Parsers never panic and never allocate more than the input can fill.

use sha3::{Digest, Sha3_256};

use crate::db::{DbShape, EncodedDb};
use crate::error::{ParamError, WireError};
use crate::fuse::{Arity, FuseGeometry};
use crate::matrix::{Expansion, PublicMatrix};
use crate::params::{LweParams, SEED_BYTES};

pub const MAGIC: [u8; 4] = *b"EPIR";
/// The format version every message is written with. Version 2 added the
/// public-matrix expansion to the setup; the other kinds are unchanged.
pub const VERSION: u8 = 2;
/// The oldest version still read: a version-1 setup has no expansion field
/// and its matrix is TurboSHAKE128.
pub const OLDEST_VERSION: u8 = 1;
pub const HEADER_BYTES: usize = 8;
/// Most queries in one batch.
pub const MAX_BATCH: usize = 256;
/// Most rows a query vector may have.
pub const MAX_QUERY_ROWS: usize = 1 << 26;
/// Trailing checksum of a response message.
pub const CHECKSUM_BYTES: usize = 32;
/// Most elements in one response.
pub const MAX_RESPONSE_ELEMS: usize = 1 << 24;

/// Message kinds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    Setup = 1,
    Query = 2,
    Response = 3,
    Database = 4,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Setup => "setup",
            Kind::Query => "query",
            Kind::Response => "response",
            Kind::Database => "database",
        }
    }
}

/// First 8 bytes of the setup digest: names the setup a query was made for.
pub type SetupId = [u8; 8];

/// What a client downloads once per snapshot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SetupData {
    pub shape: DbShape,
    /// The public matrix: its seed and its expansion.
    pub matrix: PublicMatrix,
    /// `M = A . D`: `n` rows of `shape.cols()` elements, row-major.
    pub hint: Vec<u32>,
}

/// A query vector for one key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Query {
    pub setup_id: SetupId,
    pub vector: Vec<u32>,
}

/// The server's answer to one query: `k * w` elements.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Response {
    pub elems: Vec<u32>,
}

fn header(kind: Kind, capacity: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_BYTES + capacity);
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&[VERSION, kind as u8, 0, 0]);
    out
}

fn put_u32s(out: &mut Vec<u8>, values: &[u32]) {
    for v in values {
        out.extend_from_slice(&v.to_le_bytes());
    }
}

/// Bounds-checked reader over untrusted bytes.
struct Reader<'a> {
    bytes: &'a [u8],
    what: &'static str,
    /// The message's format version (checked to be one we read).
    version: u8,
}

impl<'a> Reader<'a> {
    fn open(bytes: &'a [u8], kind: Kind) -> Result<Self, WireError> {
        let mut r = Reader {
            bytes,
            what: kind.name(),
            version: VERSION,
        };
        let head = r.take(HEADER_BYTES)?;
        if head[..4] != MAGIC {
            return Err(WireError::BadMagic);
        }
        if !(OLDEST_VERSION..=VERSION).contains(&head[4]) {
            return Err(WireError::Version(head[4]));
        }
        r.version = head[4];
        if head[5] != kind as u8 {
            return Err(WireError::Kind {
                expected: kind.name(),
                got: head[5],
            });
        }
        if head[6..8] != [0, 0] {
            return Err(WireError::Version(head[4]));
        }
        Ok(r)
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], WireError> {
        if self.bytes.len() < n {
            return Err(WireError::Truncated {
                what: self.what,
                needed: n,
                got: self.bytes.len(),
            });
        }
        let (head, tail) = self.bytes.split_at(n);
        self.bytes = tail;
        Ok(head)
    }

    fn u8(&mut self) -> Result<u8, WireError> {
        Ok(self.take(1)?[0])
    }

    fn u16(&mut self) -> Result<u16, WireError> {
        Ok(u16::from_le_bytes(self.take(2)?.try_into().unwrap()))
    }

    fn u32(&mut self) -> Result<u32, WireError> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().unwrap()))
    }

    fn u64(&mut self) -> Result<u64, WireError> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().unwrap()))
    }

    /// Checks that exactly `n` more bytes remain (no more, no fewer).
    fn expect_exactly(&self, n: u64) -> Result<(), WireError> {
        let have = self.bytes.len() as u64;
        if have < n {
            return Err(WireError::Truncated {
                what: self.what,
                needed: n.min(usize::MAX as u64) as usize,
                got: self.bytes.len(),
            });
        }
        if have > n {
            return Err(WireError::Trailing {
                what: self.what,
                extra: (have - n) as usize,
            });
        }
        Ok(())
    }

    fn u32s(&mut self, n: usize) -> Result<Vec<u32>, WireError> {
        let bytes = self.take(n * 4)?;
        Ok(bytes
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
            .collect())
    }
}

fn limit(what: &'static str, value: u64, max: u64) -> Result<(), WireError> {
    if value > max {
        return Err(WireError::TooLarge { what, value, max });
    }
    Ok(())
}

/// Writes the database shape (everything but the matrix seed and the hint).
fn put_shape(out: &mut Vec<u8>, s: &DbShape) {
    out.extend_from_slice(&s.lwe.dimension.to_le_bytes());
    out.extend_from_slice(&[s.lwe.plaintext_bits as u8, s.geometry.arity as u8, 0, 0]);
    out.extend_from_slice(&s.geometry.segment_length.to_le_bytes());
    out.extend_from_slice(&s.geometry.segment_count.to_le_bytes());
    out.extend_from_slice(&s.partitions.to_le_bytes());
    out.extend_from_slice(&s.value_bytes.to_le_bytes());
    out.extend_from_slice(&s.partition_seed.to_le_bytes());
    for seed in &s.filter_seeds {
        out.extend_from_slice(&seed.to_le_bytes());
    }
}

/// Reads and validates a shape written by [`put_shape`].
fn read_shape(r: &mut Reader<'_>) -> Result<DbShape, WireError> {
    let dimension = r.u32()?;
    let plaintext_bits = r.u8()? as u32;
    let arity = Arity::from_u8(r.u8()?)?;
    if r.u16()? != 0 {
        return Err(WireError::Version(VERSION));
    }
    let segment_length = r.u32()?;
    let segment_count = r.u32()?;
    let partitions = r.u32()?;
    let value_bytes = r.u32()?;
    let partition_seed = r.u64()?;
    let lwe = LweParams {
        dimension,
        plaintext_bits,
    };
    lwe.validate()?;
    limit(
        "partition count",
        partitions as u64,
        crate::db::MAX_PARTITIONS as u64,
    )?;
    limit(
        "value size",
        value_bytes as u64,
        crate::db::MAX_VALUE_BYTES as u64,
    )?;
    if r.bytes.len() / 8 < partitions as usize {
        return Err(WireError::Truncated {
            what: r.what,
            needed: 8 * partitions as usize,
            got: r.bytes.len(),
        });
    }
    let filter_seeds = (0..partitions)
        .map(|_| r.u64())
        .collect::<Result<Vec<_>, _>>()?;
    let shape = DbShape {
        lwe,
        geometry: FuseGeometry {
            arity,
            segment_length,
            segment_count,
        },
        partitions,
        value_bytes,
        partition_seed,
        filter_seeds,
    };
    shape.validate()?;
    Ok(shape)
}

impl SetupData {
    /// The setup data of `db` with a hint made for it (checked: `n x cols`
    /// elements).
    pub fn for_db(
        db: &EncodedDb,
        matrix: PublicMatrix,
        hint: Vec<u32>,
    ) -> Result<Self, ParamError> {
        let shape = db.shape().clone();
        if hint.len() != shape.lwe.dimension as usize * shape.cols() {
            return Err(ParamError::Shape("hint does not match the database"));
        }
        Ok(SetupData {
            shape,
            matrix,
            hint,
        })
    }

    /// Serialises the setup blob.
    pub fn to_bytes(&self) -> Vec<u8> {
        let s = &self.shape;
        let mut out = header(
            Kind::Setup,
            76 + 8 * s.filter_seeds.len() + 4 * self.hint.len(),
        );
        put_shape(&mut out, s);
        out.extend_from_slice(&[self.matrix.expansion().code(), 0, 0, 0]);
        out.extend_from_slice(self.matrix.seed());
        put_u32s(&mut out, &self.hint);
        out
    }

    /// Parses and validates a setup blob.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, WireError> {
        let mut r = Reader::open(bytes, Kind::Setup)?;
        let shape = read_shape(&mut r)?;
        let expansion = if r.version == 1 {
            Expansion::TurboShake128
        } else {
            let field = r.take(4)?;
            if field[1..] != [0, 0, 0] {
                return Err(WireError::Version(r.version));
            }
            Expansion::from_code(field[0])?
        };
        let seed: [u8; SEED_BYTES] = r.take(SEED_BYTES)?.try_into().unwrap();
        let matrix = PublicMatrix::new(expansion, seed);
        let hint_elems = shape.lwe.dimension as usize * shape.cols();
        r.expect_exactly(4 * hint_elems as u64)?;
        let hint = r.u32s(hint_elems)?;
        Ok(SetupData {
            shape,
            matrix,
            hint,
        })
    }

    /// SHA3-256 of the serialised setup (an ETag, and the cache key).
    pub fn digest_of(bytes: &[u8]) -> [u8; 32] {
        Sha3_256::digest(bytes).into()
    }

    /// The id queries carry, from the digest.
    pub fn id_of(digest: &[u8; 32]) -> SetupId {
        digest[..8].try_into().unwrap()
    }
}

/// Serialises a batch of queries (one query is a batch of one). All must
/// share a setup id and a length.
pub fn encode_queries(queries: &[Query]) -> Vec<u8> {
    let rows = queries.first().map_or(0, |q| q.vector.len());
    let mut out = header(Kind::Query, 16 + queries.len() * rows * 4);
    out.extend_from_slice(&queries.first().map_or([0; 8], |q| q.setup_id));
    out.extend_from_slice(&(rows as u32).to_le_bytes());
    out.extend_from_slice(&(queries.len() as u32).to_le_bytes());
    for q in queries {
        debug_assert_eq!(q.vector.len(), rows);
        put_u32s(&mut out, &q.vector);
    }
    out
}

/// Bytes of a batch of `count` queries over `rows` rows.
pub fn query_bytes(rows: usize, count: usize) -> usize {
    HEADER_BYTES + 16 + count * rows * 4
}

/// Parses a batch of queries.
pub fn decode_queries(bytes: &[u8]) -> Result<Vec<Query>, WireError> {
    let mut r = Reader::open(bytes, Kind::Query)?;
    let setup_id: SetupId = r.take(8)?.try_into().unwrap();
    let rows = r.u32()? as usize;
    let count = r.u32()? as usize;
    limit("query rows", rows as u64, MAX_QUERY_ROWS as u64)?;
    limit("batch size", count as u64, MAX_BATCH as u64)?;
    if count == 0 {
        return Err(WireError::Truncated {
            what: "query",
            needed: 1,
            got: 0,
        });
    }
    r.expect_exactly(4 * rows as u64 * count as u64)?;
    (0..count)
        .map(|_| {
            Ok(Query {
                setup_id,
                vector: r.u32s(rows)?,
            })
        })
        .collect()
}

/// Serialises the responses to a batch, followed by a SHA3-256 checksum of
/// everything before it (catches responses damaged in transit; an attacker
/// who can rewrite traffic can also rewrite the checksum: use HTTPS).
pub fn encode_responses(responses: &[Response]) -> Vec<u8> {
    let cols = responses.first().map_or(0, |r| r.elems.len());
    let mut out = header(
        Kind::Response,
        8 + responses.len() * cols * 4 + CHECKSUM_BYTES,
    );
    out.extend_from_slice(&(cols as u32).to_le_bytes());
    out.extend_from_slice(&(responses.len() as u32).to_le_bytes());
    for r in responses {
        put_u32s(&mut out, &r.elems);
    }
    let sum = Sha3_256::digest(&out);
    out.extend_from_slice(&sum);
    out
}

/// Bytes of the responses to `count` queries with `cols` elements each.
pub fn response_bytes(cols: usize, count: usize) -> usize {
    HEADER_BYTES + 8 + count * cols * 4 + CHECKSUM_BYTES
}

/// Parses the responses to a batch and checks their checksum.
pub fn decode_responses(bytes: &[u8]) -> Result<Vec<Response>, WireError> {
    let mut r = Reader::open(bytes, Kind::Response)?;
    let cols = r.u32()? as usize;
    let count = r.u32()? as usize;
    limit("response elements", cols as u64, MAX_RESPONSE_ELEMS as u64)?;
    limit("batch size", count as u64, MAX_BATCH as u64)?;
    r.expect_exactly(4 * cols as u64 * count as u64 + CHECKSUM_BYTES as u64)?;
    let body_end = bytes.len() - CHECKSUM_BYTES;
    if Sha3_256::digest(&bytes[..body_end]).as_slice() != &bytes[body_end..] {
        return Err(WireError::Checksum);
    }
    (0..count)
        .map(|_| {
            Ok(Response {
                elems: r.u32s(cols)?,
            })
        })
        .collect()
}

/// Serialises an encoded database (shape and panel bytes) for disk.
pub fn encode_db(db: &EncodedDb) -> Vec<u8> {
    let mut out = Vec::with_capacity(64 + 8 * db.shape().filter_seeds.len() + db.data().len());
    write_db(db, &mut out).expect("writing to memory");
    out
}

/// Writes what [`encode_db`] makes to `w`, the panel bytes as they lie (a
/// database of gigabytes is written without a second copy).
pub fn write_db(db: &EncodedDb, w: &mut (impl std::io::Write + ?Sized)) -> std::io::Result<()> {
    assert!(db.is_whole(), "a shard's rows are not a database file");
    w.write_all(&db_header(db.shape()))?;
    w.write_all(bytemuck::cast_slice::<i8, u8>(db.data()))
}

/// What precedes the panel bytes of a database of `shape` on disk; its
/// length depends only on the partition count (a file laid out in place
/// reserves it before the filter seeds are known).
pub fn db_header(shape: &DbShape) -> Vec<u8> {
    let mut head = header(Kind::Database, 64 + 8 * shape.filter_seeds.len());
    put_shape(&mut head, shape);
    let len = shape.rows() as u64 * shape.padded_cols() as u64;
    head.extend_from_slice(&len.to_le_bytes());
    head
}

/// Parses an encoded database written by [`encode_db`].
pub fn decode_db(bytes: &[u8]) -> Result<EncodedDb, WireError> {
    let (shape, offset) = decode_db_header(bytes)?;
    let data: Vec<i8> = bytes[offset..].iter().map(|&b| b as i8).collect();
    Ok(EncodedDb::from_parts(shape, data)?)
}

/// Parses the header of a database written by [`encode_db`] and checks
/// that exactly its panel bytes follow; returns the shape and where the
/// panel bytes start (a memory-mapped file is answered from in place).
pub fn decode_db_header(bytes: &[u8]) -> Result<(DbShape, usize), WireError> {
    let mut r = Reader::open(bytes, Kind::Database)?;
    let shape = read_shape(&mut r)?;
    let len = r.u64()?;
    let expected = shape.rows() as u64 * shape.padded_cols() as u64;
    if len != expected {
        return Err(WireError::Params(crate::error::ParamError::Shape(
            "database length does not match its shape",
        )));
    }
    r.expect_exactly(len)?;
    Ok((shape, bytes.len() - len as usize))
}
