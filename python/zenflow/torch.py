"""``zenflow.torch.ZenFlowAdamW``: the ZenFlow engine as a ``torch.optim.Optimizer``.

It takes what ``torch.optim.AdamW`` takes and behaves as it does under torch's conventions
(docs/python.md has the table): frozen parameters and parameters without a gradient are not
stepped, ``zero_grad()`` and a step not taken leave no trace, GradScaler works through the
optimizer's own AMP route, ``torch.nn.utils.clip_grad_norm_`` clips by the engine's global norm
with one coefficient for the device and host parts, groups may change their learning rates in
any ratio every step.

Each parameter of 2 or more dimensions is a matrix whose channels lie along ``channel_dim``: 1 by
default (the columns of an ``nn.Linear`` weight ``[out, in]``: its input features, the channel
ZenFlow and DeepSpeed's ZenFlow select), 0 for a weight stored ``[in, out]`` (Hugging Face's
``Conv1D``; ``from_module`` and ``channel_dims_of`` choose it per module type). The matrix is
registered in place (the engine's ``strided`` layout when the channels are strided in memory,
``contiguous`` when they are rows): no copy, the weights stay the model's. 1-D and 0-D
parameters are vectors.
"""

from __future__ import annotations

import functools
import math
import os
import tempfile
import threading
import weakref
from typing import Any, Dict, Iterable, List, Mapping, Optional, Union

import numpy as np
import torch

from . import Config, Engine

__all__ = ["ZenFlowAdamW", "channel_dims_of"]

_live: "weakref.WeakSet[ZenFlowAdamW]" = weakref.WeakSet()
_patch_lock = threading.Lock()
_patched = False

# torch.optim.AdamW's keys that the engine has no use for: accepted, kept in the groups, ignored.
_IGNORED_KEYS = ("foreach", "capturable", "differentiable", "fused")


def _owner_of(params: List[torch.Tensor]) -> Optional["ZenFlowAdamW"]:
    """The ZenFlowAdamW that registered any of `params` with its engine (at most one may)."""
    ids = {id(p) for p in params}
    owners = [opt for opt in list(_live) if ids & opt._registered_ids]
    if len(owners) > 1:
        raise ValueError(
            "torch.nn.utils.clip_grad_norm_: the parameters belong to more than one ZenFlowAdamW; each engine "
            "clips by the norm of its own parameters (clip each optimizer's parameters apart)"
        )
    return owners[0] if owners else None


def _install_patches() -> None:
    """Makes torch's clipping and GradScaler.unscale_ go through the engine for a ZenFlowAdamW's
    parameters: the engine may have read a gradient already when either runs (grad_ready hooks),
    so neither may change the gradients; the engine applies the clip coefficient and the loss
    scale to the device and host parts alike inside step(). Other parameters are untouched."""
    global _patched
    with _patch_lock:
        if _patched:
            return
        _patched = True
        import torch.nn.utils as nn_utils
        import torch.nn.utils.clip_grad as clip_mod
        from torch.amp import grad_scaler

        # The clip itself: clip_grad_norm_ calls this module global (also when it was imported
        # before zenflow.torch), and torch.nn.utils.clip_grads_with_norm_ is its public name.
        clip_with_norm = clip_mod._clip_grads_with_norm_

        @functools.wraps(clip_with_norm)
        def _clip_grads_with_norm_(parameters, max_norm, total_norm, foreach=None):
            params = [parameters] if isinstance(parameters, torch.Tensor) else list(parameters)
            opt = _owner_of(params)
            if opt is None:
                return clip_with_norm(params, max_norm, total_norm, foreach)
            opt._take_clip(params, float(max_norm))
            return None

        clip_mod._clip_grads_with_norm_ = _clip_grads_with_norm_
        if hasattr(clip_mod, "clip_grads_with_norm_"):
            clip_mod.clip_grads_with_norm_ = _clip_grads_with_norm_
            nn_utils.clip_grads_with_norm_ = _clip_grads_with_norm_

        # The norm: the true (unscaled) total norm while a GradScaler's unscale_ is pending on
        # the optimizer (its gradients still carry the scale: the engine unscales them).
        clip_norm = clip_mod.clip_grad_norm_

        @functools.wraps(clip_norm)
        def clip_grad_norm_(parameters, max_norm, norm_type=2.0, error_if_nonfinite=False, foreach=None):
            params = [parameters] if isinstance(parameters, torch.Tensor) else list(parameters)
            opt = _owner_of(params)
            if opt is None:
                return clip_norm(params, max_norm, norm_type, error_if_nonfinite, foreach)
            if float(norm_type) != 2.0 and math.isfinite(float(max_norm)):
                raise ValueError(
                    f"torch.nn.utils.clip_grad_norm_: norm_type={norm_type} on ZenFlowAdamW's parameters; the "
                    "engine clips by the L2 norm (norm_type=2; any norm_type with max_norm=inf only reports)"
                )
            total = clip_norm(params, max_norm, norm_type, error_if_nonfinite, foreach)
            return opt._true_norm(total)

        clip_mod.clip_grad_norm_ = clip_grad_norm_
        nn_utils.clip_grad_norm_ = clip_grad_norm_

        original_unscale = grad_scaler.GradScaler.unscale_

        @functools.wraps(original_unscale)
        def unscale_(self, optimizer):
            if isinstance(optimizer, ZenFlowAdamW) and self._enabled:
                return optimizer._amp_unscale(self)
            return original_unscale(self, optimizer)

        grad_scaler.GradScaler.unscale_ = unscale_


