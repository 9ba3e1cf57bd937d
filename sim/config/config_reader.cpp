#include "sim/config/config_reader.hpp"

#include <fmt/format.h>
#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <ios>
#include <optional>
#include <tuple>
#include <unordered_map>

#include "sim/config/did_you_mean.hpp"

namespace offsim::sim::config {

namespace {

// Includes nest at most this deep (a cycle is found before: it repeats a file of its chain).
constexpr int kMaxIncludeDepth = 16;
// A configuration file is at most this large (the largest shipped one is 21 KB): a larger one is
// refused before yaml-cpp spends minutes and gigabytes on it.
constexpr std::uintmax_t kMaxFileBytes = 16u << 20;
constexpr std::string_view kIncludeTag = "!include";
// Keys that document a value and are accepted in every mapping.
const std::vector<std::string> kDocumentationKeys{"source", "notes"};

Location mark_location(const YAML::Node& node, const std::string& file, const Location& fallback) {
  try {
    const YAML::Mark m = node.Mark();
    if (m.line < 0) return fallback;
    return Location{file, m.line + 1, m.column + 1};
  } catch (const std::exception&) {
    return fallback;  // yaml-cpp throws for marks of missing nodes: report at the parent
  }
}

// A value as an error shows it: a scalar's first line, at most kShownChars characters (a file
// read as one long scalar is never shown whole).
constexpr std::size_t kShownChars = 80;
std::string describe_found(const YAML::Node& n) {
  if (!n.IsDefined() || n.IsNull()) return "nothing (null)";
  if (n.IsMap()) return "a mapping";
  if (n.IsSequence()) return "a list";
  const std::string& s = n.Scalar();
  const std::size_t cut = std::min(s.find('\n'), kShownChars);
  if (cut >= s.size()) return fmt::format("\"{}\"", s);
  return fmt::format("\"{}...\"", s.substr(0, cut));
}

bool truthy_env(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr) return false;
  const std::string_view s(v);
  return s == "1" || s == "true" || s == "yes";
}

// Whether `file` is named as a configuration: .yaml, .yml or .json, in any case.
bool configuration_file_name(const std::filesystem::path& file) {
  std::string ext = file.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return ext == ".yaml" || ext == ".yml" || ext == ".json";
}

// Whether `p` is `root` or inside it (both absolute and normal).
bool inside(const std::filesystem::path& p, const std::filesystem::path& root) {
  auto [r, q] = std::mismatch(root.begin(), root.end(), p.begin(), p.end());
  return r == root.end();
}

// Why `name` cannot be read as a configuration file, or nullopt when it can be tried (a missing
// file is left to yaml-cpp's BadFile). Includes must name regular files; a root file may also be
// a pipe (`offsim run /dev/stdin`), but not a directory.
std::optional<std::string> unreadable(const std::string& name, bool regular_only) {
  std::error_code ec;
  const auto status = std::filesystem::status(name, ec);
  if (ec || !std::filesystem::exists(status)) return std::nullopt;
  if (std::filesystem::is_directory(status)) return "is a directory, not a file";
  if (!std::filesystem::is_regular_file(status)) {
    if (regular_only) return "is not a regular file";
    return std::nullopt;
  }
  const auto bytes = std::filesystem::file_size(name, ec);
  if (!ec && bytes > kMaxFileBytes) {
    return fmt::format("is {} bytes, more than a configuration file may hold ({} MiB)", bytes, kMaxFileBytes >> 20);
  }
  return std::nullopt;
}

// The files of the innermost live ScopedFileCache on this thread, by name; null when none.
thread_local std::unordered_map<std::string, YAML::Node>* file_cache = nullptr;

// Whether `name` is in the live file cache: read (and checked) already by this worker.
bool cached(const std::string& name) {
  return file_cache != nullptr && file_cache->contains(name);
}

// What a worker under a ScopedFileCache works out once for all its experiments rather than once
// per experiment: the parsed values of --set / sweep overrides (a sweep's points repeat the same
// few), the include roots of each root file and the absolute form of each include target (both
// from the file system's layout and the working folder, which do not change during a sweep).
// What an `!include` names, worked out from the including file and the include's text alone.
struct IncludeTarget {
  std::filesystem::path target;               // the including file's folder / the include's text
  std::string name;                           // target, lexically normal: how the file is named and cached
  std::optional<std::filesystem::path> real;  // normal_absolute(target)
  bool configuration = false;                 // configuration_file_name(target)
};
struct WorkerMemo {
  std::unordered_map<std::string, YAML::Node> values;  // override value text -> parsed (parse_override_value)
  std::size_t collections = 0;                         // how many of them are mappings or lists
  std::unordered_map<std::string, std::vector<std::filesystem::path>> include_roots;  // root file -> roots
  std::unordered_map<std::string, std::optional<std::filesystem::path>> absolute;     // target -> normal absolute
  // Including file + '\n' + include text -> its target: a sweep's points include the same few
  // files every time, and the path arithmetic was a fifth of reading a point's experiment.
  std::unordered_map<std::string, IncludeTarget> include_targets;
};
// Owned by the thread's outermost ScopedFileCache (created and deleted with it): a plain pointer,
// so nothing is left for the thread's exit to destroy (a static ScopedFileCache, as in the fuzz
// harness, ends after the main thread's thread_locals).
thread_local WorkerMemo* worker_memo = nullptr;

// An override's value parsed as YAML, once per worker and text, handed out as a copy (readers may
// not share a node). A copy has no marks (YAML::Clone drops them), which an override's value does
// not use: errors inside it are located at the override (Context::resolve). Mappings and lists are
// kept too, up to kMemoisedCollections of them: a search's strategy is the same text for each of
// its micro-batch sizes, and parsing it was a fifth of reading a point; the bound keeps a sweep of
// ever-different texts from growing the memo with its points. Throws YAML::Exception as
// YAML::Load does.
YAML::Node parse_override_value(const std::string& text) {
  constexpr std::size_t kMemoisedCollections = 4096;
  if (worker_memo == nullptr) return YAML::Load(text);
  if (auto it = worker_memo->values.find(text); it != worker_memo->values.end()) return YAML::Clone(it->second);
  YAML::Node value = YAML::Load(text);
  if (value.IsScalar() || worker_memo->collections < kMemoisedCollections) {
    if (!value.IsScalar()) ++worker_memo->collections;
    worker_memo->values.emplace(text, YAML::Clone(value));
  }
  return value;
}

// std::filesystem::absolute(target).lexically_normal(), nullopt when it fails; once per worker.
std::optional<std::filesystem::path> normal_absolute(const std::filesystem::path& target) {
  const auto compute = [&]() -> std::optional<std::filesystem::path> {
    std::error_code ec;
    auto real = std::filesystem::absolute(target, ec).lexically_normal();
    if (ec) return std::nullopt;
    return real;
  };
  if (worker_memo == nullptr) return compute();
  const auto [it, inserted] = worker_memo->absolute.try_emplace(target.string());
  if (inserted) it->second = compute();
  return it->second;
}

IncludeTarget make_include_target(const std::string& including_file, const std::string& text) {
  IncludeTarget t;
  t.target = std::filesystem::path(including_file).parent_path() / std::filesystem::path(text);
  t.name = t.target.lexically_normal().string();
  t.real = normal_absolute(t.target);
  t.configuration = configuration_file_name(t.target);
  return t;
}

// The target of `!include text` in `including_file`, once per worker (the file system's layout and
// the working folder do not change during a sweep). `scratch` holds it when there is no worker.
const IncludeTarget& include_target(const std::string& including_file, const std::string& text,
                                    IncludeTarget& scratch) {
  if (worker_memo == nullptr) return scratch = make_include_target(including_file, text);
  std::string key;
  key.reserve(including_file.size() + 1 + text.size());
  key.append(including_file).append(1, '\n').append(text);
  const auto [it, inserted] = worker_memo->include_targets.try_emplace(std::move(key));
  if (inserted) it->second = make_include_target(including_file, text);
  return it->second;
}

YAML::Node load_file(const std::string& name) {
  if (file_cache == nullptr) return YAML::LoadFile(name);
  if (auto it = file_cache->find(name); it != file_cache->end()) return it->second;
  return file_cache->emplace(name, YAML::LoadFile(name)).first->second;
}

}  // namespace

