//! Every component operator, run standalone (no NATS) as a host process against the real control
//! plane, through the whole lifecycle of its resource: install → Ready → heal deletes (namespaced
//! and cluster-scoped) → revert an edit → no-op reconcile writes nothing → switch version →
//! refuse an unsupported version without touching anything → delete, CRDs retained.

use std::collections::BTreeMap;

use component_framework::Component;
use component_framework::api::component::{ComponentPhase, ComponentResource, InventoryEntry};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::{Api, Client, Resource, ResourceExt};
use kubeflow_e2e::*;
use serde_json::json;

/// The API of an inventory entry's kind, as the cluster serves it (upstream's packages install
/// kinds beyond the framework's list, e.g. Istio's EnvoyFilters).
async fn dynamic_api(client: &Client, entry: &InventoryEntry) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk(&entry.group, &entry.version, &entry.kind);
    let (resource, _) = kube::discovery::pinned_kind(client, &gvk).await.unwrap_or_else(|e| panic!("the cluster serves no {gvk:?}: {e}"));
    match &entry.namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
        None => Api::all_with(client.clone(), &resource),
    }
}

/// What says an object was recreated or re-applied: uid, generation (bumped by spec changes) and
/// the hash annotation the operator writes with every apply. (resourceVersion also moves when
/// Kubernetes' own controllers update status, so it says nothing about the operator.)
async fn snapshot(client: &Client, inventory: &[InventoryEntry]) -> BTreeMap<String, (String, Option<i64>, Option<String>)> {
    let mut out = BTreeMap::new();
    for entry in inventory {
        let object = dynamic_api(client, entry).await.get(&entry.name).await.unwrap_or_else(|e| panic!("{entry:?}: {e}"));
        let hash = object.annotations().get(component_framework::build::HASH_ANNOTATION).cloned();
        out.insert(format!("{}/{:?}/{}", entry.kind, entry.namespace, entry.name), (object.uid().unwrap(), object.metadata.generation, hash));
    }
    out
}

async fn wait_phase<K: ComponentResource>(api: &Api<K>, name: &str, what: &str, check: impl Fn(&K) -> bool) -> K {
    eventually(what, || async {
        let object = api.get(name).await.map_err(|e| e.to_string())?;
        if check(&object) { Ok(object) } else { Err(format!("{:?}", object.component_status())) }
    })
    .await
}

fn ready_at<K: ComponentResource>(version: &str) -> impl Fn(&K) -> bool + '_ {
    move |k: &K| {
        k.component_status().is_some_and(|s| {
            s.phase == Some(ComponentPhase::Ready) && s.installed_version.as_deref() == Some(version) && s.observed_generation == k.meta().generation
        })
    }
}


/// What the tests but the lifecycles run the operators with, until their fixtures move to
/// upstream's packages: the hand-written templates (per-install names and namespaces, which two
/// installs of one upstream package do not have; Kubeflow 1.3.0's releases, which have no archive
/// here).
const ON_TEMPLATES: (&str, &str) = (BUILT_IN_TEMPLATES_ENV, "true");

