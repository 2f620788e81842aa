// The checkpoints of the sharded engine (ZeRO-3) and across engines under mpiexec with 1, 2 and 3
// ranks (in the binary of sharded_mpi_test.cpp, harness sharded_mpi_run.hpp): one file per rank
// resumes its shard bit for bit; engines of other shards or another world size load the same
// files re-sharded, bit for bit an engine of their shards that never stopped (against their
// one-rank references resumed from the one-rank checkpoint). Across engines: a one-rank engine's
// file, an owner partition's (ZeRO-2) of any world size and a sharded world's each resume in the
// other engines at other world sizes, bit for bit. What cannot be re-sharded is refused naming
// the file, nothing changed.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <mpi.h>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include <zenflow/engine/checkpoint_file.hpp>

#include "sharded_cases.hpp"
#include "sharded_mpi_run.hpp"
#include "support/mpi_checks.hpp"

namespace {

using namespace zf_sharded_test;
using namespace zf_sharded_mpi;

template <class P>
class sharded_mpi_checkpoint : public ::testing::Test {};
TYPED_TEST_SUITE(sharded_mpi_checkpoint, paths);

// Each rank saves its shard's state (one file per rank); an engine registered with the same
// shards resumes from it, bit for bit the uninterrupted run (and its reference) from then on.
// Engines of other shards load the same files re-sharded and continue bit for bit against their
// own references resumed from the one-rank checkpoint: every boundary moved (same world size), a
// world of this rank alone (N ranks' files into one), and N ranks from the one-rank engine's file.
// `pending`: saved with a host job's new weights not yet applied (no flush since its window).
template <class P>
void resume_everywhere(const zenflow::config& cfg, bool pending, const std::string& tag) {
  SCOPED_TRACE(tag + (pending ? ", a job pending" : ", no job pending"));
  using run_type = sharded_run<float, P::emulated, P::device_comm>;
  run_type r(cfg);
  r.add();
  r.initialize();
  EXPECT_EQ(r.e->comm().rank(), world_rank());
  // Saved mid-window; `pending`: after the last step of a window, unflushed since the one before.
  const std::int64_t half = pending ? 8 : 7, steps = 12;
  for (std::int64_t t = 0; t < half; ++t) {
    r.step(t, false, false, false, !pending || t + 4 < half);
  }
  const std::string dir = ::testing::TempDir() + "zf_sharded_" + std::to_string(world_size()) + "_" + tag +
                          (pending ? "_pending" : "");
  const std::string ref_path = dir + "_ref_rank" + std::to_string(world_rank()) + ".ckpt";
  r.ref->save(ref_path);
  r.e->save(dir + ".ckpt", r.s);
  const auto whole = r.ref_w; // the weights at the checkpoint
  run_type q(cfg);
  q.add();
  for (std::size_t p = 0; p < q.w.size(); ++p) {
    std::copy(r.w[p].begin(), r.w[p].end(), q.w[p].begin());
    std::copy(r.ref_w[p].begin(), r.ref_w[p].end(), q.ref_w[p].begin());
  }
  q.initialize();
  q.ref->load(ref_path);
  q.e->load(dir + ".ckpt", q.s);
  for (std::int64_t t = half; t < steps; ++t) {
    r.step(t);
    q.step(t); // checks q's shards against its own resumed reference
    for (std::size_t p = 0; p < q.w.size(); ++p) {
      ASSERT_EQ(q.w[p], r.w[p]) << "step " << t << ", p" << p;
    }
  }
  q.check_state();
  // `x` (registered, not initialized) loads `path`, its reference the one-rank checkpoint; its
  // state and then every step must equal its reference's rows.
  const auto resume = [&](run_type& x, const std::string& path, const std::string& what) {
    SCOPED_TRACE(what);
    x.set_weights(whole);
    x.initialize();
    x.ref->load(ref_path);
    x.e->load(path, x.s);
    x.check("after the load");
    x.check_state();
    for (std::int64_t t = half; t < steps && !::testing::Test::HasFatalFailure(); ++t) {
      x.step(t);
    }
    x.check_state();
  };
  if (world_size() > 1) {
    run_type moved(cfg);
    moved.add(0, true);
    resume(moved, dir + ".ckpt", "every shard boundary one channel earlier");
  }
  run_type alone(cfg, true);
  alone.add();
  resume(alone, dir + ".ckpt", "one rank from " + std::to_string(world_size()) + " ranks' files");
  run_type from_one(cfg);
  from_one.add();
  resume(from_one, ref_path, std::to_string(world_size()) + " ranks from the one-rank engine's file");
}

TYPED_TEST(sharded_mpi_checkpoint, a_checkpoint_per_rank_resumes_its_shard_bit_for_bit) {
  resume_everywhere<TypeParam>(base(), false, "fp32");
  resume_everywhere<TypeParam>(base(), true, "fp32");
  auto q8 = base(); // int8 host moments: their block scales re-sharded row by row
  q8.host_moments = zenflow::moment_precision::int8;
  resume_everywhere<TypeParam>(q8, true, "int8");
  // Zen-auto (bf16 host moments): the one-rank masses and the voter, equal in every file.
  resume_everywhere<TypeParam>(zen_auto_case(), true, "zen_auto");
  auto gpu = base(); // every row on the device: the shards read from the device rows
  gpu.mode = zenflow::optimizer_mode::gpu_adamw;
  resume_everywhere<TypeParam>(gpu, false, "gpu_adamw");
}

/// A checkpoint saved by one engine, for others to resume: the engines' files (`path`), the
/// one-rank reference's (`ref_path`) and the whole weights at the save.
struct saved_run {
  std::string path, ref_path;
  std::vector<std::vector<float>> weights;
};

/// The steps the runs below take: saved after `half` (pending: right after a window closed, its
/// host job's weights not applied), resumed to `steps`.
inline std::int64_t half_of(bool pending) {
  return pending ? 8 : 7;
}
inline constexpr std::int64_t resume_steps = 12;

/// Every rank: an engine of `K` in a world of `ranks` (world_of) trains `half_of(pending)` steps
/// beside its one-rank reference and saves both. The ranks outside that world only learn the
/// names and the weights (world rank 0's reference file and weights: every reference is the same).
template <class P, engine_kind K>
saved_run save_run(const zenflow::config& cfg, int ranks, bool pending, const std::string& name) {
  sharded_run<float, P::emulated, P::device_comm, K> r(cfg, ranks);
  const std::string base = ::testing::TempDir() + "zf_reshard_" + std::to_string(world_size()) + "_" + name;
  saved_run out;
  // A world of one on every rank writes one file per rank (each resumes its own).
  out.path =
      base + (r.member && r.world_n == 1 ? "_r" + std::to_string(world_rank()) : std::string()) + ".ckpt";
  out.ref_path = base + "_ref_r" + std::to_string(r.member ? world_rank() : 0) + ".ckpt";
  std::vector<std::size_t> sizes;
  for (const auto& sh : kModel) {
    sizes.push_back(static_cast<std::size_t>(sh.channels * sh.len));
  }
  if (r.member) {
    r.add();
    r.initialize();
    const std::int64_t half = half_of(pending);
    for (std::int64_t t = 0; t < half && !::testing::Test::HasFatalFailure(); ++t) {
      r.step(t, false, false, false, !pending || t + 4 < half);
    }
    r.ref->save(out.ref_path);
    r.e->save(out.path, r.s);
    out.weights = r.ref_w;
  } else {
    for (const std::size_t n : sizes) {
      out.weights.emplace_back(n);
    }
  }
  for (auto& v : out.weights) { // every rank's reference weights are world rank 0's
    MPI_Bcast(v.data(), static_cast<int>(v.size()), MPI_FLOAT, 0, MPI_COMM_WORLD);
  }
  MPI_Barrier(MPI_COMM_WORLD); // every file is there before any rank reads one
  return out;
}

/// Every rank: an engine of `K` in a world of `ranks`, registered with the saved weights, loads
/// `from`'s files, its reference the one-rank checkpoint: after the load and after every step to
/// resume_steps its weights, selections, windows, state and (`masses`) Zen-auto's and the
/// trigger's state must equal its reference's.
template <class P, engine_kind K>
void resume_from(
    const zenflow::config& cfg, int ranks, bool pending, const saved_run& from, const std::string& what) {
  sharded_run<float, P::emulated, P::device_comm, K> x(cfg, ranks);
  if (x.member) {
    SCOPED_TRACE(what + " (" + std::to_string(x.world_n) + " rank" + (x.world_n == 1 ? ")" : "s)"));
    x.add();
    x.set_weights(from.weights);
    x.initialize();
    x.ref->load(from.ref_path);
    x.e->load(from.path, x.s);
    x.check("after the load");
    x.check_state();
    if (cfg.auto_update() || cfg.mass_trigger()) { // (else each rank's masses are its own, read by nothing)
      x.check_masses(half_of(pending));
    }
    for (std::int64_t t = half_of(pending); t < resume_steps && !::testing::Test::HasFatalFailure(); ++t) {
      x.step(t);
    }
    x.check_state();
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

/// Saves a one-rank engine's, an owner partition's and a sharded world's checkpoints, each
/// resumed in the engines of the other kinds at this world size, at one rank and (three ranks)
/// at two: every direction one rank -> ZeRO-2, ZeRO-2 -> ZeRO-2, one rank, ZeRO-3, ZeRO-3 -> one
/// rank, ZeRO-2 (sharded_mpi_checkpoint covers one rank -> ZeRO-3 -> ZeRO-3).
template <class P>
void resume_across(const zenflow::config& cfg, bool pending, const std::string& tag) {
  SCOPED_TRACE(tag + (pending ? ", a job pending" : ", no job pending"));
  using enum engine_kind;
  const int N = world_size();
  const int two = N == 3 ? 2 : 0; // a world of two of three ranks (0: skipped)
  const std::string name =
      tag + (pending ? "_pending" : "") + "_" + std::to_string(P::emulated) + std::to_string(P::device_comm);
  const saved_run one = save_run<P, one_rank>(cfg, 1, pending, name + "_one");
  resume_from<P, zero2>(cfg, 0, pending, one, "ZeRO-2 from the one-rank engine's file");
  const saved_run z2 = save_run<P, zero2>(cfg, 0, pending, name + "_z2");
  if (N > 1) {
    resume_from<P, zero2>(cfg, 1, pending, z2, "ZeRO-2 from a ZeRO-2 world's files");
    resume_from<P, one_rank>(cfg, 1, pending, z2, "one rank from a ZeRO-2 world's files");
  }
  resume_from<P, zero3>(cfg, 0, pending, z2, "ZeRO-3 from a ZeRO-2 world's files");
  const saved_run z3 = save_run<P, zero3>(cfg, 0, pending, name + "_z3");
  resume_from<P, one_rank>(cfg, 1, pending, z3, "one rank from a ZeRO-3 world's files");
  resume_from<P, zero2>(cfg, 0, pending, z3, "ZeRO-2 from a ZeRO-3 world's files");
  if (two > 0) { // three ranks: worlds of two from three and back
    resume_from<P, zero2>(cfg, two, pending, z2, "ZeRO-2 from a ZeRO-2 world's files");
    resume_from<P, zero2>(cfg, two, pending, z3, "ZeRO-2 from a ZeRO-3 world's files");
    const saved_run z2_two = save_run<P, zero2>(cfg, two, pending, name + "_z2two");
    resume_from<P, zero2>(cfg, 0, pending, z2_two, "ZeRO-2 from a ZeRO-2 world's files");
    resume_from<P, zero3>(cfg, 0, pending, z2_two, "ZeRO-3 from a ZeRO-2 world's files");
  }
}

TYPED_TEST(sharded_mpi_checkpoint, every_engines_checkpoint_resumes_in_the_others_bit_for_bit) {
  resume_across<TypeParam>(base(), true, "fp32");
  resume_across<TypeParam>(zen_auto_case(), true, "zen_auto"); // bf16 host moments
  if constexpr (!TypeParam::device_comm) {                     // (refused over a device communicator)
    // An upload buffer in every engine (whole_window stages the job's weights from the masters
    // and reads none of the file's): the pending weights assembled row by row from the files.
    auto ring = base();
    ring.upload = zenflow::upload_policy::chunk_ring;
    resume_across<TypeParam>(ring, true, "chunk_ring");
  }
  if constexpr (!TypeParam::emulated) { // the rest on the host backend
    resume_across<TypeParam>(base(), false, "fp32");
    auto q8 = base();
    q8.host_moments = zenflow::moment_precision::int8;
    resume_across<TypeParam>(q8, true, "int8");
    resume_across<TypeParam>(mass_trigger_case(), true, "mass_trigger");
    auto gpu = base(); // no host rows: every file of a ZeRO-2 world holds every row
    gpu.mode = zenflow::optimizer_mode::gpu_adamw;
    resume_across<TypeParam>(gpu, false, "gpu_adamw");
  }
}

/// `f` throws checkpoint_error of `kind` whose text names `file`.
template <class F>
void expect_refused(F&& f, zenflow::checkpoint_errc kind, const std::string& file) {
  try {
    f();
    ADD_FAILURE() << "no checkpoint_error (expected one naming " << file << ")";
  } catch (const zenflow::checkpoint_error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    EXPECT_NE(std::string(e.what()).find(file), std::string::npos) << e.what();
  }
}

// What cannot be re-sharded is refused before anything changes, naming the file: no file of any
// world, the files of two worlds, a parameter list that differs from the files' whole list,
// another configuration, a damaged file of another rank, the files of two runs (a sharded world's
// and a ZeRO-2 world's). A `Saver` world's files loaded by an engine of `Loader` in a world of one.
template <engine_kind Saver, engine_kind Loader>
void refused_naming_the_file(const std::string& tag) {
  SCOPED_TRACE(tag);
  const auto cfg = base();
  const std::string N = std::to_string(world_size());
  const std::string mine =
      ::testing::TempDir() + "zf_reshard_bad_" + tag + "_" + N + "_rank" + std::to_string(world_rank());
  sharded_run<float, false, false, Saver> r(cfg);
  r.add();
  r.initialize();
  for (std::int64_t t = 0; t < 3; ++t) {
    r.step(t);
  }
  const std::string saved = ::testing::TempDir() + "zf_reshard_ok_" + tag + "_" + N + ".ckpt";
  r.e->save(saved, r.s);
  MPI_Barrier(MPI_COMM_WORLD); // every rank's file is there

  sharded_run<float, false, false, Loader> x(cfg, 1); // a world of one: every file of the N ranks is read
  x.add();
  x.initialize();
  const auto w_before = x.w;
  const auto m_before = x.e->state(x.id[0], x.s).m;
  const auto unchanged = [&] {
    EXPECT_EQ(x.w, w_before);
    EXPECT_EQ(x.e->state(x.id[0], x.s).m, m_before);
  };
  expect_refused([&] { x.e->load(mine + "_none", x.s); }, zenflow::checkpoint_errc::io, mine + "_none");
  unchanged();

  // Two other worlds' rank-0 files: which to load is not for the engine to guess.
  for (const int n : {world_size() + 1, world_size() + 2}) {
    std::FILE* f = std::fopen(zenflow::checkpoint_rank_path(mine + "_two", 0, n).c_str(), "wb");
    ASSERT_NE(f, nullptr);
    std::fclose(f);
  }
  expect_refused([&] { x.e->load(mine + "_two", x.s); }, zenflow::checkpoint_errc::other_rank,
                 zenflow::checkpoint_rank_path(mine + "_two", 0, world_size() + 2));
  unchanged();

  // Another parameter list (a vector more): refused on rank 0's file of the saved world.
  sharded_run<float, false, false, Loader> y(cfg, 1);
  y.add();
  std::vector<float> extra(4, 1.0f), gx(4, 1.0f);
  (void)y.e->add_vector(extra.data(), gx.data(), 4, {.name = "extra"});
  y.initialize();
  const auto y_before = y.w;
  expect_refused([&] { y.e->load(saved, y.s); }, zenflow::checkpoint_errc::other_parameters,
                 zenflow::checkpoint_rank_path(saved, 0, world_size()));
  EXPECT_EQ(y.w, y_before);

  // Another configuration: refused on rank 0's file of the saved world.
  auto other = cfg;
  other.select_interval = 5;
  sharded_run<float, false, false, Loader> z(other, 1);
  z.add();
  z.initialize();
  const auto z_before = z.w;
  expect_refused([&] { z.e->load(saved, z.s); }, zenflow::checkpoint_errc::other_config,
                 zenflow::checkpoint_rank_path(saved, 0, world_size()));
  EXPECT_EQ(z.w, z_before);

  // A copy of the saved world's files, the last one damaged (one payload byte flipped).
  const std::string copy = mine + "_copy";
  const auto copy_file = [](const std::string& from, const std::string& to, bool damage) {
    std::ifstream in(from, std::ios::binary);
    std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (damage) {
      bytes[bytes.size() / 2] = static_cast<char>(bytes[bytes.size() / 2] ^ 0x10);
    }
    std::ofstream(to, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  };
  for (int rr = 0; rr < world_size(); ++rr) {
    copy_file(zenflow::checkpoint_rank_path(saved, rr, world_size()),
              zenflow::checkpoint_rank_path(copy, rr, world_size()), rr == world_size() - 1);
  }
  expect_refused([&] { x.e->load(copy, x.s); }, zenflow::checkpoint_errc::corrupted,
                 zenflow::checkpoint_rank_path(copy, world_size() - 1, world_size()));
  unchanged();

  // The files of two runs: the last rank's from a world of the other policy (whole matrices
  // against shards).
  if (world_size() > 1) {
    constexpr engine_kind other_kind = Saver == engine_kind::zero3 ? engine_kind::zero2 : engine_kind::zero3;
    sharded_run<float, false, false, other_kind> o(cfg);
    o.add();
    o.initialize();
    for (std::int64_t t = 0; t < 3; ++t) {
      o.step(t);
    }
    const std::string mixed = ::testing::TempDir() + "zf_reshard_mixed_" + tag + "_" + N + ".ckpt";
    o.e->save(mixed, o.s);
    MPI_Barrier(MPI_COMM_WORLD);
    const std::string two = mine + "_mixed";
    for (int rr = 0; rr < world_size(); ++rr) {
      copy_file(zenflow::checkpoint_rank_path(rr == world_size() - 1 ? mixed : saved, rr, world_size()),
                zenflow::checkpoint_rank_path(two, rr, world_size()), false);
    }
    expect_refused([&] { x.e->load(two, x.s); }, zenflow::checkpoint_errc::other_parameters,
                   zenflow::checkpoint_rank_path(two, world_size() - 1, world_size()));
    unchanged();
  }
  MPI_Barrier(MPI_COMM_WORLD); // no rank removes or rewrites `saved` while another reads it
}

TEST(sharded_mpi_checkpoint_checks, a_checkpoint_it_cannot_reshard_is_refused_naming_the_file) {
  refused_naming_the_file<engine_kind::zero3, engine_kind::zero3>("z3_into_z3");
  refused_naming_the_file<engine_kind::zero2, engine_kind::zero2>("z2_into_z2");
  refused_naming_the_file<engine_kind::zero3, engine_kind::one_rank>("z3_into_one");
}

} // namespace
