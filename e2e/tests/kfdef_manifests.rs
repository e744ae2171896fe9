//! KfDefs whose applications no built-in release covers, through the whole chain: the
//! meta-operator routes every application to an operator (the generic component for these), the
//! kustomize-operator fetches the manifests repository the tests generate (served as a GitHub-style
//! tarball on loopback HTTP) and renders it with the real kustomize, and the KfDef reports each
//! application. A v1.0-shaped per-application KfDef and a v1.2-shaped stacks KfDef both converge
//! with every application Ready; a generic application heals and reverts drift; a parameter edit
//! propagates; a bad URI, a missing path, a missing overlay and a kustomize error each name their
//! application and touch nothing else (an installed application that stops rendering keeps its
//! objects); a second KfDef rendering the same objects is told whose they are, never fought over;
//! deleting the KfDef removes everything but CRDs and namespaces. Tests in this file run one at a time (their operators watch every namespace and
//! the fixture has cluster-scoped objects).

use std::collections::BTreeMap;

use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use k8s_openapi::api::rbac::v1::ClusterRole;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use kubeflow_crds::KfDef;
use kubeflow_crds::kfdef::{ApplicationStatus, KfDefPhase};
use kubeflow_e2e::*;
use kubeflow_manifests::fixtures;
use serde_json::{Value, json};

static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

const ARCHIVE: &str = "archive/v1.0.2.tar.gz";

async fn wait_kfdef(api: &Api<KfDef>, name: &str, what: &str, check: impl Fn(&KfDef) -> bool) -> KfDef {
    eventually(what, || async {
        let k = api.get(name).await.map_err(|e| e.to_string())?;
        let current = k.status.as_ref().is_some_and(|s| s.observed_generation == k.metadata.generation);
        if current && check(&k) { Ok(k) } else { Err(serde_json::to_string(&k.status).unwrap()) }
    })
    .await
}

fn api_in(client: &Client, namespace: &str) -> Api<KfDef> {
    Api::namespaced(client.clone(), namespace)
}

fn phase(k: &KfDef) -> Option<KfDefPhase> {
    k.status.as_ref().and_then(|s| s.phase)
}

fn application<'a>(k: &'a KfDef, name: &str) -> &'a ApplicationStatus {
    k.status.as_ref().unwrap().applications.iter().find(|a| a.name == name).unwrap_or_else(|| panic!("application {name} missing from status"))
}

fn every_application_ready_from(k: &KfDef, component: &str) {
    let status = k.status.as_ref().unwrap();
    assert_eq!(status.applications.len(), k.spec.applications.len(), "an application is missing from status");
    for a in &status.applications {
        assert_eq!((a.component.as_deref(), a.state.as_str()), (Some(component), "Ready"), "{a:?}");
    }
}

/// What deleting a KfDef over the fixture must leave behind: nothing of its own but the CRD and
/// namespaces.
async fn removed_but_crds_and_namespaces(client: &Client, namespace: &str, config_map: &str) {
    gone(&Api::<ConfigMap>::namespaced(client.clone(), namespace), config_map).await;
    gone(&Api::<ClusterRole>::all(client.clone()), "tenant-webhook").await;
    gone(&Api::<ClusterRole>::all(client.clone()), "web-app-cluster-role").await;
    gone(&Api::<MutatingWebhookConfiguration>::all(client.clone()), "tenant-defaulter").await;
    assert!(Api::<CustomResourceDefinition>::all(client.clone()).get_opt("tenants.demo.kubeflow.org").await.unwrap().is_some(), "a CRD was deleted");
    assert!(Api::<Namespace>::all(client.clone()).get_opt("demo-tenants").await.unwrap().is_some(), "a namespace was deleted");
}

