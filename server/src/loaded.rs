//! A snapshot loaded to answer from: its database (or, on a router, its
//! setup), its table and code tree, and its queue of lookups waiting for
//! a pass ([`crate::batch`] runs the passes).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use pir_core::error::AnswerError;
use pir_core::server::ServeError;
use pir_core::wire::{Query, Response};
use pir_core::{PirServer, PublishedSetup};
use snapshot_store::{SnapshotStore, StoredSnapshot};
use tokio::sync::oneshot;

use crate::config::{AnswerDevice, AnswerSettings, Role};
use crate::error::ServerError;
use crate::metrics::Metrics;

/// How a snapshot's queries are answered here.
pub enum Serving {
    /// From its database (memory-mapped): all rows, or this shard's.
    Local(PirServer),
    /// By the row shards behind this router: only the setup is held.
    Routed(PublishedSetup),
}

/// A snapshot ready to answer.
pub struct LoadedSnapshot {
    pub stored: StoredSnapshot,
    pub serving: Serving,
    /// `<chain>-<block>-<kind>`.
    pub url_id: String,
    /// `table.bin` (digest-checked), when the snapshot has one; shared
    /// with every download of it.
    pub table: Option<Bytes>,
    /// Its code table's tree (checked against the manifest's digest and
    /// root), to prove any entry in a few hashes; none without codes.
    pub codes: Option<protocol::codes::CodeTree>,
    /// Its queue of lookups waiting for a pass.
    pub batcher: Batcher,
    /// Where its passes run (moved to the GPU when it frees up:
    /// [`LoadedSnapshot::try_gpu_again`]).
    answers_on: std::sync::RwLock<AnswersOn>,
}

/// Where a snapshot's passes run.
pub enum AnswersOn {
    /// All CPU cores, and why (asked for, a router, a small level).
    Cpu(String),
    /// All CPU cores until the GPU can take it (absent, full, failing),
    /// and why: asked again at every rescan.
    #[cfg_attr(not(feature = "gpu"), allow(dead_code))]
    CpuForNow(String),
    /// Its served rows held in GPU memory.
    #[cfg(feature = "gpu")]
    Gpu(gpu_kernels::GpuAnswers),
}

impl AnswersOn {
    /// Holds `pir`'s database where `answer` says (see [`AnswerDevice`]),
    /// for passes of up to `max_queries` queries.
    fn choose(
        pir: &PirServer,
        answer: AnswerSettings,
        max_queries: usize,
    ) -> Result<Self, ServerError> {
        #[cfg(feature = "gpu")]
        {
            let device = match answer.device {
                AnswerDevice::Auto => gpu_kernels::Device::Auto,
                AnswerDevice::Cpu => gpu_kernels::Device::Cpu,
                AnswerDevice::Cuda => gpu_kernels::Device::Cuda,
            };
            let min = answer.min_gpu_bytes();
            match gpu_kernels::hold_for_answers(pir.db(), device, max_queries, min) {
                Ok(gpu_kernels::AnswerPlace::Gpu(gpu)) => Ok(AnswersOn::Gpu(gpu)),
                Ok(gpu_kernels::AnswerPlace::Cpu(why)) => Ok(AnswersOn::Cpu(why)),
                Ok(gpu_kernels::AnswerPlace::CpuForNow(why)) => Ok(AnswersOn::CpuForNow(why)),
                Err(e) => Err(ServerError::Gpu(e.to_string())),
            }
        }
        #[cfg(not(feature = "gpu"))]
        {
            let _ = (pir, max_queries);
            match answer.device {
                AnswerDevice::Cuda => Err(ServerError::Gpu(
                    "this server is built without GPU support (feature `gpu`)".into(),
                )),
                AnswerDevice::Cpu => Ok(AnswersOn::Cpu("requested".into())),
                AnswerDevice::Auto => Ok(AnswersOn::Cpu("built without GPU support".into())),
            }
        }
    }

    /// `cpu` or `cuda`.
    pub fn device(&self) -> &'static str {
        match self {
            AnswersOn::Cpu(_) | AnswersOn::CpuForNow(_) => "cpu",
            #[cfg(feature = "gpu")]
            AnswersOn::Gpu(_) => "cuda",
        }
    }

    /// The GPU's name, or why the CPU.
    pub fn detail(&self) -> String {
        match self {
            AnswersOn::Cpu(why) => why.clone(),
            AnswersOn::CpuForNow(why) => format!("for now: {why}"),
            #[cfg(feature = "gpu")]
            AnswersOn::Gpu(gpu) => gpu.name().to_string(),
        }
    }
}

