//! The KfUpgrade driver: validate; plan (the KfDef is annotated with the targets, the KfDef driver
//! publishes each component's target spec as a preview, and the component operators report what
//! applying it would change — shown in status with the release notes' manual steps, nothing
//! written); wait for `spec.approved` when approval is Manual; then move one component at a time
//! by pinning its version on the KfDef (the KfDef driver publishes it), wait until the KfDef
//! reports the component Ready at that version (health gate with timeout), and on failure roll
//! the moved components back in reverse order. All progress lives in the KfUpgrade's status and the KfDef's pins, so a
//! restarted meta-operator resumes where it stopped. A finished upgrade leaves the pins and
//! `spec.version` to the user (see [`crate::plan::pinned_drift`]).
//!
//! Waiting is done by watches: the KfUpgrade controller also watches KfDefs (component status
//! reaches the KfDef over NATS) and a running step is requeued only for its health deadline.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::core::DeserializeGuard;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Api, Resource, ResourceExt};
use kubeflow_crds::ConditionStatus::{False, True};
use kubeflow_crds::bus::StatusReport;
use kubeflow_crds::component::ComponentKind;
use kubeflow_crds::kfdef::{KfDef, KfDefPhase, Repo};
use kubeflow_crds::kfupgrade::{Approval, KfUpgrade, KfUpgradeStatus, StepFailure, StepPhase, StepPlan, UpgradePhase, UpgradeStep};
use serde_json::json;
use tracing::{info, instrument, warn};

use crate::controller::{Context, Error, FIELD_MANAGER, merge_params};
use crate::plan::{self, PINNED_BY_ANNOTATION, PINS_ANNOTATION, PREVIEW_ANNOTATION, PlanError, PreviewTargets, REPOS_ANNOTATION};
use crate::{release_notes, upgrade};

/// Annotation on a KfDef naming the KfUpgrade that is moving it; at most one at a time.
pub const LOCK_ANNOTATION: &str = "kfupgrade.apps.kubeflow.org/in-progress";

