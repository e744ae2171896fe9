//! The renderer (`kustomize-operator render-server`) as a process, attacked from the network as a
//! neighbour in the cluster could: it reads no body it cannot authenticate, so a flood of large
//! unsigned requests leaves it small and rendering, and a captured signed request is answered once.
//! Needs only the kustomize `e2e/env/build.sh kustomize` builds (no control plane).

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use kubeflow_crds::kfdef::KustomizeRelease;
use kubeflow_e2e::{OperatorProcess, free_port, unique_name};
use kubeflow_manifests::RemoteRenderer;
use kubeflow_manifests::remote::{self, CallerKey};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Each unsigned request's body, as in the attack that found the hole (six of 255 MB at once).
const FLOOD_BODY_BYTES: u64 = 255_000_000;
const FLOODERS: usize = 6;
/// The renderer's peak resident memory may grow by at most this much under the flood. Before the
/// defence, six such requests took it from 20 MB to 1.67 GB.
const MEMORY_BOUND_BYTES: u64 = 64 << 20;

/// A running renderer answering a fresh caller; that caller's client, public key and the
/// renderer's address.
async fn renderer() -> (OperatorProcess, RemoteRenderer, String, String) {
    let key = CallerKey::generate();
    let port = free_port();
    let process = OperatorProcess::renderer(key.public_key(), port);
    process.wait_ready().await;
    let url = format!("http://127.0.0.1:{port}");
    (process, RemoteRenderer::new(&url, key.seed()).unwrap(), key.public_key().to_string(), format!("127.0.0.1:{port}"))
}

/// A fresh directory for one test's files.
fn scratch() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(unique_name("renderer"));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A small package: one ConfigMap.
fn package(root: &Path) -> std::path::PathBuf {
    let package = root.join("package");
    std::fs::create_dir_all(&package).unwrap();
    std::fs::write(package.join("kustomization.yaml"), "generatorOptions: {disableNameSuffixHash: true}\nconfigMapGenerator:\n- name: rendered\n  literals: [a=b]\n").unwrap();
    std::fs::canonicalize(package).unwrap()
}

/// `VmHWM` of process `pid` (its peak resident memory) in bytes.
fn peak_rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).expect("VmHWM in /proc/<pid>/status");
    line.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap() * 1024
}

/// One raw HTTP/1.1 request to `address`; the status line of the answer, if one came before the
/// connection closed.
async fn send(address: &str, head: &str, body: impl AsyncBody) -> Option<String> {
    let stream = tokio::net::TcpStream::connect(address).await.ok()?;
    let (mut reader, mut writer) = stream.into_split();
    let head = head.to_string();
    let writing = tokio::spawn(async move {
        writer.write_all(head.as_bytes()).await?;
        body.write_to(&mut writer).await?;
        // Keeps the sending half open until the answer is read: HTTP/1.1 clients do not half-close.
        std::future::pending::<std::io::Result<()>>().await
    });
    let mut answer = Vec::new();
    let _ = reader.read_to_end(&mut answer).await;
    writing.abort();
    let answer = String::from_utf8_lossy(&answer).to_string();
    answer.lines().next().filter(|l| !l.is_empty()).map(str::to_string).map(|status| format!("{status}\n{}", answer.split_once("\r\n\r\n").map_or("", |(_, b)| b)))
}

trait AsyncBody: Send + 'static {
    fn write_to(self, writer: &mut tokio::net::tcp::OwnedWriteHalf) -> impl std::future::Future<Output = std::io::Result<()>> + Send;
}

/// `n` zero bytes, written in 1 MiB chunks (the sender holds only one).
struct Zeros(u64);

impl AsyncBody for Zeros {
    async fn write_to(self, writer: &mut tokio::net::tcp::OwnedWriteHalf) -> std::io::Result<()> {
        let chunk = vec![0u8; 1 << 20];
        let mut left = self.0;
        while left > 0 {
            let n = left.min(chunk.len() as u64) as usize;
            writer.write_all(&chunk[..n]).await?;
            left -= n as u64;
        }
        Ok(())
    }
}

impl AsyncBody for Vec<u8> {
    async fn write_to(self, writer: &mut tokio::net::tcp::OwnedWriteHalf) -> std::io::Result<()> {
        writer.write_all(&self).await
    }
}

/// The head of a build request with `headers` and a body of `length` bytes.
fn head(address: &str, headers: &http::HeaderMap, length: u64) -> String {
    let mut head = format!("POST /v1/build HTTP/1.1\r\nhost: {address}\r\ncontent-length: {length}\r\nconnection: close\r\n");
    for (name, value) in headers {
        head.push_str(&format!("{name}: {}\r\n", value.to_str().unwrap()));
    }
    head + "\r\n"
}

