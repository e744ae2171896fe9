//! `deploygen`: write deploy/<component>/ (default) or check it for drift (`--check`).

use std::process::ExitCode;

fn main() -> ExitCode {
    let result = match std::env::args().nth(1).as_deref() {
        None => kubeflow_deploy::write_all(),
        Some("--check") => kubeflow_deploy::check_all(),
        // The binaries with an image of their own (hack/images.sh builds one per name).
        Some("--images") => {
            for name in kubeflow_deploy::images() {
                println!("{name}");
            }
            Ok(())
        }
        // The operators that render packages: their images carry kustomize (hack/images.sh).
        Some("--package-renderers") => {
            for component in kubeflow_component_registry::all().into_iter().filter(|c| c.renders_packages) {
                println!("{}", component.operator);
            }
            Ok(())
        }
        Some(_) => {
            eprintln!("usage: deploygen [--check | --images | --package-renderers]");
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
