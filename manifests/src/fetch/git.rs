//! One commit of a git repository, fetched over git's smart HTTP protocol (version 2) with the
//! cache's fenced, bounded HTTP client: `ls-refs` finds the ref, `fetch` with `deepen 1` sends
//! one pack, which is read here (deltas resolved, every object's id computed) and its tree written
//! out. Git's content addressing checks what arrives: the tree written is the one the wanted
//! commit names, whoever served it. No git binary, no credential, no hooks, no submodules;
//! symbolic links are not written (a package reaches its files by path).

use std::collections::HashMap;
use std::io::Read;
use std::path::Path;

use crate::error::RepoErrorReason;

/// A pack object's kind (pack type codes 1 to 4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Commit,
    Tree,
    Blob,
    Tag,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Commit => "commit",
            Kind::Tree => "tree",
            Kind::Blob => "blob",
            Kind::Tag => "tag",
        }
    }
}

fn bad(what: impl Into<String>) -> RepoErrorReason {
    RepoErrorReason::Git(what.into())
}

/// Bounds of one fetch: the response's bytes, the objects' bytes once inflated, the tree's entries.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    pub max_download_bytes: u64,
    pub max_unpacked_bytes: u64,
    pub max_entries: u64,
}

/// Whether `git_ref` names a commit by its full id (which is wanted as it is).
fn is_commit_id(git_ref: &str) -> bool {
    git_ref.len() == 40 && git_ref.bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
}

/// One pkt-line (`0004` to `fff0` bytes with its length prefix).
fn pkt(line: &str) -> Vec<u8> {
    let mut out = format!("{:04x}", line.len() + 4).into_bytes();
    out.extend_from_slice(line.as_bytes());
    out
}

/// A v2 command request: `command=<name>`, the delimiter, its arguments, the flush.
fn command(name: &str, arguments: &[String]) -> Vec<u8> {
    let mut body = pkt(&format!("command={name}\n"));
    body.extend_from_slice(b"0001");
    for argument in arguments {
        body.extend(pkt(&format!("{argument}\n")));
    }
    body.extend_from_slice(b"0000");
    body
}

/// The pkt-lines of `data`: `Some(payload)` for a data line, `None` for a flush, delimiter or
/// response end.
fn pkt_lines(mut data: &[u8]) -> Result<Vec<Option<&[u8]>>, RepoErrorReason> {
    let mut lines = Vec::new();
    while !data.is_empty() {
        let length = data.get(..4).and_then(|l| std::str::from_utf8(l).ok()).and_then(|l| usize::from_str_radix(l, 16).ok()).ok_or_else(|| bad("a malformed pkt-line"))?;
        if length < 4 {
            lines.push(None);
            data = &data[4..];
            continue;
        }
        let line = data.get(4..length).ok_or_else(|| bad("a truncated pkt-line"))?;
        lines.push(Some(line));
        data = &data[length..];
    }
    Ok(lines)
}

/// Posts a v2 command to the repository's upload-pack and returns the response body, bounded.
async fn post(client: &reqwest::Client, repository: &str, body: Vec<u8>, limit: u64) -> Result<Vec<u8>, RepoErrorReason> {
    let url = reqwest::Url::parse(&format!("{}/git-upload-pack", repository.trim_end_matches('/'))).map_err(|e| RepoErrorReason::UnsupportedUri(e.to_string()))?;
    let transport = |e: reqwest::Error| super::transport_error(e, &url);
    let mut response = client
        .post(url.clone())
        .header("Content-Type", "application/x-git-upload-pack-request")
        .header("Accept", "application/x-git-upload-pack-result")
        .header("Git-Protocol", "version=2")
        .body(body)
        .send()
        .await
        .map_err(transport)?;
    if !response.status().is_success() {
        return Err(RepoErrorReason::HttpStatus(response.status().as_u16()));
    }
    let mut out = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(transport)? {
        if (out.len() + chunk.len()) as u64 > limit {
            return Err(RepoErrorReason::DownloadTooLarge { limit });
        }
        out.extend_from_slice(&chunk);
    }
    Ok(out)
}

