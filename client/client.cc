#include "client/client.h"

#include <algorithm>
#include <condition_variable>
#include <memory>
#include <optional>
#include <random>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/trailers.h"
#include "common/report_sender.h"

namespace failover::client {
namespace {

// Only a failure of the transport means failoverd cannot be reached. An
// answer from failoverd itself (UNAVAILABLE when an admin took every target
// out, NOT_FOUND for a deleted chain) carries the failoverd-answered trailer
// and is a decision to follow, not a reason to go fail-static.
bool Unreachable(const grpc::Status& s, const grpc::ClientContext& ctx) {
  if (s.error_code() != grpc::StatusCode::UNAVAILABLE && s.error_code() != grpc::StatusCode::DEADLINE_EXCEEDED) {
    return false;
  }
  return ctx.GetServerTrailingMetadata().count(kAnsweredTrailer) == 0;
}

absl::Duration FromProto(const google::protobuf::Duration& d) {
  return absl::Seconds(d.seconds()) + absl::Nanoseconds(d.nanos());
}

void ToProto(absl::Duration d, google::protobuf::Duration* out) {
  out->set_seconds(absl::ToInt64Seconds(d));
  out->set_nanos(static_cast<int32_t>(absl::ToInt64Nanoseconds(d - absl::Seconds(out->seconds()))));
}

// Writes the report of one attempt over `req` (whose strings keep their
// allocations when it is used again).
void FillReport(const std::string& chain, const std::string& decision_id, const std::string& target,
                uint32_t number, const AttemptOutcome& out, v1::ReportOutcomeRequest* req) {
  req->Clear();
  req->set_chain(chain);
  req->set_decision_id(decision_id);
  req->set_target(target);
  req->set_attempt(number);
  if (out.ok) {
    req->mutable_success();
  } else {
    *req->mutable_failure() = out.failure;
  }
  if (out.latency > absl::ZeroDuration()) ToProto(out.latency, req->mutable_latency());
}

v1::ReportOutcomeRequest MakeReport(const std::string& chain, const std::string& decision_id,
                                    const std::string& target, uint32_t number, const AttemptOutcome& out) {
  v1::ReportOutcomeRequest req;
  FillReport(chain, decision_id, target, number, out, &req);
  return req;
}

std::string Describe(const v1::Failure& f) {
  if (f.http_status() != 0) return absl::StrCat(f.http_status(), f.message().empty() ? "" : " ", f.message());
  if (!f.message().empty()) return f.message();
  return "failed";
}

// One request's own messages, which its thread keeps for its next request:
// cleared, a message keeps its strings and repeated elements allocated, so
// from the second request on a plan, a pick and a verdict cost no allocation,
// nor does a report that joins the backlog's last one.
// A Run inside an attempt (on the same thread) gets new ones.
struct RequestMessages {
  v1::PickTargetRequest pick;
  v1::PickTargetResponse plan;
  v1::ReportOutcomeRequest report;
  v1::ReportOutcomeResponse verdict;
  bool in_use = false;
};

class BorrowedMessages {
 public:
  BorrowedMessages() {
    thread_local RequestMessages kept;
    if (kept.in_use) {  // a Run inside an attempt: messages of its own
      own_ = std::make_unique<RequestMessages>();
      messages_ = own_.get();
      return;
    }
    kept.in_use = true;
    kept.pick.Clear();
    kept.plan.Clear();
    messages_ = &kept;
  }
  ~BorrowedMessages() {
    if (!own_) messages_->in_use = false;
  }
  BorrowedMessages(const BorrowedMessages&) = delete;
  BorrowedMessages& operator=(const BorrowedMessages&) = delete;

  RequestMessages* operator->() const { return messages_; }

