//! KFServing: model serving on Knative and Istio (KfDef applications `kfserving-crds`,
//! `kfserving-install`). Releases v0.4.1 (Kubeflow 1.2) and v0.5.1 (Kubeflow 1.3) share one
//! template; the controller is a StatefulSet in both, with the same selector, so an upgrade updates
//! it in place. v0.5.1 adds multi-model serving (the `TrainedModel` CRD and its validating webhook),
//! the models web app, and a new `inferenceservice-config` format (predictors per inference
//! protocol, one agent sidecar image instead of separate logger and batcher images); its
//! InferenceService webhooks serve `v1beta1` where v0.4.1's serve `v1alpha2`.
//!
//! The `ingress` entry of `inferenceservice-config` is JSON assembled from `ingressGateway`,
//! `localGateway` and `ingressDomain`, so values that would break out of a JSON string are refused
//! wherever they come from: the spec fields, KfDef application parameters or
//! `spec.overrides.parameters`.

use component_framework::api::KFServing;
use component_framework::{Component, InvalidSpec, Inputs, Params, Release};
use serde_json::{Value, json};

pub struct KFServingComponent;

const TEMPLATE: &str = include_str!("../manifests/kfserving.yaml");

static RELEASES: [Release; 2] = [
    Release {
        version: "v0.4.1",
        manifest: TEMPLATE,
        params: &[
            ("sidecarConfig", "true"),
            ("agentConfig", "false"),
            ("multiModelServing", "false"),
            ("modelsWebApp", "false"),
            ("isvcWebhookVersion", "v1alpha2"),
            ("isvcDefaulterPath", "/mutate-inferenceservices"),
            ("isvcValidatorPath", "/validate-inferenceservices"),
        ],
        upgrades_from: &[],
        kubeflow: &["1.2"],
    },
    Release {
        version: "v0.5.1",
        manifest: TEMPLATE,
        params: &[
            ("sidecarConfig", "false"),
            ("agentConfig", "true"),
            ("multiModelServing", "true"),
            ("modelsWebApp", "true"),
            ("isvcWebhookVersion", "v1beta1"),
            ("isvcDefaulterPath", "/mutate-serving-kubeflow-org-v1beta1-inferenceservice"),
            ("isvcValidatorPath", "/validate-serving-kubeflow-org-v1beta1-inferenceservice"),
        ],
        upgrades_from: &["v0.4.1"],
        kubeflow: &["1.3"],
    },
];

/// ConfigMap whose entries are JSON documents built by string interpolation.
const CONFIG_MAP: &str = "inferenceservice-config";

/// Parameters interpolated into JSON strings of [`CONFIG_MAP`].
const JSON_PARAMETERS: [&str; 4] = ["ingressDomain", "ingressGateway", "localGateway", "loggerDefaultUrl"];

