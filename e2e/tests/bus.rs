//! The bus is secured as deployed (TLS, an NKey per operator, the contract's permissions) and a
//! component operator does not trust what it reads from it: against a real nats-server configured
//! by the project's own generator.

use std::time::Duration;

use async_nats::jetstream;
use kube::api::PostParams;
use kube::{Api, ResourceExt};
use kubeflow_crds::bus::{self, Identity, StatusReport};
use kubeflow_crds::{ComponentKind, Katib, KfDef};
use kubeflow_e2e::kubelet::{container_env, first_container, mount_volumes, secret_data};
use kubeflow_e2e::*;
use operator_runtime::nats;
use serde_json::json;
use tokio::sync::mpsc;

/// A client of `server` with `seed` (no retries: a refused connect is an error), whose server
/// errors arrive on the returned channel.
async fn raw_client(server: &NatsServer, identity: Identity, seed: String) -> (async_nats::Client, mpsc::UnboundedReceiver<String>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let client = async_nats::ConnectOptions::with_nkey(seed)
        .add_root_certificates(server.bus.ca_file())
        .require_tls(true)
        .custom_inbox_prefix(identity.inbox_prefix())
        .event_callback(move |event| {
            let tx = tx.clone();
            async move {
                let _ = tx.send(event.to_string());
            }
        })
        .connect(server.url())
        .await
        .expect("connect");
    (client, rx)
}

/// Waits for the server to report a permissions violation naming `what`.
async fn violation(events: &mut mpsc::UnboundedReceiver<String>, what: &str) {
    let wanted = format!("Permissions Violation for {what}");
    within(&format!("the server refusing: {wanted}"), async {
        while let Some(event) = events.recv().await {
            if event.contains(&wanted) {
                return;
            }
        }
        panic!("the connection's events ended");
    })
    .await;
}

fn seed(server: &NatsServer, identity: Identity) -> String {
    std::fs::read_to_string(server.bus.seed_file(identity)).unwrap()
}

#[tokio::test]
async fn anonymous_unencrypted_and_unknown_clients_are_refused() {
    let server = NatsServer::start().await;
    let plain = async_nats::ConnectOptions::new().connect(format!("nats://127.0.0.1:{}", server.port)).await;
    assert!(plain.is_err(), "a client without TLS connected");

    let tls = || async_nats::ConnectOptions::new().add_root_certificates(server.bus.ca_file()).require_tls(true);
    let anonymous = tls().connect(server.url()).await.expect_err("an anonymous client connected");
    assert_eq!(anonymous.kind(), async_nats::ConnectErrorKind::AuthorizationViolation, "{anonymous}");

    let stranger = operator_runtime::bus_security::new_seed();
    let unknown = tls().nkey(stranger).connect(server.url()).await.expect_err("a client with an unknown NKey connected");
    assert_eq!(unknown.kind(), async_nats::ConnectErrorKind::AuthorizationViolation, "{unknown}");

    // The same connection with an operator's own seed is accepted.
    let katib = tls().nkey(seed(&server, Identity::Component(ComponentKind::Katib))).connect(server.url()).await;
    assert!(katib.is_ok(), "{:?}", katib.err());
}

