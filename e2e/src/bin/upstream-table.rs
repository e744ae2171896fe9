//! `upstream-table [TAG...]`: for each kubeflow/manifests release of `../shared/manifests`
//! (default 1.2.0, 1.3.1, 1.10.2 and 1.11.0), a Markdown table of its KfDef, application by
//! application: the objects `kfop build` writes for it and those upstream's `kustomize build
//! <path>` renders for the same path with the kustomize the release pins (1.11's remote bases read
//! from `remote/`, served to `kfop build` by a loopback mirror), compared by kind, namespace and
//! name. docs/upstream.md keeps the latest; the fields are compared by the tests
//! (`manifests/tests/upstream.rs`, e2e `kfop`).

use std::collections::{BTreeMap, BTreeSet};

use kubeflow_crds::KfDef;
use kubeflow_crds::kfdef::KustomizeRelease;
use kubeflow_manifests::{Kustomize, fixtures};
use serde_json::Value;

type Id = (String, String, String);

const APPLICATION: &str = "components.kubeflow.org/application";
const APPLICATIONS: &str = "components.kubeflow.org/applications";

fn id(object: &Value) -> Id {
    let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
    (text(&object["kind"]), text(&object["metadata"]["namespace"]), text(&object["metadata"]["name"]))
}

fn objects(text: &str) -> Vec<Value> {
    kubeflow_manifests::parse_objects(text).unwrap_or_else(|e| panic!("{e}")).into_iter().map(|o| serde_json::to_value(o).unwrap()).collect()
}

#[tokio::main]
async fn main() {
    let tags: Vec<String> = std::env::args().skip(1).collect();
    let tags = if tags.is_empty() { ["1.2.0", "1.3.1", "1.10.2", "1.11.0"].map(String::from).to_vec() } else { tags };
    let mirror = fixtures::upstream_remote_bases_mirror().await;
    for tag in tags {
        table(&tag, &mirror).await;
    }
}

