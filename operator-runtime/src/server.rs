//! A small HTTP endpoint: `/healthz` (process alive), `/readyz` (controller running), `/metrics`.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tracing::{info, warn};

use crate::metrics::Metrics;

pub async fn serve(addr: SocketAddr, metrics: Arc<Metrics>) -> std::io::Result<()> {
    let listener = TcpListener::bind(addr).await?;
    info!(%addr, "serving /healthz, /readyz and /metrics");
    loop {
        let (mut stream, _) = listener.accept().await?;
        let metrics = metrics.clone();
        tokio::spawn(async move {
            let mut buf = [0u8; 2048];
            let n = match stream.read(&mut buf).await {
                Ok(n) => n,
                Err(e) => return warn!(error = %e, "health endpoint read failed"),
            };
            let request = String::from_utf8_lossy(&buf[..n]);
            let path = request.split_whitespace().nth(1).unwrap_or("/");
            let (code, body) = match path {
                "/healthz" | "/livez" => ("200 OK", "ok\n".to_string()),
                "/readyz" if metrics.is_ready() => ("200 OK", "ok\n".to_string()),
                "/readyz" => ("503 Service Unavailable", "controller not started\n".to_string()),
                "/metrics" => ("200 OK", metrics.render()),
                _ => ("404 Not Found", "not found\n".to_string()),
            };
            let response = format!(
                "HTTP/1.1 {code}\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = stream.write_all(response.as_bytes()).await;
        });
    }
}
