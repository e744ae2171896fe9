//! Remote bases: the git references (`github.com/org/repo/path?ref=v1`) and HTTP(S) files (a
//! release asset) that a package names in `resources`, `bases` or `components`, as newer
//! kubeflow/manifests releases do (Pipelines pulls Argo Workflows' CRDs, Trainer JobSet's release
//! manifest).
//!
//! kustomize would fetch them itself, from anywhere, at whatever a branch points to today. Instead
//! the operator fetches them, through the same fence, bounds and cache as the repository, and
//! only when pinned (a tag or a commit); kustomize then builds a copy of the kustomizations that
//! name them, rewritten to the fetched copies, and never reaches the network. A git reference is
//! fetched over git's smart HTTP protocol ([`crate::fetch::git`], a tag or a full commit id),
//! or, from a server that does not speak it (a mirror serving files), as the host's archive of
//! that ref (`<repository>/archive/<ref>.tar.gz`, GitHub's and Gitea's layout);
//! `--remote-base-mirror PREFIX=URI` (or the spec's `remoteBaseMirrors`) rewrites the URL first,
//! for air-gapped clusters and other hosts.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// A remote base, as kustomize reads the reference.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RemoteRef {
    /// A directory of a git repository at `git_ref` (unset: the default branch).
    Git { repository: String, path: String, git_ref: Option<String> },
    /// One file, fetched over HTTP(S).
    File { url: String },
}

/// A mirror of remote bases: a reference's URL that starts with `prefix` is fetched from `uri`
/// followed by the rest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mirror {
    pub prefix: String,
    pub uri: String,
}

impl std::str::FromStr for Mirror {
    type Err = String;

    /// `PREFIX=URI`, e.g. `https://github.com/=https://mirror.example.com/github/`.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let (prefix, uri) = text.split_once('=').ok_or_else(|| format!("{text:?}: expected PREFIX=URI"))?;
        if prefix.is_empty() || !(uri.starts_with("https://") || uri.starts_with("http://")) {
            return Err(format!("{text:?}: expected PREFIX=URI, a non-empty prefix and an http(s) URI"));
        }
        Ok(Mirror { prefix: prefix.to_string(), uri: uri.to_string() })
    }
}

/// The mirrors a render uses: a resource's own (`spec.remoteBaseMirrors`, parsed), then the
/// operator's. `Err` names the index of the first that does not parse, and why.
pub fn merged(spec: &[String], operator: &[Mirror]) -> Result<Vec<Mirror>, (usize, String)> {
    let mut mirrors = Vec::with_capacity(spec.len() + operator.len());
    for (index, text) in spec.iter().enumerate() {
        mirrors.push(text.parse::<Mirror>().map_err(|reason| (index, reason))?);
    }
    mirrors.extend(operator.iter().cloned());
    Ok(mirrors)
}

/// `url` rewritten by the first mirror whose prefix it starts with.
pub fn mirrored(url: &str, mirrors: &[Mirror]) -> String {
    match mirrors.iter().find(|m| url.starts_with(&m.prefix)) {
        Some(mirror) => format!("{}{}", mirror.uri, &url[mirror.prefix.len()..]),
        None => url.to_string(),
    }
}

/// Parses `reference` as kustomize reads a remote one: `[git::]https://host/org/repo[.git]//path?ref=x`,
/// `github.com/org/repo/path?ref=x` (the first two segments on github.com are the repository), or
/// an HTTP(S) file (no `ref`, no `//` separator, not a `.git` repository).
pub fn parse(reference: &str) -> Result<RemoteRef, String> {
    let text = reference.strip_prefix("git::").unwrap_or(reference);
    if text.starts_with("git@") || text.starts_with("ssh://") || text.starts_with("file://") {
        return Err("only https remote bases are fetched (no ssh, no file)".into());
    }
    let text = if text.starts_with("github.com/") { format!("https://{text}") } else { text.to_string() };
    let (scheme, rest) = text.split_once("://").ok_or_else(|| "not a URL kustomize fetches".to_string())?;
    if scheme != "https" && scheme != "http" {
        return Err(format!("scheme {scheme:?}: only https remote bases are fetched"));
    }
    let (location, query) = rest.split_once('?').unwrap_or((rest, ""));
    let git_ref = query.split('&').find_map(|p| p.strip_prefix("ref=").or_else(|| p.strip_prefix("version="))).map(String::from);
    let (host, path) = location.split_once('/').unwrap_or((location, ""));
    let on_github = host == "github.com";
    let release_asset = on_github && path.contains("/releases/download/");
    let is_git = !release_asset && (git_ref.is_some() || path.contains("//") || path.contains(".git"));
    if !is_git {
        return Ok(RemoteRef::File { url: text.split('?').next().unwrap_or_default().to_string() });
    }
    let (repository_path, sub) = match path.split_once("//") {
        Some((repository, sub)) => (repository.to_string(), sub.to_string()),
        None if path.contains(".git/") || path.ends_with(".git") => {
            let end = path.find(".git").expect("checked") + 4;
            (path[..end].to_string(), path[end..].trim_start_matches('/').to_string())
        }
        None if on_github => {
            let mut segments = path.splitn(3, '/');
            let (org, repo) = (segments.next().unwrap_or_default(), segments.next().unwrap_or_default());
            (format!("{org}/{repo}"), segments.next().unwrap_or_default().to_string())
        }
        None => return Err("cannot tell the repository from the path: separate them with // (https://host/org/repo//path?ref=…)".into()),
    };
    let repository_path = repository_path.trim_end_matches(".git");
    if repository_path.split('/').filter(|s| !s.is_empty()).count() < 2 || sub.split('/').any(|s| s == "..") {
        return Err("expected a repository (host/org/repo) and a path inside it, without '..'".into());
    }
    Ok(RemoteRef::Git { repository: format!("{scheme}://{host}/{repository_path}"), path: sub.trim_matches('/').to_string(), git_ref })
}

