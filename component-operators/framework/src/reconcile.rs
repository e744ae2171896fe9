//! The reconcile driver: dereference → validate/build (pure, see [`crate::build`]) → server-side
//! apply → prune → status → events. Everything that talks to the API server is here.

use std::collections::{BTreeMap, BTreeSet};
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::DeserializeGuard;
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType, Recorder};
use kube::runtime::finalizer::{self, finalizer};
use kube::{Api, Client, Resource, ResourceExt};
use kubeflow_crds::component::{ComponentResource, CrdRemovalPolicy, InventoryEntry, ManagementState};
use futures::{StreamExt, TryStreamExt};
use serde_json::{Value, json};
use tracing::{info, instrument, warn};

use crate::build::{self, HASH_ANNOTATION};
use crate::component::{Component, InvalidSpec, Inputs};
use crate::handover;
use crate::kinds::{self, KindInfo};
use crate::manifest;
use crate::metrics::Metrics;
use crate::readiness;
use crate::status::{self, Outcome};

/// Finalizer that makes deletion of a component resource remove what it installed.
pub const FINALIZER: &str = "components.kubeflow.org/cleanup";

/// Errors a reconcile can end with; the API server or cluster state is expected to recover.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("Kubernetes API call failed: {0}")]
    Kube(#[from] kube::Error),
    #[error("finalizer handling failed: {0}")]
    Finalizer(#[source] Box<finalizer::Error<Error>>),
}

impl Error {
    /// Short label for the `kfop_reconcile_errors_total{kind}` metric.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::Kube(kube::Error::Api(_)) => "api",
            Error::Kube(_) => "client",
            Error::Finalizer(_) => "finalizer",
        }
    }
}

/// Shared state of one component operator.
pub struct Context<C> {
    pub client: Client,
    pub field_manager: String,
    pub recorder: Recorder,
    pub metrics: Arc<Metrics>,
    /// In NATS mode, where status reports of KfDef-made resources go.
    pub status_sender: Option<crate::nats_mode::StatusSender>,
    _component: PhantomData<fn() -> C>,
}

impl<C: Component> Context<C> {
    pub fn new(client: Client, field_manager: String, recorder: Recorder, metrics: Arc<Metrics>, status_sender: Option<crate::nats_mode::StatusSender>) -> Self {
        Self { client, field_manager, recorder, metrics, status_sender, _component: PhantomData }
    }

    /// Hands the resource's status to the NATS publisher (NATS mode, KfDef-made resources only).
    fn report(&self, resource: &C::Resource, status: Option<&kubeflow_crds::component::ComponentStatus>) {
        let Some(sender) = &self.status_sender else { return };
        let empty = kubeflow_crds::component::ComponentStatus::default();
        if let Some((key, report)) = crate::nats_mode::report(resource, status.unwrap_or(&empty)) {
            let _ = sender.send((key, status.map(|_| report)));
        }
    }

    fn dynamic_api(&self, info: &KindInfo, namespace: Option<&str>) -> Api<DynamicObject> {
        let resource = info.api_resource();
        match (info.cluster_scoped, namespace) {
            (false, Some(ns)) => Api::namespaced_with(self.client.clone(), ns, &resource),
            _ => Api::all_with(self.client.clone(), &resource),
        }
    }

    async fn event(&self, resource: &C::Resource, type_: EventType, reason: &str, note: String) {
        let event = Event { type_, reason: reason.into(), note: Some(note), action: "Reconcile".into(), secondary: None };
        self.metrics.write();
        if let Err(e) = self.recorder.publish(&event, &resource.object_ref(&())).await {
            warn!(error = %e, "cannot publish event");
        }
    }
}

