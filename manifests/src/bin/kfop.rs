//! `kfop`: kfctl-style command line for KfDefs.
//!
//! `kfop build -f kfdef.yaml -o DIR` renders every application to `DIR/<application>.yaml`, objects
//! in install order, exactly as an operator would apply them. `apply` and `delete` will run the
//! operators' own functions against a cluster.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use kubeflow_crds::KfDef;
use kubeflow_manifests::{FetchOptions, Kustomize, Renderer, RepoCache};

#[derive(Parser, Debug)]
#[command(
    name = "kfop",
    version,
    about = "kfctl-style commands for Kubeflow KfDefs"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Render every application of a KfDef to DIR/<application>.yaml, in install order.
    Build(BuildArgs),
}

#[derive(clap::Args, Debug)]
struct BuildArgs {
    /// The KfDef (kfctl format, kfdef.apps.kubeflow.org/v1).
    #[arg(short = 'f', long = "file")]
    file: PathBuf,
    /// Output directory (created when missing).
    #[arg(short = 'o', long = "output")]
    output: PathBuf,
    /// Where fetched repositories are cached.
    #[arg(long, env = "KFOP_MANIFESTS_CACHE", default_value_os_t = default_cache())]
    cache_dir: PathBuf,
    /// kustomize binary (default: $KFOP_KUSTOMIZE, else the one e2e/env/build.sh built).
    #[arg(long)]
    kustomize: Option<PathBuf>,
}

fn default_cache() -> PathBuf {
    std::env::var_os("HOME")
        .map(|h| PathBuf::from(h).join(".cache/kubeflow-operator/manifests"))
        .unwrap_or_else(|| std::env::temp_dir().join("kubeflow-manifests"))
}

async fn build(args: BuildArgs) -> Result<(), String> {
    let text =
        std::fs::read_to_string(&args.file).map_err(|e| format!("{}: {e}", args.file.display()))?;
    let kfdef: KfDef = serde_yaml_ng::from_str(&text)
        .map_err(|e| format!("{}: not a KfDef: {e}", args.file.display()))?;
    for app in &kfdef.spec.applications {
        // The name becomes a file name.
        if app.name.is_empty() || app.name.starts_with('.') || app.name.contains(['/', '\\', '\0'])
        {
            return Err(format!(
                "application name {:?} cannot be used as a file name",
                app.name
            ));
        }
    }
    let kustomize = match args.kustomize {
        Some(bin) => Kustomize::new(bin).await,
        None => Kustomize::locate().await,
    }
    .map_err(|e| e.to_string())?;
    // The KfDef file is the user's own: local repositories are fine here.
    let options = FetchOptions {
        allow_local: true,
        ..FetchOptions::default()
    };
    let cache = RepoCache::new(args.cache_dir.join("cache"), options)?;
    let renderer = Renderer::new(kustomize, args.cache_dir.join("work"))?;
    let started = std::time::Instant::now();
    let apps = renderer
        .render_kfdef(&cache, &kfdef)
        .await
        .map_err(|e| e.to_string())?;
    std::fs::create_dir_all(&args.output).map_err(|e| format!("{}: {e}", args.output.display()))?;
    for app in &apps {
        for w in &app.warnings {
            eprintln!("warning: application {:?}: {w}", app.name);
        }
        let path = args.output.join(format!("{}.yaml", app.name));
        std::fs::write(&path, app.to_yaml()).map_err(|e| format!("{}: {e}", path.display()))?;
        println!("{}: {} objects", path.display(), app.objects.len());
    }
    eprintln!(
        "rendered {} applications in {:.2} s",
        apps.len(),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Build(args) => build(args).await,
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
