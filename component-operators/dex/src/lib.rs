//! Dex: the OpenID Connect provider Kubeflow's authentication front logs users in through (KfDef
//! application `dex`, with its storage CRDs from `dex-crds` in the Kubeflow 1.2 layout).
//!
//! Releases:
//! - v2.22.0 (Kubeflow 1.2) and v2.24.0 (Kubeflow 1.3) share one template (`manifests/dex.yaml`);
//!   v2.24.0 is pulled from `ghcr.io/dexidp/dex` instead of `quay.io/dexidp/dex`, adds the
//!   device-flow CRDs (`devicerequests`, `devicetokens`) and relabels the Deployment (`app` becomes
//!   `app.kubernetes.io/name`; its selector changes, so an upgrade replaces that Deployment). Their
//!   static client redirects to oidc-authservice's `/login/oidc`.
//! - v2.41.1 (Kubeflow 1.10) and v2.44.0 (Kubeflow 1.11) share a second template
//!   (`manifests/dex-common.yaml`, shaped like kubeflow/manifests' `common/dex`): the workload is
//!   labelled `app: dex` again, runs unprivileged, and is ready when Dex's health check
//!   (`<issuer path>/healthz`) answers; the CRDs are v2.24.0's ten, unchanged. Their static client
//!   redirects to oauth2-proxy's `/oauth2/callback`, oauth2-proxy having replaced oidc-authservice
//!   in Kubeflow 1.9. Neither front is installed here: oidc-authservice never was, and oauth2-proxy
//!   (its own `oauth2-proxy` namespace, plus Istio external-authorization objects) is left to its
//!   own install as well.
//!   v2.41.1 is a fresh install: upstream supports no upgrade from Kubeflow 1.3 to 1.10. v2.44.0
//!   upgrades from v2.41.1 in place (only the image tag changes).
//!
//! The Dex configuration is built here rather than templated, the same for every release but the
//! static client's redirect: issuer, Kubernetes storage, the `kubeflow-oidc-authservice` static
//! client (the id oauth2-proxy keeps using), the spec's connectors and the static passwords read
//! from the Secret key `spec.staticPasswordsSecretRef` names. It is installed as the Secret
//! `dex-config` (it holds password hashes and the client secret), and its hash is a pod-template
//! annotation so that a configuration change rolls the Dex pods. On upstream's packages the same
//! fields are patched into the package's own configuration ([`patch_package`]).

use component_framework::api::Dex;
use component_framework::api::component::SecretKeyRef;
use component_framework::build::target_namespace;
use component_framework::manifest::content_hash;
use component_framework::package::patch;
use component_framework::{Component, InvalidSpec, Inputs, Params, Release};
use serde_json::{Value, json};
use serde_yaml_ng::{Mapping, Value as Yaml};

pub struct DexComponent;

/// Template of the Kubeflow 1.2 and 1.3 releases.
const TEMPLATE: &str = include_str!("../manifests/dex.yaml");
/// Template of the releases from Kubeflow 1.10 on (kubeflow/manifests `common/dex`).
const COMMON_TEMPLATE: &str = include_str!("../manifests/dex-common.yaml");

/// Release parameter read by [`dex_config`], not by the templates: where the static client's login
/// flow returns to, i.e. which authentication front the Kubeflow release logs users in with.
const REDIRECT_PARAM: &str = "clientRedirectURI";
/// oidc-authservice's callback (Kubeflow up to 1.8).
pub const AUTHSERVICE_REDIRECT_URI: &str = "/login/oidc";
/// oauth2-proxy's callback (Kubeflow 1.9 on).
pub const OAUTH2_PROXY_REDIRECT_URI: &str = "/oauth2/callback";

