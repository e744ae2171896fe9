//! Benchmark of a KfDef placed on a fleet (prints figures, asserts nothing). `make bench-placement`.
//!
//! The environment's cluster is the hub (its meta-operator on a hub nats-server); for each fleet
//! size in `BENCH_SPOKES` (default `1,2,3`) that many spoke control planes of the local
//! environment, each with its nats-server, fleet agent and dex operator.
//! * Converge: a KfDef of Kubeflow 1.2's Dex placed by label on every spoke → Available on all.
//! * Version change: `spec.version` v1.2.0 → v1.3.0 → Available on all at Dex v2.24.0 (every
//!   cluster at once: a change of spec.version).
//! * Wave upgrade: the KfDef again at v1.2.0, then a KfUpgrade to v1.3.0 in two waves (the first
//!   spoke as the canary, then every other spoke) → Succeeded.
//! * Reference, same run: the same KfDef unplaced, converged by a dex operator on the hub itself,
//!   the same version change there, and the same KfUpgrade without waves.
//! The spokes' control planes share this machine's two cores with the hub's: the figures include
//! their contention, which separate clusters do not have.

use std::time::{Duration, Instant};

use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::Api;
use kube::runtime::wait::await_condition;
use kubeflow_crds::ComponentKind;
use kubeflow_crds::bus::Identity;
use kubeflow_crds::fleet_cluster::{ClusterState, FleetCluster};
use kubeflow_crds::kfdef::KfDefPhase;
use kubeflow_crds::kfupgrade::{KfUpgrade, UpgradePhase};
use kubeflow_crds::KfDef;
use kubeflow_e2e::fleet::{Fleet, SPOKE_NAMES, SpokeCluster, register};
use kubeflow_e2e::*;
use serde_json::json;

fn kfdef(namespace: &str, placed: bool) -> KfDef {
    let mut spec = json!({"version": "v1.2.0", "applications": [{"name": "dex", "kustomizeConfig": {"repoRef": {"name": "manifests", "path": "dex"}}}]});
    if placed {
        spec["placement"] = json!({"clusterSelector": {"matchLabels": {"bench": "placement"}}});
    }
    serde_json::from_value(json!({"apiVersion": "kfdef.apps.kubeflow.org/v1", "kind": "KfDef", "metadata": {"name": "kubeflow", "namespace": namespace}, "spec": spec})).unwrap()
}

/// Available at the KfDef's generation, and on each of `clusters` clusters when placed.
fn available(k: &KfDef, clusters: usize) -> bool {
    let Some(status) = &k.status else { return false };
    let placed_ok = clusters == 0 || (status.clusters.len() == clusters && status.clusters.iter().all(|c| c.state == ClusterState::Available));
    status.phase == Some(KfDefPhase::Available) && status.observed_generation == k.metadata.generation && placed_ok
}

/// Creates the KfDef, then moves it to v1.3.0: the time each took to be Available (on every cluster).
async fn converge_and_move(api: &Api<KfDef>, kfdef: &KfDef, clusters: usize) -> (Duration, Duration) {
    let start = Instant::now();
    api.create(&PostParams::default(), kfdef).await.unwrap();
    wait(api, clusters, "Available").await;
    let converge = start.elapsed();
    let start = Instant::now();
    api.patch("kubeflow", &PatchParams::default(), &Patch::Merge(json!({"spec": {"version": "v1.3.0"}}))).await.unwrap();
    wait(api, clusters, "Available at v1.3.0").await;
    let moved = start.elapsed();
    api.delete("kubeflow", &DeleteParams::default()).await.unwrap();
    gone(api, "kubeflow").await;
    (converge, moved)
}

/// Creates the KfDef, then upgrades it to v1.3.0 by a KfUpgrade (with `waves` when given): the
/// time from the KfUpgrade's creation to its success.
async fn upgrade(api: &Api<KfDef>, kfdef: &KfDef, clusters: usize, waves: Option<serde_json::Value>) -> Duration {
    api.create(&PostParams::default(), kfdef).await.unwrap();
    wait(api, clusters, "Available").await;
    let upgrades: Api<KfUpgrade> = Api::namespaced(api.clone().into_client(), &kfdef.metadata.namespace.clone().unwrap());
    let mut spec = json!({"currentKfDef": {"name": "kubeflow"}, "newKfDef": {"name": "kubeflow", "version": "v1.3.0"}});
    if let Some(waves) = waves {
        spec["waves"] = waves;
    }
    let upgrade: KfUpgrade = serde_json::from_value(json!({"apiVersion": "kfupgrade.apps.kubeflow.org/v1alpha1", "kind": "KfUpgrade", "metadata": {"name": "bench"}, "spec": spec})).unwrap();
    let start = Instant::now();
    upgrades.create(&PostParams::default(), &upgrade).await.unwrap();
    let finished = await_condition(upgrades.clone(), "bench", |u: Option<&KfUpgrade>| {
        u.and_then(|u| u.status.as_ref()).and_then(|s| s.phase).is_some_and(|p| matches!(p, UpgradePhase::Succeeded | UpgradePhase::Failed | UpgradePhase::RolledBack))
    });
    let bound = Duration::from_secs(300);
    tokio::time::timeout(bound, finished).await.unwrap_or_else(|_| panic!("KfUpgrade not finished within {bound:?}")).unwrap();
    let took = start.elapsed();
    let done = upgrades.get("bench").await.unwrap();
    assert_eq!(done.status.as_ref().and_then(|s| s.phase), Some(UpgradePhase::Succeeded), "{:?}", done.status);
    upgrades.delete("bench", &DeleteParams::default()).await.unwrap();
    api.delete("kubeflow", &DeleteParams::default()).await.unwrap();
    gone(api, "kubeflow").await;
    took
}

