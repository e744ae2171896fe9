//! Benchmark of the component operators against the local environment (not a test: it prints
//! figures, asserts nothing). Run with `make bench-components`; results go to docs/benchmarks.md.
//!
//! * Heal latency: delete an owned Deployment (rotating over every component's Deployments) and
//!   time until a new one with another uid exists, N times; p50/p99. Reference, measured in the
//!   same run: the same delete followed at once by the benchmark's own create of the object —
//!   the floor any operator could reach on this API server.
//! * Writes issued by no-op reconciles: touch each resource's metadata K times and read the
//!   operators' `kfop_writes_total` before and after.
//! * Resident memory (VmRSS) of each operator process with its component installed.

use std::time::{Duration, Instant};

use component_framework::Component;
use component_framework::api::component::{ComponentPhase, ComponentResource};
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, Resource, ResourceExt};
use kubeflow_e2e::*;
use serde_json::json;

struct Installed {
    name: &'static str,
    operator: OperatorProcess,
    deployments: Vec<String>,
    touch: Box<dyn Fn(u32) -> futures::future::BoxFuture<'static, ()>>,
    remove: futures::future::BoxFuture<'static, ()>,
    ready: Box<dyn Fn() -> futures::future::BoxFuture<'static, bool>>,
}

async fn install<C: Component>(client: &Client, ns: &str, binary: &str, spec: serde_json::Value) -> Installed {
    let operator = OperatorProcess::start(binary, &["--namespace", ns], &[]);
    operator.wait_ready().await;
    let mut full = json!({"version": C::releases()[0].version, "targetNamespace": ns});
    full.as_object_mut().unwrap().extend(spec.as_object().unwrap().clone());
    let name = C::Resource::COMPONENT.name();
    let resource: C::Resource = serde_json::from_value(json!({
        "apiVersion": C::Resource::api_version(&()), "kind": C::Resource::kind(&()), "metadata": {"name": name}, "spec": full,
    }))
    .unwrap();
    let api: Api<C::Resource> = Api::namespaced(client.clone(), ns);
    api.create(&PostParams::default(), &resource).await.unwrap();
    eventually(&format!("{name} Ready"), || async {
        let r = api.get(name).await.map_err(|e| e.to_string())?;
        if r.component_status().and_then(|s| s.phase) == Some(ComponentPhase::Ready) { Ok(()) } else { Err(format!("{:?}", r.component_status())) }
    })
    .await;
    let list = ListParams::default().labels(&format!("components.kubeflow.org/part-of={name}"));
    let deployments = Api::<Deployment>::namespaced(client.clone(), ns).list(&list).await.unwrap().items.iter().map(|d| d.name_any()).collect();
    let touch_api = api.clone();
    let touch = Box::new(move |i: u32| {
        let api = touch_api.clone();
        Box::pin(async move {
            api.patch(name, &PatchParams::default(), &Patch::Merge(json!({"metadata": {"annotations": {"bench/touch": i.to_string()}}}))).await.unwrap();
        }) as futures::future::BoxFuture<'static, ()>
    });
    let ready_api = api.clone();
    let ready = Box::new(move || {
        let api = ready_api.clone();
        Box::pin(async move {
            let r = api.get(name).await.unwrap();
            r.component_status().is_some_and(|s| s.phase == Some(ComponentPhase::Ready) && s.observed_generation == r.meta().generation)
        }) as futures::future::BoxFuture<'static, bool>
    });
    let remove = Box::pin(async move {
        api.delete(name, &DeleteParams::default()).await.unwrap();
        gone(&api, name).await;
    });
    Installed { name, operator, deployments, touch, remove, ready }
}

/// A watch of Deployment `name`, returned once established (its current state delivered), so no
/// later change is missed.
async fn watch_one(api: &Api<Deployment>, name: &str) -> futures::stream::BoxStream<'static, Deployment> {
    use futures::StreamExt;
    use kube::runtime::{WatchStreamExt, watcher};
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut changes = watcher(api.clone(), config).applied_objects().filter_map(|r| async move { r.ok() }).boxed();
    changes.next().await.expect("the Deployment exists");
    changes
}

/// Waits on `changes` for a Deployment with another uid than `old_uid` that is not being deleted.
async fn recreated(changes: &mut futures::stream::BoxStream<'static, Deployment>, old_uid: &str) {
    use futures::StreamExt;
    while let Some(d) = changes.next().await {
        if d.uid().as_deref() != Some(old_uid) && d.metadata.deletion_timestamp.is_none() {
            return;
        }
    }
}

