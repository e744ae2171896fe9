//! A component's typed spec applied to upstream's package: where the package keeps a setting (an
//! entry of a ConfigMap, a container's environment, a Service's ports) is the component's
//! knowledge; these are the edits it makes there. Each finds its target by kind and name and, when
//! the package has none (a release laid out otherwise), refuses naming the spec field: a setting
//! is never dropped silently.

use serde_json::{Map, Value};

use crate::InvalidSpec;
use crate::api::component::SecretKeyRef;

/// The package object of `kind` named `name`, or a refusal naming `field`.
pub fn object_mut<'a>(objects: &'a mut [Value], kind: &str, name: &str, field: &str) -> Result<&'a mut Value, InvalidSpec> {
    objects
        .iter_mut()
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
        .ok_or_else(|| InvalidSpec::new(field, format!("the package spec.sources names has no {kind} {name}, where this setting goes; set it in the package instead")))
}

/// Sets entries of the `data` of ConfigMap `config_map`.
pub fn set_config_entries(objects: &mut [Value], config_map: &str, entries: &[(&str, String)], field: &str) -> Result<(), InvalidSpec> {
    let config = object_mut(objects, "ConfigMap", config_map, field)?;
    for (key, value) in entries {
        config["data"][*key] = Value::String(value.clone());
    }
    Ok(())
}

/// Edits the JSON document in entry `key` of ConfigMap `config_map` (KServe keeps its settings so).
pub fn edit_json_entry(objects: &mut [Value], config_map: &str, key: &str, field: &str, edit: impl FnOnce(&mut Map<String, Value>)) -> Result<(), InvalidSpec> {
    edit_entry(objects, config_map, key, field, "JSON", |text| serde_json::from_str(text).ok(), |d| serde_json::to_string_pretty(d).expect("JSON serialises"), edit)
}

/// Edits the YAML document in entry `key` of ConfigMap `config_map` (Dex keeps its settings so).
pub fn edit_yaml_entry(objects: &mut [Value], config_map: &str, key: &str, field: &str, edit: impl FnOnce(&mut Map<String, Value>)) -> Result<(), InvalidSpec> {
    edit_entry(objects, config_map, key, field, "YAML", |text| serde_yaml_ng::from_str(text).ok(), |d| serde_yaml_ng::to_string(d).expect("YAML serialises"), edit)
}

/// Edits the document (a mapping, in `format`) in entry `key` of ConfigMap `config_map`.
#[allow(clippy::too_many_arguments)]
fn edit_entry(
    objects: &mut [Value],
    config_map: &str,
    key: &str,
    field: &str,
    format: &str,
    parse: impl FnOnce(&str) -> Option<Value>,
    write: impl FnOnce(&Value) -> String,
    edit: impl FnOnce(&mut Map<String, Value>),
) -> Result<(), InvalidSpec> {
    let config = object_mut(objects, "ConfigMap", config_map, field)?;
    let Some(Value::Object(mut document)) = parse(config["data"][key].as_str().unwrap_or_default()) else {
        return Err(InvalidSpec::new(field, format!("entry {key:?} of the package's ConfigMap {config_map}, where this setting goes, is not a {format} object; set it in the package instead")));
    };
    edit(&mut document);
    config["data"][key] = Value::String(write(&Value::Object(document)));
    Ok(())
}

/// Sets environment variables of container `container` of workload `kind`/`name`: a variable
/// that is there is replaced (a `valueFrom` included), a new one is appended.
pub fn set_env(objects: &mut [Value], kind: &str, name: &str, container: &str, vars: &[(&str, Value)], field: &str) -> Result<(), InvalidSpec> {
    let workload = object_mut(objects, kind, name, field)?;
    let containers = workload.pointer_mut("/spec/template/spec/containers").and_then(Value::as_array_mut);
    let Some(target) = containers.into_iter().flatten().find(|c| c["name"] == container) else {
        return Err(InvalidSpec::new(field, format!("the package's {kind} {name} has no container {container}, where this setting goes; set it in the package instead")));
    };
    if !target["env"].is_array() {
        target["env"] = Value::Array(Vec::new());
    }
    let env = target["env"].as_array_mut().expect("an array");
    for (var, value) in vars {
        let entry = match value {
            Value::Object(_) => serde_json::json!({"name": var, "valueFrom": value}),
            _ => serde_json::json!({"name": var, "value": value}),
        };
        match env.iter_mut().find(|e| e["name"] == *var) {
            Some(existing) => *existing = entry,
            None => env.push(entry),
        }
    }
    Ok(())
}

/// Points every `secretKeyRef` to key `key` of Secret `secret` (in any workload, anywhere in its
/// pod template) at `to` instead; returns how many it changed.
pub fn retarget_secret_key_refs(objects: &mut [Value], secret: &str, key: &str, to: &SecretKeyRef) -> usize {
    fn walk(value: &mut Value, secret: &str, key: &str, to: &SecretKeyRef) -> usize {
        match value {
            Value::Object(map) => {
                let here = match map.get_mut("secretKeyRef") {
                    Some(reference) if reference["name"] == secret && reference["key"] == key => {
                        reference["name"] = Value::String(to.name.clone());
                        reference["key"] = Value::String(to.key.clone());
                        1
                    }
                    _ => 0,
                };
                here + map.iter_mut().filter(|(k, _)| *k != "secretKeyRef").map(|(_, v)| walk(v, secret, key, to)).sum::<usize>()
            }
            Value::Array(items) => items.iter_mut().map(|v| walk(v, secret, key, to)).sum(),
            _ => 0,
        }
    }
    objects.iter_mut().map(|o| walk(o, secret, key, to)).sum()
}

