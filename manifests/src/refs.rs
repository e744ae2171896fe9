//! Confining kustomize to the repository.
//!
//! kfctl-era packages need kustomize's load restriction lifted (a kustomization may load files
//! outside its own folder). Lifted, a hostile package could read any file on the host — say
//! `/var/run/secrets/kubernetes.io/serviceaccount/token` through a `configMapGenerator` — into an
//! object the operator then applies. So before kustomize runs, every file and directory the
//! kustomizations reachable from the build root refer to must lie inside the allowed roots (the
//! repository, and the render's work directory) twice over: as kustomize names it — the path
//! cleaned as text, as Go's `filepath.Clean` does, whether or not it exists — and, when it exists,
//! resolved (symlinks included). Remote bases (URLs, `github.com/...`) and remote generator files
//! are refused too: kustomize must not fetch anything. The render fetches pinned remote bases
//! itself ([`remote_references`] finds them, [`crate::remote_bases`]) and checks a copy whose
//! kustomizations name the fetched copies instead. Plugin configurations (`generators`,
//! `transformers`, `validators`) must be builtin plugins that run nothing, and the files they
//! read are checked the same way.

use std::collections::BTreeSet;
use std::path::{Component, Path, PathBuf};

use serde::Deserialize;

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
    let Ok(Value::Mapping(doc)) = std::fs::read_to_string(file).map_err(drop).and_then(|text| crate::yaml::parse(&text).map_err(drop)) else {
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
pub(crate) fn fields<'a>(map: &'a Mapping, name: &str) -> Vec<(&'a str, &'a Value)> {
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

/// How a kustomization (or a plugin configuration) uses a path it names, which decides how the
/// path is checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Use {
    /// Read as a file, or built as a kustomization when it is a directory (`resources`, `bases`,
    /// `patches`, `crds`, …).
    Load,
    /// Read by a ConfigMap or Secret generator (`files`, `envs`, `env`): kustomize v5 fetches a
    /// URL there itself.
    Input,
    /// A `generators`, `transformers` or `validators` entry: plugin configuration written inline,
    /// a file of it, or a kustomization that yields it.
    Plugin,
}

/// The files a ConfigMap or Secret generator `g` reads (`files`, without their `key=`, `envs`,
/// `env`); `at` names `g` in errors.
fn generator_inputs(at: &str, g: &Mapping, out: &mut Vec<(Use, String)>) -> Result<(), String> {
    for (k, env) in fields(g, "env") {
        out.extend(string(&format!("{at}.{k}"), env)?.map(|p| (Use::Input, p)));
    }
    for (k, envs) in fields(g, "envs") {
        out.extend(strings(&format!("{at}.{k}"), envs)?.into_iter().map(|p| (Use::Input, p)));
    }
    for (k, files) in fields(g, "files") {
        for file in strings(&format!("{at}.{k}"), files)? {
            let path = file.split_once('=').map(|(_, p)| p.to_string()).unwrap_or(file);
            out.push((Use::Input, path));
        }
    }
    Ok(())
}

/// Paths one kustomization refers to, relative to its folder, with how each is used; an error
/// when a field kustomize reads paths from does not have the shape kustomize reads.
fn references(doc: &Value) -> Result<Vec<(Use, String)>, String> {
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
    for (f, how) in [
        ("resources", Use::Load),
        ("bases", Use::Load),
        ("components", Use::Load),
        ("crds", Use::Load),
        ("configurations", Use::Load),
        ("generators", Use::Plugin),
        ("transformers", Use::Plugin),
        ("validators", Use::Plugin),
    ] {
        for (key, v) in fields(doc, f) {
            out.extend(strings(key, v)?.into_iter().map(|r| (how, r)));
        }
    }
    // Inline strategic-merge patches are YAML text, not paths.
    for (key, v) in fields(doc, "patchesStrategicMerge") {
        out.extend(strings(key, v)?.into_iter().filter(|p| !p.contains('\n')).map(|p| (Use::Load, p)));
    }
    for f in ["patchesJson6902", "patches", "replacements"] {
        for (key, v) in fields(doc, f) {
            for item in mappings(key, v)? {
                for (k, path) in fields(item, "path") {
                    out.extend(string(&format!("{key}[].{k}"), path)?.map(|p| (Use::Load, p)));
                }
            }
        }
    }
    for f in ["configMapGenerator", "secretGenerator"] {
        for (key, v) in fields(doc, f) {
            for g in mappings(key, v)? {
                generator_inputs(&format!("{key}[]"), g, &mut out)?;
            }
        }
    }
    for (key, v) in fields(doc, "openapi") {
        match v {
            Value::Null => {}
            Value::Mapping(m) => {
                for (k, path) in fields(m, "path") {
                    out.extend(string(&format!("{key}.{k}"), path)?.map(|p| (Use::Load, p)));
                }
            }
            other => return Err(shape(key, "a mapping", other)),
        }
    }
    Ok(out)
}

