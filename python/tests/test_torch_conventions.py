"""zenflow.torch.ZenFlowAdamW under torch's conventions (issue 42): frozen parameters, a step not
taken, GradScaler, clip_grad_norm_, the emulated backend's stream contract, and the torch.optim
surface (keys, groups, names, state_dict, repr, the channel axis). Each numbered finding of the
issue has its test here; the references are torch.optim.AdamW, or the same run without the
feature (an unscaled run for GradScaler, the engine's own gradient_clipping for clip_grad_norm_,
the host backend for the emulated one), compared bit for bit where the arithmetic is the same."""
import copy
import math
import warnings

import pytest

torch = pytest.importorskip("torch")
from zenflow.torch import ZenFlowAdamW  # noqa: E402

import torch_helpers  # noqa: E402

torch.set_num_threads(1)  # as test_torch.py: the engine's host threads need the other core

# ZenFlow mode with the host part active from step 2 on: a quarter of the channels on the device,
# windows of 2 steps, a re-selection every 4 (the early gradient stream of grad_ready() is on
# from the first step after a selection).
DENSE = dict(topk_ratio=1.0, update_interval=1)  # every channel on the device, every step: AdamW
ZEN = dict(topk_ratio=0.25, update_interval=2, select_interval=4, select_strategy="step", full_warm_up_rounds=1)


_mlp = torch_helpers.mlp
_data = torch_helpers.data


def _loss(m, x, y):
    return torch.nn.functional.mse_loss(m(x), y)


def _weights(m):
    return [p.detach().clone() for p in m.parameters()]


def _assert_bits(a, b):
    for i, (u, v) in enumerate(zip(a, b)):
        assert torch.equal(u, v), f"tensor {i} differs by {(u - v).abs().max().item()}"


# ---- 1. frozen parameters ---------------------------------------------------------------------


