//! The generic component operator, installed from deploy/kustomize and run on the host with that
//! package's ServiceAccount, against the real control plane and the real kustomize: a
//! kfctl-style manifests repository (bases, overlays, params.env + configMapGenerator, vars,
//! commonLabels, a CRD with a custom resource, a webhook configuration, cluster-scoped RBAC) is
//! served as a GitHub-style tarball over loopback HTTP, and two of its applications converge;
//! a deleted object comes back; a parameter edit propagates; a bad URI, a missing path, a missing
//! overlay and a kustomize error each get a clear per-application reason and touch nothing else;
//! deleting the resource removes everything but CRDs and namespaces. A package shaped like current
//! kubeflow/manifests renders with kustomize v5, its webhook's backend ready before what the
//! webhook admits; its install is deleted even after its CRD was deleted by hand. A package that
//! grants to an account of a Profile's namespace is refused before any write.

use std::collections::BTreeMap;

use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use k8s_openapi::api::rbac::v1::ClusterRole;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use kubeflow_crds::KustomizeApplication;
use kubeflow_crds::component::{ComponentPhase, ComponentStatus};
use kubeflow_e2e::*;
use kubeflow_manifests::fixtures;
use serde_json::{Value, json};

fn resource(name: &str, target: &str, sources: Value) -> KustomizeApplication {
    serde_json::from_value(json!({
        "apiVersion": "components.kubeflow.org/v1alpha1", "kind": "KustomizeApplication", "metadata": {"name": name},
        "spec": {"version": "v1.0.2", "targetNamespace": target, "sources": sources},
    }))
    .unwrap()
}

async fn wait_status(api: &Api<KustomizeApplication>, name: &str, what: &str, check: impl Fn(&ComponentStatus) -> bool) -> ComponentStatus {
    eventually(what, || async {
        let r = api.get(name).await.map_err(|e| e.to_string())?;
        let status = r.status.clone().unwrap_or_default();
        if status.observed_generation == r.metadata.generation && check(&status) { Ok(status) } else { Err(format!("{status:?}")) }
    })
    .await
}

fn degraded_message(status: &ComponentStatus) -> Option<&str> {
    status.conditions.iter().find(|c| c.type_ == "Degraded" && c.status == kubeflow_crds::ConditionStatus::True).map(|c| c.message.as_str())
}