 private:
  std::unique_ptr<RequestMessages> own_;
  RequestMessages* messages_;
};

}  // namespace

Client::Client(std::shared_ptr<v1::DecisionService::StubInterface> stub, ClientOptions options)
    : stub_(std::move(stub)), options_(std::move(options)), sender_id_(NewReportSender()) {
  if (!options_.sleep) options_.sleep = [](absl::Duration d) { absl::SleepFor(d); };
  if (!options_.now) options_.now = [] { return absl::Now(); };
  if (options_.background_flush) flusher_ = std::thread([this] { FlushLoop(); });
}

Client::~Client() {
  attempt_pool_.reset();  // a losing hedge may still report or buffer
  {
    std::lock_guard<std::mutex> lock(flusher_mu_);
    flusher_stop_ = true;
  }
  flusher_wake_.notify_all();
  if (flusher_.joinable()) flusher_.join();
}

void Client::WakeFlusher() {
  if (!options_.background_flush) return;
  {
    std::lock_guard<std::mutex> lock(flusher_mu_);
    flusher_woken_ = true;
  }
  flusher_wake_.notify_all();
}

void Client::FlushLoop() {
  std::unique_lock<std::mutex> lock(flusher_mu_);
  while (!flusher_stop_) {
    // While failoverd is down, this thread alone asks it again (after the
    // backoff) whether it answers; requests meanwhile go fail-static at once.
    const absl::Duration probe_after = ProbeInterval();
    const bool down = probe_after != absl::InfiniteDuration();
    flusher_wake_.wait_for(lock, absl::ToChronoMilliseconds(down ? probe_after : options_.flush_interval),
                           [&] { return flusher_stop_ || (flusher_woken_ && !down); });
    flusher_woken_ = false;
    if (flusher_stop_) return;
    lock.unlock();
    if (!down || ProbeFailoverd()) {
      if (buffered_reports() > 0) FlushBatches();
    }
    lock.lock();
  }
}

absl::StatusOr<std::unique_ptr<Client>> Client::Connect(ClientOptions options) {
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel = OpenChannel(options.connection);
  if (!channel.ok()) return channel.status();
  return std::make_unique<Client>(v1::DecisionService::NewStub(*channel), std::move(options));
}

void Client::SetDeclaredOrder(const std::string& chain, std::vector<v1::Attempt> attempts) {
  std::lock_guard<std::mutex> lock(mu_);
  last_plan_.emplace(chain, std::move(attempts));  // a plan seen from failoverd wins
}

size_t Client::buffered_reports() const {
  std::lock_guard<std::mutex> lock(mu_);
  size_t outcomes = 0;
  for (const v1::ReportOutcomeRequest& r : buffered_) outcomes += std::max<uint32_t>(r.count(), 1);
  return outcomes;
}

size_t Client::Buffer(v1::ReportOutcomeRequest* req) {
  std::lock_guard<std::mutex> lock(mu_);
  if (CoalesceLocked(*req)) return buffered_.size();
  buffered_.push_back(std::move(*req));
  while (buffered_.size() > options_.max_buffered_reports) DropOneLocked();
  return buffered_.size();
}

void Client::DropOneLocked() {
  // The oldest success goes first: during an outage successes pile up, and the
  // failures are what decide whether a target trips.
  auto victim = std::find_if(buffered_.begin(), buffered_.end(),
                             [](const v1::ReportOutcomeRequest& r) { return r.has_success(); });
  if (victim == buffered_.end()) victim = buffered_.begin();
  dropped_ += std::max<uint32_t>(victim->count(), 1);
  buffered_.erase(victim);
}

void Client::StampLocked(v1::ReportOutcomeRequest* req) {
  if (req->has_report_id()) return;  // sent before: the same id again
  req->mutable_report_id()->set_sender(sender_id_);
  req->mutable_report_id()->set_sequence(next_report_sequence_++);
}

bool Client::CoalesceLocked(const v1::ReportOutcomeRequest& req) {
  constexpr uint32_t kMaxCount = 10000;  // failoverd's bound on ReportOutcomeRequest.count
  if (!req.has_success() || buffered_.empty()) return false;
  v1::ReportOutcomeRequest& last = buffered_.back();
  // One that was sent (and came back) keeps what its id stands for.
  if (last.has_report_id() || req.has_report_id()) return false;
  const uint32_t n = std::max<uint32_t>(last.count(), 1);
  if (!last.has_success() || last.target() != req.target() || last.chain() != req.chain() ||
      last.has_latency() != req.has_latency() || last.hedged() || req.hedged() || n >= kMaxCount) {
    return false;
  }
  if (req.has_latency()) {  // the mean over the n + 1 successes
    const absl::Duration mean = FromProto(last.latency()) + (FromProto(req.latency()) - FromProto(last.latency())) / (n + 1);
    ToProto(mean, last.mutable_latency());
  }
  last.set_count(n + 1);
  last.clear_decision_id();  // one report for many decisions: the chain names the context
  last.set_attempt(0);
  return true;
}

size_t Client::dropped_reports() const {
  std::lock_guard<std::mutex> lock(mu_);
  return dropped_;
}

void Client::NoteReached(bool reached) {
  std::unique_lock<std::mutex> lock(mu_);
  if (reached) {
    const bool was_down = down_until_ != absl::InfinitePast();
    down_backoff_ = absl::ZeroDuration();
    down_until_ = absl::InfinitePast();
    const bool backlog = !buffered_.empty();
    lock.unlock();
    if (was_down && backlog) WakeFlusher();  // failoverd is back: send what waited for it
    return;
  }
  const bool was_up = down_until_ == absl::InfinitePast();
  down_backoff_ = down_backoff_ == absl::ZeroDuration() ? options_.down_backoff
                                                        : std::min(down_backoff_ * 2, options_.max_down_backoff);
  down_until_ = options_.now() + down_backoff_;
  lock.unlock();
  // The client's thread may be waiting out flush_interval: it starts the
  // backoff from now, so failoverd is asked again after the backoff alone.
  if (was_up) WakeFlusher();
}

bool Client::SkippingFailoverd() {
  std::lock_guard<std::mutex> lock(mu_);
  // With a thread of its own, the client asks failoverd again from there: no
  // request waits on a failoverd that did not answer until it answers again.
  if (options_.background_flush) return down_until_ != absl::InfinitePast();
  return options_.now() < down_until_;
}

bool Client::ProbeFailoverd() {
  grpc::ClientContext ctx;
  PrepareContext(options_.connection, &ctx);
  v1::StreamOutcomesResponse summary;
  grpc::Status s;
  // An empty StreamOutcomes changes nothing and counts as no error.
  std::unique_ptr<grpc::ClientWriterInterface<v1::ReportOutcomeRequest>> writer =
      stub_->StreamOutcomes(&ctx, &summary);
  if (writer != nullptr) {
    writer->WritesDone();
    s = writer->Finish();
  } else {  // a stub without streaming (a test double): any answer will do
    v1::PickTargetResponse plan;
    s = stub_->PickTarget(&ctx, v1::PickTargetRequest(), &plan);
  }
  const bool reached = s.ok() || !Unreachable(s, ctx);
  NoteReached(reached);
  return reached;
}

absl::Duration Client::ProbeInterval() const {
  std::lock_guard<std::mutex> lock(mu_);
  return down_until_ == absl::InfinitePast() ? absl::InfiniteDuration() : down_backoff_;
}

void Client::CallBudget::Prepare(const ConnectionOptions& connection, grpc::ClientContext* ctx) {
  PrepareContext(connection, ctx);
  const auto now = std::chrono::system_clock::now();
  const auto end = now + absl::ToChronoMicroseconds(std::max(left_, absl::ZeroDuration()));
  if (ctx->deadline() > end) ctx->set_deadline(end);
  started_ = std::chrono::steady_clock::now();
}

void Client::CallBudget::Spend() { left_ -= absl::FromChrono(std::chrono::steady_clock::now() - started_); }

Client::Sent Client::Report(v1::ReportOutcomeRequest* request, v1::ReportOutcomeResponse* resp,
                            std::string* refusal, CallBudget* budget) {
  const v1::ReportOutcomeRequest& req = *request;
  if (options_.local != nullptr && options_.local->Ready()) {
    const grpc::Status s = options_.local->Report(req, resp);
    if (!s.ok()) {
      *refusal = s.error_message();
      return Sent::kRefused;
    }
    // failoverd counts it too and decides whether the target trips; the
    // verdict above came from the local copy. The local decision id means
    // nothing to failoverd: the chain names the context.
    const bool failure = req.has_failure();
    request->clear_decision_id();
    const size_t backlog = Buffer(request);
    // A failure may trip the target, which should reach every caller soon; a
    // full batch goes before the buffer could overflow.
    if (failure || backlog >= kBatch) WakeFlusher();
    return Sent::kDelivered;
  }
  if (req.has_success() && options_.background_flush && options_.report_successes_in_background) {
    // A success's verdict is always DONE: no request waits for failoverd to
    // say so. The report goes with the backlog, from the client's thread.
    if (Buffer(request) >= kBatch) WakeFlusher();
    resp->set_verdict(v1::VERDICT_DONE);
    return Sent::kDelivered;
  }
  if (SkippingFailoverd()) return Sent::kUnreachable;
  {
    std::lock_guard<std::mutex> lock(mu_);
    StampLocked(request);
  }
  grpc::ClientContext ctx;
  budget->Prepare(options_.connection, &ctx);
  const grpc::Status s = stub_->ReportOutcome(&ctx, req, resp);
  budget->Spend();
  const bool unreachable = !s.ok() && Unreachable(s, ctx);
  NoteReached(!unreachable);
  if (s.ok()) return Sent::kDelivered;
  if (unreachable) return Sent::kUnreachable;
  *refusal = s.error_message();
  return Sent::kRefused;
}

namespace {

// Whether two attempts say the same: the order a fail-static run would use
// needs copying only when a plan differs from it. Every field of Attempt
// (client_test checks that none was added without a line here).
bool SameAttempt(const v1::Attempt& a, const v1::Attempt& b) {
  if (a.target() != b.target() || a.upstream_model() != b.upstream_model() || a.max_retries() != b.max_retries() ||
      a.position() != b.position() || a.health() != b.health() || a.has_timeout() != b.has_timeout() ||
      a.timeout().seconds() != b.timeout().seconds() || a.timeout().nanos() != b.timeout().nanos() ||
      a.labels_size() != b.labels_size()) {
    return false;
  }
  for (const auto& [key, value] : a.labels()) {
    auto it = b.labels().find(key);
    if (it == b.labels().end() || it->second != value) return false;
  }
  return true;
}

}  // namespace

void Client::RememberPlan(const std::string& chain, const google::protobuf::RepeatedPtrField<v1::Attempt>& attempts) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<v1::Attempt>& order = last_plan_[chain];
  if (std::equal(order.begin(), order.end(), attempts.begin(), attempts.end(), SameAttempt)) return;
  order.assign(attempts.begin(), attempts.end());
}

