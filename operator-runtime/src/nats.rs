//! The NATS transport every operator uses: connecting with reconnect notifications, opening the
//! JetStream key-value buckets of the contract ([`kubeflow_crds::bus`]), publishing with a message
//! id (deduplication) and W3C trace context.

use std::time::Duration;

use async_nats::jetstream::{self, kv};
use async_nats::{HeaderMap, HeaderValue};
use kubeflow_crds::bus::{DESIRED_BUCKET, HEARTBEAT_STALE, OPERATORS_BUCKET, STATUS_BUCKET};
use serde::Serialize;

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

}
