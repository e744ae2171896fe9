//! A KfDef placed on a fleet's clusters (pure): which registered clusters it selects, what each
//! cluster reported, and the KfDef's status summed up over them ([`kubeflow_crds::fleet`],
//! [`kubeflow_crds::fleet_cluster`]).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use kube::core::{Selector, SelectorExt};
use kubeflow_crds::ConditionStatus::{False, True};
use kubeflow_crds::bus::{HEARTBEAT_STALE, StatusReport};
use kubeflow_crds::component::{ComponentKind, Platform};
use kubeflow_crds::fleet::{AGENT_STALE, AgentHeartbeat, ClusterName, ClusterReport, StatusKey};
use kubeflow_crds::fleet_cluster::{ClusterPlacementStatus, ClusterState, FleetCluster, FleetClusterStatus, Placement};
use kubeflow_crds::kfdef::{KfDefPhase, KfDefStatus};
use operator_runtime::conditions::set_condition;

use crate::aggregate::{self, Observed};
use crate::catalog::Catalog;
use crate::plan::{Plan, PlanError};

/// A cluster a placement selects, usable or not.
#[derive(Debug, Clone, PartialEq)]
pub enum Selected {
    /// Registered, and open to the KfDef's namespace.
    Use { cluster: ClusterName, platform: Platform },
    /// Named or matched, but nothing may be installed there: the reason is the cluster's status.
    Unusable(ClusterPlacementStatus),
}

/// The clusters `placement` of a KfDef in `namespace` selects among `registrations`, by name order.
/// A registration whose name is not a cluster name is never selected (its own status says why).
pub fn select(namespace: &str, placement: &Placement, registrations: &[FleetCluster]) -> Result<Vec<Selected>, String> {
    let selector = placement
        .cluster_selector
        .clone()
        .map(Selector::try_from)
        .transpose()
        .map_err(|e| format!("spec.placement.clusterSelector: {e}"))?;
    let mut selected = BTreeMap::new();
    for registration in registrations {
        let name = registration.name_any();
        let Ok(cluster) = name.parse::<ClusterName>() else { continue };
        let named = placement.clusters.contains(&name);
        if !named && !selector.as_ref().is_some_and(|s| s.matches(registration.labels())) {
            continue;
        }
        let entry = if registration.spec.kfdef_namespaces.iter().any(|n| n == namespace) {
            Selected::Use { cluster, platform: registration.spec.platform }
        } else {
            let message = format!("FleetCluster {name} does not list namespace {namespace:?} in spec.kfdefNamespaces; nothing is installed there");
            Selected::Unusable(unusable(&name, ClusterState::NotAllowed, message))
        };
        selected.insert(name, entry);
    }
    for name in &placement.clusters {
        if !selected.contains_key(name) {
            let message = format!("spec.placement.clusters names {name:?}, which is no registered FleetCluster");
            selected.insert(name.clone(), Selected::Unusable(unusable(name, ClusterState::NotRegistered, message)));
        }
    }
    Ok(selected.into_values().collect())
}

fn unusable(name: &str, state: ClusterState, message: String) -> ClusterPlacementStatus {
    ClusterPlacementStatus { name: name.into(), state, message, last_heard: None, components: BTreeMap::new() }
}

/// Everything the hub heard from one cluster.
#[derive(Debug, Clone, Default)]
pub struct ClusterObserved {
    pub agent: Option<AgentHeartbeat>,
    /// Last heartbeat (the cluster's unix seconds) and version per component operator.
    pub heartbeats: BTreeMap<ComponentKind, u64>,
    pub operator_versions: BTreeMap<ComponentKind, String>,
    /// The releases the cluster's operators announced: its KfDefs are planned against these.
    pub catalog: Catalog,
    /// Latest report per KfDef (namespace, name) and component.
    pub reports: BTreeMap<(String, String), BTreeMap<ComponentKind, StatusReport>>,
}

