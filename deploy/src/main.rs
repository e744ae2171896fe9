//! `deploygen`: write deploy/<component>/ (default) or check it for drift (`--check`).

use std::process::ExitCode;

fn main() -> ExitCode {
    let result = match std::env::args().nth(1).as_deref() {
        None => kubeflow_deploy::write_all(),
        Some("--check") => kubeflow_deploy::check_all(),
        Some(_) => {
            eprintln!("usage: deploygen [--check]");
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("deploygen: {e}");
            ExitCode::FAILURE
        }
    }
}
