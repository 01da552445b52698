// Answers for RPCs that this build does not serve yet: UNIMPLEMENTED with a
// message that names the RPC, never a silent empty reply.
#pragma once

#include <string>

#include "absl/strings/str_cat.h"
#include "grpcpp/grpcpp.h"

namespace failover::api {

inline grpc::Status UnimplementedStatus(const char* rpc) {
  return grpc::Status(grpc::StatusCode::UNIMPLEMENTED,
                      absl::StrCat(rpc, " is not implemented in this failoverd build yet"));
}

inline grpc::ServerUnaryReactor* FinishUnimplemented(grpc::CallbackServerContext* ctx, const char* rpc) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  reactor->Finish(UnimplementedStatus(rpc));
  return reactor;
}

template <typename Message>
class UnimplementedWriter final : public grpc::ServerWriteReactor<Message> {
 public:
  explicit UnimplementedWriter(const char* rpc) { this->Finish(UnimplementedStatus(rpc)); }
  void OnDone() override { delete this; }
};

}  // namespace failover::api
