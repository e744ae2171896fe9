//! Contributors, the KFAM way: an HTTP API compatible with Kubeflow's access-management service
//! (`/kfam/v1/bindings`, `/kfam/v1/profiles`, `/kfam/v1/role/clusteradmin`), so the dashboard can
//! share a profile with another user or a group as `edit` or `view`.
//!
//! A binding is a RoleBinding plus the mesh object letting the contributor's requests in, both
//! named as KFAM names them (`user-alice-example-com-clusterrole-edit`) and annotated with `user`
//! and `role`. The caller is the value of the user-id header (less the configured prefix); only
//! the profile's owner (a member of an owner Group, by the groups header) or a cluster admin may
//! add or remove bindings. Removal only touches objects this API made for that subject.

use std::sync::{Arc, OnceLock};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State};
use axum::routing::{delete, get, post};
use component_framework::api::ProfileController;
use component_framework::api::component::ProfileControllerSpec;
use component_framework::api::profile::Profile;
use http::{HeaderMap, StatusCode};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams, Preconditions};
use kube::{Api, ResourceExt};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::controller::{Context, api_for};
use crate::tenant::{self, Mesh, ROLE_ANNOTATION, USER_ANNOTATION};

pub const FIELD_MANAGER: &str = "kubeflow-profiles-kfam";
/// `app.kubernetes.io/managed-by` of the objects this API makes.
pub const MANAGED_BY: &str = "kfam";

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Subject {
    pub kind: String,
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_group: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RoleRef {
    #[serde(default)]
    pub kind: String,
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_group: Option<String>,
}

/// KFAM's binding: `user` may act as `RoleRef.name` (`admin`, `edit`, `view`) in `referredNamespace`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct Binding {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<Subject>,
    #[serde(rename = "referredNamespace", default, skip_serializing_if = "String::is_empty")]
    pub referred_namespace: String,
    #[serde(rename = "RoleRef", default, skip_serializing_if = "Option::is_none")]
    pub role_ref: Option<RoleRef>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
}

/// The ClusterRole behind a KFAM role name.
pub fn cluster_role(role: &str) -> Option<&'static str> {
    match role {
        "admin" => Some(tenant::KUBEFLOW_ADMIN),
        "edit" => Some(tenant::KUBEFLOW_EDIT),
        "view" => Some(tenant::KUBEFLOW_VIEW),
        _ => None,
    }
}

/// KFAM's object name for a binding: kind, name, role kind and role, lower-cased, with every run of
/// characters outside `[a-z0-9]` made one `-` (upstream applies that to the name before
/// lower-casing, so upper-case letters in a name become `-` too).
pub fn binding_name(user: &Subject, role: &RoleRef) -> String {
    fn dashes(s: &str) -> String {
        let mut out = String::new();
        for c in s.chars() {
            if c.is_ascii_lowercase() || c.is_ascii_digit() {
                out.push(c);
            } else if !out.ends_with('-') {
                out.push('-');
            }
        }
        out
    }
    let raw = [user.kind.as_str(), &dashes(&user.name), role.kind.as_str(), role.name.as_str()].join("-").to_lowercase();
    dashes(&raw)
}

/// A request that cannot be carried out, with its HTTP status.
#[derive(Debug, PartialEq)]
pub struct Refusal(pub StatusCode, pub String);

fn bad_request(message: impl Into<String>) -> Refusal {
    Refusal(StatusCode::BAD_REQUEST, message.into())
}

