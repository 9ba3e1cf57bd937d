#pragma once
// The temporary folder both fuzz harnesses write their input into (docs/fuzzing.md): laid out like
// configs/, with links to the repository's folders and files, so that the `!include`s of the seed
// corpus resolve as they do in the repository. Internal to tests/fuzz/.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string_view>
#include <system_error>

namespace offsim_fuzz {

namespace fs = std::filesystem;

inline fs::path g_root;         // the per-process temporary folder
inline fs::path g_input;        // <root>/configs/experiments/fuzz.yaml
inline bool g_verbose = false;  // OFFSIM_FUZZ_VERBOSE=1: print each input's errors

inline void remove_root() {
  std::error_code ec;
  if (!g_root.empty()) fs::remove_all(g_root, ec);
}

// Links every file of `from` (not its subfolders) into `to`; the first of a name wins.
inline void link_files(const fs::path& from, const fs::path& to) {
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(from, ec)) {
    if (!entry.is_regular_file()) continue;
    const fs::path link = to / entry.path().filename();
    if (!fs::exists(link, ec)) fs::create_symlink(entry.path(), link, ec);
  }
}

inline void set_up() {
  const fs::path source = OFFSIM_SOURCE_DIR;
  std::string pattern = (fs::temp_directory_path() / "offsim-fuzz-XXXXXX").string();
  if (mkdtemp(pattern.data()) == nullptr) {
    std::perror("offsim fuzz: mkdtemp");
    std::abort();
  }
  g_root = pattern;
  std::atexit(remove_root);
  const fs::path configs = g_root / "configs";
  fs::create_directories(configs / "experiments");
  for (const char* dir : {"hardware", "models", "calibration", "strategies", "sweeps", "validation", "regression"}) {
    fs::create_directory_symlink(source / "configs" / dir, configs / dir);
  }
  // Same-folder includes of the seeds: experiments (and their scale/ subfolder), machines
  // (`node: !include frontier-node.yaml`), tests/data (`hardware: !include two-gpu-node.yaml`).
  for (const char* dir : {"configs/experiments", "configs/hardware", "configs/models", "tests/data"}) {
    link_files(source / dir, configs / "experiments");
  }
  fs::create_directory_symlink(source / "configs" / "experiments" / "scale", configs / "experiments" / "scale");
  // tests/config_errors/*.yaml include ../../configs/...: from experiments/ that is <tmp>/configs;
  // and ../data/... (tests/data): <tmp>/configs/data.
  fs::create_directory_symlink(source / "tests" / "data", configs / "data");
  g_input = configs / "experiments" / "fuzz.yaml";
}

/// Writes the input's text to g_input (aborts when it cannot: the harness is broken, not the input).
inline void write_input(std::string_view text) {
  std::ofstream out(g_input, std::ios::binary | std::ios::trunc);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  if (!out) {
    std::perror("offsim fuzz: cannot write the input file");
    std::abort();
  }
}

}  // namespace offsim_fuzz
