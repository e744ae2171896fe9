//! A shared cluster: a KfDef installs with its namespace's rights, never the operators'.
//!
//! A tenant's KfDef (namespace whose installer account may only `edit` that namespace) names a
//! repository of its own whose packages render a ClusterRoleBinding to `cluster-admin`, an object
//! in `kube-system`, and an object that already exists there, made by someone else. Through the
//! whole chain (meta-operator → NATS → kustomize-operator, which runs with its deploy/ RBAC and
//! acts as the KfDef namespace's `kubeflow-installer` account), the allowed application installs;
//! the others install nothing and say why (the object and the verb); the existing object is left
//! as it is and survives the KfDef's deletion.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use kube::api::{DeleteParams, PostParams};
use kube::{Api, ResourceExt};
use kubeflow_crds::{ComponentKind, KfDef};
use kubeflow_crds::kfdef::{ApplicationStatus, KfDefPhase};
use kubeflow_e2e::*;
use kubeflow_manifests::fixtures;
use serde_json::json;

const ARCHIVE: &str = "archive/tenant.tar.gz";

/// A repository of four packages, each built as it is (a stacks KfDef).
fn tenant_repo(namespace: &str) -> Vec<u8> {
    let tmp = std::env::temp_dir().join(unique_name("tenant-repo"));
    let kustomization = "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n- objects.yaml\n";
    let packages = [
        ("app", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: tenant-config\ndata:\n  a: b\n".to_string()),
        (
            "escalate",
            format!(
                "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata:\n  name: {namespace}-takeover\nroleRef:\n  apiGroup: rbac.authorization.k8s.io\n  kind: ClusterRole\n  name: cluster-admin\nsubjects:\n- kind: ServiceAccount\n  name: kubeflow-installer\n  namespace: {namespace}\n"
            ),
        ),
        ("system", format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {namespace}-planted\n  namespace: kube-system\ndata:\n  a: b\n")),
        ("existing", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: preexisting\ndata:\n  owner: kfdef\n".to_string()),
    ];
    for (package, objects) in packages {
        let dir = tmp.join("tenant").join(package);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("kustomization.yaml"), kustomization).unwrap();
        std::fs::write(dir.join("objects.yaml"), objects).unwrap();
    }
    let tarball = fixtures::pack_github_tarball(&tmp, "manifests-tenant");
    std::fs::remove_dir_all(&tmp).unwrap();
    tarball
}

fn tenant_kfdef(uri: &str, namespace: &str) -> KfDef {
    let app = |name: &str, path: &str| json!({"name": name, "kustomizeConfig": {"repoRef": {"name": "manifests", "path": path}}});
    serde_json::from_value(json!({
        "apiVersion": "kfdef.apps.kubeflow.org/v1", "kind": "KfDef", "metadata": {"name": "tenant", "namespace": namespace},
        "spec": {
            "version": "v1.0.2",
            // `kubeflow-apps` makes it a stacks KfDef: each path is built as it is.
            "applications": [app("kubeflow-apps", "tenant/app"), app("escalate", "tenant/escalate"), app("system", "tenant/system"), app("existing", "tenant/existing")],
            "repos": [{"name": "manifests", "uri": uri}],
        },
    }))
    .unwrap()
}

fn application<'a>(k: &'a KfDef, name: &str) -> &'a ApplicationStatus {
    k.status.as_ref().unwrap().applications.iter().find(|a| a.name == name).unwrap_or_else(|| panic!("application {name} missing from status"))
}