/// An external database's password in place of the package's own (`package_secret`: the Secret
/// and key its workloads read): every reference to it points at `secret_ref`, which is required.
pub fn use_external_password(objects: &mut [Value], package_secret: (&str, &str), secret_ref: Option<&SecretKeyRef>) -> Result<(), InvalidSpec> {
    let field = "spec.database.secretRef";
    let secret = secret_ref.ok_or_else(|| InvalidSpec::new(field, "is required when host names an external database"))?;
    if retarget_secret_key_refs(objects, package_secret.0, package_secret.1, secret) == 0 {
        return Err(InvalidSpec::new(
            field,
            format!("no workload of the package reads the password from Secret {} key {}, where this setting goes; set it in the package instead", package_secret.0, package_secret.1),
        ));
    }
    Ok(())
}

/// Takes the objects `(kind, name)` out of the package (a built-in service an external one
/// replaces); returns how many it took.
pub fn remove(objects: &mut Vec<Value>, which: &[(&str, &str)]) -> usize {
    let before = objects.len();
    objects.retain(|o| !which.iter().any(|(kind, name)| o["kind"] == *kind && o["metadata"]["name"] == *name));
    before - objects.len()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn objects() -> Vec<Value> {
        vec![
            json!({"kind": "ConfigMap", "metadata": {"name": "settings"}, "data": {"plain": "a", "json": "{\"x\": 1, \"y\": \"two\"}", "yaml": "issuer: old\nkeep: [1]\n", "broken": "[1"}}),
            json!({"kind": "Deployment", "metadata": {"name": "server"}, "spec": {"template": {"spec": {
                "initContainers": [{"name": "init", "env": [{"name": "P", "valueFrom": {"secretKeyRef": {"name": "db", "key": "password"}}}]}],
                "containers": [{"name": "main", "env": [{"name": "HOST", "value": "db"}, {"name": "PASSWORD", "valueFrom": {"secretKeyRef": {"name": "db", "key": "password"}}}, {"name": "USER", "valueFrom": {"secretKeyRef": {"name": "db", "key": "username"}}}]}],
            }}}}),
            json!({"kind": "Service", "metadata": {"name": "db"}}),
        ]
    }

    #[test]
    fn a_setting_whose_place_the_package_lacks_is_refused_naming_the_field() {
        let mut o = objects();
        let refused = set_config_entries(&mut o, "other", &[("k", "v".into())], "spec.database.host").unwrap_err();
        assert_eq!(refused.field, "spec.database.host");
        assert!(refused.message.contains("no ConfigMap other"), "{}", refused.message);
        let refused = set_env(&mut o, "Deployment", "server", "sidecar", &[("A", json!("b"))], "spec.database.host").unwrap_err();
        assert!(refused.message.contains("no container sidecar"), "{}", refused.message);
        let refused = edit_json_entry(&mut o, "settings", "broken", "spec.ingressDomain", |_| {}).unwrap_err();
        assert!(refused.message.contains("not a JSON object"), "{}", refused.message);
        assert_eq!(o, objects(), "a refusal changes nothing");
    }

    #[test]
    fn entries_are_set_and_documents_edited_in_place() {
        let mut o = objects();
        set_config_entries(&mut o, "settings", &[("plain", "b".into()), ("new", "c".into())], "f").unwrap();
        edit_json_entry(&mut o, "settings", "json", "f", |d| {
            d.insert("y".into(), json!("three"));
        })
        .unwrap();
        edit_yaml_entry(&mut o, "settings", "yaml", "f", |d| {
            d.insert("issuer".into(), json!("https://new"));
        })
        .unwrap();
        let data = &o[0]["data"];
        assert_eq!((data["plain"].as_str(), data["new"].as_str()), (Some("b"), Some("c")));
        assert_eq!(serde_json::from_str::<Value>(data["json"].as_str().unwrap()).unwrap(), json!({"x": 1, "y": "three"}));
        assert_eq!(serde_yaml_ng::from_str::<Value>(data["yaml"].as_str().unwrap()).unwrap(), json!({"issuer": "https://new", "keep": [1]}));
    }

    #[test]
    fn env_is_replaced_or_appended_and_secret_refs_retargeted_everywhere() {
        let mut o = objects();
        set_env(&mut o, "Deployment", "server", "main", &[("HOST", json!("db.example.com")), ("PORT", json!("5432"))], "f").unwrap();
        let to = SecretKeyRef { name: "external".into(), key: "pw".into() };
        assert_eq!(retarget_secret_key_refs(&mut o, "db", "password", &to), 2, "the init container's and the main one's");
        let env = &o[1]["spec"]["template"]["spec"]["containers"][0]["env"];
        assert_eq!(
            env,
            &json!([
                {"name": "HOST", "value": "db.example.com"},
                {"name": "PASSWORD", "valueFrom": {"secretKeyRef": {"name": "external", "key": "pw"}}},
                {"name": "USER", "valueFrom": {"secretKeyRef": {"name": "db", "key": "username"}}},
                {"name": "PORT", "value": "5432"},
            ])
        );
        assert_eq!(o[1]["spec"]["template"]["spec"]["initContainers"][0]["env"][0]["valueFrom"]["secretKeyRef"]["name"], "external");
        assert_eq!(remove(&mut o, &[("Service", "db"), ("Service", "absent")]), 1);
        assert_eq!(o.len(), 2);
    }
}
