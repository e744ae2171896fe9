//! The bus the meta-operator provisions in its own namespace, so that an install (OLM's or
//! `kubectl apply -k deploy/all`) gets a working, authenticated bus with no manual step:
//!
//! * Secret [`TLS_SECRET`]: a CA and the server certificate for the NATS Services' names;
//! * Secret `nats-identity-<operator>` per identity ([`identity_secret`]): its NKey seed and
//!   public key, and the CA; the operator mounts it, the server reads the public key from it;
//! * with `--provision-nats-server` (OLM, whose bundles cannot carry a StatefulSet), the server
//!   itself: [`server_objects`], the same objects `deploy/nats` and `deploy/all` hold;
//! * with `--fleet-leaf-port` too, the server is the fleet's hub ([`follow_registrations`]): its
//!   configuration accepts each registered cluster's key on the leaf port, and is made again, its
//!   pods rolled, whenever a registration comes, goes or changes its key;
//! * with `--fleet-cluster` instead, the server is that spoke cluster's ([`FleetRole::Spoke`]):
//!   its own JetStream domain and a leaf connection out to the hub, as the cluster's NKey, whose
//!   seed this process issues into Secret [`LEAF_IDENTITY_SECRET`] and which never leaves it.
//!
//! Secrets are created when missing and never overwritten, except on request: annotating an
//! identity Secret with [`ROTATE_ANNOTATION`] (any new value) issues a new seed and rolls the
//! server's pods so they load the new public key. Operators read their seed at every connect.

use std::collections::BTreeMap;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::rbac::v1::PolicyRule;
use k8s_openapi::ByteString;
use kube::api::{ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use kubeflow_crds::bus::Identity;
use kubeflow_crds::fleet::{ClusterName, HUB_DOMAIN};
use kubeflow_crds::fleet_cluster::FleetCluster;
use operator_runtime::bus_security::{self, Cluster, LeafNodes, PublicKeys, Seed, ServerConfig};
use serde_json::{Value, json};
use tracing::{info, warn};

/// Name of the server's StatefulSet, ConfigMap and client Service.
pub const SERVER: &str = "nats";
/// Headless Service through which the server's pods find each other.
pub const CLUSTER_SERVICE: &str = "nats-cluster";
pub const TLS_SECRET: &str = "nats-tls";
pub const CLIENT_PORT: u16 = 4222;
pub const CLUSTER_PORT: u16 = 6222;
pub const MONITOR_PORT: u16 = 8222;
/// Where an operator's identity Secret is mounted.
pub const IDENTITY_MOUNT: &str = "/var/run/kubeflow/nats";
/// Label on identity Secrets, naming the identity.
pub const IDENTITY_LABEL: &str = "bus.kubeflow.org/identity";
/// Label on the pods allowed to reach the server's client port (the NetworkPolicy).
pub const CLIENT_LABEL: &str = "bus.kubeflow.org/client";
/// Set (to any new value) on an identity Secret to have its seed replaced.
pub const ROTATE_ANNOTATION: &str = "bus.kubeflow.org/rotate";
/// The value of [`ROTATE_ANNOTATION`] last carried out.
pub const ROTATED_ANNOTATION: &str = "bus.kubeflow.org/rotated";
/// On the server's pod template: the public keys it runs with (a change rolls the pods).
pub const KEYS_ANNOTATION: &str = "bus.kubeflow.org/public-keys";
/// On the server's pod template: a hash of its configuration (a change rolls the pods, which
/// read it at start).
pub const CONFIG_ANNOTATION: &str = "bus.kubeflow.org/config-hash";
/// On the TLS Secret: the names its certificate was issued for.
pub const HOSTS_ANNOTATION: &str = "bus.kubeflow.org/hosts";
/// The hub's leaf Service: what spokes' servers connect out to (a LoadBalancer).
pub const LEAF_SERVICE: &str = "nats-leaf";
/// On a spoke: the cluster's NKey (`nkey.seed`, `nkey.pub`), issued here; its public key is what
/// the hub's registration names.
pub const LEAF_IDENTITY_SECRET: &str = "nats-fleet-leaf";
/// On a spoke: the hub's CA certificate (`ca.crt`), which the spoke's admin copies from the hub's
/// [`TLS_SECRET`]; the spoke's server checks the hub's certificate against it.
pub const HUB_CA_SECRET: &str = "nats-hub-ca";
/// The spoke server's environment variable holding the cluster's seed (nats-server takes the seed
/// itself, not a file).
const LEAF_SEED_ENV: &str = "KFOP_FLEET_SEED";
const HUB_CA_MOUNT: &str = "/etc/nats/hub";
const FIELD_MANAGER: &str = "kubeflow-meta-operator-bus";
const NATS_IMAGE: &str = "docker.io/library/nats:2.12.1-alpine";

pub fn identity_secret(identity: Identity) -> String {
    format!("nats-identity-{}", identity.user())
}

/// URL of the server for operators in its namespace (the certificate names the short Service name
/// too, so the URL does not depend on which namespace the install chose).
pub fn url() -> String {
    format!("tls://{SERVER}:{CLIENT_PORT}")
}

/// Names the server certificate is valid for: the client Service and every pod of the cluster.
pub fn server_hosts(namespace: &str) -> Vec<String> {
    let mut hosts = vec![SERVER.to_string(), format!("{SERVER}.{namespace}"), "localhost".into(), "127.0.0.1".into()];
    for base in [format!("{SERVER}.{namespace}.svc"), format!("*.{CLUSTER_SERVICE}.{namespace}.svc")] {
        hosts.push(format!("{base}.cluster.local"));
        hosts.push(base);
    }
    hosts
}

/// Labels of the server's objects and of the TLS Secret.
const SERVER_LABELS: [(&str, &str); 2] = [("app.kubernetes.io/name", SERVER), ("app.kubernetes.io/part-of", "kubeflow-operator")];

fn labels() -> Value {
    json!(BTreeMap::from(SERVER_LABELS))
}

/// The NATS server the meta-operator provisions.
#[derive(Clone, Debug, PartialEq)]
pub struct Server {
    /// JetStream nodes (a StatefulSet's pods).
    pub replicas: usize,
    /// Its place in a fleet; none on a single cluster.
    pub fleet: Option<FleetRole>,
    /// Image of the metrics sidecar beside each node (`meta-operator nats-exporter`, see
    /// [`crate::nats_exporter`]); none without.
    pub exporter_image: Option<String>,
}

/// What a server is in a fleet.
#[derive(Clone, Debug, PartialEq)]
pub enum FleetRole {
    /// The hub: its leaf port and the clusters it accepts there.
    Hub(Hub),
    /// A spoke cluster's server: JetStream domain the cluster's name, a leaf connection out to
    /// the hub as the cluster's NKey ([`LEAF_IDENTITY_SECRET`]), the hub's certificate checked
    /// against [`HUB_CA_SECRET`].
    Spoke(Spoke),
}

#[derive(Clone, Debug, PartialEq)]
pub struct Hub {
    pub leaf_port: u16,
    /// Each registered cluster's name and public key ([`leaf_users`]).
    pub clusters: Vec<(ClusterName, String)>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Spoke {
    /// The cluster's name, as registered on the hub.
    pub cluster: ClusterName,
    /// The hub's leaf port, `tls://<host>:<port>` ([`hub_url`]).
    pub hub_url: String,
}

impl Server {
    /// A server of `replicas` nodes, no fleet.
    pub fn single_cluster(replicas: usize) -> Self {
        Self { replicas, fleet: None, exporter_image: None }
    }

    /// The same server with its metrics sidecar of `image` (none: without one).
    pub fn with_exporter(self, image: Option<String>) -> Self {
        Self { exporter_image: image, ..self }
    }

    fn hub(&self) -> Option<&Hub> {
        match &self.fleet {
            Some(FleetRole::Hub(hub)) => Some(hub),
            _ => None,
        }
    }

    fn spoke(&self) -> Option<&Spoke> {
        match &self.fleet {
            Some(FleetRole::Spoke(spoke)) => Some(spoke),
            _ => None,
        }
    }
}

/// The hub's leaf URL a spoke is given, checked: `tls://<host>:<port>` (a leaf connection to the
/// hub is always TLS), nothing else.
pub fn hub_url(url: &str) -> Result<String, String> {
    let allowed = "allowed: tls://<host>:<port>";
    let address = url.strip_prefix("tls://").ok_or_else(|| format!("hub URL {url:?} is not a TLS URL; {allowed}"))?;
    let (host, port) = address.rsplit_once(':').ok_or_else(|| format!("hub URL {url:?} names no port; {allowed}"))?;
    let host_ok = !host.is_empty() && host.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '[' | ']' | ':'));
    if !host_ok || port.parse::<u16>().map_or(true, |p| p == 0) {
        return Err(format!("hub URL {url:?} is not a host and port; {allowed}"));
    }
    Ok(url.to_string())
}