/// Checks a binding from a request: subject, namespace, role.
pub fn validate(binding: &Binding) -> Result<(&Subject, &RoleRef, &'static str), Refusal> {
    let user = binding.user.as_ref().ok_or_else(|| bad_request("user: required ({kind: User|Group, name})"))?;
    if !matches!(user.kind.as_str(), "User" | "Group") {
        return Err(bad_request(format!("user.kind: {:?} is not allowed; allowed: User, Group", user.kind)));
    }
    if user.name.trim().is_empty() || user.name.len() > 256 {
        return Err(bad_request("user.name: required, at most 256 characters"));
    }
    if binding.referred_namespace.is_empty() {
        return Err(bad_request("referredNamespace: required (the profile's name)"));
    }
    let role = binding.role_ref.as_ref().ok_or_else(|| bad_request("RoleRef: required ({kind: ClusterRole, name: edit|view})"))?;
    if !role.kind.is_empty() && role.kind != "ClusterRole" {
        return Err(bad_request(format!("RoleRef.kind: {:?} is not allowed; allowed: ClusterRole", role.kind)));
    }
    let cluster_role = cluster_role(&role.name).ok_or_else(|| bad_request(format!("RoleRef.name: {:?} is not a Kubeflow role; allowed: admin, edit, view", role.name)))?;
    Ok((user, role, cluster_role))
}

/// The caller of a request: the user from the user-id header, and groups from the groups header.
#[derive(Debug, Clone, PartialEq)]
pub struct Caller {
    pub user: String,
    pub groups: Vec<String>,
}

pub fn caller(headers: &HeaderMap, settings: &ProfileControllerSpec) -> Result<Caller, Refusal> {
    let unauthenticated = || Refusal(StatusCode::UNAUTHORIZED, format!("no identity: the {} header is required", settings.user_id_header));
    let value = headers.get(settings.user_id_header.as_str()).and_then(|v| v.to_str().ok()).ok_or_else(unauthenticated)?;
    let user = value.strip_prefix(settings.user_id_prefix.as_str()).filter(|u| !u.trim().is_empty()).ok_or_else(unauthenticated)?;
    let groups = headers
        .get(settings.groups_header.as_str())
        .and_then(|v| v.to_str().ok())
        .map(|v| v.split(',').map(|g| g.trim().to_string()).filter(|g| !g.is_empty()).collect())
        .unwrap_or_default();
    Ok(Caller { user: user.to_string(), groups })
}

/// Whether `caller` may change who has access to `profile`: its owner (or a member of an owner
/// Group) or a cluster admin.
pub fn may_manage(caller: &Caller, profile: &Profile, settings: &ProfileControllerSpec) -> bool {
    let owner = &profile.spec.owner;
    settings.cluster_admins.contains(&caller.user)
        || (owner.kind == "User" && owner.name == caller.user)
        || (owner.kind == "Group" && caller.groups.contains(&owner.name))
}

/// The RoleBinding and mesh object of a binding.
pub fn binding_objects(user: &Subject, role: &RoleRef, cluster_role: &str, namespace: &str, settings: &ProfileControllerSpec, mesh: Mesh) -> Vec<Value> {
    let name = binding_name(user, &RoleRef { kind: "ClusterRole".into(), ..role.clone() });
    let metadata = json!({
        "name": name, "namespace": namespace,
        "annotations": {USER_ANNOTATION: user.name, ROLE_ANNOTATION: role.name},
        "labels": {tenant::MANAGED_BY_LABEL: MANAGED_BY},
    });
    let mut objects = vec![json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": metadata,
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": cluster_role},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": user.kind, "name": user.name}],
    })];
    match mesh {
        Mesh::AuthorizationPolicy => objects.push(json!({
            "apiVersion": "security.istio.io/v1beta1", "kind": "AuthorizationPolicy", "metadata": metadata,
            "spec": {"action": "ALLOW", "rules": [tenant::istio_identity(&user.kind, &user.name, None, settings)]},
        })),
        Mesh::IstioRbac => objects.push(json!({
            "apiVersion": "rbac.istio.io/v1alpha1", "kind": "ServiceRoleBinding", "metadata": metadata,
            "spec": {"roleRef": {"kind": "ServiceRole", "name": tenant::SERVICE_ROLE}, "subjects": [tenant::istio_rbac_subject(&user.kind, &user.name, None, settings)]},
        })),
        Mesh::None => {}
    }
    objects
}

