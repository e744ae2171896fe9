//! With OTEL_EXPORTER_OTLP_ENDPOINT set, a component operator exports its reconcile spans over
//! OTLP/HTTP. A minimal OTLP receiver on loopback records what arrives.

use std::sync::{Arc, Mutex};

use kube::Api;
use kube::api::PostParams;
use kubeflow_crds::Katib;
use kubeflow_e2e::*;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Accepts OTLP/HTTP posts and keeps (path, body) of each.
async fn otlp_receiver() -> (u16, Arc<Mutex<Vec<(String, Vec<u8>)>>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let received = Arc::new(Mutex::new(Vec::new()));
    let sink = received.clone();
    tokio::spawn(async move {
        loop {
            let Ok((mut stream, _)) = listener.accept().await else { return };
            let sink = sink.clone();
            tokio::spawn(async move {
                let mut data = Vec::new();
                let mut buf = [0u8; 8192];
                // Read the head, then as many body bytes as Content-Length says.
                let (head_end, length) = loop {
                    let n = stream.read(&mut buf).await.unwrap_or(0);
                    if n == 0 {
                        return;
                    }
                    data.extend_from_slice(&buf[..n]);
                    if let Some(end) = data.windows(4).position(|w| w == b"\r\n\r\n") {
                        let head = String::from_utf8_lossy(&data[..end]).to_lowercase();
                        let length = head.lines().find_map(|l| l.strip_prefix("content-length:")).and_then(|v| v.trim().parse().ok()).unwrap_or(0);
                        break (end + 4, length);
                    }
                };
                while data.len() < head_end + length {
                    let n = stream.read(&mut buf).await.unwrap_or(0);
                    if n == 0 {
                        break;
                    }
                    data.extend_from_slice(&buf[..n]);
                }
                let head = String::from_utf8_lossy(&data[..head_end]).into_owned();
                let path = head.split_whitespace().nth(1).unwrap_or_default().to_string();
                sink.lock().unwrap().push((path, data[head_end..].to_vec()));
                let _ = stream.write_all(b"HTTP/1.1 200 OK\r\nContent-Type: application/x-protobuf\r\nContent-Length: 0\r\nConnection: close\r\n\r\n").await;
            });
        }
    });
    (port, received)
}

#[tokio::test]
async fn reconcile_spans_are_exported_over_otlp_when_configured() {
    let client = client().await;
    install_crds(&client).await;
    let ns = TestNamespace::create(&client, "e2e-otel").await;
    let (port, received) = otlp_receiver().await;
    let endpoint = format!("http://127.0.0.1:{port}");
    let operator = OperatorProcess::start(
        "katib-operator",
        &["--namespace", &ns.name],
        &[("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint), ("OTEL_SERVICE_NAME", "katib-operator-e2e"), ("OTEL_BSP_SCHEDULE_DELAY", "200")],
    );
    operator.wait_ready().await;
    let katib: Katib = serde_json::from_value(json!({
        "apiVersion": "components.kubeflow.org/v1alpha1", "kind": "Katib", "metadata": {"name": "otel"},
        // An unsupported version keeps the test away from installing anything; it still reconciles.
        "spec": {"version": "v99.0.0", "targetNamespace": ns.name},
    }))
    .unwrap();
    let api = Api::<Katib>::namespaced(client.clone(), &ns.name);
    api.create(&PostParams::default(), &katib).await.unwrap();
    let contains = |body: &[u8], needle: &str| body.windows(needle.len()).any(|w| w == needle.as_bytes());
    eventually("a reconcile span at the OTLP receiver", || async {
        let got = received.lock().unwrap().clone();
        let found = got.iter().any(|(path, body)| path == "/v1/traces" && contains(body, "reconcile") && contains(body, "katib-operator-e2e") && contains(body, "otel"));
        if found { Ok(()) } else { Err(got.iter().map(|(p, b)| format!("{p} {} bytes", b.len())).collect::<Vec<_>>()) }
    })
    .await;
    // Let the operator release its finalizer before it stops, so the namespace can go.
    api.delete("otel", &Default::default()).await.unwrap();
    eventually("the Katib resource deleted", || async {
        match api.get_opt("otel").await {
            Ok(None) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
}
