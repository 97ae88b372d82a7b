#!/usr/bin/env bash
# Builds what benches/gpu/run_gpu.sh needs on a GPU machine without a Rust toolchain, into the
# git-ignored folder .gpupack/ (carry it, and .gl/, .whl/ for the PyTorch UNet step):
#   .gpupack/devbin.tar.xz  release examples and test binaries from ../shared/device/gpu-pack.sh,
#                           compressed with a dictionary larger than the folder (the binaries
#                           share most of their code: about 26 MB instead of 380 MB; a default
#                           8 MiB dictionary gave 67 MB, over the 64 MiB carry limit)
# and diffusers' wheel (pure Python) in .whl/ for torch_gpu_ref.py --unet.
# `bash benches/gpu/pack.sh --check` tells whether an existing pack matches the build inputs.
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
mkdir -p .git/info .gpupack
for d in .gpupack .whl; do grep -qx "/$d/" .git/info/exclude 2>/dev/null || echo "/$d/" >>.git/info/exclude; done
# A digest of what the binaries are built from (committed and uncommitted), not of the docs.
build_inputs() {
  local paths=(src shaders examples tests 'benches/*.rs' Cargo.toml Cargo.lock)
  { git ls-tree -r HEAD -- "${paths[@]}"; git diff HEAD -- "${paths[@]}"
    git ls-files --others --exclude-standard -z -- "${paths[@]}" | xargs -0 -r sha1sum
  } | sha1sum | cut -d' ' -f1
}
if [ "${1:-}" = --check ]; then
  if [ -f .gpupack/devbin.tar.xz ] && [ "$(build_inputs)" = "$(tail -n 1 .gpupack/built-from 2>/dev/null)" ]; then
    echo "pack is current: built at $(head -n 1 .gpupack/built-from)"; exit 0
  fi
  echo "pack is missing or stale: run bash benches/gpu/pack.sh"; exit 1
fi
bash ../shared/device/gpu-pack.sh "$@"
# NVIDIA's Vulkan ICD lives in libGLX_nvidia, which loads glvnd's dispatch libraries.
lists=$(mktemp -d); mkdir -p "$lists/partial"
o="-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 -oDir::State::Lists=$lists"
apt-get $o update >/dev/null
(cd .gl && apt-get $o download libglvnd0 libglx0 libegl1 libgl1 libopengl0 libgles2 2>/dev/null)
rm -f .devbin/*.log .devbin/zz_*
tar cf - .devbin | xz -T1 --lzma2=preset=6,dict=512MiB >.gpupack/devbin.tar.xz
# safetensors for tests/fixtures/check_random_ops.py (`run_gpu.sh ops`).
if ! ls .whl/safetensors-*.whl >/dev/null 2>&1; then
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux2014_x86_64 -d .whl safetensors==0.8.0
fi
if ! ls .whl/diffusers-*.whl >/dev/null 2>&1; then
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux2014_x86_64 -d .whl diffusers==0.42.1 importlib_metadata
fi
# What the binaries were built from: a later session can reuse the pack while the build inputs
# still match (`bash benches/gpu/pack.sh --check` says whether they do).
{ git rev-parse --short HEAD; build_inputs; } >.gpupack/built-from
du -sh .gpupack .gl .whl
