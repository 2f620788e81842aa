"""zenflow.Engine and zenflow.Config against the C++ engine, and their argument errors."""
import json
import os
import subprocess

import numpy as np
import pytest

import zenflow


def _inputs(rng, ch_a, len_a, ch_b, len_b, n, steps):
    a = rng.standard_normal((ch_a, len_a)).astype(np.float32)
    b = rng.standard_normal((len_b, ch_b)).astype(np.float32)  # strided: [channel_len, channels]
    v = rng.standard_normal(n).astype(np.float32)
    per_step = []
    for s in range(steps):
        lr = np.float32(1e-2 * (1 - s / (2 * steps)))
        scale = np.float32(1 + 3 * (s % 3))  # gradients whose channel ranking changes
        ga = (rng.standard_normal((ch_a, len_a)) * scale).astype(np.float32)
        gb = rng.standard_normal((len_b, ch_b)).astype(np.float32)
        gv = rng.standard_normal(n).astype(np.float32)
        if s == 5:
            ga[1, 2] = np.inf  # a step the engine skips
        per_step.append((lr, ga, gb, gv))
    return a, b, v, per_step


@pytest.mark.parametrize(
    "options",
    [
        dict(topk_ratio=0.25, update_interval=0, select_interval=4, select_strategy="step"),
        dict(topk_ratio=0.1, update_interval=3, full_warm_up_rounds=2, weight_decay=0.05, overlap_step=False),
        dict(mode="offload_sync", gradient_clipping=1.0),
        dict(mode="gpu_adamw", loss_scale=8.0),
    ],
)
def test_binding_matches_cpp_engine_bit_for_bit(tmp_path, engine_driver, options):
    cfg = zenflow.Config(**options)
    rng = np.random.default_rng(1234)
    ch_a, len_a, ch_b, len_b, n, steps = 12, 7, 10, 5, 9, 14
    a, b, v, per_step = _inputs(rng, ch_a, len_a, ch_b, len_b, n, steps)

    (tmp_path / "cfg.json").write_text(json.dumps(cfg.to_deepspeed()))
    with open(tmp_path / "in.bin", "wb") as f:
        f.write(np.array([ch_a, len_a, ch_b, len_b, n, steps], np.int64).tobytes())
        for x in (a, b, v):
            f.write(x.tobytes())
        for lr, ga, gb, gv in per_step:
            f.write(np.float32(lr).tobytes() + ga.tobytes() + gb.tobytes() + gv.tobytes())
    r = subprocess.run([str(engine_driver), str(tmp_path / "cfg.json"), str(tmp_path / "in.bin"),
                        str(tmp_path / "out.bin")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    cpp = (tmp_path / "out.bin").read_bytes()

    # The same run through the binding (the config read back from the same JSON).
    e = zenflow.Engine(zenflow.Config.from_deepspeed(tmp_path / "cfg.json"))
    wa, wb, wv = a.copy(), b.copy(), v.copy()
    ga_, gb_, gv_ = np.zeros_like(a), np.zeros_like(b), np.zeros_like(v)
    ia = e.add_matrix(wa, ga_, name="a")
    ib = e.add_matrix(wb, gb_, layout="strided", name="b")
    e.add_vector(wv, gv_, weight_decay=0.0, name="v")
    e.initialize()
    py = bytearray()
    for lr, ga, gb, gv in per_step:
        ga_[...], gb_[...], gv_[...] = ga, gb, gv
        e.step(float(lr))
        py += wa.tobytes() + wb.tobytes() + wv.tobytes()
    e.flush()
    for pid in (ia, ib):
        st = e.state(pid)
        py += st["master"].tobytes() + st["m"].tobytes() + st["v"].tobytes()
    py += np.array([e.stats().d2h_bytes, e.stats().h2d_bytes], np.uint64).tobytes()
    assert len(py) == len(cpp)
    assert bytes(py) == cpp
    assert e.stats().skipped_steps == 1


def _engine(**options):
    e = zenflow.Engine(zenflow.Config(**options))
    w = np.ones((6, 4), np.float32)
    g = np.full((6, 4), 0.5, np.float32)
    return e, w, g


def test_step_report_and_stats():
    e, w, g = _engine(topk_ratio=0.5, update_interval=2)
    e.add_matrix(w, g)
    e.initialize()
    reports = [e.step(1e-2) for _ in range(4)]
    assert [r.step for r in reports] == [0, 1, 2, 3]
    assert reports[0].selection and reports[0].selection_reason == "schedule"
    assert [r.window_closed for r in reports] == [False, True, False, True]
    e.flush()
    st = e.stats()
    assert st.steps == 4 and st.d2h_bytes == sum(r.d2h_bytes for r in reports)
    assert st.memory["host_state"] > 0
    assert list(e.selected(0)) == [0, 1, 2]
    assert e.settings(0)["lr_scale"] == 1.0
    assert not np.array_equal(w, np.ones_like(w))


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="one allowed core: nothing to split")
def test_placement_pins_the_host_threads_and_offers_the_rest_to_the_training_thread():
    allowed = sorted(os.sched_getaffinity(0))
    e, w, g = _engine(topk_ratio=0.5, update_interval=2, pin_host_threads=True, pt_reserved_cores_perc=0.5)
    e.add_matrix(w, g)
    e.initialize()
    p = e.stats().placement
    reserved = -(-len(allowed) // 2)  # DeepSpeed's ceil(0.5 x n), the first cores
    assert p["pinned"] and p["training_cores"] == allowed[:reserved] and p["worker_cores"] == allowed[reserved:]
    assert "pinned to cores" in p["describe"]
    assert sorted(os.sched_getaffinity(0)) == allowed  # initialize() left the calling thread alone
    try:
        assert zenflow.pin_to_training_cores(e.stats())
        assert sorted(os.sched_getaffinity(0)) == allowed[:reserved]
    finally:
        os.sched_setaffinity(0, allowed)
    e.step(1e-2)


def test_placement_that_leaves_no_core_is_rejected_by_name():
    with pytest.raises(ValueError, match="pt_reserved_cores_perc"):
        zenflow.Config(pin_host_threads=True, pt_reserved_cores_perc=1.0).validate()


def test_trace(tmp_path):
    e, w, g = _engine(topk_ratio=0.5, update_interval=2)
    e.add_matrix(w, g)
    e.initialize()
    e.start_trace()
    for _ in range(3):
        e.step(1e-2)
    e.flush()
    e.write_trace(tmp_path / "trace.json")
    trace = json.loads((tmp_path / "trace.json").read_text())
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    assert len(events) > 0


def test_emulated_backend_matches_host():
    outs = []
    for backend in ("host", "emulated"):
        e = zenflow.Engine(zenflow.Config(topk_ratio=0.25, update_interval=2), backend=backend)
        rng = np.random.default_rng(7)
        w = rng.standard_normal((16, 8)).astype(np.float32)
        g = np.zeros_like(w)
        e.add_matrix(w, g)
        e.initialize()
        for _ in range(6):
            e.synchronize()  # the emulated streams may still read the last step's gradients
            g[...] = rng.standard_normal(g.shape)
            e.step(1e-2)
        e.flush()
        e.synchronize()
        outs.append(w.tobytes())
    assert outs[0] == outs[1]


def test_save_load_round_trip(tmp_path):
    def run(split):
        e = zenflow.Engine(zenflow.Config(topk_ratio=0.25, update_interval=3))
        rng = np.random.default_rng(3)
        w = rng.standard_normal((8, 8)).astype(np.float32)
        g = np.zeros_like(w)
        e.add_matrix(w, g)
        e.initialize()
        for s in range(10):
            if s == split:
                e.save(tmp_path / "ck.zf")
                w0 = w.copy()
                e = zenflow.Engine(zenflow.Config(topk_ratio=0.25, update_interval=3))
                w, g = w0, np.zeros_like(w0)
                e.add_matrix(w, g)
                e.initialize()
                e.load(tmp_path / "ck.zf")
            g[...] = rng.standard_normal(g.shape)
            e.step(1e-2)
        e.flush()
        return w.tobytes()

    assert run(split=-1) == run(split=4)

    e, w, g = _engine()
    e.add_matrix(w, g)
    e.initialize()
    e.step(1e-2)
    e.save(tmp_path / "ok.zf")
    data = bytearray((tmp_path / "ok.zf").read_bytes())
    data[len(data) // 2] ^= 0xFF
    (tmp_path / "bad.zf").write_bytes(bytes(data))
    before = e.state(0)
    with pytest.raises(RuntimeError):
        e.load(tmp_path / "bad.zf")
    after = e.state(0)
    assert all((before[k] == after[k]).all() for k in before)  # unchanged
    with pytest.raises(ValueError, match="'path'"):
        e.save("")


def test_config_keys_and_deepspeed():
    c = zenflow.Config(topk_ratio=0.2, mode="offload_sync", betas=(0.8, 0.99))
    assert c.mode == "offload_sync" and c.beta1 == pytest.approx(0.8)
    with pytest.raises(ValueError, match="topk_ration.*topk_ratio"):
        zenflow.Config(topk_ration=0.2)
    with pytest.raises(ValueError, match="'mode' must be one of"):
        zenflow.Config(mode="fast")
    with pytest.raises(ValueError, match="zero_optimization.zenflow.topk_ratio"):
        zenflow.Config.from_deepspeed({"zero_optimization": {"offload_optimizer": {"device": "cpu"},
                                                             "zenflow": {"topk_ratio": 3}}})
    ds = {"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"},
                                "zenflow": {"topk_ratio": 0.05, "update_interval": 4}},
          "gradient_clipping": 1.0}
    c = zenflow.Config.from_deepspeed(ds)
    assert c.topk_ratio == 0.05 and c.update_interval == 4 and c.gradient_clipping == 1.0
    assert not c.overlap_step  # DeepSpeed's default
    back = zenflow.Config.from_deepspeed(c.to_deepspeed())
    assert repr(back) == repr(c)
    with pytest.raises(ValueError, match="must be in"):
        zenflow.Engine(zenflow.Config(topk_ratio=2.0))


def test_bad_arguments_name_the_argument_and_register_nothing():
    e, w, g = _engine()
    with pytest.raises(ValueError, match="'weights' has dtype float64"):
        e.add_matrix(w.astype(np.float64), g.astype(np.float64))
    with pytest.raises(ValueError, match="'grads' has dtype float16"):
        e.add_matrix(w, g.astype(np.float16))
    with pytest.raises(ValueError, match="'grads' has another shape"):
        e.add_matrix(w, g[:3])
    with pytest.raises(ValueError, match="contiguous in its last dimension"):
        e.add_matrix(w.T, g.T)
    with pytest.raises(ValueError, match="'layout' must be"):
        e.add_matrix(w, g, layout="diagonal")
    with pytest.raises(ValueError, match="'grads' overlaps 'weights'"):
        e.add_matrix(w, w)
    with pytest.raises(ValueError, match="options.lr_scale"):
        e.add_matrix(w, g, lr_scale=-1.0)
    with pytest.raises(ValueError, match="'weights' has 24 elements"):
        e.add_matrix(w, g, channels=10, channel_len=4)
    with pytest.raises(ValueError, match="'grads' is not an array"):
        e.add_matrix(w, [[0.0] * 4] * 6)
    with pytest.raises(ValueError, match="'backend' must be"):
        zenflow.Engine(backend="tpu")
    assert e.param_count == 0
    with pytest.raises(ValueError, match="not initialized"):
        e.step(1e-3)
    e.add_matrix(w, g)
    with pytest.raises(ValueError, match="weights"):
        e.add_matrix(w, g)  # the same weights twice
    assert e.param_count == 1
    e.initialize()
    with pytest.raises(ValueError, match="'lr'"):
        e.step(float("nan"))
    with pytest.raises(ValueError, match="'param'"):
        e.state(5)
    if not zenflow.has_cuda:
        with pytest.raises(ValueError, match="built without CUDA"):
            zenflow.Engine(backend="cuda")


def test_primitives_match_numpy():
    rng = np.random.default_rng(0)
    g = rng.standard_normal((9, 5)).astype(np.float32)
    np.testing.assert_allclose(zenflow.channel_norms(g), (g.astype(np.float64) ** 2).sum(1), rtol=1e-5)
    np.testing.assert_allclose(zenflow.channel_norms(g, layout="strided", norm="l1"), np.abs(g).sum(0), rtol=1e-5)
    s = zenflow.channel_norms(g)
    assert list(zenflow.topk(s, 3)) == sorted(np.argsort(-s)[:3].tolist())
    with pytest.raises(ValueError, match="'k'"):
        zenflow.topk(s, 10)
    master = rng.standard_normal(100).astype(np.float32)
    grad = rng.standard_normal(100).astype(np.float32)
    m, v = np.zeros_like(master), np.zeros_like(master)
    p64 = master.astype(np.float64)
    zenflow.adamw(master, m, v, grad, count=1, lr=1e-2, weight_decay=0.1)
    g64 = grad.astype(np.float64)
    m64, v64 = 0.1 * g64, 0.001 * g64 * g64
    ref = p64 * (1 - 1e-3) - 1e-2 * (m64 / 0.1) / (np.sqrt(v64 / 0.001) + 1e-8)
    np.testing.assert_allclose(master, ref, rtol=1e-5, atol=1e-6)
