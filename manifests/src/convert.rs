//! Conversion of API versions Kubernetes no longer serves, applied to every rendered object.
//!
//! kfctl-era packages (Kubeflow 0.x–1.2) render `apiextensions.k8s.io/v1beta1` CRDs,
//! `rbac.authorization.k8s.io/v1beta1` roles, `extensions/v1beta1` Deployments and the like; every
//! supported cluster refuses them (most were removed in 1.22, the rest by 1.26). Each object of a
//! removed version is rewritten to the version that replaced it, keeping what the old version
//! meant: the defaults the old version applied and the new one would apply differently are
//! written out (a webhook's `failurePolicy: Ignore`, a workload's selector from its template's
//! labels), and a CRD keeps every field of its custom resources (the pruning v1 would start is
//! turned off with `x-kubernetes-preserve-unknown-fields`).
//!
//! An object whose meaning the new version cannot keep is [`Unconvertible`], with the reason: a
//! PodSecurityPolicy (removed without a successor), a PodDisruptionBudget with an empty selector
//! (no pods in `policy/v1beta1`, every pod of the namespace in `policy/v1`), a webhook with
//! `sideEffects: Some`, a workload with neither selector nor template labels.
//!
//! Where the old version's default is not kept, on purpose: workloads take `apps/v1`'s update
//! defaults (rolling updates, 25 % surge, ten revisions) rather than `extensions/v1beta1`'s
//! (`OnDelete` DaemonSets, unbounded history), because an operator that upgrades them needs them
//! to roll; a webhook with `sideEffects` unset or `Unknown` becomes `None` (`v1` has no
//! `Unknown`), which lets dry-run requests reach it — noted in the conversion.
//!
//! Pure: no cluster, no I/O. [`convert_objects`] converts a render; [`summarise`] counts the
//! conversions per kind for a status.

use std::collections::BTreeMap;

pub use kubeflow_crds::component::ConvertedKind;
use serde_json::{Map, Value, json};

/// One object rewritten to a served version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conversion {
    pub kind: String,
    /// `namespace/name`, or `name` for cluster-scoped objects.
    pub object: String,
    pub from: String,
    pub to: String,
    /// What changed besides the version, when something did (fields moved, defaults written out).
    pub notes: Vec<String>,
}

impl std::fmt::Display for Conversion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}: {} → {}", self.kind, self.object, self.from, self.to)?;
        if !self.notes.is_empty() {
            write!(f, " ({})", self.notes.join("; "))?;
        }
        Ok(())
    }
}

/// An object of a removed version that cannot be rewritten without changing what it does.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{kind} {object} ({api_version}) is not converted: {reason}")]
pub struct Unconvertible {
    pub kind: String,
    pub object: String,
    pub api_version: String,
    pub reason: String,
}

/// Converts every object of a removed version in `objects`; the others pass unchanged. Stops at
/// the first object that cannot be converted.
pub fn convert_objects(objects: Vec<Value>) -> Result<(Vec<Value>, Vec<Conversion>), Unconvertible> {
    let mut conversions = Vec::new();
    let mut out = Vec::with_capacity(objects.len());
    for object in objects {
        let (object, conversion) = convert(object)?;
        conversions.extend(conversion);
        out.push(object);
    }
    Ok((out, conversions))
}

/// The conversions counted per `(kind, from, to)`, in that order.
pub fn summarise(conversions: &[Conversion]) -> Vec<ConvertedKind> {
    let mut counts: BTreeMap<(&str, &str, &str), u32> = BTreeMap::new();
    for c in conversions {
        *counts.entry((&c.kind, &c.from, &c.to)).or_default() += 1;
    }
    counts.into_iter().map(|((kind, from, to), count)| ConvertedKind { kind: kind.into(), from: from.into(), to: to.into(), count }).collect()
}

