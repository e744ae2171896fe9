//! A KfUpgrade of a KfDef placed on two clusters, in waves: the environment's cluster is the hub
//! (KfDef, registrations, KfUpgrades and the meta-operator), two more control planes are the
//! spokes, each with its own nats-server joined to the hub and Katib's operator of the upgrade
//! tests (`katib-operator-test-releases`: v0.13.0-unready can never become ready), which each
//! spoke announces to the hub through its agent.

use std::collections::BTreeMap;

use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use kubeflow_crds::ConditionStatus;
use kubeflow_crds::bus::Identity;
use kubeflow_crds::component::ComponentKind;
use kubeflow_crds::fleet_cluster::{ClusterState, FleetCluster};
use kubeflow_crds::kfdef::KfDefPhase;
use kubeflow_crds::kfupgrade::{ClusterMove, ClusterUpgradePhase, KfUpgrade, KfUpgradeStatus, UpgradePhase, WavePhase};
use kubeflow_crds::{KfDef, Katib};
use kubeflow_e2e::fleet::{Fleet, SPOKE_NAMES, SpokeCluster, register};
use kubeflow_e2e::*;
use serde_json::json;

/// Katib of Kubeflow 1.2, and the versions the upgrades move it to.
const KATIB_1_2: &str = "v0.10.0";
const KATIB_NEXT: &str = "v0.11.0";
const KATIB_UNREADY: &str = "v0.13.0-unready";

/// Katib's version in each cluster's entry of the KfDef's status, and whether it is Ready there.
fn katib_by_cluster(kfdef: &KfDef) -> BTreeMap<String, (ClusterState, Option<String>, bool)> {
    let entries = kfdef.status.iter().flat_map(|s| s.clusters.iter());
    entries.map(|c| (c.name.clone(), (c.state, c.components.get("katib").and_then(|k| k.version.clone()), c.components.get("katib").is_some_and(|k| k.ready)))).collect()
}

fn available_at(kfdef: &KfDef, versions: [&str; 2]) -> bool {
    let want: BTreeMap<String, (ClusterState, Option<String>, bool)> =
        SPOKE_NAMES[..2].iter().zip(versions).map(|(c, v)| (c.to_string(), (ClusterState::Available, Some(v.to_string()), true))).collect();
    katib_by_cluster(kfdef) == want && kfdef.status.as_ref().is_some_and(|s| s.phase == Some(KfDefPhase::Available) && s.observed_generation == kfdef.metadata.generation)
}

async fn wait_kfdef(api: &Api<KfDef>, what: &str, check: impl Fn(&KfDef) -> bool) -> KfDef {
    // A Katib install (or a move) on a spoke takes a few health checks: three times the usual bound.
    for _ in 0..2 {
        if let Ok(kfdef) = tokio::time::timeout(WAIT, async {
            loop {
                if let Ok(kfdef) = api.get("kubeflow").await {
                    if check(&kfdef) {
                        return kfdef;
                    }
                }
                tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            }
        })
        .await
        {
            return kfdef;
        }
    }
    eventually(what, || async {
        let kfdef = api.get("kubeflow").await.map_err(|e| e.to_string())?;
        if check(&kfdef) { Ok(kfdef) } else { Err(serde_json::to_string(&kfdef.status).unwrap()) }
    })
    .await
}

async fn upgrade_phase(api: &Api<KfUpgrade>, name: &str, phase: UpgradePhase) -> KfUpgradeStatus {
    let status = |u: &KfUpgrade| u.status.clone().unwrap_or_default();
    for _ in 0..3 {
        let reached = tokio::time::timeout(WAIT, async {
            loop {
                let u = api.get(name).await.unwrap();
                if status(&u).phase == Some(phase) {
                    return status(&u);
                }
                tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            }
        })
        .await;
        if let Ok(reached) = reached {
            return reached;
        }
    }
    panic!("KfUpgrade {name} never reached {phase:?}: {}", serde_json::to_string_pretty(&api.get(name).await.unwrap().status).unwrap());
}

fn upgrade(name: &str, version: &str, manual_rest: bool, health_timeout_seconds: i64) -> KfUpgrade {
    let rest = if manual_rest { json!({"name": "rest", "clusterSelector": {}, "approval": "Manual"}) } else { json!({"name": "rest", "clusterSelector": {}}) };
    serde_json::from_value(json!({
        "apiVersion": "kfupgrade.apps.kubeflow.org/v1alpha1", "kind": "KfUpgrade", "metadata": {"name": name},
        "spec": {
            "currentKfDef": {"name": "kubeflow"}, "newKfDef": {"name": "kubeflow"},
            "components": [{"component": "katib", "version": version}], "onlyListed": true,
            "healthTimeoutSeconds": health_timeout_seconds,
            "waves": [{"name": "canary", "clusterSelector": {"matchLabels": {"ring": "canary"}}}, rest],
        },
    }))
    .unwrap()
}

fn cluster_phases(status: &KfUpgradeStatus) -> Vec<(String, WavePhase, Vec<(String, ClusterUpgradePhase)>)> {
    status.waves.iter().map(|w| (w.name.clone(), w.phase, w.clusters.iter().map(|c| (c.name.clone(), c.phase)).collect())).collect()
}