/// The controller's context, once the Profile CRD is established.
pub type Shared = Arc<OnceLock<Arc<Context>>>;

type Reply = (StatusCode, String);

fn reply(result: Result<String, Refusal>) -> Reply {
    match result {
        Ok(body) => (StatusCode::OK, body),
        Err(Refusal(status, message)) => (status, message),
    }
}

fn internal(e: impl std::fmt::Display) -> Refusal {
    Refusal(StatusCode::INTERNAL_SERVER_ERROR, e.to_string())
}

/// Settings and context, or why the API cannot answer yet.
fn ready(shared: &Shared) -> Result<(Arc<Context>, Arc<ProfileController>), Refusal> {
    let ctx = shared.get().ok_or_else(|| Refusal(StatusCode::SERVICE_UNAVAILABLE, "Profiles are not served yet: the Profile CRD is not established".into()))?;
    let settings = ctx.settings().ok_or_else(|| Refusal(StatusCode::SERVICE_UNAVAILABLE, "no ProfileController resource is managed".into()))?;
    Ok((ctx.clone(), settings))
}

async fn profile(ctx: &Context, name: &str) -> Result<Profile, Refusal> {
    let profiles: Api<Profile> = Api::all(ctx.client.clone());
    profiles.get_opt(name).await.map_err(internal)?.ok_or_else(|| Refusal(StatusCode::NOT_FOUND, format!("profile {name:?} does not exist")))
}

fn parse<T: for<'de> Deserialize<'de>>(body: &[u8]) -> Result<T, Refusal> {
    serde_json::from_slice(body).map_err(|e| bad_request(format!("body: {e}")))
}

/// A binding request from a caller allowed to change who has access to its profile.
async fn authorized_binding(shared: &Shared, headers: &HeaderMap, body: &[u8]) -> Result<(Arc<Context>, Arc<ProfileController>, Binding), Refusal> {
    let (ctx, settings) = ready(shared)?;
    let caller = caller(headers, &settings.spec)?;
    let binding: Binding = parse(body)?;
    validate(&binding)?;
    let profile = profile(&ctx, &binding.referred_namespace).await?;
    if !may_manage(&caller, &profile, &settings.spec) {
        return Err(Refusal(StatusCode::FORBIDDEN, format!("{} is neither the owner of profile {} nor a cluster admin", caller.user, binding.referred_namespace)));
    }
    Ok((ctx, settings, binding))
}

async fn create_binding(State(shared): State<Shared>, headers: HeaderMap, body: Bytes) -> Reply {
    reply(
        async {
            let (ctx, settings, binding) = authorized_binding(&shared, &headers, &body).await?;
            let (user, role, cluster_role) = validate(&binding)?;
            let mesh = ctx.mesh(&settings.spec);
            for object in binding_objects(user, role, cluster_role, &binding.referred_namespace, &settings.spec, mesh) {
                let name = object["metadata"]["name"].as_str().unwrap_or_default().to_string();
                api_for(&ctx.client, &object).patch(&name, &PatchParams::apply(FIELD_MANAGER).force(), &Patch::Apply(&object)).await.map_err(internal)?;
            }
            Ok(String::new())
        }
        .await,
    )
}