static RELEASES: [Release; 4] = [
    Release {
        version: "v2.22.0",
        manifest: TEMPLATE,
        params: &[
            ("image", "quay.io/dexidp/dex"),
            ("selectorKey", "app"),
            ("deviceFlowCrds", "false"),
            (REDIRECT_PARAM, AUTHSERVICE_REDIRECT_URI),
        ],
        upgrades_from: &[],
        kubeflow: &["1.2"],
    },
    Release {
        version: "v2.24.0",
        manifest: TEMPLATE,
        params: &[
            ("image", "ghcr.io/dexidp/dex"),
            ("selectorKey", "app.kubernetes.io/name"),
            ("deviceFlowCrds", "true"),
            (REDIRECT_PARAM, AUTHSERVICE_REDIRECT_URI),
        ],
        upgrades_from: &["v2.22.0"],
        kubeflow: &["1.3"],
    },
    Release {
        version: "v2.41.1",
        manifest: COMMON_TEMPLATE,
        params: &[("image", "ghcr.io/dexidp/dex"), (REDIRECT_PARAM, OAUTH2_PROXY_REDIRECT_URI)],
        // Kubeflow 1.3 → 1.10 is no upgrade upstream supports: a fresh install.
        upgrades_from: &[],
        kubeflow: &["1.10"],
    },
    Release {
        version: "v2.44.0",
        manifest: COMMON_TEMPLATE,
        params: &[("image", "ghcr.io/dexidp/dex"), (REDIRECT_PARAM, OAUTH2_PROXY_REDIRECT_URI)],
        upgrades_from: &["v2.41.1"],
        kubeflow: &["1.11"],
    },
];

/// OAuth2 client id Kubeflow's authentication front logs in with (oidc-authservice's, which
/// oauth2-proxy kept from Kubeflow 1.9 on).
pub const CLIENT_ID: &str = "kubeflow-oidc-authservice";
/// Kubeflow's well-known default secret of that client (`application_secret` in the authservice's
/// manifests, `client-secret` in oauth2-proxy's); override the `clientSecret` parameter, together
/// with the authentication front's, in real deployments.
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
    /// A resource made from a KfDef renders the KfDef's packages, upstream's objects.
    const RENDERS_PACKAGES: bool = true;
    /// The kinds upstream's packages of these releases install.
    const INSTALLED_KINDS: &'static [&'static str] = &["ClusterRole", "ClusterRoleBinding", "ConfigMap", "CustomResourceDefinition", "Deployment", "Namespace", "Secret", "Service", "ServiceAccount"];
    /// The releases' packages in Kubeflow's archives (paths as kfctl's v1.2.0 `kfctl_istio_dex`
    /// KfDef, v1.3.1's and later releases' `example/kustomization.yaml` list them).
    const UPSTREAM_RELEASES: &'static [component_framework::UpstreamRelease] = &[
        component_framework::UpstreamRelease { version: "v2.22.0", kubeflow: "v1.2.0", applications: &[("dex", "stacks/kubernetes/application/dex-auth")] },
        component_framework::UpstreamRelease { version: "v2.24.0", kubeflow: "v1.3.1", applications: &[("dex", "common/dex/overlays/istio")] },
        component_framework::UpstreamRelease { version: "v2.41.1", kubeflow: "v1.10.2", applications: &[("dex", "common/dex/overlays/oauth2-proxy")] },
        component_framework::UpstreamRelease { version: "v2.44.0", kubeflow: "v1.11.0", applications: &[("dex", "common/dex/overlays/oauth2-proxy")] },
    ];
    /// Dex's own image.
    const VERSION_IMAGES: &'static [&'static str] = &["dexidp/dex"];
    const PACKAGE_FIELDS: &'static [&'static str] = &["issuer", "connectors", "staticPasswordsSecretRef"];

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
        let config = dex_config(&default_issuer(Self::DEFAULT_NAMESPACE), DEFAULT_CLIENT_SECRET, AUTHSERVICE_REDIRECT_URI, Vec::new(), None);
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
        let passwords = spec_static_passwords(resource, inputs)?;
        let built = dex_config(&issuer, &client_secret, redirect_uri(&spec.core.version), connectors, passwords);
        // `dexConfig` may be overridden wholesale; the checksum must follow what is installed.
        let installed = parameter(resource, "dexConfig").unwrap_or_else(|| built.clone());
        Ok(Params::from([("configChecksum".to_string(), checksum(&installed)), ("dexConfig".to_string(), built)]))
    }

    fn customize(resource: &Dex, inputs: &Inputs, objects: &mut Vec<Value>) -> Result<(), InvalidSpec> {
        if inputs.from_packages() {
            return patch_package(resource, inputs, objects);
        }
        follow_issuer_in_health_checks(objects);
        Ok(())
    }
}

