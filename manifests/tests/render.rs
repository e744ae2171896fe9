//! Fetch over loopback HTTP and render the fixture repository with the real kustomize, in both
//! kfctl modes, and every error a KfDef can cause. Needs the kustomize `e2e/env/build.sh
//! kustomize` builds (hack/test.sh builds it first), or `KFOP_KUSTOMIZE`.

use std::collections::BTreeMap;
use std::path::Path;

use kube::ResourceExt;
use kube::api::DynamicObject;
use kubeflow_crds::NameValue;
use kubeflow_crds::kfdef::KustomizeRelease;
use kubeflow_manifests::Kustomize;
use kubeflow_manifests::fixtures::{self, Hostile, Server};
use kubeflow_manifests::fetch::AllowEntry;
use kubeflow_manifests::{
    AppSpec, FetchOptions, KustomizeError, Mode, RenderContext, RenderError, Renderer, RepoCache,
    RepoErrorReason, RepoSource,
};
use sha2::Digest;

struct Env {
    _tmp: tempfile::TempDir,
    cache: RepoCache,
    renderer: Renderer,
}

fn loopback() -> Vec<AllowEntry> {
    vec!["127.0.0.1".parse().unwrap()]
}

async fn env(allow_local: bool) -> Env {
    let tmp = tempfile::tempdir().unwrap();
    let kustomize = Kustomize::locate()
        .await
        .unwrap_or_else(|e| panic!("these tests run the real kustomize: {e}"));
    let cache = RepoCache::new(
        tmp.path().join("cache"),
        FetchOptions {
            allow_local,
            // The fixture repositories are served on loopback, which the fence refuses.
            allow_fetch_from: loopback(),
            ..FetchOptions::default()
        },
    )
    .unwrap();
    let kustomize_v5 = Kustomize::locate_release(KustomizeRelease::V5)
        .await
        .unwrap_or_else(|e| panic!("these tests run the real kustomize v5: {e}"));
    let renderer = Renderer::new(kustomize, tmp.path().join("work"))
        .unwrap()
        .with_v5(kustomize_v5);
    Env {
        _tmp: tmp,
        cache,
        renderer,
    }
}

fn summary(objects: &[DynamicObject]) -> Vec<(String, String, String)> {
    objects
        .iter()
        .map(|o| {
            (
                o.types.as_ref().unwrap().kind.clone(),
                o.metadata.name.clone().unwrap_or_default(),
                o.metadata.namespace.clone().unwrap_or_default(),
            )
        })
        .collect()
}

fn owned(v: &[(&str, &str, &str)]) -> Vec<(String, String, String)> {
    v.iter()
        .map(|(a, b, c)| (a.to_string(), b.to_string(), c.to_string()))
        .collect()
}

fn find<'a>(objects: &'a [DynamicObject], kind: &str, name: &str) -> &'a DynamicObject {
    objects
        .iter()
        .find(|o| {
            o.types.as_ref().unwrap().kind == kind && o.metadata.name.as_deref() == Some(name)
        })
        .unwrap_or_else(|| panic!("{kind}/{name} not rendered"))
}

async fn serve_repo() -> Server {
    Server::start(BTreeMap::from([(
        "archive/v1.0.2.tar.gz".to_string(),
        fixtures::repo_tarball(),
    )]))
    .await
}

#[tokio::test]
async fn per_application_kfdef_renders_base_overlays_and_parameters_over_http() {
    let env = env(false).await;
    let server = serve_repo().await;
    let kfdef = fixtures::per_application_kfdef(&server.url("archive/v1.0.2.tar.gz"), "team-a");
    let apps = env.renderer.render_kfdef(&env.cache, &kfdef).await.unwrap();
    assert_eq!(
        apps.iter().map(|a| a.name.as_str()).collect::<Vec<_>>(),
        ["webhook", "web-app"]
    );

    // Flat package: install order, the KfDef's namespace on namespaced objects, a file from
    // outside the package folder (the ClusterRole in demo/common).
    assert_eq!(
        summary(&apps[0].objects),
        owned(&[
            ("Namespace", "demo-tenants", ""),
            ("CustomResourceDefinition", "tenants.demo.kubeflow.org", ""),
            ("ClusterRole", "tenant-webhook", ""),
            ("Deployment", "tenant-webhook", "team-a"),
            ("MutatingWebhookConfiguration", "tenant-defaulter", ""),
            ("Tenant", "default-tenant", "team-a"),
        ])
    );

    let web = &apps[1].objects;
    assert_eq!(
        summary(web),
        owned(&[
            ("ConfigMap", "web-app-istio-parameters", "team-a"),
            ("ConfigMap", "web-app-parameters", "team-a"),
            ("ServiceAccount", "web-app", "team-a"),
            ("ClusterRole", "web-app-cluster-role", ""),
            ("ClusterRoleBinding", "web-app-binding", ""),
            ("Service", "web-app", "team-a"),
            ("Deployment", "web-app", "team-a"),
            ("Application", "web-app", "team-a"),
            ("VirtualService", "web-app", "team-a"),
        ])
    );
    // params.env of base and of the istio overlay, rewritten; namespace= filled from the KfDef.
    assert_eq!(
        find(web, "ConfigMap", "web-app-parameters").data["data"],
        serde_json::json!({"userid-header": "kubeflow-userid", "clusterDomain": "cluster.local", "namespace": "team-a"})
    );
    assert_eq!(
        find(web, "ConfigMap", "web-app-istio-parameters").data["data"],
        serde_json::json!({"gateway": "istio-system/ingressgateway"})
    );
    // vars: from the ConfigMap into the container, from the Service's namespace into an
    // annotation (base configurations) and into the VirtualService (the overlay's configurations).
    let deployment = find(web, "Deployment", "web-app");
    assert_eq!(
        deployment.data["spec"]["template"]["spec"]["containers"][0]["env"],
        serde_json::json!([{"name": "USERID_HEADER", "value": "kubeflow-userid"}])
    );
    assert_eq!(
        deployment.metadata.annotations.as_ref().unwrap()["demo.kubeflow.org/served-from"],
        "team-a"
    );
    assert_eq!(
        find(web, "VirtualService", "web-app").data["spec"]["http"][0]["route"][0]["destination"]["host"],
        "web-app.team-a.svc.cluster.local"
    );
    // commonLabels of base and of the hoisted application overlay.
    assert_eq!(
        deployment.metadata.labels.as_ref().unwrap(),
        &BTreeMap::from([
            ("app".to_string(), "web-app".to_string()),
            ("app.kubernetes.io/name".to_string(), "web-app".to_string()),
            ("kustomize.component".to_string(), "web-app".to_string()),
        ])
    );

    // The cache was only read: its params.env is the repository's, and a second fetch with the
    // server gone is served from the cache.
    drop(server);
    let source = RepoSource {
        name: "manifests".into(),
        uri: kfdef.spec.repos[0].uri.clone(),
        sha256: None,
    };
    let cached = env.cache.fetch(&source).await.unwrap();
    assert_eq!(
        std::fs::read_to_string(cached.root.join("demo/web-app/base/params.env")).unwrap(),
        "userid-header=\nclusterDomain=cluster.local\nnamespace=\n"
    );
    assert!(cached.cache_key.unwrap().starts_with("uri-"));
}

