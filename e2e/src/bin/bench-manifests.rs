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
//!   entries: created → Available, and the operators' failed reconciles.
//! * Kubeflow v1.10.2 as released (`../shared/manifests`): the same comparison with its own
//!   `example` and its KfDef, every operator taking part (the built-ins cover eight of its
//!   applications). Its webhooks are answered by the environment's pods' network stand-in.

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

    let work = tempfile_dir();
    example_against_upstream_loop(&client, &stack, &work.join("modern"), modern_fixture(&work)).await;
    example_against_upstream_loop(&client, &stack, &work.join("v1.10.2"), release_1_10_2(&work)).await;
    let _ = std::fs::remove_dir_all(&work);
}

/// What an example install is compared on: a repository of kubeflow/manifests' layout, and a
/// KfDef whose applications are its `example/kustomization.yaml` entries.
struct Example {
    title: &'static str,
    /// The repository, unpacked (upstream's loop builds `example` in it).
    repo: std::path::PathBuf,
    /// The same as the archive the KfDef names, and that archive's path on the loopback server.
    tarball: Vec<u8>,
    archive: &'static str,
    /// The KfDef for the archive's URL, in the namespace given (None: the KfDef's own).
    kfdef: Box<dyn Fn(&str, &str) -> KfDef>,
    /// Whether the KfDef lives in a namespace of its own (the fixture's) or in its own `kubeflow`.
    own_namespace: bool,
}

/// A bound on one install or removal; a guard against hanging, not a measurement.
const INSTALL_BOUND: std::time::Duration = std::time::Duration::from_secs(900);
/// Upstream's loop gives up after this many runs (a refusal that never goes away).
const MAX_ATTEMPTS: usize = 30;

async fn bounded<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + INSTALL_BOUND;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(Instant::now() < deadline, "{what}: not within {INSTALL_BOUND:?}");
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }
}

/// The modern fixture repository (kustomize v5 only; cert-manager's and Istio's shapes).
fn modern_fixture(work: &std::path::Path) -> Example {
    let repo = work.join("repo");
    fixtures::write_modern_repo(&repo);
    Example {
        title: "Current kubeflow/manifests: the example's entries on the modern fixture repository",
        repo,
        tarball: fixtures::modern_repo_tarball(),
        archive: "archive/v1.11.0.tar.gz",
        kfdef: Box::new(|url, ns| fixtures::modern_example_kfdef(url, ns)),
        own_namespace: true,
    }
}

/// Kubeflow v1.10.2 as released (`../shared/manifests`), with its KfDef.
fn release_1_10_2(work: &std::path::Path) -> Example {
    let releases = fixtures::upstream_releases();
    let tarball = std::fs::read(releases.join("manifests-1.10.2.tar.gz")).unwrap();
    let unpacked = work.join("release");
    std::fs::create_dir_all(&unpacked).unwrap();
    let status = std::process::Command::new("tar").args(["xzf"]).arg(releases.join("manifests-1.10.2.tar.gz")).arg("-C").arg(&unpacked).status().unwrap();
    assert!(status.success());
    let repo = std::fs::read_dir(&unpacked).unwrap().map(|e| e.unwrap().path()).find(|p| p.is_dir()).unwrap();
    let yaml = std::fs::read_to_string(releases.join("kfdef-1.10.2.yaml")).unwrap();
    Example {
        title: "Kubeflow v1.10.2 as released: its KfDef (29 applications)",
        repo,
        tarball,
        archive: "archive/v1.10.2.tar.gz",
        kfdef: Box::new(move |url, _| {
            let mut kfdef: KfDef = serde_yaml_ng::from_str(&yaml).unwrap();
            kfdef.spec.repos[0].uri = url.to_string();
            kfdef
        }),
        own_namespace: false,
    }
}

