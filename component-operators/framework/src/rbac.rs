//! The permissions a component operator needs, derived from what it actually calls: its own
//! resource (watch, finalizer, status), Events, the Secrets it dereferences, and every kind its
//! releases ship (watch + apply + prune). Used to generate the RBAC in deploy/ and bundle/.

use std::collections::BTreeMap;

use k8s_openapi::api::rbac::v1::PolicyRule;
use kube::Resource;

use crate::component::Component;
use kubeflow_crds::component::ComponentKind;
use crate::run::watched_kinds;

pub fn rule(group: &str, resources: &[&str], verbs: &[&str]) -> PolicyRule {
    PolicyRule {
        api_groups: Some(vec![group.to_string()]),
        resources: Some(resources.iter().map(|r| r.to_string()).collect()),
        verbs: verbs.iter().map(|v| v.to_string()).collect(),
        ..Default::default()
    }
}

/// The plural of component `kind`'s resource.
pub fn component_plural(kind: ComponentKind) -> String {
    kind.crd().spec.names.plural
}

/// ClusterRole rules for the operator of component `C`.
pub fn cluster_role_rules<C: Component>() -> Vec<PolicyRule> {
    let group = C::Resource::group(&()).to_string();
    let plural = C::Resource::plural(&()).to_string();
    let mut rules = vec![
        // create/delete: in NATS mode the operator makes the resource from the KfDef's desired state.
        rule(&group, &[&plural], &["get", "list", "watch", "create", "patch", "update", "delete"]),
        rule(&group, &[&format!("{plural}/status"), &format!("{plural}/finalizers")], &["get", "patch", "update"]),
        rule("events.k8s.io", &["events"], &["create", "patch"]),
        // An object labelled for another component resource is left alone while that resource
        // exists (an orphan is adopted): reading whether it does; and, for a CRD or shared object
        // naming no owner, whether any resource of its component is left anywhere (listed).
        rule(&group, &ComponentKind::ALL.map(|c| component_plural(c)).iter().map(String::as_str).collect::<Vec<_>>(), &["get", "list"]),
    ];
    // Every write, and every read of a Secret, is made as the account a resource names (see
    // `installer`): the operator itself reads what it watches and acts as accounts. So it needs
    // no escalate or bind, no pod or ReplicaSet rights for a handover, and no Secrets.
    let mut by_group: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for info in watched_kinds::<C>() {
        by_group.entry(info.group).or_default().push(info.plural);
    }
    for (group, plurals) in &by_group {
        rules.push(rule(group, plurals, &["get", "list", "watch"]));
    }
    rules.push(rule("", &["namespaces"], &["get"]));
    // Only accounts named as installers: never, say, a kube-system controller's. A KfDef naming
    // another account needs the operator granted `impersonate` on that name too.
    rules.push(PolicyRule {
        resource_names: Some(vec![kubeflow_crds::kfdef::DEFAULT_INSTALLER.to_string()]),
        ..rule("", &["serviceaccounts"], &["impersonate"])
    });
    rules.extend(C::extra_rules());
    rules
}