ScopedFileCache::ScopedFileCache() {
  if (file_cache != nullptr) return;
  worker_memo = new WorkerMemo();  // NOLINT(cppcoreguidelines-owning-memory): deleted by this owner's destructor
  file_cache = &files_;
  owner_ = true;
}

ScopedFileCache::~ScopedFileCache() {
  if (!owner_) return;
  file_cache = nullptr;
  delete worker_memo;
  worker_memo = nullptr;
}

bool check_fraction(Context& ctx, const Location& at, std::string_view path, double value) {
  if (value > 0.0 && value <= 1.0) return true;
  ctx.error(at, path, fmt::format("expected a fraction in (0, 1], got {}", value));
  return false;
}

Location Node::location_of(const YAML::Node& inside) const {
  return from_override_ ? loc_ : mark_location(inside, file(), loc_);
}

std::string Location::str() const {
  if (line == 0) return file;
  return fmt::format("{}:{}:{}", file, line, column);
}

std::string Diagnostic::str() const {
  if (key_path.empty()) return fmt::format("{}: {}", loc.str(), message);
  return fmt::format("{}: {}: {}", loc.str(), key_path, message);
}

namespace {
std::string join_diagnostics(const std::vector<Diagnostic>& diagnostics) {
  std::string out;
  for (const auto& d : diagnostics) {
    if (!out.empty()) out += '\n';
    out += d.str();
  }
  return out;
}
}  // namespace

