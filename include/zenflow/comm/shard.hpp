/// @file
/// Sharded weights (ZeRO-3), the trainer's side: which channels of each matrix a rank holds
/// (`shard_channels`), its shard of the mean gradient after backward (`reduce_scatter_shard`), and
/// the full weights from every rank's shard before forward (`all_gather_shard`; a prefetcher over
/// a layer list is shard_prefetcher.hpp). The engine's sharded policy is not here (see
/// docs/data-parallel.md).
///
/// The rule: rank r holds channels [first(m, r), first(m, r) + count(m, r)) of matrix m, the
/// ZeRO-2 owner block of `partition_channels` (partition.hpp) over the same list, each matrix's
/// channel weighing `channel_len x state_bytes` bytes: contiguous blocks in rank order that cover
/// every channel once, balanced by host-state bytes over the whole list. A ZeRO-3 rank's shard is
/// therefore exactly the block whose host state it keeps under ZeRO-2.
///
/// Determinism: reduce_scatter_shard widens the rows to fp32 (exact), reduces them with the
/// communicator's reduce_scatter_mean and narrows the mean once to the working type, as the
/// engine's data-parallel mean gradient does with all_reduce_mean (engine/detail/dp/
/// mean_gradients.hpp). On the host communicators (mpi_communicator's rank-order float64 fold,
/// divided, rounded once; one rank: the value) the two reductions give the same bits, so the
/// shard is bit for bit the engine's rows of the mean. On nccl_communicator every rank gets the
/// same bits, but NCCL's reduce-scatter order need not be its all-reduce's (see the model).
///
/// Streams and failures: as the communicator's collectives (communicator.hpp). On a device
/// communicator everything is enqueued on `stream` (no wait, no allocation: the fp32 staging is
/// the caller's); on a host one the call is complete when it returns. Arguments are checked before
/// anything is sent or written: a bad one throws `zenflow::invalid_argument` naming it on the rank
/// that passed it (the other ranks, which then miss the collective, see the communicator's
/// bound, not a hang). `shard_layout::verify_same` checks that every rank built the same layout:
/// on a mismatch every rank throws.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>

#include <zenflow/comm/communicator.hpp>
#include <zenflow/comm/detail/shard_rows.hpp>
#include <zenflow/comm/hash.hpp>
#include <zenflow/comm/partition.hpp>
#include <zenflow/core/config.hpp>
#include <zenflow/core/dtype.hpp>
#include <zenflow/core/error.hpp>
#include <zenflow/core/views.hpp>

ZF_NAMESPACE_BEGIN

/// One matrix of the sharded list, in a trainer's terms.
struct shard_matrix {
  std::int64_t channels = 0;    ///< channels (>= 0): rows of a channel-major matrix
  std::int64_t channel_len = 0; ///< elements per channel (>= 1)
  /// Bytes of host state per element (>= 1): what the engine keeps per element of a host-side
  /// matrix, 12 with fp32 moments (fp32 master, m, v), 8 with bf16 moments. It only balances the
  /// blocks; use the engine's value so that the shards are its owner blocks.
  std::uint32_t state_bytes = 12;
};

/// Which channels of every matrix every rank holds; see the file comment for the rule.
class shard_layout {
public:
  shard_layout() = default;

