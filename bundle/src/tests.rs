use base64::Engine;
use serde_json::{Value, json};

use super::*;

/// Every package, rendered once (rendering walks every component release).
fn all_packages() -> &'static [Package] {
    static PACKAGES: std::sync::OnceLock<Vec<Package>> = std::sync::OnceLock::new();
    PACKAGES.get_or_init(packages)
}

/// The CSV of every bundle: read back for released versions, rendered for the one in development.
/// (package, release index, CSV, the bundle's CRDs): what each bundle holds.
fn csvs() -> Vec<(&'static Package, usize, Value, Vec<Value>)> {
    let mut out = Vec::new();
    for package in all_packages() {
        for index in package.first_release..OPERATOR_RELEASES.len() {
            let mut manifests = bundle_manifests(&bundle_dir(), package, index).unwrap().into_iter().map(|(_, o)| o);
            let csv = manifests.next().unwrap();
            assert_eq!(csv["kind"], "ClusterServiceVersion");
            out.push((package, index, csv, manifests.filter(|o| o["kind"] == "CustomResourceDefinition").collect()));
        }
    }
    out
}

#[test]
fn committed_bundles_and_catalog_match_the_code() {
    check_all(&bundle_dir()).unwrap();
}

#[test]
fn newest_release_is_the_crate_version_and_every_release_adds_kubeflow_versions() {
    assert_eq!(OPERATOR_RELEASES.last().unwrap().version, env!("CARGO_PKG_VERSION"));
    assert!(OPERATOR_RELEASES.len() >= 2, "an upgrade graph needs two releases");
    for index in 1..OPERATOR_RELEASES.len() {
        for component in kubeflow_component_registry::all() {
            let shipped = |index: usize| releases::shipped_versions(&component.releases, &OPERATOR_RELEASES[index]);
            let (older, newer) = (shipped(index - 1), shipped(index));
            assert!(older.iter().all(|v| newer.contains(v)), "{}: release {index} drops a version", component.kind);
        }
    }
    let katib = kubeflow_component_registry::get(kubeflow_crds::ComponentKind::Katib);
    assert_eq!(releases::shipped_versions(&katib.releases, &OPERATOR_RELEASES[0]), ["v0.10.0"]);
    assert_eq!(releases::shipped_versions(&katib.releases, &OPERATOR_RELEASES[1]), ["v0.10.0", "v0.11.0", "v0.18.0", "v0.19.0"]);
    // A package added later starts its channel at the release that introduced it.
    assert_eq!(releases::first_release("kubeflow-profiles-operator"), 1);
    assert_eq!(releases::first_release("kubeflow-katib-operator"), 0);
}

#[test]
fn each_csv_replaces_the_previous_release_and_skips_all_earlier_ones() {
    for (package, index, csv, _) in csvs() {
        assert_eq!(csv["metadata"]["name"], format!("{}.v{}", package.name, OPERATOR_RELEASES[index].version));
        if index == package.first_release {
            assert!(csv["spec"].get("replaces").is_none());
        } else {
            assert_eq!(csv["spec"]["replaces"], format!("{}.v{}", package.name, OPERATOR_RELEASES[index - 1].version));
            assert_eq!(csv["metadata"]["annotations"]["olm.skipRange"], format!(">=0.1.0 <{}", OPERATOR_RELEASES[index].version));
        }
    }
}