#[tokio::test]
async fn namespace_parameter_overrides_the_kfdef_namespace() {
    let env = env(false).await;
    let server = serve_repo().await;
    let repo = env
        .cache
        .fetch(&RepoSource {
            name: "manifests".into(),
            uri: server.url("archive/v1.0.2.tar.gz"),
            sha256: None,
        })
        .await
        .unwrap();
    let ctx = RenderContext {
        namespace: "kubeflow".into(),
        kfdef_name: "demo".into(),
        mode: Mode::PerApplication,
        era: kubeflow_crds::kfdef::Era::Kfctl,
    };
    let app = AppSpec {
        name: "web-app".into(),
        path: "demo/web-app".into(),
        overlays: vec!["application".into()],
        parameters: vec![NameValue {
            name: "namespace".into(),
            value: "istio-system".into(),
        }],
        ..AppSpec::default()
    };
    let rendered = env
        .renderer
        .render_application(&repo, &app, &ctx, None)
        .await
        .unwrap();
    let namespaces: std::collections::BTreeSet<_> = rendered
        .objects
        .iter()
        .filter_map(|o| o.metadata.namespace.clone())
        .collect();
    assert_eq!(
        namespaces,
        std::collections::BTreeSet::from(["istio-system".to_string()])
    );
    assert_eq!(
        find(&rendered.objects, "ConfigMap", "web-app-parameters").data["data"]["namespace"],
        "istio-system"
    );
}

#[tokio::test]
async fn stacks_kfdef_builds_each_path_as_it_is() {
    let env = env(false).await;
    let server = serve_repo().await;
    let mut kfdef = fixtures::stacks_kfdef(&server.url("archive/v1.0.2.tar.gz"));
    // Pinned: the test computes the digest of the bytes it serves.
    let digest = sha2::Sha256::digest(fixtures::repo_tarball());
    kfdef.spec.repos[0].sha256 = Some(digest.iter().map(|b| format!("{b:02x}")).collect());
    let apps = env.renderer.render_kfdef(&env.cache, &kfdef).await.unwrap();
    assert_eq!(
        summary(&apps[0].objects),
        owned(&[("Namespace", "kubeflow", "")])
    );
    let objects = &apps[1].objects;
    assert_eq!(
        summary(objects),
        owned(&[
            ("Namespace", "demo-tenants", ""),
            ("ConfigMap", "web-app-parameters", "kubeflow"),
            ("ServiceAccount", "web-app", "kubeflow"),
            ("CustomResourceDefinition", "tenants.demo.kubeflow.org", ""),
            ("ClusterRole", "tenant-webhook", ""),
            ("ClusterRole", "web-app-cluster-role", ""),
            ("ClusterRoleBinding", "web-app-binding", ""),
            ("Service", "web-app", "kubeflow"),
            ("Deployment", "tenant-webhook", "kubeflow"),
            ("Deployment", "web-app", "kubeflow"),
            ("MutatingWebhookConfiguration", "tenant-defaulter", ""),
            ("Tenant", "default-tenant", "kubeflow"),
        ])
    );
    // The stack's own params.env merged into the base's generator.
    assert_eq!(
        find(objects, "ConfigMap", "web-app-parameters").data["data"]["userid-header"],
        "kubeflow-userid"
    );
    assert_eq!(
        find(objects, "Deployment", "web-app")
            .metadata
            .labels
            .as_ref()
            .unwrap()["app.kubernetes.io/part-of"],
        "kubeflow"
    );
}

async fn render_err(env: &Env, kfdef: &kubeflow_crds::KfDef) -> RenderError {
    env.renderer
        .render_kfdef(&env.cache, kfdef)
        .await
        .unwrap_err()
}

fn app_kfdef(
    uri: &str,
    path: &str,
    overlays: &[&str],
    params: &[(&str, &str)],
) -> kubeflow_crds::KfDef {
    let mut kfdef = fixtures::per_application_kfdef(uri, "kubeflow");
    kfdef.spec.applications.truncate(1);
    kfdef.spec.applications[0].name = "app".into();
    let cfg = kfdef.spec.applications[0]
        .kustomize_config
        .as_mut()
        .unwrap();
    cfg.repo_ref.as_mut().unwrap().path = path.into();
    cfg.overlays = overlays.iter().map(|s| s.to_string()).collect();
    cfg.parameters = params
        .iter()
        .map(|(n, v)| NameValue {
            name: n.to_string(),
            value: v.to_string(),
        })
        .collect();
    kfdef
}

