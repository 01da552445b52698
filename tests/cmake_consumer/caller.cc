// One request on a chain where one target answers 503: prints who served it
// and whether the decision was made in this process.
//   usage: caller ADDRESS CHAIN FAILING_TARGET
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

#include "client/client.h"
#ifdef LOCAL_DECISIONS
#include "client/local_decisions.h"
#endif

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s ADDRESS CHAIN FAILING_TARGET\n", argv[0]);
    return 2;
  }
  failover::client::ClientOptions options;
  options.connection.server = argv[1];
#ifdef LOCAL_DECISIONS
  auto client = failover::client::ConnectLocal(options);
#else
  auto client = failover::client::Client::Connect(options);
#endif
  if (!client.ok()) {
    std::fprintf(stderr, "%s\n", std::string(client.status().message()).c_str());
    return 1;
  }
  const std::string failing = argv[3];
  auto attempt = [&failing](const failover::v1::Attempt& a) {
    failover::client::AttemptOutcome outcome;
    outcome.ok = a.target() != failing;
    if (!outcome.ok) outcome.failure.set_http_status(503);
    return outcome;
  };
  failover::client::LoopResult result = (*client)->Run(argv[2], attempt);
#ifdef LOCAL_DECISIONS
  // The copy of failoverd's state arrives in the background; ask until it has.
  for (int i = 0; i < 500 && !result.decided_locally; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    result = (*client)->Run(argv[2], attempt);
  }
#endif
  std::printf("served_by=%s attempts=%zu decided_locally=%d error=%s\n", result.served_by.c_str(),
              result.attempts.size(), result.decided_locally ? 1 : 0, result.error.c_str());
  return result.ok ? 0 : 1;
}
