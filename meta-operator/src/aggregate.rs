//! KfDef status from the plan and what the component operators reported (pure).

use std::collections::BTreeMap;

use kubeflow_crds::bus::{HEARTBEAT_STALE, StatusReport};
use operator_runtime::conditions::set_condition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kubeflow_crds::ConditionStatus::{False, True};
use kubeflow_crds::component::{ComponentKind, ComponentPhase};
use kubeflow_crds::kfdef::{ComponentSummary, KfDefPhase, KfDefStatus};

use crate::catalog::Unresolved;
use crate::plan::{Plan, PlanError};
use crate::upgrade::EditRefused;

/// Everything known about the components of one KfDef.
pub struct Observed<'a> {
    /// Latest report per component.
    pub reports: &'a BTreeMap<ComponentKind, StatusReport>,
    /// Last heartbeat (unix seconds) per component operator.
    pub heartbeats: &'a BTreeMap<ComponentKind, u64>,
    pub now_unix: u64,
    /// Why desired state could not be published, if it could not.
    pub bus_error: Option<String>,
    /// A version change outside a KfUpgrade that was refused (nothing published).
    pub edit_refused: Option<&'a EditRefused>,
    /// How pinned versions differ from `spec.version` ([`crate::plan::pinned_drift`]).
    pub pinned_drift: Option<String>,
}

