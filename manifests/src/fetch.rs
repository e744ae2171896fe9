//! Fetching `spec.repos[]` into a local cache.
//!
//! A repository URI is one of
//! - an `http://` or `https://` URL of a gzip-compressed tar archive (GitHub's
//!   `https://github.com/kubeflow/manifests/archive/<ref>.tar.gz`; its single top folder is stripped);
//! - a local directory, as a path or `file://` URL, used in place (renders never write to it);
//! - a local `.tar.gz` file, as a path or `file://` URL, unpacked into the cache.
//!
//! Local URIs are refused unless [`FetchOptions::allow_local`] is set: a KfDef applied to a cluster
//! must not make an operator read its own file system.
//!
//! **Cache key.** An archive is unpacked once under `<cache>/repos/<key>/` and never rewritten.
//! The key is content-based where the content is known up front: `sha256-<pin>` when the KfDef
//! pins the archive (`spec.repos[].sha256`) or for a local tarball (its own digest), otherwise
//! `uri-<sha256 of the URI>`. So an unpinned URL is treated as immutable, the way kfctl downloaded
//! a repository once into its `.cache`: a KfDef that points at a moving branch archive
//! (`.../archive/master.tar.gz`) keeps the first download until the cache entry is removed; pin a
//! digest or a tag to make updates explicit. Keys do not depend on the KfDef, so KfDefs that share a
//! repository share one copy. Concurrent fetches of one key each unpack into a private temporary
//! directory and the first to rename it into place wins.
//!
//! **Quota.** The unpacked entries together may hold [`FetchOptions::max_cache_bytes`]. Each
//! entry's use is recorded as the modification time of `<cache>/used/<key>` (which also holds its
//! size), touched whenever a fetch finds or stores it; storing an entry that brings the cache over
//! the quota evicts the least recently used others — never the one just stored. A render still
//! reading an entry evicted under it fails and is retried by the next reconcile; keep the quota
//! well above the repositories one resource uses.
//!
//! **Fence.** With [`FetchOptions::address_fence`] (the default), http(s) downloads may only reach
//! public addresses, redirects included, except the destinations of
//! [`FetchOptions::allow_fetch_from`]: see [`fence`].

pub mod fence;
pub mod git;

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use sha2::{Digest, Sha256};

use crate::archive::{self, UnpackLimits};
use crate::error::{RepoError, RepoErrorReason};
pub use fence::AllowEntry;
use fence::Fence;

/// One entry of `spec.repos`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RepoSource {
    pub name: String,
    pub uri: String,
    /// Expected SHA-256 of the archive (lowercase hex), checked before unpacking.
    pub sha256: Option<String>,
}

impl From<&kubeflow_crds::kfdef::Repo> for RepoSource {
    fn from(r: &kubeflow_crds::kfdef::Repo) -> Self {
        RepoSource {
            name: r.name.clone(),
            uri: r.uri.clone(),
            sha256: r.sha256.clone(),
        }
    }
}

/// Bounds and policy for fetching.
#[derive(Clone, Debug)]
pub struct FetchOptions {
    /// Largest archive accepted, compressed (default 256 MiB).
    pub max_download_bytes: u64,
    /// Whole download, connect to last byte (default 5 min).
    pub download_timeout: Duration,
    /// Largest unpacked content (default 1 GiB) and most entries (default 100 000).
    pub max_unpacked_bytes: u64,
    pub max_entries: u64,
    /// Whether local paths and `file://` URIs are accepted (the CLI: yes; an operator: no).
    pub allow_local: bool,
    /// Whether http(s) downloads are fenced to public addresses (default: yes; only a command run
    /// by the user for themselves, `kfop`, turns it off).
    pub address_fence: bool,
    /// Destinations the fence lets through (hosts, addresses, CIDRs); none by default.
    pub allow_fetch_from: Vec<AllowEntry>,
    /// Most bytes the cache's unpacked repositories may hold together (default 4 GiB).
    pub max_cache_bytes: u64,
    /// Mirrors of remote bases (`--remote-base-mirror`), after those a spec names; they also
    /// rewrite the release archives a resource that names no repository renders from.
    pub remote_base_mirrors: Vec<crate::remote_bases::Mirror>,
    /// Whether a component resource that names no repository installs the operator's built-in
    /// template of its release (`--built-in-templates`) instead of the release's package in the
    /// archive of the Kubeflow release that ships it (the default). The templates approximate
    /// upstream's objects and are to be removed; this is for clusters with neither a route to
    /// github.com nor a mirror of the archives.
    pub built_in_templates: bool,
}

