//! What the API server checks on admission, shared by the API types: name patterns, the image
//! reference rule and the CEL bounds. A field the API server can decide is rejected there, with the
//! field's path; what needs the cluster or a release catalog becomes a condition instead.

/// A DNS-1123 label (namespaces, container names): at most 63 characters.
pub const DNS_LABEL: &str = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$";

/// A DNS-1123 subdomain (object names): at most 253 characters. The patterns used in CEL rules
/// are written without backslashes so they are also valid CEL string literals.
/// A remote base mirror: `PREFIX=URI`, an http(s) URI.
pub const MIRROR: &str = r"^[^=\s]+=https?://\S+$";
/// Most remote base mirrors a spec lists.
pub const MIRRORS_MAX: usize = 16;
pub const DNS_SUBDOMAIN: &str = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*$";

/// Accepted shape of a version (`v1.2.0`, `1.2`, `v0.15.0-rc.1`). Whether the operator ships that
/// version is checked at reconcile time, where the answer can list what it supports.
pub const VERSION: &str = r"^v?[0-9]+\.[0-9]+(\.[0-9]+)?(-[0-9A-Za-z.-]+)?$";

/// Whether `version` has the shape [`VERSION`] accepts (the same rule, without a regex engine).
pub fn is_version(version: &str) -> bool {
    let (number, suffix) = version.strip_prefix('v').unwrap_or(version).split_once('-').map_or((version.strip_prefix('v').unwrap_or(version), None), |(n, s)| (n, Some(s)));
    let parts: Vec<&str> = number.split('.').collect();
    let numeric = (2..=3).contains(&parts.len()) && parts.iter().all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
    numeric && suffix.is_none_or(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-')) && version.len() <= 64
}

/// `v1.2.0`, `1.2`, `v0.15.0-rc.1` → `[1, 2, 0]`, `[1, 2, 0]`, `[0, 15, 0]`: for ordering
/// releases (a pre-release suffix aside); `None` for what [`is_version`] refuses.
pub fn version_numbers(version: &str) -> Option<[u64; 3]> {
    if !is_version(version) {
        return None;
    }
    let number = version.trim_start_matches('v').split('-').next()?;
    let mut parts = number.split('.').map(|p| p.parse::<u64>().ok());
    Some([parts.next()??, parts.next()??, parts.next().unwrap_or(Some(0))?])
}

/// A fully qualified image reference: `host[:port]/path[:tag][@sha256:digest]`, where the host
/// contains a `.` or a port, or is `localhost` (the rule container runtimes use to tell a registry
/// from the first path segment). Without a host the runtime picks the registry (Docker Hub, or a
/// CRI-O short-name alias), which defeats the point of overriding an image to a mirror.
/// Written without backslashes so the same text is a valid CEL string literal.
pub const IMAGE_WITH_REGISTRY: &str = concat!(
    "^(localhost(:[0-9]+)?|[a-zA-Z0-9]([-a-zA-Z0-9]*[a-zA-Z0-9])?(([.][a-zA-Z0-9]([-a-zA-Z0-9]*[a-zA-Z0-9])?)+(:[0-9]+)?|:[0-9]+))",
    "(/[a-z0-9]+(([._]|__|-+)[a-z0-9]+)*)+",
    "(:[a-zA-Z0-9_][a-zA-Z0-9_.-]{0,127})?",
    "(@sha256:[a-f0-9]{64})?$",
);

/// The cluster's own namespaces: no component resource installs into them.
pub const SYSTEM_NAMESPACES: [&str; 3] = ["kube-system", "kube-public", "kube-node-lease"];

/// CEL: a namespace name that is none of [`SYSTEM_NAMESPACES`].
pub const NOT_A_SYSTEM_NAMESPACE: &str = "!(self in ['kube-system', 'kube-public', 'kube-node-lease'])";

/// Names no Profile may have (a trailing `*` matches any suffix): a Profile owns its namespace,
/// named after it, so these would be namespaces the cluster, the operators or Kubeflow's shared
/// services live in. Checked at admission (CEL, [`profile_name_rule`]) and again by the profiles
/// operator. Every namespace a known release installs into:
pub const RESERVED_PROFILE_NAMES: [&str; 29] = [
    // The cluster's own (`kube-system`, `kube-public`, `kube-node-lease`), OpenShift's, and OLM's.
    "kube-*", "default", "openshift-*", "olm", "operators",
    // These operators' (deploy/, kubeflow_deploy::OPERATOR_NAMESPACE).
    "kubeflow-operators",
    // kubeflow/manifests v1.10.2 (`Namespace` objects and kustomizations' `namespace:`):
    // `knative-*` covers knative-serving and knative-eventing. (Its `kubeflow-user-example-com` is
    // the example user's Profile, not a platform namespace: free.)
    "kubeflow", "kubeflow-system", "istio-system", "auth", "oauth2-proxy", "cert-manager", "knative-*", "kserve",
    "notebook-controller-system", "tensorboard-controller-system", "profiles-system", "argo",
    // kubeflow/manifests v1.2.0 (kfctl era; the GCP stacks' `Namespace` objects).
    "cnrm-system", "stackdriver", "tekton-pipelines",
    // Where other common installs of Kubeflow's parts go: Istio's gateway namespace (also the
    // 1.2.0 AWS `istio-ingress` package), Metacontroller's and Dex's own installs.
    "istio-ingress", "metacontroller", "dex",
    // Common platform namespaces next to Kubeflow, which its packages (or an admin's) grant to
    // or route to: Prometheus's, ingress-nginx's, local-path-provisioner's, Gatekeeper's, MetalLB's.
    "monitoring", "ingress-nginx", "local-path-storage", "gatekeeper-system", "metallb-system",
];

/// The entry of [`RESERVED_PROFILE_NAMES`] that `name` matches, if any.
pub fn reserved_profile_name(name: &str) -> Option<&'static str> {
    RESERVED_PROFILE_NAMES.into_iter().find(|pattern| name_matches(name, pattern))
}

