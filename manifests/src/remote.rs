//! Rendering in another process that holds no credential and has no network: the renderer.
//!
//! deploy/ runs the renderer (`kustomize-operator render-server`) as its own pod: no
//! ServiceAccount token mounted, a NetworkPolicy that denies all egress and admits only the
//! kustomize-operator's pods, a read-only root. The operator keeps the credential and the fetch;
//! for each build it sends the inputs kustomize may read (the fetched repository and the render's
//! work directory, [`pack`]) and gets back kustomize's output or its error
//! ([`KustomizeError`]). Inside the renderer kustomize is still confined by [`crate::sandbox`].
//!
//! The wire: `POST /v1/build`, the body a tar of the inputs at their absolute paths less the
//! leading `/` (absolute links inside them made relative), headers naming the kustomize release,
//! the directory to build, the caller's NKey, the time, a one-time nonce, the body's length and
//! SHA-256, and the caller's signature over all of these ([`SignedFields`]). So the renderer
//! authenticates a request from its headers alone, before it reads a byte of the body: a stranger's
//! body is never read, a signed one is read only after it holds a build slot, up to its signed
//! length, into the work volume rather than memory, and must hash as signed. A nonce is answered
//! once ([`ReplayGuard`]); requests outside [`MAX_CLOCK_SKEW_SECS`] are refused. Connections are
//! bounded in number ([`MAX_CONNECTIONS`]) and in the time they may take to send their headers.
//!
//! The caller's key: in a cluster the operator makes it itself, once, into a Secret of its own
//! namespace ([`RENDERER_CALLER_SECRET_ENV`], [`CallerKey`]); the renderer's pods take the public
//! half from that Secret. So every packaging (deploy/all, the standalone deploy/kustomize, the OLM
//! bundle) pairs the two without a key shipped in any manifest.

use std::path::{Component, Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use kubeflow_crds::kfdef::KustomizeRelease;
use sha2::Digest;

use crate::archive::{self, UnpackLimits};
use crate::error::KustomizeError;
use crate::kustomize::Kustomize;

/// Where the operator finds the renderer (e.g. `http://kustomize-renderer.kubeflow-operators.svc:8081`).
pub const RENDERER_URL_ENV: &str = "KFOP_RENDERER_URL";
/// The NKey seed file the operator signs its requests with.
pub const RENDERER_NKEY_FILE_ENV: &str = "KFOP_RENDERER_NKEY_FILE";
/// The public NKeys the renderer answers (comma-separated).
pub const RENDERER_CALLERS_ENV: &str = "KFOP_RENDERER_CALLERS";
/// The renderer's port in deploy/.
pub const RENDERER_PORT: u16 = 8081;
/// Port of the renderer's `/metrics`, apart from [`RENDERER_PORT`]: a monitoring stack may reach
/// it, and only the operator may reach the builds.
pub const RENDERER_METRICS_PORT: u16 = 8082;
/// The Secret (in the operator's own namespace, `POD_NAMESPACE`) holding the operator's caller
/// key: made by the operator when missing, read by the renderer's pods for the public half.
pub const RENDERER_CALLER_SECRET_ENV: &str = "KFOP_RENDERER_CALLER_SECRET";
/// The caller Secret's keys: the seed (only the operator reads it) and the public key.
pub const CALLER_SEED_KEY: &str = "nkey.seed";
pub const CALLER_PUBLIC_KEY: &str = "nkey.pub";

/// The renderer of operator `operator` (`kustomize-operator` → `kustomize-renderer`): its
/// Deployment, ServiceAccount and Service in deploy/ and the bundle.
pub fn renderer_name(operator: &str) -> String {
    format!("{}-renderer", operator.trim_end_matches("-operator"))
}

/// The Secret in which operator `operator` keeps its key for calling its renderer
/// (`kustomize-renderer-caller`): the operator makes it, the renderer reads its public half.
pub fn renderer_caller_secret(operator: &str) -> String {
    format!("{}-caller", renderer_name(operator))
}

/// An operator's key for signing requests to its renderer.
#[derive(Clone)]
pub struct CallerKey {
    seed: String,
    public: String,
}

impl std::fmt::Debug for CallerKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallerKey").field("public", &self.public).finish_non_exhaustive()
    }
}

impl CallerKey {
    /// A new key (an NKey user key pair).
    pub fn generate() -> Self {
        let key = nkeys::KeyPair::new_user();
        CallerKey { seed: key.seed().expect("a generated key has a seed"), public: key.public_key() }
    }

    /// The key a caller Secret holds: both halves present, the seed an NKey seed and the public
    /// key its own. A Secret that fails this is reported, never replaced: someone else wrote it.
    pub fn from_secret_data(secret: &str, seed: Option<&[u8]>, public: Option<&[u8]>) -> Result<Self, String> {
        let text = |key: &str, value: Option<&[u8]>| {
            let value = value.ok_or_else(|| format!("Secret {secret}: key {key} is missing"))?;
            std::str::from_utf8(value).map(|v| v.trim().to_string()).map_err(|_| format!("Secret {secret}: {key} is not text"))
        };
        let (seed, public) = (text(CALLER_SEED_KEY, seed)?, text(CALLER_PUBLIC_KEY, public)?);
        let key = nkeys::KeyPair::from_seed(&seed).map_err(|e| format!("Secret {secret}: {CALLER_SEED_KEY} is not an NKey seed ({e})"))?;
        if key.public_key() != public {
            return Err(format!("Secret {secret}: {CALLER_PUBLIC_KEY} is not the public key of {CALLER_SEED_KEY}; delete the Secret to have the operator make a new key, then restart the renderer"));
        }
        Ok(CallerKey { seed, public })
    }

    pub fn seed(&self) -> &str {
        &self.seed
    }

