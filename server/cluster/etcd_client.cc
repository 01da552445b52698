#include "server/cluster/etcd_client.h"

#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "grpcpp/grpcpp.h"
#include "server/cluster/await_call.h"

namespace failover::cluster {
namespace {

absl::StatusOr<std::string> ReadPem(const std::string& path, const char* flag) {
  std::ifstream in(path);
  if (!in) return absl::InvalidArgumentError(absl::StrCat(flag, ": cannot read ", path));
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

absl::Status FromGrpc(const grpc::Status& s, const std::string& endpoint, const char* what) {
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                      absl::StrCat("etcd ", endpoint, ": ", what, ": ", s.error_message()));
}

}  // namespace

absl::StatusOr<std::unique_ptr<EtcdClient>> EtcdClient::Create(EtcdOptions options) {
  if (options.endpoints.empty()) return absl::InvalidArgumentError("--etcd-endpoints: no endpoint given");
  std::shared_ptr<grpc::ChannelCredentials> credentials = grpc::InsecureChannelCredentials();
  if (!options.ca.empty() || !options.cert.empty()) {
    grpc::SslCredentialsOptions ssl;
    if (!options.ca.empty()) {
      auto ca = ReadPem(options.ca, "--etcd-ca");
      if (!ca.ok()) return ca.status();
      ssl.pem_root_certs = *ca;
    }
    if (!options.cert.empty() || !options.key.empty()) {
      if (options.cert.empty() || options.key.empty()) {
        return absl::InvalidArgumentError("--etcd-cert and --etcd-key: give both or neither");
      }
      auto cert = ReadPem(options.cert, "--etcd-cert");
      if (!cert.ok()) return cert.status();
      auto key = ReadPem(options.key, "--etcd-key");
      if (!key.ok()) return key.status();
      ssl.pem_cert_chain = *cert;
      ssl.pem_private_key = *key;
    }
    credentials = grpc::SslCredentials(ssl);
  }
  std::unique_ptr<EtcdClient> client(new EtcdClient(std::move(options)));
  for (const std::string& address : client->options_.endpoints) {
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
    args.SetMaxReceiveMessageSize(64 << 20);
    std::shared_ptr<grpc::Channel> channel = grpc::CreateCustomChannel(address, credentials, args);
    Endpoint endpoint;
    endpoint.address = address;
    endpoint.kv = etcdpb::KV::NewStub(channel);
    endpoint.watch = etcdpb::Watch::NewStub(channel);
    endpoint.lease = etcdpb::Lease::NewStub(channel);
    endpoint.auth = etcdpb::Auth::NewStub(channel);
    client->endpoints_.push_back(std::move(endpoint));
  }
  return client;
}

void EtcdClient::Prepare(grpc::ClientContext* context, absl::Duration timeout) {
  context->set_deadline(std::chrono::system_clock::now() + absl::ToChronoMilliseconds(timeout));
  std::lock_guard<std::mutex> lock(token_mu_);
  if (!token_.empty()) context->AddMetadata("token", token_);
}

absl::Status EtcdClient::Authenticate(Endpoint& endpoint) {
  etcdpb::AuthenticateRequest request;
  request.set_name(options_.user);
  request.set_password(options_.password);
  etcdpb::AuthenticateResponse response;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + absl::ToChronoMilliseconds(options_.call_timeout));
  const grpc::Status s = endpoint.auth->Authenticate(&context, request, &response);
  if (!s.ok()) return FromGrpc(s, endpoint.address, "authenticate");
  std::lock_guard<std::mutex> lock(token_mu_);
  token_ = response.token();
  return absl::OkStatus();
}

