//! `make chaos`: a bounded fault-injection run on the local environment. The meta-operator and
//! the operators of a KfDef's components run as two replicas each (leader election on Leases,
//! restarted like a kubelet would when they exit) on a three-node NATS cluster with R3 buckets.
//! Each trial makes a random edit (the KfDef, or one of the components' objects) and at once
//! injects a random fault: SIGKILL of any operator replica, restart of a nats-server, restart of
//! kube-apiserver, or a burst of 409 Conflict answers to the operators' writes (an admission
//! webhook). It then waits until the cluster matches the last desired state and counts lost,
//! duplicated and stuck objects. Prints the figures; exits non-zero if any trial did not converge.
//!
//! `chaos [--trials N] [--seed S] [--timeout-seconds T]`; fault kinds are dealt in shuffled rounds,
//! so any run of four or more trials injects each kind.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use kubeflow_crds::bus::Identity;
use kubeflow_crds::kfdef::KfDefPhase;
use kubeflow_crds::{ComponentKind, KfDef};
use kubeflow_e2e::*;
use rand::seq::SliceRandom;
use rand::{RngExt, SeedableRng};
use serde_json::{Value, json};
use tokio::sync::Mutex;

const OPERATOR_NAMESPACE: &str = "kubeflow-operators";
const WEBHOOK: &str = "kubeflow-chaos-conflicts";
/// Set on SIGINT/SIGTERM: the run stops after the current fault and cleans up.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);
/// How long a Pod or ReplicaSet may outlive its controller before the run collects it.
const ORPHAN_GRACE: Duration = Duration::from_secs(10);
/// A trial converging slower than this prints what it waited for last.
const SLOW: Duration = Duration::from_secs(10);
/// The KfDef's applications: three components, each with two operator replicas.
const APPLICATIONS: &[&str] = &["katib-crds", "katib-controller", "kfserving-crds", "kfserving-install", "dex"];
const COMPONENTS: &[ComponentKind] = &[ComponentKind::Katib, ComponentKind::KFServing, ComponentKind::Dex];

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Fault {
    KillOperator,
    RestartNats,
    RestartApiServer,
    Conflicts,
}

const FAULTS: [Fault; 4] = [Fault::KillOperator, Fault::RestartNats, Fault::RestartApiServer, Fault::Conflicts];

#[derive(Debug)]
enum Edit {
    /// A kfctl parameter on an application of the KfDef (reaches its component's resource).
    KfDef { application: &'static str, value: String },
    /// An object of a component deleted (the operator recreates it).
    Delete { key: String },
    /// A Deployment scaled by hand (the operator reverts it).
    Drift { deployment: String },
}

/// One operator replica and how to start it again.
struct Replica {
    binary: String,
    args: Vec<String>,
    env: Vec<(String, String)>,
    process: OperatorProcess,
    restarts: u32,
}

impl Replica {
    fn start(binary: &str, args: Vec<String>, env: Vec<(String, String)>) -> Self {
        let process = Self::spawn(binary, &args, &env);
        Self { binary: binary.into(), args, env, process, restarts: 0 }
    }

