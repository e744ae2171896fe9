//! The health endpoint: `/healthz` and `/livez` (process alive), `/readyz` (controller running), and
//! `/metrics`, which answers only a scrape that presents the scrape token ([`ScrapeToken`]).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tokio::net::TcpListener;
use tracing::info;

use crate::metrics::Metrics;

/// Content type of the OpenMetrics text exposition [`Metrics::render`] produces.
pub const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The Secret holding the scrape token in the operators' namespace (key [`SCRAPE_TOKEN_KEY`]):
/// deploy/ and the bundles mount it into every pod that serves `/metrics`, and the PodMonitors
/// of deploy/monitoring present it.
pub const SCRAPE_TOKEN_SECRET: &str = "kubeflow-metrics-token";
/// The key of [`SCRAPE_TOKEN_SECRET`] holding the token.
pub const SCRAPE_TOKEN_KEY: &str = "token";
/// Where deploy/ mounts [`SCRAPE_TOKEN_SECRET`].
pub const SCRAPE_TOKEN_MOUNT: &str = "/var/run/secrets/kubeflow-operator/metrics";
/// Longest bearer token read from a request or the token file.
const MAX_TOKEN_BYTES: usize = 4096;

/// Who may read `/metrics`: a caller presenting `Authorization: Bearer <token>` with the token in
/// [`Self::metrics_token_file`] (read at each scrape, so a rotated Secret takes effect as the kubelet updates
/// the file). Every process serving metrics checks the same token the same way, including those
/// that hold no Kubernetes credential (the renderer, the fleet agent, the NATS exporter), which
/// could not ask the API server who a caller is.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct ScrapeToken {
    /// File holding the token a scrape of `/metrics` must present as `Authorization: Bearer`
    /// (deploy/ mounts Secret `kubeflow-metrics-token` there). Without it `/metrics` answers no one.
    #[arg(long = "metrics-token-file", env = "KFOP_METRICS_TOKEN_FILE")]
    pub metrics_token_file: Option<PathBuf>,
}

/// Why a scrape was refused.
#[derive(Debug, PartialEq)]
pub enum ScrapeRefusal {
    /// No `Authorization: Bearer` header, or not the token.
    Unauthenticated(&'static str),
    /// This process was given no token file: `/metrics` answers no one.
    NotConfigured,
    /// The token file is not there (yet: the Secret is made by the operators) or unreadable.
    TokenUnavailable(String),
}

impl IntoResponse for ScrapeRefusal {
    fn into_response(self) -> Response {
        match self {
            Self::Unauthenticated(why) => (StatusCode::UNAUTHORIZED, [(header::WWW_AUTHENTICATE, "Bearer")], format!("{why}\n")).into_response(),
            Self::NotConfigured => (StatusCode::FORBIDDEN, "this process serves /metrics to no one: it was started without --metrics-token-file\n").into_response(),
            Self::TokenUnavailable(why) => (StatusCode::SERVICE_UNAVAILABLE, format!("the scrape token is not available: {why}\n")).into_response(),
        }
    }
}

impl ScrapeToken {
    pub fn from_file(file: impl Into<PathBuf>) -> Self {
        Self { metrics_token_file: Some(file.into()) }
    }

    /// Whether `headers` present the token.
    pub async fn check(&self, headers: &HeaderMap) -> Result<(), ScrapeRefusal> {
        let file = self.metrics_token_file.as_ref().ok_or(ScrapeRefusal::NotConfigured)?;
        let expected = read_token(file).await?;
        let presented = headers
            .get(header::AUTHORIZATION)
            .ok_or(ScrapeRefusal::Unauthenticated("Authorization: Bearer <scrape token> is missing"))?
            .to_str()
            .ok()
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim)
            .filter(|t| t.len() <= MAX_TOKEN_BYTES)
            .ok_or(ScrapeRefusal::Unauthenticated("Authorization: expected Bearer <scrape token>"))?;
        if constant_time_eq(presented.as_bytes(), expected.as_bytes()) { Ok(()) } else { Err(ScrapeRefusal::Unauthenticated("the bearer token is not the scrape token")) }
    }

    /// `router` with every route answering only scrapes that present the token.
    pub fn protect<S: Clone + Send + Sync + 'static>(&self, router: Router<S>) -> Router<S> {
        router.route_layer(axum::middleware::from_fn_with_state(self.clone(), require_token))
    }
}

