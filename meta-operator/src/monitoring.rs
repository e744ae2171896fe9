//! The monitoring objects of `deploy/monitoring` (generated there by deploygen, embedded here),
//! made by the meta-operator in its own namespace once the Prometheus Operator's kinds are served
//! (`--monitoring-objects`): what an OLM install gets in place of optional bundle objects, which
//! OLM does not have (a bundle holding a kind the cluster lacks fails the whole install). The
//! objects are applied as the meta-operator's own, never forced over another manager's.

use kube::api::{ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use kube::{Api, Client};
use serde_json::Value;
use tracing::{info, warn};

/// The API of the Prometheus Operator's kinds.
pub const GROUP_VERSION: &str = "monitoring.coreos.com/v1";

/// The generated files, as the package ships them.
const FILES: [&str; 3] = [
    include_str!("../../deploy/monitoring/podmonitors.yaml"),
    include_str!("../../deploy/monitoring/prometheusrule.yaml"),
    include_str!("../../deploy/monitoring/dashboards.yaml"),
];

/// Field manager of the objects.
const FIELD_MANAGER: &str = "kubeflow-meta-operator-monitoring";

/// How often the meta-operator looks again for the Prometheus Operator's kinds while they are not
/// served (discovery needs no right of its own; a watch of CRDs would).
const RECHECK: std::time::Duration = std::time::Duration::from_secs(300);

/// Every object of `deploy/monitoring`, placed in `namespace`.
pub fn objects(namespace: &str) -> Vec<Value> {
    FILES
        .iter()
        .flat_map(|text| text.split("\n---\n"))
        .filter_map(|doc| serde_yaml_ng::from_str::<Value>(doc).ok())
        .filter(|o| o.get("kind").is_some())
        .map(|mut o| {
            o["metadata"]["namespace"] = Value::from(namespace);
            o
        })
        .collect()
}

/// The rights the objects need in the namespace.
pub fn namespaced_rules() -> Vec<k8s_openapi::api::rbac::v1::PolicyRule> {
    vec![k8s_openapi::api::rbac::v1::PolicyRule {
        api_groups: Some(vec!["monitoring.coreos.com".into()]),
        resources: Some(vec!["podmonitors".into(), "prometheusrules".into()]),
        verbs: ["get", "create", "patch"].map(String::from).into(),
        ..Default::default()
    }]
}

/// Whether the cluster serves the kinds the objects are made of.
async fn served(client: &Client) -> bool {
    match client.list_api_group_resources(GROUP_VERSION).await {
        Ok(list) => ["podmonitors", "prometheusrules"].iter().all(|plural| list.resources.iter().any(|r| r.name == *plural)),
        Err(_) => false,
    }
}

/// Applies every object; the failures (e.g. an object of another manager's, not forced), each.
async fn apply(client: &Client, namespace: &str) -> Result<usize, Vec<String>> {
    let objects = objects(namespace);
    let mut failed = Vec::new();
    for object in &objects {
        let (api_version, kind, name) = (object["apiVersion"].as_str().unwrap_or_default(), object["kind"].as_str().unwrap_or_default(), object["metadata"]["name"].as_str().unwrap_or_default());
        let gvk = match api_version.split_once('/') {
            Some((group, version)) => GroupVersionKind::gvk(group, version, kind),
            None => GroupVersionKind::gvk("", api_version, kind),
        };
        let plural = format!("{}s", kind.to_lowercase());
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &ApiResource::from_gvk_with_plural(&gvk, &plural));
        if let Err(e) = api.patch(name, &PatchParams::apply(FIELD_MANAGER), &Patch::Apply(object)).await {
            failed.push(format!("{kind} {namespace}/{name}: {e}"));
        }
    }
    if failed.is_empty() { Ok(objects.len()) } else { Err(failed) }
}

/// Makes the objects in `namespace` once the Prometheus Operator's kinds are served, looking again
/// every few minutes until they are; a failed write is retried the same way.
pub async fn make_when_served(client: Client, namespace: String) {
    let mut said = false;
    loop {
        if served(&client).await {
            match apply(&client, &namespace).await {
                Ok(count) => return info!(count, %namespace, "monitoring objects made (PodMonitors, PrometheusRule, dashboards)"),
                Err(failed) => warn!(?failed, "cannot make these monitoring objects; retrying"),
            }
        } else if !said {
            info!("{GROUP_VERSION} PodMonitor and PrometheusRule are not served: no monitoring objects until the Prometheus Operator is installed");
            said = true;
        }
        tokio::time::sleep(RECHECK).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What OLM's meta-operator makes is what deploy/monitoring ships, in its own namespace.
    #[test]
    fn the_objects_are_deploy_monitorings_in_the_operators_namespace() {
        let objects = objects("operators");
        let count = |kind: &str| objects.iter().filter(|o| o["kind"] == kind).count();
        assert_eq!(count("PrometheusRule"), 1);
        assert!(count("PodMonitor") >= 10, "{}", count("PodMonitor"));
        assert_eq!(count("ConfigMap"), 5, "the dashboards");
        assert!(objects.iter().all(|o| o["metadata"]["namespace"] == "operators"));
        let rule = objects.iter().find(|o| o["kind"] == "PrometheusRule").unwrap();
        assert!(rule["spec"]["groups"][0]["rules"].as_array().unwrap().iter().any(|r| r["alert"] == "KubeflowKfDefDegraded"));
    }
}
