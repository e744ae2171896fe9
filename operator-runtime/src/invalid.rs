//! Objects the API server stored but our types cannot decode (stored before a schema change, or
//! written through a looser version of the CRD). Watches decode through kube's `DeserializeGuard`
//! so such an object reaches the reconciler as an error instead of failing the whole watch (a list
//! that does not decode would stop every other object from being reconciled); the reconciler
//! reports it here and skips it until it changes.

use k8s_openapi::api::core::v1::ObjectReference;
use kube::Resource;
use kube::core::error_boundary::InvalidObject;
use kube::runtime::events::{EventType, Recorder};
use tracing::warn;

/// Reason of the Warning Event an undecodable object gets.
pub const REASON: &str = "InvalidObject";

/// Longest decode error an Event carries (the API server caps an Event's note at 1 kB).
const MAX_NOTE: usize = 900;

/// Logs the object and publishes a Warning Event on it naming the decode error.
pub async fn report<K: Resource<DynamicType = ()>>(recorder: &Recorder, invalid: &InvalidObject) {
    let (name, namespace) = (invalid.metadata.name.clone().unwrap_or_default(), invalid.metadata.namespace.clone());
    warn!(kind = %K::kind(&()), %name, namespace = namespace.as_deref().unwrap_or_default(), error = %invalid.error, "object cannot be decoded; skipping it until it changes");
    let mut error = invalid.error.clone();
    if error.len() > MAX_NOTE {
        let mut end = MAX_NOTE;
        while !error.is_char_boundary(end) {
            end -= 1;
        }
        error.truncate(end);
        error.push('…');
    }
    let reference = ObjectReference {
        api_version: Some(K::api_version(&()).into_owned()),
        kind: Some(K::kind(&()).into_owned()),
        name: Some(name),
        namespace,
        uid: invalid.metadata.uid.clone(),
        resource_version: invalid.metadata.resource_version.clone(),
        ..Default::default()
    };
    let event = crate::event(EventType::Warning, REASON, format!("cannot be decoded, so it is skipped until it changes (other objects are unaffected): {error}"), "Decode");
    if let Err(e) = recorder.publish(&event, &reference).await {
        warn!(error = %e, "cannot publish the InvalidObject event");
    }
}
