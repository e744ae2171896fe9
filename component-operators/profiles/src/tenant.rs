//! What one Profile makes (pure): validation of the Profile and of the controller settings, and
//! the tenant's object set under upstream's names — Namespace, RoleBinding `namespaceAdmin`,
//! ServiceAccounts `default-editor`/`default-viewer` with their RoleBindings, the mesh
//! authorization (`ns-owner-access-istio`, or `ns-access-istio` + `owner-binding-istio` on
//! `rbac.istio.io` meshes), ResourceQuota `kf-resource-quota` — plus the opt-in production
//! settings (LimitRange, NetworkPolicies, GPU tolerations, OpenShift mesh membership, quota
//! overrides).

use std::collections::BTreeMap;

use component_framework::InvalidSpec;
use component_framework::api::component::{MeshAuthorization, ProfileControllerSpec};
use component_framework::api::profile::{Owner, Profile};
use component_framework::kube::ResourceExt;
use serde::Deserialize;
use serde_json::{Value, json};

/// Namespace annotation naming the owner (read by the dashboard and KFAM).
pub const OWNER_ANNOTATION: &str = "owner";
/// Annotations KFAM reads the subject and role of a binding from.
pub const USER_ANNOTATION: &str = "user";
pub const ROLE_ANNOTATION: &str = "role";
/// Label on every object the operator makes for a profile (pruning only considers these).
pub const PROFILE_LABEL: &str = "profiles.kubeflow.org/profile";
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
pub const MANAGED_BY: &str = "profiles-operator";

pub const OWNER_BINDING: &str = "namespaceAdmin";
pub const AUTHORIZATION_POLICY: &str = "ns-owner-access-istio";
pub const SERVICE_ROLE: &str = "ns-access-istio";
pub const SERVICE_ROLE_BINDING: &str = "owner-binding-istio";
pub const QUOTA: &str = "kf-resource-quota";
pub const LIMIT_RANGE: &str = "kf-limit-range";
pub const DEFAULT_EDITOR: &str = "default-editor";
pub const DEFAULT_VIEWER: &str = "default-viewer";
pub const KUBEFLOW_ADMIN: &str = "kubeflow-admin";
pub const KUBEFLOW_EDIT: &str = "kubeflow-edit";
pub const KUBEFLOW_VIEW: &str = "kubeflow-view";

pub const WORKLOAD_IDENTITY: &str = "WorkloadIdentity";
pub const AWS_IAM_FOR_SERVICE_ACCOUNT: &str = "AwsIamForServiceAccount";
const PLUGIN_KINDS: [&str; 2] = [WORKLOAD_IDENTITY, AWS_IAM_FOR_SERVICE_ACCOUNT];
const GCP_SA_ANNOTATION: &str = "iam.gke.io/gcp-service-account";
const AWS_ROLE_ANNOTATION: &str = "eks.amazonaws.com/role-arn";

/// Namespace names no Profile may take, whether or not the namespace exists yet: a Profile owns
/// its namespace (deleting the Profile deletes it), so a Profile named `kube-system` must never
/// make or adopt it. The CRD refuses them at admission too; this catches Profiles stored before.
pub use component_framework::api::validation::RESERVED_PROFILE_NAMES as RESERVED_NAMES;
pub use component_framework::api::validation::reserved_profile_name as reserved_name;

/// Why `name` may not be a Profile's name (it is reserved), as a refusal of `metadata.name`.
pub fn reserved_refusal(name: &str, settings: &ProfileControllerSpec) -> Option<InvalidProfile> {
    let extra = settings.reserved_names.iter().find(|pattern| component_framework::api::validation::name_matches(name, pattern));
    reserved_name(name).or(extra.map(String::as_str)).map(|pattern| {
        let reserved: Vec<&str> = RESERVED_NAMES.iter().copied().chain(settings.reserved_names.iter().map(String::as_str)).collect();
        invalid("metadata.name", format!("{name:?} is reserved (matches {pattern:?}): a Profile may not own a system or platform namespace; reserved: {}", reserved.join(", ")))
    })
}

/// Whether an object with these owner references was made for `profile`: it names the
/// Profile's uid (names can be reused after a delete, uids cannot).
pub fn made_for(owner_references: &[k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference], profile: &Profile) -> bool {
    let uid = profile.uid().unwrap_or_default();
    !uid.is_empty() && owner_references.iter().any(|o| o.kind == "Profile" && o.uid == uid)
}

/// Paths Knative's activator and probes reach without a user (upstream's list).
const UNAUTHENTICATED_PATHS: [&str; 3] = ["/healthz", "/metrics", "/wait-for-drain"];

/// Namespace labels every profile gets unless the settings override them.
pub fn default_namespace_labels() -> BTreeMap<String, String> {
    BTreeMap::from([
        ("katib.kubeflow.org/metrics-collector-injection".into(), "enabled".into()),
        ("serving.kubeflow.org/inferenceservice".into(), "enabled".into()),
        ("pipelines.kubeflow.org/enabled".into(), "true".into()),
        ("app.kubernetes.io/part-of".into(), "kubeflow-profile".into()),
    ])
}

/// The mesh authorization API objects are written for (resolved from `Auto` by discovery).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mesh {
    AuthorizationPolicy,
    IstioRbac,
    None,
}

impl Mesh {
    /// `setting`, with `Auto` resolved from which Istio APIs the cluster serves.
    pub fn resolve(setting: MeshAuthorization, serves_authorization_policy: bool, serves_istio_rbac: bool) -> Self {
        match setting {
            MeshAuthorization::AuthorizationPolicy => Mesh::AuthorizationPolicy,
            MeshAuthorization::IstioRbac => Mesh::IstioRbac,
            MeshAuthorization::Disabled => Mesh::None,
            MeshAuthorization::Auto if serves_authorization_policy => Mesh::AuthorizationPolicy,
            MeshAuthorization::Auto if serves_istio_rbac => Mesh::IstioRbac,
            MeshAuthorization::Auto => Mesh::None,
        }
    }
}

