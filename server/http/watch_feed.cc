#include "server/http/watch_feed.h"

#include <algorithm>

#include "common/trailers.h"
#include "server/http/gateway.h"

namespace failover::http {
namespace {
// Events buffered per stream before its gRPC reads pause.
constexpr size_t kStreamBuffer = 256;
}  // namespace

void FeedRegistry::Add(const std::shared_ptr<WatchFeed>& feed) {
  std::lock_guard<std::mutex> lock(mu_);
  feeds_.push_back(feed);
}

void FeedRegistry::Remove(const WatchFeed* feed) {
  std::lock_guard<std::mutex> lock(mu_);
  feeds_.erase(std::remove_if(feeds_.begin(), feeds_.end(),
                              [feed](const std::weak_ptr<WatchFeed>& w) {
                                auto live = w.lock();
                                return live == nullptr || live.get() == feed;
                              }),
               feeds_.end());
  done_.notify_all();
}

void FeedRegistry::CancelAllAndWait() {
  std::vector<std::shared_ptr<WatchFeed>> live;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& w : feeds_) {
      if (auto feed = w.lock()) live.push_back(std::move(feed));
    }
  }
  for (const auto& feed : live) feed->Cancel();
  live.clear();
  std::unique_lock<std::mutex> lock(mu_);
  done_.wait(lock, [&] {
    return std::all_of(feeds_.begin(), feeds_.end(), [](const std::weak_ptr<WatchFeed>& w) { return w.expired(); });
  });
}

std::shared_ptr<WatchFeed> WatchFeed::Start(const std::shared_ptr<grpc::Channel>& channel,
                                            const failover::v1::WatchEventsRequest& request,
                                            const std::string& authorization, FeedRegistry* registry,
                                            std::function<void()> on_change) {
  std::shared_ptr<WatchFeed> feed(new WatchFeed());
  feed->self_ = feed;
  feed->registry_ = registry;
  feed->on_change_ = std::move(on_change);
  feed->request_ = request;
  feed->stub_ = failover::v1::DecisionService::NewStub(channel);
  if (!authorization.empty()) feed->ctx_.AddMetadata("authorization", authorization);
  registry->Add(feed);
  feed->stub_->async()->WatchEvents(&feed->ctx_, &feed->request_, feed.get());
  // Held while no read is outstanding (paused), so a later StartRead is never
  // issued after OnDone; released when the reads end.
  feed->AddHold();
  feed->StartRead(&feed->event_);
  feed->StartCall();
  return feed;
}

void WatchFeed::Changed() {
  std::function<void()> notify;
  {
    std::lock_guard<std::mutex> lock(mu_);
    notify = on_change_;
  }
  if (notify) notify();
}

void WatchFeed::OnReadInitialMetadataDone(bool ok) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    // A refusal may also come with (empty) initial metadata: only the mark counts.
    accepted_ = ok && ctx_.GetServerInitialMetadata().count(kWatchAcceptedHeader) > 0;
  }
  Changed();
}

void WatchFeed::OnReadDone(bool ok) {
  if (!ok) {
    RemoveHold();  // no more reads: OnDone follows
    return;
  }
  bool more = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    buffer_.push_back(Gateway::ToServerSentEvent(event_));
    more = buffer_.size() < kStreamBuffer;
    paused_ = !more;
  }
  if (more) StartRead(&event_);
  Changed();
}

void WatchFeed::OnDone(const grpc::Status& status) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    done_ = true;
    status_ = status;
  }
  Changed();
  registry_->Remove(this);
  // Last callback: gRPC is done with this object; the connection may still hold it.
  std::shared_ptr<WatchFeed> self = std::move(self_);
}

WatchFeed::Phase WatchFeed::phase() {
  std::lock_guard<std::mutex> lock(mu_);
  if (done_) return Phase::kEnded;
  return accepted_ ? Phase::kAccepted : Phase::kOpening;
}

bool WatchFeed::accepted() {
  std::lock_guard<std::mutex> lock(mu_);
  return accepted_;
}

grpc::Status WatchFeed::status() {
  std::lock_guard<std::mutex> lock(mu_);
  return status_;
}

void WatchFeed::Take(std::deque<std::string>* out) {
  bool resume = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    while (!buffer_.empty()) {
      out->push_back(std::move(buffer_.front()));
      buffer_.pop_front();
    }
    resume = paused_;
    paused_ = false;
  }
  if (resume) StartRead(&event_);
}

void WatchFeed::Cancel() {
  bool resume = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    on_change_ = nullptr;
    resume = paused_;
    paused_ = false;
  }
  ctx_.TryCancel();
  if (resume) StartRead(&event_);  // fails at once, which releases the hold
}

}  // namespace failover::http
