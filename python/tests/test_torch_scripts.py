"""Real training scripts with zenflow.torch.ZenFlowAdamW (issue 42): low-rank adapters on a frozen
base (plain torch, and peft on GPT-2), the Hugging Face Trainer with its default arguments, bf16
autocast, and DistributedDataParallel over gloo with two processes. References: the same script
with torch.optim.AdamW (ratio 1, windows of 1: the same arithmetic within float rounding), the
Trainer's own clipping against the engine's gradient_clipping (bit for bit), and for DDP a
single-process engine fed the gradients averaged as DDP averages them (bit for bit)."""
import copy
import importlib.util
import os
import pathlib
import socket
import warnings

import pytest

torch = pytest.importorskip("torch")
from zenflow.torch import ZenFlowAdamW, channel_dims_of  # noqa: E402

torch.set_num_threads(1)  # as test_torch.py: the engine's host threads need the other core

DENSE = dict(topk_ratio=1.0, update_interval=1)  # every channel on the device, every step: AdamW


def _close(a_params, b_params, rtol=1e-5, atol=1e-6):
    for a, b in zip(a_params, b_params):
        torch.testing.assert_close(a, b, rtol=rtol, atol=atol)


# ---- LoRA, plain torch --------------------------------------------------------------------------


class _LoRALinear(torch.nn.Module):
    """A frozen nn.Linear plus a trainable low-rank update B @ A (B starts at zero)."""

    def __init__(self, base: torch.nn.Linear, r: int = 4):
        super().__init__()
        self.base = base.requires_grad_(False)
        self.A = torch.nn.Parameter(torch.randn(r, base.in_features) / base.in_features**0.5)
        self.B = torch.nn.Parameter(torch.zeros(base.out_features, r))

    def forward(self, x):
        return self.base(x) + x @ self.A.t() @ self.B.t()


def _lora_model(seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(_LoRALinear(torch.nn.Linear(24, 48)), torch.nn.GELU(),
                               _LoRALinear(torch.nn.Linear(48, 8)))


def test_lora_adapters_on_a_frozen_base():
    g = torch.Generator().manual_seed(3)
    x, y = torch.randn(64, 24, generator=g), torch.randn(64, 8, generator=g)
    m1 = _lora_model()
    m2, m3 = copy.deepcopy(m1), copy.deepcopy(m1)
    base = {n: p.detach().clone() for n, p in m1.named_parameters() if not p.requires_grad}
    o1 = ZenFlowAdamW.from_module(m1, lr=1e-2, weight_decay=0.05, **DENSE)
    o2 = torch.optim.AdamW([p for p in m2.parameters() if p.requires_grad], lr=1e-2, weight_decay=0.05)
    o3 = ZenFlowAdamW.from_module(m3, lr=1e-2, weight_decay=0.05, topk_ratio=0.25, update_interval=2)
    assert o1.engine.param_count == 4  # the adapters only: no state for the frozen base
    losses = []
    for s in range(20):
        for o, m in ((o1, m1), (o2, m2), (o3, m3)):
            o.zero_grad()
            loss = torch.nn.functional.mse_loss(m(x), y)
            loss.backward()
            o.step()
            if o is o3:
                losses.append(loss.item())
    o1.flush(), o3.flush()
    _close(m1.parameters(), m2.parameters())
    for m in (m1, m3):
        for n, p in m.named_parameters():
            if n in base:
                assert torch.equal(p, base[n]) and p.grad is None, n
    assert losses[-1] < 0.9 * losses[0]  # ZenFlow mode trains the adapters
    assert [o3.engine.settings(i)["name"] for i in range(2)] == ["0.A", "0.B"]


# ---- peft on GPT-2 ------------------------------------------------------------------------------


def _gpt2(seed=0, **kw):
    transformers = pytest.importorskip("transformers")
    cfg = transformers.GPT2Config(vocab_size=48, n_positions=16, n_embd=32, n_layer=2, n_head=4, resid_pdrop=0.0,
                                  embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0, eos_token_id=0, **kw)
    torch.manual_seed(seed)
    return transformers.GPT2LMHeadModel(cfg)


def _markov(n, seq=16, vocab=48, seed=0, chain=5):
    path = pathlib.Path(__file__).resolve().parents[2] / "examples" / "torch_finetune.py"
    spec = importlib.util.spec_from_file_location("torch_finetune", path)
    ex = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ex)
    return ex.markov_data(n, seq - 1, vocab, chain_seed=chain, seed=seed)


def test_peft_lora_on_gpt2_conv1d():
    peft = pytest.importorskip("peft")
    data = _markov(32)
    models = []
    for _ in range(2):
        lora = peft.LoraConfig(r=4, lora_alpha=8, target_modules=["c_attn", "c_proj"], fan_in_fan_out=True,
                               lora_dropout=0.0)
        models.append(peft.get_peft_model(_gpt2(), lora))
    m1, m2 = models
    base = {n: p.detach().clone() for n, p in m1.named_parameters() if not p.requires_grad}
    o1 = ZenFlowAdamW.from_module(m1, lr=5e-3, **DENSE)
    o2 = torch.optim.AdamW([p for p in m2.parameters() if p.requires_grad], lr=5e-3)
    for s in range(8):
        for o, m in ((o1, m1), (o2, m2)):
            o.zero_grad()
            m(input_ids=data, labels=data).loss.backward()
            o.step()
    o1.flush()
    _close(m1.parameters(), m2.parameters())
    for n, p in m1.named_parameters():
        if n in base:
            assert torch.equal(p, base[n]), n


