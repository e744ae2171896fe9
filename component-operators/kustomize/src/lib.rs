//! The generic component: any kfctl application, installed from its kustomize package.
//!
//! A `KustomizeApplication` names applications (`spec.sources`: repository archive, package path,
//! overlays, parameters) instead of carrying rendered YAML. The operator fetches each repository
//! once (bounded, checked, cached: [`kubeflow_manifests::RepoCache`]), renders each package with
//! kfctl's semantics and the real kustomize ([`kubeflow_manifests::Renderer`]), and hands the
//! objects to the shared framework, which installs them like any component's: kfctl's apply order,
//! CRDs Established before their custom resources, readiness, heal and drift revert, prune,
//! cleanup with CRDs and namespaces retained.
//!
//! Kinds outside the framework's built-in list are learned from the CRDs in the same render or
//! from the API server's discovery; an object whose kind the cluster does not serve, or that two
//! applications both render, is refused naming the application. Renders are memoised by spec, so
//! reconciles triggered by owned objects do not run kustomize again.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, OnceLock};

use component_framework::api::component::{KustomizeSource, RenderMode};
use component_framework::api::{KustomizeApplication, NameValue};
use component_framework::build::target_namespace;
use component_framework::k8s_openapi::api::rbac::v1::PolicyRule;
use component_framework::kinds;
use component_framework::rbac::rule;
use component_framework::{Component, InvalidSpec, Inputs, Params, Release};
use kube::core::GroupVersionKind;
use kube::{Client, ResourceExt};
use kubeflow_manifests::{AppSpec, FetchOptions, Kustomize, Mode, RenderContext, Renderer, RepoCache, RepoSource};
use serde_json::{Value, json};

pub struct KustomizeComponent;

/// Annotation naming the KfDef application an object was rendered for.
pub const APPLICATION_ANNOTATION: &str = "components.kubeflow.org/application";

/// Where fetched repositories and render work directories live (`KFOP_MANIFESTS_CACHE`, default
/// `$TMPDIR/kubeflow-operator-manifests`).
fn cache_dir() -> std::path::PathBuf {
    std::env::var_os("KFOP_MANIFESTS_CACHE").map(Into::into).unwrap_or_else(|| std::env::temp_dir().join("kubeflow-operator-manifests"))
}

/// Renders by spec, so reconciles caused by owned-object events do not rebuild (bounded).
fn memo() -> &'static Mutex<HashMap<String, Arc<Vec<Value>>>> {
    static MEMO: OnceLock<Mutex<HashMap<String, Arc<Vec<Value>>>>> = OnceLock::new();
    MEMO.get_or_init(Default::default)
}
const MEMO_ENTRIES: usize = 64;

fn field(index: usize, name: &str) -> String {
    format!("spec.sources[{index}].{name}")
}

/// The application a source describes, with what it must have.
pub fn app_spec(index: usize, source: &KustomizeSource) -> Result<(RepoSource, AppSpec), InvalidSpec> {
    let uri = source.repo_uri.clone().filter(|u| !u.is_empty()).ok_or_else(|| InvalidSpec::new(field(index, "repoUri"), "required: the manifests archive (https://…/archive/<ref>.tar.gz)"))?;
    let path = source.path.clone().filter(|p| !p.is_empty()).ok_or_else(|| InvalidSpec::new(field(index, "path"), "required: the package inside the repository"))?;
    let repo = RepoSource { name: uri.clone(), uri, sha256: source.repo_sha256.clone() };
    let app = AppSpec { name: source.application.clone(), path, overlays: source.overlays.clone(), parameters: source.parameters.iter().map(|p| NameValue { name: p.name.clone(), value: p.value.clone() }).collect() };
    Ok((repo, app))
}

/// `(group, kind, namespace, name)`: what makes two objects the same object (any version).
fn identity(object: &Value) -> (String, String, String, String) {
    let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
    let api_version = text(&object["apiVersion"]);
    let group = api_version.split_once('/').map(|(g, _)| g.to_string()).unwrap_or_default();
    (group, text(&object["kind"]), text(&object["metadata"]["namespace"]), text(&object["metadata"]["name"]))
}

