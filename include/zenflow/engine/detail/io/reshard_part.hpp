/// @file
/// An engine's load from files that another layout wrote (docs/checkpoint.md, "Another world
/// size"): when this rank's own file is absent or was written for other channels (another world
/// size, another policy, other shards), every rank reads every file of the world that saved (a
/// shared file system) and assembles its own part's state as a ckpt_image, which
/// engine_checkpoint's one load path then checks and restores. One path for every pair of
/// engines: each file's part of each matrix (rank_part) is recovered from the file, this rank's
/// comes from its policy (parallel_side::checkpoint_part), and the state goes across channel by
/// channel.
///
/// The world that saved: the files of this world size if `base.rank0-of-<ranks>` is there, else
/// the one world whose rank 0 file is (`base` itself: one rank; `base.rank0-of-<n>`); several are
/// ambiguous, none an error. Each file is checked as a load checks one (structure, checksums, the
/// configuration's hash, the parameter list's hash, its rank and world size) before anything is
/// assembled, and its parameter list says what it holds:
/// - whole matrices (a one-rank engine's file, or an owner partition's rank's): the whole device
///   set, the same in every file, and the host rows of a block; the blocks (each file's `counts`
///   rows, in rank order) tile every host-side matrix;
/// - shards (a sharded engine's): its shard's device set and host rows, the shard being the
///   file's `counts` rows (its device rows in gpu_adamw mode), in rank order.
/// A channel's state comes from the first file whose host rows hold it (a matrix without host
/// rows: the first file that registered it). Assembled:
/// - the scalars, masses, voter and trigger from rank 0's file, the others' equal to it (the byte
///   and time counters are rank 0's; the masses only when Zen-auto or the trigger reads them:
///   else each rank's own, read by nothing);
/// - a vector's sections from rank 0's file, the others' equal to it;
/// - a matrix's device sets (sel, dev_sel), device rows (dev_rows, dev_counts) and host rows
///   (master, m, v, their int8 scales, counts, acc) channel by channel from the channel's file,
///   within this rank's part; rest_l1 the same in every file; the pending host job's weights
///   (upload, host-set order) row by row from the row's file, which held them at its host-set
///   position (the section holds every host-set row of the file's channels, or of its block only:
///   its size says which; the rows of other blocks are not that file's to give).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <system_error>
#include <vector>

#include <zenflow/core/config.hpp>
#include <zenflow/core/detail/moment_q8.hpp>
#include <zenflow/engine/checkpoint_file.hpp>
#include <zenflow/engine/config.hpp>
#include <zenflow/engine/detail/io/checkpoint_sections.hpp>
#include <zenflow/engine/detail/io/host_part.hpp>
#include <zenflow/engine/detail/io/plan_part.hpp>
#include <zenflow/engine/detail/io/registry_part.hpp>
#include <zenflow/engine/detail/io/schedule_part.hpp>
#include <zenflow/engine/detail/policy/rank_part.hpp>
#include <zenflow/engine/detail/registry/params.hpp>