/// The server's configuration in the pods: TLS from [`TLS_SECRET`], public keys from the
/// identity Secrets (environment), routes to every other pod when `replicas > 1`; as the hub,
/// JetStream domain [`HUB_DOMAIN`] and the leaf port, where each registered cluster's key is a
/// user with its cluster's permissions; as a spoke, the cluster's domain and its leaf connection.
pub fn server_config(namespace: &str, server: &Server) -> String {
    let replicas = server.replicas;
    let cluster = (replicas > 1).then(|| Cluster {
        name: "kubeflow-bus".into(),
        port: CLUSTER_PORT,
        routes: (0..replicas).map(|i| format!("nats-route://{SERVER}-{i}.{CLUSTER_SERVICE}.{namespace}.svc:{CLUSTER_PORT}")).collect(),
    });
    bus_security::server_config(&ServerConfig {
        host: "0.0.0.0".into(),
        port: CLIENT_PORT,
        monitor_port: Some(MONITOR_PORT),
        server_name: None,
        store_dir: "/data".into(),
        cert_file: "/etc/nats/tls/tls.crt".into(),
        key_file: "/etc/nats/tls/tls.key".into(),
        ca_file: "/etc/nats/tls/ca.crt".into(),
        public_keys: PublicKeys::FromEnv,
        cluster,
        jetstream_domain: server.fleet.as_ref().map(|role| match role {
            FleetRole::Hub(_) => HUB_DOMAIN.to_string(),
            FleetRole::Spoke(spoke) => spoke.cluster.to_string(),
        }),
        leaf_nodes: server.fleet.as_ref().map(|role| match role {
            FleetRole::Hub(hub) => LeafNodes::Hub { port: hub.leaf_port, clusters: hub.clusters.clone() },
            FleetRole::Spoke(spoke) => LeafNodes::Spoke { hub_url: spoke.hub_url.clone(), seed: Seed::FromEnv(LEAF_SEED_ENV.into()), hub_ca_file: format!("{HUB_CA_MOUNT}/ca.crt") },
        }),
    })
}

