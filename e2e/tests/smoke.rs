//! Smoke tests of the local environment: the real control plane, kwok and nats-server behave as
//! the operators' end-to-end tests rely on, and the project's CRDs install and validate.


use async_nats::jetstream;
use kubeflow_crds::bus::Identity;
use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{DeleteParams, DynamicObject, ObjectMeta, Patch, PatchParams, PostParams};
use kube::core::ApiResource;
use kube::{Api, Resource, ResourceExt};
use kubeflow_crds::component::{ComponentSpecCore, ComponentStatus};
use kubeflow_crds::{Dex, Istio, KFServing, Katib, KfDef, KfUpgrade, Pipelines};
use kubeflow_e2e::*;
use serde_json::{Value, json};

#[tokio::test]
async fn api_server_reports_the_version_it_was_built_as() {
    let client = client().await;
    let info = client.apiserver_version().await.unwrap();
    let expected = std::env::var("KFOP_KUBE_VERSION").expect("KFOP_KUBE_VERSION from the env file");
    assert_eq!(info.git_version, expected);
    let (major, minor) = expected.trim_start_matches('v').split_once('.').unwrap();
    assert_eq!(info.major, major);
    assert_eq!(info.minor, minor.split('.').next().unwrap());
}

#[tokio::test]
async fn all_crds_install_and_become_established() {
    let client = client().await;
    let names = install_crds(&client).await;
    // KfDef, KfUpgrade, FleetCluster and one per component.
    assert_eq!(names.len(), 10, "{names:?}");
    for expected in ["kfdefs.kfdef.apps.kubeflow.org", "kfupgrades.kfupgrade.apps.kubeflow.org", "fleetclusters.fleet.kubeflow.org", "katibs.components.kubeflow.org"] {
        assert!(names.iter().any(|n| n == expected), "{expected} missing from {names:?}");
    }
}

/// Creates the KfDef `yaml` in `ns` exactly as written (no typed round trip) and returns what the API server
/// stored.
async fn create_kfdef_untyped(client: &kube::Client, ns: &str, yaml: &str) -> (Value, Value) {
    let mut original: Value = serde_yaml_ng::from_str(yaml).unwrap();
    original["metadata"]["namespace"] = json!(ns);
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &ApiResource::erase::<KfDef>(&()));
    let object: DynamicObject = serde_json::from_value(original.clone()).unwrap();
    let created = api.create(&PostParams::default(), &object).await.unwrap();
    let stored = api.get(&created.name_any()).await.unwrap();
    (original, serde_json::to_value(stored).unwrap())
}

#[tokio::test]
async fn kfctl_kfdefs_are_stored_unchanged() {
    let client = client().await;
    install_crds(&client).await;
    let ns = TestNamespace::create(&client, "e2e-kfdef").await;
    for file in ["kfdef-kfctl-istio-dex.yaml", "kfdef-kfctl-gcp.yaml"] {
        let yaml = std::fs::read_to_string(format!("{}/../examples/{file}", env!("CARGO_MANIFEST_DIR"))).unwrap();
        let (original, stored) = create_kfdef_untyped(&client, &ns.name, &yaml).await;
        assert_eq!(original["spec"], stored["spec"], "{file}: the API server changed or pruned the spec");
        // And the typed client reads it back.
        let typed = Api::<KfDef>::namespaced(client.clone(), &ns.name)
            .get(original["metadata"]["name"].as_str().unwrap())
            .await
            .unwrap();
        assert_eq!(serde_json::to_value(&typed.spec).unwrap(), original["spec"], "{file}");
    }
}

fn core(version: &str) -> ComponentSpecCore {
    ComponentSpecCore { version: version.into(), ..Default::default() }
}

