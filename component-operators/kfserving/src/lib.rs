//! KFServing and its successor KServe: model serving on Knative and Istio (KfDef applications
//! `kfserving-crds`, `kfserving-install`, `kfserving`). The `KFServing` resource installs either;
//! `spec.version` picks which.
//!
//! Releases v0.4.1 (Kubeflow 1.2) and v0.5.1 (Kubeflow 1.3) are KFServing and share one template
//! (`manifests/kfserving.yaml`); the controller is a StatefulSet in both, with the same selector,
//! so an upgrade updates it in place. v0.5.1 adds multi-model serving (the `TrainedModel` CRD and
//! its validating webhook), the models web app, and a new `inferenceservice-config` format
//! (predictors per inference protocol, one agent sidecar image instead of separate logger and
//! batcher images); its InferenceService webhooks serve `v1beta1` where v0.4.1's serve `v1alpha2`.
//!
//! Releases v0.15.0 (Kubeflow 1.10) and v0.15.2 (Kubeflow 1.11) are KServe and share another
//! (`manifests/kserve.yaml`), shaped like Kubeflow's variant of upstream's install. KServe is a
//! new API group, `serving.kserve.io` (InferenceService `v1beta1`; ServingRuntime,
//! ClusterServingRuntime, InferenceGraph, TrainedModel, ClusterStorageContainer and the local
//! model kinds `v1alpha1`): users' `serving.kubeflow.org` InferenceServices are neither served nor
//! converted, and the KFServing CRDs are kept (as on any prune) with whatever they hold; a
//! resource that ran KFServing with `crdRemovalPolicy: Delete` is refused the move, which would
//! prune them. So v0.15.0 upgrades from nothing: upstream's way from KFServing v0.5.1 is a new install, then moving each
//! InferenceService to the new group. Against KFServing, KServe runs its controller as a
//! Deployment (`kserve-controller-manager`), takes model servers from ClusterServingRuntimes
//! instead of `inferenceservice-config`'s predictors, reads its default deployment mode
//! (`deploymentMode`: Serverless on Knative, or RawDeployment) from that ConfigMap, serves its
//! webhooks with a certificate from cert-manager (which must be installed), and ships the models
//! web app as `kserve-models-web-app`. v0.15.2 differs from v0.15.0 in its image tags (controller,
//! agent, router, storage initializer, KServe's model servers) and the models web app (v0.14.0,
//! then v0.15.0).
//!
//! Every release honours the same spec: `ingressDomain`, `ingressGateway` and the parameters
//! `localGateway` and `loggerDefaultUrl` go into `inferenceservice-config` (for KServe,
//! `ingressDomain` names RawDeployment InferenceServices' hosts and the gateways serve Serverless
//! ones; `localGateway` defaults to Knative's `knative-serving/knative-local-gateway` there, as
//! KFServing's `cluster-local-gateway` no longer exists). `deploymentMode` means nothing to
//! KFServing, so it is refused on its releases rather than ignored.
//!
//! The `ingress` entry of `inferenceservice-config` is JSON assembled from `ingressGateway`,
//! `localGateway` and `ingressDomain`, so values that would break out of a JSON string are refused
//! wherever they come from: the spec fields, KfDef application parameters or
//! `spec.overrides.parameters`.

use component_framework::api::KFServing;
use component_framework::api::component::{CrdRemovalPolicy, Platform};
use component_framework::package::patch;
use component_framework::{Component, InvalidSpec, Inputs, Params, Release};
use serde_json::{Value, json};

pub struct KFServingComponent;

/// Template of the KFServing releases, v0.4.1 and v0.5.1.
const TEMPLATE: &str = include_str!("../manifests/kfserving.yaml");
/// Template of the KServe releases, v0.15.0 and v0.15.2.
const KSERVE_TEMPLATE: &str = include_str!("../manifests/kserve.yaml");

static RELEASES: [Release; 4] = [
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
    Release {
        version: "v0.15.0",
        manifest: KSERVE_TEMPLATE,
        params: &[("modelsWebAppVersion", "v0.14.0")],
        // KFServing v0.5.1 to KServe is a new install plus moving InferenceServices from
        // serving.kubeflow.org to serving.kserve.io (upstream's migration), not an upgrade.
        upgrades_from: &[],
        kubeflow: &["1.10"],
    },
    Release {
        version: "v0.15.2",
        manifest: KSERVE_TEMPLATE,
        params: &[("modelsWebAppVersion", "v0.15.0")],
        upgrades_from: &["v0.15.0"],
        kubeflow: &["1.11"],
    },
];

/// KServe's applications in kubeflow/manifests.
const KSERVE_APPLICATIONS: &[(&str, &str)] = &[("kserve", "applications/kserve/kserve"), ("models-web-app", "applications/kserve/models-web-app/overlays/kubeflow")];

/// ConfigMap whose entries are JSON documents built by string interpolation.
const CONFIG_MAP: &str = "inferenceservice-config";

/// Parameters interpolated into JSON strings of [`CONFIG_MAP`].
const JSON_PARAMETERS: [&str; 5] = ["ingressDomain", "ingressGateway", "localGateway", "loggerDefaultUrl", "deploymentMode"];

/// KServe's default deployment modes the install supports (`deploy.defaultDeploymentMode`);
/// ModelMesh, KServe's third, is a separate install Kubeflow does not ship.
const DEPLOYMENT_MODES: [&str; 2] = ["Serverless", "RawDeployment"];

/// Knative's cluster-local gateway, which KServe's Serverless InferenceServices route through.
const KSERVE_LOCAL_GATEWAY: &str = "knative-serving/knative-local-gateway";

