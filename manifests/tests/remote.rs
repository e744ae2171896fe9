//! The renderer ([`kubeflow_manifests::remote`]) on loopback with the real kustomize: what it
//! renders equals what renders in the operator, it reads only what it was sent, and it answers
//! only its callers. Needs the kustomize `e2e/env/build.sh kustomize` builds.

use std::path::{Path, PathBuf};

use kubeflow_crds::kfdef::{KfDef, KustomizeRelease};
use kubeflow_manifests::fixtures;
use kubeflow_manifests::remote::{self, ServerConfig};
use kubeflow_manifests::{FetchOptions, Kustomize, KustomizeError, RemoteRenderer, RenderError, Renderer, RepoCache};

async fn kustomize(release: KustomizeRelease) -> Kustomize {
    Kustomize::locate_release(release).await.unwrap_or_else(|e| panic!("these tests run the real kustomize: {e}"))
}

/// A renderer on a loopback port answering `callers`; its URL.
async fn start_renderer(callers: Vec<String>, work_root: &Path) -> String {
    let config = ServerConfig { v3: kustomize(KustomizeRelease::V3).await, v3_2: Some(kustomize(KustomizeRelease::V3_2).await), v5: Some(kustomize(KustomizeRelease::V5).await), callers, work_root: work_root.to_path_buf(), concurrency: 2 };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(remote::serve_on(listener, config, std::future::pending()));
    url
}

fn caller() -> (String, String) {
    let key = nkeys::KeyPair::new_user();
    (key.seed().unwrap(), key.public_key())
}

async fn render(renderer: &Renderer, cache: &RepoCache, kfdef: &KfDef) -> Result<Vec<serde_json::Value>, RenderError> {
    let apps = renderer.render_kfdef(cache, kfdef).await?;
    Ok(apps.iter().flat_map(|a| a.objects.iter().map(|o| serde_json::to_value(o).unwrap())).collect())
}

/// Both kfctl-era per-application packages (kustomize v3.1.0, generated kustomizations and
/// params, the package copied with links into the repository) and kubeflow/manifests' example
/// entries (v5, a Component wrapped through a link) render in the renderer exactly as here.
#[tokio::test]
async fn packages_render_in_the_renderer_exactly_as_in_the_operator() {
    let tmp = tempfile::tempdir().unwrap();
    let (seed, public) = caller();
    let url = start_renderer(vec![public], &tmp.path().join("renderer")).await;
    let cache = RepoCache::new(tmp.path().join("cache"), FetchOptions { allow_local: true, ..FetchOptions::default() }).unwrap();
    let here = Renderer::new(kustomize(KustomizeRelease::V3).await, tmp.path().join("work-here")).unwrap().with_v5(kustomize(KustomizeRelease::V5).await);
    let there = Renderer::remote(RemoteRenderer::new(&url, &seed).unwrap(), tmp.path().join("work-there")).unwrap();
    assert!(there.local().is_none(), "a remote renderer has no local kustomize to fall back on");

    let (kfctl_repo, modern_repo) = (tmp.path().join("kfctl"), tmp.path().join("modern"));
    fixtures::write_repo(&kfctl_repo);
    fixtures::write_modern_repo(&modern_repo);
    let uri = |p: &PathBuf| format!("file://{}", p.display());
    for kfdef in [fixtures::per_application_kfdef(&uri(&kfctl_repo), "team-a"), fixtures::modern_example_kfdef(&uri(&modern_repo), "team-a")] {
        let expected = render(&here, &cache, &kfdef).await.unwrap();
        assert!(expected.len() > 5, "the fixture renders objects");
        assert_eq!(render(&there, &cache, &kfdef).await.unwrap(), expected, "{}", kfdef.metadata.name.as_deref().unwrap_or_default());
    }
}

/// The renderer reads only the inputs it was sent: a kustomization naming a file beside its
/// directory on the operator's side (through `x/../..`, which kustomize cleans as text) finds
/// nothing there, and kustomize's message names the path as the operator knows it.
#[tokio::test]
async fn the_renderer_reads_only_the_inputs_it_was_sent() {
    let tmp = tempfile::tempdir().unwrap();
    let (seed, public) = caller();
    let url = start_renderer(vec![public], &tmp.path().join("renderer")).await;
    let package = tmp.path().join("package");
    std::fs::create_dir_all(&package).unwrap();
    std::fs::write(tmp.path().join("secret"), "the operator's credential").unwrap();
    std::fs::write(package.join("kustomization.yaml"), "generatorOptions: {disableNameSuffixHash: true}\nconfigMapGenerator:\n- name: loot\n  files: [kc=x/../../secret]\n").unwrap();
    let client = RemoteRenderer::new(&url, &seed).unwrap();
    let error = client.build(KustomizeRelease::V5, &package, std::slice::from_ref(&package)).await.unwrap_err();
    let KustomizeError::Failed { stderr, .. } = &error else { panic!("expected kustomize to fail, got {error:?}") };
    assert!(!stderr.contains("credential"), "{stderr}");
    let secret = std::fs::canonicalize(tmp.path()).unwrap().join("secret");
    assert!(stderr.contains(&secret.display().to_string()), "the message names the operator's path: {stderr}");

    // The same package with the file inside what is sent renders: the refusal above is the
    // missing input, not a broken package.
    std::fs::write(package.join("secret"), "fine").unwrap();
    std::fs::write(package.join("kustomization.yaml"), "generatorOptions: {disableNameSuffixHash: true}\nconfigMapGenerator:\n- name: loot\n  files: [kc=x/../secret]\n").unwrap();
    let output = client.build(KustomizeRelease::V5, &package, std::slice::from_ref(&package)).await.unwrap();
    assert!(output.contains("kc: fine"), "{output}");
}

/// Only a caller whose key the renderer was given is answered; an unreachable renderer is an error
/// that may pass (the operator retries), never a render somewhere else.
#[tokio::test]
async fn the_renderer_answers_only_its_callers() {
    let tmp = tempfile::tempdir().unwrap();
    let (_, public) = caller();
    let (stranger_seed, stranger) = caller();
    let url = start_renderer(vec![public], &tmp.path().join("renderer")).await;
    let package = tmp.path().join("package");
    std::fs::create_dir_all(&package).unwrap();
    std::fs::write(package.join("kustomization.yaml"), "configMapGenerator:\n- name: c\n  literals: [a=b]\n").unwrap();
    let error = RemoteRenderer::new(&url, &stranger_seed).unwrap().build(KustomizeRelease::V5, &package, std::slice::from_ref(&package)).await.unwrap_err();
    match &error {
        KustomizeError::Renderer { error, .. } => assert!(error.starts_with("401") && error.contains(&stranger) && error.contains("not one this renderer answers"), "{error}"),
        other => panic!("expected the renderer to refuse, got {other:?}"),
    }

    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let unreachable = RemoteRenderer::new(&format!("http://{closed}"), &stranger_seed).unwrap();
    let error = unreachable.build(KustomizeRelease::V5, &package, std::slice::from_ref(&package)).await.unwrap_err();
    assert!(matches!(error, KustomizeError::Renderer { .. }), "{error:?}");
    assert!(RenderError::Kustomize { app: "a".into(), source: error }.is_transient());
}