/// A Profile field that is invalid, with what is allowed.
pub type InvalidProfile = InvalidSpec;

fn invalid(field: impl Into<String>, message: impl Into<String>) -> InvalidProfile {
    InvalidSpec::new(field, message)
}

fn is_dns_label(s: &str) -> bool {
    !s.is_empty() && s.len() <= 63 && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-') && !s.starts_with('-') && !s.ends_with('-')
}

/// Kubernetes quantity syntax (`2`, `500m`, `1.5Gi`, `1e3`).
pub fn is_quantity(s: &str) -> bool {
    let s = s.strip_prefix(['+', '-']).unwrap_or(s);
    let digits_end = s.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(s.len());
    let (number, suffix) = s.split_at(digits_end);
    let number_ok = !number.is_empty() && number != "." && number.matches('.').count() <= 1;
    let suffix_ok = matches!(suffix, "" | "Ki" | "Mi" | "Gi" | "Ti" | "Pi" | "Ei" | "n" | "u" | "m" | "k" | "M" | "G" | "T" | "P" | "E")
        || (suffix.len() > 1 && suffix.starts_with(['e', 'E']) && {
            let exp = &suffix[1..];
            let exp = exp.strip_prefix(['+', '-']).unwrap_or(exp);
            !exp.is_empty() && exp.bytes().all(|b| b.is_ascii_digit())
        });
    number_ok && suffix_ok
}

/// A resource name as a quota key (`cpu`, `requests.nvidia.com/gpu`, `count/pods`).
fn is_resource_name(s: &str) -> bool {
    !s.is_empty() && s.len() <= 253 && s.bytes().all(|b| b.is_ascii_alphanumeric() || b"-._/".contains(&b)) && s.matches('/').count() <= 1
}

/// Checks the controller settings a ProfileController resource carries.
pub fn validate_settings(spec: &ProfileControllerSpec) -> Result<(), InvalidSpec> {
    for (key, value) in &spec.namespace_labels {
        let (prefix, name) = key.rsplit_once('/').unwrap_or(("", key));
        let name_ok = !name.is_empty() && name.len() <= 63 && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"-._".contains(&b));
        if !name_ok || prefix.len() > 253 {
            return Err(InvalidSpec::new(format!("spec.namespaceLabels[{key:?}]"), "not a valid label key (an optional DNS prefix and '/', then up to 63 of [A-Za-z0-9-_.])"));
        }
        if value.len() > 63 || !value.bytes().all(|b| b.is_ascii_alphanumeric() || b"-._".contains(&b)) {
            return Err(InvalidSpec::new(format!("spec.namespaceLabels[{key:?}]"), "not a valid label value (up to 63 of [A-Za-z0-9-_.]; empty removes the label)"));
        }
    }
    for (i, principal) in spec.trusted_principals.iter().enumerate() {
        if principal.is_empty() || principal.contains(char::is_whitespace) {
            return Err(InvalidSpec::new(format!("spec.trustedPrincipals[{i}]"), "must be a SPIFFE-style principal such as cluster.local/ns/istio-system/sa/istio-ingressgateway-service-account"));
        }
    }
    for (i, proxy) in spec.trusted_proxies.iter().enumerate() {
        if proxy.is_empty() || proxy.contains(char::is_whitespace) {
            return Err(InvalidSpec::new(format!("spec.trustedProxies[{i}]"), "must be a Kubernetes username as TokenReview reports it, such as system:serviceaccount:kubeflow:centraldashboard"));
        }
    }
    if let Some(limits) = &spec.limit_range {
        for (i, limit) in limits.limits.iter().enumerate() {
            for (field, map) in [("default", &limit.default), ("defaultRequest", &limit.default_request), ("max", &limit.max), ("min", &limit.min)] {
                for (resource, quantity) in map.iter().flatten() {
                    if !is_quantity(&quantity.0) {
                        return Err(InvalidSpec::new(format!("spec.limitRange.limits[{i}].{field}[{resource:?}]"), format!("{:?} is not a quantity (e.g. 500m, 2Gi)", quantity.0)));
                    }
                }
            }
        }
    }
    for (resource, quantity) in spec.registered_quota.iter().flat_map(|q| q.hard.iter().flatten()) {
        if !is_quantity(&quantity.0) {
            return Err(InvalidSpec::new(format!("spec.registeredQuota.hard[{resource:?}]"), format!("{:?} is not a quantity (e.g. 4, 500m, 16Gi)", quantity.0)));
        }
    }
    for (i, pattern) in spec.reserved_names.iter().enumerate() {
        let name = pattern.strip_suffix('*').unwrap_or(pattern);
        if name.is_empty() || name.len() > 63 || !name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-') || name.starts_with('-') {
            return Err(InvalidSpec::new(format!("spec.reservedNames[{i}]"), "must be a namespace name, or the start of one followed by * (e.g. monitoring, vault-*)"));
        }
    }
    Ok(())
}

/// Checks a Profile before anything is written for it: the namespace name, the owner, the quota
/// and the plugins.
pub fn validate(profile: &Profile, settings: &ProfileControllerSpec) -> Result<(), InvalidProfile> {
    let name = profile.name_any();
    if !is_dns_label(&name) {
        return Err(invalid("metadata.name", format!("{name:?} cannot name a namespace: use at most 63 of [a-z0-9-], starting and ending with a letter or digit")));
    }
    if let Some(refusal) = reserved_refusal(&name, settings) {
        return Err(refusal);
    }
    validate_owner(&profile.spec.owner)?;
    quota(profile, settings)?;
    plugin_annotations(profile)?;
    Ok(())
}

