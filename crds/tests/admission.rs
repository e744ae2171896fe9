//! What the generated schemas let the API server reject: the constraints and CEL rules sit at the
//! paths the README's "Admission" section names, the image rule accepts what registries accept,
//! and every CEL rule is written so the API server can compile and cost it.

use kube::CustomResourceExt;
use kubeflow_crds::validation::{DNS_LABEL, DNS_SUBDOMAIN, IMAGE_WITH_REGISTRY};
use kubeflow_crds::{Dex, Istio, Katib, KfDef, KfUpgrade, Pipelines, ProfileController, crdgen};
use serde_json::Value;

/// The `openAPIV3Schema` of a CRD's first version.
fn schema<K: CustomResourceExt>() -> Value {
    let crd = serde_json::to_value(K::crd()).unwrap();
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"].clone()
}

/// The schema at a dotted path of property names (`spec.overrides.images`); `[]` steps into
/// list items, `{}` into map values.
fn at(schema: &Value, path: &str) -> Value {
    let mut node = schema;
    for step in path.split('.') {
        node = match step {
            "[]" => &node["items"],
            "{}" => &node["additionalProperties"],
            name => &node["properties"][name],
        };
        assert!(!node.is_null(), "no schema at {path} (stopped at {step})");
    }
    node.clone()
}

fn rules(node: &Value) -> Vec<(String, String, Option<String>)> {
    node["x-kubernetes-validations"]
        .as_array()
        .map(|rules| {
            rules
                .iter()
                .map(|r| (r["rule"].as_str().unwrap().to_string(), r["message"].as_str().unwrap().to_string(), r["fieldPath"].as_str().map(String::from)))
                .collect()
        })
        .unwrap_or_default()
}

fn list_map_keys(node: &Value) -> Vec<String> {
    assert_eq!(node["x-kubernetes-list-type"], "map", "{node}");
    node["x-kubernetes-list-map-keys"].as_array().unwrap().iter().map(|k| k.as_str().unwrap().to_string()).collect()
}

#[test]
fn lists_keyed_by_name_reject_duplicates() {
    let kfdef = schema::<KfDef>();
    assert_eq!(list_map_keys(&at(&kfdef, "spec.applications")), ["name"]);
    assert_eq!(list_map_keys(&at(&kfdef, "spec.repos")), ["name"]);
    assert_eq!(list_map_keys(&at(&kfdef, "spec.secrets")), ["name"]);
    assert_eq!(list_map_keys(&at(&kfdef, "spec.applications.[].kustomizeConfig.parameters")), ["name"]);
    let katib = schema::<Katib>();
    assert_eq!(list_map_keys(&at(&katib, "spec.overrides.parameters")), ["name"]);
    assert_eq!(list_map_keys(&at(&katib, "spec.sources")), ["application"]);
    assert_eq!(list_map_keys(&at(&katib, "spec.sources.[].parameters")), ["name"]);
    assert_eq!(list_map_keys(&at(&schema::<Dex>(), "spec.connectors")), ["id"]);
    assert_eq!(list_map_keys(&at(&schema::<KfUpgrade>(), "spec.components")), ["component"]);
    let profiles = schema::<ProfileController>();
    for set in ["spec.trustedPrincipals", "spec.clusterAdmins", "spec.networkPolicies.serverlessNamespaces"] {
        assert_eq!(at(&profiles, set)["x-kubernetes-list-type"], "set", "{set}");
    }
}

#[test]
fn names_are_dns_names_with_their_length_bound() {
    let katib = schema::<Katib>();
    let kfdef = schema::<KfDef>();
    let upgrade = schema::<KfUpgrade>();
    let profiles = schema::<ProfileController>();
    for (schema, path, pattern, max) in [
        (&katib, "spec.targetNamespace", DNS_LABEL, 63),
        (&katib, "spec.sources.[].application", DNS_SUBDOMAIN, 253),
        (&katib, "spec.database.secretRef.name", DNS_SUBDOMAIN, 253),
        (&kfdef, "spec.applications.[].name", DNS_SUBDOMAIN, 253),
        (&kfdef, "spec.repos.[].name", DNS_SUBDOMAIN, 253),
        (&upgrade, "spec.currentKfDef.name", DNS_SUBDOMAIN, 253),
        (&upgrade, "spec.newKfDef.name", DNS_SUBDOMAIN, 253),
        (&profiles, "spec.networkPolicies.ingressGatewayNamespace", DNS_LABEL, 63),
        (&profiles, "spec.networkPolicies.serverlessNamespaces.[]", DNS_LABEL, 63),
        (&profiles, "spec.serviceMesh.namespace", DNS_LABEL, 63),
    ] {
        let node = at(schema, path);
        assert_eq!(node["pattern"], pattern, "{path}");
        assert_eq!(node["maxLength"], max, "{path}");
    }
    assert_eq!(at(&upgrade, "spec.newKfDef.version")["pattern"], kubeflow_crds::validation::VERSION);
    assert_eq!(at(&katib, "spec.version")["pattern"], kubeflow_crds::validation::VERSION);
}

