//! Benchmark of KfUpgrade (prints figures, asserts nothing). `make bench-upgrade`.
//!
//! * Duration: a five-component KfDef upgraded v1.2.0 → v1.3.0 by a KfUpgrade (one component at
//!   a time, each health-gated), against, in the same run, a raw `kubectl apply --server-side` of
//!   the v1.3.0 objects over the v1.2.0 ones in another namespace (first deleting the Deployments
//!   whose selector changed, as an admin without the operator must) until every workload is ready.
//! * Availability: during the operator's upgrade every Deployment is polled every 50 ms; a
//!   "moment" is a Deployment going from some available replicas to none, or from some ready pods
//!   matching its selector to none (what a Service in front of it sees). Deployments that are
//!   replaced (immutable selector changed) are counted apart from those updated in place.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use component_framework::api::{KfDef, KfUpgrade};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, DynamicObject, PostParams};
use kube::{Api, Client, ResourceExt};
use kubeflow_crds::kfdef::KfDefPhase;
use kubeflow_crds::kfupgrade::UpgradePhase;
use kubeflow_e2e::*;
use serde_json::{Value, json};

/// Every component's objects at its version of Kubeflow release `kubeflow` (major.minor), as
/// the operators render them for a KfDef in `namespace`, without the label the operators watch.
fn release(kubeflow: &str, namespace: &str) -> Vec<Value> {
    let mut objects = Vec::new();
    // Components with built-in releases (the generic one installs what a KfDef's packages render).
    for component in kubeflow_component_registry::all().into_iter().filter(|c| !c.releases.is_empty()) {
        let version = component.version_for(kubeflow).unwrap_or_else(|| panic!("{} has no version for Kubeflow {kubeflow}", component.kind));
        objects.extend((component.render)("reference", namespace, &json!({"version": version, "targetNamespace": namespace}), None).unwrap());
    }
    for o in &mut objects {
        if let Some(labels) = o["metadata"]["labels"].as_object_mut() {
            labels.remove(component_framework::build::PART_OF_LABEL);
        }
    }
    objects
}

async fn ready(client: &Client, objects: &[Value]) -> bool {
    for o in objects.iter().filter(|o| matches!(o["kind"].as_str(), Some("Deployment" | "StatefulSet"))) {
        let info = component_framework::kinds::lookup(o["apiVersion"].as_str().unwrap(), o["kind"].as_str().unwrap()).unwrap();
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), o["metadata"]["namespace"].as_str().unwrap(), &info.api_resource());
        match api.get_opt(o["metadata"]["name"].as_str().unwrap()).await {
            Ok(Some(live)) if component_framework::readiness::not_ready_reason(&serde_json::to_value(&live).unwrap()).is_none() => {}
            _ => return false,
        }
    }
    true
}

fn apply(objects: &[Value]) {
    let file = std::env::temp_dir().join(unique_name("bench-upgrade.yaml"));
    std::fs::write(&file, kubeflow_manifests::yaml_stream(objects.iter().cloned())).unwrap();
    kubectl(&["apply", "--server-side", "--force-conflicts", "--field-manager", "bench-reference", "-f", file.to_str().unwrap()]);
}

/// What the availability monitor saw, per Deployment name.
#[derive(Default)]
struct Availability {
    /// Falls of `status.availableReplicas` from some to none.
    unavailable: BTreeMap<String, u32>,
    /// Falls of the ready pods matching the Deployment's selector from some to none.
    unserved: BTreeMap<String, u32>,
    /// Deployments whose uid changed (replaced).
    replaced: BTreeSet<String>,
}

