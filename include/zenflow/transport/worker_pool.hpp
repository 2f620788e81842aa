/// @file
/// Moved: the pool lives in core (include/zenflow/core/worker_pool.hpp); kept so that old includes compile.
#pragma once
#include <zenflow/core/worker_pool.hpp>