#[test]
fn csv_deployment_is_restricted_with_probes_and_requests() {
    for (package, index, csv, _) in csvs() {
        let deployments = csv["spec"]["install"]["spec"]["deployments"].as_array().unwrap();
        // From the release in development on, the generic operator's renderer runs beside it.
        let with_renderer = package.renders_packages && !OPERATOR_RELEASES[index].is_released();
        let companions = (package.companions)(OPERATOR_RELEASES[index].version).len();
        assert_eq!(deployments.len(), 1 + usize::from(with_renderer) + companions, "{}", package.name);
        assert_eq!(deployments[0]["spec"]["strategy"]["rollingUpdate"]["maxSurge"], 0, "never two operators at once");
        assert_eq!(deployments[0]["name"], package.operator);
        for deployment in deployments {
            let pod = &deployment["spec"]["template"]["spec"];
            assert_eq!(pod["serviceAccountName"], deployment["name"]);
            assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
            assert_eq!(pod["securityContext"]["seccompProfile"]["type"], "RuntimeDefault");
            let container = &pod["containers"][0];
            assert_eq!(container["securityContext"]["allowPrivilegeEscalation"], false);
            assert_eq!(container["securityContext"]["capabilities"]["drop"], serde_json::json!(["ALL"]));
            assert!(container["livenessProbe"]["httpGet"].is_object() && container["readinessProbe"]["httpGet"].is_object());
            assert!(container["resources"]["requests"]["cpu"].is_string() && container["resources"]["requests"]["memory"].is_string());
        }
        let installs: Vec<(&str, bool)> = csv["spec"]["installModes"].as_array().unwrap().iter().map(|m| (m["type"].as_str().unwrap(), m["supported"] == true)).collect();
        assert!(installs.contains(&("AllNamespaces", true)) && installs.len() == 4);
    }
}

/// From the release in development on, a bundle carries a disruption budget for its Deployment
/// (OLM creates it in the install namespace): drains evict one of the two replicas at a time.
#[test]
fn the_release_in_development_bounds_disruptions_of_its_deployment() {
    let index = OPERATOR_RELEASES.len() - 1;
    for package in all_packages() {
        let manifests: Vec<Value> = bundle_manifests(&bundle_dir(), package, index).unwrap().into_iter().map(|(_, o)| o).collect();
        let deployments = manifests[0]["spec"]["install"]["spec"]["deployments"].as_array().unwrap();
        let budgets: Vec<&Value> = manifests.iter().filter(|o| o["kind"] == "PodDisruptionBudget").collect();
        assert_eq!(budgets.len(), deployments.len(), "{}", package.name);
        for (deployment, budget) in deployments.iter().zip(budgets) {
            assert_eq!(budget["apiVersion"], "policy/v1");
            assert_eq!(budget["metadata"]["name"], deployment["name"], "{}", package.name);
            assert!(budget["metadata"]["namespace"].is_null(), "{}: OLM chooses the namespace", package.name);
            assert_eq!(budget["spec"]["selector"], deployment["spec"]["selector"], "{}", package.name);
            assert_eq!(budget["spec"]["maxUnavailable"], 1, "{}", package.name);
            // The fleet agent alone runs once (kubeflow_deploy::fleet_agent_deployment says why).
            let replicas = if deployment["name"] == kubeflow_deploy::FLEET_AGENT { 1 } else { 2 };
            assert_eq!(deployment["spec"]["replicas"], replicas, "{}", package.name);
        }
    }
}

