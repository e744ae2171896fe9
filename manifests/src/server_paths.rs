//! The operator's own filesystem paths taken out of text a tenant reads (status, events): a
//! render's messages name files by their path inside their repository (the message's field names
//! the repository), never where the operator keeps its cache or builds.

use std::path::Path;

/// One directory whose paths are rewritten: `<dir>/` and the next `skip` components (a cache key,
/// a render's temporary directory) go.
#[derive(Debug, Clone)]
pub struct ServerDir {
    dir: String,
    skip: usize,
}

impl ServerDir {
    /// Paths inside `dir` (a repository's root) become the path inside it.
    pub fn inside(dir: &Path) -> Self {
        ServerDir { dir: dir.display().to_string(), skip: 0 }
    }

    /// Paths inside `dir`'s entries (cache keys, render directories) become the path inside the entry.
    pub fn entries_of(dir: &Path) -> Self {
        ServerDir { dir: dir.display().to_string(), skip: 1 }
    }
}

/// `text` with every path under one of `dirs` rewritten as the first (in order) that holds it
/// says; a directory named by itself (no `/` after it) becomes `.`.
pub fn without_server_paths(text: &str, dirs: &[ServerDir]) -> String {
    let mut out = text.to_string();
    for dir in dirs.iter().filter(|d| d.dir.len() > 1) {
        out = rewrite(&out, dir);
    }
    out
}

fn rewrite(text: &str, dir: &ServerDir) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(&dir.dir) {
        let after = &rest[at + dir.dir.len()..];
        // Only the whole path from its start: `/tmp/c` is not inside `/tmp/c-2` nor `/var/tmp/c`.
        let whole = !rest[..at].ends_with(is_name_char) && !after.starts_with(is_name_char);
        if !whole {
            out.push_str(&rest[..at + dir.dir.len()]);
            rest = after;
            continue;
        }
        out.push_str(&rest[..at]);
        let mut tail = after;
        let mut skipped = 0;
        while skipped < dir.skip {
            let Some(next) = tail.strip_prefix('/') else { break };
            let end = next.find(|c: char| c == '/' || !is_path_char(c)).unwrap_or(next.len());
            tail = &next[end..];
            skipped += 1;
        }
        match tail.strip_prefix('/') {
            Some(inner) => tail = inner,
            None => out.push('.'),
        }
        rest = tail;
    }
    out.push_str(rest);
    out
}

/// A character of a path component's name.
fn is_name_char(c: char) -> bool {
    c.is_alphanumeric() || matches!(c, '-' | '_' | '.')
}

fn is_path_char(c: char) -> bool {
    !c.is_whitespace() && !matches!(c, '"' | '\'' | ':' | ',' | ';' | ')' | '(' | '[' | ']' | '`')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dirs() -> Vec<ServerDir> {
        vec![
            ServerDir::inside(Path::new("/tmp/c/repos/repos/uri-ab12/manifests-1.10.2")),
            ServerDir::entries_of(Path::new("/tmp/c/repos/repos")),
            ServerDir::entries_of(Path::new("/tmp/c/work")),
            ServerDir::inside(Path::new("/tmp/c")),
        ]
    }

    #[test]
    fn a_message_names_files_inside_their_repository() {
        let text = "Error: accumulating resources from '/tmp/c/repos/repos/uri-ab12/manifests-1.10.2/apps/katib/x.yaml': \
                    open /tmp/c/work/render-9Qz/home/k.yaml: no such file; remote base /tmp/c/repos/repos/sha-77/argo-3.7/manifests/base; \
                    \"/tmp/c/repos/repos/uri-ab12/manifests-1.10.2\" and /tmp/c/lock and file:///tmp/c/lock";
        assert_eq!(
            without_server_paths(text, &dirs()),
            "Error: accumulating resources from 'apps/katib/x.yaml': \
             open home/k.yaml: no such file; remote base argo-3.7/manifests/base; \
             \".\" and lock and file://lock"
        );
    }

    #[test]
    fn only_whole_directories_are_rewritten() {
        let text = "/tmp/c-other/x and /tmp/cache and /var/tmp/c/x and x/tmp/c/y stay";
        assert_eq!(without_server_paths(text, &dirs()), text);
    }
}
