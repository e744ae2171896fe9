//! Installs the operators from the OLM catalog (bundle/catalog) with real OLM, as a platform
//! engineer would on a cluster: CatalogSource (served by `opm serve`, reached by `spec.address`),
//! OperatorGroup and Subscription → the older release's CSV Succeeded; the newer release appears
//! in the catalog → OLM upgrades the CSV along the channel. After each install the operator runs
//! on the host with the token of the ServiceAccount OLM created from the CSV, so the CSV's RBAC is
//! what it works with. Once for the meta-operator package, once for a component operator alone.

use std::path::Path;

use component_framework::api::component::{ComponentPhase, ComponentResource};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use kubeflow_crds::{Istio, KfDef};
use kubeflow_e2e::olm::{Olm, catalog_until, channel_entries, olm_api};
use kubeflow_e2e::*;
use serde_json::{Value, json};

/// One OLM at a time: two would both act on every Subscription in the cluster.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

const CATALOG_SOURCE: &str = "kubeflow-catalog";

/// A package subscribed from a catalog in its own namespace.
struct Subscribed {
    client: Client,
    namespace: TestNamespace,
    package: String,
}

impl Subscribed {
    fn csvs(&self) -> Api<DynamicObject> {
        olm_api(&self.client, &self.namespace.name, "v1alpha1", "ClusterServiceVersion", "clusterserviceversions")
    }

    /// Serves the catalog as it was when `last` was the newest bundle, then subscribes.
    async fn install(client: &Client, olm: &mut Olm, package: &str, last: &str) -> Self {
        Self::install_into(client, olm, TestNamespace::create(client, "olm-install").await, package, last).await
    }

    /// As [`Subscribed::install`], into `namespace`, which holds what the package needs first.
    async fn install_into(client: &Client, olm: &mut Olm, namespace: TestNamespace, package: &str, last: &str) -> Self {
        let address = olm.serve_catalog(&catalog_until(package, last)).await;
        let ns = namespace.name.as_str();
        let create = |api: Api<DynamicObject>, object: Value| async move {
            let object: DynamicObject = serde_json::from_value(object).unwrap();
            api.create(&PostParams::default(), &object).await.unwrap_or_else(|e| panic!("create {}: {e}", object.name_any()));
        };
        create(
            olm_api(client, ns, "v1alpha1", "CatalogSource", "catalogsources"),
            json!({"apiVersion": "operators.coreos.com/v1alpha1", "kind": "CatalogSource", "metadata": {"name": CATALOG_SOURCE, "namespace": ns},
                   "spec": {"sourceType": "grpc", "address": address, "displayName": "Kubeflow operators", "publisher": "e2e"}}),
        )
        .await;
        create(
            olm_api(client, ns, "v1", "OperatorGroup", "operatorgroups"),
            json!({"apiVersion": "operators.coreos.com/v1", "kind": "OperatorGroup", "metadata": {"name": "kubeflow", "namespace": ns}, "spec": {}}),
        )
        .await;
        create(
            olm_api(client, ns, "v1alpha1", "Subscription", "subscriptions"),
            json!({"apiVersion": "operators.coreos.com/v1alpha1", "kind": "Subscription", "metadata": {"name": package, "namespace": ns},
                   "spec": {"channel": "stable", "name": package, "source": CATALOG_SOURCE, "sourceNamespace": ns, "installPlanApproval": "Automatic"}}),
        )
        .await;
        Self { client: client.clone(), namespace, package: package.to_string() }
    }

