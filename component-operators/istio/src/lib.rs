//! Istio: the service mesh Kubeflow is reached through (KfDef applications `istio-crds`,
//! `istio-install`, `cluster-local-gateway`, `istio`).
//!
//! Releases:
//! - 1.3.1 (Kubeflow 1.2) and 1.9.6 (Kubeflow 1.3) share one template (`manifests/istio.yaml`).
//!   1.3.1 runs the split control plane (istio-pilot, istio-citadel, istio-galley,
//!   istio-sidecar-injector); 1.9.6 runs a single istiod, serves the networking v1beta1 API, adds
//!   PeerAuthentication and RequestAuthentication and runs its gateways unprivileged. The ingress
//!   gateway's selector gains `istio.io/rev` in 1.9.6, so an upgrade replaces that Deployment. Both
//!   gateway Services carry the TLS passthrough port 15443.
//! - 1.24.3 (Kubeflow 1.10.0, kubeflow/manifests `common/istio-1-24`), 1.26.1 (Kubeflow 1.10.2,
//!   `common/istio`; 1.24.3's template) and 1.28.0 (Kubeflow 1.11,
//!   `common/istio`) share a second template (`manifests/istio-1.24.yaml`, shaped like upstream's
//!   istioctl-generated packages with Kubeflow's oauth2-proxy overlay): fourteen CRDs (networking
//!   v1/v1beta1 served besides the stored v1alpha3, security v1 besides v1beta1, Telemetry,
//!   WasmPlugin, WorkloadEntry/WorkloadGroup, ProxyConfig), istiod under upstream's account name
//!   with native sidecars, a modern injection template, the mesh config's `oauth2-proxy`
//!   external authorizer (`envoyExtAuthzHttp`), the validation webhook `istio-validator-<ns>`,
//!   upstream's ingress gateway selector (`app`, `istio`) and no TLS passthrough port, a plain-HTTP
//!   cluster-local gateway, and Kubeflow's `kubeflow-istio-admin/edit/view` aggregated roles.
//!   Between the two, besides the images: the sidecar's requests (100m/128Mi, then Kubeflow's
//!   10m/40Mi) and RuntimeDefault seccomp profile (1.28), and istiod's cluster roles (1.28 reads
//!   Gateway API inference pools and experimental kinds, and its Gateway API deployment controller
//!   manages HorizontalPodAutoscalers and PodDisruptionBudgets). Upstream's 1.28 also installs the
//!   istio-cni DaemonSet in kube-system; here sidecars keep the istio-init container as in 1.24.
//!   Of upstream's custom resources they carry the Istio packages' own (kinds known through
//!   `Component::CUSTOM_KINDS`): the mesh root namespace's `global-deny-all` AuthorizationPolicy (empty
//!   spec: whatever no ALLOW policy matches is denied), the ALLOW-all policies of the ingress and
//!   (with it) cluster-local gateways, the ingress gateway's `istio-ingressgateway` Gateway and the
//!   oauth2-proxy overlay's EnvoyFilter that strips the `oauth2_proxy_kubeflow` cookie before
//!   routing. Their CRDs are in the same release and rank before them, and the framework waits for
//!   the CRDs to be Established before applying them. Not carried: the egress-pruning Sidecar, the
//!   Gateway API `kubeflow-gateway` in the kubeflow namespace, and the cluster-local gateway's
//!   RequestAuthentication (upstream's optional m2m-auth overlay, needing a cluster-jwks-proxy).
//!   1.24.3 is a fresh install: upstream supports no upgrade from Kubeflow 1.3 to 1.10. 1.28.0
//!   upgrades from 1.24.3 in place, as upstream's Kubeflow 1.11 does (the Deployments keep their
//!   selectors). Caveat: Istio itself supports in-place upgrades across one minor version at a
//!   time (1.24 → 1.25 → … → 1.28, or a canary revision); jumping four minors at once is what
//!   Kubeflow 1.11 does, not what Istio documents.

use component_framework::api::Istio;
use component_framework::api::component::GatewayServiceType;
use component_framework::component::release;
use component_framework::package::patch;
use component_framework::k8s_openapi::serde_json::{Value, json};
use component_framework::{Component, InvalidSpec, Inputs, Params, Release};

pub struct IstioComponent;

/// Template of the Kubeflow 1.2 and 1.3 releases.
const TEMPLATE: &str = include_str!("../manifests/istio.yaml");
/// Template of the releases from Kubeflow 1.10 on (kubeflow/manifests `common/istio-1-24`, `common/istio`).
const MODERN_TEMPLATE: &str = include_str!("../manifests/istio-1.24.yaml");

/// Release parameter with the ingress gateway Service's status port, read by [`IstioComponent::parameters`] too.
const STATUS_PORT_PARAM: &str = "gatewayStatusPort";
/// Release parameter with the ingress gateway Service's TLS passthrough port, for the releases whose Service has one.
const TLS_PORT_PARAM: &str = "gatewayTlsPort";

/// Release parameters of 1.24.3 and 1.26.1.
const ISTIO_1_24_PARAMS: &[(&str, &str)] = &[
    (STATUS_PORT_PARAM, "15021"),
    ("proxyCpuRequest", "100m"),
    ("proxyMemoryRequest", "128Mi"),
    ("proxySeccompProfile", ""),
    ("istiodRbac124", "true"),
    ("istiodRbac128", "false"),
];

static RELEASES: [Release; 5] = [
    Release {
        version: "1.3.1",
        manifest: TEMPLATE,
        params: &[
            ("legacyControlPlane", "true"),
            ("istiod", "false"),
            ("networkingV1beta1", "false"),
            ("injectorService", "istio-sidecar-injector"),
            (STATUS_PORT_PARAM, "15020"),
            (TLS_PORT_PARAM, "15443"),
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
            (STATUS_PORT_PARAM, "15021"),
            (TLS_PORT_PARAM, "15443"),
            ("gatewayHttpTargetPort", "8080"),
            ("gatewayHttpsTargetPort", "8443"),
        ],
        upgrades_from: &["1.3.1"],
        kubeflow: &["1.3"],
    },
    Release {
        version: "1.24.3",
        manifest: MODERN_TEMPLATE,
        params: ISTIO_1_24_PARAMS,
        // Kubeflow 1.3 → 1.10 is no upgrade upstream supports: a fresh install.
        upgrades_from: &[],
        kubeflow: &["1.10"],
    },
    // Kubeflow 1.10.2's (its archive runs 1.26.1, not 1.10.0's 1.24.3); 1.24.3's template.
    Release {
        version: "1.26.1",
        manifest: MODERN_TEMPLATE,
        params: ISTIO_1_24_PARAMS,
        upgrades_from: &["1.24.3"],
        kubeflow: &["1.10.2"],
    },
    Release {
        version: "1.28.0",
        manifest: MODERN_TEMPLATE,
        params: &[
            (STATUS_PORT_PARAM, "15021"),
            ("proxyCpuRequest", "10m"),
            ("proxyMemoryRequest", "40Mi"),
            ("proxySeccompProfile", "RuntimeDefault"),
            ("istiodRbac124", "false"),
            ("istiodRbac128", "true"),
        ],
        // In place, as Kubeflow 1.11 upgrades 1.10's Istio (Istio itself documents one minor at a time).
        upgrades_from: &["1.24.3", "1.26.1"],
        kubeflow: &["1.11"],
    },
];

