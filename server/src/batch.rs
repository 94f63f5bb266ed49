//! Answers batched across requests. Every snapshot has a queue of jobs
//! (one request's checked queries for it); one drain task per snapshot
//! takes, pass after pass, as many queued jobs as fit `max_queries` and
//! answers them in one pass over the database (a pass costs little more
//! than its database scan, so k wallets asking at once cost about one
//! scan, not k). Each job gets exactly its own responses back, in order.
//!
//! Bounds: a pass never holds more than `max_queries` queries (a job is
//! never split; one larger than that is a pass of its own); a lone lookup
//! waits at most `window` before its pass starts (plus the wait for a
//! worker, which other snapshots' passes may hold).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use pir_core::error::AnswerError;
use pir_core::wire::{Query, Response};
use tokio::sync::oneshot;

use crate::error::RouteError;
use crate::state::{AppState, LoadedSnapshot};

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
    fn window(&self) -> Duration {
        Duration::from_secs_f64(self.window_ms.max(0.0) / 1e3)
    }
}

/// One request's queries to one snapshot, and where their answers go.
struct Job {
    queries: Vec<Query>,
    reply: oneshot::Sender<Result<Vec<Response>, AnswerError>>,
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
    fn push(&self, job: Job) -> bool {
        let mut pending = self.pending.lock().expect("lock");
        pending.jobs.push_back(job);
        !std::mem::replace(&mut pending.draining, true)
    }

    /// The jobs of the next pass (at least one, then as many as fit
    /// `max_queries`); none ends the drain task.
    fn take(&self, max_queries: usize) -> Vec<Job> {
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

/// Queues `queries` (checked against `snap`) for the snapshot's next pass
/// and returns where the answers will arrive. Queuing happens here, at
/// once, so that a request's parts for several snapshots wait together.
pub fn submit(state: &Arc<AppState>, snap: &Arc<LoadedSnapshot>, queries: Vec<Query>) -> Answered {
    let (reply, answered) = oneshot::channel();
    if snap.batcher.push(Job { queries, reply }) {
        tokio::spawn(drain(state.clone(), snap.clone()));
    }
    Answered {
        snapshot: snap.url_id.clone(),
        answered,
    }
}

/// Answers on their way from a pass.
pub struct Answered {
    snapshot: String,
    answered: oneshot::Receiver<Result<Vec<Response>, AnswerError>>,
}

impl Answered {
    pub async fn wait(self) -> Result<Vec<Response>, RouteError> {
        match self.answered.await {
            Ok(Ok(responses)) => Ok(responses),
            Ok(Err(error)) => Err(RouteError::Query {
                id: self.snapshot,
                error: error.into(),
            }),
            // The pass task ended without answering (its failure is logged).
            Err(_) => Err(RouteError::Internal),
        }
    }
}

/// The drain task of one snapshot: passes until its queue is empty.
async fn drain(state: Arc<AppState>, snap: Arc<LoadedSnapshot>) {
    let settings = state.batching;
    // No timer at all with no window: most drains start under light load.
    if !settings.window().is_zero() {
        tokio::time::sleep(settings.window()).await;
    }
    loop {
        let Ok(permit) = state.workers.clone().acquire_owned().await else {
            return; // shutting down: the jobs' senders drop, requests fail
        };
        let jobs = snap.batcher.take(settings.max_queries.max(1));
        if jobs.is_empty() {
            return;
        }
        let started = Instant::now();
        let pass_snap = snap.clone();
        let pass = tokio::task::spawn_blocking(move || {
            let _permit = permit;
            run_pass(&pass_snap, jobs)
        })
        .await;
        match pass {
            Ok((parts, queries)) => {
                state
                    .metrics
                    .observe_pass(&snap.url_id, parts, queries, started.elapsed())
            }
            Err(e) => tracing::error!(snapshot = %snap.url_id, error = %e, "answer pass failed"),
        }
    }
}

/// One pass: every job's queries answered together, each job sent its
/// own responses. Returns the numbers of jobs and queries.
fn run_pass(snap: &LoadedSnapshot, jobs: Vec<Job>) -> (usize, usize) {
    let sizes: Vec<usize> = jobs.iter().map(|j| j.queries.len()).collect();
    let (queries, replies): (Vec<Vec<Query>>, Vec<_>) =
        jobs.into_iter().map(|j| (j.queries, j.reply)).unzip();
    let all: Vec<Query> = queries.into_iter().flatten().collect();
    let total = all.len();
    match snap.answer_batch(&all) {
        Ok(responses) => {
            let mut responses = responses.into_iter();
            for (reply, n) in replies.into_iter().zip(&sizes) {
                // A request that gave up (its client left) drops its
                // receiver; the others still get theirs.
                let _ = reply.send(Ok(responses.by_ref().take(*n).collect()));
            }
        }
        Err(e) => {
            for reply in replies {
                let _ = reply.send(Err(e.clone()));
            }
        }
    }
    (sizes.len(), total)
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