def _remove_hooks(handles: list) -> None:
    for h in handles:
        h.remove()


def _stream_of(device: torch.device) -> int:
    return torch.cuda.current_stream(device).cuda_stream if device.type == "cuda" else 0


def channel_dims_of(module: torch.nn.Module) -> Dict[torch.Tensor, int]:
    """The channel axis of every matrix parameter of `module` by the module that holds it: the
    input features. ``nn.Linear`` weight ``[out, in]``: 1; Hugging Face's ``Conv1D`` (a weight
    ``[in, out]`` with ``nf``/``nx``): 0; ``nn.Embedding`` ``[num, dim]``: 1 (its dim, as the
    tied output layer's input features; DeepSpeed's ZenFlow selects dim 1 of every matrix);
    convolutions ``[out, in, *k]``: 1 (the flattened ``in x k`` columns). Others: 1."""
    dims: Dict[torch.Tensor, int] = {}
    for mod in module.modules():
        w = getattr(mod, "weight", None)
        if not isinstance(w, torch.Tensor) or w.dim() < 2 or w in dims:
            continue
        is_conv1d = (type(mod).__name__ == "Conv1D" and hasattr(mod, "nf") and w.dim() == 2
                     and w.shape[1] == getattr(mod, "nf"))
        dims[w] = 0 if is_conv1d else 1
    return dims


class _Param:
    """One parameter of the optimizer: its place, name, channel axis, and (registered) its engine
    id, gradient buffer and how the engine's channel-major state maps back to its shape."""

    __slots__ = ("p", "name", "group", "index", "channel_dim", "eng", "pid", "buf", "ptr", "clean", "rows",
                 "scale", "wd", "announced", "backwards")

    def __init__(self, p, name, group, index, channel_dim):
        self.p, self.name, self.group, self.index, self.channel_dim = p, name, group, index, channel_dim
        self.eng = None  # the engine it is registered with (ZenFlowAdamW._engines)
        self.pid = None  # its id there; None: frozen at construction, not registered
        self.buf = None
        self.ptr = 0
        self.clean = True  # buf holds zeros (zero_grad() zeroed it; no backward wrote it since)
        self.rows = None  # (channels, channel_len) of the engine's view; None: a vector
        self.scale = 1.0  # the lr scale the engine has
        self.wd = 0.0  # the weight decay it was registered with
        self.announced = False  # grad_ready() called this step
        self.backwards = 0  # gradients accumulated since the last step or zero_grad()


