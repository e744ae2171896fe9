//! A spoke cluster's fleet agent ([`kubeflow_crds::fleet`]): it joins the cluster's own bus to the
//! hub's, over the leaf node connection the cluster's nats-server opens to the hub.
//!
//! * **Desired state in.** It watches the hub's `kubeflow-fleet-desired-<cluster>` and writes each
//!   entry into the cluster's `kubeflow-desired-<component>` bucket under the same key, where the
//!   component operators read it as in a single cluster. An entry that is not a well-formed
//!   desired spec of its key's component is refused and logged, and changes nothing.
//! * **Nothing removed on absence.** A key goes from the cluster only when the hub deletes it
//!   (a delete marker), never because a listing of the hub lacks it: a hub that lost or recreated
//!   its bucket uninstalls nothing.
//! * **Status out.** It watches the cluster's `kubeflow-status` and `kubeflow-operators` and
//!   writes them into the hub's `kubeflow-fleet-status-<cluster>`, with its own heartbeat.
//!   What the hub could not take (the link is down) is written once it can.
//!
//! The agent needs no Kubernetes credentials: it only moves bytes between two buckets, and the
//! hub's leaf permissions let it read and write nothing but its own cluster's (its desired bucket
//! through the hub's gate, [`fleet::check_leaf_api`]).

use std::collections::BTreeMap;
use std::time::Duration;

use async_nats::jetstream::{self, kv};
use backoff::backoff::Backoff;
use futures::StreamExt;
use kubeflow_crds::ComponentKind;
use kubeflow_crds::bus::{self, OPERATORS_BUCKET, STATUS_BUCKET};
use kubeflow_crds::fleet::{self, AgentHeartbeat, ClusterName, StatusKey};
use operator_runtime::{nats, retry};
use tracing::{info, warn};

/// What a hub desired-state entry asks of the cluster.
#[derive(Debug, PartialEq)]
pub enum LocalChange {
    Put { component: ComponentKind, key: String, value: Vec<u8> },
    Delete { component: ComponentKind, key: String },
    Refused(String),
}

/// The change a hub entry (`key`, a put of `value` or a delete) makes in `cluster`'s buckets.
pub fn desired_change(cluster: &ClusterName, key: &str, operation: kv::Operation, value: &[u8]) -> LocalChange {
    match operation {
        kv::Operation::Put => match fleet::check_desired(cluster, key, value) {
            Ok(component) => LocalChange::Put { component, key: key.to_string(), value: value.to_vec() },
            Err(reason) => LocalChange::Refused(reason),
        },
        kv::Operation::Delete | kv::Operation::Purge => match bus::parse_key(key) {
            Some((component, _, _)) => LocalChange::Delete { component, key: key.to_string() },
            None => LocalChange::Refused(format!("delete of key {key:?}, which is not <component>.<namespace>.<name>")),
        },
    }
}

/// The hub key of a cluster entry: a status report keeps its key, an operator's heartbeat (keyed
/// by component) goes under `operators.<component>`. `None`: not an entry of the contract.
pub fn hub_status_key(bucket: &str, key: &str) -> Option<String> {
    match bucket {
        STATUS_BUCKET => bus::parse_key(key).map(|(component, namespace, name)| StatusKey::Report(component, namespace, name).key()),
        OPERATORS_BUCKET => key.parse::<ComponentKind>().ok().map(|component| StatusKey::Operator(component).key()),
        _ => None,
    }
}

/// The cluster's latest value per hub key, and what the hub was last seen to take. A key is
/// written to the hub while the two differ; after a failed write nothing is taken as known, so
/// everything is written again once the hub answers (it may have lost what it had).
#[derive(Default, Debug)]
pub struct Outbox {
    current: BTreeMap<String, Option<Vec<u8>>>,
    sent: BTreeMap<String, Option<Vec<u8>>>,
}

impl Outbox {
    pub fn set(&mut self, key: String, value: Option<Vec<u8>>) {
        self.current.insert(key, value);
    }

    /// Whether the hub has every entry.
    pub fn settled(&self) -> bool {
        self.current.iter().all(|(k, v)| self.sent.get(k) == Some(v))
    }

    /// The entries the hub does not have yet, in key order.
    pub fn pending(&self) -> Vec<(String, Option<Vec<u8>>)> {
        self.current.iter().filter(|(k, v)| self.sent.get(*k) != Some(*v)).map(|(k, v)| (k.clone(), v.clone())).collect()
    }

    pub fn sent(&mut self, key: String, value: Option<Vec<u8>>) {
        self.sent.insert(key, value);
    }

    pub fn failed(&mut self) {
        self.sent.clear();
    }
}

fn nats_retry() -> backoff::ExponentialBackoff {
    retry::exponential(Duration::from_millis(500), Duration::from_secs(10))
}

