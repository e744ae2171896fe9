//! The Katib operator with two releases the upgrade tests need and production must not ship:
//! v0.12.0, healthy but reachable only from v0.11.0, and v0.13.0-unready, whose controller can
//! never be scheduled (it asks for a node OS no node has). Both render v0.11.0's template and sit
//! right after v0.11.0, before the shipped newer releases: releases stay oldest first, since their
//! order decides what is a downgrade. Everything else is Katib's. The meta-operator learns these
//! releases from the heartbeat like any others.

use std::sync::LazyLock;

use component_framework::api::Katib;
use component_framework::api::component::SecretKeyRef;
use component_framework::{Component, InvalidSpec, Inputs, Params, Release};
use katib_operator::KatibComponent;
use serde_json::Value;

struct KatibWithTestReleases;

const V0_11_TRIAL_RESOURCES: &str = "Job.v1.batch,TFJob.v1.kubeflow.org,PyTorchJob.v1.kubeflow.org,MPIJob.v1.kubeflow.org,XGBoostJob.v1.kubeflow.org";

static RELEASES: LazyLock<Vec<Release>> = LazyLock::new(|| {
    let shipped = KatibComponent::releases();
    let v0_11 = shipped.iter().position(|r| r.version == "v0.11.0").expect("Katib ships v0.11.0");
    let manifest = shipped[v0_11].manifest;
    let test_releases = [
        Release {
            version: "v0.12.0",
            manifest,
            params: &[("uiSelectorKey", "katib.kubeflow.org/component"), ("trialResources", V0_11_TRIAL_RESOURCES)],
            upgrades_from: &["v0.11.0"],
            kubeflow: &[],
        },
        Release {
            version: "v0.13.0-unready",
            manifest,
            params: &[("uiSelectorKey", "katib.kubeflow.org/component"), ("trialResources", "Job.v1.batch"), ("controllerNodeOs", "no-such-os")],
            upgrades_from: &["v0.10.0", "v0.11.0", "v0.12.0"],
            kubeflow: &[],
        },
    ];
    let mut all = shipped.to_vec();
    all.splice(v0_11 + 1..v0_11 + 1, test_releases);
    all
});

impl Component for KatibWithTestReleases {
    type Resource = Katib;
    const DEFAULT_NAMESPACE: &'static str = KatibComponent::DEFAULT_NAMESPACE;
    const DISPLAY_NAME: &'static str = KatibComponent::DISPLAY_NAME;
    const INSTALLS: &'static str = KatibComponent::INSTALLS;
    // The same command line as katib-operator's (the stacks pass it the fetch options).
    const RENDERS_PACKAGES: bool = KatibComponent::RENDERS_PACKAGES;
    const PACKAGE_FIELDS: &'static [&'static str] = KatibComponent::PACKAGE_FIELDS;

    fn releases() -> &'static [Release] {
        &RELEASES
    }
    fn secret_refs(resource: &Katib) -> Vec<(String, SecretKeyRef)> {
        KatibComponent::secret_refs(resource)
    }
    fn default_parameters() -> Params {
        KatibComponent::default_parameters()
    }
    fn parameters(resource: &Katib, inputs: &Inputs) -> Result<Params, InvalidSpec> {
        KatibComponent::parameters(resource, inputs)
    }
    fn customize(resource: &Katib, inputs: &Inputs, objects: &mut Vec<Value>) -> Result<(), InvalidSpec> {
        KatibComponent::customize(resource, inputs, objects)
    }
    fn example_spec() -> Value {
        KatibComponent::example_spec()
    }
    fn test_spec() -> Value {
        KatibComponent::test_spec()
    }
}

fn main() -> std::process::ExitCode {
    component_framework::main::<KatibWithTestReleases>()
}