class ZenFlowAdamW(torch.optim.Optimizer):
    """AdamW through the ZenFlow engine (docs/python.md).

    Args:
        params: parameters, named parameters, or parameter groups, as for ``torch.optim.AdamW``.
            Parameters with ``requires_grad=False`` are skipped (no state, no buffer). Groups may
            differ in ``lr`` (any ratio, changing every step), ``weight_decay`` (fixed once
            registered) and ``channel_dim``; ``betas`` and ``eps`` are the engine's and must be the
            same in every group.
        lr, betas, eps, weight_decay: as ``torch.optim.AdamW`` (decoupled weight decay).
        amsgrad, maximize: must be False (the engine has neither). foreach, capturable,
            differentiable, fused: accepted and ignored (the engine has its own kernels).
        config: a ``zenflow.Config``, or a DeepSpeed config (dict, JSON path) read with
            ``Config.from_deepspeed``; the arguments above override its optimizer block.
        backend: "host" (CPU tensors, the default for them), "emulated" (CPU tensors, the engine's
            streams as threads) or "cuda" (CUDA tensors, the default for them).
        announce: call ``engine.grad_ready`` from each parameter's post-accumulate-grad hook, so
            that the gradients' device-to-host traffic overlaps the rest of the backward pass
            (off when torch.distributed runs with more than one process: DDP averages the
            gradients after the hooks).
        accumulation_steps: backward passes per optimizer step (gradient accumulation): a
            parameter is announced on its last one (more backward passes are correct, and send
            its gradient again).
        channel_dims: the channel axis per parameter (a dict by parameter or by name), e.g.
            ``channel_dims_of(model)``; a group's ``channel_dim`` key sets it for the group.
        emulated_timing: the emulated device's timing model (backend "emulated"; tests).
        **zenflow_options: any ``zenflow.Config`` key: ``topk_ratio``, ``update_interval``,
            ``select_interval``, ``mode``, ``gradient_clipping``, ``loss_scale``, ...

    ``step()`` returns the closure's loss (as torch's optimizers); the engine's step report is
    ``last_report``. Call ``flush()`` before evaluating or saving the model: in ZenFlow mode the
    host's last window of updates is applied one step late.
    """

    _step_supports_amp_scaling = True  # GradScaler hands step() its scale and found_inf

    def __init__(
        self,
        params: Iterable[Any],
        lr: Union[float, torch.Tensor] = 1e-3,
        betas: tuple = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 1e-2,
        amsgrad: bool = False,
        *,
        maximize: bool = False,
        foreach: Optional[bool] = None,
        capturable: bool = False,
        differentiable: bool = False,
        fused: Optional[bool] = None,
        config: Union[Config, dict, str, os.PathLike, None] = None,
        backend: Optional[str] = None,
        announce: bool = True,
        accumulation_steps: int = 1,
        channel_dims: Optional[Mapping[Any, int]] = None,
        emulated_timing: Optional[Mapping[str, float]] = None,
        **zenflow_options: Any,
    ) -> None:
        lr = float(lr)
        if not (math.isfinite(lr) and lr >= 0):
            raise ValueError(f"ZenFlowAdamW: 'lr' must be a number >= 0, not {lr!r}")
        if len(betas) != 2 or not all(0.0 <= b < 1.0 for b in betas):
            raise ValueError(f"ZenFlowAdamW: 'betas' must be two numbers in [0, 1), not {betas!r}")
        if not eps >= 0:
            raise ValueError(f"ZenFlowAdamW: 'eps' must be >= 0, not {eps!r}")
        if not weight_decay >= 0:
            raise ValueError(f"ZenFlowAdamW: 'weight_decay' must be >= 0, not {weight_decay!r}")
        if not (isinstance(accumulation_steps, int) and accumulation_steps >= 1):
            raise ValueError(f"ZenFlowAdamW: 'accumulation_steps' must be an int >= 1, not {accumulation_steps!r}")
        defaults = dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay, amsgrad=amsgrad,
                        maximize=maximize, foreach=foreach, capturable=capturable, differentiable=differentiable,
                        fused=fused, decoupled_weight_decay=True, channel_dim=None)
        self._params: List[_Param] = []
        super().__init__(params, defaults)  # add_param_group() below sees no engine yet

        # --- everything checked before anything is changed ---
        if config is None:
            cfg = Config()
        elif isinstance(config, Config):
            cfg = config.copy()
        else:
            cfg = Config.from_deepspeed(config)
        cfg.update(**zenflow_options)
        for i, g in enumerate(self.param_groups):
            self._check_group(g, f"param_groups[{i}]")
        g0 = self.param_groups[0]
        cfg.update(lr=lr, betas=tuple(g0["betas"]), eps=float(g0["eps"]), weight_decay=float(weight_decay),
                   decoupled=bool(g0["decoupled_weight_decay"]))
        cfg.validate()
        all_params = [p for g in self.param_groups for p in g["params"]]
        if not all_params:
            raise ValueError("ZenFlowAdamW: 'params' is empty")
        device = all_params[0].device
        if backend is None:
            backend = "cuda" if device.type == "cuda" else "host"
        if backend in ("host", "emulated") and device.type != "cpu":
            raise ValueError(f"ZenFlowAdamW: backend '{backend}' takes CPU tensors, the parameters are on {device}")
        if backend == "cuda" and device.type != "cuda":
            raise ValueError(f"ZenFlowAdamW: backend 'cuda' takes CUDA tensors, the parameters are on {device}")
        self._device = device
        self._channel_dims = dict(channel_dims or {})
        entries = self._entries(self.param_groups, 0)
        if not any(e.p.requires_grad for e in entries):
            raise ValueError("ZenFlowAdamW: every parameter has requires_grad=False: nothing to optimize")

        self._cfg = cfg
        self._backend = backend
        self._emulated_timing = emulated_timing
        self._engines: List[Engine] = []
        self._new_engine()
        self._distributed = (torch.distributed.is_available() and torch.distributed.is_initialized()
                             and torch.distributed.get_world_size() > 1)
        self._announce = announce and not self._distributed
        self._accumulation = accumulation_steps
        self._registered_ids: set = set()
        self._hooks: list = []  # removed when the optimizer goes (the parameters outlive it)
        weakref.finalize(self, _remove_hooks, self._hooks)
        self._max_norm: Optional[float] = None  # clip_grad_norm_'s threshold for the coming step
        self._amp_scale: Optional[torch.Tensor] = None  # GradScaler.unscale_'s scale for the coming step
        self.last_report = None
        self.last_reports: list = []  # every engine's (add_param_group after the first step adds engines)
        self._register(entries)
        _live.add(self)
        _install_patches()

    @classmethod
    def from_module(cls, module: torch.nn.Module, *args: Any, **kwargs: Any) -> "ZenFlowAdamW":
        """The trainable parameters of `module` by name (errors, stats and state name them as the
        module does), each matrix's channel axis by its module type (``channel_dims_of``)."""
        dims = channel_dims_of(module)
        dims.update(kwargs.pop("channel_dims", None) or {})
        return cls(list(module.named_parameters()), *args, channel_dims=dims, **kwargs)

    # ---- registration ---------------------------------------------------------------------------

    def _check_group(self, g: dict, where: str) -> None:
        """Raises ValueError naming the key for what the engine cannot do."""
        for key in ("amsgrad", "maximize"):
            if g.get(key):
                raise ValueError(f"ZenFlowAdamW: {where}: '{key}' is not supported (the engine's AdamW has no {key})")
        if not (isinstance(g["lr"], (int, float, torch.Tensor)) and float(g["lr"]) >= 0):
            raise ValueError(f"ZenFlowAdamW: {where}: 'lr' must be a number >= 0")
        if not g["weight_decay"] >= 0:
            raise ValueError(f"ZenFlowAdamW: {where}: 'weight_decay' must be >= 0")
        if g.get("channel_dim") not in (None, 0, 1):
            raise ValueError(f"ZenFlowAdamW: {where}: 'channel_dim' must be 0 or 1 (or None), not {g['channel_dim']!r}")
        first = self.param_groups[0] if self.param_groups else g
        if tuple(g["betas"]) != tuple(first["betas"]) or g["eps"] != first["eps"]:
            raise ValueError(f"ZenFlowAdamW: {where} has other betas or eps than param_groups[0]; the engine has one "
                             "betas and eps (use one optimizer per setting)")
        if g["decoupled_weight_decay"] != first["decoupled_weight_decay"]:
            raise ValueError(f"ZenFlowAdamW: {where}: 'decoupled_weight_decay' must be the same in every group")

    def _entries(self, groups: List[dict], start: int) -> List[_Param]:
        """The parameters of `groups` (the first at global index `start`), checked, nothing changed."""
        out = []
        k = start
        gi0 = len(self.param_groups) - len(groups)
        for gi, g in enumerate(groups):
            names = g.get("param_names")
            for j, p in enumerate(g["params"]):
                name = names[j] if names else f"param{k}"
                dim = self._channel_dims.get(p, self._channel_dims.get(name, g.get("channel_dim")))
                dim = 1 if dim is None else dim
                if dim not in (0, 1):
                    raise ValueError(f"ZenFlowAdamW: parameter '{name}': 'channel_dim' must be 0 or 1, not {dim!r}")
                e = _Param(p, name, gi0 + gi, k, dim)
                if p.requires_grad:
                    self._check_param(e)
                out.append(e)
                k += 1
        return out

    def _check_param(self, e: _Param) -> None:
        p, name = e.p, e.name
        if p.device != self._device:
            raise ValueError(f"ZenFlowAdamW: parameter '{name}' is on {p.device}, the first one on {self._device}; "
                             "one optimizer takes the parameters of one device")
        if p.dtype not in (torch.float32, torch.float16, torch.bfloat16):
            raise ValueError(f"ZenFlowAdamW: parameter '{name}' has dtype {p.dtype}; the engine takes float32, "
                             "float16 or bfloat16")
        if p.is_sparse or p.layout != torch.strided:
            raise ValueError(f"ZenFlowAdamW: parameter '{name}' is not a dense (strided) tensor")
        if p.numel() == 0:
            raise ValueError(f"ZenFlowAdamW: parameter '{name}' is empty")
        if id(p) in getattr(self, "_registered_ids", ()):
            raise ValueError(f"ZenFlowAdamW: parameter '{name}' is in more than one group")
        self._view_of(p, e)  # raises for a layout the engine cannot take
        if p.grad is not None and (p.grad.shape != p.shape or p.grad.stride() != p.stride()):
            raise ValueError(f"ZenFlowAdamW: parameter '{name}' has a gradient of another shape or strides")

    @staticmethod
    def _view_of(t: torch.Tensor, e: _Param):
        """(the array the engine registers, its layout): a vector, or a matrix whose rows (layout
        "contiguous") or columns ("strided") are the channels along e.channel_dim."""
        name = e.name
        if t.dim() <= 1:
            if t.dim() == 1 and t.stride(0) != 1 and t.numel() > 1:
                raise ValueError(f"ZenFlowAdamW: parameter '{name}' is not contiguous")
            return t.reshape(-1), None
        if t.dim() > 2:
            if not t.is_contiguous():
                raise ValueError(f"ZenFlowAdamW: parameter '{name}' has {t.dim()} dimensions and is not contiguous")
            t = t.view(t.shape[0], -1)
        rows = t if e.channel_dim == 0 else t.t()  # its rows are the channels
        if rows.stride(1) == 1 or rows.shape[1] == 1:
            return rows, "contiguous"
        if rows.stride(0) == 1 or rows.shape[0] == 1:
            return rows.t(), "strided"
        raise ValueError(f"ZenFlowAdamW: parameter '{name}' is not contiguous in either dimension")

    def _new_engine(self) -> Engine:
        """Another engine over the same configuration (add_param_group after the first step: an
        engine takes no parameter once it started)."""
        d = self._device
        self._engines.append(Engine(self._cfg, backend=self._backend, device=d.index if d.type == "cuda" else -1,
                                    emulated_timing=self._emulated_timing))
        return self._engines[-1]

    def _register(self, entries: List[_Param]) -> None:
        """Gives every trainable parameter of `entries` a gradient buffer and registers it with
        the last engine."""
        scales = self._lr_scales()
        engine = self._engines[-1]
        for e in entries:
            self._params.append(e)
            p = e.p
            if not p.requires_grad:
                continue  # frozen: torch.optim.AdamW skips it; no buffer, no state
            if p.grad is None:
                e.buf = torch.zeros_like(p, memory_format=torch.preserve_format)
            else:
                e.buf = p.grad
                e.clean = False
            g = self.param_groups[e.group]
            e.scale = scales[e.group]
            e.wd = float(g["weight_decay"])
            opts = dict(lr_scale=e.scale, weight_decay=e.wd, name=e.name)
            w, layout = self._view_of(p.detach(), e)
            gv, _ = self._view_of(e.buf, e)
            e.eng = engine
            if layout is None:
                e.pid = engine.add_vector(w, gv, **opts)
            else:
                e.pid = engine.add_matrix(w, gv, layout=layout, **opts)
                e.rows = tuple(w.shape) if layout == "contiguous" else (w.shape[1], w.shape[0])
            e.ptr = p.data_ptr()
            self._registered_ids.add(id(p))
            self._hooks.append(p.register_hook(self._pre_hook(e)))
            self._hooks.append(p.register_post_accumulate_grad_hook(self._post_hook(e)))

    # ---- hooks ----------------------------------------------------------------------------------

    def _pre_hook(self, e: _Param):
        ref = weakref.ref(self)

        def hook(grad: torch.Tensor) -> None:
            opt = ref()
            if opt is None:
                return None
            p = e.p
            if e.announced:  # the engine may still be reading the buffer this backward adds into
                opt._order_grad_writes()
            if p.grad is None:  # set_to_none (ours, or model.zero_grad()): autograd adds into the buffer
                if not e.clean:
                    e.buf.zero_()
                p.grad = e.buf
            e.clean = False
            return None

        return hook

    def _post_hook(self, e: _Param):
        ref = weakref.ref(self)

        def hook(p: torch.Tensor) -> None:
            opt = ref()
            if opt is None:
                return
            e.backwards += 1
            if not opt._announce or not e.eng.initialized or e.backwards < opt._accumulation:
                return
            if p.grad is not e.buf:
                return  # replaced by someone else's tensor: step() copies it
            e.eng.grad_ready(e.pid, _stream_of(p.device))
            e.announced = True

        return hook

    def _order_grad_writes(self) -> None:
        """The gradient buffers are written next (zero_grad(), another backward) while grad_ready()'s
        packs may still read them: the writes wait for the packs (CUDA: on the current stream; the
        emulated device: here)."""
        for engine in self._engines:
            if not engine.initialized:
                continue
            if self._backend == "cuda":
                engine.release_gradients(_stream_of(self._device))
            elif self._backend == "emulated":
                engine.release_gradients(0)
                engine.synchronize(0)

    # ---- AMP and clipping (the patched torch functions call these) -------------------------------

    def _amp_unscale(self, scaler) -> None:
        """GradScaler.unscale_(self): the gradients stay scaled (the engine may have read them
        already); the engine unscales the device and host parts alike at step(). torch's own
        NaN/Inf check of the gradients (what GradScaler.update reads) runs as in unscale_."""
        from torch.amp.grad_scaler import OptState

        scaler._check_scale_growth_tracker("unscale_")
        state = scaler._per_optimizer_states[id(self)]
        if state["stage"] is OptState.UNSCALED:
            raise RuntimeError("unscale_() has already been called on this optimizer since the last update().")
        if state["stage"] is OptState.STEPPED:
            raise RuntimeError("unscale_() is being called after step().")
        scaler._check_inf_per_device(self)
        self._amp_scale = scaler._scale
        state["stage"] = OptState.UNSCALED

    def _true_norm(self, total: torch.Tensor) -> torch.Tensor:
        """clip_grad_norm_'s norm of gradients that still carry a pending unscale_'s scale, unscaled
        as GradScaler.unscale_ would have (by the fp32 reciprocal of the scale, computed in fp64)."""
        if self._amp_scale is None:
            return total
        return total * self._amp_scale.double().reciprocal().float().to(total.device)

    def _take_clip(self, params: List[torch.Tensor], max_norm: float) -> None:
        """clip_grad_norm_ over `params` with `max_norm`: the engine clips at the coming step, by
        the global norm of every gradient it steps, so `params` must be exactly those (the ones
        with a gradient), and no other gradient may be clipped by the same call."""
        with_grad = {id(p) for p in params if p.grad is not None}
        for p in params:
            if p.grad is not None and id(p) not in self._registered_ids:
                raise ValueError(
                    "torch.nn.utils.clip_grad_norm_: the parameters mix ZenFlowAdamW's with others; the engine "
                    "clips its own by their global norm (clip the other parameters apart)"
                )
        for e in self._params:
            if e.pid is not None and e.p.grad is not None and id(e.p) not in with_grad:
                raise ValueError(
                    f"torch.nn.utils.clip_grad_norm_: parameter '{e.name}' of the ZenFlowAdamW has a gradient but is "
                    "not in the call; the engine clips by the global norm of all its parameters"
                )
        if math.isnan(max_norm) or max_norm < 0:
            raise ValueError(f"torch.nn.utils.clip_grad_norm_: 'max_norm' must be >= 0, not {max_norm}")
        if math.isinf(max_norm):
            return  # only the norm: nothing to clip
        self._max_norm = max_norm if self._max_norm is None else min(self._max_norm, max_norm)

    # ---- torch.optim.Optimizer ------------------------------------------------------------------

    def add_param_group(self, param_group: dict) -> None:
        """As torch's. Before the first step() the group joins the engine; after it (an engine takes
        no parameter once started) it gets an engine of its own, which steps with the others:
        the same lr schedule and loss scale, and a clip by the norm over every engine (docs/python.md)."""
        if not hasattr(self, "_engines"):
            super().add_param_group(param_group)  # the constructor's groups
            return
        before = len(self.param_groups)
        super().add_param_group(param_group)
        try:
            self._check_group(self.param_groups[-1], f"param_groups[{before}]")
            entries = self._entries(self.param_groups[before:], len(self._params))
        except Exception:
            del self.param_groups[before:]
            raise
        if self._engines[-1].initialized and any(e.p.requires_grad for e in entries):
            self._new_engine()
        self._register(entries)

    @property
    def engine(self) -> Engine:
        """The zenflow.Engine underneath (stats(), state(), selected(), trace calls); the first one
        when add_param_group after the first step added others (``engines``)."""
        return self._engines[0]

    @property
    def engines(self) -> List[Engine]:
        """Every engine: one, and one more for each group added after the first step."""
        return list(self._engines)

    def initialize(self) -> None:
        """Copies the current weights into the engine's fp32 masters. Done by the first step()
        (or load_state_dict()); call it earlier only if the weights are final by then."""
        self._check_storage()
        for engine in self._engines:
            if not engine.initialized and engine.param_count > 0:
                engine.initialize(_stream_of(self._device))
                self._settle(engine, _stream_of(self._device))

    def _lr_scales(self) -> List[float]:
        """Per group, its lr over the reference lr (the largest): the engine's lr scales."""
        lrs = [float(g["lr"]) for g in self.param_groups]
        ref = max(lrs) if lrs else 0.0
        return [float(np.float32(x / ref)) if ref > 0 else 1.0 for x in lrs]

    def _check_storage(self) -> None:
        for e in self._params:
            if e.pid is not None and (e.p.data_ptr() != e.ptr or e.p.untyped_storage().nbytes() == 0):
                raise RuntimeError(
                    f"ZenFlowAdamW: parameter '{e.name}' no longer has the storage it was registered with "
                    "(freed, resized, or its .data replaced); the engine would write freed memory"
                )

    def _check_step(self) -> None:
        """Everything step() needs, checked before anything is changed."""
        c = self._cfg
        for i, g in enumerate(self.param_groups):
            self._check_group(g, f"param_groups[{i}]")
            if not math.isfinite(float(g["lr"])):
                raise ValueError(f"ZenFlowAdamW: param_groups[{i}]['lr'] is {g['lr']}")
            b1, b2 = (float(np.float32(b)) for b in g["betas"])
            if (b1, b2, float(np.float32(g["eps"]))) != (c.beta1, c.beta2, c.eps):
                raise ValueError(
                    f"ZenFlowAdamW: param_groups[{i}]['betas'] or ['eps'] changed after construction (a scheduler "
                    "cycling the momentum, as OneCycleLR(cycle_momentum=True)); the engine's are fixed"
                )
        for e in self._params:
            g = self.param_groups[e.group]
            if e.pid is None:
                if e.p.grad is not None:
                    raise ValueError(
                        f"ZenFlowAdamW: parameter '{e.name}' was frozen (requires_grad=False) when the optimizer was "
                        "created and has a gradient now; the engine holds no state for it (create the optimizer "
                        "again, or add it with add_param_group before the first step)"
                    )
                continue
            if float(g["weight_decay"]) != e.wd:
                raise ValueError(
                    f"ZenFlowAdamW: param_groups[{e.group}]['weight_decay'] changed after construction; the engine "
                    f"fixed it at registration (parameter '{e.name}')"
                )
            grad = e.p.grad
            if grad is not None and grad is not e.buf and (grad.shape != e.p.shape or grad.dtype != e.p.dtype):
                raise ValueError(f"ZenFlowAdamW: parameter '{e.name}' has a gradient of shape {tuple(grad.shape)} "
                                 f"and dtype {grad.dtype}, the parameter {tuple(e.p.shape)} and {e.p.dtype}")
        self._check_storage()

    def _amp_inputs(self):
        """GradScaler's scale and found_inf for this step (its AMP route: `grad_scale` and
        `found_inf` set on the optimizer around step(); a pending unscale_'s scale), as one-element
        float32 tensors in the engine's memory."""
        scale = getattr(self, "grad_scale", None)
        if scale is None:
            scale = self._amp_scale
        found = getattr(self, "found_inf", None)
        out = []
        for name, t in (("grad_scale", scale), ("found_inf", found)):
            if t is None:
                out.append(None)
                continue
            if not isinstance(t, torch.Tensor):
                t = torch.tensor(float(t))
            if t.device != self._device:
                raise ValueError(f"ZenFlowAdamW.step: the GradScaler's {name} is on {t.device}, the parameters on "
                                 f"{self._device} (create the GradScaler for {self._device.type})")
            out.append(t.detach().to(torch.float32).reshape(1).contiguous())
        return out

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        self._check_step()
        loss_scale, found_inf = self._amp_inputs()
        # --- from here on, what the step changes ---
        self.initialize()
        scales = self._lr_scales()
        lrs = [float(g["lr"]) for g in self.param_groups]
        ref = max(lrs)
        stream = _stream_of(self._device)
        no_grad: Dict[int, list] = {id(engine): [] for engine in self._engines}
        for e in self._params:
            if e.pid is None:
                continue
            if scales[e.group] != e.scale:
                e.eng.set_lr_scale(e.pid, scales[e.group])
                e.scale = scales[e.group]
            grad = e.p.grad
            if grad is None:  # no gradient this step: not stepped (its buffer holds zeros)
                if not e.clean:
                    e.buf.zero_()
                    e.clean = True
                no_grad[id(e.eng)].append(e.pid)
            elif grad is not e.buf:  # replaced (a DDP bucket view, a tensor set by hand): into the buffer
                e.buf.copy_(grad)
                e.p.grad = e.buf
                e.clean = False
                if e.announced:  # what the engine read is not this gradient: read it again
                    e.eng.grad_ready(e.pid, stream)
        max_norms = self._max_norms(loss_scale)
        reports = []
        for engine, max_norm in zip(self._engines, max_norms):
            if engine.param_count == 0:
                continue
            reports.append(engine.step(ref if ref > 0 else 0.0, stream, loss_scale=loss_scale, found_inf=found_inf,
                                       max_norm=max_norm, no_grad=no_grad[id(engine)]))
            self._settle(engine, stream)
        self.last_report = reports[0] if reports else None
        self.last_reports = reports
        self._end_of_step()
        return loss

    def _settle(self, engine: Engine, stream: int) -> None:
        """The emulated backend: what `engine` enqueued on `stream` is done. The weights are the
        model's and the next forward (or anything the caller does) reads them on this thread;
        CUDA orders the same work on torch's current stream instead, and the host backend ran it."""
        if self._backend == "emulated":
            engine.synchronize(stream)

    def _max_norms(self, loss_scale: Optional[torch.Tensor]) -> List[Optional[float]]:
        """Each engine's clip threshold for this step. One engine: clip_grad_norm_'s, or None (the
        config's). Several: one coefficient over all of them, as torch clips: engine k gets
        max_norm x (n_k + 1e-6) / (total + 1e-6), n_k the norm of its unscaled gradients, total
        over every engine, so that its own max_norm / (n_k + 1e-6) is max_norm / (total + 1e-6)
        (the norms in fp32 here, in fp64 in the engine: one coefficient within rounding). Reads
        the norms on the host (a sync on CUDA, with several engines and clipping only)."""
        max_norm = self._max_norm
        if len(self._engines) == 1:
            return [max_norm]
        if max_norm is None and self._cfg.gradient_clipping > 0:
            max_norm = float(self._cfg.gradient_clipping)
        if max_norm is None:
            return [None] * len(self._engines)
        norms = []
        for engine in self._engines:
            grads = [e.buf for e in self._params if e.eng is engine]
            n = torch.nn.utils.get_total_norm(grads) if grads else torch.zeros(())
            if loss_scale is not None:
                n = n / loss_scale.to(n.device).reshape(())
            norms.append(float(n))
        total = math.sqrt(sum(n * n for n in norms))
        return [max_norm * (n + 1e-6) / (total + 1e-6) for n in norms]

    def _end_of_step(self) -> None:
        for e in self._params:
            e.announced = False
            e.backwards = 0
        self._max_norm = None
        self._amp_scale = None

    def zero_grad(self, set_to_none: bool = True) -> None:
        """As torch's: every gradient None (``set_to_none``) or zeroed. A registered parameter
        keeps its buffer (zeroed here; backward adds into it again); everything recorded for the
        coming step is reset, so that a step not taken leaves no trace."""
        with torch.no_grad():
            reg = [e for e in self._params if e.pid is not None]
            if any(e.announced for e in reg):
                self._order_grad_writes()
            bufs = []
            for e in reg:
                had = e.p.grad is not None
                if not e.clean:
                    bufs.append(e.buf)
                    e.clean = True
                # torch's rule: None, or zeroed (a replaced gradient's zeros are the buffer's).
                e.p.grad = e.buf if had and not set_to_none else None
            if bufs:
                torch._foreach_zero_(bufs)
            for e in reg:
                if e.announced:  # the engine holds what the hooks announced: it reads zeros now
                    e.eng.grad_ready(e.pid, _stream_of(self._device))
            for e in self._params:
                if e.pid is None and e.p.grad is not None:
                    if set_to_none:
                        e.p.grad = None
                    else:
                        e.p.grad.zero_()
            self._max_norm = None
            self._amp_scale = None
            for e in reg:
                e.backwards = 0

    def flush(self) -> None:
        """Applies every finished host window to the weights (before evaluation or saving)."""
        for engine in self._engines:
            if engine.initialized:
                engine.flush(_stream_of(self._device))
                self._settle(engine, _stream_of(self._device))

    def stats(self):
        """The engine's cumulative counters (zenflow.Stats; the first engine's: ``engines``)."""
        return self._engines[0].stats()

    # ---- state ----------------------------------------------------------------------------------

    def _state_of(self, e: _Param) -> Optional[dict]:
        """torch's per-parameter state keys from the engine's state (step: the most updates any
        channel had; exp_avg, exp_avg_sq: the parameter's shape and dtype float32), or None for a
        parameter never stepped."""
        st = e.eng.state(e.pid, _stream_of(self._device))
        counts = st["counts"]
        if counts.size == 0 or int(counts.max()) == 0:
            return None

        def shaped(a):
            t = torch.from_numpy(a.copy())
            if e.rows is None:
                return t.reshape(e.p.shape)
            t = t.reshape(e.rows)
            if e.channel_dim == 1:
                t = t.t()
            return t.reshape(e.p.shape).contiguous()

        return {"step": torch.tensor(float(counts.max())), "exp_avg": shaped(st["m"]),
                "exp_avg_sq": shaped(st["v"])}

    def state_dict(self) -> dict:
        """torch's layout: ``state`` (per parameter index: ``step``, ``exp_avg``, ``exp_avg_sq``,
        read from the engine, in the parameter's shape) and ``param_groups``; plus ``zenflow``,
        the engine's whole state (its checkpoint file's bytes, a uint8 tensor), which is what
        load_state_dict() restores, bit-exactly, on a model with the same weights."""
        self.initialize()
        blobs = []
        with tempfile.TemporaryDirectory(prefix="zenflow-") as d:
            path = os.path.join(d, "engine.zfckpt")
            for engine in self._engines:
                if engine.param_count == 0:
                    continue
                engine.save(path, _stream_of(self._device))
                with open(path, "rb") as f:
                    blobs.append(torch.frombuffer(bytearray(f.read()), dtype=torch.uint8))
        state = {}
        for e in self._params:
            if e.pid is not None:
                s = self._state_of(e)
                if s is not None:
                    state[e.index] = s
        groups, start = [], 0
        for g in self.param_groups:
            saved = {k: v for k, v in g.items() if k != "params"}
            saved["params"] = list(range(start, start + len(g["params"])))
            start += len(g["params"])
            groups.append(saved)
        return {"state": state, "param_groups": groups, "zenflow": blobs[0] if len(blobs) == 1 else blobs}

    def load_state_dict(self, state_dict: dict) -> None:
        """Restores a state_dict() of a ZenFlowAdamW over the same parameters and configuration
        (the engine's bytes; ``state`` is derived from them). Load the model's weights first: the
        engine's state belongs to the weights it was saved with."""
        zf = state_dict.get("zenflow") if isinstance(state_dict, dict) else None
        if isinstance(zf, dict):  # the first format: {"format": 1, "steps": n, "checkpoint": bytes}
            zf = zf.get("checkpoint")
        if zf is None:
            raise ValueError("ZenFlowAdamW.load_state_dict: 'state_dict' is not a ZenFlowAdamW state_dict "
                             "(it has no 'zenflow' entry)")
        groups = state_dict.get("param_groups", [])
        if len(groups) != len(self.param_groups) or any(
            len(a["params"]) != len(b["params"]) for a, b in zip(groups, self.param_groups)
        ):
            raise ValueError("ZenFlowAdamW.load_state_dict: 'state_dict' has other parameter groups")
        blobs = zf if isinstance(zf, (list, tuple)) else [zf]
        engines = [engine for engine in self._engines if engine.param_count > 0]
        if len(blobs) != len(engines):
            raise ValueError(f"ZenFlowAdamW.load_state_dict: 'state_dict' holds {len(blobs)} engine states, this "
                             f"optimizer has {len(engines)} engines (groups added after the first step)")
        self.initialize()
        with tempfile.TemporaryDirectory(prefix="zenflow-") as d:
            path = os.path.join(d, "engine.zfckpt")
            for engine, blob in zip(engines, blobs):
                with open(path, "wb") as f:
                    f.write(blob.cpu().numpy().tobytes() if isinstance(blob, torch.Tensor) else bytes(blob))
                engine.load(path, _stream_of(self._device))
                self._settle(engine, _stream_of(self._device))
        for g, saved in zip(self.param_groups, groups):
            for key, value in saved.items():
                if key != "params":
                    g[key] = value
        self._end_of_step()

    def __repr__(self) -> str:
        c = self._cfg
        return super().__repr__()[:-1] + (
            f"ZenFlow: mode={c.mode!r}, topk_ratio={c.topk_ratio}, update_interval={c.update_interval}, "
            f"backend={self._backend!r}, {sum(e.pid is not None for e in self._params)} parameters, "
            f"{len(self._engines)} engine(s)\n)"
        )
