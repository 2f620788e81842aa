#!/usr/bin/env python3
"""The accuracy study (issue 43): ZenFlow through ``zenflow.torch.ZenFlowAdamW`` against
``torch.optim.AdamW`` on the same seeds, data and starting weights, over model families, regimes,
learning rates and settings. A benchmark, not a test (CI runs ``--smoke``). docs/accuracy.md.

    bench/accuracy/accuracy_grid.py --out bench/results/2026-11-29-cpu/accuracy      # the grid
    bench/accuracy/accuracy_grid.py --out DIR --models gpt2 --lrs 3e-3 --settings linear none adamw-late
    bench/accuracy/accuracy_grid.py --out DIR --report-only                           # tables only
    bench/accuracy/accuracy_grid.py --smoke --out /tmp/acc-smoke                      # CI's check

A *cell* is one (model, regime, lr, seed, setting) run; each is written to
``DIR/cells/<model>-<regime>-lr<lr>-s<seed>-<setting>.json`` as soon as it finishes and skipped
when that file exists, so an interrupted grid resumes. The setting ``adamw`` is the baseline
(torch.optim.AdamW), ``dense`` the control (ZenFlowAdamW in ``offload_sync`` mode: every channel
on the host, an update every step, which must equal AdamW to float rounding). ``--report-only``
(and the end of every run) writes ``DIR/summary.json`` and ``DIR/tables.md``: eval loss / AdamW's
per cell, the mean and the worst seed.

Models (tiny, so that the grid runs in hours on one core):
  gpt2     transformers' GPT2LMHeadModel from a GPT2Config (random init, tied embeddings)
  encoder  a causal TransformerEncoder LM, untied embedding and head (nn.Linear layers)
  mlp      a character-MLP LM: the last `context` tokens' embeddings through an MLP (no attention)
Data: token sequences from a generated second-order Markov chain (a fixed random, low-entropy
transition table); the fine-tuning corpus is a *shifted* chain (a third of the table's rows
redrawn). Regimes:
  scratch   random init, `--steps` steps on chain A
  finetune  `--pretrain-steps` dense AdamW steps on chain A (lr `--pretrain-lr`; cached per model
            and seed under DIR/pretrained, rebuilt bit for bit when missing), then `--ft-steps` steps
            of every setting from those weights on the shifted chain
Every run: linear warm-up over 10% of its steps, then cosine to 10% of the lr; batch, sequences
and held-out set fixed by the seed. Metric: the eval loss (mean cross-entropy over the held-out
sequences of the corpus trained on) at the end, after ``flush()``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from typing import Any, Callable, Dict, List, Optional

import torch
import torch.nn.functional as F

# ---------------------------------------------------------------------------------------------
# settings: name -> ZenFlowAdamW options (anything not given is the library's default)
# ---------------------------------------------------------------------------------------------

DEEPSPEED_FILE = {  # DeepSpeed ZenFlow with its own defaults: a zenflow block that sets nothing
    "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}, "zenflow": {}},
}

RULES = ["linear", "none", "sqrt", "capped", "snr"]  # every host_lr_scale rule

# One thing changed from the library's settings. A setting's name pins what a change of the
# library's defaults would otherwise change under a stored cell: "<rule>" or "<variation>.<rule>"
# runs with the host windows overlapped (overlap_step true), "<rule>.sync" and
# "<variation>.<rule>.sync" with them synchronous (each window's host AdamW before the next step).
VARIATIONS: Dict[str, Dict[str, Any]] = {
    # the window: fixed S (Zen-auto off), Zen-auto with its longest window 4
    "S1": {"update_interval": 1},
    "S2": {"update_interval": 2},
    "S4": {"update_interval": 4},
    "auto4": {"update_interval": 0, "max_update_interval": 4},
    # the device share
    "r0.05": {"topk_ratio": 0.05},
    "r0.25": {"topk_ratio": 0.25},
    "r0.25-S4": {"topk_ratio": 0.25, "update_interval": 4},
    # the selection trigger
    "massdrop-off": {"select_on_mass_drop": 0.0},
    # host moments' storage
    "bf16-moments": {"host_moments": "bf16"},
    "int8-moments": {"host_moments": "int8"},
}
# DeepSpeed ZenFlow's defaults read through zenflow's config reader (DeepSpeed's keys: DeepSpeed's
# defaults, overlap_step false among them; zenflow_ext's: the rule in the name, the rest zenflow's).
DEEPSPEED = ["deepspeed.linear", "deepspeed.none"]
BASELINE = "adamw"
# Controls that are not ZenFlow: "dense" is ZenFlowAdamW(mode="offload_sync") (every channel on the
# host, an update every step: AdamW to float rounding); "adamw-late" is torch's AdamW with 90% of
# every matrix's columns (fixed, random) updated one step late: the staleness that ZenFlow's
# overlapped host windows add (at S = 1), without anything else of ZenFlow; "adamw-late-x0.5" the
# same with the late columns' update halved (does a smaller host step make up for the lag?);
# "adamw-pairs" those columns updated in pairs of steps (synchronous windows of 2, no lag).
CONTROLS: Dict[str, Dict[str, Any]] = {
    "dense": {"mode": "offload_sync"},
    "adamw-late": {"late_share": 0.9},
    "adamw-late-x0.5": {"late_share": 0.9, "late_scale": 0.5},
    "adamw-pairs": {"late_share": 0.9, "hold": "pairs"},
}


def default_settings(rule: str, sync: bool) -> List[str]:
    tail = ".sync" if sync else ""
    return (list(CONTROLS) + [r + tail for r in RULES] + [f"{v}.{rule}{tail}" for v in VARIATIONS] + DEEPSPEED)


def setting_options(name: str, extra: Dict[str, Dict[str, Any]]) -> Dict[str, Any]:
    if name in extra:
        return extra[name]
    if name in CONTROLS:
        return CONTROLS[name]
    if name == "defaults":  # the library's defaults, whatever they are when the cell runs
        return {}
    if name in DEEPSPEED:
        return {"config": DEEPSPEED_FILE, "host_lr_scale": name.split(".")[1]}
    parts = name.split(".")
    sync = parts[-1] == "sync"
    parts = parts[:-1] if sync else parts
    rule = parts[-1]
    var = ".".join(parts[:-1])
    if rule in RULES and (var == "" or var in VARIATIONS):
        return dict(VARIATIONS.get(var, {}), host_lr_scale=rule, overlap_step=not sync)
    raise SystemExit(f"accuracy_grid: unknown setting '{name}' (a control {list(CONTROLS)}, '<rule>[.sync]' with "
                     f"a rule of {RULES}, '<variation>.<rule>[.sync]' with a variation of {list(VARIATIONS)}, "
                     f"{DEEPSPEED}, 'defaults', or --define)")


# ---------------------------------------------------------------------------------------------
# data
# ---------------------------------------------------------------------------------------------


ALPHABET = "abcdefghijklmnopqrstuvwxyz .,"  # token ids 0..28; the vocab may be larger (unused ids)


class Language:
    """A generated word language over ALPHABET, in the spirit of examples/charlm's corpus: `words`
    random letter strings (2-7 letters), a Zipf law over them, each word with 4 favourite followers
    (half of the next words come from them, half from the Zipf law), sentences of a geometric
    number of words ending in '.' or ','. Within a word the letters are predictable from its
    prefix, the first letter of a word only from the context: a character LM learns it in a few
    hundred steps. `shifted` (the fine-tuning corpus): the same words, the Zipf ranks reversed, a
    third of the follower lists redrawn, other sentence lengths and punctuation."""

    def __init__(self, seed: int, shifted: bool = False, words: int = 256):
        g = torch.Generator().manual_seed(seed)  # the words and base tables: the same for A and shifted
        lens = torch.randint(2, 8, (words,), generator=g)
        self.words = [[int(c) for c in torch.randint(0, 26, (int(n),), generator=g)] for n in lens]
        rank = torch.randperm(words, generator=g)
        self.followers = torch.randint(0, words, (words, 4), generator=g)
        zipf = 1.0 / torch.arange(1, words + 1, dtype=torch.float64)
        if shifted:
            h = torch.Generator().manual_seed(seed + 77)
            rank = rank.flip(0)
            redraw = torch.rand(words, generator=h) < 1.0 / 3.0
            self.followers = torch.where(redraw[:, None], torch.randint(0, words, (words, 4), generator=h),
                                         self.followers)
        self.unigram = torch.empty(words, dtype=torch.float64)
        self.unigram[rank] = zipf / zipf.sum()
        self.end_p = 0.25 if shifted else 0.12  # a sentence ends after a word with this probability
        self.comma = 0.6 if shifted else 0.15   # ... with ',' instead of '.'

    def stream(self, n_tokens: int, seed: int) -> torch.Tensor:
        g = torch.Generator().manual_seed(seed)
        out: List[int] = []
        batch = 4096  # random draws in blocks (a Python loop over words, vectorised draws)
        w = int(torch.multinomial(self.unigram, 1, generator=g))
        while len(out) < n_tokens:
            coin = torch.rand(batch, 3, generator=g)
            zipf_next = torch.multinomial(self.unigram, batch, replacement=True, generator=g)
            fav = torch.randint(0, 4, (batch,), generator=g)
            for i in range(batch):
                out.extend(self.words[w])
                if coin[i, 0] < self.end_p:
                    out.append(28 if coin[i, 1] < self.comma else 27)
                out.append(26)
                w = int(zipf_next[i]) if coin[i, 2] < 0.5 else int(self.followers[w, fav[i]])
                if len(out) >= n_tokens:
                    break
        return torch.tensor(out[:n_tokens], dtype=torch.long)


def sample(lang: Language, n: int, seq: int, seed: int) -> torch.Tensor:
    """n sequences of seq + 1 tokens, consecutive pieces of one stream."""
    return lang.stream(n * (seq + 1), seed).view(n, seq + 1)


# ---------------------------------------------------------------------------------------------
# models
# ---------------------------------------------------------------------------------------------


class EncoderLM(torch.nn.Module):
    """A causal pre-norm TransformerEncoder LM, untied embedding and head."""

    def __init__(self, vocab: int, seq: int, dim: int, layers: int, heads: int):
        super().__init__()
        self.vocab = vocab
        self.emb = torch.nn.Embedding(vocab, dim)
        self.pos = torch.nn.Parameter(torch.randn(seq, dim) * 0.02)
        layer = torch.nn.TransformerEncoderLayer(dim, heads, 4 * dim, dropout=0.0, batch_first=True, norm_first=True)
        self.enc = torch.nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = torch.nn.LayerNorm(dim)
        self.head = torch.nn.Linear(dim, vocab)
        self.register_buffer("mask", torch.nn.Transformer.generate_square_subsequent_mask(seq), persistent=False)

    def loss(self, batch: torch.Tensor) -> torch.Tensor:
        x, y = batch[:, :-1], batch[:, 1:]
        h = self.enc(self.emb(x) + self.pos[: x.shape[1]], mask=self.mask, is_causal=True)
        return F.cross_entropy(self.head(self.norm(h)).reshape(-1, self.vocab), y.reshape(-1))


class MlpLM(torch.nn.Module):
    """Next token from the previous `context` tokens: embeddings concatenated, two hidden layers."""

    def __init__(self, vocab: int, context: int, emb: int, hidden: int):
        super().__init__()
        self.vocab, self.context = vocab, context
        self.emb = torch.nn.Embedding(vocab, emb)
        self.net = torch.nn.Sequential(
            torch.nn.Linear(context * emb, hidden), torch.nn.GELU(),
            torch.nn.Linear(hidden, hidden), torch.nn.GELU(),
            torch.nn.Linear(hidden, vocab),
        )

    def loss(self, batch: torch.Tensor) -> torch.Tensor:
        win = batch.unfold(1, self.context + 1, 1)  # [B, positions, context + 1]
        x, y = win[..., :-1], win[..., -1]
        logits = self.net(self.emb(x).flatten(-2))
        return F.cross_entropy(logits.reshape(-1, self.vocab), y.reshape(-1))


class Gpt2LM(torch.nn.Module):
    """transformers' GPT2LMHeadModel from a small GPT2Config (tied embeddings, no dropout)."""

    def __init__(self, vocab: int, seq: int, dim: int, layers: int, heads: int):
        super().__init__()
        from transformers import GPT2Config, GPT2LMHeadModel  # noqa: PLC0415 (only this model needs it)

        cfg = GPT2Config(vocab_size=vocab, n_positions=seq, n_embd=dim, n_layer=layers, n_head=heads,
                         resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, tie_word_embeddings=True,
                         bos_token_id=None, eos_token_id=None)
        self.model = GPT2LMHeadModel(cfg)

    def loss(self, batch: torch.Tensor) -> torch.Tensor:
        x, y = batch[:, :-1], batch[:, 1:]
        logits = self.model(input_ids=x).logits
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))