fn params(pairs: &[(&str, &str)]) -> Params {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

/// Whether `version` is one of the KServe releases (rendered from [`KSERVE_TEMPLATE`]).
fn is_kserve(version: &str) -> bool {
    RELEASES.iter().any(|r| r.version == version && r.manifest == KSERVE_TEMPLATE)
}

fn kserve_versions() -> String {
    RELEASES.iter().filter(|r| r.manifest == KSERVE_TEMPLATE).map(|r| r.version).collect::<Vec<_>>().join(", ")
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

/// `deploymentMode` from a KfDef application or an override: KServe's only, one of
/// [`DEPLOYMENT_MODES`].
fn check_deployment_mode(version: &str, name_field: &str, value_field: &str, value: &str) -> Result<(), InvalidSpec> {
    if !is_kserve(version) {
        return Err(InvalidSpec::new(
            name_field,
            format!("deploymentMode applies to the KServe releases only ({}); KFServing {version} has no deployment modes (always Serverless)", kserve_versions()),
        ));
    }
    if !DEPLOYMENT_MODES.contains(&value) {
        return Err(InvalidSpec::new(value_field, format!("deploymentMode {value:?} is not supported; allowed: {}", DEPLOYMENT_MODES.join(", "))));
    }
    Ok(())
}

/// The spec's ingress settings, in the package's `inferenceservice-config` (its `ingress` entry,
/// a JSON document in KFServing's and KServe's packages alike).
fn patch_package(resource: &KFServing, objects: &mut [Value]) -> Result<(), InvalidSpec> {
    let spec = &resource.spec;
    let mut settings = Vec::new();
    if let Some(domain) = &spec.ingress_domain {
        check_domain(domain)?;
        settings.push(("spec.ingressDomain", "ingressDomain", domain));
    }
    if let Some(gateway) = &spec.ingress_gateway {
        check_gateway(gateway)?;
        settings.push(("spec.ingressGateway", "ingressGateway", gateway));
    }
    for (field, key, value) in settings {
        patch::edit_json_entry(objects, CONFIG_MAP, "ingress", field, |ingress| {
            ingress.insert(key.into(), json!(value));
        })?;
    }
    Ok(())
}

impl Component for KFServingComponent {
    type Resource = KFServing;
    const DEFAULT_NAMESPACE: &'static str = "kubeflow";
    /// KServe's ClusterServingRuntimes (their CRD comes earlier in the same apply) and
    /// cert-manager's Issuer and Certificate.
    const CUSTOM_KINDS: &'static [component_framework::component::CustomKind] = &[
        ("serving.kserve.io", "v1alpha1", "ClusterServingRuntime", "clusterservingruntimes", true),
        ("cert-manager.io", "v1", "Issuer", "issuers", false),
        ("cert-manager.io", "v1", "Certificate", "certificates", false),
    ];
    const INSTALLS: &'static str =
        "KFServing and its successor KServe, serverless model inference (InferenceService) with its controller, webhooks and model servers";
    /// A resource made from a KfDef renders the KfDef's packages, upstream's objects.
    const RENDERS_PACKAGES: bool = true;
    /// The kinds upstream's packages of these releases install.
    const INSTALLED_KINDS: &'static [&'static str] = &["ClusterRole", "ClusterRoleBinding", "ConfigMap", "CustomResourceDefinition", "Deployment", "MutatingWebhookConfiguration", "Namespace", "Role", "RoleBinding", "Secret", "Service", "ServiceAccount", "StatefulSet", "ValidatingWebhookConfiguration"];
    /// The releases' packages in Kubeflow's archives (paths as kfctl's v1.2.0 `kfctl_istio_dex`
    /// KfDef, v1.3.1's and later releases' `example/kustomization.yaml` list them).
    const UPSTREAM_RELEASES: &'static [component_framework::UpstreamRelease] = &[
        component_framework::UpstreamRelease { version: "v0.4.1", kubeflow: "v1.2.0", applications: &[("kfserving", "kfserving/installs/generic")] },
        component_framework::UpstreamRelease { version: "v0.5.1", kubeflow: "v1.3.1", applications: &[("kfserving", "apps/kfserving/upstream/overlays/kubeflow")] },
        component_framework::UpstreamRelease { version: "v0.15.0", kubeflow: "v1.10.2", applications: KSERVE_APPLICATIONS },
        component_framework::UpstreamRelease { version: "v0.15.2", kubeflow: "v1.11.0", applications: KSERVE_APPLICATIONS },
    ];
    /// The controller's image, KFServing's then KServe's.
    const VERSION_IMAGES: &'static [&'static str] = &["kfserving-controller", "kserve/kserve-controller"];
    const PACKAGE_FIELDS: &'static [&'static str] = &["ingressDomain", "ingressGateway"];

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
            ("deploymentMode", "Serverless"),
        ])
    }

    fn parameters(resource: &KFServing, _inputs: &Inputs) -> Result<Params, InvalidSpec> {
        let spec = &resource.spec;
        let mut p = Params::new();
        let version = &spec.core.version;
        if is_kserve(version) {
            // A default that depends on the release; KfDef parameters and overrides still win.
            p.insert("localGateway".into(), KSERVE_LOCAL_GATEWAY.into());
            // Moving to KServe prunes KFServing's objects; with Delete its CRDs would go too, and
            // with them every serving.kubeflow.org InferenceService (of any install).
            let inventory = resource.status.iter().flat_map(|s| &s.inventory);
            let old_crd = inventory.filter(|e| e.kind == "CustomResourceDefinition").find(|e| e.name.ends_with(".serving.kubeflow.org"));
            if let (Some(crd), CrdRemovalPolicy::Delete) = (old_crd, spec.core.crd_removal_policy) {
                return Err(InvalidSpec::new(
                    "spec.crdRemovalPolicy",
                    format!(
                        "Delete would prune KFServing's CustomResourceDefinition {}, and every InferenceService made with it, when KServe {version} replaces KFServing; allowed: Retain for the move (move the InferenceServices to serving.kserve.io, then delete the old CRDs yourself)",
                        crd.name
                    ),
                ));
            }
        }
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
    fn customize(resource: &KFServing, inputs: &Inputs, objects: &mut Vec<Value>) -> Result<(), InvalidSpec> {
        let core = &resource.spec.core;
        let sources = core.sources.iter().enumerate().flat_map(|(i, s)| {
            s.parameters.iter().enumerate().map(move |(j, p)| (format!("spec.sources[{i}].parameters[{j}]"), p))
        });
        let overrides = core.overrides.parameters.iter().enumerate().map(|(i, p)| (format!("spec.overrides.parameters[{i}]"), p));
        for (field, p) in sources.chain(overrides) {
            if p.name == "deploymentMode" {
                check_deployment_mode(&core.version, &format!("{field}.name"), &format!("{field}.value"), &p.value)?;
            }
            if JSON_PARAMETERS.contains(&p.name.as_str()) && !json_safe(&p.value) {
                return Err(InvalidSpec::new(
                    format!("{field}.value"),
                    format!("{} {:?} would break the JSON of {CONFIG_MAP}; allowed: any text without '\"', '\\' or control characters", p.name, p.value),
                ));
            }
        }
        // The built-in release's configuration is JSON its parameters are written into; upstream's
        // package keeps non-JSON entries (`_example`), which KServe ignores.
        let from_package = inputs.from_packages();
        if from_package {
            patch_package(resource, objects)?;
        }
        for config in objects.iter().filter(|o| !from_package && o["kind"] == "ConfigMap" && o["metadata"]["name"] == CONFIG_MAP) {
            for (key, text) in config["data"].as_object().into_iter().flatten() {
                if let Err(e) = serde_json::from_str::<Value>(text.as_str().unwrap_or_default()) {
                    return Err(InvalidSpec::new("spec.version", format!("{CONFIG_MAP} entry {key:?} of {} is not valid JSON: {e}", core.version)));
                }
            }
        }
        // The framework drops fixed ids from workloads on OpenShift; a ClusterServingRuntime's
        // containers become the predictor pods' containers, so they lose theirs too.
        if core.platform == Platform::OpenShift {
            for runtime in objects.iter_mut().filter(|o| o["kind"] == "ClusterServingRuntime") {
                for container in runtime["spec"]["containers"].as_array_mut().into_iter().flatten() {
                    if let Some(Value::Object(context)) = container.get_mut("securityContext") {
                        context.remove("runAsUser");
                        context.remove("runAsGroup");
                    }
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
        kfserving_in("kfserving", "team", spec)
    }

    fn kfserving_in(name: &str, namespace: &str, spec: Value) -> KFServing {
        let mut k: KFServing = serde_json::from_value(json!({
            "apiVersion": "components.kubeflow.org/v1alpha1", "kind": "KFServing",
            "metadata": {"name": name, "namespace": namespace}, "spec": spec,
        }))
        .unwrap();
        k.metadata.uid = Some("uid".into());
        k
    }

    /// The KFServing releases (v0.4.1, v0.5.1), which the tests written for them cover.
    fn kfserving_releases() -> impl Iterator<Item = &'static Release> {
        KFServingComponent::releases().iter().filter(|r| !is_kserve(r.version))
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

    /// Cluster roles, their bindings and webhook configurations: cluster-scoped, named with the
    /// `-kubeflow` namespace suffix.
    fn assert_cluster_roles_and_webhooks_are_suffixed(objects: &[Value]) {
        for o in objects.iter().filter(|o| {
            matches!(o["kind"].as_str(), Some("ClusterRole" | "ClusterRoleBinding" | "MutatingWebhookConfiguration" | "ValidatingWebhookConfiguration"))
        }) {
            assert!(o["metadata"]["name"].as_str().unwrap().ends_with("-kubeflow"), "{}", o["metadata"]["name"]);
            assert!(o["metadata"].get("namespace").is_none());
        }
    }

    /// The Namespace first, then the `crds` CRDs.
    fn assert_namespace_then_crds(objects: &[Value], crds: usize) {
        assert_eq!(objects[0]["kind"], "Namespace");
        assert!(objects[1..=crds].iter().all(|o| o["kind"] == "CustomResourceDefinition"));
    }

    fn config_entry(objects: &[Value], key: &str) -> Value {
        let text = find(objects, "ConfigMap", CONFIG_MAP)["data"][key].as_str().unwrap_or_else(|| panic!("no {key} entry")).to_string();
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{key} is not JSON ({e}): {text}"))
    }

    #[test]
    fn every_release_builds_a_full_object_set() {
        for release in kfserving_releases() {
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
            assert_cluster_roles_and_webhooks_are_suffixed(&objects);
            // Objects come out in apply order: namespace first, CRDs next, workloads before webhooks.
            assert_namespace_then_crds(&objects, crds.len());
            let rank = |kind: &str| objects.iter().position(|o| o["kind"] == kind).unwrap();
            assert!(rank("Service") < rank("StatefulSet"));
            assert!(objects.last().unwrap()["kind"].as_str().unwrap().ends_with("WebhookConfiguration"));
            assert!(rank("StatefulSet") < rank("MutatingWebhookConfiguration"));
        }
    }

    #[test]
    fn inferenceservice_crd_serves_both_apis_and_stores_v1beta1() {
        for release in kfserving_releases() {
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
            let service = if is_kserve(release.version) { "kserve-webhook-server-service" } else { "kfserving-webhook-server-service" };
            for webhook in configs.iter().flat_map(|c| c["webhooks"].as_array().unwrap()) {
                assert_eq!(webhook["failurePolicy"], "Ignore", "{}", webhook["name"]);
                assert_eq!(webhook["namespaceSelector"], json!({"matchLabels": {"serving.kubeflow.org/inferenceservice": "enabled"}}), "{}", webhook["name"]);
                assert_eq!(webhook["clientConfig"]["service"]["name"], service);
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
        for release in kfserving_releases() {
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
        // KServe starts afresh (a new API group): nothing upgrades from KFServing to it.
        assert_eq!(upgrades, [("v0.4.1", &[][..]), ("v0.5.1", &["v0.4.1"][..]), ("v0.15.0", &[][..]), ("v0.15.2", &["v0.15.0"][..])]);
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

    // KServe (v0.15.0, v0.15.2). Expected values are written out by hand from upstream's install.

    const KSERVE: [&str; 2] = ["v0.15.0", "v0.15.2"];

    const KSERVE_CRDS: [&str; 9] = [
        "inferenceservices.serving.kserve.io",
        "inferencegraphs.serving.kserve.io",
        "trainedmodels.serving.kserve.io",
        "servingruntimes.serving.kserve.io",
        "clusterservingruntimes.serving.kserve.io",
        "clusterstoragecontainers.serving.kserve.io",
        "localmodelcaches.serving.kserve.io",
        "localmodelnodegroups.serving.kserve.io",
        "localmodelnodes.serving.kserve.io",
    ];

    const KSERVE_RUNTIMES: [&str; 10] = [
        "kserve-sklearnserver",
        "kserve-xgbserver",
        "kserve-lgbserver",
        "kserve-pmmlserver",
        "kserve-paddleserver",
        "kserve-mlserver",
        "kserve-tensorflow-serving",
        "kserve-torchserve",
        "kserve-tritonserver",
        "kserve-huggingfaceserver",
    ];

    fn containers<'a>(objects: &'a [Value], kind: &str, name: &str) -> &'a Value {
        &find(objects, kind, name)["spec"]["template"]["spec"]["containers"]
    }

    #[test]
    fn kserve_releases_are_the_ones_of_kubeflow_1_10_and_1_11() {
        let kserve: Vec<_> = KFServingComponent::releases().iter().filter(|r| is_kserve(r.version)).map(|r| (r.version, r.kubeflow)).collect();
        assert_eq!(kserve, [("v0.15.0", &["1.10"][..]), ("v0.15.2", &["1.11"][..])]);
        assert!(!is_kserve("v0.5.1") && !is_kserve("v0.16.0"));
    }

    #[test]
    fn kserve_releases_build_their_object_set() {
        for (v, controller_image, web_app_image) in [
            ("v0.15.0", "kserve/kserve-controller:v0.15.0", "kserve/models-web-app:v0.14.0"),
            ("v0.15.2", "kserve/kserve-controller:v0.15.2", "kserve/models-web-app:v0.15.0"),
        ] {
            let objects = build(json!({"version": v}));
            assert_eq!(names(&objects, "CustomResourceDefinition"), KSERVE_CRDS, "{v}");
            assert!(names(&objects, "StatefulSet").is_empty(), "{v}: KServe's controller is a Deployment");
            assert_eq!(names(&objects, "Deployment"), ["kserve-controller-manager", "kserve-models-web-app"], "{v}");
            assert_eq!(names(&objects, "ServiceAccount"), ["kserve-controller-manager", "kserve-models-web-app"], "{v}");
            assert_eq!(names(&objects, "Service"), ["kserve-controller-manager-service", "kserve-webhook-server-service", "kserve-models-web-app"], "{v}");
            assert_eq!(names(&objects, "ConfigMap"), [CONFIG_MAP, "kserve-models-web-app-config"], "{v}");
            assert_eq!(
                names(&objects, "ClusterRole"),
                ["kserve-manager-role-kubeflow", "kserve-proxy-role-kubeflow", "kserve-models-web-app-cluster-role-kubeflow", "kubeflow-kserve-edit-kubeflow", "kubeflow-kserve-view-kubeflow"],
                "{v}"
            );
            assert_eq!(
                names(&objects, "ClusterRoleBinding"),
                ["kserve-manager-rolebinding-kubeflow", "kserve-proxy-rolebinding-kubeflow", "kserve-models-web-app-binding-kubeflow"],
                "{v}"
            );
            assert_eq!(names(&objects, "Role"), ["kserve-leader-election-role"]);
            assert_eq!(names(&objects, "RoleBinding"), ["kserve-leader-election-rolebinding"]);
            assert_eq!(names(&objects, "Issuer"), ["kserve-selfsigned-issuer"]);
            assert_eq!(names(&objects, "Certificate"), ["kserve-serving-cert"]);
            assert_eq!(names(&objects, "ClusterServingRuntime"), KSERVE_RUNTIMES, "{v}");
            // Nothing of KFServing's API group or names.
            assert!(objects.iter().all(|o| !o["metadata"]["name"].as_str().unwrap().contains("kfserving")), "{v}");
            assert!(objects.iter().all(|o| !o.to_string().contains("serving.kubeflow.org/v1")), "{v}");

            let manager = containers(&objects, "Deployment", "kserve-controller-manager");
            assert_eq!((manager[0]["name"].as_str(), manager[0]["image"].as_str()), (Some("manager"), Some(controller_image)), "{v}");
            assert_eq!((manager[1]["name"].as_str(), manager[1]["image"].as_str()), (Some("kube-rbac-proxy"), Some("quay.io/brancz/kube-rbac-proxy:v0.18.0")), "{v}");
            assert_eq!(containers(&objects, "Deployment", "kserve-models-web-app")[0]["image"], web_app_image, "{v}");
            let controller = find(&objects, "Deployment", "kserve-controller-manager");
            assert_eq!(controller["metadata"]["namespace"], "kubeflow");
            assert_eq!(controller["metadata"]["labels"]["components.kubeflow.org/part-of"], "kfserving");
            assert_eq!(controller["metadata"]["labels"]["components.kubeflow.org/version"], v);
            assert_eq!(controller["metadata"]["annotations"]["components.kubeflow.org/owner"], "team/kfserving");

            // Cluster-scoped objects other than CRDs, the Namespace and the shared runtimes carry
            // the namespace suffix.
            assert_cluster_roles_and_webhooks_are_suffixed(&objects);
            // Apply order: namespace, CRDs, ..., workloads, custom resources, webhooks last.
            assert_namespace_then_crds(&objects, KSERVE_CRDS.len());
            let first = |kind: &str| objects.iter().position(|o| o["kind"] == kind).unwrap();
            let last = |kind: &str| objects.iter().rposition(|o| o["kind"] == kind).unwrap();
            assert!(last("Service") < first("Deployment"));
            assert!(last("Deployment") < first("ClusterServingRuntime") && last("Deployment") < first("Certificate"));
            assert!(last("ClusterServingRuntime") < first("MutatingWebhookConfiguration"));
            assert!(objects.last().unwrap()["kind"].as_str().unwrap().ends_with("WebhookConfiguration"));
        }
    }

    #[test]
    fn kserve_crds_are_served_by_serving_kserve_io_and_identical_across_installs() {
        let crds = |objects: &[Value]| objects.iter().filter(|o| o["kind"] == "CustomResourceDefinition").cloned().collect::<Vec<_>>();
        for v in KSERVE {
            let here = desired_objects::<KFServingComponent>(&kfserving_in("kfserving", "team", json!({"version": v})), &Inputs::default()).unwrap();
            let there = desired_objects::<KFServingComponent>(
                &kfserving_in("serving", "other-team", json!({"version": v, "targetNamespace": "serving", "ingressDomain": "models.example.org"})),
                &Inputs::default(),
            )
            .unwrap();
            // Shared by every install: no owner, the same object whoever renders it.
            assert_eq!(crds(&here), crds(&there), "{v}");
            for crd in crds(&here) {
                let name = crd["metadata"]["name"].as_str().unwrap();
                assert_eq!(crd["spec"]["group"], "serving.kserve.io", "{name}");
                assert!(crd["metadata"]["annotations"].get("components.kubeflow.org/owner").is_none(), "{name}");
                assert_eq!(crd["metadata"]["labels"]["components.kubeflow.org/version"], v, "{name}");
                let versions: Vec<_> = crd["spec"]["versions"].as_array().unwrap().iter().map(|x| (x["name"].as_str().unwrap(), x["served"] == true, x["storage"] == true)).collect();
                let expected = if name == "inferenceservices.serving.kserve.io" { "v1beta1" } else { "v1alpha1" };
                assert_eq!(versions, [(expected, true, true)], "{name}");
                assert_eq!(crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["x-kubernetes-preserve-unknown-fields"], true, "{name}");
            }
            let scope = |name: &str| find(&here, "CustomResourceDefinition", name)["spec"]["scope"].clone();
            assert_eq!(scope("inferenceservices.serving.kserve.io"), "Namespaced");
            assert_eq!(scope("clusterservingruntimes.serving.kserve.io"), "Cluster");
            assert_eq!(scope("localmodelcaches.serving.kserve.io"), "Cluster");
            assert_eq!(find(&here, "CustomResourceDefinition", "inferenceservices.serving.kserve.io")["spec"]["names"]["shortNames"], json!(["isvc"]));
        }
    }

    #[test]
    fn kserve_config_sets_the_deployment_mode_and_carries_the_spec_ingress() {
        for v in KSERVE {
            let objects = build(json!({"version": v, "targetNamespace": "serving", "ingressDomain": "models.example.org", "ingressGateway": "istio-system/public-gateway"}));
            let config = find(&objects, "ConfigMap", CONFIG_MAP);
            assert_eq!(config["metadata"]["namespace"], "serving");
            let keys: Vec<&str> = config["data"].as_object().unwrap().keys().map(String::as_str).collect();
            for key in ["deploy", "ingress", "storageInitializer", "credentials", "explainers", "agent", "logger", "batcher", "router", "metricsAggregator", "localModel"] {
                assert!(keys.contains(&key), "{v}: no {key} in {keys:?}");
            }
            assert!(!keys.contains(&"predictors"), "{v}: KServe's model servers are ClusterServingRuntimes");
            assert_eq!(config_entry(&objects, "deploy"), json!({"defaultDeploymentMode": "Serverless"}), "{v}");
            assert_eq!(
                config_entry(&objects, "ingress"),
                json!({
                    "enableGatewayApi": false,
                    "kserveIngressGateway": "kserve/kserve-ingress-gateway",
                    "ingressGateway": "istio-system/public-gateway",
                    "localGateway": "knative-serving/knative-local-gateway",
                    "localGatewayService": "knative-local-gateway.istio-system.svc.cluster.local",
                    "ingressDomain": "models.example.org",
                    "ingressClassName": "istio",
                    "domainTemplate": "{{ .Name }}-{{ .Namespace }}.{{ .IngressDomain }}",
                    "urlScheme": "http",
                    "disableIstioVirtualHost": false,
                    "disableIngressCreation": false,
                }),
                "{v}"
            );
            let tag = |image: &str| format!("{image}:{v}");
            assert_eq!(config_entry(&objects, "storageInitializer")["image"], tag("kserve/storage-initializer"));
            assert_eq!(config_entry(&objects, "agent")["image"], tag("kserve/agent"));
            assert_eq!(config_entry(&objects, "logger")["image"], tag("kserve/agent"));
            assert_eq!(config_entry(&objects, "logger")["defaultUrl"], "http://default-broker");
            assert_eq!(config_entry(&objects, "batcher")["image"], tag("kserve/agent"));
            assert_eq!(config_entry(&objects, "router")["image"], tag("kserve/router"));
            assert_eq!(config_entry(&objects, "explainers")["art"], json!({"image": "kserve/art-explainer", "defaultImageVersion": v}));
            assert_eq!(config_entry(&objects, "localModel")["enabled"], false);
            assert_eq!(config_entry(&objects, "credentials")["s3"]["s3AccessKeyIDName"], "AWS_ACCESS_KEY_ID");
        }
        // The defaults when the spec says nothing: Kubeflow's gateway, example.com.
        let ingress = config_entry(&build(json!({"version": "v0.15.0"})), "ingress");
        assert_eq!((ingress["ingressDomain"].as_str(), ingress["ingressGateway"].as_str()), (Some("example.com"), Some("kubeflow/kubeflow-gateway")));
        // Parameters still win over the release's default local gateway; RawDeployment is offered.
        let spec = json!({"version": "v0.15.2", "overrides": {"parameters": [
            {"name": "localGateway", "value": "istio-system/cluster-local-gateway"},
            {"name": "deploymentMode", "value": "RawDeployment"},
            {"name": "loggerDefaultUrl", "value": "http://broker-ingress.knative-eventing.svc/kubeflow/default"},
        ]}});
        let objects = build(spec);
        assert_eq!(config_entry(&objects, "ingress")["localGateway"], "istio-system/cluster-local-gateway");
        assert_eq!(config_entry(&objects, "deploy"), json!({"defaultDeploymentMode": "RawDeployment"}));
        assert_eq!(config_entry(&objects, "logger")["defaultUrl"], "http://broker-ingress.knative-eventing.svc/kubeflow/default");
        let source = json!([{"application": "kfserving", "parameters": [{"name": "deploymentMode", "value": "RawDeployment"}]}]);
        assert_eq!(config_entry(&build(json!({"version": "v0.15.0", "sources": source})), "deploy")["defaultDeploymentMode"], "RawDeployment");
        // KFServing keeps its own local gateway default.
        assert_eq!(config_entry(&build(json!({"version": "v0.5.1"})), "ingress")["localGateway"], "knative-serving/cluster-local-gateway");
    }

    #[test]
    fn kserve_webhooks_point_at_the_webhook_service_with_cert_managers_certificate() {
        for v in KSERVE {
            let objects = build(json!({"version": v, "targetNamespace": "serving"}));
            let expected = [
                ("MutatingWebhookConfiguration", "inferenceservice.serving.kserve.io-serving", "inferenceservice.kserve-webhook-server.defaulter", "/mutate-serving-kserve-io-v1beta1-inferenceservice"),
                ("MutatingWebhookConfiguration", "inferenceservice.serving.kserve.io-serving", "inferenceservice.kserve-webhook-server.pod-mutator", "/mutate-pods"),
                ("ValidatingWebhookConfiguration", "inferenceservice.serving.kserve.io-serving", "inferenceservice.kserve-webhook-server.validator", "/validate-serving-kserve-io-v1beta1-inferenceservice"),
                ("ValidatingWebhookConfiguration", "trainedmodel.serving.kserve.io-serving", "trainedmodel.kserve-webhook-server.validator", "/validate-serving-kserve-io-v1alpha1-trainedmodel"),
                ("ValidatingWebhookConfiguration", "inferencegraph.serving.kserve.io-serving", "inferencegraph.kserve-webhook-server.validator", "/validate-serving-kserve-io-v1alpha1-inferencegraph"),
                ("ValidatingWebhookConfiguration", "servingruntime.serving.kserve.io-serving", "servingruntime.kserve-webhook-server.validator", "/validate-serving-kserve-io-v1alpha1-servingruntime"),
                (
                    "ValidatingWebhookConfiguration",
                    "clusterservingruntime.serving.kserve.io-serving",
                    "clusterservingruntime.kserve-webhook-server.validator",
                    "/validate-serving-kserve-io-v1alpha1-clusterservingruntime",
                ),
            ];
            let webhooks: Vec<(String, String, String, String)> = objects
                .iter()
                .filter(|o| o["kind"].as_str().unwrap().ends_with("WebhookConfiguration"))
                .flat_map(|c| c["webhooks"].as_array().unwrap().iter().map(move |w| (c, w)))
                .map(|(c, w)| {
                    let text = |x: &Value| x.as_str().unwrap().to_string();
                    (text(&c["kind"]), text(&c["metadata"]["name"]), text(&w["name"]), text(&w["clientConfig"]["service"]["path"]))
                })
                .collect();
            let expected: Vec<(String, String, String, String)> =
                expected.iter().map(|(a, b, c, d)| (a.to_string(), b.to_string(), c.to_string(), d.to_string())).collect();
            assert_eq!(webhooks, expected, "{v}");
            for config in objects.iter().filter(|o| o["kind"].as_str().unwrap().ends_with("WebhookConfiguration")) {
                assert_eq!(config["metadata"]["annotations"]["cert-manager.io/inject-ca-from"], "serving/kserve-serving-cert");
                for webhook in config["webhooks"].as_array().unwrap() {
                    assert_eq!(
                        (&webhook["clientConfig"]["service"]["name"], &webhook["clientConfig"]["service"]["namespace"], &webhook["clientConfig"]["service"]["port"]),
                        (&json!("kserve-webhook-server-service"), &json!("serving"), &json!(443)),
                        "{}",
                        webhook["name"]
                    );
                }
            }
            // The Service reaches the controller's webhook port, whose certificate names it.
            let service = find(&objects, "Service", "kserve-webhook-server-service");
            let controller = find(&objects, "Deployment", "kserve-controller-manager");
            let pod_labels = &controller["spec"]["template"]["metadata"]["labels"];
            for (key, value) in service["spec"]["selector"].as_object().unwrap() {
                assert_eq!(&pod_labels[key], value, "{key}");
            }
            assert_eq!(service["spec"]["ports"][0]["targetPort"], "webhook-server");
            assert_eq!(containers(&objects, "Deployment", "kserve-controller-manager")[0]["ports"][0], json!({"name": "webhook-server", "containerPort": 9443, "protocol": "TCP"}));
            let certificate = find(&objects, "Certificate", "kserve-serving-cert");
            assert_eq!(certificate["metadata"]["namespace"], "serving");
            assert_eq!(certificate["spec"]["dnsNames"], json!(["kserve-webhook-server-service.serving.svc"]));
            assert_eq!(certificate["spec"]["issuerRef"], json!({"kind": "Issuer", "name": "kserve-selfsigned-issuer"}));
            assert_eq!(certificate["spec"]["secretName"], "kserve-webhook-server-cert");
            assert_eq!(controller["spec"]["template"]["spec"]["volumes"][0]["secret"]["secretName"], "kserve-webhook-server-cert");
            // The pod mutator acts only on InferenceServices' pods.
            let mutator = &find(&objects, "MutatingWebhookConfiguration", "inferenceservice.serving.kserve.io-serving")["webhooks"][1];
            assert_eq!(mutator["objectSelector"], json!({"matchExpressions": [{"key": "serving.kserve.io/inferenceservice", "operator": "Exists"}]}));
        }
    }

    /// Two installs at one release apply a shared runtime with the same content hash (so neither
    /// re-applies over the other) and each records only itself on it.
    #[test]
    fn installs_of_one_release_record_themselves_on_shared_runtimes() {
        let render = |namespace: &str| desired_objects::<KFServingComponent>(&kfserving_in("kfserving", namespace, json!({"version": "v0.15.2"})), &Inputs::default()).unwrap();
        let (team, other) = (render("team"), render("other"));
        let (ours, theirs) = (find(&team, "ClusterServingRuntime", "kserve-sklearnserver"), find(&other, "ClusterServingRuntime", "kserve-sklearnserver"));
        let hash = "components.kubeflow.org/applied-hash";
        assert_eq!(ours["metadata"]["annotations"][hash], theirs["metadata"]["annotations"][hash]);
        let recorded = |runtime: &Value| -> Vec<(String, String)> {
            runtime["metadata"]["annotations"]
                .as_object()
                .unwrap()
                .iter()
                .filter(|(k, _)| k.starts_with("used-by.components.kubeflow.org/"))
                .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_string()))
                .collect()
        };
        let (ours, theirs) = (recorded(ours), recorded(theirs));
        assert_eq!(ours.iter().map(|(_, v)| v.as_str()).collect::<Vec<_>>(), ["kfserving/team/kfserving"]);
        assert_eq!(theirs.iter().map(|(_, v)| v.as_str()).collect::<Vec<_>>(), ["kfserving/other/kfserving"]);
        assert_ne!(ours[0].0, theirs[0].0, "one key per install");
        // Objects of one install carry no user record.
        let controller = find(&team, "Deployment", "kserve-controller-manager");
        assert!(!controller["metadata"]["annotations"].as_object().unwrap().keys().any(|k| k.starts_with("used-by.")));
    }

    #[test]
    fn kserve_cluster_serving_runtimes_are_shared_and_follow_the_release() {
        for (v, sklearn, huggingface) in [
            ("v0.15.0", "kserve/sklearnserver:v0.15.0", "kserve/huggingfaceserver:v0.15.0"),
            ("v0.15.2", "kserve/sklearnserver:v0.15.2", "kserve/huggingfaceserver:v0.15.2"),
        ] {
            let objects = build(json!({"version": v}));
            let runtime = |name: &str| find(&objects, "ClusterServingRuntime", name).clone();
            for name in KSERVE_RUNTIMES {
                let r = runtime(name);
                assert_eq!(r["apiVersion"], "serving.kserve.io/v1alpha1");
                assert!(r["metadata"].get("namespace").is_none(), "{name} is cluster-scoped");
                assert_eq!(r["metadata"]["annotations"]["components.kubeflow.org/shared"], "true", "{name}");
                assert!(r["metadata"]["annotations"].get("components.kubeflow.org/owner").is_none(), "{name}");
                assert_eq!(r["spec"]["containers"][0]["name"], "kserve-container", "{name}");
            }
            assert_eq!(runtime("kserve-sklearnserver")["spec"]["containers"][0]["image"], sklearn);
            assert_eq!(runtime("kserve-huggingfaceserver")["spec"]["containers"][0]["image"], huggingface);
            assert_eq!(runtime("kserve-tensorflow-serving")["spec"]["containers"][0]["image"], "tensorflow/serving:2.6.2");
            assert_eq!(runtime("kserve-torchserve")["spec"]["containers"][0]["image"], "pytorch/torchserve-kfs:0.9.0");
            assert_eq!(runtime("kserve-tritonserver")["spec"]["containers"][0]["image"], "nvcr.io/nvidia/tritonserver:23.05-py3");
            assert_eq!(runtime("kserve-mlserver")["spec"]["containers"][0]["image"], "docker.io/seldonio/mlserver:1.5.0");
            assert_eq!(runtime("kserve-sklearnserver")["spec"]["supportedModelFormats"], json!([{"name": "sklearn", "version": "1", "autoSelect": true, "priority": 1}]));
            // KServe's template placeholders reach the runtime untouched.
            assert_eq!(runtime("kserve-sklearnserver")["spec"]["containers"][0]["args"][0], "--model_name={{.Name}}");
            assert_eq!(runtime("kserve-tensorflow-serving")["spec"]["containers"][0]["securityContext"]["runAsUser"], 1000);
            // The same for every install at a version, but for the record of who uses it.
            let elsewhere = desired_objects::<KFServingComponent>(&kfserving_in("other", "ml", json!({"version": v, "targetNamespace": "serving"})), &Inputs::default()).unwrap();
            let unrecorded = |mut runtime: Value| {
                runtime["metadata"]["annotations"].as_object_mut().unwrap().retain(|k, _| !k.starts_with("used-by.components.kubeflow.org/"));
                runtime
            };
            assert_eq!(unrecorded(find(&elsewhere, "ClusterServingRuntime", "kserve-torchserve").clone()), unrecorded(runtime("kserve-torchserve")));
        }
        // On OpenShift the restricted SCC assigns the user, in runtimes as in workloads.
        let objects = build(json!({"version": "v0.15.2", "platform": "OpenShift"}));
        let tensorflow = find(&objects, "ClusterServingRuntime", "kserve-tensorflow-serving");
        assert!(tensorflow["spec"]["containers"][0]["securityContext"].get("runAsUser").is_none());
        assert_eq!(tensorflow["spec"]["containers"][0]["securityContext"]["runAsNonRoot"], true);
        assert!(containers(&objects, "Deployment", "kserve-models-web-app")[0]["securityContext"].get("runAsUser").is_none());
    }

    #[test]
    fn kserve_upgrades_in_place_from_v0150_to_v0152() {
        let immutable = |v: &str| {
            let o = build(json!({"version": v}));
            ["kserve-controller-manager", "kserve-models-web-app"].map(|d| find(&o, "Deployment", d)["spec"]["selector"].clone())
        };
        assert_eq!(immutable("v0.15.0"), immutable("v0.15.2"));
    }

    #[test]
    fn kserve_takes_the_same_overrides() {
        let spec = json!({"version": "v0.15.2", "overrides": {
            "images": {"manager": "registry.local/kserve-controller:patched", "kserve-models-web-app": "registry.local/models-web-app:patched"},
            "replicas": {"kserve-controller-manager": 2},
        }});
        let objects = build(spec);
        assert_eq!(containers(&objects, "Deployment", "kserve-controller-manager")[0]["image"], "registry.local/kserve-controller:patched");
        assert_eq!(containers(&objects, "Deployment", "kserve-models-web-app")[0]["image"], "registry.local/models-web-app:patched");
        assert_eq!(find(&objects, "Deployment", "kserve-controller-manager")["spec"]["replicas"], 2);
        // KFServing's workload names are refused, naming KServe's.
        let spec = json!({"version": "v0.15.0", "overrides": {"replicas": {"kfserving-controller-manager": 2}}});
        let err = desired_objects::<KFServingComponent>(&kfserving(spec), &Inputs::default()).unwrap_err();
        assert_eq!(err.field, "spec.overrides.replicas.kfserving-controller-manager");
        assert!(err.message.contains("kserve-controller-manager"), "{err}");
    }

    #[test]
    fn deployment_mode_is_kserve_only_and_one_of_serverless_and_raw_deployment() {
        let check = |spec: Value, field: &str, needle: &str| {
            let err = desired_objects::<KFServingComponent>(&kfserving(spec), &Inputs::default()).unwrap_err();
            assert_eq!(err.field, field);
            assert!(err.message.contains(needle), "{err}");
        };
        let mode = |value: &str| json!({"parameters": [{"name": "deploymentMode", "value": value}]});
        // It would do nothing on KFServing: refused, naming the field and where it applies.
        check(json!({"version": "v0.5.1", "overrides": mode("RawDeployment")}), "spec.overrides.parameters[0].name", "KServe releases only (v0.15.0, v0.15.2)");
        let source = json!([{"application": "kfserving-install", "parameters": [{"name": "deploymentMode", "value": "Serverless"}]}]);
        check(json!({"version": "v0.4.1", "sources": source}), "spec.sources[0].parameters[0].name", "KFServing v0.4.1");
        check(json!({"version": "v0.15.0", "overrides": mode("ModelMesh")}), "spec.overrides.parameters[0].value", "allowed: Serverless, RawDeployment");
        check(json!({"version": "v0.15.2", "overrides": mode("Serverless\", \"x\": \"")}), "spec.overrides.parameters[0].value", "allowed: Serverless, RawDeployment");
        // The ingress parameters are guarded on KServe as on KFServing.
        let gateway = json!({"parameters": [{"name": "localGateway", "value": "a\"b"}]});
        check(json!({"version": "v0.15.0", "overrides": gateway}), "spec.overrides.parameters[0].value", "would break the JSON");
        check(json!({"version": "v0.15.2", "ingressGateway": "kubeflow-gateway"}), "spec.ingressGateway", "namespace/name");
        check(json!({"version": "v0.15.2", "ingressDomain": "Models.Example.com"}), "spec.ingressDomain", "lower-case letters");
    }

    #[test]
    fn moving_to_kserve_never_prunes_kfservings_crds() {
        let moved = |policy: &str| {
            let mut k = kfserving(json!({"version": "v0.15.0", "crdRemovalPolicy": policy}));
            k.status = Some(serde_json::from_value(json!({"installedVersion": "v0.5.1", "inventory": [
                {"group": "apiextensions.k8s.io", "version": "v1", "kind": "CustomResourceDefinition", "name": "inferenceservices.serving.kubeflow.org"},
                {"group": "apps", "version": "v1", "kind": "StatefulSet", "namespace": "kubeflow", "name": "kfserving-controller-manager"},
            ]})).unwrap());
            desired_objects::<KFServingComponent>(&k, &Inputs::default())
        };
        let err = moved("Delete").unwrap_err();
        assert_eq!(err.field, "spec.crdRemovalPolicy");
        assert!(err.message.contains("inferenceservices.serving.kubeflow.org") && err.message.contains("allowed: Retain"), "{err}");
        // Retained, the old CRDs stay (prune keeps CRDs) and KServe installs beside them.
        assert!(moved("Retain").is_ok());
        // An install that never ran KFServing may use Delete.
        assert!(desired_objects::<KFServingComponent>(&kfserving(json!({"version": "v0.15.2", "crdRemovalPolicy": "Delete"})), &Inputs::default()).is_ok());
    }
}
