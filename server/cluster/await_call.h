// A unary gRPC call made on the callback API and waited for by its caller.
//
// A thread blocked inside a synchronous call polls for its whole process: it
// reads whatever arrives, the callers' calls to this replica among them, and
// hands each to gRPC's callback threads, a wake-up and a hand-off per call.
// Waiting on a future instead leaves the polling to the callback threads.
// So it must never be called on one of them: the answer comes on one, and with
// every one of them waiting, nothing would deliver it. The replica's own
// threads (log, session, relay, committer) make these calls.
#pragma once

#include <future>
#include <memory>
#include <utility>

#include "grpcpp/support/status.h"

namespace failover::cluster {

// `start` is given the callback to pass to the stub's async() method.
template <class Start>
grpc::Status AwaitCall(Start start) {
  auto answered = std::make_shared<std::promise<grpc::Status>>();
  std::future<grpc::Status> answer = answered->get_future();
  start([answered](grpc::Status status) { answered->set_value(std::move(status)); });
  return answer.get();
}

}  // namespace failover::cluster
