//! The local environment's stand-in for its pods' network (e2e/env/up.sh starts it).
//!
//! kwok's pods run no process, so nothing answers at a pod's or a Service's address, and every
//! admission webhook with `failurePolicy: Fail` (cert-manager's, Istio's, Knative's, KServe's…)
//! refuses the writes it admits: upstream's Kubeflow cannot be installed here. The API server
//! sends what it sends into the cluster (egress selection `cluster`: Service-backed admission and
//! conversion webhooks, aggregated APIs) through this process, an HTTP CONNECT proxy on a Unix
//! socket:
//! - a connection to an address in the given ranges (kwok's pod CIDR and the Service range) is
//!   answered as the webhook backend would answer a well-formed object: admitted unchanged, or
//!   converted by its `apiVersion` alone. TLS is served with a certificate for the name the API
//!   server asks for (`<service>.<namespace>.svc`), signed by this process's CA;
//! - any other destination is dialled as asked, so what worked before still does.
//!
//! An aggregated API's server (an `APIService` backed by a Service, e.g. cert-manager v0.11's
//! webhook, which the API server reaches through `kubernetes.default`) answers its discovery
//! (`GET /apis/<group>/<version>`: no resources) and the reviews proxied to it, as above.
//!
//! As cert-manager's cainjector and istiod do on a real cluster, it writes that CA into the
//! `caBundle` of every Service-backed webhook, CRD conversion webhook and APIService that lacks
//! one or asks cainjector for it (`cert-manager.io/inject-ca-from…`), with a JSON patch that
//! touches that field alone. It judges nothing: what upstream's webhooks would
//! refuse is admitted here.
//!
//! `pod-network SOCKET CIDR...` (with `KUBECONFIG` for the cluster).

use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::sync::{Arc, Mutex};

use base64::Engine;
use futures::StreamExt;
use k8s_openapi::api::admissionregistration::v1::{MutatingWebhookConfiguration, ValidatingWebhookConfiguration, WebhookClientConfig};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1::APIService;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::watcher;
use kube::runtime::WatchStreamExt;
use kube::{Client, Resource, ResourceExt};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// An IPv4 range, `a.b.c.d/n`.
#[derive(Debug, Clone, Copy)]
struct Range {
    network: u32,
    mask: u32,
}

impl std::str::FromStr for Range {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, String> {
        let (address, bits) = text.split_once('/').ok_or_else(|| format!("{text:?}: expected an IPv4 CIDR, e.g. 10.244.0.0/16"))?;
        let address: Ipv4Addr = address.parse().map_err(|_| format!("{text:?}: not an IPv4 address"))?;
        let bits: u32 = bits.parse().ok().filter(|b| *b <= 32).ok_or_else(|| format!("{text:?}: prefix length 0–32"))?;
        let mask = if bits == 0 { 0 } else { u32::MAX << (32 - bits) };
        Ok(Range { network: u32::from(address) & mask, mask })
    }
}

impl Range {
    fn contains(&self, address: Ipv4Addr) -> bool {
        u32::from(address) & self.mask == self.network
    }
}

/// The CA, and a serving certificate per name asked for (made on first use).
#[derive(Debug)]
struct Certificates {
    issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
    ca_pem: String,
    issued: Mutex<HashMap<String, Arc<rustls::sign::CertifiedKey>>>,
}

impl Certificates {
    fn new() -> Result<Self, rcgen::Error> {
        use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};
        let key = KeyPair::generate()?;
        let mut ca = CertificateParams::new(Vec::<String>::new())?;
        ca.distinguished_name.push(DnType::CommonName, "local environment pod network CA");
        ca.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        ca.key_usages = vec![KeyUsagePurpose::KeyCertSign];
        let ca_pem = ca.self_signed(&key)?.pem();
        Ok(Self { issuer: Issuer::new(ca, key), ca_pem, issued: Mutex::default() })
    }

    fn for_name(&self, name: &str) -> Option<Arc<rustls::sign::CertifiedKey>> {
        use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};
        let mut issued = self.issued.lock().expect("certificates");
        if let Some(key) = issued.get(name) {
            return Some(key.clone());
        }
        let key = rcgen::KeyPair::generate().ok()?;
        let mut params = rcgen::CertificateParams::new(vec![name.to_string()]).ok()?;
        params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
        let cert = params.signed_by(&key, &self.issuer).ok()?;
        let signing = rustls::crypto::ring::sign::any_supported_type(&PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()))).ok()?;
        let certified = Arc::new(rustls::sign::CertifiedKey::new(vec![cert.der().clone()], signing));
        issued.insert(name.to_string(), certified.clone());
        Some(certified)
    }
}

