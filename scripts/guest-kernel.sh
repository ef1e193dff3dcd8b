#!/usr/bin/env bash
# The guests' kernels, taken with `apt-get download` and unpacked into Warren's cache (never
# installed on the host: that would touch its /boot and initramfs). Idempotent.
# - microVMs: Debian's cloud kernel; `current` names the unpacked package.
# - full VMs: Debian's standard kernel (it has the VESA framebuffer a display needs); `current-vm`.
# Needs Debian's package lists.
set -euo pipefail
dir=${WARREN_GUEST_CACHE:-/var/cache/warren/guest}

# fetch META CURRENT: the kernel package META depends on, unpacked to $dir/PKG, named in $dir/CURRENT.
fetch() {
  local meta=$1 current=$2 pkg tmp
  pkg=$(apt-cache depends "$meta" 2>/dev/null | awk '/Depends: linux-image-/ {print $2; exit}')
  if [ -z "$pkg" ]; then
    echo "guest-kernel: no $meta in the package lists (apt-get update?)" >&2
    exit 1
  fi
  if [ -f "$dir/$pkg/vmlinuz" ]; then
    echo "$pkg" > "$dir/$current"
    return 0
  fi
  mkdir -p "$dir"
  tmp=$(mktemp -d "$dir/.download-XXXXXX")
  (cd "$tmp" && apt-get download -qq "$pkg" 2>/dev/null)
  dpkg-deb -x "$tmp"/*.deb "$tmp/x"
  mkdir -p "$tmp/kit"
  cp "$tmp"/x/boot/vmlinuz-* "$tmp/kit/vmlinuz"
  mv "$tmp"/x/lib/modules/*/kernel "$tmp/kit/modules"
  rm -rf "${dir:?}/$pkg"
  mv "$tmp/kit" "$dir/$pkg"
  rm -rf "$tmp"
  echo "$pkg" > "$dir/$current"
}

fetch linux-image-cloud-amd64 current
fetch linux-image-amd64 current-vm

# microVMs boot the cloud kernel unpacked where it can be (see scripts/vmlinux.mjs): under TCG,
# unpacking it inside each guest is a good part of a cold boot.
cloud=$dir/$(cat "$dir/current")
if [ ! -f "$cloud/vmlinux" ]; then
  node "$(dirname "$0")/vmlinux.mjs" "$cloud/vmlinuz" "$cloud/vmlinux"
fi
