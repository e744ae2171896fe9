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
//! Storage is built in by default (MySQL and MinIO with 20Gi claims). `spec.database.host` points
//! Pipelines at an external MySQL instead (`secretRef` holds the password; the user is the
//! `dbUser` parameter, `root` unless overridden); `spec.objectStore.endpoint` at an external
//! S3-compatible store, written `host`, `host:port` or `http(s)://host[:port]` (no scheme means
//! HTTPS on 443 unless another port is given). Its Secret holds the access key ID under
//! `accesskey` and the secret access key under `secretRef.key` (upstream calls it `secretkey`).
//! A `secretRef` without a host or endpoint gives the built-in store those credentials.

use component_framework::api::Pipelines;
use component_framework::api::component::SecretKeyRef;
use component_framework::build::target_namespace;
use component_framework::{Component, InvalidSpec, Inputs, Params, Release};

pub struct PipelinesComponent;

const TEMPLATE: &str = include_str!("../manifests/pipelines.yaml");

/// Key of the object store Secret that holds the access key ID (as in upstream's
/// `mlpipeline-minio-artifact`).
const ACCESS_KEY_KEY: &str = "accesskey";

static RELEASES: [Release; 2] = [
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
        params: &[
            ("argoVersion", "v2.12.9"),
            // 5.6 → 5.7 is an in-place MySQL upgrade; 5.6 → 8.0 is not.
            ("mysqlImage", "gcr.io/ml-pipeline/mysql:5.7"),
            ("uiNameLabelKey", "app.kubernetes.io/name"),
            ("uiNameLabelValue", "kubeflow-pipelines"),
            ("argoTemplateCrds", "true"),
            ("cacheAndMetadata", "true"),
        ],
        upgrades_from: &["1.0.4"],
        kubeflow: &["1.3"],
    },
];

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

impl Component for PipelinesComponent {
    type Resource = Pipelines;
    const DEFAULT_NAMESPACE: &'static str = "kubeflow";
    const DISPLAY_NAME: &'static str = "Kubeflow Pipelines";
    const INSTALLS: &'static str = "Kubeflow Pipelines: API server, UI, persistence agent, scheduled workflows, MySQL and object storage";

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
            if !valid_bucket(bucket) {
                return Err(InvalidSpec::new(
                    "spec.objectStore.bucket",
                    format!("{bucket:?} is not a valid S3 bucket name; allowed: 3-63 lowercase letters, digits, dots and hyphens, starting and ending with a letter or digit, no \"..\""),
                ));
            }
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
        if let Some(secret) = &store.secret_ref {
            if secret.key == ACCESS_KEY_KEY {
                return Err(InvalidSpec::new(
                    "spec.objectStore.secretRef.key",
                    format!("names the key holding the secret access key; the access key ID is read from key {ACCESS_KEY_KEY:?} of the same Secret, so use another key (e.g. secretkey)"),
                ));
            }
            p.insert("objectStoreSecretName".into(), secret.name.clone());
            p.insert("objectStoreSecretKey".into(), secret.key.clone());
        }
        Ok(p)
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
        for release in PipelinesComponent::releases() {
            let objects = build(json!({"version": release.version}));
            let v15 = release.version == "1.5.0";
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
}
