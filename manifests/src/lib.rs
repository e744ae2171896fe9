//! Fetching a KfDef's manifest repositories and rendering its applications the way kfctl did.
//!
//! ```text
//! spec.repos[].uri ──fetch (bounded, checked, cached)──▶ repository tree (read-only)
//! spec.applications[] ──per render: work dir, kfctl's kustomization / params.env──▶ kustomize build
//!                    ──▶ removed API versions converted ──▶ objects in kfctl's install order
//! ```
//!
//! - [`RepoCache::fetch`] downloads an http(s) `.tar.gz` (or takes a local directory or tarball,
//!   when allowed), checks the optional `sha256` pin before unpacking, refuses archive entries
//!   that escape (`..`, absolute paths, links out of the tree, devices) and bounds download size,
//!   download time, unpacked size and entry count. See [`fetch`] for the cache key.
//! - [`Renderer::render_application`] renders one application; [`Renderer::render_kfdef`] all of a
//!   KfDef. [`Mode::PerApplication`] (kfctl v1.0.x) merges `base/` with the selected
//!   `overlays/<name>/` into a generated kustomization and rewrites `params.env`
//!   ([`kfctl`] lists the rules and where they differ from kfctl); [`Mode::Stacks`] (v1.1+, a KfDef
//!   with an application named `kubeflow-apps`) builds each path as it is.
//! - kustomize runs as a subprocess with a timeout and an output limit ([`Kustomize`]).
//! - Objects in API versions Kubernetes no longer serves (kfctl-era `v1beta1` CRDs, RBAC, webhooks,
//!   `extensions/v1beta1` workloads, …) are rewritten to the versions that replaced them, each
//!   conversion listed in [`RenderedApp::conversions`]; one whose meaning would change is an
//!   error naming it ([`convert`]).
//!
//! **Which kustomize.** Two releases: v3.1.0 for kfctl-era packages, v5 for packages that use what
//! v3.1.0 refuses (`components`, `labels`, `replacements`, `sortOptions`, a `kind: Component`;
//! [`refs::check`] reports the first), unless the repository chooses (`spec.repos[].kustomize`).
//! kfctl v1.0–v1.2 linked `sigs.k8s.io/kustomize/v3` v3.1.0 and built with
//! `loader.RestrictionNone`. The project builds exactly that release from the Go module proxy
//! (`e2e/env/build.sh kustomize`) and runs `kustomize build --load_restrictor none`, so
//! kfctl-era packages — `vars` with `configurations`, `bases:`, `configMapGenerator` `env:` files,
//! `commonLabels`, files outside a kustomization's folder — render as kfctl rendered them. Newer
//! kustomize releases renamed the flag (`--load-restrictor LoadRestrictionsNone`, picked
//! automatically from `kustomize version`) and changed details such packages can depend on
//! (deprecated fields, transformer defaults), so a newer binary given through `KFOP_KUSTOMIZE`
//! works but is not guaranteed to produce what kfctl produced. Because the load restriction is
//! lifted, [`refs`] checks before every build that no kustomization reachable from the package
//! refers to a file outside the repository or to a remote base.

pub mod archive;
pub mod component_reach;
pub mod convert;
pub mod error;
pub mod example;
pub mod fetch;
pub mod kfctl;
pub mod kustomize;
pub mod order;
pub mod refs;
pub mod remote;
pub mod remote_bases;
pub mod render;
pub mod sandbox;
pub mod server_paths;
pub mod yaml;

#[cfg(feature = "fixtures")]
pub mod fixtures;

pub use convert::{Conversion, ConvertedKind, Unconvertible};
pub use error::{KustomizeError, RenderError, RepoError, RepoErrorReason};
pub use fetch::{FetchOptions, FetchedRepo, RepoCache, RepoSource};
pub use remote::RemoteRenderer;
pub use kustomize::{KUSTOMIZE_ENV, KUSTOMIZE_V5_ENV, KUSTOMIZE_V5_VERSION, KUSTOMIZE_VERSION, Kustomize};
pub use order::{INSTALL_ORDER, sort_install_order};
pub use render::{
    AppSpec, Mode, RemoteBases, RenderContext, RenderedApp, Renderer, applied_note, component_reach, component_targets, trailing_targets, objects_to_yaml, parse_objects, yaml_stream,
};

/// reqwest is built without a default rustls provider; this installs ring, the provider the rest of
/// the workspace (kube) uses, unless the process already chose one.
pub(crate) fn install_crypto_provider() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}