/// The applications of Istio in kubeflow/manifests from Kubeflow 1.10 on (`common/istio`).
const MODERN_APPLICATIONS: &[(&str, &str)] = &[("istio-crds", "common/istio/istio-crds/base"), ("istio-install", "common/istio/istio-install/overlays/oauth2-proxy"), ("cluster-local-gateway", "common/istio/cluster-local-gateway/base")];

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

/// The ingress gateway's Service in upstream's package (`istio-install`) and the names of the
/// ports `spec.gateway` sets there.
const PACKAGE_GATEWAY: &str = "istio-ingressgateway";
const PACKAGE_PORTS: [(&str, &str); 2] = [("http2", "spec.gateway.httpPort"), ("https", "spec.gateway.httpsPort")];

/// `spec.gateway`, when set, on the package's ingress gateway Service: its type and its `http2`
/// and `https` ports (the ports the pods listen on stay the package's).
fn patch_package(resource: &Istio, objects: &mut [Value]) -> Result<(), InvalidSpec> {
    let gateway = &resource.spec.gateway;
    if *gateway == Default::default() {
        return Ok(());
    }
    let service = patch::object_mut(objects, "Service", PACKAGE_GATEWAY, "spec.gateway")?;
    service["spec"]["type"] = json!(service_type_name(gateway.service_type));
    let ports = service["spec"]["ports"].as_array().cloned().unwrap_or_default();
    let wanted = [gateway.http_port, gateway.https_port];
    if wanted[0] == wanted[1] {
        return Err(InvalidSpec::new("spec.gateway.httpsPort", format!("must differ from the HTTP port, both are {}", wanted[0])));
    }
    for ((name, field), port) in PACKAGE_PORTS.iter().zip(wanted) {
        if !ports.iter().any(|p| p["name"] == *name) {
            return Err(InvalidSpec::new(*field, format!("the package's Service {PACKAGE_GATEWAY} has no port named {name}, where this setting goes; set it in the package instead")));
        }
        if let Some(other) = ports.iter().find(|p| p["name"] != *name && !PACKAGE_PORTS.iter().any(|(n, _)| p["name"] == *n) && p["port"] == port) {
            return Err(InvalidSpec::new(*field, format!("port {port} is the ingress gateway's {} port in the package; allowed: 1 to 65535 except its other ports", other["name"])));
        }
    }
    let ports = ports
        .into_iter()
        .map(|mut p| {
            if let Some(i) = PACKAGE_PORTS.iter().position(|(name, _)| p["name"] == *name) {
                p["port"] = json!(wanted[i]);
            }
            p
        })
        .collect();
    service["spec"]["ports"] = Value::Array(ports);
    Ok(())
}