impl rustls::server::ResolvesServerCert for Certificates {
    fn resolve(&self, hello: rustls::server::ClientHello<'_>) -> Option<Arc<rustls::sign::CertifiedKey>> {
        self.for_name(hello.server_name().unwrap_or("pod-network"))
    }
}

/// The answer a webhook backend gives a well-formed object: admitted unchanged, or converted.
fn answer(review: &Value) -> Option<Value> {
    let request = &review["request"];
    match review["kind"].as_str()? {
        "AdmissionReview" => Some(json!({"apiVersion": review["apiVersion"], "kind": "AdmissionReview", "response": {"uid": request["uid"], "allowed": true}})),
        "ConversionReview" => {
            let desired = request["desiredAPIVersion"].clone();
            let converted: Vec<Value> = request["objects"].as_array()?.iter().cloned().map(|mut o| {
                o["apiVersion"] = desired.clone();
                o
            }).collect();
            Some(json!({"apiVersion": review["apiVersion"], "kind": "ConversionReview", "response": {"uid": request["uid"], "convertedObjects": converted, "result": {"status": "Success"}}}))
        }
        _ => None,
    }
}

/// An aggregated API server's discovery of `/apis/<group>/<version>` (serving no resource of its
/// own: the reviews proxied to it are answered by [`answer`]); `None` for any other path.
fn discovery(path: &str) -> Option<Value> {
    let (group, version) = path.strip_prefix("/apis/")?.trim_end_matches('/').split_once('/')?;
    if group.is_empty() || version.is_empty() || version.contains('/') {
        return None;
    }
    Some(json!({"apiVersion": "v1", "kind": "APIResourceList", "groupVersion": format!("{group}/{version}"), "resources": []}))
}

/// Reads a CONNECT request's head (bounded), returning its `host:port`.
async fn read_connect(stream: &mut tokio::net::UnixStream) -> Result<String, String> {
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        if head.len() > 8192 {
            return Err("request head over 8 KiB".into());
        }
        let mut byte = [0u8];
        if stream.read(&mut byte).await.map_err(|e| e.to_string())? == 0 {
            return Err("closed before the request head ended".into());
        }
        head.push(byte[0]);
    }
    let line = String::from_utf8_lossy(&head).lines().next().unwrap_or_default().to_string();
    match line.split_whitespace().collect::<Vec<_>>()[..] {
        ["CONNECT", target, _] => Ok(target.to_string()),
        _ => Err(format!("not a CONNECT request: {line:?}")),
    }
}

async fn serve_webhook(stream: tokio::net::UnixStream, acceptor: tokio_rustls::TlsAcceptor) {
    use http_body_util::{BodyExt, Full};
    let Ok(stream) = acceptor.accept(stream).await else { return };
    let service = hyper::service::service_fn(|request: hyper::Request<hyper::body::Incoming>| async move {
        let reply = if request.method() == hyper::Method::GET {
            discovery(request.uri().path()).ok_or((404, "no such path"))
        } else {
            let body = request.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
            serde_json::from_slice::<Value>(&body).ok().as_ref().and_then(answer).ok_or((400, "expected an AdmissionReview or a ConversionReview"))
        };
        let response = match reply {
            Ok(reply) => hyper::Response::builder().header("content-type", "application/json").body(Full::new(hyper::body::Bytes::from(serde_json::to_vec(&reply).expect("json")))),
            Err((status, why)) => hyper::Response::builder().status(status).body(Full::new(hyper::body::Bytes::from_static(why.as_bytes()))),
        };
        Ok::<_, std::convert::Infallible>(response.expect("response"))
    });
    let _ = hyper::server::conn::http1::Builder::new().serve_connection(hyper_util::rt::TokioIo::new(stream), service).await;
}

