//! Building the desired object set of a component resource (pure): pick the release, gather
//! parameters, render the template, place and label the objects, apply the spec's overrides.

use std::collections::{BTreeMap, BTreeSet};

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use kube::ResourceExt;
use kubeflow_crds::component::{ComponentResource, Platform};
use serde_json::{Value, json};

use crate::component::{Component, InvalidSpec, Inputs, release};
use crate::kinds;
use crate::manifest::{self, Params};

/// Label selecting every object a component operator manages (the value is the component name).
pub const PART_OF_LABEL: &str = "components.kubeflow.org/part-of";
/// Label with the component version an object was built for.
pub const VERSION_LABEL: &str = "components.kubeflow.org/version";
/// Annotation naming the component resource (`namespace/name`) an object belongs to (all but CRDs,
/// which every install of the component shares).
pub const OWNER_ANNOTATION: &str = "components.kubeflow.org/owner";
/// Annotation a Namespace gets when a component resource creates it (it did not exist): that
/// resource, as [`user_value`]. Only that resource's `deletionPolicy: Purge` uninstall deletes it.
pub const CREATED_BY_ANNOTATION: &str = "components.kubeflow.org/created-by";
/// Annotation naming the KfDef application an object was rendered for (components that render
/// several applications, see [`crate::component::Rendered`]).
pub const APPLICATION_ANNOTATION: &str = "components.kubeflow.org/application";
/// Annotation (`"true"`) marking, in a component's manifest, a cluster-wide object every install
/// of the component shares, as it shares its CRDs (e.g. Kubeflow's aggregated `kubeflow-admin`
/// roles, which keep their upstream names): it names no owner, any install applies it and records
/// itself on it ([`USER_ANNOTATION_PREFIX`]), and the last install to go deletes it.
pub const SHARED_ANNOTATION: &str = "components.kubeflow.org/shared";
/// Prefix of the annotations by which each install using a shared object (see
/// [`SHARED_ANNOTATION`]) records itself: key [`user_key`], value [`user_value`]. Each install
/// applies its own with a field manager of its own ([`user_field_manager`]), so one install's
/// apply never drops another's; the last user to go deletes the object.
pub const USER_ANNOTATION_PREFIX: &str = "used-by.components.kubeflow.org/";
/// Annotation (`<namespace>/<name>` of a component resource) by which whoever manages an existing
/// object hands it over to that resource: the resource then applies it as its own (and may later
/// prune or delete it). Without it (or the resource's `spec.adoptExisting`), an object someone
/// else made is never applied over.
pub const ADOPT_ANNOTATION: &str = "components.kubeflow.org/adopt";
/// Annotation with the hash of the object as last applied.
pub const HASH_ANNOTATION: &str = "components.kubeflow.org/applied-hash";

/// The value of [`OWNER_ANNOTATION`] on the objects `resource` makes: `namespace/name`.
pub fn owner_id<R: ComponentResource>(resource: &R) -> String {
    format!("{}/{}", resource.namespace().unwrap_or_default(), resource.name_any())
}

/// Whether the live object proves it was made by the resource `owner` (see [`owner_id`]) of
/// `component`: labelled part of the component and, except for CRDs (shared by every install of
/// the component), annotated with that owner. Nothing else is ever deleted: an inventory in status
/// can be written by others, so a name listed there is no proof.
/// Every namespace `objects` name, each with the first object and field naming it: where
/// objects are placed (`metadata.namespace`), the Namespaces they create, the accounts they bind
/// (a binding's `subjects[i].namespace`), the Services they route the API server's calls to (a
/// webhook's, an APIService's, a CRD's conversion webhook's `…service.namespace`) and the
/// namespaces an Istio AuthorizationPolicy admits (`source.namespaces`, and the namespace of a
/// `cluster.local/ns/<namespace>/sa/<name>` principal). A namespace is named as much by a grant
/// to an account in it as by an object placed there.
pub fn named_namespaces(objects: &[Value]) -> BTreeMap<&str, (String, String)> {
    let mut named: BTreeMap<&str, (String, String)> = BTreeMap::new();
    for object in objects {
        for (field, namespace) in namespaces_named_by(object) {
            named.entry(namespace).or_insert_with(|| (crate::plan::describe(object), field));
        }
    }
    named
}

/// The namespaces one object names, with the field (see [`named_namespaces`]).
fn namespaces_named_by(object: &Value) -> Vec<(String, &str)> {
    fn add<'a>(named: &mut Vec<(String, &'a str)>, field: String, value: &'a Value) {
        if let Some(namespace) = value.as_str().filter(|n| !n.is_empty()) {
            named.push((field, namespace));
        }
    }
    fn indexed(value: &Value) -> impl Iterator<Item = (usize, &Value)> {
        value.as_array().into_iter().flatten().enumerate()
    }
    let group = object["apiVersion"].as_str().unwrap_or_default().rsplit_once('/').map(|(group, _)| group).unwrap_or_default();
    let kind = object["kind"].as_str().unwrap_or_default();
    let mut named = Vec::new();
    add(&mut named, "metadata.namespace".into(), &object["metadata"]["namespace"]);
    match (group, kind) {
        ("", "Namespace") if object["apiVersion"] == "v1" => add(&mut named, "metadata.name".into(), &object["metadata"]["name"]),
        ("rbac.authorization.k8s.io", "RoleBinding" | "ClusterRoleBinding") => {
            for (i, subject) in indexed(&object["subjects"]) {
                add(&mut named, format!("subjects[{i}].namespace"), &subject["namespace"]);
            }
        }
        ("admissionregistration.k8s.io", "ValidatingWebhookConfiguration" | "MutatingWebhookConfiguration") => {
            for (i, webhook) in indexed(&object["webhooks"]) {
                add(&mut named, format!("webhooks[{i}].clientConfig.service.namespace"), &webhook["clientConfig"]["service"]["namespace"]);
            }
        }
        ("apiregistration.k8s.io", "APIService") => add(&mut named, "spec.service.namespace".into(), &object["spec"]["service"]["namespace"]),
        ("apiextensions.k8s.io", "CustomResourceDefinition") => {
            let conversion = &object["spec"]["conversion"];
            add(&mut named, "spec.conversion.webhook.clientConfig.service.namespace".into(), &conversion["webhook"]["clientConfig"]["service"]["namespace"]);
            add(&mut named, "spec.conversion.webhookClientConfig.service.namespace".into(), &conversion["webhookClientConfig"]["service"]["namespace"]);
        }
        ("security.istio.io", "AuthorizationPolicy") => {
            for (i, rule) in indexed(&object["spec"]["rules"]) {
                for (j, from) in indexed(&rule["from"]) {
                    for (k, namespace) in indexed(&from["source"]["namespaces"]) {
                        add(&mut named, format!("spec.rules[{i}].from[{j}].source.namespaces[{k}]"), namespace);
                    }
                    for (k, principal) in indexed(&from["source"]["principals"]) {
                        if let Some(namespace) = principal.as_str().and_then(principal_namespace) {
                            named.push((format!("spec.rules[{i}].from[{j}].source.principals[{k}]"), namespace));
                        }
                    }
                }
            }
        }
        _ => {}
    }
    named
}

