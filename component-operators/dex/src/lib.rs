//! Dex: the OpenID Connect provider Kubeflow's authservice logs users in through (KfDef application
//! `dex`, with its storage CRDs from `dex-crds` in the Kubeflow 1.2 layout). Releases v2.22.0
//! (Kubeflow 1.2) and v2.24.0 (Kubeflow 1.3) share one template; v2.24.0 is pulled from
//! `ghcr.io/dexidp/dex` instead of `quay.io/dexidp/dex`, adds the device-flow CRDs
//! (`devicerequests`, `devicetokens`) and relabels the Deployment (`app` becomes
//! `app.kubernetes.io/name`; its selector changes, so an upgrade replaces that Deployment).
//!
//! The Dex configuration is built here rather than templated: issuer, Kubernetes storage, the
//! `kubeflow-oidc-authservice` static client, the spec's connectors and the static passwords read
//! from the Secret key `spec.staticPasswordsSecretRef` names. It is installed as the Secret
//! `dex-config` (it holds password hashes and the client secret), and its hash is a pod-template
//! annotation so that a configuration change rolls the Dex pods.

use component_framework::api::Dex;
use component_framework::api::component::SecretKeyRef;
use component_framework::build::target_namespace;
use component_framework::manifest::content_hash;
use component_framework::{Component, InvalidSpec, Inputs, Params, Release};
use serde_json::{Value, json};
use serde_yaml_ng::{Mapping, Value as Yaml};

pub struct DexComponent;

const TEMPLATE: &str = include_str!("../manifests/dex.yaml");

static RELEASES: [Release; 2] = [
    Release {
        version: "v2.22.0",
        manifest: TEMPLATE,
        params: &[("image", "quay.io/dexidp/dex"), ("selectorKey", "app"), ("deviceFlowCrds", "false")],
        upgrades_from: &[],
        kubeflow: &["1.2"],
    },
    Release {
        version: "v2.24.0",
        manifest: TEMPLATE,
        params: &[("image", "ghcr.io/dexidp/dex"), ("selectorKey", "app.kubernetes.io/name"), ("deviceFlowCrds", "true")],
        upgrades_from: &["v2.22.0"],
        kubeflow: &["1.3"],
    },
];

/// OAuth2 client id Kubeflow's authservice logs in with.
pub const CLIENT_ID: &str = "kubeflow-oidc-authservice";
/// Kubeflow's well-known default secret of that client (`application_secret` in its manifests);
/// override the `clientSecret` parameter, together with the authservice's, in real deployments.
pub const DEFAULT_CLIENT_SECRET: &str = "pUBnBOY80SnXgjibTYM9ZWNzY2xreNGQok";

const STATIC_PASSWORDS_FIELD: &str = "spec.staticPasswordsSecretRef.key";
const STATIC_PASSWORDS_EXPECTED: &str = "expected a YAML list of {email, hash, username, userID}";
const STATIC_PASSWORD_KEYS: [&str; 4] = ["email", "hash", "username", "userID"];

/// Issuer Dex announces when the spec sets none: its in-cluster Service.
pub fn default_issuer(namespace: &str) -> String {
    format!("http://dex.{namespace}.svc.cluster.local:5556/dex")
}

impl Component for DexComponent {
    type Resource = Dex;
    const DEFAULT_NAMESPACE: &'static str = "auth";
    const DISPLAY_NAME: &'static str = "Dex for Kubeflow";
    const INSTALLS: &'static str = "Dex, the OpenID Connect provider Kubeflow authenticates users with";

    fn test_spec() -> Value {
        json!({"connectors": [{"type": "ldap", "id": "ldap", "name": "LDAP", "config": {"host": "ldap.example.com:636"}}]})
    }