/// Whether `name` is `pattern`, or starts with it less a trailing `*`.
pub fn name_matches(name: &str, pattern: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => name.starts_with(prefix),
        None => name == pattern,
    }
}

/// A reserved-name pattern an admin may add: a DNS label, or a prefix of one followed by `*`.
pub const RESERVED_NAME_PATTERN: &str = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$|^[a-z0-9][-a-z0-9]{0,61}\*$";

/// CEL (at a Profile's root): no name [`reserved_profile_name`] matches.
pub fn profile_name_rule() -> String {
    let checks: Vec<String> = RESERVED_PROFILE_NAMES
        .iter()
        .map(|pattern| match pattern.strip_suffix('*') {
            Some(prefix) => format!("!self.metadata.name.startsWith('{prefix}')"),
            None => format!("self.metadata.name != '{pattern}'"),
        })
        .collect();
    checks.join(" && ")
}

/// Longest repository URI accepted.
pub const URI_MAX_LENGTH: usize = 2048;
/// Longest package path or overlay name accepted.
pub const PATH_MAX_LENGTH: usize = 1024;
/// Most overlays an application takes, and most parameters.
pub const OVERLAYS_MAX: usize = 32;
pub const PARAMETERS_MAX: usize = 128;
/// Longest parameter value (one `params.env` line).
pub const PARAMETER_VALUE_MAX_LENGTH: usize = 4096;

/// A package path inside a repository: relative, no whitespace (CEL then refuses `..`).
pub const PACKAGE_PATH: &str = r"^([^/\s][^\s]*)?$";
/// CEL: a path with no `..` segment (it would leave the repository).
pub const NO_PARENT_SEGMENT: &str = "!self.matches('(^|/)[.][.](/|$)')";
/// An overlay: a folder name under the package's `overlays/`.
pub const OVERLAY_NAME: &str = r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$";
/// A parameter name as `params.env` has them.
pub const PARAMETER_NAME: &str = r"^[A-Za-z0-9_.-]+$";
/// A parameter value: one line (a newline would add lines to `params.env`).
pub const ONE_LINE: &str = r"^[^
]*$";
/// A repository URI: no whitespace.
pub const NO_WHITESPACE: &str = r"^\S*$";