def make_model(name: str, a: argparse.Namespace) -> torch.nn.Module:
    if name == "gpt2":
        return Gpt2LM(a.vocab, a.seq, a.dim, a.layers, a.heads)
    if name == "encoder":
        return EncoderLM(a.vocab, a.seq, a.dim, a.layers, a.heads)
    if name == "mlp":
        return MlpLM(a.vocab, a.mlp_context, a.mlp_emb, a.mlp_hidden)
    raise SystemExit(f"accuracy_grid: unknown model '{name}' (gpt2, encoder, mlp)")


MODELS = ["gpt2", "encoder", "mlp"]
REGIMES = ["scratch", "finetune"]


# ---------------------------------------------------------------------------------------------
# training
# ---------------------------------------------------------------------------------------------


def schedule(steps: int) -> Callable[[int], float]:
    """Linear warm-up over 10% of the steps, then cosine to 10% of the lr."""
    warm = max(1, steps // 10)

    def f(s: int) -> float:
        if s < warm:
            return (s + 1) / warm
        t = (s - warm) / max(1, steps - warm)
        return 0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * t))

    return f


@torch.no_grad()
def evaluate(model: torch.nn.Module, held: torch.Tensor, batch: int = 128) -> float:
    total = 0.0
    for i in range(0, len(held), batch):
        b = held[i : i + batch]
        total += model.loss(b).item() * len(b)
    return total / len(held)


