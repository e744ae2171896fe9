//! Contributors, the KFAM way: an HTTP API compatible with Kubeflow's access-management service
//! (`/kfam/v1/bindings`, `/kfam/v1/profiles`, `/kfam/v1/role/clusteradmin`), so the dashboard can
//! share a profile with another user or a group as `edit` or `view`.
//!
//! **Who is calling** is never read from a header alone (upstream's KFAM did, kubeflow/kubeflow#6228).
//! Every route needs `Authorization: Bearer <token>`, checked with a TokenReview: the username and
//! groups the API server reports are the caller — a ServiceAccount token, or an OIDC (e.g. Dex) ID
//! token when the API server trusts that issuer. The user-id and groups headers name the caller
//! only when the token itself authenticates as one of `spec.trustedProxies` (a dashboard acting for
//! its user); from anyone else they are refused (401), not ignored, so a forged header fails loudly.
//!
//! **What a caller may do.** Only a profile's owner (the owner User, a member of an owner Group, the
//! owner ServiceAccount) or a cluster admin may add or remove bindings; listing shows the bindings
//! of profiles the caller may manage and the bindings naming the caller. Bindings are only made in
//! a namespace its Profile made (owner reference with the Profile's uid).
//!
//! A binding is a RoleBinding plus the mesh object letting the contributor's requests in, both
//! named [`binding_name`] (KFAM's readable name plus a hash, so names never collide) and annotated
//! with `user`, `role` and the subject kind. Removal finds them by label and annotations and only
//! touches objects this API made for that subject and role.

use std::sync::{Arc, OnceLock};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use component_framework::api::ProfileController;
use component_framework::api::component::{ProfileControllerSpec, Registration};
use component_framework::api::profile::Profile;
use http::{HeaderMap, StatusCode, header};
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::rbac::v1::RoleBinding;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams, PostParams, Preconditions};
use kube::core::DeserializeGuard;
use kube::{Api, Client, Resource, ResourceExt};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::controller::{Context, api_for};
use crate::rate::RateLimit;
use crate::registration::{self, ClaimError};
use crate::tenant::{self, MANAGED_BY_LABEL, Mesh, ROLE_ANNOTATION, USER_ANNOTATION};

pub const FIELD_MANAGER: &str = "kubeflow-profiles-kfam";
/// `app.kubernetes.io/managed-by` of the objects this API makes.
pub const MANAGED_BY: &str = "kfam";
/// Annotation with the binding's subject kind (`User`, `Group`): `user` alone cannot tell a User
/// from a Group of the same name.
pub const SUBJECT_KIND_ANNOTATION: &str = "profiles.kubeflow.org/subject-kind";

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

/// Longest name of a RoleBinding or custom resource (a DNS subdomain).
const MAX_NAME: usize = 253;
/// Hex digits of the hash that ends a binding name (64 bits of SHA-256).
const HASH_HEX: usize = 16;

/// KFAM's readable form: kind, name, role kind and role, lower-cased, with every run of characters
/// outside `[a-z0-9]` made one `-` (upstream applies that to the name before lower-casing, so
/// upper-case letters in a name become `-` too).
fn kfam_form(user: &Subject, role: &RoleRef) -> String {
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

/// The object name of a binding: KFAM's readable form (`user-bob-example-com-clusterrole-edit`),
/// cut to fit, then `-` and a hash of the exact subject kind, subject name and role. KFAM's form
/// alone maps `a.b` and `a-b` (or `Bob` and `ob`) to one name and grows past 253 characters; with
/// the hash two different bindings never share a name, and any input gives a valid DNS subdomain
/// (only `[a-z0-9-]`, at most 253, starting and ending with a letter or digit).
pub fn binding_name(user: &Subject, role: &RoleRef) -> String {
    let mut readable = kfam_form(user, role);
    readable.truncate(MAX_NAME - HASH_HEX - 1); // ASCII only: any byte is a char boundary
    let readable = readable.trim_matches('-');
    let mut hasher = Sha256::new();
    // Length-prefixed, so different (kind, name, role) triples never hash the same bytes.
    for part in [user.kind.as_str(), user.name.as_str(), role.name.as_str()] {
        hasher.update((part.len() as u64).to_be_bytes());
        hasher.update(part.as_bytes());
    }
    let hash: String = hasher.finalize().iter().take(HASH_HEX / 2).map(|b| format!("{b:02x}")).collect();
    if readable.is_empty() { hash } else { format!("{readable}-{hash}") }
}

/// A request that cannot be carried out, with its HTTP status.
#[derive(Debug, PartialEq)]
pub struct Refusal(pub StatusCode, pub String);

fn bad_request(message: impl Into<String>) -> Refusal {
    Refusal(StatusCode::BAD_REQUEST, message.into())
}

fn unauthorized(message: impl Into<String>) -> Refusal {
    Refusal(StatusCode::UNAUTHORIZED, message.into())
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

/// Who a bearer token belongs to, as the API server's TokenReview answered.
#[derive(Debug, Clone, PartialEq)]
pub struct Authenticated {
    pub username: String,
    pub groups: Vec<String>,
}

/// The caller of a request: whom the token names, or, for a trusted proxy, whom the proxy names.
#[derive(Debug, Clone, PartialEq)]
pub struct Caller {
    pub user: String,
    pub groups: Vec<String>,
    pub via: Via,
}

/// How the caller was identified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Via {
    /// By its own bearer token (a ServiceAccount's, or an OIDC ID token the API server accepts).
    Token,
    /// By a trusted proxy's user-id header: a person the proxy (this TokenReview username)
    /// authenticated, e.g. the dashboard behind the ingress gateway's login.
    Proxy(String),
}

/// Prefix of a ServiceAccount's username (TokenReview).
pub const SERVICE_ACCOUNT_PREFIX: &str = "system:serviceaccount:";

impl Caller {
    /// Whether the caller is a ServiceAccount (`system:serviceaccount:<namespace>:<name>`), whether
    /// its own token says so or a proxy does.
    pub fn is_service_account(&self) -> bool {
        self.user.starts_with(SERVICE_ACCOUNT_PREFIX)
    }
}

const NO_TOKEN: &str = "no identity: send Authorization: Bearer <token> (a Kubernetes ServiceAccount token, or an OIDC ID token the API server accepts); headers alone identify no one";

/// The bearer token of a request (one `Authorization: Bearer <token>` header).
pub fn bearer_token(headers: &HeaderMap) -> Result<&str, Refusal> {
    let mut values = headers.get_all(header::AUTHORIZATION).iter();
    let value = values.next().ok_or_else(|| unauthorized(NO_TOKEN))?;
    if values.next().is_some() {
        return Err(unauthorized("Authorization: sent more than once; send one Bearer token"));
    }
    let value = value.to_str().map_err(|_| unauthorized("Authorization: not ASCII; send Bearer <token>"))?;
    let (scheme, token) = value.trim().split_once(' ').ok_or_else(|| unauthorized("Authorization: expected Bearer <token>"))?;
    let token = token.trim();
    if !scheme.eq_ignore_ascii_case("bearer") || token.is_empty() || token.contains(char::is_whitespace) {
        return Err(unauthorized("Authorization: expected Bearer <token>"));
    }
    Ok(token)
}

/// The caller, given whom the request's token authenticated as. The user-id and groups headers
/// count only from a trusted proxy (which must send the user-id header); from anyone else they
/// are refused rather than ignored, so a client relying on them learns it at once.
pub fn caller(authenticated: &Authenticated, headers: &HeaderMap, settings: &ProfileControllerSpec) -> Result<Caller, Refusal> {
    let user_header = headers.get(settings.user_id_header.as_str());
    let groups_header = headers.get(settings.groups_header.as_str());
    if !settings.trusted_proxies.contains(&authenticated.username) {
        if user_header.is_some() || groups_header.is_some() {
            let proxies = if settings.trusted_proxies.is_empty() { "none configured".to_string() } else { settings.trusted_proxies.join(", ") };
            return Err(unauthorized(format!(
                "the {} and {} headers are only believed from a trusted proxy (ProfileController spec.trustedProxies: {proxies}); {} is not one: call with your own token and without these headers",
                settings.user_id_header, settings.groups_header, authenticated.username
            )));
        }
        return Ok(Caller { user: authenticated.username.clone(), groups: authenticated.groups.clone(), via: Via::Token });
    }
    let user = user_header
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix(settings.user_id_prefix.as_str()))
        .filter(|u| !u.trim().is_empty())
        .ok_or_else(|| unauthorized(format!("trusted proxy {} sent no user: the {} header must name one (prefix {:?})", authenticated.username, settings.user_id_header, settings.user_id_prefix)))?;
    let groups = groups_header
        .and_then(|v| v.to_str().ok())
        .map(|v| v.split(',').map(|g| g.trim().to_string()).filter(|g| !g.is_empty()).collect())
        .unwrap_or_default();
    Ok(Caller { user: user.to_string(), groups, via: Via::Proxy(authenticated.username.clone()) })
}