/// A KfDef placed on two clusters moves one wave of clusters at a time: the canary first, then,
/// once approved, the rest; each cluster's moves are shown before it moves. An upgrade whose
/// canary never becomes ready stops before the second cluster, which is never touched, and the
/// canary alone goes back.
#[tokio::test]
async fn a_fleet_upgrade_moves_the_canary_first_and_a_failing_canary_stops_it_before_the_second_cluster() {
    let hub = client().await;
    install_crds(&hub).await;
    let deploy_all = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/all");
    kubectl(&["apply", "--server-side", "--force-conflicts", "-k", deploy_all.to_str().unwrap()]);
    let meta_kubeconfig = operator_kubeconfig(&hub, "meta-operator").await;
    let fleet = Fleet::start_for_meta_operator(&SPOKE_NAMES[..2]).await;
    let ns = TestNamespace::create(&hub, "e2e-waves").await;
    let mut spokes = Vec::new();
    for (index, member) in fleet.spokes.iter().enumerate() {
        let cluster = SpokeCluster::up(member.name.as_str(), index as u8 + 1).await;
        spokes.push(cluster.serve_binary(&member.server, &ns.name, ComponentKind::Katib, "katib-operator-test-releases").await);
    }
    let registrations: Api<FleetCluster> = Api::all(hub.clone());
    for (member, ring) in fleet.spokes.iter().zip(["canary", "main"]) {
        register(&hub, member, json!({"stage": "prod", "ring": ring}), &[&ns.name]).await;
    }
    let _meta = OperatorProcess::on_bus("meta-operator", &fleet.hub, Identity::MetaOperator, &[], &[("KUBECONFIG", meta_kubeconfig.to_str().unwrap())]);

    let kfdefs: Api<KfDef> = Api::namespaced(hub.clone(), &ns.name);
    let kfdef: KfDef = serde_json::from_value(json!({
        "apiVersion": "kfdef.apps.kubeflow.org/v1", "kind": "KfDef", "metadata": {"name": "kubeflow", "namespace": ns.name},
        "spec": {"version": "v1.2.0", "applications": [{"name": "katib-controller"}], "placement": {"clusterSelector": {"matchLabels": {"stage": "prod"}}}},
    }))
    .unwrap();
    kfdefs.create(&PostParams::default(), &kfdef).await.unwrap();
    wait_kfdef(&kfdefs, "Katib v0.10.0 Available on both clusters", |k| available_at(k, [KATIB_1_2, KATIB_1_2])).await;
    let katib_on = |index: usize| Api::<Katib>::namespaced(spokes[index].0.clone(), &ns.name);

    // Deleted and made again at once: each spoke's Katib resource is still being uninstalled when
    // the new desired state arrives, and is made again once it is gone.
    kfdefs.delete("kubeflow", &DeleteParams::default()).await.unwrap();
    gone(&kfdefs, "kubeflow").await;
    kfdefs.create(&PostParams::default(), &kfdef).await.unwrap();
    wait_kfdef(&kfdefs, "Katib v0.10.0 Available on both clusters again", |k| available_at(k, [KATIB_1_2, KATIB_1_2])).await;
    let uid = kfdefs.get("kubeflow").await.unwrap().uid().unwrap();
    for index in 0..2 {
        eventually(&format!("spoke {index}'s Katib made from the new KfDef"), || async {
            let katib = katib_on(index).get_opt("kubeflow").await.map_err(|e| e.to_string())?.ok_or("no Katib resource")?;
            let made = katib.annotations().get("kfdef.apps.kubeflow.org/uid") == Some(&uid) && katib.metadata.deletion_timestamp.is_none();
            if made { Ok(()) } else { Err(format!("{:?}", katib.metadata)) }
        })
        .await;
    }
    wait_kfdef(&kfdefs, "Katib v0.10.0 Available on both clusters again", |k| available_at(k, [KATIB_1_2, KATIB_1_2])).await;
    let upgrades: Api<KfUpgrade> = Api::namespaced(hub.clone(), &ns.name);

    // The canary moves alone; the second wave waits for its approval with its plan shown.
    upgrades.create(&PostParams::default(), &upgrade("move", KATIB_NEXT, true, 120)).await.unwrap();
    let waiting = upgrade_phase(&upgrades, "move", UpgradePhase::AwaitingApproval).await;
    assert_eq!(
        cluster_phases(&waiting),
        [
            ("canary".to_string(), WavePhase::Succeeded, vec![("spoke-a".to_string(), ClusterUpgradePhase::Succeeded)]),
            ("rest".to_string(), WavePhase::AwaitingApproval, vec![("spoke-b".to_string(), ClusterUpgradePhase::Pending)]),
        ]
    );
    assert_eq!(waiting.waves[1].clusters[0].moves, [ClusterMove { component: ComponentKind::Katib, from_version: KATIB_1_2.into(), to_version: KATIB_NEXT.into() }]);
    // Each cluster's plan, object by object, as its own Katib operator planned it before the
    // canary moved: v0.11.0's images change Katib's workloads.
    for (wave, cluster) in [(0, "spoke-a"), (1, "spoke-b")] {
        let planned = &waiting.waves[wave].clusters[0];
        assert_eq!(planned.name, cluster);
        let steps: Vec<_> = planned.plan.iter().map(|p| (p.component, p.from_version.as_str(), p.to_version.as_str())).collect();
        assert_eq!(steps, [(ComponentKind::Katib, KATIB_1_2, KATIB_NEXT)], "{cluster}: {:?}", planned.plan);
        let katib = &planned.plan[0].changes;
        assert!(katib.failed.is_empty() && katib.change.iter().any(|o| o.starts_with("Deployment ")), "{cluster}: {katib:?}");
    }
    let planned = waiting.conditions.iter().find(|c| c.type_ == "Planned").unwrap();
    assert!(planned.message.contains("cluster spoke-a: katib") && planned.message.contains("cluster spoke-b: katib"), "{}", planned.message);
    let halfway = kfdefs.get("kubeflow").await.unwrap();
    assert!(!halfway.annotations().contains_key("kfupgrade.apps.kubeflow.org/cluster-previews"), "the previews were left on the KfDef");
    assert!(available_at(&halfway, [KATIB_NEXT, KATIB_1_2]), "{:?}", katib_by_cluster(&halfway));
    assert_eq!(halfway.spec.version.as_deref(), Some("v1.2.0"), "spec.version moved before every wave was done");
    assert_eq!(installed_versions(&spokes[1].0, &ns.name, "kubeflow").await[&ComponentKind::Katib].as_deref(), Some(KATIB_1_2));
    // The waves cannot change once the upgrade exists, and an approval cannot be taken back.
    let rewaved = upgrades.patch("move", &PatchParams::default(), &Patch::Merge(json!({"spec": {"waves": [{"name": "all", "clusterSelector": {}}]}}))).await.unwrap_err();
    assert!(rewaved.to_string().contains("spec is immutable once the upgrade exists"), "{rewaved}");
    upgrades.patch("move", &PatchParams::default(), &Patch::Merge(json!({"spec": {"approvedWaves": ["rest"]}}))).await.unwrap();
    let withdrawn = upgrades.patch("move", &PatchParams::default(), &Patch::Merge(json!({"spec": {"approvedWaves": []}}))).await.unwrap_err();
    assert!(withdrawn.to_string().contains("spec.approvedWaves cannot lose a wave"), "{withdrawn}");
    upgrade_phase(&upgrades, "move", UpgradePhase::Succeeded).await;
    wait_kfdef(&kfdefs, "Katib v0.11.0 on both clusters", |k| available_at(k, [KATIB_NEXT, KATIB_NEXT])).await;
    for index in 0..2 {
        assert_eq!(installed_versions(&spokes[index].0, &ns.name, "kubeflow").await[&ComponentKind::Katib].as_deref(), Some(KATIB_NEXT));
    }

    // A canary that never becomes ready: the rollout stops before spoke-b, whose Katib resource
    // is never written again (its generation stays), and spoke-a alone goes back.
    let spoke_b_generation = katib_on(1).get("kubeflow").await.unwrap().metadata.generation;
    upgrades.create(&PostParams::default(), &upgrade("doomed", KATIB_UNREADY, false, 10)).await.unwrap();
    let failed = upgrade_phase(&upgrades, "doomed", UpgradePhase::Failed).await;
    assert_eq!(
        cluster_phases(&failed),
        [
            ("canary".to_string(), WavePhase::Failed, vec![("spoke-a".to_string(), ClusterUpgradePhase::RolledBack)]),
            ("rest".to_string(), WavePhase::Pending, vec![("spoke-b".to_string(), ClusterUpgradePhase::Pending)]),
        ]
    );
    let stopped = failed.conditions.iter().find(|c| c.type_ == "Succeeded").unwrap();
    assert_eq!((stopped.status, stopped.reason.as_str()), (ConditionStatus::False, "WaveFailed"));
    assert!(stopped.message.contains("spoke-a (RolledBack)") && stopped.message.contains("not started: wave rest"), "{}", stopped.message);
    assert_eq!(katib_on(1).get("kubeflow").await.unwrap().metadata.generation, spoke_b_generation, "spoke-b's Katib was written");
    wait_kfdef(&kfdefs, "spoke-a back at v0.11.0", |k| available_at(k, [KATIB_NEXT, KATIB_NEXT])).await;
    assert!(!kfdefs.get("kubeflow").await.unwrap().annotations().contains_key("kfupgrade.apps.kubeflow.org/in-progress"), "the KfDef is still held");

    kfdefs.delete("kubeflow", &DeleteParams::default()).await.unwrap();
    gone(&kfdefs, "kubeflow").await;
    for index in 0..2 {
        gone(&katib_on(index), "kubeflow").await;
    }
    for member in &fleet.spokes {
        registrations.delete(member.name.as_str(), &DeleteParams::default()).await.unwrap();
    }
}