async fn require_token(State(token): State<ScrapeToken>, request: Request, next: Next) -> Response {
    match token.check(request.headers()).await {
        Ok(()) => next.run(request).await,
        Err(refusal) => refusal.into_response(),
    }
}

async fn read_token(file: &std::path::Path) -> Result<String, ScrapeRefusal> {
    let unavailable = |why: String| ScrapeRefusal::TokenUnavailable(format!("{}: {why}", file.display()));
    let bytes = tokio::fs::read(file).await.map_err(|e| unavailable(e.to_string()))?;
    if bytes.len() > MAX_TOKEN_BYTES {
        return Err(unavailable(format!("longer than {MAX_TOKEN_BYTES} bytes")));
    }
    let token = String::from_utf8(bytes).map_err(|_| unavailable("not UTF-8".into()))?.trim().to_string();
    if token.is_empty() {
        return Err(unavailable("empty".into()));
    }
    Ok(token)
}

/// Equal bytes, in a time that does not depend on where they differ.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Gives container `container` of pod spec `pod` the scrape token: Secret [`SCRAPE_TOKEN_SECRET`]
/// as a volume (optional: the pod starts before an operator has made it, and the kubelet fills
/// the file in once it exists), mounted read-only at [`SCRAPE_TOKEN_MOUNT`], and
/// `KFOP_METRICS_TOKEN_FILE` naming the file. deploy/, the bundles and the NATS servers the
/// meta-operator provisions all use this.
pub fn mount_scrape_token(pod: &mut serde_json::Value, container: usize) {
    use serde_json::json;
    let volume = "metrics-token";
    let push = |list: &mut serde_json::Value, item: serde_json::Value| match list.as_array_mut() {
        Some(items) => items.push(item),
        None => *list = json!([item]),
    };
    push(&mut pod["volumes"], json!({"name": volume, "secret": {"secretName": SCRAPE_TOKEN_SECRET, "optional": true}}));
    let target = &mut pod["containers"][container];
    push(&mut target["volumeMounts"], json!({"name": volume, "mountPath": SCRAPE_TOKEN_MOUNT, "readOnly": true}));
    push(&mut target["env"], json!({"name": "KFOP_METRICS_TOKEN_FILE", "value": format!("{SCRAPE_TOKEN_MOUNT}/{SCRAPE_TOKEN_KEY}")}));
}

/// What an operator needs in its namespace to make the scrape token's Secret: `create` on
/// Secrets (RBAC cannot limit `create` by name; it reads none).
pub fn scrape_token_rules() -> Vec<k8s_openapi::api::rbac::v1::PolicyRule> {
    vec![k8s_openapi::api::rbac::v1::PolicyRule {
        api_groups: Some(vec![String::new()]),
        resources: Some(vec!["secrets".into()]),
        verbs: vec!["create".into()],
        ..Default::default()
    }]
}

/// A new scrape token: 32 random bytes, hex.
pub fn new_scrape_token() -> String {
    let mut bytes = [0u8; 32];
    getrandom::getrandom(&mut bytes).expect("the operating system's random source");
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Where an operator makes the scrape token's Secret ([`make_scrape_token_secret`]): deploy/
/// and the bundles give the pod's own namespace.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct ScrapeTokenMaker {
    /// Namespace in which to make Secret `kubeflow-metrics-token` (a new random token) at start
    /// unless it exists.
    #[arg(long = "make-metrics-token-in", env = "KFOP_MAKE_METRICS_TOKEN_IN")]
    pub make_metrics_token_in: Option<String>,
}

impl ScrapeTokenMaker {
    /// Makes the Secret in the background, retried while the API server does not answer; a
    /// refusal (no right to create Secrets there) is logged once: the operator works without it,
    /// only its `/metrics` stays closed.
    pub fn spawn(self, client: kube::Client) {
        let Some(namespace) = self.make_metrics_token_in.filter(|n| !n.is_empty()) else { return };
        tokio::spawn(async move {
            let mut delays = crate::retry::exponential(std::time::Duration::from_millis(500), std::time::Duration::from_secs(30));
            loop {
                match make_scrape_token_secret(&client, &namespace).await {
                    Ok(()) => return,
                    Err(kube::Error::Api(status)) if status.code == 403 => {
                        tracing::error!(namespace, reason = %status.message, "cannot make the scrape token Secret: /metrics stays closed until it exists");
                        return;
                    }
                    Err(e) => {
                        let delay = backoff::backoff::Backoff::next_backoff(&mut delays).unwrap_or(std::time::Duration::from_secs(30));
                        tracing::warn!(namespace, error = %e, "making the scrape token Secret; trying again");
                        tokio::time::sleep(delay).await;
                    }
                }
            }
        });
    }
}

