//! Prometheus metrics of an operator, rendered in the OpenMetrics text format.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};

/// Upper bounds (seconds) of the reconcile duration histogram.
const BUCKETS: [f64; 10] = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ErrorLabels {
    kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WriterLabels {
    field_manager: String,
}

/// The `kfop_*` metrics of one operator process, every series labelled `component="<name>"`.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    reconciles: Counter,
    heals: Counter,
    writes: Counter,
    writes_by: Family<WriterLabels, Counter>,
    errors: Family<ErrorLabels, Counter>,
    durations: Histogram,
    ready: AtomicBool,
    standing_by: AtomicBool,
}

impl Metrics {
    pub fn new(component: &str) -> Self {
        let mut registry = Registry::with_prefix_and_labels("kfop", [("component".into(), component.to_string().into())].into_iter());
        let (reconciles, heals, writes) = (Counter::default(), Counter::default(), Counter::default());
        let (writes_by, errors) = (Family::default(), Family::default());
        let durations = Histogram::new(BUCKETS);
        registry.register("reconciles", "Reconciles started", reconciles.clone());
        registry.register("heals", "Owned objects recreated or reverted to the desired state", heals.clone());
        registry.register("writes", "Write requests sent to the API server", writes.clone());
        registry.register("writes_by_field_manager", "Write requests sent to the API server, by field manager", writes_by.clone());
        registry.register("reconcile_errors", "Failed reconciles by error kind", errors.clone());
        registry.register_with_unit("reconcile_duration", "Reconcile duration", Unit::Seconds, durations.clone());
        Self { registry, reconciles, heals, writes, writes_by, errors, durations, ready: AtomicBool::new(false), standing_by: AtomicBool::new(false) }
    }
    pub fn reconcile_started(&self) {
        self.reconciles.inc();
    }
    pub fn reconcile_finished(&self, took: Duration) {
        self.durations.observe(took.as_secs_f64());
    }
    /// An owned object was recreated or its drift reverted.
    pub fn healed(&self) {
        self.heals.inc();
    }
    /// A write request was sent to the API server as `field_manager` (counted in both write metrics).
    pub fn write_by(&self, field_manager: &str) {
        self.writes_by.get_or_create(&WriterLabels { field_manager: field_manager.into() }).inc();
        self.writes.inc();
    }
    pub fn writes(&self) -> u64 {
        self.writes.get()
    }
    /// Write requests sent as `field_manager`.
    pub fn writes_by(&self, field_manager: &str) -> u64 {
        self.writes_by.get(&WriterLabels { field_manager: field_manager.into() }).map_or(0, |c| c.get())
    }
    pub fn error(&self, kind: &'static str) {
        self.errors.get_or_create(&ErrorLabels { kind }).inc();
    }
    pub fn set_ready(&self) {
        self.ready.store(true, Ordering::Relaxed);
    }
    /// A replica waiting for the leader's Lease counts as ready: it is ready to take over, and
    /// a rolling update must not wait for it to lead.
    pub fn set_standing_by(&self, standing_by: bool) {
        self.standing_by.store(standing_by, Ordering::Relaxed);
    }
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Relaxed) || self.standing_by.load(Ordering::Relaxed)
    }

    /// The OpenMetrics text exposition of every metric.
    pub fn render(&self) -> String {
        let mut out = String::new();
        encode(&mut out, &self.registry).expect("encoding into a String does not fail");
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn render_reports_counters_errors_and_histogram() {
        let m = Metrics::new("katib");
        m.reconcile_started();
        m.reconcile_finished(Duration::from_millis(20));
        m.healed();
        m.write_by("kubeflow-katib-operator");
        m.write_by("kubeflow-katib-operator");
        m.write_by("none");
        m.error("api");
        assert_eq!((m.writes(), m.writes_by("kubeflow-katib-operator"), m.writes_by("none"), m.writes_by("other")), (3, 2, 1, 0));
        let text = m.render();
        let lines: Vec<&str> = text.lines().collect();
        for line in [
            "# TYPE kfop_reconciles counter",
            "kfop_reconciles_total{component=\"katib\"} 1",
            "kfop_heals_total{component=\"katib\"} 1",
            "kfop_writes_total{component=\"katib\"} 3",
            "kfop_writes_by_field_manager_total{component=\"katib\",field_manager=\"kubeflow-katib-operator\"} 2",
            "kfop_writes_by_field_manager_total{component=\"katib\",field_manager=\"none\"} 1",
            "kfop_reconcile_errors_total{component=\"katib\",kind=\"api\"} 1",
            "# TYPE kfop_reconcile_duration_seconds histogram",
            "kfop_reconcile_duration_seconds_sum{component=\"katib\"} 0.02",
            "kfop_reconcile_duration_seconds_count{component=\"katib\"} 1",
            "kfop_reconcile_duration_seconds_bucket{component=\"katib\",le=\"0.01\"} 0",
            "kfop_reconcile_duration_seconds_bucket{component=\"katib\",le=\"0.025\"} 1",
            "kfop_reconcile_duration_seconds_bucket{component=\"katib\",le=\"5.0\"} 1",
            "kfop_reconcile_duration_seconds_bucket{component=\"katib\",le=\"+Inf\"} 1",
        ] {
            assert!(lines.contains(&line), "no line {line:?} in\n{text}");
        }
        assert_eq!(lines.last(), Some(&"# EOF"));
    }

    #[test]
    fn readiness_is_set_once_started() {
        let m = Metrics::new("katib");
        assert!(!m.is_ready());
        m.set_ready();
        assert!(m.is_ready());
    }
}
