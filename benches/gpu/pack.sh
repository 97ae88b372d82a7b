#!/usr/bin/env bash
# Builds what benches/gpu/run_gpu.sh needs on a GPU machine without a Rust toolchain, into the
# git-ignored folder .gpupack/ (carry it, and .gl/, .whl/ for the PyTorch UNet step):
#   .gpupack/devbin.tar.xz  release examples and test binaries from ../shared/device/gpu-pack.sh,
#                           compressed (about 16 MB instead of 200 MB, under the 64 MiB carry limit)
# and diffusers' wheel (pure Python) in .whl/ for torch_gpu_ref.py --unet.
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
mkdir -p .git/info .gpupack
for d in .gpupack .whl; do grep -qx "/$d/" .git/info/exclude 2>/dev/null || echo "/$d/" >>.git/info/exclude; done
bash ../shared/device/gpu-pack.sh "$@"
# NVIDIA's Vulkan ICD lives in libGLX_nvidia, which loads glvnd's dispatch libraries.
lists=$(mktemp -d); mkdir -p "$lists/partial"
o="-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 -oDir::State::Lists=$lists"
apt-get $o update >/dev/null
(cd .gl && apt-get $o download libglvnd0 libglx0 libegl1 libgl1 libopengl0 libgles2 2>/dev/null)
rm -f .devbin/*.log
tar cf - .devbin | xz -6 -T2 >.gpupack/devbin.tar.xz
if ! ls .whl/diffusers-*.whl >/dev/null 2>&1; then
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux2014_x86_64 -d .whl diffusers==0.42.1 importlib_metadata
fi
du -sh .gpupack .gl .whl
