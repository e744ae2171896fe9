//! The Kubernetes kinds components may ship, with what the framework needs to know about each:
//! where it is served, whether it is cluster-scoped, when it is applied, and whether removal keeps it.

use std::collections::BTreeMap;
use std::sync::{Mutex, OnceLock};

use k8s_openapi::api::admissionregistration::v1::{MutatingWebhookConfiguration, ValidatingWebhookConfiguration};
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, StatefulSet};
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::{ConfigMap, LimitRange, Namespace, PersistentVolumeClaim, ResourceQuota, Secret, Service, ServiceAccount};
use k8s_openapi::api::networking::v1::{Ingress, NetworkPolicy};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1::APIService;
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

/// Every built-in kind a component manifest may contain, in kfctl's install order by rank:
/// namespaces and quotas, CRDs and cluster-wide settings, accounts and roles, bindings and
/// configuration, services, workloads, then custom resources ([`CUSTOM_RESOURCE_RANK`]), and
/// webhook configurations and API services last.
pub const KINDS: &[KindInfo] = &[
    of::<Namespace>(0),
    of::<ResourceQuota>(0),
    of::<LimitRange>(0),
    of::<CustomResourceDefinition>(1),
    of::<PriorityClass>(1),
    of::<StorageClass>(1),
    of::<ServiceAccount>(2),
    of::<ClusterRole>(2),
    of::<Role>(2),
    of::<ClusterRoleBinding>(3),
    of::<RoleBinding>(3),
    of::<ConfigMap>(3),
    of::<Secret>(3),
    of::<PersistentVolumeClaim>(3),
    of::<NetworkPolicy>(3),
    of::<Service>(4),
    of::<Ingress>(4),
    of::<PodDisruptionBudget>(4),
    immutable(of::<Deployment>(5), &["spec.selector"]),
    immutable(of::<StatefulSet>(5), &["spec.selector", "spec.serviceName", "spec.volumeClaimTemplates", "spec.podManagementPolicy"]),
    immutable(of::<DaemonSet>(5), &["spec.selector"]),
    immutable(of::<Job>(5), &["spec.selector", "spec.template"]),
    of::<CronJob>(5),
    of::<HorizontalPodAutoscaler>(5),
    of::<MutatingWebhookConfiguration>(7),
    of::<ValidatingWebhookConfiguration>(7),
    of::<APIService>(7),
];

/// The name of the CRD that defines the kind of `group` served as `plural`.
pub fn crd_name(group: &str, plural: &str) -> String {
    format!("{plural}.{group}")
}

/// Rank of custom resources: after the workloads that serve them, before webhooks.
pub const CUSTOM_RESOURCE_RANK: u8 = 6;

/// Distinct kinds a process learns at most (interned, so each lives as long as the built-in ones:
/// some 100 bytes each); past it, a render naming a new kind is refused with that reason.
pub const MAX_LEARNED: usize = 16_384;
/// Kinds one install's rendered CRDs may define for it at most.
pub const MAX_RENDERED_PER_INSTALL: usize = 512;

type Key = (String, String, String);

/// Kinds learned at run time, from two sources that are never mixed:
/// - `known`: what the API server serves (discovery) or the operators' own code ships. Every
///   install uses these.
/// - `rendered`: what a CRD rendered by one install defines, before the cluster serves it. Only
///   that install (its component and owner id, `<namespace>/<name>`: one process may render for
///   several components) uses these, so a tenant's CRD with a wrong plural or scope never changes
///   how another install's objects are written.
#[derive(Default)]
struct Registry {
    known: BTreeMap<Key, &'static KindInfo>,
    rendered: BTreeMap<(String, String), BTreeMap<Key, &'static KindInfo>>,
    /// Every distinct kind learned, each once: by group, version, kind, plural and scope.
    interned: BTreeMap<(Key, String, bool), &'static KindInfo>,
}