  [[nodiscard]] int ranks() const noexcept { return part_.ranks(); }
  [[nodiscard]] std::size_t matrices() const noexcept { return list_.size(); }
  [[nodiscard]] const shard_matrix& matrix(std::size_t m) const noexcept { return list_[m]; }
  /// First channel of matrix m held by rank r.
  [[nodiscard]] std::int64_t first(std::size_t m, int r) const noexcept { return part_.begin(m, r); }
  /// Channels of matrix m held by rank r.
  [[nodiscard]] std::int64_t count(std::size_t m, int r) const noexcept { return part_.count(m, r); }
  /// Elements of rank r's shard of matrix m (count x channel_len).
  [[nodiscard]] std::size_t shard_elements(std::size_t m, int r) const noexcept {
    return static_cast<std::size_t>(count(m, r) * list_[m].channel_len);
  }
  /// The rank holding channel c of matrix m.
  [[nodiscard]] int holder(std::size_t m, std::int64_t c) const noexcept { return part_.owner(m, c); }
  /// The owner partition these shards are (partition_channels of the same list).
  [[nodiscard]] const channel_partition& partition() const noexcept { return part_; }
  /// Fingerprint of the list and the rank count (what verify_same compares).
  [[nodiscard]] std::uint64_t hash() const {
    stable_hash h;
    h.add_string("zenflow::shard_layout").add_i64(ranks()).add_u64(list_.size());
    for (const shard_matrix& m : list_) {
      h.add_i64(m.channels).add_i64(m.channel_len).add_u64(m.state_bytes);
    }
    return h.value();
  }

  /// Checks that `comm` has ranks() ranks (invalid_argument naming 'comm', on this rank), then
  /// that every rank built the same layout (`comm.verify_same`: on a mismatch every rank throws
  /// invalid_argument naming "the sharded matrix list"). Blocking.
  template <communicator C>
  void verify_same(C& comm, cudaStream_t stream) const {
    detail::require(comm.size() == ranks(), "zenflow::shard_layout::verify_same", "comm",
                    "has " + std::to_string(comm.size()) + " ranks; the layout was built for " +
                        std::to_string(ranks()));
    comm.verify_same(hash(), "the sharded matrix list", stream);
  }

private:
  friend shard_layout shard_channels(std::span<const shard_matrix> matrices, int ranks);
  std::vector<shard_matrix> list_;
  channel_partition part_;
};

/// The shards of `matrices` over `ranks` ranks (the owner partition of partition_channels, each
/// channel weighing channel_len x state_bytes bytes).
/// @throws invalid_argument naming the argument ('ranks', 'matrices[i].channels', ...)
[[nodiscard]] inline shard_layout shard_channels(std::span<const shard_matrix> matrices, int ranks) {
  constexpr const char* fn = "zenflow::shard_channels";
  detail::require(ranks >= 1, fn, "ranks", "is " + std::to_string(ranks) + "; it must be at least 1");
  std::vector<partition_matrix> list;
  list.reserve(matrices.size());
  for (std::size_t m = 0; m < matrices.size(); ++m) {
    const shard_matrix& s = matrices[m];
    const std::string arg = "matrices[" + std::to_string(m) + "]";
    detail::require(s.channels >= 0, fn, arg + ".channels", "is negative");
    detail::require(s.channel_len >= 1, fn, arg + ".channel_len",
                    "is " + std::to_string(s.channel_len) + "; it must be at least 1");
    detail::require(s.state_bytes >= 1, fn, arg + ".state_bytes", "is 0");
    detail::require(s.channels <= INT64_MAX / s.channel_len &&
                        static_cast<std::uint64_t>(s.channel_len) <= UINT64_MAX / s.state_bytes,
                    fn, arg, "is too large (its element or byte count overflows)");
    list.push_back({s.channels, static_cast<std::uint64_t>(s.channel_len) * s.state_bytes});
  }
  shard_layout out;
  out.part_ = partition_channels(list, ranks);
  out.list_.assign(matrices.begin(), matrices.end());
  return out;
}

/// fp32 staging that reduce_scatter_shard needs for matrix m on rank r: the whole matrix widened
/// plus rank r's shard of the mean (channels x channel_len + count(m, r) x channel_len floats).
[[nodiscard]] inline std::size_t shard_staging_floats(const shard_layout& layout, std::size_t m, int r) {
  const shard_matrix& s = layout.matrix(m);
  return static_cast<std::size_t>(s.channels * s.channel_len) + layout.shard_elements(m, r);
}