    /// Waits for CSV `name` to reach phase Succeeded, the Subscription to report it installed, and
    /// the InstallPlan that installed it to be Complete: a plan still Installing (its status write
    /// lost to a conflict, say) runs its steps again, and would make a CSV deleted meanwhile anew.
    async fn succeeded(&self, name: &str) -> DynamicObject {
        let subscriptions = olm_api(&self.client, &self.namespace.name, "v1alpha1", "Subscription", "subscriptions");
        let csv = eventually(&format!("CSV {name} Succeeded"), || async {
            let csv = self.csvs().get(name).await.map_err(|e| e.to_string())?;
            let phase = csv.data["status"]["phase"].clone();
            if phase == "Succeeded" { Ok(csv) } else { Err(format!("phase {phase}, message {}", csv.data["status"]["message"])) }
        })
        .await;
        let plans = olm_api(&self.client, &self.namespace.name, "v1alpha1", "InstallPlan", "installplans");
        eventually(&format!("Subscription {} installed {name}, its InstallPlan Complete", self.package), || async {
            let sub = subscriptions.get(&self.package).await.map_err(|e| e.to_string())?;
            if sub.data["status"]["installedCSV"] != name {
                return Err(sub.data["status"].to_string());
            }
            let plan = sub.data["status"]["installPlanRef"]["name"].as_str().ok_or_else(|| format!("no installPlanRef: {}", sub.data["status"]))?;
            let phase = plans.get(plan).await.map_err(|e| e.to_string())?.data["status"]["phase"].clone();
            if phase == "Complete" { Ok(()) } else { Err(format!("InstallPlan {plan} {phase}")) }
        })
        .await;
        csv
    }

    /// Publishes the full catalog (every release) by pointing the CatalogSource at it.
    async fn publish_newer(&self, olm: &mut Olm) {
        let catalog = Path::new(env!("CARGO_MANIFEST_DIR")).join("../bundle/catalog");
        let address = olm.serve_catalog(&catalog).await;
        let sources = olm_api(&self.client, &self.namespace.name, "v1alpha1", "CatalogSource", "catalogsources");
        sources.patch(CATALOG_SOURCE, &PatchParams::default(), &Patch::Merge(json!({"spec": {"address": address}}))).await.unwrap();
    }

    /// Creates every `alm-examples` object of `csv` as a server-side dry run in the test
    /// namespace: the API server validates each against the installed CRD (schema and CEL rules).
    async fn examples_are_valid(&self, csv: &DynamicObject) -> Vec<Value> {
        let examples: Vec<Value> = serde_json::from_str(csv.annotations()["alm-examples"].as_str()).unwrap();
        assert!(!examples.is_empty());
        for example in &examples {
            // Its own name, so the dry run never collides with an object the test created.
            let name = format!("{}-example", example["metadata"]["name"].as_str().unwrap());
            dry_run_create(&self.client, &self.namespace.name, example, &name).await;
        }
        examples
    }

    /// The operator Deployment OLM created from `csv`, Available, running the operator image the
    /// CSV lists in `spec.relatedImages` (so a mirror of the related images is what runs): by tag
    /// `v<version>` in a published release, by digest in the release in development.
    async fn deployment_at(&self, operator: &str, csv: &DynamicObject) {
        let deployment = deployment_available(&self.client, &self.namespace.name, operator).await;
        let image = deployment.spec.unwrap().template.spec.unwrap().containers[0].image.clone().unwrap();
        let related = csv.data["spec"]["relatedImages"].as_array().into_iter().flatten().find(|i| i["name"] == "operator");
        let related = related.and_then(|i| i["image"].as_str()).unwrap_or_else(|| panic!("{}: no operator in relatedImages", csv.name_any()));
        assert_eq!(image, related, "{operator} runs {image}, but {} lists {related}", csv.name_any());
        let version = version_of(csv.name_unchecked().as_str()).to_string();
        if version == env!("CARGO_PKG_VERSION") {
            assert!(image.contains(&format!("/{operator}@sha256:")), "{operator} runs {image}, expected a digest");
        } else {
            assert!(image.ends_with(&format!("/{operator}:v{version}")), "{operator} runs {image}, expected tag v{version}");
        }
    }

    /// The PodDisruptionBudget OLM created from the bundle: the disruption controller counts the
    /// operator's two pods under it and allows evicting one of them, not both.
    async fn disruptions_bounded(&self, operator: &str) {
        let budgets: Api<PodDisruptionBudget> = Api::namespaced(self.client.clone(), &self.namespace.name);
        eventually(&format!("PodDisruptionBudget {operator} allows one disruption of two pods"), || async {
            let status = budgets.get(operator).await.map_err(|e| e.to_string())?.status.unwrap_or_default();
            if status.expected_pods == 2 && status.current_healthy == 2 && status.disruptions_allowed == 1 { Ok(()) } else { Err(format!("{status:?}")) }
        })
        .await;
    }