void Client::Promote(const std::string& chain, const std::string& target) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = last_plan_.find(chain);
  if (it == last_plan_.end()) return;
  auto& order = it->second;
  auto pos = std::find_if(order.begin(), order.end(), [&](const v1::Attempt& a) { return a.target() == target; });
  if (pos != order.end()) std::rotate(order.begin(), pos, pos + 1);
}

size_t Client::Flush(size_t limit) {
  size_t delivered = 0;
  if (SkippingFailoverd()) return 0;
  for (size_t sent = 0; sent < limit; ++sent) {
    // Taken out under the lock, so threads flushing at once each send a
    // different report (and never pop a deque another thread emptied).
    v1::ReportOutcomeRequest req;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (buffered_.empty()) return delivered;
      req = std::move(buffered_.front());
      buffered_.pop_front();
      StampLocked(&req);
    }
    v1::ReportOutcomeResponse resp;
    grpc::ClientContext ctx;
    PrepareContext(options_.connection, &ctx);
    const grpc::Status s = stub_->ReportOutcome(&ctx, req, &resp);
    const bool unreachable = !s.ok() && Unreachable(s, ctx);
    NoteReached(!unreachable);
    if (unreachable) {
      // Keep it for later, in front, unless the bound is full of newer ones.
      std::lock_guard<std::mutex> lock(mu_);
      if (buffered_.size() < options_.max_buffered_reports) {
        buffered_.push_front(std::move(req));
      } else {
        ++dropped_;
      }
      return delivered;
    }
    if (s.ok()) delivered += std::max<uint32_t>(req.count(), 1);  // otherwise refused for good
  }
  return delivered;
}

