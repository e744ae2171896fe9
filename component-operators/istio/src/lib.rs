//! Istio: the service mesh Kubeflow is reached through (KfDef applications `istio-crds`,
//! `istio-install`, `cluster-local-gateway`, `istio`). Releases 1.3.1 (Kubeflow 1.2) and 1.9.6
//! (Kubeflow 1.3) share one template. 1.3.1 runs the split control plane (istio-pilot,
//! istio-citadel, istio-galley, istio-sidecar-injector); 1.9.6 runs a single istiod, serves the
//! networking v1beta1 API, adds PeerAuthentication and RequestAuthentication and runs its gateways
//! unprivileged. The ingress gateway's selector gains `istio.io/rev` in 1.9.6, so an upgrade
//! replaces that Deployment.

use component_framework::api::Istio;
use component_framework::api::component::GatewayServiceType;
use component_framework::component::release;
use component_framework::k8s_openapi::serde_json::{Value, json};
use component_framework::{Component, InvalidSpec, Inputs, Params, Release};

pub struct IstioComponent;

const TEMPLATE: &str = include_str!("../manifests/istio.yaml");

static RELEASES: [Release; 2] = [
    Release {
        version: "1.3.1",
        manifest: TEMPLATE,
        params: &[
            ("legacyControlPlane", "true"),
            ("istiod", "false"),
            ("networkingV1beta1", "false"),
            ("injectorService", "istio-sidecar-injector"),
            ("gatewayStatusPort", "15020"),
            ("gatewayHttpTargetPort", "80"),
            ("gatewayHttpsTargetPort", "443"),
        ],
        upgrades_from: &[],
        kubeflow: &["1.2"],
    },
    Release {
        version: "1.9.6",
        manifest: TEMPLATE,
        params: &[
            ("legacyControlPlane", "false"),
            ("istiod", "true"),
            ("networkingV1beta1", "true"),
            ("injectorService", "istiod"),
            ("gatewayStatusPort", "15021"),
            ("gatewayHttpTargetPort", "8080"),
            ("gatewayHttpsTargetPort", "8443"),
        ],
        upgrades_from: &["1.3.1"],
        kubeflow: &["1.3"],
    },
];

/// The ingress gateway Service's TLS passthrough port, next to its status port and http/https.
const TLS_PORT: u16 = 15443;
const SERVICE_TYPES: [&str; 3] = ["ClusterIP", "NodePort", "LoadBalancer"];

fn params(pairs: &[(&str, &str)]) -> Params {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

/// A parameter's value as the template will see it, with the spec field that set it.
struct Setting {
    value: String,
    field: String,
}

impl Setting {
    /// `value` from spec field `field`, unless a KfDef application parameter or
    /// `spec.overrides.parameters` sets `name` (the framework applies those later, later wins).
    fn resolve(resource: &Istio, name: &str, value: impl ToString, field: &str) -> Self {
        let core = &resource.spec.core;
        let mut setting = Setting { value: value.to_string(), field: field.to_string() };
        for (i, source) in core.sources.iter().enumerate() {
            for (j, p) in source.parameters.iter().enumerate().filter(|(_, p)| p.name == name) {
                setting = Setting { value: p.value.clone(), field: format!("spec.sources[{i}].parameters[{j}].value") };
            }
        }
        for (i, p) in core.overrides.parameters.iter().enumerate().filter(|(_, p)| p.name == name) {
            setting = Setting { value: p.value.clone(), field: format!("spec.overrides.parameters[{i}].value") };
        }
        setting
    }

    fn invalid(&self, message: String) -> InvalidSpec {
        InvalidSpec::new(&self.field, message)
    }
}

fn service_type_name(t: GatewayServiceType) -> &'static str {
    match t {
        GatewayServiceType::ClusterIP => "ClusterIP",
        GatewayServiceType::NodePort => "NodePort",
        GatewayServiceType::LoadBalancer => "LoadBalancer",
    }
}

