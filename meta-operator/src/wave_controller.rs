//! The driver of a KfUpgrade with `spec.waves`: a KfDef placed on fleet clusters, moved one wave
//! of clusters after the other ([`crate::waves`] decides).
//!
//! - Validation plans every placed cluster against the releases its own operators announced
//!   (the same rules as on a single cluster, [`upgrade::steps`]) and shows each cluster's moves
//!   in `status.waves` before anything is written. A refusal names the cluster.
//! - Planning asks each moving cluster's operators what its moves would change, object by object
//!   ([`plan::CLUSTER_PREVIEWS_ANNOTATION`]), and shows their plans before the first wave.
//! - A wave moves a cluster by pinning its versions in the KfDef's
//!   [`plan::CLUSTER_PINS_ANNOTATION`]; the KfDef driver publishes the cluster's new desired state
//!   to that cluster alone. `spec.version` and the KfDef's own pins stay what the other clusters
//!   run, so a cluster not reached yet does not move.
//! - Health comes from the KfDef's per-cluster status (the KfUpgrade controller watches KfDefs);
//!   only deadlines need a timer. All progress is in the KfUpgrade's status and the annotation,
//!   so a restarted meta-operator resumes where it stopped.

use std::collections::BTreeMap;
use std::time::Duration;

use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::{Api, Resource, ResourceExt};
use kubeflow_crds::fleet_cluster::{ClusterState, FleetCluster};
use kubeflow_crds::kfdef::KfDef;
use kubeflow_crds::fleet::ClusterName;
use kubeflow_crds::kfupgrade::{ClusterPins, ClusterUpgrade, ClusterUpgradePhase, KfUpgrade, KfUpgradeStatus, StaleClusters, UpgradePhase, WavePhase, WaveStatus};
use serde_json::json;

use crate::controller::Context;
use crate::fleet::{Selected, select};
use crate::plan::{self, CLUSTER_PINS_ANNOTATION};
use crate::upgrade::{self, Refusal};
use crate::upgrade_controller::{self, UpgradeError, condition, end, event, get_kfdef, held_by_another, mismatch, now, patch_kfdef, refuse, take};
use crate::waves::{self, PinWrites, Verdict};

/// One reconcile of a KfUpgrade with waves.
pub async fn reconcile(up: &KfUpgrade, status: &mut KfUpgradeStatus, kfdefs: &Api<KfDef>, ctx: &Context) -> Result<Action, UpgradeError> {
    match status.phase.unwrap_or_default() {
        UpgradePhase::Pending | UpgradePhase::Validating => validate(up, status, kfdefs, ctx).await,
        UpgradePhase::Planning => plan_clusters(up, status, kfdefs, ctx).await,
        UpgradePhase::AwaitingApproval | UpgradePhase::Upgrading | UpgradePhase::RollingBack => roll_out(up, status, kfdefs, ctx).await,
        UpgradePhase::Succeeded | UpgradePhase::Failed | UpgradePhase::RolledBack => Ok(Action::await_change()),
    }
}

