// Local decisions (DESIGN 3.13): the client keeps a live copy of failoverd's
// state and answers PickTarget and ReportOutcome in-process, with failoverd's
// own engine and request handlers, so a decision costs microseconds and no
// network hop. The copy follows FollowState: the whole state, then every
// Change in order; after a broken stream (failoverd restarted, the network
// went away, the copy fell behind) it follows again and starts over from a
// fresh state; a stream on which failoverd fell silent (no heartbeat) is given
// up too. Trips, recoveries, switches and holds stay failoverd's to
// decide: the copy makes none, the client's reports reach failoverd through
// its background flusher, and failoverd's decisions come back as Changes.
//
//   failover::client::ClientOptions options;
//   options.connection.server = "failoverd:50051";
//   auto client = failover::client::ConnectLocal(options);
//   (*client)->Run("assistant-llm", attempt, {});
#pragma once

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/client.h"

namespace failover {
class Engine;
class RealClock;
namespace api {
class DecisionService;
}
}  // namespace failover

namespace failover::client {

struct LocalOptions {
  // Waits between attempts to follow again after the stream broke (doubling
  // from the first to the second).
  absl::Duration retry_min = absl::Milliseconds(100);
  absl::Duration retry_max = absl::Seconds(2);
  // failoverd sends something about once a second. Heard nothing for this
  // long, the copy counts as stale (a hung failoverd keeps its connection
  // open) and the stream is given up and followed again.
  absl::Duration silence = absl::Seconds(3);
  // How often the copy asks failoverd for its shares of the targets'
  // limits.rpm (LeaseRpm), when it has something to ask: so much it takes
  // for more to arrive once its callers have used up what it holds.
  absl::Duration rpm_lease_every = absl::Milliseconds(100);
};

class LocalDecisions final : public LocalDecider {
 public:
  // Starts following at once. `connection` gives the token (its timeout does
  // not apply: the stream stays open).
  LocalDecisions(std::shared_ptr<v1::DecisionService::StubInterface> stub, ConnectionOptions connection,
                 LocalOptions options = {});
  ~LocalDecisions() override;  // stops following
  LocalDecisions(const LocalDecisions&) = delete;
  LocalDecisions& operator=(const LocalDecisions&) = delete;

  bool Ready() const override;
  grpc::Status Pick(const v1::PickTargetRequest& req, v1::PickTargetResponse* resp) override;
  grpc::Status Report(const v1::ReportOutcomeRequest& req, v1::ReportOutcomeResponse* resp) override;

  absl::Duration Staleness() const override;
  // Waits until the copy has reached failoverd's event sequence `sequence`
  // (every event before it applied) or `timeout` passed.
  bool WaitForSequence(uint64_t sequence, absl::Duration timeout) const;
  bool WaitReady(absl::Duration timeout) const { return WaitForSequence(0, timeout); }
  // The next event sequence as of the copy.
  uint64_t next_sequence() const;
  // Fresh states loaded (1 after the first; more after each broken stream).
  uint64_t loads() const { return loads_.load(std::memory_order_relaxed); }
  // Why the last stream ended, empty while the first is up.
  std::string last_error() const;
  // Streams given up because failoverd fell silent.
  uint64_t silences() const { return silences_.load(std::memory_order_relaxed); }
  // Heartbeats received (failoverd alive, nothing changed).
  uint64_t heartbeats() const { return heartbeats_.load(std::memory_order_relaxed); }

 private:
  struct Copy;  // one engine with its handlers, replaced whole on each fresh state
  void Follow();
  // Gives up a stream on which failoverd fell silent (its own thread).
  void Watch();
  void Heard();  // something arrived from failoverd
  // Asks failoverd for this copy's shares of the rpm caps (its own thread).
  void Lease();
  void GiveBackRpm();  // on closing
  grpc::Status CallLeaseRpm(const v1::LeaseRpmRequest& request, v1::LeaseRpmResponse* response);  // 1 s deadline
  // Reads one stream until it ends; returns why.
  grpc::Status FollowOnce(grpc::ClientContext* ctx);
  std::shared_ptr<Copy> Current() const;

  const std::shared_ptr<v1::DecisionService::StubInterface> stub_;
  const ConnectionOptions connection_;
  const LocalOptions options_;
  std::unique_ptr<RealClock> clock_;
  std::atomic<uint64_t> loads_{0};
  std::atomic<uint64_t> silences_{0};
  std::atomic<uint64_t> heartbeats_{0};

  mutable std::mutex mu_;
  mutable std::condition_variable changed_;
  std::shared_ptr<Copy> copy_;                  // guarded by mu_
  // Set once copy_ is: it is replaced after that, never cleared. Ready() is
  // asked twice a request, so it takes no lock.
  std::atomic<bool> ready_{false};
  bool connected_ = false;                      // guarded by mu_
  absl::Time last_heard_ = absl::InfinitePast();      // guarded by mu_: the last message from failoverd
  absl::Time stream_started_ = absl::InfinitePast();  // guarded by mu_
  std::string last_error_;                      // guarded by mu_
  bool stop_ = false;                           // guarded by mu_
  grpc::ClientContext* stream_ = nullptr;       // guarded by mu_: cancelled by the destructor
  uint64_t stream_number_ = 0;                  // guarded by mu_: counts the streams opened
  const std::string requester_;  // who this client is in failoverd's books of rpm shares
  std::thread thread_;
  std::thread watchdog_;
  std::thread leaser_;
};

// The one call most callers need for local decisions: opens the channel
// (TLS and token as in options.connection), starts following and makes the
// client. Until the first copy arrives, decisions are failoverd's (remote).
[[nodiscard]] absl::StatusOr<std::unique_ptr<Client>> ConnectLocal(ClientOptions options,
                                                                   LocalOptions local = {});

}  // namespace failover::client