/// The whole lifecycle of component `C` (operator binary `<component>-operator`, run as shipped),
/// its resource created with the component's test fixture spec (`Component::test_spec`) at the
/// component's two newest releases: upstream's packages from their Kubeflow releases' archives
/// (github.com, mirrored on loopback), their objects where upstream puts them.
async fn lifecycle<C: Component>() {
    let _one = ONE_AT_A_TIME.lock().await;
    let binary = &format!("{}-operator", C::Resource::COMPONENT.name());
    let spec = C::test_spec();
    let client = client().await;
    install_crds(&client).await;
    serve_prerequisite_kinds(&client).await;
    let ns = TestNamespace::create(&client, &format!("e2e-{}", C::Resource::COMPONENT.name())).await;
    // Installed the way a platform engineer would (kubectl apply -k deploy/<component>); the
    // operator process runs on the host with the package's ServiceAccount token.
    let kubeconfig = install_package(&client, C::Resource::COMPONENT.name()).await;
    let operator = OperatorProcess::start(binary, &["--namespace", &ns.name], &[("KUBECONFIG", kubeconfig.to_str().unwrap())]);
    operator.wait_ready().await;

    let releases = C::releases();
    let [.., first, second] = releases else { panic!("{binary}: fewer than two releases") };
    let (first, second) = (first.version, second.version);
    let mut full_spec = json!({"version": first});
    full_spec.as_object_mut().unwrap().extend(spec.as_object().unwrap().clone());
    let resource: C::Resource = serde_json::from_value(json!({
        "apiVersion": C::Resource::api_version(&()), "kind": C::Resource::kind(&()),
        "metadata": {"name": "e2e"}, "spec": full_spec,
    }))
    .unwrap();
    let api: Api<C::Resource> = Api::namespaced(client.clone(), &ns.name);
    api.create(&PostParams::default(), &resource).await.unwrap();

    // Installed and Ready, readiness taken from the real Deployments (kwok makes them Available).
    let ready = wait_phase(&api, "e2e", &format!("{first} Ready"), ready_at::<C::Resource>(first)).await;
    let inventory = ready.component_status().unwrap().inventory.clone();
    let workloads: Vec<&InventoryEntry> = inventory.iter().filter(|e| e.kind == "Deployment" || e.kind == "StatefulSet").collect();
    assert!(!workloads.is_empty(), "no workloads installed: {inventory:?}");
    for entry in &workloads {
        let live = serde_json::to_value(dynamic_api(&client, entry).await.get(&entry.name).await.unwrap()).unwrap();
        let wanted = live["spec"]["replicas"].as_i64().unwrap_or(1);
        let ready = match entry.kind.as_str() {
            "Deployment" => live["status"]["conditions"].as_array().into_iter().flatten().any(|c| c["type"] == "Available" && c["status"] == "True"),
            _ => live["status"]["readyReplicas"].as_i64().unwrap_or(0) >= wanted,
        };
        assert!(ready, "{} {} is not ready but the component reports Ready: {}", entry.kind, entry.name, live["status"]);
    }
    let before = snapshot(&client, &inventory).await;
    assert_eq!(before.len(), inventory.len());

    // Heal: delete one namespaced and one cluster-scoped object.
    let namespaced = workloads[0].clone();
    // (Not a Namespace: upstream's are shared by the components' installs.)
    let cluster = inventory.iter().find(|e| e.namespace.is_none() && !["CustomResourceDefinition", "Namespace"].contains(&e.kind.as_str())).expect("a cluster-scoped object").clone();
    for entry in [&namespaced, &cluster] {
        let api = dynamic_api(&client, entry).await;
        let old_uid = api.get(&entry.name).await.unwrap().uid();
        api.delete(&entry.name, &DeleteParams::background()).await.unwrap();
        eventually(&format!("{} {} recreated", entry.kind, entry.name), || async {
            match api.get_opt(&entry.name).await {
                Ok(Some(o)) if o.uid() != old_uid && o.metadata.deletion_timestamp.is_none() => Ok(()),
                other => Err(format!("{other:?}")),
            }
        })
        .await;
    }

    // Drift: change a workload's image by hand; the operator puts the package's back. (Not its
    // replicas: upstream's packages leave some to an HPA, or to whoever scales them.)
    let workload_api = dynamic_api(&client, &namespaced).await;
    let image_of = |workload: DynamicObject| workload.data["spec"]["template"]["spec"]["containers"][0]["image"].clone();
    let desired_image = image_of(workload_api.get(&namespaced.name).await.unwrap());
    let drift = json!([{"op": "replace", "path": "/spec/template/spec/containers/0/image", "value": "e2e.example/drifted:1"}]);
    workload_api.patch(&namespaced.name, &PatchParams::default(), &Patch::<()>::Json(serde_json::from_value(drift).unwrap())).await.unwrap();
    eventually("edited image reverted", || async {
        let image = image_of(workload_api.get(&namespaced.name).await.map_err(|e| e.to_string())?);
        if image == desired_image { Ok(()) } else { Err(format!("image {image}")) }
    })
    .await;
    // Let Kubernetes finish the heal (extra replicas gone, statuses current) so the world is still
    // when the no-op reconcile below runs: a workload status still moving is a real change.
    for entry in &workloads {
        let api = dynamic_api(&client, entry).await;
        eventually(&format!("{} {} settled", entry.kind, entry.name), || async {
            let live = serde_json::to_value(api.get(&entry.name).await.map_err(|e| e.to_string())?).unwrap();
            let wanted = live["spec"]["replicas"].as_i64().unwrap_or(1);
            let status = &live["status"];
            let settled = status["observedGeneration"].as_i64() == live["metadata"]["generation"].as_i64()
                && status["replicas"].as_i64().unwrap_or(0) == wanted
                && status["readyReplicas"].as_i64().unwrap_or(0) == wanted;
            if settled { Ok(()) } else { Err(status.to_string()) }
        })
        .await;
    }
    wait_phase(&api, "e2e", "Ready again after healing", ready_at::<C::Resource>(first)).await;

    // A reconcile with nothing to change writes nothing: touch the resource's metadata only.
    let (finished, writes) = operator.quiescent().await;
    api.patch("e2e", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"annotations": {"e2e/touch": "1"}}}))).await.unwrap();
    let writes_after = eventually("a finished reconcile after the touch", || async {
        let (now, w) = operator.quiescent().await;
        if now > finished { Ok(w) } else { Err(now) }
    })
    .await;
    assert_eq!(writes_after, writes, "a no-op reconcile issued writes");

    // Switch to the other release.
    api.patch("e2e", &PatchParams::default(), &Patch::Merge(json!({"spec": {"version": second}}))).await.unwrap();
    let upgraded = wait_phase(&api, "e2e", &format!("{second} Ready"), ready_at::<C::Resource>(second)).await;
    let inventory = upgraded.component_status().unwrap().inventory.clone();
    for entry in inventory.iter().filter(|e| e.kind == "Deployment" || e.kind == "StatefulSet") {
        let live = dynamic_api(&client, entry).await.get(&entry.name).await.unwrap();
        assert_eq!(live.labels().get("components.kubeflow.org/version").map(String::as_str), Some(second), "{}", entry.name);
    }

    // An unsupported version: Degraded, naming the field and the supported versions; nothing touched.
    let before = snapshot(&client, &inventory).await;
    api.patch("e2e", &PatchParams::default(), &Patch::Merge(json!({"spec": {"version": "v99.0.0"}}))).await.unwrap();
    let degraded = wait_phase(&api, "e2e", "Degraded for v99.0.0", |k: &C::Resource| {
        k.component_status().is_some_and(|s| s.phase == Some(ComponentPhase::Degraded) && s.observed_generation == k.meta().generation)
    })
    .await;
    let status = degraded.component_status().unwrap();
    let condition = status.conditions.iter().find(|c| c.type_ == "Degraded").unwrap();
    assert!(condition.message.contains("spec.version") && condition.message.contains(first) && condition.message.contains(second), "{}", condition.message);
    assert_eq!(status.installed_version.as_deref(), Some(second));
    assert_eq!(snapshot(&client, &inventory).await, before, "objects changed while the spec was invalid");
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(client.clone(), &ns.name);
    eventually("an InvalidSpec event", || async {
        let list = events.list(&Default::default()).await.map_err(|e| e.to_string())?;
        if list.items.iter().any(|e| e.reason.as_deref() == Some("InvalidSpec")) { Ok(()) } else { Err(format!("{} events", list.items.len())) }
    })
    .await;

    // Delete: every object goes, cluster-scoped included; CRDs stay.
    api.delete("e2e", &DeleteParams::default()).await.unwrap();
    gone(&api, "e2e").await;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for entry in &inventory {
        if entry.kind == "CustomResourceDefinition" {
            assert!(crds.get_opt(&entry.name).await.unwrap().is_some(), "CRD {} was removed", entry.name);
        } else {
            // Gone, not merely terminating.
            gone(&dynamic_api(&client, entry).await, &entry.name).await;
        }
    }
}

