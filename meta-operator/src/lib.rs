//! The meta-operator's logic as a library: the pure KfDef → component plan steps
//! ([`distribution`], [`plan`], [`aggregate`], [`upgrade`]) and the controllers that drive them.
//! The bundle generator reads [`distribution`] for the Kubeflow releases each version supports.

pub mod aggregate;
pub mod controller;
pub mod distribution;
pub mod plan;
pub mod upgrade;
pub mod upgrade_controller;
