//! The fleet contract: one hub cluster's bus joined by spoke clusters' buses over NATS leaf
//! nodes. It extends [`crate::bus`], which stays the contract inside each cluster.
//!
//! * The hub's nats-server runs JetStream in domain [`HUB_DOMAIN`] and accepts leaf node
//!   connections, one NKey user per registered cluster, with the permissions of
//!   [`leaf_permissions`]: what crosses a cluster's leaf connection is fenced on the hub, where a
//!   compromised spoke cannot change it.
//! * Each spoke runs its own nats-server with JetStream in domain `<cluster>` and the buckets of
//!   [`crate::bus`], and opens the leaf connection to the hub itself (outbound only: the hub never
//!   reaches into a spoke). Its component operators are those of a single cluster, unchanged: they
//!   read their desired bucket and write status on their own server, so they keep reconciling
//!   the last desired state, and keep reporting, while the hub is unreachable.
//! * On the hub, per cluster, in domain [`HUB_DOMAIN`]:
//!   * [`desired_bucket`] `kubeflow-fleet-desired-<cluster>`: the cluster's desired component
//!     specs, the keys and values of the spoke's `kubeflow-desired-<component>` buckets. Written
//!     by the meta-operator.
//!   * [`status_bucket`] `kubeflow-fleet-status-<cluster>`: what the cluster reports (see
//!     [`StatusKey`]). Written only by that cluster.
//! * The spoke's fleet agent ([`crate::bus::Identity::FleetAgent`]) relays between the two:
//!   hub desired → spoke desired, spoke status and heartbeats → hub status, and its own heartbeat.
//!   Both sides are key-value buckets holding the latest value per key, so after a partition the
//!   agent relists and converges: a replayed key changes nothing, and nothing written while the
//!   link was down is lost.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::bus::{Heartbeat, Identity, Permissions};
use crate::component::ComponentKind;

/// The hub's JetStream domain; spoke clusters' domains are their names, which may not be this.
pub const HUB_DOMAIN: &str = "hub";
pub const FLEET_DESIRED_PREFIX: &str = "kubeflow-fleet-desired-";
pub const FLEET_STATUS_PREFIX: &str = "kubeflow-fleet-status-";
/// Longest cluster name: a DNS label (the registration's name), which is also a NATS subject
/// token, a bucket name and a JetStream domain.
pub const MAX_CLUSTER_NAME: usize = 63;

/// A registered cluster's name, checked: 1–63 lowercase letters, digits and `-`, starting with a
/// letter and ending with a letter or digit, and not [`HUB_DOMAIN`].
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct ClusterName(String);

impl ClusterName {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ClusterName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl FromStr for ClusterName {
    type Err = String;

    fn from_str(name: &str) -> Result<Self, String> {
        let allowed = "allowed: 1-63 lowercase letters, digits and '-', starting with a letter and ending with a letter or digit";
        let chars_ok = name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
        let ends_ok = name.starts_with(|c: char| c.is_ascii_lowercase()) && name.ends_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit());
        if name.is_empty() || name.len() > MAX_CLUSTER_NAME || !chars_ok || !ends_ok {
            return Err(format!("{name:?} is not a cluster name; {allowed}"));
        }
        if name == HUB_DOMAIN {
            return Err(format!("{name:?} is the hub's JetStream domain and cannot name a spoke cluster"));
        }
        Ok(ClusterName(name.to_string()))
    }
}

impl TryFrom<String> for ClusterName {
    type Error = String;
    fn try_from(name: String) -> Result<Self, String> {
        name.parse()
    }
}

impl From<ClusterName> for String {
    fn from(name: ClusterName) -> String {
        name.0
    }
}

/// The hub bucket holding `cluster`'s desired component specs.
pub fn desired_bucket(cluster: &ClusterName) -> String {
    format!("{FLEET_DESIRED_PREFIX}{cluster}")
}

/// The hub bucket holding what `cluster` reports.
pub fn status_bucket(cluster: &ClusterName) -> String {
    format!("{FLEET_STATUS_PREFIX}{cluster}")
}

/// Prefix of the reply subjects of `cluster`'s agent: the hub delivers to a leaf connection only
/// the replies under its own cluster's prefix.
pub fn agent_inbox_prefix(cluster: &ClusterName) -> String {
    format!("{}.{cluster}", Identity::FleetAgent.inbox_prefix())
}

/// The JetStream API of the hub's domain, as a spoke's client addresses it.
pub fn hub_api(subject: &str) -> String {
    format!("$JS.{HUB_DOMAIN}.API.{subject}")
}

