#include <gtest/gtest.h>

#include <fmt/format.h>
#include <unistd.h>
#include <array>
#include <filesystem>
#include <fstream>

#include "sim/config/block_table.hpp"
#include "sim/config/config_reader.hpp"
#include "sim/config/did_you_mean.hpp"

namespace offsim::sim::config {
namespace {

namespace fs = std::filesystem;

class ConfigReaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ =
        fs::temp_directory_path() /
        fmt::format("offsim-config-{}-{}", ::testing::UnitTest::GetInstance()->current_test_info()->name(), ::getpid());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string write(const std::string& name, const std::string& text) {
    const fs::path p = dir_ / name;
    fs::create_directories(p.parent_path());
    std::ofstream(p) << text;
    return p.string();
  }
  fs::path dir_;
};

struct Spec {
  std::int64_t layers = 0;
  Bandwidth link;
  std::string kind;
};

Spec read_spec(const Node& n) {
  MapReader r(n);
  Spec s;
  s.layers = r.required<std::int64_t>("layers").value;
  s.link = r.required<Bandwidth>("link").value;
  s.kind = r.choice("kind", {"gpu", "cpu"}, std::string("gpu")).value;
  return s;
}

TEST_F(ConfigReaderTest, ErrorsAreLocatedAndAllCollected) {
  const std::string f = write("a.yaml",
                              "layers: twelve\n"
                              "kind: gpv\n"
                              "laeyrs_extra: 1\n"
                              "linkk: \"36 GB/s\"\n");
  Context ctx;
  const Node root = ctx.load_root(f);
  (void)read_spec(root);
  try {
    ctx.finish();
    FAIL() << "expected a ConfigError";
  } catch (const ConfigError& e) {
    ASSERT_EQ(e.diagnostics().size(), 5u);
    // Listed by location, whatever the order in which they were found.
    EXPECT_EQ(e.diagnostics()[0].str(),
              f + ":1:1: link: missing required key (expected a bandwidth such as \"36 GB/s\")");
    EXPECT_EQ(e.diagnostics()[1].str(), f + ":1:9: layers: expected an integer, got \"twelve\"");
    EXPECT_EQ(e.diagnostics()[2].str(),
              f + ":2:7: kind: expected one of {gpu, cpu}, got \"gpv\" (did you mean 'gpu'?)");
    EXPECT_EQ(e.diagnostics()[3].str(), f + ":3:1: laeyrs_extra: unknown key");
    EXPECT_EQ(e.diagnostics()[4].str(), f + ":4:1: linkk: unknown key (did you mean 'link'?)");
  }
}

TEST_F(ConfigReaderTest, ABareNumberForABandwidthShowsAnExample) {
  const std::string f = write("a.yaml", "layers: 2\nlink: 36\n");
  Context ctx;
  (void)read_spec(ctx.load_root(f));
  try {
    ctx.finish();
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_STREQ(
        e.what(),
        (f + ":2:7: link: expected a bandwidth such as \"36 GB/s\", got the bare number \"36\" (a unit is required)")
            .c_str());
  }
}

TEST_F(ConfigReaderTest, IncludedValuesAreLocatedInTheirOwnFile) {
  const std::string main = write("main.yaml", "machine: !include hw/node.yaml\n");
  const std::string hw = write("hw/node.yaml", "layers: 3\nlink: \"fast\"\n");
  Context ctx;
  const Node root = ctx.load_root(main);
  MapReader r(root);
  auto machine = r.child("machine");
  ASSERT_TRUE(machine.has_value());
  (void)read_spec(*machine);
  try {
    ctx.finish();
    FAIL();
  } catch (const ConfigError& e) {
    ASSERT_EQ(e.diagnostics().size(), 1u);
    EXPECT_EQ(e.diagnostics()[0].loc.file, (dir_ / "hw/node.yaml").lexically_normal().string());
    EXPECT_EQ(e.diagnostics()[0].loc.line, 2);
    EXPECT_EQ(e.diagnostics()[0].key_path, "machine.link");
  }
}

TEST_F(ConfigReaderTest, AFileCacheReadsEachFileOnceWhileItLives) {
  // Inside a ScopedFileCache a file rewritten after its first read is still read as it was (a sweep
  // reads its experiments once); forget() makes the next read parse it again; without a cache
  // every read parses the file as it is now. Includes are cached by their normalised path.
  const std::string main = write("main.yaml", "machine: !include hw/node.yaml\n");
  const std::string hw = write("hw/node.yaml", "layers: 3\nlink: \"1 GB/s\"\n");
  const auto layers = [&] {
    Context ctx;
    const Node root = ctx.load_root(main);
    MapReader r(root);
    const Spec s = read_spec(*r.child("machine"));
    ctx.finish();
    return s.layers;
  };
  {
    ScopedFileCache cache;
    EXPECT_EQ(layers(), 3);
    write("hw/node.yaml", "layers: 5\nlink: \"1 GB/s\"\n");
    EXPECT_EQ(layers(), 3);
    {
      ScopedFileCache inner;  // nested: shares the outer one's files
      EXPECT_EQ(layers(), 3);
    }
    cache.forget((dir_ / "hw/node.yaml").lexically_normal().string());
    EXPECT_EQ(layers(), 5);
  }
  write("hw/node.yaml", "layers: 7\nlink: \"1 GB/s\"\n");
  EXPECT_EQ(layers(), 7);
}

TEST_F(ConfigReaderTest, AMissingIncludeIsReportedWhereItIsNamed) {
  const std::string main = write("main.yaml", "name: x\nmachine: !include nowhere.yaml\n");
  Context ctx;
  const Node root = ctx.load_root(main);
  MapReader r(root);
  (void)r.required<std::string>("name");
  (void)r.child("machine");
  try {
    ctx.finish();
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.diagnostics()[0].str(),
              main + ":2:10: machine: !include: cannot open '" + (dir_ / "nowhere.yaml").string() + "'");
  }
}

