//! Knowing when watches have delivered their first full list, for `/readyz`.
//!
//! kube-runtime's `Store::wait_until_ready` cannot be shared: it wakes only the last of several
//! waiters, and a controller already waits on its own store, so a second waiter could leave the
//! controller waiting for ever. Each tracked watch signals its own first list instead.

use std::fmt::Debug;

use futures::{Stream, TryStreamExt};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Resource};
use serde::de::DeserializeOwned;
use tokio::sync::watch;

use crate::watches;

/// The watches `/readyz` waits for.
#[derive(Clone, Default)]
pub struct WatchesSynced {
    synced: Vec<watch::Receiver<bool>>,
}

impl WatchesSynced {
    /// Passes a watch's `events` through, counting it among the watches [`Self::wait`] waits for.
    pub fn track<K, S>(&mut self, events: S) -> impl Stream<Item = S::Item> + Send + 'static
    where
        K: Send + 'static,
        S: Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static,
    {
        let (synced, receiver) = watch::channel(false);
        self.synced.push(receiver);
        events.inspect_ok(move |event| {
            if matches!(event, watcher::Event::InitDone) {
                synced.send_replace(true);
            }
        })
    }

    /// A tracked watch of `api` feeding a reflector store: the store, and the stream of changed
    /// objects a controller is built on (`Controller::for_stream`).
    pub fn reflect<K>(&mut self, api: Api<K>, config: watcher::Config) -> (Store<K>, impl Stream<Item = Result<K, watcher::Error>> + Send + 'static)
    where
        K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
        K::DynamicType: Default + Eq + std::hash::Hash + Clone + Send + Sync,
    {
        let (store, changes) = self.reflect_changes(api, config);
        (store, changes.try_filter_map(|change| std::future::ready(Ok(change.applied()))))
    }

    /// As [`Self::reflect`], with deletions in the stream too: each change comes after the store
    /// took it in.
    pub fn reflect_changes<K>(&mut self, api: Api<K>, config: watcher::Config) -> (Store<K>, impl Stream<Item = Result<watches::Change<K>, watcher::Error>> + Send + 'static)
    where
        K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
        K::DynamicType: Default + Eq + std::hash::Hash + Clone + Send + Sync,
    {
        let writer = reflector::store::Writer::default();
        let store = writer.as_reader();
        // Without `managedFields`, which no controller reads from its cache and which weigh more
        // than the rest of a small object's metadata.
        let events = watches::watch(api, config).modify(|object| object.meta_mut().managed_fields = None).reflect(writer);
        (store.clone(), watches::changes(self.track(events), store))
    }

    /// Whether every tracked watch has delivered its first full list.
    pub fn is_synced(&self) -> bool {
        self.synced.iter().all(|synced| *synced.borrow())
    }

    /// Returns once every tracked watch has delivered its first full list.
    pub async fn wait(&self) {
        for synced in &self.synced {
            // An error means the watch was dropped: the process is shutting down.
            let _ = synced.clone().wait_for(|synced| *synced).await;
        }
    }
}
