// Requests arrive as raw bytes and are parsed here rather than inside gRPC, so
// a request that does not parse gets INVALID_ARGUMENT naming the field (gRPC's
// own parser answers UNIMPLEMENTED with no message). The token is checked
// before the bytes are looked at.
#pragma once

#include <chrono>
#include <functional>
#include <future>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/trailers.h"
#include "google/protobuf/message.h"
#include "grpcpp/grpcpp.h"
#include "server/api/service_context.h"
#include "server/api/status_convert.h"

namespace failover::api {

// Parses `in` into `out`. A proto3 string that is not UTF-8 is reported with
// its field path, for example "targets[2].name: is not valid UTF-8".
[[nodiscard]] absl::Status ParseRequest(const grpc::ByteBuffer& in, google::protobuf::Message* out);

// Serializes a response, or a watch event, for a raw call.
[[nodiscard]] absl::Status SerializeMessage(const google::protobuf::Message& message, grpc::ByteBuffer* out);

// Where a call is served. kLeader: it makes a change (or leases a probe), so
// in cluster mode a follower passes it, as it came, to the leader.
enum class Route { kHere, kLeader };

// "/failover.v1.AdminService/PinChain" for PinChainRequest.
template <class Request>
const std::string& MethodPathOf() {
  static const std::string path = [] {
    const google::protobuf::FileDescriptor* file = Request::descriptor()->file();
    for (int s = 0; s < file->service_count(); ++s) {
      const google::protobuf::ServiceDescriptor* service = file->service(s);
      for (int m = 0; m < service->method_count(); ++m) {
        if (service->method(m)->input_type() == Request::descriptor()) {
          return "/" + service->full_name() + "/" + service->method(m)->name();
        }
      }
    }
    return std::string();
  }();
  return path;
}

// On a follower, sends the call to the leader and sets `status` to its
// answer. False when this replica serves the call itself.
bool ServeAtLeader(const ServiceContext& context, Role role, const std::string& method,
                   grpc::CallbackServerContext* call, const grpc::ByteBuffer* in, grpc::ByteBuffer* out,
                   grpc::Status* status);

// On the leader, answering a call a follower passed on: tells it the log
// entry that holds what the call changed, so it answers only once it has
// applied that entry (its caller reads its own writes there).
void NoteLogIndex(const ServiceContext& context, grpc::CallbackServerContext* call);

// "PinChainRequest" -> "PinChain": every request type is its method's name + "Request".
template <class Request>
const std::string& MethodNameOf() {
  static const std::string name = [] {
    std::string type = Request::descriptor()->name();
    return type.substr(0, type.size() - std::string("Request").size());
  }();
  return name;
}

// How every unary call ends: the response serialized when `status` is OK,
// the call counted, finished.
template <class Request>
void FinishUnary(const ServiceContext& context, grpc::CallbackServerContext* call, grpc::ServerUnaryReactor* reactor,
                 Route route, const google::protobuf::Message& response, grpc::ByteBuffer* out, absl::Status status,
                 std::chrono::steady_clock::time_point started) {
  if (status.ok()) status = SerializeMessage(response, out);
  if (!status.ok()) call->AddTrailingMetadata(kAnsweredTrailer, "1");
  if (context.metrics != nullptr) {
    context.metrics->OnRpc(MethodNameOf<Request>(), static_cast<int>(status.code()),
                           absl::FromChrono(std::chrono::steady_clock::now() - started));
  }
  if (route == Route::kLeader && context.leader != nullptr) NoteLogIndex(context, call);
  reactor->Finish(ToGrpcStatus(status));
}

// The shape of every unary handler: authorize, parse, run `handler` on the
// typed request, serialize, finish. A kLeader call (it waits for its change
// to be saved, or for the leader) runs on context.blocking, not on gRPC's
// callback threads.
template <class Service, class Request, class Response>
grpc::ServerUnaryReactor* ServeUnary(const ServiceContext& context, Role role, grpc::CallbackServerContext* call,
                                     const grpc::ByteBuffer* in, grpc::ByteBuffer* out, Service* service,
                                     absl::Status (Service::*handler)(const Request&, Response*),
                                     Route route = Route::kHere) {
  grpc::ServerUnaryReactor* reactor = call->DefaultReactor();
  auto serve = [&context, role, call, in, out, service, handler, route, reactor] {
    grpc::Status forwarded;
    if (route == Route::kLeader && ServeAtLeader(context, role, MethodPathOf<Request>(), call, in, out, &forwarded)) {
      reactor->Finish(forwarded);
      return;
    }
    const auto started = std::chrono::steady_clock::now();
    Request request;
    Response response;
    absl::Status status = context.Authorize(*call, role);
    if (status.ok()) status = ParseRequest(*in, &request);
    if (status.ok()) {
      const CallerScope caller(role == Role::kAdmin ? CallerOf(*call, context.auth) : std::string());
      status = (service->*handler)(request, &response);
    }
    FinishUnary<Request>(context, call, reactor, route, response, out, std::move(status), started);
  };
  if (route == Route::kLeader && context.blocking != nullptr) {
    if (!context.blocking->Submit(serve)) {
      call->AddTrailingMetadata(kAnsweredTrailer, "1");
      reactor->Finish(grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                                   "too many changes in flight on this replica; try again"));
    }
    return reactor;
  }
  serve();
  return reactor;
}

// The answer to a call that may come after its handler returned.
using Answer = std::function<void(absl::Status)>;

// Runs `start` (a handler that answers later) and waits for its answer.
template <class Start>
absl::Status WaitForAnswer(Start start) {
  std::promise<absl::Status> answered;
  std::future<absl::Status> answer = answered.get_future();
  start([&answered](absl::Status status) { answered.set_value(std::move(status)); });
  return answer.get();
}

// ServeUnary for a decide call whose handler answers later: it calls its
// Answer exactly once, on any thread, when the Response is final (say, once
// the change it made is durable), so no thread waits meanwhile.
template <class Service, class Request, class Response>
grpc::ServerUnaryReactor* ServeUnaryLater(const ServiceContext& context, grpc::CallbackServerContext* call,
                                          const grpc::ByteBuffer* in, grpc::ByteBuffer* out, Service* service,
                                          void (Service::*handler)(const Request&, Response*, Answer)) {
  grpc::ServerUnaryReactor* reactor = call->DefaultReactor();
  const auto started = std::chrono::steady_clock::now();
  struct Exchange {
    Request request;
    Response response;
  };
  auto exchange = std::make_shared<Exchange>();
  absl::Status status = context.Authorize(*call, Role::kDecide);
  if (status.ok()) status = ParseRequest(*in, &exchange->request);
  if (!status.ok()) {
    FinishUnary<Request>(context, call, reactor, Route::kHere, exchange->response, out, std::move(status), started);
    return reactor;
  }
  (service->*handler)(exchange->request, &exchange->response,
                      [&context, call, reactor, out, started, exchange](absl::Status answer) {
                        FinishUnary<Request>(context, call, reactor, Route::kHere, exchange->response, out,
                                             std::move(answer), started);
                      });
  return reactor;
}

}  // namespace failover::api