impl Component for IstioComponent {
    type Resource = Istio;
    const DEFAULT_NAMESPACE: &'static str = "istio-system";
    /// The mesh's own policies, Gateway and EnvoyFilter of the 1.24.3 and 1.28.0 template.
    const CUSTOM_KINDS: &'static [component_framework::component::CustomKind] = &[
        ("security.istio.io", "v1", "AuthorizationPolicy", "authorizationpolicies", false),
        ("security.istio.io", "v1", "RequestAuthentication", "requestauthentications", false),
        ("networking.istio.io", "v1", "Gateway", "gateways", false),
        ("networking.istio.io", "v1alpha3", "EnvoyFilter", "envoyfilters", false),
    ];
    const DISPLAY_NAME: &'static str = "Istio for Kubeflow";
    const INSTALLS: &'static str = "the Istio control plane and ingress gateways Kubeflow routes through";
    /// A resource made from a KfDef renders the KfDef's packages, upstream's objects.
    const RENDERS_PACKAGES: bool = true;
    /// The kinds upstream's packages of these releases install.
    const INSTALLED_KINDS: &'static [&'static str] = &["ClusterRole", "ClusterRoleBinding", "ConfigMap", "CustomResourceDefinition", "DaemonSet", "Deployment", "HorizontalPodAutoscaler", "Job", "MutatingWebhookConfiguration", "Namespace", "PodDisruptionBudget", "Role", "RoleBinding", "Service", "ServiceAccount", "ValidatingWebhookConfiguration"];
    /// The releases' packages in Kubeflow's archives (paths as kfctl's v1.2.0 `kfctl_istio_dex`
    /// KfDef, v1.3.1's and later releases' `example/kustomization.yaml` list them).
    const UPSTREAM_RELEASES: &'static [component_framework::UpstreamRelease] = &[
        component_framework::UpstreamRelease {
            version: "1.3.1",
            kubeflow: "v1.2.0",
            applications: &[("istio-stack", "stacks/kubernetes/application/istio-1-3-1-stack"), ("cluster-local-gateway", "stacks/kubernetes/application/cluster-local-gateway-1-3-1"), ("istio", "istio/istio/base")],
        },
        component_framework::UpstreamRelease {
            version: "1.9.6",
            kubeflow: "v1.3.1",
            applications: &[("istio-crds", "common/istio-1-9/istio-crds/base"), ("istio-install", "common/istio-1-9/istio-install/base"), ("cluster-local-gateway", "common/istio-1-9/cluster-local-gateway/base")],
        },
        component_framework::UpstreamRelease { version: "1.24.3", kubeflow: "v1.10.0", applications: MODERN_APPLICATIONS },
        component_framework::UpstreamRelease { version: "1.26.1", kubeflow: "v1.10.2", applications: MODERN_APPLICATIONS },
        component_framework::UpstreamRelease { version: "1.28.0", kubeflow: "v1.11.0", applications: MODERN_APPLICATIONS },
    ];
    /// istiod's image, on Docker Hub or Istio's own registry (upstream's packages since 1.10).
    const VERSION_IMAGES: &'static [&'static str] = &["istio/pilot", "istio-release/pilot"];
    const PACKAGE_FIELDS: &'static [&'static str] = &["gateway"];

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
        // The gateway Service also carries the release's status port and, up to 1.9.6, the TLS
        // passthrough port.
        let release = release::<Self>(version)?;
        let release_port = |name: &str| release.params.iter().find(|(k, _)| *k == name).and_then(|(_, v)| v.parse::<u16>().ok());
        let status_port = release_port(STATUS_PORT_PARAM).unwrap_or(15021);
        let tls_port = release_port(TLS_PORT_PARAM);
        let reserved = match tls_port {
            Some(tls) => format!("{status_port} and {tls}"),
            None => status_port.to_string(),
        };
        let port = |s: &Setting| -> Result<u16, InvalidSpec> {
            let port = s.value.parse::<u16>().ok().filter(|p| *p > 0).ok_or_else(|| s.invalid(format!("{:?} is not a port; allowed: an integer from 1 to 65535", s.value)))?;
            if port == status_port || Some(port) == tls_port {
                return Err(s.invalid(format!(
                    "port {port} is the ingress gateway's own {} port in Istio {version}; allowed: 1 to 65535 except {reserved}",
                    if port == status_port { "status" } else { "TLS passthrough" }
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
    fn customize(resource: &Istio, inputs: &Inputs, objects: &mut Vec<Value>) -> Result<(), InvalidSpec> {
        if inputs.from_packages() {
            return patch_package(resource, objects);
        }
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

    /// The Kubeflow 1.10 and 1.11 releases (`manifests/istio-1.24.yaml`).
    const MODERN: [&str; 3] = ["1.24.3", "1.26.1", "1.28.0"];

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

    /// On upstream's package, `spec.gateway` goes to its ingress gateway Service; a port another of
    /// that Service's ports uses, or a package without the Service, is refused naming the field.
    #[test]
    fn the_gateway_on_a_package_sets_its_service_or_is_refused_naming_the_field() {
        let source = json!([{"application": "istio-install", "repoUri": "https://example.com/manifests.tar.gz", "path": "common/istio/istio-install/base"}]);
        let service = || {
            vec![json!({"kind": "Service", "metadata": {"name": "istio-ingressgateway", "namespace": "istio-system"}, "spec": {"type": "LoadBalancer", "ports": [
                {"name": "status-port", "port": 15021, "targetPort": 15021}, {"name": "http2", "port": 80, "targetPort": 8080}, {"name": "https", "port": 443, "targetPort": 8443},
            ]}})]
        };
        // Built from the package: the objects are rendered ones.
        let packages = Inputs { rendered: Some(Default::default()), ..Default::default() };
        let mut objects = service();
        IstioComponent::customize(&istio(json!({"version": "1.24.3", "sources": source})), &packages, &mut objects).unwrap();
        assert_eq!(objects, service(), "the default gateway leaves the package's Service as it is");
        IstioComponent::customize(&istio(json!({"version": "1.24.3", "sources": source, "gateway": {"serviceType": "NodePort", "httpPort": 8081}})), &packages, &mut objects).unwrap();
        assert_eq!(objects[0]["spec"]["type"], "NodePort");
        assert_eq!(objects[0]["spec"]["ports"][1], json!({"name": "http2", "port": 8081, "targetPort": 8080}));
        assert_eq!(objects[0]["spec"]["ports"][2]["port"], 443);

        let refused = IstioComponent::customize(&istio(json!({"version": "1.24.3", "sources": source, "gateway": {"httpsPort": 15021}})), &packages, &mut service()).unwrap_err();
        assert_eq!(refused.field, "spec.gateway.httpsPort");
        assert!(refused.message.contains("status-port"), "{}", refused.message);
        let refused = IstioComponent::customize(&istio(json!({"version": "1.24.3", "sources": source, "gateway": {"serviceType": "NodePort"}})), &packages, &mut Vec::new()).unwrap_err();
        assert_eq!(refused.field, "spec.gateway");
        assert!(refused.message.contains("no Service istio-ingressgateway"), "{}", refused.message);
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
                    "1.3.1" => (&["istio-pilot", "istio-citadel", "istio-galley", "istio-sidecar-injector", "istio-ingressgateway", "cluster-local-gateway"], 11),
                    "1.9.6" => (&["istiod", "istio-ingressgateway", "cluster-local-gateway"], 9),
                    _ => (&["istiod", "istio-ingressgateway", "cluster-local-gateway"], 14),
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
                // kfctl-era applications grant access with rbac.istio.io's kinds, which 1.3.1 serves.
                let rbac: Vec<String> = names(&objects, "CustomResourceDefinition").into_iter().filter(|n| n.ends_with(".rbac.istio.io")).collect();
                let expected: &[&str] = if v == "1.3.1" { &["clusterrbacconfigs.rbac.istio.io", "rbacconfigs.rbac.istio.io", "serviceroles.rbac.istio.io", "servicerolebindings.rbac.istio.io"] } else { &[] };
                assert_eq!(rbac, expected, "{v}");

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
                // From 1.24.3 on the gateway also has its own SDS Role and RoleBinding, and its
                // ALLOW AuthorizationPolicy.
                let gone = if MODERN.contains(&v) { 6 } else { 3 };
                assert_eq!(objects.len(), full.len() - gone, "{v}: the ServiceAccount, (Role, RoleBinding,) Service, Deployment (and AuthorizationPolicy) go");
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

    // Kubeflow 1.10 and 1.11: Istio 1.24.3 and 1.28.0.

    /// A YAML text (a ConfigMap value) as JSON, through the framework's template parser.
    fn yaml_value(text: &str) -> Value {
        let indented: String = text.lines().map(|l| format!("  {l}\n")).collect();
        let doc = format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: parsed}}\ndata:\n{indented}");
        component_framework::manifest::render(&doc, &Default::default()).unwrap().remove(0)["data"].take()
    }

    fn build_as(namespace: &str, spec: Value) -> Vec<Value> {
        let mut resource = istio(spec);
        resource.metadata.namespace = Some(namespace.into());
        desired_objects::<IstioComponent>(&resource, &Inputs::default()).unwrap()
    }

    fn container<'a>(objects: &'a [Value], deployment: &str) -> &'a Value {
        &find(objects, "Deployment", deployment)["spec"]["template"]["spec"]["containers"][0]
    }

    fn env<'a>(container: &'a Value, name: &str) -> &'a Value {
        container["env"].as_array().unwrap().iter().find(|e| e["name"] == name).unwrap_or_else(|| panic!("no env {name}"))
    }

    #[test]
    fn kubeflow_1_10_and_1_11_releases_and_their_edges() {
        let table: Vec<_> = IstioComponent::releases().iter().map(|r| (r.version, r.upgrades_from, r.kubeflow)).collect();
        assert_eq!(
            table,
            [
                ("1.3.1", &[][..], &["1.2"][..]),
                ("1.9.6", &["1.3.1"][..], &["1.3"][..]),
                ("1.24.3", &[][..], &["1.10"][..]),
                ("1.26.1", &["1.24.3"][..], &["1.10.2"][..]),
                ("1.28.0", &["1.24.3", "1.26.1"][..], &["1.11"][..]),
            ]
        );
        for (version, pilot, proxy) in [
            ("1.24.3", "docker.io/istio/pilot:1.24.3", "docker.io/istio/proxyv2:1.24.3"),
            ("1.26.1", "docker.io/istio/pilot:1.26.1", "docker.io/istio/proxyv2:1.26.1"),
            ("1.28.0", "docker.io/istio/pilot:1.28.0", "docker.io/istio/proxyv2:1.28.0"),
        ] {
            let objects = build(json!({"version": version}));
            assert_eq!(container(&objects, "istiod")["image"], pilot);
            assert_eq!(container(&objects, "istiod")["name"], "discovery");
            assert_eq!(container(&objects, "istio-ingressgateway")["image"], proxy);
            assert_eq!(container(&objects, "cluster-local-gateway")["image"], proxy);
            // Sidecars are injected from the same hub and tag.
            let values: Value = serde_json::from_str(find(&objects, "ConfigMap", "istio-sidecar-injector")["data"]["values"].as_str().unwrap()).unwrap();
            assert_eq!((&values["global"]["hub"], &values["global"]["tag"], &values["global"]["proxy"]["image"]), (&json!("docker.io/istio"), &json!(version), &json!("proxyv2")));
            for name in ["istiod", "istio-ingressgateway", "cluster-local-gateway"] {
                assert_eq!(find(&objects, "Deployment", name)["metadata"]["labels"]["components.kubeflow.org/version"], version);
            }
            // Upstream's names and selectors, the ingress gateway's without istio.io/rev.
            let selector = |name: &str| find(&objects, "Deployment", name)["spec"]["selector"].clone();
            assert_eq!(selector("istiod"), json!({"matchLabels": {"istio": "pilot"}}));
            assert_eq!(selector("istio-ingressgateway"), json!({"matchLabels": {"app": "istio-ingressgateway", "istio": "ingressgateway"}}));
            assert_eq!(selector("cluster-local-gateway"), json!({"matchLabels": {"app": "cluster-local-gateway", "istio": "cluster-local-gateway"}}));
            assert_eq!(find(&objects, "Deployment", "istiod")["spec"]["template"]["spec"]["serviceAccountName"], "istiod");
            assert_eq!(env(container(&objects, "istiod"), "ENABLE_NATIVE_SIDECARS")["value"], "true");
            assert_eq!(env(container(&objects, "istiod"), "PILOT_JWT_PUB_KEY_REFRESH_INTERVAL")["value"], "1m");
            assert_eq!(find(&objects, "Service", "istiod")["spec"]["ports"][2], json!({"name": "https-webhook", "port": 443, "targetPort": 15017, "protocol": "TCP"}));
            // Nothing of the 1.9.6 control plane's names, nothing outside the target namespace.
            assert!(names(&objects, "ServiceAccount").iter().all(|n| n != "istiod-service-account"));
            assert!(objects.iter().all(|o| o["metadata"]["namespace"].is_null() || o["metadata"]["namespace"] == "istio-system"));
            // Kubeflow's aggregated roles of kubeflow-istio-resources.
            let admin = find(&objects, "ClusterRole", "kubeflow-istio-admin-istio-system");
            assert_eq!(admin["aggregationRule"], json!({"clusterRoleSelectors": [{"matchLabels": {"rbac.authorization.kubeflow.org/aggregate-to-kubeflow-istio-admin": "true"}}]}));
            assert!(admin.get("rules").is_none(), "filled in by the aggregation controller");
            assert_eq!(
                find(&objects, "ClusterRole", "kubeflow-istio-view-istio-system")["rules"],
                json!([{"apiGroups": ["istio.io", "networking.istio.io"], "resources": ["*"], "verbs": ["get", "list", "watch"]},
                       {"apiGroups": ["security.istio.io"], "resources": ["authorizationpolicies"], "verbs": ["get", "list", "watch"]}])
            );
        }
        // 1.24.3 → 1.28.0 is in place: the Deployments keep their selectors, and differ in their image alone.
        let comparable = |version: &str, name: &str| {
            let mut deployment = find(&build(json!({"version": version})), "Deployment", name).clone();
            deployment["spec"]["template"]["spec"]["containers"][0]["image"] = json!("");
            deployment["metadata"]["labels"]["components.kubeflow.org/version"] = json!("");
            deployment["metadata"]["annotations"]["components.kubeflow.org/applied-hash"] = json!("");
            deployment
        };
        for name in ["istiod", "istio-ingressgateway", "cluster-local-gateway"] {
            assert_eq!(comparable("1.24.3", name), comparable("1.28.0", name), "{name}");
        }
    }

    #[test]
    fn modern_releases_ship_upstreams_crds_shared_by_installs() {
        // (name, served versions in order, the stored one), as upstream's istio-crds.
        let three = ["v1", "v1alpha3", "v1beta1"];
        let expected: [(&str, &[&str], &str); 14] = [
            ("authorizationpolicies.security.istio.io", &["v1", "v1beta1"], "v1beta1"),
            ("destinationrules.networking.istio.io", &three, "v1alpha3"),
            ("envoyfilters.networking.istio.io", &["v1alpha3"], "v1alpha3"),
            ("gateways.networking.istio.io", &three, "v1alpha3"),
            ("peerauthentications.security.istio.io", &["v1", "v1beta1"], "v1beta1"),
            ("proxyconfigs.networking.istio.io", &["v1beta1"], "v1beta1"),
            ("requestauthentications.security.istio.io", &["v1", "v1beta1"], "v1beta1"),
            ("serviceentries.networking.istio.io", &three, "v1alpha3"),
            ("sidecars.networking.istio.io", &three, "v1alpha3"),
            ("telemetries.telemetry.istio.io", &["v1", "v1alpha1"], "v1alpha1"),
            ("virtualservices.networking.istio.io", &three, "v1alpha3"),
            ("wasmplugins.extensions.istio.io", &["v1alpha1"], "v1alpha1"),
            ("workloadentries.networking.istio.io", &three, "v1alpha3"),
            ("workloadgroups.networking.istio.io", &three, "v1alpha3"),
        ];
        let crds = |objects: &[Value]| -> Vec<Value> {
            let mut crds: Vec<Value> = objects.iter().filter(|o| o["kind"] == "CustomResourceDefinition").cloned().collect();
            crds.sort_by_key(|c| c["metadata"]["name"].as_str().unwrap().to_string());
            crds
        };
        // Without the labels and hash that name the release.
        let unversioned = |mut crds: Vec<Value>| {
            for crd in &mut crds {
                crd["metadata"]["labels"].as_object_mut().unwrap().remove("components.kubeflow.org/version");
                crd["metadata"]["annotations"].as_object_mut().unwrap().remove("components.kubeflow.org/applied-hash");
            }
            crds
        };
        for version in MODERN {
            let here = crds(&build(json!({"version": version})));
            let table: Vec<(String, Vec<String>, String)> = here
                .iter()
                .map(|crd| {
                    let versions = crd["spec"]["versions"].as_array().unwrap();
                    assert!(versions.iter().all(|v| v["served"] == true), "{}", crd["metadata"]["name"]);
                    let stored: Vec<&Value> = versions.iter().filter(|v| v["storage"] == true).collect();
                    assert_eq!(stored.len(), 1, "{}", crd["metadata"]["name"]);
                    for v in versions {
                        assert_eq!(v["schema"], json!({"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}));
                        assert_eq!(v["subresources"], json!({"status": {}}));
                    }
                    (
                        crd["metadata"]["name"].as_str().unwrap().to_string(),
                        versions.iter().map(|v| v["name"].as_str().unwrap().to_string()).collect(),
                        stored[0]["name"].as_str().unwrap().to_string(),
                    )
                })
                .collect();
            let want: Vec<(String, Vec<String>, String)> =
                expected.iter().map(|(n, vs, s)| (n.to_string(), vs.iter().map(|v| v.to_string()).collect(), s.to_string())).collect();
            assert_eq!(table, want, "{version}");
            for crd in &here {
                assert_eq!(crd["metadata"]["labels"]["components.kubeflow.org/part-of"], "istio");
                assert_eq!(crd["metadata"]["labels"]["components.kubeflow.org/version"], version);
                assert!(crd["metadata"]["annotations"].get("components.kubeflow.org/owner").is_none(), "CRDs name no owner");
                assert_eq!(crd["spec"]["scope"], "Namespaced");
            }
            // A second install, of another resource into another namespace, renders them byte for byte.
            let elsewhere = crds(&build_as("other-team", json!({"version": version, "targetNamespace": "mesh", "gateway": {"serviceType": "LoadBalancer"}, "clusterLocalGateway": false})));
            assert_eq!(here, elsewhere, "{version}");
        }
        // Both releases define them alike: an upgrade only moves their version label.
        assert_eq!(unversioned(crds(&build(json!({"version": "1.24.3"})))), unversioned(crds(&build(json!({"version": "1.28.0"})))));
        // Every CRD 1.9.6 defines is among them, storing the same version.
        for old in crds(&build(json!({"version": "1.9.6"}))) {
            let name = old["metadata"]["name"].as_str().unwrap();
            let stored = |crd: &Value| crd["spec"]["versions"].as_array().unwrap().iter().find(|v| v["storage"] == true).unwrap()["name"].clone();
            let new = expected.iter().find(|(n, _, _)| *n == name).unwrap_or_else(|| panic!("{name} is not in 1.24.3"));
            assert_eq!(stored(&old), new.2, "{name}");
        }
    }

    #[test]
    fn modern_gateway_service_follows_the_spec() {
        for version in MODERN {
            let objects = build(json!({"version": version, "gateway": {"serviceType": "LoadBalancer", "httpPort": 8080, "httpsPort": 8443}}));
            let service = find(&objects, "Service", "istio-ingressgateway");
            assert_eq!(service["spec"]["type"], "LoadBalancer");
            assert_eq!(service["spec"]["selector"], json!({"app": "istio-ingressgateway", "istio": "ingressgateway"}));
            assert_eq!(
                service["spec"]["ports"],
                json!([
                    {"name": "status-port", "port": 15021, "targetPort": 15021, "protocol": "TCP"},
                    {"name": "http2", "port": 8080, "targetPort": 8080, "protocol": "TCP"},
                    {"name": "https", "port": 8443, "targetPort": 8443, "protocol": "TCP"},
                ])
            );
            let defaults = build(json!({"version": version}));
            let service = find(&defaults, "Service", "istio-ingressgateway");
            assert_eq!(service["spec"]["type"], "ClusterIP");
            assert_eq!((&service["spec"]["ports"][1]["port"], &service["spec"]["ports"][2]["port"]), (&json!(80), &json!(443)));
            // The test spec (NodePort) and a kfctl application parameter reach it too.
            assert_eq!(find(&build(json!({"version": version, "gateway": {"serviceType": "NodePort"}})), "Service", "istio-ingressgateway")["spec"]["type"], "NodePort");
            let spec = json!({"version": version, "sources": [{"application": "istio-install", "parameters": [{"name": "gatewayServiceType", "value": "NodePort"}, {"name": "clusterRbacConfig", "value": "ON"}]}]});
            assert_eq!(find(&build(spec), "Service", "istio-ingressgateway")["spec"]["type"], "NodePort");
            // The cluster-local gateway stays in-cluster, plain HTTP.
            let local = find(&defaults, "Service", "cluster-local-gateway");
            assert_eq!(local["spec"]["type"], "ClusterIP");
            assert_eq!(
                local["spec"]["ports"],
                json!([{"name": "status-port", "port": 15020, "targetPort": 15020, "protocol": "TCP"}, {"name": "http2", "port": 80, "targetPort": 8080, "protocol": "TCP"}])
            );
            // The gateway pods listen where the Service sends traffic.
            let ports: Vec<&Value> = container(&defaults, "istio-ingressgateway")["ports"].as_array().unwrap().iter().map(|p| &p["containerPort"]).collect();
            assert_eq!(ports, [&json!(15021), &json!(8080), &json!(8443), &json!(15090)]);
            // No TLS passthrough port any more: 15443 is free, the status port is not.
            let tls = build(json!({"version": version, "gateway": {"httpsPort": 15443}}));
            assert_eq!(find(&tls, "Service", "istio-ingressgateway")["spec"]["ports"][2]["port"], 15443);
            let err = desired_objects::<IstioComponent>(&istio(json!({"version": version, "gateway": {"httpPort": 15021}})), &Inputs::default()).unwrap_err();
            assert_eq!(err.field, "spec.gateway.httpPort");
            assert!(err.message.ends_with("allowed: 1 to 65535 except 15021"), "{err}");
            let err = desired_objects::<IstioComponent>(&istio(json!({"version": version, "gateway": {"httpPort": 443}})), &Inputs::default()).unwrap_err();
            assert_eq!(err.field, "spec.gateway.httpsPort");
        }
        // 1.9.6 keeps refusing its TLS passthrough port.
        let err = desired_objects::<IstioComponent>(&istio(json!({"version": "1.9.6", "gateway": {"httpsPort": 15443}})), &Inputs::default()).unwrap_err();
        assert!(err.message.contains("TLS passthrough port in Istio 1.9.6"), "{err}");
    }

    #[test]
    fn modern_webhooks_are_named_after_the_namespace_and_patched_by_istiod() {
        for version in MODERN {
            let objects = build(json!({"version": version, "targetNamespace": "mesh"}));
            let injector = find(&objects, "MutatingWebhookConfiguration", "istio-sidecar-injector-mesh");
            // istiod patches the caBundle of configurations labelled with its revision.
            assert_eq!(injector["metadata"]["labels"]["istio.io/rev"], "default");
            assert_eq!(
                injector["webhooks"],
                json!([{
                    "name": "namespace.sidecar-injector.istio.io",
                    "admissionReviewVersions": ["v1"],
                    "sideEffects": "None",
                    "failurePolicy": "Ignore",
                    "reinvocationPolicy": "Never",
                    "clientConfig": {"service": {"name": "istiod", "namespace": "mesh", "path": "/inject", "port": 443}},
                    "namespaceSelector": {"matchLabels": {"istio-injection": "enabled"}},
                    "objectSelector": {"matchExpressions": [{"key": "sidecar.istio.io/inject", "operator": "NotIn", "values": ["false"]}]},
                    "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}],
                }])
            );
            let validator = find(&objects, "ValidatingWebhookConfiguration", "istio-validator-mesh");
            assert_eq!(validator["metadata"]["labels"]["istio.io/rev"], "default");
            assert_eq!(
                validator["webhooks"],
                json!([{
                    "name": "rev.validation.istio.io",
                    "admissionReviewVersions": ["v1"],
                    "sideEffects": "None",
                    "failurePolicy": "Ignore",
                    "clientConfig": {"service": {"name": "istiod", "namespace": "mesh", "path": "/validate", "port": 443}},
                    "namespaceSelector": {"matchLabels": {"istio.io/validation": "enabled"}},
                    "rules": [{"apiGroups": ["security.istio.io", "networking.istio.io", "telemetry.istio.io", "extensions.istio.io"], "apiVersions": ["*"], "operations": ["CREATE", "UPDATE"], "resources": ["*"]}],
                }])
            );
            assert_eq!(names(&objects, "MutatingWebhookConfiguration").len() + names(&objects, "ValidatingWebhookConfiguration").len(), 2);
            // istiod is told their names, and may patch them.
            let istiod = container(&objects, "istiod");
            assert_eq!(env(istiod, "INJECTION_WEBHOOK_CONFIG_NAME")["value"], "istio-sidecar-injector-mesh");
            assert_eq!(env(istiod, "VALIDATION_WEBHOOK_CONFIG_NAME")["value"], "istio-validator-mesh");
            assert_eq!(env(istiod, "REVISION")["value"], "default");
            let role = find(&objects, "ClusterRole", "istiod-clusterrole-mesh");
            assert_eq!(role["rules"][0], json!({"apiGroups": ["admissionregistration.k8s.io"], "resources": ["mutatingwebhookconfigurations"], "verbs": ["get", "list", "watch", "update", "patch"]}));
            assert_eq!(role["rules"][1], json!({"apiGroups": ["admissionregistration.k8s.io"], "resources": ["validatingwebhookconfigurations"], "verbs": ["get", "list", "watch", "update"]}));
            assert_eq!(find(&objects, "ClusterRoleBinding", "istiod-clusterrole-mesh")["subjects"], json!([{"kind": "ServiceAccount", "name": "istiod", "namespace": "mesh"}]));
        }
    }

    #[test]
    fn modern_rbac_differs_where_upstreams_does() {
        let rules = |version: &str, role: &str| find(&build(json!({"version": version})), "ClusterRole", role)["rules"].as_array().unwrap().clone();
        let groups = |rules: &[Value]| -> BTreeSet<String> { rules.iter().flat_map(|r| r["apiGroups"].as_array().unwrap().iter().map(|g| g.as_str().unwrap().to_string())).collect() };
        let (old, new) = (rules("1.24.3", "istiod-clusterrole-istio-system"), rules("1.28.0", "istiod-clusterrole-istio-system"));
        assert_eq!(old.len(), 21);
        assert_eq!(new.len(), 24);
        assert!(!groups(&old).contains("inference.networking.k8s.io") && !groups(&old).contains("gateway.networking.x-k8s.io"));
        assert!(new.contains(&json!({"apiGroups": ["inference.networking.k8s.io"], "resources": ["inferencepools"], "verbs": ["get", "watch", "list"]})));
        // Otherwise the same rules: 1.28's without the inference pools and experimental status, and
        // reading the Gateway API's stable group only, are 1.24's.
        let narrowed: Vec<Value> = new
            .iter()
            .filter(|r| r["apiGroups"] != json!(["inference.networking.k8s.io"]) && r["apiGroups"] != json!(["gateway.networking.x-k8s.io"]))
            .map(|r| {
                let mut r = r.clone();
                if r["apiGroups"] == json!(["gateway.networking.k8s.io", "gateway.networking.x-k8s.io"]) {
                    r["apiGroups"] = json!(["gateway.networking.k8s.io"]);
                }
                r
            })
            .collect();
        assert_eq!(narrowed, old);
        assert_eq!(groups(&rules("1.24.3", "istiod-gateway-controller-istio-system")), BTreeSet::from(["apps".to_string(), String::new()]));
        assert_eq!(groups(&rules("1.28.0", "istiod-gateway-controller-istio-system")), BTreeSet::from(["apps".to_string(), String::new(), "autoscaling".into(), "policy".into()]));
        // One role of each name per release.
        for version in MODERN {
            let objects = build(json!({"version": version}));
            for role in ["istiod-clusterrole-istio-system", "istiod-gateway-controller-istio-system"] {
                assert_eq!(objects.iter().filter(|o| o["kind"] == "ClusterRole" && o["metadata"]["name"] == role).count(), 1, "{version} {role}");
            }
        }
    }

    #[test]
    fn mesh_config_names_oauth2_proxy_as_external_authorizer() {
        for version in MODERN {
            for (namespace, spec) in [("istio-system", json!({"version": version})), ("mesh", json!({"version": version, "targetNamespace": "mesh"}))] {
                let objects = build(spec);
                let configmap = find(&objects, "ConfigMap", "istio");
                let mesh = yaml_value(configmap["data"]["mesh"].as_str().unwrap());
                assert_eq!(
                    mesh["extensionProviders"],
                    json!([{
                        "name": "oauth2-proxy",
                        "envoyExtAuthzHttp": {
                            "service": "oauth2-proxy.oauth2-proxy.svc.cluster.local",
                            "port": 80,
                            "includeRequestHeadersInCheck": ["authorization", "cookie"],
                            "headersToUpstreamOnAllow": ["authorization", "path", "x-auth-request-email", "x-auth-request-groups", "x-auth-request-user"],
                            "headersToDownstreamOnDeny": ["content-type", "set-cookie"],
                        },
                    }])
                );
                assert_eq!(mesh["defaultConfig"], json!({"discoveryAddress": format!("istiod.{namespace}.svc:15012"), "proxyMetadata": {}, "tracing": {}}));
                assert_eq!(mesh["rootNamespace"], namespace);
                assert_eq!(mesh["tcpKeepalive"], json!({"interval": "5s", "probes": 3, "time": "10s"}));
                assert_eq!((&mesh["trustDomain"], &mesh["accessLogFile"]), (&json!("cluster.local"), &json!("/dev/stdout")));
                assert_eq!(configmap["data"]["meshNetworks"], "networks: {}");
            }
        }
    }

    #[test]
    fn modern_sidecar_injection_config_per_release() {
        for (version, requests, seccomp) in [("1.24.3", json!({"cpu": "100m", "memory": "128Mi"}), false), ("1.28.0", json!({"cpu": "10m", "memory": "40Mi"}), true)] {
            let objects = build(json!({"version": version, "targetNamespace": "mesh"}));
            let configmap = find(&objects, "ConfigMap", "istio-sidecar-injector");
            let values: Value = serde_json::from_str(configmap["data"]["values"].as_str().unwrap()).unwrap();
            assert_eq!(values["global"]["istioNamespace"], "mesh");
            assert_eq!(values["global"]["proxy"]["resources"], json!({"requests": requests, "limits": {"cpu": "2000m", "memory": "1024Mi"}}));
            assert_eq!(values["pilot"]["cni"]["enabled"], false, "no istio-cni: sidecars get istio-init");
            let config = yaml_value(configmap["data"]["config"].as_str().unwrap());
            assert_eq!((&config["defaultTemplates"], &config["policy"]), (&json!(["sidecar"]), &json!("enabled")));
            let template = config["templates"]["sidecar"].as_str().unwrap();
            assert!(template.contains("- name: istio-init") && template.contains("- name: istio-proxy"));
            assert!(template.contains("restartPolicy: Always"), "native sidecars");
            assert!(template.contains(&format!("`sidecar.istio.io/proxyCPU` `{}`", requests["cpu"].as_str().unwrap())));
            assert_eq!(template.contains("type: \"RuntimeDefault\""), seccomp, "{version}");
            assert!(!template.contains("${"), "{version}: every release parameter is substituted");
        }
    }

    /// The template's custom resources: (kind, name).
    fn custom_resources(objects: &[Value]) -> Vec<(String, String)> {
        objects
            .iter()
            .filter(|o| o["apiVersion"].as_str().unwrap().contains(".istio.io/"))
            .map(|o| (o["kind"].as_str().unwrap().to_string(), o["metadata"]["name"].as_str().unwrap().to_string()))
            .collect()
    }

    #[test]
    fn modern_mesh_denies_what_no_policy_allows() {
        for version in MODERN {
            for (namespace, spec) in [("istio-system", json!({"version": version})), ("mesh", json!({"version": version, "targetNamespace": "mesh"}))] {
                let objects = build(spec);
                // The mesh root namespace (the install's, as in the mesh config) holds the deny-all.
                let deny = find(&objects, "AuthorizationPolicy", "global-deny-all");
                assert_eq!(deny["apiVersion"], "security.istio.io/v1", "{version}");
                assert_eq!(deny["metadata"]["namespace"], namespace, "{version}");
                assert_eq!(deny["spec"], json!({}), "{version}: an empty spec denies everything");
                assert_eq!(yaml_value(find(&objects, "ConfigMap", "istio")["data"]["mesh"].as_str().unwrap())["rootNamespace"], namespace);
                // The gateways let everything in.
                for (name, selector) in [
                    ("istio-ingressgateway", json!({"app": "istio-ingressgateway", "istio": "ingressgateway"})),
                    ("cluster-local-gateway", json!({"app": "cluster-local-gateway", "istio": "cluster-local-gateway"})),
                ] {
                    let allow = find(&objects, "AuthorizationPolicy", name);
                    assert_eq!(allow["apiVersion"], "security.istio.io/v1");
                    assert_eq!(allow["metadata"]["namespace"], namespace);
                    assert_eq!(allow["spec"], json!({"action": "ALLOW", "selector": {"matchLabels": selector}, "rules": [{}]}), "{version} {name}");
                    // Each selects the pods of its gateway's Deployment.
                    assert_eq!(find(&objects, "Deployment", name)["spec"]["selector"]["matchLabels"], selector);
                }
                assert_eq!(names(&objects, "AuthorizationPolicy"), ["global-deny-all", "istio-ingressgateway", "cluster-local-gateway"]);
                assert_eq!(
                    custom_resources(&objects),
                    [
                        ("AuthorizationPolicy".to_string(), "global-deny-all".to_string()),
                        ("AuthorizationPolicy".into(), "istio-ingressgateway".into()),
                        ("AuthorizationPolicy".into(), "cluster-local-gateway".into()),
                        ("Gateway".into(), "istio-ingressgateway".into()),
                        ("EnvoyFilter".into(), "gateway-remove-kubeflow-cookie".into()),
                    ],
                    "{version}"
                );
                for (kind, name) in custom_resources(&objects) {
                    let o = find(&objects, &kind, &name);
                    assert_eq!(o["metadata"]["namespace"], namespace, "{kind} {name}");
                    assert_eq!(o["metadata"]["annotations"]["components.kubeflow.org/owner"], "team/istio", "{kind} {name}");
                    assert_eq!(o["metadata"]["labels"]["components.kubeflow.org/version"], version, "{kind} {name}");
                }
            }
            // Without the cluster-local gateway, its policy goes; the deny-all and the ingress
            // gateway's stay.
            for spec in [
                json!({"version": version, "clusterLocalGateway": false}),
                json!({"version": version, "overrides": {"parameters": [{"name": "clusterLocalGateway", "value": "false"}]}}),
            ] {
                let objects = build(spec);
                assert_eq!(names(&objects, "AuthorizationPolicy"), ["global-deny-all", "istio-ingressgateway"], "{version}");
                assert_eq!(find(&objects, "AuthorizationPolicy", "global-deny-all")["spec"], json!({}));
            }
        }
        // The Kubeflow 1.2 and 1.3 releases keep their object sets: no custom resources.
        for version in ["1.3.1", "1.9.6"] {
            assert!(custom_resources(&build(json!({"version": version}))).is_empty(), "{version}");
        }
    }

    #[test]
    fn modern_ingress_gateway_routes_plain_http_and_drops_the_session_cookie() {
        for version in MODERN {
            let objects = build(json!({"version": version}));
            let gateway = find(&objects, "Gateway", "istio-ingressgateway");
            assert_eq!(gateway["apiVersion"], "networking.istio.io/v1");
            assert_eq!(gateway["metadata"]["namespace"], "istio-system");
            assert_eq!(gateway["metadata"]["labels"]["release"], "istio");
            assert_eq!(
                gateway["spec"],
                json!({"selector": {"app": "istio-ingressgateway", "istio": "ingressgateway"}, "servers": [{"port": {"number": 80, "name": "http", "protocol": "HTTP"}, "hosts": ["*"]}]})
            );
            // On the Service's HTTP port, wherever spec.gateway puts it.
            let moved = build(json!({"version": version, "gateway": {"httpPort": 8081}}));
            assert_eq!(find(&moved, "Gateway", "istio-ingressgateway")["spec"]["servers"][0]["port"]["number"], 8081);

            let filter = find(&objects, "EnvoyFilter", "gateway-remove-kubeflow-cookie");
            assert_eq!(filter["apiVersion"], "networking.istio.io/v1alpha3");
            assert_eq!(filter["metadata"]["namespace"], "istio-system");
            assert_eq!(filter["spec"]["workloadSelector"], json!({"labels": {"istio": "ingressgateway"}}));
            let patch = &filter["spec"]["configPatches"][0];
            assert_eq!(filter["spec"]["configPatches"].as_array().unwrap().len(), 1);
            assert_eq!(patch["applyTo"], "HTTP_FILTER");
            assert_eq!(
                patch["match"],
                json!({"context": "GATEWAY", "listener": {"filterChain": {"filter": {"name": "envoy.filters.network.http_connection_manager", "subFilter": {"name": "envoy.filters.http.router"}}}}})
            );
            assert_eq!(patch["patch"]["operation"], "INSERT_BEFORE");
            assert_eq!(patch["patch"]["value"]["name"], "envoy.filters.http.lua");
            let config = &patch["patch"]["value"]["typed_config"];
            assert_eq!(config["@type"], "type.googleapis.com/envoy.extensions.filters.http.lua.v3.Lua");
            let code = config["inlineCode"].as_str().unwrap();
            assert!(code.starts_with("function envoy_on_request(request_handle)\n") && code.ends_with("end\n"), "{code}");
            assert!(code.contains("\"oauth2_proxy_kubeflow=\""));
            assert!(code.contains("request_handle:headers():remove(\"cookie\")") && code.contains("request_handle:headers():replace(\"cookie\""));
        }
    }

    #[test]
    fn modern_custom_resources_follow_their_crds() {
        for version in MODERN {
            for spec in [json!({"version": version}), json!({"version": version, "clusterLocalGateway": false, "targetNamespace": "mesh"})] {
                let objects = build(spec);
                let position = |kind: &str, name: &str| objects.iter().position(|o| o["kind"] == kind && o["metadata"]["name"] == name).unwrap();
                let resources = custom_resources(&objects);
                assert!(resources.len() >= 4, "{version}");
                for (kind, name) in &resources {
                    let o = find(&objects, kind, name);
                    let k = info(o);
                    assert!(!k.cluster_scoped, "{kind}");
                    assert_eq!(k.rank, kinds::CUSTOM_RESOURCE_RANK, "{kind}");
                    // The CRD of the kind is in the release, comes earlier and serves the version used.
                    let crd_name = format!("{}.{}", k.plural, k.group);
                    let crd = find(&objects, "CustomResourceDefinition", &crd_name);
                    assert!(position("CustomResourceDefinition", &crd_name) < position(kind, name), "{version}: {kind} {name} before {crd_name}");
                    assert!(info(crd).rank < k.rank);
                    assert_eq!(crd["spec"]["names"]["kind"], kind.as_str());
                    assert!(
                        crd["spec"]["versions"].as_array().unwrap().iter().any(|v| v["name"] == k.version && v["served"] == true),
                        "{version}: {crd_name} does not serve {}",
                        k.version
                    );
                }
                // After the workloads, before the webhooks (which must not see them first).
                let last_workload = objects.iter().rposition(|o| o["kind"] == "Deployment").unwrap();
                let first_webhook = objects.iter().position(|o| o["kind"].as_str().unwrap().ends_with("WebhookConfiguration")).unwrap();
                for (kind, name) in &resources {
                    assert!((last_workload..first_webhook).contains(&position(kind, name)), "{kind} {name}");
                }
            }
        }
        // The kinds are registered at the versions the template's CRDs serve.
        component_framework::component::register_custom_kinds::<IstioComponent>();
        for (api_version, kind, plural) in [
            ("security.istio.io/v1", "AuthorizationPolicy", "authorizationpolicies"),
            ("security.istio.io/v1", "RequestAuthentication", "requestauthentications"),
            ("networking.istio.io/v1", "Gateway", "gateways"),
            ("networking.istio.io/v1alpha3", "EnvoyFilter", "envoyfilters"),
        ] {
            let k = kinds::lookup(api_version, kind).unwrap_or_else(|| panic!("{api_version} {kind} is not registered"));
            assert_eq!((k.plural, k.cluster_scoped, k.rank), (plural, false, kinds::CUSTOM_RESOURCE_RANK));
        }
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
