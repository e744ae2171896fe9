//! A KfUpgrade from Kubeflow 1.10 to 1.11: Istio, Dex, KServe, Katib and Pipelines from their
//! built-in releases (cert-manager's kinds served for KServe's certificate, with no controller),
//! the rest from 1.10-shaped and 1.11-shaped kubeflow/manifests (the modern fixture's example,
//! installed through the generic component), on the real control plane with every operator over
//! NATS: the plan comes first — what each object would become, by server-side
//! dry run, what is pruned, what is kept because it holds data, what changes in a CRD, and the
//! release notes' manual steps — and nothing moves until the upgrade is approved; then it is
//! applied, MinIO's claim outliving MinIO; a release that does not render is refused by its
//! plan with nothing written; one that never becomes healthy is rolled back.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use kubeflow_crds::ComponentKind;
use kubeflow_crds::kfdef::KfDefPhase;
use kubeflow_crds::kfupgrade::{KfUpgrade, KfUpgradeStatus, UpgradePhase};
use kubeflow_crds::{KfDef, KustomizeApplication};
use kubeflow_e2e::*;
use kubeflow_manifests::fixtures;
use serde_json::json;

/// How long a "nothing moves" check watches.
const STAYS: Duration = Duration::from_secs(5);
/// The built-in components' versions of Kubeflow 1.10 and 1.11.
const V1_10: [(&str, &str); 6] = [("dex", "v2.41.1"), ("istio", "1.24.3"), ("katib", "v0.18.0"), ("kfserving", "v0.15.0"), ("kustomize", "v1.10.0"), ("pipelines", "2.5.0")];
const V1_11: [(&str, &str); 6] = [("dex", "v2.44.0"), ("istio", "1.28.0"), ("katib", "v0.19.0"), ("kfserving", "v0.15.2"), ("kustomize", "v1.11.0"), ("pipelines", "2.15.0")];

fn image(d: &Deployment) -> String {
    d.spec.as_ref().unwrap().template.spec.as_ref().unwrap().containers[0].image.clone().unwrap()
}

async fn kfdef_available_at(api: &Api<KfDef>, versions: [(&str, &str); 6]) -> KfDef {
    let wanted: BTreeMap<String, Option<String>> = versions.iter().map(|(c, v)| (c.to_string(), Some(v.to_string()))).collect();
    eventually(&format!("KfDef Available at {wanted:?}"), || async {
        let k = api.get("kubeflow").await.map_err(|e| e.to_string())?;
        let s = k.status.clone().unwrap_or_default();
        let at: BTreeMap<String, Option<String>> = s.components.iter().map(|(c, summary)| (c.clone(), summary.version.clone())).collect();
        match s.phase == Some(KfDefPhase::Available) && s.observed_generation == k.metadata.generation && at == wanted {
            true => Ok(k),
            false => Err(format!("{:?} at {at:?}", s.phase)),
        }
    })
    .await
}

async fn phase_reached(api: &Api<KfUpgrade>, name: &str, phases: &[UpgradePhase]) -> KfUpgradeStatus {
    eventually(&format!("KfUpgrade {name} in {phases:?}"), || async {
        let status = api.get(name).await.map_err(|e| e.to_string())?.status.unwrap_or_default();
        match status.phase {
            Some(phase) if phases.contains(&phase) => Ok(status),
            _ => Err(serde_json::to_string(&status).unwrap()),
        }
    })
    .await
}

fn has_line(lines: &[String], line: &str) -> bool {
    lines.iter().any(|l| l == line)
}

/// Whether `changes` names field `field` among the changed fields of object `what`.
fn changes_field(changes: &[String], what: &str, field: &str) -> bool {
    changes.iter().any(|l| l.strip_prefix(&format!("{what}: ")).is_some_and(|fields| fields.split(", ").any(|f| f == field)))
}

