// Build-time tool: configs/defaults.yaml as C++ (the table models/experiment/defaults.cpp reads).
//
// offsim used to compile the YAML in as text and parse it at start: 18 KB took yaml-cpp about 17 M
// instructions (2-3 ms), paid by every process, a tenth of the shipped sweep's serial start
// (issue 35). This tool parses it once, at build time, with the same reader and the same walk
// (every mapping with a `value:` is one default, named by its path), and writes the entries as
// string literals, so the values and sources offsim prints are the same characters.
//   offsim_defaults_table configs/defaults.yaml build/generated/defaults_table.inc
#include <yaml-cpp/yaml.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

namespace {

struct Entry {
  std::string path;
  std::string value;
  std::string source;
};

// As models/experiment/defaults.cpp walked the parsed file.
void collect(const YAML::Node& node, const std::string& path, std::vector<Entry>& out) {
  if (!node.IsMap()) return;
  if (node["value"]) {
    out.push_back({path, node["value"].Scalar(), node["source"] ? node["source"].Scalar() : std::string()});
    return;
  }
  for (const auto& kv : node)
    collect(kv.second, path.empty() ? kv.first.Scalar() : path + "." + kv.first.Scalar(), out);
}

// `text` as a C++ string literal: quotes, backslashes and bytes outside printable ASCII escaped
// (three-digit octal, which no following character can extend).
std::string literal(const std::string& text) {
  std::string out = "\"";
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (byte < 0x20 || byte >= 0x7f) {
      char escaped[8];
      std::snprintf(escaped, sizeof escaped, "\\%03o", static_cast<unsigned>(byte));
      out += escaped;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: offsim_defaults_table DEFAULTS_YAML OUTPUT_INC\n";
    return 2;
  }
  try {
    const YAML::Node root = YAML::LoadFile(argv[1]);
    std::vector<Entry> entries;
    collect(root, "", entries);
    std::string text = "// Generated from configs/defaults.yaml by apps/defaults_table at build time: do not edit.\n";
    text += "constexpr DefaultEntry kEntries[] = {\n";
    for (const auto& e : entries) {
      text += "    {" + literal(e.path) + ", " + literal(e.value) + ", " + literal(e.source) + "},\n";
    }
    text += "};\n";
    text += "constexpr std::string_view kDeepSpeedVersion = " + literal(root["deepspeed"]["version"].Scalar()) + ";\n";
    text += "constexpr std::string_view kDeepSpeedRuntimes[] = {\n";
    for (const auto& kv : root["deepspeed_runtimes"]) text += "    " + literal(kv.first.Scalar()) + ",\n";
    text += "};\n";
    std::ofstream out(argv[2], std::ios::binary | std::ios::trunc);
    out << text;
    out.close();
    if (!out) {
      std::cerr << "offsim_defaults_table: cannot write " << argv[2] << "\n";
      return 1;
    }
  } catch (const std::exception& e) {
    std::cerr << "offsim_defaults_table: " << argv[1] << ": " << e.what() << "\n";
    return 1;
  }
  return 0;
}
