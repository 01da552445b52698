#include "client/local_decisions.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "client/connection.h"
#include "common/clock.h"
#include "common/report_sender.h"
#include "proto/read_ahead.h"
#include "proto/state_convert.h"
#include "server/api/decision_convert.h"
#include "server/api/status_convert.h"
#include "server/engine/engine.h"

namespace failover::client {

struct LocalDecisions::Copy {
  std::unique_ptr<Engine> engine;  // follows failoverd's; decides as its own does, through api's conversions
};

LocalDecisions::LocalDecisions(std::shared_ptr<v1::DecisionService::StubInterface> stub, ConnectionOptions connection,
                               LocalOptions options)
    : stub_(std::move(stub)),
      connection_(std::move(connection)),
      options_(options),
      clock_(std::make_unique<RealClock>()),
      requester_(NewReportSender()),
      thread_([this] { Follow(); }),
      watchdog_([this] { Watch(); }),
      leaser_([this] { Lease(); }) {}

LocalDecisions::~LocalDecisions() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    if (stream_ != nullptr) stream_->TryCancel();
  }
  changed_.notify_all();
  thread_.join();
  watchdog_.join();
  leaser_.join();
  GiveBackRpm();
}

void LocalDecisions::GiveBackRpm() {
  // This copy plans nothing more: what it holds of each cap and did not use
  // goes back to the others now, not when the minute ends. Unanswered (failoverd
  // away), it stays booked until then, as a crashed client's does.
  std::shared_ptr<Copy> copy = Current();
  if (copy == nullptr) return;
  const v1::LeaseRpmRequest request = api::RpmGiveBackRequest(*copy->engine, clock_->Now(), requester_);
  if (request.asks_size() == 0) return;
  v1::LeaseRpmResponse response;
  (void)CallLeaseRpm(request, &response);
}

grpc::Status LocalDecisions::CallLeaseRpm(const v1::LeaseRpmRequest& request, v1::LeaseRpmResponse* response) {
  grpc::ClientContext ctx;
  ConnectionOptions short_call = connection_;
  short_call.timeout_seconds = 1;
  PrepareContext(short_call, &ctx);
  return stub_->LeaseRpm(&ctx, request, response);
}

std::shared_ptr<LocalDecisions::Copy> LocalDecisions::Current() const {
  std::lock_guard<std::mutex> lock(mu_);
  return copy_;
}

bool LocalDecisions::Ready() const { return ready_.load(std::memory_order_acquire); }

grpc::Status LocalDecisions::Pick(const v1::PickTargetRequest& req, v1::PickTargetResponse* resp) {
  std::shared_ptr<Copy> copy = Current();
  if (copy == nullptr) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "no copy of failoverd's state yet");
  absl::StatusOr<PickRequest> pick = api::PickFromProto(req);
  if (!pick.ok()) return api::ToGrpcStatus(pick.status());
  // Kept for this thread's next pick, so the decision id's text is written
  // over, not allocated; the snapshot it holds is let go at once.
  thread_local Plan plan;
  Events events;
  const absl::Status picked = copy->engine->Pick(*pick, clock_->Now(), &plan, &events);
  if (picked.ok()) api::PlanToProto(plan, resp);
  plan.snapshot.reset();
  return picked.ok() ? grpc::Status::OK : api::ToGrpcStatus(picked);
}

grpc::Status LocalDecisions::Report(const v1::ReportOutcomeRequest& req, v1::ReportOutcomeResponse* resp) {
  std::shared_ptr<Copy> copy = Current();
  if (copy == nullptr) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "no copy of failoverd's state yet");
  const absl::Time now = clock_->Now();
  absl::StatusOr<ReportRequest> report = api::ReportFromProto(req, now);
  if (!report.ok()) return api::ToGrpcStatus(report.status());
  ReportResult result;
  Events events;
  for (uint32_t i = 0; i < api::OutcomesOf(req); ++i) {
    const absl::Status reported = copy->engine->Report(*report, now, &result, &events);
    if (!reported.ok()) return api::ToGrpcStatus(reported);
  }
  api::ReportResultToProto(result, resp);
  return grpc::Status::OK;
}

