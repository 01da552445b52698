// The thread behind WatchEvents. Snapshots of a large state are costly (tens
// of milliseconds per 10,000 objects), so they are built here, one at a time,
// instead of on gRPC's threads that answer PickTarget; watchers that open (or
// resync) together share one build. Each snapshot is a list of serialized
// events of about 1 MiB or less (Snapshot.more), so no single message passes
// a client's receive limit. Every quarter of the stall timeout the worker
// also drops watchers whose writes have been stuck too long
// (EventLog::DropStalled).
#pragma once

#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "grpcpp/support/byte_buffer.h"
#include "server/api/service_context.h"

namespace failover::api {

struct SnapshotParts {
  uint64_t sequence = 0;  // every event up to this one is in the state sent
  std::vector<grpc::ByteBuffer> wire;  // failover.v1.Event, each with a Snapshot part
  absl::Status status;                  // not ok: the snapshot could not be serialized
};

struct SnapshotRequest {
  // Only these chains (and their targets) and targets; both empty = everything.
  absl::flat_hash_set<std::string> chains;
  absl::flat_hash_set<std::string> targets;
  bool resync = false;
  // False once the watcher is gone: its snapshot is not built.
  std::function<bool()> wanted;
  // Runs on the worker's thread with the parts, or with null when the worker
  // stops first.
  std::function<void(std::shared_ptr<const SnapshotParts>)> done;
};

class WatchWorker {
 public:
  // `stall_check`: how often to look for stalled watchers (zero: never).
  WatchWorker(const ServiceContext& ctx, absl::Duration stall_check, size_t part_bytes = 1 << 20);
  ~WatchWorker();  // Stop()
  WatchWorker(const WatchWorker&) = delete;
  WatchWorker& operator=(const WatchWorker&) = delete;

  // Starts the thread if it is not running yet (the first watcher does; a
  // process without watchers has no such thread).
  void EnsureRunning();
  // Queues a build; false once stopped (then `done` is never called).
  bool Request(SnapshotRequest request);
  // Ends the thread; queued requests get `done(nullptr)`.
  void Stop();

  // Builds one snapshot now, on the calling thread, from the published state
  // (the change feed's): it holds nothing that is not durable yet.
  std::shared_ptr<const SnapshotParts> Build(const SnapshotRequest& request) const;
  // Without a change feed (tests of the handlers alone): from the engine.
  std::shared_ptr<const SnapshotParts> BuildFromEngine(const SnapshotRequest& request) const;

 private:
  void Run();

  const ServiceContext ctx_;
  const absl::Duration stall_check_;
  const size_t part_bytes_;
  std::mutex mu_;
  std::condition_variable wake_;
  std::vector<SnapshotRequest> pending_;  // guarded by mu_
  bool stopping_ = false;                 // guarded by mu_
  std::thread thread_;                    // assigned under mu_, once, before stopping_
};

}  // namespace failover::api
