#!/usr/bin/env python3
"""A small transformer fine-tuned with PyTorch's AdamW and with zenflow's engine as a PyTorch
optimizer (zenflow.torch.ZenFlowAdamW) in its modes, one table as the C++ demo prints.

    python examples/torch_finetune.py                 # CPU here; CUDA where there is a GPU
    python examples/torch_finetune.py --steps 300 --device cuda

The model (a causal transformer language model) is first pretrained with AdamW on sequences
from one generated Markov chain, then fine-tuned from those weights on a shifted chain by:

  adamw          torch.optim.AdamW, the optimizer state beside the weights ("on the device")
  offload-sync   ZenFlowAdamW(mode="offload_sync"): ZeRO-Offload-like, every gradient to the
                 host and every weight back each step
  zenflow        ZenFlowAdamW() with zenflow's defaults: the top 10% channels on the device,
                 the rest on the host, updated once a window (the step waits for it by
                 default; overlap_step=True runs it beside the next window)
  torchao        torchao's CPUOffloadOptimizer(AdamW), where torchao is installed (CUDA only)
  gpu-adamw      (with --modes) ZenFlowAdamW(mode="gpu_adamw"): the engine's own dense AdamW

Columns: ms/step (forward, backward and optimizer; on the CPU the "device" is the CPU too, so it
says little about ZenFlow), stall (the fraction of the time step() waited for the host),
PCIe bytes per step over the model size (what the engine moved; 0 for on-device AdamW), the
eval loss on held-out fine-tuning data and its ratio to AdamW's. docs/python.md.
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F


def markov_data(n: int, seq: int, vocab: int, chain_seed: int, seed: int) -> torch.Tensor:
    """n sequences of seq + 1 tokens from a fixed random, low-entropy Markov chain."""
    probs = torch.softmax(torch.randn(vocab, vocab, generator=torch.Generator().manual_seed(chain_seed)) * 3.0, -1)
    g = torch.Generator().manual_seed(seed)
    x = torch.empty(n, seq + 1, dtype=torch.long)
    x[:, 0] = torch.randint(0, vocab, (n,), generator=g)
    for t in range(seq):
        x[:, t + 1] = torch.multinomial(probs[x[:, t]], 1, generator=g).squeeze(1)
    return x


class TinyLM(torch.nn.Module):
    def __init__(self, vocab: int, seq: int, dim: int, layers: int, heads: int):
        super().__init__()
        self.vocab = vocab
        self.emb = torch.nn.Embedding(vocab, dim)
        self.pos = torch.nn.Parameter(torch.randn(seq, dim) * 0.02)
        layer = torch.nn.TransformerEncoderLayer(dim, heads, 4 * dim, dropout=0.0, batch_first=True, norm_first=True)
        self.enc = torch.nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = torch.nn.Linear(dim, vocab)
        self.register_buffer("mask", torch.nn.Transformer.generate_square_subsequent_mask(seq), persistent=False)

    def loss(self, batch: torch.Tensor) -> torch.Tensor:
        x, y = batch[:, :-1], batch[:, 1:]
        h = self.enc(self.emb(x) + self.pos[: x.shape[1]], mask=self.mask, is_causal=True)
        return F.cross_entropy(self.head(h).reshape(-1, self.vocab), y.reshape(-1))


def train(model, opt, data, steps, batch, sched=None, sync=lambda: None):
    t0 = time.perf_counter()
    for s in range(steps):
        i = (s * batch) % (len(data) - batch + 1)
        opt.zero_grad()
        model.loss(data[i : i + batch]).backward()
        opt.step()
        if sched is not None:
            sched.step()
    if hasattr(opt, "flush"):
        opt.flush()
    sync()
    return time.perf_counter() - t0


@torch.no_grad()
def evaluate(model, data, batch=256):
    return sum(model.loss(data[i : i + batch]).item() * len(data[i : i + batch]) for i in range(0, len(data), batch)) / len(
        data
    )


def make_setup(args, device):
    """The pretrained weights and the fine-tuning data, the same for every run."""
    torch.manual_seed(args.seed)
    model = TinyLM(args.vocab, args.seq, args.dim, args.layers, args.heads).to(device)
    pre = markov_data(args.pretrain_steps * args.batch, args.seq, args.vocab, chain_seed=0, seed=1).to(device)
    if args.pretrain_steps > 0:
        train(model, torch.optim.AdamW(model.parameters(), lr=args.lr), pre, args.pretrain_steps, args.batch)
    tune = markov_data(max(args.steps * args.batch // 2, args.batch), args.seq, args.vocab, chain_seed=7, seed=2)
    held = markov_data(512, args.seq, args.vocab, chain_seed=7, seed=3)
    return {k: v.detach().clone() for k, v in model.state_dict().items()}, tune.to(device), held.to(device)


def run_mode(name, args, device, weights, tune, held):
    """Fine-tunes a copy of the pretrained model with optimizer `name`; one row of the table."""
    model = TinyLM(args.vocab, args.seq, args.dim, args.layers, args.heads).to(device)
    model.load_state_dict(weights)
    params = list(model.parameters())
    opt_kw = dict(lr=args.lr, weight_decay=args.weight_decay)
    if name == "adamw":
        opt = torch.optim.AdamW(params, **opt_kw)
    elif name == "torchao":
        from torchao.optim import CPUOffloadOptimizer  # noqa: PLC0415 (optional)

        opt = CPUOffloadOptimizer(params, torch.optim.AdamW, **opt_kw)
    else:
        from zenflow.torch import ZenFlowAdamW  # noqa: PLC0415

        extra = dict(mode=name.replace("-", "_")) if name != "zenflow" else {}
        extra.update(args.zenflow_options)
        opt = ZenFlowAdamW(params, **opt_kw, **extra)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0 - 0.9 * s / args.steps)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    seconds = train(model, opt, tune, args.steps, args.batch, sched, sync)
    model_bytes = sum(p.numel() * p.element_size() for p in params)
    row = dict(mode=name, ms=1e3 * seconds / args.steps, stall=None, pcie=None, eval=evaluate(model, held))
    if hasattr(opt, "stats"):
        st = opt.stats()
        row["stall"] = st.stall_s / seconds
        row["pcie"] = (st.d2h_bytes + st.h2d_bytes) / args.steps / model_bytes
    elif name == "adamw":
        row["stall"], row["pcie"] = 0.0, 0.0
    return row


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="auto", help="cpu, cuda or auto (cuda when available)")
    p.add_argument("--steps", type=int, default=200, help="fine-tuning steps per mode")
    p.add_argument("--pretrain-steps", type=int, default=100)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--seq", type=int, default=32)
    p.add_argument("--vocab", type=int, default=32)
    p.add_argument("--dim", type=int, default=48)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--weight-decay", type=float, default=0.01)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1,
                   help="torch CPU threads (1: the engine's host threads need the other cores, and torch's "
                   "OpenMP threads spin badly on busy cores; 0: torch's default)")
    p.add_argument("--modes", default="adamw,offload-sync,zenflow,torchao")
    p.add_argument("--zenflow", action="append", default=[], metavar="KEY=VALUE",
                   help="a zenflow.Config key for the zenflow runs, e.g. --zenflow topk_ratio=0.05")
    args = p.parse_args(argv)
    args.zenflow_options = {}
    for kv in args.zenflow:
        k, _, v = kv.partition("=")
        try:
            args.zenflow_options[k] = int(v) if v.lstrip("-").isdigit() else float(v)
        except ValueError:
            args.zenflow_options[k] = {"true": True, "false": False}.get(v.lower(), v)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device("cuda" if args.device == "auto" and torch.cuda.is_available() else
                          ("cpu" if args.device == "auto" else args.device))
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    notes = []
    if "torchao" in modes:
        try:
            import torchao.optim  # noqa: F401, PLC0415
        except Exception:  # noqa: BLE001 (any import failure: not installed, or a torch mismatch)
            modes.remove("torchao")
            notes.append("torchao: not installed (pip install torchao), skipped")
        else:
            if device.type != "cuda":
                modes.remove("torchao")
                notes.append("torchao: CPUOffloadOptimizer offloads from a GPU; skipped on the CPU")

    import zenflow  # noqa: PLC0415

    if device.type == "cuda" and not zenflow.has_cuda:
        raise SystemExit("zenflow was built without CUDA: ZENFLOW_ENABLE_CUDA=ON pip install . (docs/python.md)")
    t0 = time.perf_counter()
    weights, tune, held = make_setup(args, device)
    n_params = sum(v.numel() for k, v in weights.items())
    print(f"device {device}; model {n_params / 1e3:.1f}k parameters ({args.layers} layers, dim {args.dim}); "
          f"pretrained {args.pretrain_steps} steps with AdamW in {time.perf_counter() - t0:.1f} s; "
          f"fine-tuning {args.steps} steps per mode, batch {args.batch}, lr {args.lr} (linear decay)", flush=True)
    rows = []
    for m in modes:
        t = time.perf_counter()
        rows.append(run_mode(m, args, device, weights, tune, held))
        print(f"  {m}: {time.perf_counter() - t:.1f} s", flush=True)
    base = next((r["eval"] for r in rows if r["mode"] == "adamw"), None)

    def f(v, fmt):
        return "-" if v is None else format(v, fmt)

    print()
    print(f"{'mode':<14}{'ms/step':>10}{'stall':>9}{'PCIe/step':>12}{'eval loss':>12}{'vs adamw':>10}")
    for r in rows:
        rel = None if base is None else r["eval"] / base
        print(f"{r['mode']:<14}{f(r['ms'], '.1f'):>10}{f(None if r['stall'] is None else 100 * r['stall'], '.1f') + '%':>9}"
              f"{f(r['pcie'], '.2f') + 'x':>12}{f(r['eval'], '.4f'):>12}{f(rel, '.4f'):>10}")
    print("\nstall: share of the time step() waited for the host; PCIe/step: bytes moved per step over the "
          "model's bytes; vs adamw: eval loss / AdamW's.")
    if device.type == "cpu":
        print("On the CPU the engine's 'device' is host memory too: ms/step is CPU time shared by the model "
              "and the host optimizer; the losses and PCIe bytes are the real ones.")
    for n in notes:
        print(n)
    return rows


if __name__ == "__main__":
    main()
