"""Stages `pipeline` (issue 11's benchmark on the CUDA backend, its JSON checked), `trainer` (the
example trainer's three-mode table, --backend cuda: no silent fall back to the host backend) and
`bench` (the GPU cases of the Google Benchmark programs, then the torch baselines). Their JSON goes
into the archive's json/."""
from pathlib import Path

from .settings import GBENCH_TARGETS, TORCH_SCRIPTS


def plan(ledger, wanted, root):
    if "pipeline" in wanted:
        ledger.add("pipeline:zf_bench_pipeline_cuda", "pipeline", "zf_bench_pipeline_cuda")
    if "trainer" in wanted:
        ledger.add("trainer:charlm_train", "trainer", "charlm_train")
    if "bench" in wanted:
        for t in GBENCH_TARGETS:
            ledger.add(f"bench:{t}", "bench", t)
        for script in TORCH_SCRIPTS:
            if (Path(root) / script).is_file():
                ledger.add(f"bench:{Path(script).stem}", "bench", "-")


def run_item(session, item, exe):
    r, s = session.runner, session.s
    json = session.report.work / "json"
    json.mkdir(parents=True, exist_ok=True)
    if item.stage == "pipeline":
        if not r.start(item.key, 2 * s.per_binary_timeout):
            return
        out = json / "pipeline_cuda.json"
        rc = r.exec([str(exe), *s.pipeline_args, "--json", str(out)], line_buffered=True)
        if rc == 0:
            rc = r.exec(["python3", "bench/engine/check_pipeline_json.py", str(out), "--standard-modes"])
        r.end(item.key, rc, show=14)
    elif item.stage == "trainer":
        if not r.start(item.key, 2 * s.per_binary_timeout):
            return
        rc = r.exec(["python3", "bench/engine/offload_modes.py", "--binary", str(exe), "--json-out",
                     str(json / "offload_modes.json"), "--size", "gpu", "--backend", "cuda"],
                    env=session.env(PYTHONUNBUFFERED="1"))
        r.end(item.key, rc, show=20)
    elif item.target == "-":  # a torch baseline: its JSON on stdout
        if not r.start(item.key, s.per_binary_timeout):
            return
        script = next(sc for sc in TORCH_SCRIPTS if Path(sc).stem == item.key.removeprefix("bench:"))
        args = ["--device", "cuda"] if script == "bench/optim/torch_adamw.py" else []
        rc = r.exec(["python3", script, *args], env=session.env(PYTHONUNBUFFERED="1"),
                    stdout=json / f"{Path(script).stem}.json")
        r.end(item.key, rc)
    else:
        if not r.start(item.key, s.per_binary_timeout):
            return
        # The GPU cases only (the host ones are measured on the dev machine). Google Benchmark 1.7.1
        # (Debian 12) takes a plain number of seconds: no "s" suffix.
        rc = r.exec([str(exe), "--benchmark_filter=gpu", f"--benchmark_out={json / item.target}.json",
                     "--benchmark_out_format=json", "--benchmark_min_time=0.1"], line_buffered=True)
        r.end(item.key, rc)
