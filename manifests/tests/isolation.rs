//! The first wall: the real kustomize, run by [`Kustomize::build`], can read nothing but its
//! inputs and reach no network, whatever the package says. These tests call `build` directly, so
//! the reference check ([`kubeflow_manifests::refs`], the second wall) does not run: what they
//! show is the kernel's confinement alone ([`kubeflow_manifests::sandbox`]). Each also builds a
//! package that reads a file inside its inputs, so a failure is the confinement's, not the
//! package's.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use kubeflow_crds::kfdef::KustomizeRelease;
use kubeflow_manifests::{Kustomize, KustomizeError};

const SECRET: &str = "token: s3cr3t-operator-credential";

struct Package {
    tmp: tempfile::TempDir,
}

impl Package {
    /// A repository with the kustomization `write` returns for the path of a credential-like
    /// file beside the repository (outside every input), and a file `inside.txt`.
    fn new(write: impl FnOnce(&Path) -> String) -> Package {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(tmp.path().join("repo")).unwrap();
        std::fs::create_dir_all(tmp.path().join("home")).unwrap();
        let package = Package { tmp };
        std::fs::write(package.secret(), SECRET).unwrap();
        std::fs::write(package.repo().join("inside.txt"), "inside").unwrap();
        std::fs::write(package.repo().join("kustomization.yaml"), write(&package.secret())).unwrap();
        package
    }

    fn repo(&self) -> PathBuf {
        self.tmp.path().join("repo")
    }

    fn secret(&self) -> PathBuf {
        self.tmp.path().join("kubeconfig")
    }

    async fn build(&self, release: KustomizeRelease) -> Result<String, KustomizeError> {
        let kustomize = Kustomize::locate_release(release).await.unwrap_or_else(|e| panic!("these tests run the real kustomize: {e}"));
        kustomize.build(&self.repo(), &self.tmp.path().join("home"), &[self.repo()]).await
    }
}

fn generator(files: &[String]) -> String {
    format!(
        "generatorOptions: {{disableNameSuffixHash: true}}\nconfigMapGenerator:\n- name: loot\n  files: [{}]\n",
        files.join(", ")
    )
}

#[tokio::test]
async fn kustomize_reads_its_inputs_and_no_file_outside_them() {
    for release in [KustomizeRelease::V3, KustomizeRelease::V5] {
        let inside = Package::new(|_| generator(&["inside.txt".into()]));
        let out = inside.build(release).await.unwrap_or_else(|e| panic!("{release}: a file inside the repository: {e}"));
        assert!(out.contains("inside.txt: inside"), "{release}: {out}");

        let absolute = |secret: &Path| secret.display().to_string();
        // The text kustomize cleans: `x` does not exist, so nothing on disk resolves it.
        let through_missing = |secret: &Path| format!("kc=x/{}{}", "../".repeat(secret.components().count() + 2), absolute(secret).trim_start_matches('/'));
        for reference in [&absolute as &dyn Fn(&Path) -> String, &through_missing] {
            let package = Package::new(|secret| generator(&[reference(secret)]));
            let reference = reference(&package.secret());
            match package.build(release).await {
                Ok(out) => panic!("{release}: kustomize read {reference} outside its inputs:\n{out}"),
                Err(KustomizeError::Failed { stderr, .. }) => {
                    assert!(!stderr.contains("s3cr3t"), "{release}: {stderr}");
                    assert!(stderr.contains("permission denied"), "{release}: {reference}: {stderr}");
                }
                Err(other) => panic!("{release}: {reference}: {other}"),
            }
        }
    }
}

/// A loopback HTTP listener that answers 404 and counts the connections it accepted.
struct Listener {
    port: u16,
    accepted: Arc<AtomicUsize>,
}

impl Listener {
    fn start() -> Listener {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let accepted = Arc::new(AtomicUsize::new(0));
        let counter = accepted.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                counter.fetch_add(1, Ordering::SeqCst);
                let mut request = [0u8; 1024];
                let _ = stream.read(&mut request);
                let _ = stream.write_all(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
            }
        });
        Listener { port, accepted }
    }
}

#[tokio::test]
async fn kustomize_reaches_no_network_not_even_loopback() {
    let listener = Listener::start();
    let url = format!("http://127.0.0.1:{}/latest/meta-data", listener.port);
    // The listener answers: a connection reaching it would be counted before kustomize returns.
    let mut client = std::net::TcpStream::connect(("127.0.0.1", listener.port)).unwrap();
    client.write_all(b"GET / HTTP/1.1\r\n\r\n").unwrap();
    let mut answer = String::new();
    client.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 404"), "{answer}");
    assert_eq!(listener.accepted.load(Ordering::SeqCst), 1);

    for kustomization in [generator(&[format!("k={url}")]), format!("resources: [{url}]\n")] {
        let package = Package::new(|_| kustomization.clone());
        let result = package.build(KustomizeRelease::V5).await;
        assert!(result.is_err(), "{kustomization}: {result:?}");
    }
    assert_eq!(listener.accepted.load(Ordering::SeqCst), 1, "kustomize connected to the loopback listener");
}

#[tokio::test]
async fn kustomize_cannot_read_the_process_table_or_system_files() {
    // What a package could name to reach another process's memory or environment.
    for file in ["/proc/self/environ", "/proc/1/environ", "/etc/hostname"] {
        if !Path::new(file).exists() {
            continue;
        }
        let package = Package::new(|_| generator(&[format!("k={file}")]));
        let result = package.build(KustomizeRelease::V5).await;
        assert!(matches!(result, Err(KustomizeError::Failed { .. })), "{file}: {result:?}");
    }
}
