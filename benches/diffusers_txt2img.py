#!/usr/bin/env python3
"""diffusers' StableDiffusionPipeline end to end, for the same run as `txt2img` without `--model`.

Builds the SD 1.5 architecture with seeded random weights (UNet, CLIP text encoder, VAE; CLIP's
tokenizer from `tests/fixtures/clip_tokenizer`; PNDM on SD 1.5's schedule; no safety checker),
then times one prompt to one image on the CPU with torch's default thread count and prints one
JSON line with the keys `txt2img --json` prints (`encode_s`, `step_median_s`, `steps`,
`decode_s`, `total_s`, `load_s`, `peak_bytes`, `device`, `dtype`):

    python3 benches/diffusers_txt2img.py --size 512 --steps 20 --dtype f32
    cargo run --release --example txt2img -- --height 512 --width 512 --steps 20 --json

`--save DIR` writes that random pipeline as a diffusers folder (`save_pretrained`, f32
safetensors) and exits; `--model DIR` loads a pipeline folder instead of building one, so both
programs can run from the same files:

    python3 benches/diffusers_txt2img.py --save DIR
    python3 benches/diffusers_txt2img.py --model DIR --size 512 --steps 20 --dtype bf16
    cargo run --release --example txt2img -- --model DIR --height 512 --width 512 --steps 20 --json --dtype bf16

torch, transformers and diffusers are installed by the user, not by CI.
"""

import argparse
import json
import os
import resource
import statistics
import time

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def sd_vae():
    """SD 1.x's AutoencoderKL (diffusers' config) with the current torch seed's weights."""
    from diffusers import AutoencoderKL

    return AutoencoderKL(
        in_channels=3,
        out_channels=3,
        down_block_types=("DownEncoderBlock2D",) * 4,
        up_block_types=("UpDecoderBlock2D",) * 4,
        block_out_channels=(128, 256, 512, 512),
        layers_per_block=2,
        latent_channels=4,
        sample_size=512,
    )


def build(dtype):
    from diffusers import PNDMScheduler, StableDiffusionPipeline, UNet2DConditionModel
    from transformers import CLIPTextConfig, CLIPTextModel, CLIPTokenizer

    torch.manual_seed(0)
    unet = UNet2DConditionModel(
        sample_size=64,
        down_block_types=("CrossAttnDownBlock2D",) * 3 + ("DownBlock2D",),
        up_block_types=("UpBlock2D",) + ("CrossAttnUpBlock2D",) * 3,
        block_out_channels=(320, 640, 1280, 1280),
        layers_per_block=2,
        cross_attention_dim=768,
        attention_head_dim=8,
    )
    text = CLIPTextModel(
        CLIPTextConfig(
            vocab_size=49408,
            hidden_size=768,
            intermediate_size=3072,
            num_hidden_layers=12,
            num_attention_heads=12,
            max_position_embeddings=77,
            hidden_act="quick_gelu",
        )
    )
    vae = sd_vae()
    tokenizer = CLIPTokenizer.from_pretrained(os.path.join(ROOT, "tests", "fixtures", "clip_tokenizer"))
    scheduler = PNDMScheduler(
        beta_start=0.00085,
        beta_end=0.012,
        beta_schedule="scaled_linear",
        skip_prk_steps=True,
        set_alpha_to_one=False,
        steps_offset=1,
    )
    pipe = StableDiffusionPipeline(
        vae=vae,
        text_encoder=text,
        tokenizer=tokenizer,
        unet=unet,
        scheduler=scheduler,
        safety_checker=None,
        feature_extractor=None,
        requires_safety_checker=False,
    )
    return pipe.to(dtype=dtype)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--size", type=int, default=512)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--guidance", type=float, default=7.5)
    parser.add_argument("--dtype", default="f32", choices=["f32", "bf16"])
    parser.add_argument("--prompt", default="a photograph of an astronaut riding a horse")
    parser.add_argument("--model", help="a diffusers pipeline folder to load instead of building one")
    parser.add_argument("--save", help="write the random pipeline to this folder and exit")
    args = parser.parse_args()
    dtype = {"f32": torch.float32, "bf16": torch.bfloat16}[args.dtype]
    if args.save:
        build(torch.float32).save_pretrained(args.save, safe_serialization=True)
        return
    t0 = time.perf_counter()
    if args.model:
        from diffusers import StableDiffusionPipeline

        pipe = StableDiffusionPipeline.from_pretrained(
            args.model, torch_dtype=dtype, safety_checker=None, requires_safety_checker=False
        )
    else:
        pipe = build(dtype)
    load_s = time.perf_counter() - t0

    step_times = []
    last = [time.perf_counter()]

    def on_step(_pipe, _i, _t, kwargs):
        now = time.perf_counter()
        step_times.append(now - last[0])
        last[0] = now
        return kwargs

    with torch.no_grad():
        start = time.perf_counter()
        embeds, negative = pipe.encode_prompt(args.prompt, "cpu", 1, args.guidance > 1)
        encode_s = time.perf_counter() - start
        generator = torch.Generator("cpu").manual_seed(0)
        last[0] = time.perf_counter()
        latents = pipe(
            prompt_embeds=embeds,
            negative_prompt_embeds=negative,
            height=args.size,
            width=args.size,
            num_inference_steps=args.steps,
            guidance_scale=args.guidance,
            generator=generator,
            output_type="latent",
            callback_on_step_end=on_step,
        ).images
        start_decode = time.perf_counter()
        image = pipe.vae.decode(latents / pipe.vae.config.scaling_factor).sample
        pipe.image_processor.postprocess(image, output_type="pil")
        decode_s = time.perf_counter() - start_decode
        total_s = time.perf_counter() - start
    print(
        json.dumps(
            {
                "encode_s": round(encode_s, 4),
                "step_median_s": round(statistics.median(step_times), 4),
                "steps": len(step_times),
                "decode_s": round(decode_s, 4),
                "total_s": round(total_s, 4),
                "load_s": round(load_s, 4),
                "peak_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
                "device": "cpu",
                "dtype": args.dtype,
                "library": f"diffusers (torch {torch.__version__}, {torch.get_num_threads()} threads)",
            }
        )
    )


if __name__ == "__main__":
    main()