#[tokio::main]
async fn main() {
    // Measured on the operators' hand-written templates until the figures move to upstream's packages.
    kubeflow_e2e::still_on_built_in_templates();
    let client = client().await;
    let ns = TestNamespace::create(&client, "bench-upgrade").await;
    let stack = OperatorStack::start_ready_in(&client, &ns.name).await;
    let reference = TestNamespace::create(&client, "bench-upgrade-ref").await;
    let apps = ["istio-install", "dex", "kfserving-install", "katib-controller", "api-service"];
    let kfdef: KfDef = serde_json::from_value(json!({
        "apiVersion": "kfdef.apps.kubeflow.org/v1", "kind": "KfDef", "metadata": {"name": "kubeflow"},
        "spec": {"version": "v1.2.0", "applications": apps.iter().map(|a| json!({"name": a})).collect::<Vec<_>>()},
    }))
    .unwrap();
    let kfdefs: Api<KfDef> = Api::namespaced(client.clone(), &ns.name);
    kfdefs.create(&PostParams::default(), &kfdef).await.unwrap();
    eventually("KfDef Available", || async {
        let k = kfdefs.get("kubeflow").await.map_err(|e| e.to_string())?;
        if k.status.and_then(|s| s.phase) == Some(KfDefPhase::Available) { Ok(()) } else { Err("not yet".to_string()) }
    })
    .await;

    // Operator upgrade, with an availability monitor.
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns.name);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    let monitor_api = deployments.clone();
    let (stop_tx, mut stop_rx) = tokio::sync::oneshot::channel::<()>();
    let monitor = tokio::spawn(async move {
        let mut last: BTreeMap<String, (String, i32)> = BTreeMap::new();
        let mut selectors: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
        let mut serving: BTreeMap<String, usize> = BTreeMap::new();
        let mut report = Availability::default();
        loop {
            if stop_rx.try_recv().is_ok() {
                return report;
            }
            let (Ok(list), Ok(pod_list)) = (monitor_api.list(&Default::default()).await, pods.list(&Default::default()).await) else {
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            };
            for d in list.items {
                let name = d.name_any();
                let uid = d.uid().unwrap_or_default();
                let available = d.status.as_ref().and_then(|s| s.available_replicas).unwrap_or(0);
                if let Some((old_uid, old_available)) = last.get(&name) {
                    if *old_uid != uid {
                        report.replaced.insert(name.clone());
                    }
                    if *old_available > 0 && available == 0 {
                        *report.unavailable.entry(name.clone()).or_default() += 1;
                    }
                }
                last.insert(name.clone(), (uid, available));
                selectors.insert(name, d.spec.and_then(|s| s.selector.match_labels).unwrap_or_default());
            }
            // Pods serving each Deployment's current selector (the last one seen while it is
            // being replaced): ready and not terminating.
            for (name, selector) in &selectors {
                let count = pod_list
                    .items
                    .iter()
                    .filter(|p| pod_serving(p) && selector.iter().all(|(k, v)| p.labels().get(k) == Some(v)))
                    .count();
                if serving.get(name).is_some_and(|before| *before > 0) && count == 0 {
                    *report.unserved.entry(name.clone()).or_default() += 1;
                }
                serving.insert(name.clone(), count);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
    let upgrades: Api<KfUpgrade> = Api::namespaced(client.clone(), &ns.name);
    let up: KfUpgrade = serde_json::from_value(json!({"apiVersion": "kfupgrade.apps.kubeflow.org/v1alpha1", "kind": "KfUpgrade", "metadata": {"name": "bench"},
        "spec": {"currentKfDef": {"name": "kubeflow"}, "newKfDef": {"name": "kubeflow", "version": "v1.3.0"}}})).unwrap();
    let t0 = Instant::now();
    upgrades.create(&PostParams::default(), &up).await.unwrap();
    let mut phase = None;
    for _ in 0..600 {
        phase = upgrades.get("bench").await.unwrap().status.and_then(|s| s.phase);
        if matches!(phase, Some(UpgradePhase::Succeeded | UpgradePhase::Failed | UpgradePhase::RolledBack)) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let operator_time = t0.elapsed();
    let _ = stop_tx.send(());
    let mut availability = monitor.await.unwrap();
    // Deployments the new release no longer ships were removed, not interrupted.
    let present: BTreeSet<String> = deployments.list(&Default::default()).await.unwrap().items.iter().map(|d| d.name_any()).collect();
    let removed: BTreeSet<String> = availability.unserved.keys().chain(availability.unavailable.keys()).filter(|n| !present.contains(*n)).cloned().collect();
    availability.unserved.retain(|n, _| present.contains(n));
    availability.unavailable.retain(|n, _| present.contains(n));

    // Reference: raw apply in another namespace.
    let old = release("1.2", &reference.name);
    apply(&old);
    eventually("reference v1.2.0 ready", || async { if ready(&client, &old).await { Ok(()) } else { Err("not yet") } }).await;
    let new = release("1.3", &reference.name);
    let t0 = Instant::now();
    let ref_deployments: Api<Deployment> = Api::namespaced(client.clone(), &reference.name);
    for o in new.iter().filter(|o| o["kind"] == "Deployment") {
        let name = o["metadata"]["name"].as_str().unwrap();
        if let Ok(Some(live)) = ref_deployments.get_opt(name).await {
            if serde_json::to_value(&live.spec.as_ref().unwrap().selector).unwrap() != o["spec"]["selector"] {
                ref_deployments.delete(name, &DeleteParams::background()).await.unwrap();
                while ref_deployments.get_opt(name).await.unwrap().is_some() {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        }
    }
    apply(&new);
    eventually("reference v1.3.0 ready", || async { if ready(&client, &new).await { Ok(()) } else { Err("not yet") } }).await;
    let reference_time = t0.elapsed();

    let Availability { unavailable, unserved, replaced } = availability;
    let sum = |m: &BTreeMap<String, u32>, replaced_ones: bool| -> (u32, Vec<String>) {
        let hits: Vec<(&String, &u32)> = m.iter().filter(|(n, _)| replaced.contains(*n) == replaced_ones).collect();
        (hits.iter().map(|(_, c)| **c).sum(), hits.iter().map(|(n, _)| n.to_string()).collect())
    };
    println!("## KfUpgrade (bench-upgrade)\n");
    println!("| figure | value |\n| --- | --- |");
    println!("| KfUpgrade v1.2.0 → v1.3.0, five components one at a time, each health-gated ({phase:?}) | {:.1} s |", operator_time.as_secs_f64());
    println!("| reference: raw `kubectl apply --server-side` of the v1.3.0 objects (+ deleting changed-selector Deployments) → ready | {:.1} s |", reference_time.as_secs_f64());
    println!("| upgrade / reference | {:.2}× |", operator_time.as_secs_f64() / reference_time.as_secs_f64());
    let (n, names) = sum(&unavailable, false);
    println!("| moments a Deployment updated in place had zero available replicas | {n} {names:?} |");
    let (n, names) = sum(&unserved, false);
    println!("| moments a Deployment updated in place had no ready pod matching its selector | {n} {names:?} |");
    println!("| Deployments removed by the new release (not counted) | {} |", removed.iter().cloned().collect::<Vec<_>>().join(", "));
    println!("| Deployments replaced (selector changed) | {} |", replaced.iter().cloned().collect::<Vec<_>>().join(", "));
    let (n, names) = sum(&unserved, true);
    println!("| moments a replaced Deployment's selector matched no ready pod (old pods hand over) | {n} {names:?} |");

    kfdefs.delete("kubeflow", &Default::default()).await.unwrap();
    gone(&kfdefs, "kubeflow").await;
    drop(stack);
}