#[tokio::test]
async fn kfdef_mistakes_are_typed_errors_naming_the_application() {
    let env = env(false).await;
    let server = serve_repo().await;
    let uri = server.url("archive/v1.0.2.tar.gz");

    assert_eq!(
        render_err(&env, &app_kfdef(&uri, "demo/missing", &[], &[])).await,
        RenderError::PathNotFound {
            app: "app".into(),
            path: "demo/missing".into()
        }
    );
    assert!(matches!(
        render_err(&env, &app_kfdef(&uri, "../demo/web-app", &[], &[])).await,
        RenderError::InvalidPath { app, .. } if app == "app"
    ));
    assert_eq!(
        render_err(
            &env,
            &app_kfdef(&uri, "demo/web-app", &["application", "gcp"], &[])
        )
        .await,
        RenderError::MissingOverlay {
            app: "app".into(),
            overlay: "gcp".into(),
            available: vec!["application".into(), "istio".into()]
        }
    );
    assert_eq!(
        render_err(&env, &app_kfdef(&uri, "demo/web-app", &["../../demo"], &[])).await,
        RenderError::MissingOverlay {
            app: "app".into(),
            overlay: "../../demo".into(),
            available: vec!["application".into(), "istio".into()]
        }
    );
    // `gateway` is declared by the istio overlay only, which is not selected: ignored, as kfctl
    // ignored a parameter no selected params.env has, and said.
    let with = env.renderer.render_kfdef(&env.cache, &app_kfdef(&uri, "demo/web-app", &["application"], &[("gateway", "x")])).await.unwrap();
    let without = env.renderer.render_kfdef(&env.cache, &app_kfdef(&uri, "demo/web-app", &["application"], &[])).await.unwrap();
    assert_eq!(with[0].to_yaml(), without[0].to_yaml(), "an undeclared parameter changed the render");
    assert_eq!(
        with[0].warnings,
        ["parameter \"gateway\" is declared by no selected params.env (declared: [\"clusterDomain\", \"namespace\", \"userid-header\"]); ignored, as kfctl ignored it"]
    );
    assert!(matches!(
        render_err(&env, &app_kfdef(&uri, "demo/web-app", &[], &[("userid-header", "a\nclusterDomain=evil")])).await,
        RenderError::InvalidParameter { app, parameter, .. } if app == "app" && parameter == "userid-header"
    ));
    assert_eq!(
        render_err(&env, &app_kfdef(&uri, "demo/webhook", &["istio"], &[])).await,
        RenderError::OverlaysWithoutBase {
            app: "app".into(),
            overlays: vec!["istio".into()]
        }
    );
    match render_err(&env, &app_kfdef(&uri, "demo/broken", &[], &[])).await {
        RenderError::Kustomize {
            app,
            source: KustomizeError::Failed { stderr, .. },
        } => {
            assert_eq!(app, "app");
            assert!(
                stderr.contains("does-not-exist.yaml"),
                "kustomize's stderr is surfaced: {stderr}"
            );
        }
        other => panic!("expected a kustomize failure, got {other:?}"),
    }
    let mut unknown_repo = app_kfdef(&uri, "demo/web-app", &[], &[]);
    unknown_repo.spec.applications[0]
        .kustomize_config
        .as_mut()
        .unwrap()
        .repo_ref
        .as_mut()
        .unwrap()
        .name = "other".into();
    assert_eq!(
        render_err(&env, &unknown_repo).await,
        RenderError::UnknownRepo {
            app: "app".into(),
            repo: "other".into(),
            known: vec!["manifests".into()]
        }
    );
}

async fn repo_reason(env: &Env, uri: &str, sha256: Option<String>) -> RepoErrorReason {
    let source = RepoSource {
        name: "manifests".into(),
        uri: uri.into(),
        sha256,
    };
    let err = env.cache.fetch(&source).await.unwrap_err();
    assert_eq!((err.repo.as_str(), err.uri.as_str()), ("manifests", uri));
    err.reason
}

#[tokio::test]
async fn bad_repositories_are_typed_errors_naming_the_repository() {
    let env = env(false).await;
    let mut files = BTreeMap::from([("good.tar.gz".to_string(), fixtures::repo_tarball())]);
    for (name, kind) in [
        ("parent.tar.gz", Hostile::ParentDir),
        ("absolute.tar.gz", Hostile::Absolute),
        ("symlink.tar.gz", Hostile::SymlinkOut),
        ("hardlink.tar.gz", Hostile::HardlinkOut),
    ] {
        files.insert(name.into(), fixtures::hostile_tarball(kind));
    }
    files.insert(
        "not-gzip.tar.gz".into(),
        b"<html>not an archive</html>".to_vec(),
    );
    let server = Server::start(files).await;

    assert_eq!(
        repo_reason(&env, "ftp://example.org/manifests.tar.gz", None).await,
        RepoErrorReason::UnsupportedUri(
            "scheme \"ftp\" (allowed: https, http, file, or a local path)".into()
        )
    );
    assert_eq!(
        repo_reason(&env, &server.url("missing.tar.gz"), None).await,
        RepoErrorReason::HttpStatus(404)
    );
    assert_eq!(
        repo_reason(&env, "/etc", None).await,
        RepoErrorReason::LocalNotAllowed
    );
    assert!(matches!(
        repo_reason(&env, &server.url("not-gzip.tar.gz"), None).await,
        RepoErrorReason::BadArchive(_)
    ));

    let wrong = "0".repeat(64);
    match repo_reason(&env, &server.url("good.tar.gz"), Some(wrong.clone())).await {
        RepoErrorReason::Sha256Mismatch { expected, actual } => {
            assert_eq!(expected, wrong);
            let digest = sha2::Sha256::digest(fixtures::repo_tarball());
            assert_eq!(
                actual,
                digest
                    .iter()
                    .map(|b| format!("{b:02x}"))
                    .collect::<String>()
            );
        }
        other => panic!("expected a sha256 mismatch, got {other:?}"),
    }
    assert_eq!(
        repo_reason(&env, &server.url("good.tar.gz"), Some("ABC".into())).await,
        RepoErrorReason::InvalidPin("ABC".into())
    );

    for (name, entry) in [
        ("parent.tar.gz", "top/../../escaped.txt"),
        ("absolute.tar.gz", "/tmp/escaped.txt"),
        ("symlink.tar.gz", "top/link"),
        ("hardlink.tar.gz", "top/hard"),
    ] {
        match repo_reason(&env, &server.url(name), None).await {
            RepoErrorReason::UnsafeEntry { entry: e, .. } => assert_eq!(e, entry, "{name}"),
            other => panic!("{name}: expected an unsafe entry, got {other:?}"),
        }
    }
    assert!(!Path::new("/tmp/escaped.txt").exists());
    // Nothing half-unpacked was left as a cache entry.
    assert_eq!(
        std::fs::read_dir(env.cache.dir().join("repos"))
            .unwrap()
            .count(),
        0
    );
}