    fn releases() -> &'static [Release] {
        &RELEASES
    }

    fn secret_refs(resource: &Dex) -> Vec<(String, SecretKeyRef)> {
        resource.spec.static_passwords_secret_ref.iter().map(|r| ("spec.staticPasswordsSecretRef".to_string(), r.clone())).collect()
    }

    fn default_parameters() -> Params {
        let config = dex_config(&default_issuer(Self::DEFAULT_NAMESPACE), DEFAULT_CLIENT_SECRET, Vec::new(), None);
        Params::from([
            ("clientSecret".to_string(), DEFAULT_CLIENT_SECRET.to_string()),
            ("configChecksum".to_string(), checksum(&config)),
            ("dexConfig".to_string(), config),
        ])
    }

    fn parameters(resource: &Dex, inputs: &Inputs) -> Result<Params, InvalidSpec> {
        let spec = &resource.spec;
        let issuer = spec.issuer.clone().unwrap_or_else(|| default_issuer(&target_namespace::<DexComponent>(resource)));
        let client_secret = parameter(resource, "clientSecret").unwrap_or_else(|| DEFAULT_CLIENT_SECRET.to_string());
        let connectors = connectors(resource)?;
        let passwords = match &spec.static_passwords_secret_ref {
            None => None,
            Some(reference) => {
                // The framework has dereferenced it: a missing Secret or key never gets here.
                let text = inputs.secret(reference).ok_or_else(|| {
                    InvalidSpec::new(STATIC_PASSWORDS_FIELD, format!("Secret {:?} key {:?} has not been read yet", reference.name, reference.key)).retryable()
                })?;
                Some(static_passwords(reference, text)?)
            }
        };
        let built = dex_config(&issuer, &client_secret, connectors, passwords);
        // `dexConfig` may be overridden wholesale; the checksum must follow what is installed.
        let installed = parameter(resource, "dexConfig").unwrap_or_else(|| built.clone());
        Ok(Params::from([("configChecksum".to_string(), checksum(&installed)), ("dexConfig".to_string(), built)]))
    }
}

/// Value a KfDef application parameter or `spec.overrides.parameters` gives `name`, with the
/// framework's precedence (overrides over sources, later over earlier). Needed for the parameters
/// the Dex configuration is built from, since the framework applies them after [`Component::parameters`].
fn parameter(resource: &Dex, name: &str) -> Option<String> {
    let core = &resource.spec.core;
    let from_sources = core.sources.iter().flat_map(|s| &s.parameters).rfind(|p| p.name == name);
    let from_overrides = core.overrides.parameters.iter().rfind(|p| p.name == name);
    from_overrides.or(from_sources).map(|p| p.value.clone())
}

fn checksum(config: &str) -> String {
    content_hash(&serde_json::Value::String(config.to_string()))
}

fn mapping<'a>(pairs: impl IntoIterator<Item = (&'a str, Yaml)>) -> Yaml {
    Yaml::Mapping(pairs.into_iter().map(|(k, v)| (Yaml::from(k), v)).collect::<Mapping>())
}

/// The spec's connectors as Dex configuration entries.
fn connectors(resource: &Dex) -> Result<Vec<Yaml>, InvalidSpec> {
    let mut out = Vec::new();
    for (i, connector) in resource.spec.connectors.iter().enumerate() {
        if resource.spec.connectors[..i].iter().any(|c| c.id == connector.id) {
            return Err(InvalidSpec::new(format!("spec.connectors[{i}].id"), format!("connector id {:?} is used twice; ids must be unique", connector.id)));
        }
        let config = match &connector.config {
            // Dex parses every connector's `config`, so an empty one is still written.
            None => Yaml::Mapping(Mapping::new()),
            Some(config @ serde_json::Value::Object(_)) => serde_yaml_ng::to_value(config)
                .map_err(|e| InvalidSpec::new(format!("spec.connectors[{i}].config"), format!("cannot be written as YAML: {e}")))?,
            Some(other) => {
                return Err(InvalidSpec::new(format!("spec.connectors[{i}].config"), format!("must be an object of the connector's settings, got {other}")));
            }
        };
        let type_ = serde_yaml_ng::to_value(connector.type_).expect("connector types serialise");
        out.push(mapping([("type", type_), ("id", connector.id.as_str().into()), ("name", connector.name.as_str().into()), ("config", config)]));
    }
    Ok(out)
}

