//! The profiles operator, installed from deploy/profiles and run on the host with that package's
//! ServiceAccount, against the real control plane: the component installs the Profile CRD and the
//! Kubeflow roles; each Profile gets upstream's objects; deletes heal, quota edits apply; a
//! foreign namespace, a reserved name and a bad Profile are refused without changes; contributors
//! come and go through the KFAM API — every route needs a bearer token (TokenReview), the user-id
//! header counts only from a trusted proxy, owners and admins only, bindings only in namespaces a
//! Profile made; registration through KFAM is the policy's (no ServiceAccount registers itself, one
//! Profile per user even across two replicas, the cluster's quota rather than the registrant's,
//! plugins only from admins, `Disabled` leaves it to admins); deleting a Profile
//! deletes its namespace; uninstalling the component keeps the CRD and every Profile. And one
//! ProfileController is the cluster's settings: another one, even an older one, is Degraded and
//! changes nothing.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, ResourceQuota, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, RoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use kubeflow_crds::component::ComponentPhase;
use kubeflow_crds::profile::Profile;
use kubeflow_crds::{ConditionStatus, ProfileController};
use kubeflow_e2e::*;
use serde_json::{Value, json};

/// Istio's AuthorizationPolicy API, as an installed Istio (1.4+) would serve it.
async fn ensure_authorization_policy_crd(client: &Client) {
    serve_kind(client, "security.istio.io", "AuthorizationPolicy", "authorizationpolicies", &["v1beta1"]).await;
}

fn authorization_policies(client: &Client, namespace: &str) -> Api<DynamicObject> {
    let resource = ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("security.istio.io", "v1beta1", "AuthorizationPolicy"), "authorizationpolicies");
    Api::namespaced_with(client.clone(), namespace, &resource)
}

/// Profile `name` of the test of namespace `test`, whose end releases it if the test did not
/// ([`TEST_NAMESPACE_LABEL`]).
fn profile(test: &TestNamespace, name: &str, spec: Value) -> Profile {
    let labels = json!({TEST_NAMESPACE_LABEL: test.name});
    serde_json::from_value(json!({"apiVersion": "kubeflow.org/v1", "kind": "Profile", "metadata": {"name": name, "labels": labels}, "spec": spec})).unwrap()
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

/// A token of ServiceAccount `namespace/name`, made for the test: a bearer token the API server's
/// TokenReview accepts (username `system:serviceaccount:<namespace>:<name>`).
async fn token_of(client: &Client, namespace: &str, name: &str) -> String {
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), namespace);
    let account: ServiceAccount = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
    match accounts.create(&PostParams::default(), &account).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => panic!("create ServiceAccount {namespace}/{name}: {e}"),
    }
    let request = TokenRequest { spec: TokenRequestSpec { expiration_seconds: Some(3600), ..Default::default() }, ..Default::default() };
    accounts.create_token_request(name, &PostParams::default(), &request).await.unwrap().status.unwrap().token
}

/// Who a KFAM request comes from: a bearer token, and the user a proxy says it acts for.
#[derive(Clone, Copy)]
struct Identity<'a> {
    token: Option<&'a str>,
    user: Option<&'a str>,
}

/// Names the token by its length only, so failure messages carry no credential.
impl std::fmt::Debug for Identity<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Identity").field("token", &self.token.map(|t| format!("<{} bytes>", t.len()))).field("user", &self.user).finish()
    }
}

const NOBODY: Identity<'static> = Identity { token: None, user: None };

/// One KFAM request, answered as it is: the rate limiter's 429 included.
async fn kfam_once(method: &str, url: &str, who: Identity<'_>, body: Option<&Value>) -> (u16, String) {
    let authorization = who.token.map(|t| format!("Bearer {t}"));
    let mut headers: Vec<(&str, &str)> = Vec::new();
    if let Some(authorization) = &authorization {
        headers.push(("Authorization", authorization));
    }
    if let Some(user) = who.user {
        headers.push(("kubeflow-userid", user));
    }
    http_request(method, url, &headers, body).await
}

/// A KFAM request from a well-behaved client: a 429 is waited out for the time its message names,
/// then the request is sent again, so checks that are not about the rate limit never meet it
/// (a caller's burst is 20, and one test sends more).
async fn kfam(method: &str, url: &str, who: Identity<'_>, body: Option<&Value>) -> (u16, String) {
    loop {
        let (status, message) = kfam_once(method, url, who, body).await;
        let wait = message.split_once("retry in ").and_then(|(_, rest)| rest.split_whitespace().next()?.parse::<u64>().ok());
        match (status, wait) {
            (429, Some(ms)) => tokio::time::sleep(Duration::from_millis(ms)).await,
            _ => return (status, message),
        }
    }
}

/// The (subject, role) of every KFAM listing entry, sorted.
fn entries(listed: &str) -> Vec<(String, String)> {
    let listed: Value = serde_json::from_str(listed).unwrap_or_else(|e| panic!("{e}: {listed}"));
    let mut entries: Vec<(String, String)> = listed["bindings"].as_array().unwrap().iter().map(|b| (b["user"]["name"].as_str().unwrap().into(), b["RoleRef"]["name"].as_str().unwrap().into())).collect();
    entries.sort();
    entries
}

fn pairs(p: &[(&str, &str)]) -> Vec<(String, String)> {
    p.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect()
}

