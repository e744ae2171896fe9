//! A fleet's bus on real nats-servers: a hub (JetStream domain `hub`) and two spoke clusters, each
//! with its own server and domain and a leaf node connection it opens to the hub with its
//! cluster's NKey over TLS, and a fleet agent per spoke ([`kubeflow_crds::fleet`]).

use std::time::Duration;

use async_nats::jetstream::{self, kv};
use futures::StreamExt;
use kubeflow_crds::ComponentKind;
use kubeflow_crds::bus::{DesiredComponent, Identity, KfDefRef, StatusReport};
use kubeflow_crds::fleet::{self, AgentHeartbeat};
use kubeflow_e2e::eventually;
use kubeflow_e2e::fleet::{Fleet, spoke_buckets};

/// `component`'s spec for KfDef `kubeflow/<name>`, placed on spoke-a (where the tests put it).
fn desired(component: ComponentKind, name: &str, version: &str) -> DesiredComponent {
    placed(component, name, version, "spoke-a")
}

fn placed(component: ComponentKind, name: &str, version: &str, cluster: &str) -> DesiredComponent {
    DesiredComponent {
        kfdef: KfDefRef { namespace: "kubeflow".into(), name: name.into(), uid: format!("uid-{name}"), generation: 1 },
        component,
        spec_hash: format!("hash-{version}"),
        spec: serde_json::json!({"version": version}),
        traceparent: None,
        preview: None,
        cluster: Some(cluster.into()),
    }
}

async fn put<T: serde::Serialize>(store: &kv::Store, key: &str, value: &T) {
    store.put(key, serde_json::to_vec(value).unwrap().into()).await.unwrap();
}

/// Waits until `found` holds for the value of `key` in `store` (`None`: deleted), from a watch,
/// which starts with the key's current value: every change is seen, and nothing waits longer than
/// the change takes. (Through a watch: the component operators may not read by key.)
async fn await_entry(store: &kv::Store, key: &str, what: &str, found: impl Fn(Option<&[u8]>) -> bool) {
    let mut watch = store.watch_with_history(key).await.unwrap();
    let mut last = None;
    let waited = tokio::time::timeout(Duration::from_secs(60), async {
        while let Some(Ok(entry)) = watch.next().await {
            let value = matches!(entry.operation, kv::Operation::Put).then(|| entry.value.to_vec());
            if found(value.as_deref()) {
                return;
            }
            last = Some(value.map(|v| String::from_utf8_lossy(&v).into_owned()));
        }
        panic!("the watch of {key} ended");
    })
    .await;
    assert!(waited.is_ok(), "{what}: not seen within 60 s; last seen: {last:?}");
}

fn is<T: serde::de::DeserializeOwned + PartialEq>(expected: T) -> impl Fn(Option<&[u8]>) -> bool {
    move |value| value.and_then(|v| serde_json::from_slice::<T>(v).ok()).is_some_and(|v| v == expected)
}