absl::Duration LocalDecisions::Staleness() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (copy_ == nullptr) return absl::InfiniteDuration();
  const absl::Duration silent = clock_->Now() - last_heard_;
  return connected_ && silent < options_.silence ? absl::ZeroDuration() : silent;
}

void LocalDecisions::Heard() {
  std::lock_guard<std::mutex> lock(mu_);
  last_heard_ = clock_->Now();
}

void LocalDecisions::Watch() {
  std::unique_lock<std::mutex> lock(mu_);
  uint64_t given_up = 0;  // the number of the stream last given up (every stream gets its own)
  while (!stop_) {
    changed_.wait_for(lock, absl::ToChronoMilliseconds(std::min(options_.silence / 4, absl::Milliseconds(250))),
                      [&] { return stop_; });
    if (stop_ || stream_ == nullptr || stream_number_ == given_up) continue;
    // A stream that never delivered counts from its start.
    if (clock_->Now() - std::max(last_heard_, stream_started_) < options_.silence) continue;
    given_up = stream_number_;
    stream_->TryCancel();  // Follow starts over
    silences_.fetch_add(1, std::memory_order_relaxed);
  }
}

void LocalDecisions::Lease() {
  // A client is one of many that may share a cap: it asks for a small part
  // first (a sixty-fourth), then more as its callers use it.
  constexpr uint32_t kSharers = 16;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (changed_.wait_for(lock, absl::ToChronoMilliseconds(options_.rpm_lease_every), [&] { return stop_; })) return;
    }
    std::shared_ptr<Copy> copy = Current();
    if (copy == nullptr) continue;
    // While failoverd is away the copy decides alone (fail-static) and plans
    // each cap whole; while it is there, only what it leased.
    const bool fresh = Staleness() == absl::ZeroDuration();
    copy->engine->LeaseRpm(fresh, /*even_part_without_grant=*/false);
    if (!fresh) continue;
    const v1::LeaseRpmRequest request = api::RpmLeaseRequest(*copy->engine, clock_->Now(), kSharers, requester_);
    if (request.asks_size() == 0) continue;
    v1::LeaseRpmResponse response;
    const grpc::Status leased = CallLeaseRpm(request, &response);
    // A failoverd from before leases: the copy plans each cap whole, as it
    // did (asked again each round, so an upgraded one is heard).
    if (leased.error_code() == grpc::StatusCode::UNIMPLEMENTED) copy->engine->LeaseRpm(false);
    // Unanswered: the copy keeps what it holds; a minute it holds nothing
    // for is planned whole (Engine::Saturated's even part of one).
    if (leased.ok()) api::TakeRpmGrants(response, copy->engine.get());
  }
}

uint64_t LocalDecisions::next_sequence() const {
  std::shared_ptr<Copy> copy = Current();
  return copy == nullptr ? 0 : copy->engine->next_sequence();
}

bool LocalDecisions::WaitForSequence(uint64_t sequence, absl::Duration timeout) const {
  std::unique_lock<std::mutex> lock(mu_);
  return changed_.wait_for(lock, absl::ToChronoMilliseconds(timeout), [&] {
    return copy_ != nullptr && copy_->engine->next_sequence() >= sequence;
  });
}

std::string LocalDecisions::last_error() const {
  std::lock_guard<std::mutex> lock(mu_);
  return last_error_;
}

void LocalDecisions::Follow() {
  absl::Duration wait = options_.retry_min;
  while (true) {
    grpc::ClientContext ctx;
    ConnectionOptions no_deadline = connection_;
    no_deadline.timeout_seconds = 0;  // the stream stays open
    PrepareContext(no_deadline, &ctx);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_) return;
      stream_ = &ctx;
      ++stream_number_;
      stream_started_ = clock_->Now();
    }
    const uint64_t loads_before = loads();
    const grpc::Status ended = FollowOnce(&ctx);
    std::unique_lock<std::mutex> lock(mu_);
    stream_ = nullptr;
    connected_ = false;
    last_error_ = absl::StrCat(ended.error_code(), ": ", ended.error_message());
    // A stream that delivered a state was healthy: follow again soon.
    wait = loads() > loads_before ? options_.retry_min : std::min(wait * 2, options_.retry_max);
    changed_.wait_for(lock, absl::ToChronoMilliseconds(wait), [&] { return stop_; });
    if (stop_) return;
  }
}

