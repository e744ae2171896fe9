//! A KfDef placed on a fleet: the environment's cluster is the hub (its API server holds the
//! KfDef and the FleetCluster registrations, the meta-operator runs there on the hub's
//! nats-server), and two more control planes of the local environment are the spokes, each with
//! its own nats-server joined to the hub by a leaf connection, its fleet agent and a component
//! operator on its own API server.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use kubeflow_crds::bus::Identity;
use kubeflow_crds::component::ComponentKind;
use kubeflow_crds::fleet::{self, ClusterName};
use kubeflow_crds::fleet_cluster::{ClusterState, FleetCluster};
use kubeflow_crds::kfdef::KfDefPhase;
use kubeflow_crds::{Dex, KfDef};
use kubeflow_e2e::fleet::{Fleet, SPOKE_NAMES, SpokeCluster, register};
use kubeflow_e2e::*;
use operator_runtime::bus_security::public_key;
use serde_json::json;

/// Dex of Kubeflow 1.2, as the dex operator ships it.
const DEX_OF_KUBEFLOW_1_2: &str = "v2.22.0";

fn states(kfdef: &KfDef) -> BTreeMap<String, ClusterState> {
    kfdef.status.iter().flat_map(|s| s.clusters.iter().map(|c| (c.name.clone(), c.state))).collect()
}

async fn wait_kfdef(api: &Api<KfDef>, name: &str, what: &str, check: impl Fn(&KfDef) -> bool) -> KfDef {
    eventually(what, || async {
        let kfdef = api.get(name).await.map_err(|e| e.to_string())?;
        if check(&kfdef) { Ok(kfdef) } else { Err(serde_json::to_string(&kfdef.status).unwrap()) }
    })
    .await
}