#[tokio::test]
async fn per_application_kfdef_installs_every_application_heals_follows_edits_isolates_bad_ones_and_deletes_cleanly() {
    let _serial = SERIAL.lock().await;
    let client = client().await;
    prepare_manifests_fixture(&client).await;
    let server = fixtures::Server::start(BTreeMap::from([(ARCHIVE.to_string(), fixtures::repo_tarball())])).await;
    let uri = server.url(ARCHIVE);
    let stack = OperatorStack::start(&client, &[]).await;
    let ns = TestNamespace::create(&client, "e2e-kfdef-generic").await;
    let kfdef = fixtures::per_application_kfdef(&uri, &ns.name);
    let api: Api<KfDef> = Api::namespaced(client.clone(), &ns.name);
    api.create(&PostParams::default(), &kfdef).await.unwrap();

    // Kubeflow v1.0.2 has no built-in release: both applications go to the generic component.
    let log = stack.components[&kubeflow_crds::ComponentKind::GENERIC].log.display().to_string();
    let done = wait_kfdef(&api, "demo", &format!("the v1.0 KfDef Available (log: {log})"), |k| phase(k) == Some(KfDefPhase::Available)).await;
    every_application_ready_from(&done, "kustomize");
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns.name);
    let parameters = config_maps.get("web-app-parameters").await.unwrap();
    assert_eq!(parameters.data.as_ref().unwrap()["userid-header"], "kubeflow-userid", "the parameter reached params.env");
    assert_eq!(parameters.annotations().get("components.kubeflow.org/application").map(String::as_str), Some("web-app"));
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns.name);
    let deployment = deployments.get("web-app").await.unwrap();
    assert_eq!(deployment.annotations().get("demo.kubeflow.org/served-from").map(String::as_str), Some(ns.name.as_str()), "vars resolved to the KfDef's namespace");
    Api::<MutatingWebhookConfiguration>::all(client.clone()).get("tenant-defaulter").await.unwrap();
    Api::<CustomResourceDefinition>::all(client.clone()).get("tenants.demo.kubeflow.org").await.unwrap();

    // Heal: a deleted object comes back; drift in a managed field is reverted.
    delete_and_await_recreation(&config_maps, "web-app-parameters").await;
    config_maps.patch("web-app-parameters", &PatchParams::default(), &Patch::Merge(json!({"data": {"userid-header": "drifted"}}))).await.unwrap();
    eventually("drift reverted", || async {
        let data = config_maps.get("web-app-parameters").await.map_err(|e| e.to_string())?.data.unwrap_or_default();
        if data.get("userid-header").map(String::as_str) == Some("kubeflow-userid") { Ok(()) } else { Err(format!("{data:?}")) }
    })
    .await;

    // A parameter edit in the KfDef reaches the ConfigMap.
    let mut applications: Vec<Value> = done.spec.applications.iter().map(|a| serde_json::to_value(a).unwrap()).collect();
    applications[1]["kustomizeConfig"]["parameters"][0]["value"] = json!("x-forwarded-user");
    api.patch("demo", &PatchParams::default(), &Patch::Merge(json!({"spec": {"applications": applications}}))).await.unwrap();
    eventually("userid-header edited", || async {
        let data = config_maps.get("web-app-parameters").await.map_err(|e| e.to_string())?.data.unwrap_or_default();
        if data.get("userid-header").map(String::as_str) == Some("x-forwarded-user") { Ok(()) } else { Err(format!("{data:?}")) }
    })
    .await;
    let edited = wait_kfdef(&api, "demo", "Available after the edit", |k| phase(k) == Some(KfDefPhase::Available)).await;
    every_application_ready_from(&edited, "kustomize");

    // Three bad applications join and the installed web-app gets an overlay that does not exist:
    // each says what is wrong with it; web-app's objects stay as they are (not applied, not
    // pruned) and webhook stays Ready.
    let web_app = deployments.get("web-app").await.unwrap();
    let parameters = config_maps.get("web-app-parameters").await.unwrap();
    let mut with_bad = applications.clone();
    with_bad[1]["kustomizeConfig"]["overlays"] = json!(["application", "istio", "gcp"]);
    with_bad.extend([
        json!({"name": "bad-uri", "kustomizeConfig": {"repoRef": {"name": "missing", "path": "demo/web-app"}}}),
        json!({"name": "bad-path", "kustomizeConfig": {"repoRef": {"name": "manifests", "path": "demo/missing"}}}),
        json!({"name": "bad-kustomize", "kustomizeConfig": {"repoRef": {"name": "manifests", "path": "demo/broken"}}}),
    ]);
    let repos = json!([{"name": "manifests", "uri": uri}, {"name": "missing", "uri": server.url("archive/missing.tar.gz")}]);
    api.patch("demo", &PatchParams::default(), &Patch::Merge(json!({"spec": {"applications": with_bad, "repos": repos}}))).await.unwrap();
    let bad = wait_kfdef(&api, "demo", "Degraded with four bad applications", |k| {
        phase(k) == Some(KfDefPhase::Degraded) && ["web-app", "bad-uri", "bad-path", "bad-kustomize"].iter().all(|a| application(k, a).state == "Degraded")
    })
    .await;
    for (name, expected) in [
        ("web-app", vec!["spec.sources[1]: ", r#"overlay "gcp" does not exist (available: ["application", "istio"])"#]),
        ("bad-uri", vec!["spec.sources[2].repoUri: ", "404"]),
        ("bad-path", vec!["spec.sources[3]: ", "demo/missing"]),
        ("bad-kustomize", vec!["spec.sources[4]: ", "does-not-exist.yaml"]),
    ] {
        let message = &application(&bad, name).message;
        assert!(message.starts_with(expected[0]) && message.contains(expected[1]), "{name}: {message}");
    }
    assert_eq!(application(&bad, "webhook").state, "Ready", "webhook was affected by the bad applications");
    let available = bad.status.as_ref().unwrap().conditions.iter().find(|c| c.type_ == "Available").unwrap();
    assert_eq!(available.status, kubeflow_crds::ConditionStatus::False, "Available while applications are not installed");
    let untouched = deployments.get("web-app").await.unwrap();
    assert_eq!((untouched.uid(), untouched.metadata.generation), (web_app.uid(), web_app.metadata.generation), "web-app's Deployment was changed");
    assert_eq!(config_maps.get("web-app-parameters").await.unwrap().resource_version(), parameters.resource_version(), "web-app's ConfigMap was changed");
    Api::<ClusterRole>::all(client.clone()).get("web-app-cluster-role").await.expect("web-app's ClusterRole was pruned");

    // A second KfDef rendering the same cluster-scoped objects is told whose they are; nothing is
    // fought over: the first KfDef's objects keep their owner.
    let other_ns = TestNamespace::create(&client, "e2e-kfdef-other").await;
    api_in(&client, &other_ns.name).create(&PostParams::default(), &fixtures::per_application_kfdef(&uri, &other_ns.name)).await.unwrap();
    let other = wait_kfdef(&api_in(&client, &other_ns.name), "demo", "the second KfDef Degraded", |k| phase(k) == Some(KfDefPhase::Degraded)).await;
    let message = &application(&other, "webhook").message;
    assert!(message.contains(&format!("ClusterRole tenant-webhook belongs to kustomize {}/demo", ns.name)), "{message}");
    let role = Api::<ClusterRole>::all(client.clone()).get("tenant-webhook").await.unwrap();
    assert_eq!(role.annotations().get("components.kubeflow.org/owner"), Some(&format!("{}/demo", ns.name)), "the second KfDef took the object over");
    api_in(&client, &other_ns.name).delete("demo", &DeleteParams::default()).await.unwrap();
    gone(&api_in(&client, &other_ns.name), "demo").await;
    Api::<ClusterRole>::all(client.clone()).get("tenant-webhook").await.expect("deleting the second KfDef removed the first one's object");

    // Removing them brings the KfDef back to Available.
    api.patch("demo", &PatchParams::default(), &Patch::Merge(json!({"spec": {"applications": applications}}))).await.unwrap();
    wait_kfdef(&api, "demo", "Available without the bad applications", |k| phase(k) == Some(KfDefPhase::Available)).await;

    // Deleting the KfDef removes every object but the CRD and the namespaces.
    api.delete("demo", &DeleteParams::default()).await.unwrap();
    gone(&api, "demo").await;
    removed_but_crds_and_namespaces(&client, &ns.name, "web-app-parameters").await;
    gone(&deployments, "web-app").await;
}

#[tokio::test]
async fn stacks_kfdef_installs_each_path_as_it_is() {
    let _serial = SERIAL.lock().await;
    let client = client().await;
    prepare_manifests_fixture(&client).await;
    let server = fixtures::Server::start(BTreeMap::from([(ARCHIVE.to_string(), fixtures::repo_tarball())])).await;
    let _stack = OperatorStack::start(&client, &[]).await;
    let ns = TestNamespace::create(&client, "e2e-kfdef-stacks").await;
    let mut kfdef = fixtures::stacks_kfdef(&server.url(ARCHIVE));
    kfdef.metadata.namespace = Some(ns.name.clone());
    let api: Api<KfDef> = Api::namespaced(client.clone(), &ns.name);
    api.create(&PostParams::default(), &kfdef).await.unwrap();

    let done = wait_kfdef(&api, "demo", "the stacks KfDef Available", |k| phase(k) == Some(KfDefPhase::Available)).await;
    every_application_ready_from(&done, "kustomize");
    // The stack's own kustomization sets the namespace (built as it is, no kfctl-generated one),
    // and its application folder merges its params.env into the base's generator.
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), "kubeflow");
    let parameters = config_maps.get("web-app-parameters").await.unwrap();
    assert_eq!(parameters.data.as_ref().unwrap()["userid-header"], "kubeflow-userid");
    assert_eq!(parameters.labels().get("app.kubernetes.io/part-of").map(String::as_str), Some("kubeflow"));
    Api::<Namespace>::all(client.clone()).get("kubeflow").await.unwrap();

    api.delete("demo", &DeleteParams::default()).await.unwrap();
    gone(&api, "demo").await;
    removed_but_crds_and_namespaces(&client, "kubeflow", "web-app-parameters").await;
}

