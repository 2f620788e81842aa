/// @file
/// ZeRO-2's reduction buckets without a backend (grad_buckets.hpp allocates and runs them): how
/// every rank's gradient rows are laid into fixed-size fp32 buckets, and the bytes the buckets
/// take, which the planner counts with the same function (planner/plan_parallel.hpp).
///
/// The rows. Each parameter's channels in one order: the rows every rank needs (all-reduced:
/// every channel of a parameter that is not split, the device set's of a split matrix) ascending,
/// then a split matrix's host set ascending, which is its owners' blocks in rank order (each
/// reduce-scattered to its owner). A bucket holds whole rows, up to its capacity in floats: the
/// parameters are taken in the order of `order` (the engine's: registration order reversed, the
/// order a backward produces them), each parameter's all-reduced rows, then its rows of owner 0,
/// 1, ...; a bucket closes when the next row does not fit, so a matrix may straddle buckets. In a
/// bucket the all-reduced rows come first, then each owner's rows, owner by owner, as a
/// reduce-scatter's blocks. The reduction of each element is the communicator's, element by
/// element: the buckets change which call reduces a row, never its bits (mpi_communicator folds
/// every element in rank order in float64).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include <zenflow/core/config.hpp>
#include <zenflow/engine/detail/plan/row_copies.hpp>

ZF_NAMESPACE_BEGIN
namespace detail {

/// One parameter's rows as the buckets see them: `dense` rows all-reduced, then `owned[r]` rows
/// reduce-scattered to rank r (empty when the parameter is not split), each `len` floats.
struct bucket_rows {
  std::int64_t len = 0;
  std::int64_t dense = 0;
  std::vector<std::int64_t> owned;
};

/// A run of rows of one parameter in one bucket: rows [first, first + count) of list `list` (-1:
/// the all-reduced rows, r >= 0: rank r's), at float `at` of the bucket's send region (and, for
/// this rank's own rows, `recv_at` of the receive buffer).
struct bucket_piece {
  std::size_t param = 0;
  int list = -1;
  std::int64_t first = 0, count = 0;
  std::size_t at = 0, recv_at = 0;
};

/// A bucket: its pieces, the floats it all-reduces (the front of its send region) and each
/// rank's block of the reduce-scatter after them, this rank's received floats.
struct bucket {
  std::vector<bucket_piece> pieces;
  std::size_t dense = 0;
  std::vector<std::size_t> counts;
  std::size_t mine = 0;
  [[nodiscard]] std::size_t floats() const noexcept {
    std::size_t n = dense;
    for (const std::size_t c : counts) {
      n += c;
    }
    return n;
  }
};

/// The buckets of `rows` (per parameter), taken in `order`, `capacity` floats each (at least the
/// longest row), for rank `me` of `ranks`.
inline std::vector<bucket> lay_buckets(const std::vector<bucket_rows>& rows,
                                       const std::vector<std::size_t>& order,
                                       std::size_t capacity,
                                       int ranks,
                                       int me) {
  std::vector<bucket> out;
  std::size_t used = capacity; // no open bucket
  auto open = [&] {
    out.emplace_back();
    out.back().counts.assign(static_cast<std::size_t>(ranks), 0);
    used = 0;
  };
  for (const std::size_t p : order) {
    const bucket_rows& r = rows[p];
    const auto len = static_cast<std::size_t>(r.len);
    for (int list = -1; list < static_cast<int>(r.owned.size()); ++list) {
      std::int64_t left = list < 0 ? r.dense : r.owned[static_cast<std::size_t>(list)];
      std::int64_t first = 0;
      while (left > 0 && len > 0) {
        if (capacity - used < len) {
          open();
        }
        const auto take = std::min<std::int64_t>(left, static_cast<std::int64_t>((capacity - used) / len));
        out.back().pieces.push_back({p, list, first, take, 0, 0});
        used += static_cast<std::size_t>(take) * len;
        first += take;
        left -= take;
      }
    }
  }
  // The send region: the all-reduced pieces first, then owner by owner; this rank's pieces also
  // packed in the receive buffer, in the same order.
  for (bucket& b : out) {
    std::size_t at = 0;
    for (int list = -1; list < ranks; ++list) {
      const std::size_t start = at;
      for (bucket_piece& pc : b.pieces) {
        if (pc.list == list) {
          pc.at = at;
          pc.recv_at = list == me ? at - start : 0;
          at += static_cast<std::size_t>(pc.count * rows[pc.param].len);
        }
      }
      (list < 0 ? b.dense : b.counts[static_cast<std::size_t>(list)]) = at - start;
    }
    b.mine = b.counts[static_cast<std::size_t>(me)];
  }
  return out;
}

/// The device bytes of the buckets and their tables, by part (grad_buckets::setup allocates them;
/// the planner adds them up).
struct bucket_bytes {
  std::size_t send = 0;  ///< the fp32 bucket: min(capacity, every gradient element)
  std::size_t recv = 0;  ///< this rank's received rows: min(capacity, its blocks' elements)
  std::size_t index = 0; ///< every parameter's channels in bucket order (int32)
  std::size_t items = 0; ///< the batched row copies' items, gathers and scatters
  std::size_t means = 0; ///< reduce_in_place false: a mean buffer of each gradient's extent
  [[nodiscard]] std::size_t total() const noexcept { return send + recv + index + items + means; }
};

/// The most row-copy items any layout of these parameters takes: a piece per non-empty list of
/// each parameter, one more for each bucket that closes inside a list, a gather and a scatter
/// item each. `floats`: every element; `longest`: the longest row.
[[nodiscard]] inline std::size_t
bucket_items_bound(std::size_t lists, std::size_t floats, std::size_t longest, std::size_t capacity) {
  // A closed bucket holds more than capacity - longest floats (the next row did not fit).
  const std::size_t buckets = floats / (capacity - longest + 1) + 1;
  return 2 * (lists + buckets);
}

/// The buckets' bytes for parameters of `channels` x `len` elements of `elem_bytes` each (the
/// mean buffers' extents: `extent`, in elements, per parameter), `split` of them reduce-scattered
/// by owner over `ranks`, this rank owning `own_floats` elements of them.
struct bucket_param {
  std::int64_t channels = 0, len = 0;
  std::size_t extent_bytes = 0; ///< the gradient buffer's bytes (the mean buffer's)
  bool split = false;
};
[[nodiscard]] inline bucket_bytes bucket_footprint(const std::vector<bucket_param>& params,
                                                   int ranks,
                                                   std::size_t own_floats,
                                                   std::size_t capacity,
                                                   bool in_place) {
  bucket_bytes b;
  std::size_t floats = 0, channels = 0, lists = 0, longest = 1;
  for (const auto& p : params) {
    floats += static_cast<std::size_t>(p.channels * p.len);
    channels += static_cast<std::size_t>(p.channels);
    lists += p.split ? 1 + static_cast<std::size_t>(ranks) : 1;
    longest = std::max(longest, static_cast<std::size_t>(p.len));
    b.means += in_place ? 0 : p.extent_bytes;
  }
  b.send = std::max<std::size_t>(std::min(capacity, floats), 1) * 4;
  b.recv = std::max<std::size_t>(std::min(capacity, own_floats), 1) * 4;
  b.index = std::max<std::size_t>(channels, 1) * 4;
  b.items = bucket_items_bound(lists, floats, longest, capacity) * sizeof(row_copy_item);
  return b;
}

} // namespace detail
ZF_NAMESPACE_END
