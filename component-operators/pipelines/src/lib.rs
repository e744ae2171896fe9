//! Kubeflow Pipelines, covering the KfDef applications `api-service`, `pipelines-ui`,
//! `pipelines-viewer`, `persistent-agent`, `scheduledworkflow`, `pipeline-visualization-service`,
//! `pipelines-runner`, `minio`, `mysql`, `argo` and `metadata`.
//!
//! Releases 1.0.4 (Kubeflow 1.2) and 1.5.0 (Kubeflow 1.3) share one template. 1.5.0 moves Argo from
//! v2.3.0 to v2.12.9 (adding the `workflowtemplates` and `cronworkflows` CRDs), MySQL from 5.6 to
//! 5.7 (an in-place upgrade from 5.6), adds the ML Metadata store (`metadata-grpc-deployment`) and the step cache
//! (`cache-server` with its opt-in pod webhook), and relabels the UI (its Deployment selector
//! changes, so an upgrade replaces that Deployment).
//!
//! Releases 2.5.0 (Kubeflow 1.10) and 2.15.0 (Kubeflow 1.11) share a second template, shaped like
//! upstream's KFP 2 manifests: images from `ghcr.io/kubeflow/kfp-*`, the v2 driver and launcher
//! (`kfp-launcher` ConfigMap: where v2 runs keep artifacts), the metadata envoy and writer, and
//! Argo Workflows with all eight of its CRDs, its controller limited to the install's namespace.
//! 2.5.0 is a fresh install (upstream has no upgrade from Kubeflow 1.3's Pipelines 1.5.0 to it);
//! 2.15.0 upgrades 2.5.0. Between them Argo moves from v3.5.14 to v3.7.3, MySQL from 8.0 to 8.4
//! (an in-place upgrade; 8.4 needs `mysql_native_password` switched on for the metadata store), and
//! the built-in object store from MinIO to SeaweedFS (release parameter `objectStoreServer`).
//! SeaweedFS (Deployment `seaweedfs`, claim `seaweedfs-pvc`) takes over Service `minio-service`
//! and Secret `mlpipeline-minio-artifact`, so every client keeps its endpoint and credentials, but
//! it starts empty: an upgrade deletes MinIO's Deployment and keeps its claim (`minio-pvc`, never
//! pruned), and copying the objects over is the user's manual step, as upstream's release notes
//! ask: back up MinIO's data before upgrading (or serve the kept claim from a MinIO of one's own
//! afterwards), copy it into SeaweedFS with an S3 client, then delete the claim.
//!
//! Storage is built in by default (MySQL and MinIO or SeaweedFS, with 20Gi claims).
//! `spec.database.host` points Pipelines at an external MySQL instead (`secretRef` holds the
//! password; the user is the `dbUser` parameter, `root` unless overridden);
//! `spec.objectStore.endpoint` at an external S3-compatible store, with no built-in store at all,
//! written `host`, `host:port` or `http(s)://host[:port]` (no scheme means
//! HTTPS on 443 unless another port is given). Its Secret holds the access key ID under
//! `accesskey` and the secret access key under `secretRef.key` (upstream calls it `secretkey`).
//! A `secretRef` without a host or endpoint gives the built-in store those credentials. In 2.x, v2
//! pipeline runs keep artifacts under `minio://<bucket>/v2/artifacts` on the built-in store and
//! `s3://<bucket>/v2/artifacts` on an external one (its region is the `objectStoreRegion`
//! parameter, `us-east-1` unless overridden).

use component_framework::api::Pipelines;
use component_framework::api::component::SecretKeyRef;
use component_framework::build::target_namespace;
use component_framework::package::patch;
use component_framework::{Component, InvalidSpec, Inputs, Params, Release};
use component_framework::k8s_openapi::serde_json::Value;

pub struct PipelinesComponent;

const TEMPLATE: &str = include_str!("../manifests/pipelines.yaml");
/// The KFP 2.x object set (Kubeflow 1.10 and later).
const TEMPLATE_V2: &str = include_str!("../manifests/pipelines-v2.yaml");

/// Key of the object store Secret that holds the access key ID (as in upstream's
/// `mlpipeline-minio-artifact`).
const ACCESS_KEY_KEY: &str = "accesskey";

/// Release parameters of 1.5.0 and 1.5.1.
const PIPELINES_1_5_PARAMS: &[(&str, &str)] = &[
    ("argoVersion", "v2.12.9"),
    // 5.6 → 5.7 is an in-place MySQL upgrade; 5.6 → 8.0 is not.
    ("mysqlImage", "gcr.io/ml-pipeline/mysql:5.7"),
    ("uiNameLabelKey", "app.kubernetes.io/name"),
    ("uiNameLabelValue", "kubeflow-pipelines"),
    ("argoTemplateCrds", "true"),
    ("cacheAndMetadata", "true"),
];

static RELEASES: [Release; 5] = [
    Release {
        version: "1.0.4",
        manifest: TEMPLATE,
        params: &[
            ("argoVersion", "v2.3.0"),
            ("mysqlImage", "mysql:5.6"),
            // Repeats `app`, so the UI selector stays {app: ml-pipeline-ui}.
            ("uiNameLabelKey", "app"),
            ("uiNameLabelValue", "ml-pipeline-ui"),
            ("argoTemplateCrds", "false"),
            ("cacheAndMetadata", "false"),
        ],
        upgrades_from: &[],
        kubeflow: &["1.2"],
    },
    Release {
        version: "1.5.0",
        manifest: TEMPLATE,
        params: PIPELINES_1_5_PARAMS,
        upgrades_from: &["1.0.4"],
        kubeflow: &["1.3"],
    },
    // Kubeflow 1.3.1's; 1.5.0's template.
    Release {
        version: "1.5.1",
        manifest: TEMPLATE,
        params: PIPELINES_1_5_PARAMS,
        upgrades_from: &["1.0.4", "1.5.0"],
        kubeflow: &["1.3.1"],
    },
    Release {
        version: "2.5.0",
        manifest: TEMPLATE_V2,
        params: &[
            ("objectStoreServer", "minio"),
            ("objectStoreTargetPort", "9000"),
            ("argoVersion", "v3.5.14"),
            ("mysqlImage", "mysql:8.0.26"),
            // MySQL 8.0 takes one flag; the second slot repeats it (the same value either way).
            ("mysqlAuthArg", "--default-authentication-plugin=mysql_native_password"),
            ("mysqlAuthArg2", "--default-authentication-plugin=mysql_native_password"),
        ],
        // Kubeflow 1.3 → 1.10 is no upgrade upstream supports: a fresh install.
        upgrades_from: &[],
        kubeflow: &["1.10"],
    },
    Release {
        version: "2.15.0",
        manifest: TEMPLATE_V2,
        params: &[
            // SeaweedFS's S3 gateway listens on 8333, behind minio-service's port 9000.
            ("objectStoreServer", "seaweedfs"),
            ("objectStoreTargetPort", "8333"),
            ("argoVersion", "v3.7.3"),
            // 8.0 → 8.4 is an in-place MySQL upgrade (LTS to LTS).
            ("mysqlImage", "mysql:8.4"),
            // 8.4 drops --default-authentication-plugin and loads mysql_native_password only on request.
            ("mysqlAuthArg", "--authentication-policy=mysql_native_password"),
            ("mysqlAuthArg2", "--mysql-native-password=ON"),
        ],
        upgrades_from: &["2.5.0"],
        kubeflow: &["1.11"],
    },
];

/// The object store `version` runs when the spec names no external one (its `objectStoreServer`
/// parameter; none for 1.x releases, whose template always runs MinIO).
fn builtin_object_store_server(version: &str) -> Option<&'static str> {
    let release = RELEASES.iter().find(|r| r.version == version)?;
    release.params.iter().find(|(k, _)| *k == "objectStoreServer").map(|(_, v)| *v)
}

fn params(pairs: &[(&str, &str)]) -> Params {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

/// Whether `name` is a valid S3 bucket name (the CRD already bounds its length to 3–63).
fn valid_bucket(name: &str) -> bool {
    let allowed = name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'.' || b == b'-');
    let alnum = |b: Option<u8>| b.is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
    (3..=63).contains(&name.len()) && allowed && alnum(name.bytes().next()) && alnum(name.bytes().last()) && !name.contains("..")
}

