//! The NATS transport every operator uses: connecting with reconnect notifications, opening the
//! JetStream key-value buckets of the contract ([`kubeflow_crds::bus`]), publishing with a message
//! id (deduplication) and W3C trace context.

use std::collections::BTreeMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::Duration;

use async_nats::jetstream::{self, kv};
use async_nats::{HeaderMap, HeaderValue};
use backoff::backoff::Backoff;
use futures::StreamExt;
use kubeflow_crds::ComponentKind;
use kubeflow_crds::bus::{self, HEARTBEAT_STALE, Identity, OPERATORS_BUCKET, STATUS_BUCKET};
use kubeflow_crds::fleet;
use serde::Serialize;

pub fn now_unix() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// How a process reaches the bus: the server and, for a secured server, the process's NKey seed
/// and the CA its TLS certificate is checked against.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct BusCredentials {
    /// File holding this process's NATS NKey seed (read at every connect, so a rotated seed is
    /// picked up on reconnect).
    #[arg(long = "nats-nkey-file", env = "NATS_NKEY_FILE")]
    pub nkey_file: Option<PathBuf>,
    /// CA certificate (PEM) of the NATS server; the connection then requires TLS.
    #[arg(long = "nats-ca-file", env = "NATS_CA_FILE")]
    pub ca_file: Option<PathBuf>,
}

/// Connects as `identity`, retrying forever, and reports connection events on the returned
/// channel (a `Connected` after a `Disconnected` tells consumers to relist).
pub async fn connect(url: &str, identity: Identity, credentials: &BusCredentials) -> Result<(async_nats::Client, tokio::sync::watch::Receiver<u64>), async_nats::ConnectError> {
    connect_with_inbox(url, identity, &identity.inbox_prefix(), credentials).await
}

/// [`connect`] with replies under `inbox_prefix`, which must lie under the identity's
/// ([`Identity::inbox_prefix`]): a fleet agent's replies from the hub name its cluster
/// ([`kubeflow_crds::fleet::agent_inbox_prefix`]).
pub async fn connect_with_inbox(url: &str, identity: Identity, inbox_prefix: &str, credentials: &BusCredentials) -> Result<(async_nats::Client, tokio::sync::watch::Receiver<u64>), async_nats::ConnectError> {
    let (tx, rx) = tokio::sync::watch::channel(0u64);
    let up = crate::metrics::BUS_CONNECTED.get_or_create(&crate::metrics::BusLabels { identity: identity.user().to_string() }).clone();
    if credentials.nkey_file.is_some() {
        // The series exists from the start, so its first increase shows.
        let _ = crate::metrics::BUS_CREDENTIAL_ERRORS.get_or_create(&crate::metrics::CredentialLabels { credential: "nkey" });
    }
    let mut options = match credentials.nkey_file.clone() {
        Some(file) => async_nats::ConnectOptions::with_auth_callback(move |nonce| {
            let file = file.clone();
            async move {
                sign_nonce(&file, &nonce).map_err(|error| {
                    crate::metrics::BUS_CREDENTIAL_ERRORS.get_or_create(&crate::metrics::CredentialLabels { credential: "nkey" }).inc();
                    tracing::warn!(%error, "cannot sign the NATS server's nonce");
                    async_nats::AuthError::new(error)
                })
            }
        }),
        None => async_nats::ConnectOptions::new(),
    };
    if let Some(ca) = &credentials.ca_file {
        options = options.add_root_certificates(ca.clone()).require_tls(true);
    }
    let client = options
        .name(identity.user())
        .custom_inbox_prefix(inbox_prefix)
        .retry_on_initial_connect()
        .event_callback(move |event| {
            let (tx, up) = (tx.clone(), up.clone());
            async move {
                match event {
                    async_nats::Event::Connected => {
                        up.set(1);
                        tx.send_modify(|n| *n += 1);
                    }
                    async_nats::Event::Disconnected | async_nats::Event::Closed => {
                        up.set(0);
                    }
                    _ => {}
                }
                tracing::info!(%event, "NATS connection event");
            }
        })
        .connect(servers(url))
        .await?;
    Ok((client, rx))
}

