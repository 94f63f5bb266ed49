//! Prometheus metrics of the server.

use std::time::Duration;

use prometheus::{
    Encoder, Histogram, HistogramOpts, IntCounterVec, IntGauge, Opts, Registry, TextEncoder,
};

pub struct Metrics {
    registry: Registry,
    pub requests: IntCounterVec,
    pub queries: IntCounterVec,
    pub answer_seconds: Histogram,
    /// Queries per pass over a database.
    pub pass_queries: Histogram,
    /// Requests (request parts) per pass.
    pub pass_requests: Histogram,
    pub snapshots: IntGauge,
    pub queued: IntGauge,
}

/// A counter of `name` split by `labels`.
fn counter(name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
    IntCounterVec::new(Opts::new(name, help), labels).expect("valid metric")
}

/// A histogram of `name` with these bucket bounds.
fn histogram(name: &str, help: &str, buckets: Vec<f64>) -> Histogram {
    Histogram::with_opts(HistogramOpts::new(name, help).buckets(buckets)).expect("valid metric")
}

impl Metrics {
    pub fn new() -> Self {
        let sizes = || vec![1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0];
        let metrics = Metrics {
            registry: Registry::new(),
            requests: counter(
                "ethpir_http_requests_total",
                "HTTP requests by route and status",
                &["route", "status"],
            ),
            queries: counter(
                "ethpir_queries_total",
                "PIR queries answered, by snapshot",
                &["snapshot"],
            ),
            answer_seconds: histogram(
                "ethpir_answer_seconds",
                "Time of one pass over a database (one batch of queries)",
                vec![
                    0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0,
                ],
            ),
            pass_queries: histogram(
                "ethpir_pass_queries",
                "Queries answered in one pass",
                sizes(),
            ),
            pass_requests: histogram(
                "ethpir_pass_requests",
                "Requests answered together in one pass (batching across wallets)",
                sizes(),
            ),
            snapshots: IntGauge::new("ethpir_snapshots", "Snapshots being served")
                .expect("valid metric"),
            queued: IntGauge::new(
                "ethpir_queue_depth",
                "Query batches waiting or being answered",
            )
            .expect("valid metric"),
        };
        for m in [
            Box::new(metrics.requests.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(metrics.queries.clone()),
            Box::new(metrics.answer_seconds.clone()),
            Box::new(metrics.pass_queries.clone()),
            Box::new(metrics.pass_requests.clone()),
            Box::new(metrics.snapshots.clone()),
            Box::new(metrics.queued.clone()),
        ] {
            metrics.registry.register(m).expect("unique metric");
        }
        metrics
    }

    /// One pass over `snapshot`'s database: `requests` requests' parts,
    /// `queries` queries in all.
    pub fn observe_pass(&self, snapshot: &str, requests: usize, queries: usize, took: Duration) {
        self.answer_seconds.observe(took.as_secs_f64());
        self.pass_queries.observe(queries as f64);
        self.pass_requests.observe(requests as f64);
        self.queries
            .with_label_values(&[snapshot])
            .inc_by(queries as u64);
        tracing::debug!(
            snapshot,
            requests,
            queries,
            ms = took.as_secs_f64() * 1e3,
            "pass"
        );
    }

    pub fn render(&self) -> String {
        let mut out = Vec::new();
        TextEncoder::new()
            .encode(&self.registry.gather(), &mut out)
            .expect("text encoding");
        String::from_utf8(out).unwrap_or_default()
    }
}
