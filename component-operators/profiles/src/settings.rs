//! Which ProfileController holds the cluster's settings: exactly one. The one the operator's
//! `--settings <namespace>/<name>` names; with `--settings <namespace>` (or `PLATFORM_NAMESPACE`,
//! which deploy/ sets to the platform KfDef's namespace, where the meta-operator puts that KfDef's
//! ProfileController), the oldest managed one there; else the oldest managed one in the operator's
//! own namespace (`--namespace`, else `POD_NAMESPACE`, else the namespace its leader election runs
//! in, else the client's: in a pod, its ServiceAccount's). Every other ProfileController is `Degraded`
//! ("not the cluster's settings: …") and installs nothing; its settings are never used, however
//! old it is. (Before, the oldest managed ProfileController anywhere won, so anyone allowed to
//! create one in any namespace could set every Profile's settings by being first.)

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use component_framework::InvalidSpec;
use component_framework::api::ProfileController;
use component_framework::api::component::ManagementState;
use futures::StreamExt;
use futures::channel::mpsc;
use kube::core::DeserializeGuard;
use kube::runtime::reflector::Store;
use kube::runtime::watcher;
use kube::{Api, Client, Resource, ResourceExt};
use operator_runtime::watches;

/// Field of the refusal a ProfileController that is not the cluster's settings gets: its status
/// then says `not the cluster's settings: <which one is>`.
pub const NOT_THE_SETTINGS: &str = "not the cluster's settings";

/// Where the cluster's settings are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Designation {
    /// `--settings <namespace>/<name>`: that ProfileController.
    Named { namespace: String, name: String },
    /// `--settings <namespace>` or `PLATFORM_NAMESPACE`: the oldest managed ProfileController there.
    OldestIn(String),
    /// The oldest managed ProfileController in the operator's own namespace.
    OperatorsNamespace(String),
}

impl Designation {
    /// From `--settings` (`<namespace>/<name>` or `<namespace>`), else `PLATFORM_NAMESPACE`, else
    /// the operator's own namespace: `--namespace` (the one it watches), `POD_NAMESPACE`, the leader
    /// election's namespace (deploy/ sets it to the pod's), the client's default namespace — the
    /// first one set.
    pub fn from_args(settings: Option<&str>, platform_namespace: Option<&str>, own_namespaces: &[Option<&str>], client_namespace: &str) -> Result<Self, String> {
        let expected = |flag: &str, value: &str, what: &str| format!("{flag} {value:?}: expected {what}");
        if let Some(settings) = settings {
            return match settings.split_once('/') {
                Some((namespace, name)) if is_dns_label(namespace) && !name.is_empty() && !name.contains('/') => Ok(Designation::Named { namespace: namespace.into(), name: name.into() }),
                None if is_dns_label(settings) => Ok(Designation::OldestIn(settings.into())),
                _ => Err(expected("--settings", settings, "<namespace>/<name> of the ProfileController whose settings apply, or <namespace> (the oldest managed one there)")),
            };
        }
        if let Some(namespace) = platform_namespace.filter(|ns| !ns.is_empty()) {
            return if is_dns_label(namespace) { Ok(Designation::OldestIn(namespace.into())) } else { Err(expected("PLATFORM_NAMESPACE", namespace, "a namespace name")) };
        }
        let namespace = own_namespaces.iter().flatten().find(|ns| !ns.is_empty()).copied().unwrap_or(client_namespace);
        Ok(Designation::OperatorsNamespace(namespace.into()))
    }

    /// The namespace the settings live in.
    pub fn namespace(&self) -> &str {
        match self {
            Designation::Named { namespace, .. } | Designation::OldestIn(namespace) | Designation::OperatorsNamespace(namespace) => namespace,
        }
    }