/// The tests of this file run one at a time: upstream's packages share namespaces (Katib's,
/// KServe's and Pipelines' `kubeflow`), which each lifecycle expects gone when its resource is
/// deleted, and cluster-scoped names (KServe's ClusterServingRuntimes, Katib's and Dex's roles and
/// CRDs), whose makers, users and events the other tests check.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test]
async fn istio_lifecycle() {
    lifecycle::<istio_operator::IstioComponent>().await;
}

#[tokio::test]
async fn dex_lifecycle() {
    lifecycle::<dex_operator::DexComponent>().await;
}

#[tokio::test]
async fn kfserving_lifecycle() {
    lifecycle::<kfserving_operator::KFServingComponent>().await;
}

#[tokio::test]
async fn pipelines_lifecycle() {
    lifecycle::<pipelines_operator::PipelinesComponent>().await;
}

#[tokio::test]
async fn katib_lifecycle() {
    lifecycle::<katib_operator::KatibComponent>().await;
}

/// A referenced Secret that does not exist: Degraded naming the field, nothing installed; once the
/// Secret appears the component installs without any edit.
#[tokio::test]
async fn dex_reports_a_missing_secret_and_recovers_when_it_appears() {
    let _one = ONE_AT_A_TIME.lock().await;
    use component_framework::api::Dex;
    let client = client().await;
    install_crds(&client).await;
    let ns = TestNamespace::create(&client, "e2e-dex-secret").await;
    let operator = OperatorProcess::start("dex-operator", &["--namespace", &ns.name], &[ON_TEMPLATES]);
    operator.wait_ready().await;
    let dex: Dex = serde_json::from_value(json!({
        "apiVersion": "components.kubeflow.org/v1alpha1", "kind": "Dex", "metadata": {"name": "dex"},
        "spec": {"version": "v2.24.0", "targetNamespace": ns.name, "staticPasswordsSecretRef": {"name": "dex-users", "key": "users.yaml"}},
    }))
    .unwrap();
    let api: Api<Dex> = Api::namespaced(client.clone(), &ns.name);
    api.create(&PostParams::default(), &dex).await.unwrap();
    let degraded = wait_phase(&api, "dex", "Degraded for the missing Secret", |d: &Dex| d.component_status().and_then(|s| s.phase) == Some(ComponentPhase::Degraded)).await;
    let message = &degraded.component_status().unwrap().conditions.iter().find(|c| c.type_ == "Degraded").unwrap().message;
    assert!(message.contains("spec.staticPasswordsSecretRef.name") && message.contains("dex-users") && message.contains("not found"), "{message}");
    assert!(degraded.component_status().unwrap().inventory.is_empty(), "objects were applied for an invalid spec");

    let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "dex-users"}, "stringData": {
        "users.yaml": "- {email: admin@example.com, hash: '$2y$10$2b2cU8CPhOTaGrs1HRQuAueS7JTT5ZHsHSzYiFPm1leZck7Mc8T4W', username: admin, userID: '08a8684b'}\n",
    }});
    Api::<k8s_openapi::api::core::v1::Secret>::namespaced(client.clone(), &ns.name).create(&PostParams::default(), &serde_json::from_value(secret).unwrap()).await.unwrap();
    wait_phase(&api, "dex", "Ready once the Secret exists", ready_at::<Dex>("v2.24.0")).await;
    api.delete("dex", &DeleteParams::default()).await.unwrap();
    gone(&api, "dex").await;
}