/// Entry point the controller calls for every change of a component resource or an owned object.
#[instrument(skip_all, fields(component = C::Resource::COMPONENT.name(), name = %guard.name_any(), namespace = guard.namespace().unwrap_or_default()))]
pub async fn reconcile<C: Component>(guard: Arc<DeserializeGuard<C::Resource>>, ctx: Arc<Context<C>>) -> Result<Action, Error> {
    let started = Instant::now();
    ctx.metrics.reconcile_started();
    let resource = match &guard.0 {
        Ok(resource) => resource.clone(),
        Err(invalid) => {
            // Cannot happen for objects the schema admitted; never let it stop the watch.
            warn!(error = %invalid.error, "component resource cannot be read; skipping it");
            ctx.metrics.error("invalid_object");
            return Ok(Action::await_change());
        }
    };
    let api: Api<C::Resource> = Api::namespaced(ctx.client.clone(), &resource.namespace().unwrap_or_default());
    let result = finalizer(&api, FINALIZER, Arc::new(resource), |event| async {
        match event {
            finalizer::Event::Apply(resource) => apply::<C>(&resource, &ctx).await,
            finalizer::Event::Cleanup(resource) => cleanup::<C>(&resource, &ctx).await,
        }
    })
    .await
    .map_err(|e| Error::Finalizer(Box::new(e)));
    ctx.metrics.reconcile_finished(started.elapsed());
    result
}

/// Requeue policy for failed reconciles.
pub fn error_policy<C: Component>(_guard: Arc<DeserializeGuard<C::Resource>>, error: &Error, ctx: Arc<Context<C>>) -> Action {
    warn!(%error, "reconcile failed");
    ctx.metrics.error(error.metric_label());
    Action::requeue(Duration::from_secs(5))
}

async fn apply<C: Component>(resource: &C::Resource, ctx: &Context<C>) -> Result<Action, Error> {
    let core = resource.core();
    let outcome = match core.management_state {
        ManagementState::Unmanaged => Outcome::Unmanaged,
        ManagementState::Removed => {
            let inventory = resource.component_status().map(|s| s.inventory.clone()).unwrap_or_default();
            delete_entries(ctx, &inventory, core.crd_removal_policy).await?;
            Outcome::Removed
        }
        ManagementState::Managed => match desired::<C>(resource, ctx).await? {
            Err(invalid) => {
                let retry = invalid.retry;
                write_status(resource, ctx, &Outcome::Invalid { field: invalid.field.clone(), message: invalid.message.clone() }, Some(&invalid)).await?;
                // A missing Secret may appear; a wrong spec needs an edit, which triggers us anyway.
                return Ok(if retry { Action::requeue(Duration::from_secs(10)) } else { Action::await_change() });
            }
            Ok(objects) => {
                let outcome = match apply_objects(resource, ctx, &objects).await {
                    Ok(outcome) => outcome,
                    // The API server refused an object (not a passing failure): say so in status,
                    // then retry with backoff like any error.
                    Err(Error::Kube(kube::Error::Api(status))) if (400..500).contains(&status.code) && ![409, 429].contains(&status.code) => {
                        let failed = Outcome::Invalid { field: "apply".into(), message: status.message.clone() };
                        write_status(resource, ctx, &failed, None).await?;
                        return Err(Error::Kube(kube::Error::Api(status)));
                    }
                    Err(e) => return Err(e),
                };
                let previous = resource.component_status().map(|s| s.inventory.clone()).unwrap_or_default();
                let Outcome::Applied { inventory, .. } = &outcome else { unreachable!() };
                let keep: BTreeSet<&InventoryEntry> = inventory.iter().collect();
                let left: Vec<InventoryEntry> = previous.into_iter().filter(|e| !keep.contains(e)).collect();
                delete_entries(ctx, &left, core.crd_removal_policy).await?;
                outcome
            }
        },
    };
    write_status(resource, ctx, &outcome, None).await?;
    Ok(match outcome {
        // Owned objects' watches bring us back when workloads change; the requeue is a safety net.
        Outcome::Applied { not_ready, .. } if !not_ready.is_empty() => Action::requeue(Duration::from_secs(30)),
        _ => Action::requeue(Duration::from_secs(300)),
    })
}

