// Stands in for <torch/extension.h> when DeepSpeed's cpu_adam.h is compiled without PyTorch: the
// driver uses only Adam_Optimizer on fp32 pointers, so the tensor and half types are just named.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <type_traits>
#include <vector>
namespace c10 {
struct Half {
  std::uint16_t x;
  operator float() const;
};
struct BFloat16 {
  std::uint16_t x;
  operator float() const;
};
} // namespace c10
namespace at {
using Half = c10::Half;
using BFloat16 = c10::BFloat16;
} // namespace at
namespace torch {
class Tensor;
}
