//! The NATS contract between the meta-operator and the component operators.
//!
//! Three JetStream key-value buckets (each a durable stream, file storage):
//! * `kubeflow-desired` — key `<component>.<kfdef namespace>.<kfdef name>`, value
//!   [`DesiredComponent`]: the component spec the meta-operator wants. Written by the meta-operator
//!   with `Nats-Msg-Id = <kfdef uid>.<generation>.<component>.<spec hash>.<key revision>`
//!   (JetStream drops a re-publish of the same change) and W3C `traceparent`; deleted when the component leaves the KfDef. A key holds the
//!   latest value, so a consumer that (re)lists sees exactly the current desired state: changes made
//!   while it was away are never lost, and replays are harmless because applying the same spec twice
//!   changes nothing.
//! * `kubeflow-status` — same keys, value [`StatusReport`], written by component operators.
//! * `kubeflow-operators` — key `<component>`, value [`Heartbeat`], refreshed every few seconds by
//!   each running component operator, so the meta-operator can say which operator is missing.
//!
//! Keys are ordered per component: a component's consumer watches `<component>.>` and receives its
//! updates in the order they were written.

use std::time::Duration;

use async_nats::jetstream::{self, kv};
use async_nats::{HeaderMap, HeaderValue};
use kubeflow_crds::component::ComponentKind;
use serde::{Deserialize, Serialize};
use serde_json::Value;

pub const DESIRED_BUCKET: &str = "kubeflow-desired";
pub const STATUS_BUCKET: &str = "kubeflow-status";
pub const OPERATORS_BUCKET: &str = "kubeflow-operators";
/// How often a component operator refreshes its heartbeat, and when the meta-operator gives up.
pub const HEARTBEAT_EVERY: Duration = Duration::from_secs(3);
pub const HEARTBEAT_STALE: Duration = Duration::from_secs(15);

/// The KfDef a component belongs to.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct KfDefRef {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub generation: i64,
}

/// What the meta-operator wants of one component of one KfDef.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct DesiredComponent {
    pub kfdef: KfDefRef,
    pub component: ComponentKind,
    /// Hash of `spec`, echoed back in status so the meta-operator knows which spec a report is about.
    pub spec_hash: String,
    /// The component resource's spec.
    pub spec: Value,
    /// W3C trace context of the change (also in the message header; key-value watchers only see
    /// the value), so the component operator's work joins the meta-operator's trace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
}

/// A component operator's report on the resource it made from a [`DesiredComponent`].
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct StatusReport {
    pub spec_hash: String,
    pub phase: Option<String>,
    pub version: Option<String>,
    pub installed_version: Option<String>,
    pub ready: bool,
    pub degraded: bool,
    pub message: String,
    /// `metadata.generation` of the component resource, and the one its status was computed for.
    pub generation: Option<i64>,
    pub observed_generation: Option<i64>,
}

/// A component operator saying it is alive.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Heartbeat {
    pub operator: String,
    pub version: String,
    /// Unix seconds.
    pub at: u64,
}

pub fn key(component: ComponentKind, namespace: &str, name: &str) -> String {
    format!("{}.{namespace}.{name}", component.name())
}

/// Splits a key into (component, namespace, name).
pub fn parse_key(key: &str) -> Option<(ComponentKind, String, String)> {
    let mut parts = key.splitn(3, '.');
    let component = parts.next()?.parse().ok()?;
    Some((component, parts.next()?.to_string(), parts.next()?.to_string()))
}

pub fn now_unix() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// Connects, retrying forever, and reports connection events on the returned channel (a
/// `Connected` after a `Disconnected` tells consumers to relist).
pub async fn connect(url: &str, name: &str) -> Result<(async_nats::Client, tokio::sync::watch::Receiver<u64>), async_nats::ConnectError> {
    let (tx, rx) = tokio::sync::watch::channel(0u64);
    let client = async_nats::ConnectOptions::new()
        .name(name)
        .retry_on_initial_connect()
        .event_callback(move |event| {
            let tx = tx.clone();
            async move {
                if matches!(event, async_nats::Event::Connected) {
                    tx.send_modify(|n| *n += 1);
                }
                tracing::info!(%event, "NATS connection event");
            }
        })
        .connect(url)
        .await?;
    Ok((client, rx))
}

/// Opens `bucket`, creating it when missing (another process may create it at the same moment).
async fn open_bucket(js: &jetstream::Context, bucket: &'static str, history: i64, max_age: Duration) -> Result<kv::Store, BusError> {
    if let Ok(store) = js.get_key_value(bucket).await {
        return Ok(store);
    }
    let config = kv::Config { bucket: bucket.into(), history, max_age, storage: jetstream::stream::StorageType::File, ..Default::default() };
    match js.create_key_value(config).await {
        Ok(store) => Ok(store),
        Err(_) => js.get_key_value(bucket).await.map_err(|_| BusError::Bucket(bucket)),
    }
}

/// The desired, status and operators buckets.
pub async fn buckets(js: &jetstream::Context) -> Result<(kv::Store, kv::Store, kv::Store), BusError> {
    Ok((
        open_bucket(js, DESIRED_BUCKET, 5, Duration::ZERO).await?,
        open_bucket(js, STATUS_BUCKET, 1, Duration::ZERO).await?,
        open_bucket(js, OPERATORS_BUCKET, 1, HEARTBEAT_STALE * 4).await?,
    ))
}

#[derive(Debug, thiserror::Error)]
pub enum BusError {
    #[error("cannot open or create JetStream key-value bucket {0}")]
    Bucket(&'static str),
    #[error("cannot publish to NATS: {0}")]
    Publish(String),
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

    #[test]
    fn keys_round_trip_even_with_dotted_names() {
        let k = key(ComponentKind::Katib, "team-a", "kf.prod");
        assert_eq!(k, "katib.team-a.kf.prod");
        assert_eq!(parse_key(&k), Some((ComponentKind::Katib, "team-a".into(), "kf.prod".into())));
        assert_eq!(parse_key("seldon.a.b"), None);
    }
}
