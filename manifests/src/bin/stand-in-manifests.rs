//! Serves a stand-in for a KfDef's manifests repository on loopback HTTP
//! ([`kubeflow_manifests::fixtures::stand_in_repo`]), for `make demo` on a machine that cannot
//! download the real one. Prints the archive's URL, then serves until stopped.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use clap::Parser;
use kubeflow_manifests::fixtures;

#[derive(Parser)]
struct Args {
    /// The KfDef whose applications' paths the stand-in provides.
    #[arg(long)]
    kfdef: std::path::PathBuf,
    #[arg(long, default_value = "127.0.0.1:18090")]
    listen: SocketAddr,
}

#[tokio::main]
async fn main() {
    let args = Args::parse();
    let text = std::fs::read_to_string(&args.kfdef).unwrap_or_else(|e| panic!("{}: {e}", args.kfdef.display()));
    let kfdef = serde_yaml_ng::from_str(&text).unwrap_or_else(|e| panic!("{}: not a KfDef: {e}", args.kfdef.display()));
    let archive = "archive/stand-in.tar.gz";
    let server = fixtures::Server::start_on(args.listen, BTreeMap::from([(archive.to_string(), fixtures::stand_in_repo(&kfdef))])).await;
    println!("{}", server.url(archive));
    std::future::pending::<()>().await;
}