/// Whether the server at `repository` speaks git's smart HTTP protocol, version 2 (its
/// `info/refs` advertisement); `false` for a plain file server (a mirror of archives).
pub async fn speaks_v2(client: &reqwest::Client, repository: &str) -> Result<bool, RepoErrorReason> {
    let url = reqwest::Url::parse(&format!("{}/info/refs?service=git-upload-pack", repository.trim_end_matches('/'))).map_err(|e| RepoErrorReason::UnsupportedUri(e.to_string()))?;
    let transport = |e: reqwest::Error| super::transport_error(e, &url);
    let response = client.get(url.clone()).header("Git-Protocol", "version=2").send().await.map_err(transport)?;
    let advertised = response.status().is_success() && response.headers().get("content-type").is_some_and(|t| t.as_bytes() == b"application/x-git-upload-pack-advertisement");
    if !advertised {
        return Ok(false);
    }
    let body = response.bytes().await.map_err(transport)?;
    let body = body.get(..64 << 10).unwrap_or(&body);
    Ok(pkt_lines(body).map(|lines| lines.iter().flatten().any(|l| l.trim_ascii_end() == b"version 2")).unwrap_or(false))
}

/// The commit `git_ref` names: a full commit id as it is, else the tag (peeled) or, failing that,
/// the branch of that name from `ls-refs`.
async fn resolve(client: &reqwest::Client, repository: &str, git_ref: &str, limits: Limits) -> Result<String, RepoErrorReason> {
    if is_commit_id(git_ref) {
        return Ok(git_ref.to_string());
    }
    let wanted = [format!("refs/tags/{git_ref}"), format!("refs/heads/{git_ref}")];
    let arguments = vec!["peel".to_string(), format!("ref-prefix {}", wanted[0]), format!("ref-prefix {}", wanted[1])];
    let body = post(client, repository, command("ls-refs", &arguments), limits.max_download_bytes).await?;
    let mut found: HashMap<String, String> = HashMap::new();
    for line in pkt_lines(&body)?.into_iter().flatten() {
        let line = std::str::from_utf8(line).map_err(|_| bad("ls-refs answered non-UTF-8"))?.trim_end();
        let mut fields = line.split(' ');
        let (Some(id), Some(name)) = (fields.next(), fields.next()) else { continue };
        let peeled = fields.find_map(|f| f.strip_prefix("peeled:")).unwrap_or(id);
        found.insert(name.to_string(), peeled.to_string());
    }
    wanted.iter().find_map(|name| found.get(name)).filter(|id| is_commit_id(id)).cloned().ok_or_else(|| {
        let short = git_ref.len() < 40 && git_ref.bytes().all(|b| b.is_ascii_hexdigit());
        bad(format!("the repository has no tag or branch {git_ref:?}{}", if short { " (name a commit by its full 40-digit id)" } else { "" }))
    })
}

/// Fetches the tree of the commit `git_ref` names into `dest` (which must not exist yet) and
/// returns the commit's id.
pub async fn fetch_tree(client: &reqwest::Client, repository: &str, git_ref: &str, limits: Limits, dest: &Path) -> Result<String, RepoErrorReason> {
    let commit = resolve(client, repository, git_ref, limits).await?;
    let arguments = vec!["no-progress".to_string(), "ofs-delta".to_string(), "deepen 1".to_string(), format!("want {commit}"), "done".to_string()];
    let body = post(client, repository, command("fetch", &arguments), limits.max_download_bytes).await?;
    let pack = packfile(&body)?;
    let dest = dest.to_path_buf();
    tokio::task::spawn_blocking(move || -> Result<String, RepoErrorReason> {
        let objects = read_pack(&pack, limits.max_unpacked_bytes)?;
        let tree = commit_tree(&objects, &commit)?;
        let mut entries = 0;
        write_tree(&objects, &tree, &dest, &mut entries, limits.max_entries)?;
        Ok(commit)
    })
    .await
    .map_err(|e| RepoErrorReason::Io(e.to_string()))?
}

/// The pack in a `fetch` response: the side-band channel 1 of its `packfile` section.
fn packfile(body: &[u8]) -> Result<Vec<u8>, RepoErrorReason> {
    let lines = pkt_lines(body)?;
    let start = lines.iter().position(|l| l.is_some_and(|l| l.trim_ascii_end() == b"packfile")).ok_or_else(|| {
        let said = lines.iter().flatten().find_map(|l| l.strip_prefix(b"ERR ")).map(|e| String::from_utf8_lossy(e).into_owned());
        bad(said.map_or("the server sent no packfile".into(), |e| format!("the server refused: {e}")))
    })?;
    let mut pack = Vec::new();
    for line in lines[start + 1..].iter().map_while(|l| *l) {
        match line.split_first() {
            Some((1, data)) => pack.extend_from_slice(data),
            Some((2, _)) => {}
            Some((3, message)) => return Err(bad(format!("the server failed: {}", String::from_utf8_lossy(message).trim()))),
            _ => return Err(bad("an unknown side-band channel")),
        }
    }
    Ok(pack)
}