/// What a removed `(apiVersion, kind)` becomes, and how.
enum Rule {
    /// The same fields under the new version.
    Rename(&'static str),
    Crd,
    Webhooks,
    Workload,
    Ingress,
    DisruptionBudget,
    Autoscaler,
    Refuse(&'static str),
}

fn rule(api_version: &str, kind: &str) -> Option<Rule> {
    use Rule::*;
    Some(match (api_version, kind) {
        ("apiextensions.k8s.io/v1beta1", "CustomResourceDefinition") => Crd,
        ("rbac.authorization.k8s.io/v1beta1", "Role" | "ClusterRole" | "RoleBinding" | "ClusterRoleBinding") => Rename("rbac.authorization.k8s.io/v1"),
        ("admissionregistration.k8s.io/v1beta1", "MutatingWebhookConfiguration" | "ValidatingWebhookConfiguration") => Webhooks,
        ("apps/v1beta1" | "apps/v1beta2", "Deployment" | "StatefulSet" | "DaemonSet" | "ReplicaSet") | ("extensions/v1beta1", "Deployment" | "DaemonSet" | "ReplicaSet") => Workload,
        ("extensions/v1beta1" | "networking.k8s.io/v1beta1", "Ingress") => Ingress,
        ("networking.k8s.io/v1beta1", "IngressClass") => Rename("networking.k8s.io/v1"),
        ("extensions/v1beta1", "NetworkPolicy") => Rename("networking.k8s.io/v1"),
        ("policy/v1beta1", "PodDisruptionBudget") => DisruptionBudget,
        ("extensions/v1beta1" | "policy/v1beta1", "PodSecurityPolicy") => {
            Refuse("PodSecurityPolicy was removed in Kubernetes 1.25 without a successor kind; Pod Security admission (namespace labels) replaces it")
        }
        ("batch/v1beta1", "CronJob") => Rename("batch/v1"),
        ("scheduling.k8s.io/v1beta1", "PriorityClass") => Rename("scheduling.k8s.io/v1"),
        ("apiregistration.k8s.io/v1beta1", "APIService") => Rename("apiregistration.k8s.io/v1"),
        ("autoscaling/v2beta1" | "autoscaling/v2beta2", "HorizontalPodAutoscaler") => Autoscaler,
        ("storage.k8s.io/v1beta1", "StorageClass" | "CSIDriver" | "CSINode" | "VolumeAttachment") => Rename("storage.k8s.io/v1"),
        ("coordination.k8s.io/v1beta1", "Lease") => Rename("coordination.k8s.io/v1"),
        ("node.k8s.io/v1beta1", "RuntimeClass") => Rename("node.k8s.io/v1"),
        _ => return None,
    })
}

/// Converts one object; `None` when its version is served (or unknown: a custom resource).
pub fn convert(mut object: Value) -> Result<(Value, Option<Conversion>), Unconvertible> {
    let api_version = object["apiVersion"].as_str().unwrap_or_default().to_string();
    let kind = object["kind"].as_str().unwrap_or_default().to_string();
    let Some(rule) = rule(&api_version, &kind) else {
        return Ok((object, None));
    };
    let name = object["metadata"]["name"].as_str().unwrap_or_default();
    let id = match object["metadata"]["namespace"].as_str() {
        Some(namespace) => format!("{namespace}/{name}"),
        None => name.to_string(),
    };
    let refuse = |reason: String| Unconvertible { kind: kind.clone(), object: id.clone(), api_version: api_version.clone(), reason };
    let mut notes = Vec::new();
    let to = match rule {
        Rule::Rename(to) => to,
        Rule::Refuse(reason) => return Err(refuse(reason.into())),
        Rule::Crd => {
            crd(&mut object["spec"], &mut notes);
            approval(&mut object, &mut notes);
            "apiextensions.k8s.io/v1"
        }
        Rule::Webhooks => {
            webhooks(&mut object, &mut notes).map_err(refuse)?;
            "admissionregistration.k8s.io/v1"
        }
        Rule::Workload => {
            workload(&mut object["spec"], &mut notes).map_err(refuse)?;
            "apps/v1"
        }
        Rule::Ingress => {
            ingress(&mut object["spec"], &mut notes);
            "networking.k8s.io/v1"
        }
        Rule::DisruptionBudget => {
            let selector = &object["spec"]["selector"];
            let empty = |field: &str| selector[field].as_object().is_none_or(Map::is_empty) && selector[field].as_array().is_none_or(Vec::is_empty);
            if empty("matchLabels") && empty("matchExpressions") {
                return Err(refuse("its selector is empty, which selects no pods in policy/v1beta1 and every pod of the namespace in policy/v1".into()));
            }
            "policy/v1"
        }
        Rule::Autoscaler => {
            if api_version == "autoscaling/v2beta1" {
                autoscaler_metrics(&mut object["spec"], &mut notes).map_err(refuse)?;
            }
            "autoscaling/v2"
        }
    };
    object["apiVersion"] = json!(to);
    let conversion = Conversion { kind: kind.clone(), object: id.clone(), from: api_version.clone(), to: to.into(), notes };
    Ok((object, Some(conversion)))
}

/// The items of the list at JSON pointer `path` in `value`, if there is one (indexing with `[]`
/// would insert what is missing).
fn items_mut<'a>(value: &'a mut Value, path: &str) -> impl Iterator<Item = &'a mut Value> {
    value.pointer_mut(path).and_then(Value::as_array_mut).into_iter().flatten()
}

/// Removes `key` from `value` (an object) and returns it.
fn take(value: &mut Value, key: &str) -> Option<Value> {
    value.as_object_mut().and_then(|m| m.remove(key))
}

/// `apiextensions.k8s.io/v1beta1` → `v1`: the CRD-wide `version`, `validation`,
/// `additionalPrinterColumns` and `subresources` move into each version (a version's own stay);
/// columns' `JSONPath` becomes `jsonPath`; schemas become structural; the conversion webhook moves
/// under `webhook`; `preserveUnknownFields` (true unless set false in v1beta1) becomes the marker.
fn crd(spec: &mut Value, notes: &mut Vec<String>) {
    let version = take(spec, "version");
    let validation = take(spec, "validation");
    let columns = take(spec, "additionalPrinterColumns");
    let subresources = take(spec, "subresources");
    let preserve_unknown = take(spec, "preserveUnknownFields").and_then(|v| v.as_bool()).unwrap_or(true);
    if spec["scope"].is_null() {
        spec["scope"] = json!("Namespaced");
    }
    if spec["versions"].as_array().is_none_or(Vec::is_empty) {
        spec["versions"] = json!([{"name": version.unwrap_or(Value::Null), "served": true, "storage": true}]);
    }
    let shared_schema = validation.and_then(|mut v| take(&mut v, "openAPIV3Schema"));
    let mut moved = Vec::new();
    if shared_schema.is_some() {
        moved.push("validation");
    }
    if columns.is_some() {
        moved.push("additionalPrinterColumns");
    }
    if subresources.is_some() {
        moved.push("subresources");
    }
    if !moved.is_empty() {
        notes.push(format!("{} moved into each version", moved.join(", ")));
    }
    let mut made_structural = 0;
    for version in items_mut(spec, "/versions") {
        let own = take(version, "schema").and_then(|mut s| take(&mut s, "openAPIV3Schema"));
        let mut schema = own.or_else(|| shared_schema.clone()).unwrap_or_else(|| json!({"type": "object"}));
        made_structural += structural(&mut schema, true, preserve_unknown);
        version["schema"] = json!({"openAPIV3Schema": schema});
        if version["additionalPrinterColumns"].is_null()
            && let Some(columns) = &columns
        {
            version["additionalPrinterColumns"] = columns.clone();
        }
        for column in items_mut(version, "/additionalPrinterColumns") {
            if let Some(path) = take(column, "JSONPath") {
                column["jsonPath"] = path;
            }
        }
        if version["subresources"].is_null()
            && let Some(subresources) = &subresources
        {
            version["subresources"] = subresources.clone();
        }
    }
    if preserve_unknown {
        notes.push("unknown fields kept (x-kubernetes-preserve-unknown-fields), as preserveUnknownFields did".into());
    }
    if made_structural > 0 {
        notes.push(format!("{made_structural} schema nodes made structural"));
    }
    if let Some(conversion) = spec.get_mut("conversion")
        && conversion["strategy"] == "Webhook"
    {
        let client = take(conversion, "webhookClientConfig").unwrap_or(Value::Null);
        let versions = take(conversion, "conversionReviewVersions").unwrap_or_else(|| json!(["v1beta1"]));
        conversion["webhook"] = json!({"clientConfig": client, "conversionReviewVersions": versions});
    }
}

