"""zenflow: ZenFlow's stall-free offloaded optimizer, the C++ engine from Python.

``zenflow.Config`` is the engine's configuration (C++ defaults, or a DeepSpeed config),
``zenflow.Engine`` the engine over the host, emulated or CUDA backend, taking arrays through
DLPack (torch, numpy, CuPy, JAX). ``zenflow.torch.ZenFlowAdamW`` is a ``torch.optim.Optimizer``
over it. See docs/python.md.
"""

from __future__ import annotations

import difflib
import json
import os
import sys
from typing import Any, Mapping, Optional, Union

from . import _zenflow as _C
from ._zenflow import Stats, StepReport, adamw, channel_norms, pin_to_training_cores, topk

__all__ = [
    "Config",
    "Engine",
    "StepReport",
    "Stats",
    "channel_norms",
    "topk",
    "adamw",
    "has_cuda",
    "pin_to_training_cores",
]

has_cuda: bool = _C.has_cuda

_KEYS = sorted(k for k in dir(_C._Config) if not k.startswith("_") and k not in ("validate", "describe", "topk"))


def _nearest(key: str) -> str:
    near = difflib.get_close_matches(key, _KEYS, n=1)
    return f" (did you mean '{near[0]}'?)" if near else ""


class Config(_C._Config):
    """The engine's configuration (docs/config.md): the C++ defaults, then ``options``.

    Every key of the C++ ``zenflow::config`` is an attribute: ``mode`` ("zenflow",
    "offload_sync", "gpu_adamw"), ``topk_ratio``, ``update_interval``, ``select_interval``,
    ``select_strategy``, ``full_warm_up_rounds``, ``overlap_step``, ``gradient_clipping``,
    ``loss_scale``, ``lr``/``beta1``/``beta2``/``eps``/``weight_decay``/``decoupled``
    (the optimizer block), ``param_groups`` (a list of {"match", "lr_scale", "weight_decay"}),
    ``host_threads``, ... An unknown key raises ValueError naming it.
    """

    def __init__(self, **options: Any) -> None:
        super().__init__()
        self.update(**options)

    def update(self, **options: Any) -> "Config":
        """Sets each key of ``options``; ``betas=(b1, b2)`` sets beta1 and beta2."""
        for key, value in options.items():
            if key == "betas":
                b1, b2 = value
                self.beta1, self.beta2 = float(b1), float(b2)
                continue
            if key not in _KEYS:
                raise ValueError(f"zenflow.Config: unknown key '{key}'{_nearest(key)}")
            try:
                setattr(self, key, value)
            except TypeError as e:
                raise ValueError(f"zenflow.Config: '{key}' cannot be {value!r} ({e})") from None
        return self

    @classmethod
    def _of(cls, c: "_C._Config") -> "Config":
        out = cls()
        out._assign(c)
        return out

    @classmethod
    def from_deepspeed(cls, source: Union[str, os.PathLike, Mapping[str, Any]], strict: bool = False) -> "Config":
        """Reads a DeepSpeed config as DeepSpeed reads it (docs/config.md): a path to a JSON file,
        JSON text, or a dict (``zero_optimization.zenflow``, ``optimizer``, ``gradient_clipping``,
        ``fp16``/``bf16``, and zenflow's own keys in ``zenflow_ext``). Invalid values raise
        ValueError naming the key by its JSON path."""
        if not _C.has_json:
            raise RuntimeError("zenflow was built without nlohmann-json: Config.from_deepspeed is unavailable")
        if isinstance(source, Mapping):
            return cls._of(_C._Config._from_deepspeed_json_string(json.dumps(source), strict))
        text = os.fspath(source)
        if text.lstrip().startswith("{"):
            return cls._of(_C._Config._from_deepspeed_json_string(text, strict))
        return cls._of(_C._Config._from_deepspeed_json_file(text, strict))

    @classmethod
    def deepspeed_defaults(cls) -> "Config":
        """The C++ defaults with DeepSpeed's for DeepSpeed's keys (what a DeepSpeed file starts from)."""
        return cls._of(_C._Config._deepspeed_defaults())

    def to_deepspeed(self) -> dict:
        """The DeepSpeed config (a dict) that ``from_deepspeed`` reads back into this one."""
        if not _C.has_json:
            raise RuntimeError("zenflow was built without nlohmann-json: Config.to_deepspeed is unavailable")
        return json.loads(self._to_deepspeed_json_string())

    def copy(self) -> "Config":
        return Config._of(self)

    def __repr__(self) -> str:
        return "zenflow.Config(" + ", ".join(f"{k}={getattr(self, k)!r}" for k in _KEYS) + ")"


def _stream_int(stream: Any) -> int:
    """A stream as an integer: an int, or an object with ``cuda_stream`` (torch.cuda.Stream) or
    ``ptr`` (cupy)."""
    if stream is None:
        return 0
    if isinstance(stream, int):
        return stream
    for attr in ("cuda_stream", "ptr"):
        if hasattr(stream, attr):
            return int(getattr(stream, attr))
    raise ValueError(f"zenflow: 'stream' must be an integer (a cudaStream_t) or a stream object, not {stream!r}")


