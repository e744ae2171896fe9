//! The built-in components render a KfDef's packages as upstream builds them. For Kubeflow
//! v1.10.2's KfDef (`../shared/manifests`), each application Istio, Dex, KServe, Katib and
//! Pipelines cover is, object for object, what upstream's `kustomize build <path>` (v5) renders:
//! the same kind, namespace and name, and the same content once the operator's own labels and
//! annotations (`components.kubeflow.org/…`) are set aside.

use std::collections::BTreeMap;

use base64::Engine;
use kubeflow_crds::KfDef;
use kubeflow_crds::component::{ComponentKind, Platform};
use kubeflow_crds::kfdef::KustomizeRelease;
use kubeflow_manifests::{FetchOptions, Kustomize, RepoCache, RepoSource};
use serde_json::Value;

const OURS: &str = "components.kubeflow.org/";
const APPLICATION: &str = "components.kubeflow.org/application";

/// `object` without the operator's labels and annotations.
fn without_ours(mut object: Value) -> Value {
    for field in ["labels", "annotations"] {
        if let Some(map) = object["metadata"][field].as_object_mut() {
            map.retain(|key, _| !key.starts_with(OURS));
            if map.is_empty() {
                object["metadata"].as_object_mut().unwrap().remove(field);
            }
        }
    }
    stored(object)
}

/// `object` with a Secret's `stringData` written as the API server stores it (`data`, base64).
fn stored(mut object: Value) -> Value {
    if let Some(Value::Object(string_data)) = object.as_object_mut().unwrap().remove("stringData") {
        for (key, value) in string_data {
            object["data"][key] = Value::String(base64::engine::general_purpose::STANDARD.encode(value.as_str().unwrap()));
        }
    }
    object
}

/// `object` without the fields another controller writes, which no operator applies (README, "What
/// others write"): an aggregated ClusterRole's `rules` (the aggregation controller's), and the
/// `caBundle` a webhook configuration asks cert-manager's cainjector for.
fn without_others_fields(mut object: Value) -> Value {
    if object["kind"] == "ClusterRole" && object.get("aggregationRule").is_some() {
        object.as_object_mut().unwrap().remove("rules");
    }
    let injected = object["metadata"]["annotations"].as_object().is_some_and(|a| a.keys().any(|k| k.starts_with("cert-manager.io/inject-ca-from")));
    if injected {
        for webhook in object["webhooks"].as_array_mut().into_iter().flatten() {
            webhook["clientConfig"].as_object_mut().map(|c| c.remove("caBundle"));
        }
    }
    object
}

/// Where `a` and `b` first differ (a JSON pointer), for a readable failure.
fn first_difference(a: &Value, b: &Value, at: String) -> Option<String> {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => x.keys().chain(y.keys().filter(|k| !x.contains_key(*k))).find_map(|k| first_difference(x.get(k).unwrap_or(&Value::Null), y.get(k).unwrap_or(&Value::Null), format!("{at}/{k}"))),
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => x.iter().zip(y).enumerate().find_map(|(i, (p, q))| first_difference(p, q, format!("{at}/{i}"))),
        _ if a == b => None,
        _ => Some(format!("{at}: ours {a}, upstream's {b}")),
    }
}

fn identity(object: &Value) -> (String, String, String) {
    let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
    (text(&object["kind"]), text(&object["metadata"]["namespace"]), text(&object["metadata"]["name"]))
}

