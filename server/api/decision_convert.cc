#include "server/api/decision_convert.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "server/api/convert.h"
#include "server/engine/rpm_budgets.h"
#include "server/engine/validate.h"

namespace failover::api {

namespace {
constexpr size_t kMaxSessionKey = 256;
constexpr uint32_t kMaxCount = 10000;  // successes one report may stand for
}  // namespace

absl::StatusOr<PickRequest> PickFromProto(const v1::PickTargetRequest& req) {
  RETURN_IF_ERROR(ValidateName(req.chain(), "chain"));
  if (req.exclude_targets_size() > static_cast<int>(kMaxChainTargets)) {
    return absl::InvalidArgumentError(
        absl::StrCat("exclude_targets: at most ", kMaxChainTargets, " entries, got ", req.exclude_targets_size()));
  }
  if (req.session_key().size() > kMaxSessionKey) {
    return absl::InvalidArgumentError(absl::StrCat("session_key: at most ", kMaxSessionKey, " bytes"));
  }
  PickRequest pick;
  pick.chain = req.chain();
  pick.body_bytes = req.body_bytes();
  pick.exclude_targets.assign(req.exclude_targets().begin(), req.exclude_targets().end());
  pick.session_key = req.session_key();
  return pick;
}

void PlanToProto(const Plan& plan, v1::PickTargetResponse* resp) {
  resp->set_decision_id(plan.decision_id);
  resp->set_chain_state(ChainStateToProto(plan.state));
  resp->set_config_generation(plan.generation);
  resp->set_active_target(plan.active_target);
  for (const PlannedAttempt& a : plan.attempts) AttemptToProto(a, resp->add_attempts());
  if (plan.hedge_after > absl::ZeroDuration()) DurationToProto(plan.hedge_after, resp->mutable_hedge_after());
}

absl::StatusOr<ReportRequest> ReportFromProto(const v1::ReportOutcomeRequest& req, absl::Time now) {
  RETURN_IF_ERROR(ValidateName(req.target(), "target"));
  if (!req.chain().empty()) RETURN_IF_ERROR(ValidateName(req.chain(), "chain"));
  ReportRequest report;
  report.decision_id = req.decision_id();
  report.chain = req.chain();
  report.target = req.target();
  report.attempt = req.attempt();
  if (req.has_latency()) {
    ASSIGN_OR_RETURN(report.latency, DurationFromProto(req.latency(), "latency"));
    if (report.latency < absl::ZeroDuration()) {
      return absl::InvalidArgumentError(
          absl::StrCat("latency: must not be negative, got ", absl::FormatDuration(report.latency)));
    }
  }
  switch (req.result_case()) {
    case v1::ReportOutcomeRequest::kSuccess: report.facts.success = true; break;
    case v1::ReportOutcomeRequest::kFailure: {
      ASSIGN_OR_RETURN(report.facts, FailureFromProto(req.failure(), "failure", now));
      break;
    }
    default: return absl::InvalidArgumentError("result: set either success or failure");
  }
  if (req.count() > kMaxCount) {
    return absl::InvalidArgumentError(absl::StrCat("count: at most ", kMaxCount, ", got ", req.count()));
  }
  if (req.count() > 1 && !report.facts.success) {
    return absl::InvalidArgumentError(
        absl::StrCat("count: ", req.count(), " outcomes in one report are allowed for successes only"));
  }
  if (req.has_report_id()) {
    const v1::ReportId& id = req.report_id();
    if (id.sender().empty() || id.sender().size() > kMaxReportSender) {
      return absl::InvalidArgumentError(
          absl::StrCat("report_id.sender: 1 to ", kMaxReportSender, " bytes, got ", id.sender().size()));
    }
    if (id.sequence() == 0) return absl::InvalidArgumentError("report_id.sequence: must be > 0");
    report.id = CountedReport{id.sender(), id.sequence()};
  }
  return report;
}

void ReportResultToProto(const ReportResult& result, v1::ReportOutcomeResponse* resp) {
  resp->set_verdict(VerdictToProto(result.verdict));
  resp->set_reason(ReasonToProto(result.reason));
  if (result.verdict == Verdict::kRetrySame) DurationToProto(result.retry_delay, resp->mutable_retry_delay());
  if (result.has_next) AttemptToProto(result.next, resp->mutable_next_attempt());
  resp->set_error(result.error);
  resp->set_counted(result.counted);
  resp->set_target_health(HealthToProto(result.target_health));
  if (!result.active_target.empty()) {  // a chain was known
    resp->set_chain_state(ChainStateToProto(result.chain_state));
    resp->set_active_target(result.active_target);
  }
  resp->set_decision_known(result.decision_known);
}

v1::LeaseRpmRequest RpmLeaseRequest(const Engine& engine, absl::Time now, uint32_t sharers,
                                    const std::string& requester) {
  v1::LeaseRpmRequest request;
  const int64_t minute = RpmMinuteOf(now);
  const std::vector<Engine::RpmUse> uses = engine.RpmUses(minute);
  if (uses.empty()) return request;
  request.set_requester(requester);
  for (const RpmLedger::Ask& ask : PlanRpmAsks(uses, minute, now - absl::FromUnixSeconds(minute * 60), sharers)) {
    v1::RpmAsk* out = request.add_asks();
    out->set_target(ask.target);
    out->set_minute(ask.minute);
    out->set_want(ask.want);
    out->set_held(ask.held);
    out->set_used(ask.used);
  }
  return request;
}

v1::LeaseRpmRequest RpmGiveBackRequest(const Engine& engine, absl::Time now, const std::string& requester) {
  v1::LeaseRpmRequest request;
  const int64_t minute = RpmMinuteOf(now);
  constexpr int kMostAsks = 10000;  // what one LeaseRpm takes; the rest stays booked until its minute ends
  for (int64_t m : {minute, minute + 1}) {
    for (const Engine::RpmUse& use : engine.RpmUses(m)) {
      if (!use.has_grant || request.asks_size() >= kMostAsks) continue;
      v1::RpmAsk* out = request.add_asks();
      out->set_target(use.target);
      out->set_minute(m);
      out->set_used(use.used);
      out->set_give_back(true);
    }
  }
  if (request.asks_size() > 0) request.set_requester(requester);
  return request;
}

void TakeRpmGrants(const v1::LeaseRpmResponse& response, Engine* engine) {
  for (const v1::RpmGrant& grant : response.grants()) {
    engine->SetRpmGrant(grant.target(), grant.minute(), grant.requests());
  }
}

}  // namespace failover::api
