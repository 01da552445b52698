#include "tests/support/etcd_proxy.h"

#include <map>
#include <thread>

#include "etcd/etcdserver/etcdserverpb/rpc.grpc.pb.h"

namespace failover::testing {

namespace etcdpb = ::etcdserverpb;

class EtcdProxy::Services final : public etcdpb::KV::Service,
                                  public etcdpb::Lease::Service,
                                  public etcdpb::Watch::Service {
 public:
  explicit Services(const std::string& upstream) {
    auto channel = grpc::CreateChannel(upstream, grpc::InsecureChannelCredentials());
    kv_ = etcdpb::KV::NewStub(channel);
    lease_ = etcdpb::Lease::NewStub(channel);
    watch_ = etcdpb::Watch::NewStub(channel);
  }

  void SetHook(Hook hook) {
    std::lock_guard<std::mutex> lock(mu_);
    hook_ = std::move(hook);
  }
  std::map<std::string, int> WatchedKeys() {
    std::lock_guard<std::mutex> lock(mu_);
    return watched_;
  }

  grpc::Status Range(grpc::ServerContext* c, const etcdpb::RangeRequest* q, etcdpb::RangeResponse* r) override {
    return Unary("Range", c, *q, r, [&](grpc::ClientContext* up) { return kv_->Range(up, *q, r); });
  }
  grpc::Status Put(grpc::ServerContext* c, const etcdpb::PutRequest* q, etcdpb::PutResponse* r) override {
    return Unary("Put", c, *q, r, [&](grpc::ClientContext* up) { return kv_->Put(up, *q, r); });
  }
  grpc::Status DeleteRange(grpc::ServerContext* c, const etcdpb::DeleteRangeRequest* q,
                           etcdpb::DeleteRangeResponse* r) override {
    return Unary("DeleteRange", c, *q, r, [&](grpc::ClientContext* up) { return kv_->DeleteRange(up, *q, r); });
  }
  grpc::Status Txn(grpc::ServerContext* c, const etcdpb::TxnRequest* q, etcdpb::TxnResponse* r) override {
    return Unary("Txn", c, *q, r, [&](grpc::ClientContext* up) { return kv_->Txn(up, *q, r); });
  }
  grpc::Status Compact(grpc::ServerContext* c, const etcdpb::CompactionRequest* q,
                       etcdpb::CompactionResponse* r) override {
    return Unary("Compact", c, *q, r, [&](grpc::ClientContext* up) { return kv_->Compact(up, *q, r); });
  }
  grpc::Status LeaseGrant(grpc::ServerContext* c, const etcdpb::LeaseGrantRequest* q,
                          etcdpb::LeaseGrantResponse* r) override {
    return Unary("LeaseGrant", c, *q, r, [&](grpc::ClientContext* up) { return lease_->LeaseGrant(up, *q, r); });
  }
  grpc::Status LeaseRevoke(grpc::ServerContext* c, const etcdpb::LeaseRevokeRequest* q,
                           etcdpb::LeaseRevokeResponse* r) override {
    return Unary("LeaseRevoke", c, *q, r, [&](grpc::ClientContext* up) { return lease_->LeaseRevoke(up, *q, r); });
  }
  grpc::Status LeaseTimeToLive(grpc::ServerContext* c, const etcdpb::LeaseTimeToLiveRequest* q,
                               etcdpb::LeaseTimeToLiveResponse* r) override {
    return Unary("LeaseTimeToLive", c, *q, r,
                 [&](grpc::ClientContext* up) { return lease_->LeaseTimeToLive(up, *q, r); });
  }
  grpc::Status LeaseKeepAlive(
      grpc::ServerContext* c,
      grpc::ServerReaderWriter<etcdpb::LeaseKeepAliveResponse, etcdpb::LeaseKeepAliveRequest>* down) override {
    return Pipe(c, down, [&](grpc::ClientContext* up) { return lease_->LeaseKeepAlive(up); },
                [](const etcdpb::LeaseKeepAliveResponse&) {});
  }
  grpc::Status Watch(grpc::ServerContext* c,
                     grpc::ServerReaderWriter<etcdpb::WatchResponse, etcdpb::WatchRequest>* down) override {
    return Pipe(c, down, [&](grpc::ClientContext* up) { return watch_->Watch(up); },
                [this](const etcdpb::WatchResponse& r) {
                  std::lock_guard<std::mutex> lock(mu_);
                  for (const auto& e : r.events()) ++watched_[e.kv().key()];
                });
  }

 private:
  // The caller's deadline and cancellation, and what etcd reads from metadata.
  static std::unique_ptr<grpc::ClientContext> Upstream(grpc::ServerContext* down) {
    std::unique_ptr<grpc::ClientContext> up = grpc::ClientContext::FromServerContext(*down);
    for (const auto& [key, value] : down->client_metadata()) {
      const std::string k(key.data(), key.size());
      if (k == "token" || k == "hasleader") up->AddMetadata(k, std::string(value.data(), value.size()));
    }
    return up;
  }

  template <class Request, class Response, class Call>
  grpc::Status Unary(const char* method, grpc::ServerContext* down, const Request& request, Response* response,
                     Call call) {
    Fault fault = Fault::kNone;
    {
      Hook hook;
      {
        std::lock_guard<std::mutex> lock(mu_);
        hook = hook_;
      }
      if (hook) fault = hook(method, request);
    }
    if (fault == Fault::kRefuse) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "refused by the test's proxy");
    std::unique_ptr<grpc::ClientContext> up = Upstream(down);
    const grpc::Status s = call(up.get());
    if (s.ok() && fault == Fault::kLoseAnswer) {
      response->Clear();
      return grpc::Status(grpc::StatusCode::UNAVAILABLE, "answer lost by the test's proxy");
    }
    return s;
  }