    /// Removes the operator as a user would (Subscription and CSV); its CRDs and resources stay.
    /// The CSV goes once the Subscription's InstallPlans are gone (the garbage collector takes
    /// them with it). OLM's catalog operator can still be running a plan's steps from a stale
    /// copy of it for a moment after, and make the deleted CSV anew: that one is deleted too, as
    /// an admin would, until the CSV stays gone.
    async fn uninstall(&self, csv: &str) {
        let subscriptions = olm_api(&self.client, &self.namespace.name, "v1alpha1", "Subscription", "subscriptions");
        subscriptions.delete(&self.package, &DeleteParams::default()).await.unwrap();
        let plans = olm_api(&self.client, &self.namespace.name, "v1alpha1", "InstallPlan", "installplans");
        eventually(&format!("the InstallPlans of {} gone", self.package), || async {
            let left: Vec<String> = plans.list(&Default::default()).await.map_err(|e| e.to_string())?.items.iter().map(|p| p.name_any()).collect();
            if left.is_empty() { Ok(()) } else { Err(format!("{left:?}")) }
        })
        .await;
        eventually(&format!("CSV {csv} deleted"), || async {
            let Some(found) = self.csvs().get_opt(csv).await.map_err(|e| e.to_string())? else { return Ok(()) };
            if found.metadata.deletion_timestamp.is_none() {
                self.csvs().delete(csv, &DeleteParams::default()).await.map_err(|e| e.to_string())?;
            }
            Err(format!("still there (uid {:?})", found.metadata.uid))
        })
        .await;
    }
}

/// Creates `example` as `name` in `namespace` as a server-side dry run: the API server validates
/// it against the installed CRD (schema and CEL rules) and stores nothing.
async fn dry_run_create(client: &Client, namespace: &str, example: &Value, name: &str) {
    let mut object: DynamicObject = serde_json::from_value(example.clone()).unwrap();
    object.metadata.namespace = Some(namespace.to_string());
    object.metadata.name = Some(name.to_string());
    let types = object.types.clone().unwrap();
    let (group, version) = types.api_version.split_once('/').unwrap();
    let gvk = kube::core::GroupVersionKind::gvk(group, version, &types.kind);
    let (resource, _) = kube::discovery::pinned_kind(client, &gvk).await.unwrap_or_else(|e| panic!("{gvk:?} served: {e}"));
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &resource);
    api.create(&PostParams { dry_run: true, ..Default::default() }, &object).await.unwrap_or_else(|e| panic!("alm-example {} {name}: {e}", types.kind));
}

/// Starts OLM and installs the oldest release of `package` through it: the OLM instance, the
/// subscription, the channel's oldest and newest bundle names, and the installed CSV's examples.
async fn install_oldest(client: &Client, package: &str, operator: &str) -> (Olm, Subscribed, String, String, Vec<Value>) {
    let mut olm = Olm::start(client).await;
    let entries = channel_entries(package);
    let (older, newer) = (entries[0].clone(), entries.last().unwrap().clone());
    let subscribed = Subscribed::install(client, &mut olm, package, &older).await;
    let csv = subscribed.succeeded(&older).await;
    subscribed.deployment_at(operator, &csv).await;
    let examples = subscribed.examples_are_valid(&csv).await;
    (olm, subscribed, older, newer, examples)
}

/// Publishes the newer releases and waits for OLM to move the subscription to `newer`, replacing
/// `older`, with the newer bundle's disruption budget in place; returns the new CSV's examples.
async fn upgrade_to(olm: &mut Olm, subscribed: &Subscribed, operator: &str, older: &str, newer: &str) -> Vec<Value> {
    subscribed.publish_newer(olm).await;
    let csv = subscribed.succeeded(newer).await;
    assert_eq!(csv.data["spec"]["replaces"], older);
    gone(&subscribed.csvs(), older).await;
    subscribed.deployment_at(operator, &csv).await;
    subscribed.disruptions_bounded(operator).await;
    subscribed.examples_are_valid(&csv).await
}