async fn connection(mut stream: tokio::net::UnixStream, ranges: Arc<Vec<Range>>, acceptor: tokio_rustls::TlsAcceptor) {
    let target = match read_connect(&mut stream).await {
        Ok(target) => target,
        Err(e) => {
            eprintln!("pod-network: {e}");
            let _ = stream.write_all(b"HTTP/1.1 400 Bad Request\r\n\r\n").await;
            return;
        }
    };
    let in_cluster = target.rsplit_once(':').and_then(|(host, _)| host.parse::<Ipv4Addr>().ok()).is_some_and(|ip| ranges.iter().any(|r| r.contains(ip)));
    if in_cluster {
        if stream.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n").await.is_ok() {
            serve_webhook(stream, acceptor).await;
        }
        return;
    }
    match tokio::net::TcpStream::connect(&target).await {
        Ok(mut upstream) => {
            if stream.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n").await.is_ok() {
                let _ = tokio::io::copy_bidirectional(&mut stream, &mut upstream).await;
            }
        }
        Err(e) => {
            eprintln!("pod-network: dialling {target}: {e}");
            let _ = stream.write_all(b"HTTP/1.1 502 Bad Gateway\r\n\r\n").await;
        }
    }
}

/// Where a webhook's client configuration is, and what it says.
struct ClientConfig<'a> {
    /// JSON pointer of the object holding `caBundle`.
    pointer: String,
    /// The webhook's name, in a list of webhooks.
    name: Option<String>,
    by_service: bool,
    ca_bundle: Option<&'a [u8]>,
}

impl<'a> ClientConfig<'a> {
    fn admission(index: usize, name: &str, config: &'a WebhookClientConfig) -> Self {
        ClientConfig { pointer: format!("/webhooks/{index}/clientConfig"), name: Some(name.to_string()), by_service: config.service.is_some(), ca_bundle: config.ca_bundle.as_ref().map(|b| b.0.as_slice()) }
    }
}

fn asks_for_ca(object: &impl Resource) -> bool {
    component_framework::build::asks_cainjector(object.annotations().iter().map(|(k, v)| (k.as_str(), v.as_str())))
}

/// JSON patch operations that set `ca` on each Service-backed client config lacking a CA (empty
/// or blank), or of an object that asks cainjector for it (`asks`: its CA is a placeholder), at
/// the given JSON pointers (a `test` of each webhook's name first, so a list changed meanwhile
/// fails). A CA the object brings itself stays.
fn ca_operations<'a>(configs: impl Iterator<Item = ClientConfig<'a>>, asks: bool, ca: &[u8]) -> Vec<Value> {
    let encoded = base64::engine::general_purpose::STANDARD.encode(ca);
    let mut operations = Vec::new();
    for ClientConfig { pointer, name, by_service, ca_bundle } in configs {
        let lacking = ca_bundle.is_none_or(|b| b.iter().all(u8::is_ascii_whitespace));
        if !by_service || ca_bundle == Some(ca) || !(lacking || asks) {
            continue;
        }
        if let Some(name) = name {
            let webhook = pointer.trim_end_matches("/clientConfig");
            operations.push(json!({"op": "test", "path": format!("{webhook}/name"), "value": name}));
        }
        operations.push(json!({"op": "add", "path": format!("{pointer}/caBundle"), "value": encoded}));
    }
    operations
}

/// Keeps the CA in the `caBundle`s of every object of kind `K` (like cert-manager's cainjector).
async fn inject<K>(client: Client, ca: Arc<Vec<u8>>, operations: fn(&K, &[u8]) -> Vec<Value>)
where
    K: Resource<Scope = k8s_openapi::ClusterResourceScope, DynamicType = ()> + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + Sync + 'static,
{
    let api: Api<K> = Api::all(client);
    let mut events = std::pin::pin!(watcher(api.clone(), watcher::Config::default()).default_backoff().applied_objects());
    while let Some(event) = events.next().await {
        let Ok(object) = event else { continue };
        let ops = operations(&object, &ca);
        if ops.is_empty() {
            continue;
        }
        let patch: json_patch::Patch = serde_json::from_value(Value::Array(ops)).expect("patch operations");
        if let Err(e) = api.patch(&object.name_any(), &PatchParams::default(), &Patch::<()>::Json(patch)).await {
            // A changed object comes back as a new event.
            eprintln!("pod-network: caBundle of {} {}: {e}", K::kind(&()), object.name_any());
        }
    }
}