/// Joins the applications' objects, refusing an object two applications render.
pub fn merge_applications(rendered: Vec<(usize, String, Vec<Value>)>) -> Result<Vec<Value>, InvalidSpec> {
    let mut owners: BTreeMap<(String, String, String, String), String> = BTreeMap::new();
    let mut out = Vec::new();
    for (index, application, objects) in rendered {
        for mut object in objects {
            let key = identity(&object);
            if let Some(other) = owners.get(&key) {
                let name = object["metadata"]["name"].as_str().unwrap_or_default();
                return Err(InvalidSpec::new(
                    format!("spec.sources[{index}]"),
                    format!("application {application:?} renders {} {name}, which application {other:?} renders too; an object belongs to one application", object["kind"].as_str().unwrap_or_default()),
                ));
            }
            owners.insert(key, application.clone());
            object["metadata"]["annotations"][APPLICATION_ANNOTATION] = json!(application);
            out.push(object);
        }
    }
    Ok(out)
}

/// `objects` preceded by a Namespace for each namespace they use that they do not create
/// themselves (kfctl created the KfDef's namespace; namespaces are only ever created, never
/// changed or deleted). Namespaced objects without a namespace go to `target`.
pub fn with_namespaces(objects: Vec<Value>, target: &str) -> Vec<Value> {
    let rendered: std::collections::BTreeSet<&str> = objects.iter().filter(|o| o["kind"] == "Namespace").filter_map(|o| o["metadata"]["name"].as_str()).collect();
    let mut used = std::collections::BTreeSet::new();
    for object in &objects {
        let namespaced = kinds::lookup(object["apiVersion"].as_str().unwrap_or_default(), object["kind"].as_str().unwrap_or_default()).is_some_and(|k| !k.cluster_scoped);
        if namespaced {
            used.insert(object["metadata"]["namespace"].as_str().unwrap_or(target).to_string());
        }
    }
    let mut out: Vec<Value> = used.into_iter().filter(|n| !rendered.contains(n.as_str())).map(|n| json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": n}})).collect();
    out.extend(objects);
    out
}

/// Makes every kind in `objects` known to the framework: from CRDs rendered alongside, else from
/// the API server's discovery. `Err` names the first kind the cluster does not serve.
async fn learn_kinds(client: &Client, objects: &[Value]) -> Result<(), (String, String)> {
    for crd in objects.iter().filter(|o| o["kind"] == "CustomResourceDefinition" && o["apiVersion"].as_str().is_some_and(|v| v.starts_with("apiextensions.k8s.io/"))) {
        let spec = &crd["spec"];
        let (group, kind, plural) = (spec["group"].as_str().unwrap_or_default(), spec["names"]["kind"].as_str().unwrap_or_default(), spec["names"]["plural"].as_str().unwrap_or_default());
        let cluster = spec["scope"] == "Cluster";
        let versions: Vec<&str> = match spec["versions"].as_array() {
            Some(list) => list.iter().filter_map(|v| v["name"].as_str()).collect(),
            None => spec["version"].as_str().into_iter().collect(), // apiextensions v1beta1
        };
        for version in versions {
            kinds::register(group, version, kind, plural, cluster);
        }
    }
    for object in objects {
        let (api_version, kind) = (object["apiVersion"].as_str().unwrap_or_default(), object["kind"].as_str().unwrap_or_default());
        if kinds::lookup(api_version, kind).is_some() {
            continue;
        }
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
        match kube::discovery::pinned_kind(client, &GroupVersionKind::gvk(group, version, kind)).await {
            Ok((resource, capabilities)) => {
                kinds::register(group, version, kind, &resource.plural, capabilities.scope == kube::discovery::Scope::Cluster);
            }
            Err(_) => return Err((api_version.to_string(), kind.to_string())),
        }
    }
    Ok(())
}

/// Fetches, renders and merges every application of `resource`.
pub async fn render(resource: &KustomizeApplication, client: &Client) -> Result<Vec<Value>, InvalidSpec> {
    let spec = &resource.spec;
    if spec.core.sources.is_empty() {
        return Err(InvalidSpec::new("spec.sources", "at least one application is required"));
    }
    let namespace = target_namespace::<KustomizeComponent>(resource);
    let key = serde_json::to_string(&json!({"sources": spec.core.sources, "mode": spec.mode, "namespace": namespace, "name": resource.name_any()})).expect("specs serialise");
    if let Some(objects) = memo().lock().expect("render memo").get(&key).cloned() {
        return Ok(objects.as_ref().clone());
    }
    let dir = cache_dir();
    let repos = RepoCache::new(dir.join("repos"), FetchOptions::default()).map_err(|e| InvalidSpec::new("spec.sources", format!("the operator cannot use its repository cache: {e}")).retryable())?;
    let kustomize = Kustomize::locate().await.map_err(|e| InvalidSpec::new("spec.sources", format!("the operator has no kustomize: {e}")).retryable())?;
    let renderer = Renderer::new(kustomize, dir.join("work")).map_err(|e| InvalidSpec::new("spec.sources", format!("the operator cannot render: {e}")).retryable())?;
    let mode = match spec.mode {
        RenderMode::PerApplication => Mode::PerApplication,
        RenderMode::Stacks => Mode::Stacks,
    };
    let context = RenderContext { namespace: namespace.clone(), kfdef_name: resource.name_any(), mode };
    let mut rendered = Vec::new();
    for (index, source) in spec.core.sources.iter().enumerate() {
        let (repo, app) = app_spec(index, source)?;
        // A download may fail for a while (network, server); the spec may be right: retry.
        let fetched = repos.fetch(&repo).await.map_err(|e| InvalidSpec::new(field(index, "repoUri"), e.to_string()).retryable())?;
        let app_rendered = renderer.render_application(&fetched, &app, &context).await.map_err(|e| InvalidSpec::new(format!("spec.sources[{index}]"), e.to_string()))?;
        let objects = app_rendered.objects.iter().map(|o| serde_json::to_value(o).expect("objects serialise")).collect();
        rendered.push((index, source.application.clone(), objects));
    }
    let applications: Vec<(usize, String)> = rendered.iter().map(|(i, a, _)| (*i, a.clone())).collect();
    let objects = merge_applications(rendered)?;
    if let Err((api_version, kind)) = learn_kinds(client, &objects).await {
        let (index, application) = objects
            .iter()
            .find(|o| o["apiVersion"] == api_version.as_str() && o["kind"] == kind.as_str())
            .and_then(|o| o["metadata"]["annotations"][APPLICATION_ANNOTATION].as_str())
            .and_then(|name| applications.iter().find(|(_, a)| a == name).cloned())
            .unwrap_or((0, String::new()));
        return Err(InvalidSpec::new(
            format!("spec.sources[{index}]"),
            format!("application {application:?} renders {kind} ({api_version}), which the cluster does not serve: install the CRD (or the component) that provides it first"),
        )
        .retryable());
    }
    let objects = with_namespaces(objects, &namespace);
    let mut memo = memo().lock().expect("render memo");
    if memo.len() >= MEMO_ENTRIES {
        memo.clear();
    }
    memo.insert(key, Arc::new(objects.clone()));
    Ok(objects)
}

impl Component for KustomizeComponent {
    type Resource = KustomizeApplication;
    const DEFAULT_NAMESPACE: &'static str = "kubeflow";
    const DISPLAY_NAME: &'static str = "Kubeflow applications (kustomize)";
    const INSTALLS: &'static str = "any Kubeflow application of a KfDef, rendered from its kustomize package the way kfctl rendered it";
    const MANAGES_ANY_KIND: bool = true;

    /// No built-in releases: what is installed is what the spec's packages render.
    fn releases() -> &'static [Release] {
        &[]
    }

    fn example_spec() -> Value {
        json!({"version": "v1.0.2", "sources": [{"application": "jupyter-web-app", "repoUri": "https://github.com/kubeflow/manifests/archive/v1.0.2.tar.gz", "path": "jupyter/jupyter-web-app", "overlays": ["istio", "application"]}]})
    }

    fn default_parameters() -> Params {
        Params::new()
    }

    fn parameters(_resource: &KustomizeApplication, _inputs: &Inputs) -> Result<Params, InvalidSpec> {
        Ok(Params::new())
    }

    fn render_external(resource: &KustomizeApplication, client: &Client) -> impl std::future::Future<Output = Option<Result<Vec<Value>, InvalidSpec>>> + Send {
        let (resource, client) = (resource.clone(), client.clone());
        async move { Some(render(&resource, &client).await) }
    }

    /// Custom resources of the API groups Kubeflow 1.x applications ship (its CRDs come with the
    /// applications; the operator applies, reads and prunes their resources). Other groups:
    /// bind an extra ClusterRole to the operator's ServiceAccount.
    fn extra_rules() -> Vec<PolicyRule> {
        let all = ["get", "list", "watch", "create", "patch", "update", "delete"];
        [
            ("app.k8s.io", &["applications"][..]),
            ("networking.istio.io", &["gateways", "virtualservices", "destinationrules", "serviceentries", "envoyfilters", "sidecars"][..]),
            ("security.istio.io", &["authorizationpolicies", "peerauthentications", "requestauthentications"][..]),
            ("rbac.istio.io", &["serviceroles", "servicerolebindings", "clusterrbacconfigs", "rbacconfigs"][..]),
            ("authentication.istio.io", &["policies", "meshpolicies"][..]),
            ("cert-manager.io", &["certificates", "issuers", "clusterissuers"][..]),
            ("kubeflow.org", &["poddefaults", "profiles", "notebooks", "tfjobs", "pytorchjobs", "mxjobs", "xgboostjobs", "mpijobs", "viewers", "scheduledworkflows"][..]),
            ("argoproj.io", &["workflows", "workflowtemplates", "cronworkflows", "clusterworkflowtemplates"][..]),
            ("metacontroller.k8s.io", &["compositecontrollers", "decoratorcontrollers", "controllerrevisions"][..]),
            ("serving.knative.dev", &["services", "configurations", "revisions", "routes"][..]),
        ]
        .into_iter()
        .map(|(group, resources)| rule(group, resources, &all))
        .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source(application: &str, uri: Option<&str>, path: Option<&str>) -> KustomizeSource {
        KustomizeSource { application: application.into(), repo_uri: uri.map(String::from), path: path.map(String::from), ..Default::default() }
    }

    #[test]
    fn a_source_needs_an_archive_and_a_path() {
        assert_eq!(app_spec(0, &source("a", None, Some("p"))).unwrap_err().to_string(), "spec.sources[0].repoUri: required: the manifests archive (https://…/archive/<ref>.tar.gz)");
        assert_eq!(app_spec(2, &source("a", Some("https://x/a.tar.gz"), None)).unwrap_err().to_string(), "spec.sources[2].path: required: the package inside the repository");
        let (repo, app) = app_spec(1, &source("web", Some("https://x/a.tar.gz"), Some("demo/web"))).unwrap();
        assert_eq!((repo.uri.as_str(), app.name.as_str(), app.path.as_str()), ("https://x/a.tar.gz", "web", "demo/web"));
    }

    #[test]
    fn namespaces_the_objects_use_are_created_unless_rendered() {
        let objects = vec![
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "tenants"}}),
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}}),
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "b", "namespace": "tenants"}}),
            json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "c", "namespace": "auth"}}),
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "d"}}),
        ];
        let out = with_namespaces(objects, "kubeflow");
        let namespaces: Vec<&str> = out.iter().filter(|o| o["kind"] == "Namespace").map(|o| o["metadata"]["name"].as_str().unwrap()).collect();
        assert_eq!(namespaces, ["auth", "kubeflow", "tenants"]);
        assert_eq!(out.len(), 7);
    }

    #[test]
    fn an_object_two_applications_render_is_refused_naming_both() {
        let cm = |name: &str| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "kubeflow"}});
        let merged = merge_applications(vec![(0, "a".into(), vec![cm("one")]), (1, "b".into(), vec![cm("two")])]).unwrap();
        assert_eq!(merged[1]["metadata"]["annotations"][APPLICATION_ANNOTATION], "b");
        let err = merge_applications(vec![(0, "a".into(), vec![cm("one")]), (1, "b".into(), vec![cm("two"), cm("one")])]).unwrap_err();
        assert_eq!(err.to_string(), "spec.sources[1]: application \"b\" renders ConfigMap one, which application \"a\" renders too; an object belongs to one application");
        // Same name, other kind or namespace: two objects.
        let other_ns = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "one", "namespace": "team"}});
        assert_eq!(merge_applications(vec![(0, "a".into(), vec![cm("one")]), (1, "b".into(), vec![other_ns])]).unwrap().len(), 2);
    }
}
