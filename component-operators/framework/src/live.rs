//! The live objects reconciles read: one reflector store per kind a component ships, fed by the
//! label-selected watches that also trigger its reconciles ([`crate::run`]). A reconcile reads
//! from these stores instead of sending one GET per object; an event reaches a store before the
//! reconcile it triggers, so a deleted or edited object is seen as such.

use std::collections::BTreeMap;

use futures::Stream;
use kube::api::DynamicObject;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use serde_json::Value;

use crate::kinds::KindInfo;

/// Reflector stores of every watched kind, by kind name.
#[derive(Clone, Default)]
pub struct LiveObjects {
    stores: BTreeMap<&'static str, (&'static KindInfo, Store<DynamicObject>)>,
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
        self.stores.insert(info.kind, (info, writer.as_reader()));
        let config = watcher::Config::default().labels(selector).any_semantic();
        watcher(api, config).default_backoff().reflect(writer).touched_objects()
    }

    /// The cached object of kind `info` at `namespace/name` (namespace ignored for cluster-scoped
    /// kinds), as JSON; `None` when it does not exist or is not labelled for this operator.
    pub fn get(&self, info: &KindInfo, namespace: Option<&str>, name: &str) -> Option<Value> {
        let (_, store) = self.stores.get(info.kind)?;
        let mut reference = ObjectRef::new_with(name, info.api_resource());
        if !info.cluster_scoped {
            reference = reference.within(namespace.unwrap_or_default());
        }
        store.get(&reference).map(|object| serde_json::to_value(object.as_ref()).expect("objects serialise"))
    }

    /// Whether objects of `info` are cached here.
    pub fn caches(&self, info: &KindInfo) -> bool {
        self.stores.contains_key(info.kind)
    }

    /// Returns once every store has received its first full list.
    pub async fn wait_until_ready(&self) {
        for (info, store) in self.stores.values() {
            if store.wait_until_ready().await.is_err() {
                tracing::warn!(kind = info.kind, "watch stopped before its first list");
            }
        }
    }
}
