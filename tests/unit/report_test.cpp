#include <gtest/gtest.h>

#include <fmt/format.h>
#include <sys/wait.h>
#include <unistd.h>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "models/experiment.hpp"
#include "sim/report/atomic_file.hpp"
#include "sim/report/csv.hpp"
#include "sim/report/json_writer.hpp"
#include "sim/report/text_table.hpp"
#include "tests/unit/source_paths.hpp"

namespace offsim::sim::report {
namespace {

TEST(JsonWriter, WritesNestedDocumentsDeterministically) {
  JsonWriter j;
  j.begin_object().field("name", "a\"b\\c\n").field("n", std::int64_t{-3}).field("x", 0.1).field("ok", true);
  j.key("list").begin_array().value(1.5).null().end_array();
  j.key("empty").begin_object().end_object();
  j.field("nan", std::numeric_limits<double>::quiet_NaN());
  j.end_object();
  EXPECT_EQ(
      j.str(),
      "{\n  \"name\": \"a\\\"b\\\\c\\n\",\n  \"n\": -3,\n  \"x\": 0.1,\n  \"ok\": true,\n  \"list\": [\n    1.5,\n"
      "    null\n  ],\n  \"empty\": {},\n  \"nan\": null\n}\n");
}

TEST(JsonWriter, RejectsMalformedUse) {
  JsonWriter j;
  j.begin_object();
  EXPECT_THROW(j.value(1), std::logic_error);     // a value without a key inside an object
  EXPECT_THROW((void)j.str(), std::logic_error);  // unclosed
  EXPECT_THROW(j.end_array(), std::logic_error);
}

TEST(Csv, QuotedFieldsKeepCommasAndDoubledQuotes) {
  using sim::report::parse_csv_line;
  EXPECT_EQ(parse_csv_line("1,\"a, \"\"b\"\"\",c"), (std::vector<std::string>{"1", "a, \"b\"", "c"}));
  EXPECT_EQ(parse_csv_line("x,,y\r"), (std::vector<std::string>{"x", "", "y"}));  // a Windows line end
  EXPECT_EQ(parse_csv_line(""), (std::vector<std::string>{""}));
  // What csv_field writes reads back as the same field (a newline becomes a space: one record, one line).
  for (const std::string field : {"plain", "a,b", "say \"hi\"", "two\nlines", ""}) {
    const auto back = parse_csv_line(sim::report::csv_field(field) + ",end");
    ASSERT_EQ(back.size(), 2u) << field;
    EXPECT_EQ(back[0], field == "two\nlines" ? "two lines" : field);
  }
}

TEST(TextTable, AlignsColumns) {
  TextTable t({"name", "value"});
  t.add_row({"a", "1"});
  t.add_row({"longer", "1234"});
  EXPECT_EQ(t.str(), "name    value\n-------------\na           1\nlonger   1234\n");
}

TEST(AtomicFile, ReplacesTheWholeFileAndLeavesNoTemporary) {
  const auto dir = std::filesystem::temp_directory_path() / fmt::format("offsim-atomic-{}", ::getpid());
  std::filesystem::create_directories(dir);
  const auto path = dir / "summary.json";
  write_file_atomically(path, "first version, longer than the second\n");
  write_file_atomically(path, "second\n");
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  EXPECT_EQ(ss.str(), "second\n");
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir), std::filesystem::directory_iterator{}), 1);
  EXPECT_THROW(write_file_atomically(dir / "no-such-dir" / "x.json", "x"), std::runtime_error);
  // Without waiting for the disk: the same replacement, the same errors.
  write_file_atomically(path, "third\n", Sync::os_cache);
  std::ifstream third(path);
  std::stringstream ss3;
  ss3 << third.rdbuf();
  EXPECT_EQ(ss3.str(), "third\n");
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir), std::filesystem::directory_iterator{}), 1);
  EXPECT_THROW(write_file_atomically(dir / "no-such-dir" / "x.json", "x", Sync::os_cache), OutputError);
  std::filesystem::remove_all(dir);
}

