//! Benchmark of the generic component (prints figures, asserts nothing). `make bench-manifests`.
//!
//! * Converge: the sample kfctl KfDef as Kubeflow v1.0.2 (no built-in release, so all of its
//!   applications go to the generic component) over the stand-in repository for it, served on
//!   loopback: KfDef created → Available (meta-operator → NATS → kustomize-operator: download,
//!   one kfctl-semantics kustomize render per application, server-side apply in install order,
//!   readiness). Reference, in the same run: the same packages rendered by the same renderer for
//!   another namespace, then `kubectl apply --server-side` → every Deployment ready.
//! * Memory: resident set (VmRSS) of the kustomize-operator holding that install, next to the
//!   meta-operator's.
//! * Current kubeflow/manifests: the modern fixture repository (kustomize v5 only; cert-manager's
//!   and Istio's shapes: CRDs in one entry, their custom resources in others, webhooks served by
//!   Deployments). Upstream's method first, as its README gives it: `kustomize build example |
//!   kubectl apply --server-side --force-conflicts -f -` re-run after 20 s until it succeeds,
//!   then its Deployments Available; attempts and the objects refused on the way. Everything it
//!   made is deleted (CRDs and namespaces too), then a KfDef whose applications are the example's
//!   entries: created → Available, and the generic operator's failed reconciles.

use std::collections::BTreeMap;
use std::time::Instant;

use kube::Api;
use kube::api::PostParams;
use kubeflow_crds::KfDef;
use kubeflow_crds::kfdef::KfDefPhase;
use kubeflow_e2e::*;
use kubeflow_manifests::{FetchOptions, Renderer, RepoCache, fixtures};

#[tokio::main]
async fn main() {
    let client = client().await;
    let ns = TestNamespace::create(&client, "bench-generic").await;
    let stack = OperatorStack::start_ready_in(&client, &ns.name).await;
    let reference_ns = TestNamespace::create(&client, "bench-generic-ref").await;
    let yaml = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/kfdef-kfctl-istio-dex.yaml")).unwrap();
    let mut kfdef: KfDef = serde_yaml_ng::from_str(&yaml).unwrap();
    kfdef.spec.version = Some("v1.0.2".into());
    let server = fixtures::Server::start(BTreeMap::from([("archive/stand-in.tar.gz".to_string(), fixtures::stand_in_repo(&kfdef))])).await;
    kfdef.spec.repos[0].uri = server.url("archive/stand-in.tar.gz");
    let mut reference = kfdef.clone();
    kfdef.metadata.namespace = Some(ns.name.clone());
    reference.metadata.namespace = Some(reference_ns.name.clone());
    let api: Api<KfDef> = Api::namespaced(client.clone(), &ns.name);

    let t0 = Instant::now();
    api.create(&PostParams::default(), &kfdef).await.unwrap();
    eventually("KfDef Available", || async {
        let k = api.get("kubeflow").await.map_err(|e| e.to_string())?;
        if k.status.as_ref().and_then(|s| s.phase) == Some(KfDefPhase::Available) { Ok(()) } else { Err(serde_json::to_string(&k.status).unwrap()) }
    })
    .await;
    let operator_converge = t0.elapsed();
    let rss = |p: &OperatorProcess| rss_kib(p.pid()) as f64 / 1024.0;
    let generic_rss = rss(&stack.components[&kubeflow_crds::ComponentKind::GENERIC]);
    let meta_rss = rss(&stack.meta);

    // Reference: render (download included) + kubectl apply --server-side + the same readiness.
    let work = tempfile_dir();
    let t0 = Instant::now();
    let (renderer, _) = Renderer::locate(work.join("work")).await.unwrap();
    // The reference fetches from the loopback server the operator is allowed to reach, too.
    let cache = RepoCache::new(work.join("cache"), FetchOptions { allow_fetch_from: vec!["127.0.0.1".parse().unwrap()], ..FetchOptions::default() }).unwrap();
    let apps = renderer.render_kfdef(&cache, &reference).await.unwrap();
    let objects: Vec<serde_json::Value> = apps.iter().flat_map(|a| a.objects.iter().map(|o| serde_json::to_value(o).unwrap())).collect();
    let file = work.join("reference.yaml");
    std::fs::write(&file, kubeflow_manifests::yaml_stream(objects.iter().cloned())).unwrap();
    kubectl(&["apply", "--server-side", "--force-conflicts", "--field-manager", "bench-reference", "-f", file.to_str().unwrap()]);
    eventually("reference workloads ready", || async { if all_workloads_ready(&client, &objects).await { Ok(()) } else { Err("not yet") } }).await;
    let reference_converge = t0.elapsed();

    println!("## Generic component (bench-manifests)\n");
    println!("| figure | value |\n| --- | --- |");
    println!("| converge: kfctl KfDef as v1.0.2, {} applications, {} objects, all generic: created → Available | {:.1} s |", apps.len(), objects.len(), operator_converge.as_secs_f64());
    println!("| reference: same packages rendered + `kubectl apply --server-side` → workloads ready | {:.1} s |", reference_converge.as_secs_f64());
    println!("| converge / reference | {:.2}× |", operator_converge.as_secs_f64() / reference_converge.as_secs_f64());
    println!("| kustomize-operator RSS holding it | {generic_rss:.1} MiB |");
    println!("| meta-operator RSS (same run, for scale) | {meta_rss:.1} MiB |");

    api.delete("kubeflow", &Default::default()).await.unwrap();
    gone(&api, "kubeflow").await;
    kubectl(&["delete", "--ignore-not-found", "--wait=false", "-f", file.to_str().unwrap()]);
    let _ = std::fs::remove_dir_all(&work);

    modern_example(&client, &stack).await;
}

