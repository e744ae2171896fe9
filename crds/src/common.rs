//! Types shared by every API in this crate.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A name/value pair, as kfctl uses for kustomize parameters.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct NameValue {
    /// Parameter name.
    #[schemars(length(min = 1, max = 253), regex(pattern = crate::validation::PARAMETER_NAME))]
    pub name: String,
    /// Parameter value: one line (it becomes a `params.env` line).
    #[serde(default)]
    #[schemars(length(max = crate::validation::PARAMETER_VALUE_MAX_LENGTH), regex(pattern = crate::validation::ONE_LINE))]
    pub value: String,
}

/// Status of a condition: `True`, `False` or `Unknown`.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum ConditionStatus {
    True,
    False,
    #[default]
    Unknown,
}

impl From<bool> for ConditionStatus {
    fn from(value: bool) -> Self {
        if value { Self::True } else { Self::False }
    }
}

/// One observation of a resource's state. The shape of `metav1.Condition` plus kfctl's
/// `lastUpdateTime`, so kfctl tooling that reads KfDef conditions keeps working.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    /// Condition type, e.g. `Ready`, `Available`, `Progressing`, `Degraded`.
    #[serde(rename = "type")]
    pub type_: String,
    pub status: ConditionStatus,
    /// The `metadata.generation` of the resource this condition was computed for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Machine-readable CamelCase reason for the last transition.
    #[serde(default)]
    pub reason: String,
    /// Human-readable explanation: for failures, which field is wrong and what is allowed.
    #[serde(default)]
    pub message: String,
    /// When `status` last changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<Time>,
    /// When the condition was last written (kfctl compatibility).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_update_time: Option<Time>,
}

impl Condition {
    /// Whether the condition of type `type_` in `conditions` is `True`.
    pub fn is_true(conditions: &[Condition], type_: &str) -> bool {
        conditions
            .iter()
            .any(|c| c.type_ == type_ && c.status == ConditionStatus::True)
    }
}

/// Schema of a field kept as written: any JSON object, unknown fields preserved.
pub fn free_form_object(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true,
    })
}