/// Dex `staticPasswords` from the referenced Secret key's text.
fn static_passwords(reference: &SecretKeyRef, text: &str) -> Result<Vec<Yaml>, InvalidSpec> {
    let bad = |what: String| {
        InvalidSpec::new(STATIC_PASSWORDS_FIELD, format!("Secret {:?} key {:?} {what}; {STATIC_PASSWORDS_EXPECTED}", reference.name, reference.key))
    };
    let parsed: Yaml = serde_yaml_ng::from_str(text).map_err(|e| bad(format!("is not valid YAML ({e})")))?;
    let Yaml::Sequence(entries) = parsed else {
        return Err(bad(format!("holds {}, not a list", describe(&parsed))));
    };
    let mut out = Vec::new();
    for (i, entry) in entries.iter().enumerate() {
        let Yaml::Mapping(fields) = entry else {
            return Err(bad(format!("entry {i} is {}, not an object", describe(entry))));
        };
        if let Some(unknown) = fields.keys().find(|k| !k.as_str().is_some_and(|k| STATIC_PASSWORD_KEYS.contains(&k))) {
            return Err(bad(format!("entry {i} has unknown field {}", serde_yaml_ng::to_string(unknown).unwrap_or_default().trim())));
        }
        let mut password = Mapping::new();
        for key in STATIC_PASSWORD_KEYS {
            let value = match fields.get(key) {
                None => return Err(bad(format!("entry {i} has no {key:?}"))),
                Some(Yaml::String(s)) => s.clone(),
                // An unquoted numeric userID is still meant as a string.
                Some(Yaml::Number(n)) => n.to_string(),
                Some(other) => return Err(bad(format!("entry {i} field {key:?} is {}, not a string", describe(other)))),
            };
            if value.trim().is_empty() {
                return Err(bad(format!("entry {i} field {key:?} is empty")));
            }
            password.insert(key.into(), value.into());
        }
        out.push(Yaml::Mapping(password));
    }
    Ok(out)
}

fn describe(value: &Yaml) -> &'static str {
    match value {
        Yaml::Null => "nothing",
        Yaml::Bool(_) => "a boolean",
        Yaml::Number(_) => "a number",
        Yaml::String(_) => "a string",
        Yaml::Sequence(_) => "a list",
        Yaml::Mapping(_) => "an object",
        Yaml::Tagged(_) => "a tagged value",
    }
}

/// The Dex configuration file (`config.yaml`).
fn dex_config(issuer: &str, client_secret: &str, connectors: Vec<Yaml>, static_passwords: Option<Vec<Yaml>>) -> String {
    let client = mapping([
        ("id", CLIENT_ID.into()),
        ("name", "Dex Login Application".into()),
        ("secret", client_secret.into()),
        ("redirectURIs", Yaml::Sequence(vec!["/login/oidc".into()])),
    ]);
    let mut config = vec![
        ("issuer", issuer.into()),
        ("storage", mapping([("type", "kubernetes".into()), ("config", mapping([("inCluster", true.into())]))])),
        ("web", mapping([("http", "0.0.0.0:5556".into())])),
        ("logger", mapping([("level", "debug".into()), ("format", "text".into())])),
        ("oauth2", mapping([("skipApprovalScreen", true.into())])),
        ("enablePasswordDB", true.into()),
        ("staticClients", Yaml::Sequence(vec![client])),
    ];
    if !connectors.is_empty() {
        config.push(("connectors", Yaml::Sequence(connectors)));
    }
    if let Some(passwords) = static_passwords {
        config.push(("staticPasswords", Yaml::Sequence(passwords)));
    }
    serde_yaml_ng::to_string(&mapping(config)).expect("Dex configuration serialises")
}

