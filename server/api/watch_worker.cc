#include "server/api/watch_worker.h"

#include <algorithm>

#include "server/api/convert.h"
#include "server/api/wire.h"

namespace failover::api {

namespace v1 = ::failover::v1;

WatchWorker::WatchWorker(const ServiceContext& ctx, absl::Duration stall_check, size_t part_bytes)
    : ctx_(ctx), stall_check_(stall_check), part_bytes_(part_bytes) {}

WatchWorker::~WatchWorker() { Stop(); }

void WatchWorker::EnsureRunning() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!stopping_ && !thread_.joinable()) thread_ = std::thread([this] { Run(); });
}

bool WatchWorker::Request(SnapshotRequest request) {
  EnsureRunning();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return false;
    pending_.push_back(std::move(request));
  }
  wake_.notify_one();
  return true;
}

void WatchWorker::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  wake_.notify_one();
  if (thread_.joinable()) thread_.join();
  std::vector<SnapshotRequest> left;
  {
    std::lock_guard<std::mutex> lock(mu_);
    left.swap(pending_);
  }
  for (SnapshotRequest& r : left) r.done(nullptr);
}

void WatchWorker::Run() {
  const auto period = stall_check_ > absl::ZeroDuration() ? absl::ToChronoMilliseconds(stall_check_)
                                                          : std::chrono::milliseconds(std::chrono::hours(1));
  auto next_check = std::chrono::steady_clock::now() + period;
  for (;;) {
    std::vector<SnapshotRequest> batch;
    {
      std::unique_lock<std::mutex> lock(mu_);
      wake_.wait_until(lock, next_check, [&] { return stopping_ || !pending_.empty(); });
      if (stopping_) return;
      batch.swap(pending_);
    }
    // Watchers that asked together for the whole state share one build.
    std::shared_ptr<const SnapshotParts> whole[2];
    for (SnapshotRequest& r : batch) {
      if (r.wanted && !r.wanted()) {
        r.done(nullptr);
        continue;
      }
      std::shared_ptr<const SnapshotParts> parts;
      if (r.chains.empty() && r.targets.empty()) {
        std::shared_ptr<const SnapshotParts>& shared = whole[r.resync ? 1 : 0];
        if (shared == nullptr) shared = Build(r);
        parts = shared;
      } else {
        parts = Build(r);
      }
      r.done(std::move(parts));
    }
    if (stall_check_ > absl::ZeroDuration() && std::chrono::steady_clock::now() >= next_check) {
      ctx_.events->DropStalled();
      next_check = std::chrono::steady_clock::now() + period;
    }
  }
}

std::shared_ptr<const SnapshotParts> WatchWorker::Build(const SnapshotRequest& request) const {
  auto parts = std::make_shared<SnapshotParts>();
  // Read before the state: every event up to here is reflected in what follows.
  parts->sequence = ctx_.events->last_sequence();
  const uint64_t generation = ctx_.engine->generation();
  const absl::Time now = ctx_.clock->Now();
  v1::Event event;
  size_t bytes = 0;
  auto start_part = [&] {
    event.Clear();
    event.set_sequence(parts->sequence);
    TimeToProto(now, event.mutable_time());
    event.mutable_snapshot()->set_resync(request.resync);
    event.mutable_snapshot()->set_config_generation(generation);
    bytes = 0;
  };
  auto end_part = [&](bool more) {
    event.mutable_snapshot()->set_more(more);
    parts->status.Update(SerializeMessage(event, &parts->wire.emplace_back()));
    start_part();
  };
  auto add_chain = [&](const ChainView& v) {
    if (bytes >= part_bytes_) end_part(true);
    v1::ChainStatus* out = event.mutable_snapshot()->add_chains();
    ChainStatusToProto(v.status, out);
    bytes += out->ByteSizeLong() + 8;
    return true;
  };
  auto add_target = [&](const TargetView& v) {
    if (bytes >= part_bytes_) end_part(true);
    v1::TargetStatus* out = event.mutable_snapshot()->add_targets();
    TargetStatusToProto(v.status, out);
    bytes += out->ByteSizeLong() + 8;
    return true;
  };
  start_part();
  if (request.chains.empty() && request.targets.empty()) {
    ctx_.engine->VisitChains("", add_chain);
    ctx_.engine->VisitTargets("", add_target);
  } else {
    // Name order, like the whole state.
    std::vector<std::string> chains(request.chains.begin(), request.chains.end());
    std::sort(chains.begin(), chains.end());
    absl::flat_hash_set<std::string> wanted_targets = request.targets;
    for (const std::string& name : chains) {
      absl::StatusOr<ChainView> v = ctx_.engine->GetChain(name);
      if (!v.ok()) continue;
      add_chain(*v);
      wanted_targets.insert(v->config.targets.begin(), v->config.targets.end());
    }
    std::vector<std::string> targets(wanted_targets.begin(), wanted_targets.end());
    std::sort(targets.begin(), targets.end());
    for (const std::string& name : targets) {
      absl::StatusOr<TargetView> v = ctx_.engine->GetTarget(name);
      if (v.ok()) add_target(*v);
    }
  }
  end_part(false);
  return parts;
}

}  // namespace failover::api
