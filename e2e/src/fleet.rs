//! A fleet's bus on loopback ([`kubeflow_crds::fleet`]): a hub nats-server (JetStream domain
//! `hub`, a leaf port) and a nats-server per spoke cluster, each in its own domain and joined to
//! the hub by the leaf connection it opens with its cluster's NKey over TLS, each with a real
//! `fleet-agent`; and the spokes' own Kubernetes control planes ([`SpokeCluster`]). For the fleet
//! tests, `bench-fleet` and `bench-placement`.

use async_nats::jetstream::{self, kv};
use kubeflow_crds::ComponentKind;
use kubeflow_crds::bus::Identity;
use kubeflow_crds::fleet::{self, ClusterName};
use operator_runtime::bus_security::{LeafNodes, Seed, new_seed, public_key};

use crate::{NatsServer, OperatorProcess, eventually, free_port};

pub struct Spoke {
    pub name: ClusterName,
    /// The cluster's NKey seed (its leaf connection's credential).
    pub seed: String,
    pub server: NatsServer,
    // Runs for as long as the spoke (killed on drop).
    _agent: OperatorProcess,
}

pub struct Fleet {
    pub hub: NatsServer,
    pub spokes: Vec<Spoke>,
    // The hub's gate for each cluster, when no meta-operator serves it (aborted on drop).
    gates: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for Fleet {
    fn drop(&mut self) {
        self.gates.iter().for_each(|gate| gate.abort());
    }
}

impl Fleet {
    /// A hub registering `names`, a server per spoke joined to it, each spoke's agent, and the
    /// hub's gate for each cluster ([`operator_runtime::nats::serve_leaf_api`], as the hub's
    /// meta-operator serves it), served from this process.
    pub async fn start(names: &[&str]) -> Fleet {
        let mut fleet = Fleet::start_for_meta_operator(names).await;
        let client = fleet.hub.client(Identity::MetaOperator).await;
        fleet.gates = fleet.spokes.iter().map(|spoke| tokio::spawn(operator_runtime::nats::serve_leaf_api(client.clone(), spoke.name.clone()))).collect();
        fleet
    }

    /// As [`Fleet::start`], without the gate: a test that runs the hub's meta-operator has it
    /// serve the gate of each cluster registered with it.
    pub async fn start_for_meta_operator(names: &[&str]) -> Fleet {
        let clusters: Vec<(ClusterName, String)> = names.iter().map(|n| (n.parse().unwrap(), new_seed())).collect();
        let leaf_port = free_port();
        let registered: Vec<(ClusterName, String)> = clusters.iter().map(|(c, seed)| (c.clone(), public_key(seed).unwrap())).collect();
        let hub = NatsServer::start_configured("hub", |config| {
            config.jetstream_domain = Some(fleet::HUB_DOMAIN.into());
            config.leaf_nodes = Some(LeafNodes::Hub { port: leaf_port, clusters: registered });
        })
        .await;
        let js = jetstream::new(hub.client(Identity::MetaOperator).await);
        for (cluster, _) in &clusters {
            operator_runtime::nats::ensure_fleet_buckets(&js, cluster, 1).await.unwrap();
        }
        let mut spokes = Vec::new();
        for (name, seed) in clusters {
            let hub_ca = hub.bus.ca_file().to_string_lossy().into_owned();
            let leaf_seed = seed.clone();
            let domain = name.to_string();
            let server = NatsServer::start_configured(name.as_str(), |config| {
                config.jetstream_domain = Some(domain);
                config.leaf_nodes = Some(LeafNodes::Spoke { hub_url: format!("tls://127.0.0.1:{leaf_port}"), seed: Seed::Literal(leaf_seed), hub_ca_file: hub_ca });
            })
            .await;
            let agent = OperatorProcess::on_bus("fleet-agent", &server, Identity::FleetAgent, &["--cluster", name.as_str()], &[]);
            spokes.push(Spoke { name, seed, server, _agent: agent });
        }
        // Every spoke's leaf connection up, each under its own server name.
        let expected: Vec<String> = spokes.iter().map(|s| s.name.to_string()).collect();
        eventually("every spoke's leaf connection on the hub", || async {
            let leafz = hub.monitor(0, "/leafz").await?;
            let mut names: Vec<String> = leafz["leafs"].as_array().into_iter().flatten().filter_map(|l| l["name"].as_str().map(String::from)).collect();
            names.sort();
            let mut wanted = expected.clone();
            wanted.sort();
            if names == wanted { Ok(()) } else { Err(format!("connected: {names:?}")) }
        })
        .await;
        Fleet { hub, spokes, gates: Vec::new() }
    }