/// The annotation `apiextensions.k8s.io/v1` requires of a CRD in a group Kubernetes protects
/// (`k8s.io`, `kubernetes.io` and their subdomains, e.g. kfctl's `applications.app.k8s.io` and
/// metacontroller's), which v1beta1 did not: the API server refuses such a CRD without it. A value
/// starting `unapproved` is what the API server takes for a CRD no Kubernetes review approved
/// (it then reports condition KubernetesAPIApprovalPolicyConformant false), and is the truth here.
const API_APPROVAL_ANNOTATION: &str = "api-approved.kubernetes.io";

fn approval(crd: &mut Value, notes: &mut Vec<String>) {
    let group = crd["spec"]["group"].as_str().unwrap_or_default().to_string();
    let protected = ["k8s.io", "kubernetes.io"].iter().any(|root| group == *root || group.ends_with(&format!(".{root}")));
    if !protected || crd["metadata"]["annotations"][API_APPROVAL_ANNOTATION].is_string() {
        return;
    }
    if !crd["metadata"]["annotations"].is_object() {
        crd["metadata"]["annotations"] = json!({});
    }
    crd["metadata"]["annotations"][API_APPROVAL_ANNOTATION] = json!("unapproved, defined with apiextensions.k8s.io/v1beta1, which asked for no approval");
    notes.push(format!("annotation {API_APPROVAL_ANNOTATION} set to unapproved (group {group} is protected)"));
}

/// Makes `schema` structural (what `apiextensions.k8s.io/v1` requires) without refusing anything
/// a v1beta1 schema allowed: a node without `type` takes the one its `properties`/`items` imply, or
/// keeps any value (`x-kubernetes-preserve-unknown-fields`); an int-or-string `anyOf` is marked as
/// such; other `allOf`/`anyOf`/`oneOf`/`not` are dropped (v1 restricts what they may hold; they
/// only validated); the root's `metadata` may only be an object. With `preserve`, every object
/// keeps unknown fields. Returns how many nodes changed.
fn structural(node: &mut Value, root: bool, preserve: bool) -> usize {
    let Some(map) = node.as_object_mut() else {
        return 0;
    };
    let mut changed = 0;
    if map.get("x-kubernetes-preserve-unknown-fields") == Some(&json!(false)) {
        map.remove("x-kubernetes-preserve-unknown-fields");
    }
    let int_or_string = |list: &Value| {
        let mut types: Vec<&str> = list.as_array().into_iter().flatten().filter_map(|s| s["type"].as_str()).collect();
        types.sort_unstable();
        list.as_array().is_some_and(|l| l.len() == 2) && types == ["integer", "string"]
    };
    for junctor in ["anyOf", "oneOf"] {
        if map.get(junctor).is_some_and(int_or_string) && !map.contains_key("type") {
            map.insert("x-kubernetes-int-or-string".into(), json!(true));
        }
    }
    let is_int_or_string = map.get("x-kubernetes-int-or-string") == Some(&json!(true));
    for junctor in ["allOf", "anyOf", "oneOf", "not"] {
        let keep = junctor == "anyOf" && is_int_or_string && map.get(junctor).is_some_and(int_or_string);
        if !keep && map.remove(junctor).is_some() {
            changed += 1;
        }
    }
    // The one junctor a structural schema allows beside int-or-string is this `anyOf`, in this
    // order (the API server refuses `[string, integer]`, spark-operator's order).
    let canonical = json!([{"type": "integer"}, {"type": "string"}]);
    if map.get("anyOf").is_some_and(|list| *list != canonical) {
        map.insert("anyOf".into(), canonical);
        changed += 1;
    }
    if !map.contains_key("type") && !is_int_or_string {
        changed += 1;
        if map.contains_key("properties") || map.contains_key("additionalProperties") || root {
            map.insert("type".into(), json!("object"));
        } else if map.contains_key("items") {
            map.insert("type".into(), json!("array"));
        } else {
            map.insert("x-kubernetes-preserve-unknown-fields".into(), json!(true));
        }
    }
    if preserve && map.get("type") == Some(&json!("object")) && !map.contains_key("additionalProperties") {
        map.insert("x-kubernetes-preserve-unknown-fields".into(), json!(true));
    }
    if let Some(properties) = map.get_mut("properties").and_then(Value::as_object_mut) {
        if root && let Some(metadata) = properties.get_mut("metadata") {
            let only_object = json!({"type": "object"});
            if *metadata != only_object {
                *metadata = only_object;
                changed += 1;
            }
        }
        for (name, property) in properties.iter_mut() {
            if !(root && name == "metadata") {
                changed += structural(property, false, preserve);
            }
        }
    }
    if let Some(items) = map.get_mut("items") {
        match items {
            Value::Array(list) if list.len() == 1 => *items = list.remove(0),
            _ => {}
        }
        changed += structural(items, false, preserve);
    }
    if let Some(additional) = map.get_mut("additionalProperties")
        && additional.is_object()
    {
        changed += structural(additional, false, preserve);
    }
    changed
}

