#include "server/engine/classify.h"

#include <initializer_list>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/utf8.h"

namespace failover {
namespace {

// Canonical gRPC codes used by the mapping table.
enum GrpcCode : int {
  kCancelled = 1,
  kUnknownCode = 2,
  kInvalidArgument = 3,
  kDeadlineExceeded = 4,
  kNotFound = 5,
  kPermissionDenied = 7,
  kResourceExhausted = 8,
  kFailedPrecondition = 9,
  kUnimplemented = 12,
  kInternal = 13,
  kUnavailable = 14,
  kUnauthenticated = 16,
};

bool ContainsAny(const std::string& lowered, std::initializer_list<absl::string_view> needles) {
  for (absl::string_view n : needles) {
    if (absl::StrContains(lowered, n)) return true;
  }
  return false;
}

bool ContainsAllWords(const std::string& lowered, std::initializer_list<absl::string_view> words) {
  for (absl::string_view w : words) {
    if (!absl::StrContains(lowered, w)) return false;
  }
  return true;
}

bool IsContextOverflow(const std::string& text) {
  return ContainsAny(text, {"context_length_exceeded", "maximum context length", "context length exceeded",
                            "context window", "prompt is too long"}) ||
         ContainsAllWords(text, {"input token count", "exceeds the maximum"});
}

// The provider's own error code or type (OpenAI `code`/`type`, Anthropic
// `error.type`, Google `error.status`), lower case. kNone for codes that say
// too little on their own ("invalid_request_error", "server_error",
// "FAILED_PRECONDITION"): the phrases and the status decide those.
Reason ReasonFromCode(const std::string& code) {
  struct Entry {
    absl::string_view code;
    Reason reason;
  };
  static constexpr Entry kCodes[] = {
      {"insufficient_quota", Reason::kBilling},
      {"billing_error", Reason::kBilling},
      {"billing_hard_limit_reached", Reason::kBilling},
      {"billing_not_active", Reason::kBilling},
      {"payment_required", Reason::kBilling},
      {"rate_limit_exceeded", Reason::kRateLimit},
      {"rate_limit_error", Reason::kRateLimit},
      {"resource_exhausted", Reason::kRateLimit},
      {"too_many_requests", Reason::kRateLimit},
      {"overloaded_error", Reason::kOverloaded},
      {"unavailable", Reason::kOverloaded},
      {"context_length_exceeded", Reason::kContextOverflow},
      {"model_not_found", Reason::kModelNotFound},
      {"not_found_error", Reason::kModelNotFound},
      {"notfounderror", Reason::kModelNotFound},
      {"deploymentnotfound", Reason::kModelNotFound},
      {"not_found", Reason::kModelNotFound},
      {"invalid_api_key", Reason::kAuth},
      {"authentication_error", Reason::kAuth},
      {"permission_error", Reason::kAuth},
      {"permission_denied", Reason::kAuth},
      {"unauthenticated", Reason::kAuth},
      {"deadline_exceeded", Reason::kTimeout},
      {"content_filter", Reason::kClientError},
  };
  for (const Entry& e : kCodes) {
    if (code == e.code) return e.reason;
  }
  if (absl::StrContains(code, "overloaded")) return Reason::kOverloaded;
  return Reason::kNone;
}

// Phrases providers use whatever status they send: a quota that ran out comes
// as a 429 (OpenAI) or a 400 (Anthropic, Google), an overload as a 503 or 529.
Reason ReasonFromProviderPhrase(const std::string& text) {
  if (IsContextOverflow(text)) return Reason::kContextOverflow;
  if (ContainsAny(text, {"exceeded your current quota", "credit balance is too low", "insufficient credits",
                         "insufficient_quota", "billing", "payment required"})) {
    return Reason::kBilling;
  }
  if (ContainsAny(text, {"overloaded", "slow down", "at capacity", "over capacity"})) return Reason::kOverloaded;
  if (ContainsAny(text, {"model_not_found", "try pulling it first"}) ||
      (absl::StrContains(text, "model") && ContainsAny(text, {"does not exist", "not found"}))) {
    return Reason::kModelNotFound;
  }
  return Reason::kNone;
}

// The period a quota or limit named in `text` is stated for ("per day",
// "monthly", "RPD"), or zero when it names none. The longest period named
// wins; a plan or subscription with no period named counts as forever.
absl::Duration StatedQuotaPeriod(const std::string& text) {
  struct Period {
    std::vector<absl::string_view> words;
    absl::Duration length;
  };
  static const std::vector<Period>* const kPeriods = new std::vector<Period>{
      {{"per year", "yearly", "annual", "/year", "a year", "each year"}, absl::Hours(24 * 365)},
      {{"per month", "monthly", "/month", "this month", "each month", "a month", "billing cycle", "billing period"},
       absl::Hours(24 * 30)},
      {{"per week", "weekly", "/week", "this week", "each week"}, absl::Hours(24 * 7)},
      {{"per day", "daily", "/day", "(rpd)", "(tpd)", " rpd", " tpd", "24 hours", "24h", "today", "each day",
        "a day", "per-day"},
       absl::Hours(24)},
      {{"per hour", "hourly", "/hour", "/hr", "an hour", "each hour", "per-hour"}, absl::Hours(1)},
      {{"per minute", "per min", "/min", "(rpm)", "(tpm)", " rpm", " tpm", "a minute", "per-minute"}, absl::Minutes(1)},
      {{"per second", "/sec", "(rps)", " rps", "a second"}, absl::Seconds(1)},
  };
  if (!ContainsAny(text, {"quota", "limit", "allowance", "credit", "usage", "allotment", "cap "})) {
    return absl::ZeroDuration();
  }
  for (const Period& p : *kPeriods) {
    for (absl::string_view w : p.words) {
      if (absl::StrContains(text, w)) return p.length;
    }
  }
  if (ContainsAny(text, {"your plan", "plan's", "plan limit", "plan quota", "subscription", "free tier"})) {
    return absl::InfiniteDuration();
  }
  return absl::ZeroDuration();
}

bool IsModelMissing(const std::string& text) {
  if (ContainsAny(text, {"model not found", "does not exist", "model_not_found"})) return true;
  for (absl::string_view w : {"unsupported", "unavailable", "not available", "deprecated", "retired",
                              "disabled"}) {
    if (absl::StrContains(text, "model") && absl::StrContains(text, w)) return true;
  }
  return ContainsAllWords(text, {"model", "not", "found"});
}

// The reason a message alone points at, or kNone.
Reason ReasonFromMessage(const std::string& text) {
  if (ContainsAny(text, {"rate limit", "rate_limit", "ratelimit", "too many requests"})) return Reason::kRateLimit;
  if (ContainsAny(text, {"quota exceeded", "insufficient credit", "insufficient_quota", "billing",
                         "exceeded your current quota"})) {
    return Reason::kBilling;
  }
  if (ContainsAny(text, {"overloaded", "capacity"})) return Reason::kOverloaded;
  if (IsModelMissing(text)) return Reason::kModelNotFound;
  if (ContainsAny(text, {"upstream failed", "upstream error", "upstream unavailable", "upstream request failed"})) {
    return Reason::kServerError;
  }
  if (ContainsAny(text, {"timed out", "timeout", "deadline exceeded", "etimedout"})) return Reason::kTimeout;
  if (ContainsAny(text, {"unauthorized", "authentication", "invalid api key", "invalid_api_key"})) {
    return Reason::kAuth;
  }
  return Reason::kNone;
}

Reason ReasonFromHttp(uint32_t status, const std::string& text) {
  switch (status) {
    case 408: return Reason::kTimeout;
    case 429: return Reason::kRateLimit;
    case 401:
    case 403: return Reason::kAuth;
    case 402: return Reason::kBilling;
    case 404: return Reason::kModelNotFound;
    case 501: return Reason::kCapabilityGap;
    case 503:
    case 529: return Reason::kOverloaded;
    default: break;
  }
  if (status >= 500 && status < 600) {
    return ContainsAny(text, {"overloaded", "capacity"}) ? Reason::kOverloaded : Reason::kServerError;
  }
  const Reason from_text = ReasonFromMessage(text);
  if (status >= 400 && status < 500) {
    // A 400/422 is the client's fault unless the provider says otherwise
    // (MinusPod: a 400 marked as quota exhaustion is billing).
    return from_text == Reason::kNone || from_text == Reason::kTimeout ? Reason::kClientError : from_text;
  }
  return from_text == Reason::kNone ? Reason::kUnknown : from_text;
}

Reason ReasonFromGrpc(int code) {
  switch (code) {
    case kUnavailable: return Reason::kNetwork;
    case kDeadlineExceeded: return Reason::kTimeout;
    case kInternal:
    case kUnknownCode: return Reason::kServerError;
    case kResourceExhausted: return Reason::kRateLimit;
    case kUnimplemented: return Reason::kCapabilityGap;
    case kInvalidArgument:
    case kFailedPrecondition: return Reason::kClientError;
    case kUnauthenticated:
    case kPermissionDenied: return Reason::kAuth;
    case kNotFound: return Reason::kModelNotFound;
    case kCancelled: return Reason::kCancelled;
    default: return Reason::kNone;
  }
}

bool CountsAgainstHealth(Reason r) {
  switch (r) {
    case Reason::kNetwork:
    case Reason::kTimeout:
    case Reason::kOverloaded:
    case Reason::kServerError:
    case Reason::kAuth:
    case Reason::kBilling:
    case Reason::kModelNotFound: return true;
    default: return false;
  }
}

// The verdict column of the table: does this reason move on by default?
bool MovesOnByDefault(Reason r) {
  switch (r) {
    case Reason::kContextOverflow:
    case Reason::kClientError:
    case Reason::kCancelled:
    case Reason::kUnknown:
    case Reason::kNone: return false;
    default: return true;
  }
}

const char* TransportName(TransportError t) {
  switch (t) {
    case TransportError::kConnectRefused: return "connect refused";
    case TransportError::kDns: return "dns failure";
    case TransportError::kReset: return "connection reset";
    case TransportError::kTls: return "tls failure";
    case TransportError::kTimeout: return "timeout";
    case TransportError::kNone: break;
  }
  return "";
}

}  // namespace

const std::vector<std::string>& DefaultRetryOnErrors() {
  static const auto* list = new std::vector<std::string>{
      "model not found",      "model does not exist", "model unsupported", "model unavailable",
      "model not available",  "model deprecated",     "model retired",     "model disabled",
      "upstream failed",      "upstream error",       "upstream unavailable", "upstream timed out",
      "upstream timeout",     "404 unsupported",      "404 unavailable",   "404 not available",
      "404 deprecated",       "404 retired",          "404 disabled"};
  return *list;
}

const std::vector<std::string>& DefaultRetryOnStatuses() {
  static const auto* list = new std::vector<std::string>{"408", "429", "5xx"};
  return *list;
}

FailoverRules::FailoverRules() {
  for (const std::string& s : DefaultRetryOnStatuses()) statuses_.push_back(*ParseStatus(s));
  for (const std::string& p : DefaultRetryOnErrors()) phrases_.push_back(*ParsePhrase(p));
  retries_[static_cast<int>(Reason::kNetwork)] = 1;
  retries_[static_cast<int>(Reason::kOverloaded)] = 2;
}

absl::StatusOr<FailoverRules::StatusRule> FailoverRules::ParseStatus(absl::string_view text) {
  StatusRule rule;
  const std::string t = absl::AsciiStrToLower(absl::StripAsciiWhitespace(text));
  if (t.size() == 3 && t[1] == 'x' && t[2] == 'x' && t[0] >= '1' && t[0] <= '5') {
    rule.klass = static_cast<uint32_t>(t[0] - '0');
    return rule;
  }
  uint32_t code = 0;
  if (absl::SimpleAtoi(t, &code) && code >= 100 && code <= 599) {
    rule.code = code;
    return rule;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("must be an HTTP status (100-599) or a class like \"5xx\", got \"", text, "\""));
}

absl::StatusOr<FailoverRules::Phrase> FailoverRules::ParsePhrase(absl::string_view text) {
  Phrase phrase;
  for (absl::string_view word : absl::StrSplit(text, ' ', absl::SkipWhitespace())) {
    const bool numeric = !word.empty() && absl::ascii_isdigit(word[0]);
    if (numeric) {
      absl::StatusOr<StatusRule> rule = ParseStatus(word);
      if (!rule.ok()) return rule.status();
      phrase.statuses.push_back(*rule);
    } else {
      phrase.words.push_back(absl::AsciiStrToLower(word));
    }
  }
  if (phrase.words.empty() && phrase.statuses.empty()) {
    return absl::InvalidArgumentError("must not be empty");
  }
  return phrase;
}

absl::StatusOr<FailoverRules> FailoverRules::Compile(const Policy& policy, absl::string_view path) {
  FailoverRules rules;
  rules.max_hold_ = policy.rate_limit_max_hold;
  if (!policy.retry_on_statuses.empty()) {
    rules.custom_ = true;
    rules.statuses_.clear();
    for (size_t i = 0; i < policy.retry_on_statuses.size(); ++i) {
      absl::StatusOr<StatusRule> r = ParseStatus(policy.retry_on_statuses[i]);
      if (!r.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat(path, ".retry_on_statuses[", i, "]: ", r.status().message()));
      }
      rules.statuses_.push_back(*r);
    }
  }
  if (!policy.retry_on_errors.empty()) {
    rules.custom_ = true;
    rules.phrases_.clear();
    for (size_t i = 0; i < policy.retry_on_errors.size(); ++i) {
      absl::StatusOr<Phrase> p = ParsePhrase(policy.retry_on_errors[i]);
      if (!p.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat(path, ".retry_on_errors[", i, "]: ", p.status().message(), " (got \"",
                         policy.retry_on_errors[i], "\")"));
      }
      rules.phrases_.push_back(*std::move(p));
    }
  }
  for (const auto& [reason, retries] : policy.same_target_retries) {
    rules.retries_[static_cast<int>(reason)] = retries;
  }
  return rules;
}

