//! Securing the bus: the nats-server configuration that enforces the contract's permissions
//! ([`kubeflow_crds::bus::Identity::permissions`]) and the material it needs: a CA with a server
//! certificate for TLS, and an NKey per identity. The same functions write `deploy/` (public keys
//! taken from environment variables the server's pods fill from the identities' Secrets), the
//! Secrets the meta-operator provisions, and the configuration of the local test servers.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use kubeflow_crds::bus::Identity;
use kubeflow_crds::fleet::{self, ClusterName};

/// A fresh NKey user seed (the private half of an identity).
pub fn new_seed() -> String {
    nkeys::KeyPair::new_user().seed().expect("a generated key pair has a seed")
}

/// The public key (`U…`) of an NKey user seed.
pub fn public_key(seed: &str) -> Result<String, String> {
    let pair = nkeys::KeyPair::from_seed(seed.trim()).map_err(|e| format!("not an NKey seed: {e}"))?;
    if !pair.public_key().starts_with('U') {
        return Err("not a user NKey seed (its public key must start with U)".into());
    }
    Ok(pair.public_key())
}

/// Name of the environment variable the deployed server reads `identity`'s public key from.
pub fn public_key_env(identity: Identity) -> String {
    format!("KFOP_NKEY_{}", identity.user().to_uppercase().replace('-', "_"))
}

/// PEM-encoded TLS material of the bus: a CA the clients trust and a server certificate it signed.
#[derive(Clone, Debug)]
pub struct TlsMaterial {
    pub ca_cert: String,
    pub server_cert: String,
    pub server_key: String,
}

/// A new CA and a server certificate for `hosts` (DNS names or IP addresses, wildcards allowed).
pub fn tls_material(hosts: &[String]) -> Result<TlsMaterial, rcgen::Error> {
    use rcgen::{BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose};
    let ca_key = KeyPair::generate()?;
    let mut ca = CertificateParams::new(Vec::<String>::new())?;
    ca.distinguished_name.push(DnType::CommonName, "kubeflow-operator bus CA");
    ca.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    ca.not_after = rcgen::date_time_ymd(2126, 1, 1);
    let ca_cert = ca.self_signed(&ca_key)?;
    let issuer = Issuer::new(ca, ca_key);
    let server_key = KeyPair::generate()?;
    let mut server = CertificateParams::new(hosts.to_vec())?;
    server.distinguished_name.push(DnType::CommonName, "nats");
    server.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth, ExtendedKeyUsagePurpose::ClientAuth];
    server.not_after = rcgen::date_time_ymd(2126, 1, 1);
    let server_cert = server.signed_by(&server_key, &issuer)?;
    Ok(TlsMaterial { ca_cert: ca_cert.pem(), server_cert: server_cert.pem(), server_key: server_key.serialize_pem() })
}

/// Where the server finds each identity's public key.
#[derive(Clone, Debug)]
pub enum PublicKeys {
    /// In environment variables named by [`public_key_env`] (the deployed server).
    FromEnv,
    /// Written into the configuration.
    Literal(BTreeMap<Identity, String>),
}

/// Routes of a clustered server.
#[derive(Clone, Debug)]
pub struct Cluster {
    pub name: String,
    pub port: u16,
    pub routes: Vec<String>,
}

/// A nats-server's configuration: TLS on the client port, JetStream, one NKey user per identity
/// with its permissions and no anonymous access.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    pub host: String,
    pub port: u16,
    pub monitor_port: Option<u16>,
    /// Unset: the value of the `SERVER_NAME` environment variable (a pod's name).
    pub server_name: Option<String>,
    pub store_dir: String,
    pub cert_file: String,
    pub key_file: String,
    pub ca_file: String,
    pub public_keys: PublicKeys,
    pub cluster: Option<Cluster>,
    /// The JetStream domain ([`kubeflow_crds::fleet`]): the hub's, or a spoke's (its cluster
    /// name); none for a single cluster.
    pub jetstream_domain: Option<String>,
    pub leaf_nodes: Option<LeafNodes>,
}

/// A fleet's leaf node connections ([`kubeflow_crds::fleet`]).
#[derive(Clone, Debug)]
pub enum LeafNodes {
    /// The hub: accepts one leaf connection per registered cluster, each as the cluster's NKey
    /// user (its public key here) with [`fleet::leaf_permissions`]; those keys are refused on the
    /// client port, and the operators' keys on the leaf port.
    Hub { port: u16, clusters: Vec<(ClusterName, String)> },
    /// A spoke: connects out to the hub at `hub_url` (`tls://host:port`) with the cluster's seed,
    /// checking the hub's certificate against `hub_ca_file`.
    Spoke { hub_url: String, seed: Seed, hub_ca_file: String },
}