async fn wait(api: &Api<KfDef>, clusters: usize, what: &str) {
    // A longer bound than the tests': spokes starting beside the hub slow everything down.
    let bound = Duration::from_secs(300);
    let condition = await_condition(api.clone(), "kubeflow", move |k: Option<&KfDef>| k.is_some_and(|k| available(k, clusters)));
    tokio::time::timeout(bound, condition).await.unwrap_or_else(|_| panic!("{what}: not within {bound:?}")).unwrap();
}

fn secs(d: Duration) -> String {
    format!("{:.1} s", d.as_secs_f64())
}

#[tokio::main]
async fn main() {
    // Measured on the operators' hand-written templates until the figures move to upstream's packages.
    kubeflow_e2e::still_on_built_in_templates();
    let sizes: Vec<usize> = std::env::var("BENCH_SPOKES").unwrap_or_else(|_| "1,2,3".into()).split(',').map(|n| n.trim().parse().expect("BENCH_SPOKES: a list of numbers")).collect();
    assert!(sizes.iter().all(|n| (1..=SPOKE_NAMES.len()).contains(n)), "BENCH_SPOKES: 1 to {} spokes", SPOKE_NAMES.len());
    let hub = client().await;
    install_crds(&hub).await;
    let deploy_all = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/all");
    kubectl(&["apply", "--server-side", "--force-conflicts", "-k", deploy_all.to_str().unwrap()]);
    let meta_kubeconfig = operator_kubeconfig(&hub, "meta-operator").await;
    let meta_env = [("KUBECONFIG", meta_kubeconfig.to_str().unwrap())];
    println!("KfDef of Kubeflow 1.2's Dex: converge, then spec.version v1.2.0 → v1.3.0; a KfUpgrade to v1.3.0 in waves (canary, rest)\n");
    println!("| spokes | converge on every spoke | version change on every spoke | wave upgrade | same run, one cluster: converge / change / KfUpgrade |");
    println!("| --- | --- | --- | --- | --- |");
    for n in sizes {
        let fleet = Fleet::start_for_meta_operator(&SPOKE_NAMES[..n]).await;
        let ns = TestNamespace::create(&hub, "bench-placement").await;
        let mut operators = Vec::new();
        for (index, member) in fleet.spokes.iter().enumerate() {
            let cluster = SpokeCluster::up(member.name.as_str(), index as u8 + 1).await;
            operators.push(cluster.serve(&member.server, &ns.name, ComponentKind::Dex).await.1);
            register(&hub, member, json!({"bench": "placement"}), &[&ns.name]).await;
        }
        let meta = OperatorProcess::on_bus("meta-operator", &fleet.hub, Identity::MetaOperator, &[], &meta_env);
        meta.wait_ready().await;
        for operator in &operators {
            operator.wait_ready().await;
        }
        let placed: Api<KfDef> = Api::namespaced(hub.clone(), &ns.name);
        let (converge, change) = converge_and_move(&placed, &kfdef(&ns.name, true), n).await;
        let waves = json!([{"name": "canary", "clusters": [SPOKE_NAMES[0]]}, {"name": "rest", "clusterSelector": {}}]);
        let waved = upgrade(&placed, &kfdef(&ns.name, true), n, Some(waves)).await;

        // Reference: the same KfDef on the hub itself, by a dex operator on the hub's own bus.
        let local_ns = TestNamespace::create(&hub, "bench-placement-local").await;
        let dex_kubeconfig = operator_kubeconfig(&hub, "dex-operator").await;
        let local_dex = OperatorProcess::on_bus("dex-operator", &fleet.hub, Identity::Component(ComponentKind::Dex), &[], &[("KUBECONFIG", dex_kubeconfig.to_str().unwrap())]);
        local_dex.wait_ready().await;
        let local: Api<KfDef> = Api::namespaced(hub.clone(), &local_ns.name);
        let (local_converge, local_change) = converge_and_move(&local, &kfdef(&local_ns.name, false), 0).await;
        let local_upgrade = upgrade(&local, &kfdef(&local_ns.name, false), 0, None).await;
        println!(
            "| {n} | {} ({:.1}×) | {} ({:.1}×) | {} ({:.1}×) | {} / {} / {} |",
            secs(converge),
            converge.as_secs_f64() / local_converge.as_secs_f64(),
            secs(change),
            change.as_secs_f64() / local_change.as_secs_f64(),
            secs(waved),
            waved.as_secs_f64() / local_upgrade.as_secs_f64(),
            secs(local_converge),
            secs(local_change),
            secs(local_upgrade)
        );
        let registrations: Api<FleetCluster> = Api::all(hub.clone());
        for member in &fleet.spokes {
            registrations.delete(member.name.as_str(), &DeleteParams::default()).await.unwrap();
        }
        drop((meta, operators, local_dex));
    }
}
