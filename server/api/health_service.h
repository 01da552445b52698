// The standard grpc.health.v1.Health service, in place of gRPC's default one
// so that its Watch streams are counted and capped like WatchEvents streams:
// gRPC's own keeps every Watch open without a bound. Check and Watch answer for
// "" (the server as a whole) and failoverd's two services; any other name is
// NOT_FOUND (Check) or SERVICE_UNKNOWN (Watch), as the protocol says. Runs on
// gRPC's callback API: a Watch costs memory, not a thread.
#pragma once

#include <cstddef>
#include <functional>
#include <mutex>
#include <set>
#include <string>

#include "absl/base/thread_annotations.h"
#include "grpc/health/v1/health.grpc.pb.h"

namespace failover::api {

class HealthService final : public grpc::health::v1::Health::CallbackService {
 public:
  // `on_count` hears the number of open Watch streams whenever it changes.
  HealthService(size_t max_watchers, std::function<void(size_t)> on_count)
      : max_watchers_(max_watchers), on_count_(std::move(on_count)) {}
  ~HealthService() override;

  // SERVING or NOT_SERVING for every service; Watch streams get the change.
  void SetServing(bool serving);
  // Ends every Watch stream and refuses new ones (before the server stops).
  void Shutdown();
  size_t watchers() const;

  grpc::ServerUnaryReactor* Check(grpc::CallbackServerContext* ctx, const grpc::health::v1::HealthCheckRequest* req,
                                  grpc::health::v1::HealthCheckResponse* resp) override;
  grpc::ServerWriteReactor<grpc::health::v1::HealthCheckResponse>* Watch(
      grpc::CallbackServerContext* ctx, const grpc::health::v1::HealthCheckRequest* req) override;

 private:
  class WatchReactor;
  friend class WatchReactor;
  using Status = grpc::health::v1::HealthCheckResponse::ServingStatus;
  static bool Known(const std::string& service);
  Status StatusLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const size_t max_watchers_;
  const std::function<void(size_t)> on_count_;
  mutable std::mutex mu_;
  bool serving_ ABSL_GUARDED_BY(mu_) = false;
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
  std::set<WatchReactor*> watchers_ ABSL_GUARDED_BY(mu_);
};

}  // namespace failover::api