/// Creates `object` and checks that what the API server returns has the same spec, defaults applied.
async fn create_and_read_back<K>(client: &kube::Client, ns: &str, object: K) -> K
where
    K: Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
        + Clone
        + std::fmt::Debug
        + serde::Serialize
        + serde::de::DeserializeOwned,
{
    let api: Api<K> = Api::namespaced(client.clone(), ns);
    api.create(&PostParams::default(), &object).await.unwrap_or_else(|e| panic!("create {}: {e}", K::kind(&())));
    api.get(&object.name_any()).await.unwrap()
}

#[tokio::test]
async fn each_component_resource_is_created_and_read_back() {
    let client = client().await;
    install_crds(&client).await;
    let ns = TestNamespace::create(&client, "e2e-components").await;
    let n = &ns.name;

    let mut istio = Istio::new("istio", serde_json::from_value(json!({"version": "1.9.6", "gateway": {"serviceType": "NodePort"}})).unwrap());
    istio.spec.core.target_namespace = Some("istio-system".into());
    let read = create_and_read_back(&client, n, istio.clone()).await;
    assert_eq!(read.spec, istio.spec);

    let dex: Dex = Dex::new("dex", serde_json::from_value(json!({
        "version": "v2.24.0",
        "issuer": "http://dex.auth.svc.cluster.local:5556/dex",
        "connectors": [{"type": "ldap", "id": "ldap", "name": "LDAP", "config": {"host": "ldap.example.com:636"}}],
        "staticPasswordsSecretRef": {"name": "dex-users", "key": "passwords.yaml"},
    })).unwrap());
    assert_eq!(create_and_read_back(&client, n, dex.clone()).await.spec, dex.spec);

    let kfserving = KFServing::new("kfserving", serde_json::from_value(json!({"version": "v0.5.1", "ingressDomain": "models.example.com"})).unwrap());
    assert_eq!(create_and_read_back(&client, n, kfserving.clone()).await.spec, kfserving.spec);

    let katib = Katib::new("katib", serde_json::from_value(json!({"version": "v0.11.0", "managementState": "Unmanaged"})).unwrap());
    assert_eq!(create_and_read_back(&client, n, katib.clone()).await.spec, katib.spec);

    let mut pipelines = Pipelines::new("pipelines", serde_json::from_value(json!({
        "version": "1.5.0",
        "database": {"host": "mysql.example.com", "port": 3306, "secretRef": {"name": "db", "key": "password"}},
    })).unwrap());
    pipelines.spec.core = ComponentSpecCore { overrides: serde_json::from_value(json!({"replicas": {"ml-pipeline": 2}})).unwrap(), ..core("1.5.0") };
    let read = create_and_read_back(&client, n, pipelines.clone()).await;
    assert_eq!(read.spec, pipelines.spec);

    // The status subresource accepts the shared status core.
    let api: Api<Pipelines> = Api::namespaced(client.clone(), n);
    let status = ComponentStatus { installed_version: Some("1.5.0".into()), observed_generation: Some(1), ..Default::default() };
    api.patch_status("pipelines", &PatchParams::apply(FIELD_MANAGER), &Patch::Apply(json!({
        "apiVersion": "components.kubeflow.org/v1alpha1", "kind": "Pipelines", "status": status,
    })))
    .await
    .unwrap();
    assert_eq!(api.get("pipelines").await.unwrap().status.unwrap().installed_version.as_deref(), Some("1.5.0"));
}

/// Creates an object from JSON and returns the API server's refusal message.
async fn rejection<K: Resource<DynamicType = ()>>(client: &kube::Client, ns: &str, object: Value) -> String {
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &ApiResource::erase::<K>(&()));
    match api.create(&PostParams::default(), &serde_json::from_value(object).unwrap()).await {
        Ok(created) => panic!("API server accepted an invalid object: {created:?}"),
        Err(kube::Error::Api(status)) => {
            assert_eq!(status.code, 422, "{status:?}");
            status.message
        }
        Err(other) => panic!("unexpected error: {other}"),
    }
}

