//! `kfop`, the kfctl-style command, against the real control plane with no operator running: the
//! generated manifests repository served as a GitHub-style tarball, a v1.0-shaped KfDef over it.
//! `build` writes what the operators apply (the live objects later carry the same applied hash);
//! `apply` installs every application with the component controllers running inside the command
//! and exits once all are Ready; a second `apply` with an edited parameter updates the object;
//! `delete` removes everything but the CRD and namespaces. And `build` of each current
//! release's KfDef writes upstream's `kustomize build example`, object for object.

use std::collections::BTreeMap;
use tokio::process::Command;

use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::{Api, ResourceExt};
use kubeflow_crds::component::ComponentPhase;
use kubeflow_crds::kfdef::KustomizeRelease;
use kubeflow_crds::{KfDef, KustomizeApplication};
use kubeflow_e2e::*;
use kubeflow_manifests::fixtures;
use serde_json::Value;

const HASH: &str = "components.kubeflow.org/applied-hash";

/// Runs `kfop <args>` to completion (without blocking the runtime that serves the repository);
/// its stdout, or a panic with its output.
async fn kfop(args: &[&str]) -> String {
    let output = Command::new(bin_dir().join("kfop")).args(args).output().await.unwrap_or_else(|e| panic!("run kfop (cargo build --workspace --bins): {e}"));
    let (stdout, stderr) = (String::from_utf8_lossy(&output.stdout).into_owned(), String::from_utf8_lossy(&output.stderr).into_owned());
    assert!(output.status.success(), "kfop {args:?} failed\nstdout:\n{stdout}\nstderr:\n{stderr}");
    stdout
}

