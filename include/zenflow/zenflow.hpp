/// @file
/// Umbrella header for the host side of zenflow: everything that compiles with the host
/// compiler alone (core types, the host backend of every primitive, the engine).
/// `<zenflow/zenflow.cuh>` adds the CUDA launchers.
#pragma once

#include <zenflow/core/config.hpp>
#include <zenflow/core/device.hpp>
#include <zenflow/core/dtype.hpp>
#include <zenflow/core/error.hpp>
#include <zenflow/core/memory.hpp>
#include <zenflow/core/views.hpp>
#include <zenflow/transport/worker_pool.hpp>