#[tokio::test]
async fn the_katib_identity_can_neither_write_nor_read_istios_desired_state() {
    let server = NatsServer::start().await;
    let meta = jetstream::new(server.client(Identity::MetaOperator).await);
    let (desired, status, _) = nats::ensure_buckets(&meta, 1).await.unwrap();
    let istio_key = bus::key(ComponentKind::Istio, "kubeflow", "kubeflow");
    let original = br#"{"spec": {"version": "1.9.6"}}"#;
    desired[&ComponentKind::Istio].put(&istio_key, original.as_slice().into()).await.unwrap();

    let katib_identity = Identity::Component(ComponentKind::Katib);
    let (katib, mut events) = raw_client(&server, katib_identity, seed(&server, katib_identity)).await;
    let js = jetstream::ContextBuilder::new().timeout(Duration::from_secs(2)).build(katib.clone());

    // What it may do: open its own buckets and report its own status.
    let (_, own_status, _) = nats::component_buckets(&js, ComponentKind::Katib).await.expect("Katib opens its own buckets");
    own_status.put(bus::key(ComponentKind::Katib, "kubeflow", "kubeflow"), b"{}".as_slice().into()).await.expect("Katib reports its own status");

    // Write Istio's desired state (an image of its choice).
    let subject = format!("$KV.{}.{istio_key}", bus::desired_bucket(ComponentKind::Istio));
    let write = js.publish(subject.clone(), br#"{"spec": {"version": "1.9.6", "overrides": {"images": {"discovery": "evil/pilot"}}}}"#.as_slice().into()).await.unwrap().await;
    assert!(write.is_err(), "the write was acknowledged");
    violation(&mut events, &format!("Publish to \"{subject}\"")).await;

    // Read it: through the bucket, by subscribing to its subjects, through a consumer of its stream.
    assert!(js.get_key_value(bus::desired_bucket(ComponentKind::Istio)).await.is_err(), "Katib opened Istio's bucket");
    violation(&mut events, "Publish to \"$JS.API.STREAM.INFO.KV_kubeflow-desired-istio\"").await;
    let _subscription = katib.subscribe("$KV.kubeflow-desired-istio.>").await.unwrap();
    violation(&mut events, "Subscription to \"$KV.kubeflow-desired-istio.>\"").await;
    let create = "$JS.API.CONSUMER.CREATE.KV_kubeflow-desired-istio";
    assert!(katib.request(create, json!({"stream_name": "KV_kubeflow-desired-istio", "config": {}}).to_string().into()).await.is_err());
    violation(&mut events, &format!("Publish to \"{create}\"")).await;

    // Nor report as Istio.
    let istio_status = format!("$KV.{}.{istio_key}", bus::STATUS_BUCKET);
    assert!(js.publish(istio_status.clone(), b"{}".as_slice().into()).await.unwrap().await.is_err());
    violation(&mut events, &format!("Publish to \"{istio_status}\"")).await;

    let stored = desired[&ComponentKind::Istio].get(&istio_key).await.unwrap().unwrap();
    assert_eq!(&stored[..], original.as_slice(), "Istio's desired state changed");
    assert!(status.get(&istio_key).await.unwrap().is_none(), "a status report for Istio was stored");
}

/// A nats-server and a Katib operator on it confined to `namespace`: an operator of the whole
/// cluster would also act on the Katib resources of the tests running beside, and remove those
/// its bus has no desired state for.
async fn confined_katib_operator(client: &kube::Client, namespace: &str) -> (NatsServer, OperatorProcess) {
    install_crds(client).await;
    let server = NatsServer::start().await;
    let katib = OperatorProcess::on_bus("katib-operator", &server, Identity::Component(ComponentKind::Katib), &["--namespace", namespace], &[]);
    katib.wait_ready().await;
    (server, katib)
}

/// Waits for the Katib operator's report on `key` and returns it.
async fn reported(status: &async_nats::jetstream::kv::Store, key: &str) -> StatusReport {
    reported_when(status, key, &format!("status report {key}"), |_| true).await
}

#[tokio::test]
async fn desired_state_that_does_not_decode_or_names_an_unknown_field_is_reported_and_never_applied() {
    let client = client().await;
    let ns = TestNamespace::create(&client, "e2e-bus-refusal").await;
    let n = ns.name.as_str();
    // The desired state here is the test's: no meta-operator writes over it.
    let (server, _katib) = confined_katib_operator(&client, n).await;
    let meta = jetstream::new(server.client(Identity::MetaOperator).await);
    let (desired, status, _) = nats::ensure_buckets(&meta, 1).await.unwrap();
    let katib_desired = &desired[&ComponentKind::Katib];

    // KfDefs to own the resources (nothing reconciles them here).
    let kfdefs: Api<KfDef> = Api::namespaced(client.clone(), n);
    let mut uids = std::collections::BTreeMap::new();
    for name in ["garbage", "extra-field", "unknown-spec-field", "good"] {
        let kfdef: KfDef = serde_json::from_value(json!({"apiVersion": "kfdef.apps.kubeflow.org/v1", "kind": "KfDef", "metadata": {"name": name}, "spec": {}})).unwrap();
        uids.insert(name, kfdefs.create(&PostParams::default(), &kfdef).await.unwrap().uid().unwrap());
    }
    let message = |name: &str, spec: serde_json::Value| {
        json!({"kfdef": {"namespace": n, "name": name, "uid": uids[name], "generation": 1}, "component": "katib", "specHash": format!("h-{name}"), "spec": spec})
    };
    let put = |name: &str, value: Vec<u8>| katib_desired.put(bus::key(ComponentKind::Katib, n, name), value.into());

    put("garbage", b"{not json".to_vec()).await.unwrap();
    let mut extra = message("extra-field", json!({"version": "v0.11.0"}));
    extra["runAs"] = json!("root");
    put("extra-field", serde_json::to_vec(&extra).unwrap()).await.unwrap();
    put("unknown-spec-field", serde_json::to_vec(&message("unknown-spec-field", json!({"version": "v0.11.0", "hostNetwork": true}))).unwrap()).await.unwrap();
    put("good", serde_json::to_vec(&message("good", json!({"version": "v0.11.0"}))).unwrap()).await.unwrap();

    let garbage = reported(&status, &bus::key(ComponentKind::Katib, n, "garbage")).await;
    assert!(garbage.degraded && garbage.message.contains("does not decode"), "{garbage:?}");
    let extra = reported(&status, &bus::key(ComponentKind::Katib, n, "extra-field")).await;
    assert!(extra.degraded && extra.message.contains("unknown field `runAs`"), "{extra:?}");
    assert_eq!(extra.spec_hash, "h-extra-field", "the report should name the spec it refused");
    let unknown = reported(&status, &bus::key(ComponentKind::Katib, n, "unknown-spec-field")).await;
    assert!(unknown.degraded && unknown.message.contains("hostNetwork"), "{unknown:?}");

    // The messages were consumed in order: once the last one is applied, the refused ones are
    // behind it, and none of them made a resource.
    let katibs: Api<Katib> = Api::namespaced(client.clone(), n);
    eventually("Katib good applied from its desired state", || async { katibs.get("good").await.map(|_| ()).map_err(|e| e.to_string()) }).await;
    for name in ["garbage", "extra-field", "unknown-spec-field"] {
        assert!(katibs.get_opt(name).await.unwrap().is_none(), "Katib {name} was applied from a refused message");
    }
}

/// The Katib operator's report on `key` once it satisfies `wanted`.
async fn reported_when(status: &async_nats::jetstream::kv::Store, key: &str, what: &str, wanted: impl Fn(&StatusReport) -> bool) -> StatusReport {
    eventually(what, || async {
        let entry = status.get(key).await.map_err(|e| e.to_string())?.ok_or("no report")?;
        let report: StatusReport = serde_json::from_slice(&entry).map_err(|e| e.to_string())?;
        if wanted(&report) { Ok(report) } else { Err(format!("{report:?}")) }
    })
    .await
}

/// A refused message, then the value already applied put back (as the meta-operator does): the
/// write changes nothing on the resource, so no reconcile follows, and the operator itself must
/// withdraw its refusal.
#[tokio::test]
async fn a_refusal_is_withdrawn_when_the_applied_value_is_put_back() {
    let client = client().await;
    serve_prerequisite_kinds(&client).await;
    let ns = TestNamespace::create(&client, "e2e-bus-withdrawn").await;
    let n = ns.name.as_str();
    let (server, katib) = confined_katib_operator(&client, n).await;
    let meta = jetstream::new(server.client(Identity::MetaOperator).await);
    let (desired, status, _) = nats::ensure_buckets(&meta, 1).await.unwrap();
    let kfdef: KfDef = serde_json::from_value(json!({"apiVersion": "kfdef.apps.kubeflow.org/v1", "kind": "KfDef", "metadata": {"name": "kubeflow"}, "spec": {}})).unwrap();
    let uid = Api::<KfDef>::namespaced(client.clone(), n).create(&PostParams::default(), &kfdef).await.unwrap().uid().unwrap();
    let key = bus::key(ComponentKind::Katib, n, "kubeflow");
    let value = serde_json::to_vec(&json!({"kfdef": {"namespace": n, "name": "kubeflow", "uid": uid, "generation": 1}, "component": "katib", "specHash": "h-1", "spec": {"version": "v0.10.0", "targetNamespace": n}})).unwrap();
    let healthy = |r: &StatusReport| r.spec_hash == "h-1" && r.ready && !r.degraded;

    desired[&ComponentKind::Katib].put(&key, value.clone().into()).await.unwrap();
    reported_when(&status, &key, "Katib Ready on its desired state", healthy).await;
    // No reconcile left to report over the refusal below.
    katib.quiescent().await;
    let katibs: Api<Katib> = Api::namespaced(client.clone(), n);
    let generation = katibs.get("kubeflow").await.unwrap().metadata.generation;

    desired[&ComponentKind::Katib].put(&key, b"{not json".as_slice().into()).await.unwrap();
    reported_when(&status, &key, "the refusal reported", |r| r.degraded && r.message.contains("does not decode")).await;

    desired[&ComponentKind::Katib].put(&key, value.into()).await.unwrap();
    reported_when(&status, &key, "the refusal withdrawn once the applied value is back", healthy).await;
    assert_eq!(katibs.get("kubeflow").await.unwrap().metadata.generation, generation, "putting the value back changed the resource");
    // Uninstalled while the operator runs: Kubeflow 1.2's Katib lives in the shared namespace
    // `kubeflow`, where later tests install theirs.
    desired[&ComponentKind::Katib].delete(&key).await.unwrap();
    gone(&katibs, "kubeflow").await;
}

/// The material of Secret `name`, key `key`.
/// A [`provisioned_server`]'s process, killed when dropped (a failed test leaves none behind).
struct ServerProcess(std::process::Child);

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Where a [`provisioned_server`] listens: its client port, its monitor port (none: not served),
/// and as the fleet's hub its leaf port.
#[derive(Clone, Copy)]
struct Ports {
    client: u16,
    monitor: Option<u16>,
    leaf: Option<u16>,
}

/// A nats-server run as the provisioned StatefulSet's pod `nats-0` would be: its volumes'
/// ConfigMap and Secrets as files under `dir` (the configuration's paths moved there), its
/// environment as the kubelet makes it, its ports moved to `ports`. Its log is `dir/nats.log`.
async fn provisioned_server(client: &kube::Client, namespace: &str, dir: &std::path::Path, ports: Ports) -> ServerProcess {
    use k8s_openapi::api::apps::v1::StatefulSet;
    let statefulset = Api::<StatefulSet>::namespaced(client.clone(), namespace).get("nats").await.unwrap();
    let (pod, container) = first_container(&statefulset.spec.unwrap().template);
    let mounts = mount_volumes(client, namespace, &pod, &container, dir).await;
    let args = container.args.clone().unwrap_or_default();
    assert_eq!(args.first().map(String::as_str), Some("-c"), "{args:?}");
    let config_path = &args[1];
    let local = |path: &str| mounts.iter().find_map(|(mount, local)| path.strip_prefix(mount.as_str()).map(|rest| format!("{}{rest}", local.display()))).unwrap_or_else(|| panic!("{path} is on no volume"));
    let mut config = std::fs::read_to_string(local(config_path)).unwrap();
    for (mount, local) in &mounts {
        config = config.replace(&format!("\"{mount}"), &format!("\"{}", local.display()));
    }
    config = config.replace(&format!("port: {}\n", meta_operator::provision::CLIENT_PORT), &format!("port: {}\n", ports.client));
    config = match ports.monitor {
        Some(monitor) => config.replace("http_port: 8222\n", &format!("http_port: {monitor}\n")),
        None => config.replace("http_port: 8222\n", ""),
    };
    if let Some(leaf) = ports.leaf {
        config = config.replace(&format!("port: {HUB_LEAF_PORT}\n"), &format!("port: {leaf}\n"));
    }
    std::fs::write(dir.join("nats.conf"), config).unwrap();
    let log = std::fs::OpenOptions::new().create(true).append(true).open(dir.join("nats.log")).unwrap();
    let mut command = std::process::Command::new(std::env::var("KFOP_NATS_SERVER").unwrap());
    command.args(["-c", dir.join("nats.conf").to_str().unwrap()]).stdout(log.try_clone().unwrap()).stderr(log);
    command.envs(container_env(client, namespace, &container, "nats-0").await);
    let child = ServerProcess(command.spawn().unwrap());
    let addr = format!("127.0.0.1:{}", ports.client);
    eventually("provisioned nats-server listening", || async { tokio::net::TcpStream::connect(&addr).await.map(|_| ()).map_err(|e| e.to_string()) }).await;
    child
}

/// The leaf port the hub's meta-operator is given (the provisioned configuration's; a test moves
/// it to a free port).
const HUB_LEAF_PORT: u16 = 7422;

/// A meta-operator provisioning the bus in `namespace` with `--provision-nats-server` (and
/// `env`), as deploy/meta-operator's ServiceAccount with exactly the rules an install grants it
/// in its own namespace (OLM's CSV `permissions`, deploy/'s Role).
async fn provisioning_meta_operator(client: &kube::Client, namespace: &str, env: &[(&str, &str)]) -> (OperatorProcess, NatsServer) {
    let package = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/meta-operator");
    kubectl(&["apply", "--server-side", "--force-conflicts", "-k", package.to_str().unwrap()]);
    let kubeconfig = operator_kubeconfig(client, "meta-operator").await;
    let role = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "bus", "namespace": namespace}, "rules": meta_operator::provision::namespaced_rules()});
    let binding = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "bus", "namespace": namespace},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "bus"},
        "subjects": [{"kind": "ServiceAccount", "name": "meta-operator", "namespace": "kubeflow-operators"}]});
    for object in [role, binding] {
        let file = std::env::temp_dir().join(unique_name("rbac"));
        std::fs::write(&file, object.to_string()).unwrap();
        kubectl(&["apply", "--server-side", "-f", file.to_str().unwrap()]);
    }
    let nats = NatsServer::start().await;
    let kubeconfig = kubeconfig.to_string_lossy();
    let env = [&[("KUBECONFIG", &*kubeconfig), ("BUS_NAMESPACE", namespace), ("PROVISION_NATS_SERVER", "true"), ("WATCH_NAMESPACE", namespace)], env].concat();
    let meta = OperatorProcess::on_bus("meta-operator", &nats, Identity::MetaOperator, &[], &env);
    (meta, nats)
}

