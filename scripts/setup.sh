#!/usr/bin/env bash
# Idempotent set-up for a fresh clone or a fresh machine: Debian packages, npm dependencies,
# the TypeScript and C build, and the default images (built once, then cached).
set -euo pipefail
cd "$(dirname "$0")/.."

# `--test`: also what only the tests use (a real OCI registry to pull from, htpasswd for one that
# wants credentials; Python, setuptools, pip and mypy for the Python client's tests; clang and its
# libFuzzer runtime for warren-init's fuzzers; PostgreSQL, of which the tests start private
# servers of their own; Chromium, which the dashboard's browser tests drive); `--bench`: also the
# layers benchmark's blob stores (that registry, and nginx as a static file server). `--checks`
# (CI): also the format check and lint (`scripts/checks.sh`), run once the build
# is done, beside the images and the packages' build steps.
pkgs=(runc erofs-utils busybox-static bash-static btrfs-progs debootstrap gcc make libc6-dev pkg-config libfuse3-dev libcurl4-openssl-dev libssl-dev fuse3 iproute2 nftables util-linux tar qemu-system-x86 lz4 zstd xz-utils)
with_test= with_bench= with_checks=
for arg in "$@"; do
  case $arg in
    --test) with_test=1 ;;
    --bench) with_bench=1 ;;
    --checks) with_checks=1 ;;
    *) echo "setup: unknown option $arg (--test, --bench, --checks)" >&2 && exit 2 ;;
  esac
done
[ -n "$with_test" ] && pkgs+=(docker-registry apache2-utils openssl python3 python3-setuptools python3-pip mypy clang libclang-rt-14-dev postgresql chromium)
[ -n "$with_bench" ] && pkgs+=(docker-registry nginx-light)
need=()
have_cmd() { command -v "$1" >/dev/null 2>&1; }
have_pkg() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'; }
for pkg in "${pkgs[@]}"; do
  have_pkg "$pkg" || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "setup: Warren needs root to install: ${need[*]}" >&2
    exit 1
  fi
  echo "setup: installing ${need[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

# Host tuning, as Kubernetes nodes are tuned: kernel.pid_max at least 4,194,304 (systemd's
# default on 64-bit hosts). The kernel's 32,768 bounds a node to 10,922 sandboxes (three tasks
# each: its init, a shell, a process) and at 10,000 leaves the host's own programs under 2,000
# task ids: a build or a test then fails to fork. Kept across reboots in /etc/sysctl.d.
if [ "$(id -u)" = 0 ] && [ "$(cat /proc/sys/kernel/pid_max)" -lt 4194304 ]; then
  echo "setup: raising kernel.pid_max to 4194304 (/etc/sysctl.d/90-warren.conf)" >&2
  echo 'kernel.pid_max = 4194304' > /etc/sysctl.d/90-warren.conf
  sysctl -qw kernel.pid_max=4194304
fi

# npm ci only when the lockfile changed since the last install. The packages' own build steps
# run beside the rest of the set-up: better-sqlite3 compiles SQLite from C where no prebuilt
# binary can be fetched (about two minutes of one core), while the TypeScript and C builds and
# the images take the other. Nothing below needs it; the stamp is written once it has built.
stamp=node_modules/.warren-lock.sha256
want=$(sha256sum package-lock.json | cut -d' ' -f1)
deps_build=
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  rm -f "$stamp"
  npm ci --no-audit --no-fund --ignore-scripts
  deps_log=$(mktemp)
  npm rebuild > "$deps_log" 2>&1 &
  deps_build=$!
fi

npx tsc -b
npm run -s build -w @warren/dashboard >/dev/null
checks=
if [ -n "$with_checks" ]; then
  bash scripts/checks.sh &
  checks=$!
fi
make -s -C native

# The microVM backend's guest kernel (Debian's cloud kernel, unpacked into the cache).
bash scripts/guest-kernel.sh

# Default images: busybox in seconds, debian-python with debootstrap once (cached).
node packages/cli/dist/main.js images prepare --image-cache "${WARREN_IMAGE_CACHE:-/var/cache/warren/images}" >/dev/null

if [ -n "$deps_build" ]; then
  if ! wait "$deps_build"; then
    cat "$deps_log" >&2
    echo "setup: the npm packages' build steps failed (above)" >&2
    exit 1
  fi
  rm -f "$deps_log"
  echo "$want" > "$stamp"
fi
if [ -n "$checks" ] && ! wait "$checks"; then
  echo "setup: the format check or the lint failed (above)" >&2
  exit 1
fi
