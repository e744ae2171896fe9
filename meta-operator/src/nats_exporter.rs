//! `meta-operator nats-exporter`: NATS's own metrics for Prometheus. nats-server serves its
//! monitoring as JSON only (`/varz`, `/jsz` on its monitor port); this reads them at each scrape
//! and answers in the text format, as a sidecar of each server pod the meta-operator provisions
//! (the meta-operator's own image, so nothing else is pulled). It reads only the server's
//! loopback monitor port and holds no credential; its `/metrics` answers only the scrape token
//! ([`operator_runtime::server::ScrapeToken`]).

use serde_json::Value;

/// Port of the sidecar's `/metrics`.
pub const EXPORTER_PORT: u16 = 7777;

/// How `meta-operator nats-exporter` runs.
#[derive(clap::Parser, Debug, Clone)]
#[command(about = "NATS's monitoring (/varz, /jsz) as Prometheus metrics")]
pub struct ExporterArgs {
    /// The server's monitor port (loopback in its pod).
    #[arg(long, default_value_t = crate::provision::MONITOR_PORT)]
    pub monitor_port: u16,
    /// Address of `/metrics`.
    #[arg(long, default_value_t = std::net::SocketAddr::from(([0, 0, 0, 0], EXPORTER_PORT)))]
    pub listen: std::net::SocketAddr,
    #[command(flatten)]
    pub scrape_token: operator_runtime::server::ScrapeToken,
}

/// A number at `pointer` of `answer`, if there is one.
fn number(answer: Option<&Value>, pointer: &str) -> Option<f64> {
    answer.and_then(|a| a.pointer(pointer)).and_then(Value::as_f64)
}

/// (name, type, help, where in which answer): every series, read from `/varz` (`v`) or `/jsz` (`j`).
const SERIES: &[(&str, &str, &str, char, &str)] = &[
    ("kfop_nats_connections", "gauge", "Client connections", 'v', "/connections"),
    ("kfop_nats_subscriptions", "gauge", "Subscriptions", 'v', "/subscriptions"),
    ("kfop_nats_slow_consumers", "counter", "Clients the server dropped messages for because they read too slowly", 'v', "/slow_consumers"),
    ("kfop_nats_in_msgs", "counter", "Messages received", 'v', "/in_msgs"),
    ("kfop_nats_out_msgs", "counter", "Messages sent", 'v', "/out_msgs"),
    ("kfop_nats_in_bytes", "counter", "Bytes received", 'v', "/in_bytes"),
    ("kfop_nats_out_bytes", "counter", "Bytes sent", 'v', "/out_bytes"),
    ("kfop_nats_routes", "gauge", "Routes to the other nodes of the cluster", 'v', "/routes"),
    ("kfop_nats_leafnodes", "gauge", "Leaf node connections (fleet spokes on a hub, the hub on a spoke)", 'v', "/leafnodes"),
    ("kfop_nats_memory_bytes", "gauge", "Resident memory of the server", 'v', "/mem"),
    ("kfop_nats_jetstream_streams", "gauge", "JetStream streams", 'j', "/streams"),
    ("kfop_nats_jetstream_consumers", "gauge", "JetStream consumers", 'j', "/consumers"),
    ("kfop_nats_jetstream_messages", "gauge", "Messages JetStream holds", 'j', "/messages"),
    ("kfop_nats_jetstream_storage_bytes", "gauge", "File storage JetStream uses", 'j', "/storage"),
    ("kfop_nats_jetstream_storage_max_bytes", "gauge", "File storage JetStream may use", 'j', "/config/max_storage"),
    ("kfop_nats_jetstream_memory_bytes", "gauge", "Memory storage JetStream uses", 'j', "/memory"),
    ("kfop_nats_jetstream_memory_max_bytes", "gauge", "Memory storage JetStream may use", 'j', "/config/max_memory"),
    ("kfop_nats_jetstream_api_errors", "counter", "JetStream API requests that failed", 'j', "/api/errors"),
];

/// The text exposition of the server's answers (`None`: the server did not answer):
/// `kfop_nats_up` 1 when both did, and each series the answers hold.
pub fn exposition(varz: Option<&Value>, jsz: Option<&Value>) -> String {
    let mut out = String::from("# HELP kfop_nats_up Whether the NATS server answered its monitoring requests\n# TYPE kfop_nats_up gauge\n");
    out.push_str(&format!("kfop_nats_up {}\n", u8::from(varz.is_some() && jsz.is_some())));
    for (name, kind, help, source, pointer) in SERIES {
        let Some(value) = number(if *source == 'v' { varz } else { jsz }, pointer) else { continue };
        let sample = if *kind == "counter" { format!("{name}_total") } else { name.to_string() };
        out.push_str(&format!("# HELP {name} {help}\n# TYPE {name} {kind}\n{sample} {value}\n"));
    }
    out
}

