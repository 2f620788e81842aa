/// @file
/// A sharded engine's load from the files of another world (docs/data-parallel.md,
/// "Checkpoints"): when its own file is absent or was written for other shards, every rank reads
/// every file of the world that saved (a shared file system) and assembles its new shard's state
/// as a ckpt_image, which engine_checkpoint's one load path then checks and restores.
///
/// The world that saved: the files of this world size if `base.rank0-of-<ranks>` is there, else
/// the one world whose rank 0 file is (`base` itself: one rank, a sharded engine's or a one-rank
/// engine's file of the same model; `base.rank0-of-<n>`); several are ambiguous, none an error.
/// Its shards are each file's row count (a rank's `counts`, or its device rows in gpu_adamw
/// mode), in rank order; each file is then checked as a load checks one (structure, checksums,
/// the configuration's hash, the parameter list's hash with that shard, its rank and world size)
/// before anything is assembled. Assembled (old shard r: channels [f_r, f_r + c_r)):
/// - the scalars, masses, voter and trigger from rank 0's file, the others' equal to it (the byte
///   and time counters are rank 0's; the masses only when Zen-auto or the trigger reads them:
///   else each rank's own, read by nothing);
/// - a vector's sections from rank 0's file, the others' equal to it;
/// - a matrix's device sets (sel, dev_sel): the union of the old sets, each offset by f_r,
///   within the new shard; its host rows (master, m, v, their int8 scales, counts, acc) and device
///   rows (dev_rows, dev_counts) channel by channel from the file that held the channel; rest_l1
///   the same in every file; the pending upload (host-set order) row by row from its owner's.
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
#include <zenflow/engine/detail/io/plan_part.hpp>
#include <zenflow/engine/detail/io/registry_part.hpp>
#include <zenflow/engine/detail/io/schedule_part.hpp>
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

