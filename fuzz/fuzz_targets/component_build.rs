//! A component resource's spec as anyone who can write it (or a NATS message) may say it: the
//! first byte picks the component, the rest is the spec. Building the desired objects (validation,
//! parameters, overrides, rendering) answers with an error or objects, never a panic.
#![no_main]

use std::sync::LazyLock;

use kubeflow_component_registry::RegisteredComponent;
use libfuzzer_sys::fuzz_target;

static COMPONENTS: LazyLock<Vec<RegisteredComponent>> = LazyLock::new(kubeflow_component_registry::all);

fuzz_target!(|data: &[u8]| {
    let Some((pick, spec)) = data.split_first() else { return };
    let component = &COMPONENTS[usize::from(*pick) % COMPONENTS.len()];
    let Ok(spec) = serde_json::from_slice::<serde_json::Value>(spec) else { return };
    let _ = (component.render)(&spec, "fuzz");
});