ConfigError::ConfigError(std::vector<Diagnostic> diagnostics)
    : std::runtime_error(join_diagnostics(diagnostics)), diagnostics_(std::move(diagnostics)) {}

Context::Context(const std::vector<std::string>& overrides) {
  for (const auto& raw : overrides) {
    const Location loc{fmt::format("--set {}", raw), 0, 0};
    const auto eq = raw.find('=');
    if (eq == std::string::npos || eq == 0) {
      error(loc, "", "expected key.path=value");
      continue;
    }
    const std::string key = raw.substr(0, eq);
    try {
      overrides_[key] = Override{raw, parse_override_value(raw.substr(eq + 1)), false, fmt::format("--set {}", raw)};
    } catch (const YAML::Exception& e) {
      error(loc, key, fmt::format("the value is not valid YAML: {}", e.msg));
    }
  }
}

void Context::add_file_overrides(const std::vector<Located<std::string>>& overrides) {
  for (const auto& o : overrides) {
    const auto eq = o.value.find('=');
    if (eq == std::string::npos || eq == 0) {
      error(o.loc, "set", fmt::format("expected \"key.path=value\", got \"{}\"", o.value));
      continue;
    }
    const std::string key = o.value.substr(0, eq);
    if (overrides_.contains(key)) continue;  // the command line wins
    try {
      overrides_[key] = Override{o.value, parse_override_value(o.value.substr(eq + 1)), false, o.loc.str()};
    } catch (const YAML::Exception& e) {
      error(o.loc, "set", fmt::format("the value is not valid YAML: {}", e.msg));
    }
  }
}

namespace {
std::vector<std::filesystem::path> find_include_roots(const std::filesystem::path& root_file) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path folder = fs::absolute(root_file, ec).lexically_normal().parent_path();
  std::vector<fs::path> roots{folder};
  for (fs::path at = folder; !at.empty(); at = at.parent_path()) {
    if (at.filename() == "configs" && at.has_parent_path()) {
      roots.push_back(at.parent_path());
      break;
    }
    if (fs::is_directory(at / "configs", ec)) {
      roots.push_back(at);
      break;
    }
    if (at == at.parent_path()) break;
  }
  if (roots.size() == 2 && inside(roots[0], roots[1])) roots.erase(roots.begin());
  return roots;
}
}  // namespace