/// Every object of `pack` by id (hex), deltas resolved; `max_bytes` bounds their inflated total.
fn read_pack(pack: &[u8], max_bytes: u64) -> Result<HashMap<String, (Kind, Vec<u8>)>, RepoErrorReason> {
    if pack.len() < 12 + 20 || &pack[..4] != b"PACK" || pack[4..8] != [0, 0, 0, 2] {
        return Err(bad("not a version 2 pack"));
    }
    let (body, trailer) = pack.split_at(pack.len() - 20);
    if sha1_smol::Sha1::from(body).digest().bytes()[..] != *trailer {
        return Err(bad("the pack's checksum does not match"));
    }
    let count = u32::from_be_bytes(pack[8..12].try_into().expect("4 bytes"));
    enum Entry {
        Whole(Kind, Vec<u8>),
        OfsDelta(usize, Vec<u8>),
        RefDelta(String, Vec<u8>),
    }
    let mut entries: Vec<(usize, Entry)> = Vec::new();
    let mut at = 12;
    let mut total: u64 = 0;
    for _ in 0..count {
        let start = at;
        let byte = |at: usize| body.get(at).copied().ok_or_else(|| bad("a truncated pack"));
        let mut c = byte(at)?;
        at += 1;
        let code = (c >> 4) & 7;
        let mut size = u64::from(c & 15);
        let mut shift = 4;
        while c & 0x80 != 0 {
            c = byte(at)?;
            at += 1;
            size |= u64::from(c & 0x7f).checked_shl(shift).filter(|_| shift < 57).ok_or_else(|| bad("an object size overflows"))?;
            shift += 7;
        }
        total += size;
        if total > max_bytes {
            return Err(RepoErrorReason::UnpackedTooLarge { limit: max_bytes });
        }
        let base = match code {
            6 => {
                let mut c = byte(at)?;
                at += 1;
                let mut offset = u64::from(c & 0x7f);
                while c & 0x80 != 0 {
                    c = byte(at)?;
                    at += 1;
                    offset = ((offset + 1) << 7) | u64::from(c & 0x7f);
                }
                let base = start.checked_sub(usize::try_from(offset).map_err(|_| bad("a delta base offset overflows"))?).ok_or_else(|| bad("a delta base before the pack"))?;
                Some(Err(base))
            }
            7 => {
                let id = body.get(at..at + 20).ok_or_else(|| bad("a truncated pack"))?;
                at += 20;
                Some(Ok(hex(id)))
            }
            _ => None,
        };
        let mut inflater = flate2::bufread::ZlibDecoder::new(&body[at..]);
        let mut data = Vec::with_capacity(size.min(1 << 20) as usize);
        (&mut inflater).take(size + 1).read_to_end(&mut data).map_err(|e| bad(format!("an object does not inflate: {e}")))?;
        if data.len() as u64 != size {
            return Err(bad("an object's size differs from its header"));
        }
        at += usize::try_from(inflater.total_in()).expect("fits");
        let entry = match (code, base) {
            (1, _) => Entry::Whole(Kind::Commit, data),
            (2, _) => Entry::Whole(Kind::Tree, data),
            (3, _) => Entry::Whole(Kind::Blob, data),
            (4, _) => Entry::Whole(Kind::Tag, data),
            (6, Some(Err(base))) => Entry::OfsDelta(base, data),
            (7, Some(Ok(base))) => Entry::RefDelta(base, data),
            _ => return Err(bad(format!("an object of unknown type {code}"))),
        };
        entries.push((start, entry));
    }
    // Bases first: a whole object is known at once, a delta once its base is.
    let mut by_offset: HashMap<usize, String> = HashMap::new();
    let mut objects: HashMap<String, (Kind, Vec<u8>)> = HashMap::new();
    let mut pending: Vec<(usize, Entry)> = entries;
    let mut resolved_total: u64 = 0;
    while !pending.is_empty() {
        let before = pending.len();
        let mut still = Vec::new();
        for (offset, entry) in pending {
            let base = match &entry {
                Entry::Whole(..) => None,
                Entry::OfsDelta(base, _) => Some(by_offset.get(base).map(|id| &objects[id])),
                Entry::RefDelta(base, _) => Some(objects.get(base)),
            };
            let resolved = match (entry, base) {
                (Entry::Whole(kind, data), _) => Ok((kind, data)),
                (Entry::OfsDelta(_, delta) | Entry::RefDelta(_, delta), Some(Some((kind, source)))) => Ok((*kind, apply_delta(source, &delta)?)),
                (waiting, _) => Err(waiting),
            };
            match resolved {
                Ok((kind, data)) => {
                    resolved_total += data.len() as u64;
                    if resolved_total > max_bytes {
                        return Err(RepoErrorReason::UnpackedTooLarge { limit: max_bytes });
                    }
                    let id = object_id(kind, &data);
                    by_offset.insert(offset, id.clone());
                    objects.insert(id, (kind, data));
                }
                Err(waiting) => still.push((offset, waiting)),
            }
        }
        if still.len() == before {
            return Err(bad("a delta whose base is not in the pack"));
        }
        pending = still;
    }
    Ok(objects)
}

