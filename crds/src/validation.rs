//! What the API server checks on admission, shared by the API types: name patterns, the image
//! reference rule and the CEL bounds. A field the API server can decide is rejected there, with the
//! field's path; what needs the cluster or a release catalog becomes a condition instead.

/// A DNS-1123 label (namespaces, container names): at most 63 characters.
pub const DNS_LABEL: &str = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$";

/// A DNS-1123 subdomain (object names): at most 253 characters. The patterns used in CEL rules
/// are written without backslashes so they are also valid CEL string literals.
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

/// Longest image reference accepted (bounds the cost of the CEL rule that checks it).
pub const IMAGE_MAX_LENGTH: usize = 512;

/// Most entries an override map takes (bounds the cost of the CEL rules on its keys).
pub const OVERRIDE_MAX_ENTRIES: usize = 128;

#[cfg(test)]
mod tests {
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
