// The one logging facility of failoverd: one line per record on stderr, plain
// text or JSON lines. The engine never logs; it returns events and the service
// layer logs them.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"

namespace failover::log {

enum class Level { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3 };

// Parses "debug", "info", "warn", "error".
bool ParseLevel(absl::string_view text, Level* out);

void Configure(Level min_level, bool json);
bool Enabled(Level level);

using Fields = std::vector<std::pair<std::string, std::string>>;

// Writes `message` with optional key=value fields (JSON: extra members).
void Write(Level level, absl::string_view message, const Fields& fields = {});

inline void Info(absl::string_view m, const Fields& f = {}) { Write(Level::kInfo, m, f); }
inline void Warn(absl::string_view m, const Fields& f = {}) { Write(Level::kWarn, m, f); }
inline void Error(absl::string_view m, const Fields& f = {}) { Write(Level::kError, m, f); }
inline void Debug(absl::string_view m, const Fields& f = {}) {
  if (Enabled(Level::kDebug)) Write(Level::kDebug, m, f);
}

}  // namespace failover::log
