//! High availability against real processes: a three-node JetStream cluster on loopback with
//! replicated (R3) buckets loses a node during KfDef edits, and operators run as two replicas
//! that elect a leader on a Lease, whose leader is killed mid-change, or whose deposed leader
//! writes a status report over the new one's.

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};
use kubeflow_crds::bus::{self, Identity, StatusReport};
use kubeflow_crds::kfdef::KfDefPhase;
use kubeflow_crds::{ComponentKind, Katib, KfDef};
use kubeflow_e2e::*;
use futures::StreamExt;
use serde_json::json;

const APPLICATION: &str = "katib-controller";

/// Katib's applications, naming no repository: the built-in release is installed.
fn kfdef(namespace: &str) -> KfDef {
    let apps: Vec<_> = ["katib-crds", APPLICATION].iter().map(|a| json!({"name": a, "kustomizeConfig": {"repoRef": {"name": "manifests", "path": a}}})).collect();
    serde_json::from_value(json!({
        "apiVersion": "kfdef.apps.kubeflow.org/v1", "kind": "KfDef", "metadata": {"name": "kubeflow", "namespace": namespace},
        "spec": {"version": "v1.3.0", "applications": apps},
    }))
    .unwrap()
}

/// Edit number `edit` of the KfDef: a kfctl application parameter on katib-controller, which
/// reaches the Katib resource's spec (and nothing else), so each edit is one spec change there.
async fn edit(api: &Api<KfDef>, edit: u32) {
    let mut kfdef = api.get("kubeflow").await.unwrap();
    let app = kfdef.spec.applications.iter_mut().find(|a| a.name == APPLICATION).unwrap();
    app.kustomize_config.as_mut().unwrap().parameters = vec![serde_json::from_value(json!({"name": "ha-edit", "value": edit.to_string()})).unwrap()];
    let apps = serde_json::to_value(&kfdef.spec.applications).unwrap();
    api.patch("kubeflow", &PatchParams::default(), &Patch::Merge(json!({"spec": {"applications": apps}}))).await.unwrap();
}

/// The `ha-edit` parameter the Katib resource carries.
fn applied_edit(katib: &Katib) -> Option<String> {
    let source = katib.spec.core.sources.iter().find(|s| s.application == APPLICATION)?;
    source.parameters.iter().find(|p| p.name == "ha-edit").map(|p| p.value.clone())
}

/// Waits until edit `edit` reached the Katib resource and the KfDef is Available at its current
/// generation; returns the Katib resource.
async fn converged(client: &Client, ns: &str, edit: u32, why: &str) -> Katib {
    let kfdefs: Api<KfDef> = Api::namespaced(client.clone(), ns);
    let katibs: Api<Katib> = Api::namespaced(client.clone(), ns);
    let wanted = edit.to_string();
    eventually(&format!("edit {edit} applied and the KfDef Available ({why})"), || async {
        let katib = katibs.get_opt("kubeflow").await.map_err(|e| e.to_string())?.ok_or("no Katib resource")?;
        let kfdef = kfdefs.get("kubeflow").await.map_err(|e| e.to_string())?;
        let status = kfdef.status.as_ref();
        let available = status.is_some_and(|s| s.phase == Some(KfDefPhase::Available) && s.observed_generation == kfdef.metadata.generation);
        if applied_edit(&katib).as_deref() == Some(wanted.as_str()) && available { Ok(katib) } else { Err(format!("Katib has {:?}; KfDef {:?}", applied_edit(&katib), status.map(|s| &s.phase))) }
    })
    .await
}

