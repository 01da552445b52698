// What a caller saw on one attempt, and the outcome trace's entry built from
// it (DESIGN 3.17). Neutral: the engine classifies these facts, storage keeps
// the trace, the API layer fills both from requests.
#pragma once

#include <cstdint>
#include <string>

#include "absl/time/time.h"
#include "common/model.h"

namespace failover {

enum class TransportError : uint8_t { kNone, kConnectRefused, kDns, kReset, kTls, kTimeout };
enum class Phase : uint8_t { kBeforeResponse, kAfterFirstByte, kAfterSideEffect };

// What the caller saw on one attempt.
struct OutcomeFacts {
  bool success = false;
  uint32_t http_status = 0;  // 0 = none
  int grpc_code = 0;         // canonical code; 0 = none
  TransportError transport = TransportError::kNone;
  std::string message;
  std::string error_code;
  absl::Duration retry_after = absl::ZeroDuration();
  Phase phase = Phase::kBeforeResponse;
  bool admission_rejected = false;
  bool cancelled = false;
};

// What a trace entry records: a caller's outcome, or a health check's result.
enum class TraceSource : uint8_t { kOutcome, kProbePass, kProbeFail, kProbeThrottled, kProbeNotLoaded };

// One counted outcome (or accepted check result) as the outcome trace keeps
// it: enough to judge it again under another policy (the facts, not only the
// live classification).
struct TraceEntry {
  uint64_t number = 0;  // the trace's own numbering, set when stored
  absl::Time at;        // wall time failoverd counted it
  std::string chain;    // the chain it was judged in ("" when none)
  std::string target;
  // Identical outcomes this entry stands for (a batch of successes sent with a count).
  uint32_t count = 1;
  Reason classified = Reason::kNone;  // under the live policy
  // The attempt's latency as the caller measured it; zero = not given.
  absl::Duration latency = absl::ZeroDuration();
  OutcomeFacts facts;  // message cut to kTraceMessageBytes
  TraceSource source = TraceSource::kOutcome;
  bool recovery_probe = false;  // a check result: the check was a recovery check
};

// A traced message is cut to this many bytes: the trace keeps what tells
// errors apart, not whole provider bodies.
inline constexpr size_t kTraceMessageBytes = 256;

}  // namespace failover