#[tokio::test]
async fn kfctl_applications_install_from_their_kustomize_packages() {
    let client = client().await;
    install_crds(&client).await;
    prepare_manifests_fixture(&client).await;
    let ns = TestNamespace::create(&client, "e2e-kustomize").await;
    let kubeconfig = install_package(&client, "kustomize").await;
    let server = fixtures::Server::start(BTreeMap::from([("archive/v1.0.2.tar.gz".to_string(), fixtures::repo_tarball())])).await;
    let uri = server.url("archive/v1.0.2.tar.gz");
    let cache = std::env::temp_dir().join(unique_name("kustomize-cache"));
    // The fixture repository is served on loopback, which the operator's fetch fence refuses.
    let operator = OperatorProcess::start("kustomize-operator", &["--namespace", &ns.name, "--allow-fetch-from", "127.0.0.1"], &[("KUBECONFIG", kubeconfig.to_str().unwrap()), ("KFOP_MANIFESTS_CACHE", cache.to_str().unwrap())]);
    operator.wait_ready().await;

    let target = TestNamespace::adopt(format!("{}-apps", ns.name));
    let api: Api<KustomizeApplication> = Api::namespaced(client.clone(), &ns.name);
    let sources = json!([
        {"application": "webhook", "repoUri": uri, "path": "demo/webhook"},
        {"application": "web-app", "repoUri": uri, "path": "demo/web-app", "overlays": ["application", "istio"],
         "parameters": [{"name": "userid-header", "value": "kubeflow-userid"}, {"name": "gateway", "value": "istio-system/ingressgateway"}]},
    ]);
    api.create(&PostParams::default(), &resource("demo", &target.name, sources.clone())).await.unwrap();
    let ready = wait_status(&api, "demo", &format!("demo Ready (log: {})", operator.log.display()), |s| s.phase == Some(ComponentPhase::Ready)).await;

    // Every rendered object is installed, in the target namespace where namespaced.
    let kinds: Vec<(String, String)> = ready.inventory.iter().map(|e| (e.kind.clone(), e.name.clone())).collect();
    for expected in [
        ("CustomResourceDefinition", "tenants.demo.kubeflow.org"), ("ClusterRole", "tenant-webhook"), ("Deployment", "tenant-webhook"),
        ("MutatingWebhookConfiguration", "tenant-defaulter"), ("Tenant", "default-tenant"), ("ConfigMap", "web-app-parameters"),
        ("ClusterRoleBinding", "web-app-binding"), ("Deployment", "web-app"), ("Application", "web-app"), ("VirtualService", "web-app"),
    ] {
        assert!(kinds.contains(&(expected.0.to_string(), expected.1.to_string())), "{expected:?} missing from {kinds:?}");
    }
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), &target.name);
    let parameters = config_maps.get("web-app-parameters").await.unwrap();
    assert_eq!(parameters.data.as_ref().unwrap()["userid-header"], "kubeflow-userid");
    assert_eq!(parameters.annotations().get("components.kubeflow.org/application").map(String::as_str), Some("web-app"));
    let tenants = Api::<DynamicObject>::namespaced_with(client.clone(), &target.name, &ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("demo.kubeflow.org", "v1", "Tenant"), "tenants"));
    assert_eq!(tenants.get("default-tenant").await.unwrap().data["spec"]["owner"], "admin@example.com");
    let deployment = Api::<Deployment>::namespaced(client.clone(), &target.name).get("web-app").await.unwrap();
    assert_eq!(deployment.annotations().get("demo.kubeflow.org/served-from").map(String::as_str), Some(target.name.as_str()), "vars resolved to the target namespace");
    Api::<MutatingWebhookConfiguration>::all(client.clone()).get("tenant-defaulter").await.unwrap();

    // Heal: a deleted object comes back.
    delete_and_await_recreation(&config_maps, "web-app-parameters").await;

    // A parameter edit reaches params.env and so the ConfigMap.
    let mut edited = sources.clone();
    edited[1]["parameters"][0]["value"] = json!("x-forwarded-user");
    api.patch("demo", &PatchParams::default(), &Patch::Merge(json!({"spec": {"sources": edited}}))).await.unwrap();
    eventually("userid-header edited", || async {
        let data = config_maps.get("web-app-parameters").await.map_err(|e| e.to_string())?.data.unwrap_or_default();
        if data.get("userid-header").map(String::as_str) == Some("x-forwarded-user") { Ok(()) } else { Err(format!("{data:?}")) }
    })
    .await;
    wait_status(&api, "demo", "demo Ready after the edit", |s| s.phase == Some(ComponentPhase::Ready)).await;

    // Bad input, each in its own resource: a clear reason naming the application, nothing else touched.
    let bad_cases = [
        ("bad-uri", json!([{"application": "web", "repoUri": server.url("archive/missing.tar.gz"), "path": "demo/web-app"}]), "spec.sources[0].repoUri", "404"),
        ("bad-path", json!([{"application": "web", "repoUri": uri, "path": "demo/missing"}]), "spec.sources[0]", "demo/missing"),
        ("bad-overlay", json!([{"application": "web", "repoUri": uri, "path": "demo/web-app", "overlays": ["gcp"]}]), "spec.sources[0]", r#"overlay "gcp" does not exist (available: ["application", "istio"])"#),
        ("bad-kustomize", json!([{"application": "broken", "repoUri": uri, "path": "demo/broken"}]), "spec.sources[0]", "does-not-exist.yaml"),
    ];
    for (name, sources, field, detail) in &bad_cases {
        api.create(&PostParams::default(), &resource(name, &target.name, sources.clone())).await.unwrap();
        let status = wait_status(&api, name, &format!("{name} Degraded"), |s| degraded_message(s).is_some()).await;
        let message = degraded_message(&status).unwrap();
        assert!(message.starts_with(&format!("{field}: ")) && message.contains(detail), "{name}: {message}");
        assert!(status.inventory.is_empty(), "{name} installed something: {:?}", status.inventory);
    }
    let still = api.get("demo").await.unwrap().status.unwrap();
    assert_eq!(still.phase, Some(ComponentPhase::Ready));
    for (name, ..) in &bad_cases {
        api.delete(name, &DeleteParams::default()).await.unwrap();
        gone(&api, name).await;
    }

    // Deleting the resource removes everything it installed but CRDs and namespaces.
    api.delete("demo", &DeleteParams::default()).await.unwrap();
    gone(&api, "demo").await;
    gone(&config_maps, "web-app-parameters").await;
    gone(&Api::<ClusterRole>::all(client.clone()), "tenant-webhook").await;
    gone(&Api::<MutatingWebhookConfiguration>::all(client.clone()), "tenant-defaulter").await;
    assert!(Api::<CustomResourceDefinition>::all(client.clone()).get_opt("tenants.demo.kubeflow.org").await.unwrap().is_some(), "a CRD was deleted");
    assert!(Api::<Namespace>::all(client.clone()).get_opt("demo-tenants").await.unwrap().is_some(), "a namespace was deleted");
    let _ = std::fs::remove_dir_all(&cache);
}

