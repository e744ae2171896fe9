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
//! * A spoke reaches the hub's JetStream API for its desired bucket only through the hub's gate
//!   ([`leaf_api_prefix`], checked by [`check_leaf_api`]): it may read the stream's info and make
//!   ephemeral consumers that are pulled or deliver under its own inbox (and remove them), at most
//!   [`MAX_LEAF_CONSUMERS`] at once. Its leaf user may not address the API itself, so no consumer
//!   configuration reaches the server unchecked.
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
/// answering flow control) through the gate ([`leaf_api_prefix`]) and write its own status
/// bucket, and nothing else. As for a client, `publish` is what the spoke may send into the hub
/// and `subscribe` what the hub may deliver to it; the hub also tells the spoke's server, which
/// refuses the rest at once. JetStream's own subjects (`$JS.API`, `$KV`) never cross a leaf
/// between two domains: the spoke reaches the hub's through the domain's prefix only
/// ([`hub_api`]; a key-value put to the hub is `$JS.hub.API.$KV.<bucket>.<key>`).
pub fn leaf_permissions(cluster: &ClusterName) -> Permissions {
    let desired = format!("KV_{}", desired_bucket(cluster));
    let status = format!("KV_{}", status_bucket(cluster));
    Permissions {
        publish: vec![
            format!("{}.>", leaf_api_prefix(cluster)),
            hub_api(&format!("STREAM.INFO.{status}")),
            format!("$JS.FC.{desired}.>"),
            hub_api(&format!("$KV.{}.>", status_bucket(cluster))),
        ],
        subscribe: vec![format!("{}.>", agent_inbox_prefix(cluster))],
    }
}

/// Subjects of the hub's gate to the JetStream API, one prefix per cluster: a spoke's agent uses
/// `fleet.api.<cluster>` as its API prefix for the desired bucket (`fleet.api.<cluster>.STREAM.INFO.…`
/// for `$JS.API.STREAM.INFO.…`).
pub const LEAF_API: &str = "fleet.api";

/// `cluster`'s API prefix at the hub's gate.
pub fn leaf_api_prefix(cluster: &ClusterName) -> String {
    format!("{LEAF_API}.{cluster}")
}

/// Consumers a cluster's desired stream holds at once (its `max_consumers`: the server refuses
/// more): the agent's watch, and those of its watches made again after a gap, until they expire.
pub const MAX_LEAF_CONSUMERS: i64 = 8;
/// Longest a consumer of a cluster's desired stream outlives its last reader (the stream's
/// consumer limit, and the default of a consumer that sets none).
pub const MAX_LEAF_INACTIVE_THRESHOLD: std::time::Duration = std::time::Duration::from_secs(60);
/// Largest request the gate reads.
pub const MAX_LEAF_API_REQUEST: usize = 64 * 1024;

/// A request of a cluster's, let through: `payload` goes to `subject`, answered to the requester's
/// reply subject.
#[derive(Debug, PartialEq)]
pub struct LeafApiCall {
    pub subject: String,
    pub payload: Vec<u8>,
}

#[derive(Debug, PartialEq)]
pub enum LeafApiRefusal {
    /// Answered to the requester with this reason.
    Refused(String),
    /// Not answered: the request has no reply subject under the cluster's inbox, so an answer
    /// could land anywhere.
    Unanswerable(String),
}

