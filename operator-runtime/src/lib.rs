//! What every operator process of the project needs, the meta-operator and the component operators
//! alike: Prometheus metrics ([`metrics`]) and the health endpoint serving them ([`server`]),
//! logging and tracing ([`telemetry`]), the NATS transport ([`nats`]), retry delays ([`retry`]),
//! condition bookkeeping ([`conditions`]) and the content hash that tells whether a desired object or spec changed.

pub mod conditions;
pub mod metrics;
pub mod nats;
pub mod retry;
pub mod server;
pub mod telemetry;

use serde_json::Value;

/// Stable 64-bit FNV-1a hash of an object's JSON, used to tell whether what was last applied
/// differs from what is desired now.
pub fn content_hash(value: &Value) -> String {
    let mut hash: u64 = 0xcbf29ce484222325;
    for byte in value.to_string().bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x100000001b3);
    }
    format!("{hash:016x}")
}

