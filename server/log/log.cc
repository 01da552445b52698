#include "server/log/log.h"

#include <atomic>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "common/json_string.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace failover::log {
namespace {

std::atomic<int> g_min_level{static_cast<int>(Level::kInfo)};
std::atomic<bool> g_json{false};
absl::Mutex g_write_mu;

const char* LevelName(Level l) {
  switch (l) {
    case Level::kDebug: return "debug";
    case Level::kInfo: return "info";
    case Level::kWarn: return "warn";
    case Level::kError: return "error";
  }
  return "info";
}

}  // namespace

bool ParseLevel(absl::string_view text, Level* out) {
  for (Level l : {Level::kDebug, Level::kInfo, Level::kWarn, Level::kError}) {
    if (text == LevelName(l)) {
      *out = l;
      return true;
    }
  }
  return false;
}

void Configure(Level min_level, bool json) {
  g_min_level.store(static_cast<int>(min_level));
  g_json.store(json);
}

bool Enabled(Level level) { return static_cast<int>(level) >= g_min_level.load(); }

bool JsonLines() { return g_json.load(); }

void Write(Level level, absl::string_view message, const Fields& fields) {
  if (!Enabled(level)) return;
  const std::string ts = absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", absl::Now(), absl::UTCTimeZone());
  std::string line;
  if (g_json.load()) {
    line = absl::StrCat("{\"time\":\"", ts, "\",\"level\":\"", LevelName(level),
                        "\",\"msg\":", JsonString(message));
    for (const Field& f : fields) {
      absl::StrAppend(&line, ",", JsonString(f.key), ":", f.number ? f.value : JsonString(f.value));
    }
    line += "}\n";
  } else {
    line = absl::StrCat(ts, " ", LevelName(level), " ", message);
    for (const Field& f : fields) absl::StrAppend(&line, " ", f.key, "=", f.value);
    line += "\n";
  }
  absl::MutexLock lock(&g_write_mu);
  std::fwrite(line.data(), 1, line.size(), stderr);
  std::fflush(stderr);
}

}  // namespace failover::log