/// A key of a cluster's [`status_bucket`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StatusKey {
    /// `agent`: the agent's [`AgentHeartbeat`].
    Agent,
    /// `operators.<component>`: the [`Heartbeat`] of the cluster's operator of that component.
    Operator(ComponentKind),
    /// `<component>.<namespace>.<name>`: a [`crate::bus::StatusReport`], keyed as in the
    /// cluster's own status bucket.
    Report(ComponentKind, String, String),
}

const AGENT_KEY: &str = "agent";
const OPERATORS_KEY: &str = "operators";

impl StatusKey {
    pub fn key(&self) -> String {
        match self {
            StatusKey::Agent => AGENT_KEY.into(),
            StatusKey::Operator(component) => format!("{OPERATORS_KEY}.{}", component.name()),
            StatusKey::Report(component, namespace, name) => crate::bus::key(*component, namespace, name),
        }
    }

    pub fn parse(key: &str) -> Option<StatusKey> {
        if key == AGENT_KEY {
            return Some(StatusKey::Agent);
        }
        if let Some(component) = key.strip_prefix(OPERATORS_KEY).and_then(|rest| rest.strip_prefix('.')) {
            return component.parse().ok().map(StatusKey::Operator);
        }
        crate::bus::parse_key(key).map(|(component, namespace, name)| StatusKey::Report(component, namespace, name))
    }
}

/// A spoke agent's heartbeat: the hub shows a cluster as last heard from at `at`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct AgentHeartbeat {
    pub cluster: ClusterName,
    /// The agent's own version.
    pub version: String,
    /// Unix seconds.
    pub at: u64,
}

/// How often an agent refreshes its heartbeat, and after how long the hub calls a cluster stale.
pub const AGENT_HEARTBEAT_EVERY: std::time::Duration = std::time::Duration::from_secs(5);
pub const AGENT_STALE: std::time::Duration = std::time::Duration::from_secs(30);

/// What `cluster`'s leaf connection may do on the hub (the permissions of its NKey user there):
/// read its own desired bucket (a key-value watch: an ordered consumer, made again after a gap,
/// answering flow control) and write its own status bucket, and nothing else. As for a client,
/// `publish` is what the spoke may send into the hub and `subscribe` what the hub may deliver to
/// it; the hub also tells the spoke's server, which refuses the rest at once. JetStream's own
/// subjects (`$JS.API`, `$KV`) never cross a leaf between two domains: the spoke reaches the hub's
/// through the domain's prefix only ([`hub_api`]; a key-value put to the hub is
/// `$JS.hub.API.$KV.<bucket>.<key>`).
pub fn leaf_permissions(cluster: &ClusterName) -> Permissions {
    let desired = format!("KV_{}", desired_bucket(cluster));
    let status = format!("KV_{}", status_bucket(cluster));
    Permissions {
        publish: vec![
            hub_api(&format!("STREAM.INFO.{desired}")),
            hub_api(&format!("STREAM.INFO.{status}")),
            hub_api(&format!("CONSUMER.CREATE.{desired}")),
            hub_api(&format!("CONSUMER.CREATE.{desired}.>")),
            format!("$JS.FC.{desired}.>"),
            hub_api(&format!("$KV.{}.>", status_bucket(cluster))),
        ],
        subscribe: vec![format!("{}.>", agent_inbox_prefix(cluster))],
    }
}

/// What the meta-operator may do on the hub's server: its own permissions ([`Identity::permissions`])
/// and writing each registered cluster's desired bucket.
pub fn hub_meta_operator_permissions(clusters: &[ClusterName]) -> Permissions {
    let mut permissions = Identity::MetaOperator.permissions();
    permissions.publish.extend(clusters.iter().map(|cluster| format!("$KV.{}.>", desired_bucket(cluster))));
    permissions
}

/// What `cluster`'s agent may relay: a hub desired-state entry is written to the spoke only when
/// its key is one of the contract's and its value a [`crate::bus::DesiredComponent`] of that key's
/// component and KfDef, placed on `cluster`. The hub is trusted to say what to install, not to be
/// well-formed.
pub fn check_desired(cluster: &ClusterName, key: &str, value: &[u8]) -> Result<ComponentKind, String> {
    let (component, namespace, name) = crate::bus::parse_key(key).ok_or_else(|| format!("key {key:?} is not <component>.<namespace>.<name>"))?;
    let desired: crate::bus::DesiredComponent = serde_json::from_slice(value).map_err(|e| format!("key {key:?}: not a desired component spec: {e}"))?;
    if desired.component != component || desired.kfdef.namespace != namespace || desired.kfdef.name != name {
        return Err(format!(
            "key {key:?} holds the spec of {} {}/{}; a key holds its own component's spec only",
            desired.component.name(),
            desired.kfdef.namespace,
            desired.kfdef.name
        ));
    }
    if desired.cluster.as_deref() != Some(cluster.as_str()) {
        return Err(format!("key {key:?}: field cluster is {:?}; allowed: {:?}, the cluster whose bucket holds it", desired.cluster, cluster.as_str()));
    }
    Ok(component)
}