    fn spawn(binary: &str, args: &[String], env: &[(String, String)]) -> OperatorProcess {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        OperatorProcess::start(binary, &args, &env)
    }
}

/// A live object of a component: its UID, whether it is being deleted, its replicas, and for a
/// workload what its rollout still lacks.
#[derive(Clone, Debug, PartialEq)]
struct Live {
    uid: String,
    deleting: bool,
    replicas: Option<i64>,
    not_rolled_out: Option<String>,
}

/// What the rollout of a Deployment or StatefulSet still lacks (its controller observed its
/// generation and every replica is updated and ready); `None` for other kinds and finished ones.
fn rollout_lacks(kind: &str, object: &DynamicObject) -> Option<String> {
    if !["Deployment", "StatefulSet"].contains(&kind) {
        return None;
    }
    let wanted = object.data["spec"]["replicas"].as_i64().unwrap_or(1);
    let status = &object.data["status"];
    let count = |field: &str| status[field].as_i64().unwrap_or(0);
    if status["observedGeneration"].as_i64() < object.metadata.generation {
        Some("generation not observed".into())
    } else if count("updatedReplicas") != wanted || count("readyReplicas") != wanted {
        Some(format!("{}/{wanted} updated, {}/{wanted} ready", count("updatedReplicas"), count("readyReplicas")))
    } else {
        None
    }
}

impl Edit {
    /// The object the edit deletes, which must come back as a new one.
    fn recreated(&self) -> Option<&str> {
        match self {
            Edit::Delete { key } => Some(key),
            _ => None,
        }
    }
}

#[derive(Default, Debug)]
struct Outcome {
    lost: BTreeSet<String>,
    duplicated: BTreeSet<String>,
    stuck: BTreeSet<String>,
    drifted: BTreeSet<String>,
    /// Why the KfDef or a component resource is not yet as desired.
    pending: Vec<String>,
    /// What the last check before convergence still waited for (shown for slow trials).
    waited_on: Option<String>,
}

impl Outcome {
    fn converged(&self) -> bool {
        self.lost.is_empty() && self.duplicated.is_empty() && self.stuck.is_empty() && self.drifted.is_empty() && self.pending.is_empty()
    }
}

struct Chaos {
    client: Client,
    /// The KfDef's components (the registry renders every release to build an entry: once).
    components: Vec<kubeflow_component_registry::RegisteredComponent>,
    /// Kinds their objects may have (CRDs, shared, excepted).
    kinds: Vec<&'static component_framework::kinds::KindInfo>,
    ns: String,
    nats: NatsServer,
    replicas: Arc<Mutex<Vec<Replica>>>,
    conflicts: Arc<ConflictWebhook>,
    /// Parameter value each edited application must carry.
    expected: BTreeMap<&'static str, String>,
    /// Objects of the components and their UIDs, as last converged.
    baseline: BTreeMap<String, Live>,
    /// Pods and ReplicaSets whose controller no longer exists, by UID, and since when (see
    /// [`Chaos::collect_orphans`]).
    orphans: BTreeMap<String, Instant>,
    /// How many of them the run deleted in the garbage collector's place.
    collected_orphans: u32,
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    // Kubeflow 1.3.0's releases (the KfDef below) have no archive here.
    kubeflow_e2e::still_on_built_in_templates();
    let args: Vec<String> = std::env::args().collect();
    let flag = |name: &str| args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).map(|v| v.parse::<u64>().unwrap_or_else(|_| panic!("{name} takes a number")));
    let trials = flag("--trials").unwrap_or(100);
    let seed = flag("--seed").unwrap_or_else(|| std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs());
    let timeout = Duration::from_secs(flag("--timeout-seconds").unwrap_or(120));
    println!("chaos: {trials} trials, seed {seed} (rerun with --seed {seed})");
    tokio::spawn(stop_on_signal());
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut chaos = Chaos::start().await;

    let mut deck: Vec<Fault> = Vec::new();
    let mut by_kind: BTreeMap<Fault, (u32, u32)> = BTreeMap::new();
    let mut times = Vec::new();
    let (mut lost, mut duplicated, mut stuck) = (0, 0, 0);
    let mut completed: u64 = 0;
    for trial in 1..=trials {
        if INTERRUPTED.load(Ordering::Relaxed) {
            break;
        }
        if deck.is_empty() {
            deck = FAULTS.to_vec();
            deck.shuffle(&mut rng);
        }
        let fault = deck.pop().unwrap();
        let edit = chaos.random_edit(&mut rng, trial);
        chaos.make(&edit).await;
        let started = Instant::now();
        let detail = chaos.inject(fault, &mut rng).await;
        let outcome = chaos.converge(edit.recreated(), timeout).await;
        let took = started.elapsed();
        if INTERRUPTED.load(Ordering::Relaxed) {
            println!("trial {trial:>3}: interrupted; not counted");
            break;
        }
        completed += 1;
        let entry = by_kind.entry(fault).or_default();
        entry.0 += 1;
        lost += outcome.lost.len();
        duplicated += outcome.duplicated.len();
        stuck += outcome.stuck.len();
        if outcome.converged() {
            entry.1 += 1;
            times.push(took);
            println!("trial {trial:>3}: {fault:?} ({detail}) during {edit:?}: converged in {:.1} s", took.as_secs_f64());
            if took > SLOW {
                println!("           slow; the last check before convergence found {}", outcome.waited_on.as_deref().unwrap_or("nothing"));
            }
        } else {
            println!("trial {trial:>3}: {fault:?} ({detail}) during {edit:?}: NOT converged after {:.0} s: {outcome:?}", took.as_secs_f64());
        }
    }
    chaos.stop().await;