/// Where upstream's package keeps Dex's configuration: entry `config.yaml` of ConfigMap `dex`,
/// which Deployment `dex` reads at start.
const PACKAGE_CONFIG: (&str, &str) = ("dex", "config.yaml");
const PACKAGE_DEPLOYMENT: &str = "dex";
/// The package's Secret whose keys Dex's container reads as its environment (`envFrom`); a
/// static password's hash is read from there (`hashFromEnv`), never written into the ConfigMap.
const PACKAGE_PASSWORDS_SECRET: &str = "dex-passwords";
/// Environment variable (a key of that Secret) with the hash of static password `i`.
const PACKAGE_PASSWORD_VAR: &str = "DEX_STATIC_PASSWORD_";
/// Pod template annotation with a hash of the patched configuration: a change rolls Dex's pods.
const PACKAGE_CHECKSUM_ANNOTATION: &str = "components.kubeflow.org/config-checksum";

/// `spec.issuer`, `spec.connectors` and `spec.staticPasswordsSecretRef` on upstream's package:
/// the issuer replaced, each connector added (replacing the package's connector of the same id),
/// the static passwords replaced by the Secret's (the package's default user goes): each entry's
/// hash goes into the package's Secret `dex-passwords` and `config.yaml` reads it from Dex's
/// environment, as upstream's own entry does. The issuer must be the one the package's
/// oauth2-proxy trusts, as with the built-in release.
fn patch_package(resource: &Dex, inputs: &Inputs, objects: &mut [Value]) -> Result<(), InvalidSpec> {
    let spec = &resource.spec;
    let passwords = spec_static_passwords(resource, inputs)?;
    if spec.issuer.is_none() && spec.connectors.is_empty() && passwords.is_none() {
        return Ok(());
    }
    let field = match (&spec.issuer, &passwords) {
        (Some(_), _) => "spec.issuer",
        (None, Some(_)) => "spec.staticPasswordsSecretRef",
        (None, None) => "spec.connectors",
    };
    let connectors: Vec<Value> = connectors(resource)?.into_iter().map(|c| serde_json::to_value(c).expect("YAML connectors are JSON")).collect();
    let from_env = match &passwords {
        Some(entries) => Some(hashes_into_package_secret(objects, entries)?),
        None => None,
    };
    patch::edit_yaml_entry(objects, PACKAGE_CONFIG.0, PACKAGE_CONFIG.1, field, |config| {
        if let Some(issuer) = &spec.issuer {
            config.insert("issuer".into(), json!(issuer));
        }
        if !connectors.is_empty() {
            let mut list = config.get("connectors").and_then(Value::as_array).cloned().unwrap_or_default();
            list.retain(|c| !connectors.iter().any(|ours| ours["id"] == c["id"]));
            list.extend(connectors);
            config.insert("connectors".into(), Value::Array(list));
        }
        if let Some(entries) = from_env {
            config.insert("enablePasswordDB".into(), json!(true));
            config.insert("staticPasswords".into(), Value::Array(entries));
        }
    })?;
    let config = patch::object_mut(objects, "ConfigMap", PACKAGE_CONFIG.0, field)?["data"][PACKAGE_CONFIG.1].clone();
    let hashes = objects.iter().find(|o| o["kind"] == "Secret" && o["metadata"]["name"] == PACKAGE_PASSWORDS_SECRET).map(|s| s["stringData"].clone());
    let checksum = content_hash(&json!([config, hashes.filter(|_| passwords.is_some())]));
    let deployment = patch::object_mut(objects, "Deployment", PACKAGE_DEPLOYMENT, field)?;
    deployment["spec"]["template"]["metadata"]["annotations"][PACKAGE_CHECKSUM_ANNOTATION] = json!(checksum);
    Ok(())
}

