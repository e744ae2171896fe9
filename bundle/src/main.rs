//! `bundlegen`: write bundle/ (default) or check it for drift (`--check`).

use std::process::ExitCode;

fn main() -> ExitCode {
    let dir = kubeflow_bundle::bundle_dir();
    let result = match std::env::args().nth(1).as_deref() {
        None => kubeflow_bundle::write_all(&dir),
        Some("--check") => kubeflow_bundle::check_all(&dir),
        Some(_) => {
            eprintln!("usage: bundlegen [--check]");
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
