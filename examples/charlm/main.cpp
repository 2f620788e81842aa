// charlm_train: the example trainer. `charlm_train --help` lists the options; the README's quick
// start runs it through bench/engine/offload_modes.py (scripts/demo).
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

#include <zenflow/core/device.hpp>
#include <zenflow/core/log.hpp>

#include "options.hpp"
#include "run.hpp"
#include "trainer.hpp"

#if defined(CHARLM_HAS_MPI)
namespace charlm {
/// charlm_train under mpirun, data parallel: the host backend over MPI, or (`--backend cuda`, built
/// with NCCL) the CUDA backend, one rank per GPU, over NCCL; rank 0 prints and writes the JSON.
inline int main_data_parallel(int argc, char** argv) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  options o;
  try {
    apply_size_preset(o, "cpu");
    if (!parse_args(std::vector<std::string>(argv + 1, argv + argc), o)) {
      if (rank == 0) {
        std::fputs(usage_text(), stdout);
      }
      return 0;
    }
    if (!o.checkpoint_dir.empty()) {
      throw zenflow::invalid_argument("--checkpoint-dir: one process only (not under mpirun)");
    }
#  if !defined(CHARLM_HAS_NCCL)
    if (o.backend == "cuda") {
      throw zenflow::invalid_argument("--backend: built without NCCL, data parallel (mpirun) runs on the "
                                      "host backend only");
    }
#  endif
    zenflow::set_log_handler(zenflow::stderr_log_handler, o.log_level);
    if (rank == 0 && !o.quiet) {
      std::fputs(o.zf.describe(&o.zf_sources).c_str(), stdout);
      std::fputs("\n", stdout);
    }
    bool same = false;
#  if defined(CHARLM_HAS_NCCL)
    const run_result r = o.backend == "cuda" ? run_cuda_mpi(o, same) : run_host_mpi(o, same);
#  else
    const run_result r = run_host_mpi(o, same);
#  endif
    if (rank == 0) {
      print_summary(r);
      std::printf("data parallel: replicas %s\n", same ? "identical" : "DIFFER");
      write_json(r, o);
      write_losses(r, o);
    }
    return same ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "charlm_train (rank %d): %s\n", rank, e.what());
    MPI_Abort(MPI_COMM_WORLD, 1); // the other ranks would wait in a collective
    return 1;
  }
}
} // namespace charlm
#endif

namespace {
/// Launched by mpirun / mpiexec (Open MPI's or a PMI launcher's variables): train data parallel.
bool launched_by_mpi() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr || std::getenv("PMI_SIZE") != nullptr;
}
} // namespace

int main(int argc, char** argv) {
#if defined(CHARLM_HAS_MPI)
  if (launched_by_mpi()) {
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided); // MPI from the training thread only
    const int rc = charlm::main_data_parallel(argc, argv);
    MPI_Finalize();
    return rc;
  }
#else
  if (launched_by_mpi()) { // each rank would train a model of its own, silently
    std::fprintf(stderr,
                 "charlm_train: launched by mpirun, but built without MPI (ZENFLOW_WITH_MPI=OFF or no MPI "
                 "found at configure time): run it without mpirun, or rebuild with MPI\n");
    return 2;
  }
#endif
  charlm::options o;
  try {
    charlm::apply_size_preset(o, "cpu");
    if (!charlm::parse_args(std::vector<std::string>(argv + 1, argv + argc), o)) {
      std::fputs(charlm::usage_text(), stdout);
      return 0;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "charlm_train: %s\n", e.what());
    return 2;
  }
  // zenflow says nothing unless asked. From here on its messages go to stderr from --log-level up:
  // warnings by default; info adds expected notes such as the pageable-memory fallback on a
  // machine without a driver. (The config reader's warnings, logged while the flags were read,
  // are printed below from its record, so no handler listens before this point.)
  zenflow::set_log_handler(zenflow::stderr_log_handler, o.log_level);
  // The resolved zenflow configuration: the mode that runs, every setting and where it came from
  // (the DeepSpeed file's key, DeepSpeed's default, a flag), and the reader's warnings.
  if (o.print_config || !o.quiet) {
    std::fputs(o.zf.describe(&o.zf_sources).c_str(), stdout);
    if (o.print_config) {
      return 0;
    }
    std::fputs("\n", stdout);
  } else {
    for (const auto& w : o.zf_sources.warnings) {
      std::fprintf(stderr, "charlm_train: %s\n", w.c_str()); // --quiet still shows what was ignored
    }
  }
  try {
    const bool want_cuda = o.backend == "cuda" || (o.backend == "auto" && zenflow::cuda_available());
    charlm::run_result r;
    if (want_cuda && (!o.init_weights.empty() || !o.save_weights.empty() || !o.checkpoint_dir.empty())) {
      std::fprintf(stderr, "charlm_train: --init-weights / --save-weights / --checkpoint-dir run on the host "
                           "backend only (add --backend host)\n");
      return 2;
    }
    if (!o.checkpoint_dir.empty()) {
      // Past a file size limit (ulimit -f) a write then fails with EFBIG, reported as a failed
      // save that leaves the previous set in place, instead of the signal killing the process.
      std::signal(SIGXFSZ, SIG_IGN);
    }
#if defined(CHARLM_HAS_CUDA)
    r = want_cuda ? charlm::run_cuda(o) : charlm::run_host(o);
#else
    if (o.backend == "cuda") {
      std::fprintf(stderr, "charlm_train: built without CUDA; use --backend host\n");
      return 2;
    }
    (void)want_cuda;
    r = charlm::run_host(o);
#endif
    charlm::print_summary(r);
    charlm::write_json(r, o);
    charlm::write_losses(r, o);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "charlm_train: %s\n", e.what());
    return 1;
  }
}
