/// @file
/// The engine's host windows as jobs: the window queue and the pool they run on, a window's job
/// (the host AdamW of host_side::run_window, then its new weights up), the drain that waits for
/// the submitted job and applies its weights at a boundary, and the synchronous window of the
/// modes that do not overlap. What a job wrote for the training thread (`job_outcome`) is read
/// only after the queue says the job is done.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <cuda_runtime_api.h>

#include <zenflow/core/config.hpp>
#include <zenflow/core/error.hpp>
#include <zenflow/core/placement.hpp>
#include <zenflow/core/worker_pool.hpp>
#include <zenflow/engine/backend.hpp>
#include <zenflow/engine/detail/host/host_side.hpp>
#include <zenflow/engine/detail/plan/device_plan.hpp>
#include <zenflow/engine/detail/registry/params.hpp>
#include <zenflow/engine/detail/step/call_cost.hpp>
#include <zenflow/engine/detail/step/schedule.hpp>
#include <zenflow/engine/detail/trace/pipeline_trace.hpp>
#include <zenflow/engine/stats.hpp>
#include <zenflow/transport/window_queue.hpp>

ZF_NAMESPACE_BEGIN
namespace detail {

/// Where a window's shares from the other ranks come in (data parallel's gather at the boundary).
enum class window_gather : std::uint8_t {
  none,           ///< one rank: the job's thread copies its whole upload buffer up
  host_buffers,   ///< a host communicator: into the host upload buffers, then every share goes up
  device_buffers, ///< a device communicator: the job's thread copies this rank's share up, and the
                  ///< gather runs in the device upload buffers on the boundary's stream
};

template <engine_backend Backend>
class host_jobs {
public:
  using host_side_type = host_side<typename Backend::template host_buffer<std::byte>>;

  host_jobs(device_plan<Backend>& plan,
            const std::vector<param_info>& params,
            host_side_type& host,
            zenflow::stats& stats,
            pipeline_trace& trace)
      : plan_(plan), params_(params), host_(host), stats_(stats), trace_(trace) {}

  /// The pool of `place.threads` threads the window's AdamW runs on, and with `overlap` the queue
  /// that runs the jobs one window behind (staleness bound 1); the pool's threads and the queue's
  /// executor on `place.pinned_cores()` (empty: anywhere).
  void start(const host_placement& place, bool overlap) {
    const std::vector<int> cores = place.pinned_cores();
    worker_pool_options o;
    o.threads = place.threads;
    o.confine_to = cores;
    pool_ = std::make_unique<worker_pool>(o);
    if (overlap) {
      queue_ = std::make_unique<window_queue>(1);
      if (!cores.empty()) {
        (void)queue_->confine_executor(cores); // before its first job: no job runs elsewhere
      }
    }
  }

  /// Runs the queued job to its end (its results are dropped by the caller). Never throws.
  void stop() noexcept {
    if (queue_) {
      try {
        queue_->shutdown(shutdown_mode::drain);
      } catch (...) { // NOLINT(bugprone-empty-catch): the engine's destructor reports nothing
      }
    }
  }

  /// Data parallel (the parallel side's gather_window()): `gather(stream)` gives every rank every
  /// rank's share of a job's weights and returns the bytes this rank sent. A collective, so it
  /// runs on the training thread at the boundary (the same point on every rank), at `where`.
  void set_gather(window_gather where, std::function<std::uint64_t(cudaStream_t)> gather) {
    where_ = where;
    gather_ = std::move(gather);
  }

  [[nodiscard]] bool overlapped() const noexcept { return queue_ != nullptr; }
  [[nodiscard]] const job_outcome& outcome() const noexcept { return outcome_; }

  /// Waits for the job in flight (its rows are being written), without applying it.
  void wait_idle() {
    if (queue_) {
      queue_->drain();
    }
  }

