//! Katib: hyperparameter tuning (KfDef applications `katib-crds`, `katib-controller`, `katib-db`,
//! `katib-ui`).
//!
//! Releases v0.10.0 (Kubeflow 1.2) and v0.11.0 (Kubeflow 1.3) share one template
//! (`manifests/katib.yaml`); v0.11.0 relabels the UI (its Deployment selector changes, so an
//! upgrade replaces that Deployment), tunes more job kinds and supports an external Postgres
//! database.
//!
//! Releases v0.18.0 (Kubeflow 1.10) and v0.19.0 (Kubeflow 1.11) share another
//! (`manifests/katib-v0.18.yaml`), shaped like upstream's manifests since v0.16: images come from
//! `ghcr.io/kubeflow/katib/<name>:<tag>` instead of `docker.io/kubeflowkatib`; the controller
//! takes its settings (trial kinds, metrics collector, suggestion and early-stopping images) from
//! a `KatibConfig` in ConfigMap `katib-config`, key `katib-config.yaml`, instead of flags and
//! per-setting keys, and generates its own webhook certificate into Secret `katib-webhook-cert`;
//! db-manager reads the database host and port from `KATIB_MYSQL_DB_*` or `KATIB_POSTGRESQL_DB_*`;
//! the UI checks users' access (SubjectAccessReviews) and Kubeflow's edit and view roles aggregate
//! Katib's resources. v0.19.0 differs from v0.18.0 only in its image tags. v0.18.0 upgrades from
//! nothing: Kubeflow 1.3 to 1.10 is no upgrade upstream supports, so it is a fresh install.
//!
//! Every release honours the same database parameters: built-in MySQL (with its claim and Secret)
//! unless `spec.database.host` names an external MySQL or Postgres database.

use component_framework::api::Katib;
use component_framework::api::component::{KatibDatabaseType, SecretKeyRef};
use component_framework::package::patch;
use component_framework::{Component, InvalidSpec, Inputs, Params, Release};
use component_framework::k8s_openapi::serde_json::{Value, json};

pub struct KatibComponent;

/// Template of v0.10.0, v0.11.0 and v0.11.1.
const TEMPLATE: &str = include_str!("../manifests/katib.yaml");
/// Template of v0.18.0 and v0.19.0.
const TEMPLATE_V0_18: &str = include_str!("../manifests/katib-v0.18.yaml");

/// Trial kinds of v0.18.0 and v0.19.0 (KatibConfig `init.controller.trialResources`).
const TRIAL_RESOURCES_V0_18: &str = "Job.v1.batch,TFJob.v1.kubeflow.org,PyTorchJob.v1.kubeflow.org,MPIJob.v1.kubeflow.org,XGBoostJob.v1.kubeflow.org";

static RELEASES: [Release; 5] = [
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
    // Kubeflow 1.3.1's; v0.11.0's template.
    Release {
        version: "v0.11.1",
        manifest: TEMPLATE,
        params: &[
            ("uiSelectorKey", "katib.kubeflow.org/component"),
            ("trialResources", "Job.v1.batch,TFJob.v1.kubeflow.org,PyTorchJob.v1.kubeflow.org,MPIJob.v1.kubeflow.org,XGBoostJob.v1.kubeflow.org"),
        ],
        upgrades_from: &["v0.10.0", "v0.11.0"],
        kubeflow: &["1.3.1"],
    },
    Release {
        version: "v0.18.0",
        manifest: TEMPLATE_V0_18,
        params: &[("trialResources", TRIAL_RESOURCES_V0_18)],
        // Kubeflow 1.3 to 1.10 is no upgrade upstream supports: a fresh install.
        upgrades_from: &[],
        kubeflow: &["1.10"],
    },
    Release {
        version: "v0.19.0",
        manifest: TEMPLATE_V0_18,
        params: &[("trialResources", TRIAL_RESOURCES_V0_18)],
        upgrades_from: &["v0.18.0"],
        kubeflow: &["1.11"],
    },
];

