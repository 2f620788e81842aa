"""bench/accuracy/accuracy_grid.py (the accuracy study, docs/accuracy.md): its smoke run as CI runs
it, and its staleness control (LateAdamW) against an independent reference."""
import importlib.util
import json
import pathlib

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _grid():
    spec = importlib.util.spec_from_file_location("accuracy_grid", ROOT / "bench" / "accuracy" / "accuracy_grid.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_late_adamw_lands_each_update_one_step_late_on_its_columns():
    """LateAdamW(share) against AdamW on the same gradient sequence (fed directly, no weight decay,
    so the moments do not depend on the weights): the late columns of a matrix follow AdamW's
    weights one step behind, the other columns and the vectors on time; flush() lands the last."""
    g = _grid()
    torch.manual_seed(3)
    w0, b0 = torch.randn(6, 10), torch.randn(6)
    grads = [(torch.randn(6, 10), torch.randn(6)) for _ in range(4)]
    ref_w, ref_b = w0.clone().requires_grad_(), b0.clone().requires_grad_()
    late_w, late_b = w0.clone().requires_grad_(), b0.clone().requires_grad_()
    ref = torch.optim.AdamW([ref_w, ref_b], lr=0.1, weight_decay=0.0)
    late = g.LateAdamW([late_w, late_b], 0.5, seed=7, lr=0.1, weight_decay=0.0)
    cols = late._late[late_w][0][0]  # the late columns (the same mask on every row)
    assert 0 < int(cols.sum()) < 10, "a share of 0.5 of 10 columns: some late, some on time"
    history = [w0.clone()]
    for gw, gb in grads:
        for p, gr, o in ((ref_w, gw, ref), (late_w, gw, late)):
            p.grad = gr.clone()
        ref_b.grad, late_b.grad = gb.clone(), gb.clone()
        ref.step()
        late.step()
        history.append(ref_w.detach().clone())
        torch.testing.assert_close(late_w[:, ~cols], ref_w[:, ~cols], rtol=0, atol=0)
        torch.testing.assert_close(late_w[:, cols], history[-2][:, cols], rtol=1e-6, atol=1e-7)
        torch.testing.assert_close(late_b, ref_b, rtol=0, atol=0)
        assert not torch.equal(history[-1][:, cols], history[-2][:, cols])  # the update is not 0
    late.flush()
    torch.testing.assert_close(late_w, ref_w, rtol=1e-6, atol=1e-7)


def test_late_adamw_pairs_land_two_updates_every_second_step():
    """hold="pairs": the late columns stand still on odd steps and equal AdamW's weights on even
    ones (the two updates summed), the others on time; a bad `hold` raises naming it."""
    g = _grid()
    torch.manual_seed(4)
    w0 = torch.randn(5, 8)
    ref_w, pair_w = w0.clone().requires_grad_(), w0.clone().requires_grad_()
    ref = torch.optim.AdamW([ref_w], lr=0.05, weight_decay=0.0)
    pairs = g.LateAdamW([pair_w], 0.6, hold="pairs", seed=2, lr=0.05, weight_decay=0.0)
    cols = pairs._late[pair_w][0][0]
    assert 0 < int(cols.sum()) < 8
    prev = w0.clone()
    for t in range(6):
        gr = torch.randn(5, 8)
        ref_w.grad, pair_w.grad = gr.clone(), gr.clone()
        ref.step()
        pairs.step()
        torch.testing.assert_close(pair_w[:, ~cols], ref_w[:, ~cols], rtol=0, atol=0)
        expect = prev if t % 2 == 0 else ref_w.detach()
        torch.testing.assert_close(pair_w[:, cols], expect[:, cols], rtol=1e-6, atol=1e-7)
        if t % 2 == 1:
            prev = ref_w.detach().clone()
    with pytest.raises(ValueError, match="hold"):
        g.LateAdamW([torch.zeros(2, 2, requires_grad=True)], 0.5, hold="later")


def test_smoke_grid_runs_resumes_and_dense_equals_adamw(tmp_path):
    """CI's smoke of the harness: a few tiny cells; the control (offload_sync, every channel on the
    host every step) equals AdamW, so both see the same data, seeds and starting weights; a rerun
    skips every stored cell."""
    g = _grid()
    assert g.main(["--smoke", "--out", str(tmp_path), "--quiet"]) == 0
    cells = sorted((tmp_path / "cells").glob("*.json"))
    assert len(cells) == 2 * 2 * 4  # models x regimes x (adamw + 3 settings)
    summary = json.loads((tmp_path / "summary.json").read_text())
    rows = {(r["model"], r["regime"], r["setting"]): r for r in summary["rows"]}
    for model in ("gpt2", "mlp"):
        for regime in ("scratch", "finetune"):
            assert abs(rows[(model, regime, "dense")]["worst"] - 1.0) < 1e-4
            # ZenFlow differs from AdamW (the cell measured something) and stays within reach of it
            zen = rows[(model, regime, "linear")]["worst"]
            assert zen != 1.0 and 0.8 < zen < 1.25, zen
    assert "| dense |" in (tmp_path / "tables.md").read_text()
