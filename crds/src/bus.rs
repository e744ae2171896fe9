//! The NATS contract between the meta-operator and the component operators: bucket names, keys
//! and message types. It is API, like the resource types: the transport (connecting, opening
//! buckets, publishing with message ids and trace context) is in the `operator-runtime` crate.
//!
//! Three JetStream key-value buckets (each a durable stream, file storage):
//! * `kubeflow-desired` — key `<component>.<kfdef namespace>.<kfdef name>`, value
//!   [`DesiredComponent`]: the component spec the meta-operator wants. Written by the meta-operator
//!   with `Nats-Msg-Id = <kfdef uid>.<generation>.<component>.<spec hash>.<key revision>`
//!   (JetStream drops a re-publish of the same change) and W3C `traceparent`; deleted when the component leaves the KfDef. A key holds the
//!   latest value, so a consumer that (re)lists sees exactly the current desired state: changes made
//!   while it was away are never lost, and replays are harmless because applying the same spec twice
//!   changes nothing.
//! * `kubeflow-status` — same keys, value [`StatusReport`], written by component operators.
//! * `kubeflow-operators` — key `<component>`, value [`Heartbeat`], refreshed every few seconds by
//!   each running component operator, so the meta-operator can say which operator is missing. It
//!   carries the operator's releases (versions, upgrade edges, Kubeflow releases): the
//!   meta-operator learns from it which versions make up a Kubeflow release.
//!
//! Keys are ordered per component: a component's consumer watches `<component>.>` and receives its
//! updates in the order they were written.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::component::{ApplicationState, ComponentKind};
#[cfg(doc)]
use crate::component::ComponentStatus;

pub const DESIRED_BUCKET: &str = "kubeflow-desired";
pub const STATUS_BUCKET: &str = "kubeflow-status";
pub const OPERATORS_BUCKET: &str = "kubeflow-operators";
/// How often a component operator refreshes its heartbeat, and when the meta-operator gives up.
pub const HEARTBEAT_EVERY: Duration = Duration::from_secs(3);
pub const HEARTBEAT_STALE: Duration = Duration::from_secs(15);

/// The KfDef a component belongs to.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct KfDefRef {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub generation: i64,
}

/// What the meta-operator wants of one component of one KfDef.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct DesiredComponent {
    pub kfdef: KfDefRef,
    pub component: ComponentKind,
    /// Hash of `spec`, echoed back in status so the meta-operator knows which spec a report is about.
    pub spec_hash: String,
    /// The component resource's spec.
    pub spec: Value,
    /// W3C trace context of the change (also in the message header; key-value watchers only see
    /// the value), so the component operator's work joins the meta-operator's trace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
}

/// A component operator's report on the resource it made from a [`DesiredComponent`].
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct StatusReport {
    pub spec_hash: String,
    pub phase: Option<String>,
    pub version: Option<String>,
    pub installed_version: Option<String>,
    pub ready: bool,
    pub degraded: bool,
    pub message: String,
    /// `metadata.generation` of the component resource, and the one its status was computed for.
    pub generation: Option<i64>,
    pub observed_generation: Option<i64>,
    /// Per-application state, from components that report one ([`ComponentStatus::applications`]);
    /// absent in older operators' reports.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub applications: Vec<ApplicationState>,
}

/// One release a component operator ships, as it announces it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ReleaseInfo {
    pub version: String,
    /// Versions this one may be upgraded from directly.
    #[serde(default)]
    pub upgrades_from: Vec<String>,
    /// Kubeflow releases (major.minor, e.g. `1.3`) whose version of the component this is.
    #[serde(default)]
    pub kubeflow: Vec<String>,
}

/// A component operator saying it is alive, and what it ships. The fields after `at` default
/// when absent, so an older operator's heartbeat still decodes.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Heartbeat {
    pub operator: String,
    pub version: String,
    /// Unix seconds.
    pub at: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub component: Option<ComponentKind>,
    /// The component's built-in releases, oldest first.
    #[serde(default)]
    pub releases: Vec<ReleaseInfo>,
}

pub fn key(component: ComponentKind, namespace: &str, name: &str) -> String {
    format!("{}.{namespace}.{name}", component.name())
}

/// Splits a key into (component, namespace, name).
pub fn parse_key(key: &str) -> Option<(ComponentKind, String, String)> {
    let mut parts = key.splitn(3, '.');
    let component = parts.next()?.parse().ok()?;
    Some((component, parts.next()?.to_string(), parts.next()?.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_round_trip_even_with_dotted_names() {
        let k = key(ComponentKind::Katib, "team-a", "kf.prod");
        assert_eq!(k, "katib.team-a.kf.prod");
        assert_eq!(parse_key(&k), Some((ComponentKind::Katib, "team-a".into(), "kf.prod".into())));
        assert_eq!(parse_key("seldon.a.b"), None);
    }

    #[test]
    fn heartbeats_carry_releases_and_an_old_operators_heartbeat_still_decodes() {
        let old: Heartbeat = serde_json::from_str(r#"{"operator": "katib-operator", "version": "0.1.0", "at": 5}"#).unwrap();
        assert_eq!((old.component, old.releases.len()), (None, 0));
        let beat = Heartbeat {
            operator: "katib-operator".into(),
            version: "0.2.0".into(),
            at: 7,
            component: Some(ComponentKind::Katib),
            releases: vec![ReleaseInfo { version: "v0.11.0".into(), upgrades_from: vec!["v0.10.0".into()], kubeflow: vec!["1.3".into()] }],
        };
        assert_eq!(
            serde_json::to_value(&beat).unwrap(),
            serde_json::json!({"operator": "katib-operator", "version": "0.2.0", "at": 7, "component": "katib",
                               "releases": [{"version": "v0.11.0", "upgradesFrom": ["v0.10.0"], "kubeflow": ["1.3"]}]})
        );
    }
}