/// The builtin plugins a plugin configuration may name (`apiVersion: builtin`): none runs a
/// program or fetches anything, and the files they read are checked.
const BUILTIN_PLUGINS: &[&str] = &[
    "ConfigMapGenerator",
    "SecretGenerator",
    "PatchTransformer",
    "PatchStrategicMergeTransformer",
    "PatchJson6902Transformer",
    "ImageTagTransformer",
    "LabelTransformer",
    "AnnotationsTransformer",
    "NamespaceTransformer",
    "PrefixSuffixTransformer",
    "PrefixTransformer",
    "SuffixTransformer",
    "ReplicaCountTransformer",
    "ReplacementTransformer",
    "HashTransformer",
    "ValueAddTransformer",
    "LegacyOrderTransformer",
    "SortOrderTransformer",
];

/// Builtin plugins that are refused all the same, and why.
const REFUSED_BUILTINS: &[(&str, &str)] = &[
    ("HelmChartInflationGenerator", "it runs helm"),
    ("IAMPolicyGenerator", "it ties service accounts to cloud IAM identities"),
];

/// The paths one builtin plugin configuration `doc` refers to, relative to the folder of the
/// kustomization that lists it; an error when it is not a builtin plugin allowed here, or when a
/// field it reads paths from does not have the shape kustomize reads.
fn plugin_references(doc: &Mapping) -> Result<Vec<(Use, String)>, String> {
    let allowed = || format!("allowed: apiVersion builtin with kind {}", BUILTIN_PLUGINS.join(", "));
    // KRM functions (containers, executables) are declared by an annotation.
    for (_, metadata) in fields(doc, "metadata") {
        let Value::Mapping(metadata) = metadata else { continue };
        for (_, annotations) in fields(metadata, "annotations") {
            let Value::Mapping(annotations) = annotations else { continue };
            if let Some(key) = annotations.keys().filter_map(Value::as_str).find(|k| k.ends_with("/function")) {
                return Err(format!(
                    "a plugin configuration annotated {key} runs a KRM function, which is not allowed; {}",
                    allowed()
                ));
            }
        }
    }
    fn text<'a>(doc: &'a Mapping, field: &str) -> Vec<Option<&'a str>> {
        fields(doc, field).into_iter().map(|(_, v)| v.as_str()).collect()
    }
    let (api_versions, kinds) = (text(doc, "apiVersion"), text(doc, "kind"));
    let plugin = match kinds.as_slice() {
        [Some(kind)] => *kind,
        [] => return Err(format!("a plugin configuration without a kind is not allowed; {}", allowed())),
        _ => return Err(format!("a plugin configuration needs exactly one kind, as a string; {}", allowed())),
    };
    if let Some((_, why)) = REFUSED_BUILTINS.iter().find(|(k, _)| *k == plugin) {
        return Err(format!("plugin kind {plugin} is not allowed: {why}; {}", allowed()));
    }
    if api_versions != [Some("builtin")] || !BUILTIN_PLUGINS.contains(&plugin) {
        let api_version = match api_versions.as_slice() {
            [Some(v)] => v.to_string(),
            _ => "missing or not one string".into(),
        };
        return Err(format!(
            "plugin kind {plugin} (apiVersion {api_version}) is not a builtin plugin allowed here; {}",
            allowed()
        ));
    }
    let mut out = Vec::new();
    match plugin {
        "ConfigMapGenerator" | "SecretGenerator" => generator_inputs(plugin, doc, &mut out)?,
        "PatchTransformer" | "PatchStrategicMergeTransformer" | "PatchJson6902Transformer" => {
            for (k, path) in fields(doc, "path") {
                out.extend(string(&format!("{plugin}.{k}"), path)?.map(|p| (Use::Load, p)));
            }
            // Inline patches are YAML text, not paths.
            for (k, paths) in fields(doc, "paths") {
                let paths = strings(&format!("{plugin}.{k}"), paths)?;
                out.extend(paths.into_iter().filter(|p| !p.contains('\n')).map(|p| (Use::Load, p)));
            }
        }
        "ReplacementTransformer" => {
            for (key, v) in fields(doc, "replacements") {
                for item in mappings(&format!("{plugin}.{key}"), v)? {
                    for (k, path) in fields(item, "path") {
                        out.extend(string(&format!("{plugin}.{key}[].{k}"), path)?.map(|p| (Use::Load, p)));
                    }
                }
            }
        }
        _ => {}
    }
    Ok(out)
}

