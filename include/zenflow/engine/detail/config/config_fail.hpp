/// @file
/// The one error of zenflow::config's readers and validation: an invalid_argument naming the key.
#pragma once

#include <string>
#include <string_view>

#include <zenflow/core/config.hpp>
#include <zenflow/core/error.hpp>

ZF_NAMESPACE_BEGIN

namespace detail {

/// Throws "zenflow::config: key '<key>' <why>".
[[noreturn]] inline void config_fail(std::string_view key, std::string_view why) {
  std::string msg = "zenflow::config: key '";
  msg += key;
  msg += "' ";
  msg += why;
  throw invalid_argument(msg);
}

} // namespace detail

ZF_NAMESPACE_END
