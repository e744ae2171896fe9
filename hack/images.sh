#!/usr/bin/env bash
# Builds the operator images without a container daemon, reproducibly: one OCI image per operator
# holding its static binary, CA certificates and a nonroot user, written as an OCI archive
# (`oci-archive` tar, accepted by `podman load`, `kind load image-archive` and skopeo).
#
#   hack/images.sh build         build the binaries and images into $OUT, print digests and sizes
#   hack/images.sh lock          build, then write images/lock.json (the digests deploy/ and the
#                                bundles reference; `make generate` afterwards)
#   hack/images.sh check         build, then fail unless every digest equals images/lock.json's
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

# The images and the package that builds each one's binary (same name as the binary): the
# meta-operator and every registered component operator.
mapfile -t OPERATORS < <(cargo run -q --locked -p kubeflow-deploy --bin deploygen -- --operators)
((${#OPERATORS[@]} > 1)) || die "deploygen --operators listed no operators"
TRIPLE=x86_64-unknown-linux-gnu
TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
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

# Static binaries: glibc's static archives (libc6-dev) instead of musl, whose Rust target cannot be
# installed everywhere. --target is required so the flags skip build scripts and proc macros. The
# remaps keep the checkout, cargo home and target directory out of panic messages, so a clone
# elsewhere builds the same bytes.
build_binaries() {
  local cargo_home=${CARGO_HOME:-$HOME/.cargo} args=() op
  for op in "${OPERATORS[@]}"; do args+=(-p "$op"); done
  export RUSTFLAGS="-C target-feature=+crt-static --remap-path-prefix=$cargo_home=/cargo --remap-path-prefix=$ROOT=/src --remap-path-prefix=$TARGET_DIR=/target"
  log "building ${OPERATORS[*]} (profile image, static, $TRIPLE)"
  local start=$SECONDS
  cargo build --locked --profile image --target "$TRIPLE" "${args[@]}" --bins
  log "binaries built in $((SECONDS - start)) s"
}

# Extra files for one image, copied into its root filesystem before it is archived. Add a case per
# operator that needs more than its binary, e.g. for an operator that renders kustomize packages:
#   manifests-operator) install -m 0755 "$KUSTOMIZE" "$rootfs/usr/local/bin/kustomize" ;;
# (files owned by root, mode set explicitly; the lock then needs `hack/images.sh lock`).
extra_files() {
  local op=$1 rootfs=$2
  case $op in
    # The generic component renders kfctl packages with kustomize (static, from e2e/env/build.sh).
    kustomize-operator)
      source "$ROOT/e2e/env/versions.sh"
      "$ROOT/e2e/env/build.sh" kustomize
      install -m 0755 "$KUSTOMIZE_BIN/kustomize" "$rootfs/usr/local/bin/kustomize" ;;
    *) : "$rootfs" ;;
  esac
}

# Identifier of the sources the binaries are built from: the git tree id of these paths as they
# are in the working tree. It is the image's `revision` label. A commit id cannot be: the digests
# of the images are committed (images/lock.json, deploy/, bundle/), so a label naming the commit
# would change the digest the commit records. `git cat-file -p <revision>` lists the tree. This
# script is not among them: what it puts into an image shows in the digest anyway, and an edit of
# a comment here should not move every digest.
SOURCE_INPUTS=(Cargo.toml Cargo.lock crds operator-runtime meta-operator component-operators manifests)
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

sha() { sha256sum "$1" | cut -d' ' -f1; }
size() { stat -c %s "$1"; }

# Writes the OCI layout of image $1 into directory $2 and the archive $OUT/$1.oci.tar; prints the
# manifest digest.
assemble() {
  local op=$1 work=$2 revision=$3
  local binary=$TARGET_DIR/$TRIPLE/image/$op rootfs=$work/rootfs layout=$work/layout
  [[ -x $binary ]] || die "$binary missing; build the binaries first"
  rm -rf "$work" && mkdir -p "$rootfs" "$layout/blobs/sha256"
  # A distroless-like root: the binary, CA certificates, passwd/group naming the nonroot user,
  # nsswitch.conf (files before DNS, as kubelet's /etc/hosts expects) and a world-writable /tmp.
  install -d -m 0755 "$rootfs/etc/ssl/certs" "$rootfs/usr/local/bin"
  install -d -m 1777 "$rootfs/tmp"
  install -m 0755 "$binary" "$rootfs/usr/local/bin/$op"
  install -m 0644 /etc/ssl/certs/ca-certificates.crt "$rootfs/etc/ssl/certs/ca-certificates.crt"
  printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:%s:%s:nonroot:/home/nonroot:/sbin/nologin\n' $NONROOT $NONROOT >"$rootfs/etc/passwd"
  printf 'root:x:0:\nnonroot:x:%s:\n' $NONROOT >"$rootfs/etc/group"
  printf 'hosts: files dns\n' >"$rootfs/etc/nsswitch.conf"
  chmod 0644 "$rootfs/etc/passwd" "$rootfs/etc/group" "$rootfs/etc/nsswitch.conf"
  extra_files "$op" "$rootfs"

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
  for op in "${OPERATORS[@]}"; do
    file "$TARGET_DIR/$TRIPLE/image/$op" | grep -qE 'statically linked|static-pie linked' || die "$op is not statically linked: $(file -b "$TARGET_DIR/$TRIPLE/image/$op")"
    line=$(assemble "$op" "$OUT/work/$op" "$revision")
    echo "$op $line" >>"$OUT/digests.tmp"
  done
  rm -rf "$OUT/work"
  mv "$OUT/digests.tmp" "$OUT/digests"
  echo "$revision" >"$OUT/revision"
  log "images in $OUT (revision $revision):"
  awk '{printf "  %-20s %s  %5.1f MiB (%4.1f MiB compressed)\n", $1, $2, $3/1048576, $4/1048576}' "$OUT/digests" >&2
}

# What the digests depend on besides the sources: recorded in the lock so a mismatch can be told
# apart from a source change.
toolchain() {
  jq -n --arg rustc "$(rustc --version)" \
    --arg libc "$(dpkg-query -W -f '${Version}' libc6-dev 2>/dev/null || echo unknown)" \
    --arg certs "$(dpkg-query -W -f '${Version}' ca-certificates 2>/dev/null || echo unknown)" \
    '{rustc: $rustc, "libc6-dev": $libc, "ca-certificates": $certs}'
}

lock_json() {
  jq -n --sort-keys --arg version "$VERSION" --arg repository "$REPOSITORY" --arg revision "$(cat "$OUT/revision")" \
    --argjson toolchain "$(toolchain)" --rawfile digests "$OUT/digests" '{
      generated: "by hack/images.sh lock (make images-lock); do not edit",
      version: $version, repository: $repository, revision: $revision, toolchain: $toolchain,
      images: ($digests | split("\n") | map(select(length > 0) | split(" ") | {key: .[0], value: .[1]}) | from_entries)
    }'
}

# The digests (and the sources they come from) must equal the lock's; the toolchain is only
# reported, since another rustc may well build the same bytes.
check_lock() {
  [[ -f $LOCK ]] || die "$LOCK missing; run 'make images-lock'"
  local fields='{version, revision, images}' want have
  want=$(jq -S "$fields" "$LOCK") have=$(lock_json | jq -S "$fields")
  if [[ $want != "$have" ]]; then
    diff <(echo "$want") <(echo "$have") >&2 || true
    log "toolchain of the lock:   $(jq -S -c .toolchain "$LOCK")"
    log "toolchain of this build: $(toolchain | jq -S -c .)"
    die "the images built differ from $LOCK (diff above: committed < > built). Revision differs: the sources changed, run 'make images-lock generate' and commit the result. Same revision: the toolchain differs (compare the two lines above) or the build is not reproducible."
  fi
  log "every image digest equals $LOCK"
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
  push) shift && push "$@" ;;
  *) die "usage: hack/images.sh build|lock|check|push REGISTRY" ;;
esac
