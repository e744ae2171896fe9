#!/usr/bin/env bash
# Tests the operator images hack/images.sh built (in $IMAGES_OUT, default <target dir>/images)
# against a running local environment (e2e/env/up.sh; source its env file first):
#   - each archive is accepted by skopeo, its digest is the one images/lock.json (and so deploy/
#     and the bundles) names, and assembling the images again gives the same bytes;
#   - each image unpacks (umoci) into a root filesystem with the binary, CA certificates and no
#     shell, and its entrypoint runs under an OCI runtime (crun) as the image's nonroot user, with
#     a read-only root, a ServiceAccount token mounted where Kubernetes mounts it and
#     KUBERNETES_SERVICE_HOST/PORT set, exactly the in-cluster path: it must report /readyz (its
#     watch caches synced through the API server with that token) and connect to NATS by name.
# Prints each image's size.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
source e2e/env/versions.sh
log() { printf '[test-images] %s\n' "$*" >&2; }
die() { log "FAIL: $*"; exit 1; }

TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
OUT=${IMAGES_OUT:-$TARGET_DIR/images}
LOCK=$ROOT/images/lock.json
NAMESPACE=kubeflow-operators
NONROOT=65532
[[ -n ${KUBECONFIG:-} ]] || die "KUBECONFIG is not set: start the environment (e2e/env/up.sh) and source $ENV_FILE"
[[ -f $OUT/digests ]] || die "no images in $OUT: run 'make images' first"
for tool in skopeo umoci crun jq kubectl curl; do command -v "$tool" >/dev/null || die "$tool not found (hack/prereqs.sh installs it)"; done

WORK=$(mktemp -d "${TMPDIR:-/tmp}/kfop-test-images.XXXX")
containers=()
# crun 1.8 refuses hybrid cgroup hosts (v1 controllers plus a cgroup2 mount at
# /sys/fs/cgroup/unified, as in some CI containers). The containers run without cgroups
# (--cgroup-manager=disabled), so crun runs in a private mount namespace without that mount.
runtime() {
  if [[ $(stat -f -c %T /sys/fs/cgroup/unified 2>/dev/null) == cgroup2fs ]]; then
    unshare --mount --propagation private sh -c 'umount /sys/fs/cgroup/unified && exec crun --cgroup-manager=disabled "$@"' crun "$@"
  else
    crun --cgroup-manager=disabled "$@"
  fi
}
cleanup() {
  local id
  for id in "${containers[@]}"; do runtime delete --force "$id" >/dev/null 2>&1 || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT

# --- digests: as locked, and reproducible --------------------------------------------------------
log "assembling the images a second time (same binaries) to check they are reproducible"
IMAGES_OUT=$WORK/again "$ROOT/hack/images.sh" build 2>"$WORK/again.log" || { cat "$WORK/again.log" >&2; die "second image build failed"; }
while read -r op digest _; do
  cmp -s "$OUT/$op.oci.tar" "$WORK/again/$op.oci.tar" || die "$op: two builds of the same sources differ ($digest, then $(grep "^$op " "$WORK/again/digests" | cut -d' ' -f2))"
  locked=$(jq -r --arg op "$op" '.images[$op] // "none"' "$LOCK")
  [[ $digest == "$locked" ]] || die "$op: built $digest, images/lock.json names $locked; run 'make images-lock generate' (see hack/images.sh check)"
  inspected=$(skopeo inspect "oci-archive:$OUT/$op.oci.tar" | jq -r .Digest)
  [[ $inspected == "$digest" ]] || die "$op: skopeo reads digest $inspected from the archive, expected $digest"
done <"$OUT/digests"
log "ok: every archive reproduces byte for byte, skopeo reads it, and its digest is the locked one"

# --- the environment: namespace, CRDs and RBAC of each operator's deploy/ package ------------------
kubectl get namespace "$NAMESPACE" >/dev/null 2>&1 || kubectl create namespace "$NAMESPACE" >/dev/null
package_dir() { case $1 in meta-operator) echo deploy/meta-operator ;; fleet-agent) echo deploy/fleet-spoke ;; *) echo "deploy/${1%-operator}" ;; esac; }
# What a binary needs on its command line besides its health port: the agent, its cluster's name
# (deploy/fleet-spoke's ConfigMap gives it in a pod).
extra_args() { case $1 in fleet-agent) echo '["--cluster=image-test"]' ;; *) echo '[]' ;; esac; }
# Whether the pod mounts its ServiceAccount token (the fleet agent's does not: it holds no credential).
token() { [[ $1 != fleet-agent ]] && echo true || echo false; }