/// Why a KfUpgrade reconcile failed, with the object it failed on.
#[derive(Debug, thiserror::Error)]
pub enum UpgradeError {
    #[error("cannot read KfDef {kfdef}: {source}")]
    ReadKfDef { kfdef: String, source: kube::Error },
    #[error("cannot read KfUpgrade {kfupgrade}: {source}")]
    ReadKfUpgrade { kfupgrade: String, source: kube::Error },
    #[error("cannot {action} KfDef {kfdef}: {source}")]
    WriteKfDef { kfdef: String, action: &'static str, source: kube::Error },
    #[error("cannot write the status of KfUpgrade {kfupgrade}: {source}")]
    Status { kfupgrade: String, source: kube::Error },
    #[error("KfDef {kfdef}: {source}")]
    Pins { kfdef: String, source: PlanError },
}

/// The metrics' kinds of a fleet upgrade's waves (`<upgrade>/<wave>`) and of each cluster in them
/// (`<upgrade>/<wave>/<cluster>`), their phases as phase.
pub const WAVE_KIND: &str = "KfUpgradeWave";
pub const WAVE_CLUSTER_KIND: &str = "KfUpgradeWaveCluster";

/// The phase of each wave of `status` and of each cluster in it, named as [`WAVE_KIND`] and
/// [`WAVE_CLUSTER_KIND`] say.
pub fn wave_phases(upgrade: &str, status: &KfUpgradeStatus) -> (Vec<(String, String)>, Vec<(String, String)>) {
    let waves = status.waves.iter().map(|w| (format!("{upgrade}/{}", w.name), format!("{:?}", w.phase))).collect();
    let clusters = status.waves.iter().flat_map(|w| w.clusters.iter().map(move |c| (format!("{upgrade}/{}/{}", w.name, c.name), format!("{:?}", c.phase)))).collect();
    (waves, clusters)
}

/// Every series of KfUpgrade `(namespace, name)`, its waves' included, goes: it is deleted.
pub fn forget_upgrade(metrics: &operator_runtime::metrics::Metrics, namespace: &str, name: &str) {
    metrics.forget("KfUpgrade", namespace, name);
    metrics.set_phases(WAVE_KIND, namespace, &format!("{name}/"), &[]);
    metrics.set_phases(WAVE_CLUSTER_KIND, namespace, &format!("{name}/"), &[]);
}

/// When the phase `status` is in must have ended (Unix seconds), by the timeouts this controller
/// acts on: planning and each step take `healthTimeoutSeconds`, a step's rollback twice that.
/// `None` for phases that wait on a person (approval) or have ended, and for waves (per cluster).
pub fn deadline(spec: &kubeflow_crds::kfupgrade::KfUpgradeSpec, status: &KfUpgradeStatus) -> Option<f64> {
    let after = |start: &Option<Time>, seconds: i64| start.as_ref().map(|t| t.0.as_second() as f64 + seconds as f64);
    if !spec.waves.is_empty() {
        return None;
    }
    let timeout = spec.health_timeout_seconds;
    match status.phase.unwrap_or_default() {
        UpgradePhase::Planning => after(&status.start_time, timeout),
        UpgradePhase::Upgrading => status.steps.iter().find(|s| s.phase == StepPhase::Upgrading).and_then(|s| after(&s.start_time, timeout)),
        UpgradePhase::RollingBack => status.steps.iter().find(|s| s.phase == StepPhase::RollingBack).and_then(|s| after(&s.start_time, 2 * timeout)),
        _ => None,
    }
}

pub(crate) fn now() -> Time {
    Time(k8s_openapi::jiff::Timestamp::now())
}

/// Time left until `timeout_seconds` after `start` (zero once passed).
pub(crate) fn remaining(start: &Option<Time>, timeout_seconds: i64) -> Duration {
    let elapsed = start.as_ref().map_or(0, |t| k8s_openapi::jiff::Timestamp::now().as_second() - t.0.as_second());
    Duration::from_secs((timeout_seconds - elapsed).max(0) as u64)
}

/// The unfinished KfUpgrades in `store` that move KfDef `namespace`/`name`: a change of the KfDef
/// (its status carries the components' health) or a report of one of its components (a plan) is
/// a change for them.
pub fn upgrades_of(store: &Store<DeserializeGuard<KfUpgrade>>, namespace: &str, name: &str) -> Vec<ObjectRef<DeserializeGuard<KfUpgrade>>> {
    store
        .state()
        .iter()
        .filter(|guard| {
            guard.0.as_ref().is_ok_and(|u| {
                u.namespace().as_deref() == Some(namespace) && u.spec.current_kf_def.name == name && !u.status.as_ref().and_then(|s| s.phase).is_some_and(is_finished)
            })
        })
        .map(|guard| ObjectRef::from_obj(guard.as_ref()))
        .collect()
}

/// Entry point of the KfUpgrade controller. A KfUpgrade the types cannot decode is reported (log
/// and Warning Event) and skipped until it changes; the watch and every other KfUpgrade carry on.
#[instrument(skip_all, fields(kfupgrade = %guard.name_any(), namespace = guard.namespace().unwrap_or_default()))]
pub async fn reconcile(guard: Arc<DeserializeGuard<KfUpgrade>>, ctx: Arc<Context>) -> Result<Action, Error> {
    match &guard.0 {
        Ok(up) => reconcile_upgrade(Arc::new(up.clone()), ctx).await,
        Err(invalid) => {
            operator_runtime::invalid::report::<KfUpgrade>(&ctx.recorder, invalid).await;
            ctx.metrics.error("invalid_object");
            Ok(Action::await_change())
        }
    }
}

async fn reconcile_upgrade(up: Arc<KfUpgrade>, ctx: Arc<Context>) -> Result<Action, Error> {
    let namespace = up.namespace().unwrap_or_default();
    let kfdefs: Api<KfDef> = Api::namespaced(ctx.client.clone(), &namespace);
    let mut status = up.status.clone().unwrap_or_default();
    let phase = status.phase.unwrap_or_default();
    let action = match phase {
        _ if !up.spec.waves.is_empty() => crate::wave_controller::reconcile(&up, &mut status, &kfdefs, &ctx).await?,
        UpgradePhase::Pending | UpgradePhase::Validating => validate(&up, &mut status, &kfdefs, &ctx).await?,
        UpgradePhase::Planning => planning(&up, &mut status, &kfdefs, &ctx).await?,
        UpgradePhase::AwaitingApproval => awaiting_approval(&up, &mut status, &kfdefs, &ctx).await?,
        UpgradePhase::Upgrading => advance(&up, &mut status, &kfdefs, &ctx).await?,
        UpgradePhase::RollingBack => roll_back(&up, &mut status, &kfdefs, &ctx).await?,
        UpgradePhase::Succeeded | UpgradePhase::Failed | UpgradePhase::RolledBack => return Ok(Action::await_change()),
    };
    status.observed_generation = up.meta().generation;
    ctx.metrics.set_phase("KfUpgrade", &namespace, &up.name_any(), Some(&format!("{:?}", status.phase.unwrap_or_default())));
    ctx.metrics.set_deadline("KfUpgrade", &namespace, &up.name_any(), deadline(&up.spec, &status));
    let (waves, clusters) = wave_phases(&up.name_any(), &status);
    ctx.metrics.set_phases(WAVE_KIND, &namespace, &format!("{}/", up.name_any()), &waves);
    ctx.metrics.set_phases(WAVE_CLUSTER_KIND, &namespace, &format!("{}/", up.name_any()), &clusters);
    if up.status.as_ref() != Some(&status) {
        let api: Api<KfUpgrade> = Api::namespaced(ctx.client.clone(), &namespace);
        let patch = json!({"apiVersion": "kfupgrade.apps.kubeflow.org/v1alpha1", "kind": "KfUpgrade", "status": status});
        api.patch_status(&up.name_any(), &PatchParams::apply(FIELD_MANAGER).force(), &Patch::Apply(&patch))
            .await
            .map_err(|source| UpgradeError::Status { kfupgrade: format!("{namespace}/{}", up.name_any()), source })?;
    }
    ctx.backoffs.reset(&(namespace, up.name_any()));
    Ok(action)
}

pub(crate) async fn event(ctx: &Context, up: &KfUpgrade, type_: EventType, reason: &str, note: String) {
    info!(reason, %note, "upgrade event");
    let event = operator_runtime::event(type_, reason, note, "Upgrade");
    if let Err(e) = ctx.recorder.publish(&event, &up.object_ref(&())).await {
        warn!(error = %e, reason, "cannot publish event");
    }
}

pub(crate) fn condition(status: &mut KfUpgradeStatus, type_: &str, ok: bool, reason: &str, message: &str, generation: Option<i64>) {
    operator_runtime::conditions::set_condition(&mut status.conditions, type_, if ok { True } else { False }, reason, message, generation, &now());
}

pub(crate) async fn refuse(up: &KfUpgrade, status: &mut KfUpgradeStatus, ctx: &Context, message: String) -> Action {
    status.phase = Some(UpgradePhase::Failed);
    status.completion_time = Some(now());
    condition(status, "Validated", false, "Refused", &message, up.meta().generation);
    event(ctx, up, EventType::Warning, "Refused", message).await;
    Action::await_change()
}

fn kfdef_name(kfdefs: &Api<KfDef>, name: &str) -> String {
    format!("{}/{name}", kfdefs.namespace().unwrap_or_default())
}

pub(crate) async fn get_kfdef(kfdefs: &Api<KfDef>, name: &str) -> Result<Option<KfDef>, UpgradeError> {
    kfdefs.get_opt(name).await.map_err(|source| UpgradeError::ReadKfDef { kfdef: kfdef_name(kfdefs, name), source })
}

pub(crate) async fn patch_kfdef(kfdefs: &Api<KfDef>, kfdef: &KfDef, action: &'static str, patch: serde_json::Value) -> Result<(), UpgradeError> {
    kfdefs
        .patch(&kfdef.name_any(), &merge_params(), &Patch::Merge(&patch))
        .await
        .map(|_| ())
        .map_err(|source| UpgradeError::WriteKfDef { kfdef: kfdef_name(kfdefs, &kfdef.name_any()), action, source })
}

/// Checks everything before anything changes; refusals end the upgrade as Failed.
async fn validate(up: &KfUpgrade, status: &mut KfUpgradeStatus, kfdefs: &Api<KfDef>, ctx: &Context) -> Result<Action, UpgradeError> {
    let spec = &up.spec;
    let Some(kfdef) = get_kfdef(kfdefs, &spec.current_kf_def.name).await? else {
        return Ok(refuse(up, status, ctx, format!("spec.currentKfDef.name: KfDef {:?} not found in this namespace", spec.current_kf_def.name)).await);
    };
    if let Some(refusal) = mismatch(up, &kfdef) {
        return Ok(refuse(up, status, ctx, refusal).await);
    }
    if kfdef.spec.placement.is_some() {
        let message = format!("spec.waves: KfDef {} is placed on fleet clusters (spec.placement), which move in waves: list them (one wave with clusterSelector: {{}} moves every cluster at once)", kfdef.name_any());
        return Ok(refuse(up, status, ctx, message).await);
    }
    if let Some(refusal) = held_by_another(up, &kfdef, ctx).await? {
        return Ok(refuse(up, status, ctx, refusal).await);
    }
    let phase = kfdef.status.as_ref().and_then(|s| s.phase);
    if phase != Some(KfDefPhase::Available) {
        return Ok(refuse(up, status, ctx, format!("KfDef {} is {:?}, not Available; upgrade a healthy deployment", kfdef.name_any(), phase.unwrap_or_default())).await);
    }
    let catalog = ctx.state.catalog.read().await.clone();
    let current = match plan::plan(&kfdef, ctx.platform, &catalog).and_then(|p| upgrade::running(&p, &kfdef)) {
        Ok(current) => current,
        Err(e) => return Ok(refuse(up, status, ctx, e.to_string()).await),
    };
    let steps = match upgrade::steps(spec, &current, &catalog) {
        Ok(steps) => steps,
        Err(refusal) => return Ok(refuse(up, status, ctx, refusal.to_string()).await),
    };
    if !take(&kfdef, kfdefs, up).await? {
        return Ok(Action::requeue(Duration::from_millis(100)));
    }
    let moves: Vec<String> = steps.iter().map(|s| format!("{} {} → {}", s.component, s.from_version, s.to_version)).collect();
    ask_for_plan(&kfdef, kfdefs, &steps).await?;
    status.steps = steps;
    status.phase = Some(UpgradePhase::Planning);
    status.start_time = Some(now());
    condition(status, "Validated", true, "Validated", &moves.join(", "), up.meta().generation);
    condition(status, "Planned", false, "Planning", "the component operators are planning each step; nothing is written until it is done", up.meta().generation);
    event(ctx, up, EventType::Normal, "Validated", moves.join(", ")).await;
    // The status write triggers the next reconcile.
    Ok(Action::await_change())
}

/// Why `up` does not fit `kfdef` (names and versions), if it does not.
pub(crate) fn mismatch(up: &KfUpgrade, kfdef: &KfDef) -> Option<String> {
    let spec = &up.spec;
    if let (Some(want), Some(have)) = (&spec.current_kf_def.version, &kfdef.spec.version) {
        if want != have {
            return Some(format!("spec.currentKfDef.version: {want} given, but KfDef {} runs {have}", kfdef.name_any()));
        }
    }
    if spec.new_kf_def.name != spec.current_kf_def.name {
        return Some(format!("spec.newKfDef.name: upgrades move KfDef {:?} in place; set newKfDef.name to it (got {:?})", spec.current_kf_def.name, spec.new_kf_def.name));
    }
    None
}

/// Why `up` may not move `kfdef`: another unfinished KfUpgrade holds it.
pub(crate) async fn held_by_another(up: &KfUpgrade, kfdef: &KfDef, ctx: &Context) -> Result<Option<String>, UpgradeError> {
    let Some(holder) = lock_holder(kfdef).filter(|holder| *holder != up.name_any()) else { return Ok(None) };
    let api: Api<KfUpgrade> = Api::namespaced(ctx.client.clone(), &up.namespace().unwrap_or_default());
    let other = api.get_opt(&holder).await.map_err(|source| UpgradeError::ReadKfUpgrade { kfupgrade: holder.clone(), source })?;
    Ok(other
        .is_some_and(|other| !other.status.and_then(|s| s.phase).is_some_and(is_finished))
        .then(|| format!("KfUpgrade {holder} is already upgrading KfDef {}; one upgrade at a time", kfdef.name_any())))
}

/// Takes `kfdef` for `up` (the lock annotation), conditional on its resourceVersion: of two
/// upgrades validated at the same moment only one takes it (true); the other (false) validates
/// again and is refused.
pub(crate) async fn take(kfdef: &KfDef, kfdefs: &Api<KfDef>, up: &KfUpgrade) -> Result<bool, UpgradeError> {
    if lock_holder(kfdef).as_deref() == Some(up.name_any().as_str()) {
        return Ok(true);
    }
    let patch = json!({"metadata": {"resourceVersion": kfdef.resource_version(), "annotations": {LOCK_ANNOTATION: up.name_any()}}});
    match patch_kfdef(kfdefs, kfdef, "take", patch).await {
        Err(UpgradeError::WriteKfDef { source: kube::Error::Api(e), .. }) if e.code == 409 => Ok(false),
        other => other.map(|()| true),
    }
}

/// Annotates the KfDef with where `steps` move it: the KfDef driver publishes the previews.
async fn ask_for_plan(kfdef: &KfDef, kfdefs: &Api<KfDef>, steps: &[UpgradeStep]) -> Result<(), UpgradeError> {
    let targets = PreviewTargets {
        components: steps.iter().map(|s| (s.component.name().to_string(), s.to_version.clone())).collect(),
        repos: plan::ComponentRepos(steps.iter().filter(|s| !s.to_repos.is_empty()).map(|s| (s.component.name().to_string(), s.to_repos.clone())).collect()),
    };
    let preview = serde_json::to_string(&targets).expect("targets serialise");
    patch_kfdef(kfdefs, kfdef, "ask for the plan of", json!({"metadata": {"annotations": {PREVIEW_ANNOTATION: preview}}})).await
}

/// Collects each step's plan from its component operator's report (on the preview the KfDef
/// driver published); all in: shows them, and starts, waits for approval, or refuses a plan that
/// cannot be applied. Nothing has been written to the components yet.
async fn planning(up: &KfUpgrade, status: &mut KfUpgradeStatus, kfdefs: &Api<KfDef>, ctx: &Context) -> Result<Action, UpgradeError> {
    let Some(kfdef) = get_kfdef(kfdefs, &up.spec.current_kf_def.name).await? else {
        return Ok(end_early(up, status, ctx, "KfDefDeleted", "the KfDef was deleted before the upgrade started".into()).await);
    };
    let catalog = ctx.state.catalog.read().await.clone();
    let preview = match plan::preview_plan(&kfdef, ctx.platform, &catalog) {
        Ok(Some(preview)) => preview,
        // Removed (by hand, or by a start whose status write was lost): asked for again.
        Ok(None) => {
            ask_for_plan(&kfdef, kfdefs, &status.steps).await?;
            return Ok(Action::await_change());
        }
        Err(e) => return end_planning(up, status, &kfdef, kfdefs, ctx, "PlanFailed", e.to_string()).await,
    };
    let reports = ctx.state.reports.read().await.get(&(kfdef.namespace().unwrap_or_default(), kfdef.name_any())).cloned().unwrap_or_default();
    let (plans, waiting) = step_plans(status.steps.iter().map(|s| (s.component, s.from_version.as_str(), s.to_version.as_str())), &preview, &reports);
    if !waiting.is_empty() {
        let left = remaining(&status.start_time, up.spec.health_timeout_seconds);
        if left.is_zero() {
            let reason = format!("no plan from {} within {} s; nothing was written", waiting.join(", "), up.spec.health_timeout_seconds);
            return end_planning(up, status, &kfdef, kfdefs, ctx, "NoPlan", reason).await;
        }
        // Reports arrive as triggers; only the deadline needs a timer.
        return Ok(Action::requeue(left + Duration::from_secs(1)));
    }
    status.plan = plans;
    let from = up.spec.current_kf_def.version.clone().or(kfdef.spec.version.clone()).unwrap_or_default();
    status.manual_steps = release_notes::manual_steps(&from, up.spec.new_kf_def.version.as_deref().unwrap_or_default());
    let failed: Vec<String> = status.plan.iter().filter(|p| !p.changes.failed.is_empty()).map(|p| format!("{} {}: {}", p.component, p.to_version, p.changes.failed.join("; "))).collect();
    if !failed.is_empty() {
        let reason = format!("the plan shows the new versions cannot be applied, so nothing was written: {}", failed.join(" | "));
        return end_planning(up, status, &kfdef, kfdefs, ctx, "PlanFailed", reason).await;
    }
    let summary: Vec<String> = status.plan.iter().map(|p| format!("{} {} → {}: {}", p.component, p.from_version, p.to_version, p.summary)).collect();
    condition(status, "Planned", true, "Planned", &summary.join("; "), up.meta().generation);
    event(ctx, up, EventType::Normal, "Planned", summary.join("; ")).await;
    if up.spec.approval == Approval::Manual && !up.spec.approved {
        status.phase = Some(UpgradePhase::AwaitingApproval);
        let note = format!("read status.plan and status.manualSteps ({} steps), then set spec.approved: true to start", status.manual_steps.len());
        event(ctx, up, EventType::Normal, "AwaitingApproval", note).await;
        return Ok(Action::await_change());
    }
    start(status)
}

/// Each step's plan from its component's report, when the report is about the step's preview spec
/// (a plan of an earlier preview is not this one); and the operators still to report. A step is
/// (component, from version, to version).
pub fn step_plans<'a>(steps: impl IntoIterator<Item = (ComponentKind, &'a str, &'a str)>, preview: &plan::Plan, reports: &BTreeMap<ComponentKind, StatusReport>) -> (Vec<StepPlan>, Vec<String>) {
    let mut plans = Vec::new();
    let mut waiting = Vec::new();
    for (component, from_version, to_version) in steps {
        let hash = preview.components.get(&component).map(|c| c.spec_hash.as_str());
        match reports.get(&component).and_then(|r| r.plan.as_ref()).filter(|p| Some(p.spec_hash.as_str()) == hash) {
            Some(changes) => plans.push(StepPlan {
                component,
                from_version: from_version.to_string(),
                to_version: to_version.to_string(),
                summary: changes.totals(),
                changes: changes.clone(),
            }),
            None => waiting.push(format!("{component}-operator")),
        }
    }
    (plans, waiting)
}

