//! The meta-operator's logic as a library: the pure steps ([`catalog`] of announced component
//! releases, [`plan`] of a KfDef, [`aggregate`] status, [`upgrade`] decisions, [`fleet`]
//! placement, [`waves`] of a fleet upgrade) and the controllers that drive them ([`controller`], [`upgrade_controller`],
//! [`fleet_controller`], [`wave_controller`]); and [`nats_exporter`], the bus server's metrics sidecar; [`monitoring`], deploy/monitoring's objects where OLM installed the operators.

pub mod aggregate;
pub mod catalog;
pub mod controller;
pub mod fleet;
pub mod fleet_controller;
pub mod monitoring;
pub mod nats_exporter;
pub mod plan;
pub mod provision;
pub mod publish;
pub mod release_notes;
pub mod upgrade;
pub mod upgrade_controller;
pub mod wave_controller;
pub mod waves;
