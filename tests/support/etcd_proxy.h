// An etcd endpoint for fault tests: a gRPC server speaking etcd's KV, Lease
// and Watch APIs that passes every call on to one member of a real etcd, and
// lets a test step in before a chosen call (to change etcd under the caller,
// as a rival replica would at that moment) or lose the answer to a call etcd
// carried out. Faults at an exact point of a replica's protocol, which killing
// and pausing processes cannot hit, while etcd itself stays real.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "google/protobuf/message.h"
#include "grpcpp/grpcpp.h"

namespace failover::testing {

class EtcdProxy {
 public:
  enum class Fault {
    kNone,        // pass the call on
    kLoseAnswer,  // pass it on, then answer UNAVAILABLE (etcd did it; the caller cannot know)
    kRefuse,      // answer UNAVAILABLE without passing it on
  };
  // Runs before each unary call is passed on, with its method ("Txn", "Put",
  // "LeaseRevoke", ...) and request; on the proxy's own threads.
  using Hook = std::function<Fault(const std::string& method, const google::protobuf::Message& request)>;

  // `upstream`: host:port of the etcd member calls go to.
  explicit EtcdProxy(std::string upstream);
  ~EtcdProxy();
  EtcdProxy(const EtcdProxy&) = delete;
  EtcdProxy& operator=(const EtcdProxy&) = delete;

  // Listens on a loopback port; false when it cannot.
  bool Start();
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  void SetHook(Hook hook);
  // Every key etcd's watches sent through the proxy (puts and deletes), with how often.
  std::map<std::string, int> WatchedKeys() const;

  class Services;  // the etcd services, in etcd_proxy.cc

 private:
  std::unique_ptr<Services> services_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

}  // namespace failover::testing
