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

use std::sync::Arc;
use std::time::Instant;

use pir_core::error::AnswerError;
use pir_core::wire::{Query, Response};
use tokio::sync::oneshot;

use crate::error::RouteError;
use crate::loaded::{Job, LoadedSnapshot};
use crate::state::AppState;

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
        let (pass_snap, pass_state) = (snap.clone(), state.clone());
        let pass = tokio::task::spawn_blocking(move || {
            let _permit = permit;
            run_pass(&pass_snap, jobs, &pass_state.metrics)
        })
        .await;
        if let Err(e) = pass {
            tracing::error!(snapshot = %snap.url_id, error = %e, "answer pass failed");
        }
    }
}

/// One pass: every job's queries answered together, the pass counted in
/// `metrics`, then each job sent its own responses (counted first, so
/// that a client that has its answer finds its pass in the metrics).
fn run_pass(snap: &LoadedSnapshot, jobs: Vec<Job>, metrics: &crate::metrics::Metrics) {
    let started = Instant::now();
    let sizes: Vec<usize> = jobs.iter().map(|j| j.queries.len()).collect();
    let (queries, replies): (Vec<Vec<Query>>, Vec<_>) =
        jobs.into_iter().map(|j| (j.queries, j.reply)).unzip();
    let all: Vec<Query> = queries.into_iter().flatten().collect();
    let answered = snap.answer_batch(&all, metrics);
    metrics.observe_pass(&snap.url_id, sizes.len(), all.len(), started.elapsed());
    match answered {
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
}
