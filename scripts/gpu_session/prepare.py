"""`prepare [--no-prebuild]`, HERE (no device time): the C++ dependencies copied into
.carry/prefix, the GPU binaries built for sm_90 and copied into .carry/bin with the hash of their
sources; and the check that what travels to the device fits."""
import glob
import os
import shutil
import subprocess
import sys
from pathlib import Path

from . import build, settings
from .settings import GBENCH_TARGETS, GPU_TEST_TARGETS, MULTIARCH, OTHER_TARGETS


def tree_bytes(path):
    """Bytes of a file or folder as `du -sb` counts them (apparent sizes, folders included)."""
    path = Path(path)
    total = path.lstat().st_size
    if path.is_dir() and not path.is_symlink():
        for parent, folders, files in os.walk(path):
            total += sum(os.lstat(os.path.join(parent, n)).st_size for n in folders + files)
    return total


def travel_bytes(checkout):
    """The bytes the device tool would send from `checkout`: its tracked and untracked-not-ignored
    files, its shared/ and its .carry (carried)."""
    listed = subprocess.run(["git", "ls-files", "-z", "-co", "--exclude-standard", "--", ".", ":(exclude)shared/",
                             ":(exclude).carry/"], cwd=checkout, capture_output=True, check=True).stdout
    files = sum(os.lstat(os.path.join(checkout, os.fsdecode(f))).st_size
                for f in listed.split(b"\0") if f and os.path.lexists(os.path.join(checkout, os.fsdecode(f))))
    return files + sum(tree_bytes(Path(checkout, d)) for d in ("shared", ".carry") if Path(checkout, d).exists())


def check_travel(checkout, limit_mib):
    """True when what travels from `checkout` is within the limit; says the size either way."""
    total = travel_bytes(checkout)
    carry = Path(checkout, ".carry")
    carry_bytes = tree_bytes(carry) if carry.exists() else 0
    size = f"{total} B (~{total / 1048576:.1f} MiB; .carry {carry_bytes} B)"
    if total > limit_mib << 20:
        print(f"gpu-session: what travels is {size}, over the {limit_mib} MiB this program allows (the device tool "
              "refuses a call over 64 MiB): ignore or carry less", file=sys.stderr)
        return False
    print(f"gpu-session: what travels is {size}, within {limit_mib} MiB")
    return True


def copy_dependencies(prefix):
    """The Debian config files locate everything relative to themselves, so a copy of the same
    layout under one prefix is found with CMAKE_PREFIX_PATH=prefix."""
    shutil.rmtree(prefix, ignore_errors=True)
    for name in ("eigen3", "nlohmann", "benchmark", "gtest", "gmock"):
        shutil.copytree(f"/usr/include/{name}", prefix / "include" / name, symlinks=True)
    # xxHash (the checkpoint file's checksums) is header-only here and has no CMake package: the
    # build puts this folder on the C++ include path (build.configure).
    (prefix / "include/xxhash-only").mkdir(parents=True)
    shutil.copy2("/usr/include/xxhash.h", prefix / "include/xxhash-only/")
    shutil.copytree("/usr/share/eigen3/cmake", prefix / "share/eigen3/cmake", symlinks=True)
    shutil.copytree("/usr/share/cmake/nlohmann_json", prefix / "share/cmake/nlohmann_json", symlinks=True)
    for name in ("benchmark", "GTest"):
        shutil.copytree(f"/usr/{MULTIARCH}/cmake/{name}", prefix / MULTIARCH / "cmake" / name, symlinks=True)
    for lib in ("libbenchmark", "libgtest", "libgmock"):
        for path in glob.glob(f"/usr/{MULTIARCH}/{lib}*"):
            shutil.copy2(path, prefix / MULTIARCH, follow_symlinks=False)


def prebuild(s, carried_bin):
    """The GPU binaries for sm_90, built here from the same sources the device will see. MPI off:
    the device machine has no MPI library to load (the one-rank NCCL test needs none)."""
    folder = s.root / "build/gpu-prebuild"
    src_hash = settings.source_hash(s.root)  # before the build: a source edited meanwhile makes it stale
    if build.configure(s, folder, ["-DZENFLOW_WITH_MPI=OFF"], quiet=True) != 0:
        return False
    targets = build.existing_targets(folder, GPU_TEST_TARGETS + GBENCH_TARGETS + OTHER_TARGETS)
    print(f"gpu-session prepare: building {' '.join(targets)} for sm_90 in {folder}", flush=True)
    jobs = str(os.cpu_count() or 1)
    if subprocess.run(["cmake", "--build", str(folder), "-j", jobs, "--target", *targets]).returncode:
        return False
    carried_bin.mkdir(parents=True)
    for t in targets:
        for parent, _, names in os.walk(folder):
            if t in names and os.access(os.path.join(parent, t), os.X_OK):
                shutil.copy2(os.path.join(parent, t), carried_bin)
    if shutil.which("strip"):  # smaller to carry; a binary that strip refuses stays as it is
        subprocess.run(["strip", "--strip-unneeded", *map(str, carried_bin.iterdir())], stderr=subprocess.DEVNULL)
    if settings.source_hash(s.root) != src_hash:
        print("gpu-session prepare: a source changed during the build: run prepare again", file=sys.stderr)
        return False
    # TARGETS: what this build defined; a target not in it (the NCCL test without NCCL here) is
    # absent there too, and not built on the device's minutes.
    (carried_bin / "TARGETS").write_text("".join(f"{t}\n" for t in targets))
    (carried_bin / "SOURCE_HASH").write_text(src_hash + "\n")
    print(f"gpu-session prepare: .carry/bin built from sources {src_hash}: {len(targets)} binaries")
    return True


def main(args):
    s = settings.Settings.from_env(Path(__file__).resolve().parents[2])
    os.environ["PATH"] += os.pathsep + "/usr/local/cuda/bin"
    # The tree alone over the limit: nothing built here can help, so say it before the long build.
    if not check_travel(s.root, s.travel_limit_mib):
        return 1
    copy_dependencies(s.prefix)
    shutil.rmtree(s.carried_bin, ignore_errors=True)
    if args[:1] != ["--no-prebuild"] and not prebuild(s, s.carried_bin):
        return 1
    subprocess.run(["du", "-sh", str(s.prefix), str(s.carried_bin)], stderr=subprocess.DEVNULL)
    if not check_travel(s.root, s.travel_limit_mib):
        return 1
    print('carry [".carry"] in every device call')
    return 0
