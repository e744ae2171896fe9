//! A Kubernetes client that counts the write requests it sends.

use std::sync::Arc;

use http::{Method, Request, Uri};
use kube::client::{Body, ClientBuilder};
use tower::util::MapRequestLayer;

use crate::metrics::Metrics;

/// A client for the inferred configuration (in-cluster or kubeconfig) that counts every write
/// request (any method but GET and HEAD) in [`Metrics::write_by`], by its `fieldManager`.
pub async fn counted_client(metrics: Arc<Metrics>) -> Result<kube::Client, kube::Error> {
    let config = kube::Config::infer().await.map_err(kube::Error::InferConfig)?;
    counted_client_for(config, metrics)
}

/// A client for `config` that counts its writes like [`counted_client`] (e.g. one that
/// impersonates a ServiceAccount).
pub fn counted_client_for(config: kube::Config, metrics: Arc<Metrics>) -> Result<kube::Client, kube::Error> {
    let count = MapRequestLayer::new(move |request: Request<Body>| {
        if let Some(field_manager) = written_by(request.method(), request.uri()) {
            tracing::debug!(method = %request.method(), path = request.uri().path(), field_manager, "API write");
            metrics.write_by(&field_manager);
        }
        request
    });
    Ok(ClientBuilder::try_from(config)?.with_layer(&count).build())
}

/// The field manager a write request is sent as (`"none"` when it names none); `None` for reads,
/// and for reviews (access and token reviews are POSTed but store nothing).
fn written_by(method: &Method, uri: &Uri) -> Option<String> {
    let review = uri.path().starts_with("/apis/authorization.k8s.io/") || uri.path().starts_with("/apis/authentication.k8s.io/");
    if method == Method::GET || method == Method::HEAD || review {
        return None;
    }
    let field_manager = uri.query().and_then(|q| form_urlencoded::parse(q.as_bytes()).find(|(key, _)| key == "fieldManager"));
    Some(field_manager.map_or_else(|| "none".into(), |(_, value)| value.into_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn written(method: Method, uri: &str) -> Option<String> {
        written_by(&method, &uri.parse().unwrap())
    }

    #[test]
    fn writes_are_counted_by_field_manager_and_reads_are_not() {
        let apply = "/apis/apps/v1/namespaces/a/deployments/x?fieldManager=kubeflow-katib-operator&force=true";
        assert_eq!(written(Method::PATCH, apply).as_deref(), Some("kubeflow-katib-operator"));
        assert_eq!(written(Method::PATCH, "/api/v1/namespaces/a/configmaps/x/status?force=true&fieldManager=a%2Fb").as_deref(), Some("a/b"));
        assert_eq!(written(Method::POST, "/apis/events.k8s.io/v1/namespaces/a/events").as_deref(), Some("none"));
        assert_eq!(written(Method::DELETE, "/apis/apps/v1/namespaces/a/deployments/x").as_deref(), Some("none"));
        assert_eq!(written(Method::PUT, "/apis/coordination.k8s.io/v1/namespaces/a/leases/x?fieldManager=m").as_deref(), Some("m"));
        assert_eq!(written(Method::GET, "/apis/apps/v1/deployments?watch=true&resourceVersion=1"), None);
        assert_eq!(written(Method::HEAD, "/api/v1/namespaces"), None);
        assert_eq!(written(Method::POST, "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"), None, "a review stores nothing");
        assert_eq!(written(Method::POST, "/apis/authentication.k8s.io/v1/tokenreviews"), None);
    }
}