#[tokio::test]
async fn invalid_specs_are_rejected_with_the_offending_field_named() {
    let client = client().await;
    install_crds(&client).await;
    let ns = TestNamespace::create(&client, "e2e-invalid").await;
    let n = &ns.name;

    let msg = rejection::<Katib>(&client, n, json!({
        "apiVersion": "components.kubeflow.org/v1alpha1", "kind": "Katib", "metadata": {"name": "bad"},
        "spec": {"version": "v0.11.0", "managementState": "Sometimes"},
    })).await;
    assert!(msg.contains("spec.managementState") && msg.contains("\"Managed\", \"Removed\", \"Unmanaged\""), "{msg}");

    let msg = rejection::<Dex>(&client, n, json!({
        "apiVersion": "components.kubeflow.org/v1alpha1", "kind": "Dex", "metadata": {"name": "bad"},
        "spec": {"version": "latest"},
    })).await;
    assert!(msg.contains("spec.version") && msg.contains("should match"), "{msg}");

    // CEL: an external database needs credentials.
    let msg = rejection::<Pipelines>(&client, n, json!({
        "apiVersion": "components.kubeflow.org/v1alpha1", "kind": "Pipelines", "metadata": {"name": "bad"},
        "spec": {"version": "1.5.0", "database": {"host": "mysql.example.com"}},
    })).await;
    assert!(msg.contains("spec.database") && msg.contains("secretRef is required"), "{msg}");

    // Application names are the list's key: a duplicate is named.
    let msg = rejection::<KfDef>(&client, n, json!({
        "apiVersion": "kfdef.apps.kubeflow.org/v1", "kind": "KfDef", "metadata": {"name": "bad"},
        "spec": {"applications": [{"name": "katib-crds"}, {"name": "katib-crds"}]},
    })).await;
    assert!(msg.contains("spec.applications[1]") && msg.contains("Duplicate value"), "{msg}");

    // A KfUpgrade without the kfctl fields it needs.
    let msg = rejection::<KfUpgrade>(&client, n, json!({
        "apiVersion": "kfupgrade.apps.kubeflow.org/v1alpha1", "kind": "KfUpgrade", "metadata": {"name": "bad"},
        "spec": {"currentKfDef": {"name": "kubeflow"}},
    })).await;
    assert!(msg.contains("spec.newKfDef") && msg.contains("Required value"), "{msg}");
}