/// What the hub writes for a cluster reaches that cluster's component operators and no other; a
/// hub entry that is not its key's own spec changes nothing; a delete on the hub removes the key;
/// what a cluster reports, and its agent's heartbeat, reach the hub in that cluster's bucket.
#[tokio::test]
async fn a_clusters_desired_state_reaches_that_cluster_only_and_its_status_comes_back() {
    let fleet = Fleet::start(&["spoke-a", "spoke-b"]).await;
    let (a, b) = (&fleet.spokes[0], &fleet.spokes[1]);
    let hub_a = fleet.hub_bucket(fleet::desired_bucket(&a.name)).await;
    let hub_b = fleet.hub_bucket(fleet::desired_bucket(&b.name)).await;
    put(&hub_a, "katib.kubeflow.kf", &desired(ComponentKind::Katib, "kf", "v0.11.0")).await;
    put(&hub_b, "katib.kubeflow.other", &placed(ComponentKind::Katib, "other", "v0.10.0", "spoke-b")).await;
    let (a_katib, a_status) = spoke_buckets(a, ComponentKind::Katib).await;
    let (b_katib, _) = spoke_buckets(b, ComponentKind::Katib).await;
    await_entry(&a_katib, "katib.kubeflow.kf", "spoke-a's Katib spec on spoke-a", is(desired(ComponentKind::Katib, "kf", "v0.11.0"))).await;
    await_entry(&b_katib, "katib.kubeflow.other", "spoke-b's Katib spec on spoke-b", is(placed(ComponentKind::Katib, "other", "v0.10.0", "spoke-b"))).await;
    assert_eq!(keys(&a_katib).await, ["katib.kubeflow.kf"], "spoke-a holds only its own desired state");
    assert_eq!(keys(&b_katib).await, ["katib.kubeflow.other"], "spoke-b holds only its own desired state");

    // Istio's spec under a Katib key, and a spec placed on spoke-b in spoke-a's bucket, are
    // refused; the agent relays the hub's entries in order, so once the Dex spec written after
    // them has arrived, the refused ones would have too.
    put(&hub_a, "katib.kubeflow.forged", &desired(ComponentKind::Istio, "forged", "1.9.6")).await;
    put(&hub_a, "katib.kubeflow.misplaced", &placed(ComponentKind::Katib, "misplaced", "v0.11.0", "spoke-b")).await;
    put(&hub_a, "dex.kubeflow.kf", &desired(ComponentKind::Dex, "kf", "v2.24.0")).await;
    let (a_dex, _) = spoke_buckets(a, ComponentKind::Dex).await;
    await_entry(&a_dex, "dex.kubeflow.kf", "spoke-a's Dex spec", is(desired(ComponentKind::Dex, "kf", "v2.24.0"))).await;
    assert_eq!(keys(&a_katib).await, ["katib.kubeflow.kf"], "a forged entry was relayed");
    let (a_istio, _) = spoke_buckets(a, ComponentKind::Istio).await;
    assert!(keys(&a_istio).await.is_empty(), "the forged spec landed in Istio's bucket");

    // Status: the cluster's report and the agent's heartbeat, in the cluster's hub bucket.
    let report = StatusReport { spec_hash: "hash-v0.11.0".into(), phase: Some("Ready".into()), ready: true, installed_version: Some("v0.11.0".into()), ..Default::default() };
    put(&a_status, "katib.kubeflow.kf", &report).await;
    let hub_status_a = fleet.hub_bucket(fleet::status_bucket(&a.name)).await;
    await_entry(&hub_status_a, "katib.kubeflow.kf", "spoke-a's report on the hub", is(report.clone())).await;
    await_entry(&hub_status_a, "agent", "spoke-a's agent heartbeat", |v| v.and_then(|v| serde_json::from_slice::<AgentHeartbeat>(v).ok()).is_some_and(|h| h.cluster == a.name)).await;
    let hub_status_b = fleet.hub_bucket(fleet::status_bucket(&b.name)).await;
    await_entry(&hub_status_b, "agent", "spoke-b's agent heartbeat", |v| v.is_some()).await;
    assert!(hub_status_b.get("katib.kubeflow.kf").await.unwrap().is_none(), "spoke-a's report in spoke-b's bucket");

    // A delete on the hub removes the key from the cluster (and so the component resource).
    hub_a.delete("dex.kubeflow.kf").await.unwrap();
    await_entry(&a_dex, "dex.kubeflow.kf", "the deleted Dex spec gone from spoke-a", |v| v.is_none()).await;
}

async fn keys(store: &kv::Store) -> Vec<String> {
    let mut keys: Vec<String> = match store.keys().await {
        Ok(keys) => keys.filter_map(|k| async move { k.ok() }).collect().await,
        Err(_) => Vec::new(),
    };
    keys.sort();
    keys
}