/// The hub's leaf users from the registrations: each usable one's cluster name and key, by name.
/// A registration that is not usable (its status says why) or whose key an earlier one already
/// has (nats-server refuses a configuration naming a key twice) is left out, so that no
/// registration can stop the hub's server.
pub fn leaf_users<'a>(registrations: impl IntoIterator<Item = &'a FleetCluster>) -> Vec<(ClusterName, String)> {
    let mut usable: Vec<(ClusterName, String)> = registrations.into_iter().filter_map(|r| r.leaf_user().ok()).collect();
    usable.sort();
    let mut keys = std::collections::BTreeSet::new();
    usable.retain(|(cluster, key)| {
        let first = keys.insert(key.clone());
        if !first {
            warn!(%cluster, "registration left out of the hub's server: another registration has its public key");
        }
        first
    });
    usable
}

/// The NATS server: its configuration, Services, a StatefulSet of `replicas` JetStream nodes, a
/// disruption budget keeping a quorum, and a NetworkPolicy that lets only operator pods (label
/// [`CLIENT_LABEL`]) reach the client port and only the server's own pods its route port; as the
/// hub, the leaf port, open to any address (the spokes' servers connect from other clusters; TLS
/// and each cluster's key guard it), and its LoadBalancer Service [`LEAF_SERVICE`]; as a spoke,
/// server names that hold the cluster's name (the hub refuses a second leaf connection from a
/// server name it has), the cluster's seed and the hub's CA.
pub fn server_objects(namespace: &str, server: &Server) -> Vec<Value> {
    let replicas = server.replicas;
    let config = server_config(namespace, server);
    let mut env = match server.spoke() {
        None => vec![json!({"name": "SERVER_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}})],
        Some(spoke) => vec![
            json!({"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}),
            json!({"name": "SERVER_NAME", "value": format!("{}-$(POD_NAME)", spoke.cluster)}),
            json!({"name": LEAF_SEED_ENV, "valueFrom": {"secretKeyRef": {"name": LEAF_IDENTITY_SECRET, "key": "nkey.seed"}}}),
        ],
    };
    for identity in Identity::all() {
        env.push(json!({"name": bus_security::public_key_env(identity), "valueFrom": {"secretKeyRef": {"name": identity_secret(identity), "key": "nkey.pub"}}}));
    }
    let mut mounts = vec![
        json!({"name": "data", "mountPath": "/data"}),
        json!({"name": "config", "mountPath": "/etc/nats/config", "readOnly": true}),
        json!({"name": "tls", "mountPath": "/etc/nats/tls", "readOnly": true}),
    ];
    let mut volumes = vec![json!({"name": "config", "configMap": {"name": "nats-config"}}), json!({"name": "tls", "secret": {"secretName": TLS_SECRET}})];
    if server.spoke().is_some() {
        mounts.push(json!({"name": "hub-ca", "mountPath": HUB_CA_MOUNT, "readOnly": true}));
        volumes.push(json!({"name": "hub-ca", "secret": {"secretName": HUB_CA_SECRET}}));
    }
    let mut ports = vec![json!({"name": "client", "containerPort": CLIENT_PORT}), json!({"name": "cluster", "containerPort": CLUSTER_PORT}), json!({"name": "monitor", "containerPort": MONITOR_PORT})];
    let mut ingress = vec![
        json!({"from": [{"podSelector": {"matchLabels": {CLIENT_LABEL: "true"}}}], "ports": [{"port": CLIENT_PORT}]}),
        json!({"from": [{"podSelector": {"matchLabels": {"app.kubernetes.io/name": SERVER}}}], "ports": [{"port": CLUSTER_PORT}]}),
        json!({"from": [{"podSelector": {}}], "ports": [{"port": MONITOR_PORT}]}),
    ];
    if let Some(hub) = server.hub() {
        ports.push(json!({"name": "leafnodes", "containerPort": hub.leaf_port}));
        ingress.push(json!({"ports": [{"port": hub.leaf_port}]}));
    }
    let security = json!({"allowPrivilegeEscalation": false, "readOnlyRootFilesystem": true, "capabilities": {"drop": ["ALL"]}});
    let mut containers = vec![json!({
        "name": "nats", "image": NATS_IMAGE,
        "args": ["-c", "/etc/nats/config/nats.conf"],
        "env": env,
        "ports": ports,
        "readinessProbe": {"httpGet": {"path": "/healthz?js-enabled-only=true", "port": "monitor"}},
        "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"memory": "512Mi"}},
        "securityContext": security,
        "volumeMounts": mounts,
    })];
    if let Some(image) = &server.exporter_image {
        // The server's metrics, read from its monitor port on loopback; its port is open to
        // anyone (a monitoring stack), and answers nothing but `/metrics`, to the scrape token.
        use crate::nats_exporter::EXPORTER_PORT;
        containers.push(json!({
            "name": "exporter", "image": image,
            "args": ["nats-exporter", format!("--monitor-port={MONITOR_PORT}"), format!("--listen=0.0.0.0:{EXPORTER_PORT}")],
            "ports": [{"name": "metrics", "containerPort": EXPORTER_PORT}],
            "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}, "limits": {"memory": "64Mi"}},
            "securityContext": security,
        }));
        ingress.push(json!({"ports": [{"port": EXPORTER_PORT}]}));
    }
    let mut pod = json!({"containers": containers, "volumes": volumes});
    if server.exporter_image.is_some() {
        operator_runtime::server::mount_scrape_token(&mut pod, 1);
    }
    let metadata = |name: &str| json!({"name": name, "namespace": namespace, "labels": labels()});
    let mut objects = vec![
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata("nats-config"), "data": {"nats.conf": config}}),
        json!({"apiVersion": "v1", "kind": "Service", "metadata": metadata(SERVER),
               "spec": {"selector": {"app.kubernetes.io/name": SERVER}, "ports": [{"name": "client", "port": CLIENT_PORT}]}}),
        json!({"apiVersion": "v1", "kind": "Service", "metadata": metadata(CLUSTER_SERVICE),
               "spec": {"clusterIP": "None", "publishNotReadyAddresses": true, "selector": {"app.kubernetes.io/name": SERVER},
                        "ports": [{"name": "cluster", "port": CLUSTER_PORT}]}}),
        json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": metadata(SERVER),
               "spec": {
                   "serviceName": CLUSTER_SERVICE, "replicas": replicas, "podManagementPolicy": "Parallel",
                   "selector": {"matchLabels": {"app.kubernetes.io/name": SERVER}},
                   "template": {"metadata": {"labels": labels(), "annotations": {CONFIG_ANNOTATION: operator_runtime::content_hash(&json!(config))}}, "spec": {
                       "securityContext": {"runAsNonRoot": true, "runAsUser": 1000, "fsGroup": 1000, "seccompProfile": {"type": "RuntimeDefault"}},
                       "affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100, "podAffinityTerm": {
                           "topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app.kubernetes.io/name": SERVER}}}}]}},
                       "containers": pod["containers"],
                       "volumes": pod["volumes"],
                   }},
                   "volumeClaimTemplates": [{"metadata": {"name": "data"}, "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "5Gi"}}}}],
               }}),
        json!({"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": metadata(SERVER),
               "spec": {
                   "podSelector": {"matchLabels": {"app.kubernetes.io/name": SERVER}},
                   "policyTypes": ["Ingress"],
                   "ingress": ingress,
               }}),
    ];
    if let Some(hub) = server.hub() {
        objects.push(json!({"apiVersion": "v1", "kind": "Service", "metadata": metadata(LEAF_SERVICE),
                            "spec": {"type": "LoadBalancer", "selector": {"app.kubernetes.io/name": SERVER}, "ports": [{"name": "leafnodes", "port": hub.leaf_port}]}}));
    }
    if replicas > 1 {
        objects.push(json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": metadata(SERVER),
                            "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app.kubernetes.io/name": SERVER}}}}));
    }
    objects
}