#[tokio::test]
async fn kfop_builds_applies_and_deletes_a_kfdef_with_the_operators_functions() {
    let client = client().await;
    prepare_manifests_fixture(&client).await;
    // v1.0.3: a new image and one object fewer.
    let v103 = [("demo/web-app/base/deployment.yaml", "web-app:v1.0.0", "web-app:v1.0.1"), ("demo/web-app/base/kustomization.yaml", "- cluster-role-binding.yaml\n", "")];
    let server = fixtures::Server::start(BTreeMap::from([
        ("archive/v1.0.2.tar.gz".to_string(), fixtures::repo_tarball()),
        ("archive/v1.0.3.tar.gz".to_string(), fixtures::edited_repo_tarball(&v103)),
    ]))
    .await;
    let ns = TestNamespace::create(&client, "e2e-kfop").await;
    let dir = std::env::temp_dir().join(unique_name("kfop"));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("kfdef.yaml");
    let mut kfdef = fixtures::per_application_kfdef(&server.url("archive/v1.0.2.tar.gz"), &ns.name);
    std::fs::write(&file, serde_yaml_ng::to_string(&kfdef).unwrap()).unwrap();
    let file = file.to_str().unwrap().to_string();

    // build: what the generic component's operator would apply, with no cluster involved.
    let out = dir.join("out");
    kfop(&["build", "-f", &file, "-o", out.to_str().unwrap()]).await;
    let built: Vec<Value> = serde_yaml_ng::Deserializer::from_str(&std::fs::read_to_string(out.join("kustomize.yaml")).unwrap())
        .map(|doc| serde::Deserialize::deserialize(doc).unwrap())
        .collect();
    let parameters = built.iter().find(|o| o["kind"] == "ConfigMap" && o["metadata"]["name"] == "web-app-parameters").expect("web-app-parameters built");
    assert_eq!(parameters["metadata"]["namespace"], ns.name.as_str());
    assert_eq!(parameters["metadata"]["annotations"]["components.kubeflow.org/owner"], format!("{}/demo", ns.name));
    let built_hash = parameters["metadata"]["annotations"][HASH].as_str().unwrap().to_string();

    // apply: every application Ready when the command returns; then nothing runs any more.
    let stdout = kfop(&["apply", "-f", &file, "--timeout", "120"]).await;
    assert!(stdout.contains("every application is Ready"), "{stdout}");
    let resource = Api::<KustomizeApplication>::namespaced(client.clone(), &ns.name).get("demo").await.unwrap();
    let status = resource.status.unwrap();
    assert_eq!(status.phase, Some(ComponentPhase::Ready));
    assert_eq!(status.applications.iter().map(|a| (a.name.as_str(), a.state)).collect::<Vec<_>>(), [("webhook", ComponentPhase::Ready), ("web-app", ComponentPhase::Ready)]);
    assert_eq!(resource.metadata.labels.unwrap_or_default().get("kfop.kubeflow.org/kfdef").map(String::as_str), Some("demo"));
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns.name);
    let live = config_maps.get("web-app-parameters").await.unwrap();
    assert_eq!(live.annotations().get(HASH), Some(&built_hash), "build differs from what apply applied");
    assert_eq!(live.data.as_ref().unwrap()["userid-header"], "kubeflow-userid");
    Api::<MutatingWebhookConfiguration>::all(client.clone()).get("tenant-defaulter").await.unwrap();

    // plan of what is installed: nothing to do.
    let stdout = kfop(&["plan", "-f", &file]).await;
    assert!(stdout.contains(&format!("KfDef {}/demo: 0 to add, 0 to change, 0 to prune", ns.name)), "{stdout}");

    // plan of v1.0.3's repository: the new image and the object it no longer has, nothing written.
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns.name);
    let bindings: Api<ClusterRoleBinding> = Api::all(client.clone());
    let (deployment, binding) = (deployments.get("web-app").await.unwrap(), bindings.get("web-app-binding").await.unwrap());
    let mut next = kfdef.clone();
    next.spec.repos[0].uri = server.url("archive/v1.0.3.tar.gz");
    let next_file = dir.join("kfdef-v1.0.3.yaml");
    std::fs::write(&next_file, serde_yaml_ng::to_string(&next).unwrap()).unwrap();
    let stdout = kfop(&["plan", "-f", next_file.to_str().unwrap()]).await;
    assert!(stdout.contains(&format!("  change    Deployment {}/web-app: spec.template.spec.containers[0].image\n", ns.name)), "{stdout}");
    assert!(stdout.contains("  prune     ClusterRoleBinding web-app-binding\n"), "{stdout}");
    assert!(stdout.contains(&format!("KfDef {}/demo: 0 to add, 1 to change, 1 to prune", ns.name)), "{stdout}");
    assert_eq!(deployments.get("web-app").await.unwrap().resource_version(), deployment.resource_version(), "plan changed the Deployment");
    assert_eq!(bindings.get("web-app-binding").await.unwrap().resource_version(), binding.resource_version(), "plan changed the binding");

    // apply again with an edited parameter: the plan names it, and the object follows.
    let web_app = kfdef.spec.applications.iter_mut().find(|a| a.name == "web-app").unwrap();
    web_app.kustomize_config.as_mut().unwrap().parameters[0].value = "x-forwarded-user".into();
    std::fs::write(&file, serde_yaml_ng::to_string(&kfdef).unwrap()).unwrap();
    let stdout = kfop(&["plan", "-f", &file]).await;
    assert!(stdout.contains(&format!("  change    ConfigMap {}/web-app-parameters: data.userid-header", ns.name)), "{stdout}");
    kfop(&["apply", "-f", &file, "--timeout", "120"]).await;
    assert_eq!(config_maps.get("web-app-parameters").await.unwrap().data.unwrap()["userid-header"], "x-forwarded-user");

    // delete: everything but the CRD and the namespaces.
    let stdout = kfop(&["delete", "-f", &file, "--timeout", "120"]).await;
    assert!(stdout.contains("deleted with everything it installed"), "{stdout}");
    assert!(config_maps.get_opt("web-app-parameters").await.unwrap().is_none());
    assert!(Api::<ClusterRole>::all(client.clone()).get_opt("tenant-webhook").await.unwrap().is_none());
    assert!(Api::<MutatingWebhookConfiguration>::all(client.clone()).get_opt("tenant-defaulter").await.unwrap().is_none());
    assert!(Api::<KustomizeApplication>::namespaced(client.clone(), &ns.name).get_opt("demo").await.unwrap().is_none());
    assert!(Api::<CustomResourceDefinition>::all(client.clone()).get_opt("tenants.demo.kubeflow.org").await.unwrap().is_some(), "a CRD was deleted");
    assert!(Api::<Namespace>::all(client.clone()).get_opt("demo-tenants").await.unwrap().is_some(), "a namespace was deleted");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `kfop build` of a kfctl-era KfDef whose package renders removed API versions writes the