/// Hub desired state → the cluster's desired buckets, for as long as the process runs; `hub` is
/// the hub's API as the cluster's gate passes it on ([`fleet::leaf_api_prefix`]). The
/// watch is made again (and so the hub listed again) whenever it ends or fails: each entry is
/// the latest value of its key, so a replay changes nothing. The cluster's buckets are made with
/// `replicas` copies when missing.
pub async fn relay_desired(cluster: ClusterName, hub: jetstream::Context, local: jetstream::Context, replicas: usize) {
    let bucket = fleet::desired_bucket(&cluster);
    let mut delays = nats_retry();
    loop {
        let opened = async {
            let hub_desired = hub.get_key_value(&bucket).await.map_err(|e| format!("hub bucket {bucket}: {e}"))?;
            let (locals, _, _) = nats::ensure_buckets(&local, replicas).await.map_err(|e| e.to_string())?;
            let watch = nats::watch(|| hub_desired.watch_with_history(">")).await.map_err(|e| format!("watch of {bucket}: {e}"))?;
            Ok::<_, String>((locals, watch))
        };
        let (locals, mut watch) = match opened.await {
            Ok(opened) => opened,
            Err(error) => {
                warn!(%error, "cannot read the hub's desired state yet; retrying");
                tokio::time::sleep(delays.next_backoff().unwrap_or(retry::MAX)).await;
                continue;
            }
        };
        info!(%bucket, "relaying the hub's desired state");
        while let Some(entry) = watch.next().await {
            let entry = match entry {
                Ok(entry) => entry,
                Err(error) => {
                    warn!(%error, "the hub's desired state watch failed; listing again");
                    break;
                }
            };
            delays.reset();
            let written = match desired_change(&cluster, &entry.key, entry.operation, &entry.value) {
                LocalChange::Put { component, key, value } => locals[&component].put(&key, value.into()).await.map(drop).map_err(|e| e.to_string()),
                LocalChange::Delete { component, key } => locals[&component].delete(&key).await.map_err(|e| e.to_string()),
                LocalChange::Refused(reason) => {
                    warn!(%reason, revision = entry.revision, "hub desired-state entry refused; the cluster keeps what it has");
                    Ok(())
                }
            };
            if let Err(error) = written {
                warn!(%error, key = %entry.key, "cannot write the cluster's desired state; listing again");
                break;
            }
        }
        tokio::time::sleep(delays.next_backoff().unwrap_or(retry::MAX)).await;
    }
}

/// The cluster's status reports and operator heartbeats → the hub's status bucket, with the
/// agent's heartbeat every [`fleet::AGENT_HEARTBEAT_EVERY`].
pub async fn relay_status(cluster: ClusterName, hub: jetstream::Context, local: jetstream::Context, replicas: usize) {
    let bucket = fleet::status_bucket(&cluster);
    let mut outbox = Outbox::default();
    let mut hub_status: Option<kv::Store> = None;
    let mut delays = nats_retry();
    loop {
        let opened = async {
            let (_, status, operators) = nats::ensure_buckets(&local, replicas).await.map_err(|e| e.to_string())?;
            let reports = nats::watch(|| status.watch_with_history(">")).await.map_err(|e| e.to_string())?;
            let beats = nats::watch(|| operators.watch_with_history(">")).await.map_err(|e| e.to_string())?;
            Ok::<_, String>(futures::stream::select(reports, beats))
        };
        let mut entries = match opened.await {
            Ok(entries) => entries,
            Err(error) => {
                warn!(%error, "cannot read the cluster's status yet; retrying");
                tokio::time::sleep(delays.next_backoff().unwrap_or(retry::MAX)).await;
                continue;
            }
        };
        let mut retry_tick = tokio::time::interval(Duration::from_millis(500));
        // Not polled while nothing is pending: no burst of missed ticks when something is again.
        retry_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut heartbeat = tokio::time::interval(fleet::AGENT_HEARTBEAT_EVERY);
        loop {
            tokio::select! {
                entry = entries.next() => {
                    let Some(Ok(entry)) = entry else {
                        warn!("a watch of the cluster's status ended; listing again");
                        break;
                    };
                    let Some(key) = hub_status_key(&entry.bucket, &entry.key) else { continue };
                    let value = matches!(entry.operation, kv::Operation::Put).then(|| entry.value.to_vec());
                    outbox.set(key, value);
                }
                _ = heartbeat.tick() => {
                    let beat = AgentHeartbeat { cluster: cluster.clone(), version: env!("CARGO_PKG_VERSION").into(), at: nats::now_unix() };
                    outbox.set(StatusKey::Agent.key(), Some(serde_json::to_vec(&beat).expect("heartbeats serialise")));
                }
                _ = retry_tick.tick(), if !outbox.settled() => {}
            }
            // Sent as soon as it changed; what the hub did not take, again on the next tick.
            flush(&hub, &bucket, &mut hub_status, &mut outbox).await;
        }
        tokio::time::sleep(delays.next_backoff().unwrap_or(retry::MAX)).await;
    }
}

