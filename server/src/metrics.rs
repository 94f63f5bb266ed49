//! Prometheus metrics of the server.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::Duration;

use prometheus::{
    Encoder, Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGauge, Opts, Registry,
    TextEncoder,
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
    /// Where passes ran.
    pub device: DeviceMetrics,
    /// From the follower's mark in the store (set as `/metrics` is read).
    pub follower_head: IntGauge,
    pub follower_lag: IntGauge,
    /// The last minutes, for the page's plot.
    pub recent: Recent,
}

/// Seconds a step of [`Recent`] spans.
pub const STEP_SECS: u64 = 5;
/// Steps kept (ten minutes).
const STEPS_KEPT: usize = 120;

/// One step of the last minutes: lookups (query requests) and passes,
/// with their time.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Step {
    /// Unix seconds at its start.
    pub at: u64,
    pub lookups: u64,
    pub queries: u64,
    pub passes: u64,
    pub lookup_ms_sum: f64,
    pub lookup_ms_max: f64,
    pub pass_ms_sum: f64,
}

/// Lookups and passes of the last ten minutes, in steps of
/// [`STEP_SECS`].
#[derive(Default)]
pub struct Recent(Mutex<VecDeque<Step>>);

impl Recent {
    fn now_step() -> u64 {
        let now = protocol::unix_secs();
        now - now % STEP_SECS
    }

    fn with_step(&self, f: impl FnOnce(&mut Step)) {
        let at = Self::now_step();
        let mut steps = self.0.lock().expect("recent steps");
        if steps.back().is_none_or(|s| s.at != at) {
            steps.push_back(Step {
                at,
                ..Default::default()
            });
            if steps.len() > STEPS_KEPT {
                steps.pop_front();
            }
        }
        f(steps.back_mut().expect("just pushed"));
    }

    /// A query request answered: its queries and how long it took.
    pub fn lookup(&self, queries: usize, took: Duration) {
        let ms = took.as_secs_f64() * 1e3;
        self.with_step(|s| {
            s.lookups += 1;
            s.queries += queries as u64;
            s.lookup_ms_sum += ms;
            s.lookup_ms_max = s.lookup_ms_max.max(ms);
        });
    }

    fn pass(&self, took: Duration) {
        self.with_step(|s| {
            s.passes += 1;
            s.pass_ms_sum += took.as_secs_f64() * 1e3;
        });
    }

    /// Every step of the last ten minutes, oldest first (empty ones
    /// included, so that a plot's x axis is time).
    pub fn steps(&self) -> Vec<Step> {
        let now = Self::now_step();
        let first = now.saturating_sub(STEP_SECS * (STEPS_KEPT as u64 - 1));
        let steps = self.0.lock().expect("recent steps");
        (0..STEPS_KEPT as u64)
            .map(|i| first + i * STEP_SECS)
            .map(|at| {
                steps.iter().find(|s| s.at == at).cloned().unwrap_or(Step {
                    at,
                    ..Default::default()
                })
            })
            .collect()
    }
}

/// A counter of `name` split by `labels`.
fn counter(name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
    IntCounterVec::new(Opts::new(name, help), labels).expect("valid metric")
}

/// A gauge of `name`.
fn gauge(name: &str, help: &str) -> IntGauge {
    IntGauge::new(name, help).expect("valid metric")
}

/// A histogram of `name` with these bucket bounds.
fn histogram(name: &str, help: &str, buckets: Vec<f64>) -> Histogram {
    Histogram::with_opts(HistogramOpts::new(name, help).buckets(buckets)).expect("valid metric")
}

/// Where passes ran: the CPU or the GPU, the GPU's time, its failures.
pub struct DeviceMetrics {
    /// Passes by where they ran (`cpu`, `cuda`).
    pub passes: IntCounterVec,
    /// The GPU's part of a pass (queries in, answers out).
    pub gpu_seconds: Histogram,
    /// Batches a GPU failed, answered on the CPU instead.
    pub gpu_fallbacks: IntCounter,
}