/// The namespace of an Istio principal `cluster.local/ns/<namespace>/sa/<name>` (any trust
/// domain); none for a pattern (`*`) or another form.
fn principal_namespace(principal: &str) -> Option<&str> {
    let (_, rest) = principal.split_once("/ns/")?;
    let (namespace, _) = rest.split_once("/sa/")?;
    (!namespace.is_empty() && !namespace.contains(['*', '/'])).then_some(namespace)
}

/// The tenant whose namespace `namespace` is, if a Profile made it: the Profile its owner
/// reference names, or the label the profile controller sets on every Profile's namespace.
pub fn tenant_owner(namespace: &k8s_openapi::api::core::v1::Namespace) -> Option<String> {
    let by_reference = namespace.metadata.owner_references.iter().flatten().find(|r| r.kind == "Profile" && r.api_version.starts_with("kubeflow.org/"));
    if let Some(profile) = by_reference {
        return Some(format!("Profile {}", profile.name));
    }
    let labelled = namespace.metadata.labels.as_ref().and_then(|l| l.get(PROFILE_NAMESPACE_LABEL)).is_some_and(|v| v == PROFILE_NAMESPACE_VALUE);
    labelled.then(|| format!("a Profile (labelled {PROFILE_NAMESPACE_LABEL}={PROFILE_NAMESPACE_VALUE})"))
}

/// The label every Profile's namespace carries (upstream's profile controller sets it too).
pub const PROFILE_NAMESPACE_LABEL: &str = "app.kubernetes.io/part-of";
pub const PROFILE_NAMESPACE_VALUE: &str = "kubeflow-profile";

pub fn made_by(live: &Value, info: &kinds::KindInfo, component: &str, owner: &str) -> bool {
    let metadata = &live["metadata"];
    metadata["labels"][PART_OF_LABEL] == component && (shared_by_installs(info, live) || metadata["annotations"][OWNER_ANNOTATION] == owner)
}

/// `(group, kind, namespace, name)`: what makes two objects the same object (any version).
pub fn identity(object: &Value) -> (String, String, String, String) {
    let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
    let api_version = text(&object["apiVersion"]);
    let group = api_version.split_once('/').map(|(g, _)| g.to_string()).unwrap_or_default();
    (group, text(&object["kind"]), text(&object["metadata"]["namespace"]), text(&object["metadata"]["name"]))
}

/// The namespace the rendered `object` of kind `info` lives in: none for a cluster-scoped kind,
/// even where kustomize's `namespace:` gave one to a kind it does not know (Pipelines'
/// metacontroller `DecoratorController`, Spark's ClusterRoles; the API server ignores it).
pub fn location(object: &Value, info: &kinds::KindInfo) -> Option<String> {
    if info.cluster_scoped { None } else { object["metadata"]["namespace"].as_str().map(String::from) }
}

/// The namespace the object inventory `entry` (of kind `info`) lists lives in, by the same rule as
/// [`location`]: inventories written before named a cluster-scoped object with the namespace
/// kustomize rendered on it.
pub fn entry_location(entry: &kubeflow_crds::component::InventoryEntry, info: &kinds::KindInfo) -> Option<String> {
    if info.cluster_scoped { None } else { entry.namespace.clone() }
}

/// Whose a live object is, as far as its labels and annotations say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claim {
    /// Made by the resource asking ([`made_by`]), or shared by every install (namespaces).
    Ours,
    /// Made by someone else and handed over: the resource sets `spec.adoptExisting`, or the object
    /// is annotated [`ADOPT_ANNOTATION`] with the resource; or made by nobody
    /// ([`aggregation_leftover`]).
    HandedOver,
    /// Labelled for another component, or for another resource of this one.
    OtherResource,
    /// Made by someone else and not handed over: never applied over, pruned or deleted.
    NotOurs,
}

/// Whose `live` is, asked by the resource `owner` of `component`.
pub fn claim(live: &Value, info: &kinds::KindInfo, component: &str, owner: &str, adopt_existing: bool) -> Claim {
    if info.is_shared() || made_by(live, info, component, owner) {
        Claim::Ours
    } else if live["metadata"]["labels"][PART_OF_LABEL].is_string() {
        Claim::OtherResource
    } else if adopt_existing || live["metadata"]["annotations"][ADOPT_ANNOTATION] == owner || aggregation_leftover(live, info) {
        Claim::HandedOver
    } else {
        Claim::NotOurs
    }
}

/// The field manager of Kubernetes' ClusterRole aggregation controller.
const AGGREGATION_CONTROLLER: &str = "clusterrole-aggregation-controller";

