//! The Kubernetes kinds components may ship, with what the framework needs to know about each:
//! where it is served, whether it is cluster-scoped, when it is applied, and whether removal keeps it.

use k8s_openapi::api::admissionregistration::v1::{MutatingWebhookConfiguration, ValidatingWebhookConfiguration};
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, PersistentVolumeClaim, Secret, Service, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::{ClusterResourceScope, NamespaceResourceScope, Resource};
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

/// Whether a k8s-openapi resource scope is the cluster.
trait Scope {
    const CLUSTER: bool;
}

impl Scope for ClusterResourceScope {
    const CLUSTER: bool = true;
}

impl Scope for NamespaceResourceScope {
    const CLUSTER: bool = false;
}

/// The kind of the k8s-openapi type `K`, applied at `rank`.
const fn of<K: Resource<Scope: Scope>>(rank: u8) -> KindInfo {
    KindInfo {
        group: K::GROUP,
        version: K::VERSION,
        kind: K::KIND,
        plural: K::URL_PATH_SEGMENT,
        cluster_scoped: <K::Scope as Scope>::CLUSTER,
        rank,
        immutable_fields: &[],
    }
}

const fn immutable(info: KindInfo, fields: &'static [&'static str]) -> KindInfo {
    KindInfo { immutable_fields: fields, ..info }
}

/// Every kind a component manifest may contain.
pub const KINDS: &[KindInfo] = &[
    of::<Namespace>(0),
    of::<CustomResourceDefinition>(1),
    of::<ServiceAccount>(2),
    of::<ClusterRole>(2),
    of::<Role>(2),
    of::<ClusterRoleBinding>(3),
    of::<RoleBinding>(3),
    of::<ConfigMap>(3),
    of::<Secret>(3),
    of::<PersistentVolumeClaim>(3),
    of::<Service>(4),
    immutable(of::<Deployment>(5), &["spec.selector"]),
    immutable(of::<StatefulSet>(5), &["spec.selector", "spec.serviceName", "spec.volumeClaimTemplates", "spec.podManagementPolicy"]),
    of::<MutatingWebhookConfiguration>(6),
    of::<ValidatingWebhookConfiguration>(6),
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

    /// An API for objects of this kind in `namespace` (ignored for cluster-scoped kinds; all
    /// namespaces when `None`).
    pub fn api(&self, client: &kube::Client, namespace: Option<&str>) -> kube::Api<kube::api::DynamicObject> {
        match (self.cluster_scoped, namespace) {
            (false, Some(ns)) => kube::Api::namespaced_with(client.clone(), ns, &self.api_resource()),
            _ => kube::Api::all_with(client.clone(), &self.api_resource()),
        }
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
        self.kind == CustomResourceDefinition::KIND
    }

    /// Namespaces may be shared by several components and hold users' data: they are created when
    /// missing but never labelled, watched or deleted by a component.
    pub fn is_shared(&self) -> bool {
        self.kind == Namespace::KIND
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_resources_are_those_of_the_k8s_openapi_types() {
        let erased = [
            ApiResource::erase::<Namespace>(&()),
            ApiResource::erase::<CustomResourceDefinition>(&()),
            ApiResource::erase::<ServiceAccount>(&()),
            ApiResource::erase::<ClusterRole>(&()),
            ApiResource::erase::<Role>(&()),
            ApiResource::erase::<ClusterRoleBinding>(&()),
            ApiResource::erase::<RoleBinding>(&()),
            ApiResource::erase::<ConfigMap>(&()),
            ApiResource::erase::<Secret>(&()),
            ApiResource::erase::<PersistentVolumeClaim>(&()),
            ApiResource::erase::<Service>(&()),
            ApiResource::erase::<Deployment>(&()),
            ApiResource::erase::<StatefulSet>(&()),
            ApiResource::erase::<MutatingWebhookConfiguration>(&()),
            ApiResource::erase::<ValidatingWebhookConfiguration>(&()),
        ];
        assert_eq!(KINDS.iter().map(KindInfo::api_resource).collect::<Vec<_>>(), erased);
    }

    #[test]
    fn lookup_finds_kinds_by_api_version() {
        let deployment = lookup("apps/v1", "Deployment").unwrap();
        assert_eq!((deployment.plural, deployment.cluster_scoped, deployment.immutable_fields), ("deployments", false, &["spec.selector"][..]));
        assert!(lookup("v1", "Namespace").is_some_and(|n| n.cluster_scoped && n.is_shared()));
        assert!(lookup("apiextensions.k8s.io/v1", "CustomResourceDefinition").is_some_and(KindInfo::is_crd));
        assert_eq!(lookup("apps/v1beta1", "Deployment"), None);
    }
}