/// The generic operator's bundle installs its renderer as deploy/ does: a pod with no token, no
/// rights (its ServiceAccount is bound to no rule), no route out (a NetworkPolicy OLM creates in
/// the install namespace) and only its caller's public key; the operator may make that caller
/// Secret and read only it, and finds the renderer by its Service's short name.
#[test]
fn the_generic_operators_bundle_runs_its_renderer_without_credential_or_network() {
    use serde_json::json;
    let index = OPERATOR_RELEASES.len() - 1;
    let package = all_packages().iter().find(|p| p.name == "kubeflow-kustomize-operator").expect("the generic operator's package");
    assert!(package.renders_packages);
    // Each built-in that renders its KfDef's packages runs a renderer of its own too.
    let with_renderers: Vec<&str> = all_packages().iter().filter(|p| p.renders_packages).map(|p| p.name.as_str()).collect();
    assert_eq!(with_renderers, ["kubeflow-istio-operator", "kubeflow-dex-operator", "kubeflow-kfserving-operator", "kubeflow-katib-operator", "kubeflow-pipelines-operator", "kubeflow-kustomize-operator"]);
    let manifests: Vec<Value> = bundle_manifests(&bundle_dir(), package, index).unwrap().into_iter().map(|(_, o)| o).collect();
    let install = &manifests[0]["spec"]["install"]["spec"];
    let renderer = &install["deployments"][1];
    assert_eq!(renderer["name"], "kustomize-renderer");
    let pod = &renderer["spec"]["template"]["spec"];
    assert_eq!(pod["automountServiceAccountToken"], false);
    assert_eq!(pod["containers"][0]["args"], json!(["render-server", "--listen=0.0.0.0:8081", "--metrics-listen=0.0.0.0:8082", "--no-network-route"]));
    // The caller's public key and the scrape token: files and values, no credential.
    assert_eq!(pod["containers"][0]["env"], json!([{"name": "KFOP_RENDERER_CALLERS", "valueFrom": {"secretKeyRef": {"name": "kustomize-renderer-caller", "key": "nkey.pub"}}}, {"name": "KFOP_METRICS_TOKEN_FILE", "value": "/var/run/secrets/kubeflow-operator/metrics/token"}]));
    assert_eq!(pod["volumes"], json!([{"name": "tmp", "emptyDir": {"sizeLimit": "1024Mi"}}, {"name": "metrics-token", "secret": {"secretName": "kubeflow-metrics-token", "optional": true}}]));
    assert_eq!(install["permissions"], json!([{"serviceAccountName": "kustomize-renderer", "rules": []}]));
    assert!(!install["clusterPermissions"].as_array().unwrap().iter().any(|p| p["serviceAccountName"] == "kustomize-renderer"));
    let role = manifests.iter().find(|o| o["kind"] == "Role" && o["metadata"]["name"] == "kustomize-operator").expect("the operator's Role");
    let secret_rules: Vec<&Value> = role["rules"].as_array().unwrap().iter().filter(|r| r["resources"] == json!(["secrets"])).collect();
    assert_eq!(secret_rules, [&json!({"apiGroups": [""], "resources": ["secrets"], "verbs": ["create"]}), &json!({"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"], "resourceNames": ["kustomize-renderer-caller"]})]);
    let env = install["deployments"][0]["spec"]["template"]["spec"]["containers"][0]["env"].as_array().unwrap().clone();
    assert!(env.contains(&json!({"name": "KFOP_RENDERER_URL", "value": "http://kustomize-renderer:8081"})), "{env:?}");
    assert!(env.contains(&json!({"name": "KFOP_RENDERER_CALLER_SECRET", "value": "kustomize-renderer-caller"})), "{env:?}");
    let find = |kind: &str| manifests.iter().find(|o| o["kind"] == kind && o["metadata"]["name"] == "kustomize-renderer").unwrap_or_else(|| panic!("no {kind}"));
    let policy = find("NetworkPolicy");
    assert!(policy["metadata"]["namespace"].is_null(), "OLM chooses the namespace");
    assert_eq!(policy["spec"]["egress"], json!([]));
    assert_eq!(policy["spec"]["ingress"][0]["from"], json!([{"podSelector": {"matchLabels": {"app.kubernetes.io/name": "kustomize-operator"}}}]));
    assert_eq!(find("Service")["spec"]["selector"], json!({"app.kubernetes.io/name": "kustomize-renderer"}));
}

#[test]
fn csv_permissions_have_no_wildcards_and_cover_the_owned_resources() {
    for (package, _, csv, crds) in csvs() {
        let install = &csv["spec"]["install"]["spec"];
        let rules: Vec<&Value> = install["clusterPermissions"].as_array().into_iter().flatten().chain(install["permissions"].as_array().into_iter().flatten()).flat_map(|p| p["rules"].as_array().unwrap()).collect();
        for rule in &rules {
            for field in ["apiGroups", "resources", "verbs"] {
                assert!(!rule[field].as_array().unwrap().iter().any(|v| v == "*"), "{}: wildcard in {rule}", package.name);
            }
        }
        for crd in &crds {
            let plural = crd["spec"]["names"]["plural"].as_str().unwrap();
            let covers = |resource: &str, verb: &str| rules.iter().any(|r| r["resources"].as_array().unwrap().iter().any(|x| x == resource) && r["verbs"].as_array().unwrap().iter().any(|v| v == verb));
            assert!(covers(plural, "watch") && covers(&format!("{plural}/status"), "patch") && covers(&format!("{plural}/finalizers"), "update"), "{}: {plural}", package.name);
        }
    }
}