fn mutating(object: &MutatingWebhookConfiguration, ca: &[u8]) -> Vec<Value> {
    let hooks = object.webhooks.iter().flatten().enumerate();
    ca_operations(hooks.map(|(i, w)| ClientConfig::admission(i, &w.name, &w.client_config)), asks_for_ca(object), ca)
}

fn validating(object: &ValidatingWebhookConfiguration, ca: &[u8]) -> Vec<Value> {
    let hooks = object.webhooks.iter().flatten().enumerate();
    ca_operations(hooks.map(|(i, w)| ClientConfig::admission(i, &w.name, &w.client_config)), asks_for_ca(object), ca)
}

fn conversion(object: &CustomResourceDefinition, ca: &[u8]) -> Vec<Value> {
    let webhook = object.spec.conversion.as_ref().filter(|c| c.strategy == "Webhook").and_then(|c| c.webhook.as_ref());
    let config = webhook.and_then(|w| w.client_config.as_ref());
    let config = config.map(|c| ClientConfig { pointer: "/spec/conversion/webhook/clientConfig".into(), name: None, by_service: c.service.is_some(), ca_bundle: c.ca_bundle.as_ref().map(|b| b.0.as_slice()) });
    ca_operations(config.into_iter(), asks_for_ca(object), ca)
}

