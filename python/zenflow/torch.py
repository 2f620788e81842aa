"""``zenflow.torch.ZenFlowAdamW``: the ZenFlow engine as a ``torch.optim.Optimizer``.

Each parameter of 2 or more dimensions is registered as a channel matrix whose channels are its
*columns* (the input features of an ``nn.Linear`` weight ``[out, in]``), the channel ZenFlow and
DeepSpeed's ZenFlow select; PyTorch stores ``[out, in]`` row-major, so a column is strided and the
matrix is registered with the engine's ``strided`` layout (``ld = in``) in place: no copy, no
second buffer, and the weights stay the model's. (A parameter stored transposed, ``[out, in]``
with ``stride(0) == 1``, takes the engine's contiguous fast path instead.) 1-D and 0-D
parameters are vectors. See docs/python.md.
"""

from __future__ import annotations

import functools
import os
import tempfile
import threading
import warnings
import weakref
from typing import Any, Iterable, Optional, Union

import torch

from . import Config, Engine

__all__ = ["ZenFlowAdamW"]

_live: "weakref.WeakSet[ZenFlowAdamW]" = weakref.WeakSet()
_patch_lock = threading.Lock()
_patched = False


def _patch_clip_grad_norm() -> None:
    """Wraps torch.nn.utils.clip_grad_norm_ so that clipping the gradients of a ZenFlowAdamW's
    parameters is detected: the engine may have read them already (grad_ready hooks) and clips
    inside step() itself (``gradient_clipping``)."""
    global _patched
    with _patch_lock:
        if _patched:
            return
        _patched = True
        import torch.nn.utils as nn_utils
        import torch.nn.utils.clip_grad as clip_mod

        original = clip_mod.clip_grad_norm_

        @functools.wraps(original)
        def clip_grad_norm_(parameters, *args, **kwargs):
            if isinstance(parameters, torch.Tensor):
                parameters = [parameters]
            else:
                parameters = list(parameters)
            ids = {id(p) for p in parameters}
            for opt in list(_live):
                if ids & opt._param_ids:
                    opt._clip_detected()
            return original(parameters, *args, **kwargs)

        clip_mod.clip_grad_norm_ = clip_grad_norm_
        nn_utils.clip_grad_norm_ = clip_grad_norm_


def _stream_of(device: torch.device) -> int:
    return torch.cuda.current_stream(device).cuda_stream if device.type == "cuda" else 0


