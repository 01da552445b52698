// The C++ client library: a decision loop that picks, attempts, reports and
// follows the verdict, and keeps serving when failoverd cannot be reached.
//
// Fail-static: if PickTarget fails because failoverd is unreachable, the loop
// uses the last plan it saw for the chain (or the declared order given with
// SetDeclaredOrder), with the target that last served the chain first, and
// tries those targets in order; if a report cannot be
// sent mid-loop, it carries on down the plan the same way. Reports that could
// not be sent are buffered (bounded; the oldest success dropped first) and sent by a thread of
// the client's own once failoverd answers again, never on a caller's request
// (background_flush). failoverd being down never takes the caller down.
//
// Hedging: for a request the caller marks idempotent, on a chain whose plan
// carries hedge_after, the loop starts the plan's second attempt beside the
// first once hedge_after passes without an answer. The first success wins;
// the other attempt is told to stop (AttemptContext::Cancelled) and, unless
// it succeeded too, is reported as cancelled. Run returns with the first
// success at once; the other attempt runs on (on a thread of a pool the client
// keeps) until it returns and is then reported from there. So the attempt
// function must own what it uses, not borrow from Run's caller, and
// ~Client waits for attempts still running.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/attempt_pool.h"
#include "client/connection.h"
#include "failover/v1/decision.grpc.pb.h"

namespace failover::client {

namespace v1 = ::failover::v1;

// What one attempt against a target produced.
struct AttemptOutcome {
  bool ok = false;
  v1::Failure failure;  // the facts, when !ok
  absl::Duration latency = absl::ZeroDuration();
  // What the caller wants back from the attempt that serves the request (the
  // upstream's reply, say); LoopResult::response carries it out of Run.
  std::string response;
};

// What an attempt function is told besides its target.
struct AttemptContext {
  uint32_t number = 1;  // 1-based within the request, retries included
  bool hedged = false;  // started beside a first attempt that was slow
  // Set once another attempt served the request: return as soon as possible.
  const std::atomic<bool>* cancelled = nullptr;
  bool Cancelled() const { return cancelled != nullptr && cancelled->load(std::memory_order_acquire); }
};

struct RunOptions {
  uint64_t body_bytes = 0;
  std::string session_key;                   // round_robin stickiness
  std::string request_id;                    // echoed in failoverd's logs
  std::vector<std::string> exclude_targets;  // targets the caller already tried
  // No attempt starts and no retry delay is waited out past this time (on
  // ClientOptions::now's clock), and none after *cancelled turns true.
  absl::Time deadline = absl::InfiniteFuture();
  const std::atomic<bool>* cancelled = nullptr;
  // Only an idempotent request is hedged: both attempts may reach an upstream.
  bool idempotent = false;
};

using AttemptFn = std::function<AttemptOutcome(const v1::Attempt&, const AttemptContext&)>;

struct AttemptRecord {
  std::string target;
  uint32_t number = 0;
  bool ok = false;
  v1::Verdict verdict = v1::VERDICT_UNSPECIFIED;  // unspecified when failoverd was not reached
  bool hedged = false;  // started beside a slow first attempt
  // failoverd's classification of a failed attempt (unspecified for a success
  // or when failoverd was not reached), and the attempt's reported latency.
  v1::FailureReason reason = v1::FAILURE_REASON_UNSPECIFIED;
  absl::Duration latency = absl::ZeroDuration();
};

struct LoopResult {
  bool ok = false;
  std::string served_by;
  std::string response;  // the serving attempt's AttemptOutcome::response
  std::string error;  // why the request failed (failoverd's FAIL message, or every failure when static)
  std::vector<AttemptRecord> attempts;
  bool fail_static = false;  // some or all of the loop ran without failoverd
  bool decided_locally = false;  // the plan came from ClientOptions::local's copy of the state
};

// Decisions made in the caller's process instead of by a call to failoverd
// (local decisions, client/local_decisions.h). Answers PickTarget and
// ReportOutcome as failoverd would from its copy of failoverd's state.
class LocalDecider {
 public:
  virtual ~LocalDecider() = default;
  // False until the first copy of the state arrived: calls go to failoverd.
  virtual bool Ready() const = 0;
  // How old the copy may be: zero while failoverd is heard from (a change or
  // its heartbeat, about once a second), else the time since it last was;
  // InfiniteDuration before the first copy.
  virtual absl::Duration Staleness() const = 0;
  virtual grpc::Status Pick(const v1::PickTargetRequest& req, v1::PickTargetResponse* resp) = 0;
  virtual grpc::Status Report(const v1::ReportOutcomeRequest& req, v1::ReportOutcomeResponse* resp) = 0;
};

struct ClientOptions {
  ConnectionOptions connection;  // deadline and token for each call
  // Local decisions: once it is Ready, plans and verdicts come from it, and
  // every report goes to failoverd from the background flusher (failures at
  // once, in batches), which decides trips and recoveries for all callers.
  std::shared_ptr<LocalDecider> local;
  size_t max_buffered_reports = 1000;
  // Buffered reports are sent by one thread of the client's own, every
  // flush_interval and as soon as failoverd answers again: requests never
  // wait for the backlog. Off: each request sends flush_per_request of it
  // before its own PickTarget (Flush sends the rest).
  bool background_flush = true;
  // A success's verdict is always DONE, so with background_flush its report
  // is not waited for: it goes with the backlog (successes on one target
  // together), and a request costs failoverd one call, its PickTarget.
  bool report_successes_in_background = true;
  absl::Duration flush_interval = absl::Milliseconds(500);
  size_t flush_per_request = 16;
  size_t max_steps = 64;  // attempts per request, a guard against a runaway loop
  // How to wait for RETRY_SAME; tests inject their own.
  std::function<void(absl::Duration)> sleep;
  // After failoverd could not be reached, requests go fail-static at once
  // instead of each waiting out the call deadline again: with
  // background_flush until the client's thread finds failoverd answering (it
  // asks after down_backoff, doubling up to max_down_backoff while there is
  // no answer); without, for that long, and then the next request asks.
  absl::Duration down_backoff = absl::Seconds(1);
  absl::Duration max_down_backoff = absl::Seconds(5);
  // The most one request waits on failoverd, its PickTarget and its failure
  // reports together (each call also has connection.timeout_seconds). Past it
  // the request goes on fail-static and failoverd counts as not answering, so
  // even the first request to meet a hung failoverd pays no more than this.
  absl::Duration failoverd_budget = absl::Milliseconds(250);
  // The clock for that backoff; tests inject their own.
  std::function<absl::Time()> now;
};

class Client {
 public:
  explicit Client(std::shared_ptr<v1::DecisionService::StubInterface> stub, ClientOptions options = {});
  // Opens the channel to options.connection.server (TLS and token as given)
  // and makes the client: the one call most callers need. Fails only when a
  // TLS file cannot be read.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<Client>> Connect(ClientOptions options);
  // Waits for hedged attempts still running, then stops the flushing thread
  // (buffered reports not yet sent are dropped).
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // The order to use for `chain` when failoverd is unreachable and no plan was seen yet.
  void SetDeclaredOrder(const std::string& chain, std::vector<v1::Attempt> attempts);