/// `admissionregistration.k8s.io/v1beta1` → `v1`, each webhook keeping v1beta1's defaults where
/// v1's differ: `failurePolicy: Ignore`, `matchPolicy: Exact`, `timeoutSeconds: 30`,
/// `admissionReviewVersions: [v1beta1]`.
fn webhooks(object: &mut Value, notes: &mut Vec<String>) -> Result<(), String> {
    let mut assumed_none = Vec::new();
    for webhook in items_mut(object, "/webhooks") {
        let name = webhook["name"].as_str().unwrap_or_default().to_string();
        match webhook["sideEffects"].as_str() {
            Some("None" | "NoneOnDryRun") => {}
            None | Some("Unknown") => {
                webhook["sideEffects"] = json!("None");
                assumed_none.push(name);
            }
            Some(other) => return Err(format!("webhook {name:?} declares sideEffects {other:?}: admissionregistration.k8s.io/v1 allows only None and NoneOnDryRun, and a webhook with side effects cannot claim either")),
        }
        for (field, default) in [("failurePolicy", json!("Ignore")), ("matchPolicy", json!("Exact")), ("timeoutSeconds", json!(30)), ("admissionReviewVersions", json!(["v1beta1"]))] {
            if webhook[field].is_null() {
                webhook[field] = default;
            }
        }
    }
    if !assumed_none.is_empty() {
        notes.push(format!("sideEffects Unknown taken as None for {}", assumed_none.join(", ")));
    }
    notes.push("v1beta1's defaults written out (failurePolicy Ignore, matchPolicy Exact, timeoutSeconds 30, admissionReviewVersions [v1beta1]) where unset".into());
    Ok(())
}

/// Workloads of `apps/v1beta1`, `apps/v1beta2` and `extensions/v1beta1` → `apps/v1`: a missing
/// selector becomes the template's labels (the old defaulting); fields `apps/v1` dropped go.
fn workload(spec: &mut Value, notes: &mut Vec<String>) -> Result<(), String> {
    let selector = &spec["selector"];
    if selector["matchLabels"].as_object().is_none_or(Map::is_empty) && selector["matchExpressions"].as_array().is_none_or(Vec::is_empty) {
        let labels = spec["template"]["metadata"]["labels"].clone();
        if labels.as_object().is_none_or(Map::is_empty) {
            return Err("it has no selector and its pod template no labels to take one from; apps/v1 requires a selector".into());
        }
        spec["selector"] = json!({"matchLabels": labels});
        notes.push("selector taken from the pod template's labels".into());
    }
    for dropped in ["rollbackTo", "templateGeneration"] {
        if take(spec, dropped).is_some() {
            notes.push(format!("spec.{dropped} dropped (not in apps/v1)"));
        }
    }
    Ok(())
}

/// `extensions/v1beta1` or `networking.k8s.io/v1beta1` Ingress → `networking.k8s.io/v1`.
fn ingress(spec: &mut Value, notes: &mut Vec<String>) {
    fn backend(backend: &mut Value) {
        let (Some(service), Some(port)) = (take(backend, "serviceName"), take(backend, "servicePort")) else {
            return;
        };
        let port = match port {
            Value::Number(n) => json!({"number": n}),
            Value::String(s) => match s.parse::<u16>() {
                Ok(n) => json!({"number": n}),
                Err(_) => json!({"name": s}),
            },
            other => json!({"name": other}),
        };
        backend["service"] = json!({"name": service, "port": port});
    }
    if let Some(mut default) = take(spec, "backend") {
        backend(&mut default);
        spec["defaultBackend"] = default;
        notes.push("spec.backend is spec.defaultBackend".into());
    }
    for rule in items_mut(spec, "/rules") {
        for path in items_mut(rule, "/http/paths") {
            if let Some(b) = path.get_mut("backend") {
                backend(b);
            }
            if path["pathType"].is_null() {
                path["pathType"] = json!("ImplementationSpecific");
            }
        }
    }
}

