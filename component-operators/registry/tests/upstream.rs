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

/// One test at a time: every render here is of install `kubeflow/kubeflow`, and the operators
/// record per install the kinds its rendered CRDs define (component_framework::kinds), so one
/// test's render of another release would change what the other's objects are checked against.
static ONE_INSTALL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

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

/// Kubeflow v1.10.2's KfDef (its repository the archive in `../shared/manifests`) and the
/// meta-operator's plan of it.
fn v1_10_2() -> (KfDef, std::path::PathBuf, meta_operator::plan::Plan) {
    let dir = kubeflow_manifests::fixtures::upstream_releases();
    let archive = dir.join("manifests-1.10.2.tar.gz");
    let mut kfdef: KfDef = serde_yaml_ng::from_str(&std::fs::read_to_string(dir.join("kfdef-1.10.2.yaml")).unwrap()).unwrap();
    kfdef.metadata.namespace = Some("kubeflow".into());
    kfdef.spec.repos[0].uri = archive.display().to_string();
    let plan = plan_of(&kfdef);
    (kfdef, archive, plan)
}

/// What the operator of `component` applies for `spec` (its KfDef's packages, rendered).
async fn objects_of(component: ComponentKind, spec: &Value) -> Vec<Value> {
    let registry = kubeflow_component_registry::all();
    let registered = registry.iter().find(|r| r.kind == component).unwrap();
    // (Remote bases come from a loopback mirror.)
    let fetch = FetchOptions { allow_local: true, address_fence: false, ..Default::default() };
    let rendered = (registered.render_packages)("kubeflow".into(), "kubeflow".into(), spec.clone(), fetch).await.unwrap_or_else(|| panic!("{component} renders the KfDef's packages")).unwrap();
    assert!(rendered.failed.is_empty(), "{component}: {:?}", rendered.failed);
    (registered.render)("kubeflow", "kubeflow", spec, Some(rendered)).unwrap_or_else(|e| panic!("{component}: {e}"))
}