@pytest.mark.parametrize("announce", [True, False])
def test_frozen_parameters_are_skipped_as_adamw_does(announce):
    x, y = _data()
    m1 = _mlp()
    m1[0].weight.requires_grad_(False)
    m1[2].bias.requires_grad_(False)
    m2 = copy.deepcopy(m1)
    frozen = [p.detach().clone() for p in m1.parameters() if not p.requires_grad]
    o1 = ZenFlowAdamW(m1.parameters(), lr=1e-2, weight_decay=0.1, announce=announce, topk_ratio=1.0,
                      update_interval=1)
    o2 = torch.optim.AdamW(m2.parameters(), lr=1e-2, weight_decay=0.1)
    for o, m in ((o1, m1), (o2, m2)):
        for _ in range(6):
            o.zero_grad()
            _loss(m, x, y).backward()
            o.step()
    o1.flush()
    _assert_bits([p for p in m1.parameters() if not p.requires_grad], frozen)
    assert all(p.grad is None for p in m1.parameters() if not p.requires_grad)
    for a, b in zip(m1.parameters(), m2.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_a_frozen_parameter_that_gets_a_gradient_later_is_refused_by_name():
    x, y = _data()
    m = _mlp()
    m[0].weight.requires_grad_(False)
    o = ZenFlowAdamW(m.named_parameters(), lr=1e-2, **ZEN)
    o.zero_grad()
    _loss(m, x, y).backward()
    o.step()
    m[0].weight.requires_grad_(True)  # unfrozen: the engine holds no state for it
    before = _weights(m)
    o.zero_grad()
    _loss(m, x, y).backward()
    with pytest.raises(ValueError, match="'0.weight'.*frozen"):
        o.step()
    _assert_bits(_weights(m), before)


def test_a_parameter_without_gradient_is_not_stepped_as_adamw():
    """A branch used on some steps only: its weights, moments and step counts change only on the
    steps it had a gradient (torch.optim.AdamW's rule), at ratio 1 and in offload_sync."""
    torch.manual_seed(0)

    class Branchy(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a = torch.nn.Linear(8, 8)
            self.b = torch.nn.Linear(8, 8)

        def forward(self, x, use_b):
            return self.b(self.a(x)) if use_b else self.a(x)

    x = torch.randn(4, 8)
    for mode in ("gpu_adamw", "offload_sync", "zenflow"):
        m1 = Branchy()
        m2 = copy.deepcopy(m1)
        # fp32 host moments: AdamW's arithmetic on the host channels (offload_sync keeps them all there)
        o1 = ZenFlowAdamW(m1.parameters(), lr=1e-2, weight_decay=0.1, mode=mode, topk_ratio=1.0, update_interval=1,
                          host_moments="fp32")
        o2 = torch.optim.AdamW(m2.parameters(), lr=1e-2, weight_decay=0.1)
        for s in range(7):
            for o, m in ((o1, m1), (o2, m2)):
                o.zero_grad()
                m(x, use_b=s in (1, 2, 5)).square().sum().backward()
                o.step()
        o1.flush()
        for a, b in zip(m1.parameters(), m2.parameters()):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=lambda s: f"{mode}: {s}")
        st = o1.state_dict()["state"]
        assert st[2]["step"].item() == 3 and st[0]["step"].item() == 7, mode  # b.weight, a.weight


# ---- 2. a step not taken ----------------------------------------------------------------------


@pytest.mark.parametrize("set_to_none", [True, False])
def test_a_step_not_taken_leaves_everything_as_it_was(set_to_none):
    """backward(); zero_grad(); backward(); step(): the first backward (a batch the loop skipped)
    must leave no trace; the hooks had announced its gradients to the engine already."""
    x, y = _data()
    x2, y2 = _data(seed=7)
    runs = []
    for skip_batches in (False, True):
        m = _mlp()
        o = ZenFlowAdamW(m.parameters(), lr=1e-2, **ZEN)
        for s in range(11):
            o.zero_grad(set_to_none=set_to_none)
            if skip_batches and s % 3 == 1:
                _loss(m, x2, y2).backward()  # this batch is dropped
                o.zero_grad(set_to_none=set_to_none)
            _loss(m, x + 0.01 * s, y).backward()
            o.step()
        o.flush()
        runs.append((_weights(m), o.engine.steps, o.stats().skipped_steps, copy.deepcopy(o.state_dict()["state"])))
    _assert_bits(runs[0][0], runs[1][0])
    assert runs[0][1:3] == runs[1][1:3] == (11, 0)
    for k in runs[0][3]:
        for key in ("step", "exp_avg", "exp_avg_sq"):
            assert torch.equal(runs[0][3][k][key], runs[1][3][k][key]), (k, key)


def test_a_dropped_batch_through_another_branch_leaves_no_trace():
    """The dropped batch runs a branch the kept one does not: that branch's gradients reached the
    engine from the hooks, its .grad is None at step(); the next kept batch uses the branch (in the
    same ZenFlow window), so a stale gradient would be averaged in."""
    x, y = _data()
    torch.manual_seed(0)
    trunk, branch = torch.nn.Linear(16, 8), torch.nn.Linear(8, 8)
    runs = []
    for drop in (False, True):
        m = torch.nn.ModuleList([copy.deepcopy(trunk), copy.deepcopy(branch)])
        o = ZenFlowAdamW(m.parameters(), lr=1e-2, **ZEN)
        for s in range(11):
            o.zero_grad()
            if drop and s % 3 == 1:
                torch.nn.functional.mse_loss(m[1](m[0](x)), y).backward()  # through the branch, dropped
                o.zero_grad()
            h = m[0](x + 0.01 * s)
            torch.nn.functional.mse_loss(m[1](h) if s % 3 == 2 else h, y).backward()
            o.step()
        o.flush()
        runs.append(_weights(m))
    _assert_bits(runs[0], runs[1])


# ---- 3. GradScaler ----------------------------------------------------------------------------


def _amp_run(kind, inf_steps, clip=None, steps=12):
    """`kind`: "plain" (no scaler; an inf step is a NaN gradient the engine skips itself),
    "scaler" (GradScaler, the optimizer's own AMP route) or "unscale" (scaler.unscale_ first)."""
    x, y = _data()
    m = _mlp()
    o = ZenFlowAdamW(m.parameters(), lr=1e-2, **ZEN)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**12, growth_interval=1000) if kind != "plain" else None
    norms = []
    for s in range(steps):
        o.zero_grad()
        loss = _loss(m, x + 0.01 * s, y)
        if s in inf_steps:
            loss = loss * (math.inf if scaler is not None else math.nan)
        if scaler is None:
            loss.backward()
            if clip is not None:
                norms.append(torch.nn.utils.clip_grad_norm_(m.parameters(), clip))
            o.step()
            continue
        scaler.scale(loss).backward()
        if kind == "unscale":
            scaler.unscale_(o)
            if clip is not None:
                norms.append(torch.nn.utils.clip_grad_norm_(m.parameters(), clip))
        scaler.step(o)
        scaler.update()
    o.flush()
    return _weights(m), norms, scaler, o