async fn delete_binding(State(shared): State<Shared>, headers: HeaderMap, body: Bytes) -> Reply {
    reply(
        async {
            let (ctx, settings, binding) = authorized_binding(&shared, &headers, &body).await?;
            let (user, role, cluster_role) = validate(&binding)?;
            let mut deleted = 0;
            // Whichever mesh the binding was made for: look for both kinds.
            let mut objects = binding_objects(user, role, cluster_role, &binding.referred_namespace, &settings.spec, Mesh::AuthorizationPolicy);
            objects.extend(binding_objects(user, role, cluster_role, &binding.referred_namespace, &settings.spec, Mesh::IstioRbac).into_iter().skip(1));
            for object in objects {
                let name = object["metadata"]["name"].as_str().unwrap_or_default();
                let api = api_for(&ctx.client, &object);
                let Ok(Some(live)) = api.get_opt(name).await else { continue };
                let made_here = live.labels().get(tenant::MANAGED_BY_LABEL).map(String::as_str) == Some(MANAGED_BY) && live.annotations().get(USER_ANNOTATION) == Some(&user.name);
                if !made_here {
                    continue;
                }
                let params = DeleteParams { preconditions: Some(Preconditions { uid: live.uid(), resource_version: None }), ..Default::default() };
                api.delete(name, &params).await.map_err(internal)?;
                deleted += 1;
            }
            if deleted == 0 {
                return Err(Refusal(StatusCode::NOT_FOUND, format!("{} {} has no {} binding in {}", user.kind, user.name, role.name, binding.referred_namespace)));
            }
            Ok(String::new())
        }
        .await,
    )
}

#[derive(Serialize)]
struct BindingEntries {
    bindings: Vec<Binding>,
}

async fn read_bindings(State(shared): State<Shared>, RawQuery(query): RawQuery) -> Reply {
    reply(
        async {
            let (ctx, _) = ready(&shared)?;
            let query: Vec<(String, String)> = form_urlencoded::parse(query.unwrap_or_default().as_bytes()).into_owned().collect();
            let get = |key: &str| query.iter().find(|(k, _)| k == key).map(|(_, v)| v.clone()).filter(|v| !v.is_empty());
            let namespaces = match get("namespace") {
                Some(ns) => vec![ns],
                None => Api::<Profile>::all(ctx.client.clone()).list_metadata(&ListParams::default()).await.map_err(internal)?.items.iter().map(|p| p.name_any()).collect(),
            };
            let (user, role) = (get("user"), get("role"));
            let mut bindings = Vec::new();
            for namespace in namespaces {
                let role_bindings: Api<k8s_openapi::api::rbac::v1::RoleBinding> = Api::namespaced(ctx.client.clone(), &namespace);
                for rb in role_bindings.list(&ListParams::default()).await.map_err(internal)?.items {
                    let (Some(u), Some(r)) = (rb.annotations().get(USER_ANNOTATION), rb.annotations().get(ROLE_ANNOTATION)) else { continue };
                    if user.as_ref().is_some_and(|x| x != u) || role.as_ref().is_some_and(|x| x != r) {
                        continue;
                    }
                    let Some(subject) = rb.subjects.as_ref().and_then(|s| s.first()) else { continue };
                    bindings.push(Binding {
                        user: Some(Subject { kind: subject.kind.clone(), name: subject.name.clone(), api_group: None }),
                        referred_namespace: namespace.clone(),
                        role_ref: Some(RoleRef { kind: "ClusterRole".into(), name: r.clone(), api_group: None }),
                        status: None,
                    });
                }
            }
            Ok(serde_json::to_string(&BindingEntries { bindings }).expect("bindings serialise"))
        }
        .await,
    )
}

async fn create_profile(State(shared): State<Shared>, headers: HeaderMap, body: Bytes) -> Reply {
    reply(
        async {
            let (ctx, settings) = ready(&shared)?;
            let caller = caller(&headers, &settings.spec)?;
            let profile: Profile = parse(&body)?;
            // Self-registration: a user may create a profile they own; admins any.
            if !may_manage(&caller, &profile, &settings.spec) {
                return Err(Refusal(StatusCode::FORBIDDEN, format!("{} may only create profiles they own", caller.user)));
            }
            let profiles: Api<Profile> = Api::all(ctx.client.clone());
            let params = PostParams { field_manager: Some(FIELD_MANAGER.into()), ..Default::default() };
            profiles.create(&params, &profile).await.map_err(|e| match e {
                kube::Error::Api(s) if s.code == 409 => Refusal(StatusCode::CONFLICT, s.message),
                kube::Error::Api(s) if s.code == 422 || s.code == 400 => bad_request(s.message),
                e => internal(e),
            })?;
            Ok(String::new())
        }
        .await,
    )
}

