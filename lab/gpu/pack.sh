#!/usr/bin/env bash
# Builds what lab/gpu/run_gpu.sh needs on a GPU machine that has no Rust toolchain and no Vulkan
# loader, into git-ignored folders at the repository root (carry them with the working tree):
#   .gl/                    Debian's Vulkan loader and glvnd's libraries (NVIDIA's Vulkan ICD
#                           lives in libGLX_nvidia, which loads them), unpacked there
#   .gpupack/devbin.tar.xz  stripped release builds of the examples (xpu's and xpu-lab's) and
#                           of every test binary (`test-NAME`), compressed with a dictionary
#                           larger than the folder (the binaries share most of their code)
#   .whl/                   safetensors and diffusers wheels for torch_gpu_ref.py and
#                           tests/fixtures/check_random_ops.py
# `bash lab/gpu/pack.sh --check` tells whether an existing pack matches the build inputs.
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
mkdir -p .git/info .gpupack .gl .devbin .whl
for d in .gpupack .gl .devbin .whl; do
  grep -qx "/$d/" .git/info/exclude 2>/dev/null || echo "/$d/" >>.git/info/exclude
done
# A digest of what the binaries are built from (committed and uncommitted), not of the docs.
build_inputs() {
  local paths=(src examples tests lab/src lab/examples 'benches/*.rs' Cargo.toml lab/Cargo.toml Cargo.lock)
  { git ls-tree -r HEAD -- "${paths[@]}"; git diff HEAD -- "${paths[@]}"
    git ls-files --others --exclude-standard -z -- "${paths[@]}" | xargs -0 -r sha1sum
  } | sha1sum | cut -d' ' -f1
}
if [ "${1:-}" = --check ]; then
  if [ -f .gpupack/devbin.tar.xz ] && [ "$(build_inputs)" = "$(tail -n 1 .gpupack/built-from 2>/dev/null)" ]; then
    echo "pack is current: built at $(head -n 1 .gpupack/built-from)"; exit 0
  fi
  echo "pack is missing or stale: run bash lab/gpu/pack.sh"; exit 1
fi
lists=$(mktemp -d); mkdir -p "$lists/partial"
o="-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 -oDir::State::Lists=$lists"
apt-get $o update >/dev/null
(cd .gl && apt-get $o download libvulkan1 libglvnd0 libglx0 libegl1 libgl1 libopengl0 libgles2 2>/dev/null)
rm -rf .devbin/*
cargo build --release --examples -p xpu -p xpu-lab "$@"
for f in target/release/examples/*; do
  [[ -f $f && -x $f && $f != *-* && $f != *.d ]] && cp "$f" .devbin/
done
# Test binaries (one per tests/*.rs plus the unit tests), named after their target.
cargo test --release --no-run --message-format=json "$@" 2>/dev/null \
  | python3 -c 'import json, sys
for l in sys.stdin:
    try: m = json.loads(l)
    except Exception: continue
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m.get("profile", {}).get("test"):
        print(m["target"]["name"], m["executable"])' \
  | while read -r name exe; do cp "$exe" ".devbin/test-$name"; done
strip .devbin/* 2>/dev/null || true
tar cf - .devbin | xz -T1 --lzma2=preset=6,dict=512MiB >.gpupack/devbin.tar.xz
if ! ls .whl/safetensors-*.whl >/dev/null 2>&1; then
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux2014_x86_64 -d .whl safetensors==0.8.0
fi
if ! ls .whl/diffusers-*.whl >/dev/null 2>&1; then
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux2014_x86_64 -d .whl diffusers==0.42.1 importlib_metadata
fi
# What the binaries were built from, so a later run can reuse the pack while the inputs match.
{ git rev-parse --short HEAD; build_inputs; } >.gpupack/built-from
du -sh .gpupack .gl .whl
echo "carry .gpupack, .gl and .whl; there, from the repository root: bash lab/gpu/run_gpu.sh PHASES"
