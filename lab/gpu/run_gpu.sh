#!/usr/bin/env bash
# Runs the tests and benchmarks on a GPU machine that has no Rust toolchain: the binaries built
# by lab/gpu/pack.sh (.gpupack/devbin.tar.xz, unpacked to .devbin/), the Vulkan loader in .gl/,
# optional Python wheels (diffusers) in .whl/. From the repository root there:
#
#   bash lab/gpu/run_gpu.sh info tests bench torch sd
#
# Phases (any subset, in order): info (adapters and their matmul/cooperative-matrix paths),
# probe (xpu-lab's coop_probe: the forced cooperative-matrix kernels against the Cpu), tests
# (every test binary with XPU_REQUIRE_ADAPTER=1), bench (the bench example on the Xpu in
# f32/f16/bf16, the f16 products on the FMA tiles, the f16 convolutions on Winograd), winograd
# (f16 conv rows and SD step with every 3x3 layer on Winograd against the tensor-core implicit
# GEMM, each forced through XPU_AUTOTUNE_FORCE), torch (lab/gpu/torch_gpu_ref.py: PyTorch on the same shapes and GPU), sd (SD
# 1.5 UNet steps on the Xpu in f32 and f16), select (Auto's choices against the alternatives:
# f16 tensor cores or vec4 FMA tiles, tensor-core or FMA attention), split (split K: the
# tensor-core tests with every tile split, the autotuner's splits against none), defaults (the tests
# of the tensor-core paths, the f16 attention and conv rows, the f16 step), profile (the SD
# step's GPU time per kernel and problem shape, XPU_PROFILE=shapes), torchsd (PyTorch eager's
# SD 1.5 step), copies (the tiled transposing copies and the f16 conv rows whose NCHW calls
# copy NCHW <-> NHWC around the tensor-core kernel), stats (the driver's register count and
# the occupancy it allows for the pipelines spirv_dump writes), ops (random operator cases
# against PyTorch through the real driver, tests/fixtures/check_random_ops.py).
# Logs go to $OUT (or /tmp/gpu-out); the last lines printed are a short summary.
set -u
OUT=${OUT:-/tmp/gpu-out}
mkdir -p "$OUT"
[ -d .devbin ] || tar xJf .gpupack/devbin.tar.xz
for f in .gl/*.deb; do dpkg -x "$f" /; done
ldconfig
# The NVIDIA ICD (libGLX_nvidia) needs glvnd's libraries too (.gl holds them, see pack.sh).
icd=$(ls /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd*.json /usr/share/vulkan/icd.d/nvidia_icd*.json \
  /etc/vulkan/icd.d/nvidia_icd*.json 2>/dev/null | head -n 1)
export VK_DRIVER_FILES=${icd:-/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json}
export __EGL_VENDOR_LIBRARY_FILENAMES=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
echo "VK_DRIVER_FILES=$VK_DRIVER_FILES"; cat "$VK_DRIVER_FILES" 2>&1 | head -n 8
export XPU_REQUIRE_ADAPTER=1
export PYTHONUNBUFFERED=1
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
fi
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv,noheader
summary=()
# Bench JSON rows (on stdin) as short lines: op variant dtype [shape] median ms.
rows() {
  sed -nE 's/.*"op":"([^"]*)","variant":"([^"]*)","device":"[^"]*","dtype":"([^"]*)","shape":\[([^]]*)\],"median_ms":([0-9.]+).*/\1 \2 \3 [\4] \5 ms/p'
}
# f16 rows and the f16 step (4 steps) with environment variable $1 set to each of $3... (`auto`:
# unset; values such as `gpu_conv2d=winograd` for XPU_AUTOTUNE_FORCE): the bench families in $2 (rows matching "coop_matrix" and "layer_cl"), logs appended
# to $OUT/$LOG.
f16_rounds() {
  local var=$1 families=$2 v
  shift 2
  for v in "$@"; do
    local set=("$var=$v")
    [ "$v" = auto ] && set=(-u "$var")
    echo "=== $var=$v" | tee -a "$OUT/$LOG"
    env "${set[@]}" timeout 100 .devbin/bench $families --device xpu --dtype f16 --json 2>&1 \
      | tee -a "$OUT/$LOG" | grep -E '"coop_matrix"|"layer_cl"' | rows
    env "${set[@]}" timeout 150 .devbin/sd_unet --device xpu --dtype f16 --preset sd15 --steps 4 \
      --output "/tmp/sd_$var$v.safetensors" 2>&1 | tee -a "$OUT/$LOG" \
      | grep -E 'median|rror' | cut -c1-160
  done
}
for phase in "$@"; do
  t0=$(date +%s)
  case $phase in
    info)
      VK_LOADER_DEBUG=error,warn,driver timeout 60 .devbin/quickstart >"$OUT/info.txt" 2>&1
      cat "$OUT/info.txt"
      ;;
    probe)
      timeout 60 .devbin/coop_probe >"$OUT/probe.txt" 2>&1
      grep -E "^(f16|f32|bf16)" "$OUT/probe.txt" | cut -c1-300
      ;;
    tests)
      ls .devbin/test-* | grep -v '\.log$' | xargs -P 4 -I{} sh -c \
        'timeout 240 {} --test-threads 4 >"{}.log" 2>&1; echo "$? {}" >>"{}.log"'
      : >"$OUT/tests.log"
      for f in .devbin/test-*.log; do
        [ -f "$f" ] || continue
        echo "=== $f" >>"$OUT/tests.log"
        cat "$f" >>"$OUT/tests.log"
        rc=$(tail -n 1 "$f" | cut -d' ' -f1)
        res=$(grep -E '^test result' "$f" | tail -n 1)
        summary+=("tests $(basename "$f" .log): rc=$rc $res")
      done
      grep -E '^(test .* FAILED|---- )' "$OUT/tests.log" | head -40
      ;;
    bench)
      for dt in f32 f16 bf16; do
        timeout 200 .devbin/bench matmul conv ffn attention --device xpu --dtype "$dt" --json \
          >>"$OUT/bench.jsonl" 2>>"$OUT/bench.err"
        echo "bench $dt rc=$?" >>"$OUT/bench.err"
      done
      # The f16 products on the medium FMA tiles too (the autotuner's gpu_matmul candidate
      # forced; the tensor-core kernel is a candidate where there is one).
      XPU_AUTOTUNE_FORCE=gpu_matmul=medium4 timeout 100 .devbin/bench matmul --device xpu \
        --dtype f16 --json \
        >"$OUT/bench_f16_tiled.jsonl" 2>>"$OUT/bench.err"
      # f16 3x3 convolutions as Winograd F(2,3) on the batched tensor-core matmul.
      XPU_AUTOTUNE_FORCE=gpu_conv2d=winograd timeout 100 .devbin/bench conv --device xpu \
        --dtype f16 --json \
        >"$OUT/bench_f16_winograd.jsonl" 2>>"$OUT/bench.err"
      tail -n 5 "$OUT/bench.err"
      ;;
    winograd)
      LOG=sd_winograd.log f16_rounds XPU_AUTOTUNE_FORCE conv gpu_conv2d=coop16 \
        gpu_conv2d=winograd
      ;;
    torch)
      timeout 200 python3 lab/gpu/torch_gpu_ref.py --dtypes f32,f16,bf16 >"$OUT/torch.jsonl" 2>&1
      tail -n 3 "$OUT/torch.jsonl"
      ;;
    sd)
      for dt in f32 f16; do
        timeout 150 .devbin/sd_unet --device xpu --dtype "$dt" --preset sd15 --steps 4 \
          --output /tmp/sd_$dt.safetensors >>"$OUT/sd.log" 2>&1
        echo "sd_unet $dt rc=$?" >>"$OUT/sd.log"
      done
      grep -vE '^\s*$|\[' "$OUT/sd.log" | tail -n 12
      ;;
    select)
      # Auto's choices against the alternatives on this GPU: f32 matmul rows, f16 tensor cores
      # against the vec4 FMA tiles on UNet shapes, the f16 attention on tensor cores (the
      # static rule) or FMAs (the autotuner's gpu_attention candidates forced), and the steps.
      timeout 100 .devbin/bench matmul --device xpu --dtype f32 --json >"$OUT/select.log" 2>&1
      timeout 100 .devbin/bench matmul conv --device xpu --dtype f16 --json >>"$OUT/select.log" 2>&1
      for s in "8192 1280 320 f16 bt" "8192 320 2560 f16 bt" "4096 320 320 f16 bt" \
               "2048 2048 2048 f16" "154 768 640 f16 bt" "2048 640 640 bt"; do
        timeout 60 .devbin/matmul_variants $s >>"$OUT/select.log" 2>&1
      done
      for a in coop16 fma; do
        echo "=== gpu_attention=$a" >>"$OUT/select.log"
        XPU_AUTOTUNE_FORCE=gpu_attention=$a timeout 100 .devbin/bench attention --device xpu \
          --dtype f16 --json >>"$OUT/select.log" 2>&1
        XPU_AUTOTUNE_FORCE=gpu_attention=$a timeout 150 .devbin/sd_unet --device xpu \
          --dtype f16 --preset sd15 --steps 4 --output /tmp/sd_a$a.safetensors \
          >>"$OUT/select.log" 2>&1
      done
      grep -E '^[0-9]+x|Auto|Tiled|Coop|===|median|^f16' "$OUT/select.log" | cut -c1-160
      ;;
    split)
      # Split K of the f16 tensor-core products and convolutions: the tests with the
      # autotuner's gpu_split_k candidate 3 forced (every tile split in three where K allows)
      # in parallel (conv_xpu's memory tests bound the bytes a convolution allocates, which
      # forced partial products exceed by design: skipped), then the FMA tiles whole and in
      # four splits, and f16 rows and the step with the autotuner's splits against none.
      for t in matmul_split_k conv_xpu matmul_xpu_variants unet_parity attention_parity; do
        (XPU_AUTOTUNE_FORCE=gpu_split_k=3 timeout 150 .devbin/test-$t --test-threads 4 \
          --skip memory \
          >"$OUT/split-$t.log" 2>&1
         echo "rc=$? $t" >>"$OUT/split-$t.log") &
      done
      wait
      grep -hE '^test result|FAILED|panicked|^rc=' "$OUT"/split-*.log | cut -c1-160
      for v in 1 4; do
        echo "=== f32 gpu_split_k=$v" | tee -a "$OUT/split.log"
        XPU_AUTOTUNE_FORCE=gpu_split_k=$v timeout 100 .devbin/bench matmul --device xpu \
          --dtype f32 --json 2>&1 | tee -a "$OUT/split.log" | grep -E '"(tiled|auto)' | rows
      done
      LOG=split.log f16_rounds XPU_AUTOTUNE_FORCE "matmul conv" auto gpu_split_k=1
      ;;
    defaults)
      # The tests that cover the tensor-core paths with the default choices (in parallel), the
      # f16 attention and conv rows, and the f16 step (8 steps).
      for t in matmul_coop16 matmul_split_k conv_xpu unet_parity attention_parity \
        matmul_xpu_variants conv_channels_last; do
        (timeout 150 .devbin/test-$t --test-threads 4 >"$OUT/defaults-$t.log" 2>&1
         echo "rc=$? $t" >>"$OUT/defaults-$t.log") &
      done
      wait
      grep -hE '^test result|FAILED|panicked|^rc=' "$OUT"/defaults-*.log | cut -c1-160
      timeout 100 .devbin/bench attention conv --device xpu --dtype f16 --json 2>&1 \
        | tee -a "$OUT/defaults.log" | grep -E '"fused"|"layer_cl"' | rows
      timeout 150 .devbin/sd_unet --device xpu --dtype f16 --preset sd15 --steps 8 \
        --output /tmp/sd_defaults.safetensors 2>&1 | tee -a "$OUT/defaults.log" \
        | grep -E 'median|rror|self-check' | cut -c1-160
      ;;
    profile)
      # GPU time per kernel pipeline and problem shape (timestamp queries; PROFILE_MODE=1 for
      # per pipeline only), SD 1.5 step, f32 and f16.
      for dt in ${PROFILE_DTYPES:-f32 f16}; do
        XPU_PROFILE=${PROFILE_MODE:-shapes} timeout 150 .devbin/sd_unet --device xpu --dtype "$dt" \
          --preset sd15 --steps 3 --output /tmp/sdp_$dt.safetensors >>"$OUT/profile.log" 2>&1
        echo "sd_unet profile $dt rc=$?" >>"$OUT/profile.log"
      done
      grep -E "GPU kernel time|rc=" "$OUT/profile.log"
      ;;
    copies)
      timeout 100 .devbin/bench elementwise --device xpu --dtype f32 --dtype f16 --json \
        >"$OUT/copies.log" 2>&1
      timeout 100 .devbin/bench conv --device xpu --dtype f16 --json >>"$OUT/copies.log" 2>&1
      grep -E 'transpose_copy|channels_last_copy|"conv2d_3x3"' "$OUT/copies.log" | rows
      # Which kernels each f16 conv row runs: per-call GPU time per pipeline.
      XPU_PROFILE=1 timeout 100 .devbin/bench conv --device xpu --dtype f16 --json \
        >"$OUT/conv-profile.log" 2>&1
      grep -E '"conv2d_3x3"' "$OUT/conv-profile.log" | cut -c1-400
      ;;
    ops)
      # Random operator cases against PyTorch (float64 references on this machine's CPU)
      # through the real driver: f32/f16/bf16, products large enough for the tensor cores, a
      # fifth of the cases with user errors.
      XPU_OP_REPLAY=.devbin/op_replay timeout 400 python3 tests/fixtures/check_random_ops.py \
        --count ${OPS_COUNT:-1500} --first-seed 90000 --invalid 0.2 --large --devices xpu \
        --dtypes f32,f16,bf16 >"$OUT/ops.log" 2>&1
      echo "check_random_ops rc=$?" >>"$OUT/ops.log"
      grep -E '^(FAIL|xpu |[0-9]+ runs|check_random_ops)' "$OUT/ops.log" | head -40 | cut -c1-300
      ;;
    stats)
      # The driver's register counts and the occupancy they allow (pipeline_stats) for the
      # pipelines spirv_dump writes (STATS_ARGS: its arguments, e.g. --pipeline ...).
      rm -rf /tmp/spv
      timeout 60 .devbin/spirv_dump /tmp/spv ${STATS_ARGS:-} >"$OUT/stats-dump.log" 2>&1
      timeout 120 .devbin/pipeline_stats /tmp/spv >"$OUT/stats.txt" 2>&1
      echo "pipeline_stats rc=$?" | tee -a "$OUT/stats.txt"
      head -n 3 "$OUT/stats.txt"
      # One line per module: its name, then the occupancy.
      awk '/^[a-z][A-Za-z0-9_]*-/ {n=$1} /Hopper SM:/ {sub(/^ +/, ""); print n, $0; n=""}' \
        "$OUT/stats.txt" | cut -c1-200
      ;;
    torchsd)
      timeout 200 python3 lab/gpu/torch_gpu_ref.py --families "" --unet --dtypes f32,f16 \
        >>"$OUT/sd.log" 2>&1
      tail -n 2 "$OUT/sd.log"
      ;;
    *) echo "unknown phase $phase" ;;
  esac
  summary+=("phase $phase: $(( $(date +%s) - t0 )) s")
done
printf '%s\n' "${summary[@]}"
