//! The NATS contract between the meta-operator and the component operators: bucket names, keys
//! and message types. It is API, like the resource types: the transport (connecting, opening
//! buckets, publishing with message ids and trace context) is in the `operator-runtime` crate.
//!
//! JetStream key-value buckets (each a durable stream, file storage):
//! * `kubeflow-desired-<component>`, one per component — key
//!   `<component>.<kfdef namespace>.<kfdef name>`, value
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
//! Keys are ordered per component: a component's consumer watches its own bucket and receives its
//! updates in the order they were written.
//!
//! Who may do what ([`permissions`]) is part of the contract: every process connects as its own
//! NATS user (an NKey), and the server lets only the meta-operator write desired state, and a
//! component operator read only its own component's desired bucket and write only its own status
//! and heartbeat keys. Desired state lives in one bucket per component because a JetStream
//! key-value watch creates its consumer on a subject that names the stream but not the keys: the
//! stream is the finest unit a server permission can grant reading of.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::component::{ApplicationState, ChangePlan, ComponentKind};
#[cfg(doc)]
use crate::component::ComponentStatus;

/// Prefix of the per-component desired-state buckets.
pub const DESIRED_BUCKET_PREFIX: &str = "kubeflow-desired-";
pub const STATUS_BUCKET: &str = "kubeflow-status";
pub const OPERATORS_BUCKET: &str = "kubeflow-operators";
/// How often a component operator refreshes its heartbeat, and when the meta-operator gives up.
pub const HEARTBEAT_EVERY: Duration = Duration::from_secs(3);
pub const HEARTBEAT_STALE: Duration = Duration::from_secs(15);
/// How often a component operator writes its status reports again although they did not change.
/// A replica that has just lost its Lease may still write a report before it exits, over the new
/// leader's; the new leader's next refresh puts its own back. Readers ignore a report equal to
/// the one they hold.
pub const STATUS_REFRESH_EVERY: Duration = Duration::from_secs(10);

/// The KfDef a component belongs to.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct KfDefRef {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub generation: i64,
}

/// What the meta-operator wants of one component of one KfDef. A message naming a field the
/// contract does not have is refused rather than half-understood.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
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
    /// A spec to plan but not apply (what a pending KfUpgrade would publish): the component
    /// operator reports what applying it would change in [`StatusReport::plan`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preview: Option<Preview>,
    /// The fleet cluster this spec is placed on ([`crate::fleet`]), set by a hub: the KfDef lives
    /// on the hub, so the component resource is made without an owner reference to it, and a
    /// spoke's agent relays only the specs placed on its own cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<String>,
}

/// A spec to plan, with the hash the plan is reported under.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Preview {
    pub spec_hash: String,
    pub spec: Value,
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
    /// The plan of the [`DesiredComponent::preview`] last asked for, once computed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan: Option<ChangePlan>,
    /// What a Purge uninstall of the resource waits for ([`crate::component::ComponentStatus::purging`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub purging: Vec<String>,
}

/// One release a component operator ships, as it announces it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ReleaseInfo {
    pub version: String,
    /// Versions this one may be upgraded from directly.
    #[serde(default)]
    pub upgrades_from: Vec<String>,
    /// Kubeflow releases whose version of the component this is: minor releases (`1.3`), or a
    /// patch release (`1.3.1`) where it differs from the rest of its minor release's.
    #[serde(default)]
    pub kubeflow: Vec<String>,
    /// Whether this release's knowledge also installs the packages of Kubeflow releases later
    /// than any the operator lists, at the version those run (`spec.versionFromPackage`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub covers_later: bool,
}

/// `v1.2.0`, `1.2`, `v1.2-branch` → `1.2`.
pub fn kubeflow_release(version: &str) -> Option<String> {
    let digits = version.trim_start_matches('v');
    let mut parts = digits.split(|c: char| !c.is_ascii_digit());
    let (major, minor) = (parts.next()?, parts.next()?);
    (!major.is_empty() && !minor.is_empty()).then(|| format!("{major}.{minor}"))
}

/// `v1.10.2`, `1.10.2-rc.1` → `1.10.2`; `None` without a patch number (`1.10`, `v1.10-branch`).
pub fn kubeflow_patch_release(version: &str) -> Option<String> {
    let minor = kubeflow_release(version)?;
    let rest = version.trim_start_matches('v').strip_prefix(&minor)?.strip_prefix('.')?;
    let patch: String = rest.chars().take_while(char::is_ascii_digit).collect();
    (!patch.is_empty()).then(|| format!("{minor}.{patch}"))
}

