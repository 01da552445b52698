// Helpers shared by the benchmark programs that drive a real failoverd.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <sstream>
#include <memory>
#include <string>
#include <vector>

#include "tests/support/failoverd_process.h"

namespace failover::bench {

// The p-th quantile (0..1) of `v`; -1 when empty.
inline double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return -1;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())))];
}

// User + system CPU seconds a process has used.
inline double CpuSeconds(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // Fields after the command name (which may hold spaces) start after the last ')'.
  std::istringstream fields(stat.substr(stat.rfind(')') + 2));
  std::string field;
  long utime = 0, stime = 0;
  for (int i = 3; fields >> field; ++i) {
    if (i == 14) utime = std::stol(field);
    if (i == 15) {
      stime = std::stol(field);
      break;
    }
  }
  return static_cast<double>(utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

// Starts failoverd on a fresh data dir with quiet logs; null (and a message) on failure.
inline std::unique_ptr<testing::FailoverdProcess> StartFailoverd(const testing::TempDir& data) {
  auto proc = std::make_unique<testing::FailoverdProcess>(
      testing::FailoverdProcess::Options{data.path(), {"--log-level", "warn"}});
  std::string error;
  if (!proc->Start(&error)) {
    std::fprintf(stderr, "%s\n", error.c_str());
    return nullptr;
  }
  return proc;
}

}  // namespace failover::bench