#[tokio::test]
async fn generic_applications_upgrade_to_new_repositories_and_roll_back_a_release_that_never_becomes_healthy() {
    use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
    use kubeflow_crds::kfupgrade::{KfUpgrade, UpgradePhase};
    let _serial = SERIAL.lock().await;
    let client = client().await;
    prepare_manifests_fixture(&client).await;
    // v1.0.3: a new image and one object fewer; v1.0.4: a web-app whose pods can never be scheduled.
    let v103 = [("demo/web-app/base/deployment.yaml", "web-app:v1.0.0", "web-app:v1.0.1"), ("demo/web-app/base/kustomization.yaml", "- cluster-role-binding.yaml\n", "")];
    let never = ("demo/web-app/base/deployment.yaml", "      serviceAccountName: web-app\n", "      serviceAccountName: web-app\n      nodeSelector: {demo.kubeflow.org/no-such-node: \"true\"}\n");
    let server = fixtures::Server::start(BTreeMap::from([
        (ARCHIVE.to_string(), fixtures::repo_tarball()),
        ("archive/v1.0.3.tar.gz".to_string(), fixtures::edited_repo_tarball(&v103)),
        ("archive/v1.0.4.tar.gz".to_string(), fixtures::edited_repo_tarball(&[v103[0], v103[1], never])),
    ]))
    .await;
    let _stack = OperatorStack::start(&client, &[]).await;
    let ns = TestNamespace::create(&client, "e2e-kfdef-upgrade").await;
    let api = api_in(&client, &ns.name);
    api.create(&PostParams::default(), &fixtures::per_application_kfdef(&server.url(ARCHIVE), &ns.name)).await.unwrap();
    wait_kfdef(&api, "demo", "v1.0.2 Available", |k| phase(k) == Some(KfDefPhase::Available)).await;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns.name);
    let image = |d: &Deployment| d.spec.as_ref().unwrap().template.spec.as_ref().unwrap().containers[0].image.clone().unwrap();
    assert_eq!(image(&deployments.get("web-app").await.unwrap()), "gcr.io/kubeflow-images-public/web-app:v1.0.0");
    Api::<ClusterRoleBinding>::all(client.clone()).get("web-app-binding").await.unwrap();

    let upgrades: Api<KfUpgrade> = Api::namespaced(client.clone(), &ns.name);
    let upgrade = |name: &str, version: &str, timeout: i64| -> KfUpgrade {
        serde_json::from_value(json!({
            "apiVersion": "kfupgrade.apps.kubeflow.org/v1alpha1", "kind": "KfUpgrade", "metadata": {"name": name},
            "spec": {"currentKfDef": {"name": "demo", "version": "v1.0.2"},
                     "newKfDef": {"name": "demo", "version": version, "repos": [{"name": "manifests", "uri": server.url(&format!("archive/{version}.tar.gz"))}]},
                     "healthTimeoutSeconds": timeout},
        }))
        .unwrap()
    };
    let finished = |name: &'static str| {
        let upgrades = upgrades.clone();
        async move {
            eventually(&format!("KfUpgrade {name} finished"), || async {
                let u = upgrades.get(name).await.map_err(|e| e.to_string())?;
                match u.status.as_ref().and_then(|s| s.phase) {
                    Some(UpgradePhase::Succeeded | UpgradePhase::Failed | UpgradePhase::RolledBack) => Ok(u),
                    _ => Err(serde_json::to_string(&u.status).unwrap()),
                }
            })
            .await
        }
    };

    // To v1.0.3's repository: re-rendered, applied, what left the packages pruned.
    upgrades.create(&PostParams::default(), &upgrade("to-v103", "v1.0.3", 60)).await.unwrap();
    let done = finished("to-v103").await;
    assert_eq!(done.status.as_ref().unwrap().phase, Some(UpgradePhase::Succeeded), "{:?}", done.status);
    let step = &done.status.as_ref().unwrap().steps[0];
    assert_eq!((step.component, step.from_version.as_str(), step.to_version.as_str()), (kubeflow_crds::ComponentKind::GENERIC, "v1.0.2", "v1.0.3"));
    assert_eq!(image(&deployments.get("web-app").await.unwrap()), "gcr.io/kubeflow-images-public/web-app:v1.0.1");
    gone(&Api::<ClusterRoleBinding>::all(client.clone()), "web-app-binding").await;
    let upgraded = wait_kfdef(&api, "demo", "Available at v1.0.3", |k| phase(k) == Some(KfDefPhase::Available)).await;
    assert_eq!(upgraded.status.as_ref().unwrap().components["kustomize"].version.as_deref(), Some("v1.0.3"));
    assert_eq!(upgraded.spec.version.as_deref(), Some("v1.0.2"), "the KfDef's spec stays the user's");

    // To v1.0.4, which never becomes healthy: rolled back to v1.0.3's render.
    upgrades.create(&PostParams::default(), &upgrade("to-v104", "v1.0.4", 10)).await.unwrap();
    let rolled = finished("to-v104").await;
    assert_eq!(rolled.status.as_ref().unwrap().phase, Some(UpgradePhase::RolledBack), "{:?}", rolled.status);
    assert!(rolled.status.as_ref().unwrap().steps[0].message.contains("did not become Ready at v1.0.4"), "{:?}", rolled.status);
    let back = wait_kfdef(&api, "demo", "Available at v1.0.3 again", |k| phase(k) == Some(KfDefPhase::Available)).await;
    assert_eq!(back.status.as_ref().unwrap().components["kustomize"].version.as_deref(), Some("v1.0.3"));
    let web_app = deployments.get("web-app").await.unwrap();
    assert_eq!(image(&web_app), "gcr.io/kubeflow-images-public/web-app:v1.0.1");
    assert!(web_app.spec.unwrap().template.spec.unwrap().node_selector.is_none(), "v1.0.4's render is still applied");
    assert!(back.annotations()["kfdef.apps.kubeflow.org/repos"].contains("v1.0.3.tar.gz"));

    api.delete("demo", &DeleteParams::default()).await.unwrap();
    gone(&api, "demo").await;
    removed_but_crds_and_namespaces(&client, &ns.name, "web-app-parameters").await;
}

