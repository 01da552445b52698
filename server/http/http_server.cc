#include "server/http/http_server.h"

#include <atomic>
#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <sstream>
#include <type_traits>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/trailers.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "server/http/gateway.h"
#include "server/http/host_check.h"
#include "server/http/status_page.h"
#include "server/http/watch_feed.h"
#include "server/log/log.h"

namespace failover::http {
namespace {

namespace v1 = ::failover::v1;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
namespace net = boost::asio;
namespace ssl = boost::asio::ssl;
using tcp = net::ip::tcp;

constexpr auto kCallDeadline = std::chrono::seconds(30);
// An idle event stream gets a comment this often, so a client that went
// away is noticed.
constexpr auto kKeepalive = std::chrono::seconds(10);
// How long an event stream may wait for failoverd to accept it.
constexpr auto kStreamOpening = std::chrono::seconds(30);
// After refusing a request whose body is still coming, read and drop up to
// this much of it before closing, so the client sees the answer instead of a
// reset.
constexpr auto kLingerTime = std::chrono::seconds(2);
constexpr size_t kLingerBytes = 1 << 20;
// Events written to a stream in one write, at most (more wait for the next).
constexpr size_t kStreamWriteBytes = 64 << 10;

// Authorization headers go on as gRPC metadata, which allows printable ASCII only.
bool PrintableAscii(const std::string& s) {
  for (char c : s) {
    if (c < 0x20 || c > 0x7e) return false;
  }
  return true;
}

grpc::Status NotPrintable() {
  return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "authorization: header is not printable ASCII");
}

bool SplitHostPort(const std::string& listen, std::string* host, int* port) {
  const size_t colon = listen.rfind(':');
  if (colon == std::string::npos) return false;
  *host = listen.substr(0, colon);
  if (host->size() >= 2 && host->front() == '[' && host->back() == ']') *host = host->substr(1, host->size() - 2);
  if (host->empty()) *host = "0.0.0.0";
  return absl::SimpleAtoi(listen.substr(colon + 1), port) && *port >= 0 && *port <= 65535;
}

// Counts the JSON calls gRPC still holds, so that stopping waits for them.
class InFlightCalls {
 public:
  void Begin() {
    std::lock_guard<std::mutex> lock(mu_);
    ++count_;
  }
  void End() {
    std::lock_guard<std::mutex> lock(mu_);
    if (--count_ == 0) idle_.notify_all();
  }
  void AwaitNone() {
    std::unique_lock<std::mutex> lock(mu_);
    idle_.wait(lock, [&] { return count_ == 0; });
  }

 private:
  std::mutex mu_;
  std::condition_variable idle_;
  size_t count_ = 0;
};

// What every connection shares; connections hold it, so it outlives them all.
struct Shared {
  Shared(const HttpOptions& o, std::shared_ptr<grpc::Channel> c, const std::vector<std::string>& hosts)
      : options(o), channel(std::move(c)), stub(channel), host_check(hosts) {}

  // Starts one JSON route's gRPC call without waiting for it; `done` runs on a
  // gRPC thread with the status and the serialized response.
  void CallAsync(const Gateway::Call& call, const Request& from,
                 std::function<void(const grpc::Status&, std::string)> done) {
    if (!PrintableAscii(from.authorization)) return done(NotPrintable(), "");
    struct InFlight {
      grpc::ClientContext ctx;
      grpc::ByteBuffer in;
      grpc::ByteBuffer out;
    };
    auto flight = std::make_shared<InFlight>();
    flight->ctx.set_deadline(std::chrono::system_clock::now() + kCallDeadline);
    if (!from.authorization.empty()) flight->ctx.AddMetadata("authorization", from.authorization);
    flight->ctx.AddMetadata(kHttpPeerMetadata, from.peer);  // who did it, for admin events
    grpc::Slice slice(call.request);
    flight->in = grpc::ByteBuffer(&slice, 1);
    calls.Begin();
    stub.UnaryCall(&flight->ctx, call.method, grpc::StubOptions(), &flight->in, &flight->out,
                   [this, flight, done = std::move(done)](grpc::Status status) mutable {
                     std::string response;
                     std::vector<grpc::Slice> slices;
                     if (status.ok() && !flight->out.Dump(&slices).ok()) {
                       status = grpc::Status(grpc::StatusCode::INTERNAL, "response unreadable");
                     }
                     for (const grpc::Slice& s : slices) {
                       response.append(reinterpret_cast<const char*>(s.begin()), s.size());
                     }
                     done(status, std::move(response));
                     done = nullptr;  // what it holds goes before stopping may go on
                     calls.End();
                   });
  }