  /// Submits the host window of accumulator `a` once the consumer has taken in the first `seq`
  /// slots (the window's last ones): the training thread does not wait for them. `wp`: the
  /// window's lr scales and parameters with a gradient (handover.hpp). With one
  /// accumulator buffer the next window's first step waits, parameter by parameter, for this job
  /// to have read it (host_side::begin_read; every exit of the job frees all). Returns the
  /// queue's window index.
  std::int64_t submit(std::size_t a, float lr, window_params wp, std::uint64_t seq) {
    const std::uint64_t job = host_.begin_read(a);
    try {
      return queue_->submit([this, a, lr, wp = std::move(wp), seq, job] {
        struct all_read { // whatever happens in the job, the consumer may write every row after it
          host_side_type& host;
          std::uint64_t job;
          ~all_read() { host.note_all_read(job); }
        } const guard{host_, job};
        plan_.enter_engine_thread(); // the queue's thread: the engine's device, relaxed capture mode
        const std::int32_t n_w = host_.take_n_w(a, seq);
        outcome_.produced = n_w > 0;
        if (n_w > 0) {
          plan_.wait_upload_done();
          run(a, n_w, lr, wp, job);
        }
      });
    } catch (...) {
      host_.note_all_read(job);
      throw;
    }
  }

  /// A job that already ran (a checkpoint's): it only uploads the weights it left (in the host
  /// buffers, or rounded again from the host masters, which hold them bit for bit), for the next
  /// drain to apply. Returns the queue's window index.
  std::int64_t submit_finished(bool produced) {
    return queue_->submit([this, produced] {
      plan_.enter_engine_thread();
      outcome_ = job_outcome{produced, 0.0};
      if (produced && uploads_on_job_thread()) {
        plan_.begin_uploads();
        if (staged()) {
          upload_masters();
        } else {
          upload_buffers();
        }
        plan_.end_uploads();
      }
    });
  }

  /// Waits for the submitted `job` (if any), applies its weights on `stream` and forgets it;
  /// `windows_closed` gives the staleness it reached. A failed job's error is rethrown naming its
  /// window and steps.
  void drain(std::optional<submitted_job>& job,
             std::int64_t windows_closed,
             cudaStream_t stream,
             call_cost& cost) {
    if (!job) {
      return;
    }
    const submitted_job j = *job;
    try {
      if (queue_->applied(j.queue_window)) {
        queue_->wait_applied(j.queue_window); // done already: no stall (rethrows its error)
      } else {
        timed_stall(cost, "host job not done", [&] { queue_->wait_applied(j.queue_window); });
      }
    } catch (...) {
      rethrow_with_context("zenflow::engine: the host job of window " + std::to_string(j.window) +
                           " (steps " + std::to_string(j.first_step) + ".." + std::to_string(j.last_step) +
                           ") failed");
    }
    if (outcome_.produced) {
      account();
      apply(stream, cost);
      stats_.max_staleness_windows = std::max(stats_.max_staleness_windows, windows_closed - 1 - j.window);
    }
    job.reset();
  }

  /// Closes the open window of `sched` at the end of a step (docs/engine-semantics.md, 6): without
  /// overlap it runs now; with it the previous job is drained and this one submitted (it waits for
  /// the window's last slots, the first `push_window(a)`, itself, so the training thread does
  /// not), and the next window fills the other accumulator. `push_window(a)` (the D2H stream's
  /// close_window) runs once the previous job is done: what it sends down (accumulate = device:
  /// the window's sum) may land in the buffer that job read. It returns the slots pushed so far.
  template <class PushWindow>
  void close_window(schedule& sched,
                    bool overlap,
                    float lr,
                    window_params wp,
                    cudaStream_t stream,
                    call_cost& cost,
                    PushWindow&& push_window) {
    const std::size_t a = sched.accumulator;
    const open_window window = *sched.window;
    const std::int64_t w = sched.windows_closed++;
    if (!overlap) {
      run_now(a, lr, wp, push_window(a), stream, cost);
    } else {
      drain(sched.job, sched.windows_closed, stream, cost);
      const std::int64_t qw = submit(a, lr, std::move(wp), push_window(a));
      sched.job = submitted_job{qw, w, window.start, window.start + window.length - 1};
      sched.accumulator ^= 1u;
    }
    stats_.last_window_length = window.length;
    ++stats_.windows_closed;
    sched.window.reset();
  }

