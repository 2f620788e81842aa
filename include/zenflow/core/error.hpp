/// @file
/// Error handling: launchers return `cudaError_t`; the convenience layer throws.
///
/// The toolkit, three names:
/// - `detail::reject(fn, arg, why)` (or `ZF_EXPECT_ARG`): a launcher records
///   "<fn>: argument '<arg>' <why>" and returns cudaErrorInvalidValue;
/// - `detail::check(status, what)` (or `ZF_CUDA_TRY`): a status becomes a `cuda_error`; a recorded
///   message is attached only to cudaErrorInvalidValue, and consumed;
/// - `detail::require(ok, fn, arg, why)` / `detail::fail_argument(fn, arg, why)`: the C++ layer
///   (RAII types, transport classes) throws `invalid_argument` with the same message.
///
/// A launcher that rejects an argument returns `cudaErrorInvalidValue` and records a message
/// naming the argument in a thread-local slot (`last_error_message()`), so that `ZF_CUDA_TRY`
/// can throw an exception that says what was wrong, not only that something was.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

#include <cuda_runtime_api.h>

#include <zenflow/core/config.hpp>

ZF_NAMESPACE_BEGIN

namespace detail {
inline std::string& last_error_slot() {
  thread_local std::string message;
  return message;
}
} // namespace detail

/// The message recorded by the last launcher that rejected an argument on this thread.
[[nodiscard]] inline const std::string& last_error_message() {
  return detail::last_error_slot();
}

/// Clears the thread's recorded message.
inline void clear_last_error_message() {
  detail::last_error_slot().clear();
}

/// Thrown by `ZF_CUDA_TRY` and by the convenience layer (engine, RAII types).
class cuda_error : public std::runtime_error {
public:
  cuda_error(cudaError_t code, const std::string& what) : std::runtime_error(what), code_(code) {}
  [[nodiscard]] cudaError_t code() const noexcept { return code_; }

private:
  cudaError_t code_;
};

/// Thrown by the C++ convenience layer for an invalid argument; `what()` names the argument.
class invalid_argument : public std::invalid_argument {
public:
  using std::invalid_argument::invalid_argument;
};

/// A collective failed in the transport (an MPI or NCCL error), or the communicator is unusable
/// after an earlier failure (comm/communicator.hpp).
class comm_error : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

/// A collective did not complete within the communicator's bound: a rank has failed, hangs, or
/// never called the same collective. The communicator is unusable afterwards; the usual reaction
/// is to end the job (`MPI_Abort`; an NCCL communicator: revoke it, then destroy it).
class comm_timeout : public comm_error {
public:
  using comm_error::comm_error;
};

namespace detail {
/// Records "<function>: argument '<argument>' <why>" and returns cudaErrorInvalidValue.
[[nodiscard]] inline cudaError_t
reject(std::string_view function, std::string_view argument, std::string_view why) {
  std::string& slot = last_error_slot();
  slot.assign(function);
  slot += ": argument '";
  slot += argument;
  slot += "' ";
  slot += why;
  return cudaErrorInvalidValue;
}

/// The one rule for turning a failed status into an exception: throws `cuda_error` with
/// "<what>: <error name> (<error string>)"; for cudaErrorInvalidValue the message a launcher
/// recorded (`reject`) is attached and consumed, so a later, unrelated failure never carries it.
/// Clears CUDA's sticky last error for the non-sticky codes. `status` must not be cudaSuccess.
[[noreturn]] inline void throw_status(cudaError_t status, std::string_view what) {
  (void)cudaGetLastError();
  std::string msg(what);
  msg += ": ";
  msg += cudaGetErrorName(status);
  msg += " (";
  msg += cudaGetErrorString(status);
  msg += ")";
  std::string& slot = last_error_slot();
  if (status == cudaErrorInvalidValue && !slot.empty()) {
    msg += ": " + slot;
  }
  slot.clear();
  throw cuda_error(status, msg);
}

/// Throws as `throw_status` when `status` is not cudaSuccess.
inline void check(cudaError_t status, std::string_view what) {
  if (status != cudaSuccess) {
    throw_status(status, what);
  }
}

/// The C++ layer's invalid argument: throws `zenflow::invalid_argument` with the message a
/// launcher's `reject` would record, "<function>: argument '<argument>' <why>".
[[noreturn]] inline void
fail_argument(std::string_view function, std::string_view argument, std::string_view why) {
  std::string msg(function);
  msg += ": argument '";
  msg += argument;
  msg += "' ";
  msg += why;
  throw invalid_argument(msg);
}

/// `fail_argument` unless `ok`.
inline void require(bool ok, std::string_view function, std::string_view argument, std::string_view why) {
  if (!ok) {
    fail_argument(function, argument, why);
  }
}

/// Rethrows the exception in flight with "<context>: " in front of its message, keeping the types
/// callers catch (`cuda_error` with its code, `invalid_argument`, `comm_timeout`, `comm_error`); any
/// other std::exception becomes
/// a std::runtime_error. For errors that surface on another thread than the one they happened on.
[[noreturn]] inline void rethrow_with_context(const std::string& context) {
  try {
    throw;
  } catch (const cuda_error& e) {
    throw cuda_error(e.code(), context + ": " + e.what());
  } catch (const invalid_argument& e) {
    throw invalid_argument(context + ": " + e.what());
  } catch (const comm_timeout& e) { // a lost rank stays a timeout: the caller ends the job on it
    throw comm_timeout(context + ": " + e.what());
  } catch (const comm_error& e) {
    throw comm_error(context + ": " + e.what());
  } catch (const std::exception& e) {
    throw std::runtime_error(context + ": " + e.what());
  }
}

/// `ZF_CUDA_TRY`'s failure path: `check` with "<file>:<line>: <expression>" as what failed.
[[noreturn]] inline void throw_cuda_error(cudaError_t code, const char* expr, const char* file, int line) {
  throw_status(code, std::string(file) + ":" + std::to_string(line) + ": " + expr);
}
} // namespace detail

ZF_NAMESPACE_END

/// Evaluates a `cudaError_t` expression and throws `zenflow::cuda_error` if it failed. Variadic so
/// that template argument lists with commas need no extra parentheses.
#define ZF_CUDA_TRY(...)                                                                                     \
  do {                                                                                                       \
    ::zenflow::clear_last_error_message();                                                                   \
    const cudaError_t zf_try_status_ = (__VA_ARGS__);                                                        \
    if (zf_try_status_ != cudaSuccess) {                                                                     \
      ::zenflow::detail::throw_cuda_error(zf_try_status_, #__VA_ARGS__, __FILE__, __LINE__);                 \
    }                                                                                                        \
  } while (0)

/// Inside a launcher: reject argument `arg` unless `cond` holds. Returns from the caller.
#define ZF_EXPECT_ARG(cond, function, arg, why)                                                              \
  do {                                                                                                       \
    if (!(cond)) {                                                                                           \
      return ::zenflow::detail::reject(function, arg, why);                                                  \
    }                                                                                                        \
  } while (0)