/// Default of [`FetchOptions::max_cache_bytes`]: four repositories of the largest size accepted.
pub const DEFAULT_MAX_CACHE_BYTES: u64 = 4 << 30;

impl Default for FetchOptions {
    fn default() -> Self {
        FetchOptions {
            max_download_bytes: 256 << 20,
            download_timeout: Duration::from_secs(300),
            max_unpacked_bytes: 1 << 30,
            max_entries: 100_000,
            allow_local: false,
            address_fence: true,
            allow_fetch_from: Vec::new(),
            max_cache_bytes: DEFAULT_MAX_CACHE_BYTES,
            remote_base_mirrors: Vec::new(),
            built_in_templates: false,
        }
    }
}

/// A repository ready to render from.
#[derive(Clone, Debug, PartialEq)]
pub struct FetchedRepo {
    pub name: String,
    pub uri: String,
    /// The repository root (the archive's top folder stripped). Read-only for renders.
    pub root: PathBuf,
    /// The cache key, `None` for a local directory used in place.
    pub cache_key: Option<String>,
}

/// Where a URI points.
#[derive(Debug, PartialEq)]
enum Location {
    Http(reqwest::Url),
    LocalDir(PathBuf),
    LocalTarball(PathBuf),
}

fn classify(uri: &str, allow_local: bool) -> Result<Location, RepoErrorReason> {
    let uri = uri.trim();
    if uri.is_empty() {
        return Err(RepoErrorReason::UnsupportedUri("empty URI".into()));
    }
    let local = if let Some(scheme_end) = uri.find("://") {
        let scheme = uri[..scheme_end].to_ascii_lowercase();
        match scheme.as_str() {
            "http" | "https" => {
                let url = reqwest::Url::parse(uri)
                    .map_err(|e| RepoErrorReason::UnsupportedUri(format!("{e}")))?;
                if url.host_str().is_none_or(str::is_empty) {
                    return Err(RepoErrorReason::UnsupportedUri("URL has no host".into()));
                }
                return Ok(Location::Http(url));
            }
            "file" => {
                let url = reqwest::Url::parse(uri)
                    .map_err(|e| RepoErrorReason::UnsupportedUri(format!("{e}")))?;
                url.to_file_path().map_err(|()| {
                    RepoErrorReason::UnsupportedUri(
                        "file:// URL is not a local absolute path".into(),
                    )
                })?
            }
            other => {
                return Err(RepoErrorReason::UnsupportedUri(format!(
                    "scheme {other:?} (allowed: https, http, file, or a local path)"
                )));
            }
        }
    } else if !uri.starts_with('/')
        && !uri.starts_with('.')
        && (uri.contains(':') || uri.contains("?ref=") || uri.starts_with("github.com/"))
    {
        // go-getter forms kfctl accepted (git::, github.com/...?ref=) need a git client.
        return Err(RepoErrorReason::UnsupportedUri(
            "only http(s) tar.gz archives, file:// URLs and local paths are supported".into(),
        ));
    } else {
        PathBuf::from(uri)
    };
    if !allow_local {
        return Err(RepoErrorReason::LocalNotAllowed);
    }
    match std::fs::metadata(&local) {
        Ok(m) if m.is_dir() => Ok(Location::LocalDir(local)),
        Ok(_) => Ok(Location::LocalTarball(local)),
        Err(_) => Err(RepoErrorReason::LocalNotFound(local)),
    }
}

