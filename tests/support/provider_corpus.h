// The corpus of real-shaped provider error replies (tests/data/provider_errors.json)
// for the C++ tests: each case rendered for a given `now`.
#pragma once

#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/time.h"

namespace failover::testing {

struct ProviderErrorCase {
  std::string name;
  std::string provider;
  uint32_t status = 0;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  // Expected, on the first attempt of a chain [a, b] with the default policy.
  std::string reason;   // "billing"
  std::string verdict;  // "TRY_NEXT"
  bool counted = false;
  std::string health;  // "DOWN"
  std::optional<absl::Duration> hold;
  std::optional<absl::Duration> down_for;
};

// Test names show the case's name, not its bytes.
inline void PrintTo(const ProviderErrorCase& c, std::ostream* os) { *os << c.name; }

// Header values "{{now+D:FORMAT}}" become a time D after `now` (FORMAT http,
// rfc3339 or epoch_ms). Aborts the test binary on a malformed corpus.
std::vector<ProviderErrorCase> LoadProviderErrors(absl::Time now);

}  // namespace failover::testing