    pub fn public_key(&self) -> &str {
        &self.public
    }
}

const BUILD_PATH: &str = "/v1/build";
const HEALTH_PATH: &str = "/healthz";
const READY_PATH: &str = "/readyz";
const RELEASE_HEADER: &str = "x-kfop-release";
const DIR_HEADER: &str = "x-kfop-dir";
const CALLER_HEADER: &str = "x-kfop-caller";
const TIME_HEADER: &str = "x-kfop-time";
const NONCE_HEADER: &str = "x-kfop-nonce";
const LENGTH_HEADER: &str = "x-kfop-length";
const BODY_SHA256_HEADER: &str = "x-kfop-body-sha256";
const SIGNATURE_HEADER: &str = "x-kfop-signature";
/// What a signature covers besides the fields, so that it means nothing elsewhere.
const SIGNATURE_CONTEXT: &str = "kubeflow-operator render v2";

/// Largest request body: the packed inputs of one build.
pub const MAX_REQUEST_BYTES: u64 = 256 << 20;
/// Most entries (files, directories, links) in one request.
pub const MAX_REQUEST_ENTRIES: u64 = 200_000;
/// How far a request's time may be from the renderer's.
pub const MAX_CLOCK_SKEW_SECS: u64 = 300;
/// How long a request waits for a free build slot before it is turned away (503).
const QUEUE_WAIT: Duration = Duration::from_secs(60);
/// Connections open at once, signed or not; the next waits to be accepted.
pub const MAX_CONNECTIONS: usize = 32;
/// How long a connection may take to send a request's headers before it is closed.
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a signed caller may take to send its body once it holds a build slot.
const BODY_READ_TIMEOUT: Duration = Duration::from_secs(120);
/// Nonces remembered at once. Only signed requests are remembered, each for twice the clock skew,
/// so this bounds a caller's rate (about 160 a second), not a stranger's.
const MAX_REMEMBERED_NONCES: usize = 100_000;

fn now_secs() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// What a caller signs: every header of a build request but the caller and the signature, and the
/// body by its length and SHA-256, so the signature is checked before the body is read.
#[derive(Debug, PartialEq)]
struct SignedFields<'a> {
    time: u64,
    /// 32 hex digits, chosen at random per request.
    nonce: &'a str,
    release: KustomizeRelease,
    dir: &'a str,
    length: u64,
    /// 64 lower-case hex digits.
    body_sha256: &'a str,
}

impl SignedFields<'_> {
    /// The text a caller signs.
    fn message(&self) -> String {
        let SignedFields { time, nonce, release, dir, length, body_sha256 } = self;
        format!("{SIGNATURE_CONTEXT}\n{time}\n{nonce}\n{}\n{dir}\n{length}\n{body_sha256}", release.as_str())
    }
}

fn is_hex(text: &str, digits: usize) -> bool {
    text.len() == digits && text.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

fn parse_release(text: &str) -> Option<KustomizeRelease> {
    KustomizeRelease::ALL.into_iter().find(|r| r.as_str() == text)
}

// --- the operator's side ------------------------------------------------------------------------

/// `to` relative to directory `from` (both absolute and clean).
fn relative_to(from: &Path, to: &Path) -> PathBuf {
    let (from, to): (Vec<_>, Vec<_>) = (from.components().collect(), to.components().collect());
    let common = from.iter().zip(&to).take_while(|(a, b)| a == b).count();
    let mut out = PathBuf::new();
    for _ in common..from.len() {
        out.push("..");
    }
    for c in &to[common..] {
        out.push(c.as_os_str());
    }
    out
}

/// The tar the renderer unpacks: every entry under each of `roots` (canonical directories) at its
/// absolute path less the leading `/`, in a fixed order. A symlink to an absolute path inside the
/// roots becomes relative, so it resolves the same under the renderer's directory; one to
/// anywhere else is left out (the sandbox would refuse to follow it anyway).
pub fn pack(roots: &[PathBuf], max_bytes: u64) -> Result<Vec<u8>, String> {
    let mut builder = tar::Builder::new(Vec::new());
    builder.follow_symlinks(false);
    let (mut bytes, mut entries) = (0u64, 0u64);
    let io = |path: &Path, e: &dyn std::fmt::Display| format!("packing {}: {e}", path.display());
    for root in roots {
        for entry in walkdir::WalkDir::new(root).follow_links(false).sort_by_file_name() {
            let entry = entry.map_err(|e| io(root, &e))?;
            let path = entry.path();
            let name = path.strip_prefix("/").map_err(|_| format!("{} is not an absolute path", path.display()))?;
            entries += 1;
            if entries > MAX_REQUEST_ENTRIES {
                return Err(format!("the render's inputs have more than {MAX_REQUEST_ENTRIES} entries"));
            }
            let mut header = tar::Header::new_gnu();
            header.set_mtime(0);
            header.set_uid(0);
            header.set_gid(0);
            let file_type = entry.file_type();
            if file_type.is_dir() {
                header.set_entry_type(tar::EntryType::Directory);
                header.set_mode(0o755);
                header.set_size(0);
                builder.append_data(&mut header, name, std::io::empty()).map_err(|e| io(path, &e))?;
            } else if file_type.is_file() {
                let metadata = entry.metadata().map_err(|e| io(path, &e))?;
                bytes += metadata.len();
                if bytes > max_bytes {
                    return Err(format!("the render's inputs exceed {max_bytes} bytes"));
                }
                use std::os::unix::fs::PermissionsExt;
                header.set_entry_type(tar::EntryType::Regular);
                header.set_mode(if metadata.permissions().mode() & 0o111 != 0 { 0o755 } else { 0o644 });
                header.set_size(metadata.len());
                let file = std::fs::File::open(path).map_err(|e| io(path, &e))?;
                builder.append_data(&mut header, name, file).map_err(|e| io(path, &e))?;
            } else if file_type.is_symlink() {
                let target = std::fs::read_link(path).map_err(|e| io(path, &e))?;
                let target = if target.is_absolute() {
                    match roots.iter().any(|r| target.starts_with(r)) && target.components().all(|c| c != Component::ParentDir) {
                        true => relative_to(path.parent().expect("an entry under a root has a parent"), &target),
                        false => continue,
                    }
                } else {
                    target
                };
                header.set_entry_type(tar::EntryType::Symlink);
                header.set_mode(0o777);
                header.set_size(0);
                builder.append_link(&mut header, name, &target).map_err(|e| io(path, &e))?;
            }
        }
    }
    builder.into_inner().map_err(|e| format!("packing the render's inputs: {e}"))
}

/// A fresh nonce: 16 random bytes in hex.
fn new_nonce() -> Result<String, String> {
    let mut bytes = [0u8; 16];
    getrandom::getrandom(&mut bytes).map_err(|e| format!("choosing a nonce: {e}"))?;
    Ok(hex(&bytes))
}

/// The headers of a build request for `body` at `time`, signed with `key`.
fn signed_headers(key: &nkeys::KeyPair, time: u64, release: KustomizeRelease, dir: &str, body: &[u8]) -> Result<HeaderMap, String> {
    use base64::Engine;
    let (nonce, body_sha256) = (new_nonce()?, hex(&sha2::Sha256::digest(body)));
    let fields = SignedFields { time, nonce: &nonce, release, dir, length: body.len() as u64, body_sha256: &body_sha256 };
    let signature = key.sign(fields.message().as_bytes()).map_err(|e| format!("signing: {e}"))?;
    let mut headers = HeaderMap::new();
    let mut set = |name: &'static str, value: String| -> Result<(), String> {
        headers.insert(name, value.parse().map_err(|_| format!("{name}: {value:?} cannot be a header value"))?);
        Ok(())
    };
    set(RELEASE_HEADER, release.as_str().to_string())?;
    set(DIR_HEADER, dir.to_string())?;
    set(CALLER_HEADER, key.public_key())?;
    set(TIME_HEADER, time.to_string())?;
    set(NONCE_HEADER, nonce.clone())?;
    set(LENGTH_HEADER, body.len().to_string())?;
    set(BODY_SHA256_HEADER, body_sha256.clone())?;
    set(SIGNATURE_HEADER, base64::engine::general_purpose::STANDARD.encode(signature))?;
    Ok(headers)
}

