//! Katib: hyperparameter tuning (KfDef applications `katib-crds`, `katib-controller`, `katib-db`,
//! `katib-ui`). Releases v0.10.0 and v0.11.0 share one template; v0.11.0 relabels the UI (its
//! Deployment selector changes, so an upgrade replaces that Deployment), tunes more job kinds and
//! supports an external Postgres database.

use component_framework::api::Katib;
use component_framework::api::component::{KatibDatabaseType, SecretKeyRef};
use component_framework::{Component, InvalidSpec, Inputs, Params, Release};

pub struct KatibComponent;

const TEMPLATE: &str = include_str!("../manifests/katib.yaml");

static RELEASES: [Release; 2] = [
    Release {
        version: "v0.10.0",
        manifest: TEMPLATE,
        params: &[("uiSelectorKey", "component"), ("trialResources", "Job.v1.batch,TFJob.v1.kubeflow.org,PyTorchJob.v1.kubeflow.org")],
        upgrades_from: &[],
        kubeflow: &["1.2"],
    },
    Release {
        version: "v0.11.0",
        manifest: TEMPLATE,
        params: &[
            ("uiSelectorKey", "katib.kubeflow.org/component"),
            ("trialResources", "Job.v1.batch,TFJob.v1.kubeflow.org,PyTorchJob.v1.kubeflow.org,MPIJob.v1.kubeflow.org,XGBoostJob.v1.kubeflow.org"),
        ],
        upgrades_from: &["v0.10.0"],
        kubeflow: &["1.3"],
    },
];