    /// The cluster's settings among `resources` (any namespaces): the designated one, whatever its
    /// state ([`applies`] says whether its settings are in effect).
    pub fn choose<'a>(&self, resources: &'a [Arc<ProfileController>]) -> Option<&'a Arc<ProfileController>> {
        match self {
            Designation::Named { namespace, name } => resources.iter().find(|r| r.namespace().as_deref() == Some(namespace.as_str()) && r.name_any() == *name),
            Designation::OldestIn(namespace) | Designation::OperatorsNamespace(namespace) => resources
                .iter()
                .filter(|r| r.namespace().as_deref() == Some(namespace.as_str()) && applies(r))
                .min_by_key(|r| (r.meta().creation_timestamp.clone().map(|t| t.0), r.name_any())),
        }
    }

    /// The designated ProfileController, for a reader.
    pub fn describe(&self, chosen: Option<&ProfileController>) -> String {
        match (self, chosen) {
            (Designation::Named { namespace, name }, _) => format!("ProfileController {namespace}/{name} is (the profiles operator's --settings)"),
            (Designation::OldestIn(namespace), Some(chosen)) => {
                format!("ProfileController {namespace}/{} is (the oldest managed one in the settings' namespace {namespace})", chosen.name_any())
            }
            (Designation::OldestIn(namespace), None) => {
                format!("the oldest managed ProfileController in the settings' namespace {namespace} is, and there is none")
            }
            (Designation::OperatorsNamespace(namespace), Some(chosen)) => {
                format!("ProfileController {namespace}/{} is (the oldest managed one in the operator's namespace {namespace})", chosen.name_any())
            }
            (Designation::OperatorsNamespace(namespace), None) => {
                format!("the oldest managed ProfileController in the operator's namespace {namespace} is, and there is none (or start the operator with --settings <namespace>/<name>)")
            }
        }
    }

    /// Why `resource` must change nothing, if it is not the cluster's settings; `known` are the
    /// ProfileControllers of the settings' namespace.
    pub fn refusal(&self, resource: &ProfileController, known: &[Arc<ProfileController>]) -> Option<InvalidSpec> {
        let chosen = self.choose(known);
        let is_it = match self {
            Designation::Named { namespace, name } => resource.namespace().as_deref() == Some(namespace.as_str()) && resource.name_any() == *name,
            // The resource itself may not be in the cache yet: choose among both.
            Designation::OldestIn(namespace) | Designation::OperatorsNamespace(namespace) if resource.namespace().as_deref() == Some(namespace.as_str()) => {
                let mut all: Vec<Arc<ProfileController>> = known.iter().filter(|k| !same(k, resource)).cloned().collect();
                all.push(Arc::new(resource.clone()));
                self.choose(&all).is_some_and(|c| same(c, resource))
            }
            Designation::OldestIn(_) | Designation::OperatorsNamespace(_) => false,
        };
        // Retried: which one is the settings changes when another is deleted or created.
        (!is_it).then(|| InvalidSpec::new(NOT_THE_SETTINGS, format!("{}; this one installs nothing and its settings are not used", self.describe(chosen.map(|c| c.as_ref())))).retryable())
    }
}

fn same(a: &ProfileController, b: &ProfileController) -> bool {
    a.namespace() == b.namespace() && a.name_any() == b.name_any()
}

/// Whether a ProfileController's settings can be in effect: managed and not being deleted.
pub fn applies(resource: &ProfileController) -> bool {
    resource.spec.core.management_state == ManagementState::Managed && resource.meta().deletion_timestamp.is_none()
}

fn is_dns_label(s: &str) -> bool {
    !s.is_empty() && s.len() <= 63 && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-') && !s.starts_with('-') && !s.ends_with('-')
}

/// The ProfileControllers of the settings' namespace, watched: the designation, a cache, and the
/// changes for the Profile controller.
#[derive(Clone)]
pub struct Source {
    pub designation: Designation,
    store: Store<DeserializeGuard<ProfileController>>,
    ready: Arc<AtomicBool>,
    changes: Arc<Mutex<Option<mpsc::UnboundedReceiver<()>>>>,
}

impl Source {
    /// Starts watching the settings' namespace (in the background).
    pub fn start(client: Client, designation: Designation) -> Self {
        // Decoded through `DeserializeGuard` so one undecodable object cannot fail the watch.
        let api: Api<DeserializeGuard<ProfileController>> = Api::namespaced(client, designation.namespace());
        let config = match &designation {
            Designation::Named { name, .. } => watcher::Config::default().fields(&format!("metadata.name={name}")),
            Designation::OldestIn(_) | Designation::OperatorsNamespace(_) => watcher::Config::default(),
        };
        let (store, changes) = watches::reflect(api, config, ());
        let (sender, receiver) = mpsc::unbounded();
        tokio::spawn(changes.for_each(move |change| {
            if change.is_ok() {
                let _ = sender.unbounded_send(());
            }
            std::future::ready(())
        }));
        // One waiter only: the store's readiness wakes just one of several concurrent waiters
        // (kube-runtime's DelayedInit keeps one waker), so everyone else reads this flag.
        let ready = Arc::new(AtomicBool::new(false));
        let (waiting, flag) = (store.clone(), ready.clone());
        tokio::spawn(async move {
            if waiting.wait_until_ready().await.is_ok() {
                flag.store(true, Ordering::Release);
            }
        });
        Self { designation, store, ready, changes: Arc::new(Mutex::new(Some(receiver))) }
    }

