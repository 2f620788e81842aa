import os
import pathlib
import shutil
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def engine_driver():
    """tests/engine_driver.cpp compiled once (cached under build/python-test by the newest mtime of
    the source and the library's headers, so that a changed engine rebuilds it)."""
    src = ROOT / "python" / "tests" / "engine_driver.cpp"
    out_dir = pathlib.Path(os.environ.get("ZENFLOW_PY_TEST_BUILD", ROOT / "build" / "python-test"))
    out_dir.mkdir(parents=True, exist_ok=True)
    exe = out_dir / "engine_driver"
    stamp = out_dir / "engine_driver.stamp"
    key = str(max([src.stat().st_mtime_ns] + [h.stat().st_mtime_ns for h in (ROOT / "include").rglob("*.h*")]))
    if exe.exists() and stamp.exists() and stamp.read_text() == key:
        return exe
    cxx = os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++")
    if cxx is None:
        pytest.skip("no C++ compiler for the engine driver")
    cuda = pathlib.Path(os.environ.get("CUDA_HOME", "/usr/local/cuda"))
    cmd = [cxx, "-std=c++20", "-O2", f"-I{ROOT / 'include'}", f"-I{cuda / 'include'}", str(src), "-o", str(exe),
           f"-L{cuda / 'lib64'}", "-lcudart_static", "-lpthread", "-ldl", "-lrt"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError("engine_driver did not compile:\n" + " ".join(cmd) + "\n" + r.stderr[-4000:])
    stamp.write_text(key)
    return exe