void Client::Requeue(v1::ReportOutcomesRequest batch) {
  std::lock_guard<std::mutex> lock(mu_);
  for (int i = batch.outcomes_size() - 1; i >= 0; --i) {
    if (buffered_.size() < options_.max_buffered_reports) {
      buffered_.push_front(std::move(*batch.mutable_outcomes(i)));
    } else {
      ++dropped_;  // the bound is full of newer ones
    }
  }
}

std::optional<grpc::Status> Client::SendBatch(const v1::ReportOutcomesRequest& batch,
                                              v1::StreamOutcomesResponse* summary, bool* unreachable) {
  bool ask_for_batches;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ask_for_batches = options_.now() >= streams_until_;
  }
  if (ask_for_batches) {
    grpc::ClientContext ctx;
    PrepareContext(options_.connection, &ctx);
    const grpc::Status s = stub_->ReportOutcomes(&ctx, batch, summary);
    if (s.error_code() != grpc::StatusCode::UNIMPLEMENTED) {
      *unreachable = !s.ok() && Unreachable(s, ctx);
      return s;
    }
    // A failoverd from before ReportOutcomes gets streams for a while, not a
    // refused call before each batch; asked again later, as it may have been
    // upgraded. The refusal counted nothing.
    std::lock_guard<std::mutex> lock(mu_);
    streams_until_ = options_.now() + kAskForBatchesAgain;
  }
  grpc::ClientContext ctx;
  PrepareContext(options_.connection, &ctx);
  std::unique_ptr<grpc::ClientWriterInterface<v1::ReportOutcomeRequest>> writer =
      stub_->StreamOutcomes(&ctx, summary);
  if (writer == nullptr) return std::nullopt;  // a stub without streaming (a test double)
  for (const v1::ReportOutcomeRequest& r : batch.outcomes()) {
    if (!writer->Write(r)) break;
  }
  writer->WritesDone();
  const grpc::Status s = writer->Finish();
  if (s.error_code() == grpc::StatusCode::UNIMPLEMENTED) return std::nullopt;  // older still
  *unreachable = !s.ok() && Unreachable(s, ctx);
  return s;
}