/// The RoleBindings KFAM made in `namespace` for `user` as `role`, found by label and annotations.
async fn kfam_role_bindings(client: &Client, namespace: &str, user: &str, role: &str) -> Vec<RoleBinding> {
    let all = Api::<RoleBinding>::namespaced(client.clone(), namespace).list(&ListParams::default().labels("app.kubernetes.io/managed-by=kfam")).await.unwrap().items;
    all.into_iter().filter(|rb| rb.annotations().get("user").map(String::as_str) == Some(user) && rb.annotations().get("role").map(String::as_str) == Some(role)).collect()
}

/// How many LIST requests of Profiles, Namespaces and RoleBindings the API server has served
/// (its `apiserver_request_total`).
async fn list_requests(client: &Client) -> u64 {
    let metrics = client.request_text(http::Request::get("/metrics").body(Vec::new()).unwrap()).await.unwrap();
    let listed = |line: &&str| line.starts_with("apiserver_request_total{") && line.contains("verb=\"LIST\"") && ["profiles", "namespaces", "rolebindings"].iter().any(|r| line.contains(&format!("resource=\"{r}\"")));
    metrics.lines().filter(listed).filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok()).sum::<f64>() as u64
}

/// A namespace's labels, annotations and owner references: what a refused Profile must not change.
fn shape(ns: &Namespace) -> (BTreeMap<String, String>, BTreeMap<String, String>, usize) {
    (ns.labels().clone(), ns.annotations().clone(), ns.owner_references().len())
}

/// The tests of this file one at a time: each runs a profiles operator, and every profiles
/// operator reconciles every Profile (cluster-scoped) and, watching all namespaces, every
/// ProfileController.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A ProfileController named `profiles` in `namespace`, with `settings` besides version and target.
fn profile_controller(target: &str, settings: Value) -> ProfileController {
    let mut spec = json!({"version": "v1.3.0", "targetNamespace": target});
    spec.as_object_mut().unwrap().extend(settings.as_object().unwrap().clone());
    serde_json::from_value(json!({"apiVersion": "components.kubeflow.org/v1alpha1", "kind": "ProfileController", "metadata": {"name": "profiles"}, "spec": spec})).unwrap()
}