#[tokio::test]
async fn a_tenant_kfdef_installs_only_what_its_namespace_account_may_and_takes_nothing_over() {
    let client = client().await;
    let ns = TestNamespace::create_tenant(&client, "e2e-tenant").await;
    ns.grant_installer(&client, "RoleBinding", "edit").await;
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns.name);
    let existing: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "preexisting"}, "data": {"owner": "someone"}})).unwrap();
    let existing = config_maps.create(&PostParams::default(), &existing).await.unwrap();

    let server = fixtures::Server::start(BTreeMap::from([(ARCHIVE.to_string(), tenant_repo(&ns.name))])).await;
    let stack = OperatorStack::start(&client, &[]).await;
    let kfdefs: Api<KfDef> = Api::namespaced(client.clone(), &ns.name);
    kfdefs.create(&PostParams::default(), &tenant_kfdef(&server.url(ARCHIVE), &ns.name)).await.unwrap();

    let log = stack.components[&kubeflow_crds::ComponentKind::GENERIC].log.display().to_string();
    let done = eventually(&format!("every application of the tenant KfDef judged (log: {log})"), || async {
        let k = kfdefs.get("tenant").await.map_err(|e| e.to_string())?;
        let status = k.status.clone().unwrap_or_default();
        let judged = status.applications.len() == 4
            && status.applications.iter().all(|a| a.component.as_deref() == Some("kustomize"))
            && status.applications.iter().filter(|a| a.name != "kubeflow-apps").all(|a| a.state != "Ready" && !a.message.is_empty())
            && application(&k, "kubeflow-apps").state == "Ready";
        if judged { Ok(k) } else { Err(format!("{:?}", status.applications)) }
    })
    .await;
    assert_eq!(done.status.as_ref().unwrap().phase, Some(KfDefPhase::Degraded), "{:?}", done.status);
    let installer = format!("ServiceAccount {}/kubeflow-installer", ns.name);
    let escalate = &application(&done, "escalate").message;
    assert!(
        escalate.contains(&format!("{installer} may not create ClusterRoleBinding {}-takeover (clusterrolebindings.rbac.authorization.k8s.io)", ns.name)),
        "{escalate}"
    );
    let system = &application(&done, "system").message;
    assert!(system.contains(&format!("{installer} may not create ConfigMap kube-system/{}-planted (configmaps)", ns.name)), "{system}");
    let taken = &application(&done, "existing").message;
    assert!(taken.contains(&format!("ConfigMap {}/preexisting exists, not made by KustomizeApplication {}/tenant; left as it is", ns.name, ns.name)), "{taken}");

    // Nothing of the refused applications was created; the existing object is as it was.
    assert!(Api::<ClusterRoleBinding>::all(client.clone()).get_opt(&format!("{}-takeover", ns.name)).await.unwrap().is_none(), "the tenant bound itself cluster-admin");
    assert!(Api::<ConfigMap>::namespaced(client.clone(), "kube-system").get_opt(&format!("{}-planted", ns.name)).await.unwrap().is_none(), "the tenant wrote into kube-system");
    let untouched = config_maps.get("preexisting").await.unwrap();
    assert_eq!(untouched.resource_version(), existing.resource_version(), "the existing object was written to");
    assert!(untouched.labels().is_empty(), "{:?}", untouched.labels());
    let installed = config_maps.get("tenant-config").await.unwrap();
    assert_eq!(installed.labels().get("components.kubeflow.org/part-of").map(String::as_str), Some("kustomize"));

    // Deleting the KfDef removes what it installed and leaves what it did not make.
    kfdefs.delete("tenant", &DeleteParams::default()).await.unwrap();
    gone(&kfdefs, "tenant").await;
    gone(&config_maps, "tenant-config").await;
    let after = config_maps.get("preexisting").await.unwrap();
    assert_eq!((after.uid(), after.resource_version()), (existing.uid(), existing.resource_version()), "the existing object was deleted or changed");
}

