// A downstream program on zenflow::mpi: one rank (MPI's singleton start), the communicator over
// MPI_COMM_WORLD, a sum and a verify_same.
#include <cstdio>
#include <mpi.h>

#include <zenflow/comm/hash.hpp>
#include <zenflow/comm/mpi_communicator.hpp>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rc = 0;
  {
    zenflow::mpi_communicator comm(MPI_COMM_WORLD);
    float x[2] = {1.5f, -2.0f};
    comm.all_reduce_sum(x, 2);
    comm.verify_same(zenflow::stable_hash{}.add_string("consumer").value(), "the configuration");
    if (x[0] != 1.5f * static_cast<float>(comm.size()) || x[1] != -2.0f * static_cast<float>(comm.size())) {
      std::printf("zenflow mpi consumer: wrong sum %f %f\n", static_cast<double>(x[0]),
                  static_cast<double>(x[1]));
      rc = 1;
    } else {
      std::printf("zenflow mpi consumer ok (%d rank)\n", comm.size());
    }
  }
  MPI_Finalize();
  return rc;
}
