#include "server/api/watch_stream.h"

#include "absl/strings/str_cat.h"
#include "common/trailers.h"
#include "server/api/convert.h"
#include "server/api/status_convert.h"
#include "server/api/wire.h"
#include "server/committer/committer.h"
#include "server/engine/validate.h"
#include "server/log/log.h"

namespace failover::api {

namespace v1 = ::failover::v1;

void WatchStream::Start(const ServiceContext& ctx, const WatchOptions& options, WatchWorker* worker,
                        grpc::CallbackServerContext* call, const v1::WatchEventsRequest& request,
                        const absl::Status& allowed, WatchStream** out) {
  auto* stream = new WatchStream(ctx, options, worker, call, request);
  *out = stream;
  if (!allowed.ok()) {
    std::lock_guard<std::mutex> lock(stream->mu_);
    stream->FinishLocked(ToGrpcStatus(allowed));
    return;
  }
  stream->Begin(request);
}

WatchStream::WatchStream(const ServiceContext& ctx, const WatchOptions& options, WatchWorker* worker,
                         grpc::CallbackServerContext* call, const v1::WatchEventsRequest& request)
    : ctx_(ctx), options_(options), worker_(worker), call_(call),
      chains_(request.chains().begin(), request.chains().end()),
      targets_(request.targets().begin(), request.targets().end()), include_shadow_(request.include_shadow()) {}

void WatchStream::Unref() {
  if (refs_.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
}

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
  // The opening waits until what was answered is published (up to 2 s behind
  // a slow write) and may read thousands of stored events: work for the call
  // pool, not for gRPC's few callback threads, which also answer decisions.
  Ref();
  auto open = [this, request] {
    Open(request);
    Unref();
  };
  if (ctx_.blocking == nullptr || !ctx_.blocking->Submit(open)) open();
}

void WatchStream::Open(const v1::WatchEventsRequest& request) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (finished_) return;  // cancelled while it waited for a thread
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
  bool done = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    subscribed_ = true;
    done = done_;
    if (!finished_) {
      // Headers now, marked: the client learns the stream was accepted even
      // when nothing is sent for a while (a resume with no newer events). A
      // refused stream ends with trailers only, which carry no such mark.
      call_->AddInitialMetadata(kWatchAcceptedHeader, "1");
      StartSendInitialMetadata();
    }
  }
  if (done) {  // the call ended meanwhile and OnDone found nothing to unsubscribe
    ctx_.events->Unsubscribe(this);
    return;
  }
  worker_->EnsureRunning();  // its stall checks cover this watcher from now on
  if (ctx_.metrics != nullptr) ctx_.metrics->SetWatchers(ctx_.events->watcher_count());
  // The opening: the stored events after the requested sequence, or a snapshot.
  std::vector<Entry> opening;
  absl::Status serialized = absl::OkStatus();
  bool replayed = false;
  if (request.has_after_sequence() && request.after_sequence() <= last && options_.history) {
    bool complete = false;
    absl::StatusOr<Events> history = options_.history(request.after_sequence(), options_.max_replay, &complete);
    if (history.ok() && complete && (history->empty() || history->back().sequence >= last ||
                                     history->size() < options_.max_replay)) {
      std::shared_ptr<const Snapshot> snap;
      for (const Event& e : *history) {
        if (e.sequence > last || !Matches(e, &snap)) continue;
        v1::Event proto;
        EventToProto(e, &proto);
        Entry& q = opening.emplace_back();
        q.meta.sequence = e.sequence;
        serialized.Update(SerializeMessage(proto, &q.wire));
      }
      replayed = true;
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (finished_) return;  // cancelled meanwhile: OnDone unsubscribes
  if (!serialized.ok()) return FinishLocked(ToGrpcStatus(serialized));
  last_seen_ = std::max(last_seen_, last);
  out_.Open();
  if (!replayed) {
    RequestSnapshotLocked(request.has_after_sequence());
    return;
  }
  // Live events that arrived meanwhile are already queued; the opening goes first.
  out_.PushFront(opening.begin(), opening.end());
  PumpLocked();
}

bool WatchStream::Matches(const Event& e, std::shared_ptr<const Snapshot>* snap) const {
  if (chains_.empty() && targets_.empty()) return true;
  auto in_filtered_chain = [&](const std::string& target) {
    if (chains_.empty()) return false;
    if (*snap == nullptr) *snap = ctx_.engine->snapshot();
    const TargetEntry* t = (*snap)->FindTarget(target);
    if (t == nullptr) return false;
    for (uint32_t ci : (*snap)->ChainsOf(*t)) {
      if (chains_.contains((*snap)->chains[ci].config->name)) return true;
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

void WatchStream::RequestSnapshotLocked(bool resync) {
  awaiting_snapshot_ = true;
  Ref();
  SnapshotRequest request;
  request.chains = chains_;
  request.targets = targets_;
  request.resync = resync;
  request.wanted = [this] {
    std::lock_guard<std::mutex> lock(mu_);
    return !finished_;
  };
  request.done = [this](std::shared_ptr<const SnapshotParts> parts) {
    SnapshotReady(std::move(parts));
    Unref();
  };
  if (!worker_->Request(std::move(request))) {
    refs_.fetch_sub(1, std::memory_order_relaxed);  // gRPC's reference is still held
    awaiting_snapshot_ = false;
    FinishLocked(grpc::Status(grpc::StatusCode::UNAVAILABLE, "failoverd is shutting down; watch again once it is back"));
  }
}

void WatchStream::SnapshotReady(std::shared_ptr<const SnapshotParts> parts) {
  std::lock_guard<std::mutex> lock(mu_);
  awaiting_snapshot_ = false;
  if (finished_) return;
  if (parts == nullptr) {
    return FinishLocked(grpc::Status(grpc::StatusCode::UNAVAILABLE,
                                     absl::StrCat("failoverd is shutting down; resume after sequence ", last_sent_)));
  }
  if (!parts->status.ok()) return FinishLocked(ToGrpcStatus(parts->status));
  // Live events the snapshot already contains are not sent again (nor shadow
  // events queued among them: the side channel is best effort).
  out_.DropFrontWhile([&](const Meta& m) { return m.shadow || m.sequence <= parts->sequence; });
  for (size_t i = parts->wire.size(); i-- > 0;) {
    Entry q;
    q.meta.sequence = parts->sequence;
    q.wire = parts->wire[i];  // shares the serialized slices with every watcher of this build
    q.meta.resumable = i + 1 == parts->wire.size();
    out_.PushFront(std::move(q));
  }
  last_seen_ = std::max(last_seen_, parts->sequence);
  snapshot_sequence_ = std::max(snapshot_sequence_, parts->sequence);
  PumpLocked();
}

void WatchStream::Deliver(const Events& events, const std::vector<grpc::ByteBuffer>& wire) {
  std::lock_guard<std::mutex> lock(mu_);
  if (finished_) return;
  std::shared_ptr<const Snapshot> snap;  // one for the batch
  for (size_t i = 0; i < events.size(); ++i) {
    const Event& e = events[i];
    last_seen_ = std::max(last_seen_, e.sequence);
    // A snapshot read from the published state may already hold an event the
    // log hands out just after it: never sent twice.
    if (resync_ || e.sequence <= snapshot_sequence_ || !Matches(e, &snap)) continue;
    Entry q;
    q.meta.sequence = e.sequence;
    q.wire = wire[i];  // shares the serialized slices
    QueueLiveLocked(std::move(q));
  }
  PumpLocked();
}

void WatchStream::QueueLiveLocked(Entry q) {
  q.bytes = q.wire.Length();
  out_.PushBack(std::move(q));
  if (out_.size() > options_.queue_limit || out_.live_bytes() > options_.queue_bytes) {
    // Too far behind: drop the live events; a fresh snapshot replaces them
    // (snapshot parts already queued stay: they are the watcher's base).
    out_.DropLive();
    resync_ = true;
    if (ctx_.metrics != nullptr) ctx_.metrics->OnWatchResync();
  }
}

void WatchStream::DeliverShadow(const std::vector<ShadowEvent>& events, const std::vector<grpc::ByteBuffer>& wire) {
  if (!include_shadow_) return;
  std::lock_guard<std::mutex> lock(mu_);
  // A watcher waiting for a fresh snapshot has lost its live events; shadow
  // events are not worth keeping without them.
  if (finished_ || resync_) return;
  std::shared_ptr<const Snapshot> snap;
  for (size_t i = 0; i < events.size(); ++i) {
    if (!Matches(events[i].event, &snap)) continue;
    Entry q;
    q.meta.shadow = true;
    q.meta.resumable = false;
    q.wire = wire[i];
    QueueLiveLocked(std::move(q));
  }
  PumpLocked();
}

void WatchStream::Resync() {
  std::lock_guard<std::mutex> lock(mu_);
  if (finished_) return;
  out_.DropLive();
  resync_ = true;
  if (ctx_.metrics != nullptr) ctx_.metrics->OnWatchResync();
  PumpLocked();
}

void WatchStream::PumpLocked() {
  // The outbox writes nothing before the opening (the replay, or the snapshot
  // request) is in place: a live event delivered meanwhile waits behind it.
  if (finished_ || awaiting_snapshot_ || !out_.opened() || out_.writing()) return;
  if (out_.empty()) {
    // After what was queued before it (snapshot parts, replays) is sent.
    if (resync_) {
      resync_ = false;
      RequestSnapshotLocked(/*resync=*/true);
    }
    return;
  }
  const grpc::ByteBuffer* next = out_.Next();
  write_started_ = std::chrono::steady_clock::now();
  StartWrite(next);
}

void WatchStream::OnWriteDone(bool ok) {
  std::lock_guard<std::mutex> lock(mu_);
  const Meta written = out_.WriteDone();
  if (!ok) return FinishLocked(grpc::Status(grpc::StatusCode::UNAVAILABLE, "write failed"));
  if (written.resumable) last_sent_ = std::max(last_sent_, written.sequence);
  PumpLocked();
}

std::function<void()> WatchStream::StalledDrop() {
  std::lock_guard<std::mutex> lock(mu_);
  if (finished_ || dropping_ || !out_.writing() || options_.stall_timeout <= absl::ZeroDuration()) return {};
  const auto stuck = std::chrono::steady_clock::now() - write_started_;
  if (stuck < absl::ToChronoMilliseconds(options_.stall_timeout)) return {};
  dropping_ = true;
  Ref();  // held until the drop ran
  return [this] {
    uint64_t resume_after = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      resume_after = last_sent_;
      FinishLocked(grpc::Status(
          grpc::StatusCode::RESOURCE_EXHAUSTED,
          absl::StrCat("watcher dropped: it read nothing for ", absl::FormatDuration(options_.stall_timeout),
                       "; resume after sequence ", resume_after)));
    }
    log::Warn("dropped a watcher that stopped reading",
              {{"peer", call_->peer()}, {"stalled_for", absl::FormatDuration(options_.stall_timeout)},
               {"resume_after", resume_after}});
    if (ctx_.metrics != nullptr) ctx_.metrics->OnWatcherDropped();
    // A client that does not read never receives the status: cancelling the
    // call is what frees its buffers.
    call_->TryCancel();
    Unref();
  };
}

void WatchStream::Close() {
  std::lock_guard<std::mutex> lock(mu_);
  FinishLocked(grpc::Status(grpc::StatusCode::UNAVAILABLE,
                            absl::StrCat("failoverd is shutting down; resume after sequence ", last_sent_)));
}

void WatchStream::OnCancel() {
  std::lock_guard<std::mutex> lock(mu_);
  FinishLocked(grpc::Status::CANCELLED);
}

void WatchStream::FinishLocked(const grpc::Status& status) {
  if (finished_) return;
  finished_ = true;
  out_.Clear();
  Finish(status);
}

void WatchStream::OnDone() {
  // After Unsubscribe no Deliver can start, and none is running (it holds the
  // log's lock). Not subscribed yet: Open unsubscribes once it has.
  bool subscribed = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    done_ = true;
    subscribed = subscribed_;
  }
  if (subscribed) {
    ctx_.events->Unsubscribe(this);
    if (ctx_.metrics != nullptr) ctx_.metrics->SetWatchers(ctx_.events->watcher_count());
  }
  Unref();
}

}  // namespace failover::api
