#include "server/api/watch_worker.h"

#include <algorithm>

#include "absl/container/flat_hash_map.h"
#include "server/api/change_feed.h"

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

namespace {

// The chains and targets as the published state has them: what the events up
// to its sequence add up to, nothing that is not durable yet (DESIGN 3.14,
// invariant 3). A rate-limit hold and the measured latency are not state (no
// Change carries them): they come from the engine.
class PublishedViews {
 public:
  PublishedViews(RestoredState state, const Engine& engine) : state_(std::move(state)), engine_(engine) {
    std::sort(state_.targets.begin(), state_.targets.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
    std::sort(state_.chains.begin(), state_.chains.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
    for (const TargetConfig& t : state_.targets) targets_[t.name] = &t;
    for (const TargetStateRecord& r : state_.health) health_[r.name] = &r;
    for (const ChainStateRecord& r : state_.chain_states) chain_states_[r.name] = &r;
    for (const ChainConfig& c : state_.chains) {
      chains_[c.name] = &c;
      for (const std::string& t : c.targets) chains_of_[t].push_back(c.name);  // name order
    }
  }
  uint64_t sequence() const { return state_.next_sequence - 1; }
  uint64_t generation() const { return state_.generation; }
  const std::vector<ChainConfig>& chains() const { return state_.chains; }
  const std::vector<TargetConfig>& targets() const { return state_.targets; }
  const ChainConfig* FindChain(const std::string& name) const {
    auto it = chains_.find(name);
    return it == chains_.end() ? nullptr : it->second;
  }
  const TargetConfig* FindTarget(const std::string& name) const {
    auto it = targets_.find(name);
    return it == targets_.end() ? nullptr : it->second;
  }

  TargetStatus StatusOf(const TargetConfig& t) const {
    TargetStatus s;
    s.name = t.name;
    s.enabled = t.enabled;
    auto h = health_.find(t.name);
    if (h != health_.end()) {
      const TargetStateRecord& r = *h->second;
      s.automatic = r.automatic;
      s.source = r.source;
      s.reason = r.reason;
      s.since = r.since;
      s.last_probe = r.last_probe;
      s.last_check = r.last_check;
      s.last_error = r.last_error;
      s.last_error_time = r.last_error_time;
      s.recovery_passes = r.recovery_passes;
      s.trips = r.trips;
    }
    auto m = state_.manual.find(t.name);
    if (m != state_.manual.end()) {
      s.reason = m->second.reason;
      s.since = m->second.since;
    }
    s.health = !t.enabled ? HealthState::kDisabled : m != state_.manual.end() ? HealthState::kManual : s.automatic;
    if (auto live = engine_.GetTargetStatus(t.name); live.ok()) {
      s.held_until = live->held_until;
      s.latency = live->latency;
    }
    auto c = chains_of_.find(t.name);
    if (c != chains_of_.end()) s.chains = c->second;
    return s;
  }

  ChainStatus StatusOf(const ChainConfig& c) const {
    ChainStatus s;
    s.name = c.name;
    auto r = chain_states_.find(c.name);
    if (r != chain_states_.end()) {
      s.state = r->second->state;
      s.active_target = r->second->active;
      s.active_since = r->second->active_since;
      s.last_switch = r->second->last_switch;
    }
    auto pin = state_.pins.find(c.name);
    if (pin != state_.pins.end()) s.pinned_target = pin->second;
    for (const std::string& name : c.targets) {
      if (const TargetConfig* t = FindTarget(name); t != nullptr) s.targets.push_back(StatusOf(*t));
    }
    return s;
  }

 private:
  RestoredState state_;
  const Engine& engine_;
  absl::flat_hash_map<std::string, const TargetConfig*> targets_;
  absl::flat_hash_map<std::string, const ChainConfig*> chains_;
  absl::flat_hash_map<std::string, const TargetStateRecord*> health_;
  absl::flat_hash_map<std::string, const ChainStateRecord*> chain_states_;
  absl::flat_hash_map<std::string, std::vector<std::string>> chains_of_;
};

}  // namespace

std::shared_ptr<const SnapshotParts> WatchWorker::Build(const SnapshotRequest& request) const {
  if (ctx_.changes == nullptr) return BuildFromEngine(request);
  auto parts = std::make_shared<SnapshotParts>();
  // The published state and its sequence, read together.
  const PublishedViews published(ctx_.changes->State(), *ctx_.engine);
  parts->sequence = published.sequence();
  const uint64_t generation = published.generation();
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
  auto add_chain = [&](const ChainConfig& c) {
    if (bytes >= part_bytes_) end_part(true);
    v1::ChainStatus* out = event.mutable_snapshot()->add_chains();
    ChainStatusToProto(published.StatusOf(c), out);
    bytes += out->ByteSizeLong() + 8;
  };
  auto add_target = [&](const TargetConfig& t) {
    if (bytes >= part_bytes_) end_part(true);
    v1::TargetStatus* out = event.mutable_snapshot()->add_targets();
    TargetStatusToProto(published.StatusOf(t), out);
    bytes += out->ByteSizeLong() + 8;
  };
  start_part();
  if (request.chains.empty() && request.targets.empty()) {
    for (const ChainConfig& c : published.chains()) add_chain(c);
    for (const TargetConfig& t : published.targets()) add_target(t);
  } else {
    // Name order, like the whole state.
    std::vector<std::string> chains(request.chains.begin(), request.chains.end());
    std::sort(chains.begin(), chains.end());
    absl::flat_hash_set<std::string> wanted_targets = request.targets;
    for (const std::string& name : chains) {
      const ChainConfig* c = published.FindChain(name);
      if (c == nullptr) continue;
      add_chain(*c);
      wanted_targets.insert(c->targets.begin(), c->targets.end());
    }
    std::vector<std::string> targets(wanted_targets.begin(), wanted_targets.end());
    std::sort(targets.begin(), targets.end());
    for (const std::string& name : targets) {
      if (const TargetConfig* t = published.FindTarget(name); t != nullptr) add_target(*t);
    }
  }
  end_part(false);
  return parts;
}

std::shared_ptr<const SnapshotParts> WatchWorker::BuildFromEngine(const SnapshotRequest& request) const {
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
