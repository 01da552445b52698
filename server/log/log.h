// The one logging facility of failoverd: one line per record on stderr, plain
// text or JSON lines. The engine never logs; it returns events and the service
// layer logs them.
#pragma once

#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace failover::log {

enum class Level { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3 };

// Parses "debug", "info", "warn", "error".
bool ParseLevel(absl::string_view text, Level* out);

void Configure(Level min_level, bool json);
bool Enabled(Level level);
// True when records are JSON lines (callers may then give more fields, for
// machines, than a text line would carry).
bool JsonLines();

// One key=value of a record. Integers stay numbers in JSON lines.
struct Field {
  std::string key;
  std::string value;
  bool number = false;

  Field(std::string k, std::string v) : key(std::move(k)), value(std::move(v)) {}
  Field(std::string k, const char* v) : key(std::move(k)), value(v) {}
  Field(std::string k, absl::string_view v) : key(std::move(k)), value(v) {}
  template <typename N, std::enable_if_t<std::is_integral_v<N> && !std::is_same_v<N, bool>, int> = 0>
  Field(std::string k, N n) : key(std::move(k)), value(absl::StrCat(n)), number(true) {}
};
using Fields = std::vector<Field>;

// Writes `message` with optional key=value fields (JSON: extra members).
void Write(Level level, absl::string_view message, const Fields& fields = {});

inline void Info(absl::string_view m, const Fields& f = {}) { Write(Level::kInfo, m, f); }
inline void Warn(absl::string_view m, const Fields& f = {}) { Write(Level::kWarn, m, f); }
inline void Error(absl::string_view m, const Fields& f = {}) { Write(Level::kError, m, f); }
inline void Debug(absl::string_view m, const Fields& f = {}) {
  if (Enabled(Level::kDebug)) Write(Level::kDebug, m, f);
}

}  // namespace failover::log
