//! The ClusterServiceVersion of each package and release, and the package descriptions.

use std::collections::BTreeMap;

use base64::Engine;
use kube::CustomResourceExt;
use kubeflow_component_registry::RegisteredComponent;
use serde_json::{Value, json};

use crate::releases::{self, OPERATOR_RELEASES, OperatorRelease};
use crate::Package;

/// Oldest Kubernetes the operators support: the CRDs use CEL validation rules with transition
/// rules (`oldSelf`), GA since 1.29.
pub const MIN_KUBE_VERSION: &str = "1.29.0";
const REPOSITORY: &str = env!("CARGO_PKG_REPOSITORY");
const PROVIDER: &str = "Kubeflow Operator project";
const MAINTAINER_EMAIL: &str = "kubeflow-operator-maintainers@googlegroups.com";

/// The project icon (an SVG in bundle/src), base64-encoded as the CSV and catalog carry it.
pub fn icon_base64() -> String {
    base64::engine::general_purpose::STANDARD.encode(include_str!("icon.svg"))
}

/// The operator's image at `release` (the one in development: published bundles are read back),
/// by digest, as deploy/ references it.
pub fn operator_image(operator: &str, release: &OperatorRelease) -> String {
    kubeflow_deploy::operator_image(operator, release.version)
}

/// OpenShift's infrastructure-feature annotations (what OperatorHub filters on). Disconnected: the
/// operator image is referenced by digest and listed in `relatedImages`, so a mirror serves it, and
/// the operators reach nothing outside the cluster. The rest are not claimed.
const INFRASTRUCTURE_FEATURES: &[(&str, &str)] = &[
    ("features.operators.openshift.io/disconnected", "true"),
    ("features.operators.openshift.io/fips-compliant", "false"),
    ("features.operators.openshift.io/proxy-aware", "false"),
    ("features.operators.openshift.io/tls-profiles", "false"),
    ("features.operators.openshift.io/token-auth-aws", "false"),
    ("features.operators.openshift.io/token-auth-azure", "false"),
    ("features.operators.openshift.io/token-auth-gcp", "false"),
    ("features.operators.openshift.io/cnf", "false"),
    ("features.operators.openshift.io/cni", "false"),
    ("features.operators.openshift.io/csi", "false"),
];