std::vector<std::filesystem::path> include_roots(const std::filesystem::path& root_file) {
  if (worker_memo == nullptr) return find_include_roots(root_file);
  const auto [it, inserted] = worker_memo->include_roots.try_emplace(root_file.string());
  if (inserted) it->second = find_include_roots(root_file);
  return it->second;
}

Node Context::load_root(const std::filesystem::path& file) {
  const std::string name = file.string();
  include_anywhere_ = truthy_env(kAllowIncludeOutsideEnv);
  for (auto& r : include_roots(file)) {
    if (std::find(include_roots_.begin(), include_roots_.end(), r) == include_roots_.end()) include_roots_.push_back(r);
  }
  YAML::Node root;
  if (const auto why = cached(name) ? std::nullopt : unreadable(name, false)) {
    throw ConfigError({Diagnostic{Location{name, 0, 0}, "", *why}});
  }
  try {
    root = load_file(name);
  } catch (const YAML::BadFile&) {
    throw ConfigError({Diagnostic{Location{name, 0, 0}, "", "cannot open the file"}});
  } catch (const YAML::ParserException& e) {
    throw ConfigError(
        {Diagnostic{Location{name, e.mark.line + 1, e.mark.column + 1}, "", fmt::format("invalid YAML: {}", e.msg)}});
  } catch (const std::ios_base::failure& e) {
    throw ConfigError({Diagnostic{Location{name, 0, 0}, "", fmt::format("cannot read the file: {}", e.what())}});
  }
  return Node(*this, root, name, "", Location{name, 1, 1},
              std::make_shared<const std::vector<std::string>>(1, file.lexically_normal().string()));
}

void Context::error(const Location& loc, std::string_view key_path, std::string message) {
  errors_.push_back(Diagnostic{loc, std::string(key_path), std::move(message)});
}

void Context::warning(const Location& loc, std::string_view key_path, std::string message) {
  warnings_.push_back(Diagnostic{loc, std::string(key_path), std::move(message)});
}

namespace {

// Whether override key `key` sets `path` or a key inside it.
bool key_under(std::string_view key, std::string_view path) {
  return key == path || (key.size() > path.size() && key.starts_with(path) && key[path.size()] == '.');
}

}  // namespace

std::vector<std::string> Context::override_texts_under(std::string_view path) const {
  std::vector<std::string> texts;
  for (const auto& [key, o] : overrides_) {
    if (key_under(key, path)) texts.push_back(o.raw);
  }
  return texts;
}

bool Context::has_override_under(std::string_view path) const {
  return std::ranges::any_of(overrides_, [&](const auto& entry) { return key_under(entry.first, path); });
}

bool Context::overrides_used_under(std::string_view path) const {
  return std::ranges::all_of(overrides_,
                             [&](const auto& entry) { return !key_under(entry.first, path) || entry.second.used; });
}

std::vector<std::string> Context::known_paths_under(std::string_view path) const {
  std::vector<std::string> paths;
  for (auto it = known_paths_.lower_bound(std::string(path)); it != known_paths_.end() && it->starts_with(path); ++it) {
    if (key_under(*it, path)) paths.push_back(*it);
  }
  return paths;
}

void Context::mark_overrides_used_under(std::string_view path) {
  for (auto& [key, o] : overrides_) {
    if (key_under(key, path)) o.used = true;
  }
}