TEST_F(ConfigReaderTest, OverridesReplaceValuesEvenInsideIncludes) {
  const std::string main = write("main.yaml", "machine: !include node.yaml\n");
  write("node.yaml", "layers: 3\nlink: \"36 GB/s\"\n");
  Context ctx({"machine.link=72 GB/s", "machine.kind=cpu"});
  const Node root = ctx.load_root(main);
  MapReader r(root);
  const Spec s = read_spec(*r.child("machine"));
  ctx.finish();
  EXPECT_DOUBLE_EQ(s.link.bytes_per_s, 72e9);
  EXPECT_EQ(s.kind, "cpu");
  EXPECT_EQ(s.layers, 3);
  // The effective configuration records the overridden value.
  bool seen = false;
  for (const auto& [k, v] : ctx.effective()) {
    if (k == "machine.link") {
      EXPECT_EQ(v, "72 GB/s");
      seen = true;
    }
  }
  EXPECT_TRUE(seen);
}

TEST_F(ConfigReaderTest, AMappingOverrideReadAgainInAFileCacheGivesTheSameValuesAndErrors) {
  // Inside a ScopedFileCache an override's value is parsed once per text and each read gets its
  // own copy: the second read of the same mapping sees the same values, and an error inside one
  // is located at the override both times (a copy has no marks; the override's are used).
  const std::string main = write("main.yaml", "machine: !include node.yaml\n");
  write("node.yaml", "layers: 3\nlink: \"36 GB/s\"\n");
  const ScopedFileCache cache;
  for (int read = 0; read < 2; ++read) {
    Context ctx({"machine={layers: 4, link: \"2 GB/s\", kind: cpu}"});
    const Node root = ctx.load_root(main);
    MapReader r(root);
    const Spec s = read_spec(*r.child("machine"));
    ctx.finish();
    EXPECT_EQ(s.layers, 4) << read;
    EXPECT_DOUBLE_EQ(s.link.bytes_per_s, 2e9) << read;
    EXPECT_EQ(s.kind, "cpu") << read;
  }
  for (int read = 0; read < 2; ++read) {
    Context ctx({"machine={layers: many, link: \"2 GB/s\"}"});
    const Node root = ctx.load_root(main);
    MapReader r(root);
    (void)read_spec(*r.child("machine"));
    try {
      ctx.finish();
      FAIL() << read;
    } catch (const ConfigError& e) {
      ASSERT_EQ(e.diagnostics().size(), 1u) << read;
      EXPECT_EQ(e.diagnostics()[0].loc.file, "--set machine={layers: many, link: \"2 GB/s\"}") << read;
      EXPECT_EQ(e.diagnostics()[0].key_path, "machine.layers") << read;
    }
  }
}

TEST_F(ConfigReaderTest, ListItemsAreAddressedByNameOrEndpoints) {
  // links.b-a reaches the item `between: [a, b]` (either order), devices.gpu the item named gpu.
  const std::string f = write("m.yaml",
                              "devices:\n  - {name: cpu, cores: 4}\n  - {name: gpu, cores: 1}\n"
                              "links:\n  - {between: [a, b], bandwidth: \"1 GB/s\"}\n"
                              "  - {between: [b, c], bandwidth: \"2 GB/s\"}\n");
  Context ctx({"links.c-b.bandwidth=9 GB/s", "devices.gpu.cores=8"});
  const Node root = ctx.load_root(f);
  MapReader r(root);
  std::vector<double> rates;
  for (const auto& link : r.child("links")->items()) {
    MapReader l(link);
    (void)l.required_child("between", "a pair");
    rates.push_back(l.required<Bandwidth>("bandwidth").value.bytes_per_s);
  }
  std::vector<int> cores;
  for (const auto& d : r.child("devices")->items()) {
    MapReader m(d);
    (void)m.required<std::string>("name");
    cores.push_back(m.required<int>("cores").value);
  }
  ctx.finish();
  EXPECT_EQ(rates, (std::vector<double>{1e9, 9e9}));
  EXPECT_EQ(cores, (std::vector<int>{4, 8}));
}