/// One KfDef on the hub, placed by label on two registered clusters: each cluster installs it
/// from its own bus on its own API server, the hub installs nothing itself, and the KfDef's status
/// shows each cluster and sums them up. With the hub's server stopped a spoke still heals; a
/// silent spoke is shown stale; a cluster the placement drops, and then the deleted KfDef, are
/// uninstalled from the spokes.
#[tokio::test]
async fn a_kfdef_placed_on_two_clusters_converges_on_both_and_the_hub_sums_them_up() {
    // The spokes' control planes serve none of the kinds upstream's Dex needs (Istio's).
    still_on_built_in_templates();
    let hub = client().await;
    install_crds(&hub).await;
    // The meta-operator with its own account of deploy/all: its RBAC covers the registrations.
    let deploy_all = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/all");
    kubectl(&["apply", "--server-side", "--force-conflicts", "-k", deploy_all.to_str().unwrap()]);
    let meta_kubeconfig = operator_kubeconfig(&hub, "meta-operator").await;
    let mut fleet = Fleet::start_for_meta_operator(&SPOKE_NAMES[..2]).await;
    let ns = TestNamespace::create(&hub, "e2e-fleet").await;
    let mut spokes = Vec::new();
    for (index, member) in fleet.spokes.iter().enumerate() {
        let cluster = SpokeCluster::up(member.name.as_str(), index as u8 + 1).await;
        spokes.push(cluster.serve(&member.server, &ns.name, ComponentKind::Dex).await);
    }

    // Registrations: each cluster's key, its label, and the hub namespace allowed to place on it.
    let registrations: Api<FleetCluster> = Api::all(hub.clone());
    for member in &fleet.spokes {
        let registration = register(&hub, member, json!({"stage": "prod"}), &[&ns.name]).await;
        // The hub's leaf user for the cluster is the one its server runs with.
        assert_eq!(registration.leaf_user(), Ok((member.name.clone(), public_key(&member.seed).unwrap())));
    }
    let _meta = OperatorProcess::on_bus("meta-operator", &fleet.hub, Identity::MetaOperator, &[], &[("KUBECONFIG", meta_kubeconfig.to_str().unwrap())]);

    let kfdefs: Api<KfDef> = Api::namespaced(hub.clone(), &ns.name);
    let kfdef: KfDef = serde_json::from_value(json!({
        "apiVersion": "kfdef.apps.kubeflow.org/v1", "kind": "KfDef", "metadata": {"name": "kubeflow", "namespace": ns.name},
        "spec": {"version": "v1.2.0", "applications": [{"name": "dex", "kustomizeConfig": {"repoRef": {"name": "manifests", "path": "dex"}}}],
                 "placement": {"clusterSelector": {"matchLabels": {"stage": "prod"}}}},
    }))
    .unwrap();
    kfdefs.create(&PostParams::default(), &kfdef).await.unwrap();
    let both_available = |k: &KfDef| {
        k.status.as_ref().is_some_and(|s| s.phase == Some(KfDefPhase::Available) && s.observed_generation == k.metadata.generation)
            && states(k) == BTreeMap::from([("spoke-a".to_string(), ClusterState::Available), ("spoke-b".to_string(), ClusterState::Available)])
    };
    let converged = wait_kfdef(&kfdefs, "kubeflow", "the KfDef Available on both clusters", both_available).await;
    for entry in &converged.status.as_ref().unwrap().clusters {
        assert_eq!(entry.components["dex"].version.as_deref(), Some(DEX_OF_KUBEFLOW_1_2), "{entry:?}");
        assert!(entry.last_heard.is_some(), "{entry:?}");
    }

    // Each spoke made the Dex resource from its own bus: named after the KfDef, labelled with the
    // cluster, with no owner reference to a KfDef its API server does not have; upstream's Dex
    // Deployment runs there.
    for ((client, _), member) in spokes.iter().zip(&fleet.spokes) {
        let dex = Api::<Dex>::namespaced(client.clone(), &ns.name).get("kubeflow").await.unwrap();
        assert_eq!(dex.labels().get("fleet.kubeflow.org/cluster").map(String::as_str), Some(member.name.as_str()));
        assert!(dex.owner_references().is_empty(), "{:?}", dex.owner_references());
        assert_eq!(installed_versions(client, &ns.name, "kubeflow").await[&ComponentKind::Dex].as_deref(), Some(DEX_OF_KUBEFLOW_1_2));
    }
    // The hub installs nothing itself.
    assert!(Api::<Dex>::namespaced(hub.clone(), &ns.name).get_opt("kubeflow").await.unwrap().is_none(), "the hub made a Dex resource of its own");

    // The registrations show their clusters connected, with the operators heard from.
    for member in &fleet.spokes {
        let registration = eventually("the registration's status", || async {
            let r = registrations.get(member.name.as_str()).await.map_err(|e| e.to_string())?;
            let status = r.status.clone().unwrap_or_default();
            let connected = status.conditions.iter().any(|c| c.type_ == "Connected" && c.status == kubeflow_crds::ConditionStatus::True);
            if connected && status.operators.contains_key("dex-operator") { Ok(r) } else { Err(format!("{status:?}")) }
        })
        .await;
        assert!(registration.status.unwrap().last_heard.is_some());
    }

    // The hub's server down: spoke-a still heals what is deleted under it.
    let dex_deployment = |client: &Client| {
        let client = client.clone();
        async move {
            let deployments: Api<Deployment> = Api::all(client);
            let made = deployments.list(&ListParams::default().labels(component_framework::build::PART_OF_LABEL)).await.unwrap().items;
            let dex = made.into_iter().find(|d| d.name_any() == "dex").expect("the Dex Deployment on the spoke");
            (dex.namespace().unwrap(), dex.name_any())
        }
    };
    let (dex_namespace, dex_name) = dex_deployment(&spokes[0].0).await;
    fleet.hub.stop();
    let spoke_a_deployments: Api<Deployment> = Api::namespaced(spokes[0].0.clone(), &dex_namespace);
    delete_and_await_recreation(&spoke_a_deployments, &dex_name).await;
    fleet.hub.resume().await;
    // After the rejoin, the hub's status is right again: both clusters Available.
    wait_kfdef(&kfdefs, "kubeflow", "both clusters Available after the hub's restart", both_available).await;

    // A spoke down: the hub shows it stale (the state last reported), the KfDef Degraded.
    fleet.spokes[1].server.stop();
    let stale = wait_kfdef(&kfdefs, "kubeflow", "spoke-b shown stale", |k| states(k).get("spoke-b") == Some(&ClusterState::Stale)).await;
    assert_eq!(states(&stale)["spoke-a"], ClusterState::Available);
    assert_eq!(stale.status.as_ref().unwrap().phase, Some(KfDefPhase::Degraded));
    fleet.spokes[1].server.resume().await;
    wait_kfdef(&kfdefs, "kubeflow", "both clusters Available after spoke-b's return", both_available).await;

    // The placement narrows to spoke-b: spoke-a uninstalls, spoke-b keeps it.
    kfdefs.patch("kubeflow", &PatchParams::default(), &Patch::Merge(json!({"spec": {"placement": {"clusterSelector": null, "clusters": ["spoke-b"]}}}))).await.unwrap();
    let narrowed = wait_kfdef(&kfdefs, "kubeflow", "placed on spoke-b only", |k| {
        states(k) == BTreeMap::from([("spoke-b".to_string(), ClusterState::Available)]) && k.status.as_ref().is_some_and(|s| s.observed_generation == k.metadata.generation)
    })
    .await;
    assert_eq!(narrowed.status.unwrap().phase, Some(KfDefPhase::Available));
    gone(&Api::<Dex>::namespaced(spokes[0].0.clone(), &ns.name), "kubeflow").await;
    let hub_a = fleet.hub_bucket(fleet::desired_bucket(&"spoke-a".parse::<ClusterName>().unwrap())).await;
    assert!(hub_a.get(&kubeflow_crds::bus::key(ComponentKind::Dex, &ns.name, "kubeflow")).await.unwrap().is_none(), "spoke-a's desired state still holds the KfDef");
    assert!(Api::<Dex>::namespaced(spokes[1].0.clone(), &ns.name).get_opt("kubeflow").await.unwrap().is_some(), "spoke-b lost its Dex");

    // Deleted on the hub: uninstalled from spoke-b.
    kfdefs.delete("kubeflow", &DeleteParams::default()).await.unwrap();
    gone(&kfdefs, "kubeflow").await;
    gone(&Api::<Dex>::namespaced(spokes[1].0.clone(), &ns.name), "kubeflow").await;
    for member in &fleet.spokes {
        registrations.delete(member.name.as_str(), &DeleteParams::default()).await.unwrap();
    }
}