void Context::finish() {
  std::vector<std::string> known;  // the paths read, for suggestions: made once, when needed
  for (auto& [key, o] : overrides_) {
    if (o.used) continue;
    if (known.empty()) {
      known.assign(known_paths_.begin(), known_paths_.end());
      for (const auto& paths : noted_paths_) known.insert(known.end(), paths->begin(), paths->end());
      std::ranges::sort(known);
      known.erase(std::unique(known.begin(), known.end()), known.end());
    }
    const auto note = unknown_notes_.find(key);
    // A reader's note says what was meant better than a near key path.
    const auto hint = note == unknown_notes_.end() ? did_you_mean(key, known) : std::nullopt;
    error(Location{o.where, 0, 0}, key,
          fmt::format("no such key{}{}", hint ? fmt::format(" (did you mean '{}'?)", *hint) : std::string(),
                      note != unknown_notes_.end() ? "; " + note->second : std::string()));
  }
  if (!errors_.empty()) {
    auto all = std::move(errors_);
    errors_.clear();
    std::vector<std::string> file_order;
    for (const auto& d : all) {
      if (std::find(file_order.begin(), file_order.end(), d.loc.file) == file_order.end())
        file_order.push_back(d.loc.file);
    }
    const auto rank = [&](const Diagnostic& d) {
      return std::make_tuple(std::find(file_order.begin(), file_order.end(), d.loc.file) - file_order.begin(),
                             d.loc.line, d.loc.column);
    };
    std::stable_sort(all.begin(), all.end(),
                     [&](const Diagnostic& a, const Diagnostic& b) { return rank(a) < rank(b); });
    throw ConfigError(std::move(all));
  }
}

void Context::record(const std::string& path, const std::string& value) {
  effective_.emplace_back(path, value);
}

Node Context::include_file(const Node& parent, const std::string& child_path, const YAML::Node& tagged,
                           const Location& at) {
  IncludeTarget scratch;
  const IncludeTarget& included = include_target(parent.file(), tagged.Scalar(), scratch);
  const std::filesystem::path& target = included.target;
  const std::string& name = included.name;
  const auto broken = [&] {
    return Node(*this, YAML::Node(), parent.file(), child_path, at, parent.includes()).as_broken();
  };
  const auto& chain = *parent.includes();
  if (std::find(chain.begin(), chain.end(), name) != chain.end()) {
    const auto first = std::find(chain.begin(), chain.end(), name);
    std::vector<std::string> cycle(first, chain.end());
    cycle.push_back(name);
    error(at, child_path, fmt::format("!include: an include cycle: {}", fmt::join(cycle, " -> ")));
    return broken();
  }
  if (parent.include_depth() >= kMaxIncludeDepth) {
    error(at, child_path, fmt::format("!include: includes nest deeper than {}", kMaxIncludeDepth));
    return broken();
  }
  if (!include_anywhere_) {
    const auto& real = included.real;
    const bool allowed = real && std::any_of(include_roots_.begin(), include_roots_.end(),
                                             [&](const auto& root) { return inside(*real, root); });
    if (!allowed) {
      error(at, child_path,
            fmt::format("!include: '{}' is outside the experiment's folder and its project (the folder that "
                        "holds configs/); --allow-include-outside (or {}=1) allows it",
                        name, kAllowIncludeOutsideEnv));
      return broken();
    }
  }
  if (const auto why = cached(name) ? std::nullopt : unreadable(name, true)) {
    error(at, child_path, fmt::format("!include: '{}' {}", name, *why));
    return broken();
  }
  if (!included.configuration) {
    // Refused before it is opened: a file of another kind (/etc/shadow reads as a mapping of its
    // lines) would have its lines shown as unknown keys.
    error(at, child_path, fmt::format("!include: '{}' is not a YAML or JSON file (.yaml, .yml, .json)", name));
    return broken();
  }
  try {
    YAML::Node loaded = load_file(name);
    if (!loaded.IsMap() && !loaded.IsSequence()) {
      // Not a configuration (a text file read as one scalar): its text is not shown.
      error(at, child_path, fmt::format("!include: '{}' is not a YAML mapping or list", name));
      return broken();
    }
    auto includes = std::make_shared<std::vector<std::string>>(chain);
    includes->push_back(name);
    return Node(*this, loaded, name, child_path, Location{name, 1, 1}, std::move(includes));
  } catch (const YAML::BadFile&) {
    // A file of that folder with a similar name, as the suggestion (a missing or mistyped file).
    std::vector<std::string> siblings;
    std::error_code ec;
    const auto folder = target.lexically_normal().parent_path();
    for (std::filesystem::directory_iterator it(folder.empty() ? "." : folder, ec), end; !ec && it != end;
         it.increment(ec)) {
      if (it->is_regular_file(ec)) siblings.push_back(it->path().filename().string());
    }
    std::ranges::sort(siblings);
    const auto hint = did_you_mean(target.filename().string(), siblings);
    error(at, child_path,
          fmt::format("!include: cannot open '{}'{}", name,
                      hint ? fmt::format(" (did you mean '{}'?)", (folder / *hint).string()) : std::string()));
  } catch (const YAML::ParserException& e) {
    error(Location{name, e.mark.line + 1, e.mark.column + 1}, child_path, fmt::format("invalid YAML: {}", e.msg));
  } catch (const std::ios_base::failure& e) {
    error(at, child_path, fmt::format("!include: cannot read '{}': {}", name, e.what()));
  }
  return broken();
}