#[test]
fn owned_crds_have_descriptions_and_descriptors_for_their_schema() {
    for (package, _, csv, crds) in csvs() {
        let owned = csv["spec"]["customresourcedefinitions"]["owned"].as_array().unwrap();
        assert_eq!(owned.len(), crds.len(), "{}", package.name);
        for (entry, crd) in owned.iter().zip(&crds) {
            assert_eq!(entry["name"], crd["metadata"]["name"]);
            assert!(entry["description"].as_str().unwrap().len() > 20);
            let spec_fields = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"].as_object().unwrap();
            let paths: Vec<&str> = entry["specDescriptors"].as_array().unwrap().iter().map(|d| d["path"].as_str().unwrap()).collect();
            assert_eq!(paths.len(), spec_fields.len(), "{}", entry["name"]);
            let status: Vec<&str> = entry["statusDescriptors"].as_array().unwrap().iter().map(|d| d["path"].as_str().unwrap()).collect();
            assert!(status.contains(&"conditions") && status.contains(&"phase"), "{}", entry["name"]);
            for descriptor in entry["specDescriptors"].as_array().unwrap().iter().chain(entry["statusDescriptors"].as_array().unwrap()) {
                assert!(!descriptor["description"].as_str().unwrap().is_empty() && !descriptor["x-descriptors"].as_array().unwrap().is_empty());
            }
        }
    }
}