/// What a cluster's report changed, for the hub to act on.
#[derive(Debug, Clone, PartialEq)]
pub enum Changed {
    Nothing,
    /// A report on this KfDef (namespace, name).
    KfDef(String, String),
    /// The cluster's liveness, an operator's, or the releases it announced: every KfDef placed on
    /// it may read differently.
    Cluster,
}

impl ClusterObserved {
    /// Takes in a report read from the cluster's bucket, at `now_unix` on the hub.
    pub fn record(&mut self, report: ClusterReport, now_unix: u64) -> Changed {
        match report {
            ClusterReport::Agent(beat) => {
                let was_alive = self.agent_alive(now_unix);
                let version_changed = self.agent.as_ref().is_none_or(|a| a.version != beat.version);
                self.agent = Some(beat);
                if was_alive != self.agent_alive(now_unix) || version_changed { Changed::Cluster } else { Changed::Nothing }
            }
            ClusterReport::Operator(beat) => {
                let Some(component) = beat.component else { return Changed::Nothing };
                let was_alive = self.operator_alive(component, now_unix);
                let learned = self.catalog.learn(component, beat.releases);
                let version_changed = self.operator_versions.insert(component, beat.version.clone()).as_ref() != Some(&beat.version);
                self.heartbeats.insert(component, beat.at);
                if learned || version_changed || was_alive != self.operator_alive(component, now_unix) { Changed::Cluster } else { Changed::Nothing }
            }
            ClusterReport::Report(component, namespace, name, report) => {
                let reports = self.reports.entry((namespace.clone(), name.clone())).or_default();
                if reports.get(&component) == Some(&report) {
                    return Changed::Nothing;
                }
                reports.insert(component, report);
                Changed::KfDef(namespace, name)
            }
        }
    }

    /// Takes in the deletion of key `key` of the cluster's bucket.
    pub fn forget(&mut self, key: &str) -> Changed {
        match StatusKey::parse(key) {
            Some(StatusKey::Report(component, namespace, name)) => {
                let removed = self.reports.get_mut(&(namespace.clone(), name.clone())).and_then(|r| r.remove(&component));
                if removed.is_some() { Changed::KfDef(namespace, name) } else { Changed::Nothing }
            }
            Some(StatusKey::Operator(component)) => {
                self.heartbeats.remove(&component);
                Changed::Cluster
            }
            Some(StatusKey::Agent) => {
                self.agent = None;
                Changed::Cluster
            }
            None => Changed::Nothing,
        }
    }

    /// Whether the cluster's agent was heard from in the last [`AGENT_STALE`].
    pub fn agent_alive(&self, now_unix: u64) -> bool {
        self.agent.as_ref().is_some_and(|a| now_unix.saturating_sub(a.at) <= AGENT_STALE.as_secs())
    }

    fn operator_alive(&self, component: ComponentKind, now_unix: u64) -> bool {
        self.heartbeats.get(&component).is_some_and(|at| now_unix.saturating_sub(*at) <= HEARTBEAT_STALE.as_secs())
    }
}

/// Unix seconds as a Kubernetes time.
pub fn unix_time(at: u64) -> Time {
    Time(k8s_openapi::jiff::Timestamp::from_second(i64::try_from(at).unwrap_or(i64::MAX)).unwrap_or(k8s_openapi::jiff::Timestamp::UNIX_EPOCH))
}

/// When the cluster was last heard from, as status shows it: the time of `at`, but `previous`
/// while it is less than half of [`AGENT_STALE`] older, so that a heartbeat every few seconds does
/// not rewrite status every few seconds. Staleness is told from the heartbeat itself.
pub fn shown_last_heard(previous: Option<&Time>, at: u64) -> Time {
    let latest = unix_time(at);
    match previous {
        Some(previous) if previous.0 <= latest.0 && latest.0.as_second() - previous.0.as_second() < (AGENT_STALE.as_secs() / 2) as i64 => previous.clone(),
        _ => latest,
    }
}

