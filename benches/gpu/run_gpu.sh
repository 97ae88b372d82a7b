#!/usr/bin/env bash
# Runs on a lent GPU machine with no Rust toolchain (see ../shared/device/README.md): binaries
# built here by benches/gpu/pack.sh (.gpupack/devbin.tar.xz, unpacked to .devbin/), the Vulkan loader in .gl/, optional Python wheels
# (diffusers) in .whl/. From the repository root there:
#
#   bash benches/gpu/run_gpu.sh info tests bench torch sd
#
# Next GPU (after the thirty-third session; `bash benches/gpu/pack.sh --check` first: a pack
# left by an earlier session may still be current). A lent GPU has 15 minutes of device time in
# all, starts included, so the first call is `next` alone (timeout_s 600; it stops starting
# items after BUDGET=480 s): every prepared f16 speed experiment, most informative first —
# mm_coop16's double layout, two-step fetch and no-register forms and mm_coop16t's tile shapes
# on five products, the two best on the conv rows and the SD step, f16 Winograd layers, the
# tensor-core attention's one-pass/prefetch/128-row forms, then the winners together. Its
# last lines rank each group. Then, if time is left, `tiles stats` or `ops` (random operator
# cases against PyTorch through the NVIDIA driver), and make a winner the default only after
# its tests pass on the GPU (`double`, `tiles` and `prefetch` run them). All experiments are
# verified on lavapipe 26 and were never timed.
# Mesa's NAK compiler (benches/lavapipe_coop/nak.sh, a proxy) counts 152 registers for the
# product kernel and 168 for the convolution gather (one 256-invocation workgroup per SM), and
# 96-255 for the tile shapes; the `stats` phase says whether NVIDIA's compiler agrees.
#
# Phases (any subset, in order): info (adapters and their matmul/cooperative-matrix paths),
# probe (examples/coop_probe: the forced cooperative-matrix kernels against the Cpu),
# tests (every test binary with XPU_REQUIRE_ADAPTER=1), bench (examples/bench on the Xpu in
# f32/f16/bf16), winograd (f16 conv rows and step with every 3x3 layer on Winograd against
# the default tensor-core implicit GEMM), torch
# (benches/gpu/torch_gpu_ref.py: PyTorch on the same shapes and GPU),
# sd (SD 1.5 UNet steps on the Xpu in f32 and f16), vec4 (scalar against vec4 tiles: forced
# matmuls, f32 convolutions and attention, the f32 step), select (Auto's choices against the
# alternatives: f16 tensor cores or vec4 FMA tiles, tensor-core or FMA attention), anatomy (the
# tensor-core kernel's K step taken apart by timing-only variants), attanat (the same for the
# tensor-core attention), split (split K: the tensor-core tests with every tile split, Auto's
# splits against none), ahead (mm_coop16's word pairs fetched two K steps ahead against one),
# double (mm_coop16's double-buffered layout against the default), tiles (mm_coop16t's tile
# shapes, XPU_COOP16_TILES, against mm_coop16),
# final (the default choices' tests, rows and step), prefetch (the
# tensor-core attention's experiments XPU_ATTN_PREFETCH=1, XPU_ATTN_ROWS128=1 and
# XPU_ATTN_ONEPASS=1 against the default), profile (the same step's GPU time per kernel
# and problem shape, XPU_PROFILE=shapes), torchsd (PyTorch eager's SD 1.5 step), copies (elementwise rows: the tiled
# transposing copies `transpose_copy` and `to_channels_last_copy`, and the f16 conv rows whose
# NCHW calls copy NCHW <-> NHWC around the tensor-core kernel), stats (the driver's register
# count and the occupancy it allows for every pipeline the run created so far), ops (random
# operator cases against PyTorch through the real driver, tests/fixtures/check_random_ops.py),
# next (every prepared f16 speed experiment within a time budget, see above).
# Logs go to $OUT (or /tmp/gpu-out); the last lines printed are a short summary.
set -u
OUT=${OUT:-/tmp/gpu-out}
mkdir -p "$OUT"
[ -d .devbin ] || tar xJf .gpupack/devbin.tar.xz
for f in .gl/*.deb; do dpkg -x "$f" /; done
ldconfig
# The NVIDIA ICD (libGLX_nvidia) needs glvnd's libraries too: .gl holds libvulkan1, libglvnd0,
# libglx0, libegl1 and friends (benches/gpu/pack.sh downloads them).
icd=$(ls /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd*.json /usr/share/vulkan/icd.d/nvidia_icd*.json \
  /etc/vulkan/icd.d/nvidia_icd*.json 2>/dev/null | head -n 1)
export VK_DRIVER_FILES=${icd:-/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json}
export __EGL_VENDOR_LIBRARY_FILENAMES=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
echo "VK_DRIVER_FILES=$VK_DRIVER_FILES"; cat "$VK_DRIVER_FILES" 2>&1 | head -n 8
export XPU_REQUIRE_ADAPTER=1
# Every pipeline of the run is dumped as SPIR-V for the `stats` phase (src/xpu/spirv_dump.rs).
export XPU_DUMP_SPIRV=${XPU_DUMP_SPIRV:-/tmp/spv}
export PYTHONUNBUFFERED=1
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
fi
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv,noheader
summary=()
# Bench JSON rows (on stdin) as short lines: op variant dtype [shape] median ms (and the
# per-kernel profile where XPU_PROFILE=1 added one).
rows() {
  sed -nE 's/.*"op":"([^"]*)","variant":"([^"]*)","device":"[^"]*","dtype":"([^"]*)","shape":\[([^]]*)\],"median_ms":([0-9.]+).*/\1 \2 \3 [\4] \5 ms/p'
}
# The five f16 products of the tile comparisons (both B layouts) with the settings in $3...:
# JSON rows to $1, appended to $2, short rows printed.
products() {
  local json=$1 log=$2
  shift 2
  env "$@" timeout 60 .devbin/bench matmul --device xpu --dtype f16 --json \
    --shape 4096x4096x4096 --shape 2048x2048x2048 --shape 8192x320x1280 \
    --shape 8192x640x640 --shape 8192x320x320 2>&1 | tee "$json" | tee -a "$log" \
    | grep -E '"coop_matrix' | rows
}
# The two forms with the least total time over the ten rows of each $OUT/$1<form>.jsonl
# ($2 excluded; every form's total on stderr).
fastest() {
  python3 - "$OUT" "$1" "$2" <<'PY'
import glob, json, os, sys
out, prefix, skip = sys.argv[1:4]
totals = {}
for path in glob.glob(os.path.join(out, prefix + "*.jsonl")):
    form = os.path.basename(path)[len(prefix):-6]
    rows = [json.loads(l) for l in open(path) if l.startswith("{")]
    ms = [r["median_ms"] for r in rows if r.get("variant", "").startswith("coop_matrix")]
    if len(ms) == 10:
        totals[form] = sum(ms)
for form in sorted(totals, key=totals.get):
    print(f"products {form}: {totals[form]:.3f} ms over ten rows", file=sys.stderr)
print(" ".join([f for f in sorted(totals, key=totals.get) if f != skip][:2]))
PY
}
# f16 rows and the f16 step (4 steps) with environment variable $1 set to each of $3...: the
# bench families in $2 (rows matching "coop_matrix" and "layer_cl"), logs appended to $OUT/$LOG.
f16_rounds() {
  local var=$1 families=$2 v
  shift 2
  for v in "$@"; do
    echo "=== $var=$v" | tee -a "$OUT/$LOG"
    env "$var=$v" timeout 100 .devbin/bench $families --device xpu --dtype f16 --json 2>&1 \
      | tee -a "$OUT/$LOG" | grep -E '"coop_matrix"|"layer_cl"' | rows
    env "$var=$v" timeout 150 .devbin/sd_unet --device xpu --dtype f16 --preset sd15 --steps 4 \
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
      for v in ${COOP_VARIANTS:-0 1 2 3}; do
        echo "=== XPU_COOP_CHECK=0 XPU_COOP16_VARIANT=$v" >>"$OUT/probe.txt"
        XPU_COOP_CHECK=0 XPU_COOP16_VARIANT=$v timeout 60 .devbin/coop_probe >>"$OUT/probe.txt" 2>&1
      done
      grep -E "^(===|f16)" "$OUT/probe.txt" | cut -c1-300
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
      # The tiled kernels on f16 too (Auto takes the tensor-core kernel where there is one).
      XPU_MATMUL_COOP=0 timeout 100 .devbin/bench matmul --device xpu --dtype f16 --json \
        >"$OUT/bench_f16_tiled.jsonl" 2>>"$OUT/bench.err"
      # f16 3x3 convolutions as Winograd F(2,3) on the batched tensor-core matmul (Auto keeps
      # them on the tensor-core implicit GEMM until this comparison says otherwise).
      XPU_CONV_WINOGRAD=1 timeout 100 .devbin/bench conv --device xpu --dtype f16 --json \
        >"$OUT/bench_f16_winograd.jsonl" 2>>"$OUT/bench.err"
      tail -n 5 "$OUT/bench.err"
      ;;
    winograd)
      # f16 3x3 layers on Winograd F(2,3) (XPU_CONV_WINOGRAD=1: its 16 point products take the
      # tensor cores where Auto's shape rule allows, e.g. 640 channels at 32x32) against the
      # default tensor-core implicit GEMM: the f16 conv rows and the f16 step, 0 against 1.
      LOG=sd_winograd.log f16_rounds XPU_CONV_WINOGRAD conv 0 1
      ;;
    torch)
      timeout 200 python3 benches/gpu/torch_gpu_ref.py --dtypes f32,f16,bf16 >"$OUT/torch.jsonl" 2>&1
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
    vec4)
      # The scalar and vec4 forms of the large/medium tiles and of the FMA attention side by
      # side (Auto takes vec4 unless XPU_TILE_VEC4=0): forced matmuls on SD shapes, the f32
      # convolutions and attention, the f32 step.
      for s in "4096 4096 4096" "8192 320 1280 bt" "8192 1280 320 bt" "8192 320 320 bt" \
               "2048 640 640 bt" "154 768 320 bt"; do
        timeout 60 .devbin/matmul_variants $s >>"$OUT/vec4.log" 2>&1
      done
      for v in 0 1; do
        echo "=== XPU_TILE_VEC4=$v" >>"$OUT/vec4.log"
        XPU_TILE_VEC4=$v XPU_CONV_WINOGRAD=0 timeout 100 .devbin/bench conv --device xpu \
          --dtype f32 --json >>"$OUT/vec4.log" 2>&1
        XPU_TILE_VEC4=$v timeout 100 .devbin/bench attention --device xpu --dtype f32 --json \
          >>"$OUT/vec4.log" 2>&1
        XPU_TILE_VEC4=$v timeout 150 .devbin/sd_unet --device xpu --dtype f32 --preset sd15 \
          --steps 4 --output /tmp/sd_v$v.safetensors >>"$OUT/vec4.log" 2>&1
      done
      grep -E '^[0-9]+x|Tiled\(L|Tiled\(M|Auto|===|median' "$OUT/vec4.log" | cut -c1-160
      ;;
    select)
      # Auto's choices against the alternatives on this GPU: f32 matmul rows (tiled vs cuBLAS
      # from the torch phase), f16 tensor cores against the vec4 FMA tiles on UNet shapes, the
      # f16 attention on tensor cores wherever they fit (the default) or FMAs (XPU_ATTN_COOP=0),
      # and the steps.
      timeout 100 .devbin/bench matmul --device xpu --dtype f32 --json >"$OUT/select.log" 2>&1
      timeout 100 .devbin/bench matmul conv --device xpu --dtype f16 --json >>"$OUT/select.log" 2>&1
      for s in "8192 1280 320 f16 bt" "8192 320 2560 f16 bt" "4096 320 320 f16 bt" \
               "2048 2048 2048 f16" "154 768 640 f16 bt" "2048 640 640 bt"; do
        timeout 60 .devbin/matmul_variants $s >>"$OUT/select.log" 2>&1
      done
      for a in default 0; do
        echo "=== XPU_ATTN_COOP=$a" >>"$OUT/select.log"
        XPU_ATTN_COOP=$a timeout 100 .devbin/bench attention --device xpu --dtype f16 --json \
          >>"$OUT/select.log" 2>&1
        XPU_ATTN_COOP=$a timeout 150 .devbin/sd_unet --device xpu --dtype f16 --preset sd15 \
          --steps 4 --output /tmp/sd_a$a.safetensors >>"$OUT/select.log" 2>&1
      done
      timeout 150 .devbin/sd_unet --device xpu --dtype f32 --preset sd15 --steps 4 \
        --output /tmp/sd_f32s.safetensors >>"$OUT/select.log" 2>&1
      grep -E '^[0-9]+x|Auto|Tiled\(M|Tiled\(L|Coop|===|median|^f16|test result|FAILED' \
        "$OUT/select.log" | cut -c1-160
      ;;
    anatomy)
      # Where the f16 tensor-core kernel's K step spends its time: the timing-only VARIANT bits
      # of shaders/matmul_coop16.wgsl take one part out at a time (wrong products, so the
      # self-check is off): 2 no products, 32 no staging, 128 fragments loaded once, 256 no
      # global loads, 512 no workgroup stores, and combinations.
      for v in 0 2 32 34 128 160 256 512 768 896; do
        echo "=== XPU_COOP16_VARIANT=$v" >>"$OUT/anatomy.log"
        for s in "4096 4096 4096 f16 coop" "8192 640 640 f16 bt coop"; do
          XPU_COOP_CHECK=0 XPU_COOP16_VARIANT=$v timeout 60 .devbin/matmul_variants $s \
            >>"$OUT/anatomy.log" 2>&1
        done
      done
      grep -E '===|CoopMatrix' "$OUT/anatomy.log" | cut -c1-120
      ;;
    split)
      # Split K of the f16 tensor-core products and convolutions (src/xpu/kernels/split_k.rs):
      # the tests with XPU_SPLIT_K=3 (every tile split in three) and the attention tests, in
      # parallel; then f16 rows and the step with Auto's splits against none (XPU_SPLIT_K=0).
      # (conv_xpu's memory tests bound the bytes a convolution allocates: the forced partial
      # products exceed them by design, so they are skipped here.)
      for t in matmul_split_k conv_xpu matmul_xpu_variants unet_parity attention_parity; do
        (XPU_SPLIT_K=3 timeout 150 .devbin/test-$t --test-threads 4 --skip memory \
          >"$OUT/split-$t.log" 2>&1
         echo "rc=$? $t" >>"$OUT/split-$t.log") &
      done
      wait
      grep -hE '^test result|FAILED|panicked|^rc=' "$OUT"/split-*.log | cut -c1-160
      # The FMA tiles split only when forced: f32 products whole and in four splits.
      for v in 0 4; do
        echo "=== f32 XPU_SPLIT_K=$v" | tee -a "$OUT/split.log"
        XPU_SPLIT_K=$v timeout 100 .devbin/bench matmul --device xpu --dtype f32 --json 2>&1 \
          | tee -a "$OUT/split.log" | grep -E '"(tiled|auto)' | rows
      done
      for v in auto 0; do
        echo "=== XPU_SPLIT_K=$v" | tee -a "$OUT/split.log"
        XPU_SPLIT_K=$v timeout 100 .devbin/bench matmul conv --device xpu --dtype f16 \
          --json 2>&1 | tee -a "$OUT/split.log" | grep -E '"coop_matrix"|"layer_cl"' | rows
        XPU_SPLIT_K=$v timeout 150 .devbin/sd_unet --device xpu --dtype f16 --preset sd15 \
          --steps 4 --output /tmp/sd_s$v.safetensors 2>&1 | tee -a "$OUT/split.log" \
          | grep -E 'median|rror' | cut -c1-160
      done
      ;;
    ahead)
      # mm_coop16 fetching its word pairs two K steps ahead (XPU_COOP16_VARIANT=1024: each
      # step's global loads get two steps of products to arrive in; the anatomy put ~0.9 ms of
      # the 4096^3 product's 2.6 in those loads): the tensor-core tests with it (in parallel,
      # XPU_EXPECT_COOP=1 so a refused kernel fails), then f16 rows and the step, 0 against
      # 1024, 2048 (no words in registers at all: 16 registers fewer, for more workgroups per
      # SM if registers limit them), 4096 (the convolution gather's row positions packed: 8
      # fewer) and 6144 (both; AHEAD="..." to choose, e.g. a second round).
      # The tests only with PHASE_TESTS=1 (they passed on lavapipe 26, and the once-per-process
      # self-check refuses a wrong kernel, which then shows as a slow FMA row).
      for t in ${PHASE_TESTS:+matmul_xpu_variants matmul_split_k conv_xpu unet_parity}; do
        for v in 1024 2048 6144; do
          (XPU_COOP16_VARIANT=$v XPU_EXPECT_COOP=1 timeout 150 .devbin/test-$t \
            --test-threads 2 >"$OUT/ahead-$v-$t.log" 2>&1
           echo "rc=$? $t $v" >>"$OUT/ahead-$v-$t.log") &
        done
      done
      wait
      cat "$OUT"/ahead-*.log 2>/dev/null | grep -E '^test result|FAILED|panicked|^rc=' | cut -c1-160
      LOG=ahead.log f16_rounds XPU_COOP16_VARIANT "matmul conv" ${AHEAD:-0 1024 2048 4096 6144}
      ;;
    double)
      # mm_coop16's double-buffered layout (XPU_COOP16_DOUBLE=1: two tile pairs, one barrier
      # per K step, the next step's stores beside this step's products; the H200's anatomy
      # found staging and products adding up, not overlapping): its tests (in parallel,
      # XPU_EXPECT_COOP=1 so a refused kernel fails), then f16 rows and the step, 0 against 1
      # (DOUBLE="0 1 0 1" for a second round).
      # Its own test always (values and routing on the GPU), the others with PHASE_TESTS=1.
      for t in matmul_coop16_double \
        ${PHASE_TESTS:+matmul_xpu_variants matmul_split_k conv_xpu unet_parity}; do
        (XPU_COOP16_DOUBLE=1 XPU_EXPECT_COOP=1 timeout 150 .devbin/test-$t \
          --test-threads 4 >"$OUT/double-$t.log" 2>&1
         echo "rc=$? $t" >>"$OUT/double-$t.log") &
      done
      wait
      grep -hE '^test result|FAILED|panicked|^rc=' "$OUT"/double-*.log | cut -c1-160
      LOG=double.log f16_rounds XPU_COOP16_DOUBLE "matmul conv" ${DOUBLE:-0 1}
      ;;
    tiles)
      # mm_coop16t (XPU_COOP16_TILES, src/xpu/kernels/coop16_tiles.rs): the tensor-core
      # product with its workgroup and subgroup tiles as pipeline constants. Its test on this
      # GPU (six shapes against the Cpu), then f16 products (row-major B, and B as a transposed
      # weight: `coop_matrix_bt`) with mm_coop16 (the empty value) and each shape in $TILES
      # (WMxWN:TMxTN:BK[:2]; 4x2:2x4:32 is mm_coop16's own shape in the generic code). Mesa's
      # NAK counts (a proxy, BENCHMARKS.md) put 4x4:2x2:32 lowest (120 registers) and the 4x4
      # subgroup tiles at 255 with spills; `stats` after this phase gives NVIDIA's counts.
      (XPU_EXPECT_COOP=1 timeout 200 .devbin/test-matmul_coop16_tiles --test-threads 2 \
        >"$OUT/tiles-test.log" 2>&1; echo "rc=$?" >>"$OUT/tiles-test.log")
      grep -hE '^test result|FAILED|panicked|^rc=' "$OUT/tiles-test.log" | cut -c1-200
      for t in "" ${TILES:-4x2:2x4:32 4x2:2x4:32:2 4x2:2x4:64 4x4:2x2:32 4x4:2x2:32:2 \
        2x2:2x2:32 2x2:2x2:32:2 2x4:4x2:32 2x2:4x4:32 2x2:4x4:32:2 4x2:4x4:32 2x4:4x4:32 \
        2x2:2x4:32 4x2:2x2:32 2x4:2x4:32}; do
        echo "=== XPU_COOP16_TILES=$t" | tee -a "$OUT/tiles.log"
        products "$OUT/tiles-${t:-mm_coop16}.jsonl" "$OUT/tiles.log" XPU_COOP16_TILES=$t
      done
      # The two shapes with the least total time over the rows above (both B layouts), then
      # the f16 conv rows and the SD 1.5 f16 step with mm_coop16 and with each of them
      # (convolutions take the shape too).
      best=$(fastest tiles- mm_coop16)
      echo "fastest shapes: $best" | tee -a "$OUT/tiles.log"
      LOG=tiles-step.log f16_rounds XPU_COOP16_TILES conv "" $best
      ;;
    next)
      # Every prepared f16 speed experiment in one call, most informative first, each item
      # started only while less than $BUDGET seconds (default 480) have passed since the phase
      # began, so the call ends inside the device's 600 s limit with every log written.
      # 0. The tensor-core attention's lean form (XPU_ATTN_LEAN=1): attention_parity's coop
      #    test (every form against the f64 reference, the lean one included), then the f16
      #    attention rows with and without it, two-pass and one-pass (next-attention.log); the f16 convolution rows
      #    with and without mm_coop16's lean staging, whose convolutions with C % 32 == 0 take
      #    the lean gather (next-conv.log).
      # 1. Products (five f16 shapes, both B layouts): mm_coop16, its lean staging with and
      #    without naga's bounds checks (and the checks dropped alone), mm_coop16 without the
      #    SPIR-V fold of f16 word unpacks (XPU_SPIRV_FOLD=0: on by default since the
      #    thirty-sixth session), its double-buffered
      #    layout, its two-step fetch and no-registers forms, and mm_coop16t's tile shapes (NAK's
      #    spilling 4x4 subgroup tiles left out). 2. The f16 step (8 steps; conv rows beside it)
      #    with mm_coop16, the two product forms with the least total time, Winograd F(2,3)
      #    layers, and the tensor-core attention's lean form, its one-pass form alone and with
      #    prefetch and the 128-row layout. 3. The winners of 2 together. Logs: next-*.jsonl (products),
      #    next-step.log; the last lines printed rank each group.
      nt0=$(date +%s)
      left() { [ $(( $(date +%s) - nt0 )) -lt "${BUDGET:-480}" ]; }
      timeout 100 .devbin/test-attention_parity coop --test-threads 1 \
        >"$OUT/next-attention.log" 2>&1
      echo "rc=$? attention_parity coop (every tensor-core attention form)" \
        | tee -a "$OUT/next-attention.log"
      for form in "0 0" "1 0" "1 1" "0 1"; do
        set -- $form
        echo "=== attention XPU_ATTN_LEAN=$1 XPU_ATTN_ONEPASS=$2" | tee -a "$OUT/next-attention.log"
        XPU_ATTN_LEAN=$1 XPU_ATTN_ONEPASS=$2 timeout 60 .devbin/bench attention --device xpu \
          --dtype f16 --json 2>&1 | tee -a "$OUT/next-attention.log" | grep '"fused"' | rows
      done
      for lean in 0 1; do
        echo "=== conv XPU_COOP16_LEAN=$lean XPU_COOP16_UNCHECKED=$lean" | tee -a "$OUT/next-conv.log"
        XPU_COOP16_LEAN=$lean XPU_COOP16_UNCHECKED=$lean timeout 60 .devbin/bench conv \
          --device xpu --dtype f16 --json 2>&1 | tee -a "$OUT/next-conv.log" \
          | grep -E '"layer_cl"' | rows
      done
      # A form of several settings joins them with commas.
      for cfg in "default" "XPU_COOP16_LEAN=1,XPU_COOP16_UNCHECKED=1" "XPU_SPIRV_FOLD=0" \
        "XPU_COOP16_LEAN=1" \
        "XPU_COOP16_UNCHECKED=1" "XPU_COOP16_DOUBLE=1" "XPU_COOP16_VARIANT=1024" \
        "XPU_COOP16_VARIANT=2048" ${NEXT_TILES:-4x4:2x2:32 4x2:2x2:32 2x2:2x2:32 \
        4x4:2x2:32:2 2x2:2x2:32:2 4x2:2x4:32:2 4x2:2x4:64 2x4:2x4:32 2x4:4x2:32}; do
        left || { echo "budget: products from $cfg on skipped" | tee -a "$OUT/next.log"; break; }
        case $cfg in default|XPU_*) ;; *) cfg=XPU_COOP16_TILES=$cfg ;; esac
        name=${cfg//[^A-Za-z0-9:=_,]/}
        echo "=== products $cfg" | tee -a "$OUT/next.log"
        settings=${cfg/#default/}
        products "$OUT/next-$name.jsonl" "$OUT/next.log" ${settings//,/ }
      done
      # The two product forms with the least total time over ten rows (mm_coop16 excluded).
      best=$(fastest next- default)
      echo "fastest product forms: $best" | tee -a "$OUT/next.log"
      step() {
        left || { echo "budget: step $* skipped" | tee -a "$OUT/next.log"; return; }
        echo "=== step $*" | tee -a "$OUT/next-step.log"
        env XPU_NEXT=0 "$@" timeout 60 .devbin/bench conv --device xpu --dtype f16 --json 2>&1 \
          | tee -a "$OUT/next-step.log" | grep -E '"layer_cl"' | rows
        env XPU_NEXT=0 "$@" timeout 120 .devbin/sd_unet --device xpu --dtype f16 --preset sd15 \
          --steps 8 --output /tmp/sd_next.safetensors 2>&1 | tee -a "$OUT/next-step.log" \
          | grep -E 'median|rror|self-check' | cut -c1-160
      }
      step
      for cfg in $best; do
        step ${cfg//,/ }
      done
      step XPU_CONV_WINOGRAD=1
      step XPU_ATTN_LEAN=1
      step XPU_ATTN_LEAN=1 XPU_ATTN_ONEPASS=1
      step XPU_ATTN_ONEPASS=1
      step XPU_ATTN_PREFETCH=1 XPU_ATTN_ROWS128=1 XPU_ATTN_ONEPASS=1
      # Each step's median against the first (mm_coop16, the defaults); the settings that beat
      # it by more than 3% together.
      wins=$(python3 - "$OUT/next-step.log" <<'PY'
import os, re, sys
runs, cfg = [], None
for line in open(sys.argv[1]) if os.path.exists(sys.argv[1]) else []:
    if line.startswith("=== step"):
        cfg = line[8:].strip()
    m = re.search(r"median ([0-9.]+) s/step", line)
    if m and cfg is not None:
        runs.append((cfg, float(m.group(1))))
        cfg = None
base = runs[0][1] if runs and runs[0][0] == "" else None
for cfg, t in runs:
    print(f"step {cfg or 'defaults'}: {t:.4f} s" + (f" ({base / t:.2f}x the defaults)" if base else ""), file=sys.stderr)
# Per family (product form, convolution, attention) the fastest setting that beat the
# defaults by more than 3%.
best = {}
for cfg, t in runs:
    if cfg and base and t < 0.97 * base:
        fam = cfg.split("=")[0][:9]
        if fam not in best or t < best[fam][1]:
            best[fam] = (cfg, t)
print(" ".join(c for c, _ in best.values()))
PY
)
      echo "step winners: ${wins:-none}" | tee -a "$OUT/next.log"
      [ -n "$wins" ] && step $wins
      ;;
    final)
      # After split K and the tensor-core attention at every head dim: the tests that cover
      # them with the default choices (in parallel), the f16 attention and conv rows, and the
      # f16 step (8 steps) with Auto's splits and without.
      for t in matmul_split_k conv_xpu unet_parity attention_parity matmul_xpu_variants \
        conv_channels_last; do
        (timeout 150 .devbin/test-$t --test-threads 4 >"$OUT/final-$t.log" 2>&1
         echo "rc=$? $t" >>"$OUT/final-$t.log") &
      done
      wait
      grep -hE '^test result|FAILED|panicked|^rc=' "$OUT"/final-*.log | cut -c1-160
      timeout 100 .devbin/bench attention conv --device xpu --dtype f16 --json 2>&1 \
        | tee -a "$OUT/final.log" | grep -E '"fused"|"layer_cl"' | rows
      for v in auto 0; do
        echo "=== XPU_SPLIT_K=$v" | tee -a "$OUT/final.log"
        XPU_SPLIT_K=$v timeout 150 .devbin/sd_unet --device xpu --dtype f16 --preset sd15 \
          --steps 8 --output /tmp/sd_f$v.safetensors 2>&1 | tee -a "$OUT/final.log" \
          | grep -E 'median|rror' | cut -c1-160
      done
      ;;
    prefetch)
      # The tensor-core attention's experiments: its prefetch form (XPU_ATTN_PREFETCH=1: the
      # next key block's K/V words in registers while the current block computes), its 128-row
      # layout (XPU_ATTN_ROWS128=1, head dims up to 48) and its one-pass form
      # (XPU_ATTN_ONEPASS=1: no statistics pass, a lazily raised row max). attention_parity's
      # coop test checks all eight combinations against the f64 reference (and that the
      # tensor-core kernel served them); the UNet tests run with all three on. Then the f16
      # attention rows for every combination, and the f16 step (8 steps) for four.
      timeout 200 .devbin/test-attention_parity --test-threads 2 >"$OUT/prefetch-tests.log" 2>&1
      echo "rc=$? attention_parity" >>"$OUT/prefetch-tests.log"
      XPU_ATTN_PREFETCH=1 XPU_ATTN_ROWS128=1 XPU_ATTN_ONEPASS=1 timeout 150 \
        .devbin/test-unet_parity --test-threads 2 >>"$OUT/prefetch-tests.log" 2>&1
      echo "rc=$? unet_parity, all three on" >>"$OUT/prefetch-tests.log"
      grep -hE '^test result|FAILED|panicked|^rc=|self-check' "$OUT/prefetch-tests.log" | cut -c1-160
      for pro in "0 0 0" "1 0 0" "0 1 0" "1 1 0" "0 0 1" "1 0 1" "0 1 1" "1 1 1"; do
        set -- $pro
        echo "=== XPU_ATTN_PREFETCH=$1 XPU_ATTN_ROWS128=$2 XPU_ATTN_ONEPASS=$3" \
          | tee -a "$OUT/prefetch.log"
        XPU_ATTN_PREFETCH=$1 XPU_ATTN_ROWS128=$2 XPU_ATTN_ONEPASS=$3 timeout 60 .devbin/bench \
          attention --device xpu --dtype f16 --json 2>&1 | tee -a "$OUT/prefetch.log" \
          | grep '"fused"' | rows
      done
      for pro in "0 0 0" "0 0 1" "0 1 1" "1 1 1"; do
        set -- $pro
        echo "=== step XPU_ATTN_PREFETCH=$1 XPU_ATTN_ROWS128=$2 XPU_ATTN_ONEPASS=$3" \
          | tee -a "$OUT/prefetch.log"
        XPU_ATTN_PREFETCH=$1 XPU_ATTN_ROWS128=$2 XPU_ATTN_ONEPASS=$3 timeout 150 \
          .devbin/sd_unet --device xpu --dtype f16 --preset sd15 --steps 8 \
          --output /tmp/sd_p$1$2$3.safetensors 2>&1 | tee -a "$OUT/prefetch.log" \
          | grep -E 'median|rror|self-check' | cut -c1-160
      done
      ;;
    attanat)
      # Where the tensor-core attention's time goes at SD 1.5's shapes (head dim 40, forced onto
      # the tensor cores): timing-only VARIANT bits of shaders/attention_coop16.wgsl take one
      # part out at a time (wrong results, the check is skipped): 256 no K/V staging, 512 no
      # softmax arithmetic, 1024 no products, and combinations; the FMA kernel for reference.
      for v in ${ATTANAT:-0 256 512 1024 768 1280 1536 1792 fma}; do
        echo "=== XPU_ATTN_COOP_VARIANT=$v" | tee -a "$OUT/attanat.log"
        c=1; [ $v = fma ] && c=0
        XPU_ATTN_COOP=$c XPU_ATTN_COOP_VARIANT=$v timeout 60 .devbin/bench attention \
          --device xpu --dtype f16 --json 2>&1 | tee -a "$OUT/attanat.log" | grep '"fused"' | rows
      done
      ;;
    profile)
      # GPU time per kernel pipeline and problem shape (timestamp queries; PROFILE_MODE=1 for
      # per pipeline only), SD 1.5 step, f32 and f16.
      for dt in ${PROFILE_DTYPES:-f32 f16}; do
        XPU_PROFILE=${PROFILE_MODE:-shapes} timeout 150 .devbin/sd_unet --device xpu --dtype "$dt" --preset sd15 \
          --steps 3 --output /tmp/sdp_$dt.safetensors >>"$OUT/profile.log" 2>&1
        echo "sd_unet profile $dt rc=$?" >>"$OUT/profile.log"
      done
      grep -E "GPU kernel time|rc=" "$OUT/profile.log"
      ;;
    copies)
      timeout 100 .devbin/bench elementwise --device xpu --dtype f32 --dtype f16 --json \
        >"$OUT/copies.log" 2>&1
      timeout 100 .devbin/bench conv --device xpu --dtype f16 --json >>"$OUT/copies.log" 2>&1
      grep -E 'transpose_copy|channels_last_copy|"conv2d_3x3"' "$OUT/copies.log" | rows
      # Which kernels each f16 conv row runs (the NCHW 2x320x64^2 row read 2.1 ms in two of
      # three H200 runs, 0.47 in the third; channels-last 0.41): per-call GPU time per pipeline.
      XPU_PROFILE=1 timeout 100 .devbin/bench conv --device xpu --dtype f16 --json \
        >"$OUT/conv-profile.log" 2>&1
      grep -E '"conv2d_3x3"' "$OUT/conv-profile.log" | cut -c1-400
      ;;
    ops)
      # Random operator cases against PyTorch (tests/fixtures/check_random_ops.py: float64
      # references on this machine's CPU) through the real driver: f32/f16/bf16, products large
      # enough for the tensor cores, a fifth of the cases with user errors (~2 min).
      XPU_OP_REPLAY=.devbin/op_replay timeout 400 python3 tests/fixtures/check_random_ops.py \
        --count ${OPS_COUNT:-1500} --first-seed 90000 --invalid 0.2 --large --devices xpu \
        --dtypes f32,f16,bf16 >"$OUT/ops.log" 2>&1
      echo "check_random_ops rc=$?" >>"$OUT/ops.log"
      grep -E '^(FAIL|xpu |[0-9]+ runs|check_random_ops)' "$OUT/ops.log" | head -40 | cut -c1-300
      ;;
    stats)
      # The driver's register counts and the occupancy they allow (examples/pipeline_stats)
      # for every pipeline this run created: XPU_DUMP_SPIRV is set for the whole run (see the
      # top), so a `stats` phase after others covers their experiments too; on an empty folder
      # it first runs one f16 and one f32 SD 1.5 step.
      if ! ls "$XPU_DUMP_SPIRV"/*.spv >/dev/null 2>&1; then
        for dt in f16 f32; do
          timeout 120 .devbin/sd_unet --device xpu --dtype $dt --preset sd15 --steps 1 \
            --output /tmp/sds_$dt.safetensors >>"$OUT/stats-runs.log" 2>&1
          echo "sd_unet $dt rc=$?" | tee -a "$OUT/stats-runs.log"
        done
      fi
      timeout 120 .devbin/pipeline_stats "$XPU_DUMP_SPIRV" >"$OUT/stats.txt" 2>&1
      echo "pipeline_stats rc=$?" | tee -a "$OUT/stats.txt"
      head -n 3 "$OUT/stats.txt"
      # One line per module: its name, then the occupancy (or the first statistics line).
      awk '/^[A-Z][A-Za-z0-9]*-/ {n=$1} /Hopper SM:/ {sub(/^ +/, ""); print n, $0; n=""}' \
        "$OUT/stats.txt" | cut -c1-200
      ;;
    torchsd)
      timeout 200 python3 benches/gpu/torch_gpu_ref.py --families "" --unet --dtypes f32,f16 \
        >>"$OUT/sd.log" 2>&1
      tail -n 2 "$OUT/sd.log"
      ;;
    *) echo "unknown phase $phase" ;;
  esac
  summary+=("phase $phase: $(( $(date +%s) - t0 )) s")
done
printf '%s\n' "${summary[@]}"