fn valid_pin(pin: &str) -> bool {
    pin.len() == 64
        && pin
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The cache of fetched repositories under one directory.
#[derive(Clone, Debug)]
pub struct RepoCache {
    dir: PathBuf,
    options: FetchOptions,
    client: reqwest::Client,
    fence: Option<Fence>,
}

impl RepoCache {
    /// A cache under `dir` (created when missing).
    pub fn new(dir: impl Into<PathBuf>, options: FetchOptions) -> Result<Self, String> {
        crate::install_crypto_provider();
        let builder = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(30))
            .user_agent(concat!("kubeflow-manifests/", env!("CARGO_PKG_VERSION")));
        let fence = options
            .address_fence
            .then(|| Fence::new(options.allow_fetch_from.clone()));
        let builder = match &fence {
            // Every name is resolved, every redirect judged, by the fence; no proxy connects for us.
            Some(fence) => builder
                .dns_resolver(fence.clone())
                .redirect(fence.redirect_policy())
                .no_proxy(),
            None => builder.redirect(reqwest::redirect::Policy::limited(fence::MAX_REDIRECTS)),
        };
        let client = builder
            .build()
            .map_err(|e| format!("building the HTTP client: {e}"))?;
        let dir = dir.into();
        for sub in ["repos", "tmp", "used"] {
            std::fs::create_dir_all(dir.join(sub))
                .map_err(|e| format!("creating {}: {e}", dir.join(sub).display()))?;
        }
        Ok(RepoCache {
            dir,
            options,
            client,
            fence,
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn options(&self) -> &FetchOptions {
        &self.options
    }

    /// Fetches (or finds in the cache) one repository.
    pub async fn fetch(&self, source: &RepoSource) -> Result<FetchedRepo, RepoError> {
        self.fetch_inner(source).await.map_err(|reason| RepoError {
            repo: source.name.clone(),
            uri: source.uri.clone(),
            reason,
        })
    }

    async fn fetch_inner(&self, source: &RepoSource) -> Result<FetchedRepo, RepoErrorReason> {
        if let Some(pin) = &source.sha256
            && !valid_pin(pin)
        {
            return Err(RepoErrorReason::InvalidPin(pin.clone()));
        }
        let done = |root: PathBuf, key: Option<String>| FetchedRepo {
            name: source.name.clone(),
            uri: source.uri.clone(),
            root,
            cache_key: key,
        };
        match classify(&source.uri, self.options.allow_local)? {
            Location::LocalDir(dir) => {
                if source.sha256.is_some() {
                    return Err(RepoErrorReason::UnsupportedUri(
                        "a sha256 pin needs an archive, not a directory".into(),
                    ));
                }
                let root = std::fs::canonicalize(&dir)
                    .map_err(|e| RepoErrorReason::Io(format!("{}: {e}", dir.display())))?;
                Ok(done(root, None))
            }
            Location::LocalTarball(file) => {
                let digest = {
                    let path = file.clone();
                    tokio::task::spawn_blocking(move || -> std::io::Result<String> {
                        let mut h = Sha256::new();
                        std::io::copy(&mut std::fs::File::open(path)?, &mut h)?;
                        Ok(hex(&h.finalize()))
                    })
                    .await
                    .map_err(|e| RepoErrorReason::Io(e.to_string()))?
                    .map_err(|e| RepoErrorReason::Io(format!("{}: {e}", file.display())))?
                };
                self.check_pin(source, &digest)?;
                let key = format!("sha256-{digest}");
                if let Some(root) = self.lookup(&key)? {
                    return Ok(done(root, Some(key)));
                }
                let root = self.unpack_into_cache(file, &key).await?;
                Ok(done(root, Some(key)))
            }
            Location::Http(url) => {
                // Before the cache too: a fenced URI is refused the same way whether or not a
                // process without the fence (kfop) cached it.
                if let Some(fence) = &self.fence {
                    fence
                        .check_url(&url)
                        .map_err(|r| RepoErrorReason::Fenced(Box::new(r)))?;
                }
                let key = match &source.sha256 {
                    Some(pin) => format!("sha256-{pin}"),
                    None => format!("uri-{}", hex(&Sha256::digest(source.uri.trim().as_bytes()))),
                };
                if let Some(root) = self.lookup(&key)? {
                    return Ok(done(root, Some(key)));
                }
                let tmp = tempfile::Builder::new()
                    .prefix("download-")
                    .suffix(".tar.gz")
                    .tempfile_in(self.dir.join("tmp"))
                    .map_err(|e| RepoErrorReason::Io(format!("creating a download file: {e}")))?;
                let secs = self.options.download_timeout.as_secs();
                let digest = tokio::time::timeout(
                    self.options.download_timeout,
                    self.download(url, tmp.path()),
                )
                .await
                .map_err(|_| RepoErrorReason::Timeout { secs })??;
                self.check_pin(source, &digest)?;
                let root = self
                    .unpack_into_cache(tmp.path().to_path_buf(), &key)
                    .await?;
                Ok(done(root, Some(key)))
            }
        }
    }

    /// Fetches (or finds in the cache) the tree of git repository `repository` at `git_ref` (a
    /// tag, or a full commit id) over git's smart HTTP protocol ([`git`]), fenced and bounded as an
    /// archive is. Cached by repository and ref. `Ok(None)` when the server does not speak the
    /// protocol (a mirror serving archives): the caller asks for the host's archive instead.
    pub async fn fetch_git(&self, repository: &str, git_ref: &str) -> Result<Option<FetchedRepo>, RepoError> {
        let error = |reason| RepoError { repo: format!("{repository}?ref={git_ref}"), uri: repository.to_string(), reason };
        let Location::Http(url) = classify(repository, false).map_err(error)? else {
            return Err(error(RepoErrorReason::UnsupportedUri("a git repository must be an http(s) URL".into())));
        };
        if let Some(fence) = &self.fence {
            fence.check_url(&url).map_err(|r| error(RepoErrorReason::Fenced(Box::new(r))))?;
        }
        let key = format!("git-{}", hex(&Sha256::digest(format!("{}\n{git_ref}", repository.trim()).as_bytes())));
        let done = |root: PathBuf| FetchedRepo { name: repository.to_string(), uri: repository.to_string(), root, cache_key: Some(key.clone()) };
        if let Some(root) = self.lookup(&key).map_err(error)? {
            return Ok(Some(done(root)));
        }
        let secs = self.options.download_timeout.as_secs();
        let limits = git::Limits { max_download_bytes: self.options.max_download_bytes, max_unpacked_bytes: self.options.max_unpacked_bytes, max_entries: self.options.max_entries };
        let staging = tempfile::Builder::new().prefix("git-").tempdir_in(self.dir.join("tmp")).map_err(|e| error(RepoErrorReason::Io(format!("creating a fetch directory: {e}"))))?;
        let fetched = tokio::time::timeout(self.options.download_timeout, async {
            if !git::speaks_v2(&self.client, repository).await? {
                return Ok(false);
            }
            git::fetch_tree(&self.client, repository, git_ref, limits, &staging.path().join("tree")).await.map(|_| true)
        })
        .await
        .map_err(|_| error(RepoErrorReason::Timeout { secs }))?
        .map_err(error)?;
        if !fetched {
            return Ok(None);
        }
        let final_dir = self.keep_in_cache(staging, &key);
        let root = archive::repository_root(&final_dir).map_err(|e| error(RepoErrorReason::Io(format!("{}: {e}", final_dir.display()))))?;
        Ok(Some(done(root)))
    }

    /// Downloads one file over HTTP(S) (a remote base's release asset) into the cache, fenced and
    /// bounded as an archive is, and returns its path. Cached by URL.
    pub async fn fetch_file(&self, uri: &str) -> Result<PathBuf, RepoError> {
        let error = |reason| RepoError { repo: uri.to_string(), uri: uri.to_string(), reason };
        let Location::Http(url) = classify(uri, false).map_err(error)? else {
            return Err(error(RepoErrorReason::UnsupportedUri("a remote file must be an http(s) URL".into())));
        };
        if let Some(fence) = &self.fence {
            fence.check_url(&url).map_err(|r| error(RepoErrorReason::Fenced(Box::new(r))))?;
        }
        let name = url.path_segments().and_then(|mut s| s.next_back()).filter(|n| !n.is_empty() && *n != "." && *n != "..").unwrap_or("manifests.yaml").to_string();
        let key = format!("file-{}", hex(&Sha256::digest(uri.trim().as_bytes())));
        if let Some(dir) = self.lookup(&key).map_err(error)? {
            return Ok(dir.join(&name));
        }
        let staging = tempfile::Builder::new().prefix("file-").tempdir_in(self.dir.join("tmp")).map_err(|e| error(RepoErrorReason::Io(format!("creating a download directory: {e}"))))?;
        std::fs::create_dir_all(staging.path().join("asset")).map_err(|e| error(RepoErrorReason::Io(e.to_string())))?;
        let secs = self.options.download_timeout.as_secs();
        tokio::time::timeout(self.options.download_timeout, self.download(url, &staging.path().join("asset").join(&name)))
            .await
            .map_err(|_| error(RepoErrorReason::Timeout { secs }))?
            .map_err(error)?;
        let final_dir = self.keep_in_cache(staging, &key);
        Ok(final_dir.join("asset").join(name))
    }

    /// Moves a fetch's finished `staging` directory into the cache as `repos/<key>` (keeping the
    /// copy of another fetch of the same key that finished first), counts it and evicts over the
    /// quota; returns `repos/<key>`.
    fn keep_in_cache(&self, staging: tempfile::TempDir, key: &str) -> PathBuf {
        let final_dir = self.dir.join("repos").join(key);
        let staged = staging.keep();
        if std::fs::rename(&staged, &final_dir).is_err() {
            let _ = std::fs::remove_dir_all(&staged);
        }
        record_use(&self.dir, key, tree_size(&final_dir));
        evict(&self.dir, self.options.max_cache_bytes, key);
        final_dir
    }

    fn check_pin(&self, source: &RepoSource, actual: &str) -> Result<(), RepoErrorReason> {
        match &source.sha256 {
            Some(expected) if expected != actual => Err(RepoErrorReason::Sha256Mismatch {
                expected: expected.clone(),
                actual: actual.to_string(),
            }),
            _ => Ok(()),
        }
    }

    fn lookup(&self, key: &str) -> Result<Option<PathBuf>, RepoErrorReason> {
        let unpacked = self.dir.join("repos").join(key);
        if !unpacked.is_dir() {
            return Ok(None);
        }
        let root = archive::repository_root(&unpacked)
            .map_err(|e| RepoErrorReason::Io(format!("{}: {e}", unpacked.display())))?;
        touch(&self.dir, key);
        Ok(Some(root))
    }

    /// Streams `url` into `dest`, bounded in size, and returns the body's SHA-256.
    async fn download(&self, url: reqwest::Url, dest: &Path) -> Result<String, RepoErrorReason> {
        use std::io::Write;
        let limit = self.options.max_download_bytes;
        let requested = url.clone();
        let transport = |e: reqwest::Error| transport_error(e, &requested);
        let mut response = self.client.get(url).send().await.map_err(transport)?;
        if !response.status().is_success() {
            return Err(RepoErrorReason::HttpStatus(response.status().as_u16()));
        }
        if response.content_length().is_some_and(|n| n > limit) {
            return Err(RepoErrorReason::DownloadTooLarge { limit });
        }
        let mut file = std::fs::File::create(dest)
            .map_err(|e| RepoErrorReason::Io(format!("{}: {e}", dest.display())))?;
        let mut hasher = Sha256::new();
        let mut total: u64 = 0;
        while let Some(chunk) = response.chunk().await.map_err(transport)? {
            total += chunk.len() as u64;
            if total > limit {
                return Err(RepoErrorReason::DownloadTooLarge { limit });
            }
            hasher.update(&chunk);
            file.write_all(&chunk)
                .map_err(|e| RepoErrorReason::Io(format!("{}: {e}", dest.display())))?;
        }
        file.flush()
            .map_err(|e| RepoErrorReason::Io(format!("{}: {e}", dest.display())))?;
        Ok(hex(&hasher.finalize()))
    }

    /// Unpacks `archive_file` into a private directory, then renames it to `repos/<key>`.
    async fn unpack_into_cache(
        &self,
        archive_file: PathBuf,
        key: &str,
    ) -> Result<PathBuf, RepoErrorReason> {
        let limits = UnpackLimits {
            max_bytes: self.options.max_unpacked_bytes,
            max_entries: self.options.max_entries,
        };
        let (cache, quota, key) = (
            self.dir.clone(),
            self.options.max_cache_bytes,
            key.to_string(),
        );
        let tmp_root = self.dir.join("tmp");
        let final_dir = self.dir.join("repos").join(&key);
        let final_dir2 = final_dir.clone();
        tokio::task::spawn_blocking(move || -> Result<PathBuf, RepoErrorReason> {
            let staging = tempfile::Builder::new()
                .prefix("unpack-")
                .tempdir_in(&tmp_root)
                .map_err(|e| RepoErrorReason::Io(format!("creating an unpack directory: {e}")))?;
            let file = std::fs::File::open(&archive_file)
                .map_err(|e| RepoErrorReason::Io(format!("{}: {e}", archive_file.display())))?;
            archive::unpack_tar_gz(std::io::BufReader::new(file), staging.path(), limits)?;
            let staged = staging.keep();
            if let Err(e) = std::fs::rename(&staged, &final_dir2) {
                // Another fetch of the same key finished first: keep its copy.
                let _ = std::fs::remove_dir_all(&staged);
                if !final_dir2.is_dir() {
                    return Err(RepoErrorReason::Io(format!(
                        "moving into {}: {e}",
                        final_dir2.display()
                    )));
                }
            }
            let root = archive::repository_root(&final_dir2)
                .map_err(|e| RepoErrorReason::Io(format!("{}: {e}", final_dir2.display())))?;
            record_use(&cache, &key, tree_size(&final_dir2));
            evict(&cache, quota, &key);
            Ok(root)
        })
        .await
        .map_err(|e| RepoErrorReason::Io(e.to_string()))?
        .inspect_err(|_| tracing::debug!(dir = %final_dir.display(), "unpack failed"))
    }
}

/// A download error as a reason: the fence's refusals and the redirect bound by name, the rest as
/// the transport's message.
fn transport_error(e: reqwest::Error, requested: &reqwest::Url) -> RepoErrorReason {
    let failed_at = e.url().filter(|u| *u != requested).map(ToString::to_string);
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(&e);
    while let Some(err) = source {
        if let Some(refusal) = err.downcast_ref::<crate::error::FenceRefusal>() {
            let mut refusal = refusal.clone();
            // A name refused by the resolver after a redirect: say where the redirect led.
            if refusal.redirected_to.is_none() {
                refusal.redirected_to = failed_at;
            }
            return RepoErrorReason::Fenced(Box::new(refusal));
        }
        if err.is::<fence::TooManyRedirects>() {
            return RepoErrorReason::TooManyRedirects {
                limit: fence::MAX_REDIRECTS,
            };
        }
        source = err.source();
    }
    RepoErrorReason::Transport(e.without_url().to_string())
}

/// Records that entry `key` was used now; `size` (bytes) when it was just stored. An entry
/// without a record (a cache written before quotas) gets one, measured.
fn touch(cache: &Path, key: &str) {
    let marker = cache.join("used").join(key);
    let touched = std::fs::OpenOptions::new()
        .write(true)
        .open(&marker)
        .and_then(|f| f.set_modified(SystemTime::now()));
    if touched.is_err() {
        record_use(cache, key, tree_size(&cache.join("repos").join(key)));
    }
}

fn record_use(cache: &Path, key: &str, size: u64) {
    let marker = cache.join("used").join(key);
    if let Err(e) = std::fs::write(&marker, size.to_string()) {
        tracing::warn!(marker = %marker.display(), error = %e, "cannot record a repository's use");
    }
}

/// Bytes of the files under `dir` (links not followed).
fn tree_size(dir: &Path) -> u64 {
    walkdir::WalkDir::new(dir)
        .follow_links(false)
        .into_iter()
        .filter_map(Result::ok)
        .filter_map(|e| e.metadata().ok())
        .filter(|m| m.is_file())
        .map(|m| m.len())
        .sum()
}

/// Evicts the least recently used entries until the cache holds at most `quota` bytes, `keep`
/// excepted (it stays even when it alone exceeds the quota).
fn evict(cache: &Path, quota: u64, keep: &str) {
    let Ok(dirs) = std::fs::read_dir(cache.join("repos")) else {
        return;
    };
    let mut entries: Vec<(SystemTime, u64, String)> = Vec::new();
    for dir in dirs.filter_map(Result::ok) {
        let key = dir.file_name().to_string_lossy().into_owned();
        let marker = cache.join("used").join(&key);
        let recorded = std::fs::read_to_string(&marker)
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok());
        let size = recorded.unwrap_or_else(|| {
            let size = tree_size(&dir.path());
            record_use(cache, &key, size);
            size
        });
        let used = std::fs::metadata(&marker)
            .and_then(|m| m.modified())
            .unwrap_or(SystemTime::UNIX_EPOCH);
        entries.push((used, size, key));
    }
    let mut total: u64 = entries.iter().map(|(_, size, _)| size).sum();
    entries.sort();
    for (_, size, key) in entries {
        if total <= quota {
            break;
        }
        if key == keep {
            continue;
        }
        // Moved aside first, so a concurrent fetch sees the entry whole or not at all.
        let entry = cache.join("repos").join(&key);
        let aside = cache
            .join("tmp")
            .join(format!("evicted-{key}-{}", std::process::id()));
        match std::fs::rename(&entry, &aside) {
            Ok(()) => {
                let _ = std::fs::remove_dir_all(&aside);
                let _ = std::fs::remove_file(cache.join("used").join(&key));
                total = total.saturating_sub(size);
                tracing::info!(
                    key,
                    bytes = size,
                    quota,
                    "evicted a repository from the cache"
                );
            }
            Err(e) => tracing::warn!(key, error = %e, "cannot evict a repository from the cache"),
        }
    }
    if total > quota {
        tracing::warn!(
            total,
            quota,
            "the repository cache exceeds its quota with only the newest repository left"
        );
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    #[test]
    fn classify_accepts_archives_and_refuses_other_schemes() {
        assert!(matches!(
            classify(
                "https://github.com/kubeflow/manifests/archive/v1.2.0.tar.gz",
                false
            ),
            Ok(Location::Http(_))
        ));
        assert_eq!(
            classify("ftp://example.org/x.tar.gz", true),
            Err(RepoErrorReason::UnsupportedUri(
                "scheme \"ftp\" (allowed: https, http, file, or a local path)".into()
            ))
        );
        assert_eq!(
            classify("github.com/kubeflow/manifests?ref=v1.0", true),
            Err(RepoErrorReason::UnsupportedUri(
                "only http(s) tar.gz archives, file:// URLs and local paths are supported".into()
            ))
        );
        assert_eq!(classify("/", false), Err(RepoErrorReason::LocalNotAllowed));
        assert_eq!(
            classify("file:///", false),
            Err(RepoErrorReason::LocalNotAllowed)
        );
        assert_eq!(
            classify("file:///", true),
            Ok(Location::LocalDir(PathBuf::from("/")))
        );
        assert_eq!(
            classify("/does/not/exist", true),
            Err(RepoErrorReason::LocalNotFound(PathBuf::from(
                "/does/not/exist"
            )))
        );
    }

    #[test]
    fn pins_are_64_lowercase_hex() {
        assert!(valid_pin(&"a".repeat(64)));
        assert!(!valid_pin(&"A".repeat(64)));
        assert!(!valid_pin(&"a".repeat(63)));
        assert!(!valid_pin("../../etc"));
    }

    /// A gzip tar holding `top/file.txt` with `size` bytes of `fill`.
    fn tarball(fill: u8, size: usize) -> Vec<u8> {
        let gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        let mut b = tar::Builder::new(gz);
        let mut header = tar::Header::new_gnu();
        header.set_size(size as u64);
        header.set_mode(0o644);
        header.set_cksum();
        b.append_data(&mut header, "top/file.txt", &vec![fill; size][..])
            .unwrap();
        b.into_inner().unwrap().finish().unwrap()
    }

    /// A loopback HTTP server: `GET /archive.tar.gz` is a small tarball, `GET /to?<url>` a 302 to
    /// `<url>`, `GET /loop` a 302 to itself; anything else 404. Returns its port.
    async fn serve() -> u16 {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            loop {
                let Ok((mut stream, _)) = listener.accept().await else {
                    return;
                };
                tokio::spawn(async move {
                    let mut request = Vec::new();
                    let mut buf = [0u8; 1024];
                    while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                        match stream.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => request.extend_from_slice(&buf[..n]),
                        }
                    }
                    let text = String::from_utf8_lossy(&request);
                    let path = text.split(' ').nth(1).unwrap_or("/").to_string();
                    let (head, body) = if path == "/archive.tar.gz" {
                        ("200 OK".to_string(), tarball(b'x', 100))
                    } else if let Some(target) = path.strip_prefix("/to?") {
                        (format!("302 Found\r\nLocation: {target}"), Vec::new())
                    } else if path == "/loop" {
                        ("302 Found\r\nLocation: /loop".to_string(), Vec::new())
                    } else {
                        ("404 Not Found".to_string(), Vec::new())
                    };
                    let head = format!(
                        "HTTP/1.1 {head}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                        body.len()
                    );
                    let _ = stream.write_all(head.as_bytes()).await;
                    let _ = stream.write_all(&body).await;
                });
            }
        });
        port
    }

    fn cache(dir: &Path, allow: &[&str]) -> RepoCache {
        let allow_fetch_from = allow.iter().map(|e| e.parse().unwrap()).collect();
        RepoCache::new(
            dir,
            FetchOptions {
                allow_fetch_from,
                ..FetchOptions::default()
            },
        )
        .unwrap()
    }

    async fn fetch(cache: &RepoCache, uri: &str) -> Result<FetchedRepo, RepoErrorReason> {
        let source = RepoSource {
            name: "manifests".into(),
            uri: uri.into(),
            sha256: None,
        };
        cache.fetch(&source).await.map_err(|e| e.reason)
    }

    fn stored(cache: &RepoCache) -> usize {
        std::fs::read_dir(cache.dir().join("repos"))
            .unwrap()
            .count()
    }

    #[tokio::test]
    async fn a_redirect_to_a_fenced_address_is_refused() {
        let port = serve().await;
        let tmp = tempfile::tempdir().unwrap();
        let repos = cache(tmp.path(), &["127.0.0.1"]);
        let base = format!("http://127.0.0.1:{port}");
        // The loopback server itself is allowed, and serves.
        fetch(&repos, &format!("{base}/archive.tar.gz"))
            .await
            .unwrap();
        assert_eq!(stored(&repos), 1);

        let metadata = "http://169.254.169.254/latest/meta-data.tar.gz";
        match fetch(&repos, &format!("{base}/to?{metadata}")).await {
            Err(RepoErrorReason::Fenced(refusal)) => {
                assert_eq!(refusal.redirected_to.as_deref(), Some(metadata));
                assert_eq!(refusal.address, Some("169.254.169.254".parse().unwrap()));
                assert!(refusal.rule.starts_with("link-local"), "{refusal}");
                assert!(
                    refusal.to_string().starts_with(&format!(
                        "redirected to {metadata}: 169.254.169.254 is link-local"
                    )),
                    "{refusal}"
                );
            }
            other => panic!("expected a refusal, got {other:?}"),
        }
        // Mapped IPv6, a metadata name, another loopback address: refused as well.
        for target in [
            "http://[::ffff:169.254.169.254]/x.tar.gz",
            "http://metadata.google.internal/x.tar.gz",
            "http://127.0.0.2/x.tar.gz",
        ] {
            let got = fetch(&repos, &format!("{base}/to?{target}")).await;
            assert!(
                matches!(&got, Err(RepoErrorReason::Fenced(r)) if r.redirected_to.is_some()),
                "{target}: {got:?}"
            );
        }
        // Redirects between allowed destinations are followed, boundedly.
        fetch(&repos, &format!("{base}/to?{base}/archive.tar.gz#again"))
            .await
            .unwrap();
        assert_eq!(
            fetch(&repos, &format!("{base}/loop")).await.unwrap_err(),
            RepoErrorReason::TooManyRedirects {
                limit: fence::MAX_REDIRECTS
            }
        );
        assert_eq!(stored(&repos), 2, "nothing was stored from a refused fetch");
    }

    #[tokio::test]
    async fn the_fence_checks_resolved_addresses_and_literals() {
        let port = serve().await;
        let tmp = tempfile::tempdir().unwrap();
        // A name: refused by what it resolves to, not by what it is called.
        let by_name = format!("http://localhost:{port}/archive.tar.gz");
        match fetch(&cache(&tmp.path().join("a"), &[]), &by_name).await {
            Err(RepoErrorReason::Fenced(refusal)) => {
                assert_eq!(refusal.host, "localhost");
                assert!(
                    refusal.address.is_some_and(|a| a.is_loopback()),
                    "{refusal}"
                );
                assert!(refusal.rule.starts_with("loopback"), "{refusal}");
                assert!(
                    refusal.to_string().contains("--allow-fetch-from localhost"),
                    "{refusal}"
                );
            }
            other => panic!("expected a refusal, got {other:?}"),
        }
        // Allowed by the name, or by the network of the address it resolves to.
        fetch(&cache(&tmp.path().join("b"), &["LOCALHOST"]), &by_name)
            .await
            .unwrap();
        fetch(&cache(&tmp.path().join("c"), &["127.0.0.0/8"]), &by_name)
            .await
            .unwrap();
        // A literal never reaches a resolver: the URL is checked.
        let literal = format!("http://127.0.0.1:{port}/archive.tar.gz");
        let refused = fetch(&cache(&tmp.path().join("d"), &[]), &literal).await;
        assert!(
            matches!(&refused, Err(RepoErrorReason::Fenced(r)) if r.redirected_to.is_none()),
            "{refused:?}"
        );
        assert!(matches!(
            fetch(
                &cache(&tmp.path().join("e"), &["10.0.0.0/8", "127.0.0.2"]),
                &literal
            )
            .await,
            Err(RepoErrorReason::Fenced(_))
        ));
        // Without the fence (kfop), loopback is fine.
        let open = RepoCache::new(
            tmp.path().join("f"),
            FetchOptions {
                address_fence: false,
                ..FetchOptions::default()
            },
        )
        .unwrap();
        fetch(&open, &literal).await.unwrap();
    }

    #[tokio::test]
    async fn the_least_recently_used_repositories_are_evicted_over_the_quota() {
        let tmp = tempfile::tempdir().unwrap();
        let options = FetchOptions {
            allow_local: true,
            max_cache_bytes: 2500,
            ..FetchOptions::default()
        };
        let repos = RepoCache::new(tmp.path().join("cache"), options).unwrap();
        let archive = |name: &str, fill: u8, size: usize| {
            let path = tmp.path().join(name);
            std::fs::write(&path, tarball(fill, size)).unwrap();
            path.display().to_string()
        };
        let (a, b, c) = (
            archive("a", b'a', 1000),
            archive("b", b'b', 1000),
            archive("c", b'c', 1000),
        );
        let key = |r: FetchedRepo| r.cache_key.unwrap();
        let mut keys = BTreeMap::new();
        for (name, uri) in [("a", &a), ("b", &b)] {
            keys.insert(name, key(fetch(&repos, uri).await.unwrap()));
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // Found in the cache: a is now used more recently than b.
        fetch(&repos, &a).await.unwrap();
        tokio::time::sleep(Duration::from_millis(20)).await;
        keys.insert("c", key(fetch(&repos, &c).await.unwrap()));
        let present = |name: &str| repos.dir().join("repos").join(&keys[name]).is_dir();
        assert_eq!(
            (present("a"), present("b"), present("c")),
            (true, false, true)
        );
        assert!(!repos.dir().join("used").join(&keys["b"]).exists());

        // An entry over the quota on its own is kept; everything else goes.
        let big = archive("big", b'd', 3000);
        let root = fetch(&repos, &big).await.unwrap().root;
        assert_eq!(std::fs::read(root.join("file.txt")).unwrap().len(), 3000);
        assert_eq!((present("a"), present("c")), (false, false));
        assert_eq!(stored(&repos), 1);
        // b comes back when fetched again.
        fetch(&repos, &b).await.unwrap();
        assert!(present("b"));
    }
}
