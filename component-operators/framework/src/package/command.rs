//! The command line of an operator that renders packages ([`crate::Component::RENDERS_PACKAGES`]):
//! the fetch options, and the renderer's own commands (`render-server`, which deploy/ runs in the
//! renderer pod from the operator's image, and `render-client`).

use clap::{Args, FromArgMatches};
use kubeflow_manifests::FetchOptions;
use kubeflow_manifests::fetch::{AllowEntry, DEFAULT_MAX_CACHE_BYTES};

/// How repositories named in resources are fetched.
#[derive(Args, Debug)]
pub struct FetchArgs {
    /// Destinations exempt from the fetch fence, which otherwise refuses repository URIs that are
    /// or resolve to loopback, private, link-local (cloud metadata), carrier-grade NAT and other
    /// non-public addresses: host names (matched as the URI names them), addresses or CIDRs,
    /// comma-separated (e.g. minio.storage.svc,10.20.0.0/16). None by default.
    #[arg(long, env = "KFOP_ALLOW_FETCH_FROM", value_name = "HOST|CIDR", value_delimiter = ',', value_parser = parse_allow_entry)]
    allow_fetch_from: Vec<AllowEntry>,
    /// Most bytes the unpacked repositories of the cache may hold (a number of bytes, or with Ki,
    /// Mi, Gi or Ti); the least recently used are evicted beyond it. Default: half of
    /// --work-volume-bytes when that is given, else 4Gi.
    #[arg(long, env = "KFOP_REPO_CACHE_MAX_BYTES", value_name = "BYTES", value_parser = parse_bytes)]
    repo_cache_max_bytes: Option<u64>,
    /// Size of the volume the cache and the renders' work directories live on (deploy/ sets it to
    /// the pod's `/tmp` emptyDir size limit, which the kubelet evicts the pod beyond).
    #[arg(long, env = "KFOP_WORK_VOLUME_BYTES", value_name = "BYTES", value_parser = parse_bytes)]
    work_volume_bytes: Option<u64>,
    /// Mirrors of the remote bases packages name (git references, release assets), PREFIX=URI,
    /// comma-separated: a remote base whose URL starts with PREFIX is fetched from URI and the
    /// rest (e.g. https://github.com/=https://mirror.example.com/github/). After a resource's own
    /// `spec.remoteBaseMirrors`.
    #[arg(long, env = "KFOP_REMOTE_BASE_MIRROR", value_name = "PREFIX=URI", value_delimiter = ',', value_parser = parse_mirror)]
    remote_base_mirror: Vec<kubeflow_manifests::remote_bases::Mirror>,
    /// A resource that names no repository installs the operator's built-in template of its
    /// release, an approximation of upstream's objects to be removed, instead of the release as
    /// upstream ships it: the component's packages in the Kubeflow release's archive on github.com
    /// (the default; rewritten by --remote-base-mirror on a cluster that reaches a mirror, e.g.
    /// https://github.com/kubeflow/manifests/archive/=https://mirror.example.com/kubeflow/).
    #[arg(long, env = "KFOP_BUILT_IN_TEMPLATES")]
    built_in_templates: bool,
}

fn parse_mirror(text: &str) -> Result<kubeflow_manifests::remote_bases::Mirror, String> {
    text.parse()
}

impl FetchArgs {
    /// The cache quota: as given, else half the work volume (renders' work directories and the
    /// download in progress need the rest), else [`DEFAULT_MAX_CACHE_BYTES`].
    fn cache_quota(&self) -> u64 {
        self.repo_cache_max_bytes.or(self.work_volume_bytes.map(|v| v / 2)).unwrap_or(DEFAULT_MAX_CACHE_BYTES)
    }
}

fn parse_allow_entry(entry: &str) -> Result<AllowEntry, String> {
    entry.parse()
}

fn parse_bytes(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let split = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let shift = match unit {
        "" => 0,
        "Ki" => 10,
        "Mi" => 20,
        "Gi" => 30,
        "Ti" => 40,
        _ => return Err(format!("{text:?}: expected a number of bytes, optionally with Ki, Mi, Gi or Ti (e.g. 4Gi)")),
    };
    let number: u64 = number.parse().map_err(|_| format!("{text:?}: expected a number of bytes, optionally with Ki, Mi, Gi or Ti (e.g. 4Gi)"))?;
    number.checked_mul(1 << shift).ok_or_else(|| format!("{text:?}: too large"))
}