    times.sort();
    let percentile = |p: f64| times.get(((times.len() as f64 * p).ceil() as usize).saturating_sub(1)).map_or(f64::NAN, |d| d.as_secs_f64());
    let converged: u32 = by_kind.values().map(|(_, c)| c).sum();
    println!("\ntrials: {completed} of {trials} (seed {seed})");
    for (fault, (n, c)) in &by_kind {
        println!("  {fault:?}: {n} injected, {c} converged");
    }
    println!("409 answers injected: {}", chaos.conflicts.denied.load(Ordering::Relaxed));
    let restarts: u32 = chaos.replicas.lock().await.iter().map(|r| r.restarts).sum();
    println!("operator restarts (after SIGKILL or a lost Lease): {restarts}");
    println!("orphans the garbage collector missed, deleted in its place: {}", chaos.collected_orphans);
    println!("converged: {converged}/{completed}, lost objects: {lost}, duplicated objects: {duplicated}, stuck finalizers: {stuck}");
    println!("time to converge after the fault: p50 {:.2} s, p99 {:.2} s, max {:.2} s", percentile(0.50), percentile(0.99), times.last().map_or(f64::NAN, |d| d.as_secs_f64()));
    if INTERRUPTED.load(Ordering::Relaxed) {
        return std::process::ExitCode::from(130);
    }
    if u64::from(converged) == trials && completed == trials && lost == 0 && duplicated == 0 && stuck == 0 { std::process::ExitCode::SUCCESS } else { std::process::ExitCode::FAILURE }
}

impl Chaos {
    async fn start() -> Self {
        let client = client().await;
        install_crds(&client).await;
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/all");
        kubectl(&["apply", "--server-side", "--force-conflicts", "-k", dir.to_str().unwrap()]);
        let ns = unique_name("chaos");
        kubectl(&["create", "namespace", &ns]);
        // The platform admin's installer, which the operators install the KfDef as.
        create_installer(&client, &ns).await;
        grant_installer(&client, &ns, "ClusterRoleBinding", "cluster-admin").await;
        let conflicts = ConflictWebhook::start(&client).await;
        let nats = NatsServer::start_cluster(3).await;

        // Each operator with its deploy/all ServiceAccount (the webhook tells them by it).
        let mut replicas = Vec::new();
        let operators = std::iter::once(("meta-operator".to_string(), Identity::MetaOperator)).chain(COMPONENTS.iter().map(|c| (format!("{c}-operator"), Identity::Component(*c))));
        for (operator, identity) in operators {
            let kubeconfig = operator_kubeconfig(&client, &operator).await;
            let mut args = vec!["--nats-url".to_string(), nats.url(), "--namespace".into(), ns.clone()];
            if identity == Identity::MetaOperator {
                args.extend(["--nats-replicas".into(), "3".into()]);
            }
            for replica in ["a", "b"] {
                let mut env = nats.env(identity);
                env.extend([
                    ("KUBECONFIG".into(), kubeconfig.to_string_lossy().into_owned()),
                    ("LEADER_ELECTION_NAMESPACE".into(), OPERATOR_NAMESPACE.into()),
                    ("POD_NAME".into(), format!("{operator}-chaos-{replica}")),
                    ("LEASE_DURATION_SECONDS".into(), "3".into()),
                ]);
                replicas.push(Replica::start(&operator, args.clone(), env));
            }
        }
        let replicas = Arc::new(Mutex::new(replicas));
        tokio::spawn(supervise(replicas.clone()));

        // Naming no repository: the components install their built-in releases (no fetch here).
        let kfdefs: Api<KfDef> = Api::namespaced(client.clone(), &ns);
        let apps: Vec<Value> = APPLICATIONS.iter().map(|a| json!({"name": a, "kustomizeConfig": {"repoRef": {"name": "manifests", "path": a}}})).collect();
        let kfdef: KfDef = serde_json::from_value(json!({
            "apiVersion": "kfdef.apps.kubeflow.org/v1", "kind": "KfDef", "metadata": {"name": "kubeflow", "namespace": ns},
            "spec": {"version": "v1.3.0", "applications": apps},
        }))
        .unwrap();
        kfdefs.create(&PostParams::default(), &kfdef).await.unwrap();
        let components: Vec<_> = kubeflow_component_registry::all().into_iter().filter(|c| COMPONENTS.contains(&c.kind)).collect();
        let kinds: BTreeSet<&str> = components.iter().flat_map(|c| &c.watched_kinds).filter(|k| !k.is_crd()).map(|k| k.kind).collect();
        let kinds = component_framework::kinds::KINDS.iter().filter(|k| kinds.contains(k.kind)).collect();
        let mut chaos = Self { client, components, kinds, ns, nats, replicas, conflicts, expected: BTreeMap::new(), baseline: BTreeMap::new(), orphans: BTreeMap::new(), collected_orphans: 0 };
        let outcome = chaos.converge(None, Duration::from_secs(180)).await;
        assert!(outcome.converged(), "the KfDef did not converge before any fault: {outcome:?}");
        println!("setup: {} objects of {} components converged", chaos.baseline.len(), COMPONENTS.len());
        chaos
    }