/// A Manual upgrade whose plan is shown: starts once `spec.approved` is set.
async fn awaiting_approval(up: &KfUpgrade, status: &mut KfUpgradeStatus, kfdefs: &Api<KfDef>, ctx: &Context) -> Result<Action, UpgradeError> {
    let Some(kfdef) = get_kfdef(kfdefs, &up.spec.current_kf_def.name).await? else {
        return Ok(end_early(up, status, ctx, "KfDefDeleted", "the KfDef was deleted before the upgrade started".into()).await);
    };
    // The plan shown must still be what would happen: the KfDef may have changed meanwhile.
    let catalog = ctx.state.catalog.read().await.clone();
    let stale = match plan::preview_plan(&kfdef, ctx.platform, &catalog) {
        Ok(Some(preview)) => status.plan.iter().any(|p| preview.components.get(&p.component).map(|c| c.spec_hash.as_str()) != Some(p.changes.spec_hash.as_str())),
        Ok(None) => {
            ask_for_plan(&kfdef, kfdefs, &status.steps).await?;
            return Ok(Action::await_change());
        }
        Err(_) => true,
    };
    if stale {
        let reason = "the KfDef changed after the plan was shown, so it no longer says what would happen; nothing was written: create a new KfUpgrade to see the new plan".to_string();
        return end_planning(up, status, &kfdef, kfdefs, ctx, "PlanOutdated", reason).await;
    }
    if !up.spec.approved {
        return Ok(Action::await_change());
    }
    let phase = kfdef.status.as_ref().and_then(|s| s.phase);
    if phase != Some(KfDefPhase::Available) {
        let reason = format!("KfDef {} is {:?}, not Available, at approval; nothing was written: upgrade a healthy deployment", kfdef.name_any(), phase.unwrap_or_default());
        return end_planning(up, status, &kfdef, kfdefs, ctx, "NotAvailable", reason).await;
    }
    event(ctx, up, EventType::Normal, "Approved", "spec.approved is set; starting".into()).await;
    start(status)
}