/// `render-client`: one build of a directory in the renderer, as the operator asks for it.
#[derive(Args, Debug)]
struct ClientArgs {
    /// The renderer (http://host:port).
    #[arg(long, env = kubeflow_manifests::remote::RENDERER_URL_ENV)]
    url: String,
    /// The NKey seed to sign with (one the renderer's --callers names).
    #[arg(long, env = kubeflow_manifests::remote::RENDERER_NKEY_FILE_ENV)]
    nkey_file: std::path::PathBuf,
    /// kustomize release: v3 or v5.
    #[arg(long, default_value = "v5")]
    release: String,
    /// The kustomization directory; it is all the renderer receives.
    dir: std::path::PathBuf,
}

/// `render-server`: the renderer, and where it serves its metrics.
#[derive(clap::Args, Debug)]
struct RenderServerArgs {
    #[command(flatten)]
    server: kubeflow_manifests::remote::ServerArgs,
    /// Address of `/metrics` (the answers and connections counted), apart from the builds.
    #[arg(long)]
    metrics_listen: Option<std::net::SocketAddr>,
    #[command(flatten)]
    scrape_token: operator_runtime::server::ScrapeToken,
}

/// Serves the renderer's `/metrics` on `address` in the background, to scrapes presenting the
/// scrape token: a file the pod mounts, no credential.
async fn serve_renderer_metrics(address: std::net::SocketAddr, token: operator_runtime::server::ScrapeToken) -> Result<(), String> {
    use operator_runtime::server::OPENMETRICS;
    let listener = tokio::net::TcpListener::bind(address).await.map_err(|e| format!("listening on {address}: {e}"))?;
    let routes = token.protect(axum::Router::new().route("/metrics", axum::routing::get(|| async { ([("content-type", OPENMETRICS)], kubeflow_manifests::remote::RENDERER_METRICS.render()) })));
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, routes).await {
            tracing::warn!(error = %e, "the renderer's /metrics stopped");
        }
    });
    Ok(())
}

/// `command` (an operator's) with the fetch options and the renderer's commands.
pub fn augment(command: clap::Command) -> clap::Command {
    let command = command
        .args_conflicts_with_subcommands(true)
        .subcommand(RenderServerArgs::augment_args(clap::Command::new("render-server").about("The renderer: runs kustomize for the operator, in a pod with no credential and no network (deploy/)")))
        .subcommand(ClientArgs::augment_args(clap::Command::new("render-client").about("Builds a directory in the renderer and prints the output")));
    FetchArgs::augment_args(command)
}

