//! Prometheus metrics of an operator, rendered in the OpenMetrics text format.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{LazyLock, Mutex};
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
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

/// One resource the operator reports on. Not `namespace`: a scrape names the operator pod's own
/// namespace so, and would rename this one.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ObjectLabels {
    kind: &'static str,
    resource_namespace: String,
    resource_name: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PhaseLabels {
    kind: &'static str,
    resource_namespace: String,
    resource_name: String,
    phase: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StreamLabels {
    stream: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BusLabels {
    /// The NATS identity the process connects as (`meta-operator`, `katib-operator`, …).
    pub identity: String,
}

/// Whether the process's NATS connection is up (1) or down (0), per identity it connects as: a
/// series exists only in a process that uses the bus. Written by the connection's event callback
/// ([`crate::nats::connect`]), read by every [`Metrics`] of the process.
pub static BUS_CONNECTED: LazyLock<Family<BusLabels, Gauge>> = LazyLock::new(Family::default);

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CredentialLabels {
    /// Which credential: `nkey` (the seed file the process signs the server's nonce with).
    pub credential: &'static str,
}

/// Failed uses of the process's bus credentials (an NKey seed file missing, unreadable or no
/// seed), counted where they are used ([`crate::nats::connect`]).
pub static BUS_CREDENTIAL_ERRORS: LazyLock<Family<CredentialLabels, Counter>> = LazyLock::new(Family::default);

/// How many names the bus's TLS certificate lacks of those the hub's spokes reach it by (the
/// meta-operator that provisions the bus sets it; 0 elsewhere).
pub static BUS_CERTIFICATE_MISSING_NAMES: LazyLock<Gauge> = LazyLock::new(Gauge::default);

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
    phases: Family<PhaseLabels, Gauge>,
    stream_messages: Family<StreamLabels, Gauge>,
    stream_bytes: Family<StreamLabels, Gauge>,
    stream_consumers: Family<StreamLabels, Gauge>,
    deadlines: Family<ObjectLabels, Gauge<f64, AtomicU64>>,
    /// The phase each resource's series of `phases` names, so a change removes the old series.
    phase_of: Mutex<HashMap<ObjectLabels, String>>,
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
        let (phases, deadlines) = (Family::default(), Family::<ObjectLabels, Gauge<f64, AtomicU64>>::default());
        registry.register("resource_phase", "1 for the phase (or state) each resource the operator reconciles is in, as its status says", phases.clone());
        registry.register_with_unit(
            "resource_deadline",
            "When the resource's current phase must have ended (Unix time), for phases with a deadline (a KfUpgrade's planning and steps)",
            Unit::Other("timestamp_seconds".into()),
            deadlines.clone(),
        );
        let (stream_messages, stream_bytes, stream_consumers) = (Family::default(), Family::default(), Family::default());
        registry.register("bus_stream_messages", "Messages a bus stream (a key-value bucket's) holds", stream_messages.clone());
        registry.register_with_unit("bus_stream", "Bytes a bus stream holds", Unit::Bytes, stream_bytes.clone());
        registry.register("bus_stream_consumers", "Consumers of a bus stream (one per watch of its bucket)", stream_consumers.clone());
        registry.register("bus_connected", "Whether the process's NATS connection is up, per identity it connects as", BUS_CONNECTED.clone());
        registry.register("bus_credential_errors", "Failed uses of the process's bus credentials", BUS_CREDENTIAL_ERRORS.clone());
        registry.register("bus_certificate_missing_names", "Names the bus certificate was not issued for that the spokes reach the hub by", BUS_CERTIFICATE_MISSING_NAMES.clone());
        Self {
            registry,
            reconciles,
            heals,
            writes,
            writes_by,
            errors,
            durations,
            phases,
            stream_messages,
            stream_bytes,
            stream_consumers,
            deadlines,
            phase_of: Mutex::default(),
            ready: AtomicBool::new(false),
            standing_by: AtomicBool::new(false),
        }
    }
    /// `kind` `namespace/name` is in `phase` (its status says so); `None`: it has none yet.
    pub fn set_phase(&self, kind: &'static str, namespace: &str, name: &str, phase: Option<&str>) {
        let object = ObjectLabels { kind, resource_namespace: namespace.into(), resource_name: name.into() };
        let mut phase_of = self.phase_of.lock().expect("not poisoned");
        let before = match phase {
            Some(phase) => phase_of.insert(object.clone(), phase.to_string()).filter(|before| before != phase),
            None => phase_of.remove(&object),
        };
        if let Some(before) = before {
            self.phases.remove(&PhaseLabels { kind, resource_namespace: object.resource_namespace.clone(), resource_name: object.resource_name.clone(), phase: before });
        }
        if let Some(phase) = phase {
            self.phases.get_or_create(&PhaseLabels { kind, resource_namespace: object.resource_namespace, resource_name: object.resource_name, phase: phase.into() }).set(1);
        }
    }
    /// The phases of every resource of `kind` in `namespace` whose name starts with `prefix`
    /// (`<kfdef>/` for a KfDef's applications): `entries` (name, phase), and no others.
    pub fn set_phases(&self, kind: &'static str, namespace: &str, prefix: &str, entries: &[(String, String)]) {
        let gone: Vec<String> = {
            let phase_of = self.phase_of.lock().expect("not poisoned");
            phase_of
                .keys()
                .filter(|o| o.kind == kind && o.resource_namespace == namespace && o.resource_name.starts_with(prefix) && !entries.iter().any(|(name, _)| *name == o.resource_name))
                .map(|o| o.resource_name.clone())
                .collect()
        };
        for name in gone {
            self.set_phase(kind, namespace, &name, None);
        }
        for (name, phase) in entries {
            self.set_phase(kind, namespace, name, Some(phase));
        }
    }
    /// What bus stream `stream` holds: messages, bytes and consumers.
    pub fn set_stream(&self, stream: &str, messages: u64, bytes: u64, consumers: usize) {
        let labels = StreamLabels { stream: stream.into() };
        self.stream_messages.get_or_create(&labels).set(messages as i64);
        self.stream_bytes.get_or_create(&labels).set(bytes as i64);
        self.stream_consumers.get_or_create(&labels).set(consumers as i64);
    }
    /// `kind` `namespace/name`'s current phase must end by `deadline` (Unix seconds); `None`: it
    /// has no deadline.
    pub fn set_deadline(&self, kind: &'static str, namespace: &str, name: &str, deadline: Option<f64>) {
        let object = ObjectLabels { kind, resource_namespace: namespace.into(), resource_name: name.into() };
        match deadline {
            Some(at) => {
                self.deadlines.get_or_create(&object).set(at);
            }
            None => {
                self.deadlines.remove(&object);
            }
        }
    }
    /// `kind` `namespace/name` is gone: its series go with it.
    pub fn forget(&self, kind: &'static str, namespace: &str, name: &str) {
        self.set_phase(kind, namespace, name, None);
        self.set_deadline(kind, namespace, name, None);
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
    fn a_resource_has_one_phase_series_and_loses_its_series_when_forgotten() {
        let m = Metrics::new("meta");
        m.set_phase("KfDef", "kubeflow", "kf", Some("Progressing"));
        m.set_phase("KfDef", "kubeflow", "kf", Some("Degraded"));
        m.set_phase("KfDef", "team", "kf", Some("Available"));
        m.set_deadline("KfUpgrade", "kubeflow", "up", Some(1_700_000_000.5));
        let text = m.render();
        let lines: Vec<&str> = text.lines().collect();
        for line in [
            "kfop_resource_phase{component=\"meta\",kind=\"KfDef\",resource_namespace=\"kubeflow\",resource_name=\"kf\",phase=\"Degraded\"} 1",
            "kfop_resource_phase{component=\"meta\",kind=\"KfDef\",resource_namespace=\"team\",resource_name=\"kf\",phase=\"Available\"} 1",
            "kfop_resource_deadline_timestamp_seconds{component=\"meta\",kind=\"KfUpgrade\",resource_namespace=\"kubeflow\",resource_name=\"up\"} 1700000000.5",
        ] {
            assert!(lines.contains(&line), "no line {line:?} in\n{text}");
        }
        assert!(!text.contains("Progressing"), "the phase before is no series any more:\n{text}");
        m.forget("KfDef", "kubeflow", "kf");
        m.forget("KfUpgrade", "kubeflow", "up");
        let text = m.render();
        assert!(!text.contains("resource_name=\"kf\",phase=\"Degraded\"") && !text.contains("resource_name=\"up\""), "{text}");
        assert!(text.contains("resource_namespace=\"team\""), "another resource's series stays:\n{text}");
        // A KfDef's applications: those listed, and no others of that KfDef.
        m.set_phases("KfDefApplication", "team", "kf/", &[("kf/a".into(), "Ready".into()), ("kf/b".into(), "Degraded".into())]);
        m.set_phases("KfDefApplication", "team", "kf2/", &[("kf2/a".into(), "Ready".into())]);
        m.set_phases("KfDefApplication", "team", "kf/", &[("kf/b".into(), "Ready".into())]);
        let text = m.render();
        assert!(!text.contains("resource_name=\"kf/a\"") && !text.contains("phase=\"Degraded\""), "{text}");
        assert!(text.contains("resource_name=\"kf/b\",phase=\"Ready\"} 1") && text.contains("resource_name=\"kf2/a\""), "{text}");
        m.set_stream("KV_kubeflow-status", 12, 3400, 2);
        let text = m.render();
        for line in ["kfop_bus_stream_messages{component=\"meta\",stream=\"KV_kubeflow-status\"} 12", "kfop_bus_stream_bytes{component=\"meta\",stream=\"KV_kubeflow-status\"} 3400", "kfop_bus_stream_consumers{component=\"meta\",stream=\"KV_kubeflow-status\"} 2"] {
            assert!(text.lines().any(|l| l == line), "no line {line:?} in\n{text}");
        }
    }

    #[test]
    fn readiness_is_set_once_started() {
        let m = Metrics::new("katib");
        assert!(!m.is_ready());
        m.set_ready();
        assert!(m.is_ready());
    }
}