class LateAdamW(torch.optim.AdamW):
    """torch's AdamW with a fixed random `share` of every matrix's columns updated late, the other
    columns and the vectors on time. A control that measures a problem's sensitivity to what
    ZenFlow's host windows do to the host channels, without anything else of ZenFlow:

      hold "late"   the update computed at step t lands at step t + 1 (the overlapped host windows'
                    lag at S = 1), times `scale`
      hold "pairs"  the late columns stand still for a step, then take both steps' updates at once
                    (synchronous windows of 2 steps, with no lag)
    """

    def __init__(self, params, share: float, scale: float = 1.0, hold: str = "late", seed: int = 0, **kw):
        super().__init__(params, **kw)
        if hold not in ("late", "pairs"):
            raise ValueError(f"LateAdamW: 'hold' must be 'late' or 'pairs', not {hold!r}")
        self._scale, self._hold, self._t = scale, hold, 0
        g = torch.Generator().manual_seed(seed)
        self._late = {}
        for group in self.param_groups:
            for p in group["params"]:
                if p.dim() >= 2:
                    cols = torch.rand(p.shape[-1], generator=g) < share
                    self._late[p] = (cols.expand(p.shape).clone(), torch.zeros_like(p))

    @torch.no_grad()
    def step(self, closure=None):
        before = {p: p.detach().clone() for p in self._late}
        loss = super().step(closure)
        self._t += 1
        for p, (mask, pending) in self._late.items():
            update = torch.where(mask, (p - before[p]) * self._scale, torch.zeros_like(p))
            if self._hold == "late":  # the late columns take last step's update
                p.copy_(torch.where(mask, before[p] + pending, p))
                pending.copy_(update)
            elif self._t % 2 == 1:  # "pairs": the first step of a pair holds its update
                p.copy_(torch.where(mask, before[p], p))
                pending.copy_(update)
            else:  # ... the second lands both
                p.copy_(torch.where(mask, before[p] + pending + update, p))
                pending.zero_()
        return loss

    @torch.no_grad()
    def flush(self):
        for p, (_, pending) in self._late.items():
            p.add_(pending)
            pending.zero_()