impl LoadedSnapshot {
    /// Reads, checks (digests, formats, setup digest) and loads a snapshot
    /// the way this server serves it.
    pub fn load(
        store: &SnapshotStore,
        stored: StoredSnapshot,
        role: Role,
        answer: (AnswerSettings, usize),
    ) -> Result<Self, ServerError> {
        let serving = match role {
            Role::Whole => Serving::Local(store.load_server(&stored, None)?),
            Role::Shard(shard) => Serving::Local(store.load_server(&stored, Some(shard))?),
            Role::Router => Serving::Routed(store.load_setup(&stored)?),
        };
        let table = match stored
            .manifest
            .files
            .contains_key(snapshot_store::TABLE_FILE)
        {
            true => Some(Bytes::from(
                store.read_checked(&stored, snapshot_store::TABLE_FILE)?,
            )),
            false => None,
        };
        let codes = match stored.manifest.codes {
            Some(summary) => {
                let tree = protocol::codes::CodeTree::new(store.read_code_table(&stored)?);
                if tree.summary() != Some(summary) {
                    return Err(ServerError::CodeTable(stored.id));
                }
                Some(tree)
            }
            None => None,
        };
        let answers_on = match &serving {
            Serving::Local(pir) => AnswersOn::choose(pir, answer.0, answer.1)?,
            Serving::Routed(_) => AnswersOn::Cpu("a router answers nothing itself".into()),
        };
        Ok(LoadedSnapshot {
            answers_on: std::sync::RwLock::new(answers_on),
            table,
            codes,
            url_id: stored.id.url_form(),
            stored,
            serving,
            batcher: Batcher::default(),
        })
    }

    /// The setup clients download.
    pub fn setup(&self) -> &PublishedSetup {
        match &self.serving {
            Serving::Local(pir) => pir.setup(),
            Serving::Routed(setup) => setup,
        }
    }

    /// Entries of one query sent here (a shard's are its rows only).
    pub fn query_rows(&self) -> usize {
        match &self.serving {
            Serving::Local(pir) => pir.query_rows(),
            Serving::Routed(setup) => setup.shape().rows(),
        }
    }

    /// Parses a batch of queries to this snapshot and checks each.
    pub fn checked_queries(&self, body: &[u8]) -> Result<Vec<Query>, ServeError> {
        match &self.serving {
            Serving::Local(pir) => pir.checked_queries(body),
            Serving::Routed(setup) => setup.checked_queries(body),
        }
    }

    /// Where its passes run: `cpu` or `cuda`.
    pub fn answers_device(&self) -> &'static str {
        self.answers_on.read().expect("lock").device()
    }

    /// The GPU's name, or why the CPU.
    pub fn answers_detail(&self) -> String {
        self.answers_on.read().expect("lock").detail()
    }

    /// Whether it is on the CPU until the GPU can take it.
    pub fn waits_for_gpu(&self) -> bool {
        matches!(
            *self.answers_on.read().expect("lock"),
            AnswersOn::CpuForNow(_)
        )
    }

    /// Asks the GPU again for a level on the CPU for now (the previous
    /// base retired and its memory freed, a fault gone): whether its
    /// passes moved to the GPU. Uploads the level when it fits, so it runs
    /// off the async threads.
    pub fn try_gpu_again(&self, answer: AnswerSettings, max_queries: usize) -> bool {
        let Serving::Local(pir) = &self.serving else {
            return false;
        };
        if !self.waits_for_gpu() {
            return false;
        }
        match AnswersOn::choose(pir, answer, max_queries) {
            Ok(AnswersOn::CpuForNow(why)) => {
                *self.answers_on.write().expect("lock") = AnswersOn::CpuForNow(why);
                false
            }
            Ok(AnswersOn::Cpu(_)) | Err(_) => false,
            #[cfg(feature = "gpu")]
            Ok(place @ AnswersOn::Gpu(_)) => {
                *self.answers_on.write().expect("lock") = place;
                true
            }
        }
    }

    /// Answers a batch from the database here, in one pass: from GPU
    /// memory when it is held there (a GPU failure answers the batch on
    /// the CPU instead, logged and counted), else on all CPU cores.
    pub fn answer_batch(
        &self,
        queries: &[Query],
        metrics: &Metrics,
    ) -> Result<Vec<Response>, AnswerError> {
        let pir = match &self.serving {
            Serving::Local(pir) => pir,
            // A router never answers itself (its query route forwards).
            Serving::Routed(_) => return Err(AnswerError::EmptyBatch),
        };
        #[cfg(feature = "gpu")]
        if let AnswersOn::Gpu(gpu) = &*self.answers_on.read().expect("lock") {
            pir.check_batch(queries)?;
            let vecs: Vec<&[u32]> = queries.iter().map(|q| q.vector.as_slice()).collect();
            // A panic in the GPU path (a driver binding's, say) is a failed
            // pass too: the CPU answers instead.
            let answered =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| gpu.answer(&vecs)))
                    .unwrap_or_else(|_| {
                        Err(gpu_kernels::GpuError::Unusable(
                            "the GPU pass panicked".into(),
                        ))
                    });
            match answered {
                Ok((answers, times)) => {
                    metrics.device.gpu_pass(times.total());
                    return Ok(answers
                        .into_iter()
                        .map(|elems| Response { elems })
                        .collect());
                }
                Err(e) => {
                    metrics.device.gpu_fallbacks.inc();
                    tracing::warn!(snapshot = %self.url_id, error = %e, "GPU pass failed; answering this batch on the CPU");
                }
            }
        }
        metrics.device.cpu_pass();
        pir.answer_batch(queries)
    }
}