/// The parameter list of old rank `r`'s file: every matrix's shard {first, count} (`plain`: a
/// one-rank engine's whole matrices, unsharded), its device capacity as initialize() set it.
inline std::vector<param_info> ckpt_old_params(const config& cfg,
                                               std::vector<param_info> params,
                                               const std::vector<std::vector<std::int64_t>>& firsts,
                                               const std::vector<std::vector<std::int64_t>>& counts,
                                               std::size_t r,
                                               bool plain) {
  for (std::size_t p = 0; p < params.size(); ++p) {
    auto& pi = params[p];
    if (!pi.matrix) {
      continue;
    }
    const std::int64_t total = pi.whole_channels();
    pi.channels = counts[p][r];
    pi.shard_first = plain ? 0 : firsts[p][r];
    pi.shard_total = plain ? 0 : total;
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

/// The state of this rank's shard (`params`, `host`: this engine's) assembled from the files of
/// checkpoint `base` (see the file comment). Reads only; throws checkpoint_error naming the file.
template <class Host>
ckpt_image reshard_image(const config& cfg,
                         const std::vector<param_info>& params,
                         const Host& host,
                         int rank,
                         int ranks,
                         const std::string& base,
                         std::size_t matrices,
                         bool overlap) {
  const int n = ckpt_saved_world(base, ranks, checkpoint_rank_path(base, rank, ranks));
  const auto N = static_cast<std::size_t>(n);
  std::vector<std::unique_ptr<checkpoint_reader>> in;
  const std::uint64_t config_hash = registry_identity(cfg, {}, 0, 1).config_hash;
  for (int r = 0; r < n; ++r) {
    in.push_back(std::make_unique<checkpoint_reader>(checkpoint_rank_path(base, r, n))); // checksums
    if (in.back()->identity().config_hash != config_hash) { // the parameters and rank: below
      checkpoint::fail(checkpoint_errc::other_config, in.back()->name(),
                       "written under another configuration (config hash differs)");
    }
  }
  // The old shards: each file's rows, in rank order.
  std::vector<std::vector<std::int64_t>> firsts(params.size()), counts(params.size());
  for (std::size_t p = 0; p < params.size(); ++p) {
    if (!params[p].matrix) {
      continue;
    }
    std::int64_t at = 0;
    for (std::size_t r = 0; r < N; ++r) {
      const std::string tag = ckpt_tag(p, params[p].host_side ? "counts" : "dev_sel");
      const checkpoint_section* s = in[r]->find(tag);
      if (s == nullptr) {
        checkpoint::fail(checkpoint_errc::other_parameters, in[r]->name(),
                         "written for another parameter list (no section '" + tag + "')");
      }
      firsts[p].push_back(at);
      counts[p].push_back(static_cast<std::int64_t>(s->bytes / 4));
      at += counts[p].back();
    }
  }
  // Identity: this configuration, the parameter list with the file's shards, its rank of n.
  std::vector<std::vector<param_info>> olds(N);
  for (std::size_t r = 0; r < N; ++r) {
    olds[r] = ckpt_old_params(cfg, params, firsts, counts, r, false);
    if (n == 1 &&
        same_identity(in[r]->identity(),
                      registry_identity(cfg, ckpt_old_params(cfg, params, firsts, counts, r, true), 0, 1))) {
      continue; // a one-rank engine's file of the same model (its device sets read as a shard's)
    }
    in[r]->expect(registry_identity(cfg, olds[r], static_cast<int>(r), n));
  }
  for (std::size_t p = 0; p < params.size(); ++p) {
    if (params[p].matrix && firsts[p].back() + counts[p].back() != params[p].whole_channels()) {
      checkpoint::fail(checkpoint_errc::other_parameters, in[N - 1]->name(),
                       "its shards of parameter " + std::to_string(p) + " end at channel " +
                           std::to_string(firsts[p].back() + counts[p].back()) + " of " +
                           std::to_string(params[p].whole_channels()));
    }
  }

  ckpt_image img(base + " (re-sharded from " + std::to_string(n) + " file" + (n == 1 ? "" : "s") + ")");
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
    const std::int64_t F = pi.shard_first, C = pi.channels;
    const auto L = static_cast<std::size_t>(pi.channel_len);
    std::vector<std::vector<std::int32_t>> sel(N);
    std::vector<std::int32_t> new_sel, new_dev_sel, dev_counts;
    std::vector<float> dev_rows[3];
    for (std::size_t r = 0; r < N; ++r) {
      const param_info& old = olds[r][p];
      const std::int64_t f = firsts[p][r];
      const auto mine = [&](std::int64_t c) { return f + c >= F && f + c < F + C; };
      sel[r] = ckpt_read_set(*in[r], ckpt_tag(p, "sel"), old);
      for (const std::int32_t c : sel[r]) {
        if (mine(c)) {
          new_sel.push_back(static_cast<std::int32_t>(f + c - F));
        }
      }
      const std::vector<std::int32_t> ds = check_device_rows(*in[r], p, old);
      const std::size_t k = ds.size();
      const auto rows = ckpt_bytes<float>(*in[r], ckpt_tag(p, "dev_rows"), 3 * k * L * 4);
      const auto dc = ckpt_bytes<std::int32_t>(*in[r], ckpt_tag(p, "dev_counts"), k * 4);
      for (std::size_t i = 0; i < k; ++i) {
        if (!mine(ds[i])) {
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
    // Host rows, channel order: the new shard's rows from the files that held them.
    const auto gather = [&](const char* what, std::size_t row_bytes) {
      std::vector<std::byte> out(static_cast<std::size_t>(C) * row_bytes);
      for (std::size_t r = 0; r < N; ++r) {
        const std::int64_t f = firsts[p][r], c = counts[p][r];
        const auto all = ckpt_bytes(*in[r], ckpt_tag(p, what), static_cast<std::size_t>(c) * row_bytes);
        const std::int64_t lo = std::max(F, f), hi = std::min(F + C, f + c);
        if (lo < hi) {
          std::memcpy(out.data() + static_cast<std::size_t>(lo - F) * row_bytes,
                      all.data() + static_cast<std::size_t>(lo - f) * row_bytes,
                      static_cast<std::size_t>(hi - lo) * row_bytes);
        }
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
    // The pending upload, host-set order: channel g's row from its owner, at its place there.
    const std::size_t cb = pi.channel_bytes();
    const std::size_t host_rows = static_cast<std::size_t>(C) - new_sel.size();
    if (!upload || host_rows == 0) {
      continue;
    }
    std::vector<std::byte> out;
    out.reserve(host_rows * cb);
    for (std::size_t r = 0; r < N; ++r) {
      const std::int64_t f = firsts[p][r], c = counts[p][r];
      const std::size_t held = static_cast<std::size_t>(c) - sel[r].size();
      const std::int64_t lo = std::max(F, f), hi = std::min(F + C, f + c);
      if (lo >= hi || held == 0) {
        continue;
      }
      const auto rows = ckpt_bytes(*in[r], ckpt_tag(p, "upload"), held * cb);
      std::size_t pos = 0; // host-set position of channel f + c in rank r's file
      for (std::int64_t ch = 0; ch < c; ++ch) {
        if (std::binary_search(sel[r].begin(), sel[r].end(), static_cast<std::int32_t>(ch))) {
          continue;
        }
        if (f + ch >= lo && f + ch < hi) {
          out.insert(out.end(), rows.begin() + static_cast<std::ptrdiff_t>(pos * cb),
                     rows.begin() + static_cast<std::ptrdiff_t>((pos + 1) * cb));
        }
        ++pos;
      }
    }
    img.put(ckpt_tag(p, "upload"), std::move(out));
  }
  return img;
}

} // namespace detail
ZF_NAMESPACE_END
