//! Benchmark of the fleet bus (prints figures, asserts nothing). `make bench-fleet`.
//!
//! For each fleet size in `BENCH_SPOKES` (default `1,4,8`): a hub and that many spoke clusters on
//! loopback ([`kubeflow_e2e::fleet`]), each with its real `fleet-agent`.
//! * Fan-out: the hub changes every cluster's desired Katib spec → each cluster's Katib operator
//!   (a watch of its desired bucket, as the operator holds it) sees the change. Time until the
//!   last cluster has it, p50/p95 over `BENCH_CHANGES` (default 20) changes.
//! * Report back: a cluster's status report → the hub's watch of that cluster's bucket.
//! * Reference, same run: the single-cluster hop, a put → a watch on one server.
//! * Traffic at rest: the hub's messages and bytes per second over `BENCH_QUIET_SECS` (default 20),
//!   and the JetStream bytes a cluster's desired bucket holds after the changes (history 5).

use std::time::{Duration, Instant};

use async_nats::jetstream::{self, kv};
use futures::StreamExt;
use kubeflow_crds::ComponentKind;
use kubeflow_crds::bus::{DesiredComponent, Identity, KfDefRef, StatusReport};
use kubeflow_crds::fleet;
use kubeflow_e2e::fleet::{Fleet, spoke_buckets};
use kubeflow_e2e::percentile;

const KEY: &str = "katib.kubeflow.kubeflow";

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

/// A desired Katib spec the size of a KfDef's (its applications' parameters and overlays).
fn desired(change: usize, cluster: Option<&str>) -> Vec<u8> {
    let applications: Vec<serde_json::Value> = (0..4).map(|i| serde_json::json!({"name": format!("katib-{i}"), "overlays": ["istio", "application"], "parameters": [{"name": "namespace", "value": "kubeflow"}]})).collect();
    let value = DesiredComponent {
        kfdef: KfDefRef { namespace: "kubeflow".into(), name: "kubeflow".into(), uid: "bench".into(), generation: change as i64 },
        component: ComponentKind::Katib,
        spec_hash: format!("hash-{change}"),
        spec: serde_json::json!({"version": "v0.11.0", "applications": applications}),
        traceparent: None,
        preview: None,
        cluster: cluster.map(String::from),
    };
    serde_json::to_vec(&value).unwrap()
}

/// Reads `watch` until an entry whose value is `value`; the time it took from `since`.
async fn until(watch: &mut kv::Watch, value: &[u8], since: Instant) -> Duration {
    while let Some(entry) = watch.next().await {
        if entry.is_ok_and(|e| e.value == value) {
            return since.elapsed();
        }
    }
    panic!("a watch ended");
}

async fn varz(fleet: &Fleet) -> (f64, f64) {
    let v = fleet.hub.monitor(0, "/varz").await.unwrap();
    let n = |k: &str| v[k].as_f64().unwrap_or(0.0);
    (n("in_msgs") + n("out_msgs"), n("in_bytes") + n("out_bytes"))
}