/// Dex v2.22.0 → v2.24.0 changes the Deployment's selector (and the Service's with it), which the
/// API server refuses to change in place. The Deployment is replaced, yet the old pods keep serving
/// behind the Service until the new Deployment is Available. A ResourceQuota holds the new pods
/// back, so the in-between state lasts until the test lifts it; then the old pods and their
/// ReplicaSet go.
#[tokio::test]
async fn a_deployment_whose_selector_changed_is_replaced_while_its_pods_keep_serving() {
    let _one = ONE_AT_A_TIME.lock().await;
    use component_framework::api::Dex;
    use component_framework::handover::{RETIRED_LABEL, RETIRING_ANNOTATION};
    use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
    use k8s_openapi::api::core::v1::{Pod, ResourceQuota, Service};
    let client = client().await;
    install_crds(&client).await;
    let ns = TestNamespace::create(&client, "e2e-handover").await;
    let kubeconfig = install_package(&client, "dex").await;
    let operator = OperatorProcess::start("dex-operator", &["--namespace", &ns.name], &[("KUBECONFIG", kubeconfig.to_str().unwrap()), ON_TEMPLATES]);
    operator.wait_ready().await;
    let dex: Dex = serde_json::from_value(json!({
        "apiVersion": "components.kubeflow.org/v1alpha1", "kind": "Dex", "metadata": {"name": "dex"},
        "spec": {"version": "v2.22.0", "targetNamespace": ns.name},
    }))
    .unwrap();
    let api: Api<Dex> = Api::namespaced(client.clone(), &ns.name);
    api.create(&PostParams::default(), &dex).await.unwrap();
    wait_phase(&api, "dex", "v2.22.0 Ready", ready_at::<Dex>("v2.22.0")).await;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns.name);
    let old = deployments.get("dex").await.unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    let old_pods: Vec<String> = pods.list(&ListParams::default().labels("app=dex")).await.unwrap().items.iter().map(|p| p.name_any()).collect();
    assert!(!old_pods.is_empty());

    // No room for one more pod in the namespace while the quota stands.
    let quotas: Api<ResourceQuota> = Api::namespaced(client.clone(), &ns.name);
    let running = pods.list(&Default::default()).await.unwrap().items.len();
    let quota = json!({"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "no-new-pods"}, "spec": {"hard": {"pods": running.to_string()}}});
    quotas.create(&PostParams::default(), &serde_json::from_value(quota).unwrap()).await.unwrap();
    eventually("the quota enforced", || async {
        let q = quotas.get("no-new-pods").await.map_err(|e| e.to_string())?;
        if q.status.and_then(|s| s.used).is_some_and(|u| u.contains_key("pods")) { Ok(()) } else { Err("no usage yet".to_string()) }
    })
    .await;

    api.patch("dex", &PatchParams::default(), &Patch::Merge(json!({"spec": {"version": "v2.24.0"}}))).await.unwrap();
    let new = eventually("the Deployment replaced", || async {
        match deployments.get_opt("dex").await.map_err(|e| e.to_string())? {
            Some(d) if d.uid() != old.uid() => Ok(d),
            other => Err(format!("{:?}", other.map(|d| d.uid()))),
        }
    })
    .await;
    assert_eq!(new.spec.clone().unwrap().selector.match_labels.unwrap().get("app.kubernetes.io/name").map(String::as_str), Some("dex"));
    let services: Api<Service> = Api::namespaced(client.clone(), &ns.name);
    let replica_sets: Api<ReplicaSet> = Api::namespaced(client.clone(), &ns.name);
    // The new pods cannot start; for as long as that lasts, the old ones serve the new selector.
    eventually("the Service on the new selector", || async {
        let selector = services.get("dex").await.map_err(|e| e.to_string())?.spec.unwrap().selector.unwrap_or_default();
        if selector.contains_key("app.kubernetes.io/name") { Ok(()) } else { Err(format!("{selector:?}")) }
    })
    .await;
    // The reconcile that replaced the Deployment ends by writing the status of the new spec.
    wait_phase(&api, "dex", "status of the switched spec", |d: &Dex| d.component_status().is_some_and(|s| s.observed_generation == d.meta().generation)).await;
    let held_back = || async {
        let serving: Vec<String> = pods
            .list(&ListParams::default().labels("app.kubernetes.io/name=dex"))
            .await
            .unwrap()
            .items
            .into_iter()
            .filter(pod_serving)
            .map(|p| p.name_any())
            .collect();
        assert_eq!(serving, old_pods, "the old pods must serve the Service's new selector until the new Deployment is Available");
        let retired = replica_sets.list(&ListParams::default().labels(&format!("{RETIRED_LABEL}=dex"))).await.unwrap().items;
        assert_eq!(retired.len(), 1, "the old ReplicaSet is kept, labelled retired");
        assert!(retired[0].owner_references().is_empty(), "the retired ReplicaSet is orphaned: {:?}", retired[0].owner_references());
        let status = api.get("dex").await.unwrap().component_status().cloned().unwrap_or_default();
        assert_ne!(status.phase, Some(ComponentPhase::Ready), "Ready while the new Deployment cannot run: {status:?}");
    };
    // The state holds for a window: checked again on every change to the pods, the ReplicaSets
    // or the Dex resource while it lasts.
    held_back().await;
    {
        use futures::StreamExt;
        use kube::runtime::{WatchStreamExt, watcher};
        let mut changes = futures::stream::select_all([
            watcher(pods.clone(), watcher::Config::default()).touched_objects().map(|_| ()).boxed(),
            watcher(replica_sets.clone(), watcher::Config::default()).touched_objects().map(|_| ()).boxed(),
            watcher(api.clone(), watcher::Config::default()).touched_objects().map(|_| ()).boxed(),
        ]);
        let window = tokio::time::sleep(std::time::Duration::from_secs(2));
        tokio::pin!(window);
        loop {
            tokio::select! {
                _ = &mut window => break,
                Some(()) = changes.next() => held_back().await,
            }
        }
    }
    assert!(deployments.get("dex").await.unwrap().annotations().contains_key(RETIRING_ANNOTATION));

    quotas.delete("no-new-pods", &DeleteParams::default()).await.unwrap();
    wait_phase(&api, "dex", "v2.24.0 Ready", ready_at::<Dex>("v2.24.0")).await;
    eventually("the retired ReplicaSet and its pods removed", || async {
        let retired = replica_sets.list(&ListParams::default().labels(RETIRED_LABEL)).await.map_err(|e| e.to_string())?.items.len();
        let left: Vec<String> = pods.list(&Default::default()).await.map_err(|e| e.to_string())?.items.iter().map(|p| p.name_any()).filter(|n| old_pods.contains(n)).collect();
        if retired == 0 && left.is_empty() { Ok(()) } else { Err(format!("{retired} retired ReplicaSets, old pods {left:?}")) }
    })
    .await;
    let new = deployments.get("dex").await.unwrap();
    assert!(!new.annotations().contains_key(RETIRING_ANNOTATION), "{:?}", new.annotations());
    api.delete("dex", &DeleteParams::default()).await.unwrap();
    gone(&api, "dex").await;
}

/// Lists the events in `namespace` with `reason` whose note contains every one of `names`.
async fn event_naming(client: &Client, namespace: &str, reason: &str, names: &[&str]) -> k8s_openapi::api::events::v1::Event {
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(client.clone(), namespace);
    eventually(&format!("a {reason} event naming {names:?}"), || async {
        let list = events.list(&Default::default()).await.map_err(|e| e.to_string())?;
        list.items
            .into_iter()
            .find(|e| e.reason.as_deref() == Some(reason) && names.iter().all(|n| e.note.as_deref().unwrap_or_default().contains(n)))
            .ok_or_else(|| "not yet".to_string())
    })
    .await
}

/// Adds `extra` to the inventory in the status of Katib `name`, as anyone allowed to write the
/// status subresource (or a restore from backup) could.
async fn add_to_inventory(api: &Api<component_framework::api::Katib>, name: &str, extra: &[InventoryEntry]) {
    let mut inventory = api.get_status(name).await.unwrap().status.unwrap_or_default().inventory;
    inventory.extend(extra.iter().cloned());
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(json!({"status": {"inventory": inventory}}))).await.unwrap();
}

