/// @file
/// The typed readers of single JSON values used by zenflow::config's DeepSpeed JSON reader
/// (detail/config/config_json.hpp): numbers, integers in a range, booleans, strings, enum names and
/// objects, each failing with zenflow::invalid_argument naming the JSON key (detail::config_fail).
#pragma once

#include <cfloat>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include <zenflow/core/config.hpp>
#include <zenflow/core/error.hpp>
#include <zenflow/engine/detail/config/config_fail.hpp>

ZF_NAMESPACE_BEGIN

namespace detail {

/// A short rendering of a JSON value for error messages.
inline std::string json_excerpt(const nlohmann::json& v) {
  std::string s = v.dump();
  if (s.size() > 60) {
    s = s.substr(0, 57) + "...";
  }
  return std::string(v.type_name()) + " " + s;
}

inline double json_number(const nlohmann::json& v, const std::string& key) {
  if (!v.is_number()) {
    config_fail(key, "must be a number, got " + json_excerpt(v));
  }
  const double d = v.get<double>();
  if (!std::isfinite(d)) {
    config_fail(key, "must be finite, got " + json_excerpt(v));
  }
  return d;
}

/// A number that must also be representable as a finite float.
inline float json_float(const nlohmann::json& v, const std::string& key) {
  const double d = json_number(v, key);
  if (std::fabs(d) > static_cast<double>(FLT_MAX)) {
    config_fail(key, "is out of the float range, got " + json_excerpt(v));
  }
  return static_cast<float>(d);
}

inline std::int64_t json_integer(const nlohmann::json& v, const std::string& key) {
  if (v.is_number_unsigned()) {
    const auto u = v.get<std::uint64_t>();
    if (u > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
      config_fail(key, "is out of range, got " + json_excerpt(v));
    }
    return static_cast<std::int64_t>(u);
  }
  if (v.is_number_integer()) {
    return v.get<std::int64_t>();
  }
  if (v.is_number_float()) {
    // 4.0 is read as 4 (as pydantic does); 4.5 is not an integer.
    const double d = v.get<double>();
    if (std::isfinite(d) && std::floor(d) == d && std::fabs(d) < 9.0e15) {
      return static_cast<std::int64_t>(d);
    }
  }
  config_fail(key, "must be an integer, got " + json_excerpt(v));
}

/// An integer in [lo, hi] (checked here because the field it goes to may be narrower).
inline std::int64_t
json_integer_in(const nlohmann::json& v, const std::string& key, std::int64_t lo, std::int64_t hi) {
  const std::int64_t i = json_integer(v, key);
  if (i < lo || i > hi) {
    config_fail(key, "must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " +
                         std::to_string(i));
  }
  return i;
}

inline bool json_bool(const nlohmann::json& v, const std::string& key) {
  if (!v.is_boolean()) {
    config_fail(key, "must be true or false, got " + json_excerpt(v));
  }
  return v.get<bool>();
}

inline std::string json_string(const nlohmann::json& v, const std::string& key) {
  if (!v.is_string()) {
    config_fail(key, "must be a string, got " + json_excerpt(v));
  }
  return v.get<std::string>();
}

/// Looks `s` up in {name, value} pairs; rejects anything else, listing the accepted names.
template <class E>
E json_enum(const nlohmann::json& v,
            const std::string& key,
            std::initializer_list<std::pair<std::string_view, E>> names) {
  std::string accepted;
  if (v.is_string()) {
    const std::string s = v.get<std::string>();
    for (const auto& [name, value] : names) {
      if (s == name) {
        return value;
      }
    }
  }
  for (const auto& [name, value] : names) {
    (void)value;
    accepted += accepted.empty() ? "" : ", ";
    accepted += '"';
    accepted += name;
    accepted += '"';
  }
  config_fail(key, "must be one of " + accepted + ", got " + json_excerpt(v));
}

inline const nlohmann::json*
json_object_member(const nlohmann::json& obj, const char* name, const std::string& key) {
  const auto it = obj.find(name);
  if (it == obj.end() || it->is_null()) {
    return nullptr;
  }
  if (!it->is_object()) {
    config_fail(key, "must be an object, got " + json_excerpt(*it));
  }
  return &*it;
}

} // namespace detail

ZF_NAMESPACE_END