def make_optimizer(setting: str, opts: Dict[str, Any], params, lr: float, wd: float, host_threads: int):
    if setting == BASELINE:
        return torch.optim.AdamW(params, lr=lr, weight_decay=wd)
    if "late_share" in opts:
        return LateAdamW(params, opts["late_share"], scale=opts.get("late_scale", 1.0), hold=opts.get("hold", "late"),
                         lr=lr, weight_decay=wd)
    from zenflow.torch import ZenFlowAdamW  # noqa: PLC0415

    opts = dict(opts)
    config = opts.pop("config", None)
    return ZenFlowAdamW(params, lr=lr, weight_decay=wd, config=config, host_threads=host_threads, **opts)


def top_share(model: torch.nn.Module, ratio: float = 0.1) -> float:
    """The share of the matrices' squared gradient mass in the top `ratio` of each matrix's channels
    (columns, as ZenFlowAdamW registers them; k = int(ratio x channels), at least 1): what ZenFlow's
    device set would hold at a selection now. ZenFlow's premise is that it is large."""
    top = total = 0.0
    for p in model.parameters():
        if p.dim() >= 2 and p.grad is not None:
            col = p.grad.detach().reshape(p.shape[0], -1).double().pow(2).sum(0)
            k = max(1, int(ratio * col.numel()))
            top += float(col.topk(k).values.sum())
            total += float(col.sum())
    return top / total if total > 0 else float("nan")


