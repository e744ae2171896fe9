//! Profiles: Kubeflow multi-tenancy (KfDef application `profiles`).
//!
//! As a component ([`ProfilesComponent`]) it installs the Profile CRD (`profiles.kubeflow.org`,
//! retained on uninstall with every Profile), the aggregated ClusterRoles `kubeflow-admin|edit|view`
//! and its settings, from the one ProfileController that is the cluster's settings ([`settings`]).
//! Unlike the other components it ships no upstream controller: this operator
//! reconciles the Profiles itself ([`controller`]), with the object set built in [`tenant`] under
//! upstream's names, and serves a KFAM-compatible contributors API ([`kfam`]).

use component_framework::api::ProfileController;
use component_framework::k8s_openapi::api::rbac::v1::PolicyRule;
use component_framework::rbac::rule;
use component_framework::{Component, Endpoint, InvalidSpec, Inputs, Params, Release};
use serde_json::{Value, json};

pub mod bindings;
pub mod cloud;
pub mod controller;
pub mod kfam;
pub mod made;
pub mod rate;
pub mod registration;
pub mod settings;
pub mod tenant;

pub struct ProfilesComponent;

const TEMPLATE: &str = concat!(include_str!("../manifests/profiles.yaml"), "---\n", include_str!("../../../crds/generated/profiles.kubeflow.org.yaml"));

// Named after upstream's profile controller of the same Kubeflow releases (1.10 and 1.11 both
// ship v1.10.0): the Profile API this operator serves is that one's.
static RELEASES: [Release; 3] = [
    Release { version: "v1.2.0", manifest: TEMPLATE, params: &[], upgrades_from: &[], kubeflow: &["1.2"] },
    Release { version: "v1.3.0", manifest: TEMPLATE, params: &[], upgrades_from: &["v1.2.0"], kubeflow: &["1.3"] },
    Release { version: "v1.10.0", manifest: TEMPLATE, params: &[], upgrades_from: &["v1.3.0"], kubeflow: &["1.10", "1.11"] },
];

/// Service the operator's KFAM API is reached at, from the operators' namespace.
pub const KFAM_SERVICE: &str = "profiles-operator-kfam.kubeflow-operators.svc.cluster.local";
/// Port of the KFAM API, as upstream's `profiles-kfam` Service.
pub const KFAM_PORT: u16 = 8081;

/// The settings part of a ProfileController spec (everything but the component core).
pub fn settings_json(resource: &ProfileController) -> String {
    let mut value = serde_json::to_value(&resource.spec).expect("specs serialise");
    if let Some(map) = value.as_object_mut() {
        for core in ["version", "managementState", "targetNamespace", "overrides", "sources", "crdRemovalPolicy", "platform"] {
            map.remove(core);
        }
    }
    serde_json::to_string(&value).expect("JSON values serialise")
}

impl Component for ProfilesComponent {
    type Resource = ProfileController;
    const DEFAULT_NAMESPACE: &'static str = "kubeflow";
    const DISPLAY_NAME: &'static str = "Kubeflow Profiles";
    const INSTALLS: &'static str = "Kubeflow multi-tenancy: the Profile API, one namespace per user kept in shape, and a KFAM-compatible contributors API";

    const ENDPOINTS: &'static [Endpoint] = &[Endpoint { name: "kfam", port: KFAM_PORT, flag: "--kfam-addr" }];

    fn releases() -> &'static [Release] {
        &RELEASES
    }

    fn example_spec() -> Value {
        json!({"userIdHeader": "kubeflow-userid", "clusterAdmins": ["admin@example.com"]})
    }

    fn default_parameters() -> Params {
        Params::from([("settings".to_string(), "{}".to_string()), ("kfamService".to_string(), KFAM_SERVICE.to_string())])
    }

    fn parameters(resource: &ProfileController, _inputs: &Inputs) -> Result<Params, InvalidSpec> {
        // One ProfileController is the cluster's settings; any other installs nothing.
        if let Some(refusal) = settings::refusal(resource) {
            return Err(refusal);
        }
        tenant::validate_settings(&resource.spec)?;
        Ok(Params::from([("settings".to_string(), settings_json(resource))]))
    }

    fn extra_rules() -> Vec<PolicyRule> {
        let all = ["get", "list", "watch", "create", "patch", "update", "delete"];
        vec![
            rule("kubeflow.org", &["profiles"], &["get", "list", "watch", "create", "patch", "update", "delete"]),
            rule("kubeflow.org", &["profiles/status", "profiles/finalizers"], &["get", "patch", "update"]),
            // Tenant namespaces: created (a create, never an apply, so none is adopted), labelled
            // and annotated; removed by garbage collection when their Profile is deleted.
            rule("", &["namespaces"], &["get", "list", "watch", "create", "patch"]),
            // The KFAM API identifies its callers by their bearer tokens (TokenReview).
            rule("authentication.k8s.io", &["tokenreviews"], &["create"]),
            rule("", &["serviceaccounts", "resourcequotas", "limitranges"], &all),
            rule("rbac.authorization.k8s.io", &["rolebindings"], &all),
            // Tenants and contributors are bound to Kubeflow's roles, and to no other.
            PolicyRule {
                resource_names: Some([tenant::KUBEFLOW_ADMIN, tenant::KUBEFLOW_EDIT, tenant::KUBEFLOW_VIEW].map(String::from).into()),
                ..rule("rbac.authorization.k8s.io", &["clusterroles"], &["bind"])
            },
            rule("networking.k8s.io", &["networkpolicies"], &all),
            rule("security.istio.io", &["authorizationpolicies"], &all),
            rule("rbac.istio.io", &["serviceroles", "servicerolebindings"], &all),
            rule("maistra.io", &["servicemeshmembers"], &all),
        ]
    }
}
