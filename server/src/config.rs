//! Server settings: `configs/server.toml` documents every field.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use pir_core::shard::Shard;
use serde::Deserialize;

use crate::error::ServerError;

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServerConfig {
    /// Snapshot store to serve.
    pub store: PathBuf,
    /// Address to listen on.
    pub listen: SocketAddr,
    /// Seconds between store rescans (fractions allowed: a follower
    /// publishing every block wants its delta served within a second).
    pub rescan_secs: f64,
    /// Watch the store (inotify) and rescan the moment it changes; off:
    /// the rescan interval alone (filesystems whose watch is unreliable).
    pub watch_store: bool,
    /// Catalog requests held open at once, waiting for the next catalog
    /// (each is a connection); past it a waiting client gets the catalog
    /// at once, no long-poll announced, and polls. 0: no long-poll.
    pub held_catalog_waits: usize,
    /// Most queries in one batch.
    pub max_batch: usize,
    /// Answers computed at once (each uses all cores for a moment).
    pub workers: usize,
    /// Queries allowed to wait for a worker; beyond that, 503.
    pub queue: usize,
    /// Largest request body accepted, bytes (larger: 413).
    pub max_body_bytes: usize,
    /// Answers batched across requests.
    pub batching: BatchSettings,
    /// Serve the store's files (`GET /v1/snapshots/{id}/files/{name}`) to
    /// replicas that pull them (`ethpir-snapshot pull`).
    pub export_files: bool,
    /// Serve only this row shard (`"i/S"`) of every snapshot: queries are
    /// a router's slices of that many rows.
    pub shard: Option<String>,
    /// Route to row shards instead of answering (no database loaded).
    pub router: RouterSettings,
    /// Where answers are computed.
    pub answer: AnswerSettings,
}

/// Where answers are computed (`[answer]` in configs/server.toml).
#[derive(Clone, Copy, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AnswerSettings {
    pub device: AnswerDevice,
    /// Under `auto`, levels smaller than this many MiB stay on the CPU.
    pub min_gpu_mib: f64,
}

impl Default for AnswerSettings {
    fn default() -> Self {
        AnswerSettings {
            device: AnswerDevice::Auto,
            min_gpu_mib: 16.0,
        }
    }
}

impl AnswerSettings {
    /// [`Self::min_gpu_mib`] in bytes.
    pub fn min_gpu_bytes(&self) -> u64 {
        (self.min_gpu_mib.max(0.0) * (1u64 << 20) as f64) as u64
    }
}

/// `auto`: each level from GPU memory when a GPU is usable and the level
/// (with a full batch) fits it, else on all CPU cores, logged with the
/// reason; `cpu`; `cuda`: a level that cannot be held on the GPU is not
/// served.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AnswerDevice {
    #[default]
    Auto,
    Cpu,
    Cuda,
}

impl std::str::FromStr for AnswerDevice {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(AnswerDevice::Auto),
            "cpu" => Ok(AnswerDevice::Cpu),
            "cuda" => Ok(AnswerDevice::Cuda),
            other => Err(format!("unknown device '{other}': use auto, cpu or cuda")),
        }
    }
}

/// A router in front of row shards (`[router]` in configs/server.toml).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RouterSettings {
    /// Base URLs of the shard servers, shard 0 first (`--shard i/S` with
    /// S the length of this list). Empty: not a router.
    pub shards: Vec<String>,
    /// Seconds a shard may take to answer one request.
    pub timeout_secs: f64,
}

impl RouterSettings {
    pub fn timeout(&self) -> Duration {
        match self.timeout_secs > 0.0 {
            true => protocol::config::seconds(self.timeout_secs, 0.0, 1e9),
            false => Duration::from_secs(30),
        }
    }
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            store: PathBuf::from("./ethpir-store"),
            listen: "127.0.0.1:8546".parse().expect("valid address"),
            rescan_secs: 1.0,
            watch_store: true,
            held_catalog_waits: 4096,
            max_batch: 64,
            workers: 2,
            queue: 64,
            max_body_bytes: 64 << 20,
            batching: BatchSettings::default(),
            export_files: false,
            shard: None,
            router: RouterSettings::default(),
            answer: AnswerSettings::default(),
        }
    }
}

impl ServerConfig {
    pub fn rescan_interval(&self) -> Duration {
        protocol::config::seconds(self.rescan_secs, 0.05, 1e9)
    }

    /// The row shard this server answers, if it is one.
    pub fn shard(&self) -> Result<Option<Shard>, ServerError> {
        let shard = self
            .shard
            .as_deref()
            .map(Shard::parse)
            .transpose()
            .map_err(|e| ServerError::Settings(format!("shard: {e}")))?;
        if shard.is_some() && !self.router.shards.is_empty() {
            return Err(ServerError::Settings(
                "a server is a row shard or a router in front of shards, not both".into(),
            ));
        }
        Ok(shard)
    }

    /// Reads a TOML config file.
    pub fn from_file(path: &std::path::Path) -> Result<Self, ServerError> {
        Ok(protocol::config::load_toml(path)?)
    }
}

/// How lookups are batched (`[batching]` in configs/server.toml).
#[derive(Clone, Copy, Debug, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BatchSettings {
    /// Off: every request is a pass of its own, as many at once as there
    /// are workers.
    pub enabled: bool,
    /// Milliseconds a pass waits for company after its first lookup
    /// arrives (0: none; lookups that arrive while a pass runs join the
    /// next one anyway).
    pub window_ms: f64,
    /// Most queries in one pass.
    pub max_queries: usize,
}

impl Default for BatchSettings {
    fn default() -> Self {
        BatchSettings {
            enabled: true,
            window_ms: 0.0,
            max_queries: 256,
        }
    }
}

impl BatchSettings {
    pub(crate) fn window(&self) -> Duration {
        protocol::config::seconds(self.window_ms / 1e3, 0.0, 1e9)
    }
}

/// What this process is: a whole server, a row shard, or a router in
/// front of row shards.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Whole,
    Shard(Shard),
    Router,
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Role::Whole => write!(f, "whole"),
            Role::Shard(s) => write!(f, "shard {s}"),
            Role::Router => write!(f, "router"),
        }
    }
}