/// The release among `releases` that belongs to Kubeflow `version`: the one listed for that patch
/// release or the latest earlier one of its minor release (a patch release keeps what the one
/// before it ran unless it lists its own), else the one listed for its minor release.
pub fn release_for<'a>(releases: &'a [ReleaseInfo], version: &str) -> Option<&'a ReleaseInfo> {
    let minor = kubeflow_release(version)?;
    let patch_of = |tag: &str| tag.strip_prefix(&minor)?.strip_prefix('.')?.parse::<u64>().ok();
    let wanted = kubeflow_patch_release(version).as_deref().and_then(patch_of);
    let by_patch = wanted.and_then(|wanted| {
        releases.iter().filter_map(|r| Some((r.kubeflow.iter().filter_map(|k| patch_of(k)).filter(|p| *p <= wanted).max()?, r))).max_by_key(|(patch, _)| *patch).map(|(_, r)| r)
    });
    by_patch.or_else(|| releases.iter().find(|r| r.kubeflow.contains(&minor)))
}

/// The release among `releases` whose knowledge installs Kubeflow `version`'s packages when no
/// release is listed for it ([`release_for`]): the one that [`ReleaseInfo::covers_later`], when
/// `version` is later than every Kubeflow release listed.
pub fn later_release_for<'a>(releases: &'a [ReleaseInfo], version: &str) -> Option<&'a ReleaseInfo> {
    let wanted = crate::validation::version_numbers(&kubeflow_patch_release(version).or_else(|| kubeflow_release(version))?)?;
    let latest = releases.iter().flat_map(|r| &r.kubeflow).filter_map(|k| crate::validation::version_numbers(k)).max()?;
    (wanted > latest).then(|| releases.iter().rev().find(|r| r.covers_later)).flatten()
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

/// The bucket holding `component`'s desired state.
pub fn desired_bucket(component: ComponentKind) -> String {
    format!("{DESIRED_BUCKET_PREFIX}{}", component.name())
}

/// A process on the bus: each has its own NATS user, named [`Identity::user`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Identity {
    MetaOperator,
    Component(ComponentKind),
    /// A spoke cluster's relay to the hub ([`crate::fleet`]).
    FleetAgent,
}

/// Subjects an identity may publish to and subscribe to (NATS wildcards); everything else is
/// refused by the server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Permissions {
    pub publish: Vec<String>,
    pub subscribe: Vec<String>,
}

impl Identity {
    /// Every identity of the contract: the meta-operator, one per component and the fleet agent.
    pub fn all() -> Vec<Identity> {
        std::iter::once(Identity::MetaOperator).chain(ComponentKind::ALL.into_iter().map(Identity::Component)).chain([Identity::FleetAgent]).collect()
    }

    /// NATS user name, also the operator's name.
    pub fn user(self) -> String {
        match self {
            Identity::MetaOperator => "meta-operator".into(),
            Identity::Component(c) => format!("{}-operator", c.name()),
            Identity::FleetAgent => "fleet-agent".into(),
        }
    }

    /// Prefix of this identity's reply subjects: replies (JetStream acks, API answers, the
    /// messages of its watches) go to subjects only it may subscribe to.
    pub fn inbox_prefix(self) -> String {
        format!("_INBOX.{}", self.user())
    }