/// `path`'s JSON answer from the monitor port on loopback.
async fn monitor(port: u16, path: &str) -> Result<Value, String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.map_err(|e| e.to_string())?;
        // HTTP/1.0: the answer comes whole and the server closes the connection.
        stream.write_all(format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").as_bytes()).await.map_err(|e| e.to_string())?;
        let mut response = Vec::new();
        stream.take(MAX_ANSWER_BYTES).read_to_end(&mut response).await.map_err(|e| e.to_string())?;
        let text = String::from_utf8(response).map_err(|e| e.to_string())?;
        let (head, body) = text.split_once("\r\n\r\n").ok_or("no HTTP answer")?;
        if !head.starts_with("HTTP/1.0 200") && !head.starts_with("HTTP/1.1 200") {
            return Err(head.lines().next().unwrap_or_default().to_string());
        }
        serde_json::from_str(body).map_err(|e| e.to_string())
    };
    tokio::time::timeout(std::time::Duration::from_secs(5), exchange).await.map_err(|_| "no answer within 5 s".to_string())?
}

/// More than a monitor answer of a server with many streams needs: the rest is not read.
const MAX_ANSWER_BYTES: u64 = 4 << 20;

/// Serves `/metrics` until the process is stopped.
pub async fn run(args: ExporterArgs) -> Result<(), String> {
    let port = args.monitor_port;
    let routes = args.scrape_token.protect(axum::Router::new().route(
        "/metrics",
        axum::routing::get(move || async move {
            let (varz, jsz) = tokio::join!(monitor(port, "/varz"), monitor(port, "/jsz"));
            for error in [varz.as_ref().err(), jsz.as_ref().err()].into_iter().flatten() {
                tracing::warn!(%error, port, "the NATS server's monitoring did not answer");
            }
            ([("content-type", "text/plain; version=0.0.4; charset=utf-8")], exposition(varz.ok().as_ref(), jsz.ok().as_ref()))
        }),
    ));
    let listener = tokio::net::TcpListener::bind(args.listen).await.map_err(|e| format!("listening on {}: {e}", args.listen))?;
    tracing::info!(address = %args.listen, monitor_port = port, "serving NATS's metrics");
    axum::serve(listener, routes).with_graceful_shutdown(operator_runtime::stop_signal()).await.map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Answers shaped as nats-server's (fields as its monitoring documents them).
    #[test]
    fn the_servers_answers_become_series_and_a_silent_server_is_down() {
        let varz = json!({"connections": 9, "subscriptions": 41, "slow_consumers": 2, "in_msgs": 1200, "out_msgs": 1500, "in_bytes": 64000, "out_bytes": 80000, "routes": 2, "leafnodes": 0, "mem": 31457280});
        let jsz = json!({"streams": 11, "consumers": 17, "messages": 230, "storage": 5000000, "memory": 0, "config": {"max_storage": 5368709120u64, "max_memory": 402653184}, "api": {"total": 900, "errors": 3}});
        let text = exposition(Some(&varz), Some(&jsz));
        for line in [
            "kfop_nats_up 1",
            "kfop_nats_connections 9",
            "kfop_nats_slow_consumers_total 2",
            "# TYPE kfop_nats_slow_consumers counter",
            "kfop_nats_in_msgs_total 1200",
            "kfop_nats_routes 2",
            "kfop_nats_memory_bytes 31457280",
            "kfop_nats_jetstream_streams 11",
            "kfop_nats_jetstream_storage_bytes 5000000",
            "kfop_nats_jetstream_storage_max_bytes 5368709120",
            "kfop_nats_jetstream_api_errors_total 3",
        ] {
            assert!(text.lines().any(|l| l == line), "no line {line:?} in\n{text}");
        }
        let down = exposition(None, Some(&jsz));
        assert!(down.lines().any(|l| l == "kfop_nats_up 0"), "{down}");
        assert!(!down.contains("kfop_nats_connections"), "nothing is made up for an answer missing: {down}");
    }
}
