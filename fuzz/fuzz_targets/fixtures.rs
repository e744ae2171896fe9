//! What every target plans against: the releases the registered operators ship, as the
//! meta-operator learns them from heartbeats.

use meta_operator::catalog::Catalog;

pub fn catalog() -> Catalog {
    let mut catalog = Catalog::default();
    for component in kubeflow_component_registry::all() {
        catalog.learn(component.kind, component.releases.clone());
    }
    catalog
}

/// JSON, or else YAML (what users apply), decoded as `T`.
pub fn decode<T: serde::de::DeserializeOwned>(data: &[u8]) -> Option<T> {
    serde_json::from_slice(data).ok().or_else(|| serde_yaml_ng::from_slice(data).ok())
}
