//! Prometheus metrics of the server.

use prometheus::{
    Encoder, Histogram, HistogramOpts, IntCounterVec, IntGauge, Opts, Registry, TextEncoder,
};

pub struct Metrics {
    registry: Registry,
    pub requests: IntCounterVec,
    pub queries: IntCounterVec,
    pub answer_seconds: Histogram,
    pub snapshots: IntGauge,
    pub queued: IntGauge,
}

impl Metrics {
    pub fn new() -> Self {
        let registry = Registry::new();
        let requests = IntCounterVec::new(
            Opts::new(
                "ethpir_http_requests_total",
                "HTTP requests by route and status",
            ),
            &["route", "status"],
        )
        .expect("valid metric");
        let queries = IntCounterVec::new(
            Opts::new("ethpir_queries_total", "PIR queries answered, by snapshot"),
            &["snapshot"],
        )
        .expect("valid metric");
        let answer_seconds = Histogram::with_opts(
            HistogramOpts::new("ethpir_answer_seconds", "Time to answer one query batch").buckets(
                vec![
                    0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0,
                ],
            ),
        )
        .expect("valid metric");
        let snapshots =
            IntGauge::new("ethpir_snapshots", "Snapshots being served").expect("valid metric");
        let queued = IntGauge::new(
            "ethpir_queue_depth",
            "Query batches waiting or being answered",
        )
        .expect("valid metric");
        for m in [
            Box::new(requests.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(queries.clone()),
            Box::new(answer_seconds.clone()),
            Box::new(snapshots.clone()),
            Box::new(queued.clone()),
        ] {
            registry.register(m).expect("unique metric");
        }
        Metrics {
            registry,
            requests,
            queries,
            answer_seconds,
            snapshots,
            queued,
        }
    }

    pub fn render(&self) -> String {
        let mut out = Vec::new();
        TextEncoder::new()
            .encode(&self.registry.gather(), &mut out)
            .expect("text encoding");
        String::from_utf8(out).unwrap_or_default()
    }
}