/// The operator's client of the renderer.
#[derive(Clone)]
pub struct RemoteRenderer {
    url: String,
    key: Arc<nkeys::KeyPair>,
    http: reqwest::Client,
    /// Whole request, including the renderer's own bound on kustomize (120 s).
    timeout: Duration,
}

impl std::fmt::Debug for RemoteRenderer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteRenderer").field("url", &self.url).field("caller", &self.key.public_key()).finish()
    }
}

impl RemoteRenderer {
    /// The renderer at `url` (`http://host:port`), signing as the NKey `seed`.
    pub fn new(url: &str, seed: &str) -> Result<Self, String> {
        let key = nkeys::KeyPair::from_seed(seed.trim()).map_err(|e| format!("not an NKey seed: {e}"))?;
        let parsed = reqwest::Url::parse(url).map_err(|e| format!("{url:?} is not a URL: {e}"))?;
        if parsed.scheme() != "http" || parsed.host_str().is_none() {
            return Err(format!("{url:?}: expected http://<host>:<port> (the renderer's Service)"));
        }
        crate::install_crypto_provider();
        let http = reqwest::Client::builder().no_proxy().build().map_err(|e| e.to_string())?;
        Ok(RemoteRenderer { url: url.trim_end_matches('/').to_string(), key: Arc::new(key), http, timeout: Duration::from_secs(180) })
    }

