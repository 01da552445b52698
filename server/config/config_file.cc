#include "server/config/config_file.h"

#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"
#include "common/utf8.h"
#include "yaml-cpp/yaml.h"

namespace failover::config {
namespace {

namespace fs = std::filesystem;

// The position and field path of one YAML node, for error messages.
struct Where {
  const std::string& file;
  std::string path;
  int line;
  int first_line = 0;  // of the document in its file: yaml-cpp counts from each document's start
};

absl::Status Error(const Where& w, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(w.file, ":", w.line, ": ", w.path, ": ", what));
}

Where At(const Where& parent, const YAML::Node& node, absl::string_view field) {
  return Where{parent.file, parent.path.empty() ? std::string(field) : absl::StrCat(parent.path, ".", field),
               node.Mark().line >= 0 ? parent.first_line + node.Mark().line + 1 : parent.line, parent.first_line};
}

std::string Show(const YAML::Node& node) {
  if (node.IsScalar()) return absl::StrCat("\"", node.Scalar(), "\"");
  if (node.IsSequence()) return "a list";
  if (node.IsMap()) return "a map";
  return "nothing";
}

// A map key: YAML allows a list or a map as a key (`? - a`); a config never does.
absl::StatusOr<std::string> Key(const Where& w, const YAML::Node& key) {
  if (!key.IsScalar()) return Error(At(w, key, "(key)"), absl::StrCat("keys must be plain words, got ", Show(key)));
  if (!IsValidUtf8(key.Scalar())) return Error(At(w, key, "(key)"), "is not valid UTF-8");
  return key.Scalar();
}

absl::Status CheckKeys(const Where& w, const YAML::Node& map, std::initializer_list<const char*> allowed) {
  if (!map.IsMap()) return Error(w, absl::StrCat("must be a map, got ", Show(map)));
  for (const auto& kv : map) {
    ASSIGN_OR_RETURN(const std::string key, Key(w, kv.first));
    if (std::find_if(allowed.begin(), allowed.end(), [&](const char* a) { return key == a; }) == allowed.end()) {
      return Error(At(w, kv.first, key), "unknown field");
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> String(const Where& w, const YAML::Node& n) {
  if (!n.IsScalar()) return Error(w, absl::StrCat("must be a string, got ", Show(n)));
  // A UTF-8 file can still spell a string that is not UTF-8 with an escape
  // ("\uD800" is half a surrogate pair).
  if (!IsValidUtf8(n.Scalar())) return Error(w, "is not valid UTF-8 (an escape that is not a character?)");
  return n.Scalar();
}

absl::StatusOr<bool> Bool(const Where& w, const YAML::Node& n) {
  bool v = false;
  if (!n.IsScalar() || !YAML::convert<bool>::decode(n, v)) {
    return Error(w, absl::StrCat("must be true or false, got ", Show(n)));
  }
  return v;
}

absl::StatusOr<uint64_t> Unsigned(const Where& w, const YAML::Node& n, uint64_t max) {
  uint64_t v = 0;
  if (!n.IsScalar() || !absl::SimpleAtoi(n.Scalar(), &v) || v > max) {
    return Error(w, absl::StrCat("must be a whole number 0..", max, ", got ", Show(n)));
  }
  return v;
}

absl::StatusOr<double> Number(const Where& w, const YAML::Node& n) {
  double v = 0;
  if (!n.IsScalar() || !absl::SimpleAtod(n.Scalar(), &v)) return Error(w, absl::StrCat("must be a number, got ", Show(n)));
  return v;
}

absl::StatusOr<absl::Duration> Duration(const Where& w, const YAML::Node& n) {
  absl::Duration d;
  if (!n.IsScalar() || !absl::ParseDuration(n.Scalar(), &d)) {
    return Error(w, absl::StrCat("must be a duration such as \"15s\", \"1m\" or \"500ms\", got ", Show(n)));
  }
  return d;
}

absl::StatusOr<std::vector<std::string>> Strings(const Where& w, const YAML::Node& n) {
  if (!n.IsSequence()) return Error(w, absl::StrCat("must be a list, got ", Show(n)));
  std::vector<std::string> out;
  for (size_t i = 0; i < n.size(); ++i) {
    ASSIGN_OR_RETURN(std::string s, String(At(w, n[i], absl::StrCat("[", i, "]")), n[i]));
    out.push_back(std::move(s));
  }
  return out;
}

// Runs `read` when `key` is present in `map`.
template <typename F>
absl::Status Field(const Where& w, const YAML::Node& map, const char* key, F read) {
  const YAML::Node n = map[key];
  if (!n) return absl::OkStatus();
  return read(At(w, n, key), n);
}

absl::StatusOr<uint32_t> Unsigned32(const Where& w, const YAML::Node& n) {
  ASSIGN_OR_RETURN(uint64_t v, Unsigned(w, n, 1u << 30));
  return static_cast<uint32_t>(v);
}

// Reads `key` of `map` with `parse` into `*out` when present.
template <typename T, typename Parse>
absl::Status Read(const Where& w, const YAML::Node& map, const char* key, T* out, Parse parse) {
  return Field(w, map, key, [&](const Where& x, const YAML::Node& v) -> absl::Status {
    ASSIGN_OR_RETURN(*out, parse(x, v));
    return absl::OkStatus();
  });
}

// The settings `n` gives, over `base` (the rest keep base's values).
absl::StatusOr<Policy> ParsePolicyOver(const Where& w, const YAML::Node& n, const Policy& base) {
  Policy p = base;
  RETURN_IF_ERROR(CheckKeys(w, n, {"probe", "trip", "recovery", "backoff", "rate_limit", "max_attempts",
                                   "max_replay_bytes", "retry_on_statuses", "retry_on_errors",
                                   "same_target_retries", "least_latency", "retry_budget", "hedge"}));
  RETURN_IF_ERROR(Field(w, n, "hedge", [&](const Where& pw, const YAML::Node& m) -> absl::Status {
    RETURN_IF_ERROR(CheckKeys(pw, m, {"after"}));
    return Read(pw, m, "after", &p.hedge_after, Duration);
  }));
  RETURN_IF_ERROR(Field(w, n, "retry_budget", [&](const Where& pw, const YAML::Node& m) -> absl::Status {
    RETURN_IF_ERROR(CheckKeys(pw, m, {"ratio", "min_per_second"}));
    RETURN_IF_ERROR(Read(pw, m, "ratio", &p.retry_budget_ratio, Number));
    return Read(pw, m, "min_per_second", &p.retry_budget_min_per_second, Number);
  }));
  RETURN_IF_ERROR(Field(w, n, "least_latency", [&](const Where& pw, const YAML::Node& m) -> absl::Status {
    RETURN_IF_ERROR(CheckKeys(pw, m, {"explore"}));
    return Read(pw, m, "explore", &p.latency_explore, Number);
  }));
  RETURN_IF_ERROR(Field(w, n, "probe", [&](const Where& pw, const YAML::Node& m) -> absl::Status {
    RETURN_IF_ERROR(CheckKeys(pw, m, {"interval", "timeout"}));
    RETURN_IF_ERROR(Read(pw, m, "interval", &p.probe_interval, Duration));
    return Read(pw, m, "timeout", &p.probe_timeout, Duration);
  }));
  RETURN_IF_ERROR(Field(w, n, "trip", [&](const Where& pw, const YAML::Node& m) -> absl::Status {
    RETURN_IF_ERROR(CheckKeys(pw, m, {"errors", "window", "failure_rate", "min_calls", "slow_call"}));
    RETURN_IF_ERROR(Read(pw, m, "failure_rate", &p.trip_failure_rate, Number));
    RETURN_IF_ERROR(Read(pw, m, "min_calls", &p.trip_min_calls, Unsigned32));
    RETURN_IF_ERROR(Field(pw, m, "slow_call", [&](const Where& sw, const YAML::Node& s) -> absl::Status {
      RETURN_IF_ERROR(CheckKeys(sw, s, {"duration", "rate"}));
      RETURN_IF_ERROR(Read(sw, s, "duration", &p.trip_slow_call_duration, Duration));
      return Read(sw, s, "rate", &p.trip_slow_call_rate, Number);
    }));
    // A rate alone trips the target; trip.errors counts only when given.
    if (p.HasRateTrip() && !m["errors"]) p.trip_errors = 0;
    RETURN_IF_ERROR(Read(pw, m, "errors", &p.trip_errors, Unsigned32));
    return Read(pw, m, "window", &p.trip_window, Duration);
  }));
  RETURN_IF_ERROR(Field(w, n, "recovery", [&](const Where& pw, const YAML::Node& m) -> absl::Status {
    RETURN_IF_ERROR(CheckKeys(pw, m, {"probes", "min_dwell"}));
    RETURN_IF_ERROR(Read(pw, m, "probes", &p.recovery_probes, Unsigned32));
    return Read(pw, m, "min_dwell", &p.recovery_min_dwell, Duration);
  }));
  RETURN_IF_ERROR(Field(w, n, "backoff", [&](const Where& pw, const YAML::Node& m) -> absl::Status {
    RETURN_IF_ERROR(CheckKeys(pw, m, {"factor", "steps", "max", "reset_after"}));
    RETURN_IF_ERROR(Read(pw, m, "factor", &p.backoff_factor, Number));
    RETURN_IF_ERROR(Read(pw, m, "steps", &p.backoff_steps, Unsigned32));
    RETURN_IF_ERROR(Read(pw, m, "max", &p.backoff_max, Duration));
    return Read(pw, m, "reset_after", &p.backoff_reset_after, Duration);
  }));
  RETURN_IF_ERROR(Field(w, n, "rate_limit", [&](const Where& pw, const YAML::Node& m) -> absl::Status {
    RETURN_IF_ERROR(CheckKeys(pw, m, {"on", "hold", "max_hold"}));
    RETURN_IF_ERROR(Field(pw, m, "on", [&](const Where& x, const YAML::Node& v) -> absl::Status {
      ASSIGN_OR_RETURN(std::string mode, String(x, v));
      if (mode == "failover") {
        p.rate_limit_on = RateLimitMode::kFailover;
      } else if (mode == "wait") {
        p.rate_limit_on = RateLimitMode::kWait;
      } else {
        return Error(x, absl::StrCat("must be failover or wait, got \"", mode, "\""));
      }
      return absl::OkStatus();
    }));
    RETURN_IF_ERROR(Read(pw, m, "hold", &p.rate_limit_hold, Duration));
    return Read(pw, m, "max_hold", &p.rate_limit_max_hold, Duration);
  }));
  RETURN_IF_ERROR(Read(w, n, "max_attempts", &p.max_attempts, Unsigned32));
  RETURN_IF_ERROR(Field(w, n, "max_replay_bytes", [&](const Where& x, const YAML::Node& v) -> absl::Status {
    ASSIGN_OR_RETURN(p.max_replay_bytes, Unsigned(x, v, UINT64_MAX));
    return absl::OkStatus();
  }));
  RETURN_IF_ERROR(Read(w, n, "retry_on_statuses", &p.retry_on_statuses, Strings));
  RETURN_IF_ERROR(Read(w, n, "retry_on_errors", &p.retry_on_errors, Strings));
  RETURN_IF_ERROR(Field(w, n, "same_target_retries", [&](const Where& x, const YAML::Node& v) -> absl::Status {
    if (!v.IsMap()) return Error(x, absl::StrCat("must be a map of reason: retries, got ", Show(v)));
    for (const auto& kv : v) {
      ASSIGN_OR_RETURN(const std::string name, Key(x, kv.first));
      const Where at = At(x, kv.first, name);
      Reason reason;
      if (!ParseReason(name, &reason)) return Error(at, "unknown reason");
      ASSIGN_OR_RETURN(uint64_t retries, Unsigned(at, kv.second, 1u << 30));
      p.same_target_retries[reason] = static_cast<uint32_t>(retries);
    }
    return absl::OkStatus();
  }));
  return p;
}

absl::StatusOr<Policy> ParsePolicy(const Where& w, const YAML::Node& n) { return ParsePolicyOver(w, n, Policy()); }

// A target's own health settings: the health keys of a chain policy, read the
// same way.
absl::StatusOr<std::optional<HealthPolicy>> ParseHealthPolicy(const Where& w, const YAML::Node& n) {
  RETURN_IF_ERROR(CheckKeys(w, n, {"probe", "trip", "recovery", "backoff", "rate_limit"}));
  const YAML::Node rate_limit = n["rate_limit"];
  if (rate_limit && rate_limit.IsMap() && rate_limit["on"]) {
    return Error(At(At(w, rate_limit, "rate_limit"), rate_limit["on"], "on"),
                 "is a chain setting (set it in the chain's policy); a target sets only rate_limit.hold");
  }
  ASSIGN_OR_RETURN(Policy p, ParsePolicy(w, n));
  return HealthPolicy::Of(p);
}

absl::StatusOr<TargetConfig> ParseTarget(const Where& w, const YAML::Node& n) {
  RETURN_IF_ERROR(CheckKeys(w, n, {"name", "kind", "upstream_model", "warm", "weight", "cost", "timeout",
                                   "max_retries", "limits", "labels", "enabled", "health"}));
  TargetConfig t;
  t.managed_by = w.file;
  if (!n["name"]) return Error(w, "name is required");
  ASSIGN_OR_RETURN(t.name, String(At(w, n["name"], "name"), n["name"]));
  RETURN_IF_ERROR(Field(w, n, "kind", [&](const Where& x, const YAML::Node& v) -> absl::Status {
    ASSIGN_OR_RETURN(std::string kind, String(x, v));
    if (kind == "remote") {
      t.kind = TargetKind::kRemote;
    } else if (kind == "local") {
      t.kind = TargetKind::kLocal;
    } else {
      return Error(x, absl::StrCat("must be remote or local, got \"", kind, "\""));
    }
    return absl::OkStatus();
  }));
  RETURN_IF_ERROR(Read(w, n, "upstream_model", &t.upstream_model, String));
  RETURN_IF_ERROR(Read(w, n, "warm", &t.warm, Bool));
  RETURN_IF_ERROR(Read(w, n, "weight", &t.weight, Unsigned32));
  RETURN_IF_ERROR(Read(w, n, "cost", &t.cost, Number));
  RETURN_IF_ERROR(Read(w, n, "timeout", &t.timeout, Duration));
  RETURN_IF_ERROR(Read(w, n, "max_retries", &t.max_retries, Unsigned32));
  RETURN_IF_ERROR(Field(w, n, "limits", [&](const Where& x, const YAML::Node& v) -> absl::Status {
    RETURN_IF_ERROR(CheckKeys(x, v, {"rpm"}));
    return Read(x, v, "rpm", &t.limit_rpm, Unsigned32);
  }));
  RETURN_IF_ERROR(Field(w, n, "labels", [&](const Where& x, const YAML::Node& v) -> absl::Status {
    if (!v.IsMap()) return Error(x, absl::StrCat("must be a map of strings, got ", Show(v)));
    for (const auto& kv : v) {
      ASSIGN_OR_RETURN(const std::string key, Key(x, kv.first));
      ASSIGN_OR_RETURN(t.labels[key], String(At(x, kv.second, key), kv.second));
    }
    return absl::OkStatus();
  }));
  RETURN_IF_ERROR(Read(w, n, "enabled", &t.enabled, Bool));
  RETURN_IF_ERROR(Read(w, n, "health", &t.health, ParseHealthPolicy));
  return t;
}

absl::StatusOr<ChainConfig> ParseChain(const Where& w, const YAML::Node& n) {
  RETURN_IF_ERROR(CheckKeys(w, n, {"name", "targets", "strategy", "policy", "failover_enabled", "shadow"}));
  ChainConfig c;
  c.managed_by = w.file;
  if (!n["name"]) return Error(w, "name is required");
  ASSIGN_OR_RETURN(c.name, String(At(w, n["name"], "name"), n["name"]));
  if (!n["targets"]) return Error(w, "targets is required");
  ASSIGN_OR_RETURN(c.targets, Strings(At(w, n["targets"], "targets"), n["targets"]));
  RETURN_IF_ERROR(Field(w, n, "strategy", [&](const Where& x, const YAML::Node& v) -> absl::Status {
    ASSIGN_OR_RETURN(std::string s, String(x, v));
    if (s == "failover") {
      c.strategy = Strategy::kFailover;
    } else if (s == "round_robin") {
      c.strategy = Strategy::kRoundRobin;
    } else if (s == "lowest_cost") {
      c.strategy = Strategy::kLowestCost;
    } else if (s == "least_latency") {
      c.strategy = Strategy::kLeastLatency;
    } else {
      return Error(x, absl::StrCat("must be failover, round_robin, lowest_cost or least_latency, got \"", s, "\""));
    }
    return absl::OkStatus();
  }));
  RETURN_IF_ERROR(Read(w, n, "policy", &c.policy, ParsePolicy));
  RETURN_IF_ERROR(Read(w, n, "failover_enabled", &c.failover_enabled, Bool));
  // Each shadow policy is a whole policy, as under `policy:` (what it leaves
  // out takes the defaults, not the chain's settings).
  RETURN_IF_ERROR(Field(w, n, "shadow", [&](const Where& sw, const YAML::Node& list) -> absl::Status {
    if (!list.IsSequence()) return Error(sw, absl::StrCat("must be a list of {name, policy}, got ", Show(list)));
    for (size_t i = 0; i < list.size(); ++i) {
      const Where x = At(w, list[i], absl::StrCat("shadow[", i, "]"));
      RETURN_IF_ERROR(CheckKeys(x, list[i], {"name", "policy"}));
      ShadowPolicy& s = c.shadows.emplace_back();
      if (!list[i]["name"]) return Error(x, "name is required");
      ASSIGN_OR_RETURN(s.name, String(At(x, list[i]["name"], "name"), list[i]["name"]));
      RETURN_IF_ERROR(Read(x, list[i], "policy", &s.policy, ParsePolicy));
    }
    return absl::OkStatus();
  }));
  return c;
}

absl::Status ParseDocument(const YAML::Node& doc, const std::string& file, int first_line, LoadedConfig* out) {
  const Where root{file, "", first_line + doc.Mark().line + 1, first_line};
  RETURN_IF_ERROR(CheckKeys(root, doc, {"targets", "chains"}));
  if (const YAML::Node targets = doc["targets"]) {
    if (!targets.IsSequence()) return Error(At(root, targets, "targets"), "must be a list");
    for (size_t i = 0; i < targets.size(); ++i) {
      const Where w = At(root, targets[i], absl::StrCat("targets[", i, "]"));
      ASSIGN_OR_RETURN(TargetConfig t, ParseTarget(w, targets[i]));
      out->change.targets.push_back(std::move(t));
      out->target_origins.push_back(Origin{file, w.line});
    }
  }
  if (const YAML::Node chains = doc["chains"]) {
    if (!chains.IsSequence()) return Error(At(root, chains, "chains"), "must be a list");
    for (size_t i = 0; i < chains.size(); ++i) {
      const Where w = At(root, chains[i], absl::StrCat("chains[", i, "]"));
      ASSIGN_OR_RETURN(ChainConfig c, ParseChain(w, chains[i]));
      out->change.chains.push_back(std::move(c));
      out->chain_origins.push_back(Origin{file, w.line});
    }
  }
  return absl::OkStatus();
}

// One YAML document of a file: its text and the 0-based line it starts on.
struct Document {
  std::string text;
  int first_line = 0;
  int first_content_line = -1;  // 1-based line of the first line that is not blank, a comment or a marker
};

// Splits at "---" lines. yaml-cpp's own LoadAll can loop forever, allocating,
// on a document it cannot parse (a line that starts with ','; yaml-cpp issue
// 1040, fixed after the 0.7 Debian ships), so each document is loaded alone.
std::vector<Document> SplitDocuments(const std::string& text) {
  std::vector<Document> docs(1);
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    const bool marker = line == "---" || absl::StartsWith(line, "--- ") || absl::StartsWith(line, "---\t");
    if (marker && line_number > 0) docs.push_back(Document{"", line_number});
    Document& doc = docs.back();
    absl::StrAppend(&doc.text, line, "\n");
    const absl::string_view stripped = absl::StripLeadingAsciiWhitespace(line);
    if (doc.first_content_line < 0 && !marker && !stripped.empty() && stripped[0] != '#' && stripped != "...") {
      doc.first_content_line = line_number + 1;
    }
    ++line_number;
  }
  return docs;
}

// Most nodes one document may expand to. YAML aliases let a few hundred bytes
// stand for millions of nodes; a config has at most a few hundred thousand.
constexpr size_t kMaxNodes = 2'000'000;

// Most bytes of scalars (keys and values) one document may expand to: an
// alias of one long label repeated a hundred thousand times is a few hundred
// KB of file and hundreds of GB once expanded. The largest real configs (a
// hundred thousand objects) expand to a few tens of MB.
constexpr size_t kMaxExpandedBytes = 64 << 20;

// Deepest nesting a document may have: a config nests a few levels; an alias
// that refers to itself would nest forever.
constexpr int kMaxDepth = 64;

// What one document may expand to, spent while walking it.
struct ExpansionBudget {
  size_t nodes = kMaxNodes;
  size_t bytes = kMaxExpandedBytes;
};

// Walks `node` as the parser will, aliases expanded, spending `budget`
// (nodes, and scalar bytes, read in place: nothing is copied); false once
// either runs out or the nesting passes kMaxDepth.
bool WithinBudget(const YAML::Node& node, ExpansionBudget* budget, int depth = 0) {
  if (budget->nodes == 0 || depth > kMaxDepth) return false;
  --budget->nodes;
  if (node.IsMap()) {
    for (const auto& kv : node) {
      if (!WithinBudget(kv.first, budget, depth + 1) || !WithinBudget(kv.second, budget, depth + 1)) return false;
    }
  } else if (node.IsSequence()) {
    for (const auto& item : node) {
      if (!WithinBudget(item, budget, depth + 1)) return false;
    }
  } else if (node.IsScalar()) {
    const size_t size = node.Scalar().size();
    if (size > budget->bytes) return false;
    budget->bytes -= size;
  }
  return true;
}

// The line and column (1-based) of the first byte that is not UTF-8, if any.
bool FindInvalidUtf8(const std::string& text, int* line, int* column) {
  const size_t at = FirstInvalidUtf8(text);
  if (at == std::string::npos) return false;
  const size_t line_start = text.rfind('\n', at == 0 ? 0 : at - 1);
  *line = 1 + static_cast<int>(std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(at), '\n'));
  *column = static_cast<int>(at - (line_start == std::string::npos || at == 0 ? 0 : line_start + 1)) + 1;
  return true;
}

// Every string failoverd stores and sends must be UTF-8 (proto3 strings): a
// Latin-1 byte in a label would make every response carrying it unreadable.
absl::Status CheckUtf8(const std::string& text, const std::string& file) {
  int bad_line = 0, bad_column = 0;
  if (!FindInvalidUtf8(text, &bad_line, &bad_column)) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(file, ":", bad_line, ": column ", bad_column, ": not valid UTF-8 (save the file as UTF-8)"));
}

// One YAML document, whose first line is line `first_line` + 1 of `file`.
absl::StatusOr<YAML::Node> LoadYaml(const std::string& text, const std::string& file, int first_line) {
  try {
    return YAML::Load(text);
  } catch (const YAML::ParserException& e) {
    return absl::InvalidArgumentError(
        absl::StrCat(file, ":", first_line + e.mark.line + 1, ": not valid YAML: ", e.msg));
  }
}

absl::Status ParseInto(const std::string& text, const std::string& file, LoadedConfig* out) {
  RETURN_IF_ERROR(CheckUtf8(text, file));
  bool declares = false;
  for (const Document& part : SplitDocuments(text)) {
    ASSIGN_OR_RETURN(YAML::Node doc, LoadYaml(part.text, file, part.first_line));
    if (!doc || doc.IsNull()) {
      // yaml-cpp gives up on some malformed documents by returning null; a
      // document with content must not be taken as empty (that would delete
      // every object the file declared).
      if (part.first_content_line < 0) continue;
      return absl::InvalidArgumentError(absl::StrCat(
          file, ":", part.first_content_line, ": not valid YAML: the document does not parse as a map"));
    }
    ExpansionBudget budget;
    if (!WithinBudget(doc, &budget)) {
      return absl::InvalidArgumentError(absl::StrCat(
          file, ":", part.first_line + 1, ": the document expands to more than ", kMaxNodes, " YAML nodes or ",
          kMaxExpandedBytes >> 20, " MiB of text, or nests deeper than ", kMaxDepth, " levels (aliases?); refusing it"));
    }
    declares = declares || (doc.IsMap() && (doc["targets"] || doc["chains"]));
    try {
      RETURN_IF_ERROR(ParseDocument(doc, file, part.first_line, out));
    } catch (const YAML::Exception& e) {
      // Every access is checked before it is made; this backstop keeps a config
      // file from ever taking failoverd down (the fuzzer found one unchecked).
      return absl::InvalidArgumentError(
          absl::StrCat(file, ":", part.first_line + e.mark.line + 1, ": not a valid config: ", e.msg));
    }
  }
  // An empty file is far more often a half-written one (a ConfigMap caught
  // mid-update) than a wish to delete everything it declared.
  if (!declares) {
    return absl::InvalidArgumentError(absl::StrCat(
        file, ":1: declares nothing (empty, or comments only); to remove every object it declared, say so: "
              "`targets: []`"));
  }
  return absl::OkStatus();
}

std::vector<std::string> ConfigFiles(const std::string& path, absl::Status* error) {
  std::error_code ec;
  std::vector<std::string> files;
  if (fs::is_directory(path, ec)) {
    for (const auto& entry : fs::directory_iterator(path, ec)) {
      const std::string name = entry.path().filename().string();
      const std::string ext = entry.path().extension().string();
      // Kubernetes ConfigMap mounts hold hidden "..data" directories: skip dot files.
      if (name.empty() || name[0] == '.' || (ext != ".yaml" && ext != ".yml")) continue;
      if (fs::is_regular_file(entry.path(), ec)) files.push_back(entry.path().string());
    }
    std::sort(files.begin(), files.end());
  } else if (fs::exists(path, ec)) {
    files.push_back(path);
  } else {
    *error = absl::NotFoundError(absl::StrCat("config path ", path, " does not exist"));
  }
  return files;
}

}  // namespace

