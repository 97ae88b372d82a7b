#!/usr/bin/env python3
"""diffusers' AutoencoderKL decode on the CPU, for the same run as `lab` example `vae_decode`.

Builds the SD VAE with seeded random weights (diffusers' SD config), decodes seeded latents of
SIZE/8 × SIZE/8 three times and prints one JSON line with `size`, `tiled`, `dtype`,
`decode_s` (best of the runs after the first) and `peak_bytes` (peak RSS):

    python3 benches/diffusers_vae_decode.py --size 1024 --tiled --dtype f32
    cargo run --release -p xpu-lab --example vae_decode -- 1024 f32 --tiled
"""

import argparse
import json
import resource
import time

import torch


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--size", type=int, default=512)
    parser.add_argument("--dtype", default="f32", choices=["f32", "bf16"])
    parser.add_argument("--tiled", action="store_true")
    args = parser.parse_args()
    from diffusers_txt2img import sd_vae

    dtype = {"f32": torch.float32, "bf16": torch.bfloat16}[args.dtype]
    torch.manual_seed(0)
    vae = sd_vae().to(dtype)
    if args.tiled:
        vae.enable_tiling()
    latents = torch.randn(1, 4, args.size // 8, args.size // 8, generator=torch.Generator().manual_seed(1)).to(dtype)
    best = float("inf")
    with torch.no_grad():
        for i in range(3):
            t = time.perf_counter()
            vae.decode(latents).sample.float().numpy()
            if i > 0:
                best = min(best, time.perf_counter() - t)
    print(json.dumps({
        "size": args.size,
        "tiled": args.tiled,
        "dtype": args.dtype,
        "decode_s": round(best, 4),
        "peak_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
    }))


if __name__ == "__main__":
    main()