#[tokio::test]
async fn an_upgrade_from_1_10_to_1_11_shows_its_plan_waits_for_approval_keeps_data_and_rolls_back_a_failing_release() {
    // Kubeflow 1.10.0's Istio (1.24.3) has no archive here.
    still_on_built_in_templates();
    let client: Client = client().await;
    prepare_manifests_fixture(&client).await;
    reset_modern_example(&client).await;
    // KServe's webhook certificate comes from cert-manager, which a Kubeflow 1.10 install has.
    serve_kind(&client, "cert-manager.io", "Issuer", "issuers", &["v1"]).await;
    serve_kind(&client, "cert-manager.io", "Certificate", "certificates", &["v1"]).await;
    let never_healthy = ("apps/web/upstream/base/deployment.yaml", "    spec: {containers:", "    spec: {nodeSelector: {demo.kubeflow.org/no-such-node: \"true\"}, containers:");
    let v1111: Vec<_> = fixtures::MODERN_1_11_EDITS.iter().copied().chain([never_healthy]).collect();
    let server = fixtures::Server::start(BTreeMap::from([
        ("archive/v1.10.0.tar.gz".to_string(), fixtures::edited_modern_repo_tarball(fixtures::MODERN_1_10_EDITS)),
        ("archive/v1.11.0.tar.gz".to_string(), fixtures::edited_modern_repo_tarball(fixtures::MODERN_1_11_EDITS)),
        ("archive/v1.11.1.tar.gz".to_string(), fixtures::edited_modern_repo_tarball(&v1111)),
    ]))
    .await;
    let stack = OperatorStack::start(&client, &[]).await;
    let ns = TestNamespace::create(&client, "e2e-kfupgrade-plan").await;
    let kfdefs: Api<KfDef> = Api::namespaced(client.clone(), &ns.name);
    let mut kfdef = fixtures::modern_example_kfdef(&server.url("archive/v1.10.0.tar.gz"), &ns.name);
    kfdef.spec.version = Some("v1.10.0".into());
    // Named like the built-in components' applications: installed from their 1.10 releases.
    for name in ["istio-install", "dex", "kserve", "katib", "kubeflow-pipelines"] {
        kfdef.spec.applications.push(serde_json::from_value(json!({"name": name})).unwrap());
    }
    kfdefs.create(&PostParams::default(), &kfdef).await.unwrap();
    kfdef_available_at(&kfdefs, V1_10).await;
    let ours = |namespace: &str| Api::<Deployment>::namespaced(client.clone(), namespace);
    ours(&ns.name).get("minio").await.unwrap();
    Api::<PersistentVolumeClaim>::namespaced(client.clone(), &ns.name).get("minio-pvc").await.unwrap();

    let deployments = |namespace: &str| Api::<Deployment>::namespaced(client.clone(), namespace);
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), "kubeflow");
    let web = deployments("kubeflow").get("web").await.unwrap();
    assert_eq!(image(&web), "ghcr.io/kubeflow/web:v1.10.0");
    deployments("kubeflow").get("minio").await.unwrap();
    claims.get("minio-pvc").await.unwrap();

    let upgrades: Api<KfUpgrade> = Api::namespaced(client.clone(), &ns.name);
    let upgrade = |name: &str, version: &str, extra: serde_json::Value| -> KfUpgrade {
        let mut spec = json!({"currentKfDef": {"name": "kubeflow"},
                              "newKfDef": {"name": "kubeflow", "version": version, "repos": [{"name": "manifests", "uri": server.url(&format!("archive/{version}.tar.gz"))}]},
                              "healthTimeoutSeconds": 20});
        spec.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        serde_json::from_value(json!({"apiVersion": "kfupgrade.apps.kubeflow.org/v1alpha1", "kind": "KfUpgrade", "metadata": {"name": name}, "spec": spec})).unwrap()
    };

    // A Manual upgrade to 1.11: the plan is shown, and nothing moves until it is approved.
    upgrades.create(&PostParams::default(), &upgrade("to-1-11", "v1.11.0", json!({"approval": "Manual"}))).await.unwrap();
    let shown = phase_reached(&upgrades, "to-1-11", &[UpgradePhase::AwaitingApproval, UpgradePhase::Failed, UpgradePhase::Upgrading]).await;
    assert_eq!(shown.phase, Some(UpgradePhase::AwaitingApproval), "{shown:?}");
    let steps: Vec<(ComponentKind, &str, &str)> = shown.plan.iter().map(|p| (p.component, p.from_version.as_str(), p.to_version.as_str())).collect();
    assert_eq!(
        steps,
        [
            (ComponentKind::Istio, "1.24.3", "1.28.0"),
            (ComponentKind::Dex, "v2.41.1", "v2.44.0"),
            (ComponentKind::KFServing, "v0.15.0", "v0.15.2"),
            (ComponentKind::Katib, "v0.18.0", "v0.19.0"),
            (ComponentKind::Pipelines, "2.5.0", "2.15.0"),
            (ComponentKind::GENERIC, "v1.10.0", "v1.11.0"),
        ]
    );
    let plan_of = |component: ComponentKind| &shown.plan.iter().find(|p| p.component == component).unwrap().changes;
    // The built-in Pipelines moves its store from MinIO to SeaweedFS: MinIO goes, its data stays.
    let pipelines = plan_of(ComponentKind::Pipelines);
    assert!(pipelines.add.contains(&format!("Deployment {}/seaweedfs", ns.name)), "{pipelines:#?}");
    assert!(pipelines.prune.contains(&format!("Deployment {}/minio", ns.name)), "{pipelines:#?}");
    assert_eq!(pipelines.keep, [format!("PersistentVolumeClaim {}/minio-pvc (holds data: never pruned; delete it yourself once migrated)", ns.name)], "{pipelines:#?}");
    let image_field = "spec.template.spec.containers[0].image";
    assert!(changes_field(&pipelines.change, &format!("Deployment {}/ml-pipeline", ns.name), image_field), "{pipelines:#?}");
    assert!(changes_field(&pipelines.change, &format!("Service {}/minio-service", ns.name), "spec.selector.app"), "SeaweedFS takes over MinIO's Service: {pipelines:#?}");
    assert!(changes_field(&plan_of(ComponentKind::Dex).change, &format!("Deployment {}/dex", ns.name), image_field), "{:#?}", shown.plan);
    assert!(changes_field(&plan_of(ComponentKind::Katib).change, &format!("Deployment {}/katib-controller", ns.name), image_field), "{:#?}", shown.plan);
    assert!(changes_field(&plan_of(ComponentKind::Istio).change, &format!("Deployment {}/istiod", ns.name), image_field), "{:#?}", shown.plan);
    assert!(shown.plan.iter().all(|p| p.changes.failed.is_empty()), "{:#?}", shown.plan);
    let plan = &shown.plan[5];
    assert_eq!((plan.component, plan.from_version.as_str(), plan.to_version.as_str()), (ComponentKind::GENERIC, "v1.10.0", "v1.11.0"));
    let changes = &plan.changes;
    assert!(has_line(&changes.change, "Deployment kubeflow/web: spec.template.spec.containers[0].image"), "{changes:#?}");
    assert!(has_line(&changes.change, "ConfigMap kubeflow/web-config: data.image"), "{changes:#?}");
    assert!(has_line(&changes.change, "Deployment demo-mesh/mesh-control: spec.template.spec.containers[0].image"), "{changes:#?}");
    assert_eq!(changes.add, ["Deployment kubeflow/seaweedfs"], "{changes:#?}");
    assert_eq!(changes.prune, ["Deployment kubeflow/minio"], "{changes:#?}");
    assert_eq!(changes.keep, ["PersistentVolumeClaim kubeflow/minio-pvc (holds data: never pruned; delete it yourself once migrated)"], "{changes:#?}");
    assert!(has_line(&changes.crd_changes, "CustomResourceDefinition gateways.demo.kubeflow.org: serves v1beta1 too"), "{changes:#?}");
    assert!(changes.failed.is_empty(), "{changes:#?}");
    // Per application: every object of the web app's package counted.
    let web_app = changes.applications.iter().find(|a| a.name == "web").unwrap_or_else(|| panic!("{changes:#?}"));
    assert_eq!((web_app.add, web_app.change, web_app.prune, web_app.keep), (1, 2, 1, 1), "{changes:#?}");
    let mesh = changes.applications.iter().find(|a| a.name == "mesh-install").unwrap_or_else(|| panic!("{changes:#?}"));
    assert_eq!((mesh.add, mesh.change, mesh.prune, mesh.keep), (0, 1, 0, 0), "{changes:#?}");
    assert!(shown.manual_steps.iter().any(|s| s.contains("MinIO to SeaweedFS")), "{:?}", shown.manual_steps);
    // Nothing was written: the component still runs 1.10's spec, and its objects stay as they are.
    let kustomize: Api<KustomizeApplication> = Api::namespaced(client.clone(), &ns.name);
    assert_eq!(kustomize.get("kubeflow").await.unwrap().spec.core.version, "v1.10.0");
    let pipelines_resource: Api<kubeflow_crds::Pipelines> = Api::namespaced(client.clone(), &ns.name);
    assert_eq!(pipelines_resource.get("kubeflow").await.unwrap().spec.core.version, "2.5.0");
    let web_version = web.resource_version();
    holds_for(&deployments("kubeflow"), "web", STAYS, |d: &Deployment| if d.resource_version() == web_version { Ok(()) } else { Err(format!("web changed: {}", image(d))) }).await;
    assert_eq!(upgrades.get("to-1-11").await.unwrap().status.unwrap().phase, Some(UpgradePhase::AwaitingApproval));

    // The spec is immutable but for the approval.
    let edit = upgrades.patch("to-1-11", &PatchParams::default(), &Patch::Merge(json!({"spec": {"healthTimeoutSeconds": 30}}))).await.unwrap_err();
    assert!(edit.to_string().contains("spec is immutable once the upgrade exists, except spec.approved"), "{edit}");
    upgrades.patch("to-1-11", &PatchParams::default(), &Patch::Merge(json!({"spec": {"approved": true}}))).await.unwrap();
    let done = phase_reached(&upgrades, "to-1-11", &[UpgradePhase::Succeeded, UpgradePhase::Failed, UpgradePhase::RolledBack]).await;
    assert_eq!(done.phase, Some(UpgradePhase::Succeeded), "{done:?}");
    kfdef_available_at(&kfdefs, V1_11).await;
    assert_eq!(image(&deployments("kubeflow").get("web").await.unwrap()), "ghcr.io/kubeflow/web:v1.11.0");
    ours(&ns.name).get("seaweedfs").await.unwrap();
    gone(&ours(&ns.name), "minio").await;
    let minio_claim = Api::<PersistentVolumeClaim>::namespaced(client.clone(), &ns.name).get("minio-pvc").await.unwrap();
    assert!(minio_claim.metadata.deletion_timestamp.is_none(), "the upgrade deleted the built-in MinIO's claim");
    assert_eq!(image(&deployments("demo-mesh").get("mesh-control").await.unwrap()), "ghcr.io/example/mesh-control:v1.28.0");
    deployments("kubeflow").get("seaweedfs").await.unwrap();
    gone(&deployments("kubeflow"), "minio").await;
    let crd = Api::<CustomResourceDefinition>::all(client.clone()).get("gateways.demo.kubeflow.org").await.unwrap();
    assert!(crd.spec.versions.iter().any(|v| v.name == "v1beta1" && v.served), "{:?}", crd.spec.versions);
    // MinIO's data outlives MinIO.
    let claim = claims.get("minio-pvc").await.unwrap();
    assert!(claim.metadata.deletion_timestamp.is_none(), "the upgrade deleted MinIO's claim");

    // A release whose repository cannot be fetched: its plan says so, and nothing is written.
    upgrades.create(&PostParams::default(), &upgrade("to-missing", "v1.11.9", json!({}))).await.unwrap();
    let refused = phase_reached(&upgrades, "to-missing", &[UpgradePhase::Failed, UpgradePhase::Succeeded, UpgradePhase::RolledBack]).await;
    let planned = refused.conditions.iter().find(|c| c.type_ == "Planned").unwrap();
    assert_eq!(planned.reason, "PlanFailed", "{refused:?}");
    assert!(planned.message.contains("nothing was written") && planned.message.contains("v1.11.9.tar.gz"), "{}", planned.message);
    assert!(refused.steps.iter().all(|s| s.phase == kubeflow_crds::kfupgrade::StepPhase::Pending), "{refused:?}");
    assert_eq!(kustomize.get("kubeflow").await.unwrap().spec.core.version, "v1.11.0");

    // A release that never becomes healthy: planned, applied, rolled back to 1.11.0's render.
    upgrades.create(&PostParams::default(), &upgrade("to-1-11-1", "v1.11.1", json!({}))).await.unwrap();
    let rolled = phase_reached(&upgrades, "to-1-11-1", &[UpgradePhase::RolledBack, UpgradePhase::Failed, UpgradePhase::Succeeded]).await;
    assert_eq!(rolled.phase, Some(UpgradePhase::RolledBack), "{rolled:?}");
    assert!(has_line(&rolled.plan[0].changes.change, "Deployment kubeflow/web: spec.template.spec.nodeSelector.demo.kubeflow.org/no-such-node"), "{:#?}", rolled.plan);
    kfdef_available_at(&kfdefs, V1_11).await;
    let web = deployments("kubeflow").get("web").await.unwrap();
    assert!(web.spec.unwrap().template.spec.unwrap().node_selector.is_none(), "v1.11.1's render is still applied");

    let log = std::fs::read_to_string(&stack.components[&ComponentKind::GENERIC].log).unwrap();
    assert!(log.contains("preview planned"), "the generic operator logged no plan");
    kfdefs.delete("kubeflow", &DeleteParams::default()).await.unwrap();
    gone(&kfdefs, "kubeflow").await;
    reset_modern_example(&client).await;
}