#[tokio::test]
async fn profiles_make_tenants_and_kfam_shares_them() {
    let _serial = one_at_a_time();
    let client = client().await;
    install_crds(&client).await;
    ensure_authorization_policy_crd(&client).await;
    let ns = TestNamespace::create(&client, "e2e-profiles").await;
    let kubeconfig = install_package(&client, "profiles").await;
    let kfam_port = free_port();
    let kfam_url = format!("http://127.0.0.1:{kfam_port}/kfam/v1");
    let kfam_addr = format!("--kfam-addr=127.0.0.1:{kfam_port}");
    // As deploy/ runs it: in the operators' namespace, where its registration claims go.
    let replica = |kfam_addr: &str| {
        OperatorProcess::start("profiles-operator", &["--namespace", &ns.name, kfam_addr], &[("KUBECONFIG", kubeconfig.to_str().unwrap()), ("POD_NAMESPACE", OPERATORS_NAMESPACE)])
    };
    let start_operator = || replica(&kfam_addr);
    let operator = start_operator();
    operator.wait_ready().await;

    // Test identities, all ServiceAccounts of the test namespace: the dashboard (a trusted proxy),
    // carol (owns a Profile as herself) and mallory (trusted with nothing).
    let dashboard_user = format!("system:serviceaccount:{}:dashboard", ns.name);
    let dashboard = token_of(&client, &ns.name, "dashboard").await;
    let carol = token_of(&client, &ns.name, "carol").await;
    let mallory = token_of(&client, &ns.name, "mallory").await;
    let via_dashboard = |user| Identity { token: Some(&dashboard), user: Some(user) };

    // The component: Profile CRD (v1 stored, v1beta1 served) and the Kubeflow roles.
    let target = TestNamespace::adopt(format!("{}-kf", ns.name));
    let controllers: Api<ProfileController> = Api::namespaced(client.clone(), &ns.name);
    let resource: ProfileController = serde_json::from_value(json!({
        "apiVersion": "components.kubeflow.org/v1alpha1", "kind": "ProfileController", "metadata": {"name": "profiles"},
        "spec": {
            "version": "v1.3.0", "targetNamespace": target.name, "clusterAdmins": ["admin@example.com"], "trustedProxies": [dashboard_user],
            "registeredQuota": {"hard": {"cpu": "4", "requests.nvidia.com/gpu": "1"}},
        },
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
    profiles.create(&PostParams::default(), &profile(&ns, &alice, json!({"owner": {"kind": "User", "name": "alice@example.com"}, "resourceQuotaSpec": {"hard": {"cpu": "2"}}}))).await.unwrap();
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
    // Heal: an owned object someone else edited is put back (the controller sees its resource
    // version move past the one its own apply returned).
    let owner_subjects = role_bindings.get("namespaceAdmin").await.unwrap().subjects;
    let intruder = json!({"subjects": [{"kind": "User", "name": "mallory@example.com", "apiGroup": "rbac.authorization.k8s.io"}]});
    role_bindings.patch("namespaceAdmin", &PatchParams::default(), &Patch::Merge(intruder)).await.unwrap();
    eventually("namespaceAdmin's subjects put back", || async {
        let subjects = role_bindings.get("namespaceAdmin").await.map_err(|e| e.to_string())?.subjects;
        if subjects == owner_subjects { Ok(()) } else { Err(format!("{subjects:?}")) }
    })
    .await;

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
    let foreign_ns: Namespace = serde_json::from_value(json!({"metadata": {"name": foreign, "annotations": {"owner": "bob@example.com"}, "labels": {"team": "bob"}}})).unwrap();
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let foreign_before = shape(&namespaces.create(&PostParams::default(), &foreign_ns).await.unwrap());
    profiles.create(&PostParams::default(), &profile(&ns, &foreign, json!({"owner": {"kind": "User", "name": "alice@example.com"}}))).await.unwrap();
    let refused = ready_condition(&profiles, &foreign, false).await;
    assert_eq!(refused.reason, "NamespaceOwnedByOther");
    assert!(refused.message.contains("never adopted"), "{}", refused.message);
    assert_eq!(shape(&namespaces.get(&foreign).await.unwrap()), foreign_before, "a refused Profile changed the namespace");
    assert!(Api::<RoleBinding>::namespaced(client.clone(), &foreign).get_opt("namespaceAdmin").await.unwrap().is_none());

    // A reserved name: refused, whether its namespace exists (left exactly as it was) or not
    // (never made). The CRD refuses it at admission; the controller's own refusal (a condition
    // and a Warning Event, for a Profile stored before that rule) takes the other branch.
    let reserved_existing = unique_name("knative-e2e");
    let reserved_ns: Namespace = serde_json::from_value(json!({"metadata": {"name": reserved_existing, "labels": {"serving": "system"}}})).unwrap();
    let reserved_before = shape(&namespaces.create(&PostParams::default(), &reserved_ns).await.unwrap());
    let reserved_missing = unique_name("knative-e2e");
    let mut refused_reserved = Vec::new();
    for name in [&reserved_existing, &reserved_missing] {
        match profiles.create(&PostParams::default(), &profile(&ns, name, json!({"owner": {"kind": "User", "name": "alice@example.com"}}))).await {
            Ok(_) => {
                let condition = ready_condition(&profiles, name, false).await;
                assert_eq!(condition.reason, "ReservedName", "{}", condition.message);
                assert!(condition.message.starts_with(&format!("metadata.name: {name:?} is reserved (matches \"knative-*\")")), "{}", condition.message);
                eventually(&format!("a ReservedName Warning Event for Profile {name}"), || async {
                    if warning_events(&client, "default", name, "ReservedName").await.is_empty() { Err("none yet") } else { Ok(()) }
                })
                .await;
                refused_reserved.push(name.clone());
            }
            Err(kube::Error::Api(e)) if e.code == 422 => assert!(e.message.contains("metadata.name"), "{}", e.message),
            Err(e) => panic!("create Profile {name}: {e}"),
        }
    }
    assert_eq!(shape(&namespaces.get(&reserved_existing).await.unwrap()), reserved_before, "a reserved-name Profile changed the namespace");
    assert!(namespaces.get_opt(&reserved_missing).await.unwrap().is_none(), "a namespace was made for a reserved name");

    // A bad Profile: a condition naming the field, nothing created.
    let bad = unique_name("bad");
    profiles.create(&PostParams::default(), &profile(&ns, &bad, json!({"owner": {"kind": "User", "name": "carol@example.com"}, "plugins": [{"kind": "AzureMagic"}]}))).await.unwrap();
    let invalid = ready_condition(&profiles, &bad, false).await;
    assert_eq!((invalid.reason.as_str(), invalid.message.as_str()), ("InvalidSpec", "spec.plugins[0].kind: unknown plugin \"AzureMagic\"; allowed: WorkloadIdentity, AwsIamForServiceAccount"));
    assert!(namespaces.get_opt(&bad).await.unwrap().is_none(), "a namespace was made for an invalid Profile");

    // KFAM: no route answers without a token, nor on a header alone, nor on a header from a
    // token that is not a trusted proxy's, nor on a token the API server does not accept.
    let binding = json!({"user": {"kind": "User", "name": "bob@example.com"}, "referredNamespace": alice, "RoleRef": {"kind": "ClusterRole", "name": "edit"}});
    let admin_binding = json!({"user": {"kind": "User", "name": "mallory@example.com"}, "referredNamespace": alice, "RoleRef": {"kind": "ClusterRole", "name": "admin"}});
    let new_profile = json!({"apiVersion": "kubeflow.org/v1", "kind": "Profile", "metadata": {"name": unique_name("kfam")}, "spec": {"owner": {"kind": "User", "name": "admin@example.com"}}});
    let bindings_url = format!("{kfam_url}/bindings");
    let routes: Vec<(&str, String, Option<&Value>)> = vec![
        ("GET", format!("http://127.0.0.1:{kfam_port}/kfam/"), None),
        ("GET", bindings_url.clone(), None),
        ("GET", format!("{bindings_url}?namespace={alice}"), None),
        ("POST", bindings_url.clone(), Some(&admin_binding)),
        ("DELETE", bindings_url.clone(), Some(&binding)),
        ("POST", format!("{kfam_url}/profiles"), Some(&new_profile)),
        ("DELETE", format!("{kfam_url}/profiles/{alice}"), None),
        ("GET", format!("{kfam_url}/role/clusteradmin?user=admin@example.com"), None),
    ];
    let forged = [
        NOBODY,
        Identity { token: None, user: Some("admin@example.com") },
        Identity { token: Some(&mallory), user: Some("admin@example.com") },
        Identity { token: Some(&carol), user: Some("admin@example.com") },
        Identity { token: Some("not-a-token"), user: None },
        Identity { token: Some("not-a-token"), user: Some("admin@example.com") },
    ];
    for (method, url, body) in &routes {
        for who in forged {
            let (status, message) = kfam(method, url, who, *body).await;
            assert_eq!(status, 401, "{method} {url} as {who:?}: {message}");
        }
    }
    let (_, message) = kfam("GET", &bindings_url, Identity { token: Some(&mallory), user: Some("admin@example.com") }, None).await;
    assert!(message.contains("trustedProxies"), "{message}");
    // None of those requests changed anything.
    assert!(profiles.get_opt(&alice).await.unwrap().is_some_and(|p| p.metadata.deletion_timestamp.is_none()));
    assert!(kfam_role_bindings(&client, &alice, "mallory@example.com", "admin").await.is_empty());
    assert!(profiles.get_opt(new_profile["metadata"]["name"].as_str().unwrap()).await.unwrap().is_none());

    // Contributors through KFAM: owners and admins only.
    assert_eq!(kfam("POST", &bindings_url, via_dashboard("bob@example.com"), Some(&binding)).await.0, 403);
    assert_eq!(kfam("POST", &bindings_url, Identity { token: Some(&mallory), user: None }, Some(&binding)).await.0, 403);
    let (status, body) = kfam("POST", &bindings_url, via_dashboard("alice@example.com"), Some(&binding)).await;
    assert_eq!(status, 200, "{body}");
    let contributor = kfam_role_bindings(&client, &alice, "bob@example.com", "edit").await;
    assert_eq!(contributor.len(), 1);
    let contributor_name = contributor[0].name_any();
    assert!(contributor_name.starts_with("user-bob-example-com-clusterrole-edit-"), "{contributor_name}");
    assert_eq!(contributor[0].role_ref.name, "kubeflow-edit");
    let contributor_policy = authorization_policies(&client, &alice).get(&contributor_name).await.unwrap();
    assert_eq!(contributor_policy.data["spec"]["rules"][0]["when"][0]["values"], json!(["bob@example.com"]));

    // Names never collide: `bob.smith` and `bob-smith` (one KFAM name upstream) get one binding each,
    // and removing one leaves the other.
    let smith = |name: &str| json!({"user": {"kind": "User", "name": name}, "referredNamespace": alice, "RoleRef": {"kind": "ClusterRole", "name": "view"}});
    for name in ["bob.smith@example.com", "bob-smith@example.com"] {
        assert_eq!(kfam("POST", &bindings_url, via_dashboard("alice@example.com"), Some(&smith(name))).await.0, 200);
    }
    let dotted = kfam_role_bindings(&client, &alice, "bob.smith@example.com", "view").await;
    let dashed = kfam_role_bindings(&client, &alice, "bob-smith@example.com", "view").await;
    assert_eq!((dotted.len(), dashed.len()), (1, 1));
    assert_ne!(dotted[0].name_any(), dashed[0].name_any());
    assert_eq!(dotted[0].subjects.as_ref().unwrap()[0].name, "bob.smith@example.com");
    assert_eq!(kfam("DELETE", &bindings_url, via_dashboard("alice@example.com"), Some(&smith("bob.smith@example.com"))).await.0, 200);
    gone(&role_bindings, &dotted[0].name_any()).await;
    assert!(role_bindings.get_opt(&dashed[0].name_any()).await.unwrap().is_some(), "removing bob.smith removed bob-smith");
    assert_eq!(kfam("DELETE", &bindings_url, via_dashboard("alice@example.com"), Some(&smith("bob-smith@example.com"))).await.0, 200);
    gone(&role_bindings, &dashed[0].name_any()).await;

    // Listing shows each caller only what it may see.
    let list_alice = format!("{bindings_url}?namespace={alice}");
    let (status, listed) = kfam("GET", &list_alice, via_dashboard("alice@example.com"), None).await;
    assert_eq!(status, 200, "{listed}");
    assert_eq!(entries(&listed), pairs(&[("alice@example.com", "admin"), ("bob@example.com", "edit")]));
    assert_eq!(entries(&kfam("GET", &list_alice, via_dashboard("admin@example.com"), None).await.1).len(), 2);
    assert_eq!(entries(&kfam("GET", &list_alice, via_dashboard("bob@example.com"), None).await.1), pairs(&[("bob@example.com", "edit")]));
    assert!(entries(&kfam("GET", &bindings_url, via_dashboard("eve@example.com"), None).await.1).is_empty());
    assert!(entries(&kfam("GET", &bindings_url, Identity { token: Some(&mallory), user: None }, None).await.1).is_empty());

    // Only cluster admins ask about others.
    let is_admin = |user: &str| format!("{kfam_url}/role/clusteradmin?user={user}");
    assert_eq!(kfam("GET", &is_admin("admin@example.com"), via_dashboard("bob@example.com"), None).await.0, 403);
    assert_eq!(kfam("GET", &is_admin("bob@example.com"), via_dashboard("bob@example.com"), None).await, (200, "false".to_string()));
    assert_eq!(kfam("GET", &is_admin("admin@example.com"), via_dashboard("admin@example.com"), None).await, (200, "true".to_string()));
    assert_eq!(kfam("GET", &is_admin("bob@example.com"), via_dashboard("admin@example.com"), None).await, (200, "false".to_string()));

    // Listings come from the operator's caches: however many are asked, the API server serves no
    // list of Profiles, Namespaces or RoleBindings for them (only the TokenReview per request).
    // The API server counts every client's lists: another one's (a controller's informer
    // re-listing) may fall in a window, so a window with lists is measured again, up to three
    // times. A KFAM that listed would list in every window, eleven times at least.
    let mut windows = Vec::new();
    for _ in 0..3 {
        let lists_before = list_requests(&client).await;
        let everything = entries(&kfam("GET", &bindings_url, via_dashboard("admin@example.com"), None).await.1);
        assert!(everything.contains(&("bob@example.com".to_string(), "edit".to_string())), "{everything:?}");
        for _ in 0..10 {
            assert_eq!(entries(&kfam("GET", &bindings_url, via_dashboard("admin@example.com"), None).await.1), everything);
        }
        windows.push(list_requests(&client).await - lists_before);
        if windows.last() == Some(&0) {
            break;
        }
    }
    assert_eq!(windows.last(), Some(&0), "KFAM listed from the API server: lists per window of 11 requests {windows:?}");

    // Rate-limited per caller: a flood gets 429 after its burst, and another caller is served meanwhile.
    let flooder = token_of(&client, &ns.name, "flooder").await;
    let mut refused = None;
    for _ in 0..40 {
        let (status, message) = kfam_once("GET", &format!("{kfam_url}/role/clusteradmin"), Identity { token: Some(&flooder), user: None }, None).await;
        if status == 429 {
            refused = Some(message);
            break;
        }
        assert_eq!(status, 200, "{message}");
    }
    let refused = refused.expect("40 requests at once were all served");
    assert!(refused.starts_with(&format!("too many requests from system:serviceaccount:{}:flooder: at most 5 per second (20 at once)", ns.name)), "{refused}");
    assert_eq!(kfam("GET", &is_admin("bob@example.com"), via_dashboard("bob@example.com"), None).await, (200, "false".to_string()), "another caller held back");

    // A Profile owned by a ServiceAccount: its own token, no proxy.
    let carols = unique_name("carol");
    profiles.create(&PostParams::default(), &profile(&ns, &carols, json!({"owner": {"kind": "ServiceAccount", "name": "carol", "namespace": ns.name}}))).await.unwrap();
    ready_condition(&profiles, &carols, true).await;
    let dan = json!({"user": {"kind": "User", "name": "dan@example.com"}, "referredNamespace": carols, "RoleRef": {"kind": "ClusterRole", "name": "view"}});
    assert_eq!(kfam("POST", &bindings_url, Identity { token: Some(&mallory), user: None }, Some(&dan)).await.0, 403);
    let (status, body) = kfam("POST", &bindings_url, Identity { token: Some(&carol), user: None }, Some(&dan)).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(kfam_role_bindings(&client, &carols, "dan@example.com", "view").await.len(), 1);
    let (_, listed) = kfam("GET", &format!("{bindings_url}?namespace={carols}"), Identity { token: Some(&carol), user: None }, None).await;
    assert_eq!(entries(&listed), pairs(&[("carol", "admin"), ("dan@example.com", "view")]));
    assert_eq!(kfam("DELETE", &bindings_url, Identity { token: Some(&carol), user: None }, Some(&dan)).await.0, 200);

    // Bindings only in namespaces a Profile made: the refused Profile's namespace is not one.
    let into_foreign = json!({"user": {"kind": "User", "name": "bob@example.com"}, "referredNamespace": foreign, "RoleRef": {"kind": "ClusterRole", "name": "admin"}});
    let (status, message) = kfam("POST", &bindings_url, via_dashboard("alice@example.com"), Some(&into_foreign)).await;
    assert_eq!(status, 409, "{message}");
    assert!(message.contains("was not made by Profile"), "{message}");
    assert!(Api::<RoleBinding>::namespaced(client.clone(), &foreign).list(&ListParams::default()).await.unwrap().items.iter().all(|rb| rb.annotations().get("user").is_none()));
    assert!(authorization_policies(&client, &foreign).list(&ListParams::default()).await.unwrap().items.is_empty());
    assert_eq!(shape(&namespaces.get(&foreign).await.unwrap()), foreign_before);
    // ... nor does the listing show anything of that namespace.
    assert!(entries(&kfam("GET", &format!("{bindings_url}?namespace={foreign}"), via_dashboard("admin@example.com"), None).await.1).is_empty());

    // Registration: a ServiceAccount never registers itself, whatever the setting: 403, nothing made.
    let profiles_url = format!("{kfam_url}/profiles");
    let proposed = |name: &str, owner: Value| json!({"apiVersion": "kubeflow.org/v1", "kind": "Profile", "metadata": {"name": name}, "spec": {"owner": owner}});
    let user = |name: &str| json!({"kind": "User", "name": name});
    let robots = unique_name("robot");
    for (token, owner) in [(&mallory, json!({"kind": "ServiceAccount", "name": "mallory", "namespace": ns.name})), (&carol, user(&format!("system:serviceaccount:{}:carol", ns.name)))] {
        let (status, message) = kfam("POST", &profiles_url, Identity { token: Some(token), user: None }, Some(&proposed(&robots, owner))).await;
        assert_eq!(status, 403, "{message}");
        assert!(message.contains("ServiceAccounts never register a Profile"), "{message}");
    }
    assert!(profiles.get_opt(&robots).await.unwrap().is_none(), "a ServiceAccount registered a Profile");

    // KFAM's profile creation refuses what the controller would: a reserved name, an existing namespace.
    let plain = unique_name("plain");
    namespaces.create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": plain}})).unwrap()).await.unwrap();
    let (status, message) = kfam("POST", &profiles_url, via_dashboard("grace@example.com"), Some(&proposed("knative-mine", user("grace@example.com")))).await;
    assert_eq!(status, 400, "{message}");
    assert!(message.starts_with("metadata.name: \"knative-mine\" is reserved"), "{message}");
    let (status, message) = kfam("POST", &profiles_url, via_dashboard("grace@example.com"), Some(&proposed(&plain, user("grace@example.com")))).await;
    assert_eq!(status, 409, "{message}");
    assert!(profiles.get_opt("knative-mine").await.unwrap().is_none() && profiles.get_opt(&plain).await.unwrap().is_none());
    namespaces.delete(&plain, &DeleteParams::default()).await.unwrap();

    // A person the dashboard names registers one Profile of their own, without plugins.
    let graces = unique_name("grace");
    let (status, message) = kfam("POST", &profiles_url, via_dashboard("grace@example.com"), Some(&proposed(&graces, user("grace@example.com")))).await;
    assert_eq!(status, 200, "{message}");
    ready_condition(&profiles, &graces, true).await;
    // Its quota is the cluster's (registeredQuota), not one of the registrant's choosing.
    let registered_quota = json!({"hard": {"cpu": "4", "requests.nvidia.com/gpu": "1"}});
    assert_eq!(serde_json::to_value(profiles.get(&graces).await.unwrap().spec.resource_quota_spec).unwrap(), registered_quota);
    let quota = Api::<ResourceQuota>::namespaced(client.clone(), &graces).get("kf-resource-quota").await.unwrap();
    assert_eq!(serde_json::to_value(quota.spec).unwrap(), registered_quota);
    let ivans = unique_name("ivan");
    let mut greedy = proposed(&ivans, user("ivan@example.com"));
    greedy["spec"]["resourceQuotaSpec"] = json!({"hard": {"requests.nvidia.com/gpu": "64"}});
    let (status, message) = kfam("POST", &profiles_url, via_dashboard("ivan@example.com"), Some(&greedy)).await;
    assert_eq!(status, 403, "{message}");
    assert!(message.starts_with("spec.resourceQuotaSpec: only cluster admins set a profile's quota"), "{message}");
    assert!(profiles.get_opt(&ivans).await.unwrap().is_none(), "a registrant chose its own quota");

    // One Profile per user across replicas: the same user's registrations sent at once, half to a
    // second replica, make one Profile; the others are told one is made or under way.
    let second_port = free_port();
    let mut second_replica = replica(&format!("--kfam-addr=127.0.0.1:{second_port}"));
    second_replica.wait_ready().await;
    let second_url = format!("http://127.0.0.1:{second_port}/kfam/v1/profiles");
    // Ready is the operator's; KFAM serves once its controller runs (503 until then).
    let second_admin = format!("http://127.0.0.1:{second_port}/kfam/v1/role/clusteradmin");
    eventually("the second replica's KFAM serving", || async {
        let answer = kfam("GET", &second_admin, via_dashboard("judy@example.com"), None).await;
        if answer.0 == 200 { Ok(()) } else { Err(answer) }
    })
    .await;
    // Four users, one after the other: the two replicas' first answers race each time.
    for _ in 0..4 {
        let judy = format!("{}@example.com", unique_name("judy"));
        let racers: Vec<String> = (0..12).map(|_| unique_name("judy")).collect();
        let answers = futures::future::join_all(racers.iter().enumerate().map(|(i, name)| {
            let url = if i % 2 == 0 { profiles_url.clone() } else { second_url.clone() };
            let body = proposed(name, user(&judy));
            let via = Identity { token: Some(&dashboard), user: Some(&judy) };
            async move { kfam("POST", &url, via, Some(&body)).await }
        }))
        .await;
        let judys: Vec<Profile> = profiles.list(&ListParams::default()).await.unwrap().items.into_iter().filter(|p| p.spec.owner.name == judy).collect();
        assert_eq!(judys.len(), 1, "registrations on two replicas made {} Profiles of one user; answers: {answers:?}", judys.len());
        assert_eq!(answers.iter().filter(|(status, _)| *status == 200).count(), 1, "{answers:?}");
        for (status, message) in answers.iter().filter(|(status, _)| *status != 200) {
            assert!(matches!(status, 403 | 409) && message.contains("registration makes one Profile per user"), "{status} {message}");
        }
        delete_profile(&profiles, &judys[0].name_any()).await;
    }
    second_replica.kill();

    let second = unique_name("grace");
    let (status, message) = kfam("POST", &profiles_url, via_dashboard("grace@example.com"), Some(&proposed(&second, user("grace@example.com")))).await;
    assert_eq!((status, message.as_str()), (403, format!("grace@example.com already owns Profile {graces}: registration makes one Profile per user; ask a cluster admin for another").as_str()));
    let heidis = unique_name("heidi");
    let mut with_plugin = proposed(&heidis, user("heidi@example.com"));
    with_plugin["spec"]["plugins"] = json!([{"kind": "WorkloadIdentity", "spec": {"gcpServiceAccount": "heidi@project.iam.gserviceaccount.com"}}]);
    let (status, message) = kfam("POST", &profiles_url, via_dashboard("heidi@example.com"), Some(&with_plugin)).await;
    assert_eq!(status, 403, "{message}");
    assert!(message.starts_with("spec.plugins: only cluster admins"), "{message}");
    let (status, message) = kfam("POST", &profiles_url, via_dashboard("heidi@example.com"), Some(&proposed(&heidis, user("alice@example.com")))).await;
    assert_eq!(status, 403, "{message}");
    assert!(message.starts_with("spec.owner:"), "{message}");
    for name in [&second, &heidis] {
        assert!(profiles.get_opt(name).await.unwrap().is_none(), "refused registration {name} made a Profile");
    }

    // `registration: Disabled`: cluster admins only.
    controllers.patch("profiles", &PatchParams::default(), &Patch::Merge(json!({"spec": {"registration": "Disabled"}}))).await.unwrap();
    // (Waited for with a request refused either way: for its owner under `Users`.)
    eventually("registration Disabled in effect", || async {
        let answer = kfam("POST", &profiles_url, via_dashboard("heidi@example.com"), Some(&proposed(&heidis, user("alice@example.com")))).await;
        if answer.0 == 403 && answer.1.starts_with("registration is Disabled") { Ok(()) } else { Err(answer) }
    })
    .await;
    let (status, message) = kfam("POST", &profiles_url, via_dashboard("heidi@example.com"), Some(&proposed(&heidis, user("heidi@example.com")))).await;
    assert_eq!(status, 403, "{message}");
    assert!(message.starts_with("registration is Disabled"), "{message}");
    assert!(profiles.get_opt(&heidis).await.unwrap().is_none());
    let teams = unique_name("team");
    let (status, message) = kfam("POST", &profiles_url, via_dashboard("admin@example.com"), Some(&proposed(&teams, user("heidi@example.com")))).await;
    assert_eq!(status, 200, "{message}");
    ready_condition(&profiles, &teams, true).await;
    controllers.patch("profiles", &PatchParams::default(), &Patch::Merge(json!({"spec": {"registration": null}}))).await.unwrap();
    delete_profile(&profiles, &graces).await;
    delete_profile(&profiles, &teams).await;

    // The contributor's binding is not the Profile's: reconciles leave it alone.
    profiles.patch(&alice, &PatchParams::default(), &Patch::Merge(json!({"metadata": {"labels": {"touched": "yes"}}}))).await.unwrap();
    ready_condition(&profiles, &alice, true).await;
    assert!(role_bindings.get_opt(&contributor_name).await.unwrap().is_some());
    assert_eq!(kfam("DELETE", &bindings_url, via_dashboard("bob@example.com"), Some(&binding)).await.0, 403);
    assert_eq!(kfam("DELETE", &bindings_url, via_dashboard("admin@example.com"), Some(&binding)).await.0, 200);
    gone(&role_bindings, &contributor_name).await;
    gone(&authorization_policies(&client, &alice), &contributor_name).await;

    // Deleting a Profile deletes its namespace; a refused Profile's namespace survives it.
    delete_profile(&profiles, &alice).await;
    gone(&namespaces, &alice).await;
    delete_profile(&profiles, &bad).await;
    delete_profile(&profiles, &carols).await;
    delete_profile(&profiles, &foreign).await;
    for name in &refused_reserved {
        delete_profile(&profiles, name).await;
    }
    for (name, before) in [(&foreign, &foreign_before), (&reserved_existing, &reserved_before)] {
        holds_for(&namespaces, name, Duration::from_secs(3), |live| {
            if live.metadata.deletion_timestamp.is_some() || shape(live) != *before { Err(format!("{:?}", live.metadata)) } else { Ok(()) }
        })
        .await;
        namespaces.delete(name, &DeleteParams::default()).await.unwrap();
    }

    // Uninstalling the component keeps the CRD and every Profile with its namespace; the
    // cluster-wide roles it made go with it (its only install).
    let dave = unique_name("dave");
    profiles.create(&PostParams::default(), &profile(&ns, &dave, json!({"owner": {"kind": "User", "name": "dave@example.com"}}))).await.unwrap();
    ready_condition(&profiles, &dave, true).await;
    controllers.delete("profiles", &DeleteParams::default()).await.unwrap();
    gone(&controllers, "profiles").await;
    assert!(Api::<CustomResourceDefinition>::all(client.clone()).get_opt("profiles.kubeflow.org").await.unwrap().is_some(), "Profile CRD deleted on uninstall");
    assert!(profiles.get_opt(&dave).await.unwrap().is_some(), "a Profile was deleted on uninstall");
    assert!(namespaces.get_opt(&dave).await.unwrap().is_some(), "a profile namespace was deleted on uninstall");
    for role in ["kubeflow-admin", "kubeflow-edit", "kubeflow-view", "kubeflow-kubernetes-admin"] {
        gone(&roles, role).await;
    }

    // Clean up: with no ProfileController nobody handles the finalizer any more.
    profiles.patch(&dave, &PatchParams::default(), &Patch::Merge(json!({"metadata": {"finalizers": null}}))).await.unwrap();
    profiles.delete(&dave, &DeleteParams::default()).await.unwrap();
}

/// One ProfileController is the cluster's settings: the oldest managed one in the operator's
/// namespace (here `POD_NAMESPACE`, as a pod would say). Another one in another namespace, even
/// an older one (which used to win), becomes Degraded naming the settings, installs nothing, and
/// its settings — edited too — never reach a Profile.
#[tokio::test]
async fn only_the_clusters_settings_apply() {
    let _serial = one_at_a_time();
    let client = client().await;
    install_crds(&client).await;
    ensure_authorization_policy_crd(&client).await;
    let ns = TestNamespace::create(&client, "e2e-settings").await;
    let other = TestNamespace::create(&client, "e2e-other").await;
    let (target, other_target) = (TestNamespace::adopt(format!("{}-kf", ns.name)), TestNamespace::adopt(format!("{}-kf", other.name)));
    let kubeconfig = install_package(&client, "profiles").await;

    // The other one first, so it is the oldest.
    let others: Api<ProfileController> = Api::namespaced(client.clone(), &other.name);
    others.create(&PostParams::default(), &profile_controller(&other_target.name, json!({"namespaceLabels": {"e2e-settings": "other"}}))).await.unwrap();
    tokio::time::sleep(Duration::from_millis(1100)).await; // creation timestamps have whole seconds
    let ours: Api<ProfileController> = Api::namespaced(client.clone(), &ns.name);
    ours.create(&PostParams::default(), &profile_controller(&target.name, json!({"namespaceLabels": {"e2e-settings": "ours"}}))).await.unwrap();
    assert!(others.get("profiles").await.unwrap().metadata.creation_timestamp < ours.get("profiles").await.unwrap().metadata.creation_timestamp);

    // Watching every namespace, its own namespace told as a pod's is.
    let operator = OperatorProcess::start("profiles-operator", &[], &[("KUBECONFIG", kubeconfig.to_str().unwrap()), ("POD_NAMESPACE", &ns.name)]);
    operator.wait_ready().await;
    eventually("our ProfileController Ready", || async {
        let c = ours.get("profiles").await.map_err(|e| e.to_string())?;
        if c.status.as_ref().and_then(|s| s.phase) == Some(ComponentPhase::Ready) { Ok(()) } else { Err(format!("{:?} (log: {})", c.status, operator.log.display())) }
    })
    .await;
    let degraded = |generation: Option<i64>| {
        let others = others.clone();
        let expected = format!("not the cluster's settings: ProfileController {}/profiles is (the oldest managed one in the operator's namespace {})", ns.name, ns.name);
        async move {
            eventually("the other ProfileController Degraded", || async {
                let c = others.get("profiles").await.map_err(|e| e.to_string())?;
                let status = c.status.clone().unwrap_or_default();
                let condition = status.conditions.iter().find(|c| c.type_ == "Degraded" && c.status == ConditionStatus::True).map(|c| c.message.clone()).unwrap_or_default();
                let current = generation.is_none_or(|g| status.observed_generation == Some(g));
                if status.phase == Some(ComponentPhase::Degraded) && current && condition.starts_with(&expected) { Ok(()) } else { Err(format!("{status:?}")) }
            })
            .await
        }
    };
    degraded(None).await;
    // It installed nothing: no settings ConfigMap (nor even its target namespace).
    assert!(Api::<ConfigMap>::namespaced(client.clone(), &other_target.name).get_opt("profiles-config").await.unwrap().is_none());
    assert!(Api::<Namespace>::all(client.clone()).get_opt(&other_target.name).await.unwrap().is_none(), "the other ProfileController made its target namespace");
    assert!(Api::<ConfigMap>::namespaced(client.clone(), &target.name).get_opt("profiles-config").await.unwrap().is_some());

    // A Profile gets our settings, not the older one's.
    let profiles: Api<Profile> = Api::all(client.clone());
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let judy = unique_name("judy");
    profiles.create(&PostParams::default(), &profile(&ns, &judy, json!({"owner": {"kind": "User", "name": "judy@example.com"}}))).await.unwrap();
    ready_condition(&profiles, &judy, true).await;
    let label = |ns: &Namespace| ns.labels().get("e2e-settings").cloned();
    assert_eq!(label(&namespaces.get(&judy).await.unwrap()).as_deref(), Some("ours"));

    // Editing the other one changes nothing either: it stays Degraded, the Profile keeps our label.
    let edited = others.patch("profiles", &PatchParams::default(), &Patch::Merge(json!({"spec": {"namespaceLabels": {"e2e-settings": "other-edited"}}}))).await.unwrap();
    degraded(edited.metadata.generation).await;
    holds_for(&namespaces, &judy, Duration::from_secs(5), |live| if label(live).as_deref() == Some("ours") { Ok(()) } else { Err(format!("{:?}", live.labels())) }).await;
    assert!(Api::<ConfigMap>::namespaced(client.clone(), &other_target.name).get_opt("profiles-config").await.unwrap().is_none());

    // Our edit does apply.
    ours.patch("profiles", &PatchParams::default(), &Patch::Merge(json!({"spec": {"namespaceLabels": {"e2e-settings": "ours-edited"}}}))).await.unwrap();
    eventually("our edited label on the Profile's namespace", || async {
        let live = namespaces.get(&judy).await.map_err(|e| e.to_string())?;
        if label(&live).as_deref() == Some("ours-edited") { Ok(()) } else { Err(format!("{:?}", live.labels())) }
    })
    .await;

    delete_profile(&profiles, &judy).await;
    gone(&namespaces, &judy).await;
    others.delete("profiles", &DeleteParams::default()).await.unwrap();
    ours.delete("profiles", &DeleteParams::default()).await.unwrap();
    gone(&others, "profiles").await;
    gone(&ours, "profiles").await;
}
