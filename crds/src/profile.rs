//! Kubeflow's `Profile` (`kubeflow.org`, cluster-scoped): one tenant namespace per profile, kept in
//! shape by the profiles component operator. The field names and shapes are upstream's, so
//! Profiles created for the upstream profile controller (and the clients that create them: the
//! dashboard's registration flow, KFAM) work unchanged. `v1` is stored; `v1beta1` is served with
//! the same schema (the two upstream versions differ only in name).

use k8s_openapi::api::core::v1::ResourceQuotaSpec;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{CustomResourceDefinition, ValidationRule};
use kube::CustomResourceExt;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::common::Condition;

pub const GROUP: &str = "kubeflow.org";
/// Name of the Profile CRD.
pub const CRD_NAME: &str = "profiles.kubeflow.org";

/// The profile's owner: an RBAC subject (`User`, `Group` or `ServiceAccount`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Owner {
    pub kind: String,
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_group: Option<String>,
    /// Namespace of a `ServiceAccount` owner.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}

/// A platform plugin (`WorkloadIdentity`, `AwsIamForServiceAccount`) with its settings.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Plugin {
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::common::free_form_object")]
    pub spec: Option<serde_json::Value>,
}

/// Status the profiles operator reports.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProfileStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Ready`; when it is `False`, the reason and a message naming the field or object at fault.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

pub mod v1 {
    use super::*;

    /// A Kubeflow tenant: a namespace named after the profile, owned by `spec.owner`.
    #[derive(kube::CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
    #[kube(
        group = "kubeflow.org", version = "v1", kind = "Profile", plural = "profiles", status = "ProfileStatus",
        printcolumn = r#"{"name":"Owner","type":"string","jsonPath":".spec.owner.name"}"#,
        printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
        printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
    )]
    #[serde(rename_all = "camelCase")]
    pub struct ProfileSpec {
        pub owner: Owner,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        pub plugins: Vec<Plugin>,
        /// Quota of the profile's namespace; the ResourceQuota `kf-resource-quota` exists only
        /// while `hard` is not empty.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub resource_quota_spec: Option<ResourceQuotaSpec>,
    }
}

pub mod v1beta1 {
    use super::*;

    /// `v1beta1` of [`super::v1::Profile`], served with the same fields.
    #[derive(kube::CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
    #[kube(group = "kubeflow.org", version = "v1beta1", kind = "Profile", plural = "profiles", status = "ProfileStatus")]
    #[serde(rename_all = "camelCase")]
    pub struct ProfileSpec {
        pub owner: Owner,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        pub plugins: Vec<Plugin>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub resource_quota_spec: Option<ResourceQuotaSpec>,
    }
}

pub use v1::{Profile, ProfileSpec};

/// The Profile CRD: cluster-scoped, `v1` stored, `v1beta1` served (no conversion needed: same
/// schema).
pub fn crd() -> CustomResourceDefinition {
    let mut crd = kube::core::crd::merge_crds(vec![v1::Profile::crd(), v1beta1::Profile::crd()], "v1").expect("both Profile versions share names and scope");
    // Upstream's Profile is cluster-scoped; kube-derive makes a CRD namespaced unless told otherwise.
    crd.spec.scope = "Cluster".into();
    // A Profile's namespace is named after it: none of the cluster's or Kubeflow's own.
    let rule = ValidationRule {
        rule: crate::validation::profile_name_rule(),
        message: Some(format!(
            "metadata.name: a Profile's namespace is named after it, so it may not be a system or platform namespace; reserved: {}",
            crate::validation::RESERVED_PROFILE_NAMES.join(", ")
        )),
        ..Default::default()
    };
    for version in &mut crd.spec.versions {
        let schema = version.schema.as_mut().and_then(|s| s.open_api_v3_schema.as_mut()).expect("kube-derive writes a schema");
        schema.x_kubernetes_validations.get_or_insert_with(Vec::new).push(rule.clone());
    }
    crd
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_crd_is_cluster_scoped_with_v1_stored_and_v1beta1_served() {
        let crd = crd();
        assert_eq!(crd.metadata.name.as_deref(), Some(CRD_NAME));
        assert_eq!(crd.spec.scope, "Cluster");
        let versions: Vec<(&str, bool, bool)> = crd.spec.versions.iter().map(|v| (v.name.as_str(), v.served, v.storage)).collect();
        assert_eq!(versions, [("v1", true, true), ("v1beta1", true, false)]);
    }

    #[test]
    fn an_upstream_profile_decodes() {
        let profile: Profile = serde_json::from_value(serde_json::json!({
            "apiVersion": "kubeflow.org/v1", "kind": "Profile", "metadata": {"name": "alice"},
            "spec": {
                "owner": {"kind": "User", "name": "alice@example.com"},
                "resourceQuotaSpec": {"hard": {"cpu": "2", "requests.nvidia.com/gpu": "1"}},
                "plugins": [{"kind": "WorkloadIdentity", "spec": {"gcpServiceAccount": "alice@project.iam.gserviceaccount.com"}}],
            },
        }))
        .unwrap();
        assert_eq!(profile.spec.owner.name, "alice@example.com");
        assert_eq!(profile.spec.plugins[0].spec.as_ref().unwrap()["gcpServiceAccount"], "alice@project.iam.gserviceaccount.com");
        assert_eq!(profile.spec.resource_quota_spec.unwrap().hard.unwrap()["cpu"].0, "2");
    }
}
