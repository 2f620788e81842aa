/// @file
/// A copy backend for the cpu tests whose copies complete LATER, in order, on a thread of their
/// own, after random delays: a host stand-in for a GPU copy engine. With it the rings' event
/// waits (a slot published before its bytes have landed, an upload slot still being read) are
/// exercised in CI, under ThreadSanitizer; `host_copy_backend` completes every copy at once.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <thread>

#include <zenflow/transport/copy_backend.hpp>

namespace zf_test {

class async_host_backend {
public:
  static constexpr bool is_device = false;
  /// "Recorded" = the number of operations enqueued before it; complete when that many ran.
  struct event_type {
    std::uint64_t target = 0;
  };

  explicit async_host_backend(std::uint64_t seed = 1, int max_delay_us = 30)
      : engine_(std::make_shared<engine>(seed, max_delay_us)) {}

  void create_event(event_type& e) const { e.target = 0; }
  void destroy_event(event_type&) const noexcept {}
  void copy(void* dst, const void* src, std::size_t bytes, zenflow::copy_direction, cudaStream_t) const {
    engine_->enqueue([dst, src, bytes] {
      if (bytes > 0) {
        std::memcpy(dst, src, bytes);
      }
    });
  }
  /// A "kernel": runs `fn` on the copy engine thread, in order with the copies.
  void launch(std::function<void()> fn) const { engine_->enqueue(std::move(fn)); }
  void record(event_type& e, cudaStream_t) const { e.target = engine_->enqueued(); }
  void synchronize(event_type& e) const { engine_->wait(e.target); }
  [[nodiscard]] bool query(event_type& e) const { return engine_->completed() >= e.target; }
  // One in-order engine serves every "stream", so work enqueued later already runs after it.
  void stream_wait(cudaStream_t, event_type&) const noexcept {}
  [[nodiscard]] cudaStream_t create_stream(int) const noexcept { return nullptr; }
  void destroy_stream(cudaStream_t) const noexcept {}
  void synchronize_stream(cudaStream_t) const { engine_->wait(engine_->enqueued()); }

  /// Operations still queued or running.
  [[nodiscard]] std::uint64_t pending() const { return engine_->enqueued() - engine_->completed(); }

private:
  class engine {
  public:
    engine(std::uint64_t seed, int max_delay_us) : rng_(seed), max_delay_us_(max_delay_us) {
      thread_ = std::thread([this] { loop(); });
    }
    engine(const engine&) = delete;
    engine& operator=(const engine&) = delete;
    ~engine() {
      {
        std::lock_guard lock(mutex_);
        stop_ = true;
      }
      cv_.notify_all();
      thread_.join();
    }
    void enqueue(std::function<void()> fn) {
      {
        std::lock_guard lock(mutex_);
        tasks_.push_back(std::move(fn));
        ++enqueued_;
      }
      cv_.notify_all();
    }
    std::uint64_t enqueued() {
      std::lock_guard lock(mutex_);
      return enqueued_;
    }
    std::uint64_t completed() {
      std::lock_guard lock(mutex_);
      return completed_;
    }
    void wait(std::uint64_t target) {
      std::unique_lock lock(mutex_);
      cv_.wait(lock, [&] { return completed_ >= target; });
    }

  private:
    void loop() {
      for (;;) {
        std::function<void()> task;
        {
          std::unique_lock lock(mutex_);
          cv_.wait(lock, [&] { return stop_ || !tasks_.empty(); });
          if (tasks_.empty()) {
            return;
          }
          task = std::move(tasks_.front());
          tasks_.pop_front();
        }
        // A copy engine is slow sometimes: sleep before one operation in four.
        if (max_delay_us_ > 0 && rng_() % 4 == 0) {
          std::this_thread::sleep_for(
              std::chrono::microseconds(rng_() % static_cast<unsigned>(max_delay_us_)));
        }
        task();
        {
          std::lock_guard lock(mutex_);
          ++completed_;
        }
        cv_.notify_all();
      }
    }

    std::mutex mutex_;
    std::condition_variable cv_;
    std::deque<std::function<void()>> tasks_;
    std::uint64_t enqueued_ = 0;
    std::uint64_t completed_ = 0;
    bool stop_ = false;
    std::minstd_rand rng_;
    int max_delay_us_;
    std::thread thread_;
  };

  std::shared_ptr<engine> engine_;
};

static_assert(zenflow::copy_backend<async_host_backend>);

} // namespace zf_test
