//! The health endpoint: `/healthz` and `/livez` (process alive), `/readyz` (controller running), `/metrics`.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use tokio::net::TcpListener;
use tracing::info;

use crate::metrics::Metrics;

/// Content type of the OpenMetrics text exposition [`Metrics::render`] produces.
const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Binds `addr` and serves the endpoint in the background. A port that cannot be bound fails the
/// start: an operator without its endpoint would look dead to the kubelet, or, when another
/// process holds the port, report that process's health as its own.
pub async fn start(addr: SocketAddr, metrics: Arc<Metrics>) -> std::io::Result<()> {
    let listener = TcpListener::bind(addr).await?;
    info!(%addr, "serving /healthz, /readyz and /metrics");
    tokio::spawn(async move {
        if let Err(e) = serve_on(listener, metrics).await {
            tracing::error!(error = %e, "the health endpoint stopped");
        }
    });
    Ok(())
}

/// Serves the endpoint on a bound `listener`.
pub async fn serve_on(listener: TcpListener, metrics: Arc<Metrics>) -> std::io::Result<()> {
    let app = Router::new()
        .route("/healthz", get(alive))
        .route("/livez", get(alive))
        .route("/readyz", get(ready))
        .route("/metrics", get(render))
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
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        stream.write_all(format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").as_bytes()).await.unwrap();
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
        tokio::spawn(serve_on(listener, metrics.clone()));

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
        let (head, body) = get(addr, "/metrics").await;
        assert!(head.starts_with("HTTP/1.1 200") && head.contains(OPENMETRICS), "{head}");
        assert!(body.lines().any(|l| l == "kfop_reconciles_total{component=\"katib\"} 1"), "{body}");
    }

    #[tokio::test]
    async fn a_port_another_process_holds_fails_the_start() {
        let holder = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = holder.local_addr().unwrap();
        let error = start(addr, Arc::new(Metrics::new("katib"))).await.expect_err("started on a port another socket listens on");
        assert_eq!(error.kind(), std::io::ErrorKind::AddrInUse);
    }
}