  const HttpOptions options;
  const std::shared_ptr<grpc::Channel> channel;
  grpc::GenericStub stub;
  const HostCheck host_check;
  std::optional<ssl::context> tls;
  std::atomic<size_t> connections{0};
  std::atomic<size_t> streams{0};
  InFlightCalls calls;
  FeedRegistry feeds;
};

template <class Fields>
void SecurityHeaders(bhttp::header<false, Fields>& res) {
  // Everything the page needs is served from here; it is never framed
  // (its buttons act on failoverd).
  res.set("Content-Security-Policy", "default-src 'self'; frame-ancestors 'none'");
  res.set("X-Frame-Options", "DENY");
  res.set("X-Content-Type-Options", "nosniff");
  res.set("Referrer-Policy", "no-referrer");
  res.set(bhttp::field::cache_control, "no-store");
}

// The request as the gateway takes it: the path still percent-encoded, the
// query decoded ('+' is a space, as forms and URLSearchParams send it).
Request ToGatewayRequest(const bhttp::request<bhttp::string_body>& req, const std::string& peer) {
  Request out;
  out.method = std::string(req.method_string());
  const std::string target(req.target());
  const size_t question = target.find('?');
  out.path = target.substr(0, question);
  if (question != std::string::npos) {
    for (absl::string_view pair : absl::StrSplit(target.substr(question + 1), '&', absl::SkipEmpty())) {
      std::vector<std::string> kv = absl::StrSplit(pair, absl::MaxSplits('=', 1));
      kv.resize(2);
      std::string key, value;
      for (std::string* s : {&kv[0], &kv[1]}) std::replace(s->begin(), s->end(), '+', ' ');
      if (!PercentDecode(kv[0], &key)) key = kv[0];
      if (!PercentDecode(kv[1], &value)) value = kv[1];
      out.query.emplace_back(std::move(key), std::move(value));
    }
  }
  out.authorization = std::string(req[bhttp::field::authorization]);
  out.content_type = std::string(req[bhttp::field::content_type]);
  out.sec_fetch_site = std::string(req["Sec-Fetch-Site"]);
  out.body = req.body();
  out.peer = peer;
  return out;
}

const StaticAsset* FindAsset(const std::string& path) {
  for (const StaticAsset& asset : StatusPageAssets()) {
    if (path == asset.path) return &asset;
  }
  return nullptr;
}

std::string Chunk(absl::string_view data) {
  std::ostringstream hex;
  hex << std::hex << data.size();
  return absl::StrCat(hex.str(), "\r\n", data, "\r\n");
}

// One client connection: reads requests one after another (keep-alive),
// answers each, or becomes an event stream. All its work runs on its strand.
template <class Stream>
class Connection : public std::enable_shared_from_this<Connection<Stream>> {
 public:
  static constexpr bool kTls = std::is_same_v<Stream, beast::ssl_stream<beast::tcp_stream>>;

  Connection(std::shared_ptr<Shared> shared, Stream stream, std::string peer)
      : shared_(std::move(shared)), stream_(std::move(stream)), peer_(std::move(peer)), tick_(stream_.get_executor()) {}

  ~Connection() {
    if (feed_) feed_->Cancel();
    if (counted_stream_) shared_->streams.fetch_sub(1);
    shared_->connections.fetch_sub(1);
  }

  void Start() {
    if constexpr (kTls) {
      // The hello is part of the header section's deadline.
      Tcp().expires_after(options().header_timeout);
      stream_.async_handshake(ssl::stream_base::server,
                              [self = this->shared_from_this()](beast::error_code ec) {
                                if (ec) return self->Close();
                                self->ReadHeader();
                              });
    } else {
      ReadHeader();
    }
  }

 private:
  beast::tcp_stream& Tcp() { return beast::get_lowest_layer(stream_); }
  const HttpOptions& options() const { return shared_->options; }

  void ReadHeader() {
    parser_.emplace();
    parser_->header_limit(static_cast<uint32_t>(options().max_header_bytes));
    parser_->body_limit(options().max_body);
    Tcp().expires_after(options().header_timeout);
    bhttp::async_read_header(stream_, buffer_, *parser_,
                             [self = this->shared_from_this()](beast::error_code ec, size_t) { self->OnHeader(ec); });
  }

