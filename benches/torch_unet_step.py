#!/usr/bin/env python3
"""PyTorch eager reference for one SD 1.5 UNet step.

Builds diffusers' UNet2DConditionModel with the SD 1.5 config (or SDXL base's, `--arch sdxl`,
with its added text/time conditions) and seeded random weights (no download), then times forward passes of batch 2 (classifier-free guidance), 77 tokens, at the
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


def sdxl_unet():
    """SDXL base's UNet (`stabilityai/stable-diffusion-xl-base-1.0/unet/config.json`)."""
    return UNet2DConditionModel(
        sample_size=128,
        down_block_types=("DownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D"),
        up_block_types=("CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "UpBlock2D"),
        block_out_channels=(320, 640, 1280),
        layers_per_block=2,
        cross_attention_dim=2048,
        attention_head_dim=[5, 10, 20],
        transformer_layers_per_block=[1, 2, 10],
        use_linear_projection=True,
        addition_embed_type="text_time",
        addition_embed_type_num_heads=64,
        addition_time_embed_dim=256,
        projection_class_embeddings_input_dim=2816,
    )


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--latent", type=int, default=64)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--dtypes", default="f32,bf16")
    parser.add_argument("--save", help="write the seeded f32 model to this folder and exit")
    parser.add_argument("--arch", default="sd15", choices=["sd15", "sdxl"])
    args = parser.parse_args()
    torch.manual_seed(0)
    unet = (sdxl_unet() if args.arch == "sdxl" else sd15_unet()).eval()
    if args.save:
        unet.save_pretrained(args.save)
        print(f"wrote {args.save}")
        return
    for name in args.dtypes.split(","):
        dtype = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}[name]
        model = unet.to(dtype)
        sample = torch.randn(2, 4, args.latent, args.latent, dtype=dtype)
        context = torch.randn(2, 77, unet.config.cross_attention_dim, dtype=dtype)
        timestep = torch.tensor([999, 999])
        added = None
        if args.arch == "sdxl":
            size = float(8 * args.latent)
            added = {
                "text_embeds": torch.randn(2, 1280, dtype=dtype),
                "time_ids": torch.tensor([[size, size, 0.0, 0.0, size, size]] * 2),
            }
        times = []
        with torch.inference_mode():
            for step in range(args.steps + 1):
                start = time.perf_counter()
                model(sample, timestep, encoder_hidden_states=context, added_cond_kwargs=added)
                if step > 0:
                    times.append(time.perf_counter() - start)
        print(
            f"torch {torch.__version__} {args.arch} {name} latent {args.latent} batch 2: "
            f"median {statistics.median(times):.3f} s/step (fastest {min(times):.3f}) "
            f"over {args.steps} (threads {torch.get_num_threads()})"
        )


if __name__ == "__main__":
    main()