/// objects converted (what a user reviews or commits) and lists each conversion.
#[tokio::test]
async fn kfop_build_writes_removed_api_versions_converted_and_lists_them() {
    let dir = std::env::temp_dir().join(unique_name("kfop-legacy"));
    let repo = dir.join("repo");
    fixtures::write_repo(&repo);
    let file = dir.join("kfdef.yaml");
    std::fs::write(&file, serde_yaml_ng::to_string(&fixtures::legacy_kfdef(repo.to_str().unwrap(), "team-a", false)).unwrap()).unwrap();
    let out = dir.join("out");
    let stdout = kfop(&["build", "-f", file.to_str().unwrap(), "-o", out.to_str().unwrap()]).await;
    assert!(stdout.contains("12 objects converted from API versions Kubernetes no longer serves"), "{stdout}");
    assert!(stdout.contains("legacy: Deployment team-a/legacy-controller: extensions/v1beta1 → apps/v1 (selector taken from the pod template's labels)"), "{stdout}");
    let built: Vec<Value> = serde_yaml_ng::Deserializer::from_str(&std::fs::read_to_string(out.join("kustomize.yaml")).unwrap())
        .map(|doc| serde::Deserialize::deserialize(doc).unwrap())
        .collect();
    let deployment = built.iter().find(|o| o["kind"] == "Deployment" && o["metadata"]["name"] == "legacy-controller").expect("legacy-controller built");
    assert_eq!((deployment["apiVersion"].as_str(), &deployment["spec"]["selector"]), (Some("apps/v1"), &serde_json::json!({"matchLabels": {"app": "legacy-controller"}})));
    let crd = built.iter().find(|o| o["kind"] == "CustomResourceDefinition").unwrap();
    assert_eq!(crd["apiVersion"], "apiextensions.k8s.io/v1");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `kfop init --release v1.11.0`, its archive served over HTTP as github.com would serve it
/// (`--fetch-from`, the KfDef naming upstream's URI): the KfDef `examples/kfdef-v1.11.0.yaml`
/// ships, byte for byte; a tag that is no release is refused, naming the flag.
#[tokio::test]
async fn kfop_init_writes_the_kfdef_of_a_release_from_its_example() {
    let archive = std::fs::read(fixtures::upstream_releases().join("manifests-1.11.0.tar.gz")).unwrap();
    let server = fixtures::Server::start(BTreeMap::from([("kubeflow/manifests/archive/v1.11.0.tar.gz".to_string(), archive)])).await;
    let written = kfop(&["init", "--release", "v1.11.0", "--fetch-from", &server.url("kubeflow/manifests/archive/v1.11.0.tar.gz")]).await;
    let shipped = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/kfdef-v1.11.0.yaml")).unwrap();
    assert!(written == shipped, "kfop init wrote:\n{written}");
    let refused = Command::new(bin_dir().join("kfop")).args(["init", "--release", "main"]).output().await.unwrap();
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("--release \"main\": expected a release tag"), "{}", String::from_utf8_lossy(&refused.stderr));
}