def train(model, opt, data: torch.Tensor, steps: int, batch: int, curve_every: int = 10, shares: Optional[list] = None):
    """`steps` steps over `data` in order; returns the mean training loss of every `curve_every`
    steps. `shares`: appends top_share() every `curve_every` steps."""
    sched = torch.optim.lr_scheduler.LambdaLR(opt, schedule(steps))
    curve, acc = [], 0.0
    for s in range(steps):
        i = (s * batch) % (len(data) - batch + 1)
        opt.zero_grad()
        loss = model.loss(data[i : i + batch])
        loss.backward()
        if shares is not None and s % curve_every == 0:
            shares.append(top_share(model))
        opt.step()
        sched.step()
        acc += loss.item()
        if (s + 1) % curve_every == 0:
            curve.append(acc / curve_every)
            acc = 0.0
    if hasattr(opt, "flush"):
        opt.flush()
    return curve


class Context:
    """The data and starting weights of one (model, regime, seed): the same for every setting and lr."""

    def __init__(self, a: argparse.Namespace, model: str, regime: str, seed: int, out: str):
        self.model, self.regime, self.seed = model, regime, seed
        base = Language(1000 + seed)
        pre_steps = a.pretrain_steps
        if regime == "scratch":
            lang, steps = base, a.steps
        else:
            lang, steps = Language(1000 + seed, shifted=True), a.ft_steps
        self.steps = steps
        self.train = sample(lang, steps * a.batch, a.seq, seed=10 * seed + 1)
        self.held = sample(lang, a.eval_seqs, a.seq, seed=10 * seed + 2)
        torch.manual_seed(seed)
        m = make_model(model, a)
        if regime == "finetune":
            path = os.path.join(out, "pretrained", f"{model}-s{seed}.pt")
            if os.path.exists(path):
                m.load_state_dict(torch.load(path, weights_only=True))
            else:
                pre = sample(base, pre_steps * a.batch, a.seq, seed=10 * seed + 3)
                train(m, torch.optim.AdamW(m.parameters(), lr=a.pretrain_lr, weight_decay=a.weight_decay), pre,
                      pre_steps, a.batch)
                os.makedirs(os.path.dirname(path), exist_ok=True)
                torch.save(m.state_dict(), path + ".tmp")
                os.replace(path + ".tmp", path)
        self.weights = {k: v.detach().clone() for k, v in m.state_dict().items()}
        self.params = sum(p.numel() for p in m.parameters())
        self.start_eval = evaluate(m, self.held)

    def fresh_model(self, a: argparse.Namespace) -> torch.nn.Module:
        m = make_model(self.model, a)
        m.load_state_dict(self.weights)
        return m


def cell_name(model: str, regime: str, lr: float, seed: int, setting: str) -> str:
    return f"{model}-{regime}-lr{lr:g}-s{seed}-{setting}"


def run_cell(a, ctx: Context, lr: float, setting: str, opts: Dict[str, Any]) -> Dict[str, Any]:
    model = ctx.fresh_model(a)
    t0 = time.perf_counter()
    opt = make_optimizer(setting, opts, list(model.parameters()), lr, a.weight_decay, a.host_threads)
    shares = [] if setting == BASELINE else None
    curve = train(model, opt, ctx.train, ctx.steps, a.batch, shares=shares)
    seconds = time.perf_counter() - t0
    ev = evaluate(model, ctx.held)
    rec: Dict[str, Any] = dict(model=ctx.model, regime=ctx.regime, lr=lr, seed=ctx.seed, setting=setting,
                               options={k: v for k, v in opts.items() if k != "config"},
                               deepspeed_file="config" in opts, steps=ctx.steps, params=ctx.params,
                               start_eval=ctx.start_eval, eval=ev, train_curve=curve, seconds=seconds,
                               spike=len(curve) > 1 and max(curve[1:]) > curve[0])
    if shares:
        rec["top10_share"] = sum(shares) / len(shares)
    if hasattr(opt, "stats"):
        st = opt.stats()
        c = opt.engine.config
        rec["engine"] = dict(windows=int(st.windows_closed), selections=int(st.selections),
                             mass_drop_selections=int(st.mass_drop_selections), stall_s=float(st.stall_s),
                             update_interval=int(c.update_interval), max_update_interval=int(c.max_update_interval),
                             host_lr_scale=str(c.host_lr_scale), topk_ratio=float(c.topk_ratio),
                             overlap_step=bool(c.overlap_step), host_moments=str(c.host_moments),
                             select_on_mass_drop=float(c.select_on_mass_drop), mode=str(c.mode))
    return rec