@pytest.mark.parametrize("inf_steps", [(), (3, 8)])
def test_grad_scaler_equals_the_unscaled_run_bit_for_bit(inf_steps):
    plain, _, _, po = _amp_run("plain", inf_steps)
    for kind in ("scaler", "unscale"):
        w, _, scaler, o = _amp_run(kind, inf_steps)
        _assert_bits(w, plain)
        assert scaler.get_scale() == 2.0**12 * 0.5 ** len(inf_steps)  # the skips reached the scaler
        assert o.stats().skipped_steps == po.stats().skipped_steps == len(inf_steps)


def test_grad_scaler_with_unscale_and_clipping_equals_the_unscaled_run():
    inf_steps = (5,)
    plain, plain_norms, _, _ = _amp_run("plain", inf_steps, clip=0.05)
    w, norms, _, _ = _amp_run("unscale", inf_steps, clip=0.05)
    _assert_bits(w, plain)
    for s, (a, b) in enumerate(zip(norms, plain_norms)):  # the true (unscaled) total norm
        if s not in inf_steps:
            torch.testing.assert_close(a, b, rtol=1e-6, atol=0)


# ---- 4. clip_grad_norm_ -----------------------------------------------------------------------


def test_clip_grad_norm_is_the_engines_clipping_of_device_and_host_parts():
    x, y = _data()
    runs = []
    for how in ("config", "clip_grad_norm_"):
        m = _mlp()
        extra = dict(gradient_clipping=0.05) if how == "config" else {}
        o = ZenFlowAdamW(m.parameters(), lr=1e-2, **ZEN, **extra)
        norms = []
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # no warning: clip_grad_norm_ is supported
            for s in range(12):
                o.zero_grad()
                _loss(m, x + 0.01 * s, y).backward()
                if how == "clip_grad_norm_":
                    expect = torch.nn.utils.get_total_norm([p.grad for p in m.parameters()])
                    norms.append((torch.nn.utils.clip_grad_norm_(m.parameters(), 0.05), expect))
                o.step()
        o.flush()
        runs.append(_weights(m))
    _assert_bits(runs[0], runs[1])
    for got, expect in norms:
        torch.testing.assert_close(got, expect, rtol=1e-6, atol=0)
        assert got > 0.05  # it did clip


