//! Prometheus metrics of a component operator, rendered in the text exposition format.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

/// Upper bounds (seconds) of the reconcile duration histogram.
const BUCKETS: [f64; 10] = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0];

#[derive(Default)]
pub struct Metrics {
    component: String,
    reconciles: AtomicU64,
    heals: AtomicU64,
    writes: AtomicU64,
    errors: Mutex<BTreeMap<&'static str, u64>>,
    /// Cumulative bucket counts, then the sum in microseconds and the count.
    durations: Mutex<([u64; BUCKETS.len()], u64, u64)>,
    ready: AtomicBool,
}

impl Metrics {
    pub fn new(component: &str) -> Self {
        Self { component: component.into(), ..Default::default() }
    }
    pub fn reconcile_started(&self) {
        self.reconciles.fetch_add(1, Ordering::Relaxed);
    }
    pub fn reconcile_finished(&self, took: Duration) {
        let mut d = self.durations.lock().unwrap();
        for (i, bound) in BUCKETS.iter().enumerate() {
            if took.as_secs_f64() <= *bound {
                d.0[i] += 1;
            }
        }
        d.1 += took.as_micros() as u64;
        d.2 += 1;
    }
    /// An owned object was recreated or its drift reverted.
    pub fn healed(&self) {
        self.heals.fetch_add(1, Ordering::Relaxed);
    }
    /// A write request (apply, delete, status, event) was sent to the API server.
    #[track_caller]
    pub fn write(&self) {
        tracing::debug!(at = %std::panic::Location::caller(), "API write");
        self.writes.fetch_add(1, Ordering::Relaxed);
    }
    pub fn writes(&self) -> u64 {
        self.writes.load(Ordering::Relaxed)
    }
    pub fn error(&self, kind: &'static str) {
        *self.errors.lock().unwrap().entry(kind).or_default() += 1;
    }
    pub fn set_ready(&self) {
        self.ready.store(true, Ordering::Relaxed);
    }
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Relaxed)
    }

    /// The Prometheus text exposition of every metric.
    pub fn render(&self) -> String {
        let c = &self.component;
        let mut out = String::new();
        let counter = |out: &mut String, name: &str, help: &str, value: u64| {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter\n{name}{{component=\"{c}\"}} {value}");
        };
        counter(&mut out, "kfop_reconciles_total", "Reconciles started.", self.reconciles.load(Ordering::Relaxed));
        counter(&mut out, "kfop_heals_total", "Owned objects recreated or reverted to the desired state.", self.heals.load(Ordering::Relaxed));
        counter(&mut out, "kfop_writes_total", "Write requests sent to the API server.", self.writes());
        let _ = writeln!(out, "# HELP kfop_reconcile_errors_total Failed reconciles by error kind.\n# TYPE kfop_reconcile_errors_total counter");
        for (kind, n) in self.errors.lock().unwrap().iter() {
            let _ = writeln!(out, "kfop_reconcile_errors_total{{component=\"{c}\",kind=\"{kind}\"}} {n}");
        }
        let (buckets, sum_us, count) = *self.durations.lock().unwrap();
        let _ = writeln!(out, "# HELP kfop_reconcile_duration_seconds Reconcile duration.\n# TYPE kfop_reconcile_duration_seconds histogram");
        for (bound, n) in BUCKETS.iter().zip(buckets) {
            let _ = writeln!(out, "kfop_reconcile_duration_seconds_bucket{{component=\"{c}\",le=\"{bound}\"}} {n}");
        }
        let _ = writeln!(out, "kfop_reconcile_duration_seconds_bucket{{component=\"{c}\",le=\"+Inf\"}} {count}");
        let _ = writeln!(out, "kfop_reconcile_duration_seconds_sum{{component=\"{c}\"}} {}", sum_us as f64 / 1e6);
        let _ = writeln!(out, "kfop_reconcile_duration_seconds_count{{component=\"{c}\"}} {count}");
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
        m.write();
        m.error("api");
        let text = m.render();
        assert!(text.contains("kfop_reconciles_total{component=\"katib\"} 1"), "{text}");
        assert!(text.contains("kfop_heals_total{component=\"katib\"} 1"), "{text}");
        assert!(text.contains("kfop_reconcile_errors_total{component=\"katib\",kind=\"api\"} 1"), "{text}");
        assert!(text.contains("le=\"0.01\"} 0") && text.contains("le=\"0.025\"} 1"), "{text}");
    }
}
