// Opening a channel to failoverd, shared by failoverctl and the client library.
#pragma once

#include <memory>
#include <string>

#include "grpcpp/grpcpp.h"

namespace failover::client {

struct ConnectionOptions {
  // host:port of failoverd.
  std::string server = "127.0.0.1:50051";
};

std::shared_ptr<grpc::Channel> OpenChannel(const ConnectionOptions& options);

}  // namespace failover::client