/// Moves to the first step; the first step withdraws the preview (so a lost status write leaves
/// the upgrade in planning with its preview, not stuck without one).
fn start(status: &mut KfUpgradeStatus) -> Result<Action, UpgradeError> {
    status.phase = Some(UpgradePhase::Upgrading);
    Ok(Action::await_change())
}

/// The upgrade ends before its first write: the KfDef is released, its preview withdrawn.
async fn end_planning(up: &KfUpgrade, status: &mut KfUpgradeStatus, kfdef: &KfDef, kfdefs: &Api<KfDef>, ctx: &Context, reason: &str, message: String) -> Result<Action, UpgradeError> {
    unlock(kfdef, kfdefs, up).await?;
    Ok(end_early(up, status, ctx, reason, message).await)
}

async fn end_early(up: &KfUpgrade, status: &mut KfUpgradeStatus, ctx: &Context, reason: &str, message: String) -> Action {
    status.phase = Some(UpgradePhase::Failed);
    status.completion_time = Some(now());
    condition(status, "Planned", false, reason, &message, up.meta().generation);
    event(ctx, up, EventType::Warning, reason, message).await;
    Action::await_change()
}

pub(crate) fn lock_holder(kfdef: &KfDef) -> Option<String> {
    kfdef.annotations().get(LOCK_ANNOTATION).cloned()
}