#[tokio::test]
async fn a_nats_node_stopped_during_kfdef_edits_loses_no_edit_and_applies_none_twice() {
    // Kubeflow 1.3.0's Katib (the fixture's KfDef) has no archive here.
    still_on_built_in_templates();
    let client = client().await;
    install_crds(&client).await;
    let ns = TestNamespace::create(&client, "e2e-ha-nats").await;
    let mut nats = NatsServer::start_cluster(3).await;
    let meta = OperatorProcess::on_bus("meta-operator", &nats, Identity::MetaOperator, &["--nats-replicas", "3", "--namespace", &ns.name], &[]);
    let katib = OperatorProcess::on_bus("katib-operator", &nats, Identity::Component(ComponentKind::Katib), &["--namespace", &ns.name], &[]);
    let kfdefs: Api<KfDef> = Api::namespaced(client.clone(), &ns.name);
    kfdefs.create(&PostParams::default(), &kfdef(&ns.name)).await.unwrap();
    edit(&kfdefs, 0).await;
    let first = converged(&client, &ns.name, 0, "before any fault").await.metadata.generation.unwrap();

    // The meta-operator made every bucket with three copies.
    let js = async_nats::jetstream::new(nats.client(Identity::MetaOperator).await);
    let desired = js.get_key_value(bus::desired_bucket(ComponentKind::Katib)).await.unwrap();
    assert_eq!(desired.status().await.unwrap().info.config.num_replicas, 3, "the desired bucket is not replicated");

    // Stop the node most operators are connected to, edit, bring it back, edit again.
    let mut busiest = 0;
    for i in 1..nats.nodes.len() {
        if nats.connections(i).await > nats.connections(busiest).await {
            busiest = i;
        }
    }
    let edits = 9;
    for n in 1..=edits {
        if n == 4 {
            nats.stop_node(busiest);
        }
        if n == 7 {
            nats.resume_node(busiest).await;
            nats.await_jetstream(busiest).await;
        }
        edit(&kfdefs, n).await;
        let phase = if (4..7).contains(&n) { "a NATS node down" } else { "all NATS nodes up" };
        converged(&client, &ns.name, n, phase).await;
    }
    meta.quiescent().await;
    katib.quiescent().await;
    // One spec change per edit: a lost edit would leave fewer, a replayed one more.
    let last = Api::<Katib>::namespaced(client.clone(), &ns.name).get("kubeflow").await.unwrap();
    assert_eq!(applied_edit(&last).as_deref(), Some(edits.to_string().as_str()));
    assert_eq!(last.metadata.generation.unwrap() - first, i64::from(edits), "the Katib resource changed {} times for {edits} edits", last.metadata.generation.unwrap() - first);
}

/// The Lease's holder once someone other than `not` holds it.
async fn holder_other_than(leases: &Api<Lease>, name: &str, not: &str) -> String {
    eventually(&format!("a holder of Lease {name} other than {not:?}"), || async {
        let lease = leases.get_opt(name).await.map_err(|e| e.to_string())?.ok_or("no Lease")?;
        let holder = lease.spec.and_then(|s| s.holder_identity).ok_or_else(|| "no holder".to_string())?;
        // Identities are `<pod name>_<process>`: compare pod names.
        let pod = holder.split('_').next().unwrap_or_default().to_string();
        if pod == not { Err(format!("still held by {holder}")) } else { Ok(pod) }
    })
    .await
}

async fn holder(leases: &Api<Lease>, name: &str) -> String {
    holder_other_than(leases, name, "").await
}

/// Two replicas of operator `binary`, named `<prefix>-a` and `<prefix>-b` in the Lease.
fn replicas(binary: &str, prefix: &str, nats: &NatsServer, identity: Identity, ns: &str, args: &[&str]) -> Vec<(String, OperatorProcess)> {
    ["a", "b"]
        .map(|r| {
            let name = format!("{prefix}-{r}");
            let env = [("LEADER_ELECTION_NAMESPACE", ns), ("POD_NAME", name.as_str()), ("LEASE_DURATION_SECONDS", "3")];
            (name.clone(), OperatorProcess::on_bus(binary, nats, identity, args, &env))
        })
        .into()
}

#[tokio::test]
async fn killing_the_leading_replica_hands_the_change_to_the_standby() {
    // Kubeflow 1.3.0's Katib (the fixture's KfDef) has no archive here.
    still_on_built_in_templates();
    let client = client().await;
    install_crds(&client).await;
    let ns = TestNamespace::create(&client, "e2e-ha-lease").await;
    let nats = NatsServer::start_cluster(3).await;
    let mut metas = replicas("meta-operator", "meta", &nats, Identity::MetaOperator, &ns.name, &["--nats-replicas", "3", "--namespace", &ns.name]);
    let mut katibs = replicas("katib-operator", "katib", &nats, Identity::Component(ComponentKind::Katib), &ns.name, &["--namespace", &ns.name]);
    let leases: Api<Lease> = Api::namespaced(client.clone(), &ns.name);
    let kfdefs: Api<KfDef> = Api::namespaced(client.clone(), &ns.name);
    kfdefs.create(&PostParams::default(), &kfdef(&ns.name)).await.unwrap();
    edit(&kfdefs, 0).await;
    converged(&client, &ns.name, 0, "two replicas of each operator").await;

    // Only the leaders act: the standbys answer /readyz but have not reconciled anything.
    for (lease, replicas) in [("kubeflow-meta-operator", &metas), ("kubeflow-katib-operator", &katibs)] {
        let leader = holder(&leases, lease).await;
        let (_, standby) = replicas.iter().find(|(name, _)| *name != leader).unwrap();
        standby.wait_ready().await;
        assert_eq!(standby.metric("kfop_reconciles_total").await, Some(0.0), "the standby of {lease} reconciled (log: {})", standby.log.display());
    }

    // Kill the leading Katib replica right after an edit (SIGKILL: it cannot release the Lease):
    // the standby takes the Lease once it expires and finishes the change, and the next one.
    let leader = holder(&leases, "kubeflow-katib-operator").await;
    edit(&kfdefs, 1).await;
    katibs.iter_mut().find(|(name, _)| *name == leader).unwrap().1.kill();
    holder_other_than(&leases, "kubeflow-katib-operator", &leader).await;
    converged(&client, &ns.name, 1, "after the leading Katib replica was killed").await;
    edit(&kfdefs, 2).await;
    converged(&client, &ns.name, 2, "an edit made after the Katib standby took over").await;

    // The same for the meta-operator: with its leader dead, only the standby can publish the edit.
    let leader = holder(&leases, "kubeflow-meta-operator").await;
    metas.iter_mut().find(|(name, _)| *name == leader).unwrap().1.kill();
    edit(&kfdefs, 3).await;
    holder_other_than(&leases, "kubeflow-meta-operator", &leader).await;
    converged(&client, &ns.name, 3, "after the leading meta-operator replica was killed").await;
}