/// Whether `live` is a ClusterRole nobody made: no labels, no annotations, no aggregation rule, and
/// every field written by Kubernetes' aggregation controller. That controller applies an
/// aggregated role's rules from its cache, and an apply creates what is missing: when its cache
/// still held a role an uninstall had just deleted, it re-created the role bare. Such a role is no
/// one's, so the next install that renders its name takes it over instead of stopping on it. (Only
/// someone who may create ClusterRoles could forge one, and taking it over grants them nothing.)
pub fn aggregation_leftover(live: &Value, info: &kinds::KindInfo) -> bool {
    let metadata = &live["metadata"];
    let empty = |field: &Value| field.as_object().is_none_or(|map| map.is_empty());
    let managers = metadata["managedFields"].as_array().map(Vec::as_slice).unwrap_or_default();
    info.group == "rbac.authorization.k8s.io"
        && info.kind == "ClusterRole"
        && live["aggregationRule"].is_null()
        && empty(&metadata["labels"])
        && empty(&metadata["annotations"])
        && !managers.is_empty()
        && managers.iter().all(|entry| entry["manager"] == AGGREGATION_CONTROLLER)
}

/// Whether `object` is shared by every install of its component: a CRD, or marked
/// [`SHARED_ANNOTATION`].
pub fn shared_by_installs(info: &kinds::KindInfo, object: &Value) -> bool {
    info.is_crd() || object["metadata"]["annotations"][SHARED_ANNOTATION] == "true"
}

/// Whether `object` is shared by the installs that record themselves on it ([`USER_ANNOTATION_PREFIX`]):
/// marked [`SHARED_ANNOTATION`] and not a CRD (CRDs stay until `crdRemovalPolicy: Delete`).
pub fn tracks_users(info: &kinds::KindInfo, object: &Value) -> bool {
    !info.is_crd() && object["metadata"]["annotations"][SHARED_ANNOTATION] == "true"
}

/// The key of the annotation by which the resource `owner` of `component` records its use of a
/// shared object: a SHA-256 of both, as a resource's name does not fit an annotation key (and a
/// tenant cannot choose a name whose key is another install's).
pub fn user_key(component: &str, owner: &str) -> String {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(user_value(component, owner).as_bytes());
    let hex: String = digest.iter().take(16).map(|b| format!("{b:02x}")).collect();
    format!("{USER_ANNOTATION_PREFIX}{hex}")
}

/// The value of [`user_key`]: `<component>/<namespace>/<name>`, which names the resource.
pub fn user_value(component: &str, owner: &str) -> String {
    format!("{component}/{owner}")
}

/// The field manager with which the resource `owner` of `component` applies shared objects, so
/// that its user annotation is its own (see [`USER_ANNOTATION_PREFIX`]).
pub fn user_field_manager(field_manager: &str, component: &str, owner: &str) -> String {
    let key = user_key(component, owner);
    format!("{field_manager}-{}", &key[USER_ANNOTATION_PREFIX.len()..])
}

/// The installs recorded on a shared object, `(component, "namespace/name")`, but for `except`
/// (a [`user_key`]); annotations whose key is not the hash of their value are not users (written
/// by hand, or by someone pretending to be one).
pub fn users(live: &Value, except: Option<&str>) -> Vec<(String, String)> {
    let Some(annotations) = live["metadata"]["annotations"].as_object() else { return Vec::new() };
    annotations
        .iter()
        .filter(|(key, _)| key.starts_with(USER_ANNOTATION_PREFIX) && Some(key.as_str()) != except)
        .filter_map(|(key, value)| {
            let (component, owner) = value.as_str()?.split_once('/')?;
            (user_key(component, owner) == *key && owner.contains('/')).then(|| (component.to_string(), owner.to_string()))
        })
        .collect()
}

/// Shared CRDs: the newest release any install in the cluster uses wins, and a CRD is never moved
/// back. Whether the live CRD was applied by a release of `C` newer than `version` (or by one this
/// operator does not know, which can only be newer), so an install at `version` leaves it alone.
pub fn crd_belongs_to_newer_release<C: Component>(live: &Value, version: &str) -> bool {
    let Some(applied) = live["metadata"]["labels"][VERSION_LABEL].as_str() else { return false };
    // Components without built-in releases (rendered elsewhere) own their CRDs outright.
    if C::releases().is_empty() {
        return false;
    }
    let position = |v: &str| C::releases().iter().position(|r| r.version == v);
    let numbers = kubeflow_crds::validation::version_numbers;
    match (position(applied), position(version)) {
        (Some(applied), Some(ours)) => applied > ours,
        // A release run from a later Kubeflow's packages (`spec.versionFromPackage`) on either side.
        _ if applied == version => false,
        _ if numbers(applied).is_some() && numbers(version).is_some() => numbers(applied) > numbers(version),
        (None, _) => true,
        (Some(_), None) => false,
    }
}

/// The version `resource`'s objects are: what its packages run when `spec.versionFromPackage`
/// ([`crate::component::Rendered::version`]), `spec.version` otherwise.
pub fn installed_version<'a, C: Component + ?Sized>(resource: &'a C::Resource, inputs: &'a Inputs) -> &'a str {
    inputs.rendered.as_ref().and_then(|r| r.version.as_deref()).unwrap_or(&resource.core().version)
}

/// Why `spec.versionFromPackage` cannot apply to a built-in template.
pub fn package_required() -> InvalidSpec {
    InvalidSpec::new("spec.versionFromPackage", "the version is read from the packages spec.sources names, and it names none: name the packages (repoUri and path) or unset versionFromPackage and name a version this operator ships")
}

/// Namespace the component's namespaced objects go to.
pub fn target_namespace<C: Component + ?Sized>(resource: &C::Resource) -> String {
    resource.core().target_namespace.clone().unwrap_or_else(|| C::DEFAULT_NAMESPACE.to_string())
}