pub(crate) fn is_finished(phase: UpgradePhase) -> bool {
    matches!(phase, UpgradePhase::Succeeded | UpgradePhase::Failed | UpgradePhase::RolledBack)
}

/// Releases the KfDef when this upgrade holds it (an upgrade that ended), and any preview left.
pub(crate) async fn unlock(kfdef: &KfDef, kfdefs: &Api<KfDef>, up: &KfUpgrade) -> Result<(), UpgradeError> {
    if lock_holder(kfdef).as_deref() != Some(up.name_any().as_str()) {
        return Ok(());
    }
    let previews = json!({LOCK_ANNOTATION: null, PREVIEW_ANNOTATION: null, plan::CLUSTER_PREVIEWS_ANNOTATION: null});
    patch_kfdef(kfdefs, kfdef, "release", json!({"metadata": {"annotations": previews}})).await
}

/// Pins `component` to `version` and to `repos` (empty: `spec.repos`) on the KfDef, only when
/// that differs, naming this upgrade.
async fn pin(kfdef: &KfDef, kfdefs: &Api<KfDef>, up: &KfUpgrade, component: ComponentKind, version: &str, repos: &[Repo]) -> Result<(), UpgradeError> {
    let pins_error = |source| UpgradeError::Pins { kfdef: kfdef_name(kfdefs, &kfdef.name_any()), source };
    let mut pins = plan::pins(kfdef).map_err(pins_error)?;
    let mut pinned_repos = plan::pinned_repos(kfdef).map_err(pins_error)?;
    let repos_move = pinned_repos.get(&component).map_or(&[][..], Vec::as_slice) != repos;
    if pins.get(&component).map(String::as_str) == Some(version) && !repos_move {
        return Ok(());
    }
    pins.insert(component, version.to_string());
    let pins: BTreeMap<&str, &String> = pins.iter().map(|(c, v)| (c.name(), v)).collect();
    let mut annotations = json!({PINS_ANNOTATION: serde_json::to_string(&pins).expect("a map of strings"), PINNED_BY_ANNOTATION: up.name_any()});
    if repos_move {
        pinned_repos.insert(component, repos.to_vec());
        annotations[REPOS_ANNOTATION] = json!(plan::repos_annotation(&pinned_repos));
    }
    patch_kfdef(kfdefs, kfdef, "pin a component version on", json!({"metadata": {"annotations": annotations}})).await
}

