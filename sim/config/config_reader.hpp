#pragma once
// Reading YAML configuration into plain spec structs.
//
// - Every value keeps its location (file:line:col, 1-based) and its key path ("model.layers").
// - Errors do not stop the reading: they are collected in the Context, and Context::finish()
//   throws one ConfigError listing them all. Each reads
//       file:line:col: key.path: what was expected, what was found
// - A MapReader reports the keys it was not asked for as unknown, with a did-you-mean.
//   `source` and `notes` keys are allowed everywhere: they document where a number comes from.
// - `key: !include relative/path.yaml` splices another file in; its values are located in it.
//   An include resolves inside the root file's folder tree or its project (the folder holding configs/) only
//   (include_roots below) unless OFFSIM_ALLOW_INCLUDE_OUTSIDE=1 (the CLI's --allow-include-outside
//   sets it); it must name a .yaml, .yml or .json file holding a mapping or a list, or it is
//   refused without its text being shown; a cycle is named by its chain (a.yaml -> b.yaml -> a.yaml).
// - `--set key.path=value` overrides replace the value at that path (the value is read as YAML,
//   so `--set strategy.devices=[0,1]` works). An override that matches no key is an error.
//
// YAML::Node never leaves this layer and the parse_* functions that use Node / MapReader.
#include <yaml-cpp/yaml.h>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "sim/core/units.hpp"

namespace offsim::sim::config {

// The rates a configuration may give (docs/fuzzing.md): 1 GB at 1 kB/s takes 1e6 s, within the
// 64-bit picosecond clock (106 days); 1 EB/s and 1e21 FLOP/s are a million times any device's.
inline constexpr double kMinBandwidth = 1e3;  // B/s
inline constexpr double kMaxBandwidth = 1e18;
inline constexpr double kMinFlopRate = 1e6;  // FLOP/s
inline constexpr double kMaxFlopRate = 1e21;

/// While one is alive on a thread, every file that thread's readers load is parsed once and then
/// reused (a sweep reads the YAML of its experiments once, not once per point; parsing is most of
/// a small experiment's load time). Files are taken as they were when first read. Scopes nest: an
/// inner one shares the outer one's files. Parse errors are not kept: they are reported each time.
class ScopedFileCache {
 public:
  ScopedFileCache();
  ~ScopedFileCache();
  ScopedFileCache(const ScopedFileCache&) = delete;
  ScopedFileCache& operator=(const ScopedFileCache&) = delete;

  /// Drops `name` (as the readers spell it: the root's path, an include's normalised path), so that
  /// the next read parses it again: for a file rewritten while the cache lives (the fuzz input).
  void forget(const std::string& name) { files_.erase(name); }

 private:
  std::unordered_map<std::string, YAML::Node> files_;
  bool owner_ = false;
};

struct Location {
  std::string file;
  int line = 0;  // 1-based; 0 when the value did not come from a file (a --set override)
  int column = 0;
  [[nodiscard]] std::string str() const;
};

template <class T>
struct Located {
  T value{};
  Location loc;
  bool valid = false;  // false when the value was missing or could not be read (an error is recorded)
};

struct Diagnostic {
  Location loc;
  std::string key_path;
  std::string message;
  [[nodiscard]] std::string str() const;
};

/// Bad input. Carries every problem found; what() is one line per diagnostic.
class ConfigError : public std::runtime_error {
 public:
  explicit ConfigError(std::vector<Diagnostic> diagnostics);
  [[nodiscard]] const std::vector<Diagnostic>& diagnostics() const { return diagnostics_; }

 private:
  std::vector<Diagnostic> diagnostics_;
};

class Node;

/// The environment variable that lets `!include` name any file (1, true or yes).
inline constexpr const char* kAllowIncludeOutsideEnv = "OFFSIM_ALLOW_INCLUDE_OUTSIDE";

/// The folders a root file's includes may resolve in: the root's own folder (and below), and its
/// project: the folder that holds the nearest configs/ folder among the root's folder and its
/// parents (the repository, for every file offsim ships; its tests/data too). Paths are compared
/// as written, made absolute and normal (`..` taken out); links inside these folders are
/// followed, being their owner's choice.
[[nodiscard]] std::vector<std::filesystem::path> include_roots(const std::filesystem::path& root_file);

/// The files an include went through, from the root file to the file of a node.
using IncludeChain = std::shared_ptr<const std::vector<std::string>>;

class Context {
 public:
  /// `overrides` are the raw "key.path=value" strings of --set.
  explicit Context(const std::vector<std::string>& overrides = {});
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  /// Adds overrides written in a configuration file itself (an experiment's `set:` list), to be
  /// called before the values they set are read. A command-line override of the same key wins.
  void add_file_overrides(const std::vector<Located<std::string>>& overrides);

  /// Loads a YAML file as the root of a configuration. A file that cannot be read or parsed is
  /// fatal (ConfigError at once): nothing else could be checked.
  [[nodiscard]] Node load_root(const std::filesystem::path& file);

