//! Running the real `kustomize build` as a subprocess, bounded in time and output.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::io::AsyncReadExt;

use kubeflow_crds::kfdef::KustomizeRelease;

use crate::error::KustomizeError;
use crate::sandbox::{self, Confinement};

/// The kustomize version the project builds (`e2e/env/versions.sh`): the v3 engine kfctl linked.
pub const KUSTOMIZE_VERSION: &str = "v3.1.0";

/// Environment variable naming the kustomize binary.
pub const KUSTOMIZE_ENV: &str = "KFOP_KUSTOMIZE";

/// The v5 release the project builds (`e2e/env/versions.sh`), for kubeflow/manifests since 1.7:
/// the one upstream's CI installs with (v5.8 breaks `common/user-namespace`'s replacements).
pub const KUSTOMIZE_V5_VERSION: &str = "v5.7.1";

/// Environment variable naming the kustomize v5 binary.
pub const KUSTOMIZE_V5_ENV: &str = "KFOP_KUSTOMIZE_V5";

/// The v3.2 release the project builds (`e2e/env/versions.sh`): the one kubeflow/manifests 1.3
/// to 1.6 name.
pub const KUSTOMIZE_V32_VERSION: &str = "v3.2.0";

/// Environment variable naming the kustomize v3.2.0 binary.
pub const KUSTOMIZE_V32_ENV: &str = "KFOP_KUSTOMIZE_V3_2";

/// The environment variable naming `release`'s binary.
pub fn env_of(release: KustomizeRelease) -> &'static str {
    location(release).0
}

/// Where each release is found: its environment variable, its file name beside the operator
/// binary (in an image), and the prefix of its directory in the build cache.
fn location(release: KustomizeRelease) -> (&'static str, &'static str, &'static str) {
    match release {
        KustomizeRelease::V3 => (KUSTOMIZE_ENV, "kustomize", KUSTOMIZE_VERSION),
        KustomizeRelease::V3_2 => (KUSTOMIZE_V32_ENV, "kustomize-v3.2", KUSTOMIZE_V32_VERSION),
        KustomizeRelease::V5 => (KUSTOMIZE_V5_ENV, "kustomize-v5", KUSTOMIZE_V5_VERSION),
    }
}

/// A kustomize binary and the bounds for running it.
#[derive(Clone, Debug)]
pub struct Kustomize {
    pub bin: PathBuf,
    /// Whole `kustomize build` (default 120 s).
    pub timeout: Duration,
    /// Largest accepted output (default 64 MiB).
    pub max_output_bytes: u64,
    /// The flag that lifts the load restriction, which differs between kustomize releases.
    load_restrictor: Vec<String>,
}

/// Where `e2e/env/build.sh` puts kustomize `version`: `$KFOP_CACHE_DIR` or
/// `~/.cache/kubeflow-operator`, then `bin/kustomize-<version>*/kustomize`. Returns the newest match.
fn cached(version: &str) -> Option<PathBuf> {
    let cache = std::env::var_os("KFOP_CACHE_DIR")
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/kubeflow-operator"))
        })?;
    let prefix = format!("kustomize-{version}");
    let mut found: Vec<(std::time::SystemTime, PathBuf)> = std::fs::read_dir(cache.join("bin"))
        .ok()?
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
        .map(|e| e.path().join("kustomize"))
        .filter(|p| p.is_file())
        .filter_map(|p| Some((p.metadata().ok()?.modified().ok()?, p)))
        .collect();
    found.sort();
    found.pop().map(|(_, p)| p)
}

/// The load-restrictor flag for a `kustomize version` output: v3 before 3.8 spells it
/// `--load_restrictor none`, 3.8 `--load_restrictor LoadRestrictionsNone`, v4+
/// `--load-restrictor LoadRestrictionsNone`.
pub fn load_restrictor_flag(version_output: &str) -> Vec<String> {
    let parsed = version_output.split(['v', '/']).find_map(|s| {
        let mut it = s.split(|c: char| !c.is_ascii_digit());
        let major: u32 = it.next()?.parse().ok()?;
        let minor: u32 = it.next()?.parse().ok()?;
        Some((major, minor))
    });
    match parsed {
        Some((3, minor)) if minor >= 8 => {
            vec!["--load_restrictor".into(), "LoadRestrictionsNone".into()]
        }
        Some((major, _)) if major >= 4 => {
            vec!["--load-restrictor".into(), "LoadRestrictionsNone".into()]
        }
        _ => vec!["--load_restrictor".into(), "none".into()],
    }
}

/// A command running `bin` confined to reading under `readable` ([`crate::sandbox`]).
fn confined_command(bin: &Path, readable: &[PathBuf]) -> Result<tokio::process::Command, KustomizeError> {
    let confinement = Confinement::new(bin, readable).map_err(|e| KustomizeError::Isolation(e.to_string()))?;
    let mut command = tokio::process::Command::new(bin);
    confinement.apply(&mut command);
    Ok(command)
}

impl Kustomize {
    /// The v3.1.0 binary ([`Kustomize::locate_release`]).
    pub async fn locate() -> Result<Self, KustomizeError> {
        Self::locate_release(KustomizeRelease::V3).await
    }

