//! A KfDef as a user may write it: decoded, then split into component specs (pins annotation
//! included) and its status computed. Nothing may panic, whatever the spec says.
#![no_main]

#[path = "fixtures.rs"]
mod fixtures;

use std::sync::LazyLock;

use kubeflow_crds::component::Platform;
use kubeflow_crds::kfdef::KfDef;
use libfuzzer_sys::fuzz_target;
use meta_operator::catalog::Catalog;

static CATALOG: LazyLock<Catalog> = LazyLock::new(fixtures::catalog);

fuzz_target!(|data: &[u8]| {
    let Some(kfdef) = fixtures::decode::<KfDef>(data) else { return };
    for platform in [Platform::Kubernetes, Platform::OpenShift] {
        let _ = meta_operator::plan::plan(&kfdef, platform, &CATALOG);
    }
});
