/// @file
/// Umbrella header for the CUDA side of zenflow (needs nvcc): the host-side umbrella plus every
/// kernel launcher.
#pragma once

#include <zenflow/zenflow.hpp>
