//! Webhook backends are ready before what they admit (pure).
//!
//! An admission webhook whose backend is not serving makes the API server refuse (failurePolicy
//! `Fail`) or delay (`Ignore`, after its timeout) every write it matches, which is why upstream's
//! install is `kubectl apply` in a retry loop. Here a webhook configuration of the desired
//! objects, served by a Service of the desired objects, gates the custom resources it admits and
//! itself: they are applied only once every workload behind that Service is ready. They are held,
//! not failed: the application is Progressing, and the workload's next status change brings the
//! next reconcile. Only objects ranked with the custom resources and after
//! ([`kinds::CUSTOM_RESOURCE_RANK`]) are held, so what a backend itself needs (namespace,
//! account, roles, configuration, Service, workload) is never held by its own webhook.
//!
//! A webhook served by a URL, or by a Service the desired objects do not contain (another install
//! owns it), does not gate: this install cannot tell when it serves.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use crate::kinds::{self, KindInfo};

/// One webhook configuration of the desired objects and the workloads serving it.
#[derive(Debug, Clone, PartialEq)]
pub struct Gate {
    /// Index of the webhook configuration in the desired objects.
    pub configuration: usize,
    /// `Kind name` of the configuration, for messages.
    pub name: String,
    /// `(apiGroups, resources)` of its rules that match creates or updates.
    rules: Vec<(Vec<String>, Vec<String>)>,
    /// Indexes of the workloads behind its Services.
    pub backends: BTreeSet<usize>,
}

fn strings(value: &Value) -> Vec<String> {
    value.as_array().into_iter().flatten().filter_map(Value::as_str).map(String::from).collect()
}

fn text(value: &Value) -> &str {
    value.as_str().unwrap_or_default()
}

/// Whether a workload's pod template labels carry every label of `selector`.
fn selects(selector: &serde_json::Map<String, Value>, workload: &Value) -> bool {
    let labels = &workload["spec"]["template"]["metadata"]["labels"];
    !selector.is_empty() && selector.iter().all(|(k, v)| labels.get(k) == Some(v))
}

/// The gates of `objects` (the desired objects in install order, with the namespace each will
/// be applied in already set on namespaced ones).
pub fn gates(objects: &[(&Value, &KindInfo)]) -> Vec<Gate> {
    let services: BTreeMap<(&str, &str), &Value> = objects
        .iter()
        .filter(|(_, info)| info.kind == "Service" && info.group.is_empty())
        .map(|(o, _)| ((text(&o["metadata"]["namespace"]), text(&o["metadata"]["name"])), *o))
        .collect();
    let workloads: Vec<(usize, &Value)> = objects
        .iter()
        .enumerate()
        .filter(|(_, (_, info))| info.group == "apps" && matches!(info.kind, "Deployment" | "StatefulSet" | "DaemonSet"))
        .map(|(i, (o, _))| (i, *o))
        .collect();
    let mut gates = Vec::new();
    for (index, (object, info)) in objects.iter().enumerate() {
        if info.group != "admissionregistration.k8s.io" || !matches!(info.kind, "MutatingWebhookConfiguration" | "ValidatingWebhookConfiguration") {
            continue;
        }
        let mut rules = Vec::new();
        let mut backends = BTreeSet::new();
        for webhook in object["webhooks"].as_array().into_iter().flatten() {
            let service = &webhook["clientConfig"]["service"];
            let Some(service) = services.get(&(text(&service["namespace"]), text(&service["name"]))) else { continue };
            let Some(selector) = service["spec"]["selector"].as_object() else { continue };
            let namespace = text(&service["metadata"]["namespace"]);
            let serving: Vec<usize> = workloads.iter().filter(|(_, w)| text(&w["metadata"]["namespace"]) == namespace && selects(selector, w)).map(|(i, _)| *i).collect();
            if serving.is_empty() {
                continue;
            }
            backends.extend(serving);
            for rule in webhook["rules"].as_array().into_iter().flatten() {
                let operations = strings(&rule["operations"]);
                if operations.iter().any(|o| matches!(o.as_str(), "*" | "CREATE" | "UPDATE")) {
                    rules.push((strings(&rule["apiGroups"]), strings(&rule["resources"])));
                }
            }
        }
        if !backends.is_empty() {
            gates.push(Gate { configuration: index, name: format!("{} {}", info.kind, text(&object["metadata"]["name"])), rules, backends });
        }
    }
    gates
}

impl Gate {
    /// Whether the webhook admits objects of `info` (group and plural; `*` and `plural/*` match).
    fn admits(&self, info: &KindInfo) -> bool {
        self.rules.iter().any(|(groups, resources)| {
            groups.iter().any(|g| g == "*" || g == info.group) && resources.iter().any(|r| r == "*" || r == info.plural || r.strip_prefix(info.plural).is_some_and(|rest| rest == "/*"))
        })
    }
}

