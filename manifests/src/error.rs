//! Typed errors: each says which repository, application, file or field failed and why.

use std::net::IpAddr;
use std::path::PathBuf;

/// Fetching one repository of `spec.repos` failed.
#[derive(Debug, thiserror::Error, Clone, PartialEq)]
#[error("repository {repo:?} ({uri}): {reason}")]
pub struct RepoError {
    /// `spec.repos[].name`.
    pub repo: String,
    /// `spec.repos[].uri` as written.
    pub uri: String,
    pub reason: RepoErrorReason,
}

/// Why a repository could not be fetched or unpacked.
#[derive(Debug, thiserror::Error, Clone, PartialEq)]
pub enum RepoErrorReason {
    #[error("unsupported URI: {0}")]
    UnsupportedUri(String),
    #[error("local paths and file:// URIs are not allowed here (only http(s) archives)")]
    LocalNotAllowed,
    #[error("local path {0} does not exist")]
    LocalNotFound(PathBuf),
    #[error("invalid sha256 pin {0:?}: expected 64 lowercase hex digits")]
    InvalidPin(String),
    #[error("HTTP status {0}")]
    HttpStatus(u16),
    #[error("download failed: {0}")]
    Transport(String),
    #[error("download exceeds the limit of {limit} bytes")]
    DownloadTooLarge { limit: u64 },
    #[error("download did not finish within {secs} s")]
    Timeout { secs: u64 },
    #[error("sha256 mismatch: spec.repos[].sha256 is {expected}, the archive has {actual}")]
    Sha256Mismatch { expected: String, actual: String },
    #[error("not a gzip-compressed tar archive: {0}")]
    BadArchive(String),
    #[error("archive entry {entry:?} rejected: {reason}")]
    UnsafeEntry { entry: String, reason: String },
    #[error("archive unpacks to more than {limit} bytes")]
    UnpackedTooLarge { limit: u64 },
    #[error("archive has more than {limit} entries")]
    TooManyEntries { limit: u64 },
    #[error("refused: {0}")]
    Fenced(Box<FenceRefusal>),
    #[error("more than {limit} redirects")]
    TooManyRedirects { limit: usize },
    #[error("git: {0}")]
    Git(String),
    #[error("{0}")]
    Io(String),
}

/// A destination the address fence ([`crate::fetch::fence`]) refused: where, which address, which
/// rule.
#[derive(Debug, thiserror::Error, Clone, PartialEq)]
#[error("{}", self.describe())]
pub struct FenceRefusal {
    /// Set when a redirect led there: the URL redirected to.
    pub redirected_to: Option<String>,
    /// The host as the URL names it (a name or an address).
    pub host: String,
    /// The refused address; `None` when the name itself is refused (a cloud metadata name).
    pub address: Option<IpAddr>,
    /// The rule, e.g. `link-local (169.254.0.0/16, ...)`.
    pub rule: String,
}

impl FenceRefusal {
    fn describe(&self) -> String {
        let redirect = match &self.redirected_to {
            Some(url) => format!("redirected to {url}: "),
            None => String::new(),
        };
        let literal = self.host.trim_matches(['[', ']']).parse::<IpAddr>().ok();
        let what = match self.address {
            Some(a) if literal.is_some() => format!("{a} is"),
            Some(a) => format!("{} resolves to {a}, which is", self.host),
            None => format!("{} is", self.host),
        };
        // The name is what to allow when one is named (its addresses may change), else the address.
        let allow = match literal {
            Some(a) => a.to_string(),
            None => self.host.clone(),
        };
        format!(
            "{redirect}{what} {}; repositories are fetched from public addresses only \
             (to allow this destination, start the generic operator with --allow-fetch-from {allow}, \
             or set KFOP_ALLOW_FETCH_FROM)",
            self.rule
        )
    }
}

/// Running kustomize failed. Serialised as the renderer's answer ([`crate::remote`]).
#[derive(Debug, thiserror::Error, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum KustomizeError {
    #[error("kustomize binary not found at {path} ({hint})")]
    NotFound { path: PathBuf, hint: String },
    #[error("could not run kustomize: {0}")]
    Spawn(String),
    #[error("kustomize cannot be run isolated: {0}")]
    Isolation(String),
    #[error("kustomize build did not finish within {secs} s")]
    Timeout { secs: u64 },
    #[error("kustomize output exceeds the limit of {limit} bytes")]
    OutputTooLarge { limit: u64 },
    #[error("kustomize build failed ({status}): {stderr}")]
    Failed { status: String, stderr: String },
    /// The renderer ([`crate::remote`]) could not be reached or refused the request.
    #[error("the renderer at {url}: {error}")]
    Renderer { url: String, error: String },
}

