//! Turning a version's manifest template into the desired object set (pure).
//!
//! Templates are multi-document YAML. A string scalar may reference parameters: `${name}` is
//! replaced by the parameter's value; a scalar that is exactly `${name|int}` or `${name|bool}`
//! becomes a number or boolean. An unknown parameter is a build error, never an empty string.
//! A document annotated `components.kubeflow.org/include-if: "${flag}"` is kept only when the flag
//! renders to `true` (the annotation itself is dropped).

use std::collections::BTreeMap;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde::Deserialize;
use serde_json::Value;

/// Annotation that makes a template document conditional.
pub const INCLUDE_IF_ANNOTATION: &str = "components.kubeflow.org/include-if";

/// Parameter values a template is rendered with.
pub type Params = BTreeMap<String, String>;

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum TemplateError {
    #[error("manifest is not valid YAML: {0}")]
    Yaml(String),
    #[error("manifest document {index} is not an object with apiVersion, kind and metadata.name")]
    NotAnObject { index: usize },
    #[error("manifest references unknown parameter {name:?}")]
    UnknownParameter { name: String },
    #[error("parameter {name:?} must be {expected}, got {value:?}")]
    BadValue { name: String, expected: &'static str, value: String },
    #[error("unterminated parameter reference in {0:?}")]
    Unterminated(String),
}

/// Parses `template` and substitutes `params` into every string scalar.
pub fn render(template: &str, params: &Params) -> Result<Vec<Value>, TemplateError> {
    let mut objects = Vec::new();
    for (index, doc) in serde_yaml_ng::Deserializer::from_str(template).enumerate() {
        let mut value = Value::deserialize(doc).map_err(|e| TemplateError::Yaml(e.to_string()))?;
        if value.is_null() {
            continue;
        }
        substitute(&mut value, params)?;
        if let Some(annotations) = value["metadata"]["annotations"].as_object_mut() {
            if let Some(flag) = annotations.remove(INCLUDE_IF_ANNOTATION) {
                if annotations.is_empty() {
                    value["metadata"].as_object_mut().unwrap().remove("annotations");
                }
                if flag != "true" {
                    continue;
                }
            }
        }
        let well_formed = value["apiVersion"].is_string() && value["kind"].is_string() && value["metadata"]["name"].is_string();
        if !well_formed {
            return Err(TemplateError::NotAnObject { index });
        }
        objects.push(value);
    }
    Ok(objects)
}

fn substitute(value: &mut Value, params: &Params) -> Result<(), TemplateError> {
    match value {
        Value::String(s) if s.contains("${") => *value = substitute_str(s, params)?,
        Value::Array(items) => items.iter_mut().try_for_each(|v| substitute(v, params))?,
        Value::Object(map) => {
            let old = std::mem::take(map);
            for (key, mut v) in old {
                substitute(&mut v, params)?;
                let key = if key.contains("${") {
                    match substitute_str(&key, params)? {
                        Value::String(k) => k,
                        other => other.to_string(),
                    }
                } else {
                    key
                };
                map.insert(key, v);
            }
        }
        _ => {}
    }
    Ok(())
}

fn lookup<'a>(params: &'a Params, name: &str) -> Result<&'a String, TemplateError> {
    params.get(name).ok_or_else(|| TemplateError::UnknownParameter { name: name.to_string() })
}