/// A snapshot and one request's checked queries to it.
pub type Part = (Arc<LoadedSnapshot>, Vec<Query>);

/// One request's queries to one snapshot, and where their answers go.
pub(crate) struct Job {
    pub(crate) queries: Vec<Query>,
    pub(crate) reply: oneshot::Sender<Result<Vec<Response>, AnswerError>>,
}

/// A snapshot's queue of jobs.
#[derive(Default)]
pub struct Batcher {
    pending: Mutex<Pending>,
}

#[derive(Default)]
struct Pending {
    jobs: VecDeque<Job>,
    /// Whether a drain task is running (it ends when it finds no job).
    draining: bool,
}

impl Batcher {
    /// Queues a job; true when no drain task runs and one must start.
    pub(crate) fn push(&self, job: Job) -> bool {
        let mut pending = self.pending.lock().expect("lock");
        pending.jobs.push_back(job);
        !std::mem::replace(&mut pending.draining, true)
    }

    /// The jobs of the next pass (at least one, then as many as fit
    /// `max_queries`); none ends the drain task.
    pub(crate) fn take(&self, max_queries: usize) -> Vec<Job> {
        let mut pending = self.pending.lock().expect("lock");
        let mut jobs = Vec::new();
        let mut queries = 0;
        while let Some(job) = pending.jobs.front() {
            if !jobs.is_empty() && queries + job.queries.len() > max_queries {
                break;
            }
            queries += job.queries.len();
            jobs.extend(pending.jobs.pop_front());
        }
        if jobs.is_empty() {
            pending.draining = false;
        }
        jobs
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(n: usize) -> (Job, oneshot::Receiver<Result<Vec<Response>, AnswerError>>) {
        let (reply, rx) = oneshot::channel();
        let query = Query {
            setup_id: [0; 8],
            vector: Vec::new(),
        };
        (
            Job {
                queries: vec![query; n],
                reply,
            },
            rx,
        )
    }

    #[test]
    fn passes_take_whole_jobs_up_to_the_cap() {
        let batcher = Batcher::default();
        let mut receivers = Vec::new();
        for (i, n) in [3, 2, 4, 9, 1].into_iter().enumerate() {
            let (j, rx) = job(n);
            assert_eq!(
                batcher.push(j),
                i == 0,
                "only the first push starts a drain"
            );
            receivers.push(rx);
        }
        let sizes = |jobs: Vec<Job>| jobs.iter().map(|j| j.queries.len()).collect::<Vec<_>>();
        assert_eq!(sizes(batcher.take(8)), [3, 2]);
        assert_eq!(sizes(batcher.take(8)), [4]);
        // A job larger than the cap is a pass of its own.
        assert_eq!(sizes(batcher.take(8)), [9]);
        assert_eq!(sizes(batcher.take(8)), [1]);
        assert!(batcher.take(8).is_empty());
        let (j, _rx) = job(1);
        assert!(
            batcher.push(j),
            "an empty queue's drain ended: a new one starts"
        );
    }
}
