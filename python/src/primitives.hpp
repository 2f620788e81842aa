// The host primitives' part of the module (primitives.cpp).
#pragma once

#include <nanobind/nanobind.h>

namespace zenflow_py {

/// Adds channel_norms, topk and adamw to the module.
void bind_primitives(nanobind::module_& mod);

} // namespace zenflow_py
