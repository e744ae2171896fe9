//! kfctl's per-application rendering, as pure functions.
//!
//! For a package with `base/kustomization.yaml`, kfctl (v1.0.x, `GenerateKustomizationFile`)
//! wrote a new `kustomization.yaml` at the package root that:
//! - lists `base` under `bases`;
//! - for each selected overlay, in order: if the overlay has no `bases`, lists `overlays/<name>`
//!   under `bases`; otherwise lists the overlay's bases (re-rooted, deduplicated) and hoists the
//!   overlay's own content into the generated file with paths re-rooted to the package:
//!   `resources`, `namePrefix`/`nameSuffix` (first wins), `commonLabels`/`commonAnnotations`
//!   (later overlays override), `generatorOptions` (first wins), `images` and `vars` (first of a
//!   name wins), `crds`, `configMapGenerator`/`secretGenerator` (a `create` generator of a name
//!   already seen is dropped), `patchesStrategicMerge`, `patchesJson6902`, `configurations`;
//! - sets `namespace` to the `namespace` parameter, else the KfDef's namespace.
//!
//! **Namespaces, exactly as kfctl set them** (kubeflow/kfctl, `pkg/kfapp/kustomize/kustomize.go`,
//! v1.0–v1.2): `MergeKustomizations` takes a package without `base/` as it is, and for one with
//! `base/` sets the generated kustomization's `namespace` to the `namespace` parameter; then
//! `GenerateKustomizationFile` fills an empty `namespace` with the KfDef's
//! (`if kustomization.Namespace == "" { kustomization.Namespace = kfDef.Namespace }`). So every
//! namespaced object of a package kfctl built lands in that one namespace, whatever its own
//! manifest says. This rewrite is kfctl's alone: only a kfctl-era KfDef (`Era::Kfctl`, Kubeflow
//! 0.x–1.2) gets it; a KfDef of Kubeflow 1.3 or later is built as upstream builds it, every object
//! keeping its namespace (`crate::render`).
//!
//! Before that, in `base/params.env` and each selected overlay's `params.env`, every `name=value`
//! line whose name is a parameter is rewritten to the parameter's value; `namespace=` and
//! `appName=` lines without a parameter get the KfDef's namespace and name.
//!
//! Differences from kfctl, all where kfctl silently did something unusable: an overlay that does
//! not exist, or overlays on a package without `base/`, is an error (kfctl ignored or failed late);
//! a parameter that no selected `params.env` declares is an error (kfctl ignored it); `crds` and
//! generator `files` are re-rooted like every other path (kfctl copied them verbatim, or turned
//! `files` into an env source); JSON patches are kept one per entry (kfctl concatenated patches of
//! one target into a file — kustomize v3 applies them in the same order); `generateName` gets no
//! random suffix; `project=` lines are left as written (the KfDef has no project field).

use std::collections::{BTreeMap, BTreeSet};

use serde_yaml_ng::{Mapping, Value};

/// Names the `params.env` content declares (`name=value` lines; comments and blank lines skipped).
pub fn params_env_names(content: &str) -> Vec<String> {
    content
        .lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .filter_map(|l| l.split_once('=').map(|(n, _)| n.trim().to_string()))
        .filter(|n| !n.is_empty())
        .collect()
}

/// kfctl's `params.env` rewrite. `params` maps parameter names to values (empty values are
/// ignored, as kfctl did); `namespace` and `app_name` fill `namespace=` and `appName=` lines that
/// no parameter sets. Lines without `=` and comments are kept as written.
pub fn rewrite_params_env(
    content: &str,
    params: &BTreeMap<String, String>,
    namespace: &str,
    app_name: &str,
) -> String {
    let mut out = String::with_capacity(content.len());
    for line in content.lines() {
        let name = line.split('=').next().unwrap_or_default();
        let is_param_line = line.contains('=') && !line.trim_start().starts_with('#');
        match params.get(name).filter(|v| !v.is_empty()) {
            Some(value) if is_param_line => {
                out.push_str(name);
                out.push('=');
                out.push_str(value);
            }
            _ if is_param_line && name == "namespace" => {
                out.push_str("namespace=");
                out.push_str(namespace);
            }
            _ if is_param_line && name == "appName" && !app_name.is_empty() => {
                out.push_str("appName=");
                out.push_str(app_name);
            }
            _ => out.push_str(line),
        }
        out.push('\n');
    }
    out
}