/// Fetching and rendering are fenced: a repository at the cloud metadata address is refused
/// without a request, the status naming the address and the rule; a repository whose
/// kustomization is not valid YAML is refused before kustomize runs; one kustomize refuses is
/// reported with paths inside the repository only.
#[tokio::test]
async fn fenced_repositories_and_unparsable_kustomizations_are_refused() {
    let client = client().await;
    install_crds(&client).await;
    let ns = TestNamespace::create_tenant(&client, "e2e-kustomize-fence").await;
    let kubeconfig = install_package(&client, "kustomize").await;
    let broken = fixtures::edited_repo_tarball(&[("demo/webhook/kustomization.yaml", "kind: Kustomization\n", "kind: Kustomization: [\n")]);
    let server = fixtures::Server::start(BTreeMap::from([("archive/broken.tar.gz".to_string(), broken)])).await;
    let cache = std::env::temp_dir().join(unique_name("kustomize-fence-cache"));
    let operator = OperatorProcess::start("kustomize-operator", &["--namespace", &ns.name, "--allow-fetch-from", "127.0.0.1"], &[("KUBECONFIG", kubeconfig.to_str().unwrap()), ("KFOP_MANIFESTS_CACHE", cache.to_str().unwrap())]);
    operator.wait_ready().await;
    let api: Api<KustomizeApplication> = Api::namespaced(client.clone(), &ns.name);

    let metadata = "http://169.254.169.254/latest/meta-data.tar.gz";
    api.create(&PostParams::default(), &resource("metadata", &ns.name, json!([{"application": "meta", "repoUri": metadata, "path": "demo/webhook"}]))).await.unwrap();
    let status = wait_status(&api, "metadata", &format!("metadata Degraded (log: {})", operator.log.display()), |s| degraded_message(s).is_some()).await;
    let message = degraded_message(&status).unwrap();
    assert!(message.starts_with("spec.sources[0].repoUri: ") && message.contains(metadata), "{message}");
    assert!(message.contains("refused: 169.254.169.254 is link-local (169.254.0.0/16") && message.contains("--allow-fetch-from"), "{message}");
    assert!(status.inventory.is_empty(), "{:?}", status.inventory);
    // Nothing was fetched: no download begun, nothing unpacked.
    let held = |sub: &str| std::fs::read_dir(cache.join("repos").join(sub)).map(|d| d.count()).unwrap_or(0);
    assert_eq!((held("repos"), held("tmp")), (0, 0));

    // Stacks mode builds the path as it is: its kustomization is checked before kustomize runs.
    let mut unparsable = resource("unparsable", &ns.name, json!([{"application": "broken", "repoUri": server.url("archive/broken.tar.gz"), "path": "demo/webhook"}]));
    unparsable.spec.core.mode = kubeflow_crds::component::RenderMode::Stacks;
    api.create(&PostParams::default(), &unparsable).await.unwrap();
    let status = wait_status(&api, "unparsable", "unparsable Degraded", |s| degraded_message(s).is_some()).await;
    let message = degraded_message(&status).unwrap();
    assert!(message.starts_with("spec.sources[0]: ") && message.contains("demo/webhook/kustomization.yaml is refused: it is not valid YAML"), "{message}");
    assert!(status.inventory.is_empty(), "{:?}", status.inventory);

    // A package kustomize itself refuses (a resource that is not there): the status names the
    // file inside its repository, never where the operator keeps its cache or builds.
    let missing = fixtures::edited_repo_tarball(&[("demo/webhook/kustomization.yaml", "- crd.yaml\n", "- crd.yaml\n- missing.yaml\n")]);
    let server = fixtures::Server::start(BTreeMap::from([("archive/missing.tar.gz".to_string(), missing)])).await;
    api.create(&PostParams::default(), &resource("missing", &ns.name, json!([{"application": "missing", "repoUri": server.url("archive/missing.tar.gz"), "path": "demo/webhook"}]))).await.unwrap();
    let status = wait_status(&api, "missing", "missing Degraded", |s| degraded_message(s).is_some()).await;
    let message = degraded_message(&status).unwrap();
    assert!(message.starts_with("spec.sources[0]: ") && message.contains("demo/webhook/missing.yaml"), "{message}");
    let (cache_path, temp) = (cache.display().to_string(), std::env::temp_dir().display().to_string());
    assert!(!message.contains(&cache_path) && !message.contains(temp.trim_end_matches('/')), "a server path in the status: {message}");

    for name in ["metadata", "unparsable", "missing"] {
        api.delete(name, &DeleteParams::default()).await.unwrap();
        gone(&api, name).await;
    }
    let _ = std::fs::remove_dir_all(&cache);
}