absl::StatusOr<Policy> ParsePolicyText(const std::string& text, const std::string& file, const Policy& base) {
  RETURN_IF_ERROR(CheckUtf8(text, file));
  ASSIGN_OR_RETURN(const YAML::Node doc, LoadYaml(text, file, 0));
  ExpansionBudget budget;
  if (!doc || !doc.IsMap() || !WithinBudget(doc, &budget)) {
    return absl::InvalidArgumentError(absl::StrCat(
        file, ":1: must be one map of policy settings (as under a chain's `policy:`), within ", kMaxNodes,
        " YAML nodes"));
  }
  try {
    // The block copied with its `policy:` key reads the same.
    const YAML::Node policy = doc.size() == 1 && doc["policy"] ? doc["policy"] : doc;
    return ParsePolicyOver(Where{file, "policy", 1}, policy, base);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(file, ":", e.mark.line + 1, ": not a valid policy: ", e.msg));
  }
}

absl::StatusOr<LoadedConfig> ParseConfigText(const std::string& text, const std::string& file) {
  LoadedConfig out;
  RETURN_IF_ERROR(ParseInto(text, file, &out));
  out.files.push_back(file);
  return out;
}

absl::StatusOr<LoadedConfig> LoadConfigPath(const std::string& path) {
  return LoadConfigPaths({path});
}