  void OnHeader(beast::error_code ec) {
    if (ec) return OnReadError(ec);
    const auto& req = parser_->get();
    version_ = req.version();
    if (static_cast<size_t>(std::distance(req.begin(), req.end())) > options().max_header_fields) {
      return Refuse(431, grpc::StatusCode::RESOURCE_EXHAUSTED,
                    absl::StrCat("headers: more than ", options().max_header_fields, " header lines"));
    }
    const std::string host(req[bhttp::field::host]);
    if (!shared_->host_check.Allowed(host)) {
      return Refuse(403, grpc::StatusCode::PERMISSION_DENIED,
                    absl::StrCat("host: \"", host.substr(0, 64),
                                 "\" is not a name this port answers to (--http-allowed-hosts)"));
    }
    if (parser_->is_done()) return Dispatch();
    if (beast::iequals(req[bhttp::field::expect], "100-continue")) {
      auto cont = std::make_shared<bhttp::response<bhttp::empty_body>>(bhttp::status::continue_, version_);
      Tcp().expires_after(options().write_timeout);
      bhttp::async_write(stream_, *cont, [self = this->shared_from_this(), cont](beast::error_code ec, size_t) {
        if (ec) return self->Close();
        self->ReadBody();
      });
      return;
    }
    ReadBody();
  }

  void ReadBody() {
    // A small body usually came with the headers: parse what is buffered
    // first (the same limits apply) and read only if more is needed.
    parser_->eager(true);
    while (!parser_->is_done() && buffer_.size() > 0) {
      beast::error_code ec;
      const size_t used = parser_->put(buffer_.data(), ec);
      buffer_.consume(used);
      if (ec == bhttp::error::need_more) break;
      if (ec) return OnReadError(ec);
      if (used == 0) break;
    }
    if (parser_->is_done()) return Dispatch();
    Tcp().expires_after(options().body_timeout);
    bhttp::async_read(stream_, buffer_, *parser_, [self = this->shared_from_this()](beast::error_code ec, size_t) {
      if (ec) return self->OnReadError(ec);
      self->Dispatch();
    });
  }

  void OnReadError(beast::error_code ec) {
    if (ec == bhttp::error::header_limit) {
      return Refuse(431, grpc::StatusCode::RESOURCE_EXHAUSTED,
                    absl::StrCat("headers: larger than ", options().max_header_bytes, " bytes"));
    }
    if (ec == bhttp::error::body_limit) {
      return Refuse(413, grpc::StatusCode::RESOURCE_EXHAUSTED, "body: larger than the limit (--max-message-bytes)");
    }
    // Gone, timed out, or cut off: nothing to answer.
    if (ec == bhttp::error::end_of_stream || ec == bhttp::error::partial_message || ec == beast::error::timeout ||
        ec.category() != bhttp::make_error_code(bhttp::error::bad_method).category()) {
      return Close();
    }
    Refuse(400, grpc::StatusCode::INVALID_ARGUMENT, absl::StrCat("request: not a valid HTTP request (", ec.message(), ")"));
  }

  // Answers, then closes without reading what else the client sends.
  void Refuse(int http_status, grpc::StatusCode code, const std::string& message) {
    Reply(Gateway::Error(grpc::Status(code, message), http_status), /*keep_alive=*/false);
  }

  void Dispatch() {
    bhttp::request<bhttp::string_body> req = parser_->release();
    parser_.reset();
    const bool keep_alive = req.keep_alive();
    Request request = ToGatewayRequest(req, peer_);
    const bool get = request.method == "GET" || request.method == "HEAD";
    if (request.path == "/v1/watch" && request.method == "GET") {
      return OpenStream(request, std::string(req["Last-Event-ID"]), keep_alive);
    }
    if (const StaticAsset* asset = FindAsset(request.path); asset != nullptr && get) {
      Response page{200, asset->content_type, std::string(asset->body)};
      return Reply(std::move(page), keep_alive, /*head=*/request.method == "HEAD");
    }
    if (!absl::StartsWith(request.path, "/v1/")) {
      const std::string message = absl::StrCat("no route ", request.method, " ", request.path.substr(0, 64));
      return Reply(Gateway::Error(grpc::Status(grpc::StatusCode::NOT_FOUND, message)), keep_alive);
    }
    auto call = std::make_shared<Gateway::Call>(Gateway::Prepare(request));
    if (call->answer.has_value()) return Reply(std::move(*call->answer), keep_alive);
    // No thread waits for the call: its answer comes back to this connection's strand.
    shared_->CallAsync(*call, request,
                       [self = this->shared_from_this(), call, keep_alive](const grpc::Status& status,
                                                                           std::string response) {
                         auto executor = self->stream_.get_executor();
                         net::post(executor, [self, call, keep_alive, status, response = std::move(response)] {
                           self->Reply(Gateway::Finish(*call, status, response), keep_alive);
                         });
                       });
  }