    /// A hub bucket, opened as the meta-operator.
    pub async fn hub_bucket(&self, bucket: String) -> kv::Store {
        jetstream::new(self.hub.client(Identity::MetaOperator).await).get_key_value(bucket).await.unwrap()
    }
}

/// Names of the spoke clusters the fleet tests and benchmarks use, in the order of their
/// [`SpokeCluster`] index (1, 2, …): a name keeps its ports from run to run.
pub const SPOKE_NAMES: [&str; 4] = ["spoke-a", "spoke-b", "spoke-c", "spoke-d"];

/// Registers `spoke` on the hub as a [`FleetCluster`](kubeflow_crds::fleet_cluster::FleetCluster)
/// with its public key, `labels`, and the hub namespaces that may place KfDefs on it.
pub async fn register(hub: &kube::Client, spoke: &Spoke, labels: serde_json::Value, namespaces: &[&str]) -> kubeflow_crds::fleet_cluster::FleetCluster {
    let registration = serde_json::json!({
        "apiVersion": "fleet.kubeflow.org/v1alpha1", "kind": "FleetCluster",
        "metadata": {"name": spoke.name.as_str(), "labels": labels},
        "spec": {"publicKey": public_key(&spoke.seed).unwrap(), "kfdefNamespaces": namespaces},
    });
    let registration: kubeflow_crds::fleet_cluster::FleetCluster = serde_json::from_value(registration).unwrap();
    let api: kube::Api<kubeflow_crds::fleet_cluster::FleetCluster> = kube::Api::all(hub.clone());
    let params = kube::api::PatchParams::apply(crate::FIELD_MANAGER).force();
    api.patch(spoke.name.as_str(), &params, &kube::api::Patch::Apply(&registration)).await.unwrap()
}

/// The desired buckets and status bucket of a spoke, as its component operators see them.
pub async fn spoke_buckets(spoke: &Spoke, component: ComponentKind) -> (kv::Store, kv::Store) {
    let js = jetstream::new(spoke.server.client(Identity::Component(component)).await);
    // The agent makes them, as the meta-operator does in a single cluster.
    let (desired, status, _) = eventually("the spoke's buckets", || async { operator_runtime::nats::component_buckets(&js, component).await.map_err(|e| e.to_string()) }).await;
    (desired, status)
}

/// A second Kubernetes control plane of the local environment (`e2e/env/up.sh` with KFOP_ENV_CLUSTER).
pub struct SpokeCluster {
    pub name: String,
    pub kubeconfig: std::path::PathBuf,
}

impl SpokeCluster {
    /// Starts (or reuses) the control plane `name`; returns once its API server answers and its nodes are Ready.
    ///
    /// `index` (1–9) places its ports (e2e/env/versions.sh): clusters running at once need distinct
    /// ones, and a running cluster keeps the index it was started with. Stopped by `e2e/env/down.sh`
    /// (`KFOP_ENV_CLUSTER=<name>` for this one alone), not on drop: a later test reuses it.
    pub async fn up(name: &str, index: u8) -> SpokeCluster {
        assert!((1..=9).contains(&index), "spoke cluster {name}: index {index} is not in 1–9");
        let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("env/up.sh");
        let output = tokio::process::Command::new(&script)
            .env("KFOP_ENV_CLUSTER", name)
            .env("KFOP_ENV_CLUSTER_INDEX", index.to_string())
            .stdin(std::process::Stdio::null())
            .output()
            .await
            .unwrap_or_else(|e| panic!("run {}: {e}", script.display()));
        assert!(
            output.status.success(),
            "{} for spoke cluster {name} (index {index}) failed ({}):\n{}",
            script.display(),
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
        let spoke = SpokeCluster { name: name.to_string(), kubeconfig: env_state_dir().join("clusters").join(name).join("kubeconfig") };
        assert!(spoke.kubeconfig.is_file(), "{} started spoke cluster {name} but wrote no {}", script.display(), spoke.kubeconfig.display());
        let nodes: kube::Api<k8s_openapi::api::core::v1::Node> = kube::Api::all(spoke.client().await);
        eventually(&format!("spoke cluster {name}'s API server and Ready nodes"), || async {
            let list = nodes.list(&Default::default()).await.map_err(|e| e.to_string())?;
            let ready = |node: &k8s_openapi::api::core::v1::Node| {
                node.status.as_ref().and_then(|s| s.conditions.as_ref()).into_iter().flatten().any(|c| c.type_ == "Ready" && c.status == "True")
            };
            let not_ready: Vec<String> = list.items.iter().filter(|n| !ready(n)).filter_map(|n| n.metadata.name.clone()).collect();
            if !list.items.is_empty() && not_ready.is_empty() { Ok(()) } else { Err(format!("{} nodes, not Ready: {not_ready:?}", list.items.len())) }
        })
        .await;
        spoke
    }

    /// Makes the control plane ready for KfDefs in `namespace` and runs `component`'s operator on
    /// `bus`, the spoke's nats-server: the CRDs, the namespace and its installer account, which the
    /// spoke's admin grants cluster-admin (an install on a spoke runs with the spoke's rights). The
    /// operator runs with its account of `deploy/<component>`, applied on the spoke.
    pub async fn serve(&self, bus: &NatsServer, namespace: &str, component: ComponentKind) -> (kube::Client, OperatorProcess) {
        self.serve_binary(bus, namespace, component, &format!("{component}-operator")).await
    }

    /// As [`Self::serve`], with `binary` as `component`'s operator (e.g. one with test releases).
    pub async fn serve_binary(&self, bus: &NatsServer, namespace: &str, component: ComponentKind, binary: &str) -> (kube::Client, OperatorProcess) {
        let client = self.client().await;
        crate::install_crds(&client).await;
        let namespaces: kube::Api<k8s_openapi::api::core::v1::Namespace> = kube::Api::all(client.clone());
        namespaces.create(&Default::default(), &serde_json::from_value(serde_json::json!({"metadata": {"name": namespace}})).unwrap()).await.unwrap();
        crate::create_installer(&client, namespace).await;
        crate::grant_installer(&client, namespace, "ClusterRoleBinding", "cluster-admin").await;
        let kubeconfig = crate::install_package_with(&client, &self.kubeconfig, component.name()).await;
        let operator = OperatorProcess::on_bus(binary, bus, Identity::Component(component), &[], &[("KUBECONFIG", kubeconfig.to_str().unwrap())]);
        (client, operator)
    }

    /// An admin client for it.
    pub async fn client(&self) -> kube::Client {
        let kubeconfig = kube::config::Kubeconfig::read_from(&self.kubeconfig).unwrap_or_else(|e| panic!("read {}: {e}", self.kubeconfig.display()));
        let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
            .await
            .unwrap_or_else(|e| panic!("client config of spoke cluster {}: {e}", self.name));
        operator_runtime::client::client_for(config).unwrap_or_else(|e| panic!("client of spoke cluster {}: {e}", self.name))
    }
}

/// The environment's state directory, as e2e/env/versions.sh chooses it.
fn env_state_dir() -> std::path::PathBuf {
    if let Some(dir) = std::env::var_os("KFOP_STATE_DIR") {
        return dir.into();
    }
    let cache = std::env::var_os("KFOP_CACHE_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::PathBuf::from(std::env::var_os("HOME").expect("HOME is not set")).join(".cache/kubeflow-operator"));
    cache.join("run")
}