/// An APIService backed by a Service takes the CA in `spec.caBundle` (unless it skips verifying).
fn aggregated(object: &APIService, ca: &[u8]) -> Vec<Value> {
    let spec = object.spec.as_ref();
    let by_service = spec.is_some_and(|s| s.service.is_some() && s.insecure_skip_tls_verify != Some(true));
    let config = ClientConfig { pointer: "/spec".into(), name: None, by_service, ca_bundle: spec.and_then(|s| s.ca_bundle.as_ref()).map(|b| b.0.as_slice()) };
    ca_operations(std::iter::once(config), asks_for_ca(object), ca)
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (Some(socket), ranges) = (args.first(), &args[args.len().min(1)..]) else {
        eprintln!("usage: pod-network SOCKET CIDR... (with KUBECONFIG)");
        return std::process::ExitCode::from(2);
    };
    let ranges: Vec<Range> = match ranges.iter().map(|r| r.parse()).collect() {
        Ok(ranges) => ranges,
        Err(e) => {
            eprintln!("pod-network: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    let certificates = Arc::new(Certificates::new().expect("a CA"));
    let ca = Arc::new(certificates.ca_pem.clone().into_bytes());
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .expect("TLS versions")
        .with_no_client_auth()
        .with_cert_resolver(certificates);
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let client = match kube::Config::infer().await.map_err(kube::Error::InferConfig).and_then(operator_runtime::client::client_for) {
        Ok(client) => client,
        Err(e) => {
            eprintln!("pod-network: no cluster client: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    tokio::spawn(inject::<MutatingWebhookConfiguration>(client.clone(), ca.clone(), mutating));
    tokio::spawn(inject::<ValidatingWebhookConfiguration>(client.clone(), ca.clone(), validating));
    tokio::spawn(inject::<CustomResourceDefinition>(client.clone(), ca.clone(), conversion));
    tokio::spawn(inject::<APIService>(client, ca, aggregated));
    let _ = std::fs::remove_file(socket);
    let listener = match tokio::net::UnixListener::bind(socket) {
        Ok(listener) => listener,
        Err(e) => {
            eprintln!("pod-network: listening on {socket}: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let ranges = Arc::new(ranges);
    loop {
        let Ok((stream, _)) = listener.accept().await else { continue };
        tokio::spawn(connection(stream, ranges.clone(), acceptor.clone()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_hold_the_addresses_inside_them() {
        let pods: Range = "10.244.0.0/16".parse().unwrap();
        assert!(pods.contains("10.244.3.7".parse().unwrap()));
        assert!(!pods.contains("10.245.0.1".parse().unwrap()));
        assert!(!pods.contains("127.0.0.1".parse().unwrap()));
        assert!("10.244.0.0".parse::<Range>().is_err());
        assert!("10.244.0.0/33".parse::<Range>().is_err());
    }

    #[test]
    fn an_admission_review_is_admitted_and_a_conversion_changes_the_version_alone() {
        let admitted = answer(&json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": "u1", "object": {}}})).unwrap();
        assert_eq!(admitted, json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": {"uid": "u1", "allowed": true}}));
        let converted = answer(&json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview", "request": {"uid": "u2", "desiredAPIVersion": "a.io/v2", "objects": [{"apiVersion": "a.io/v1", "kind": "A", "spec": {"x": 1}}]}})).unwrap();
        assert_eq!(converted["response"]["convertedObjects"], json!([{"apiVersion": "a.io/v2", "kind": "A", "spec": {"x": 1}}]));
        assert_eq!(converted["response"]["uid"], "u2");
        assert!(answer(&json!({"kind": "Pod"})).is_none());
    }

    #[test]
    fn only_service_backed_webhooks_without_the_ca_are_patched() {
        let webhooks: MutatingWebhookConfiguration = serde_json::from_value(json!({
            "metadata": {"name": "w"},
            "webhooks": [
                {"name": "by-service", "clientConfig": {"service": {"name": "s", "namespace": "n"}}, "sideEffects": "None", "admissionReviewVersions": ["v1"]},
                {"name": "by-url", "clientConfig": {"url": "https://127.0.0.1:1/"}, "sideEffects": "None", "admissionReviewVersions": ["v1"]},
                {"name": "injected", "clientConfig": {"service": {"name": "s", "namespace": "n"}, "caBundle": base64::engine::general_purpose::STANDARD.encode(b"CA")}, "sideEffects": "None", "admissionReviewVersions": ["v1"]},
            ]
        }))
        .unwrap();
        assert_eq!(
            mutating(&webhooks, b"CA"),
            [json!({"op": "test", "path": "/webhooks/0/name", "value": "by-service"}), json!({"op": "add", "path": "/webhooks/0/clientConfig/caBundle", "value": "Q0E="})]
        );
        // Another CA stays, unless the object asks cainjector for one; a blank one is none.
        assert!(mutating(&webhooks, b"CA").len() == 2 && mutating(&webhooks, b"OTHER").len() == 2);
        let mut asking = webhooks.clone();
        asking.metadata.annotations = Some([("cert-manager.io/inject-ca-from".to_string(), "kubeflow/seldon-serving-cert".to_string())].into());
        assert_eq!(mutating(&asking, b"OTHER").len(), 4);
        let blank: ValidatingWebhookConfiguration = serde_json::from_value(json!({
            "metadata": {"name": "w"},
            "webhooks": [{"name": "blank", "clientConfig": {"service": {"name": "s", "namespace": "n"}, "caBundle": "Cg=="}, "sideEffects": "None", "admissionReviewVersions": ["v1"]}]
        }))
        .unwrap();
        assert_eq!(validating(&blank, b"CA").len(), 2);
    }

    #[test]
    fn a_service_backed_api_service_takes_the_ca_and_answers_its_discovery() {
        let service = |extra: Value| {
            let mut spec = json!({"group": "webhook.cert-manager.io", "version": "v1beta1", "groupPriorityMinimum": 1000, "versionPriority": 15, "service": {"name": "cert-manager-webhook", "namespace": "cert-manager"}});
            spec.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
            serde_json::from_value::<APIService>(json!({"metadata": {"name": "v1beta1.webhook.cert-manager.io"}, "spec": spec})).unwrap()
        };
        assert_eq!(aggregated(&service(json!({})), b"CA"), [json!({"op": "add", "path": "/spec/caBundle", "value": "Q0E="})]);
        assert!(aggregated(&service(json!({"caBundle": "Q0E="})), b"CA").is_empty());
        assert!(aggregated(&service(json!({"insecureSkipTLSVerify": true})), b"CA").is_empty());
        let local: APIService = serde_json::from_value(json!({"metadata": {"name": "v1.apps"}, "spec": {"group": "apps", "version": "v1", "groupPriorityMinimum": 17800, "versionPriority": 15}})).unwrap();
        assert!(aggregated(&local, b"CA").is_empty());
        assert_eq!(discovery("/apis/webhook.cert-manager.io/v1beta1"), Some(json!({"apiVersion": "v1", "kind": "APIResourceList", "groupVersion": "webhook.cert-manager.io/v1beta1", "resources": []})));
        for other in ["/apis", "/apis/webhook.cert-manager.io", "/apis/g/v/validations", "/healthz"] {
            assert_eq!(discovery(other), None, "{other}");
        }
    }
}