/// Whether the KfDef reports `component` Ready at `version` on the spec its pins make now (a
/// status written before a pin moved the packages is about the old spec, whatever its version
/// says), and its message.
async fn health(kfdef: &KfDef, ctx: &Context, component: ComponentKind, version: &str) -> (bool, String) {
    let catalog = ctx.state.catalog.read().await.clone();
    let wanted = plan::plan(kfdef, ctx.platform, &catalog).ok().and_then(|p| p.components.get(&component).map(|c| c.spec_hash.clone()));
    ready_on(kfdef, component, version, wanted.as_deref())
}

fn ready_on(kfdef: &KfDef, component: ComponentKind, version: &str, spec_hash: Option<&str>) -> (bool, String) {
    let summary = kfdef.status.as_ref().and_then(|s| s.components.get(component.name()));
    let ready = summary.is_some_and(|s| s.ready && s.version.as_deref() == Some(version) && Some(s.spec_hash.as_str()) == spec_hash);
    (ready, summary.map(|s| s.message.clone()).unwrap_or_default())
}

async fn advance(up: &KfUpgrade, status: &mut KfUpgradeStatus, kfdefs: &Api<KfDef>, ctx: &Context) -> Result<Action, UpgradeError> {
    let Some(kfdef) = get_kfdef(kfdefs, &up.spec.current_kf_def.name).await? else {
        status.phase = Some(UpgradePhase::Failed);
        condition(status, "Succeeded", false, "KfDefDeleted", "the KfDef was deleted during the upgrade", up.meta().generation);
        return Ok(Action::await_change());
    };
    let Some(index) = status.steps.iter().position(|s| s.phase != StepPhase::Succeeded) else {
        return finish(up, status, &kfdef, kfdefs, ctx).await;
    };
    let step = status.steps[index].clone();
    let timeout = up.spec.health_timeout_seconds;
    if kfdef.annotations().contains_key(PREVIEW_ANNOTATION) {
        patch_kfdef(kfdefs, &kfdef, "end the preview on", json!({"metadata": {"annotations": {PREVIEW_ANNOTATION: null}}})).await?;
        return Ok(Action::await_change());
    }
    if step.phase == StepPhase::Pending {
        pin(&kfdef, kfdefs, up, step.component, &step.to_version, &step.to_repos).await?;
        let s = &mut status.steps[index];
        s.phase = StepPhase::Upgrading;
        s.start_time = Some(now());
        event(ctx, up, EventType::Normal, "StepStarted", format!("{} {} → {}", step.component, step.from_version, step.to_version)).await;
        return Ok(Action::requeue(Duration::from_secs(timeout as u64 + 1)));
    }
    let (ready, message) = health(&kfdef, ctx, step.component, &step.to_version).await;
    if ready {
        let s = &mut status.steps[index];
        s.phase = StepPhase::Succeeded;
        s.end_time = Some(now());
        s.message = format!("Ready at {}", step.to_version);
        event(ctx, up, EventType::Normal, "StepSucceeded", format!("{} is Ready at {}", step.component, step.to_version)).await;
        return Ok(Action::await_change());
    }
    let left = remaining(&step.start_time, timeout);
    if !left.is_zero() {
        // The KfDef watch brings the component's health; only the deadline needs a timer.
        return Ok(Action::requeue(left + Duration::from_secs(1)));
    }
    let reason = format!("{} did not become Ready at {} within {timeout} s: {message}", step.component, step.to_version);
    let s = &mut status.steps[index];
    s.phase = StepPhase::Failed;
    s.failure = Some(StepFailure::HealthTimeout);
    s.end_time = Some(now());
    s.message = reason.clone();
    event(ctx, up, EventType::Warning, "StepFailed", reason.clone()).await;
    if up.spec.rollback_on_failure {
        status.phase = Some(UpgradePhase::RollingBack);
        condition(status, "Succeeded", false, "RollingBack", &reason, up.meta().generation);
    } else {
        unlock(&kfdef, kfdefs, up).await?;
        status.phase = Some(UpgradePhase::Failed);
        status.completion_time = Some(now());
        condition(status, "Succeeded", false, "StepFailed", &reason, up.meta().generation);
    }
    Ok(Action::await_change())
}

/// Every step succeeded: release the KfDef. The pins stay: `spec.version` is the user's (or
/// their GitOps tool's), and the KfDef's status says which version it should name.
async fn finish(up: &KfUpgrade, status: &mut KfUpgradeStatus, kfdef: &KfDef, kfdefs: &Api<KfDef>, ctx: &Context) -> Result<Action, UpgradeError> {
    let done: Vec<String> = status.steps.iter().map(|s| format!("{} {}", s.component, s.to_version)).collect();
    end(up, status, kfdef, kfdefs, ctx, UpgradePhase::Succeeded, "Succeeded", done.join(", ")).await
}