/// An inventory in status is no proof of ownership: a foreign ClusterRole and another install's
/// Deployment listed there survive both a prune (version switch) and the finalizer's cleanup, and
/// a Warning Event names them.
#[tokio::test]
async fn objects_listed_in_the_inventory_but_not_made_by_the_resource_are_never_deleted() {
    let _one = ONE_AT_A_TIME.lock().await;
    use component_framework::api::Katib;
    use component_framework::build::{OWNER_ANNOTATION, PART_OF_LABEL};
    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::api::rbac::v1::ClusterRole;
    let client = client().await;
    install_crds(&client).await;
    let ns = TestNamespace::create(&client, "e2e-foreign").await;
    let elsewhere = TestNamespace::create(&client, "e2e-foreign-other").await;
    let kubeconfig = install_package(&client, "katib").await;
    let env = [("KUBECONFIG", kubeconfig.to_str().unwrap()), ON_TEMPLATES];
    let mut operator = OperatorProcess::start("katib-operator", &["--namespace", &ns.name], &env);
    operator.wait_ready().await;
    let api: Api<Katib> = Api::namespaced(client.clone(), &ns.name);
    let katib: Katib = serde_json::from_value(json!({
        "apiVersion": "components.kubeflow.org/v1alpha1", "kind": "Katib", "metadata": {"name": "katib"},
        "spec": {"version": "v0.10.0", "targetNamespace": ns.name},
    }))
    .unwrap();
    api.create(&PostParams::default(), &katib).await.unwrap();
    wait_phase(&api, "katib", "v0.10.0 Ready", ready_at::<Katib>("v0.10.0")).await;

    // A ClusterRole nobody labelled, and a Deployment of another Katib install (same component
    // label, another owner), in another namespace.
    let role_name = format!("{}-foreign", ns.name);
    let roles: Api<ClusterRole> = Api::all(client.clone());
    roles.create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": role_name}, "rules": []})).unwrap()).await.unwrap();
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &elsewhere.name);
    let foreign_deployment: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "katib-ui", "labels": {PART_OF_LABEL: "katib"}, "annotations": {OWNER_ANNOTATION: format!("{}/katib", elsewhere.name)}},
        "spec": {"selector": {"matchLabels": {"app": "x"}}, "template": {"metadata": {"labels": {"app": "x"}}, "spec": {"containers": [{"name": "x", "image": "registry.invalid/x:1"}]}}},
    }))
    .unwrap();
    deployments.create(&PostParams::default(), &foreign_deployment).await.unwrap();
    let (role_uid, deployment_uid) = (roles.get(&role_name).await.unwrap().uid(), deployments.get("katib-ui").await.unwrap().uid());
    let foreign = [
        InventoryEntry { group: "rbac.authorization.k8s.io".into(), version: "v1".into(), kind: "ClusterRole".into(), namespace: None, name: role_name.clone() },
        InventoryEntry { group: "apps".into(), version: "v1".into(), kind: "Deployment".into(), namespace: Some(elsewhere.name.clone()), name: "katib-ui".into() },
    ];
    let survived = || async {
        assert_eq!(roles.get_opt(&role_name).await.unwrap().and_then(|r| r.uid()), role_uid, "the foreign ClusterRole was deleted");
        let d = deployments.get_opt("katib-ui").await.unwrap();
        assert!(d.as_ref().is_some_and(|d| d.metadata.deletion_timestamp.is_none()), "the other install's Deployment was deleted");
        assert_eq!(d.and_then(|d| d.uid()), deployment_uid);
    };

    // Prune: what leaves the inventory is pruned (the status edit itself triggers a reconcile, and
    // so does the version switch).
    add_to_inventory(&api, "katib", &foreign).await;
    api.patch("katib", &PatchParams::default(), &Patch::Merge(json!({"spec": {"version": "v0.11.0"}}))).await.unwrap();
    wait_phase(&api, "katib", "v0.11.0 Ready", ready_at::<Katib>("v0.11.0")).await;
    // (Ready at the new version: that reconcile's prune is done.)
    survived().await;
    let event = event_naming(&client, &ns.name, "ForeignObjectsKept", &[&role_name, &format!("{}/katib-ui", elsewhere.name)]).await;
    assert_eq!(event.type_.as_deref(), Some("Warning"));

    // Cleanup: with the operator stopped, list them again and delete the resource; the finalizer
    // runs on that inventory once the operator is back.
    operator.kill();
    add_to_inventory(&api, "katib", &foreign).await;
    api.delete("katib", &DeleteParams::default()).await.unwrap();
    let operator = OperatorProcess::start("katib-operator", &["--namespace", &ns.name], &env);
    operator.wait_ready().await;
    gone(&api, "katib").await;
    survived().await;
    let ours: Api<Deployment> = Api::namespaced(client.clone(), &ns.name);
    assert!(ours.get_opt("katib-controller").await.unwrap().is_none_or(|d| d.metadata.deletion_timestamp.is_some()), "the resource's own objects were not removed");
    roles.delete(&role_name, &DeleteParams::default()).await.unwrap();
}

