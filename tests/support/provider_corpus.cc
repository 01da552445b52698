#include "tests/support/provider_corpus.h"

#include <fstream>
#include <iostream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"

namespace failover::testing {
namespace {

using google::protobuf::Value;

[[noreturn]] void Broken(const std::string& why) {
  std::cerr << "tests/data/provider_errors.json: " << why << "\n";
  std::abort();
}

std::string Render(const std::string& value, absl::Time now) {
  const size_t open = value.find("{{now+");
  if (open == std::string::npos) return value;
  const size_t colon = value.find(':', open);
  const size_t close = value.find("}}", open);
  if (colon == std::string::npos || close == std::string::npos) Broken("bad placeholder " + value);
  absl::Duration d;
  if (!absl::ParseDuration(value.substr(open + 6, colon - open - 6), &d)) Broken("bad duration in " + value);
  const std::string format = value.substr(colon + 1, close - colon - 1);
  const absl::Time at = now + d;
  std::string rendered;
  if (format == "http") {
    rendered = absl::FormatTime("%a, %d %b %Y %H:%M:%S GMT", at, absl::UTCTimeZone());
  } else if (format == "rfc3339") {
    rendered = absl::FormatTime(absl::RFC3339_sec, at, absl::UTCTimeZone());
  } else if (format == "epoch_ms") {
    rendered = absl::StrCat(absl::ToUnixMillis(at));
  } else {
    Broken("unknown format in " + value);
  }
  return value.substr(0, open) + rendered + value.substr(close + 2);
}

std::optional<absl::Duration> DurationField(const google::protobuf::Struct& s, const char* name) {
  auto it = s.fields().find(name);
  if (it == s.fields().end()) return std::nullopt;
  absl::Duration d;
  if (!absl::ParseDuration(it->second.string_value(), &d)) Broken(absl::StrCat("bad ", name));
  return d;
}

}  // namespace

std::vector<ProviderErrorCase> LoadProviderErrors(absl::Time now) {
  std::ifstream in(PROVIDER_ERRORS_JSON);
  std::stringstream text;
  text << in.rdbuf();
  google::protobuf::Struct doc;
  if (!google::protobuf::util::JsonStringToMessage(text.str(), &doc).ok()) Broken("does not parse");
  std::vector<ProviderErrorCase> out;
  for (const Value& v : doc.fields().at("cases").list_value().values()) {
    const auto& f = v.struct_value().fields();
    ProviderErrorCase c;
    c.name = f.at("name").string_value();
    c.provider = f.at("provider").string_value();
    c.status = static_cast<uint32_t>(f.at("status").number_value());
    for (const auto& [name, value] : f.at("headers").struct_value().fields()) {
      c.headers.emplace_back(name, Render(value.string_value(), now));
    }
    if (auto it = f.find("body_text"); it != f.end()) {
      c.body = it->second.string_value();
    } else {
      google::protobuf::util::MessageToJsonString(f.at("body"), &c.body);
    }
    const google::protobuf::Struct& e = f.at("expect").struct_value();
    c.reason = e.fields().at("reason").string_value();
    c.verdict = e.fields().at("verdict").string_value();
    c.counted = e.fields().at("counted").bool_value();
    c.health = e.fields().at("health").string_value();
    c.hold = DurationField(e, "hold");
    c.down_for = DurationField(e, "down_for");
    out.push_back(std::move(c));
  }
  if (out.empty()) Broken("no cases");
  return out;
}

}  // namespace failover::testing