/// Runs the renderer's command `name` (`render-server` or `render-client`).
pub fn run_tool(name: &str, matches: &clap::ArgMatches) -> std::process::ExitCode {
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("tokio runtime");
    let result = runtime.block_on(async {
        match name {
            "render-server" => {
                let args = RenderServerArgs::from_arg_matches(matches).map_err(|e| e.to_string())?;
                if let Some(address) = args.metrics_listen {
                    serve_renderer_metrics(address, args.scrape_token).await?;
                }
                kubeflow_manifests::remote::serve(args.server, operator_runtime::stop_signal()).await
            }
            _ => {
                let args = ClientArgs::from_arg_matches(matches).map_err(|e| e.to_string())?;
                let seed = std::fs::read_to_string(&args.nkey_file).map_err(|e| format!("reading {}: {e}", args.nkey_file.display()))?;
                let release = serde_json::from_value(serde_json::Value::String(args.release.clone())).map_err(|_| format!("--release {:?}: expected v3 or v5", args.release))?;
                let renderer = kubeflow_manifests::RemoteRenderer::new(&args.url, &seed)?;
                let output = renderer.build(release, &args.dir, std::slice::from_ref(&args.dir)).await.map_err(|e| e.to_string())?;
                print!("{output}");
                Ok(())
            }
        }
    });
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %e, "{name} failed");
            eprintln!("{name}: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// Sets this process's fetch options from the command line and, in a cluster, the renderer every
/// build goes to: before any resource is reconciled.
pub fn configure(matches: &clap::ArgMatches) -> Result<(), String> {
    let fetch = FetchArgs::from_arg_matches(matches).map_err(|e| e.to_string())?;
    if !fetch.allow_fetch_from.is_empty() {
        let allowed: Vec<String> = fetch.allow_fetch_from.iter().map(ToString::to_string).collect();
        tracing::warn!(allowed = ?allowed, "repository fetches may reach these destinations despite the fence");
    }
    let max_cache_bytes = fetch.cache_quota();
    let options = FetchOptions { allow_fetch_from: fetch.allow_fetch_from, max_cache_bytes, remote_base_mirrors: fetch.remote_base_mirror, built_in_templates: fetch.built_in_templates, ..FetchOptions::default() };
    super::set_fetch_options(options).map_err(|_| "the fetch options are already set".to_string())?;
    remote_renderer_from_secret()
}

/// In a cluster (`KFOP_RENDERER_CALLER_SECRET`, as deploy/ and the bundle set it): every build
/// goes to the renderer at `KFOP_RENDERER_URL`, signed with the key of that Secret (made if
/// missing), before any resource is reconciled.
fn remote_renderer_from_secret() -> Result<(), String> {
    use kubeflow_manifests::remote::{RENDERER_CALLER_SECRET_ENV, RENDERER_URL_ENV};
    let Some(secret) = std::env::var(RENDERER_CALLER_SECRET_ENV).ok().filter(|s| !s.is_empty()) else {
        return Ok(());
    };
    let url = std::env::var(RENDERER_URL_ENV).ok().filter(|u| !u.is_empty()).ok_or_else(|| format!("{RENDERER_CALLER_SECRET_ENV} is set but {RENDERER_URL_ENV} (the renderer) is not"))?;
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|e| e.to_string())?;
    let renderer = runtime.block_on(super::renderer::remote_from_secret(&url, &secret, super::cache_dir().join("work")))?;
    tracing::info!(url, "builds run in the renderer");
    super::renderer::set_renderer(renderer)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn command() -> clap::Command {
        augment(crate::OperatorArgs::augment_args(clap::Command::new("kustomize-operator")))
    }

    #[test]
    fn the_command_line_takes_the_fetch_options() {
        command().debug_assert();
        let matches = command().try_get_matches_from(["kustomize-operator", "--allow-fetch-from", "127.0.0.1,minio.storage.svc", "--allow-fetch-from=10.0.0.0/8", "--repo-cache-max-bytes", "512Mi"]).unwrap();
        let fetch = FetchArgs::from_arg_matches(&matches).unwrap();
        let allowed: Vec<String> = fetch.allow_fetch_from.iter().map(ToString::to_string).collect();
        assert_eq!(allowed, ["127.0.0.1/32", "minio.storage.svc", "10.0.0.0/8"]);
        assert_eq!(fetch.cache_quota(), 512 << 20);
        let defaults = FetchArgs::from_arg_matches(&command().try_get_matches_from(["kustomize-operator"]).unwrap()).unwrap();
        assert!(defaults.allow_fetch_from.is_empty(), "no exemptions unless given");
        assert_eq!(defaults.cache_quota(), 4 << 30);
        // In a pod: half the emptyDir deploy/ gives it, unless set.
        let in_pod = FetchArgs::from_arg_matches(&command().try_get_matches_from(["kustomize-operator", "--work-volume-bytes", "2048Mi"]).unwrap()).unwrap();
        assert_eq!(in_pod.cache_quota(), 1 << 30);
        let both = FetchArgs::from_arg_matches(&command().try_get_matches_from(["kustomize-operator", "--work-volume-bytes", "2Gi", "--repo-cache-max-bytes", "256Mi"]).unwrap()).unwrap();
        assert_eq!(both.cache_quota(), 256 << 20);
        let bad = command().try_get_matches_from(["kustomize-operator", "--allow-fetch-from", "10.0.0.0/40"]).unwrap_err().to_string();
        assert!(bad.contains("expected a host name"), "{bad}");
        assert!(parse_bytes("4GB").is_err());
        // Remote base mirrors, in the order given.
        let mirrored = FetchArgs::from_arg_matches(&command().try_get_matches_from(["kustomize-operator", "--remote-base-mirror", "https://github.com/argoproj/=https://m.example/argo/,https://github.com/=https://m.example/gh/"]).unwrap()).unwrap();
        let prefixes: Vec<&str> = mirrored.remote_base_mirror.iter().map(|m| m.prefix.as_str()).collect();
        assert_eq!(prefixes, ["https://github.com/argoproj/", "https://github.com/"]);
        assert!(defaults.remote_base_mirror.is_empty());
        assert!(!defaults.built_in_templates, "the release archives unless asked");
        assert!(FetchArgs::from_arg_matches(&command().try_get_matches_from(["kustomize-operator", "--built-in-templates"]).unwrap()).unwrap().built_in_templates);
        let bad = command().try_get_matches_from(["kustomize-operator", "--remote-base-mirror", "github.com"]).unwrap_err().to_string();
        assert!(bad.contains("PREFIX=URI"), "{bad}");
    }
}
