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

use serde_yaml_ng::{Mapping, Value};

/// The kustomization file in `dir`, if any (kustomize accepts these three names).
pub fn kustomization_file(dir: &Path) -> Option<PathBuf> {
    ["kustomization.yaml", "kustomization.yml", "Kustomization"]
        .iter()
        .map(|n| dir.join(n))
        .find(|p| p.is_file())
}

/// Whether the kustomization in `dir` is a `kind: Component`: kustomize builds one only as part
/// of a Kustomization that lists it under `components`.
pub fn is_component(dir: &Path) -> bool {
    let Some(file) = kustomization_file(dir) else { return false };
    let Ok(Value::Mapping(doc)) = std::fs::read_to_string(file).map_err(drop).and_then(|text| serde_yaml_ng::from_str(&text).map_err(drop)) else {
        return false;
    };
    fields(&doc, "kind").first().is_some_and(|(_, kind)| kind.as_str() == Some("Component"))
}

/// A reference that is not allowed: (kustomization file, reference, why).
pub type Violation = (PathBuf, String, String);

/// Something a kustomization uses that kustomize v3.1.0 does not have: (kustomization file, what).
pub type NewerFeature = (PathBuf, String);

/// The top-level kustomization fields kustomize v3.1.0 knows (`pkg/types/kustomization.go`); it
/// refuses any other (`DisallowUnknownFields` in `pkg/target/kusttarget.go`).
const V3_FIELDS: &[&str] = &[
    "apiVersion",
    "kind",
    "namePrefix",
    "nameSuffix",
    "namespace",
    "commonLabels",
    "commonAnnotations",
    "patchesStrategicMerge",
    "patchesJson6902",
    "patches",
    "images",
    "replicas",
    "vars",
    "resources",
    "crds",
    "bases",
    "configMapGenerator",
    "secretGenerator",
    "generatorOptions",
    "configurations",
    "generators",
    "transformers",
    "inventory",
];

/// The first thing in a kustomization that kustomize v3.1.0 cannot build: a top-level field it
/// does not know (`components`, `labels`, `replacements`, `sortOptions`, …) or a Component.
fn newer_feature(doc: &Value) -> Option<String> {
    let Value::Mapping(doc) = doc else { return None };
    if let Some((key, kind)) = fields(doc, "kind").first()
        && kind.as_str() == Some("Component")
    {
        return Some(format!("{key}: Component"));
    }
    let known: BTreeSet<String> = V3_FIELDS.iter().map(|f| fold(f)).collect();
    doc.keys().filter_map(Value::as_str).find(|key| !known.contains(&fold(key))).map(|key| format!("field {key:?}"))
}

fn is_remote(r: &str) -> bool {
    r.contains("://")
        || r.starts_with("github.com/")
        || r.starts_with("git@")
        || r.starts_with("git::")
        || r.contains("?ref=")
}

/// How Go's `encoding/json` compares a key with a field name — kustomize decodes a kustomization
/// as YAML turned into JSON, so `Resources:` and `reſources:` are `resources` to it: ASCII case
/// and the two non-ASCII letters that fold to ASCII ones (ſ to s, the Kelvin sign to k).
fn fold(key: &str) -> String {
    key.chars()
        .map(|c| match c {
            'ſ' => 's',
            '\u{212A}' => 'k',
            c => c.to_ascii_lowercase(),
        })
        .collect()
}

/// The values of `map` under keys kustomize reads as field `name`, with the key as written.
fn fields<'a>(map: &'a Mapping, name: &str) -> Vec<(&'a str, &'a Value)> {
    let name = fold(name);
    map.iter()
        .filter_map(|(k, v)| Some((k.as_str()?, v)))
        .filter(|(k, _)| fold(k) == name)
        .collect()
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Sequence(_) => "a list",
        Value::Mapping(_) => "a mapping",
        Value::Tagged(_) => "a tagged value",
    }
}

fn shape(field: &str, expected: &str, found: &Value) -> String {
    format!("{field}: expected {expected}, found {}", kind(found))
}

/// A list of strings (null: none).
fn strings(field: &str, v: &Value) -> Result<Vec<String>, String> {
    match v {
        Value::Null => Ok(Vec::new()),
        Value::Sequence(items) => items
            .iter()
            .map(|i| match i {
                Value::String(s) => Ok(s.clone()),
                other => Err(shape(field, "a list of strings", other)),
            })
            .collect(),
        other => Err(shape(field, "a list of strings", other)),
    }
}