#[test]
fn image_overrides_must_name_a_registry_and_keys_must_be_container_names() {
    for schema in [schema::<Katib>(), schema::<Istio>(), schema::<Pipelines>(), schema::<ProfileController>()] {
        let images = at(&schema, "spec.overrides.images");
        let value_rules = rules(&at(&schema, "spec.overrides.images.{}"));
        assert_eq!(value_rules.len(), 1);
        assert_eq!(value_rules[0].0, format!("self.matches('{IMAGE_WITH_REGISTRY}')"));
        assert!(value_rules[0].1.contains("registry host"), "{}", value_rules[0].1);
        assert!(images["additionalProperties"]["maxLength"].is_u64() && images["maxProperties"].is_u64(), "{images}");
        assert!(rules(&images)[0].0.contains(DNS_LABEL), "{images}");
        let replicas = at(&schema, "spec.overrides.replicas");
        assert_eq!(replicas["additionalProperties"]["maximum"], i32::MAX as f64, "replicas decode as i32");
        assert!(rules(&replicas)[0].0.contains(DNS_SUBDOMAIN));
    }
}

#[test]
fn the_image_rule_accepts_qualified_references_only() {
    let image = regex::Regex::new(IMAGE_WITH_REGISTRY).unwrap();
    for ok in [
        "registry.local/katib-ui:patched",
        "gcr.io/kubeflow-images-public/katib/v1beta1/katib-controller:v0.11.0",
        "docker.io/library/busybox",
        "localhost/x",
        "localhost:5000/team/app:1.0",
        "mirror:5000/istio/proxyv2:1.9.6",
        "quay.io/org/app@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
        "quay.io/org/app:v1@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
        "my-registry.example.com:443/a__b/c-d.e:tag_1.2-x",
    ] {
        assert!(image.is_match(ok), "{ok} should be accepted");
    }
    for bad in [
        "busybox",
        "busybox:1.36",
        "library/busybox:1.36",
        "kubeflow/katib-ui:v1",
        "registry.local",
        "registry.local/",
        "registry.local/Upper:v1",
        "registry.local/app:",
        "registry.local/app@sha256:short",
        "https://registry.local/app:v1",
        " registry.local/app:v1",
        "",
    ] {
        assert!(!image.is_match(bad), "{bad:?} should be rejected");
    }
}

#[test]
fn impossible_combinations_are_cel_rules_naming_the_field() {
    let upgrade = rules(&at(&schema::<KfUpgrade>(), "spec"));
    let paths: Vec<Option<&str>> = upgrade.iter().map(|r| r.2.as_deref()).collect();
    assert_eq!(paths, [None, Some(".approvedWaves"), Some(".approved"), Some(".newKfDef.name"), Some(".onlyListed"), Some(".newKfDef.version")]);
    // The spec is immutable but for the approvals, which cannot be withdrawn.
    assert!(upgrade[0].0.contains("self.currentKfDef == oldSelf.currentKfDef") && !upgrade[0].0.contains("self.approved"), "{}", upgrade[0].0);
    assert!(upgrade[0].0.contains("self.waves == oldSelf.waves"), "{}", upgrade[0].0);
    assert!(upgrade[1].0.contains("oldSelf.approvedWaves.all(w, w in self.approvedWaves)") && upgrade[1].1.contains("cannot lose a wave"), "{:?}", upgrade[1]);
    assert!(upgrade[2].0.contains("oldSelf.approved") && upgrade[2].1.contains("cannot be withdrawn"), "{:?}", upgrade[2]);
    let gateway = rules(&at(&schema::<Istio>(), "spec.gateway"));
    assert_eq!(gateway[0].2.as_deref(), Some(".httpsPort"));
    assert!(gateway[0].0.contains("self.httpPort != self.httpsPort"));
}

/// Rules on strings are written without backslashes, because `\.` inside a CEL string literal is
/// an invalid escape and the API server would refuse the whole CRD.
#[test]
fn cel_rules_have_no_backslashes_and_every_map_they_iterate_is_bounded() {
    fn walk(node: &Value, path: &str, seen: &mut usize) {
        for (rule, message, _) in rules(node) {
            *seen += 1;
            assert!(!rule.contains('\\'), "{path}: {rule}");
            assert!(!message.is_empty(), "{path}");
            if rule.contains("self.all(") {
                assert!(node["maxProperties"].is_u64() || node["maxItems"].is_u64(), "{path}: {rule} iterates an unbounded collection");
            }
        }
        match node {
            Value::Object(map) => map.iter().for_each(|(k, v)| walk(v, &format!("{path}.{k}"), seen)),
            Value::Array(items) => items.iter().for_each(|v| walk(v, path, seen)),
            _ => {}
        }
    }
    let mut seen = 0;
    for crd in crdgen::all_crds() {
        walk(&serde_json::to_value(&crd).unwrap(), &crd.metadata.name.unwrap(), &mut seen);
    }
    assert!(seen > 20, "only {seen} rules found");
}