def test_channel_dims_of_gpt2_select_input_features():
    m = _gpt2()
    dims = {n: channel_dims_of(m).get(p) for n, p in m.named_parameters()}
    assert dims["transformer.h.0.attn.c_attn.weight"] == 0  # Conv1D [in, out]: rows are the inputs
    assert dims["transformer.h.0.mlp.c_proj.weight"] == 0
    assert dims["transformer.wte.weight"] == 1  # the embedding, tied to lm_head (an nn.Linear [out, in])
    assert dims["transformer.h.0.ln_1.weight"] is None  # a vector


# ---- the Hugging Face Trainer -------------------------------------------------------------------


class _Tokens(torch.utils.data.Dataset):
    def __init__(self, data):
        self.data = data

    def __len__(self):
        return len(self.data)

    def __getitem__(self, i):
        return {"input_ids": self.data[i], "labels": self.data[i]}


_pretrained = {}


def _pretrained_gpt2():
    """A tiny GPT-2 (from a config, no download) pretrained with AdamW on one Markov chain: the
    fine-tuning below starts from it, as ZenFlow's users do."""
    if not _pretrained:
        model = _gpt2(initializer_range=0.2)
        opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
        data = _markov(512, seed=3, chain=7)
        for s in range(60):
            opt.zero_grad()
            batch = data[(s * 32) % 512:][:32]
            model(input_ids=batch, labels=batch).loss.backward()
            opt.step()
        _pretrained["state"] = copy.deepcopy(model.state_dict())
    model = _gpt2(initializer_range=0.2)
    model.load_state_dict(_pretrained["state"])
    return model


def _trainer_run(tmp_path, optimizer, steps=60, **args):
    """The pretrained tiny GPT-2 fine-tuned on another chain by the Trainer with its default
    TrainingArguments but for the run's length, batch size and lr: max_grad_norm 1.0, linear
    decay, weight decay 0, model.zero_grad() after each step. `optimizer`: None (the Trainer's
    default AdamW) or ZenFlowAdamW's keyword arguments. Returns (model, eval loss, zenflow
    warnings, the optimizer)."""
    transformers = pytest.importorskip("transformers")
    model = _pretrained_gpt2()
    kw = dict(output_dir=str(tmp_path), max_steps=steps, per_device_train_batch_size=16, learning_rate=3e-3,
              report_to="none", use_cpu=True, save_strategy="no", disable_tqdm=True, logging_strategy="no")
    kw.update(args)
    targs = transformers.TrainingArguments(**kw)
    extra = {}
    if optimizer is not None:
        extra["optimizer_cls_and_kwargs"] = (
            ZenFlowAdamW, dict(lr=targs.learning_rate, channel_dims=channel_dims_of(model), **optimizer))
    trainer = transformers.Trainer(model=model, args=targs, train_dataset=_Tokens(_markov(256, seed=1)),
                                   eval_dataset=_Tokens(_markov(128, seed=2)), **extra)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.train()
        opt = trainer.optimizer.optimizer if hasattr(trainer.optimizer, "optimizer") else trainer.optimizer
        if isinstance(opt, ZenFlowAdamW):
            opt.flush()
        loss = trainer.evaluate()["eval_loss"]
    ours = [str(w.message) for w in caught if "zenflow" in str(w.message).lower()]
    return model, loss, ours, opt


def test_trainer_with_default_arguments(tmp_path):
    """Trainer + ZenFlowAdamW at ratio 1 and windows of 1 gives Trainer + AdamW's weights; with
    zenflow's defaults (the top 10% of the channels on the device, Zen-auto) its eval loss is
    within 2% of AdamW's; the Trainer's clipping (max_grad_norm, applied through clip_grad_norm_)
    is the engine's gradient_clipping, bit for bit; zenflow warns about none of it."""
    _, ref_loss, _, _ = _trainer_run(tmp_path / "adamw", None, steps=120)
    _, zen_loss, w1, opt = _trainer_run(tmp_path / "zen", {}, steps=120)
    assert isinstance(opt, ZenFlowAdamW) and opt.engine.steps == 120 and opt.stats().selections > 0
    assert zen_loss <= 1.02 * ref_loss, (zen_loss, ref_loss)
    ref, _, _, _ = _trainer_run(tmp_path / "adamw40", None, steps=40)
    dense, _, w2, _ = _trainer_run(tmp_path / "dense", DENSE, steps=40)
    for (name, a), b in zip(dense.named_parameters(), ref.parameters()):
        if name.endswith("attn.c_attn.bias"):
            # Its key third has a zero gradient in exact arithmetic (softmax ignores a shift of
            # every key): both optimizers step on rounding noise there, Adam-normalized to ~lr.
            _close([a[:32], a[64:]], [b[:32], b[64:]], rtol=1e-4, atol=1e-5)
            _close([a[32:64]], [b[32:64]], rtol=0, atol=40 * 3e-3)
        else:
            _close([a], [b], rtol=1e-4, atol=1e-5)
    assert not w1 and not w2, w1 + w2
    # Clipping that bites (the gradient norms here are ~0.3-0.7): the Trainer's clip_grad_norm_
    # against the engine's own gradient_clipping with the Trainer's clipping off.
    zen = dict(update_interval=2, select_interval=8, select_strategy="step")
    by_trainer, _, _, _ = _trainer_run(tmp_path / "clip1", zen, steps=20, max_grad_norm=0.2)
    by_engine, _, _, _ = _trainer_run(tmp_path / "clip2", dict(zen, gradient_clipping=0.2), steps=20,
                                      max_grad_norm=0.0)
    unclipped, _, _, _ = _trainer_run(tmp_path / "clip3", zen, steps=20, max_grad_norm=0.0)
    for a, b in zip(by_trainer.parameters(), by_engine.parameters()):
        assert torch.equal(a, b)
    assert any(not torch.equal(a, b) for a, b in zip(by_trainer.parameters(), unclipped.parameters()))