fn validate_owner(owner: &Owner) -> Result<(), InvalidProfile> {
    match owner.kind.as_str() {
        "User" | "Group" => {
            if owner.api_group.as_deref().is_some_and(|g| g != "rbac.authorization.k8s.io") {
                return Err(invalid("spec.owner.apiGroup", "must be rbac.authorization.k8s.io (or unset) for a User or Group"));
            }
        }
        "ServiceAccount" => {
            if !owner.namespace.as_deref().is_some_and(is_dns_label) {
                return Err(invalid("spec.owner.namespace", "a ServiceAccount owner needs the namespace it lives in"));
            }
            if !is_dns_label(&owner.name) {
                return Err(invalid("spec.owner.name", "a ServiceAccount name is at most 63 of [a-z0-9-]"));
            }
        }
        other => return Err(invalid("spec.owner.kind", format!("{other:?} is not an RBAC subject kind; allowed: User, Group, ServiceAccount"))),
    }
    if owner.name.trim().is_empty() || owner.name.contains(char::is_control) || owner.name.len() > 256 {
        return Err(invalid("spec.owner.name", "must name the owner (non-empty, at most 256 characters, no control characters)"));
    }
    Ok(())
}

/// The quota of the profile's namespace: `spec.resourceQuotaSpec`, with per-profile label
/// overrides when the settings enable them. `None` when `hard` is empty (no ResourceQuota).
pub fn quota(profile: &Profile, settings: &ProfileControllerSpec) -> Result<Option<Value>, InvalidProfile> {
    let mut spec = profile.spec.resource_quota_spec.clone().unwrap_or_default();
    let mut hard = spec.hard.take().unwrap_or_default();
    for (resource, quantity) in &hard {
        if !is_resource_name(resource) {
            return Err(invalid(format!("spec.resourceQuotaSpec.hard[{resource:?}]"), "not a resource name (e.g. cpu, requests.memory, requests.nvidia.com/gpu)"));
        }
        if !is_quantity(&quantity.0) {
            return Err(invalid(format!("spec.resourceQuotaSpec.hard[{resource:?}]"), format!("{:?} is not a quantity (e.g. 4, 500m, 16Gi)", quantity.0)));
        }
    }
    if let Some(prefix) = settings.quota_override_label_prefix.as_deref().filter(|p| !p.is_empty()) {
        for (label, value) in profile.labels() {
            let Some(resource) = label.strip_prefix(prefix) else { continue };
            if !is_resource_name(resource) || !is_quantity(value) {
                return Err(invalid(format!("metadata.labels[{label:?}]"), format!("quota override {value:?} for {resource:?} must be a quantity (e.g. 4, 500m, 16Gi)")));
            }
            hard.insert(resource.to_string(), k8s_openapi::apimachinery::pkg::api::resource::Quantity(value.clone()));
        }
    }
    if hard.is_empty() {
        return Ok(None);
    }
    spec.hard = Some(hard);
    Ok(Some(serde_json::to_value(spec).expect("quota specs serialise")))
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct WorkloadIdentitySpec {
    gcp_service_account: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct AwsIamSpec {
    aws_iam_role: String,
    #[serde(default)]
    #[allow(dead_code)] // read by the cloud side (`crate::cloud`), not by the object set
    annotate_only: bool,
}

/// Annotations the plugins put on `default-editor`, after checking every plugin.
pub fn plugin_annotations(profile: &Profile) -> Result<BTreeMap<String, String>, InvalidProfile> {
    let mut annotations = BTreeMap::new();
    for (i, plugin) in profile.spec.plugins.iter().enumerate() {
        let field = format!("spec.plugins[{i}].spec");
        let spec = plugin.spec.clone().unwrap_or(Value::Null);
        match plugin.kind.as_str() {
            WORKLOAD_IDENTITY => {
                let s: WorkloadIdentitySpec = serde_json::from_value(spec).map_err(|e| invalid(&field, format!("{e}; expected {{gcpServiceAccount: NAME@PROJECT.iam.gserviceaccount.com}}")))?;
                let valid = s.gcp_service_account.split_once('@').is_some_and(|(n, d)| !n.is_empty() && d.ends_with(".gserviceaccount.com"));
                if !valid {
                    return Err(invalid(format!("{field}.gcpServiceAccount"), format!("{:?} is not a Google service account email (NAME@PROJECT.iam.gserviceaccount.com)", s.gcp_service_account)));
                }
                annotations.insert(GCP_SA_ANNOTATION.to_string(), s.gcp_service_account);
            }
            AWS_IAM_FOR_SERVICE_ACCOUNT => {
                let s: AwsIamSpec = serde_json::from_value(spec).map_err(|e| invalid(&field, format!("{e}; expected {{awsIamRole: arn:aws:iam::ACCOUNT:role/NAME, annotateOnly: bool}}")))?;
                let parts: Vec<&str> = s.aws_iam_role.splitn(6, ':').collect();
                let valid = parts.len() == 6 && parts[0] == "arn" && parts[2] == "iam" && parts[4].len() == 12 && parts[4].bytes().all(|b| b.is_ascii_digit()) && parts[5].starts_with("role/");
                if !valid {
                    return Err(invalid(format!("{field}.awsIamRole"), format!("{:?} is not an IAM role ARN (arn:aws:iam::ACCOUNT:role/NAME)", s.aws_iam_role)));
                }
                annotations.insert(AWS_ROLE_ANNOTATION.to_string(), s.aws_iam_role);
            }
            other => return Err(invalid(format!("spec.plugins[{i}].kind"), format!("unknown plugin {other:?}; allowed: {}", PLUGIN_KINDS.join(", ")))),
        }
    }
    Ok(annotations)
}

/// The owner reference every object of `profile` carries: namespace deletion follows the Profile
/// as upstream's does (garbage collection), and watches map objects back to it.
pub fn owner_reference(profile: &Profile) -> Value {
    json!({
        "apiVersion": "kubeflow.org/v1", "kind": "Profile", "name": profile.name_any(),
        "uid": profile.uid().unwrap_or_default(), "controller": true, "blockOwnerDeletion": true,
    })
}

fn metadata(profile: &Profile, name: &str, annotations: Value) -> Value {
    let mut meta = json!({
        "name": name, "namespace": profile.name_any(),
        "labels": {PROFILE_LABEL: profile.name_any(), MANAGED_BY_LABEL: MANAGED_BY},
        "ownerReferences": [owner_reference(profile)],
    });
    if annotations.as_object().is_some_and(|a| !a.is_empty()) {
        meta["annotations"] = annotations;
    }
    meta
}

/// The owner as an RBAC subject.
pub fn subject(owner: &Owner) -> Value {
    match owner.kind.as_str() {
        "ServiceAccount" => json!({"kind": "ServiceAccount", "name": owner.name, "namespace": owner.namespace}),
        kind => json!({"kind": kind, "apiGroup": "rbac.authorization.k8s.io", "name": owner.name}),
    }
}

/// The Istio `when`/`from` that identifies `subject` on a request: the user header (with its
/// prefix) for a User, the groups claim for a Group, the workload principal for a ServiceAccount.
pub fn istio_identity(kind: &str, name: &str, namespace: Option<&str>, settings: &ProfileControllerSpec) -> Value {
    match kind {
        "Group" => json!({"from": [{"source": {"principals": settings.trusted_principals}}],
                          "when": [{"key": format!("request.auth.claims[{}]", settings.groups_claim), "values": [name]}]}),
        "ServiceAccount" => json!({"from": [{"source": {"principals": [format!("cluster.local/ns/{}/sa/{name}", namespace.unwrap_or_default())]}}]}),
        _ => json!({"from": [{"source": {"principals": settings.trusted_principals}}],
                     "when": [{"key": format!("request.headers[{}]", settings.user_id_header), "values": [format!("{}{name}", settings.user_id_prefix)]}]}),
    }
}

/// Namespace labels after applying the settings over the defaults: `(set, remove)`.
pub fn namespace_labels(settings: &ProfileControllerSpec) -> (BTreeMap<String, String>, Vec<String>) {
    let mut labels = default_namespace_labels();
    labels.insert("istio-injection".into(), "enabled".into());
    labels.extend(settings.namespace_labels.clone());
    let remove = labels.iter().filter(|(_, v)| v.is_empty()).map(|(k, _)| k.clone()).collect();
    labels.retain(|_, v| !v.is_empty());
    (labels, remove)
}

/// Every object `profile` makes, in apply order (the Namespace first).
pub fn desired_objects(profile: &Profile, settings: &ProfileControllerSpec, mesh: Mesh) -> Result<Vec<Value>, InvalidProfile> {
    validate(profile, settings)?;
    let name = profile.name_any();
    let owner = &profile.spec.owner;
    let (mut labels, _) = namespace_labels(settings);
    labels.insert(PROFILE_LABEL.into(), name.clone());
    labels.insert(MANAGED_BY_LABEL.into(), MANAGED_BY.into());
    let mut ns_annotations = json!({OWNER_ANNOTATION: owner.name});
    if let Some(gpu) = &settings.gpu_tolerations {
        ns_annotations["scheduler.alpha.kubernetes.io/defaultTolerations"] = serde_json::to_string(&gpu.default_tolerations).expect("tolerations serialise").into();
        if let Some(whitelist) = &gpu.whitelist {
            ns_annotations["scheduler.alpha.kubernetes.io/tolerationsWhitelist"] = serde_json::to_string(whitelist).expect("tolerations serialise").into();
        }
    }
    let mut objects = vec![json!({
        "apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": name, "labels": labels, "annotations": ns_annotations, "ownerReferences": [owner_reference(profile)]},
    })];
    let admin_annotations = json!({USER_ANNOTATION: owner.name, ROLE_ANNOTATION: "admin"});
    objects.push(json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": metadata(profile, OWNER_BINDING, admin_annotations.clone()),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": KUBEFLOW_ADMIN},
        "subjects": [subject(owner)],
    }));
    let plugin_annotations = plugin_annotations(profile)?;
    for (account, role) in [(DEFAULT_EDITOR, KUBEFLOW_EDIT), (DEFAULT_VIEWER, KUBEFLOW_VIEW)] {
        let annotations = if account == DEFAULT_EDITOR { json!(plugin_annotations) } else { json!({}) };
        objects.push(json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": metadata(profile, account, annotations)}));
        objects.push(json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": metadata(profile, account, json!({})),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": name}],
        }));
    }
    match mesh {
        Mesh::AuthorizationPolicy => objects.push(json!({
            "apiVersion": "security.istio.io/v1beta1", "kind": "AuthorizationPolicy",
            "metadata": metadata(profile, AUTHORIZATION_POLICY, admin_annotations.clone()),
            "spec": {"action": "ALLOW", "rules": [
                istio_identity(&owner.kind, &owner.name, owner.namespace.as_deref(), settings),
                {"from": [{"source": {"namespaces": [name]}}]},
                {"to": [{"operation": {"paths": UNAUTHENTICATED_PATHS}}]},
            ]},
        })),
        Mesh::IstioRbac => {
            objects.push(json!({
                "apiVersion": "rbac.istio.io/v1alpha1", "kind": "ServiceRole", "metadata": metadata(profile, SERVICE_ROLE, json!({})),
                "spec": {"rules": [{"services": ["*"]}]},
            }));
            objects.push(json!({
                "apiVersion": "rbac.istio.io/v1alpha1", "kind": "ServiceRoleBinding",
                "metadata": metadata(profile, SERVICE_ROLE_BINDING, admin_annotations),
                "spec": {"roleRef": {"kind": "ServiceRole", "name": SERVICE_ROLE}, "subjects": [istio_rbac_subject(&owner.kind, &owner.name, owner.namespace.as_deref(), settings)]},
            }));
        }
        Mesh::None => {}
    }
    if let Some(quota) = quota(profile, settings)? {
        objects.push(json!({"apiVersion": "v1", "kind": "ResourceQuota", "metadata": metadata(profile, QUOTA, json!({})), "spec": quota}));
    }
    if let Some(limits) = &settings.limit_range {
        objects.push(json!({"apiVersion": "v1", "kind": "LimitRange", "metadata": metadata(profile, LIMIT_RANGE, json!({})), "spec": limits}));
    }
    if let Some(policies) = &settings.network_policies {
        let from_namespaces = |namespaces: &[String]| -> Value {
            json!(namespaces.iter().map(|n| json!({"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": n}}})).collect::<Vec<_>>())
        };
        let ingress = |policy: &str, from: Value| json!({
            "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": metadata(profile, policy, json!({})),
            "spec": {"podSelector": {}, "policyTypes": ["Ingress"], "ingress": [{"from": from}]},
        });
        objects.push(ingress("allow-same-namespace", json!([{"podSelector": {}}])));
        objects.push(ingress("allow-ingress-gateway", from_namespaces(std::slice::from_ref(&policies.ingress_gateway_namespace))));
        if !policies.serverless_namespaces.is_empty() {
            objects.push(ingress("allow-serverless", from_namespaces(&policies.serverless_namespaces)));
        }
        objects.push(json!({
            "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": metadata(profile, "allow-egress-to-pipelines", json!({})),
            "spec": {"podSelector": {}, "policyTypes": ["Egress"], "egress": [{"to": from_namespaces(std::slice::from_ref(&policies.pipelines_namespace))}]},
        }));
    }
    if let Some(mesh) = &settings.service_mesh {
        objects.push(json!({
            "apiVersion": "maistra.io/v1", "kind": "ServiceMeshMember", "metadata": metadata(profile, "default", json!({})),
            "spec": {"controlPlaneRef": {"name": mesh.name, "namespace": mesh.namespace}},
        }));
    }
    Ok(objects)
}

