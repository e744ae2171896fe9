//! Who a component's writes are made as.
//!
//! A component whose objects come from its spec (the generic one renders whatever package a
//! KfDef names) installs with the rights of a ServiceAccount the resource names
//! (`spec.serviceAccountName`, in the resource's namespace), never with the operator's own: every
//! apply, prune and delete goes through a client impersonating that account, as Flux's
//! kustomize-controller does. The cluster's RBAC, not the operator, decides what a KfDef may
//! install. Before anything is written, the account's rights for each write are checked with
//! SelfSubjectAccessReviews sent as the account, so an application it may not install in full is
//! left out whole and reported (object and verb) instead of half-applied.
//!
//! The built-in components install only their releases' objects and write with the operator's
//! own client ([`Installer::Operator`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::authorization::v1::{ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec};
use kube::api::PostParams;
use kube::{Api, Client};

use crate::component::InvalidSpec;
use crate::kinds::KindInfo;
use crate::metrics::Metrics;

/// The Kubernetes user name of ServiceAccount `namespace/name`.
pub fn service_account_user(namespace: &str, name: &str) -> String {
    format!("system:serviceaccount:{namespace}:{name}")
}

/// Makes clients that impersonate ServiceAccounts, one per account, from the operator's own
/// configuration (the operator needs `impersonate` on `serviceaccounts`).
pub struct Impersonation {
    base: kube::Config,
    metrics: Arc<Metrics>,
    /// The account of resources that name none (`--default-service-account`).
    pub default_account: Option<String>,
    clients: Mutex<HashMap<String, Client>>,
}

impl Impersonation {
    pub fn new(base: kube::Config, metrics: Arc<Metrics>, default_account: Option<String>) -> Self {
        Self { base, metrics, default_account, clients: Mutex::default() }
    }

    /// A client acting as ServiceAccount `namespace/name` (the API server adds the account's
    /// groups), counting its writes like the operator's own.
    pub fn client(&self, namespace: &str, name: &str) -> Result<Client, kube::Error> {
        let user = service_account_user(namespace, name);
        if let Some(client) = self.clients.lock().expect("impersonating clients").get(&user) {
            return Ok(client.clone());
        }
        let mut config = self.base.clone();
        config.auth_info.impersonate = Some(user.clone());
        config.auth_info.impersonate_groups = None;
        let client = operator_runtime::client::counted_client_for(config, self.metrics.clone())?;
        self.clients.lock().expect("impersonating clients").insert(user, client.clone());
        Ok(client)
    }
}

/// The identity one resource's writes are made with.
#[derive(Clone)]
pub enum Installer {
    /// The operator itself (components that install only their built-in releases).
    Operator(Client),
    /// A ServiceAccount of the resource's namespace, `namespace/name`.
    Account { client: Client, account: String },
}

impl Installer {
    pub fn client(&self) -> &Client {
        match self {
            Installer::Operator(client) | Installer::Account { client, .. } => client,
        }
    }
}

/// The ServiceAccount a resource installs as: the one it names, else the operator's default; an
/// error naming the field when there is neither (nothing is installed with the operator's rights).
pub fn account_name<'a>(named: Option<&'a str>, default: Option<&'a str>, namespace: &str) -> Result<&'a str, InvalidSpec> {
    named.filter(|n| !n.is_empty()).or(default).ok_or_else(|| {
        InvalidSpec::new(
            "spec.serviceAccountName",
            format!("required: the ServiceAccount in namespace {namespace:?} whose rights the install uses (the operator has no --default-service-account)"),
        )
    })
}

/// One write the installer is about to make.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Access {
    pub verb: &'static str,
    pub kind: &'static KindInfo,
    pub namespace: Option<String>,
    pub name: String,
}

impl Access {
    /// `create ClusterRoleBinding x (clusterrolebindings.rbac.authorization.k8s.io)`.
    pub fn describe(&self) -> String {
        let resource = if self.kind.group.is_empty() { self.kind.plural.to_string() } else { format!("{}.{}", self.kind.plural, self.kind.group) };
        let object = match &self.namespace {
            Some(ns) => format!("{} {ns}/{}", self.kind.kind, self.name),
            None => format!("{} {}", self.kind.kind, self.name),
        };
        format!("{} {object} ({resource})", self.verb)
    }
}

/// The writes in `accesses` that the client's identity may not make, asked of the API server's
/// authorizer with a SelfSubjectAccessReview each (a few at a time).
pub async fn denied(client: &Client, accesses: Vec<Access>) -> Result<Vec<Access>, kube::Error> {
    let api: Api<SelfSubjectAccessReview> = Api::all(client.clone());
    let reviews = futures::stream::iter(accesses).map(|access| {
        let api = api.clone();
        async move {
            let review = SelfSubjectAccessReview {
                spec: SelfSubjectAccessReviewSpec {
                    resource_attributes: Some(ResourceAttributes {
                        verb: Some(access.verb.into()),
                        group: Some(access.kind.group.into()),
                        version: Some(access.kind.version.into()),
                        resource: Some(access.kind.plural.into()),
                        namespace: access.namespace.clone(),
                        name: Some(access.name.clone()),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
                ..Default::default()
            };
            let answer = api.create(&PostParams::default(), &review).await?;
            Ok::<_, kube::Error>((!answer.status.is_some_and(|s| s.allowed)).then_some(access))
        }
    });
    let answers: Vec<Option<Access>> = reviews.buffered(8).try_collect().await?;
    Ok(answers.into_iter().flatten().collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_account_is_the_named_one_else_the_default_else_an_error_naming_the_field() {
        assert_eq!(account_name(Some("installer"), Some("fallback"), "team").unwrap(), "installer");
        assert_eq!(account_name(None, Some("fallback"), "team").unwrap(), "fallback");
        assert_eq!(account_name(Some(""), Some("fallback"), "team").unwrap(), "fallback");
        let error = account_name(None, None, "team").unwrap_err();
        assert_eq!(error.field, "spec.serviceAccountName");
        assert!(error.message.contains("namespace \"team\""), "{}", error.message);
    }

    #[test]
    fn a_denied_write_names_the_verb_the_object_and_the_resource() {
        let binding = crate::kinds::lookup("rbac.authorization.k8s.io/v1", "ClusterRoleBinding").unwrap();
        let access = Access { verb: "create", kind: binding, namespace: None, name: "evil".into() };
        assert_eq!(access.describe(), "create ClusterRoleBinding evil (clusterrolebindings.rbac.authorization.k8s.io)");
        let config_map = crate::kinds::lookup("v1", "ConfigMap").unwrap();
        let access = Access { verb: "patch", kind: config_map, namespace: Some("kube-system".into()), name: "coredns".into() };
        assert_eq!(access.describe(), "patch ConfigMap kube-system/coredns (configmaps)");
        assert_eq!(service_account_user("team", "kubeflow-installer"), "system:serviceaccount:team:kubeflow-installer");
    }
}
