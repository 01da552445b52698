#include "server/api/health_service.h"

#include "absl/strings/str_cat.h"

namespace failover::api {

using grpc::health::v1::HealthCheckRequest;
using grpc::health::v1::HealthCheckResponse;

// One Watch stream. Writes at most one response at a time and keeps only the
// latest status still to send, so a client that does not read costs nothing
// more. Deletes itself when gRPC is done with it.
class HealthService::WatchReactor final : public grpc::ServerWriteReactor<HealthCheckResponse> {
 public:
  WatchReactor(HealthService* service, bool known) : service_(service), known_(known) {}

  // Registers the stream and sends the current status; refused past the cap.
  void Begin() {
    std::lock_guard<std::mutex> lock(service_->mu_);
    if (service_->shut_down_) return FinishLocked(grpc::Status(grpc::StatusCode::UNAVAILABLE, "failoverd is stopping"));
    if (service_->watchers_.size() >= service_->max_watchers_) {
      return FinishLocked(grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                                       absl::StrCat("health watchers: at most ", service_->max_watchers_,
                                                    " at once (--max-watchers)")));
    }
    service_->watchers_.insert(this);
    registered_ = true;
    if (service_->on_count_) service_->on_count_(service_->watchers_.size());
    SendLocked(known_ ? service_->StatusLocked() : HealthCheckResponse::SERVICE_UNKNOWN);
  }

  // A new status from SetServing (service lock held).
  void SendLocked(Status status) {
    if (finished_ || finish_pending_) return;
    if (!known_) status = HealthCheckResponse::SERVICE_UNKNOWN;
    if (writing_) {
      pending_ = status;
      has_pending_ = true;
      return;
    }
    if (sent_any_ && status == last_sent_) return;
    response_.set_status(status);
    last_sent_ = status;
    sent_any_ = true;
    writing_ = true;
    StartWrite(&response_);
  }

  // Ends the stream (service lock held), after the write in flight if any.
  void FinishLocked(const grpc::Status& status) {
    if (finished_) return;
    if (writing_) {
      finish_pending_ = true;
      finish_status_ = status;
      return;
    }
    finished_ = true;
    Finish(status);
  }

  void OnWriteDone(bool ok) override {
    std::lock_guard<std::mutex> lock(service_->mu_);
    writing_ = false;
    if (!ok) return FinishLocked(grpc::Status(grpc::StatusCode::CANCELLED, "the client went away"));
    if (finish_pending_) return FinishLocked(finish_status_);
    if (has_pending_) {
      has_pending_ = false;
      SendLocked(pending_);
    }
  }

  void OnCancel() override {
    std::lock_guard<std::mutex> lock(service_->mu_);
    FinishLocked(grpc::Status::CANCELLED);
  }

  void OnDone() override {
    {
      std::lock_guard<std::mutex> lock(service_->mu_);
      if (registered_) {
        service_->watchers_.erase(this);
        if (service_->on_count_) service_->on_count_(service_->watchers_.size());
      }
    }
    delete this;
  }

 private:
  HealthService* const service_;
  const bool known_;
  // All guarded by the service's mutex.
  bool registered_ = false;
  bool finished_ = false;
  bool writing_ = false;
  bool sent_any_ = false;
  bool has_pending_ = false;
  bool finish_pending_ = false;
  grpc::Status finish_status_;
  Status last_sent_ = HealthCheckResponse::UNKNOWN;
  Status pending_ = HealthCheckResponse::UNKNOWN;
  HealthCheckResponse response_;
};

HealthService::~HealthService() { Shutdown(); }

bool HealthService::Known(const std::string& service) {
  return service.empty() || service == "failover.v1.DecisionService" || service == "failover.v1.AdminService";
}

HealthService::Status HealthService::StatusLocked() const {
  return serving_ ? HealthCheckResponse::SERVING : HealthCheckResponse::NOT_SERVING;
}

void HealthService::SetServing(bool serving) {
  std::lock_guard<std::mutex> lock(mu_);
  if (shut_down_) return;  // stays NOT_SERVING once stopping
  serving_ = serving;
  for (WatchReactor* w : watchers_) w->SendLocked(StatusLocked());
}

void HealthService::Shutdown() {
  std::lock_guard<std::mutex> lock(mu_);
  if (shut_down_) return;
  shut_down_ = true;
  serving_ = false;
  // The last word is NOT_SERVING, then the stream ends (OnDone unregisters).
  for (WatchReactor* w : watchers_) {
    w->SendLocked(HealthCheckResponse::NOT_SERVING);
    w->FinishLocked(grpc::Status(grpc::StatusCode::UNAVAILABLE, "failoverd is stopping"));
  }
}

size_t HealthService::watchers() const {
  std::lock_guard<std::mutex> lock(mu_);
  return watchers_.size();
}

grpc::ServerUnaryReactor* HealthService::Check(grpc::CallbackServerContext* ctx, const HealthCheckRequest* req,
                                               HealthCheckResponse* resp) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  if (!Known(req->service())) {
    reactor->Finish(grpc::Status(grpc::StatusCode::NOT_FOUND, "unknown service"));
    return reactor;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    resp->set_status(StatusLocked());
  }
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerWriteReactor<HealthCheckResponse>* HealthService::Watch(grpc::CallbackServerContext*,
                                                                    const HealthCheckRequest* req) {
  auto* reactor = new WatchReactor(this, Known(req->service()));
  reactor->Begin();
  return reactor;
}

}  // namespace failover::api
