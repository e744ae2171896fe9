//! NATS mode of a component operator (enabled by `--nats-url`): consume this component's desired
//! state from its `kubeflow-desired-<component>` bucket, materialise it as the component resource (named after
//! the KfDef, in its namespace, owned by it), and publish the resource's status to
//! `kubeflow-status`. The resource then goes through exactly the same reconcile as one created by
//! hand. NATS being down never stops reconciling: the controller runs on the resources alone.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use async_nats::jetstream::{self, kv};
use futures::StreamExt;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use kube::{Api, Client, Resource, ResourceExt};
use kubeflow_crds::component::{ComponentKind, ComponentPhase, ComponentResource, ComponentStatus};
use serde_json::json;
use tokio::sync::mpsc;
use tracing::{Instrument, info, info_span, warn};

use backoff::backoff::Backoff;
use kubeflow_crds::bus::{self, DesiredComponent, Heartbeat, StatusReport};
use kubeflow_crds::component::{PREVIEW_HASH_ANNOTATION, PREVIEW_SPEC_ANNOTATION};
use operator_runtime::{nats, retry};
use crate::component::Component;

/// Label naming the KfDef a component resource was made for.
pub const KFDEF_LABEL: &str = "kfdef.apps.kubeflow.org/name";
/// Annotation with the hash of the desired spec the resource was last made from.
pub const SPEC_HASH_ANNOTATION: &str = "kfdef.apps.kubeflow.org/spec-hash";
/// On a spoke cluster of a fleet, where the KfDef (on the hub) cannot own the resource: the uid
/// of the KfDef it was made for.
pub const KFDEF_UID_ANNOTATION: &str = "kfdef.apps.kubeflow.org/uid";
/// On a spoke cluster of a fleet: the cluster the hub placed the KfDef on.
pub const FLEET_CLUSTER_LABEL: &str = "fleet.kubeflow.org/cluster";

/// Status updates from reconciles to the publisher: `None` removes the key.
pub type StatusSender = mpsc::UnboundedSender<(String, Option<StatusReport>)>;

/// The report for `resource` with `status`, if the resource came from a KfDef.
pub fn report<K: ComponentResource>(resource: &K, status: &ComponentStatus) -> Option<(String, StatusReport)> {
    let kfdef = resource.labels().get(KFDEF_LABEL)?;
    let key = bus::key(K::COMPONENT, &resource.namespace().unwrap_or_default(), kfdef);
    let condition = |t: &str| status.conditions.iter().find(|c| c.type_ == t);
    let degraded = condition("Degraded").is_some_and(|c| c.status == kubeflow_crds::ConditionStatus::True);
    let message = [condition("Degraded"), condition("Ready")]
        .into_iter()
        .flatten()
        .find(|c| !c.message.is_empty() && (degraded || c.type_ == "Ready"))
        .map(|c| c.message.clone())
        .unwrap_or_default();
    Some((
        key,
        StatusReport {
            spec_hash: resource.annotations().get(SPEC_HASH_ANNOTATION).cloned().unwrap_or_default(),
            phase: status.phase.map(|p| format!("{p:?}")),
            version: Some(resource.core().version.clone()),
            installed_version: status.installed_version.clone(),
            ready: status.phase == Some(ComponentPhase::Ready),
            degraded,
            message,
            generation: resource.meta().generation,
            observed_generation: status.observed_generation,
            applications: status.applications.clone(),
            plan: status.plan.clone(),
            purging: status.purging.clone(),
        },
    ))
}

/// Runs NATS mode until the process ends; returns the sender reconciles report status on.
pub fn start<C: Component>(client: Client, url: String, credentials: nats::BusCredentials, namespace: Option<String>) -> StatusSender {
    let (tx, rx) = mpsc::unbounded_channel();
    let failures = tx.clone();
    tokio::spawn(async move {
        let identity = bus::Identity::Component(C::Resource::COMPONENT);
        let name = identity.user();
        let (nats, connected) = match nats::connect(&url, identity, &credentials).await {
            Ok(c) => c,
            Err(e) => return warn!(error = %e, %url, "NATS mode disabled: invalid NATS options"),
        };
        let js = jetstream::new(nats);
        let heartbeat = Heartbeat {
            operator: name.clone(),
            version: env!("CARGO_PKG_VERSION").into(),
            at: 0,
            component: Some(C::Resource::COMPONENT),
            releases: crate::component::announced_releases::<C>(),
        };
        tokio::spawn(publish_status(js.clone(), rx, C::Resource::COMPONENT, heartbeat));
        consume_desired::<C>(client, js, connected, namespace, failures).await;
    });
    tx
}