ZF_NAMESPACE_BEGIN
namespace detail {

inline bool ckpt_file_exists(const std::string& path) {
  std::error_code ec;
  return std::filesystem::is_regular_file(path, ec);
}

inline bool same_identity(const checkpoint_identity& a, const checkpoint_identity& b) {
  return a.config_hash == b.config_hash && a.params_hash == b.params_hash && a.rank == b.rank &&
         a.world_size == b.world_size;
}

/// The world size of checkpoint `base`'s files (see the file comment); `mine`: the file this
/// rank looked for first, named in the error when there is none.
inline int ckpt_saved_world(const std::string& base, int ranks, const std::string& mine) {
  if (ckpt_file_exists(checkpoint_rank_path(base, 0, ranks))) {
    return ranks;
  }
  std::vector<int> found;
  if (ckpt_file_exists(base)) {
    found.push_back(1);
  }
  namespace fs = std::filesystem;
  const fs::path b(base);
  const std::string prefix = b.filename().string() + ".rank0-of-";
  std::error_code ec;
  for (fs::directory_iterator it(b.has_parent_path() ? b.parent_path() : fs::path("."), ec), end;
       !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    const std::string tail = name.size() > prefix.size() ? name.substr(prefix.size()) : std::string();
    if (name.compare(0, prefix.size(), prefix) != 0 || tail.empty() || tail.size() > 9 ||
        !std::all_of(tail.begin(), tail.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      continue;
    }
    if (const int n = std::stoi(tail); n >= 2) {
      found.push_back(n);
    }
  }
  std::sort(found.begin(), found.end());
  if (found.empty()) {
    checkpoint::fail(checkpoint_errc::io, mine,
                     "does not exist, nor does another world's file of rank 0 (" + base + ", " + base +
                         ".rank0-of-<n>)");
  }
  if (found.size() > 1) {
    std::string list;
    for (const int n : found) {
      list += (list.empty() ? "" : ", ") + checkpoint_rank_path(base, 0, n);
    }
    checkpoint::fail(checkpoint_errc::other_rank, mine,
                     "does not exist, and the files of several worlds do (" + list +
                         "): keep only the files of the world to load");
  }
  return found[0];
}

/// The rows of every matrix in every file of the saving world, [p][r]: from channel 0 on, in rank
/// order, each file's `counts` rows (host rows) or device rows (gpu_adamw).
struct ckpt_rows {
  std::vector<std::vector<std::int64_t>> first, count;
};

/// `params` as the engine that wrote a file registered them: every matrix whole (one rank, the
/// owner partition), or (`shards`) as file r's rows of it (a sharded engine); each device
/// capacity as initialize() set it.
inline std::vector<param_info>
ckpt_params_as(const config& cfg, std::vector<param_info> params, const ckpt_rows* shards, std::size_t r) {
  for (std::size_t p = 0; p < params.size(); ++p) {
    auto& pi = params[p];
    if (!pi.matrix) {
      continue;
    }
    const std::int64_t total = pi.whole_channels();
    pi.channels = shards != nullptr ? shards->count[p][r] : total;
    pi.shard_first = shards != nullptr ? shards->first[p][r] : 0;
    pi.shard_total = shards != nullptr ? total : 0;
    pi.device_capacity = pi.matrix_capacity(cfg);
    pi.device_rows_most = pi.matrix_rows_most(cfg);
  }
  return params;
}

/// A section's bytes, `bytes` of them.
template <class T = std::byte>
std::vector<T> ckpt_bytes(const checkpoint_reader& in, const std::string& tag, std::size_t bytes) {
  ckpt_need(in, tag, bytes);
  std::vector<T> out(bytes / sizeof(T));
  in.read(tag, out.data(), bytes);
  return out;
}

/// Section `tag` of every file equal to rank 0's; returns it.
inline std::vector<std::byte> ckpt_same_everywhere(const std::vector<std::unique_ptr<checkpoint_reader>>& in,
                                                   const std::string& tag,
                                                   const std::string& what) {
  const checkpoint_section* s = in[0]->find(tag);
  if (s == nullptr) {
    checkpoint::fail(checkpoint_errc::missing_section, in[0]->name(), "no section '" + tag + "'");
  }
  const auto bytes = static_cast<std::size_t>(s->bytes);
  std::vector<std::byte> first = ckpt_bytes(*in[0], tag, bytes);
  for (std::size_t r = 1; r < in.size(); ++r) {
    if (ckpt_bytes(*in[r], tag, bytes) != first) {
      ckpt_corrupt(*in[r], tag, "differs from " + in[0]->name() + "'s (" + what + ")");
    }
  }
  return first;
}

/// The saving world's files, checked (see the file comment): what each holds of each matrix.
struct ckpt_world {
  std::vector<std::unique_ptr<checkpoint_reader>> in;
  std::vector<std::vector<param_info>> params; // [r]: the parameter list as file r's engine registered it
  std::vector<std::vector<rank_part>> parts;   // [p][r]: file r's part of matrix p
  bool sharded = false;                        // shards, else whole matrices
};

/// Opens and checks every file of the world that saved checkpoint `base` (this rank: `rank` of
/// `ranks`, registered `params` under `cfg`). Reads only; throws checkpoint_error naming the file.
inline ckpt_world ckpt_open_world(
    const config& cfg, const std::vector<param_info>& params, int rank, int ranks, const std::string& base) {
  const int n = ckpt_saved_world(base, ranks, checkpoint_rank_path(base, rank, ranks));
  const auto N = static_cast<std::size_t>(n);
  ckpt_world w;
  const std::uint64_t config_hash = registry_identity(cfg, {}, 0, 1).config_hash;
  for (int r = 0; r < n; ++r) {
    w.in.push_back(std::make_unique<checkpoint_reader>(checkpoint_rank_path(base, r, n))); // checksums
    same_host_moments(*w.in.back(), cfg, params);             // an error that names the setting
    if (w.in.back()->identity().config_hash != config_hash) { // the parameters and rank: below
      checkpoint::fail(checkpoint_errc::other_config, w.in.back()->name(),
                       "written under another configuration (config hash differs)");
    }
  }
  ckpt_rows rows;
  rows.first.resize(params.size());
  rows.count.resize(params.size());
  for (std::size_t p = 0; p < params.size(); ++p) {
    if (!params[p].matrix) {
      continue;
    }
    std::int64_t at = 0;
    for (std::size_t r = 0; r < N; ++r) {
      const std::string tag = ckpt_tag(p, params[p].host_side ? "counts" : "dev_sel");
      const checkpoint_section* s = w.in[r]->find(tag);
      if (s == nullptr) {
        checkpoint::fail(checkpoint_errc::other_parameters, w.in[r]->name(),
                         "written for another parameter list (no section '" + tag + "')");
      }
      rows.first[p].push_back(at);
      rows.count[p].push_back(static_cast<std::int64_t>(s->bytes / 4));
      at += rows.count[p].back();
    }
  }
  // What each file holds: its identity is that of this parameter list with whole matrices or
  // with its shards, as its rank of n.
  const std::vector<param_info> whole = ckpt_params_as(cfg, params, nullptr, 0);
  for (std::size_t r = 0; r < N; ++r) {
    const checkpoint_reader& f = *w.in[r];
    std::vector<param_info> shards = ckpt_params_as(cfg, params, &rows, r);
    const checkpoint_identity as_whole = registry_identity(cfg, whole, static_cast<int>(r), n);
    const checkpoint_identity as_shards = registry_identity(cfg, shards, static_cast<int>(r), n);
    const bool is_whole = same_identity(f.identity(), as_whole);
    const bool is_shards = !is_whole && same_identity(f.identity(), as_shards);
    if (!is_whole && !is_shards) { // another parameter list, or a file of another rank or world
      f.expect(f.identity().params_hash == as_shards.params_hash ? as_shards : as_whole);
      checkpoint::fail(checkpoint_errc::other_parameters, f.name(), "written for another parameter list");
    }
    if (r > 0 && is_shards != w.sharded) {
      checkpoint::fail(checkpoint_errc::other_parameters, f.name(),
                       std::string("holds ") + (is_shards ? "a sharded engine's shards" : "whole matrices") +
                           ", " + w.in[0]->name() + (w.sharded ? " shards" : " whole matrices") +
                           ": the files of two runs");
    }
    w.sharded = is_shards;
    w.params.push_back(is_shards ? std::move(shards) : whole);
  }
  w.parts.resize(params.size());
  for (std::size_t p = 0; p < params.size(); ++p) {
    if (!params[p].matrix) {
      continue;
    }
    const std::int64_t total = params[p].whole_channels();
    for (std::size_t r = 0; r < N; ++r) {
      const std::int64_t f = rows.first[p][r], c = rows.count[p][r];
      // Whole matrices without host rows (gpu_adamw): every file registered all of it.
      const bool all = !w.sharded && !params[p].host_side;
      w.parts[p].push_back(w.sharded ? rank_part{f, c, f, c}
                                     : rank_part{0, total, all ? 0 : f, all ? total : c});
    }
    const std::int64_t end = rows.first[p].back() + rows.count[p].back();
    if ((w.sharded || params[p].host_side) && end != total) {
      checkpoint::fail(checkpoint_errc::other_parameters, w.in[N - 1]->name(),
                       "its rows of parameter " + std::to_string(p) + " end at channel " +
                           std::to_string(end) + " of " + std::to_string(total));
    }
  }
  return w;
}

/// The state of this rank's part (`params`, `host`: this engine's; `mine`: per parameter its
/// policy's checkpoint_part) assembled from the files of checkpoint `base` (see the file
/// comment). Reads only; throws checkpoint_error naming the file.
template <class Host>
ckpt_image reshard_image(const config& cfg,
                         const std::vector<param_info>& params,
                         const Host& host,
                         const std::vector<rank_part>& mine,
                         int rank,
                         int ranks,
                         const std::string& base,
                         std::size_t matrices,
                         bool overlap) {
  const ckpt_world w = ckpt_open_world(cfg, params, rank, ranks, base);
  const auto& in = w.in;
  const std::size_t N = in.size();
  ckpt_image img(base + " (re-sharded from " + std::to_string(N) + " file" + (N == 1 ? "" : "s") + ")");
  // The global sections: one state on every rank.
  const ckpt_scalars s0 = read_scalars(*in[0], static_cast<std::int64_t>(matrices), overlap);
  for (std::size_t r = 1; r < N; ++r) {
    ckpt_scalars s = read_scalars(*in[r], static_cast<std::int64_t>(matrices), overlap);
    s.d2h = s0.d2h; // each rank's own traffic and times
    s.h2d = s0.h2d;
    s.stall_s = s0.stall_s;
    s.host_window_s = s0.host_window_s;
    s.last_host_window_s = s0.last_host_window_s;
    if (std::memcmp(&s, &s0, sizeof s) != 0) {
      ckpt_corrupt(*in[r], "engine/scalars", "differs from " + in[0]->name() + "'s (the schedule)");
    }
  }
  img.put("engine/scalars", ckpt_bytes(*in[0], "engine/scalars", sizeof s0));
  const bool read_masses = cfg.mode == optimizer_mode::zenflow && (cfg.auto_update() || cfg.mass_trigger());
  for (const char* tag : {"engine/masses", "engine/voter", "engine/trigger"}) {
    if (in[0]->find(tag) != nullptr) {
      img.put(tag, read_masses ? ckpt_same_everywhere(in, tag, "the one-rank masses")
                               : ckpt_bytes(*in[0], tag, static_cast<std::size_t>(in[0]->find(tag)->bytes)));
    }
  }
  const bool upload = s0.pending != 0 && s0.job_produced != 0;

  for (std::size_t p = 0; p < params.size(); ++p) {
    const auto& pi = params[p];
    const std::string prefix = "p" + std::to_string(p) + "/";
    if (!pi.matrix) { // whole on every rank
      for (const auto& sec : in[0]->sections()) {
        if (sec.tag.compare(0, prefix.size(), prefix) == 0) {
          img.put(sec.tag, ckpt_same_everywhere(in, sec.tag, "a vector is the same on every rank"));
        }
      }
      continue;
    }
    const rank_part& me = mine[p];
    const std::int64_t F = me.first, C = me.channels;
    const std::int64_t HF = me.host_first, HE = me.host_first + me.host_count;
    const auto L = static_cast<std::size_t>(pi.channel_len);
    // The channels whose state file r gives, [lo[r], hi[r]): its host rows', less an earlier file's.
    std::vector<std::int64_t> lo(N), hi(N);
    std::int64_t given = 0; // the channels an earlier file gives: [0, given)
    for (std::size_t r = 0; r < N; ++r) {
      const rank_part& o = w.parts[p][r];
      lo[r] = std::max(o.host_first, given);
      hi[r] = std::max(lo[r], o.host_first + o.host_count);
      given = hi[r];
    }
    const auto gives = [&](std::size_t r, std::int64_t c) {
      return c >= lo[r] && c < hi[r] && c >= F && c < F + C;
    };
    std::vector<std::vector<std::int32_t>> sel(N);
    std::vector<std::int32_t> new_sel, new_dev_sel, dev_counts;
    std::vector<float> dev_rows[3];
    for (std::size_t r = 0; r < N; ++r) {
      const param_info& old = w.params[r][p];
      const std::int64_t f = w.parts[p][r].first;
      sel[r] = ckpt_read_set(*in[r], ckpt_tag(p, "sel"), old);
      for (const std::int32_t c : sel[r]) {
        if (gives(r, f + c)) {
          new_sel.push_back(static_cast<std::int32_t>(f + c - F));
        }
      }
      const std::vector<std::int32_t> ds = check_device_rows(*in[r], p, old);
      if (std::none_of(ds.begin(), ds.end(), [&](std::int32_t c) { return gives(r, f + c); })) {
        continue; // (a world of whole matrices: the same rows in every file)
      }
      const std::size_t k = ds.size();
      const auto rows = ckpt_bytes<float>(*in[r], ckpt_tag(p, "dev_rows"), 3 * k * L * 4);
      const auto dc = ckpt_bytes<std::int32_t>(*in[r], ckpt_tag(p, "dev_counts"), k * 4);
      for (std::size_t i = 0; i < k; ++i) {
        if (!gives(r, f + ds[i])) {
          continue;
        }
        new_dev_sel.push_back(static_cast<std::int32_t>(f + ds[i] - F));
        dev_counts.push_back(dc[i]);
        for (std::size_t j = 0; j < 3; ++j) {
          const float* row = rows.data() + (j * k + i) * L;
          dev_rows[j].insert(dev_rows[j].end(), row, row + L);
        }
      }
    }
    img.put(ckpt_tag(p, "sel"), new_sel);
    img.put(ckpt_tag(p, "dev_sel"), new_dev_sel);
    dev_rows[0].insert(dev_rows[0].end(), dev_rows[1].begin(), dev_rows[1].end());
    dev_rows[0].insert(dev_rows[0].end(), dev_rows[2].begin(), dev_rows[2].end());
    img.put(ckpt_tag(p, "dev_rows"), dev_rows[0]);
    img.put(ckpt_tag(p, "dev_counts"), dev_counts);
    if (!pi.host_side) {
      continue;
    }
    // Host rows, channel order: this rank's block from the files that hold it.
    const auto gather = [&](const char* what, std::size_t row_bytes) {
      std::vector<std::byte> out(static_cast<std::size_t>(HE - HF) * row_bytes);
      for (std::size_t r = 0; r < N; ++r) {
        const rank_part& o = w.parts[p][r];
        const std::size_t bytes = static_cast<std::size_t>(o.host_count) * row_bytes;
        const std::int64_t a = std::max(HF, lo[r]), b = std::min(HE, hi[r]);
        if (a >= b) {
          ckpt_need(*in[r], ckpt_tag(p, what), bytes);
          continue;
        }
        const auto all = ckpt_bytes(*in[r], ckpt_tag(p, what), bytes);
        std::memcpy(out.data() + static_cast<std::size_t>(a - HF) * row_bytes,
                    all.data() + static_cast<std::size_t>(a - o.host_first) * row_bytes,
                    static_cast<std::size_t>(b - a) * row_bytes);
      }
      img.put(ckpt_tag(p, what), std::move(out));
    };
    const std::size_t eb = host[p].moments.element_bytes();
    gather("master", L * 4);
    gather("m", L * eb);
    gather("v", L * eb);
    if (host[p].moments.scale_count() > 0) {
      gather("m_scale", static_cast<std::size_t>(q8_blocks(pi.channel_len)) * 4);
      gather("v_scale", static_cast<std::size_t>(q8_blocks(pi.channel_len)) * 4);
    }
    gather("counts", 4);
    gather("acc", L * 4);
    img.put(ckpt_tag(p, "rest_l1"),
            ckpt_same_everywhere(in, ckpt_tag(p, "rest_l1"), "the window's rest mass"));
    if (!upload) {
      continue;
    }
    // The pending upload, host-set order: this rank's buffer's rows (every host-set row of its
    // channels, or its block's share), each from its file, at its place there.
    const std::size_t cb = pi.channel_bytes();
    std::vector<std::int64_t> want; // whole-matrix channels
    for (const std::int32_t c : complement(new_sel, C)) {
      if (!host[p].upload_share || (F + c >= HF && F + c < HE)) {
        want.push_back(F + c);
      }
    }
    std::vector<std::byte> out;
    out.reserve(want.size() * cb);
    for (std::size_t r = 0; r < N; ++r) {
      const rank_part& o = w.parts[p][r];
      const auto first_row = std::lower_bound(want.begin(), want.end(), lo[r]);
      const auto last_row = std::lower_bound(first_row, want.end(), hi[r]);
      if (first_row == last_row) {
        continue;
      }
      std::vector<std::int64_t> hs; // the file's host set, whole-matrix channels
      for (const std::int32_t c : complement(sel[r], o.channels)) {
        hs.push_back(o.first + c);
      }
      // Its section: every host-set row, or those of its block (from `origin` on).
      const auto block_lo = std::lower_bound(hs.begin(), hs.end(), o.host_first);
      const auto block_hi = std::lower_bound(block_lo, hs.end(), o.host_first + o.host_count);
      const checkpoint_section* sec = in[r]->find(ckpt_tag(p, "upload"));
      const bool every = sec != nullptr && sec->bytes == hs.size() * cb;
      const std::size_t held = every ? hs.size() : static_cast<std::size_t>(block_hi - block_lo);
      const auto origin = every ? std::ptrdiff_t{0} : block_lo - hs.begin();
      const auto rows = ckpt_bytes(*in[r], ckpt_tag(p, "upload"), held * cb);
      for (auto it = first_row; it != last_row; ++it) {
        const std::ptrdiff_t pos = (std::lower_bound(hs.begin(), hs.end(), *it) - hs.begin()) - origin;
        out.insert(out.end(), rows.begin() + pos * static_cast<std::ptrdiff_t>(cb),
                   rows.begin() + (pos + 1) * static_cast<std::ptrdiff_t>(cb));
      }
    }
    img.put(ckpt_tag(p, "upload"), std::move(out));
  }
  return img;
}

} // namespace detail
ZF_NAMESPACE_END