#[tokio::main]
async fn main() {
    // Measured on the operators' hand-written templates until the figures move to upstream's packages.
    kubeflow_e2e::still_on_built_in_templates();
    let sizes: Vec<usize> = std::env::var("BENCH_SPOKES").unwrap_or_else(|_| "1,4,8".into()).split(',').filter_map(|s| s.trim().parse().ok()).collect();
    let changes: usize = std::env::var("BENCH_CHANGES").ok().and_then(|v| v.parse().ok()).unwrap_or(20);
    let quiet = Duration::from_secs(std::env::var("BENCH_QUIET_SECS").ok().and_then(|v| v.parse().ok()).unwrap_or(20));
    println!("| spokes | fan-out to the last spoke p50 / p95 | report to the hub p50 / p95 | single-cluster hop p50 (same run) | hub msgs/s at rest | hub bytes/s at rest | desired bucket bytes per cluster |");
    println!("| --- | --- | --- | --- | --- | --- | --- |");
    for spokes in sizes {
        let names: Vec<String> = (0..spokes).map(|i| format!("spoke-{i}")).collect();
        let fleet = Fleet::start(&names.iter().map(String::as_str).collect::<Vec<_>>()).await;
        let mut hub_desired = Vec::new();
        let mut spoke_watches = Vec::new();
        let mut spoke_status = Vec::new();
        for spoke in &fleet.spokes {
            hub_desired.push(fleet.hub_bucket(fleet::desired_bucket(&spoke.name)).await);
            let (desired_bucket, status) = spoke_buckets(spoke, ComponentKind::Katib).await;
            spoke_watches.push(desired_bucket.watch(KEY).await.unwrap());
            spoke_status.push(status);
        }
        // Fan-out: every cluster's spec changes; the last arrival counts.
        let mut fan_out = Vec::new();
        for change in 0..changes {
            let values: Vec<Vec<u8>> = fleet.spokes.iter().map(|spoke| desired(change, Some(spoke.name.as_str()))).collect();
            let start = Instant::now();
            for (bucket, value) in hub_desired.iter().zip(&values) {
                bucket.put(KEY, value.clone().into()).await.unwrap();
            }
            let mut last = Duration::ZERO;
            for (watch, value) in spoke_watches.iter_mut().zip(&values) {
                last = last.max(until(watch, value, start).await);
            }
            fan_out.push(last);
        }
        // Report back, from the first cluster.
        let hub_status = fleet.hub_bucket(fleet::status_bucket(&fleet.spokes[0].name)).await;
        let mut hub_watch = hub_status.watch(KEY).await.unwrap();
        let mut reports = Vec::new();
        for change in 0..changes {
            let value = serde_json::to_vec(&StatusReport { spec_hash: format!("hash-{change}"), ready: true, ..Default::default() }).unwrap();
            let start = Instant::now();
            spoke_status[0].put(KEY, value.clone().into()).await.unwrap();
            reports.push(until(&mut hub_watch, &value, start).await);
        }
        // Reference: one server's put → watch, the hop of a single cluster (the meta-operator's
        // write to Katib's desired bucket, on the hub's own server).
        let js = jetstream::new(fleet.hub.client(Identity::MetaOperator).await);
        let (mut single_cluster, _, _) = operator_runtime::nats::ensure_buckets(&js, 1).await.unwrap();
        let reference_bucket = single_cluster.remove(&ComponentKind::Katib).unwrap();
        let mut reference_watch = reference_bucket.watch(KEY).await.unwrap();
        let mut reference = Vec::new();
        for change in 0..changes {
            let value = desired(change, None);
            let start = Instant::now();
            reference_bucket.put(KEY, value.clone().into()).await.unwrap();
            reference.push(until(&mut reference_watch, &value, start).await);
        }
        // At rest: heartbeats only.
        let (msgs_before, bytes_before) = varz(&fleet).await;
        tokio::time::sleep(quiet).await;
        let (msgs_after, bytes_after) = varz(&fleet).await;
        let stream = js.get_stream(format!("KV_{}", fleet::desired_bucket(&fleet.spokes[0].name))).await.unwrap().info().await.unwrap().state.bytes;
        for samples in [&mut fan_out, &mut reports, &mut reference] {
            samples.sort();
        }
        println!(
            "| {spokes} | {} / {} | {} / {} | {} ({:.1}× fan-out) | {:.1} | {:.0} | {stream} |",
            ms(percentile(&fan_out, 0.5)),
            ms(percentile(&fan_out, 0.95)),
            ms(percentile(&reports, 0.5)),
            ms(percentile(&reports, 0.95)),
            ms(percentile(&reference, 0.5)),
            percentile(&fan_out, 0.5).as_secs_f64() / percentile(&reference, 0.5).as_secs_f64(),
            (msgs_after - msgs_before) / quiet.as_secs_f64(),
            (bytes_after - bytes_before) / quiet.as_secs_f64(),
        );
        println!("  (a desired spec is {} bytes)", desired(0, Some("spoke-1")).len());
    }
}