    /// From [`RENDERER_URL_ENV`] and the seed in [`RENDERER_NKEY_FILE_ENV`]; `None` without a URL.
    pub fn from_env() -> Option<Result<Self, String>> {
        let url = std::env::var(RENDERER_URL_ENV).ok().filter(|u| !u.is_empty())?;
        let Some(file) = std::env::var_os(RENDERER_NKEY_FILE_ENV) else {
            return Some(Err(format!("{RENDERER_URL_ENV} is set but {RENDERER_NKEY_FILE_ENV} (the seed to sign requests with) is not")));
        };
        let seed = match std::fs::read_to_string(&file) {
            Ok(seed) => seed,
            Err(e) => return Some(Err(format!("reading {}: {e}", PathBuf::from(file).display()))),
        };
        Some(Self::new(&url, &seed))
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    /// Where build requests go (`<url>/v1/build`).
    pub fn build_url(&self) -> String {
        format!("{}{BUILD_PATH}", self.url)
    }

    /// The headers of one build request of `dir` (relative to the unpacked `body`) with `release`,
    /// signed now with a fresh nonce. [`RemoteRenderer::build`] sends them; a test can send the same
    /// request twice.
    pub fn sign(&self, release: KustomizeRelease, dir: &str, body: &[u8]) -> Result<HeaderMap, String> {
        signed_headers(&self.key, now_secs(), release, dir, body)
    }

    fn refused(&self, error: impl Into<String>) -> KustomizeError {
        KustomizeError::Renderer { url: self.url.clone(), error: error.into() }
    }

    /// `kustomize build <dir>` with `release` in the renderer, which may read only `roots`.
    pub async fn build(&self, release: KustomizeRelease, dir: &Path, roots: &[PathBuf]) -> Result<String, KustomizeError> {
        let canonical = |p: &Path| std::fs::canonicalize(p).map_err(|e| self.refused(format!("resolving {}: {e}", p.display())));
        let dir = canonical(dir)?;
        let roots = roots.iter().map(|r| canonical(r)).collect::<Result<Vec<_>, _>>()?;
        let packed = tokio::task::spawn_blocking(move || pack(&roots, MAX_REQUEST_BYTES)).await.map_err(|e| self.refused(e.to_string()))?.map_err(|e| self.refused(e))?;
        let dir = dir.strip_prefix("/").expect("canonical paths are absolute").display().to_string();
        let headers = self.sign(release, &dir, &packed).map_err(|e| self.refused(e))?;
        let response = self
            .http
            .post(self.build_url())
            .headers(headers)
            .body(packed)
            .timeout(self.timeout)
            .send()
            .await
            .map_err(|e| self.refused(e.to_string()))?;
        let status = response.status();
        let body = response.bytes().await.map_err(|e| self.refused(e.to_string()))?;
        match status {
            StatusCode::OK => String::from_utf8(body.to_vec()).map_err(|e| self.refused(format!("output is not UTF-8: {e}"))),
            StatusCode::UNPROCESSABLE_ENTITY => Err(serde_json::from_slice::<KustomizeError>(&body).unwrap_or_else(|e| self.refused(format!("unreadable answer: {e}")))),
            _ => Err(self.refused(format!("{status}: {}", String::from_utf8_lossy(&body[..body.len().min(1024)])))),
        }
    }
}

// --- the renderer's side ------------------------------------------------------------------------

/// What the renderer builds with and whom it answers.
pub struct ServerConfig {
    pub v3: Kustomize,
    /// kubeflow/manifests 1.3 to 1.6's release, when found.
    pub v3_2: Option<Kustomize>,
    pub v5: Option<Kustomize>,
    /// Public NKeys (`U…`) of the callers it answers.
    pub callers: Vec<String>,
    /// Where each build's inputs are unpacked (the pod's emptyDir).
    pub work_root: PathBuf,
    /// Builds at once; more wait up to a minute, then get 503.
    pub concurrency: usize,
}

/// What the renderer counts, served at `/metrics` on its own port: every answer to a build
/// request by HTTP status (401: a caller that is not its operator or a replay; 413, 400: refused
/// input; 503: every slot or the replay memory full), and the connections it holds.
#[derive(Debug)]
pub struct RendererMetrics {
    registry: prometheus_client::registry::Registry,
    answers: prometheus_client::metrics::family::Family<AnswerLabels, prometheus_client::metrics::counter::Counter>,
    connections: prometheus_client::metrics::gauge::Gauge,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, prometheus_client::encoding::EncodeLabelSet)]
struct AnswerLabels {
    code: u16,
}

impl Default for RendererMetrics {
    fn default() -> Self {
        let mut registry = prometheus_client::registry::Registry::with_prefix("kfop_renderer");
        let (answers, connections) = (prometheus_client::metrics::family::Family::<AnswerLabels, prometheus_client::metrics::counter::Counter>::default(), prometheus_client::metrics::gauge::Gauge::default());
        let most = prometheus_client::metrics::gauge::Gauge::<i64>::default();
        most.set(MAX_CONNECTIONS as i64);
        registry.register("requests", "Build requests answered, by HTTP status", answers.clone());
        registry.register("connections_open", "Connections the renderer holds", connections.clone());
        registry.register("connections_max", "Connections the renderer holds at most; more wait to be accepted", most);
        Self { registry, answers, connections }
    }
}

impl RendererMetrics {
    fn answered(&self, status: StatusCode) {
        self.answers.get_or_create(&AnswerLabels { code: status.as_u16() }).inc();
    }

    /// The OpenMetrics text of every metric.
    pub fn render(&self) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry).expect("encoding into a String does not fail");
        out
    }
}

/// The renderer process's metrics.
pub static RENDERER_METRICS: std::sync::LazyLock<RendererMetrics> = std::sync::LazyLock::new(RendererMetrics::default);

struct ServerState {
    config: ServerConfig,
    slots: tokio::sync::Semaphore,
    replays: ReplayGuard,
}

/// The renderer's routes: `POST /v1/build`, `GET /healthz` and `/readyz`. [`serve_on`] serves them
/// with the connection bounds.
pub fn router(config: ServerConfig) -> axum::Router {
    let slots = tokio::sync::Semaphore::new(config.concurrency.max(1));
    let state = Arc::new(ServerState { config, slots, replays: ReplayGuard::default() });
    axum::Router::new()
        .route(BUILD_PATH, axum::routing::post(build))
        .route(HEALTH_PATH, axum::routing::get(|| async { "ok" }))
        .route(READY_PATH, axum::routing::get(|| async { "ok" }))
        .with_state(state)
}

fn answer(status: StatusCode, text: impl Into<String>) -> Response {
    (status, text.into()).into_response()
}

/// The nonces of signed requests still inside the clock window: a request is answered once.
#[derive(Default)]
struct ReplayGuard {
    /// (caller, nonce) → the request's signed time.
    seen: std::sync::Mutex<std::collections::HashMap<(String, String), u64>>,
}

impl ReplayGuard {
    /// Records the first use of `nonce` by `caller` in a request signed at `time`; refuses a second.
    fn first_use(&self, caller: &str, nonce: &str, time: u64, now: u64) -> Result<(), Response> {
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        // A request signed at t is accepted until t + skew: its nonce is needed no longer.
        seen.retain(|_, signed| *signed + MAX_CLOCK_SKEW_SECS >= now);
        let key = (caller.to_string(), nonce.to_string());
        if seen.contains_key(&key) {
            return Err(answer(StatusCode::UNAUTHORIZED, format!("{NONCE_HEADER} {nonce} was used before: a request is answered once")));
        }
        if seen.len() >= MAX_REMEMBERED_NONCES {
            return Err(([("retry-after", "10")], answer(StatusCode::SERVICE_UNAVAILABLE, "too many requests inside the clock window")).into_response());
        }
        seen.insert(key, time);
        Ok(())
    }
}