#[tokio::test]
async fn built_in_components_install_upstreams_objects_with_only_their_labels_and_annotations_added() {
    let _one = ONE_INSTALL.lock().await;
    let (kfdef, archive, plan) = v1_10_2();

    // Upstream's own build of each path, from the same archive.
    let tmp = std::env::temp_dir().join(format!("kfop-builtins-upstream-{}", std::process::id()));
    let cache = RepoCache::new(tmp.join("cache"), FetchOptions { allow_local: true, ..Default::default() }).unwrap();
    let root = cache.fetch(&RepoSource { name: "manifests".into(), uri: archive.display().to_string(), sha256: None }).await.unwrap().root;
    let kustomize = Kustomize::locate_release(KustomizeRelease::V5).await.unwrap_or_else(|e| panic!("this test runs the real kustomize: {e}"));
    let path_of: BTreeMap<String, String> = kfdef.spec.applications.iter().map(|a| (a.name.clone(), a.kustomize_config.as_ref().unwrap().repo_ref.as_ref().unwrap().path.clone())).collect();

    let mut covered = Vec::new();
    for (component, planned) in plan.components.iter().filter(|(c, _)| **c != ComponentKind::GENERIC && **c != ComponentKind::ProfileController) {
        let objects = objects_of(*component, &planned.spec).await;
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

/// The meta-operator's plan of `kfdef`, every registered component's releases known.
fn plan_of(kfdef: &KfDef) -> meta_operator::plan::Plan {
    let mut catalog = meta_operator::catalog::Catalog::default();
    for component in kubeflow_component_registry::all() {
        catalog.learn(component.kind, component.releases.clone());
    }
    meta_operator::plan::plan(kfdef, Platform::Kubernetes, &catalog).unwrap()
}

/// The Kubeflow releases of `../shared/manifests`: tag, KfDef, archive.
const RELEASES: [(&str, &str, &str); 4] = [
    ("v1.2.0", "kfdef-1.2.0-istio-dex.yaml", "manifests-1.2.0.tar.gz"),
    ("v1.3.1", "kfdef-1.3.1.yaml", "manifests-1.3.1.tar.gz"),
    ("v1.10.2", "kfdef-1.10.2.yaml", "manifests-1.10.2.tar.gz"),
    ("v1.11.0", "kfdef-1.11.0.yaml", "manifests-1.11.0.tar.gz"),
];

/// Release `tag`'s KfDef over the local archive (remote bases through `remote_bases`, a mirror
/// of github.com), the archive, and the meta-operator's plan of it.
fn release_of(tag: &str, remote_bases: &str) -> (std::path::PathBuf, meta_operator::plan::Plan) {
    let (_, kfdef, archive) = RELEASES.iter().find(|(t, _, _)| *t == tag).unwrap();
    let dir = kubeflow_manifests::fixtures::upstream_releases();
    let archive = dir.join(archive);
    let mut kfdef: KfDef = serde_yaml_ng::from_str(&std::fs::read_to_string(dir.join(kfdef)).unwrap()).unwrap();
    kfdef.metadata.namespace = Some("kubeflow".into());
    kfdef.spec.repos[0].uri = archive.display().to_string();
    kfdef.spec.remote_base_mirrors = vec![format!("https://github.com/={remote_bases}")];
    let plan = plan_of(&kfdef);
    (archive, plan)
}

/// Every release archive kept here as the mirror of its URL on github.com, and `remote_bases` as
/// the mirror of the rest of github.com: an air-gapped cluster's mirrors.
fn archive_mirrors(remote_bases: &str) -> Vec<kubeflow_manifests::remote_bases::Mirror> {
    use kubeflow_manifests::remote_bases::Mirror;
    let dir = kubeflow_manifests::fixtures::upstream_releases();
    let mut mirrors: Vec<Mirror> = RELEASES.iter().map(|(tag, _, archive)| Mirror { prefix: kubeflow_manifests::example::upstream_archive(tag), uri: dir.join(archive).display().to_string() }).collect();
    mirrors.push(Mirror { prefix: "https://github.com/".into(), uri: remote_bases.to_string() });
    mirrors
}

/// A standalone resource (no `spec.sources`) of a release upstream ships, on an operator run as
/// shipped (no `--built-in-templates`): it renders the component's packages in the Kubeflow release's archive,
/// fetched through the mirror, exactly as the resource the release's KfDef's plan makes for the
/// same applications does (compared with upstream's and kfctl's builds by the test above and in
/// manifests/tests/upstream.rs), for every built-in of the four releases whose KfDef names it
/// (Kubeflow 1.2's Katib and Pipelines are in kfctl's `kubeflow-apps` stack). Every such
/// application runs the version the plan gives it (its own images carry that tag), or it is
/// refused. Kubeflow 1.2's Katib and Pipelines render kfctl's paths in v1.2.0's archive on their own,
/// 1.3.0's and 1.10.0's releases upstream's archives of those tags (not served here); never a
/// template unless asked. Applications named without a repository that the release does not
/// have (a kfctl-era KfDef's) install the release once, as upstream ships it.
#[tokio::test]
async fn standalone_resources_render_their_release_from_upstreams_archive() {
    let _one = ONE_INSTALL.lock().await;
    let remote_bases = kubeflow_manifests::fixtures::upstream_remote_bases_mirror().await;
    let remote_bases = remote_bases.url("gh/");
    let releases: Vec<_> = RELEASES.iter().map(|(tag, _, _)| (*tag, release_of(tag, &remote_bases))).collect();
    let registry = kubeflow_component_registry::all();
    // The archives on github.com served from the local copies, the remote bases from loopback.
    let mirrors = archive_mirrors(&remote_bases);
    let mirrored = |built_in_templates: bool| FetchOptions { allow_local: true, address_fence: false, built_in_templates, remote_base_mirrors: mirrors.clone(), ..Default::default() };
    let mut compared = Vec::new();
    // Per component, the kinds of the framework's list its releases' packages install.
    let mut installed_kinds: BTreeMap<ComponentKind, std::collections::BTreeSet<String>> = BTreeMap::new();
    let mut note_kinds = |component: ComponentKind, objects: &[Value]| {
        let builtin = |info: &&component_framework::kinds::KindInfo| component_framework::kinds::KINDS.iter().any(|k| k.kind == info.kind && k.group == info.group);
        let kinds = objects.iter().filter_map(|o| component_framework::kinds::lookup(o["apiVersion"].as_str()?, o["kind"].as_str()?)).filter(builtin).map(|info| info.kind.to_string());
        installed_kinds.entry(component).or_default().extend(kinds);
    };
    for (tag, (_, plan)) in &releases {
        for (component, planned) in plan.components.iter().filter(|(c, _)| **c != ComponentKind::GENERIC && **c != ComponentKind::ProfileController) {
            let registered = registry.iter().find(|r| r.kind == *component).unwrap();
            let standalone = serde_json::json!({"version": planned.spec["version"]});
            let rendered = (registered.render_packages)("kubeflow".into(), "kubeflow".into(), standalone.clone(), mirrored(false)).await.unwrap_or_else(|| panic!("{tag} {component}: no package for {standalone}")).unwrap();
            assert!(rendered.failed.is_empty(), "{tag} {component}: {:?}", rendered.failed);
            // The version is what the package runs: its own images are there, at that tag (but
            // kfctl v1.2.0's Istio, which runs a daily build's floating tag).
            let own: Vec<&str> = component_framework::package::own_images(registered.version_images, &rendered.objects).into_iter().map(|(_, image)| image).collect();
            let version = planned.spec["version"].as_str().unwrap().trim_start_matches('v');
            let at_version = |image: &&str| image.ends_with(&format!(":{version}")) || image.ends_with(&format!(":v{version}"));
            if (*tag, *component) == ("v1.2.0", ComponentKind::Istio) {
                assert_eq!(own, ["gcr.io/istio-release/pilot:release-1.3-latest-daily"]);
            } else {
                assert!(!own.is_empty() && own.iter().all(at_version), "{tag} {component}: {own:?}");
            }
            let ours = (registered.render)("kubeflow", "kubeflow", &standalone, Some(rendered)).unwrap();
            note_kinds(*component, &ours);
            let from_kfdef = objects_of(*component, &planned.spec).await;
            assert_eq!(ours.iter().map(identity).collect::<Vec<_>>(), from_kfdef.iter().map(identity).collect::<Vec<_>>(), "{tag} {component} {standalone}: not the KfDef's objects");
            for (object, expected) in ours.iter().zip(&from_kfdef) {
                assert_eq!(first_difference(object, expected, String::new()), None, "{tag} {component} {standalone}: {:?}", identity(object));
            }
            // Asked for: the built-in template.
            assert!((registered.render_packages)("kubeflow".into(), "kubeflow".into(), standalone.clone(), mirrored(true)).await.is_none(), "{component}");
            compared.push(format!("{component} {}", planned.spec["version"].as_str().unwrap()));
        }
    }
    compared.sort();
    assert_eq!(
        compared,
        [
            "dex v2.22.0", "dex v2.24.0", "dex v2.41.1", "dex v2.44.0",
            "istio 1.26.1", "istio 1.28.0", "istio 1.3.1", "istio 1.9.6",
            "katib v0.11.1", "katib v0.18.0", "katib v0.19.0",
            "kfserving v0.15.0", "kfserving v0.15.2", "kfserving v0.4.1", "kfserving v0.5.1",
            "pipelines 1.5.1", "pipelines 2.15.0", "pipelines 2.5.0",
        ]
    );
    // Kubeflow 1.2's Katib and Pipelines, which kfctl built inside its `kubeflow-apps` stack: their
    // paths there, each built on its own, running their version.
    // (Katib's images there carry a commit's tag, which tells no version.)
    let katib_v0_10 = ["CustomResourceDefinition experiments.kubeflow.org", "CustomResourceDefinition suggestions.kubeflow.org", "CustomResourceDefinition trials.kubeflow.org", "Deployment katib-controller", "Deployment katib-db-manager", "Deployment katib-mysql", "Deployment katib-ui"];
    let pipelines_1_0 = [
        "CustomResourceDefinition scheduledworkflows.kubeflow.org", "CustomResourceDefinition viewers.kubeflow.org", "CustomResourceDefinition workflows.argoproj.io",
        "Deployment argo-ui", "Deployment cache-deployer-deployment", "Deployment cache-server", "Deployment kubeflow-pipelines-profile-controller", "Deployment metadata-writer", "Deployment minio",
        "Deployment ml-pipeline", "Deployment ml-pipeline-persistenceagent", "Deployment ml-pipeline-scheduledworkflow", "Deployment ml-pipeline-ui", "Deployment ml-pipeline-viewer-crd",
        "Deployment ml-pipeline-visualizationserver", "Deployment mysql", "Deployment workflow-controller",
    ];
    for (kind, version, own_images, workloads_and_crds) in [(ComponentKind::Katib, "v0.10.0", &["docker.io/kubeflowkatib/katib-controller:v1beta1-a96ff59"][..], &katib_v0_10[..]), (ComponentKind::Pipelines, "1.0.4", &["gcr.io/ml-pipeline/api-server:1.0.4"][..], &pipelines_1_0[..])] {
        let registered = registry.iter().find(|r| r.kind == kind).unwrap();
        let standalone = serde_json::json!({"version": version});
        let rendered = (registered.render_packages)("kubeflow".into(), "kubeflow".into(), standalone.clone(), mirrored(false)).await.unwrap().unwrap();
        assert!(rendered.failed.is_empty(), "{kind} {version}: {:?}", rendered.failed);
        let own: Vec<&str> = component_framework::package::own_images(registered.version_images, &rendered.objects).into_iter().map(|(_, image)| image).collect();
        assert_eq!(own, own_images, "{kind} {version}");
        let ours = (registered.render)("kubeflow", "kubeflow", &standalone, Some(rendered)).unwrap();
        note_kinds(kind, &ours);
        let mut made: Vec<String> = ours.iter().filter(|o| ["CustomResourceDefinition", "Deployment", "StatefulSet"].contains(&o["kind"].as_str().unwrap())).map(|o| format!("{} {}", o["kind"].as_str().unwrap(), o["metadata"]["name"].as_str().unwrap())).collect();
        made.sort();
        assert_eq!(made, workloads_and_crds, "{kind} {version}");
    }
    // What the operators watch and may read of them: exactly these kinds.
    let declared: BTreeMap<ComponentKind, std::collections::BTreeSet<String>> =
        installed_kinds.keys().map(|c| (*c, registry.iter().find(|r| r.kind == *c).unwrap().installed_kinds.iter().map(|k| k.to_string()).collect())).collect();
    assert_eq!(declared, installed_kinds, "INSTALLED_KINDS");
    // The releases whose Kubeflow release has no archive here (1.3.0's, 1.10.0's): fetched from
    // upstream's archive of that tag, here through the mirror of github.com, which lacks it.
    let mut from_archives = Vec::new();
    for registered in registry.iter().filter(|r| r.renders_packages && !r.releases.is_empty()) {
        for release in &registered.releases {
            let Some(upstream) = registered.upstream_releases.iter().find(|u| u.version == release.version) else { continue };
            if RELEASES.iter().any(|(tag, _, _)| *tag == upstream.kubeflow) {
                continue;
            }
            let outcome = (registered.render_packages)("kubeflow".into(), "kubeflow".into(), serde_json::json!({"version": release.version}), mirrored(false)).await.unwrap();
            let failed = outcome.map(|r| r.failed.iter().map(|f| f.error.message.clone()).collect::<Vec<_>>()).unwrap_or_else(|e| vec![e.message]);
            let archive = format!("{remote_bases}kubeflow/manifests/archive/{}.tar.gz", upstream.kubeflow);
            assert!(!failed.is_empty() && failed.iter().all(|m| m.contains(&archive)), "{} {}: {failed:?}", registered.kind, release.version);
            from_archives.push(format!("{} {} {}", registered.kind, release.version, upstream.kubeflow));
        }
    }
    from_archives.sort();
    assert_eq!(from_archives, ["istio 1.24.3 v1.10.0", "katib v0.11.0 v1.3.0", "pipelines 1.5.0 v1.3.0"]);
    // Names the release does not use (a kfctl-era KfDef's, listing applications without a
    // repository) stand for the component: its release is installed once, as upstream ships it.
    let katib = registry.iter().find(|r| r.kind == ComponentKind::Katib).unwrap();
    let kfctl_names = serde_json::json!({"version": "v0.18.0", "sources": [{"application": "katib-crds"}, {"application": "katib-controller"}]});
    let rendered = (katib.render_packages)("kubeflow".into(), "kubeflow".into(), kfctl_names, mirrored(false)).await.unwrap().unwrap();
    assert_eq!(rendered.applications, ["katib"]);
    assert!(rendered.failed.is_empty(), "{:?}", rendered.failed);
    assert!(rendered.objects.iter().any(|o| o["kind"] == "Deployment" && o["metadata"]["name"] == "katib-controller"));
}

/// `examples/components.yaml`, the standalone resources the README applies, installs Kubeflow
/// 1.11.0's releases from its archive (here the local copy, through a mirror, with the remote
/// bases its Pipelines names): every application renders, every object carries the resource's
/// version, and the typed fields the example sets are where upstream's package keeps them.
#[tokio::test]
async fn the_example_components_install_their_releases_from_upstreams_archive() {
    let _one = ONE_INSTALL.lock().await;
    let remote_bases = kubeflow_manifests::fixtures::upstream_remote_bases_mirror().await;
    let remote_bases = remote_bases.url("gh/");
    let fetch = FetchOptions { allow_local: true, address_fence: false, remote_base_mirrors: archive_mirrors(&remote_bases), ..Default::default() };
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/components.yaml")).unwrap();
    let examples: Vec<Value> = text.split("\n---\n").map(|doc| serde_yaml_ng::from_str(doc).unwrap()).collect();
    let registry = kubeflow_component_registry::all();
    let mut installed = Vec::new();
    let mut objects = Vec::new();
    for example in &examples {
        let registered = registry.iter().find(|r| r.kind.kind() == example["kind"]).unwrap();
        let (name, namespace) = (example["metadata"]["name"].as_str().unwrap(), example["metadata"]["namespace"].as_str().unwrap());
        let rendered = (registered.render_packages)(name.into(), namespace.into(), example["spec"].clone(), fetch.clone()).await.unwrap_or_else(|| panic!("{}: not from packages", registered.kind)).unwrap();
        assert!(rendered.failed.is_empty(), "{}: {:?}", registered.kind, rendered.failed);
        let ours = (registered.render)(name, namespace, &example["spec"], Some(rendered)).unwrap();
        let version = example["spec"]["version"].as_str().unwrap();
        let labelled: std::collections::BTreeSet<&str> = ours.iter().filter_map(|o| o["metadata"]["labels"]["components.kubeflow.org/version"].as_str()).collect();
        assert_eq!(labelled, [version].into(), "{}", registered.kind);
        installed.push(format!("{} {version}", registered.kind));
        objects.extend(ours);
    }
    assert_eq!(installed, ["istio 1.28.0", "dex v2.44.0", "kfserving v0.15.2", "katib v0.19.0", "pipelines 2.15.0"]);
    let gateway = find(&objects, "Service", "istio-ingressgateway").unwrap();
    assert_eq!(gateway["spec"]["type"], "NodePort");
    assert_eq!(find(&objects, "Deployment", "katib-ui").unwrap()["spec"]["replicas"], 2);
    let dex = find(&objects, "ConfigMap", "dex").unwrap()["data"]["config.yaml"].as_str().unwrap().to_string();
    assert!(dex.contains("ldap.example.com:636"), "{dex}");
}

/// A Kubeflow release later than every one the built-ins know by name (v1.12.0 here: Kubeflow
/// 1.11.0's tree, its Istio moved to 1.29.0 and its Katib to v0.20.0, as a later release moves
/// them) is installed by the same built-ins as 1.11.0, not by the generic component: each with its
/// latest release's knowledge, at the version the packages run. The objects are 1.11.0's but for
/// those tags, and carry the version they run; a component whose packages did not move runs its
/// latest release.
#[tokio::test]
async fn a_later_kubeflow_is_installed_by_the_built_ins_at_the_versions_its_packages_run() {
    let _one = ONE_INSTALL.lock().await;
    let remote_bases = kubeflow_manifests::fixtures::upstream_remote_bases_mirror().await;
    let remote_bases = remote_bases.url("gh/");
    let (archive, known) = release_of("v1.11.0", &remote_bases);
    let tmp = std::env::temp_dir().join(format!("kfop-later-kubeflow-{}", std::process::id()));
    let cache = RepoCache::new(tmp.join("cache"), FetchOptions { allow_local: true, ..Default::default() }).unwrap();
    let root = cache.fetch(&RepoSource { name: "manifests".into(), uri: archive.display().to_string(), sha256: None }).await.unwrap().root;
    let moved = [("common/istio/istio-install/base/install.yaml", ":1.28.0", ":1.29.0"), ("applications/katib/upstream/installs/katib-with-kubeflow/kustomization.yaml", "newTag: v0.19.0", "newTag: v0.20.0")];
    for (path, from, to) in moved {
        let text = std::fs::read_to_string(root.join(path)).unwrap();
        assert!(text.contains(from), "{path}");
        std::fs::write(root.join(path), text.replace(from, to)).unwrap();
    }
    let dir = kubeflow_manifests::fixtures::upstream_releases();
    let mut kfdef: KfDef = serde_yaml_ng::from_str(&std::fs::read_to_string(dir.join("kfdef-1.11.0.yaml")).unwrap()).unwrap();
    kfdef.metadata.namespace = Some("kubeflow".into());
    kfdef.spec.version = Some("v1.12.0".into());
    kfdef.spec.repos[0].uri = root.display().to_string();
    kfdef.spec.remote_base_mirrors = vec![format!("https://github.com/={remote_bases}")];
    let later = plan_of(&kfdef);

    let installers = |plan: &meta_operator::plan::Plan| plan.applications.iter().map(|a| (a.name.clone(), a.component.clone())).collect::<Vec<_>>();
    assert_eq!(installers(&later), installers(&known), "every application goes where 1.11.0's goes");
    let mut versions = BTreeMap::new();
    for (component, planned) in later.components.iter().filter(|(c, _)| **c != ComponentKind::GENERIC && **c != ComponentKind::ProfileController) {
        assert_eq!(planned.spec["versionFromPackage"], true, "{component}");
        assert_eq!(planned.spec["version"], known.components[component].spec["version"], "{component}: the latest release's knowledge");
        let objects = objects_of(*component, &planned.spec).await;
        let labelled: std::collections::BTreeSet<&str> = objects.iter().filter_map(|o| o["metadata"]["labels"]["components.kubeflow.org/version"].as_str()).collect();
        assert_eq!(labelled.len(), 1, "{component}: {labelled:?}");
        versions.insert(component.to_string(), labelled.into_iter().next().unwrap().to_string());
        // 1.11.0's objects, but for the tags that moved.
        let before = objects_of(*component, &known.components[component].spec).await;
        assert_eq!(objects.iter().map(identity).collect::<Vec<_>>(), before.iter().map(identity).collect::<Vec<_>>(), "{component}");
        for (object, was) in objects.iter().zip(&before) {
            let mut text = serde_json::to_string(&without_ours(object.clone())).unwrap();
            for (_, from, to) in moved {
                text = text.replace(to.trim_start_matches("newTag: "), from.trim_start_matches("newTag: "));
            }
            let back: Value = serde_json::from_str(&text).unwrap();
            assert_eq!(first_difference(&back, &without_ours(was.clone()), String::new()), None, "{component}: {:?}", identity(object));
        }
    }
    let expected: BTreeMap<String, String> = [("dex", "v2.44.0"), ("istio", "1.29.0"), ("katib", "v0.20.0"), ("kfserving", "v0.15.2"), ("pipelines", "2.15.0")].into_iter().map(|(c, v)| (c.to_string(), v.to_string())).collect();
    assert_eq!(versions, expected);
    let _ = std::fs::remove_dir_all(&tmp);
}

/// A KfDef resource whose packages run another version than its `spec.version` (Kubeflow
/// 1.10.2's Istio, which runs 1.26.1, named 1.28.0, as a KfUpgrade that moved the version and not
/// the packages would): each application that runs the component is refused, naming the image;
/// the CRDs, which say nothing of a version, render.
#[tokio::test]
async fn packages_of_another_version_are_refused_not_labelled_as_the_spec_version() {
    let _one = ONE_INSTALL.lock().await;
    let (_, _, plan) = v1_10_2();
    let istio = kubeflow_component_registry::all().into_iter().find(|r| r.kind == ComponentKind::Istio).unwrap();
    let mut spec = plan.components[&ComponentKind::Istio].spec.clone();
    assert_eq!(spec["version"], "1.26.1", "the version 1.10.2's archive runs");
    spec["version"] = "1.28.0".into();
    let fetch = FetchOptions { allow_local: true, ..Default::default() };
    let rendered = (istio.render_packages)("kubeflow".into(), "kubeflow".into(), spec, fetch).await.unwrap().unwrap();
    let failed: Vec<_> = rendered.failed.iter().map(|f| (f.application.as_str(), f.error.field.as_str(), f.error.message.as_str())).collect();
    assert_eq!(
        failed,
        [(
            "istio-install",
            "spec.version",
            "application \"istio-install\" runs gcr.io/istio-release/pilot:1.26.1 (Deployment istio-system/istiod), not version 1.28.0: set spec.version to the version its package ships, or name the package of 1.28.0"
        )]
    );
    let applications: std::collections::BTreeSet<_> = rendered.objects.iter().filter_map(|o| o["metadata"]["annotations"][APPLICATION].as_str()).collect();
    assert_eq!(applications, ["cluster-local-gateway", "istio-crds"].into_iter().collect());
}

fn find<'a>(objects: &'a [Value], kind: &str, name: &str) -> Option<&'a Value> {
    objects.iter().find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
}

