//! Typed errors of the PIR engine.

use thiserror::Error;

/// Parameters that cannot be used.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum ParamError {
    #[error("no plaintext modulus decodes correctly over {0} rows; use more partitions")]
    TooManyRows(u64),
    #[error("unsupported LWE dimension {0}")]
    Dimension(u32),
    #[error("unsupported plaintext width of {0} bits")]
    PlaintextBits(u32),
    #[error("invalid filter geometry: {0}")]
    Geometry(&'static str),
    #[error("invalid database shape: {0}")]
    Shape(&'static str),
}

/// Why a database could not be encoded.
#[derive(Debug, Error)]
pub enum EncodeError {
    #[error("the database is empty")]
    Empty,
    #[error("key {index} appears more than once")]
    DuplicateKey { index: usize },
    #[error("value {index} has {got} bytes, the database stores {expected}")]
    ValueLength {
        index: usize,
        expected: usize,
        got: usize,
    },
    #[error("could not build the binary fuse filters after {0} attempts")]
    FilterConstruction(u32),
    #[error(transparent)]
    Params(#[from] ParamError),
    #[error("writing the database: {0}")]
    Output(#[from] std::io::Error),
}

/// Malformed bytes in a setup blob, query or response.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum WireError {
    #[error("truncated {what}: need {needed} bytes, got {got}")]
    Truncated {
        what: &'static str,
        needed: usize,
        got: usize,
    },
    #[error("{what} has {extra} trailing bytes")]
    Trailing { what: &'static str, extra: usize },
    #[error("response checksum mismatch: damaged in transit")]
    Checksum,
    #[error("not an ethpir message (bad magic)")]
    BadMagic,
    #[error("unsupported format version {0}")]
    Version(u8),
    #[error("expected a {expected} message, got kind {got}")]
    Kind { expected: &'static str, got: u8 },
    #[error("{what} of {value} exceeds the limit of {max}")]
    TooLarge {
        what: &'static str,
        value: u64,
        max: u64,
    },
    #[error(transparent)]
    Params(#[from] ParamError),
}

/// A query or batch the server refuses.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum AnswerError {
    #[error("query was made for another snapshot")]
    WrongSetup,
    #[error("query has {got} rows, the database has {expected}")]
    RowCount { expected: usize, got: usize },
    #[error("empty batch")]
    EmptyBatch,
}

/// A response the client cannot decode.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum DecodeError {
    #[error("response has {got} elements, expected {expected}")]
    ResponseLength { expected: usize, got: usize },
}