/// The KfDef's next status; `previous` keeps condition transition times.
pub fn kfdef_status(previous: Option<&KfDefStatus>, generation: Option<i64>, plan: Result<&Plan, &PlanError>, observed: &Observed, platform: &str, now: &Time) -> KfDefStatus {
    let mut status = previous.cloned().unwrap_or_default();
    status.observed_generation = generation;
    status.platform = Some(platform.to_string());
    let plan = match plan {
        Ok(plan) => plan,
        Err(error) => {
            let message = error.to_string();
            status.phase = Some(KfDefPhase::Degraded);
            set_condition(&mut status.conditions, "Degraded", True, "InvalidSpec", &message, generation, now);
            set_condition(&mut status.conditions, "Progressing", False, "InvalidSpec", &message, generation, now);
            set_condition(&mut status.conditions, "Available", False, "InvalidSpec", &message, generation, now);
            return status;
        }
    };
    match &observed.pinned_drift {
        Some(drift) => set_condition(&mut status.conditions, "VersionPinned", True, "PinnedByKfUpgrade", drift, generation, now),
        None => set_condition(&mut status.conditions, "VersionPinned", False, "FollowsSpecVersion", "", generation, now),
    }
    if let Some(refused) = observed.edit_refused {
        // What runs stays, and so does what status says about it.
        let message = refused.to_string();
        status.phase = Some(KfDefPhase::Degraded);
        set_condition(&mut status.conditions, "Degraded", True, "VersionChangeRefused", &message, generation, now);
        set_condition(&mut status.conditions, "Progressing", False, "VersionChangeRefused", &message, generation, now);
        return status;
    }
    status.applications = plan.applications.clone();
    status.components = plan
        .components
        .iter()
        .map(|(component, wanted)| {
            let operator = format!("{component}-operator");
            let alive = observed.heartbeats.get(component).is_some_and(|at| observed.now_unix.saturating_sub(*at) <= HEARTBEAT_STALE.as_secs());
            let summary = match observed.reports.get(component) {
                _ if !alive => ComponentSummary {
                    phase: Some("WaitingForOperator".into()),
                    version: None,
                    ready: false,
                    message: format!("waiting for {operator}: it has not reported on NATS in the last {} s", HEARTBEAT_STALE.as_secs()),
                    spec_hash: String::new(),
                },
                Some(report) if report.spec_hash == wanted.spec_hash => ComponentSummary {
                    phase: report.phase.clone(),
                    version: report.installed_version.clone(),
                    ready: report.ready && wanted.installs(report.installed_version.as_deref()) && report.observed_generation == report.generation,
                    message: report.message.clone(),
                    spec_hash: wanted.spec_hash.clone(),
                },
                _ => ComponentSummary { phase: Some("Pending".into()), version: None, ready: false, message: format!("{operator} has not reported on the current spec yet"), spec_hash: String::new() },
            };
            (component.name().to_string(), summary)
        })
        .chain(plan.unresolved.iter().map(|(component, why)| {
            let summary = match why {
                Unresolved::NotAnnounced { .. } | Unresolved::EarlierApplicationUndecided { .. } => ComponentSummary { phase: Some("WaitingForOperator".into()), version: None, ready: false, message: why.to_string(), spec_hash: String::new() },
                Unresolved::UnsupportedKubeflow { .. } => ComponentSummary { phase: Some("Degraded".into()), version: None, ready: false, message: format!("spec.version: {why}"), spec_hash: String::new() },
            };
            (component.name().to_string(), summary)
        }))
        .collect();
    // Each application says where it stands: its own state where its component reports one per
    // application (the generic component), else its component's; and why when not Ready.
    for application in &mut status.applications {
        let Some(name) = application.component.clone() else { continue };
        let Some(summary) = status.components.get(&name) else { continue };
        // Only a report on the current spec, of the resource's current generation, by a live operator.
        let own = name.parse::<ComponentKind>().ok().and_then(|component| {
            let current = plan.components.get(&component)?;
            let report = observed.reports.get(&component).filter(|r| {
                r.spec_hash == current.spec_hash && r.observed_generation == r.generation && summary.phase.as_deref() != Some("WaitingForOperator")
            })?;
            report.applications.iter().find(|a| a.name == application.name)
        });
        application.build = own.map(|own| own.build.clone()).unwrap_or_default();
        (application.state, application.message) = match own {
            Some(own) if own.state == ComponentPhase::Ready => ("Ready".into(), String::new()),
            Some(own) if own.state != ComponentPhase::Ready => (format!("{:?}", own.state), own.message.clone()),
            _ if summary.ready => ("Ready".into(), String::new()),
            _ => (summary.phase.clone().unwrap_or_else(|| "Pending".into()), summary.message.clone()),
        };
    }

    let unsupported: Vec<String> = plan
        .unresolved
        .iter()
        .filter(|(_, why)| matches!(why, Unresolved::UnsupportedKubeflow { .. }))
        .map(|(c, why)| format!("{c}: spec.version: {why}"))
        .collect();
    let reported_degraded = plan
        .components
        .keys()
        .filter(|c| observed.reports.get(c).is_some_and(|r| r.degraded && r.spec_hash == plan.components[c].spec_hash))
        .map(|c| format!("{c}: {}", observed.reports[c].message));
    let degraded: Vec<String> = unsupported.iter().cloned().chain(reported_degraded).collect();
    let waiting: Vec<String> = status.components.iter().filter(|(_, s)| !s.ready).map(|(name, s)| format!("{name}: {}", s.message)).collect();
    let all_ready = waiting.is_empty() && !status.components.is_empty() && status.applications.iter().all(|a| a.state == "Ready");
    if let Some(error) = &observed.bus_error {
        set_condition(&mut status.conditions, "Progressing", True, "NatsUnavailable", error, generation, now);
    } else if all_ready {
        set_condition(&mut status.conditions, "Progressing", False, "Converged", "", generation, now);
    } else {
        set_condition(&mut status.conditions, "Progressing", True, "WaitingForComponents", &waiting.join("; "), generation, now);
    }
    if degraded.is_empty() {
        set_condition(&mut status.conditions, "Degraded", False, "AsExpected", "", generation, now);
    } else {
        let reason = if unsupported.is_empty() { "ComponentDegraded" } else { "UnsupportedVersion" };
        set_condition(&mut status.conditions, "Degraded", True, reason, &degraded.join("; "), generation, now);
    }
    let available_message = if status.components.is_empty() { "the KfDef has no applications".to_string() } else { String::new() };
    set_condition(&mut status.conditions, "Available", if all_ready { True } else { False }, if all_ready { "AllComponentsReady" } else { "ComponentsNotReady" }, &available_message, generation, now);
    status.phase = Some(if all_ready {
        KfDefPhase::Available
    } else if !degraded.is_empty() {
        KfDefPhase::Degraded
    } else {
        KfDefPhase::Progressing
    });
    status
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::ComponentPlan;

    fn plan() -> Plan {
        let entry = |v: &str| ComponentPlan { spec: serde_json::json!({}), spec_hash: format!("h-{v}"), version: v.into(), pinned: false, release_version: Some(v.into()) };
        let app = |name: &str, component: Option<&str>| kubeflow_crds::kfdef::ApplicationStatus {
            name: name.into(),
            component: component.map(String::from),
            state: if component.is_some() { "Mapped" } else { "Unmapped" }.into(),
            message: String::new(),
            build: Default::default(),
        };
        Plan {
            components: [(ComponentKind::Katib, entry("v0.11.0")), (ComponentKind::Dex, entry("v2.24.0"))].into(),
            unresolved: BTreeMap::new(),
            applications: vec![app("katib-controller", Some("katib")), app("dex", Some("dex"))],
        }
    }

    fn report(hash: &str, version: &str, ready: bool) -> StatusReport {
        StatusReport { spec_hash: hash.into(), phase: Some(if ready { "Ready" } else { "Progressing" }.into()), installed_version: Some(version.into()), ready, generation: Some(1), observed_generation: Some(1), ..Default::default() }
    }

    fn time() -> Time {
        Time("2026-01-01T00:00:00Z".parse().unwrap())
    }

    fn cond<'a>(s: &'a KfDefStatus, t: &str) -> &'a kubeflow_crds::Condition {
        s.conditions.iter().find(|c| c.type_ == t).unwrap()
    }

    #[test]
    fn available_only_when_every_component_reports_ready_on_the_current_spec() {
        let beats = [(ComponentKind::Katib, 100), (ComponentKind::Dex, 100)].into();
        let p = plan();
        let mut reports: BTreeMap<_, _> = [(ComponentKind::Katib, report("h-v0.11.0", "v0.11.0", true)), (ComponentKind::Dex, report("old", "v2.24.0", true))].into();
        let observed = Observed { reports: &reports, heartbeats: &beats, now_unix: 105, bus_error: None, edit_refused: None, pinned_drift: None };
        let s = kfdef_status(None, Some(3), Ok(&p), &observed, "Kubernetes", &time());
        assert_eq!(s.phase, Some(KfDefPhase::Progressing));
        assert_eq!(s.components["dex"].phase.as_deref(), Some("Pending"));
        assert_eq!(cond(&s, "Available").status, False);
        let state = |s: &KfDefStatus, name: &str| s.applications.iter().find(|a| a.name == name).map(|a| (a.state.clone(), a.message.clone())).unwrap();
        assert_eq!(state(&s, "katib-controller"), ("Ready".to_string(), String::new()));
        assert_eq!(state(&s, "dex"), ("Pending".to_string(), "dex-operator has not reported on the current spec yet".to_string()));
        reports.insert(ComponentKind::Dex, report("h-v2.24.0", "v2.24.0", true));
        let observed = Observed { reports: &reports, heartbeats: &beats, now_unix: 105, bus_error: None, edit_refused: None, pinned_drift: None };
        let s = kfdef_status(Some(&s), Some(3), Ok(&p), &observed, "Kubernetes", &time());
        assert_eq!(s.phase, Some(KfDefPhase::Available));
        assert_eq!(state(&s, "dex").0, "Ready");
        assert_eq!(cond(&s, "Available").observed_generation, Some(3));
        assert_eq!(s.platform.as_deref(), Some("Kubernetes"));
    }

    #[test]
    fn a_silent_operator_is_named() {
        let beats = [(ComponentKind::Katib, 100)].into();
        let reports = BTreeMap::new();
        let p = plan();
        let observed = Observed { reports: &reports, heartbeats: &beats, now_unix: 200, bus_error: None, edit_refused: None, pinned_drift: None };
        let s = kfdef_status(None, Some(1), Ok(&p), &observed, "Kubernetes", &time());
        assert_eq!(s.components["dex"].phase.as_deref(), Some("WaitingForOperator"));
        assert!(s.components["dex"].message.contains("dex-operator"));
        assert!(s.components["katib"].message.contains("katib-operator"), "stale heartbeat too");
    }

    #[test]
    fn a_degraded_component_degrades_the_kfdef_and_bad_specs_say_why() {
        let beats = [(ComponentKind::Katib, 100), (ComponentKind::Dex, 100)].into();
        let mut bad = report("h-v0.11.0", "v0.10.0", false);
        bad.degraded = true;
        bad.message = "spec.version: not supported".into();
        let reports = [(ComponentKind::Katib, bad)].into();
        let p = plan();
        let observed = Observed { reports: &reports, heartbeats: &beats, now_unix: 100, bus_error: None, edit_refused: None, pinned_drift: None };
        let s = kfdef_status(None, Some(1), Ok(&p), &observed, "Kubernetes", &time());
        assert_eq!(s.phase, Some(KfDefPhase::Degraded));
        assert!(cond(&s, "Degraded").message.contains("katib: spec.version"));
        let bad_pins = PlanError::MalformedPins { source: serde_json::from_str::<serde_json::Value>("{").unwrap_err() };
        let s = kfdef_status(None, Some(2), Err(&bad_pins), &observed, "Kubernetes", &time());
        assert_eq!(s.phase, Some(KfDefPhase::Degraded));
        assert_eq!(cond(&s, "Degraded").reason, "InvalidSpec");
        assert!(cond(&s, "Degraded").message.starts_with("annotation kfdef.apps.kubeflow.org/component-versions is not a JSON map"), "{}", cond(&s, "Degraded").message);
    }

    #[test]
    fn unresolved_components_wait_for_their_operator_or_name_the_versions_it_ships() {
        let beats = [(ComponentKind::Katib, 100), (ComponentKind::Dex, 100)].into();
        let reports = BTreeMap::new();
        let mut p = plan();
        p.components.clear();
        p.unresolved.insert(ComponentKind::Katib, Unresolved::NotAnnounced { component: ComponentKind::Katib });
        p.unresolved.insert(ComponentKind::Dex, Unresolved::UnsupportedKubeflow { component: ComponentKind::Dex, given: "v9".into(), shipped: "v2.22.0 (Kubeflow 1.2)".into() });
        let observed = Observed { reports: &reports, heartbeats: &beats, now_unix: 100, bus_error: None, edit_refused: None, pinned_drift: None };
        let s = kfdef_status(None, Some(1), Ok(&p), &observed, "Kubernetes", &time());
        assert_eq!(s.components["katib"].phase.as_deref(), Some("WaitingForOperator"));
        assert_eq!(s.components["katib"].message, "waiting for katib-operator: it has not announced its releases on NATS");
        assert_eq!(s.components["dex"].phase.as_deref(), Some("Degraded"));
        assert_eq!(s.phase, Some(KfDefPhase::Degraded));
        assert_eq!(cond(&s, "Degraded").reason, "UnsupportedVersion");
        assert_eq!(cond(&s, "Degraded").message, "dex: spec.version: Kubeflow version \"v9\" has no dex release; dex-operator ships v2.22.0 (Kubeflow 1.2)");
    }

    #[test]
    fn a_refused_edit_degrades_the_kfdef_and_keeps_what_status_said_and_pins_are_reported() {
        use crate::upgrade::MoveRefused;
        let beats = [(ComponentKind::Katib, 100), (ComponentKind::Dex, 100)].into();
        let reports = [(ComponentKind::Katib, report("h-v0.11.0", "v0.11.0", true)), (ComponentKind::Dex, report("h-v2.24.0", "v2.24.0", true))].into();
        let p = plan();
        let observed = Observed { reports: &reports, heartbeats: &beats, now_unix: 100, bus_error: None, edit_refused: None, pinned_drift: Some("spec.version is \"v1.2.0\", but …".into()) };
        let available = kfdef_status(None, Some(1), Ok(&p), &observed, "Kubernetes", &time());
        assert_eq!(available.phase, Some(KfDefPhase::Available));
        assert_eq!((cond(&available, "VersionPinned").status, cond(&available, "VersionPinned").reason.as_str()), (True, "PinnedByKfUpgrade"));
        let refused = EditRefused::Move(MoveRefused::Downgrade { component: ComponentKind::Katib, from: "v0.11.0".into(), to: "v0.10.0".into(), later: String::new() });
        let observed = Observed { edit_refused: Some(&refused), pinned_drift: None, ..observed };
        let s = kfdef_status(Some(&available), Some(2), Ok(&p), &observed, "Kubernetes", &time());
        assert_eq!(s.phase, Some(KfDefPhase::Degraded));
        assert_eq!(cond(&s, "Degraded").reason, "VersionChangeRefused");
        assert!(cond(&s, "Degraded").message.contains("katib: v0.11.0 → v0.10.0 is a downgrade"), "{}", cond(&s, "Degraded").message);
        assert_eq!(s.components, available.components);
        assert_eq!(cond(&s, "VersionPinned").status, False);
    }

    #[test]
    fn applications_of_the_generic_component_each_say_where_they_stand() {
        use kubeflow_crds::component::ApplicationState;
        let mut p = plan();
        p.components.insert(ComponentKind::GENERIC, ComponentPlan { spec: serde_json::json!({}), spec_hash: "h-generic".into(), version: "v1.2.0".into(), pinned: false, release_version: Some("v1.2.0".into()) });
        for name in ["jupyter-web-app", "centraldashboard"] {
            p.applications.push(kubeflow_crds::kfdef::ApplicationStatus { name: name.into(), component: Some("kustomize".into()), state: "Pending".into(), message: String::new(), build: Default::default() });
        }
        let beats = [(ComponentKind::Katib, 100), (ComponentKind::Dex, 100), (ComponentKind::GENERIC, 100)].into();
        let application = |name: &str, state: ComponentPhase, message: &str| ApplicationState { name: name.into(), state, message: message.into(), ..Default::default() };
        let mut generic = report("h-generic", "v1.2.0", false);
        generic.degraded = true;
        generic.phase = Some("Degraded".into());
        generic.message = "spec.sources[0]: overlay \"gcp\" does not exist".into();
        generic.applications = vec![application("jupyter-web-app", ComponentPhase::Degraded, "spec.sources[0]: overlay \"gcp\" does not exist"), application("centraldashboard", ComponentPhase::Ready, "")];
        let mut reports: BTreeMap<_, _> =
            [(ComponentKind::Katib, report("h-v0.11.0", "v0.11.0", true)), (ComponentKind::Dex, report("h-v2.24.0", "v2.24.0", true)), (ComponentKind::GENERIC, generic)].into();
        let observed = Observed { reports: &reports, heartbeats: &beats, now_unix: 100, bus_error: None, edit_refused: None, pinned_drift: None };
        let s = kfdef_status(None, Some(1), Ok(&p), &observed, "Kubernetes", &time());
        let state = |name: &str| s.applications.iter().find(|a| a.name == name).map(|a| (a.component.clone().unwrap(), a.state.clone(), a.message.clone())).unwrap();
        assert_eq!(state("jupyter-web-app"), ("kustomize".to_string(), "Degraded".to_string(), "spec.sources[0]: overlay \"gcp\" does not exist".to_string()));
        assert_eq!(state("centraldashboard"), ("kustomize".to_string(), "Ready".to_string(), String::new()));
        assert_eq!(state("katib-controller").1, "Ready");
        assert_eq!(s.phase, Some(KfDefPhase::Degraded));
        assert_eq!(cond(&s, "Available").status, False, "an application is not Ready");
        assert_eq!(cond(&s, "Degraded").message, "kustomize: spec.sources[0]: overlay \"gcp\" does not exist");
        // Fixed: every application Ready, the KfDef Available.
        let mut fixed = report("h-generic", "v1.2.0", true);
        fixed.applications = vec![application("jupyter-web-app", ComponentPhase::Ready, ""), application("centraldashboard", ComponentPhase::Ready, "")];
        let crds_converted = kubeflow_crds::component::ConvertedKind { kind: "CustomResourceDefinition".into(), from: "apiextensions.k8s.io/v1beta1".into(), to: "apiextensions.k8s.io/v1".into(), count: 3 };
        fixed.applications[1].build.converted = vec![crds_converted.clone()];
        reports.insert(ComponentKind::GENERIC, fixed);
        let observed = Observed { reports: &reports, heartbeats: &beats, now_unix: 100, bus_error: None, edit_refused: None, pinned_drift: None };
        let s = kfdef_status(Some(&s), Some(1), Ok(&p), &observed, "Kubernetes", &time());
        assert_eq!(s.phase, Some(KfDefPhase::Available));
        assert!(s.applications.iter().all(|a| a.state == "Ready"), "{:?}", s.applications);
        let converted = |name: &str| s.applications.iter().find(|a| a.name == name).unwrap().build.converted.clone();
        assert_eq!((converted("centraldashboard"), converted("jupyter-web-app")), (vec![crds_converted], vec![]), "each application shows its own conversions");
    }
}