/// Flooders send unsigned 255 MB requests, one after another, while a signed render runs: the
/// renderer answers each flood request 401 without reading its body, its peak memory stays
/// within the bound, and the signed render succeeds.
#[tokio::test]
async fn a_flood_of_unsigned_bodies_leaves_the_renderer_small_and_rendering() {
    let package = package(&scratch());
    let (process, client, caller, address) = renderer().await;
    let before = peak_rss(process.pid());

    // Shaped like a real request under the real caller's name (a public key is no secret), with a
    // fresh time and nonce, but a signature made without the caller's seed.
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
    let stranger = http::HeaderMap::from_iter(
        [
            ("x-kfop-caller", caller),
            ("x-kfop-time", now.to_string()),
            ("x-kfop-nonce", "0".repeat(32)),
            ("x-kfop-release", "v5".to_string()),
            ("x-kfop-dir", "d".to_string()),
            ("x-kfop-length", FLOOD_BODY_BYTES.to_string()),
            ("x-kfop-body-sha256", "0".repeat(64)),
            ("x-kfop-signature", base64::Engine::encode(&base64::engine::general_purpose::STANDARD, [7u8; 64])),
        ]
        .map(|(name, value)| (http::HeaderName::from_static(name), value.parse().unwrap())),
    );
    let stop = Arc::new(AtomicBool::new(false));
    let (refused, answered_otherwise) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let flooders: Vec<_> = (0..FLOODERS)
        .map(|_| {
            let (stop, refused, otherwise, address, head) = (stop.clone(), refused.clone(), answered_otherwise.clone(), address.clone(), head(&address, &stranger, FLOOD_BODY_BYTES));
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    match send(&address, &head, Zeros(FLOOD_BODY_BYTES)).await {
                        Some(answer) if answer.starts_with("HTTP/1.1 401") => refused.fetch_add(1, Ordering::Relaxed),
                        Some(_) => otherwise.fetch_add(1, Ordering::Relaxed),
                        None => 0,
                    };
                }
            })
        })
        .collect();
    // The flood is on once the renderer has turned some of it away.
    kubeflow_e2e::eventually("flood requests refused", || async { (refused.load(Ordering::Relaxed) >= FLOODERS as u64).then_some(()).ok_or("not yet") }).await;

    let output = client.build(KustomizeRelease::V5, &package, std::slice::from_ref(&package)).await.expect("a signed render during the flood");
    assert!(output.contains("name: rendered"), "{output}");
    stop.store(true, Ordering::Relaxed);
    for flooder in flooders {
        flooder.await.unwrap();
    }

    let after = peak_rss(process.pid());
    let refused = refused.load(Ordering::Relaxed);
    eprintln!("renderer peak RSS {} MiB before the flood, {} MiB after {refused} refused requests of {FLOOD_BODY_BYTES} bytes", before >> 20, after >> 20);
    assert_eq!(answered_otherwise.load(Ordering::Relaxed), 0, "every unsigned request is refused");
    // Its /metrics count each refusal (what the KubeflowRendererRefusals alert reads), and the
    // signed build.
    let counted = process.metric_with_labels("kfop_renderer_requests_total", &[("code", "401")]).await;
    assert!(counted.is_some_and(|n| n >= refused as f64), "kfop_renderer_requests_total{{code=\"401\"}} is {counted:?} after {refused} refusals");
    assert_eq!(process.metric_with_labels("kfop_renderer_requests_total", &[("code", "200")]).await, Some(1.0));
    assert!(after <= before + MEMORY_BOUND_BYTES, "the renderer's peak RSS rose from {before} to {after} bytes under the flood; bound {MEMORY_BOUND_BYTES}");
}

/// A signed request captured on the wire and sent again within the clock window is refused; the
/// same build signed afresh is answered.
#[tokio::test]
async fn a_replayed_request_is_refused() {
    let package = package(&scratch());
    let (_process, client, _, address) = renderer().await;
    let body = remote::pack(std::slice::from_ref(&package), remote::MAX_REQUEST_BYTES).unwrap();
    let dir = package.strip_prefix("/").unwrap().display().to_string();
    let headers = client.sign(KustomizeRelease::V5, &dir, &body).unwrap();
    let captured = head(&address, &headers, body.len() as u64);

    let first = send(&address, &captured, body.clone()).await.expect("an answer");
    assert!(first.starts_with("HTTP/1.1 200") && first.contains("name: rendered"), "{first}");
    let replayed = send(&address, &captured, body.clone()).await.expect("an answer");
    assert!(replayed.starts_with("HTTP/1.1 401") && replayed.contains("a request is answered once"), "{replayed}");
    let fresh = head(&address, &client.sign(KustomizeRelease::V5, &dir, &body).unwrap(), body.len() as u64);
    assert!(send(&address, &fresh, body).await.expect("an answer").starts_with("HTTP/1.1 200"));
}

/// A signed header promising one body and a body that is another (a caller's request tampered with
/// in flight) is refused after the body is read, and nothing is built.
#[tokio::test]
async fn a_body_other_than_the_signed_one_is_refused() {
    let package = package(&scratch());
    let (_process, client, _, address) = renderer().await;
    let body = remote::pack(std::slice::from_ref(&package), remote::MAX_REQUEST_BYTES).unwrap();
    let dir = package.strip_prefix("/").unwrap().display().to_string();
    let headers = client.sign(KustomizeRelease::V5, &dir, &body).unwrap();
    let mut tampered = body.clone();
    let last = tampered.len() - 1;
    tampered[last] ^= 1;
    let answer = send(&address, &head(&address, &headers, body.len() as u64), tampered).await.expect("an answer");
    assert!(answer.starts_with("HTTP/1.1 401") && answer.contains("the body is not the one signed"), "{answer}");
}