/// What the schema and CEL rules decide (README "Admission"): each refusal names the field path
/// and says what is allowed, and the valid variant of each object is accepted.
#[tokio::test]
async fn schema_and_cel_rules_reject_bad_names_images_duplicates_and_impossible_combinations() {
    let client = client().await;
    install_crds(&client).await;
    let ns = TestNamespace::create(&client, "e2e-admission").await;
    let n = &ns.name;
    let katib = |name: &str, spec: Value| json!({"apiVersion": "components.kubeflow.org/v1alpha1", "kind": "Katib", "metadata": {"name": name}, "spec": spec});

    let msg = rejection::<Katib>(&client, n, katib("bad", json!({"version": "v0.11.0", "targetNamespace": "Kubeflow_NS"}))).await;
    assert!(msg.contains("spec.targetNamespace") && msg.contains("should match"), "{msg}");

    // An image override names its registry host; the path names the container.
    let msg = rejection::<Katib>(&client, n, katib("bad", json!({"version": "v0.11.0", "overrides": {"images": {"katib-ui": "katib-ui:v1"}}}))).await;
    assert!(msg.contains("spec.overrides.images[katib-ui]") && msg.contains("registry host"), "{msg}");
    let msg = rejection::<Katib>(&client, n, katib("bad", json!({"version": "v0.11.0", "overrides": {"images": {"Katib_UI": "registry.local/katib-ui:v1"}}}))).await;
    assert!(msg.contains("spec.overrides.images") && msg.contains("keys must be container names"), "{msg}");
    // A replica count that does not fit the int32 the operators decode is refused, not stored.
    let msg = rejection::<Katib>(&client, n, katib("bad", json!({"version": "v0.11.0", "overrides": {"replicas": {"katib-ui": 3_000_000_000u64}}}))).await;
    assert!(msg.contains("spec.overrides.replicas.katib-ui") && msg.contains("less than or equal to 2147483647"), "{msg}");
    let msg = rejection::<Katib>(&client, n, katib("bad", json!({"version": "v0.11.0", "overrides": {"parameters": [{"name": "a", "value": "1"}, {"name": "a", "value": "2"}]}}))).await;
    assert!(msg.contains("spec.overrides.parameters[1]") && msg.contains("Duplicate value"), "{msg}");
    let msg = rejection::<Katib>(&client, n, katib("bad", json!({"version": "v0.11.0", "database": {"host": "db.example.com", "secretRef": {"name": "Katib DB", "key": "password"}}}))).await;
    assert!(msg.contains("spec.database.secretRef.name") && msg.contains("should match"), "{msg}");
    // The valid variant of each: a qualified image (registry with a port, localhost, a digest), a DNS namespace.
    let valid = katib("good", json!({
        "version": "v0.11.0", "targetNamespace": "kubeflow",
        "overrides": {
            "images": {
                "katib-ui": "registry.local/katib-ui:patched",
                "katib-controller": "mirror:5000/katib/katib-controller:v0.11.0",
                "katib-db-manager": "localhost/katib/katib-db-manager@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
            },
            "replicas": {"katib-ui": 2},
            "parameters": [{"name": "a", "value": "1"}, {"name": "b", "value": "2"}],
        },
    }));
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), n, &ApiResource::erase::<Katib>(&()));
    api.create(&PostParams::default(), &serde_json::from_value(valid).unwrap()).await.expect("a valid Katib is accepted");

    // Istio: one Service cannot expose the same port twice.
    let msg = rejection::<Istio>(&client, n, json!({
        "apiVersion": "components.kubeflow.org/v1alpha1", "kind": "Istio", "metadata": {"name": "bad"},
        "spec": {"version": "1.9.6", "gateway": {"httpPort": 8080, "httpsPort": 8080}},
    })).await;
    assert!(msg.contains("spec.gateway.httpsPort") && msg.contains("must differ"), "{msg}");

    // Dex connectors are keyed by id.
    let msg = rejection::<Dex>(&client, n, json!({
        "apiVersion": "components.kubeflow.org/v1alpha1", "kind": "Dex", "metadata": {"name": "bad"},
        "spec": {"version": "v2.24.0", "connectors": [{"type": "github", "id": "gh", "name": "GitHub"}, {"type": "ldap", "id": "gh", "name": "LDAP"}]},
    })).await;
    assert!(msg.contains("spec.connectors[1]") && msg.contains("Duplicate value"), "{msg}");

    // KfDef: names are DNS subdomains, parameters and repos unique by name.
    let kfdef = |spec: Value| json!({"apiVersion": "kfdef.apps.kubeflow.org/v1", "kind": "KfDef", "metadata": {"name": "bad"}, "spec": spec});
    let msg = rejection::<KfDef>(&client, n, kfdef(json!({"applications": [{"name": "katib-crds"}, {"name": "Katib CRDs"}]}))).await;
    assert!(msg.contains("spec.applications[1].name") && msg.contains("should match"), "{msg}");
    let msg = rejection::<KfDef>(&client, n, kfdef(json!({"repos": [{"name": "manifests", "uri": "https://a"}, {"name": "manifests", "uri": "https://b"}]}))).await;
    assert!(msg.contains("spec.repos[1]") && msg.contains("Duplicate value"), "{msg}");
    let msg = rejection::<KfDef>(&client, n, kfdef(json!({"applications": [{"name": "katib-crds", "kustomizeConfig": {"parameters": [{"name": "ns", "value": "a"}, {"name": "ns", "value": "b"}]}}]}))).await;
    assert!(msg.contains("spec.applications[0].kustomizeConfig.parameters[1]") && msg.contains("Duplicate value"), "{msg}");

    // KfUpgrade: combinations that could never move anything.
    let upgrade = |spec: Value| json!({"apiVersion": "kfupgrade.apps.kubeflow.org/v1alpha1", "kind": "KfUpgrade", "metadata": {"name": "bad"}, "spec": spec});
    let msg = rejection::<KfUpgrade>(&client, n, upgrade(json!({"currentKfDef": {"name": "kubeflow"}, "newKfDef": {"name": "other", "version": "v1.3.0"}}))).await;
    assert!(msg.contains("spec.newKfDef.name") && msg.contains("in place"), "{msg}");
    let msg = rejection::<KfUpgrade>(&client, n, upgrade(json!({"currentKfDef": {"name": "kubeflow"}, "newKfDef": {"name": "kubeflow", "version": "v1.3.0"}, "onlyListed": true}))).await;
    assert!(msg.contains("spec.onlyListed") && msg.contains("at least one entry in components"), "{msg}");
    let msg = rejection::<KfUpgrade>(&client, n, upgrade(json!({"currentKfDef": {"name": "kubeflow", "version": "v1.2.0"}, "newKfDef": {"name": "kubeflow", "version": "v1.2.0"}}))).await;
    assert!(msg.contains("spec.newKfDef.version") && msg.contains("nothing would move"), "{msg}");
    // The same versions with an explicit component target do move something.
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), n, &ApiResource::erase::<KfUpgrade>(&()));
    let valid = upgrade(json!({"currentKfDef": {"name": "kubeflow", "version": "v1.2.0"}, "newKfDef": {"name": "kubeflow", "version": "v1.2.0"}, "components": [{"component": "katib", "version": "v0.11.0"}], "onlyListed": true}));
    let mut valid: DynamicObject = serde_json::from_value(valid).unwrap();
    valid.metadata.name = Some("good".into());
    api.create(&PostParams::default(), &valid).await.expect("a valid KfUpgrade is accepted");
}