/// kfctl-era KfDefs whose package renders API versions Kubernetes removed (v1beta1 CRD, RBAC,
/// webhook, PodDisruptionBudget, CronJob, PriorityClass; `extensions/v1beta1` Deployment without
/// a selector and Ingress; `apps/v1beta2` StatefulSet; `autoscaling/v2beta1`) install on the
/// current control plane in both kfctl modes: every application Ready, its conversions counted in
/// the KfDef's status, the custom resource served with every field it was given (v1beta1 did not
/// prune), the webhook keeping v1beta1's `failurePolicy: Ignore` (its backend does not exist, so
/// v1's `Fail` would block deleting the custom resource).
#[tokio::test]
async fn kfctl_era_kfdefs_in_removed_api_versions_install_converted_in_both_modes() {
    use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
    use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
    let _serial = SERIAL.lock().await;
    let client = client().await;
    prepare_manifests_fixture(&client).await;
    let server = fixtures::Server::start(BTreeMap::from([(ARCHIVE.to_string(), fixtures::repo_tarball())])).await;
    let uri = server.url(ARCHIVE);
    let without: Vec<_> = kubeflow_crds::ComponentKind::ALL.into_iter().filter(|k| *k != kubeflow_crds::ComponentKind::GENERIC).collect();
    let stack = OperatorStack::start(&client, &without).await;
    let log = stack.components[&kubeflow_crds::ComponentKind::GENERIC].log.display().to_string();
    let converted = |kind: &str, from: &str, to: &str| (kind.to_string(), from.to_string(), to.to_string(), 1);
    let expected = [
        converted("ClusterRole", "rbac.authorization.k8s.io/v1beta1", "rbac.authorization.k8s.io/v1"),
        converted("CronJob", "batch/v1beta1", "batch/v1"),
        converted("CustomResourceDefinition", "apiextensions.k8s.io/v1beta1", "apiextensions.k8s.io/v1"),
        converted("Deployment", "extensions/v1beta1", "apps/v1"),
        converted("HorizontalPodAutoscaler", "autoscaling/v2beta1", "autoscaling/v2"),
        converted("Ingress", "extensions/v1beta1", "networking.k8s.io/v1"),
        converted("PodDisruptionBudget", "policy/v1beta1", "policy/v1"),
        converted("PriorityClass", "scheduling.k8s.io/v1beta1", "scheduling.k8s.io/v1"),
        converted("Role", "rbac.authorization.k8s.io/v1beta1", "rbac.authorization.k8s.io/v1"),
        converted("RoleBinding", "rbac.authorization.k8s.io/v1beta1", "rbac.authorization.k8s.io/v1"),
        converted("StatefulSet", "apps/v1beta2", "apps/v1"),
        converted("ValidatingWebhookConfiguration", "admissionregistration.k8s.io/v1beta1", "admissionregistration.k8s.io/v1"),
    ];
    for (stacks, application_name) in [(false, "legacy"), (true, "kubeflow-apps")] {
        let ns = TestNamespace::create(&client, if stacks { "e2e-legacy-stacks" } else { "e2e-legacy" }).await;
        // The stack's own kustomization puts everything in `kubeflow`.
        let target = if stacks { "kubeflow".to_string() } else { ns.name.clone() };
        let api = api_in(&client, &ns.name);
        api.create(&PostParams::default(), &fixtures::legacy_kfdef(&uri, &ns.name, stacks)).await.unwrap();
        let done = wait_kfdef(&api, "legacy", &format!("the kfctl-era KfDef Available, stacks {stacks} (log: {log})"), |k| phase(k) == Some(KfDefPhase::Available)).await;
        every_application_ready_from(&done, "kustomize");
        let listed: Vec<_> = application(&done, application_name).build.converted.iter().map(|c| (c.kind.clone(), c.from.clone(), c.to.clone(), c.count)).collect();
        assert_eq!(listed, expected, "stacks {stacks}");

        let jobs = Api::<DynamicObject>::namespaced_with(client.clone(), &target, &ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("demo.kubeflow.org", "v1alpha1", "LegacyJob"), "legacyjobs"));
        let job = jobs.get("nightly").await.unwrap();
        assert_eq!(job.data["spec"]["schedule"], "0 3 * * *", "a field outside the schema was pruned");
        assert_eq!(job.data["spec"]["template"], json!({"image": "trainer:v1", "args": ["--epochs", "3"]}));
        let deployment = Api::<Deployment>::namespaced(client.clone(), &target).get("legacy-controller").await.unwrap();
        let labels = deployment.spec.unwrap().template.metadata.unwrap().labels.unwrap();
        assert_eq!(labels.get("app").map(String::as_str), Some("legacy-controller"));
        let webhook = Api::<ValidatingWebhookConfiguration>::all(client.clone()).get("legacy-job-validator").await.unwrap();
        let webhook = &webhook.webhooks.unwrap()[0];
        assert_eq!((webhook.failure_policy.as_deref(), webhook.side_effects.as_str(), webhook.timeout_seconds), (Some("Ignore"), "None", Some(30)));

        api.delete("legacy", &DeleteParams::default()).await.unwrap();
        gone(&api, "legacy").await;
        gone(&jobs, "nightly").await;
        gone(&Api::<ClusterRole>::all(client.clone()), "legacy-job-viewer").await;
        gone(&Api::<ValidatingWebhookConfiguration>::all(client.clone()), "legacy-job-validator").await;
        assert!(Api::<CustomResourceDefinition>::all(client.clone()).get_opt("legacyjobs.demo.kubeflow.org").await.unwrap().is_some(), "the CRD was deleted");
    }
}