/// Where a spoke's server reads its cluster's NKey seed: nats-server takes the seed itself, not a
/// file.
#[derive(Clone, Debug)]
pub enum Seed {
    /// From the named environment variable (the deployed server, from a Secret).
    FromEnv(String),
    /// Written into the configuration (a local bus; the file is the owner's only).
    Literal(String),
}

fn quoted(s: &str) -> String {
    serde_json::to_string(s).expect("strings serialise")
}

fn quoted_list(items: &[String]) -> String {
    format!("[{}]", items.iter().map(|s| quoted(s)).collect::<Vec<_>>().join(", "))
}

fn tls_block(config: &ServerConfig, verify_peer: bool) -> String {
    let verify = if verify_peer { ", verify: true" } else { "" };
    format!("tls {{cert_file: {}, key_file: {}, ca_file: {}, timeout: 5{verify}}}", quoted(&config.cert_file), quoted(&config.key_file), quoted(&config.ca_file))
}

/// The configuration file. Quoted strings are literal to nats-server (`$JS…` subjects are not
/// variables); a bare `$NAME` is read from the environment.
pub fn server_config(config: &ServerConfig) -> String {
    let mut out = String::new();
    let name = config.server_name.as_deref().map_or_else(|| "$SERVER_NAME".to_string(), quoted);
    out += &format!("server_name: {name}\nhost: {}\nport: {}\n", quoted(&config.host), config.port);
    if let Some(monitor) = config.monitor_port {
        out += &format!("http_port: {monitor}\n");
    }
    let domain = config.jetstream_domain.as_deref().map_or_else(String::new, |d| format!("\n  domain: {}", quoted(d)));
    out += &format!("jetstream {{\n  store_dir: {}{domain}\n}}\n", quoted(&config.store_dir));
    out += &format!("{}\n", tls_block(config, false));
    if let Some(cluster) = &config.cluster {
        // Routes authenticate each other with the server certificate (the same CA on both ends).
        out += &format!("cluster {{\n  name: {}\n  port: {}\n  routes: {}\n  {}\n}}\n", quoted(&cluster.name), cluster.port, quoted_list(&cluster.routes), tls_block(config, true));
    }
    let hub_clusters = match &config.leaf_nodes {
        Some(LeafNodes::Hub { port, clusters }) => {
            out += &format!("leafnodes {{\n  host: {}\n  port: {port}\n  {}\n}}\n", quoted(&config.host), tls_block(config, false));
            Some(clusters)
        }
        Some(LeafNodes::Spoke { hub_url, seed, hub_ca_file }) => {
            let seed = match seed {
                Seed::FromEnv(variable) => format!("${variable}"),
                Seed::Literal(seed) => quoted(seed),
            };
            out += &format!("leafnodes {{\n  remotes: [{{url: {}, nkey: {seed}, tls: {{ca_file: {}, timeout: 5}}}}]\n}}\n", quoted(hub_url), quoted(hub_ca_file));
            None
        }
        None => None,
    };
    // On a hub, each key may connect only as what it is: an operator as a client, a cluster as a
    // leaf node.
    let only = |kind: &str| if hub_clusters.is_some() { format!("allowed_connection_types: [{}], ", quoted(kind)) } else { String::new() };
    let user = |comment: &str, key: String, kind: String, permissions: &kubeflow_crds::bus::Permissions| {
        format!("    # {comment}\n    {{nkey: {key}, {kind}permissions: {{publish: {{allow: {}}}, subscribe: {{allow: {}}}}}}}\n", quoted_list(&permissions.publish), quoted_list(&permissions.subscribe))
    };
    out += "authorization {\n  users: [\n";
    for identity in Identity::all() {
        let key = match &config.public_keys {
            PublicKeys::FromEnv => format!("${}", public_key_env(identity)),
            PublicKeys::Literal(keys) => keys.get(&identity).map_or_else(|| quoted("missing"), |k| quoted(k)),
        };
        let permissions = match (identity, hub_clusters) {
            (Identity::MetaOperator, Some(clusters)) => fleet::hub_meta_operator_permissions(&clusters.iter().map(|(c, _)| c.clone()).collect::<Vec<_>>()),
            _ => identity.permissions(),
        };
        out += &user(&identity.user(), key, only("STANDARD"), &permissions);
    }
    for (cluster, key) in hub_clusters.into_iter().flatten() {
        out += &user(&format!("cluster {cluster}"), quoted(key), only("LEAFNODE"), &fleet::leaf_permissions(cluster));
    }
    out += "  ]\n}\n";
    out
}