/// A shared cluster's bounds (README "Who may install what"): what a KfDef may name for fetching
/// and rendering is bounded in size and shape, no component resource installs into the cluster's
/// own namespaces, and no Profile takes a reserved namespace's name.
#[tokio::test]
async fn tenancy_bounds_reject_system_namespaces_escaping_paths_and_reserved_profile_names() {
    let client = client().await;
    install_crds(&client).await;
    let ns = TestNamespace::create(&client, "e2e-bounds").await;
    let n = &ns.name;
    let katib = json!({"apiVersion": "components.kubeflow.org/v1alpha1", "kind": "Katib", "metadata": {"name": "bad"}, "spec": {"version": "v0.11.0", "targetNamespace": "kube-system"}});
    let msg = rejection::<Katib>(&client, n, katib).await;
    assert!(msg.contains("spec.targetNamespace") && msg.contains("cluster's own namespaces"), "{msg}");
    let generic = |source: Value| json!({"apiVersion": "components.kubeflow.org/v1alpha1", "kind": "KustomizeApplication", "metadata": {"name": "bad"}, "spec": {"version": "v1.0.2", "sources": [source]}});
    let msg = rejection::<kubeflow_crds::KustomizeApplication>(&client, n, generic(json!({"application": "a", "repoUri": "https://x/a.tar.gz", "path": "apps/../../etc"}))).await;
    assert!(msg.contains("spec.sources[0].path") && msg.contains("no '..' segments"), "{msg}");

    let kfdef = |application: Value, uri: &str| json!({"apiVersion": "kfdef.apps.kubeflow.org/v1", "kind": "KfDef", "metadata": {"name": "bad"}, "spec": {"applications": [application], "repos": [{"name": "manifests", "uri": uri}]}});
    let app = |config: Value| json!({"name": "web", "kustomizeConfig": config});
    let msg = rejection::<KfDef>(&client, n, kfdef(app(json!({"repoRef": {"name": "manifests", "path": "../outside"}})), "https://x/a.tar.gz")).await;
    assert!(msg.contains("spec.applications[0].kustomizeConfig.repoRef.path") && msg.contains("no '..' segments"), "{msg}");
    let msg = rejection::<KfDef>(&client, n, kfdef(app(json!({"repoRef": {"name": "manifests", "path": "/etc/passwd"}})), "https://x/a.tar.gz")).await;
    assert!(msg.contains("spec.applications[0].kustomizeConfig.repoRef.path") && msg.contains("should match"), "{msg}");
    let msg = rejection::<KfDef>(&client, n, kfdef(app(json!({"overlays": ["../../base"]})), "https://x/a.tar.gz")).await;
    assert!(msg.contains("spec.applications[0].kustomizeConfig.overlays[0]") && msg.contains("should match"), "{msg}");
    let msg = rejection::<KfDef>(&client, n, kfdef(app(json!({"overlays": vec!["a"; 33]})), "https://x/a.tar.gz")).await;
    assert!(msg.contains("spec.applications[0].kustomizeConfig.overlays") && msg.contains("must have at most 32 items"), "{msg}");
    // A value with a newline would add lines to params.env.
    let msg = rejection::<KfDef>(&client, n, kfdef(app(json!({"parameters": [{"name": "a", "value": "x\nnamespace=kube-system"}]})), "https://x/a.tar.gz")).await;
    assert!(msg.contains("spec.applications[0].kustomizeConfig.parameters[0].value") && msg.contains("should match"), "{msg}");
    let msg = rejection::<KfDef>(&client, n, kfdef(app(json!({})), &format!("https://x/{}.tar.gz", "a".repeat(2100)))).await;
    assert!(msg.contains("spec.repos[0].uri") && msg.contains("may not be more than 2048"), "{msg}");
    let msg = rejection::<KfDef>(&client, n, kfdef(app(json!({})), "https://x/a b.tar.gz")).await;
    assert!(msg.contains("spec.repos[0].uri") && msg.contains("should match"), "{msg}");

    // The Profile CRD as the profiles operator installs it (it is not among the operators' own).
    let crds: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> = Api::all(client.clone());
    let mut crd = serde_json::to_value(kubeflow_crds::profile::crd()).unwrap();
    crd["metadata"]["labels"] = json!({component_framework::build::PART_OF_LABEL: "profiles"});
    crds.patch(kubeflow_crds::profile::CRD_NAME, &PatchParams::apply(FIELD_MANAGER).force(), &Patch::Apply(&crd)).await.unwrap();
    within("the Profile CRD Established", kube::runtime::wait::await_condition(crds, kubeflow_crds::profile::CRD_NAME, kube::runtime::conditions::is_crd_established())).await.unwrap();
    let profiles: Api<DynamicObject> = Api::all_with(client.clone(), &ApiResource::erase::<kubeflow_crds::profile::Profile>(&()));
    let profile = |name: &str| serde_json::from_value::<DynamicObject>(json!({"apiVersion": "kubeflow.org/v1", "kind": "Profile", "metadata": {"name": name}, "spec": {"owner": {"kind": "User", "name": "mallory@example.com"}}})).unwrap();
    for reserved in ["kube-system", "kube-public", "default", "kubeflow", "istio-system"] {
        match profiles.create(&PostParams::default(), &profile(reserved)).await {
            Err(kube::Error::Api(status)) => {
                assert_eq!(status.code, 422, "{status:?}");
                assert!(status.message.contains("may not be a system or platform namespace; reserved: kube-*, default, "), "{}", status.message);
                assert!([", kubeflow,", ", istio-system,", ", oauth2-proxy,", ", cert-manager,"].iter().all(|n| status.message.contains(n)), "{}", status.message);
            }
            other => panic!("Profile {reserved} was not refused: {other:?}"),
        }
    }
    // A Profile of its own name is accepted (and removed again).
    let free = unique_name("e2e-bounds-profile");
    profiles.create(&PostParams::default(), &profile(&free)).await.expect("a Profile with a free name is accepted");
    profiles.delete(&free, &DeleteParams::default()).await.unwrap();
}