/// Retry delays while NATS is unreachable: exponential with jitter, from 200 ms up to 5 s.
fn nats_retry() -> backoff::ExponentialBackoff {
    retry::exponential(Duration::from_millis(200), Duration::from_secs(5))
}

/// Opens the buckets, retrying while NATS is unreachable or the meta-operator has not made them.
async fn open_buckets(js: &jetstream::Context, component: ComponentKind) -> (kv::Store, kv::Store, kv::Store) {
    let mut delays = nats_retry();
    loop {
        match nats::component_buckets(js, component).await {
            Ok(b) => return b,
            Err(e) => warn!(error = %e, "NATS not ready; retrying"),
        }
        tokio::time::sleep(delays.next_backoff().unwrap_or(retry::MAX)).await;
    }
}

/// List-then-watch the component's desired keys; after every reconnect, list again rather than
/// trust the watch to resume.
async fn consume_desired<C: Component>(client: Client, js: jetstream::Context, mut connected: tokio::sync::watch::Receiver<u64>, namespace: Option<String>, failures: StatusSender) {
    let component = C::Resource::COMPONENT;
    let filter = match &namespace {
        Some(ns) => format!("{}.{ns}.>", component.name()),
        None => format!("{}.>", component.name()),
    };
    let mut watch_retry = nats_retry();
    let mut ledger = Ledger { failed: BTreeSet::new(), reports: failures };
    loop {
        let (desired, _, _) = open_buckets(&js, component).await;
        connected.mark_unchanged();
        let mut watch = match nats::watch(|| desired.watch_with_history(&filter)).await {
            Ok(w) => w,
            Err(e) => {
                warn!(error = %e, "cannot watch desired state; retrying");
                tokio::time::sleep(watch_retry.next_backoff().unwrap_or(retry::MAX)).await;
                continue;
            }
        };
        watch_retry.reset();
        info!(%filter, "listing desired state");
        let mut present = BTreeSet::new();
        let mut listed = false;
        // Entries whose resource could not be written (e.g. API server briefly unavailable),
        // retried with a growing delay that starts over once they all went through.
        let mut retry: BTreeMap<String, kv::Entry> = BTreeMap::new();
        let mut write_retry = retry::exponential(Duration::from_millis(500), Duration::from_secs(30));
        let retry_at = tokio::time::sleep(Duration::ZERO);
        tokio::pin!(retry_at);
        loop {
            tokio::select! {
                entry = watch.next() => {
                    let Some(Ok(entry)) = entry else { break };
                    retry.remove(&entry.key);
                    if !handle_entry::<C>(&client, &entry, &mut present, &mut ledger).await {
                        if retry.is_empty() {
                            retry_at.as_mut().reset(tokio::time::Instant::now() + write_retry.next_backoff().unwrap_or(retry::MAX));
                        }
                        retry.insert(entry.key.clone(), entry.clone());
                    }
                    if entry.seen_current && !listed {
                        listed = true;
                        remove_orphans::<C>(&client, namespace.as_deref(), &present).await;
                    }
                }
                _ = &mut retry_at, if !retry.is_empty() => {
                    for (key, entry) in std::mem::take(&mut retry) {
                        if !handle_entry::<C>(&client, &entry, &mut present, &mut ledger).await {
                            retry.insert(key, entry);
                        }
                    }
                    if retry.is_empty() {
                        write_retry.reset();
                    } else {
                        retry_at.as_mut().reset(tokio::time::Instant::now() + write_retry.next_backoff().unwrap_or(retry::MAX));
                    }
                }
                changed = connected.changed() => {
                    if changed.is_err() { return; }
                    info!("NATS reconnected; listing desired state again");
                    break;
                }
            }
        }
    }
}