/// The servers of a NATS URL list (`tls://a:4222,tls://b:4222`), as the NATS tools accept it: a
/// client fails over between them (and the servers a cluster advertises).
pub fn servers(url: &str) -> Vec<&str> {
    url.split(',').map(str::trim).filter(|s| !s.is_empty()).collect()
}

/// Signs the server's connect nonce with the seed in `file`.
fn sign_nonce(file: &Path, nonce: &[u8]) -> Result<async_nats::Auth, String> {
    let seed = std::fs::read_to_string(file).map_err(|e| format!("cannot read NKey seed {}: {e}", file.display()))?;
    let pair = nkeys::KeyPair::from_seed(seed.trim()).map_err(|e| format!("{} holds no NKey seed: {e}", file.display()))?;
    let mut auth = async_nats::Auth::new();
    auth.signature = Some(pair.sign(nonce).map_err(|e| e.to_string())?);
    auth.nkey = Some(pair.public_key());
    Ok(auth)
}

/// Opens `bucket`, creating it when missing (another process may create it at the same moment).
async fn ensure_bucket(js: &jetstream::Context, bucket: &str, history: i64, max_age: Duration, replicas: usize) -> Result<kv::Store, BusError> {
    if let Ok(store) = js.get_key_value(bucket).await {
        return Ok(store);
    }
    let config = kv::Config { bucket: bucket.into(), history, max_age, num_replicas: replicas, storage: jetstream::stream::StorageType::File, ..Default::default() };
    match js.create_key_value(config).await {
        Ok(store) => Ok(store),
        Err(_) => js.get_key_value(bucket).await.map_err(|_| BusError::Bucket(bucket.to_string())),
    }
}

async fn open_bucket(js: &jetstream::Context, bucket: &str) -> Result<kv::Store, BusError> {
    js.get_key_value(bucket).await.map_err(|_| BusError::Bucket(bucket.to_string()))
}

/// The meta-operator's buckets, created when missing with `replicas` copies each: every
/// component's desired bucket, status and operators.
pub async fn ensure_buckets(js: &jetstream::Context, replicas: usize) -> Result<(BTreeMap<ComponentKind, kv::Store>, kv::Store, kv::Store), BusError> {
    let mut desired = BTreeMap::new();
    for component in ComponentKind::ALL {
        desired.insert(component, ensure_bucket(js, &bus::desired_bucket(component), 5, Duration::ZERO, replicas).await?);
    }
    Ok((
        desired,
        ensure_bucket(js, STATUS_BUCKET, 1, Duration::ZERO, replicas).await?,
        ensure_bucket(js, OPERATORS_BUCKET, 1, HEARTBEAT_STALE * 4, replicas).await?,
    ))
}

/// The hub's buckets of a spoke `cluster` ([`kubeflow_crds::fleet`]): its desired state and its
/// reports, created when missing with `replicas` copies each. The desired bucket's stream holds at
/// most [`fleet::MAX_LEAF_CONSUMERS`] consumers, none outliving its reader by more than
/// [`fleet::MAX_LEAF_INACTIVE_THRESHOLD`] (a bucket made before these limits gets them).
pub async fn ensure_fleet_buckets(js: &jetstream::Context, cluster: &fleet::ClusterName, replicas: usize) -> Result<(kv::Store, kv::Store), BusError> {
    let desired = ensure_bucket(js, &fleet::desired_bucket(cluster), 5, Duration::ZERO, replicas).await?;
    let stream = format!("KV_{}", fleet::desired_bucket(cluster));
    let limited = async {
        let mut config = js.get_stream(&stream).await?.info().await?.config.clone();
        let limits = jetstream::stream::ConsumerLimits { inactive_threshold: fleet::MAX_LEAF_INACTIVE_THRESHOLD, max_ack_pending: 0 };
        if config.max_consumers != fleet::MAX_LEAF_CONSUMERS as i32 || config.consumer_limits.as_ref() != Some(&limits) {
            config.max_consumers = fleet::MAX_LEAF_CONSUMERS as i32;
            config.consumer_limits = Some(limits);
            js.update_stream(config).await?;
        }
        Ok::<_, Box<dyn std::error::Error + Send + Sync>>(())
    };
    limited.await.map_err(|e| BusError::Limits(stream, e.to_string()))?;
    Ok((desired, ensure_bucket(js, &fleet::status_bucket(cluster), 1, Duration::ZERO, replicas).await?))
}