  // Serves one request on `chain`: `attempt` performs one call to the target.
  LoopResult Run(const std::string& chain, const std::function<AttemptOutcome(const v1::Attempt&)>& attempt,
                 uint64_t body_bytes = 0);
  // The same, with the attempt's context and options (hedging).
  LoopResult Run(const std::string& chain, const AttemptFn& attempt, const RunOptions& options);

  // The local decisions given in the options (null: every decision is failoverd's).
  LocalDecider* local() const { return options_.local.get(); }

  // Outcomes waiting to be reported (successes sent together count each).
  size_t buffered_reports() const;
  // Reports dropped because the buffer was full (the oldest success first, else the oldest), in outcomes.
  size_t dropped_reports() const;
  // Sends buffered reports (at most `limit`); returns how many were delivered.
  size_t Flush(size_t limit = SIZE_MAX);

 private:
  enum class Sent { kDelivered, kUnreachable, kRefused };
  // kRefused: failoverd answered with an error (in `refusal`); it would never
  // accept the report, so it is not buffered.
  // What is left of one request's failoverd_budget: each call to failoverd
  // spends from it the time it took.
  class CallBudget {
   public:
    explicit CallBudget(absl::Duration total) : left_(total) {}
    // The call's deadline: the connection's timeout, cut to what is left.
    void Prepare(const ConnectionOptions& connection, grpc::ClientContext* ctx);
    void Spend();  // the time since Prepare

