#!/bin/bash
# NVIDIA register counts without an NVIDIA GPU: Mesa's NVK driver (Mesa 26 in the chroot of
# setup.sh) compiles SPIR-V to NVIDIA machine code with its own compiler (NAK) when Mesa's
# nouveau drm-shim stands in for the kernel driver, and reports each pipeline's statistics
# (Number of GPRs, Max warps/SM, spills, instruction count) through
# VK_KHR_pipeline_executable_properties, which xpu-lab's pipeline_stats example prints.
# NAK is not NVIDIA's own compiler: its counts are a proxy for comparing kernel forms, and the
# GPU's `run_gpu.sh stats` gives the real ones.
#
#   bash lab/lavapipe_coop/nak.sh DIR [pipeline_stats args...]
#
# DIR: a folder under the repository written by xpu-lab's spirv_dump example (no GPU needed):
#   cargo build --release -p xpu-lab --examples
#   ./target/release/examples/spirv_dump target/spv
# NOUVEAU_CHIPSET picks the chip (default 172: GA102, Ampere, 64K registers and 48 warps per
# SM; 192 (Ada) failed NVK's initialisation through the 25.0 shim).
# The shim is built once on this host from a Mesa source tarball ($MESA_TARBALL, default
# /tmp/mesa_25.0.7.orig.tar.xz; Mesa 25.0 or later, whose shim stubs the VM_BIND uAPI NVK
# needs) with meson (pip) and libdrm-dev, and copied into the chroot.
set -euo pipefail
ROOT=${LAVAPIPE_ROOT:-/tmp/trixie-root}
REPO=$(cd "$(dirname "$0")/../.." && pwd)
SHIM=$ROOT/usr/local/lib/libnouveau_noop_drm_shim.so
if [ ! -f "$SHIM" ]; then
  tarball=${MESA_TARBALL:-/tmp/mesa_25.0.7.orig.tar.xz}
  [ -f "$tarball" ] || { echo "nak.sh: no Mesa source tarball at $tarball (set MESA_TARBALL)"; exit 1; }
  src=/tmp/mesa-shim-src
  rm -rf "$src" && mkdir -p "$src" && tar xf "$tarball" -C "$src" --strip-components=1
  command -v meson >/dev/null || python3 -m pip install -q meson ninja mako pyyaml
  dpkg -s libdrm-dev bison flex >/dev/null 2>&1 || apt-get install -y -qq libdrm-dev pkg-config bison flex >/dev/null
  (cd "$src" && meson setup build -Dgallium-drivers=nouveau -Dvulkan-drivers= -Dtools=drm-shim \
    -Dplatforms= -Dglx=disabled -Degl=disabled -Dgbm=disabled -Dllvm=disabled -Dopengl=false \
    -Dgles1=disabled -Dgles2=disabled -Dvalgrind=disabled -Dlibunwind=disabled -Dzstd=disabled \
    -Dbuildtype=release >/dev/null &&
    ninja -C build src/nouveau/drm-shim/libnouveau_noop_drm_shim.so >/dev/null)
  cp "$src/build/src/nouveau/drm-shim/libnouveau_noop_drm_shim.so" "$SHIM"
fi
dir=$(cd "${1:?usage: nak.sh DIR [pipeline_stats args]}" && pwd)
shift
bash "$REPO/lab/lavapipe_coop/run.sh" true  # the chroot's mounts
chroot "$ROOT" env LD_PRELOAD=/usr/local/lib/libnouveau_noop_drm_shim.so \
  NOUVEAU_CHIPSET="${NOUVEAU_CHIPSET:-172}" VK_ICD_FILENAMES=/usr/share/vulkan/icd.d/nouveau_icd.json \
  bash -c "cd '$REPO' && ./target/release/examples/pipeline_stats '$dir' $*" 2> >(grep -v -E 'DRM_SHIM|GETPARAM' >&2)
