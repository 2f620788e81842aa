/// @file
/// fp32 and fp64 arithmetic with the same bits on the host and the device, whatever the flags a
/// consumer compiles with: `mul_f`, `add_f`, `sub_f`, `fma_f`, `div_f`, `sqrt_f` and their fp64
/// `_d` twins, every operation correctly rounded and never contracted into an FMA. Why and how:
/// core/detail/fp.hpp, which holds them (core's own detail headers compute with them, and core
/// may not include math/).
#pragma once

#include <zenflow/core/detail/fp.hpp>