/// Current kubeflow/manifests' way (`kustomize build example | kubectl apply --server-side` in a
/// retry loop) against a KfDef of the example's entries.
async fn example_against_upstream_loop(client: &kube::Client, stack: &OperatorStack, work: &std::path::Path, example: Example) {
    std::fs::create_dir_all(work).unwrap();
    let repo = &example.repo;
    let kustomize = kubeflow_manifests::Kustomize::locate_release(kubeflow_crds::kfdef::KustomizeRelease::V5).await.unwrap();
    let rendered = work.join("example.yaml");
    let built = std::process::Command::new(&kustomize.bin).args(["build", "example"]).current_dir(repo).output().unwrap();
    assert!(built.status.success(), "kustomize build example: {}", String::from_utf8_lossy(&built.stderr));
    let objects: Vec<serde_json::Value> = kubeflow_manifests::parse_objects(&String::from_utf8_lossy(&built.stdout)).unwrap().into_iter().map(|o| serde_json::to_value(o).unwrap()).collect();
    // Everything either install made, but namespace `kubeflow`, which deploy/all makes for the
    // operators' installer account. kubectl reports the custom resources it cannot map once
    // their CRDs are gone, so its answer is not what tells that all is gone.
    let own: Vec<serde_json::Value> = objects.iter().filter(|o| !(o["kind"] == "Namespace" && o["metadata"]["name"] == "kubeflow")).cloned().collect();
    std::fs::write(&rendered, kubeflow_manifests::yaml_stream(own.iter().cloned())).unwrap();
    let kubectl_bin = kubectl_bin();
    let remove_all = || async {
        // Aggregated ClusterRoles lose their rule first, as in the operators' cleanup: deleted with
        // it, Kubernetes' aggregation controller can create them again from its cache (bare
        // roles the next install would rightly refuse to take over).
        let roles: Api<k8s_openapi::api::rbac::v1::ClusterRole> = Api::all(client.clone());
        for role in own.iter().filter(|o| o["kind"] == "ClusterRole" && !o["aggregationRule"].is_null()) {
            let patch = kube::api::Patch::Merge(serde_json::json!({"aggregationRule": null}));
            let _ = roles.patch(role["metadata"]["name"].as_str().unwrap(), &Default::default(), &patch).await;
        }
        let _ = std::process::Command::new(&kubectl_bin).args(["delete", "--ignore-not-found", "--wait=true", "-f", rendered.to_str().unwrap()]).output();
        let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
        let crds: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> = Api::all(client.clone());
        for o in &own {
            let name = o["metadata"]["name"].as_str().unwrap();
            match o["kind"].as_str().unwrap() {
                "Namespace" => bounded(&format!("Namespace {name} gone"), || async { namespaces.get_opt(name).await.unwrap().is_none().then_some(()) }).await,
                "CustomResourceDefinition" => bounded(&format!("CRD {name} gone"), || async { crds.get_opt(name).await.unwrap().is_none().then_some(()) }).await,
                "ClusterRole" => bounded(&format!("ClusterRole {name} gone"), || async { roles.get_opt(name).await.unwrap().is_none().then_some(()) }).await,
                _ => {}
            }
        }
    };
    remove_all().await;

    // Upstream: the loop of kubeflow/manifests' README.
    let script = format!(
        "n=0; while ! {} build example | {kubectl_bin} apply --cache-dir {cache} --server-side --force-conflicts -f - >/dev/null 2>>{errors}; do n=$((n+1)); [ $n -ge {MAX_ATTEMPTS} ] && exit 1; echo retry; sleep 20; done",
        kustomize.bin.display(),
        errors = work.join("upstream-errors.txt").display(),
        // kubectl's discovery cache as on a machine that has not seen these CRDs (the default one
        // remembers the kinds of an earlier run for 10 minutes).
        cache = work.join("kube-cache").display(),
    );
    let t0 = Instant::now();
    let out = std::process::Command::new("bash").args(["-c", &script]).current_dir(repo).output().unwrap();
    let errors = std::fs::read_to_string(work.join("upstream-errors.txt")).unwrap_or_default();
    assert!(out.status.success(), "upstream's loop did not get through in {MAX_ATTEMPTS} runs; last errors:\n{}", log_excerpt(&errors, 20));
    bounded("upstream's workloads ready", || async { all_workloads_ready(client, &objects).await.then_some(()) }).await;
    let upstream = t0.elapsed();
    let attempts = 1 + String::from_utf8_lossy(&out.stdout).lines().filter(|l| *l == "retry").count();
    let refused = errors.lines().filter(|l| l.starts_with("Error from server") || l.starts_with("error:") || l.contains("resource mapping not found")).count();
    remove_all().await;

    // The operators: the KfDef.
    let server = fixtures::Server::start(BTreeMap::from([(example.archive.to_string(), example.tarball.clone())])).await;
    let ns = TestNamespace::create(client, "bench-example").await;
    let kfdef = (example.kfdef)(&server.url(example.archive), &ns.name);
    let namespace = if example.own_namespace { ns.name.clone() } else { kfdef.metadata.namespace.clone().unwrap() };
    let api: Api<KfDef> = Api::namespaced(client.clone(), &namespace);
    let logs: Vec<&std::path::Path> = std::iter::once(&stack.meta).chain(stack.components.values()).map(|p| p.log.as_path()).collect();
    let failures = || logs.iter().map(|log| std::fs::read_to_string(log).unwrap_or_default().matches("reconcile failed").count()).sum::<usize>();
    let failed_before = failures();
    let t0 = Instant::now();
    api.create(&PostParams::default(), &kfdef).await.unwrap();
    bounded("the example's KfDef Available", || async {
        let k = api.get("kubeflow").await.ok()?;
        (k.status.as_ref().and_then(|s| s.phase) == Some(KfDefPhase::Available)).then_some(())
    })
    .await;
    let operators = t0.elapsed();
    let failed = failures() - failed_before;

    println!("\n## {} (bench-manifests)\n", example.title);
    println!("| figure | operators (KfDef of the example's {} entries) | upstream (`kustomize build example \\| kubectl apply --server-side`, retried after 20 s) |", kfdef.spec.applications.len());
    println!("| --- | --- | --- |");
    println!("| {} objects: start → every Deployment Available | {:.1} s | {:.1} s |", objects.len(), operators.as_secs_f64(), upstream.as_secs_f64());
    let slept = 20.0 * (attempts - 1) as f64;
    println!("| the same without upstream's 20 s waits between attempts | {:.1} s | {:.1} s |", operators.as_secs_f64(), upstream.as_secs_f64() - slept);
    println!("| attempts (runs of the whole apply) | 1 | {attempts} |");
    println!("| objects refused on the way (upstream: kubectl's errors; operators: failed reconciles logged) | {failed} | {refused} |");

    let uid = api.get("kubeflow").await.unwrap().metadata.uid;
    api.delete("kubeflow", &Default::default()).await.unwrap();
    bounded("the KfDef deleted", || async { (api.get_opt("kubeflow").await.unwrap().and_then(|k| k.metadata.uid) != uid).then_some(()) }).await;
    remove_all().await;
}

fn tempfile_dir() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(unique_name("bench-manifests"));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
