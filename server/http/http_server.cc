#include "server/http/http_server.h"

#include <httplib.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/trailers.h"
#include "failover/v1/decision.grpc.pb.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "server/http/gateway.h"
#include "server/http/status_page.h"
#include "server/log/log.h"

namespace failover::http {
namespace {

namespace v1 = ::failover::v1;

constexpr auto kCallDeadline = std::chrono::seconds(30);
// An idle event stream gets a comment this often, so a client that went
// away is noticed and its thread freed.
constexpr auto kKeepalive = std::chrono::seconds(10);
// Events buffered per event stream before its gRPC stream is paused (which
// in turn makes failoverd resync or drop it, as any slow watcher).
constexpr size_t kStreamBuffer = 256;

// Authorization headers go on as gRPC metadata, which allows printable ASCII only.
bool PrintableAscii(const std::string& s) {
  for (char c : s) {
    if (c < 0x20 || c > 0x7e) return false;
  }
  return true;
}

grpc::Status CallUnary(grpc::Channel* channel, const std::string& method, const std::string& request,
                       std::string* response, const std::string& authorization, const std::string& http_peer) {
  if (!PrintableAscii(authorization)) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "authorization: header is not printable ASCII");
  }
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + kCallDeadline);
  if (!authorization.empty()) ctx.AddMetadata("authorization", authorization);
  ctx.AddMetadata(kHttpPeerMetadata, http_peer);  // who did it, for admin events
  grpc::Slice slice(request);
  grpc::ByteBuffer in(&slice, 1);
  grpc::ByteBuffer out;
  grpc::Status status;
  grpc::CompletionQueue cq;
  grpc::GenericStub stub(channel->shared_from_this());
  auto call = stub.PrepareUnaryCall(&ctx, method, in, &cq);
  call->StartCall();
  call->Finish(&out, &status, reinterpret_cast<void*>(1));
  void* tag = nullptr;
  bool ok = false;
  cq.Next(&tag, &ok);
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
  if (!status.ok()) return status;
  std::vector<grpc::Slice> slices;
  if (!out.Dump(&slices).ok()) return grpc::Status(grpc::StatusCode::INTERNAL, "response unreadable");
  response->clear();
  for (const grpc::Slice& s : slices) response->append(reinterpret_cast<const char*>(s.begin()), s.size());
  return grpc::Status::OK;
}

// One WatchEvents call for one event stream, read on gRPC's callback threads
// into a small buffer that the HTTP thread writes out.
class WatchFeed final : public grpc::ClientReadReactor<v1::Event> {
 public:
  WatchFeed(v1::DecisionService::Stub* stub, const v1::WatchEventsRequest& request, const std::string& authorization)
      : request_(request) {
    if (!authorization.empty()) ctx_.AddMetadata("authorization", authorization);
    stub->async()->WatchEvents(&ctx_, &request_, this);
    StartRead(&event_);
    StartCall();
  }

  void OnReadInitialMetadataDone(bool ok) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      // A refusal may also come with (empty) initial metadata: only the mark counts.
      accepted_ = ok && ctx_.GetServerInitialMetadata().count(kWatchAcceptedHeader) > 0;
    }
    ready_.notify_all();
  }

  // Waits until failoverd accepted the stream (true) or refused it (false).
  bool WaitAccepted(std::chrono::seconds wait) {
    std::unique_lock<std::mutex> lock(mu_);
    ready_.wait_for(lock, wait, [&] { return accepted_ || done_; });
    return accepted_ && !done_;
  }

  void OnReadDone(bool ok) override {
    if (!ok) return;  // OnDone follows
    bool more = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      buffer_.push_back(Gateway::ToServerSentEvent(event_));
      more = buffer_.size() < kStreamBuffer;
      paused_ = !more;
    }
    ready_.notify_all();
    if (more) StartRead(&event_);
  }

  void OnDone(const grpc::Status& status) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_ = true;
      status_ = status;
    }
    ready_.notify_all();
  }

  // The next chunk to write: an event, "" after `wait` without one, or none
  // once the call ended (then `status()`).
  std::optional<std::string> Next(std::chrono::milliseconds wait) {
    std::string chunk;
    bool resume = false;
    {
      std::unique_lock<std::mutex> lock(mu_);
      ready_.wait_for(lock, wait, [&] { return !buffer_.empty() || done_; });
      if (buffer_.empty()) {
        if (done_) return std::nullopt;
        return std::string();
      }
      chunk = std::move(buffer_.front());
      buffer_.pop_front();
      resume = paused_;
      paused_ = false;
    }
    if (resume) StartRead(&event_);
    return chunk;
  }

  grpc::Status status() {
    std::lock_guard<std::mutex> lock(mu_);
    return status_;
  }

  // Ends the call and waits until gRPC is done with this object.
  void Close() {
    ctx_.TryCancel();
    std::unique_lock<std::mutex> lock(mu_);
    ready_.wait(lock, [&] { return done_; });
  }

 private:
  grpc::ClientContext ctx_;
  v1::WatchEventsRequest request_;
  v1::Event event_;
  std::mutex mu_;
  std::condition_variable ready_;
  std::deque<std::string> buffer_;
  bool paused_ = false;
  bool accepted_ = false;
  bool done_ = false;
  grpc::Status status_;
};

