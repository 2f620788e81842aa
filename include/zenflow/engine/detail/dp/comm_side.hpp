/// @file
/// What the two data-parallel policies' sides (owner_partition.hpp, sharded.hpp) share: their
/// communicator, which must live in the backend's memory, and the members that only read it.
#pragma once

#include <type_traits>
#include <utility>

#include <zenflow/comm/communicator.hpp>
#include <zenflow/core/config.hpp>
#include <zenflow/engine/backend.hpp>

ZF_NAMESPACE_BEGIN
namespace detail {

/// A host communicator reads host memory; a device one, device memory (the emulated device's is
/// host memory: emulated_device_communicator, stream-ordered on its streams). So the host and
/// emulated backends take local/mpi_communicator (the emulated one also
/// emulated_device_communicator), the CUDA backend local_device/nccl_communicator.
template <class Backend, class Comm>
inline constexpr bool comm_fits_backend =
    std::is_base_of_v<host_memory, Backend>
        ? !Comm::is_device || (Backend::is_device && emulates_device_memory<Comm>)
        : Comm::is_device && !emulates_device_memory<Comm>;

/// The communicator a data-parallel side is constructed from (the engine constructor's third
/// argument), its rank and world size. Not copyable: the side's buffers are the communicator's.
template <class Comm>
class comm_side {
public:
  using argument_type = Comm;

  explicit comm_side(Comm comm) : comm_(std::move(comm)) {}
  comm_side(const comm_side&) = delete;
  comm_side& operator=(const comm_side&) = delete;

  [[nodiscard]] Comm& comm() noexcept { return comm_; }
  [[nodiscard]] const Comm& comm() const noexcept { return comm_; }
  [[nodiscard]] int rank() const { return comm_.rank(); }
  [[nodiscard]] int ranks() const { return comm_.size(); }

protected:
  Comm comm_;
};

} // namespace detail
ZF_NAMESPACE_END
