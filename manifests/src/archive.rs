//! Unpacking an untrusted `.tar.gz` entry by entry.
//!
//! Every entry path must be relative without `..`; symlinks must stay inside the archive (checked
//! lexically per entry, then once more on the real tree, which also catches chains of links);
//! hard links are materialised as copies of a file unpacked before; nothing is ever written
//! through a symlink; devices, FIFOs and the like are refused. Sizes and entry counts are bounded.

use std::fs;
use std::io::{self, Read, Write};
use std::path::{Component, Path, PathBuf};

use crate::error::RepoErrorReason;

/// Bounds for one archive.
#[derive(Clone, Copy, Debug)]
pub struct UnpackLimits {
    /// Total bytes of file content written.
    pub max_bytes: u64,
    /// Entries (files, directories, links).
    pub max_entries: u64,
}

fn unsafe_entry(entry: &Path, reason: impl Into<String>) -> RepoErrorReason {
    RepoErrorReason::UnsafeEntry {
        entry: entry.display().to_string(),
        reason: reason.into(),
    }
}

fn io_err(context: &str, e: io::Error) -> RepoErrorReason {
    RepoErrorReason::Io(format!("{context}: {e}"))
}

/// `path` as a clean relative path: no root, no prefix, no `..`; `.` components dropped.
pub fn safe_relative(path: &Path) -> Result<PathBuf, String> {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::Normal(p) => out.push(p),
            Component::CurDir => {}
            Component::ParentDir => return Err("path contains '..'".into()),
            Component::RootDir | Component::Prefix(_) => return Err("absolute path".into()),
        }
    }
    Ok(out)
}

/// Whether the symlink at `link` (relative to the root) with target `target` stays inside the root
/// when resolved lexically.
fn link_stays_inside(link: &Path, target: &Path) -> bool {
    let mut stack: Vec<&std::ffi::OsStr> = Vec::new();
    if let Some(parent) = link.parent() {
        for c in parent.components() {
            if let Component::Normal(p) = c {
                stack.push(p);
            }
        }
    }
    for c in target.components() {
        match c {
            Component::Normal(p) => stack.push(p),
            Component::CurDir => {}
            Component::ParentDir => {
                if stack.pop().is_none() {
                    return false;
                }
            }
            Component::RootDir | Component::Prefix(_) => return false,
        }
    }
    true
}

/// Refuses to write below a symlink: every existing ancestor of `rel` inside `root` must be a real
/// directory.
fn check_no_symlink_ancestor(root: &Path, rel: &Path) -> Result<(), RepoErrorReason> {
    let mut cur = root.to_path_buf();
    let mut comps: Vec<_> = rel.components().collect();
    comps.pop();
    for c in comps {
        cur.push(c);
        match fs::symlink_metadata(&cur) {
            Ok(m) if m.file_type().is_symlink() => {
                return Err(unsafe_entry(rel, "a parent directory is a symlink"));
            }
            Ok(m) if !m.is_dir() => return Err(unsafe_entry(rel, "a parent path is a file")),
            Ok(_) => {}
            Err(_) => break,
        }
    }
    Ok(())
}

/// Removes what is at `out` (a file from an earlier entry of the same name) unless it is a
/// directory; tar lets later entries replace earlier ones.
fn clear_target(out: &Path, rel: &Path) -> Result<(), RepoErrorReason> {
    match fs::symlink_metadata(out) {
        Ok(m) if m.is_dir() => Err(unsafe_entry(rel, "replaces a directory")),
        Ok(_) => fs::remove_file(out).map_err(|e| io_err("replacing an entry", e)),
        Err(_) => Ok(()),
    }
}

/// Unpacks a gzip-compressed tar stream into `dest` (an empty directory).
pub fn unpack_tar_gz(
    src: impl Read,
    dest: &Path,
    limits: UnpackLimits,
) -> Result<(), RepoErrorReason> {
    unpack_tar(flate2::read::GzDecoder::new(src), dest, limits)
}

