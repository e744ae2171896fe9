//! `bundlegen`: write bundle/ (default), check it for drift (`--check`), or print the digest of a
//! release's committed bundles (`--digest <version>`, recorded in bundle/src/releases.rs on release).

use std::process::ExitCode;

fn main() -> ExitCode {
    let dir = kubeflow_bundle::bundle_dir();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.iter().map(String::as_str).collect::<Vec<_>>().as_slice() {
        [] => kubeflow_bundle::write_all(&dir),
        ["--check"] => kubeflow_bundle::check_all(&dir),
        ["--digest", version] => kubeflow_bundle::release_digest(&dir, version).map(|digest| println!("{digest}")),
        _ => {
            eprintln!("usage: bundlegen [--check | --digest <version>]");
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bundlegen: {e}");
            ExitCode::FAILURE
        }
    }
}