#[tokio::test]
async fn deployment_becomes_available_on_kwok_nodes() {
    let client = client().await;
    let ns = TestNamespace::create(&client, "e2e-deploy").await;
    let api: Api<Deployment> = Api::namespaced(client.clone(), &ns.name);
    let deployment: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "web", "image": "registry.invalid/web:1"}]},
            },
        },
    }))
    .unwrap();
    api.create(&PostParams::default(), &deployment).await.unwrap();
    let available = eventually("Deployment web Available", || async {
        let d = api.get("web").await.map_err(|e| e.to_string())?;
        let status = d.status.clone().unwrap_or_default();
        let available = status.conditions.iter().flatten().any(|c| c.type_ == "Available" && c.status == "True");
        if available && status.available_replicas == Some(2) { Ok(status) } else { Err(format!("{status:?}")) }
    })
    .await;
    assert_eq!(available.ready_replicas, Some(2));
}

#[tokio::test]
async fn deleting_an_owner_cascades_to_its_dependent() {
    let client = client().await;
    let ns = TestNamespace::create(&client, "e2e-gc").await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &ns.name);
    let owner = api
        .create(&PostParams::default(), &ConfigMap { metadata: ObjectMeta { name: Some("owner".into()), ..Default::default() }, ..Default::default() })
        .await
        .unwrap();
    let dependent = ConfigMap {
        metadata: ObjectMeta {
            name: Some("dependent".into()),
            owner_references: Some(vec![OwnerReference {
                api_version: "v1".into(),
                kind: "ConfigMap".into(),
                name: "owner".into(),
                uid: owner.uid().unwrap(),
                ..Default::default()
            }]),
            ..Default::default()
        },
        ..Default::default()
    };
    api.create(&PostParams::default(), &dependent).await.unwrap();
    api.delete("owner", &DeleteParams::background()).await.unwrap();
    gone(&api, "dependent").await;
}

