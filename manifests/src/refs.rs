//! Confining kustomize to the repository.
//!
//! kfctl-era packages need kustomize's load restriction lifted (a kustomization may load files
//! outside its own folder). Lifted, a hostile package could read any file on the host — say
//! `/var/run/secrets/kubernetes.io/serviceaccount/token` through a `configMapGenerator` — into an
//! object the operator then applies. So before kustomize runs, every file and directory the
//! kustomizations reachable from the build root refer to is resolved (symlinks included) and must
//! lie inside the allowed roots: the repository, and the render's work directory. Remote bases
//! (URLs, `github.com/...`) are refused too: a render must not fetch anything else.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde_yaml_ng::Value;

/// The kustomization file in `dir`, if any (kustomize accepts these three names).
pub fn kustomization_file(dir: &Path) -> Option<PathBuf> {
    ["kustomization.yaml", "kustomization.yml", "Kustomization"]
        .iter()
        .map(|n| dir.join(n))
        .find(|p| p.is_file())
}

/// A reference that is not allowed: (kustomization file, reference, why).
pub type Violation = (PathBuf, String, String);

fn is_remote(r: &str) -> bool {
    r.contains("://")
        || r.starts_with("github.com/")
        || r.starts_with("git@")
        || r.starts_with("git::")
        || r.contains("?ref=")
}

/// Paths one kustomization refers to, relative to its folder.
fn references(doc: &Value) -> Vec<String> {
    let mut out = Vec::new();
    let strs = |v: Option<&Value>| -> Vec<String> {
        v.and_then(Value::as_sequence)
            .map(|s| {
                s.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default()
    };
    for f in [
        "resources",
        "bases",
        "components",
        "crds",
        "configurations",
        "generators",
        "transformers",
        "validators",
    ] {
        out.extend(strs(doc.get(f)));
    }
    // Inline strategic-merge patches are YAML text, not paths.
    out.extend(
        strs(doc.get("patchesStrategicMerge"))
            .into_iter()
            .filter(|p| !p.contains('\n')),
    );
    for f in ["patchesJson6902", "patches"] {
        for p in doc
            .get(f)
            .and_then(Value::as_sequence)
            .into_iter()
            .flatten()
        {
            if let Some(path) = p.get("path").and_then(Value::as_str) {
                out.push(path.to_string());
            }
        }
    }
    for f in ["configMapGenerator", "secretGenerator"] {
        for g in doc
            .get(f)
            .and_then(Value::as_sequence)
            .into_iter()
            .flatten()
        {
            if let Some(env) = g.get("env").and_then(Value::as_str) {
                out.push(env.to_string());
            }
            out.extend(strs(g.get("envs")));
            for file in strs(g.get("files")) {
                out.push(
                    file.split_once('=')
                        .map(|(_, p)| p.to_string())
                        .unwrap_or(file),
                );
            }
        }
    }
    if let Some(p) = doc
        .get("openapi")
        .and_then(|o| o.get("path"))
        .and_then(Value::as_str)
    {
        out.push(p.to_string());
    }
    out
}

/// Checks every kustomization reachable from `start` (a directory). `roots` must be canonical.
pub fn check(start: &Path, roots: &[PathBuf]) -> Result<(), Violation> {
    let mut visited = BTreeSet::new();
    let mut queue = vec![start.to_path_buf()];
    while let Some(dir) = queue.pop() {
        let Ok(dir) = std::fs::canonicalize(&dir) else {
            continue;
        };
        if !visited.insert(dir.clone()) {
            continue;
        }
        let Some(file) = kustomization_file(&dir) else {
            continue;
        };
        // kustomize reports unreadable or malformed files itself.
        let Ok(text) = std::fs::read_to_string(&file) else {
            continue;
        };
        let Ok(doc) = serde_yaml_ng::from_str::<Value>(&text) else {
            continue;
        };
        for r in references(&doc) {
            if is_remote(&r) {
                return Err((
                    file,
                    r,
                    "remote references are not fetched; vendor them into the repository".into(),
                ));
            }
            let joined = dir.join(&r);
            // Missing files are kustomize's to report; only what exists can leak.
            let Ok(resolved) = std::fs::canonicalize(&joined) else {
                continue;
            };
            if !roots.iter().any(|root| resolved.starts_with(root)) {
                return Err((
                    file,
                    r,
                    format!("resolves to {}, outside the repository", resolved.display()),
                ));
            }
            if resolved.is_dir() {
                queue.push(resolved);
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_cover_kfctl_era_fields() {
        let doc: Value = serde_yaml_ng::from_str(
            "resources: [a.yaml]\nbases: [../base]\nconfigurations: [params.yaml]\npatchesStrategicMerge: [p.yaml, \"kind: X\\nmetadata: {}\\n\"]\n\
             patchesJson6902: [{path: j.yaml}]\nconfigMapGenerator: [{name: c, env: params.env, envs: [e.env], files: [k=f.txt, g.txt]}]\n\
             secretGenerator: [{name: s, files: [/etc/passwd]}]\n",
        )
        .unwrap();
        assert_eq!(
            references(&doc),
            [
                "a.yaml",
                "../base",
                "params.yaml",
                "p.yaml",
                "j.yaml",
                "params.env",
                "e.env",
                "f.txt",
                "g.txt",
                "/etc/passwd"
            ]
        );
    }

    #[test]
    fn files_outside_the_roots_are_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let repo = tmp.path().join("repo");
        std::fs::create_dir_all(repo.join("app")).unwrap();
        std::fs::create_dir_all(repo.join("common")).unwrap();
        std::fs::write(
            repo.join("common/kustomization.yaml"),
            "resources: [cm.yaml]\n",
        )
        .unwrap();
        std::fs::write(repo.join("common/cm.yaml"), "kind: ConfigMap\n").unwrap();
        std::fs::write(repo.join("app/kustomization.yaml"), "bases: [../common]\n").unwrap();
        std::fs::write(tmp.path().join("secret.txt"), "s3cr3t").unwrap();
        let roots = [std::fs::canonicalize(&repo).unwrap()];
        assert_eq!(check(&repo.join("app"), &roots), Ok(()));

        // Reached through a base, by a generator.
        std::fs::write(
            repo.join("common/kustomization.yaml"),
            "configMapGenerator: [{name: x, files: [../../secret.txt]}]\n",
        )
        .unwrap();
        let (file, reference, reason) = check(&repo.join("app"), &roots).unwrap_err();
        assert_eq!(file, roots[0].join("common/kustomization.yaml"));
        assert_eq!(reference, "../../secret.txt");
        assert!(reason.contains("outside the repository"), "{reason}");

        // Through a symlink inside the repository.
        std::os::unix::fs::symlink(tmp.path().join("secret.txt"), repo.join("common/link"))
            .unwrap();
        std::fs::write(
            repo.join("common/kustomization.yaml"),
            "resources: [link]\n",
        )
        .unwrap();
        assert_eq!(check(&repo.join("app"), &roots).unwrap_err().1, "link");

        std::fs::write(
            repo.join("app/kustomization.yaml"),
            "bases: [github.com/kubeflow/manifests/x?ref=v1.0]\n",
        )
        .unwrap();
        assert!(
            check(&repo.join("app"), &roots)
                .unwrap_err()
                .2
                .contains("remote references")
        );
    }
}
