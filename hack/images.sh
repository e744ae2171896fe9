#!/usr/bin/env bash
# Builds the operator images without a container daemon, reproducibly: one OCI image per operator
# holding its static binary, CA certificates and a nonroot user, written as an OCI archive
# (`oci-archive` tar, accepted by `podman load`, `kind load image-archive` and skopeo).
#
#   hack/images.sh build         the one build (hack/cargo.sh), then the images into $OUT; prints
#                                digests and sizes
#   hack/images.sh lock          build, then write images/lock.json (the digests deploy/ and the
#                                bundles reference; `make generate` afterwards)
#   hack/images.sh check         build, then fail unless every digest equals images/lock.json's
#   hack/images.sh reproduce     build a second time elsewhere (another path, CARGO_HOME, user,
#                                host, …) and fail unless the shipped binaries are byte-identical
#   hack/images.sh reproduce-build [DIR] / reproduce-compare DIR
#                                the same in two steps (make test runs the build beside its own)
#   hack/images.sh push REGISTRY [skopeo copy flags]
#                                push the archives under $OUT to REGISTRY/<operator>:v<version>,
#                                checking the registry keeps each digest
#
# Why the layout is written here rather than by umoci/buildah: every byte of the image must be a
# function of the sources alone, and a layer tar from GNU tar (sorted, fixed mtime/owner), `gzip -n`
# and JSON from jq give that with no timestamps or tool-version stamps to strip afterwards.
# skopeo (push, format check) and umoci (unpacking into a runtime bundle in the test) read the
# result, which keeps it honest to the OCI specification.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
log() { printf '[images] %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
# The binaries: the one build of hack/cargo.sh, the very files the end-to-end tests ran.
BIN_DIR=$(hack/cargo.sh bin-dir)
OUT=${IMAGES_OUT:-$TARGET_DIR/images}
LOCK=$ROOT/images/lock.json
SOURCE=$(sed -nE 's/^repository = "(.*)"/\1/p' Cargo.toml)
VERSION=$(sed -nE '/^\[workspace.package\]/,/^\[/ s/^version = "(.*)"/\1/p' Cargo.toml)
# Image repository: deploy/src/lib.rs IMAGE_REPOSITORY, which the packages reference.
REPOSITORY=$(sed -nE 's/^pub const IMAGE_REPOSITORY: &str = "(.*)";/\1/p' deploy/src/lib.rs)
[[ -n $SOURCE && -n $VERSION && -n $REPOSITORY ]] || die "cannot read the repository URL and version (Cargo.toml) or IMAGE_REPOSITORY (deploy/src/lib.rs)"
NONROOT=65532
# Every timestamp in the images (layer entries, config `created`): the epoch, so no build differs.
export SOURCE_DATE_EPOCH=0
CREATED=1970-01-01T00:00:00Z

# Builds (or finds up to date) the one build, then lists the images: the meta-operator and every
# registered component operator, each named after its binary.
build_binaries() {
  local start=$SECONDS
  # Explicitly: callers run this in `&&` chains, where bash ignores `set -e`, and images of the
  # previous build's binaries would be made (and locked) after a failed build.
  hack/cargo.sh build || die "the one build failed (output above)"
  log "the one build (hack/cargo.sh build) done in $((SECONDS - start)) s"
  list_operators
}

list_operators() {
  [[ -x $BIN_DIR/deploygen ]] || die "$BIN_DIR/deploygen missing: run hack/cargo.sh build first"
  mapfile -t OPERATORS < <("$BIN_DIR/deploygen" --images)
  mapfile -t PACKAGE_RENDERERS < <("$BIN_DIR/deploygen" --package-renderers)
  ((${#OPERATORS[@]} > 1)) || die "deploygen --images listed no images"
  ((${#PACKAGE_RENDERERS[@]} > 0)) || die "deploygen --package-renderers listed no operators"
}

# Extra files for one image, copied into its root filesystem before it is archived (files owned by
# root, mode set explicitly; the lock then needs `hack/images.sh lock`). Every operator that renders
# packages (`deploygen --package-renderers`: the generic one and the built-ins that render their
# KfDef's packages, each with a renderer pod of the same image) renders kfctl packages with
# kustomize v3.1.0, kubeflow/manifests 1.3 to 1.6 with v3.2.0 and current kubeflow/manifests with
# v5 (all static, from e2e/env/build.sh), found beside its binary.
extra_files() {
  local op=$1 rootfs=$2
  if [[ " ${PACKAGE_RENDERERS[*]} " == *" $op "* ]]; then
    source "$ROOT/e2e/env/versions.sh"
    "$ROOT/e2e/env/build.sh" kustomize
    install -m 0755 "$KUSTOMIZE_BIN/kustomize" "$rootfs/usr/local/bin/kustomize"
    install -m 0755 "$KUSTOMIZE_V5_BIN/kustomize" "$rootfs/usr/local/bin/kustomize-v5"
    install -m 0755 "$KUSTOMIZE_V32_BIN/kustomize" "$rootfs/usr/local/bin/kustomize-v3.2"
  fi
}

# Identifier of the sources the binaries are built from: the git tree id of these paths as they
# are in the working tree. It is the image's `revision` label. A commit id cannot be: the digests
# of the images are committed (images/lock.json, deploy/, bundle/), so a label naming the commit
# would change the digest the commit records. `git cat-file -p <revision>` lists the tree. This
# script is not among them: what it puts into an image shows in the digest anyway, and an edit of
# a comment here should not move every digest. Nor should an integration test (`<crate>/tests/`),
# which no binary is built from.
SOURCE_INPUTS=(Cargo.toml Cargo.lock crds operator-runtime meta-operator fleet-agent component-operators manifests
  ':(exclude,glob)**/tests/**')
source_revision() {
  git rev-parse --git-dir >/dev/null 2>&1 || die "not a git checkout: the revision label is the git tree id of the sources"
  local index
  index=$(mktemp)
  rm -f "$index"  # git creates it
  GIT_INDEX_FILE=$index git add -- "${SOURCE_INPUTS[@]}"
  GIT_INDEX_FILE=$index git write-tree
  rm -f "$index"
}

# Deterministic tar of the contents of directory $1 into file $2: sorted names without a leading
# `./` (as image tools write them), every entry owned by root with the epoch as mtime, no
# access/change times.
det_tar() {
  local entries
  mapfile -t entries < <(cd "$1" && ls -A | LC_ALL=C sort)
  LC_ALL=C tar --create --file "$2" --directory "$1" --sort=name --format=posix \
    --pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime \
    --mtime="@$SOURCE_DATE_EPOCH" --owner=0 --group=0 --numeric-owner -- "${entries[@]}"
}

# The CA bundle of the images: the Mozilla certificates of the ca-certificates package as shipped
# (each checked against the package's md5sums), in name order. Not the host's
# /etc/ssl/certs/ca-certificates.crt: that also holds whatever authorities the machine added
# (/usr/local/share/ca-certificates, e.g. a proxy's), which no image should trust and which made
# every digest differ from one machine to the next.
ca_bundle() {
  local sums files
  sums=$(dpkg-query --control-show ca-certificates md5sums 2>/dev/null) || die "cannot read the ca-certificates package's md5sums (dpkg-query --control-show ca-certificates md5sums)"
  mapfile -t files < <(awk '$2 ~ /^usr\/share\/ca-certificates\/mozilla\/.*\.crt$/ {print $2}' <<<"$sums" | LC_ALL=C sort)
  ((${#files[@]} > 100)) || die "the ca-certificates package lists only ${#files[@]} Mozilla certificates"
  (cd / && md5sum --check --quiet --strict <(grep -E ' usr/share/ca-certificates/mozilla/.*\.crt$' <<<"$sums")) >&2 ||
    die "a certificate of the ca-certificates package differs from the package's md5sums (above)"
  (cd / && cat -- "${files[@]}")
}

# The binary as the image holds it: the one build's, without symbols and line tables (which the
# tests' backtraces use, and which hold nothing the operator needs). GNU strip writes the same
# bytes for the same input.
shipped() {
  strip --strip-all -o "$2" "$1" && chmod 0755 "$2"
}

sha() { sha256sum "$1" | cut -d' ' -f1; }
size() { stat -c %s "$1"; }

# Writes the OCI layout of image $1 into directory $2 and the archive $OUT/$1.oci.tar; prints the
# manifest digest.
assemble() {
  local op=$1 work=$2 revision=$3
  local binary=$BIN_DIR/$op rootfs=$work/rootfs layout=$work/layout
  [[ -x $binary ]] || die "$binary missing; build the binaries first"
  rm -rf "$work" && mkdir -p "$rootfs" "$layout/blobs/sha256"
  # A distroless-like root: the binary, CA certificates, passwd/group naming the nonroot user,
  # nsswitch.conf (files before DNS, as kubelet's /etc/hosts expects) and a world-writable /tmp.
  # Every directory gets its mode explicitly: `install -d` makes missing parents with the umask's.
  local dir
  for dir in etc etc/ssl etc/ssl/certs usr usr/local usr/local/bin; do install -d -m 0755 "$rootfs/$dir"; done
  install -d -m 1777 "$rootfs/tmp"
  shipped "$binary" "$rootfs/usr/local/bin/$op"
  ca_bundle >"$rootfs/etc/ssl/certs/ca-certificates.crt"
  chmod 0644 "$rootfs/etc/ssl/certs/ca-certificates.crt"
  printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:%s:%s:nonroot:/home/nonroot:/sbin/nologin\n' $NONROOT $NONROOT >"$rootfs/etc/passwd"
  printf 'root:x:0:\nnonroot:x:%s:\n' $NONROOT >"$rootfs/etc/group"
  printf 'hosts: files dns\n' >"$rootfs/etc/nsswitch.conf"
  chmod 0644 "$rootfs/etc/passwd" "$rootfs/etc/group" "$rootfs/etc/nsswitch.conf"
  extra_files "$op" "$rootfs"
  # Each file's digest, so a mismatch with the lock can name the file (check_lock).
  (cd "$rootfs" && find . -type f | LC_ALL=C sort | xargs sha256sum) |
    jq -R -n --arg op "$op" '{($op): ([inputs | capture("^(?<sha>[0-9a-f]+)  \\./(?<path>.*)$") | {key: ("/" + .path), value: .sha}] | from_entries)}' >"$OUT/files.$op.json"

  det_tar "$rootfs" "$work/layer.tar"
  gzip -n -9 <"$work/layer.tar" >"$work/layer.tar.gz"
  local diff_id layer
  diff_id=$(sha "$work/layer.tar")
  layer=$(sha "$work/layer.tar.gz")
  mv "$work/layer.tar.gz" "$layout/blobs/sha256/$layer"

  local config manifest
  jq -n --sort-keys --compact-output \
    --arg op "$op" --arg created "$CREATED" --arg user "$NONROOT:$NONROOT" --arg diff "sha256:$diff_id" \
    --arg source "$SOURCE" --arg version "$VERSION" --arg revision "$revision" '{
      architecture: "amd64", os: "linux", created: $created,
      config: {
        User: $user, Entrypoint: ["/usr/local/bin/\($op)"], WorkingDir: "/",
        Env: ["PATH=/usr/local/bin", "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt"],
        Labels: {
          "org.opencontainers.image.title": $op,
          "org.opencontainers.image.source": $source,
          "org.opencontainers.image.version": $version,
          "org.opencontainers.image.revision": $revision,
          "org.opencontainers.image.licenses": "Apache-2.0"
        }
      },
      rootfs: {type: "layers", diff_ids: [$diff]},
      history: [{created: $created, created_by: "hack/images.sh"}]
    }' >"$work/config.json"
  config=$(sha "$work/config.json")
  jq -n --sort-keys --compact-output \
    --arg config "sha256:$config" --argjson config_size "$(size "$work/config.json")" \
    --arg layer "sha256:$layer" --argjson layer_size "$(size "$layout/blobs/sha256/$layer")" '{
      schemaVersion: 2, mediaType: "application/vnd.oci.image.manifest.v1+json",
      config: {mediaType: "application/vnd.oci.image.config.v1+json", digest: $config, size: $config_size},
      layers: [{mediaType: "application/vnd.oci.image.layer.v1.tar+gzip", digest: $layer, size: $layer_size}]
    }' >"$work/manifest.json"
  manifest=$(sha "$work/manifest.json")
  mv "$work/config.json" "$layout/blobs/sha256/$config"
  mv "$work/manifest.json" "$layout/blobs/sha256/$manifest"
  # The reference name is a full image reference, so podman and containerd (`kind load`, which
  # also reads its own io.containerd.image.name) import the image under its real name. The index
  # is not part of the digest.
  jq -n --sort-keys --compact-output \
    --arg digest "sha256:$manifest" --argjson size "$(size "$layout/blobs/sha256/$manifest")" \
    --arg ref "$REPOSITORY/$op:v$VERSION" '{
      schemaVersion: 2, mediaType: "application/vnd.oci.image.index.v1+json",
      manifests: [{mediaType: "application/vnd.oci.image.manifest.v1+json", digest: $digest, size: $size,
                   annotations: {"org.opencontainers.image.ref.name": $ref, "io.containerd.image.name": $ref}}]
    }' >"$layout/index.json"
  printf '{"imageLayoutVersion":"1.0.0"}' >"$layout/oci-layout"
  find "$layout" -type f -exec chmod 0644 {} + && find "$layout" -type d -exec chmod 0755 {} +
  det_tar "$layout" "$OUT/$op.oci.tar"
  printf '%s %s %s\n' "sha256:$manifest" "$(size "$work/layer.tar")" "$(size "$layout/blobs/sha256/$layer")"
}

# Builds every image; writes $OUT/digests (operator, digest, uncompressed and compressed size).
build_images() {
  build_binaries
  local revision op line
  revision=$(source_revision)
  mkdir -p "$OUT"
  : >"$OUT/digests.tmp"
  mkdir -p "$OUT/work"
  # One image per core at a time (compressing the layer is most of the work); each writes only
  # its own files, so the order they finish in changes nothing.
  local running=() pid
  for op in "${OPERATORS[@]}"; do
    file "$BIN_DIR/$op" | grep -qE 'statically linked|static-pie linked' || die "$op is not statically linked: $(file -b "$BIN_DIR/$op")"
    assemble "$op" "$OUT/work/$op" "$revision" >"$OUT/work/$op.line" &
    running+=($!)
    if ((${#running[@]} >= $(nproc))); then
      wait "${running[0]}" || die "assembling an image failed (above)"
      running=("${running[@]:1}")
    fi
  done
  for pid in "${running[@]}"; do wait "$pid" || die "assembling an image failed (above)"; done
  for op in "${OPERATORS[@]}"; do
    line=$(cat "$OUT/work/$op.line")
    echo "$op $line" >>"$OUT/digests.tmp"
  done
  rm -rf "$OUT/work"
  jq -s --sort-keys 'add' "$OUT"/files.*.json >"$OUT/files.json" && rm -f "$OUT"/files.*.json
  mv "$OUT/digests.tmp" "$OUT/digests"
  echo "$revision" >"$OUT/revision"
  log "images in $OUT (revision $revision):"
  awk '{printf "  %-20s %s  %5.1f MiB (%4.1f MiB compressed)\n", $1, $2, $3/1048576, $4/1048576}' "$OUT/digests" >&2
}

# What the digests depend on besides the sources: recorded in the lock so a mismatch can be told
# apart from a source change.
toolchain() {
  local pkg
  pkg() { dpkg-query -W -f '${Version}' "$1" 2>/dev/null || echo unknown; }
  jq -n --arg rustc "$(rustc --version)" --arg libc "$(pkg libc6-dev)" --arg certs "$(pkg ca-certificates)" \
    --arg cc "$(cc --version 2>/dev/null | head -1 || echo unknown)" --arg ld "$(ld --version 2>/dev/null | head -1 || echo unknown)" \
    --arg go "$(go version 2>/dev/null || echo unknown)" \
    '{rustc: $rustc, "libc6-dev": $libc, "ca-certificates": $certs, "cc (links the binaries)": $cc, "ld": $ld, "go (builds kustomize)": $go}'
}

lock_json() {
  jq -n --sort-keys --arg version "$VERSION" --arg repository "$REPOSITORY" --arg revision "$(cat "$OUT/revision")" \
    --argjson toolchain "$(toolchain)" --rawfile digests "$OUT/digests" --slurpfile files "$OUT/files.json" '{
      generated: "by hack/images.sh lock (make images-lock); do not edit",
      version: $version, repository: $repository, revision: $revision, toolchain: $toolchain,
      images: ($digests | split("\n") | map(select(length > 0) | split(" ") | {key: .[0], value: .[1]}) | from_entries),
      files: $files[0]
    }'
}

# The digests (and the sources they come from) must equal the lock's. On a mismatch it says what
# differs: the sources (revision), a recorded tool (another rustc may well build the same bytes, so
# that alone does not fail), and for each image which of its files, or else its layout.
check_lock() {
  [[ -f $LOCK ]] || die "$LOCK missing; run 'make images-lock'"
  local fields='{version, revision, images}' want have built
  built=$(lock_json)
  want=$(jq -S "$fields" "$LOCK") have=$(jq -S "$fields" <<<"$built")
  [[ $want == "$have" ]] && { log "every image digest equals $LOCK"; return 0; }
  diff <(echo "$want") <(echo "$have") >&2 || true
  if [[ $(jq -r .revision "$LOCK") != $(jq -r .revision <<<"$built") ]]; then
    die "the sources differ from those $LOCK was built from (revision): run 'make images-lock generate' and commit the result"
  fi
  jq -r --slurpfile lock "$LOCK" '.toolchain | to_entries[] | select($lock[0].toolchain[.key] != .value)
    | "[images] toolchain differs: \(.key): the lock was built with \($lock[0].toolchain[.key] // "(not recorded)"), this machine has \(.value)"' <<<"$built" >&2
  jq -r --slurpfile lock "$LOCK" '.images | to_entries[] | select($lock[0].images[.key] != .value) | .key' <<<"$built" | while read -r op; do
    jq -r --slurpfile lock "$LOCK" --arg op "$op" '(.files[$op] // {}) as $now | ($lock[0].files[$op] // {}) as $was
      | [($now + $was) | keys[] | select($now[.] != $was[.])] as $files
      | if ($lock[0].files[$op] == null) then "[images] \($op) differs (the lock records no file digests)"
        elif ($files | length) > 0 then "[images] \($op) differs in \($files | join(", "))"
        else "[images] \($op) differs in its layout (every file is as locked: tar, gzip or the JSON)" end' <<<"$built" >&2
  done
  die "the images built differ from $LOCK, from the same sources (diff and what differs above: committed < > built)"
}

# Builds the image binaries a second time somewhere else and compares them byte for byte with the
# first build's: another checkout path (a copy of the working tree), another CARGO_HOME whose
# registry sources are unpacked afresh (offline, from the first one's downloaded crates), another
# target directory, HOME, user name, host name, time zone, locale, umask and job count. Only the
# operator binaries are built, with what they link (`--bin`: the package selection and features
# stay those of the full build, checked by comparing the results); kfop, the benchmarks and the
# generators are not in an image. On a difference it names the binary and the strings only one
# holds.
# The second build: the operator binaries built again elsewhere (another path, CARGO_HOME, target
# directory, user, host, time zone, umask, jobs), into DIR (default: a new temporary directory,
# printed). Needs only the sources and the crates the first build downloaded, so it may start
# before the first build is done (make test starts it beside that build, at the lowest priority).
reproduce_build() {
  local elsewhere=${1:-} start=$SECONDS
  [[ -n $elsewhere ]] || elsewhere=$(mktemp -d "${TMPDIR:-/tmp}/kfop-reproduce.XXXX")
  mkdir -p "$elsewhere/checkout-moved" "$elsewhere/cargo-home/registry" "$elsewhere/home"
  git ls-files -z --cached --others --exclude-standard | grep -zv '^target/' |
    while IFS= read -r -d '' f; do [[ -e $f ]] && printf '%s\0' "$f"; done |
    tar --create --no-recursion --null --files-from - | tar --extract --directory "$elsewhere/checkout-moved"
  local cargo_home=${CARGO_HOME:-$HOME/.cargo}
  cp -r "$cargo_home/registry/index" "$cargo_home/registry/cache" "$elsewhere/cargo-home/registry/"
  log "second build for comparison in $elsewhere (other path, CARGO_HOME, target directory, user, host, time zone, umask, jobs)"
  local other_jobs=$(($(nproc) + 1)) hostname_change=(unshare --uts sh -c 'hostname kfop-reproduce && exec "$@"' sh)
  "${hostname_change[@]}" true 2>/dev/null || { hostname_change=(); log "cannot change the host name here (unshare --uts); the second build keeps it"; }
  (
    umask 0077
    cd "$elsewhere/checkout-moved"
    export RUSTUP_HOME=${RUSTUP_HOME:-$HOME/.rustup} CARGO_HOME=$elsewhere/cargo-home CARGO_TARGET_DIR=$elsewhere/target \
      HOME=$elsewhere/home USER=someone-else LOGNAME=someone-else TZ=Pacific/Kiritimati LC_ALL=C.UTF-8 CARGO_NET_OFFLINE=true
    "${hostname_change[@]}" hack/cargo.sh build-bins "${OPERATORS[@]/#/--bin=}" --jobs "$other_jobs" --quiet
  ) || die "the second build failed (output above); it is in $elsewhere"
  log "second build done in $((SECONDS - start)) s: $elsewhere"
}

# Compares the shipped binaries of the one build with those of the second build in DIR, byte for
# byte; removes DIR when they are the same.
reproduce_compare() {
  local elsewhere=${1:?usage: hack/images.sh reproduce-compare DIR} op differ=() again
  again=$(CARGO_TARGET_DIR=$elsewhere/target "$elsewhere/checkout-moved/hack/cargo.sh" bin-dir)
  mkdir -p "$elsewhere/first" "$elsewhere/second"
  for op in "${OPERATORS[@]}"; do
    shipped "$BIN_DIR/$op" "$elsewhere/first/$op" && shipped "$again/$op" "$elsewhere/second/$op"
    if ! cmp -s "$elsewhere/first/$op" "$elsewhere/second/$op"; then
      differ+=("$op")
      log "$op differs between the two builds; strings only one of them holds (< first, > second):"
      diff <(strings -n 8 "$elsewhere/first/$op" | sort -u) <(strings -n 8 "$elsewhere/second/$op" | sort -u) | grep '^[<>]' | head -20 >&2 || true
    fi
  done
  ((${#differ[@]} == 0)) || die "not reproducible: ${differ[*]} differ between two builds of the same sources (second build kept in $elsewhere)"
  rm -rf "$elsewhere"
  log "a second build elsewhere gave the same ${#OPERATORS[@]} binaries, byte for byte"
}

reproduce() {
  local elsewhere
  elsewhere=$(mktemp -d "${TMPDIR:-/tmp}/kfop-reproduce.XXXX")
  reproduce_build "$elsewhere" && reproduce_compare "$elsewhere"
}

# Pushes every built image as REGISTRY/<operator>:v<version>; further arguments go to `skopeo copy`
# (e.g. --dest-creds, or --dest-tls-verify=false for a local registry).
push() {
  local registry=${1:?usage: hack/images.sh push REGISTRY [skopeo copy flags] (e.g. ghcr.io/kubeflow-operator)} op digest pushed
  shift
  [[ -f $OUT/digests ]] || die "no images in $OUT; run 'make images' first"
  while read -r op digest _; do
    # --preserve-digests: the registry must store the very manifest the lock and deploy/ name.
    skopeo copy --quiet --preserve-digests --digestfile "$OUT/$op.pushed" "$@" \
      "oci-archive:$OUT/$op.oci.tar" "docker://$registry/$op:v$VERSION"
    pushed=$(cat "$OUT/$op.pushed")
    [[ $pushed == "$digest" ]] || die "$op: the registry holds $pushed, built $digest"
    echo "$registry/$op@$digest"
  done <"$OUT/digests"
}

case ${1:-} in
  binaries) build_binaries ;;
  build) build_images ;;
  lock) build_images && lock_json >"$LOCK" && log "wrote $LOCK; now run 'make generate'" ;;
  check) build_images && check_lock ;;
  # Of the binaries already built.
  reproduce) list_operators && reproduce ;;
  # The two halves, for make test: the second build beside the first, the comparison after both.
  # Before the first build is done: the operators are those images/lock.json names (`check`, run
  # after that build, fails if they are not the ones deploygen lists).
  reproduce-build) mapfile -t OPERATORS < <(jq -r '.images | keys[]' "$LOCK") && reproduce_build "${2:-}" ;;
  reproduce-compare) list_operators && reproduce_compare "${2:-}" ;;
  push) shift && push "$@" ;;
  *) die "usage: hack/images.sh build|lock|check|reproduce|reproduce-build [DIR]|reproduce-compare DIR|push REGISTRY" ;;
esac