def _array(x: Any, name: str, fn: str) -> Any:
    """What DLPack can take: a torch tensor that requires grad is detached; an object with only
    ``__cuda_array_interface__`` (Numba) goes through torch.as_tensor when torch is loaded."""
    if getattr(x, "requires_grad", False) and hasattr(x, "detach"):
        return x.detach()
    if hasattr(x, "__dlpack__") or hasattr(x, "__array_interface__") or hasattr(x, "__array__"):
        return x
    if hasattr(x, "__cuda_array_interface__"):
        if "torch" in sys.modules:
            return sys.modules["torch"].as_tensor(x, device="cuda")
        raise ValueError(
            f"{fn}: '{name}' has only __cuda_array_interface__; pass a DLPack array "
            "(cupy.asarray(x), torch.as_tensor(x, device='cuda'))"
        )
    raise ValueError(f"{fn}: '{name}' is not an array (DLPack or the buffer protocol), it is {type(x).__name__}")


class Engine(_C._Engine):
    """``zenflow::engine`` over a backend: "host" (arrays in host memory, every operation on the
    calling thread), "emulated" (host memory, streams as threads: the engine's real concurrency
    on a CPU), or "cuda" (CUDA device arrays; needs a module built with CUDA).

    Arrays are anything DLPack can pass (torch tensors, numpy, CuPy, JAX arrays); the engine keeps
    a reference to every registered array and writes the weights in place. Streams are integers
    (``torch.cuda.current_stream().cuda_stream``) or stream objects. docs/python.md.
    """

    def __init__(self, config: Optional[Config] = None, backend: str = "host", device: int = -1, *,
                 emulated_timing: Optional[Mapping[str, float]] = None, **options: Any):
        cfg = Config() if config is None else config.copy()
        cfg.update(**options)
        super().__init__(cfg, backend, device, None if emulated_timing is None else dict(emulated_timing))

    def add_matrix(self, weights: Any, grads: Any, *args: Any, **kwargs: Any) -> int:
        """Registers a matrix (docs/python.md): ``layout="contiguous"`` takes ``[channels,
        channel_len]``, ``"strided"`` ``[channel_len, channels]``; or explicit ``channels``,
        ``channel_len``, ``ld``; ``lr_scale``, ``weight_decay``, ``name``. Returns its id."""
        fn = "zenflow.Engine.add_matrix"
        return super().add_matrix(_array(weights, "weights", fn), _array(grads, "grads", fn), *args, **kwargs)

    def add_vector(self, weights: Any, grads: Any, *args: Any, **kwargs: Any) -> int:
        """Registers a vector (every element; updated on the device); ``lr_scale``,
        ``weight_decay``, ``name``. Returns its id."""
        fn = "zenflow.Engine.add_vector"
        return super().add_vector(_array(weights, "weights", fn), _array(grads, "grads", fn), *args, **kwargs)

    def initialize(self, stream: Any = 0) -> None:
        super().initialize(_stream_int(stream))

    def grad_ready(self, param: int, stream: Any = 0) -> None:
        super().grad_ready(param, _stream_int(stream))

    def step(self, lr: float, stream: Any = 0, *, loss_scale: Any = None, found_inf: Any = None,
             max_norm: Optional[float] = None, no_grad: Any = ()) -> StepReport:
        """One step (docs/python.md, "Per-step inputs"): ``loss_scale`` and ``found_inf`` are
        one-element float32 arrays in the backend's memory, read (and found_inf written: 1.0 when
        the step was skipped, else 0.0) where the step runs, without a host wait; ``max_norm``
        this step's clipping threshold (None: the config's gradient_clipping; inf: none);
        ``no_grad`` the ids of the parameters without a gradient this step (their gradients
        must be zeros)."""
        fn = "zenflow.Engine.step"
        ls = None if loss_scale is None else _array(loss_scale, "loss_scale", fn)
        fi = None if found_inf is None else _array(found_inf, "found_inf", fn)
        return super().step(lr, _stream_int(stream), ls, fi, None if max_norm is None else float(max_norm),
                            [int(p) for p in no_grad])

    def release_gradients(self, stream: Any = 0) -> None:
        """Work enqueued on ``stream`` from now on waits for every gradient pack enqueued so far
        (grad_ready()'s and the last step's): before writing a gradient the engine may still read."""
        super().release_gradients(_stream_int(stream))

    def flush(self, stream: Any = 0) -> None:
        super().flush(_stream_int(stream))

    def synchronize(self, stream: Any = 0) -> None:
        """Waits for the work enqueued on ``stream`` (emulated and CUDA backends; the host backend
        runs everything at once): after it the host may overwrite the gradients a step read."""
        super().synchronize(_stream_int(stream))

    def save(self, path: Union[str, os.PathLike], stream: Any = 0) -> None:
        super().save(os.fspath(path), _stream_int(stream))

    def load(self, path: Union[str, os.PathLike], stream: Any = 0) -> None:
        super().load(os.fspath(path), _stream_int(stream))

    def write_trace(self, path: Union[str, os.PathLike]) -> None:
        """Writes the pipeline trace recorded since start_trace() (Chrome trace-event JSON)."""
        super().write_trace(os.fspath(path))

    def state(self, param: int, stream: Any = 0) -> dict:
        return super().state(param, _stream_int(stream))
