// gRPC adapter for failover.v1.DecisionService.
#pragma once

#include <mutex>
#include <optional>

#include "failover/v1/decision.grpc.pb.h"
#include "server/api/change_feed.h"
#include "server/api/report_ids.h"
#include "server/api/service_context.h"
#include "server/api/watch_stream.h"
#include "server/api/wire.h"
#include "server/engine/rpm_budgets.h"

namespace failover::api {

// Every method is a raw callback method: the request is parsed by ServeUnary
// (wire.h) so malformed requests get a clear INVALID_ARGUMENT.
using DecisionGrpc = failover::v1::DecisionService;
using DecisionServiceBase =
    DecisionGrpc::WithRawCallbackMethod_PickTarget<
    DecisionGrpc::WithRawCallbackMethod_ReportOutcome<
    DecisionGrpc::WithRawCallbackMethod_Probe<
    DecisionGrpc::WithRawCallbackMethod_WatchEvents<
    DecisionGrpc::WithRawCallbackMethod_StreamOutcomes<
    DecisionGrpc::WithRawCallbackMethod_ReportOutcomes<
    DecisionGrpc::WithRawCallbackMethod_FollowState<
    DecisionGrpc::WithRawCallbackMethod_LeaseRpm<
    DecisionGrpc::Service>>>>>>>>;

class DecisionService final : public DecisionServiceBase {
 public:
  DecisionService(ServiceContext ctx, WatchOptions watch, FollowOptions follow = {})
      : ctx_(ctx),
        watch_(std::move(watch)),
        follow_(follow),
        worker_(ctx_, watch_.stall_timeout / 4),
        report_ids_(ctx_.report_ids != nullptr ? ctx_.report_ids : &own_report_ids_) {}

  grpc::ServerUnaryReactor* PickTarget(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
                                       grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* ReportOutcome(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
                                          grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* Probe(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
                                  grpc::ByteBuffer* response) override;
  grpc::ServerWriteReactor<grpc::ByteBuffer>* WatchEvents(grpc::CallbackServerContext* ctx,
                                                          const grpc::ByteBuffer* request) override;
  grpc::ServerReadReactor<grpc::ByteBuffer>* StreamOutcomes(grpc::CallbackServerContext* ctx,
                                                            grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* ReportOutcomes(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
                                           grpc::ByteBuffer* response) override;
  grpc::ServerWriteReactor<grpc::ByteBuffer>* FollowState(grpc::CallbackServerContext* ctx,
                                                          const grpc::ByteBuffer* request) override;
  grpc::ServerUnaryReactor* LeaseRpm(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
                                     grpc::ByteBuffer* response) override;

  // The handlers without the call around them (the fuzzers call these).
  // Each waits for its answer; the Start forms are the same without waiting
  // (see StartReport).
  absl::Status Pick(const failover::v1::PickTargetRequest& req, failover::v1::PickTargetResponse* resp);
  void StartPick(const failover::v1::PickTargetRequest& req, failover::v1::PickTargetResponse* resp, Answer answer);
  absl::Status DoProbe(const failover::v1::ProbeRequest& req, failover::v1::ProbeResponse* resp);
  absl::Status DoLeaseRpm(const failover::v1::LeaseRpmRequest& req, failover::v1::LeaseRpmResponse* resp);
  absl::Status Report(const failover::v1::ReportOutcomeRequest& req, failover::v1::ReportOutcomeResponse* resp) {
    return Report(req, resp, /*relayed=*/false);
  }
  // `relayed`: passed on by a cluster follower, which answered the caller and
  // counted it in its own metrics; here it is only counted toward health.
  absl::Status Report(const failover::v1::ReportOutcomeRequest& req, failover::v1::ReportOutcomeResponse* resp,
                      bool relayed);
  // Judges and counts the outcome now, and calls `answer` once `resp` is
  // final: at once, or once what it changed is durable (on the committer's
  // thread), or after the cluster's leader counted it (on the call pool).
  // `req` need not outlive this call; `resp` must live until `answer`.
  void StartReport(const failover::v1::ReportOutcomeRequest& req, failover::v1::ReportOutcomeResponse* resp,
                   bool relayed, Answer answer);

 private:
  void StartReportFromCaller(const failover::v1::ReportOutcomeRequest& req, failover::v1::ReportOutcomeResponse* resp,
                             Answer answer) {
    StartReport(req, resp, /*relayed=*/false, std::move(answer));
  }
  // StartReport after the relay to the leader (if any) is done.
  void CountAndAnswer(const failover::v1::ReportOutcomeRequest& req, ReportRequest report,
                      failover::v1::ReportOutcomeResponse* resp, bool relayed, bool follower, bool relay_after,
                      Answer answer);
  // Ends a report once what it changed is saved (or was not: `saved`).
  void Settle(failover::v1::ReportOutcomeResponse* resp, absl::Status saved, std::optional<TraceEntry> traced,
              std::optional<failover::v1::ReportOutcomeRequest> to_leader, Answer answer);
  // Records a check result the engine took in the outcome trace.
  void TraceCheck(const AcceptedCheck& check, absl::Time now);
  ServiceContext ctx_;
  WatchOptions watch_;
  FollowOptions follow_;
  WatchWorker worker_;  // snapshots and stalled watchers
  ReportIdWindow own_report_ids_;  // when the context brings none
  ReportIdWindow* const report_ids_;  // reports counted, so a resend counts nothing twice
  std::mutex rpm_mu_;
  RpmLedger rpm_ledger_;  // guarded by rpm_mu_: a single node's rpm shares leased to clients
};

}  // namespace failover::api