void Context::alias_overrides(const std::string& list_path, const std::string& alias, std::size_t index) {
  const std::string from = list_path.empty() ? alias : fmt::format("{}.{}", list_path, alias);
  const std::string to = list_path.empty() ? std::to_string(index) : fmt::format("{}.{}", list_path, index);
  std::vector<std::string> moved;
  for (const auto& [key, o] : overrides_) {
    if (key == from || key.starts_with(from + ".")) moved.push_back(key);
  }
  for (const auto& key : moved) {
    auto node = overrides_.extract(key);
    node.key() = to + key.substr(from.size());
    if (!overrides_.insert(std::move(node)).inserted) {
      error(Location{overrides_.at(to + key.substr(from.size())).where, 0, 0}, key,
            "this value is also set by its list index");
    }
  }
}

std::optional<Node> Context::resolve(const Node& parent, std::string_view key, const YAML::Node* found) {
  const std::string path = parent.child_path(key);
  known_paths_.insert(path);
  if (auto it = overrides_.find(path); it != overrides_.end()) {
    it->second.used = true;
    return Node(*this, it->second.value, parent.file(), path, Location{it->second.where, 0, 0}, parent.includes())
        .as_override();
  }
  if (found != nullptr) {
    // Inside an override's value, the marks count in the value's text: the override's location
    // stands for them (they once named the experiment file at the value's line and column).
    const Location at = parent.location_of(*found);
    if (found->Tag() == kIncludeTag) {
      if (!found->IsScalar()) {
        error(at, path, "!include expects a file path");
        return std::nullopt;
      }
      return include_file(parent, path, *found, at);  // a file of its own: its marks are its lines
    }
    Node child(*this, *found, parent.file(), path, at, parent.includes());
    if (parent.from_override()) return std::move(child).as_override();
    return child;
  }
  // Absent from the file, but an override sets something beneath it: an empty mapping stands in.
  const std::string prefix = path + ".";
  for (const auto& [key_path, o] : overrides_) {
    if (key_path.starts_with(prefix)) {
      return Node(*this, YAML::Node(YAML::NodeType::Map), parent.file(), path, parent.location(), parent.includes());
    }
  }
  return std::nullopt;
}

Node::Node(Context& ctx, YAML::Node yaml, std::string file, std::string path, Location loc, IncludeChain includes)
    : ctx_(&ctx),
      yaml_(std::move(yaml)),
      file_(std::move(file)),
      path_(std::move(path)),
      loc_(std::move(loc)),
      includes_(std::move(includes)) {}

std::string Node::child_path(std::string_view key) const {
  if (path_.empty()) return std::string(key);
  std::string path;
  path.reserve(path_.size() + 1 + key.size());
  path.append(path_).append(1, '.').append(key);
  return path;
}