/// The desired objects for `resource.spec.version`, in apply order.
pub fn desired_objects<C: Component>(resource: &C::Resource, inputs: &Inputs) -> Result<Vec<Value>, InvalidSpec> {
    crate::component::register_custom_kinds::<C>();
    let core = resource.core();
    let namespace = target_namespace::<C>(resource);
    let (mut objects, version) = match &inputs.rendered {
        Some(rendered) => (rendered.objects.clone(), installed_version::<C>(resource, inputs)),
        None if core.version_from_package => return Err(package_required()),
        None => {
            let release = release::<C>(&core.version)?;
            let mut params = parameters::<C>(resource, inputs, &namespace)?;
            params.extend(release.params.iter().map(|(k, v)| (k.to_string(), v.to_string())));
            let objects = manifest::render(release.manifest, &params)
                .map_err(|e| InvalidSpec::new("spec.version", format!("built-in manifest of {} cannot be rendered: {e}", release.version)))?;
            (objects, release.version)
        }
    };
    let owner = owner_id(resource);
    for object in &mut objects {
        let info = kinds::lookup_for(C::Resource::COMPONENT.name(), &owner, object["apiVersion"].as_str().unwrap_or_default(), object["kind"].as_str().unwrap_or_default()).ok_or_else(|| {
            let name = object["metadata"]["name"].as_str().unwrap_or_default();
            InvalidSpec::new("spec.version", format!("manifest of {version} has {} {name} of an unsupported kind (apiVersion {})", object["kind"], object["apiVersion"]))
        })?;
        if !info.cluster_scoped && object["metadata"]["namespace"].is_null() {
            object["metadata"]["namespace"] = json!(namespace);
        }
        drop_unwritten(object);
        if !info.is_shared() {
            object["metadata"]["labels"][PART_OF_LABEL] = json!(C::Resource::COMPONENT.name());
            object["metadata"]["labels"][VERSION_LABEL] = json!(version);
            // A CRD (or an object marked shared) serves every install of the component in the
            // cluster: naming one owner would make installs in other namespaces re-apply it in turn.
            if !shared_by_installs(info, object) {
                object["metadata"]["annotations"][OWNER_ANNOTATION] = json!(owner);
            }
        }
    }
    if core.platform == Platform::OpenShift {
        drop_fixed_ids(&mut objects);
    }
    apply_image_overrides(resource, &mut objects)?;
    apply_replica_overrides(resource, &mut objects)?;
    C::customize(resource, inputs, &mut objects)?;
    for object in &mut objects {
        manifest::normalize_secret(object);
        let hash = manifest::content_hash(object);
        object["metadata"]["annotations"][HASH_ANNOTATION] = json!(hash);
        // After the hash: installs at one release apply one hash, and differ only in their own key.
        let component = C::Resource::COMPONENT.name();
        if kinds::lookup_for(C::Resource::COMPONENT.name(), &owner, object["apiVersion"].as_str().unwrap_or_default(), object["kind"].as_str().unwrap_or_default()).is_some_and(|info| tracks_users(info, object)) {
            object["metadata"]["annotations"][user_key(component, &owner)] = json!(user_value(component, &owner));
        }
    }
    objects.sort_by_key(|o| kinds::lookup_for(C::Resource::COMPONENT.name(), &owner, o["apiVersion"].as_str().unwrap(), o["kind"].as_str().unwrap()).map_or(u8::MAX, |k| k.rank));
    Ok(objects)
}

/// What of a Namespace `desired` this install sets on a live one: its rendered labels and
/// annotations (the component's own bookkeeping annotations aside), as a server-side apply
/// object; `None` when it renders none (a namespace created only because objects use it).
/// Namespaces are shared (created when missing, never deleted): this is all that is applied to
/// one that exists, so a namespace an install or a user made first still gets the labels the
/// application renders (Istio's `istio-injection`, Pod Security's `enforce`).
pub fn namespace_metadata(desired: &Value) -> Option<Value> {
    let ours = |key: &str| key.starts_with("components.kubeflow.org/") || key.starts_with(USER_ANNOTATION_PREFIX);
    let mut metadata = serde_json::Map::new();
    metadata.insert("name".into(), desired["metadata"]["name"].clone());
    for field in ["labels", "annotations"] {
        let kept: serde_json::Map<String, Value> = desired["metadata"][field].as_object().into_iter().flatten().filter(|(key, _)| !ours(key)).map(|(k, v)| (k.clone(), v.clone())).collect();
        if !kept.is_empty() {
            metadata.insert(field.into(), Value::Object(kept));
        }
    }
    (metadata.len() > 1).then(|| json!({"apiVersion": "v1", "kind": "Namespace", "metadata": metadata}))
}

/// Whether the live Namespace carries every label and annotation [`namespace_metadata`] sets.
pub fn namespace_settled(desired: &Value, live: &Value) -> bool {
    namespace_metadata(desired).is_none_or(|wanted| manifest::is_subset(&wanted["metadata"], &live["metadata"]))
}

/// Whether `annotations` (an object's) ask cert-manager's cainjector to write its `caBundle`s:
/// `inject-ca-from` or `inject-ca-from-secret` name where from, `inject-apiserver-ca` must be
/// `"true"`.
pub fn asks_cainjector<'a>(mut annotations: impl Iterator<Item = (&'a str, &'a str)>) -> bool {
    annotations.any(|(key, value)| matches!(key, "cert-manager.io/inject-ca-from" | "cert-manager.io/inject-ca-from-secret") || (key == "cert-manager.io/inject-apiserver-ca" && value == "true"))
}

/// A `caBundle` that holds no certificate (empty or blank, e.g. `Cg==`): a slot another
/// controller fills (istiod, KServe's and Katib's controllers patch their own webhooks').
fn blank_ca(ca: &Value) -> bool {
    ca.as_str().is_some_and(|encoded| STANDARD.decode(encoded).is_ok_and(|bytes| bytes.iter().all(u8::is_ascii_whitespace)))
}