/// A replica that has just lost its Lease may still publish a report before it exits, over the
/// new leader's: the leader puts its own back (`bus::STATUS_REFRESH_EVERY`) and the KfDef is
/// Available again.
#[tokio::test]
async fn a_status_report_written_over_by_a_deposed_leader_is_put_back() {
    // Kubeflow 1.3.0's Katib (the fixture's KfDef) has no archive here.
    still_on_built_in_templates();
    let client = client().await;
    install_crds(&client).await;
    let ns = TestNamespace::create(&client, "e2e-ha-report").await;
    let nats = NatsServer::start().await;
    let _meta = OperatorProcess::on_bus("meta-operator", &nats, Identity::MetaOperator, &["--namespace", &ns.name], &[]);
    let _katib = OperatorProcess::on_bus("katib-operator", &nats, Identity::Component(ComponentKind::Katib), &["--namespace", &ns.name], &[]);
    let kfdefs: Api<KfDef> = Api::namespaced(client.clone(), &ns.name);
    kfdefs.create(&PostParams::default(), &kfdef(&ns.name)).await.unwrap();
    edit(&kfdefs, 0).await;
    converged(&client, &ns.name, 0, "before the stale report").await;

    let key = bus::key(ComponentKind::Katib, &ns.name, "kubeflow");
    let reader = async_nats::jetstream::new(nats.client(Identity::MetaOperator).await).get_key_value(bus::STATUS_BUCKET).await.unwrap();
    let report = |value: &[u8]| serde_json::from_slice::<StatusReport>(value).unwrap();
    let current = report(&reader.get(&key).await.unwrap().expect("a report"));
    // The deposed replica holds the same identity and reports on the spec it last saw.
    let deposed = async_nats::jetstream::new(nats.client(Identity::Component(ComponentKind::Katib)).await).get_key_value(bus::STATUS_BUCKET).await.unwrap();
    let stale = StatusReport { spec_hash: "an-older-spec".into(), ..current.clone() };
    let stale_revision = deposed.put(&key, serde_json::to_vec(&stale).unwrap().into()).await.unwrap();

    eventually("the leader's report put back over the stale one", || async {
        let entry = reader.entry(&key).await.map_err(|e| e.to_string())?.ok_or("no report")?;
        let now = report(&entry.value);
        if entry.revision > stale_revision && now.spec_hash == current.spec_hash { Ok(()) } else { Err(format!("revision {} on {}", entry.revision, now.spec_hash)) }
    })
    .await;
    converged(&client, &ns.name, 0, "after the stale report").await;
}

/// A watch is an ephemeral consumer that the cluster places on a random replica of its bucket,
/// and for minutes after a node is killed the others still count it as online: a consumer placed
/// there is never answered for. `nats::watch` asks again instead of waiting, so every watch is
/// made, and each delivers the bucket's entries.
#[tokio::test]
async fn watches_are_made_while_a_killed_nats_node_still_counts_as_online() {
    let mut nats = NatsServer::start_cluster(3).await;
    let js = async_nats::jetstream::new(nats.client(Identity::MetaOperator).await);
    let (desired, _, _) = operator_runtime::nats::ensure_buckets(&js, 3).await.unwrap();
    let bucket = &desired[&ComponentKind::Katib];
    let key = bus::key(ComponentKind::Katib, "kubeflow", "kubeflow");
    bucket.put(&key, "{}".into()).await.unwrap();
    // Kill a node this client is not connected to: no reconnect is involved.
    let mut killed = None;
    for i in 0..nats.nodes.len() {
        if nats.connections(i).await == 0 {
            killed = Some(i);
        }
    }
    nats.stop_node(killed.expect("a node without clients"));
    // With no retry, each creation has a one-in-three chance of going unanswered.
    for attempt in 1..=15 {
        let mut watch = operator_runtime::nats::watch(|| bucket.watch_all_from_revision(1)).await.unwrap_or_else(|e| panic!("watch {attempt} not made: {e}"));
        let entry = watch.next().await.expect("the watch ends").expect("a watch error");
        assert_eq!(entry.key, key, "watch {attempt} delivered another entry");
    }
}