/// Dereference and build; the inner error is bad input (nothing touched), the outer an API failure.
async fn desired<C: Component>(resource: &C::Resource, ctx: &Context<C>) -> Result<Result<Vec<Value>, InvalidSpec>, Error> {
    let inputs = match dereference::<C>(resource, ctx).await? {
        Ok(inputs) => inputs,
        Err(invalid) => return Ok(Err(invalid)),
    };
    Ok(build::desired_objects::<C>(resource, &inputs))
}

async fn dereference<C: Component>(resource: &C::Resource, ctx: &Context<C>) -> Result<Result<Inputs, InvalidSpec>, Error> {
    let namespace = resource.namespace().unwrap_or_default();
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), &namespace);
    let mut inputs = Inputs::default();
    for (field, reference) in C::secret_refs(resource) {
        let Some(secret) = secrets.get_opt(&reference.name).await? else {
            let msg = format!("Secret {:?} not found in namespace {namespace:?}", reference.name);
            return Ok(Err(InvalidSpec::new(format!("{field}.name"), msg).retryable()));
        };
        let data = secret.data.unwrap_or_default();
        let Some(value) = data.get(&reference.key) else {
            let keys: Vec<_> = data.keys().cloned().collect();
            let msg = format!("Secret {:?} has no key {:?}; keys: {}", reference.name, reference.key, keys.join(", "));
            return Ok(Err(InvalidSpec::new(format!("{field}.key"), msg).retryable()));
        };
        let text = String::from_utf8_lossy(&value.0).into_owned();
        inputs.secrets.insert((reference.name.clone(), reference.key.clone()), text);
    }
    Ok(Ok(inputs))
}

fn entry_of(object: &Value, info: &KindInfo) -> InventoryEntry {
    InventoryEntry {
        group: info.group.into(),
        version: info.version.into(),
        kind: info.kind.into(),
        namespace: object["metadata"]["namespace"].as_str().map(String::from),
        name: object["metadata"]["name"].as_str().unwrap_or_default().into(),
    }
}

