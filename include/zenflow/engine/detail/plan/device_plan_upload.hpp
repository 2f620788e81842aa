/// @file
/// The device plan's upload of a host window's new weights (device_plan.hpp): the state its two
/// phases share (`upload_phase`) and their member definitions, written once over the backend.
///
/// The copy phase, on the thread that ran the host job (or, when the host gathers the ranks'
/// shares, on the training thread at the boundary), right after it wrote its host upload
/// buffers: begin_uploads, upload per parameter, end_uploads (H2D copies on the plan's upload
/// stream, so that they overlap the next window's compute and the D2H ring). The apply phase, at
/// the boundary, on the training thread: begin_apply (the user's stream waits on the copies: no
/// host wait), apply_upload per parameter (a scatter on the device) and end_apply. Events guard
/// the host buffers (wait_upload_done) and the device upload buffers (the next copies wait on the
/// last scatter). The engine never runs two phases at once: the window queue orders the threads.
///
/// Staged (set_upload_stage; whole_window without host upload buffers, the default): the job
/// writes its new weights into a few pinned chunks (stage_chunk) and each goes up as soon as it
/// is written (send_staged), on the upload stream; a chunk is written again once its copy is done
/// (an event per chunk, waited for on the job's thread). Host memory: the chunks instead of a
/// copy of every host-side weight; time: the job keeps pace with the copies up.
///
/// upload = chunk_ring (set_upload_chunk): upload only notes where the host buffer is; at the
/// boundary apply_upload copies it up chunk by chunk into one device chunk and scatters each
/// chunk, all on the user's stream (stream order reuses the chunk: no event, no host wait).
/// Device memory: one chunk instead of a copy of every host-side weight; time: the H2D is on the
/// boundary's stream instead of overlapping the window. wait_upload_done then waits for the
/// boundary's copies (`scattered`), which read the host buffers.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include <cuda_runtime_api.h>

#include <zenflow/core/config.hpp>
#include <zenflow/engine/detail/plan/device_plan_decl.hpp>

ZF_NAMESPACE_BEGIN
namespace detail {

/// What the upload's two phases share. Which thread writes what, when:
/// - setup() (training thread, before either phase runs) writes `device`, `stream`,
///   `stream_created`, the events, `chunk` and each parameter's `buffer`; `chunk_bytes` is set
///   before it (set_upload_chunk). Read-only after.
/// - The copy phase writes `copy_recorded` (end_uploads) and each parameter's `source`
///   (upload, chunk_ring); the apply phase reads them (begin_apply, apply_upload), and
///   wait_upload_done reads `copy_recorded` before the next copy phase's host writes.
/// - The apply phase writes `scatter_recorded` (end_apply); the next copy phase reads it
///   (begin_uploads), as does wait_upload_done.
/// Each read on the other thread happens across the window queue's hand-over, which orders it
/// after the write: no flag is read while the other phase runs.
template <class Backend>
struct upload_phase {
  using event_type = typename Backend::copy_backend_type::event_type;
  using buffer_type = typename Backend::template device_buffer<std::byte>;

  /// One host-side parameter's upload.
  struct param_upload {
    buffer_type buffer;                // whole_window: the device upload buffer
    const std::byte* source = nullptr; // chunk_ring: the host upload buffer, read at the boundary
  };

  int device = 0; // the device of setup(), made current on the job's thread
  cudaStream_t stream = nullptr;
  bool stream_created = false;
  event_type copied{};    // recorded on `stream` after a window's H2D copies
  event_type scattered{}; // recorded on the user's stream after the boundary's scatter
  bool copy_recorded = false;
  bool scatter_recorded = false;
  std::size_t chunk_bytes = 0; // chunk_ring: the device chunk's size (0: whole_window)
  buffer_type chunk;
  std::vector<param_upload> params; // per parameter (empty buffers where it has no host side)
  // The upload stage (the copy phase's thread only, after setup).
  std::size_t stage_chunks = 0, stage_bytes = 0;
  std::vector<typename Backend::template host_buffer<std::byte>> stage;
  std::vector<event_type> stage_copied;
  std::vector<char> stage_recorded;
  std::size_t stage_next = 0; // the chunk stage_chunk() gives next