/// Makes Secret [`SCRAPE_TOKEN_SECRET`] in `namespace` with a new token unless it exists. Every
/// operator that may create Secrets in its namespace does so at start, so that any packaging
/// (deploy/all, one operator alone, an OLM bundle) gets one without a token in any manifest; an
/// existing Secret is never read or changed (delete it to rotate the token).
pub async fn make_scrape_token_secret(client: &kube::Client, namespace: &str) -> Result<(), kube::Error> {
    use k8s_openapi::api::core::v1::Secret;
    let secret = Secret {
        metadata: kube::api::ObjectMeta {
            name: Some(SCRAPE_TOKEN_SECRET.into()),
            labels: Some([("app.kubernetes.io/part-of".to_string(), "kubeflow-operator".to_string())].into()),
            ..Default::default()
        },
        string_data: Some([(SCRAPE_TOKEN_KEY.to_string(), new_scrape_token())].into()),
        type_: Some("Opaque".into()),
        ..Default::default()
    };
    match kube::Api::<Secret>::namespaced(client.clone(), namespace).create(&Default::default(), &secret).await {
        Ok(_) => {
            info!(namespace, secret = SCRAPE_TOKEN_SECRET, "made the scrape token");
            Ok(())
        }
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(()),
        Err(e) => Err(e),
    }
}

/// Binds `addr` and serves the endpoint in the background. A port that cannot be bound fails the
/// start: an operator without its endpoint would look dead to the kubelet, or, when another
/// process holds the port, report that process's health as its own.
pub async fn start(addr: SocketAddr, metrics: Arc<Metrics>, token: ScrapeToken) -> std::io::Result<()> {
    let listener = TcpListener::bind(addr).await?;
    info!(%addr, "serving /healthz, /readyz and /metrics");
    tokio::spawn(async move {
        if let Err(e) = serve_on(listener, metrics, token).await {
            tracing::error!(error = %e, "the health endpoint stopped");
        }
    });
    Ok(())
}

/// Serves the endpoint on a bound `listener`.
pub async fn serve_on(listener: TcpListener, metrics: Arc<Metrics>, token: ScrapeToken) -> std::io::Result<()> {
    let scrape = token.protect(Router::new().route("/metrics", get(render)));
    let app = Router::new()
        .route("/healthz", get(alive))
        .route("/livez", get(alive))
        .route("/readyz", get(ready))
        .merge(scrape)
        .fallback(|| async { (StatusCode::NOT_FOUND, "not found\n") })
        .with_state(metrics);
    axum::serve(listener, app).await
}

async fn alive() -> &'static str {
    "ok\n"
}

async fn ready(State(metrics): State<Arc<Metrics>>) -> (StatusCode, &'static str) {
    if metrics.is_ready() { (StatusCode::OK, "ok\n") } else { (StatusCode::SERVICE_UNAVAILABLE, "controller not started\n") }
}

