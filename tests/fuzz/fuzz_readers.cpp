// libFuzzer harness over offsim's configuration readers (docs/fuzzing.md). Readers only: nothing
// is simulated.
//
// The input is the text of one YAML file. Its first line picks the reader:
//   #machine   topo::parse_machine     (configs/hardware/*.yaml)
//   #model     models::parse_model     (configs/models/*.yaml, Hugging Face config.json)
//   #sweep     models::load_sweep      (configs/sweeps/*.yaml)
//   otherwise  models::load_experiment (configs/experiments/*.yaml)
// The line is a YAML comment, so every input is also a file offsim reads as it is: placed in
// configs/experiments/, a regression input runs with `offsim run`, `topo`, `model` or `sweep`.
//
// The text is written to <tmp>/configs/experiments/fuzz.yaml in a per-process temporary folder
// laid out like configs/: its hardware, models, calibration, strategies, ... folders are links to
// the repository's, and experiments/ holds links to the shipped experiments, machines, models and
// tests/data files, so the `!include`s of the seed corpus resolve as they do in the repository.
//
// Bad input must end in sim::config::ConfigError, a located message (file:line:col: key: why).
// Any other exception escapes and aborts: libFuzzer records it as a crash, as it does sanitizer
// reports and inputs that run longer than -timeout.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <system_error>

#include "models/experiment.hpp"
#include "models/sweep.hpp"
#include "models/transformer/model_parser.hpp"
#include "sim/config/config_reader.hpp"
#include "tests/fuzz/fuzz_common.hpp"
#include "topologies/topology_parser.hpp"

namespace {

namespace fs = std::filesystem;
using namespace offsim_fuzz;

enum class Reader { kExperiment, kMachine, kModel, kSweep };

Reader reader_of(std::string_view text) {
  const std::string_view line = text.substr(0, text.find('\n'));
  if (line == "#machine") return Reader::kMachine;
  if (line == "#model") return Reader::kModel;
  if (line == "#sweep") return Reader::kSweep;
  return Reader::kExperiment;
}

void read(Reader reader, const fs::path& file, offsim::models::ReadCache& reads) {
  using offsim::sim::config::Context;
  switch (reader) {
    case Reader::kExperiment:
      (void)offsim::models::load_experiment(file, {}, &reads);
      return;
    case Reader::kMachine: {  // as `offsim topo` reads a machine
      Context ctx;
      (void)offsim::topo::parse_machine(ctx.load_root(file));
      ctx.finish();
      return;
    }
    case Reader::kModel: {  // as `offsim model` reads a model
      Context ctx;
      (void)offsim::models::parse_model(ctx.load_root(file));
      ctx.finish();
      return;
    }
    case Reader::kSweep:
      (void)offsim::models::load_sweep(file);
      return;
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  set_up();
  g_verbose = std::getenv("OFFSIM_FUZZ_VERBOSE") != nullptr;
  // Machines of up to 4 M devices and links are legal (the full Frontier holds 0.68 M) but take
  // about 18 us each under ASan and UBSan: the fuzzer, whose hang limit is 10 s, builds at most
  // 64 K (about 70 Frontier nodes) and sees larger ones refused, as the readers refuse them beyond
  // the real limit.
  offsim::topo::max_machine_elements = std::size_t{1} << 16;
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  write_input(text);
  // The shipped files an input includes (calibration tables, machines, models) are parsed once
  // per process, and the machines and tables read from them kept as a sweep keeps them (ReadCache,
  // keyed by file, place and the overrides reaching in): most of an experiment's reading time. The
  // input itself, and what is read from it, is read afresh.
  static offsim::sim::config::ScopedFileCache shipped_files;
  static offsim::models::ReadCache shipped_reads;
  try {
    read(reader_of(text), g_input, shipped_reads);
  } catch (const offsim::sim::config::ConfigError& e) {
    // Bad input, reported with its location: the expected outcome (printed when asked for).
    if (g_verbose) std::fprintf(stderr, "%s\n", e.what());
  }
  // Dropped within the run that read it: a run that ends holding more blocks than it started with
  // makes libFuzzer run the input again to look for a leak (fuzz_simulate.cpp).
  shipped_files.forget(g_input.string());
  shipped_reads.forget(g_input.string());
  return 0;
}
