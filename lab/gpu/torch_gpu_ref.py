#!/usr/bin/env python3
"""PyTorch on the same GPU as `examples/bench.rs`: the reference rows for the Xpu figures.

Times, with CUDA events (median of many calls after warm-up), the shapes the bench example uses:
matmul (f32 with TF32 off, f16, bf16), SD 1.5's 3x3 convolutions (cuDNN; NCHW and channels-last),
scaled-dot-product attention (self 2x8x4096x40 and cross to 77 tokens), diffusers' GEGLU
feed-forward at 2x4096x320, and with `--unet` one SD 1.5 UNet step (batch 2, 64x64 latents,
77 tokens; needs diffusers). Prints one JSON object per line, in the bench example's columns.

    python3 lab/gpu/torch_gpu_ref.py [--unet] [--dtypes f32,f16]

Run on a machine with a CUDA GPU and PyTorch (lab/gpu/run_gpu.sh does it beside the bench example).
"""

import argparse
import json
import statistics
import time

import torch
import torch.nn.functional as F

DT = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}


def cuda_ms(fn, reps=None):
    """Median milliseconds per call of fn, timed with CUDA events."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    once = time.perf_counter() - start
    reps = reps or max(3, min(200, int(0.2 / max(once, 1e-6))))
    times = []
    for _ in range(7):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(reps):
            fn()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b) / reps)
    return statistics.median(times)


def row(op, variant, dtype, shape, ms, flops):
    print(
        json.dumps(
            {
                "op": op,
                "variant": variant,
                "device": "torch-cuda",
                "dtype": dtype,
                "shape": list(shape),
                "median_ms": round(ms, 4),
                "gflops": round(flops / ms / 1e6, 1),
            }
        ),
        flush=True,
    )


def matmuls(name, dtype):
    shapes = [
        (256, 256, 256),
        (512, 512, 512),
        (1024, 1024, 1024),
        (2048, 2048, 2048),
        (4096, 4096, 4096),
        (8192, 320, 320),
        (8192, 320, 1280),
        (8192, 640, 640),
        (154, 768, 320),
    ]
    for m, k, n in shapes:
        a = torch.randn(m, k, device="cuda", dtype=dtype)
        b = torch.randn(k, n, device="cuda", dtype=dtype)
        ms = cuda_ms(lambda: torch.matmul(a, b))
        row("matmul", "torch", name, (m, k, n), ms, 2.0 * m * n * k)


def convs(name, dtype):
    for c, hw in [(320, 64), (640, 32), (1280, 16)]:
        x = torch.randn(2, c, hw, hw, device="cuda", dtype=dtype)
        w = torch.randn(c, c, 3, 3, device="cuda", dtype=dtype) * 0.02
        b = torch.randn(c, device="cuda", dtype=dtype)
        flops = 2.0 * 2 * c * c * 9 * hw * hw
        ms = cuda_ms(lambda: F.conv2d(x, w, b, padding=1))
        row("conv2d_3x3", "torch_nchw", name, (2, c, hw, hw), ms, flops)
        xcl = x.to(memory_format=torch.channels_last)
        wcl = w.to(memory_format=torch.channels_last)
        ms = cuda_ms(lambda: F.conv2d(xcl, wcl, b, padding=1))
        row("conv2d_3x3", "torch_channels_last", name, (2, c, hw, hw), ms, flops)


def attentions(name, dtype):
    b, h, l, d = 2, 8, 4096, 40
    for op, lk in [("attention_self", l), ("attention_cross", 77)]:
        q = torch.randn(b, h, l, d, device="cuda", dtype=dtype)
        k = torch.randn(b, h, lk, d, device="cuda", dtype=dtype)
        v = torch.randn(b, h, lk, d, device="cuda", dtype=dtype)
        ms = cuda_ms(lambda: F.scaled_dot_product_attention(q, k, v))
        row(op, "torch_sdpa", name, (b, h, l, lk, d), ms, 2.0 * b * h * l * lk * 2 * d)


def ffn(name, dtype):
    tokens, dim = 2 * 4096, 320
    inner = 4 * dim
    x = torch.randn(tokens, dim, device="cuda", dtype=dtype)
    w1 = torch.randn(2 * inner, dim, device="cuda", dtype=dtype) * 0.05
    b1 = torch.randn(2 * inner, device="cuda", dtype=dtype)
    w2 = torch.randn(dim, inner, device="cuda", dtype=dtype) * 0.05
    b2 = torch.randn(dim, device="cuda", dtype=dtype)

    def geglu():
        h, g = F.linear(x, w1, b1).chunk(2, dim=-1)
        return F.linear(h * F.gelu(g), w2, b2) + x

    flops = 2.0 * (tokens * dim * 2 * inner + tokens * inner * dim)
    row("ffn_geglu", "torch", name, (tokens, dim, inner), cuda_ms(geglu), flops)


def unet_step(name, dtype, steps):
    from diffusers import UNet2DConditionModel

    torch.manual_seed(0)
    unet = UNet2DConditionModel(
        sample_size=64,
        in_channels=4,
        out_channels=4,
        down_block_types=("CrossAttnDownBlock2D",) * 3 + ("DownBlock2D",),
        up_block_types=("UpBlock2D",) + ("CrossAttnUpBlock2D",) * 3,
        block_out_channels=(320, 640, 1280, 1280),
        layers_per_block=2,
        cross_attention_dim=768,
        attention_head_dim=8,
    )
    unet = unet.eval().to("cuda", dtype)
    sample = torch.randn(2, 4, 64, 64, device="cuda", dtype=dtype)
    context = torch.randn(2, 77, 768, device="cuda", dtype=dtype)
    timestep = torch.tensor([999, 999], device="cuda")
    times = []
    with torch.inference_mode():
        for step in range(steps + 2):
            torch.cuda.synchronize()
            start = time.perf_counter()
            unet(sample, timestep, encoder_hidden_states=context)
            torch.cuda.synchronize()
            if step >= 2:
                times.append(time.perf_counter() - start)
    print(
        json.dumps(
            {
                "op": "sd15_unet_step",
                "variant": "torch_eager",
                "device": "torch-cuda",
                "dtype": name,
                "shape": [2, 4, 64, 64],
                "median_ms": round(statistics.median(times) * 1e3, 2),
                "fastest_ms": round(min(times) * 1e3, 2),
            }
        ),
        flush=True,
    )


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--dtypes", default="f32,f16")
    p.add_argument("--families", default="matmul,conv,attention,ffn")
    p.add_argument("--unet", action="store_true")
    p.add_argument("--steps", type=int, default=5)
    args = p.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = True
    print(f"# torch {torch.__version__} on {torch.cuda.get_device_name()}", flush=True)
    fams = {"matmul": matmuls, "conv": convs, "attention": attentions, "ffn": ffn}
    for name in args.dtypes.split(","):
        for fam in filter(None, args.families.split(",")):
            fams[fam](name, DT[name])
        if args.unet:
            unet_step(name, DT[name], args.steps)


if __name__ == "__main__":
    main()