/// The hub's gate to its JetStream API for `cluster`'s leaf connection, for as long as the task
/// runs: each request under the cluster's [`fleet::leaf_api_prefix`] that
/// [`fleet::check_leaf_api`] lets through is sent on to the API, answered at the requester's
/// reply subject; a refused one is answered with the reason. Every replica serves it (a queue
/// group: each request is handled once).
pub async fn serve_leaf_api(client: async_nats::Client, cluster: fleet::ClusterName) {
    let subject = format!("{}.>", fleet::leaf_api_prefix(&cluster));
    let mut delays = crate::retry::exponential(Duration::from_millis(200), Duration::from_secs(5));
    loop {
        let mut requests = match client.queue_subscribe(subject.clone(), "leaf-api".into()).await {
            Ok(requests) => requests,
            Err(error) => {
                tracing::warn!(%cluster, %error, "cannot serve the cluster's gate yet; retrying");
                tokio::time::sleep(delays.next_backoff().unwrap_or(crate::retry::MAX)).await;
                continue;
            }
        };
        delays.reset();
        while let Some(request) = requests.next().await {
            let reply = request.reply.as_ref().map(|r| r.as_str());
            let sent = match fleet::check_leaf_api(&cluster, &request.subject, reply, &request.payload) {
                Ok(call) => {
                    let reply = request.reply.clone().expect("checked: a request let through has a reply subject");
                    match request.headers {
                        Some(headers) => client.publish_with_reply_and_headers(call.subject, reply, headers, call.payload.into()).await,
                        None => client.publish_with_reply(call.subject, reply, call.payload.into()).await,
                    }
                }
                Err(fleet::LeafApiRefusal::Refused(reason)) => {
                    tracing::warn!(%cluster, %reason, "refused a request of the cluster's leaf");
                    let reply = request.reply.clone().expect("checked: a refusal is answered at the request's reply subject");
                    client.publish(reply, fleet::leaf_api_refusal_answer(&reason).into()).await
                }
                Err(fleet::LeafApiRefusal::Unanswerable(reason)) => {
                    tracing::warn!(%cluster, %reason, "dropped a request of the cluster's leaf");
                    Ok(())
                }
            };
            if let Err(error) = sent {
                tracing::warn!(%cluster, %error, "cannot answer a request of the cluster's leaf");
            }
        }
        tracing::warn!(%cluster, "the gate's subscription ended; subscribing again");
    }
}

/// A component operator's buckets (its desired bucket, status, operators), which the
/// meta-operator creates: a component's identity may not.
pub async fn component_buckets(js: &jetstream::Context, component: ComponentKind) -> Result<(kv::Store, kv::Store, kv::Store), BusError> {
    Ok((open_bucket(js, &bus::desired_bucket(component)).await?, open_bucket(js, STATUS_BUCKET).await?, open_bucket(js, OPERATORS_BUCKET).await?))
}

/// How long a watch's creation may go unanswered before it is asked for again (see [`watch`]).
const WATCH_ANSWER_WITHIN: Duration = Duration::from_secs(2);
/// Creations [`watch`] asks for before it gives up; its callers then back off and retry.
const WATCH_ASKS: u32 = 10;

/// Creates a key-value watch with `create`, asking again whenever the server has not answered
/// within [`WATCH_ANSWER_WITHIN`].
///
/// A watch is an ephemeral JetStream consumer, and a clustered server places it on a random
/// replica of the bucket's stream. A replica whose process was killed (not shut down) still counts
/// as online to the others for minutes, and a consumer placed on it is never answered for: with
/// one node of three killed, one watch creation in three waited out async-nats's 10 s request
/// timeout, and a process needing two watches often went a minute without any. A live replica
/// answers within milliseconds, and asking again draws the replica again.
pub async fn watch<F, Fut>(mut create: F) -> Result<kv::Watch, kv::WatchError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<kv::Watch, kv::WatchError>>,
{
    for _ in 0..WATCH_ASKS {
        if let Ok(created) = tokio::time::timeout(WATCH_ANSWER_WITHIN, create()).await {
            return created;
        }
    }
    Err(kv::WatchError::new(kv::WatchErrorKind::TimedOut))
}