#[cfg(test)]
mod tests {
    use super::*;
    use component_framework::build::desired_objects;
    use serde_json::{Value, json};

    fn dex(spec: Value) -> Dex {
        let mut d: Dex = serde_json::from_value(json!({
            "apiVersion": "components.kubeflow.org/v1alpha1", "kind": "Dex",
            "metadata": {"name": "dex", "namespace": "team"}, "spec": spec,
        }))
        .unwrap();
        d.metadata.uid = Some("uid".into());
        d
    }

    const PASSWORDS: &str = "- email: admin@kubeflow.org\n  hash: $2y$12$ruoM7FqXrpVgaol44eRZW.4HWS8SAvg6KYVVSCIwKQPBmTpCm.EeO\n  username: admin\n  userID: 08a8684b-db88-4b73-90a9-3cd1661f5466\n";

    fn inputs(name: &str, key: &str, text: &str) -> Inputs {
        Inputs { secrets: [((name.to_string(), key.to_string()), text.to_string())].into(), ..Default::default() }
    }

    fn names(objects: &[Value], kind: &str) -> Vec<String> {
        objects.iter().filter(|o| o["kind"] == kind).map(|o| o["metadata"]["name"].as_str().unwrap().to_string()).collect()
    }

    fn find<'a>(objects: &'a [Value], kind: &str, name: &str) -> &'a Value {
        objects.iter().find(|o| o["kind"] == kind && o["metadata"]["name"] == name).unwrap()
    }

    fn base64_decode(text: &str) -> String {
        const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        let mut bits = 0u32;
        let mut count = 0;
        let mut out = Vec::new();
        for c in text.bytes().filter(|&c| c != b'=') {
            bits = (bits << 6) | ALPHABET.iter().position(|&a| a == c).unwrap() as u32;
            count += 6;
            if count >= 8 {
                count -= 8;
                out.push((bits >> count) as u8);
                bits &= (1 << count) - 1;
            }
        }
        String::from_utf8(out).unwrap()
    }

    /// The Dex configuration as installed: decoded from the rendered Secret.
    fn installed_config(objects: &[Value]) -> serde_json::Value {
        let secret = find(objects, "Secret", "dex-config");
        assert!(secret.get("stringData").is_none());
        serde_yaml_ng::from_str(&base64_decode(secret["data"]["config.yaml"].as_str().unwrap())).unwrap()
    }

    #[test]
    fn every_release_builds_a_full_object_set() {
        for release in DexComponent::releases() {
            let objects = desired_objects::<DexComponent>(&dex(json!({"version": release.version})), &Inputs::default()).unwrap();
            assert_eq!(names(&objects, "Deployment"), ["dex"], "{}", release.version);
            assert_eq!(names(&objects, "Service"), ["dex"]);
            assert_eq!(names(&objects, "Secret"), ["dex-config"]);
            assert!(names(&objects, "ConfigMap").is_empty());
            assert_eq!(names(&objects, "ServiceAccount"), ["dex"]);
            assert_eq!(names(&objects, "ClusterRole"), ["dex-auth"]);
            assert_eq!(names(&objects, "ClusterRoleBinding"), ["dex-auth"]);
            let crds = names(&objects, "CustomResourceDefinition");
            let device = ["devicerequests.dex.coreos.com", "devicetokens.dex.coreos.com"];
            assert_eq!(crds.len(), if release.version == "v2.22.0" { 8 } else { 10 }, "{}", release.version);
            assert_eq!(device.iter().all(|d| crds.contains(&d.to_string())), release.version == "v2.24.0");
            assert!(crds.iter().all(|c| c.ends_with(".dex.coreos.com")));
            for crd in objects.iter().filter(|o| o["kind"] == "CustomResourceDefinition") {
                assert_eq!(crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["x-kubernetes-preserve-unknown-fields"], true);
            }

            let deployment = find(&objects, "Deployment", "dex");
            assert_eq!(deployment["metadata"]["namespace"], "auth");
            let registry = if release.version == "v2.22.0" { "quay.io" } else { "ghcr.io" };
            let container = &deployment["spec"]["template"]["spec"]["containers"][0];
            assert_eq!(container["image"], format!("{registry}/dexidp/dex:{}", release.version));
            assert_eq!(container["command"], json!(["dex", "serve", "/etc/dex/cfg/config.yaml"]));
            assert_eq!(deployment["spec"]["template"]["spec"]["volumes"][0]["secret"]["secretName"], "dex-config");
            assert_eq!(deployment["metadata"]["labels"]["components.kubeflow.org/part-of"], "dex");
            assert_eq!(deployment["metadata"]["annotations"]["components.kubeflow.org/owner"], "team/dex");
            let service = find(&objects, "Service", "dex");
            assert_eq!(service["spec"]["type"], "ClusterIP");
            assert_eq!(service["spec"]["ports"][0]["port"], 5556);
            assert_eq!(service["spec"]["selector"], deployment["spec"]["selector"]["matchLabels"]);
            let binding = find(&objects, "ClusterRoleBinding", "dex-auth");
            assert_eq!(binding["subjects"][0], json!({"kind": "ServiceAccount", "name": "dex", "namespace": "auth"}));

            // Objects come out in apply order: namespace and CRDs first, the Deployment last.
            assert_eq!(objects[0]["kind"], "Namespace");
            assert_eq!(objects[0]["metadata"]["name"], "auth");
            assert_eq!(objects[1]["kind"], "CustomResourceDefinition");
            assert_eq!(objects.last().unwrap()["kind"], "Deployment");
        }
    }

    #[test]
    fn installed_config_carries_issuer_connectors_and_static_passwords() {
        let spec = json!({
            "version": "v2.24.0", "targetNamespace": "login",
            "connectors": [{"type": "github", "id": "gh", "name": "GitHub", "config": {"clientID": "abc", "clientSecret": "$GITHUB_SECRET", "orgs": [{"name": "kubeflow"}]}},
                           {"type": "ldap", "id": "corp", "name": "Corp LDAP"}],
            "staticPasswordsSecretRef": {"name": "dex-users", "key": "passwords.yaml"},
        });
        let objects = desired_objects::<DexComponent>(&dex(spec), &inputs("dex-users", "passwords.yaml", PASSWORDS)).unwrap();
        let config = installed_config(&objects);
        assert_eq!(config["issuer"], "http://dex.login.svc.cluster.local:5556/dex");
        assert_eq!(config["storage"], json!({"type": "kubernetes", "config": {"inCluster": true}}));
        assert_eq!(config["web"]["http"], "0.0.0.0:5556");
        assert_eq!(config["oauth2"]["skipApprovalScreen"], true);
        assert_eq!(config["enablePasswordDB"], true);
        assert_eq!(config["staticClients"][0]["id"], CLIENT_ID);
        assert_eq!(config["staticClients"][0]["redirectURIs"], json!(["/login/oidc"]));
        assert_eq!(config["staticClients"][0]["secret"], DEFAULT_CLIENT_SECRET);
        assert_eq!(
            config["connectors"],
            json!([{"type": "github", "id": "gh", "name": "GitHub", "config": {"clientID": "abc", "clientSecret": "$GITHUB_SECRET", "orgs": [{"name": "kubeflow"}]}},
                   {"type": "ldap", "id": "corp", "name": "Corp LDAP", "config": {}}])
        );
        assert_eq!(
            config["staticPasswords"],
            json!([{"email": "admin@kubeflow.org", "hash": "$2y$12$ruoM7FqXrpVgaol44eRZW.4HWS8SAvg6KYVVSCIwKQPBmTpCm.EeO", "username": "admin", "userID": "08a8684b-db88-4b73-90a9-3cd1661f5466"}])
        );
        assert_eq!(find(&objects, "Deployment", "dex")["metadata"]["namespace"], "login");
    }

    #[test]
    fn spec_issuer_and_parameters_shape_the_config() {
        let spec = json!({"version": "v2.22.0", "issuer": "https://kubeflow.example.com/dex",
                          "overrides": {"parameters": [{"name": "clientSecret", "value": "s3cret"}]}});
        let params = DexComponent::parameters(&dex(spec), &Inputs::default()).unwrap();
        let config: serde_json::Value = serde_yaml_ng::from_str(&params["dexConfig"]).unwrap();
        assert_eq!(config["issuer"], "https://kubeflow.example.com/dex");
        assert_eq!(config["staticClients"][0]["secret"], "s3cret");
        assert!(config.get("staticPasswords").is_none() && config.get("connectors").is_none());
        assert_eq!(params["configChecksum"], content_hash(&serde_json::Value::String(params["dexConfig"].clone())));
        // Every parameter has a default, and the defaults describe the default namespace.
        let defaults = DexComponent::default_parameters();
        assert_eq!(defaults.keys().collect::<Vec<_>>(), ["clientSecret", "configChecksum", "dexConfig"]);
        assert!(defaults["dexConfig"].contains(&default_issuer("auth")));
        assert_eq!(defaults, {
            let mut built = DexComponent::parameters(&dex(json!({"version": "v2.24.0"})), &Inputs::default()).unwrap();
            built.insert("clientSecret".into(), DEFAULT_CLIENT_SECRET.into());
            built
        });
    }

    #[test]
    fn overriding_the_whole_config_keeps_the_checksum_honest() {
        let replacement = "issuer: https://elsewhere/dex\n";
        let spec = json!({"version": "v2.24.0", "overrides": {"parameters": [{"name": "dexConfig", "value": replacement}]}});
        let objects = desired_objects::<DexComponent>(&dex(spec), &Inputs::default()).unwrap();
        assert_eq!(installed_config(&objects)["issuer"], "https://elsewhere/dex");
        let annotations = &find(&objects, "Deployment", "dex")["spec"]["template"]["metadata"]["annotations"];
        assert_eq!(annotations["checksum/config"], checksum(replacement));
    }

    #[test]
    fn bad_static_passwords_are_refused_naming_the_secret_key() {
        let reference = json!({"name": "dex-users", "key": "passwords.yaml"});
        let check = |text: &str, needle: &str| {
            let spec = json!({"version": "v2.24.0", "staticPasswordsSecretRef": reference});
            let err = desired_objects::<DexComponent>(&dex(spec), &inputs("dex-users", "passwords.yaml", text)).unwrap_err();
            assert_eq!(err.field, "spec.staticPasswordsSecretRef.key");
            assert!(err.message.contains(needle), "{err}");
            assert!(err.message.contains("expected a YAML list of {email, hash, username, userID}"), "{err}");
            assert!(!err.retry);
        };
        check("email: a@b.c\nhash: x\n", "holds an object, not a list");
        check("", "holds nothing, not a list");
        check("[unclosed", "not valid YAML");
        check("- just-a-string\n", "entry 0 is a string, not an object");
        check("- {email: a@b.c, hash: x, username: a}\n", "entry 0 has no \"userID\"");
        check("- {email: a@b.c, hash: x, username: a, userID: '1', password: hunter2}\n", "unknown field password");
        check("- {email: a@b.c, hash: [x], username: a, userID: '1'}\n", "\"hash\" is a list, not a string");
        check("- {email: '', hash: x, username: a, userID: '1'}\n", "\"email\" is empty");
        // A numeric userID is accepted as the string it was meant to be.
        let spec = json!({"version": "v2.24.0", "staticPasswordsSecretRef": reference});
        let ok = desired_objects::<DexComponent>(&dex(spec), &inputs("dex-users", "passwords.yaml", "- {email: a@b.c, hash: x, username: a, userID: 15841185641784}\n")).unwrap();
        assert_eq!(installed_config(&ok)["staticPasswords"][0]["userID"], "15841185641784");
    }

    #[test]
    fn static_passwords_reference_is_dereferenced_by_the_framework() {
        let spec = json!({"version": "v2.24.0", "staticPasswordsSecretRef": {"name": "dex-users", "key": "passwords.yaml"}});
        let resource = dex(spec);
        let refs = DexComponent::secret_refs(&resource);
        assert_eq!(refs.len(), 1);
        assert_eq!(refs[0].0, "spec.staticPasswordsSecretRef");
        assert_eq!((refs[0].1.name.as_str(), refs[0].1.key.as_str()), ("dex-users", "passwords.yaml"));
        assert!(DexComponent::secret_refs(&dex(json!({"version": "v2.24.0"}))).is_empty());
        // Not read yet (only possible outside the reconcile pipeline): worth waiting for.
        let err = DexComponent::parameters(&resource, &Inputs::default()).unwrap_err();
        assert_eq!(err.field, "spec.staticPasswordsSecretRef.key");
        assert!(err.retry);
    }

    #[test]
    fn changing_a_connector_rolls_the_pods() {
        let checksum = |client_id: &str| {
            let spec = json!({"version": "v2.24.0", "connectors": [{"type": "oidc", "id": "sso", "name": "SSO", "config": {"issuer": "https://sso.example.com", "clientID": client_id}}]});
            let objects = desired_objects::<DexComponent>(&dex(spec), &Inputs::default()).unwrap();
            find(&objects, "Deployment", "dex")["spec"]["template"]["metadata"]["annotations"]["checksum/config"].as_str().unwrap().to_string()
        };
        assert_eq!(checksum("kubeflow"), checksum("kubeflow"));
        assert_ne!(checksum("kubeflow"), checksum("kubeflow-2"));
    }

    #[test]
    fn bad_input_names_the_field_and_the_allowed_values() {
        let check = |spec: Value, field: &str, needle: &str| {
            let err = desired_objects::<DexComponent>(&dex(spec), &Inputs::default()).unwrap_err();
            assert_eq!(err.field, field);
            assert!(err.message.contains(needle), "{err}");
        };
        check(json!({"version": "v2.25.0"}), "spec.version", "supported versions: v2.22.0, v2.24.0");
        check(json!({"version": "v2.24.0", "connectors": [{"type": "github", "id": "gh", "name": "a"}, {"type": "ldap", "id": "gh", "name": "b"}]}), "spec.connectors[1].id", "used twice");
        check(json!({"version": "v2.24.0", "connectors": [{"type": "oidc", "id": "sso", "name": "SSO", "config": "issuer=x"}]}), "spec.connectors[0].config", "must be an object");
        check(json!({"version": "v2.24.0", "overrides": {"images": {"dexx": "x"}}}), "spec.overrides.images.dexx", "dex");
        check(json!({"version": "v2.24.0", "overrides": {"parameters": [{"name": "issuer", "value": "x"}]}}), "spec.overrides.parameters[0].name", "dexConfig");
    }

    #[test]
    fn selector_changes_between_releases() {
        let selector = |v: &str| {
            let objects = desired_objects::<DexComponent>(&dex(json!({"version": v})), &Inputs::default()).unwrap();
            find(&objects, "Deployment", "dex")["spec"]["selector"].clone()
        };
        assert_eq!(selector("v2.22.0"), json!({"matchLabels": {"app": "dex"}}));
        assert_eq!(selector("v2.24.0"), json!({"matchLabels": {"app.kubernetes.io/name": "dex"}}));
        let upgrade = DexComponent::releases().iter().find(|r| r.version == "v2.24.0").unwrap();
        assert_eq!(upgrade.upgrades_from, ["v2.22.0"]);
    }
}
