//! Unit tests of the API types: kfctl KfDefs survive a round trip through the types, defaults are
//! what the docs say, and the committed CRD YAML matches what the types render.

use std::path::PathBuf;

use kubeflow_crds::component::{ComponentKind, CrdRemovalPolicy, ManagementState};
use kubeflow_crds::{Katib, KfDef, KfUpgrade, crdgen};
use serde_json::Value;

fn example(name: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples").join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

/// Parses `yaml` as untyped JSON and as a typed KfDef, and returns (original, typed re-serialised).
fn round_trip(yaml: &str) -> (Value, Value) {
    let original: Value = serde_yaml_ng::from_str(yaml).expect("fixture is YAML");
    let typed: KfDef = serde_yaml_ng::from_str(yaml).expect("fixture deserialises into KfDef");
    (original, serde_json::to_value(&typed).expect("KfDef serialises"))
}

#[test]
fn kfctl_istio_dex_kfdef_round_trips_without_losing_fields() {
    let (original, typed) = round_trip(&example("kfdef-kfctl-istio-dex.yaml"));
    assert_eq!(original["spec"], typed["spec"]);
    assert_eq!(original["metadata"], typed["metadata"]);
    let apps = typed["spec"]["applications"].as_array().unwrap();
    assert!(apps.len() >= 40, "fixture has {} applications", apps.len());
    let istio = apps.iter().find(|a| a["name"] == "istio").unwrap();
    assert_eq!(istio["kustomizeConfig"]["parameters"][0]["value"], "ON");
    let ui = apps.iter().find(|a| a["name"] == "pipelines-ui").unwrap();
    assert_eq!(ui["kustomizeConfig"]["overlays"], serde_json::json!(["istio", "application"]));
}

#[test]
fn kfctl_kfdef_with_plugins_and_secrets_round_trips_without_losing_fields() {
    let (original, typed) = round_trip(&example("kfdef-kfctl-gcp.yaml"));
    assert_eq!(original["spec"], typed["spec"]);
    // The plugin's free-form spec, including nested objects and a null, is kept as written.
    assert_eq!(typed["spec"]["plugins"][0]["metadata"]["creationTimestamp"], Value::Null);
    assert_eq!(typed["spec"]["plugins"][0]["spec"]["deploymentManagerConfig"]["repoRef"]["name"], "manifests");
    assert_eq!(typed["spec"]["secrets"][0]["secretSource"]["envSource"]["name"], "KUBEFLOW_PASSWORD");
    assert_eq!(typed["spec"]["secrets"][1]["secretSource"]["literalSource"]["value"], "s3cr3t");
}

#[test]
fn every_example_kfdef_round_trips() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples");
    let mut seen = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if !name.starts_with("kfdef-") {
            continue;
        }
        let (original, typed) = round_trip(&std::fs::read_to_string(&path).unwrap());
        assert_eq!(original["spec"], typed["spec"], "{name}");
        seen += 1;
    }
    assert!(seen >= 2, "expected at least two example KfDefs, found {seen}");
}

#[test]
fn component_spec_defaults_to_managed_and_retains_crds() {
    let katib: Katib = serde_yaml_ng::from_str(
        "apiVersion: components.kubeflow.org/v1alpha1\nkind: Katib\nmetadata: {name: katib}\nspec: {version: v0.11.0}\n",
    )
    .unwrap();
    assert_eq!(katib.spec.core.management_state, ManagementState::Managed);
    assert_eq!(katib.spec.core.crd_removal_policy, CrdRemovalPolicy::Retain);
    assert_eq!(katib.spec.core.version, "v0.11.0");
}

#[test]
fn kfupgrade_accepts_kfctl_fields_and_defaults_rollback_on() {
    let upgrade: KfUpgrade = serde_yaml_ng::from_str(
        "apiVersion: kfupgrade.apps.kubeflow.org/v1alpha1\nkind: KfUpgrade\nmetadata: {name: up}\n\
         spec:\n  currentKfDef: {name: kubeflow, version: v1.0.0}\n  newKfDef: {name: kubeflow, version: v1.0.2}\n  baseConfigPath: kfctl.yaml\n",
    )
    .unwrap();
    assert!(upgrade.spec.rollback_on_failure);
    assert_eq!(upgrade.spec.health_timeout_seconds, 600);
    assert_eq!(upgrade.spec.new_kf_def.version.as_deref(), Some("v1.0.2"));
    assert_eq!(upgrade.spec.base_config_path.as_deref(), Some("kfctl.yaml"));
}

#[test]
fn component_kind_parses_names_and_kinds_and_rejects_others() {
    for kind in ComponentKind::ALL {
        assert_eq!(kind.name().parse::<ComponentKind>().unwrap(), kind);
        assert_eq!(kind.kind().parse::<ComponentKind>().unwrap(), kind);
    }
    let err = "seldon".parse::<ComponentKind>().unwrap_err().to_string();
    assert!(err.contains("seldon") && err.contains("katib"), "{err}");
}

#[test]
fn committed_crd_yaml_matches_the_types() {
    // Fails when someone changes a type without running crdgen (or edits the YAML by hand).
    crdgen::check_all(&crdgen::generated_dir()).unwrap();
}

#[test]
fn crds_have_printer_columns_and_status_subresource() {
    for crd in crdgen::all_crds() {
        let name = crd.metadata.name.clone().unwrap();
        let version = &crd.spec.versions[0];
        let columns: Vec<_> = version.additional_printer_columns.iter().flatten().map(|c| c.name.as_str()).collect();
        // A registration has no phase: whether its cluster is connected is its state.
        let state = if crd.spec.names.kind == "FleetCluster" { "Connected" } else { "Phase" };
        assert!(columns.contains(&"Age") && columns.contains(&state), "{name}: {columns:?}");
        assert!(version.subresources.as_ref().and_then(|s| s.status.as_ref()).is_some(), "{name}");
    }
}