/// The account of `kubeconfig` may `verb` `resource` (core API) in `namespace`, where OLM
/// installed it, and nowhere else: OLM created the bundle's Role as it is, not lifted to a
/// ClusterRole as it lifts a CSV's `permissions` under an AllNamespaces OperatorGroup.
async fn only_in_its_namespace(kubeconfig: &Path, namespace: &str, resource: &str, verb: &str) {
    let operator = client_from(kubeconfig).await;
    eventually(&format!("{verb} {resource} in {namespace}"), || async { if may(&operator, verb, "", resource, Some(namespace)).await { Ok(()) } else { Err("not yet".to_string()) } }).await;
    for elsewhere in ["kube-system", "default"] {
        assert!(!may(&operator, verb, "", resource, Some(elsewhere)).await, "{} may {verb} {resource} in {elsewhere}", kubeconfig.display());
    }
}

/// What OLM bound ServiceAccount `account` to grants nothing but what OLM gives every CSV
/// Deployment's account (its own OperatorCondition), which a pod without a token cannot use.
async fn bound_to_nothing(client: &Client, namespace: &str, account: &str) {
    use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding};
    let granted = |rules: Vec<PolicyRule>| -> Vec<PolicyRule> {
        rules.into_iter().filter(|r| r.api_groups.as_deref() != Some(&["operators.coreos.com".to_string()]) || r.resources.as_deref() != Some(&["operatorconditions".to_string()])).collect()
    };
    let roles: Api<Role> = Api::namespaced(client.clone(), namespace);
    for binding in Api::<RoleBinding>::namespaced(client.clone(), namespace).list(&Default::default()).await.unwrap() {
        if binding.subjects.iter().flatten().any(|s| s.name == account) {
            assert_eq!(binding.role_ref.kind, "Role", "{binding:?}");
            let rules = granted(roles.get(&binding.role_ref.name).await.unwrap().rules.unwrap_or_default());
            assert!(rules.is_empty(), "{account} may {rules:?}");
        }
    }
    // The empty Role of the CSV's `permissions`, lifted by OLM to a ClusterRole to which OLM adds
    // viewing namespaces, and nothing more.
    let cluster_roles: Api<ClusterRole> = Api::all(client.clone());
    let olm_view = PolicyRule { api_groups: Some(vec![String::new()]), resources: Some(vec!["namespaces".into()]), verbs: ["get", "list", "watch"].map(String::from).into(), ..Default::default() };
    for binding in Api::<ClusterRoleBinding>::all(client.clone()).list(&Default::default()).await.unwrap() {
        if binding.subjects.iter().flatten().any(|s| s.name == account && s.namespace.as_deref() == Some(namespace)) {
            let mut rules = granted(cluster_roles.get(&binding.role_ref.name).await.unwrap().rules.unwrap_or_default());
            rules.retain(|r| *r != olm_view);
            assert!(rules.is_empty(), "{account} may, in every namespace, {rules:?}");
        }
    }
}

fn start_meta(nats: &NatsServer, kubeconfig: &Path) -> OperatorProcess {
    OperatorProcess::on_bus("meta-operator", nats, kubeflow_crds::bus::Identity::MetaOperator, &[], &[("KUBECONFIG", kubeconfig.to_str().unwrap())])
}

fn version_of(csv_name: &str) -> &str {
    csv_name.rsplit_once(".v").unwrap().1
}