/// Asks the API server whom `token` belongs to (TokenReview, `authentication.k8s.io/v1`).
async fn review(client: &Client, token: &str) -> Result<Authenticated, Refusal> {
    let request = TokenReview { spec: TokenReviewSpec { token: Some(token.to_string()), audiences: None }, ..Default::default() };
    let reviewed = Api::<TokenReview>::all(client.clone()).create(&PostParams::default(), &request).await.map_err(|e| internal(format!("cannot review the bearer token (TokenReview): {e}")))?;
    let status = reviewed.status.unwrap_or_default();
    let user = status.user.filter(|_| status.authenticated == Some(true));
    match user.and_then(|u| Some(Authenticated { username: u.username.filter(|n| !n.is_empty())?, groups: u.groups.unwrap_or_default() })) {
        Some(authenticated) => Ok(authenticated),
        None => Err(unauthorized(format!("the bearer token was not accepted by the API server{}", status.error.map(|e| format!(": {e}")).unwrap_or_default()))),
    }
}

/// Requests per second, and at once, of one caller (the reviewed user, or the person a trusted
/// proxy names) and of one peer address (before its token is reviewed: a flood of bad tokens is
/// no flood of TokenReviews). A dashboard sends all its users' requests from one address, so the
/// address gets ten times a caller's.
pub const PER_CALLER: (f64, f64) = (5.0, 20.0);
pub const PER_PEER: (f64, f64) = (50.0, 200.0);
/// Callers and addresses remembered at most (see [`RateLimit`]).
const RATE_KEYS: usize = 10_000;
static CALLERS: RateLimit = RateLimit::new(PER_CALLER.0, PER_CALLER.1, RATE_KEYS);
static PEERS: RateLimit = RateLimit::new(PER_PEER.0, PER_PEER.1, RATE_KEYS);

fn too_many(who: &str, wait: std::time::Duration) -> Refusal {
    Refusal(StatusCode::TOO_MANY_REQUESTS, format!("too many requests from {who}: at most {} per second ({} at once); retry in {} ms", PER_CALLER.0, PER_CALLER.1, wait.as_millis().max(1)))
}

/// The caller of a request: its bearer token reviewed, then [`caller`], within its rate.
async fn authenticate(ctx: &Context, headers: &HeaderMap, settings: &ProfileControllerSpec) -> Result<Caller, Refusal> {
    let token = bearer_token(headers)?;
    let authenticated = review(&ctx.client, token).await?;
    let caller = caller(&authenticated, headers, settings)?;
    CALLERS.take(&caller.user, std::time::Instant::now()).map_err(|wait| too_many(&caller.user, wait))?;
    Ok(caller)
}

/// Refuses a peer address over [`PER_PEER`] before anything else is done for it.
async fn limit_peers(request: axum::extract::Request, next: axum::middleware::Next) -> Response {
    let peer = request.extensions().get::<axum::extract::ConnectInfo<std::net::SocketAddr>>().map(|c| c.0.ip().to_string()).unwrap_or_default();
    match PEERS.take(&peer, std::time::Instant::now()) {
        Ok(()) => next.run(request).await,
        Err(wait) => {
            let message = format!("too many requests from {peer}: at most {} per second ({} at once) per address; retry in {} ms", PER_PEER.0, PER_PEER.1, wait.as_millis().max(1));
            reply(Err(Refusal(StatusCode::TOO_MANY_REQUESTS, message)))
        }
    }
}

pub fn is_cluster_admin(caller: &Caller, settings: &ProfileControllerSpec) -> bool {
    settings.cluster_admins.contains(&caller.user)
}

/// Whether `caller` owns `profile`: the owner User, a member of the owner Group, or the owner
/// ServiceAccount (by its username `system:serviceaccount:<namespace>:<name>`).
pub fn owns(caller: &Caller, profile: &Profile) -> bool {
    let owner = &profile.spec.owner;
    match owner.kind.as_str() {
        "User" => owner.name == caller.user,
        "Group" => caller.groups.contains(&owner.name),
        "ServiceAccount" => owner.namespace.as_deref().is_some_and(|ns| caller.user == format!("system:serviceaccount:{ns}:{}", owner.name)),
        _ => false,
    }
}

/// Whether `caller` may change who has access to `profile`: its owner or a cluster admin.
pub fn may_manage(caller: &Caller, profile: &Profile, settings: &ProfileControllerSpec) -> bool {
    is_cluster_admin(caller, settings) || owns(caller, profile)
}