/// `kfop build` of each current release's KfDef (`../shared/manifests`: the archive read from
/// disk, 1.11's remote bases served by a loopback mirror) writes what upstream's `kustomize build
/// example` renders with the kustomize the release pins: the same objects by kind, namespace and
/// name, and the converse; each one field for field but for what `kfop build` lists as converted
/// from an API version Kubernetes removed (compared by name), our own labels and annotations, and
/// what others write ([`applied_fields`]). Every Namespace is written as upstream renders it,
/// whichever component uses it; a namespaced object upstream leaves without a namespace is in the
/// KfDef's, where `kubectl apply -n kubeflow` puts it. The profiles application is upstream's
/// controller in every release (no `profiles.yaml`).
#[tokio::test]
async fn kfop_build_of_each_current_release_writes_upstreams_example() {
    let mirror = fixtures::upstream_remote_bases_mirror().await;
    let releases = fixtures::upstream_releases();
    for (tag, pinned, count) in [("1.3.1", KustomizeRelease::V3_2, 586), ("1.10.2", KustomizeRelease::V5, 611), ("1.11.0", KustomizeRelease::V5, 653)] {
        let dir = std::env::temp_dir().join(unique_name(&format!("kfop-{tag}")));
        std::fs::create_dir_all(&dir).unwrap();
        let mut kfdef: KfDef = serde_yaml_ng::from_str(&std::fs::read_to_string(releases.join(format!("kfdef-{tag}.yaml"))).unwrap()).unwrap();
        kfdef.spec.repos[0].uri = releases.join(format!("manifests-{tag}.tar.gz")).display().to_string();
        kfdef.spec.remote_base_mirrors = vec![format!("https://github.com/={}", mirror.url("gh/"))];
        let file = dir.join("kfdef.yaml");
        std::fs::write(&file, serde_yaml_ng::to_string(&kfdef).unwrap()).unwrap();
        let out = dir.join("out");
        kfop(&["build", "-f", file.to_str().unwrap(), "-o", out.to_str().unwrap()]).await;
        assert!(!out.join("profiles.yaml").exists(), "{tag}: the profiles application went to our controller");
        let mut ours: BTreeMap<(String, String, String), Value> = BTreeMap::new();
        for entry in std::fs::read_dir(&out).unwrap() {
            let text = std::fs::read_to_string(entry.unwrap().path()).unwrap();
            for object in serde_yaml_ng::Deserializer::from_str(&text).map(|doc| <Value as serde::Deserialize>::deserialize(doc).unwrap()).filter(|o| !o.is_null()) {
                let object = applied_fields(object);
                let id = identity(&object);
                if let Some(other) = ours.insert(id.clone(), object.clone()) {
                    assert_eq!(other, object, "{tag}: {id:?} written twice, otherwise");
                }
            }
        }
        let upstream = upstream_example(tag, pinned, &dir, kfdef.metadata.namespace.as_deref().unwrap()).await;
        assert_eq!(upstream.len(), count, "{tag}: upstream's example");
        let names = |objects: &BTreeMap<(String, String, String), Value>| objects.keys().cloned().collect::<Vec<_>>();
        assert_eq!(names(&ours), names(&upstream), "{tag}: not upstream's objects");
        let mut differ = Vec::new();
        for (id, object) in &upstream {
            let mut written = ours[id].clone();
            // kustomize's `vars` are global to a build: in upstream's single build pvcviewer's
            // fill the placeholder JobSet's CRD carries; built on its own, it keeps JobSet's text.
            let ca = "cert-manager.io/inject-ca-from";
            if tag == "1.11.0" && id.2 == "jobsets.jobset.x-k8s.io" && written["metadata"]["annotations"][ca] == "$(CERTIFICATE_NAMESPACE)/$(CERTIFICATE_NAME)" {
                written["metadata"]["annotations"][ca] = object["metadata"]["annotations"][ca].clone();
            }
            if written["apiVersion"] == object["apiVersion"] && written != *object {
                differ.push(format!("{id:?}\n  ours:     {written}\n  upstream: {object}"));
            }
        }
        assert!(differ.is_empty(), "{tag}: {} objects differ from upstream's:\n{}", differ.len(), differ.join("\n"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// The KfDef of release `tag` from `../shared/manifests`, its archive read from disk and its
/// remote bases from `mirror`, written into `dir`: its path.
fn release_kfdef(tag: &str, mirror: &fixtures::Server, dir: &std::path::Path) -> std::path::PathBuf {
    let releases = fixtures::upstream_releases();
    let mut kfdef: KfDef = serde_yaml_ng::from_str(&std::fs::read_to_string(releases.join(format!("kfdef-{tag}.yaml"))).unwrap()).unwrap();
    kfdef.spec.repos[0].uri = releases.join(format!("manifests-{tag}.tar.gz")).display().to_string();
    kfdef.spec.remote_base_mirrors = vec![format!("https://github.com/={}", mirror.url("gh/"))];
    let file = dir.join(format!("kfdef-{tag}.yaml"));
    std::fs::write(&file, serde_yaml_ng::to_string(&kfdef).unwrap()).unwrap();
    file
}

/// `kfop plan --from kfdef-1.10.2.yaml -f kfdef-1.11.0.yaml`, no cluster read: what it adds,
/// prunes, keeps and changes is what upstream's own `kustomize build example` of the two
/// releases differ in, object for object (the expectation is computed from upstream's builds,
/// not from ours); CRDs, namespaces and PersistentVolumeClaims only 1.10.2 has are kept, the
/// rest pruned; a changed Deployment names its new image as upstream's 1.11.0 has it; the
/// applications 1.11.0 drops and adds are listed so, and the release notes' steps follow.
#[tokio::test]
async fn kfop_plan_between_two_releases_lists_what_upstreams_builds_differ_in() {
    let mirror = fixtures::upstream_remote_bases_mirror().await;
    let dir = std::env::temp_dir().join(unique_name("kfop-plan"));
    std::fs::create_dir_all(&dir).unwrap();
    let (from, to) = (release_kfdef("1.10.2", &mirror, &dir), release_kfdef("1.11.0", &mirror, &dir));
    let printed = kfop(&["plan", "--from", from.to_str().unwrap(), "-f", to.to_str().unwrap()]).await;
    // `  verb      Kind namespace/name [application]…`, by (kind, namespace, name).
    let mut listed: BTreeMap<&str, BTreeMap<(String, String, String), &str>> = BTreeMap::new();
    for line in printed.lines().filter_map(|l| l.strip_prefix("  ")) {
        let mut words = line.split_whitespace();
        let (Some(verb), Some(kind), Some(name)) = (words.next(), words.next(), words.next()) else { continue };
        let (namespace, name) = name.split_once('/').unwrap_or(("", name));
        let id = (kind.to_string(), namespace.to_string(), name.to_string());
        assert!(listed.entry(verb).or_default().insert(id.clone(), line).is_none(), "{id:?} listed twice: {line}");
    }
    let up10 = upstream_example("1.10.2", KustomizeRelease::V5, &dir.join("up10"), "kubeflow").await;
    let up11 = upstream_example("1.11.0", KustomizeRelease::V5, &dir.join("up11"), "kubeflow").await;
    let ids = |verb: &str| listed.get(verb).map(|l| l.keys().cloned().collect::<Vec<_>>()).unwrap_or_default();
    let added: Vec<_> = up11.keys().filter(|id| !up10.contains_key(*id)).cloned().collect();
    let (kept, pruned): (Vec<_>, Vec<_>) =
        up10.keys().filter(|id| !up11.contains_key(*id)).cloned().partition(|id| ["CustomResourceDefinition", "Namespace", "PersistentVolumeClaim"].contains(&id.0.as_str()));
    let changed: Vec<_> = up11.iter().filter(|(id, object)| up10.get(*id).is_some_and(|old| old != *object)).map(|(id, _)| id.clone()).collect();
    assert!(!added.is_empty() && !pruned.is_empty() && !kept.is_empty() && !changed.is_empty(), "the two releases differ in every way");
    assert_eq!(ids("add"), added, "added: what only upstream's 1.11.0 renders\n{printed}");
    assert_eq!(ids("prune"), pruned, "pruned: what only 1.10.2 renders, but CRDs, namespaces and claims");
    assert_eq!(ids("keep"), kept, "kept: the CRDs, namespaces and claims only 1.10.2 renders");
    assert_eq!(ids("change"), changed, "changed: what both render, otherwise");
    // The API server's Deployment of 1.11.0's Pipelines names its new image.
    let api_server = ("Deployment".to_string(), "kubeflow".to_string(), "ml-pipeline".to_string());
    let image = up11[&api_server]["spec"]["template"]["spec"]["containers"][0]["image"].as_str().unwrap();
    let was = up10[&api_server]["spec"]["template"]["spec"]["containers"][0]["image"].as_str().unwrap();
    assert_ne!(image, was);
    assert!(listed["change"][&api_server].contains(&format!("image spec.template.spec.containers[0].image: {was} → {image}")), "{}", listed["change"][&api_server]);
    for (application, verdict) in [("training-operator", "removed"), ("trainer", "added"), ("security-pss-dynamic-baseline", "added"), ("centraldashboard", "changed")] {
        assert!(printed.lines().any(|l| l.starts_with(&format!("application {application} (")) && l.contains(&format!("): {verdict};"))), "{application} {verdict}:\n{printed}");
    }
    assert!(printed.contains("manual    Kubeflow 1.11: Pipelines' default object store moves from MinIO to SeaweedFS"), "{printed}");
    // docs/upgrades.md quotes it (`--nocapture`).
    println!("{printed}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// (kind, namespace, name).
fn identity(object: &Value) -> (String, String, String) {
    let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
    (text(&object["kind"]), text(&object["metadata"]["namespace"]), text(&object["metadata"]["name"]))
}

/// `object` as an apply sets it: without our labels and annotations, `status`, a null
/// `creationTimestamp`, an aggregated ClusterRole's rules or the CA bundle cert-manager injects
/// into a webhook configuration annotated for it; a Secret's `stringData` in its `data`, as the
/// API server stores it.
fn applied_fields(mut object: Value) -> Value {
    use base64::Engine;
    if object["kind"] == "Secret"
        && let Some(Value::Object(strings)) = object.as_object_mut().and_then(|o| o.remove("stringData"))
    {
        for (key, value) in strings {
            object["data"][key] = Value::from(base64::engine::general_purpose::STANDARD.encode(value.as_str().unwrap_or_default()));
        }
    }
    if object["metadata"]["annotations"]["cert-manager.io/inject-ca-from"].is_string() {
        for webhook in object["webhooks"].as_array_mut().into_iter().flatten() {
            webhook["clientConfig"].as_object_mut().map(|c| c.remove("caBundle"));
        }
    }
    let metadata = object["metadata"].as_object_mut().unwrap();
    for field in ["labels", "annotations"] {
        if let Some(map) = metadata.get_mut(field).and_then(Value::as_object_mut) {
            map.retain(|key, _| !key.starts_with("components.kubeflow.org/"));
        }
        if metadata.get(field).is_some_and(|m| m.is_null() || m.as_object().is_some_and(|m| m.is_empty())) {
            metadata.remove(field);
        }
    }
    if metadata.get("creationTimestamp").is_some_and(Value::is_null) {
        metadata.remove("creationTimestamp");
    }
    let map = object.as_object_mut().unwrap();
    map.remove("status");
    if map.get("kind").is_some_and(|k| k == "ClusterRole") && map.contains_key("aggregationRule") {
        map.remove("rules");
    }
    object
}

/// Upstream's `kustomize build example` of release `tag` with kustomize `pinned` (remote bases
/// from `remote/`, as kustomize would have fetched them), by identity; a namespaced object
/// without a namespace in `namespace`.
async fn upstream_example(tag: &str, pinned: KustomizeRelease, dir: &std::path::Path, namespace: &str) -> BTreeMap<(String, String, String), Value> {
    let unpacked = dir.join("upstream");
    std::fs::create_dir_all(&unpacked).unwrap();
    let status = std::process::Command::new("tar").arg("-xzf").arg(fixtures::upstream_releases().join(format!("manifests-{tag}.tar.gz"))).arg("-C").arg(&unpacked).status().unwrap();
    assert!(status.success());
    let offline = dir.join("offline");
    std::fs::create_dir_all(&offline).unwrap();
    let (root, _) = fixtures::with_upstream_remote_bases_local(&unpacked.join(format!("manifests-{tag}")), &offline);
    let kustomize = kubeflow_manifests::Kustomize::locate_release(pinned).await.unwrap_or_else(|e| panic!("this test runs the real kustomize: {e}"));
    let home = dir.join("home");
    std::fs::create_dir_all(&home).unwrap();
    let output = kustomize.build(&root.join("example"), &home, std::slice::from_ref(&root)).await.unwrap_or_else(|e| panic!("upstream's build of {tag}'s example: {e}"));
    let objects: Vec<Value> = kubeflow_manifests::parse_objects(&output).unwrap().into_iter().map(|o| serde_json::to_value(o).unwrap()).collect();
    // The kinds the build's own CRDs declare, with their scope.
    let declared: BTreeMap<(String, String), bool> = objects
        .iter()
        .filter(|o| o["kind"] == "CustomResourceDefinition")
        .map(|crd| ((crd["spec"]["group"].as_str().unwrap_or_default().to_string(), crd["spec"]["names"]["kind"].as_str().unwrap_or_default().to_string()), crd["spec"]["scope"] == "Namespaced"))
        .collect();
    let mut out = BTreeMap::new();
    for mut object in objects {
        let api_version = object["apiVersion"].as_str().unwrap_or_default().to_string();
        let kind = object["kind"].as_str().unwrap_or_default().to_string();
        let group = api_version.rsplit_once('/').map_or("", |(g, _)| g).to_string();
        let namespaced = component_framework::kinds::lookup(&api_version, &kind).map(|k| !k.cluster_scoped).or_else(|| declared.get(&(group, kind.clone())).copied());
        if namespaced == Some(true) && object["metadata"]["namespace"].is_null() {
            object["metadata"]["namespace"] = Value::from(namespace);
        }
        let object = applied_fields(object);
        out.insert(identity(&object), object);
    }
    out
}