/// A platform install never grants anything to an account of a tenant's namespace: a package
/// whose ClusterRoleBinding binds ServiceAccount `prometheus` of a namespace a Profile made (a
/// tenant who registered Profile `monitoring` and made that account would otherwise inherit the
/// grant) is refused before anything is written, the status naming the binding, the field and
/// the namespace's owner, though its installer may bind anything.
#[tokio::test]
async fn a_grant_to_an_account_in_a_profiles_namespace_is_refused() {
    let client = client().await;
    install_crds(&client).await;
    let ns = TestNamespace::create(&client, "e2e-kustomize-grant").await;
    // As the profiles operator labels every Profile's namespace.
    let tenant = TestNamespace::create_tenant(&client, "e2e-monitoring").await;
    let labelled = json!({"metadata": {"labels": {"app.kubernetes.io/part-of": "kubeflow-profile"}}});
    Api::<Namespace>::all(client.clone()).patch(&tenant.name, &PatchParams::default(), &Patch::Merge(labelled)).await.unwrap();
    let kubeconfig = install_package(&client, "kustomize").await;

    let binding = format!("{}-prometheus-view", ns.name);
    let tmp = std::env::temp_dir().join(unique_name("grant-repo"));
    let dir = tmp.join("grant");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("kustomization.yaml"), "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n- objects.yaml\n").unwrap();
    let objects = format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: grant-config\ndata:\n  a: b\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata:\n  name: {binding}\nroleRef:\n  apiGroup: rbac.authorization.k8s.io\n  kind: ClusterRole\n  name: view\nsubjects:\n- kind: ServiceAccount\n  name: prometheus\n  namespace: {}\n",
        tenant.name
    );
    std::fs::write(dir.join("objects.yaml"), objects).unwrap();
    let tarball = fixtures::pack_github_tarball(&tmp, "manifests-grant");
    std::fs::remove_dir_all(&tmp).unwrap();
    let server = fixtures::Server::start(BTreeMap::from([("archive/grant.tar.gz".to_string(), tarball)])).await;
    let cache = std::env::temp_dir().join(unique_name("kustomize-grant-cache"));
    let operator = OperatorProcess::start("kustomize-operator", &["--namespace", &ns.name, "--allow-fetch-from", "127.0.0.1"], &[("KUBECONFIG", kubeconfig.to_str().unwrap()), ("KFOP_MANIFESTS_CACHE", cache.to_str().unwrap())]);
    operator.wait_ready().await;

    let api: Api<KustomizeApplication> = Api::namespaced(client.clone(), &ns.name);
    let mut grant = resource("grant", &ns.name, json!([{"application": "grant", "repoUri": server.url("archive/grant.tar.gz"), "path": "grant"}]));
    grant.spec.core.mode = kubeflow_crds::component::RenderMode::Stacks;
    api.create(&PostParams::default(), &grant).await.unwrap();
    let status = wait_status(&api, "grant", &format!("grant Degraded (log: {})", operator.log.display()), |s| degraded_message(s).is_some()).await;
    let message = degraded_message(&status).unwrap();
    let named = format!("ClusterRoleBinding {binding}: subjects[0].namespace names namespace {0}, and namespace {0} belongs to a Profile", tenant.name);
    assert!(message.contains(&named), "{message}");
    assert!(status.inventory.is_empty(), "{:?}", status.inventory);
    assert!(Api::<k8s_openapi::api::rbac::v1::ClusterRoleBinding>::all(client.clone()).get_opt(&binding).await.unwrap().is_none(), "the grant was applied");
    assert!(Api::<ConfigMap>::namespaced(client.clone(), &ns.name).get_opt("grant-config").await.unwrap().is_none(), "part of the refused install was applied");

    api.delete("grant", &DeleteParams::default()).await.unwrap();
    gone(&api, "grant").await;
}