/// A spoke's credentials reach nothing of another spoke's or of the hub's beyond its own two
/// buckets: through its leaf connection it can neither read spoke-b's desired state, write
/// spoke-b's status, write any desired state nor remove the hub's streams; and its leaf key is
/// refused on the hub's client port.
#[tokio::test]
async fn a_spokes_credentials_are_refused_on_another_spokes_subjects() {
    let fleet = Fleet::start(&["spoke-a", "spoke-b"]).await;
    let (a, b) = (&fleet.spokes[0], &fleet.spokes[1]);
    let hub_b = fleet.hub_bucket(fleet::desired_bucket(&b.name)).await;
    put(&hub_b, "katib.kubeflow.kf", &placed(ComponentKind::Katib, "kf", "v0.10.0", "spoke-b")).await;
    let hub_a = fleet.hub_bucket(fleet::desired_bucket(&a.name)).await;
    put(&hub_a, "katib.kubeflow.kf", &desired(ComponentKind::Katib, "kf", "v0.11.0")).await;

    // What spoke-a's agent can do (a compromised spoke has its agent's credentials, and its own
    // server's configuration): its own bucket is readable, once the leaf is up.
    let (client, _) = operator_runtime::nats::connect_with_inbox(&a.server.url(), Identity::FleetAgent, &fleet::agent_inbox_prefix(&a.name), &a.server.bus.credentials(Identity::FleetAgent)).await.unwrap();
    let hub = jetstream::with_domain(client.clone(), fleet::HUB_DOMAIN);
    let own = eventually("spoke-a reads its own desired bucket on the hub", || async { hub.get_key_value(fleet::desired_bucket(&a.name)).await.map_err(|e| e.to_string()) }).await;
    // Through a watch, as the agent reads it (reading by key is not granted).
    let mut watch = own.watch_with_history("katib.kubeflow.kf").await.unwrap();
    let first = tokio::time::timeout(Duration::from_secs(30), watch.next()).await.expect("spoke-a's own entry").unwrap().unwrap();
    assert_eq!(serde_json::from_slice::<DesiredComponent>(&first.value).unwrap(), desired(ComponentKind::Katib, "kf", "v0.11.0"));

    let refused = hub.get_key_value(fleet::desired_bucket(&b.name)).await;
    assert!(refused.is_err(), "spoke-a opened spoke-b's desired bucket");
    let raw = client.request(fleet::hub_api(&format!("CONSUMER.CREATE.KV_{}", fleet::desired_bucket(&b.name))), "{}".into()).await;
    assert!(raw.is_err(), "spoke-a made a consumer on spoke-b's desired stream: {:?}", raw.map(|m| m.payload));
    let forged = StatusReport { spec_hash: "forged".into(), ready: true, ..Default::default() };
    let write = client.request(fleet::hub_api(&format!("$KV.{}.katib.kubeflow.kf", fleet::status_bucket(&b.name))), serde_json::to_vec(&forged).unwrap().into()).await;
    assert!(write.is_err(), "spoke-a wrote spoke-b's status: {:?}", write.map(|m| m.payload));
    let own_desired = client.request(fleet::hub_api(&format!("$KV.{}.katib.kubeflow.kf", fleet::desired_bucket(&a.name))), serde_json::to_vec(&desired(ComponentKind::Katib, "kf", "v9")).unwrap().into()).await;
    assert!(own_desired.is_err(), "spoke-a wrote its own desired state: {:?}", own_desired.map(|m| m.payload));
    let delete = client.request(fleet::hub_api(&format!("STREAM.DELETE.KV_{}", fleet::desired_bucket(&b.name))), "".into()).await;
    assert!(delete.is_err(), "spoke-a deleted a hub stream: {:?}", delete.map(|m| m.payload));
    // The hub still holds what it wrote, and spoke-b's status bucket nothing.
    assert_eq!(hub_a.get("katib.kubeflow.kf").await.unwrap().map(|v| serde_json::from_slice::<DesiredComponent>(&v).unwrap()), Some(desired(ComponentKind::Katib, "kf", "v0.11.0")));
    assert_eq!(hub_b.get("katib.kubeflow.kf").await.unwrap().map(|v| serde_json::from_slice::<DesiredComponent>(&v).unwrap()), Some(placed(ComponentKind::Katib, "kf", "v0.10.0", "spoke-b")));
    let status_b = fleet.hub_bucket(fleet::status_bucket(&b.name)).await;
    assert!(status_b.get("katib.kubeflow.kf").await.unwrap().is_none(), "spoke-a's forged report is in spoke-b's bucket");

    // The cluster's key is for its leaf connection only.
    let seed = a.seed.clone();
    let as_client = async_nats::ConnectOptions::with_nkey(seed).add_root_certificates(fleet.hub.bus.ca_file()).require_tls(true).connect(format!("tls://127.0.0.1:{}", fleet.hub.port)).await;
    assert!(as_client.is_err(), "spoke-a's leaf key was accepted on the hub's client port");
}

/// With the hub's server stopped, a spoke's operators still read their desired state and write
/// status on their own server; what they report meanwhile reaches the hub once it is back, and the
/// hub's changes after the rejoin reach the spoke.
#[tokio::test]
async fn a_spoke_keeps_its_desired_state_through_a_hub_outage_and_catches_up_after() {
    let mut fleet = Fleet::start(&["spoke-a"]).await;
    let hub_a = fleet.hub_bucket(fleet::desired_bucket(&fleet.spokes[0].name)).await;
    put(&hub_a, "katib.kubeflow.kf", &desired(ComponentKind::Katib, "kf", "v0.10.0")).await;
    let (a_katib, a_status) = spoke_buckets(&fleet.spokes[0], ComponentKind::Katib).await;
    await_entry(&a_katib, "katib.kubeflow.kf", "the spec on spoke-a", is(desired(ComponentKind::Katib, "kf", "v0.10.0"))).await;

    fleet.hub.stop();
    // The spoke's own bus answers, and its last desired state is there.
    await_entry(&a_katib, "katib.kubeflow.kf", "the spec on spoke-a with the hub down", is(desired(ComponentKind::Katib, "kf", "v0.10.0"))).await;
    let during = StatusReport { spec_hash: "hash-v0.10.0".into(), phase: Some("Ready".into()), ready: true, ..Default::default() };
    put(&a_status, "katib.kubeflow.kf", &during).await;

    fleet.hub.resume().await;
    fleet.hub.await_jetstream(0).await;
    let hub_status = fleet.hub_bucket(fleet::status_bucket(&fleet.spokes[0].name)).await;
    await_entry(&hub_status, "katib.kubeflow.kf", "the report written during the outage on the hub", is(during)).await;
    let hub_a = fleet.hub_bucket(fleet::desired_bucket(&fleet.spokes[0].name)).await;
    put(&hub_a, "katib.kubeflow.kf", &desired(ComponentKind::Katib, "kf", "v0.11.0")).await;
    await_entry(&a_katib, "katib.kubeflow.kf", "the hub's change after the rejoin on spoke-a", is(desired(ComponentKind::Katib, "kf", "v0.11.0"))).await;
    // One value per key: the replays of the rejoin left no second entry.
    assert_eq!(keys(&a_katib).await, ["katib.kubeflow.kf"]);
}