/// Writes what the hub lacks into its status `bucket`, opening it first when needed; on a failed
/// write, stops and forgets what the hub was known to hold.
async fn flush(hub: &jetstream::Context, bucket: &str, hub_status: &mut Option<kv::Store>, outbox: &mut Outbox) {
    if outbox.settled() {
        return;
    }
    if hub_status.is_none() {
        *hub_status = hub.get_key_value(bucket).await.map_err(|error| warn!(%error, %bucket, "the hub's status bucket is not reachable")).ok();
    }
    let Some(store) = hub_status.as_ref() else { return };
    for (key, value) in outbox.pending() {
        let written = match &value {
            Some(bytes) => store.put(&key, bytes.clone().into()).await.map(drop).map_err(|e| e.to_string()),
            None => store.delete(&key).await.map_err(|e| e.to_string()),
        };
        match written {
            Ok(()) => outbox.sent(key, value),
            Err(error) => {
                warn!(%error, %key, "the hub did not take a status entry; writing everything again once it does");
                outbox.failed();
                *hub_status = None;
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kubeflow_crds::bus::{DesiredComponent, KfDefRef};

    fn desired(component: ComponentKind, cluster: &str) -> Vec<u8> {
        let value = DesiredComponent {
            kfdef: KfDefRef { namespace: "kubeflow".into(), name: "kf".into(), uid: "u".into(), generation: 3 },
            component,
            spec_hash: "h".into(),
            spec: serde_json::json!({"version": "v0.11.0"}),
            traceparent: None,
            preview: None,
            cluster: Some(cluster.into()),
        };
        serde_json::to_vec(&value).unwrap()
    }

    #[test]
    fn a_hub_entry_lands_in_its_components_bucket_or_nowhere() {
        let a: ClusterName = "spoke-a".parse().unwrap();
        let value = desired(ComponentKind::Katib, "spoke-a");
        assert_eq!(desired_change(&a, "katib.kubeflow.kf", kv::Operation::Put, &value), LocalChange::Put { component: ComponentKind::Katib, key: "katib.kubeflow.kf".into(), value: value.clone() });
        assert_eq!(desired_change(&a, "katib.kubeflow.kf", kv::Operation::Delete, b""), LocalChange::Delete { component: ComponentKind::Katib, key: "katib.kubeflow.kf".into() });
        assert_eq!(desired_change(&a, "katib.kubeflow.kf", kv::Operation::Purge, b""), LocalChange::Delete { component: ComponentKind::Katib, key: "katib.kubeflow.kf".into() });
        // Another component's spec under Katib's key, another cluster's spec, garbage, an unknown
        // key: nothing written.
        assert!(matches!(desired_change(&a, "katib.kubeflow.kf", kv::Operation::Put, &desired(ComponentKind::Istio, "spoke-a")), LocalChange::Refused(r) if r.contains("holds the spec of istio")));
        assert!(matches!(desired_change(&a, "katib.kubeflow.kf", kv::Operation::Put, &desired(ComponentKind::Katib, "spoke-b")), LocalChange::Refused(r) if r.contains("field cluster")));
        assert!(matches!(desired_change(&a, "katib.kubeflow.kf", kv::Operation::Put, b"\xff"), LocalChange::Refused(_)));
        assert!(matches!(desired_change(&a, "agent", kv::Operation::Delete, b""), LocalChange::Refused(r) if r.contains("\"agent\"")));
    }

    #[test]
    fn status_and_heartbeats_go_under_the_hubs_keys() {
        assert_eq!(hub_status_key(STATUS_BUCKET, "katib.kubeflow.kf").as_deref(), Some("katib.kubeflow.kf"));
        assert_eq!(hub_status_key(OPERATORS_BUCKET, "dex").as_deref(), Some("operators.dex"));
        assert_eq!(hub_status_key(OPERATORS_BUCKET, "seldon"), None);
        assert_eq!(hub_status_key(STATUS_BUCKET, "nonsense"), None);
        assert_eq!(hub_status_key("kubeflow-desired-katib", "katib.kubeflow.kf"), None);
    }

    #[test]
    fn the_outbox_writes_what_the_hub_lacks_and_everything_after_a_failure() {
        let mut outbox = Outbox::default();
        outbox.set("a".into(), Some(b"1".to_vec()));
        outbox.set("b".into(), None);
        assert_eq!(outbox.pending(), [("a".to_string(), Some(b"1".to_vec())), ("b".to_string(), None)]);
        outbox.sent("a".into(), Some(b"1".to_vec()));
        outbox.sent("b".into(), None);
        assert!(outbox.pending().is_empty() && outbox.settled());
        // The same value again is not written again; a new one is.
        outbox.set("a".into(), Some(b"1".to_vec()));
        assert!(outbox.pending().is_empty());
        outbox.set("a".into(), Some(b"2".to_vec()));
        assert_eq!(outbox.pending(), [("a".to_string(), Some(b"2".to_vec()))]);
        outbox.failed();
        assert_eq!(outbox.pending().len(), 2);
    }
}
