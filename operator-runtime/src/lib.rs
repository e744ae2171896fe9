//! What every operator process of the project needs, the meta-operator and the component operators
//! alike: Prometheus metrics ([`metrics`]) and the health endpoint serving them ([`server`]), a
//! Kubernetes client that counts its writes ([`client`]), logging and tracing ([`telemetry`]), the
//! NATS transport ([`nats`]), retry delays ([`retry`]), watches that recover from gaps
//! ([`watches`]), condition bookkeeping ([`conditions`]), freed memory handed back ([`memory`]) and
//! the content hash that tells whether a desired object or spec changed.

pub mod bus_security;
pub mod client;
pub mod conditions;
pub mod finalizer;
pub mod invalid;
pub mod leader;
pub mod memory;
pub mod metrics;
pub mod nats;
pub mod retry;
pub mod synced;
pub mod server;
pub mod telemetry;
pub mod watches;

use std::hash::Hasher;

use fnv::FnvHasher;
use serde_json::Value;

/// Stable 64-bit FNV-1a hash of an object's JSON, used to tell whether what was last applied
/// differs from what is desired now.
pub fn content_hash(value: &Value) -> String {
    let mut hasher = FnvHasher::default();
    hasher.write(value.to_string().as_bytes());
    format!("{:016x}", hasher.finish())
}

/// The longest Event note the API server accepts, in bytes; it refuses a longer one, and the
/// event is lost.
pub const EVENT_NOTE_MAX: usize = 1024;

/// An Event whose note is cut to [`EVENT_NOTE_MAX`] bytes (at a character boundary, ending in
/// "…"): notes carry error messages, and an API server's message can run to kilobytes.
pub fn event(type_: kube::runtime::events::EventType, reason: &str, note: String, action: &str) -> kube::runtime::events::Event {
    kube::runtime::events::Event { type_, reason: reason.into(), note: Some(cut_to(note, EVENT_NOTE_MAX)), action: action.into(), secondary: None }
}

/// Completes on SIGTERM (what the kubelet sends to stop a pod) or SIGINT. A binary that is its
/// container's PID 1 and does not wait for this is never stopped by SIGTERM: the kernel ignores
/// it for PID 1 without a handler, and the kubelet kills the pod only after its grace period.
pub async fn stop_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let (mut term, mut int) = (signal(SignalKind::terminate()).expect("SIGTERM handler"), signal(SignalKind::interrupt()).expect("SIGINT handler"));
    tokio::select! { _ = term.recv() => {}, _ = int.recv() => {} }
}

/// `text` cut to at most `max` bytes, at a character boundary, ending in "…" where it was cut.
pub fn cut_to(mut text: String, max: usize) -> String {
    const ELLIPSIS: &str = "…";
    if text.len() > max {
        let mut end = max.saturating_sub(ELLIPSIS.len());
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push_str(ELLIPSIS);
    }
    text
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    #[test]
    fn event_notes_are_cut_to_what_the_api_server_accepts() {
        assert_eq!(super::cut_to("short".into(), 1024), "short");
        let exact = "a".repeat(1024);
        assert_eq!(super::cut_to(exact.clone(), 1024), exact);
        // 1021 bytes of 'a', then a 2-byte character across the cut: it goes whole.
        let long = format!("{}é{}", "a".repeat(1020), "b".repeat(2000));
        let cut = super::cut_to(long, 1024);
        assert_eq!(cut, format!("{}…", "a".repeat(1020)));
        assert!(cut.len() <= 1024);
    }

    #[test]
    fn content_hash_values_are_stable() {
        // Stored in annotations on live objects: these values must never change.
        assert_eq!(super::content_hash(&json!({"a": 1})), "9c3e82dd6fcae8b1");
        assert_eq!(super::content_hash(&json!({"kind": "Deployment", "spec": {"replicas": 2}})), "c6d31151555987ce");
    }
}
