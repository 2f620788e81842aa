// run_cuda: the trainer on the CUDA backend (cuBLAS model, zenflow::engine<cuda_backend>);
// run_cuda_mpi: the same under mpirun, one rank per GPU over NCCL (`--zero 3`: a sharded engine,
// sharded_optimizer.hpp, the trainer's collectives on a second NCCL communicator).
#include <chrono>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <zenflow/core/error.hpp>
#include <zenflow/core/memory.hpp>
#include <zenflow/engine/engine.cuh>
#if defined(CHARLM_HAS_NCCL)
#  include <mpi.h>

#  include <nccl.h>

#  include <zenflow/comm/nccl_communicator.cuh>
#  include <zenflow/comm/shard.cuh>
#endif

#include "cuda_charlm.cuh"
#include "run.hpp"
#include "trainer.hpp"

namespace charlm {

run_result run_cuda(options o) {
  dataset data = make_dataset(o);
  zenflow::stream st;
  cuda_charlm model(o.shape, o.seed, st);
  zenflow::engine<zenflow::cuda_backend> opt(o.zf);
  register_params(model, opt);
  opt.initialize(st);
  return train(model, opt, data, o, st.get());
}

#if defined(CHARLM_HAS_NCCL)
namespace {
/// The NCCL communicator of MPI_COMM_WORLD on this rank's GPU (rank 0's unique id broadcast over
/// MPI), destroyed with the object: the engine's nccl_communicator only borrows it. Non-blocking
/// (ncclConfig_t::blocking = 0), so that no NCCL call can wait inside NCCL for a rank that is gone:
/// nccl_communicator bounds its waits, and its watchdog revokes a collective that never ends.
class world_nccl {
public:
  world_nccl(int rank, int ranks) {
    ncclUniqueId id{};
    if (rank == 0) {
      check(ncclGetUniqueId(&id), "ncclGetUniqueId");
    }
    MPI_Bcast(&id, static_cast<int>(sizeof(id)), MPI_BYTE, 0, MPI_COMM_WORLD);
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclResult_t r = ncclCommInitRankConfig(&comm_, ranks, id, rank, &config);
    // Non-blocking: the initialization goes on in NCCL's threads; wait for it, bounded.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(5);
    while (r == ncclInProgress) {
      if (std::chrono::steady_clock::now() > deadline) {
        throw zenflow::comm_timeout("charlm_train: ncclCommInitRankConfig: not done after 5 minutes");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      check(ncclCommGetAsyncError(comm_, &r), "ncclCommGetAsyncError");
    }
    check(r, "ncclCommInitRankConfig");
  }
  world_nccl(const world_nccl&) = delete;
  world_nccl& operator=(const world_nccl&) = delete;
  ~world_nccl() { (void)ncclCommDestroy(comm_); }
  [[nodiscard]] ncclComm_t get() const { return comm_; }

private:
  static void check(ncclResult_t r, const char* what) {
    if (r != ncclSuccess) {
      throw zenflow::comm_error(std::string("charlm_train: ") + what + ": " + ncclGetErrorString(r));
    }
  }
  ncclComm_t comm_ = nullptr;
};

/// This rank's GPU: its rank among the ranks of its node (one rank per GPU).
int node_local_device(int rank) {
  MPI_Comm node = MPI_COMM_NULL;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
  int local = 0;
  int local_ranks = 1;
  MPI_Comm_rank(node, &local);
  MPI_Comm_size(node, &local_ranks);
  MPI_Comm_free(&node);
  int devices = 0;
  zenflow::detail::check(cudaGetDeviceCount(&devices), "charlm_train: cudaGetDeviceCount");
  if (local_ranks > devices) {
    throw zenflow::invalid_argument("mpirun: " + std::to_string(local_ranks) + " ranks on this node but " +
                                    std::to_string(devices) + " GPU(s): run one rank per GPU");
  }
  return local;
}
} // namespace

run_result run_cuda_mpi(options o, bool& replicas_same) {
  int ranks = 1;
  const int rank = world_rank_for_training(o, ranks);
  zenflow::detail::check(cudaSetDevice(node_local_device(rank)), "charlm_train: cudaSetDevice");
  const world_nccl nccl(rank, ranks); // after cudaSetDevice: NCCL binds the current device
  dataset data = make_dataset(o);     // the same batches on every rank
  zenflow::stream st;
  cuda_charlm model(o.shape, o.seed, st); // the same seed: the replicas start equal
  const auto train_with = [&](auto& opt) {
    register_params(model, opt);
    opt.initialize(st);
    run_result res = train(model, opt, data, o, st.get(), rank, ranks);
    res.comm_bytes = opt.stats().comm_bytes;
    return std::pair{res, opt.stats_over_ranks(st.get())}; // every rank calls it
  };
  auto [r, all] = [&] {
    if (o.zero == 3) { // each rank's shard of every matrix (sharded_optimizer.hpp)
      // The trainer's reduce-scatters and gathers on a communicator of their own: an
      // nccl_communicator's watchdog serializes only its own calls on its ncclComm_t.
      const world_nccl trainer_nccl(rank, ranks);
      sharded_optimizer<cuda_charlm::weight_t, zenflow::cuda_backend, zenflow::nccl_communicator> opt(
          o.zf, zenflow::nccl_communicator(nccl.get()), zenflow::nccl_communicator(trainer_nccl.get()));
      return train_with(opt);
    }
    zenflow::engine<zenflow::cuda_backend, zenflow::nccl_communicator> opt(
        o.zf, zenflow::cuda_backend{}, zenflow::nccl_communicator(nccl.get()));
    return train_with(opt);
  }();
  r.ranks = ranks;
  r.comm_bytes_all = all.comm_bytes;
  r.host_memory_all = all.memory.host_total();
  replicas_same = replicas_identical(model.all_weights());
  return r;
}
#endif

} // namespace charlm