/// The most any matrix of the layout needs on rank r: one staging buffer of this size serves
/// every reduce_scatter_shard of the list.
[[nodiscard]] inline std::size_t shard_staging_floats(const shard_layout& layout, int r) {
  std::size_t most = 0;
  for (std::size_t m = 0; m < layout.matrices(); ++m) {
    most = std::max(most, shard_staging_floats(layout, m, r));
  }
  return most;
}

namespace detail::comm {

template <class T>
void expect_matrix(std::string_view fn,
                   std::string_view name,
                   const channel_matrix<T>& v,
                   std::int64_t channels,
                   std::int64_t channel_len,
                   std::string_view whose) {
  const std::string n(name);
  require(v.channels == channels, fn, n + ".channels",
          "is " + std::to_string(v.channels) + "; " + std::string(whose) + " has " +
              std::to_string(channels));
  require(v.channel_len == channel_len, fn, n + ".channel_len",
          "is " + std::to_string(v.channel_len) + "; the layout's matrix has " + std::to_string(channel_len));
  if (v.layout == channel_layout::contiguous) {
    require(v.ld >= v.channel_len, fn, n + ".ld", "must be >= channel_len for contiguous channels");
  } else {
    require(v.layout == channel_layout::strided, fn, n + ".layout", "is not a channel_layout");
    require(v.ld >= v.channels, fn, n + ".ld", "must be >= channels for strided channels");
  }
  require(v.data != nullptr || v.elements() == 0, fn, n + ".data", "is null with a non-zero size");
}

inline void expect_matrix_index(std::string_view fn, std::size_t m, std::size_t matrices) {
  require(m < matrices, fn, "matrix",
          "is " + std::to_string(m) + "; the layout has " + std::to_string(matrices) + " matrices");
}

template <communicator C>
void expect_ranks(std::string_view fn, const C& comm, const shard_layout& layout) {
  require(comm.size() == layout.ranks(), fn, "layout",
          "was built for " + std::to_string(layout.ranks()) + " ranks; the communicator has " +
              std::to_string(comm.size()));
}

} // namespace detail::comm

/// This rank's shard of the mean over ranks of matrix m's gradients: `shard`(c, i) = the mean of
/// every rank's `grads`(first + c, i), on a host communicator with the bits of the engine's
/// data-parallel mean (file comment). Collective: every rank calls it, with the same layout and
/// matrix, in the same order as its other collectives on `comm`.
/// @param comm     the communicator (host or device memory, as its `is_device` says)
/// @param layout   the shards (shard_channels over comm.size() ranks)
/// @param m        the matrix's index in the layout
/// @param grads    this rank's gradients of the whole matrix (either channel layout, any valid ld)
/// @param shard    out: channels [first(m, rank), + count(m, rank)) of the mean (either layout)
/// @param staging  fp32 scratch of at least shard_staging_floats(layout, m, rank) floats, in the
///                 communicator's memory, overlapping neither `grads` nor `shard`; on a device
///                 communicator it must not be reused until the stream has passed this call
/// @param stream   the stream the work is enqueued on (ignored by host communicators)
/// @throws invalid_argument naming the argument, before anything is sent or written
template <class T, communicator C>
void reduce_scatter_shard(C& comm,
                          const shard_layout& layout,
                          std::size_t m,
                          channel_matrix<const T> grads,
                          channel_matrix<T> shard,
                          std::span<float> staging,
                          cudaStream_t stream) {
  static_assert(is_working_type_v<T>, "zenflow: working type must be float, __half or __nv_bfloat16");
  constexpr std::string_view fn = "zenflow::reduce_scatter_shard";
  detail::comm::expect_ranks(fn, comm, layout);
  detail::comm::expect_matrix_index(fn, m, layout.matrices());
  const int me = comm.rank();
  const shard_matrix& s = layout.matrix(m);
  detail::comm::expect_matrix(fn, "grads", grads, s.channels, s.channel_len, "the layout's matrix");
  detail::comm::expect_matrix(fn, "shard", shard, layout.count(m, me), s.channel_len,
                              "rank " + std::to_string(me) + "'s shard (first channel " +
                                  std::to_string(layout.first(m, me)) + ")");
  const std::size_t need = shard_staging_floats(layout, m, me);
  detail::require(staging.size() >= need, fn, "staging",
                  "holds " + std::to_string(staging.size()) + " floats; this matrix needs " +
                      std::to_string(need) + " (shard_staging_floats)");
  detail::require(staging.data() != nullptr || need == 0, fn, "staging", "is null");
  const std::size_t total = static_cast<std::size_t>(s.channels * s.channel_len);
  std::vector<std::size_t> counts(static_cast<std::size_t>(layout.ranks()));
  for (int r = 0; r < layout.ranks(); ++r) {
    counts[static_cast<std::size_t>(r)] = layout.shard_elements(m, r);
  }
  float* wide = staging.data();
  float* mean = wide + total;
  detail::comm::widen_rows(comm, grads, wide, stream);
  comm.reduce_scatter_mean(wide, mean, std::span<const std::size_t>(counts), stream);
  detail::comm::narrow_rows(comm, static_cast<const float*>(mean), shard, stream);
}

