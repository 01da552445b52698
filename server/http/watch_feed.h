// One WatchEvents call behind one GET /v1/watch, read on gRPC's callback
// threads. It never blocks: whatever changes (accepted, refused, events
// arrived, ended) it says through `on_change`, and the HTTP connection takes
// what is buffered when it can write. A full buffer pauses the gRPC reads,
// which makes failoverd resync or drop the stream as any slow watcher.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "failover/v1/decision.grpc.pb.h"
#include "grpcpp/grpcpp.h"

namespace failover::http {

// Tracks live feeds so that stopping the HTTP port can end them all and wait
// until gRPC is done with each.
class FeedRegistry {
 public:
  void Add(const std::shared_ptr<class WatchFeed>& feed);
  void Remove(const WatchFeed* feed);
  void CancelAllAndWait();

 private:
  std::mutex mu_;
  std::condition_variable done_;
  std::vector<std::weak_ptr<WatchFeed>> feeds_;
};

class WatchFeed final : public grpc::ClientReadReactor<failover::v1::Event>,
                        public std::enable_shared_from_this<WatchFeed> {
 public:
  enum class Phase { kOpening, kAccepted, kEnded };

  // Starts the call. `on_change` runs on a gRPC thread and must not block.
  static std::shared_ptr<WatchFeed> Start(const std::shared_ptr<grpc::Channel>& channel,
                                          const failover::v1::WatchEventsRequest& request,
                                          const std::string& authorization, FeedRegistry* registry,
                                          std::function<void()> on_change);

  // kAccepted once failoverd accepted the stream; kEnded once the call ended
  // (then `status()`), whether or not it was accepted first.
  Phase phase();
  bool accepted();
  grpc::Status status();
  // Moves the buffered events (as Server-Sent Events) to `out`.
  void Take(std::deque<std::string>* out);
  // Ends the call; on_change is not called afterwards.
  void Cancel();

  void OnReadInitialMetadataDone(bool ok) override;
  void OnReadDone(bool ok) override;
  void OnDone(const grpc::Status& status) override;

 private:
  WatchFeed() = default;
  void Changed();

  std::unique_ptr<failover::v1::DecisionService::Stub> stub_;
  grpc::ClientContext ctx_;
  failover::v1::WatchEventsRequest request_;
  failover::v1::Event event_;
  FeedRegistry* registry_ = nullptr;

  std::mutex mu_;
  std::function<void()> on_change_;
  std::deque<std::string> buffer_;
  bool paused_ = false;
  bool accepted_ = false;
  bool done_ = false;
  grpc::Status status_;
  std::shared_ptr<WatchFeed> self_;  // gRPC holds the reactor until OnDone
};

}  // namespace failover::http
