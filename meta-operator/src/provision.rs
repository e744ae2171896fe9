//! The bus the meta-operator provisions in its own namespace, so that an install (OLM's or
//! `kubectl apply -k deploy/all`) gets a working, authenticated bus with no manual step:
//!
//! * Secret [`TLS_SECRET`]: a CA and the server certificate for the NATS Services' names;
//! * Secret `nats-identity-<operator>` per identity ([`identity_secret`]): its NKey seed and
//!   public key, and the CA; the operator mounts it, the server reads the public key from it;
//! * with `--provision-nats-server` (OLM, whose bundles cannot carry a StatefulSet), the server
//!   itself: [`server_objects`], the same objects `deploy/nats` and `deploy/all` hold.
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
use operator_runtime::bus_security::{self, Cluster, PublicKeys, ServerConfig};
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

/// The server's configuration in the pods: TLS from [`TLS_SECRET`], public keys from the
/// identity Secrets (environment), routes to every other pod when `replicas > 1`.
pub fn server_config(namespace: &str, replicas: usize) -> String {
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
        jetstream_domain: None,
        leaf_nodes: None,
    })
}

/// The NATS server: its configuration, Services, a StatefulSet of `replicas` JetStream nodes, a
/// disruption budget keeping a quorum, and a NetworkPolicy that lets only operator pods (label
/// [`CLIENT_LABEL`]) reach the client port and only the server's own pods its route port.
pub fn server_objects(namespace: &str, replicas: usize) -> Vec<Value> {
    let mut env = vec![json!({"name": "SERVER_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}})];
    for identity in Identity::all() {
        env.push(json!({"name": bus_security::public_key_env(identity), "valueFrom": {"secretKeyRef": {"name": identity_secret(identity), "key": "nkey.pub"}}}));
    }
    let metadata = |name: &str| json!({"name": name, "namespace": namespace, "labels": labels()});
    let mut objects = vec![
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata("nats-config"), "data": {"nats.conf": server_config(namespace, replicas)}}),
        json!({"apiVersion": "v1", "kind": "Service", "metadata": metadata(SERVER),
               "spec": {"selector": {"app.kubernetes.io/name": SERVER}, "ports": [{"name": "client", "port": CLIENT_PORT}]}}),
        json!({"apiVersion": "v1", "kind": "Service", "metadata": metadata(CLUSTER_SERVICE),
               "spec": {"clusterIP": "None", "publishNotReadyAddresses": true, "selector": {"app.kubernetes.io/name": SERVER},
                        "ports": [{"name": "cluster", "port": CLUSTER_PORT}]}}),
        json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": metadata(SERVER),
               "spec": {
                   "serviceName": CLUSTER_SERVICE, "replicas": replicas, "podManagementPolicy": "Parallel",
                   "selector": {"matchLabels": {"app.kubernetes.io/name": SERVER}},
                   "template": {"metadata": {"labels": labels()}, "spec": {
                       "securityContext": {"runAsNonRoot": true, "runAsUser": 1000, "fsGroup": 1000, "seccompProfile": {"type": "RuntimeDefault"}},
                       "affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100, "podAffinityTerm": {
                           "topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app.kubernetes.io/name": SERVER}}}}]}},
                       "containers": [{
                           "name": "nats", "image": NATS_IMAGE,
                           "args": ["-c", "/etc/nats/config/nats.conf"],
                           "env": env,
                           "ports": [{"name": "client", "containerPort": CLIENT_PORT}, {"name": "cluster", "containerPort": CLUSTER_PORT}, {"name": "monitor", "containerPort": MONITOR_PORT}],
                           "readinessProbe": {"httpGet": {"path": "/healthz?js-enabled-only=true", "port": "monitor"}},
                           "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"memory": "512Mi"}},
                           "securityContext": {"allowPrivilegeEscalation": false, "readOnlyRootFilesystem": true, "capabilities": {"drop": ["ALL"]}},
                           "volumeMounts": [
                               {"name": "data", "mountPath": "/data"},
                               {"name": "config", "mountPath": "/etc/nats/config", "readOnly": true},
                               {"name": "tls", "mountPath": "/etc/nats/tls", "readOnly": true},
                           ],
                       }],
                       "volumes": [
                           {"name": "config", "configMap": {"name": "nats-config"}},
                           {"name": "tls", "secret": {"secretName": TLS_SECRET}},
                       ],
                   }},
                   "volumeClaimTemplates": [{"metadata": {"name": "data"}, "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "5Gi"}}}}],
               }}),
        json!({"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": metadata(SERVER),
               "spec": {
                   "podSelector": {"matchLabels": {"app.kubernetes.io/name": SERVER}},
                   "policyTypes": ["Ingress"],
                   "ingress": [
                       {"from": [{"podSelector": {"matchLabels": {CLIENT_LABEL: "true"}}}], "ports": [{"port": CLIENT_PORT}]},
                       {"from": [{"podSelector": {"matchLabels": {"app.kubernetes.io/name": SERVER}}}], "ports": [{"port": CLUSTER_PORT}]},
                       {"from": [{"podSelector": {}}], "ports": [{"port": MONITOR_PORT}]},
                   ],
               }}),
    ];
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

