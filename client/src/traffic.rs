//! Bytes moved to and from the PIR server, with the part lookups moved
//! (queries and their answers) apart from background traffic (catalogs,
//! setup and table downloads).

use std::sync::atomic::{AtomicU64, Ordering};

/// Counters since start.
#[derive(Debug, Default)]
pub struct Traffic {
    up: AtomicU64,
    down: AtomicU64,
    lookup_up: AtomicU64,
    lookup_down: AtomicU64,
    /// Lookup requests sent (each a batch of queries).
    lookup_requests: AtomicU64,
}

/// Which kind of traffic a transfer is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Queries and their answers.
    Lookup,
    /// Catalogs, setups, tables.
    Background,
}

impl Traffic {
    pub fn sent(&self, kind: Kind, bytes: u64) {
        self.up.fetch_add(bytes, Ordering::Relaxed);
        if kind == Kind::Lookup {
            self.lookup_up.fetch_add(bytes, Ordering::Relaxed);
            self.lookup_requests.fetch_add(1, Ordering::Relaxed);
        }
    }

    pub fn received(&self, kind: Kind, bytes: u64) {
        self.down.fetch_add(bytes, Ordering::Relaxed);
        if kind == Kind::Lookup {
            self.lookup_down.fetch_add(bytes, Ordering::Relaxed);
        }
    }

    /// (up, down): everything.
    pub fn total(&self) -> (u64, u64) {
        (
            self.up.load(Ordering::Relaxed),
            self.down.load(Ordering::Relaxed),
        )
    }

    /// Lookup requests sent.
    pub fn lookup_requests(&self) -> u64 {
        self.lookup_requests.load(Ordering::Relaxed)
    }

    /// (up, down): lookups only.
    pub fn lookups(&self) -> (u64, u64) {
        (
            self.lookup_up.load(Ordering::Relaxed),
            self.lookup_down.load(Ordering::Relaxed),
        )
    }
}