# ---------------------------------------------------------------------------------------------
# report
# ---------------------------------------------------------------------------------------------


def load_cells(out: str) -> List[Dict[str, Any]]:
    d = os.path.join(out, "cells")
    cells = []
    for f in sorted(os.listdir(d)) if os.path.isdir(d) else []:
        if f.endswith(".json"):
            with open(os.path.join(d, f)) as fh:
                cells.append(json.load(fh))
    return cells


def summarize(cells: List[Dict[str, Any]]) -> Dict[str, Any]:
    """ratio = eval / AdamW's eval in the same (model, regime, lr, seed); per (model, regime, lr,
    setting): the seeds' ratios, their mean and the worst."""
    base = {(c["model"], c["regime"], c["lr"], c["seed"]): c["eval"] for c in cells if c["setting"] == BASELINE}
    groups: Dict[tuple, Dict[str, Any]] = {}
    for c in cells:
        if c["setting"] == BASELINE:
            continue
        b = base.get((c["model"], c["regime"], c["lr"], c["seed"]))
        if b is None:
            continue
        g = groups.setdefault((c["model"], c["regime"], c["lr"], c["setting"]), {"seeds": {}, "spike": False})
        g["seeds"][c["seed"]] = c["eval"] / b
        g["spike"] = g["spike"] or bool(c.get("spike"))
    rows = []
    for (model, regime, lr, setting), g in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2], kv[0][3])):
        r = list(g["seeds"].values())
        rows.append(dict(model=model, regime=regime, lr=lr, setting=setting, seeds=g["seeds"],
                         mean=sum(r) / len(r), worst=max(r), spike=g["spike"]))
    adamw = {}
    for c in cells:
        if c["setting"] == BASELINE:
            adamw.setdefault(f"{c['model']}/{c['regime']}/{c['lr']:g}", {})[c["seed"]] = c["eval"]
    return {"rows": rows, "adamw_eval": adamw}


BOUND = {"finetune": 1.02, "scratch": 1.05}


def tables(summary: Dict[str, Any], settings_order: List[str], compact: bool = False) -> str:
    """Markdown: per regime a table of settings x (model, lr), each cell 'mean (worst seed)'
    (`compact`: the mean only, in bold where the worst seed misses the bound; then the worst seed
    over the row and the seeds per cell)."""
    rows = summary["rows"]
    out = []
    for regime in REGIMES:
        rr = [r for r in rows if r["regime"] == regime]
        if not rr:
            continue
        cols = sorted({(r["model"], r["lr"]) for r in rr}, key=lambda t: (MODELS.index(t[0]) if t[0] in MODELS else 9, t[1]))
        present = [s for s in settings_order if any(r["setting"] == s for r in rr)]
        present += sorted({r["setting"] for r in rr} - set(present))
        idx = {(r["model"], r["lr"], r["setting"]): r for r in rr}
        what = "mean of the seeds, bold: the worst seed above the bound" if compact else "mean of the seeds (worst seed)"
        out.append(f"**{regime}**: eval loss / AdamW's, {what}; bound {BOUND[regime]:.2f}\n")
        out.append("| setting | " + " | ".join(f"{m} {lr:g}" for m, lr in cols) + " | worst seed | seeds |")
        out.append("|---|" + "---|" * (len(cols) + 2))
        for s in present:
            cells, worst, seeds = [], 0.0, set()
            for m, lr in cols:
                r = idx.get((m, lr, s))
                if r is None:
                    cells.append("")
                    continue
                worst = max(worst, r["worst"])
                seeds.add(len(r["seeds"]))
                mark = "**" if r["worst"] > BOUND[regime] else ""
                text = f"{r['mean']:.3f}" if compact else f"{r['mean']:.3f} ({r['worst']:.3f})"
                cells.append(f"{mark}{text}{mark}" + ("" if compact or not r["spike"] else " spike"))
            n = f"{min(seeds)}" if len(seeds) == 1 else f"{min(seeds)}-{max(seeds)}"
            out.append(f"| {s} | " + " | ".join(cells) + f" | {worst:.3f} | {n} |")
        out.append("")
    return "\n".join(out)