/// Writes the hash of each of `passwords` into the package's Secret `dex-passwords` (its previous
/// keys go: the package's default user is replaced) and returns the `staticPasswords` entries
/// that read them back from Dex's environment. Refused when Dex's container does not read that
/// Secret as its environment (e.g. kfctl-era packages, which keep hashes in the ConfigMap).
fn hashes_into_package_secret(objects: &mut [Value], passwords: &[Yaml]) -> Result<Vec<Value>, InvalidSpec> {
    let field = "spec.staticPasswordsSecretRef";
    let deployment = patch::object_mut(objects, "Deployment", PACKAGE_DEPLOYMENT, field)?;
    let reads_secret = deployment["spec"]["template"]["spec"]["containers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| c["name"] == "dex")
        .flat_map(|c| c["envFrom"].as_array().into_iter().flatten())
        .any(|source| source["secretRef"]["name"] == PACKAGE_PASSWORDS_SECRET);
    if !reads_secret {
        return Err(InvalidSpec::new(
            field,
            format!("the package's Deployment {PACKAGE_DEPLOYMENT} does not read Secret {PACKAGE_PASSWORDS_SECRET} as its environment, where the hashes go; set the static passwords in the package instead"),
        ));
    }
    let secret = patch::object_mut(objects, "Secret", PACKAGE_PASSWORDS_SECRET, field)?;
    let mut hashes = serde_json::Map::new();
    let mut entries = Vec::new();
    for (i, password) in passwords.iter().enumerate() {
        let text = |key: &str| password.get(key).and_then(Yaml::as_str).unwrap_or_default().to_string();
        let var = format!("{PACKAGE_PASSWORD_VAR}{i}");
        hashes.insert(var.clone(), json!(text("hash")));
        entries.push(json!({"email": text("email"), "hashFromEnv": var, "username": text("username"), "userID": text("userID")}));
    }
    let fields = secret.as_object_mut().expect("a Secret is an object");
    fields.remove("data");
    fields.insert("stringData".into(), Value::Object(hashes));
    Ok(entries)
}

/// Where the static client of release `version` redirects to; an unknown version (refused by the
/// framework before it asks) gets the oldest releases' value.
fn redirect_uri(version: &str) -> &'static str {
    RELEASES
        .iter()
        .find(|r| r.version == version)
        .and_then(|r| r.params.iter().find(|(name, _)| *name == REDIRECT_PARAM))
        .map_or(AUTHSERVICE_REDIRECT_URI, |(_, value)| value)
}

/// Dex serves its health check under its issuer's path (`http://dex.auth…:5556/dex` answers on
/// `/dex/healthz`, `https://login.example.com` on `/healthz`). An HTTP readiness probe of the
/// Dex Deployment (the templates from v2.41.1 on) is pointed there, from the issuer of the
/// configuration as installed (a wholesale `dexConfig` override included), so that any issuer a
/// spec may set keeps the pods ready. A configuration without a readable issuer is left as it is:
/// Dex refuses to start on it anyway.
fn follow_issuer_in_health_checks(objects: &mut [Value]) {
    let config = objects
        .iter()
        .find(|o| o["kind"] == "Secret" && o["metadata"]["name"] == "dex-config")
        .and_then(|secret| secret["stringData"]["config.yaml"].as_str())
        .and_then(|text| serde_yaml_ng::from_str::<Yaml>(text).ok());
    let Some(path) = config.as_ref().and_then(|c| c.get("issuer")).and_then(Yaml::as_str).and_then(health_path) else { return };
    let deployments = objects.iter_mut().filter(|o| o["kind"] == "Deployment" && o["metadata"]["name"] == "dex");
    for deployment in deployments {
        let containers = deployment["spec"]["template"]["spec"]["containers"].as_array_mut().into_iter().flatten();
        for probe in containers.filter(|c| c["name"] == "dex").filter_map(|c| c.pointer_mut("/readinessProbe/httpGet")) {
            probe["path"] = Value::String(path.clone());
        }
    }
}