#[tokio::test]
async fn limits_bound_downloads_and_unpacking() {
    let tmp = tempfile::tempdir().unwrap();
    let server = Server::start(BTreeMap::from([(
        "repo.tar.gz".to_string(),
        fixtures::repo_tarball(),
    )]))
    .await;
    let source = RepoSource {
        name: "manifests".into(),
        uri: server.url("repo.tar.gz"),
        sha256: None,
    };
    let small = |o: FetchOptions| RepoCache::new(tmp.path().join("c"), o).unwrap();
    let e = small(FetchOptions {
        max_download_bytes: 100,
        allow_fetch_from: loopback(),
        ..FetchOptions::default()
    })
    .fetch(&source)
    .await
    .unwrap_err();
    assert_eq!(e.reason, RepoErrorReason::DownloadTooLarge { limit: 100 });
    let e = small(FetchOptions {
        max_entries: 5,
        allow_fetch_from: loopback(),
        ..FetchOptions::default()
    })
    .fetch(&source)
    .await
    .unwrap_err();
    assert_eq!(e.reason, RepoErrorReason::TooManyEntries { limit: 5 });
    let e = small(FetchOptions {
        max_unpacked_bytes: 1000,
        allow_fetch_from: loopback(),
        ..FetchOptions::default()
    })
    .fetch(&source)
    .await
    .unwrap_err();
    assert_eq!(e.reason, RepoErrorReason::UnpackedTooLarge { limit: 1000 });
}

#[tokio::test]
async fn kustomizations_may_not_reach_files_outside_the_repository() {
    let env = env(true).await;
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path().join("repo");
    fixtures::write_repo(&repo);
    let secret = tmp.path().join("host-secret.txt");
    std::fs::write(&secret, "token").unwrap();
    let uri = format!("file://{}", repo.display());

    // Per application: an absolute path from the package.
    let absolute = secret.display().to_string();
    std::fs::write(
        repo.join("demo/webhook/kustomization.yaml"),
        format!("configMapGenerator:\n- name: leak\n  files: [{absolute}]\n"),
    )
    .unwrap();
    match render_err(&env, &app_kfdef(&uri, "demo/webhook", &[], &[])).await {
        RenderError::ForbiddenReference { app, reference, .. } => assert_eq!(
            (app.as_str(), reference.as_str()),
            ("app", absolute.as_str())
        ),
        other => panic!("expected a forbidden reference, got {other:?}"),
    }

    // Stacks: a relative path climbing out of the repository, reached through a base.
    std::fs::write(
        repo.join("demo/webhook/kustomization.yaml"),
        "configMapGenerator:\n- name: leak\n  files: [token=../../../host-secret.txt]\n",
    )
    .unwrap();
    let kfdef = fixtures::stacks_kfdef(&uri);
    match render_err(&env, &kfdef).await {
        RenderError::ForbiddenReference {
            app,
            file,
            reference,
            ..
        } => {
            assert_eq!(
                (app.as_str(), reference.as_str()),
                ("kubeflow-apps", "../../../host-secret.txt")
            );
            assert!(file.ends_with("demo/webhook/kustomization.yaml"), "{file}");
        }
        other => panic!("expected a forbidden reference, got {other:?}"),
    }
}

#[tokio::test]
async fn a_kustomization_that_does_not_parse_is_refused_before_kustomize_runs() {
    let env = env(true).await;
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path().join("repo");
    fixtures::write_repo(&repo);
    let uri = format!("file://{}", repo.display());
    // Reached through a base of a stacks application: kustomize would report it, but what it
    // refers to cannot be checked, so nothing is built.
    std::fs::write(
        repo.join("demo/webhook/kustomization.yaml"),
        "resources: [deployment.yaml\nconfigMapGenerator: {\n",
    )
    .unwrap();
    match render_err(&env, &fixtures::stacks_kfdef(&uri)).await {
        RenderError::ForbiddenReference { app, file, reference, reason } => {
            assert_eq!((app.as_str(), reference.as_str()), ("kubeflow-apps", ""));
            assert!(file.ends_with("demo/webhook/kustomization.yaml"), "{file}");
            assert!(reason.starts_with("it is not valid YAML: "), "{reason}");
        }
        other => panic!("expected the kustomization to be refused, got {other:?}"),
    }
}

/// The stand-in `make demo` and the meta-operator's end-to-end test serve for the sample kfctl
/// KfDef: every application renders (overlays exist, every parameter is declared), each into its
/// namespace, with its parameters in a ConfigMap and its overlays applied.
#[tokio::test]
async fn the_stand_in_repository_renders_every_application_of_the_sample_kfdef() {
    let env = env(false).await;
    let yaml = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/kfdef-kfctl-istio-dex.yaml")).unwrap();
    let mut kfdef: kubeflow_crds::KfDef = serde_yaml_ng::from_str(&yaml).unwrap();
    let server = Server::start(BTreeMap::from([("archive/v1.2.0.tar.gz".to_string(), fixtures::stand_in_repo(&kfdef))])).await;
    kfdef.spec.repos[0].uri = server.url("archive/v1.2.0.tar.gz");
    let apps = env.renderer.render_kfdef(&env.cache, &kfdef).await.unwrap();
    assert_eq!(apps.len(), kfdef.spec.applications.len());
    let jupyter = apps.iter().find(|a| a.name == "jupyter-web-app").unwrap();
    assert_eq!(
        summary(&jupyter.objects),
        owned(&[("ConfigMap", "jupyter-web-app-parameters", "kubeflow"), ("Deployment", "jupyter-web-app", "kubeflow")])
    );
    let parameters = find(&jupyter.objects, "ConfigMap", "jupyter-web-app-parameters");
    assert_eq!(parameters.data["data"]["userid-header"], "kubeflow-userid");
    assert!(apps.iter().all(|a| a.kustomize.0 == KustomizeRelease::V3), "a kfctl-era package renders with kfctl's kustomize");
    let cert_manager = apps.iter().find(|a| a.name == "cert-manager").unwrap();
    assert_eq!(find(&cert_manager.objects, "Deployment", "cert-manager").labels().get("overlay.kubeflow.org/application").map(String::as_str), Some("true"), "overlay applied");
}