/// An external object store endpoint: host, port and whether it speaks TLS.
fn parse_endpoint(endpoint: &str) -> Result<(String, u16, bool), InvalidSpec> {
    let invalid = || {
        InvalidSpec::new(
            "spec.objectStore.endpoint",
            format!("{endpoint:?} is not an object store endpoint; allowed: host, host:port, http://host[:port] or https://host[:port]"),
        )
    };
    let (scheme, rest) = match endpoint.split_once("://") {
        Some((scheme @ ("http" | "https"), rest)) => (Some(scheme), rest),
        Some(_) => return Err(invalid()),
        None => (None, endpoint),
    };
    let rest = rest.strip_suffix('/').unwrap_or(rest);
    let (host, port) = match rest.rsplit_once(':') {
        Some((host, port)) => (host, Some(port.parse::<u16>().ok().filter(|p| *p > 0).ok_or_else(invalid)?)),
        None => (rest, None),
    };
    let host_ok = !host.is_empty() && host.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-');
    if !host_ok {
        return Err(invalid());
    }
    let secure = match scheme {
        Some(scheme) => scheme == "https",
        None => port.is_none_or(|p| p == 443),
    };
    let port = port.unwrap_or(if secure { 443 } else { 80 });
    Ok((host.to_string(), port, secure))
}

/// Where upstream's package keeps the database: the host and port entries of
/// `pipeline-install-config` (`dbHost`/`dbPort` in every release; `mysqlHost`/`mysqlPort` too from
/// KFP 2.x), which every workload reads, and the password in Secret `mysql-secret`.
const PACKAGE_CONFIG: &str = "pipeline-install-config";
const PACKAGE_DB_HOST_KEYS: [&str; 2] = ["dbHost", "mysqlHost"];
const PACKAGE_DB_PORT_KEYS: [&str; 2] = ["dbPort", "mysqlPort"];
const PACKAGE_DB_SECRET: (&str, &str) = ("mysql-secret", "password");
/// The package's own MySQL, which an external database replaces.
const PACKAGE_MYSQL: [(&str, &str); 4] = [("Deployment", "mysql"), ("Service", "mysql"), ("PersistentVolumeClaim", "mysql-pv-claim"), ("ServiceAccount", "mysql")];

/// The package's object store Secret and its two keys, which every workload of the package reads
/// (the API server, the UI, the built-in MinIO, the profile controller that copies them into each
/// profile's namespace for its runs and artifact server).
const PACKAGE_STORE_SECRET: &str = "mlpipeline-minio-artifact";
const PACKAGE_STORE_SECRET_KEY: &str = "secretkey";
/// Argo's configuration, whose `artifactRepository` names the bucket runs write to.
const PACKAGE_ARGO_CONFIG: &str = "workflow-controller-configmap";

/// `spec.database` and `spec.objectStore` on upstream's package ([`patch_database`],
/// [`patch_object_store`]).
fn patch_package(resource: &Pipelines, objects: &mut Vec<Value>) -> Result<(), InvalidSpec> {
    patch_database(resource, objects)?;
    patch_object_store(resource, objects)
}