/// A KfDef whose applications are the entries of current kubeflow/manifests' `example/
/// kustomization.yaml` (its `resources` and its `components`, in a repository of that shape:
/// kustomize v5 only, cert-manager's and Istio's webhooks, CRDs with their custom resources in
/// other applications) installs every one with no retry loop and no failed apply: every
/// application Ready; the Gateway, PeerAuthentication and Issuer written after the webhook
/// backends that admit them are Available (by etcd revision); the Component, applied to the mesh's
/// install (`componentOf`), installed with it.
#[tokio::test]
async fn the_entries_of_current_kubeflow_manifests_example_install_in_dependency_order() {
    use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
    use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
    let _serial = SERIAL.lock().await;
    let client = client().await;
    prepare_manifests_fixture(&client).await;
    reset_modern_example(&client).await;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let mutating: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    let validating: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    let demo = |kind: &str, plural: &str, namespace: &str| {
        Api::<DynamicObject>::namespaced_with(client.clone(), namespace, &ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("demo.kubeflow.org", "v1", kind), plural))
    };
    let server = fixtures::Server::start(BTreeMap::from([("archive/v1.11.0.tar.gz".to_string(), fixtures::modern_repo_tarball())])).await;
    // Every operator: no application is named like a built-in component's, so every one goes to
    // the generic component.
    let stack = OperatorStack::start(&client, &[]).await;
    let log = stack.components[&kubeflow_crds::ComponentKind::GENERIC].log.clone();
    let ns = TestNamespace::create(&client, "e2e-modern-example").await;

    let available = |namespace: &str, name: &str| {
        revision_when(Api::<Deployment>::namespaced(client.clone(), namespace), name, |d| {
            d.status.iter().flat_map(|s| s.conditions.iter().flatten()).any(|c| c.type_ == "Available" && c.status == "True")
        })
    };
    let (mesh_available, certs_available) = (available("demo-mesh", "mesh-control"), available("demo-certs", "certs-webhook"));
    let gateway = revision_when(demo("Gateway", "gateways", "kubeflow"), "kubeflow-gateway", |_| true);
    let peer_authentication = revision_when(demo("PeerAuthentication", "peerauthentications", "demo-mesh"), "default", |_| true);
    let issuer = revision_when(demo("Issuer", "issuers", "demo-certs"), "selfsigned", |_| true);
    let mesh_webhook = revision_when(mutating.clone(), "demo-mesh-defaulter", |_| true);

    let api = api_in(&client, &ns.name);
    api.create(&PostParams::default(), &fixtures::modern_example_kfdef(&server.url("archive/v1.11.0.tar.gz"), &ns.name)).await.unwrap();
    let done = wait_kfdef(&api, "kubeflow", &format!("the example's KfDef Available (log: {})", log.display()), |k| phase(k) == Some(KfDefPhase::Available)).await;
    every_application_ready_from(&done, "kustomize");

    let (mesh_available, certs_available) = (mesh_available.await.unwrap(), certs_available.await.unwrap());
    for (what, written, backend) in [
        ("the Gateway", gateway.await.unwrap(), mesh_available),
        ("the Component's PeerAuthentication", peer_authentication.await.unwrap(), mesh_available),
        ("the mesh's webhook configuration", mesh_webhook.await.unwrap(), mesh_available),
        ("the Issuer", issuer.await.unwrap(), certs_available),
    ] {
        assert!(written > backend, "{what} was written at revision {written}, before the backend of the webhook admitting it was Available at {backend}");
    }
    // The Component was applied to the application it names (componentOf), which made its object.
    let applied_with = demo("PeerAuthentication", "peerauthentications", "demo-mesh").get("default").await.unwrap();
    assert_eq!(applied_with.annotations().get(component_framework::build::APPLICATION_ANNOTATION).map(String::as_str), Some(fixtures::MODERN_EXAMPLE_COMPONENT.1));
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(!text.contains("reconcile failed"), "a failed reconcile was logged: {}", log.display());
    // What waited for a backend was created, not "recreated": nobody deleted it.
    assert!(!text.contains("recreating deleted object"), "a held object's first write was taken for a heal: {}", log.display());

    api.delete("kubeflow", &DeleteParams::default()).await.unwrap();
    gone(&api, "kubeflow").await;
    gone(&mutating, "demo-mesh-defaulter").await;
    gone(&validating, "demo-certs-validator").await;
    gone(&demo("Gateway", "gateways", "kubeflow"), "kubeflow-gateway").await;
    for name in ["demo-certs", "demo-mesh"] {
        namespaces.delete(name, &DeleteParams::default()).await.unwrap();
    }
}