/// Takes out what an apply does not write or must not own: `status` (upstream's CRDs carry one;
/// the API server ignores it), an aggregated ClusterRole's `rules`, which the aggregation
/// controller writes (applied as rendered, `rules: []`, they would be taken back from it on every
/// apply, and it would write them again), and, likewise, the `caBundle`s of a webhook
/// configuration, CRD or APIService that asks cainjector for them (seldon's stale CA would
/// otherwise be re-applied over the injected one on every reconcile), and blank ones.
fn drop_unwritten(object: &mut Value) {
    let annotations = object["metadata"]["annotations"].as_object().into_iter().flatten().filter_map(|(k, v)| Some((k.as_str(), v.as_str()?)));
    let injected = asks_cainjector(annotations);
    let Some(fields) = object.as_object_mut() else { return };
    fields.remove("status");
    let kind = fields.get("kind").and_then(Value::as_str).unwrap_or_default().to_string();
    if kind == "ClusterRole" && fields.get("aggregationRule").is_some_and(|r| !r.is_null()) {
        fields.remove("rules");
    }
    // Where each kind keeps its `caBundle`s.
    let configs: Vec<&mut Value> = match kind.as_str() {
        "MutatingWebhookConfiguration" | "ValidatingWebhookConfiguration" => fields.get_mut("webhooks").and_then(Value::as_array_mut).into_iter().flatten().filter_map(|w| w.get_mut("clientConfig")).collect(),
        "CustomResourceDefinition" => fields.get_mut("spec").and_then(|s| s.pointer_mut("/conversion/webhook/clientConfig")).into_iter().collect(),
        "APIService" => fields.get_mut("spec").into_iter().collect(),
        _ => Vec::new(),
    };
    for config in configs.into_iter().filter_map(Value::as_object_mut) {
        if injected || config.get("caBundle").is_some_and(blank_ca) {
            config.remove("caBundle");
        }
    }
}

/// Built-in and component parameters, then KfDef application parameters, then `spec.overrides.parameters`.
fn parameters<C: Component>(resource: &C::Resource, inputs: &Inputs, namespace: &str) -> Result<Params, InvalidSpec> {
    let core = resource.core();
    let mut params = C::default_parameters();
    params.extend(C::parameters(resource, inputs)?);
    params.insert("namespace".into(), namespace.into());
    params.insert("version".into(), core.version.clone());
    params.insert("instance".into(), resource.name_any());
    params.insert("instanceNamespace".into(), resource.namespace().unwrap_or_default());
    let known: BTreeSet<String> = C::default_parameters().into_keys().collect();
    // kfctl application parameters outside this component's vocabulary do not apply to it.
    for source in &core.sources {
        for p in source.parameters.iter().filter(|p| known.contains(&p.name)) {
            params.insert(p.name.clone(), p.value.clone());
        }
    }
    for (i, p) in core.overrides.parameters.iter().enumerate() {
        if !known.contains(&p.name) {
            return Err(InvalidSpec::new(
                format!("spec.overrides.parameters[{i}].name"),
                format!("unknown parameter {:?}; allowed: {}", p.name, known.iter().cloned().collect::<Vec<_>>().join(", ")),
            ));
        }
        params.insert(p.name.clone(), p.value.clone());
    }
    Ok(params)
}

/// Pod templates of the workloads in `objects`, with the workload's name.
fn pod_specs(objects: &mut [Value]) -> impl Iterator<Item = (String, &mut Value)> {
    objects.iter_mut().filter(|o| matches!(o["kind"].as_str(), Some("Deployment" | "StatefulSet"))).map(|o| {
        let name = o["metadata"]["name"].as_str().unwrap_or_default().to_string();
        (name, &mut o["spec"]["template"]["spec"])
    })
}

/// OpenShift's restricted SCC assigns each namespace's user and group ids; pods that ask for fixed
/// ones are refused. Drops `runAsUser`, `runAsGroup` and `fsGroup` from pod and container security
/// contexts of every workload.
fn drop_fixed_ids(objects: &mut [Value]) {
    fn strip(context: Option<&mut Value>) {
        if let Some(Value::Object(map)) = context {
            for field in ["runAsUser", "runAsGroup", "fsGroup"] {
                map.remove(field);
            }
        }
    }
    for (_, pod) in pod_specs(objects) {
        strip(pod.get_mut("securityContext"));
        for list in ["initContainers", "containers"] {
            for container in pod.get_mut(list).and_then(Value::as_array_mut).into_iter().flatten() {
                strip(container.get_mut("securityContext"));
            }
        }
    }
}

fn apply_image_overrides<R: ComponentResource>(resource: &R, objects: &mut [Value]) -> Result<(), InvalidSpec> {
    let images = &resource.core().overrides.images;
    let mut unused: BTreeSet<&String> = images.keys().collect();
    let mut containers = BTreeSet::new();
    for (_, pod) in pod_specs(objects) {
        for list in ["initContainers", "containers"] {
            for container in pod.get_mut(list).and_then(Value::as_array_mut).into_iter().flatten() {
                let name = container["name"].as_str().unwrap_or_default().to_string();
                if let Some(image) = images.get(&name) {
                    container["image"] = json!(image);
                    unused.remove(&name);
                }
                containers.insert(name);
            }
        }
    }
    match unused.first() {
        None => Ok(()),
        Some(name) => Err(InvalidSpec::new(
            format!("spec.overrides.images.{name}"),
            format!("no container named {name:?} in version {}; containers: {}", resource.core().version, containers.into_iter().collect::<Vec<_>>().join(", ")),
        )),
    }
}

