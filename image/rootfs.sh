#!/usr/bin/env bash
# Assemble the root filesystem of the Runway image: the `runway` binary, the C libraries it
# links (copied from this Debian system, with their copyright files), the CA certificates, and
# the unprivileged user the Helm chart runs as. No shell, no package manager, nothing else.
# Used by `make image` and by the Dockerfile's build stage, so that both give the same tree.
#
#   image/rootfs.sh BINARY OUT_DIR
set -euo pipefail

bin=$1
out=$2
uid=65532 # the chart's podSecurityContext.runAsUser/runAsGroup

command -v ldd >/dev/null || { echo "rootfs.sh: ldd is needed" >&2; exit 1; }
certs=/etc/ssl/certs/ca-certificates.crt
[ -f "$certs" ] || { echo "rootfs.sh: $certs is missing (Debian package ca-certificates)" >&2; exit 1; }

rm -rf "$out"
mkdir -p "$out/usr/local/bin" "$out/etc/ssl/certs" "$out/tmp" "$out/home/nonroot"
install -m 0755 "$bin" "$out/usr/local/bin/runway"

# The libraries the dynamic linker loads, at the paths it asks for, as regular files. A
# binary that links none is copied alone.
packages=(ca-certificates)
while read -r path; do
  [ -n "$path" ] || continue
  mkdir -p "$out$(dirname "$path")"
  cp --dereference "$path" "$out$path"
  chmod 0755 "$out$path"
  # dpkg knows a file by the path its package ships, before or after /usr was merged.
  if pkg=$( (dpkg -S "$path" || dpkg -S "$(readlink -f "$path")") 2>/dev/null | head -n1 | cut -d: -f1); then
    packages+=("$pkg")
  fi
done < <(ldd "$bin" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}' | sort -u)

# Their licences travel with them.
for pkg in $(printf '%s\n' "${packages[@]}" | sort -u); do
  if [ -f "/usr/share/doc/$pkg/copyright" ]; then
    mkdir -p "$out/usr/share/doc/$pkg"
    install -m 0644 "/usr/share/doc/$pkg/copyright" "$out/usr/share/doc/$pkg/copyright"
  fi
done

install -m 0644 "$certs" "$out/etc/ssl/certs/ca-certificates.crt"
printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:%d:%d:nonroot:/home/nonroot:/sbin/nologin\n' "$uid" "$uid" >"$out/etc/passwd"
printf 'root:x:0:\nnonroot:x:%d:\n' "$uid" >"$out/etc/group"
# Name lookups: the kubelet mounts /etc/hosts and /etc/resolv.conf; say in which order to use them.
printf 'hosts: files dns\n' >"$out/etc/nsswitch.conf"
chmod 0644 "$out/etc/passwd" "$out/etc/group" "$out/etc/nsswitch.conf"
chmod 1777 "$out/tmp"
chmod 0700 "$out/home/nonroot"
chown "$uid:$uid" "$out/home/nonroot"