/// Whether `caller` may create `request` through `POST /kfam/v1/profiles`, given the settings and
/// the Profiles that exist. In order:
/// - a ServiceAccount never registers a Profile (403), whatever the setting, even one listed in
///   `clusterAdmins`: Profiles for workloads are made by an admin (kubectl), not by themselves;
/// - cluster admins may create any Profile (the rules below do not bind them);
/// - `registration: Disabled`: nobody else (403);
/// - `registration: Users`: only a person a trusted proxy names (its user-id header), not a
///   caller with its own token (403); no `spec.plugins` (cloud identities) and no quota override
///   labels and no `spec.resourceQuotaSpec`, which only admins grant (403 naming the field: a
///   registered Profile's quota is the cluster's, `registeredQuota`); owned by the caller as a `User`
///   (403); and one Profile per user: a user who owns one (a `User` owner of that name, not being
///   deleted) is refused (403 naming it), as upstream's dashboard registration makes one.
pub fn may_register(caller: &Caller, settings: &ProfileControllerSpec, existing: &[Profile], request: &Profile) -> Result<(), Refusal> {
    let forbidden = |message: String| Err(Refusal(StatusCode::FORBIDDEN, message));
    if caller.is_service_account() {
        return forbidden(format!("{} is a ServiceAccount: ServiceAccounts never register a Profile; a cluster admin creates Profiles for workloads (kubectl)", caller.user));
    }
    if is_cluster_admin(caller, settings) {
        return Ok(());
    }
    match settings.registration {
        Registration::Disabled => {
            return forbidden(format!("registration is Disabled (ProfileController spec.registration): only cluster admins create Profiles; {} is not one", caller.user));
        }
        Registration::Users => {}
    }
    if caller.via == Via::Token {
        return forbidden(format!(
            "registration (spec.registration: Users) is for people a trusted proxy names in the {} header (spec.trustedProxies); {} called with its own token: sign in through the dashboard, or ask a cluster admin",
            settings.user_id_header, caller.user
        ));
    }
    if !request.spec.plugins.is_empty() {
        return forbidden("spec.plugins: only cluster admins may set plugins (cloud identities for the profile's workloads); register without them".into());
    }
    if let Some(prefix) = settings.quota_override_label_prefix.as_deref()
        && let Some(label) = request.labels().keys().find(|k| k.starts_with(prefix))
    {
        return forbidden(format!("metadata.labels[{label:?}]: only cluster admins may override a profile's quota ({prefix}<resource> labels); register without it"));
    }
    if request.spec.resource_quota_spec.as_ref().is_some_and(|q| q != &Default::default()) {
        return forbidden("spec.resourceQuotaSpec: only cluster admins set a profile's quota; a registered Profile gets the cluster's (ProfileController spec.registeredQuota): register without it".into());
    }
    let owner = &request.spec.owner;
    if owner.kind != "User" || owner.name != caller.user {
        return forbidden(format!("spec.owner: {} may only register a Profile owned by themselves ({{kind: User, name: {}}}); got {{kind: {}, name: {}}}", caller.user, caller.user, owner.kind, owner.name));
    }
    if let Some(owned) = existing.iter().find(|p| registered_by(p, &caller.user)) {
        return forbidden(format!("{} already owns Profile {}: registration makes one Profile per user; ask a cluster admin for another", caller.user, owned.name_any()));
    }
    Ok(())
}

/// Whether `profile` counts as `user`'s one registered Profile: owned by that `User`, not being
/// deleted.
fn registered_by(profile: &Profile, user: &str) -> bool {
    profile.meta().deletion_timestamp.is_none() && profile.spec.owner.kind == "User" && profile.spec.owner.name == user
}

/// Whether a binding names the caller: a User binding of the caller, or a Group binding of one of
/// the caller's groups.
fn names_caller(binding: &Binding, caller: &Caller) -> bool {
    binding.user.as_ref().is_some_and(|s| match s.kind.as_str() {
        "User" => s.name == caller.user,
        "Group" => caller.groups.contains(&s.name),
        _ => false,
    })
}

/// What `GET /kfam/v1/bindings` shows `caller`: the bindings of profiles the caller may manage,
/// and bindings naming the caller. A binding in a namespace no listed Profile has is never shown.
pub fn visible_bindings(caller: &Caller, settings: &ProfileControllerSpec, profiles: &[Profile], bindings: Vec<Binding>) -> Vec<Binding> {
    bindings
        .into_iter()
        .filter(|b| profiles.iter().find(|p| p.name_any() == b.referred_namespace).is_some_and(|p| may_manage(caller, p, settings) || names_caller(b, caller)))
        .collect()
}

/// Whether the namespace of `profile` (its owner references; `None`: it does not exist) is one
/// that Profile made: bindings are made nowhere else.
pub fn check_profile_namespace(namespace: Option<&[OwnerReference]>, profile: &Profile) -> Result<(), Refusal> {
    let name = profile.name_any();
    match namespace {
        None => Err(Refusal(StatusCode::CONFLICT, format!("referredNamespace: namespace {name} does not exist (yet); bindings are only made in a namespace its Profile made"))),
        Some(references) if !tenant::made_for(references, profile) => Err(Refusal(
            StatusCode::CONFLICT,
            format!("referredNamespace: namespace {name} was not made by Profile {name} (no owner reference to its uid); bindings are only made in a namespace its Profile made"),
        )),
        Some(_) => Ok(()),
    }
}

/// Whether an object (its metadata) is one this API made for `user` as `role`: label
/// `managed-by: kfam` and the `user`, `role` and subject-kind annotations. Objects made before the
/// subject-kind annotation existed fall back to `subject_kind` (a RoleBinding's subject), if given.
pub fn is_binding_of(meta: &ObjectMeta, user: &Subject, role: &str, subject_kind: Option<&str>) -> bool {
    let label = |key: &str| meta.labels.as_ref().and_then(|l| l.get(key)).map(String::as_str);
    let annotation = |key: &str| meta.annotations.as_ref().and_then(|a| a.get(key)).map(String::as_str);
    let kind = annotation(SUBJECT_KIND_ANNOTATION).or(subject_kind);
    label(MANAGED_BY_LABEL) == Some(MANAGED_BY) && annotation(USER_ANNOTATION) == Some(user.name.as_str()) && annotation(ROLE_ANNOTATION) == Some(role) && kind.is_none_or(|k| k == user.kind)
}