/// `camelCase` → `Camel Case`, with acronyms upper-cased (`crdRemovalPolicy` → `CRD Removal Policy`).
fn display_name(field: &str) -> String {
    words(field)
        .split(' ')
        .map(|word| match word {
            "Crd" => "CRD".to_string(),
            "Crds" => "CRDs".to_string(),
            "Url" => "URL".to_string(),
            "Id" => "ID".to_string(),
            other => other.to_string(),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn words(field: &str) -> String {
    let mut out = String::new();
    for (i, c) in field.chars().enumerate() {
        if i == 0 {
            out.extend(c.to_uppercase());
        } else {
            if c.is_uppercase() && !field[..field.char_indices().nth(i).map(|(b, _)| b).unwrap_or(0)].ends_with(|p: char| p.is_uppercase()) {
                out.push(' ');
            }
            out.push(c);
        }
    }
    out
}

/// Console hints for a spec field, from its schema.
fn spec_x_descriptors(schema: &Value) -> Vec<String> {
    match schema["type"].as_str() {
        Some("boolean") => vec!["urn:alm:descriptor:com.tectonic.ui:booleanSwitch".into()],
        Some("integer") | Some("number") => vec!["urn:alm:descriptor:com.tectonic.ui:number".into()],
        Some("string") => match schema["enum"].as_array() {
            Some(values) => values.iter().filter_map(Value::as_str).map(|v| format!("urn:alm:descriptor:com.tectonic.ui:select:{v}")).collect(),
            None => vec!["urn:alm:descriptor:com.tectonic.ui:text".into()],
        },
        _ => vec!["urn:alm:descriptor:com.tectonic.ui:advanced".into()],
    }
}

/// Console hints for a status field, from its name.
fn status_x_descriptors(field: &str) -> Vec<String> {
    match field {
        "conditions" => vec!["urn:alm:descriptor:io.kubernetes.conditions".into()],
        "phase" => vec!["urn:alm:descriptor:io.kubernetes.phase".into()],
        _ => vec!["urn:alm:descriptor:text".into()],
    }
}

/// Description of a field: the schema's own, unless it is missing or Kubernetes' boilerplate for
/// a type (e.g. `Time is a wrapper…`), then the field's display name.
fn field_description(field: &str, schema: &Value) -> String {
    match schema["description"].as_str() {
        Some(text) if !text.starts_with("Time is a wrapper") => text.to_string(),
        _ if field == "observedGeneration" => "Generation of the spec this status describes.".to_string(),
        _ => format!("{}.", display_name(field)),
    }
}

/// Spec and status descriptors of every top-level field of the storage version's schema.
fn descriptors(crd: &Value, part: &str) -> Vec<Value> {
    let version = crd["spec"]["versions"].as_array().and_then(|v| v.iter().find(|v| v["storage"] == true)).expect("a CRD has a storage version");
    let properties = version["schema"]["openAPIV3Schema"]["properties"][part]["properties"].as_object().cloned().unwrap_or_default();
    properties
        .iter()
        .map(|(field, schema)| {
            let x = if part == "spec" { spec_x_descriptors(schema) } else { status_x_descriptors(field) };
            json!({"path": field, "displayName": display_name(field), "description": field_description(field, schema), "x-descriptors": x})
        })
        .collect()
}

/// The `owned` entry of one CRD.
fn owned_crd(package: &Package, crd: &Value, description: &str) -> Value {
    let name = crd["metadata"]["name"].as_str().unwrap_or_default();
    let version = crd["spec"]["versions"].as_array().and_then(|v| v.iter().find(|v| v["storage"] == true)).expect("a CRD has a storage version");
    let kind = crd["spec"]["names"]["kind"].as_str().unwrap_or_default();
    let resources: Vec<Value> = package
        .created_kinds
        .get(name)
        .into_iter()
        .flatten()
        .map(|(kind, version, plural)| json!({"kind": kind, "version": version, "name": plural}))
        .collect();
    json!({
        "name": name,
        "version": version["name"],
        "kind": kind,
        "displayName": display_name(kind),
        "description": description,
        "resources": resources,
        "specDescriptors": descriptors(crd, "spec"),
        "statusDescriptors": descriptors(crd, "status"),
    })
}

/// What each owned kind is, for the CSV (the CRDs' own top-level descriptions are generated).
fn kind_description(kind: &str) -> String {
    match kind {
        "KfDef" => "A Kubeflow deployment in kfctl's format; the meta-operator splits it into one resource per component.".into(),
        "KfUpgrade" => "An ordered, health-gated upgrade of a KfDef's components to newer versions, rolled back on failure.".into(),
        other => format!("One {other} installation: the version to run, its management state and component-specific settings."),
    }
}

/// The ClusterServiceVersion of `package` at release `index`.
pub fn cluster_service_version(package: &Package, index: usize) -> Value {
    let release = &OPERATOR_RELEASES[index];
    let image = operator_image(&package.operator, release);
    // The endpoints' Services are not part of a bundle: the README says how to expose them.
    let (mut deployment, _services) = kubeflow_deploy::with_endpoints(kubeflow_deploy::operator_deployment(&package.operator, release.version), package.endpoints);
    if let Some(identity) = package.bus_identity {
        deployment = meta_operator::provision::with_identity(deployment, identity);
    }
    if !package.env.is_empty() {
        let env = &mut deployment["spec"]["template"]["spec"]["containers"][0]["env"];
        *env = json!([env.as_array().cloned().unwrap_or_default(), package.env.clone()].concat());
    }
    if package.env.contains(&json!({"name": "PROVISION_NATS_SERVER", "value": "true"})) {
        deployment = kubeflow_deploy::with_exporter_image(deployment);
    }
    let (deployment, renderer) = if package.renders_packages { kubeflow_deploy::with_renderer(deployment) } else { (deployment, Vec::new()) };
    let companions = (package.companions)(release.version);
    let owned: Vec<Value> = package.crds.iter().map(|crd| owned_crd(package, crd, &kind_description(crd["spec"]["names"]["kind"].as_str().unwrap_or_default()))).collect();
    let examples = serde_json::to_string_pretty(&(package.examples)(release)).expect("JSON values serialise");
    let mut annotations = json!({
        "alm-examples": examples,
        "capabilities": "Seamless Upgrades",
        "categories": "AI/Machine Learning",
        "containerImage": image,
        "createdAt": release.created_at,
        "description": package.summary,
        "repository": REPOSITORY,
        "support": PROVIDER,
        "operatorframework.io/suggested-namespace": kubeflow_deploy::OPERATOR_NAMESPACE,
    });
    let mut spec = json!({
        "displayName": package.display_name,
        "description": package.description,
        "version": release.version,
        "minKubeVersion": MIN_KUBE_VERSION,
        "maturity": "alpha",
        "keywords": package.keywords,
        "maintainers": [{"name": "Kubeflow Operator maintainers", "email": MAINTAINER_EMAIL}],
        "provider": {"name": PROVIDER, "url": REPOSITORY},
        "links": [
            {"name": "Source", "url": REPOSITORY},
            {"name": "Documentation", "url": format!("{REPOSITORY}#readme")},
        ],
        "icon": [{"base64data": icon_base64(), "mediatype": "image/svg+xml"}],
        "installModes": [
            {"type": "OwnNamespace", "supported": false},
            {"type": "SingleNamespace", "supported": false},
            {"type": "MultiNamespace", "supported": false},
            {"type": "AllNamespaces", "supported": true},
        ],
        "customresourcedefinitions": {"owned": owned},
        "install": {"strategy": "deployment", "spec": {
            "deployments": (std::iter::once(&deployment).chain(renderer.iter().filter(|o| o["kind"] == "Deployment")).chain(&companions).map(|d| json!({"name": d["metadata"]["name"], "label": d["metadata"]["labels"], "spec": d["spec"]})).collect::<Vec<_>>()),
        }},
        "relatedImages": (std::iter::once(json!({"name": "operator", "image": image})).chain(companions.iter().map(|d| json!({"name": d["metadata"]["name"], "image": d["spec"]["template"]["spec"]["containers"][0]["image"]}))).collect::<Vec<_>>()),
    });
    if !package.rules.is_empty() {
        spec["install"]["spec"]["clusterPermissions"] = json!([{"serviceAccountName": package.operator, "rules": package.rules}]);
    }
    // The rules in the install namespace are the bundle's Role (`namespace_role`), not
    // `permissions`: under an AllNamespaces OperatorGroup, OLM lifts `permissions` to a
    // ClusterRole, which would grant them in every namespace. An operator without cluster rules
    // is listed here with none, so that OLM makes its ServiceAccount.
    let mut permissions = Vec::new();
    if package.rules.is_empty() {
        permissions.push(json!({"serviceAccountName": package.operator, "rules": []}));
    }
    if package.renders_packages {
        // No rules: listed so that OLM makes the renderer's ServiceAccount, bound to nothing.
        permissions.push(json!({"serviceAccountName": kubeflow_deploy::renderer_name(&package.operator), "rules": []}));
    }
    for companion in &companions {
        // Likewise: each companion's ServiceAccount, bound to nothing.
        permissions.push(json!({"serviceAccountName": companion["spec"]["template"]["spec"]["serviceAccountName"], "rules": []}));
    }
    if !permissions.is_empty() {
        spec["install"]["spec"]["permissions"] = json!(permissions);
    }
    for (key, value) in INFRASTRUCTURE_FEATURES {
        annotations[*key] = json!(value);
    }
    if let Some(previous) = index.checked_sub(1).filter(|p| *p >= package.first_release) {
        spec["replaces"] = json!(package.csv_name(&OPERATOR_RELEASES[previous]));
        annotations["olm.skipRange"] = json!(releases::skip_range(index));
    }
    json!({
        "apiVersion": "operators.coreos.com/v1alpha1",
        "kind": "ClusterServiceVersion",
        "metadata": {
            "name": package.csv_name(release),
            "annotations": annotations,
            "labels": {"operatorframework.io/arch.amd64": "supported", "operatorframework.io/os.linux": "supported"},
        },
        "spec": spec,
    })
}

/// The Role and RoleBinding that grant `package`'s operator its rules in the namespace OLM
/// installs it in (none if it has none): bundle objects, which OLM creates as they are.
pub fn namespace_role(package: &Package) -> Vec<Value> {
    if package.namespaced_rules.is_empty() {
        return Vec::new();
    }
    kubeflow_deploy::namespaced_role(&package.operator, &package.operator, &package.namespaced_rules, None)
}

/// The renderer objects `kubeflow_deploy::with_renderer` makes for `package`'s operator at
/// release `index` (none unless it renders packages).
pub fn renderer_objects(package: &Package, index: usize) -> Vec<Value> {
    if !package.renders_packages {
        return Vec::new();
    }
    kubeflow_deploy::with_renderer(kubeflow_deploy::operator_deployment(&package.operator, OPERATOR_RELEASES[index].version)).1
}

/// The meta-operator package: KfDef and KfUpgrade, NATS-based fan-out to component operators.
pub fn meta_operator_package() -> Package {
    let crds: Vec<Value> = [kubeflow_crds::KfDef::crd(), kubeflow_crds::KfUpgrade::crd()].iter().map(|crd| serde_json::to_value(crd).expect("CRDs serialise")).collect();
    let component_kinds: Vec<(String, String, String)> = kubeflow_component_registry::all()
        .iter()
        .map(|c| {
            let resource = c.api_resource();
            (resource.kind, resource.version, resource.plural)
        })
        .collect();
    let created_kinds = BTreeMap::from([(crds[0]["metadata"]["name"].as_str().unwrap_or_default().to_string(), component_kinds)]);
    Package {
        name: "kubeflow-meta-operator".into(),
        display_name: "Kubeflow".into(),
        summary: "Installs and upgrades Kubeflow from a KfDef through independent component operators.".into(),
        description: include_str!("meta-operator.md").into(),
        keywords: ["kubeflow", "kfdef", "machine learning", "mlops", "pipelines", "katib", "kfserving"].map(String::from).into(),
        operator: "meta-operator".into(),
        crds,
        rules: kubeflow_deploy::meta_operator_rules(),
        created_kinds,
        // It provisions the bus in its namespace, the NATS server included: a bundle cannot carry a
        // StatefulSet.
        env: vec![
            json!({"name": "BUS_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}}),
            json!({"name": "PROVISION_NATS_SERVER", "value": "true"}),
            json!({"name": "NATS_REPLICAS", "value": kubeflow_deploy::NATS_REPLICAS.to_string()}),
            // And deploy/monitoring's objects, which a bundle cannot carry as optional ones.
            json!({"name": "MONITORING_OBJECTS", "value": "true"}),
        ],
        bus_identity: Some(kubeflow_crds::bus::Identity::MetaOperator),
        namespaced_rules: [meta_operator::provision::namespaced_rules(), meta_operator::monitoring::namespaced_rules(), operator_runtime::leader::lease_rules()].concat(),
        renders_packages: false,
        companions: no_companions,
        first_release: 0,
        endpoints: &[],
        examples: Box::new(meta_examples),
    }
}

fn meta_examples(release: &OperatorRelease) -> Vec<Value> {
    let newest = release.kubeflow.last().expect("a release supports a Kubeflow version");
    let application = |name: &str, path: &str| json!({"name": name, "kustomizeConfig": {"repoRef": {"name": "manifests", "path": path}}});
    let mut examples = vec![json!({
        "apiVersion": "kfdef.apps.kubeflow.org/v1",
        "kind": "KfDef",
        "metadata": {"name": "kubeflow", "namespace": "kubeflow"},
        "spec": {
            "version": format!("v{newest}.0"),
            "applications": [
                application("istio", "istio/istio/base"),
                application("dex", "dex-auth/dex-crds/base"),
                application("kfserving", "kfserving/installs/generic"),
                application("katib", "katib/installs/katib-standalone"),
                application("kubeflow-pipelines", "pipeline/installs/multi-user"),
            ],
            "repos": [{"name": "manifests", "uri": format!("https://github.com/kubeflow/manifests/archive/v{newest}.0.tar.gz")}],
        },
    })];
    // An upgrade example only where this release knows a newer Kubeflow than its oldest.
    if let [oldest, .., newest] = release.kubeflow {
        examples.push(json!({
            "apiVersion": "kfupgrade.apps.kubeflow.org/v1alpha1",
            "kind": "KfUpgrade",
            "metadata": {"name": format!("kubeflow-to-{}", newest.replace('.', "-")), "namespace": "kubeflow"},
            "spec": {
                "currentKfDef": {"name": "kubeflow", "version": format!("v{oldest}.0")},
                "newKfDef": {"name": "kubeflow", "version": format!("v{newest}.0")},
                "healthTimeoutSeconds": 600,
                "rollbackOnFailure": true,
            },
        }));
    }
    examples
}

fn no_companions(_version: &str) -> Vec<Value> {
    Vec::new()
}

/// The package of a fleet's spoke: the meta-operator as the spoke's bus provisioner, with no
/// right outside its namespace and no CRD, and the fleet agent beside it, with no credential. The
/// component operators the spoke runs are their own packages, connected to its bus.
pub fn fleet_spoke_package() -> Package {
    Package {
        name: "kubeflow-fleet-spoke".into(),
        display_name: "Kubeflow fleet spoke".into(),
        summary: "Joins this cluster to a Kubeflow fleet's hub: its own bus, and the agent that relays the hub's desired state.".into(),
        description: include_str!("fleet-spoke.md").into(),
        keywords: ["kubeflow", "fleet", "multi-cluster", "nats", "machine learning", "mlops"].map(String::from).into(),
        operator: "meta-operator".into(),
        crds: Vec::new(),
        rules: Vec::new(),
        created_kinds: BTreeMap::new(),
        env: kubeflow_deploy::spoke_provisioner_env(),
        bus_identity: None,
        namespaced_rules: [meta_operator::provision::namespaced_rules(), operator_runtime::leader::lease_rules()].concat(),
        renders_packages: false,
        companions: |version| vec![kubeflow_deploy::fleet_agent_deployment(version)],
        first_release: releases::first_release("kubeflow-fleet-spoke"),
        endpoints: &[],
        examples: Box::new(|_| Vec::new()),
    }
}

/// The package of one component operator, installable without the meta-operator.
pub fn component_package(component: RegisteredComponent) -> Package {
    let what = component.installs;
    let kind = component.kind.kind();
    let crd_name = component.crd["metadata"]["name"].as_str().unwrap_or_default().to_string();
    let description = format!(
        "Installs and upgrades {what}.\n\n\
         Create a `{kind}` resource naming the `version` to run; the operator renders that version's \
         manifests, applies them with server-side apply, keeps them as declared (drift is reverted) and \
         reports readiness in `status`. `managementState: Removed` uninstalls the component, `Unmanaged` \
         leaves its objects alone. CRDs the component ships are kept on removal unless \
         `crdRemovalPolicy: Delete`.\n\n\
         Installed on its own, the operator reconciles `{kind}` resources directly. To take the \
         component's desired state from the Kubeflow meta-operator instead, install it in the \
         meta-operator's namespace and connect it to the bus as the meta-operator's description \
         says (`NATS_URL`, its identity Secret, the client label).\n\n\
         See {REPOSITORY}#readme for the versions each release ships and the upgrade edges between them.\n"
    );
    let created_kinds = BTreeMap::from([(
        crd_name,
        component.watched_kinds.iter().map(|k| (k.kind.to_string(), k.version.to_string(), k.plural.to_string())).collect(),
    )]);
    let name = component.kind.name();
    let example = component_example(&component);
    let namespaced_rules = kubeflow_deploy::component_namespaced_rules(&component);
    Package {
        name: format!("kubeflow-{name}-operator"),
        display_name: component.display_name.into(),
        summary: format!("Installs and upgrades {what}."),
        description,
        keywords: ["kubeflow", name, "machine learning", "mlops"].map(String::from).into(),
        operator: component.operator,
        crds: vec![component.crd],
        rules: component.rules,
        created_kinds,
        // Resources naming no account install as their namespace's installer; an OLM install
        // ships none bound to anything: the cluster's admins bind what each namespace may do.
        env: vec![json!({"name": "DEFAULT_SERVICE_ACCOUNT", "value": kubeflow_crds::kfdef::DEFAULT_INSTALLER})],
        bus_identity: None,
        namespaced_rules,
        renders_packages: component.renders_packages,
        companions: no_companions,
        first_release: releases::first_release(&format!("kubeflow-{name}-operator")),
        endpoints: component.endpoints,
        examples: Box::new(example),
    }
}

/// `alm-examples` of `component`: a resource running the newest version an operator release
/// ships, with the component's example fields.
fn component_example(component: &RegisteredComponent) -> impl Fn(&OperatorRelease) -> Vec<Value> + Send + Sync + use<> {
    let resource = component.api_resource();
    let name = component.kind.name();
    let component_releases = component.releases.clone();
    let fields = component.example_spec.as_object().cloned().unwrap_or_default();
    move |release| {
        // A component without built-in releases (rendered from packages) names one in its example.
        let version = releases::shipped_versions(&component_releases, release)
            .pop()
            .map(Value::from)
            .or_else(|| fields.get("version").cloned())
            .expect("each operator release ships every component with releases");
        let mut spec = json!({"version": version, "managementState": "Managed"});
        spec.as_object_mut().expect("an object").extend(fields.clone());
        vec![json!({
            "apiVersion": resource.api_version,
            "kind": resource.kind,
            "metadata": {"name": name, "namespace": "kubeflow"},
            "spec": spec,
        })]
    }
}