size_t Client::FlushBatches() {
  size_t delivered = 0;
  while (!SkippingFailoverd()) {
    v1::ReportOutcomesRequest batch;
    {
      std::lock_guard<std::mutex> lock(mu_);
      while (!buffered_.empty() && static_cast<size_t>(batch.outcomes_size()) < kBatch) {
        v1::ReportOutcomeRequest* report = batch.add_outcomes();
        *report = std::move(buffered_.front());
        buffered_.pop_front();
        StampLocked(report);
      }
    }
    if (batch.outcomes().empty()) return delivered;
    v1::StreamOutcomesResponse summary;
    bool unreachable = false;
    const std::optional<grpc::Status> s = SendBatch(batch, &summary, &unreachable);
    if (!s) {  // failoverd takes no batches: one call per report
      Requeue(std::move(batch));
      return delivered + Flush();
    }
    if (s->ok()) {
      NoteReached(true);
      // Refused ones would never be accepted: gone. (Counted in outcomes
      // unless some were refused; then in reports.)
      size_t outcomes = 0;
      for (const v1::ReportOutcomeRequest& r : batch.outcomes()) outcomes += std::max<uint32_t>(r.count(), 1);
      delivered += summary.refused() == 0 ? outcomes : summary.accepted();
      continue;
    }
    NoteReached(!unreachable);
    if (!unreachable) continue;  // refused as a whole by failoverd itself: sending again would not help
    Requeue(std::move(batch));
    return delivered;
  }
  return delivered;
}

LoopResult Client::Run(const std::string& chain, const std::function<AttemptOutcome(const v1::Attempt&)>& attempt,
                       uint64_t body_bytes) {
  RunOptions options;
  options.body_bytes = body_bytes;
  return Run(
      chain, [&](const v1::Attempt& a, const AttemptContext&) { return attempt(a); }, options);
}

struct Client::HedgeResult {
  // Not hedged: the first attempt answered within hedge_after. Its outcome,
  // not reported yet.
  bool hedged = false;
  AttemptOutcome first;
  // Hedged: the winner was reported, then the loser if it had finished too
  // (else it reports itself from the pool when it returns); both failing, both
  // were reported in the order they finished. Buffered when failoverd could not
  // be reached.
  std::vector<AttemptRecord> records;
  bool reached = true;
  bool refused = false;  // failoverd answered a report with an error
  std::string refusal;
  std::string served_by;  // the first success, if any
  std::string response;   // its response
  // The verdict on the attempt that finished last, which decides what follows.
  v1::Attempt last_attempt;
  v1::ReportOutcomeResponse last_verdict;
};

// The two attempts of one hedged request. Shared with the pool's threads: the
// losing attempt may still run after Run has returned with the winner.
struct Client::HedgeRace {
  struct Racer {
    v1::Attempt target;
    AttemptContext ctx;
    std::atomic<bool> cancel{false};
    AttemptOutcome out;
    bool done = false;  // guarded by mu
  };
  std::string chain;
  std::string decision_id;
  AttemptFn attempt;  // a copy, for the same reason
  std::mutex mu;
  std::condition_variable finished_cv;
  Racer racers[2];
  std::vector<int> finished;  // racers in the order they answered; guarded by mu
  bool abandoned = false;     // Run has returned: a racer that finishes now reports itself; guarded by mu
};

void Client::StartRacer(const std::shared_ptr<HedgeRace>& race, int i) {
  attempt_pool_->Run([this, race, i] {
    HedgeRace::Racer& r = race->racers[i];
    AttemptOutcome out = race->attempt(r.target, r.ctx);
    bool report_here = false;
    {
      std::lock_guard<std::mutex> lock(race->mu);
      r.out = std::move(out);
      r.done = true;
      race->finished.push_back(i);
      report_here = race->abandoned;
    }
    race->finished_cv.notify_all();
    if (report_here) {
      // The loser of a race Run no longer waits for, reported from here.
      CallBudget budget(options_.failoverd_budget);
      v1::ReportOutcomeResponse verdict;
      std::string refusal;
      v1::ReportOutcomeRequest report = RacerReport(*race, i);
      if (Report(&report, &verdict, &refusal, &budget) == Sent::kUnreachable) Buffer(&report);
    }
  });
}