#[tokio::test]
async fn meta_operator_package_installs_with_olm_and_upgrades_along_the_channel() {
    let _serial = SERIAL.lock().await;
    let client = client().await;
    let (mut olm, subscribed, older, newer, examples) = install_oldest(&client, "kubeflow-meta-operator", "meta-operator").await;

    // The meta-operator on the host with the CSV's ServiceAccount: it must be able to watch,
    // finalize and report status of a KfDef (here the CSV's own example).
    let ns = subscribed.namespace.name.clone();
    let nats = NatsServer::start().await;
    let kubeconfig = service_account_kubeconfig(&client, &ns, "meta-operator").await;
    let mut meta = start_meta(&nats, &kubeconfig);
    let kfdefs: Api<KfDef> = Api::namespaced(client.clone(), &ns);
    let mut kfdef: KfDef = serde_json::from_value(examples.iter().find(|e| e["kind"] == "KfDef").unwrap().clone()).unwrap();
    kfdef.metadata.namespace = Some(ns.clone());
    kfdefs.create(&PostParams::default(), &kfdef).await.unwrap();
    let reported = |generation: i64, log: String| {
        let kfdefs = kfdefs.clone();
        async move {
            eventually(&format!("KfDef status for generation {generation} (log: {log})"), || async {
                let k = kfdefs.get("kubeflow").await.map_err(|e| e.to_string())?;
                let status = k.status.clone().unwrap_or_default();
                let finalized = !k.finalizers().is_empty();
                if finalized && status.observed_generation == Some(generation) && status.phase.is_some() { Ok(()) } else { Err(format!("{status:?}")) }
            })
            .await
        }
    };
    reported(1, meta.log.display().to_string()).await;

    let examples = upgrade_to(&mut olm, &subscribed, "meta-operator", &older, &newer).await;

    // After the upgrade, with a fresh token of the (re-owned) ServiceAccount, move the KfDef to
    // the Kubeflow version of the newer release's example.
    meta.kill();
    let kubeconfig = service_account_kubeconfig(&client, &ns, "meta-operator").await;
    // The newer release provisions the bus in its namespace, and Secrets nowhere else.
    only_in_its_namespace(&kubeconfig, &ns, "secrets", "get").await;
    let meta = start_meta(&nats, &kubeconfig);
    let newer_kubeflow = &examples.iter().find(|e| e["kind"] == "KfDef").unwrap()["spec"]["version"];
    assert_ne!(newer_kubeflow.as_str(), kfdef.spec.version.as_deref(), "the newer release's example should name a newer Kubeflow");
    kfdefs.patch("kubeflow", &PatchParams::default(), &Patch::Merge(json!({"spec": {"version": newer_kubeflow}}))).await.unwrap();
    reported(2, meta.log.display().to_string()).await;

    subscribed.uninstall(&newer).await;
    assert!(kfdefs.get_opt("kubeflow").await.unwrap().is_some(), "uninstalling the operator must keep the KfDef");
}

#[tokio::test]
async fn component_operator_package_installs_alone_with_olm_and_upgrades_along_the_channel() {
    let _serial = SERIAL.lock().await;
    let client = client().await;
    let (mut olm, subscribed, older, newer, examples) = install_oldest(&client, "kubeflow-istio-operator", "istio-operator").await;
    let newer_examples = upgrade_to(&mut olm, &subscribed, "istio-operator", &older, &newer).await;

    // Standalone (no NATS): the operator installs the component from the CSV's examples with
    // nothing but the CSV's RBAC, acting as the namespace's installer account (bound to
    // cluster-admin by the admin, here TestNamespace) — CRDs, cluster roles, webhooks and the
    // workloads. The binary under test is this revision's, so it runs with the newest release's
    // RBAC (the oldest predates installing as an account): the older release's example first, then
    // the component moved to the newer release's.
    let ns = subscribed.namespace.name.clone();
    let kubeconfig = service_account_kubeconfig(&client, &ns, "istio-operator").await;
    // On its hand-written template: Istio 1.3.1's own CRDs serve no v1, which earlier tests stored.
    let operator = OperatorProcess::start("istio-operator", &[], &[("KUBECONFIG", kubeconfig.to_str().unwrap()), (BUILT_IN_TEMPLATES_ENV, "true")]);
    let istios: Api<Istio> = Api::namespaced(client.clone(), &ns);
    let mut istio: Istio = serde_json::from_value(examples[0].clone()).unwrap();
    istio.metadata.namespace = Some(ns.clone());
    istio.spec.core.target_namespace = Some(ns.clone());
    let older_version = istio.spec.core.version.clone();
    istios.create(&PostParams::default(), &istio).await.unwrap();
    let ready_at = |version: String, log: String| {
        let istios = istios.clone();
        async move {
            eventually(&format!("Istio Ready at {version} (log: {log})"), || async {
                let i = istios.get("istio").await.map_err(|e| e.to_string())?;
                let status = i.component_status().cloned().unwrap_or_default();
                let ready = status.phase == Some(ComponentPhase::Ready) && status.installed_version.as_deref() == Some(version.as_str());
                if ready && status.observed_generation == i.metadata.generation { Ok(()) } else { Err(format!("{status:?}")) }
            })
            .await
        }
    };
    ready_at(older_version, operator.log.display().to_string()).await;

    // The newer operator release ships a newer Istio; move the component to it.
    let examples = newer_examples;
    let newer_version = examples[0]["spec"]["version"].as_str().unwrap().to_string();
    istios.patch("istio", &PatchParams::default(), &Patch::Merge(json!({"spec": {"version": newer_version}}))).await.unwrap();
    ready_at(newer_version, operator.log.display().to_string()).await;

    istios.delete("istio", &DeleteParams::default()).await.unwrap();
    gone(&istios, "istio").await;
    drop(operator);
    subscribed.uninstall(&newer).await;
}