/// Why the object at `index` (of kind `info`) waits, if it does: a gate admits it (or it is the
/// gate's configuration) and a backend is not ready. `unready` maps a workload's index to why it
/// is not ready.
pub fn held(gates: &[Gate], index: usize, info: &KindInfo, unready: &BTreeMap<usize, String>) -> Option<String> {
    if info.rank < kinds::CUSTOM_RESOURCE_RANK {
        return None;
    }
    gates.iter().filter(|g| g.configuration == index || g.admits(info)).find_map(|gate| {
        let (_, why) = gate.backends.iter().find_map(|b| unready.get_key_value(b))?;
        Some(format!("waiting for the backend of {} ({why})", gate.name))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn info(object: &Value) -> &'static KindInfo {
        let api_version = text(&object["apiVersion"]);
        let kind = text(&object["kind"]);
        kinds::lookup(api_version, kind).unwrap_or_else(|| {
            let (group, version) = api_version.split_once('/').unwrap();
            kinds::register(group, version, kind, "certificates", false).unwrap()
        })
    }

    fn deployment(name: &str, app: &str) -> Value {
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": "certs"},
               "spec": {"selector": {"matchLabels": {"app": app}}, "template": {"metadata": {"labels": {"app": app, "version": "1"}}}}})
    }

    fn webhook(service: &str, operations: Value, groups: Value, resources: Value) -> Value {
        json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration", "metadata": {"name": "certs"},
               "webhooks": [{"name": "certs.example.com", "clientConfig": {"service": {"namespace": "certs", "name": service}},
                             "rules": [{"apiGroups": groups, "apiVersions": ["v1"], "operations": operations, "resources": resources}]}]})
    }

    /// Service, two Deployments (one behind it), a webhook configuration, a certificate, in
    /// install order. Returns the gates and the objects' kinds.
    fn fixture(webhook: Value) -> (Vec<Gate>, Vec<&'static KindInfo>) {
        let objects = [
            json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "certs-webhook", "namespace": "certs"}, "spec": {"selector": {"app": "webhook"}}}),
            deployment("certs-webhook", "webhook"),
            deployment("certs-controller", "controller"),
            json!({"apiVersion": "certs.example.com/v1", "kind": "Certificate", "metadata": {"name": "c", "namespace": "certs"}}),
            webhook,
        ];
        let infos: Vec<&'static KindInfo> = objects.iter().map(info).collect();
        let pairs: Vec<(&Value, &KindInfo)> = objects.iter().zip(infos.iter().copied()).collect();
        (gates(&pairs), infos)
    }

    #[test]
    fn a_webhook_served_by_a_desired_workload_gates_what_it_admits_and_itself() {
        let (gates, infos) = fixture(webhook("certs-webhook", json!(["CREATE", "UPDATE"]), json!(["certs.example.com"]), json!(["certificates"])));
        assert_eq!(gates.len(), 1);
        assert_eq!(gates[0].backends, BTreeSet::from([1]), "only the Deployment the Service selects");
        let unready = BTreeMap::from([(1, "Deployment certs-webhook: 0/1 replicas available".to_string())]);
        assert_eq!(held(&gates, 3, infos[3], &unready).as_deref(), Some("waiting for the backend of ValidatingWebhookConfiguration certs (Deployment certs-webhook: 0/1 replicas available)"));
        assert!(held(&gates, 4, infos[4], &unready).is_some(), "the configuration waits for its backend");
        // What the backend needs is never held by its own webhook, nor anything once it is ready.
        assert_eq!(held(&gates, 0, infos[0], &unready), None);
        assert_eq!(held(&gates, 1, infos[1], &unready), None);
        assert_eq!(held(&gates, 3, infos[3], &BTreeMap::from([(2, "unrelated".to_string())])), None);
        assert_eq!(held(&gates, 3, infos[3], &BTreeMap::new()), None);
    }

    #[test]
    fn wildcards_match_and_other_rules_do_not() {
        let unready = BTreeMap::from([(1, "not ready".to_string())]);
        for (operations, groups, resources, gated) in [
            (json!(["*"]), json!(["*"]), json!(["*"]), true),
            (json!(["CREATE"]), json!(["certs.example.com"]), json!(["certificates/*"]), true),
            (json!(["DELETE"]), json!(["certs.example.com"]), json!(["certificates"]), false),
            (json!(["CREATE"]), json!(["other.example.com"]), json!(["certificates"]), false),
            (json!(["CREATE"]), json!(["certs.example.com"]), json!(["issuers"]), false),
        ] {
            let (gates, infos) = fixture(webhook("certs-webhook", operations.clone(), groups.clone(), resources.clone()));
            assert_eq!(held(&gates, 3, infos[3], &unready).is_some(), gated, "{operations} {groups} {resources}");
        }
    }

    #[test]
    fn a_webhook_this_install_cannot_see_serving_does_not_gate() {
        // A Service of another install, and a URL.
        let (gates, _) = fixture(webhook("elsewhere", json!(["*"]), json!(["*"]), json!(["*"])));
        assert!(gates.is_empty());
        let mut by_url = webhook("certs-webhook", json!(["*"]), json!(["*"]), json!(["*"]));
        by_url["webhooks"][0]["clientConfig"] = json!({"url": "https://certs.example.com/validate"});
        assert!(fixture(by_url).0.is_empty());
    }
}
