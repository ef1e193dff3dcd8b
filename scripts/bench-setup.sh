#!/usr/bin/env bash
# The benchmark compares against podman (with runc) in the same run; install it when missing.
set -euo pipefail
if ! command -v podman >/dev/null 2>&1; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends podman uidmap >/dev/null
fi
