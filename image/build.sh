#!/usr/bin/env bash
# Build the Runway image as an OCI archive without a container daemon (`make image`), with
# umoci (Debian package `umoci`, installed when missing): one layer holding the tree of
# image/rootfs.sh (written by GNU tar), and the image configuration the Dockerfile declares. Reproducible: every
# timestamp is the commit's time and the archive is written in a fixed order, so the same
# binary gives the same digest.
#
#   image/build.sh BINARY OUT_DIR
# Prints the path of the archive and the manifest digest.
set -euo pipefail
cd "$(dirname "$0")/.."

bin=$1
out=$2
if ! command -v umoci >/dev/null; then
  apt-get update -qq && apt-get install -y -qq umoci >/dev/null
fi

version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n1)
commit=$(git rev-parse HEAD 2>/dev/null || echo unknown)
epoch=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || echo 0)}
created=$(date -u -d "@$epoch" +%Y-%m-%dT%H:%M:%SZ)

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
image/rootfs.sh "$bin" "$work/rootfs"
# The layer's entries carry the commit's time, not the build's.
find "$work/rootfs" -exec touch -h -d "@$epoch" {} +

layout="$work/oci"
ref="$layout:$version"
umoci init --layout "$layout"
umoci new --image "$ref"
# The layer: the tree as a tar in a fixed order, every entry owned by root unless the tree
# says otherwise, no access or change times. umoci compresses and adds it as it is (its own
# `insert` was seen to cut the last file of a layer short).
tar --sort=name --mtime="@$epoch" --numeric-owner --format=posix \
  --pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime \
  -C "$work/rootfs" -cf "$work/layer.tar" .
umoci raw add-layer --image "$ref" --history.created "$created" --history.author Runway \
  --history.created_by "image/rootfs.sh" --history.comment "runway $version ($commit)" \
  "$work/layer.tar"
# The same configuration as the Dockerfile's final stage (keep the two in step;
# tests/chart/test_image.py compares them).
labels=()
while IFS='=' read -r key value; do
  labels+=(--config.label "$key=$value")
done < <(image/labels.sh "$version" "$commit" "$created")
umoci config --no-history --image "$ref" \
  --created "$created" --author "Runway" --os linux --architecture amd64 \
  --config.user "65532:65532" --config.workingdir / \
  --config.env "PATH=/usr/local/bin" \
  --config.entrypoint /usr/local/bin/runway --config.cmd operator \
  "${labels[@]}" \
  --manifest.annotation "org.opencontainers.image.ref.name=$version" \
  --manifest.annotation "org.opencontainers.image.created=$created"
umoci gc --layout "$layout"

mkdir -p "$out"
archive="$out/runway-$version.oci.tar"
tar --sort=name --mtime="@$epoch" --owner=0 --group=0 --numeric-owner --format=posix \
  --pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime \
  -cf "$archive" -C "$layout" .
digest=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["manifests"][0]["digest"])' "$layout/index.json")
echo "$digest" >"$archive.digest"
echo "$archive $digest"
