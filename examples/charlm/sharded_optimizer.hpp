// charlm's `--zero 3` under mpirun: the trainer's side of ZeRO-3 around a sharded engine
// (docs/data-parallel.md, "The sharded engine"), on the host backend over MPI or on the CUDA
// backend over NCCL (train_cuda.cu, with <zenflow/comm/shard.cuh> for the helpers' kernels). This
// small model keeps its full weights and gradients; the wrapper registers only this rank's shard
// of every matrix with the engine, reduce-scatters each full gradient into the shard of the mean
// before the engine's step, and all-gathers the shards back into the model's weights after it
// (on CUDA all of it stream-ordered on the step's stream). A trainer that does not hold the full
// model gathers layer by layer instead (shard_prefetcher.hpp). Vectors stay replicated: the
// engine averages their gradients. On the host the result is bit for bit `--zero 2`'s and one
// rank's on the mean gradient (over NCCL each rank gets the same bits, but NCCL's reduce-scatter
// order need not be its all-reduce's: comm/shard.hpp).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include <zenflow/comm/mpi_communicator.hpp>
#include <zenflow/comm/shard.hpp>
#include <zenflow/engine/host_backend.hpp>
#include <zenflow/engine/sharded.hpp>

namespace charlm {

/// `Backend`'s buffers hold the shards (device memory on CUDA), `Comm` is the communicator of both
/// the engine and the trainer's collectives (two objects: the engine keeps its own).
template <class T, class Backend = zenflow::host_backend, class Comm = zenflow::mpi_communicator>
class sharded_optimizer {
  template <class U>
  using buffer = typename Backend::template device_buffer<U>;

public:
  using engine_type = zenflow::engine<Backend, zenflow::sharded<Comm>>;

  /// `engine_comm` goes to the engine, `comm` carries the trainer's reduce-scatters and gathers.
  sharded_optimizer(const zenflow::config& cfg, Comm engine_comm, Comm comm)
      : comm_(std::move(comm)), e_(cfg, Backend{}, std::move(engine_comm)),
        state_bytes_(cfg.host_moments == zenflow::moment_precision::bf16 ? 8u : 12u) {}

  /// Registration is deferred to initialize(): the shards need every matrix's shape first.
  zenflow::param_id add_matrix(T* w, const T* g, std::int64_t rows, std::int64_t cols) {
    add(true, w, g, rows, cols);
    return {static_cast<std::int32_t>(params_.size() - 1)};
  }
  zenflow::param_id add_vector(T* w, const T* g, std::int64_t n) {
    add(false, w, g, 1, n);
    return {static_cast<std::int32_t>(params_.size() - 1)};
  }

  void initialize(cudaStream_t stream) {
    std::vector<zenflow::shard_matrix> list;
    for (const auto& p : params_) {
      if (p.matrix) {
        list.push_back({p.rows, p.cols, state_bytes_});
      }
    }
    layout_ = zenflow::shard_channels(list, comm_.size());
    layout_.verify_same(comm_, stream);
    const int me = comm_.rank();
    std::size_t m = 0;
    for (auto& p : params_) {
      if (!p.matrix) {
        (void)e_.add_vector(p.w, p.g, p.cols);
        continue;
      }
      p.m = m++;
      p.first = layout_.first(p.m, me);
      p.count = layout_.count(p.m, me);
      const auto n = static_cast<std::size_t>(p.count * p.cols);
      p.ws = buffer<T>(n);
      p.gs = buffer<T>(n);
      Backend{}.synchronize(nullptr); // a CUDA allocation (the null stream's), before `stream` uses it
      Backend{}.copy_d2d(p.ws.data(), p.w + p.first * p.cols, n * sizeof(T), stream);
      (void)e_.add_matrix(p.ws.data(), p.gs.data(), p.count, p.cols,
                          {.shard = zenflow::shard_range{p.first, p.rows}});
    }
    staging_ = buffer<float>(zenflow::shard_staging_floats(layout_, me));
    Backend{}.synchronize(nullptr);
    e_.initialize(stream);
  }

  /// The shards of the mean gradient, the engine's step, the new weights gathered.
  zenflow::step_report step(float lr, cudaStream_t stream) {
    for (auto& p : params_) {
      if (p.matrix) {
        zenflow::reduce_scatter_shard<T>(comm_, layout_, p.m,
                                         zenflow::make_channel_matrix(p.g, p.rows, p.cols),
                                         zenflow::make_channel_matrix(p.gs.data(), p.count, p.cols),
                                         std::span<float>(staging_.data(), staging_.size()), stream);
      }
    }
    const zenflow::step_report rep = e_.step(lr, stream);
    gather(stream);
    return rep;
  }
  void flush(cudaStream_t stream) {
    e_.flush(stream);
    gather(stream);
  }
  [[nodiscard]] const zenflow::stats& stats() const noexcept { return e_.stats(); }
  [[nodiscard]] zenflow::stats stats_over_ranks(cudaStream_t stream = nullptr) {
    return e_.stats_over_ranks(stream);
  }

private:
  struct param {
    bool matrix = false;
    T* w = nullptr;
    const T* g = nullptr;
    std::int64_t rows = 0, cols = 0;
    std::size_t m = 0;
    std::int64_t first = 0, count = 0;
    buffer<T> ws, gs; // the shard's weights and mean gradient (the engine's)
  };
  void add(bool matrix, T* w, const T* g, std::int64_t rows, std::int64_t cols) {
    param p;
    p.matrix = matrix;
    p.w = w;
    p.g = g;
    p.rows = rows;
    p.cols = cols;
    params_.push_back(std::move(p));
  }
  void gather(cudaStream_t stream) {
    for (auto& p : params_) {
      if (p.matrix) {
        zenflow::all_gather_shard<T>(comm_, layout_, p.m,
                                     zenflow::make_channel_matrix<const T>(p.ws.data(), p.count, p.cols),
                                     zenflow::make_channel_matrix(p.w, p.rows, p.cols), stream);
      }
    }
  }

  Comm comm_;
  engine_type e_;
  std::uint32_t state_bytes_;
  std::vector<param> params_;
  zenflow::shard_layout layout_;
  buffer<float> staging_;
};

} // namespace charlm