template <class Response, class Call>
absl::StatusOr<Response> EtcdClient::Unary(const char* what, Call call) {
  absl::Status last;
  const size_t start = current_.load(std::memory_order_relaxed);
  for (size_t i = 0; i < endpoints_.size(); ++i) {
    const size_t index = (start + i) % endpoints_.size();
    Endpoint& endpoint = endpoints_[index];
    bool token_missing;
    {
      std::lock_guard<std::mutex> lock(token_mu_);
      token_missing = token_.empty();
    }
    if (!options_.user.empty() && token_missing) {
      last = Authenticate(endpoint);
      if (!last.ok()) {
        errors_.fetch_add(1, std::memory_order_relaxed);
        continue;
      }
    }
    for (int attempt = 0;; ++attempt) {
      Response response;
      grpc::ClientContext context;
      Prepare(&context, options_.call_timeout);
      const grpc::Status s = call(endpoint, &context, &response);
      if (s.ok()) {
        current_.store(index, std::memory_order_relaxed);
        return response;
      }
      errors_.fetch_add(1, std::memory_order_relaxed);
      last = FromGrpc(s, endpoint.address, what);
      // etcd's tokens expire (5 minutes by default): get a new one, once.
      if (s.error_code() == grpc::StatusCode::UNAUTHENTICATED && !options_.user.empty() && attempt == 0) {
        if (Authenticate(endpoint).ok()) continue;
      }
      break;
    }
    // Another endpoint is worth a try when this one is down, cut off from its
    // cluster's leader, or too slow; anything else is etcd's answer.
    if (last.code() != absl::StatusCode::kUnavailable && last.code() != absl::StatusCode::kDeadlineExceeded &&
        last.code() != absl::StatusCode::kCancelled) {
      return last;
    }
  }
  return last;
}

absl::StatusOr<etcdpb::RangeResponse> EtcdClient::Range(const etcdpb::RangeRequest& request) {
  return Unary<etcdpb::RangeResponse>("range", [&](Endpoint& e, grpc::ClientContext* c, etcdpb::RangeResponse* r) {
    return AwaitCall([&](auto done) { e.kv->async()->Range(c, &request, r, std::move(done)); });
  });
}

absl::StatusOr<etcdpb::TxnResponse> EtcdClient::Txn(const etcdpb::TxnRequest& request) {
  return Unary<etcdpb::TxnResponse>("txn", [&](Endpoint& e, grpc::ClientContext* c, etcdpb::TxnResponse* r) {
    return AwaitCall([&](auto done) { e.kv->async()->Txn(c, &request, r, std::move(done)); });
  });
}

absl::StatusOr<etcdpb::PutResponse> EtcdClient::Put(const etcdpb::PutRequest& request) {
  return Unary<etcdpb::PutResponse>("put", [&](Endpoint& e, grpc::ClientContext* c, etcdpb::PutResponse* r) {
    return AwaitCall([&](auto done) { e.kv->async()->Put(c, &request, r, std::move(done)); });
  });
}

absl::StatusOr<etcdpb::DeleteRangeResponse> EtcdClient::DeleteRange(const etcdpb::DeleteRangeRequest& request) {
  return Unary<etcdpb::DeleteRangeResponse>(
      "delete", [&](Endpoint& e, grpc::ClientContext* c, etcdpb::DeleteRangeResponse* r) {
        return AwaitCall([&](auto done) { e.kv->async()->DeleteRange(c, &request, r, std::move(done)); });
      });
}

absl::StatusOr<int64_t> EtcdClient::Grant(absl::Duration ttl) {
  etcdpb::LeaseGrantRequest request;
  request.set_ttl(std::max<int64_t>(1, absl::ToInt64Seconds(ttl)));
  auto granted = Unary<etcdpb::LeaseGrantResponse>(
      "lease grant", [&](Endpoint& e, grpc::ClientContext* c, etcdpb::LeaseGrantResponse* r) {
        return AwaitCall([&](auto done) { e.lease->async()->LeaseGrant(c, &request, r, std::move(done)); });
      });
  if (!granted.ok()) return granted.status();
  if (!granted->error().empty()) return absl::UnavailableError(absl::StrCat("etcd lease grant: ", granted->error()));
  return granted->id();
}