  void error(const Location& loc, std::string_view key_path, std::string message);
  void warning(const Location& loc, std::string_view key_path, std::string message);

  /// Reports overrides that matched no key, then throws ConfigError if any error was recorded.
  /// Errors are listed file by file (in the order files were first named), by line and column.
  void finish();

  /// The overrides that set `path` or a key inside it, as written ("key.path=value"), in key order.
  [[nodiscard]] std::vector<std::string> override_texts_under(std::string_view path) const;
  /// Whether an override sets `path` or a key inside it (a key a --set or `set:` writes is present).
  [[nodiscard]] bool has_override_under(std::string_view path) const;
  /// Whether every override under `path` has been applied to a value read.
  [[nodiscard]] bool overrides_used_under(std::string_view path) const;
  /// Marks the overrides under `path` applied: a reader that takes the value at `path` from a cache
  /// (read earlier with the same overrides, all of them applied) calls it in place of reading.
  void mark_overrides_used_under(std::string_view path);
  /// The key paths read at `path` or inside it (for the suggestions of unknown overrides); a cached
  /// reader notes them again with note_known_paths.
  [[nodiscard]] std::vector<std::string> known_paths_under(std::string_view path) const;
  /// Notes key paths read earlier (a cached value's): kept as they are, merged only when an unknown
  /// override needs suggestions, so that taking a cached table of thousands of rows costs nothing.
  void note_known_paths(std::shared_ptr<const std::vector<std::string>> paths) {
    noted_paths_.push_back(std::move(paths));
  }
  /// A note for an override of `key` that matches no key, added to its "no such key" error (what a
  /// reader knows of the mistake: `hardware.device=h200` is not how a machine's GPU is chosen).
  void note_unknown_override(const std::string& key, std::string note) { unknown_notes_[key] = std::move(note); }
  [[nodiscard]] bool has_errors() const { return !errors_.empty(); }
  [[nodiscard]] std::size_t error_count() const { return errors_.size(); }
  [[nodiscard]] const std::vector<Diagnostic>& warnings() const { return warnings_; }
  /// Every scalar read, in reading order: (key path, value as written, after overrides).
  [[nodiscard]] const std::vector<std::pair<std::string, std::string>>& effective() const { return effective_; }

  // Used by Node / MapReader.
  [[nodiscard]] std::optional<Node> resolve(const Node& parent, std::string_view key, const YAML::Node* found);
  /// Overrides that address a list item by a name (`path.alias...`) are moved to its index
  /// (`path.index...`): a machine's link can be set by its endpoints (links.gcd0-gcd1.bandwidth).
  void alias_overrides(const std::string& list_path, const std::string& alias, std::size_t index);
  void record(const std::string& path, const std::string& value);
  void note_known_path(const std::string& path) { known_paths_.insert(path); }

 private:
  struct Override {
    std::string raw;
    YAML::Node value;
    bool used = false;
    std::string where;  // "--set k=v", or the file location of a `set:` entry
  };
  [[nodiscard]] Node include_file(const Node& parent, const std::string& child_path, const YAML::Node& tagged,
                                  const Location& at);
  std::map<std::string, Override> overrides_;
  std::map<std::string, std::string> unknown_notes_;  // note_unknown_override
  std::vector<Diagnostic> errors_;
  std::vector<Diagnostic> warnings_;
  std::vector<std::pair<std::string, std::string>> effective_;
  std::set<std::string> known_paths_;
  std::vector<std::shared_ptr<const std::vector<std::string>>> noted_paths_;  // note_known_paths
  std::vector<std::filesystem::path> include_roots_;                          // of every root loaded (include_roots)
  bool include_anywhere_ = false;                                             // OFFSIM_ALLOW_INCLUDE_OUTSIDE
};

/// A located view of one YAML value.
class Node {
 public:
  Node(Context& ctx, YAML::Node yaml, std::string file, std::string path, Location loc, IncludeChain includes);

  [[nodiscard]] const std::string& path() const { return path_; }
  [[nodiscard]] const Location& location() const { return loc_; }
  [[nodiscard]] const std::string& file() const { return file_; }
  [[nodiscard]] Context& context() const { return *ctx_; }
  [[nodiscard]] int include_depth() const { return static_cast<int>(includes_->size()) - 1; }
  [[nodiscard]] const IncludeChain& includes() const { return includes_; }
  [[nodiscard]] bool is_map() const { return yaml_.IsMap(); }
  [[nodiscard]] bool is_sequence() const { return yaml_.IsSequence(); }
  [[nodiscard]] bool is_scalar() const { return yaml_.IsScalar(); }
  [[nodiscard]] bool is_null() const { return !yaml_.IsDefined() || yaml_.IsNull(); }
  [[nodiscard]] const YAML::Node& yaml() const { return yaml_; }
  /// A node that stands for an include that failed: its error is already reported, so reading it
  /// reports nothing more.
  [[nodiscard]] bool broken() const { return broken_; }
  [[nodiscard]] Node as_broken() const {
    Node n = *this;
    n.broken_ = true;
    return n;
  }
  /// Whether this node is an override's value (--set, a `set:` entry, a sweep's axis) or inside
  /// one: its YAML marks count in the value's text, not in file(), so its location, and that of
  /// everything inside it, is the override's.
  [[nodiscard]] bool from_override() const { return from_override_; }
  [[nodiscard]] Node as_override() && {
    from_override_ = true;
    return std::move(*this);
  }
  /// Where `inside` (this node's YAML or a part of it) is: its own line and column in file(), or
  /// this node's location when it is an override's value (its marks count in the value's text).
  [[nodiscard]] Location location_of(const YAML::Node& inside) const;