/// A kfctl-era package in removed API versions renders converted in both modes, each conversion
/// listed; what kustomize did to the old objects (commonLabels on an `extensions/v1beta1`
/// Deployment's selector) is kept.
#[tokio::test]
async fn removed_api_versions_render_converted_in_both_modes() {
    let env = env(false).await;
    let server = serve_repo().await;
    let uri = server.url("archive/v1.0.2.tar.gz");
    let expected_conversions = [
        "CustomResourceDefinition legacyjobs.demo.kubeflow.org: apiextensions.k8s.io/v1beta1 → apiextensions.k8s.io/v1",
        "ClusterRole legacy-job-viewer: rbac.authorization.k8s.io/v1beta1 → rbac.authorization.k8s.io/v1",
        "Role {ns}/legacy-controller: rbac.authorization.k8s.io/v1beta1 → rbac.authorization.k8s.io/v1",
        "RoleBinding {ns}/legacy-controller: rbac.authorization.k8s.io/v1beta1 → rbac.authorization.k8s.io/v1",
        "Deployment {ns}/legacy-controller: extensions/v1beta1 → apps/v1",
        "StatefulSet {ns}/legacy-db: apps/v1beta2 → apps/v1",
        "CronJob {ns}/legacy-cleanup: batch/v1beta1 → batch/v1",
        "HorizontalPodAutoscaler {ns}/legacy-controller: autoscaling/v2beta1 → autoscaling/v2",
        "PriorityClass legacy-critical: scheduling.k8s.io/v1beta1 → scheduling.k8s.io/v1",
        "PodDisruptionBudget {ns}/legacy-controller: policy/v1beta1 → policy/v1",
        "Ingress {ns}/legacy-controller: extensions/v1beta1 → networking.k8s.io/v1",
        "ValidatingWebhookConfiguration legacy-job-validator: admissionregistration.k8s.io/v1beta1 → admissionregistration.k8s.io/v1",
    ];
    for (stacks, namespace, selector) in [
        (false, "team-a", serde_json::json!({"matchLabels": {"app": "legacy-controller"}})),
        // The stack's commonLabels reached the old Deployment's selector in kustomize already.
        (true, "kubeflow", serde_json::json!({"matchLabels": {"app.kubernetes.io/part-of": "kubeflow"}})),
    ] {
        let kfdef = fixtures::legacy_kfdef(&uri, namespace, stacks);
        let apps = env.renderer.render_kfdef(&env.cache, &kfdef).await.unwrap();
        let app = apps.last().unwrap();
        let mut listed: Vec<String> = app.conversions.iter().map(|c| {
            let line = c.to_string();
            line.split(" (").next().unwrap().to_string()
        }).collect();
        let mut expected: Vec<String> = expected_conversions.iter().map(|l| l.replace("{ns}", namespace)).collect();
        listed.sort();
        expected.sort();
        assert_eq!(listed, expected, "stacks: {stacks}");
        let removed = ["v1beta1", "v1beta2", "v2beta1"];
        for object in &app.objects {
            let api_version = &object.types.as_ref().unwrap().api_version;
            let custom = api_version.starts_with("demo.kubeflow.org/");
            assert!(custom || !removed.iter().any(|r| api_version.ends_with(r)), "{api_version} {:?} left unconverted", object.metadata.name);
        }
        let deployment = find(&app.objects, "Deployment", "legacy-controller");
        assert_eq!(deployment.data["spec"]["selector"], selector, "stacks: {stacks}");
        let crd = find(&app.objects, "CustomResourceDefinition", "legacyjobs.demo.kubeflow.org");
        assert_eq!(crd.data["spec"]["versions"][0]["additionalPrinterColumns"], serde_json::json!([{"name": "Owner", "type": "string", "jsonPath": ".spec.owner"}]));
    }
}