  // One response, headers and body in one write.
  void Reply(Response r, bool keep_alive, bool head = false) {
    auto res = std::make_shared<bhttp::response<bhttp::string_body>>(static_cast<bhttp::status>(r.status), version_);
    SecurityHeaders(*res);
    res->set(bhttp::field::content_type, r.content_type);
    res->keep_alive(keep_alive);
    res->body() = std::move(r.body);
    res->prepare_payload();
    if (head) res->body().clear();  // Content-Length stays the GET's
    Tcp().expires_after(options().write_timeout);
    bhttp::async_write(stream_, *res, [self = this->shared_from_this(), res](beast::error_code ec, size_t) {
      if (ec) return self->Close();
      if (res->keep_alive()) return self->ReadHeader();
      self->Linger();
    });
  }

  // Half-closes, then drops what the client still sends (bounded in bytes
  // and time) so that it reads the answer rather than a reset.
  void Linger() {
    beast::error_code ignored;
    Tcp().socket().shutdown(tcp::socket::shutdown_send, ignored);
    Tcp().expires_after(kLingerTime);
    drain_.resize(16 << 10);
    DrainSome();
  }

  void DrainSome() {
    Tcp().async_read_some(net::buffer(drain_), [self = this->shared_from_this()](beast::error_code ec, size_t n) {
      self->drained_ += n;
      if (ec || self->drained_ >= kLingerBytes) return self->Close();
      self->DrainSome();
    });
  }

  void Close() {
    closed_ = true;
    tick_.cancel();
    if (feed_) feed_->Cancel();
    beast::error_code ignored;
    Tcp().socket().shutdown(tcp::socket::shutdown_both, ignored);
    Tcp().close();
  }

  // --- GET /v1/watch ---

  void OpenStream(const Request& request, const std::string& last_event_id, bool keep_alive) {
    v1::WatchEventsRequest watch;
    const grpc::Status parsed = Gateway::WatchRequestFrom(request, last_event_id, &watch);
    if (!parsed.ok()) return Reply(Gateway::Error(parsed), keep_alive);
    if (!PrintableAscii(request.authorization)) return Reply(Gateway::Error(NotPrintable()), keep_alive);
    if (shared_->streams.fetch_add(1) >= options().max_streams) {
      shared_->streams.fetch_sub(1);
      return Reply(Gateway::Error(grpc::Status(
                       grpc::StatusCode::RESOURCE_EXHAUSTED,
                       absl::StrCat("at most ", options().max_streams, " event streams at once on the HTTP port"))),
                   keep_alive);
    }
    counted_stream_ = true;
    std::weak_ptr<Connection> weak = this->shared_from_this();
    auto executor = stream_.get_executor();
    feed_ = WatchFeed::Start(shared_->channel, watch, request.authorization, &shared_->feeds, [weak, executor] {
      net::post(executor, [weak] {
        if (auto self = weak.lock()) self->FeedChanged();
      });
    });
    // Given up if failoverd neither accepts nor refuses it in time.
    tick_.expires_after(kStreamOpening);
    tick_.async_wait([self = this->shared_from_this()](beast::error_code ec) {
      if (!ec && !self->stream_open_) self->feed_->Cancel();
    });
  }