/// Every `alm-examples` object of every bundle (all packages, all releases), created as a
/// server-side dry run against the project's CRDs: the console's "create" form starts from these.
#[tokio::test]
async fn every_bundles_alm_examples_are_accepted_by_the_api_server() {
    let client = client().await;
    install_crds(&client).await;
    let namespace = TestNamespace::create(&client, "alm-examples").await;
    let bundles = Path::new(env!("CARGO_MANIFEST_DIR")).join("../bundle");
    let mut checked = 0;
    for package in std::fs::read_dir(bundles.join("catalog")).unwrap() {
        let package = package.unwrap().file_name().into_string().unwrap();
        for csv_name in channel_entries(&package) {
            let file = bundles.join(&package).join(version_of(&csv_name)).join("manifests").join(format!("{package}.clusterserviceversion.yaml"));
            let csv: Value = serde_yaml_ng::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
            let examples: Vec<Value> = serde_json::from_str(csv["metadata"]["annotations"]["alm-examples"].as_str().unwrap()).unwrap();
            for example in &examples {
                dry_run_create(&client, &namespace.name, example, example["metadata"]["name"].as_str().unwrap()).await;
                checked += 1;
            }
        }
    }
    // Six packages × two releases, the profiles and kustomize packages at their one release (0.2.0), plus the
    // KfUpgrade example of the meta-operator's newer release.
    assert_eq!(checked, 15);
}

