#!/bin/bash
# Builds a Debian trixie chroot with Mesa 26's lavapipe (trixie-backports), which implements
# VK_KHR_cooperative_matrix on the CPU, so the tensor-core kernels (mm_coop16, the convolution
# gather, split K, the tensor-core attention) run their tests on a machine without a GPU.
#
# Lavapipe reports 8x8x8 f16 matrices (and NV flexible dimensions, granularity 8) and runs
# 16x16x16 ones; `XPU_COOP16_ASSUME=1` lets xpu use them there. Its reported workgroup memory
# (32 KiB, llvmpipe's `max_local_size`) is below the 34.5-35 KiB the kernels declare, so this
# script raises the reported value to 64 KiB in the installed driver: one 32-bit constant
# (llvmpipe's compute caps initialiser loads {1024, 32768, 300, 8} from .rodata); the script
# checks the bytes it patches and refuses any other driver build. A development tool only:
# CI does not use it, and nothing in the crate depends on it.
#
# Usage (root, ~2 min with a warm apt mirror): bash lab/lavapipe_coop/setup.sh [DIR]
# then: bash lab/lavapipe_coop/run.sh <test binaries or commands> (see run.sh).
set -euo pipefail
ROOT=${1:-/tmp/trixie-root}
if [ ! -x "$ROOT/usr/bin/apt-get" ]; then
  command -v debootstrap >/dev/null || apt-get install -y debootstrap
  debootstrap --variant=minbase --include=libvulkan1,ca-certificates trixie "$ROOT" \
    http://deb.debian.org/debian
fi
echo "deb http://deb.debian.org/debian trixie-backports main" > "$ROOT/etc/apt/sources.list.d/bp.list"
# Tested with 26.1.6-1~bpo13+1; a later backport is patched only if the constant below is
# found exactly once.
chroot "$ROOT" bash -c "apt-get update -q && apt-get install -y -q -t trixie-backports mesa-vulkan-drivers"
chroot "$ROOT" dpkg-query -W mesa-vulkan-drivers
python3 - "$ROOT/usr/lib/x86_64-linux-gnu/libvulkan_lvp.so" <<'PY'
import hashlib, struct, sys
path = sys.argv[1]
data = bytearray(open(path, "rb").read())
# llvmpipe's compute caps constant {max_threads_per_block, max_local_size, clock, units}: in
# the 26.1.6-1~bpo13+1 build the only .rodata entry of that shape.
at = data.find(struct.pack("<4I", 0x400, 0x8000, 0x12C, 8))
done = data.find(struct.pack("<4I", 0x400, 0x10000, 0x12C, 8))
if done >= 0 and at < 0:
    print("already patched:", path)
    sys.exit(0)
if at < 0 or data.find(struct.pack("<4I", 0x400, 0x8000, 0x12C, 8), at + 1) >= 0:
    sys.exit("unexpected driver build: compute caps constant not found exactly once")
data[at + 4 : at + 8] = struct.pack("<I", 0x10000)
open(path, "wb").write(data)
print("patched max_local_size to 64 KiB at", hex(at), "in", path)
PY
echo "ok: run tests with bash lab/lavapipe_coop/run.sh"
