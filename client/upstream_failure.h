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

// For a call that got no HTTP reply: libcurl's result code (a CURLcode, as an
// int, so this library does not need libcurl) and its error text. Connection
// refused, DNS, TLS, timeouts and resets map to their transport errors; a
// transfer cut after the reply began is PHASE_AFTER_FIRST_BYTE when
// `after_first_byte` says data already reached the caller's client. Other
// codes keep only the message.
::failover::v1::Failure FailureFromCurl(int curl_code, absl::string_view message, bool after_first_byte = false);

}  // namespace failover::client