# ---- bf16 autocast ------------------------------------------------------------------------------


def test_bf16_autocast_matches_adamw():
    g = torch.Generator().manual_seed(4)
    x, y = torch.randn(64, 16, generator=g), torch.randn(64, 8, generator=g)
    torch.manual_seed(0)
    m1 = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 8))
    m2 = copy.deepcopy(m1)
    o1 = ZenFlowAdamW(m1.parameters(), lr=1e-2, **DENSE)
    o2 = torch.optim.AdamW(m2.parameters(), lr=1e-2)
    for _ in range(10):
        for o, m in ((o1, m1), (o2, m2)):
            o.zero_grad()
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = torch.nn.functional.mse_loss(m(x).float(), y)
            loss.backward()
            o.step()
    o1.flush()
    _close(m1.parameters(), m2.parameters())


# ---- DistributedDataParallel over gloo ----------------------------------------------------------

_DDP_OPTS = dict(lr=1e-2, topk_ratio=0.25, update_interval=2, select_interval=4, select_strategy="step",
                 full_warm_up_rounds=1)


def _ddp_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 8))


def _ddp_batches(steps=10):
    g = torch.Generator().manual_seed(6)
    return [(torch.randn(32, 16, generator=g), torch.randn(32, 8, generator=g)) for _ in range(steps)]


def _ddp_worker(rank, port, out):
    torch.set_num_threads(1)
    torch.distributed.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    try:
        for bucket_view in (False, True):  # DDP writes the averages into .grad, or makes .grad its bucket
            model = torch.nn.parallel.DistributedDataParallel(_ddp_model(), gradient_as_bucket_view=bucket_view)
            opt = ZenFlowAdamW(model.parameters(), **_DDP_OPTS)
            for x, y in _ddp_batches():
                half = slice(16 * rank, 16 * rank + 16)
                opt.zero_grad()
                torch.nn.functional.mse_loss(model(x[half]), y[half]).backward()
                opt.step()
            opt.flush()
            torch.save([p.detach().clone() for p in model.parameters()],
                       os.path.join(out, f"rank{rank}_{int(bucket_view)}.pt"))
    finally:
        torch.distributed.destroy_process_group()


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_ddp_over_gloo_steps_on_the_averaged_gradients(tmp_path):
    """Two processes, each half of every batch: both ranks end bit-identical to one process whose
    engine is fed the two halves' gradients averaged as DDP averages them ((g0 + g1) / 2), with
    gradient_as_bucket_view off and on. (ZenFlowAdamW announces no gradient from its hooks under
    torch.distributed: DDP averages after them.)"""
    if not torch.distributed.is_available():
        pytest.skip("torch.distributed is not available")
    torch.multiprocessing.spawn(_ddp_worker, args=(_free_port(), str(tmp_path)), nprocs=2)
    ranks = [torch.load(tmp_path / f"rank{r}_{v}.pt") for r in (0, 1) for v in (0, 1)]
    model = _ddp_model()
    twin = copy.deepcopy(model)
    opt = ZenFlowAdamW(model.parameters(), **_DDP_OPTS)
    for x, y in _ddp_batches():
        grads = []
        for half in (slice(0, 16), slice(16, 32)):
            twin.load_state_dict(model.state_dict())
            twin.zero_grad()
            torch.nn.functional.mse_loss(twin(x[half]), y[half]).backward()
            grads.append([p.grad.clone() for p in twin.parameters()])
        opt.zero_grad()
        for p, g0, g1 in zip(model.parameters(), *grads):
            p.grad = (g0 + g1) / 2
        opt.step()
    opt.flush()
    for i, weights in enumerate(ranks):
        for a, b in zip(weights, model.parameters()):
            assert torch.equal(a, b), f"rank {i // 2}, gradient_as_bucket_view={bool(i % 2)}"
