// Outcome classification (DESIGN 3.5): the facts a caller reports become a
// reason, whether it counts against the target, and whether the request may
// move to another target.
#pragma once

#include <array>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/model.h"
#include "common/outcome.h"

namespace failover {

struct Classification {
  Reason reason = Reason::kNone;
  bool counts = false;    // against the target's health
  bool moves_on = false;  // the request may go to another target (or retry)
  uint32_t same_target_retries = 0;
};

// The default phrase list of retry_on_errors (GoModel's).
const std::vector<std::string>& DefaultRetryOnErrors();
// The default retry_on_statuses: 408, 429, 5xx.
const std::vector<std::string>& DefaultRetryOnStatuses();

// A policy's retry rules, parsed once when the chain is configured.
class FailoverRules {
 public:
  // The defaults (no policy overrides).
  FailoverRules();
  // Fails with INVALID_ARGUMENT naming `path`.retry_on_statuses[i] etc. on a bad entry.
  [[nodiscard]] static absl::StatusOr<FailoverRules> Compile(const Policy& policy, absl::string_view path);
  // The parts of `policy` that Compile reads, as one string: policies with
  // equal inputs compile to equal rules, so they can share one.
  static std::string InputsOf(const Policy& policy);

  Classification Classify(const OutcomeFacts& facts) const;

  // One-line description of the facts, for errors and events: `503 "overloaded"`.
  static std::string Summarize(const OutcomeFacts& facts);

 private:
  // An HTTP status rule: an exact code, or a class (4 for "4xx").
  struct StatusRule {
    uint32_t code = 0;
    uint32_t klass = 0;
    bool Matches(uint32_t status) const {
      return code != 0 ? status == code : status / 100 == klass;
    }
  };
  struct Phrase {
    std::vector<std::string> words;  // lower case
    std::vector<StatusRule> statuses;
  };
  [[nodiscard]] static absl::StatusOr<StatusRule> ParseStatus(absl::string_view text);
  [[nodiscard]] static absl::StatusOr<Phrase> ParsePhrase(absl::string_view text);
  bool PhraseMatches(const OutcomeFacts& facts, const std::string& lowered) const;
  bool StatusMatches(uint32_t status) const;

  bool custom_ = false;  // either list set by the policy
  // rate_limit.max_hold: a quota stated for a longer period is billing (DESIGN 3.15).
  absl::Duration max_hold_ = absl::Seconds(60);
  std::vector<StatusRule> statuses_;
  std::vector<Phrase> phrases_;
  std::array<uint32_t, kReasonCount> retries_{};
};

}  // namespace failover