std::vector<Node> Node::items() const {
  std::vector<Node> out;
  if (broken_) return out;
  if (!yaml_.IsSequence()) {
    ctx_->error(loc_, path_, fmt::format("expected a list, got {}", describe_found(yaml_)));
    return out;
  }
  for (std::size_t i = 0; i < yaml_.size(); ++i) {
    const YAML::Node item = yaml_[i];
    // An item may be addressed by its `name`, or a `between: [a, b]` pair by "a-b" or "b-a".
    if (item.IsMap()) {
      if (const YAML::Node name = item["name"]; name && name.IsScalar()) {
        ctx_->alias_overrides(path_, name.Scalar(), i);
      }
      if (const YAML::Node ends = item["between"];
          ends && ends.IsSequence() && ends.size() == 2 && ends[0].IsScalar() && ends[1].IsScalar()) {
        ctx_->alias_overrides(path_, fmt::format("{}-{}", ends[0].Scalar(), ends[1].Scalar()), i);
        ctx_->alias_overrides(path_, fmt::format("{}-{}", ends[1].Scalar(), ends[0].Scalar()), i);
      }
    }
    if (auto n = ctx_->resolve(*this, std::to_string(i), &item); n && !n->broken()) out.push_back(*n);
  }
  return out;
}

namespace {

template <class T>
std::optional<T> parse_integral(const std::string& s) {
  T value{};
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (ec != std::errc{} || ptr != s.data() + s.size()) return std::nullopt;
  return value;
}

}  // namespace

template <class T>
std::optional<T> Node::as() const {
  constexpr std::string_view expected = MapReader::type_name<T>();
  if (broken_) return std::nullopt;
  if (!yaml_.IsScalar()) {
    ctx_->error(loc_, path_, fmt::format("expected {}, got {}", expected, describe_found(yaml_)));
    return std::nullopt;
  }
  const std::string& s = yaml_.Scalar();
  ctx_->record(path_, s);
  std::optional<T> out;
  std::string why;
  if constexpr (std::is_same_v<T, std::string>) {
    out = s;
  } else if constexpr (std::is_same_v<T, std::int64_t> || std::is_same_v<T, int>) {
    out = parse_integral<T>(s);
  } else if constexpr (std::is_same_v<T, double>) {
    double v = 0.0;
    const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec == std::errc{} && ptr == s.data() + s.size() && std::isfinite(v)) out = v;
  } else if constexpr (std::is_same_v<T, bool>) {
    if (s == "true") out = true;
    if (s == "false") out = false;
  } else {
    try {
      if constexpr (std::is_same_v<T, Bytes>) out = parse_bytes(s);
      if constexpr (std::is_same_v<T, TimePs>) out = parse_time(s);
      if constexpr (std::is_same_v<T, Bandwidth>) out = parse_bandwidth(s);
      if constexpr (std::is_same_v<T, Flops>) out = parse_flops(s);
      if constexpr (std::is_same_v<T, FlopRate>) out = parse_flop_rate(s);
    } catch (const UnitError& e) {
      why = e.what();
    }
    // Rates far outside any machine's: a duration computed from them would leave the 64-bit
    // picosecond clock (a slow one) or round every transfer to no time (an infinite one). Zero is
    // left to the readers, which say "expected a positive ..." where a rate must be positive.
    if constexpr (std::is_same_v<T, Bandwidth>) {
      if (out && out->bytes_per_s != 0.0 && !(out->bytes_per_s >= kMinBandwidth && out->bytes_per_s <= kMaxBandwidth)) {
        why = fmt::format("expected a bandwidth from 1 kB/s to 1 EB/s (offsim's limits), got \"{}\"", s);
        out.reset();
      }
    }
    if constexpr (std::is_same_v<T, FlopRate>) {
      if (out && out->flops_per_s != 0.0 && !(out->flops_per_s >= kMinFlopRate && out->flops_per_s <= kMaxFlopRate)) {
        why = fmt::format("expected a FLOP rate from 1 MFLOP/s to 1e21 FLOP/s (offsim's limits), got \"{}\"", s);
        out.reset();
      }
    }
  }
  if (!out) {
    ctx_->error(loc_, path_, why.empty() ? fmt::format("expected {}, got \"{}\"", expected, s) : why);
  }
  return out;
}

template std::optional<std::string> Node::as<std::string>() const;
template std::optional<std::int64_t> Node::as<std::int64_t>() const;
template std::optional<int> Node::as<int>() const;
template std::optional<double> Node::as<double>() const;
template std::optional<bool> Node::as<bool>() const;
template std::optional<Bytes> Node::as<Bytes>() const;
template std::optional<TimePs> Node::as<TimePs>() const;
template std::optional<Bandwidth> Node::as<Bandwidth>() const;
template std::optional<Flops> Node::as<Flops>() const;
template std::optional<FlopRate> Node::as<FlopRate>() const;

