//! Watches that recover quickly and completely from a gap: an API server restart, a dropped
//! connection, an expired resource version.
//!
//! - [`watch`]: a watch that reconnects within a few seconds ([`backoff`]). kube-runtime's default waits up to 30 s, so one
//!   API server restart left a watch blind for half a minute.
//! - [`changes`]: what a reflected watch tells a controller, in an order that is safe to act on.
//!   After a gap the watcher lists again, and an object deleted during the gap yields no event of
//!   its own; its owner would never hear of it. A (re)list is therefore reported only once the
//!   store holds it, and every object the list no longer has is reported deleted.
//! - [`log_errors`]: a watch's errors are logged and retried by its own backoff, never passed to a
//!   controller. A controller pauses *all* its triggers after an error from *any* of its watches
//!   (`Controller::trigger_backoff`), so after an API server restart, where each watch fails once
//!   with "resource version too old", one pause per watch added up to a minute.

use std::collections::HashSet;
use std::time::Duration;

use futures::{Stream, StreamExt, stream};
use kube::runtime::reflector::{self, Store};
use kube::runtime::utils::Backoff;
use kube::core::PartialObjectMeta;
use kube::runtime::watcher::{self, Event, watcher};
use kube::runtime::WatchStreamExt;
use kube::{Api, Resource, ResourceExt};
use serde::de::DeserializeOwned;

use crate::retry;

/// The first reconnect waits about this long (±50 %).
pub const RECONNECT_INITIAL: Duration = Duration::from_millis(250);
/// Reconnects never wait longer than this (±50 %).
pub const RECONNECT_MAX: Duration = Duration::from_secs(4);

/// The reconnect delays of a watch (and of a controller's triggers, `Controller::trigger_backoff`):
/// exponential from [`RECONNECT_INITIAL`] to [`RECONNECT_MAX`], reset by every event received.
pub struct WatchBackoff(backoff::ExponentialBackoff);

/// A new [`WatchBackoff`].
pub fn backoff() -> WatchBackoff {
    WatchBackoff(retry::exponential(RECONNECT_INITIAL, RECONNECT_MAX))
}

impl Iterator for WatchBackoff {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        backoff::backoff::Backoff::next_backoff(&mut self.0)
    }
}

impl Backoff for WatchBackoff {
    fn reset(&mut self) {
        backoff::backoff::Backoff::reset(&mut self.0);
    }
}

/// A watch of `api` whose reconnects wait [`backoff`].
pub fn watch<K>(api: Api<K>, config: watcher::Config) -> impl Stream<Item = Result<Event<K>, watcher::Error>> + Send + 'static
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    watcher(api, config).backoff(backoff())
}