v1::ReportOutcomeRequest Client::RacerReport(const HedgeRace& race, int i) {
  const HedgeRace::Racer& r = race.racers[i];
  AttemptOutcome out = r.out;
  if (!out.ok && r.cancel.load(std::memory_order_acquire)) {
    // Told to stop: whatever it returned, it is not a failure of its target.
    out.failure = v1::Failure();
    out.failure.set_cancelled(true);
    out.failure.set_message("cancelled: another attempt served the request");
  }
  v1::ReportOutcomeRequest report = MakeReport(race.chain, race.decision_id, r.target.target(), r.ctx.number, out);
  report.set_hedged(r.ctx.hedged);
  return report;
}

Client::HedgeResult Client::Hedge(const std::string& chain, const v1::PickTargetResponse& plan,
                                  const AttemptFn& attempt, CallBudget* budget) {
  auto race = std::make_shared<HedgeRace>();
  race->chain = chain;
  race->decision_id = plan.decision_id();
  race->attempt = attempt;
  for (int i = 0; i < 2; ++i) {
    race->racers[i].target = plan.attempts(i);
    race->racers[i].ctx = AttemptContext{static_cast<uint32_t>(i + 1), /*hedged=*/i == 1, &race->racers[i].cancel};
  }
  HedgeResult h;
  StartRacer(race, 0);
  std::unique_lock<std::mutex> lock(race->mu);
  if (race->finished_cv.wait_for(lock, absl::ToChronoNanoseconds(FromProto(plan.hedge_after())),
                                 [&] { return !race->finished.empty(); })) {
    h.first = std::move(race->racers[0].out);
    return h;
  }
  h.hedged = true;
  lock.unlock();
  StartRacer(race, 1);
  lock.lock();
  // The first success tells the other attempt to stop; Run returns with it at
  // once. Both failing: both are reported and the last verdict decides.
  race->finished_cv.wait(lock, [&] {
    for (int i : race->finished) {
      if (race->racers[i].out.ok) return true;
    }
    return race->finished.size() == 2;
  });
  int winner = -1;
  for (int i : race->finished) {
    if (race->racers[i].out.ok) {
      winner = i;
      break;
    }
  }
  std::vector<int> to_report = race->finished;
  if (winner >= 0) {
    race->racers[1 - winner].cancel.store(true, std::memory_order_release);
    to_report = {winner};
    if (race->racers[1 - winner].done) {
      to_report.push_back(1 - winner);
    } else {
      race->abandoned = true;  // the loser reports itself when it returns
    }
  }
  lock.unlock();
  for (int i : to_report) {
    const HedgeRace::Racer& r = race->racers[i];
    v1::ReportOutcomeRequest report = RacerReport(*race, i);
    AttemptRecord record{r.target.target(), r.ctx.number, r.out.ok, v1::VERDICT_UNSPECIFIED, r.ctx.hedged};
    record.latency = r.out.latency;
    v1::ReportOutcomeResponse verdict;
    switch (Report(&report, &verdict, &h.refusal, budget)) {
      case Sent::kDelivered:
        record.verdict = verdict.verdict();
        record.reason = verdict.reason();
        h.last_verdict = verdict;
        break;
      case Sent::kUnreachable:
        Buffer(&report);
        h.reached = false;
        break;
      case Sent::kRefused:
        h.refused = true;
        break;
    }
    h.records.push_back(record);
    h.last_attempt = r.target;
    if (r.out.ok && h.served_by.empty()) {
      h.served_by = r.target.target();
      h.response = r.out.response;
    }
  }
  if (winner >= 0 && to_report.size() == 1) {
    // The loser is still running: on the record, told to stop, not yet reported.
    const HedgeRace::Racer& loser = race->racers[1 - winner];
    h.records.push_back(AttemptRecord{loser.target.target(), loser.ctx.number, false, v1::VERDICT_UNSPECIFIED,
                                      loser.ctx.hedged});
  }
  return h;
}