/// A package shaped like current kubeflow/manifests (kustomize v5 only: `labels`) with
/// cert-manager's shape: the webhook's backend Deployment is Available before the Issuer it
/// admits and the webhook configuration itself are written — compared by etcd revision, not by
/// clock — and no apply fails on the way.
#[tokio::test]
async fn a_webhook_backend_is_ready_before_what_it_admits() {
    use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
    let client = client().await;
    install_crds(&client).await;
    prepare_manifests_fixture(&client).await;
    // The package's own namespace and webhook, left by an interrupted run, would be another
    // install's objects.
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let webhooks: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    if namespaces.get_opt("demo-certs").await.unwrap().is_some() {
        namespaces.delete("demo-certs", &DeleteParams::default()).await.unwrap();
    }
    if webhooks.get_opt("demo-certs-validator").await.unwrap().is_some() {
        webhooks.delete("demo-certs-validator", &DeleteParams::default()).await.unwrap();
    }
    gone(&namespaces, "demo-certs").await;
    gone(&webhooks, "demo-certs-validator").await;
    let ns = TestNamespace::create(&client, "e2e-kustomize-webhook").await;
    let kubeconfig = install_package(&client, "kustomize").await;
    let server = fixtures::Server::start(BTreeMap::from([("archive/v1.11.0.tar.gz".to_string(), fixtures::modern_repo_tarball())])).await;
    let uri = server.url("archive/v1.11.0.tar.gz");

    let available = revision_when(Api::<Deployment>::namespaced(client.clone(), "demo-certs"), "certs-webhook", |d| {
        d.status.iter().flat_map(|s| s.conditions.iter().flatten()).any(|c| c.type_ == "Available" && c.status == "True")
    });
    let issuers = ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("demo.kubeflow.org", "v1", "Issuer"), "issuers");
    let issuer_created = revision_when(Api::<DynamicObject>::namespaced_with(client.clone(), "demo-certs", &issuers), "selfsigned", |_| true);
    let webhook_created = revision_when(webhooks.clone(), "demo-certs-validator", |_| true);

    let cache = std::env::temp_dir().join(unique_name("kustomize-cache"));
    let operator = OperatorProcess::start("kustomize-operator", &["--namespace", &ns.name, "--allow-fetch-from", "127.0.0.1"], &[("KUBECONFIG", kubeconfig.to_str().unwrap()), ("KFOP_MANIFESTS_CACHE", cache.to_str().unwrap())]);
    operator.wait_ready().await;
    let api: Api<KustomizeApplication> = Api::namespaced(client.clone(), &ns.name);
    let sources = json!([{"application": "certs", "repoUri": uri, "path": "common/certs/base"}]);
    api.create(&PostParams::default(), &resource("certs", &ns.name, sources)).await.unwrap();
    wait_status(&api, "certs", &format!("certs Ready (log: {})", operator.log.display()), |s| s.phase == Some(ComponentPhase::Ready)).await;

    let available = available.await.unwrap();
    let (issuer_created, webhook_created) = (issuer_created.await.unwrap(), webhook_created.await.unwrap());
    assert!(issuer_created > available, "the Issuer was written at revision {issuer_created}, before its webhook's backend was Available at {available}");
    assert!(webhook_created > available, "the webhook configuration was written at revision {webhook_created}, before its backend was Available at {available}");
    let log = std::fs::read_to_string(&operator.log).unwrap();
    assert!(!log.contains("reconcile failed"), "a failed reconcile was logged: {}", operator.log.display());

    // The install's CRD deleted by hand while the operator is down (its Issuer goes with it): the
    // install is still deleted, an object of a kind no longer served counted as gone.
    let mut operator = operator;
    operator.kill();
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.delete("issuers.demo.kubeflow.org", &DeleteParams::default()).await.unwrap();
    gone(&crds, "issuers.demo.kubeflow.org").await;
    api.delete("certs", &DeleteParams::default()).await.unwrap();
    let operator = OperatorProcess::start("kustomize-operator", &["--namespace", &ns.name, "--allow-fetch-from", "127.0.0.1"], &[("KUBECONFIG", kubeconfig.to_str().unwrap()), ("KFOP_MANIFESTS_CACHE", cache.to_str().unwrap())]);
    operator.wait_ready().await;
    gone(&api, "certs").await;
    gone(&webhooks, "demo-certs-validator").await;
    namespaces.delete("demo-certs", &DeleteParams::default()).await.unwrap();
    let _ = std::fs::remove_dir_all(&cache);
}