fn params(pairs: &[(&str, &str)]) -> Params {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

/// Where upstream's package keeps the database: db-manager's environment (`DB_NAME`, the
/// `KATIB_<ENGINE>_DB_HOST`/`_PORT` it reads, the password from `katib-mysql-secrets`), and the
/// package's own MySQL, which an external database replaces.
const PACKAGE_DB_MANAGER: (&str, &str) = ("katib-db-manager", "katib-db-manager");
const PACKAGE_DB_SECRET: (&str, &str) = ("katib-mysql-secrets", "MYSQL_ROOT_PASSWORD");
const PACKAGE_MYSQL: [(&str, &str); 4] = [("Deployment", "katib-mysql"), ("PersistentVolumeClaim", "katib-mysql"), ("Secret", "katib-mysql-secrets"), ("Service", "katib-mysql")];

/// `spec.database` on upstream's package: an external MySQL or Postgres in db-manager's
/// environment, its password from `secretRef`, the package's MySQL taken out. The user is
/// db-manager's default (root for MySQL, katib for Postgres), as with the built-in releases.
fn patch_package(resource: &Katib, objects: &mut Vec<Value>) -> Result<(), InvalidSpec> {
    let db = &resource.spec.database;
    check_postgres(resource)?;
    let Some(host) = &db.host else {
        if db.type_ == KatibDatabaseType::Postgres {
            return Err(InvalidSpec::new("spec.database.host", "Postgres needs an external database host; the package's database is MySQL"));
        }
        if db.secret_ref.is_some() {
            return Err(InvalidSpec::new("spec.database.secretRef", "on packages applies to an external database only: set spec.database.host too"));
        }
        return Ok(());
    };
    let (engine, variable, port) = match db.type_ {
        KatibDatabaseType::MySQL => ("mysql", "MYSQL", "3306"),
        KatibDatabaseType::Postgres => ("postgres", "POSTGRESQL", "5432"),
    };
    let (host_var, port_var) = (format!("KATIB_{variable}_DB_HOST"), format!("KATIB_{variable}_DB_PORT"));
    let vars = [("DB_NAME", json!(engine)), (host_var.as_str(), json!(host)), (port_var.as_str(), json!(port))];
    patch::set_env(objects, "Deployment", PACKAGE_DB_MANAGER.0, PACKAGE_DB_MANAGER.1, &vars, "spec.database.host")?;
    patch::use_external_password(objects, PACKAGE_DB_SECRET, db.secret_ref.as_ref())?;
    patch::remove(objects, &PACKAGE_MYSQL);
    Ok(())
}

/// Postgres is supported from Katib v0.11.0 on.
fn check_postgres(resource: &Katib) -> Result<(), InvalidSpec> {
    if resource.spec.database.type_ == KatibDatabaseType::Postgres && resource.spec.core.version == "v0.10.0" {
        return Err(InvalidSpec::new("spec.database.type", "Postgres is supported from Katib v0.11.0; v0.10.0 allows: MySQL"));
    }
    Ok(())
}

impl Component for KatibComponent {
    type Resource = Katib;
    const DEFAULT_NAMESPACE: &'static str = "kubeflow";
    const INSTALLS: &'static str = "Katib, hyperparameter tuning and neural architecture search (Experiment, Trial, Suggestion)";
    /// A resource made from a KfDef renders the KfDef's packages, upstream's objects.
    const RENDERS_PACKAGES: bool = true;
    /// The kinds upstream's packages of these releases install.
    const INSTALLED_KINDS: &'static [&'static str] = &["ClusterRole", "ClusterRoleBinding", "ConfigMap", "CustomResourceDefinition", "Deployment", "MutatingWebhookConfiguration", "Namespace", "PersistentVolumeClaim", "Secret", "Service", "ServiceAccount", "ValidatingWebhookConfiguration"];
    /// The releases' packages in Kubeflow's archives (paths as their `example/kustomization.yaml`
    /// lists them; Kubeflow 1.2's are in kfctl's `kubeflow-apps` stack).
    const UPSTREAM_RELEASES: &'static [component_framework::UpstreamRelease] = &[
        component_framework::UpstreamRelease { version: "v0.10.0", kubeflow: "v1.2.0", applications: &[("katib", "katib/installs/katib-standalone")] },
        component_framework::UpstreamRelease { version: "v0.11.0", kubeflow: "v1.3.0", applications: &[("katib", "apps/katib/upstream/installs/katib-with-kubeflow")] },
        component_framework::UpstreamRelease { version: "v0.11.1", kubeflow: "v1.3.1", applications: &[("katib", "apps/katib/upstream/installs/katib-with-kubeflow")] },
        component_framework::UpstreamRelease { version: "v0.18.0", kubeflow: "v1.10.2", applications: &[("katib", "applications/katib/upstream/installs/katib-with-kubeflow")] },
        component_framework::UpstreamRelease { version: "v0.19.0", kubeflow: "v1.11.0", applications: &[("katib", "applications/katib/upstream/installs/katib-with-kubeflow")] },
    ];
    /// The controller's image.
    const VERSION_IMAGES: &'static [&'static str] = &["katib-controller"];
    const PACKAGE_FIELDS: &'static [&'static str] = &["database"];

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

    fn customize(resource: &Katib, inputs: &Inputs, objects: &mut Vec<Value>) -> Result<(), InvalidSpec> {
        if inputs.from_packages() {
            patch_package(resource, objects)?;
        }
        Ok(())
    }

    fn parameters(resource: &Katib, _inputs: &Inputs) -> Result<Params, InvalidSpec> {
        let db = &resource.spec.database;
        let mut p = Params::new();
        check_postgres(resource)?;
        if db.type_ == KatibDatabaseType::Postgres {
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
        // Releases order oldest first across both templates: v0.11.0 leaves v0.18.0's CRDs alone,
        // v0.19.0 takes over v0.18.0's.
        assert!(crd_belongs_to_newer_release::<KatibComponent>(&crd(Some("v0.18.0")), "v0.11.0"));
        assert!(crd_belongs_to_newer_release::<KatibComponent>(&crd(Some("v0.19.0")), "v0.18.0"));
        assert!(!crd_belongs_to_newer_release::<KatibComponent>(&crd(Some("v0.18.0")), "v0.19.0"));
        assert!(!crd_belongs_to_newer_release::<KatibComponent>(&crd(Some("v0.11.0")), "v0.18.0"));
    }

    #[test]
    fn every_release_builds_a_full_object_set() {
        for release in KatibComponent::releases() {
            let v = release.version;
            let objects = desired_objects::<KatibComponent>(&katib(json!({"version": v})), &Inputs::default()).unwrap();
            let (registry, cluster_roles): (&str, &[&str]) = match v {
                "v0.10.0" | "v0.11.0" | "v0.11.1" => ("docker.io/kubeflowkatib", &["katib-controller-kubeflow", "katib-ui-kubeflow"]),
                _ => ("ghcr.io/kubeflow/katib", &["katib-controller-kubeflow", "katib-ui-kubeflow", "kubeflow-katib-edit-kubeflow", "kubeflow-katib-view-kubeflow"]),
            };
            assert_eq!(names(&objects, "Deployment"), ["katib-controller", "katib-db-manager", "katib-mysql", "katib-ui"], "{v}");
            assert_eq!(names(&objects, "CustomResourceDefinition").len(), 3);
            assert_eq!(names(&objects, "ClusterRole"), cluster_roles, "{v}");
            assert_eq!(names(&objects, "MutatingWebhookConfiguration"), ["katib.kubeflow.org-kubeflow"]);
            assert_eq!(names(&objects, "ValidatingWebhookConfiguration"), ["katib.kubeflow.org-kubeflow"]);
            let controller = objects.iter().find(|o| o["metadata"]["name"] == "katib-controller" && o["kind"] == "Deployment").unwrap();
            assert_eq!(controller["metadata"]["namespace"], "kubeflow");
            assert_eq!(controller["spec"]["template"]["spec"]["containers"][0]["image"], format!("{registry}/katib-controller:{v}"));
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

    // --- v0.18.0 (Kubeflow 1.10) and v0.19.0 (Kubeflow 1.11) --------------------------------------

    /// The releases of the second template.
    const NEW: [&str; 2] = ["v0.18.0", "v0.19.0"];

    fn build(spec: Value) -> Vec<Value> {
        desired_objects::<KatibComponent>(&katib(spec), &Inputs::default()).unwrap_or_else(|e| panic!("{e}"))
    }

    fn object<'a>(objects: &'a [Value], kind: &str, name: &str) -> &'a Value {
        objects.iter().find(|o| o["kind"] == kind && o["metadata"]["name"] == name).unwrap_or_else(|| panic!("no {kind} {name}"))
    }

    fn container<'a>(objects: &'a [Value], deployment: &str) -> &'a Value {
        &object(objects, "Deployment", deployment)["spec"]["template"]["spec"]["containers"][0]
    }

    /// A container's environment: each variable's `value`, or its `valueFrom`.
    fn env(container: &Value) -> std::collections::BTreeMap<String, Value> {
        container["env"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| (e["name"].as_str().unwrap().to_string(), if e["value"].is_null() { e["valueFrom"].clone() } else { e["value"].clone() }))
            .collect()
    }

    /// The KatibConfig of ConfigMap katib-config, read with the framework's own YAML parser (given
    /// the metadata.name it wants of every document; the config has no `${` to substitute).
    fn katib_config(objects: &[Value]) -> Value {
        let data = object(objects, "ConfigMap", "katib-config")["data"].as_object().unwrap();
        assert_eq!(data.keys().collect::<Vec<_>>(), ["katib-config.yaml"], "one key, as upstream");
        let text = data["katib-config.yaml"].as_str().unwrap();
        let mut docs = component_framework::manifest::render(&format!("metadata: {{name: katib-config}}\n{text}"), &Params::new()).unwrap();
        assert_eq!(docs.len(), 1);
        let mut config = docs.remove(0);
        config.as_object_mut().unwrap().remove("metadata");
        config
    }

    const BUILTIN_MYSQL: [(&str, &str); 4] =
        [("Deployment", "katib-mysql"), ("PersistentVolumeClaim", "katib-mysql"), ("Secret", "katib-mysql-secrets"), ("Service", "katib-mysql")];

    fn has(objects: &[Value], kind: &str, name: &str) -> bool {
        objects.iter().any(|o| o["kind"] == kind && o["metadata"]["name"] == name)
    }

    #[test]
    fn applications_named_without_a_package_install_the_release_as_upstream_ships_it() {
        let katib = |version: &str, applications: &[&str]| -> Katib {
            serde_json::from_value(json!({"apiVersion": "components.kubeflow.org/v1alpha1", "kind": "Katib", "metadata": {"name": "kubeflow", "namespace": "kubeflow"},
                "spec": {"version": version, "sources": applications.iter().map(|a| json!({"application": a})).collect::<Vec<_>>()}}))
            .unwrap()
        };
        let sources = |resource: Katib| -> Vec<(String, String, String)> {
            let with = component_framework::package::release_sources::<KatibComponent>(&resource, &[]).expect("an upstream release").expect("sources");
            with.spec.core.sources.into_iter().map(|s| (s.application, s.repo_uri.unwrap(), s.path.unwrap())).collect()
        };
        let v0_10 = vec![("katib".to_string(), "https://github.com/kubeflow/manifests/archive/v1.2.0.tar.gz".to_string(), "katib/installs/katib-standalone".to_string())];
        // A kfctl-era KfDef's names for Katib: Katib once, as Kubeflow 1.2.0 ships it.
        assert_eq!(sources(katib("v0.10.0", &["katib-crds", "katib-controller"])), v0_10);
        assert_eq!(sources(katib("v0.10.0", &[])), v0_10);
        assert_eq!(sources(katib("v0.10.0", &["katib"])), v0_10);
        assert_eq!(sources(katib("v0.10.0", &["katib", "katib-ui"])), v0_10, "a name the release does not use: the release, once");
        assert_eq!(sources(katib("v0.19.0", &["katib"]))[0].2, "applications/katib/upstream/installs/katib-with-kubeflow");
    }

    #[test]
    fn releases_are_oldest_first_with_their_upgrade_edges_and_kubeflow_releases() {
        let releases: Vec<(&str, &[&str], &[&str])> = KatibComponent::releases().iter().map(|r| (r.version, r.upgrades_from, r.kubeflow)).collect();
        let expected: Vec<(&str, &[&str], &[&str])> = vec![
            ("v0.10.0", &[], &["1.2"]),
            ("v0.11.0", &["v0.10.0"], &["1.3"]),
            ("v0.11.1", &["v0.10.0", "v0.11.0"], &["1.3.1"]),
            // Kubeflow 1.3 → 1.10 is a fresh install, not an upgrade.
            ("v0.18.0", &[], &["1.10"]),
            ("v0.19.0", &["v0.18.0"], &["1.11"]),
        ];
        assert_eq!(releases, expected);
        assert!(std::ptr::eq(KatibComponent::releases()[3].manifest, KatibComponent::releases()[4].manifest), "v0.18.0 and v0.19.0 share a template");
        assert!(std::ptr::eq(KatibComponent::releases()[1].manifest, KatibComponent::releases()[2].manifest), "v0.11.0 and v0.11.1 share a template");
        assert!(!std::ptr::eq(KatibComponent::releases()[2].manifest, KatibComponent::releases()[3].manifest));
    }

    #[test]
    fn new_releases_pull_their_own_tag_from_ghcr() {
        let expected = [
            ("v0.18.0", "ghcr.io/kubeflow/katib/katib-controller:v0.18.0", "ghcr.io/kubeflow/katib/katib-db-manager:v0.18.0", "ghcr.io/kubeflow/katib/katib-ui:v0.18.0"),
            ("v0.19.0", "ghcr.io/kubeflow/katib/katib-controller:v0.19.0", "ghcr.io/kubeflow/katib/katib-db-manager:v0.19.0", "ghcr.io/kubeflow/katib/katib-ui:v0.19.0"),
        ];
        for (version, controller, db_manager, ui) in expected {
            let objects = build(json!({"version": version}));
            assert_eq!(container(&objects, "katib-controller")["image"], controller);
            assert_eq!(container(&objects, "katib-db-manager")["image"], db_manager);
            assert_eq!(container(&objects, "katib-ui")["image"], ui);
            assert_eq!(container(&objects, "katib-mysql")["image"], "mysql:8.0");
            assert!(!serde_json::to_string(&objects).unwrap().contains("kubeflowkatib"), "{version}: an image of the old docker.io repository");
        }
    }

    #[test]
    fn katib_config_is_one_katib_config_object_with_the_release_images() {
        for version in NEW {
            let objects = build(json!({"version": version}));
            let config = katib_config(&objects);
            assert_eq!(config["apiVersion"], "config.kubeflow.org/v1beta1");
            assert_eq!(config["kind"], "KatibConfig");
            assert_eq!(config["init"]["certGenerator"], json!({"enable": true}));
            assert_eq!(config["init"]["controller"]["webhookPort"], 8443);
            assert_eq!(
                config["init"]["controller"]["trialResources"],
                json!(["Job.v1.batch", "TFJob.v1.kubeflow.org", "PyTorchJob.v1.kubeflow.org", "MPIJob.v1.kubeflow.org", "XGBoostJob.v1.kubeflow.org"])
            );
            let pairs = |list: &Value, key: &str| -> Vec<(String, String)> {
                list.as_array().unwrap().iter().map(|e| (e[key].as_str().unwrap().to_string(), e["image"].as_str().unwrap().to_string())).collect()
            };
            let ghcr = |image: &str| format!("ghcr.io/kubeflow/katib/{image}:{version}");
            let expected = |list: &[(&str, &str)]| list.iter().map(|(k, image)| (k.to_string(), ghcr(image))).collect::<Vec<_>>();
            assert_eq!(
                pairs(&config["runtime"]["metricsCollectors"], "kind"),
                expected(&[("StdOut", "file-metrics-collector"), ("File", "file-metrics-collector"), ("TensorFlowEvent", "tfevent-metrics-collector")])
            );
            assert_eq!(
                pairs(&config["runtime"]["suggestions"], "algorithmName"),
                expected(&[
                    ("random", "suggestion-hyperopt"),
                    ("tpe", "suggestion-hyperopt"),
                    ("grid", "suggestion-optuna"),
                    ("hyperband", "suggestion-hyperband"),
                    ("bayesianoptimization", "suggestion-skopt"),
                    ("cmaes", "suggestion-goptuna"),
                    ("sobol", "suggestion-goptuna"),
                    ("multivariate-tpe", "suggestion-optuna"),
                    ("enas", "suggestion-enas"),
                    ("darts", "suggestion-darts"),
                    ("pbt", "suggestion-pbt"),
                ])
            );
            assert_eq!(pairs(&config["runtime"]["earlyStoppings"], "algorithmName"), expected(&[("medianstop", "earlystopping-medianstop")]));
            // The trial templates keep Katib's own placeholders for the controller to fill.
            let trial = object(&objects, "ConfigMap", "trial-templates")["data"]["defaultTrialTemplate.yaml"].as_str().unwrap();
            assert!(trial.contains("--lr=${trialParameters.learningRate}") && trial.contains(&ghcr("pytorch-mnist-cpu")), "{trial}");
            // Nothing else is left unrendered.
            for o in objects.iter().filter(|o| o["metadata"]["name"] != "trial-templates") {
                assert!(!o.to_string().contains("${"), "{version}: unrendered reference in {} {}", o["kind"], o["metadata"]["name"]);
            }
        }
    }

    #[test]
    fn controller_reads_katib_config_and_serves_the_webhooks_with_a_generated_certificate() {
        for version in NEW {
            let objects = build(json!({"version": version, "targetNamespace": "ml"}));
            let deployment = object(&objects, "Deployment", "katib-controller");
            assert_eq!(deployment["spec"]["selector"], json!({"matchLabels": {"katib.kubeflow.org/component": "controller"}}));
            let pod = &deployment["spec"]["template"]["spec"];
            assert_eq!(pod["nodeSelector"], json!({"kubernetes.io/os": "linux"}));
            let c = &pod["containers"][0];
            assert_eq!(c["args"], json!(["--katib-config=/katib-config.yaml"]));
            assert!(c["volumeMounts"].as_array().unwrap().contains(&json!({"name": "katib-config", "mountPath": "/katib-config.yaml", "subPath": "katib-config.yaml", "readOnly": true})));
            assert!(pod["volumes"].as_array().unwrap().contains(&json!({"name": "katib-config", "configMap": {"name": "katib-config"}})));
            assert!(pod["volumes"].as_array().unwrap().contains(&json!({"name": "cert", "secret": {"secretName": "katib-webhook-cert", "defaultMode": 420}})));
            // The certificate generator fills the Secret: the template gives it no data to overwrite.
            let cert = object(&objects, "Secret", "katib-webhook-cert");
            assert!(cert["data"].is_null() && cert["stringData"].is_null());
            let service = object(&objects, "Service", "katib-controller");
            assert_eq!(service["spec"]["selector"], json!({"katib.kubeflow.org/component": "controller"}));
            assert_eq!(service["spec"]["ports"][0], json!({"name": "webhook", "port": 443, "protocol": "TCP", "targetPort": 8443}));
            let paths: Vec<(&str, &str)> = objects
                .iter()
                .filter(|o| o["kind"].as_str().unwrap().ends_with("WebhookConfiguration"))
                .flat_map(|o| o["webhooks"].as_array().unwrap())
                .map(|w| {
                    assert_eq!(w["clientConfig"]["service"]["name"], "katib-controller");
                    assert_eq!(w["clientConfig"]["service"]["namespace"], "ml");
                    (w["name"].as_str().unwrap(), w["clientConfig"]["service"]["path"].as_str().unwrap())
                })
                .collect();
            assert_eq!(
                paths,
                [
                    ("validator.experiment.katib.kubeflow.org", "/validate-experiment"),
                    ("defaulter.experiment.katib.kubeflow.org", "/mutate-experiment"),
                    ("mutator.pod.katib.kubeflow.org", "/mutate-pod")
                ]
            );
            let mutating = object(&objects, "MutatingWebhookConfiguration", "katib.kubeflow.org-ml");
            assert_eq!(mutating["webhooks"][1]["namespaceSelector"], json!({"matchLabels": {"katib.kubeflow.org/metrics-collector-injection": "enabled"}}));
        }
    }

    #[test]
    fn new_releases_render_the_same_crds_for_every_install() {
        for version in NEW {
            let crds = |namespace: &str| -> Vec<Value> {
                let mut k = katib(json!({"version": version, "targetNamespace": namespace}));
                k.metadata.namespace = Some(namespace.into());
                let objects = desired_objects::<KatibComponent>(&k, &Inputs::default()).unwrap();
                objects.into_iter().filter(|o| o["kind"] == "CustomResourceDefinition").collect()
            };
            let (a, b) = (crds("team-a"), crds("team-b"));
            assert_eq!(a, b, "{version}: two installs would re-apply the shared CRDs in turn");
            let crd_names: Vec<&str> = a.iter().map(|c| c["metadata"]["name"].as_str().unwrap()).collect();
            assert_eq!(crd_names, ["experiments.kubeflow.org", "suggestions.kubeflow.org", "trials.kubeflow.org"]);
            for crd in &a {
                assert!(crd["metadata"]["annotations"][component_framework::build::OWNER_ANNOTATION].is_null());
                assert_eq!(crd["metadata"]["labels"]["components.kubeflow.org/version"], version);
                assert_eq!(crd["spec"]["group"], "kubeflow.org");
                // Not upstream's "katib" category: `kubectl get katib` must find the Katib resource.
                assert_eq!(crd["spec"]["names"]["categories"], json!(["all", "kubeflow"]));
                let versions: Vec<(&str, bool, bool)> = crd["spec"]["versions"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|v| (v["name"].as_str().unwrap(), v["served"].as_bool().unwrap(), v["storage"].as_bool().unwrap()))
                    .collect();
                assert_eq!(versions, [("v1beta1", true, true)]);
            }
        }
    }

    #[test]
    fn new_releases_keep_installs_in_two_namespaces_apart() {
        use component_framework::kinds;
        for version in NEW {
            for ns in ["kubeflow", "ml"] {
                let objects = build(json!({"version": version, "targetNamespace": ns}));
                for o in &objects {
                    let (kind, name) = (o["kind"].as_str().unwrap(), o["metadata"]["name"].as_str().unwrap());
                    let info = kinds::lookup(o["apiVersion"].as_str().unwrap(), kind).unwrap();
                    if !info.cluster_scoped {
                        assert_eq!(o["metadata"]["namespace"], ns, "{version}: {kind} {name}");
                    } else if !info.is_crd() && !info.is_shared() {
                        assert!(name.ends_with(&format!("-{ns}")), "{version}: cluster-scoped {kind} {name} lacks the namespace suffix");
                    }
                }
                for binding in objects.iter().filter(|o| o["kind"] == "ClusterRoleBinding") {
                    assert_eq!(binding["subjects"][0]["namespace"], ns);
                    assert_eq!(binding["roleRef"]["name"], binding["metadata"]["name"], "each install binds its own role");
                }
            }
        }
    }

    #[test]
    fn new_releases_run_the_builtin_mysql_by_default() {
        for version in NEW {
            let objects = build(json!({"version": version}));
            for (kind, name) in BUILTIN_MYSQL {
                assert!(has(&objects, kind, name), "{version}: no {kind} {name}");
            }
            let claim = object(&objects, "PersistentVolumeClaim", "katib-mysql");
            assert_eq!(claim["spec"], json!({"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "10Gi"}}}));
            // "katib", the default password, base64-encoded as the API server stores it.
            assert_eq!(object(&objects, "Secret", "katib-mysql-secrets")["data"], json!({"MYSQL_ROOT_PASSWORD": "a2F0aWI="}));
            let mysql = object(&objects, "Deployment", "katib-mysql");
            assert_eq!(mysql["spec"]["template"]["spec"]["volumes"][0]["persistentVolumeClaim"], json!({"claimName": "katib-mysql"}));
            assert_eq!(object(&objects, "Service", "katib-mysql")["spec"]["ports"][0]["port"], 3306);
            let db = env(container(&objects, "katib-db-manager"));
            assert_eq!(db["DB_NAME"], "mysql");
            assert_eq!(db["KATIB_MYSQL_DB_HOST"], "katib-mysql");
            assert_eq!(db["KATIB_MYSQL_DB_PORT"], "3306");
            assert_eq!(db["DB_PASSWORD"], json!({"secretKeyRef": {"name": "katib-mysql-secrets", "key": "MYSQL_ROOT_PASSWORD"}}));
        }
    }

    #[test]
    fn new_releases_use_an_external_mysql_or_postgres_instead() {
        for version in NEW {
            let mysql = build(json!({"version": version, "database": {"host": "mysql.example.com", "secretRef": {"name": "db", "key": "pw"}}}));
            let postgres = build(json!({
                "version": version, "targetNamespace": "ml",
                "database": {"type": "Postgres", "host": "pg.example.com", "secretRef": {"name": "pg", "key": "password"}},
            }));
            for objects in [&mysql, &postgres] {
                for (kind, name) in BUILTIN_MYSQL {
                    assert!(!has(objects, kind, name), "{version}: {kind} {name} with an external database");
                }
                assert!(names(objects, "PersistentVolumeClaim").is_empty());
                assert_eq!(names(objects, "Deployment"), ["katib-controller", "katib-db-manager", "katib-ui"]);
            }
            let db = env(container(&mysql, "katib-db-manager"));
            assert_eq!(db["DB_NAME"], "mysql");
            assert_eq!(db["KATIB_MYSQL_DB_HOST"], "mysql.example.com");
            assert_eq!(db["KATIB_MYSQL_DB_PORT"], "3306");
            assert_eq!(db["DB_PASSWORD"], json!({"secretKeyRef": {"name": "db", "key": "pw"}}));
            let db = env(container(&postgres, "katib-db-manager"));
            assert_eq!(db["DB_NAME"], "postgres");
            assert_eq!(db["KATIB_POSTGRESQL_DB_HOST"], "pg.example.com");
            assert_eq!(db["KATIB_POSTGRESQL_DB_PORT"], "5432");
            assert_eq!(db["DB_PASSWORD"], json!({"secretKeyRef": {"name": "pg", "key": "password"}}));
            assert_eq!(object(&postgres, "Deployment", "katib-db-manager")["metadata"]["namespace"], "ml");
            // Postgres has no built-in database to fall back on.
            let err = desired_objects::<KatibComponent>(&katib(json!({"version": version, "database": {"type": "Postgres"}})), &Inputs::default()).unwrap_err();
            assert_eq!(err.field, "spec.database.host");
        }
    }

    #[test]
    fn every_spec_that_builds_at_v0_11_builds_at_the_new_releases() {
        let specs = [
            json!({}),
            json!({"targetNamespace": "ml"}),
            json!({"database": {"type": "MySQL", "host": "mysql.example.com"}}),
            json!({"database": {"type": "Postgres", "host": "pg.example.com", "secretRef": {"name": "pg", "key": "password"}}}),
            json!({"overrides": {"images": {"katib-ui": "registry.local/katib-ui:patched", "katib-mysql": "registry.local/mysql:8"}, "replicas": {"katib-ui": 3}}}),
            json!({"overrides": {"parameters": [
                {"name": "controllerNodeOs", "value": "windows"}, {"name": "builtinDatabasePassword", "value": "s3cret"},
                {"name": "dbPort", "value": "3307"}, {"name": "dbSecretName", "value": "mine"}, {"name": "dbSecretKey", "value": "pw"},
            ]}}),
        ];
        for spec in &specs {
            let at = |version: &str| {
                let mut spec = spec.clone();
                spec["version"] = json!(version);
                build(spec)
            };
            let old = at("v0.11.0");
            for version in NEW {
                let new = at(version);
                assert_eq!(names(&new, "Deployment"), names(&old, "Deployment"), "{version} {spec}");
                assert_eq!(names(&new, "PersistentVolumeClaim"), names(&old, "PersistentVolumeClaim"), "{version} {spec}");
                let (old_db, new_db) = (env(container(&old, "katib-db-manager")), env(container(&new, "katib-db-manager")));
                let prefix = if old_db["DB_NAME"] == "postgres" { "KATIB_POSTGRESQL_DB" } else { "KATIB_MYSQL_DB" };
                assert_eq!(new_db["DB_NAME"], old_db["DB_NAME"], "{version} {spec}");
                assert_eq!(new_db[&format!("{prefix}_HOST")], old_db["DB_HOST"], "{version} {spec}");
                assert_eq!(new_db[&format!("{prefix}_PORT")], old_db["DB_PORT"], "{version} {spec}");
                assert_eq!(new_db["DB_PASSWORD"], old_db["DB_PASSWORD"], "{version} {spec}");
                let pod = |objects: &[Value], d: &str| object(objects, "Deployment", d)["spec"]["template"]["spec"]["nodeSelector"].clone();
                assert_eq!(pod(&new, "katib-controller"), pod(&old, "katib-controller"), "{version} {spec}");
                let ui = |objects: &[Value]| (object(objects, "Deployment", "katib-ui")["spec"]["replicas"].clone(), container(objects, "katib-ui")["image"].clone());
                if spec["overrides"]["images"].is_object() {
                    assert_eq!(ui(&new), ui(&old), "{version} {spec}");
                    assert_eq!(container(&new, "katib-mysql")["image"], "registry.local/mysql:8");
                }
                if has(&old, "Secret", "katib-mysql-secrets") {
                    assert_eq!(object(&new, "Secret", "katib-mysql-secrets")["data"], object(&old, "Secret", "katib-mysql-secrets")["data"], "{version} {spec}");
                }
            }
        }
        // The values the overrides above set, by hand.
        let objects = build(json!({"version": "v0.19.0", "overrides": specs[5]["overrides"].clone()}));
        assert_eq!(object(&objects, "Deployment", "katib-controller")["spec"]["template"]["spec"]["nodeSelector"], json!({"kubernetes.io/os": "windows"}));
        assert_eq!(object(&objects, "Secret", "katib-mysql-secrets")["data"], json!({"MYSQL_ROOT_PASSWORD": "czNjcmV0"}));
        let db = env(container(&objects, "katib-db-manager"));
        assert_eq!(db["KATIB_MYSQL_DB_PORT"], "3307");
        assert_eq!(db["DB_PASSWORD"], json!({"secretKeyRef": {"name": "mine", "key": "pw"}}));
    }
}