/// What the gate does with a request `cluster`'s leaf sent to `subject` (under its
/// [`leaf_api_prefix`]), answered at `reply`, carrying `payload`. Let through, each with its
/// cluster's desired stream only: `STREAM.INFO`, `CONSUMER.MSG.NEXT` (a pull), `CONSUMER.DELETE` and `CONSUMER.CREATE`
/// of an ephemeral consumer that is pulled or delivers under the cluster's own inbox
/// ([`agent_inbox_prefix`]), with no deliver group and an inactive threshold of at most
/// [`MAX_LEAF_INACTIVE_THRESHOLD`]. A consumer's request is passed on as it was read, so what
/// the server sees is what was checked.
pub fn check_leaf_api(cluster: &ClusterName, subject: &str, reply: Option<&str>, payload: &[u8]) -> Result<LeafApiCall, LeafApiRefusal> {
    let inbox = format!("{}.", agent_inbox_prefix(cluster));
    match reply {
        Some(reply) if reply.starts_with(&inbox) && reply.len() > inbox.len() && !reply.contains(['*', '>', ' ']) => {}
        _ => return Err(LeafApiRefusal::Unanswerable(format!("reply subject {reply:?} is not under {inbox}"))),
    }
    let refused = |reason: String| Err(LeafApiRefusal::Refused(reason));
    let Some(api) = subject.strip_prefix(&format!("{}.", leaf_api_prefix(cluster))) else {
        return refused(format!("subject {subject:?} is not under {}", leaf_api_prefix(cluster)));
    };
    if payload.len() > MAX_LEAF_API_REQUEST {
        return refused(format!("request of {} bytes; allowed: at most {MAX_LEAF_API_REQUEST}", payload.len()));
    }
    let stream = format!("KV_{}", desired_bucket(cluster));
    let call = |payload: Vec<u8>| Ok(LeafApiCall { subject: format!("$JS.API.{api}"), payload });
    let allowed = format!("allowed: STREAM.INFO.{stream}, CONSUMER.CREATE.{stream}[.<name>[.<filter>]], CONSUMER.MSG.NEXT.{stream}.<consumer>, CONSUMER.DELETE.{stream}.<consumer>");
    if api == format!("STREAM.INFO.{stream}") {
        return call(payload.to_vec());
    }
    // A pull, and the removal of a consumer the watch made again after a gap (every consumer on
    // the stream is the cluster's own: the hub only writes it).
    for own in ["CONSUMER.MSG.NEXT", "CONSUMER.DELETE"] {
        if let Some(consumer) = api.strip_prefix(&format!("{own}.{stream}.")) {
            return if consumer.contains('.') { refused(format!("{api}: {allowed}")) } else { call(payload.to_vec()) };
        }
    }
    if api == format!("CONSUMER.CREATE.{stream}") || api.starts_with(&format!("CONSUMER.CREATE.{stream}.")) {
        return match check_leaf_consumer(&stream, &inbox, payload) {
            Ok(()) => call(payload.to_vec()),
            Err(reason) => refused(format!("{api}: {reason}")),
        };
    }
    refused(format!("{api}: {allowed}"))
}

