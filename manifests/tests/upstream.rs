//! The real kubeflow/manifests releases (`../shared/manifests`: v1.11.0 with its remote bases,
//! v1.10.2, and the kfctl era's v1.2.0 with kfctl's own KfDef), rendered application by application with the real kustomize
//! and compared with upstream's own `kustomize build <path>` of the same path.

use std::collections::BTreeMap;
use std::path::PathBuf;

use kubeflow_crds::KfDef;
use kubeflow_crds::kfdef::KustomizeRelease;
use kubeflow_manifests::{FetchOptions, Kustomize, RenderedApp, Renderer, RepoCache, RepoSource};

fn releases() -> PathBuf {
    kubeflow_manifests::fixtures::upstream_releases()
}

struct Release {
    _tmp: tempfile::TempDir,
    kfdef: KfDef,
    cache: RepoCache,
    renderer: Renderer,
    /// The unpacked release, as upstream's `kustomize build` reads it.
    root: PathBuf,
}

/// `kfdef` (a file in the releases folder) with its repository pointing at `archive` there.
async fn release(kfdef: &str, archive: &str) -> Release {
    let dir = releases();
    let mut kfdef: KfDef = serde_yaml_ng::from_str(&std::fs::read_to_string(dir.join(kfdef)).unwrap()).unwrap();
    kfdef.spec.repos[0].uri = dir.join(archive).display().to_string();
    let tmp = tempfile::tempdir().unwrap();
    // Loopback: the remote bases' mirror.
    let cache = RepoCache::new(tmp.path().join("cache"), FetchOptions { allow_local: true, address_fence: false, ..FetchOptions::default() }).unwrap();
    let kustomize = |release| async move { Kustomize::locate_release(release).await.unwrap_or_else(|e| panic!("these tests run the real kustomize: {e}")) };
    let renderer = Renderer::new(kustomize(KustomizeRelease::V3).await, tmp.path().join("work")).unwrap().with_v5(kustomize(KustomizeRelease::V5).await).with_release(KustomizeRelease::V3_2, kustomize(KustomizeRelease::V3_2).await);
    let repo = &kfdef.spec.repos[0];
    let root = cache.fetch(&RepoSource { name: repo.name.clone(), uri: repo.uri.clone(), sha256: None }).await.unwrap().root;
    Release { _tmp: tmp, kfdef, cache, renderer, root }
}

/// (kind, namespace, name) of each object, sorted.
fn identities(objects: impl IntoIterator<Item = serde_json::Value>) -> Vec<(String, String, String)> {
    let text = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_string();
    let mut ids: Vec<_> = objects.into_iter().map(|o| (text(&o["kind"]), text(&o["metadata"]["namespace"]), text(&o["metadata"]["name"]))).collect();
    ids.sort();
    ids
}

fn values(app: &RenderedApp) -> Vec<serde_json::Value> {
    app.objects.iter().map(|o| serde_json::to_value(o).unwrap()).collect()
}

/// Upstream's `kustomize build <path>` of `app`'s path with `release`, as JSON values.
async fn upstream_build(release: &Release, app: &str, kustomize: KustomizeRelease) -> Vec<serde_json::Value> {
    let path = &release.kfdef.spec.applications.iter().find(|a| a.name == app).unwrap().kustomize_config.as_ref().unwrap().repo_ref.as_ref().unwrap().path;
    upstream_build_path(release, path, kustomize).await
}

/// Upstream's `kustomize build <path>` with `release`, as JSON values.
async fn upstream_build_path(release: &Release, path: &str, kustomize: KustomizeRelease) -> Vec<serde_json::Value> {
    let app = path.replace('/', "-");
    let binary = release.renderer.local_release(kustomize).unwrap();
    let home = release._tmp.path().join(format!("home-{app}"));
    std::fs::create_dir_all(&home).unwrap();
    let output = binary.build(&release.root.join(path), &home, std::slice::from_ref(&release.root)).await.unwrap_or_else(|e| panic!("upstream's build of {app} ({path}): {e}"));
    kubeflow_manifests::parse_objects(&output).unwrap().iter().map(|o| serde_json::to_value(o).unwrap()).collect()
}