/// Rendering one application failed.
#[derive(Debug, thiserror::Error, Clone, PartialEq)]
pub enum RenderError {
    #[error("application {app:?}: kustomizeConfig.repoRef is missing")]
    NoRepoRef { app: String },
    #[error("application {app:?}: needs kustomize {release} ({why}), which this renderer does not have: {error}")]
    NoKustomize {
        app: String,
        release: kubeflow_crds::kfdef::KustomizeRelease,
        why: String,
        error: String,
    },
    #[error("application {app:?}: {source}")]
    Unconvertible {
        app: String,
        source: crate::convert::Unconvertible,
    },
    #[error("application {app:?}: repoRef.name {repo:?} is not in spec.repos (known: {known:?})")]
    UnknownRepo {
        app: String,
        repo: String,
        known: Vec<String>,
    },
    #[error(transparent)]
    Repo(#[from] RepoError),
    #[error("application {app:?}: repoRef.path {path:?} is invalid: {reason}")]
    InvalidPath {
        app: String,
        path: String,
        reason: String,
    },
    #[error("application {app:?}: repoRef.path {path:?} does not exist in the repository")]
    PathNotFound { app: String, path: String },
    #[error(
        "application {app:?}: repoRef.path {path:?} has no kustomization.yaml (nor base/kustomization.yaml)"
    )]
    NotAPackage { app: String, path: String },
    #[error("application {app:?}: overlay {overlay:?} does not exist (available: {available:?})")]
    MissingOverlay {
        app: String,
        overlay: String,
        available: Vec<String>,
    },
    #[error(
        "application {app:?}: overlays {overlays:?} need a package with base/ and overlays/<name>/"
    )]
    OverlaysWithoutBase { app: String, overlays: Vec<String> },
    #[error("application {app:?}: parameter {parameter:?} is invalid: {reason}")]
    InvalidParameter {
        app: String,
        parameter: String,
        reason: String,
    },
    /// `reference` is empty when the kustomization file itself is refused (it cannot be read or
    /// parsed, so what it refers to cannot be checked).
    #[error("application {app:?}: {}", forbidden(file, reference, reason))]
    ForbiddenReference {
        app: String,
        file: String,
        reference: String,
        reason: String,
    },
    #[error("application {app:?}: {source}")]
    Kustomize { app: String, source: KustomizeError },
    #[error("application {app:?}: kustomize output is not a list of Kubernetes objects: {reason}")]
    Output { app: String, reason: String },
    /// A remote base that is not fetched: unpinned, of a form not fetched, or its download failed.
    #[error("application {app:?}: remote base {reference:?}: {reason}")]
    RemoteBase { app: String, reference: String, reason: String },
    /// A `componentOf` that cannot be applied (see [`crate::render::component_targets`]).
    #[error("application {app:?}: {reason}")]
    Component { app: String, reason: String },
    #[error("application {app:?}: {context}: {error}")]
    Io {
        app: String,
        context: String,
        error: String,
    },
}

fn forbidden(file: &str, reference: &str, reason: &str) -> String {
    if reference.is_empty() {
        format!("{file} is refused: {reason}")
    } else {
        format!("{file} refers to {reference:?}, which is not allowed: {reason}")
    }
}

impl RenderError {
    /// The application the error is about, when it is about one.
    pub fn application(&self) -> Option<&str> {
        match self {
            RenderError::Repo(_) => None,
            RenderError::NoRepoRef { app }
            | RenderError::Unconvertible { app, .. }
            | RenderError::NoKustomize { app, .. }
            | RenderError::UnknownRepo { app, .. }
            | RenderError::InvalidPath { app, .. }
            | RenderError::PathNotFound { app, .. }
            | RenderError::NotAPackage { app, .. }
            | RenderError::MissingOverlay { app, .. }
            | RenderError::OverlaysWithoutBase { app, .. }
            | RenderError::InvalidParameter { app, .. }
            | RenderError::ForbiddenReference { app, .. }
            | RenderError::Kustomize { app, .. }
            | RenderError::Output { app, .. }
            | RenderError::Component { app, .. }
            | RenderError::RemoteBase { app, .. }
            | RenderError::Io { app, .. } => Some(app),
        }
    }

    /// Whether the same render may succeed later unchanged: the renderer was unreachable, busy or
    /// restarting ([`KustomizeError::Renderer`]). Everything else is the package's or the spec's.
    pub fn is_transient(&self) -> bool {
        matches!(self, RenderError::Kustomize { source: KustomizeError::Renderer { .. }, .. })
    }
}
