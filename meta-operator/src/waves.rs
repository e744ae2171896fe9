//! A KfUpgrade of a KfDef placed on fleet clusters, in waves (pure): which wave each cluster is
//! in, what each cluster gets pinned to, and one step of the rollout from the KfDef's per-cluster
//! status. The driver is [`crate::wave_controller`].
//!
//! A wave moves all its clusters at once, each to its own plan (the moves its own operators'
//! announced releases allow). A cluster is healthy when the KfDef's entry for it is `Available`
//! with every moved component Ready at its new version: an entry made before the cluster's new
//! desired state reached it names the old versions, so it cannot pass the gate. A wave starts
//! only when the one before has succeeded; a cluster that fails stops the rollout after its wave,
//! and is the only one rolled back.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::core::{Selector, SelectorExt};
use kubeflow_crds::component::ComponentKind;
use kubeflow_crds::fleet_cluster::ClusterState;
use kubeflow_crds::kfdef::KfDefStatus;
use kubeflow_crds::kfupgrade::{Approval, ClusterMove, ClusterPins, ClusterUpgrade, ClusterUpgradePhase, KfUpgradeSpec, StaleClusters, UpgradeStep, Wave, WavePhase, WaveStatus};

use crate::plan::with_pinned;

/// The index of the wave each cluster (name, registration labels) is in: the first that names or
/// selects it. A cluster in no wave is refused, with the field to change.
pub fn assign(waves: &[Wave], clusters: &[(String, BTreeMap<String, String>)]) -> Result<BTreeMap<String, usize>, String> {
    let selectors = waves
        .iter()
        .map(|w| w.cluster_selector.clone().map(Selector::try_from).transpose().map_err(|e| format!("spec.waves[{}].clusterSelector: {e}", w.name)))
        .collect::<Result<Vec<_>, _>>()?;
    let mut assigned = BTreeMap::new();
    for (name, labels) in clusters {
        let wave = waves.iter().zip(&selectors).position(|(wave, selector)| wave.clusters.contains(name) || selector.as_ref().is_some_and(|s| s.matches(labels)));
        let Some(wave) = wave else {
            return Err(format!("spec.waves: cluster {name} of the KfDef's placement is in no wave; name it in a wave, or add a last wave with clusterSelector: {{}} for every cluster left"));
        };
        assigned.insert(name.clone(), wave);
    }
    for wave in waves {
        if let Some(stranger) = wave.clusters.iter().find(|c| !assigned.contains_key(*c)) {
            return Err(format!("spec.waves[{}].clusters: {stranger} is not a cluster the KfDef is placed on", wave.name));
        }
    }
    Ok(assigned)
}

/// Most bytes the clusters' plans take in a fleet upgrade's status (serialised), so that the
/// status of an upgrade of hundreds of clusters stays well under what the API server stores
/// (1.5 MiB per object in etcd by default).
pub const PLANS_IN_STATUS_MAX: usize = 256 * 1024;

/// Bounds the clusters' plans to [`PLANS_IN_STATUS_MAX`]: beyond it, the plans of the last
/// clusters (latest wave first) keep their summaries and lose their lines
/// ([`kubeflow_crds::component::ChangePlan::drop_details`]), so the first waves, looked at first,
/// keep theirs longest. Returns how many clusters' plans lost their lines.
pub fn bound_plans(waves: &mut [WaveStatus]) -> usize {
    let size = |cluster: &ClusterUpgrade| serde_json::to_vec(&cluster.plan).map_or(0, |bytes| bytes.len());
    let mut total: usize = waves.iter().flat_map(|w| &w.clusters).map(size).sum();
    let mut trimmed = 0;
    for cluster in waves.iter_mut().rev().flat_map(|w| w.clusters.iter_mut().rev()) {
        if total <= PLANS_IN_STATUS_MAX {
            break;
        }
        let before = size(cluster);
        cluster.plan.iter_mut().for_each(|step| step.changes.drop_details());
        let after = size(cluster);
        if after < before {
            total -= before - after;
            trimmed += 1;
        }
    }
    trimmed
}