    /// What this identity may do on the bus.
    pub fn permissions(self) -> Permissions {
        let inbox = format!("{}.>", self.inbox_prefix());
        let info = |bucket: &str| format!("$JS.API.STREAM.INFO.KV_{bucket}");
        match self {
            Identity::MetaOperator => Permissions {
                // Manages the buckets and writes every component's desired state; reads status
                // and heartbeats through its own consumers. (Subject wildcards match whole tokens
                // only: each desired bucket is named.)
                publish: ["$JS.API.>".to_string(), "$JS.FC.>".into(), "$JS.ACK.>".into()]
                    .into_iter()
                    .chain(ComponentKind::ALL.into_iter().map(|c| format!("$KV.{}.>", desired_bucket(c))))
                    .collect(),
                subscribe: vec![inbox],
            },
            Identity::Component(c) => {
                let desired = desired_bucket(c);
                let stream = format!("KV_{desired}");
                Permissions {
                    publish: vec![
                        "$JS.API.INFO".into(),
                        info(&desired),
                        info(STATUS_BUCKET),
                        info(OPERATORS_BUCKET),
                        // Its watch: an ordered consumer on its own desired bucket, recreated
                        // after a gap, answering the stream's flow control.
                        format!("$JS.API.CONSUMER.CREATE.{stream}"),
                        format!("$JS.API.CONSUMER.CREATE.{stream}.>"),
                        format!("$JS.API.CONSUMER.DELETE.{stream}.*"),
                        format!("$JS.API.CONSUMER.INFO.{stream}.*"),
                        format!("$JS.FC.{stream}.>"),
                        format!("$KV.{STATUS_BUCKET}.{}.>", c.name()),
                        format!("$KV.{OPERATORS_BUCKET}.{}", c.name()),
                    ],
                    subscribe: vec![inbox],
                }
            }
            Identity::FleetAgent => Permissions {
                // A spoke cluster's bus owner in the meta-operator's place: it makes the buckets
                // and writes every component's desired state as the hub says. Towards the hub:
                // its domain's API, the hub's gate and flow control, which the hub's leaf
                // permissions narrow to the cluster's own buckets
                // (`crate::fleet::leaf_permissions`), where a compromised spoke cannot widen them.
                publish: ["$JS.API.>".to_string(), "$JS.FC.>".into(), format!("$JS.{}.API.>", crate::fleet::HUB_DOMAIN), format!("{}.>", crate::fleet::LEAF_API)]
                    .into_iter()
                    .chain(ComponentKind::ALL.into_iter().map(|c| format!("$KV.{}.>", desired_bucket(c))))
                    .collect(),
                subscribe: vec![inbox],
            },
        }
    }
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
    fn kubeflow_versions_name_their_minor_and_patch_releases() {
        for (version, minor, patch) in [("v1.10.2", Some("1.10"), Some("1.10.2")), ("1.3.1-rc.1", Some("1.3"), Some("1.3.1")), ("1.3", Some("1.3"), None), ("v1.3-branch", Some("1.3"), None), ("v1", None, None), ("main", None, None)] {
            assert_eq!((kubeflow_release(version).as_deref(), kubeflow_patch_release(version).as_deref()), (minor, patch), "{version}");
        }
    }

    #[test]
    fn a_later_kubeflow_goes_to_the_release_that_covers_later_ones_and_no_other() {
        let release = |version: &str, kubeflow: &str, covers_later: bool| ReleaseInfo { version: version.into(), upgrades_from: vec![], kubeflow: vec![kubeflow.into()], covers_later };
        let releases = [release("1.26.1", "1.10.2", false), release("1.28.0", "1.11.0", true)];
        for later in ["v1.12.0", "1.12", "v1.12-branch", "v2.0.0", "v1.11.1"] {
            assert_eq!(later_release_for(&releases, later).map(|r| r.version.as_str()), Some("1.28.0"), "{later}");
        }
        // Listed, earlier, or not a version: no later release answers.
        for other in ["v1.11.0", "v1.10.3", "v1.3.0", "main"] {
            assert_eq!(later_release_for(&releases, other), None, "{other}");
        }
        let none_covers = [release("1.26.1", "1.10.2", false)];
        assert_eq!(later_release_for(&none_covers, "v1.12.0"), None);
    }

    #[test]
    fn a_component_may_touch_only_its_own_subjects() {
        let katib = Identity::Component(ComponentKind::Katib).permissions();
        assert_eq!(katib.subscribe, ["_INBOX.katib-operator.>"]);
        for allowed in ["$KV.kubeflow-status.katib.>", "$KV.kubeflow-operators.katib", "$JS.API.CONSUMER.CREATE.KV_kubeflow-desired-katib"] {
            assert!(katib.publish.iter().any(|p| p == allowed), "{allowed} missing from {:?}", katib.publish);
        }
        // Nothing of another component's, no desired state written, no message read by stream
        // sequence (which would bypass the per-bucket consumer grant).
        for subject in &katib.publish {
            assert!(!subject.contains("istio") && !subject.starts_with("$KV.kubeflow-desired") && !subject.contains("MSG.GET") && !subject.contains("DIRECT.GET"), "{subject}");
        }
        let meta = Identity::MetaOperator.permissions();
        assert!(meta.publish.contains(&"$KV.kubeflow-desired-istio.>".to_string()), "{:?}", meta.publish);
        assert!(!meta.publish.iter().any(|p| p.starts_with("$KV.kubeflow-status")), "{:?}", meta.publish);
        assert_eq!(Identity::all().len(), ComponentKind::ALL.len() + 2);
    }

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
            releases: vec![ReleaseInfo { version: "v0.11.0".into(), upgrades_from: vec!["v0.10.0".into()], kubeflow: vec!["1.3".into()], covers_later: false }],
        };
        assert_eq!(
            serde_json::to_value(&beat).unwrap(),
            serde_json::json!({"operator": "katib-operator", "version": "0.2.0", "at": 7, "component": "katib",
                               "releases": [{"version": "v0.11.0", "upgradesFrom": ["v0.10.0"], "kubeflow": ["1.3"]}]})
        );
    }
}