/// The failures this process reported per desired key, kept across relists.
struct Ledger {
    /// Keys whose last report is a failure this process sent (refused, or could not be written).
    failed: BTreeSet<String>,
    reports: StatusSender,
}

impl Ledger {
    fn failed(&mut self, key: &str, report: StatusReport) {
        self.failed.insert(key.to_string());
        let _ = self.reports.send((key.to_string(), Some(report)));
    }

    /// `resource` is made from `key`'s value (written now, or already). A failure reported for
    /// the key is over; when nothing changed (a retry, or the value put back after a refused one)
    /// no reconcile follows to say so, so the resource's own report is sent again.
    fn applied<K: ComponentResource>(&mut self, key: &str, resource: &K) {
        if self.failed.remove(key)
            && let Some((key, report)) = resource.component_status().and_then(|status| report(resource, status))
        {
            let _ = self.reports.send((key, Some(report)));
        }
    }

    /// `key` was deleted: a failure reported for it goes too (its resource's own report goes
    /// with the resource).
    fn deleted(&mut self, key: &str) {
        if self.failed.remove(key) {
            let _ = self.reports.send((key.to_string(), None));
        }
    }
}

/// A desired-state message this operator will not apply, and why (which field, what is allowed).
fn accept<C: Component>(key: &str, value: &[u8]) -> Result<DesiredComponent, String> {
    let desired: DesiredComponent = serde_json::from_slice(value).map_err(|e| format!("it does not decode: {e}"))?;
    let (component, namespace, name) = bus::parse_key(key).ok_or("its key is not <component>.<namespace>.<name>")?;
    if desired.component != C::Resource::COMPONENT || component != C::Resource::COMPONENT {
        return Err(format!("field component: {} is not this operator's component ({})", desired.component, C::Resource::COMPONENT));
    }
    if desired.kfdef.namespace != namespace || desired.kfdef.name != name {
        return Err(format!("field kfdef: {}/{} is not the KfDef its key names ({namespace}/{name})", desired.kfdef.namespace, desired.kfdef.name));
    }
    if !desired.spec.is_object() {
        return Err("field spec: must be an object".into());
    }
    if desired.preview.as_ref().is_some_and(|p| !p.spec.is_object()) {
        return Err("field preview.spec: must be an object".into());
    }
    Ok(desired)
}

