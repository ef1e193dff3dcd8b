#!/usr/bin/env bash
# The microVM backend's guest kernel: Debian's cloud kernel, taken with `apt-get download` and
# unpacked into Warren's cache (never installed on the host: that would touch its /boot and
# initramfs). Idempotent; `current` names the unpacked package. Needs Debian's package lists.
set -euo pipefail
dir=${WARREN_GUEST_CACHE:-/var/cache/warren/guest}
pkg=$(apt-cache depends linux-image-cloud-amd64 2>/dev/null | awk '/Depends: linux-image-/ {print $2; exit}')
if [ -z "$pkg" ]; then
  echo "guest-kernel: no linux-image-cloud-amd64 in the package lists (apt-get update?)" >&2
  exit 1
fi
if [ -f "$dir/$pkg/vmlinuz" ]; then
  echo "$pkg" > "$dir/current"
  exit 0
fi
mkdir -p "$dir"
tmp=$(mktemp -d "$dir/.download-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && apt-get download -qq "$pkg" 2>/dev/null)
dpkg-deb -x "$tmp"/*.deb "$tmp/x"
mkdir -p "$tmp/kit"
cp "$tmp"/x/boot/vmlinuz-* "$tmp/kit/vmlinuz"
mv "$tmp"/x/lib/modules/*/kernel "$tmp/kit/modules"
rm -rf "${dir:?}/$pkg"
mv "$tmp/kit" "$dir/$pkg"
echo "$pkg" > "$dir/current"