TEST(AtomicFile, AStreamedFileHoldsWhatWasWrittenInOrderAndAFailedOneLeavesNothing) {
  const auto dir = offsim::testing::scratch_folder("atomic-streamed");
  // Pieces small and large: small ones go through the sink's buffer (flushed at 1 MiB), a piece
  // of 1 MiB or more straight to the file after what is buffered.
  std::string expected;
  {
    AtomicFileSet set(dir);
    set.add_streamed("trace.json", [&](TextSink& out) {
      for (int i = 0; i < 200'000; ++i) {
        out.format("{},", i);
        expected += fmt::format("{},", i);
        if (i == 100'000) {
          const std::string large(TextSink::kFlushBytes + 7, 'x');
          out.append(large);
          expected += large;
        }
      }
      EXPECT_EQ(out.bytes(), expected.size());
    });
    // Not in place before the commit.
    EXPECT_FALSE(std::filesystem::exists(dir / "trace.json"));
    EXPECT_THROW(set.add_streamed("timeline.csv",
                                  [](TextSink& out) {
                                    out.append("partial");
                                    throw OutputError("failed while writing");
                                  }),
                 OutputError);
    set.commit();
  }
  std::ifstream in(dir / "trace.json", std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  EXPECT_EQ(ss.str(), expected);
  // The failed file's temporary is gone; only the committed file is there.
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir), std::filesystem::directory_iterator{}), 1);
  std::filesystem::remove_all(dir);
}

TEST(AtomicFile, ASetRemovesTheTemporariesOfAKilledWriterAndKeepsALiveOnes) {
  const auto dir = offsim::testing::scratch_folder("atomic-stale");
  // A process id that is certainly gone: a child that has exited and been waited for.
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ASSERT_GT(child, 0);
  ASSERT_EQ(::waitpid(child, nullptr, 0), child);
  const auto stale = dir / fmt::format("trace.json.tmp.{}", child);
  const auto live = dir / fmt::format("trace.json.tmp.{}", ::getppid());  // our parent runs
  const auto other = dir / "notes.tmp.txt";                               // not a temporary of ours
  for (const auto& p : {stale, live, other}) std::ofstream(p) << "partial";
  {
    AtomicFileSet set(dir);
    set.add("summary.json", "{}\n");
    set.commit();
  }
  EXPECT_FALSE(std::filesystem::exists(stale));
  EXPECT_TRUE(std::filesystem::exists(live));
  EXPECT_TRUE(std::filesystem::exists(other));
  EXPECT_TRUE(std::filesystem::exists(dir / "summary.json"));
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace offsim::sim::report

namespace offsim::models {
namespace {

TEST(Cost, NodeHoursEnergyPriceAndTimeToTrainFollowTheIteration) {
  // tests/data/tiny-dp2-cost.yaml: 1 node, 3 USD per node-hour, 1800 W, budget 1e9 tokens.
  //   node-hours = 1 x t / 3600; energy = 1800 W x t / 3.6e6 kWh; price = 3 x node-hours;
  //   per million tokens: x 1e6 / (tokens per iteration); to train: x 1e9 / (tokens per iteration).
  const ExperimentSpec spec = load_experiment(std::string(OFFSIM_SOURCE_DIR) + "/tests/data/tiny-dp2-cost.yaml", {});
  const ExperimentResult r = run_experiment(spec);
  const double t = r.iteration_time.seconds();
  const double tokens = 2 * 32;  // 2 ranks x micro-batch 1 x 32 tokens
  ASSERT_EQ(r.nodes, 1u);
  const CostFigures f = cost_figures(*spec.cost, r);
  EXPECT_NEAR(f.node_hours_per_iteration, t / 3600, 1e-12 * t);
  EXPECT_NEAR(*f.energy_kwh_per_iteration, 1800 * t / 3.6e6, 1e-12);
  EXPECT_NEAR(*f.price_per_iteration, 3 * t / 3600, 1e-12);
  EXPECT_NEAR(*f.price_per_million_tokens, 3 * t / 3600 * 1e6 / tokens, 1e-9);
  EXPECT_NEAR(*f.time_to_train_s, t * 1e9 / tokens, 1e-6 * t * 1e9 / tokens);
  EXPECT_NEAR(*f.price_to_train, 3 * t / 3600 * 1e9 / tokens, 1e-9);
}

}  // namespace
}  // namespace offsim::models