/// `autoscaling/v2beta1` metrics → `v2`: each metric's `target*` fields become a `target`, its
/// `metricName`/`selector` a `metric`.
fn autoscaler_metrics(spec: &mut Value, notes: &mut Vec<String>) -> Result<(), String> {
    fn target(source: &mut Value) -> Value {
        if let Some(u) = take(source, "targetAverageUtilization") {
            json!({"type": "Utilization", "averageUtilization": u})
        } else if let Some(v) = take(source, "targetAverageValue") {
            json!({"type": "AverageValue", "averageValue": v})
        } else if let Some(v) = take(source, "targetValue") {
            json!({"type": "Value", "value": v})
        } else if let Some(v) = take(source, "averageValue") {
            json!({"type": "AverageValue", "averageValue": v})
        } else {
            Value::Null
        }
    }
    for metric in items_mut(spec, "/metrics") {
        let kind = metric["type"].as_str().unwrap_or_default().to_string();
        let field = match kind.as_str() {
            "Resource" => "resource",
            "Pods" => "pods",
            "Object" => "object",
            "External" => "external",
            "ContainerResource" => "containerResource",
            other => return Err(format!("metric type {other:?} is unknown to autoscaling/v2beta1")),
        };
        let source = &mut metric[field];
        let new_target = target(source);
        if new_target.is_null() {
            return Err(format!("a {kind} metric has no target"));
        }
        if matches!(field, "pods" | "object" | "external") {
            let name = take(source, "metricName").unwrap_or(Value::Null);
            let selector = take(source, "selector").or_else(|| take(source, "metricSelector"));
            let mut metric_id = json!({"name": name});
            if let Some(selector) = selector {
                metric_id["selector"] = selector;
            }
            if field == "object"
                && let Some(described) = take(source, "target")
            {
                source["describedObject"] = described;
            }
            source["metric"] = metric_id;
        }
        source["target"] = new_target;
    }
    notes.push("metrics' targets in autoscaling/v2 form".into());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn converted(object: Value) -> (Value, Conversion) {
        let (object, conversion) = convert(object).unwrap();
        (object, conversion.expect("converted"))
    }

    /// The shape of kfctl-era CRDs (katib's experiments, kfserving's inferenceservices v0.2):
    /// `version`, `validation`, CRD-wide columns with `JSONPath`, `subresources`, no
    /// `preserveUnknownFields`, nodes without `type`.
    #[test]
    fn a_v1beta1_crd_moves_its_schema_columns_and_subresources_into_its_version() {
        let crd = json!({
            "apiVersion": "apiextensions.k8s.io/v1beta1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "experiments.kubeflow.org"},
            "spec": {
                "group": "kubeflow.org", "version": "v1alpha3", "scope": "Namespaced",
                "names": {"kind": "Experiment", "plural": "experiments", "singular": "experiment"},
                "additionalPrinterColumns": [{"name": "Status", "type": "string", "JSONPath": ".status.conditions[-1:].type"}],
                "subresources": {"status": {}},
                "validation": {"openAPIV3Schema": {"properties": {
                    "metadata": {"properties": {"name": {"type": "string", "maxLength": 63}}},
                    "spec": {"properties": {
                        "parallelTrialCount": {"type": "integer", "minimum": 1},
                        "parameters": {"items": {"properties": {"name": {"type": "string"}}}},
                        "trialTemplate": {},
                    }},
                }}},
            },
        });
        let (crd, conversion) = converted(crd);
        assert_eq!(
            crd["spec"],
            json!({
                "group": "kubeflow.org", "scope": "Namespaced",
                "names": {"kind": "Experiment", "plural": "experiments", "singular": "experiment"},
                "versions": [{
                    "name": "v1alpha3", "served": true, "storage": true,
                    "additionalPrinterColumns": [{"name": "Status", "type": "string", "jsonPath": ".status.conditions[-1:].type"}],
                    "subresources": {"status": {}},
                    "schema": {"openAPIV3Schema": {
                        "type": "object", "x-kubernetes-preserve-unknown-fields": true,
                        "properties": {
                            "metadata": {"type": "object"},
                            "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true, "properties": {
                                "parallelTrialCount": {"type": "integer", "minimum": 1},
                                "parameters": {"type": "array", "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": true, "properties": {"name": {"type": "string"}}}},
                                "trialTemplate": {"x-kubernetes-preserve-unknown-fields": true},
                            }},
                        },
                    }},
                }],
            })
        );
        assert_eq!(crd["apiVersion"], "apiextensions.k8s.io/v1");
        assert_eq!((conversion.from.as_str(), conversion.to.as_str(), conversion.object.as_str()), ("apiextensions.k8s.io/v1beta1", "apiextensions.k8s.io/v1", "experiments.kubeflow.org"));
        assert_eq!(
            conversion.notes,
            ["validation, additionalPrinterColumns, subresources moved into each version", "unknown fields kept (x-kubernetes-preserve-unknown-fields), as preserveUnknownFields did", "6 schema nodes made structural"]
        );
    }

    #[test]
    fn a_crd_of_a_protected_group_is_marked_unapproved_as_v1_requires() {
        let crd = |name: &str, group: &str| json!({"apiVersion": "apiextensions.k8s.io/v1beta1", "kind": "CustomResourceDefinition", "metadata": {"name": name}, "spec": {"group": group, "version": "v1beta1", "names": {"kind": "X", "plural": "x"}}});
        for (name, group) in [("applications.app.k8s.io", "app.k8s.io"), ("compositecontrollers.metacontroller.k8s.io", "metacontroller.k8s.io"), ("x.kubernetes.io", "kubernetes.io")] {
            let (object, conversion) = converted(crd(name, group));
            assert_eq!(object["metadata"]["annotations"]["api-approved.kubernetes.io"], "unapproved, defined with apiextensions.k8s.io/v1beta1, which asked for no approval", "{name}");
            assert!(conversion.notes.iter().any(|n| n.contains("api-approved.kubernetes.io")), "{:?}", conversion.notes);
        }
        // Other groups (a name only ending like one) get nothing; an approval given stays.
        for group in ["kubeflow.org", "notk8s.io", "k8s.io.example.com"] {
            let (object, _) = converted(crd("x.y", group));
            assert!(object["metadata"]["annotations"].is_null(), "{group}: {object}");
        }
        let mut approved = crd("x.k8s.io", "k8s.io");
        approved["metadata"]["annotations"] = json!({"api-approved.kubernetes.io": "https://github.com/kubernetes/enhancements/pull/1111"});
        let (object, _) = converted(approved);
        assert_eq!(object["metadata"]["annotations"]["api-approved.kubernetes.io"], "https://github.com/kubernetes/enhancements/pull/1111");
    }

    #[test]
    fn a_crd_that_pruned_keeps_pruning_and_its_versions_keep_their_own_parts() {
        let crd = json!({
            "apiVersion": "apiextensions.k8s.io/v1beta1", "kind": "CustomResourceDefinition", "metadata": {"name": "tfjobs.kubeflow.org"},
            "spec": {
                "group": "kubeflow.org", "names": {"kind": "TFJob", "plural": "tfjobs"}, "preserveUnknownFields": false,
                "versions": [
                    {"name": "v1", "served": true, "storage": true},
                    {"name": "v1beta2", "served": true, "storage": false, "schema": {"openAPIV3Schema": {"type": "object", "properties": {"spec": {"type": "object"}}}}, "subresources": {"scale": {"specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.replicas"}}},
                ],
                // `y` in spark-operator's order, `z` as a oneOf: the API server takes only `x`'s shape.
                "validation": {"openAPIV3Schema": {"type": "object", "properties": {"spec": {"type": "object", "properties": {
                    "x": {"anyOf": [{"type": "integer"}, {"type": "string"}]},
                    "y": {"anyOf": [{"type": "string"}, {"type": "integer"}]},
                    "z": {"oneOf": [{"type": "string"}, {"type": "integer"}]},
                }}}}},
                "subresources": {"status": {}},
            },
        });
        let (crd, _) = converted(crd);
        assert_eq!(crd["spec"]["scope"], "Namespaced", "v1beta1's default scope written out");
        assert_eq!(
            crd["spec"]["versions"],
            json!([
                {"name": "v1", "served": true, "storage": true, "subresources": {"status": {}},
                 "schema": {"openAPIV3Schema": {"type": "object", "properties": {"spec": {"type": "object", "properties": {
                     "x": {"anyOf": [{"type": "integer"}, {"type": "string"}], "x-kubernetes-int-or-string": true},
                     "y": {"anyOf": [{"type": "integer"}, {"type": "string"}], "x-kubernetes-int-or-string": true},
                     "z": {"x-kubernetes-int-or-string": true},
                 }}}}}},
                {"name": "v1beta2", "served": true, "storage": false, "subresources": {"scale": {"specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.replicas"}},
                 "schema": {"openAPIV3Schema": {"type": "object", "properties": {"spec": {"type": "object"}}}}},
            ])
        );
        assert!(crd["spec"].get("preserveUnknownFields").is_none());
    }

    #[test]
    fn a_crd_without_validation_takes_any_object_and_its_webhook_conversion_moves() {
        let crd = json!({
            "apiVersion": "apiextensions.k8s.io/v1beta1", "kind": "CustomResourceDefinition", "metadata": {"name": "workflows.argoproj.io"},
            "spec": {"group": "argoproj.io", "version": "v1alpha1", "scope": "Namespaced", "names": {"kind": "Workflow", "plural": "workflows"},
                     "conversion": {"strategy": "Webhook", "webhookClientConfig": {"service": {"name": "conv", "namespace": "argo"}}}},
        });
        let (crd, _) = converted(crd);
        assert_eq!(crd["spec"]["versions"][0]["schema"], json!({"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}));
        assert_eq!(crd["spec"]["conversion"], json!({"strategy": "Webhook", "webhook": {"clientConfig": {"service": {"name": "conv", "namespace": "argo"}}, "conversionReviewVersions": ["v1beta1"]}}));
    }

    #[test]
    fn validation_junctors_that_v1_restricts_are_dropped() {
        let mut schema = json!({"type": "object", "properties": {"a": {"type": "string", "oneOf": [{"pattern": "^x"}, {"pattern": "^y"}]}, "b": {"type": "array", "items": [{"type": "string"}]}}});
        structural(&mut schema, true, false);
        assert_eq!(schema, json!({"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "array", "items": {"type": "string"}}}}));
    }

    #[test]
    fn rbac_v1beta1_becomes_v1_unchanged() {
        let role = json!({"apiVersion": "rbac.authorization.k8s.io/v1beta1", "kind": "ClusterRole", "metadata": {"name": "katib-controller"}, "rules": [{"apiGroups": ["extensions"], "resources": ["deployments"], "verbs": ["get"]}]});
        let (out, conversion) = converted(role.clone());
        let mut expected = role;
        expected["apiVersion"] = json!("rbac.authorization.k8s.io/v1");
        assert_eq!(out, expected);
        assert!(conversion.notes.is_empty());
        for kind in ["Role", "RoleBinding", "ClusterRoleBinding"] {
            let (out, _) = converted(json!({"apiVersion": "rbac.authorization.k8s.io/v1beta1", "kind": kind, "metadata": {"name": "x", "namespace": "kubeflow"}}));
            assert_eq!(out["apiVersion"], "rbac.authorization.k8s.io/v1", "{kind}");
        }
    }

    /// katib's and kfserving's v0.x webhooks: no sideEffects, no admissionReviewVersions.
    #[test]
    fn v1beta1_webhooks_keep_their_old_defaults() {
        let config = json!({
            "apiVersion": "admissionregistration.k8s.io/v1beta1", "kind": "MutatingWebhookConfiguration", "metadata": {"name": "katib-mutating-webhook-config"},
            "webhooks": [
                {"name": "mutating.experiment.katib.kubeflow.org", "clientConfig": {"service": {"name": "katib-controller", "namespace": "kubeflow"}}, "rules": [{"apiGroups": ["kubeflow.org"], "apiVersions": ["v1alpha3"], "operations": ["CREATE"], "resources": ["experiments"]}]},
                {"name": "strict.katib.kubeflow.org", "sideEffects": "NoneOnDryRun", "failurePolicy": "Fail", "timeoutSeconds": 5, "admissionReviewVersions": ["v1"], "matchPolicy": "Equivalent", "clientConfig": {"url": "https://x"}},
            ],
        });
        let (out, conversion) = converted(config);
        assert_eq!(out["apiVersion"], "admissionregistration.k8s.io/v1");
        assert_eq!(
            out["webhooks"],
            json!([
                {"name": "mutating.experiment.katib.kubeflow.org", "clientConfig": {"service": {"name": "katib-controller", "namespace": "kubeflow"}}, "rules": [{"apiGroups": ["kubeflow.org"], "apiVersions": ["v1alpha3"], "operations": ["CREATE"], "resources": ["experiments"]}],
                 "sideEffects": "None", "failurePolicy": "Ignore", "matchPolicy": "Exact", "timeoutSeconds": 30, "admissionReviewVersions": ["v1beta1"]},
                {"name": "strict.katib.kubeflow.org", "sideEffects": "NoneOnDryRun", "failurePolicy": "Fail", "timeoutSeconds": 5, "admissionReviewVersions": ["v1"], "matchPolicy": "Equivalent", "clientConfig": {"url": "https://x"}},
            ])
        );
        assert_eq!(conversion.notes[0], "sideEffects Unknown taken as None for mutating.experiment.katib.kubeflow.org");
    }

    #[test]
    fn a_webhook_with_side_effects_is_not_converted() {
        let config = json!({"apiVersion": "admissionregistration.k8s.io/v1beta1", "kind": "ValidatingWebhookConfiguration", "metadata": {"name": "w"}, "webhooks": [{"name": "a.b.c", "sideEffects": "Some"}]});
        let error = convert(config).unwrap_err();
        assert_eq!(error.to_string(), "ValidatingWebhookConfiguration w (admissionregistration.k8s.io/v1beta1) is not converted: webhook \"a.b.c\" declares sideEffects \"Some\": admissionregistration.k8s.io/v1 allows only None and NoneOnDryRun, and a webhook with side effects cannot claim either");
    }

    /// kfctl-era `extensions/v1beta1` Deployments (spartakus, metacontroller's StatefulSet in
    /// `apps/v1beta2`) often had no selector: the old API took the template's labels.
    #[test]
    fn an_old_workload_without_a_selector_takes_its_template_labels() {
        let deployment = json!({
            "apiVersion": "extensions/v1beta1", "kind": "Deployment", "metadata": {"name": "spartakus-volunteer", "namespace": "kubeflow"},
            "spec": {"replicas": 1, "rollbackTo": {"revision": 2}, "template": {"metadata": {"labels": {"app": "spartakus"}}, "spec": {"containers": [{"name": "volunteer", "image": "gcr.io/google_containers/spartakus-amd64:v1.1.0"}]}}},
        });
        let (out, conversion) = converted(deployment);
        assert_eq!(
            out,
            json!({
                "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "spartakus-volunteer", "namespace": "kubeflow"},
                "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "spartakus"}}, "template": {"metadata": {"labels": {"app": "spartakus"}}, "spec": {"containers": [{"name": "volunteer", "image": "gcr.io/google_containers/spartakus-amd64:v1.1.0"}]}}},
            })
        );
        assert_eq!(conversion.notes, ["selector taken from the pod template's labels", "spec.rollbackTo dropped (not in apps/v1)"]);
        assert_eq!(conversion.object, "kubeflow/spartakus-volunteer");
        for (api_version, kind) in [("apps/v1beta1", "StatefulSet"), ("apps/v1beta2", "StatefulSet"), ("apps/v1beta2", "DaemonSet"), ("extensions/v1beta1", "DaemonSet"), ("extensions/v1beta1", "ReplicaSet")] {
            let object = json!({"apiVersion": api_version, "kind": kind, "metadata": {"name": "m"}, "spec": {"selector": {"matchLabels": {"app": "m"}}, "template": {"metadata": {"labels": {"app": "m", "extra": "x"}}}}});
            let (out, conversion) = converted(object);
            assert_eq!((out["apiVersion"].as_str(), &out["spec"]["selector"]), (Some("apps/v1"), &json!({"matchLabels": {"app": "m"}})), "{api_version} {kind}: its own selector stays");
            assert!(conversion.notes.is_empty());
        }
        let unlabelled = json!({"apiVersion": "apps/v1beta1", "kind": "Deployment", "metadata": {"name": "u"}, "spec": {"template": {"spec": {}}}});
        assert_eq!(convert(unlabelled).unwrap_err().reason, "it has no selector and its pod template no labels to take one from; apps/v1 requires a selector");
    }

    #[test]
    fn an_old_ingress_takes_the_v1_backend_shape() {
        let ingress = json!({
            "apiVersion": "extensions/v1beta1", "kind": "Ingress", "metadata": {"name": "envoy-ingress", "namespace": "istio-system"},
            "spec": {"backend": {"serviceName": "default-http", "servicePort": 80}, "rules": [{"host": "kf.example.com", "http": {"paths": [
                {"path": "/*", "backend": {"serviceName": "istio-ingressgateway", "servicePort": "http2"}},
                {"path": "/api", "pathType": "Prefix", "backend": {"serviceName": "api", "servicePort": "8080"}},
            ]}}]},
        });
        let (out, _) = converted(ingress);
        assert_eq!(out["apiVersion"], "networking.k8s.io/v1");
        assert_eq!(
            out["spec"],
            json!({"defaultBackend": {"service": {"name": "default-http", "port": {"number": 80}}}, "rules": [{"host": "kf.example.com", "http": {"paths": [
                {"path": "/*", "pathType": "ImplementationSpecific", "backend": {"service": {"name": "istio-ingressgateway", "port": {"name": "http2"}}}},
                {"path": "/api", "pathType": "Prefix", "backend": {"service": {"name": "api", "port": {"number": 8080}}}},
            ]}}]})
        );
        let (out, _) = converted(json!({"apiVersion": "networking.k8s.io/v1beta1", "kind": "Ingress", "metadata": {"name": "i"}, "spec": {}}));
        assert_eq!(out["apiVersion"], "networking.k8s.io/v1");
    }

    #[test]
    fn a_disruption_budget_converts_unless_its_selector_would_widen() {
        let pdb = json!({"apiVersion": "policy/v1beta1", "kind": "PodDisruptionBudget", "metadata": {"name": "ingressgateway", "namespace": "istio-system"}, "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "istio-ingressgateway"}}}});
        let (out, _) = converted(pdb.clone());
        let mut expected = pdb;
        expected["apiVersion"] = json!("policy/v1");
        assert_eq!(out, expected);
        let empty = json!({"apiVersion": "policy/v1beta1", "kind": "PodDisruptionBudget", "metadata": {"name": "all", "namespace": "x"}, "spec": {"minAvailable": 1, "selector": {}}});
        assert_eq!(convert(empty).unwrap_err().to_string(), "PodDisruptionBudget x/all (policy/v1beta1) is not converted: its selector is empty, which selects no pods in policy/v1beta1 and every pod of the namespace in policy/v1");
    }

    #[test]
    fn renamed_versions_keep_every_field() {
        for (from, kind, to) in [
            ("batch/v1beta1", "CronJob", "batch/v1"),
            ("scheduling.k8s.io/v1beta1", "PriorityClass", "scheduling.k8s.io/v1"),
            ("apiregistration.k8s.io/v1beta1", "APIService", "apiregistration.k8s.io/v1"),
            ("extensions/v1beta1", "NetworkPolicy", "networking.k8s.io/v1"),
            ("autoscaling/v2beta2", "HorizontalPodAutoscaler", "autoscaling/v2"),
            ("storage.k8s.io/v1beta1", "StorageClass", "storage.k8s.io/v1"),
        ] {
            let object = json!({"apiVersion": from, "kind": kind, "metadata": {"name": "n"}, "spec": {"a": 1}, "value": 5});
            let (out, conversion) = converted(object);
            assert_eq!(out, json!({"apiVersion": to, "kind": kind, "metadata": {"name": "n"}, "spec": {"a": 1}, "value": 5}), "{from} {kind}");
            assert_eq!((conversion.from.as_str(), conversion.to.as_str()), (from, to));
        }
    }

    #[test]
    fn pod_security_policies_are_refused_with_the_reason() {
        let psp = json!({"apiVersion": "policy/v1beta1", "kind": "PodSecurityPolicy", "metadata": {"name": "istio"}, "spec": {}});
        assert!(convert(psp).unwrap_err().reason.starts_with("PodSecurityPolicy was removed in Kubernetes 1.25"));
    }

    /// Istio 1.1–1.3 (kfctl's istio-install) scaled its gateways with `autoscaling/v2beta1`.
    #[test]
    fn a_v2beta1_autoscaler_takes_v2_targets() {
        let hpa = json!({"apiVersion": "autoscaling/v2beta1", "kind": "HorizontalPodAutoscaler", "metadata": {"name": "istio-ingressgateway", "namespace": "istio-system"},
            "spec": {"maxReplicas": 5, "minReplicas": 1, "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "istio-ingressgateway"},
                     "metrics": [
                        {"type": "Resource", "resource": {"name": "cpu", "targetAverageUtilization": 80}},
                        {"type": "Pods", "pods": {"metricName": "qps", "targetAverageValue": "10"}},
                        {"type": "Object", "object": {"target": {"kind": "Service", "name": "web"}, "metricName": "rps", "targetValue": "100"}},
                        {"type": "External", "external": {"metricName": "queue", "metricSelector": {"matchLabels": {"q": "a"}}, "targetAverageValue": "30"}},
                     ]}});
        let (out, _) = converted(hpa);
        assert_eq!(out["apiVersion"], "autoscaling/v2");
        assert_eq!(
            out["spec"]["metrics"],
            json!([
                {"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 80}}},
                {"type": "Pods", "pods": {"metric": {"name": "qps"}, "target": {"type": "AverageValue", "averageValue": "10"}}},
                {"type": "Object", "object": {"describedObject": {"kind": "Service", "name": "web"}, "metric": {"name": "rps"}, "target": {"type": "Value", "value": "100"}}},
                {"type": "External", "external": {"metric": {"name": "queue", "selector": {"matchLabels": {"q": "a"}}}, "target": {"type": "AverageValue", "averageValue": "30"}}},
            ])
        );
    }

    #[test]
    fn served_versions_and_custom_resources_pass_unchanged() {
        for object in [
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"}, "spec": {}}),
            json!({"apiVersion": "kubeflow.org/v1beta1", "kind": "Notebook", "metadata": {"name": "n"}}),
            json!({"apiVersion": "app.k8s.io/v1beta1", "kind": "Application", "metadata": {"name": "a"}}),
        ] {
            assert_eq!(convert(object.clone()).unwrap(), (object, None));
        }
    }

    #[test]
    fn conversions_are_counted_per_kind_and_version() {
        let objects = vec![
            json!({"apiVersion": "rbac.authorization.k8s.io/v1beta1", "kind": "ClusterRole", "metadata": {"name": "a"}}),
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}),
            json!({"apiVersion": "rbac.authorization.k8s.io/v1beta1", "kind": "ClusterRole", "metadata": {"name": "b"}}),
            json!({"apiVersion": "apiextensions.k8s.io/v1beta1", "kind": "CustomResourceDefinition", "metadata": {"name": "x.y"}, "spec": {"group": "y", "version": "v1", "names": {"kind": "X", "plural": "x"}}}),
        ];
        let (out, conversions) = convert_objects(objects).unwrap();
        assert_eq!(out.len(), 4);
        assert_eq!(
            summarise(&conversions),
            [
                ConvertedKind { kind: "ClusterRole".into(), from: "rbac.authorization.k8s.io/v1beta1".into(), to: "rbac.authorization.k8s.io/v1".into(), count: 2 },
                ConvertedKind { kind: "CustomResourceDefinition".into(), from: "apiextensions.k8s.io/v1beta1".into(), to: "apiextensions.k8s.io/v1".into(), count: 1 },
            ]
        );
    }
}
