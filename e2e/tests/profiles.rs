//! The profiles operator, installed from deploy/profiles and run on the host with that package's
//! ServiceAccount, against the real control plane: the component installs the Profile CRD and the
//! Kubeflow roles; each Profile gets upstream's objects; deletes heal, quota edits apply, a
//! foreign namespace and a bad Profile are refused without changes; contributors come and go
//! through the KFAM API (header required, owners and admins only); deleting a Profile deletes its
//! namespace; uninstalling the component keeps the CRD and every Profile.

use k8s_openapi::api::core::v1::{Namespace, ResourceQuota, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, RoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use kubeflow_crds::component::ComponentPhase;
use kubeflow_crds::profile::Profile;
use kubeflow_crds::{ConditionStatus, ProfileController};
use kubeflow_e2e::*;
use serde_json::{Value, json};

/// Istio's AuthorizationPolicy API, as an installed Istio (1.4+) would serve it.
async fn ensure_authorization_policy_crd(client: &Client) {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "authorizationpolicies.security.istio.io"},
        "spec": {"group": "security.istio.io", "scope": "Namespaced",
                 "names": {"kind": "AuthorizationPolicy", "plural": "authorizationpolicies", "singular": "authorizationpolicy", "listKind": "AuthorizationPolicyList"},
                 "versions": [{"name": "v1beta1", "served": true, "storage": true,
                               "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]},
    }))
    .unwrap();
    match crds.create(&PostParams::default(), &crd).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => panic!("create the AuthorizationPolicy CRD: {e}"),
    }
    within("AuthorizationPolicy CRD established", kube::runtime::wait::await_condition(crds, "authorizationpolicies.security.istio.io", kube::runtime::conditions::is_crd_established())).await.unwrap();
}

fn authorization_policies(client: &Client, namespace: &str) -> Api<DynamicObject> {
    let resource = ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("security.istio.io", "v1beta1", "AuthorizationPolicy"), "authorizationpolicies");
    Api::namespaced_with(client.clone(), namespace, &resource)
}

fn profile(name: &str, spec: Value) -> Profile {
    serde_json::from_value(json!({"apiVersion": "kubeflow.org/v1", "kind": "Profile", "metadata": {"name": name}, "spec": spec})).unwrap()
}

/// Waits for the Profile's Ready condition to be `ready` for its current generation; returns it.
async fn ready_condition(profiles: &Api<Profile>, name: &str, ready: bool) -> kubeflow_crds::Condition {
    eventually(&format!("Profile {name} Ready={ready}"), || async {
        let p = profiles.get(name).await.map_err(|e| e.to_string())?;
        let status = p.status.clone().unwrap_or_default();
        let condition = status.conditions.iter().find(|c| c.type_ == "Ready").cloned().ok_or("no Ready condition")?;
        let current = status.observed_generation == p.metadata.generation;
        if current && condition.status == ConditionStatus::from(ready) { Ok(condition) } else { Err(format!("{status:?}")) }
    })
    .await
}

/// Deletes a Profile and waits until it is gone (its finalizer handled by the operator).
async fn delete_profile(profiles: &Api<Profile>, name: &str) {
    profiles.delete(name, &DeleteParams::default()).await.unwrap();
    gone(profiles, name).await;
}