/// The generic operator's package installs its renderer beside it, as deploy/ does: OLM makes the
/// renderer's Deployment, its ServiceAccount bound to no rule, its Service and the NetworkPolicy
/// that denies it every egress (a bundle object OLM supports from operator-registry 1.55). The
/// operator, with only the CSV's rights, makes its caller Secret in the install namespace and
/// can read it back, which is all the renderer needs to answer it.
#[tokio::test]
async fn the_generic_operators_package_installs_its_renderer_with_olm() {
    use k8s_openapi::api::core::v1::{Secret, ServiceAccount};
    use k8s_openapi::api::networking::v1::NetworkPolicy;
    let _serial = SERIAL.lock().await;
    let client = client().await;
    let package = "kubeflow-kustomize-operator";
    let mut olm = Olm::start(&client).await;
    let newest = channel_entries(package).last().unwrap().clone();
    let subscribed = Subscribed::install(&client, &mut olm, package, &newest).await;
    let csv = subscribed.succeeded(&newest).await;
    subscribed.deployment_at("kustomize-operator", &csv).await;
    let ns = subscribed.namespace.name.clone();
    let renderer = deployment_available(&client, &ns, "kustomize-renderer").await;
    let pod = renderer.spec.unwrap().template.spec.unwrap();
    assert_eq!(pod.automount_service_account_token, Some(false));
    assert_eq!(pod.service_account_name.as_deref(), Some("kustomize-renderer"));
    Api::<ServiceAccount>::namespaced(client.clone(), &ns).get("kustomize-renderer").await.expect("OLM made the renderer's ServiceAccount");
    let policy = Api::<NetworkPolicy>::namespaced(client.clone(), &ns).get("kustomize-renderer").await.expect("OLM made the renderer's NetworkPolicy");
    let spec = policy.spec.unwrap();
    assert_eq!(spec.policy_types, Some(vec!["Ingress".to_string(), "Egress".into()]));
    // Egress among its types and no egress rule (the API server drops the empty list): every
    // egress denied.
    assert!(spec.egress.unwrap_or_default().is_empty(), "every egress denied");
    bound_to_nothing(&client, &ns, "kustomize-renderer").await;

    // The operator with the CSV's RBAC makes its caller key (and would refuse to start without).
    let kubeconfig = service_account_kubeconfig(&client, &ns, "kustomize-operator").await;
    only_in_its_namespace(&kubeconfig, &ns, "secrets", "create").await;
    let env = [
        ("KUBECONFIG", kubeconfig.to_str().unwrap()),
        (kubeflow_manifests::remote::RENDERER_URL_ENV, "http://127.0.0.1:9"),
        (kubeflow_manifests::remote::RENDERER_CALLER_SECRET_ENV, "kustomize-renderer-caller"),
        ("POD_NAMESPACE", ns.as_str()),
    ];
    let operator = OperatorProcess::start("kustomize-operator", &["--namespace", &ns], &env);
    operator.wait_ready().await;
    let secret = Api::<Secret>::namespaced(client.clone(), &ns).get("kustomize-renderer-caller").await.expect("the operator made its caller Secret");
    let data = secret.data.unwrap();
    let public = String::from_utf8(data["nkey.pub"].0.clone()).unwrap();
    let seed = String::from_utf8(data["nkey.seed"].0.clone()).unwrap();
    assert_eq!(kubeflow_manifests::remote::CallerKey::from_secret_data("caller", Some(seed.as_bytes()), Some(public.as_bytes())).unwrap().public_key(), public);
    drop(operator);
    subscribed.uninstall(&newest).await;
}