#[test]
fn management_state_descriptor_offers_exactly_the_allowed_values() {
    let package = all_packages().iter().find(|p| p.name == "kubeflow-katib-operator").unwrap();
    let csv = csv::cluster_service_version(package, OPERATOR_RELEASES.len() - 1);
    let descriptor = csv["spec"]["customresourcedefinitions"]["owned"][0]["specDescriptors"].as_array().unwrap().iter().find(|d| d["path"] == "managementState").unwrap().clone();
    assert_eq!(descriptor["displayName"], "Management State");
    let names: Vec<&str> = csv["spec"]["customresourcedefinitions"]["owned"][0]["specDescriptors"].as_array().unwrap().iter().map(|d| d["displayName"].as_str().unwrap()).collect();
    assert!(names.contains(&"CRD Removal Policy") && names.contains(&"Target Namespace"), "{names:?}");
    let values: Vec<&str> = descriptor["x-descriptors"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
    assert_eq!(values, ["urn:alm:descriptor:com.tectonic.ui:select:Managed", "urn:alm:descriptor:com.tectonic.ui:select:Removed", "urn:alm:descriptor:com.tectonic.ui:select:Unmanaged"]);
}

#[test]
fn alm_examples_use_owned_kinds_and_versions_the_release_ships() {
    for (package, index, csv, crds) in csvs() {
        let examples: Vec<Value> = serde_json::from_str(csv["metadata"]["annotations"]["alm-examples"].as_str().unwrap()).unwrap();
        assert_eq!(examples.is_empty(), crds.is_empty(), "{}: an example for each package that owns kinds", package.name);
        for example in &examples {
            let owned = crds.iter().any(|crd| {
                crd["spec"]["names"]["kind"] == example["kind"] && example["apiVersion"] == format!("{}/{}", crd["spec"]["group"].as_str().unwrap(), crd["spec"]["versions"][0]["name"].as_str().unwrap())
            });
            assert!(owned, "{}: example {} is not an owned kind", package.name, example["kind"]);
        }
        if !["kubeflow-meta-operator", "kubeflow-fleet-spoke"].contains(&package.name.as_str()) {
            // The newest version of the component each operator release ships.
            let newest = match (package.name.as_str(), index) {
                ("kubeflow-istio-operator", 0) => "1.3.1",
                ("kubeflow-istio-operator", _) => "1.28.0",
                ("kubeflow-dex-operator", 0) => "v2.22.0",
                ("kubeflow-dex-operator", _) => "v2.44.0",
                ("kubeflow-kfserving-operator", 0) => "v0.4.1",
                ("kubeflow-kfserving-operator", _) => "v0.15.2",
                ("kubeflow-katib-operator", 0) => "v0.10.0",
                ("kubeflow-katib-operator", _) => "v0.19.0",
                ("kubeflow-pipelines-operator", 0) => "1.0.4",
                ("kubeflow-pipelines-operator", _) => "2.15.0",
                ("kubeflow-profiles-operator", _) => "v1.10.0",
                // No built-in releases: the version its example spec names.
                ("kubeflow-kustomize-operator", _) => "v1.0.2",
                (other, _) => panic!("unexpected package {other}"),
            };
            assert_eq!(examples[0]["spec"]["version"], newest, "{} at release {index}", package.name);
        }
    }
}

#[test]
fn catalog_channel_links_every_release_and_bundles_carry_their_manifests_inline() {
    for package in all_packages() {
        let docs = catalog_documents(&bundle_dir(), package).unwrap();
        let channel = docs.iter().find(|d| d["schema"] == "olm.channel").unwrap();
        let entries = channel["entries"].as_array().unwrap();
        assert_eq!(entries.len(), OPERATOR_RELEASES.len() - package.first_release);
        for pair in entries.windows(2) {
            assert_eq!(pair[1]["replaces"], pair[0]["name"]);
        }
        let bundles: Vec<&Value> = docs.iter().filter(|d| d["schema"] == "olm.bundle").collect();
        for (index, bundle) in bundles.iter().enumerate().map(|(i, b)| (i + package.first_release, b)) {
            let objects: Vec<Value> = bundle["properties"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|p| p["type"] == "olm.bundle.object")
                .map(|p| serde_json::from_slice(&base64::engine::general_purpose::STANDARD.decode(p["value"]["data"].as_str().unwrap()).unwrap()).unwrap())
                .collect();
            let manifests: Vec<Value> = bundle_manifests(&bundle_dir(), package, index).unwrap().into_iter().map(|(_, o)| o).collect();
            assert_eq!(objects, manifests, "{}", bundle["name"]);
            assert_eq!(bundle["image"], "", "inline bundles must not name an image, or OLM unpacks that instead");
        }
    }
}

#[test]
fn only_the_newest_release_is_rendered_from_code_and_released_bundles_match_their_digest() {
    let (newest, released) = OPERATOR_RELEASES.split_last().unwrap();
    assert!(!newest.is_released(), "the newest release is the one in development");
    assert!(released.iter().all(OperatorRelease::is_released), "every older release is published");
    check_released(&bundle_dir()).unwrap();
}

#[test]
fn an_edited_released_bundle_is_refused() {
    let released = OPERATOR_RELEASES.iter().find(|r| r.is_released()).unwrap();
    let copy = std::env::temp_dir().join(format!("bundle-copy-{}", std::process::id()));
    for package in packages() {
        for (path, text) in read_tree(&bundle_dir(), &format!("{}/{}/", package.name, released.version)).unwrap() {
            let file = copy.join(&path);
            std::fs::create_dir_all(file.parent().unwrap()).unwrap();
            std::fs::write(&file, text).unwrap();
        }
    }
    check_released(&copy).unwrap();
    let csv = copy.join(format!("kubeflow-dex-operator/{}/manifests/kubeflow-dex-operator.clusterserviceversion.yaml", released.version));
    let edited = std::fs::read_to_string(&csv).unwrap().replace("replicas: 1", "replicas: 2");
    std::fs::write(&csv, edited).unwrap();
    let error = check_released(&copy).unwrap_err();
    std::fs::remove_dir_all(&copy).unwrap();
    assert!(matches!(error, BundleError::ReleasedBundleChanged { .. }), "{error}");
}

/// The release in development references its operator image by digest everywhere (Deployment,
/// `containerImage`, `spec.relatedImages`, the catalog's `relatedImages`), as built (images/lock.json),
/// and declares itself fit for disconnected clusters; a published release keeps what it shipped.
#[test]
fn the_release_in_development_names_its_images_by_digest_and_supports_disconnected_clusters() {
    let lock = kubeflow_deploy::image_lock();
    let index = OPERATOR_RELEASES.len() - 1;
    for package in all_packages() {
        let csv = csv::cluster_service_version(package, index);
        let image = format!("{}/{}@{}", lock.repository, package.operator, lock.images[&package.operator]);
        assert_eq!(csv["metadata"]["annotations"]["features.operators.openshift.io/disconnected"], "true", "{}", package.name);
        assert_eq!(csv["metadata"]["annotations"]["containerImage"], image.as_str());
        let companions: Vec<Value> = (package.companions)(OPERATOR_RELEASES[index].version)
            .iter()
            .map(|d| {
                let name = d["metadata"]["name"].as_str().unwrap();
                json!({"name": name, "image": format!("{}/{name}@{}", lock.repository, lock.images[name])})
            })
            .collect();
        assert_eq!(csv["spec"]["relatedImages"], json!([vec![json!({"name": "operator", "image": image})], companions].concat()));
        let containers = &csv["spec"]["install"]["spec"]["deployments"][0]["spec"]["template"]["spec"]["containers"];
        assert_eq!(containers[0]["image"], image.as_str());
        // Nothing in the CSV names an operator image by tag.
        assert!(!serde_json::to_string(&csv).unwrap().contains(&format!("{}:v", package.operator)), "{}", package.name);

        let docs = catalog_documents(&bundle_dir(), package).unwrap();
        // A package's catalog starts at the release that introduced it.
        let bundles: Vec<&Value> = docs.iter().filter(|d| d["schema"] == "olm.bundle").collect();
        let newest = index - package.first_release;
        assert_eq!(bundles[newest]["relatedImages"], csv["spec"]["relatedImages"]);
        for (position, bundle) in bundles[..newest].iter().enumerate() {
            let shipped = &bundle_manifests(&bundle_dir(), package, position + package.first_release).unwrap()[0].1;
            assert_eq!(bundle["relatedImages"], shipped["spec"]["relatedImages"], "{}", bundle["name"]);
        }
    }
}

/// A spoke's bundle runs its bus provisioner with rights in its own namespace alone (no
/// clusterPermissions, so nothing outside it) and owns no kind; its fleet agent runs with no token
/// under an account bound to nothing, configured by the spoke's ConfigMap, on the bus as itself.
#[test]
fn a_spokes_bundle_provisions_in_its_namespace_alone_and_its_agent_holds_no_credential() {
    let index = OPERATOR_RELEASES.len() - 1;
    let package = all_packages().iter().find(|p| p.name == "kubeflow-fleet-spoke").expect("the spoke's package");
    let manifests: Vec<Value> = bundle_manifests(&bundle_dir(), package, index).unwrap().into_iter().map(|(_, o)| o).collect();
    let csv = &manifests[0];
    let install = &csv["spec"]["install"]["spec"];
    assert!(install.get("clusterPermissions").is_none(), "{}", install["clusterPermissions"]);
    assert!(csv["spec"]["customresourcedefinitions"]["owned"].as_array().unwrap().is_empty());
    assert!(!manifests.iter().any(|o| o["kind"] == "CustomResourceDefinition"));
    let provisioner = &install["deployments"][0]["spec"]["template"]["spec"]["containers"][0];
    let env = provisioner["env"].as_array().unwrap();
    for (name, key) in [("FLEET_CLUSTER", "cluster"), ("FLEET_HUB_URL", "hubUrl")] {
        assert!(env.contains(&json!({"name": name, "valueFrom": {"configMapKeyRef": {"name": "fleet-spoke", "key": key}}})), "{name}: {env:?}");
    }
    assert!(env.contains(&json!({"name": "PROVISION_NATS_SERVER", "value": "true"})), "{env:?}");
    assert!(env.contains(&json!({"name": "NATS_EXPORTER_IMAGE", "value": provisioner["image"]})), "the server's metrics sidecar runs the provisioner's image: {env:?}");
    let agent = &install["deployments"][1];
    assert_eq!(agent["name"], "fleet-agent");
    let pod = &agent["spec"]["template"]["spec"];
    assert_eq!(pod["automountServiceAccountToken"], false);
    assert_eq!(pod["serviceAccountName"], "fleet-agent");
    assert_eq!(install["permissions"], json!([{"serviceAccountName": "meta-operator", "rules": []}, {"serviceAccountName": "fleet-agent", "rules": []}]));
    let role = manifests.iter().find(|o| o["kind"] == "Role").expect("the provisioner's Role");
    assert_eq!(role["rules"], serde_json::to_value([meta_operator::provision::namespaced_rules(), operator_runtime::leader::lease_rules()].concat()).unwrap());
    let agent_env = pod["containers"][0]["env"].as_array().unwrap();
    assert!(agent_env.contains(&json!({"name": "FLEET_CLUSTER", "valueFrom": {"configMapKeyRef": {"name": "fleet-spoke", "key": "cluster"}}})), "{agent_env:?}");
    let volumes = serde_json::to_string(&pod["volumes"]).unwrap();
    assert!(volumes.contains("nats-identity-fleet-agent"), "the agent connects as its own bus identity: {volumes}");
}

/// OLM lifts a CSV's `permissions` to a ClusterRole under an AllNamespaces OperatorGroup (the only
/// install mode the bundles support), so no bundle lists a rule there: each operator's rules in its
/// install namespace are a Role of the bundle, bound to its account there, which OLM creates as it
/// is (e2e `olm` checks what the account may do in another namespace).
#[test]
fn namespaced_rules_are_a_role_of_the_bundle_never_csv_permissions() {
    let index = OPERATOR_RELEASES.len() - 1;
    let mut with_role = 0;
    for package in all_packages() {
        let manifests: Vec<Value> = bundle_manifests(&bundle_dir(), package, index).unwrap().into_iter().map(|(_, o)| o).collect();
        let permissions = manifests[0]["spec"]["install"]["spec"]["permissions"].as_array().cloned().unwrap_or_default();
        assert!(permissions.iter().all(|p| p["rules"] == json!([])), "{}: {permissions:?}", package.name);
        let role = manifests.iter().find(|o| o["kind"] == "Role");
        let binding = manifests.iter().find(|o| o["kind"] == "RoleBinding");
        if package.namespaced_rules.is_empty() {
            assert!(role.is_none() && binding.is_none(), "{}", package.name);
            continue;
        }
        with_role += 1;
        let (role, binding) = (role.unwrap(), binding.unwrap());
        assert_eq!(role["rules"], serde_json::to_value(&package.namespaced_rules).unwrap(), "{}", package.name);
        assert!(role["metadata"]["namespace"].is_null() && binding["metadata"]["namespace"].is_null(), "{}: OLM chooses the namespace", package.name);
        assert_eq!(binding["roleRef"], json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role["metadata"]["name"]}));
        assert_eq!(binding["subjects"], json!([{"kind": "ServiceAccount", "name": package.operator}]), "{}: the account in the binding's namespace", package.name);
    }
    assert!(with_role >= 3, "the meta-operator, the generic operator and the spoke's provisioner have rules in their namespace");
}