Request ToGatewayRequest(const httplib::Request& req) {
  Request out;
  out.method = req.method;
  out.path = req.path;
  for (const auto& [key, value] : req.params) out.query.emplace_back(key, value);
  out.authorization = req.get_header_value("Authorization");
  out.content_type = req.get_header_value("Content-Type");
  out.sec_fetch_site = req.get_header_value("Sec-Fetch-Site");
  out.body = req.body;
  out.peer = absl::StrCat(req.remote_addr, ":", req.remote_port);
  return out;
}

void Send(const Response& r, httplib::Response& res) {
  res.status = r.status;
  res.set_content(r.body, r.content_type.c_str());
}

void SecurityHeaders(httplib::Response& res) {
  // Everything the page needs is served from here; it is never framed
  // (its buttons act on failoverd).
  res.set_header("Content-Security-Policy", "default-src 'self'; frame-ancestors 'none'");
  res.set_header("X-Frame-Options", "DENY");
  res.set_header("X-Content-Type-Options", "nosniff");
  res.set_header("Referrer-Policy", "no-referrer");
  res.set_header("Cache-Control", "no-store");
}

bool SplitHostPort(const std::string& listen, std::string* host, int* port) {
  const size_t colon = listen.rfind(':');
  if (colon == std::string::npos) return false;
  *host = listen.substr(0, colon);
  if (host->size() >= 2 && host->front() == '[' && host->back() == ']') *host = host->substr(1, host->size() - 2);
  if (host->empty()) *host = "0.0.0.0";
  return absl::SimpleAtoi(listen.substr(colon + 1), port) && *port >= 0 && *port <= 65535;
}

}  // namespace

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(const HttpOptions& options,
                                                              std::shared_ptr<grpc::Channel> channel) {
  std::string host;
  int port = 0;
  if (!SplitHostPort(options.listen, &host, &port)) {
    return absl::InvalidArgumentError(absl::StrCat("--http-listen: expected host:port, got \"", options.listen, "\""));
  }
  std::unique_ptr<HttpServer> self(new HttpServer());
  self->channel_ = std::move(channel);
  if (!options.tls_cert.empty()) {
    auto tls = std::make_unique<httplib::SSLServer>(
        options.tls_cert.c_str(), options.tls_key.c_str(),
        options.tls_client_ca.empty() ? nullptr : options.tls_client_ca.c_str());
    if (!tls->is_valid()) {
      return absl::InvalidArgumentError(absl::StrCat("--http-listen: cannot serve TLS with --tls-cert ",
                                                     options.tls_cert, " and --tls-key ", options.tls_key));
    }
    self->server_ = std::move(tls);
  } else {
    self->server_ = std::make_unique<httplib::Server>();
  }
  httplib::Server& svr = *self->server_;
  const size_t threads = options.threads;
  svr.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  svr.set_payload_max_length(options.max_body);
  svr.set_read_timeout(10, 0);
  svr.set_write_timeout(10, 0);
  svr.set_keep_alive_max_count(100);
  svr.set_keep_alive_timeout(5);

  HttpServer* raw = self.get();
  auto gateway = std::make_shared<Gateway>(
      [raw](const std::string& method, const std::string& request, std::string* response, const Request& from) {
        return CallUnary(raw->channel_.get(), method, request, response, from.authorization, from.peer);
      });

  // The page and its assets.
  for (const StaticAsset& asset : StatusPageAssets()) {
    svr.Get(asset.path, [&asset](const httplib::Request&, httplib::Response& res) {
      SecurityHeaders(res);
      res.set_content(asset.body.data(), asset.body.size(), asset.content_type);
    });
  }

  // WatchEvents as Server-Sent Events.
  svr.Get("/v1/watch", [raw](const httplib::Request& req, httplib::Response& res) {
    SecurityHeaders(res);
    v1::WatchEventsRequest watch;
    const grpc::Status parsed =
        Gateway::WatchRequestFrom(ToGatewayRequest(req), req.get_header_value("Last-Event-ID"), &watch);
    if (!parsed.ok()) return Send(Gateway::Error(parsed), res);
    const std::string authorization = req.get_header_value("Authorization");
    if (!PrintableAscii(authorization)) {
      return Send(Gateway::Error(grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                                              "authorization: header is not printable ASCII")),
                  res);
    }
    if (raw->streams_.fetch_add(1) >= raw->max_streams_) {
      raw->streams_.fetch_sub(1);
      return Send(Gateway::Error(grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                                              absl::StrCat("at most ", raw->max_streams_,
                                                           " event streams at once on the HTTP port"))),
                  res);
    }
    auto stub = v1::DecisionService::NewStub(raw->channel_);
    auto feed = std::make_shared<WatchFeed>(stub.get(), watch, authorization);
    // Accepted (headers came back) or refused decides the response status.
    if (!feed->WaitAccepted(std::chrono::seconds(30))) {
      const grpc::Status refused = feed->status();
      feed->Close();
      raw->streams_.fetch_sub(1);
      return Send(Gateway::Error(refused.ok() ? grpc::Status(grpc::StatusCode::UNAVAILABLE, "stream ended") : refused),
                  res);
    }
    res.set_header("X-Accel-Buffering", "no");
    // A comment first, so the client sees the stream open at once.
    auto pending = std::make_shared<std::string>(": failoverd event stream\n\n");
    res.set_chunked_content_provider(
        "text/event-stream",
        [raw, feed, pending, stub = std::shared_ptr<v1::DecisionService::Stub>(std::move(stub))](
            size_t, httplib::DataSink& sink) {
          if (!pending->empty()) {
            const std::string chunk = std::move(*pending);
            pending->clear();
            return sink.write(chunk.data(), chunk.size());
          }
          if (raw->stopping_) return false;
          std::optional<std::string> next = feed->Next(std::chrono::duration_cast<std::chrono::milliseconds>(kKeepalive));
          if (!next.has_value()) {
            // The watch ended (failoverd stopping, a refused filter): say why, then end.
            const std::string ended = absl::StrCat("event: error\ndata: ", Gateway::Error(feed->status()).body, "\n");
            sink.write(ended.data(), ended.size());
            sink.done();
            return true;
          }
          const std::string chunk = next->empty() ? std::string(": keepalive\n\n") : std::move(*next);
          return sink.write(chunk.data(), chunk.size());
        },
        [raw, feed](bool) {
          feed->Close();
          raw->streams_.fetch_sub(1);
        });
  });

  // Every other route: one gRPC method each.
  auto json = [gateway](const httplib::Request& req, httplib::Response& res) {
    SecurityHeaders(res);
    Send(gateway->Handle(ToGatewayRequest(req)), res);
  };
  svr.Get(R"(/v1/.*)", json);
  svr.Post(R"(/v1/.*)", json);
  svr.Delete(R"(/v1/.*)", json);
  svr.Put(R"(/v1/.*)", json);
  svr.Patch(R"(/v1/.*)", json);
  svr.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    grpc::StatusCode code = grpc::StatusCode::NOT_FOUND;
    std::string message = absl::StrCat("no route ", req.method, " ", req.path.substr(0, 64));
    if (res.status == 413) {
      code = grpc::StatusCode::RESOURCE_EXHAUSTED;
      message = "body: larger than the limit (--max-message-bytes)";
    } else if (res.status != 404) {
      code = grpc::StatusCode::INVALID_ARGUMENT;
      message = absl::StrCat("request: not a valid HTTP request (", res.status, ")");
    }
    Send(Gateway::Error(grpc::Status(code, message), res.status), res);
  });

  raw->max_streams_ = options.max_streams;
  const int bound = port == 0 ? svr.bind_to_any_port(host) : (svr.bind_to_port(host, port) ? port : -1);
  if (bound <= 0) return absl::UnavailableError(absl::StrCat("cannot listen on ", options.listen, " (--http-listen)"));
  self->port_ = bound;
  self->thread_ = std::thread([raw] { raw->server_->listen_after_bind(); });
  return self;
}

HttpServer::~HttpServer() { Stop(); }

void HttpServer::Stop() {
  if (stopping_.exchange(true)) return;
  if (server_) server_->stop();
  if (thread_.joinable()) thread_.join();
}

}  // namespace failover::http
