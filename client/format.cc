#include "client/format.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "google/protobuf/util/json_util.h"
#include "yaml-cpp/yaml.h"

namespace failover::client {

std::string ToJson(const google::protobuf::Message& m, bool multiline) {
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = multiline;
  // Canonical lowerCamelCase names, as the HTTP API answers: one set of keys
  // for scripts whichever they call.
  options.always_print_primitive_fields = true;
  std::string out;
  (void)google::protobuf::util::MessageToJsonString(m, &out, options);
  return out;
}

namespace {
// JSON loads as flow style; people read block style.
void Block(YAML::Node node) {
  node.SetStyle(YAML::EmitterStyle::Block);
  if (node.IsMap()) {
    for (auto kv : node) Block(kv.second);
  } else if (node.IsSequence()) {
    for (auto item : node) Block(item);
  }
}
}  // namespace

std::string ToYaml(const google::protobuf::Message& m) {
  YAML::Node node = YAML::Load(ToJson(m, false));
  Block(node);
  YAML::Emitter out;
  out << node;
  return std::string(out.c_str()) + "\n";
}

std::string Table(const std::vector<std::string>& header, const std::vector<std::vector<std::string>>& rows,
                  size_t max_cell) {
  auto cut = [&](const std::string& s) { return s.size() <= max_cell ? s : s.substr(0, max_cell - 3) + "..."; };
  std::vector<size_t> width(header.size());
  for (size_t c = 0; c < header.size(); ++c) width[c] = header[c].size();
  for (const auto& row : rows) {
    for (size_t c = 0; c < row.size() && c < width.size(); ++c) width[c] = std::max(width[c], cut(row[c]).size());
  }
  std::string out;
  auto line = [&](const std::vector<std::string>& cells) {
    std::string l;
    for (size_t c = 0; c < width.size(); ++c) {
      const std::string cell = c < cells.size() ? cut(cells[c]) : "";
      l += cell;
      if (c + 1 < width.size()) l += std::string(width[c] - cell.size() + 2, ' ');
    }
    while (!l.empty() && l.back() == ' ') l.pop_back();
    out += l + "\n";
  };
  line(header);
  for (const auto& row : rows) line(row);
  return out;
}

std::string Ago(const google::protobuf::Timestamp& t, absl::Time now) {
  if (t.seconds() == 0 && t.nanos() == 0) return "-";
  absl::Duration d = now - (absl::FromUnixSeconds(t.seconds()) + absl::Nanoseconds(t.nanos()));
  if (d < absl::Seconds(1)) return "now";
  return absl::StrCat(absl::FormatDuration(absl::Trunc(d, absl::Seconds(1))), " ago");
}

}  // namespace failover::client
