#!/usr/bin/env bash
# Objects per application of Kubeflow v1.10.2's KfDef (../shared/manifests): what `kfop build`
# writes for each application and what upstream's `kustomize build <path>` (v5) renders for the
# same path, compared by kind, namespace and name. Prints a Markdown table; docs/upstream.md
# keeps the latest. (The content of each object is compared by manifests/tests/upstream.rs.)
#   hack/upstream-table.sh [MANIFESTS_DIR]   default: $KFOP_UPSTREAM_MANIFESTS, ../shared/manifests
set -euo pipefail
cd "$(dirname "$0")/.."
source e2e/env/versions.sh
manifests=${1:-${KFOP_UPSTREAM_MANIFESTS:-$PWD/../shared/manifests}}
[[ -f $manifests/manifests-1.10.2.tar.gz && -f $manifests/kfdef-1.10.2.yaml ]] || manifests=/work/shared/manifests
[[ -f $manifests/manifests-1.10.2.tar.gz ]] || { echo "no manifests-1.10.2.tar.gz in $manifests" >&2; exit 1; }
python3 -c 'import yaml' 2>/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-yaml >/dev/null; }
e2e/env/build.sh kustomize >&2
hack/cargo.sh build-bins --bin kfop >&2
work=$(mktemp -d "${TMPDIR:-/tmp}/kfop-upstream.XXXX")
trap 'rm -rf "$work"' EXIT
tar -xzf "$manifests/manifests-1.10.2.tar.gz" -C "$work"
root=$(find "$work" -mindepth 1 -maxdepth 1 -type d)
sed "s|uri: .*|uri: file://$manifests/manifests-1.10.2.tar.gz|" "$manifests/kfdef-1.10.2.yaml" >"$work/kfdef.yaml"
KFOP_KUSTOMIZE=$KUSTOMIZE_BIN/kustomize KFOP_KUSTOMIZE_V5=$KUSTOMIZE_V5_BIN/kustomize \
  "$(hack/cargo.sh bin-dir)/kfop" build -f "$work/kfdef.yaml" -o "$work/ours" | tee "$work/built" >&2
python3 - "$work/kfdef.yaml" "$work/ours" "$root" "$KUSTOMIZE_V5_BIN/kustomize" "$work/built" <<'EOF'
import collections, glob, os, re, subprocess, sys, yaml

kfdef_file, ours_dir, root, kustomize, built = sys.argv[1:]
APP = "components.kubeflow.org/application"
key = lambda o: (o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"])
# kfop build's report: `<dir>/<component>.yaml: N objects (<operator> <version>: app, app)`.
component_of = {}
for line in open(built):
    m = re.match(r"(\S+)\.yaml: \d+ objects \((\S+) \S+: (.*)\)$", line.strip())
    if m and m.group(2) != "kustomize-operator":
        for app in m.group(3).split(", "):
            component_of[app] = os.path.basename(m.group(1))
ours = collections.defaultdict(set)
for path in glob.glob(f"{ours_dir}/*.yaml"):
    for o in yaml.safe_load_all(open(path)):
        if o:
            ours[(o["metadata"].get("annotations") or {}).get(APP, "")].add(key(o))
kfdef = yaml.safe_load(open(kfdef_file))
apps, kfdef_namespace = kfdef["spec"]["applications"], kfdef["metadata"].get("namespace", "kubeflow")
rendered = []
for app in apps:
    path = app["kustomizeConfig"]["repoRef"]["path"]
    out = subprocess.run([kustomize, "build", f"{root}/{path}"], check=True, capture_output=True, text=True).stdout
    rendered.append((app["name"], path, {key(o) for o in yaml.safe_load_all(out) if o}))
# An object two applications render is applied once, as the later one renders it (kfctl's order).
last = {o: name for name, _, objects in rendered for o in objects}
print("| application | installed by | path | objects: ours | upstream | same kind, namespace and name | upstream's namespaces (objects) |")
print("| --- | --- | --- | ---: | ---: | --- | --- |")
for name, path, upstream in rendered:
    expected = {o for o in upstream if last[o] == name}
    # A namespaced object upstream leaves without a namespace (kubectl would put it in the
    # current one) goes to the KfDef's namespace.
    mine = {(k, "", n) if ns == kfdef_namespace and (k, "", n) in expected else (k, ns, n) for k, ns, n in ours[name]}
    same = "yes" if mine == expected else f"**no: {len(mine ^ expected)} differ**"
    if expected != upstream:
        same += f" ({len(upstream - expected)} applied as a later application)"
    namespaces = collections.Counter(ns or "(cluster)" for _, ns, _ in upstream)
    print(f"| {name} | {component_of.get(name, 'kustomize')} | `{path}` | {len(mine)} | {len(upstream)} | {same} | {', '.join(f'{n} ({c})' for n, c in sorted(namespaces.items()))} |")
others = sum(len(v) for k, v in ours.items() if k not in {n for n, _, _ in rendered})
print(f"| **all** | | | **{sum(len(v) for v in ours.values())}**{f' ({others} of no application: namespaces the objects use)' if others else ''} | **{sum(len(u) for _, _, u in rendered)}** ({len(last)} distinct) | | |")
EOF