TEST_F(ConfigReaderTest, AnOverrideOfAnUnknownKeyIsAnError) {
  const std::string f = write("a.yaml", "layers: 3\nlink: \"36 GB/s\"\n");
  Context ctx({"lyers=4", "layers"});
  (void)read_spec(ctx.load_root(f));
  try {
    ctx.finish();
    FAIL();
  } catch (const ConfigError& e) {
    ASSERT_EQ(e.diagnostics().size(), 2u);
    EXPECT_EQ(e.diagnostics()[0].str(), "--set layers: expected key.path=value");
    EXPECT_EQ(e.diagnostics()[1].str(), "--set lyers=4: lyers: no such key (did you mean 'layers'?)");
  }
}

TEST_F(ConfigReaderTest, InvalidYamlIsFatalWithItsLocation) {
  const std::string f = write("bad.yaml", "layers: [1, 2\nlink: x\n");
  Context ctx;
  try {
    (void)ctx.load_root(f);
    FAIL();
  } catch (const ConfigError& e) {
    ASSERT_EQ(e.diagnostics().size(), 1u);
    EXPECT_EQ(e.diagnostics()[0].loc.file, f);
    EXPECT_GE(e.diagnostics()[0].loc.line, 1);
    EXPECT_NE(e.diagnostics()[0].message.find("invalid YAML"), std::string::npos);
  }
}

TEST_F(ConfigReaderTest, AMissingFileIsReported) {
  Context ctx;
  EXPECT_THROW((void)ctx.load_root(dir_ / "absent.yaml"), ConfigError);
}

constexpr std::array<std::string_view, 3> kBlockColumns{"m", "n", "efficiency"};

// The diagnostics of ctx.finish() as strings ("" when there are none).
std::vector<std::string> finish_errors(Context& ctx) {
  std::vector<std::string> out;
  try {
    ctx.finish();
  } catch (const ConfigError& e) {
    for (const auto& d : e.diagnostics()) out.push_back(d.str());
  }
  return out;
}

TEST_F(ConfigReaderTest, ABlockTableGivesItsCellsInTheAskedOrderWithTheirLocations) {
  // Line 2 is the `|`; the block's lines are the file's lines 3-7, indented by 4 (line 5 by 6).
  const std::string f = write("t.yaml",
                              "gemm:\n"
                              "  table: |\n"
                              "    efficiency  n    m    # header, in another order\n"
                              "    0.5         256  1024\n"
                              "\n"
                              "      0.25      512  2048  # more indented\n");
  Context ctx;
  MapReader gemm(*MapReader(ctx.load_root(f)).child("gemm"));
  const auto rows = read_block_table(*gemm.child("table"), kBlockColumns);
  ASSERT_TRUE(rows.has_value());
  ASSERT_EQ(rows->size(), 2u);
  const auto& first = (*rows)[0];
  EXPECT_EQ(first.cells[0].value, 1024.0);  // m
  EXPECT_EQ(first.cells[1].value, 256.0);   // n
  EXPECT_EQ(first.cells[2].value, 0.5);     // efficiency
  EXPECT_EQ(first.cells[0].loc.str(), f + ":4:22");
  EXPECT_EQ(first.loc.str(), f + ":4:5");
  EXPECT_EQ(first.path, "gemm.table.0");
  const auto& second = (*rows)[1];
  EXPECT_EQ(second.cells[0].value, 2048.0);
  EXPECT_EQ(second.cells[2].value, 0.25);
  EXPECT_EQ(second.cells[1].loc.str(), f + ":6:17");
  EXPECT_EQ(second.path, "gemm.table.1");
  EXPECT_TRUE(finish_errors(ctx).empty());
}