    async fn stop(&mut self) {
        let kfdefs: Api<KfDef> = Api::namespaced(self.client.clone(), &self.ns);
        let _ = kfdefs.delete("kubeflow", &DeleteParams::default()).await;
        within("the KfDef deleted", async { gone(&kfdefs, "kubeflow").await }).await;
        self.conflicts.remove(&self.client).await;
        kubectl(&["delete", "namespace", &self.ns, "--wait=false"]);
    }

    fn random_edit(&self, rng: &mut rand::rngs::StdRng, trial: u64) -> Edit {
        let in_namespace: Vec<&String> = self.baseline.keys().filter(|k| k.contains(&format!(" {}/", self.ns))).collect();
        let deployments: Vec<&String> = in_namespace.iter().copied().filter(|k| k.starts_with("Deployment ")).collect();
        match rng.random_range(0..3) {
            1 if !in_namespace.is_empty() => Edit::Delete { key: in_namespace[rng.random_range(0..in_namespace.len())].clone() },
            2 if !deployments.is_empty() => Edit::Drift { deployment: deployments[rng.random_range(0..deployments.len())].clone() },
            _ => Edit::KfDef { application: APPLICATIONS[rng.random_range(0..APPLICATIONS.len())], value: format!("trial-{trial}") },
        }
    }

    async fn make(&mut self, edit: &Edit) {
        match edit {
            Edit::KfDef { application, value } => {
                let kfdefs: Api<KfDef> = Api::namespaced(self.client.clone(), &self.ns);
                let mut kfdef = kfdefs.get("kubeflow").await.unwrap();
                let app = kfdef.spec.applications.iter_mut().find(|a| a.name == *application).unwrap();
                app.kustomize_config.as_mut().unwrap().parameters = vec![serde_json::from_value(json!({"name": "chaos-edit", "value": value})).unwrap()];
                let apps = serde_json::to_value(&kfdef.spec.applications).unwrap();
                kfdefs.patch("kubeflow", &PatchParams::default(), &Patch::Merge(json!({"spec": {"applications": apps}}))).await.unwrap();
                self.expected.insert(application, value.clone());
            }
            Edit::Delete { key } => {
                let (api, name) = self.api_of(key);
                api.delete(&name, &DeleteParams::background()).await.unwrap();
            }
            Edit::Drift { deployment } => {
                let name = deployment.rsplit('/').next().unwrap();
                let api: Api<Deployment> = Api::namespaced(self.client.clone(), &self.ns);
                api.patch(name, &PatchParams::default(), &Patch::Merge(json!({"spec": {"replicas": 7}}))).await.unwrap();
            }
        }
    }

    /// The API of the object `key` names (`<Kind> <namespace>/<name>`) and its name.
    fn api_of(&self, key: &str) -> (Api<DynamicObject>, String) {
        let (kind, rest) = key.split_once(' ').unwrap();
        let (namespace, name) = rest.split_once('/').unwrap();
        let info = component_framework::kinds::KINDS.iter().find(|k| k.kind == kind).unwrap();
        let api = if namespace.is_empty() { Api::all_with(self.client.clone(), &info.api_resource()) } else { Api::namespaced_with(self.client.clone(), namespace, &info.api_resource()) };
        (api, name.to_string())
    }