MapReader::MapReader(const Node& node) : node_(node) {
  if (node_.broken()) {
    valid_ = false;
  } else if (!node_.yaml().IsMap()) {
    valid_ = false;
    node_.context().error(node_.location(), node_.path(),
                          fmt::format("expected a mapping, got {}", describe_found(node_.yaml())));
  }
}

MapReader::~MapReader() {
  if (!valid_) return;
  std::vector<std::string> known = asked_;
  known.insert(known.end(), kDocumentationKeys.begin(), kDocumentationKeys.end());
  for (const auto& kv : node_.yaml()) {
    const std::string key = kv.first.Scalar();
    if (std::find(known.begin(), known.end(), key) != known.end()) continue;
    const auto hint = did_you_mean(key, asked_);
    const Location at = node_.location_of(kv.first);
    node_.context().error(at, node_.child_path(key),
                          hint ? fmt::format("unknown key (did you mean '{}'?)", *hint) : std::string("unknown key"));
  }
}

std::vector<std::string> MapReader::take_unread_keys() {
  std::vector<std::string> unread;
  if (!valid_) return unread;
  for (const auto& kv : node_.yaml()) {
    const std::string key = kv.first.Scalar();
    if (std::find(asked_.begin(), asked_.end(), key) != asked_.end()) continue;
    if (std::find(kDocumentationKeys.begin(), kDocumentationKeys.end(), key) != kDocumentationKeys.end()) continue;
    unread.push_back(key);
  }
  asked_.insert(asked_.end(), unread.begin(), unread.end());
  return unread;
}

bool MapReader::has(std::string_view key) {
  if (std::find(asked_.begin(), asked_.end(), key) == asked_.end()) asked_.emplace_back(key);
  return valid_ &&
         (node_.yaml()[std::string(key)].IsDefined() || node_.context().has_override_under(node_.child_path(key)));
}

std::optional<Node> MapReader::lookup(std::string_view key) {
  if (std::find(asked_.begin(), asked_.end(), key) == asked_.end()) asked_.emplace_back(key);
  if (!valid_) return std::nullopt;
  const YAML::Node& map = node_.yaml();
  const YAML::Node found = map[std::string(key)];
  return node_.context().resolve(node_, key, found.IsDefined() ? &found : nullptr);
}

std::optional<Node> MapReader::child(std::string_view key) {
  auto c = lookup(key);
  if (c && c->broken()) return std::nullopt;  // a failed !include: already reported
  return c;
}

std::optional<Node> MapReader::required_child(std::string_view key, std::string_view expected) {
  auto c = lookup(key);
  if (!c && valid_) {
    node_.context().error(node_.location(), node_.child_path(key),
                          fmt::format("missing required key (expected {})", expected));
  }
  if (c && c->broken()) return std::nullopt;
  return c;
}

Located<std::string> MapReader::choice(std::string_view key, const std::vector<std::string>& choices,
                                       std::optional<std::string> fallback) {
  Located<std::string> out{fallback.value_or(""), node_.location()};
  const std::string expected = fmt::format("one of {{{}}}", fmt::join(choices, ", "));
  auto c = fallback ? child(key) : required_child(key, expected);
  if (!c) return out;
  out.loc = c->location();
  auto v = c->as<std::string>();
  if (!v) return out;
  if (std::find(choices.begin(), choices.end(), *v) == choices.end()) {
    const auto hint = did_you_mean(*v, choices);
    node_.context().error(c->location(), c->path(),
                          fmt::format("expected {}, got \"{}\"{}", expected, *v,
                                      hint ? fmt::format(" (did you mean '{}'?)", *hint) : std::string()));
    return out;
  }
  out.value = *v;
  out.valid = true;
  return out;
}

}  // namespace offsim::sim::config