/// Connects as `identity` with `seed` and the CA of the provisioned identity Secret; replies come
/// to the identity's own inbox, the only one it may subscribe to.
async fn connect_with(identity: Identity, ca: &str, seed: String, port: u16) -> Result<async_nats::Client, async_nats::ConnectError> {
    let dir = std::env::temp_dir().join(unique_name("nats-ca"));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("ca.crt"), ca).unwrap();
    let options = async_nats::ConnectOptions::with_nkey(seed).custom_inbox_prefix(identity.inbox_prefix());
    options.add_root_certificates(dir.join("ca.crt")).require_tls(true).connect(format!("tls://localhost:{port}")).await
}

#[tokio::test]
async fn the_meta_operator_provisions_a_working_bus_and_rotates_an_identity_on_request() {
    use k8s_openapi::api::apps::v1::StatefulSet;
    use k8s_openapi::api::core::v1::Secret;
    use meta_operator::provision;
    let client = client().await;
    let ns = TestNamespace::create(&client, "e2e-bus-provision").await;
    let n = ns.name.as_str();
    let (meta, _nats) = provisioning_meta_operator(&client, n, &[]).await;

    let statefulsets: Api<StatefulSet> = Api::namespaced(client.clone(), n);
    eventually(&format!("the NATS server provisioned (log: {})", meta.log.display()), || async { statefulsets.get("nats").await.map(|_| ()).map_err(|e| e.to_string()) }).await;
    let policies: Api<k8s_openapi::api::networking::v1::NetworkPolicy> = Api::namespaced(client.clone(), n);
    // Applied after the StatefulSet.
    eventually("the NetworkPolicy", || async { policies.get("nats").await.map(|_| ()).map_err(|e| e.to_string()) }).await;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), n);
    let katib = provision::identity_secret(Identity::Component(ComponentKind::Katib));
    eventually("every identity Secret", || async {
        for identity in Identity::all() {
            secrets.get(&provision::identity_secret(identity)).await.map_err(|e| e.to_string())?;
        }
        Ok::<_, String>(())
    })
    .await;

    // What was provisioned makes a working bus: the server starts from it, an operator connects
    // with its Secret, an anonymous client does not.
    let dir = std::env::temp_dir().join(unique_name("provisioned-nats"));
    std::fs::create_dir_all(&dir).unwrap();
    let port = free_port();
    let ports = Ports { client: port, monitor: None, leaf: None };
    let server = provisioned_server(&client, n, &dir, ports).await;
    let ca = secret_data(&secrets, &katib, "ca.crt").await;
    let old_seed = secret_data(&secrets, &katib, "nkey.seed").await;
    connect_with(Identity::Component(ComponentKind::Katib), &ca, old_seed.clone(), port).await.expect("Katib connects with its provisioned identity");
    let anonymous = async_nats::ConnectOptions::new().add_root_certificates(dir.join("tls/ca.crt")).require_tls(true).connect(format!("tls://localhost:{port}")).await;
    assert_eq!(anonymous.expect_err("an anonymous client connected to the provisioned server").kind(), async_nats::ConnectErrorKind::AuthorizationViolation);

    // Rotation on request: a new seed, and the server's pods rolled onto the new public keys.
    let request = unique_name("rotate");
    let patch = json!({"metadata": {"annotations": {provision::ROTATE_ANNOTATION: request}}});
    secrets.patch(&katib, &kube::api::PatchParams::default(), &kube::api::Patch::Merge(patch)).await.unwrap();
    eventually("the identity rotated", || async {
        let secret = secrets.get(&katib).await.map_err(|e| e.to_string())?;
        if secret.annotations().get(provision::ROTATED_ANNOTATION) == Some(&request) { Ok(()) } else { Err(format!("{:?}", secret.annotations())) }
    })
    .await;
    let new_seed = secret_data(&secrets, &katib, "nkey.seed").await;
    assert_ne!(new_seed, old_seed);
    let new_public = secret_data(&secrets, &katib, "nkey.pub").await;
    eventually("the server's pods rolled onto the new public key", || async {
        let template = statefulsets.get("nats").await.map_err(|e| e.to_string())?.spec.unwrap().template.metadata.unwrap().annotations.unwrap_or_default();
        if template.get(provision::KEYS_ANNOTATION).is_some_and(|keys| keys.contains(&new_public[..12])) { Ok(()) } else { Err(format!("{template:?}")) }
    })
    .await;

    // The restarted server takes the new key and no longer the old one.
    drop(server);
    let server = provisioned_server(&client, n, &dir, ports).await;
    connect_with(Identity::Component(ComponentKind::Katib), &ca, new_seed, port).await.expect("Katib connects with its rotated identity");
    let old = connect_with(Identity::Component(ComponentKind::Katib), &ca, old_seed, port).await.expect_err("the rotated-out seed still connects");
    assert_eq!(old.kind(), async_nats::ConnectErrorKind::AuthorizationViolation);
    drop(server);
    drop(meta);
}