fn params(pairs: &[(&str, &str)]) -> Params {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

/// A DNS label: lower-case letters, digits and '-', starting and ending with a letter or digit.
fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// Whether `value` can sit between the quotes of a JSON string unchanged.
fn json_safe(value: &str) -> bool {
    !value.chars().any(|c| c == '"' || c == '\\' || c.is_control())
}

fn check_domain(domain: &str) -> Result<(), InvalidSpec> {
    if domain.split('.').all(is_dns_label) {
        Ok(())
    } else {
        Err(InvalidSpec::new(
            "spec.ingressDomain",
            format!("{domain:?} is not a DNS name; allowed: lower-case letters, digits, '-' and '.' (e.g. models.example.com)"),
        ))
    }
}

fn check_gateway(gateway: &str) -> Result<(), InvalidSpec> {
    match gateway.split_once('/') {
        Some((namespace, name)) if is_dns_label(namespace) && is_dns_label(name) => Ok(()),
        _ => Err(InvalidSpec::new(
            "spec.ingressGateway",
            format!(
                "{gateway:?} is not an Istio Gateway reference; allowed: namespace/name, each of lower-case letters, digits and '-' (e.g. kubeflow/kubeflow-gateway)"
            ),
        )),
    }
}

impl Component for KFServingComponent {
    type Resource = KFServing;
    const DEFAULT_NAMESPACE: &'static str = "kubeflow";
    const INSTALLS: &'static str = "KFServing, serverless model inference (InferenceService) with its controller and webhooks";

    fn test_spec() -> Value {
        json!({"ingressDomain": "models.example.com"})
    }

    fn releases() -> &'static [Release] {
        &RELEASES
    }

    fn default_parameters() -> Params {
        params(&[
            ("ingressDomain", "example.com"),
            ("ingressGateway", "kubeflow/kubeflow-gateway"),
            ("localGateway", "knative-serving/cluster-local-gateway"),
            ("loggerDefaultUrl", "http://default-broker"),
        ])
    }

    fn parameters(resource: &KFServing, _inputs: &Inputs) -> Result<Params, InvalidSpec> {
        let spec = &resource.spec;
        let mut p = Params::new();
        if let Some(domain) = &spec.ingress_domain {
            check_domain(domain)?;
            p.insert("ingressDomain".into(), domain.clone());
        }
        if let Some(gateway) = &spec.ingress_gateway {
            check_gateway(gateway)?;
            p.insert("ingressGateway".into(), gateway.clone());
        }
        Ok(p)
    }

    /// Parameters from KfDef applications and `spec.overrides.parameters` bypass [`Self::parameters`];
    /// those that end up inside JSON strings are checked here, and the JSON itself last of all.
    fn customize(resource: &KFServing, objects: &mut Vec<Value>) -> Result<(), InvalidSpec> {
        let core = &resource.spec.core;
        let sources = core.sources.iter().enumerate().flat_map(|(i, s)| {
            s.parameters.iter().enumerate().map(move |(j, p)| (format!("spec.sources[{i}].parameters[{j}].value"), p))
        });
        let overrides = core.overrides.parameters.iter().enumerate().map(|(i, p)| (format!("spec.overrides.parameters[{i}].value"), p));
        for (field, p) in sources.chain(overrides) {
            if JSON_PARAMETERS.contains(&p.name.as_str()) && !json_safe(&p.value) {
                return Err(InvalidSpec::new(
                    field,
                    format!("{} {:?} would break the JSON of {CONFIG_MAP}; allowed: any text without '\"', '\\' or control characters", p.name, p.value),
                ));
            }
        }
        for config in objects.iter().filter(|o| o["kind"] == "ConfigMap" && o["metadata"]["name"] == CONFIG_MAP) {
            for (key, text) in config["data"].as_object().into_iter().flatten() {
                if let Err(e) = serde_json::from_str::<Value>(text.as_str().unwrap_or_default()) {
                    return Err(InvalidSpec::new("spec.version", format!("{CONFIG_MAP} entry {key:?} of {} is not valid JSON: {e}", core.version)));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use component_framework::build::desired_objects;
    use serde_json::json;

    fn kfserving(spec: Value) -> KFServing {
        let mut k: KFServing = serde_json::from_value(json!({
            "apiVersion": "components.kubeflow.org/v1alpha1", "kind": "KFServing",
            "metadata": {"name": "kfserving", "namespace": "team"}, "spec": spec,
        }))
        .unwrap();
        k.metadata.uid = Some("uid".into());
        k
    }

    fn build(spec: Value) -> Vec<Value> {
        desired_objects::<KFServingComponent>(&kfserving(spec), &Inputs::default()).unwrap()
    }

    fn names(objects: &[Value], kind: &str) -> Vec<String> {
        objects.iter().filter(|o| o["kind"] == kind).map(|o| o["metadata"]["name"].as_str().unwrap().to_string()).collect()
    }

    fn find<'a>(objects: &'a [Value], kind: &str, name: &str) -> &'a Value {
        objects.iter().find(|o| o["kind"] == kind && o["metadata"]["name"] == name).unwrap_or_else(|| panic!("no {kind} {name}"))
    }

    fn config_entry(objects: &[Value], key: &str) -> Value {
        let text = find(objects, "ConfigMap", CONFIG_MAP)["data"][key].as_str().unwrap_or_else(|| panic!("no {key} entry")).to_string();
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{key} is not JSON ({e}): {text}"))
    }

    #[test]
    fn every_release_builds_a_full_object_set() {
        for release in KFServingComponent::releases() {
            let v = release.version;
            let objects = build(json!({"version": v}));
            let newer = v == "v0.5.1";
            assert_eq!(names(&objects, "StatefulSet"), ["kfserving-controller-manager"], "{v}");
            let deployments: &[&str] = if newer { &["kfserving-models-web-app"] } else { &[] };
            assert_eq!(names(&objects, "Deployment"), deployments, "{v}");
            let crds: &[&str] =
                if newer { &["inferenceservices.serving.kubeflow.org", "trainedmodels.serving.kubeflow.org"] } else { &["inferenceservices.serving.kubeflow.org"] };
            assert_eq!(names(&objects, "CustomResourceDefinition"), crds, "{v}");
            assert_eq!(names(&objects, "ConfigMap").iter().filter(|n| *n == CONFIG_MAP).count(), 1, "{v}");
            let roles = ["kfserving-manager-role-kubeflow", "kfserving-proxy-role-kubeflow", "kfserving-models-web-app-cluster-role-kubeflow"];
            assert_eq!(names(&objects, "ClusterRole"), roles[..if newer { 3 } else { 2 }], "{v}");
            let bindings = ["kfserving-manager-rolebinding-kubeflow", "kfserving-proxy-rolebinding-kubeflow", "kfserving-models-web-app-binding-kubeflow"];
            assert_eq!(names(&objects, "ClusterRoleBinding"), bindings[..if newer { 3 } else { 2 }], "{v}");
            assert_eq!(names(&objects, "Role"), ["kfserving-leader-election-role"]);
            assert_eq!(names(&objects, "Secret"), ["kfserving-webhook-server-secret"]);
            let services = names(&objects, "Service");
            assert!(services.starts_with(&["kfserving-controller-manager-service".into(), "kfserving-webhook-server-service".into()]), "{services:?}");
            assert_eq!(names(&objects, "MutatingWebhookConfiguration"), ["inferenceservice.serving.kubeflow.org-kubeflow"]);
            let validating: &[&str] = if newer {
                &["inferenceservice.serving.kubeflow.org-kubeflow", "trainedmodel.serving.kubeflow.org-kubeflow"]
            } else {
                &["inferenceservice.serving.kubeflow.org-kubeflow"]
            };
            assert_eq!(names(&objects, "ValidatingWebhookConfiguration"), validating, "{v}");

            let controller = find(&objects, "StatefulSet", "kfserving-controller-manager");
            assert_eq!(controller["metadata"]["namespace"], "kubeflow");
            assert_eq!(controller["spec"]["serviceName"], "controller-manager");
            let containers = &controller["spec"]["template"]["spec"]["containers"];
            assert_eq!(containers[0]["name"], "manager");
            assert_eq!(containers[0]["image"], format!("gcr.io/kfserving/kfserving-controller:{v}"));
            assert_eq!(containers[1]["name"], "kube-rbac-proxy");
            assert_eq!(controller["metadata"]["labels"]["components.kubeflow.org/part-of"], "kfserving");
            assert_eq!(controller["metadata"]["annotations"]["components.kubeflow.org/owner"], "team/kfserving");
            // Cluster-scoped objects other than CRDs and the Namespace carry the namespace suffix.
            for o in objects.iter().filter(|o| {
                matches!(o["kind"].as_str(), Some("ClusterRole" | "ClusterRoleBinding" | "MutatingWebhookConfiguration" | "ValidatingWebhookConfiguration"))
            }) {
                assert!(o["metadata"]["name"].as_str().unwrap().ends_with("-kubeflow"), "{}", o["metadata"]["name"]);
                assert!(o["metadata"].get("namespace").is_none());
            }
            // Objects come out in apply order: namespace first, CRDs next, workloads before webhooks.
            assert_eq!(objects[0]["kind"], "Namespace");
            assert!(objects[1..=crds.len()].iter().all(|o| o["kind"] == "CustomResourceDefinition"));
            let rank = |kind: &str| objects.iter().position(|o| o["kind"] == kind).unwrap();
            assert!(rank("Service") < rank("StatefulSet"));
            assert!(objects.last().unwrap()["kind"].as_str().unwrap().ends_with("WebhookConfiguration"));
            assert!(rank("StatefulSet") < rank("MutatingWebhookConfiguration"));
        }
    }

    #[test]
    fn inferenceservice_crd_serves_both_apis_and_stores_v1beta1() {
        for release in KFServingComponent::releases() {
            let objects = build(json!({"version": release.version}));
            let crd = find(&objects, "CustomResourceDefinition", "inferenceservices.serving.kubeflow.org");
            let versions: Vec<_> = crd["spec"]["versions"].as_array().unwrap().iter().map(|v| (v["name"].as_str().unwrap(), v["served"] == true, v["storage"] == true)).collect();
            assert_eq!(versions, [("v1alpha2", true, false), ("v1beta1", true, true)]);
            assert_eq!(crd["spec"]["versions"][1]["schema"]["openAPIV3Schema"]["x-kubernetes-preserve-unknown-fields"], true);
        }
    }

    #[test]
    fn webhooks_never_block_and_only_act_in_enabled_namespaces() {
        for release in KFServingComponent::releases() {
            let objects = build(json!({"version": release.version}));
            let configs: Vec<_> = objects.iter().filter(|o| o["kind"].as_str().unwrap().ends_with("WebhookConfiguration")).collect();
            assert!(!configs.is_empty());
            for webhook in configs.iter().flat_map(|c| c["webhooks"].as_array().unwrap()) {
                assert_eq!(webhook["failurePolicy"], "Ignore", "{}", webhook["name"]);
                assert_eq!(webhook["namespaceSelector"], json!({"matchLabels": {"serving.kubeflow.org/inferenceservice": "enabled"}}), "{}", webhook["name"]);
                assert_eq!(webhook["clientConfig"]["service"]["name"], "kfserving-webhook-server-service");
                assert_eq!(webhook["clientConfig"]["service"]["namespace"], "kubeflow");
            }
        }
        let mutating = |v: &str| find(&build(json!({"version": v})), "MutatingWebhookConfiguration", "inferenceservice.serving.kubeflow.org-kubeflow")["webhooks"][0].clone();
        assert_eq!(mutating("v0.4.1")["rules"][0]["apiVersions"], json!(["v1alpha2"]));
        assert_eq!(mutating("v0.5.1")["rules"][0]["apiVersions"], json!(["v1beta1"]));
        assert_eq!(mutating("v0.5.1")["clientConfig"]["service"]["path"], "/mutate-serving-kubeflow-org-v1beta1-inferenceservice");
    }

    #[test]
    fn config_is_json_and_carries_the_spec_ingress() {
        for release in KFServingComponent::releases() {
            let v = release.version;
            let spec = json!({"version": v, "targetNamespace": "serving", "ingressDomain": "models.example.org", "ingressGateway": "istio-system/public-gateway"});
            let objects = build(spec);
            let config = find(&objects, "ConfigMap", CONFIG_MAP);
            assert_eq!(config["metadata"]["namespace"], "serving");
            for (key, text) in config["data"].as_object().unwrap() {
                serde_json::from_str::<Value>(text.as_str().unwrap()).unwrap_or_else(|e| panic!("{v} {key}: {e}"));
            }
            assert_eq!(
                config_entry(&objects, "ingress"),
                json!({
                    "ingressGateway": "istio-system/public-gateway",
                    "ingressService": "istio-ingressgateway.istio-system.svc.cluster.local",
                    "localGateway": "knative-serving/cluster-local-gateway",
                    "localGatewayService": "cluster-local-gateway.istio-system.svc.cluster.local",
                    "ingressDomain": "models.example.org",
                })
            );
            assert_eq!(config_entry(&objects, "storageInitializer")["image"], format!("gcr.io/kfserving/storage-initializer:{v}"));
            assert_eq!(config_entry(&objects, "credentials")["s3"]["s3AccessKeyIDName"], "AWS_ACCESS_KEY_ID");
            for key in ["predictors", "transformers", "explainers", "logger", "batcher"] {
                config_entry(&objects, key);
            }
        }
        // The defaults when the spec says nothing.
        let ingress = config_entry(&build(json!({"version": "v0.4.1"})), "ingress");
        assert_eq!((ingress["ingressDomain"].as_str(), ingress["ingressGateway"].as_str()), (Some("example.com"), Some("kubeflow/kubeflow-gateway")));
    }

    #[test]
    fn config_format_follows_the_release() {
        let old = build(json!({"version": "v0.4.1"}));
        assert!(find(&old, "ConfigMap", CONFIG_MAP)["data"].get("agent").is_none());
        assert_eq!(config_entry(&old, "logger")["image"], "gcr.io/kfserving/logger:v0.4.1");
        assert_eq!(config_entry(&old, "predictors")["sklearn"]["image"], "gcr.io/kfserving/sklearnserver");
        let new = build(json!({"version": "v0.5.1"}));
        assert_eq!(config_entry(&new, "agent")["image"], "gcr.io/kfserving/agent:v0.5.1");
        assert_eq!(config_entry(&new, "logger")["image"], "gcr.io/kfserving/agent:v0.5.1");
        assert_eq!(config_entry(&new, "predictors")["sklearn"]["v1"]["defaultImageVersion"], "v0.5.1");
        let web = find(&new, "Deployment", "kfserving-models-web-app");
        assert_eq!(web["spec"]["template"]["spec"]["containers"][0]["image"], "gcr.io/kfserving/models-web-app:v0.5.1");
    }

    #[test]
    fn upgrades_go_from_v041_to_v051_only() {
        let upgrades: Vec<_> = KFServingComponent::releases().iter().map(|r| (r.version, r.upgrades_from)).collect();
        assert_eq!(upgrades, [("v0.4.1", &[][..]), ("v0.5.1", &["v0.4.1"][..])]);
        // What an in-place StatefulSet update cannot change is the same in both releases.
        let immutable = |v: &str| {
            let o = build(json!({"version": v}));
            let s = find(&o, "StatefulSet", "kfserving-controller-manager");
            (s["spec"]["selector"].clone(), s["spec"]["serviceName"].clone())
        };
        assert_eq!(immutable("v0.4.1"), immutable("v0.5.1"));
    }

    #[test]
    fn bad_input_names_the_field_and_the_allowed_values() {
        let check = |spec: Value, field: &str, needle: &str| {
            let err = desired_objects::<KFServingComponent>(&kfserving(spec), &Inputs::default()).unwrap_err();
            assert_eq!(err.field, field);
            assert!(err.message.contains(needle), "{err}");
        };
        check(json!({"version": "v0.6.0"}), "spec.version", "supported versions: v0.4.1, v0.5.1");
        check(json!({"version": "v0.5.1", "ingressDomain": "ex\"ample.com"}), "spec.ingressDomain", "lower-case letters, digits, '-' and '.'");
        check(json!({"version": "v0.5.1", "ingressDomain": "example.com\\"}), "spec.ingressDomain", "models.example.com");
        check(json!({"version": "v0.5.1", "ingressGateway": "kubeflow-gateway"}), "spec.ingressGateway", "namespace/name");
        check(json!({"version": "v0.5.1", "ingressGateway": "kubeflow/gw\", \"x\": \"y"}), "spec.ingressGateway", "kubeflow/kubeflow-gateway");
        check(json!({"version": "v0.5.1", "overrides": {"parameters": [{"name": "localGateway", "value": "a\\b"}]}}), "spec.overrides.parameters[0].value", "without '\"'");
        let source = json!([{"application": "kfserving-install", "parameters": [{"name": "ingressGateway", "value": "a\"b"}]}]);
        check(json!({"version": "v0.4.1", "sources": source}), "spec.sources[0].parameters[0].value", "would break the JSON");
        check(json!({"version": "v0.5.1", "overrides": {"parameters": [{"name": "nope", "value": "1"}]}}), "spec.overrides.parameters[0].name", "ingressDomain");
        check(json!({"version": "v0.5.1", "overrides": {"images": {"managr": "x"}}}), "spec.overrides.images.managr", "manager");
    }

    #[test]
    fn parameter_overrides_reach_the_config() {
        let spec = json!({"version": "v0.5.1", "ingressDomain": "a.example.com", "overrides": {"parameters": [{"name": "ingressDomain", "value": "b.example.com"}, {"name": "localGateway", "value": "knative-serving/knative-local-gateway"}]}});
        let ingress = config_entry(&build(spec), "ingress");
        assert_eq!(ingress["ingressDomain"], "b.example.com");
        assert_eq!(ingress["localGateway"], "knative-serving/knative-local-gateway");
    }

    #[test]
    fn image_override_reaches_the_statefulset() {
        let spec = json!({"version": "v0.4.1", "overrides": {"images": {"manager": "registry.local/kfserving-controller:patched", "kube-rbac-proxy": "registry.local/kube-rbac-proxy:v0.4.0"}}});
        let objects = build(spec);
        let containers = &find(&objects, "StatefulSet", "kfserving-controller-manager")["spec"]["template"]["spec"]["containers"];
        assert_eq!(containers[0]["image"], "registry.local/kfserving-controller:patched");
        assert_eq!(containers[1]["image"], "registry.local/kube-rbac-proxy:v0.4.0");
    }

    #[test]
    fn replica_overrides_cover_deployments_and_the_statefulset() {
        let spec = json!({"version": "v0.5.1", "overrides": {"replicas": {"kfserving-models-web-app": 2, "kfserving-controller-manager": 2}}});
        let objects = build(spec);
        assert_eq!(find(&objects, "Deployment", "kfserving-models-web-app")["spec"]["replicas"], 2);
        assert_eq!(find(&objects, "StatefulSet", "kfserving-controller-manager")["spec"]["replicas"], 2);
        let spec = json!({"version": "v0.5.1", "overrides": {"replicas": {"kfserving-controller": 2}}});
        let err = desired_objects::<KFServingComponent>(&kfserving(spec), &Inputs::default()).unwrap_err();
        assert_eq!(err.field, "spec.overrides.replicas.kfserving-controller");
        assert!(err.message.contains("kfserving-controller-manager"), "{err}");
    }
}
