/// @file
/// The host state's part of an engine checkpoint (engine_checkpoint.hpp): per parameter its
/// device set as the engine reports it (p<i>/sel) and, host-side parameters, this rank's host
/// rows (master, m, v, counts), the open window's accumulator and rest mass, and the pending job's
/// new weights (upload); and the Zen-auto masses of the last two steps (engine/masses). m and v
/// are saved as the host stores them (fp32, bf16 or int8 with its block scales: host_moments).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <zenflow/core/config.hpp>
#include <zenflow/core/dtype.hpp>
#include <zenflow/engine/checkpoint_file.hpp>
#include <zenflow/engine/config.hpp>
#include <zenflow/engine/detail/host/d2h_protocol.hpp>
#include <zenflow/engine/detail/host/host_moments.hpp>
#include <zenflow/engine/detail/io/checkpoint_sections.hpp>
#include <zenflow/engine/detail/registry/params.hpp>
#include <zenflow/optim/detail/cpu_simd.hpp>
#include <zenflow/schedule/zen_auto.hpp>

ZF_NAMESPACE_BEGIN
namespace detail {

/// engine/masses: (step, valid, crit[M], rest[M]) for the two steps Zen-auto's next votes read.
inline std::size_t masses_bytes(std::size_t m) {
  return 2 * (16 + 8 * m);
}

/// Saves the masses of steps `step` - 2 and `step` - 1 (Zen-auto's lag of two; a slot never
/// filled as zeros, not valid).
template <class Host>
void save_masses(checkpoint_writer& out, Host& host, std::int64_t step, std::size_t matrices) {
  const auto floats = [&](const std::vector<float>& v) {
    if (v.size() == matrices) {
      out.write(v.data(), matrices * 4);
    } else { // a slot never filled
      const std::vector<float> zeros(matrices, 0.0f);
      out.write(zeros.data(), matrices * 4);
    }
  };
  out.begin_section("engine/masses", masses_bytes(matrices));
  for (std::int64_t i = 0; i < 2; ++i) {
    const std::int64_t t = step - zen_auto_lag + i;
    const step_masses none{};
    const step_masses& ms = t >= 0 && host.masses_slot_of(t).step == t ? host.masses_slot_of(t) : none;
    const std::int64_t head[2] = {ms.step, ms.valid ? 1 : 0};
    out.write(head, sizeof head);
    floats(ms.crit);
    floats(ms.rest);
  }
  out.end_section();
}

template <class In, class Host>
void restore_masses(const In& in, Host& host, std::size_t matrices) {
  std::vector<std::byte> masses(masses_bytes(matrices));
  in.read("engine/masses", masses.data(), masses.size());
  const std::byte* at = masses.data();
  host.clear_masses();
  for (std::size_t i = 0; i < 2; ++i) {
    std::int64_t head[2];
    std::memcpy(head, at, sizeof head);
    at += sizeof head;
    step_masses unused;
    step_masses& ms = head[0] >= 0 ? host.masses_slot_of(head[0]) : unused;
    ms.step = head[0];
    ms.valid = head[1] != 0;
    ms.crit.resize(matrices);
    ms.rest.resize(matrices);
    std::memcpy(ms.crit.data(), at, matrices * 4);
    at += matrices * 4;
    std::memcpy(ms.rest.data(), at, matrices * 4);
    at += matrices * 4;
  }
}

/// A file whose host moments have another precision (its first host-side parameter's m holds
/// 1, 2 or 4 bytes per element where this engine keeps another) was saved under another
/// host_moments: say so by name (the config hash alone would only say "another configuration").
/// The elements are counted by the file's own fp32 master section: a file of another rank or world
/// holds another number of rows, and is refused by its identity instead (other_rank).
inline void
same_host_moments(const checkpoint_reader& in, const config& cfg, const std::vector<param_info>& params) {
  for (std::size_t p = 0; p < params.size(); ++p) {
    const checkpoint_section* s = params[p].host_side ? in.find(ckpt_tag(p, "m")) : nullptr;
    const checkpoint_section* master = s != nullptr ? in.find(ckpt_tag(p, "master")) : nullptr;
    if (master == nullptr) {
      continue;
    }
    const std::uint64_t n = master->bytes / 4;
    const moment_precision mine = cfg.host_moments;
    for (const moment_precision other :
         {moment_precision::fp32, moment_precision::bf16, moment_precision::int8}) {
      if (other == mine || n == 0 || s->bytes != n * moment_bytes(other)) {
        continue;
      }
      checkpoint::fail(
          checkpoint_errc::other_config, in.name(),
          "holds " + std::string(to_string(other)) + " host moments (saved with zenflow_ext.host_moments \"" +
              std::string(to_string(other)) + "\"), this engine keeps " + std::string(to_string(mine)) +
              ": load it with the host_moments it was saved with");
    }
    return;
  }
}

/// Parameter `p`'s sections: its device set, and host-side its rows with accumulator `a`'s window
/// (`upload`: a pending job's new weights too).
template <class HostParam>
void save_host_rows(checkpoint_writer& out,
                    std::size_t p,
                    const param_info& pi,
                    const HostParam& h,
                    std::size_t a,
                    bool upload) {
  out.section(ckpt_tag(p, "sel"), h.sel.data(), h.sel.size() * 4);
  if (!pi.host_side) {
    return;
  }
  const std::size_t n = h.master.size(); // data parallel: this rank's block
  out.section(ckpt_tag(p, "master"), h.master.data(), n * 4);
  out.section(ckpt_tag(p, "m"), h.moments.bytes(0), n * h.moments.element_bytes());
  out.section(ckpt_tag(p, "v"), h.moments.bytes(1), n * h.moments.element_bytes());
  if (h.moments.scale_count() > 0) { // int8's block scales (fp32 and bf16 files have none)
    out.section(ckpt_tag(p, "m_scale"), h.moments.scales(0), h.moments.scale_count() * 4);
    out.section(ckpt_tag(p, "v_scale"), h.moments.scales(1), h.moments.scale_count() * 4);
  }
  out.section(ckpt_tag(p, "counts"), h.counts.data(), h.counts.size() * 4);
  // The accumulator in the file's layout, row c = channel c of the block (the engine keeps the
  // host-set rows only: the others are written as zeros, which nothing reads).
  const auto L = static_cast<std::size_t>(pi.channel_len);
  const std::vector<float> zeros(L, 0.0f);
  const float* acc = h.sum(a).data();
  // Before the first step's selection the buffer may hold fewer rows than the host set (sized for
  // the set it will keep; nothing is summed yet): the rows past it are written as zeros, not read
  // past its end (a save right after initialize(), as accelerate's optimizer wrapper does).
  const std::size_t held = L > 0 ? h.sum(a).size() / L : 0;
  out.begin_section(ckpt_tag(p, "acc"), n * 4);
  for (std::size_t c = 0, i = 0; c < static_cast<std::size_t>(h.shard.channels); ++c) {
    const float* row = zeros.data();
    if (i < h.shard.rows.size() && static_cast<std::size_t>(h.shard.rows[i]) == c) {
      row = i < held ? acc + i * L : row;
      ++i;
    }
    out.write(row, L * 4);
  }
  out.end_section();
  out.section(ckpt_tag(p, "rest_l1"), &h.rest_l1[a], 8);
  if (upload && !h.host_set.empty()) {
    const std::size_t bytes = static_cast<std::size_t>(h.upload_rows()) * pi.channel_bytes();
    if (h.buffered_upload()) {
      out.section(ckpt_tag(p, "upload"), h.upload.data(), bytes);
    } else { // the job's weights went up from the stage: they are its masters, rounded as it did
      out.begin_section(ckpt_tag(p, "upload"), bytes);
      std::vector<std::byte> row(pi.channel_bytes());
      for (const std::int32_t r : h.shard.rows) {
        dispatch_dtype(pi.type, [&](auto tag) {
          using T = decltype(tag);
          (void)cpu::convert_span<float, T>(h.master.data() + static_cast<std::size_t>(r) * L,
                                            reinterpret_cast<T*>(row.data()), pi.channel_len, false);
        });
        out.write(row.data(), row.size());
      }
      out.end_section();
    }
  }
}

/// The rows of `h`'s upload buffer once its device set is `sel`: its share of the host set (a
/// rank that keeps only its share), or every host channel.
template <class HostParam>
std::size_t
upload_rows_after(const param_info& pi, const HostParam& h, const std::vector<std::int32_t>& sel) {
  if (!h.upload_share) {
    return static_cast<std::size_t>(pi.channels) - sel.size();
  }
  const auto lo = std::lower_bound(sel.begin(), sel.end(), h.shard.first);
  const auto hi = std::lower_bound(lo, sel.end(), h.shard.first + h.shard.channels);
  return static_cast<std::size_t>(h.shard.channels - (hi - lo));
}

/// Checks that the host rows of `p` are all there at this engine's sizes (`sel`: its saved
/// device set); changes nothing.
template <class In, class HostParam>
void check_host_rows(const In& in,
                     std::size_t p,
                     const param_info& pi,
                     const HostParam& h,
                     const std::vector<std::int32_t>& sel,
                     bool upload) {
  if (!pi.host_side) {
    return;
  }
  const std::size_t n = h.master.size(); // data parallel: this rank's block
  for (const char* t : {"master", "acc"}) {
    ckpt_need(in, ckpt_tag(p, t), n * 4);
  }
  for (const char* t : {"m", "v"}) {
    ckpt_need(in, ckpt_tag(p, t), n * h.moments.element_bytes());
  }
  if (h.moments.scale_count() > 0) {
    for (const char* t : {"m_scale", "v_scale"}) {
      ckpt_need(in, ckpt_tag(p, t), h.moments.scale_count() * 4);
    }
  }
  ckpt_need(in, ckpt_tag(p, "counts"), h.counts.size() * 4);
  ckpt_need(in, ckpt_tag(p, "rest_l1"), 8);
  const std::size_t rows = upload_rows_after(pi, h, sel);
  if (upload && static_cast<std::size_t>(pi.channels) > sel.size()) {
    ckpt_need(in, ckpt_tag(p, "upload"), rows * pi.channel_bytes());
  }
}

/// Restores `p`'s device set `sel` and, host-side, its host set, its rows and accumulator `a`
/// (the other one empty, as after its job), the accumulators sized to the host set (the caller
/// updates their count in the stats). The caller installs the host set on the device.
template <class In, class HostParam>
void restore_host_rows(const In& in,
                       std::size_t p,
                       const param_info& pi,
                       HostParam& h,
                       std::vector<std::int32_t> sel,
                       std::size_t a,
                       bool upload) {
  h.sel = std::move(sel);
  if (!pi.host_side) {
    return;
  }
  const std::size_t n = h.master.size();
  h.set_host_set(complement(h.sel, pi.channels));
  h.fit(static_cast<std::int64_t>(h.shard.rows.size()), pi.channel_len);
  // The file's accumulator holds every channel's row: read through the master's buffer (as
  // large, restored next) and keep the host-set rows.
  in.read(ckpt_tag(p, "acc"), h.master.data(), n * 4);
  const auto L = static_cast<std::size_t>(pi.channel_len);
  std::fill(h.acc[a ^ 1u].begin(), h.acc[a ^ 1u].end(), 0.0f); // empty once its job ran
  float* acc = h.sum(a).data();
  for (std::size_t i = 0; i < h.shard.rows.size(); ++i) {
    std::copy_n(h.master.data() + static_cast<std::size_t>(h.shard.rows[i]) * L, L, acc + i * L);
  }
  in.read(ckpt_tag(p, "master"), h.master.data(), n * 4);
  in.read(ckpt_tag(p, "m"), h.moments.bytes(0), n * h.moments.element_bytes());
  in.read(ckpt_tag(p, "v"), h.moments.bytes(1), n * h.moments.element_bytes());
  if (h.moments.scale_count() > 0) {
    in.read(ckpt_tag(p, "m_scale"), h.moments.scales(0), h.moments.scale_count() * 4);
    in.read(ckpt_tag(p, "v_scale"), h.moments.scales(1), h.moments.scale_count() * 4);
  }
  in.read(ckpt_tag(p, "counts"), h.counts.data(), h.counts.size() * 4);
  in.read(ckpt_tag(p, "rest_l1"), &h.rest_l1[a], 8);
  h.rest_l1[a ^ 1u] = 0.0;
  // Staged (no upload buffer): the pending job's weights are its masters rounded, uploaded again
  // from them (host_jobs::submit_finished); the file's copy is checked for its size only.
  if (upload && !h.host_set.empty() && h.buffered_upload()) {
    in.read(ckpt_tag(p, "upload"), h.upload.data(),
            static_cast<std::size_t>(h.upload_rows()) * pi.channel_bytes());
  }
}

} // namespace detail
ZF_NAMESPACE_END