    async fn inject(&mut self, fault: Fault, rng: &mut rand::rngs::StdRng) -> String {
        match fault {
            Fault::KillOperator => {
                let mut replicas = self.replicas.lock().await;
                let i = rng.random_range(0..replicas.len());
                replicas[i].process.kill();
                format!("SIGKILL {}", replicas[i].env.iter().find(|(k, _)| k == "POD_NAME").map_or("?", |(_, v)| v.as_str()))
            }
            Fault::RestartNats => {
                let i = rng.random_range(0..self.nats.nodes.len());
                self.nats.stop_node(i);
                self.nats.resume_node(i).await;
                format!("nats-{i}")
            }
            Fault::RestartApiServer => {
                restart_api_server(&self.client).await;
                "kube-apiserver".into()
            }
            Fault::Conflicts => {
                let before = self.conflicts.denied.load(Ordering::Relaxed);
                self.conflicts.deny_for(Duration::from_secs(2)).await;
                format!("{} writes answered 409", self.conflicts.denied.load(Ordering::Relaxed) - before)
            }
        }
    }

    /// Waits until the cluster matches the desired state (or `timeout`), then takes it as the
    /// new baseline. `recreated` is the object that must have a new UID.
    async fn converge(&mut self, recreated: Option<&str>, timeout: Duration) -> Outcome {
        let deadline = Instant::now() + timeout;
        let mut waited_on = None;
        loop {
            let (mut outcome, live) = self.check(recreated).await;
            if outcome.converged() {
                self.baseline = live;
                outcome.waited_on = waited_on;
                return outcome;
            }
            waited_on = Some(format!("{outcome:?}"));
            self.collect_orphans().await;
            if Instant::now() >= deadline || INTERRUPTED.load(Ordering::Relaxed) {
                return outcome;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    async fn check(&self, recreated: Option<&str>) -> (Outcome, BTreeMap<String, Live>) {
        let mut outcome = Outcome::default();
        let kfdefs: Api<KfDef> = Api::namespaced(self.client.clone(), &self.ns);
        match kfdefs.get("kubeflow").await {
            Ok(kfdef) => {
                let status = kfdef.status.as_ref();
                if !status.is_some_and(|s| s.phase == Some(KfDefPhase::Available) && s.observed_generation == kfdef.metadata.generation) {
                    let components: Vec<String> = status.iter().flat_map(|s| &s.components).filter(|(_, c)| !c.ready).map(|(name, c)| format!("{name}: {}", c.message)).collect();
                    outcome.pending.push(format!("KfDef {:?} at generation {:?} of {:?}; not ready: {components:?}", status.and_then(|s| s.phase), status.and_then(|s| s.observed_generation), kfdef.metadata.generation));
                }
                if kfdef.metadata.deletion_timestamp.is_some() {
                    outcome.stuck.insert("KfDef kubeflow".into());
                }
            }
            Err(e) => outcome.pending.push(format!("KfDef: {e}")),
        }
        for component in &self.components {
            let api: Api<DynamicObject> = Api::namespaced_with(self.client.clone(), &self.ns, &component.api_resource());
            let Ok(Some(resource)) = api.get_opt("kubeflow").await else {
                outcome.pending.push(format!("{} resource missing", component.kind.kind()));
                continue;
            };
            if resource.metadata.deletion_timestamp.is_some() {
                outcome.stuck.insert(format!("{} kubeflow", component.kind.kind()));
            }
            let sources = resource.data["spec"]["sources"].as_array();
            for (application, value) in self.expected.iter().filter(|(a, _)| component.kind.applications().contains(a)) {
                let carried = sources.into_iter().flatten().find(|s| s["application"] == *application).is_some_and(|s| s["parameters"].as_array().is_some_and(|p| p.iter().any(|p| p["name"] == "chaos-edit" && p["value"] == value.as_str())));
                if !carried {
                    outcome.pending.push(format!("{application} without chaos-edit={value}"));
                }
            }
        }
        let live = match self.inventory().await {
            Ok(live) => live,
            Err(e) => {
                outcome.pending.push(e);
                return (outcome, BTreeMap::new());
            }
        };
        for (key, was) in &self.baseline {
            match live.get(key) {
                None => {
                    outcome.lost.insert(key.clone());
                }
                Some(now) => {
                    if now.deleting {
                        outcome.stuck.insert(key.clone());
                    }
                    let replaced = now.uid != was.uid;
                    if Some(key.as_str()) == recreated && !replaced {
                        outcome.pending.push(format!("{key} not yet recreated"));
                    } else if Some(key.as_str()) != recreated && replaced {
                        outcome.duplicated.insert(format!("{key} (created again)"));
                    }
                    if now.replicas != was.replicas {
                        outcome.drifted.insert(format!("{key} replicas {:?}", now.replicas));
                    }
                    if let Some(lacks) = &now.not_rolled_out {
                        outcome.pending.push(format!("{key} not rolled out: {lacks}"));
                    }
                }
            }
        }
        if !self.baseline.is_empty() {
            outcome.duplicated.extend(live.keys().filter(|k| !self.baseline.contains_key(*k)).cloned());
        }
        (outcome, live)
    }

    /// Every object the components own for resources in the namespace (CRDs, shared, excepted).
    /// Stands in for kube-controller-manager's garbage collector where it provably missed a
    /// deletion: a Pod or ReplicaSet of the namespace whose controller (by UID) has been gone for
    /// [`ORPHAN_GRACE`] is deleted, and counted. The collector misses one when the owner is deleted
    /// and created again under the same name while its own watch is down (after an API server
    /// restart): its relist matches objects by name, so the old owner never leaves its graph. A
    /// StatefulSet recreated that way never gets its pods back, as the old pod holds the name.
    async fn collect_orphans(&mut self) {
        const CONTROLLERS: [&str; 3] = ["StatefulSet", "Deployment", "ReplicaSet"];
        const DEPENDENTS: [&str; 2] = ["ReplicaSet", "Pod"];
        // Metadata only, each kind listed once.
        let mut listed = Vec::new();
        for (kind, plural, group) in [("StatefulSet", "statefulsets", "apps"), ("Deployment", "deployments", "apps"), ("ReplicaSet", "replicasets", "apps"), ("Pod", "pods", "")] {
            let resource = kube::api::ApiResource::from_gvk_with_plural(&kube::api::GroupVersionKind::gvk(group, "v1", kind), plural);
            let api = Api::<DynamicObject>::namespaced_with(self.client.clone(), &self.ns, &resource);
            let Ok(list) = api.list_metadata(&ListParams::default()).await else { return };
            listed.push((kind, api, list.items));
        }
        let alive: BTreeSet<String> = listed.iter().filter(|(kind, ..)| CONTROLLERS.contains(kind)).flat_map(|(_, _, items)| items.iter().filter_map(|o| o.uid())).collect();
        let mut seen = BTreeSet::new();
        for (kind, api, items) in listed.iter().filter(|(kind, ..)| DEPENDENTS.contains(kind)) {
            for object in items {
                let Some(owner) = object.owner_references().iter().find(|o| o.controller == Some(true)) else { continue };
                let Some(uid) = object.uid() else { continue };
                if alive.contains(&owner.uid) || object.metadata.deletion_timestamp.is_some() || !CONTROLLERS.contains(&owner.kind.as_str()) {
                    continue;
                }
                seen.insert(uid.clone());
                let since = *self.orphans.entry(uid.clone()).or_insert_with(Instant::now);
                if since.elapsed() >= ORPHAN_GRACE {
                    let params = DeleteParams { preconditions: Some(kube::api::Preconditions { uid: Some(uid), resource_version: None }), ..Default::default() };
                    if api.delete(&object.name_any(), &params).await.is_ok() {
                        self.collected_orphans += 1;
                        println!("           garbage collector stand-in: deleted {kind} {}, whose controller {} {} ({}) is gone", object.name_any(), owner.kind, owner.name, owner.uid);
                    }
                }
            }
        }
        self.orphans.retain(|uid, _| seen.contains(uid));
    }

    async fn inventory(&self) -> Result<BTreeMap<String, Live>, String> {
        let owner = format!("{}/", self.ns);
        let selector = ListParams::default().labels(component_framework::build::PART_OF_LABEL);
        let mut live = BTreeMap::new();
        for info in &self.kinds {
            let api: Api<DynamicObject> = Api::all_with(self.client.clone(), &info.api_resource());
            let list = api.list(&selector).await.map_err(|e| format!("list {}: {e}", info.kind))?;
            for object in list.items.into_iter().filter(|o| o.annotations().get(component_framework::build::OWNER_ANNOTATION).is_some_and(|a| a.starts_with(&owner))) {
                let key = format!("{} {}/{}", info.kind, object.namespace().unwrap_or_default(), object.name_any());
                let replicas = object.data["spec"]["replicas"].as_i64();
                let not_rolled_out = rollout_lacks(info.kind, &object);
                live.insert(key, Live { uid: object.uid().unwrap_or_default(), deleting: object.metadata.deletion_timestamp.is_some(), replicas, not_rolled_out });
            }
        }
        Ok(live)
    }
}

/// The first SIGINT or SIGTERM lets the run finish its current fault and clean up (the KfDef, the
/// webhook, the namespace; operator processes are killed on exit); a second one quits at once.
async fn stop_on_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut terminate = signal(SignalKind::terminate()).expect("SIGTERM handler");
    let mut interrupt = signal(SignalKind::interrupt()).expect("SIGINT handler");
    tokio::select! {
        _ = terminate.recv() => {}
        _ = interrupt.recv() => {}
    }
    println!("chaos: stopping after the current fault and cleaning up (signal again to quit now)");
    INTERRUPTED.store(true, Ordering::Relaxed);
    tokio::select! {
        _ = terminate.recv() => {}
        _ = interrupt.recv() => {}
    }
    std::process::exit(130);
}

/// Restarts every replica that exited, as a kubelet restarts a pod's container.
async fn supervise(replicas: Arc<Mutex<Vec<Replica>>>) {
    loop {
        for replica in replicas.lock().await.iter_mut() {
            if replica.process.exited() {
                replica.process = Replica::spawn(&replica.binary, &replica.args, &replica.env);
                replica.restarts += 1;
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Kills the environment's kube-apiserver (SIGKILL, as a crashed control-plane pod) and starts it
/// again with the same command line.
async fn restart_api_server(client: &Client) {
    use std::os::unix::process::CommandExt;
    let state = std::path::PathBuf::from(std::env::var("KFOP_STATE_DIR").expect("KFOP_STATE_DIR from the env file"));
    let pid_file = state.join("pids/kube-apiserver");
    let pid: i32 = std::fs::read_to_string(&pid_file).unwrap().trim().parse().unwrap();
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap();
    let argv: Vec<String> = cmdline.split(|b| *b == 0).filter(|a| !a.is_empty()).map(|a| String::from_utf8_lossy(a).into_owned()).collect();
    std::process::Command::new("kill").args(["-KILL", &pid.to_string()]).status().unwrap();
    // Stopped once its port is closed: a zombie leader may outlive its other threads, which hold it.
    let port = argv.iter().position(|a| a == "--secure-port").map(|i| argv[i + 1].clone()).expect("--secure-port in the command line");
    let address = format!("127.0.0.1:{port}");
    eventually("kube-apiserver's port closed", || async { if tokio::net::TcpStream::connect(&address).await.is_err() { Ok(()) } else { Err("still accepting") } }).await;
    let log = std::fs::OpenOptions::new().append(true).create(true).open(state.join("logs/kube-apiserver.log")).unwrap();
    // Its own process group, like up.sh's setsid: it outlives this run.
    let child = std::process::Command::new(&argv[0]).args(&argv[1..]).stdout(log.try_clone().unwrap()).stderr(log).stdin(std::process::Stdio::null()).process_group(0).spawn().unwrap();
    std::fs::write(&pid_file, child.id().to_string()).unwrap();
    eventually("kube-apiserver ready again", || async { client.request_text(http::Request::get("/readyz").body(Vec::new()).unwrap()).await.map_err(|e| e.to_string()) }).await;
}

/// A validating admission webhook that, while a burst is on, answers every write of the
/// operators' ServiceAccounts (Leases excepted) with 409 Conflict, as a busy API server would.
struct ConflictWebhook {
    /// Until when (ms since the run began) writes are refused.
    until: AtomicU64,
    began: Instant,
    denied: AtomicU64,
}

impl ConflictWebhook {
    async fn start(client: &Client) -> Arc<Self> {
        let tls = operator_runtime::bus_security::tls_material(&["127.0.0.1".into()]).unwrap();
        let webhook = Arc::new(Self { until: AtomicU64::new(0), began: Instant::now(), denied: AtomicU64::new(0) });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(serve(listener, tls.server_cert.clone(), tls.server_key.clone(), webhook.clone()));
        let ca = {
            use base64::Engine;
            base64::engine::general_purpose::STANDARD.encode(&tls.ca_cert)
        };
        let config: ValidatingWebhookConfiguration = serde_json::from_value(json!({
            "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration", "metadata": {"name": WEBHOOK},
            "webhooks": [{
                "name": "conflicts.chaos.kubeflow.org",
                "clientConfig": {"url": format!("https://127.0.0.1:{port}/validate"), "caBundle": ca},
                "rules": [{"apiGroups": ["*"], "apiVersions": ["*"], "operations": ["CREATE", "UPDATE", "DELETE"], "resources": ["*/*"], "scope": "*"}],
                "matchConditions": [
                    {"name": "operators", "expression": format!("request.userInfo.username.startsWith('system:serviceaccount:{OPERATOR_NAMESPACE}:')")},
                    {"name": "not-leases", "expression": "request.resource.resource != 'leases'"},
                ],
                "failurePolicy": "Ignore", "sideEffects": "None", "admissionReviewVersions": ["v1"], "timeoutSeconds": 2,
            }],
        }))
        .unwrap();
        let api: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
        api.patch(WEBHOOK, &PatchParams::apply(FIELD_MANAGER).force(), &Patch::Apply(&config)).await.unwrap();
        webhook
    }

    fn now_ms(&self) -> u64 {
        self.began.elapsed().as_millis() as u64
    }

    /// Refuses writes for `window`, returning once it is over.
    async fn deny_for(&self, window: Duration) {
        self.until.store(self.now_ms() + window.as_millis() as u64, Ordering::Relaxed);
        tokio::time::sleep(window).await;
    }

    /// The answer to one AdmissionReview.
    fn review(&self, request: &Value) -> Value {
        let uid = request["request"]["uid"].clone();
        let refuse = self.now_ms() < self.until.load(Ordering::Relaxed);
        let response = if refuse {
            self.denied.fetch_add(1, Ordering::Relaxed);
            json!({"uid": uid, "allowed": false, "status": {"code": 409, "reason": "Conflict", "message": "chaos: injected conflict, retry"}})
        } else {
            json!({"uid": uid, "allowed": true})
        };
        json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response})
    }

    async fn remove(&self, client: &Client) {
        let _ = Api::<ValidatingWebhookConfiguration>::all(client.clone()).delete(WEBHOOK, &DeleteParams::default()).await;
    }
}

/// Serves the webhook over TLS (HTTP/1.1).
async fn serve(listener: tokio::net::TcpListener, cert: String, key: String, webhook: Arc<ConflictWebhook>) {
    use http_body_util::{BodyExt, Full};
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let certs = vec![CertificateDer::from_pem_slice(cert.as_bytes()).unwrap()];
    let key = PrivateKeyDer::from_pem_slice(key.as_bytes()).unwrap();
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    loop {
        let Ok((stream, _)) = listener.accept().await else { continue };
        let (acceptor, webhook) = (acceptor.clone(), webhook.clone());
        tokio::spawn(async move {
            let Ok(stream) = acceptor.accept(stream).await else { return };
            let service = hyper::service::service_fn(move |request: hyper::Request<hyper::body::Incoming>| {
                let webhook = webhook.clone();
                async move {
                    let body = request.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
                    let review: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                    let answer = serde_json::to_vec(&webhook.review(&review)).unwrap();
                    Ok::<_, std::convert::Infallible>(hyper::Response::builder().header("content-type", "application/json").body(Full::new(hyper::body::Bytes::from(answer))).unwrap())
                }
            });
            let _ = hyper::server::conn::http1::Builder::new().serve_connection(hyper_util::rt::TokioIo::new(stream), service).await;
        });
    }
}