/// A [`watch`] of `api` reflected into a new store (of objects of `dyntype`): the store, and the
/// watch's [`changes`], which must be polled to keep the store current.
pub fn reflect<K>(api: Api<K>, config: watcher::Config, dyntype: K::DynamicType) -> (Store<K>, impl Stream<Item = Result<Change<K>, watcher::Error>> + Send + 'static)
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone + Send + Sync,
{
    let writer = reflector::store::Writer::new(dyntype);
    let store = writer.as_reader();
    (store.clone(), changes(watch(api, config).reflect(writer), store))
}

/// As [`reflect`], of the objects' metadata only (`api` asks for metadata) and without their
/// `managedFields` (most of a small object's size): for caches of many objects of which a
/// controller needs to know the names, labels, owners and resource versions.
pub fn reflect_metadata<K>(api: Api<PartialObjectMeta<K>>, config: watcher::Config, dyntype: K::DynamicType) -> (Store<PartialObjectMeta<K>>, impl Stream<Item = Result<Change<PartialObjectMeta<K>>, watcher::Error>> + Send + 'static)
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone + Send + Sync,
{
    let writer = reflector::store::Writer::new(dyntype);
    let store = writer.as_reader();
    let events = watch(api, config).modify(|object| object.metadata.managed_fields = None).reflect(writer);
    (store.clone(), changes(events, store))
}

/// A change a reflected watch reports.
#[derive(Debug, Clone, PartialEq)]
pub enum Change<K> {
    /// The object exists as given (created, modified, or listed).
    Applied(K),
    /// The object is gone; its last known state.
    Deleted(K),
}

impl<K> Change<K> {
    /// The object, applied or deleted.
    pub fn object(self) -> K {
        match self {
            Change::Applied(object) | Change::Deleted(object) => object,
        }
    }

    /// The object, if it exists.
    pub fn applied(self) -> Option<K> {
        match self {
            Change::Applied(object) => Some(object),
            Change::Deleted(_) => None,
        }
    }
}

/// The changes of `events`, a watch already reflected into `store` (`.reflect(writer)`):
/// single events pass through; the objects of a (re)list are reported once `store` holds the whole
/// list (a reconcile they trigger reads what they say), followed by every object that was in the
/// store before the list and is not in it now.
pub fn changes<K, S>(events: S, store: Store<K>) -> impl Stream<Item = Result<Change<K>, watcher::Error>> + Send + 'static
where
    K: Resource + Clone + Send + Sync + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
    S: Stream<Item = Result<Event<K>, watcher::Error>> + Send + 'static,
{
    let mut before_list = Vec::new();
    log_errors(events).flat_map(move |event| {
        let changes = match event {
            Err(error) => vec![Err(error)],
            Ok(Event::Apply(object)) => vec![Ok(Change::Applied(object))],
            Ok(Event::Delete(object)) => vec![Ok(Change::Deleted(object))],
            // The store keeps its old content until the list is done.
            Ok(Event::Init) => {
                before_list = store.state();
                Vec::new()
            }
            Ok(Event::InitApply(_)) => Vec::new(),
            Ok(Event::InitDone) => {
                let listed = store.state();
                let key = |object: &K| (object.namespace(), object.name_any());
                let present: HashSet<_> = listed.iter().map(|o| key(o)).collect();
                let vanished = std::mem::take(&mut before_list).into_iter().filter(|o| !present.contains(&key(o)));
                let applied = listed.iter().map(|o| Change::Applied(K::clone(o)));
                applied.chain(vanished.map(|o| Change::Deleted(K::clone(&o)))).map(Ok).collect()
            }
        };
        stream::iter(changes)
    })
}

/// The objects a [`watch`] of `api` touches (applied or deleted), its errors logged
/// ([`log_errors`]): a controller's secondary watch (`Controller::watches_stream`) that neither
/// pauses the controller nor reaches it as an error when the API server expires its resource
/// version.
pub fn touched<K>(api: Api<K>, config: watcher::Config) -> impl Stream<Item = Result<K, watcher::Error>> + Send + 'static
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    log_errors(watch(api, config).touched_objects())
}

/// `events` without its errors, which are logged: the watch that yields them retries on its own.
pub fn log_errors<T: Send + 'static, S>(events: S) -> impl Stream<Item = Result<T, watcher::Error>> + Send + 'static
where
    S: Stream<Item = Result<T, watcher::Error>> + Send + 'static,
{
    events.filter(|event| {
        if let Err(error) = event {
            tracing::warn!(%error, "watch failed; it is retried");
        }
        std::future::ready(event.is_ok())
    })
}

#[cfg(test)]
mod tests {
    use futures::{TryStreamExt, stream};
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::runtime::WatchStreamExt;
    use kube::runtime::reflector::{self, ObjectRef};
    use kube::runtime::watcher::Event;

    use super::*;

    fn config_map(name: &str) -> ConfigMap {
        let mut object = ConfigMap::default();
        object.metadata.name = Some(name.into());
        object.metadata.namespace = Some("ns".into());
        object
    }

    /// The changes as text; `lists` are the index ranges of listed objects, which come in the
    /// store's order and are sorted here.
    fn names(changes: &[Change<ConfigMap>], lists: &[std::ops::Range<usize>]) -> Vec<String> {
        let mut names: Vec<String> = changes
            .iter()
            .map(|c| match c {
                Change::Applied(o) => format!("applied {}", o.name_any()),
                Change::Deleted(o) => format!("deleted {}", o.name_any()),
            })
            .collect();
        for list in lists {
            names[list.clone()].sort();
        }
        names
    }

    /// Runs `events` through a reflector and [`changes`]; each change comes with whether the store
    /// agreed with it when it was reported.
    async fn run(events: Vec<Event<ConfigMap>>) -> (Vec<Change<ConfigMap>>, Vec<bool>) {
        let writer = reflector::store::Writer::default();
        let store = writer.as_reader();
        let reflected = stream::iter(events.into_iter().map(Ok)).reflect(writer);
        let observed = store.clone();
        let checked: Vec<(Change<ConfigMap>, bool)> = changes(reflected, store)
            .map_ok(|change| {
                let cached = observed.get(&ObjectRef::new(&change.clone().object().name_any()).within("ns")).is_some();
                let agrees = matches!(change, Change::Applied(_)) == cached;
                (change, agrees)
            })
            .try_collect()
            .await
            .expect("no errors");
        checked.into_iter().unzip()
    }

    #[tokio::test]
    async fn a_list_is_reported_once_the_store_holds_it() {
        let events = vec![Event::Init, Event::InitApply(config_map("a")), Event::InitApply(config_map("b")), Event::InitDone, Event::Apply(config_map("c"))];
        let (changes, agreed) = run(events).await;
        assert_eq!(names(&changes, &[0..2]), ["applied a", "applied b", "applied c"]);
        assert_eq!(agreed, [true, true, true], "a reconcile triggered by a listed object must find it in the store");
    }

    #[tokio::test]
    async fn an_object_gone_from_a_relist_is_reported_deleted() {
        let events = vec![
            Event::Init,
            Event::InitApply(config_map("kept")),
            Event::InitApply(config_map("vanished")),
            Event::InitDone,
            Event::Delete(config_map("deleted-while-watched")),
            // The watch broke; "vanished" was deleted while nobody watched.
            Event::Init,
            Event::InitApply(config_map("kept")),
            Event::InitApply(config_map("new")),
            Event::InitDone,
        ];
        let (changes, agreed) = run(events).await;
        assert_eq!(names(&changes, &[0..2, 3..5]), ["applied kept", "applied vanished", "deleted deleted-while-watched", "applied kept", "applied new", "deleted vanished"]);
        assert!(agreed.iter().all(|a| *a), "every change agrees with the store when reported: {agreed:?}");
    }

    #[tokio::test]
    async fn watch_errors_never_reach_a_controller() {
        let events = stream::iter([Ok(1), Err(watcher::Error::NoResourceVersion), Ok(2)]);
        let passed: Vec<i32> = log_errors(events).try_collect().await.expect("no error is passed on");
        assert_eq!(passed, [1, 2]);
    }

    #[test]
    fn reconnects_wait_a_few_seconds_at_most() {
        let mut delays = backoff();
        let first = delays.next().expect("never gives up");
        assert!(first <= RECONNECT_INITIAL * 3 / 2, "first delay {first:?}");
        let longest = (0..50).map(|_| delays.next().expect("never gives up")).max().expect("delays");
        assert!(longest <= Duration::from_secs(6), "a reconnect waited {longest:?}");
        delays.reset();
        assert!(delays.next().expect("never gives up") <= RECONNECT_INITIAL * 3 / 2, "reset starts again from the first delay");
    }
}