/// Applies one desired-state entry; `false` when it should be retried.
async fn handle_entry<C: Component>(client: &Client, entry: &kv::Entry, present: &mut BTreeSet<String>, ledger: &mut Ledger) -> bool {
    let Some((_, namespace, name)) = bus::parse_key(&entry.key) else {
        warn!(key = %entry.key, "ignoring desired key that is not <component>.<namespace>.<name>");
        return true;
    };
    let api: Api<C::Resource> = Api::namespaced(client.clone(), &namespace);
    match entry.operation {
        kv::Operation::Put => {
            // A message this operator cannot trust is consumed, reported on the KfDef (under the
            // spec hash it claims, if any), and never applied; the next put of the key supersedes it.
            let desired = match accept::<C>(&entry.key, &entry.value) {
                Ok(d) => d,
                Err(reason) => {
                    warn!(key = %entry.key, %reason, "refusing desired state");
                    let claimed = serde_json::from_slice::<serde_json::Value>(&entry.value).ok().and_then(|v| v["specHash"].as_str().map(String::from));
                    ledger.failed(&entry.key, refused_report(claimed.unwrap_or_default(), format!("desired state refused: {reason}")));
                    return true;
                }
            };
            present.insert(entry.key.clone());
            // Delivery is at least once: a value put again (a publisher's retry whose first put
            // landed, a relist after a reconnect) that the resource was already made from is not
            // applied again; a failure reported for the key is over all the same.
            if let Ok(Some(resource)) = api.get_opt(&name).await {
                if made_from(&resource, &desired) {
                    ledger.applied(&entry.key, &resource);
                    return true;
                }
                // Still being uninstalled (its KfDef was deleted and one of the same name made at
                // once): applied once it is gone, or the apply would land on the object its
                // finalizer is about to let go, and nothing would make it again.
                if resource.meta().deletion_timestamp.is_some() {
                    info!(key = %entry.key, "the resource is still being deleted; applying once it is gone");
                    return false;
                }
            }
            let span = info_span!("apply_desired", key = %entry.key, kfdef_generation = desired.kfdef.generation);
            if let Some(traceparent) = &desired.traceparent {
                nats::adopt_traceparent(&span, traceparent);
            }
            async {
                let mut annotations = json!({SPEC_HASH_ANNOTATION: desired.spec_hash});
                // Applied by this manager every time: a preview no longer asked for is removed.
                if let Some(preview) = &desired.preview {
                    annotations[PREVIEW_SPEC_ANNOTATION] = json!(preview.spec.to_string());
                    annotations[PREVIEW_HASH_ANNOTATION] = json!(preview.spec_hash);
                }
                let mut metadata = json!({"name": name, "namespace": namespace, "labels": {KFDEF_LABEL: desired.kfdef.name}});
                match &desired.cluster {
                    // Placed by a fleet's hub: the KfDef is not in this cluster, and an owner
                    // reference to it would have the garbage collector delete the resource at
                    // once. The hub's delete of the desired key removes it instead.
                    Some(cluster) => {
                        metadata["labels"][FLEET_CLUSTER_LABEL] = json!(cluster);
                        annotations[KFDEF_UID_ANNOTATION] = json!(desired.kfdef.uid);
                    }
                    None => metadata["ownerReferences"] = json!([{"apiVersion": "kfdef.apps.kubeflow.org/v1", "kind": "KfDef", "name": desired.kfdef.name, "uid": desired.kfdef.uid}]),
                }
                metadata["annotations"] = annotations;
                let object = json!({
                    "apiVersion": C::Resource::api_version(&()),
                    "kind": C::Resource::kind(&()),
                    "metadata": metadata,
                    "spec": desired.spec,
                });
                let manager = format!("kubeflow-{}-operator-nats", C::Resource::COMPONENT.name());
                // Strict: a spec field the resource's schema does not have is refused by the API
                // server with its path instead of being dropped.
                let params = PatchParams { field_validation: Some(kube::api::ValidationDirective::Strict), ..PatchParams::apply(&manager).force() };
                match api.patch(&name, &params, &Patch::Apply(&object)).await {
                    Ok(resource) => {
                        info!(generation = resource.meta().generation, "component resource applied from desired state");
                        ledger.applied(&entry.key, &resource);
                        true
                    }
                    Err(kube::Error::Api(s)) if s.code == 400 || s.code == 422 => {
                        warn!(error = %s.message, "desired spec refused by the API server; not retrying");
                        ledger.failed(&entry.key, refused_report(desired.spec_hash.clone(), format!("desired state refused: {}", s.message)));
                        true
                    }
                    Err(e) => {
                        warn!(error = %e, "cannot apply component resource from desired state; retrying");
                        // Tell the KfDef why nothing happens.
                        let report = StatusReport {
                            spec_hash: desired.spec_hash.clone(),
                            phase: Some("Degraded".into()),
                            degraded: true,
                            message: format!("cannot write {} {namespace}/{name}: {}", C::Resource::kind(&()), short_error(&e)),
                            ..Default::default()
                        };
                        ledger.failed(&entry.key, report);
                        false
                    }
                }
            }
            .instrument(span)
            .await
        }
        kv::Operation::Delete | kv::Operation::Purge => {
            present.remove(&entry.key);
            ledger.deleted(&entry.key);
            match api.delete(&name, &DeleteParams::default()).await {
                Ok(_) => {
                    info!(key = %entry.key, "component removed from its KfDef; deleting the resource");
                    true
                }
                Err(kube::Error::Api(s)) if s.code == 404 => true,
                Err(e) => {
                    warn!(key = %entry.key, error = %e, "cannot delete component resource; retrying");
                    false
                }
            }
        }
    }
}

