//! The live objects reconciles read: one reflector store per kind a component ships, fed by the
//! label-selected watches that also trigger its reconciles ([`crate::run`]). A reconcile reads
//! from these stores instead of sending one GET per object; an event reaches a store before the
//! reconcile it triggers, so a deleted or edited object is seen as such. After a gap in a watch,
//! the relisted objects trigger only once the store holds the list, and the objects it no longer
//! has count as deleted ([`operator_runtime::watches::changes`]).

use std::collections::BTreeMap;

use futures::{Stream, TryStreamExt};
use kube::api::DynamicObject;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use serde_json::Value;
use operator_runtime::synced::WatchesSynced;
use operator_runtime::watches::{self, Change};
use tokio::sync::mpsc;

use crate::kinds::KindInfo;

/// Reflector stores of every watched kind, by kind name, and whether each watch has delivered its
/// first full list.
#[derive(Clone, Default)]
pub struct LiveObjects {
    stores: BTreeMap<&'static str, (&'static KindInfo, Store<DynamicObject>)>,
    /// Every watch that feeds this operator, the component resources' included.
    pub synced: WatchesSynced,
    /// Where deleted objects are reported (the heal fast path, [`crate::heal`]).
    deleted: Option<mpsc::UnboundedSender<(&'static KindInfo, DynamicObject)>>,
}

impl LiveObjects {
    /// Starts caching objects of `info` labelled with `selector` (all namespaces); returns the
    /// watch stream that feeds the store and must be polled (the controller's trigger).
    pub fn watch(
        &mut self,
        client: &Client,
        info: &'static KindInfo,
        selector: &str,
    ) -> impl Stream<Item = Result<DynamicObject, watcher::Error>> + Send + 'static {
        let resource = info.api_resource();
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
        let writer = reflector::store::Writer::new(resource);
        let store = writer.as_reader();
        self.stores.insert(info.kind, (info, store.clone()));
        let config = watcher::Config::default().labels(selector).any_semantic();
        let events = watches::watch(api, config).reflect(writer);
        let deleted = self.deleted.clone();
        // Deletions include the objects a relist no longer has (deleted while the watch was down).
        watches::changes(self.synced.track(events), store).map_ok(move |change| {
            if let (Some(deleted), Change::Deleted(object)) = (&deleted, &change) {
                let _ = deleted.send((info, object.clone()));
            }
            change.object()
        })
    }

    /// Reports every deleted object of the kinds watched from now on to the returned receiver.
    pub fn report_deletions(&mut self) -> mpsc::UnboundedReceiver<(&'static KindInfo, DynamicObject)> {
        let (sender, receiver) = mpsc::unbounded_channel();
        self.deleted = Some(sender);
        receiver
    }

    /// The cached object of kind `info` at `namespace/name` (namespace ignored for cluster-scoped
    /// kinds), as JSON; `None` when it does not exist or is not labelled for this operator.
    pub fn get(&self, info: &KindInfo, namespace: Option<&str>, name: &str) -> Option<Value> {
        let (_, store) = self.stores.get(info.kind)?;
        let mut reference = ObjectRef::new_with(name, info.api_resource());
        if !info.cluster_scoped {
            reference = reference.within(namespace.unwrap_or_default());
        }
        let mut object = serde_json::to_value(store.get(&reference)?.as_ref()).expect("objects serialise");
        // Items of a list carry no apiVersion and kind; objects from watch events do.
        object["apiVersion"] = info.api_version().into();
        object["kind"] = info.kind.into();
        Some(object)
    }

    /// Whether objects of `info` are cached here.
    pub fn caches(&self, info: &KindInfo) -> bool {
        self.stores.contains_key(info.kind)
    }

    /// Returns once every tracked watch has delivered its first full list.
    pub async fn wait_until_ready(&self) {
        self.synced.wait().await;
    }
}