/// Kubeflow v1.10.2's KfDef (one application per entry of `example/kustomization.yaml`): a
/// Kubeflow version after kfctl's era — and without its version, a repository with upstream's
/// layout — so every application is built as upstream builds it, with kustomize v5, and renders
/// exactly — object for object, field for field,
/// namespaces included — what `kustomize build <path>` renders. Together they are the 611 objects
/// of upstream's `kustomize build example`, each in upstream's namespace, none moved into the
/// KfDef's `kubeflow` (cert-manager's, Knative's, Istio's, Dex's, oauth2-proxy's and
/// cert-manager's leader-election Role in `kube-system` checked by name).
#[tokio::test]
async fn every_application_of_kubeflow_1_10_2_renders_what_upstream_renders() {
    let release = release("kfdef-1.10.2.yaml", "manifests-1.10.2.tar.gz").await;
    assert_eq!(release.kfdef.spec.version.as_deref(), Some("v1.10.2"));
    let apps = release.renderer.render_kfdef(&release.cache, &release.kfdef).await.unwrap();
    assert_eq!(apps.len(), 29);
    let mut unversioned = release.kfdef.clone();
    unversioned.spec.version = None;
    let by_layout = release.renderer.render_kfdef(&release.cache, &unversioned).await.unwrap();
    assert_eq!(by_layout.iter().map(values).collect::<Vec<_>>(), apps.iter().map(values).collect::<Vec<_>>(), "without a version, the layout decides the same");
    let mut all = Vec::new();
    for app in &apps {
        assert_eq!(app.kustomize.0, KustomizeRelease::V5, "{}: {:?}", app.name, app.kustomize);
        let ours = values(app);
        let upstream = upstream_build(&release, &app.name, KustomizeRelease::V5).await;
        assert_eq!(identities(ours.clone()), identities(upstream.clone()), "{}", app.name);
        let by_id = |objects: Vec<serde_json::Value>| -> BTreeMap<(String, String, String), serde_json::Value> {
            objects.into_iter().map(|o| (identities([o.clone()]).remove(0), o)).collect()
        };
        let upstream = by_id(upstream);
        for (id, object) in by_id(ours.clone()) {
            assert_eq!(object, upstream[&id], "{}: {id:?} differs from upstream's", app.name);
        }
        all.extend(ours);
    }
    // Together: upstream's `kustomize build example`, object for object.
    let all = identities(all);
    let example = upstream_build_path(&release, "example", KustomizeRelease::V5).await;
    assert_eq!(all.len(), 611);
    assert_eq!(all, identities(example));
    // Where the issue found them moved into `kubeflow`: each in upstream's namespace.
    // The user's Profile, named by user-namespace's replacements (kustomize v5.8 leaves it
    // `$(profile-name)`, which the API server refuses: kubeflow/manifests#3315).
    let user_namespace = apps.iter().find(|a| a.name == "user-namespace").unwrap();
    let profile = values(user_namespace).into_iter().find(|o| o["kind"] == "Profile").unwrap();
    assert_eq!((profile["metadata"]["name"].as_str(), profile["spec"]["owner"]["name"].as_str()), (Some("kubeflow-user-example-com"), Some("user@example.com")));
    for (kind, namespace, name) in [
        ("Deployment", "cert-manager", "cert-manager-webhook"),
        ("Role", "kube-system", "cert-manager:leaderelection"),
        ("Deployment", "knative-serving", "activator"),
        ("Deployment", "istio-system", "istiod"),
        ("Deployment", "auth", "dex"),
        ("Deployment", "oauth2-proxy", "oauth2-proxy"),
    ] {
        let id = (kind.to_string(), namespace.to_string(), name.to_string());
        assert!(all.contains(&id), "{id:?}");
    }
}