/// The report for a desired-state message that will not be applied.
fn refused_report(spec_hash: String, message: String) -> StatusReport {
    StatusReport { spec_hash, phase: Some("Degraded".into()), degraded: true, message, ..Default::default() }
}

/// Whether `resource` (not being deleted) was last made from `desired`: its spec, its preview
/// (or none) and the KfDef that owns it, so that applying `desired` would change nothing.
fn made_from<K: ComponentResource>(resource: &K, desired: &DesiredComponent) -> bool {
    let annotation = |key: &str| resource.annotations().get(key).map(String::as_str);
    let owned = match &desired.cluster {
        Some(cluster) => annotation(KFDEF_UID_ANNOTATION) == Some(desired.kfdef.uid.as_str()) && resource.labels().get(FLEET_CLUSTER_LABEL) == Some(cluster),
        None => resource.meta().owner_references.iter().flatten().any(|o| o.kind == "KfDef" && o.uid == desired.kfdef.uid),
    };
    resource.meta().deletion_timestamp.is_none()
        && annotation(SPEC_HASH_ANNOTATION) == Some(desired.spec_hash.as_str())
        && annotation(PREVIEW_HASH_ANNOTATION) == desired.preview.as_ref().map(|p| p.spec_hash.as_str())
        && owned
}

/// Deletes resources made from desired keys that no longer exist (removed while we were away).
async fn remove_orphans<C: Component>(client: &Client, namespace: Option<&str>, present: &BTreeSet<String>) {
    let api: Api<C::Resource> = match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    // Metadata only: a resource the types cannot decode must not hide the others.
    let Ok(list) = api.list_metadata(&ListParams::default().labels(KFDEF_LABEL)).await else { return };
    for resource in list.items {
        let ns = resource.namespace().unwrap_or_default();
        let kfdef = resource.labels().get(KFDEF_LABEL).cloned().unwrap_or_default();
        if !present.contains(&bus::key(C::Resource::COMPONENT, &ns, &kfdef)) {
            info!(namespace = %ns, name = %resource.name_any(), "desired state is gone; deleting the resource");
            let _ = Api::<C::Resource>::namespaced(client.clone(), &ns).delete(&resource.name_any(), &DeleteParams::default()).await;
        }
    }
}

/// Publishes the latest report per key when it differs from what was last published; keeps
/// what could not be sent and retries; refreshes `heartbeat` (with the current time), and puts
/// every report again each [`bus::STATUS_REFRESH_EVERY`] in case another writer replaced it.
async fn publish_status(js: jetstream::Context, mut rx: mpsc::UnboundedReceiver<(String, Option<StatusReport>)>, component: ComponentKind, mut heartbeat: Heartbeat) {
    let (_, status, operators) = open_buckets(&js, component).await;
    let mut pending: BTreeMap<String, Option<StatusReport>> = BTreeMap::new();
    let mut published: BTreeMap<String, Option<StatusReport>> = BTreeMap::new();
    let mut beat_every = tokio::time::interval(bus::HEARTBEAT_EVERY);
    let mut refresh_every = tokio::time::interval(bus::STATUS_REFRESH_EVERY);
    loop {
        tokio::select! {
            message = rx.recv() => {
                let Some((key, report)) = message else { return };
                pending.insert(key, report);
            }
            _ = refresh_every.tick() => {
                // Deleted keys are not deleted again: they are forgotten.
                for (key, report) in std::mem::take(&mut published) {
                    if report.is_some() {
                        pending.entry(key).or_insert(report);
                    }
                }
            }
            _ = beat_every.tick() => {
                heartbeat.at = nats::now_unix();
                if let Err(e) = operators.put(component.name(), serde_json::to_vec(&heartbeat).unwrap().into()).await {
                    warn!(error = %e, "cannot publish heartbeat");
                }
            }
        }
        let keys: Vec<String> = pending.keys().cloned().collect();
        for key in keys {
            let report = pending.remove(&key).unwrap();
            if published.get(&key) == Some(&report) {
                continue;
            }
            let result = match &report {
                Some(r) => status.put(&key, serde_json::to_vec(r).unwrap().into()).await.map(|_| ()).map_err(|e| e.to_string()),
                None => status.delete(&key).await.map_err(|e| e.to_string()),
            };
            match result {
                Ok(()) => {
                    published.insert(key, report);
                }
                Err(e) => {
                    warn!(%key, error = %e, "cannot publish status; will retry");
                    pending.insert(key, report);
                    break;
                }
            }
        }
    }
}

