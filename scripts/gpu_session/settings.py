"""What a session runs (the target lists, the stage order) and the knobs it reads from the
environment; the hash of the sources a binary is built from."""
import dataclasses
import hashlib
import os
import shlex
import shutil
from pathlib import Path

# The binaries a GPU session runs, by target name.
GPU_TEST_TARGETS = (
    "zf_core_gpu_tests",
    "zf_select_gpu_tests",
    "zf_optim_gpu_tests",
    "zf_transport_gpu_tests",
    "zf_engine_gpu_tests",
    "zf_examples_gpu_tests",
    "zf_comm_nccl_gpu_tests",
    "zf_engine_sharded_gpu_tests",
)
GBENCH_TARGETS = ("zf_bench_bandwidth", "zf_bench_select", "zf_bench_optim", "zf_bench_transport")
OTHER_TARGETS = ("zf_bench_pipeline_cuda", "charlm_train")
TORCH_SCRIPTS = ("bench/select/torch_topk.py", "bench/optim/torch_adamw.py")
STAGE_ORDER = ("test", "pipeline", "trainer", "bench", "sanitize", "test-cpu")
ALL_STAGES = ("test", "pipeline", "trainer", "bench", "sanitize")
SANITIZERS = ("memcheck", "racecheck", "synccheck", "initcheck")
MULTIARCH = "lib/x86_64-linux-gnu"

# The pipeline on the GPU: 500M parameters (bf16 model 1 GB; gpu_adamw holds 8 GB, the host ~6 GB),
# 8 modes of 22 steps each: a minute or two.
DEFAULT_PIPELINE_ARGS = "--params 500 --layers 16 --steps 16 --warmup 6"
# A call's budget (a command runs at most 600 s on the device), and the device tool's timeout_s
# over it: the seconds the program needs after the budget to end its last item and pack.
DEFAULT_BUDGET = 540
TIMEOUT_S_OVER_BUDGET = 20


@dataclasses.dataclass
class Settings:
    root: Path  # the checkout (the items run there)
    carry: Path  # .carry: prefix/ (the C++ dependencies) and bin/ (the prebuilt binaries)
    build_dir: Path  # the fallback build's tree, or the tree given by ZF_GPU_SESSION_BUILD
    given_build: bool  # ZF_GPU_SESSION_BUILD: binaries from a tree already built, nothing built
    no_build: bool
    per_binary_timeout: int
    build_timeout: int
    budget: int
    margin: int
    min_item: int
    state_file: Path
    work_root: Path
    travel_limit_mib: int
    write_at_end: bool  # the selftest's negative check only
    pipeline_args: list
    source_hash: str  # ZF_GPU_SESSION_SOURCE_HASH, or "" (computed when needed)

    @property
    def prefix(self):
        return self.carry / "prefix"

    @property
    def carried_bin(self):
        return self.carry / "bin"

    @property
    def builds_allowed(self):
        return not self.given_build and not self.no_build

    @property
    def kill_after(self):
        """Seconds between an item's TERM and its KILL: a third of the margin, 1 to 5."""
        return min(max(self.margin // 3, 1), 5)

    @classmethod
    def from_env(cls, root, env=None):
        env = os.environ if env is None else env
        root = Path(root)

        def path(name, default):
            return Path(env.get(name) or default)

        def number(name, default):
            return int(env.get(name) or default)

        given = env.get("ZF_GPU_SESSION_BUILD", "")
        return cls(
            root=root,
            carry=path("ZF_GPU_SESSION_CARRY", root / ".carry"),
            build_dir=Path(given) if given else path("ZF_GPU_SESSION_BUILD_DIR", root / "build/gpu"),
            given_build=bool(given),
            no_build=env.get("ZF_GPU_SESSION_NO_BUILD", "0") == "1",
            per_binary_timeout=number("ZF_GPU_SESSION_TIMEOUT", 150),
            build_timeout=number("ZF_GPU_SESSION_BUILD_TIMEOUT", 300),
            budget=number("ZF_GPU_SESSION_BUDGET", DEFAULT_BUDGET),
            margin=number("ZF_GPU_SESSION_MARGIN", 15),
            min_item=number("ZF_GPU_SESSION_MIN_ITEM", 20),
            state_file=path("ZF_GPU_SESSION_STATE", root / "build/gpu-session/state.txt"),
            work_root=path("ZF_GPU_SESSION_WORK", root / "build/gpu-session"),
            travel_limit_mib=number("ZF_GPU_SESSION_TRAVEL_LIMIT_MIB", 60),
            write_at_end=env.get("ZF_GPU_SESSION_WRITE_AT_END", "0") == "1",
            pipeline_args=shlex.split(env.get("ZF_GPU_SESSION_PIPELINE_ARGS") or DEFAULT_PIPELINE_ARGS),
            source_hash=env.get("ZF_GPU_SESSION_SOURCE_HASH", ""),
        )


SOURCE_DIRS = ("CMakeLists.txt", "CMakePresets.json", "cmake", "include", "tests", "bench", "examples")
SOURCE_SUFFIXES = (".hpp", ".cuh", ".cu", ".cpp", ".h", ".cmake")


def source_hash(root):
    """The hash of every source a binary is built from, the same here and there (the device tool
    copies the tracked and untracked-not-ignored files; build outputs and results are left out).
    It equals `sha256sum` over the files in C order, piped into `sha256sum`, first 16 digits, as
    the first (bash) version computed it, so that a .carry/bin prepared by it still matches."""
    root = Path(root)
    files = []
    for top in SOURCE_DIRS:
        if (root / top).is_file():
            files.append(top)
            continue
        for folder, _, names in os.walk(root / top):  # as find: symbolic links not followed
            for name in names:
                rel = (Path(folder) / name).relative_to(root).as_posix()
                if rel.startswith("bench/results/") or os.path.islink(root / rel):
                    continue
                if Path(name).suffix in SOURCE_SUFFIXES or name in ("CMakeLists.txt", "CMakePresets.json"):
                    files.append(rel)
    listing = "".join(f"{hashlib.sha256((root / f).read_bytes()).hexdigest()}  {f}\n"
                      for f in sorted(files, key=lambda s: s.encode()))
    return hashlib.sha256(listing.encode()).hexdigest()[:16]


def cuda_root():
    """The toolkit's folder (nvcc's bin/..), or None."""
    nvcc = shutil.which("nvcc")
    return Path(nvcc).parent.parent if nvcc else None


def nccl_root():
    """NCCL (nccl_communicator and its gpu tests): None when the toolkit or the system has it (the
    build finds it), else the copy in torch's pip wheel (nvidia-nccl-cu13: include/nccl.h and
    lib/libnccl.so.2), else None too (the NCCL tests are then absent, and the summary says so)."""
    cr = cuda_root()
    if (cr and (cr / "include/nccl.h").is_file()) or Path("/usr/include/nccl.h").is_file():
        return None
    try:
        import nvidia.nccl as wheel  # noqa: PLC0415 (only on a machine with torch's wheels)
    except ImportError:
        return None
    return Path(list(wheel.__path__)[0])