/// What cluster `name` gets for `steps` (an upgrade's moves on it) over its pins `previous`.
pub fn cluster_plan(name: &str, steps: &[UpgradeStep], previous: Option<ClusterPins>) -> ClusterUpgrade {
    let mut target = previous.clone().unwrap_or_default();
    for step in steps {
        target.components.insert(step.component.name().to_string(), step.to_version.clone());
        if !step.to_repos.is_empty() {
            target.repos = with_pinned(&target.repos, &step.to_repos);
        }
    }
    let moves: Vec<ClusterMove> = steps.iter().map(|s| ClusterMove { component: s.component, from_version: s.from_version.clone(), to_version: s.to_version.clone() }).collect();
    let phase = if moves.is_empty() { ClusterUpgradePhase::Unchanged } else { ClusterUpgradePhase::Pending };
    ClusterUpgrade { name: name.into(), phase, moves, target, previous, plan: vec![], start_time: None, end_time: None, message: String::new() }
}

/// How a cluster stands in the KfDef's status, for a wave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Health {
    /// `Available`, with every given component Ready at the given version.
    Ready,
    /// Its agent is not heard from.
    Stale(String),
    /// Anything else, and why.
    NotYet(String),
}

/// How `cluster` stands in the KfDef's `status` against `versions` (component → version).
pub fn health<'a>(status: Option<&KfDefStatus>, cluster: &str, versions: impl IntoIterator<Item = (ComponentKind, &'a str)>) -> Health {
    let Some(entry) = status.and_then(|s| s.clusters.iter().find(|c| c.name == cluster)) else {
        return Health::NotYet(format!("the KfDef's status has no entry for cluster {cluster} yet"));
    };
    if entry.state == ClusterState::Stale {
        return Health::Stale(entry.message.clone());
    }
    for (component, version) in versions {
        let summary = entry.components.get(component.name());
        if !summary.is_some_and(|s| s.ready && s.version.as_deref() == Some(version)) {
            let now = summary.map_or_else(|| "not reported".to_string(), |s| format!("{} ready={} {}", s.version.as_deref().unwrap_or("no version"), s.ready, s.message));
            return Health::NotYet(format!("{component} is not Ready at {version} yet: {}", now.trim()));
        }
    }
    if entry.state != ClusterState::Available {
        return Health::NotYet(format!("{:?}: {}", entry.state, entry.message));
    }
    Health::Ready
}

/// The pins a step writes: per cluster, its new pins (`None`: it follows the KfDef again).
pub type PinWrites = BTreeMap<String, Option<ClusterPins>>;

/// What the rollout does next.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// Wait for the KfDef's status (a watch), or at most this long for a deadline.
    Wait(Option<Duration>),
    /// Wave (by name) waits for its approval.
    AwaitingApproval(String),
    /// Every wave succeeded.
    Succeeded,
    /// A cluster failed: the rollout stops after its wave. Why, cluster by cluster.
    Stopped(String),
}

