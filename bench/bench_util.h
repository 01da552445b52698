// Helpers shared by the benchmark programs that drive a real failoverd.
#pragma once

#include <algorithm>
#include <cstdio>
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