PLOT_SETTINGS = ["defaults", "linear.sync", "sqrt.sync", "deepspeed.none", "linear", "none", "S1.linear",
                 "r0.25.linear", "adamw-late", "adamw-pairs"]


def plot(summary: Dict[str, Any], path: str, settings: List[str]) -> None:
    """Eval loss / AdamW's (mean of the seeds) against the lr, one line per setting; a panel per
    model and regime; the bound of the regime dashed."""
    import matplotlib  # noqa: PLC0415 (only for the plot)

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    rows = summary["rows"]
    models = [m for m in MODELS if any(r["model"] == m for r in rows)]
    fig, axes = plt.subplots(len(REGIMES), len(models), figsize=(4.2 * len(models), 7.5), squeeze=False)
    present = [s for s in settings if any(r["setting"] == s for r in rows)]
    cmap = plt.get_cmap("tab20")
    for i, regime in enumerate(REGIMES):
        for j, model in enumerate(models):
            ax = axes[i][j]
            for k, s in enumerate(present):
                pts = sorted((r["lr"], r["mean"]) for r in rows
                             if r["model"] == model and r["regime"] == regime and r["setting"] == s)
                if pts:
                    style = dict(lw=2.5, color="black") if s == "defaults" else dict(lw=1.2, color=cmap(k % 20))
                    ls = ":" if s.startswith("adamw") else "-"
                    ax.plot([p[0] for p in pts], [p[1] for p in pts], ls, marker="o", ms=3, label=s, **style)
            ax.axhline(1.0, color="grey", lw=0.8)
            ax.axhline(BOUND[regime], color="red", lw=0.8, ls="--")
            ax.set_xscale("log")
            ax.set_title(f"{model}, {regime}")
            ax.set_xlabel("lr (peak; warm-up + cosine)")
            if j == 0:
                ax.set_ylabel("eval loss / AdamW's (mean of seeds)")
            ax.set_ylim(0.9, max(1.3, BOUND[regime] + 0.05))
            ax.grid(alpha=0.3)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=6, fontsize=8)
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_report(out: str, settings_order: List[str], quiet: bool = False) -> Dict[str, Any]:
    s = summarize(load_cells(out))
    with open(os.path.join(out, "summary.json"), "w") as f:
        json.dump(s, f, indent=1)
    text = tables(s, settings_order)
    with open(os.path.join(out, "tables.md"), "w") as f:
        f.write(text)
    with open(os.path.join(out, "tables-compact.md"), "w") as f:
        f.write(tables(s, settings_order, compact=True))
    if not quiet:
        print(text)
    return s


# ---------------------------------------------------------------------------------------------
# main
# ---------------------------------------------------------------------------------------------