/// Checks a parameter value can be written into `params.env` as one line.
pub fn check_param_value(value: &str) -> Result<(), String> {
    if value.contains(['\n', '\r', '\0']) {
        return Err("value must be a single line without NUL characters".into());
    }
    Ok(())
}

/// Lexically joins `rel` (a path inside the kustomization at `dir`) onto `dir` and cleans it, so it
/// can be written into a kustomization at the package root. `dir` is package-relative (`base`,
/// `overlays/istio`). Remote references (`scheme://`, `github.com/...`) are returned unchanged.
pub fn rebase(dir: &str, rel: &str) -> String {
    if rel.contains("://") || rel.starts_with('/') {
        return rel.to_string();
    }
    let mut parts: Vec<&str> = Vec::new();
    let mut ups = 0usize;
    for c in dir.split('/').chain(rel.split('/')) {
        match c {
            "" | "." => {}
            ".." => {
                if parts.pop().is_none() {
                    ups += 1;
                }
            }
            other => parts.push(other),
        }
    }
    let mut out: Vec<&str> = std::iter::repeat_n("..", ups).collect();
    out.extend(parts);
    if out.is_empty() {
        ".".to_string()
    } else {
        out.join("/")
    }
}

fn key(k: &str) -> Value {
    Value::String(k.to_string())
}

fn get_seq<'a>(m: &'a Mapping, k: &str) -> Vec<&'a Value> {
    m.get(k)
        .and_then(Value::as_sequence)
        .map(|s| s.iter().collect())
        .unwrap_or_default()
}

fn get_str<'a>(m: &'a Mapping, k: &str) -> Option<&'a str> {
    m.get(k).and_then(Value::as_str).filter(|s| !s.is_empty())
}

/// The merged kustomization under construction, with kfctl's "already seen" sets.
#[derive(Default)]
struct Merged {
    bases: Vec<String>,
    resources: Vec<String>,
    crds: Vec<String>,
    configurations: Vec<String>,
    psm: Vec<String>,
    json6902: Vec<Value>,
    images: Vec<Value>,
    vars: Vec<Value>,
    configmaps: Vec<Value>,
    secrets: Vec<Value>,
    common_labels: Mapping,
    common_annotations: Mapping,
    name_prefix: Option<String>,
    name_suffix: Option<String>,
    generator_options: Option<Value>,
    seen: BTreeMap<&'static str, BTreeSet<String>>,
}

impl Merged {
    fn add_once(list: &mut Vec<String>, seen: &mut BTreeSet<String>, item: String) -> bool {
        if seen.insert(item.clone()) {
            list.push(item);
            true
        } else {
            false
        }
    }

    fn seen(&mut self, k: &'static str) -> &mut BTreeSet<String> {
        self.seen.entry(k).or_default()
    }

    /// Re-roots a generator's `env`, `envs` and `files` (a `files` entry may be `key=path`).
    fn rebase_generator(dir: &str, g: &Mapping) -> Mapping {
        let mut g = g.clone();
        if let Some(env) = get_str(&g, "env").map(str::to_string) {
            g.insert(key("env"), Value::String(rebase(dir, &env)));
        }
        for field in ["envs", "files"] {
            if let Some(seq) = g.get(field).and_then(Value::as_sequence) {
                let rebased = seq
                    .iter()
                    .map(|v| match v.as_str() {
                        Some(s) => Value::String(match s.split_once('=') {
                            Some((k, p)) if field == "files" => format!("{k}={}", rebase(dir, p)),
                            _ => rebase(dir, s),
                        }),
                        None => v.clone(),
                    })
                    .collect();
                g.insert(key(field), Value::Sequence(rebased));
            }
        }
        g
    }

