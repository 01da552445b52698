// Reads what a caller relayed of an upstream's HTTP error reply (headers and
// body) into the facts the classifier uses (DESIGN 3.5): the provider's own
// error code, its message and when its rate limit resets. One reader on the
// server, so callers in every language are classified alike.
#pragma once

#include <map>
#include <optional>
#include <string>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace failover::api {

struct UpstreamErrorFacts {
  // The provider's error code, else its error type, else Google's status
  // ("insufficient_quota", "overloaded_error", "RESOURCE_EXHAUSTED").
  std::string error_code;
  std::string message;  // valid UTF-8, at most 4096 bytes
  // Until the limit resets: Retry-After, Google's RetryInfo, or (on a 429) the
  // providers' reset headers.
  std::optional<absl::Duration> retry_after;
};

// `headers` by lower-case name. `now` is the wall clock, for reset times
// given as dates.
UpstreamErrorFacts ReadUpstreamResponse(uint32_t http_status, const std::map<std::string, std::string>& headers,
                                        absl::string_view body, absl::Time now);

}  // namespace failover::api
