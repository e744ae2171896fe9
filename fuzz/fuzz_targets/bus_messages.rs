//! What arrives over NATS: keys and values of the desired, status and operators buckets. Decoding
//! answers with a value or an error, and a heartbeat's releases are learned without a panic.
#![no_main]

use kubeflow_crds::bus::{self, DesiredComponent, Heartbeat, StatusReport};
use libfuzzer_sys::fuzz_target;
use meta_operator::catalog::Catalog;

fuzz_target!(|data: &[u8]| {
    if let Ok(key) = std::str::from_utf8(data) {
        let _ = bus::parse_key(key);
    }
    let _ = serde_json::from_slice::<DesiredComponent>(data);
    let _ = serde_json::from_slice::<StatusReport>(data);
    if let Ok(beat) = serde_json::from_slice::<Heartbeat>(data) {
        let mut catalog = Catalog::default();
        if let Some(component) = beat.component {
            catalog.learn(component, beat.releases);
        }
    }
});