namespace {

// One FollowState stream, read on gRPC's callback API (why: read_ahead.h; in a
// caller that also serves gRPC, a synchronous Read here would poll for that
// server too).
class StateStream final : public ReadAhead<grpc::ClientReadReactor<v1::StateUpdate>, v1::StateUpdate> {
 public:
  StateStream(v1::DecisionService::StubInterface* stub, grpc::ClientContext* ctx) {
    stub->async()->FollowState(ctx, &request_, this);
    StartReading(ctx);
  }
  ~StateStream() override { (void)Finish(); }

 private:
  const v1::FollowStateRequest request_;
};

}  // namespace

grpc::Status LocalDecisions::FollowOnce(grpc::ClientContext* ctx) {
  StateStream reader(stub_.get(), ctx);
  // A copy that cannot take what failoverd sent is dropped: following again
  // starts from a fresh state rather than deciding from a wrong one.
  auto give_up = [&](const std::string& why) {
    (void)reader.Finish();  // cancels the stream
    return grpc::Status(grpc::StatusCode::INTERNAL, why);
  };
  v1::StateUpdate update;
  RestoredState pending;
  size_t parts = 0;
  std::shared_ptr<Copy> copy;  // the one this stream loaded
  while (reader.Read(&update)) {
    Heard();
    if (update.has_state()) {
      absl::Status added = api::AddStatePart(update.state(), parts++, &pending);
      if (!added.ok()) return give_up(std::string(added.message()));
      if (update.state().more()) continue;
      auto fresh = std::make_shared<Copy>();
      fresh->engine = std::make_unique<Engine>();
      fresh->engine->SetAcceptingChanges(false, "this engine follows failoverd, which makes every change");
      // Its shares of each limits.rpm come from Lease(); none without one.
      fresh->engine->LeaseRpm(true, /*even_part_without_grant=*/false);
      absl::StatusOr<Events> restored = fresh->engine->Restore(pending, clock_->Now());
      if (!restored.ok()) return give_up(absl::StrCat("cannot load failoverd's state: ", restored.status().message()));
      pending = RestoredState();
      parts = 0;
      copy = fresh;
      {
        std::lock_guard<std::mutex> lock(mu_);
        copy_ = std::move(fresh);
        connected_ = true;
      }
      ready_.store(true, std::memory_order_release);
      loads_.fetch_add(1, std::memory_order_relaxed);
      changed_.notify_all();
    } else if (update.has_change()) {
      if (copy == nullptr) return give_up("a change arrived before the state it follows");
      absl::StatusOr<Change> change = api::ChangeFromProto(update.change());
      if (!change.ok()) return give_up(std::string(change.status().message()));
      const absl::Status applied = copy->engine->ApplyChange(*change, clock_->Now());
      if (!applied.ok()) return give_up(absl::StrCat("cannot apply a change: ", applied.message()));
      {
        std::lock_guard<std::mutex> lock(mu_);  // so WaitForSequence cannot miss the wakeup
      }
      changed_.notify_all();
    } else if (update.has_heartbeat()) {  // failoverd is alive; nothing changed
      heartbeats_.fetch_add(1, std::memory_order_relaxed);
    }
  }
  return reader.Finish();
}

absl::StatusOr<std::unique_ptr<Client>> ConnectLocal(ClientOptions options, LocalOptions local) {
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel = OpenChannel(options.connection);
  if (!channel.ok()) return channel.status();
  std::shared_ptr<v1::DecisionService::StubInterface> stub = v1::DecisionService::NewStub(*channel);
  options.local = std::make_shared<LocalDecisions>(stub, options.connection, local);
  return std::make_unique<Client>(std::move(stub), std::move(options));
}

}  // namespace failover::client