/// A cluster's report, as the hub reads it back (see [`StatusKey`]).
#[derive(Clone, Debug, PartialEq)]
pub enum ClusterReport {
    Agent(AgentHeartbeat),
    Operator(Heartbeat),
    Report(ComponentKind, String, String, crate::bus::StatusReport),
}

/// Decodes an entry of `cluster`'s [`status_bucket`]; anything else is refused, naming the key. An
/// agent heartbeat in another cluster's name is refused too: a spoke speaks only for itself.
pub fn parse_report(cluster: &ClusterName, key: &str, value: &[u8]) -> Result<ClusterReport, String> {
    let decode_error = |e: serde_json::Error| format!("key {key:?}: {e}");
    match StatusKey::parse(key).ok_or_else(|| format!("key {key:?} is not agent, operators.<component> or <component>.<namespace>.<name>"))? {
        StatusKey::Agent => {
            let beat: AgentHeartbeat = serde_json::from_slice(value).map_err(decode_error)?;
            if &beat.cluster != cluster {
                return Err(format!("key {key:?}: heartbeat of cluster {} in cluster {cluster}'s bucket", beat.cluster));
            }
            Ok(ClusterReport::Agent(beat))
        }
        StatusKey::Operator(component) => {
            let beat: Heartbeat = serde_json::from_slice(value).map_err(decode_error)?;
            if beat.component.is_some_and(|c| c != component) {
                return Err(format!("key {key:?}: heartbeat of another component's operator"));
            }
            Ok(ClusterReport::Operator(beat))
        }
        StatusKey::Report(component, namespace, name) => Ok(ClusterReport::Report(component, namespace, name, serde_json::from_slice(value).map_err(decode_error)?)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bus::{DesiredComponent, KfDefRef};

    fn cluster(name: &str) -> ClusterName {
        name.parse().unwrap()
    }

    #[test]
    fn cluster_names_are_dns_labels_other_than_the_hubs_domain() {
        for good in ["a", "eu-west-1", "team-7"] {
            assert_eq!(cluster(good).as_str(), good);
        }
        for bad in ["", "Prod", "eu.west", "-a", "a-", "1st", "a_b", "a b", &"x".repeat(64)] {
            let refused = bad.parse::<ClusterName>().unwrap_err();
            assert!(refused.contains("allowed: 1-63 lowercase letters"), "{bad:?}: {refused}");
        }
        assert!("hub".parse::<ClusterName>().unwrap_err().contains("hub's JetStream domain"));
        assert!(serde_json::from_str::<ClusterName>("\"Prod\"").is_err());
        assert_eq!(serde_json::to_string(&cluster("a")).unwrap(), "\"a\"");
    }

    #[test]
    fn a_clusters_leaf_may_read_its_desired_state_and_write_its_status_only() {
        let a = leaf_permissions(&cluster("spoke-a"));
        assert_eq!(a.subscribe, ["_INBOX.fleet-agent.spoke-a.>"]);
        for allowed in ["$JS.hub.API.CONSUMER.CREATE.KV_kubeflow-fleet-desired-spoke-a.>", "$JS.hub.API.$KV.kubeflow-fleet-status-spoke-a.>", "$JS.FC.KV_kubeflow-fleet-desired-spoke-a.>"] {
            assert!(a.publish.iter().any(|p| p == allowed), "{allowed} missing from {:?}", a.publish);
        }
        for subject in &a.publish {
            // Another cluster's buckets (a name that extends this one's included), desired state
            // written, a stream or consumer made or removed at will, messages read by sequence.
            assert!(!subject.contains("spoke-a-") && !subject.contains("spoke-b"), "{subject}");
            assert!(!subject.contains("$KV.kubeflow-fleet-desired") && !subject.contains("$KV.kubeflow-desired"), "{subject}");
            assert!(!subject.contains("STREAM.CREATE") && !subject.contains("STREAM.DELETE") && !subject.contains("PURGE") && !subject.contains("MSG.GET") && !subject.contains("DIRECT.GET"), "{subject}");
            assert!(!subject.ends_with(".API.>") && subject != ">", "{subject}");
        }
        let meta = hub_meta_operator_permissions(&[cluster("spoke-a"), cluster("spoke-b")]);
        for allowed in ["$KV.kubeflow-fleet-desired-spoke-a.>", "$KV.kubeflow-fleet-desired-spoke-b.>", "$KV.kubeflow-desired-katib.>"] {
            assert!(meta.publish.iter().any(|p| p == allowed), "{allowed} missing from {:?}", meta.publish);
        }
        assert!(!meta.publish.iter().any(|p| p.contains("fleet-status")), "{:?}", meta.publish);
    }

    fn desired(component: ComponentKind, namespace: &str, name: &str, cluster: &str) -> Vec<u8> {
        let value = DesiredComponent {
            kfdef: KfDefRef { namespace: namespace.into(), name: name.into(), uid: "u".into(), generation: 1 },
            component,
            spec_hash: "h".into(),
            spec: serde_json::json!({"version": "v1"}),
            traceparent: None,
            preview: None,
            cluster: Some(cluster.into()),
        };
        serde_json::to_vec(&value).unwrap()
    }

    #[test]
    fn only_a_keys_own_desired_spec_is_relayed() {
        let a = cluster("spoke-a");
        assert_eq!(check_desired(&a, "katib.kubeflow.kf", &desired(ComponentKind::Katib, "kubeflow", "kf", "spoke-a")), Ok(ComponentKind::Katib));
        let other_component = check_desired(&a, "katib.kubeflow.kf", &desired(ComponentKind::Istio, "kubeflow", "kf", "spoke-a")).unwrap_err();
        assert!(other_component.contains("holds the spec of istio kubeflow/kf"), "{other_component}");
        assert!(check_desired(&a, "katib.kubeflow.kf", &desired(ComponentKind::Katib, "team", "kf", "spoke-a")).unwrap_err().contains("own component's spec"));
        let other_cluster = check_desired(&a, "katib.kubeflow.kf", &desired(ComponentKind::Katib, "kubeflow", "kf", "spoke-b")).unwrap_err();
        assert!(other_cluster.contains("field cluster is Some(\"spoke-b\"); allowed: \"spoke-a\""), "{other_cluster}");
        assert!(check_desired(&a, "seldon.kubeflow.kf", b"{}").unwrap_err().contains("is not <component>"));
        assert!(check_desired(&a, "katib.kubeflow.kf", b"{\"spec\": 1}").unwrap_err().contains("not a desired component spec"));
    }

    #[test]
    fn status_keys_round_trip_and_a_spoke_speaks_only_for_itself() {
        for key in [StatusKey::Agent, StatusKey::Operator(ComponentKind::Dex), StatusKey::Report(ComponentKind::Katib, "kubeflow".into(), "kf.prod".into())] {
            assert_eq!(StatusKey::parse(&key.key()), Some(key));
        }
        assert_eq!(StatusKey::parse("operators.seldon"), None);
        let a = cluster("spoke-a");
        let beat = |name: &str| serde_json::to_vec(&AgentHeartbeat { cluster: cluster(name), version: "0.3.0".into(), at: 9 }).unwrap();
        assert!(matches!(parse_report(&a, "agent", &beat("spoke-a")), Ok(ClusterReport::Agent(AgentHeartbeat { at: 9, .. }))));
        assert!(parse_report(&a, "agent", &beat("spoke-b")).unwrap_err().contains("heartbeat of cluster spoke-b in cluster spoke-a's bucket"));
        let dex_beat = serde_json::to_vec(&Heartbeat { operator: "dex-operator".into(), version: "0.3.0".into(), at: 1, component: Some(ComponentKind::Dex), releases: vec![] }).unwrap();
        assert!(matches!(parse_report(&a, "operators.dex", &dex_beat), Ok(ClusterReport::Operator(_))));
        assert!(parse_report(&a, "operators.katib", &dex_beat).unwrap_err().contains("another component's operator"));
        let report = serde_json::to_vec(&crate::bus::StatusReport { spec_hash: "h".into(), ready: true, ..Default::default() }).unwrap();
        assert!(matches!(parse_report(&a, "katib.kubeflow.kf", &report), Ok(ClusterReport::Report(ComponentKind::Katib, _, _, r)) if r.ready));
        assert!(parse_report(&a, "nonsense", b"{}").unwrap_err().contains("key \"nonsense\""));
    }
}
