// Turns a raw upstream reply into the Failure to report (DESIGN 3.5). Pass
// what you received; failoverd reads the provider's error code, message and
// reset time from it, the same way for callers in every language.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"
#include "failover/v1/decision.pb.h"

namespace failover::client {

// For an HTTP error reply: the status, the headers that carry reset times
// (Retry-After, x-ratelimit-*, anthropic-ratelimit-*; the others are left
// out) and the body, cut to 16 KiB. Header values that are not UTF-8 are
// repaired, since a proto string must be.
::failover::v1::Failure FailureFromResponse(uint32_t http_status,
                                            const std::vector<std::pair<std::string, std::string>>& headers,
                                            absl::string_view body);

// Whether failoverd wants this header (by name, any case).
bool IsResetHeader(absl::string_view name);

}  // namespace failover::client