    /// Waits until the cache holds its first list.
    pub async fn wait_until_ready(&self) {
        while !self.is_ready() {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    }

    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }

    /// The decoded ProfileControllers of the settings' namespace.
    pub fn known(&self) -> Vec<Arc<ProfileController>> {
        self.store.state().iter().filter_map(|guard| guard.0.as_ref().ok().map(|r| Arc::new(r.clone()))).collect()
    }

    /// The settings in effect: the designated ProfileController, when it is managed and not being
    /// deleted; none otherwise (Profiles are then left as they are).
    pub fn current(&self) -> Option<Arc<ProfileController>> {
        self.designation.choose(&self.known()).filter(|r| applies(r)).cloned()
    }

    /// A notification per change of the watched ProfileControllers (once: the Profile controller's).
    pub fn changes(&self) -> Option<mpsc::UnboundedReceiver<()>> {
        self.changes.lock().expect("not poisoned").take()
    }

    /// Why `resource` must change nothing (see [`Designation::refusal`]).
    pub fn refusal(&self, resource: &ProfileController) -> Option<InvalidSpec> {
        if let Designation::OldestIn(namespace) | Designation::OperatorsNamespace(namespace) = &self.designation
            && resource.namespace().as_deref() == Some(namespace.as_str())
            && !self.is_ready()
        {
            // Whether it is the oldest there needs the list.
            return Some(InvalidSpec::new(NOT_THE_SETTINGS, format!("not known yet: waiting for the list of ProfileControllers in namespace {namespace}")).retryable());
        }
        self.designation.refusal(resource, &self.known())
    }
}

/// The operator's settings source, for the component's build (set once by the operator's `main`).
/// Unset (e.g. `kfop`, which installs the one resource it is given), every ProfileController
/// installs.
static SOURCE: OnceLock<Source> = OnceLock::new();

pub fn install(source: Source) {
    let _ = SOURCE.set(source);
}

