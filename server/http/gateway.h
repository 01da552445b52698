// The JSON face of failoverd's gRPC API, for callers without a gRPC stack
// (curl, a shell script, a serverless function) and for the status page.
// Each route is one gRPC method: the request is read from the JSON body (or
// the query and path), in protobuf's canonical JSON mapping, and the call goes
// through the real gRPC service, so roles, validation, errors and metrics are
// the same as on the gRPC port. An error is the gRPC status mapped to its HTTP
// status, with the same message and field path.
//
// This layer has no sockets: http_server.cc feeds it from Boost.Beast, and
// the fuzzer calls it directly.
#pragma once

#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "failover/v1/decision.pb.h"
#include "grpcpp/support/status.h"

namespace failover::http {

struct Request {
  std::string method;  // GET, POST, DELETE, ...
  std::string path;    // without the query, percent-encoded as received
  std::vector<std::pair<std::string, std::string>> query;  // decoded
  std::string authorization;   // the Authorization header, if any
  std::string content_type;
  std::string sec_fetch_site;  // browsers say where a request comes from
  std::string body;
  std::string peer;  // the HTTP client's address, recorded on admin events
};

struct Response {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
};

// Makes one unary gRPC call to failoverd: `method` is the full name
// ("/failover.v1.AdminService/PinChain"), `request` and `response` serialized;
// `from` is the HTTP request (its token and client address go along).
using UnaryCaller = std::function<grpc::Status(const std::string& method, const std::string& request,
                                               std::string* response, const Request& from)>;

class Gateway {
 public:
  explicit Gateway(UnaryCaller call) : call_(std::move(call)) {}

  // Every JSON route (GET /v1/watch is a stream: http_server.cc), calling
  // failoverd with the UnaryCaller.
  Response Handle(const Request& request) const;

  // Handle in two halves, for a server that makes the call itself without
  // waiting: Prepare routes and reads the request into the gRPC call to make
  // (or answers it at once: a bad route, field or body); Finish turns the
  // call's status and response into the answer.
  struct Call {
    std::optional<Response> answer;  // set: no call to make, this is the answer
    std::string method;              // "/failover.v1.AdminService/PinChain"
    std::string request;             // serialized
    const google::protobuf::Descriptor* response_type = nullptr;
  };
  static Call Prepare(const Request& request);
  static Response Finish(const Call& call, const grpc::Status& status, const std::string& response);

  // The WatchEvents request of GET /v1/watch: `chains` and `targets` (each may
  // repeat) and `after` from the query, or the Last-Event-ID a reconnecting
  // EventSource sends.
  static grpc::Status WatchRequestFrom(const Request& request, const std::string& last_event_id,
                                       failover::v1::WatchEventsRequest* out);
  // One event as a Server-Sent Event: its sequence as the id (not on a
  // snapshot part that more parts follow), its kind, the event in JSON.
  static std::string ToServerSentEvent(const failover::v1::Event& event);

  // The JSON error body for a gRPC status, and the HTTP status it maps to.
  // `http_status` 0: the one the gRPC code maps to.
  static Response Error(const grpc::Status& status, int http_status = 0);
  static int HttpStatusOf(grpc::StatusCode code);

 private:
  UnaryCaller call_;
};

// `s` percent-decoded ("%2F" -> "/"); false when an escape is malformed.
bool PercentDecode(const std::string& s, std::string* out);

}  // namespace failover::http
