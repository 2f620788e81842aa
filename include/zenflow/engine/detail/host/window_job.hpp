/// @file
/// The host window as a function: (accumulator, n_w, lr) -> new working weights (into the upload
/// buffers or through the plan's upload stage), the host AdamW of every host-set channel of this rank. Runs
/// on the window job's thread (the window queue's executor, or the training thread for a synchronous window),
/// after consumer_progress::take_n_w handed it the window's accumulator (host/handover.hpp); it writes the
/// host optimizer state, the new weights and rest_l1, and reads the accumulators and sets (reporting each
/// parameter's accumulator read: with one buffer the next window waits for it).
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <utility>
#include <vector>

#include <zenflow/core/config.hpp>
#include <zenflow/core/dtype.hpp>
#include <zenflow/core/error.hpp>
#include <zenflow/core/worker_pool.hpp>
#include <zenflow/engine/config.hpp>
#include <zenflow/engine/detail/host/handover.hpp>
#include <zenflow/engine/detail/host/host_param.hpp>
#include <zenflow/engine/detail/registry/params.hpp>
#include <zenflow/optim/adamw.hpp>
#include <zenflow/optim/cpu_adamw.hpp>
#include <zenflow/optim/types.hpp>

ZF_NAMESPACE_BEGIN
namespace detail {

/// |acc|_1 over a parameter's host rows (`acc` row i = the channel rows[i], ascending; rows of
/// `len`; `channels` x `len` the whole block), in double. Summed as if over the block's
/// channels x len array with every other row zero, in fixed chunks of it in a fixed order: the
/// same bits for any thread count (and those of the accumulator when it held every channel's row).
inline double rows_l1_norm(const std::vector<float>& acc,
                           const std::vector<std::int32_t>& rows,
                           std::int64_t len,
                           std::int64_t channels,
                           worker_pool* pool) {
  constexpr std::int64_t chunk = 1 << 16;
  const std::int64_t n = channels * len;
  std::vector<double> part(static_cast<std::size_t>((n + chunk - 1) / chunk), 0.0);
  auto sum = [&](std::int64_t c, std::int64_t lo, std::int64_t hi) {
    double s = 0.0;
    auto r = std::lower_bound(rows.begin(), rows.end(), static_cast<std::int32_t>(lo / len));
    for (; r != rows.end() && *r * len < hi; ++r) {
      const std::int64_t end = std::min(hi, (*r + 1) * len);
      const std::int64_t at = (r - rows.begin()) * len - *r * len; // block element i is acc[at + i]
      for (std::int64_t i = std::max(lo, *r * len); i < end; ++i) {
        s += std::fabs(static_cast<double>(acc[static_cast<std::size_t>(at + i)]));
      }
    }
    part[static_cast<std::size_t>(c)] = s;
  };
  if (pool != nullptr) {
    pool->parallel_for(n, chunk, sum);
  } else {
    for (std::int64_t c = 0; c * chunk < n; ++c) {
      sum(c, c * chunk, std::min(n, (c + 1) * chunk));
    }
  }
  double total = 0.0;
  for (const double s : part) {
    total += s;
  }
  return total;
}

/// Where a host window's new weights go: into each parameter's upload buffer, all of a
/// parameter's rows at once (the rows are copied up after the window, host_jobs). The other
/// sink is the plan's upload stage (host_jobs), a few chunks at a time.
template <class HostBuffer>
struct buffered_upload_sink {
  std::vector<host_param<HostBuffer>>* host;
  const std::vector<param_info>* params;
  /// Rows of `p` one call writes (0: all).
  [[nodiscard]] std::int64_t rows_per_call(std::size_t /*p*/) const noexcept { return 0; }
  /// Where the new weights of `p`'s host-set positions [pos, pos + n) go.
  [[nodiscard]] std::byte* begin_rows(std::size_t p, std::int64_t pos, std::int64_t /*n*/) const {
    auto& h = (*host)[p];
    return h.upload.data() + static_cast<std::size_t>(pos - h.upload_origin()) * (*params)[p].channel_bytes();
  }
  /// They are written.
  void end_rows(std::size_t /*p*/, std::int64_t /*pos*/, std::int64_t /*n*/) const noexcept {}
};

/// One host window: AdamW on acc[accumulator] / n_w for every host-set channel of `host`, the new
/// working weights to `sink` (buffered_upload_sink's shape). The accumulator is left as it is (4
/// bytes per element fewer than zeroing it): the next window's first good step overwrites it.
/// With host_moments_per_step the window stands for n_w steps: the moments decay by beta^n_w and
/// the counts advance by n_w, so that their memory is as many steps long as on the device (beta1
/// 0.9 and windows of 4 would otherwise remember 40 steps). The parameters go in `order` first
/// (the order the next window's rows come in), then the others; `read(p)` is called once p's
/// accumulator rows are read. Each parameter's update is its own, so the order changes no bit.
/// `wp`: the lr scales and the parameters with a gradient in the window, as they were at its
/// close (one without is not updated). Returns the seconds it took.
template <class HostBuffer, class Sink, class Read>
double run_host_window(const config& cfg,
                       const std::vector<param_info>& params,
                       std::vector<host_param<HostBuffer>>& host,
                       std::size_t accumulator,
                       std::int32_t n_w,
                       float lr,
                       const window_params& wp,
                       worker_pool* pool,
                       const std::vector<std::size_t>& order,
                       Sink& sink,
                       Read&& read) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::size_t a = accumulator;
  std::vector<char> done(host.size(), 0);
  const auto window = [&](std::size_t p) {
    const auto& pi = params[p];
    auto& h = host[p];
    done[p] = 1;
    const double rest_l1 = std::exchange(h.rest_l1[a], 0.0);
    if (!pi.host_side || h.host_set.empty()) {
      return;
    }
    // Without a gradient in the window: no update; its upload gets the current master (steps 0),
    // so that every window uploads and applies every host-side parameter alike.
    const std::int32_t steps = wp.updates(p) ? n_w : 0;
    // The parameter's lr (lr x lr_scale, as on the device: pi.hparams' product), then the window's
    // scaling. The scale is the window's copy from its close: engine::set_lr_scale may write
    // pi.lr_scale on the training thread while this job runs, so the job never reads it there.
    adamw_hparams hp = cfg.adam;
    hp.weight_decay = pi.weight_decay;
    hp.lr = lr * (wp.lr_scale.empty() ? pi.lr_scale : wp.lr_scale[p]);
    const double coherence =
        cfg.host_lr_scale == host_lr_scaling::snr
            ? rows_l1_norm(h.sum(a), h.shard.rows, pi.channel_len, h.shard.channels, pool) / rest_l1
            : 1.0;
    hp.lr =
        static_cast<float>(static_cast<double>(hp.lr) * host_lr_factor(cfg.host_lr_scale, n_w, coherence));
    // This rank's share only (data parallel: its block; the others' weights come by all-gather).
    const auto rows = static_cast<std::int64_t>(h.shard.rows.size());
    const std::int64_t step =
        sink.rows_per_call(p) > 0 ? sink.rows_per_call(p) : std::max<std::int64_t>(rows, 1);
    h.moments.visit([&](auto m, auto v) {
      using M = moment_of_t<decltype(m)>;
      const basic_channel_state<M> st{h.master.data(), m, v, h.counts.data(), h.shard.channels,
                                      pi.channel_len};
      dispatch_dtype(pi.type, [&](auto tag) {
        using T = decltype(tag);
        for (std::int64_t b = 0; b < rows; b += step) {
          const std::int64_t count = std::min(step, rows - b);
          auto* out = reinterpret_cast<T*>(sink.begin_rows(p, h.shard.pos + b, count));
          check(host::adamw_window<T, T, M>(st, h.sum(a).data() + b * pi.channel_len, h.shard.rows.data() + b,
                                            count, nullptr, 1.0f, steps, hp, out, pool,
                                            host::window_acc::keep,
                                            cfg.host_moments_per_step && steps > 0 ? steps : 1,
                                            h.shard.origin + h.shard.first, host::window_acc_rows::packed),
                "zenflow::engine: adamw_window");
          sink.end_rows(p, h.shard.pos + b, count);
        }
      });
    });
    read(p);
  };
  for (const std::size_t p : order) {
    if (p < host.size() && done[p] == 0) {
      window(p);
    }
  }
  for (std::size_t p = 0; p < host.size(); ++p) {
    if (done[p] == 0) {
      window(p);
    }
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

} // namespace detail
ZF_NAMESPACE_END
