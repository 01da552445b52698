#include "client/connection.h"

namespace failover::client {

std::shared_ptr<grpc::Channel> OpenChannel(const ConnectionOptions& options) {
  return grpc::CreateChannel(options.server, grpc::InsecureChannelCredentials());
}

}  // namespace failover::client
