#!/usr/bin/env python3
"""The peers the course quotes but does not link against, measured on this GPU.

PyTorch is not a dependency of the course: these figures are measured apart,
on the GPU the stage programs ran on, and typed into the programs and pages
(stage 06's cuDNN and FlashAttention-2 rows, stage 10's Hugging Face rows).

  python3 scripts/peers.py attention   # SDPA B4 H12 N4096 fp16, cuDNN and FA2 backends, TFLOP/s
  python3 scripts/peers.py gpt2        # transformers GPT-2 124M (random weights): prefill B8 x T1024, decode batch 1
  python3 scripts/peers.py gpt2-compiled  # GPT-2's decode step in plain PyTorch, eager and torch.compile, batch 1-64

Attention FLOPs are stage 06's count: 4*B*H*N*N*d, halved when causal.
GPT-2 runs eager (no torch.compile) in `gpt2`, as a learner would run it, and
in `gpt2-compiled` as a server would: its decode step in plain PyTorch (no
transformers), a static KV cache, compiled with mode="reduce-overhead" (CUDA
graphs). The weights are random (no download): the time does not depend on
their values.
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


class Gpt2Decode(torch.nn.Module):
    """GPT-2 124M's greedy decode step in plain PyTorch, as a server compiles it: random weights (the time does not
    depend on their values), a static KV cache of the whole context (every step attends over it, masked past each
    sequence's position), one token per sequence in, its greedy next token out."""

    def __init__(self, batch, dtype=torch.float16, C=768, H=12, L=12, V=50257, T=1024):
        super().__init__()
        self.C, self.H, self.L, self.T = C, H, L, T
        g = torch.Generator(device="cuda").manual_seed(0)

        def w(*shape):
            return torch.nn.Parameter((torch.randn(*shape, device="cuda", generator=g) * 0.02).to(dtype),
                                      requires_grad=False)

        self.wte, self.wpe = w(V, C), w(T, C)
        self.ln = w(2 * L + 1, 2, C)  # each LayerNorm's gain and shift
        self.qkv, self.qkv_b = w(L, C, 3 * C), w(L, 3 * C)
        self.proj, self.proj_b = w(L, C, C), w(L, C)
        self.fc, self.fc_b = w(L, C, 4 * C), w(L, 4 * C)
        self.fcproj, self.fcproj_b = w(L, 4 * C, C), w(L, C)
        for l in range(L):  # a buffer a layer, written in place (a slice of one buffer for all: copied whole a step)
            cache = torch.randn(batch, H, T, C // H, device="cuda", generator=g).to(dtype)
            self.register_buffer(f"k{l}", cache)
            self.register_buffer(f"v{l}", cache.clone())

    def layernorm(self, x, i):
        return torch.nn.functional.layer_norm(x, (self.C,), self.ln[i, 0], self.ln[i, 1])

    def forward(self, tokens, pos):  # tokens, pos: [B]; the new token's K and V go to the cache at pos
        F = torch.nn.functional
        B, C, H = tokens.shape[0], self.C, self.H
        rows = torch.arange(B, device=tokens.device)
        mask = (torch.arange(self.T, device=tokens.device)[None, :] <= pos[:, None])[:, None, None, :]
        x = self.wte[tokens] + self.wpe[pos]
        for l in range(self.L):
            q, k, v = (self.layernorm(x, 2 * l) @ self.qkv[l] + self.qkv_b[l]).view(B, 3, H, C // H).unbind(1)
            kc, vc = getattr(self, f"k{l}"), getattr(self, f"v{l}")
            kc[rows, :, pos] = k
            vc[rows, :, pos] = v
            att = F.scaled_dot_product_attention(q[:, :, None], kc, vc, attn_mask=mask)
            x = x + att.reshape(B, C) @ self.proj[l] + self.proj_b[l]
            h = F.gelu(self.layernorm(x, 2 * l + 1) @ self.fc[l] + self.fc_b[l], approximate="tanh")
            x = x + h @ self.fcproj[l] + self.fcproj_b[l]
        return (self.layernorm(x, 2 * self.L) @ self.wte.t()).argmax(-1)


def gpt2_compiled():
    """Greedy decode steps at batch 1, 8, 32 and 64, fp16, as stage 10's serving table runs them: batch 1 at
    context 311, the others at mixed contexts of 16-512 (seeded), 128 steps each token fed back on the GPU; eager
    and compiled with torch.compile(mode="reduce-overhead") (CUDA graphs), the compiling and capturing untimed."""
    print(f"{torch.cuda.get_device_name()}, PyTorch {torch.__version__}: GPT-2 124M decode step in plain PyTorch, "
          f"fp16, static KV cache, random weights")
    steps = 128
    for batch in (1, 8, 32, 64):
        gen = torch.Generator().manual_seed(batch)
        start = torch.tensor([311]) if batch == 1 else torch.randint(16, 513, (batch,), generator=gen)
        model = Gpt2Decode(batch)
        torch._dynamo.reset()  # a graph of this batch's own shape: not a dynamic one, whose steps skip the CUDA graphs
        for name, step in (("eager", model), ("compiled", torch.compile(model, mode="reduce-overhead",
                                                                           fullgraph=True, dynamic=False))):
            tokens = torch.zeros(batch, dtype=torch.long, device="cuda")
            pos = start.to("cuda")
            with torch.no_grad():
                for _ in range(3):  # compiles, captures, and runs once more
                    tokens = step(tokens, pos).clone()
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                for s in range(steps):
                    tokens = step(tokens, pos + s).clone()
                torch.cuda.synchronize()
            sec = time.perf_counter() - t0
            print(f"gpt2 fp16 {name} decode batch {batch}, contexts {int(start.min())}..{int(start.max())}, "
                  f"{steps} steps: {batch * steps / sec:.0f} tok/s ({sec / steps * 1e3:.3f} ms a step)")
        del model
        torch.cuda.empty_cache()


if __name__ == "__main__":
    what = sys.argv[1:] or ["attention", "gpt2", "gpt2-compiled"]
    for w in what:
        {"attention": attention, "gpt2": gpt2, "gpt2-compiled": gpt2_compiled}[w]()
