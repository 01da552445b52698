#include "server/api/decision_service.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "server/api/convert.h"
#include "server/api/status_convert.h"
#include "server/api/wire.h"
#include "common/status_macros.h"
#include "server/engine/validate.h"

namespace failover::api {

using failover::v1::PickTargetRequest;
using failover::v1::PickTargetResponse;
using failover::v1::ReportOutcomeRequest;
using failover::v1::ReportOutcomeResponse;
using failover::v1::ProbeRequest;
using failover::v1::ProbeResponse;
using failover::v1::WatchEventsRequest;

namespace {
constexpr size_t kMaxSessionKey = 256;
}  // namespace

grpc::ServerUnaryReactor* DecisionService::PickTarget(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* in,
                                                      grpc::ByteBuffer* out) {
  return ServeUnary(ctx_, Role::kDecide, ctx, in, out, this, &DecisionService::Pick);
}

grpc::ServerUnaryReactor* DecisionService::ReportOutcome(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* in,
                                                         grpc::ByteBuffer* out) {
  return ServeUnary(ctx_, Role::kDecide, ctx, in, out, this, &DecisionService::Report);
}

grpc::ServerUnaryReactor* DecisionService::Probe(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* in,
                                                 grpc::ByteBuffer* out) {
  return ServeUnary(ctx_, Role::kDecide, ctx, in, out, this, &DecisionService::DoProbe, Route::kLeader);
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* DecisionService::WatchEvents(grpc::CallbackServerContext* ctx,
                                                                         const grpc::ByteBuffer* in) {
  WatchEventsRequest request;
  absl::Status allowed = ctx_.Authorize(*ctx, Role::kDecide);
  if (allowed.ok()) allowed = ParseRequest(*in, &request);
  WatchStream* stream = nullptr;
  WatchStream::Start(ctx_, watch_, &worker_, ctx, request, allowed, &stream);
  return stream;
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* DecisionService::FollowState(grpc::CallbackServerContext* ctx,
                                                                         const grpc::ByteBuffer* in) {
  failover::v1::FollowStateRequest request;
  absl::Status allowed = ctx_.Authorize(*ctx, Role::kDecide);
  if (allowed.ok()) allowed = ParseRequest(*in, &request);
  if (allowed.ok() && ctx_.changes == nullptr) allowed = absl::UnimplementedError("this failoverd has no change feed");
  return FollowStream::Start(ctx_.changes, follow_, allowed);
}

namespace {

// One StreamOutcomes call: reads reports one at a time and hands each to
// DecisionService::Report, as ReportOutcome would.
class OutcomeStream final : public grpc::ServerReadReactor<grpc::ByteBuffer> {
 public:
  static constexpr uint32_t kMaxOutcomes = 10000;

  OutcomeStream(DecisionService* service, const ServiceContext& ctx, grpc::CallbackServerContext* call,
                grpc::ByteBuffer* response)
      : service_(service),
        ctx_(ctx),
        call_(call),
        response_(response),
        relayed_(call->client_metadata().count(kForwardedHeader) != 0) {
    const absl::Status allowed = ctx_.Authorize(*call_, Role::kDecide);
    if (allowed.ok()) {
      StartRead(&in_);
    } else {
      Refuse(allowed);
    }
  }

  void OnReadDone(bool ok) override {
    if (!ok) {  // the client has sent everything
      failover::v1::StreamOutcomesResponse summary;
      summary.set_accepted(accepted_);
      summary.set_refused(refused_);
      summary.set_first_refusal(first_refusal_);
      summary.set_duplicates(duplicates_);
      summary.set_not_saved(not_saved_);
      if (ctx_.leader != nullptr) summary.set_cluster_log_index(ctx_.leader->LogIndex());
      const absl::Status serialized = SerializeMessage(summary, response_);
      if (!serialized.ok()) return Refuse(serialized);
      return Finish(grpc::Status::OK);
    }
    if (accepted_ + refused_ >= kMaxOutcomes) {
      return Refuse(absl::ResourceExhaustedError(absl::StrCat(
          "outcomes: at most ", kMaxOutcomes, " per StreamOutcomes call; ", accepted_, " were handled")));
    }
    ReportOutcomeRequest request;
    ReportOutcomeResponse answer;
    absl::Status status = ParseRequest(in_, &request);
    if (status.ok()) status = service_->Report(request, &answer, relayed_);
    if (status.ok()) {
      ++accepted_;
      duplicates_ += answer.duplicate();
      if (!answer.not_saved().empty() && not_saved_.empty()) not_saved_ = answer.not_saved();
    } else {
      if (refused_++ == 0) first_refusal_ = absl::StrCat("outcomes[", accepted_ + refused_ - 1, "]: ", status.message());
    }
    StartRead(&in_);
  }

  void OnDone() override { delete this; }

 private:
  void Refuse(const absl::Status& status) {
    call_->AddTrailingMetadata(kAnsweredTrailer, "1");
    Finish(ToGrpcStatus(status));
  }

  DecisionService* const service_;
  const ServiceContext ctx_;
  grpc::CallbackServerContext* const call_;
  grpc::ByteBuffer* const response_;
  const bool relayed_;  // from a cluster follower
  grpc::ByteBuffer in_;
  uint32_t accepted_ = 0;
  uint32_t refused_ = 0;
  uint32_t duplicates_ = 0;
  std::string first_refusal_;
  std::string not_saved_;
};

}  // namespace

grpc::ServerReadReactor<grpc::ByteBuffer>* DecisionService::StreamOutcomes(grpc::CallbackServerContext* ctx,
                                                                           grpc::ByteBuffer* response) {
  return new OutcomeStream(this, ctx_, ctx, response);
}

absl::Status DecisionService::Pick(const PickTargetRequest& req, PickTargetResponse* resp) {
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
  Plan plan;
  Events events;
  const absl::Time started = absl::Now();
  Committer::Scope changes(ctx_.committer);
  const absl::Status status = ctx_.engine->Pick(pick, ctx_.clock->Now(), &plan, &events);
  if (ctx_.metrics != nullptr) {
    ctx_.metrics->OnPick(pick.chain, status.code() != absl::StatusCode::kNotFound, status.ok(), absl::Now() - started);
  }
  RETURN_IF_ERROR(status);
  // The plan is given even when a change it made could not be saved
  // (DESIGN 3.14, invariant 6).
  if (const absl::Status saved = changes.Await(); !saved.ok()) resp->set_not_saved(std::string(saved.message()));
  resp->set_decision_id(plan.decision_id);
  resp->set_chain_state(ChainStateToProto(plan.state));
  resp->set_config_generation(plan.generation);
  resp->set_active_target(plan.active_target);
  for (const PlannedAttempt& a : plan.attempts) AttemptToProto(a, resp->add_attempts());
  if (plan.hedge_after > absl::ZeroDuration()) DurationToProto(plan.hedge_after, resp->mutable_hedge_after());
  return absl::OkStatus();
}

absl::Status DecisionService::DoProbe(const ProbeRequest& req, ProbeResponse* resp) {
  constexpr uint32_t kMaxTasks = 1024;
  if (req.max_tasks() > kMaxTasks) {
    return absl::InvalidArgumentError(absl::StrCat("max_tasks: at most ", kMaxTasks, ", got ", req.max_tasks()));
  }
  if (req.prober_id().size() > 256) return absl::InvalidArgumentError("prober_id: at most 256 bytes");
  if (req.results_size() > static_cast<int>(kMaxTasks)) {
    return absl::InvalidArgumentError(
        absl::StrCat("results: at most ", kMaxTasks, " results per call, got ", req.results_size()));
  }
  failover::ProbeRequest probe;
  probe.prober_id = req.prober_id();
  probe.max_tasks = req.max_tasks();
  for (int i = 0; i < req.results_size(); ++i) {
    const auto& r = req.results(i);
    const std::string path = absl::StrCat("results[", i, "]");
    failover::ProbeResult result;
    result.lease_id = r.lease_id();
    switch (r.outcome()) {
      case failover::v1::PROBE_OUTCOME_PASS: result.outcome = ProbeOutcome::kPass; break;
      case failover::v1::PROBE_OUTCOME_THROTTLED: result.outcome = ProbeOutcome::kThrottled; break;
      case failover::v1::PROBE_OUTCOME_NOT_LOADED: result.outcome = ProbeOutcome::kNotLoaded; break;
      case failover::v1::PROBE_OUTCOME_FAIL: {
        result.outcome = ProbeOutcome::kFail;
        ASSIGN_OR_RETURN(result.facts, FailureFromProto(r.failure(), path + ".failure", ctx_.clock->Now()));
        break;
      }
      default:
        return absl::InvalidArgumentError(
            absl::StrCat(path, ".outcome: set PASS, FAIL, THROTTLED or NOT_LOADED, got ", r.outcome()));
    }
    probe.results.push_back(std::move(result));
  }
  failover::ProbeResponse out;
  Events events;
  const absl::Time now = ctx_.clock->Now();
  Committer::Scope changes(ctx_.committer);
  RETURN_IF_ERROR(ctx_.engine->Probe(probe, now, &out, &events));
  RETURN_IF_ERROR(changes.Await());
  for (const ProbeTask& t : out.tasks) {
    failover::v1::ProbeTask* task = resp->add_tasks();
    const TargetConfig& target = t.target->config;
    task->set_lease_id(t.lease_id);
    task->set_target(target.name);
    task->set_upstream_model(target.UpstreamModel());
    task->mutable_labels()->insert(target.labels.begin(), target.labels.end());
    task->set_kind(t.kind == ProbeKind::kRecovery ? failover::v1::PROBE_KIND_RECOVERY : failover::v1::PROBE_KIND_LIVENESS);
    DurationToProto(t.timeout, task->mutable_timeout());
    task->set_target_kind(target.kind == TargetKind::kLocal ? failover::v1::TARGET_KIND_LOCAL
                                                            : failover::v1::TARGET_KIND_REMOTE);
    task->set_warm(target.warm);
    task->set_config_generation(t.generation);
  }
  DurationToProto(out.next_call_after, resp->mutable_next_call_after());
  resp->set_results_accepted(out.accepted);
  resp->set_results_ignored(out.ignored);
  if (ctx_.metrics != nullptr) ctx_.metrics->SetProbeLeases(ctx_.engine->OutstandingLeases(now));
  return absl::OkStatus();
}

absl::Status DecisionService::Report(const ReportOutcomeRequest& req, ReportOutcomeResponse* resp, bool relayed) {
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
    case ReportOutcomeRequest::kSuccess: report.facts.success = true; break;
    case ReportOutcomeRequest::kFailure: {
      ASSIGN_OR_RETURN(report.facts, FailureFromProto(req.failure(), "failure", ctx_.clock->Now()));
      break;
    }
    default: return absl::InvalidArgumentError("result: set either success or failure");
  }
  constexpr uint32_t kMaxCount = 10000;
  if (req.count() > kMaxCount) {
    return absl::InvalidArgumentError(absl::StrCat("count: at most ", kMaxCount, ", got ", req.count()));
  }
  if (req.count() > 1 && !report.facts.success) {
    return absl::InvalidArgumentError(
        absl::StrCat("count: ", req.count(), " outcomes in one report are allowed for successes only"));
  }
  // A report counted before (a resent batch, a relay sent again) decides its
  // verdict again but counts nothing (DESIGN 3.14, invariant 4).
  if (req.has_report_id()) {
    const failover::v1::ReportId& id = req.report_id();
    if (id.sender().empty() || id.sender().size() > 64) {
      return absl::InvalidArgumentError(
          absl::StrCat("report_id.sender: 1 to 64 bytes, got ", id.sender().size()));
    }
    if (id.sequence() == 0) return absl::InvalidArgumentError("report_id.sequence: must be > 0");
    report.count = report_ids_.FirstTime(id.sender(), id.sequence());
  }
  ReportResult result;
  Events events;
  // On a cluster follower the counting (trips, recoveries) is the leader's,
  // so it sees the outcomes of every replica (DESIGN 3.12); the verdict is
  // this replica's. A failure (or a success that may change the target's
  // state) is counted there first, so the verdict and the plans after it see
  // what it caused; any other success goes on in the background.
  const bool follower = ctx_.leader != nullptr && !ctx_.leader->IsLeader();
  const bool relay_first = follower && report.count &&
                           (!report.facts.success || ctx_.engine->SuccessMayChangeState(report.target));
  const bool relay_after = follower && report.count && !relay_first;
  if (relay_first) {
    ReportOutcomeRequest relayed = req;
    if (relayed.chain().empty()) relayed.set_chain(Engine::ChainOfDecision(req.decision_id()));
    ctx_.leader->RelayAndWait(std::move(relayed), absl::Milliseconds(500));
  }
  Committer::Scope changes(ctx_.committer);
  for (uint32_t i = 0; i < std::max<uint32_t>(req.count(), 1); ++i) {
    RETURN_IF_ERROR(ctx_.engine->Report(report, ctx_.clock->Now(), &result, &events));
    if (ctx_.metrics != nullptr && !relayed && report.count) {
      ctx_.metrics->OnOutcome(report.target, result, report.latency);
    }
  }
  // Failover never waits on bookkeeping (DESIGN 3.14, invariant 6): a change
  // this outcome made that could not be saved is named in the answer, and the
  // verdict stands; failoverd refuses further changes until it can save.
  if (const absl::Status saved = changes.Await(); !saved.ok()) resp->set_not_saved(std::string(saved.message()));
  if (relay_after) {
    ReportOutcomeRequest relayed = req;
    relayed.set_chain(result.chain);
    ctx_.leader->Relay(std::move(relayed));
  }
  if (ctx_.metrics != nullptr && !relayed && report.count) {
    if (result.reason == Reason::kRetryBudget) ctx_.metrics->OnRetryBudgetRefusal(result.refused_chain);
    if (req.hedged()) ctx_.metrics->OnHedge();
  }
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
  resp->set_duplicate(!report.count);
  return absl::OkStatus();
}

}  // namespace failover::api