/// How a placed KfDef stands on `cluster`: what its operators reported on the spec `plan` made for
/// it. `previous` is the cluster's entry in the KfDef's status before.
pub fn cluster_status(cluster: &ClusterName, kfdef: &(String, String), generation: Option<i64>, plan: Result<&Plan, &PlanError>, observed: &ClusterObserved, previous: Option<&ClusterPlacementStatus>, now_unix: u64, now: &Time) -> ClusterPlacementStatus {
    let none = BTreeMap::new();
    let reports = observed.reports.get(kfdef).unwrap_or(&none);
    // A silent cluster is shown as it was when last heard from: its operators' heartbeats, which
    // its agent forwarded, went silent with it.
    let alive = observed.agent_alive(now_unix);
    let as_of = match &observed.agent {
        Some(agent) if !alive => agent.at,
        _ => now_unix,
    };
    let view = Observed { reports, heartbeats: &observed.heartbeats, now_unix: as_of, bus_error: None, edit_refused: None, pinned_drift: None };
    let status = aggregate::kfdef_status(None, generation, plan, &view, "", now);
    let condition = |type_: &str| status.conditions.iter().find(|c| c.type_ == type_ && c.status == True).map(|c| c.message.clone());
    let (mut state, mut message) = match status.phase {
        Some(KfDefPhase::Available) => (ClusterState::Available, String::new()),
        Some(KfDefPhase::Degraded) => (ClusterState::Degraded, condition("Degraded").unwrap_or_default()),
        _ => (ClusterState::Progressing, condition("Progressing").unwrap_or_default()),
    };
    let last_heard = observed.agent.as_ref().map(|a| shown_last_heard(previous.and_then(|p| p.last_heard.as_ref()), a.at));
    match &observed.agent {
        // Silent since: stale, as it was last heard.
        Some(agent) if !alive => {
            message = format!("cluster {cluster}'s agent is last heard from at {}; the state shown is the last it reported ({state:?})", unix_time(agent.at).0);
            state = ClusterState::Stale;
        }
        // Never heard (a new registration, an agent starting): not stale, not there yet.
        None => {
            message = format!("cluster {cluster}'s agent has not been heard from yet");
            state = ClusterState::Progressing;
        }
        Some(_) => {}
    }
    ClusterPlacementStatus { name: cluster.to_string(), state, message, last_heard, components: status.components }
}