/// The desired-state path the meta-operator uses: `put_with_id` onto `$KV.<bucket>.<key>`. A
/// retried publish (same message id) stores one revision; a rollback to an earlier spec (same
/// hash, but the key's revision in the id moved on) is stored.
#[tokio::test]
async fn kv_puts_with_a_message_id_are_deduplicated_and_a_rollback_is_not() {
    let nats = bus_client(&nats_url(), &env_bus(), Identity::MetaOperator).await;
    let js = jetstream::new(nats);
    // A bucket the meta-operator's identity may write, fresh (no operator uses the environment's
    // server during the tests).
    let bucket = kubeflow_crds::bus::desired_bucket(kubeflow_crds::ComponentKind::Dex);
    let _ = js.delete_key_value(&bucket).await;
    let store = js.create_key_value(jetstream::kv::Config { bucket: bucket.clone(), history: 10, ..Default::default() }).await.unwrap();
    let key = "dex.team.kubeflow";
    let put = |msg_id: &'static str, spec: &'static str| {
        let js = js.clone();
        let bucket = bucket.clone();
        async move { operator_runtime::nats::put_with_id(&js, &bucket, key, msg_id, &json!({"spec": spec})).await.unwrap() }
    };
    put("uid.1.katib.h1.0", "v0.10.0").await;
    put("uid.1.katib.h1.0", "v0.10.0").await;
    assert_eq!(store.entry(key).await.unwrap().unwrap().revision, 1, "the retried publish was stored");
    put("uid.1.katib.h2.1", "v0.11.0").await;
    // Rollback: the first spec again (same hash), at the key's new revision.
    put("uid.1.katib.h1.2", "v0.10.0").await;
    let latest = store.entry(key).await.unwrap().unwrap();
    assert_eq!(latest.revision, 3, "the rollback was dropped as a duplicate");
    assert_eq!(serde_json::from_slice::<Value>(&latest.value).unwrap(), json!({"spec": "v0.10.0"}));
    let history: Vec<_> = store.history(key).await.unwrap().collect().await;
    assert_eq!(history.len(), 3);
    js.delete_key_value(&bucket).await.unwrap();
}
