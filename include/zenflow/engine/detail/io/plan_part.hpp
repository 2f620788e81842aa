/// @file
/// The device plan's part of an engine checkpoint (engine_checkpoint.hpp): per parameter its
/// device-resident rows, read and written through the plan's own state transfers
/// (read_device_state, write_device_state): p<i>/dev_sel, dev_rows (master | m | v, k rows each,
/// fp32), dev_counts.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include <cuda_runtime_api.h>

#include <zenflow/core/config.hpp>
#include <zenflow/engine/checkpoint_file.hpp>
#include <zenflow/engine/detail/io/checkpoint_sections.hpp>
#include <zenflow/engine/detail/registry/params.hpp>

ZF_NAMESPACE_BEGIN
namespace detail {

/// `p`'s device rows into `out` (blocking: the plan reads them back).
template <class Plan>
void save_device_rows(checkpoint_writer& out, Plan& plan, std::size_t p, cudaStream_t stream) {
  std::vector<float> dm, d1, d2; // one parameter at a time
  std::vector<std::int32_t> dc, ds;
  plan.read_device_state(p, dm, d1, d2, dc, ds, stream);
  out.section(ckpt_tag(p, "dev_sel"), ds.data(), ds.size() * 4);
  out.begin_section(ckpt_tag(p, "dev_rows"), 3 * dm.size() * 4);
  out.write(dm.data(), dm.size() * 4);
  out.write(d1.data(), d1.size() * 4);
  out.write(d2.data(), d2.size() * 4);
  out.end_section();
  out.section(ckpt_tag(p, "dev_counts"), dc.data(), dc.size() * 4);
}

/// `p`'s saved device set, with its rows and counts checked present at its size; changes nothing.
template <class In>
std::vector<std::int32_t> check_device_rows(const In& in, std::size_t p, const param_info& pi) {
  std::vector<std::int32_t> sel = ckpt_read_set(in, ckpt_tag(p, "dev_sel"), pi);
  const std::size_t k = sel.size();
  ckpt_need(in, ckpt_tag(p, "dev_rows"), 3 * k * static_cast<std::size_t>(pi.channel_len) * 4);
  ckpt_need(in, ckpt_tag(p, "dev_counts"), k * 4);
  return sel;
}

/// Writes `p`'s saved device rows (set `sel`, from check_device_rows) into the plan (blocking).
template <class In, class Plan>
void restore_device_rows(const In& in,
                         Plan& plan,
                         std::size_t p,
                         const param_info& pi,
                         const std::vector<std::int32_t>& sel,
                         cudaStream_t stream) {
  const std::size_t k = sel.size();
  const auto L = static_cast<std::size_t>(pi.channel_len);
  std::vector<float> rows(3 * k * L); // one parameter at a time
  std::vector<std::int32_t> counts(k);
  in.read(ckpt_tag(p, "dev_rows"), rows.data(), rows.size() * 4);
  in.read(ckpt_tag(p, "dev_counts"), counts.data(), counts.size() * 4);
  plan.write_device_state(p,
                          {static_cast<std::int64_t>(k), rows.data(), rows.data() + k * L,
                           rows.data() + 2 * k * L, counts.data(), sel.data()},
                          stream);
}

} // namespace detail
ZF_NAMESPACE_END