/// A string (null: none).
fn string(field: &str, v: &Value) -> Result<Option<String>, String> {
    match v {
        Value::Null => Ok(None),
        Value::String(s) => Ok(Some(s.clone())),
        other => Err(shape(field, "a string", other)),
    }
}

/// A list of mappings (null: none).
fn mappings<'a>(field: &str, v: &'a Value) -> Result<Vec<&'a Mapping>, String> {
    match v {
        Value::Null => Ok(Vec::new()),
        Value::Sequence(items) => items
            .iter()
            .map(|i| match i {
                Value::Mapping(m) => Ok(m),
                other => Err(shape(field, "a list of mappings", other)),
            })
            .collect(),
        other => Err(shape(field, "a list of mappings", other)),
    }
}

/// Paths one kustomization refers to, relative to its folder; an error when a field kustomize
/// reads paths from does not have the shape kustomize reads.
fn references(doc: &Value) -> Result<Vec<String>, String> {
    let doc = match doc {
        Value::Null => return Ok(Vec::new()),
        Value::Mapping(m) => m,
        other => {
            return Err(format!(
                "expected a mapping of kustomization fields, found {}",
                kind(other)
            ));
        }
    };
    let mut out = Vec::new();
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
        for (key, v) in fields(doc, f) {
            out.extend(strings(key, v)?);
        }
    }
    // Inline strategic-merge patches are YAML text, not paths.
    for (key, v) in fields(doc, "patchesStrategicMerge") {
        out.extend(strings(key, v)?.into_iter().filter(|p| !p.contains('\n')));
    }
    for f in ["patchesJson6902", "patches", "replacements"] {
        for (key, v) in fields(doc, f) {
            for item in mappings(key, v)? {
                for (k, path) in fields(item, "path") {
                    out.extend(string(&format!("{key}[].{k}"), path)?);
                }
            }
        }
    }
    for f in ["configMapGenerator", "secretGenerator"] {
        for (key, v) in fields(doc, f) {
            for g in mappings(key, v)? {
                for (k, env) in fields(g, "env") {
                    out.extend(string(&format!("{key}[].{k}"), env)?);
                }
                for (k, envs) in fields(g, "envs") {
                    out.extend(strings(&format!("{key}[].{k}"), envs)?);
                }
                for (k, files) in fields(g, "files") {
                    for file in strings(&format!("{key}[].{k}"), files)? {
                        out.push(
                            file.split_once('=')
                                .map(|(_, p)| p.to_string())
                                .unwrap_or(file),
                        );
                    }
                }
            }
        }
    }
    for (key, v) in fields(doc, "openapi") {
        match v {
            Value::Null => {}
            Value::Mapping(m) => {
                for (k, path) in fields(m, "path") {
                    out.extend(string(&format!("{key}.{k}"), path)?);
                }
            }
            other => return Err(shape(key, "a mapping", other)),
        }
    }
    Ok(out)
}

/// Refuses YAML that kustomize's parser reads differently from this one: `!!binary` values
/// (kustomize's YAML library decodes them, so `!!binary L2V0Yy9wYXNzd2Q=` is `/etc/passwd` to it
/// while this parser keeps the base64 text) and `%TAG` directives (which can spell that tag
/// otherwise).
fn unsupported_yaml(text: &str) -> Option<String> {
    if text.lines().any(|l| l.starts_with("%TAG")) {
        return Some("YAML %TAG directives are not accepted in a kustomization".into());
    }
    let mut rest = text;
    while let Some(i) = rest.find('!') {
        let tag = &rest[i..];
        let end = if tag.starts_with("!<") {
            tag.find('>').map_or(tag.len(), |e| e + 1)
        } else {
            tag.find(|c: char| c.is_whitespace() || ",[]{}".contains(c))
                .unwrap_or(tag.len())
        };
        // Tags may be %-escaped (`!!bin%61ry`).
        let token = &tag[..end];
        let mut decoded = String::new();
        let mut chars = token.chars();
        while let Some(c) = chars.next() {
            let escaped = (c == '%')
                .then(|| chars.clone().take(2).collect::<String>())
                .and_then(|h| u8::from_str_radix(&h, 16).ok());
            match escaped {
                Some(b) => {
                    decoded.push(char::from(b));
                    chars.nth(1);
                }
                None => decoded.push(c),
            }
        }
        if (token.starts_with("!!") || token.starts_with("!<"))
            && decoded.to_ascii_lowercase().contains("binary")
        {
            return Some(format!(
                "YAML tag {token} is not accepted in a kustomization (its value would be read \
                 differently by kustomize than by this check)"
            ));
        }
        rest = &tag[1..];
    }
    None
}