  /// The host window of accumulator `a` run now, on the training thread, and applied: every slot
  /// pushed so far (`pushed`) consumed, the host AdamW, the new weights up and scattered (all a
  /// stall).
  void run_now(std::size_t a,
               float lr,
               const window_params& wp,
               std::uint64_t pushed,
               cudaStream_t stream,
               call_cost& cost) {
    std::int32_t n_w = 0;
    timed_stall(cost, "synchronous window: gradients down", [&] { n_w = host_.take_n_w(a, pushed); });
    if (n_w > 0) {
      timed_stall(cost, "synchronous window: host AdamW", [&] {
        plan_.wait_upload_done();
        run(a, n_w, lr, wp, 0); // no window is open beside it: nobody waits for its reads
      });
      account();
      apply(stream, cost);
    }
  }

private:
  /// The window's new weights through the plan's upload stage: a parameter's rows a chunk at a
  /// time, each chunk sent up as soon as the window wrote it (device_plan_upload.hpp).
  struct staged_sink {
    device_plan<Backend>* plan;
    const std::vector<param_info>* params;
    [[nodiscard]] std::int64_t rows_per_call(std::size_t p) const noexcept {
      return static_cast<std::int64_t>(plan->upload_stage_bytes() / (*params)[p].channel_bytes()); // >= 1
    }
    [[nodiscard]] std::byte* begin_rows(std::size_t /*p*/, std::int64_t /*pos*/, std::int64_t /*n*/) const {
      return plan->stage_chunk();
    }
    void end_rows(std::size_t p, std::int64_t pos, std::int64_t n) const {
      (void)plan->send_staged(p, pos, pos + n);
    }
  };

  /// The job's weights go up through the plan's stage (no host upload buffers).
  [[nodiscard]] bool staged() const noexcept { return plan_.upload_stage_bytes() > 0; }

  /// The host window of accumulator `a` (host_side::run_window) as window job `job`, its new
  /// weights up: through the stage as it goes, or from the upload buffers after it. Runs on the
  /// queue's executor or inline.
  void run(std::size_t a, std::int32_t n_w, float lr, const window_params& wp, std::uint64_t job) {
    const std::int64_t t0 = pipeline_trace::now();
    if (staged()) {
      plan_.begin_uploads();
      staged_sink sink{&plan_, &params_};
      outcome_.seconds = host_.run_window(a, n_w, lr, wp, pool_.get(), sink, job);
      plan_.end_uploads();
    } else {
      auto sink = host_.buffered_sink();
      outcome_.seconds = host_.run_window(a, n_w, lr, wp, pool_.get(), sink, job);
      if (uploads_on_job_thread()) {
        upload();
      }
    }
    trace_.span(trace_track::host_job, "window AdamW", "host_job", t0, pipeline_trace::now(),
                "\"n_w\": " + std::to_string(n_w));
  }

  /// The job's thread starts the copy up (one rank, or a device communicator's gather).
  [[nodiscard]] bool uploads_on_job_thread() const noexcept { return where_ != window_gather::host_buffers; }

  /// The host-set positions of `p` this rank's job writes and sends up: its share with a device
  /// communicator's gather, else every position.
  [[nodiscard]] std::pair<std::int64_t, std::int64_t> sent_rows(std::size_t p) const {
    const auto& h = host_[p];
    const bool share = where_ == window_gather::device_buffers;
    return {share ? h.shard.pos : 0, share ? h.shard.end() : static_cast<std::int64_t>(h.host_set.size())};
  }