  // A stream both ways: the caller's messages to etcd on a thread of its own,
  // etcd's back to the caller here (each shown to `seen` first), until either
  // side ends.
  template <class Request, class Response, class Open, class Seen>
  grpc::Status Pipe(grpc::ServerContext* down_context, grpc::ServerReaderWriter<Response, Request>* down, Open open,
                    Seen seen) {
    std::unique_ptr<grpc::ClientContext> up_context = Upstream(down_context);
    std::unique_ptr<grpc::ClientReaderWriter<Request, Response>> up = open(up_context.get());
    std::thread to_etcd([&] {
      Request request;
      while (down->Read(&request)) {
        if (!up->Write(request)) break;
      }
      up->WritesDone();
    });
    Response response;
    while (up->Read(&response)) {
      seen(response);
      if (!down->Write(response)) break;
    }
    up_context->TryCancel();
    down_context->TryCancel();  // ends a Read the thread may still wait in
    to_etcd.join();
    return up->Finish();
  }

  std::unique_ptr<etcdpb::KV::Stub> kv_;
  std::unique_ptr<etcdpb::Lease::Stub> lease_;
  std::unique_ptr<etcdpb::Watch::Stub> watch_;
  std::mutex mu_;
  Hook hook_;                           // guarded by mu_
  std::map<std::string, int> watched_;  // guarded by mu_
};

EtcdProxy::EtcdProxy(std::string upstream) : services_(std::make_unique<Services>(upstream)) {}

EtcdProxy::~EtcdProxy() {
  if (server_) server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
}

bool EtcdProxy::Start() {
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
  builder.RegisterService(static_cast<etcdpb::KV::Service*>(services_.get()));
  builder.RegisterService(static_cast<etcdpb::Lease::Service*>(services_.get()));
  builder.RegisterService(static_cast<etcdpb::Watch::Service*>(services_.get()));
  server_ = builder.BuildAndStart();
  return server_ != nullptr && port_ != 0;
}

void EtcdProxy::SetHook(Hook hook) { services_->SetHook(std::move(hook)); }

std::map<std::string, int> EtcdProxy::WatchedKeys() const { return services_->WatchedKeys(); }

}  // namespace failover::testing