/// Kubeflow v1.3.1's KfDef (the 30 entries of its `example/kustomization.yaml`), built with the
/// kustomize its README names, 3.2.0, chosen from the KfDef's version: every application renders
/// exactly what upstream's `kustomize build <path>` renders with 3.2.0, and together the 586
/// objects of `kustomize build example`, the generated ConfigMaps under upstream's names
/// (`jupyter-web-app-parameters-h7dbhff8cb`; v5 hashes their data otherwise, `-chmg88cm48`).
/// A repository's `kustomize` field still chooses.
#[tokio::test]
async fn every_application_of_kubeflow_1_3_1_renders_with_the_kustomize_its_release_names() {
    let release = release("kfdef-1.3.1.yaml", "manifests-1.3.1.tar.gz").await;
    assert_eq!(release.kfdef.spec.version.as_deref(), Some("v1.3.1"));
    let apps = release.renderer.render_kfdef(&release.cache, &release.kfdef).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(apps.len(), 30);
    let (mut all, mut converted) = (Vec::new(), 0);
    for app in &apps {
        assert_eq!(app.kustomize.0, KustomizeRelease::V3_2, "{}: {:?}", app.name, app.kustomize);
        let ours = values(app);
        let upstream = upstream_build(&release, &app.name, KustomizeRelease::V3_2).await;
        // 1.3's packages still ship API versions Kubernetes removed (v1beta1 CRDs, webhooks,
        // RBAC), which are converted (listed per object); the rest is upstream's build field for
        // field.
        if app.conversions.is_empty() {
            assert!(ours == upstream, "{}: not upstream's 3.2.0 build", app.name);
        } else {
            assert_eq!(identities(ours.clone()), identities(upstream), "{}", app.name);
            converted += 1;
        }
        all.extend(ours);
    }
    // Istio, Knative, cert-manager, the kubeflow apps' CRDs and webhooks of 1.3: those applications
    // compare by kind, namespace and name; the other 13 field for field.
    assert_eq!(converted, 17);
    let example = upstream_build_path(&release, "example", KustomizeRelease::V3_2).await;
    assert_eq!(example.len(), 586);
    assert_eq!(identities(all.clone()), identities(example));
    let names: Vec<(String, String, String)> = identities(all);
    assert!(names.contains(&("ConfigMap".into(), "kubeflow".into(), "jupyter-web-app-parameters-h7dbhff8cb".into())));
    // The repository's own choice wins: v5 names the same ConfigMap otherwise.
    let mut chosen = release.kfdef.clone();
    chosen.spec.repos[0].kustomize = Some(KustomizeRelease::V5);
    chosen.spec.applications.retain(|a| a.name == "jupyter-web-app");
    let jupyter = release.renderer.render_kfdef(&release.cache, &chosen).await.unwrap();
    assert_eq!(jupyter[0].kustomize.0, KustomizeRelease::V5);
    assert!(values(&jupyter[0]).iter().any(|o| o["metadata"]["name"] == "jupyter-web-app-parameters-chmg88cm48"));
}

/// `kfop init --release <tag>` ([`kubeflow_manifests::example`]) on each release writes the KfDef
/// that lists its `example/kustomization.yaml`: application for application (name and path,
/// components last) the KfDefs of `../shared/manifests`, written by hand from the same file, but
/// 1.10.2's `profiles-pss`, which it names `profiles` as 1.11.0's is named. `examples/` holds what
/// it writes for the current releases, with upstream's archive URIs.
#[tokio::test]
async fn kfop_init_writes_each_releases_example_as_its_kfdef() {
    use kubeflow_manifests::example;
    for (tag, kfdef_file, archive) in [("v1.3.1", "kfdef-1.3.1.yaml", "manifests-1.3.1.tar.gz"), ("v1.10.2", "kfdef-1.10.2.yaml", "manifests-1.10.2.tar.gz"), ("v1.11.0", "kfdef-1.11.0.yaml", "manifests-1.11.0.tar.gz")] {
        let release = release(kfdef_file, archive).await;
        let text = std::fs::read_to_string(release.root.join(example::EXAMPLE)).unwrap();
        let written = example::kfdef_of_example(&text, tag, &example::upstream_archive(tag), "kubeflow", "kubeflow").unwrap();
        let ours: Vec<(String, String)> = written["spec"]["applications"].as_array().unwrap().iter().map(|a| (a["name"].as_str().unwrap().to_string(), a["kustomizeConfig"]["repoRef"]["path"].as_str().unwrap().to_string())).collect();
        let by_hand: Vec<(String, String)> = release.kfdef.spec.applications.iter().map(|a| {
            let name = if tag == "v1.10.2" && a.name == "profiles-pss" { "profiles".to_string() } else { a.name.clone() };
            (name, a.kustomize_config.as_ref().unwrap().repo_ref.as_ref().unwrap().path.clone())
        }).collect();
        assert_eq!(ours, by_hand, "{tag}");
        let typed: kubeflow_crds::KfDef = serde_json::from_value(written.clone()).unwrap();
        assert_eq!((typed.spec.version.as_deref(), typed.spec.repos[0].uri.as_str()), (Some(tag), example::upstream_archive(tag).as_str()));
        if tag != "v1.3.1" {
            let shipped = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("../examples/kfdef-{tag}.yaml"));
            let text = std::fs::read_to_string(&shipped).unwrap_or_else(|e| panic!("{}: {e}", shipped.display()));
            assert!(text == example::kfdef_yaml(&written, tag), "{} is not what `kfop init --release {tag}` writes: regenerate it (README, Current Kubeflow)", shipped.display());
        }
    }
}