/// A ServiceRoleBinding subject for `rbac.istio.io` meshes.
pub fn istio_rbac_subject(kind: &str, name: &str, namespace: Option<&str>, settings: &ProfileControllerSpec) -> Value {
    match kind {
        "Group" => json!({"properties": {format!("request.auth.claims[{}]", settings.groups_claim): name}}),
        "ServiceAccount" => json!({"user": format!("cluster.local/ns/{}/sa/{name}", namespace.unwrap_or_default())}),
        _ => json!({"properties": {format!("request.headers[{}]", settings.user_id_header): format!("{}{name}", settings.user_id_prefix)}}),
    }
}

/// Kinds a profile's objects may have besides the Namespace, as `(apiVersion, kind, plural)`:
/// what pruning looks through.
pub const PRUNABLE: [(&str, &str, &str); 9] = [
    ("v1", "ServiceAccount", "serviceaccounts"),
    ("rbac.authorization.k8s.io/v1", "RoleBinding", "rolebindings"),
    ("v1", "ResourceQuota", "resourcequotas"),
    ("v1", "LimitRange", "limitranges"),
    ("networking.k8s.io/v1", "NetworkPolicy", "networkpolicies"),
    ("security.istio.io/v1beta1", "AuthorizationPolicy", "authorizationpolicies"),
    ("rbac.istio.io/v1alpha1", "ServiceRole", "serviceroles"),
    ("rbac.istio.io/v1alpha1", "ServiceRoleBinding", "servicerolebindings"),
    ("maistra.io/v1", "ServiceMeshMember", "servicemeshmembers"),
];

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    fn settings() -> ProfileControllerSpec {
        serde_json::from_value(json!({"version": "v1.3.0"})).unwrap()
    }

    fn profile(spec: Value) -> Profile {
        serde_json::from_value(json!({"apiVersion": "kubeflow.org/v1", "kind": "Profile", "metadata": {"name": "alice", "uid": "u-1"}, "spec": spec})).unwrap()
    }

    fn alice() -> Profile {
        profile(json!({"owner": {"kind": "User", "name": "alice@example.com"}}))
    }

    fn names(objects: &[Value]) -> Vec<String> {
        objects.iter().map(|o| format!("{}/{}", o["kind"].as_str().unwrap(), o["metadata"]["name"].as_str().unwrap())).collect()
    }

    fn find<'a>(objects: &'a [Value], kind: &str, name: &str) -> &'a Value {
        objects.iter().find(|o| o["kind"] == kind && o["metadata"]["name"] == name).unwrap_or_else(|| panic!("no {kind}/{name} in {:?}", names(objects)))
    }

    #[test]
    fn a_profile_makes_upstreams_objects_under_upstreams_names() {
        let objects = desired_objects(&alice(), &settings(), Mesh::AuthorizationPolicy).unwrap();
        assert_eq!(
            names(&objects),
            [
                "Namespace/alice", "RoleBinding/namespaceAdmin", "ServiceAccount/default-editor", "RoleBinding/default-editor",
                "ServiceAccount/default-viewer", "RoleBinding/default-viewer", "AuthorizationPolicy/ns-owner-access-istio",
            ]
        );
        let ns = &objects[0];
        assert_eq!(ns["metadata"]["annotations"], json!({"owner": "alice@example.com"}));
        assert_eq!(
            ns["metadata"]["labels"],
            json!({
                "istio-injection": "enabled", "katib.kubeflow.org/metrics-collector-injection": "enabled",
                "serving.kubeflow.org/inferenceservice": "enabled", "pipelines.kubeflow.org/enabled": "true",
                "app.kubernetes.io/part-of": "kubeflow-profile", "profiles.kubeflow.org/profile": "alice",
                "app.kubernetes.io/managed-by": "profiles-operator",
            })
        );
        assert_eq!(ns["metadata"]["ownerReferences"][0]["uid"], "u-1");
        assert_eq!(ns["metadata"]["ownerReferences"][0]["controller"], true);
        let admin = find(&objects, "RoleBinding", "namespaceAdmin");
        assert_eq!(admin["metadata"]["namespace"], "alice");
        assert_eq!(admin["metadata"]["annotations"], json!({"user": "alice@example.com", "role": "admin"}));
        assert_eq!(admin["roleRef"], json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "kubeflow-admin"}));
        assert_eq!(admin["subjects"], json!([{"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": "alice@example.com"}]));
        assert_eq!(find(&objects, "RoleBinding", "default-editor")["roleRef"]["name"], "kubeflow-edit");
        assert_eq!(find(&objects, "RoleBinding", "default-viewer")["subjects"], json!([{"kind": "ServiceAccount", "name": "default-viewer", "namespace": "alice"}]));
        let policy = find(&objects, "AuthorizationPolicy", "ns-owner-access-istio");
        assert_eq!(
            policy["spec"],
            json!({"action": "ALLOW", "rules": [
                {"from": [{"source": {"principals": ["cluster.local/ns/istio-system/sa/istio-ingressgateway-service-account", "cluster.local/ns/kubeflow/sa/ml-pipeline-ui"]}}],
                 "when": [{"key": "request.headers[kubeflow-userid]", "values": ["alice@example.com"]}]},
                {"from": [{"source": {"namespaces": ["alice"]}}]},
                {"to": [{"operation": {"paths": ["/healthz", "/metrics", "/wait-for-drain"]}}]},
            ]})
        );
    }

    #[test]
    fn header_prefix_principals_and_labels_come_from_the_settings() {
        let mut s = settings();
        s.user_id_header = "x-user".into();
        s.user_id_prefix = "accounts.google.com:".into();
        s.trusted_principals = vec!["cluster.local/ns/gw/sa/gw".into()];
        s.namespace_labels = BTreeMap::from([("serving.kubeflow.org/inferenceservice".into(), "".into()), ("team".into(), "ml".into())]);
        let objects = desired_objects(&alice(), &s, Mesh::AuthorizationPolicy).unwrap();
        let rule = &find(&objects, "AuthorizationPolicy", "ns-owner-access-istio")["spec"]["rules"][0];
        assert_eq!(rule["when"][0], json!({"key": "request.headers[x-user]", "values": ["accounts.google.com:alice@example.com"]}));
        assert_eq!(rule["from"][0]["source"]["principals"], json!(["cluster.local/ns/gw/sa/gw"]));
        let labels = &objects[0]["metadata"]["labels"];
        assert_eq!(labels["team"], "ml");
        assert!(labels.get("serving.kubeflow.org/inferenceservice").is_none());
        assert_eq!(namespace_labels(&s).1, ["serving.kubeflow.org/inferenceservice"]);
    }

    #[test]
    fn older_meshes_get_service_role_and_binding() {
        let objects = desired_objects(&alice(), &settings(), Mesh::IstioRbac).unwrap();
        let role = find(&objects, "ServiceRole", "ns-access-istio");
        assert_eq!(role["apiVersion"], "rbac.istio.io/v1alpha1");
        assert_eq!(role["spec"], json!({"rules": [{"services": ["*"]}]}));
        let binding = find(&objects, "ServiceRoleBinding", "owner-binding-istio");
        assert_eq!(binding["spec"]["roleRef"], json!({"kind": "ServiceRole", "name": "ns-access-istio"}));
        assert_eq!(binding["spec"]["subjects"], json!([{"properties": {"request.headers[kubeflow-userid]": "alice@example.com"}}]));
        assert_eq!(binding["metadata"]["annotations"], json!({"user": "alice@example.com", "role": "admin"}));
        assert!(!names(&desired_objects(&alice(), &settings(), Mesh::None).unwrap()).iter().any(|n| n.contains("istio")));
    }

    #[test]
    fn auto_mesh_prefers_authorization_policy_then_istio_rbac() {
        use MeshAuthorization::*;
        assert_eq!(Mesh::resolve(Auto, true, true), Mesh::AuthorizationPolicy);
        assert_eq!(Mesh::resolve(Auto, false, true), Mesh::IstioRbac);
        assert_eq!(Mesh::resolve(Auto, false, false), Mesh::None);
        assert_eq!(Mesh::resolve(IstioRbac, true, false), Mesh::IstioRbac);
        assert_eq!(Mesh::resolve(Disabled, true, true), Mesh::None);
    }

    #[test]
    fn the_quota_exists_only_while_hard_is_not_empty_and_labels_override_it() {
        let mut p = profile(json!({"owner": {"kind": "User", "name": "a"}, "resourceQuotaSpec": {"hard": {"cpu": "4", "requests.nvidia.com/gpu": "1"}}}));
        let objects = desired_objects(&p, &settings(), Mesh::None).unwrap();
        assert_eq!(find(&objects, "ResourceQuota", "kf-resource-quota")["spec"], json!({"hard": {"cpu": "4", "requests.nvidia.com/gpu": "1"}}));
        p.labels_mut().insert("quotas.kubeflow.org/cpu".into(), "8".into());
        let mut s = settings();
        // Without the setting the label is just a label.
        assert_eq!(find(&desired_objects(&p, &s, Mesh::None).unwrap(), "ResourceQuota", "kf-resource-quota")["spec"]["hard"]["cpu"], "4");
        s.quota_override_label_prefix = Some("quotas.kubeflow.org/".into());
        assert_eq!(find(&desired_objects(&p, &s, Mesh::None).unwrap(), "ResourceQuota", "kf-resource-quota")["spec"]["hard"]["cpu"], "8");
        let empty = profile(json!({"owner": {"kind": "User", "name": "a"}, "resourceQuotaSpec": {"hard": {}}}));
        assert!(!names(&desired_objects(&empty, &settings(), Mesh::None).unwrap()).iter().any(|n| n.starts_with("ResourceQuota")));
    }

    #[test]
    fn bad_input_names_the_field_and_what_is_allowed() {
        let err = |spec: Value| desired_objects(&profile(spec), &settings(), Mesh::None).unwrap_err().to_string();
        assert_eq!(
            err(json!({"owner": {"kind": "Robot", "name": "r2"}})),
            "spec.owner.kind: \"Robot\" is not an RBAC subject kind; allowed: User, Group, ServiceAccount"
        );
        assert_eq!(err(json!({"owner": {"kind": "User", "name": " "}})), "spec.owner.name: must name the owner (non-empty, at most 256 characters, no control characters)");
        assert_eq!(err(json!({"owner": {"kind": "ServiceAccount", "name": "ci"}})), "spec.owner.namespace: a ServiceAccount owner needs the namespace it lives in");
        assert_eq!(
            err(json!({"owner": {"kind": "User", "name": "a"}, "resourceQuotaSpec": {"hard": {"cpu": "lots"}}})),
            "spec.resourceQuotaSpec.hard[\"cpu\"]: \"lots\" is not a quantity (e.g. 4, 500m, 16Gi)"
        );
        assert_eq!(
            err(json!({"owner": {"kind": "User", "name": "a"}, "plugins": [{"kind": "WorkloadIdentity", "spec": {"gcpServiceAccount": "a@p.iam.gserviceaccount.com"}}, {"kind": "AzureMagic"}]})),
            "spec.plugins[1].kind: unknown plugin \"AzureMagic\"; allowed: WorkloadIdentity, AwsIamForServiceAccount"
        );
        assert_eq!(
            err(json!({"owner": {"kind": "User", "name": "a"}, "plugins": [{"kind": "AwsIamForServiceAccount", "spec": {"awsIamRole": "admin"}}]})),
            "spec.plugins[0].spec.awsIamRole: \"admin\" is not an IAM role ARN (arn:aws:iam::ACCOUNT:role/NAME)"
        );
        let mut bad_name = alice();
        bad_name.metadata.name = Some("Alice_Smith".into());
        assert!(desired_objects(&bad_name, &settings(), Mesh::None).unwrap_err().to_string().starts_with("metadata.name: \"Alice_Smith\" cannot name a namespace"));
    }

    #[test]
    fn plugins_annotate_the_editor_service_account() {
        let p = profile(json!({"owner": {"kind": "User", "name": "a"}, "plugins": [
            {"kind": "WorkloadIdentity", "spec": {"gcpServiceAccount": "a@proj.iam.gserviceaccount.com"}},
            {"kind": "AwsIamForServiceAccount", "spec": {"awsIamRole": "arn:aws:iam::123456789012:role/kf-a", "annotateOnly": true}},
        ]}));
        let objects = desired_objects(&p, &settings(), Mesh::None).unwrap();
        assert_eq!(
            find(&objects, "ServiceAccount", "default-editor")["metadata"]["annotations"],
            json!({"iam.gke.io/gcp-service-account": "a@proj.iam.gserviceaccount.com", "eks.amazonaws.com/role-arn": "arn:aws:iam::123456789012:role/kf-a"})
        );
        assert!(find(&objects, "ServiceAccount", "default-viewer")["metadata"].get("annotations").is_none());
    }

    #[test]
    fn group_and_service_account_owners_are_identified_their_own_way() {
        let group = profile(json!({"owner": {"kind": "Group", "name": "ml-team"}}));
        let objects = desired_objects(&group, &settings(), Mesh::AuthorizationPolicy).unwrap();
        assert_eq!(find(&objects, "RoleBinding", "namespaceAdmin")["subjects"][0]["kind"], "Group");
        assert_eq!(
            find(&objects, "AuthorizationPolicy", "ns-owner-access-istio")["spec"]["rules"][0]["when"],
            json!([{"key": "request.auth.claims[groups]", "values": ["ml-team"]}])
        );
        let robot = profile(json!({"owner": {"kind": "ServiceAccount", "name": "ci", "namespace": "tools"}}));
        let objects = desired_objects(&robot, &settings(), Mesh::AuthorizationPolicy).unwrap();
        assert_eq!(find(&objects, "RoleBinding", "namespaceAdmin")["subjects"], json!([{"kind": "ServiceAccount", "name": "ci", "namespace": "tools"}]));
        assert_eq!(
            find(&objects, "AuthorizationPolicy", "ns-owner-access-istio")["spec"]["rules"][0],
            json!({"from": [{"source": {"principals": ["cluster.local/ns/tools/sa/ci"]}}]})
        );
    }

    #[test]
    fn production_settings_add_limit_range_network_policies_tolerations_and_mesh_membership() {
        let s: ProfileControllerSpec = serde_json::from_value(json!({
            "version": "v1.3.0",
            "limitRange": {"limits": [{"type": "Container", "default": {"cpu": "1", "memory": "2Gi"}}]},
            "networkPolicies": {},
            "gpuTolerations": {"defaultTolerations": [{"key": "workload", "operator": "Equal", "value": "ai-ml", "effect": "NoSchedule"}], "whitelist": []},
            "serviceMesh": {"name": "basic", "namespace": "istio-system"},
        }))
        .unwrap();
        let objects = desired_objects(&alice(), &s, Mesh::None).unwrap();
        assert_eq!(find(&objects, "LimitRange", "kf-limit-range")["spec"]["limits"][0]["default"], json!({"cpu": "1", "memory": "2Gi"}));
        assert_eq!(
            find(&objects, "NetworkPolicy", "allow-ingress-gateway")["spec"]["ingress"][0]["from"],
            json!([{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "istio-system"}}}])
        );
        assert_eq!(
            find(&objects, "NetworkPolicy", "allow-serverless")["spec"]["ingress"][0]["from"],
            json!([{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "knative-serving"}}}])
        );
        assert_eq!(find(&objects, "NetworkPolicy", "allow-same-namespace")["spec"]["ingress"][0]["from"], json!([{"podSelector": {}}]));
        assert_eq!(
            find(&objects, "NetworkPolicy", "allow-egress-to-pipelines")["spec"]["egress"][0]["to"],
            json!([{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kubeflow"}}}])
        );
        let annotations = &objects[0]["metadata"]["annotations"];
        assert_eq!(annotations["scheduler.alpha.kubernetes.io/defaultTolerations"], r#"[{"effect":"NoSchedule","key":"workload","operator":"Equal","value":"ai-ml"}]"#);
        assert_eq!(annotations["scheduler.alpha.kubernetes.io/tolerationsWhitelist"], "[]");
        assert_eq!(find(&objects, "ServiceMeshMember", "default")["spec"]["controlPlaneRef"], json!({"name": "basic", "namespace": "istio-system"}));
    }

    #[test]
    fn quantities_follow_the_kubernetes_grammar() {
        for good in ["1", "500m", "1.5Gi", "2e3", "+4", ".5", "16Gi", "1E-2"] {
            assert!(is_quantity(good), "{good}");
        }
        for bad in ["", "lots", "1.2.3", "4GB", "e3", "1e", "."] {
            assert!(!is_quantity(bad), "{bad}");
        }
    }

    #[test]
    fn reserved_names_are_refused_before_anything_is_made() {
        // Every namespace a known release installs into (kubeflow/manifests v1.10.2 and v1.2.0, these
        // operators, OLM, common installs of Kubeflow's parts).
        for name in [
            "kube-system", "kube-public", "kube-node-lease", "default", "kubeflow", "kubeflow-operators", "kubeflow-system", "istio-system", "istio-ingress", "auth",
            "oauth2-proxy", "dex", "cert-manager", "knative-serving", "knative-eventing", "kserve", "metacontroller", "notebook-controller-system",
            "tensorboard-controller-system", "profiles-system", "argo", "cnrm-system", "stackdriver", "tekton-pipelines", "olm", "operators", "openshift-operators",
        ] {
            assert!(reserved_name(name).is_some(), "{name}");
            let mut p = alice();
            p.metadata.name = Some(name.into());
            let refusal = desired_objects(&p, &settings(), Mesh::None).unwrap_err().to_string();
            assert!(refusal.starts_with(&format!("metadata.name: {name:?} is reserved")), "{refusal}");
        }
        // The example user's Profile of kubeflow/manifests is a user's, not the platform's.
        for name in ["alice", "kube", "kubeflow-user", "kubeflow-user-example-com", "defaults", "my-kube-system", "knative", "authors", "operator"] {
            assert_eq!(reserved_name(name), None, "{name}");
        }
        assert_eq!(reserved_name("kube-system"), Some("kube-*"));
    }

    /// The common platform namespaces are reserved by default; an admin reserves more in the
    /// settings, exact or by prefix, and only those.
    #[test]
    fn the_cluster_reserves_more_names_in_its_settings() {
        let named = |name: &str| {
            let mut p = alice();
            p.metadata.name = Some(name.into());
            p
        };
        for name in ["monitoring", "ingress-nginx", "local-path-storage", "gatekeeper-system", "metallb-system"] {
            assert!(validate(&named(name), &settings()).unwrap_err().to_string().starts_with(&format!("metadata.name: {name:?} is reserved")), "{name}");
        }
        let mut s = settings();
        s.reserved_names = vec!["observability".into(), "vault-*".into()];
        for name in ["observability", "vault-system"] {
            let refusal = validate(&named(name), &s).unwrap_err().to_string();
            assert!(refusal.starts_with(&format!("metadata.name: {name:?} is reserved")) && refusal.ends_with("metallb-system, observability, vault-*"), "{refusal}");
        }
        for name in ["observability-team", "vault"] {
            assert_eq!(validate(&named(name), &s), Ok(()), "{name}");
        }
    }

    #[test]
    fn the_operators_own_namespace_is_reserved() {
        // Where deploy/ runs the operators (generated from kubeflow_deploy::OPERATOR_NAMESPACE).
        let deployed = include_str!("../../../deploy/profiles/operator.yaml");
        let namespaces: BTreeSet<&str> = deployed.lines().filter_map(|l| l.trim().strip_prefix("namespace: ")).collect();
        assert!(!namespaces.is_empty());
        for namespace in namespaces {
            assert!(reserved_name(namespace).is_some(), "{namespace} (where the operators run) is not reserved");
        }
    }

    #[test]
    fn a_namespace_is_the_profiles_only_by_an_owner_reference_with_its_uid() {
        let reference = |kind: &str, uid: &str| -> k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
            serde_json::from_value(json!({"apiVersion": "kubeflow.org/v1", "kind": kind, "name": "alice", "uid": uid})).unwrap()
        };
        assert!(made_for(&[reference("Profile", "u-1")], &alice()));
        assert!(!made_for(&[], &alice()));
        assert!(!made_for(&[reference("Profile", "u-2")], &alice()), "a Profile of the same name made before");
        assert!(!made_for(&[reference("ConfigMap", "u-1")], &alice()));
        let mut no_uid = alice();
        no_uid.metadata.uid = None;
        assert!(!made_for(&[reference("Profile", "")], &no_uid));
    }

    #[test]
    fn settings_with_a_bad_label_or_limit_are_refused() {
        let mut s = settings();
        s.namespace_labels.insert("bad key!".into(), "x".into());
        assert!(validate_settings(&s).unwrap_err().to_string().starts_with("spec.namespaceLabels[\"bad key!\"]: not a valid label key"));
        let s: ProfileControllerSpec = serde_json::from_value(json!({"version": "v1.3.0", "limitRange": {"limits": [{"type": "Container", "max": {"cpu": "many"}}]}})).unwrap();
        assert_eq!(validate_settings(&s).unwrap_err().to_string(), "spec.limitRange.limits[0].max[\"cpu\"]: \"many\" is not a quantity (e.g. 500m, 2Gi)");
        let s: ProfileControllerSpec = serde_json::from_value(json!({"version": "v1.3.0", "trustedProxies": ["system:serviceaccount:kubeflow:centraldashboard", "two words"]})).unwrap();
        assert!(validate_settings(&s).unwrap_err().to_string().starts_with("spec.trustedProxies[1]: must be a Kubernetes username"));
    }
}