/// Something to tell in an Event: warning or not, reason, note.
pub type Note = (bool, &'static str, String);

/// One step of the rollout.
#[derive(Debug, Clone, PartialEq)]
pub struct Advance {
    pub writes: PinWrites,
    pub notes: Vec<Note>,
    pub verdict: Verdict,
}

fn seconds_since(start: &Option<Time>, now: &Time) -> i64 {
    start.as_ref().map_or(0, |t| now.0.as_second() - t.0.as_second())
}

/// Advances the rollout of `spec` whose waves stand as `waves`, from the KfDef's `status` at
/// `now`: starts the first wave not done (once approved), moves its clusters, gates them on
/// health within `healthTimeoutSeconds`, and rolls back a cluster that fails (within twice that).
pub fn advance(spec: &KfUpgradeSpec, waves: &mut [WaveStatus], status: Option<&KfDefStatus>, now: &Time) -> Advance {
    let mut step = Advance { writes: BTreeMap::new(), notes: Vec::new(), verdict: Verdict::Wait(None) };
    let Some(index) = waves.iter().position(|w| w.phase != WavePhase::Succeeded) else {
        step.verdict = Verdict::Succeeded;
        return step;
    };
    let wave = &mut waves[index];
    let manual = spec.approval == Approval::Manual || spec.waves.iter().any(|w| w.name == wave.name && w.approval == Approval::Manual);
    let approved = spec.approved || spec.approved_waves.contains(&wave.name);
    match wave.phase {
        WavePhase::Pending | WavePhase::AwaitingApproval if manual && !approved => {
            if wave.phase == WavePhase::Pending {
                let plans: Vec<String> = wave.clusters.iter().map(describe).collect();
                step.notes.push((false, "AwaitingApproval", format!("wave {}: {}; add {} to spec.approvedWaves to start it", wave.name, plans.join("; "), wave.name)));
            }
            wave.phase = WavePhase::AwaitingApproval;
            step.verdict = Verdict::AwaitingApproval(wave.name.clone());
            return step;
        }
        WavePhase::Pending | WavePhase::AwaitingApproval => {
            wave.phase = WavePhase::Upgrading;
            step.notes.push((false, "WaveStarted", format!("wave {}: {}", wave.name, wave.clusters.iter().map(|c| c.name.as_str()).collect::<Vec<_>>().join(", "))));
        }
        WavePhase::Failed => {
            step.verdict = Verdict::Stopped(format!("wave {} failed", wave.name));
            return step;
        }
        WavePhase::Upgrading | WavePhase::Succeeded => {}
    }
    let timeout = spec.health_timeout_seconds;
    let mut wait: Option<i64> = None;
    let mut soonest = |left: i64| wait = Some(wait.map_or(left, |w: i64| w.min(left)));
    for cluster in wave.clusters.iter_mut() {
        match cluster.phase {
            ClusterUpgradePhase::Pending | ClusterUpgradePhase::Waiting => {
                if let Health::Stale(why) = health(status, &cluster.name, []) {
                    match spec.stale_clusters {
                        StaleClusters::Skip => {
                            cluster.phase = ClusterUpgradePhase::Skipped;
                            cluster.end_time = Some(now.clone());
                            cluster.message = format!("skipped, left at its versions (staleClusters: Skip): {why}");
                            step.notes.push((true, "ClusterSkipped", format!("{}: {}", cluster.name, cluster.message)));
                        }
                        StaleClusters::Wait => {
                            cluster.phase = ClusterUpgradePhase::Waiting;
                            cluster.message = format!("waiting until it is heard from (staleClusters: Wait): {why}");
                        }
                    }
                    continue;
                }
                step.writes.insert(cluster.name.clone(), Some(cluster.target.clone()));
                cluster.phase = ClusterUpgradePhase::Upgrading;
                cluster.start_time = Some(now.clone());
                cluster.message = String::new();
                step.notes.push((false, "ClusterStarted", describe(cluster)));
                soonest(timeout);
            }
            ClusterUpgradePhase::Upgrading => match health(status, &cluster.name, cluster.moves.iter().map(|m| (m.component, m.to_version.as_str()))) {
                Health::Ready => {
                    cluster.phase = ClusterUpgradePhase::Succeeded;
                    cluster.end_time = Some(now.clone());
                    cluster.message = "Ready at its new versions".into();
                    step.notes.push((false, "ClusterSucceeded", describe(cluster)));
                }
                Health::Stale(why) | Health::NotYet(why) => {
                    let left = timeout - seconds_since(&cluster.start_time, now);
                    if left > 0 {
                        soonest(left);
                        continue;
                    }
                    cluster.message = format!("not Ready at its new versions within {timeout} s: {why}");
                    step.notes.push((true, "ClusterFailed", format!("{}: {}", cluster.name, cluster.message)));
                    if spec.rollback_on_failure {
                        step.writes.insert(cluster.name.clone(), cluster.previous.clone());
                        cluster.phase = ClusterUpgradePhase::RollingBack;
                        cluster.start_time = Some(now.clone());
                        soonest(2 * timeout);
                    } else {
                        cluster.phase = ClusterUpgradePhase::Failed;
                        cluster.end_time = Some(now.clone());
                    }
                }
            },
            ClusterUpgradePhase::RollingBack => match health(status, &cluster.name, cluster.moves.iter().map(|m| (m.component, m.from_version.as_str()))) {
                Health::Ready => {
                    cluster.phase = ClusterUpgradePhase::RolledBack;
                    cluster.end_time = Some(now.clone());
                    cluster.message = format!("{}; rolled back, Ready at its versions before", cluster.message);
                    step.notes.push((true, "ClusterRolledBack", format!("{}: {}", cluster.name, cluster.message)));
                }
                Health::Stale(why) | Health::NotYet(why) => {
                    let left = 2 * timeout - seconds_since(&cluster.start_time, now);
                    if left > 0 {
                        soonest(left);
                        continue;
                    }
                    cluster.phase = ClusterUpgradePhase::Failed;
                    cluster.end_time = Some(now.clone());
                    cluster.message = format!("{}; its rollback did not become Ready within {} s: {why}", cluster.message, 2 * timeout);
                    step.notes.push((true, "RollbackFailed", format!("{}: {}", cluster.name, cluster.message)));
                }
            },
            ClusterUpgradePhase::Succeeded | ClusterUpgradePhase::Unchanged | ClusterUpgradePhase::Skipped | ClusterUpgradePhase::Failed | ClusterUpgradePhase::RolledBack => {}
        }
    }
    let busy = |p: ClusterUpgradePhase| matches!(p, ClusterUpgradePhase::Pending | ClusterUpgradePhase::Waiting | ClusterUpgradePhase::Upgrading | ClusterUpgradePhase::RollingBack);
    if wave.clusters.iter().any(|c| busy(c.phase)) {
        // A waiting cluster is told by the KfDef's status (a watch); a deadline needs a timer.
        step.verdict = Verdict::Wait(wait.map(|s| Duration::from_secs(s.max(0) as u64 + 1)));
        return step;
    }
    let failed: Vec<String> = wave
        .clusters
        .iter()
        .filter(|c| matches!(c.phase, ClusterUpgradePhase::Failed | ClusterUpgradePhase::RolledBack))
        .map(|c| format!("{} ({:?}): {}", c.name, c.phase, c.message))
        .collect();
    if !failed.is_empty() {
        wave.phase = WavePhase::Failed;
        let later: Vec<String> = waves[index + 1..].iter().map(|w| w.name.clone()).collect();
        let stopped = if later.is_empty() { String::new() } else { format!("; not started: wave {}", later.join(", wave ")) };
        step.verdict = Verdict::Stopped(format!("wave {} failed on {}{stopped}", waves[index].name, failed.join(" | ")));
        return step;
    }
    wave.phase = WavePhase::Succeeded;
    step.notes.push((false, "WaveSucceeded", format!("wave {}", wave.name)));
    step.verdict = if index + 1 == waves.len() { Verdict::Succeeded } else { Verdict::Wait(Some(Duration::ZERO)) };
    step
}

/// `cluster: dex v2.22.0 → v2.24.0, …`.
pub fn describe(cluster: &ClusterUpgrade) -> String {
    if cluster.moves.is_empty() {
        return format!("{}: nothing moves", cluster.name);
    }
    let moves: Vec<String> = cluster.moves.iter().map(|m| format!("{} {} → {}", m.component, m.from_version, m.to_version)).collect();
    format!("{}: {}", cluster.name, moves.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use kubeflow_crds::fleet_cluster::ClusterPlacementStatus;
    use kubeflow_crds::kfdef::ComponentSummary;
    use kubeflow_crds::kfupgrade::{KfUpgrade, StepPhase};

    fn spec(yaml: &str) -> KfUpgradeSpec {
        let full = format!("apiVersion: kfupgrade.apps.kubeflow.org/v1alpha1\nkind: KfUpgrade\nmetadata: {{name: u}}\nspec:\n  currentKfDef: {{name: kf}}\n  newKfDef: {{name: kf, version: v1.3.0}}\n  healthTimeoutSeconds: 60\n{yaml}");
        serde_yaml_ng::from_str::<KfUpgrade>(&full).unwrap().spec
    }

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn a_cluster_is_in_the_first_wave_that_selects_it_and_none_is_left_out() {
        let s = spec("  waves:\n  - {name: canary, clusters: [eu-1]}\n  - {name: prod, clusterSelector: {matchLabels: {stage: prod}}}\n  - {name: rest, clusterSelector: {}}\n");
        let clusters = [("eu-1", labels(&[("stage", "prod")])), ("us-1", labels(&[("stage", "prod")])), ("dev-1", labels(&[("stage", "dev")]))].map(|(n, l)| (n.to_string(), l));
        let assigned = assign(&s.waves, &clusters).unwrap();
        assert_eq!(assigned, BTreeMap::from([("eu-1".to_string(), 0), ("us-1".to_string(), 1), ("dev-1".to_string(), 2)]));
        let without_rest = spec("  waves:\n  - {name: canary, clusters: [eu-1]}\n  - {name: prod, clusterSelector: {matchLabels: {stage: prod}}}\n");
        let error = assign(&without_rest.waves, &clusters).unwrap_err();
        assert!(error.starts_with("spec.waves: cluster dev-1 of the KfDef's placement is in no wave"), "{error}");
        let stranger = spec("  waves:\n  - {name: canary, clusters: [eu-9]}\n  - {name: rest, clusterSelector: {}}\n");
        assert_eq!(assign(&stranger.waves, &clusters).unwrap_err(), "spec.waves[canary].clusters: eu-9 is not a cluster the KfDef is placed on");
    }

    fn upgrade_step(component: ComponentKind, from: &str, to: &str) -> UpgradeStep {
        UpgradeStep { component, from_version: from.into(), to_version: to.into(), phase: StepPhase::Pending, start_time: None, end_time: None, message: String::new(), failure: None, from_repos: vec![], to_repos: vec![] }
    }

    #[test]
    fn a_clusters_target_is_its_pins_before_with_its_moves_over_them() {
        let previous = ClusterPins { components: [("istio".to_string(), "1.9.6".to_string())].into(), repos: vec![] };
        let plan = cluster_plan("eu-1", &[upgrade_step(ComponentKind::Dex, "v2.22.0", "v2.24.0")], Some(previous.clone()));
        assert_eq!(plan.target.components, BTreeMap::from([("dex".to_string(), "v2.24.0".to_string()), ("istio".to_string(), "1.9.6".to_string())]));
        assert_eq!(plan.previous, Some(previous), "a rollback restores the pins before");
        assert_eq!(plan.phase, ClusterUpgradePhase::Pending);
        assert_eq!(cluster_plan("eu-2", &[], None).phase, ClusterUpgradePhase::Unchanged);
    }

    fn entry(name: &str, state: ClusterState, dex: (&str, bool)) -> ClusterPlacementStatus {
        let summary = ComponentSummary { version: Some(dex.0.into()), ready: dex.1, ..Default::default() };
        ClusterPlacementStatus { name: name.into(), state, message: String::new(), last_heard: None, components: [("dex".to_string(), summary)].into() }
    }

    fn kfdef_status(entries: Vec<ClusterPlacementStatus>) -> KfDefStatus {
        KfDefStatus { clusters: entries, ..Default::default() }
    }

    fn waves(names: &[&[&str]]) -> Vec<WaveStatus> {
        let plan = |c: &&str| cluster_plan(c, &[upgrade_step(ComponentKind::Dex, "v2.22.0", "v2.24.0")], None);
        names.iter().enumerate().map(|(i, clusters)| WaveStatus { name: ["canary", "rest"][i].into(), phase: WavePhase::Pending, clusters: clusters.iter().map(plan).collect() }).collect()
    }

    fn at(second: i64) -> Time {
        Time(k8s_openapi::jiff::Timestamp::from_second(1_800_000_000 + second).unwrap())
    }

    fn phases(waves: &[WaveStatus]) -> Vec<(WavePhase, Vec<ClusterUpgradePhase>)> {
        waves.iter().map(|w| (w.phase, w.clusters.iter().map(|c| c.phase).collect())).collect()
    }

    const WAVES: &str = "  waves:\n  - {name: canary, clusters: [a]}\n  - {name: rest, clusterSelector: {}}\n";

    #[test]
    fn the_next_wave_starts_only_when_every_cluster_of_the_canary_is_ready_at_its_new_versions() {
        let s = spec(WAVES);
        let mut w = waves(&[&["a"], &["b", "c"]]);
        let old = kfdef_status(vec![entry("a", ClusterState::Available, ("v2.22.0", true)), entry("b", ClusterState::Available, ("v2.22.0", true)), entry("c", ClusterState::Available, ("v2.22.0", true))]);
        let first = advance(&s, &mut w, Some(&old), &at(0));
        assert_eq!(first.writes.keys().collect::<Vec<_>>(), ["a"], "only the canary moves first");
        assert_eq!(first.writes["a"].as_ref().unwrap().components["dex"], "v2.24.0");
        assert_eq!(first.verdict, Verdict::Wait(Some(Duration::from_secs(61))));
        // The status made before the canary's new state reached it: old versions, so not ready.
        let again = advance(&s, &mut w, Some(&old), &at(10));
        assert!(again.writes.is_empty());
        assert_eq!(phases(&w), [(WavePhase::Upgrading, vec![ClusterUpgradePhase::Upgrading]), (WavePhase::Pending, vec![ClusterUpgradePhase::Pending; 2])]);
        // Available but still Progressing toward the new version: not ready either.
        let moving = kfdef_status(vec![entry("a", ClusterState::Progressing, ("v2.24.0", false))]);
        assert!(advance(&s, &mut w, Some(&moving), &at(20)).writes.is_empty());
        let ready = kfdef_status(vec![entry("a", ClusterState::Available, ("v2.24.0", true)), entry("b", ClusterState::Available, ("v2.22.0", true)), entry("c", ClusterState::Available, ("v2.22.0", true))]);
        let done = advance(&s, &mut w, Some(&ready), &at(30));
        assert_eq!(done.verdict, Verdict::Wait(Some(Duration::ZERO)));
        assert_eq!(w[0].phase, WavePhase::Succeeded);
        let second = advance(&s, &mut w, Some(&ready), &at(31));
        assert_eq!(second.writes.keys().collect::<Vec<_>>(), ["b", "c"]);
        let all = kfdef_status(["a", "b", "c"].map(|c| entry(c, ClusterState::Available, ("v2.24.0", true))).to_vec());
        assert_eq!(advance(&s, &mut w, Some(&all), &at(40)).verdict, Verdict::Succeeded);
    }

    #[test]
    fn a_canary_that_fails_is_rolled_back_alone_and_the_rollout_stops_before_the_next_wave() {
        let s = spec(WAVES);
        let mut w = waves(&[&["a"], &["b"]]);
        let old = kfdef_status(vec![entry("a", ClusterState::Available, ("v2.22.0", true)), entry("b", ClusterState::Available, ("v2.22.0", true))]);
        advance(&s, &mut w, Some(&old), &at(0));
        let unready = kfdef_status(vec![entry("a", ClusterState::Progressing, ("v2.24.0", false)), entry("b", ClusterState::Available, ("v2.22.0", true))]);
        assert_eq!(advance(&s, &mut w, Some(&unready), &at(59)).verdict, Verdict::Wait(Some(Duration::from_secs(2))));
        let failed = advance(&s, &mut w, Some(&unready), &at(60));
        assert_eq!(failed.writes, BTreeMap::from([("a".to_string(), None)]), "the canary follows the KfDef again, b is not touched");
        assert_eq!(w[0].clusters[0].phase, ClusterUpgradePhase::RollingBack);
        assert!(failed.notes.iter().any(|n| n.1 == "ClusterFailed" && n.2.contains("dex is not Ready at v2.24.0")), "{:?}", failed.notes);
        let back = kfdef_status(vec![entry("a", ClusterState::Available, ("v2.22.0", true)), entry("b", ClusterState::Available, ("v2.22.0", true))]);
        let stopped = advance(&s, &mut w, Some(&back), &at(70));
        assert!(stopped.writes.is_empty());
        let Verdict::Stopped(why) = stopped.verdict else { panic!("{:?}", stopped.verdict) };
        assert!(why.starts_with("wave canary failed on a (RolledBack): not Ready at its new versions within 60 s") && why.ends_with("; not started: wave rest"), "{why}");
        assert_eq!(phases(&w), [(WavePhase::Failed, vec![ClusterUpgradePhase::RolledBack]), (WavePhase::Pending, vec![ClusterUpgradePhase::Pending])]);
        // Without rollback the failed cluster stays where it is.
        let s = spec(&format!("{WAVES}  rollbackOnFailure: false\n"));
        let mut w = waves(&[&["a"], &["b"]]);
        advance(&s, &mut w, Some(&old), &at(0));
        assert!(advance(&s, &mut w, Some(&unready), &at(60)).writes.is_empty());
        assert!(matches!(advance(&s, &mut w, Some(&unready), &at(61)).verdict, Verdict::Stopped(_)));
    }

    #[test]
    fn a_manual_wave_waits_for_its_name_in_approved_waves() {
        let s = spec("  waves:\n  - {name: canary, clusters: [a]}\n  - {name: rest, clusterSelector: {}, approval: Manual}\n");
        let mut w = waves(&[&["a"], &["b"]]);
        let ready = kfdef_status(vec![entry("a", ClusterState::Available, ("v2.24.0", true)), entry("b", ClusterState::Available, ("v2.22.0", true))]);
        advance(&s, &mut w, Some(&ready), &at(0));
        advance(&s, &mut w, Some(&ready), &at(1));
        let waiting = advance(&s, &mut w, Some(&ready), &at(2));
        assert_eq!(waiting.verdict, Verdict::AwaitingApproval("rest".into()));
        assert!(waiting.writes.is_empty());
        assert!(waiting.notes[0].2.contains("b: dex v2.22.0 → v2.24.0"), "the wave's plans are told: {:?}", waiting.notes);
        let mut approved = s.clone();
        approved.approved_waves.push("rest".into());
        assert_eq!(advance(&approved, &mut w, Some(&ready), &at(3)).writes.keys().collect::<Vec<_>>(), ["b"]);
    }

    #[test]
    fn a_stale_cluster_is_waited_for_or_skipped_as_the_spec_says() {
        let stale = kfdef_status(vec![entry("a", ClusterState::Stale, ("v2.22.0", true))]);
        let mut w = waves(&[&["a"]]);
        let waiting = advance(&spec(WAVES), &mut w, Some(&stale), &at(0));
        assert!(waiting.writes.is_empty());
        assert_eq!((w[0].clusters[0].phase, waiting.verdict), (ClusterUpgradePhase::Waiting, Verdict::Wait(None)));
        let heard = kfdef_status(vec![entry("a", ClusterState::Available, ("v2.22.0", true))]);
        assert_eq!(advance(&spec(WAVES), &mut w, Some(&heard), &at(100)).writes.keys().collect::<Vec<_>>(), ["a"]);
        let mut w = waves(&[&["a"]]);
        let skipped = advance(&spec(&format!("{WAVES}  staleClusters: Skip\n")), &mut w, Some(&stale), &at(0));
        assert!(skipped.writes.is_empty());
        assert_eq!((w[0].clusters[0].phase, skipped.verdict), (ClusterUpgradePhase::Skipped, Verdict::Succeeded));
    }

    /// A plan with `lines` lines of `length` bytes in each list, and a count for each of 40
    /// applications. With `ChangePlan::MAX_LINES` of `ChangePlan::MAX_LINE`, the largest a
    /// component operator makes.
    fn plan_of(component: ComponentKind, lines: usize, length: usize) -> kubeflow_crds::kfupgrade::StepPlan {
        use kubeflow_crds::component::{ApplicationChanges, ChangePlan, PlanList};
        let mut changes = ChangePlan { spec_hash: "0123456789abcdef".into(), version: "v1.3.0".into(), unchanged: 120, ..Default::default() };
        for list in [PlanList::Add, PlanList::Change, PlanList::Prune, PlanList::Keep, PlanList::CrdChanges, PlanList::Leave] {
            for line in 0..lines {
                changes.push(list, format!("Deployment kubeflow/object-{line} {}", "x".repeat(length)));
            }
        }
        changes.applications = (0..40).map(|a| ApplicationChanges { name: format!("application-{a}"), add: 10, change: 3, prune: 1, keep: 0 }).collect();
        kubeflow_crds::kfupgrade::StepPlan { component, from_version: "v1.2.0".into(), to_version: "v1.3.0".into(), summary: changes.totals(), changes }
    }

    /// A wave of `clusters` clusters, each moving every component, with plans of `lines` lines of
    /// `length` bytes per list.
    fn planned_wave(name: &str, clusters: usize, lines: usize, length: usize) -> WaveStatus {
        let steps: Vec<UpgradeStep> = ComponentKind::ALL.iter().map(|c| upgrade_step(*c, "v1.2.0", "v1.3.0")).collect();
        let previous = ClusterPins { components: ComponentKind::ALL.iter().map(|c| (c.name().to_string(), "v1.2.0".to_string())).collect(), repos: vec![] };
        let clusters = (0..clusters)
            .map(|n| {
                let mut cluster = cluster_plan(&format!("{name}-{n:03}"), &steps, Some(previous.clone()));
                cluster.plan = ComponentKind::ALL.iter().map(|c| plan_of(*c, lines, length)).collect();
                cluster
            })
            .collect();
        WaveStatus { name: name.into(), phase: WavePhase::Pending, clusters }
    }

    #[test]
    fn the_plans_of_hundreds_of_clusters_stay_within_what_the_api_server_stores() {
        use kubeflow_crds::component::ChangePlan;
        use kubeflow_crds::kfupgrade::KfUpgradeStatus;
        // The largest plans a component operator makes, on 301 clusters.
        let largest = |name, clusters| planned_wave(name, clusters, ChangePlan::MAX_LINES + 5, ChangePlan::MAX_LINE);
        let whole = largest("canary", 1).clusters[0].plan.clone();
        let mut waves = vec![largest("canary", 1), largest("rest", 300)];
        assert_eq!(bound_plans(&mut waves), 301);
        let bytes = serde_json::to_vec(&KfUpgradeStatus { waves: waves.clone(), ..Default::default() }).unwrap().len();
        // etcd stores at most 1.5 MiB per object, and the rest of the object needs room.
        assert!(bytes < 1024 * 1024, "{bytes} bytes of status for 301 clusters");
        let last = &waves[1].clusters[299].plan[0];
        assert!(last.changes.add.is_empty() && last.changes.leave.is_empty() && last.changes.applications.is_empty());
        assert_eq!(last.changes.omitted, whole[0].changes.omitted + 6 * ChangePlan::MAX_LINES as u32, "every line left out is counted");
        assert_eq!((&last.summary, last.changes.unchanged), (&whole[0].summary, whole[0].changes.unchanged), "the summary stays");
    }

    #[test]
    fn the_first_waves_keep_their_plans_whole_longest_and_plans_that_fit_keep_every_line() {
        let typical = |name, clusters| planned_wave(name, clusters, 3, 60);
        let whole = typical("canary", 1).clusters[0].plan.clone();
        let mut waves = vec![typical("canary", 1), typical("rest", 40)];
        let trimmed = bound_plans(&mut waves);
        assert!(trimmed > 0 && trimmed < 40, "{trimmed}");
        assert_eq!(waves[0].clusters[0].plan, whole, "the canary keeps its whole plan");
        // The clusters that lost their lines are the last ones.
        let kept: Vec<bool> = waves[1].clusters.iter().map(|c| c.plan == whole).collect();
        assert_eq!(kept, [vec![true; 40 - trimmed], vec![false; trimmed]].concat());
        let size: usize = waves.iter().flat_map(|w| &w.clusters).map(|c| serde_json::to_vec(&c.plan).unwrap().len()).sum();
        assert!(size <= PLANS_IN_STATUS_MAX, "{size}");

        let mut fits = vec![typical("canary", 1), typical("rest", 2)];
        let before = fits.clone();
        assert_eq!(bound_plans(&mut fits), 0);
        assert_eq!(fits, before);
    }
}