LoopResult Client::Run(const std::string& chain, const AttemptFn& attempt, const RunOptions& options) {
  if (!options_.background_flush && buffered_reports() > 0) Flush(options_.flush_per_request);
  LoopResult result;
  BorrowedMessages messages;
  v1::PickTargetRequest& pick = messages->pick;
  pick.set_chain(chain);
  pick.set_body_bytes(options.body_bytes);
  if (!options.session_key.empty()) pick.set_session_key(options.session_key);
  if (!options.request_id.empty()) pick.set_request_id(options.request_id);
  for (const std::string& t : options.exclude_targets) pick.add_exclude_targets(t);
  CallBudget budget(options_.failoverd_budget);
  v1::PickTargetResponse& plan = messages->plan;
  // From the local copy when there is one; else from failoverd, unless it did
  // not answer a moment ago: then fail-static at once rather than wait out
  // another deadline.
  const bool local = options_.local != nullptr && options_.local->Ready();
  result.decided_locally = local;
  grpc::Status picked;
  bool unreachable = false;
  if (local) {
    picked = options_.local->Pick(pick, &plan);
  } else if (SkippingFailoverd()) {
    picked = grpc::Status(grpc::StatusCode::UNAVAILABLE, "failoverd did not answer recently");
    unreachable = true;
  } else {
    grpc::ClientContext ctx;
    budget.Prepare(options_.connection, &ctx);
    picked = stub_->PickTarget(&ctx, pick, &plan);
    budget.Spend();
    unreachable = !picked.ok() && Unreachable(picked, ctx);
    NoteReached(!unreachable);
  }
  if (!picked.ok()) {
    if (!unreachable) {
      result.error = picked.error_message();
      return result;
    }
    std::vector<v1::Attempt> cached;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = last_plan_.find(chain);
      if (it != last_plan_.end()) cached = it->second;
    }
    if (cached.empty()) {
      result.error = absl::StrCat("failoverd unreachable (", picked.error_message(), ") and no plan known for chain ",
                                  chain);
      return result;
    }
    return RunStatic(chain, "", cached, attempt, options, std::move(result));
  }
  if (plan.attempts().empty()) {
    result.error = absl::StrCat("failoverd returned an empty plan for chain ", chain);
    return result;
  }
  RememberPlan(chain, plan.attempts());
  // The plan's attempts stay in `plan` (copied only to go fail-static); one
  // failoverd names later (TRY_NEXT) is moved into `named`.
  const auto plan_copy = [&plan] { return std::vector<v1::Attempt>(plan.attempts().begin(), plan.attempts().end()); };
  const v1::Attempt* current = &plan.attempts(0);
  v1::Attempt named;
  uint32_t number = 1;
  std::optional<AttemptOutcome> ready;  // the current attempt's outcome, already in hand
  if (options.idempotent && plan.attempts_size() >= 2 && FromProto(plan.hedge_after()) > absl::ZeroDuration()) {
    HedgeResult h = Hedge(chain, plan, attempt, &budget);
    if (!h.hedged) {
      ready = std::move(h.first);
    } else {
      result.attempts = std::move(h.records);
      if (!h.served_by.empty()) {
        result.ok = true;
        result.served_by = h.served_by;
        result.response = std::move(h.response);
        result.fail_static = !h.reached;
        Promote(chain, h.served_by);
        return result;
      }
      if (h.refused) {
        result.error = absl::StrCat("failoverd refused the report: ", h.refusal);
        return result;
      }
      if (!h.reached) {
        return RunStatic(chain, plan.decision_id(), plan_copy(), attempt, options, std::move(result));
      }
      // Both failed: the verdict on the last one decides.
      number = 3;
      switch (h.last_verdict.verdict()) {
        case v1::VERDICT_RETRY_SAME:
          if (std::string stop = StopReason(options, FromProto(h.last_verdict.retry_delay())); !stop.empty()) {
            result.error = stop;
            return result;
          }
          options_.sleep(FromProto(h.last_verdict.retry_delay()));
          named = std::move(h.last_attempt);
          current = &named;
          break;
        case v1::VERDICT_TRY_NEXT:
          named = std::move(*h.last_verdict.mutable_next_attempt());
          current = &named;
          break;
        default:
          result.error = h.last_verdict.error();
          return result;
      }
    }
  }
  for (; number <= options_.max_steps; ++number) {
    AttemptOutcome out;
    if (ready) {
      out = std::move(*ready);
      ready.reset();
    } else {
      if (std::string stop = StopReason(options, absl::ZeroDuration()); !stop.empty()) {
        result.error = stop;
        return result;
      }
      out = attempt(*current, AttemptContext{number, false, nullptr});
    }
    AttemptRecord record{current->target(), number, out.ok, v1::VERDICT_UNSPECIFIED, false};
    record.latency = out.latency;
    v1::ReportOutcomeRequest& report = messages->report;
    FillReport(chain, plan.decision_id(), current->target(), number, out, &report);
    v1::ReportOutcomeResponse& verdict = messages->verdict;
    verdict.Clear();
    std::string refusal;
    const Sent sent = Report(&report, &verdict, &refusal, &budget);
    if (sent == Sent::kRefused) {
      // failoverd answered (the chain was deleted, say): not fail-static.
      result.attempts.push_back(record);
      result.ok = out.ok;
      if (out.ok) {
        result.served_by = current->target();
        result.response = std::move(out.response);
      } else {
        result.error = absl::StrCat("failoverd refused the report: ", refusal);
      }
      return result;
    }
    if (sent == Sent::kUnreachable) {
      // failoverd went away mid-request: keep the report, carry on down the plan.
      Buffer(&report);
      result.attempts.push_back(record);
      if (out.ok) {
        result.ok = true;
        result.served_by = current->target();
        result.response = std::move(out.response);
        result.fail_static = true;
        Promote(chain, current->target());
        return result;
      }
      return RunStatic(chain, plan.decision_id(), plan_copy(), attempt, options, std::move(result));
    }
    record.verdict = verdict.verdict();
    record.reason = verdict.reason();
    result.attempts.push_back(record);
    switch (verdict.verdict()) {
      case v1::VERDICT_DONE:
        result.ok = out.ok;
        result.served_by = current->target();
        if (out.ok) result.response = std::move(out.response);
        // The plan just remembered starts with its first attempt already.
        if (current != &plan.attempts(0)) Promote(chain, current->target());
        return result;
      case v1::VERDICT_RETRY_SAME:
        if (std::string stop = StopReason(options, FromProto(verdict.retry_delay())); !stop.empty()) {
          result.error = stop;
          return result;
        }
        options_.sleep(FromProto(verdict.retry_delay()));
        break;
      case v1::VERDICT_TRY_NEXT:
        named = std::move(*verdict.mutable_next_attempt());
        current = &named;
        break;
      default:
        result.error = verdict.error().empty() ? Describe(out.failure) : verdict.error();
        return result;
    }
  }
  result.error = absl::StrCat("gave up after ", options_.max_steps, " attempts");
  return result;
}