/// kubeflow/manifests since 1.7 needs kustomize v5; such a package is recognised by what its
/// kustomizations use and rendered with v5, kfctl-era packages keep v3.1.0, and the repository
/// may choose.
#[tokio::test]
async fn a_package_shaped_like_current_kubeflow_manifests_renders_with_kustomize_v5() {
    let env = env(true).await;
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path().join("repo");
    fixtures::write_modern_repo(&repo);
    let uri = format!("file://{}", repo.display());
    let istio = || app_kfdef(&uri, "apps/web/upstream/overlays/istio", &[], &[]);
    for mode_kfdef in [istio(), {
        let mut stacks = istio();
        stacks.spec.applications[0].name = "kubeflow-apps".into();
        stacks
    }] {
        let apps = env.renderer.render_kfdef(&env.cache, &mode_kfdef).await.unwrap();
        let web = &apps[0];
        let (release, why) = &web.kustomize;
        assert_eq!(*release, KustomizeRelease::V5);
        assert!(why.ends_with("apps/web/upstream/overlays/istio/kustomization.yaml uses field \"components\""), "{why}");
        let deployment = find(&web.objects, "Deployment", "web");
        assert_eq!(deployment.metadata.namespace.as_deref(), Some("kubeflow"));
        // `labels` without selectors, the Component's patch, the replacement.
        assert_eq!(deployment.labels().get("app.kubernetes.io/part-of").map(String::as_str), Some("web"));
        assert_eq!(deployment.data["spec"]["selector"], serde_json::json!({"matchLabels": {"app": "web"}}));
        assert_eq!(deployment.data["spec"]["template"]["metadata"]["annotations"]["sidecar.istio.io/inject"], "true");
        assert_eq!(deployment.data["spec"]["template"]["spec"]["containers"][0]["image"], "ghcr.io/kubeflow/web:v1.11.0");
    }

    // The repository chooses v3: kustomize v3.1.0 refuses the field it does not know.
    let mut forced = istio();
    forced.spec.repos[0].kustomize = Some(KustomizeRelease::V3);
    match render_err(&env, &forced).await {
        RenderError::Kustomize { app, source: KustomizeError::Failed { stderr, .. } } => {
            assert_eq!(app, "app");
            assert!(stderr.contains("components"), "{stderr}");
        }
        other => panic!("expected kustomize v3 to fail, got {other:?}"),
    }

    // A renderer without v5 names the application, the release and what needs it.
    let v3_only = Renderer::new(env.renderer.local().unwrap().0.clone(), tmp.path().join("work")).unwrap();
    match v3_only.render_kfdef(&env.cache, &istio()).await.unwrap_err() {
        RenderError::NoKustomize { app, release, why, .. } => {
            assert_eq!((app.as_str(), release), ("app", KustomizeRelease::V5));
            assert!(why.contains("uses field \"components\""), "{why}");
        }
        other => panic!("expected NoKustomize, got {other:?}"),
    }
}

/// A KfDef whose applications are the entries of the modern example's kustomization
/// (`resources` and `components`) renders, application by application, the objects upstream's
/// `kustomize build example` renders — none missing, none extra, same namespaces — although the
/// KfDef lives in another namespace; the Component is built with the application it applies to.
#[tokio::test]
async fn the_entries_of_the_modern_example_render_what_kustomize_builds_of_it() {
    let env = env(true).await;
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path().join("repo");
    fixtures::write_modern_repo(&repo);
    let uri = format!("file://{}", repo.display());
    let kfdef = fixtures::modern_example_kfdef(&uri, "team-a");
    let apps = env.renderer.render_kfdef(&env.cache, &kfdef).await.unwrap();
    let mut rendered: Vec<_> = apps.iter().flat_map(|a| summary(&a.objects)).collect();
    rendered.sort();

    let home = tmp.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let upstream = env.renderer.local().unwrap().1.unwrap().build(&repo.join("example"), &home, std::slice::from_ref(&repo)).await.unwrap();
    let mut expected = summary(&kubeflow_manifests::parse_objects(&upstream).unwrap());
    expected.sort();
    assert_eq!(rendered, expected);

    // The Component is built with the application it applies to (componentOf), as the example
    // builds it with the rest: its PeerAuthentication is the mesh install's.
    let component = apps.iter().find(|a| a.name == "strict-mtls").unwrap();
    assert!(component.objects.is_empty());
    assert!(component.warnings.iter().any(|w| w.contains("applied to application \"mesh-install\"")), "{:?}", component.warnings);
    let mesh = apps.iter().find(|a| a.name == "mesh-install").unwrap();
    assert!(summary(&mesh.objects).contains(&("PeerAuthentication".to_string(), "default".to_string(), "demo-mesh".to_string())), "{:?}", summary(&mesh.objects));
    assert!(apps.iter().filter(|a| a.name != "strict-mtls").all(|a| a.warnings.is_empty()), "only the Component is told");

    // Without componentOf, a Component is built on its own, with a warning saying so.
    let mut alone = kfdef.clone();
    alone.spec.applications.iter_mut().find(|a| a.name == "strict-mtls").unwrap().kustomize_config.as_mut().unwrap().component_of = None;
    let apps = env.renderer.render_kfdef(&env.cache, &alone).await.unwrap();
    let component = apps.iter().find(|a| a.name == "strict-mtls").unwrap();
    assert_eq!(summary(&component.objects), owned(&[("PeerAuthentication", "default", "demo-mesh")]));
    assert!(component.warnings.iter().any(|w| w.contains("a Component, built on its own")), "{:?}", component.warnings);
}

