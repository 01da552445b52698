#include "server/api/upstream_response.h"

#include <algorithm>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/utf8.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"

namespace failover::api {
namespace {

using google::protobuf::Value;

constexpr size_t kMaxMessage = 4096;

const Value* Field(const Value& v, const char* name) {
  if (v.kind_case() != Value::kStructValue) return nullptr;
  const auto& fields = v.struct_value().fields();
  auto it = fields.find(name);
  return it == fields.end() ? nullptr : &it->second;
}

std::string StringField(const Value& v, const char* name) {
  const Value* f = Field(v, name);
  return f != nullptr && f->kind_case() == Value::kStringValue ? f->string_value() : "";
}

// "30s", "1.5s", "6m0s", "20ms": Go's duration syntax, which Abseil reads.
std::optional<absl::Duration> GoDuration(absl::string_view text) {
  absl::Duration d;
  if (!absl::ParseDuration(absl::StripAsciiWhitespace(text), &d) || d < absl::ZeroDuration()) return std::nullopt;
  return d;
}

std::optional<absl::Duration> Until(absl::Time when, absl::Time now) {
  return std::max(when - now, absl::ZeroDuration());
}

// Retry-After: delay-seconds or an HTTP date (RFC 9110).
std::optional<absl::Duration> RetryAfter(absl::string_view text, absl::Time now) {
  text = absl::StripAsciiWhitespace(text);
  double seconds = 0;
  if (absl::SimpleAtod(text, &seconds) && seconds >= 0 && seconds < 1e9) return absl::Seconds(seconds);
  absl::Time when;
  std::string err;
  if (absl::ParseTime("%a, %d %b %Y %H:%M:%S GMT", std::string(text), &when, &err)) return Until(when, now);
  return std::nullopt;
}

// X-RateLimit-Reset: epoch milliseconds (OpenRouter) or seconds.
std::optional<absl::Duration> EpochReset(absl::string_view text, absl::Time now) {
  int64_t n = 0;
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(text), &n) || n <= 0) return std::nullopt;
  if (n > 100'000'000'000) return Until(absl::FromUnixMillis(n), now);
  if (n > 1'000'000'000) return Until(absl::FromUnixSeconds(n), now);
  return absl::Seconds(n);  // a small number is a delay
}

std::optional<absl::Duration> Rfc3339Reset(absl::string_view text, absl::Time now) {
  absl::Time when;
  std::string err;
  if (!absl::ParseTime(absl::RFC3339_full, std::string(absl::StripAsciiWhitespace(text)), &when, &err)) {
    return std::nullopt;
  }
  return Until(when, now);
}

// The reset headers of a 429. A provider that says which limit ran out
// (remaining 0) is believed; otherwise the latest reset is taken.
std::optional<absl::Duration> ResetHeaders(const std::map<std::string, std::string>& h, absl::Time now) {
  struct Reset {
    const char* reset;
    const char* remaining;
    std::optional<absl::Duration> (*parse)(absl::string_view, absl::Time);
  };
  static constexpr Reset kResets[] = {
      {"x-ratelimit-reset-requests", "x-ratelimit-remaining-requests",
       [](absl::string_view t, absl::Time) { return GoDuration(t); }},
      {"x-ratelimit-reset-tokens", "x-ratelimit-remaining-tokens",
       [](absl::string_view t, absl::Time) { return GoDuration(t); }},
      {"anthropic-ratelimit-requests-reset", "anthropic-ratelimit-requests-remaining", Rfc3339Reset},
      {"anthropic-ratelimit-tokens-reset", "anthropic-ratelimit-tokens-remaining", Rfc3339Reset},
      {"anthropic-ratelimit-input-tokens-reset", "anthropic-ratelimit-input-tokens-remaining", Rfc3339Reset},
      {"anthropic-ratelimit-output-tokens-reset", "anthropic-ratelimit-output-tokens-remaining", Rfc3339Reset},
      {"x-ratelimit-reset", "x-ratelimit-remaining", EpochReset},
  };
  std::optional<absl::Duration> exhausted, any;
  for (const Reset& r : kResets) {
    auto it = h.find(r.reset);
    if (it == h.end()) continue;
    std::optional<absl::Duration> d = r.parse(it->second, now);
    if (!d) continue;
    any = std::max(any.value_or(absl::ZeroDuration()), *d);
    auto rem = h.find(r.remaining);
    if (rem != h.end() && absl::StripAsciiWhitespace(rem->second) == "0") {
      exhausted = std::max(exhausted.value_or(absl::ZeroDuration()), *d);
    }
  }
  return exhausted ? exhausted : any;
}

// Google's RetryInfo in error.details: {"@type": ".../google.rpc.RetryInfo", "retryDelay": "30s"}.
std::optional<absl::Duration> RetryInfo(const Value& error) {
  const Value* details = Field(error, "details");
  if (details == nullptr || details->kind_case() != Value::kListValue) return std::nullopt;
  for (const Value& d : details->list_value().values()) {
    if (absl::EndsWith(StringField(d, "@type"), "google.rpc.RetryInfo")) {
      if (auto delay = GoDuration(StringField(d, "retryDelay"))) return delay;
    }
  }
  return std::nullopt;
}

}  // namespace

UpstreamErrorFacts ReadUpstreamResponse(uint32_t http_status, const std::map<std::string, std::string>& headers,
                                        absl::string_view body, absl::Time now) {
  UpstreamErrorFacts out;
  // Wrapped, so a top-level list (Vertex) or string parses as a value too.
  google::protobuf::Struct doc;
  const bool parsed = google::protobuf::util::JsonStringToMessage(absl::StrCat("{\"v\":", body, "}"), &doc).ok();
  if (parsed) {
    Value root = doc.fields().at("v");
    if (root.kind_case() == Value::kListValue && root.list_value().values_size() > 0) {
      Value first = root.list_value().values(0);
      root = std::move(first);
    }
    // {"error": {...}} (OpenAI, Anthropic, Google, OpenRouter), {"error": "text"}
    // (Ollama), or the fields at the top (vLLM, Mistral).
    const Value* error = Field(root, "error");
    const Value& e = error != nullptr && error->kind_case() == Value::kStructValue ? *error : root;
    if (error != nullptr && error->kind_case() == Value::kStringValue) out.message = error->string_value();
    if (out.message.empty()) out.message = StringField(e, "message");
    for (const char* key : {"code", "status", "type"}) {
      std::string code = StringField(e, key);
      if (code == "error") continue;  // Anthropic's envelope type
      if (!code.empty()) {
        out.error_code = std::move(code);
        break;
      }
    }
    if (auto delay = RetryInfo(e)) out.retry_after = delay;
  } else {
    out.message = std::string(body.substr(0, kMaxMessage));  // plain text or an HTML error page
  }
  out.message = SanitizeUtf8(out.message, kMaxMessage);
  out.error_code = SanitizeUtf8(out.error_code, 256);
  if (auto it = headers.find("retry-after"); it != headers.end()) {
    if (auto d = RetryAfter(it->second, now)) out.retry_after = d;
  }
  // Providers send their reset headers with every reply; only a 429 says a
  // limit ran out.
  if (!out.retry_after && http_status == 429) out.retry_after = ResetHeaders(headers, now);
  return out;
}

}  // namespace failover::api