TEST_F(ConfigReaderTest, ABlockTableReportsEachBadCellWhereItIs) {
  const std::string f = write("t.yaml",
                              "table: |\n"
                              "  m    n    efficiency\n"
                              "  1    2    0.5\n"
                              "  1    two  0.5\n"
                              "  1    2\n"
                              "  1    2    inf\n"
                              "  3    4    0.75\n");
  Context ctx;
  MapReader root(ctx.load_root(f));
  const auto rows = read_block_table(*root.child("table"), kBlockColumns);
  ASSERT_TRUE(rows.has_value());
  ASSERT_EQ(rows->size(), 2u);  // the rows with an error are left out
  EXPECT_EQ((*rows)[1].cells[2].value, 0.75);
  EXPECT_EQ((*rows)[1].path, "table.4");
  EXPECT_EQ(finish_errors(ctx), (std::vector<std::string>{
                                    f + ":4:8: table.1.n: expected a number, got \"two\"",
                                    f + ":5:3: table.2: expected 3 fields (m n efficiency), got 2",
                                    f + ":6:13: table.3.efficiency: expected a number, got \"inf\"",
                                }));
}

TEST_F(ConfigReaderTest, ABlockTableHeaderNamesEachColumnOnce) {
  const std::string f = write("t.yaml",
                              "table: |\n"
                              "  m  m  effciency\n"
                              "  1  2  0.5\n");
  Context ctx;
  MapReader root(ctx.load_root(f));
  EXPECT_FALSE(read_block_table(*root.child("table"), kBlockColumns).has_value());
  EXPECT_EQ(finish_errors(ctx),
            (std::vector<std::string>{
                f + ":2:3: table: missing column 'n' in the header (the columns are m n efficiency)",
                f + ":2:3: table: missing column 'efficiency' in the header (the columns are m n "
                    "efficiency)",
                f + ":2:6: table: column 'm' is named twice",
                f + ":2:9: table: unknown column 'effciency' (did you mean 'efficiency'?)",
            }));
}

TEST_F(ConfigReaderTest, ABlockTableMustBeALiteralBlock) {
  // A quoted or folded scalar's lines are not the file's lines: its cells could not be located.
  const std::string f = write("t.yaml",
                              "quoted: \"m n efficiency\\n1 2 0.5\"\n"
                              "folded: >\n"
                              "  m n efficiency\n"
                              "list: [1, 2]\n");
  Context ctx;
  MapReader root(ctx.load_root(f));
  for (const char* key : {"quoted", "folded", "list"}) {
    EXPECT_FALSE(read_block_table(*root.child(key), kBlockColumns).has_value()) << key;
  }
  const auto errors = finish_errors(ctx);
  ASSERT_EQ(errors.size(), 3u);
  EXPECT_EQ(errors[0],
            f + ":1:9: quoted: a table must be a literal block (write `quoted: |`, then the header line m n efficiency "
                "and one row per line, indented below it), so that its lines are the file's lines");
  EXPECT_EQ(errors[1].substr(0, f.size() + 21), f + ":2:9: folded: a table");
  EXPECT_EQ(errors[2], f + ":4:7: list: expected a table in a literal block (|) whose first line names the columns "
                           "(m n efficiency) and whose every further line is one row");
}

TEST(DidYouMean, SuggestsOnlyCloseCandidates) {
  EXPECT_EQ(did_you_mean("bandwith", {"bandwidth", "latency"}).value_or(""), "bandwidth");
  EXPECT_EQ(did_you_mean("laytency", {"bandwidth", "latency"}).value_or(""), "latency");
  EXPECT_FALSE(did_you_mean("colour", {"bandwidth", "latency"}).has_value());
  EXPECT_EQ(edit_distance("ab", "ba"), 1u);  // a transposition is one edit
  EXPECT_EQ(edit_distance("kitten", "sitting"), 3u);
  EXPECT_EQ(edit_distance("", "abc"), 3u);
}

TEST(DidYouMean, TheBoundedDistanceIsTheDistanceOrTheBound) {
  // edit_distance_below stops once the distance cannot come under the bound: over pairs of words
  // from a small alphabet (many near misses and transpositions), it is min(distance, bound), and
  // the bag distance never exceeds the distance.
  std::uint32_t state = 12345;
  const auto word = [&] {
    std::string w;
    state = state * 1664525u + 1013904223u;
    const std::size_t length = state % 9;
    for (std::size_t k = 0; k < length; ++k) {
      state = state * 1664525u + 1013904223u;
      w += static_cast<char>('a' + state % 3);
    }
    return w;
  };
  for (int pair = 0; pair < 2000; ++pair) {
    const std::string a = word(), b = word();
    const std::size_t exact = edit_distance(a, b);
    EXPECT_LE(bag_distance(a, b), exact) << a << " " << b;
    for (std::size_t bound = 0; bound <= 9; ++bound) {
      EXPECT_EQ(edit_distance_below(a, b, bound), std::min(exact, bound)) << a << " " << b << " " << bound;
    }
  }
}

}  // namespace
}  // namespace offsim::sim::config
