//! A KfUpgrade as a user may write it, validated against a KfDef at Kubeflow 1.2: every refusal
//! must be an answer, never a panic.
#![no_main]

#[path = "fixtures.rs"]
mod fixtures;

use std::collections::BTreeMap;
use std::sync::LazyLock;

use kubeflow_crds::component::ComponentKind;
use kubeflow_crds::kfupgrade::KfUpgrade;
use libfuzzer_sys::fuzz_target;
use meta_operator::catalog::Catalog;

static CATALOG: LazyLock<Catalog> = LazyLock::new(fixtures::catalog);
/// The versions a KfDef at Kubeflow 1.2 runs.
static CURRENT: LazyLock<BTreeMap<ComponentKind, String>> =
    LazyLock::new(|| kubeflow_component_registry::all().iter().filter_map(|c| Some((c.kind, c.version_for("1.2")?.to_string()))).collect());

fuzz_target!(|data: &[u8]| {
    let Some(upgrade) = fixtures::decode::<KfUpgrade>(data) else { return };
    let _ = meta_operator::upgrade::steps(&upgrade.spec, &CURRENT, &[], &CATALOG);
});