/// Upstream's `kustomize build example` of a release whose packages name remote bases: built
/// with kustomize v5 from a copy of the release that names the copies of `remote/` instead
/// ([`kubeflow_manifests::fixtures::with_upstream_remote_bases_local`]: what kustomize would have
/// fetched).
async fn upstream_example_with_remote_bases(release: &Release) -> Vec<serde_json::Value> {
    let tmp = release._tmp.path().join("upstream");
    std::fs::create_dir_all(&tmp).unwrap();
    let (copy, edited) = kubeflow_manifests::fixtures::with_upstream_remote_bases_local(&release.root, &tmp);
    // Argo's base and its three installs, JobSet's and LeaderWorkerSet's kustomizations; the
    // training operator's (JobSet v0.6.0, not in the example) keep theirs.
    assert_eq!(edited, 6);
    let (_, v5) = release.renderer.local().unwrap();
    let home = tmp.join("home");
    std::fs::create_dir_all(&home).unwrap();
    let output = v5.unwrap().build(&copy.join("example"), &home, std::slice::from_ref(&copy)).await.unwrap_or_else(|e| panic!("upstream's build of example: {e}"));
    kubeflow_manifests::parse_objects(&output).unwrap().iter().map(|o| serde_json::to_value(o).unwrap()).collect()
}