/// `name`'s entry in the environment of the first container of Deployment `deployment`.
fn env<'a>(objects: &'a [Value], deployment: &str, name: &str) -> &'a Value {
    let containers = &find(objects, "Deployment", deployment).unwrap_or_else(|| panic!("no Deployment {deployment}"))["spec"]["template"]["spec"]["containers"];
    containers[0]["env"].as_array().into_iter().flatten().find(|e| e["name"] == name).unwrap_or_else(|| panic!("{deployment} has no {name}"))
}

/// The built-ins' typed spec on upstream's own packages (v1.10.2): each setting lands where
/// upstream's package keeps it, and what the setting replaces (a built-in database) goes.
#[tokio::test]
async fn typed_spec_fields_are_applied_to_upstreams_packages() {
    let _one = ONE_INSTALL.lock().await;
    let (_, _, plan) = v1_10_2();
    let spec = |component: ComponentKind, fields: Value| {
        let mut spec = plan.components[&component].spec.clone();
        spec.as_object_mut().unwrap().extend(fields.as_object().unwrap().clone());
        spec
    };

    let pipelines = objects_of(ComponentKind::Pipelines, &spec(ComponentKind::Pipelines, serde_json::json!({"database": {"host": "mysql.example.com", "port": 3307, "secretRef": {"name": "kfp-db", "key": "pw"}}}))).await;
    let config = &find(&pipelines, "ConfigMap", "pipeline-install-config").unwrap()["data"];
    assert_eq!([&config["dbHost"], &config["mysqlHost"], &config["dbPort"], &config["mysqlPort"]], ["mysql.example.com", "mysql.example.com", "3307", "3307"]);
    for (deployment, variable) in [("ml-pipeline", "DBCONFIG_MYSQLCONFIG_PASSWORD"), ("ml-pipeline", "DBCONFIG_PASSWORD"), ("cache-server", "DBCONFIG_PASSWORD"), ("metadata-grpc-deployment", "DBCONFIG_PASSWORD")] {
        assert_eq!(env(&pipelines, deployment, variable)["valueFrom"]["secretKeyRef"], serde_json::json!({"name": "kfp-db", "key": "pw"}), "{deployment} {variable}");
    }
    assert_eq!(env(&pipelines, "ml-pipeline", "DBCONFIG_MYSQLCONFIG_USER")["valueFrom"]["secretKeyRef"], serde_json::json!({"name": "mysql-secret", "key": "username"}), "the user stays the package's");
    for (kind, name) in [("Deployment", "mysql"), ("Service", "mysql"), ("PersistentVolumeClaim", "mysql-pv-claim")] {
        assert!(find(&pipelines, kind, name).is_none(), "the package's MySQL ({kind} {name}) with an external database");
    }

    // The object store: the spec's credentials for every reader of the package's store Secret
    // (the built-in MinIO too), its bucket wherever the package names one; an external endpoint
    // is refused, changing nothing.
    let store = serde_json::json!({"objectStore": {"bucket": "team-artifacts", "secretRef": {"name": "kfp-store", "key": "secret"}}});
    let pipelines = objects_of(ComponentKind::Pipelines, &spec(ComponentKind::Pipelines, store)).await;
    for (deployment, variable, key) in [
        ("ml-pipeline", "OBJECTSTORECONFIG_ACCESSKEY", "accesskey"),
        ("ml-pipeline", "OBJECTSTORECONFIG_SECRETACCESSKEY", "secret"),
        ("ml-pipeline-ui", "MINIO_ACCESS_KEY", "accesskey"),
        ("ml-pipeline-ui", "MINIO_SECRET_KEY", "secret"),
        ("minio", "MINIO_ACCESS_KEY", "accesskey"),
        ("minio", "MINIO_SECRET_KEY", "secret"),
        ("kubeflow-pipelines-profile-controller", "MINIO_ACCESS_KEY", "accesskey"),
        ("kubeflow-pipelines-profile-controller", "MINIO_SECRET_KEY", "secret"),
    ] {
        assert_eq!(env(&pipelines, deployment, variable)["valueFrom"]["secretKeyRef"], serde_json::json!({"name": "kfp-store", "key": key}), "{deployment} {variable}");
    }
    let config = &find(&pipelines, "ConfigMap", "pipeline-install-config").unwrap()["data"];
    assert_eq!([&config["bucketName"], &config["defaultPipelineRoot"]], ["team-artifacts", "minio://team-artifacts/v2/artifacts"]);
    let repository: Value = serde_yaml_ng::from_str(find(&pipelines, "ConfigMap", "workflow-controller-configmap").unwrap()["data"]["artifactRepository"].as_str().unwrap()).unwrap();
    assert_eq!(repository["s3"]["bucket"], "team-artifacts");
    assert_eq!(repository["s3"]["endpoint"], "minio-service.kubeflow:9000", "the package's other settings stay");
    assert_eq!(repository["s3"]["accessKeySecret"]["name"], "mlpipeline-minio-artifact", "runs in profile namespaces read the copy the profile controller makes there");
    assert_eq!(env(&pipelines, "ml-pipeline-ui", "ARGO_ARCHIVE_BUCKETNAME")["value"], "team-artifacts");
    let external = spec(ComponentKind::Pipelines, serde_json::json!({"objectStore": {"endpoint": "s3.example.com"}}));
    let registry = kubeflow_component_registry::all();
    let registered = registry.iter().find(|r| r.kind == ComponentKind::Pipelines).unwrap();
    let rendered = (registered.render_packages)("kubeflow".into(), "kubeflow".into(), external.clone(), FetchOptions { allow_local: true, ..Default::default() }).await.unwrap().unwrap();
    let refused = (registered.render)("kubeflow", "kubeflow", &external, Some(rendered)).unwrap_err().to_string();
    assert!(refused.starts_with("spec.objectStore.endpoint: is not applied to upstream's package"), "{refused}");

    let katib = objects_of(ComponentKind::Katib, &spec(ComponentKind::Katib, serde_json::json!({"database": {"type": "Postgres", "host": "pg.example.com", "secretRef": {"name": "katib-db", "key": "password"}}}))).await;
    assert_eq!(env(&katib, "katib-db-manager", "DB_NAME")["value"], "postgres");
    assert_eq!(env(&katib, "katib-db-manager", "KATIB_POSTGRESQL_DB_HOST")["value"], "pg.example.com");
    assert_eq!(env(&katib, "katib-db-manager", "KATIB_POSTGRESQL_DB_PORT")["value"], "5432");
    assert_eq!(env(&katib, "katib-db-manager", "DB_PASSWORD")["valueFrom"]["secretKeyRef"], serde_json::json!({"name": "katib-db", "key": "password"}));
    for (kind, name) in [("Deployment", "katib-mysql"), ("Service", "katib-mysql"), ("PersistentVolumeClaim", "katib-mysql"), ("Secret", "katib-mysql-secrets")] {
        assert!(find(&katib, kind, name).is_none(), "the package's MySQL ({kind} {name}) with an external database");
    }

    let kserve = objects_of(ComponentKind::KFServing, &spec(ComponentKind::KFServing, serde_json::json!({"ingressDomain": "models.example.org", "ingressGateway": "istio-system/public-gateway"}))).await;
    let ingress: Value = serde_json::from_str(find(&kserve, "ConfigMap", "inferenceservice-config").unwrap()["data"]["ingress"].as_str().unwrap()).unwrap();
    assert_eq!((ingress["ingressDomain"].as_str(), ingress["ingressGateway"].as_str()), (Some("models.example.org"), Some("istio-system/public-gateway")));
    assert_eq!(ingress["localGateway"], "knative-serving/knative-local-gateway", "the package's other settings stay");

    let istio = objects_of(ComponentKind::Istio, &spec(ComponentKind::Istio, serde_json::json!({"gateway": {"serviceType": "NodePort", "httpPort": 8081, "httpsPort": 8444}}))).await;
    let gateway = &find(&istio, "Service", "istio-ingressgateway").unwrap()["spec"];
    assert_eq!(gateway["type"], "NodePort");
    let ports: Vec<(&str, i64, i64)> = gateway["ports"].as_array().unwrap().iter().map(|p| (p["name"].as_str().unwrap(), p["port"].as_i64().unwrap(), p["targetPort"].as_i64().unwrap())).collect();
    assert_eq!(ports, [("status-port", 15021, 15021), ("http2", 8081, 8080), ("https", 8444, 8443)], "the pods' ports stay the package's");

    let dex = objects_of(ComponentKind::Dex, &spec(ComponentKind::Dex, serde_json::json!({"issuer": "https://login.example.org/dex", "connectors": [{"type": "github", "id": "github", "name": "GitHub", "config": {"clientID": "kubeflow"}}]}))).await;
    let config: Value = serde_yaml_ng::from_str(find(&dex, "ConfigMap", "dex").unwrap()["data"]["config.yaml"].as_str().unwrap()).unwrap();
    assert_eq!(config["issuer"], "https://login.example.org/dex");
    assert_eq!(config["connectors"], serde_json::json!([{"type": "github", "id": "github", "name": "GitHub", "config": {"clientID": "kubeflow"}}]));
    assert_eq!(config["staticPasswords"][0]["email"], "user@example.com", "the package's other settings stay");
    let pod = &find(&dex, "Deployment", "dex").unwrap()["spec"]["template"]["metadata"]["annotations"];
    assert!(pod["components.kubeflow.org/config-checksum"].is_string(), "a changed configuration rolls Dex's pods: {pod}");

    // Static passwords: the hashes go into the package's Secret, read back from Dex's environment.
    let users = "- {email: ada@example.org, hash: $2y$10$ada, username: ada, userID: '1'}\n- {email: bob@example.org, hash: $2y$10$bob, username: bob, userID: '2'}\n";
    let with_users = |text: &str| {
        let spec = spec(ComponentKind::Dex, serde_json::json!({"staticPasswordsSecretRef": {"name": "dex-users", "key": "users.yaml"}}));
        let secrets = BTreeMap::from([(("dex-users".to_string(), "users.yaml".to_string()), text.to_string())]);
        async move { dex_with_secrets(&spec, secrets).await }
    };
    let dex = with_users(users).await.unwrap();
    let config: Value = serde_yaml_ng::from_str(find(&dex, "ConfigMap", "dex").unwrap()["data"]["config.yaml"].as_str().unwrap()).unwrap();
    assert_eq!(
        config["staticPasswords"],
        serde_json::json!([
            {"email": "ada@example.org", "hashFromEnv": "DEX_STATIC_PASSWORD_0", "username": "ada", "userID": "1"},
            {"email": "bob@example.org", "hashFromEnv": "DEX_STATIC_PASSWORD_1", "username": "bob", "userID": "2"},
        ]),
        "the package's default user is replaced, and no hash is written into the ConfigMap"
    );
    let hashes = &find(&dex, "Secret", "dex-passwords").unwrap()["data"];
    let decoded = |key: &str| String::from_utf8(base64::engine::general_purpose::STANDARD.decode(hashes[key].as_str().unwrap()).unwrap()).unwrap();
    assert_eq!((decoded("DEX_STATIC_PASSWORD_0"), decoded("DEX_STATIC_PASSWORD_1")), ("$2y$10$ada".to_string(), "$2y$10$bob".to_string()));
    assert!(hashes.get("DEX_USER_PASSWORD").is_none(), "the default user's hash goes: {hashes}");
    let checksum = |objects: &[Value]| find(objects, "Deployment", "dex").unwrap()["spec"]["template"]["metadata"]["annotations"]["components.kubeflow.org/config-checksum"].clone();
    let other = with_users(&users.replace("$2y$10$bob", "$2y$10$new")).await.unwrap();
    assert_ne!(checksum(&dex), checksum(&other), "a changed hash rolls Dex's pods");
    let refused = with_users("not: a list").await.unwrap_err();
    assert_eq!(refused.field, "spec.staticPasswordsSecretRef.key");
}

/// Dex's objects for `spec` on the KfDef's packages, the referenced Secret keys read as `secrets`.
async fn dex_with_secrets(spec: &Value, secrets: BTreeMap<(String, String), String>) -> Result<Vec<Value>, component_framework::InvalidSpec> {
    let registry = kubeflow_component_registry::all();
    let registered = registry.iter().find(|r| r.kind == ComponentKind::Dex).unwrap();
    let fetch = FetchOptions { allow_local: true, ..Default::default() };
    let rendered = (registered.render_packages)("kubeflow".into(), "kubeflow".into(), spec.clone(), fetch).await.unwrap().unwrap();
    let resource: kubeflow_crds::component::Dex = serde_json::from_value(serde_json::json!({"apiVersion": "components.kubeflow.org/v1alpha1", "kind": "Dex", "metadata": {"name": "kubeflow", "namespace": "kubeflow"}, "spec": spec})).unwrap();
    component_framework::build::desired_objects::<dex_operator::DexComponent>(&resource, &component_framework::Inputs { secrets, rendered: Some(rendered) })
}
