//! `kfop`, the kfctl-style command, against the real control plane with no operator running: the
//! generated manifests repository served as a GitHub-style tarball, a v1.0-shaped KfDef over it.
//! `build` writes what the operators apply (the live objects later carry the same applied hash);
//! `apply` installs every application with the component controllers running inside the command
//! and exits once all are Ready; a second `apply` with an edited parameter updates the object;
//! `delete` removes everything but the CRD and namespaces.

use std::collections::BTreeMap;
use tokio::process::Command;

use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::{Api, ResourceExt};
use kubeflow_crds::KustomizeApplication;
use kubeflow_crds::component::ComponentPhase;
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