  void FeedChanged() {
    if (closed_) return;
    if (!stream_open_) {
      const WatchFeed::Phase phase = feed_->phase();
      if (phase == WatchFeed::Phase::kOpening) return;
      if (!feed_->accepted()) {
        // Refused (a bad token, a filter naming nothing): an ordinary error answer.
        const grpc::Status refused = feed_->status();
        return Reply(Gateway::Error(refused.ok() ? grpc::Status(grpc::StatusCode::UNAVAILABLE, "stream ended")
                                                 : refused),
                     /*keep_alive=*/false);
      }
      stream_open_ = true;
      bhttp::response<bhttp::empty_body> res(bhttp::status::ok, version_);
      SecurityHeaders(res);
      res.set(bhttp::field::content_type, "text/event-stream");
      res.set("X-Accel-Buffering", "no");
      res.chunked(true);
      res.keep_alive(false);
      std::ostringstream head;
      head << res.base();
      // A comment first, so the client sees the stream open at once.
      WriteStream(absl::StrCat(head.str(), Chunk(": failoverd event stream\n\n")), false);
      ScheduleKeepalive();
      return;
    }
    Pump();
  }

  void Pump() {
    if (writing_ || closed_) return;
    const bool ended = feed_->phase() == WatchFeed::Phase::kEnded;  // before Take: nothing comes after the end
    feed_->Take(&pending_);
    std::string data;
    while (!pending_.empty() && data.size() < kStreamWriteBytes) {
      data += pending_.front();
      pending_.pop_front();
    }
    if (!data.empty()) return WriteStream(Chunk(data), false);
    if (!ended) return;
    // The watch ended (failoverd stopping, a resync refused): say why, then end.
    const std::string why = absl::StrCat("event: error\ndata: ", Gateway::Error(feed_->status()).body, "\n");
    WriteStream(absl::StrCat(Chunk(why), "0\r\n\r\n"), true);
  }

  void WriteStream(std::string bytes, bool last) {
    writing_ = true;
    out_ = std::move(bytes);
    // A client that stops reading stalls the write and is dropped here.
    Tcp().expires_after(options().write_timeout);
    net::async_write(stream_, net::buffer(out_),
                     [self = this->shared_from_this(), last](beast::error_code ec, size_t) {
                       self->writing_ = false;
                       if (ec) return self->Close();
                       if (last) return self->Linger();
                       self->Pump();
                     });
  }

  void ScheduleKeepalive() {
    tick_.expires_after(kKeepalive);
    tick_.async_wait([self = this->shared_from_this()](beast::error_code ec) {
      if (ec || self->closed_) return;
      if (!self->writing_) self->WriteStream(Chunk(": keepalive\n\n"), false);
      self->ScheduleKeepalive();
    });
  }

  std::shared_ptr<Shared> shared_;
  Stream stream_;
  std::string peer_;
  beast::flat_buffer buffer_;
  std::optional<bhttp::request_parser<bhttp::string_body>> parser_;
  unsigned version_ = 11;
  bool closed_ = false;
  std::vector<char> drain_;  // only while lingering
  size_t drained_ = 0;
  // An event stream.
  net::steady_timer tick_;
  std::shared_ptr<WatchFeed> feed_;
  bool counted_stream_ = false;
  bool stream_open_ = false;
  bool writing_ = false;
  std::deque<std::string> pending_;
  std::string out_;
};

}  // namespace

struct HttpServer::Impl {
  std::shared_ptr<Shared> shared;
  net::io_context ioc;
  std::optional<tcp::acceptor> acceptor;
  std::optional<net::steady_timer> retry;
  std::vector<std::thread> threads;
  std::atomic<bool> stopped{false};
  bool accept_failing = false;  // only the accept loop touches it

  void Accept() {
    acceptor->async_accept(net::make_strand(ioc), [this](beast::error_code ec, tcp::socket socket) {
      if (ec == net::error::operation_aborted) return;
      if (ec) {
        // Out of descriptors, say: the listener stays; try again shortly.
        if (!accept_failing) {
          log::Warn("HTTP port: cannot accept connections; retrying every 200 ms", {{"error", ec.message()}});
        }
        accept_failing = true;
        retry->expires_after(std::chrono::milliseconds(200));
        retry->async_wait([this](beast::error_code wait) {
          if (!wait) Accept();
        });
        return;
      }
      if (accept_failing) log::Info("HTTP port: accepting connections again");
      accept_failing = false;
      Serve(std::move(socket));
      Accept();
    });
  }