    /// kfctl's `MergeKustomization` of the kustomization at package-relative `dir`.
    fn merge(&mut self, dir: &str, child: &Mapping) {
        let bases = get_seq(child, "bases");
        if bases.is_empty() {
            let mut seen = std::mem::take(self.seen("bases"));
            Self::add_once(&mut self.bases, &mut seen, dir.to_string());
            self.seen.insert("bases", seen);
            return;
        }
        for b in bases.iter().filter_map(|b| b.as_str()) {
            let p = rebase(dir, b);
            let mut seen = std::mem::take(self.seen("bases"));
            if !Self::add_once(&mut self.bases, &mut seen, p) {
                seen.insert(dir.to_string());
            }
            self.seen.insert("bases", seen);
        }
        if self.name_prefix.is_none() {
            self.name_prefix = get_str(child, "namePrefix").map(str::to_string);
        }
        if self.name_suffix.is_none() {
            self.name_suffix = get_str(child, "nameSuffix").map(str::to_string);
        }
        for (field, target) in [
            ("commonLabels", &mut self.common_labels),
            ("commonAnnotations", &mut self.common_annotations),
        ] {
            if let Some(m) = child.get(field).and_then(Value::as_mapping) {
                for (k, v) in m {
                    target.insert(k.clone(), v.clone());
                }
            }
        }
        if self.generator_options.is_none() {
            self.generator_options = child.get("generatorOptions").cloned();
        }
        for (field, list) in [
            ("resources", &mut self.resources),
            ("crds", &mut self.crds),
            ("configurations", &mut self.configurations),
            ("patchesStrategicMerge", &mut self.psm),
        ] {
            let seen = self.seen.entry(field).or_default();
            for r in get_seq(child, field).iter().filter_map(|r| r.as_str()) {
                // An inline patch (YAML text) is not a path.
                let item = if field == "patchesStrategicMerge" && r.contains('\n') {
                    r.to_string()
                } else {
                    rebase(dir, r)
                };
                Self::add_once(list, seen, item);
            }
        }
        for (field, list) in [("images", &mut self.images), ("vars", &mut self.vars)] {
            let seen = self.seen.entry(field).or_default();
            for v in get_seq(child, field) {
                let name = v
                    .get("name")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string();
                if seen.insert(name) {
                    list.push(v.clone());
                }
            }
        }
        {
            let seen = self.seen.entry("patchesJson6902").or_default();
            for p in get_seq(child, "patchesJson6902")
                .into_iter()
                .filter_map(Value::as_mapping)
            {
                let mut p = p.clone();
                let path = get_str(&p, "path").map(|s| rebase(dir, s));
                let target = p
                    .get("target")
                    .and_then(|t| t.get("name"))
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                let k = format!("{}-{target}", path.clone().unwrap_or_default());
                if let Some(path) = path {
                    p.insert(key("path"), Value::String(path));
                }
                if seen.insert(k) {
                    self.json6902.push(Value::Mapping(p));
                }
            }
        }
        for (field, list, seen_key) in [
            ("configMapGenerator", &mut self.configmaps, "cm"),
            ("secretGenerator", &mut self.secrets, "secret"),
        ] {
            let seen = self.seen.entry(seen_key).or_default();
            for g in get_seq(child, field)
                .into_iter()
                .filter_map(Value::as_mapping)
            {
                let name = get_str(g, "name").unwrap_or_default().to_string();
                let create = get_str(g, "behavior").is_none_or(|b| b == "create");
                let g = Self::rebase_generator(dir, g);
                // A second `create` of a name is dropped; merge/replace always apply.
                if !create || !seen.contains(&name) {
                    list.push(Value::Mapping(g));
                }
                seen.insert(name);
            }
        }
    }

    fn into_mapping(self, namespace: &str) -> Mapping {
        let mut m = Mapping::new();
        m.insert(key("apiVersion"), key("kustomize.config.k8s.io/v1beta1"));
        m.insert(key("kind"), key("Kustomization"));
        m.insert(key("namespace"), key(namespace));
        let strings = |v: Vec<String>| Value::Sequence(v.into_iter().map(Value::String).collect());
        if let Some(p) = self.name_prefix {
            m.insert(key("namePrefix"), Value::String(p));
        }
        if let Some(s) = self.name_suffix {
            m.insert(key("nameSuffix"), Value::String(s));
        }
        for (k, v) in [
            ("commonLabels", self.common_labels),
            ("commonAnnotations", self.common_annotations),
        ] {
            if !v.is_empty() {
                m.insert(key(k), Value::Mapping(v));
            }
        }
        if let Some(g) = self.generator_options {
            m.insert(key("generatorOptions"), g);
        }
        for (k, v) in [
            ("bases", self.bases),
            ("resources", self.resources),
            ("crds", self.crds),
            ("patchesStrategicMerge", self.psm),
            ("configurations", self.configurations),
        ] {
            if !v.is_empty() {
                m.insert(key(k), strings(v));
            }
        }
        for (k, v) in [
            ("images", self.images),
            ("vars", self.vars),
            ("configMapGenerator", self.configmaps),
            ("secretGenerator", self.secrets),
            ("patchesJson6902", self.json6902),
        ] {
            if !v.is_empty() {
                m.insert(key(k), Value::Sequence(v));
            }
        }
        m
    }
}