/// A package naming remote bases — a git reference and a release asset, as Kubeflow 1.11's
/// Pipelines and Trainer do — installs through the generic operator: the operator fetches them,
/// pinned, through the KfDef's `remoteBaseMirrors` (a loopback server in GitHub's archive and
/// release-asset layout), and what they bring is installed as the application's.
#[tokio::test]
async fn remote_bases_are_fetched_by_the_operator_through_the_kfdefs_mirror() {
    use k8s_openapi::api::core::v1::ServiceAccount;
    let _serial = SERIAL.lock().await;
    let client = client().await;
    let argo = std::env::temp_dir().join(unique_name("e2e-argo"));
    let minimal = argo.join("manifests/base/minimal");
    std::fs::create_dir_all(&minimal).unwrap();
    std::fs::write(minimal.join("kustomization.yaml"), "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [config.yaml]\n").unwrap();
    std::fs::write(minimal.join("config.yaml"), "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: workflow-controller-configmap}\ndata: {executor: emissary}\n").unwrap();
    let package = "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n\
                   - github.com/argoproj/argo-workflows/manifests/base/minimal?ref=v3.7.3\n\
                   - https://github.com/kubernetes-sigs/jobset/releases/download/v0.8.0/manifests.yaml\n";
    let server = fixtures::Server::start(BTreeMap::from([
        ("archive/v1.11.0.tar.gz".to_string(), fixtures::edited_modern_repo_tarball(&[("apps/remote/base/kustomization.yaml", "", package)])),
        ("argoproj/argo-workflows/archive/v3.7.3.tar.gz".to_string(), fixtures::pack_github_tarball(&argo, "argo-workflows-3.7.3")),
        ("kubernetes-sigs/jobset/releases/download/v0.8.0/manifests.yaml".to_string(), b"apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: jobset-controller-manager}\n".to_vec()),
    ]))
    .await;
    std::fs::remove_dir_all(&argo).unwrap();
    let stack = OperatorStack::start(&client, &[]).await;
    let log = stack.components[&kubeflow_crds::ComponentKind::GENERIC].log.clone();
    let ns = TestNamespace::create(&client, "e2e-remote-bases").await;
    let mut kfdef = fixtures::modern_example_kfdef(&server.url("archive/v1.11.0.tar.gz"), &ns.name);
    kfdef.spec.applications = serde_json::from_value(json!([{"name": "remote-pipeline", "kustomizeConfig": {"repoRef": {"name": "manifests", "path": "apps/remote/base"}}}])).unwrap();
    kfdef.spec.remote_base_mirrors = vec![format!("https://github.com/={}", server.url(""))];
    let api = api_in(&client, &ns.name);
    api.create(&PostParams::default(), &kfdef).await.unwrap();
    let done = wait_kfdef(&api, "kubeflow", &format!("the KfDef with remote bases Available (log: {})", log.display()), |k| phase(k) == Some(KfDefPhase::Available)).await;
    every_application_ready_from(&done, "kustomize");
    let config = Api::<ConfigMap>::namespaced(client.clone(), &ns.name).get("workflow-controller-configmap").await.unwrap();
    assert_eq!(config.data.unwrap()["executor"], "emissary");
    assert_eq!(config.metadata.annotations.unwrap_or_default().get(component_framework::build::APPLICATION_ANNOTATION).map(String::as_str), Some("remote-pipeline"));
    Api::<ServiceAccount>::namespaced(client.clone(), &ns.name).get("jobset-controller-manager").await.unwrap();
    api.delete("kubeflow", &DeleteParams::default()).await.unwrap();
    gone(&api, "kubeflow").await;
    gone(&Api::<ConfigMap>::namespaced(client.clone(), &ns.name), "workflow-controller-configmap").await;
}
