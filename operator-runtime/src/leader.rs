//! Leader election between the replicas of one operator, on a `coordination.k8s.io/v1` Lease
//! (kube-lease-manager). Only the leader watches, reconciles and talks to the bus; the others
//! serve their health endpoint and wait. A leader that loses the Lease exits at once, so a
//! process that may no longer lead never writes again (the restarted process stands by).

use std::time::Duration;

use kube::Client;
use kube_lease_manager::{LeaseCreateMode, LeaseManager, LeaseParams};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::metrics::Metrics;

/// How the replicas of an operator elect their leader.
#[derive(clap::Args, Debug, Clone)]
pub struct LeaderElection {
    /// Namespace of the Lease the replicas elect their leader on (the operator's own); no election
    /// when unset, for a single replica or a process run by hand.
    #[arg(long = "leader-election-namespace", env = "LEADER_ELECTION_NAMESPACE")]
    pub lease_namespace: Option<String>,
    /// This replica's name in the Lease (the pod's name; the host's when unset), to which each
    /// process adds its own suffix.
    #[arg(long = "leader-election-identity", env = "POD_NAME")]
    pub holder_identity: Option<String>,
    /// Seconds a leader that stops renewing keeps the Lease: how long a standby waits before it
    /// takes over from a replica that died without releasing it.
    #[arg(long = "lease-duration-seconds", env = "LEASE_DURATION_SECONDS", default_value_t = 15, value_parser = clap::value_parser!(u64).range(3..=300))]
    pub lease_duration_seconds: u64,
}

/// What a replica needs in the Lease's namespace to take part.
pub fn lease_rules() -> Vec<k8s_openapi::api::rbac::v1::PolicyRule> {
    vec![k8s_openapi::api::rbac::v1::PolicyRule {
        api_groups: Some(vec!["coordination.k8s.io".into()]),
        resources: Some(vec!["leases".into()]),
        verbs: ["get", "create", "patch", "update"].map(String::from).to_vec(),
        ..Default::default()
    }]
}

impl Default for LeaderElection {
    /// No election (the command line's defaults).
    fn default() -> Self {
        Self { lease_namespace: None, holder_identity: None, lease_duration_seconds: 15 }
    }
}

#[derive(Debug, thiserror::Error)]
#[error("cannot take part in leader election on Lease {namespace}/{lease}: {source}")]
pub struct LeaderElectionError {
    namespace: String,
    lease: String,
    #[source]
    source: kube_lease_manager::LeaseManagerError,
}

/// This process leads; dropped or [`Self::release`]d when the process stops.
pub struct Leadership {
    /// `None` when election is off.
    held: Option<Held>,
}

struct Held {
    state: watch::Receiver<bool>,
    manager: JoinHandle<kube_lease_manager::Result<LeaseManager>>,
    fence: JoinHandle<()>,
}

impl LeaderElection {
    /// Renewal starts this long before the Lease would expire: a third of its duration.
    fn grace_seconds(&self) -> u64 {
        (self.lease_duration_seconds / 3).max(1)
    }

    /// This process's name in the Lease: the pod's (or host's) name and what tells this process
    /// from an earlier one of the same pod. A restarted container must not take the Lease its
    /// previous incarnation still holds for its own.
    fn identity(&self) -> String {
        let pod = self.holder_identity.clone().unwrap_or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").map(|h| h.trim().to_string()).unwrap_or_else(|_| "localhost".into()));
        let started = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        format!("{pod}_{}_{started:x}", std::process::id())
    }

    /// Waits until this replica holds Lease `lease` (at once when election is off). From then
    /// on, losing the Lease ends the process with a failure status.
    /// `metrics` report the process ready while it stands by.
    pub async fn lead(&self, client: Client, lease: &str, metrics: &Metrics) -> Result<Leadership, LeaderElectionError> {
        let Some(namespace) = self.lease_namespace.clone() else {
            return Ok(Leadership { held: None });
        };
        let identity = self.identity();
        let error = |source| LeaderElectionError { namespace: namespace.clone(), lease: lease.to_string(), source };
        let params = LeaseParams::new(identity.clone(), self.lease_duration_seconds, self.grace_seconds());
        let manager = LeaseManager::new(client, lease, &namespace, params, LeaseCreateMode::AutoCreate).await.map_err(error)?;
        let (mut state, manager) = manager.watch().await;
        tracing::info!(%namespace, %lease, %identity, "standing by until this replica holds the Lease");
        metrics.set_standing_by(true);
        while !*state.borrow_and_update() {
            if state.changed().await.is_err() {
                // The manager's task ended: it only does so on an error it cannot retry.
                let result = manager.await;
                tracing::error!(?result, "leader election stopped before this replica led");
                std::process::exit(1);
            }
        }
        metrics.set_standing_by(false);
        tracing::info!(%namespace, %lease, %identity, "leading");
        let mut watching = state.clone();
        let fence = tokio::spawn(async move {
            // A closed channel means the manager gave up: as unsafe to go on as a lost Lease.
            while watching.changed().await.is_ok() && *watching.borrow_and_update() {}
            tracing::error!("lost the Lease; exiting so that only the new leader acts");
            std::process::exit(1);
        });
        Ok(Leadership { held: Some(Held { state, manager, fence }) })
    }
}

impl Leadership {
    /// Gives the Lease up (on a clean shutdown), so a standby need not wait for it to expire.
    pub async fn release(self) {
        let Some(Held { state, manager, fence }) = self.held else { return };
        fence.abort();
        // The manager releases the Lease and ends once no receiver is left.
        drop(state);
        match tokio::time::timeout(Duration::from_secs(5), manager).await {
            Ok(Ok(Ok(_))) => tracing::info!("released the Lease"),
            other => tracing::warn!(?other, "could not release the Lease; a standby takes over when it expires"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        election: LeaderElection,
    }

    #[test]
    fn each_process_has_its_own_identity_prefixed_by_the_pods_name() {
        let cli = Cli::try_parse_from(["op", "--leader-election-identity", "katib-operator-7d9f-x2x"]).unwrap();
        let (first, second) = (cli.election.identity(), cli.election.identity());
        assert!(first.starts_with("katib-operator-7d9f-x2x_"), "{first}");
        assert_ne!(first, second, "two incarnations of one pod share a Lease identity");
    }

    #[test]
    fn renewal_starts_a_third_of_the_lease_before_expiry_and_short_leases_are_refused() {
        let cli = Cli::try_parse_from(["op", "--lease-duration-seconds", "15"]).unwrap();
        assert_eq!(cli.election.grace_seconds(), 5);
        let cli = Cli::try_parse_from(["op", "--lease-duration-seconds", "3"]).unwrap();
        assert_eq!(cli.election.grace_seconds(), 1);
        // kube-lease-manager panics unless 0 < grace < duration: durations below 3 s are refused.
        let error = Cli::try_parse_from(["op", "--lease-duration-seconds", "2"]).err().expect("a 2 s lease was accepted");
        assert!(error.to_string().contains("3..=300"), "{error}");
    }

    #[tokio::test]
    async fn without_a_namespace_there_is_no_election() {
        // No API server is reachable from a unit test: a client would fail on first use.
        let config = kube::Config::new("http://127.0.0.1:1".parse().unwrap());
        let client = Client::try_from(config).unwrap();
        let leadership = LeaderElection::default().lead(client, "kubeflow-katib-operator", &Metrics::new("katib")).await.unwrap();
        assert!(leadership.held.is_none(), "an election was held without a namespace");
        leadership.release().await;
    }
}
