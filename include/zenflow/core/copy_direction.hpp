/// @file
/// The direction of a transfer between host and device memory (shared by the copy backends of
/// transport/ and the emulated device of core/).
#pragma once

#include <zenflow/core/config.hpp>

ZF_NAMESPACE_BEGIN

/// Direction of a transport copy.
enum class copy_direction : unsigned char { device_to_host, host_to_device };

ZF_NAMESPACE_END