/// The API server's own message for API errors (the full status is in the log).
pub(crate) fn short_error(error: &kube::Error) -> String {
    match error {
        kube::Error::Api(status) => status.message.clone(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kubeflow_crds::Katib;
    use kubeflow_crds::bus::{KfDefRef, Preview};

    fn desired(spec_hash: &str, uid: &str, preview: Option<&str>) -> DesiredComponent {
        DesiredComponent {
            kfdef: KfDefRef { namespace: "team".into(), name: "kubeflow".into(), uid: uid.into(), generation: 1 },
            component: ComponentKind::Katib,
            spec_hash: spec_hash.into(),
            spec: json!({"version": "v0.11.0"}),
            traceparent: None,
            preview: preview.map(|h| Preview { spec_hash: h.into(), spec: json!({"version": "v0.18.0"}) }),
            cluster: None,
        }
    }

    fn katib(annotations: serde_json::Value, owner_uid: &str) -> Katib {
        serde_json::from_value(json!({
            "apiVersion": "components.kubeflow.org/v1alpha1", "kind": "Katib",
            "metadata": {"name": "kubeflow", "namespace": "team", "annotations": annotations,
                         "ownerReferences": [{"apiVersion": "kfdef.apps.kubeflow.org/v1", "kind": "KfDef", "name": "kubeflow", "uid": owner_uid}]},
            "spec": {"version": "v0.11.0"},
        }))
        .unwrap()
    }

    /// A value delivered again (at least once) is not applied again when the resource is already
    /// made from it; any difference — spec, preview, owning KfDef, a deletion under way — applies.
    #[test]
    fn a_value_the_resource_is_already_made_from_is_not_applied_again() {
        let made = katib(json!({SPEC_HASH_ANNOTATION: "h1"}), "u1");
        assert!(made_from(&made, &desired("h1", "u1", None)));
        assert!(!made_from(&made, &desired("h2", "u1", None)), "another spec");
        assert!(!made_from(&made, &desired("h1", "u2", None)), "a KfDef of the same name made again");
        assert!(!made_from(&made, &desired("h1", "u1", Some("p1"))), "a preview asked for");
        let previewed = katib(json!({SPEC_HASH_ANNOTATION: "h1", PREVIEW_HASH_ANNOTATION: "p1"}), "u1");
        assert!(made_from(&previewed, &desired("h1", "u1", Some("p1"))));
        assert!(!made_from(&previewed, &desired("h1", "u1", None)), "a preview no longer asked for is removed");
        let mut deleting = made.clone();
        deleting.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
        assert!(!made_from(&deleting, &desired("h1", "u1", None)));
    }

    /// On a fleet's spoke the KfDef is on the hub: the uid annotation and the cluster label stand
    /// for the owner reference.
    #[test]
    fn a_resource_placed_by_a_hub_is_known_by_its_kfdef_uid_and_cluster() {
        let placed = |cluster: &str| DesiredComponent { cluster: Some(cluster.into()), ..desired("h1", "u1", None) };
        let mut made = katib(json!({SPEC_HASH_ANNOTATION: "h1", KFDEF_UID_ANNOTATION: "u1"}), "u1");
        made.metadata.owner_references = None;
        made.metadata.labels = Some([(FLEET_CLUSTER_LABEL.to_string(), "spoke-a".to_string())].into());
        assert!(made_from(&made, &placed("spoke-a")));
        assert!(!made_from(&made, &placed("spoke-b")), "placed on another cluster");
        assert!(!made_from(&made, &DesiredComponent { cluster: Some("spoke-a".into()), ..desired("h1", "u2", None) }), "a KfDef of the same name made again");
        assert!(!made_from(&made, &desired("h1", "u1", None)), "the same KfDef, now on this cluster itself, owns it");
    }
}
