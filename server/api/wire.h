// Requests arrive as raw bytes and are parsed here rather than inside gRPC, so
// a request that does not parse gets INVALID_ARGUMENT naming the field (gRPC's
// own parser answers UNIMPLEMENTED with no message). The token is checked
// before the bytes are looked at.
#pragma once

#include <chrono>
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

// The shape of every unary handler: authorize, parse, run `handler` on the
// typed request, serialize, finish.
template <class Service, class Request, class Response>
grpc::ServerUnaryReactor* ServeUnary(const ServiceContext& context, Role role, grpc::CallbackServerContext* call,
                                     const grpc::ByteBuffer* in, grpc::ByteBuffer* out, Service* service,
                                     absl::Status (Service::*handler)(const Request&, Response*)) {
  const auto started = std::chrono::steady_clock::now();
  Request request;
  Response response;
  absl::Status status = context.Authorize(*call, role);
  if (status.ok()) status = ParseRequest(*in, &request);
  if (status.ok()) {
    const CallerScope caller(role == Role::kAdmin ? CallerOf(*call, context.auth) : std::string());
    status = (service->*handler)(request, &response);
  }
  if (status.ok()) status = SerializeMessage(response, out);
  grpc::ServerUnaryReactor* reactor = call->DefaultReactor();
  if (!status.ok()) call->AddTrailingMetadata(kAnsweredTrailer, "1");
  if (context.metrics != nullptr) {
    // "PinChainRequest" -> "PinChain": every request type is its method's name + "Request".
    static const std::string method = [] {
      std::string name = Request::descriptor()->name();
      return name.substr(0, name.size() - std::string("Request").size());
    }();
    context.metrics->OnRpc(method, static_cast<int>(status.code()), absl::FromChrono(std::chrono::steady_clock::now() - started));
  }
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

}  // namespace failover::api