fn registry() -> std::sync::MutexGuard<'static, Registry> {
    static REGISTRY: OnceLock<Mutex<Registry>> = OnceLock::new();
    REGISTRY.get_or_init(Default::default).lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Registry {
    /// The one `&'static` copy of this kind, or `None` when [`MAX_LEARNED`] are learned already.
    fn intern(&mut self, group: &str, version: &str, kind: &str, plural: &str, cluster_scoped: bool) -> Option<&'static KindInfo> {
        let id = (key(group, version, kind), plural.to_string(), cluster_scoped);
        if let Some(found) = self.interned.get(&id) {
            return Some(found);
        }
        if self.interned.len() >= MAX_LEARNED {
            return None;
        }
        let leak = |s: &str| -> &'static str { Box::leak(s.to_string().into_boxed_str()) };
        let info: &'static KindInfo = Box::leak(Box::new(KindInfo {
            group: leak(group),
            version: leak(version),
            kind: leak(kind),
            plural: leak(plural),
            cluster_scoped,
            rank: CUSTOM_RESOURCE_RANK,
            immutable_fields: &[],
        }));
        self.interned.insert(id, info);
        Some(info)
    }
}

fn key(group: &str, version: &str, kind: &str) -> Key {
    (group.to_string(), version.to_string(), kind.to_string())
}

/// Makes a custom resource kind known to every install, from what the API server serves
/// (discovery) or the operators' own code ships. The API server's answer replaces an older one.
/// `None` when the registry is full ([`MAX_LEARNED`]).
pub fn register(group: &str, version: &str, kind: &str, plural: &str, cluster_scoped: bool) -> Option<&'static KindInfo> {
    let mut registry = registry();
    let info = registry.intern(group, version, kind, plural, cluster_scoped)?;
    registry.known.insert(key(group, version, kind), info);
    Some(info)
}

/// The kinds the CRDs of one render of install `owner` of `component` define, for that install
/// only (see [`lookup_for`]); replaces what its previous render defined. Returns why not, when the
/// install defines more than [`MAX_RENDERED_PER_INSTALL`] kinds or the registry is full.
pub fn set_rendered(component: &str, owner: &str, defined: &[(String, String, String, String, bool)]) -> Result<(), String> {
    if defined.len() > MAX_RENDERED_PER_INSTALL {
        return Err(format!("its CRDs define {} kinds; at most {MAX_RENDERED_PER_INSTALL} per install", defined.len()));
    }
    let mut registry = registry();
    let mut kinds = BTreeMap::new();
    for (group, version, kind, plural, cluster_scoped) in defined {
        let info = registry.intern(group, version, kind, plural, *cluster_scoped).ok_or_else(|| format!("the operator has learned {MAX_LEARNED} kinds, its most; restart it to forget those no longer used"))?;
        kinds.insert(key(group, version, kind), info);
    }
    if kinds.is_empty() {
        registry.rendered.remove(&install(component, owner));
    } else {
        registry.rendered.insert(install(component, owner), kinds);
    }
    Ok(())
}

/// Forgets what the CRDs of install `owner` of `component` defined (the install is gone).
pub fn forget_rendered(component: &str, owner: &str) {
    registry().rendered.remove(&install(component, owner));
}

fn install(component: &str, owner: &str) -> (String, String) {
    (component.to_string(), owner.to_string())
}

/// Looks up `apiVersion` + `kind` among the built-in and known kinds (see [`register`]).
pub fn lookup(api_version: &str, kind: &str) -> Option<&'static KindInfo> {
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    KINDS.iter().find(|k| k.group == group && k.version == version && k.kind == kind).or_else(|| registry().known.get(&key(group, version, kind)).copied())
}