/// The meta-operator's bundle carries no monitoring object (OLM would fail the whole install on a
/// cluster without the Prometheus Operator's kinds): its meta-operator makes deploy/monitoring's
/// once they are served, with rights to those two kinds in its namespace alone.
#[test]
fn the_meta_operators_bundle_makes_its_monitoring_objects_at_run_time() {
    let index = OPERATOR_RELEASES.len() - 1;
    let package = all_packages().iter().find(|p| p.name == "kubeflow-meta-operator").expect("the meta-operator's package");
    let manifests: Vec<Value> = bundle_manifests(&bundle_dir(), package, index).unwrap().into_iter().map(|(_, o)| o).collect();
    assert!(!manifests.iter().any(|o| o["apiVersion"].as_str().is_some_and(|v| v.starts_with("monitoring.coreos.com"))), "a monitoring object in the bundle");
    let container = &manifests[0]["spec"]["install"]["spec"]["deployments"][0]["spec"]["template"]["spec"]["containers"][0];
    assert!(container["env"].as_array().unwrap().contains(&json!({"name": "MONITORING_OBJECTS", "value": "true"})), "{}", container["env"]);
    let role = manifests.iter().find(|o| o["kind"] == "Role").expect("the meta-operator's Role");
    let monitoring: Vec<&Value> = role["rules"].as_array().unwrap().iter().filter(|r| r["apiGroups"] == json!(["monitoring.coreos.com"])).collect();
    assert_eq!(monitoring, [&json!({"apiGroups": ["monitoring.coreos.com"], "resources": ["podmonitors", "prometheusrules"], "verbs": ["get", "create", "patch"]})]);
    let clustered = serde_json::to_string(&manifests[0]["spec"]["install"]["spec"]["clusterPermissions"]).unwrap();
    assert!(!clustered.contains("monitoring.coreos.com"), "no cluster-wide monitoring rights: {clustered}");
}