/// Checks the upgrade and plans every cluster before anything is written; refusals end it Failed.
async fn validate(up: &KfUpgrade, status: &mut KfUpgradeStatus, kfdefs: &Api<KfDef>, ctx: &Context) -> Result<Action, UpgradeError> {
    let spec = &up.spec;
    let Some(kfdef) = get_kfdef(kfdefs, &spec.current_kf_def.name).await? else {
        return Ok(refuse(up, status, ctx, format!("spec.currentKfDef.name: KfDef {:?} not found in this namespace", spec.current_kf_def.name)).await);
    };
    if let Some(refusal) = mismatch(up, &kfdef) {
        return Ok(refuse(up, status, ctx, refusal).await);
    }
    let Some(placement) = &kfdef.spec.placement else {
        let message = format!("spec.waves: KfDef {} is not placed on fleet clusters (spec.placement); without waves a KfUpgrade moves it on this cluster", kfdef.name_any());
        return Ok(refuse(up, status, ctx, message).await);
    };
    if let Some(refusal) = held_by_another(up, &kfdef, ctx).await? {
        return Ok(refuse(up, status, ctx, refusal).await);
    }
    let namespace = kfdef.namespace().unwrap_or_default();
    let registrations: Vec<FleetCluster> = ctx.clusters.state().iter().map(|c| (**c).clone()).collect();
    let selection = match select(&namespace, placement, &registrations) {
        Ok(selection) => selection,
        Err(invalid) => return Ok(refuse(up, status, ctx, invalid).await),
    };
    let clusters: Vec<_> = selection.into_iter().filter_map(|s| if let Selected::Use { cluster, platform } = s { Some((cluster, platform)) } else { None }).collect();
    if clusters.is_empty() {
        return Ok(refuse(up, status, ctx, format!("KfDef {} is placed on no registered cluster open to namespace {namespace}: nothing to upgrade", kfdef.name_any())).await);
    }
    let labelled: Vec<(String, BTreeMap<String, String>)> = clusters
        .iter()
        .map(|(cluster, _)| {
            let labels = registrations.iter().find(|r| r.name_any() == cluster.as_str()).map(|r| r.labels().clone()).unwrap_or_default();
            (cluster.to_string(), labels)
        })
        .collect();
    let assigned = match waves::assign(&spec.waves, &labelled) {
        Ok(assigned) => assigned,
        Err(refusal) => return Ok(refuse(up, status, ctx, refusal).await),
    };
    let pins = match plan::cluster_pins(&kfdef) {
        Ok(pins) => pins,
        Err(e) => return Ok(refuse(up, status, ctx, e.to_string()).await),
    };
    let mut planned: BTreeMap<String, ClusterUpgrade> = BTreeMap::new();
    for (cluster, platform) in &clusters {
        let name = cluster.to_string();
        let entry_state = kfdef.status.as_ref().and_then(|s| s.clusters.iter().find(|c| c.name == name)).map(|c| c.state);
        let stale = entry_state == Some(ClusterState::Stale);
        if !stale && entry_state != Some(ClusterState::Available) {
            let message = format!("cluster {name} is {}, not Available; upgrade healthy clusters", entry_state.map_or_else(|| "not reported yet".to_string(), |s| format!("{s:?}")));
            return Ok(refuse(up, status, ctx, message).await);
        }
        let observed = ctx.state.fleet.read().await.get(cluster).cloned().unwrap_or_default();
        let current = plan::for_cluster(&kfdef, &name).and_then(|view| upgrade::running(&plan::plan(&view, *platform, &observed.catalog)?, &view));
        let current = match current {
            Ok(found) => found,
            Err(e) => return Ok(refuse(up, status, ctx, format!("cluster {name}: {e}")).await),
        };
        let plan = match upgrade::steps(spec, &current, &observed.catalog) {
            Ok(steps) => waves::cluster_plan(&name, &steps, pins.get(&name).cloned()),
            Err(Refusal::NothingToDo) => waves::cluster_plan(&name, &[], pins.get(&name).cloned()),
            Err(refusal) if stale && spec.stale_clusters == StaleClusters::Skip => {
                let mut skipped = waves::cluster_plan(&name, &[], pins.get(&name).cloned());
                skipped.phase = ClusterUpgradePhase::Skipped;
                skipped.message = format!("not heard from, and cannot be planned (staleClusters: Skip): {refusal}");
                skipped
            }
            Err(refusal) => return Ok(refuse(up, status, ctx, format!("cluster {name}: {refusal}")).await),
        };
        planned.insert(name, plan);
    }
    if planned.values().all(|c| c.moves.is_empty()) {
        return Ok(refuse(up, status, ctx, Refusal::NothingToDo.to_string()).await);
    }
    if !take(&kfdef, kfdefs, up).await? {
        return Ok(Action::requeue(Duration::from_millis(100)));
    }
    status.waves = spec
        .waves
        .iter()
        .enumerate()
        .map(|(index, wave)| WaveStatus {
            name: wave.name.clone(),
            phase: WavePhase::Pending,
            clusters: planned.iter().filter(|(name, _)| assigned.get(*name) == Some(&index)).map(|(_, plan)| plan.clone()).collect(),
        })
        .collect();
    let summary: Vec<String> = status.waves.iter().map(|w| format!("wave {}: {}", w.name, w.clusters.iter().map(waves::describe).collect::<Vec<_>>().join("; "))).collect();
    write_previews(&kfdef, kfdefs, &status.waves).await?;
    status.phase = Some(UpgradePhase::Planning);
    status.start_time = Some(now());
    condition(status, "Validated", true, "Validated", &summary.join(" | "), up.meta().generation);
    event(ctx, up, EventType::Normal, "Validated", summary.join(" | ")).await;
    // The status write triggers the next reconcile.
    Ok(Action::await_change())
}