/// A consumer creation request's checks (see [`check_leaf_api`]).
fn check_leaf_consumer(stream: &str, inbox: &str, payload: &[u8]) -> Result<(), String> {
    // Decoded strictly: every field the server reads is named here, and an unknown or duplicated
    // field is refused. (The server matches field names without regard to case: `Deliver_Subject`
    // would otherwise pass here unread and be taken there.)
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Request<'a> {
        stream_name: &'a str,
        #[serde(borrow)]
        config: Config<'a>,
        action: Option<IgnoredAny>,
        pedantic: Option<IgnoredAny>,
    }
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Config<'a> {
        #[serde(borrow)]
        durable_name: Option<Cow<'a, str>>,
        #[serde(borrow)]
        deliver_subject: Option<Cow<'a, str>>,
        #[serde(borrow)]
        deliver_group: Option<Cow<'a, str>>,
        inactive_threshold: Option<u64>,
        name: Option<IgnoredAny>,
        description: Option<IgnoredAny>,
        deliver_policy: Option<IgnoredAny>,
        opt_start_seq: Option<IgnoredAny>,
        opt_start_time: Option<IgnoredAny>,
        ack_policy: Option<IgnoredAny>,
        ack_wait: Option<IgnoredAny>,
        max_deliver: Option<IgnoredAny>,
        backoff: Option<IgnoredAny>,
        filter_subject: Option<IgnoredAny>,
        filter_subjects: Option<IgnoredAny>,
        replay_policy: Option<IgnoredAny>,
        rate_limit_bps: Option<IgnoredAny>,
        sample_freq: Option<IgnoredAny>,
        max_waiting: Option<IgnoredAny>,
        max_ack_pending: Option<IgnoredAny>,
        flow_control: Option<IgnoredAny>,
        headers_only: Option<IgnoredAny>,
        max_batch: Option<IgnoredAny>,
        max_expires: Option<IgnoredAny>,
        max_bytes: Option<IgnoredAny>,
        idle_heartbeat: Option<IgnoredAny>,
        num_replicas: Option<IgnoredAny>,
        mem_storage: Option<IgnoredAny>,
        metadata: Option<IgnoredAny>,
        pause_until: Option<IgnoredAny>,
        priority_groups: Option<IgnoredAny>,
        priority_policy: Option<IgnoredAny>,
        priority_timeout: Option<IgnoredAny>,
    }
    use serde::de::IgnoredAny;
    use std::borrow::Cow;
    let request: Request = serde_json::from_slice(payload).map_err(|e| format!("not a consumer creation request: {e}"))?;
    if request.stream_name != stream {
        return Err(format!("field stream_name is {:?}; allowed: {stream:?}", request.stream_name));
    }
    let config = request.config;
    if config.durable_name.as_deref().is_some_and(|d| !d.is_empty()) {
        return Err("field config.durable_name is set; allowed: none (ephemeral consumers only)".into());
    }
    if config.deliver_group.as_deref().is_some_and(|g| !g.is_empty()) {
        return Err("field config.deliver_group is set; allowed: none".into());
    }
    if let Some(deliver) = config.deliver_subject.as_deref().filter(|d| !d.is_empty())
        && (!deliver.starts_with(inbox) || deliver.len() == inbox.len() || deliver.contains(['*', '>', ' ']))
    {
        return Err(format!("field config.deliver_subject is {deliver:?}; allowed: none (a pull consumer) or a subject under {inbox}"));
    }
    let longest = MAX_LEAF_INACTIVE_THRESHOLD.as_nanos() as u64;
    // Unset, the stream's consumer limit applies (see `MAX_LEAF_INACTIVE_THRESHOLD`).
    match config.inactive_threshold {
        Some(ns) if ns > longest => Err(format!("field config.inactive_threshold is {ns} ns; allowed: at most {longest}")),
        _ => Ok(()),
    }
}

/// The body of the gate's answer to a refused request, as JetStream answers an error (async-nats
/// and the nats tools show its description).
pub fn leaf_api_refusal_answer(reason: &str) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({"type": "io.nats.jetstream.api.v1.error", "error": {"code": 403, "err_code": 10_000, "description": format!("refused by the hub: {reason}")}})).expect("a JSON value serialises")
}