#[tokio::test]
async fn profiles_make_tenants_and_kfam_shares_them() {
    let client = client().await;
    install_crds(&client).await;
    ensure_authorization_policy_crd(&client).await;
    let ns = TestNamespace::create(&client, "e2e-profiles").await;
    let kubeconfig = install_package(&client, "profiles").await;
    let kfam_port = free_port();
    let kfam = format!("http://127.0.0.1:{kfam_port}/kfam/v1");
    let kfam_addr = format!("--kfam-addr=127.0.0.1:{kfam_port}");
    let start_operator = || OperatorProcess::start("profiles-operator", &["--namespace", &ns.name, &kfam_addr], &[("KUBECONFIG", kubeconfig.to_str().unwrap())]);
    let operator = start_operator();
    operator.wait_ready().await;

    // The component: Profile CRD (v1 stored, v1beta1 served) and the Kubeflow roles.
    let target = TestNamespace::adopt(format!("{}-kf", ns.name));
    let controllers: Api<ProfileController> = Api::namespaced(client.clone(), &ns.name);
    let resource: ProfileController = serde_json::from_value(json!({
        "apiVersion": "components.kubeflow.org/v1alpha1", "kind": "ProfileController", "metadata": {"name": "profiles"},
        "spec": {"version": "v1.3.0", "targetNamespace": target.name, "clusterAdmins": ["admin@example.com"]},
    }))
    .unwrap();
    controllers.create(&PostParams::default(), &resource).await.unwrap();
    eventually("ProfileController Ready", || async {
        let c = controllers.get("profiles").await.map_err(|e| e.to_string())?;
        let ready = c.status.as_ref().is_some_and(|s| s.phase == Some(ComponentPhase::Ready) && s.installed_version.as_deref() == Some("v1.3.0"));
        if ready { Ok(()) } else { Err(format!("{:?} (log: {})", c.status, operator.log.display())) }
    })
    .await;
    let crd = Api::<CustomResourceDefinition>::all(client.clone()).get("profiles.kubeflow.org").await.unwrap();
    assert_eq!(crd.spec.scope, "Cluster");
    assert_eq!(crd.spec.versions.iter().map(|v| (v.name.as_str(), v.served, v.storage)).collect::<Vec<_>>(), [("v1", true, true), ("v1beta1", true, false)]);
    let roles: Api<ClusterRole> = Api::all(client.clone());
    for role in ["kubeflow-admin", "kubeflow-edit", "kubeflow-view"] {
        assert!(roles.get(role).await.unwrap().aggregation_rule.is_some(), "{role} aggregates");
    }

    // A Profile: its namespace and every object under upstream's names.
    let profiles: Api<Profile> = Api::all(client.clone());
    let alice = unique_name("alice");
    profiles.create(&PostParams::default(), &profile(&alice, json!({"owner": {"kind": "User", "name": "alice@example.com"}, "resourceQuotaSpec": {"hard": {"cpu": "2"}}}))).await.unwrap();
    ready_condition(&profiles, &alice, true).await;
    let namespace = Api::<Namespace>::all(client.clone()).get(&alice).await.unwrap();
    assert_eq!(namespace.annotations().get("owner").map(String::as_str), Some("alice@example.com"));
    for (label, value) in [("istio-injection", "enabled"), ("katib.kubeflow.org/metrics-collector-injection", "enabled"), ("serving.kubeflow.org/inferenceservice", "enabled"), ("pipelines.kubeflow.org/enabled", "true"), ("app.kubernetes.io/part-of", "kubeflow-profile")] {
        assert_eq!(namespace.labels().get(label).map(String::as_str), Some(value), "{label}");
    }
    let role_bindings: Api<RoleBinding> = Api::namespaced(client.clone(), &alice);
    let admin = role_bindings.get("namespaceAdmin").await.unwrap();
    assert_eq!(admin.role_ref.name, "kubeflow-admin");
    assert_eq!(admin.subjects.as_ref().unwrap()[0].name, "alice@example.com");
    assert_eq!(admin.annotations().get("role").map(String::as_str), Some("admin"));
    for (account, role) in [("default-editor", "kubeflow-edit"), ("default-viewer", "kubeflow-view")] {
        Api::<ServiceAccount>::namespaced(client.clone(), &alice).get(account).await.unwrap();
        assert_eq!(role_bindings.get(account).await.unwrap().role_ref.name, role);
    }
    let policy = authorization_policies(&client, &alice).get("ns-owner-access-istio").await.unwrap();
    assert_eq!(policy.data["spec"]["rules"][0]["when"][0], json!({"key": "request.headers[kubeflow-userid]", "values": ["alice@example.com"]}));
    let quotas: Api<ResourceQuota> = Api::namespaced(client.clone(), &alice);
    assert_eq!(quotas.get("kf-resource-quota").await.unwrap().spec.unwrap().hard.unwrap()["cpu"].0, "2");

    // Heal: a deleted owned object comes back.
    delete_and_await_recreation(&role_bindings, "namespaceAdmin").await;

    // Quota edited → applied; quota removed → ResourceQuota gone.
    profiles.patch(&alice, &PatchParams::default(), &Patch::Merge(json!({"spec": {"resourceQuotaSpec": {"hard": {"cpu": "4"}}}}))).await.unwrap();
    eventually("quota cpu 4", || async {
        let hard = quotas.get("kf-resource-quota").await.map_err(|e| e.to_string())?.spec.and_then(|s| s.hard).unwrap_or_default();
        if hard.get("cpu").map(|q| q.0.as_str()) == Some("4") { Ok(()) } else { Err(format!("{hard:?}")) }
    })
    .await;
    profiles.patch(&alice, &PatchParams::default(), &Patch::Merge(json!({"spec": {"resourceQuotaSpec": null}}))).await.unwrap();
    gone(&quotas, "kf-resource-quota").await;

    // A namespace made by someone else is never adopted, and is left as it was.
    let foreign = unique_name("foreign");
    let foreign_ns: Namespace = serde_json::from_value(json!({"metadata": {"name": foreign, "annotations": {"owner": "bob@example.com"}}})).unwrap();
    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces.create(&PostParams::default(), &foreign_ns).await.unwrap();
    profiles.create(&PostParams::default(), &profile(&foreign, json!({"owner": {"kind": "User", "name": "alice@example.com"}}))).await.unwrap();
    let refused = ready_condition(&profiles, &foreign, false).await;
    assert_eq!(refused.reason, "NamespaceOwnedByOther");
    assert!(refused.message.contains("never adopted"), "{}", refused.message);
    let untouched = namespaces.get(&foreign).await.unwrap();
    assert_eq!(untouched.annotations().get("owner").map(String::as_str), Some("bob@example.com"));
    assert!(untouched.labels().get("istio-injection").is_none() && untouched.owner_references().is_empty());
    assert!(Api::<RoleBinding>::namespaced(client.clone(), &foreign).get_opt("namespaceAdmin").await.unwrap().is_none());

    // A bad Profile: a condition naming the field, nothing created.
    let bad = unique_name("bad");
    profiles.create(&PostParams::default(), &profile(&bad, json!({"owner": {"kind": "User", "name": "carol@example.com"}, "plugins": [{"kind": "AzureMagic"}]}))).await.unwrap();
    let invalid = ready_condition(&profiles, &bad, false).await;
    assert_eq!((invalid.reason.as_str(), invalid.message.as_str()), ("InvalidSpec", "spec.plugins[0].kind: unknown plugin \"AzureMagic\"; allowed: WorkloadIdentity, AwsIamForServiceAccount"));
    assert!(namespaces.get_opt(&bad).await.unwrap().is_none(), "a namespace was made for an invalid Profile");

    // Contributors through KFAM: identity required, owners and admins only.
    let binding = json!({"user": {"kind": "User", "name": "bob@example.com"}, "referredNamespace": alice, "RoleRef": {"kind": "ClusterRole", "name": "edit"}});
    let bindings_url = format!("{kfam}/bindings");
    let post = |headers: &'static [(&'static str, &'static str)]| http_request("POST", &bindings_url, headers, Some(&binding));
    assert_eq!(post(&[]).await.0, 401);
    assert_eq!(post(&[("kubeflow-userid", "bob@example.com")]).await.0, 403);
    let (status, body) = post(&[("kubeflow-userid", "alice@example.com")]).await;
    assert_eq!(status, 200, "{body}");
    let contributor = role_bindings.get("user-bob-example-com-clusterrole-edit").await.unwrap();
    assert_eq!(contributor.role_ref.name, "kubeflow-edit");
    assert_eq!((contributor.annotations()["user"].as_str(), contributor.annotations()["role"].as_str()), ("bob@example.com", "edit"));
    let contributor_policy = authorization_policies(&client, &alice).get("user-bob-example-com-clusterrole-edit").await.unwrap();
    assert_eq!(contributor_policy.data["spec"]["rules"][0]["when"][0]["values"], json!(["bob@example.com"]));
    let (status, listed) = http_request("GET", &format!("{kfam}/bindings?namespace={alice}"), &[], None).await;
    assert_eq!(status, 200);
    let listed: Value = serde_json::from_str(&listed).unwrap();
    let mut entries: Vec<(String, String)> = listed["bindings"].as_array().unwrap().iter().map(|b| (b["user"]["name"].as_str().unwrap().into(), b["RoleRef"]["name"].as_str().unwrap().into())).collect();
    entries.sort();
    assert_eq!(entries, [("alice@example.com".to_string(), "admin".to_string()), ("bob@example.com".to_string(), "edit".to_string())]);
    // The contributor's binding is not the Profile's: reconciles leave it alone.
    profiles.patch(&alice, &PatchParams::default(), &Patch::Merge(json!({"metadata": {"labels": {"touched": "yes"}}}))).await.unwrap();
    ready_condition(&profiles, &alice, true).await;
    assert!(role_bindings.get_opt("user-bob-example-com-clusterrole-edit").await.unwrap().is_some());
    let delete = |headers: &'static [(&'static str, &'static str)]| http_request("DELETE", &bindings_url, headers, Some(&binding));
    assert_eq!(delete(&[("kubeflow-userid", "bob@example.com")]).await.0, 403);
    assert_eq!(delete(&[("kubeflow-userid", "admin@example.com")]).await.0, 200);
    gone(&role_bindings, "user-bob-example-com-clusterrole-edit").await;
    gone(&authorization_policies(&client, &alice), "user-bob-example-com-clusterrole-edit").await;

    // Deleting a Profile deletes its namespace.
    delete_profile(&profiles, &alice).await;
    gone(&namespaces, &alice).await;
    delete_profile(&profiles, &bad).await;
    delete_profile(&profiles, &foreign).await;
    assert!(namespaces.get_opt(&foreign).await.unwrap().is_some(), "the foreign namespace was deleted with the refused Profile");
    namespaces.delete(&foreign, &DeleteParams::default()).await.unwrap();

    // Uninstalling the component keeps the CRD and every Profile with its namespace.
    let dave = unique_name("dave");
    profiles.create(&PostParams::default(), &profile(&dave, json!({"owner": {"kind": "User", "name": "dave@example.com"}}))).await.unwrap();
    ready_condition(&profiles, &dave, true).await;
    controllers.delete("profiles", &DeleteParams::default()).await.unwrap();
    gone(&controllers, "profiles").await;
    assert!(Api::<CustomResourceDefinition>::all(client.clone()).get_opt("profiles.kubeflow.org").await.unwrap().is_some(), "Profile CRD deleted on uninstall");
    assert!(profiles.get_opt(&dave).await.unwrap().is_some(), "a Profile was deleted on uninstall");
    assert!(namespaces.get_opt(&dave).await.unwrap().is_some(), "a profile namespace was deleted on uninstall");

    // Clean up: with no ProfileController nobody handles the finalizer any more.
    profiles.patch(&dave, &PatchParams::default(), &Patch::Merge(json!({"metadata": {"finalizers": null}}))).await.unwrap();
    profiles.delete(&dave, &DeleteParams::default()).await.unwrap();
}
