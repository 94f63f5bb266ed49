//! The PIR server: an encoded database plus its setup data; answers one
//! query or a batch in one pass over the database.

use crate::db::EncodedDb;
use crate::error::{AnswerError, ParamError, WireError};
use crate::kernel::SlicedVec;
use crate::params::SEED_BYTES;
use crate::product::{hint_cpu, multiply};
use crate::wire::{self, Query, Response, SetupData, SetupId};

/// Why raw query bytes were refused.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum ServeError {
    #[error("malformed query: {0}")]
    Wire(#[from] WireError),
    #[error(transparent)]
    Answer(#[from] AnswerError),
}

/// A database ready to answer.
pub struct PirServer {
    db: EncodedDb,
    setup_bytes: Vec<u8>,
    digest: [u8; 32],
    id: SetupId,
}

impl PirServer {
    /// Builds the hint on all CPU cores and assembles the server.
    pub fn build_cpu(db: EncodedDb, seed: [u8; SEED_BYTES]) -> Self {
        let hint = hint_cpu(&db, &seed, &|_| {});
        Self::from_parts(db, seed, hint).expect("hint built for this database")
    }

    /// Assembles a server from a database and a hint made elsewhere (the
    /// GPU builder).
    pub fn from_parts(
        db: EncodedDb,
        seed: [u8; SEED_BYTES],
        hint: Vec<u32>,
    ) -> Result<Self, ParamError> {
        let setup_bytes = SetupData::for_db(&db, seed, hint)?.to_bytes();
        Ok(Self::with_checked_setup(db, setup_bytes))
    }

    /// Assembles a server from a database and the setup bytes published
    /// with it (a snapshot on disk). The bytes are parsed once to check
    /// them, then kept as they are: what clients download is exactly what
    /// was checked.
    pub fn from_setup_bytes(db: EncodedDb, setup_bytes: Vec<u8>) -> Result<Self, WireError> {
        let setup = SetupData::from_bytes(&setup_bytes)?;
        if &setup.shape != db.shape() {
            return Err(
                ParamError::Shape("setup data and database describe different databases").into(),
            );
        }
        Ok(Self::with_checked_setup(db, setup_bytes))
    }

    fn with_checked_setup(db: EncodedDb, setup_bytes: Vec<u8>) -> Self {
        let digest = SetupData::digest_of(&setup_bytes);
        PirServer {
            db,
            setup_bytes,
            digest,
            id: SetupData::id_of(&digest),
        }
    }

    pub fn db(&self) -> &EncodedDb {
        &self.db
    }

    /// The serialised setup data clients download.
    pub fn setup_bytes(&self) -> &[u8] {
        &self.setup_bytes
    }

    /// SHA3-256 of the setup data.
    pub fn setup_digest(&self) -> &[u8; 32] {
        &self.digest
    }

    pub fn setup_id(&self) -> SetupId {
        self.id
    }

    /// Exact byte length of a batch of `count` queries.
    pub fn query_bytes(&self, count: usize) -> usize {
        wire::query_bytes(self.db.shape().rows(), count)
    }

    /// Answers one query.
    pub fn answer(&self, query: &Query) -> Result<Response, AnswerError> {
        Ok(self.answer_batch(std::slice::from_ref(query))?.remove(0))
    }

    /// Whether `query` fits this database: made for this setup, one
    /// element per row. A server that answers several clients' queries in
    /// one pass checks each first, so that one bad query fails only its
    /// own request.
    pub fn check(&self, query: &Query) -> Result<(), AnswerError> {
        if query.setup_id != self.id {
            return Err(AnswerError::WrongSetup);
        }
        let rows = self.db.shape().rows();
        if query.vector.len() != rows {
            return Err(AnswerError::RowCount {
                expected: rows,
                got: query.vector.len(),
            });
        }
        Ok(())
    }

    /// Parses a query batch and checks every query (see [`Self::check`]).
    pub fn checked_queries(&self, body: &[u8]) -> Result<Vec<Query>, ServeError> {
        let queries = wire::decode_queries(body)?;
        if queries.is_empty() {
            return Err(AnswerError::EmptyBatch.into());
        }
        queries.iter().try_for_each(|q| self.check(q))?;
        Ok(queries)
    }

    /// Answers a batch in one pass over the database.
    pub fn answer_batch(&self, queries: &[Query]) -> Result<Vec<Response>, AnswerError> {
        if queries.is_empty() {
            return Err(AnswerError::EmptyBatch);
        }
        queries.iter().try_for_each(|q| self.check(q))?;
        let sliced: Vec<SlicedVec> = queries.iter().map(|q| SlicedVec::new(&q.vector)).collect();
        let refs: Vec<&SlicedVec> = sliced.iter().collect();
        Ok(multiply(&self.db, &refs)
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