/// kfctl's namespace rewrite is kfctl's alone. A package that kustomize v3.1.0 could build (no
/// field only v5 has), with objects in namespaces of their own, in a repository with
/// kubeflow/manifests' layout: a KfDef of Kubeflow 1.3 or later — or one without a version, whose
/// repository has `example/kustomization.yaml` — builds it as upstream does (kustomize v5, every
/// object where its manifest puts it, overlays and parameters not applied, with a warning); a
/// kfctl-era KfDef (v1.2) builds it as kfctl did (v3.1.0, everything in the `namespace`
/// parameter's namespace). A repository without that layout and a KfDef without a version: kfctl's;
/// so is a package of kfctl's shape (`base/`, nothing to build at its path) in a later KfDef.
#[tokio::test]
async fn namespaces_are_rewritten_only_for_kfctl_era_kfdefs() {
    let env = env(true).await;
    let tmp = tempfile::tempdir().unwrap();
    // The modern fixture plus the plain package; `example` says whether it has upstream's layout.
    let write = |repo: &Path, example: bool| {
        fixtures::write_modern_repo(repo);
        if !example {
            std::fs::remove_dir_all(repo.join("example")).unwrap();
        }
        let plain = repo.join("common/plain/base");
        std::fs::create_dir_all(&plain).unwrap();
        std::fs::write(plain.join("kustomization.yaml"), "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [objects.yaml]\n").unwrap();
        std::fs::write(plain.join("params.env"), "namespace=\n").unwrap();
        std::fs::write(
            plain.join("objects.yaml"),
            "apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata: {name: leader-election, namespace: kube-system}\nrules: []\n---\n\
             apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: controller, namespace: plain-system}\n---\n\
             apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings}\n",
        )
        .unwrap();
    };
    let repo = tmp.path().join("repo");
    write(&repo, true);
    let uri = format!("file://{}", repo.display());
    let placed = |apps: &[kubeflow_manifests::RenderedApp]| {
        let mut placed = summary(&apps[0].objects);
        placed.sort();
        placed
    };
    let with_version = |version: Option<&str>| {
        let mut kfdef = app_kfdef(&uri, "common/plain", &[], &[("namespace", "team-a")]);
        kfdef.spec.version = version.map(String::from);
        kfdef
    };
    let upstream = owned(&[("ConfigMap", "settings", ""), ("Role", "leader-election", "kube-system"), ("ServiceAccount", "controller", "plain-system")]);
    let kfctl = owned(&[("ConfigMap", "settings", "team-a"), ("Role", "leader-election", "team-a"), ("ServiceAccount", "controller", "team-a")]);

    // The path names the package's folder as a kfctl v1.0 KfDef would; upstream's KfDefs name the
    // kustomization's own folder.
    let mut later = with_version(Some("v1.10.2"));
    later.spec.applications[0].kustomize_config.as_mut().unwrap().repo_ref.as_mut().unwrap().path = "common/plain/base".into();
    for kfdef in [later.clone(), { let mut none = later.clone(); none.spec.version = None; none }] {
        let apps = env.renderer.render_kfdef(&env.cache, &kfdef).await.unwrap();
        assert_eq!(placed(&apps), upstream, "{:?}", kfdef.spec.version);
        assert_eq!(apps[0].kustomize.0, KustomizeRelease::V5, "{:?}", apps[0].kustomize);
        assert!(apps[0].warnings.iter().any(|w| w.contains("parameters [\"namespace\"] are not applied to a package built as upstream builds it")), "{:?}", apps[0].warnings);
    }

    let apps = env.renderer.render_kfdef(&env.cache, &with_version(Some("v1.2.0"))).await.unwrap();
    assert_eq!(placed(&apps), kfctl);
    assert_eq!(apps[0].kustomize.0, KustomizeRelease::V3, "{:?}", apps[0].kustomize);

    // A later KfDef naming the package's folder (kfctl's shape: `base/`, nothing to build at the
    // path itself, as after bumping a kfctl KfDef's version): kfctl's rules, and it is told so.
    let apps = env.renderer.render_kfdef(&env.cache, &with_version(Some("v1.10.2"))).await.unwrap();
    assert_eq!(placed(&apps), kfctl);
    assert!(apps[0].warnings.iter().any(|w| w.starts_with("a kfctl-style package")), "{:?}", apps[0].warnings);

    // The same package in a repository without kubeflow/manifests' layout, no version: kfctl's.
    let repo = tmp.path().join("repo-without-example");
    write(&repo, false);
    let uri = format!("file://{}", repo.display());
    let mut unversioned = app_kfdef(&uri, "common/plain", &[], &[("namespace", "team-a")]);
    unversioned.spec.version = None;
    let apps = env.renderer.render_kfdef(&env.cache, &unversioned).await.unwrap();
    assert_eq!(placed(&apps), kfctl);
}

/// Remote bases, as Kubeflow 1.11's Pipelines and Trainer name them — a git reference
/// (`github.com/argoproj/argo-workflows/manifests/base/crds/minimal?ref=v3.7.3`) and a release
/// asset — are fetched by the render itself, through the KfDef's mirror (here a loopback server
/// with GitHub's archive and release-asset layout), and built in: kustomize never fetches. An
/// unpinned one (`?ref=main`) is refused, and so is a fetched copy naming another remote base.
#[tokio::test]
async fn pinned_remote_bases_are_fetched_through_the_mirror_and_unpinned_ones_refused() {
    let env = env(true).await;
    let tmp = tempfile::tempdir().unwrap();
    let argo = tmp.path().join("argo");
    let crds = argo.join("manifests/base/crds/minimal");
    std::fs::create_dir_all(&crds).unwrap();
    std::fs::write(crds.join("kustomization.yaml"), "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [workflows.yaml]\n").unwrap();
    std::fs::write(
        crds.join("workflows.yaml"),
        "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata: {name: workflows.argoproj.io}\nspec:\n  group: argoproj.io\n  scope: Namespaced\n  names: {kind: Workflow, plural: workflows}\n  versions: [{name: v1alpha1, served: true, storage: true, schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}}]\n",
    )
    .unwrap();
    let jobset = "apiVersion: v1\nkind: Namespace\nmetadata: {name: jobset-system}\n---\napiVersion: v1\nkind: ServiceAccount\nmetadata: {name: jobset-controller-manager, namespace: jobset-system}\n";
    let server = Server::start(BTreeMap::from([
        ("argoproj/argo-workflows/archive/v3.7.3.tar.gz".to_string(), fixtures::pack_github_tarball(&argo, "argo-workflows-3.7.3")),
        ("kubernetes-sigs/jobset/releases/download/v0.8.0/manifests.yaml".to_string(), jobset.as_bytes().to_vec()),
    ]))
    .await;
    let write_repo = |argo_ref: &str| {
        let repo = tmp.path().join(format!("repo-{argo_ref}"));
        fixtures::write_modern_repo(&repo);
        let package = repo.join("apps/pipeline/upstream/base");
        std::fs::create_dir_all(&package).unwrap();
        std::fs::write(
            package.join("kustomization.yaml"),
            format!(
                "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n\
                 - github.com/argoproj/argo-workflows/manifests/base/crds/minimal?ref={argo_ref}\n\
                 - https://github.com/kubernetes-sigs/jobset/releases/download/v0.8.0/manifests.yaml\n- config.yaml\n"
            ),
        )
        .unwrap();
        std::fs::write(package.join("config.yaml"), "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: pipeline-install-config}\n").unwrap();
        repo
    };
    let kfdef = |repo: &Path| {
        let mut kfdef = fixtures::modern_example_kfdef(&format!("file://{}", repo.display()), "team-a");
        kfdef.spec.applications = serde_json::from_value(serde_json::json!([{"name": "pipeline", "kustomizeConfig": {"repoRef": {"name": "manifests", "path": "apps/pipeline/upstream/base"}}}])).unwrap();
        kfdef.spec.remote_base_mirrors = vec![format!("https://github.com/={}/", server.url("").trim_end_matches('/'))];
        kfdef
    };

    let repo = write_repo("v3.7.3");
    let apps = env.renderer.render_kfdef(&env.cache, &kfdef(&repo)).await.unwrap();
    let mut objects = summary(&apps[0].objects);
    objects.sort();
    assert_eq!(
        objects,
        owned(&[
            ("ConfigMap", "pipeline-install-config", ""),
            ("CustomResourceDefinition", "workflows.argoproj.io", ""),
            ("Namespace", "jobset-system", ""),
            ("ServiceAccount", "jobset-controller-manager", "jobset-system"),
        ])
    );
    // The repository is left as it is: its kustomization still names the remote bases.
    let cached = std::fs::read_to_string(repo.join("apps/pipeline/upstream/base/kustomization.yaml")).unwrap();
    assert!(cached.contains("?ref=v3.7.3"), "{cached}");

    // Unpinned: refused before anything is fetched, saying how to pin it.
    let error = env.renderer.render_kfdef(&env.cache, &kfdef(&write_repo("main"))).await.unwrap_err().to_string();
    assert!(error.contains("not pinned") && error.contains("\"main\""), "{error}");

    // Without the mirror, github.com itself would be asked: the fence and the machine say no, and
    // the error names the URL.
    let mut unmirrored = kfdef(&repo);
    unmirrored.spec.remote_base_mirrors.clear();
    let error = env.renderer.render_kfdef(&env.cache, &unmirrored).await.unwrap_err().to_string();
    assert!(error.contains("fetching https://github.com/argoproj/argo-workflows at v3.7.3"), "{error}");
}