/// Applies `objects` in order, skipping those already as desired, and reports readiness.
async fn apply_objects<C: Component>(resource: &C::Resource, ctx: &Context<C>, objects: &[Value]) -> Result<Outcome, Error> {
    let previous: BTreeSet<InventoryEntry> = resource.component_status().map(|s| s.inventory.iter().cloned().collect()).unwrap_or_default();
    let params = PatchParams::apply(&ctx.field_manager).force();
    let mut inventory = Vec::new();
    let mut not_ready = Vec::new();
    let mut changed = Vec::new();
    // Read every live object first, several at a time (reads are the bulk of a no-op reconcile);
    // writes then go out one by one in apply order.
    let targets: Vec<(&Value, &KindInfo, InventoryEntry)> = objects
        .iter()
        .map(|desired| {
            let info = kinds::lookup(desired["apiVersion"].as_str().unwrap_or_default(), desired["kind"].as_str().unwrap_or_default())
                .expect("build only emits known kinds");
            (desired, info, entry_of(desired, info))
        })
        .collect();
    let reads: Vec<(Api<DynamicObject>, String)> =
        targets.iter().map(|(_, info, entry)| (ctx.dynamic_api(info, entry.namespace.as_deref()), entry.name.clone())).collect();
    let lives: Vec<Option<Value>> = futures::stream::iter(reads.into_iter().map(|(api, name)| async move {
        let live = api.get_opt(&name).await?;
        Ok::<_, Error>(live.map(|o| serde_json::to_value(o).expect("objects serialise")))
    }))
    .buffered(8)
    .try_collect()
    .await?;
    // Deployments whose selector changed hand their pods over before anything is written, so the
    // old pods carry the new selector's labels before a Service moves to it.
    let mut lives = lives;
    let mut handed_over: BTreeMap<usize, Vec<String>> = BTreeMap::new();
    for (index, ((desired, info, _), live)) in targets.iter().zip(lives.iter_mut()).enumerate() {
        if info.kind == "Deployment" && live.as_ref().is_some_and(|l| immutable_field_changed(desired, l, info).is_some()) {
            ctx.metrics.write();
            let retired = handover::retire(&ctx.client, live.as_ref().expect("checked"), desired, C::Resource::COMPONENT.name()).await?;
            *live = None;
            handed_over.insert(index, retired);
        }
    }
    for (index, ((desired, info, entry), live)) in targets.into_iter().zip(lives).enumerate() {
        let api = ctx.dynamic_api(info, entry.namespace.as_deref());
        let live = match live {
            Some(live) if up_to_date(desired, &live, info) => live,
            // Shared objects (namespaces) are only ever created, so the operator needs no right
            // to change existing ones.
            None if info.is_shared() => {
                ctx.metrics.write();
                let object: DynamicObject = serde_json::from_value(desired.clone()).expect("desired objects are objects");
                let post = PostParams { field_manager: Some(ctx.field_manager.clone()), ..Default::default() };
                match api.create(&post, &object).await {
                    Ok(created) => serde_json::to_value(created).expect("objects serialise"),
                    Err(kube::Error::Api(status)) if status.code == 409 => desired.clone(),
                    Err(e) => return Err(e.into()),
                }
            }
            live => {
                let what = format!("{} {}", info.kind, qualified(&entry));
                let retiring = match handed_over.get(&index) {
                    Some(retired) => retired.clone(),
                    None => live.as_ref().map(handover::retiring).unwrap_or_default(),
                };
                // A Deployment that existed is missing: deleted, or handed over by a reconcile that
                // stopped before creating the new one. Looked up after the heal, off its path.
                let look_for_retired = live.is_none() && info.kind == "Deployment" && previous.contains(&entry) && !handed_over.contains_key(&index);
                if handed_over.contains_key(&index) {
                    changed.push(format!("replaced {what} (spec.selector changed; the old pods serve until it is Available)"));
                } else if live.is_none() && previous.contains(&entry) {
                    ctx.metrics.healed();
                    info!(object = %what, "recreating deleted object");
                    changed.push(format!("recreated {what}"));
                } else if let Some(live) = &live {
                    if let Some(field) = immutable_field_changed(desired, live, info) {
                        // The API server refuses to change this field in place: replace the object.
                        ctx.metrics.write();
                        api.delete(&entry.name, &DeleteParams::background()).await?;
                        changed.push(format!("replaced {what} ({field} changed)"));
                    } else if live["metadata"]["annotations"][HASH_ANNOTATION] == desired["metadata"]["annotations"][HASH_ANNOTATION] {
                        ctx.metrics.healed();
                        let path = manifest::first_difference(desired, live).unwrap_or_default();
                        info!(object = %what, %path, "reverting drift");
                        changed.push(format!("reverted drift in {what} ({path})"));
                    }
                }
                ctx.metrics.write();
                let mut applied = apply_with_retry(&api, &entry.name, &params, &handover::with_retiring(desired, &retiring), info).await?;
                if look_for_retired {
                    let retired = handover::retired_replica_sets(&ctx.client, entry.namespace.as_deref().unwrap_or_default(), &entry.name).await?;
                    if !retired.is_empty() {
                        ctx.metrics.write();
                        applied = apply_with_retry(&api, &entry.name, &params, &handover::with_retiring(desired, &retired), info).await?;
                    }
                }
                serde_json::to_value(applied).expect("objects serialise")
            }
        };
        match readiness::not_ready_reason(&live) {
            Some(reason) => not_ready.push(reason),
            None if !handover::retiring(&live).is_empty() => {
                ctx.metrics.write();
                handover::finish(&ctx.client, &live, &ctx.field_manager).await?;
            }
            None => {}
        }
        if !info.is_shared() {
            inventory.push(entry);
        }
    }
    if !changed.is_empty() {
        let note = changed.join("; ");
        ctx.event(resource, EventType::Normal, "Healed", note).await;
    }
    Ok(Outcome::Applied { version: resource.core().version.clone(), inventory, not_ready })
}