/// Unpacks a tar stream into `dest` (an empty directory), with the checks of the module.
pub fn unpack_tar(
    src: impl Read,
    dest: &Path,
    limits: UnpackLimits,
) -> Result<(), RepoErrorReason> {
    let mut archive = tar::Archive::new(src);
    let bad = |e: io::Error| RepoErrorReason::BadArchive(e.to_string());
    let mut written: u64 = 0;
    let mut count: u64 = 0;
    for entry in archive.entries().map_err(bad)? {
        let mut entry = entry.map_err(bad)?;
        let kind = entry.header().entry_type();
        if kind.is_pax_global_extensions()
            || kind.is_pax_local_extensions()
            || kind.is_gnu_longname()
            || kind.is_gnu_longlink()
        {
            continue;
        }
        count += 1;
        if count > limits.max_entries {
            return Err(RepoErrorReason::TooManyEntries {
                limit: limits.max_entries,
            });
        }
        let raw = entry.path().map_err(bad)?.into_owned();
        let rel = safe_relative(&raw).map_err(|r| unsafe_entry(&raw, r))?;
        if rel.as_os_str().is_empty() {
            continue; // "./"
        }
        check_no_symlink_ancestor(dest, &rel)?;
        let out = dest.join(&rel);
        let mkparent = |out: &Path| -> Result<(), RepoErrorReason> {
            fs::create_dir_all(out.parent().expect("joined path has a parent"))
                .map_err(|e| io_err("creating a directory", e))
        };
        if kind.is_dir() {
            match fs::symlink_metadata(&out) {
                Ok(m) if m.is_dir() => {}
                Ok(_) => return Err(unsafe_entry(&rel, "directory replaces a file or link")),
                Err(_) => {
                    fs::create_dir_all(&out).map_err(|e| io_err("creating a directory", e))?
                }
            }
        } else if kind.is_file() || kind == tar::EntryType::Continuous {
            mkparent(&out)?;
            clear_target(&out, &rel)?;
            let mode = entry.header().mode().unwrap_or(0o644);
            let mut file = fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&out)
                .map_err(|e| io_err("creating a file", e))?;
            let remaining = limits.max_bytes - written;
            let n = io::copy(&mut (&mut entry).take(remaining + 1), &mut file).map_err(bad)?;
            written += n;
            if written > limits.max_bytes {
                return Err(RepoErrorReason::UnpackedTooLarge {
                    limit: limits.max_bytes,
                });
            }
            file.flush().map_err(|e| io_err("writing a file", e))?;
            // Only the executable bit survives; no setuid, no group/world write.
            let perm = if mode & 0o111 != 0 { 0o755 } else { 0o644 };
            set_mode(&out, perm)?;
        } else if kind.is_symlink() {
            let target = entry
                .link_name()
                .map_err(bad)?
                .ok_or_else(|| unsafe_entry(&rel, "symlink without a target"))?
                .into_owned();
            if !link_stays_inside(&rel, &target) {
                return Err(unsafe_entry(
                    &rel,
                    format!("symlink to {} points outside the archive", target.display()),
                ));
            }
            mkparent(&out)?;
            clear_target(&out, &rel)?;
            std::os::unix::fs::symlink(&target, &out)
                .map_err(|e| io_err("creating a symlink", e))?;
        } else if kind.is_hard_link() {
            let target = entry
                .link_name()
                .map_err(bad)?
                .ok_or_else(|| unsafe_entry(&rel, "hard link without a target"))?
                .into_owned();
            let target_rel = safe_relative(&target).map_err(|r| {
                unsafe_entry(&rel, format!("hard link to {}: {r}", target.display()))
            })?;
            check_no_symlink_ancestor(dest, &target_rel)?;
            let src = dest.join(&target_rel);
            match fs::symlink_metadata(&src) {
                Ok(m) if m.is_file() => {}
                _ => {
                    return Err(unsafe_entry(
                        &rel,
                        format!(
                            "hard link to {}, which is not a file unpacked before it",
                            target.display()
                        ),
                    ));
                }
            }
            mkparent(&out)?;
            clear_target(&out, &rel)?;
            let n = fs::copy(&src, &out).map_err(|e| io_err("copying a hard link", e))?;
            written += n;
            if written > limits.max_bytes {
                return Err(RepoErrorReason::UnpackedTooLarge {
                    limit: limits.max_bytes,
                });
            }
        } else {
            return Err(unsafe_entry(
                &rel,
                format!("unsupported entry type {kind:?}"),
            ));
        }
    }
    verify_links(dest)
}

fn set_mode(path: &Path, mode: u32) -> Result<(), RepoErrorReason> {
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(path, fs::Permissions::from_mode(mode))
        .map_err(|e| io_err("setting permissions", e))
}

/// Every symlink under `root` that resolves must resolve inside it (links to links included).
pub fn verify_links(root: &Path) -> Result<(), RepoErrorReason> {
    let canon_root =
        fs::canonicalize(root).map_err(|e| io_err("resolving the unpack directory", e))?;
    for entry in walkdir::WalkDir::new(root).follow_links(false) {
        let entry = entry.map_err(|e| RepoErrorReason::Io(e.to_string()))?;
        if entry.path_is_symlink()
            && let Ok(resolved) = fs::canonicalize(entry.path())
            && !resolved.starts_with(&canon_root)
        {
            let rel = entry.path().strip_prefix(root).unwrap_or(entry.path());
            return Err(unsafe_entry(rel, "symlink resolves outside the archive"));
        }
    }
    Ok(())
}

/// The repository root inside an unpacked archive: GitHub archives hold one top folder
/// (`manifests-1.2.0/`), which is stripped; any other layout is used as is.
pub fn repository_root(unpacked: &Path) -> io::Result<PathBuf> {
    let mut entries = fs::read_dir(unpacked)?.collect::<io::Result<Vec<_>>>()?;
    if entries.len() == 1 {
        let only = entries.pop().expect("one entry");
        if only.file_type()?.is_dir() {
            return Ok(only.path());
        }
    }
    Ok(unpacked.to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn safe_relative_rejects_parent_and_absolute() {
        assert_eq!(
            safe_relative(Path::new("a/./b")).unwrap(),
            PathBuf::from("a/b")
        );
        assert_eq!(
            safe_relative(Path::new("a/../b")).unwrap_err(),
            "path contains '..'"
        );
        assert_eq!(
            safe_relative(Path::new("/etc/passwd")).unwrap_err(),
            "absolute path"
        );
    }

    #[test]
    fn symlinks_are_checked_relative_to_their_directory() {
        assert!(link_stays_inside(
            Path::new("top/a/link"),
            Path::new("../b/file")
        ));
        assert!(link_stays_inside(Path::new("top/link"), Path::new("..")));
        assert!(!link_stays_inside(
            Path::new("top/link"),
            Path::new("../..")
        ));
        assert!(!link_stays_inside(
            Path::new("link"),
            Path::new("/etc/passwd")
        ));
        assert!(!link_stays_inside(
            Path::new("a/link"),
            Path::new("../../x")
        ));
    }
}