impl DeviceMetrics {
    fn new() -> Self {
        DeviceMetrics {
            passes: counter(
                "ethpir_passes_total",
                "Passes over a database, by where they ran (cpu, cuda)",
                &["device"],
            ),
            gpu_seconds: histogram(
                "ethpir_gpu_pass_seconds",
                "GPU time of one pass (queries copied in, answered, answers copied out)",
                vec![
                    0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5,
                ],
            ),
            gpu_fallbacks: IntCounter::new(
                "ethpir_gpu_fallbacks_total",
                "Batches the GPU failed, answered on the CPU instead",
            )
            .expect("valid metric"),
        }
    }

    /// A pass answered from GPU memory, and the GPU's time.
    pub fn gpu_pass(&self, took: Duration) {
        self.passes.with_label_values(&["cuda"]).inc();
        self.gpu_seconds.observe(took.as_secs_f64());
    }

    /// A pass answered on the CPU.
    pub fn cpu_pass(&self) {
        self.passes.with_label_values(&["cpu"]).inc();
    }
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
            snapshots: gauge("ethpir_snapshots", "Snapshots being served"),
            device: DeviceMetrics::new(),
            queued: gauge(
                "ethpir_queue_depth",
                "Query batches waiting or being answered",
            ),
            follower_head: gauge(
                "ethpir_follower_node_head",
                "The node's head block as the follower last saw it (its mark in the store)",
            ),
            follower_lag: gauge(
                "ethpir_follower_lag_blocks",
                "The newest view's block behind the node's head, as the follower last saw it",
            ),
            recent: Recent::default(),
        };
        metrics.register_all();
        metrics
    }

    fn register_all(&self) {
        for m in [
            Box::new(self.requests.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(self.queries.clone()),
            Box::new(self.answer_seconds.clone()),
            Box::new(self.pass_queries.clone()),
            Box::new(self.pass_requests.clone()),
            Box::new(self.snapshots.clone()),
            Box::new(self.device.passes.clone()),
            Box::new(self.device.gpu_seconds.clone()),
            Box::new(self.device.gpu_fallbacks.clone()),
            Box::new(self.queued.clone()),
            Box::new(self.follower_head.clone()),
            Box::new(self.follower_lag.clone()),
        ] {
            self.registry.register(m).expect("unique metric");
        }
    }

    /// One pass over `snapshot`'s database: `requests` requests' parts,
    /// `queries` queries in all.
    pub fn observe_pass(&self, snapshot: &str, requests: usize, queries: usize, took: Duration) {
        self.answer_seconds.observe(took.as_secs_f64());
        self.recent.pass(took);
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

    /// Sets the follower's gauges from its mark (left as they were
    /// without one).
    pub fn follower(&self, mark: Option<&snapshot_store::FollowerMark>) {
        if let Some(mark) = mark {
            let gauge = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
            self.follower_head.set(gauge(mark.node_head));
            self.follower_lag
                .set(gauge(mark.node_head.saturating_sub(mark.newest_view)));
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Every metric the Grafana dashboard in deploy/ asks for is one this
    /// server exports (a histogram's `_bucket`, `_sum` and `_count`
    /// included).
    #[test]
    fn the_dashboards_metrics_are_exported() {
        let metrics = Metrics::new();
        metrics.recent.lookup(1, Duration::from_millis(1));
        metrics.observe_pass("s", 1, 1, Duration::from_millis(1));
        metrics.requests.with_label_values(&["query", "200"]).inc();
        let exported = metrics.render();
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../deploy/grafana/ethpir-server.json"
        );
        let dashboard: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        let mut asked = 0;
        for panel in dashboard["panels"].as_array().unwrap() {
            for target in panel["targets"].as_array().unwrap() {
                let expr = target["expr"].as_str().unwrap();
                let names = expr
                    .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .filter(|w| w.starts_with("ethpir_"));
                for name in names {
                    asked += 1;
                    let line = format!("\n{name}");
                    assert!(
                        exported.contains(&format!("{line}{{"))
                            || exported.contains(&format!("{line} ")),
                        "{name} (panel {}) is not exported",
                        panel["title"]
                    );
                }
            }
        }
        assert!(asked >= 10, "{asked} metrics asked");
    }
}
