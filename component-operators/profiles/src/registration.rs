//! One Profile per registering user, across every replica of the KFAM API: before a user's
//! Profile is created, the replica claims Lease `kfam-registration-<hash of the user>` in the
//! operators' namespace. A create, or a replace conditioned on the resourceVersion it read, is
//! what the API server lets only one request win; a list of Profiles is not (two replicas can
//! both find none). The Lease names the Profile (`spec.holderIdentity`): while that Profile
//! exists and is the user's, the user has registered; while it does not exist yet, the claim is
//! a registration in progress for [`CLAIM_SECONDS`], after which (the create failed) it is
//! stale; once the Profile was made (`spec.renewTime`) and is deleted, it is stale at once. The
//! next registration takes a stale claim over.

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Client, ResourceExt};
use sha2::{Digest, Sha256};

/// How long a claim whose Profile does not exist yet holds: far longer than a create takes.
pub const CLAIM_SECONDS: i32 = 60;
/// Annotation naming the user a claim is for (the Lease's name is a hash of it).
pub const USER_ANNOTATION: &str = "profiles.kubeflow.org/registrant";
const FIELD_MANAGER: &str = "profiles-operator-kfam";

/// The name of `user`'s claim: a hash, since a user name is no object name.
pub fn claim_name(user: &str) -> String {
    let hash: String = Sha256::digest(user.as_bytes()).iter().take(16).map(|b| format!("{b:02x}")).collect();
    format!("kfam-registration-{hash}")
}

/// What the live claim (if any) means for a new registration of its user.
#[derive(Debug, PartialEq)]
pub enum Decision {
    /// No claim: create one.
    Create,
    /// A stale claim (its Profile is gone or not the user's, and its time is up): replace it,
    /// conditioned on this resourceVersion.
    Replace(String),
    /// The user has registered this Profile.
    Registered(String),
    /// A registration of the user's (this Profile) started less than [`CLAIM_SECONDS`] ago.
    InProgress(String),
}

/// The pure rule: `claim` as read, whether the Profile it names is the user's and alive, and now.
pub fn decide(claim: Option<&Lease>, named_profile_is_theirs: bool, now: Timestamp) -> Decision {
    let Some(claim) = claim else { return Decision::Create };
    let spec = claim.spec.clone().unwrap_or_default();
    let profile = spec.holder_identity.unwrap_or_default();
    if named_profile_is_theirs {
        return Decision::Registered(profile);
    }
    // A claim whose Profile was made (`renewTime` set then) and is gone since: the user deleted it.
    let made = spec.renew_time.is_some();
    let duration = i64::from(spec.lease_duration_seconds.unwrap_or(CLAIM_SECONDS).clamp(0, CLAIM_SECONDS));
    let fresh = !made && spec.acquire_time.is_some_and(|MicroTime(at)| now.duration_since(at) < SignedDuration::from_secs(duration));
    if fresh { Decision::InProgress(profile) } else { Decision::Replace(claim.resource_version().unwrap_or_default()) }
}

/// A claim of `user` for Profile `profile`, taken at `now`.
pub fn claim(namespace: &str, user: &str, profile: &str, now: Timestamp, resource_version: Option<String>) -> Lease {
    Lease {
        metadata: ObjectMeta {
            name: Some(claim_name(user)),
            namespace: Some(namespace.into()),
            annotations: Some([(USER_ANNOTATION.to_string(), user.to_string())].into()),
            resource_version,
            ..Default::default()
        },
        spec: Some(LeaseSpec { holder_identity: Some(profile.into()), acquire_time: Some(MicroTime(now)), lease_duration_seconds: Some(CLAIM_SECONDS), ..Default::default() }),
    }
}

/// Why a claim was not taken.
#[derive(Debug, thiserror::Error)]
pub enum ClaimError {
    #[error("{user} already owns Profile {profile}: registration makes one Profile per user; ask a cluster admin for another")]
    Registered { user: String, profile: String },
    #[error("a registration of {user} (Profile {profile}) is in progress: registration makes one Profile per user; try again in {CLAIM_SECONDS} seconds if it does not appear")]
    InProgress { user: String, profile: String },
    #[error("cannot claim the registration of {user}: {source}")]
    Api { user: String, source: kube::Error },
}

/// A claim this request holds: released if the Profile is not made after all.
pub struct Claimed {
    api: Api<Lease>,
    lease: Lease,
}

impl Claimed {
    /// Records that the Profile was made (`renewTime`), so once it is deleted the user may
    /// register again at once. Best effort: a claim left unconfirmed goes stale after
    /// [`CLAIM_SECONDS`] all the same.
    pub async fn confirm(self) {
        self.write_back("record a registration as made", |spec| spec.renew_time = Some(MicroTime(Timestamp::now()))).await;
    }

    /// Gives the claim up (the Profile was not created), so the user need not wait for it to go
    /// stale: the claim is written back without its time and Profile (stale at once).
    pub async fn release(self) {
        self.write_back("release a registration claim", |spec| *spec = LeaseSpec { lease_duration_seconds: Some(CLAIM_SECONDS), ..Default::default() }).await;
    }