# --- each image runs as its nonroot user and becomes ready ----------------------------------------
printf '127.0.0.1 localhost\n' >"$WORK/hosts"
# Each operator's health port: below the kernel's ephemeral range, where no outgoing connection
# (of the API server to etcd, say) takes it as its local port before the operator binds it, and
# one nothing listens on. (As free_port in e2e/src/lib.rs; the environment's ports end at 28222.)
ephemeral_low=$(cut -f1 /proc/sys/net/ipv4/ip_local_port_range)
port=29100
next_free_port() {
  port=$((port + 1))
  while (: </dev/tcp/127.0.0.1/$port) 2>/dev/null; do port=$((port + 1)); done
  ((port < ephemeral_low)) || die "no free port below the ephemeral range (from $ephemeral_low)"
}
# The operators whose images carry kustomize (hack/images.sh extra_files): those that render packages.
mapfile -t package_renderers < <("$(hack/cargo.sh bin-dir)/deploygen" --package-renderers)
((${#package_renderers[@]} > 0)) || die "deploygen --package-renderers listed no operators"
summary=()
while read -r op digest layer_bytes gz_bytes; do
  next_free_port
  dir=$WORK/$op
  mkdir -p "$dir"
  skopeo copy --quiet "oci-archive:$OUT/$op.oci.tar" "oci:$dir/layout:$op"
  umoci unpack --image "$dir/layout:$op" "$dir/bundle" >/dev/null
  rootfs=$dir/bundle/rootfs config=$dir/bundle/config.json

  # The root filesystem: exactly what hack/images.sh puts there, no shell. (An image that gets
  # extra files in extra_files() adds them to its expected list here.)
  files=$(cd "$rootfs" && find . -mindepth 1 | sort | tr '\n' ' ')
  expected=(./etc ./etc/group ./etc/nsswitch.conf ./etc/passwd ./etc/ssl ./etc/ssl/certs ./etc/ssl/certs/ca-certificates.crt ./tmp ./usr ./usr/local ./usr/local/bin "./usr/local/bin/$op")
  # Files extra_files() adds (hack/images.sh).
  [[ " ${package_renderers[*]} " == *" $op "* ]] && expected+=(./usr/local/bin/kustomize ./usr/local/bin/kustomize-v3.2 ./usr/local/bin/kustomize-v5)
  expected=$(printf '%s\n' "${expected[@]}" | sort | tr '\n' ' ')
  [[ $files == "$expected" ]] || die "$op: unexpected root filesystem: $files"
  [[ ! -e $rootfs/bin/sh ]] || die "$op: the image has a shell"
  file "$rootfs/usr/local/bin/$op" | grep -qE 'statically linked|static-pie linked' || die "$op: binary is not static: $(file -b "$rootfs/usr/local/bin/$op")"
  jq -e --arg op "$op" '.process.user.uid == 65532 and .process.user.gid == 65532 and .process.args == ["/usr/local/bin/\($op)"]' "$config" >/dev/null \
    || die "$op: the image's config does not run /usr/local/bin/$op as $NONROOT:$NONROOT: $(jq -c '{user: .process.user, args: .process.args}' "$config")"
  labels=$(skopeo inspect "oci-archive:$OUT/$op.oci.tar" | jq -c .Labels)
  for label in source version revision; do
    jq -e --arg l "org.opencontainers.image.$label" '.[$l] | length > 0' <<<"$labels" >/dev/null || die "$op: label org.opencontainers.image.$label missing: $labels"
  done

  # What Kubernetes would give the pod: the ServiceAccount's token, the cluster CA and namespace.
  pkg=$(package_dir "$op")
  kubectl apply --server-side --field-manager kfop-test-images -f "$pkg/crd.yaml" -f "$pkg/rbac.yaml" >/dev/null
  secrets=$dir/serviceaccount
  mkdir -p "$secrets"
  kubectl -n "$NAMESPACE" create token "$op" --duration 1h >"$secrets/token"
  kubectl config view --raw --minify -o jsonpath='{.clusters[0].cluster.certificate-authority-data}' | base64 -d >"$secrets/ca.crt"
  printf '%s' "$NAMESPACE" >"$secrets/namespace"
  chmod 0644 "$secrets"/*
  # Its NATS identity and the bus's CA, as the identity Secret the meta-operator provisions.
  identity=$dir/nats
  mkdir -p "$identity"
  cp "$KFOP_BUS_DIR/identities/$op.nk" "$identity/nkey.seed"
  cp "$KFOP_BUS_DIR/ca.crt" "$identity/ca.crt"
  chmod 0644 "$identity"/*

  # The runtime configuration umoci derived from the image, adjusted as a kubelet would: the
  # host's network (the API server listens on loopback), a read-only root as in deploy/, the
  # mounts, the in-cluster environment; no cgroups (see runtime()).
  jq --arg secrets "$secrets" --arg identity "$identity" --arg hosts "$WORK/hosts" --arg port "$port" --arg apiport "$APISERVER_PORT" \
     --arg nats "tls://localhost:$NATS_PORT" --argjson extra "$(extra_args "$op")" --argjson token "$(token "$op")" '
    .process.terminal = false
    | .process.args += ["--metrics-addr=127.0.0.1:\($port)"] + $extra
    | .process.env += ["KUBERNETES_SERVICE_HOST=127.0.0.1", "KUBERNETES_SERVICE_PORT=\($apiport)", "NATS_URL=\($nats)", "NATS_NKEY_FILE=/var/run/kubeflow/nats/nkey.seed", "NATS_CA_FILE=/var/run/kubeflow/nats/ca.crt", "RUST_LOG=info"]
    | .root.readonly = true
    | .linux.namespaces |= map(select(.type != "network"))
    | del(.linux.resources, .linux.cgroupsPath)
    | .mounts |= map(select(.type != "cgroup"))
    | .mounts += (if $token then [{destination: "/var/run/secrets/kubernetes.io/serviceaccount", type: "bind", source: $secrets, options: ["rbind", "ro"]}] else [] end) + [
        {destination: "/var/run/kubeflow/nats", type: "bind", source: $identity, options: ["rbind", "ro"]},
        {destination: "/etc/hosts", type: "bind", source: $hosts, options: ["bind", "ro"]}
      ]' "$config" >"$config.new" && mv "$config.new" "$config"

  id=kfop-test-$op-$$
  containers+=("$id")
  runtime run --bundle "$dir/bundle" "$id" >"$dir/log" 2>&1 &
  runner=$!
  deadline=$((SECONDS + 90)) ready=0
  until ((ready)); do
    if curl -sf --max-time 2 "http://127.0.0.1:$port/readyz" >/dev/null; then ready=1; break; fi
    kill -0 "$runner" 2>/dev/null || { tail -n 30 "$dir/log" >&2; die "$op exited before it was ready (log above)"; }
    ((SECONDS < deadline)) || { tail -n 30 "$dir/log" >&2; die "$op not ready after 90 s (log above)"; }
    sleep 0.2
  done
  # Ready: it listed its resources through the API server, which only the token allows. It also
  # reached NATS over TLS by a host name (resolved by the static glibc from the image's
  # nsswitch.conf and the mounted /etc/hosts, as a pod resolves the nats Service) and
  # authenticated as its own identity: nats-server lists it by name.
  deadline=$((SECONDS + 60))
  until curl -sf --max-time 2 "http://127.0.0.1:$NATS_MONITOR_PORT/connz?limit=1024" | jq -e --arg op "$op" 'any(.connections[]?; .name == $op)' >/dev/null; do
    ((SECONDS < deadline)) || { tail -n 30 "$dir/log" >&2; die "$op did not connect to NATS at localhost:$NATS_PORT within 60 s (log above)"; }
    sleep 0.2
  done
  pid=$(runtime state "$id" | jq -r .pid)
  uid=$(awk '/^Uid:/ {print $2}' "/proc/$pid/status") gid=$(awk '/^Gid:/ {print $2}' "/proc/$pid/status")
  [[ $uid == "$NONROOT" && $gid == "$NONROOT" ]] || die "$op runs as $uid:$gid, not $NONROOT:$NONROOT"
  [[ $(readlink "/proc/$pid/exe") == */usr/local/bin/$op* || $(cat "/proc/$pid/comm") == "${op:0:15}" ]] || die "$op: pid $pid is not the image's binary"
  # Stopped as the kubelet stops a pod: SIGTERM to the container's PID 1, which the kernel
  # ignores unless the binary handles it.
  runtime kill "$id" TERM
  deadline=$((SECONDS + 20))
  while kill -0 "$runner" 2>/dev/null; do
    ((SECONDS < deadline)) || { runtime kill "$id" KILL; die "$op did not stop within 20 s of SIGTERM"; }
    sleep 0.2
  done
  wait "$runner" || true
  runtime delete --force "$id" >/dev/null 2>&1 || true
  summary+=("$(awk -v op="$op" -v d="$digest" -v l="$layer_bytes" -v g="$gz_bytes" 'BEGIN {printf "%-20s %s  %5.1f MiB (%4.1f MiB compressed)", op, d, l / 1048576, g / 1048576}')")
  with=$([[ $(token "$op") == true ]] && echo "with its ServiceAccount token" || echo "with no ServiceAccount token")
  log "ok: $op ran as $uid:$gid, became ready on /readyz $with and stopped on SIGTERM"
done <"$OUT/digests"

# --- the renderer: the kustomize-operator image as deploy/all runs it beside the operator ----------
# No ServiceAccount token, no environment but its callers' key, a read-only root with a writable
# /tmp, and the container's own network namespace with nothing but loopback (what deploy/'s
# NetworkPolicy leaves a pod: no route anywhere). A package sent to it straight (render-client,
# past the operator's reference checks) aims at the token and at a listener on the host; it gets
# neither.
op=kustomize-operator
dir=$WORK/renderer
mkdir -p "$dir"
umoci unpack --image "$WORK/$op/layout:$op" "$dir/bundle" >/dev/null
config=$dir/bundle/config.json
seed=$KFOP_BUS_DIR/identities/$op.nk
caller=$(sed -n 's/.*nkey: "\(U[A-Z0-9]*\)".*_INBOX\.kustomize-operator\..*/\1/p' "$KFOP_BUS_DIR/nats.conf")
[[ -n $caller ]] || die "no $op identity in $KFOP_BUS_DIR/nats.conf"
render_port=8081
jq --arg caller "$caller" --arg port "$render_port" '
  .process.terminal = false
  | .process.args += ["render-server", "--listen=127.0.0.1:\($port)", "--no-network-route"]
  | .process.env = [.process.env[] | select(startswith("PATH="))] + ["KFOP_RENDERER_CALLERS=\($caller)", "RUST_LOG=info"]
  | .root.readonly = true
  | del(.linux.resources, .linux.cgroupsPath)
  | .mounts |= map(select(.type != "cgroup"))
  | .mounts += [{destination: "/tmp", type: "tmpfs", source: "tmpfs", options: ["nosuid", "nodev", "size=256m"]}]' "$config" >"$config.new" && mv "$config.new" "$config"
jq -e '.linux.namespaces | any(.type == "network")' "$config" >/dev/null || die "the renderer's container has no network namespace of its own"
id=kfop-test-renderer-$$
containers+=("$id")
runtime run --bundle "$dir/bundle" "$id" >"$dir/log" 2>&1 &
runner=$!
pid=
deadline=$((SECONDS + 60))
until [[ -n $pid ]] && nsenter --net="/proc/$pid/ns/net" curl -sf --max-time 2 "http://127.0.0.1:$render_port/readyz" >/dev/null; do
  kill -0 "$runner" 2>/dev/null || { tail -n 30 "$dir/log" >&2; die "the renderer exited before it was ready (log above)"; }
  ((SECONDS < deadline)) || { tail -n 30 "$dir/log" >&2; die "the renderer not ready after 60 s (log above)"; }
  pid=$(runtime state "$id" 2>/dev/null | jq -r '.pid // empty' || true)
  sleep 0.2
done
# What the container holds: no token, no Kubernetes or credential variable, no route.
[[ ! -e /proc/$pid/root/var/run/secrets/kubernetes.io/serviceaccount ]] || die "the renderer has a ServiceAccount token mounted"
env_names=$(tr '\0' '\n' <"/proc/$pid/environ" | cut -d= -f1 | sort | tr '\n' ' ')
[[ $env_names == "HOME KFOP_RENDERER_CALLERS PATH RUST_LOG " ]] || die "the renderer's environment holds more than its callers' key: $env_names"
routes=$(tail -n +2 "/proc/$pid/net/route" | wc -l)
interfaces=$(tail -n +3 "/proc/$pid/net/dev" | cut -d: -f1 | tr -d ' ' | tr '\n' ' ')
[[ $routes == 0 && $interfaces == "lo " ]] || die "the renderer has a network: routes $routes, interfaces $interfaces"
# A listener on the host's loopback that records every connection.
hits=$dir/hits
: >"$hits"
listen_port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()')
python3 -c '
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen()
while True:
    c, _ = s.accept(); open(sys.argv[2], "a").write("hit\n"); c.close()' "$listen_port" "$hits" &
listener=$!
package=$dir/package
mkdir -p "$package"
client_bin=$(hack/cargo.sh bin-dir)/$op
render() { nsenter --net="/proc/$pid/ns/net" "$client_bin" render-client --url "http://127.0.0.1:$render_port" --nkey-file "$seed" --release v5 "$package" 2>&1; }
for source in 'token=x/../../../../../../../../../../../../../../../../../var/run/secrets/kubernetes.io/serviceaccount/token' "k=http://127.0.0.1:$listen_port/latest/meta-data"; do
  printf 'generatorOptions: {disableNameSuffixHash: true}\nconfigMapGenerator:\n- name: loot\n  files:\n  - %s\n' "$source" >"$package/kustomization.yaml"
  if out=$(render); then
    kill "$listener"; die "a package reading $source rendered in the renderer: $out"
  fi
  [[ $out == *"kustomize build failed"* ]] || { kill "$listener"; die "the renderer did not run kustomize on the package reading $source: $out"; }
done
kill "$listener" 2>/dev/null || true
[[ ! -s $hits ]] || die "the renderer's kustomize reached the host's loopback listener"
# The same renderer renders a package that reads only what it was sent.
printf 'configMapGenerator:\n- name: fine\n  literals: [a=b]\n' >"$package/kustomization.yaml"
out=$(render) || die "the renderer did not render a plain package: $out"
[[ $out == *"name: fine-"* ]] || die "unexpected render: $out"
runtime kill "$id" TERM
wait "$runner" || true
runtime delete --force "$id" >/dev/null 2>&1 || true
log "ok: the renderer (kustomize-operator render-server) ran with no token, no credential in its environment and no route; a package aimed at the token and at a host listener got neither"

log "image sizes (uncompressed, compressed):"
printf '  %s\n' "${summary[@]}" >&2