/// Why `resource` must change nothing, if the operator knows the cluster's settings and `resource`
/// is not them.
pub fn refusal(resource: &ProfileController) -> Option<InvalidSpec> {
    SOURCE.get().and_then(|source| source.refusal(resource))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn controller(namespace: &str, name: &str, created: &str, state: &str) -> Arc<ProfileController> {
        Arc::new(
            serde_json::from_value(json!({
                "apiVersion": "components.kubeflow.org/v1alpha1", "kind": "ProfileController",
                "metadata": {"name": name, "namespace": namespace, "creationTimestamp": created},
                "spec": {"version": "v1.3.0", "managementState": state},
            }))
            .unwrap(),
        )
    }

    fn key(r: Option<&Arc<ProfileController>>) -> Option<(String, String)> {
        r.map(|r| (r.namespace().unwrap_or_default(), r.name_any()))
    }

    fn pair(ns: &str, name: &str) -> Option<(String, String)> {
        Some((ns.into(), name.into()))
    }

    #[test]
    fn the_settings_are_in_the_operators_namespace_even_when_another_is_older() {
        let designation = Designation::OperatorsNamespace("kubeflow-operators".into());
        let oldest_elsewhere = controller("team-a", "profiles", "2020-01-01T00:00:00Z", "Managed");
        let ours = controller("kubeflow-operators", "profiles", "2026-01-01T00:00:00Z", "Managed");
        let all = [oldest_elsewhere.clone(), ours.clone()];
        assert_eq!(key(designation.choose(&all)), pair("kubeflow-operators", "profiles"));
        // Without one in the operators' namespace there are no settings: the oldest elsewhere does not win.
        assert_eq!(key(designation.choose(&[oldest_elsewhere.clone()])), None);
        // In that namespace: the oldest managed one.
        let older_there = controller("kubeflow-operators", "zz", "2025-01-01T00:00:00Z", "Managed");
        let removed_there = controller("kubeflow-operators", "aa", "2024-01-01T00:00:00Z", "Removed");
        assert_eq!(key(designation.choose(&[ours.clone(), older_there, removed_there])), pair("kubeflow-operators", "zz"));
    }

    #[test]
    fn the_settings_flag_names_the_one() {
        let designation = Designation::Named { namespace: "kubeflow".into(), name: "kf".into() };
        let older = controller("kubeflow-operators", "profiles", "2020-01-01T00:00:00Z", "Managed");
        let named = controller("kubeflow", "kf", "2026-01-01T00:00:00Z", "Managed");
        let same_name_elsewhere = controller("other", "kf", "2019-01-01T00:00:00Z", "Managed");
        assert_eq!(key(designation.choose(&[older, same_name_elsewhere, named])), pair("kubeflow", "kf"));
    }

    #[test]
    fn every_other_profile_controller_is_told_which_one_is_the_settings() {
        let designation = Designation::OperatorsNamespace("kubeflow-operators".into());
        let ours = controller("kubeflow-operators", "profiles", "2026-01-01T00:00:00Z", "Managed");
        let known = [ours.clone()];
        assert_eq!(designation.refusal(&ours, &known), None);
        let older_elsewhere = controller("team-a", "profiles", "2020-01-01T00:00:00Z", "Managed");
        let refusal = designation.refusal(&older_elsewhere, &known).expect("refused");
        assert!(refusal.retry);
        assert_eq!(
            refusal.to_string(),
            "not the cluster's settings: ProfileController kubeflow-operators/profiles is (the oldest managed one in the operator's namespace kubeflow-operators); this one installs nothing and its settings are not used"
        );
        // A newer one in the operators' namespace is not it either; the resource itself counts even before the cache shows it.
        let newer_there = controller("kubeflow-operators", "second", "2026-02-01T00:00:00Z", "Managed");
        assert!(designation.refusal(&newer_there, &known).is_some());
        assert_eq!(designation.refusal(&ours, &[]), None, "not cached yet, and alone there");
        // No settings there at all: still not the settings, and says so.
        assert!(designation.refusal(&older_elsewhere, &[]).unwrap().message.starts_with("the oldest managed ProfileController in the operator's namespace kubeflow-operators is, and there is none"));
        let named = Designation::Named { namespace: "kubeflow".into(), name: "kf".into() };
        assert_eq!(named.refusal(&controller("kubeflow", "kf", "2026-01-01T00:00:00Z", "Managed"), &[]), None);
        assert!(named.refusal(&ours, &[]).unwrap().to_string().starts_with("not the cluster's settings: ProfileController kubeflow/kf is (the profiles operator's --settings)"));
    }

    #[test]
    fn the_operators_namespace_comes_from_the_flag_then_the_pod() {
        assert_eq!(Designation::from_args(Some("kubeflow/kf"), Some("p"), &[Some("x")], "default"), Ok(Designation::Named { namespace: "kubeflow".into(), name: "kf".into() }));
        assert_eq!(Designation::from_args(Some("kubeflow"), Some("p"), &[Some("x")], "default"), Ok(Designation::OldestIn("kubeflow".into())));
        for bad in ["/kf", "kubeflow/", "a/b/c", "Kube/x", "Kube", ""] {
            assert!(Designation::from_args(Some(bad), None, &[], "default").unwrap_err().contains("expected <namespace>/<name>"), "{bad}");
        }
        assert_eq!(Designation::from_args(None, Some("kubeflow"), &[Some("x")], "default"), Ok(Designation::OldestIn("kubeflow".into())));
        assert!(Designation::from_args(None, Some("Bad_ns"), &[], "default").unwrap_err().contains("PLATFORM_NAMESPACE"));
        assert_eq!(Designation::from_args(None, None, &[None, Some("kubeflow-operators"), Some("lease")], "default"), Ok(Designation::OperatorsNamespace("kubeflow-operators".into())));
        assert_eq!(Designation::from_args(None, Some(""), &[None, None], "from-client"), Ok(Designation::OperatorsNamespace("from-client".into())));
    }
}