/// Every document of a plugin configuration text (an inline entry, or a file of them), merge keys
/// applied; an error when kustomize would read it differently or it is not YAML.
fn plugin_documents(text: &str) -> Result<Vec<Value>, String> {
    if let Some(why) = unsupported_yaml(text) {
        return Err(why);
    }
    let mut docs = Vec::new();
    for doc in serde_yaml_ng::Deserializer::from_str(text) {
        let mut doc = Value::deserialize(doc)
            .map_err(|e| format!("the plugin configuration is not valid YAML: {e}"))?;
        doc.apply_merge()
            .map_err(|e| format!("the plugin configuration is not valid YAML: {e}"))?;
        docs.push(doc);
    }
    Ok(docs)
}

/// Whether kustomize v5 would read `generators`/`transformers`/`validators` entry `entry` as
/// plugin configuration written inline (it does when the text parses as objects) rather than as a
/// path. Read both ways when in doubt: kustomize v3.1 reads every entry as a path.
fn is_inline(entry: &str) -> bool {
    entry.contains('\n')
        || serde_yaml_ng::Deserializer::from_str(entry)
            .map(Value::deserialize)
            .take(64)
            .any(|doc| matches!(doc, Ok(Value::Mapping(_) | Value::Sequence(_) | Value::Tagged(_))))
}

/// `path` cleaned as Go's `filepath.Clean` cleans it, which is how kustomize names the files it
/// reads: `.` and empty components dropped, `..` removing the component before it as text
/// (symlinks are not followed), `..` at the root dropped.
fn clean(path: &Path) -> PathBuf {
    let mut parts: Vec<Component> = Vec::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => match parts.last() {
                Some(Component::Normal(_)) => {
                    parts.pop();
                }
                Some(Component::RootDir | Component::Prefix(_)) => {}
                _ => parts.push(c),
            },
            c => parts.push(c),
        }
    }
    if parts.is_empty() {
        return PathBuf::from(".");
    }
    parts.iter().collect()
}

fn inside(path: &Path, roots: &[PathBuf]) -> bool {
    roots.iter().any(|root| path.starts_with(root))
}

/// Checks path `r`, named in `file` and relative to canonical `dir`, used as `how`: refused when
/// it is remote, when kustomize's name for it (the joined path cleaned as text) leaves the roots
/// — whether or not it exists — or when it exists and resolves (symlinks followed) outside them.
/// Returns the resolved path when it exists.
fn confine(file: &Path, dir: &Path, roots: &[PathBuf], how: Use, r: &str) -> Result<Option<PathBuf>, Violation> {
    let refused = |why: String| Err((file.to_path_buf(), r.to_string(), why));
    if how == Use::Input && r.contains("://") {
        return refused("kustomize would fetch it itself; remote files are not allowed".into());
    }
    if is_remote(r) {
        return refused("remote references are not fetched; vendor them into the repository".into());
    }
    // An absolute reference replaces `dir`, as in kustomize.
    let named = clean(&dir.join(r));
    if !inside(&named, roots) {
        return refused(format!(
            "leaves the repository (kustomize reads it as {}, outside the repository)",
            named.display()
        ));
    }
    // Missing files are kustomize's to report; only what exists can leak through a symlink.
    let Ok(resolved) = std::fs::canonicalize(&named) else {
        return Ok(None);
    };
    if !inside(&resolved, roots) {
        return refused(format!("resolves to {}, outside the repository", resolved.display()));
    }
    Ok(Some(resolved))
}

