#!/usr/bin/env python3
"""PyTorch eager reference for one SD 1.5 UNet step (issue 5's performance comparison).

Builds diffusers' UNet2DConditionModel with the SD 1.5 config and seeded random weights (no
download), then times forward passes of batch 2 (classifier-free guidance), 77 tokens, at the
given latent size, in f32 and bf16, on the CPU with torch's default thread count. Prints one line
per dtype: median seconds per step over `--steps` timed forwards after one warm-up.

    python3 benches/torch_unet_step.py --latent 64 --steps 3

`--save DIR` instead writes the seeded model (f32) as a diffusers `unet` folder and exits: the
folder the peer benchmark (`benches/peers`) loads into both xpu and candle.

torch and diffusers are installed by the user, not by CI.
"""

import argparse
import statistics
import time

import torch
from diffusers import UNet2DConditionModel


def sd15_unet():
    return UNet2DConditionModel(
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


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--latent", type=int, default=64)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--dtypes", default="f32,bf16")
    parser.add_argument("--save", help="write the seeded f32 model to this folder and exit")
    args = parser.parse_args()
    torch.manual_seed(0)
    unet = sd15_unet().eval()
    if args.save:
        unet.save_pretrained(args.save)
        print(f"wrote {args.save}")
        return
    for name in args.dtypes.split(","):
        dtype = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}[name]
        model = unet.to(dtype)
        sample = torch.randn(2, 4, args.latent, args.latent, dtype=dtype)
        context = torch.randn(2, 77, 768, dtype=dtype)
        timestep = torch.tensor([999, 999])
        times = []
        with torch.inference_mode():
            for step in range(args.steps + 1):
                start = time.perf_counter()
                model(sample, timestep, encoder_hidden_states=context)
                if step > 0:
                    times.append(time.perf_counter() - start)
        print(
            f"torch {torch.__version__} {name} latent {args.latent} batch 2: "
            f"median {statistics.median(times):.3f} s/step (fastest {min(times):.3f}) "
            f"over {args.steps} (threads {torch.get_num_threads()})"
        )


if __name__ == "__main__":
    main()