/// Each operator's own rights (deploy/all's RBAC), asked of the API server's authorizer with
/// SubjectAccessReviews as its ServiceAccount: none may bind or escalate to `cluster-admin`,
/// create ClusterRoleBindings, read Secrets in `kube-system` or list them cluster-wide, read
/// another operator's NATS identity, patch pods in `kube-system`, or act as a `kube-system`
/// account.
#[tokio::test]
async fn no_operator_may_bind_cluster_admin_read_others_secrets_or_touch_kube_system() {
    use k8s_openapi::api::authorization::v1::{ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec};
    let client = client().await;
    install_crds(&client).await;
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/all");
    kubectl(&["apply", "--server-side", "--force-conflicts", "-k", dir.to_str().unwrap()]);
    let operators: Vec<String> = std::iter::once("meta-operator".to_string()).chain(kubeflow_component_registry::all().into_iter().map(|c| c.operator)).collect();
    let reviews: Api<SubjectAccessReview> = Api::all(client.clone());
    let mut allowed = Vec::new();
    for operator in &operators {
        let mut dangerous: Vec<(&str, &str, &str, Option<&str>, Option<String>)> = vec![
            ("bind", "rbac.authorization.k8s.io", "clusterroles", None, Some("cluster-admin".into())),
            ("escalate", "rbac.authorization.k8s.io", "clusterroles", None, Some("cluster-admin".into())),
            ("create", "rbac.authorization.k8s.io", "clusterrolebindings", None, None),
            ("get", "", "secrets", Some("kube-system"), None),
            ("list", "", "secrets", None, None),
            ("patch", "", "pods", Some("kube-system"), None),
            ("impersonate", "", "serviceaccounts", Some("kube-system"), Some("clusterrole-aggregation-controller".into())),
        ];
        // The meta-operator provisions every identity; no other operator reads another's.
        if operator != "meta-operator" {
            for other in operators.iter().filter(|o| *o != operator) {
                dangerous.push(("get", "", "secrets", Some("kubeflow-operators"), Some(format!("nats-identity-{other}"))));
            }
        }
        for (verb, group, resource, namespace, name) in dangerous {
            let review: SubjectAccessReview = SubjectAccessReview {
                spec: SubjectAccessReviewSpec {
                    user: Some(format!("system:serviceaccount:kubeflow-operators:{operator}")),
                    groups: Some(["system:serviceaccounts", "system:serviceaccounts:kubeflow-operators", "system:authenticated"].map(String::from).into()),
                    resource_attributes: Some(ResourceAttributes {
                        verb: Some(verb.into()),
                        group: Some(group.into()),
                        resource: Some(resource.into()),
                        namespace: namespace.map(String::from),
                        name: name.clone(),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
                ..Default::default()
            };
            let answer = reviews.create(&PostParams::default(), &review).await.unwrap();
            if answer.status.is_some_and(|s| s.allowed) {
                allowed.push(format!("{operator} may {verb} {resource}.{group} {}/{}", namespace.unwrap_or("*"), name.unwrap_or_else(|| "*".into())));
            }
        }
    }
    assert!(allowed.is_empty(), "dangerous rights:\n{}", allowed.join("\n"));
}

/// A built-in component whose installer loses rights: the next version's writes it may not make
/// are refused, and what the install already has stays (nothing is pruned while the install is
/// not applied in full), instead of being removed as objects that left the set.
#[tokio::test]
async fn an_install_whose_writes_are_refused_keeps_what_it_has() {
    use k8s_openapi::api::apps::v1::Deployment;
    use kube::api::{Patch, PatchParams};
    use kubeflow_crds::Katib;
    use kubeflow_crds::component::{ComponentPhase, ComponentResource};
    let client = client().await;
    install_crds(&client).await;
    let ns = TestNamespace::create(&client, "e2e-refused").await;
    // On its hand-written template: an install into the tenant's own namespace, which upstream's
    // package (all of it in `kubeflow`) is not.
    let operator = OperatorProcess::start("katib-operator", &["--namespace", &ns.name], &[(BUILT_IN_TEMPLATES_ENV, "true")]);
    operator.wait_ready().await;
    let katibs: Api<Katib> = Api::namespaced(client.clone(), &ns.name);
    let katib: Katib = serde_json::from_value(json!({
        "apiVersion": "components.kubeflow.org/v1alpha1", "kind": "Katib", "metadata": {"name": "katib"},
        "spec": {"version": "v0.10.0", "targetNamespace": ns.name},
    }))
    .unwrap();
    katibs.create(&PostParams::default(), &katib).await.unwrap();
    let phase = |k: &Katib| k.component_status().and_then(|s| s.phase);
    eventually(&format!("Katib Ready at v0.10.0 (log: {})", operator.log.display()), || async {
        let k = katibs.get("katib").await.map_err(|e| e.to_string())?;
        if phase(&k) == Some(ComponentPhase::Ready) { Ok(()) } else { Err(format!("{:?}", k.status)) }
    })
    .await;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns.name);
    let before: Vec<(String, Option<String>)> = deployments.list(&Default::default()).await.unwrap().items.iter().map(|d| (d.name_any(), d.uid())).collect();
    assert!(!before.is_empty());

    // The admin narrows the installer to editing its namespace; the next version needs more.
    let binding = format!("kubeflow-installer-{}-cluster-admin", ns.name);
    Api::<ClusterRoleBinding>::all(client.clone()).delete(&binding, &DeleteParams::default()).await.unwrap();
    ns.grant_installer(&client, "RoleBinding", "edit").await;
    katibs.patch("katib", &PatchParams::default(), &Patch::Merge(json!({"spec": {"version": "v0.11.0"}}))).await.unwrap();
    let refused = eventually(&format!("Katib refused at v0.11.0 (log: {})", operator.log.display()), || async {
        let k = katibs.get("katib").await.map_err(|e| e.to_string())?;
        let status = k.status.clone().unwrap_or_default();
        let refused = status.observed_generation == k.metadata.generation && phase(&k) == Some(ComponentPhase::Degraded);
        if refused { Ok(status) } else { Err(format!("{status:?}")) }
    })
    .await;
    let message = &refused.conditions.iter().find(|c| c.type_ == "Degraded").unwrap().message;
    assert!(message.contains(&format!("ServiceAccount {}/kubeflow-installer may not patch", ns.name)), "{message}");
    let after: Vec<(String, Option<String>)> = deployments.list(&Default::default()).await.unwrap().items.iter().map(|d| (d.name_any(), d.uid())).collect();
    assert_eq!(after, before, "the refused install lost objects");
    drop(operator);
}

/// A loopback HTTP listener that answers 404 and counts the connections it accepted.
fn counting_listener() -> (u16, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let accepted = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = accepted.clone();
    std::thread::spawn(move || {
        for mut stream in listener.incoming().flatten() {
            counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let _ = stream.read(&mut [0u8; 1024]);
            let _ = stream.write_all(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
        }
    });
    (port, accepted)
}

/// A tenant's packages aim at the kustomize-operator's credential (the kubeconfig it runs with in
/// this environment) through a path kustomize cleans as text (`x/../..`, `x` missing), through a
/// builtin generator config (kustomize v5), and at a loopback listener through a generator's
/// `files:` URL. None of them renders; no ConfigMap carries the credential; the listener sees no
/// connection; the tenant's other application installs.
#[tokio::test]
async fn a_tenant_package_reaches_neither_the_operators_credential_nor_the_network() {
    let client = client().await;
    let ns = TestNamespace::create_tenant(&client, "e2e-loot").await;
    ns.grant_installer(&client, "RoleBinding", "edit").await;
    let stack = OperatorStack::start(&client, &[]).await;
    let credential = stack.kubeconfig("kustomize-operator").to_path_buf();
    let token = std::fs::read_to_string(&credential).unwrap().lines().find_map(|l| l.trim().strip_prefix("token: ").map(str::to_string)).unwrap();
    let (port, accepted) = counting_listener();

    let through_missing = format!("x/{}{}", "../".repeat(credential.components().count() + 2), credential.display().to_string().trim_start_matches('/'));
    // `labels` is a field only kustomize v5 has, so these two packages render with v5.
    let v5 = "labels:\n- pairs: {tenant: loot}\n";
    let generator = |name: &str, file: &str| format!("generatorOptions: {{disableNameSuffixHash: true}}\nconfigMapGenerator:\n- name: {name}\n  files: [{file}]\n");
    let packages: [(&str, Vec<(&str, String)>); 4] = [
        ("app", vec![("kustomization.yaml", "resources: [cm.yaml]\n".into()), ("cm.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: tenant-config\ndata:\n  a: b\n".into())]),
        ("loot", vec![("kustomization.yaml", generator("loot", &format!("kc={through_missing}")))]),
        (
            "loot-v5",
            vec![
                ("kustomization.yaml", format!("{v5}generators: [gen.yaml]\n")),
                ("gen.yaml", format!("apiVersion: builtin\nkind: ConfigMapGenerator\nmetadata:\n  name: loot-v5\noptions:\n  disableNameSuffixHash: true\nfiles:\n- kc={}\n", credential.display())),
            ],
        ),
        ("fetch", vec![("kustomization.yaml", format!("{v5}{}", generator("fetched", &format!("k=http://127.0.0.1:{port}/latest/meta-data"))))]),
    ];
    let tmp = std::env::temp_dir().join(unique_name("loot-repo"));
    for (package, files) in &packages {
        let dir = tmp.join("tenant").join(package);
        std::fs::create_dir_all(&dir).unwrap();
        for (name, text) in files {
            std::fs::write(dir.join(name), text).unwrap();
        }
    }
    let tarball = fixtures::pack_github_tarball(&tmp, "manifests-tenant");
    std::fs::remove_dir_all(&tmp).unwrap();
    let server = fixtures::Server::start(BTreeMap::from([(ARCHIVE.to_string(), tarball)])).await;

    let app = |name: &str, path: &str| json!({"name": name, "kustomizeConfig": {"repoRef": {"name": "manifests", "path": path}}});
    let kfdef: KfDef = serde_json::from_value(json!({
        "apiVersion": "kfdef.apps.kubeflow.org/v1", "kind": "KfDef", "metadata": {"name": "loot", "namespace": ns.name},
        "spec": {
            "version": "v1.0.2",
            "applications": [app("kubeflow-apps", "tenant/app"), app("loot", "tenant/loot"), app("loot-v5", "tenant/loot-v5"), app("fetch", "tenant/fetch")],
            "repos": [{"name": "manifests", "uri": server.url(ARCHIVE)}],
        },
    }))
    .unwrap();
    let kfdefs: Api<KfDef> = Api::namespaced(client.clone(), &ns.name);
    kfdefs.create(&PostParams::default(), &kfdef).await.unwrap();

    let log = stack.components[&kubeflow_crds::ComponentKind::GENERIC].log.display().to_string();
    let done = eventually(&format!("every application of the tenant KfDef judged (log: {log})"), || async {
        let k = kfdefs.get("loot").await.map_err(|e| e.to_string())?;
        let status = k.status.clone().unwrap_or_default();
        let judged = status.applications.len() == 4
            && status.applications.iter().filter(|a| a.name != "kubeflow-apps").all(|a| a.state != "Ready" && !a.message.is_empty())
            && application(&k, "kubeflow-apps").state == "Ready";
        if judged { Ok(k) } else { Err(format!("{:?}", status.applications)) }
    })
    .await;
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns.name);
    for (config_map, app) in [("loot", "loot"), ("loot-v5", "loot-v5"), ("fetched", "fetch")] {
        assert!(config_maps.get_opt(config_map).await.unwrap().is_none(), "ConfigMap {config_map} was made: {:?}", application(&done, app));
    }
    assert!(config_maps.get_opt("tenant-config").await.unwrap().is_some());
    for a in &done.status.as_ref().unwrap().applications {
        assert!(!a.message.contains(&token), "application {} carries the operator's token", a.name);
    }
    assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 0, "a render connected to the loopback listener");
    kfdefs.delete("loot", &DeleteParams::default()).await.unwrap();
    gone(&kfdefs, "loot").await;
}

/// A namespace a Profile made is a tenant's: a platform install (here Katib, in its own
/// namespace) aimed at it is refused, the status naming the namespace and its owner, and nothing
/// is written into it. A tenant could otherwise register a Profile named like a namespace a
/// release installs into and receive the platform's objects.
#[tokio::test]
async fn a_platform_install_into_a_profiles_namespace_is_refused() {
    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::api::core::v1::Namespace;
    use kubeflow_crds::Katib;
    use kubeflow_crds::component::{ComponentPhase, ComponentResource};
    let client = client().await;
    install_crds(&client).await;
    let platform = TestNamespace::create(&client, "e2e-platform").await;
    // As the profiles operator labels every Profile's namespace.
    let squatted = TestNamespace::create(&client, "e2e-squatted").await;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces
        .patch(&squatted.name, &kube::api::PatchParams::default(), &kube::api::Patch::Merge(json!({"metadata": {"labels": {"app.kubernetes.io/part-of": "kubeflow-profile"}}})))
        .await
        .unwrap();
    // On its hand-written template, whose objects go where spec.targetNamespace says.
    let operator = OperatorProcess::start("katib-operator", &["--namespace", &platform.name], &[(BUILT_IN_TEMPLATES_ENV, "true")]);
    operator.wait_ready().await;
    let katibs: Api<Katib> = Api::namespaced(client.clone(), &platform.name);
    let katib: Katib = serde_json::from_value(json!({
        "apiVersion": "components.kubeflow.org/v1alpha1", "kind": "Katib", "metadata": {"name": "katib"},
        "spec": {"version": "v0.10.0", "targetNamespace": squatted.name},
    }))
    .unwrap();
    katibs.create(&PostParams::default(), &katib).await.unwrap();
    let refused = eventually(&format!("Katib refused (log: {})", operator.log.display()), || async {
        let k = katibs.get("katib").await.map_err(|e| e.to_string())?;
        let degraded = k.component_status().and_then(|s| s.phase) == Some(ComponentPhase::Degraded);
        if degraded { Ok(k.status.clone().unwrap_or_default()) } else { Err(format!("{:?}", k.status)) }
    })
    .await;
    let message = &refused.conditions.iter().find(|c| c.type_ == "Degraded").unwrap().message;
    assert!(message.contains(&format!("namespace {} belongs to a Profile", squatted.name)), "{message}");
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &squatted.name);
    assert!(deployments.list(&Default::default()).await.unwrap().items.is_empty(), "Katib installed into the tenant's namespace");
    drop(operator);
}