#[tokio::test]
async fn built_in_components_install_upstreams_objects_with_only_their_labels_and_annotations_added() {
    let dir = kubeflow_manifests::fixtures::upstream_releases();
    let archive = dir.join("manifests-1.10.2.tar.gz");
    let mut kfdef: KfDef = serde_yaml_ng::from_str(&std::fs::read_to_string(dir.join("kfdef-1.10.2.yaml")).unwrap()).unwrap();
    kfdef.metadata.namespace = Some("kubeflow".into());
    kfdef.spec.repos[0].uri = archive.display().to_string();
    let registry = kubeflow_component_registry::all();
    let mut catalog = meta_operator::catalog::Catalog::default();
    for component in &registry {
        catalog.learn(component.kind, component.releases.clone());
    }
    let plan = meta_operator::plan::plan(&kfdef, Platform::Kubernetes, &catalog).unwrap();

    // Upstream's own build of each path, from the same archive.
    let tmp = std::env::temp_dir().join(format!("kfop-builtins-upstream-{}", std::process::id()));
    let cache = RepoCache::new(tmp.join("cache"), FetchOptions { allow_local: true, ..Default::default() }).unwrap();
    let root = cache.fetch(&RepoSource { name: "manifests".into(), uri: archive.display().to_string(), sha256: None }).await.unwrap().root;
    let kustomize = Kustomize::locate_release(KustomizeRelease::V5).await.unwrap_or_else(|e| panic!("this test runs the real kustomize: {e}"));
    let path_of: BTreeMap<String, String> = kfdef.spec.applications.iter().map(|a| (a.name.clone(), a.kustomize_config.as_ref().unwrap().repo_ref.as_ref().unwrap().path.clone())).collect();

    let mut covered = Vec::new();
    for (component, planned) in plan.components.iter().filter(|(c, _)| **c != ComponentKind::GENERIC && **c != ComponentKind::ProfileController) {
        let registered = registry.iter().find(|r| r.kind == *component).unwrap();
        let fetch = FetchOptions { allow_local: true, ..Default::default() };
        let rendered = (registered.render_packages)("kubeflow".into(), "kubeflow".into(), planned.spec.clone(), fetch).await.unwrap_or_else(|| panic!("{component} renders the KfDef's packages")).unwrap();
        assert!(rendered.failed.is_empty(), "{component}: {:?}", rendered.failed);
        let objects = (registered.render)("kubeflow", "kubeflow", &planned.spec, Some(rendered)).unwrap();
        let mut by_application: BTreeMap<String, BTreeMap<(String, String, String), Value>> = BTreeMap::new();
        for object in objects {
            let Some(application) = object["metadata"]["annotations"][APPLICATION].as_str().map(String::from) else {
                assert_eq!(object["kind"], "Namespace", "{component}: only a Namespace its objects use belongs to no application");
                continue;
            };
            by_application.entry(application).or_default().insert(identity(&object), without_ours(object));
        }
        for (application, ours) in by_application {
            let home = tmp.join(format!("home-{application}"));
            std::fs::create_dir_all(&home).unwrap();
            let output = kustomize.build(&root.join(&path_of[&application]), &home, std::slice::from_ref(&root)).await.unwrap();
            let upstream: BTreeMap<_, _> = kubeflow_manifests::parse_objects(&output)
                .unwrap()
                .iter()
                .map(|o| serde_json::to_value(o).unwrap())
                .map(|mut o| {
                    // A namespaced object upstream leaves without a namespace goes to the KfDef's.
                    let namespaced = ours.contains_key(&(identity(&o).0, "kubeflow".into(), identity(&o).2)) && o["metadata"]["namespace"].is_null();
                    if namespaced {
                        o["metadata"]["namespace"] = "kubeflow".into();
                    }
                    (identity(&o), without_others_fields(stored(o)))
                })
                .collect();
            assert_eq!(ours.keys().collect::<Vec<_>>(), upstream.keys().collect::<Vec<_>>(), "{component}/{application}: not upstream's objects");
            for (id, object) in &ours {
                assert_eq!(first_difference(object, &upstream[id], String::new()), None, "{component}/{application}: {id:?} differs from upstream's");
            }
            covered.push(application);
        }
    }
    covered.sort();
    assert_eq!(covered, ["cluster-local-gateway", "dex", "istio-crds", "istio-install", "katib", "kserve", "models-web-app", "pipeline"]);
    let _ = std::fs::remove_dir_all(&tmp);
}