/// `deployment` (an operator's) as a client of the bus as `identity`: the server's URL, its
/// identity Secret mounted (optional, so the meta-operator can start before it provisioned its
/// own: the seed is read at every connect), and the label the NetworkPolicy admits.
pub fn with_identity(mut deployment: Value, identity: Identity) -> Value {
    let template = &mut deployment["spec"]["template"];
    template["metadata"]["labels"][CLIENT_LABEL] = json!("true");
    let spec = &mut template["spec"];
    let container = &mut spec["containers"][0];
    let env = [("NATS_URL", url()), ("NATS_NKEY_FILE", format!("{IDENTITY_MOUNT}/nkey.seed")), ("NATS_CA_FILE", format!("{IDENTITY_MOUNT}/ca.crt"))];
    let env: Vec<Value> = env.into_iter().map(|(name, value)| json!({"name": name, "value": value})).collect();
    container["env"] = json!([container["env"].as_array().cloned().unwrap_or_default(), env].concat());
    let mounts = container["volumeMounts"].as_array().cloned().unwrap_or_default();
    container["volumeMounts"] = json!([mounts, vec![json!({"name": "nats-identity", "mountPath": IDENTITY_MOUNT, "readOnly": true})]].concat());
    let volumes = spec["volumes"].as_array().cloned().unwrap_or_default();
    spec["volumes"] = json!([volumes, vec![json!({"name": "nats-identity", "secret": {"secretName": identity_secret(identity), "optional": true}})]].concat());
    deployment
}

/// The meta-operator's rules in its own namespace: the Secrets it provisions, and (with
/// `--provision-nats-server`) the server's objects.
pub fn namespaced_rules() -> Vec<PolicyRule> {
    let rule = |group: &str, resources: &[&str], verbs: &[&str]| PolicyRule {
        api_groups: Some(vec![group.into()]),
        resources: Some(resources.iter().map(|r| r.to_string()).collect()),
        verbs: verbs.iter().map(|v| v.to_string()).collect(),
        ..Default::default()
    };
    let write = ["get", "list", "watch", "create", "patch", "update"];
    vec![
        rule("", &["secrets", "configmaps", "services"], &write),
        rule("apps", &["statefulsets"], &write),
        rule("policy", &["poddisruptionbudgets"], &write),
        rule("networking.k8s.io", &["networkpolicies"], &write),
    ]
}

fn data(secret: &Secret, key: &str) -> Option<String> {
    secret.data.as_ref()?.get(key).map(|b| String::from_utf8_lossy(&b.0).into_owned())
}

/// Secret `name` of `type_`, labelled `labels`, holding `entries`.
fn secret(name: &str, type_: &str, labels: &[(&str, &str)], entries: &[(&str, &str)]) -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some(labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()),
            ..Default::default()
        },
        type_: Some(type_.into()),
        data: Some(entries.iter().map(|(k, v)| (k.to_string(), ByteString(v.as_bytes().to_vec()))).collect()),
        ..Default::default()
    }
}

/// Secret `name` with a fresh NKey seed and its public key (and `more`), labelled as the
/// identity `user` (so [`ROTATE_ANNOTATION`] applies to it).
fn new_nkey(name: &str, user: &str, more: &[(&str, &str)]) -> Secret {
    let seed = bus_security::new_seed();
    let public = bus_security::public_key(&seed).expect("a generated seed has a public key");
    let labels = [(IDENTITY_LABEL, user), ("app.kubernetes.io/part-of", "kubeflow-operator")];
    secret(name, "Opaque", &labels, &[[("nkey.seed", seed.as_str()), ("nkey.pub", &public)].as_slice(), more].concat())
}