/// Kubernetes' aggregation controller applies an aggregated role's rules from its cache, and an
/// apply creates what is missing: a role deleted while its cache still held it comes back bare,
/// written by that controller alone. Such a role is nobody's: an install that renders its name
/// takes it over (the same object, now labelled), and one that lists it in its inventory prunes
/// it. A role anyone else wrote stays (see the test above).
#[tokio::test]
async fn a_role_the_aggregation_controller_left_bare_is_taken_over_or_pruned() {
    let _one = ONE_AT_A_TIME.lock().await;
    use component_framework::api::Katib;
    use component_framework::build::PART_OF_LABEL;
    use k8s_openapi::api::rbac::v1::ClusterRole;
    let client = client().await;
    install_crds(&client).await;
    let ns = TestNamespace::create(&client, "e2e-bare-role").await;
    let roles: Api<ClusterRole> = Api::all(client.clone());
    let as_the_aggregation_controller = PatchParams::apply("clusterrole-aggregation-controller").force();
    let leave_bare = |name: String| {
        let roles = roles.clone();
        let params = as_the_aggregation_controller.clone();
        async move {
            let role = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": name}, "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]});
            roles.patch(&name, &params, &Patch::Apply(&role)).await.unwrap().uid()
        }
    };
    // Katib's template renders `katib-ui-<namespace>`.
    let rendered = format!("katib-ui-{}", ns.name);
    let rendered_uid = leave_bare(rendered.clone()).await;
    let kubeconfig = install_package(&client, "katib").await;
    let env = [("KUBECONFIG", kubeconfig.to_str().unwrap()), ON_TEMPLATES];
    let operator = OperatorProcess::start("katib-operator", &["--namespace", &ns.name], &env);
    operator.wait_ready().await;
    let api: Api<Katib> = Api::namespaced(client.clone(), &ns.name);
    let katib: Katib = serde_json::from_value(json!({
        "apiVersion": "components.kubeflow.org/v1alpha1", "kind": "Katib", "metadata": {"name": "katib"},
        "spec": {"version": "v0.10.0", "targetNamespace": ns.name},
    }))
    .unwrap();
    api.create(&PostParams::default(), &katib).await.unwrap();
    wait_phase(&api, "katib", "v0.10.0 Ready", ready_at::<Katib>("v0.10.0")).await;
    let taken = roles.get(&rendered).await.unwrap();
    assert_eq!(taken.uid(), rendered_uid, "taken over, not re-created");
    assert_eq!(taken.labels().get(PART_OF_LABEL).map(String::as_str), Some("katib"));

    // Listed in the inventory, not rendered: pruned with the version switch.
    let listed = format!("{}-bare", ns.name);
    leave_bare(listed.clone()).await;
    let entry = InventoryEntry { group: "rbac.authorization.k8s.io".into(), version: "v1".into(), kind: "ClusterRole".into(), namespace: None, name: listed.clone() };
    add_to_inventory(&api, "katib", &[entry]).await;
    api.patch("katib", &PatchParams::default(), &Patch::Merge(json!({"spec": {"version": "v0.11.0"}}))).await.unwrap();
    wait_phase(&api, "katib", "v0.11.0 Ready", ready_at::<Katib>("v0.11.0")).await;
    gone(&roles, &listed).await;

    api.delete("katib", &DeleteParams::default()).await.unwrap();
    gone(&api, "katib").await;
    gone(&roles, &rendered).await;
}