/// A placed KfDef's status: one entry per cluster, and its conditions summed up over them:
/// Available when every cluster is; Degraded when one is, is stale or cannot be used, or when
/// the placement itself is invalid (`Err`, which field and why).
pub fn placed_status(previous: Option<&KfDefStatus>, generation: Option<i64>, clusters: Result<Vec<ClusterPlacementStatus>, String>, bus_error: Option<&str>, now: &Time) -> KfDefStatus {
    let mut status = previous.cloned().unwrap_or_default();
    status.observed_generation = generation;
    status.components.clear();
    status.applications.clear();
    status.platform = None;
    set_condition(&mut status.conditions, "VersionPinned", False, "FollowsSpecVersion", "", generation, now);
    let clusters = match clusters {
        Ok(clusters) => clusters,
        Err(invalid) => {
            status.phase = Some(KfDefPhase::Degraded);
            for (type_, value) in [("Degraded", True), ("Progressing", False), ("Available", False)] {
                set_condition(&mut status.conditions, type_, value, "InvalidSpec", &invalid, generation, now);
            }
            return status;
        }
    };
    let describe = |states: &[ClusterState]| -> Vec<String> {
        clusters.iter().filter(|c| states.contains(&c.state)).map(|c| if c.message.is_empty() { format!("{}: {:?}", c.name, c.state) } else { format!("{}: {}", c.name, c.message) }).collect()
    };
    let all_available = !clusters.is_empty() && clusters.iter().all(|c| c.state == ClusterState::Available);
    let degraded = describe(&[ClusterState::Degraded, ClusterState::Stale, ClusterState::NotRegistered, ClusterState::NotAllowed]);
    let progressing = describe(&[ClusterState::Progressing]);
    match bus_error {
        Some(error) => set_condition(&mut status.conditions, "Progressing", True, "NatsUnavailable", error, generation, now),
        None if all_available => set_condition(&mut status.conditions, "Progressing", False, "Converged", "", generation, now),
        None if clusters.is_empty() => set_condition(&mut status.conditions, "Progressing", False, "NoClusterSelected", "spec.placement selects no registered FleetCluster", generation, now),
        None => set_condition(&mut status.conditions, "Progressing", True, "WaitingForClusters", &progressing.join("; "), generation, now),
    }
    if degraded.is_empty() {
        set_condition(&mut status.conditions, "Degraded", False, "AsExpected", "", generation, now);
    } else {
        set_condition(&mut status.conditions, "Degraded", True, "ClusterDegraded", &degraded.join("; "), generation, now);
    }
    let (reason, message) = match (all_available, clusters.len()) {
        (true, n) => ("AllClustersAvailable", format!("available on {n} cluster(s)")),
        (false, 0) => ("NoClusterSelected", "spec.placement selects no registered FleetCluster".to_string()),
        (false, n) => ("ClustersNotAvailable", format!("available on {} of {n} cluster(s)", clusters.iter().filter(|c| c.state == ClusterState::Available).count())),
    };
    set_condition(&mut status.conditions, "Available", if all_available { True } else { False }, reason, &message, generation, now);
    status.phase = Some(if all_available {
        KfDefPhase::Available
    } else if !degraded.is_empty() {
        KfDefPhase::Degraded
    } else {
        KfDefPhase::Progressing
    });
    status.clusters = clusters;
    status
}