async fn render(State(metrics): State<Arc<Metrics>>) -> impl IntoResponse {
    ([(header::CONTENT_TYPE, OPENMETRICS)], metrics.render())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// The response head and body of `GET path`.
    async fn get(addr: SocketAddr, path: &str) -> (String, String) {
        get_with(addr, path, "").await
    }

    /// The response head and body of `GET path` with `headers` (each line ending in CRLF).
    async fn get_with(addr: SocketAddr, path: &str, headers: &str) -> (String, String) {
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        stream.write_all(format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\n{headers}Connection: close\r\n\r\n").as_bytes()).await.unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).await.unwrap();
        let (head, body) = response.split_once("\r\n\r\n").unwrap();
        (head.to_string(), body.to_string())
    }

    #[tokio::test]
    async fn serves_health_readiness_and_metrics() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let metrics = Arc::new(Metrics::new("katib"));
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("token");
        std::fs::write(&file, "s3cret\n").unwrap();
        tokio::spawn(serve_on(listener, metrics.clone(), ScrapeToken::from_file(&file)));

        for path in ["/healthz", "/livez"] {
            let (head, body) = get(addr, path).await;
            assert!(head.starts_with("HTTP/1.1 200"), "{path}: {head}");
            assert_eq!(body, "ok\n");
        }
        assert!(get(addr, "/readyz").await.0.starts_with("HTTP/1.1 503"));
        metrics.set_ready();
        assert!(get(addr, "/readyz").await.0.starts_with("HTTP/1.1 200"));
        assert!(get(addr, "/nope").await.0.starts_with("HTTP/1.1 404"));

        metrics.reconcile_started();
        let (head, body) = get_with(addr, "/metrics", "Authorization: Bearer s3cret\r\n").await;
        assert!(head.starts_with("HTTP/1.1 200") && head.contains(OPENMETRICS), "{head}");
        assert!(body.lines().any(|l| l == "kfop_reconciles_total{component=\"katib\"} 1"), "{body}");
    }

    #[tokio::test]
    async fn metrics_answer_only_the_scrape_token_of_the_file_as_it_is_now() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let metrics = Arc::new(Metrics::new("katib"));
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("token");
        tokio::spawn(serve_on(listener, metrics.clone(), ScrapeToken::from_file(&file)));

        // Before the Secret is there: nobody, and the kubelet's probes still pass.
        let (head, body) = get_with(addr, "/metrics", "Authorization: Bearer anything\r\n").await;
        assert!(head.starts_with("HTTP/1.1 503"), "{head}");
        assert!(body.contains("token") && body.contains("not available"), "{body}");
        assert!(get(addr, "/healthz").await.0.starts_with("HTTP/1.1 200"));

        std::fs::write(&file, "first-token").unwrap();
        for (headers, why) in [
            ("", "missing"),
            ("Authorization: Bearer wrong-token\r\n", "not the scrape token"),
            ("Authorization: Bearer first-toke\r\n", "not the scrape token"),
            ("Authorization: Basic Zmlyc3QtdG9rZW4=\r\n", "expected Bearer"),
        ] {
            let (head, body) = get_with(addr, "/metrics", headers).await;
            assert!(head.starts_with("HTTP/1.1 401") && head.to_lowercase().contains("www-authenticate: bearer"), "{headers:?}: {head}");
            assert!(body.contains(why), "{headers:?}: {body}");
            assert!(!body.contains("kfop_"), "{headers:?}: no metric to a stranger: {body}");
        }
        let (head, body) = get_with(addr, "/metrics", "Authorization: Bearer first-token\r\n").await;
        assert!(head.starts_with("HTTP/1.1 200") && body.contains("kfop_reconciles_total"), "{head}\n{body}");

        // Rotated: the old token is refused from the next scrape on.
        std::fs::write(&file, "second-token\n").unwrap();
        assert!(get_with(addr, "/metrics", "Authorization: Bearer first-token\r\n").await.0.starts_with("HTTP/1.1 401"));
        assert!(get_with(addr, "/metrics", "Authorization: Bearer second-token\r\n").await.0.starts_with("HTTP/1.1 200"));
    }

    #[tokio::test]
    async fn without_a_token_file_metrics_answer_no_one() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(serve_on(listener, Arc::new(Metrics::new("katib")), ScrapeToken::default()));
        let (head, body) = get_with(addr, "/metrics", "Authorization: Bearer anything\r\n").await;
        assert!(head.starts_with("HTTP/1.1 403") && body.contains("--metrics-token-file"), "{head}\n{body}");
    }

    #[test]
    fn scrape_tokens_are_new_each_time_and_compare_only_when_equal() {
        let (a, b) = (new_scrape_token(), new_scrape_token());
        assert_eq!(a.len(), 64);
        assert!(a.chars().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
        assert!(constant_time_eq(a.as_bytes(), a.clone().as_bytes()));
        assert!(!constant_time_eq(a.as_bytes(), b.as_bytes()));
        assert!(!constant_time_eq(b"abc", b"abcd"));
    }

    #[tokio::test]
    async fn a_port_another_process_holds_fails_the_start() {
        let holder = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = holder.local_addr().unwrap();
        let error = start(addr, Arc::new(Metrics::new("katib")), ScrapeToken::default()).await.expect_err("started on a port another socket listens on");
        assert_eq!(error.kind(), std::io::ErrorKind::AddrInUse);
    }
}