/// The RoleBinding and mesh object of a binding.
pub fn binding_objects(user: &Subject, role: &RoleRef, cluster_role: &str, namespace: &str, settings: &ProfileControllerSpec, mesh: Mesh) -> Vec<Value> {
    let name = binding_name(user, &RoleRef { kind: "ClusterRole".into(), ..role.clone() });
    let metadata = json!({
        "name": name, "namespace": namespace,
        "annotations": {USER_ANNOTATION: user.name, ROLE_ANNOTATION: role.name, SUBJECT_KIND_ANNOTATION: user.kind},
        "labels": {MANAGED_BY_LABEL: MANAGED_BY},
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

/// What the API's handlers share: the controller's context once it runs, and the namespace of
/// the registration claims ([`registration`]; the operators' own, where each replica may write
/// Leases), if there is one.
#[derive(Clone)]
struct Served {
    shared: Shared,
    claims: Option<Arc<str>>,
}

impl axum::extract::FromRef<Served> for Shared {
    fn from_ref(served: &Served) -> Self {
        served.shared.clone()
    }
}

fn reply(result: Result<String, Refusal>) -> Response {
    match result {
        Ok(body) => (StatusCode::OK, body).into_response(),
        Err(Refusal(status, message)) if status == StatusCode::UNAUTHORIZED => (status, [(header::WWW_AUTHENTICATE, "Bearer")], message).into_response(),
        // Whole seconds, as Retry-After has them; the message says the milliseconds.
        Err(Refusal(status, message)) if status == StatusCode::TOO_MANY_REQUESTS => (status, [(header::RETRY_AFTER, "1")], message).into_response(),
        Err(Refusal(status, message)) => (status, message).into_response(),
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

/// Context, settings and the authenticated caller of a request.
async fn identified(shared: &Shared, headers: &HeaderMap) -> Result<(Arc<Context>, Arc<ProfileController>, Caller), Refusal> {
    let (ctx, settings) = ready(shared)?;
    let caller = authenticate(&ctx, headers, &settings.spec).await?;
    Ok((ctx, settings, caller))
}

async fn profile(ctx: &Context, name: &str) -> Result<Profile, Refusal> {
    let profiles: Api<Profile> = Api::all(ctx.client.clone());
    profiles.get_opt(name).await.map_err(internal)?.ok_or_else(|| Refusal(StatusCode::NOT_FOUND, format!("profile {name:?} does not exist")))
}

fn parse<T: for<'de> Deserialize<'de>>(body: &[u8]) -> Result<T, Refusal> {
    serde_json::from_slice(body).map_err(|e| bad_request(format!("body: {e}")))
}

/// A binding request from a caller allowed to change who has access to its profile, into a
/// namespace that Profile made.
async fn authorized_binding(shared: &Shared, headers: &HeaderMap, body: &[u8]) -> Result<(Arc<Context>, Arc<ProfileController>, Binding), Refusal> {
    let (ctx, settings, caller) = identified(shared, headers).await?;
    let binding: Binding = parse(body)?;
    validate(&binding)?;
    let profile = profile(&ctx, &binding.referred_namespace).await?;
    if !may_manage(&caller, &profile, &settings.spec) {
        return Err(Refusal(StatusCode::FORBIDDEN, format!("{} is neither the owner of profile {} nor a cluster admin", caller.user, binding.referred_namespace)));
    }
    let namespace = Api::<Namespace>::all(ctx.client.clone()).get_metadata_opt(&binding.referred_namespace).await.map_err(internal)?;
    check_profile_namespace(namespace.as_ref().map(|ns| ns.owner_references()), &profile)?;
    Ok((ctx, settings, binding))
}

fn describe(object: &Value) -> String {
    format!("{} {}/{}", object["kind"].as_str().unwrap_or_default(), object["metadata"]["namespace"].as_str().unwrap_or_default(), object["metadata"]["name"].as_str().unwrap_or_default())
}

async fn create_binding(State(shared): State<Shared>, headers: HeaderMap, body: Bytes) -> Response {
    reply(
        async {
            let (ctx, settings, binding) = authorized_binding(&shared, &headers, &body).await?;
            let (user, role, cluster_role) = validate(&binding)?;
            let objects = binding_objects(user, role, cluster_role, &binding.referred_namespace, &settings.spec, ctx.mesh(&settings.spec));
            // An object of that name that this API did not make for this subject and role is
            // never overwritten (a forced apply would take it over).
            for object in &objects {
                let name = object["metadata"]["name"].as_str().unwrap_or_default();
                if let Some(live) = api_for(&ctx.client, object).get_opt(name).await.map_err(internal)?
                    && !is_binding_of(&live.metadata, user, &role.name, None)
                {
                    return Err(Refusal(StatusCode::CONFLICT, format!("{} exists and was not made by KFAM for {} {} as {}; nothing changed", describe(object), user.kind, user.name, role.name)));
                }
            }
            for object in &objects {
                let name = object["metadata"]["name"].as_str().unwrap_or_default();
                api_for(&ctx.client, object).patch(name, &PatchParams::apply(FIELD_MANAGER).force(), &Patch::Apply(object)).await.map_err(internal)?;
            }
            Ok(String::new())
        }
        .await,
    )
}

/// The kinds of a binding's objects besides the RoleBinding, whichever mesh it was made for.
fn mesh_resources() -> [ApiResource; 2] {
    [
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("security.istio.io", "v1beta1", "AuthorizationPolicy"), "authorizationpolicies"),
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("rbac.istio.io", "v1alpha1", "ServiceRoleBinding"), "servicerolebindings"),
    ]
}

async fn delete_binding(State(shared): State<Shared>, headers: HeaderMap, body: Bytes) -> Response {
    reply(
        async {
            let (ctx, _, binding) = authorized_binding(&shared, &headers, &body).await?;
            let (user, role, _) = validate(&binding)?;
            let namespace = binding.referred_namespace.as_str();
            let selector = ListParams::default().labels(&format!("{MANAGED_BY_LABEL}={MANAGED_BY}"));
            let uid_precondition = |uid: Option<String>| DeleteParams { preconditions: Some(Preconditions { uid, resource_version: None }), ..Default::default() };
            let mut deleted = 0;
            // Found by label and annotations, not by name: objects made under older names go too.
            let role_bindings: Api<RoleBinding> = Api::namespaced(ctx.client.clone(), namespace);
            for rb in role_bindings.list(&selector).await.map_err(internal)?.items {
                let subject_kind = rb.subjects.as_ref().and_then(|s| s.first()).map(|s| s.kind.as_str());
                if is_binding_of(&rb.metadata, user, &role.name, subject_kind) {
                    role_bindings.delete(&rb.name_any(), &uid_precondition(rb.uid())).await.map_err(internal)?;
                    deleted += 1;
                }
            }
            for resource in mesh_resources() {
                let api: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), namespace, &resource);
                let objects = match api.list_metadata(&selector).await {
                    Ok(list) => list.items,
                    Err(kube::Error::Api(e)) if e.code == 404 => continue, // that mesh API is not installed
                    Err(e) => return Err(internal(e)),
                };
                for object in objects.into_iter().filter(|o| is_binding_of(&o.metadata, user, &role.name, None)) {
                    api.delete(&object.name_any(), &uid_precondition(object.uid())).await.map_err(internal)?;
                    deleted += 1;
                }
            }
            if deleted == 0 {
                return Err(Refusal(StatusCode::NOT_FOUND, format!("{} {} has no {} binding in {namespace}", user.kind, user.name, role.name)));
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

fn query_pairs(query: Option<String>) -> Vec<(String, String)> {
    form_urlencoded::parse(query.unwrap_or_default().as_bytes()).into_owned().collect()
}

fn query_value(query: &[(String, String)], key: &str) -> Option<String> {
    query.iter().find(|(k, _)| k == key).map(|(_, v)| v.clone()).filter(|v| !v.is_empty())
}

async fn read_bindings(State(shared): State<Shared>, headers: HeaderMap, RawQuery(query): RawQuery) -> Response {
    reply(
        async {
            let (ctx, settings, caller) = identified(&shared, &headers).await?;
            let query = query_pairs(query);
            let (namespace, user, role) = (query_value(&query, "namespace"), query_value(&query, "user"), query_value(&query, "role"));
            // From the caches only: the API server is asked nothing, however many Profiles there
            // are (a Profile that cannot be decoded is skipped, not an error for everyone).
            let profiles = ctx.cached_profiles().ok_or_else(|| Refusal(StatusCode::SERVICE_UNAVAILABLE, "Profiles are not listed yet; try again".into()))?;
            let mut bindings = Vec::new();
            for profile in &profiles {
                let name = profile.name_any();
                // Only namespaces their Profile made: a refused Profile shows nothing of a namespace it does not own.
                if namespace.as_ref().is_some_and(|n| *n != name) || !ctx.made_namespace_of(profile) {
                    continue;
                }
                bindings.extend(ctx.bindings.in_namespace(&name));
            }
            let mut bindings = visible_bindings(&caller, &settings.spec, &profiles, bindings);
            bindings.retain(|b| {
                let subject = b.user.as_ref().map(|s| s.name.as_str());
                let role_name = b.role_ref.as_ref().map(|r| r.name.as_str());
                user.as_deref().is_none_or(|u| Some(u) == subject) && role.as_deref().is_none_or(|r| Some(r) == role_name)
            });
            Ok(serde_json::to_string(&BindingEntries { bindings }).expect("bindings serialise"))
        }
        .await,
    )
}

/// Serialises profile registrations within this process when there is no namespace for claims
/// (see [`create_profile`]).
static REGISTRATION: std::sync::LazyLock<futures::lock::Mutex<()>> = std::sync::LazyLock::new(|| futures::lock::Mutex::new(()));

/// `POST /kfam/v1/profiles`. A registrant's Profile gets the cluster's quota
/// (`registeredQuota`), and is created only under the user's claim ([`registration`]), so two
/// requests of one user — on one replica or on two — make one Profile.
async fn create_profile(State(served): State<Served>, headers: HeaderMap, body: Bytes) -> Response {
    reply(
        async {
            let (ctx, settings, caller) = identified(&served.shared, &headers).await?;
            let mut profile: Profile = parse(&body)?;
            let _one_at_a_time = match served.claims {
                None => Some(REGISTRATION.lock().await),
                Some(_) => None,
            };
            let existing: Vec<Profile> =
                Api::<DeserializeGuard<Profile>>::all(ctx.client.clone()).list(&ListParams::default()).await.map_err(internal)?.items.into_iter().filter_map(|g| g.0.ok()).collect();
            may_register(&caller, &settings.spec, &existing, &profile)?;
            let registrant = !is_cluster_admin(&caller, &settings.spec);
            if registrant {
                profile.spec.resource_quota_spec = settings.spec.registered_quota.clone();
            }
            // The controller refuses these too; saying so here spares a Profile that never works.
            tenant::validate(&profile, &settings.spec).map_err(|invalid| bad_request(invalid.to_string()))?;
            let name = profile.name_any();
            if Api::<Namespace>::all(ctx.client.clone()).get_metadata_opt(&name).await.map_err(internal)?.is_some() {
                return Err(Refusal(StatusCode::CONFLICT, format!("metadata.name: namespace {name} already exists and a Profile never adopts a namespace; choose another name")));
            }
            let profiles: Api<Profile> = Api::all(ctx.client.clone());
            let claim = match served.claims.as_deref().filter(|_| registrant) {
                None => None,
                Some(namespace) => {
                    let is_theirs = |named: String| {
                        let (profiles, user) = (profiles.clone(), caller.user.clone());
                        async move {
                            let live = profiles.get_opt(&named).await?;
                            Ok(live.is_some_and(|p| registered_by(&p, &user)))
                        }
                    };
                    Some(registration::take(&ctx.client, namespace, &caller.user, &name, is_theirs).await.map_err(|e| match e {
                        ClaimError::Registered { .. } => Refusal(StatusCode::FORBIDDEN, e.to_string()),
                        ClaimError::InProgress { .. } => Refusal(StatusCode::CONFLICT, e.to_string()),
                        ClaimError::Api { .. } => internal(e),
                    })?)
                }
            };
            let params = PostParams { field_manager: Some(FIELD_MANAGER.into()), ..Default::default() };
            let created = profiles.create(&params, &profile).await.map_err(|e| match e {
                kube::Error::Api(s) if s.code == 409 => Refusal(StatusCode::CONFLICT, s.message),
                kube::Error::Api(s) if s.code == 422 || s.code == 400 => bad_request(s.message),
                e => internal(e),
            });
            match (&created, claim) {
                (Ok(_), Some(claim)) => claim.confirm().await,
                (Err(_), Some(claim)) => claim.release().await,
                (_, None) => {}
            }
            created?;
            Ok(String::new())
        }
        .await,
    )
}

async fn delete_profile(State(shared): State<Shared>, headers: HeaderMap, Path(name): Path<String>) -> Response {
    reply(
        async {
            let (ctx, settings, caller) = identified(&shared, &headers).await?;
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

/// Whether `user` (default: the caller) is a cluster admin; only cluster admins may ask about
/// someone else.
pub fn cluster_admin_answer(caller: &Caller, user: Option<&str>, settings: &ProfileControllerSpec) -> Result<String, Refusal> {
    let user = user.unwrap_or(&caller.user);
    if user != caller.user && !is_cluster_admin(caller, settings) {
        return Err(Refusal(StatusCode::FORBIDDEN, format!("user: {} may only ask about themselves (user={}); cluster admins may ask about anyone", caller.user, caller.user)));
    }
    Ok(settings.cluster_admins.iter().any(|a| a == user).to_string())
}

async fn cluster_admin(State(shared): State<Shared>, headers: HeaderMap, RawQuery(query): RawQuery) -> Response {
    reply(
        async {
            let (_, settings, caller) = identified(&shared, &headers).await?;
            cluster_admin_answer(&caller, query_value(&query_pairs(query), "user").as_deref(), &settings.spec)
        }
        .await,
    )
}

async fn about(State(shared): State<Shared>, headers: HeaderMap) -> Response {
    reply(identified(&shared, &headers).await.map(|_| "KFAM-compatible access management of the Kubeflow profiles operator".to_string()))
}

/// The API; registration claims go in namespace `claims` (without one, registrations are
/// serialised within this process only: one replica).
pub fn router(shared: Shared, claims: Option<&str>) -> Router {
    Router::new()
        .route("/kfam/", get(about))
        .route("/kfam/v1/bindings", get(read_bindings).post(create_binding).delete(delete_binding))
        .route("/kfam/v1/profiles", post(create_profile))
        .route("/kfam/v1/profiles/{profile}", delete(delete_profile))
        .route("/kfam/v1/role/clusteradmin", get(cluster_admin))
        .layer(axum::middleware::from_fn(limit_peers))
        .with_state(Served { shared, claims: claims.map(Arc::from) })
}

/// Binds `addr` (failing the start when it cannot) and serves the KFAM API in the background.
pub async fn start(addr: std::net::SocketAddr, shared: Shared, claims: Option<&str>) -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    tracing::info!(%addr, claims, "KFAM API listening");
    let app = router(shared, claims);
    tokio::spawn(async move {
        // The peer's address is what a request is limited by before its token is reviewed.
        if let Err(e) = axum::serve(listener, app.into_make_service_with_connect_info::<std::net::SocketAddr>()).await {
            tracing::error!(error = %e, "KFAM API stopped");
        }
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    fn settings() -> ProfileControllerSpec {
        serde_json::from_value(json!({"version": "v1.3.0", "userIdPrefix": "accounts:", "clusterAdmins": ["root@example.com"]})).unwrap()
    }

    fn user(kind: &str, name: &str) -> Subject {
        Subject { kind: kind.into(), name: name.into(), api_group: None }
    }

    fn role(name: &str) -> RoleRef {
        RoleRef { kind: "ClusterRole".into(), name: name.into(), api_group: None }
    }

    fn profile_owned_by(name: &str, owner: Value) -> Profile {
        serde_json::from_value(json!({"apiVersion": "kubeflow.org/v1", "kind": "Profile", "metadata": {"name": name, "uid": format!("uid-{name}")}, "spec": {"owner": owner}})).unwrap()
    }

    fn who(user: &str, groups: &[&str]) -> Caller {
        Caller { user: user.into(), groups: groups.iter().map(|g| g.to_string()).collect(), via: Via::Token }
    }

    /// A person the dashboard (a trusted proxy) names.
    fn person(user: &str) -> Caller {
        Caller { via: Via::Proxy("system:serviceaccount:kubeflow:centraldashboard".into()), ..who(user, &[]) }
    }

    /// Kubernetes' DNS-1123 subdomain: `[a-z0-9]([-a-z0-9.]*[a-z0-9])?`, at most 253.
    fn is_dns_subdomain(s: &str) -> bool {
        let alnum = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
        !s.is_empty() && s.len() <= 253 && s.bytes().all(|b| alnum(b) || b == b'-' || b == b'.') && alnum(s.as_bytes()[0]) && alnum(s.as_bytes()[s.len() - 1])
    }

    #[test]
    fn binding_names_keep_kfams_form_and_end_with_a_hash() {
        let name = binding_name(&user("User", "bob@example.com"), &role("edit"));
        assert_eq!(name, "user-bob-example-com-clusterrole-edit-2805e2290a720230");
        assert_eq!(binding_name(&user("Group", "ml-team"), &role("view"))[..31], *"group-ml-team-clusterrole-view-");
        // Upstream replaces upper-case letters before lower-casing.
        assert!(binding_name(&user("User", "Bob.Smith@x.io"), &role("edit")).starts_with("user-ob-mith-x-io-clusterrole-edit-"));
    }

    #[test]
    fn binding_names_never_collide_and_are_valid_for_hostile_input() {
        let long = "a".repeat(300);
        let long_other = format!("{}b", "a".repeat(299));
        let names: Vec<String> = vec![
            "a.b".into(), "a-b".into(), "a_b".into(), "a b".into(), "Bob".into(), "ob".into(), "-ob".into(), "BOB".into(), long.clone(), long_other, "a".repeat(253),
            "ünïcödé@example.com".into(), "用户".into(), "🦀".into(), "🦀🦀".into(), "!!!".into(), "...".into(), "---".into(), "@".into(), " ".into(), "".into(), "\0".into(),
            "x\0".into(), "İ".into(), "ß".into(),
        ];
        let mut seen = BTreeSet::new();
        for kind in ["User", "Group", "", "ÜSER", "!"] {
            for subject in &names {
                for r in ["admin", "edit", "view", "", "-"] {
                    let name = binding_name(&user(kind, subject), &role(r));
                    assert!(is_dns_subdomain(&name), "{kind:?} {subject:?} {r:?} -> {name:?}");
                    assert!(seen.insert(name.clone()), "{kind:?} {subject:?} {r:?} collides: {name}");
                }
            }
        }
        // Length-prefixed hashing: moving characters between fields changes the name.
        // (Same readable form and same concatenated bytes: only the hash's framing tells them apart.)
        assert_ne!(binding_name(&user("User-", "a"), &role("edit")), binding_name(&user("User", "-a"), &role("edit")));
        assert_eq!(binding_name(&user("User", &long), &role("edit")).len(), 253);
    }

    #[test]
    fn a_binding_is_a_role_binding_and_the_mesh_object_kfam_would_make() {
        let objects = binding_objects(&user("User", "bob@example.com"), &role("edit"), "kubeflow-edit", "alice", &settings(), Mesh::AuthorizationPolicy);
        let name = binding_name(&user("User", "bob@example.com"), &role("edit"));
        assert_eq!(
            objects[0],
            json!({
                "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                "metadata": {"name": name, "namespace": "alice",
                             "annotations": {"user": "bob@example.com", "role": "edit", "profiles.kubeflow.org/subject-kind": "User"}, "labels": {"app.kubernetes.io/managed-by": "kfam"}},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "kubeflow-edit"},
                "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "bob@example.com"}],
            })
        );
        assert_eq!(objects[1]["kind"], "AuthorizationPolicy");
        assert_eq!(objects[1]["metadata"]["name"], name.as_str());
        assert_eq!(objects[1]["spec"]["rules"][0]["when"], json!([{"key": "request.headers[kubeflow-userid]", "values": ["accounts:bob@example.com"]}]));
        let group = binding_objects(&user("Group", "ml"), &role("view"), "kubeflow-view", "alice", &settings(), Mesh::IstioRbac);
        assert_eq!(group[0]["subjects"][0]["kind"], "Group");
        assert_eq!(group[1]["spec"], json!({"roleRef": {"kind": "ServiceRole", "name": "ns-access-istio"}, "subjects": [{"properties": {"request.auth.claims[groups]": "ml"}}]}));
        assert_eq!(binding_objects(&user("User", "b"), &role("view"), "kubeflow-view", "alice", &settings(), Mesh::None).len(), 1);
    }

    #[test]
    fn objects_are_found_by_label_and_annotations() {
        let meta = |value: Value| serde_json::from_value::<ObjectMeta>(value).unwrap();
        let made = binding_objects(&user("User", "bob"), &role("edit"), "kubeflow-edit", "alice", &settings(), Mesh::None);
        let made = meta(made[0]["metadata"].clone());
        assert!(is_binding_of(&made, &user("User", "bob"), "edit", None));
        assert!(!is_binding_of(&made, &user("Group", "bob"), "edit", None), "a User binding is not the Group's of the same name");
        assert!(!is_binding_of(&made, &user("User", "bob"), "view", None));
        assert!(!is_binding_of(&made, &user("User", "bobby"), "edit", None));
        let foreign = meta(json!({"name": "x", "annotations": {"user": "bob", "role": "edit"}}));
        assert!(!is_binding_of(&foreign, &user("User", "bob"), "edit", None), "not made by KFAM (no managed-by label)");
        // Made before the subject-kind annotation: the RoleBinding's subject says the kind.
        let older = meta(json!({"name": "user-bob-clusterrole-edit", "labels": {"app.kubernetes.io/managed-by": "kfam"}, "annotations": {"user": "bob", "role": "edit"}}));
        assert!(is_binding_of(&older, &user("User", "bob"), "edit", Some("User")));
        assert!(!is_binding_of(&older, &user("Group", "bob"), "edit", Some("User")));
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
        let s = settings();
        let alice = profile_owned_by("p", json!({"kind": "User", "name": "alice"}));
        assert!(may_manage(&who("alice", &[]), &alice, &s));
        assert!(!may_manage(&who("mallory", &["alice"]), &alice, &s));
        assert!(may_manage(&who("root@example.com", &[]), &alice, &s));
        let ml = profile_owned_by("p", json!({"kind": "Group", "name": "ml"}));
        assert!(may_manage(&who("bob", &["ml"]), &ml, &s));
        assert!(!may_manage(&who("bob", &["other"]), &ml, &s));
        assert!(!may_manage(&who("ml", &[]), &ml, &s), "a user named like the group is not a member");
        let robot = profile_owned_by("p", json!({"kind": "ServiceAccount", "name": "ci", "namespace": "tools"}));
        assert!(may_manage(&who("system:serviceaccount:tools:ci", &[]), &robot, &s));
        assert!(!may_manage(&who("system:serviceaccount:other:ci", &[]), &robot, &s));
        assert!(!may_manage(&who("ci", &[]), &robot, &s));
    }

    #[test]
    fn no_token_no_identity() {
        let mut headers = HeaderMap::new();
        assert_eq!(bearer_token(&headers), Err(unauthorized(NO_TOKEN)));
        // The user-id header alone identifies no one.
        headers.insert("kubeflow-userid", "accounts:root@example.com".parse().unwrap());
        assert_eq!(bearer_token(&headers).unwrap_err().0, StatusCode::UNAUTHORIZED);
        for bad in ["Basic YWxpY2U6cHc=", "Bearer", "Bearer ", "Bearer a b", "Token abc"] {
            headers.insert(header::AUTHORIZATION, bad.parse().unwrap());
            assert_eq!(bearer_token(&headers).unwrap_err().0, StatusCode::UNAUTHORIZED, "{bad}");
        }
        headers.insert(header::AUTHORIZATION, "Bearer abc.def".parse().unwrap());
        assert_eq!(bearer_token(&headers), Ok("abc.def"));
        headers.insert(header::AUTHORIZATION, "bearer  abc ".parse().unwrap());
        assert_eq!(bearer_token(&headers), Ok("abc"));
        headers.append(header::AUTHORIZATION, "Bearer other".parse().unwrap());
        assert_eq!(bearer_token(&headers).unwrap_err().0, StatusCode::UNAUTHORIZED, "two tokens");
    }

    #[test]
    fn identity_headers_count_only_from_a_trusted_proxy() {
        let bob = Authenticated { username: "system:serviceaccount:team:bob".into(), groups: vec!["system:serviceaccounts".into()] };
        let dashboard = Authenticated { username: "system:serviceaccount:kubeflow:centraldashboard".into(), groups: vec![] };
        let mut s = settings();
        let none = HeaderMap::new();
        let mut forged = HeaderMap::new();
        forged.insert("kubeflow-userid", "accounts:root@example.com".parse().unwrap());
        let mut groups_only = HeaderMap::new();
        groups_only.insert("kubeflow-groups", "admins".parse().unwrap());

        // The token's owner is the caller.
        assert_eq!(caller(&bob, &none, &s).unwrap(), Caller { user: "system:serviceaccount:team:bob".into(), groups: vec!["system:serviceaccounts".into()], via: Via::Token });
        // With no trusted proxy configured (the default), identity headers are refused from anyone.
        for headers in [&forged, &groups_only] {
            let refusal = caller(&bob, headers, &s).unwrap_err();
            assert_eq!(refusal.0, StatusCode::UNAUTHORIZED);
            assert!(refusal.1.contains("spec.trustedProxies: none configured"), "{}", refusal.1);
            assert_eq!(caller(&dashboard, headers, &s).unwrap_err().0, StatusCode::UNAUTHORIZED);
        }

        s.trusted_proxies = vec![dashboard.username.clone()];
        // A trusted proxy names the user (less the prefix) and the groups.
        let mut proxied = forged.clone();
        proxied.insert("kubeflow-groups", "ml, ops".parse().unwrap());
        assert_eq!(caller(&dashboard, &proxied, &s).unwrap(), Caller { user: "root@example.com".into(), groups: vec!["ml".into(), "ops".into()], via: Via::Proxy(dashboard.username.clone()) });
        // ... only a trusted proxy.
        assert_eq!(caller(&bob, &proxied, &s).unwrap_err().0, StatusCode::UNAUTHORIZED);
        // A trusted proxy must say whom it acts for, with the prefix.
        assert_eq!(caller(&dashboard, &none, &s).unwrap_err().0, StatusCode::UNAUTHORIZED);
        let mut unprefixed = HeaderMap::new();
        unprefixed.insert("kubeflow-userid", "root@example.com".parse().unwrap());
        assert_eq!(caller(&dashboard, &unprefixed, &s).unwrap_err().0, StatusCode::UNAUTHORIZED);
    }

    #[test]
    fn callers_see_the_bindings_of_profiles_they_manage_and_those_naming_them() {
        let s = settings();
        let profiles = [
            profile_owned_by("alice", json!({"kind": "User", "name": "alice"})),
            profile_owned_by("team", json!({"kind": "Group", "name": "ml"})),
            profile_owned_by("carol", json!({"kind": "User", "name": "carol"})),
        ];
        let binding = |ns: &str, kind: &str, name: &str, r: &str| Binding { user: Some(user(kind, name)), referred_namespace: ns.into(), role_ref: Some(role(r)), status: None };
        let all = vec![
            binding("alice", "User", "alice", "admin"),
            binding("alice", "User", "bob", "edit"),
            binding("team", "Group", "ml", "admin"),
            binding("team", "User", "dave", "view"),
            binding("carol", "User", "carol", "admin"),
            binding("carol", "User", "bob", "view"),
            binding("carol", "Group", "readers", "view"),
            // A namespace no Profile has: never shown, not even to the subject or an admin.
            binding("ghost", "User", "bob", "edit"),
        ];
        let seen = |caller: Caller| -> Vec<(String, String)> {
            visible_bindings(&caller, &s, &profiles, all.clone()).into_iter().map(|b| (b.referred_namespace, b.user.unwrap().name)).collect()
        };
        let pairs = |p: &[(&str, &str)]| -> Vec<(String, String)> { p.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect() };
        assert_eq!(seen(who("alice", &[])), pairs(&[("alice", "alice"), ("alice", "bob")]));
        assert_eq!(seen(who("bob", &[])), pairs(&[("alice", "bob"), ("carol", "bob")]));
        assert_eq!(seen(who("erin", &["ml"])), pairs(&[("team", "ml"), ("team", "dave")]));
        assert_eq!(seen(who("frank", &["readers"])), pairs(&[("carol", "readers")]));
        assert_eq!(seen(who("root@example.com", &[])).len(), 7);
        assert!(seen(who("mallory", &["system:authenticated"])).is_empty());
    }

    #[test]
    fn bindings_go_only_into_a_namespace_its_profile_made() {
        let profile = profile_owned_by("alice", json!({"kind": "User", "name": "alice"}));
        let reference = |kind: &str, uid: &str| -> OwnerReference {
            serde_json::from_value(json!({"apiVersion": "kubeflow.org/v1", "kind": kind, "name": "alice", "uid": uid})).unwrap()
        };
        let refused = |refs: Option<&[OwnerReference]>| check_profile_namespace(refs, &profile).unwrap_err();
        assert_eq!(refused(None).0, StatusCode::CONFLICT);
        assert!(refused(Some(&[])).1.contains("was not made by Profile alice"));
        assert_eq!(refused(Some(&[reference("Profile", "uid-other")])).0, StatusCode::CONFLICT);
        assert_eq!(refused(Some(&[reference("Deployment", "uid-alice")])).0, StatusCode::CONFLICT);
        assert_eq!(check_profile_namespace(Some(&[reference("Profile", "uid-alice")]), &profile), Ok(()));
        // A Profile without a uid matches nothing, not even an empty uid.
        let mut no_uid = profile.clone();
        no_uid.metadata.uid = None;
        assert!(check_profile_namespace(Some(&[reference("Profile", "")]), &no_uid).is_err());
    }

    #[test]
    fn only_cluster_admins_ask_about_others() {
        let s = settings();
        assert_eq!(cluster_admin_answer(&who("bob", &[]), Some("bob"), &s), Ok("false".into()));
        assert_eq!(cluster_admin_answer(&who("bob", &[]), None, &s), Ok("false".into()));
        assert_eq!(cluster_admin_answer(&who("bob", &[]), Some("root@example.com"), &s).unwrap_err().0, StatusCode::FORBIDDEN);
        assert_eq!(cluster_admin_answer(&who("root@example.com", &[]), None, &s), Ok("true".into()));
        assert_eq!(cluster_admin_answer(&who("root@example.com", &[]), Some("bob"), &s), Ok("false".into()));
    }

    fn registered(name: &str, owner: &str) -> Profile {
        profile_owned_by(name, json!({"kind": "User", "name": owner}))
    }

    fn refused(result: Result<(), Refusal>) -> String {
        let Refusal(status, message) = result.unwrap_err();
        assert_eq!(status, StatusCode::FORBIDDEN, "{message}");
        message
    }

    #[test]
    fn service_accounts_never_register_whatever_the_setting() {
        let mut s = settings();
        let robot = who("system:serviceaccount:team:ci", &["system:serviceaccounts"]);
        let own = profile_owned_by("ci", json!({"kind": "ServiceAccount", "name": "ci", "namespace": "team"}));
        for registration in [Registration::Users, Registration::Disabled] {
            s.registration = registration;
            assert!(refused(may_register(&robot, &s, &[], &own)).contains("ServiceAccounts never register"));
        }
        // Not even one listed as a cluster admin, nor one a proxy names.
        s.cluster_admins.push(robot.user.clone());
        assert!(refused(may_register(&robot, &s, &[], &own)).contains("ServiceAccounts never register"));
        assert!(refused(may_register(&person("system:serviceaccount:team:ci"), &s, &[], &registered("x", "system:serviceaccount:team:ci"))).contains("ServiceAccounts never register"));
        // The proxy's own ServiceAccount token acting for a person is that person.
        assert_eq!(may_register(&person("erin@example.com"), &settings(), &[], &registered("erin", "erin@example.com")), Ok(()));
    }

    #[test]
    fn disabled_registration_leaves_profiles_to_cluster_admins() {
        let mut s = settings();
        s.registration = Registration::Disabled;
        assert!(refused(may_register(&person("erin@example.com"), &s, &[], &registered("erin", "erin@example.com"))).starts_with("registration is Disabled"));
        assert_eq!(may_register(&person("root@example.com"), &s, &[], &registered("team", "erin@example.com")), Ok(()));
        assert_eq!(may_register(&who("root@example.com", &[]), &s, &[], &registered("team", "erin@example.com")), Ok(()), "an admin with their own token");
    }

    #[test]
    fn users_register_only_through_the_trusted_proxy() {
        let s = settings();
        let message = refused(may_register(&who("erin@example.com", &[]), &s, &[], &registered("erin", "erin@example.com")));
        assert!(message.contains("for people a trusted proxy names in the kubeflow-userid header"), "{message}");
        assert_eq!(may_register(&person("erin@example.com"), &s, &[], &registered("erin", "erin@example.com")), Ok(()));
    }

    #[test]
    fn a_user_registers_one_profile_owned_by_themselves() {
        let s = settings();
        let erin = person("erin@example.com");
        let existing = [registered("alice", "alice@example.com"), profile_owned_by("ml", json!({"kind": "Group", "name": "erin@example.com"}))];
        assert_eq!(may_register(&erin, &s, &existing, &registered("erin", "erin@example.com")), Ok(()));
        // One per user.
        let mut with_erins = existing.to_vec();
        with_erins.push(registered("erin-1", "erin@example.com"));
        assert_eq!(refused(may_register(&erin, &s, &with_erins, &registered("erin-2", "erin@example.com"))), "erin@example.com already owns Profile erin-1: registration makes one Profile per user; ask a cluster admin for another");
        // ... one being deleted does not count.
        with_erins.last_mut().unwrap().metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(k8s_openapi::jiff::Timestamp::now()));
        assert_eq!(may_register(&erin, &s, &with_erins, &registered("erin-2", "erin@example.com")), Ok(()));
        // Cluster admins are exempt.
        let admins = [registered("root", "root@example.com")];
        assert_eq!(may_register(&person("root@example.com"), &s, &admins, &registered("root-2", "root@example.com")), Ok(()));
        // Owned by the caller, as a User.
        assert!(refused(may_register(&erin, &s, &[], &registered("alice-2", "alice@example.com"))).starts_with("spec.owner: erin@example.com may only register a Profile owned by themselves"));
        assert!(refused(may_register(&erin, &s, &[], &profile_owned_by("ml", json!({"kind": "Group", "name": "ml"})))).starts_with("spec.owner:"));
    }

    #[test]
    fn only_cluster_admins_grant_cloud_identities_or_quota_overrides() {
        let mut s = settings();
        let mut request = registered("erin", "erin@example.com");
        request.spec.plugins = vec![serde_json::from_value(json!({"kind": "WorkloadIdentity", "spec": {"gcpServiceAccount": "x@p.iam.gserviceaccount.com"}})).unwrap()];
        assert!(refused(may_register(&person("erin@example.com"), &s, &[], &request)).starts_with("spec.plugins: only cluster admins may set plugins"));
        let mut admin_request = request.clone();
        admin_request.spec.owner.name = "root@example.com".into();
        assert_eq!(may_register(&person("root@example.com"), &s, &[], &admin_request), Ok(()));
        request.spec.plugins.clear();
        request.metadata.labels = Some([("quotas.kubeflow.org/requests.cpu".to_string(), "64".to_string())].into());
        assert_eq!(may_register(&person("erin@example.com"), &s, &[], &request), Ok(()), "not an override without a prefix set");
        s.quota_override_label_prefix = Some("quotas.kubeflow.org/".into());
        assert!(refused(may_register(&person("erin@example.com"), &s, &[], &request)).starts_with("metadata.labels[\"quotas.kubeflow.org/requests.cpu\"]: only cluster admins"));
        // A quota of one's own: only an empty one passes (the cluster's is set on registration).
        request.metadata.labels = None;
        request.spec.resource_quota_spec = Some(serde_json::from_value(json!({"hard": {"requests.nvidia.com/gpu": "64"}})).unwrap());
        assert!(refused(may_register(&person("erin@example.com"), &s, &[], &request)).starts_with("spec.resourceQuotaSpec: only cluster admins set a profile's quota"));
        request.spec.resource_quota_spec = Some(Default::default());
        assert_eq!(may_register(&person("erin@example.com"), &s, &[], &request), Ok(()));
    }
}
