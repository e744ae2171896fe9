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
    let gate = jetstream::with_prefix(client.clone(), &fleet::leaf_api_prefix(&a.name));
    let own = eventually("spoke-a reads its own desired bucket through the hub's gate", || async { gate.get_key_value(fleet::desired_bucket(&a.name)).await.map_err(|e| e.to_string()) }).await;
    // Through a watch, as the agent reads it (reading by key is not granted).
    let mut watch = own.watch_with_history("katib.kubeflow.kf").await.unwrap();
    let first = tokio::time::timeout(Duration::from_secs(30), watch.next()).await.expect("spoke-a's own entry").unwrap().unwrap();
    assert_eq!(serde_json::from_slice::<DesiredComponent>(&first.value).unwrap(), desired(ComponentKind::Katib, "kf", "v0.11.0"));

    for (path, js) in [("the gate", &gate), ("the hub's domain", &hub)] {
        let refused = js.get_key_value(fleet::desired_bucket(&b.name)).await;
        assert!(refused.is_err(), "spoke-a opened spoke-b's desired bucket through {path}");
    }
    let b_gate = client.request(format!("{}.STREAM.INFO.KV_{}", fleet::leaf_api_prefix(&b.name), fleet::desired_bucket(&b.name)), "".into()).await;
    assert!(b_gate.is_err(), "spoke-a used spoke-b's gate: {:?}", b_gate.map(|m| m.payload));
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

/// A spoke's leaf makes on the hub only the consumers its agent needs, and only a few: it cannot
/// address the hub's consumer API itself, and the gate refuses (naming the field) a consumer that
/// delivers anywhere but the cluster's own inbox, or that would persist; the stream holds at most
/// `MAX_LEAF_CONSUMERS`. The hub is left with no consumer delivering elsewhere.
#[tokio::test]
async fn a_spokes_leaf_makes_only_the_consumers_its_agent_needs_and_only_a_few() {
    let fleet = Fleet::start(&["spoke-a", "spoke-b"]).await;
    let a = &fleet.spokes[0];
    let hub_a = fleet.hub_bucket(fleet::desired_bucket(&a.name)).await;
    put(&hub_a, "katib.kubeflow.kf", &desired(ComponentKind::Katib, "kf", "v0.11.0")).await;
    // The agent's own watch goes through the gate: the spec reaches the spoke.
    let (a_katib, _) = spoke_buckets(a, ComponentKind::Katib).await;
    await_entry(&a_katib, "katib.kubeflow.kf", "the spec on spoke-a through the gate", is(desired(ComponentKind::Katib, "kf", "v0.11.0"))).await;

    let (client, _) = operator_runtime::nats::connect_with_inbox(&a.server.url(), Identity::FleetAgent, &fleet::agent_inbox_prefix(&a.name), &a.server.bus.credentials(Identity::FleetAgent)).await.unwrap();
    let stream = format!("KV_{}", fleet::desired_bucket(&a.name));
    let create = |config: serde_json::Value| serde_json::to_vec(&serde_json::json!({"stream_name": stream, "config": config, "action": "create"})).unwrap();
    let through_gate = |config: serde_json::Value| {
        let (client, subject, payload) = (client.clone(), format!("{}.CONSUMER.CREATE.{stream}", fleet::leaf_api_prefix(&a.name)), create(config));
        async move {
            let answer = client.request(subject, payload.into()).await.expect("the gate answers");
            serde_json::from_slice::<serde_json::Value>(&answer.payload).unwrap()
        }
    };
    // Straight to the hub's API: not even answered (the leaf user may not publish there).
    let direct = client.request(fleet::hub_api(&format!("CONSUMER.CREATE.{stream}")), create(serde_json::json!({"deliver_subject": "_INBOX.fleet-agent.spoke-b.x"})).into()).await;
    assert!(direct.is_err(), "spoke-a reached the hub's consumer API: {:?}", direct.map(|m| m.payload));
    for elsewhere in ["_INBOX.fleet-agent.spoke-b.stolen", "$JS.API.STREAM.PURGE.KV_kubeflow-fleet-desired-spoke-b"] {
        let answer = through_gate(serde_json::json!({"deliver_subject": elsewhere, "ack_policy": "none"})).await;
        let reason = answer["error"]["description"].as_str().unwrap_or_default().to_string();
        assert!(reason.contains("field config.deliver_subject") && reason.contains("allowed: none (a pull consumer) or a subject under _INBOX.fleet-agent.spoke-a."), "{elsewhere}: {answer}");
    }
    let durable = through_gate(serde_json::json!({"durable_name": "kept"})).await;
    assert!(durable["error"]["description"].as_str().unwrap_or_default().contains("field config.durable_name"), "{durable}");

    // Pull consumers, until the stream holds as many as it may: the next is refused by the server.
    let hub_js = jetstream::new(fleet.hub.client(Identity::MetaOperator).await);
    let mut made = 0;
    let refusal = loop {
        let answer = through_gate(serde_json::json!({"ack_policy": "explicit", "inactive_threshold": 60_000_000_000u64})).await;
        if answer.get("error").is_some() {
            break answer;
        }
        made += 1;
        assert!(made <= fleet::MAX_LEAF_CONSUMERS, "more than {} consumers made on the stream", fleet::MAX_LEAF_CONSUMERS);
    };
    assert!(refusal["error"]["description"].as_str().unwrap_or_default().contains("maximum consumers limit reached"), "{refusal}");
    let mut on_hub = hub_js.get_stream(&stream).await.unwrap();
    assert_eq!(on_hub.info().await.unwrap().state.consumer_count as i64, fleet::MAX_LEAF_CONSUMERS);
    // Every consumer on the stream is pulled or delivers to spoke-a's inbox.
    let mut consumers = on_hub.consumers();
    while let Some(info) = consumers.next().await {
        let deliver = info.unwrap().config.deliver_subject.unwrap_or_default();
        assert!(deliver.is_empty() || deliver.starts_with("_INBOX.fleet-agent.spoke-a."), "a consumer delivers to {deliver}");
    }
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