std::string FailoverRules::InputsOf(const Policy& policy) {
  std::string key = absl::StrCat(absl::StrJoin(policy.retry_on_statuses, "\x1f"), "\x1e",
                                 absl::StrJoin(policy.retry_on_errors, "\x1f"), "\x1e",
                                 absl::ToInt64Nanoseconds(policy.rate_limit_max_hold), "\x1e");
  for (const auto& [reason, retries] : policy.same_target_retries) {
    absl::StrAppend(&key, static_cast<int>(reason), "=", retries, ",");
  }
  return key;
}

bool FailoverRules::StatusMatches(uint32_t status) const {
  for (const StatusRule& r : statuses_) {
    if (r.Matches(status)) return true;
  }
  return false;
}

bool FailoverRules::PhraseMatches(const OutcomeFacts& facts, const std::string& lowered) const {
  for (const Phrase& p : phrases_) {
    bool ok = true;
    for (const StatusRule& s : p.statuses) ok = ok && s.Matches(facts.http_status);
    for (const std::string& w : p.words) ok = ok && absl::StrContains(lowered, w);
    if (ok) return true;
  }
  return false;
}

Classification FailoverRules::Classify(const OutcomeFacts& facts) const {
  Classification c;
  if (facts.success) return c;
  const std::string code = absl::AsciiStrToLower(facts.error_code);
  const std::string text = absl::AsciiStrToLower(absl::StrCat(facts.error_code, " ", facts.message));

  // What the caller itself knows first; then the provider's own code, its
  // phrases, and only then the status, gRPC code or transport class.
  Reason from_code = Reason::kNone;
  Reason from_phrase = Reason::kNone;
  if (facts.cancelled || facts.grpc_code == kCancelled) {
    c.reason = Reason::kCancelled;
  } else if (facts.admission_rejected) {
    c.reason = Reason::kAdmission;
  } else if ((from_code = ReasonFromCode(code)) != Reason::kNone) {
    c.reason = from_code;
  } else if ((from_phrase = ReasonFromProviderPhrase(text)) != Reason::kNone) {
    c.reason = from_phrase;
  } else if (facts.transport == TransportError::kTimeout) {
    c.reason = Reason::kTimeout;
  } else if (facts.transport != TransportError::kNone) {
    c.reason = Reason::kNetwork;
  } else if (facts.http_status != 0) {
    c.reason = ReasonFromHttp(facts.http_status, text);
  } else if (facts.grpc_code != 0) {
    c.reason = ReasonFromGrpc(facts.grpc_code);
    if (c.reason == Reason::kNone) c.reason = Reason::kUnknown;
  } else {
    c.reason = ReasonFromMessage(text);
    if (c.reason == Reason::kNone) c.reason = Reason::kUnknown;
  }

  // A limit with no reset time given that is stated for a longer period than
  // a hold may last (a daily or monthly quota, a plan's) will not lift by
  // retrying: billing, however the provider words it. With a reset time the
  // reset decides (a hold, or DOWN until it).
  if (c.reason == Reason::kRateLimit && facts.retry_after <= absl::ZeroDuration() &&
      StatedQuotaPeriod(text) > max_hold_) {
    c.reason = Reason::kBilling;
  }
  c.counts = CountsAgainstHealth(c.reason);
  c.same_target_retries = retries_[static_cast<int>(c.reason)];
  if (c.reason == Reason::kContextOverflow || c.reason == Reason::kCancelled) {
    c.moves_on = false;  // no other target can help
  } else if (custom_ && facts.http_status != 0 && c.reason != Reason::kAdmission) {
    // A policy's lists replace the table for HTTP failures (GoModel semantics).
    c.moves_on = StatusMatches(facts.http_status) || PhraseMatches(facts, text);
  } else {
    c.moves_on = MovesOnByDefault(c.reason) || PhraseMatches(facts, text);
  }
  if (facts.phase != Phase::kBeforeResponse) {
    // Part of the response reached the client or a side effect ran: never replay.
    c.moves_on = false;
  }
  if (!c.moves_on) c.same_target_retries = 0;
  return c;
}

std::string FailoverRules::Summarize(const OutcomeFacts& facts) {
  std::string out;
  if (facts.transport != TransportError::kNone) {
    out = TransportName(facts.transport);
  } else if (facts.http_status != 0) {
    out = absl::StrCat(facts.http_status);
  } else if (facts.grpc_code != 0) {
    out = absl::StrCat("grpc code ", facts.grpc_code);
  } else if (facts.cancelled) {
    out = "cancelled";
  } else if (facts.admission_rejected) {
    out = "admission rejected";
  }
  // Callers relay upstream errors in any language: cut on a character
  // boundary, and never let a byte that is not UTF-8 into state or events.
  const std::string msg = SanitizeUtf8(facts.message.empty() ? facts.error_code : facts.message, 200);
  if (!msg.empty()) absl::StrAppend(&out, out.empty() ? "" : " ", "\"", msg, "\"");
  return out.empty() ? "failure" : out;
}

}  // namespace failover