/// As [`lookup`] for the objects of install `owner` (`<namespace>/<name>`) of `component`: then
/// also among the kinds its own rendered CRDs define ([`set_rendered`]), never another install's.
pub fn lookup_for(component: &str, owner: &str, api_version: &str, kind: &str) -> Option<&'static KindInfo> {
    lookup(api_version, kind).or_else(|| {
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
        registry().rendered.get(&install(component, owner))?.get(&key(group, version, kind)).copied()
    })
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

    /// The first immutable field of this kind whose desired value differs from the live one: the
    /// API server refuses to change it in place, so the object is replaced.
    pub fn immutable_field_changed(&self, desired: &serde_json::Value, live: &serde_json::Value) -> Option<&'static str> {
        self.immutable_fields.iter().copied().find(|path| {
            let pointer = format!("/{}", path.replace('.', "/"));
            let Some(wanted) = desired.pointer(&pointer) else { return false };
            match live.pointer(&pointer) {
                None => true,
                // Claim templates gain defaults on the server; selectors and names must match exactly.
                Some(current) if path.ends_with("volumeClaimTemplates") => !crate::manifest::is_subset(wanted, current),
                Some(current) => wanted != current,
            }
        })
    }

    /// PersistentVolumeClaims hold users' data (a pipeline store's database, an object store):
    /// an object that leaves the render is pruned, but never one of these.
    pub fn holds_data(&self) -> bool {
        self.kind == PersistentVolumeClaim::KIND && self.group.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_resources_are_those_of_the_k8s_openapi_types() {
        let erased = [
            ApiResource::erase::<Namespace>(&()),
            ApiResource::erase::<ResourceQuota>(&()),
            ApiResource::erase::<LimitRange>(&()),
            ApiResource::erase::<CustomResourceDefinition>(&()),
            ApiResource::erase::<PriorityClass>(&()),
            ApiResource::erase::<StorageClass>(&()),
            ApiResource::erase::<ServiceAccount>(&()),
            ApiResource::erase::<ClusterRole>(&()),
            ApiResource::erase::<Role>(&()),
            ApiResource::erase::<ClusterRoleBinding>(&()),
            ApiResource::erase::<RoleBinding>(&()),
            ApiResource::erase::<ConfigMap>(&()),
            ApiResource::erase::<Secret>(&()),
            ApiResource::erase::<PersistentVolumeClaim>(&()),
            ApiResource::erase::<NetworkPolicy>(&()),
            ApiResource::erase::<Service>(&()),
            ApiResource::erase::<Ingress>(&()),
            ApiResource::erase::<PodDisruptionBudget>(&()),
            ApiResource::erase::<Deployment>(&()),
            ApiResource::erase::<StatefulSet>(&()),
            ApiResource::erase::<DaemonSet>(&()),
            ApiResource::erase::<Job>(&()),
            ApiResource::erase::<CronJob>(&()),
            ApiResource::erase::<HorizontalPodAutoscaler>(&()),
            ApiResource::erase::<MutatingWebhookConfiguration>(&()),
            ApiResource::erase::<ValidatingWebhookConfiguration>(&()),
            ApiResource::erase::<APIService>(&()),
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

    #[test]
    fn known_custom_kinds_are_interned_follow_the_api_server_and_rank_before_webhooks() {
        assert_eq!(lookup("example.kubeflow.org/v1", "Widget"), None);
        let widget = register("example.kubeflow.org", "v1", "Widget", "widgets", false).unwrap();
        let again = register("example.kubeflow.org", "v1", "Widget", "widgets", false).unwrap();
        assert!(std::ptr::eq(widget, again), "learned twice");
        assert_eq!(lookup("example.kubeflow.org/v1", "Widget").map(|k| (k.plural, k.cluster_scoped, k.rank)), Some(("widgets", false, CUSTOM_RESOURCE_RANK)));
        // The API server's later answer (a CRD replaced) is what every install then uses.
        register("example.kubeflow.org", "v1", "Widget", "widgetz", true).unwrap();
        assert_eq!(lookup("example.kubeflow.org/v1", "Widget").map(|k| (k.plural, k.cluster_scoped)), Some(("widgetz", true)));
        assert!(lookup("apps/v1", "Deployment").unwrap().rank < CUSTOM_RESOURCE_RANK);
        assert!(lookup("admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration").unwrap().rank > CUSTOM_RESOURCE_RANK);
    }

    fn defines(kind: &str, plural: &str) -> Vec<(String, String, String, String, bool)> {
        vec![("tenant.example.com".into(), "v1".into(), kind.into(), plural.into(), false)]
    }

    #[test]
    fn a_kind_one_install_renders_a_crd_for_is_that_install_s_alone() {
        // A tenant's CRD defines Gadget with a wrong plural; the platform's defines it right.
        set_rendered("kustomize", "team-a/loot", &defines("Gadget", "wrongs")).unwrap();
        assert_eq!(lookup("tenant.example.com/v1", "Gadget"), None, "not known to every install");
        set_rendered("kustomize", "kubeflow/platform", &defines("Gadget", "gadgets")).unwrap();
        set_rendered("kustomize", "team-a/loot", &defines("Gadget", "wrongs")).unwrap();
        assert_eq!(lookup_for("kustomize", "kubeflow/platform", "tenant.example.com/v1", "Gadget").unwrap().plural, "gadgets", "the tenant's later render changed the platform's");
        assert_eq!(lookup_for("kustomize", "team-a/loot", "tenant.example.com/v1", "Gadget").unwrap().plural, "wrongs");
        assert_eq!(lookup_for("kustomize", "team-b/other", "tenant.example.com/v1", "Gadget"), None);
        // Another component's install of the same name (one process may render for several).
        set_rendered("katib", "team-a/loot", &defines("Gizmo", "gizmos")).unwrap();
        assert_eq!(lookup_for("kustomize", "team-a/loot", "tenant.example.com/v1", "Gadget").unwrap().plural, "wrongs", "katib's render replaced kustomize's");
        assert_eq!(lookup_for("katib", "team-a/loot", "tenant.example.com/v1", "Gadget"), None);
        assert_eq!(lookup_for("katib", "team-a/loot", "tenant.example.com/v1", "Gizmo").unwrap().plural, "gizmos");
        // Once the API server serves it, its answer is everyone's, the tenant's included.
        register("tenant.example.com", "v1", "Gadget", "gadgets", false).unwrap();
        assert_eq!(lookup_for("kustomize", "team-a/loot", "tenant.example.com/v1", "Gadget").unwrap().plural, "gadgets");
        // A render that defines it no longer, or an install that is gone, forgets it.
        set_rendered("kustomize", "team-a/loot", &defines("Other", "others")).unwrap();
        assert_eq!(lookup_for("kustomize", "team-a/loot", "tenant.example.com/v1", "Gizmo"), None);
        forget_rendered("kustomize", "team-a/loot");
        assert_eq!(lookup_for("kustomize", "team-a/loot", "tenant.example.com/v1", "Other"), None);
    }

    #[test]
    fn the_registry_is_bounded() {
        let many: Vec<_> = (0..=MAX_RENDERED_PER_INSTALL).map(|i| ("bounded.example.com".to_string(), "v1".to_string(), format!("K{i}"), format!("k{i}s"), false)).collect();
        assert!(set_rendered("kustomize", "team-a/many", &many).unwrap_err().contains("at most 512 per install"));
        assert_eq!(lookup_for("kustomize", "team-a/many", "bounded.example.com/v1", "K0"), None, "refused whole");
        // Past MAX_LEARNED distinct kinds nothing new is learned (what is learned stays).
        let mut registry = Registry::default();
        for i in 0..MAX_LEARNED {
            assert!(registry.intern("g", "v1", &format!("K{i}"), "p", false).is_some());
        }
        assert!(registry.intern("g", "v1", "K0", "p", false).is_some(), "already learned");
        assert!(registry.intern("g", "v1", "New", "p", false).is_none());
    }
}
