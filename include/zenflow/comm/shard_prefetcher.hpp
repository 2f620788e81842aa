/// @file
/// `shard_prefetcher<C>`: the full weights of a list of sharded layers (shard.hpp), each gathered
/// (all_gather_shard) into one of two full-weight buffers it owns, the next layer's while the
/// current one computes. Allocated once, at construction: two buffers of the largest layer, and on
/// a device communicator a side stream and three events.
///
/// On a device communicator (nccl_communicator, local_device_communicator,
/// emulated_device_communicator) `acquire(i, stream, next)` makes `stream` wait for layer i's
/// gather, then starts `next`'s on the side stream once `stream` has passed everything enqueued
/// before the call (which is what last read that buffer, and what last wrote the shards). Nothing
/// waits on the host, nothing is allocated. Under CUDA graph capture the side stream forks from
/// and joins `stream` through events, so a captured sequence is legal when every prefetch it
/// starts is acquired inside it (end with `next = none`).
///
/// On a host communicator (local_communicator, mpi_communicator) acquire() is a blocking gather of
/// layer i (none ahead: a host gather cannot overlap the caller's compute).
///
/// The communicator: on a device communicator the gathers run on the side stream, so their order
/// against the collectives the trainer enqueues on its own streams (reduce_scatter_shard after
/// backward) is not the same on every rank. Give the prefetcher a communicator of its own (a
/// second ncclComm_t; a second mpi_communicator, which over an emulated device needs
/// MPI_THREAD_MULTIPLE since two stream threads then call MPI), unless nothing else is enqueued on
/// `comm` while a prefetch may be in flight. A host communicator's gathers are in program order.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <cuda_runtime_api.h>

#include <zenflow/comm/communicator.hpp>
#include <zenflow/comm/shard.hpp>
#include <zenflow/core/config.hpp>
#include <zenflow/core/dtype.hpp>
#include <zenflow/core/emulated_device.hpp>
#include <zenflow/core/error.hpp>
#include <zenflow/core/views.hpp>

ZF_NAMESPACE_BEGIN

/// One layer of a prefetcher: this rank's shard of one matrix of the layout, packed channel-major
/// (ld == channel_len) in its working type. The shard is read when its gather runs.
struct shard_gather_layer {
  std::size_t matrix = 0;      ///< index in the shard_layout
  const void* shard = nullptr; ///< shard_elements(matrix, rank) elements of `type`
  dtype type = dtype::f32;
};

template <communicator C>
class shard_prefetcher {
  static constexpr bool on_host = !C::is_device;
  static constexpr bool emulated = C::is_device && emulates_device_memory<C>;
  using event_type = std::conditional_t<emulated, emulated_device::event, cudaEvent_t>;

public:
  /// No layer to prefetch (acquire's `next`).
  static constexpr std::size_t none = static_cast<std::size_t>(-1);

  /// `comm` and `layout` must outlive the prefetcher (see the file comment for which
  /// communicator to give it). Allocates the buffers (and the side stream and events).
  /// @throws invalid_argument naming the argument ('layout', 'layers[i].matrix', ...)
  shard_prefetcher(C& comm, const shard_layout& layout, std::vector<shard_gather_layer> layers)
      : comm_(&comm), layout_(&layout), layers_(std::move(layers)) {
    constexpr std::string_view fn = "zenflow::shard_prefetcher";
    detail::comm::expect_ranks(fn, comm, layout);
    const int me = comm.rank();
    for (std::size_t i = 0; i < layers_.size(); ++i) {
      const std::string arg = "layers[" + std::to_string(i) + "]";
      const shard_gather_layer& l = layers_[i];
      detail::require(l.matrix < layout.matrices(), fn, arg + ".matrix",
                      "is " + std::to_string(l.matrix) + "; the layout has " +
                          std::to_string(layout.matrices()) + " matrices");
      detail::require(l.type == dtype::f32 || l.type == dtype::f16 || l.type == dtype::bf16, fn,
                      arg + ".type", "is not a working type");
      detail::require(l.shard != nullptr || layout.shard_elements(l.matrix, me) == 0, fn, arg + ".shard",
                      "is null with a non-empty shard");
      const shard_matrix& s = layout.matrix(l.matrix);
      bytes_ = std::max(bytes_, static_cast<std::size_t>(s.channels * s.channel_len) * dtype_size(l.type));
    }
    allocate();
  }