/// Server-side apply; a replaced object may still be terminating for a moment, so a conflict on
/// create is retried briefly.
async fn apply_with_retry(api: &Api<DynamicObject>, name: &str, params: &PatchParams, desired: &Value, info: &KindInfo) -> Result<DynamicObject, Error> {
    let mut attempt = 0;
    loop {
        match api.patch(name, params, &Patch::Apply(desired)).await {
            Err(kube::Error::Api(status)) if status.code == 409 && attempt < 20 && !info.immutable_fields.is_empty() => {
                attempt += 1;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            other => return Ok(other?),
        }
    }
}

fn up_to_date(desired: &Value, live: &Value, info: &KindInfo) -> bool {
    if info.is_shared() {
        return true; // created when missing, never changed
    }
    live["metadata"]["deletionTimestamp"].is_null()
        && live["metadata"]["annotations"][HASH_ANNOTATION] == desired["metadata"]["annotations"][HASH_ANNOTATION]
        && manifest::is_subset(desired, live)
}

/// The first immutable field of `info`'s kind whose desired value differs from the live one.
fn immutable_field_changed(desired: &Value, live: &Value, info: &KindInfo) -> Option<&'static str> {
    info.immutable_fields.iter().copied().find(|path| {
        let pointer = format!("/{}", path.replace('.', "/"));
        let Some(wanted) = desired.pointer(&pointer) else { return false };
        match live.pointer(&pointer) {
            None => true,
            // Claim templates gain defaults on the server; selectors and names must match exactly.
            Some(current) if path.ends_with("volumeClaimTemplates") => !manifest::is_subset(wanted, current),
            Some(current) => wanted != current,
        }
    })
}

fn qualified(entry: &InventoryEntry) -> String {
    match &entry.namespace {
        Some(ns) => format!("{ns}/{}", entry.name),
        None => entry.name.clone(),
    }
}

/// Deletes `entries`, webhooks first; namespaces are never deleted and CRDs only when the
/// resource opted in with `crdRemovalPolicy: Delete`.
async fn delete_entries<C: Component>(ctx: &Context<C>, entries: &[InventoryEntry], policy: CrdRemovalPolicy) -> Result<(), Error> {
    let mut targets: Vec<(&KindInfo, &InventoryEntry)> = entries
        .iter()
        .filter_map(|e| {
            let api_version = if e.group.is_empty() { e.version.clone() } else { format!("{}/{}", e.group, e.version) };
            kinds::lookup(&api_version, &e.kind).map(|info| (info, e))
        })
        .filter(|(info, _)| !info.is_shared() && (!info.is_crd() || policy == CrdRemovalPolicy::Delete))
        .collect();
    targets.sort_by_key(|(info, _)| std::cmp::Reverse(info.rank));
    for (info, entry) in targets {
        let api = ctx.dynamic_api(info, entry.namespace.as_deref());
        ctx.metrics.write();
        match api.delete(&entry.name, &DeleteParams::background()).await {
            Ok(_) => info!(kind = info.kind, name = %qualified(entry), "deleted"),
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(e) => return Err(e.into()),
        }
        if info.kind == "Deployment" {
            handover::delete_retired(&ctx.client, entry.namespace.as_deref().unwrap_or_default(), &entry.name).await?;
        }
    }
    Ok(())
}

async fn cleanup<C: Component>(resource: &C::Resource, ctx: &Context<C>) -> Result<Action, Error> {
    let core = resource.core();
    let mut entries: BTreeSet<InventoryEntry> = resource.component_status().map(|s| s.inventory.iter().cloned().collect()).unwrap_or_default();
    if core.management_state != ManagementState::Unmanaged {
        // Objects applied by a reconcile whose status write never landed are not in the inventory.
        if let Ok(Ok(objects)) = desired::<C>(resource, ctx).await {
            for object in &objects {
                let info = kinds::lookup(object["apiVersion"].as_str().unwrap_or_default(), object["kind"].as_str().unwrap_or_default());
                if let Some(info) = info {
                    entries.insert(entry_of(object, info));
                }
            }
        }
        delete_entries(ctx, &entries.into_iter().collect::<Vec<_>>(), core.crd_removal_policy).await?;
        ctx.event(resource, EventType::Normal, "Uninstalled", format!("removed the objects of {} {}", C::Resource::COMPONENT.kind(), resource.name_any())).await;
    }
    ctx.report(resource, None);
    Ok(Action::await_change())
}

