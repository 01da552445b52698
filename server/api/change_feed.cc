#include "server/api/change_feed.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "proto/state_convert.h"
#include "server/api/status_convert.h"
#include "server/api/wire.h"

namespace failover::api {

void ChangeFeed::Publish(const Change& change) {
  std::lock_guard<std::mutex> lock(mu_);
  mirror_.Apply(change);
  if (followers_.empty()) return;
  v1::StateUpdate update;
  ChangeToProto(change, update.mutable_change());
  grpc::ByteBuffer wire;
  if (!SerializeMessage(update, &wire).ok()) return;
  const size_t bytes = update.ByteSizeLong();
  for (Follower* f : followers_) f->Deliver(wire, bytes);
}

absl::StatusOr<std::vector<grpc::ByteBuffer>> ChangeFeed::Subscribe(Follower* f, size_t max_followers,
                                                                   size_t part_bytes) {
  StateMirror at;  // the encoded copy: decoding it waits until the lock is let go
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) return absl::UnavailableError("failoverd is shutting down");
    if (followers_.size() >= max_followers) {
      return absl::ResourceExhaustedError(absl::StrCat("at most ", max_followers, " FollowState streams at once"));
    }
    at = mirror_;  // every Change after this one reaches f
    followers_.push_back(f);
  }
  const RestoredState state = at.State();
  std::vector<grpc::ByteBuffer> parts;
  for (v1::FollowedState& part : StateToProto(state, part_bytes)) {
    v1::StateUpdate update;
    *update.mutable_state() = std::move(part);
    parts.emplace_back();
    if (absl::Status s = SerializeMessage(update, &parts.back()); !s.ok()) {
      Unsubscribe(f);
      return s;
    }
  }
  return parts;
}

void ChangeFeed::Unsubscribe(Follower* f) {
  std::lock_guard<std::mutex> lock(mu_);
  followers_.erase(std::remove(followers_.begin(), followers_.end(), f), followers_.end());
}

void ChangeFeed::Heartbeat() {
  std::lock_guard<std::mutex> lock(mu_);
  if (followers_.empty()) return;
  v1::StateUpdate update;
  update.mutable_heartbeat();
  grpc::ByteBuffer wire;
  if (!SerializeMessage(update, &wire).ok()) return;
  for (Follower* f : followers_) f->Heartbeat(wire);
}

void ChangeFeed::CloseFollowers() {
  std::lock_guard<std::mutex> lock(mu_);
  closed_ = true;
  for (Follower* f : followers_) f->Close();
}

size_t ChangeFeed::follower_count() const {
  std::lock_guard<std::mutex> lock(mu_);
  return followers_.size();
}

// ---------------------------------------------------------------------------

FollowStream* FollowStream::Start(ChangeFeed* feed, const FollowOptions& options, const absl::Status& allowed) {
  auto* stream = new FollowStream(feed, options);
  if (!allowed.ok()) {
    std::lock_guard<std::mutex> lock(stream->mu_);
    stream->FinishLocked(ToGrpcStatus(allowed));
    return stream;
  }
  // Not under the stream's lock: Deliver takes it under the feed's.
  auto parts = feed->Subscribe(stream, options.max_followers, options.part_bytes);
  std::lock_guard<std::mutex> lock(stream->mu_);
  if (!parts.ok()) {
    stream->FinishLocked(ToGrpcStatus(parts.status()));
    return stream;
  }
  stream->subscribed_ = true;
  // Changes delivered meanwhile are already queued: the state goes before them.
  std::vector<Outbox<NoMeta>::Entry> state;
  for (grpc::ByteBuffer& part : *parts) state.push_back({std::move(part), 0, {}});
  stream->out_.PushFront(state.begin(), state.end());
  stream->out_.Open();
  stream->PumpLocked();
  return stream;
}

void FollowStream::Deliver(const grpc::ByteBuffer& update, size_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  if (finished_) return;
  if (out_.live_bytes() + bytes > options_.queue_bytes) {
    return FinishLocked(grpc::Status(
        grpc::StatusCode::ABORTED,
        absl::StrCat("this follower fell behind by more than ", options_.queue_bytes,
                     " bytes of changes; follow again to start from a fresh state")));
  }
  out_.PushBack({update, bytes, {}});
  PumpLocked();
}

void FollowStream::Heartbeat(const grpc::ByteBuffer& heartbeat) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!out_.opened() || finished_ || out_.writing() || !out_.empty()) return;
  out_.PushBack({heartbeat, 0, {}});
  PumpLocked();
}

void FollowStream::PumpLocked() {
  if (finished_) return;
  if (const grpc::ByteBuffer* next = out_.Next(); next != nullptr) StartWrite(next);
}

void FollowStream::OnWriteDone(bool ok) {
  std::lock_guard<std::mutex> lock(mu_);
  out_.WriteDone();
  if (!ok) return FinishLocked(grpc::Status(grpc::StatusCode::UNAVAILABLE, "write failed"));
  PumpLocked();
}

void FollowStream::Close() {
  std::lock_guard<std::mutex> lock(mu_);
  FinishLocked(grpc::Status(grpc::StatusCode::UNAVAILABLE, "failoverd is shutting down; follow again"));
}

void FollowStream::OnCancel() {
  std::lock_guard<std::mutex> lock(mu_);
  FinishLocked(grpc::Status::CANCELLED);
}

void FollowStream::FinishLocked(const grpc::Status& status) {
  if (finished_) return;
  finished_ = true;
  out_.Clear();
  Finish(status);
}

void FollowStream::OnDone() {
  // After Unsubscribe no Deliver can start, and none is running (it holds the feed's lock).
  bool subscribed = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    subscribed = subscribed_;
  }
  if (subscribed) feed_->Unsubscribe(this);
  delete this;
}

RestoredState ChangeFeed::State() const {
  StateMirror at;
  {
    std::lock_guard<std::mutex> lock(mu_);
    at = mirror_;
  }
  return at.State();
}

}  // namespace failover::api