class ZenFlowAdamW(torch.optim.Optimizer):
    """AdamW through the ZenFlow engine (docs/python.md).

    Args:
        params: parameters or parameter groups, as for ``torch.optim.AdamW``. Groups may differ in
            ``lr`` (their ratio must stay fixed: one schedule for all) and ``weight_decay``;
            ``betas`` and ``eps`` are the engine's and must be the same in every group.
        lr, betas, eps, weight_decay: as ``torch.optim.AdamW`` (decoupled weight decay).
        config: a ``zenflow.Config``, or a DeepSpeed config (dict, JSON path) read with
            ``Config.from_deepspeed``; the arguments above override its optimizer block.
        backend: "host" (CPU tensors, the default for them), "emulated" (CPU tensors, the engine's
            streams as threads) or "cuda" (CUDA tensors, the default for them).
        announce: call ``engine.grad_ready`` from each parameter's post-accumulate-grad hook, so
            that the gradients' device-to-host traffic overlaps the rest of the backward pass.
        accumulation_steps: backward passes per optimizer step (gradient accumulation): a
            parameter is announced on its last one.
        **zenflow_options: any ``zenflow.Config`` key: ``topk_ratio``, ``update_interval``,
            ``select_interval``, ``mode``, ``gradient_clipping``, ``loss_scale``, ...

    ``step()`` returns the closure's loss (as torch's optimizers); the engine's step report is
    ``last_report``. Call ``flush()`` before evaluating or saving the model: in ZenFlow mode the
    host's last window of updates is applied one step late.
    """

    def __init__(
        self,
        params: Iterable[Any],
        lr: float = 1e-3,
        betas: tuple = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 1e-2,
        *,
        config: Union[Config, dict, str, os.PathLike, None] = None,
        backend: Optional[str] = None,
        announce: bool = True,
        accumulation_steps: int = 1,
        **zenflow_options: Any,
    ) -> None:
        if not (isinstance(lr, (int, float)) and lr >= 0):
            raise ValueError(f"ZenFlowAdamW: 'lr' must be a number >= 0, not {lr!r}")
        if len(betas) != 2 or not all(0.0 <= b < 1.0 for b in betas):
            raise ValueError(f"ZenFlowAdamW: 'betas' must be two numbers in [0, 1), not {betas!r}")
        if not eps >= 0:
            raise ValueError(f"ZenFlowAdamW: 'eps' must be >= 0, not {eps!r}")
        if not weight_decay >= 0:
            raise ValueError(f"ZenFlowAdamW: 'weight_decay' must be >= 0, not {weight_decay!r}")
        if not (isinstance(accumulation_steps, int) and accumulation_steps >= 1):
            raise ValueError(f"ZenFlowAdamW: 'accumulation_steps' must be an int >= 1, not {accumulation_steps!r}")
        defaults = dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay)
        super().__init__(params, defaults)

        # --- everything checked before anything is changed ---
        if config is None:
            cfg = Config()
        elif isinstance(config, Config):
            cfg = config.copy()
        else:
            cfg = Config.from_deepspeed(config)
        cfg.update(**zenflow_options)
        g0 = self.param_groups[0]
        for i, g in enumerate(self.param_groups):
            if tuple(g["betas"]) != tuple(g0["betas"]) or g["eps"] != g0["eps"]:
                raise ValueError(
                    f"ZenFlowAdamW: param_groups[{i}] has other betas or eps than param_groups[0]; "
                    "the engine has one betas and eps (use one optimizer per setting)"
                )
            if not g["lr"] >= 0 or not g["weight_decay"] >= 0:
                raise ValueError(f"ZenFlowAdamW: param_groups[{i}]: 'lr' and 'weight_decay' must be >= 0")
        cfg.update(lr=float(lr), betas=tuple(g0["betas"]), eps=float(g0["eps"]), weight_decay=float(weight_decay),
                   decoupled=True)
        cfg.validate()

        all_params = [p for g in self.param_groups for p in g["params"]]
        if not all_params:
            raise ValueError("ZenFlowAdamW: 'params' is empty")
        device = all_params[0].device
        for i, p in enumerate(all_params):
            name = self._name(i)
            if p.device != device:
                raise ValueError(
                    f"ZenFlowAdamW: parameter '{name}' is on {p.device}, the first one on {device}; "
                    "one optimizer takes the parameters of one device"
                )
            if p.dtype not in (torch.float32, torch.float16, torch.bfloat16):
                raise ValueError(
                    f"ZenFlowAdamW: parameter '{name}' has dtype {p.dtype}; the engine takes float32, "
                    "float16 or bfloat16"
                )
            if p.is_sparse or p.layout != torch.strided:
                raise ValueError(f"ZenFlowAdamW: parameter '{name}' is not a dense (strided) tensor")
            if p.numel() == 0:
                raise ValueError(f"ZenFlowAdamW: parameter '{name}' is empty")
            self._view_of(p, name)  # raises for a layout the engine cannot take
            if p.grad is not None and (p.grad.shape != p.shape or p.grad.stride() != p.stride()):
                raise ValueError(f"ZenFlowAdamW: parameter '{name}' has a gradient of another shape or strides")
        if backend is None:
            backend = "cuda" if device.type == "cuda" else "host"
        if backend in ("host", "emulated") and device.type != "cpu":
            raise ValueError(f"ZenFlowAdamW: backend '{backend}' takes CPU tensors, the parameters are on {device}")
        if backend == "cuda" and device.type != "cuda":
            raise ValueError(f"ZenFlowAdamW: backend 'cuda' takes CUDA tensors, the parameters are on {device}")
        ref = max(g["lr"] for g in self.param_groups)
        self._ref_group = max(range(len(self.param_groups)), key=lambda i: self.param_groups[i]["lr"])
        self._scales = [(g["lr"] / ref if ref > 0 else 1.0) for g in self.param_groups]
        self._hparams = [(g["weight_decay"], tuple(g["betas"]), g["eps"]) for g in self.param_groups]

        self._engine = Engine(cfg, backend=backend, device=device.index if device.type == "cuda" else -1)
        self._device = device
        self._params = all_params
        self._param_ids = {id(p) for p in all_params}
        self._announce = announce
        self._accumulation = accumulation_steps
        self._ids: list = []
        self._grads: list = []
        self._ptrs: list = []
        self._announced: dict = {}
        self._warned: set = set()
        self._clip_warned = False
        self.last_report = None

        # --- registration: gradient buffers the engine reads for the whole run ---
        k = 0
        for gi, g in enumerate(self.param_groups):
            for p in g["params"]:
                name = self._name(k)
                if p.grad is None:
                    p.grad = torch.zeros_like(p, memory_format=torch.preserve_format)
                grad = p.grad
                opts = dict(lr_scale=self._scales[gi], weight_decay=float(g["weight_decay"]), name=name)
                w, gv, layout = self._view_of(p, name), self._view_of(grad, name), None
                if p.dim() >= 2:
                    layout = "strided" if w.stride(-1) == 1 else "contiguous"
                    if layout == "contiguous":  # stored transposed: [in, out] rows are the columns
                        w, gv = w.t(), gv.t()
                    pid = self._engine.add_matrix(w.detach(), gv, layout=layout, **opts)
                else:
                    pid = self._engine.add_vector(w.detach().reshape(-1), gv.reshape(-1), **opts)
                self._ids.append(pid)
                self._grads.append(grad)
                self._ptrs.append(p.data_ptr())
                if announce:
                    p.register_post_accumulate_grad_hook(self._make_hook(k))
                k += 1
        _live.add(self)
        _patch_clip_grad_norm()

    # ---- helpers ---------------------------------------------------------------------------

    def _name(self, k: int) -> str:
        i = 0
        for g in self.param_groups:
            names = g.get("param_names")
            if k < i + len(g["params"]):
                return names[k - i] if names else f"param{k}"
            i += len(g["params"])
        return f"param{k}"

    @staticmethod
    def _view_of(t: torch.Tensor, name: str) -> torch.Tensor:
        """The 2-D (or 1-D) view the engine registers; raises ValueError for what it cannot take."""
        if t.dim() <= 1:
            if t.dim() == 1 and t.stride(0) != 1 and t.numel() > 1:
                raise ValueError(f"ZenFlowAdamW: parameter '{name}' is not contiguous")
            return t
        if t.dim() > 2:
            if not t.is_contiguous():
                raise ValueError(f"ZenFlowAdamW: parameter '{name}' has {t.dim()} dimensions and is not contiguous")
            return t.view(t.shape[0], -1)
        if t.stride(1) != 1 and t.stride(0) != 1:
            raise ValueError(f"ZenFlowAdamW: parameter '{name}' is not contiguous in either dimension")
        return t

    def _make_hook(self, k: int):
        ref = weakref.ref(self)

        def hook(p: torch.Tensor) -> None:
            opt = ref()
            if opt is None or not opt._engine.initialized:
                return  # before the first step (or at it): step() does everything
            opt._adopt_grad(k, p)
            n = opt._announced.get(k, 0) + 1
            opt._announced[k] = n
            if n > opt._accumulation:
                raise RuntimeError(
                    f"ZenFlowAdamW: parameter '{opt._name(k)}' received {n} gradients since the last step; "
                    f"with gradient accumulation pass accumulation_steps={n} (or announce=False)"
                )
            if n == opt._accumulation:
                opt._engine.grad_ready(opt._ids[k], _stream_of(p.device))

        return hook

    def _adopt_grad(self, k: int, p: torch.Tensor) -> None:
        """Puts the gradient back into the buffer the engine reads when something replaced p.grad
        (model.zero_grad() sets it to None; autograd then makes a new tensor)."""
        buf = self._grads[k]
        g = p.grad
        if g is buf:
            return
        if g is None:  # no gradient this step (an unused parameter): a zero gradient
            buf.zero_()
        else:
            if "replaced" not in self._warned:
                self._warned.add("replaced")
                warnings.warn(
                    "ZenFlowAdamW: a parameter's .grad was replaced (model.zero_grad() sets it to None); "
                    "it is copied into the engine's buffer each step. Use optimizer.zero_grad() to avoid the copy.",
                    stacklevel=3,
                )
            buf.copy_(g)
        p.grad = buf

    def _clip_detected(self) -> None:
        if not self._clip_warned:
            self._clip_warned = True
            warnings.warn(
                "ZenFlowAdamW: torch.nn.utils.clip_grad_norm_ on its parameters: the engine reads the "
                "gradients as backward produces them (grad_ready hooks) and before clipping; clip with "
                "ZenFlowAdamW(..., gradient_clipping=max_norm) instead (the engine clips by the global norm "
                "inside step()).",
                stacklevel=3,
            )

    def _lr(self) -> float:
        ref = self.param_groups[self._ref_group]["lr"]
        for i, g in enumerate(self.param_groups):
            if (g["weight_decay"], tuple(g["betas"]), g["eps"]) != self._hparams[i]:
                raise ValueError(
                    f"ZenFlowAdamW: param_groups[{i}]'s weight_decay, betas or eps changed after construction; "
                    "the engine fixed them at registration"
                )
            want = ref * self._scales[i]
            if abs(g["lr"] - want) > 1e-6 * max(abs(want), abs(g["lr"])) + 1e-30:
                raise ValueError(
                    f"ZenFlowAdamW: param_groups[{i}]['lr'] is {g['lr']}, but the groups' learning rates must keep "
                    f"the ratio they had at construction ({self._scales[i]} x param_groups[{self._ref_group}]['lr'] "
                    f"= {want}): the engine steps every group with one learning rate times a fixed scale"
                )
        return float(ref)

    def _check_storage(self) -> None:
        for k, p in enumerate(self._params):
            if p.data_ptr() != self._ptrs[k] or p.untyped_storage().nbytes() == 0:
                raise RuntimeError(
                    f"ZenFlowAdamW: parameter '{self._name(k)}' no longer has the storage it was registered with "
                    "(freed, resized, or its .data replaced); the engine would write freed memory"
                )

    def _ensure_initialized(self) -> None:
        if not self._engine.initialized:
            self._check_storage()
            self._engine.initialize(_stream_of(self._device))

    # ---- torch.optim.Optimizer ---------------------------------------------------------------

    def add_param_group(self, param_group: dict) -> None:
        if hasattr(self, "_engine"):
            raise ValueError(
                "ZenFlowAdamW.add_param_group: the parameters are registered with the engine at construction; "
                "pass every group to the constructor"
            )
        super().add_param_group(param_group)

    @property
    def engine(self) -> Engine:
        """The zenflow.Engine underneath (stats(), state(), selected(), trace calls)."""
        return self._engine

    def initialize(self) -> None:
        """Copies the current weights into the engine's fp32 masters. Done by the first step()
        (or load_state_dict()); call it earlier only if the weights are final by then."""
        self._ensure_initialized()

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        lr = self._lr()
        self._check_storage()
        for k, p in enumerate(self._params):
            self._adopt_grad(k, p)
        self._ensure_initialized()
        self.last_report = self._engine.step(lr, _stream_of(self._device))
        self._announced.clear()
        return loss

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Zeroes the gradients in place (``set_to_none`` is ignored: the engine reads the same
        gradient buffers every step)."""
        with torch.no_grad():
            for k, p in enumerate(self._params):
                buf = self._grads[k]
                if p.grad is not buf:
                    p.grad = buf
            torch._foreach_zero_(self._grads)

    def flush(self) -> None:
        """Applies every finished host window to the weights (before evaluation or saving)."""
        if self._engine.initialized:
            self._engine.flush(_stream_of(self._device))

    def stats(self):
        """The engine's cumulative counters (zenflow.Stats)."""
        return self._engine.stats()

    def state_dict(self) -> dict:
        """The param groups and the engine's whole state (its checkpoint file's bytes): resumed
        bit-exactly by load_state_dict() on a model with the same weights."""
        self._ensure_initialized()
        with tempfile.TemporaryDirectory(prefix="zenflow-") as d:
            path = os.path.join(d, "engine.zfckpt")
            self._engine.save(path, _stream_of(self._device))
            with open(path, "rb") as f:
                blob = f.read()
        groups, start = [], 0
        for g in self.param_groups:
            saved = {k: v for k, v in g.items() if k != "params"}
            saved["params"] = list(range(start, start + len(g["params"])))
            start += len(g["params"])
            groups.append(saved)
        return {
            "state": {},
            "param_groups": groups,
            "zenflow": {
                "format": 1,
                "steps": self._engine.steps,
                "checkpoint": torch.frombuffer(bytearray(blob), dtype=torch.uint8),
            },
        }

    def load_state_dict(self, state_dict: dict) -> None:
        """Restores a state_dict() of a ZenFlowAdamW over the same parameters and configuration.
        Load the model's weights first (the engine's state belongs to the weights it was saved with)."""
        zf = state_dict.get("zenflow") if isinstance(state_dict, dict) else None
        if not isinstance(zf, dict) or "checkpoint" not in zf:
            raise ValueError("ZenFlowAdamW.load_state_dict: 'state_dict' is not a ZenFlowAdamW state_dict")
        groups = state_dict.get("param_groups", [])
        if len(groups) != len(self.param_groups) or any(
            len(a["params"]) != len(b["params"]) for a, b in zip(groups, self.param_groups)
        ):
            raise ValueError("ZenFlowAdamW.load_state_dict: 'state_dict' has other parameter groups")
        blob = zf["checkpoint"]
        data = blob.cpu().numpy().tobytes() if isinstance(blob, torch.Tensor) else bytes(blob)
        self._ensure_initialized()
        with tempfile.TemporaryDirectory(prefix="zenflow-") as d:
            path = os.path.join(d, "engine.zfckpt")
            with open(path, "wb") as f:
                f.write(data)
            self._engine.load(path, _stream_of(self._device))
        for g, saved in zip(self.param_groups, groups):
            for key, value in saved.items():
                if key != "params":
                    g[key] = value
        self._announced.clear()

    def __repr__(self) -> str:
        c = self._engine.config
        return (
            f"ZenFlowAdamW(mode={c.mode!r}, topk_ratio={c.topk_ratio}, update_interval={c.update_interval}, "
            f"backend={self._engine.backend!r}, params={len(self._params)})"
        )