    /// The binary of `release`: the one its environment variable (`$KFOP_KUSTOMIZE`,
    /// `$KFOP_KUSTOMIZE_V3_2`, `$KFOP_KUSTOMIZE_V5`) names, else one beside the running executable
    /// (`kustomize`, `kustomize-v3.2`, `kustomize-v5`), else the one `e2e/env/build.sh` built. Runs `kustomize version` once to
    /// pick the load-restrictor flag.
    pub async fn locate_release(release: KustomizeRelease) -> Result<Self, KustomizeError> {
        let (env, file, version) = location(release);
        // An operator image carries kustomize beside the operator binary.
        let beside_executable = || std::env::current_exe().ok().and_then(|e| Some(e.parent()?.join(file))).filter(|p| p.is_file());
        let bin = match std::env::var_os(env) {
            Some(p) => PathBuf::from(p),
            None => beside_executable().or_else(|| cached(version)).ok_or_else(|| KustomizeError::NotFound {
                path: PathBuf::from(format!("~/.cache/kubeflow-operator/bin/kustomize-{version}-*/kustomize")),
                hint: format!("run `e2e/env/build.sh kustomize` or set {env}"),
            })?,
        };
        Self::new(bin).await
    }

    /// A specific binary.
    pub async fn new(bin: PathBuf) -> Result<Self, KustomizeError> {
        if !bin.is_file() {
            return Err(KustomizeError::NotFound {
                path: bin,
                hint: format!("set {KUSTOMIZE_ENV} to a kustomize binary"),
            });
        }
        // Confined like every kustomize process, with nothing to read.
        let mut version = confined_command(&bin, &[])?;
        version.arg("version").env_clear().stdin(Stdio::null()).kill_on_drop(true);
        let out = version.output();
        let out = tokio::time::timeout(Duration::from_secs(30), out)
            .await
            .map_err(|_| KustomizeError::Timeout { secs: 30 })?
            .map_err(|e| sandbox::spawn_error(&bin, e))?;
        let load_restrictor = load_restrictor_flag(&String::from_utf8_lossy(&out.stdout));
        Ok(Kustomize {
            bin,
            timeout: Duration::from_secs(120),
            max_output_bytes: 64 << 20,
            load_restrictor,
        })
    }

    /// `kustomize build <dir>` with no load restriction (kfctl's `loader.RestrictionNone`), an
    /// empty environment (so no credentials or git configuration reach it), confined by the
    /// kernel ([`crate::sandbox`]) to reading under `readable` and `home`, with no network.
    /// Returns stdout.
    pub async fn build(&self, dir: &Path, home: &Path, readable: &[PathBuf]) -> Result<String, KustomizeError> {
        let mut allowed = readable.to_vec();
        allowed.push(home.to_path_buf());
        let mut command = confined_command(&self.bin, &allowed)?;
        command
            .arg("build")
            .args(&self.load_restrictor)
            .arg(dir)
            .env_clear()
            .env("HOME", home)
            .current_dir(home)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = command.spawn().map_err(|e| sandbox::spawn_error(&self.bin, e))?;
        let mut stdout = child.stdout.take().expect("piped");
        let mut stderr = child.stderr.take().expect("piped");
        let limit = self.max_output_bytes;
        let run = async {
            let mut out = Vec::new();
            let mut err = Vec::new();
            let read_out = async {
                (&mut stdout).take(limit + 1).read_to_end(&mut out).await?;
                Ok::<_, std::io::Error>(())
            };
            let read_err = async {
                (&mut stderr).take(64 << 10).read_to_end(&mut err).await?;
                Ok::<_, std::io::Error>(())
            };
            let (a, b) = tokio::join!(read_out, read_err);
            a.and(b).map_err(|e| KustomizeError::Spawn(e.to_string()))?;
            if out.len() as u64 > limit {
                return Err(KustomizeError::OutputTooLarge { limit });
            }
            let status = child
                .wait()
                .await
                .map_err(|e| KustomizeError::Spawn(e.to_string()))?;
            Ok((status, out, err))
        };
        let secs = self.timeout.as_secs();
        let (status, out, err) = tokio::time::timeout(self.timeout, run)
            .await
            .map_err(|_| KustomizeError::Timeout { secs })??;
        if !status.success() {
            let stderr = String::from_utf8_lossy(&err).trim().to_string();
            return Err(KustomizeError::Failed {
                status: status.to_string(),
                stderr,
            });
        }
        String::from_utf8(out).map_err(|e| KustomizeError::Failed {
            status: "ok".into(),
            stderr: format!("output is not UTF-8: {e}"),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_versions_are_the_ones_the_environment_builds() {
        let versions = include_str!("../../e2e/env/versions.sh");
        let built = |name: &str| versions.lines().find_map(|l| l.strip_prefix(&format!("{name}="))).map(|v| v.split_whitespace().next().unwrap_or_default().to_string());
        assert_eq!(built("KUSTOMIZE_VERSION").as_deref(), Some(KUSTOMIZE_VERSION));
        assert_eq!(built("KUSTOMIZE_V5_VERSION").as_deref(), Some(KUSTOMIZE_V5_VERSION));
        assert_eq!(built("KUSTOMIZE_V32_VERSION").as_deref(), Some(KUSTOMIZE_V32_VERSION));
    }

    #[test]
    fn load_restrictor_flag_follows_the_version() {
        let v31 = "Version: {KustomizeVersion:v3.1.0 GitCommit:$Format:%H$ BuildDate:1970-01-01T00:00:00Z GoOs:linux GoArch:amd64}";
        assert_eq!(load_restrictor_flag(v31), ["--load_restrictor", "none"]);
        assert_eq!(
            load_restrictor_flag("{Version:kustomize/v3.8.10 GitCommit:x}"),
            ["--load_restrictor", "LoadRestrictionsNone"]
        );
        assert_eq!(
            load_restrictor_flag("v5.7.1\n"),
            ["--load-restrictor", "LoadRestrictionsNone"]
        );
        assert_eq!(
            load_restrictor_flag("Version: {KustomizeVersion:unknown}"),
            ["--load_restrictor", "none"]
        );
    }
}
