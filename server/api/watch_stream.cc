#include "server/api/watch_stream.h"

#include "absl/strings/str_cat.h"
#include "server/api/convert.h"
#include "server/api/status_convert.h"
#include "server/api/wire.h"
#include "server/committer/committer.h"
#include "server/engine/validate.h"

namespace failover::api {

namespace v1 = ::failover::v1;

void WatchStream::Start(const ServiceContext& ctx, const WatchOptions& options, const v1::WatchEventsRequest& request,
                        const absl::Status& allowed, WatchStream** out) {
  auto* stream = new WatchStream(ctx, options, request);
  *out = stream;
  if (!allowed.ok()) {
    std::lock_guard<std::mutex> lock(stream->mu_);
    stream->FinishLocked(ToGrpcStatus(allowed));
    return;
  }
  stream->Begin(request);
}

WatchStream::WatchStream(const ServiceContext& ctx, const WatchOptions& options, const v1::WatchEventsRequest& request)
    : ctx_(ctx), options_(options), chains_(request.chains().begin(), request.chains().end()),
      targets_(request.targets().begin(), request.targets().end()) {}

void WatchStream::Begin(const v1::WatchEventsRequest& request) {
  for (int i = 0; i < request.chains_size(); ++i) {
    absl::Status s = ValidateName(request.chains(i), absl::StrCat("chains[", i, "]"));
    if (!s.ok()) {
      std::lock_guard<std::mutex> lock(mu_);
      return FinishLocked(ToGrpcStatus(s));
    }
  }
  for (int i = 0; i < request.targets_size(); ++i) {
    absl::Status s = ValidateName(request.targets(i), absl::StrCat("targets[", i, "]"));
    if (!s.ok()) {
      std::lock_guard<std::mutex> lock(mu_);
      return FinishLocked(ToGrpcStatus(s));
    }
  }
  // What was answered before this call opened is published first, so its
  // events are in the snapshot and not also live after it.
  if (ctx_.committer != nullptr) ctx_.committer->AwaitPublished(absl::Seconds(2));
  // Subscribe first: every event after `last` arrives live; older ones come
  // from the stored log or are summed up in the snapshot.
  const absl::StatusOr<uint64_t> subscribed = ctx_.events->Subscribe(this, options_.max_watchers);
  if (!subscribed.ok()) {
    std::lock_guard<std::mutex> lock(mu_);
    return FinishLocked(ToGrpcStatus(subscribed.status()));
  }
  const uint64_t last = *subscribed;
  subscribed_ = true;
  if (ctx_.metrics != nullptr) ctx_.metrics->SetWatchers(ctx_.events->watcher_count());
  // The opening: the stored events after the requested sequence, or a snapshot.
  std::deque<grpc::ByteBuffer> opening;
  absl::Status serialized = absl::OkStatus();
  auto add = [&](const v1::Event& event) { serialized.Update(SerializeMessage(event, &opening.emplace_back())); };
  bool replayed = false;
  if (request.has_after_sequence() && request.after_sequence() <= last && options_.history) {
    bool complete = false;
    absl::StatusOr<Events> history = options_.history(request.after_sequence(), options_.max_replay, &complete);
    if (history.ok() && complete && (history->empty() || history->back().sequence >= last ||
                                     history->size() < options_.max_replay)) {
      for (const Event& e : *history) {
        if (e.sequence > last || !Matches(e)) continue;
        v1::Event proto;
        EventToProto(e, &proto);
        add(proto);
      }
      replayed = true;
    }
  }
  if (!replayed) add(SnapshotEvent(last, request.has_after_sequence()));
  if (!serialized.ok()) {
    std::lock_guard<std::mutex> lock(mu_);
    return FinishLocked(ToGrpcStatus(serialized));
  }
  std::lock_guard<std::mutex> lock(mu_);
  last_seen_ = std::max(last_seen_, last);
  // Live events that arrived meanwhile are already queued; the opening goes first.
  queue_.insert(queue_.begin(), std::make_move_iterator(opening.begin()), std::make_move_iterator(opening.end()));
  PumpLocked();
}

bool WatchStream::Matches(const Event& e) const {
  if (chains_.empty() && targets_.empty()) return true;
  auto in_filtered_chain = [&](const std::string& target) {
    if (chains_.empty()) return false;
    auto snap = ctx_.engine->snapshot();
    const TargetEntry* t = snap->FindTarget(target);
    if (t == nullptr) return false;
    for (uint32_t ci : t->chains) {
      if (chains_.contains(snap->chains[ci].config.name)) return true;
    }
    return false;
  };
  switch (e.kind) {
    case EventKind::kChainSwitched: return chains_.contains(e.chain);
    case EventKind::kTargetState: return targets_.contains(e.target) || in_filtered_chain(e.target);
    case EventKind::kConfigChanged:
      return chains_.contains(e.object_name) || targets_.contains(e.object_name) || in_filtered_chain(e.object_name);
  }
  return false;
}

v1::Event WatchStream::SnapshotEvent(uint64_t sequence, bool resync) const {
  v1::Event out;
  out.set_sequence(sequence);
  TimeToProto(ctx_.clock->Now(), out.mutable_time());
  v1::Snapshot* snap = out.mutable_snapshot();
  snap->set_resync(resync);
  snap->set_config_generation(ctx_.engine->generation());
  const bool all = chains_.empty() && targets_.empty();
  absl::flat_hash_set<std::string> wanted_targets = targets_;
  for (const ChainView& c : ctx_.engine->ListChains()) {
    if (!all && !chains_.contains(c.config.name)) continue;
    ChainStatusToProto(c.status, snap->add_chains());
    for (const std::string& t : c.config.targets) wanted_targets.insert(t);
  }
  for (const TargetView& t : ctx_.engine->ListTargets()) {
    if (all || wanted_targets.contains(t.config.name)) TargetStatusToProto(t.status, snap->add_targets());
  }
  return out;
}

void WatchStream::Deliver(const Events& events, const std::vector<grpc::ByteBuffer>& wire) {
  std::lock_guard<std::mutex> lock(mu_);
  if (finished_) return;
  for (size_t i = 0; i < events.size(); ++i) {
    const Event& e = events[i];
    last_seen_ = std::max(last_seen_, e.sequence);
    if (resync_ || !Matches(e)) continue;
    queue_.push_back(wire[i]);  // shares the serialized slices
    if (queue_.size() > options_.queue_limit) {
      // Too far behind: drop the queue; a fresh snapshot replaces it.
      queue_.clear();
      resync_ = true;
      if (ctx_.metrics != nullptr) ctx_.metrics->OnWatchResync();
    }
  }
  PumpLocked();
}

void WatchStream::PumpLocked() {
  if (writing_ || finished_) return;
  if (resync_) {
    resync_ = false;
    queue_.clear();
    const absl::Status serialized = SerializeMessage(SnapshotEvent(last_seen_, /*resync=*/true),
                                                      &queue_.emplace_back());
    if (!serialized.ok()) return FinishLocked(ToGrpcStatus(serialized));
  }
  if (queue_.empty()) return;
  current_ = std::move(queue_.front());
  queue_.pop_front();
  writing_ = true;
  StartWrite(&current_);
}

void WatchStream::OnWriteDone(bool ok) {
  std::lock_guard<std::mutex> lock(mu_);
  writing_ = false;
  if (!ok) return FinishLocked(grpc::Status(grpc::StatusCode::UNAVAILABLE, "write failed"));
  PumpLocked();
}

void WatchStream::Close() {
  std::lock_guard<std::mutex> lock(mu_);
  FinishLocked(grpc::Status(grpc::StatusCode::UNAVAILABLE,
                            absl::StrCat("failoverd is shutting down; resume after sequence ", last_seen_)));
}

void WatchStream::OnCancel() {
  std::lock_guard<std::mutex> lock(mu_);
  FinishLocked(grpc::Status::CANCELLED);
}

void WatchStream::FinishLocked(const grpc::Status& status) {
  if (finished_) return;
  finished_ = true;
  queue_.clear();
  Finish(status);
}

void WatchStream::OnDone() {
  // After Unsubscribe no Deliver can start, and none is running (it holds the log's lock).
  if (subscribed_) {
    ctx_.events->Unsubscribe(this);
    if (ctx_.metrics != nullptr) ctx_.metrics->SetWatchers(ctx_.events->watcher_count());
  }
  delete this;
}

}  // namespace failover::api