def test_clip_grad_norm_matches_adamw_at_ratio_one_and_inf_only_reports():
    x, y = _data()
    m1, m3 = _mlp(), _mlp()
    m2 = copy.deepcopy(m1)
    o1 = ZenFlowAdamW(m1.parameters(), lr=1e-2, topk_ratio=1.0, update_interval=1)
    o2 = torch.optim.AdamW(m2.parameters(), lr=1e-2)
    o3 = ZenFlowAdamW(m3.parameters(), lr=1e-2, **ZEN)
    m4 = copy.deepcopy(m3)
    o4 = ZenFlowAdamW(m4.parameters(), lr=1e-2, **ZEN)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for s in range(10):
            for o, m, clip in ((o1, m1, 0.1), (o2, m2, 0.1), (o3, m3, math.inf), (o4, m4, None)):
                o.zero_grad()
                _loss(m, x + 0.01 * s, y).backward()
                if clip is not None:
                    n = torch.nn.utils.clip_grad_norm_(m.parameters(), clip)
                    assert math.isfinite(n.item()) and n.item() > 0
                o.step()
    o1.flush(), o3.flush(), o4.flush()
    for a, b in zip(m1.parameters(), m2.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    _assert_bits(_weights(m3), _weights(m4))  # inf: the norm only, nothing clipped


# ---- 5. the emulated backend ------------------------------------------------------------------


@pytest.mark.parametrize("jitter_us", [0, 300])
def test_emulated_backend_is_bit_identical_to_the_host_backend(jitter_us):
    """The emulated device runs the engine's streams on threads (and here delays one operation in
    four by up to `jitter_us`): step() must leave the weights written before the next forward."""
    x, y = _data()
    runs = []
    for backend in ("host", "emulated", "emulated"):
        m = _mlp()
        extra = dict(emulated_timing=dict(max_jitter_us=jitter_us)) if backend == "emulated" and jitter_us else {}
        o = ZenFlowAdamW(m.parameters(), lr=1e-2, backend=backend, **ZEN, **extra)
        for s in range(12):
            o.zero_grad()
            _loss(m, x + 0.01 * s, y).backward()
            o.step()
        o.flush()
        runs.append(_weights(m))
    _assert_bits(runs[0], runs[1])
    _assert_bits(runs[0], runs[2])


# ---- 6. the torch.optim surface ---------------------------------------------------------------


def test_adamw_keys_are_accepted_or_refused_by_name():
    m = _mlp()
    o = ZenFlowAdamW(m.parameters(), lr=1e-3, foreach=True, fused=False, capturable=False, differentiable=False)
    g = o.param_groups[0]
    assert g["amsgrad"] is False and g["maximize"] is False and g["foreach"] is True
    for key in ("amsgrad", "maximize"):
        with pytest.raises(ValueError, match=f"'{key}'"):
            ZenFlowAdamW(m.parameters(), **{key: True})
    assert all(p.grad is None for p in m.parameters())  # nothing was changed by the refusals


def test_a_scheduler_that_changes_betas_is_refused_by_name_and_changes_nothing():
    """OneCycleLR(cycle_momentum=True) moves betas[0] every step; the engine's betas are fixed."""
    x, y = _data()
    m = _mlp()
    o = ZenFlowAdamW(m.parameters(), lr=1e-2, **ZEN)
    torch.optim.lr_scheduler.OneCycleLR(o, max_lr=1e-2, total_steps=10, cycle_momentum=True)
    o.zero_grad()
    _loss(m, x, y).backward()
    before = _weights(m)
    with pytest.raises(ValueError, match=r"param_groups\[0\]\['betas'\]"):
        o.step()
    _assert_bits(_weights(m), before)
    assert o.engine.steps == 0


def test_add_param_group_and_groups_whose_lr_ratio_changes_every_step():
    """Two groups under CosineAnnealingLR(eta_min > 0): their ratio changes every step (a per-
    parameter lr scale in the engine); a third group added before the first step."""
    x, y = _data()
    m1 = _mlp()
    m2 = copy.deepcopy(m1)
    opts = []
    for m, cls, kw in ((m1, ZenFlowAdamW, dict(topk_ratio=1.0, update_interval=1)), (m2, torch.optim.AdamW, {})):
        o = cls([{"params": [m[0].weight, m[0].bias]}, {"params": [m[3].weight], "lr": 3e-3}], lr=1e-2, **kw)
        o.add_param_group({"params": [m[2].weight, m[2].bias, m[3].bias], "lr": 5e-3, "weight_decay": 0.0})
        opts.append((o, torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=8, eta_min=1e-3), m))
    for s in range(10):
        for o, sched, m in opts:
            o.zero_grad()
            _loss(m, x, y).backward()
            o.step()
            sched.step()
    opts[0][0].flush()
    for a, b in zip(m1.parameters(), m2.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_add_param_group_after_steps_unfreezes_layers_as_adamw_does():
    """Progressive unfreezing (torch's add_param_group use): the first layer frozen, then added as
    a group at step 4; clip_grad_norm_ over every parameter clips with one coefficient across the
    optimizer's two engines; state_dict and load_state_dict carry both."""
    x, y = _data()
    m1 = _mlp()
    m2 = copy.deepcopy(m1)
    runs = []
    for m, cls, kw in ((m1, ZenFlowAdamW, DENSE), (m2, torch.optim.AdamW, {})):
        for p in m[0].parameters():
            p.requires_grad_(False)
        o = cls([p for p in m.parameters() if p.requires_grad], lr=1e-2, **kw)
        runs.append((o, m))
    norms = ([], [])
    for s in range(10):
        for i, (o, m) in enumerate(runs):
            if s == 4:
                for p in m[0].parameters():
                    p.requires_grad_(True)
                o.add_param_group({"params": list(m[0].parameters()), "lr": 5e-3})
            o.zero_grad()
            _loss(m, x + 0.01 * s, y).backward()
            norms[i].append(torch.nn.utils.clip_grad_norm_(m.parameters(), 0.05))
            o.step()
    o1 = runs[0][0]
    o1.flush()
    assert len(o1.engines) == 2 and o1.engines[1].steps == 6
    for a, b in zip(norms[0], norms[1]):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=0)
    for a, b in zip(m1.parameters(), m2.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    sd = copy.deepcopy(o1.state_dict())
    assert isinstance(sd["zenflow"], list) and len(sd["zenflow"]) == 2
    assert sorted(sd["state"]) == sorted(runs[1][0].state_dict()["state"])


def test_state_dict_has_torchs_per_parameter_keys_and_resumes():
    x, y = _data()
    m1 = _mlp()
    m2 = copy.deepcopy(m1)
    o1 = ZenFlowAdamW(m1.parameters(), lr=1e-2, topk_ratio=1.0, update_interval=1)
    o2 = torch.optim.AdamW(m2.parameters(), lr=1e-2)
    for o, m in ((o1, m1), (o2, m2)):
        for _ in range(5):
            o.zero_grad()
            _loss(m, x, y).backward()
            o.step()
    s1, s2 = o1.state_dict(), o2.state_dict()
    assert isinstance(s1["zenflow"], torch.Tensor) and s1["zenflow"].dtype == torch.uint8
    assert sorted(s1["state"]) == sorted(s2["state"])
    for k in s2["state"]:
        for key in ("step", "exp_avg", "exp_avg_sq"):
            torch.testing.assert_close(s1["state"][k][key].float(), s2["state"][k][key].float(), rtol=1e-5,
                                       atol=1e-7)
    assert [g["params"] for g in s1["param_groups"]] == [g["params"] for g in s2["param_groups"]]


def test_errors_name_the_models_parameters_and_repr_is_torchs():
    m = _mlp()
    o = ZenFlowAdamW(m.named_parameters(), lr=1e-3, weight_decay=0.0)
    text = repr(o)
    assert text.startswith("ZenFlowAdamW (") and "Parameter Group 0" in text and "lr: 0.001" in text
    assert o.engine.settings(4)["name"] == "3.weight"
    m[3].bias.untyped_storage().resize_(0)
    with pytest.raises(RuntimeError, match="'3.bias'"):
        o.step()
    o2 = ZenFlowAdamW.from_module(_mlp(), lr=1e-3)
    assert [o2.engine.settings(i)["name"] for i in range(4)] == ["0.weight", "0.bias", "2.weight", "2.bias"]


class Conv1D(torch.nn.Module):
    """Hugging Face's Conv1D: a Linear whose weight is stored [in, out]."""

    def __init__(self, nf, nx):
        super().__init__()
        self.nf = nf
        self.weight = torch.nn.Parameter(torch.randn(nx, nf) * 0.1)
        self.bias = torch.nn.Parameter(torch.zeros(nf))

    def forward(self, x):
        return torch.addmm(self.bias, x.reshape(-1, x.shape[-1]), self.weight).reshape(*x.shape[:-1], self.nf)


def test_channel_dim_makes_conv1d_select_input_features_like_linear():
    """A Conv1D and an nn.Linear holding the same (transposed) weights select the same channels:
    the input features (from_module's default per module type, or the group key channel_dim)."""
    torch.manual_seed(0)
    lin = torch.nn.Linear(24, 12)
    conv = Conv1D(12, 24)
    with torch.no_grad():
        conv.weight.copy_(lin.weight.t())
        conv.bias.copy_(lin.bias)
    x = torch.randn(16, 24) * torch.linspace(0.1, 3.0, 24)  # input features of distinct weight
    opts = dict(lr=1e-2, topk_ratio=0.25, update_interval=2, select_interval=100, select_strategy="step",
                full_warm_up_rounds=0)
    o_lin = ZenFlowAdamW(lin.parameters(), **opts)
    conv2 = copy.deepcopy(conv)
    o_conv = ZenFlowAdamW.from_module(conv, **opts)
    o_grp = ZenFlowAdamW([{"params": [conv2.weight], "channel_dim": 0}, {"params": [conv2.bias]}], **opts)
    sel = []
    for o, mod in ((o_lin, lin), (o_conv, conv), (o_grp, conv2)):
        o.zero_grad()
        mod(x).square().sum().backward()
        o.step()
        sel.append(o.engine.selected(0).tolist())
    assert len(sel[0]) == 6 and sel[0] == sel[1] == sel[2]
    with pytest.raises(ValueError, match="channel_dim"):
        ZenFlowAdamW([{"params": [copy.deepcopy(conv).weight], "channel_dim": 2}])
