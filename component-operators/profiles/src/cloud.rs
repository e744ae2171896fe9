//! The cloud side of the credential plugins: granting a profile's `default-editor` the cloud
//! identity its plugin names (GCP: a Workload Identity IAM binding; AWS: the role's trust policy)
//! and revoking it when the Profile goes. The Kubernetes side (service-account annotations) is in
//! [`crate::tenant`]. No cloud client ships here: [`Unconfigured`] records what would be granted,
//! and a platform build plugs a real [`CloudIdentity`] in.

use std::future::Future;
use std::pin::Pin;

use component_framework::api::profile::{Plugin, Profile};

pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

pub trait CloudIdentity: Send + Sync + 'static {
    /// Grants what `plugin` asks for to the profile's `default-editor`; idempotent.
    fn grant<'a>(&'a self, profile: &'a Profile, plugin: &'a Plugin) -> BoxFuture<'a, Result<(), String>>;
    /// Revokes it when the Profile is deleted; idempotent.
    fn revoke<'a>(&'a self, profile: &'a Profile, plugin: &'a Plugin) -> BoxFuture<'a, Result<(), String>>;
}

/// No cloud credentials configured: only the annotations are written; grants are logged.
pub struct Unconfigured;

impl CloudIdentity for Unconfigured {
    fn grant<'a>(&'a self, profile: &'a Profile, plugin: &'a Plugin) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(async move {
            tracing::info!(profile = %kube::ResourceExt::name_any(profile), plugin = %plugin.kind, "no cloud identity provider configured; only the service-account annotation is set");
            Ok(())
        })
    }
    fn revoke<'a>(&'a self, _profile: &'a Profile, _plugin: &'a Plugin) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(async { Ok(()) })
    }
}