/// Collects each moving cluster's plan from its own operators' reports (on the previews the KfDef
/// driver published to it); all in: shows them in `status.waves` and starts the first wave, or
/// ends the upgrade when a plan shows a move cannot be applied. Nothing has moved yet. A cluster
/// not heard from is skipped under `staleClusters: Skip`, waited for under `Wait`.
async fn plan_clusters(up: &KfUpgrade, status: &mut KfUpgradeStatus, kfdefs: &Api<KfDef>, ctx: &Context) -> Result<Action, UpgradeError> {
    let Some(kfdef) = get_kfdef(kfdefs, &up.spec.current_kf_def.name).await? else {
        return Ok(kfdef_deleted(up, status, "before the upgrade started"));
    };
    match plan::cluster_previews(&kfdef) {
        // Removed (by hand, or a lost write): asked for again.
        Ok(previews) if previews.is_empty() => {
            write_previews(&kfdef, kfdefs, &status.waves).await?;
            return Ok(Action::await_change());
        }
        Ok(_) => {}
        Err(e) => return end(up, status, &kfdef, kfdefs, ctx, UpgradePhase::Failed, "PlanFailed", e.to_string()).await,
    }
    let key = (kfdef.namespace().unwrap_or_default(), kfdef.name_any());
    let registrations = ctx.clusters.state();
    let mut waiting = Vec::new();
    let mut failed = Vec::new();
    for cluster in status.waves.iter_mut().flat_map(|w| w.clusters.iter_mut()) {
        if cluster.phase != ClusterUpgradePhase::Pending || cluster.moves.is_empty() {
            continue;
        }
        let name = cluster.name.clone();
        let platform = registrations.iter().find(|r| r.name_any() == name).map(|r| r.spec.platform).unwrap_or_default();
        // This cluster's observations only, not the whole fleet's, and no lock held across a write.
        let seen = match name.parse::<ClusterName>() {
            Ok(cluster) => ctx.state.fleet.read().await.get(&cluster).cloned().unwrap_or_default(),
            Err(_) => Default::default(),
        };
        let preview = match plan::cluster_preview_plan(&kfdef, &name, platform, &seen.catalog) {
            Ok(Some(preview)) => preview,
            Ok(None) => {
                waiting.push(format!("cluster {name}: no preview in annotation {}", plan::CLUSTER_PREVIEWS_ANNOTATION));
                continue;
            }
            Err(e) => return end(up, status, &kfdef, kfdefs, ctx, UpgradePhase::Failed, "PlanFailed", format!("cluster {name}: {e}")).await,
        };
        let reports = seen.reports.get(&key).cloned().unwrap_or_default();
        let (plans, missing) = upgrade_controller::step_plans(cluster.moves.iter().map(|m| (m.component, m.from_version.as_str(), m.to_version.as_str())), &preview, &reports);
        if !missing.is_empty() {
            let stale = kfdef.status.as_ref().and_then(|s| s.clusters.iter().find(|c| c.name == name)).is_some_and(|c| c.state == ClusterState::Stale);
            if stale && up.spec.stale_clusters == StaleClusters::Skip {
                cluster.phase = ClusterUpgradePhase::Skipped;
                cluster.message = format!("not heard from while its plan was asked for (staleClusters: Skip); waiting for {}", missing.join(", "));
                continue;
            }
            waiting.push(format!("cluster {name}: {}", missing.join(", ")));
            continue;
        }
        failed.extend(plans.iter().filter(|p| !p.changes.failed.is_empty()).map(|p| format!("cluster {name}: {} {}: {}", p.component, p.to_version, p.changes.failed.join("; "))));
        cluster.plan = plans;
    }
    if !failed.is_empty() {
        let reason = format!("the plan shows the new versions cannot be applied, so nothing was written: {}", failed.join(" | "));
        return end(up, status, &kfdef, kfdefs, ctx, UpgradePhase::Failed, "PlanFailed", reason).await;
    }
    if !waiting.is_empty() {
        let left = upgrade_controller::remaining(&status.start_time, up.spec.health_timeout_seconds);
        if left.is_zero() {
            let reason = format!("no plan from {} within {} s; nothing was written", waiting.join("; "), up.spec.health_timeout_seconds);
            return end(up, status, &kfdef, kfdefs, ctx, UpgradePhase::Failed, "NoPlan", reason).await;
        }
        // Reports arrive as triggers; only the deadline needs a timer.
        return Ok(Action::requeue(left + Duration::from_secs(1)));
    }
    let trimmed = waves::bound_plans(&mut status.waves);
    let mut summary: Vec<String> = status
        .waves
        .iter()
        .flat_map(|w| w.clusters.iter())
        .filter(|c| !c.plan.is_empty())
        .map(|c| format!("cluster {}: {}", c.name, c.plan.iter().map(|p| format!("{} {} → {}: {}", p.component, p.from_version, p.to_version, p.summary)).collect::<Vec<_>>().join(", ")))
        .collect();
    if trimmed > 0 {
        // First, so that a message cut to its bound still says it.
        summary.insert(0, format!("the plans of the last {trimmed} clusters keep their summaries but not their lines, to keep this status small"));
    }
    condition(status, "Planned", true, "Planned", &summary.join("; "), up.meta().generation);
    event(ctx, up, EventType::Normal, "Planned", summary.join("; ")).await;
    status.phase = Some(UpgradePhase::Upgrading);
    // The status write triggers the first wave.
    Ok(Action::await_change())
}