  void Serve(tcp::socket socket) {
    beast::error_code ec;
    const tcp::endpoint remote = socket.remote_endpoint(ec);
    if (ec) return;
    if (shared->connections.fetch_add(1) >= shared->options.max_connections) {
      shared->connections.fetch_sub(1);
      if (!shared->tls) {
        static constexpr char kBusy[] =
            "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nConnection: close\r\n"
            "Content-Length: 96\r\n\r\n"
            "{\"status\":\"UNAVAILABLE\",\"message\":\"connections: the HTTP port is at its limit; try again\"}\n  ";
        socket.non_blocking(true, ec);
        socket.write_some(net::buffer(kBusy, sizeof(kBusy) - 1), ec);
      }
      socket.close(ec);
      return;
    }
    socket.set_option(tcp::no_delay(true), ec);  // one write per response, sent at once
    std::string peer = absl::StrCat(remote.address().to_string(), ":", remote.port());
    if (shared->tls) {
      std::make_shared<Connection<beast::ssl_stream<beast::tcp_stream>>>(
          shared, beast::ssl_stream<beast::tcp_stream>(beast::tcp_stream(std::move(socket)), *shared->tls),
          std::move(peer))
          ->Start();
    } else {
      std::make_shared<Connection<beast::tcp_stream>>(shared, beast::tcp_stream(std::move(socket)), std::move(peer))
          ->Start();
    }
  }
};

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(const HttpOptions& options,
                                                              std::shared_ptr<grpc::Channel> channel) {
  std::string host;
  int port = 0;
  if (!SplitHostPort(options.listen, &host, &port)) {
    return absl::InvalidArgumentError(absl::StrCat("--http-listen: expected host:port, got \"", options.listen, "\""));
  }
  std::vector<std::string> hosts = options.allowed_hosts;
  hosts.push_back(host);
  std::unique_ptr<HttpServer> self(new HttpServer());
  self->impl_ = std::make_unique<Impl>();
  Impl& impl = *self->impl_;
  impl.shared = std::make_shared<Shared>(options, std::move(channel), hosts);

  if (!options.tls_cert.empty()) {
    ssl::context tls(ssl::context::tls_server);
    tls.set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 | ssl::context::no_sslv3 |
                    ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1);
    beast::error_code ec;
    tls.use_certificate_chain_file(options.tls_cert, ec);
    if (!ec) tls.use_private_key_file(options.tls_key, ssl::context::pem, ec);
    if (!ec && !options.tls_client_ca.empty()) {
      tls.load_verify_file(options.tls_client_ca, ec);
      tls.set_verify_mode(ssl::verify_peer | ssl::verify_fail_if_no_peer_cert);
    }
    if (ec) {
      return absl::InvalidArgumentError(absl::StrCat("--http-listen: cannot serve TLS with --tls-cert ",
                                                     options.tls_cert, " and --tls-key ", options.tls_key, ": ",
                                                     ec.message()));
    }
    impl.shared->tls.emplace(std::move(tls));
  }

  beast::error_code ec;
  const net::ip::address address = net::ip::make_address(host, ec);
  if (ec) {
    return absl::InvalidArgumentError(
        absl::StrCat("--http-listen: \"", host, "\" is not an IP address (", ec.message(), ")"));
  }
  impl.acceptor.emplace(impl.ioc);
  const tcp::endpoint endpoint(address, static_cast<uint16_t>(port));
  impl.acceptor->open(endpoint.protocol(), ec);
  if (!ec) impl.acceptor->set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) impl.acceptor->bind(endpoint, ec);
  if (!ec) impl.acceptor->listen(net::socket_base::max_listen_connections, ec);
  if (ec) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", options.listen, " (--http-listen): ", ec.message()));
  }
  self->port_ = impl.acceptor->local_endpoint().port();
  impl.retry.emplace(impl.ioc);
  impl.Accept();
  for (size_t i = 0; i < std::max<size_t>(1, options.io_threads); ++i) {
    impl.threads.emplace_back([&impl] { impl.ioc.run(); });
  }
  return self;
}

HttpServer::~HttpServer() { Stop(); }

void HttpServer::Stop() {
  if (impl_ == nullptr || impl_->stopped.exchange(true)) return;
  impl_->ioc.stop();
  for (std::thread& t : impl_->threads) t.join();
  // gRPC must be done with every JSON call (each has a deadline) and event
  // stream before failoverd's server goes.
  impl_->shared->calls.AwaitNone();
  impl_->shared->feeds.CancelAllAndWait();
  impl_->acceptor.reset();
  impl_->retry.reset();
  // Dropping the loop's pending work closes the connections it held.
  impl_.reset();
}

}  // namespace failover::http
