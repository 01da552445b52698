#include "server/api/decision_service.h"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <optional>

#include "absl/strings/str_cat.h"
#include "server/api/convert.h"
#include "server/api/decision_convert.h"
#include "server/api/rpm_leases.h"
#include "server/api/status_convert.h"
#include "server/api/wire.h"
#include "common/status_macros.h"

namespace failover::api {

using failover::v1::PickTargetRequest;
using failover::v1::PickTargetResponse;
using failover::v1::ReportOutcomeRequest;
using failover::v1::ReportOutcomeResponse;
using failover::v1::ProbeRequest;
using failover::v1::ProbeResponse;
using failover::v1::WatchEventsRequest;

grpc::ServerUnaryReactor* DecisionService::PickTarget(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* in,
                                                      grpc::ByteBuffer* out) {
  return ServeUnaryLater(ctx_, ctx, in, out, this, &DecisionService::StartPick);
}

grpc::ServerUnaryReactor* DecisionService::ReportOutcome(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* in,
                                                         grpc::ByteBuffer* out) {
  return ServeUnaryLater(ctx_, ctx, in, out, this, &DecisionService::StartReportFromCaller);
}

grpc::ServerUnaryReactor* DecisionService::Probe(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* in,
                                                 grpc::ByteBuffer* out) {
  return ServeUnary(ctx_, Role::kDecide, ctx, in, out, this, &DecisionService::DoProbe, Route::kLeader);
}

grpc::ServerUnaryReactor* DecisionService::LeaseRpm(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* in,
                                                    grpc::ByteBuffer* out) {
  return ServeUnary(ctx_, Role::kDecide, ctx, in, out, this, &DecisionService::DoLeaseRpm, Route::kLeader);
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

constexpr uint32_t kMaxOutcomes = 10000;  // per StreamOutcomes or ReportOutcomes call

// What the bulk calls answer with: each outcome's answer tallied in order.
class OutcomeTally {
 public:
  void Add(const absl::Status& status, const ReportOutcomeResponse& answer) {
    if (status.ok()) {
      ++accepted_;
      duplicates_ += answer.duplicate();
      if (!answer.not_saved().empty() && not_saved_.empty()) not_saved_ = answer.not_saved();
    } else {
      if (refused_++ == 0) first_refusal_ = absl::StrCat("outcomes[", accepted_ + refused_ - 1, "]: ", status.message());
    }
  }
  uint32_t handled() const { return accepted_ + refused_; }
  uint32_t accepted() const { return accepted_; }
  absl::Status Summarize(const ServiceContext& ctx, grpc::ByteBuffer* out) const {
    failover::v1::StreamOutcomesResponse summary;
    summary.set_accepted(accepted_);
    summary.set_refused(refused_);
    summary.set_first_refusal(first_refusal_);
    summary.set_duplicates(duplicates_);
    summary.set_not_saved(not_saved_);
    if (ctx.leader != nullptr) summary.set_cluster_log_index(ctx.leader->LogIndex());
    return SerializeMessage(summary, out);
  }

 private:
  uint32_t accepted_ = 0;
  uint32_t refused_ = 0;
  uint32_t duplicates_ = 0;
  std::string first_refusal_;
  std::string not_saved_;
};

// Whether a bulk call comes from a cluster follower passing its callers'
// outcomes on (they count toward health here, and in its metrics there).
bool Relayed(const ServiceContext& ctx, const grpc::CallbackServerContext& call) {
  return call.client_metadata().count(kForwardedHeader) != 0 && ctx.FromAPeer(call);
}

// What both bulk calls hold: the call, the outcome being answered and the
// tally. `Reactor` is the gRPC reactor of the call's kind.
template <typename Reactor>
class BulkOutcomes : public Reactor {
 public:
  void OnDone() override {
    // gRPC passes the call from Finish to OnDone, often on another thread,
    // through its own synchronization, which ThreadSanitizer cannot see in
    // Debian's uninstrumented build; this lock, paired with Finished's, shows
    // it the order (and spares the loaded CI the minutes TSan spends matching
    // the false report against its suppressions).
    { std::lock_guard<std::mutex> seen(finished_); }
    delete this;
  }

 protected:
  BulkOutcomes(DecisionService* service, const ServiceContext& ctx, grpc::CallbackServerContext* call,
               grpc::ByteBuffer* response)
      : service_(service), ctx_(ctx), call_(call), response_(response), relayed_(Relayed(ctx, *call)) {}

  // The summary of every outcome handled.
  void FinishWithTally() {
    const absl::Status serialized = tally_.Summarize(ctx_, response_);
    if (!serialized.ok()) return Refuse(serialized);
    Finished(grpc::Status::OK);
  }
  void Refuse(const absl::Status& status) {
    call_->AddTrailingMetadata(kAnsweredTrailer, "1");
    Finished(ToGrpcStatus(status));
  }
  void Finished(grpc::Status status) {
    { std::lock_guard<std::mutex> seen(finished_); }
    this->Finish(std::move(status));
  }

  DecisionService* const service_;
  const ServiceContext ctx_;
  std::mutex finished_;  // see OnDone
  grpc::CallbackServerContext* const call_;
  grpc::ByteBuffer* const response_;
  const bool relayed_;
  ReportOutcomeResponse answer_;  // the one being answered
  OutcomeTally tally_;
};

// One StreamOutcomes call: reads reports one at a time and hands each to
// DecisionService::StartReport, as ReportOutcome would.
class OutcomeStream final : public BulkOutcomes<grpc::ServerReadReactor<grpc::ByteBuffer>> {
 public:
  OutcomeStream(DecisionService* service, const ServiceContext& ctx, grpc::CallbackServerContext* call,
                grpc::ByteBuffer* response)
      : BulkOutcomes(service, ctx, call, response) {
    const absl::Status allowed = ctx_.Authorize(*call_, Role::kDecide);
    if (allowed.ok()) {
      StartRead(&in_);
    } else {
      Refuse(allowed);
    }
  }

  void OnReadDone(bool ok) override {
    if (!ok) return FinishWithTally();  // the client has sent everything
    if (tally_.handled() >= kMaxOutcomes) {
      return Refuse(absl::ResourceExhaustedError(absl::StrCat(
          "outcomes: at most ", kMaxOutcomes, " per StreamOutcomes call; ", tally_.accepted(), " were handled")));
    }
    // The next one is read once this one is answered (durable), so they are
    // counted in the order sent; meanwhile no gRPC thread waits.
    ReportOutcomeRequest request;
    if (const absl::Status parsed = ParseRequest(in_, &request); !parsed.ok()) return Tally(parsed);
    answer_.Clear();
    service_->StartReport(request, &answer_, relayed_, [this](absl::Status status) { Tally(status); });
  }

 private:
  void Tally(const absl::Status& status) {
    tally_.Add(status, answer_);
    StartRead(&in_);
  }

  grpc::ByteBuffer in_;
};

// One ReportOutcomes call: the outcomes of one message handed to
// DecisionService::StartReport one after another, each once the one before
// was answered (durable), as OutcomeStream does.
class OutcomeBatch final : public BulkOutcomes<grpc::ServerUnaryReactor> {
 public:
  OutcomeBatch(DecisionService* service, const ServiceContext& ctx, grpc::CallbackServerContext* call,
               const grpc::ByteBuffer* request, grpc::ByteBuffer* response)
      : BulkOutcomes(service, ctx, call, response) {
    absl::Status allowed = ctx_.Authorize(*call_, Role::kDecide);
    if (allowed.ok()) allowed = ParseRequest(*request, &request_);
    if (allowed.ok() && request_.outcomes_size() > static_cast<int>(kMaxOutcomes)) {
      allowed = absl::InvalidArgumentError(
          absl::StrCat("outcomes: at most ", kMaxOutcomes, " per ReportOutcomes call, got ", request_.outcomes_size()));
    }
    if (allowed.ok()) {
      HandleFrom(0);
    } else {
      Refuse(allowed);
    }
  }

 private:
  // Hands on outcomes from `next` for as long as each is answered at once.
  // Whichever of this loop and the answer is second goes on; after an answer
  // that came later (on the committer's thread, which other callers' writes
  // wait for), the rest of the batch goes on in the call pool.
  void HandleFrom(int next) {
    for (; next < request_.outcomes_size(); ++next) {
      answer_.Clear();
      pending_.store(2, std::memory_order_relaxed);
      service_->StartReport(request_.outcomes(next), &answer_, relayed_, [this, next](absl::Status status) {
        tally_.Add(status, answer_);
        if (pending_.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
        auto rest = [this, next] { HandleFrom(next + 1); };
        if (ctx_.blocking == nullptr || !ctx_.blocking->Submit(rest)) rest();
      });
      if (pending_.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
    }
    FinishWithTally();
  }

  failover::v1::ReportOutcomesRequest request_;
  std::atomic<int> pending_{0};  // the loop and the answer of the outcome in hand
};

}  // namespace

grpc::ServerUnaryReactor* DecisionService::ReportOutcomes(grpc::CallbackServerContext* ctx,
                                                          const grpc::ByteBuffer* request,
                                                          grpc::ByteBuffer* response) {
  return new OutcomeBatch(this, ctx_, ctx, request, response);
}

grpc::ServerReadReactor<grpc::ByteBuffer>* DecisionService::StreamOutcomes(grpc::CallbackServerContext* ctx,
                                                                           grpc::ByteBuffer* response) {
  return new OutcomeStream(this, ctx_, ctx, response);
}

absl::Status DecisionService::Pick(const PickTargetRequest& req, PickTargetResponse* resp) {
  return WaitForAnswer([&](Answer answer) { StartPick(req, resp, std::move(answer)); });
}

void DecisionService::StartPick(const PickTargetRequest& req, PickTargetResponse* resp, Answer answer) {
  absl::StatusOr<PickRequest> pick = PickFromProto(req);
  if (!pick.ok()) return answer(pick.status());
  Plan plan;
  Events events;
  const absl::Time started = absl::Now();
  Committer::Scope changes(ctx_.committer);
  const absl::Status status = ctx_.engine->Pick(*pick, ctx_.clock->Now(), &plan, &events);
  if (ctx_.metrics != nullptr) {
    ctx_.metrics->OnPick(pick->chain, status.code() != absl::StatusCode::kNotFound, status.ok(), absl::Now() - started);
  }
  if (!status.ok()) return answer(status);
  PlanToProto(plan, resp);
  // A pick rarely changes state (a cooldown ended); then it answers once
  // that is saved, from the committer. The plan is given even when the
  // change could not be saved (DESIGN 3.14, invariant 6).
  if (!changes.changed()) return answer(absl::OkStatus());
  changes.AwaitThen([resp, answer = std::move(answer)](absl::Status saved) {
    if (!saved.ok()) resp->set_not_saved(std::string(saved.message()));
    answer(absl::OkStatus());
  });
}

void DecisionService::TraceCheck(const AcceptedCheck& check, absl::Time now) {
  TraceEntry entry;
  entry.at = now;
  entry.target = check.target;
  entry.recovery_probe = check.recovery;
  if (check.result->latency >= absl::ZeroDuration()) entry.latency = check.result->latency;
  switch (check.outcome) {
    case ProbeOutcome::kPass: entry.source = TraceSource::kProbePass; break;
    case ProbeOutcome::kFail: entry.source = TraceSource::kProbeFail; break;
    case ProbeOutcome::kThrottled: entry.source = TraceSource::kProbeThrottled; break;
    case ProbeOutcome::kNotLoaded: entry.source = TraceSource::kProbeNotLoaded; break;
  }
  entry.facts = check.result->facts;
  entry.facts.success = check.outcome == ProbeOutcome::kPass || check.outcome == ProbeOutcome::kNotLoaded;
  ctx_.trace->Add(std::move(entry));
}

absl::Status DecisionService::DoLeaseRpm(const failover::v1::LeaseRpmRequest& req,
                                         failover::v1::LeaseRpmResponse* resp) {
  constexpr int kMaxAsks = 10000;
  if (req.requester().empty()) return absl::InvalidArgumentError("requester: must not be empty");
  if (req.requester().size() > 256) {
    return absl::InvalidArgumentError(absl::StrCat("requester: at most 256 bytes, got ", req.requester().size()));
  }
  if (req.asks_size() > kMaxAsks) {
    return absl::InvalidArgumentError(absl::StrCat("asks: at most ", kMaxAsks, " per call, got ", req.asks_size()));
  }
  if (ctx_.leader != nullptr) return ctx_.leader->LeaseRpm(req, resp);
  std::lock_guard<std::mutex> lock(rpm_mu_);
  return GrantRpmShares(req, RpmMinuteOf(ctx_.clock->Now()), /*single_node=*/true, ctx_.engine, &rpm_ledger_, resp);
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
    if (r.has_latency()) {
      ASSIGN_OR_RETURN(result.latency, DurationFromProto(r.latency(), path + ".latency"));
      if (result.latency < absl::ZeroDuration()) {
        return absl::InvalidArgumentError(absl::StrCat(path, ".latency: must not be negative, got ",
                                                       absl::FormatDuration(result.latency)));
      }
    }
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
  if (ctx_.trace != nullptr && ctx_.trace->enabled() && (ctx_.leader == nullptr || ctx_.leader->IsLeader())) {
    for (const AcceptedCheck& check : out.checks) TraceCheck(check, now);
  }
  RETURN_IF_ERROR(changes.Await());
  for (const ProbeTask& t : out.tasks) {
    failover::v1::ProbeTask* task = resp->add_tasks();
    const TargetConfig& target = *t.target->config;
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
  return WaitForAnswer([&](Answer answer) { StartReport(req, resp, relayed, std::move(answer)); });
}

void DecisionService::StartReport(const ReportOutcomeRequest& req, ReportOutcomeResponse* resp, bool relayed,
                                  Answer answer) {
  absl::StatusOr<ReportRequest> parsed = ReportFromProto(req, ctx_.clock->Now());
  if (!parsed.ok()) return answer(parsed.status());
  ReportRequest report = *std::move(parsed);
  // A report counted before (a resent batch, a relay sent again) decides its
  // verdict again but counts nothing (DESIGN 3.14, invariant 4).
  if (req.has_report_id()) report.count = report_ids_->FirstTime(req.report_id().sender(), req.report_id().sequence());
  // On a cluster follower the counting (trips, recoveries) is the leader's,
  // so it sees the outcomes of every replica (DESIGN 3.12); the verdict is
  // this replica's. A failure (or a success that may change the target's
  // state) is counted there first, so the verdict and the plans after it see
  // what it caused; any other success goes on in the background.
  const bool follower = ctx_.leader != nullptr && !ctx_.leader->IsLeader();
  const bool relay_first = follower && report.count &&
                           (!report.facts.success || ctx_.engine->SuccessMayChangeState(report.target));
  const bool relay_after = follower && report.count && !relay_first;
  if (!relay_first) {
    return CountAndAnswer(req, std::move(report), resp, relayed, follower, relay_after, std::move(answer));
  }
  ReportOutcomeRequest to_leader = req;
  if (to_leader.chain().empty()) to_leader.set_chain(Engine::ChainOfDecision(req.decision_id()));
  // The wait for the leader (up to 500 ms) is the call pool's, not gRPC's.
  auto relay_then_count = [this, to_leader = std::move(to_leader), report = std::move(report), resp, relayed,
                           follower, answer = std::move(answer)]() mutable {
    ReportOutcomeRequest request = to_leader;
    ctx_.leader->RelayAndWait(std::move(to_leader), absl::Milliseconds(500));
    CountAndAnswer(request, std::move(report), resp, relayed, follower, /*relay_after=*/false, std::move(answer));
  };
  auto task = std::make_shared<decltype(relay_then_count)>(std::move(relay_then_count));
  if (ctx_.blocking == nullptr || !ctx_.blocking->Submit([task] { (*task)(); })) (*task)();
}

void DecisionService::CountAndAnswer(const ReportOutcomeRequest& req, ReportRequest report,
                                     ReportOutcomeResponse* resp, bool relayed, bool follower, bool relay_after,
                                     Answer answer) {
  ReportResult result;
  Events events;
  Committer::Scope changes(ctx_.committer);
  for (uint32_t i = 0; i < OutcomesOf(req); ++i) {
    if (absl::Status counted = ctx_.engine->Report(report, ctx_.clock->Now(), &result, &events); !counted.ok()) {
      return answer(std::move(counted));
    }
    if (ctx_.metrics != nullptr && !relayed && report.count) {
      ctx_.metrics->OnOutcome(report.target, result, report.latency);
    }
  }
  std::optional<ReportOutcomeRequest> to_leader;
  if (relay_after) {
    to_leader = req;
    to_leader->set_chain(result.chain);
  }
  if (ctx_.metrics != nullptr && !relayed && report.count) {
    if (result.reason == Reason::kRetryBudget) ctx_.metrics->OnRetryBudgetRefusal(result.refused_chain);
    if (req.hedged()) ctx_.metrics->OnHedge();
  }
  std::optional<TraceEntry> traced;
  if (ctx_.trace != nullptr && ctx_.trace->enabled() && report.count && !follower) {
    traced = TraceEntry{0, ctx_.clock->Now(), result.chain, report.target, OutcomesOf(req), result.classified,
                        report.latency, std::move(report.facts)};
  }
  ReportResultToProto(result, resp);
  resp->set_duplicate(!report.count);
  // Failover never waits on bookkeeping (DESIGN 3.14, invariant 6): a change
  // this outcome made that could not be saved is named in the answer, and the
  // verdict stands; failoverd refuses further changes until it can save. The
  // answer goes once the change is durable, from the committer's thread.
  if (!changes.changed()) {  // most reports: nothing to wait for, no hand-off
    return Settle(resp, absl::OkStatus(), std::move(traced), std::move(to_leader), std::move(answer));
  }
  changes.AwaitThen([this, resp, traced = std::move(traced), to_leader = std::move(to_leader),
                     answer = std::move(answer)](absl::Status saved) mutable {
    Settle(resp, std::move(saved), std::move(traced), std::move(to_leader), std::move(answer));
  });
}

void DecisionService::Settle(ReportOutcomeResponse* resp, absl::Status saved, std::optional<TraceEntry> traced,
                             std::optional<ReportOutcomeRequest> to_leader, Answer answer) {
  if (!saved.ok()) resp->set_not_saved(std::string(saved.message()));
  if (traced) ctx_.trace->Add(std::move(*traced));
  if (to_leader) ctx_.leader->Relay(std::move(*to_leader));
  answer(absl::OkStatus());
}

}  // namespace failover::api