fn apply_replica_overrides<R: ComponentResource>(resource: &R, objects: &mut [Value]) -> Result<(), InvalidSpec> {
    let replicas = &resource.core().overrides.replicas;
    let mut workloads = Vec::new();
    for object in objects.iter_mut().filter(|o| matches!(o["kind"].as_str(), Some("Deployment" | "StatefulSet"))) {
        let name = object["metadata"]["name"].as_str().unwrap_or_default().to_string();
        if let Some(count) = replicas.get(&name) {
            object["spec"]["replicas"] = json!(count);
        }
        workloads.push(name);
    }
    match replicas.keys().find(|name| !workloads.contains(name)) {
        None => Ok(()),
        Some(name) => Err(InvalidSpec::new(
            format!("spec.overrides.replicas.{name}"),
            format!("no Deployment or StatefulSet named {name:?} in version {}; workloads: {}", resource.core().version, workloads.join(", ")),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_namespace_a_profile_made_is_a_tenants() {
        let namespace = |metadata: Value| serde_json::from_value::<k8s_openapi::api::core::v1::Namespace>(json!({"metadata": metadata})).unwrap();
        let made = namespace(json!({"name": "oauth2-proxy", "ownerReferences": [{"apiVersion": "kubeflow.org/v1", "kind": "Profile", "name": "oauth2-proxy", "uid": "u"}]}));
        assert_eq!(tenant_owner(&made).as_deref(), Some("Profile oauth2-proxy"));
        let labelled = namespace(json!({"name": "cert-manager", "labels": {"app.kubernetes.io/part-of": "kubeflow-profile"}}));
        assert_eq!(tenant_owner(&labelled).as_deref(), Some("a Profile (labelled app.kubernetes.io/part-of=kubeflow-profile)"));
        // A platform namespace, and one owned by something else of the same kind name.
        assert_eq!(tenant_owner(&namespace(json!({"name": "kubeflow", "labels": {"app.kubernetes.io/part-of": "kubeflow"}}))), None);
        assert_eq!(tenant_owner(&namespace(json!({"name": "x", "ownerReferences": [{"apiVersion": "example.com/v1", "kind": "Profile", "name": "x", "uid": "u"}]}))), None);

        let objects = [
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "auth"}}),
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "oauth2-proxy"}}),
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "r"}}),
            json!({"apiVersion": "example.com/v1", "kind": "Namespace", "metadata": {"name": "not-a-namespace"}}),
        ];
        assert_eq!(named_namespaces(&objects).into_keys().collect::<Vec<_>>(), ["auth", "oauth2-proxy"]);
    }

    /// A grant to an account, a route to a Service and an admitted principal name a namespace as
    /// much as an object placed there, each with the field that names it.
    #[test]
    fn bindings_webhooks_api_services_and_policies_name_namespaces() {
        let objects = [
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": "read"},
                "subjects": [{"kind": "Group", "name": "g"}, {"kind": "ServiceAccount", "name": "prometheus", "namespace": "monitoring"}]}),
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "rb", "namespace": "kubeflow"},
                "subjects": [{"kind": "ServiceAccount", "name": "a", "namespace": "team-a"}]}),
            json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration", "metadata": {"name": "w"},
                "webhooks": [{"name": "x", "clientConfig": {"url": "https://x"}}, {"name": "y", "clientConfig": {"service": {"name": "s", "namespace": "hooks"}}}]}),
            json!({"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService", "metadata": {"name": "v1.metrics"}, "spec": {"service": {"name": "m", "namespace": "metrics"}}}),
            json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition", "metadata": {"name": "c"},
                "spec": {"conversion": {"strategy": "Webhook", "webhook": {"clientConfig": {"service": {"name": "conv", "namespace": "convert"}}}}}}),
            json!({"apiVersion": "security.istio.io/v1", "kind": "AuthorizationPolicy", "metadata": {"name": "p", "namespace": "kubeflow"},
                "spec": {"rules": [{"from": [{"source": {"namespaces": ["callers"], "principals": ["cluster.local/ns/bob/sa/default", "*", "cluster.local/ns/*/sa/x"]}}]}]}}),
            // Not the kinds it looks like.
            json!({"apiVersion": "example.com/v1", "kind": "RoleBinding", "metadata": {"name": "e"}, "subjects": [{"namespace": "elsewhere"}]}),
        ];
        let named: Vec<(&str, (String, String))> = named_namespaces(&objects).into_iter().collect();
        let expected = [
            ("bob", ("AuthorizationPolicy kubeflow/p", "spec.rules[0].from[0].source.principals[0]")),
            ("callers", ("AuthorizationPolicy kubeflow/p", "spec.rules[0].from[0].source.namespaces[0]")),
            ("convert", ("CustomResourceDefinition c", "spec.conversion.webhook.clientConfig.service.namespace")),
            ("hooks", ("MutatingWebhookConfiguration w", "webhooks[1].clientConfig.service.namespace")),
            ("kubeflow", ("RoleBinding kubeflow/rb", "metadata.namespace")),
            ("metrics", ("APIService v1.metrics", "spec.service.namespace")),
            ("monitoring", ("ClusterRoleBinding read", "subjects[1].namespace")),
            ("team-a", ("RoleBinding kubeflow/rb", "subjects[0].namespace")),
        ];
        let expected: Vec<(&str, (String, String))> = expected.into_iter().map(|(n, (o, f))| (n, (o.to_string(), f.to_string()))).collect();
        assert_eq!(named, expected);
    }

    #[test]
    fn what_others_write_is_not_applied() {
        let mut role = json!({"kind": "ClusterRole", "metadata": {"name": "kubeflow-edit"}, "aggregationRule": {"clusterRoleSelectors": []}, "rules": []});
        drop_unwritten(&mut role);
        assert!(role.get("rules").is_none());
        let mut plain = json!({"kind": "ClusterRole", "metadata": {"name": "r"}, "rules": [], "status": {}});
        drop_unwritten(&mut plain);
        assert_eq!(plain, json!({"kind": "ClusterRole", "metadata": {"name": "r"}, "rules": []}));
        // cainjector's caBundles (seldon's webhooks carry a placeholder), not others'.
        let webhooks = |annotations: Value| json!({"kind": "MutatingWebhookConfiguration", "metadata": {"name": "w", "annotations": annotations}, "webhooks": [{"name": "a", "clientConfig": {"caBundle": "UExBQ0VIT0xERVI=", "service": {"name": "s", "namespace": "n"}}}]});
        let mut asked = webhooks(json!({"cert-manager.io/inject-ca-from": "kubeflow/seldon-serving-cert"}));
        drop_unwritten(&mut asked);
        assert_eq!(asked["webhooks"][0]["clientConfig"], json!({"service": {"name": "s", "namespace": "n"}}));
        let mut own = webhooks(json!({"cert-manager.io/inject-apiserver-ca": "false"}));
        drop_unwritten(&mut own);
        assert_eq!(own["webhooks"][0]["clientConfig"]["caBundle"], "UExBQ0VIT0xERVI=");
        // A blank one (KFServing's `Cg==`) is a slot its controller fills.
        let mut blank = webhooks(json!({}));
        blank["webhooks"][0]["clientConfig"]["caBundle"] = json!("Cg==");
        drop_unwritten(&mut blank);
        assert!(blank["webhooks"][0]["clientConfig"].get("caBundle").is_none());
        let mut crd = json!({"kind": "CustomResourceDefinition", "metadata": {"name": "c", "annotations": {"cert-manager.io/inject-ca-from-secret": "ns/s"}}, "spec": {"conversion": {"strategy": "Webhook", "webhook": {"clientConfig": {"caBundle": "Cg=="}}}}});
        drop_unwritten(&mut crd);
        assert_eq!(crd["spec"]["conversion"]["webhook"]["clientConfig"], json!({}));
        let mut api_service = json!({"kind": "APIService", "metadata": {"name": "v1beta1.webhook.cert-manager.io", "annotations": {"cert-manager.io/inject-apiserver-ca": "true"}}, "spec": {"caBundle": "Cg==", "group": "g"}});
        drop_unwritten(&mut api_service);
        assert_eq!(api_service["spec"], json!({"group": "g"}));
    }

    fn object(labels: Value, annotations: Value) -> Value {
        json!({"metadata": {"name": "x", "labels": labels, "annotations": annotations}})
    }

    #[test]
    fn only_objects_labelled_and_annotated_for_the_resource_are_its_own() {
        let deployment = kinds::lookup("apps/v1", "Deployment").unwrap();
        let ours = object(json!({PART_OF_LABEL: "katib"}), json!({OWNER_ANNOTATION: "team/katib"}));
        assert!(made_by(&ours, deployment, "katib", "team/katib"));
        // Another install of the same component, another component, an unlabelled object.
        assert!(!made_by(&ours, deployment, "katib", "other/katib"));
        assert!(!made_by(&object(json!({PART_OF_LABEL: "dex"}), json!({OWNER_ANNOTATION: "team/katib"})), deployment, "katib", "team/katib"));
        assert!(!made_by(&object(json!({}), json!({OWNER_ANNOTATION: "team/katib"})), deployment, "katib", "team/katib"));
        assert!(!made_by(&json!({"metadata": {"name": "cluster-admin"}}), kinds::lookup("rbac.authorization.k8s.io/v1", "ClusterRole").unwrap(), "katib", "team/katib"));
        // CRDs name no owner: the component label is the proof.
        let crd = kinds::lookup("apiextensions.k8s.io/v1", "CustomResourceDefinition").unwrap();
        assert!(made_by(&object(json!({PART_OF_LABEL: "katib"}), json!({})), crd, "katib", "team/katib"));
        assert!(!made_by(&object(json!({}), json!({})), crd, "katib", "team/katib"));
        // So do objects the component's manifest marks shared by every install.
        let role = kinds::lookup("rbac.authorization.k8s.io/v1", "ClusterRole").unwrap();
        assert!(made_by(&object(json!({PART_OF_LABEL: "profiles"}), json!({SHARED_ANNOTATION: "true"})), role, "profiles", "team/profiles"));
        assert!(!made_by(&object(json!({PART_OF_LABEL: "profiles"}), json!({SHARED_ANNOTATION: "true"})), role, "katib", "team/katib"), "another component's");
        assert!(!made_by(&object(json!({PART_OF_LABEL: "profiles"}), json!({OWNER_ANNOTATION: "other/profiles"})), role, "profiles", "team/profiles"));
    }

    #[test]
    fn a_shared_objects_users_are_the_annotations_whose_key_is_the_hash_of_their_value() {
        let (alice, bob) = (user_key("kfserving", "alice/kserve"), user_key("kfserving", "bob/kserve"));
        assert_ne!(alice, bob);
        assert_ne!(alice, user_key("katib", "alice/kserve"), "the component is part of the key");
        // An annotation key's name part: at most 63 characters.
        let name = alice.strip_prefix(USER_ANNOTATION_PREFIX).unwrap();
        assert!(name.len() <= 63 && name.chars().all(|c| c.is_ascii_hexdigit()), "{name}");
        assert!(user_field_manager("kubeflow-kfserving-operator", "kfserving", "alice/kserve").len() <= 128);
        assert_ne!(user_field_manager("m", "kfserving", "alice/kserve"), user_field_manager("m", "kfserving", "bob/kserve"));
        let live = object(
            json!({PART_OF_LABEL: "kfserving"}),
            json!({
                SHARED_ANNOTATION: "true",
                alice.clone(): "kfserving/alice/kserve",
                bob.clone(): "kfserving/bob/kserve",
                // Forged: a key that is not the hash of its value, a value that names no resource.
                format!("{USER_ANNOTATION_PREFIX}0123"): "kfserving/mallory/kserve",
                user_key("kfserving", "nobody"): "kfserving/nobody",
            }),
        );
        let named = |except: Option<&str>| users(&live, except).into_iter().map(|(c, o)| format!("{c}/{o}")).collect::<Vec<_>>();
        let mut all = named(None);
        all.sort();
        assert_eq!(all, ["kfserving/alice/kserve", "kfserving/bob/kserve"]);
        assert_eq!(named(Some(&alice)), ["kfserving/bob/kserve"]);
        let role = kinds::lookup("rbac.authorization.k8s.io/v1", "ClusterRole").unwrap();
        assert!(tracks_users(role, &live));
        let crd = kinds::lookup("apiextensions.k8s.io/v1", "CustomResourceDefinition").unwrap();
        assert!(!tracks_users(crd, &live), "CRDs stay until crdRemovalPolicy: Delete");
        assert!(!tracks_users(role, &object(json!({PART_OF_LABEL: "kfserving"}), json!({}))));
    }

    #[test]
    fn an_existing_object_someone_else_made_is_ours_only_when_handed_over() {
        let deployment = kinds::lookup("apps/v1", "Deployment").unwrap();
        let claim_of = |live: &Value, adopt_existing| claim(live, deployment, "kustomize", "team/apps", adopt_existing);
        let coredns = json!({"metadata": {"name": "coredns", "namespace": "kube-system", "labels": {"k8s-app": "kube-dns"}}});
        assert_eq!(claim_of(&coredns, false), Claim::NotOurs);
        assert_eq!(claim_of(&coredns, true), Claim::HandedOver, "spec.adoptExisting");
        let annotated = |to: &str| object(json!({}), json!({ADOPT_ANNOTATION: to}));
        assert_eq!(claim_of(&annotated("team/apps"), false), Claim::HandedOver);
        assert_eq!(claim_of(&annotated("other/apps"), false), Claim::NotOurs, "handed to another resource");
        assert_eq!(claim_of(&object(json!({PART_OF_LABEL: "kustomize"}), json!({OWNER_ANNOTATION: "team/apps"})), false), Claim::Ours);
        // Labelled for another resource: never handed over by a flag of this one.
        assert_eq!(claim_of(&object(json!({PART_OF_LABEL: "kustomize"}), json!({OWNER_ANNOTATION: "other/apps"})), true), Claim::OtherResource);
        assert_eq!(claim_of(&object(json!({PART_OF_LABEL: "katib"}), json!({ADOPT_ANNOTATION: "team/apps"})), false), Claim::OtherResource);
        // Namespaces are shared: only ever created, never changed.
        let namespace = kinds::lookup("v1", "Namespace").unwrap();
        assert_eq!(claim(&json!({"metadata": {"name": "kube-system"}}), namespace, "kustomize", "team/apps", false), Claim::Ours);
    }

    /// What Kubernetes' aggregation controller leaves when it re-applies the rules of a role just
    /// deleted (seen live: `kubeflow-view` after a KfDef's uninstall).
    #[test]
    fn a_cluster_role_only_the_aggregation_controller_wrote_is_taken_over() {
        let role = kinds::lookup("rbac.authorization.k8s.io/v1", "ClusterRole").unwrap();
        let written_by = |managers: &[&str]| -> Value {
            let entries: Vec<Value> = managers.iter().map(|m| json!({"manager": m, "operation": "Apply", "fieldsV1": {"f:rules": {}}})).collect();
            json!({"kind": "ClusterRole", "metadata": {"name": "kubeflow-view", "managedFields": entries}, "rules": [{"verbs": ["get"]}]})
        };
        let claim_of = |live: &Value| claim(live, role, "kustomize", "kubeflow/apps", false);
        let husk = written_by(&["clusterrole-aggregation-controller"]);
        assert!(aggregation_leftover(&husk, role));
        assert_eq!(claim_of(&husk), Claim::HandedOver);
        // Anything else anyone wrote makes it theirs.
        assert_eq!(claim_of(&written_by(&["clusterrole-aggregation-controller", "kubectl"])), Claim::NotOurs, "another manager");
        assert_eq!(claim_of(&written_by(&[])), Claim::NotOurs, "no record of who wrote it");
        let mut labelled = husk.clone();
        labelled["metadata"]["labels"] = json!({"team": "a"});
        assert_eq!(claim_of(&labelled), Claim::NotOurs, "labelled");
        let mut annotated = husk.clone();
        annotated["metadata"]["annotations"] = json!({"note": "mine"});
        assert_eq!(claim_of(&annotated), Claim::NotOurs, "annotated");
        let mut aggregating = husk.clone();
        aggregating["aggregationRule"] = json!({"clusterRoleSelectors": [{"matchLabels": {"a": "b"}}]});
        assert_eq!(claim_of(&aggregating), Claim::NotOurs, "an aggregated role someone keeps");
        let mut labelled_for_other = husk.clone();
        labelled_for_other["metadata"]["labels"] = json!({PART_OF_LABEL: "katib"});
        assert_eq!(claim_of(&labelled_for_other), Claim::OtherResource);
        // Only ClusterRoles.
        let role_binding = kinds::lookup("rbac.authorization.k8s.io/v1", "ClusterRoleBinding").unwrap();
        assert_eq!(claim(&husk, role_binding, "kustomize", "kubeflow/apps", false), Claim::NotOurs);
    }

    /// Kubeflow's `kubeflow-namespace` application renders Namespace `kubeflow` labelled for
    /// Istio's sidecars and Pod Security; a built-in created it bare first.
    #[test]
    fn a_rendered_namespace_is_labelled_on_a_namespace_that_exists() {
        let desired = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {
            "name": "kubeflow",
            "labels": {"istio-injection": "enabled", "pod-security.kubernetes.io/enforce": "restricted"},
            "annotations": {APPLICATION_ANNOTATION: "kubeflow-namespace", HASH_ANNOTATION: "abc", "team": "ml"},
        }});
        let metadata = namespace_metadata(&desired).unwrap();
        assert_eq!(metadata, json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kubeflow", "labels": {"istio-injection": "enabled", "pod-security.kubernetes.io/enforce": "restricted"}, "annotations": {"team": "ml"}}}), "our bookkeeping is not written on a shared namespace");
        let bare = json!({"metadata": {"name": "kubeflow", "labels": {"kubernetes.io/metadata.name": "kubeflow"}}});
        assert!(!namespace_settled(&desired, &bare));
        let mut labelled = bare.clone();
        labelled["metadata"]["labels"]["istio-injection"] = json!("enabled");
        labelled["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] = json!("restricted");
        assert!(!namespace_settled(&desired, &labelled), "the annotation is missing");
        labelled["metadata"]["annotations"] = json!({"team": "ml", "other": "kept"});
        assert!(namespace_settled(&desired, &labelled));
        labelled["metadata"]["labels"]["istio-injection"] = json!("disabled");
        assert!(!namespace_settled(&desired, &labelled), "a label with another value");
        // A namespace created only because objects use it sets nothing on one that exists.
        let used = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kubeflow", "annotations": {APPLICATION_ANNOTATION: "katib"}}});
        assert_eq!(namespace_metadata(&used), None);
        assert!(namespace_settled(&used, &bare));
    }
}