/// Every rank's shard of matrix m gathered into the full matrix: `full`'s channels
/// [first(m, r), + count(m, r)) receive rank r's `shard`, bit for bit. Collective, like
/// reduce_scatter_shard. Both sides packed channel-major (contiguous layout, ld == channel_len),
/// so that the shards travel as they lie. In place when `shard` is this rank's block of `full`
/// (any other overlap is an error).
/// @throws invalid_argument naming the argument, before anything is sent or written
template <class T, communicator C>
void all_gather_shard(C& comm,
                      const shard_layout& layout,
                      std::size_t m,
                      channel_matrix<const T> shard,
                      channel_matrix<T> full,
                      cudaStream_t stream) {
  static_assert(is_working_type_v<T>, "zenflow: working type must be float, __half or __nv_bfloat16");
  constexpr std::string_view fn = "zenflow::all_gather_shard";
  detail::comm::expect_ranks(fn, comm, layout);
  detail::comm::expect_matrix_index(fn, m, layout.matrices());
  const int me = comm.rank();
  const shard_matrix& s = layout.matrix(m);
  detail::comm::expect_matrix(fn, "shard", shard, layout.count(m, me), s.channel_len,
                              "rank " + std::to_string(me) + "'s shard (first channel " +
                                  std::to_string(layout.first(m, me)) + ")");
  detail::comm::expect_matrix(fn, "full", full, s.channels, s.channel_len, "the layout's matrix");
  detail::require(shard.layout == channel_layout::contiguous && shard.ld == shard.channel_len, fn, "shard",
                  "must be packed (contiguous channels, ld == channel_len)");
  detail::require(full.layout == channel_layout::contiguous && full.ld == full.channel_len, fn, "full",
                  "must be packed (contiguous channels, ld == channel_len)");
  const std::size_t elements = static_cast<std::size_t>(s.channels * s.channel_len);
  const T* mine = full.data + layout.first(m, me) * s.channel_len;
  const std::size_t mine_elements = layout.shard_elements(m, me);
  const auto at = [](const T* p) { return reinterpret_cast<std::uintptr_t>(p); };
  const bool overlaps = mine_elements > 0 && elements > 0 && at(shard.data) < at(full.data + elements) &&
                        at(full.data) < at(shard.data + mine_elements);
  detail::require(!overlaps || shard.data == mine, fn, "shard",
                  "overlaps 'full' elsewhere than at this rank's block (only the exact block runs in place)");
  std::vector<std::size_t> bytes(static_cast<std::size_t>(layout.ranks()));
  for (int r = 0; r < layout.ranks(); ++r) {
    bytes[static_cast<std::size_t>(r)] = layout.shard_elements(m, r) * sizeof(T);
  }
  comm.all_gather_bytes(shard.data, full.data, std::span<const std::size_t>(bytes), stream);
}

ZF_NAMESPACE_END
