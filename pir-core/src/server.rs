//! The PIR server: an encoded database plus its setup data; answers one
//! query or a batch in one pass over the database.

use crate::db::{DbShape, EncodedDb};
use crate::error::{AnswerError, ParamError, WireError};
use crate::matrix::PublicMatrix;
use crate::product::{hint_cpu, multiply_vectors};
use crate::wire::{self, Query, Response, SetupData, SetupId};

/// Why raw query bytes were refused.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum ServeError {
    #[error("malformed query: {0}")]
    Wire(#[from] WireError),
    #[error(transparent)]
    Answer(#[from] AnswerError),
}

/// Setup data as published: the bytes clients download, parsed once to
/// check them and kept as they are (what clients get is exactly what was
/// checked), with their digest and id. A router in front of row shards
/// holds this alone; a [`PirServer`] holds it with its database.
pub struct PublishedSetup {
    /// Shared: every download of it is a reference, never a copy.
    bytes: bytes::Bytes,
    digest: [u8; 32],
    id: SetupId,
    shape: DbShape,
}

impl PublishedSetup {
    /// Checks setup bytes (a snapshot's `setup.bin`) and keeps them.
    pub fn from_bytes(bytes: Vec<u8>) -> Result<Self, WireError> {
        let shape = SetupData::from_bytes(&bytes)?.shape;
        let digest = SetupData::digest_of(&bytes);
        Ok(PublishedSetup {
            bytes: bytes.into(),
            digest,
            id: SetupData::id_of(&digest),
            shape,
        })
    }

    /// The serialised setup data clients download.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// The same bytes, shared (a reference count, no copy).
    pub fn shared_bytes(&self) -> bytes::Bytes {
        self.bytes.clone()
    }

    /// SHA3-256 of the setup data.
    pub fn digest(&self) -> &[u8; 32] {
        &self.digest
    }

    pub fn id(&self) -> SetupId {
        self.id
    }

    pub fn shape(&self) -> &DbShape {
        &self.shape
    }

    /// Whether `query` was made for this setup with `rows` elements (the
    /// database's rows, or a shard's).
    pub fn check(&self, query: &Query, rows: usize) -> Result<(), AnswerError> {
        if query.setup_id != self.id {
            return Err(AnswerError::WrongSetup);
        }
        if query.vector.len() != rows {
            return Err(AnswerError::RowCount {
                expected: rows,
                got: query.vector.len(),
            });
        }
        Ok(())
    }

    /// Parses a query batch of whole-database queries and checks each.
    pub fn checked_queries(&self, body: &[u8]) -> Result<Vec<Query>, ServeError> {
        checked_batch(body, |q| self.check(q, self.shape.rows()))
    }
}

/// Parses a query batch and checks every query with `check`.
fn checked_batch(
    body: &[u8],
    check: impl Fn(&Query) -> Result<(), AnswerError>,
) -> Result<Vec<Query>, ServeError> {
    let queries = wire::decode_queries(body)?;
    if queries.is_empty() {
        return Err(AnswerError::EmptyBatch.into());
    }
    queries.iter().try_for_each(check)?;
    Ok(queries)
}

/// A database (all rows, or a shard's) ready to answer.
pub struct PirServer {
    db: EncodedDb,
    setup: PublishedSetup,
}

impl PirServer {
    /// Builds the hint on all CPU cores and assembles the server.
    pub fn build_cpu(db: EncodedDb, matrix: PublicMatrix) -> Self {
        let hint = hint_cpu(&db, &matrix, &|_| {});
        Self::from_parts(db, matrix, hint).expect("hint built for this database")
    }

    /// Assembles a server from a database and a hint made elsewhere (the
    /// GPU builder).
    pub fn from_parts(
        db: EncodedDb,
        matrix: PublicMatrix,
        hint: Vec<u32>,
    ) -> Result<Self, ParamError> {
        let setup_bytes = SetupData::for_db(&db, matrix, hint)?.to_bytes();
        let setup = PublishedSetup::from_bytes(setup_bytes).expect("setup data just made");
        Ok(PirServer { db, setup })
    }

    /// Assembles a server from a database and the setup bytes published
    /// with it (a snapshot on disk).
    pub fn from_setup_bytes(db: EncodedDb, setup_bytes: Vec<u8>) -> Result<Self, WireError> {
        let setup = PublishedSetup::from_bytes(setup_bytes)?;
        if setup.shape() != db.shape() {
            return Err(
                ParamError::Shape("setup data and database describe different databases").into(),
            );
        }
        Ok(PirServer { db, setup })
    }

    /// The published setup this database answers for.
    pub fn setup(&self) -> &PublishedSetup {
        &self.setup
    }

    pub fn db(&self) -> &EncodedDb {
        &self.db
    }

    /// The serialised setup data clients download.
    pub fn setup_bytes(&self) -> &[u8] {
        self.setup.bytes()
    }

    /// SHA3-256 of the setup data.
    pub fn setup_digest(&self) -> &[u8; 32] {
        self.setup.digest()
    }

    pub fn setup_id(&self) -> SetupId {
        self.setup.id()
    }

    /// Entries of a query to this server: the database's rows, or a
    /// shard's.
    pub fn query_rows(&self) -> usize {
        self.db.served_rows().len()
    }

    /// Exact byte length of a batch of `count` queries.
    pub fn query_bytes(&self, count: usize) -> usize {
        wire::query_bytes(self.query_rows(), count)
    }

    /// Answers one query.
    pub fn answer(&self, query: &Query) -> Result<Response, AnswerError> {
        Ok(self.answer_batch(std::slice::from_ref(query))?.remove(0))
    }

    /// Whether `query` fits this database: made for this setup, one
    /// element per served row. A server that answers several clients'
    /// queries in one pass checks each first, so that one bad query fails
    /// only its own request.
    pub fn check(&self, query: &Query) -> Result<(), AnswerError> {
        self.setup.check(query, self.query_rows())
    }

    /// Parses a query batch and checks every query (see [`Self::check`]).
    pub fn checked_queries(&self, body: &[u8]) -> Result<Vec<Query>, ServeError> {
        checked_batch(body, |q| self.check(q))
    }

    /// Whether a batch may be answered: not empty, every query fitting
    /// this database ([`Self::check`]). Every answering path asks this
    /// first, the GPU's too.
    pub fn check_batch(&self, queries: &[Query]) -> Result<(), AnswerError> {
        if queries.is_empty() {
            return Err(AnswerError::EmptyBatch);
        }
        queries.iter().try_for_each(|q| self.check(q))
    }

    /// Answers a batch in one pass over the database.
    pub fn answer_batch(&self, queries: &[Query]) -> Result<Vec<Response>, AnswerError> {
        self.check_batch(queries)?;
        let vecs: Vec<&[u32]> = queries.iter().map(|q| q.vector.as_slice()).collect();
        Ok(multiply_vectors(&self.db, &vecs)
            .into_iter()
            .map(|elems| Response { elems })
            .collect())
    }

    /// Parses a query batch, answers it and serialises the responses.
    /// Returns the response bytes and the number of queries answered.
    pub fn answer_bytes(&self, body: &[u8]) -> Result<(Vec<u8>, usize), ServeError> {
        let queries = wire::decode_queries(body)?;
        Ok((
            wire::encode_responses(&self.answer_batch(&queries)?),
            queries.len(),
        ))
    }
}
