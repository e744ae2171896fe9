//! A KfDef of a kubeflow/manifests release, written from the release's own
//! `example/kustomization.yaml` (`kfop init --release <tag>`): one application per entry of its
//! `resources:`, in its order, then one per entry of its `components:` (kustomize `Component`s,
//! which the render applies to the applications before them that they change).
//!
//! Application names are what the components look for (`istio-install`, `dex`, `pipeline`,
//! `katib`, `kserve`, …): a package's folder name before its variant folders (`base`,
//! `upstream`, `overlays/…`, `installs/…`, `env/…`, `pss`), e.g. `pipeline` for
//! `applications/pipeline/upstream/env/cert-manager/platform-agnostic-multi-user`; a Component
//! is named by its whole path (`security-pss-dynamic-baseline`).

use serde_json::{Value, json};

/// The example kustomization of a kubeflow/manifests release, relative to the repository.
pub const EXAMPLE: &str = "example/kustomization.yaml";

/// The archive github.com serves for kubeflow/manifests tag `tag`.
pub fn upstream_archive(tag: &str) -> String {
    format!("https://github.com/kubeflow/manifests/archive/{tag}.tar.gz")
}

/// Top folders that group packages, left out of names.
const GROUPS: &[&str] = &["common", "applications", "apps", "contrib", "experimental"];
/// Folders that choose a variant of a package, where its name ends.
const VARIANTS: &[&str] = &["base", "upstream", "overlays", "installs", "env", "pss"];

/// The name of the application at `path` (see the module's documentation).
pub fn application_name(path: &str, component: bool) -> String {
    let mut segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    if segments.len() > 1 && GROUPS.contains(&segments[0]) {
        segments.remove(0);
    }
    if component {
        return segments.join("-").to_lowercase();
    }
    let end = segments.iter().position(|s| VARIANTS.contains(s)).unwrap_or(segments.len());
    segments[..end.max(1)].last().copied().unwrap_or(path).to_lowercase()
}

/// The path an entry of `example/kustomization.yaml` names, relative to the repository: `../x`
/// is `x`. `Err` for anything else (a remote base, a path leaving the repository).
fn repository_path(entry: &str) -> Result<String, String> {
    let path = entry.strip_prefix("../").ok_or_else(|| format!("{entry:?}: expected a package of the repository (../<path>)"))?;
    let path = path.trim_end_matches('/');
    if path.is_empty() || path.contains("://") || path.split('/').any(|s| s == ".." || s == ".") {
        return Err(format!("{entry:?}: expected a package of the repository (../<path>, no '..' inside)"));
    }
    Ok(path.to_string())
}

/// The KfDef `name`/`namespace` of release `tag` whose repository `manifests` is `uri`, from the
/// text of the release's `example/kustomization.yaml`. Two entries of one name get `-2`, `-3`.
pub fn kfdef_of_example(example: &str, tag: &str, uri: &str, name: &str, namespace: &str) -> Result<Value, String> {
    let doc: serde_yaml_ng::Value = crate::yaml::parse(example).map_err(|e| format!("{EXAMPLE}: not YAML: {e}"))?;
    let list = |field: &str| -> Result<Vec<String>, String> {
        match doc.get(field) {
            None | Some(serde_yaml_ng::Value::Null) => Ok(Vec::new()),
            Some(serde_yaml_ng::Value::Sequence(items)) => items.iter().map(|i| i.as_str().map(String::from).ok_or_else(|| format!("{EXAMPLE}: {field}: expected a list of paths"))).collect(),
            Some(_) => Err(format!("{EXAMPLE}: {field}: expected a list of paths")),
        }
    };
    let entries: Vec<(String, bool)> = list("resources")?.into_iter().map(|e| (e, false)).chain(list("components")?.into_iter().map(|e| (e, true))).collect();
    if entries.is_empty() {
        return Err(format!("{EXAMPLE}: lists no resources"));
    }
    let mut taken = std::collections::BTreeMap::<String, usize>::new();
    let mut applications = Vec::new();
    for (entry, component) in entries {
        let path = repository_path(&entry).map_err(|why| format!("{EXAMPLE}: {why}"))?;
        let base = application_name(&path, component);
        let seen = taken.entry(base.clone()).or_default();
        *seen += 1;
        let name = if *seen == 1 { base } else { format!("{base}-{seen}") };
        applications.push(json!({"name": name, "kustomizeConfig": {"repoRef": {"name": "manifests", "path": path}}}));
    }
    Ok(json!({
        "apiVersion": "kfdef.apps.kubeflow.org/v1", "kind": "KfDef",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"applications": applications, "repos": [{"name": "manifests", "uri": uri}], "version": tag},
    }))
}

/// `kfdef` as the YAML `kfop init` writes, with a header saying where it comes from.
pub fn kfdef_yaml(kfdef: &Value, tag: &str) -> String {
    let count = kfdef["spec"]["applications"].as_array().map_or(0, Vec::len);
    format!(
        "# Written by `kfop init --release {tag}` from kubeflow/manifests {tag}'s {EXAMPLE}:\n# one application per entry of its resources, in order, then of its components ({count}).\n# Edit the list as you would edit that file (comment an entry out, pick another overlay).\n{}",
        serde_yaml_ng::to_string(kfdef).expect("a KfDef serialises")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_the_packages_before_their_variants() {
        for (path, name) in [
            ("common/cert-manager/base", "cert-manager"),
            ("common/istio/istio-install/overlays/oauth2-proxy", "istio-install"),
            ("common/istio-1-9/istio-crds/base", "istio-crds"),
            ("applications/pipeline/upstream/env/cert-manager/platform-agnostic-multi-user", "pipeline"),
            ("applications/katib/upstream/installs/katib-with-kubeflow", "katib"),
            ("applications/kserve/kserve", "kserve"),
            ("applications/profiles/pss", "profiles"),
            ("applications/trainer/overlays", "trainer"),
            ("apps/jupyter/jupyter-web-app/upstream/overlays/istio", "jupyter-web-app"),
        ] {
            assert_eq!(application_name(path, false), name, "{path}");
        }
        assert_eq!(application_name("common/security/PSS/dynamic/baseline", true), "security-pss-dynamic-baseline");
    }

    #[test]
    fn entries_become_applications_in_order_components_last() {
        let example = "resources:\n- ../common/cert-manager/base\n- ../a/one/base\n- ../b/one/overlays/x\ncomponents:\n- ../common/security/PSS/dynamic/baseline\n";
        let kfdef = kfdef_of_example(example, "v1.11.0", "https://x/a.tar.gz", "kubeflow", "kubeflow").unwrap();
        let apps: Vec<(&str, &str)> = kfdef["spec"]["applications"].as_array().unwrap().iter().map(|a| (a["name"].as_str().unwrap(), a["kustomizeConfig"]["repoRef"]["path"].as_str().unwrap())).collect();
        assert_eq!(apps, [("cert-manager", "common/cert-manager/base"), ("one", "a/one/base"), ("one-2", "b/one/overlays/x"), ("security-pss-dynamic-baseline", "common/security/PSS/dynamic/baseline")]);
        assert_eq!(kfdef["spec"]["version"], "v1.11.0");
        assert_eq!(kfdef["spec"]["repos"], json!([{"name": "manifests", "uri": "https://x/a.tar.gz"}]));
        for bad in ["resources: [https://github.com/x/y?ref=v1]\n", "resources: [../../etc]\n", "resources: [../a/../../b]\n", "resources: [local]\n", "resources: {a: b}\n", "{}\n"] {
            assert!(kfdef_of_example(bad, "v1", "u", "k", "k").is_err(), "{bad}");
        }
    }
}