  shard_prefetcher(const shard_prefetcher&) = delete;
  shard_prefetcher& operator=(const shard_prefetcher&) = delete;

  /// Waits for the side stream's last gather (teardown), then frees what it allocated.
  ~shard_prefetcher() { release(); }

  /// Layer i's full weights (channels x channel_len, packed, its type): ready for the work
  /// enqueued on `stream` after this call and before the next acquire() (which may start
  /// overwriting the buffer once `stream` has passed that work; use it on `stream` only). Starts
  /// the gather of layer `next` (none: nothing) into the other buffer.
  /// @throws invalid_argument naming 'layer' or 'next' (nothing is enqueued)
  [[nodiscard]] const void* acquire(std::size_t layer, cudaStream_t stream, std::size_t next) {
    constexpr std::string_view fn = "zenflow::shard_prefetcher::acquire";
    detail::require(layer < layers_.size(), fn, "layer",
                    "is " + std::to_string(layer) + "; there are " + std::to_string(layers_.size()) +
                        " layers");
    detail::require(next == none || next < layers_.size(), fn, "next",
                    "is " + std::to_string(next) + "; there are " + std::to_string(layers_.size()) +
                        " layers");
    int b = slot_of(layer);
    if (b < 0) {
      b = current_ < 0 ? 0 : 1 - current_;
      gather(b, layer, stream);
    }
    if constexpr (!on_host) {
      wait(stream, ready_[static_cast<std::size_t>(b)]);
      if (next != none && next != layer && slot_of(next) < 0) {
        gather(1 - b, next, stream);
      }
    }
    current_ = b;
    return data(b);
  }
  /// acquire(layer, stream, layer + 1), none after the last layer: a forward pass in order.
  [[nodiscard]] const void* acquire(std::size_t layer, cudaStream_t stream) {
    return acquire(layer, stream, layer + 1 < layers_.size() ? layer + 1 : none);
  }

  /// Forgets what the buffers hold: call it after the shards change (an optimizer step), unless
  /// every gather since was started after the change (a gather reads the shard when it runs, after
  /// everything enqueued on the acquiring stream before its acquire()).
  void invalidate() noexcept { held_ = {-1, -1}; }

  [[nodiscard]] std::size_t layers() const noexcept { return layers_.size(); }
  /// Bytes of each of the two full-weight buffers (the largest layer).
  [[nodiscard]] std::size_t buffer_bytes() const noexcept { return bytes_; }

private:
  [[nodiscard]] int slot_of(std::size_t layer) const noexcept {
    const auto l = static_cast<std::int64_t>(layer);
    return held_[0] == l ? 0 : (held_[1] == l ? 1 : -1);
  }
  [[nodiscard]] void* data(int b) noexcept {
    if constexpr (on_host) {
      return host_[static_cast<std::size_t>(b)].data();
    } else {
      return buf_[static_cast<std::size_t>(b)];
    }
  }

  /// Layer `layer` gathered into buffer b: now (host), or on the side stream once `stream` has
  /// passed what is enqueued on it so far (device).
  void gather(int b, std::size_t layer, cudaStream_t stream) {
    held_[static_cast<std::size_t>(b)] = -1; // a failed gather leaves nothing held
    const shard_gather_layer& l = layers_[layer];
    const shard_matrix& s = layout_->matrix(l.matrix);
    const std::int64_t mine = layout_->count(l.matrix, comm_->rank());
    void* out = data(b);
    auto run = [&](cudaStream_t on) {
      with_type(l.type, [&](auto* tag) {
        using T = std::remove_pointer_t<decltype(tag)>;
        all_gather_shard(*comm_, *layout_, l.matrix,
                         make_channel_matrix(static_cast<const T*>(l.shard), mine, s.channel_len),
                         make_channel_matrix(static_cast<T*>(out), s.channels, s.channel_len), on);
      });
    };
    if constexpr (on_host) {
      run(stream);
    } else {
      record(freed_, stream);
      wait(side_, freed_);
      run(side_);
      record(ready_[static_cast<std::size_t>(b)], side_);
    }
    held_[static_cast<std::size_t>(b)] = static_cast<std::int64_t>(layer);
  }