/// Whether `text` names a fixed version: a commit (7 to 40 hex digits) or a release tag (`v1.2.3`,
/// `3.7.3`, `v0.8.0-rc.1`); a branch (`main`, `release-1.8`) or `latest` moves.
fn fixed(text: &str) -> bool {
    let commit = (7..=40).contains(&text.len()) && text.chars().all(|c| c.is_ascii_hexdigit()) && text.chars().any(|c| c.is_ascii_digit());
    let version = text.strip_prefix('v').unwrap_or(text);
    let numeric = version.split(['-', '+']).next().unwrap_or_default();
    let tag = !numeric.is_empty() && numeric.split('.').all(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()));
    commit || tag
}

/// Refuses a remote base that does not name a fixed version, saying how to pin it.
pub fn check_pinned(remote: &RemoteRef) -> Result<(), String> {
    match remote {
        RemoteRef::Git { git_ref: None, .. } => Err("not pinned: add ?ref=<tag or commit>".into()),
        RemoteRef::Git { git_ref: Some(r), .. } if !fixed(r) => Err(format!("not pinned: ref {r:?} can move (a branch?); name a tag (v1.2.3) or a commit")),
        RemoteRef::File { url } if !url.split('/').skip(3).any(fixed) => Err("not pinned: the URL names no version (a release tag or a commit in its path)".into()),
        _ => Ok(()),
    }
}

impl RemoteRef {
    /// The archive (git) or file URL to download, after `mirrors`.
    pub fn download_url(&self, mirrors: &[Mirror]) -> String {
        match self {
            RemoteRef::Git { repository, git_ref, .. } => mirrored(&format!("{repository}/archive/{}.tar.gz", git_ref.as_deref().unwrap_or("HEAD")), mirrors),
            RemoteRef::File { url } => mirrored(url, mirrors),
        }
    }
}

/// The kustomization `text` with every entry of `resources`, `bases` and `components` that
/// `local` maps replaced by the local path. Returns `None` when nothing is replaced.
pub fn rewrite(text: &str, local: &BTreeMap<String, PathBuf>) -> Result<Option<String>, String> {
    let mut doc = crate::yaml::parse(text).map_err(|e| e.to_string())?;
    let mut changed = false;
    if let serde_yaml_ng::Value::Mapping(map) = &mut doc {
        for field in ["resources", "bases", "components"] {
            let Some(serde_yaml_ng::Value::Sequence(entries)) = map.get_mut(field) else { continue };
            for entry in entries.iter_mut() {
                if let Some(path) = entry.as_str().and_then(|r| local.get(r)) {
                    *entry = serde_yaml_ng::Value::String(path.display().to_string());
                    changed = true;
                }
            }
        }
    }
    Ok(changed.then(|| serde_yaml_ng::to_string(&doc).expect("a mapping serialises")))
}

/// `to` relative to the directory `from` (both absolute and clean), as kustomize needs it: a
/// kustomization's `resources` may not name an absolute directory.
pub fn relative_path(from: &Path, to: &Path) -> PathBuf {
    let (from, to): (Vec<_>, Vec<_>) = (from.components().collect(), to.components().collect());
    let common = from.iter().zip(&to).take_while(|(a, b)| a == b).count();
    let mut path: PathBuf = std::iter::repeat_n(std::path::Component::ParentDir, from.len() - common).collect();
    path.extend(&to[common..]);
    path
}