absl::StatusOr<LoadedConfig> LoadConfigPaths(const std::vector<std::string>& paths) {
  LoadedConfig out;
  for (const std::string& path : paths) {
    absl::Status error;
    for (std::string& file : ConfigFiles(path, &error)) {
      // A file named twice (a.yaml and the dir holding it) is read once.
      if (std::find(out.files.begin(), out.files.end(), file) == out.files.end()) out.files.push_back(std::move(file));
    }
    RETURN_IF_ERROR(error);
  }
  for (const std::string& file : out.files) {
    std::ifstream in(file);
    if (!in) return absl::FailedPreconditionError(absl::StrCat(file, ": cannot be read"));
    std::stringstream text;
    text << in.rdbuf();
    RETURN_IF_ERROR(ParseInto(text.str(), file, &out));
  }
  return out;
}

absl::Status Locate(const LoadedConfig& config, const absl::Status& error) {
  const std::string message(error.message());
  for (const auto& [prefix, origins] : {std::make_pair(std::string("targets["), &config.target_origins),
                                        std::make_pair(std::string("chains["), &config.chain_origins)}) {
    if (message.rfind(prefix, 0) != 0) continue;
    size_t index = 0;
    const size_t close = message.find(']');
    if (close == std::string::npos || !absl::SimpleAtoi(message.substr(prefix.size(), close - prefix.size()), &index) ||
        index >= origins->size()) {
      break;
    }
    const Origin& o = (*origins)[index];
    return absl::Status(error.code(), absl::StrCat(o.file, ":", o.line, ": ", message));
  }
  return error;
}

std::string Fingerprint(const std::string& path) {
  absl::Status ignored;
  std::string out;
  for (const std::string& file : ConfigFiles(path, &ignored)) {
    struct stat st {};
    if (stat(file.c_str(), &st) != 0) continue;  // follows symlinks: sees the swapped target
    absl::StrAppend(&out, file, ":", st.st_ino, ":", st.st_size, ":", st.st_mtim.tv_sec, ".", st.st_mtim.tv_nsec, ";");
  }
  return out;
}

}  // namespace failover::config