/// A request whose headers its caller signed: what to build, and the body it promised.
#[derive(Debug, PartialEq)]
struct Authorized {
    release: KustomizeRelease,
    dir: PathBuf,
    length: u64,
    body_sha256: String,
}

/// Checks who sent the request from its headers alone: a known caller, in time, with a fresh
/// nonce, whose signature covers every field, the body's length and its hash. Nothing of the body
/// has been read.
fn authenticate(callers: &[String], replays: &ReplayGuard, headers: &HeaderMap, now: u64) -> Result<Authorized, Response> {
    let unauthorized = |text: String| answer(StatusCode::UNAUTHORIZED, text);
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).ok_or_else(|| unauthorized(format!("header {name} is missing")));
    let caller = header(CALLER_HEADER)?;
    if !callers.iter().any(|c| c == caller) {
        return Err(unauthorized(format!("caller {caller} is not one this renderer answers")));
    }
    let time: u64 = header(TIME_HEADER)?.parse().map_err(|_| unauthorized(format!("{TIME_HEADER}: expected seconds since the epoch")))?;
    if now.abs_diff(time) > MAX_CLOCK_SKEW_SECS {
        return Err(unauthorized(format!("{TIME_HEADER} is more than {MAX_CLOCK_SKEW_SECS} s from the renderer's clock")));
    }
    let nonce = header(NONCE_HEADER)?;
    if !is_hex(nonce, 32) {
        return Err(unauthorized(format!("{NONCE_HEADER}: expected 32 lower-case hex digits")));
    }
    let release_text = header(RELEASE_HEADER)?;
    let release = parse_release(release_text).ok_or_else(|| answer(StatusCode::BAD_REQUEST, format!("{RELEASE_HEADER}: {release_text:?} is not v3, v3.2 or v5")))?;
    let dir = header(DIR_HEADER)?;
    let length: u64 = header(LENGTH_HEADER)?.parse().map_err(|_| answer(StatusCode::BAD_REQUEST, format!("{LENGTH_HEADER}: expected the body's length in bytes")))?;
    let body_sha256 = header(BODY_SHA256_HEADER)?;
    if !is_hex(body_sha256, 64) {
        return Err(answer(StatusCode::BAD_REQUEST, format!("{BODY_SHA256_HEADER}: expected 64 lower-case hex digits")));
    }
    use base64::Engine;
    let signature = base64::engine::general_purpose::STANDARD.decode(header(SIGNATURE_HEADER)?).map_err(|_| unauthorized(format!("{SIGNATURE_HEADER} is not base64")))?;
    let fields = SignedFields { time, nonce, release, dir, length, body_sha256 };
    let key = nkeys::KeyPair::from_public_key(caller).map_err(|e| unauthorized(format!("{caller}: {e}")))?;
    key.verify(fields.message().as_bytes(), &signature).map_err(|_| unauthorized("the signature does not match the request".into()))?;
    // Signed: from here on the caller is known, and only its requests take memory.
    replays.first_use(caller, nonce, time, now)?;
    if length > MAX_REQUEST_BYTES {
        return Err(answer(StatusCode::PAYLOAD_TOO_LARGE, format!("{LENGTH_HEADER}: {length} bytes is more than the {MAX_REQUEST_BYTES} a build may send")));
    }
    let declared = headers.get(axum::http::header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|d| d != length) {
        return Err(answer(StatusCode::BAD_REQUEST, format!("content-length is not the signed {LENGTH_HEADER} {length}")));
    }
    let dir = archive::safe_relative(Path::new(dir)).map_err(|r| answer(StatusCode::BAD_REQUEST, format!("{DIR_HEADER}: {r}")))?;
    Ok(Authorized { release, dir, length, body_sha256: body_sha256.to_string() })
}

async fn build(state: State<Arc<ServerState>>, headers: HeaderMap, body: axum::body::Body) -> Response {
    let response = answer_build(state, headers, body).await;
    RENDERER_METRICS.answered(response.status());
    response
}

async fn answer_build(State(state): State<Arc<ServerState>>, headers: HeaderMap, body: axum::body::Body) -> Response {
    // The body is not read unless the headers are signed: a stranger's bytes never reach memory.
    let request = match authenticate(&state.config.callers, &state.replays, &headers, now_secs()) {
        Ok(request) => request,
        Err(refused) => return refused,
    };
    // A slot before a byte of the body: at most `concurrency` bodies are in flight.
    let _slot = match tokio::time::timeout(QUEUE_WAIT, state.slots.acquire()).await {
        Ok(Ok(slot)) => slot,
        _ => return ([("retry-after", "10")], answer(StatusCode::SERVICE_UNAVAILABLE, "every build slot is busy")).into_response(),
    };
    match run_build(&state.config, &request, body).await {
        Ok(output) => (StatusCode::OK, output).into_response(),
        Err(BuildFailure::BadInput(status, reason)) => answer(status, reason),
        Err(BuildFailure::Internal(reason)) => answer(StatusCode::INTERNAL_SERVER_ERROR, reason),
        Err(BuildFailure::Kustomize(error)) => {
            let json = serde_json::to_string(&error).expect("errors serialise");
            (StatusCode::UNPROCESSABLE_ENTITY, [("content-type", "application/json")], json).into_response()
        }
    }
}

