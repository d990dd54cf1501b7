#!/usr/bin/env python3
"""The peers the course quotes but does not link against, measured on this GPU.

PyTorch is not a dependency of the course: these figures are measured apart,
on the GPU the stage programs ran on, and typed into the programs and pages
(stage 06's cuDNN and FlashAttention-2 rows, stage 10's Hugging Face rows).

  python3 scripts/peers.py attention   # SDPA B4 H12 N4096 fp16, cuDNN and FA2 backends, TFLOP/s
  python3 scripts/peers.py gpt2        # transformers GPT-2 124M (random weights): prefill B8 x T1024, decode batch 1
  python3 scripts/peers.py gpt2-compiled  # the same decode with a static KV cache and torch.compile, batch 1-64

Attention FLOPs are stage 06's count: 4*B*H*N*N*d, halved when causal.
GPT-2 runs eager (no torch.compile) in `gpt2`, as a learner would run it, and
compiled in `gpt2-compiled`, as a server would: a static KV cache and the
forward compiled with mode="reduce-overhead" (CUDA graphs), which is what
transformers' generate() does with cache_implementation="static". The weights
are random (no download): the time does not depend on their values.
"""
import statistics
import sys
import time

import torch


def median_ms(fn, reps=20, warmup=5):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    return statistics.median(times)


def attention():
    from torch.nn.attention import SDPBackend, sdpa_kernel
    import torch.nn.functional as F
    B, H, N = 4, 12, 4096
    print(f"{torch.cuda.get_device_name()}, PyTorch {torch.__version__}: SDPA fp16 B{B} H{H} N{N}, TFLOP/s (median of 20)")
    for backend, name in ((SDPBackend.CUDNN_ATTENTION, "cuDNN"), (SDPBackend.FLASH_ATTENTION, "FA2")):
        for d in (64, 128):
            q, k, v = (torch.randn(B, H, N, d, device="cuda", dtype=torch.float16) for _ in range(3))
            for causal in (False, True):
                flops = 4.0 * B * H * N * N * d / (2 if causal else 1)
                try:
                    with sdpa_kernel(backend):
                        ms = median_ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal))
                    print(f"attention {name} d{d} {'causal' if causal else 'non-causal'}: {ms * 1e3:.1f} us, "
                          f"{flops / ms / 1e9:.0f} TFLOP/s")
                except RuntimeError as err:
                    print(f"attention {name} d{d} causal={causal}: not run ({str(err).splitlines()[0]})")


def gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel
    print(f"{torch.cuda.get_device_name()}, PyTorch {torch.__version__}: transformers GPT-2 124M, eager, random weights")
    for dtype, name in ((torch.float32, "fp32"), (torch.float16, "fp16")):
        torch.manual_seed(0)
        model = GPT2LMHeadModel(GPT2Config()).to("cuda", dtype).eval()
        tokens = torch.randint(0, 50257, (8, 1024), device="cuda")
        with torch.no_grad():
            ms = median_ms(lambda: model(tokens), reps=10, warmup=3)
        print(f"gpt2 {name} prefill B8 x T1024: {ms:.2f} ms, {8 * 1024 / ms * 1e3:.0f} tok/s")
        prompt = tokens[:1, :64]
        steps = 128
        with torch.no_grad():
            model.generate(prompt, max_new_tokens=8, min_new_tokens=8, do_sample=False, pad_token_id=0)
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            model.generate(prompt, max_new_tokens=steps, min_new_tokens=steps, do_sample=False, pad_token_id=0)
            torch.cuda.synchronize()
        s = time.perf_counter() - t0
        print(f"gpt2 {name} greedy decode batch 1, prompt 64, {steps} steps: {steps / s:.0f} tok/s")
        del model
        torch.cuda.empty_cache()


def gpt2_compiled():
    """Greedy decode of batches of equal prompts (128 tokens) for 128 steps, fp16, static KV cache, the forward
    compiled with torch.compile(mode="reduce-overhead"): tokens per second, the two first runs (compiling and
    capturing the graphs) untimed. Stage 10's serving table mixes prompt lengths; this one cannot."""
    from transformers import CompileConfig, GPT2Config, GPT2LMHeadModel
    print(f"{torch.cuda.get_device_name()}, PyTorch {torch.__version__}: transformers GPT-2 124M, fp16, static KV "
          f"cache, torch.compile(mode='reduce-overhead'), random weights")
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config()).to("cuda", torch.float16).eval()
    prompt_len, steps = 128, 128
    options = dict(max_new_tokens=steps, min_new_tokens=steps, do_sample=False, pad_token_id=0,
                   cache_implementation="static", compile_config=CompileConfig(mode="reduce-overhead"))
    for batch in (1, 8, 32, 64):
        prompt = torch.randint(0, 50257, (batch, prompt_len), device="cuda")
        with torch.no_grad():
            for _ in range(2):  # compiles, then captures the graphs for this shape
                model.generate(prompt, **options)
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            model.generate(prompt, **options)
            torch.cuda.synchronize()
        s = time.perf_counter() - t0
        print(f"gpt2 fp16 compiled greedy decode batch {batch}, prompt {prompt_len}, {steps} steps (prefill included): "
              f"{batch * steps / s:.0f} tok/s")


if __name__ == "__main__":
    what = sys.argv[1:] or ["attention", "gpt2", "gpt2-compiled"]
    for w in what:
        {"attention": attention, "gpt2": gpt2, "gpt2-compiled": gpt2_compiled}[w]()