/// `<issuer path>/healthz` for an `http(s)://host[:port][/path]` issuer.
fn health_path(issuer: &str) -> Option<String> {
    let rest = issuer.strip_prefix("https://").or_else(|| issuer.strip_prefix("http://"))?;
    let path = rest.find('/').map_or("", |slash| &rest[slash..]);
    Some(format!("{}/healthz", path.trim_end_matches('/')))
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

/// The static passwords `spec.staticPasswordsSecretRef` names, if any.
fn spec_static_passwords(resource: &Dex, inputs: &Inputs) -> Result<Option<Vec<Yaml>>, InvalidSpec> {
    let Some(reference) = &resource.spec.static_passwords_secret_ref else { return Ok(None) };
    // The framework has dereferenced it: a missing Secret or key never gets here.
    let text = inputs.secret(reference).ok_or_else(|| {
        InvalidSpec::new(STATIC_PASSWORDS_FIELD, format!("Secret {:?} key {:?} has not been read yet", reference.name, reference.key)).retryable()
    })?;
    static_passwords(reference, text).map(Some)
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
fn dex_config(issuer: &str, client_secret: &str, redirect_uri: &str, connectors: Vec<Yaml>, static_passwords: Option<Vec<Yaml>>) -> String {
    let client = mapping([
        ("id", CLIENT_ID.into()),
        ("name", "Dex Login Application".into()),
        ("secret", client_secret.into()),
        ("redirectURIs", Yaml::Sequence(vec![redirect_uri.into()])),
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
            assert_eq!(device.iter().all(|d| crds.contains(&d.to_string())), release.version != "v2.22.0");
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

    const MODERN: [&str; 2] = ["v2.41.1", "v2.44.0"];

    fn build(spec: Value) -> Vec<Value> {
        desired_objects::<DexComponent>(&dex(spec), &Inputs::default()).unwrap()
    }

    fn crds(objects: &[Value]) -> Vec<Value> {
        objects.iter().filter(|o| o["kind"] == "CustomResourceDefinition").cloned().collect()
    }

    fn readiness_probe(objects: &[Value]) -> Value {
        find(objects, "Deployment", "dex")["spec"]["template"]["spec"]["containers"][0]["readinessProbe"].clone()
    }

    #[test]
    fn kubeflow_1_10_and_1_11_releases_and_their_edges() {
        let table: Vec<_> = DexComponent::releases().iter().map(|r| (r.version, r.upgrades_from, r.kubeflow)).collect();
        assert_eq!(
            table,
            [
                ("v2.22.0", &[][..], &["1.2"][..]),
                ("v2.24.0", &["v2.22.0"][..], &["1.3"][..]),
                ("v2.41.1", &[][..], &["1.10"][..]),
                ("v2.44.0", &["v2.41.1"][..], &["1.11"][..]),
            ]
        );
        for (version, image) in [("v2.41.1", "ghcr.io/dexidp/dex:v2.41.1"), ("v2.44.0", "ghcr.io/dexidp/dex:v2.44.0")] {
            let objects = build(json!({"version": version}));
            let deployment = find(&objects, "Deployment", "dex");
            let pod = &deployment["spec"]["template"]["spec"];
            assert_eq!(pod["containers"][0]["image"], image);
            assert_eq!(deployment["metadata"]["labels"]["components.kubeflow.org/version"], version);
            assert_eq!(deployment["spec"]["selector"], json!({"matchLabels": {"app": "dex"}}));
            assert_eq!(deployment["spec"]["template"]["metadata"]["labels"], json!({"app": "dex"}));
            assert_eq!(find(&objects, "Service", "dex")["spec"]["selector"], json!({"app": "dex"}));
            assert_eq!(
                pod["containers"][0]["securityContext"],
                json!({"allowPrivilegeEscalation": false, "runAsNonRoot": true, "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"}})
            );
            assert_eq!(pod["containers"][0]["env"][0]["name"], "KUBERNETES_POD_NAMESPACE");
            assert_eq!(pod["serviceAccountName"], "dex");
            assert_eq!(pod["volumes"][0]["secret"], json!({"secretName": "dex-config", "items": [{"key": "config.yaml", "path": "config.yaml"}]}));
            assert_eq!(readiness_probe(&objects)["httpGet"], json!({"path": "/dex/healthz", "port": "http"}));
            assert_eq!(
                find(&objects, "ClusterRole", "dex-auth")["rules"],
                json!([{"apiGroups": ["dex.coreos.com"], "resources": ["*"], "verbs": ["*"]},
                       {"apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"], "verbs": ["create"]}])
            );
            // Dex only: oauth2-proxy is installed on its own, as oidc-authservice was.
            assert!(objects.iter().all(|o| o["metadata"]["name"] != "oauth2-proxy" && o["metadata"]["namespace"] != "oauth2-proxy"));
            assert_eq!(objects.len(), 1 + 10 + 5 + 1, "{version}: namespace, CRDs, SA/roles/Secret/Service, Deployment");
        }
        // v2.41.1 → v2.44.0 is in place: the Deployment differs in its image alone, its selector is kept.
        let comparable = |version: &str| {
            let mut deployment = find(&build(json!({"version": version})), "Deployment", "dex").clone();
            deployment["spec"]["template"]["spec"]["containers"][0]["image"] = json!("");
            deployment["metadata"]["labels"]["components.kubeflow.org/version"] = json!("");
            deployment["metadata"]["annotations"]["components.kubeflow.org/applied-hash"] = json!("");
            deployment
        };
        assert_eq!(comparable("v2.41.1"), comparable("v2.44.0"));
    }

    #[test]
    fn modern_releases_ship_the_ten_storage_crds_shared_by_installs() {
        let expected = [
            "authcodes.dex.coreos.com", "authrequests.dex.coreos.com", "connectors.dex.coreos.com", "devicerequests.dex.coreos.com",
            "devicetokens.dex.coreos.com", "oauth2clients.dex.coreos.com", "offlinesessionses.dex.coreos.com", "passwords.dex.coreos.com",
            "refreshtokens.dex.coreos.com", "signingkeies.dex.coreos.com",
        ];
        let old = crds(&build(json!({"version": "v2.24.0"})));
        for version in MODERN {
            let here = build(json!({"version": version}));
            let mut names = names(&here, "CustomResourceDefinition");
            names.sort();
            assert_eq!(names, expected, "{version}");
            // A second install, elsewhere and into another namespace, renders them byte for byte.
            let elsewhere = desired_objects::<DexComponent>(
                &{
                    let mut other = dex(json!({"version": version, "targetNamespace": "login", "issuer": "https://login.example.com"}));
                    other.metadata.namespace = Some("other-team".into());
                    other
                },
                &Inputs::default(),
            )
            .unwrap();
            assert_eq!(crds(&here), crds(&elsewhere), "{version}");
            for crd in crds(&here) {
                assert_eq!(crd["metadata"]["labels"]["components.kubeflow.org/part-of"], "dex");
                assert!(crd["metadata"]["annotations"].get("components.kubeflow.org/owner").is_none(), "CRDs name no owner");
                // Same definitions as v2.24.0's: installs at either release share them unchanged.
                let before = old.iter().find(|o| o["metadata"]["name"] == crd["metadata"]["name"]).unwrap();
                assert_eq!(crd["spec"], before["spec"], "{version} {}", crd["metadata"]["name"]);
                assert_eq!(crd["spec"]["scope"], "Namespaced");
                assert_eq!(crd["spec"]["group"], "dex.coreos.com");
            }
        }
    }

    #[test]
    fn modern_releases_install_the_same_spec_with_oauth2_proxy_as_the_client() {
        let reference = json!({"name": "dex-users", "key": "passwords.yaml"});
        let specs = [
            json!({}),
            json!({"targetNamespace": "login",
                   "connectors": [{"type": "github", "id": "gh", "name": "GitHub", "config": {"clientID": "abc", "clientSecret": "$GITHUB_SECRET", "orgs": [{"name": "kubeflow"}]}},
                                  {"type": "ldap", "id": "corp", "name": "Corp LDAP"}],
                   "staticPasswordsSecretRef": reference}),
            json!({"issuer": "https://kubeflow.example.com/dex", "overrides": {"parameters": [{"name": "clientSecret", "value": "s3cret"}]}}),
        ];
        let secrets = inputs("dex-users", "passwords.yaml", PASSWORDS);
        for spec in specs {
            let config = |version: &str| {
                let mut spec = spec.clone();
                spec["version"] = json!(version);
                installed_config(&desired_objects::<DexComponent>(&dex(spec), &secrets).unwrap())
            };
            let old = config("v2.24.0");
            assert_eq!(old["staticClients"][0]["redirectURIs"], json!(["/login/oidc"]));
            for version in MODERN {
                let mut new = config(version);
                assert_eq!(new["staticClients"][0]["id"], "kubeflow-oidc-authservice");
                assert_eq!(new["staticClients"][0]["redirectURIs"], json!(["/oauth2/callback"]), "{version}");
                // All else is what v2.24.0 installs for the same spec.
                new["staticClients"][0]["redirectURIs"] = json!(["/login/oidc"]);
                assert_eq!(new, old, "{version} {spec}");
            }
        }
        // The connectors and static users of the spec, as they land for v2.44.0.
        let spec = json!({"version": "v2.44.0",
                          "connectors": [{"type": "oidc", "id": "sso", "name": "SSO", "config": {"issuer": "https://sso.example.com", "clientID": "kubeflow"}}],
                          "staticPasswordsSecretRef": reference});
        let config = installed_config(&desired_objects::<DexComponent>(&dex(spec), &secrets).unwrap());
        assert_eq!(config["connectors"], json!([{"type": "oidc", "id": "sso", "name": "SSO", "config": {"issuer": "https://sso.example.com", "clientID": "kubeflow"}}]));
        assert_eq!(
            config["staticPasswords"],
            json!([{"email": "admin@kubeflow.org", "hash": "$2y$12$ruoM7FqXrpVgaol44eRZW.4HWS8SAvg6KYVVSCIwKQPBmTpCm.EeO", "username": "admin", "userID": "08a8684b-db88-4b73-90a9-3cd1661f5466"}])
        );
        assert_eq!(config["issuer"], "http://dex.auth.svc.cluster.local:5556/dex");
        assert_eq!(config["storage"], json!({"type": "kubernetes", "config": {"inCluster": true}}));
        // Bad input is refused the same way.
        let err = desired_objects::<DexComponent>(
            &dex(json!({"version": "v2.41.1", "connectors": [{"type": "github", "id": "gh", "name": "a"}, {"type": "ldap", "id": "gh", "name": "b"}]})),
            &Inputs::default(),
        )
        .unwrap_err();
        assert_eq!(err.field, "spec.connectors[1].id");
        let err = desired_objects::<DexComponent>(&dex(json!({"version": "v2.45.0"})), &Inputs::default()).unwrap_err();
        assert!(err.message.contains("supported versions: v2.22.0, v2.24.0, v2.41.1, v2.44.0"), "{err}");
    }

    #[test]
    fn the_health_check_follows_the_installed_issuer() {
        let path = |spec: Value| readiness_probe(&build(spec))["httpGet"]["path"].as_str().unwrap().to_string();
        assert_eq!(path(json!({"version": "v2.41.1"})), "/dex/healthz");
        assert_eq!(path(json!({"version": "v2.41.1", "issuer": "https://login.example.com"})), "/healthz");
        assert_eq!(path(json!({"version": "v2.44.0", "issuer": "https://kubeflow.example.com/dex/"})), "/dex/healthz");
        assert_eq!(path(json!({"version": "v2.44.0", "issuer": "http://kubeflow.example.com:8080/auth/dex"})), "/auth/dex/healthz");
        let replaced = json!({"version": "v2.44.0", "overrides": {"parameters": [{"name": "dexConfig", "value": "issuer: https://elsewhere/sso\n"}]}});
        assert_eq!(path(replaced), "/sso/healthz");
        // The Kubeflow 1.2/1.3 releases keep their port check.
        for version in ["v2.22.0", "v2.24.0"] {
            let probe = readiness_probe(&build(json!({"version": version, "issuer": "https://login.example.com"})));
            assert_eq!(probe, json!({"tcpSocket": {"port": "http"}, "initialDelaySeconds": 2}));
        }
    }

    /// A package whose Dex keeps its hashes in the ConfigMap (kfctl's era): the passwords are
    /// refused, naming the field, rather than written into a ConfigMap or dropped.
    #[test]
    fn static_passwords_on_a_package_without_dexs_password_secret_are_refused() {
        let resource = dex(json!({"version": "v2.22.0", "sources": [{"application": "dex", "repoUri": "https://example.com/m.tar.gz", "path": "dex-auth/dex-crds/base"}],
                                  "staticPasswordsSecretRef": {"name": "dex-users", "key": "users.yaml"}}));
        let config = "issuer: http://dex.auth.svc.cluster.local:5556/dex\nstaticPasswords:\n- email: admin@kubeflow.org\n  hash: x\n";
        let package = || vec![
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "dex"}, "data": {"config.yaml": config}}),
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "dex"}, "spec": {"template": {"spec": {"containers": [{"name": "dex", "image": "dex"}]}}}}),
        ];
        let mut objects = package();
        // Built from the package: the objects are rendered ones.
        let from_package = |inputs: Inputs| Inputs { rendered: Some(Default::default()), ..inputs };
        let refused = DexComponent::customize(&resource, &from_package(inputs("dex-users", "users.yaml", PASSWORDS)), &mut objects).unwrap_err();
        assert_eq!(refused.field, "spec.staticPasswordsSecretRef");
        assert!(refused.message.contains("dex-passwords"), "{}", refused.message);
        assert_eq!(objects, package(), "nothing is changed");
        // Not read yet: retried, not refused.
        let waiting = DexComponent::customize(&resource, &from_package(Inputs::default()), &mut package()).unwrap_err();
        assert!(waiting.retry, "{waiting:?}");
    }
}