/// Kubeflow v1.11.0's KfDef, as released: Pipelines' Argo Workflows and Trainer's JobSet are
/// remote bases, fetched through the fetch layer from a loopback mirror in the layout of
/// `../shared/manifests/README.md` (nothing reaches the network from kustomize); its last
/// application is the example's `components:` entry, a `kind: Component` that merges into the
/// profile controller's `namespace-labels-data`, applied to that application as upstream's
/// example applies it to the whole build. Together the applications render the 653 objects of
/// upstream's `kustomize build example`, field for field, but for one: kustomize's `vars` are
/// global to a build, so in upstream's single build pvcviewer's `$(CERTIFICATE_NAMESPACE)` and
/// `$(CERTIFICATE_NAME)` also fill the placeholder JobSet's CRD carries (its cainjector annotation
/// then names pvcviewer's certificate); built on its own, as every application is here, the CRD
/// keeps JobSet's own text.
#[tokio::test]
async fn kubeflow_1_11_0_renders_upstreams_example_remote_bases_and_its_component_included() {
    let mut release = release("kfdef-1.11.0.yaml", "manifests-1.11.0.tar.gz").await;
    let mirror = kubeflow_manifests::fixtures::upstream_remote_bases_mirror().await;
    release.kfdef.spec.remote_base_mirrors = vec![format!("https://github.com/={}", mirror.url("gh/"))];
    let apps = release.renderer.render_kfdef(&release.cache, &release.kfdef).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(apps.len(), 30);
    let component = apps.iter().find(|a| a.name == "security-pss-dynamic-baseline").unwrap();
    assert!(component.objects.is_empty(), "built with the application it changes");
    assert!(component.warnings.iter().any(|w| w.ends_with(": profiles")), "{:?}", component.warnings);
    // Merged into the profile controller's namespace labels (1.11.0's profiles already carry
    // the same labels, so the merge keeps them; the v1.10.2 test below sees a Component change).
    let profiles = values(apps.iter().find(|a| a.name == "profiles").unwrap());
    let labels = profiles.iter().find(|o| o["kind"] == "ConfigMap" && o["metadata"]["name"].as_str().unwrap().starts_with("namespace-labels-data")).unwrap();
    assert!(labels["data"]["namespace-labels.yaml"].as_str().unwrap().contains("pod-security.kubernetes.io/enforce: \"baseline\""), "{labels}");
    let all: Vec<serde_json::Value> = apps.iter().flat_map(values).collect();
    let example = upstream_example_with_remote_bases(&release).await;
    assert_eq!(example.len(), 653);
    assert_eq!(identities(all.clone()), identities(example.clone()));
    // The remote bases' objects, each where upstream puts it.
    for (kind, namespace, name) in [("CustomResourceDefinition", "", "workflows.argoproj.io"), ("Deployment", "kubeflow", "workflow-controller"), ("CustomResourceDefinition", "", "jobsets.jobset.x-k8s.io"), ("Deployment", "kubeflow-system", "jobset-controller-manager")] {
        assert!(identities(all.clone()).contains(&(kind.to_string(), namespace.to_string(), name.to_string())), "{kind} {namespace}/{name}");
    }
    let by_id = |objects: Vec<serde_json::Value>| -> BTreeMap<(String, String, String), serde_json::Value> { objects.into_iter().map(|o| (identities([o.clone()]).remove(0), o)).collect() };
    let (ours, upstream) = (by_id(all), by_id(example));
    let differ: Vec<_> = ours.iter().filter(|(id, object)| upstream[*id] != **object).map(|(id, _)| id.clone()).collect();
    assert_eq!(differ, [("CustomResourceDefinition".to_string(), String::new(), "jobsets.jobset.x-k8s.io".to_string())]);
    let annotation = |object: &serde_json::Value| object["metadata"]["annotations"]["cert-manager.io/inject-ca-from"].clone();
    let jobset = &differ[0];
    assert_eq!((annotation(&ours[jobset]).as_str(), annotation(&upstream[jobset]).as_str()), (Some("$(CERTIFICATE_NAMESPACE)/$(CERTIFICATE_NAME)"), Some("kubeflow/pvcviewer-serving-cert")));
    let mut same = ours[jobset].clone();
    same["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] = annotation(&upstream[jobset]);
    assert_eq!(same, upstream[jobset], "nothing else differs");
}

/// A Component of the release applied to an application (`componentOf`), as upstream's
/// `example/kustomization.yaml` lists one under `components:`: v1.10.2's restricted Pod Security
/// Standard (`experimental/security/PSS/dynamic/restricted`, a `kind: Component` merging into the
/// profile controller's `namespace-labels-data`) applied to `profiles-pss`. What we render for
/// `profiles-pss` is, object for object, what kustomize itself builds from a kustomization listing
/// that application under `resources` and the Component under `components`.
#[tokio::test]
async fn a_component_applied_to_an_application_renders_as_upstreams_example_lists_it() {
    let mut release = release("kfdef-1.10.2.yaml", "manifests-1.10.2.tar.gz").await;
    let component = "experimental/security/PSS/dynamic/restricted";
    let mut pss: kubeflow_crds::kfdef::Application = serde_yaml_ng::from_str(&format!(
        "{{name: pss-restricted, kustomizeConfig: {{repoRef: {{name: manifests, path: {component}}}, componentOf: profiles-pss}}}}"
    ))
    .unwrap();
    // Listed after every application, as upstream lists components after every resource.
    release.kfdef.spec.applications.push(pss.clone());
    let apps = release.renderer.render_kfdef(&release.cache, &release.kfdef).await.unwrap();
    let profiles = apps.iter().find(|a| a.name == "profiles-pss").unwrap();
    let restricted = apps.iter().find(|a| a.name == "pss-restricted").unwrap();
    assert!(restricted.objects.is_empty(), "a Component is not built on its own");
    // Upstream's way: a kustomization with the application and the Component, built by kustomize.
    let example = release.root.join("example-with-component");
    std::fs::create_dir_all(&example).unwrap();
    std::fs::write(example.join("kustomization.yaml"), format!("apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n- ../applications/profiles/pss\ncomponents:\n- ../{component}\n")).unwrap();
    let upstream = upstream_build_path(&release, "example-with-component", KustomizeRelease::V5).await;
    assert_eq!(values(profiles), upstream);
    // The Component changed something: the application alone renders otherwise.
    let alone = upstream_build(&release, "profiles-pss", KustomizeRelease::V5).await;
    assert!(values(profiles) != alone, "the Component changed nothing");
    // Without componentOf, as upstream's example lists it: applied to the application before it
    // that it changes, the same objects.
    let mut unnamed = pss.clone();
    unnamed.kustomize_config.as_mut().unwrap().component_of = None;
    let mut listed = release.kfdef.clone();
    *listed.spec.applications.last_mut().unwrap() = unnamed.clone();
    let by_example = release.renderer.render_kfdef(&release.cache, &listed).await.unwrap();
    assert!(by_example.iter().map(values).eq(apps.iter().map(values)), "the same objects as with componentOf");
    let note = &by_example.iter().find(|a| a.name == "pss-restricted").unwrap().warnings;
    assert!(note.iter().any(|w| w.ends_with(": profiles-pss")), "{note:?}");
    // Listed before the application it changes, it reaches none: refused, saying what it changes.
    let mut first = release.kfdef.clone();
    first.spec.applications.pop();
    first.spec.applications.insert(0, unnamed);
    let error = release.renderer.render_kfdef(&release.cache, &first).await.unwrap_err().to_string();
    assert!(error.contains("pss-restricted") && error.contains("ConfigMap kubeflow/namespace-labels-data"), "{error}");
    // Every other application renders as before.
    for app in apps.iter().filter(|a| a.name != "profiles-pss" && a.name != "pss-restricted").take(3) {
        assert_eq!(values(app), upstream_build(&release, &app.name, KustomizeRelease::V5).await, "{}", app.name);
    }
    // A Component of an application the KfDef does not have is refused, naming both.
    pss.kustomize_config.as_mut().unwrap().component_of = Some("no-such-application".into());
    release.kfdef.spec.applications.pop();
    release.kfdef.spec.applications.push(pss);
    let error = release.renderer.render_kfdef(&release.cache, &release.kfdef).await.unwrap_err().to_string();
    assert!(error.contains("pss-restricted") && error.contains("no-such-application"), "{error}");
}

/// kfctl's own v1.2.0 KfDef (stacks: `kubeflow-apps`) over the v1.2.0 release: every application
/// renders with kustomize v3.1.0, kfctl's release — `kubeflow-apps` included, whose
/// `jupyter-web-app` kustomization names `commonLabels` twice (the last one wins, as kustomize
/// reads it) — and each renders the objects `kustomize build <path>` renders with that release:
/// stacks paths are built as they are, so the same kinds, names and namespaces.
#[tokio::test]
async fn every_application_of_kfctls_v1_2_0_kfdef_renders_as_kfctl_built_it() {
    let release = release("kfdef-1.2.0-istio-dex.yaml", "manifests-1.2.0.tar.gz").await;
    // kfctl's own KfDef names its branch; a v1.2 version all the same.
    assert_eq!(release.kfdef.spec.version.as_deref(), Some("v1.2-branch"));
    let apps = release.renderer.render_kfdef(&release.cache, &release.kfdef).await.unwrap();
    assert_eq!(apps.iter().map(|a| a.name.as_str()).collect::<Vec<_>>(), release.kfdef.spec.applications.iter().map(|a| a.name.as_str()).collect::<Vec<_>>());
    for app in &apps {
        assert_eq!(app.kustomize.0, KustomizeRelease::V3, "{}: {:?}", app.name, app.kustomize);
        let upstream = upstream_build(&release, &app.name, KustomizeRelease::V3).await;
        assert!(!upstream.is_empty(), "{}", app.name);
        assert_eq!(identities(values(app)), identities(upstream), "{}", app.name);
    }
    let kubeflow_apps = apps.iter().find(|a| a.name == "kubeflow-apps").unwrap();
    assert!(kubeflow_apps.objects.len() > 100, "{}", kubeflow_apps.objects.len());
}