absl::StatusOr<int64_t> EtcdClient::KeepAlive(int64_t lease) {
  // LeaseKeepAlive is a stream; one request and its answer renew once.
  auto renewed = Unary<etcdpb::LeaseKeepAliveResponse>(
      "lease keepalive", [&](Endpoint& e, grpc::ClientContext* c, etcdpb::LeaseKeepAliveResponse* r) {
        auto stream = e.lease->LeaseKeepAlive(c);
        etcdpb::LeaseKeepAliveRequest request;
        request.set_id(lease);
        if (!stream->Write(request) || !stream->Read(r)) {
          c->TryCancel();
          grpc::Status s = stream->Finish();
          return s.ok() ? grpc::Status(grpc::StatusCode::UNAVAILABLE, "keepalive stream ended") : s;
        }
        stream->WritesDone();
        c->TryCancel();
        (void)stream->Finish();
        return grpc::Status::OK;
      });
  if (!renewed.ok()) return renewed.status();
  return renewed->ttl();
}

void EtcdClient::Revoke(int64_t lease) {
  etcdpb::LeaseRevokeRequest request;
  request.set_id(lease);
  (void)Unary<etcdpb::LeaseRevokeResponse>(
      "lease revoke", [&](Endpoint& e, grpc::ClientContext* c, etcdpb::LeaseRevokeResponse* r) {
        return AwaitCall([&](auto done) { e.lease->async()->LeaseRevoke(c, &request, r, std::move(done)); });
      });
}

void EtcdClient::GrpcWatch::Start(etcdpb::Watch::Stub* stub, const etcdpb::WatchCreateRequest& request) {
  *create_.mutable_create_request() = request;
  stub->async()->Watch(&context_, this);
  StartWrite(&create_);  // a failed write fails the read after it
  StartReading(&context_);
}

EtcdClient::GrpcWatch::~GrpcWatch() { (void)Finish(); }

bool EtcdClient::GrpcWatch::Next(etcdpb::WatchResponse* response) {
  if (!status_.ok()) return false;
  if (Read(response)) {
    if (!response->cancel_reason().empty() || (response->canceled() && !response->created())) {
      status_ = absl::UnavailableError(absl::StrCat("etcd ", endpoint_, ": watch cancelled: ",
                                                    response->cancel_reason().empty() ? "by etcd"
                                                                                      : response->cancel_reason()));
      if (response->compact_revision() != 0) {
        status_ = absl::OutOfRangeError(absl::StrCat("etcd ", endpoint_, ": watch start compacted away (revision ",
                                                     response->compact_revision(), ")"));
      }
      return false;
    }
    return true;
  }
  const grpc::Status s = Finish();
  status_ = s.ok() ? absl::UnavailableError(absl::StrCat("etcd ", endpoint_, ": watch ended"))
                   : FromGrpc(s, endpoint_, "watch");
  return false;
}

absl::StatusOr<std::unique_ptr<Etcd::Watch>> EtcdClient::StartWatch(const etcdpb::WatchCreateRequest& request) {
  absl::Status last;
  const size_t start = current_.load(std::memory_order_relaxed);
  for (size_t i = 0; i < endpoints_.size(); ++i) {
    const size_t index = (start + i) % endpoints_.size();
    Endpoint& endpoint = endpoints_[index];
    std::unique_ptr<GrpcWatch> watch(new GrpcWatch());
    watch->endpoint_ = endpoint.address;
    {
      std::lock_guard<std::mutex> lock(token_mu_);
      if (!token_.empty()) watch->context_.AddMetadata("token", token_);
    }
    // A member cut off from its cluster's leader ends the watch instead of
    // going silent, so the replica moves to a member that has one.
    watch->context_.AddMetadata("hasleader", "true");
    watch->Start(endpoint.watch.get(), request);
    etcdpb::WatchResponse created;
    if (watch->Read(&created) && created.created() && !created.canceled()) {
      current_.store(index, std::memory_order_relaxed);
      return watch;
    }
    errors_.fetch_add(1, std::memory_order_relaxed);
    const grpc::Status s = watch->Finish();
    last = s.ok() ? absl::UnavailableError(absl::StrCat("etcd ", endpoint.address, ": watch refused: ",
                                                        created.cancel_reason()))
                  : FromGrpc(s, endpoint.address, "watch");
    if (created.compact_revision() != 0) {
      return absl::OutOfRangeError(absl::StrCat("etcd ", endpoint.address, ": watch start compacted away (revision ",
                                                created.compact_revision(), ")"));
    }
  }
  return last;
}

}  // namespace failover::cluster