/// What the meta-operator may do on the hub's server: its own permissions ([`Identity::permissions`]),
/// writing each registered cluster's desired bucket, and serving the clusters' gate
/// ([`leaf_api_prefix`]), whose refusals it answers to each cluster's agent.
pub fn hub_meta_operator_permissions(clusters: &[ClusterName]) -> Permissions {
    let mut permissions = Identity::MetaOperator.permissions();
    permissions.publish.extend(clusters.iter().map(|cluster| format!("$KV.{}.>", desired_bucket(cluster))));
    // The gate's refusals, answered to the cluster's agent.
    permissions.publish.extend(clusters.iter().map(|cluster| format!("{}.>", agent_inbox_prefix(cluster))));
    permissions.subscribe.push(format!("{LEAF_API}.*.>"));
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
        for allowed in ["fleet.api.spoke-a.>", "$JS.hub.API.$KV.kubeflow-fleet-status-spoke-a.>", "$JS.FC.KV_kubeflow-fleet-desired-spoke-a.>"] {
            assert!(a.publish.iter().any(|p| p == allowed), "{allowed} missing from {:?}", a.publish);
        }
        // Consumers are made through the gate only, which reads their configuration first.
        assert!(!a.publish.iter().any(|p| p.contains("CONSUMER")), "{:?}", a.publish);
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
        assert!(meta.subscribe.iter().any(|s| s == "fleet.api.*.>"), "{:?}", meta.subscribe);
    }

    const INBOX: &str = "_INBOX.fleet-agent.spoke-a.r1";
    const STREAM: &str = "KV_kubeflow-fleet-desired-spoke-a";

    fn create(config: serde_json::Value) -> Vec<u8> {
        serde_json::to_vec(&serde_json::json!({"stream_name": STREAM, "config": config, "action": "create"})).unwrap()
    }

    fn through_gate(subject: &str, payload: &[u8]) -> Result<LeafApiCall, LeafApiRefusal> {
        check_leaf_api(&cluster("spoke-a"), subject, Some(INBOX), payload)
    }

    fn refusal(subject: &str, payload: &[u8]) -> String {
        match through_gate(subject, payload) {
            Err(LeafApiRefusal::Refused(reason)) => reason,
            other => panic!("{subject}: expected a refusal, got {other:?}"),
        }
    }

    #[test]
    fn the_gate_passes_the_agents_watch_and_its_stream_info() {
        // What async-nats sends for a key-value watch: an ordered push consumer.
        let watch = create(serde_json::json!({
            "name": "w1", "deliver_subject": "_INBOX.fleet-agent.spoke-a.abc", "deliver_policy": "all", "ack_policy": "none",
            "max_deliver": 1, "filter_subject": "$KV.kubeflow-fleet-desired-spoke-a.>", "replay_policy": "instant", "flow_control": true,
            "idle_heartbeat": 5_000_000_000u64, "inactive_threshold": 30_000_000_000u64, "num_replicas": 1, "mem_storage": true, "headers_only": false,
        }));
        let subject = "fleet.api.spoke-a.CONSUMER.CREATE.KV_kubeflow-fleet-desired-spoke-a.w1.$KV.kubeflow-fleet-desired-spoke-a.>";
        let passed = through_gate(subject, &watch).unwrap();
        assert_eq!(passed.subject, "$JS.API.CONSUMER.CREATE.KV_kubeflow-fleet-desired-spoke-a.w1.$KV.kubeflow-fleet-desired-spoke-a.>");
        assert_eq!(passed.payload, watch, "passed on as read");
        // A pull consumer, and its pulls.
        assert!(through_gate("fleet.api.spoke-a.CONSUMER.CREATE.KV_kubeflow-fleet-desired-spoke-a", &create(serde_json::json!({"ack_policy": "explicit"}))).is_ok());
        assert_eq!(through_gate("fleet.api.spoke-a.CONSUMER.MSG.NEXT.KV_kubeflow-fleet-desired-spoke-a.p1", b"{\"batch\":1}").unwrap().subject, "$JS.API.CONSUMER.MSG.NEXT.KV_kubeflow-fleet-desired-spoke-a.p1");
        assert_eq!(through_gate("fleet.api.spoke-a.STREAM.INFO.KV_kubeflow-fleet-desired-spoke-a", b"").unwrap().subject, "$JS.API.STREAM.INFO.KV_kubeflow-fleet-desired-spoke-a");
        assert_eq!(through_gate("fleet.api.spoke-a.CONSUMER.DELETE.KV_kubeflow-fleet-desired-spoke-a.w0", b"").unwrap().subject, "$JS.API.CONSUMER.DELETE.KV_kubeflow-fleet-desired-spoke-a.w0");
    }

    #[test]
    fn the_gate_refuses_consumers_that_deliver_elsewhere_or_persist_naming_the_field() {
        let create_subject = "fleet.api.spoke-a.CONSUMER.CREATE.KV_kubeflow-fleet-desired-spoke-a";
        for elsewhere in ["_INBOX.fleet-agent.spoke-b.x", "$JS.API.STREAM.PURGE.KV_kubeflow-fleet-desired-spoke-b", "_INBOX.fleet-agent.spoke-a.", "_INBOX.fleet-agent.spoke-a-x.y", "_INBOX.fleet-agent.spoke-a.>"] {
            let reason = refusal(create_subject, &create(serde_json::json!({"deliver_subject": elsewhere})));
            assert!(reason.contains("field config.deliver_subject") && reason.contains("allowed: none (a pull consumer) or a subject under _INBOX.fleet-agent.spoke-a."), "{elsewhere}: {reason}");
        }
        assert!(refusal(create_subject, &create(serde_json::json!({"durable_name": "keep"}))).contains("field config.durable_name is set; allowed: none (ephemeral consumers only)"));
        assert!(refusal(create_subject, &create(serde_json::json!({"deliver_subject": INBOX, "deliver_group": "g"}))).contains("field config.deliver_group"));
        assert!(refusal(create_subject, &create(serde_json::json!({"inactive_threshold": 3_600_000_000_000u64}))).contains("field config.inactive_threshold is 3600000000000 ns; allowed: at most 60000000000"));
        // The server reads field names without regard to case, and the last of two: neither is
        // a way around the check.
        assert!(refusal(create_subject, &create(serde_json::json!({"Deliver_Subject": "$JS.API.STREAM.PURGE.x"}))).contains("unknown field `Deliver_Subject`"));
        let twice = format!(r#"{{"stream_name":"{STREAM}","config":{{"deliver_subject":"{INBOX}","deliver_subject":"elsewhere"}}}}"#);
        assert!(refusal(create_subject, twice.as_bytes()).contains("duplicate field `deliver_subject`"));
        let other_stream = serde_json::to_vec(&serde_json::json!({"stream_name": "KV_kubeflow-fleet-desired-spoke-b", "config": {}})).unwrap();
        assert!(refusal(create_subject, &other_stream).contains("field stream_name is \"KV_kubeflow-fleet-desired-spoke-b\""));
        assert!(refusal(create_subject, &vec![b' '; MAX_LEAF_API_REQUEST + 1]).contains("allowed: at most 65536"));
    }

    #[test]
    fn the_gate_lets_through_its_clusters_desired_stream_only_and_answers_only_its_inbox() {
        for api in [
            "CONSUMER.CREATE.KV_kubeflow-fleet-desired-spoke-b",
            "CONSUMER.DURABLE.CREATE.KV_kubeflow-fleet-desired-spoke-a.d",
            "CONSUMER.DELETE.KV_kubeflow-fleet-desired-spoke-b.w1",
            "STREAM.PURGE.KV_kubeflow-fleet-desired-spoke-a",
            "STREAM.INFO.KV_kubeflow-fleet-status-spoke-a",
            "DIRECT.GET.KV_kubeflow-fleet-desired-spoke-a",
            "CONSUMER.MSG.NEXT.KV_kubeflow-fleet-desired-spoke-a.p1.extra",
        ] {
            assert!(refusal(&format!("fleet.api.spoke-a.{api}"), &create(serde_json::json!({}))).contains("allowed: STREAM.INFO.KV_kubeflow-fleet-desired-spoke-a, CONSUMER.CREATE"), "{api}");
        }
        assert!(refusal("fleet.api.spoke-b.STREAM.INFO.KV_kubeflow-fleet-desired-spoke-b", b"").contains("is not under fleet.api.spoke-a"));
        let a = cluster("spoke-a");
        for reply in [None, Some("_INBOX.fleet-agent.spoke-b.r"), Some("$JS.API.STREAM.PURGE.x"), Some("_INBOX.fleet-agent.spoke-a.*")] {
            let answered = check_leaf_api(&a, "fleet.api.spoke-a.STREAM.INFO.KV_kubeflow-fleet-desired-spoke-a", reply, b"");
            assert!(matches!(answered, Err(LeafApiRefusal::Unanswerable(_))), "{reply:?}: {answered:?}");
        }
        let answer: serde_json::Value = serde_json::from_slice(&leaf_api_refusal_answer("why")).unwrap();
        assert_eq!(answer["error"]["description"], "refused by the hub: why");
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
