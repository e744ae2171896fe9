//! kfctl's install order (`pkg/utils/kindsorter.go`, `InstallOrder`).

use kube::api::DynamicObject;

/// Kinds in the order kfctl applied them. Kinds not listed (custom resources, …) come after all of
/// them, grouped by kind in alphabetical order.
pub const INSTALL_ORDER: &[&str] = &[
    "Namespace",
    "ResourceQuota",
    "LimitRange",
    "PodSecurityPolicy",
    "Secret",
    "ConfigMap",
    "StorageClass",
    "PersistentVolume",
    "PersistentVolumeClaim",
    "ServiceAccount",
    "CustomResourceDefinition",
    "ClusterRole",
    "ClusterRoleBinding",
    "Role",
    "RoleBinding",
    "Service",
    "DaemonSet",
    "Pod",
    "ReplicationController",
    "ReplicaSet",
    "Deployment",
    "StatefulSet",
    "Job",
    "CronJob",
    "Ingress",
    "MutatingWebhookConfiguration",
    "ValidatingWebhookConfiguration",
    "APIService",
];

fn kind_of(o: &DynamicObject) -> &str {
    o.types
        .as_ref()
        .map(|t| t.kind.as_str())
        .unwrap_or_default()
}

/// Sorts objects into install order. Unlike kfctl's (unstable) sort, objects of one kind keep the
/// order kustomize printed them in, so the output is deterministic.
pub fn sort_install_order(objects: &mut [DynamicObject]) {
    objects.sort_by(|a, b| {
        let (ka, kb) = (kind_of(a), kind_of(b));
        let rank = |k: &str| {
            INSTALL_ORDER
                .iter()
                .position(|x| *x == k)
                .unwrap_or(INSTALL_ORDER.len())
        };
        rank(ka).cmp(&rank(kb)).then_with(|| {
            if rank(ka) == INSTALL_ORDER.len() {
                ka.cmp(kb)
            } else {
                std::cmp::Ordering::Equal
            }
        })
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(kind: &str, name: &str) -> DynamicObject {
        serde_json::from_value(
            serde_json::json!({"apiVersion": "v1", "kind": kind, "metadata": {"name": name}}),
        )
        .unwrap()
    }

    #[test]
    fn kinds_follow_kfctl_and_unknown_kinds_come_last_alphabetically() {
        let mut objs = vec![
            obj("Profile", "p"),
            obj("APIService", "api"),
            obj("Deployment", "d2"),
            obj("ValidatingWebhookConfiguration", "v"),
            obj("Experiment", "e"),
            obj("Service", "s"),
            obj("Deployment", "d1"),
            obj("MutatingWebhookConfiguration", "m"),
            obj("ClusterRoleBinding", "crb"),
            obj("CustomResourceDefinition", "crd"),
            obj("ConfigMap", "cm"),
            obj("Namespace", "ns"),
            obj("ClusterRole", "cr"),
            obj("RoleBinding", "rb"),
            obj("ServiceAccount", "sa"),
            obj("Role", "r"),
            obj("Secret", "sec"),
            obj("ResourceQuota", "q"),
        ];
        sort_install_order(&mut objs);
        let names: Vec<_> = objs
            .iter()
            .map(|o| o.metadata.name.clone().unwrap())
            .collect();
        assert_eq!(
            names,
            [
                "ns", "q", "sec", "cm", "sa", "crd", "cr", "crb", "r", "rb", "s", "d2", "d1", "m",
                "v", "api", "e", "p"
            ]
        );
    }
}