  /// The events and the stream (the plan's destructor, after its work is done).
  void release(const typename Backend::copy_backend_type& c) {
    c.destroy_event(copied);
    c.destroy_event(scattered);
    for (auto& e : stage_copied) {
      c.destroy_event(e);
    }
    if (stream_created) {
      c.destroy_stream(stream);
    }
  }
};

template <class Backend>
void device_plan<Backend>::setup_upload(memory_usage& mem) {
  const copier_type c = b_.copier();
  upload_.params.resize(params_->size());
  for (std::size_t p = 0; p < params_->size(); ++p) {
    const param_info& pi = info(p);
    if (pi.host_side && upload_.chunk_bytes == 0) {
      auto& buffer = upload_.params[p].buffer;
      buffer = dbuf<std::byte>(static_cast<std::size_t>(pi.channels) * pi.channel_bytes());
      mem.device_upload += buffer.size();
    }
  }
  if (upload_.chunk_bytes > 0) {
    upload_.chunk = dbuf<std::byte>(upload_.chunk_bytes);
    mem.device_upload += upload_.chunk.size();
  }
  upload_.device = b_.current_device();
  upload_.stream = c.create_stream(0);
  upload_.stream_created = true;
  c.create_event(upload_.copied);
  c.create_event(upload_.scattered);
  if (upload_.chunk_bytes == 0 && upload_.stage_chunks > 0) {
    upload_.stage.clear();
    for (std::size_t i = 0; i < upload_.stage_chunks; ++i) {
      upload_.stage.emplace_back(upload_.stage_bytes);
      mem.host_upload += upload_.stage_bytes;
    }
    upload_.stage_copied.resize(upload_.stage_chunks);
    for (auto& e : upload_.stage_copied) {
      c.create_event(e);
    }
    upload_.stage_recorded.assign(upload_.stage_chunks, 0);
  }
}

template <class Backend>
std::byte* device_plan<Backend>::stage_chunk() {
  const std::size_t i = upload_.stage_next;
  if (upload_.stage_recorded[i] != 0) {
    b_.copier().synchronize(upload_.stage_copied[i]);
  }
  return upload_.stage[i].data();
}

template <class Backend>
std::size_t device_plan<Backend>::send_staged(std::size_t p, std::int64_t begin, std::int64_t end) {
  const std::size_t i = upload_.stage_next;
  const std::size_t bytes = upload(p, upload_.stage[i].data(), begin, begin, end);
  b_.copier().record(upload_.stage_copied[i], upload_.stream);
  upload_.stage_recorded[i] = 1;
  upload_.stage_next = (i + 1) % upload_.stage.size();
  return bytes;
}

template <class Backend>
void device_plan<Backend>::begin_uploads() {
  b_.bind_device(upload_.device);
  if (upload_.scatter_recorded) {
    b_.copier().stream_wait(upload_.stream, upload_.scattered);
  }
}

template <class Backend>
std::size_t device_plan<Backend>::upload(
    std::size_t p, const std::byte* src, std::int64_t src_first, std::int64_t begin, std::int64_t end) {
  const param_info& pi = info(p);
  auto& u = upload_.params[p];
  const std::size_t at = static_cast<std::size_t>(begin) * pi.channel_bytes();
  const std::size_t bytes = static_cast<std::size_t>(end - begin) * pi.channel_bytes();
  if (upload_.chunk_bytes > 0) {
    u.source = src; // copied up at the boundary (apply_upload), position 0 at src (src_first 0)
    return bytes;
  }
  b_.copy_h2d(u.buffer.data() + at, src + static_cast<std::size_t>(begin - src_first) * pi.channel_bytes(),
              bytes, upload_.stream);
  return bytes;
}

template <class Backend>
void device_plan<Backend>::end_uploads() {
  if (upload_.chunk_bytes > 0) {
    return; // nothing was copied yet
  }
  b_.copier().record(upload_.copied, upload_.stream);
  upload_.copy_recorded = true;
}

template <class Backend>
void device_plan<Backend>::begin_apply(cudaStream_t stream) {
  if (upload_.copy_recorded) {
    b_.copier().stream_wait(stream, upload_.copied);
  }
}

template <class Backend>
std::size_t
device_plan<Backend>::apply_upload(std::size_t p, std::int64_t begin, std::int64_t end, cudaStream_t stream) {
  const param_info& pi = info(p);
  const auto& d = dev_[p];
  const auto& u = upload_.params[p];
  dispatch_dtype(pi.type, [&](auto tag) {
    using T = decltype(tag);
    if (upload_.chunk_bytes == 0) {
      scatter(reinterpret_cast<const T*>(u.buffer.data()) + begin * pi.channel_len, d.host_set.data() + begin,
              end - begin, pi.weight_matrix<T>(), stream);
      return;
    }
    // chunk_ring: up and scattered one chunk at a time; the next copy into the chunk follows the
    // scatter that read it in stream order.
    const auto rows =
        static_cast<std::int64_t>(upload_.chunk_bytes / pi.channel_bytes()); // >= 1: registration
    for (std::int64_t b = begin; b < end; b += rows) {
      const std::int64_t n = std::min(rows, end - b);
      b_.copy_h2d(upload_.chunk.data(), u.source + static_cast<std::size_t>(b) * pi.channel_bytes(),
                  static_cast<std::size_t>(n) * pi.channel_bytes(), stream);
      scatter(reinterpret_cast<const T*>(upload_.chunk.data()), d.host_set.data() + b, n,
              pi.weight_matrix<T>(), stream);
    }
  });
  return static_cast<std::size_t>(end - begin) * pi.channel_bytes();
}

template <class Backend>
void device_plan<Backend>::end_apply(cudaStream_t stream) {
  b_.copier().record(upload_.scattered, stream);
  upload_.scatter_recorded = true;
}

template <class Backend>
void device_plan<Backend>::wait_upload_done() {
  if (upload_.copy_recorded) {
    b_.copier().synchronize(upload_.copied);
  }
  for (std::size_t i = 0; i < upload_.stage_recorded.size(); ++i) { // a failed job's last chunks
    if (upload_.stage_recorded[i] != 0) {
      b_.copier().synchronize(upload_.stage_copied[i]);
    }
  }
  if (upload_.chunk_bytes > 0 && upload_.scatter_recorded) {
    b_.copier().synchronize(upload_.scattered); // the boundary's copies read the host buffers before it
  }
}

} // namespace detail
ZF_NAMESPACE_END