/// The server names of the leaf connections the hub whose monitor is on `monitor` has.
async fn leaf_servers(monitor: u16) -> Result<Vec<String>, String> {
    let leafz = nats_monitor(monitor, "/leafz").await?;
    Ok(leafz["leafs"].as_array().into_iter().flatten().filter_map(|l| l["name"].as_str().map(str::to_string)).collect())
}

/// The fleet's hub as the meta-operator provisions it in-cluster (`--fleet-leaf-port`): its
/// server's configuration is made from the registrations. A registered cluster's spoke server
/// joins the leaf port with its key; a key no registration names is refused; a deleted
/// registration leaves the configuration, the pods are rolled, and its spoke is refused after.
#[tokio::test]
async fn the_hubs_provisioned_server_admits_exactly_the_registered_clusters() {
    use k8s_openapi::api::apps::v1::StatefulSet;
    use k8s_openapi::api::core::v1::{ConfigMap, Service};
    use kubeflow_crds::fleet_cluster::FleetCluster;
    use operator_runtime::bus_security::{self, LeafNodes, Seed};
    let client = client().await;
    let ns = TestNamespace::create(&client, "e2e-bus-hub").await;
    let n = ns.name.as_str();
    let (meta, _nats) = provisioning_meta_operator(&client, n, &[("FLEET_LEAF_PORT", &HUB_LEAF_PORT.to_string())]).await;

    let cluster = unique_name("e2e-hub-member");
    let seed = bus_security::new_seed();
    let key = bus_security::public_key(&seed).unwrap();
    let registrations: Api<FleetCluster> = Api::all(client.clone());
    let registration: FleetCluster = serde_json::from_value(json!({"apiVersion": "fleet.kubeflow.org/v1alpha1", "kind": "FleetCluster", "metadata": {"name": cluster, "labels": {TEST_NAMESPACE_LABEL: n}}, "spec": {"publicKey": key}})).unwrap();
    registrations.create(&PostParams::default(), &registration).await.unwrap();

    let configs: Api<ConfigMap> = Api::namespaced(client.clone(), n);
    let config = || async { configs.get("nats-config").await.map_err(|e| e.to_string()).map(|c| c.data.unwrap_or_default().remove("nats.conf").unwrap_or_default()) };
    let services: Api<Service> = Api::namespaced(client.clone(), n);
    // The leaf Service is the last object applied.
    eventually(&format!("the hub's server applied, admitting {cluster} (log: {})", meta.log.display()), || async {
        let config = config().await?;
        services.get(meta_operator::provision::LEAF_SERVICE).await.map_err(|e| e.to_string())?;
        if config.contains(&key) { Ok(()) } else { Err(config) }
    })
    .await;
    let statefulsets: Api<StatefulSet> = Api::namespaced(client.clone(), n);
    let config_hash = || async {
        let template = statefulsets.get("nats").await.map_err(|e| e.to_string())?.spec.unwrap().template.metadata.unwrap();
        Ok::<_, String>(template.annotations.unwrap_or_default().get(meta_operator::provision::CONFIG_ANNOTATION).cloned())
    };
    let joined_hash = config_hash().await.unwrap();
    assert!(joined_hash.is_some());
    let leaf_service = services.get(meta_operator::provision::LEAF_SERVICE).await.unwrap();
    assert_eq!(leaf_service.spec.unwrap().type_.as_deref(), Some("LoadBalancer"));

    // The hub runs from what was provisioned; a spoke server joins it with the cluster's seed.
    let dir = std::env::temp_dir().join(unique_name("provisioned-hub"));
    std::fs::create_dir_all(&dir).unwrap();
    let ports = Ports { client: free_port(), monitor: Some(free_port()), leaf: Some(free_port()) };
    let (leaf_port, monitor) = (ports.leaf.unwrap(), ports.monitor.unwrap());
    let hub = provisioned_server(&client, n, &dir, ports).await;
    let spoke_of = |name: String, seed: String| {
        let ca = dir.join("tls/ca.crt").to_string_lossy().into_owned();
        async move {
            let domain = name.clone();
            NatsServer::start_configured(&format!("{name}-nats"), move |c| {
                c.jetstream_domain = Some(domain);
                c.leaf_nodes = Some(LeafNodes::Spoke { hub_url: format!("tls://localhost:{leaf_port}"), seed: Seed::Literal(seed), hub_ca_file: ca });
            })
            .await
        }
    };
    let _member = spoke_of(cluster.clone(), seed.clone()).await;
    let member_server = format!("{cluster}-nats");
    eventually("the registered cluster's leaf connection", || async {
        let leaves = leaf_servers(monitor).await?;
        if leaves.contains(&member_server) { Ok(()) } else { Err(format!("{leaves:?}")) }
    })
    .await;

    // A key no registration names: refused on the leaf port.
    let log = || std::fs::read_to_string(dir.join("nats.log")).unwrap_or_default();
    let refused = |key: &str| format!("authentication error - Nkey \"{key}\"");
    let tail = |log: String| log.lines().rev().take(5).collect::<Vec<_>>().join("\n");
    let stranger_seed = bus_security::new_seed();
    let stranger_key = bus_security::public_key(&stranger_seed).unwrap();
    let _stranger = spoke_of(unique_name("e2e-hub-stranger"), stranger_seed).await;
    eventually("the unregistered key refused", || async { if log().contains(&refused(&stranger_key)) { Ok(()) } else { Err(tail(log())) } }).await;
    assert_eq!(leaf_servers(monitor).await.unwrap(), [member_server.clone()]);
    assert!(!log().contains(&refused(&key)), "{}", log());

    // The registration deleted: out of the configuration, the pods rolled onto it; a server
    // started from it refuses the cluster.
    registrations.delete(&cluster, &Default::default()).await.unwrap();
    eventually("the hub's configuration without the cluster", || async {
        let config = config().await?;
        if config.contains(&key) { Err(config) } else { Ok(()) }
    })
    .await;
    // The StatefulSet is applied after the ConfigMap.
    eventually("the pods rolled onto the configuration without the cluster", || async {
        let hash = config_hash().await?;
        if hash != joined_hash { Ok(()) } else { Err(format!("still {hash:?}")) }
    })
    .await;
    drop(hub);
    let hub = provisioned_server(&client, n, &dir, ports).await;
    eventually("the deregistered cluster refused after the restart", || async { if log().contains(&refused(&key)) { Ok(()) } else { Err(tail(log())) } }).await;
    assert_eq!(leaf_servers(monitor).await.unwrap(), Vec::<String>::new());
    drop(hub);
}

