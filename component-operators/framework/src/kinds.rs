//! The Kubernetes kinds components may ship, with what the framework needs to know about each:
//! where it is served, whether it is cluster-scoped, when it is applied, and whether removal keeps it.

use kube::core::{ApiResource, GroupVersionKind};

/// A kind the framework can apply, watch and prune.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KindInfo {
    pub group: &'static str,
    pub version: &'static str,
    pub kind: &'static str,
    pub plural: &'static str,
    pub cluster_scoped: bool,
    /// Apply order: lower first (namespaces and CRDs before what uses them; webhooks last so they
    /// never intercept the component's own objects before its service exists).
    pub rank: u8,
    /// Spec fields the API server refuses to change in place; a release that changes one gets
    /// the object replaced (deleted and created again) instead of patched.
    pub immutable_fields: &'static [&'static str],
}

const fn k(group: &'static str, version: &'static str, kind: &'static str, plural: &'static str, cluster_scoped: bool, rank: u8) -> KindInfo {
    KindInfo { group, version, kind, plural, cluster_scoped, rank, immutable_fields: &[] }
}

const fn immutable(info: KindInfo, fields: &'static [&'static str]) -> KindInfo {
    KindInfo { immutable_fields: fields, ..info }
}

/// Every kind a component manifest may contain.
pub const KINDS: &[KindInfo] = &[
    k("", "v1", "Namespace", "namespaces", true, 0),
    k("apiextensions.k8s.io", "v1", "CustomResourceDefinition", "customresourcedefinitions", true, 1),
    k("", "v1", "ServiceAccount", "serviceaccounts", false, 2),
    k("rbac.authorization.k8s.io", "v1", "ClusterRole", "clusterroles", true, 2),
    k("rbac.authorization.k8s.io", "v1", "Role", "roles", false, 2),
    k("rbac.authorization.k8s.io", "v1", "ClusterRoleBinding", "clusterrolebindings", true, 3),
    k("rbac.authorization.k8s.io", "v1", "RoleBinding", "rolebindings", false, 3),
    k("", "v1", "ConfigMap", "configmaps", false, 3),
    k("", "v1", "Secret", "secrets", false, 3),
    k("", "v1", "PersistentVolumeClaim", "persistentvolumeclaims", false, 3),
    k("", "v1", "Service", "services", false, 4),
    immutable(k("apps", "v1", "Deployment", "deployments", false, 5), &["spec.selector"]),
    immutable(
        k("apps", "v1", "StatefulSet", "statefulsets", false, 5),
        &["spec.selector", "spec.serviceName", "spec.volumeClaimTemplates", "spec.podManagementPolicy"],
    ),
    k("admissionregistration.k8s.io", "v1", "MutatingWebhookConfiguration", "mutatingwebhookconfigurations", true, 6),
    k("admissionregistration.k8s.io", "v1", "ValidatingWebhookConfiguration", "validatingwebhookconfigurations", true, 6),
];

/// Looks up `apiVersion` + `kind`.
pub fn lookup(api_version: &str, kind: &str) -> Option<&'static KindInfo> {
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    KINDS.iter().find(|k| k.group == group && k.version == version && k.kind == kind)
}

impl KindInfo {
    pub fn api_version(&self) -> String {
        if self.group.is_empty() { self.version.to_string() } else { format!("{}/{}", self.group, self.version) }
    }

    pub fn api_resource(&self) -> ApiResource {
        ApiResource {
            group: self.group.into(),
            version: self.version.into(),
            api_version: self.api_version(),
            kind: self.kind.into(),
            plural: self.plural.into(),
        }
    }

    pub fn gvk(&self) -> GroupVersionKind {
        GroupVersionKind::gvk(self.group, self.version, self.kind)
    }

    pub fn is_crd(&self) -> bool {
        self.kind == "CustomResourceDefinition"
    }

    /// Namespaces may be shared by several components and hold users' data: they are created when
    /// missing but never labelled, watched or deleted by a component.
    pub fn is_shared(&self) -> bool {
        self.kind == "Namespace"
    }
}