/// Longest image reference accepted (bounds the cost of the CEL rule that checks it).
pub const IMAGE_MAX_LENGTH: usize = 512;

/// Most entries an override map takes (bounds the cost of the CEL rules on its keys).
pub const OVERRIDE_MAX_ENTRIES: usize = 128;

#[cfg(test)]
mod tests {
    #[test]
    fn reserved_profile_names_are_the_clusters_and_kubeflows_own() {
        for reserved in ["kube-system", "kube-anything", "default", "kubeflow", "istio-system", "kubeflow-operators", "knative-serving"] {
            assert!(super::reserved_profile_name(reserved).is_some(), "{reserved}");
        }
        for free in ["alice", "team-kube", "kubeflow-user-alice", "kubeflow-user-example-com", "defaults", "knative", "openshift", "dexter", "kserve-alice"] {
            assert_eq!(super::reserved_profile_name(free), None, "{free}");
        }
        let rule = super::profile_name_rule();
        assert!(rule.starts_with("!self.metadata.name.startsWith('kube-') && self.metadata.name != 'default' && "), "{rule}");
        assert!(rule.contains("!self.metadata.name.startsWith('knative-')"), "{rule}");
        assert!(rule.contains("self.metadata.name != 'kubeflow-system'"), "{rule}");
    }

    /// Every namespace a known release installs into, listed here on its own (not read from the
    /// constant), so dropping one from [`super::RESERVED_PROFILE_NAMES`] fails.
    #[test]
    fn every_namespace_a_known_release_installs_into_is_reserved() {
        let namespaces = [
            // kubeflow/manifests v1.10.2: `Namespace` objects and kustomizations' `namespace:`.
            "kubeflow", "kubeflow-system", "istio-system", "auth", "oauth2-proxy", "cert-manager", "knative-serving", "knative-eventing", "kserve",
            "notebook-controller-system", "tensorboard-controller-system", "profiles-system", "argo", "kube-system",
            // v1.2.0.
            "cnrm-system", "stackdriver", "tekton-pipelines",
            // These operators, OLM, OpenShift.
            "kubeflow-operators", "olm", "operators", "openshift-operators", "default", "kube-public", "kube-node-lease",
            // Common installs of Kubeflow's parts.
            "istio-ingress", "metacontroller", "dex",
            // Common platform namespaces.
            "monitoring", "ingress-nginx", "local-path-storage", "gatekeeper-system", "metallb-system",
        ];
        for namespace in namespaces {
            assert!(super::reserved_profile_name(namespace).is_some(), "{namespace} is not reserved");
        }
    }

    #[test]
    fn versions_order_by_their_numbers() {
        assert_eq!(super::version_numbers("v1.28.0"), Some([1, 28, 0]));
        assert_eq!(super::version_numbers("1.10"), Some([1, 10, 0]));
        assert_eq!(super::version_numbers("v0.15.0-rc.1"), Some([0, 15, 0]));
        assert!(super::version_numbers("1.9.6") < super::version_numbers("1.10.0"), "numbers, not text");
        assert_eq!(super::version_numbers("master"), None);
    }

    #[test]
    fn is_version_accepts_what_the_version_pattern_accepts() {
        for good in ["v1.2.0", "1.2", "v0.15.0-rc.1", "v1.3-branch", "10.20.30"] {
            assert!(super::is_version(good), "{good}");
        }
        for bad in ["", "master", "v1", "v1.2.3.4", "v1..2", "v1.2-", "v1.2.0+build", "vv1.2", &format!("v1.2.0-{}", "a".repeat(60))] {
            assert!(!super::is_version(bad), "{bad}");
        }
    }
}