enum BuildFailure {
    /// The request's body is not what was signed, or not a tree the renderer accepts.
    BadInput(StatusCode, String),
    /// The renderer's own trouble (its work volume).
    Internal(String),
    Kustomize(KustomizeError),
}

/// Streams `body` into `file`: at most the signed length, within [`BODY_READ_TIMEOUT`], hashing as
/// it goes; the body must be exactly what was signed.
async fn receive_body(mut body: axum::body::Body, file: &Path, request: &Authorized) -> Result<(), BuildFailure> {
    use axum::body::HttpBody;
    use tokio::io::AsyncWriteExt;
    let internal = |e: std::io::Error| BuildFailure::Internal(format!("writing the inputs under {}: {e}", file.display()));
    let mut out = tokio::fs::File::create(file).await.map_err(internal)?;
    let (mut hasher, mut received) = (sha2::Sha256::new(), 0u64);
    let receive = async {
        while let Some(frame) = std::future::poll_fn(|cx| std::pin::Pin::new(&mut body).poll_frame(cx)).await {
            let frame = frame.map_err(|e| BuildFailure::BadInput(StatusCode::BAD_REQUEST, format!("reading the body: {e}")))?;
            let Ok(data) = frame.into_data() else { continue };
            received += data.len() as u64;
            if received > request.length {
                return Err(BuildFailure::BadInput(StatusCode::PAYLOAD_TOO_LARGE, format!("the body is longer than the signed {LENGTH_HEADER} {}", request.length)));
            }
            hasher.update(&data);
            out.write_all(&data).await.map_err(internal)?;
        }
        out.flush().await.map_err(internal)
    };
    tokio::time::timeout(BODY_READ_TIMEOUT, receive)
        .await
        .map_err(|_| BuildFailure::BadInput(StatusCode::REQUEST_TIMEOUT, format!("the body took longer than {} s", BODY_READ_TIMEOUT.as_secs())))??;
    if received != request.length || hex(&hasher.finalize()) != request.body_sha256 {
        return Err(BuildFailure::BadInput(StatusCode::UNAUTHORIZED, "the body is not the one signed".into()));
    }
    Ok(())
}

/// Receives the inputs into a fresh directory (removed afterwards), unpacks them and builds the
/// request's directory in it.
async fn run_build(config: &ServerConfig, request: &Authorized, body: axum::body::Body) -> Result<String, BuildFailure> {
    let kustomize = match request.release {
        KustomizeRelease::V3 => &config.v3,
        KustomizeRelease::V3_2 => config.v3_2.as_ref().ok_or_else(|| {
            BuildFailure::Kustomize(KustomizeError::NotFound { path: PathBuf::from("kustomize-v3.2"), hint: "this renderer has no kustomize v3.2.0".into() })
        })?,
        KustomizeRelease::V5 => config.v5.as_ref().ok_or_else(|| {
            BuildFailure::Kustomize(KustomizeError::NotFound { path: PathBuf::from("kustomize-v5"), hint: "this renderer has no kustomize v5".into() })
        })?,
    };
    let internal = |e: std::io::Error| BuildFailure::Internal(format!("creating a work directory under {}: {e}", config.work_root.display()));
    std::fs::create_dir_all(&config.work_root).map_err(internal)?;
    let work = tempfile::Builder::new().prefix("build-").tempdir_in(&config.work_root).map_err(internal)?;
    let (tree, home, inputs) = (work.path().join("tree"), work.path().join("home"), work.path().join("inputs.tar"));
    for d in [&tree, &home] {
        std::fs::create_dir_all(d).map_err(internal)?;
    }
    receive_body(body, &inputs, request).await?;
    let unpack_into = tree.clone();
    tokio::task::spawn_blocking(move || {
        let limits = UnpackLimits { max_bytes: MAX_REQUEST_BYTES, max_entries: MAX_REQUEST_ENTRIES };
        let file = std::fs::File::open(&inputs).map_err(|e| crate::error::RepoErrorReason::Io(format!("reading the inputs: {e}")))?;
        let unpacked = archive::unpack_tar(std::io::BufReader::new(file), &unpack_into, limits);
        let _ = std::fs::remove_file(&inputs);
        unpacked
    })
    .await
    .map_err(|e| BuildFailure::Internal(e.to_string()))?
    .map_err(|e| BuildFailure::BadInput(StatusCode::BAD_REQUEST, format!("the inputs: {e}")))?;
    let output = kustomize.build(&tree.join(&request.dir), &home, std::slice::from_ref(&tree)).await;
    // Paths in kustomize's messages as the caller knows them.
    let prefix = format!("{}/", tree.display());
    output.map_err(|e| {
        BuildFailure::Kustomize(match e {
            KustomizeError::Failed { status, stderr } => KustomizeError::Failed { status, stderr: stderr.replace(&prefix, "/") },
            other => other,
        })
    })
}

/// Serves `config`'s routes on `listener` until `shutdown` completes: at most [`MAX_CONNECTIONS`]
/// connections at once (the next waits to be accepted), each closed when it takes longer than
/// [`HEADER_READ_TIMEOUT`] to send a request's headers. HTTP/1.1 only, as the operator calls.
pub async fn serve_on(listener: tokio::net::TcpListener, config: ServerConfig, shutdown: impl std::future::Future<Output = ()> + Send + 'static) {
    use tower::ServiceExt;
    let router = router(config);
    let connections = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            _ = &mut shutdown => return,
            accepted = async {
                let permit = connections.clone().acquire_owned().await.expect("the semaphore is never closed");
                (permit, listener.accept().await)
            } => accepted,
        };
        let (permit, stream) = match accepted {
            (permit, Ok((stream, _))) => (permit, stream),
            (_, Err(e)) => {
                tracing::warn!(error = %e, "accepting a connection");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let router = router.clone();
        let open = connections.clone();
        RENDERER_METRICS.connections.set((MAX_CONNECTIONS - open.available_permits()) as i64);
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |request: axum::http::Request<hyper::body::Incoming>| router.clone().oneshot(request.map(axum::body::Body::new)));
            let mut http = hyper::server::conn::http1::Builder::new();
            http.timer(hyper_util::rt::TokioTimer::new()).header_read_timeout(HEADER_READ_TIMEOUT);
            if let Err(e) = http.serve_connection(hyper_util::rt::TokioIo::new(stream), service).await {
                tracing::debug!(error = %e, "renderer connection");
            }
            drop(permit);
            RENDERER_METRICS.connections.set((MAX_CONNECTIONS - open.available_permits()) as i64);
        });
    }
}