/// A secured bus for processes on this machine (tests, `make demo`): TLS material for
/// `localhost`/`127.0.0.1` and a seed per identity, written under one directory, from which any
/// number of server configurations (a cluster's nodes) are written.
#[derive(Clone, Debug)]
pub struct LocalBus {
    pub dir: PathBuf,
}

impl LocalBus {
    /// Generates the material into `dir` (created; files readable by the owner only).
    pub fn create(dir: &Path) -> std::io::Result<Self> {
        let bus = Self { dir: dir.to_path_buf() };
        std::fs::create_dir_all(dir.join("identities"))?;
        let tls = tls_material(&["localhost".into(), "127.0.0.1".into()]).map_err(std::io::Error::other)?;
        write_private(&bus.ca_file(), &tls.ca_cert)?;
        write_private(&dir.join("server.crt"), &tls.server_cert)?;
        write_private(&dir.join("server.key"), &tls.server_key)?;
        for identity in Identity::all() {
            write_private(&bus.seed_file(identity), &new_seed())?;
        }
        Ok(bus)
    }

    pub fn ca_file(&self) -> PathBuf {
        self.dir.join("ca.crt")
    }

    pub fn seed_file(&self, identity: Identity) -> PathBuf {
        self.dir.join("identities").join(format!("{}.nk", identity.user()))
    }

    /// What a process connecting as `identity` passes to [`crate::nats::connect`].
    pub fn credentials(&self, identity: Identity) -> crate::nats::BusCredentials {
        crate::nats::BusCredentials { nkey_file: Some(self.seed_file(identity)), ca_file: Some(self.ca_file()) }
    }

    /// Writes the configuration of server `name` (listening on 127.0.0.1) and returns its path.
    pub fn write_server_config(&self, name: &str, port: u16, monitor_port: Option<u16>, store_dir: &Path, cluster: Option<Cluster>) -> std::io::Result<PathBuf> {
        let config = self.server_config(name, port, monitor_port, store_dir, cluster)?;
        self.write(name, &config)
    }

    /// The configuration of server `name` listening on 127.0.0.1, to adjust (a fleet's domain and
    /// leaf nodes) before [`LocalBus::write`].
    pub fn server_config(&self, name: &str, port: u16, monitor_port: Option<u16>, store_dir: &Path, cluster: Option<Cluster>) -> std::io::Result<ServerConfig> {
        let mut keys = BTreeMap::new();
        for identity in Identity::all() {
            let seed = std::fs::read_to_string(self.seed_file(identity))?;
            keys.insert(identity, public_key(&seed).map_err(std::io::Error::other)?);
        }
        let path = |f: &str| self.dir.join(f).to_string_lossy().into_owned();
        Ok(ServerConfig {
            host: "127.0.0.1".into(),
            port,
            monitor_port,
            server_name: Some(name.into()),
            store_dir: store_dir.to_string_lossy().into_owned(),
            cert_file: path("server.crt"),
            key_file: path("server.key"),
            ca_file: path("ca.crt"),
            public_keys: PublicKeys::Literal(keys),
            cluster,
            jetstream_domain: None,
            leaf_nodes: None,
        })
    }

    /// Writes `config` as server `name`'s (readable by the owner only: it may hold a seed) and
    /// returns the file's path.
    pub fn write(&self, name: &str, config: &ServerConfig) -> std::io::Result<PathBuf> {
        let file = self.dir.join(format!("{name}.conf"));
        write_private(&file, &server_config(config))?;
        Ok(file)
    }
}