/// Recreates the repository at `root` under `tree` with `files` (paths relative to `root`)
/// replaced by new content: every directory is a real directory and every other file a symlink
/// into the repository. No directory may be a symlink: kustomize (and [`crate::refs::check`])
/// resolve a directory's symlinks before following its relative references, so a kustomization
/// reached through a linked directory would name the repository's original files again, the
/// remote bases they were rewritten from included.
pub fn overlay_tree(root: &Path, tree: &Path, files: &BTreeMap<PathBuf, String>) -> std::io::Result<()> {
    std::fs::create_dir_all(tree)?;
    for entry in std::fs::read_dir(root)? {
        let entry = entry?;
        let name = PathBuf::from(entry.file_name());
        let (from, to) = (entry.path(), tree.join(&name));
        if let Some(content) = files.get(&name) {
            std::fs::write(&to, content)?;
            continue;
        }
        // The entry's own type: a symlink in the repository stays a link (to that link).
        if entry.file_type()?.is_dir() {
            let below: BTreeMap<PathBuf, String> = files.iter().filter_map(|(path, content)| Some((path.strip_prefix(&name).ok()?.to_path_buf(), content.clone()))).filter(|(p, _)| !p.as_os_str().is_empty()).collect();
            overlay_tree(&from, &to, &below)?;
        } else {
            std::os::unix::fs::symlink(&from, &to)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn git(repository: &str, path: &str, git_ref: Option<&str>) -> RemoteRef {
        RemoteRef::Git { repository: repository.into(), path: path.into(), git_ref: git_ref.map(String::from) }
    }

    #[test]
    fn references_are_read_as_kustomize_reads_them() {
        // Kubeflow 1.11's Pipelines and Trainer.
        assert_eq!(parse("github.com/argoproj/argo-workflows/manifests/base/crds/minimal?ref=v3.7.3"), Ok(git("https://github.com/argoproj/argo-workflows", "manifests/base/crds/minimal", Some("v3.7.3"))));
        assert_eq!(
            parse("https://github.com/kubernetes-sigs/jobset/releases/download/v0.8.0/manifests.yaml"),
            Ok(RemoteRef::File { url: "https://github.com/kubernetes-sigs/jobset/releases/download/v0.8.0/manifests.yaml".into() })
        );
        assert_eq!(parse("git::https://git.example.com/team/repo.git//deploy/base?ref=0123abc&timeout=90"), Ok(git("https://git.example.com/team/repo", "deploy/base", Some("0123abc"))));
        assert_eq!(parse("https://git.example.com/team/repo//deploy?version=v2"), Ok(git("https://git.example.com/team/repo", "deploy", Some("v2"))));
        assert_eq!(parse("https://github.com/org/repo/base"), Ok(RemoteRef::File { url: "https://github.com/org/repo/base".into() }), "no ref: kustomize reads a URL as a file");
        assert!(parse("git@github.com:org/repo.git//base?ref=v1").is_err());
        assert!(parse("ssh://git@github.com/org/repo//base?ref=v1").is_err());
        assert!(parse("https://git.example.com/team/repo/deploy?ref=v1").unwrap_err().contains("//"));
        assert!(parse("github.com/org/repo/../../etc?ref=v1").unwrap_err().contains(".."));
    }

    #[test]
    fn only_a_tag_or_a_commit_pins_a_remote_base() {
        for pinned in ["v3.7.3", "3.7.3", "v0.8.0-rc.1", "0123abc", "8d1f3c2e9a0b4c5d6e7f8091a2b3c4d5e6f70819"] {
            assert_eq!(check_pinned(&git("https://github.com/o/r", "p", Some(pinned))), Ok(()), "{pinned}");
        }
        for moving in ["main", "master", "release-1.8", "HEAD", "latest"] {
            let refused = check_pinned(&git("https://github.com/o/r", "p", Some(moving)));
            assert!(refused.as_ref().unwrap_err().contains("can move"), "{moving}: {refused:?}");
        }
        assert!(check_pinned(&git("https://github.com/o/r", "p", None)).unwrap_err().contains("?ref="));
        assert_eq!(check_pinned(&RemoteRef::File { url: "https://github.com/k/jobset/releases/download/v0.8.0/manifests.yaml".into() }), Ok(()));
        assert!(check_pinned(&RemoteRef::File { url: "https://github.com/k/jobset/releases/latest/download/manifests.yaml".into() }).is_err());
        // The host is no version.
        assert!(check_pinned(&RemoteRef::File { url: "https://10.0.0.1/manifests.yaml".into() }).is_err());
    }

    #[test]
    fn a_mirror_replaces_the_prefix_it_names() {
        let mirrors: Vec<Mirror> = ["https://github.com/argoproj/=http://127.0.0.1:9/argo/", "https://github.com/=https://mirror.example.com/gh/"].iter().map(|m| m.parse().unwrap()).collect();
        let argo = parse("github.com/argoproj/argo-workflows/manifests/base?ref=v3.7.3").unwrap();
        assert_eq!(argo.download_url(&mirrors), "http://127.0.0.1:9/argo/argo-workflows/archive/v3.7.3.tar.gz", "the first matching mirror");
        let jobset = parse("https://github.com/kubernetes-sigs/jobset/releases/download/v0.8.0/manifests.yaml").unwrap();
        assert_eq!(jobset.download_url(&mirrors), "https://mirror.example.com/gh/kubernetes-sigs/jobset/releases/download/v0.8.0/manifests.yaml");
        assert_eq!(jobset.download_url(&[]), "https://github.com/kubernetes-sigs/jobset/releases/download/v0.8.0/manifests.yaml");
        assert!("no-separator".parse::<Mirror>().is_err());
        assert!("github.com/=ftp://x".parse::<Mirror>().is_err());
        // A resource's mirrors come before the operator's; a bad one is named by its index.
        let operator: Vec<Mirror> = vec!["https://github.com/=https://op.example/gh/".parse().unwrap()];
        let spec = ["https://github.com/=https://spec.example/gh/".to_string()];
        let merged = merged(&spec, &operator).unwrap();
        assert_eq!(merged.iter().map(|m| m.uri.as_str()).collect::<Vec<_>>(), ["https://spec.example/gh/", "https://op.example/gh/"]);
        let (index, reason) = super::merged(&[spec[0].clone(), "bad".into()], &operator).unwrap_err();
        assert_eq!(index, 1);
        assert!(reason.contains("PREFIX=URI"), "{reason}");
    }

    #[test]
    fn a_kustomization_is_rewritten_to_the_fetched_copies_only() {
        let text = "resources:\n- ../base\n- github.com/o/r/p?ref=v1\ncomponents: [https://h/o/r//c?ref=v1]\nimages: [{name: x}]\n";
        let local = BTreeMap::from([("github.com/o/r/p?ref=v1".to_string(), PathBuf::from("/cache/r/p")), ("https://h/o/r//c?ref=v1".to_string(), PathBuf::from("/cache/c"))]);
        let rewritten: serde_yaml_ng::Value = serde_yaml_ng::from_str(&rewrite(text, &local).unwrap().unwrap()).unwrap();
        let expected: serde_yaml_ng::Value = serde_yaml_ng::from_str("resources: [../base, /cache/r/p]\ncomponents: [/cache/c]\nimages: [{name: x}]\n").unwrap();
        assert_eq!(rewritten, expected);
        assert_eq!(rewrite("resources: [../base]\n", &local).unwrap(), None);
    }

    #[test]
    fn a_relative_path_climbs_to_the_common_directory() {
        assert_eq!(relative_path(Path::new("/w/tree/apps/base"), Path::new("/c/repos/k/minimal")), PathBuf::from("../../../../c/repos/k/minimal"));
        assert_eq!(relative_path(Path::new("/c/a"), Path::new("/c/a/b")), PathBuf::from("b"));
    }

    #[test]
    fn an_overlay_tree_replaces_only_the_named_files() {
        let tmp = tempfile::tempdir().unwrap();
        let (root, tree) = (tmp.path().join("repo"), tmp.path().join("tree"));
        for (path, text) in [("a/b/kustomization.yaml", "old"), ("a/b/other.yaml", "o"), ("a/c/x.yaml", "x"), ("top.yaml", "t")] {
            std::fs::create_dir_all(root.join(path).parent().unwrap()).unwrap();
            std::fs::write(root.join(path), text).unwrap();
        }
        overlay_tree(&root, &tree, &BTreeMap::from([(PathBuf::from("a/b/kustomization.yaml"), "new".to_string())])).unwrap();
        assert_eq!(std::fs::read_to_string(tree.join("a/b/kustomization.yaml")).unwrap(), "new");
        assert_eq!(std::fs::read_to_string(root.join("a/b/kustomization.yaml")).unwrap(), "old", "the repository is left as it is");
        assert!(std::fs::symlink_metadata(tree.join("a/b/other.yaml")).unwrap().file_type().is_symlink());
        // Directories are real, even where nothing below them is replaced: a kustomization in
        // `a/c` names `../b` of the tree, not of the repository.
        for dir in ["a", "a/c"] {
            assert!(std::fs::symlink_metadata(tree.join(dir)).unwrap().file_type().is_dir(), "{dir}");
        }
        assert_eq!(std::fs::canonicalize(tree.join("a/c")).unwrap().join("../b/kustomization.yaml").canonicalize().unwrap(), tree.join("a/b/kustomization.yaml").canonicalize().unwrap());
        assert!(std::fs::symlink_metadata(tree.join("a/c/x.yaml")).unwrap().file_type().is_symlink());
        assert_eq!(std::fs::read_to_string(tree.join("a/b/../c/x.yaml")).unwrap(), "x");
    }
}