/// Ends the upgrade in `phase` (condition `Succeeded` true only for Succeeded, with `reason` and
/// `message`, and an Event) and releases the KfDef.
pub(crate) async fn end(up: &KfUpgrade, status: &mut KfUpgradeStatus, kfdef: &KfDef, kfdefs: &Api<KfDef>, ctx: &Context, phase: UpgradePhase, reason: &str, message: String) -> Result<Action, UpgradeError> {
    unlock(kfdef, kfdefs, up).await?;
    let succeeded = phase == UpgradePhase::Succeeded;
    status.phase = Some(phase);
    status.completion_time = Some(now());
    condition(status, "Succeeded", succeeded, reason, &message, up.meta().generation);
    event(ctx, up, if succeeded { EventType::Normal } else { EventType::Warning }, reason, message).await;
    Ok(Action::await_change())
}

/// Moves every component this upgrade touched back to its previous version, last one first.
async fn roll_back(up: &KfUpgrade, status: &mut KfUpgradeStatus, kfdefs: &Api<KfDef>, ctx: &Context) -> Result<Action, UpgradeError> {
    let Some(kfdef) = get_kfdef(kfdefs, &up.spec.current_kf_def.name).await? else {
        status.phase = Some(UpgradePhase::Failed);
        return Ok(Action::await_change());
    };
    let touched = |s: &UpgradeStep| !matches!(s.phase, StepPhase::Pending | StepPhase::RolledBack);
    let Some(index) = status.steps.iter().rposition(touched) else {
        let reason = status.steps.iter().find(|s| s.failure.is_some()).map(|s| s.message.clone()).unwrap_or_default();
        unlock(&kfdef, kfdefs, up).await?;
        status.phase = Some(UpgradePhase::RolledBack);
        status.completion_time = Some(now());
        condition(status, "Succeeded", false, "RolledBack", &format!("rolled back: {reason}"), up.meta().generation);
        event(ctx, up, EventType::Warning, "RolledBack", reason).await;
        return Ok(Action::await_change());
    };
    let step = status.steps[index].clone();
    // A rollback may take as long as the upgrade and its failure together.
    let timeout = 2 * up.spec.health_timeout_seconds;
    if step.phase != StepPhase::RollingBack {
        pin(&kfdef, kfdefs, up, step.component, &step.from_version, &step.from_repos).await?;
        let s = &mut status.steps[index];
        s.phase = StepPhase::RollingBack;
        s.start_time = Some(now());
        event(ctx, up, EventType::Normal, "RollingBack", format!("{} back to {}", step.component, step.from_version)).await;
        return Ok(Action::requeue(Duration::from_secs(timeout as u64 + 1)));
    }
    let (ready, message) = health(&kfdef, ctx, step.component, &step.from_version).await;
    if ready {
        let s = &mut status.steps[index];
        s.phase = StepPhase::RolledBack;
        s.end_time = Some(now());
        if s.failure.is_none() {
            s.message = format!("rolled back to {}", step.from_version);
        }
        return Ok(Action::await_change());
    }
    let left = remaining(&step.start_time, timeout);
    if !left.is_zero() {
        return Ok(Action::requeue(left + Duration::from_secs(1)));
    }
    unlock(&kfdef, kfdefs, up).await?;
    status.phase = Some(UpgradePhase::Failed);
    status.completion_time = Some(now());
    let reason = format!("rollback of {} to {} did not become Ready: {message}", step.component, step.from_version);
    condition(status, "Succeeded", false, "RollbackFailed", &reason, up.meta().generation);
    event(ctx, up, EventType::Warning, "RollbackFailed", reason).await;
    Ok(Action::await_change())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::ComponentPlan;
    use kubeflow_crds::component::ChangePlan;

    fn step(component: ComponentKind, from: &str, to: &str) -> UpgradeStep {
        UpgradeStep {
            component,
            from_version: from.into(),
            to_version: to.into(),
            phase: StepPhase::Pending,
            start_time: None,
            end_time: None,
            message: String::new(),
            failure: None,
            from_repos: vec![],
            to_repos: vec![],
        }
    }

    fn report(plan_hash: Option<&str>) -> StatusReport {
        StatusReport { plan: plan_hash.map(|h| ChangePlan { spec_hash: h.into(), add: vec!["Deployment kubeflow/x".into()], ..Default::default() }), ..Default::default() }
    }

    /// A summary Ready at the step's version is no answer unless it is about the spec the pins
    /// make now: a step that moves packages at the same version would pass on the old status.
    #[test]
    fn a_step_is_ready_only_on_a_report_about_the_spec_it_pinned() {
        use kubeflow_crds::kfdef::{ComponentSummary, KfDefStatus};
        let mut kfdef: KfDef = serde_json::from_value(serde_json::json!({"apiVersion": "kfdef.apps.kubeflow.org/v1", "kind": "KfDef", "metadata": {"name": "kf"}, "spec": {}})).unwrap();
        let summary = ComponentSummary { ready: true, version: Some("v2.44.0".into()), spec_hash: "old".into(), ..Default::default() };
        kfdef.status = Some(KfDefStatus { components: [("dex".to_string(), summary)].into(), ..Default::default() });
        assert!(!ready_on(&kfdef, ComponentKind::Dex, "v2.44.0", Some("new")).0, "Ready on the spec before the pin");
        assert!(ready_on(&kfdef, ComponentKind::Dex, "v2.44.0", Some("old")).0);
        assert!(!ready_on(&kfdef, ComponentKind::Dex, "v2.41.1", Some("old")).0, "another version");
        assert!(!ready_on(&kfdef, ComponentKind::Dex, "v2.44.0", None).0, "no plan, no answer");
    }

    #[test]
    fn a_step_takes_only_the_plan_of_its_own_preview_and_names_the_operators_still_planning() {
        let target = |hash: &str| ComponentPlan { spec: serde_json::json!({}), spec_hash: hash.into(), version: String::new(), pinned: true, release_version: None };
        let preview = plan::Plan { components: [(ComponentKind::Katib, target("k2")), (ComponentKind::Dex, target("d2"))].into(), unresolved: BTreeMap::new(), applications: vec![] };
        let steps = [step(ComponentKind::Dex, "v2.41.1", "v2.44.0"), step(ComponentKind::Katib, "v0.18.0", "v0.19.0")];
        let steps = steps.iter().map(|s| (s.component, s.from_version.as_str(), s.to_version.as_str()));
        // Katib's report is about an earlier preview (another upgrade's): not this step's plan.
        let reports: BTreeMap<_, _> = [(ComponentKind::Dex, report(Some("d2"))), (ComponentKind::Katib, report(Some("k1")))].into();
        let (plans, waiting) = step_plans(steps.clone(), &preview, &reports);
        assert_eq!(plans.iter().map(|p| (p.component, p.to_version.as_str())).collect::<Vec<_>>(), [(ComponentKind::Dex, "v2.44.0")]);
        assert_eq!(plans[0].summary, "1 to add, 0 to change, 0 to prune, 0 kept, 0 unchanged, 0 left as they are (not made by this resource)");
        assert_eq!(waiting, ["katib-operator"]);
        let reports: BTreeMap<_, _> = [(ComponentKind::Dex, report(Some("d2"))), (ComponentKind::Katib, report(None))].into();
        assert_eq!(step_plans(steps.clone(), &preview, &reports).1, ["katib-operator"], "a report without a plan is no plan");
        let reports: BTreeMap<_, _> = [(ComponentKind::Dex, report(Some("d2"))), (ComponentKind::Katib, report(Some("k2")))].into();
        let (plans, waiting) = step_plans(steps.clone(), &preview, &reports);
        assert_eq!((plans.len(), waiting.len()), (2, 0));
    }

    /// The deadline the metrics show is the one this controller acts on: planning from the
    /// upgrade's start, a step from its own start, a rollback at twice the timeout; none while a
    /// person decides or once it ended.
    #[test]
    fn the_deadline_of_a_phase_is_the_timeout_this_controller_acts_on() {
        let spec: kubeflow_crds::kfupgrade::KfUpgradeSpec = serde_json::from_value(serde_json::json!({"currentKfDef": {"name": "kf"}, "newKfDef": {"name": "kf", "version": "v1.11.0"}, "healthTimeoutSeconds": 600})).unwrap();
        let at = |unix: i64| Some(Time(k8s_openapi::jiff::Timestamp::from_second(unix).unwrap()));
        let mut status = KfUpgradeStatus { phase: Some(UpgradePhase::Planning), start_time: at(1_000), ..Default::default() };
        assert_eq!(deadline(&spec, &status), Some(1_600.0));
        let mut done = step(ComponentKind::Istio, "1.26.1", "1.28.0");
        done.phase = StepPhase::Succeeded;
        done.start_time = at(2_000);
        let mut moving = step(ComponentKind::Dex, "v2.41.1", "v2.44.0");
        moving.phase = StepPhase::Upgrading;
        moving.start_time = at(3_000);
        status.steps = vec![done, moving];
        status.phase = Some(UpgradePhase::Upgrading);
        assert_eq!(deadline(&spec, &status), Some(3_600.0), "the moving step's, not the first step's");
        status.steps[1].phase = StepPhase::RollingBack;
        status.steps[1].start_time = at(4_000);
        status.phase = Some(UpgradePhase::RollingBack);
        assert_eq!(deadline(&spec, &status), Some(5_200.0));
        for phase in [UpgradePhase::AwaitingApproval, UpgradePhase::Succeeded, UpgradePhase::RolledBack, UpgradePhase::Failed] {
            status.phase = Some(phase);
            assert_eq!(deadline(&spec, &status), None, "{phase:?}");
        }
    }

    #[test]
    fn each_wave_and_each_of_its_clusters_has_its_phase() {
        use kubeflow_crds::kfupgrade::{ClusterUpgrade, ClusterUpgradePhase, WavePhase, WaveStatus};
        let cluster = |name: &str, phase: ClusterUpgradePhase| ClusterUpgrade { name: name.into(), phase, moves: vec![], target: Default::default(), previous: None, plan: vec![], start_time: None, end_time: None, message: String::new() };
        let status = KfUpgradeStatus {
            waves: vec![
                WaveStatus { name: "canary".into(), phase: WavePhase::Succeeded, clusters: vec![cluster("eu-1", ClusterUpgradePhase::Succeeded)] },
                WaveStatus { name: "rest".into(), phase: WavePhase::Upgrading, clusters: vec![cluster("eu-2", ClusterUpgradePhase::Upgrading), cluster("us-1", ClusterUpgradePhase::Waiting)] },
            ],
            ..Default::default()
        };
        let (waves, clusters) = wave_phases("to-1-11", &status);
        let pairs = |v: &[(String, String)]| v.iter().map(|(n, p)| format!("{n} {p}")).collect::<Vec<_>>();
        assert_eq!(pairs(&waves), ["to-1-11/canary Succeeded", "to-1-11/rest Upgrading"]);
        assert_eq!(pairs(&clusters), ["to-1-11/canary/eu-1 Succeeded", "to-1-11/rest/eu-2 Upgrading", "to-1-11/rest/us-1 Waiting"]);
    }
}