/// Writes the status computed from `outcome` if it differs from the current one.
async fn write_status<C: Component>(resource: &C::Resource, ctx: &Context<C>, outcome: &Outcome, invalid: Option<&InvalidSpec>) -> Result<(), Error> {
    let now = Time(jiff_now());
    let cached = resource.component_status();
    let next = status::next_status(cached, resource.meta().generation, outcome, &now);
    ctx.report(resource, Some(&next));
    if cached == Some(&next) {
        return Ok(());
    }
    let api: Api<C::Resource> = Api::namespaced(ctx.client.clone(), &resource.namespace().unwrap_or_default());
    // The cached resource can predate this operator's own last status write (its watch event not
    // seen yet): compare with the stored status before writing the same one again.
    let Some(stored) = api.get_opt(&resource.name_any()).await? else { return Ok(()) };
    let current = stored.component_status();
    let next = status::next_status(current, resource.meta().generation, outcome, &now);
    if current == Some(&next) {
        tracing::debug!("status already current in the API server");
        return Ok(());
    }
    tracing::debug!(phase = ?next.phase, conditions = ?next.conditions.iter().map(|c| (&c.type_, &c.status, &c.message)).collect::<Vec<_>>(), "status changes");
    let patch = json!({
        "apiVersion": C::Resource::api_version(&()),
        "kind": C::Resource::kind(&()),
        "status": next,
    });
    ctx.metrics.write();
    api.patch_status(&resource.name_any(), &PatchParams::apply(&ctx.field_manager).force(), &Patch::Apply(&patch)).await?;
    let was_degraded = current.and_then(|s| s.phase) == Some(kubeflow_crds::component::ComponentPhase::Degraded);
    match (invalid, next.phase) {
        (Some(invalid), _) => ctx.event(resource, EventType::Warning, "InvalidSpec", invalid.to_string()).await,
        (None, Some(kubeflow_crds::component::ComponentPhase::Ready)) if current.and_then(|s| s.installed_version.as_ref()) != next.installed_version.as_ref() || was_degraded => {
            ctx.event(resource, EventType::Normal, "Installed", format!("version {} is ready", resource.core().version)).await
        }
        _ => {}
    }
    Ok(())
}

fn jiff_now() -> k8s_openapi::jiff::Timestamp {
    k8s_openapi::jiff::Timestamp::now()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_selector_that_drops_a_label_is_a_change_of_an_immutable_field() {
        let info = kinds::lookup("apps/v1", "Deployment").unwrap();
        let live = json!({"spec": {"selector": {"matchLabels": {"app": "ui", "app.kubernetes.io/name": "kfp"}}}});
        let narrower = json!({"spec": {"selector": {"matchLabels": {"app": "ui"}}}});
        assert_eq!(immutable_field_changed(&narrower, &live, info), Some("spec.selector"));
        assert_eq!(immutable_field_changed(&live, &live, info), None);
    }

    #[test]
    fn claim_templates_compare_ignoring_server_defaults() {
        let info = kinds::lookup("apps/v1", "StatefulSet").unwrap();
        let desired = json!({"spec": {"serviceName": "s", "volumeClaimTemplates": [{"metadata": {"name": "data"}, "spec": {"accessModes": ["ReadWriteOnce"]}}]}});
        let live = json!({"spec": {"serviceName": "s", "volumeClaimTemplates": [{"metadata": {"name": "data"}, "spec": {"accessModes": ["ReadWriteOnce"], "volumeMode": "Filesystem"}, "status": {"phase": "Pending"}}]}});
        assert_eq!(immutable_field_changed(&desired, &live, info), None);
        let renamed = json!({"spec": {"serviceName": "t"}});
        assert_eq!(immutable_field_changed(&renamed, &live, info), Some("spec.serviceName"));
    }
}