fn substitute_str(s: &str, params: &Params) -> Result<Value, TemplateError> {
    // A whole-scalar reference with a type keeps the type.
    if let Some(inner) = s.strip_prefix("${").and_then(|r| r.strip_suffix('}')) {
        if let Some((name, ty)) = inner.split_once('|') {
            let raw = lookup(params, name)?;
            let bad = |expected| TemplateError::BadValue { name: name.into(), expected, value: raw.clone() };
            return match ty {
                "int" => raw.parse::<i64>().map(Value::from).map_err(|_| bad("an integer")),
                "bool" => raw.parse::<bool>().map(Value::from).map_err(|_| bad("true or false")),
                _ => Err(TemplateError::UnknownParameter { name: inner.into() }),
            };
        }
    }
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(start) = rest.find("${") {
        // `$${x}` is a literal `${x}`, for manifests that carry another tool's placeholders.
        if start > 0 && rest.as_bytes()[start - 1] == b'$' {
            out.push_str(&rest[..start - 1]);
            let end = rest[start..].find('}').map_or(rest.len(), |e| start + e + 1);
            out.push_str(&rest[start..end]);
            rest = &rest[end..];
            continue;
        }
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let end = after.find('}').ok_or_else(|| TemplateError::Unterminated(s.to_string()))?;
        out.push_str(lookup(params, &after[..end])?);
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(Value::String(out))
}

pub use operator_runtime::content_hash;

/// Whether every field of `desired` has the same value in `live` (extra live fields, such as
/// defaults the API server filled in, are ignored). Lists must match element for element.
pub fn is_subset(desired: &Value, live: &Value) -> bool {
    match (desired, live) {
        (Value::Object(d), Value::Object(l)) => d.iter().all(|(k, v)| l.get(k).is_some_and(|lv| is_subset(v, lv))),
        (Value::Array(d), Value::Array(l)) => d.len() == l.len() && d.iter().zip(l).all(|(a, b)| is_subset(a, b)),
        (Value::Number(a), Value::Number(b)) => a.as_f64() == b.as_f64(),
        _ => desired == live,
    }
}

/// Path of the first field of `desired` whose value `live` does not have, e.g. `spec.replicas`.
pub fn first_difference(desired: &Value, live: &Value) -> Option<String> {
    match (desired, live) {
        (Value::Object(d), Value::Object(l)) => d.iter().find_map(|(k, v)| match l.get(k) {
            None => Some(k.clone()),
            Some(lv) => first_difference(v, lv).map(|rest| if rest.is_empty() { k.clone() } else { format!("{k}.{rest}") }),
        }),
        (Value::Array(d), Value::Array(l)) if d.len() == l.len() => {
            d.iter().zip(l).enumerate().find_map(|(i, (a, b))| first_difference(a, b).map(|rest| if rest.is_empty() { format!("[{i}]") } else { format!("[{i}].{rest}") }))
        }
        _ if is_subset(desired, live) => None,
        _ => Some(String::new()),
    }
}

/// Secrets are written with `stringData` in templates; the API server stores `data` (base64), so
/// the desired object carries `data` too and compares equal to what is stored.
pub fn normalize_secret(object: &mut Value) {
    if object["kind"] != "Secret" {
        return;
    }
    let Some(Value::Object(string_data)) = object.as_object_mut().and_then(|o| o.remove("stringData")) else { return };
    for (key, value) in string_data {
        let text = value.as_str().map_or_else(|| value.to_string(), str::to_string);
        object["data"][key] = Value::String(STANDARD.encode(text));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn params(pairs: &[(&str, &str)]) -> Params {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn render_substitutes_strings_and_typed_scalars() {
        let t = "apiVersion: v1\nkind: Service\nmetadata: {name: 'gw-${ns}'}\nspec:\n  ports: [{port: '${port|int}'}]\n  publishNotReadyAddresses: '${pub|bool}'\n---\n";
        let objects = render(t, &params(&[("ns", "kubeflow"), ("port", "8080"), ("pub", "true")])).unwrap();
        assert_eq!(objects.len(), 1);
        assert_eq!(objects[0]["metadata"]["name"], "gw-kubeflow");
        assert_eq!(objects[0]["spec"]["ports"][0]["port"], json!(8080));
        assert_eq!(objects[0]["spec"]["publishNotReadyAddresses"], json!(true));
    }

    #[test]
    fn render_substitutes_keys_and_keeps_escaped_references() {
        let t = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x, labels: {'${key}': ui}}\ndata: {t: 'lr=$${trialParameters.lr}, ns=${key}'}\n";
        let o = &render(t, &params(&[("key", "app")])).unwrap()[0];
        assert_eq!(o["metadata"]["labels"]["app"], "ui");
        assert_eq!(o["data"]["t"], "lr=${trialParameters.lr}, ns=app");
    }

    #[test]
    fn render_refuses_unknown_parameters_and_bad_types() {
        let t = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: '${missing}'}\n";
        assert_eq!(render(t, &Params::new()).unwrap_err(), TemplateError::UnknownParameter { name: "missing".into() });
        let t = "apiVersion: v1\nkind: Service\nmetadata: {name: x}\nspec: {ports: [{port: '${p|int}'}]}\n";
        assert!(matches!(render(t, &params(&[("p", "eighty")])).unwrap_err(), TemplateError::BadValue { .. }));
    }

    #[test]
    fn include_if_keeps_or_drops_a_document() {
        let t = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a, annotations: {components.kubeflow.org/include-if: '${db}'}}\n";
        assert!(render(t, &params(&[("db", "false")])).unwrap().is_empty());
        let kept = render(t, &params(&[("db", "true")])).unwrap();
        assert_eq!(kept.len(), 1);
        assert!(kept[0]["metadata"].get("annotations").is_none());
    }

    #[test]
    fn render_refuses_documents_without_identity() {
        assert_eq!(render("kind: ConfigMap\n", &Params::new()).unwrap_err(), TemplateError::NotAnObject { index: 0 });
    }

    #[test]
    fn subset_ignores_server_defaults_but_not_changed_values() {
        let desired = json!({"spec": {"replicas": 1, "template": {"spec": {"containers": [{"name": "a", "image": "x:1"}]}}}});
        let live = json!({"spec": {"replicas": 1, "revisionHistoryLimit": 10, "template": {"spec": {"containers": [{"name": "a", "image": "x:1", "imagePullPolicy": "IfNotPresent"}]}}}});
        assert!(is_subset(&desired, &live));
        let drifted = json!({"spec": {"replicas": 3, "template": {"spec": {"containers": [{"name": "a", "image": "x:1"}]}}}});
        assert!(!is_subset(&desired, &drifted));
    }

    #[test]
    fn first_difference_names_the_path() {
        let desired = json!({"spec": {"replicas": 1, "ports": [{"port": 80}, {"port": 443}]}});
        assert_eq!(first_difference(&desired, &json!({"spec": {"replicas": 3, "ports": [{"port": 80}, {"port": 443}]}})).as_deref(), Some("spec.replicas"));
        assert_eq!(first_difference(&desired, &json!({"spec": {"replicas": 1, "ports": [{"port": 80}, {"port": 8443}]}})).as_deref(), Some("spec.ports.[1].port"));
        assert_eq!(first_difference(&desired, &desired), None);
    }

    #[test]
    fn secret_string_data_becomes_base64_data() {
        let mut s = json!({"kind": "Secret", "stringData": {"a": "katib", "b": "ab", "c": "a"}});
        normalize_secret(&mut s);
        assert_eq!(s, json!({"kind": "Secret", "data": {"a": "a2F0aWI=", "b": "YWI=", "c": "YQ=="}}));
    }
}