impl Component for IstioComponent {
    type Resource = Istio;
    const DEFAULT_NAMESPACE: &'static str = "istio-system";
    const DISPLAY_NAME: &'static str = "Istio for Kubeflow";
    const INSTALLS: &'static str = "the Istio control plane and ingress gateways Kubeflow routes through";

    fn test_spec() -> Value {
        json!({"gateway": {"serviceType": "NodePort"}})
    }

    fn releases() -> &'static [Release] {
        &RELEASES
    }

    fn default_parameters() -> Params {
        params(&[("gatewayServiceType", "ClusterIP"), ("httpPort", "80"), ("httpsPort", "443"), ("clusterLocalGateway", "true")])
    }

    fn parameters(resource: &Istio, _inputs: &Inputs) -> Result<Params, InvalidSpec> {
        let spec = &resource.spec;
        let version = spec.core.version.as_str();
        let service_type = Setting::resolve(resource, "gatewayServiceType", service_type_name(spec.gateway.service_type), "spec.gateway.serviceType");
        let http = Setting::resolve(resource, "httpPort", spec.gateway.http_port, "spec.gateway.httpPort");
        let https = Setting::resolve(resource, "httpsPort", spec.gateway.https_port, "spec.gateway.httpsPort");
        let cluster_local = Setting::resolve(resource, "clusterLocalGateway", spec.cluster_local_gateway, "spec.clusterLocalGateway");

        if !SERVICE_TYPES.contains(&service_type.value.as_str()) {
            return Err(service_type.invalid(format!("gateway Service type {:?} is not supported; allowed: {}", service_type.value, SERVICE_TYPES.join(", "))));
        }
        if !["true", "false"].contains(&cluster_local.value.as_str()) {
            return Err(cluster_local.invalid(format!("{:?} is not a boolean; allowed: true, false", cluster_local.value)));
        }
        // The gateway Service also carries the release's status port and the TLS passthrough port.
        let status_port: u16 = release::<Self>(version)?.params.iter().find(|(k, _)| *k == "gatewayStatusPort").and_then(|(_, v)| v.parse().ok()).unwrap_or(15021);
        let port = |s: &Setting| -> Result<u16, InvalidSpec> {
            let port = s.value.parse::<u16>().ok().filter(|p| *p > 0).ok_or_else(|| s.invalid(format!("{:?} is not a port; allowed: an integer from 1 to 65535", s.value)))?;
            if port == status_port || port == TLS_PORT {
                return Err(s.invalid(format!(
                    "port {port} is the ingress gateway's own {} port in Istio {version}; allowed: 1 to 65535 except {status_port} and {TLS_PORT}",
                    if port == TLS_PORT { "TLS passthrough" } else { "status" }
                )));
            }
            Ok(port)
        };
        let (http_port, https_port) = (port(&http)?, port(&https)?);
        if http_port == https_port {
            return Err(https.invalid(format!("must differ from the HTTP port, both are {https_port}; allowed: any port but {http_port} (defaults: 80 for HTTP, 443 for HTTPS)")));
        }
        Ok(Params::from([
            ("gatewayServiceType".into(), service_type.value),
            ("httpPort".into(), http_port.to_string()),
            ("httpsPort".into(), https_port.to_string()),
            ("clusterLocalGateway".into(), cluster_local.value),
        ]))
    }

    /// The cluster-local gateway's Deployment differs per release, so its documents are kept by the
    /// release flags; it goes with the gateway's Service, which `clusterLocalGateway` keeps.
    fn customize(_resource: &Istio, objects: &mut Vec<Value>) -> Result<(), InvalidSpec> {
        let is = |o: &Value, kind: &str| o["kind"] == kind && o["metadata"]["name"] == "cluster-local-gateway";
        if !objects.iter().any(|o| is(o, "Service")) {
            objects.retain(|o| !is(o, "Deployment"));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use component_framework::build::desired_objects;
    use component_framework::kinds;
    use serde_json::{Value, json};
    use std::collections::BTreeSet;

    fn istio(spec: Value) -> Istio {
        let mut i: Istio = serde_json::from_value(json!({
            "apiVersion": "components.kubeflow.org/v1alpha1", "kind": "Istio",
            "metadata": {"name": "istio", "namespace": "team"}, "spec": spec,
        }))
        .unwrap();
        i.metadata.uid = Some("uid".into());
        i
    }

    fn build(spec: Value) -> Vec<Value> {
        desired_objects::<IstioComponent>(&istio(spec), &Inputs::default()).unwrap()
    }

    fn names(objects: &[Value], kind: &str) -> Vec<String> {
        objects.iter().filter(|o| o["kind"] == kind).map(|o| o["metadata"]["name"].as_str().unwrap().to_string()).collect()
    }

    fn find<'a>(objects: &'a [Value], kind: &str, name: &str) -> &'a Value {
        objects.iter().find(|o| o["kind"] == kind && o["metadata"]["name"] == name).unwrap_or_else(|| panic!("no {kind} {name}"))
    }

    fn info(o: &Value) -> &'static kinds::KindInfo {
        kinds::lookup(o["apiVersion"].as_str().unwrap(), o["kind"].as_str().unwrap()).unwrap()
    }

    #[test]
    fn every_release_builds_a_full_object_set() {
        for release in IstioComponent::releases() {
            let v = release.version;
            for namespace in [None, Some("mesh")] {
                let mut spec = json!({"version": v});
                if let Some(ns) = namespace {
                    spec["targetNamespace"] = json!(ns);
                }
                let ns = namespace.unwrap_or("istio-system");
                let objects = build(spec);
                let (deployments, crds): (&[&str], usize) = match v {
                    "1.3.1" => (&["istio-pilot", "istio-citadel", "istio-galley", "istio-sidecar-injector", "istio-ingressgateway", "cluster-local-gateway"], 7),
                    _ => (&["istiod", "istio-ingressgateway", "cluster-local-gateway"], 9),
                };
                assert_eq!(names(&objects, "Deployment"), deployments, "{v}");
                assert_eq!(names(&objects, "CustomResourceDefinition").len(), crds, "{v}");
                assert_eq!(names(&objects, "Namespace"), [ns]);
                for crd in objects.iter().filter(|o| o["kind"] == "CustomResourceDefinition") {
                    for column in crd["spec"]["versions"].as_array().unwrap().iter().flat_map(|v| v["additionalPrinterColumns"].as_array().into_iter().flatten()) {
                        let keys: Vec<&String> = column.as_object().unwrap().keys().collect();
                        assert!(keys.iter().all(|k| ["name", "type", "jsonPath", "description"].contains(&k.as_str())), "{}: {keys:?}", crd["metadata"]["name"]);
                    }
                }
                let security_crds = names(&objects, "CustomResourceDefinition").into_iter().filter(|n| n.ends_with(".security.istio.io")).count();
                assert_eq!(security_crds, if v == "1.3.1" { 1 } else { 3 }, "{v}");

                for o in &objects {
                    let (kind, name) = (o["kind"].as_str().unwrap(), o["metadata"]["name"].as_str().unwrap());
                    let k = info(o);
                    if k.cluster_scoped {
                        assert!(o["metadata"]["namespace"].is_null(), "{kind} {name}");
                        if !k.is_crd() && !k.is_shared() {
                            assert!(name.ends_with(&format!("-{ns}")), "{v}: cluster-scoped {kind} {name} lacks the namespace suffix");
                        }
                    } else {
                        assert_eq!(o["metadata"]["namespace"], ns, "{kind} {name}");
                    }
                    assert!(!o.to_string().contains("${"), "{v}: unrendered reference in {kind} {name}");
                    if !k.is_shared() {
                        assert_eq!(o["metadata"]["labels"]["components.kubeflow.org/part-of"], "istio");
                        // CRDs are shared by every install and name no owner.
                        let owner = if k.is_crd() { serde_json::Value::Null } else { "team/istio".into() };
                        assert_eq!(o["metadata"]["annotations"]["components.kubeflow.org/owner"], owner, "{kind} {name}");
                    }
                }
                for binding in objects.iter().filter(|o| o["kind"].as_str().unwrap().ends_with("Binding")) {
                    for subject in binding["subjects"].as_array().unwrap() {
                        assert_eq!(subject["namespace"], ns);
                    }
                }

                // Container names are unique within the release (image overrides key on them).
                let containers: Vec<&str> = objects
                    .iter()
                    .filter(|o| o["kind"] == "Deployment")
                    .flat_map(|o| o["spec"]["template"]["spec"]["containers"].as_array().unwrap())
                    .map(|c| c["name"].as_str().unwrap())
                    .collect();
                assert_eq!(containers.iter().collect::<BTreeSet<_>>().len(), containers.len(), "{v}: {containers:?}");

                let pilot = find(&objects, "Deployment", if v == "1.3.1" { "istio-pilot" } else { "istiod" });
                assert_eq!(pilot["spec"]["template"]["spec"]["containers"][0]["image"], format!("docker.io/istio/pilot:{v}"));
                let gateway = find(&objects, "Deployment", "istio-ingressgateway");
                assert_eq!(gateway["spec"]["template"]["spec"]["containers"][0]["image"], format!("docker.io/istio/proxyv2:{v}"));
                assert_eq!(gateway["metadata"]["labels"]["components.kubeflow.org/version"], v);

                // Objects come out in apply order: namespace first, webhooks last.
                let ranks: Vec<u8> = objects.iter().map(|o| info(o).rank).collect();
                assert!(ranks.windows(2).all(|w| w[0] <= w[1]), "{v}: {ranks:?}");
                assert_eq!(objects.first().unwrap()["kind"], "Namespace");
                assert!(objects.last().unwrap()["kind"].as_str().unwrap().ends_with("WebhookConfiguration"));
            }
        }
    }

    #[test]
    fn webhooks_never_intercept_ordinary_namespaces() {
        for release in IstioComponent::releases() {
            let objects = build(json!({"version": release.version}));
            let configurations: Vec<&Value> = objects.iter().filter(|o| o["kind"].as_str().unwrap().ends_with("WebhookConfiguration")).collect();
            assert_eq!(configurations.len(), 2, "{}", release.version);
            for webhook in configurations.iter().flat_map(|c| c["webhooks"].as_array().unwrap()) {
                assert_eq!(webhook["failurePolicy"], "Ignore", "{}", webhook["name"]);
                let labels = webhook["namespaceSelector"]["matchLabels"].as_object().unwrap();
                assert!(labels.contains_key("istio-injection") || labels.contains_key("istio.io/validation"), "{}", webhook["name"]);
            }
            let injector = &find(&objects, "MutatingWebhookConfiguration", "istio-sidecar-injector-istio-system")["webhooks"][0];
            let service = if release.version == "1.3.1" { "istio-sidecar-injector" } else { "istiod" };
            assert_eq!(injector["clientConfig"]["service"], json!({"name": service, "namespace": "istio-system", "path": "/inject", "port": 443}));
            assert_eq!(injector["namespaceSelector"], json!({"matchLabels": {"istio-injection": "enabled"}}));
        }
    }

    #[test]
    fn gateway_spec_reaches_the_service() {
        for (v, targets) in [("1.3.1", [80, 443]), ("1.9.6", [8080, 8443])] {
            let objects = build(json!({"version": v, "gateway": {"serviceType": "LoadBalancer", "httpPort": 8080, "httpsPort": 8443}}));
            let service = find(&objects, "Service", "istio-ingressgateway");
            assert_eq!(service["spec"]["type"], "LoadBalancer");
            let ports = &service["spec"]["ports"];
            assert_eq!(ports[1], json!({"name": "http2", "port": 8080, "targetPort": targets[0], "protocol": "TCP"}));
            assert_eq!(ports[2], json!({"name": "https", "port": 8443, "targetPort": targets[1], "protocol": "TCP"}));
            assert!(ports[0]["port"].is_number());
        }
        let defaults = build(json!({"version": "1.9.6"}));
        let service = find(&defaults, "Service", "istio-ingressgateway");
        assert_eq!(service["spec"]["type"], "ClusterIP");
        assert_eq!(service["spec"]["ports"][1]["port"], 80);
        assert_eq!(service["spec"]["ports"][2]["port"], 443);
        // kfctl application parameters outside the component's vocabulary are ignored; ones inside apply.
        let spec = json!({"version": "1.9.6", "sources": [{"application": "istio", "parameters": [{"name": "clusterRbacConfig", "value": "ON"}, {"name": "gatewayServiceType", "value": "NodePort"}]}]});
        assert_eq!(find(&build(spec), "Service", "istio-ingressgateway")["spec"]["type"], "NodePort");
    }

    #[test]
    fn cluster_local_gateway_can_be_left_out() {
        for release in IstioComponent::releases() {
            let v = release.version;
            let full = build(json!({"version": v}));
            assert!(full.iter().any(|o| o["metadata"]["name"] == "cluster-local-gateway" && o["kind"] == "Deployment"));
            let by_spec = build(json!({"version": v, "clusterLocalGateway": false}));
            let by_override = build(json!({"version": v, "overrides": {"parameters": [{"name": "clusterLocalGateway", "value": "false"}]}}));
            for objects in [&by_spec, &by_override] {
                let left: Vec<String> = objects.iter().map(|o| o["metadata"]["name"].as_str().unwrap().to_string()).filter(|n| n.starts_with("cluster-local-gateway")).collect();
                assert!(left.is_empty(), "{v}: {left:?}");
                assert_eq!(objects.len(), full.len() - 3, "{v}: the ServiceAccount, Service and Deployment go");
                assert!(names(objects, "Deployment").contains(&"istio-ingressgateway".to_string()));
            }
        }
    }

    #[test]
    fn ingress_gateway_selector_changes_between_releases() {
        let selector = |v: &str| find(&build(json!({"version": v})), "Deployment", "istio-ingressgateway")["spec"]["selector"].clone();
        assert_eq!(selector("1.3.1"), json!({"matchLabels": {"app": "istio-ingressgateway", "istio": "ingressgateway"}}));
        assert_eq!(selector("1.9.6"), json!({"matchLabels": {"app": "istio-ingressgateway", "istio": "ingressgateway", "istio.io/rev": "default"}}));
        assert_eq!(IstioComponent::releases()[1].upgrades_from, ["1.3.1"]);
        // Each release's template labels match its own selector.
        for v in ["1.3.1", "1.9.6"] {
            for d in build(json!({"version": v})).iter().filter(|o| o["kind"] == "Deployment") {
                let labels = &d["spec"]["template"]["metadata"]["labels"];
                for (k, value) in d["spec"]["selector"]["matchLabels"].as_object().unwrap() {
                    assert_eq!(&labels[k], value, "{v}: {}", d["metadata"]["name"]);
                }
            }
        }
    }

    #[test]
    fn bad_input_names_the_field_and_the_allowed_values() {
        let check = |spec: Value, field: &str, needle: &str| {
            let err = desired_objects::<IstioComponent>(&istio(spec), &Inputs::default()).unwrap_err();
            assert_eq!(err.field, field);
            assert!(err.message.contains(needle), "{err}");
        };
        check(json!({"version": "1.5.0"}), "spec.version", "supported versions: 1.3.1, 1.9.6");
        check(json!({"version": "1.9.6", "overrides": {"images": {"pilot": "x"}}}), "spec.overrides.images.pilot", "cluster-local-gateway, discovery, istio-ingressgateway");
        check(json!({"version": "1.3.1", "overrides": {"images": {"istio-proxy": "x"}}}), "spec.overrides.images.istio-proxy", "citadel");
        check(json!({"version": "1.9.6", "overrides": {"replicas": {"istio-pilot": 2}}}), "spec.overrides.replicas.istio-pilot", "istiod");
        check(json!({"version": "1.9.6", "gateway": {"httpPort": 8080, "httpsPort": 8080}}), "spec.gateway.httpsPort", "must differ");
        check(json!({"version": "1.9.6", "gateway": {"httpPort": 15021}}), "spec.gateway.httpPort", "except 15021 and 15443");
        check(json!({"version": "1.3.1", "gateway": {"httpsPort": 15443}}), "spec.gateway.httpsPort", "except 15020 and 15443");
        check(json!({"version": "1.9.6", "overrides": {"parameters": [{"name": "gatewayServiceType", "value": "ExternalName"}]}}), "spec.overrides.parameters[0].value", "ClusterIP, NodePort, LoadBalancer");
        check(json!({"version": "1.9.6", "overrides": {"parameters": [{"name": "httpsPort", "value": "80"}]}}), "spec.overrides.parameters[0].value", "must differ");
        check(json!({"version": "1.9.6", "overrides": {"parameters": [{"name": "httpPort", "value": "eighty"}]}}), "spec.overrides.parameters[0].value", "1 to 65535");
        check(
            json!({"version": "1.9.6", "sources": [{"application": "cluster-local-gateway", "parameters": [{"name": "clusterLocalGateway", "value": "yes"}]}]}),
            "spec.sources[0].parameters[0].value",
            "true, false",
        );
        check(
            json!({"version": "1.9.6", "overrides": {"parameters": [{"name": "istiod", "value": "false"}]}}),
            "spec.overrides.parameters[0].name",
            "clusterLocalGateway, gatewayServiceType, httpPort, httpsPort",
        );
    }

    #[test]
    fn overrides_set_images_and_replicas() {
        let spec = json!({"version": "1.9.6", "overrides": {"images": {"istio-ingressgateway": "registry.local/proxyv2:1.9.6"}, "replicas": {"istio-ingressgateway": 3}}});
        let objects = build(spec);
        let gateway = find(&objects, "Deployment", "istio-ingressgateway");
        assert_eq!(gateway["spec"]["replicas"], 3);
        assert_eq!(gateway["spec"]["template"]["spec"]["containers"][0]["image"], "registry.local/proxyv2:1.9.6");
        // The cluster-local gateway runs the same image under its own container name: untouched.
        let local = find(&objects, "Deployment", "cluster-local-gateway");
        assert_eq!(local["spec"]["template"]["spec"]["containers"][0]["image"], "docker.io/istio/proxyv2:1.9.6");
    }
}

#[cfg(test)]
mod platform_tests {
    use super::*;
    use component_framework::build::desired_objects;
    use serde_json::{Value, json};

    fn fixed_ids(objects: &[Value]) -> usize {
        let text = serde_json::to_string(objects).unwrap();
        ["\"runAsUser\"", "\"runAsGroup\"", "\"fsGroup\""].iter().map(|f| text.matches(f).count()).sum()
    }

    #[test]
    fn openshift_drops_fixed_user_and_group_ids() {
        let build = |platform: &str| {
            let istio: Istio = serde_json::from_value(json!({
                "apiVersion": "components.kubeflow.org/v1alpha1", "kind": "Istio",
                "metadata": {"name": "istio", "namespace": "kubeflow"}, "spec": {"version": "1.9.6", "platform": platform},
            }))
            .unwrap();
            desired_objects::<IstioComponent>(&istio, &Inputs::default()).unwrap()
        };
        assert!(fixed_ids(&build("Kubernetes")) > 0, "the Kubernetes manifests pin ids");
        assert_eq!(fixed_ids(&build("OpenShift")), 0);
    }
}