/// The upgrade ends Failed: its KfDef was deleted `when`.
fn kfdef_deleted(up: &KfUpgrade, status: &mut KfUpgradeStatus, when: &str) -> Action {
    status.phase = Some(UpgradePhase::Failed);
    status.completion_time = Some(now());
    condition(status, "Succeeded", false, "KfDefDeleted", &format!("the KfDef was deleted {when}"), up.meta().generation);
    Action::await_change()
}

/// Annotates the KfDef with the pins each moving cluster gets: the KfDef driver publishes each
/// cluster's previews.
async fn write_previews(kfdef: &KfDef, kfdefs: &Api<KfDef>, waves: &[WaveStatus]) -> Result<(), UpgradeError> {
    let previews: BTreeMap<&str, &ClusterPins> = waves.iter().flat_map(|w| w.clusters.iter()).filter(|c| c.phase == ClusterUpgradePhase::Pending && !c.moves.is_empty()).map(|c| (c.name.as_str(), &c.target)).collect();
    let value = serde_json::to_string(&previews).expect("pins serialise");
    patch_kfdef(kfdefs, kfdef, "ask for each cluster's plan on", json!({"metadata": {"annotations": {plan::CLUSTER_PREVIEWS_ANNOTATION: value}}})).await
}

/// One step of the rollout: pins written first, then status (a lost status write repeats the
/// same pins).
async fn roll_out(up: &KfUpgrade, status: &mut KfUpgradeStatus, kfdefs: &Api<KfDef>, ctx: &Context) -> Result<Action, UpgradeError> {
    let Some(kfdef) = get_kfdef(kfdefs, &up.spec.current_kf_def.name).await? else {
        return Ok(kfdef_deleted(up, status, "during the upgrade"));
    };
    // The rollout withdraws the previews (so a lost status write leaves the upgrade planning with
    // its previews, not waiting for plans nobody was asked for).
    if kfdef.annotations().contains_key(plan::CLUSTER_PREVIEWS_ANNOTATION) {
        patch_kfdef(kfdefs, &kfdef, "end the previews on", json!({"metadata": {"annotations": {plan::CLUSTER_PREVIEWS_ANNOTATION: null}}})).await?;
    }
    let step = waves::advance(&up.spec, &mut status.waves, kfdef.status.as_ref(), &now());
    write_cluster_pins(&kfdef, kfdefs, &step.writes).await?;
    for (warning, reason, note) in step.notes {
        event(ctx, up, if warning { EventType::Warning } else { EventType::Normal }, reason, note).await;
    }
    if status.phase == Some(UpgradePhase::AwaitingApproval) && !matches!(step.verdict, Verdict::AwaitingApproval(_)) {
        condition(status, "Approved", true, "Approved", "the wave that waited is approved", up.meta().generation);
    }
    Ok(match step.verdict {
        Verdict::Wait(after) => {
            status.phase = Some(UpgradePhase::Upgrading);
            after.filter(|d| !d.is_zero()).map_or_else(Action::await_change, Action::requeue)
        }
        Verdict::AwaitingApproval(wave) => {
            status.phase = Some(UpgradePhase::AwaitingApproval);
            let message = format!("wave {wave} waits for approval: read its clusters' moves in status.waves, then add {wave} to spec.approvedWaves");
            condition(status, "Approved", false, "AwaitingApproval", &message, up.meta().generation);
            Action::await_change()
        }
        Verdict::Succeeded => {
            let message = match &up.spec.new_kf_def.version {
                Some(version) => format!("every wave succeeded; the clusters' versions are pinned in annotation {CLUSTER_PINS_ANNOTATION}: set spec.version to {version} for new clusters to get them too"),
                None => format!("every wave succeeded; the clusters' versions are pinned in annotation {CLUSTER_PINS_ANNOTATION}"),
            };
            return end(up, status, &kfdef, kfdefs, ctx, UpgradePhase::Succeeded, "Succeeded", message).await;
        }
        Verdict::Stopped(reason) => return end(up, status, &kfdef, kfdefs, ctx, UpgradePhase::Failed, "WaveFailed", reason).await,
    })
}

/// Sets (or, for `None`, removes) each written cluster's entry of the KfDef's cluster pins.
async fn write_cluster_pins(kfdef: &KfDef, kfdefs: &Api<KfDef>, writes: &PinWrites) -> Result<(), UpgradeError> {
    if writes.is_empty() {
        return Ok(());
    }
    let mut pins = plan::cluster_pins(kfdef).map_err(|source| UpgradeError::Pins { kfdef: kfdef.name_any(), source })?;
    for (cluster, target) in writes {
        match target {
            Some(target) => pins.insert(cluster.clone(), target.clone()),
            None => pins.remove(cluster),
        };
    }
    let value = if pins.is_empty() { json!(null) } else { json!(serde_json::to_string(&pins).expect("pins serialise")) };
    patch_kfdef(kfdefs, kfdef, "pin a cluster's versions on", json!({"metadata": {"annotations": {CLUSTER_PINS_ANNOTATION: value}}})).await
}