async fn delete_profile(State(shared): State<Shared>, headers: HeaderMap, Path(name): Path<String>) -> Reply {
    reply(
        async {
            let (ctx, settings) = ready(&shared)?;
            let caller = caller(&headers, &settings.spec)?;
            let profile = profile(&ctx, &name).await?;
            if !may_manage(&caller, &profile, &settings.spec) {
                return Err(Refusal(StatusCode::FORBIDDEN, format!("{} is neither the owner of profile {name} nor a cluster admin", caller.user)));
            }
            let params = DeleteParams { preconditions: Some(Preconditions { uid: profile.uid(), resource_version: None }), ..Default::default() };
            Api::<Profile>::all(ctx.client.clone()).delete(&name, &params).await.map_err(internal)?;
            Ok(String::new())
        }
        .await,
    )
}

async fn cluster_admin(State(shared): State<Shared>, RawQuery(query): RawQuery) -> Reply {
    reply(ready(&shared).map(|(_, settings)| {
        let user = form_urlencoded::parse(query.unwrap_or_default().as_bytes()).find(|(k, _)| k == "user").map(|(_, v)| v.into_owned()).unwrap_or_default();
        settings.spec.cluster_admins.contains(&user).to_string()
    }))
}

pub fn router(shared: Shared) -> Router {
    Router::new()
        .route("/kfam/", get(|| async { "KFAM-compatible access management of the Kubeflow profiles operator" }))
        .route("/kfam/v1/bindings", get(read_bindings).post(create_binding).delete(delete_binding))
        .route("/kfam/v1/profiles", post(create_profile))
        .route("/kfam/v1/profiles/{profile}", delete(delete_profile))
        .route("/kfam/v1/role/clusteradmin", get(cluster_admin))
        .with_state(shared)
}

