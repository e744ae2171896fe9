//! `crdgen`: write the CRD YAML under crds/generated (default), check it (`--check`), or print it
//! (`--stdout`, for `kubectl apply -f -`).

use std::process::ExitCode;

use kubeflow_crds::crdgen;

fn main() -> ExitCode {
    let arg = std::env::args().nth(1);
    let dir = crdgen::generated_dir();
    let result = match arg.as_deref() {
        None => crdgen::write_all(&dir).map(|files| {
            for f in files {
                println!("wrote {}", dir.join(f).display());
            }
        }),
        Some("--check") => crdgen::check_all(&dir).map(|()| println!("CRDs in {} are up to date", dir.display())),
        Some("--stdout") => crdgen::render_all().map(|all| {
            for (_, yaml) in all {
                print!("---\n{yaml}");
            }
        }),
        Some(_) => {
            eprintln!("usage: crdgen [--check | --stdout]");
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("crdgen: {e}");
            ExitCode::FAILURE
        }
    }
}