/// A tenant's package defines a kind with a CRD whose plural is wrong (a CRD the tenant may not
/// even create). A platform install rendering the real CRD of that kind, later, installs its
/// objects of that kind all the same: what one install's CRDs define is that install's alone.
#[tokio::test]
async fn a_tenant_crd_with_a_wrong_plural_does_not_change_a_platform_install_of_that_kind() {
    use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
    let client = client().await;
    let tenant = TestNamespace::create_tenant(&client, "e2e-poison").await;
    tenant.grant_installer(&client, "RoleBinding", "edit").await;
    let platform = TestNamespace::create_tenant(&client, "e2e-platform").await;
    platform.grant_installer(&client, "ClusterRoleBinding", "cluster-admin").await;
    let group = format!("{}.example.com", unique_name("gadgets"));
    let crd = |plural: &str| {
        format!(
            "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: {plural}.{group}\nspec:\n  group: {group}\n  scope: Namespaced\n  names: {{kind: Gadget, plural: {plural}, singular: gadget, listKind: GadgetList}}\n  versions:\n  - name: v1\n    served: true\n    storage: true\n    schema: {{openAPIV3Schema: {{type: object, x-kubernetes-preserve-unknown-fields: true}}}}\n"
        )
    };
    let gadget = format!("apiVersion: {group}/v1\nkind: Gadget\nmetadata:\n  name: g\nspec: {{size: 1}}\n");
    let tmp = std::env::temp_dir().join(unique_name("poison-repo"));
    for (package, plural) in [("tenant/poison", "wrongs"), ("platform/gadgets", "gadgets")] {
        let dir = tmp.join(package);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("kustomization.yaml"), "resources: [crd.yaml, gadget.yaml]\n").unwrap();
        std::fs::write(dir.join("crd.yaml"), crd(plural)).unwrap();
        std::fs::write(dir.join("gadget.yaml"), &gadget).unwrap();
    }
    let tarball = fixtures::pack_github_tarball(&tmp, "manifests-poison");
    std::fs::remove_dir_all(&tmp).unwrap();
    let server = fixtures::Server::start(BTreeMap::from([(ARCHIVE.to_string(), tarball)])).await;
    let kfdef = |namespace: &str, application: &str, path: &str| -> KfDef {
        serde_json::from_value(json!({
            "apiVersion": "kfdef.apps.kubeflow.org/v1", "kind": "KfDef", "metadata": {"name": "gadgets", "namespace": namespace},
            "spec": {
                "version": "v1.0.2",
                "applications": [{"name": application, "kustomizeConfig": {"repoRef": {"name": "manifests", "path": path}}}],
                "repos": [{"name": "manifests", "uri": server.url(ARCHIVE)}],
            },
        }))
        .unwrap()
    };
    let stack = OperatorStack::start(&client, &[]).await;
    let log = stack.components[&kubeflow_crds::ComponentKind::GENERIC].log.display().to_string();

    // The tenant first: its CRD is refused (its account may not create CRDs), after its render.
    let tenants: Api<KfDef> = Api::namespaced(client.clone(), &tenant.name);
    tenants.create(&PostParams::default(), &kfdef(&tenant.name, "poison", "tenant/poison")).await.unwrap();
    let refused = eventually(&format!("the tenant's application refused (log: {log})"), || async {
        let k = tenants.get("gadgets").await.map_err(|e| e.to_string())?;
        match k.status.as_ref().and_then(|s| s.applications.iter().find(|a| a.name == "poison")) {
            Some(a) if a.state != "Ready" && a.message.contains("may not create CustomResourceDefinition") => Ok(a.message.clone()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    assert!(refused.contains(&format!("wrongs.{group}")), "{refused}");

    // Then the platform: its Gadget is written where the real CRD serves it.
    let platforms: Api<KfDef> = Api::namespaced(client.clone(), &platform.name);
    platforms.create(&PostParams::default(), &kfdef(&platform.name, "gadgets", "platform/gadgets")).await.unwrap();
    let crds: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> = Api::all(client.clone());
    let gadgets = Api::<DynamicObject>::namespaced_with(client.clone(), &platform.name, &ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(&group, "v1", "Gadget"), "gadgets"));
    eventually(&format!("the platform's application Ready and its Gadget installed (log: {log})"), || async {
        let k = platforms.get("gadgets").await.map_err(|e| e.to_string())?;
        let application = k.status.as_ref().and_then(|s| s.applications.iter().find(|a| a.name == "gadgets")).cloned();
        match (application, gadgets.get_opt("g").await) {
            (Some(a), Ok(Some(_))) if a.state == "Ready" => Ok(()),
            (a, g) => Err(format!("{a:?}, Gadget: {:?}", g.map(|g| g.is_some()))),
        }
    })
    .await;
    assert!(crds.get_opt(&format!("wrongs.{group}")).await.unwrap().is_none(), "the tenant created a CRD");

    for kfdefs in [&platforms, &tenants] {
        kfdefs.delete("gadgets", &DeleteParams::default()).await.unwrap();
        gone(kfdefs, "gadgets").await;
    }
    let _ = crds.delete(&format!("gadgets.{group}"), &DeleteParams::default()).await;
}

/// Waits for KfDef `tenant` to become Available.
async fn available(kfdefs: &Api<KfDef>, what: &str) {
    eventually(what, || async {
        let k = kfdefs.get("tenant").await.map_err(|e| e.to_string())?;
        match k.status.as_ref().and_then(|s| s.phase.clone()) {
            Some(KfDefPhase::Available) => Ok(()),
            other => Err(format!("{other:?}: {:?}", k.status.map(|s| s.applications))),
        }
    })
    .await;
}

/// The generic operator renders only in the renderer (as deploy/all runs it: its own process, no
/// credential): with the renderer down, a KfDef's applications wait, their status naming the
/// renderer, and nothing renders in the operator instead; once the renderer is back they install.
/// The renderer answers only the key the operator made in its caller Secret, which a restarted
/// operator reads back.
#[tokio::test]
async fn renders_happen_in_the_renderer_and_wait_for_it() {
    let client = client().await;
    let ns = TestNamespace::create_tenant(&client, "e2e-renderer").await;
    ns.grant_installer(&client, "RoleBinding", "edit").await;
    let mut stack = OperatorStack::start(&client, &[]).await;
    stack.renderer.kill();
    let server = fixtures::Server::start(BTreeMap::from([(ARCHIVE.to_string(), tenant_repo(&ns.name))])).await;
    let mut kfdef = tenant_kfdef(&server.url(ARCHIVE), &ns.name);
    kfdef.spec.applications.truncate(1);
    let kfdefs: Api<KfDef> = Api::namespaced(client.clone(), &ns.name);
    kfdefs.create(&PostParams::default(), &kfdef).await.unwrap();
    let renderer_url = format!("the renderer at http://127.0.0.1:{}", stack.renderer.metrics_port);
    eventually("the application waiting for the renderer", || async {
        let k = kfdefs.get("tenant").await.map_err(|e| e.to_string())?;
        let status = k.status.clone().unwrap_or_default();
        match status.applications.first() {
            Some(a) if a.state != "Ready" && a.message.contains(&renderer_url) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns.name);
    assert!(config_maps.get_opt("tenant-config").await.unwrap().is_none(), "rendered without the renderer");

    stack.restart_renderer().await;
    available(&kfdefs, "the application installed once the renderer is back").await;
    assert!(config_maps.get_opt("tenant-config").await.unwrap().is_some());
    kfdefs.delete("tenant", &DeleteParams::default()).await.unwrap();
    gone(&kfdefs, "tenant").await;

    // A restarted operator signs with the key it made before (its Secret is read, not replaced),
    // so the running renderer still answers it.
    let caller = OperatorStack::renderer_caller(&client).await;
    stack.components.get_mut(&ComponentKind::GENERIC).unwrap().kill();
    stack.start_component(ComponentKind::GENERIC);
    kfdefs.create(&PostParams::default(), &kfdef).await.unwrap();
    available(&kfdefs, "the application installed by the restarted operator").await;
    assert_eq!(OperatorStack::renderer_caller(&client).await, caller, "the caller key was replaced");
    kfdefs.delete("tenant", &DeleteParams::default()).await.unwrap();
    gone(&kfdefs, "tenant").await;
}