fn params(pairs: &[(&str, &str)]) -> Params {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

impl Component for KatibComponent {
    type Resource = Katib;
    const DEFAULT_NAMESPACE: &'static str = "kubeflow";
    const INSTALLS: &'static str = "Katib, hyperparameter tuning and neural architecture search (Experiment, Trial, Suggestion)";

    fn releases() -> &'static [Release] {
        &RELEASES
    }

    fn secret_refs(resource: &Katib) -> Vec<(String, SecretKeyRef)> {
        resource.spec.database.secret_ref.iter().map(|r| ("spec.database.secretRef".to_string(), r.clone())).collect()
    }

    fn default_parameters() -> Params {
        params(&[
            ("dbType", "mysql"),
            ("dbHost", "katib-mysql"),
            ("dbPort", "3306"),
            ("dbSecretName", "katib-mysql-secrets"),
            ("dbSecretKey", "MYSQL_ROOT_PASSWORD"),
            ("builtinDatabase", "true"),
            ("builtinDatabasePassword", "katib"),
            ("controllerNodeOs", "linux"),
        ])
    }

    fn parameters(resource: &Katib, _inputs: &Inputs) -> Result<Params, InvalidSpec> {
        let db = &resource.spec.database;
        let version = resource.spec.core.version.as_str();
        let mut p = Params::new();
        if db.type_ == KatibDatabaseType::Postgres {
            if version == "v0.10.0" {
                return Err(InvalidSpec::new("spec.database.type", "Postgres is supported from Katib v0.11.0; v0.10.0 allows: MySQL"));
            }
            if db.host.is_none() {
                return Err(InvalidSpec::new("spec.database.host", "Postgres needs an external database host; the built-in database is MySQL"));
            }
            p.extend(params(&[("dbType", "postgres"), ("dbPort", "5432")]));
        }
        if let Some(host) = &db.host {
            p.insert("dbHost".into(), host.clone());
            p.insert("builtinDatabase".into(), "false".into());
        }
        if let Some(secret) = &db.secret_ref {
            // The framework has dereferenced it: a missing Secret or key never gets here.
            p.insert("dbSecretName".into(), secret.name.clone());
            p.insert("dbSecretKey".into(), secret.key.clone());
        }
        Ok(p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use component_framework::build::desired_objects;
    use serde_json::{Value, json};

    fn katib(spec: Value) -> Katib {
        let mut k: Katib = serde_json::from_value(json!({
            "apiVersion": "components.kubeflow.org/v1alpha1", "kind": "Katib",
            "metadata": {"name": "katib", "namespace": "team"}, "spec": spec,
        }))
        .unwrap();
        k.metadata.uid = Some("uid".into());
        k
    }

    fn names(objects: &[Value], kind: &str) -> Vec<String> {
        objects.iter().filter(|o| o["kind"] == kind).map(|o| o["metadata"]["name"].as_str().unwrap().to_string()).collect()
    }

    #[test]
    fn crds_are_the_same_for_every_install_and_name_no_owner() {
        let crds = |namespace: &str| -> Vec<Value> {
            let mut k = katib(json!({"version": "v0.11.0", "targetNamespace": namespace}));
            k.metadata.namespace = Some(namespace.into());
            let objects = desired_objects::<KatibComponent>(&k, &Inputs::default()).unwrap();
            objects.into_iter().filter(|o| o["kind"] == "CustomResourceDefinition").collect()
        };
        let (a, b) = (crds("team-a"), crds("team-b"));
        assert_eq!(a.len(), 3);
        assert_eq!(a, b, "two installs would re-apply the shared CRDs in turn");
        assert!(a.iter().all(|c| c["metadata"]["annotations"][component_framework::build::OWNER_ANNOTATION].is_null()));
        let deployment = |ns: &str| desired_objects::<KatibComponent>(&katib(json!({"version": "v0.11.0", "targetNamespace": ns})), &Inputs::default()).unwrap();
        assert!(deployment("x").iter().any(|o| o["kind"] == "Deployment" && o["metadata"]["annotations"][component_framework::build::OWNER_ANNOTATION] == "team/katib"));
    }

    #[test]
    fn a_shared_crd_is_left_to_the_newest_release_that_applied_it() {
        use component_framework::build::crd_belongs_to_newer_release;
        let crd = |version: Option<&str>| json!({"metadata": {"name": "experiments.kubeflow.org", "labels": version.map(|v| json!({"components.kubeflow.org/version": v})).unwrap_or(json!({}))}});
        // An install at v0.10.0 leaves a CRD v0.11.0 applied alone, and never moves it back.
        assert!(crd_belongs_to_newer_release::<KatibComponent>(&crd(Some("v0.11.0")), "v0.10.0"));
        // The newer install applies its own over an older one, and one at the same release too.
        assert!(!crd_belongs_to_newer_release::<KatibComponent>(&crd(Some("v0.10.0")), "v0.11.0"));
        assert!(!crd_belongs_to_newer_release::<KatibComponent>(&crd(Some("v0.11.0")), "v0.11.0"));
        // A release this operator does not ship can only come from a newer operator.
        assert!(crd_belongs_to_newer_release::<KatibComponent>(&crd(Some("v0.99.0")), "v0.11.0"));
        // A CRD someone else made (no version label) is taken over.
        assert!(!crd_belongs_to_newer_release::<KatibComponent>(&crd(None), "v0.10.0"));
    }

    #[test]
    fn every_release_builds_a_full_object_set() {
        for release in KatibComponent::releases() {
            let objects = desired_objects::<KatibComponent>(&katib(json!({"version": release.version})), &Inputs::default()).unwrap();
            assert_eq!(names(&objects, "Deployment"), ["katib-controller", "katib-db-manager", "katib-mysql", "katib-ui"], "{}", release.version);
            assert_eq!(names(&objects, "CustomResourceDefinition").len(), 3);
            assert_eq!(names(&objects, "ClusterRole"), ["katib-controller-kubeflow", "katib-ui-kubeflow"]);
            assert_eq!(names(&objects, "MutatingWebhookConfiguration"), ["katib.kubeflow.org-kubeflow"]);
            let controller = objects.iter().find(|o| o["metadata"]["name"] == "katib-controller" && o["kind"] == "Deployment").unwrap();
            assert_eq!(controller["metadata"]["namespace"], "kubeflow");
            assert_eq!(controller["spec"]["template"]["spec"]["containers"][0]["image"], format!("docker.io/kubeflowkatib/katib-controller:{}", release.version));
            assert_eq!(controller["metadata"]["labels"]["components.kubeflow.org/part-of"], "katib");
            assert_eq!(controller["metadata"]["annotations"]["components.kubeflow.org/owner"], "team/katib");
            // Objects come out in apply order: namespace first, webhooks last.
            assert_eq!(objects.first().unwrap()["kind"], "Namespace");
            assert!(objects.last().unwrap()["kind"].as_str().unwrap().ends_with("WebhookConfiguration"));
        }
    }

    #[test]
    fn ui_selector_changes_between_releases() {
        let selector = |v: &str| {
            let objects = desired_objects::<KatibComponent>(&katib(json!({"version": v})), &Inputs::default()).unwrap();
            objects.iter().find(|o| o["metadata"]["name"] == "katib-ui" && o["kind"] == "Deployment").unwrap()["spec"]["selector"].clone()
        };
        assert_eq!(selector("v0.10.0"), json!({"matchLabels": {"component": "ui"}}));
        assert_eq!(selector("v0.11.0"), json!({"matchLabels": {"katib.kubeflow.org/component": "ui"}}));
    }

    #[test]
    fn external_database_drops_the_builtin_one() {
        let spec = json!({"version": "v0.11.0", "targetNamespace": "ml", "database": {"type": "Postgres", "host": "pg.example.com", "secretRef": {"name": "pg", "key": "password"}}});
        let objects = desired_objects::<KatibComponent>(&katib(spec), &Inputs::default()).unwrap();
        assert!(!names(&objects, "Deployment").contains(&"katib-mysql".to_string()));
        assert!(names(&objects, "PersistentVolumeClaim").is_empty());
        let db = objects.iter().find(|o| o["metadata"]["name"] == "katib-db-manager" && o["kind"] == "Deployment").unwrap();
        let env = &db["spec"]["template"]["spec"]["containers"][0]["env"];
        assert_eq!(env[0], json!({"name": "DB_NAME", "value": "postgres"}));
        assert_eq!(env[1], json!({"name": "DB_HOST", "value": "pg.example.com"}));
        assert_eq!(env[3]["valueFrom"]["secretKeyRef"], json!({"name": "pg", "key": "password"}));
        assert_eq!(db["metadata"]["namespace"], "ml");
    }

    #[test]
    fn bad_input_names_the_field_and_the_allowed_values() {
        let check = |spec: Value, field: &str, needle: &str| {
            let err = desired_objects::<KatibComponent>(&katib(spec), &Inputs::default()).unwrap_err();
            assert_eq!(err.field, field);
            assert!(err.message.contains(needle), "{err}");
        };
        check(json!({"version": "v9.9.9"}), "spec.version", "supported versions: v0.10.0, v0.11.0");
        check(json!({"version": "v0.10.0", "database": {"type": "Postgres", "host": "pg", "secretRef": {"name": "a", "key": "b"}}}), "spec.database.type", "allows: MySQL");
        check(json!({"version": "v0.11.0", "overrides": {"images": {"katib-uii": "x"}}}), "spec.overrides.images.katib-uii", "katib-ui");
        check(json!({"version": "v0.11.0", "overrides": {"replicas": {"katib": 2}}}), "spec.overrides.replicas.katib", "katib-controller");
        check(json!({"version": "v0.11.0", "overrides": {"parameters": [{"name": "nope", "value": "1"}]}}), "spec.overrides.parameters[0].name", "dbHost");
    }

    #[test]
    fn overrides_set_images_and_replicas() {
        let spec = json!({"version": "v0.11.0", "overrides": {"images": {"katib-ui": "registry.local/katib-ui:patched"}, "replicas": {"katib-ui": 3}}});
        let objects = desired_objects::<KatibComponent>(&katib(spec), &Inputs::default()).unwrap();
        let ui = objects.iter().find(|o| o["metadata"]["name"] == "katib-ui" && o["kind"] == "Deployment").unwrap();
        assert_eq!(ui["spec"]["replicas"], 3);
        assert_eq!(ui["spec"]["template"]["spec"]["containers"][0]["image"], "registry.local/katib-ui:patched");
    }
}