/// A CRD kept when the install that made it was deleted (CRDs stay unless asked) is labelled for
/// its component and names no owner, as CRDs are shared by every install of a component. While an
/// install of that component exists anywhere it is left alone, the application failed, naming
/// it; once none does, the next install that renders the CRD takes it over, with no manual step
/// (the real 1.10.2 KfDef stayed Degraded on `profiles.kubeflow.org` after the demo's KfDef was
/// deleted, until someone relabelled the CRD).
#[tokio::test]
async fn a_crd_kept_by_a_deleted_install_goes_to_the_next_install_that_renders_it() {
    let client = client().await;
    install_crds(&client).await;
    let ns = TestNamespace::create(&client, "e2e-leftover").await;
    let kubeconfig = install_package(&client, "kustomize").await;
    let group = format!("{}.example.org", ns.name);
    let crd = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition", "metadata": {"name": format!("gadgets.{group}")},
        "spec": {"group": group, "names": {"kind": "Gadget", "plural": "gadgets", "singular": "gadget"}, "scope": "Namespaced",
                 "versions": [{"name": "v1", "served": true, "storage": true, "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]}});
    let package = "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [crd.yaml]\n";
    let tarball = fixtures::edited_repo_tarball(&[("demo/gadgets/kustomization.yaml", "", package), ("demo/gadgets/crd.yaml", "", &serde_yaml_ng::to_string(&crd).unwrap())]);
    let server = fixtures::Server::start(BTreeMap::from([("archive/gadgets.tar.gz".to_string(), tarball)])).await;
    // As Katib's operator leaves one of its CRDs: its component's label, no owner.
    let definitions: Api<CustomResourceDefinition> = Api::all(client.clone());
    let mut leftover: CustomResourceDefinition = serde_json::from_value(crd.clone()).unwrap();
    leftover.metadata.labels = Some(BTreeMap::from([("components.kubeflow.org/part-of".to_string(), "katib".to_string()), ("components.kubeflow.org/version".to_string(), "v0.18.0".to_string())]));
    definitions.create(&PostParams::default(), &leftover).await.unwrap();
    let name = leftover.name_any();
    // A Katib install exists (no operator runs it here): the CRD is still someone's.
    let katibs: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns.name, &kubeflow_crds::ComponentKind::Katib.api_resource());
    let katib: DynamicObject = serde_json::from_value(json!({"apiVersion": "components.kubeflow.org/v1alpha1", "kind": "Katib", "metadata": {"name": "katib"}, "spec": {"version": "v0.18.0"}})).unwrap();
    katibs.create(&PostParams::default(), &katib).await.unwrap();

    let cache = std::env::temp_dir().join(unique_name("leftover-cache"));
    let operator = OperatorProcess::start("kustomize-operator", &["--namespace", &ns.name, "--allow-fetch-from", "127.0.0.1"], &[("KUBECONFIG", kubeconfig.to_str().unwrap()), ("KFOP_MANIFESTS_CACHE", cache.to_str().unwrap())]);
    operator.wait_ready().await;
    let api: Api<KustomizeApplication> = Api::namespaced(client.clone(), &ns.name);
    api.create(&PostParams::default(), &resource("gadgets", &ns.name, json!([{"application": "gadgets", "repoUri": server.url("archive/gadgets.tar.gz"), "path": "demo/gadgets"}]))).await.unwrap();
    let status = wait_status(&api, "gadgets", &format!("gadgets Degraded (log: {})", operator.log.display()), |s| degraded_message(s).is_some()).await;
    let message = degraded_message(&status).unwrap();
    assert!(message.contains(&name) && message.contains("belongs to katib"), "{message}");
    assert_eq!(definitions.get(&name).await.unwrap().labels()["components.kubeflow.org/part-of"], "katib", "taken while its component is installed");

    // The Katib install goes: nobody's, so the waiting install takes it over.
    katibs.delete("katib", &DeleteParams::default()).await.unwrap();
    gone(&katibs, "katib").await;
    wait_status(&api, "gadgets", "gadgets Ready after the Katib install went", |s| s.phase == Some(ComponentPhase::Ready)).await;
    let taken = definitions.get(&name).await.unwrap();
    assert_eq!(taken.labels()["components.kubeflow.org/part-of"], "kustomize");

    api.delete("gadgets", &DeleteParams::default()).await.unwrap();
    gone(&api, "gadgets").await;
    definitions.delete(&name, &DeleteParams::default()).await.unwrap();
    let _ = std::fs::remove_dir_all(&cache);
}