/// The identity Secret for `identity` with a fresh seed.
fn new_identity(identity: Identity, ca: &str) -> Secret {
    let seed = bus_security::new_seed();
    let public = bus_security::public_key(&seed).expect("a generated seed has a public key");
    let user = identity.user();
    let labels = [(IDENTITY_LABEL, user.as_str()), ("app.kubernetes.io/part-of", "kubeflow-operator")];
    secret(&identity_secret(identity), "Opaque", &labels, &[("nkey.seed", &seed), ("nkey.pub", &public), ("ca.crt", ca)])
}

/// Creates `secret` unless it exists; returns what is stored.
async fn create_or_get(secrets: &Api<Secret>, secret: Secret) -> Result<Secret, kube::Error> {
    match secrets.create(&PostParams::default(), &secret).await {
        Err(kube::Error::Api(s)) if s.code == 409 => secrets.get(&secret.name_any()).await,
        other => other,
    }
}

/// Makes sure the TLS and identity Secrets exist in `namespace` (and, with `server_replicas`,
/// the server's objects). Existing Secrets are kept: a restart never changes a credential.
pub async fn provision(client: &Client, namespace: &str, server_replicas: Option<usize>) -> Result<(), kube::Error> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let tls = match secrets.get_opt(TLS_SECRET).await? {
        Some(s) => s,
        None => {
            let material = bus_security::tls_material(&server_hosts(namespace)).expect("certificate generation");
            let entries = [("ca.crt", material.ca_cert.as_str()), ("tls.crt", &material.server_cert), ("tls.key", &material.server_key)];
            info!(secret = TLS_SECRET, "bus TLS certificate issued");
            create_or_get(&secrets, secret(TLS_SECRET, "kubernetes.io/tls", &SERVER_LABELS, &entries)).await?
        }
    };
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
    if let Some(replicas) = server_replicas {
        for object in server_objects(namespace, replicas) {
            let resource = kube::discovery::ApiResource::from_gvk(&kube::core::GroupVersionKind::try_from(&kube::core::TypeMeta {
                api_version: object["apiVersion"].as_str().unwrap_or_default().into(),
                kind: object["kind"].as_str().unwrap_or_default().into(),
            })
            .expect("a known kind"));
            let name = object["metadata"]["name"].as_str().unwrap_or_default().to_string();
            let api: Api<kube::api::DynamicObject> = Api::namespaced_with(client.clone(), namespace, &resource);
            api.patch(&name, &PatchParams::apply(FIELD_MANAGER).force(), &Patch::Apply(&object)).await?;
        }
        info!(replicas, "NATS server applied");
    }
    Ok(())
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
    let keys: Vec<String> = Identity::all().into_iter().filter_map(|identity| identities.get(&identity_secret(identity))).map(public_key_prefix).collect();
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
        assert!(!server_config("ops", 1).contains("cluster {"));
        let clustered = server_config("ops", 3);
        for i in 0..3 {
            assert!(clustered.contains(&format!("nats-route://nats-{i}.nats-cluster.ops.svc:6222")), "{clustered}");
        }
        assert!(server_hosts("ops").contains(&"*.nats-cluster.ops.svc".to_string()));
        assert!(server_hosts("ops").contains(&"nats.ops.svc".to_string()));
    }

    #[test]
    fn the_server_takes_every_identitys_public_key_from_its_secret() {
        let objects = server_objects("ops", 3);
        let statefulset = objects.iter().find(|o| o["kind"] == "StatefulSet").unwrap();
        let env = statefulset["spec"]["template"]["spec"]["containers"][0]["env"].as_array().unwrap();
        assert_eq!(env.len(), Identity::all().len() + 1);
        assert!(env.contains(&json!({"name": "KFOP_NKEY_KATIB_OPERATOR", "valueFrom": {"secretKeyRef": {"name": "nats-identity-katib-operator", "key": "nkey.pub"}}})));
        let policy = objects.iter().find(|o| o["kind"] == "NetworkPolicy").unwrap();
        assert_eq!(policy["spec"]["ingress"][0]["from"][0]["podSelector"]["matchLabels"][CLIENT_LABEL], "true");
        assert!(objects.iter().any(|o| o["kind"] == "PodDisruptionBudget"));
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