/// Git's id of an object: SHA-1 of `<kind> <length>\0<data>`.
fn object_id(kind: Kind, data: &[u8]) -> String {
    let mut hasher = sha1_smol::Sha1::new();
    hasher.update(format!("{} {}\0", kind.name(), data.len()).as_bytes());
    hasher.update(data);
    hasher.digest().to_string()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A delta's varint (little-endian groups of seven bits).
fn delta_size(delta: &[u8], at: &mut usize) -> Result<usize, RepoErrorReason> {
    let mut size = 0usize;
    let mut shift = 0;
    loop {
        let c = *delta.get(*at).ok_or_else(|| bad("a truncated delta"))?;
        *at += 1;
        size |= usize::from(c & 0x7f).checked_shl(shift).filter(|_| shift < 57).ok_or_else(|| bad("a delta size overflows"))?;
        shift += 7;
        if c & 0x80 == 0 {
            return Ok(size);
        }
    }
}

/// `source` with git's binary `delta` applied (copy and insert instructions).
fn apply_delta(source: &[u8], delta: &[u8]) -> Result<Vec<u8>, RepoErrorReason> {
    let mut at = 0;
    if delta_size(delta, &mut at)? != source.len() {
        return Err(bad("a delta for another base"));
    }
    let size = delta_size(delta, &mut at)?;
    let mut out = Vec::with_capacity(size.min(16 << 20));
    while at < delta.len() {
        let op = delta[at];
        at += 1;
        if op & 0x80 != 0 {
            let mut field = |bits: std::ops::Range<u8>| -> Result<usize, RepoErrorReason> {
                let mut value = 0usize;
                for (i, bit) in bits.enumerate() {
                    if op & (1 << bit) != 0 {
                        value |= usize::from(*delta.get(at).ok_or_else(|| bad("a truncated delta"))?) << (8 * i);
                        at += 1;
                    }
                }
                Ok(value)
            };
            let offset = field(0..4)?;
            let length = match field(4..7)? {
                0 => 0x10000,
                n => n,
            };
            out.extend_from_slice(source.get(offset..offset + length).ok_or_else(|| bad("a delta copies beyond its base"))?);
        } else if op != 0 {
            let length = usize::from(op);
            out.extend_from_slice(delta.get(at..at + length).ok_or_else(|| bad("a truncated delta"))?);
            at += length;
        } else {
            return Err(bad("a delta with a reserved instruction"));
        }
        if out.len() > size {
            return Err(bad("a delta longer than it says"));
        }
    }
    if out.len() != size {
        return Err(bad("a delta shorter than it says"));
    }
    Ok(out)
}

/// The tree id of commit `commit`.
fn commit_tree(objects: &HashMap<String, (Kind, Vec<u8>)>, commit: &str) -> Result<String, RepoErrorReason> {
    let Some((Kind::Commit, data)) = objects.get(commit) else {
        return Err(bad(format!("the pack lacks the wanted commit {commit}")));
    };
    let text = std::str::from_utf8(data).map_err(|_| bad("a commit that is not UTF-8"))?;
    text.lines().next().and_then(|l| l.strip_prefix("tree ")).filter(|t| is_commit_id(t)).map(String::from).ok_or_else(|| bad("a commit without a tree"))
}

/// Writes tree `tree` under `dir`: directories and files (executable bit kept); symbolic links
/// and submodules are left out, names that could leave `dir` are refused.
fn write_tree(objects: &HashMap<String, (Kind, Vec<u8>)>, tree: &str, dir: &Path, entries: &mut u64, max_entries: u64) -> Result<(), RepoErrorReason> {
    let Some((Kind::Tree, mut data)) = objects.get(tree).map(|(k, d)| (*k, d.as_slice())) else {
        return Err(bad(format!("the pack lacks tree {tree}")));
    };
    std::fs::create_dir_all(dir).map_err(|e| RepoErrorReason::Io(format!("{}: {e}", dir.display())))?;
    while !data.is_empty() {
        let space = data.iter().position(|b| *b == b' ').ok_or_else(|| bad("a malformed tree"))?;
        let nul = data.iter().position(|b| *b == 0).filter(|n| *n > space).ok_or_else(|| bad("a malformed tree"))?;
        let (mode, name) = (&data[..space], &data[space + 1..nul]);
        let id = hex(data.get(nul + 1..nul + 21).ok_or_else(|| bad("a malformed tree"))?);
        data = &data[nul + 21..];
        let name = std::str::from_utf8(name).map_err(|_| bad("a file name that is not UTF-8"))?;
        if name.is_empty() || name == "." || name == ".." || name.contains(['/', '\\']) || name.eq_ignore_ascii_case(".git") {
            return Err(RepoErrorReason::UnsafeEntry { entry: name.to_string(), reason: "not a plain file name".into() });
        }
        *entries += 1;
        if *entries > max_entries {
            return Err(RepoErrorReason::TooManyEntries { limit: max_entries });
        }
        let path = dir.join(name);
        match mode {
            b"40000" => write_tree(objects, &id, &path, entries, max_entries)?,
            b"100644" | b"100755" => {
                let Some((Kind::Blob, content)) = objects.get(&id) else { return Err(bad(format!("the pack lacks {name}'s content"))) };
                std::fs::write(&path, content).map_err(|e| RepoErrorReason::Io(format!("{}: {e}", path.display())))?;
                if mode == b"100755" {
                    use std::os::unix::fs::PermissionsExt;
                    let _ = std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755));
                }
            }
            // Symbolic links and submodules.
            b"120000" | b"160000" => {}
            other => return Err(bad(format!("{name} has an unknown mode {}", String::from_utf8_lossy(other)))),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pkt_lines_frame_commands_and_read_back() {
        let request = command("ls-refs", &["peel".into()]);
        assert_eq!(request, b"0014command=ls-refs\n00010009peel\n0000");
        assert_eq!(pkt_lines(&request).unwrap(), [Some(&b"command=ls-refs\n"[..]), None, Some(&b"peel\n"[..]), None]);
        assert!(pkt_lines(b"0009pee").is_err(), "a truncated line is refused");
    }

    #[test]
    fn a_delta_copies_and_inserts_and_a_wrong_one_is_refused() {
        let source = b"hello, world";
        // Source 12 bytes, target 11: copy 5 from offset 0, insert "!!", copy 4 from offset 8 ("orld").
        let delta = [12, 11, 0x80 | 0x10, 5, 2, b'!', b'!', 0x80 | 0x01 | 0x10, 8, 4];
        assert_eq!(apply_delta(source, &delta).unwrap(), b"hello!!orld");
        assert!(apply_delta(b"other base", &delta).is_err(), "a delta of another base");
        assert!(apply_delta(source, &[12, 11, 0x80 | 0x01 | 0x10, 200, 4]).is_err(), "a copy beyond the base");
        assert!(apply_delta(source, &[12, 11, 0]).is_err(), "the reserved instruction");
    }

    #[test]
    fn object_ids_are_gits() {
        // `git hash-object` of an empty blob and of "hello\n".
        assert_eq!(object_id(Kind::Blob, b""), "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391");
        assert_eq!(object_id(Kind::Blob, b"hello\n"), "ce013625030ba8dba906f756967f9e9ca394464a");
    }

    #[test]
    fn only_full_lower_case_ids_are_wanted_as_commits() {
        assert!(is_commit_id("ce013625030ba8dba906f756967f9e9ca394464a"));
        assert!(!is_commit_id("ce01362"), "a short id is resolved as a ref name, and not found");
        assert!(!is_commit_id("CE013625030BA8DBA906F756967F9E9CA394464A"));
    }
}