/// Current kubeflow/manifests' way (`kustomize build example | kubectl apply --server-side` in a
/// retry loop) against a KfDef of the example's entries, on the modern fixture repository.
async fn modern_example(client: &kube::Client, stack: &OperatorStack) {
    let work = tempfile_dir();
    let repo = work.join("repo");
    fixtures::write_modern_repo(&repo);
    let kustomize = kubeflow_manifests::Kustomize::locate_release(kubeflow_crds::kfdef::KustomizeRelease::V5).await.unwrap();
    let rendered = work.join("example.yaml");
    let built = std::process::Command::new(&kustomize.bin).args(["build", "example"]).current_dir(&repo).output().unwrap();
    assert!(built.status.success(), "kustomize build example: {}", String::from_utf8_lossy(&built.stderr));
    std::fs::write(&rendered, &built.stdout).unwrap();
    let objects: Vec<serde_json::Value> = kubeflow_manifests::parse_objects(&String::from_utf8_lossy(&built.stdout)).unwrap().into_iter().map(|o| serde_json::to_value(o).unwrap()).collect();
    // Everything either install made, but namespace `kubeflow`, which deploy/all makes for the
    // operators' installer account. kubectl reports the custom resources it cannot map once
    // their CRDs are gone, so its answer is not what tells that all is gone.
    let own: Vec<serde_json::Value> = objects.iter().filter(|o| !(o["kind"] == "Namespace" && o["metadata"]["name"] == "kubeflow")).cloned().collect();
    std::fs::write(&rendered, kubeflow_manifests::yaml_stream(own.iter().cloned())).unwrap();
    let kubectl_bin = kubectl_bin();
    let remove_all = || async {
        let _ = std::process::Command::new(&kubectl_bin).args(["delete", "--ignore-not-found", "--wait=true", "-f", rendered.to_str().unwrap()]).output();
        let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
        let crds: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> = Api::all(client.clone());
        for o in &own {
            let name = o["metadata"]["name"].as_str().unwrap();
            match o["kind"].as_str().unwrap() {
                "Namespace" => gone(&namespaces, name).await,
                "CustomResourceDefinition" => gone(&crds, name).await,
                _ => {}
            }
        }
    };
    remove_all().await;

    // Upstream: the loop of kubeflow/manifests' README.
    let script = format!(
        "while ! {} build example | {kubectl_bin} apply --cache-dir {cache} --server-side --force-conflicts -f - 2>>{errors}; do echo retry; sleep 20; done",
        kustomize.bin.display(),
        errors = work.join("upstream-errors.txt").display(),
        // kubectl's discovery cache as on a machine that has not seen these CRDs (the default one
        // remembers the kinds of an earlier run for 10 minutes).
        cache = work.join("kube-cache").display(),
    );
    let t0 = Instant::now();
    let out = std::process::Command::new("bash").args(["-c", &script]).current_dir(&repo).output().unwrap();
    assert!(out.status.success());
    eventually("upstream's workloads ready", || async { if all_workloads_ready(client, &objects).await { Ok(()) } else { Err("not yet") } }).await;
    let upstream = t0.elapsed();
    let attempts = 1 + String::from_utf8_lossy(&out.stdout).lines().filter(|l| *l == "retry").count();
    let errors = std::fs::read_to_string(work.join("upstream-errors.txt")).unwrap_or_default();
    let refused = errors.lines().filter(|l| l.starts_with("Error from server") || l.starts_with("error:") || l.contains("resource mapping not found")).count();
    remove_all().await;

    // The operators: a KfDef of the example's entries.
    let server = fixtures::Server::start(BTreeMap::from([("archive/v1.11.0.tar.gz".to_string(), fixtures::modern_repo_tarball())])).await;
    let ns = TestNamespace::create(client, "bench-modern").await;
    let api: Api<KfDef> = Api::namespaced(client.clone(), &ns.name);
    let log = &stack.components[&kubeflow_crds::ComponentKind::GENERIC].log;
    let failed_before = std::fs::read_to_string(log).unwrap_or_default().matches("reconcile failed").count();
    let t0 = Instant::now();
    api.create(&PostParams::default(), &fixtures::modern_example_kfdef(&server.url("archive/v1.11.0.tar.gz"), &ns.name)).await.unwrap();
    eventually("the example's KfDef Available", || async {
        let k = api.get("kubeflow").await.map_err(|e| e.to_string())?;
        if k.status.as_ref().and_then(|s| s.phase) == Some(KfDefPhase::Available) { Ok(()) } else { Err(serde_json::to_string(&k.status).unwrap()) }
    })
    .await;
    let operators = t0.elapsed();
    let failed = std::fs::read_to_string(log).unwrap_or_default().matches("reconcile failed").count() - failed_before;

    println!("\n## Current kubeflow/manifests: the example's entries (bench-manifests)\n");
    println!("| figure | operators (KfDef of the example's {} entries) | upstream (`kustomize build example \\| kubectl apply --server-side`, retried after 20 s) |", fixtures::MODERN_EXAMPLE_APPLICATIONS.len());
    println!("| --- | --- | --- |");
    println!("| {} objects: start → every Deployment Available | {:.1} s | {:.1} s |", objects.len(), operators.as_secs_f64(), upstream.as_secs_f64());
    let slept = 20.0 * (attempts - 1) as f64;
    println!("| the same without upstream's 20 s waits between attempts | {:.1} s | {:.1} s |", operators.as_secs_f64(), upstream.as_secs_f64() - slept);
    println!("| attempts (runs of the whole apply) | 1 | {attempts} |");
    println!("| objects refused on the way (upstream: kubectl's errors; operators: failed reconciles logged) | {failed} | {refused} |");

    api.delete("kubeflow", &Default::default()).await.unwrap();
    gone(&api, "kubeflow").await;
    remove_all().await;
    let _ = std::fs::remove_dir_all(&work);
}

fn tempfile_dir() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(unique_name("bench-manifests"));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
