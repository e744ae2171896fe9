//! The Operator Lifecycle Manager on the local control plane: OLM's CRDs, its olm and catalog
//! operators and `opm serve` (all built from the Go module proxy by `e2e/env/build.sh`), run as
//! host processes with the environment's admin kubeconfig, as OLM's own Deployments would run.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{ApiResource, DynamicObject, ObjectMeta, PostParams};
use kube::{Api, Client};
use serde_json::Value;

use crate::{eventually, free_port, kubectl, unique_name};

/// Namespace OLM's operators run in.
pub const OLM_NAMESPACE: &str = "olm";

/// An OLM API (group `operators.coreos.com`).
pub fn olm_api(client: &Client, namespace: &str, version: &str, kind: &str, plural: &str) -> Api<DynamicObject> {
    let resource = ApiResource {
        group: "operators.coreos.com".into(),
        version: version.into(),
        api_version: format!("operators.coreos.com/{version}"),
        kind: kind.into(),
        plural: plural.into(),
    };
    Api::namespaced_with(client.clone(), namespace, &resource)
}

/// OLM's olm and catalog operators plus any `opm serve` catalogs, killed on drop.
pub struct Olm {
    bin: PathBuf,
    processes: Vec<Child>,
    pub logs: Vec<PathBuf>,
    /// opm's cache directories, removed on drop.
    scratch: Vec<PathBuf>,
}

impl Olm {
    /// Installs OLM's CRDs and starts its two operators.
    pub async fn start(client: &Client) -> Self {
        let bin = PathBuf::from(std::env::var("KFOP_OLM_BIN").expect("KFOP_OLM_BIN from the env file (e2e/env/up.sh)"));
        let crds = bin.join("crds");
        kubectl(&["apply", "--server-side", "--force-conflicts", "-f", crds.to_str().unwrap()]);
        kubectl(&["wait", "--for=condition=Established", "--timeout=60s", "-f", crds.to_str().unwrap()]);
        let namespace = Namespace { metadata: ObjectMeta { name: Some(OLM_NAMESPACE.into()), ..Default::default() }, ..Default::default() };
        match Api::<Namespace>::all(client.clone()).create(&PostParams::default(), &namespace).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => panic!("create namespace {OLM_NAMESPACE}: {e}"),
        }
        let mut olm = Self { bin, processes: Vec::new(), logs: Vec::new(), scratch: Vec::new() };
        olm.spawn("olm", &["--namespace", OLM_NAMESPACE, "--writeStatusName", ""], &[("OPERATOR_NAMESPACE", OLM_NAMESPACE), ("OPERATOR_NAME", "olm-operator")]);
        // The images are for registry pods and bundle unpacking, which catalogs served by
        // address with inline bundles never need.
        olm.spawn(
            "catalog",
            &["--namespace", OLM_NAMESPACE, "--configmapServerImage", "unused.invalid/none", "--opmImage", "unused.invalid/none", "--util-image", "unused.invalid/none"],
            &[],
        );
        olm
    }

    fn spawn(&mut self, binary: &str, args: &[&str], env: &[(&str, &str)]) {
        let log = std::env::temp_dir().join(format!("{binary}-{}.log", unique_name("olm")));
        let file = std::fs::File::create(&log).unwrap();
        let child = Command::new(self.bin.join(binary))
            .args(args)
            .envs(env.iter().copied())
            .stdout(file.try_clone().unwrap())
            .stderr(file)
            .spawn()
            .unwrap_or_else(|e| panic!("start {binary} from {}: {e}", self.bin.display()));
        self.processes.push(child);
        self.logs.push(log);
    }

    /// Serves the file-based catalog in `dir` with `opm serve` and returns its gRPC address.
    pub async fn serve_catalog(&mut self, dir: &Path) -> String {
        let port = free_port().to_string();
        let cache = std::env::temp_dir().join(unique_name("opm-cache"));
        let args = ["serve", dir.to_str().unwrap(), "-p", &port, "--pprof-addr", "", "--cache-dir", cache.to_str().unwrap(), "--cache-enforce-integrity=false"];
        self.spawn("opm", &args, &[]);
        self.scratch.push(cache);
        let address = format!("127.0.0.1:{port}");
        eventually(&format!("opm serve {} on {address}", dir.display()), || async {
            tokio::net::TcpStream::connect(&address).await.map(|_| ()).map_err(|e| e.to_string())
        })
        .await;
        address
    }
}

impl Drop for Olm {
    fn drop(&mut self) {
        for child in &mut self.processes {
            let _ = child.kill();
            let _ = child.wait();
        }
        for dir in &self.scratch {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// The committed catalog of `package` (`bundle/catalog/<package>/catalog.yaml`) as documents.
pub fn catalog_documents(package: &str) -> Vec<Value> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../bundle/catalog").join(package).join("catalog.yaml");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    serde_yaml_ng::Deserializer::from_str(&text).map(|doc| serde::Deserialize::deserialize(doc).unwrap()).collect()
}

/// Bundle names of `package`'s `stable` channel, oldest first.
pub fn channel_entries(package: &str) -> Vec<String> {
    let docs = catalog_documents(package);
    let channel = docs.iter().find(|d| d["schema"] == "olm.channel" && d["name"] == "stable").expect("a stable channel");
    channel["entries"].as_array().unwrap().iter().map(|e| e["name"].as_str().unwrap().to_string()).collect()
}

/// A copy of `package`'s catalog in a new directory that ends the channel at bundle `last`: what
/// the catalog looked like before the later releases were published.
pub fn catalog_until(package: &str, last: &str) -> PathBuf {
    let entries = channel_entries(package);
    let keep = &entries[..=entries.iter().position(|e| e == last).expect("a bundle of the channel")];
    let mut out = String::new();
    for mut doc in catalog_documents(package) {
        match doc["schema"].as_str() {
            Some("olm.bundle") if !keep.iter().any(|k| doc["name"] == k.as_str()) => continue,
            Some("olm.channel") => {
                let kept: Vec<Value> = doc["entries"].as_array().unwrap().iter().filter(|e| keep.iter().any(|k| e["name"] == k.as_str())).cloned().collect();
                doc["entries"] = Value::Array(kept);
            }
            _ => {}
        }
        out.push_str("---\n");
        out.push_str(&serde_yaml_ng::to_string(&doc).unwrap());
    }
    let dir = std::env::temp_dir().join(unique_name("catalog"));
    std::fs::create_dir_all(dir.join(package)).unwrap();
    std::fs::write(dir.join(package).join("catalog.yaml"), out).unwrap();
    dir
}