pub async fn serve(addr: std::net::SocketAddr, shared: Shared) -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    tracing::info!(%addr, "KFAM API listening");
    axum::serve(listener, router(shared)).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> ProfileControllerSpec {
        serde_json::from_value(json!({"version": "v1.3.0", "userIdPrefix": "accounts:", "clusterAdmins": ["root@example.com"]})).unwrap()
    }

    fn user(kind: &str, name: &str) -> Subject {
        Subject { kind: kind.into(), name: name.into(), api_group: None }
    }

    fn role(name: &str) -> RoleRef {
        RoleRef { kind: "ClusterRole".into(), name: name.into(), api_group: None }
    }

    #[test]
    fn binding_names_are_kfams() {
        assert_eq!(binding_name(&user("User", "bob@example.com"), &role("edit")), "user-bob-example-com-clusterrole-edit");
        assert_eq!(binding_name(&user("Group", "ml-team"), &role("view")), "group-ml-team-clusterrole-view");
        // Upstream replaces upper-case letters before lower-casing.
        assert_eq!(binding_name(&user("User", "Bob.Smith@x.io"), &role("edit")), "user-ob-mith-x-io-clusterrole-edit");
    }

    #[test]
    fn a_binding_is_a_role_binding_and_the_mesh_object_kfam_would_make() {
        let objects = binding_objects(&user("User", "bob@example.com"), &role("edit"), "kubeflow-edit", "alice", &settings(), Mesh::AuthorizationPolicy);
        assert_eq!(
            objects[0],
            json!({
                "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                "metadata": {"name": "user-bob-example-com-clusterrole-edit", "namespace": "alice",
                             "annotations": {"user": "bob@example.com", "role": "edit"}, "labels": {"app.kubernetes.io/managed-by": "kfam"}},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "kubeflow-edit"},
                "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "bob@example.com"}],
            })
        );
        assert_eq!(objects[1]["kind"], "AuthorizationPolicy");
        assert_eq!(objects[1]["metadata"]["name"], "user-bob-example-com-clusterrole-edit");
        assert_eq!(objects[1]["spec"]["rules"][0]["when"], json!([{"key": "request.headers[kubeflow-userid]", "values": ["accounts:bob@example.com"]}]));
        let group = binding_objects(&user("Group", "ml"), &role("view"), "kubeflow-view", "alice", &settings(), Mesh::IstioRbac);
        assert_eq!(group[0]["subjects"][0]["kind"], "Group");
        assert_eq!(group[1]["spec"], json!({"roleRef": {"kind": "ServiceRole", "name": "ns-access-istio"}, "subjects": [{"properties": {"request.auth.claims[groups]": "ml"}}]}));
        assert_eq!(binding_objects(&user("User", "b"), &role("view"), "kubeflow-view", "alice", &settings(), Mesh::None).len(), 1);
    }

    #[test]
    fn bad_bindings_say_which_field() {
        let binding = |value: Value| serde_json::from_value::<Binding>(value).unwrap();
        let refused = |b: Binding| validate(&b).unwrap_err().1;
        assert_eq!(refused(binding(json!({"referredNamespace": "a", "RoleRef": {"name": "edit"}}))), "user: required ({kind: User|Group, name})");
        assert_eq!(
            refused(binding(json!({"user": {"kind": "ServiceAccount", "name": "x"}, "referredNamespace": "a", "RoleRef": {"name": "edit"}}))),
            "user.kind: \"ServiceAccount\" is not allowed; allowed: User, Group"
        );
        assert_eq!(
            refused(binding(json!({"user": {"kind": "User", "name": "x"}, "referredNamespace": "a", "RoleRef": {"kind": "ClusterRole", "name": "cluster-admin"}}))),
            "RoleRef.name: \"cluster-admin\" is not a Kubeflow role; allowed: admin, edit, view"
        );
        let ok = binding(json!({"user": {"kind": "User", "name": "x"}, "referredNamespace": "a", "RoleRef": {"kind": "ClusterRole", "name": "view"}}));
        assert_eq!(validate(&ok).unwrap().2, "kubeflow-view");
    }

    #[test]
    fn only_owners_group_members_and_admins_may_manage() {
        let profile = |kind: &str, name: &str| -> Profile {
            serde_json::from_value(json!({"apiVersion": "kubeflow.org/v1", "kind": "Profile", "metadata": {"name": "p"}, "spec": {"owner": {"kind": kind, "name": name}}})).unwrap()
        };
        let s = settings();
        let who = |user: &str, groups: &[&str]| Caller { user: user.into(), groups: groups.iter().map(|g| g.to_string()).collect() };
        assert!(may_manage(&who("alice", &[]), &profile("User", "alice"), &s));
        assert!(!may_manage(&who("mallory", &["alice"]), &profile("User", "alice"), &s));
        assert!(may_manage(&who("root@example.com", &[]), &profile("User", "alice"), &s));
        assert!(may_manage(&who("bob", &["ml"]), &profile("Group", "ml"), &s));
        assert!(!may_manage(&who("bob", &["other"]), &profile("Group", "ml"), &s));
    }

    #[test]
    fn the_caller_comes_from_the_headers_without_the_prefix() {
        let s = settings();
        let mut headers = HeaderMap::new();
        assert_eq!(caller(&headers, &s).unwrap_err().0, StatusCode::UNAUTHORIZED);
        headers.insert("kubeflow-userid", "bob@example.com".parse().unwrap());
        // Without the configured prefix the header does not identify anyone.
        assert_eq!(caller(&headers, &s).unwrap_err().0, StatusCode::UNAUTHORIZED);
        headers.insert("kubeflow-userid", "accounts:bob@example.com".parse().unwrap());
        headers.insert("kubeflow-groups", "ml, ops".parse().unwrap());
        assert_eq!(caller(&headers, &s).unwrap(), Caller { user: "bob@example.com".into(), groups: vec!["ml".into(), "ops".into()] });
    }
}
