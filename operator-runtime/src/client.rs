//! A Kubernetes client that counts the write requests it sends, and sends an idempotent request
//! a second time when the API server closed the connection without answering.

use std::future::{Ready, ready};
use std::sync::Arc;

use http::{Method, Request, Uri};
use kube::client::{Body, ClientBuilder};
use tower::BoxError;
use tower::buffer::BufferLayer;
use tower::retry::{Policy, RetryLayer};
use tower::util::MapRequestLayer;

use crate::metrics::Metrics;

/// A client for the inferred configuration (in-cluster or kubeconfig) that counts every write
/// request (any method but GET and HEAD) in [`Metrics::write_by`], by its `fieldManager`.
pub async fn counted_client(metrics: Arc<Metrics>) -> Result<kube::Client, kube::Error> {
    let config = kube::Config::infer().await.map_err(kube::Error::InferConfig)?;
    counted_client_for(config, metrics)
}

/// A client for `config` that counts its writes like [`counted_client`] (e.g. one that
/// impersonates a ServiceAccount), and resends like [`ResendOnClosedConnection`].
pub fn counted_client_for(config: kube::Config, metrics: Arc<Metrics>) -> Result<kube::Client, kube::Error> {
    let count = MapRequestLayer::new(move |request: Request<Body>| {
        if let Some(field_manager) = written_by(request.method(), request.uri()) {
            tracing::debug!(method = %request.method(), path = request.uri().path(), field_manager, "API write");
            metrics.write_by(&field_manager);
        }
        request
    });
    Ok(ClientBuilder::try_from(config)?
        .with_layer(&count)
        // The retry layer calls the service again, so it needs a service it can clone.
        .with_layer(&BufferLayer::new(1024))
        .with_layer(&RetryLayer::new(ResendOnClosedConnection { resent: false }))
        .build())
}

/// A client for `config` without the write count (tests and tools), resending like
/// [`ResendOnClosedConnection`].
pub fn client_for(config: kube::Config) -> Result<kube::Client, kube::Error> {
    Ok(ClientBuilder::try_from(config)?
        .with_layer(&BufferLayer::new(1024))
        .with_layer(&RetryLayer::new(ResendOnClosedConnection { resent: false }))
        .build())
}

/// Sends a request once more, at once, when its connection closed before any answer came, and
/// only when sending it twice does what sending it once does: any method but POST (this project
/// sends no JSON patch; its PATCHes are server-side applies and merge patches).
///
/// kube's HTTP/1 connection pool keeps an idle connection 90 s, and the kube-apiserver closes one
/// after 90 s idle: a request sent on a connection the server is closing at that moment fails
/// with `SendRequest` although the server never read it (seen when a render kept an operator's
/// own client idle for 90 s). Go's transport resends such requests itself; hyper does not.
#[derive(Clone)]
pub struct ResendOnClosedConnection {
    resent: bool,
}

impl<Response> Policy<Request<Body>, Response, BoxError> for ResendOnClosedConnection {
    type Future = Ready<()>;

    fn retry(&mut self, _request: &mut Request<Body>, result: &mut Result<Response, BoxError>) -> Option<Self::Future> {
        match result {
            Err(error) if !self.resent && closed_without_answer(error.as_ref()) => {
                tracing::debug!(%error, "connection closed before an answer: sending the request again");
                self.resent = true;
                Some(ready(()))
            }
            _ => None,
        }
    }

    fn clone_request(&mut self, request: &Request<Body>) -> Option<Request<Body>> {
        if request.method() == Method::POST {
            return None;
        }
        let mut copy = Request::new(request.body().try_clone()?);
        *copy.method_mut() = request.method().clone();
        *copy.uri_mut() = request.uri().clone();
        *copy.version_mut() = request.version();
        *copy.headers_mut() = request.headers().clone();
        *copy.extensions_mut() = request.extensions().clone();
        Some(copy)
    }
}

/// Whether `error` says the connection ended before any response: hyper's incomplete message, or
/// the peer's reset or a broken pipe while sending.
fn closed_without_answer(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut cause = Some(error);
    while let Some(error) = cause {
        if error.downcast_ref::<hyper::Error>().is_some_and(hyper::Error::is_incomplete_message) {
            return true;
        }
        if let Some(io) = error.downcast_ref::<std::io::Error>() {
            use std::io::ErrorKind::{BrokenPipe, ConnectionAborted, ConnectionReset};
            return matches!(io.kind(), ConnectionReset | ConnectionAborted | BrokenPipe);
        }
        cause = error.source();
    }
    false
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

    /// An API server stand-in: closes its first connection as soon as it has read a request, then
    /// answers `{}` on the next. Gives its address and the number of requests it read.
    async fn closes_first_connection() -> (String, Arc<std::sync::atomic::AtomicUsize>) {
        use std::sync::atomic::Ordering;
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = format!("http://{}", listener.local_addr().unwrap());
        let requests = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let read = requests.clone();
        tokio::spawn(async move {
            loop {
                let (mut connection, _) = listener.accept().await.unwrap();
                let mut head = Vec::new();
                let mut buffer = [0u8; 4096];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match connection.read(&mut buffer).await.unwrap() {
                        0 => break,
                        n => head.extend_from_slice(&buffer[..n]),
                    }
                }
                if read.fetch_add(1, Ordering::SeqCst) == 0 {
                    continue; // dropped: closed without an answer
                }
                let answer = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}";
                connection.write_all(answer.as_bytes()).await.unwrap();
            }
        });
        (address, requests)
    }

    async fn send(method: Method, body: &str) -> (Result<String, kube::Error>, usize) {
        let (address, requests) = closes_first_connection().await;
        let client = counted_client_for(kube::Config::new(address.parse().unwrap()), Arc::new(Metrics::new("test"))).unwrap();
        let request = Request::builder().method(method).uri("/api/v1/namespaces/a").body(body.as_bytes().to_vec()).unwrap();
        let result = client.request_text(request).await;
        (result, requests.load(std::sync::atomic::Ordering::SeqCst))
    }

    #[tokio::test]
    async fn a_read_or_an_apply_is_sent_again_when_the_connection_closed_before_an_answer() {
        for (method, body) in [(Method::GET, ""), (Method::PATCH, r#"{"metadata":{"labels":{"a":"b"}}}"#)] {
            let (result, requests) = send(method.clone(), body).await;
            assert_eq!(result.unwrap_or_else(|e| panic!("{method}: {e}")), "{}");
            assert_eq!(requests, 2, "{method} sent {requests} times");
        }
    }

    #[tokio::test]
    async fn a_create_is_not_sent_again() {
        let (result, requests) = send(Method::POST, r#"{"metadata":{"name":"a"}}"#).await;
        let error = result.expect_err("a POST was sent again");
        assert_eq!(requests, 1);
        assert!(closed_without_answer(&error), "{error:?}");
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