/// How `kustomize-operator render-server` runs (its command line).
#[derive(clap::Args, Debug, Clone)]
pub struct ServerArgs {
    /// Address to listen on.
    #[arg(long, default_value_t = std::net::SocketAddr::from(([0, 0, 0, 0], RENDERER_PORT)))]
    pub listen: std::net::SocketAddr,
    /// Public NKeys (U…) of the callers to answer, comma-separated: deploy/ gives it the public
    /// half of the operator's caller Secret ([`RENDERER_CALLER_SECRET_ENV`]).
    #[arg(long, env = RENDERER_CALLERS_ENV, value_delimiter = ',', required = true)]
    pub callers: Vec<String>,
    /// Builds at once; more wait up to a minute, then get 503.
    #[arg(long, default_value_t = 2)]
    pub concurrency: usize,
    /// Where each build's inputs are unpacked (default: the temporary directory).
    #[arg(long)]
    pub work_dir: Option<PathBuf>,
    /// This process has no network route (deploy/'s NetworkPolicy denies the pod's egress): render
    /// even where kustomize cannot raise a network wall of its own (see `sandbox`).
    #[arg(long)]
    pub no_network_route: bool,
}

/// Runs the renderer until `shutdown` completes.
pub async fn serve(args: ServerArgs, shutdown: impl std::future::Future<Output = ()> + Send + 'static) -> Result<(), String> {
    if args.no_network_route {
        crate::sandbox::network_walled_outside();
    }
    for caller in &args.callers {
        nkeys::KeyPair::from_public_key(caller).map_err(|e| format!("--callers: {caller:?} is not a public NKey: {e}"))?;
    }
    let v3 = Kustomize::locate_release(KustomizeRelease::V3).await.map_err(|e| e.to_string())?;
    let v3_2 = Kustomize::locate_release(KustomizeRelease::V3_2).await.map_err(|e| tracing::warn!(error = %e, "no kustomize v3.2.0")).ok();
    let v5 = Kustomize::locate_release(KustomizeRelease::V5).await.map_err(|e| tracing::warn!(error = %e, "no kustomize v5")).ok();
    let work_root = args.work_dir.unwrap_or_else(std::env::temp_dir);
    let config = ServerConfig { v3, v3_2, v5, callers: args.callers, work_root, concurrency: args.concurrency };
    let listener = tokio::net::TcpListener::bind(args.listen).await.map_err(|e| format!("listening on {}: {e}", args.listen))?;
    tracing::info!(address = %args.listen, "renderer listening");
    serve_on(listener, config, shutdown).await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_caller_secret_is_used_only_when_its_halves_belong_together() {
        let key = CallerKey::generate();
        assert!(key.public_key().starts_with('U'), "{key:?}");
        let read = CallerKey::from_secret_data("ops/caller", Some(format!("{}\n", key.seed()).as_bytes()), Some(key.public_key().as_bytes())).unwrap();
        assert_eq!((read.seed(), read.public_key()), (key.seed(), key.public_key()));
        assert!(!format!("{read:?}").contains(key.seed()), "the seed stays out of logs");
        let other = CallerKey::generate();
        let refused = |seed: Option<&str>, public: Option<&str>| CallerKey::from_secret_data("ops/caller", seed.map(str::as_bytes), public.map(str::as_bytes)).unwrap_err();
        let mismatch = refused(Some(key.seed()), Some(other.public_key()));
        assert!(mismatch.contains("Secret ops/caller: nkey.pub is not the public key of nkey.seed"), "{mismatch}");
        assert_eq!(refused(None, Some(key.public_key())), "Secret ops/caller: key nkey.seed is missing");
        assert_eq!(refused(Some(key.seed()), None), "Secret ops/caller: key nkey.pub is missing");
        assert!(refused(Some(key.public_key()), Some(key.public_key())).starts_with("Secret ops/caller: nkey.seed is not an NKey seed"));
        let not_text = CallerKey::from_secret_data("ops/caller", Some(&[0xff, 0xfe]), Some(key.public_key().as_bytes())).unwrap_err();
        assert_eq!(not_text, "Secret ops/caller: nkey.seed is not text");
    }

    #[test]
    fn relative_links_resolve_where_the_absolute_ones_did() {
        assert_eq!(relative_to(Path::new("/w/render-1/tree/apps"), Path::new("/cache/repo/common")), PathBuf::from("../../../../cache/repo/common"));
        assert_eq!(relative_to(Path::new("/cache/repo/a"), Path::new("/cache/repo/b/c")), PathBuf::from("../b/c"));
    }

    fn refusal<T: std::fmt::Debug>(result: Result<T, Response>) -> (StatusCode, String) {
        let response = result.expect_err("refused");
        let status = response.status();
        let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let body = runtime.block_on(axum::body::to_bytes(response.into_body(), 4096)).unwrap();
        (status, String::from_utf8(body.to_vec()).unwrap())
    }

    #[test]
    fn a_request_is_answered_only_when_its_caller_signed_its_headers() {
        let (key, stranger) = (nkeys::KeyPair::new_user(), nkeys::KeyPair::new_user());
        let callers = vec![key.public_key()];
        let (now, body) = (1_000_000, b"the tree".as_slice());
        let signed = |key: &nkeys::KeyPair, time: u64, dir: &str| signed_headers(key, time, KustomizeRelease::V5, dir, body).unwrap();
        let check = |headers: &HeaderMap, now: u64| authenticate(&callers, &ReplayGuard::default(), headers, now);

        let request = check(&signed(&key, now, "tmp/work/x"), now).unwrap();
        let sha = hex(&sha2::Sha256::digest(body));
        assert_eq!(request, Authorized { release: KustomizeRelease::V5, dir: PathBuf::from("tmp/work/x"), length: 8, body_sha256: sha });

        let (status, text) = refusal(check(&signed(&stranger, now, "d"), now));
        assert_eq!(status, StatusCode::UNAUTHORIZED);
        assert!(text.contains("not one this renderer answers"), "{text}");
        // Any signed field changed, or another key's signature under the caller's name: refused.
        for (name, value) in [(DIR_HEADER, "e".to_string()), (LENGTH_HEADER, "9".to_string()), (BODY_SHA256_HEADER, hex(&sha2::Sha256::digest(b"another"))), (NONCE_HEADER, "0".repeat(32)), (RELEASE_HEADER, "v3".to_string())] {
            let mut moved = signed(&key, now, "d");
            moved.insert(name, value.parse().unwrap());
            assert_eq!(refusal(check(&moved, now)), (StatusCode::UNAUTHORIZED, "the signature does not match the request".to_string()), "{name}");
        }
        let mut forged = signed(&stranger, now, "d");
        forged.insert(CALLER_HEADER, key.public_key().parse().unwrap());
        assert_eq!(refusal(check(&forged, now)).1, "the signature does not match the request");
        // Sent later than the clock skew allows.
        let (status, text) = refusal(check(&signed(&key, now, "d"), now + MAX_CLOCK_SKEW_SECS + 1));
        assert_eq!(status, StatusCode::UNAUTHORIZED);
        assert!(text.contains("from the renderer's clock"), "{text}");
        // Signed, but a directory outside the tree.
        let (status, text) = refusal(check(&signed(&key, now, "../etc"), now));
        assert_eq!((status, text.as_str()), (StatusCode::BAD_REQUEST, "x-kfop-dir: path contains '..'"));
        for header in [SIGNATURE_HEADER, NONCE_HEADER, LENGTH_HEADER, BODY_SHA256_HEADER] {
            let mut unsigned = signed(&key, now, "d");
            unsigned.remove(header);
            assert_eq!(refusal(check(&unsigned, now)).1, format!("header {header} is missing"));
        }
        // A signed promise of more than a build may send.
        let mut large = signed_headers(&key, now, KustomizeRelease::V5, "d", b"").unwrap();
        let too_long = MAX_REQUEST_BYTES + 1;
        let fields = SignedFields { time: now, nonce: &"1".repeat(32), release: KustomizeRelease::V5, dir: "d", length: too_long, body_sha256: &"0".repeat(64) };
        use base64::Engine;
        for (name, value) in [(NONCE_HEADER, "1".repeat(32)), (LENGTH_HEADER, too_long.to_string()), (BODY_SHA256_HEADER, "0".repeat(64)), (SIGNATURE_HEADER, base64::engine::general_purpose::STANDARD.encode(key.sign(fields.message().as_bytes()).unwrap()))] {
            large.insert(name, value.parse().unwrap());
        }
        assert_eq!(refusal(check(&large, now)).0, StatusCode::PAYLOAD_TOO_LARGE);
    }

    #[test]
    fn a_signed_request_is_answered_once() {
        let key = nkeys::KeyPair::new_user();
        let (callers, replays, now) = (vec![key.public_key()], ReplayGuard::default(), 1_000_000);
        let headers = signed_headers(&key, now, KustomizeRelease::V5, "d", b"tree").unwrap();
        authenticate(&callers, &replays, &headers, now).unwrap();
        let (status, text) = refusal(authenticate(&callers, &replays, &headers, now + 1));
        assert_eq!(status, StatusCode::UNAUTHORIZED);
        assert!(text.ends_with("was used before: a request is answered once"), "{text}");
        // The same request signed again (another nonce) is answered.
        authenticate(&callers, &replays, &signed_headers(&key, now, KustomizeRelease::V5, "d", b"tree").unwrap(), now + 1).unwrap();
        // A nonce is forgotten once its request could no longer pass the clock check.
        replays.first_use("caller", "n", now, now + MAX_CLOCK_SKEW_SECS + 1).unwrap();
        assert_eq!(replays.seen.lock().unwrap().len(), 1, "only the nonce just used is kept");
    }

    #[test]
    fn the_signature_covers_every_field() {
        let (nonce, sha) = ("a".repeat(32), "0".repeat(64));
        let base = SignedFields { time: 1, nonce: &nonce, release: KustomizeRelease::V3, dir: "tmp/x", length: 4, body_sha256: &sha };
        let (other_nonce, other_sha) = ("b".repeat(32), "1".repeat(64));
        for other in [
            SignedFields { time: 2, ..base },
            SignedFields { nonce: &other_nonce, ..base },
            SignedFields { release: KustomizeRelease::V5, ..base },
            SignedFields { dir: "tmp/y", ..base },
            SignedFields { length: 5, ..base },
            SignedFields { body_sha256: &other_sha, ..base },
        ] {
            assert_ne!(base.message(), other.message(), "{other:?}");
        }
    }
}
