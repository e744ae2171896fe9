//! `FleetCluster` (`fleet.kubeflow.org/v1alpha1`, cluster-scoped): a spoke cluster registered on
//! the hub ([`crate::fleet`]), and the placement of a KfDef on registered clusters.
//!
//! The registration is the hub admin's grant: its name is the cluster's name (its JetStream
//! domain and bucket names), its public key the only credential the hub's leaf port accepts for
//! it, and `kfdefNamespaces` the hub namespaces whose KfDefs may be placed on it. Its labels are
//! what a placement's `clusterSelector` selects.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, Time};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::common::Condition;
use crate::component::Platform;
use crate::kfdef::ComponentSummary;

/// A spoke cluster, registered on the hub.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "fleet.kubeflow.org",
    version = "v1alpha1",
    kind = "FleetCluster",
    plural = "fleetclusters",
    singular = "fleetcluster",
    category = "kubeflow",
    status = "FleetClusterStatus",
    printcolumn = r#"{"name":"Connected","type":"string","jsonPath":".status.conditions[?(@.type==\"Connected\")].status"}"#,
    printcolumn = r#"{"name":"Last heard","type":"date","jsonPath":".status.lastHeard"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct FleetClusterSpec {
    /// The public NKey (a user key: `U` and 55 base32 characters) the cluster's leaf connection
    /// logs in with; its seed stays on the spoke.
    #[schemars(regex(pattern = r"^U[A-Z2-7]{55}$"))]
    pub public_key: String,
    /// Hub namespaces whose KfDefs may be placed on this cluster. A KfDef elsewhere that selects it
    /// is told so and installs nothing there.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 256), inner(regex(pattern = crate::validation::DNS_LABEL), length(min = 1, max = 63)))]
    pub kfdef_namespaces: Vec<String>,
    /// The cluster's Kubernetes distribution, which the components' specs are made for.
    #[serde(default, skip_serializing_if = "crate::is_default")]
    pub platform: Platform,
}

impl FleetCluster {
    /// The hub's leaf user for this registration: the cluster's name, checked, and its public
    /// key. The hub's server configuration is made from these, and so each cluster's permissions
    /// ([`crate::fleet::leaf_permissions`]).
    pub fn leaf_user(&self) -> Result<(crate::fleet::ClusterName, String), String> {
        let name = self.metadata.name.as_deref().unwrap_or_default();
        let cluster = name.parse().map_err(|e| format!("metadata.name: {e}"))?;
        let key = &self.spec.public_key;
        let base32 = |c: char| c.is_ascii_uppercase() || ('2'..='7').contains(&c);
        if key.len() != 56 || !key.starts_with('U') || !key.chars().all(base32) {
            return Err(format!("spec.publicKey: {key:?} is not an NKey user public key; allowed: 'U' and 55 base32 characters (A-Z, 2-7)"));
        }
        Ok((cluster, key.clone()))
    }
}

/// What the hub last heard from a cluster.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FleetClusterStatus {
    /// `Connected`: its agent's heartbeat is recent (True), late (False, `Stale`) or was never
    /// heard (False, `NeverHeard`); `Registered`: whether the name and key are usable.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
    /// When its agent's last heartbeat was sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_heard: Option<Time>,
    /// Its agent's version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_version: Option<String>,
    /// Its component operators whose heartbeat is recent, with their versions.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub operators: BTreeMap<String, String>,
}

/// Where a KfDef is installed: on the registered clusters named in `clusters` and those whose
/// labels `clusterSelector` matches. Without a placement, a KfDef is installed on the cluster it
/// is applied to, as a single cluster always is.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{"rule": "has(self.clusters) || has(self.clusterSelector)", "message": "a placement names clusters, selects them by label, or both"}]))]
pub struct Placement {
    /// Registered clusters, by name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 256), inner(regex(pattern = crate::validation::DNS_LABEL), length(min = 1, max = 63)))]
    pub clusters: Vec<String>,
    /// Registered clusters, by label (`{}` selects every one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_selector: Option<LabelSelector>,
}

/// How a placed KfDef stands on one cluster.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, JsonSchema)]
pub enum ClusterState {
    /// Every component reported ready at the desired version.
    Available,
    Progressing,
    Degraded,
    /// Nothing heard from the cluster's agent recently: the state shown is the last one known.
    Stale,
    /// Named in the placement but not registered.
    NotRegistered,
    /// The registration does not list the KfDef's namespace in `kfdefNamespaces`.
    NotAllowed,
}

/// A placed KfDef on one cluster, as the cluster reported it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterPlacementStatus {
    pub name: String,
    pub state: ClusterState,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// When the cluster's agent was last heard from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_heard: Option<Time>,
    /// One entry per component, as on a single cluster's KfDef.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub components: BTreeMap<String, ComponentSummary>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_registration_gives_the_hub_a_leaf_user_only_with_a_cluster_name_and_a_user_key() {
        let key = format!("U{}", "A".repeat(55));
        let registration = |name: &str, key: &str| FleetCluster::new(name, FleetClusterSpec { public_key: key.into(), ..Default::default() });
        assert_eq!(registration("eu-1", &key).leaf_user(), Ok(("eu-1".parse().unwrap(), key.clone())));
        assert!(registration("hub", &key).leaf_user().unwrap_err().starts_with("metadata.name: \"hub\" is the hub's JetStream domain"));
        let seed_like = format!("S{}", "A".repeat(55));
        for bad in [seed_like.as_str(), "U1", &format!("U{}", "a".repeat(55))] {
            assert!(registration("eu-1", bad).leaf_user().unwrap_err().starts_with("spec.publicKey: "), "{bad}");
        }
    }
}
