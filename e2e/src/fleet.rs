//! A fleet's bus on loopback ([`kubeflow_crds::fleet`]): a hub nats-server (JetStream domain
//! `hub`, a leaf port) and a nats-server per spoke cluster, each in its own domain and joined to
//! the hub by the leaf connection it opens with its cluster's NKey over TLS, each with a real
//! `fleet-agent`. For the fleet tests and `bench-fleet`.

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
}

impl Fleet {
    /// A hub registering `names`, a server per spoke joined to it, and each spoke's agent.
    pub async fn start(names: &[&str]) -> Fleet {
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
        Fleet { hub, spokes }
    }

    /// A hub bucket, opened as the meta-operator.
    pub async fn hub_bucket(&self, bucket: String) -> kv::Store {
        jetstream::new(self.hub.client(Identity::MetaOperator).await).get_key_value(bucket).await.unwrap()
    }
}

/// The desired buckets and status bucket of a spoke, as its component operators see them.
pub async fn spoke_buckets(spoke: &Spoke, component: ComponentKind) -> (kv::Store, kv::Store) {
    let js = jetstream::new(spoke.server.client(Identity::Component(component)).await);
    // The agent makes them, as the meta-operator does in a single cluster.
    let (desired, status, _) = eventually("the spoke's buckets", || async { operator_runtime::nats::component_buckets(&js, component).await.map_err(|e| e.to_string()) }).await;
    (desired, status)
}