fn write_private(path: &Path, contents: &str) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    use std::io::Write;
    let mut file = std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(path)?;
    file.write_all(contents.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeds_give_user_public_keys_and_bad_seeds_are_named() {
        let seed = new_seed();
        assert!(seed.starts_with("SU"), "{seed}");
        assert!(public_key(&seed).unwrap().starts_with('U'));
        assert_eq!(public_key(&format!("{seed}\n")).unwrap(), public_key(&seed).unwrap());
        assert!(public_key("SUnot-a-seed").unwrap_err().contains("not an NKey seed"));
        let account = nkeys::KeyPair::new_account().seed().unwrap();
        assert!(public_key(&account).unwrap_err().contains("not a user NKey"));
    }

    /// A deployed server's configuration: keys from the environment, no fleet.
    fn deployed() -> ServerConfig {
        ServerConfig {
            host: "0.0.0.0".into(),
            port: 4222,
            monitor_port: Some(8222),
            server_name: None,
            store_dir: "/data".into(),
            cert_file: "/tls/tls.crt".into(),
            key_file: "/tls/tls.key".into(),
            ca_file: "/tls/ca.crt".into(),
            public_keys: PublicKeys::FromEnv,
            cluster: None,
            jetstream_domain: None,
            leaf_nodes: None,
        }
    }

    #[test]
    fn the_configuration_names_every_identity_and_reads_keys_from_the_environment() {
        let text = server_config(&deployed());
        assert!(text.contains("{nkey: $KFOP_NKEY_KATIB_OPERATOR, permissions: {publish: {allow: [\"$JS.API.INFO\""), "{text}");
        assert!(text.contains("subscribe: {allow: [\"_INBOX.katib-operator.>\"]}"), "{text}");
        assert!(text.contains("$KFOP_NKEY_META_OPERATOR"));
        assert!(text.contains("server_name: $SERVER_NAME"));
        assert!(!text.contains("no_auth_user") && !text.contains("cluster {"), "{text}");
    }

    #[test]
    fn a_hub_fences_each_clusters_leaf_and_a_spoke_dials_out_with_its_seed() {
        let base = ServerConfig {
            jetstream_domain: Some("hub".into()),
            leaf_nodes: Some(LeafNodes::Hub { port: 7422, clusters: vec![("spoke-a".parse().unwrap(), "UAKEY".into())] }),
            ..deployed()
        };
        let hub = server_config(&base);
        assert!(hub.contains("jetstream {\n  store_dir: \"/data\"\n  domain: \"hub\"\n}"), "{hub}");
        assert!(hub.contains("leafnodes {\n  host: \"0.0.0.0\"\n  port: 7422\n  tls {cert_file: \"/tls/tls.crt\""), "{hub}");
        // The cluster's key: a leaf connection only, with the cluster's own permissions.
        assert!(hub.contains("# cluster spoke-a\n    {nkey: \"UAKEY\", allowed_connection_types: [\"LEAFNODE\"], permissions: {publish: {allow: [\"fleet.api.spoke-a.>\""), "{hub}");
        assert!(hub.contains("subscribe: {allow: [\"_INBOX.fleet-agent.spoke-a.>\"]}"), "{hub}");
        // The operators' keys: clients only; the meta-operator writes the cluster's desired state.
        assert!(hub.contains("{nkey: $KFOP_NKEY_KATIB_OPERATOR, allowed_connection_types: [\"STANDARD\"]"), "{hub}");
        let meta = hub.lines().find(|l| l.contains("$KFOP_NKEY_META_OPERATOR")).unwrap();
        assert!(meta.contains("\"$KV.kubeflow-fleet-desired-spoke-a.>\""), "{meta}");
        // It serves each cluster's gate and answers its refusals to that cluster's agent.
        assert!(meta.contains("\"fleet.api.*.>\"") && meta.contains("\"_INBOX.fleet-agent.spoke-a.>\""), "{meta}");

        let spoke = server_config(&ServerConfig {
            jetstream_domain: Some("spoke-a".into()),
            leaf_nodes: Some(LeafNodes::Spoke { hub_url: "tls://hub.example.com:7422".into(), seed: Seed::FromEnv("KFOP_FLEET_SEED".into()), hub_ca_file: "/hub/ca.crt".into() }),
            ..base.clone()
        });
        assert!(spoke.contains("domain: \"spoke-a\""), "{spoke}");
        assert!(spoke.contains("remotes: [{url: \"tls://hub.example.com:7422\", nkey: $KFOP_FLEET_SEED, tls: {ca_file: \"/hub/ca.crt\", timeout: 5}}]"), "{spoke}");
        assert!(!spoke.contains("allowed_connection_types") && !spoke.contains("cluster spoke-a") && !spoke.contains("fleet-desired"), "{spoke}");
        let literal = server_config(&ServerConfig { leaf_nodes: Some(LeafNodes::Spoke { hub_url: "tls://h:1".into(), seed: Seed::Literal("SUSEED".into()), hub_ca_file: "/ca".into() }), ..base });
        assert!(literal.contains("nkey: \"SUSEED\""), "{literal}");
    }

    #[test]
    fn the_server_certificate_is_signed_by_the_ca() {
        let tls = tls_material(&["nats.kubeflow-operators.svc".into(), "127.0.0.1".into()]).unwrap();
        assert!(tls.ca_cert.starts_with("-----BEGIN CERTIFICATE-----"));
        assert!(tls.server_key.contains("PRIVATE KEY"));
        assert_ne!(tls.ca_cert, tls.server_cert);
    }
}