async fn table(tag: &str, mirror: &fixtures::Server) {
    let (kfdef_file, pinned) = match tag {
        "1.2.0" => ("kfdef-1.2.0-istio-dex.yaml", KustomizeRelease::V3),
        "1.3.1" => ("kfdef-1.3.1.yaml", KustomizeRelease::V3_2),
        "1.10.2" | "1.11.0" => (if tag == "1.10.2" { "kfdef-1.10.2.yaml" } else { "kfdef-1.11.0.yaml" }, KustomizeRelease::V5),
        other => panic!("no release {other:?} in ../shared/manifests: 1.2.0, 1.3.1, 1.10.2 or 1.11.0"),
    };
    let releases = fixtures::upstream_releases();
    let archive = releases.join(format!("manifests-{tag}.tar.gz"));
    let work = std::env::temp_dir().join(kubeflow_e2e::unique_name(&format!("upstream-table-{tag}")));
    let unpacked = work.join("upstream");
    std::fs::create_dir_all(&unpacked).unwrap();
    let status = std::process::Command::new("tar").arg("-xzf").arg(&archive).arg("-C").arg(&unpacked).status().unwrap();
    assert!(status.success(), "unpack {}", archive.display());
    let offline = work.join("offline");
    std::fs::create_dir_all(&offline).unwrap();
    let (root, _) = fixtures::with_upstream_remote_bases_local(&unpacked.join(format!("manifests-{tag}")), &offline);

    let mut kfdef: KfDef = serde_yaml_ng::from_str(&std::fs::read_to_string(releases.join(kfdef_file)).unwrap()).unwrap();
    kfdef.spec.repos[0].uri = archive.display().to_string();
    kfdef.spec.remote_base_mirrors = vec![format!("https://github.com/={}", mirror.url("gh/"))];
    let file = work.join("kfdef.yaml");
    std::fs::write(&file, serde_yaml_ng::to_string(&kfdef).unwrap()).unwrap();
    let out = work.join("ours");
    let kfop = kubeflow_e2e::bin_dir().join("kfop");
    let built = std::process::Command::new(&kfop).arg("build").arg("-f").arg(&file).arg("-o").arg(&out).output().unwrap_or_else(|e| panic!("{}: {e}", kfop.display()));
    let report = String::from_utf8_lossy(&built.stdout).into_owned();
    assert!(built.status.success(), "kfop build of {tag}: {report}{}", String::from_utf8_lossy(&built.stderr));

    // kfop build's report: `<dir>/<component>.yaml: N objects (<operator> <version>: app, app)`.
    let mut installer: BTreeMap<String, String> = BTreeMap::new();
    for line in report.lines() {
        let Some((path, rest)) = line.split_once(".yaml: ") else { continue };
        let Some((_, applications)) = rest.split_once(": ") else { continue };
        let component = path.rsplit('/').next().unwrap_or_default();
        for application in applications.trim_end_matches(')').split(", ") {
            installer.insert(application.to_string(), component.to_string());
        }
    }
    let namespace = kfdef.metadata.namespace.clone().unwrap_or_default();
    let mut ours: BTreeMap<String, BTreeSet<Id>> = BTreeMap::new();
    for entry in std::fs::read_dir(&out).unwrap() {
        for object in objects(&std::fs::read_to_string(entry.unwrap().path()).unwrap()) {
            // An object several applications render alike is applied once, for all of them.
            let annotations = &object["metadata"]["annotations"];
            let applications = annotations[APPLICATIONS].as_str().or(annotations[APPLICATION].as_str()).unwrap_or_default();
            for application in applications.split(',') {
                ours.entry(application.to_string()).or_default().insert(id(&object));
            }
        }
    }

    let kustomize = Kustomize::locate_release(pinned).await.unwrap_or_else(|e| panic!("the real kustomize: {e}"));
    let home = work.join("home");
    std::fs::create_dir_all(&home).unwrap();
    let mut rendered: Vec<(String, String, Option<BTreeSet<Id>>)> = Vec::new();
    for application in &kfdef.spec.applications {
        let path = application.kustomize_config.as_ref().and_then(|c| c.repo_ref.as_ref()).map(|r| r.path.clone()).unwrap_or_default();
        // A `kind: Component` is built only with what it changes.
        let upstream = if kubeflow_manifests::refs::is_component(&root.join(&path)) {
            None
        } else {
            let output = kustomize.build(&root.join(&path), &home, std::slice::from_ref(&root)).await.unwrap_or_else(|e| panic!("upstream's build of {path}: {e}"));
            Some(objects(&output).iter().map(id).collect())
        };
        rendered.push((application.name.clone(), path, upstream));
    }
    let distinct: BTreeSet<&Id> = rendered.iter().filter_map(|(_, _, objects)| objects.as_ref()).flatten().collect();

    println!("### Kubeflow v{tag}\n");
    println!("`{kfdef_file}`; upstream's builds with kustomize {}, the release's:\n", pinned.as_str());
    println!("| application | installed by | path | objects: ours | upstream | same kind, namespace and name | upstream's namespaces (objects) |");
    println!("| --- | --- | --- | ---: | ---: | --- | --- |");
    let (mut total_upstream, mut differing) = (0, 0);
    for (at, (name, path, upstream)) in rendered.iter().enumerate() {
        let by = installer.get(name).map_or("kustomize", String::as_str);
        let mine: BTreeSet<Id> = ours.get(name).cloned().unwrap_or_default();
        let Some(upstream) = upstream else {
            println!("| {name} | {by} | `{path}` | — | — | a `kind: Component`: built with the applications it changes | |");
            continue;
        };
        total_upstream += upstream.len();
        // A namespaced object upstream leaves without a namespace goes to the KfDef's.
        let mine: BTreeSet<Id> = mine.into_iter().map(|(k, ns, n)| if ns == namespace && upstream.contains(&(k.clone(), String::new(), n.clone())) { (k, String::new(), n) } else { (k, ns, n) }).collect();
        // Rendered otherwise by a later application too, an object is applied as that one
        // renders it.
        let later: BTreeSet<&Id> = rendered[at + 1..]
            .iter()
            .filter_map(|(other, _, objects)| Some((ours.get(other)?, objects.as_ref()?)))
            .flat_map(|(theirs, objects)| upstream.iter().filter(|o| objects.contains(*o) && theirs.contains(*o)))
            .filter(|o| !mine.contains(*o))
            .collect();
        let mine: BTreeSet<Id> = mine.into_iter().chain(later.iter().map(|o| (*o).clone())).collect();
        let mut same = if mine == *upstream {
            "yes".to_string()
        } else {
            let show = |ids: Vec<&Id>| ids.iter().take(3).map(|(k, ns, n)| format!("{k} {ns}/{n}")).collect::<Vec<_>>().join(", ");
            format!("**no**: missing {}; more {}", show(upstream.difference(&mine).collect()), show(mine.difference(upstream).collect()))
        };
        differing += usize::from(mine != *upstream);
        if !later.is_empty() {
            same += &format!(" ({} applied as a later application renders them)", later.len());
        }
        let mut namespaces: BTreeMap<&str, usize> = BTreeMap::new();
        for (_, ns, _) in upstream {
            *namespaces.entry(if ns.is_empty() { "(cluster)" } else { ns }).or_default() += 1;
        }
        let namespaces: Vec<String> = namespaces.iter().map(|(n, c)| format!("{n} ({c})")).collect();
        println!("| {name} | {by} | `{path}` | {} | {} | {same} | {} |", mine.len() - later.len(), upstream.len(), namespaces.join(", "));
    }
    let written: BTreeSet<&Id> = ours.values().flatten().collect();
    let others = ours.get("").map_or(0, BTreeSet::len);
    let others = if others > 0 { format!(" ({others} of no application: namespaces the objects use)") } else { String::new() };
    let verdict = if differing == 0 { "every application" } else { "see above" };
    println!("| **all** | | | **{}** distinct{others} | **{total_upstream}** ({} distinct) | {verdict} | |\n", written.len(), distinct.len());
    let _ = std::fs::remove_dir_all(&work);
}