/// The kustomization kfctl generated at a package root from `base` and the selected overlays
/// (`(name, kustomization)` in the KfDef's order), in `namespace`.
pub fn merge_kustomizations(
    base: &Mapping,
    overlays: &[(String, Mapping)],
    namespace: &str,
) -> Mapping {
    let mut merged = Merged::default();
    merged.merge("base", base);
    for (name, overlay) in overlays {
        merged.merge(&format!("overlays/{name}"), overlay);
    }
    merged.into_mapping(namespace)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn yaml(s: &str) -> Mapping {
        serde_yaml_ng::from_str(s).unwrap()
    }

    #[test]
    fn params_env_lines_are_rewritten_like_kfctl() {
        let content = "# comment=kept\nuserid-header=\nnamespace=kubeflow\nappName=x\nclusterDomain=cluster.local\nempty=\nnoequals\n";
        let params = BTreeMap::from([
            ("userid-header".to_string(), "kubeflow-userid".to_string()),
            ("empty".to_string(), String::new()),
        ]);
        assert_eq!(
            rewrite_params_env(content, &params, "team-a", "my-kf"),
            "# comment=kept\nuserid-header=kubeflow-userid\nnamespace=team-a\nappName=my-kf\nclusterDomain=cluster.local\nempty=\nnoequals\n"
        );
        let with_ns = BTreeMap::from([("namespace".to_string(), "istio-system".to_string())]);
        assert_eq!(
            rewrite_params_env("namespace=kubeflow\n", &with_ns, "team-a", ""),
            "namespace=istio-system\n"
        );
        assert_eq!(
            params_env_names(content),
            [
                "userid-header",
                "namespace",
                "appName",
                "clusterDomain",
                "empty"
            ]
        );
    }

    #[test]
    fn multi_line_values_are_refused() {
        assert!(check_param_value("a\nevil=1").is_err());
        assert!(check_param_value("plain value=with equals").is_ok());
    }

    #[test]
    fn rebase_cleans_and_keeps_escapes() {
        assert_eq!(rebase("overlays/istio", "../../base"), "base");
        assert_eq!(
            rebase("overlays/istio", "vs.yaml"),
            "overlays/istio/vs.yaml"
        );
        assert_eq!(rebase("base", "../../common/x.yaml"), "../common/x.yaml");
        assert_eq!(rebase("base", "./params.env"), "base/params.env");
        assert_eq!(
            rebase("base", "https://example.org/x"),
            "https://example.org/x"
        );
    }

    #[test]
    fn overlays_with_bases_are_hoisted_and_overlays_without_bases_become_bases() {
        let base = yaml(
            "resources: [deployment.yaml]\nconfigMapGenerator:\n- name: parameters\n  env: params.env\n",
        );
        let application = yaml(
            "bases: [../../base]\nresources: [application.yaml]\ncommonLabels: {app.kubernetes.io/name: web}\n\
             configMapGenerator:\n- name: parameters\n  behavior: merge\n  env: params.env\n- name: parameters\n  envs: [more.env]\n\
             patchesJson6902:\n- target: {group: apps, version: v1, kind: Deployment, name: web}\n  path: patch.yaml\n\
             vars:\n- name: ns\n  objref: {kind: Service, name: web, apiVersion: v1}\n",
        );
        let istio = yaml("resources: [virtual-service.yaml]\nnamespace: ignored\n");
        let merged = merge_kustomizations(
            &base,
            &[("application".into(), application), ("istio".into(), istio)],
            "team-a",
        );
        let expected = yaml(
            "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nnamespace: team-a\n\
             commonLabels: {app.kubernetes.io/name: web}\n\
             bases: [base, overlays/istio]\n\
             resources: [overlays/application/application.yaml]\n\
             vars:\n- name: ns\n  objref: {kind: Service, name: web, apiVersion: v1}\n\
             configMapGenerator:\n- name: parameters\n  behavior: merge\n  env: overlays/application/params.env\n\
             patchesJson6902:\n- target: {group: apps, version: v1, kind: Deployment, name: web}\n  path: overlays/application/patch.yaml\n",
        );
        assert_eq!(merged, expected);
    }
}
