//! A finalizer around a reconcile, written under the operator's own field manager (kube-runtime's
//! helper patches without one, which shows as an anonymous writer in `managedFields`).
//!
//! While the object lives: make sure it carries the finalizer, then run the `apply` step. Once it
//! is being deleted: run the `cleanup` step, then remove the finalizer so the deletion completes.
//! Both finalizer writes are merge patches conditional on the object's resourceVersion, so a
//! concurrent change to `metadata.finalizers` is never overwritten. A conflict is the normal
//! outcome of a race (e.g. a status write right after the object was created), not a failure:
//! the newer object's watch event runs the reconcile again.

use std::future::Future;

use kube::api::{Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::{Api, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::json;

/// What the reconcile is asked to do.
pub enum Step<K> {
    /// The object lives (and carries the finalizer): converge it.
    Apply(K),
    /// The object is being deleted: remove what it made.
    Cleanup(K),
}

/// Runs `reconcile` with the finalizer `name` kept on `object` while it lives. `Ok(Err(..))` is a
/// failed finalizer write, `Err(..)` the reconcile's own error.
pub async fn with_finalizer<K, E, F, Fut>(api: &Api<K>, name: &str, field_manager: &str, object: K, reconcile: F) -> Result<Result<Action, kube::Error>, E>
where
    K: Resource + Clone + DeserializeOwned + Serialize + std::fmt::Debug,
    F: FnOnce(Step<K>) -> Fut,
    Fut: Future<Output = Result<Action, E>>,
{
    let present = object.finalizers().iter().any(|f| f == name);
    let deleting = object.meta().deletion_timestamp.is_some();
    let params = PatchParams { field_manager: Some(field_manager.to_string()), ..Default::default() };
    let write = |finalizers: Vec<String>| {
        let patch = json!({"metadata": {"resourceVersion": object.resource_version(), "finalizers": finalizers}});
        let (api, params, object_name) = (api, &params, object.name_any());
        async move { api.patch(&object_name, params, &Patch::Merge(&patch)).await.map(|_| ()) }
    };
    match (present, deleting) {
        (true, false) => reconcile(Step::Apply(object.clone())).await.map(Ok),
        // Not ours to clean up (never added, or already removed).
        (false, true) => Ok(Ok(Action::await_change())),
        // The object changes, which triggers the reconcile that applies it.
        (false, false) => {
            let mut finalizers = object.finalizers().to_vec();
            finalizers.push(name.to_string());
            Ok(settle(write(finalizers).await, Action::await_change()))
        }
        (true, true) => {
            let action = reconcile(Step::Cleanup(object.clone())).await?;
            let finalizers = object.finalizers().iter().filter(|f| *f != name).cloned().collect();
            Ok(settle(write(finalizers).await, action))
        }
    }
}

/// What a finalizer write's outcome means for the reconcile.
/// - Conflict (409): the object changed since it was read; its watch event brings the newer one,
///   and the step runs again on it.
/// - Not found (404): the object is gone; there is nothing left to hold or release.
/// - Anything else fails the reconcile.
fn settle(written: Result<(), kube::Error>, then: Action) -> Result<Action, kube::Error> {
    match written {
        Ok(()) => Ok(then),
        Err(kube::Error::Api(status)) if status.code == 409 || status.code == 404 => Ok(Action::await_change()),
        Err(other) => Err(other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn api_error(code: u16) -> kube::Error {
        kube::Error::Api(kube::core::Status { code, ..Default::default() }.boxed())
    }

    #[test]
    fn a_conflicting_or_vanished_object_waits_for_its_next_event_instead_of_failing() {
        assert_eq!(settle(Err(api_error(409)), Action::requeue(Duration::from_secs(5))).unwrap(), Action::await_change());
        assert_eq!(settle(Err(api_error(404)), Action::requeue(Duration::from_secs(5))).unwrap(), Action::await_change());
    }

    #[test]
    fn any_other_write_error_fails_the_reconcile() {
        for code in [400, 403, 422, 500] {
            let error = settle(Err(api_error(code)), Action::await_change()).unwrap_err();
            assert!(matches!(error, kube::Error::Api(s) if s.code == code), "code {code}");
        }
    }

    #[test]
    fn a_written_finalizer_returns_the_steps_own_action() {
        let then = Action::requeue(Duration::from_secs(7));
        assert_eq!(settle(Ok(()), then.clone()).unwrap(), then);
    }
}