/// Two installs of Dex at different releases share its CRDs: the newest release's schema wins and
/// is never moved back, so once both are Ready neither operator writes when it reconciles.
#[tokio::test]
async fn installs_at_two_releases_converge_on_the_newest_crds_and_then_write_nothing() {
    let _one = ONE_AT_A_TIME.lock().await;
    use component_framework::api::Dex;
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let client = client().await;
    install_crds(&client).await;
    let older = TestNamespace::create(&client, "e2e-dex-older").await;
    let newer = TestNamespace::create(&client, "e2e-dex-newer").await;
    // The two newest releases: a CRD left by another test at the newest stays there.
    let releases = <dex_operator::DexComponent as component_framework::Component>::releases();
    let [.., previous, newest] = releases else { panic!("Dex ships fewer than two releases") };
    let mut installs = Vec::new();
    for (ns, version) in [(&older, previous.version), (&newer, newest.version)] {
        let operator = OperatorProcess::start("dex-operator", &["--namespace", &ns.name], &[ON_TEMPLATES]);
        operator.wait_ready().await;
        let dex: Dex = serde_json::from_value(json!({
            "apiVersion": "components.kubeflow.org/v1alpha1", "kind": "Dex", "metadata": {"name": "dex"},
            "spec": {"version": version, "targetNamespace": ns.name},
        }))
        .unwrap();
        let api: Api<Dex> = Api::namespaced(client.clone(), &ns.name);
        api.create(&PostParams::default(), &dex).await.unwrap();
        installs.push((operator, api, version));
    }
    for (_, api, version) in &installs {
        wait_phase(api, "dex", &format!("{version} Ready"), ready_at::<Dex>(version)).await;
    }
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let shipped: Vec<String> = component_framework::component::shipped_objects::<dex_operator::DexComponent>()
        .iter()
        .filter(|o| o["kind"] == "CustomResourceDefinition")
        .map(|o| o["metadata"]["name"].as_str().unwrap().to_string())
        .collect();
    assert!(!shipped.is_empty());
    for name in &shipped {
        let crd = crds.get(name).await.unwrap();
        assert_eq!(crd.labels().get("components.kubeflow.org/version").map(String::as_str), Some(newest.version), "CRD {name} is not at the newest release");
    }
    // Reconcile both again (a metadata touch each): neither writes anything.
    let before: Vec<(f64, f64)> = futures::future::join_all(installs.iter().map(|(op, _, _)| op.quiescent())).await;
    for (i, (_, api, _)) in installs.iter().enumerate() {
        api.patch("dex", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"annotations": {"e2e/touch": i.to_string()}}}))).await.unwrap();
    }
    for ((operator, _, version), (finished, writes)) in installs.iter().zip(before) {
        let after = eventually("a finished reconcile after the touch", || async {
            let (now, w) = operator.quiescent().await;
            if now > finished { Ok(w) } else { Err(now) }
        })
        .await;
        assert_eq!(after, writes, "the install at {version} wrote while nothing had changed");
    }
    for (_, api, _) in &installs {
        api.delete("dex", &DeleteParams::default()).await.unwrap();
        gone(api, "dex").await;
    }
}

