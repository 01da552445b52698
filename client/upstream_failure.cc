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

::failover::v1::Failure FailureFromCurl(int curl_code, absl::string_view message, bool after_first_byte) {
  namespace v1 = ::failover::v1;
  v1::Failure f;
  // CURLcode values are part of libcurl's ABI (curl/curl.h).
  switch (curl_code) {
    case 5:   // CURLE_COULDNT_RESOLVE_PROXY
    case 6:   // CURLE_COULDNT_RESOLVE_HOST
      f.set_transport_error(v1::TRANSPORT_ERROR_DNS);
      break;
    case 7:   // CURLE_COULDNT_CONNECT
      f.set_transport_error(v1::TRANSPORT_ERROR_CONNECT_REFUSED);
      break;
    case 28:  // CURLE_OPERATION_TIMEDOUT
      f.set_transport_error(v1::TRANSPORT_ERROR_TIMEOUT);
      break;
    case 35:  // CURLE_SSL_CONNECT_ERROR
    case 51:  // CURLE_PEER_FAILED_VERIFICATION (older builds)
    case 53:  // CURLE_SSL_ENGINE_NOTFOUND
    case 58:  // CURLE_SSL_CERTPROBLEM
    case 59:  // CURLE_SSL_CIPHER
    case 60:  // CURLE_PEER_FAILED_VERIFICATION
    case 77:  // CURLE_SSL_CACERT_BADFILE
    case 83:  // CURLE_SSL_ISSUER_ERROR
    case 90:  // CURLE_SSL_PINNEDPUBKEYNOTMATCH
    case 91:  // CURLE_SSL_INVALIDCERTSTATUS
      f.set_transport_error(v1::TRANSPORT_ERROR_TLS);
      break;
    case 18:  // CURLE_PARTIAL_FILE
    case 52:  // CURLE_GOT_NOTHING
    case 55:  // CURLE_SEND_ERROR
    case 56:  // CURLE_RECV_ERROR
    case 92:  // CURLE_HTTP2_STREAM
    case 16:  // CURLE_HTTP2
      f.set_transport_error(v1::TRANSPORT_ERROR_RESET);
      break;
    default:
      break;
  }
  f.set_message(SanitizeUtf8(message, 1024));
  f.set_phase(after_first_byte ? v1::PHASE_AFTER_FIRST_BYTE : v1::PHASE_BEFORE_RESPONSE);
  return f;
}

}  // namespace failover::client