/// `spec.database` on upstream's package: the host and port in its install config, every reference
/// to its password pointed at `secretRef`, its own MySQL taken out. The user name stays the
/// package's (`mysql-secret`'s `username`).
fn patch_database(resource: &Pipelines, objects: &mut Vec<Value>) -> Result<(), InvalidSpec> {
    let db = &resource.spec.database;
    let Some(host) = &db.host else {
        if db.secret_ref.is_some() || db.port.is_some() {
            return Err(InvalidSpec::new("spec.database", "on packages applies to an external database only: set spec.database.host too"));
        }
        return Ok(());
    };
    let config = patch::object_mut(objects, "ConfigMap", PACKAGE_CONFIG, "spec.database.host")?;
    let present = |keys: &[&'static str]| keys.iter().copied().filter(|k| !config["data"][*k].is_null()).collect::<Vec<_>>();
    let (host_keys, port_keys) = (present(&PACKAGE_DB_HOST_KEYS), present(&PACKAGE_DB_PORT_KEYS));
    if host_keys.is_empty() {
        return Err(InvalidSpec::new("spec.database.host", format!("the package's ConfigMap {PACKAGE_CONFIG} has none of {PACKAGE_DB_HOST_KEYS:?}, where this setting goes; set it in the package instead")));
    }
    let port = db.port.unwrap_or(3306).to_string();
    let entries: Vec<(&str, String)> = host_keys.iter().map(|k| (*k, host.clone())).chain(port_keys.iter().map(|k| (*k, port.clone()))).collect();
    patch::set_config_entries(objects, PACKAGE_CONFIG, &entries, "spec.database.host")?;
    patch::use_external_password(objects, PACKAGE_DB_SECRET, db.secret_ref.as_ref())?;
    patch::remove(objects, &PACKAGE_MYSQL);
    Ok(())
}

/// `spec.objectStore` on upstream's package, for its built-in store:
/// - `secretRef`: every reference to the package's store Secret points at the spec's (the access
///   key ID under `accesskey`, the secret key under `secretRef.key`), the built-in MinIO's own
///   included, so the store and its clients share the credentials; the profile controller copies
///   them into each profile's namespace.
/// - `bucket`: the install config's `bucketName` (the API server's), Argo's artifact repository,
///   the UI's log archive, and the v2 pipeline root (`minio://<bucket>/v2/artifacts`, which the
///   profile controller writes into each profile's `kfp-launcher`).
///
/// An external `endpoint` is refused: upstream's profile controller (`sync.py`, code in a
/// ConfigMap) gives each profile namespace an artifact server with the built-in store's address
/// written in, so runs and the UI of every profile would keep reading the built-in store.
fn patch_object_store(resource: &Pipelines, objects: &mut [Value]) -> Result<(), InvalidSpec> {
    let store = &resource.spec.object_store;
    if store.endpoint.is_some() {
        return Err(InvalidSpec::new(
            "spec.objectStore.endpoint",
            "is not applied to upstream's package: its profile controller (sync.py) gives every profile namespace an artifact server that reads the built-in store's address, so set the endpoint in the package (e.g. its env/aws overlay); spec.objectStore.bucket and secretRef apply to the package's built-in store",
        ));
    }
    if let Some(secret) = &store.secret_ref {
        check_store_secret_key(secret)?;
        let field = "spec.objectStore.secretRef";
        let to_access = SecretKeyRef { name: secret.name.clone(), key: ACCESS_KEY_KEY.to_string() };
        let moved = patch::retarget_secret_key_refs(objects, PACKAGE_STORE_SECRET, ACCESS_KEY_KEY, &to_access) + patch::retarget_secret_key_refs(objects, PACKAGE_STORE_SECRET, PACKAGE_STORE_SECRET_KEY, secret);
        if moved == 0 {
            return Err(InvalidSpec::new(field, format!("no workload of the package reads Secret {PACKAGE_STORE_SECRET}, where this setting goes; set it in the package instead")));
        }
    }
    if let Some(bucket) = &store.bucket {
        check_bucket(bucket)?;
        let field = "spec.objectStore.bucket";
        let config = patch::object_mut(objects, "ConfigMap", PACKAGE_CONFIG, field)?;
        if config["data"]["bucketName"].is_null() {
            return Err(InvalidSpec::new(field, format!("the package's ConfigMap {PACKAGE_CONFIG} has no bucketName, where this setting goes; set it in the package instead")));
        }
        patch::set_config_entries(objects, PACKAGE_CONFIG, &[("bucketName", bucket.clone()), ("defaultPipelineRoot", format!("minio://{bucket}/v2/artifacts"))], field)?;
        let mut argo_bucket = Ok(());
        patch::edit_yaml_entry(objects, PACKAGE_ARGO_CONFIG, "artifactRepository", field, |repository| match repository.get_mut("s3").and_then(Value::as_object_mut) {
            Some(s3) => {
                s3.insert("bucket".into(), Value::String(bucket.clone()));
            }
            None => argo_bucket = Err(InvalidSpec::new(field, format!("the artifactRepository of the package's ConfigMap {PACKAGE_ARGO_CONFIG} has no s3 store, where this setting goes; set it in the package instead"))),
        })?;
        argo_bucket?;
        patch::set_env(objects, "Deployment", "ml-pipeline-ui", "ml-pipeline-ui", &[("ARGO_ARCHIVE_BUCKETNAME", Value::String(bucket.clone()))], field)?;
    }
    Ok(())
}

/// The access key ID is read from key `accesskey` of the store Secret: the secret key needs another.
fn check_store_secret_key(secret: &SecretKeyRef) -> Result<(), InvalidSpec> {
    if secret.key == ACCESS_KEY_KEY {
        return Err(InvalidSpec::new(
            "spec.objectStore.secretRef.key",
            format!("names the key holding the secret access key; the access key ID is read from key {ACCESS_KEY_KEY:?} of the same Secret, so use another key (e.g. secretkey)"),
        ));
    }
    Ok(())
}

fn check_bucket(bucket: &str) -> Result<(), InvalidSpec> {
    if !valid_bucket(bucket) {
        return Err(InvalidSpec::new(
            "spec.objectStore.bucket",
            format!("{bucket:?} is not a valid S3 bucket name; allowed: 3-63 lowercase letters, digits, dots and hyphens, starting and ending with a letter or digit, no \"..\""),
        ));
    }
    Ok(())
}

impl Component for PipelinesComponent {
    type Resource = Pipelines;
    const DEFAULT_NAMESPACE: &'static str = "kubeflow";
    const DISPLAY_NAME: &'static str = "Kubeflow Pipelines";
    const INSTALLS: &'static str = "Kubeflow Pipelines: API server, UI, persistence agent, scheduled workflows, MySQL and object storage";
    /// A resource made from a KfDef renders the KfDef's packages, upstream's objects.
    const RENDERS_PACKAGES: bool = true;
    /// The kinds upstream's packages of these releases install.
    const INSTALLED_KINDS: &'static [&'static str] = &["ClusterRole", "ClusterRoleBinding", "ConfigMap", "CustomResourceDefinition", "Deployment", "MutatingWebhookConfiguration", "Namespace", "NetworkPolicy", "PersistentVolumeClaim", "PriorityClass", "Role", "RoleBinding", "Secret", "Service", "ServiceAccount", "StatefulSet"];
    /// The releases' packages in Kubeflow's archives (paths as their KfDefs and
    /// `example/kustomization.yaml` list them; Kubeflow 1.2's are in kfctl's `kubeflow-apps` stack).
    const UPSTREAM_RELEASES: &'static [component_framework::UpstreamRelease] = &[
        component_framework::UpstreamRelease {
            version: "1.0.4",
            kubeflow: "v1.2.0",
            applications: &[("pipeline-minio", "pipeline/minio/installs/generic"), ("pipeline-mysql", "pipeline/mysql/installs/generic"), ("pipeline", "pipeline/installs/multi-user"), ("argo", "argo/base_v3")],
        },
        component_framework::UpstreamRelease { version: "1.5.0", kubeflow: "v1.3.0", applications: &[("pipeline", "apps/pipeline/upstream/env/platform-agnostic-multi-user")] },
        component_framework::UpstreamRelease { version: "1.5.1", kubeflow: "v1.3.1", applications: &[("pipeline", "apps/pipeline/upstream/env/platform-agnostic-multi-user")] },
        component_framework::UpstreamRelease { version: "2.5.0", kubeflow: "v1.10.2", applications: &[("pipeline", "applications/pipeline/upstream/env/cert-manager/platform-agnostic-multi-user")] },
        component_framework::UpstreamRelease { version: "2.15.0", kubeflow: "v1.11.0", applications: &[("pipeline", "applications/pipeline/upstream/env/cert-manager/platform-agnostic-multi-user")] },
    ];
    /// The API server's image, before and after it moved to ghcr.io.
    const VERSION_IMAGES: &'static [&'static str] = &["ml-pipeline/api-server", "kubeflow/kfp-api-server"];
    const PACKAGE_FIELDS: &'static [&'static str] = &["database", "objectStore"];

    fn releases() -> &'static [Release] {
        &RELEASES
    }

    fn secret_refs(resource: &Pipelines) -> Vec<(String, SecretKeyRef)> {
        let mut refs = Vec::new();
        if let Some(r) = &resource.spec.database.secret_ref {
            refs.push(("spec.database.secretRef".to_string(), r.clone()));
        }
        if let Some(r) = &resource.spec.object_store.secret_ref {
            refs.push(("spec.objectStore.secretRef".to_string(), r.clone()));
            // The access key ID lives beside the secret key; a missing one is reported up front.
            refs.push(("spec.objectStore.secretRef".to_string(), SecretKeyRef { name: r.name.clone(), key: ACCESS_KEY_KEY.to_string() }));
        }
        refs
    }

    fn default_parameters() -> Params {
        params(&[
            ("builtinDatabase", "true"),
            ("builtinDatabasePassword", "pipelines"),
            ("dbHost", "mysql"),
            ("dbPort", "3306"),
            ("dbUser", "root"),
            ("dbSecretName", "mysql-secret"),
            ("dbSecretKey", "password"),
            ("pipelineDb", "mlpipeline"),
            ("mlmdDb", "metadb"),
            ("cacheDb", "cachedb"),
            ("mysqlPvcName", "mysql-pv-claim"),
            ("builtinObjectStore", "true"),
            ("builtinObjectStoreAccessKey", "minio"),
            ("builtinObjectStoreSecretKey", "minio123"),
            // Namespace-dependent: parameters() sets it for the target namespace.
            ("objectStoreEndpoint", "minio-service.kubeflow"),
            ("objectStorePort", "9000"),
            ("objectStoreSecure", "false"),
            ("objectStoreInsecure", "true"),
            ("objectStoreSecretName", "mlpipeline-minio-artifact"),
            ("objectStoreSecretKey", "secretkey"),
            ("bucket", "mlpipeline"),
            ("minioPvcName", "minio-pvc"),
            // 2.x: which built-in store runs. parameters() sets both from the release's
            // objectStoreServer and the spec; both true here so the objects a release can ship
            // (rendered without a spec) include either store.
            ("builtinMinio", "true"),
            ("builtinSeaweedfs", "true"),
            // 2.x: the scheme of v2 pipeline roots, minio:// for the built-in store, s3:// otherwise.
            ("objectStoreScheme", "minio"),
            ("objectStoreRegion", "us-east-1"),
        ])
    }

    fn parameters(resource: &Pipelines, _inputs: &Inputs) -> Result<Params, InvalidSpec> {
        let db = &resource.spec.database;
        let store = &resource.spec.object_store;
        let mut p = Params::new();

        match &db.host {
            Some(host) => {
                p.insert("builtinDatabase".into(), "false".into());
                p.insert("dbHost".into(), host.clone());
                p.insert("dbPort".into(), db.port.unwrap_or(3306).to_string());
            }
            None if db.port.is_some() => {
                return Err(InvalidSpec::new("spec.database.port", "applies to an external database; set spec.database.host too (the built-in MySQL listens on 3306)"));
            }
            None => {}
        }
        if let Some(secret) = &db.secret_ref {
            // The framework has dereferenced it: a missing Secret or key never gets here.
            p.insert("dbSecretName".into(), secret.name.clone());
            p.insert("dbSecretKey".into(), secret.key.clone());
        }

        if let Some(bucket) = &store.bucket {
            check_bucket(bucket)?;
            p.insert("bucket".into(), bucket.clone());
        }
        match &store.endpoint {
            Some(endpoint) => {
                let (host, port, secure) = parse_endpoint(endpoint)?;
                p.insert("builtinObjectStore".into(), "false".into());
                p.insert("objectStoreEndpoint".into(), host);
                p.insert("objectStorePort".into(), port.to_string());
                p.insert("objectStoreSecure".into(), secure.to_string());
                p.insert("objectStoreInsecure".into(), (!secure).to_string());
            }
            None => {
                let namespace = target_namespace::<PipelinesComponent>(resource);
                p.insert("objectStoreEndpoint".into(), format!("minio-service.{namespace}"));
            }
        }
        let builtin = store.endpoint.is_none();
        let server = builtin_object_store_server(&resource.spec.core.version);
        p.insert("builtinMinio".into(), (builtin && server == Some("minio")).to_string());
        p.insert("builtinSeaweedfs".into(), (builtin && server == Some("seaweedfs")).to_string());
        p.insert("objectStoreScheme".into(), if builtin { "minio" } else { "s3" }.into());
        if let Some(secret) = &store.secret_ref {
            check_store_secret_key(secret)?;
            p.insert("objectStoreSecretName".into(), secret.name.clone());
            p.insert("objectStoreSecretKey".into(), secret.key.clone());
        }
        Ok(p)
    }

    fn customize(resource: &Pipelines, inputs: &Inputs, objects: &mut Vec<Value>) -> Result<(), InvalidSpec> {
        if inputs.from_packages() {
            patch_package(resource, objects)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use component_framework::build::desired_objects;
    use serde_json::{Value, json};

    fn pipelines(spec: Value) -> Pipelines {
        let mut p: Pipelines = serde_json::from_value(json!({
            "apiVersion": "components.kubeflow.org/v1alpha1", "kind": "Pipelines",
            "metadata": {"name": "pipelines", "namespace": "team"}, "spec": spec,
        }))
        .unwrap();
        p.metadata.uid = Some("uid".into());
        p
    }

    fn build(spec: Value) -> Vec<Value> {
        desired_objects::<PipelinesComponent>(&pipelines(spec), &Inputs::default()).unwrap()
    }

    fn names(objects: &[Value], kind: &str) -> Vec<String> {
        objects.iter().filter(|o| o["kind"] == kind).map(|o| o["metadata"]["name"].as_str().unwrap().to_string()).collect()
    }

    fn find<'a>(objects: &'a [Value], kind: &str, name: &str) -> &'a Value {
        objects.iter().find(|o| o["kind"] == kind && o["metadata"]["name"] == name).unwrap_or_else(|| panic!("no {kind} {name}"))
    }

    fn env<'a>(deployment: &'a Value, name: &str) -> &'a Value {
        let list = deployment["spec"]["template"]["spec"]["containers"][0]["env"].as_array().unwrap();
        list.iter().find(|e| e["name"] == name).unwrap_or_else(|| panic!("no env {name}"))
    }

    /// A resource made from a KfDef names its application's package: the operator renders that
    /// package. `database` and `objectStore` are applied to it (`patch_package`), a field the
    /// package would not get is refused, naming the field; without a repository the built-in
    /// release is installed.
    #[test]
    fn a_resource_that_names_packages_refuses_the_fields_only_the_built_in_release_applies() {
        use component_framework::package::{check_fields, names_packages};
        let source = json!([{"application": "pipeline", "repoUri": "https://github.com/kubeflow/manifests/archive/v1.10.2.tar.gz", "path": "applications/pipeline/upstream/env/cert-manager/platform-agnostic-multi-user"}]);
        let from_kfdef = pipelines(json!({"version": "2.5.0", "sources": source, "era": "Upstream", "overrides": {"replicas": {"ml-pipeline": 2}}}));
        assert!(names_packages(&from_kfdef));
        assert_eq!(check_fields::<PipelinesComponent>(&from_kfdef), Ok(()), "core fields (overrides included) apply to packages");
        let with_database = pipelines(json!({"version": "2.5.0", "sources": source, "database": {"host": "mysql.example.com", "secretRef": {"name": "db", "key": "pw"}}}));
        assert_eq!(check_fields::<PipelinesComponent>(&with_database), Ok(()), "the database is patched into packages");
        let with_store = pipelines(json!({"version": "2.5.0", "sources": source, "objectStore": {"bucket": "team", "secretRef": {"name": "s3", "key": "secretkey"}}}));
        assert_eq!(check_fields::<PipelinesComponent>(&with_store), Ok(()), "the object store is patched into packages");
        // No repository: the built-in release, where the field applies.
        let built_in = pipelines(json!({"version": "2.5.0", "sources": [{"application": "pipeline", "path": "apps/pipeline"}], "objectStore": {"endpoint": "s3.example.com"}}));
        assert!(!names_packages(&built_in));
    }

    /// The store settings on a package, each where the package keeps it; what the package cannot
    /// take (an external endpoint, a secret key under `accesskey`, a package without the store
    /// Secret) is refused naming the field. Upstream's own package: `registry/tests/upstream.rs`.
    #[test]
    fn object_store_settings_on_a_package_land_where_the_package_keeps_them() {
        let resource = |store: Value| pipelines(json!({"version": "2.5.0", "sources": [{"application": "pipeline", "repoUri": "https://example.com/m.tar.gz", "path": "p"}], "objectStore": store}));
        let package = || {
            let reads = |variable: &str, key: &str| json!({"name": variable, "valueFrom": {"secretKeyRef": {"name": "mlpipeline-minio-artifact", "key": key}}});
            let deployment = |name: &str, env: Vec<Value>| json!({"kind": "Deployment", "metadata": {"name": name}, "spec": {"template": {"spec": {"containers": [{"name": name, "env": env}]}}}});
            vec![
                json!({"kind": "ConfigMap", "metadata": {"name": "pipeline-install-config"}, "data": {"bucketName": "mlpipeline", "defaultPipelineRoot": ""}}),
                json!({"kind": "ConfigMap", "metadata": {"name": "workflow-controller-configmap"}, "data": {"artifactRepository": "s3:\n  bucket: mlpipeline\n  endpoint: minio-service.kubeflow:9000\n"}}),
                deployment("ml-pipeline", vec![reads("OBJECTSTORECONFIG_ACCESSKEY", "accesskey"), reads("OBJECTSTORECONFIG_SECRETACCESSKEY", "secretkey")]),
                deployment("ml-pipeline-ui", vec![]),
            ]
        };
        let mut objects = package();
        patch_package(&resource(json!({"bucket": "team", "secretRef": {"name": "s3", "key": "sk"}})), &mut objects).unwrap();
        assert_eq!(objects[0]["data"], json!({"bucketName": "team", "defaultPipelineRoot": "minio://team/v2/artifacts"}));
        assert_eq!(objects[1]["data"]["artifactRepository"], "s3:\n  bucket: team\n  endpoint: minio-service.kubeflow:9000\n");
        let env = |o: &Value| o["spec"]["template"]["spec"]["containers"][0]["env"].clone();
        assert_eq!(env(&objects[2])[0]["valueFrom"]["secretKeyRef"], json!({"name": "s3", "key": "accesskey"}));
        assert_eq!(env(&objects[2])[1]["valueFrom"]["secretKeyRef"], json!({"name": "s3", "key": "sk"}));
        assert_eq!(env(&objects[3]), json!([{"name": "ARGO_ARCHIVE_BUCKETNAME", "value": "team"}]));

        for (store, field) in [
            (json!({"endpoint": "s3.example.com"}), "spec.objectStore.endpoint"),
            (json!({"secretRef": {"name": "s3", "key": "accesskey"}}), "spec.objectStore.secretRef.key"),
            (json!({"bucket": "Not_A_Bucket"}), "spec.objectStore.bucket"),
        ] {
            let mut objects = package();
            assert_eq!(patch_package(&resource(store.clone()), &mut objects).unwrap_err().field, field, "{store}");
        }
        let mut without_secret = package()[..2].to_vec();
        let refused = patch_package(&resource(json!({"secretRef": {"name": "s3", "key": "sk"}})), &mut without_secret).unwrap_err();
        assert_eq!(refused.field, "spec.objectStore.secretRef");
        assert!(refused.message.contains("no workload of the package reads Secret mlpipeline-minio-artifact"), "{}", refused.message);
    }

    const COMMON: [&str; 9] = [
        "ml-pipeline",
        "ml-pipeline-persistenceagent",
        "ml-pipeline-scheduledworkflow",
        "ml-pipeline-ui",
        "ml-pipeline-viewer-crd",
        "ml-pipeline-visualizationserver",
        "workflow-controller",
        "mysql",
        "minio",
    ];

    #[test]
    fn every_release_builds_a_full_object_set() {
        // The 1.x template; 2.x releases have their own tests below.
        for release in PipelinesComponent::releases().iter().filter(|r| r.version.starts_with("1.")) {
            let objects = build(json!({"version": release.version}));
            let v15 = release.version.starts_with("1.5.");
            let mut deployments = COMMON.to_vec();
            if v15 {
                deployments.extend(["metadata-grpc-deployment", "cache-server"]);
            }
            assert_eq!(names(&objects, "Deployment"), deployments, "{}", release.version);

            let mut crds = vec!["scheduledworkflows.kubeflow.org", "viewers.kubeflow.org", "workflows.argoproj.io"];
            if v15 {
                crds.extend(["workflowtemplates.argoproj.io", "cronworkflows.argoproj.io"]);
            }
            assert_eq!(names(&objects, "CustomResourceDefinition"), crds);
            assert_eq!(names(&objects, "PersistentVolumeClaim"), ["mysql-pv-claim", "minio-pvc"]);
            assert_eq!(names(&objects, "Secret"), ["mysql-secret", "mlpipeline-minio-artifact"]);
            assert!(names(&objects, "Service").contains(&"mysql".to_string()));
            assert!(names(&objects, "Service").contains(&"minio-service".to_string()));
            assert_eq!(names(&objects, "Service").contains(&"metadata-grpc-service".to_string()), v15);
            assert!(names(&objects, "ClusterRole").iter().all(|n| n.ends_with("-kubeflow")));
            assert!(names(&objects, "ClusterRoleBinding").iter().all(|n| n.ends_with("-kubeflow")));
            let webhooks = names(&objects, "MutatingWebhookConfiguration");
            assert_eq!(webhooks, if v15 { vec!["cache-webhook-kubeflow"] } else { vec![] });

            let api = find(&objects, "Deployment", "ml-pipeline");
            assert_eq!(api["metadata"]["namespace"], "kubeflow");
            assert_eq!(api["spec"]["template"]["spec"]["containers"][0]["image"], format!("gcr.io/ml-pipeline/api-server:{}", release.version));
            assert_eq!(api["metadata"]["labels"]["components.kubeflow.org/part-of"], "pipelines");
            assert_eq!(api["metadata"]["annotations"]["components.kubeflow.org/owner"], "team/pipelines");
            assert_eq!(env(api, "DBCONFIG_HOST")["value"], "mysql");
            assert_eq!(env(api, "OBJECTSTORECONFIG_HOST")["value"], "minio-service.kubeflow");

            let argo = find(&objects, "Deployment", "workflow-controller");
            let tag = if v15 { "v2.12.9" } else { "v2.3.0" };
            assert_eq!(argo["spec"]["template"]["spec"]["containers"][0]["image"], format!("argoproj/workflow-controller:{tag}"));
            let mysql = find(&objects, "Deployment", "mysql");
            assert_eq!(mysql["spec"]["template"]["spec"]["containers"][0]["image"], if v15 { "gcr.io/ml-pipeline/mysql:5.7" } else { "mysql:5.6" });

            let install = find(&objects, "ConfigMap", "pipeline-install-config");
            assert_eq!(install["data"]["appVersion"], release.version);
            assert_eq!(install["data"]["bucketName"], "mlpipeline");
            let argo_config = find(&objects, "ConfigMap", "workflow-controller-configmap")["data"]["config"].as_str().unwrap();
            assert!(argo_config.contains("endpoint: \"minio-service.kubeflow:9000\""), "{argo_config}");
            assert!(argo_config.contains("{{workflow.name}}"));

            // Objects come out in apply order: namespace first, webhooks last.
            assert_eq!(objects.first().unwrap()["kind"], "Namespace");
            assert_eq!(objects.last().unwrap()["kind"], if v15 { "MutatingWebhookConfiguration" } else { "Deployment" });
            assert!(!serde_json::to_string(&objects).unwrap().contains("${"), "unrendered reference in {}", release.version);
        }
    }

    #[test]
    fn cache_webhook_never_reaches_pods_that_did_not_opt_in() {
        let objects = build(json!({"version": "1.5.0", "targetNamespace": "ml"}));
        let hook = &find(&objects, "MutatingWebhookConfiguration", "cache-webhook-ml")["webhooks"][0];
        assert_eq!(hook["failurePolicy"], "Ignore");
        assert_eq!(hook["objectSelector"], json!({"matchLabels": {"pipelines.kubeflow.org/cache_enabled": "true"}}));
        assert_eq!(hook["namespaceSelector"], json!({"matchLabels": {"pipelines.kubeflow.org/enabled": "true"}}));
        assert_eq!(hook["clientConfig"]["service"]["namespace"], "ml");
    }

    #[test]
    fn ui_selector_changes_between_releases() {
        let selector = |v: &str| find(&build(json!({"version": v})), "Deployment", "ml-pipeline-ui")["spec"]["selector"].clone();
        assert_eq!(selector("1.0.4"), json!({"matchLabels": {"app": "ml-pipeline-ui"}}));
        assert_eq!(selector("1.5.0"), json!({"matchLabels": {"app": "ml-pipeline-ui", "app.kubernetes.io/name": "kubeflow-pipelines"}}));
        let service = find(&build(json!({"version": "1.5.0"})), "Service", "ml-pipeline-ui")["spec"]["selector"].clone();
        assert_eq!(service, selector("1.5.0")["matchLabels"]);
    }

    #[test]
    fn external_database_and_object_store_drop_the_builtin_ones() {
        let spec = json!({
            "version": "1.5.0", "targetNamespace": "ml",
            "database": {"host": "db.example.com", "port": 3307, "secretRef": {"name": "db", "key": "pw"}},
            "objectStore": {"endpoint": "https://s3.example.com", "bucket": "team.artifacts", "secretRef": {"name": "s3", "key": "secret"}},
        });
        let objects = build(spec);
        let deployments = names(&objects, "Deployment");
        assert!(!deployments.contains(&"mysql".to_string()) && !deployments.contains(&"minio".to_string()), "{deployments:?}");
        let services = names(&objects, "Service");
        assert!(!services.contains(&"mysql".to_string()) && !services.contains(&"minio-service".to_string()), "{services:?}");
        assert!(names(&objects, "PersistentVolumeClaim").is_empty());
        assert!(names(&objects, "Secret").is_empty());

        let api = find(&objects, "Deployment", "ml-pipeline");
        assert_eq!(api["metadata"]["namespace"], "ml");
        assert_eq!(env(api, "DBCONFIG_HOST")["value"], "db.example.com");
        assert_eq!(env(api, "DBCONFIG_PORT")["value"], "3307");
        assert_eq!(env(api, "DBCONFIG_PASSWORD")["valueFrom"]["secretKeyRef"], json!({"name": "db", "key": "pw"}));
        assert_eq!(env(api, "OBJECTSTORECONFIG_HOST")["value"], "s3.example.com");
        assert_eq!(env(api, "OBJECTSTORECONFIG_PORT")["value"], "443");
        assert_eq!(env(api, "OBJECTSTORECONFIG_SECURE")["value"], "true");
        assert_eq!(env(api, "OBJECTSTORECONFIG_BUCKETNAME")["value"], "team.artifacts");
        assert_eq!(env(api, "OBJECTSTORECONFIG_ACCESSKEY")["valueFrom"]["secretKeyRef"], json!({"name": "s3", "key": "accesskey"}));
        assert_eq!(env(api, "OBJECTSTORECONFIG_SECRETACCESSKEY")["valueFrom"]["secretKeyRef"], json!({"name": "s3", "key": "secret"}));
        let cache = find(&objects, "Deployment", "cache-server");
        assert_eq!(env(cache, "DBCONFIG_HOST")["value"], "db.example.com");

        let argo_config = find(&objects, "ConfigMap", "workflow-controller-configmap")["data"]["config"].as_str().unwrap();
        assert!(argo_config.contains("endpoint: \"s3.example.com:443\""), "{argo_config}");
        assert!(argo_config.contains("insecure: false"), "{argo_config}");
        assert!(argo_config.contains("bucket: \"team.artifacts\""), "{argo_config}");
        assert_eq!(find(&objects, "ConfigMap", "pipeline-install-config")["data"]["dbHost"], "db.example.com");
    }

    #[test]
    fn secret_refs_cover_both_stores() {
        let spec = json!({"version": "1.5.0", "database": {"host": "db", "secretRef": {"name": "db", "key": "pw"}}, "objectStore": {"endpoint": "s3:9000", "secretRef": {"name": "s3", "key": "secretkey"}}});
        let refs: Vec<(String, String, String)> =
            PipelinesComponent::secret_refs(&pipelines(spec)).into_iter().map(|(f, r)| (f, r.name, r.key)).collect();
        let expected = [("spec.database.secretRef", "db", "pw"), ("spec.objectStore.secretRef", "s3", "secretkey"), ("spec.objectStore.secretRef", "s3", "accesskey")];
        assert_eq!(refs, expected.map(|(f, n, k)| (f.to_string(), n.to_string(), k.to_string())));
        assert!(PipelinesComponent::secret_refs(&pipelines(json!({"version": "1.5.0"}))).is_empty());
    }

    #[test]
    fn builtin_stores_follow_the_target_namespace_and_kfdef_parameters() {
        let spec = json!({
            "version": "1.0.4", "targetNamespace": "ml",
            "objectStore": {"bucket": "runs"},
            "sources": [{"application": "minio", "parameters": [{"name": "minioPvcName", "value": "minio-pv-claim"}]}],
        });
        let objects = build(spec);
        assert_eq!(names(&objects, "PersistentVolumeClaim"), ["mysql-pv-claim", "minio-pv-claim"]);
        let minio = find(&objects, "Deployment", "minio");
        assert_eq!(minio["spec"]["template"]["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"], "minio-pv-claim");
        let ui = find(&objects, "Deployment", "ml-pipeline-ui");
        assert_eq!(env(ui, "MINIO_HOST")["value"], "minio-service.ml");
        assert_eq!(env(ui, "ARGO_ARCHIVE_BUCKETNAME")["value"], "runs");
        assert_eq!(names(&objects, "ClusterRole")[0], "ml-pipeline-ml");
    }

    #[test]
    fn endpoints_parse_into_host_port_and_tls() {
        let ok = |e: &str| parse_endpoint(e).unwrap();
        assert_eq!(ok("s3.amazonaws.com"), ("s3.amazonaws.com".into(), 443, true));
        assert_eq!(ok("minio.storage:9000"), ("minio.storage".into(), 9000, false));
        assert_eq!(ok("http://minio.storage"), ("minio.storage".into(), 80, false));
        assert_eq!(ok("https://s3.local:8443/"), ("s3.local".into(), 8443, true));
        for bad in ["ftp://x", "s3:port", "https://s3/bucket", "", "host:0"] {
            assert_eq!(parse_endpoint(bad).unwrap_err().field, "spec.objectStore.endpoint", "{bad}");
        }
    }

    #[test]
    fn bad_input_names_the_field_and_the_allowed_values() {
        let check = |spec: Value, field: &str, needle: &str| {
            let err = desired_objects::<PipelinesComponent>(&pipelines(spec), &Inputs::default()).unwrap_err();
            assert_eq!(err.field, field);
            assert!(err.message.contains(needle), "{err}");
        };
        check(json!({"version": "v1.5.0"}), "spec.version", "supported versions: 1.0.4, 1.5.0");
        check(json!({"version": "1.5.0", "objectStore": {"bucket": "My_Bucket"}}), "spec.objectStore.bucket", "allowed: 3-63 lowercase letters, digits, dots and hyphens");
        check(json!({"version": "1.5.0", "objectStore": {"bucket": "-runs"}}), "spec.objectStore.bucket", "starting and ending with a letter or digit");
        check(json!({"version": "1.5.0", "objectStore": {"endpoint": "s3://x", "secretRef": {"name": "a", "key": "b"}}}), "spec.objectStore.endpoint", "allowed: host, host:port");
        check(json!({"version": "1.5.0", "objectStore": {"endpoint": "x", "secretRef": {"name": "a", "key": "accesskey"}}}), "spec.objectStore.secretRef.key", "secretkey");
        check(json!({"version": "1.5.0", "database": {"port": 3307}}), "spec.database.port", "spec.database.host");
        check(json!({"version": "1.5.0", "overrides": {"images": {"api-server": "x"}}}), "spec.overrides.images.api-server", "ml-pipeline-api-server");
        check(json!({"version": "1.0.4", "overrides": {"replicas": {"cache-server": 2}}}), "spec.overrides.replicas.cache-server", "ml-pipeline-ui");
        check(json!({"version": "1.5.0", "overrides": {"parameters": [{"name": "nope", "value": "1"}]}}), "spec.overrides.parameters[0].name", "objectStoreEndpoint");
    }

    #[test]
    fn overrides_set_images_replicas_and_parameters() {
        let spec = json!({"version": "1.5.0", "overrides": {
            "images": {"ml-pipeline-api-server": "registry.local/api-server:patched"},
            "replicas": {"ml-pipeline": 2},
            "parameters": [{"name": "dbUser", "value": "kfp"}],
        }});
        let objects = build(spec);
        let api = find(&objects, "Deployment", "ml-pipeline");
        assert_eq!(api["spec"]["replicas"], 2);
        assert_eq!(api["spec"]["template"]["spec"]["containers"][0]["image"], "registry.local/api-server:patched");
        assert_eq!(env(api, "DBCONFIG_USER")["value"], "kfp");
    }

    // --- KFP 2.x (Kubeflow 1.10 and 1.11): expected values written from upstream's manifests.

    fn image(objects: &[Value], deployment: &str) -> String {
        find(objects, "Deployment", deployment)["spec"]["template"]["spec"]["containers"][0]["image"].as_str().unwrap().to_string()
    }

    const V2_DEPLOYMENTS: [&str; 13] = [
        "ml-pipeline",
        "ml-pipeline-persistenceagent",
        "ml-pipeline-scheduledworkflow",
        "ml-pipeline-ui",
        "ml-pipeline-viewer-crd",
        "ml-pipeline-visualizationserver",
        "workflow-controller",
        "mysql",
        "minio",
        "metadata-grpc-deployment",
        "metadata-envoy-deployment",
        "metadata-writer",
        "cache-server",
    ];

    const ARGO_CRDS: [&str; 8] = [
        "workflows.argoproj.io",
        "workflowtemplates.argoproj.io",
        "cronworkflows.argoproj.io",
        "workflowtaskresults.argoproj.io",
        "workflowtasksets.argoproj.io",
        "workflowartifactgctasks.argoproj.io",
        "clusterworkflowtemplates.argoproj.io",
        "workfloweventbindings.argoproj.io",
    ];

    #[test]
    fn kubeflow_1_10_and_1_11_releases_and_their_upgrade_edge() {
        let info = |v: &str| PipelinesComponent::releases().iter().find(|r| r.version == v).unwrap().info();
        let v25 = info("2.5.0");
        assert!(v25.upgrades_from.is_empty(), "1.5.0 → 2.5.0 is a fresh install");
        assert_eq!(v25.kubeflow, ["1.10"]);
        let v215 = info("2.15.0");
        assert_eq!(v215.upgrades_from, ["2.5.0"]);
        assert_eq!(v215.kubeflow, ["1.11"]);
        let versions: Vec<&str> = PipelinesComponent::releases().iter().map(|r| r.version).collect();
        assert_eq!(versions, ["1.0.4", "1.5.0", "1.5.1", "2.5.0", "2.15.0"], "oldest first");
        assert_eq!(info("1.5.1").kubeflow, ["1.3.1"]);
        assert_eq!(info("1.5.1").upgrades_from, ["1.0.4", "1.5.0"]);
    }

    #[test]
    fn kfp_2_5_0_runs_kfp_images_argo_3_5_mysql_8_0_and_minio() {
        let objects = build(json!({"version": "2.5.0"}));
        assert_eq!(names(&objects, "Deployment"), V2_DEPLOYMENTS);
        let images = [
            ("ml-pipeline", "ghcr.io/kubeflow/kfp-api-server:2.5.0"),
            ("ml-pipeline-persistenceagent", "ghcr.io/kubeflow/kfp-persistence-agent:2.5.0"),
            ("ml-pipeline-scheduledworkflow", "ghcr.io/kubeflow/kfp-scheduled-workflow-controller:2.5.0"),
            ("ml-pipeline-ui", "ghcr.io/kubeflow/kfp-frontend:2.5.0"),
            ("ml-pipeline-viewer-crd", "ghcr.io/kubeflow/kfp-viewer-crd-controller:2.5.0"),
            ("ml-pipeline-visualizationserver", "ghcr.io/kubeflow/kfp-visualization-server:2.5.0"),
            ("workflow-controller", "quay.io/argoproj/workflow-controller:v3.5.14"),
            ("mysql", "mysql:8.0.26"),
            ("minio", "gcr.io/ml-pipeline/minio:RELEASE.2019-08-14T20-37-41Z-license-compliance"),
            ("metadata-grpc-deployment", "gcr.io/tfx-oss-public/ml_metadata_store_server:1.14.0"),
            ("metadata-envoy-deployment", "ghcr.io/kubeflow/kfp-metadata-envoy:2.5.0"),
            ("metadata-writer", "ghcr.io/kubeflow/kfp-metadata-writer:2.5.0"),
            ("cache-server", "ghcr.io/kubeflow/kfp-cache-server:2.5.0"),
        ];
        for (deployment, expected) in images {
            assert_eq!(image(&objects, deployment), expected, "{deployment}");
        }
        let argo = &find(&objects, "Deployment", "workflow-controller")["spec"]["template"]["spec"]["containers"][0];
        assert_eq!(argo["args"], json!(["--configmap", "workflow-controller-configmap", "--executor-image", "quay.io/argoproj/argoexec:v3.5.14", "--namespaced"]));
        let api = find(&objects, "Deployment", "ml-pipeline");
        assert_eq!(env(api, "V2_DRIVER_IMAGE")["value"], "ghcr.io/kubeflow/kfp-driver:2.5.0");
        assert_eq!(env(api, "V2_LAUNCHER_IMAGE")["value"], "ghcr.io/kubeflow/kfp-launcher:2.5.0");
        assert_eq!(env(api, "DB_DRIVER_NAME")["value"], "mysql");
        assert_eq!(env(api, "DBCONFIG_MYSQLCONFIG_HOST")["value"], "mysql");
        let mysql = &find(&objects, "Deployment", "mysql")["spec"]["template"]["spec"]["containers"][0];
        assert!(mysql["args"].as_array().unwrap().contains(&json!("--default-authentication-plugin=mysql_native_password")), "{}", mysql["args"]);
        assert_eq!(find(&objects, "ConfigMap", "pipeline-install-config")["data"]["appVersion"], "2.5.0");

        // MinIO serves minio-service from its own claim, with upstream's Secret.
        assert_eq!(names(&objects, "PersistentVolumeClaim"), ["mysql-pv-claim", "minio-pvc"]);
        assert_eq!(names(&objects, "Secret"), ["mysql-secret", "mlpipeline-minio-artifact"]);
        let service = find(&objects, "Service", "minio-service");
        assert_eq!(service["spec"]["selector"], json!({"app": "minio"}));
        assert_eq!(service["spec"]["ports"], json!([{"name": "http", "port": 9000, "protocol": "TCP", "targetPort": 9000}]));
        let minio = find(&objects, "Deployment", "minio");
        assert_eq!(minio["spec"]["template"]["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"], "minio-pvc");
        assert!(!names(&objects, "Deployment").contains(&"seaweedfs".to_string()));
        assert!(!names(&objects, "ServiceAccount").contains(&"seaweedfs".to_string()));
        assert!(!serde_json::to_string(&objects).unwrap().contains("${"), "unrendered reference");
    }

    #[test]
    fn kfp_2_15_0_runs_argo_3_7_mysql_8_4_and_seaweedfs_behind_minio_service() {
        let objects = build(json!({"version": "2.15.0", "targetNamespace": "ml"}));
        let mut deployments = V2_DEPLOYMENTS.to_vec();
        deployments[8] = "seaweedfs";
        assert_eq!(names(&objects, "Deployment"), deployments);
        assert_eq!(image(&objects, "ml-pipeline"), "ghcr.io/kubeflow/kfp-api-server:2.15.0");
        assert_eq!(image(&objects, "ml-pipeline-ui"), "ghcr.io/kubeflow/kfp-frontend:2.15.0");
        assert_eq!(image(&objects, "ml-pipeline-persistenceagent"), "ghcr.io/kubeflow/kfp-persistence-agent:2.15.0");
        assert_eq!(image(&objects, "ml-pipeline-scheduledworkflow"), "ghcr.io/kubeflow/kfp-scheduled-workflow-controller:2.15.0");
        assert_eq!(image(&objects, "metadata-envoy-deployment"), "ghcr.io/kubeflow/kfp-metadata-envoy:2.15.0");
        assert_eq!(image(&objects, "cache-server"), "ghcr.io/kubeflow/kfp-cache-server:2.15.0");
        assert_eq!(image(&objects, "workflow-controller"), "quay.io/argoproj/workflow-controller:v3.7.3");
        assert_eq!(find(&objects, "Deployment", "workflow-controller")["spec"]["template"]["spec"]["containers"][0]["args"][3], "quay.io/argoproj/argoexec:v3.7.3");
        assert_eq!(image(&objects, "mysql"), "mysql:8.4");
        let mysql_args = &find(&objects, "Deployment", "mysql")["spec"]["template"]["spec"]["containers"][0]["args"];
        assert_eq!(
            mysql_args,
            &json!(["--datadir", "/var/lib/mysql/datadir", "--authentication-policy=mysql_native_password", "--mysql-native-password=ON", "--disable-log-bin"])
        );
        assert_eq!(image(&objects, "seaweedfs"), "chrislusf/seaweedfs:4.00");

        // SeaweedFS takes over minio-service (same name and port, its S3 gateway behind it), and
        // has its own claim; MinIO and its claim are gone from the object set.
        let service = find(&objects, "Service", "minio-service");
        assert_eq!(service["metadata"]["namespace"], "ml");
        assert_eq!(service["spec"]["selector"], json!({"app": "seaweedfs"}));
        assert_eq!(service["spec"]["ports"], json!([{"name": "http", "port": 9000, "protocol": "TCP", "targetPort": 8333}]));
        let seaweedfs = find(&objects, "Deployment", "seaweedfs");
        assert_eq!(seaweedfs["spec"]["selector"]["matchLabels"], json!({"app": "seaweedfs"}));
        assert_eq!(seaweedfs["spec"]["template"]["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"], "seaweedfs-pvc");
        assert_eq!(env(seaweedfs, "accesskey")["valueFrom"]["secretKeyRef"], json!({"name": "mlpipeline-minio-artifact", "key": "accesskey"}));
        assert_eq!(env(seaweedfs, "secretkey")["valueFrom"]["secretKeyRef"], json!({"name": "mlpipeline-minio-artifact", "key": "secretkey"}));
        let post_start = seaweedfs["spec"]["template"]["spec"]["containers"][0]["lifecycle"]["postStart"]["exec"]["command"][2].as_str().unwrap();
        assert!(post_start.contains("s3.bucket.create --name mlpipeline"), "{post_start}");
        assert!(post_start.contains("-access_key $accesskey -secret_key $secretkey"), "{post_start}");
        assert_eq!(names(&objects, "PersistentVolumeClaim"), ["mysql-pv-claim", "seaweedfs-pvc"]);
        assert_eq!(names(&objects, "Secret"), ["mysql-secret", "mlpipeline-minio-artifact"]);
        assert!(!names(&objects, "Deployment").contains(&"minio".to_string()));

        // Clients keep the endpoint MinIO had.
        let api = find(&objects, "Deployment", "ml-pipeline");
        assert_eq!(env(api, "OBJECTSTORECONFIG_HOST")["value"], "minio-service.ml");
        assert_eq!(env(api, "OBJECTSTORECONFIG_PORT")["value"], "9000");
        assert_eq!(env(find(&objects, "Deployment", "ml-pipeline-ui"), "MINIO_HOST")["value"], "minio-service.ml");
        let repository = find(&objects, "ConfigMap", "workflow-controller-configmap")["data"]["artifactRepository"].as_str().unwrap();
        assert!(repository.contains("endpoint: \"minio-service.ml:9000\""), "{repository}");
        assert!(repository.contains("insecure: true"), "{repository}");
        let launcher = &find(&objects, "ConfigMap", "kfp-launcher")["data"];
        assert_eq!(launcher["defaultPipelineRoot"], "minio://mlpipeline/v2/artifacts");
        let providers = "minio:\n  default:\n    endpoint: \"minio-service.ml:9000\"\n    region: \"us-east-1\"\n    disableSSL: true\n    credentials:\n      fromEnv: false\n      secretRef:\n        secretName: \"mlpipeline-minio-artifact\"\n        accessKeyKey: accesskey\n        secretKeyKey: \"secretkey\"\n";
        assert_eq!(launcher["providers"], providers);
        assert!(!serde_json::to_string(&objects).unwrap().contains("${"), "unrendered reference");
    }

    #[test]
    fn upgrading_2_5_0_to_2_15_0_swaps_the_store_behind_minio_service_and_keeps_the_rest() {
        let before = build(json!({"version": "2.5.0"}));
        let after = build(json!({"version": "2.15.0"}));
        let ids = |objects: &[Value]| -> Vec<(String, String)> {
            objects.iter().map(|o| (o["kind"].as_str().unwrap().to_string(), o["metadata"]["name"].as_str().unwrap().to_string())).collect()
        };
        let (before_ids, after_ids) = (ids(&before), ids(&after));
        let left: Vec<_> = before_ids.iter().filter(|id| !after_ids.contains(id)).collect();
        let came: Vec<_> = after_ids.iter().filter(|id| !before_ids.contains(id)).collect();
        let pair = |k: &str, n: &str| (k.to_string(), n.to_string());
        // The framework prunes MinIO's Deployment; it never prunes a claim, so minio-pvc stays.
        assert_eq!(left, [&pair("PersistentVolumeClaim", "minio-pvc"), &pair("Deployment", "minio")]);
        assert_eq!(came, [&pair("ServiceAccount", "seaweedfs"), &pair("PersistentVolumeClaim", "seaweedfs-pvc"), &pair("Deployment", "seaweedfs")]);
        // Every Deployment both releases have keeps its selector: the upgrade patches in place.
        for deployment in names(&before, "Deployment").iter().filter(|d| names(&after, "Deployment").contains(d)) {
            assert_eq!(find(&before, "Deployment", deployment)["spec"]["selector"], find(&after, "Deployment", deployment)["spec"]["selector"], "{deployment}");
        }
        // The Secret both stores read is the same object with the same keys.
        assert_eq!(find(&before, "Secret", "mlpipeline-minio-artifact")["data"], find(&after, "Secret", "mlpipeline-minio-artifact")["data"]);
    }

    #[test]
    fn argo_crds_are_complete_and_identical_across_installs() {
        let crds = |spec: Value| -> Vec<Value> {
            build(spec).into_iter().filter(|o| o["kind"] == "CustomResourceDefinition").collect()
        };
        for version in ["2.5.0", "2.15.0"] {
            let a = crds(json!({"version": version}));
            let b = crds(json!({"version": version, "targetNamespace": "team-b", "database": {"host": "db", "secretRef": {"name": "db", "key": "pw"}}}));
            let mut expected = vec!["scheduledworkflows.kubeflow.org", "viewers.kubeflow.org"];
            expected.extend(ARGO_CRDS);
            assert_eq!(names(&a, "CustomResourceDefinition"), expected, "{version}");
            // Shared by every install: no owner, no namespace, nothing that depends on the spec.
            assert_eq!(a, b, "{version}");
            for crd in &a {
                assert!(crd["metadata"]["annotations"].get("components.kubeflow.org/owner").is_none(), "{}", crd["metadata"]["name"]);
                assert_eq!(crd["metadata"]["labels"]["components.kubeflow.org/version"], version);
                assert_eq!(crd["spec"]["versions"][0]["name"], if crd["spec"]["group"] == "argoproj.io" { "v1alpha1" } else { "v1beta1" });
            }
            let scope = |name: &str| find(&a, "CustomResourceDefinition", name)["spec"]["scope"].clone();
            assert_eq!(scope("clusterworkflowtemplates.argoproj.io"), "Cluster");
            assert_eq!(scope("workflowtaskresults.argoproj.io"), "Namespaced");
        }
        // Both releases ship the same CRD specs: an upgrade only relabels them.
        let spec_of = |crds: Vec<Value>| crds.into_iter().map(|c| c["spec"].clone()).collect::<Vec<_>>();
        assert_eq!(spec_of(crds(json!({"version": "2.5.0"}))), spec_of(crds(json!({"version": "2.15.0"}))));
    }

    #[test]
    fn v2_with_an_external_object_store_runs_no_minio_or_seaweedfs() {
        for version in ["2.5.0", "2.15.0"] {
            let spec = json!({
                "version": version, "targetNamespace": "ml",
                "objectStore": {"endpoint": "https://s3.example.com", "bucket": "team.artifacts", "secretRef": {"name": "s3", "key": "secret"}},
            });
            let objects = build(spec);
            let deployments = names(&objects, "Deployment");
            for store in ["minio", "seaweedfs"] {
                assert!(!deployments.contains(&store.to_string()), "{version}: {deployments:?}");
                assert!(!names(&objects, "ServiceAccount").contains(&store.to_string()), "{version}");
            }
            assert!(!names(&objects, "Service").contains(&"minio-service".to_string()), "{version}");
            assert_eq!(names(&objects, "PersistentVolumeClaim"), ["mysql-pv-claim"], "{version}");
            assert_eq!(names(&objects, "Secret"), ["mysql-secret"], "{version}");

            let api = find(&objects, "Deployment", "ml-pipeline");
            assert_eq!(env(api, "OBJECTSTORECONFIG_HOST")["value"], "s3.example.com");
            assert_eq!(env(api, "OBJECTSTORECONFIG_PORT")["value"], "443");
            assert_eq!(env(api, "OBJECTSTORECONFIG_SECURE")["value"], "true");
            assert_eq!(env(api, "OBJECTSTORECONFIG_BUCKETNAME")["value"], "team.artifacts");
            assert_eq!(env(api, "OBJECTSTORECONFIG_ACCESSKEY")["valueFrom"]["secretKeyRef"], json!({"name": "s3", "key": "accesskey"}));
            assert_eq!(env(api, "OBJECTSTORECONFIG_SECRETACCESSKEY")["valueFrom"]["secretKeyRef"], json!({"name": "s3", "key": "secret"}));
            let ui = find(&objects, "Deployment", "ml-pipeline-ui");
            assert_eq!(env(ui, "MINIO_HOST")["value"], "s3.example.com");
            assert_eq!(env(ui, "MINIO_SSL")["value"], "true");
            let repository = find(&objects, "ConfigMap", "workflow-controller-configmap")["data"]["artifactRepository"].as_str().unwrap();
            assert!(repository.contains("endpoint: \"s3.example.com:443\""), "{repository}");
            assert!(repository.contains("bucket: \"team.artifacts\""), "{repository}");
            assert!(repository.contains("insecure: false"), "{repository}");
            let launcher = &find(&objects, "ConfigMap", "kfp-launcher")["data"];
            assert_eq!(launcher["defaultPipelineRoot"], "s3://team.artifacts/v2/artifacts");
            let providers = "s3:\n  default:\n    endpoint: \"s3.example.com:443\"\n    region: \"us-east-1\"\n    disableSSL: false\n    credentials:\n      fromEnv: false\n      secretRef:\n        secretName: \"s3\"\n        accessKeyKey: accesskey\n        secretKeyKey: \"secret\"\n";
            assert_eq!(launcher["providers"], providers, "{version}");
        }
    }

    #[test]
    fn v2_builtin_store_takes_the_spec_credentials_and_bucket() {
        // A secretRef without an endpoint gives the built-in store those credentials, as in 1.x.
        let spec = json!({"version": "2.15.0", "objectStore": {"bucket": "runs", "secretRef": {"name": "store", "key": "sk"}}});
        let objects = build(spec);
        let seaweedfs = find(&objects, "Deployment", "seaweedfs");
        assert_eq!(env(seaweedfs, "accesskey")["valueFrom"]["secretKeyRef"], json!({"name": "store", "key": "accesskey"}));
        assert_eq!(env(seaweedfs, "secretkey")["valueFrom"]["secretKeyRef"], json!({"name": "store", "key": "sk"}));
        let post_start = seaweedfs["spec"]["template"]["spec"]["containers"][0]["lifecycle"]["postStart"]["exec"]["command"][2].as_str().unwrap();
        assert!(post_start.contains("s3.bucket.create --name runs"), "{post_start}");
        assert_eq!(find(&objects, "ConfigMap", "kfp-launcher")["data"]["defaultPipelineRoot"], "minio://runs/v2/artifacts");
        let minio = find(&build(json!({"version": "2.5.0", "objectStore": {"secretRef": {"name": "store", "key": "sk"}}})), "Deployment", "minio").clone();
        assert_eq!(env(&minio, "MINIO_SECRET_KEY")["valueFrom"]["secretKeyRef"], json!({"name": "store", "key": "sk"}));
    }

    #[test]
    fn v2_with_an_external_database_runs_no_mysql() {
        for version in ["2.5.0", "2.15.0"] {
            let spec = json!({"version": version, "database": {"host": "db.example.com", "port": 3307, "secretRef": {"name": "db", "key": "pw"}}});
            let objects = build(spec);
            assert!(!names(&objects, "Deployment").contains(&"mysql".to_string()), "{version}");
            assert!(!names(&objects, "Service").contains(&"mysql".to_string()), "{version}");
            assert!(!names(&objects, "ServiceAccount").contains(&"mysql".to_string()), "{version}");
            assert!(!names(&objects, "PersistentVolumeClaim").contains(&"mysql-pv-claim".to_string()), "{version}");
            assert_eq!(names(&objects, "Secret"), ["mlpipeline-minio-artifact"], "{version}");
            let api = find(&objects, "Deployment", "ml-pipeline");
            for (name, value) in [("DBCONFIG_HOST", "db.example.com"), ("DBCONFIG_PORT", "3307"), ("DBCONFIG_MYSQLCONFIG_HOST", "db.example.com"), ("DBCONFIG_MYSQLCONFIG_PORT", "3307"), ("DBCONFIG_USER", "root")] {
                assert_eq!(env(api, name)["value"], value, "{version} {name}");
            }
            for name in ["DBCONFIG_PASSWORD", "DBCONFIG_MYSQLCONFIG_PASSWORD"] {
                assert_eq!(env(api, name)["valueFrom"]["secretKeyRef"], json!({"name": "db", "key": "pw"}), "{version} {name}");
            }
            assert_eq!(env(find(&objects, "Deployment", "metadata-grpc-deployment"), "MYSQL_HOST")["value"], "db.example.com");
            assert_eq!(env(find(&objects, "Deployment", "cache-server"), "DBCONFIG_HOST_NAME")["value"], "db.example.com");
            let install = &find(&objects, "ConfigMap", "pipeline-install-config")["data"];
            assert_eq!((install["dbHost"].as_str(), install["dbPort"].as_str()), (Some("db.example.com"), Some("3307")));
        }
    }

    #[test]
    fn v2_cluster_scoped_objects_carry_the_namespace_and_overrides_apply() {
        let objects = build(json!({"version": "2.15.0", "targetNamespace": "ml", "overrides": {
            "images": {"seaweedfs": "registry.local/seaweedfs:4.00", "metadata-envoy": "registry.local/envoy:2.15.0"},
            "replicas": {"ml-pipeline-ui": 2},
        }}));
        for kind in ["ClusterRole", "ClusterRoleBinding", "MutatingWebhookConfiguration"] {
            let cluster_scoped = names(&objects, kind);
            assert!(!cluster_scoped.is_empty() && cluster_scoped.iter().all(|n| n.ends_with("-ml")), "{kind}: {cluster_scoped:?}");
        }
        assert_eq!(image(&objects, "seaweedfs"), "registry.local/seaweedfs:4.00");
        assert_eq!(image(&objects, "metadata-envoy-deployment"), "registry.local/envoy:2.15.0");
        assert_eq!(find(&objects, "Deployment", "ml-pipeline-ui")["spec"]["replicas"], 2);
        let argo = find(&objects, "ClusterRole", "argo-ml");
        let resources: Vec<&str> = argo["rules"].as_array().unwrap().iter().flat_map(|r| r["resources"].as_array().unwrap()).map(|r| r.as_str().unwrap()).collect();
        for resource in ["workflowtaskresults", "workflowtasksets", "workflowartifactgctasks"] {
            assert!(resources.contains(&resource), "{resource}");
        }
        assert_eq!(objects.first().unwrap()["kind"], "Namespace");
        assert_eq!(objects.last().unwrap()["kind"], "MutatingWebhookConfiguration");
    }
}
