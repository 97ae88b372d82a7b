#!/bin/bash
# Instructions per K step of the tensor-core kernels as NVIDIA machine code, without an NVIDIA
# GPU: Mesa's NAK compiler (through nak.sh's NVK + drm-shim setup in the chroot of setup.sh)
# prints its final IR for each pipeline (NAK_DEBUG=print), and kloop.py counts, per innermost
# loop around the tensor-core instructions (hmma), its instructions by opcode, besides and
# including NAK's register moves (NAK's register allocator adds many that NVIDIA's need not).
# A loop with branches counts every path, so compare forms whose K loops have none (a form
# under test can be pinned to one path in a scratch build). NAK is not NVIDIA's compiler: the
# counts rank kernel forms, the GPU (lab/gpu/run_gpu.sh) times them.
#
#   bash lab/lavapipe_coop/kloop.sh DIR [pipeline_stats args, e.g. --filter coop16]
#
# DIR: written by xpu-lab's spirv_dump example (no GPU needed), for example
#   ./target/release/examples/spirv_dump target/spv --filter coop16
# (the tensor-core attention's key loops show as the K loops). The full log is left in
# DIR/nak.log.
set -euo pipefail
ROOT=${LAVAPIPE_ROOT:-/tmp/trixie-root}
REPO=$(cd "$(dirname "$0")/../.." && pwd)
dir=$(cd "${1:?usage: kloop.sh DIR [pipeline_stats args]}" && pwd)
shift
# nak.sh builds the shim and mounts the chroot; its own statistics are printed first.
bash "$REPO/lab/lavapipe_coop/nak.sh" "$dir" "$@" >/dev/null
chroot "$ROOT" env LD_PRELOAD=/usr/local/lib/libnouveau_noop_drm_shim.so \
  NOUVEAU_CHIPSET="${NOUVEAU_CHIPSET:-172}" NAK_DEBUG=print MESA_SHADER_CACHE_DISABLE=true \
  VK_ICD_FILENAMES=/usr/share/vulkan/icd.d/nouveau_icd.json \
  bash -c "cd '$REPO' && ./target/release/examples/pipeline_stats '$dir' $*" >"$dir/nak.log" 2>&1
grep -E '^\S.*threads|Number of GPRs' "$dir/nak.log" | sed -E 's/.*(Instruction count=[0-9]+).*(Number of GPRs=[0-9]+).*/    \1 \2/' || true
python3 "$REPO/lab/lavapipe_coop/kloop.py" "$dir/nak.log"