std::string Client::StopReason(const RunOptions& options, absl::Duration wait) const {
  if (options.cancelled != nullptr && options.cancelled->load(std::memory_order_acquire)) {
    return "cancelled by the caller";
  }
  // No deadline, no clock to read (a read is most of this on a VM's clock).
  if (options.deadline != absl::InfiniteFuture() && options_.now() + wait >= options.deadline) {
    return wait > absl::ZeroDuration()
               ? absl::StrCat("the request's deadline comes before the retry delay (", absl::FormatDuration(wait),
                              ") ends")
               : "the request's deadline passed before the next attempt";
  }
  return "";
}

LoopResult Client::RunStatic(const std::string& chain, const std::string& decision_id,
                             const std::vector<v1::Attempt>& plan, const AttemptFn& attempt,
                             const RunOptions& options, LoopResult result) {
  result.fail_static = true;
  std::vector<std::string> failures;
  uint32_t number = static_cast<uint32_t>(result.attempts.size());
  const auto tried = [&result](const std::string& target) {
    return std::any_of(result.attempts.begin(), result.attempts.end(),
                       [&target](const AttemptRecord& r) { return r.target == target; });
  };
  for (const v1::Attempt& a : plan) {
    if (tried(a.target())) continue;  // on the plan failoverd gave, before it went away
    if (std::string stop = StopReason(options, absl::ZeroDuration()); !stop.empty()) {
      result.error = stop;
      return result;
    }
    ++number;
    const AttemptOutcome out = attempt(a, AttemptContext{number, false, nullptr});
    v1::ReportOutcomeRequest report = MakeReport(chain, decision_id, a.target(), number, out);
    Buffer(&report);
    AttemptRecord record{a.target(), number, out.ok, v1::VERDICT_UNSPECIFIED, false};
    record.latency = out.latency;
    result.attempts.push_back(record);
    if (out.ok) {
      result.ok = true;
      result.served_by = a.target();
      result.response = out.response;
      Promote(chain, a.target());
      return result;
    }
    failures.push_back(absl::StrCat(a.target(), ": ", Describe(out.failure)));
  }
  result.error = absl::StrCat("every target failed (failoverd unreachable): ", absl::StrJoin(failures, "; "));
  return result;
}

}  // namespace failover::client