/// KServe's ClusterServingRuntimes are shared by the KFServing installs in the cluster: each
/// install records itself on them, the first one to go leaves them to the other, and the last one
/// deletes them. The CRDs stay.
#[tokio::test]
async fn a_shared_object_stays_while_an_install_uses_it_and_goes_with_the_last() {
    let _one = ONE_AT_A_TIME.lock().await;
    use component_framework::api::KFServing;
    const USERS: &str = component_framework::build::USER_ANNOTATION_PREFIX;
    let client = client().await;
    install_crds(&client).await;
    serve_kind(&client, "cert-manager.io", "Issuer", "issuers", &["v1"]).await;
    serve_kind(&client, "cert-manager.io", "Certificate", "certificates", &["v1"]).await;
    let kubeconfig = install_package(&client, "kfserving").await;
    let version = "v0.15.2";
    let mut installs = Vec::new();
    for prefix in ["e2e-kserve-a", "e2e-kserve-b"] {
        let ns = TestNamespace::create(&client, prefix).await;
        let operator = OperatorProcess::start("kfserving-operator", &["--namespace", &ns.name], &[("KUBECONFIG", kubeconfig.to_str().unwrap()), ON_TEMPLATES]);
        operator.wait_ready().await;
        let resource: KFServing = serde_json::from_value(json!({
            "apiVersion": "components.kubeflow.org/v1alpha1", "kind": "KFServing", "metadata": {"name": "kserve"},
            "spec": {"version": version, "targetNamespace": ns.name},
        }))
        .unwrap();
        let api: Api<KFServing> = Api::namespaced(client.clone(), &ns.name);
        api.create(&PostParams::default(), &resource).await.unwrap();
        installs.push((ns, operator, api));
    }
    for (_, operator, api) in &installs {
        eventually(&format!("KFServing {version} Ready"), || async {
            let k = api.get("kserve").await.map_err(|e| e.to_string())?;
            if ready_at::<KFServing>(version)(&k) { Ok(()) } else { Err(format!("{:?} (log: {})", k.component_status(), operator.log.display())) }
        })
        .await;
    }
    let gvk = GroupVersionKind::gvk("serving.kserve.io", "v1alpha1", "ClusterServingRuntime");
    let runtimes: Api<DynamicObject> = Api::all_with(client.clone(), &ApiResource::from_gvk_with_plural(&gvk, "clusterservingruntimes"));
    let users = |runtime: &DynamicObject| -> Vec<String> {
        let mut users: Vec<String> = runtime.annotations().iter().filter(|(k, _)| k.starts_with(USERS)).map(|(_, v)| v.clone()).collect();
        users.sort();
        users
    };
    let user = |index: usize| format!("kfserving/{}/kserve", installs[index].0.name);
    let runtime = runtimes.get("kserve-sklearnserver").await.unwrap();
    let mut both = vec![user(0), user(1)];
    both.sort();
    assert_eq!(users(&runtime), both, "each install records itself");

    // The first install goes: the runtime stays (the same object), recording only the other.
    installs[0].2.delete("kserve", &DeleteParams::default()).await.unwrap();
    gone(&installs[0].2, "kserve").await;
    let kept = runtimes.get("kserve-sklearnserver").await.unwrap();
    assert_eq!(kept.uid(), runtime.uid(), "recreated, not kept");
    assert_eq!(users(&kept), [user(1)]);
    // The remaining install reconciles without putting the other one back.
    let (finished, _) = installs[1].1.quiescent().await;
    installs[1].2.patch("kserve", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"annotations": {"e2e/touch": "1"}}}))).await.unwrap();
    eventually("a finished reconcile after the touch", || async {
        let (now, _) = installs[1].1.quiescent().await;
        if now > finished { Ok(()) } else { Err(now) }
    })
    .await;
    assert_eq!(users(&runtimes.get("kserve-sklearnserver").await.unwrap()), [user(1)]);

    // The last one goes: so does every runtime; the CRDs stay.
    installs[1].2.delete("kserve", &DeleteParams::default()).await.unwrap();
    gone(&installs[1].2, "kserve").await;
    for name in ["kserve-sklearnserver", "kserve-xgbserver", "kserve-mlserver"] {
        gone(&runtimes, name).await;
    }
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    assert!(crds.get_opt("clusterservingruntimes.serving.kserve.io").await.unwrap().is_some(), "a CRD went with the last install");
}