/// A fleet spoke's package installs with OLM into the namespace its admin prepared (ConfigMap
/// `fleet-spoke`, the hub's CA): its bus provisioner and its fleet agent, each running the image
/// the CSV lists. The agent's account is bound to nothing. The provisioner, run with the CSV's
/// account and the environment its Deployment gives, cannot reach outside its namespace, and still
/// provisions the spoke's bus as the cluster's: a server named after the cluster, a leaf connection
/// to the hub's URL with the hub's CA, the cluster's leaf key, and the agent's identity, all that
/// the agent's pod needs to start.
#[tokio::test]
async fn the_fleet_spoke_package_installs_with_olm_and_provisions_the_spokes_bus() {
    use k8s_openapi::api::apps::v1::StatefulSet;
    use k8s_openapi::api::core::v1::{ConfigMap, Secret};
    use kubeflow_e2e::kubelet::{container_env, first_container, mount_volumes, secret_data};
    use meta_operator::provision;
    let _serial = SERIAL.lock().await;
    let client = client().await;
    let package = "kubeflow-fleet-spoke";
    let namespace = TestNamespace::create(&client, "olm-spoke").await;
    let ns = namespace.name.clone();
    let cluster = unique_name("olm-spoke");
    let hub_url = "tls://hub.example.org:7422";
    let admin_objects = json!({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "fleet-spoke", "namespace": ns}, "data": {"cluster": cluster, "hubUrl": hub_url}},
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": provision::HUB_CA_SECRET, "namespace": ns}, "stringData": {"ca.crt": "the hub's CA"}},
    ]});
    let file = std::env::temp_dir().join(unique_name("spoke-admin"));
    std::fs::write(&file, admin_objects.to_string()).unwrap();
    kubectl(&["apply", "--server-side", "-f", file.to_str().unwrap()]);

    let mut olm = Olm::start(&client).await;
    let newest = channel_entries(package).last().unwrap().clone();
    let subscribed = Subscribed::install_into(&client, &mut olm, namespace, package, &newest).await;
    let csv = subscribed.succeeded(&newest).await;
    subscribed.deployment_at("meta-operator", &csv).await;
    let agent = deployment_available(&client, &ns, "fleet-agent").await;
    let (agent_pod, agent_container) = first_container(&agent.spec.unwrap().template);
    let related = csv.data["spec"]["relatedImages"].as_array().unwrap().iter().find(|i| i["name"] == "fleet-agent").unwrap_or_else(|| panic!("no fleet-agent in {}", csv.data["spec"]["relatedImages"]));
    assert_eq!(agent_container.image.as_deref(), related["image"].as_str());
    assert_eq!(agent_pod.automount_service_account_token, Some(false));
    assert_eq!(agent_pod.service_account_name.as_deref(), Some("fleet-agent"));
    bound_to_nothing(&client, &ns, "fleet-agent").await;

    let kubeconfig = service_account_kubeconfig(&client, &ns, "meta-operator").await;
    only_in_its_namespace(&kubeconfig, &ns, "secrets", "get").await;
    let provisioner_client = client_from(&kubeconfig).await;
    assert!(may(&provisioner_client, "create", "apps", "statefulsets", Some(&ns)).await);
    assert!(!may(&provisioner_client, "list", "kfdef.apps.kubeflow.org", "kfdefs", None).await, "the spoke's provisioner reads KfDefs");
    assert!(!may(&provisioner_client, "create", "apps", "deployments", Some(&ns)).await, "the spoke's provisioner makes Deployments");
    let provisioner = deployment_available(&client, &ns, "meta-operator").await;
    let (_, container) = first_container(&provisioner.spec.unwrap().template);
    let mut env = container_env(&client, &ns, &container, "meta-operator-0").await;
    env.push(("KUBECONFIG".to_string(), kubeconfig.to_string_lossy().into_owned()));
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let provisioner = OperatorProcess::start("meta-operator", &[], &env);

    let statefulsets: Api<StatefulSet> = Api::namespaced(client.clone(), &ns);
    let configs: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    eventually(&format!("the spoke's bus provisioned for {cluster} (log: {})", provisioner.log.display()), || async {
        let statefulset = statefulsets.get("nats").await.map_err(|e| e.to_string())?;
        let env = format!("{:?}", statefulset.spec.unwrap().template.spec.unwrap().containers[0].env);
        if !env.contains(&format!("{cluster}-$(POD_NAME)")) {
            return Err(env);
        }
        let config = configs.get("nats-config").await.map_err(|e| e.to_string())?.data.unwrap_or_default().remove("nats.conf").unwrap_or_default();
        let joins_the_hub = config.contains(&format!("remotes: [{{url: \"{hub_url}\", nkey: $KFOP_FLEET_SEED, tls: {{ca_file: \"/etc/nats/hub/ca.crt\""));
        if joins_the_hub && config.contains(&format!("domain: \"{cluster}\"")) { Ok(()) } else { Err(config) }
    })
    .await;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    let leaf_key = secret_data(&secrets, provision::LEAF_IDENTITY_SECRET, "nkey.pub").await;
    assert!(leaf_key.starts_with('U') && leaf_key.len() == 56, "the cluster's leaf key is an NKey user: {leaf_key}");

    // The agent's pod can start: every file it mounts exists, and its environment names the cluster.
    let dir = std::env::temp_dir().join(unique_name("olm-spoke-agent"));
    let mounts = mount_volumes(&client, &ns, &agent_pod, &agent_container, &dir).await;
    assert!(!mounts.is_empty(), "the agent mounts its bus identity");
    let agent_env = container_env(&client, &ns, &agent_container, "fleet-agent-0").await;
    assert!(agent_env.contains(&("FLEET_CLUSTER".to_string(), cluster.clone())), "{agent_env:?}");
    drop(provisioner);
    subscribed.uninstall(&newest).await;
}
