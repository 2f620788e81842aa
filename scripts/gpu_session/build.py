"""The fallback build on the device: what a stage still lacks after the carried binaries is built
in build/gpu, the stage's own targets only, as one timed item build:STAGE. The build runs as a
child command (`gpu-session _build TARGET...`) under the item's timeout: a kill leaves ninja's
finished outputs, which the next build reuses."""
import os
import subprocess
import sys

from . import binaries, settings

PACKAGE = os.path.dirname(os.path.abspath(__file__))


def configure(s, folder, extra=(), quiet=False):
    """The gpu preset (sm_90) into `folder`, with the carried prefix; NCCL from torch's wheel
    when neither the toolkit nor the system has it."""
    nccl = settings.nccl_root()
    nccl_flags = [f"-DNCCL_ROOT={nccl}"] if nccl and (nccl / "include/nccl.h").is_file() else []
    argv = ["cmake", "--preset", "gpu", "-B", str(folder), f"-DCMAKE_PREFIX_PATH={s.prefix}",
            f"-DCMAKE_CXX_FLAGS=-isystem {s.prefix}/include/xxhash-only", *nccl_flags, *extra]
    return subprocess.run(argv, stdout=subprocess.DEVNULL if quiet else None).returncode


def existing_targets(folder, names):
    """The names that the build in `folder` defines (NCCL's test needs NCCL, say)."""
    text = subprocess.run(["ninja", "-C", str(folder), "-t", "targets", "all"], capture_output=True,
                          text=True).stdout
    defined = {line.split(": ", 1)[0] for line in text.splitlines() if ": " in line}
    return [t for t in names if t in defined]


def internal_build(args):
    """`_build TARGET... | --all`: configures build/gpu when it is not, builds, and records per
    target what was built (gpu-session-built.txt) or is not defined (gpu-session-absent.txt)."""
    s = settings.Settings.from_env(os.getcwd())
    os.environ["PATH"] += os.pathsep + "/usr/local/cuda/bin"
    src_hash = s.source_hash or settings.source_hash(s.root)
    folder, jobs = s.build_dir, str(os.cpu_count() or 1)
    if not (folder / "build.ninja").is_file() and configure(s, folder) != 0:
        return 1
    if args == ["--all"]:
        return 0 if subprocess.run(["cmake", "--build", str(folder), "-j", jobs]).returncode == 0 else 1
    targets = existing_targets(folder, args)
    with open(folder / binaries.ABSENT_LIST, "a") as absent:
        absent.writelines(f"{src_hash} {t}\n" for t in args if t not in targets)
    if not targets:
        return 0
    print(f"gpu-session: building {' '.join(targets)} in {folder}", flush=True)
    # -k 0: a target that fails to compile does not stop the others.
    rc = subprocess.run(["cmake", "--build", str(folder), "-j", jobs, "--target", *targets, "--", "-k", "0"]).returncode
    with open(folder / binaries.BUILT_LIST, "a") as built:
        for t in targets:
            dry = subprocess.run(["ninja", "-C", str(folder), "-n", t], capture_output=True, text=True).stdout
            if "no work to do" in dry:
                built.write(f"{src_hash} {t}\n")
    return rc


def build_item(session, stage, targets):
    """build:STAGE, just before the stage's first item: builds `targets` (["--all"]: everything)."""
    ledger, key = session.ledger, f"build:{stage}"
    item = ledger.get(key)
    if item is None or not item.done:
        if key not in ledger.order:
            ledger.insert_before(ledger.of_stage(stage)[0], key, stage)
        if key in ledger.others:
            ledger.others.remove(key)
        ledger.set(key, "not-run", "-", f"needed: {' '.join(targets)}")
    if not ledger.pending(key) or not session.runner.start(key, session.s.build_timeout):
        return
    env = dict(os.environ, ZF_GPU_SESSION_SOURCE_HASH=session.src_hash)
    rc = session.runner.exec([sys.executable, PACKAGE, "_build", *targets], env=env)
    session.runner.end(key, rc)