/// The identity Secret for `identity` with a fresh seed.
fn new_identity(identity: Identity, ca: &str) -> Secret {
    new_nkey(&identity_secret(identity), &identity.user(), &[("ca.crt", ca)])
}

/// Creates `secret` unless it exists; returns what is stored.
async fn create_or_get(secrets: &Api<Secret>, secret: Secret) -> Result<Secret, kube::Error> {
    match secrets.create(&PostParams::default(), &secret).await {
        Err(kube::Error::Api(s)) if s.code == 409 => secrets.get(&secret.name_any()).await,
        other => other,
    }
}

/// The names of `wanted` that the bus certificate in `tls` was not issued for ([`HOSTS_ANNOTATION`]).
pub fn names_missing<'a>(tls: &Secret, wanted: &'a [String]) -> Vec<&'a String> {
    let issued_for: Vec<&str> = tls.annotations().get(HOSTS_ANNOTATION).map(|h| h.split(',').collect()).unwrap_or_default();
    wanted.iter().filter(|h| !issued_for.contains(&h.as_str())).collect()
}

/// Makes sure the TLS and identity Secrets exist in `namespace` (and, with `server`, the
/// server's objects). Existing Secrets are kept: a restart never changes a credential. The
/// certificate is issued for [`server_hosts`] and `extra_hosts` (the names spokes reach the hub's
/// leaf port by); an existing one issued without some of those is kept, and they are named in a
/// warning.
pub async fn provision(client: &Client, namespace: &str, extra_hosts: &[String], server: Option<&Server>) -> Result<(), kube::Error> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let hosts = [server_hosts(namespace), extra_hosts.to_vec()].concat();
    let tls = match secrets.get_opt(TLS_SECRET).await? {
        Some(s) => s,
        None => {
            let material = bus_security::tls_material(&hosts).expect("certificate generation");
            let entries = [("ca.crt", material.ca_cert.as_str()), ("tls.crt", &material.server_cert), ("tls.key", &material.server_key)];
            info!(secret = TLS_SECRET, "bus TLS certificate issued");
            let mut tls = secret(TLS_SECRET, "kubernetes.io/tls", &SERVER_LABELS, &entries);
            tls.annotations_mut().insert(HOSTS_ANNOTATION.into(), hosts.join(","));
            create_or_get(&secrets, tls).await?
        }
    };
    let missing = names_missing(&tls, extra_hosts);
    // What the alert KubeflowBusCertificateMissingNames reads (deploy/monitoring).
    operator_runtime::metrics::BUS_CERTIFICATE_MISSING_NAMES.set(missing.len() as i64);
    if !missing.is_empty() {
        warn!(secret = TLS_SECRET, ?missing, "the bus certificate was issued without these names, so spokes cannot verify the hub by them; delete the Secret to have it issued again (and give the spokes the new CA)");
    }
    let ca = data(&tls, "ca.crt").unwrap_or_default();
    for identity in Identity::all() {
        match secrets.get_opt(&identity_secret(identity)).await? {
            None => {
                create_or_get(&secrets, new_identity(identity, &ca)).await?;
                info!(identity = %identity.user(), "bus identity issued");
            }
            // The TLS Secret was replaced: hand out its CA.
            Some(existing) if data(&existing, "ca.crt").as_deref() != Some(ca.as_str()) => {
                let patch = json!({"data": {"ca.crt": ByteString(ca.as_bytes().to_vec())}});
                secrets.patch(&existing.name_any(), &PatchParams::default(), &Patch::Merge(patch)).await?;
            }
            Some(_) => {}
        }
    }
    if let Some(spoke) = server.and_then(Server::spoke) {
        let leaf = match secrets.get_opt(LEAF_IDENTITY_SECRET).await? {
            Some(leaf) => leaf,
            None => create_or_get(&secrets, new_nkey(LEAF_IDENTITY_SECRET, "fleet-leaf", &[])).await?,
        };
        let public_key = data(&leaf, "nkey.pub").unwrap_or_default();
        info!(cluster = %spoke.cluster, %public_key, secret = LEAF_IDENTITY_SECRET, "this cluster's NKey: the hub admits it once a FleetCluster of this name has it as spec.publicKey");
    }
    if let Some(server) = server {
        apply_server(client, namespace, server).await?;
    }
    Ok(())
}

/// Applies [`server_objects`]; a changed configuration rolls the server's pods.
pub async fn apply_server(client: &Client, namespace: &str, server: &Server) -> Result<(), kube::Error> {
    for object in server_objects(namespace, server) {
        let resource = kube::discovery::ApiResource::from_gvk(&kube::core::GroupVersionKind::try_from(&kube::core::TypeMeta {
            api_version: object["apiVersion"].as_str().unwrap_or_default().into(),
            kind: object["kind"].as_str().unwrap_or_default().into(),
        })
        .expect("a known kind"));
        let name = object["metadata"]["name"].as_str().unwrap_or_default().to_string();
        let api: Api<kube::api::DynamicObject> = Api::namespaced_with(client.clone(), namespace, &resource);
        api.patch(&name, &PatchParams::apply(FIELD_MANAGER).force(), &Patch::Apply(&object)).await?;
    }
    let clusters: Vec<&str> = server.hub().iter().flat_map(|hub| hub.clusters.iter().map(|(c, _)| c.as_str())).collect();
    let spoke_of = server.spoke().map(|spoke| spoke.hub_url.as_str());
    info!(replicas = server.replicas, hub = server.hub().is_some(), ?clusters, ?spoke_of, "NATS server applied");
    Ok(())
}