   private:
    absl::Duration left_;
    std::chrono::steady_clock::time_point started_;
  };
  // Stamps `req` with its report id before the first send, so a copy buffered
  // after a call that did reach failoverd counts once when it is sent again.
  // Delivered to the local copy (or a success left to the background flush),
  // `req` goes to the backlog (Buffer): the caller uses it again only when it
  // comes back kUnreachable.
  Sent Report(v1::ReportOutcomeRequest* req, v1::ReportOutcomeResponse* resp, std::string* refusal,
              CallBudget* budget);
  // Returns the backlog's size. A success on the same chain and target as
  // the newest buffered one joins it (ReportOutcomeRequest.count) and leaves
  // `req` as it was; any other report is moved into the backlog.
  size_t Buffer(v1::ReportOutcomeRequest* req);
  bool CoalesceLocked(const v1::ReportOutcomeRequest& req);
  // Keeps a plan failoverd gave as the order for fail-static runs on `chain`
  // (copied only when it differs from the one kept).
  void RememberPlan(const std::string& chain, const google::protobuf::RepeatedPtrField<v1::Attempt>& attempts);
  // Moves `target` to the front of the cached order: the next fail-static run
  // starts where the last request was served, as failoverd's active target would.
  void Promote(const std::string& chain, const std::string& target);
  // Why the request must stop before waiting `wait` and making another
  // attempt (the caller's deadline or cancellation), or empty.
  std::string StopReason(const RunOptions& options, absl::Duration wait) const;
  // Goes down `plan` alone, skipping the targets `result` already tried.
  LoopResult RunStatic(const std::string& chain, const std::string& decision_id,
                       const std::vector<v1::Attempt>& plan, const AttemptFn& attempt, const RunOptions& options,
                       LoopResult result);
  // The first two attempts of a hedged plan (see the top of this file).
  struct HedgeResult;
  struct HedgeRace;
  HedgeResult Hedge(const std::string& chain, const v1::PickTargetResponse& plan, const AttemptFn& attempt,
                    CallBudget* budget);
  void StartRacer(const std::shared_ptr<HedgeRace>& race, int i);
  v1::ReportOutcomeRequest RacerReport(const HedgeRace& race, int i);

  std::shared_ptr<v1::DecisionService::StubInterface> stub_;
  ClientOptions options_;
  mutable std::mutex mu_;
  std::map<std::string, std::vector<v1::Attempt>> last_plan_;  // guarded by mu_
  std::deque<v1::ReportOutcomeRequest> buffered_;               // guarded by mu_
  size_t dropped_ = 0;                                          // guarded by mu_
  // Report ids (DESIGN 3.14, invariant 4): this client's random sender id and
  // the next sequence. A report gets its id when it is first sent, so a
  // resent batch is recognised and counted once.
  const std::string sender_id_;
  uint64_t next_report_sequence_ = 1;  // guarded by mu_
  void StampLocked(v1::ReportOutcomeRequest* req);
  // Drops one report of a full backlog: the oldest success, else the oldest.
  void DropOneLocked();
  // failoverd did not answer: skip it until then (guarded by mu_).
  absl::Time down_until_ = absl::InfinitePast();
  absl::Duration down_backoff_ = absl::ZeroDuration();
  // Records whether failoverd answered the last call (backs off when not).
  void NoteReached(bool reached);
  bool SkippingFailoverd();
  // Asks failoverd whether it answers (an empty StreamOutcomes), notes the answer.
  bool ProbeFailoverd();
  // While failoverd is down, how long to wait before asking it again; else infinite.
  absl::Duration ProbeInterval() const;
  // The background flusher (options_.background_flush): the one owner of the
  // backlog's delivery.
  void FlushLoop();
  void WakeFlusher();
  // Sends the backlog in ReportOutcomes calls of up to kBatch reports
  // (StreamOutcomes calls to a failoverd from before it, one call per report
  // to one without either); returns how many were delivered. A batch cut off
  // mid-way is sent again whole; its report ids make failoverd count each
  // report once.
  size_t FlushBatches();
  // One batch in one call. Empty when failoverd takes no batches; `unreachable`
  // tells a failed call's failoverd apart from one that refused the batch.
  std::optional<grpc::Status> SendBatch(const v1::ReportOutcomesRequest& batch, v1::StreamOutcomesResponse* summary,
                                        bool* unreachable);
  void Requeue(v1::ReportOutcomesRequest batch);
  static constexpr size_t kBatch = 256;
  // How long a failoverd that refused ReportOutcomes is sent streams before it is asked again.
  static constexpr absl::Duration kAskForBatchesAgain = absl::Minutes(1);
  absl::Time streams_until_ = absl::InfinitePast();  // guarded by mu_
  std::mutex flusher_mu_;
  std::condition_variable flusher_wake_;
  bool flusher_woken_ = false;   // guarded by flusher_mu_
  bool flusher_stop_ = false;    // guarded by flusher_mu_
  std::thread flusher_;
  // Hedged attempts (and a loser's report). Made at the start of ~Client's
  // work and ended first: it waits for attempts still running.
  std::unique_ptr<AttemptPool> attempt_pool_ = std::make_unique<AttemptPool>();
};

}  // namespace failover::client
