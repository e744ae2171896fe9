//! What every operator process of the project needs, the meta-operator and the component operators
//! alike: Prometheus metrics ([`metrics`]) and the health endpoint serving them ([`server`]), a
//! Kubernetes client that counts its writes ([`client`]), logging and tracing ([`telemetry`]), the
//! NATS transport ([`nats`]), retry delays ([`retry`]), watches that recover from gaps
//! ([`watches`]), condition bookkeeping ([`conditions`]) and
//! the content hash that tells whether a desired object or spec changed.

pub mod bus_security;
pub mod client;
pub mod conditions;
pub mod finalizer;
pub mod invalid;
pub mod leader;
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

#[cfg(test)]
mod tests {
    use serde_json::json;

    #[test]
    fn content_hash_values_are_stable() {
        // Stored in annotations on live objects: these values must never change.
        assert_eq!(super::content_hash(&json!({"a": 1})), "9c3e82dd6fcae8b1");
        assert_eq!(super::content_hash(&json!({"kind": "Deployment", "spec": {"replicas": 2}})), "c6d31151555987ce");
    }
}
