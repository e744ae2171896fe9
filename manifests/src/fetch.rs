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

use std::path::{Path, PathBuf};
use std::time::Duration;

use sha2::{Digest, Sha256};

use crate::archive::{self, UnpackLimits};
use crate::error::{RepoError, RepoErrorReason};

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
}

impl Default for FetchOptions {
    fn default() -> Self {
        FetchOptions {
            max_download_bytes: 256 << 20,
            download_timeout: Duration::from_secs(300),
            max_unpacked_bytes: 1 << 30,
            max_entries: 100_000,
            allow_local: false,
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
}

impl RepoCache {
    /// A cache under `dir` (created when missing).
    pub fn new(dir: impl Into<PathBuf>, options: FetchOptions) -> Result<Self, String> {
        crate::install_crypto_provider();
        let client = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(30))
            .user_agent(concat!("kubeflow-manifests/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| format!("building the HTTP client: {e}"))?;
        let dir = dir.into();
        for sub in ["repos", "tmp"] {
            std::fs::create_dir_all(dir.join(sub))
                .map_err(|e| format!("creating {}: {e}", dir.join(sub).display()))?;
        }
        Ok(RepoCache {
            dir,
            options,
            client,
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
        archive::repository_root(&unpacked)
            .map(Some)
            .map_err(|e| RepoErrorReason::Io(format!("{}: {e}", unpacked.display())))
    }

    /// Streams `url` into `dest`, bounded in size, and returns the body's SHA-256.
    async fn download(&self, url: reqwest::Url, dest: &Path) -> Result<String, RepoErrorReason> {
        use std::io::Write;
        let limit = self.options.max_download_bytes;
        let transport = |e: reqwest::Error| RepoErrorReason::Transport(e.without_url().to_string());
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
        let tmp_root = self.dir.join("tmp");
        let final_dir = self.dir.join("repos").join(key);
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
            archive::repository_root(&final_dir2)
                .map_err(|e| RepoErrorReason::Io(format!("{}: {e}", final_dir2.display())))
        })
        .await
        .map_err(|e| RepoErrorReason::Io(e.to_string()))?
        .inspect_err(|_| tracing::debug!(dir = %final_dir.display(), "unpack failed"))
    }
}

#[cfg(test)]
mod tests {
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
}