/// `deploy/fleet-spoke` on a spoke control plane of the local environment, with the ConfigMap and
/// the hub's CA its admin makes first. Its meta-operator (the package's account, which reaches
/// nothing outside its namespace) provisions the spoke's bus and the cluster's NKey; the server
/// started from what it provisioned joins the hub's (provisioned by a hub meta-operator) once the
/// hub registers that key; and the package's fleet agent relays the hub's desired state into
/// the spoke's buckets and its heartbeat back. Every process gets its environment and files as
/// the kubelet would from the package's objects, on one JetStream node as the environment runs.
#[tokio::test]
async fn a_spoke_installed_from_its_package_joins_the_hub_and_relays_its_desired_state() {
    use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
    use k8s_openapi::api::core::v1::Secret;
    use kubeflow_crds::fleet::{self, ClusterName};
    use kubeflow_crds::fleet_cluster::FleetCluster;
    use kubeflow_e2e::fleet::{SPOKE_NAMES, SpokeCluster};
    use meta_operator::provision;
    const OPERATORS: &str = "kubeflow-operators";
    let hub_client = client().await;
    let hub_ns = TestNamespace::create(&hub_client, "e2e-bus-fleet-hub").await;
    let (_hub_meta, _nats) = provisioning_meta_operator(&hub_client, &hub_ns.name, &[("FLEET_LEAF_PORT", &HUB_LEAF_PORT.to_string())]).await;
    let hub_secrets: Api<Secret> = Api::namespaced(hub_client.clone(), &hub_ns.name);
    eventually("the hub's bus provisioned", || async { hub_secrets.get(provision::TLS_SECRET).await.map(drop).map_err(|e| e.to_string()) }).await;
    let hub_ports = Ports { client: free_port(), monitor: Some(free_port()), leaf: Some(free_port()) };

    // The spoke's admin: the cluster's name and the hub's leaf URL, the hub's CA, then the package.
    let spoke = SpokeCluster::up(SPOKE_NAMES[0], 1).await;
    let spoke_client = spoke.client().await;
    let cluster: ClusterName = unique_name("e2e-spoke").parse().unwrap();
    let hub_url = format!("tls://localhost:{}", hub_ports.leaf.unwrap());
    let hub_ca = secret_data(&hub_secrets, provision::TLS_SECRET, "ca.crt").await;
    let admin_objects = json!({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": OPERATORS}},
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "fleet-spoke", "namespace": OPERATORS}, "data": {"cluster": cluster.as_str(), "hubUrl": hub_url}},
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": provision::HUB_CA_SECRET, "namespace": OPERATORS}, "stringData": {"ca.crt": hub_ca}},
    ]});
    let file = std::env::temp_dir().join(unique_name("spoke-admin"));
    std::fs::write(&file, admin_objects.to_string()).unwrap();
    let spoke_kubeconfig = spoke.kubeconfig.to_str().unwrap();
    kubectl(&["--kubeconfig", spoke_kubeconfig, "apply", "--server-side", "--force-conflicts", "-f", file.to_str().unwrap()]);
    let package = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/fleet-spoke");
    kubectl(&["--kubeconfig", spoke_kubeconfig, "apply", "--server-side", "--force-conflicts", "-k", package.to_str().unwrap()]);

    // The package's meta-operator: its account reaches nothing outside its namespace.
    let provisioner_kubeconfig = service_account_kubeconfig_with(&spoke_client, &spoke.kubeconfig, OPERATORS, "meta-operator").await;
    let provisioner_client = client_from(&provisioner_kubeconfig).await;
    let may = |verb, group, resource, namespace| may(&provisioner_client, verb, group, resource, namespace);
    assert!(may("create", "apps", "statefulsets", Some(OPERATORS)).await);
    assert!(!may("get", "", "secrets", Some("kube-system")).await, "the spoke's provisioner reads Secrets outside its namespace");
    assert!(!may("list", "kfdef.apps.kubeflow.org", "kfdefs", None).await, "the spoke's provisioner reads KfDefs");
    assert!(!may("create", "apps", "deployments", Some(OPERATORS)).await, "the spoke's provisioner makes Deployments");
    let deployments: Api<Deployment> = Api::namespaced(spoke_client.clone(), OPERATORS);
    let dir = std::env::temp_dir().join(unique_name("fleet-spoke"));
    std::fs::create_dir_all(&dir).unwrap();
    // One JetStream node, as the environment runs (three would wait for a quorum).
    let one_node = ("NATS_REPLICAS".to_string(), "1".to_string());
    let provisioner = deployments.get("meta-operator").await.unwrap();
    let (_, container) = first_container(&provisioner.spec.unwrap().template);
    let mut env = container_env(&spoke_client, OPERATORS, &container, "meta-operator-0").await;
    env.extend([one_node.clone(), ("KUBECONFIG".to_string(), provisioner_kubeconfig.to_string_lossy().into_owned())]);
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let provisioner = OperatorProcess::start("meta-operator", &[], &env);
    let spoke_secrets: Api<Secret> = Api::namespaced(spoke_client.clone(), OPERATORS);
    let statefulsets: Api<StatefulSet> = Api::namespaced(spoke_client.clone(), OPERATORS);
    eventually(&format!("the spoke's bus provisioned for {cluster} (log: {})", provisioner.log.display()), || async {
        let statefulset = statefulsets.get("nats").await.map_err(|e| e.to_string())?;
        let env = format!("{:?}", statefulset.spec.unwrap().template.spec.unwrap().containers[0].env);
        if env.contains(&format!("{cluster}-$(POD_NAME)")) { Ok(()) } else { Err(env) }
    })
    .await;
    let key = secret_data(&spoke_secrets, provision::LEAF_IDENTITY_SECRET, "nkey.pub").await;

    // The hub registers the cluster's key; its server, started with it, admits the spoke's.
    let registrations: Api<FleetCluster> = Api::all(hub_client.clone());
    let registration = json!({"apiVersion": "fleet.kubeflow.org/v1alpha1", "kind": "FleetCluster", "metadata": {"name": cluster.as_str(), "labels": {TEST_NAMESPACE_LABEL: hub_ns.name}}, "spec": {"publicKey": key}});
    registrations.create(&PostParams::default(), &serde_json::from_value(registration).unwrap()).await.unwrap();
    let hub_configs: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(hub_client.clone(), &hub_ns.name);
    eventually("the hub's server configuration admitting the cluster", || async {
        let config = hub_configs.get("nats-config").await.map_err(|e| e.to_string())?.data.unwrap_or_default().remove("nats.conf").unwrap_or_default();
        if config.contains(&key) { Ok(()) } else { Err(config) }
    })
    .await;
    let hub_dir = dir.join("hub");
    std::fs::create_dir_all(&hub_dir).unwrap();
    let _hub = provisioned_server(&hub_client, &hub_ns.name, &hub_dir, hub_ports).await;
    let spoke_dir = dir.join("spoke");
    std::fs::create_dir_all(&spoke_dir).unwrap();
    let spoke_ports = Ports { client: free_port(), monitor: None, leaf: None };
    let _spoke_server = provisioned_server(&spoke_client, OPERATORS, &spoke_dir, spoke_ports).await;
    let server_name = format!("{cluster}-nats-0");
    eventually(&format!("{server_name}'s leaf connection on the hub (hub log: {})", hub_dir.join("nats.log").display()), || async {
        let leaves = leaf_servers(hub_ports.monitor.unwrap()).await?;
        if leaves.contains(&server_name) { Ok(()) } else { Err(format!("{leaves:?}")) }
    })
    .await;

    // The package's agent, on the spoke's server as its pod would reach it.
    let agent = deployments.get("fleet-agent").await.unwrap();
    let (pod, container) = first_container(&agent.spec.unwrap().template);
    assert_eq!(pod.automount_service_account_token, Some(false));
    let mounts = mount_volumes(&spoke_client, OPERATORS, &pod, &container, &dir.join("agent")).await;
    let mut env = container_env(&spoke_client, OPERATORS, &container, "fleet-agent-0").await;
    for (_, value) in env.iter_mut() {
        if let Some((mount, local)) = mounts.iter().find(|(mount, _)| value.starts_with(mount.as_str())) {
            *value = value.replacen(mount.as_str(), &local.to_string_lossy(), 1);
        }
    }
    env.extend([one_node, ("NATS_URL".to_string(), format!("tls://localhost:{}", spoke_ports.client))]);
    assert!(env.iter().any(|(k, v)| k == "FLEET_CLUSTER" && v == cluster.as_str()), "{env:?}");
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let agent = OperatorProcess::start("fleet-agent", &[], &env);

    // The hub writes the cluster's desired state, as its meta-operator (with its provisioned identity).
    let hub_meta = connect_with(Identity::MetaOperator, &hub_ca, secret_data(&hub_secrets, &provision::identity_secret(Identity::MetaOperator), "nkey.seed").await, hub_ports.client).await.unwrap();
    // It also serves the cluster's gate, through which the agent reads its desired bucket.
    let gate = tokio::spawn(nats::serve_leaf_api(hub_meta.clone(), cluster.clone()));
    let hub_js = jetstream::new(hub_meta);
    let (hub_desired, hub_status) = nats::ensure_fleet_buckets(&hub_js, &cluster, 1).await.unwrap();
    let key_of = bus::key(ComponentKind::Dex, "kubeflow", "kubeflow");
    let spec = bus::DesiredComponent {
        kfdef: bus::KfDefRef { namespace: "kubeflow".into(), name: "kubeflow".into(), uid: "uid-kubeflow".into(), generation: 1 },
        component: ComponentKind::Dex,
        spec_hash: "hash-v2.24.0".into(),
        spec: json!({"version": "v2.24.0"}),
        traceparent: None,
        preview: None,
        cluster: Some(cluster.to_string()),
    };
    let spec = serde_json::to_vec(&spec).unwrap();
    hub_desired.put(&key_of, spec.clone().into()).await.unwrap();
    // Read back as the spoke's agent identity (a component operator may only watch its bucket).
    let spoke_identity = provision::identity_secret(Identity::FleetAgent);
    let spoke_reader = connect_with(Identity::FleetAgent, &secret_data(&spoke_secrets, &spoke_identity, "ca.crt").await, secret_data(&spoke_secrets, &spoke_identity, "nkey.seed").await, spoke_ports.client).await.unwrap();
    let spoke_js = jetstream::new(spoke_reader);
    eventually(&format!("the hub's entry in the spoke's Dex bucket (agent log: {})", agent.log.display()), || async {
        let (desired, _, _) = nats::component_buckets(&spoke_js, ComponentKind::Dex).await.map_err(|e| e.to_string())?;
        let entry = desired.get(&key_of).await.map_err(|e| e.to_string())?;
        if entry.as_deref() == Some(spec.as_slice()) { Ok(()) } else { Err(format!("{entry:?}")) }
    })
    .await;
    let agent_key = fleet::StatusKey::Agent.key();
    eventually("the agent's heartbeat in the hub's status bucket", || async {
        let beat = hub_status.get(&agent_key).await.map_err(|e| e.to_string())?.ok_or_else(|| "none yet".to_string())?;
        let beat: fleet::AgentHeartbeat = serde_json::from_slice(&beat).map_err(|e| e.to_string())?;
        if beat.cluster == cluster { Ok(()) } else { Err(format!("{beat:?}")) }
    })
    .await;
    gate.abort();
    drop(agent);
    drop(provisioner);
}
