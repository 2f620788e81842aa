// charlm_train: the example trainer. `charlm_train --help` lists the options; the README's quick
// start runs it through bench/engine/offload_modes.py (scripts/demo).
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include <zenflow/core/device.hpp>
#include <zenflow/core/log.hpp>

#include "options.hpp"
#include "run.hpp"
#include "trainer.hpp"

int main(int argc, char** argv) {
  charlm::options o;
  try {
    charlm::apply_size_preset(o, "cpu");
    if (!charlm::parse_args(std::vector<std::string>(argv + 1, argv + argc), o)) {
      std::fputs(charlm::usage_text(), stdout);
      return 0;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "charlm_train: %s\n", e.what());
    return 2;
  }
  // zenflow says nothing unless asked. From here on its messages go to stderr from --log-level up:
  // warnings by default; info adds expected notes such as the pageable-memory fallback on a
  // machine without a driver. (The config reader's warnings, logged while the flags were read,
  // are printed below from its record, so no handler listens before this point.)
  zenflow::set_log_handler(zenflow::stderr_log_handler, o.log_level);
  // The resolved zenflow configuration: the mode that runs, every setting and where it came from
  // (the DeepSpeed file's key, DeepSpeed's default, a flag), and the reader's warnings.
  if (o.print_config || !o.quiet) {
    std::fputs(o.zf.describe(&o.zf_sources).c_str(), stdout);
    if (o.print_config) {
      return 0;
    }
    std::fputs("\n", stdout);
  } else {
    for (const auto& w : o.zf_sources.warnings) {
      std::fprintf(stderr, "charlm_train: %s\n", w.c_str()); // --quiet still shows what was ignored
    }
  }
  try {
    const bool want_cuda = o.backend == "cuda" || (o.backend == "auto" && zenflow::cuda_available());
    charlm::run_result r;
    if (want_cuda && (!o.init_weights.empty() || !o.save_weights.empty())) {
      std::fprintf(stderr, "charlm_train: --init-weights / --save-weights run on the host backend only "
                           "(add --backend host)\n");
      return 2;
    }
#if defined(CHARLM_HAS_CUDA)
    r = want_cuda ? charlm::run_cuda(o) : charlm::run_host(o);
#else
    if (o.backend == "cuda") {
      std::fprintf(stderr, "charlm_train: built without CUDA; use --backend host\n");
      return 2;
    }
    (void)want_cuda;
    r = charlm::run_host(o);
#endif
    charlm::print_summary(r);
    charlm::write_json(r, o);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "charlm_train: %s\n", e.what());
    return 1;
  }
}