  template <class F>
  static void with_type(dtype t, F&& f) {
    if (t == dtype::f16) {
      f(static_cast<half*>(nullptr));
    } else if (t == dtype::bf16) {
      f(static_cast<bfloat16*>(nullptr));
    } else {
      f(static_cast<float*>(nullptr));
    }
  }

  void record(event_type& e, cudaStream_t s) {
    if constexpr (emulated) {
      comm_->device().record(e, s);
    } else {
      detail::check(cudaEventRecord(e, s), "zenflow::shard_prefetcher: cudaEventRecord");
    }
  }
  void wait(cudaStream_t s, event_type& e) {
    if constexpr (emulated) {
      comm_->device().stream_wait(s, e);
    } else {
      detail::check(cudaStreamWaitEvent(s, e, 0), "zenflow::shard_prefetcher: cudaStreamWaitEvent");
    }
  }

  void allocate() {
    if constexpr (on_host) {
      for (auto& h : host_) {
        h.resize(bytes_);
      }
    } else if constexpr (emulated) {
      emulated_device& d = comm_->device();
      for (auto& p : buf_) {
        p = d.allocate(bytes_);
      }
      side_ = d.create_stream();
      for (auto& e : ready_) {
        e = d.create_event();
      }
      freed_ = d.create_event();
    } else {
      try {
        for (auto& p : buf_) {
          if (bytes_ > 0) {
            detail::check(cudaMalloc(&p, bytes_), "zenflow::shard_prefetcher: cudaMalloc");
          }
        }
        detail::check(cudaStreamCreateWithFlags(&side_, cudaStreamNonBlocking),
                      "zenflow::shard_prefetcher: cudaStreamCreateWithFlags");
        for (auto* e : {&ready_[0], &ready_[1], &freed_}) {
          detail::check(cudaEventCreateWithFlags(e, cudaEventDisableTiming),
                        "zenflow::shard_prefetcher: cudaEventCreateWithFlags");
        }
      } catch (...) {
        release();
        throw;
      }
    }
  }

  void release() noexcept {
    if constexpr (emulated) {
      emulated_device& d = comm_->device();
      try {
        d.synchronize_stream(side_);
      } catch (...) {
        // A failed gather is the device's sticky error: the caller's next synchronising call sees it.
      }
      d.destroy_stream(side_);
      for (auto& e : ready_) {
        d.destroy_event(e);
      }
      d.destroy_event(freed_);
      for (auto& p : buf_) {
        try {
          d.free(p);
        } catch (...) {
        }
      }
    } else if constexpr (!on_host) {
      if (side_ != nullptr) {
        (void)cudaStreamSynchronize(side_);
        (void)cudaStreamDestroy(side_);
      }
      for (auto* e : {&ready_[0], &ready_[1], &freed_}) {
        if (*e != nullptr) {
          (void)cudaEventDestroy(*e);
        }
      }
      for (auto& p : buf_) {
        if (p != nullptr) {
          (void)cudaFree(p);
        }
      }
    }
  }

  C* comm_;
  const shard_layout* layout_;
  std::vector<shard_gather_layer> layers_;
  std::size_t bytes_ = 0;
  std::array<std::int64_t, 2> held_{-1, -1}; // the layer each buffer holds (or is gathering)
  int current_ = -1;                         // the buffer the last acquire() returned
  std::array<std::vector<std::byte>, 2> host_{};
  std::array<void*, 2> buf_{nullptr, nullptr};
  cudaStream_t side_ = nullptr;
  std::array<event_type, 2> ready_{}; // buffer b's gather done (side stream)
  event_type freed_{};                // the acquiring stream's point before a gather
};

ZF_NAMESPACE_END
