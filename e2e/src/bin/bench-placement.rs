//! Benchmark of a KfDef placed on a fleet (prints figures, asserts nothing). `make bench-placement`.
//!
//! The environment's cluster is the hub (its meta-operator on a hub nats-server); for each fleet
//! size in `BENCH_SPOKES` (default `1,2,3`) that many spoke control planes of the local
//! environment, each with its nats-server, fleet agent and dex operator.
//! * Converge: a KfDef of Kubeflow 1.2's Dex placed by label on every spoke → Available on all.
//! * Version change: `spec.version` v1.2.0 → v1.3.0 → Available on all at Dex v2.24.0 (every
//!   cluster at once: a change of spec.version, not a KfUpgrade in waves).
//! * Reference, same run: the same KfDef unplaced, converged by a dex operator on the hub itself,
//!   and the same version change there.
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
    let sizes: Vec<usize> = std::env::var("BENCH_SPOKES").unwrap_or_else(|_| "1,2,3".into()).split(',').map(|n| n.trim().parse().expect("BENCH_SPOKES: a list of numbers")).collect();
    assert!(sizes.iter().all(|n| (1..=SPOKE_NAMES.len()).contains(n)), "BENCH_SPOKES: 1 to {} spokes", SPOKE_NAMES.len());
    let hub = client().await;
    install_crds(&hub).await;
    let deploy_all = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/all");
    kubectl(&["apply", "--server-side", "--force-conflicts", "-k", deploy_all.to_str().unwrap()]);
    let meta_kubeconfig = operator_kubeconfig(&hub, "meta-operator").await;
    let meta_env = [("KUBECONFIG", meta_kubeconfig.to_str().unwrap())];
    println!("KfDef of Kubeflow 1.2's Dex: converge, then spec.version v1.2.0 → v1.3.0\n");
    println!("| spokes | converge on every spoke | version change on every spoke | same run, one cluster: converge / change |");
    println!("| --- | --- | --- | --- |");
    for n in sizes {
        let fleet = Fleet::start(&SPOKE_NAMES[..n]).await;
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

        // Reference: the same KfDef on the hub itself, by a dex operator on the hub's own bus.
        let local_ns = TestNamespace::create(&hub, "bench-placement-local").await;
        let dex_kubeconfig = operator_kubeconfig(&hub, "dex-operator").await;
        let local_dex = OperatorProcess::on_bus("dex-operator", &fleet.hub, Identity::Component(ComponentKind::Dex), &[], &[("KUBECONFIG", dex_kubeconfig.to_str().unwrap())]);
        local_dex.wait_ready().await;
        let local: Api<KfDef> = Api::namespaced(hub.clone(), &local_ns.name);
        let (local_converge, local_change) = converge_and_move(&local, &kfdef(&local_ns.name, false), 0).await;
        println!(
            "| {n} | {} ({:.1}×) | {} ({:.1}×) | {} / {} |",
            secs(converge),
            converge.as_secs_f64() / local_converge.as_secs_f64(),
            secs(change),
            change.as_secs_f64() / local_change.as_secs_f64(),
            secs(local_converge),
            secs(local_change)
        );
        let registrations: Api<FleetCluster> = Api::all(hub.clone());
        for member in &fleet.spokes {
            registrations.delete(member.name.as_str(), &DeleteParams::default()).await.unwrap();
        }
        drop((meta, operators, local_dex));
    }
}