/// The hub's server, kept in step with the registrations until the process ends: applied once
/// they are listed, then whenever the leaf users they give ([`leaf_users`]) change. A failed
/// apply is retried with backoff.
pub async fn follow_registrations(client: Client, namespace: String, replicas: usize, leaf_port: u16, exporter_image: Option<String>) {
    let registrations: Api<FleetCluster> = Api::all(client.clone());
    let (store, changes) = operator_runtime::watches::reflect(registrations, watcher::Config::default(), ());
    let changed = std::sync::Arc::new(tokio::sync::Notify::new());
    let notify = changed.clone();
    tokio::spawn(changes.for_each(move |_| {
        notify.notify_one();
        std::future::ready(())
    }));
    if store.wait_until_ready().await.is_err() {
        return;
    }
    let mut applied: Option<Server> = None;
    let mut delays = operator_runtime::retry::exponential(std::time::Duration::from_millis(500), std::time::Duration::from_secs(30));
    loop {
        let wanted = Server { replicas, fleet: Some(FleetRole::Hub(Hub { leaf_port, clusters: leaf_users(store.state().iter().map(|r| r.as_ref())) })), exporter_image: exporter_image.clone() };
        if applied.as_ref() != Some(&wanted) {
            match apply_server(&client, &namespace, &wanted).await {
                Ok(()) => {
                    applied = Some(wanted);
                    backoff::backoff::Backoff::reset(&mut delays);
                }
                Err(error) => {
                    warn!(%error, "cannot apply the hub's NATS server; retrying");
                    tokio::time::sleep(backoff::backoff::Backoff::next_backoff(&mut delays).unwrap_or(operator_runtime::retry::MAX)).await;
                    continue;
                }
            }
        }
        changed.notified().await;
    }
}

/// Carries out rotation requests on identity Secrets until the process ends.
pub async fn rotate_on_request(client: Client, namespace: String) {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &namespace);
    let config = watcher::Config::default().labels(IDENTITY_LABEL);
    let mut changes = std::pin::pin!(operator_runtime::watches::watch(secrets.clone(), config).applied_objects());
    while let Some(change) = changes.next().await {
        let Ok(secret) = change else { continue };
        let annotations = secret.annotations();
        let Some(request) = annotations.get(ROTATE_ANNOTATION).filter(|r| annotations.get(ROTATED_ANNOTATION) != Some(r)).cloned() else { continue };
        if let Err(error) = rotate(&client, &namespace, secret, &request).await {
            warn!(%error, "rotating a bus identity failed; it is retried on the next change");
        }
    }
}

async fn rotate(client: &Client, namespace: &str, mut secret: Secret, request: &str) -> Result<(), kube::Error> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let seed = bus_security::new_seed();
    let public = bus_security::public_key(&seed).expect("a generated seed has a public key");
    let data = secret.data.get_or_insert_default();
    data.insert("nkey.seed".into(), ByteString(seed.into_bytes()));
    data.insert("nkey.pub".into(), ByteString(public.into_bytes()));
    secret.annotations_mut().insert(ROTATED_ANNOTATION.into(), request.into());
    // Replace with the resourceVersion read: a concurrent change makes this fail, not be lost.
    let name = secret.name_any();
    secrets.replace(&name, &PostParams::default(), &secret).await?;
    info!(secret = %name, "bus identity rotated");
    // The server reads public keys at start: roll its pods onto the new set.
    let identities: BTreeMap<String, Secret> = secrets.list(&ListParams::default().labels(IDENTITY_LABEL)).await?.items.into_iter().map(|s| (s.name_any(), s)).collect();
    let names = Identity::all().into_iter().map(identity_secret).chain([LEAF_IDENTITY_SECRET.to_string()]);
    let keys: Vec<String> = names.filter_map(|name| identities.get(&name)).map(public_key_prefix).collect();
    let statefulsets: Api<StatefulSet> = Api::namespaced(client.clone(), namespace);
    if statefulsets.get_opt(SERVER).await?.is_some() {
        // A merge patch: the annotation only, whoever applied the StatefulSet (kubectl, or this
        // process under FIELD_MANAGER, whose applied configuration must stay whole).
        let patch = json!({"spec": {"template": {"metadata": {"annotations": {KEYS_ANNOTATION: keys.join(".")}}}}});
        statefulsets.patch(SERVER, &PatchParams::default(), &Patch::Merge(&patch)).await?;
        info!("NATS server pods rolled onto the rotated public keys");
    }
    Ok(())
}

