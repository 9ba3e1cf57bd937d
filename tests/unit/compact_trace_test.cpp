// The compact trace (models::TraceMode, sim::report::TraceSelection): what it keeps of the full
// one, when `--trace auto` chooses it, and that streaming through a file set writes the same bytes
// as the string form.
#include <gtest/gtest.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "models/experiment.hpp"
#include "sim/report/atomic_file.hpp"

namespace offsim::models {
namespace {

// Megatron tp 2, pp 4 (interleaved) on one Frontier node: 8 ranks, all simulated.
const std::string kPipeline =
    std::string(OFFSIM_SOURCE_DIR) + "/configs/experiments/gpt3-1.3b-3d-interleaved-frontier-node.yaml";

ExperimentResult run_with(const ExperimentSpec& spec, TraceMode mode, std::size_t limit = kDefaultTraceEventLimit) {
  RunExperimentOptions options;
  options.outputs_over_time = true;
  options.trace = mode;
  options.trace_event_limit = limit;
  return run_experiment(spec, options);
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// The string after `key` in a trace line, unquoted (the names here need no escapes).
std::string quoted_after(const std::string& line, const std::string& key) {
  const auto at = line.find(key);
  if (at == std::string::npos) return {};
  const auto begin = at + key.size() + 1;
  return line.substr(begin, line.find('"', begin) - begin);
}

TEST(CompactTrace, AutomaticIsFullUnderTheLimitAndCompactAboveIt) {
  const ExperimentSpec spec = load_experiment(kPipeline, {});
  const ExperimentResult full = run_with(spec, TraceMode::full);
  const ExperimentResult automatic = run_with(spec, TraceMode::automatic);
  EXPECT_FALSE(full.trace.compact);
  EXPECT_FALSE(automatic.trace.compact);
  EXPECT_EQ(automatic.trace_json, full.trace_json);
  EXPECT_EQ(automatic.timeline_csv, full.timeline_csv);
  // The count bounds the events the full trace holds: one per line but the first and the last.
  EXPECT_GE(full.trace.full_events, lines_of(full.trace_json).size() - 2);
  EXPECT_GT(full.trace.full_events, 1000u);

  const ExperimentResult over = run_with(spec, TraceMode::automatic, full.trace.full_events - 1);
  EXPECT_TRUE(over.trace.compact);
  EXPECT_EQ(over.trace.limit, full.trace.full_events - 1);
  const ExperimentResult at = run_with(spec, TraceMode::automatic, full.trace.full_events);
  EXPECT_FALSE(at.trace.compact);
  // The summary names the compact trace and its ranks; a full one's says nothing of it.
  EXPECT_EQ(summary_json(spec, full, {"test", "none"}).find("\"trace\""), std::string::npos);
  const YAML::Node summary = YAML::Load(summary_json(spec, over, {"test", "none"}));
  EXPECT_EQ(summary["trace"]["kind"].as<std::string>(), "compact");
  EXPECT_EQ(summary["trace"]["ranks"].size(), 2u);
}

TEST(CompactTrace, HoldsTheFirstAndLastRanksAndEveryLinkClass) {
  const ExperimentSpec spec = load_experiment(kPipeline, {});
  const ExperimentResult full = run_with(spec, TraceMode::full);
  const ExperimentResult compact = run_with(spec, TraceMode::compact);
  ASSERT_TRUE(compact.trace.compact);
  EXPECT_EQ(compact.trace.limit, 0u);  // asked for, not chosen
  // All 8 ranks are simulated: the first and the last.
  EXPECT_EQ(compact.trace.ranks, (std::vector<std::size_t>{0, 7}));
  ASSERT_EQ(compact.trace.devices.size(), 2u);
  const std::string first = compact.trace.devices[0];
  const std::string last = compact.trace.devices[1];

  // Every event of the compact trace is an event of the full one, byte for byte, and it is smaller.
  const auto full_lines = lines_of(full.trace_json);
  const std::set<std::string> full_events(full_lines.begin(), full_lines.end());
  const auto compact_lines = lines_of(compact.trace_json);
  ASSERT_GT(compact_lines.size(), 2u);
  EXPECT_NE(compact_lines.front().find(R"("otherData": {"trace": "compact")"), std::string::npos);
  for (std::size_t i = 1; i + 1 < compact_lines.size(); ++i) {
    std::string line = compact_lines[i];
    if (line.ends_with(",")) line.pop_back();
    EXPECT_TRUE(full_events.contains(line) || full_events.contains(line + ",")) << line;
  }
  EXPECT_LT(compact_lines.size(), full_lines.size());

  // Tracks: the two ranks' units only; counters: their memory and their links, and every link
  // class and direction of the full trace. (Read off the lines: yaml-cpp takes seconds on the
  // full trace.)
  std::set<std::string> tracks, counters, full_counters;
  int slices = 0;
  for (const auto& line : compact_lines) {
    if (line.find(R"("name": "thread_name")") != std::string::npos)
      tracks.insert(quoted_after(line, R"("args": {"name": )"));
    if (line.find(R"("ph": "C")") != std::string::npos) counters.insert(quoted_after(line, R"("name": )"));
    if (line.find(R"("ph": "X")") != std::string::npos) ++slices;
  }
  for (const auto& line : full_lines) {
    if (line.find(R"("ph": "C")") != std::string::npos) full_counters.insert(quoted_after(line, R"("name": )"));
  }
  EXPECT_EQ(tracks, (std::set<std::string>{first + ".stream", last + ".stream"}));
  EXPECT_GT(slices, 0);
  std::set<std::string> expected;
  for (const auto& name : full_counters) {
    const bool per_device = name.ends_with(" links out") || name.ends_with(" links in");
    const bool memory = name.ends_with(".hbm");
    if ((!per_device && !memory) || name.starts_with(first + " ") || name.starts_with(last + " ") ||
        name == first + ".hbm" || name == last + ".hbm") {
      expected.insert(name);
    }
  }
  EXPECT_EQ(counters, expected);
  EXPECT_TRUE(counters.contains(first + ".hbm"));
  EXPECT_TRUE(counters.contains(last + " links out"));

  // timeline.csv: the two ranks' memory, then every link class's rate.
  const std::string header = lines_of(compact.timeline_csv).front();
  const std::string full_header = lines_of(full.timeline_csv).front();
  const std::string classes = full_header.substr(full_header.rfind("_used_bytes") + std::string("_used_bytes").size());
  ASSERT_NE(classes.find("_bytes_per_s"), std::string::npos);
  EXPECT_EQ(header, "time_s," + first + ".hbm_used_bytes," + last + ".hbm_used_bytes" + classes);
}

// A compact trace whose representatives alone hold more events than the limit covers the start of
// the run only: every event it writes (task slices, transfer begins, counters) begins before the
// window's end, it holds every such event of the unwindowed compact trace, at most `limit` events
// in all, and the summary and the trace's metadata say where it ends.
TEST(CompactTrace, AWindowBoundsRanksThatAloneExceedTheLimit) {
  const ExperimentSpec spec = load_experiment(kPipeline, {});
  const ExperimentResult whole = run_with(spec, TraceMode::compact);
  ASSERT_FALSE(whole.trace.window_end_s.has_value());
  const auto whole_lines = lines_of(whole.trace_json);
  const std::size_t limit = (whole_lines.size() - 2) / 2;
  const ExperimentResult windowed = run_with(spec, TraceMode::compact, limit);
  ASSERT_TRUE(windowed.trace.window_end_s.has_value());
  const double end_us = *windowed.trace.window_end_s * 1e6;
  EXPECT_GT(end_us, 0.0);
  EXPECT_LT(*windowed.trace.window_end_s, windowed.iteration_time.seconds());
  EXPECT_NE(windowed.trace.note.find("only what begins in the first"), std::string::npos);
  const auto lines = lines_of(windowed.trace_json);
  EXPECT_LE(lines.size() - 2, limit);
  EXPECT_NE(lines.front().find("only what begins in the first"), std::string::npos);
  const auto event = [](std::string line) {
    if (line.ends_with(",")) line.pop_back();
    return line;
  };
  const auto begins_at_us = [](const std::string& line) -> std::optional<double> {
    if (line.find(R"("ph": "e")") != std::string::npos) return std::nullopt;  // a transfer's end
    const auto at = line.find(R"("ts": )");
    if (at == std::string::npos) return std::nullopt;
    return std::stod(line.substr(at + 6));
  };
  std::set<std::string> written;
  for (std::size_t i = 1; i + 1 < lines.size(); ++i) {
    written.insert(event(lines[i]));
    if (const auto ts = begins_at_us(lines[i])) {
      EXPECT_LT(*ts, end_us) << lines[i];
    }
  }
  std::size_t kept = 0;
  for (std::size_t i = 1; i + 1 < whole_lines.size(); ++i) {
    const auto ts = begins_at_us(whole_lines[i]);
    if (!ts || *ts >= end_us * (1 - 1e-12)) continue;
    EXPECT_TRUE(written.contains(event(whole_lines[i]))) << whole_lines[i];
    ++kept;
  }
  EXPECT_GT(kept, limit / 4);
  const YAML::Node summary = YAML::Load(summary_json(spec, windowed, {"test", "none"}));
  EXPECT_DOUBLE_EQ(summary["trace"]["window_end_s"].as<double>(), *windowed.trace.window_end_s);
  // timeline.csv stops before the window's end too.
  const auto rows = lines_of(windowed.timeline_csv);
  ASSERT_GT(rows.size(), 2u);
  EXPECT_LT(std::stod(rows.back()), *windowed.trace.window_end_s);
}

TEST(CompactTrace, StreamedIntoAFileSetAsInTheResult) {
  const ExperimentSpec spec = load_experiment(kPipeline, {});
  const ExperimentResult in_memory = run_with(spec, TraceMode::compact);
  const auto dir = std::filesystem::temp_directory_path() / ("offsim-compact-trace-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  {
    sim::report::AtomicFileSet set(dir);
    RunExperimentOptions options;
    options.outputs_over_time = true;
    options.trace = TraceMode::compact;
    options.outputs = &set;
    const ExperimentResult streamed = run_experiment(spec, options);
    EXPECT_TRUE(streamed.trace_json.empty());  // not held
    EXPECT_TRUE(streamed.timeline_csv.empty());
    set.commit();
  }
  const auto read = [](const std::filesystem::path& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  EXPECT_EQ(read(dir / "trace.json"), in_memory.trace_json);
  EXPECT_EQ(read(dir / "timeline.csv"), in_memory.timeline_csv);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace offsim::models