#[tokio::main]
async fn main() {
    // Measured on the operators' hand-written templates until the figures move to upstream's packages.
    kubeflow_e2e::still_on_built_in_templates();
    let heals: usize = std::env::var("BENCH_HEALS").ok().and_then(|v| v.parse().ok()).unwrap_or(100);
    let touches: u32 = std::env::var("BENCH_TOUCHES").ok().and_then(|v| v.parse().ok()).unwrap_or(10);
    let client = client().await;
    install_crds(&client).await;
    let ns = TestNamespace::create(&client, "bench").await;
    let dex_users = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "dex-users"}, "stringData": {"users.yaml": "- {email: admin@example.com, hash: '$2y$10$2b2cU8CPhOTaGrs1HRQuAueS7JTT5ZHsHSzYiFPm1leZck7Mc8T4W', username: admin, userID: '08a8684b'}\n"}});
    Api::<k8s_openapi::api::core::v1::Secret>::namespaced(client.clone(), &ns.name).create(&PostParams::default(), &serde_json::from_value(dex_users).unwrap()).await.unwrap();

    let started = Instant::now();
    let installed = vec![
        install::<istio_operator::IstioComponent>(&client, &ns.name, "istio-operator", json!({})).await,
        install::<dex_operator::DexComponent>(&client, &ns.name, "dex-operator", json!({"staticPasswordsSecretRef": {"name": "dex-users", "key": "users.yaml"}})).await,
        install::<kfserving_operator::KFServingComponent>(&client, &ns.name, "kfserving-operator", json!({})).await,
        install::<katib_operator::KatibComponent>(&client, &ns.name, "katib-operator", json!({})).await,
        install::<pipelines_operator::PipelinesComponent>(&client, &ns.name, "pipelines-operator", json!({})).await,
    ];
    let install_time = started.elapsed();
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns.name);
    let targets: Vec<String> = installed.iter().flat_map(|i| i.deployments.clone()).collect();

    // Heal latency.
    let mut heal = Vec::with_capacity(heals);
    for i in 0..heals {
        let name = &targets[i % targets.len()];
        let uid = deployments.get(name).await.unwrap().uid().unwrap();
        let mut changes = watch_one(&deployments, name).await;
        let t0 = Instant::now();
        deployments.delete(name, &DeleteParams::background()).await.unwrap();
        tokio::time::timeout(Duration::from_secs(30), recreated(&mut changes, &uid)).await.expect("heal within 30 s");
        heal.push(t0.elapsed());
    }
    // Reference: delete + our own immediate create of the same Deployment (operator not involved:
    // the object is unlabelled so no operator watches it).
    let template = deployments.get(&targets[0]).await.unwrap();
    let mut reference = Vec::new();
    for i in 0..heals.min(50) {
        let mut d = Deployment { metadata: kube::api::ObjectMeta { name: Some(format!("bench-ref-{i}")), ..Default::default() }, spec: template.spec.clone(), status: None };
        d.spec.as_mut().unwrap().template.metadata.as_mut().map(|m| m.labels.as_mut().map(|l| l.remove("components.kubeflow.org/part-of")));
        let name = format!("bench-ref-{i}");
        let uid = deployments.create(&PostParams::default(), &d).await.unwrap().uid().unwrap();
        let t0 = Instant::now();
        deployments.delete(&name, &DeleteParams::background()).await.unwrap();
        let gone = kube::runtime::wait::await_condition(deployments.clone(), &name, kube::runtime::wait::conditions::is_deleted(&uid));
        tokio::time::timeout(Duration::from_secs(30), gone).await.expect("deleted within 30 s").unwrap();
        deployments.create(&PostParams::default(), &d).await.unwrap();
        reference.push(t0.elapsed());
        deployments.delete(&format!("bench-ref-{i}"), &DeleteParams::background()).await.unwrap();
    }
    heal.sort();
    reference.sort();

    // Writes issued by no-op reconciles.
    let mut noop = Vec::new();
    for inst in &installed {
        // Let the last heals settle (their Ready transitions are real writes), then touch.
        eventually("Ready after the heals", || async { if (inst.ready)().await { Ok(()) } else { Err(inst.name) } }).await;
        let (r0, w0) = inst.operator.quiescent().await;
        for i in 0..touches {
            (inst.touch)(i).await;
            // One touch, one reconcile: wait for it before the next.
            let done = r0 + f64::from(i) + 1.0;
            eventually("reconcile after touch", || async {
                let (r, _) = inst.operator.quiescent().await;
                if r >= done { Ok(()) } else { Err(r) }
            })
            .await;
        }
        let (r1, w1) = inst.operator.quiescent().await;
        noop.push((inst.name, r1 - r0, w1 - w0));
    }

    println!("## Component operators (bench-components)\n");
    println!("Five operators (binaries from {}), one resource each at its first release, in one namespace; {} Deployments; all five Ready after {:.1} s (includes binding PVCs and scheduling).\n", bin_dir().display(), targets.len(), install_time.as_secs_f64());
    println!("| figure | value |\n| --- | --- |");
    println!("| heal latency p50 (delete owned Deployment → new one exists), n={heals} | {:.0} ms |", percentile(&heal, 0.5).as_secs_f64() * 1e3);
    println!("| heal latency p99 | {:.0} ms |", percentile(&heal, 0.99).as_secs_f64() * 1e3);
    println!("| heal latency max | {:.0} ms |", heal.last().unwrap().as_secs_f64() * 1e3);
    println!("| reference p50: delete + immediate re-create by the client itself, n={} | {:.0} ms |", reference.len(), percentile(&reference, 0.5).as_secs_f64() * 1e3);
    println!("| reference p99 | {:.0} ms |", percentile(&reference, 0.99).as_secs_f64() * 1e3);
    println!("| heal p50 / reference p50 | {:.2}× |", percentile(&heal, 0.5).as_secs_f64() / percentile(&reference, 0.5).as_secs_f64());
    println!("| heal p99 / reference p99 | {:.2}× |", percentile(&heal, 0.99).as_secs_f64() / percentile(&reference, 0.99).as_secs_f64());
    for (name, reconciles, writes) in &noop {
        println!("| {name}: writes during {reconciles} no-op reconciles | {writes} |");
    }
    let mut total = 0;
    for inst in &installed {
        let rss = rss_kib(inst.operator.pid());
        total += rss;
        println!("| {}-operator RSS | {:.1} MiB |", inst.name, rss as f64 / 1024.0);
    }
    println!("| all five operators RSS | {:.1} MiB |", total as f64 / 1024.0);

    // Uninstall while the operators still run, so their finalizers let the namespace go.
    for inst in installed {
        inst.remove.await;
    }
}
