//! Management states and the CRD removal opt-in, on Katib as Kubeflow 1.11.0 ships it (its objects
//! where upstream puts them). A separate test binary, so deleting Katib's CRDs (the opt-in) never
//! races the lifecycle tests, which check that CRDs are kept.

use component_framework::api::Katib;
use component_framework::api::component::ComponentPhase;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use kubeflow_e2e::*;
use serde_json::json;

async fn phase(api: &Api<Katib>, wanted: ComponentPhase) -> Katib {
    eventually(&format!("phase {wanted:?}"), || async {
        let k = api.get("katib").await.map_err(|e| e.to_string())?;
        let status = k.status.clone().unwrap_or_default();
        if status.phase == Some(wanted) && status.observed_generation == k.metadata.generation { Ok(k) } else { Err(format!("{status:?}")) }
    })
    .await
}

#[tokio::test]
async fn unmanaged_leaves_objects_removed_uninstalls_and_crd_deletion_is_opt_in() {
    let client = client().await;
    install_crds(&client).await;
    serve_prerequisite_kinds(&client).await;
    let ns = TestNamespace::create(&client, "e2e-mgmt").await;
    let operator = OperatorProcess::start("katib-operator", &["--namespace", &ns.name], &[]);
    operator.wait_ready().await;
    let api: Api<Katib> = Api::namespaced(client.clone(), &ns.name);
    let katib: Katib = serde_json::from_value(json!({
        "apiVersion": "components.kubeflow.org/v1alpha1", "kind": "Katib", "metadata": {"name": "katib"},
        "spec": {"version": "v0.19.0"},
    }))
    .unwrap();
    api.create(&PostParams::default(), &katib).await.unwrap();
    phase(&api, ComponentPhase::Ready).await;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "kubeflow");
    let set = |state: &'static str| {
        let api = api.clone();
        async move { api.patch("katib", &PatchParams::default(), &Patch::Merge(json!({"spec": {"managementState": state}}))).await.unwrap() }
    };

    // Unmanaged: a deleted Deployment stays deleted, even across reconciles.
    set("Unmanaged").await;
    phase(&api, ComponentPhase::Unmanaged).await;
    let (finished, _) = operator.quiescent().await;
    deployments.delete("katib-ui", &DeleteParams::background()).await.unwrap();
    api.patch("katib", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"annotations": {"e2e/touch": "1"}}}))).await.unwrap();
    eventually("a reconcile after the delete", || async {
        let (now, _) = operator.quiescent().await;
        if now > finished { Ok(()) } else { Err(now) }
    })
    .await;
    assert!(deployments.get_opt("katib-ui").await.unwrap().is_none(), "an Unmanaged component was healed");

    // Managed again: healed.
    set("Managed").await;
    phase(&api, ComponentPhase::Ready).await;
    assert!(deployments.get_opt("katib-ui").await.unwrap().is_some());

    // Removed: everything goes, the resource stays; CRDs are kept by default.
    set("Removed").await;
    let removed = phase(&api, ComponentPhase::Removed).await;
    assert!(removed.status.unwrap().inventory.is_empty());
    // Gone, not merely terminating.
    let katib_deployments = ListParams::default().labels(&format!("{}=katib", component_framework::build::PART_OF_LABEL));
    for deployment in deployments.list(&katib_deployments).await.unwrap().items {
        gone(&deployments, &deployment.name_any()).await;
    }
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    assert!(crds.get_opt("experiments.kubeflow.org").await.unwrap().is_some());

    // Opt in to CRD removal, install again, then delete the resource: the CRDs go too.
    api.patch("katib", &PatchParams::default(), &Patch::Merge(json!({"spec": {"managementState": "Managed", "crdRemovalPolicy": "Delete"}}))).await.unwrap();
    phase(&api, ComponentPhase::Ready).await;
    api.delete("katib", &DeleteParams::default()).await.unwrap();
    gone(&api, "katib").await;
    for crd in ["experiments.kubeflow.org", "suggestions.kubeflow.org", "trials.kubeflow.org"] {
        gone(&crds, crd).await;
    }
}
