//! KfUpgrade, executed by the meta-operator over NATS: ordered, health-gated, rolled back on
//! failure, refused when unsafe, resumed after a restart. Katib's operator is
//! `katib-operator-test-releases`, which adds Katib v0.12.0 (reachable only through v0.11.0) and
//! v0.13.0-unready (its controller can never be scheduled); the meta-operator learns them from its
//! heartbeat.

use std::collections::BTreeMap;
use std::time::Duration;

use component_framework::api::component::ComponentKind;
use component_framework::api::{Katib, KfDef, KfUpgrade};
use kube::api::{ApiResource, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use kubeflow_crds::ConditionStatus;
use kubeflow_crds::kfdef::KfDefPhase;
use kubeflow_crds::kfupgrade::{StepFailure, StepPhase, UpgradePhase};
use kubeflow_e2e::*;
use serde_json::{Value, json};

static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
const PINS: &str = "kfdef.apps.kubeflow.org/component-versions";
/// Kubeflow 1.3's component versions.
const V13: [(&str, &str); 5] = [("dex", "v2.24.0"), ("istio", "1.9.6"), ("katib", "v0.11.0"), ("kfserving", "v0.5.1"), ("pipelines", "1.5.0")];
/// How long a "nothing moves" check watches.
const STAYS: Duration = Duration::from_secs(5);
const TEST_RELEASES: &[(ComponentKind, &str)] = &[(ComponentKind::Katib, "katib-operator-test-releases")];

fn kfdef(version: &str) -> KfDef {
    let apps = ["istio-install", "dex", "kfserving-install", "katib-controller", "api-service"];
    serde_json::from_value(json!({
        "apiVersion": "kfdef.apps.kubeflow.org/v1", "kind": "KfDef", "metadata": {"name": "kubeflow"},
        "spec": {"version": version, "applications": apps.iter().map(|a| json!({"name": a})).collect::<Vec<_>>()},
    }))
    .unwrap()
}

fn upgrade(name: &str, spec: Value) -> KfUpgrade {
    serde_json::from_value(json!({"apiVersion": "kfupgrade.apps.kubeflow.org/v1alpha1", "kind": "KfUpgrade", "metadata": {"name": name}, "spec": spec})).unwrap()
}

async fn kfdef_available(api: &Api<KfDef>) -> KfDef {
    eventually("KfDef Available", || async {
        let k = api.get("kubeflow").await.map_err(|e| e.to_string())?;
        let s = k.status.clone().unwrap_or_default();
        if s.phase == Some(KfDefPhase::Available) && s.observed_generation == k.metadata.generation { Ok(k) } else { Err(format!("{:?}", s.phase)) }
    })
    .await
}

/// Waits (up to 4× the usual bound, upgrades take several health gates) for `phase`.
async fn upgrade_phase(api: &Api<KfUpgrade>, name: &str, phase: UpgradePhase) -> KfUpgrade {
    for _ in 0..3 {
        if let Ok(Some(u)) = api.get_opt(name).await {
            if u.status.as_ref().and_then(|s| s.phase) == Some(phase) {
                return u;
            }
        }
        let r = tokio::time::timeout(WAIT, async {
            loop {
                let u = api.get(name).await.unwrap();
                if u.status.as_ref().and_then(|s| s.phase) == Some(phase) {
                    return u;
                }
                tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            }
        })
        .await;
        if let Ok(u) = r {
            return u;
        }
    }
    let u = api.get(name).await.unwrap();
    panic!("KfUpgrade {name} never reached {phase:?}: {:?}", u.status);
}

fn condition(k: &KfDef, type_: &str) -> kubeflow_crds::Condition {
    k.status.as_ref().and_then(|s| s.conditions.iter().find(|c| c.type_ == type_)).cloned().unwrap_or_else(|| panic!("no {type_} condition: {:?}", k.status))
}

fn versions(k: &KfDef) -> Vec<(String, Option<String>)> {
    k.status.as_ref().unwrap().components.iter().map(|(c, s)| (c.clone(), s.version.clone())).collect()
}

async fn delete_kfdef(api: &Api<KfDef>) {
    api.delete("kubeflow", &DeleteParams::default()).await.unwrap();
    gone(&api, "kubeflow").await;
}

#[tokio::test]
async fn release_upgrade_succeeds_in_order_keeps_user_resources_survives_a_restart_and_admits_one_of_two_twins() {
    let _serial = SERIAL.lock().await;
    // Kubeflow 1.3.0's releases and the test releases have no archive here.
    still_on_built_in_templates();
    let client: Client = client().await;
    let mut stack = OperatorStack::start_with_binaries(&client, &[], TEST_RELEASES).await;
    let ns = TestNamespace::create(&client, "e2e-upgrade").await;
    let kfdefs: Api<KfDef> = Api::namespaced(client.clone(), &ns.name);
    kfdefs.create(&PostParams::default(), &kfdef("v1.2.0")).await.unwrap();
    kfdef_available(&kfdefs).await;

    // A user's Katib experiment, created before the upgrade.
    let experiments: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns.name, &ApiResource::from_gvk(&kube::core::GroupVersionKind::gvk("kubeflow.org", "v1beta1", "Experiment")));
    let experiment: DynamicObject = serde_json::from_value(json!({"apiVersion": "kubeflow.org/v1beta1", "kind": "Experiment", "metadata": {"name": "mnist"}, "spec": {"maxTrialCount": 3}})).unwrap();
    experiments.create(&PostParams::default(), &experiment).await.unwrap();

    let upgrades: Api<KfUpgrade> = Api::namespaced(client.clone(), &ns.name);
    // Two identical upgrades created at the same moment: exactly one moves the KfDef.
    let spec = json!({"currentKfDef": {"name": "kubeflow", "version": "v1.2.0"}, "newKfDef": {"name": "kubeflow", "version": "v1.3.0"}});
    let (first, twin) = (upgrade("to-1-3", spec.clone()), upgrade("to-1-3-twin", spec));
    let post = PostParams::default();
    let (a, b) = tokio::join!(upgrades.create(&post, &first), upgrades.create(&post, &twin));
    (a.unwrap(), b.unwrap());
    let (winner, loser) = eventually("one of the twin upgrades refused", || async {
        for (this, other) in [("to-1-3", "to-1-3-twin"), ("to-1-3-twin", "to-1-3")] {
            let u = upgrades.get(other).await.map_err(|e| e.to_string())?;
            if u.status.as_ref().and_then(|s| s.phase) == Some(UpgradePhase::Failed) {
                return Ok((this, u));
            }
        }
        Err("neither refused yet".to_string())
    })
    .await;
    let msg = loser.status.unwrap().conditions.iter().find(|c| c.type_ == "Validated").unwrap().message.clone();
    assert!(msg.contains(&format!("KfUpgrade {winner} is already upgrading")), "{msg}");
    // Restart the meta-operator once the first step is done.
    eventually("first step done", || async {
        let u = upgrades.get(winner).await.map_err(|e| e.to_string())?;
        let steps = u.status.map(|s| s.steps).unwrap_or_default();
        if steps.first().is_some_and(|s| s.phase == StepPhase::Succeeded) { Ok(()) } else { Err(format!("{steps:?}")) }
    })
    .await;
    stack.meta.kill();
    stack.restart_meta();
    let done = upgrade_phase(&upgrades, winner, UpgradePhase::Succeeded).await;
    let status = done.status.unwrap();
    let order: Vec<ComponentKind> = status.steps.iter().map(|s| s.component).collect();
    assert_eq!(order, [ComponentKind::Istio, ComponentKind::Dex, ComponentKind::KFServing, ComponentKind::Katib, ComponentKind::Pipelines]);
    // Each step was planned before anything moved: Istio's gateway Deployment, whose selector
    // changes between the releases, is named for replacement (a dry run would refuse it in place).
    assert_eq!(status.plan.iter().map(|p| p.component).collect::<Vec<_>>(), order);
    let istio = &status.plan[0].changes;
    let replaced = format!("Deployment {}/istio-ingressgateway: replaced (spec.selector cannot change in place; the old pods serve until the new Deployment is Available)", ns.name);
    assert!(istio.change.contains(&replaced) && istio.failed.is_empty(), "{istio:#?}");
    for step in &status.steps {
        assert_eq!(step.phase, StepPhase::Succeeded);
        assert!(step.start_time.is_some() && step.end_time.is_some());
    }
    // The upgrade leaves spec.version to the user: the components stay pinned and status says so.
    let k = kfdef_available(&kfdefs).await;
    assert_eq!(k.spec.version.as_deref(), Some("v1.2.0"), "a KfUpgrade wrote spec.version");
    let annotations = k.metadata.annotations.clone().unwrap_or_default();
    let pins: BTreeMap<String, String> = serde_json::from_str(&annotations[PINS]).unwrap();
    assert_eq!(pins, BTreeMap::from(V13.map(|(c, v)| (c.to_string(), v.to_string()))));
    assert_eq!(annotations.get("kfdef.apps.kubeflow.org/pinned-by").map(String::as_str), Some(winner));
    assert!(!annotations.contains_key("kfupgrade.apps.kubeflow.org/in-progress"), "the finished upgrade still holds the KfDef: {annotations:?}");
    let pinned = condition(&k, "VersionPinned");
    assert_eq!(pinned.status, ConditionStatus::True);
    assert!(pinned.message.contains(&format!("KfUpgrade {winner}")) && pinned.message.contains("set spec.version to v1.3.x"), "{}", pinned.message);
    assert_eq!(versions(&k), V13.map(|(c, v)| (c.to_string(), Some(v.to_string()))).into_iter().collect::<Vec<_>>());
    assert!(experiments.get_opt("mnist").await.unwrap().is_some(), "the user's Experiment was lost");

    // A GitOps tool applies the original v1.2.0 KfDef again (server-side, forcing conflicts):
    // nothing moves back, and status still names the mismatch.
    let mut original = serde_json::to_value(kfdef("v1.2.0")).unwrap();
    original["metadata"]["namespace"] = json!(ns.name);
    kfdefs.patch("kubeflow", &PatchParams::apply("gitops").force(), &Patch::Apply(&original)).await.unwrap();
    let katibs: Api<Katib> = Api::namespaced(client.clone(), &ns.name);
    holds_for(&katibs, "kubeflow", STAYS, |katib: &Katib| if katib.spec.core.version == "v0.11.0" { Ok(()) } else { Err(format!("Katib moved to {}", katib.spec.core.version)) }).await;
    let k = kfdef_available(&kfdefs).await;
    assert_eq!(condition(&k, "VersionPinned").status, ConditionStatus::True);
    assert_eq!(versions(&k), V13.map(|(c, v)| (c.to_string(), Some(v.to_string()))).into_iter().collect::<Vec<_>>());

    // The user sets spec.version to what the components run: the meta-operator drops the pins.
    kfdefs.patch("kubeflow", &PatchParams::default(), &Patch::Merge(json!({"spec": {"version": "v1.3.0"}}))).await.unwrap();
    eventually("pins removed once spec.version names them", || async {
        let k = kfdefs.get("kubeflow").await.map_err(|e| e.to_string())?;
        let annotations = k.metadata.annotations.clone().unwrap_or_default();
        let pinned = k.status.as_ref().and_then(|s| s.conditions.iter().find(|c| c.type_ == "VersionPinned")).map(|c| c.status.clone());
        if !annotations.contains_key(PINS) && pinned == Some(ConditionStatus::False) { Ok(()) } else { Err(format!("{annotations:?}, VersionPinned {pinned:?}")) }
    })
    .await;
    assert_eq!(katibs.get("kubeflow").await.unwrap().spec.core.version, "v0.11.0");

    // A plain downgrade edit is refused like a KfUpgrade would be: nothing moves.
    kfdefs.patch("kubeflow", &PatchParams::default(), &Patch::Merge(json!({"spec": {"version": "v1.2.0"}}))).await.unwrap();
    let refused = eventually("the downgrade edit refused", || async {
        let k = kfdefs.get("kubeflow").await.map_err(|e| e.to_string())?;
        let degraded = k.status.as_ref().and_then(|s| s.conditions.iter().find(|c| c.type_ == "Degraded")).cloned();
        match degraded {
            Some(c) if c.reason == "VersionChangeRefused" && c.observed_generation == k.metadata.generation => Ok(c),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    assert!(refused.message.contains("istio: 1.9.6 → 1.3.1 is a downgrade") && refused.message.contains("use a KfUpgrade"), "{}", refused.message);
    holds_for(&katibs, "kubeflow", STAYS, |katib: &Katib| if katib.spec.core.version == "v0.11.0" { Ok(()) } else { Err(format!("Katib moved to {}", katib.spec.core.version)) }).await;
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(client.clone(), &ns.name);
    let warnings = events.list(&Default::default()).await.unwrap().items;
    assert!(warnings.iter().any(|e| e.reason.as_deref() == Some("VersionChangeRefused") && e.type_.as_deref() == Some("Warning")), "no VersionChangeRefused Warning Event");
    kfdefs.patch("kubeflow", &PatchParams::default(), &Patch::Merge(json!({"spec": {"version": "v1.3.0"}}))).await.unwrap();
    kfdef_available(&kfdefs).await;

    // Refused: a downgrade by KfUpgrade.
    upgrades.create(&PostParams::default(), &upgrade("back", json!({"currentKfDef": {"name": "kubeflow"}, "newKfDef": {"name": "kubeflow", "version": "v1.2.0"}}))).await.unwrap();
    let refused = upgrade_phase(&upgrades, "back", UpgradePhase::Failed).await;
    let msg = refused.status.clone().unwrap().conditions.iter().find(|c| c.type_ == "Validated").unwrap().message.clone();
    assert!(msg.contains("downgrade") && msg.contains("istio"), "{msg}");
    assert_eq!(kfdefs.get("kubeflow").await.unwrap().spec.version.as_deref(), Some("v1.3.0"), "a refused upgrade changed the KfDef");
    delete_kfdef(&kfdefs).await;
}

#[tokio::test]
async fn a_step_that_never_becomes_healthy_rolls_everything_back_and_concurrent_or_skipping_upgrades_are_refused() {
    let _serial = SERIAL.lock().await;
    // Kubeflow 1.3.0's releases and the test releases have no archive here.
    still_on_built_in_templates();
    let client: Client = client().await;
    let _stack = OperatorStack::start_with_binaries(&client, &[], TEST_RELEASES).await;
    let ns = TestNamespace::create(&client, "e2e-rollback").await;
    let kfdefs: Api<KfDef> = Api::namespaced(client.clone(), &ns.name);
    kfdefs.create(&PostParams::default(), &kfdef("v1.2.0")).await.unwrap();
    let before = versions(&kfdef_available(&kfdefs).await);
    let upgrades: Api<KfUpgrade> = Api::namespaced(client.clone(), &ns.name);

    // A skip: Katib v0.12.0 can only be reached from v0.11.0.
    upgrades.create(&PostParams::default(), &upgrade("skip", json!({"currentKfDef": {"name": "kubeflow"}, "newKfDef": {"name": "kubeflow"}, "components": [{"component": "katib", "version": "v0.12.0"}]}))).await.unwrap();
    let skip = upgrade_phase(&upgrades, "skip", UpgradePhase::Failed).await;
    let msg = skip.status.clone().unwrap().conditions.iter().find(|c| c.type_ == "Validated").unwrap().message.clone();
    assert!(msg.contains("katib") && msg.contains("v0.10.0 → v0.11.0 → v0.12.0"), "{msg}");

    // Katib's new version can never become healthy: everything upgraded before it goes back.
    let spec = json!({
        "currentKfDef": {"name": "kubeflow"}, "newKfDef": {"name": "kubeflow", "version": "v1.3.0"},
        "components": [{"component": "katib", "version": "v0.13.0-unready"}], "healthTimeoutSeconds": 10,
    });
    upgrades.create(&PostParams::default(), &upgrade("doomed", spec)).await.unwrap();
    upgrade_phase(&upgrades, "doomed", UpgradePhase::Upgrading).await;
    // A second upgrade of the same KfDef while this one runs is refused.
    upgrades.create(&PostParams::default(), &upgrade("second", json!({"currentKfDef": {"name": "kubeflow"}, "newKfDef": {"name": "kubeflow", "version": "v1.3.0"}}))).await.unwrap();
    let second = upgrade_phase(&upgrades, "second", UpgradePhase::Failed).await;
    let msg = second.status.clone().unwrap().conditions.iter().find(|c| c.type_ == "Validated").unwrap().message.clone();
    assert!(msg.contains("already upgrading"), "{msg}");

    let rolled = upgrade_phase(&upgrades, "doomed", UpgradePhase::RolledBack).await.status.unwrap();
    let steps: Vec<(ComponentKind, StepPhase, Option<StepFailure>)> = rolled.steps.iter().map(|s| (s.component, s.phase, s.failure)).collect();
    assert_eq!(
        steps,
        [
            (ComponentKind::Istio, StepPhase::RolledBack, None),
            (ComponentKind::Dex, StepPhase::RolledBack, None),
            (ComponentKind::KFServing, StepPhase::RolledBack, None),
            (ComponentKind::Katib, StepPhase::RolledBack, Some(StepFailure::HealthTimeout)),
            (ComponentKind::Pipelines, StepPhase::Pending, None),
        ]
    );
    let after = kfdef_available(&kfdefs).await;
    assert_eq!(versions(&after), before, "not every component is back at its old version");
    assert_eq!(after.spec.version.as_deref(), Some("v1.2.0"));
    // The rollback pinned the versions spec.version names: the pins go.
    eventually("rollback pins removed", || async {
        let k = kfdefs.get("kubeflow").await.map_err(|e| e.to_string())?;
        let annotations = k.metadata.annotations.unwrap_or_default();
        if annotations.contains_key(PINS) { Err(format!("{annotations:?}")) } else { Ok(()) }
    })
    .await;
    delete_kfdef(&kfdefs).await;
}