  /// On the job's thread, as soon as the job wrote its upload buffers: their copy up into the
  /// device upload buffers starts (CUDA: on the backend's upload stream, during the next window);
  /// with a device communicator's gather, this rank's share only.
  void upload() {
    plan_.begin_uploads();
    upload_buffers();
    plan_.end_uploads();
  }
  void upload_buffers() {
    for (std::size_t p = 0; p < params_.size(); ++p) {
      const auto& h = host_[p];
      if (params_[p].host_side && !h.host_set.empty()) {
        const auto [begin, end] = sent_rows(p);
        (void)plan_.upload(p, h.upload.data(), h.upload_origin(), begin, end);
      }
    }
  }
  /// Staged, a restored job's weights: this rank's host rows of the masters rounded to the working
  /// precision as the window rounded them (RNE), through the stage. One rank or a device
  /// communicator's gather, whose job wrote exactly these rows (this rank's shard of the host set).
  void upload_masters() {
    for (std::size_t p = 0; p < params_.size(); ++p) {
      const auto& h = host_[p];
      const auto& pi = params_[p];
      if (!pi.host_side || h.host_set.empty()) {
        continue;
      }
      const std::int64_t step = plan_.upload_stage_bytes() / pi.channel_bytes();
      const auto rows = static_cast<std::int64_t>(h.shard.rows.size());
      for (std::int64_t b = 0; b < rows; b += step) {
        const std::int64_t n = std::min(step, rows - b);
        std::byte* out = plan_.stage_chunk();
        dispatch_dtype(pi.type, [&](auto tag) {
          using T = decltype(tag);
          for (std::int64_t r = 0; r < n; ++r) {
            const float* master =
                h.master.data() +
                static_cast<std::int64_t>(h.shard.rows[static_cast<std::size_t>(b + r)]) * pi.channel_len;
            (void)cpu::convert_span<float, T>(master, reinterpret_cast<T*>(out) + r * pi.channel_len,
                                              pi.channel_len, false);
          }
        });
        (void)plan_.send_staged(p, h.shard.pos + b, h.shard.pos + b + n);
      }
    }
  }

  /// At the boundary: the last finished job's uploaded weights are scattered into the host-set
  /// working weights (device to device, on `stream`, after the copies: no host wait). Data
  /// parallel: the ranks' shares gathered first (then copied up whole from the host, or gathered
  /// on the device after this rank's share is up: only that share crossed PCIe).
  void apply(cudaStream_t stream, call_cost& cost) {
    if (where_ == window_gather::host_buffers) {
      cost.comm += gather_(stream);
      upload();
    }
    plan_.begin_apply(stream);
    if (where_ == window_gather::device_buffers) {
      cost.comm += gather_(stream);
    }
    for (std::size_t p = 0; p < params_.size(); ++p) {
      const auto& h = host_[p];
      if (params_[p].host_side && !h.host_set.empty()) {
        const std::size_t bytes =
            plan_.apply_upload(p, 0, static_cast<std::int64_t>(h.host_set.size()), stream);
        cost.h2d += where_ == window_gather::device_buffers
                        ? static_cast<std::size_t>(h.shard.end() - h.shard.pos) * params_[p].channel_bytes()
                        : bytes;
      }
    }
    plan_.end_apply(stream);
  }

  void account() {
    stats_.host_window_s += outcome_.seconds;
    stats_.last_host_window_s = outcome_.seconds;
    ++stats_.host_jobs;
  }

  device_plan<Backend>& plan_;
  const std::vector<param_info>& params_;
  host_side_type& host_;
  zenflow::stats& stats_;
  pipeline_trace& trace_;
  std::unique_ptr<worker_pool> pool_;
  std::unique_ptr<window_queue> queue_;
  job_outcome outcome_; // written by the job, read after the queue says it is done
  std::function<std::uint64_t(cudaStream_t)> gather_;
  window_gather where_ = window_gather::none;
};

} // namespace detail
ZF_NAMESPACE_END