/// Checks the plugin configurations in `text` — inline entry `entry` of kustomization `file`, or
/// file `file` itself (`entry` empty) — whose paths are relative to `dir`, the folder of the
/// kustomization that lists them.
fn check_plugin_configs(file: &Path, entry: &str, dir: &Path, roots: &[PathBuf], text: &str) -> Result<(), Violation> {
    let refused = |why: String| (file.to_path_buf(), entry.to_string(), why);
    for doc in plugin_documents(text).map_err(refused)? {
        let doc = match doc {
            Value::Null => continue,
            Value::Mapping(m) => m,
            other => {
                return Err(refused(format!(
                    "expected a mapping of plugin configuration fields, found {}",
                    kind(&other)
                )));
            }
        };
        for (how, r) in plugin_references(&doc).map_err(refused)? {
            confine(file, dir, roots, how, &r)?;
        }
    }
    Ok(())
}

/// Checks a kustomization that a `generators`/`transformers`/`validators` entry of the
/// kustomization in `owner` names: kustomize builds it and runs what it yields as plugin
/// configurations, reading their paths relative to `owner`. It may only list files of them
/// (`resources`, `bases`): anything that changes what it yields is refused.
fn check_plugin_kustomization(
    dir: &Path,
    owner: &Path,
    roots: &[PathBuf],
    seen: &mut BTreeSet<PathBuf>,
) -> Result<(), Violation> {
    if !seen.insert(dir.to_path_buf()) {
        return Ok(());
    }
    // None: kustomize reports it.
    let Some(file) = kustomization_file(dir) else { return Ok(()) };
    let refused = |why: String| (file.clone(), String::new(), why);
    let doc = match load(&file).map_err(refused)? {
        Value::Null => return Ok(()),
        Value::Mapping(m) => m,
        other => {
            return Err(refused(format!(
                "expected a mapping of kustomization fields, found {}",
                kind(&other)
            )));
        }
    };
    let listed: BTreeSet<String> = ["apiVersion", "kind", "resources", "bases"].iter().map(|f| fold(f)).collect();
    if let Some(key) = doc.keys().find(|k| k.as_str().is_none_or(|k| !listed.contains(&fold(k)))) {
        return Err(refused(format!(
            "it is built into plugin configurations (listed under generators, transformers or \
             validators), so it may only list their files under resources; found {}",
            key.as_str().map_or_else(|| "a key that is not a string".to_string(), |k| format!("field {k:?}"))
        )));
    }
    for f in ["resources", "bases"] {
        for (key, v) in fields(&doc, f) {
            for r in strings(key, v).map_err(refused)? {
                let Some(resolved) = confine(&file, dir, roots, Use::Load, &r)? else { continue };
                if resolved.is_dir() {
                    check_plugin_kustomization(&resolved, owner, roots, seen)?;
                } else {
                    let text = std::fs::read_to_string(&resolved)
                        .map_err(|e| (resolved.clone(), String::new(), format!("it cannot be read: {e}")))?;
                    check_plugin_configs(&resolved, "", owner, roots, &text)?;
                }
            }
        }
    }
    Ok(())
}