/// Reads and parses one kustomization; what is wrong with it otherwise.
fn load(file: &Path) -> Result<Value, String> {
    let text = std::fs::read_to_string(file).map_err(|e| format!("it cannot be read: {e}"))?;
    if let Some(why) = unsupported_yaml(&text) {
        return Err(why);
    }
    let mut doc: Value =
        serde_yaml_ng::from_str(&text).map_err(|e| format!("it is not valid YAML: {e}"))?;
    // `<<: {resources: [...]}` is `resources` to kustomize too.
    doc.apply_merge()
        .map_err(|e| format!("it is not valid YAML: {e}"))?;
    Ok(doc)
}

/// Checks every kustomization reachable from `start` (a directory). `roots` must be canonical.
/// A kustomization that cannot be read or parsed, or whose reference fields do not have the
/// shape kustomize reads, is refused: what it refers to cannot be checked. Returns the first
/// feature kustomize v3.1.0 does not have, if any kustomization uses one.
pub fn check(start: &Path, roots: &[PathBuf]) -> Result<Option<NewerFeature>, Violation> {
    let mut newer = None;
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
        let refused = |why: String| (file.clone(), String::new(), why);
        let doc = load(&file).map_err(refused)?;
        if newer.is_none() {
            newer = newer_feature(&doc).map(|what| (file.clone(), what));
        }
        let refs = references(&doc).map_err(refused)?;
        for r in refs {
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
    Ok(newer)
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
            references(&doc).unwrap(),
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
        assert_eq!(check(&repo.join("app"), &roots), Ok(None));

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

    /// One kustomization in its own repository: what `check` says of it.
    fn check_one(text: &[u8]) -> Result<(), Violation> {
        let tmp = tempfile::tempdir().unwrap();
        let repo = tmp.path().join("repo");
        std::fs::create_dir_all(&repo).unwrap();
        std::fs::write(repo.join("kustomization.yaml"), text).unwrap();
        std::fs::write(tmp.path().join("secret.yaml"), "kind: Secret\n").unwrap();
        let roots = [std::fs::canonicalize(&repo).unwrap()];
        check(&repo, &roots).map(|_| ())
    }

    #[test]
    fn a_feature_kustomize_v3_1_does_not_have_is_reported_with_its_file() {
        let tmp = tempfile::tempdir().unwrap();
        let repo = tmp.path().join("repo");
        for dir in ["app", "base", "component"] {
            std::fs::create_dir_all(repo.join(dir)).unwrap();
        }
        let roots = [std::fs::canonicalize(&repo).unwrap()];
        let newer = |app: &str, base: &str| {
            std::fs::write(repo.join("app/kustomization.yaml"), app).unwrap();
            std::fs::write(repo.join("base/kustomization.yaml"), base).unwrap();
            check(&repo.join("app"), &roots).unwrap().map(|(file, what)| (file.strip_prefix(&roots[0]).unwrap().display().to_string(), what))
        };
        // kfctl-era fields, any letter case Go's JSON decoder matches.
        let kfctl_era = "bases: [../base]\nvars: []\ncommonLabels: {a: b}\nPatchesStrategicMerge: []\nconfigurations: []\npatches: []\n";
        assert_eq!(newer(kfctl_era, "resources: []\ngeneratorOptions: {disableNameSuffixHash: true}\n"), None);
        // Found in a base the application reaches.
        for field in ["labels", "replacements", "sortOptions", "components", "buildMetadata", "helmCharts"] {
            assert_eq!(newer(kfctl_era, &format!("{field}: []\n")), Some(("base/kustomization.yaml".into(), format!("field {field:?}"))), "{field}");
        }
        // A Component, and the first file of the walk wins.
        std::fs::write(repo.join("component/kustomization.yaml"), "apiVersion: kustomize.config.k8s.io/v1alpha1\nkind: Component\n").unwrap();
        assert_eq!(newer("resources: [../base]\ncomponents: [../component]\n", "sortOptions: {order: legacy}\n"), Some(("app/kustomization.yaml".into(), "field \"components\"".into())));
        std::fs::write(repo.join("app/kustomization.yaml"), "bases: [../component]\n").unwrap();
        assert_eq!(check(&repo.join("app"), &roots).unwrap().map(|(_, what)| what), Some("kind: Component".into()));
    }

    #[test]
    fn a_kustomization_that_cannot_be_parsed_is_refused() {
        assert_eq!(check_one(b"resources: [cm.yaml]\n"), Ok(()));
        assert_eq!(check_one(b""), Ok(()), "an empty kustomization");
        for (text, why) in [
            (
                &b"resources: [../secret.yaml\n"[..],
                "it is not valid YAML: ",
            ),
            (
                b"resources: [a]\nresources: [b]\n",
                "it is not valid YAML: duplicate entry",
            ),
            (
                b"resources: [a]\n---\nresources: [../secret.yaml]\n",
                "it is not valid YAML: ",
            ),
            (b"\xff\xfe r\x00", "it cannot be read: "),
            (
                b"- resources\n",
                "expected a mapping of kustomization fields, found a list",
            ),
            (
                b"resources: ../secret.yaml\n",
                "resources: expected a list of strings, found a string",
            ),
            (
                b"resources: [{path: ../secret.yaml}]\n",
                "resources: expected a list of strings, found a mapping",
            ),
            (
                b"resources: [!file ../secret.yaml]\n",
                "resources: expected a list of strings, found a tagged value",
            ),
            (
                b"configMapGenerator: [../secret.yaml]\n",
                "configMapGenerator: expected a list of mappings, found a string",
            ),
            (
                b"configMapGenerator: [{name: x, files: ../secret.yaml}]\n",
                "configMapGenerator[].files: expected a list of strings",
            ),
            (
                b"patches: [{path: [../secret.yaml]}]\n",
                "patches[].path: expected a string, found a list",
            ),
            (
                b"openapi: ../secret.yaml\n",
                "openapi: expected a mapping, found a string",
            ),
        ] {
            let (file, reference, reason) = check_one(text).unwrap_err();
            assert!(file.ends_with("kustomization.yaml"), "{file:?}");
            assert_eq!(reference, "", "{}", String::from_utf8_lossy(text));
            assert!(
                reason.starts_with(why),
                "{}: {reason}",
                String::from_utf8_lossy(text)
            );
        }
        // The file is named in the application's error.
        let error = crate::RenderError::ForbiddenReference {
            app: "web".into(),
            file: "/repo/app/kustomization.yaml".into(),
            reference: String::new(),
            reason: "it is not valid YAML: x".into(),
        };
        assert_eq!(
            error.to_string(),
            "application \"web\": /repo/app/kustomization.yaml is refused: it is not valid YAML: x"
        );
    }

    /// What kustomize v3.1.0 reads as a reference to `/tmp/outside-cm.yaml` (each tried against
    /// the real binary): field names in any case or with ſ, merge keys, `!!binary`.
    #[test]
    fn references_are_read_as_kustomize_reads_them() {
        for text in [
            "Resources: [../secret.yaml]\n",
            "RESOURCES: [../secret.yaml]\n",
            "reſources: [../secret.yaml]\n",
            "configMapGenerator: [{name: x, FILES: [../secret.yaml]}]\n",
            "<<: {resources: [../secret.yaml]}\n",
            "resources: []\n<<: [{bases: [../secret.yaml]}]\n",
        ] {
            let (_, reference, reason) = check_one(text.as_bytes()).unwrap_err();
            assert_eq!(reference, "../secret.yaml", "{text}");
            assert!(
                reason.contains("outside the repository"),
                "{text}: {reason}"
            );
        }
        // "../secret.yaml", base64-encoded.
        for text in [
            "resources:\n- !!binary Li4vc2VjcmV0LnlhbWw=\n",
            "resources:\n- !!bin%61ry Li4vc2VjcmV0LnlhbWw=\n",
            "resources:\n- !<tag:yaml.org,2002:binary> Li4vc2VjcmV0LnlhbWw=\n",
            "%TAG !e! tag:yaml.org,2002:\n---\nresources:\n- !e!binary Li4vc2VjcmV0LnlhbWw=\n",
        ] {
            let (_, reference, reason) = check_one(text.as_bytes()).unwrap_err();
            assert_eq!(reference, "", "{text}");
            assert!(
                reason.contains("not accepted in a kustomization"),
                "{text}: {reason}"
            );
        }
        assert_eq!(
            check_one(b"commonAnnotations: {note: \"hello!\"}\nresources: [!!str cm.yaml]\n"),
            Ok(())
        );
    }
}
