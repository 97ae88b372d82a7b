#!/bin/bash
# Runs a command inside the chroot of setup.sh (default /tmp/trixie-root, or $LAVAPIPE_ROOT)
# from this repository's root, bound at the same path, on lavapipe 26 with cooperative matrices
# and xpu's 16x16 kernels allowed (`XPU_COOP16_ASSUME=1`; with it the forced cooperative-matrix
# test fails where the kernel's self-check refuses it). Examples:
#   bash lab/lavapipe_coop/run.sh ./target/release/examples/coop_probe
#   bash lab/lavapipe_coop/run.sh tests   # every test binary of `cargo test --no-run`
# Build on the host first (`cargo test --no-run`, `cargo build --release -p xpu-lab --examples`):
# the chroot has no Rust toolchain; binaries built on Debian 12 run on trixie's newer libc.
# Lavapipe's default 256-bit vectors give subgroups of 8 lanes (LP_NATIVE_VECTOR_WIDTH=512 or
# 1024 give 16 or 32, but its cooperative-matrix code crashed there: stack smashing).
# The repository is bind-mounted inside the chroot: `bash run.sh unmount` before deleting the
# chroot's folder (a plain `rm -rf` of it would go through the mount into the repository).
set -uo pipefail
ROOT=${LAVAPIPE_ROOT:-/tmp/trixie-root}
REPO=$(cd "$(dirname "$0")/../.." && pwd)
if [ "${1:-}" = unmount ]; then
  for m in "$ROOT$REPO" "$ROOT/sys" "$ROOT/dev" "$ROOT/proc"; do
    mountpoint -q "$m" && umount "$m"
  done
  exit 0
fi
for fs in proc dev sys; do
  mountpoint -q "$ROOT/$fs" || mount --bind "/$fs" "$ROOT/$fs"
done
mkdir -p "$ROOT$REPO"
mountpoint -q "$ROOT$REPO" || mount --bind "$REPO" "$ROOT$REPO"
ENVS="XPU_COOP16_ASSUME=1 VK_ICD_FILENAMES=/usr/share/vulkan/icd.d/lvp_icd.json CI=true XPU_REQUIRE_ADAPTER=1"
if [ "${1:-}" = tests ]; then
  shift
  bins=$(cd "$REPO" && cargo test --no-run 2>&1 | grep -oE "target/[a-z]+/deps/[a-z0-9_]+-[0-9a-f]+" | sort -u)
  fail=0
  for b in $bins; do
    out=$(chroot "$ROOT" env $ENVS bash -c "cd '$REPO' && timeout 1200 ./$b $*" 2>&1)
    rc=$?
    echo "== $b rc=$rc $(echo "$out" | grep -E '^test result' | tail -1)"
    echo "$out" | grep -E '^xpu: ' | sort -u
    if [ $rc -ne 0 ]; then fail=1; echo "$out" | grep -E 'FAILED|panicked' | head -20; fi
  done
  exit $fail
fi
chroot "$ROOT" env $ENVS bash -c "cd '$REPO' && $*"