/// A git remote base is fetched over git's own protocol, from a loopback `git http-backend`
/// reached through the KfDef's mirror: pinned by tag or by full commit id, it builds what that
/// commit holds (not what the branch holds since); a tag the repository lacks, a short commit id
/// and an unpinned ref are refused, naming the reference.
#[tokio::test]
async fn git_remote_bases_are_fetched_over_git_at_their_pinned_commit() {
    let env = env(true).await;
    let tmp = tempfile::tempdir().unwrap();
    let served = tmp.path().join("served");
    let argo = served.join("argoproj/argo-workflows");
    let crds = argo.join("manifests/base/crds/minimal");
    std::fs::create_dir_all(&crds).unwrap();
    let crd = |name: &str| {
        format!("apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata: {{name: {name}.argoproj.io}}\nspec:\n  group: argoproj.io\n  scope: Namespaced\n  names: {{kind: W, plural: {name}}}\n  versions: [{{name: v1alpha1, served: true, storage: true, schema: {{openAPIV3Schema: {{type: object}}}}}}]\n")
    };
    std::fs::write(crds.join("kustomization.yaml"), "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [crd.yaml]\n").unwrap();
    std::fs::write(crds.join("crd.yaml"), crd("workflows")).unwrap();
    // Two near-identical files: the pack of one commit stores one as a delta of the other.
    std::fs::write(argo.join("README.md"), "argo workflows\n".repeat(2000)).unwrap();
    std::fs::write(argo.join("NOTICE.md"), format!("{}notice\n", "argo workflows\n".repeat(2000))).unwrap();
    fixtures::git(&argo, &["init", "-q"]);
    fixtures::git(&argo, &["add", "."]);
    fixtures::git(&argo, &["commit", "-q", "-m", "v3.7.3"]);
    fixtures::git(&argo, &["tag", "-a", "v3.7.3", "-m", "v3.7.3"]);
    let tagged = fixtures::git(&argo, &["rev-parse", "HEAD"]);
    // The branch moves on after the tag.
    std::fs::write(crds.join("crd.yaml"), crd("moved")).unwrap();
    std::fs::write(argo.join("README.md"), format!("{}more\n", "argo workflows\n".repeat(2000))).unwrap();
    fixtures::git(&argo, &["commit", "-q", "-am", "later"]);
    fixtures::git(&argo, &["gc", "-q", "--aggressive"]);
    let server = Server::git(&served).await;

    let kfdef = |argo_ref: &str| {
        let repo = tmp.path().join(format!("repo-{argo_ref}"));
        fixtures::write_modern_repo(&repo);
        let package = repo.join("apps/pipeline/upstream/base");
        std::fs::create_dir_all(&package).unwrap();
        std::fs::write(package.join("kustomization.yaml"), format!("apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n- github.com/argoproj/argo-workflows/manifests/base/crds/minimal?ref={argo_ref}\n")).unwrap();
        let mut kfdef = fixtures::modern_example_kfdef(&format!("file://{}", repo.display()), "team-a");
        kfdef.spec.applications = serde_json::from_value(serde_json::json!([{"name": "pipeline", "kustomizeConfig": {"repoRef": {"name": "manifests", "path": "apps/pipeline/upstream/base"}}}])).unwrap();
        kfdef.spec.remote_base_mirrors = vec![format!("https://github.com/={}", server.url(""))];
        kfdef
    };
    for pin in ["v3.7.3", tagged.as_str()] {
        let apps = env.renderer.render_kfdef(&env.cache, &kfdef(pin)).await.unwrap_or_else(|e| panic!("{pin}: {e}"));
        assert_eq!(summary(&apps[0].objects), owned(&[("CustomResourceDefinition", "workflows.argoproj.io", "")]), "{pin}: the pinned commit's files");
    }
    for (pin, why) in [("v9.9.9", "no tag or branch \"v9.9.9\""), (&tagged[..10], "full 40-digit id"), ("main", "not pinned")] {
        let error = env.renderer.render_kfdef(&env.cache, &kfdef(pin)).await.unwrap_err().to_string();
        assert!(error.contains(why) && error.contains("github.com/argoproj/argo-workflows"), "{pin}: {error}");
    }
}