/// A registration's status from what its cluster reported: `Connected` while its agent's
/// heartbeat is recent, and the operators heard from.
pub fn fleet_cluster_status(previous: Option<&FleetClusterStatus>, name: &str, observed: Option<&ClusterObserved>, generation: Option<i64>, now_unix: u64, now: &Time) -> FleetClusterStatus {
    let mut status = previous.cloned().unwrap_or_default();
    if let Err(refused) = name.parse::<ClusterName>() {
        set_condition(&mut status.conditions, "Registered", False, "InvalidName", &format!("metadata.name: {refused}"), generation, now);
        set_condition(&mut status.conditions, "Connected", False, "InvalidName", "", generation, now);
        return status;
    }
    set_condition(&mut status.conditions, "Registered", True, "Registered", "", generation, now);
    let agent = observed.and_then(|o| o.agent.as_ref());
    status.last_heard = agent.map(|a| shown_last_heard(status.last_heard.as_ref(), a.at));
    status.agent_version = agent.map(|a| a.version.clone());
    status.operators = observed
        .map(|o| o.operator_versions.iter().filter(|(c, _)| o.operator_alive(**c, now_unix)).map(|(c, v)| (format!("{c}-operator"), v.clone())).collect())
        .unwrap_or_default();
    match agent {
        _ if observed.is_some_and(|o| o.agent_alive(now_unix)) => set_condition(&mut status.conditions, "Connected", True, "Heartbeat", "", generation, now),
        Some(agent) => {
            let message = format!("no heartbeat from its agent since {} (stale after {} s)", unix_time(agent.at).0, AGENT_STALE.as_secs());
            set_condition(&mut status.conditions, "Connected", False, "Stale", &message, generation, now)
        }
        None => set_condition(&mut status.conditions, "Connected", False, "NeverHeard", "its agent has not been heard from", generation, now),
    }
    status
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::ComponentPlan;
    use kubeflow_crds::bus::Heartbeat;
    use kubeflow_crds::fleet_cluster::FleetClusterSpec;

    fn registration(name: &str, labels: &[(&str, &str)], namespaces: &[&str]) -> FleetCluster {
        let mut cluster = FleetCluster::new(name, FleetClusterSpec { public_key: String::new(), kfdef_namespaces: namespaces.iter().map(|n| n.to_string()).collect(), platform: Platform::Kubernetes });
        cluster.metadata.labels = Some(labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect());
        cluster
    }

    fn time(second: i64) -> Time {
        Time(k8s_openapi::jiff::Timestamp::from_second(second).unwrap())
    }

    #[test]
    fn a_placement_selects_by_name_and_label_and_says_which_clusters_it_cannot_use() {
        let registrations = [
            registration("eu-1", &[("stage", "prod")], &["kubeflow"]),
            registration("us-1", &[("stage", "prod")], &["team"]),
            registration("dev-1", &[("stage", "dev")], &["kubeflow"]),
            registration("Bad_Name", &[("stage", "prod")], &["kubeflow"]),
        ];
        let by_label = Placement { clusters: vec![], cluster_selector: Some(serde_json::from_value(serde_json::json!({"matchLabels": {"stage": "prod"}})).unwrap()) };
        let selected = select("kubeflow", &by_label, &registrations).unwrap();
        assert_eq!(selected.len(), 2, "{selected:?}");
        assert_eq!(selected[0], Selected::Use { cluster: "eu-1".parse().unwrap(), platform: Platform::Kubernetes });
        let Selected::Unusable(us) = &selected[1] else { panic!("{selected:?}") };
        assert_eq!((us.name.as_str(), us.state), ("us-1", ClusterState::NotAllowed));
        assert_eq!(us.message, "FleetCluster us-1 does not list namespace \"kubeflow\" in spec.kfdefNamespaces; nothing is installed there");

        let by_name = Placement { clusters: vec!["dev-1".into(), "ghost".into()], cluster_selector: None };
        let selected = select("kubeflow", &by_name, &registrations).unwrap();
        assert_eq!(selected[0], Selected::Use { cluster: "dev-1".parse().unwrap(), platform: Platform::Kubernetes });
        let Selected::Unusable(ghost) = &selected[1] else { panic!("{selected:?}") };
        assert_eq!((ghost.state, ghost.message.as_str()), (ClusterState::NotRegistered, "spec.placement.clusters names \"ghost\", which is no registered FleetCluster"));

        let every = Placement { clusters: vec![], cluster_selector: Some(Default::default()) };
        assert_eq!(select("kubeflow", &every, &registrations).unwrap().len(), 3, "{{}} selects every registration with a cluster name");
        let bad = Placement { clusters: vec![], cluster_selector: Some(serde_json::from_value(serde_json::json!({"matchExpressions": [{"key": "stage", "operator": "Near"}]})).unwrap()) };
        assert!(select("kubeflow", &bad, &registrations).unwrap_err().starts_with("spec.placement.clusterSelector: "));
    }

    fn plan() -> Plan {
        let entry = ComponentPlan { spec: serde_json::json!({}), spec_hash: "h-katib".into(), version: "v0.11.0".into(), pinned: false, release_version: Some("v0.11.0".into()) };
        Plan { components: [(ComponentKind::Katib, entry)].into(), unresolved: BTreeMap::new(), applications: vec![] }
    }

    fn observed(agent_at: Option<u64>, katib_ready: bool) -> ClusterObserved {
        let mut o = ClusterObserved::default();
        let cluster: ClusterName = "eu-1".parse().unwrap();
        if let Some(at) = agent_at {
            o.record(ClusterReport::Agent(AgentHeartbeat { cluster, version: "0.3.0".into(), at }), 1000);
        }
        o.record(ClusterReport::Operator(Heartbeat { operator: "katib-operator".into(), version: "0.3.0".into(), at: 995, component: Some(ComponentKind::Katib), releases: vec![] }), 1000);
        let report = StatusReport { spec_hash: "h-katib".into(), phase: Some("Ready".into()), installed_version: Some("v0.11.0".into()), ready: katib_ready, generation: Some(1), observed_generation: Some(1), ..Default::default() };
        o.record(ClusterReport::Report(ComponentKind::Katib, "kubeflow".into(), "kf".into(), report), 1000);
        o
    }

    #[test]
    fn a_cluster_reads_as_its_reports_say_and_stale_once_its_agent_is_silent() {
        let eu: ClusterName = "eu-1".parse().unwrap();
        let kf = ("kubeflow".to_string(), "kf".to_string());
        let p = plan();
        let up = cluster_status(&eu, &kf, Some(1), Ok(&p), &observed(Some(998), true), None, 1000, &time(1000));
        assert_eq!((up.state, up.message.as_str()), (ClusterState::Available, ""));
        assert_eq!(up.components["katib"].version.as_deref(), Some("v0.11.0"));
        assert_eq!(up.last_heard, Some(time(998)));
        let waiting = cluster_status(&eu, &kf, Some(1), Ok(&p), &observed(Some(998), false), None, 1000, &time(1000));
        assert_eq!(waiting.state, ClusterState::Progressing);
        // 31 s without a heartbeat: stale, the last state named.
        let silent = cluster_status(&eu, &kf, Some(1), Ok(&p), &observed(Some(998), true), Some(&up), 1029 + 1, &time(1030));
        assert_eq!(silent.state, ClusterState::Stale, "{silent:?}");
        assert!(silent.message.starts_with("cluster eu-1's agent is last heard from at 1970-01-01T00:16:38Z"), "{}", silent.message);
        assert!(silent.message.ends_with("(Available)"), "{}", silent.message);
        let never = cluster_status(&eu, &kf, Some(1), Ok(&p), &observed(None, true), None, 1000, &time(1000));
        assert_eq!((never.state, never.last_heard.is_none()), (ClusterState::Progressing, true), "a cluster not heard from yet is not stale");
        assert!(never.message.contains("has not been heard from yet"), "{}", never.message);
    }

    #[test]
    fn last_heard_moves_in_steps_of_half_the_stale_time() {
        assert_eq!(shown_last_heard(None, 100), time(100));
        assert_eq!(shown_last_heard(Some(&time(100)), 105), time(100));
        assert_eq!(shown_last_heard(Some(&time(100)), 114), time(100));
        assert_eq!(shown_last_heard(Some(&time(100)), 115), time(115));
        assert_eq!(shown_last_heard(Some(&time(100)), 90), time(90), "a clock set back is shown as it is");
    }

    #[test]
    fn a_placed_kfdef_is_available_only_when_every_cluster_is() {
        let entry = |name: &str, state: ClusterState, message: &str| ClusterPlacementStatus { name: name.into(), state, message: message.into(), last_heard: None, components: BTreeMap::new() };
        let cond = |s: &KfDefStatus, t: &str| s.conditions.iter().find(|c| c.type_ == t).map(|c| (c.status, c.reason.clone(), c.message.clone())).unwrap();
        let both = placed_status(None, Some(2), Ok(vec![entry("eu-1", ClusterState::Available, ""), entry("us-1", ClusterState::Available, "")]), None, &time(0));
        assert_eq!(both.phase, Some(KfDefPhase::Available));
        assert_eq!(cond(&both, "Available"), (True, "AllClustersAvailable".into(), "available on 2 cluster(s)".into()));
        assert_eq!(both.clusters.len(), 2);
        let one = placed_status(Some(&both), Some(2), Ok(vec![entry("eu-1", ClusterState::Available, ""), entry("us-1", ClusterState::Progressing, "katib: installing")]), None, &time(0));
        assert_eq!(one.phase, Some(KfDefPhase::Progressing));
        assert_eq!(cond(&one, "Progressing"), (True, "WaitingForClusters".into(), "us-1: katib: installing".into()));
        assert_eq!(cond(&one, "Available").2, "available on 1 of 2 cluster(s)");
        let stale = placed_status(Some(&one), Some(2), Ok(vec![entry("eu-1", ClusterState::Available, ""), entry("us-1", ClusterState::Stale, "silent")]), None, &time(0));
        assert_eq!(stale.phase, Some(KfDefPhase::Degraded));
        assert_eq!(cond(&stale, "Degraded"), (True, "ClusterDegraded".into(), "us-1: silent".into()));
        let none = placed_status(None, Some(1), Ok(vec![]), None, &time(0));
        assert_eq!((none.phase, cond(&none, "Available").1), (Some(KfDefPhase::Progressing), "NoClusterSelected".into()));
        let invalid = placed_status(Some(&stale), Some(3), Err("spec.placement.clusterSelector: bad".into()), None, &time(0));
        assert_eq!((invalid.phase, cond(&invalid, "Degraded")), (Some(KfDefPhase::Degraded), (True, "InvalidSpec".into(), "spec.placement.clusterSelector: bad".into())));
    }

    #[test]
    fn a_registration_is_connected_while_its_agent_beats() {
        let o = observed(Some(998), true);
        let s = fleet_cluster_status(None, "eu-1", Some(&o), Some(1), 1000, &time(1000));
        let connected = |s: &FleetClusterStatus| s.conditions.iter().find(|c| c.type_ == "Connected").map(|c| (c.status, c.reason.clone())).unwrap();
        assert_eq!(connected(&s), (True, "Heartbeat".into()));
        assert_eq!((s.last_heard.clone(), s.agent_version.as_deref()), (Some(time(998)), Some("0.3.0")));
        assert_eq!(s.operators, BTreeMap::from([("katib-operator".to_string(), "0.3.0".to_string())]));
        let later = fleet_cluster_status(Some(&s), "eu-1", Some(&o), Some(1), 1040, &time(1040));
        assert_eq!(connected(&later), (False, "Stale".into()));
        assert!(later.operators.is_empty(), "its operators are silent too");
        assert_eq!(connected(&fleet_cluster_status(None, "eu-1", None, Some(1), 1000, &time(1000))), (False, "NeverHeard".into()));
        let bad = fleet_cluster_status(None, "hub", None, Some(1), 1000, &time(1000));
        assert!(bad.conditions.iter().any(|c| c.type_ == "Registered" && c.status == False && c.message.contains("hub's JetStream domain")), "{bad:?}");
    }

    #[test]
    fn reports_change_their_kfdef_and_liveness_changes_the_cluster() {
        let mut o = ClusterObserved::default();
        let eu: ClusterName = "eu-1".parse().unwrap();
        let beat = |at| ClusterReport::Agent(AgentHeartbeat { cluster: eu.clone(), version: "0.3.0".into(), at });
        assert_eq!(o.record(beat(100), 100), Changed::Cluster, "first heard");
        assert_eq!(o.record(beat(105), 105), Changed::Nothing, "a heartbeat of a live cluster changes nothing");
        assert_eq!(o.record(beat(200), 200), Changed::Cluster, "alive again after it went stale");
        let report = StatusReport { spec_hash: "h".into(), ..Default::default() };
        let on_kf = || ClusterReport::Report(ComponentKind::Katib, "kubeflow".into(), "kf".into(), report.clone());
        assert_eq!(o.record(on_kf(), 200), Changed::KfDef("kubeflow".into(), "kf".into()));
        assert_eq!(o.record(on_kf(), 200), Changed::Nothing, "the same report again");
        assert_eq!(o.forget("katib.kubeflow.kf"), Changed::KfDef("kubeflow".into(), "kf".into()));
        assert_eq!(o.forget("katib.kubeflow.kf"), Changed::Nothing);
    }
}