#[derive(Debug, thiserror::Error)]
pub enum BusError {
    #[error("cannot open or create JetStream key-value bucket {0}")]
    Bucket(String),
    #[error("cannot publish to NATS: {0}")]
    Publish(String),
    #[error("cannot set the consumer limits of stream {0}: {1}")]
    Limits(String, String),
}

/// Puts `value` under `key` in `bucket` with a JetStream message id (deduplication) and the current
/// span's trace context.
pub async fn put_with_id(js: &jetstream::Context, bucket: &str, key: &str, msg_id: &str, value: &impl Serialize) -> Result<u64, BusError> {
    let mut headers = HeaderMap::new();
    headers.insert("Nats-Msg-Id", HeaderValue::from(msg_id));
    inject_trace_context(&mut headers);
    let payload = serde_json::to_vec(value).expect("bus messages serialise");
    let ack = js
        .publish_with_headers(format!("$KV.{bucket}.{key}"), headers, payload.into())
        .await
        .map_err(|e| BusError::Publish(e.to_string()))?
        .await
        .map_err(|e| BusError::Publish(e.to_string()))?;
    Ok(ack.sequence)
}

struct HeaderInjector<'a>(&'a mut HeaderMap);

impl opentelemetry::propagation::Injector for HeaderInjector<'_> {
    fn set(&mut self, key: &str, value: String) {
        self.0.insert(key, HeaderValue::from(value.as_str()));
    }
}

struct HeaderExtractor<'a>(&'a HeaderMap);

impl opentelemetry::propagation::Extractor for HeaderExtractor<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).map(|v| v.as_str())
    }
    fn keys(&self) -> Vec<&str> {
        Vec::new()
    }
}

fn propagator() -> opentelemetry_sdk::propagation::TraceContextPropagator {
    opentelemetry_sdk::propagation::TraceContextPropagator::new()
}

/// Writes the current span's context as W3C `traceparent` into `headers`.
pub fn inject_trace_context(headers: &mut HeaderMap) {
    use opentelemetry::propagation::TextMapPropagator;
    use tracing_opentelemetry::OpenTelemetrySpanExt;
    let context = tracing::Span::current().context();
    propagator().inject_context(&context, &mut HeaderInjector(headers));
}

/// The current span's W3C `traceparent`, if it is being traced.
pub fn current_traceparent() -> Option<String> {
    let mut headers = HeaderMap::new();
    inject_trace_context(&mut headers);
    headers.get("traceparent").map(|v| v.as_str().to_string())
}

/// Makes `span` a child of the trace `traceparent` names.
pub fn adopt_traceparent(span: &tracing::Span, traceparent: &str) {
    use opentelemetry::propagation::TextMapPropagator;
    use tracing_opentelemetry::OpenTelemetrySpanExt;
    let mut headers = HeaderMap::new();
    headers.insert("traceparent", HeaderValue::from(traceparent));
    let _ = span.set_parent(propagator().extract(&HeaderExtractor(&headers)));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_list_names_each_server() {
        assert_eq!(servers("tls://nats:4222"), ["tls://nats:4222"]);
        assert_eq!(servers("tls://127.0.0.1:1, tls://127.0.0.1:2,"), ["tls://127.0.0.1:1", "tls://127.0.0.1:2"]);
    }

    #[test]
    fn trace_context_survives_the_headers() {
        use opentelemetry::propagation::TextMapPropagator;
        use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState};
        let span = SpanContext::new(TraceId::from_hex("4bf92f3577b34da6a3ce929d0e0e4736").unwrap(), SpanId::from_hex("00f067aa0ba902b7").unwrap(), TraceFlags::SAMPLED, true, TraceState::default());
        let context = opentelemetry::Context::new().with_remote_span_context(span.clone());
        let mut headers = HeaderMap::new();
        propagator().inject_context(&context, &mut HeaderInjector(&mut headers));
        assert_eq!(headers.get("traceparent").unwrap().as_str(), "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
        let extracted = propagator().extract(&HeaderExtractor(&headers));
        assert_eq!(extracted.span().span_context().trace_id(), span.trace_id());
    }

}