/// The first characters of an identity's public key (enough to tell keys apart; public anyway).
fn public_key_prefix(secret: &Secret) -> String {
    data(secret, "nkey.pub").unwrap_or_default().chars().take(12).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_single_server_has_no_routes_and_a_cluster_routes_to_every_pod() {
        assert!(!server_config("ops", &Server::single_cluster(1)).contains("cluster {"));
        let clustered = server_config("ops", &Server::single_cluster(3));
        for i in 0..3 {
            assert!(clustered.contains(&format!("nats-route://nats-{i}.nats-cluster.ops.svc:6222")), "{clustered}");
        }
        assert!(server_hosts("ops").contains(&"*.nats-cluster.ops.svc".to_string()));
        assert!(server_hosts("ops").contains(&"nats.ops.svc".to_string()));
    }

    #[test]
    fn the_server_takes_every_identitys_public_key_from_its_secret() {
        let objects = server_objects("ops", &Server::single_cluster(3));
        let statefulset = objects.iter().find(|o| o["kind"] == "StatefulSet").unwrap();
        let env = statefulset["spec"]["template"]["spec"]["containers"][0]["env"].as_array().unwrap();
        assert_eq!(env.len(), Identity::all().len() + 1);
        assert!(env.contains(&json!({"name": "KFOP_NKEY_KATIB_OPERATOR", "valueFrom": {"secretKeyRef": {"name": "nats-identity-katib-operator", "key": "nkey.pub"}}})));
        let policy = objects.iter().find(|o| o["kind"] == "NetworkPolicy").unwrap();
        assert_eq!(policy["spec"]["ingress"][0]["from"][0]["podSelector"]["matchLabels"][CLIENT_LABEL], "true");
        assert!(objects.iter().any(|o| o["kind"] == "PodDisruptionBudget"));
    }

    /// With an exporter image, each node has the metrics sidecar reading its monitor port, and
    /// the sidecar's port (only) is open to anyone; without, neither.
    #[test]
    fn a_server_with_an_exporter_image_serves_its_metrics_beside_each_node() {
        let objects = server_objects("ops", &Server::single_cluster(3).with_exporter(Some("ghcr.io/x/meta-operator@sha256:1".into())));
        let pod = &objects.iter().find(|o| o["kind"] == "StatefulSet").unwrap()["spec"]["template"]["spec"];
        let exporter = &pod["containers"][1];
        assert_eq!(exporter["image"], "ghcr.io/x/meta-operator@sha256:1");
        assert_eq!(exporter["args"], json!(["nats-exporter", "--monitor-port=8222", "--listen=0.0.0.0:7777"]));
        assert_eq!(exporter["ports"], json!([{"name": "metrics", "containerPort": 7777}]));
        // Nothing of the server's: only the scrape token its `/metrics` answers.
        assert_eq!(exporter["env"], json!([{"name": "KFOP_METRICS_TOKEN_FILE", "value": "/var/run/secrets/kubeflow-operator/metrics/token"}]));
        assert_eq!(exporter["volumeMounts"], json!([{"name": "metrics-token", "mountPath": "/var/run/secrets/kubeflow-operator/metrics", "readOnly": true}]));
        assert!(pod["volumes"].as_array().unwrap().contains(&json!({"name": "metrics-token", "secret": {"secretName": "kubeflow-metrics-token", "optional": true}})), "{}", pod["volumes"]);
        assert!(pod["containers"][0].to_string().matches("metrics-token").count() == 0, "the server itself does not get it: {}", pod["containers"][0]);
        let ingress = objects.iter().find(|o| o["kind"] == "NetworkPolicy").unwrap()["spec"]["ingress"].clone();
        assert!(ingress.as_array().unwrap().contains(&json!({"ports": [{"port": 7777}]})), "{ingress}");
        let without = server_objects("ops", &Server::single_cluster(3));
        let pod = &without.iter().find(|o| o["kind"] == "StatefulSet").unwrap()["spec"]["template"]["spec"];
        assert_eq!(pod["containers"].as_array().unwrap().len(), 1);
        assert!(!without.iter().find(|o| o["kind"] == "NetworkPolicy").unwrap()["spec"]["ingress"].to_string().contains("7777"));
    }

    #[test]
    fn the_names_a_certificate_was_not_issued_for_are_named() {
        let mut tls = secret(TLS_SECRET, "kubernetes.io/tls", &SERVER_LABELS, &[]);
        tls.annotations_mut().insert(HOSTS_ANNOTATION.into(), "nats,nats.ops.svc,hub.example.com".into());
        let wanted = ["hub.example.com".to_string(), "hub.example.org".to_string()];
        assert_eq!(names_missing(&tls, &wanted), [&wanted[1]]);
        assert!(names_missing(&tls, &wanted[..1]).is_empty());
        tls.annotations_mut().remove(HOSTS_ANNOTATION);
        assert_eq!(names_missing(&tls, &wanted).len(), 2, "a certificate that names no hosts was issued for none");
    }

    fn registration(name: &str, key: &str) -> FleetCluster {
        serde_json::from_value(json!({"metadata": {"name": name}, "spec": {"publicKey": key}})).unwrap()
    }

    fn user_key() -> String {
        bus_security::public_key(&bus_security::new_seed()).unwrap()
    }

    #[test]
    fn the_hubs_leaf_users_are_the_usable_registrations_each_key_once() {
        let (a, b) = (user_key(), user_key());
        let registrations = [registration("us-1", &b), registration("eu-1", &a), registration("hub", &user_key()), registration("eu-2", "UNOTAKEY"), registration("eu-3", &a)];
        let users = leaf_users(&registrations);
        let names: Vec<&str> = users.iter().map(|(c, _)| c.as_str()).collect();
        // eu-3 repeats eu-1's key (kept: first by name); "hub" and a malformed key are no users.
        assert_eq!(names, ["eu-1", "us-1"]);
        assert_eq!(users[0].1, a);
    }

    #[test]
    fn the_hubs_server_has_the_hub_domain_a_leaf_port_open_to_spokes_and_rolls_when_a_cluster_joins() {
        let key = user_key();
        let hub = |clusters: Vec<(ClusterName, String)>| Server { replicas: 3, fleet: Some(FleetRole::Hub(Hub { leaf_port: 7422, clusters })), exporter_image: None };
        let none = server_objects("ops", &hub(vec![]));
        let joined = server_objects("ops", &hub(vec![("eu-1".parse().unwrap(), key.clone())]));
        let config = |objects: &[Value]| objects.iter().find(|o| o["kind"] == "ConfigMap").unwrap()["data"]["nats.conf"].as_str().unwrap().to_string();
        let joined_config = config(&joined);
        assert!(joined_config.contains("domain: \"hub\""), "{joined_config}");
        assert!(joined_config.contains("leafnodes {\n  host: \"0.0.0.0\"\n  port: 7422"), "{joined_config}");
        assert!(joined_config.contains(&format!("{{nkey: \"{key}\", allowed_connection_types: [\"LEAFNODE\"]")), "{joined_config}");
        assert!(!config(&none).contains(&key));
        assert!(!server_config("ops", &Server::single_cluster(3)).contains("leafnodes"));
        let hash = |objects: &[Value]| objects.iter().find(|o| o["kind"] == "StatefulSet").unwrap()["spec"]["template"]["metadata"]["annotations"][CONFIG_ANNOTATION].clone();
        assert_ne!(hash(&none), hash(&joined), "a joined cluster must roll the pods onto the new configuration");
        assert_eq!(hash(&joined), hash(&server_objects("ops", &hub(vec![("eu-1".parse().unwrap(), key.clone())]))));
        let leaf = joined.iter().find(|o| o["kind"] == "Service" && o["metadata"]["name"] == LEAF_SERVICE).unwrap();
        assert_eq!(leaf["spec"]["type"], "LoadBalancer");
        assert_eq!(leaf["spec"]["ports"][0]["port"], 7422);
        let policy = joined.iter().find(|o| o["kind"] == "NetworkPolicy").unwrap();
        assert!(policy["spec"]["ingress"].as_array().unwrap().contains(&json!({"ports": [{"port": 7422}]})));
        assert!(!server_objects("ops", &Server::single_cluster(3)).iter().any(|o| o["metadata"]["name"] == LEAF_SERVICE));
    }

    #[test]
    fn a_spokes_server_joins_the_hub_as_its_cluster_under_names_of_its_own() {
        let spoke = Server { replicas: 3, fleet: Some(FleetRole::Spoke(Spoke { cluster: "eu-1".parse().unwrap(), hub_url: "tls://hub.example.com:7422".into() })), exporter_image: None };
        let config = server_config("ops", &spoke);
        assert!(config.contains("domain: \"eu-1\""), "{config}");
        assert!(config.contains("remotes: [{url: \"tls://hub.example.com:7422\", nkey: $KFOP_FLEET_SEED, tls: {ca_file: \"/etc/nats/hub/ca.crt\""), "{config}");
        let objects = server_objects("ops", &spoke);
        let pod = &objects.iter().find(|o| o["kind"] == "StatefulSet").unwrap()["spec"]["template"]["spec"];
        let env = pod["containers"][0]["env"].as_array().unwrap();
        // POD_NAME is defined before SERVER_NAME refers to it.
        assert_eq!(env[..3], [
            json!({"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}),
            json!({"name": "SERVER_NAME", "value": "eu-1-$(POD_NAME)"}),
            json!({"name": "KFOP_FLEET_SEED", "valueFrom": {"secretKeyRef": {"name": "nats-fleet-leaf", "key": "nkey.seed"}}}),
        ]);
        assert!(pod["volumes"].as_array().unwrap().contains(&json!({"name": "hub-ca", "secret": {"secretName": "nats-hub-ca"}})));
        assert!(pod["containers"][0]["volumeMounts"].as_array().unwrap().contains(&json!({"name": "hub-ca", "mountPath": "/etc/nats/hub", "readOnly": true})));
        // Outbound only: no leaf port, no leaf Service.
        assert!(!objects.iter().any(|o| o["metadata"]["name"] == LEAF_SERVICE));
        assert!(!config.contains("port: 7422\n"), "{config}");
        let single = server_objects("ops", &Server::single_cluster(3));
        let single_pod = &single.iter().find(|o| o["kind"] == "StatefulSet").unwrap()["spec"]["template"]["spec"];
        assert_eq!(single_pod["containers"][0]["env"][0], json!({"name": "SERVER_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}));
        assert!(!single_pod["volumes"].to_string().contains("nats-hub-ca"));
    }

    #[test]
    fn a_hub_url_is_tls_with_a_host_and_port() {
        assert_eq!(hub_url("tls://hub.example.com:7422").unwrap(), "tls://hub.example.com:7422");
        assert!(hub_url("tls://10.0.0.1:7422").is_ok());
        for (bad, says) in [
            ("nats://hub.example.com:7422", "not a TLS URL"),
            ("hub.example.com:7422", "not a TLS URL"),
            ("tls://hub.example.com", "names no port"),
            ("tls://:7422", "not a host and port"),
            ("tls://hub:0", "not a host and port"),
            ("tls://hub:99999", "not a host and port"),
            ("tls://hub\", nkey: x:7422", "not a host and port"),
        ] {
            let error = hub_url(bad).unwrap_err();
            assert!(error.contains(says) && error.contains("allowed: tls://<host>:<port>"), "{bad}: {error}");
        }
    }

    #[test]
    fn an_operator_gets_its_own_identity_and_the_client_label() {
        let deployment = json!({"spec": {"template": {"metadata": {"labels": {"app": "x"}}, "spec": {"containers": [{"name": "operator", "env": [{"name": "A", "value": "1"}]}]}}}});
        let client = with_identity(deployment, Identity::Component(kubeflow_crds::ComponentKind::Katib));
        let template = &client["spec"]["template"];
        assert_eq!(template["metadata"]["labels"][CLIENT_LABEL], "true");
        assert_eq!(template["spec"]["volumes"][0]["secret"]["secretName"], "nats-identity-katib-operator");
        let env = template["spec"]["containers"][0]["env"].as_array().unwrap();
        assert_eq!(env[0]["name"], "A");
        assert!(env.contains(&json!({"name": "NATS_URL", "value": "tls://nats:4222"})));
    }
}
