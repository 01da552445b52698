// FollowState (DESIGN 3.13): the state failoverd's engine holds, then every
// Change after it, for engines that follow failoverd (a client library
// deciding locally). The committer hands each durable Change to the feed, in
// order, on its thread; the feed keeps their sum (StateMirror), so a follower
// starts from exactly the state the Changes so far add up to and then gets
// every later one, none twice. A follower that falls behind by more than its
// byte bound is ended with ABORTED (it starts over with a fresh state): a
// follower must never skip a Change, so it cannot be resynced in place.
#pragma once

#include <deque>
#include <mutex>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "storage/state_mirror.h"
#include "grpcpp/grpcpp.h"
#include "server/api/outbox.h"
#include "server/api/service_context.h"

namespace failover::api {

class ChangeFeed {
 public:
  // A live follower. Deliver runs under the feed's lock, in order, and must only queue.
  class Follower {
   public:
    virtual ~Follower() = default;
    virtual void Deliver(const grpc::ByteBuffer& update, size_t bytes) = 0;
    // Queues `heartbeat` unless something is queued or being written already.
    virtual void Heartbeat(const grpc::ByteBuffer& heartbeat) = 0;
    virtual void Close() = 0;  // failoverd is shutting down
  };

  // `start`: the state the engine was restored from (before its first Change).
  explicit ChangeFeed(const RestoredState& start) : mirror_(start) {}

  // A durable Change, in sequence order (the committer's thread).
  void Publish(const Change& change);
  // Registers `f` and returns the state it starts from, as serialized
  // StateUpdate parts of about `part_bytes`. RESOURCE_EXHAUSTED past
  // `max_followers`, UNAVAILABLE after CloseFollowers.
  [[nodiscard]] absl::StatusOr<std::vector<grpc::ByteBuffer>> Subscribe(Follower* f, size_t max_followers,
                                                                        size_t part_bytes);
  void Unsubscribe(Follower* f);
  // The sum of the Changes published so far (what storage holds).
  RestoredState State() const;
  // Tells every idle follower that failoverd is alive (about once a second).
  void Heartbeat();
  void CloseFollowers();
  size_t follower_count() const;

 private:
  mutable std::mutex mu_;
  StateMirror mirror_ ABSL_GUARDED_BY(mu_);
  std::vector<Follower*> followers_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
};

struct FollowOptions {
  size_t max_followers = 10000;
  // Changes queued for one follower before it is ended (it starts over).
  size_t queue_bytes = 8 << 20;
  size_t part_bytes = 1 << 20;
};

// One FollowState stream on gRPC's callback API; deletes itself when done.
class FollowStream final : public grpc::ServerWriteReactor<grpc::ByteBuffer>, public ChangeFeed::Follower {
 public:
  // `allowed`: the caller's authorization; a stream that is not allowed ends at once.
  static FollowStream* Start(ChangeFeed* feed, const FollowOptions& options, const absl::Status& allowed);

  void Deliver(const grpc::ByteBuffer& update, size_t bytes) override;
  void Heartbeat(const grpc::ByteBuffer& heartbeat) override;
  void Close() override;
  void OnWriteDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override;

 private:
  FollowStream(ChangeFeed* feed, const FollowOptions& options) : feed_(feed), options_(options) {}
  void PumpLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FinishLocked(const grpc::Status& status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  struct NoMeta {};
  ChangeFeed* const feed_;
  const FollowOptions options_;
  std::mutex mu_;
  bool subscribed_ ABSL_GUARDED_BY(mu_) = false;
  // The starting state (opening) and the Changes after it; open once the state is queued.
  Outbox<NoMeta> out_ ABSL_GUARDED_BY(mu_);
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace failover::api
