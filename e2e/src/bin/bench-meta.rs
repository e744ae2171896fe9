//! Benchmark of the meta-operator path (prints figures, asserts nothing). `make bench-meta`.
//!
//! * Cold converge: the sample kfctl KfDef created → Available, against, in the same run,
//!   `kubectl apply --server-side` of exactly the objects the operators render for it (into
//!   another namespace) → every Deployment/StatefulSet ready.
//! * NATS hop: edit the KfDef (a Katib application overlay) → the Katib resource carries the new
//!   spec (component operator received it) → the KfDef reports Katib on the new spec (status came
//!   back). p50/p99 over N edits.
//! * Writes at steady state: every operator's `kfop_writes_total` over a quiet period.

use std::time::{Duration, Instant};

use component_framework::api::{Katib, KfDef};
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use kubeflow_crds::kfdef::KfDefPhase;
use kubeflow_e2e::*;
use serde_json::json;

#[tokio::main]
async fn main() {
    // Measured on the operators' hand-written templates until the figures move to upstream's packages.
    kubeflow_e2e::still_on_built_in_templates();
    let edits: usize = std::env::var("BENCH_EDITS").ok().and_then(|v| v.parse().ok()).unwrap_or(30);
    let quiet = Duration::from_secs(std::env::var("BENCH_STEADY_SECS").ok().and_then(|v| v.parse().ok()).unwrap_or(180));
    let client = client().await;
    let ns = TestNamespace::create(&client, "bench-kfdef").await;
    // Its `profiles` application makes the cluster's Profile settings: the platform's KfDef.
    let stack = OperatorStack::start_ready_in(&client, &ns.name).await;
    let reference_ns = TestNamespace::create(&client, "bench-ref").await;
    let yaml = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/kfdef-kfctl-istio-dex.yaml")).unwrap();
    let mut kfdef: KfDef = serde_yaml_ng::from_str(&yaml).unwrap();
    kfdef.metadata.namespace = Some(ns.name.clone());
    // The built-in components' applications (the generic ones have their own bench-manifests).
    kfdef.spec.applications.retain(|a| component_framework::api::component::ComponentKind::from_application(&a.name).is_some());
    // Naming no repository (the sample's is on GitHub): the components install their built-in
    // releases, so the figures are the operators' and NATS's, not a download's.
    kfdef.spec.repos.clear();
    let api: Api<KfDef> = Api::namespaced(client.clone(), &ns.name);

    // Cold converge through the operators.
    let t0 = Instant::now();
    api.create(&PostParams::default(), &kfdef).await.unwrap();
    eventually("KfDef Available", || async {
        let k = api.get("kubeflow").await.map_err(|e| e.to_string())?;
        if k.status.as_ref().and_then(|s| s.phase) == Some(KfDefPhase::Available) { Ok(()) } else { Err("not yet".to_string()) }
    })
    .await;
    let operator_converge = t0.elapsed();

    // Reference: the same objects (rendered by the same code for the other namespace) applied by
    // kubectl --server-side, then waited for the same readiness.
    // The sample KfDef is Kubeflow 1.2.
    let mut objects = Vec::new();
    // Components with built-in releases (the generic one installs what a KfDef's packages render).
    for component in kubeflow_component_registry::all().into_iter().filter(|c| !c.releases.is_empty()) {
        let version = component.version_for("1.2").unwrap_or_else(|| panic!("{} has no version for Kubeflow 1.2", component.kind));
        objects.extend((component.render)("reference", &reference_ns.name, &json!({"version": version, "targetNamespace": reference_ns.name}), None).unwrap());
    }
    // Not owned by any operator: strip the labels the operators watch.
    for o in &mut objects {
        if let Some(labels) = o["metadata"]["labels"].as_object_mut() {
            labels.remove(component_framework::build::PART_OF_LABEL);
        }
    }
    let file = std::env::temp_dir().join(unique_name("bench-reference.yaml"));
    std::fs::write(&file, kubeflow_manifests::yaml_stream(objects.iter().cloned())).unwrap();
    let t0 = Instant::now();
    kubectl(&["apply", "--server-side", "--force-conflicts", "--field-manager", "bench-reference", "-f", file.to_str().unwrap()]);
    eventually("reference workloads ready", || async { if all_workloads_ready(&client, &objects).await { Ok(()) } else { Err("not yet") } }).await;
    let reference_converge = t0.elapsed();

    // NATS hop.
    let katibs: Api<Katib> = Api::namespaced(client.clone(), &ns.name);
    let mut received = Vec::new();
    let mut round_trip = Vec::new();
    for i in 0..edits {
        let mut k = api.get("kubeflow").await.unwrap();
        let app = k.spec.applications.iter_mut().find(|a| a.name == "katib-controller").unwrap();
        let overlays = &mut app.kustomize_config.as_mut().unwrap().overlays;
        overlays.retain(|o| !o.starts_with("bench-"));
        overlays.push(format!("bench-{i}"));
        let apps = serde_json::to_value(&k.spec.applications).unwrap();
        let t0 = Instant::now();
        api.patch("kubeflow", &PatchParams::default(), &Patch::Merge(json!({"spec": {"applications": apps}}))).await.unwrap();
        let marker = format!("bench-{i}");
        loop {
            let katib = katibs.get("kubeflow").await.unwrap();
            if katib.spec.core.sources.iter().any(|s| s.overlays.contains(&marker)) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        received.push(t0.elapsed());
        loop {
            let k = api.get("kubeflow").await.unwrap();
            let s = k.status.unwrap_or_default();
            if s.observed_generation == k.metadata.generation && s.phase == Some(KfDefPhase::Available) && s.components.get("katib").is_some_and(|c| c.ready) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        round_trip.push(t0.elapsed());
    }
    received.sort();
    round_trip.sort();

    // Steady state.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let mut before = Vec::new();
    for p in std::iter::once(&stack.meta).chain(stack.components.values()) {
        before.push(p.quiescent().await.1);
    }
    tokio::time::sleep(quiet).await;
    let mut writes = 0.0;
    for (i, p) in std::iter::once(&stack.meta).chain(stack.components.values()).enumerate() {
        writes += p.metric("kfop_writes_total").await.unwrap() - before[i];
    }

    println!("## Meta-operator (bench-meta)\n");
    println!("| figure | value |\n| --- | --- |");
    println!("| cold converge: kfctl KfDef (5 components, {} objects) created → Available | {:.1} s |", objects.len(), operator_converge.as_secs_f64());
    println!("| reference: `kubectl apply --server-side` of the same objects → workloads ready | {:.1} s |", reference_converge.as_secs_f64());
    println!("| converge / reference | {:.2}× |", operator_converge.as_secs_f64() / reference_converge.as_secs_f64());
    println!("| NATS hop p50: KfDef edit → component resource updated, n={edits} | {:.0} ms |", percentile(&received, 0.5).as_secs_f64() * 1e3);
    println!("| NATS hop p99 | {:.0} ms |", percentile(&received, 0.99).as_secs_f64() * 1e3);
    println!("| round trip p50: KfDef edit → KfDef Available with the component's report on the new spec | {:.0} ms |", percentile(&round_trip, 0.5).as_secs_f64() * 1e3);
    println!("| round trip p99 | {:.0} ms |", percentile(&round_trip, 0.99).as_secs_f64() * 1e3);
    println!("| writes to the API server by all six operators over {} s at steady state | {writes} |", quiet.as_secs());

    api.delete("kubeflow", &Default::default()).await.unwrap();
    gone(&api, "kubeflow").await;
    kubectl(&["delete", "--ignore-not-found", "--wait=false", "-f", file.to_str().unwrap()]);
}