/// Checks `generators`/`transformers`/`validators` entry `entry` of kustomization `file` in
/// canonical `dir`; a kustomization it names is queued for the walk.
fn check_plugin_entry(
    file: &Path,
    dir: &Path,
    roots: &[PathBuf],
    entry: &str,
    queue: &mut Vec<PathBuf>,
) -> Result<(), Violation> {
    if is_inline(entry) {
        check_plugin_configs(file, entry, dir, roots, entry)?;
        if entry.contains('\n') {
            return Ok(());
        }
    }
    let Some(resolved) = confine(file, dir, roots, Use::Load, entry)? else {
        return Ok(());
    };
    if resolved.is_dir() {
        check_plugin_kustomization(&resolved, dir, roots, &mut BTreeSet::new())?;
        queue.push(resolved);
    } else {
        let text = std::fs::read_to_string(&resolved)
            .map_err(|e| (resolved.clone(), String::new(), format!("it cannot be read: {e}")))?;
        check_plugin_configs(&resolved, "", dir, roots, &text)?;
    }
    Ok(())
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
pub(crate) fn load(file: &Path) -> Result<Value, String> {
    let text = std::fs::read_to_string(file).map_err(|e| format!("it cannot be read: {e}"))?;
    if let Some(why) = unsupported_yaml(&text) {
        return Err(why);
    }
    // A key given twice keeps its last value, as kustomize v3 reads it (v5 refuses the file itself).
    let mut doc: Value = crate::yaml::parse(&text).map_err(|e| format!("it is not valid YAML: {e}"))?;
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
    walk(start, roots, None)
}

/// The remote bases (`resources`, `bases`, `components` naming a URL or `github.com/…`) the
/// kustomizations reachable from `start` name, with the file naming each, every other reference
/// checked as [`check`] checks it. A remote generator input is refused all the same.
pub fn remote_references(start: &Path, roots: &[PathBuf]) -> Result<Vec<(PathBuf, String)>, Violation> {
    let mut remote = Vec::new();
    walk(start, roots, Some(&mut remote))?;
    Ok(remote)
}

fn walk(start: &Path, roots: &[PathBuf], mut remote: Option<&mut Vec<(PathBuf, String)>>) -> Result<Option<NewerFeature>, Violation> {
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
        for (how, r) in refs {
            if how == Use::Plugin {
                check_plugin_entry(&file, &dir, roots, &r, &mut queue)?;
                continue;
            }
            if let Some(remote) = remote.as_deref_mut()
                && how != Use::Input
                && is_remote(&r)
            {
                remote.push((file.clone(), r));
                continue;
            }
            if let Some(resolved) = confine(&file, &dir, roots, how, &r)?
                && resolved.is_dir()
            {
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
            references(&doc).unwrap().into_iter().map(|(_, r)| r).collect::<Vec<_>>(),
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
    fn a_key_given_twice_is_checked_by_its_last_value_as_kustomize_v3_uses_it() {
        assert_eq!(check_one(b"commonLabels: {a: b}\nresources: [cm.yaml]\ncommonLabels: {a: c}\n"), Ok(()), "kfctl's jupyter-web-app base_v3");
        let (_, reference, why) = check_one(b"resources: [cm.yaml]\nresources: [../secret.yaml]\n").unwrap_err();
        assert_eq!((reference.as_str(), why.contains("outside")), ("../secret.yaml", true), "{why}");
        assert_eq!(check_one(b"resources: [../secret.yaml]\nresources: [cm.yaml]\n"), Ok(()), "the first value is not what kustomize uses");
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

    /// A repository of `files` (path, text) whose parent folder also holds `secret.txt`: what
    /// `check` says of folder `start` in it.
    fn check_repo(files: &[(&str, &str)], start: &str) -> Result<(), Violation> {
        let tmp = tempfile::tempdir().unwrap();
        let repo = tmp.path().join("repo");
        std::fs::create_dir_all(repo.join(start)).unwrap();
        for (path, text) in files {
            let path = repo.join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
        std::fs::write(tmp.path().join("secret.txt"), "s3cr3t").unwrap();
        let roots = [std::fs::canonicalize(&repo).unwrap()];
        check(&repo.join(start), &roots).map(|_| ())
    }

    #[test]
    fn paths_are_cleaned_as_go_cleans_them() {
        for (path, cleaned) in [
            ("/a/b/../c", "/a/c"),
            ("/a/x/../../../../etc/kubeconfig", "/etc/kubeconfig"),
            ("/../x", "/x"),
            ("/a/./b//c/", "/a/b/c"),
            ("/a/b/..", "/a"),
            ("a/../../b", "../b"),
            ("a/..", "."),
        ] {
            assert_eq!(clean(Path::new(path)), Path::new(cleaned), "{path}");
        }
    }

    /// kustomize cleans `x/..` away as text, whether `x` exists or not, and reads the file the
    /// cleaned path names: `x/../../secret.txt` is the secret next to the repository.
    #[test]
    fn missing_paths_that_clean_to_outside_the_repository_are_refused() {
        let reference = "x/../../secret.txt";
        for text in [
            format!("configMapGenerator: [{{name: c, files: [{reference}]}}]\n"),
            format!("configMapGenerator: [{{name: c, files: [kc={reference}]}}]\n"),
            format!("secretGenerator: [{{name: s, envs: [{reference}]}}]\n"),
            format!("secretGenerator: [{{name: s, env: {reference}}}]\n"),
            format!("resources: [{reference}]\n"),
            format!("patches: [{{path: {reference}}}]\n"),
            format!("patchesStrategicMerge: [{reference}]\n"),
        ] {
            let (file, r, reason) =
                check_repo(&[("kustomization.yaml", &text)], "").unwrap_err();
            assert!(file.ends_with("repo/kustomization.yaml"), "{text}: {file:?}");
            assert_eq!(r, reference, "{text}");
            assert!(reason.starts_with("leaves the repository (kustomize reads it as "), "{text}: {reason}");
            assert!(reason.ends_with("/secret.txt, outside the repository)"), "{text}: {reason}");
        }
        // Whether or not the file exists.
        let (_, _, reason) = check_repo(
            &[("app/kustomization.yaml", "configMapGenerator: [{name: c, files: [kc=x/../../../../../../../../../../../../etc/kubeflow-test-missing/kubeconfig]}]\n")],
            "app",
        )
        .unwrap_err();
        assert_eq!(
            reason,
            "leaves the repository (kustomize reads it as /etc/kubeflow-test-missing/kubeconfig, outside the repository)"
        );
    }

    #[test]
    fn a_missing_absolute_path_outside_the_repository_is_refused() {
        for (text, read) in [
            ("configMapGenerator: [{name: c, files: [kc=/kubeflow-test-missing/kubeconfig]}]\n", "/kubeflow-test-missing/kubeconfig"),
            ("secretGenerator: [{name: s, envs: [/kubeflow-test-missing/e.env]}]\n", "/kubeflow-test-missing/e.env"),
            ("resources: [/kubeflow-test-missing/./base/../cm.yaml]\n", "/kubeflow-test-missing/cm.yaml"),
        ] {
            let (_, _, reason) = check_repo(&[("kustomization.yaml", text)], "").unwrap_err();
            assert!(reason.contains(&format!("leaves the repository (kustomize reads it as {read},")), "{text}: {reason}");
        }
    }

    /// kustomize reads `x/../leak` as `leak`: the path is resolved (symlinks followed) after it is
    /// cleaned, not before.
    #[test]
    fn symlinks_are_followed_after_the_path_is_cleaned() {
        let tmp = tempfile::tempdir().unwrap();
        let repo = tmp.path().join("repo");
        std::fs::create_dir_all(repo.join("app")).unwrap();
        std::fs::create_dir_all(repo.join("other/dir")).unwrap();
        std::fs::write(tmp.path().join("secret.txt"), "s3cr3t").unwrap();
        std::os::unix::fs::symlink(repo.join("other/dir"), repo.join("app/deep")).unwrap();
        std::os::unix::fs::symlink(tmp.path().join("secret.txt"), repo.join("app/leak")).unwrap();
        std::fs::write(
            repo.join("app/kustomization.yaml"),
            "configMapGenerator: [{name: c, files: [deep/../leak]}]\n",
        )
        .unwrap();
        let roots = [std::fs::canonicalize(&repo).unwrap()];
        let (_, reference, reason) = check(&repo.join("app"), &roots).unwrap_err();
        assert_eq!(reference, "deep/../leak");
        assert!(reason.starts_with("resolves to ") && reason.ends_with("/secret.txt, outside the repository"), "{reason}");
    }

    const LOOT: &str = "apiVersion: builtin\nkind: ConfigMapGenerator\nmetadata: {name: loot}\nfiles: [../../secret.txt]\n";

    /// Builtin plugin configurations, in a file or inline, read files relative to the
    /// kustomization that lists them; those are checked like the kustomization's own.
    #[test]
    fn builtin_plugin_configurations_are_checked() {
        let inline = format!("generators:\n- |\n{}", LOOT.lines().map(|l| format!("  {l}\n")).collect::<String>());
        let flow = "transformers: [\"{apiVersion: builtin, kind: PatchTransformer, metadata: {name: p}, path: ../../secret.txt}\"]\n";
        let cases: &[(&[(&str, &str)], &str, &str)] = &[
            (&[("app/kustomization.yaml", "generators: [gen.yaml]\n"), ("app/gen.yaml", LOOT)], "app/gen.yaml", "../../secret.txt"),
            (&[("app/kustomization.yaml", &inline)], "app/kustomization.yaml", "../../secret.txt"),
            (&[("app/kustomization.yaml", flow)], "app/kustomization.yaml", "../../secret.txt"),
            (
                &[
                    ("app/kustomization.yaml", "transformers: [plugins/t.yaml]\n"),
                    ("app/plugins/t.yaml", "apiVersion: builtin\nkind: LabelTransformer\nmetadata: {name: l}\nlabels: {a: b}\n---\napiVersion: builtin\nkind: PatchStrategicMergeTransformer\nmetadata: {name: p}\npaths: [../../secret.txt]\n"),
                ],
                "app/plugins/t.yaml",
                "../../secret.txt",
            ),
            (
                &[
                    ("app/kustomization.yaml", "validators: [v.yaml]\n"),
                    ("app/v.yaml", "apiVersion: builtin\nkind: ReplacementTransformer\nmetadata: {name: r}\nreplacements: [{path: ../../secret.txt}]\n"),
                ],
                "app/v.yaml",
                "../../secret.txt",
            ),
            (
                &[
                    ("app/kustomization.yaml", "generators: [gen.yaml]\n"),
                    ("app/gen.yaml", "apiVersion: builtin\nkind: SecretGenerator\nmetadata: {name: loot}\nENV: x/../../../secret.txt\n"),
                ],
                "app/gen.yaml",
                "x/../../../secret.txt",
            ),
            // A kustomization under generators yields plugin configurations, read relative to
            // the kustomization that lists it.
            (
                &[
                    ("app/kustomization.yaml", "generators: [gens]\n"),
                    ("app/gens/kustomization.yaml", "resources: [gen.yaml]\n"),
                    ("app/gens/gen.yaml", LOOT),
                ],
                "app/gens/gen.yaml",
                "../../secret.txt",
            ),
        ];
        for (files, refusing, read) in cases {
            let (file, reference, reason) = check_repo(files, "app").unwrap_err();
            assert!(file.ends_with(refusing), "{files:?}: {file:?}");
            assert_eq!(&reference, read, "{files:?}");
            assert!(reason.contains("outside the repository"), "{files:?}: {reason}");
        }
        // What changes the plugin configurations a kustomization yields is refused there.
        let (file, reference, reason) = check_repo(
            &[
                ("app/kustomization.yaml", "generators: [gens]\n"),
                ("app/gens/kustomization.yaml", "resources: [gen.yaml]\npatches: [{path: p.yaml}]\n"),
                ("app/gens/gen.yaml", "apiVersion: builtin\nkind: ConfigMapGenerator\nmetadata: {name: c}\nfiles: [f.txt]\n"),
            ],
            "app",
        )
        .unwrap_err();
        assert!(file.ends_with("app/gens/kustomization.yaml"), "{file:?}");
        assert_eq!(reference, "");
        assert!(reason.contains("may only list their files under resources; found field \"patches\""), "{reason}");
    }

    /// Only builtin plugins that run nothing: no exec or container functions, no Go plugins, no
    /// helm.
    #[test]
    fn plugins_other_than_the_allowed_builtins_are_refused() {
        for (config, named) in [
            ("apiVersion: someteam.example.com/v1\nkind: ChartInflator\nmetadata: {name: c}\n", "plugin kind ChartInflator (apiVersion someteam.example.com/v1) is not a builtin plugin allowed here"),
            ("apiVersion: builtin\nkind: HelmChartInflationGenerator\nmetadata: {name: h}\nname: x\nrepo: https://example.invalid\n", "plugin kind HelmChartInflationGenerator is not allowed: it runs helm"),
            ("apiVersion: builtin\nkind: IAMPolicyGenerator\nmetadata: {name: i}\n", "plugin kind IAMPolicyGenerator is not allowed"),
            ("apiVersion: v1\nkind: ConfigMapGenerator\nmetadata: {name: c}\n", "plugin kind ConfigMapGenerator (apiVersion v1) is not a builtin plugin allowed here"),
            ("apiVersion: builtin\nkind: LabelTransformer\nmetadata: {name: l}\nKind: ExecTransformer\n", "a plugin configuration needs exactly one kind"),
            ("apiVersion: builtin\nmetadata: {name: l}\n", "a plugin configuration without a kind"),
            (
                "apiVersion: example.com/v1\nkind: Fn\nmetadata:\n  name: f\n  annotations:\n    config.kubernetes.io/function: |\n      exec: {path: /bin/sh}\n",
                "a plugin configuration annotated config.kubernetes.io/function runs a KRM function",
            ),
            ("- apiVersion: builtin\n  kind: LabelTransformer\n", "expected a mapping of plugin configuration fields, found a list"),
        ] {
            for field in ["generators", "transformers", "validators"] {
                // In a file of its own.
                let kustomization = format!("{field}: [plugin.yaml]\n");
                let (file, reference, reason) =
                    check_repo(&[("kustomization.yaml", &kustomization), ("plugin.yaml", config)], "").unwrap_err();
                assert!(file.ends_with("plugin.yaml"), "{config}: {file:?}");
                assert_eq!(reference, "");
                assert!(reason.starts_with(named), "{config}: {reason}");
                if !named.starts_with("expected") {
                    assert!(reason.contains("allowed: apiVersion builtin with kind ConfigMapGenerator, SecretGenerator, "), "{reason}");
                }
                // Inline.
                let kustomization = serde_yaml_ng::to_string(&std::collections::BTreeMap::from([(field, [config])])).unwrap();
                let (file, reference, reason) = check_repo(&[("kustomization.yaml", &kustomization)], "").unwrap_err();
                assert!(file.ends_with("kustomization.yaml"), "{kustomization}: {file:?}");
                assert_eq!(reference, config);
                assert!(reason.starts_with(named), "{kustomization}: {reason}");
            }
        }
    }

    /// kustomize v5 fetches an http(s) URL named as a generator's file itself.
    #[test]
    fn remote_generator_files_are_refused() {
        for (files, reference) in [
            (&[("kustomization.yaml", "configMapGenerator: [{name: c, files: [k=http://127.0.0.1:1/x]}]\n")][..], "http://127.0.0.1:1/x"),
            (&[("kustomization.yaml", "configMapGenerator: [{name: c, envs: [https://example.invalid/e.env]}]\n")], "https://example.invalid/e.env"),
            (&[("kustomization.yaml", "secretGenerator: [{name: s, env: HTTPS://example.invalid/e.env}]\n")], "HTTPS://example.invalid/e.env"),
            (
                &[
                    ("kustomization.yaml", "generators: [gen.yaml]\n"),
                    ("gen.yaml", "apiVersion: builtin\nkind: SecretGenerator\nmetadata: {name: s}\nfiles: [k=http://127.0.0.1:1/x]\n"),
                ],
                "http://127.0.0.1:1/x",
            ),
        ] {
            let (_, r, reason) = check_repo(files, "").unwrap_err();
            assert_eq!(r, reference);
            assert_eq!(reason, "kustomize would fetch it itself; remote files are not allowed", "{files:?}");
        }
        // Remote bases keep their reason.
        let (_, _, reason) = check_repo(&[("kustomization.yaml", "resources: [https://example.invalid/base]\n")], "").unwrap_err();
        assert_eq!(reason, "remote references are not fetched; vendor them into the repository");
    }

    #[test]
    fn references_that_stay_in_the_repository_pass() {
        let files: &[(&str, &str)] = &[
            ("common/kustomization.yaml", "resources: [cm.yaml]\n"),
            ("common/cm.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: common}\n"),
            (
                "app/kustomization.yaml",
                "bases: [../common]\n\
                 resources: [missing.yaml]\n\
                 configMapGenerator: [{name: c, files: [k=data/f.txt, ../common/cm.yaml, x/../data/f.txt], envs: [data/e.env]}]\n\
                 generators: [gen.yaml, gens]\n\
                 transformers:\n\
                 - patch.yaml\n\
                 - |\n  apiVersion: builtin\n  kind: LabelTransformer\n  metadata: {name: l}\n  labels: {a: b}\n  fieldSpecs: [{path: metadata/labels, create: true}]\n",
            ),
            ("app/data/f.txt", "f"),
            ("app/data/e.env", "A=b\n"),
            ("app/gen.yaml", "apiVersion: builtin\nkind: ConfigMapGenerator\nmetadata: {name: g}\nfiles: [data/f.txt]\n"),
            ("app/gens/kustomization.yaml", "resources: [gen.yaml]\n"),
            ("app/gens/gen.yaml", "apiVersion: builtin\nkind: SecretGenerator\nmetadata: {name: s}\nenvs: [data/e.env]\n"),
            (
                "app/patch.yaml",
                "apiVersion: builtin\nkind: PatchTransformer\nmetadata: {name: p}\npath: patches/p.yaml\ntarget: {kind: ConfigMap}\n",
            ),
            ("app/patches/p.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: common, labels: {p: x}}\n"),
        ];
        assert_eq!(check_repo(files, "app"), Ok(()));
    }
}
