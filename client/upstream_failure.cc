#include "client/upstream_failure.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "common/utf8.h"

namespace failover::client {
namespace {

constexpr size_t kMaxBody = 16 * 1024;
constexpr int kMaxHeaders = 32;
constexpr size_t kMaxHeaderBytes = 1024;

}  // namespace

bool IsResetHeader(absl::string_view name) {
  const std::string lower = absl::AsciiStrToLower(name);
  return lower == "retry-after" || absl::StartsWith(lower, "x-ratelimit-") ||
         absl::StartsWith(lower, "anthropic-ratelimit-");
}

::failover::v1::Failure FailureFromResponse(uint32_t http_status,
                                            const std::vector<std::pair<std::string, std::string>>& headers,
                                            absl::string_view body) {
  ::failover::v1::Failure f;
  f.set_http_status(http_status);
  f.set_phase(::failover::v1::PHASE_BEFORE_RESPONSE);
  auto* response = f.mutable_response();
  for (const auto& [name, value] : headers) {
    if (!IsResetHeader(name) || response->headers_size() >= kMaxHeaders) continue;
    if (name.size() + value.size() > kMaxHeaderBytes) continue;
    (*response->mutable_headers())[absl::AsciiStrToLower(name)] = SanitizeUtf8(value, kMaxHeaderBytes);
  }
  response->set_body(std::string(body.substr(0, kMaxBody)));
  return f;
}

}  // namespace failover::client
