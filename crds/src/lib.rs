//! API types of the Kubeflow operators and the code that renders their CRDs.
//!
//! * [`kfdef`]: `KfDef` (`kfdef.apps.kubeflow.org/v1`), the kfctl deployment format.
//! * [`kfupgrade`]: `KfUpgrade` (`kfupgrade.apps.kubeflow.org/v1alpha1`).
//! * [`profile`]: Kubeflow's `Profile` (`kubeflow.org/v1`), which the profiles component installs.
//! * [`bus`]: the NATS contract between the meta-operator and the component operators.
//! * [`fleet`]: the contract between a hub cluster's bus and its spoke clusters' (NATS leaf nodes).
//! * [`fleet_cluster`]: `FleetCluster` (`fleet.kubeflow.org/v1alpha1`), a registered spoke cluster,
//!   and a KfDef's placement on them.
//! * [`component`]: the component resources (`components.kubeflow.org/v1alpha1`) with their
//!   shared spec/status core.
//!
//! The YAML under `crds/generated/` is rendered from these types by `cargo run -p kubeflow-crds
//! --bin crdgen`; a unit test fails when the committed YAML differs from what the types render.

pub mod bus;
pub mod common;
pub mod component;
pub mod crdgen;
pub mod fleet;
pub mod fleet_cluster;
pub mod kfdef;
pub mod kfupgrade;
pub mod profile;
pub mod validation;

pub use common::{Condition, ConditionStatus, NameValue};
pub use component::{
    ComponentKind, ComponentSpecCore, ComponentStatus, Dex, Istio, KFServing, Katib,
    ManagementState, Pipelines, ProfileController, KustomizeApplication,
};
pub use kfdef::KfDef;
pub use kfupgrade::KfUpgrade;

/// Whether `value` is its type's default (`skip_serializing_if` for fields most specs leave so).
pub fn is_default<T: Default + PartialEq>(value: &T) -> bool {
    *value == T::default()
}