    /// Writes the claim back edited: a replace (which the operator may do where it holds its
    /// Lease, no delete right needed), and only if no other request took it since (its
    /// resourceVersion).
    async fn write_back(self, what: &str, edit: impl FnOnce(&mut LeaseSpec)) {
        let Self { api, mut lease } = self;
        let name = lease.name_any();
        edit(lease.spec.get_or_insert_with(Default::default));
        if let Err(e) = api.replace(&name, &write_params(), &lease).await {
            tracing::warn!(claim = %name, error = %e, "cannot {what}; the claim goes stale in {CLAIM_SECONDS} s");
        }
    }
}

fn write_params() -> PostParams {
    PostParams { field_manager: Some(FIELD_MANAGER.into()), ..Default::default() }
}

/// Claims `user`'s registration for `profile` in `namespace`. `is_theirs(name)` says whether
/// Profile `name` exists, is not being deleted and is owned by `user`.
pub async fn take<F, Fut>(client: &Client, namespace: &str, user: &str, profile: &str, is_theirs: F) -> Result<Claimed, ClaimError>
where
    F: FnOnce(String) -> Fut,
    Fut: std::future::Future<Output = Result<bool, kube::Error>>,
{
    let api: Api<Lease> = Api::namespaced(client.clone(), namespace);
    let api_error = |source| ClaimError::Api { user: user.into(), source };
    let name = claim_name(user);
    let live = api.get_opt(&name).await.map_err(api_error)?;
    let named = live.as_ref().and_then(|l| l.spec.as_ref()?.holder_identity.clone()).filter(|p| !p.is_empty());
    let theirs = match named {
        Some(named) => is_theirs(named).await.map_err(api_error)?,
        None => false,
    };
    let now = Timestamp::now();
    let params = write_params();
    let written = match decide(live.as_ref(), theirs, now) {
        Decision::Registered(profile) => return Err(ClaimError::Registered { user: user.into(), profile }),
        Decision::InProgress(profile) => return Err(ClaimError::InProgress { user: user.into(), profile }),
        Decision::Create => api.create(&params, &claim(namespace, user, profile, now, None)).await,
        Decision::Replace(version) => api.replace(&name, &params, &claim(namespace, user, profile, now, Some(version))).await,
    };
    match written {
        Ok(lease) => Ok(Claimed { api, lease }),
        // Another request created or replaced it first: a registration of this user is under way.
        Err(kube::Error::Api(status)) if status.code == 409 => Err(ClaimError::InProgress { user: user.into(), profile: "another".into() }),
        Err(e) => Err(api_error(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + seconds).unwrap()
    }

    fn live(profile: &str, taken: i64) -> Lease {
        let mut lease = claim("ops", "ann@example.com", profile, at(taken), None);
        lease.metadata.resource_version = Some("7".into());
        lease
    }

    #[test]
    fn claims_are_named_by_a_hash_of_the_exact_user() {
        let name = claim_name("ann@example.com");
        assert!(name.starts_with("kfam-registration-") && name.len() == "kfam-registration-".len() + 32, "{name}");
        assert_ne!(name, claim_name("Ann@example.com"));
        assert_eq!(name, claim_name("ann@example.com"));
        assert!(claim_name(&"x".repeat(10_000)).len() <= 63);
    }

    #[test]
    fn a_claim_is_taken_once_and_over_only_when_stale() {
        assert_eq!(decide(None, false, at(0)), Decision::Create);
        // The Profile it names is the user's: registered, however old the claim.
        assert_eq!(decide(Some(&live("ann", 0)), true, at(100_000)), Decision::Registered("ann".into()));
        // Not made yet: in progress for CLAIM_SECONDS, then stale.
        assert_eq!(decide(Some(&live("ann", 0)), false, at(i64::from(CLAIM_SECONDS) - 1)), Decision::InProgress("ann".into()));
        assert_eq!(decide(Some(&live("ann", 0)), false, at(i64::from(CLAIM_SECONDS))), Decision::Replace("7".into()));
        // A claim's own duration never holds longer than CLAIM_SECONDS, and one without a time is stale.
        let mut long = live("ann", 0);
        long.spec.as_mut().unwrap().lease_duration_seconds = Some(i32::MAX);
        assert_eq!(decide(Some(&long), false, at(i64::from(CLAIM_SECONDS))), Decision::Replace("7".into()));
        // Made, then deleted: stale at once.
        let mut made = live("ann", 0);
        made.spec.as_mut().unwrap().renew_time = Some(MicroTime(at(1)));
        assert_eq!(decide(Some(&made), false, at(2)), Decision::Replace("7".into()));
        assert_eq!(decide(Some(&made), true, at(2)), Decision::Registered("ann".into()));
        let mut timeless = live("ann", 0);
        timeless.spec.as_mut().unwrap().acquire_time = None;
        assert_eq!(decide(Some(&timeless), false, at(0)), Decision::Replace("7".into()));
    }
}