def parse(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="results folder (cells/, pretrained/, summary.json, tables.md)")
    p.add_argument("--models", nargs="+", default=MODELS)
    p.add_argument("--regimes", nargs="+", default=REGIMES)
    p.add_argument("--lrs", type=float, nargs="+", default=[1e-4, 3e-4, 1e-3, 3e-3])
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    p.add_argument("--settings", nargs="+", default=None,
                   help="default: the controls, every rule, every variation under --rule, and DeepSpeed's")
    p.add_argument("--rule", default="linear", help="the host_lr_scale rule of the variations' cells")
    p.add_argument("--sync", action="store_true", help="the rules and variations with overlap_step false")
    p.add_argument("--define", action="append", default=[], metavar="NAME:JSON",
                   help='an extra setting, e.g. --define \'r0.2:{"topk_ratio": 0.2}\'')
    p.add_argument("--steps", type=int, default=300, help="from-scratch steps")
    p.add_argument("--ft-steps", type=int, default=200, help="fine-tuning steps")
    p.add_argument("--pretrain-steps", type=int, default=300)
    p.add_argument("--pretrain-lr", type=float, default=1e-3)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--seq", type=int, default=32)
    p.add_argument("--vocab", type=int, default=32)
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--mlp-context", type=int, default=6)
    p.add_argument("--mlp-emb", type=int, default=16)
    p.add_argument("--mlp-hidden", type=int, default=128)
    p.add_argument("--eval-seqs", type=int, default=256)
    p.add_argument("--weight-decay", type=float, default=0.01)
    p.add_argument("--host-threads", type=int, default=1, help="the engine's host threads (results do not depend on it)")
    p.add_argument("--threads", type=int, default=1, help="torch's CPU threads")
    p.add_argument("--shard", default="0/1", metavar="I/N",
                   help="run only the (model, regime, seed) contexts whose index is I modulo N (parallel workers)")
    p.add_argument("--report-only", action="store_true")
    p.add_argument("--plot", metavar="PNG", help="also draw the ratio against the lr (PLOT_SETTINGS) into PNG")
    p.add_argument("--smoke", action="store_true",
                   help="CI: a few tiny cells (gpt2 and mlp, one lr, one seed; linear, dense, adamw-late, adamw), "
                   "then checks that dense equals AdamW and that a rerun skips every cell")
    p.add_argument("--quiet", action="store_true")
    a = p.parse_args(argv)
    if a.settings is None:
        a.settings = default_settings(a.rule, a.sync)
    a.extra = {}
    for d in a.define:
        name, _, js = d.partition(":")
        a.extra[name] = json.loads(js)
    if a.smoke:
        a.models, a.regimes, a.lrs, a.seeds = ["gpt2", "mlp"], ["scratch", "finetune"], [3e-3], [1]
        a.settings = ["dense", "linear", "adamw-late"]
        a.steps = a.ft_steps = a.pretrain_steps = 40
        a.dim, a.layers, a.eval_seqs, a.seq = 32, 1, 64, 16
    return a


def run_grid(a: argparse.Namespace) -> int:
    """Runs every missing cell; returns how many ran."""
    torch.set_num_threads(a.threads)
    cells_dir = os.path.join(a.out, "cells")
    os.makedirs(cells_dir, exist_ok=True)
    settings = [BASELINE] + [s for s in a.settings if s != BASELINE]
    ran, index = 0, -1
    shard, shards = (int(x) for x in a.shard.split("/"))
    for model in a.models:
        for regime in a.regimes:
            for seed in a.seeds:
                index += 1
                if index % shards != shard:
                    continue
                ctx = None
                for lr in a.lrs:
                    for setting in settings:
                        path = os.path.join(cells_dir, cell_name(model, regime, lr, seed, setting) + ".json")
                        if os.path.exists(path):
                            continue
                        if ctx is None:
                            ctx = Context(a, model, regime, seed, a.out)
                        opts = {} if setting == BASELINE else setting_options(setting, a.extra)
                        rec = run_cell(a, ctx, lr, setting, opts)
                        with open(path + ".tmp", "w") as f:
                            json.dump(rec, f, indent=1)
                        os.replace(path + ".tmp", path)
                        ran += 1
                        if not a.quiet:
                            print(f"{cell_name(model, regime, lr, seed, setting)}: eval {rec['eval']:.4f} "
                                  f"({rec['seconds']:.1f} s)", flush=True)
    return ran


def main(argv=None) -> int:
    a = parse(argv)
    order = ["defaults"] + default_settings("linear", True) + default_settings("linear", False) + list(a.extra)
    order = list(dict.fromkeys(order))
    if not a.report_only:
        ran = run_grid(a)
        if not a.quiet:
            print(f"accuracy_grid: {ran} cells run")
    s = write_report(a.out, order, quiet=a.quiet)
    if a.plot:
        plot(s, a.plot, PLOT_SETTINGS)
    if a.smoke:
        again = run_grid(a)
        dense = [r for r in s["rows"] if r["setting"] == "dense"]
        bad = [r for r in dense if abs(r["worst"] - 1.0) > 1e-4]
        if again != 0 or not dense or bad:
            print(f"accuracy_grid --smoke: FAILED (rerun ran {again} cells; dense / AdamW: "
                  f"{[(r['model'], r['regime'], r['worst']) for r in dense]})", file=sys.stderr)
            return 1
        print("accuracy_grid --smoke: ok (dense = AdamW in every cell, a rerun skips every cell)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
