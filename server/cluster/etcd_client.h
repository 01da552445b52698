// A small client for etcd's v3 gRPC API (KV, Watch, Lease, Auth), built on the
// project's own gRPC from etcd's proto files (DESIGN 3.12): the Etcd a
// replica uses in production. Unary calls go to the endpoint that answered
// last and move on to the next when one does not answer, so losing an etcd
// member costs one timeout at most.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "etcd/etcdserver/etcdserverpb/rpc.grpc.pb.h"
#include "proto/read_ahead.h"
#include "server/cluster/etcd.h"

namespace failover::cluster {

struct EtcdOptions {
  std::vector<std::string> endpoints;  // host:port
  // TLS: set `ca` (the CA that signed etcd's certificates) to use it; `cert`
  // and `key` add a client certificate. Paths to PEM files.
  std::string ca;
  std::string cert;
  std::string key;
  // etcd users: set both to authenticate.
  std::string user;
  std::string password;
  absl::Duration call_timeout = absl::Seconds(2);
};

class EtcdClient final : public Etcd {
 public:
  // Reads the TLS files; does not connect yet.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<EtcdClient>> Create(EtcdOptions options);

  absl::StatusOr<etcdpb::RangeResponse> Range(const etcdpb::RangeRequest& request) override;
  absl::StatusOr<etcdpb::TxnResponse> Txn(const etcdpb::TxnRequest& request) override;
  absl::StatusOr<etcdpb::PutResponse> Put(const etcdpb::PutRequest& request) override;
  absl::StatusOr<etcdpb::DeleteRangeResponse> DeleteRange(const etcdpb::DeleteRangeRequest& request) override;
  absl::StatusOr<int64_t> Grant(absl::Duration ttl) override;
  absl::StatusOr<int64_t> KeepAlive(int64_t lease) override;
  void Revoke(int64_t lease) override;
  // Opens a watch on the next endpoint that takes it.
  absl::StatusOr<std::unique_ptr<Watch>> StartWatch(const etcdpb::WatchCreateRequest& request) override;

  uint64_t errors() const override { return errors_.load(std::memory_order_relaxed); }

 private:
  // A watch on gRPC's callback API: Next waits on a condition variable, not
  // inside gRPC (why: proto/read_ahead.h; the watch thread's polling cost a
  // follower about 20 us of CPU per decision pair in cluster_bench). At most
  // one response is read ahead of Next.
  class GrpcWatch final
      : public Watch,
        private ReadAhead<grpc::ClientBidiReactor<etcdpb::WatchRequest, etcdpb::WatchResponse>,
                          etcdpb::WatchResponse> {
   public:
    ~GrpcWatch() override;
    bool Next(etcdpb::WatchResponse* response) override;
    void Cancel() override { context_.TryCancel(); }
    const absl::Status& status() const override { return status_; }

   private:
    friend class EtcdClient;
    // Sends the create request and reads ahead; the context is set up first.
    // Always called right after construction (StartWatch), so Finish may wait
    // on the call's end.
    void Start(etcdpb::Watch::Stub* stub, const etcdpb::WatchCreateRequest& request);

    grpc::ClientContext context_;
    etcdpb::WatchRequest create_;
    absl::Status status_;
    std::string endpoint_;
  };
  struct Endpoint {
    std::string address;
    std::unique_ptr<etcdpb::KV::Stub> kv;
    std::unique_ptr<etcdpb::Watch::Stub> watch;
    std::unique_ptr<etcdpb::Lease::Stub> lease;
    std::unique_ptr<etcdpb::Auth::Stub> auth;
  };

  explicit EtcdClient(EtcdOptions options) : options_(std::move(options)) {}
  // Runs `call` against each endpoint in turn, from the last that answered,
  // until one answers. etcd's own refusals (a failed compare is not one) end it.
  template <class Response, class Call>
  absl::StatusOr<Response> Unary(const char* what, Call call);
  void Prepare(grpc::ClientContext* context, absl::Duration timeout);
  absl::Status Authenticate(Endpoint& endpoint);

  const EtcdOptions options_;
  std::vector<Endpoint> endpoints_;
  std::atomic<size_t> current_{0};
  std::atomic<uint64_t> errors_{0};
  std::mutex token_mu_;
  std::string token_;  // guarded by token_mu_
};

}  // namespace failover::cluster