  /// Converts a scalar to T; on failure records an error (naming `expected`) and returns nullopt.
  template <class T>
  [[nodiscard]] std::optional<T> as() const;
  /// The items of a sequence (error and empty if this is not one).
  [[nodiscard]] std::vector<Node> items() const;
  [[nodiscard]] std::string child_path(std::string_view key) const;

 private:
  Context* ctx_;
  YAML::Node yaml_;
  std::string file_;
  std::string path_;
  Location loc_;
  IncludeChain includes_;
  bool broken_ = false;
  bool from_override_ = false;
};

/// Reads the keys of one mapping. Keys never asked for are reported as unknown when the reader
/// goes out of scope (with the closest asked-for key as a suggestion).
class MapReader {
 public:
  explicit MapReader(const Node& node);
  MapReader(const MapReader&) = delete;
  MapReader& operator=(const MapReader&) = delete;
  ~MapReader();

  [[nodiscard]] const Node& node() const { return node_; }
  /// Whether `key` is present: in the file, or set by an override (--set, `set:`).
  [[nodiscard]] bool has(std::string_view key);
  /// The child at `key`, or nullopt when absent (no error).
  [[nodiscard]] std::optional<Node> child(std::string_view key);
  /// The child at `key`; records "missing required key" when absent.
  [[nodiscard]] std::optional<Node> required_child(std::string_view key, std::string_view expected);

  template <class T>
  Located<T> required(std::string_view key) {
    Located<T> out;
    out.loc = node_.location();
    if (auto c = required_child(key, type_name<T>())) {
      out.loc = c->location();
      if (auto v = c->template as<T>()) {
        out.value = *v;
        out.valid = true;
      }
    }
    return out;
  }
  /// Optional with a documented default: the default is recorded in the effective configuration.
  template <class T>
  Located<T> optional(std::string_view key, T fallback) {
    Located<T> out{fallback, node_.location(), true};
    if (auto c = child(key)) {
      out.loc = c->location();
      auto v = c->template as<T>();
      out.valid = v.has_value();
      if (v) out.value = *v;
    }
    return out;
  }
  /// The keys not asked for so far, in file order, now counted as read: for formats offsim reads
  /// in part (a Hugging Face or DeepSpeed config), whose other keys are listed in a warning
  /// instead of being errors.
  [[nodiscard]] std::vector<std::string> take_unread_keys();
  /// A string that must be one of `choices`.
  Located<std::string> choice(std::string_view key, const std::vector<std::string>& choices,
                              std::optional<std::string> fallback = std::nullopt);

  template <class T>
  static constexpr std::string_view type_name();

 private:
  [[nodiscard]] std::optional<Node> lookup(std::string_view key);

  Node node_;
  std::vector<std::string> asked_;
  bool valid_ = true;
};

// --- type names used in "expected ..." messages ---
template <class T>
constexpr std::string_view MapReader::type_name() {
  if constexpr (std::is_same_v<T, std::int64_t> || std::is_same_v<T, int>)
    return "an integer";
  else if constexpr (std::is_same_v<T, double>)
    return "a number";
  else if constexpr (std::is_same_v<T, bool>)
    return "true or false";
  else if constexpr (std::is_same_v<T, std::string>)
    return "a string";
  else if constexpr (std::is_same_v<T, Bytes>)
    return "a size such as \"64 GiB\"";
  else if constexpr (std::is_same_v<T, TimePs>)
    return "a duration such as \"1.5 us\"";
  else if constexpr (std::is_same_v<T, Bandwidth>)
    return "a bandwidth such as \"36 GB/s\"";
  else if constexpr (std::is_same_v<T, Flops>)
    return "a FLOP count such as \"3 TFLOP\"";
  else if constexpr (std::is_same_v<T, FlopRate>)
    return "a FLOP rate such as \"191.5 TFLOP/s\"";
  else
    return "a value";
}

/// Checks that `value` is a fraction in (0, 1] (an efficiency, a ratio, a share of a head) and
/// reports it at `at` under `path` when it is not; returns whether it is.
bool check_fraction(Context& ctx, const Location& at, std::string_view path, double value);

}  // namespace offsim::sim::config
