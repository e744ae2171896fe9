//! Whether an applied object is ready, judged from the live object (pure).

use serde_json::Value;

fn condition_true(object: &Value, type_: &str) -> bool {
    object["status"]["conditions"].as_array().into_iter().flatten().any(|c| c["type"] == type_ && c["status"] == "True")
}

/// `None` when ready, otherwise why not.
pub fn not_ready_reason(live: &Value) -> Option<String> {
    let name = live["metadata"]["name"].as_str().unwrap_or_default();
    let kind = live["kind"].as_str().unwrap_or_default();
    match kind {
        "Deployment" | "StatefulSet" => {
            let generation = live["metadata"]["generation"].as_i64().unwrap_or(0);
            let observed = live["status"]["observedGeneration"].as_i64().unwrap_or(-1);
            let wanted = live["spec"]["replicas"].as_i64().unwrap_or(1);
            let count = |field: &str| live["status"][field].as_i64().unwrap_or(0);
            let (updated, ready) = (count("updatedReplicas"), count(if kind == "Deployment" { "availableReplicas" } else { "readyReplicas" }));
            // Like `kubectl rollout status`: every replica runs the current template and is
            // available; an old replica still serving does not make the new version ready.
            let total = count("replicas");
            if observed < generation {
                Some(format!("{kind} {name}: rollout of generation {generation} not observed yet"))
            } else if updated < wanted {
                Some(format!("{kind} {name}: {updated}/{wanted} replicas updated"))
            } else if total > updated {
                Some(format!("{kind} {name}: {} old replicas still running", total - updated))
            } else if ready < wanted {
                // (Every replica runs the current template here, so `wanted` available ones are
                // enough: a scale-down with extra replicas still terminating is not unready.)
                Some(format!("{kind} {name}: {ready}/{wanted} replicas available"))
            } else if kind == "Deployment" && wanted > 0 && !condition_true(live, "Available") {
                Some(format!("{kind} {name}: not Available"))
            } else {
                None
            }
        }
        "CustomResourceDefinition" if !condition_true(live, "Established") => Some(format!("CustomResourceDefinition {name}: not Established")),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn deployment(generation: i64, observed: i64, available: &str, replicas: i64, ready: i64) -> Value {
        json!({"kind": "Deployment", "metadata": {"name": "d", "generation": generation},
               "spec": {"replicas": replicas},
               "status": {"observedGeneration": observed, "replicas": ready, "updatedReplicas": ready, "availableReplicas": ready,
                          "conditions": [{"type": "Available", "status": available}]}})
    }

    #[test]
    fn deployment_is_ready_only_when_the_current_generation_is_available() {
        assert_eq!(not_ready_reason(&deployment(2, 2, "True", 1, 1)), None);
        assert!(not_ready_reason(&deployment(2, 1, "True", 1, 1)).unwrap().contains("not observed"));
        assert!(not_ready_reason(&deployment(2, 2, "False", 1, 1)).unwrap().contains("not Available"));
        assert!(not_ready_reason(&deployment(2, 2, "True", 2, 1)).unwrap().contains("1/2"));
    }

    #[test]
    fn a_new_replica_that_is_not_available_is_not_ready_while_the_old_one_serves() {
        // Rolling update: the old pod is still available (Deployment Available=True), the new pod
        // of the current template is updated but Pending.
        let live = json!({"kind": "Deployment", "metadata": {"name": "d", "generation": 3}, "spec": {"replicas": 1},
            "status": {"observedGeneration": 3, "replicas": 2, "updatedReplicas": 1, "availableReplicas": 1,
                       "conditions": [{"type": "Available", "status": "True"}]}});
        assert!(not_ready_reason(&live).unwrap().contains("old replicas"));
        let new_pending_only = json!({"kind": "Deployment", "metadata": {"name": "d", "generation": 3}, "spec": {"replicas": 1},
            "status": {"observedGeneration": 3, "replicas": 1, "updatedReplicas": 1, "availableReplicas": 0,
                       "conditions": [{"type": "Available", "status": "False"}]}});
        assert!(not_ready_reason(&new_pending_only).unwrap().contains("0/1"));
    }

    #[test]
    fn a_scale_down_in_progress_is_ready() {
        // Scaled from 7 to 1 by hand and reverted: extra replicas of the current template are
        // still going away, more than enough are available.
        let live = json!({"kind": "Deployment", "metadata": {"name": "d", "generation": 3}, "spec": {"replicas": 1},
            "status": {"observedGeneration": 3, "replicas": 7, "updatedReplicas": 7, "availableReplicas": 4,
                       "conditions": [{"type": "Available", "status": "True"}]}});
        assert_eq!(not_ready_reason(&live), None);
    }

    #[test]
    fn crd_is_ready_when_established_and_other_kinds_always() {
        let crd = |s| json!({"kind": "CustomResourceDefinition", "metadata": {"name": "c"}, "status": {"conditions": [{"type": "Established", "status": s}]}});
        assert_eq!(not_ready_reason(&crd("True")), None);
        assert!(not_ready_reason(&crd("False")).is_some());
        assert_eq!(not_ready_reason(&json!({"kind": "ConfigMap", "metadata": {"name": "x"}})), None);
    }
}
