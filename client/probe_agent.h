// The reference prober for OpenAI-compatible upstreams (failoverctl
// probe-agent). It loops on Probe and runs each task with libcurl, using the
// target's labels:
//   base_url      the API root, e.g. https://api.openai.com/v1 (required)
//   api_key_env   name of an environment variable holding the API key (sent as a bearer token)
//   header.NAME   an extra request header NAME with the label's value
// LIVENESS: GET {base_url}/models must list the upstream model (a warm local
// backend that answers without it reports NOT_LOADED). RECOVERY: a 1-token chat
// completion. HTTP 429 reports THROTTLED; connection errors, timeouts, 5xx,
// 401/403 and a missing model report FAIL with the facts. Several agents can
// run at once: leases keep them from probing the same target twice.
#pragma once

#include <atomic>
#include <string>

#include "client/connection.h"
#include "failover/v1/decision.grpc.pb.h"

namespace failover::client {

struct ProbeAgentOptions {
  std::string id = "probe-agent";
  uint32_t max_tasks = 8;
  double max_wait_seconds = 5;  // longest pause between Probe calls
  std::atomic<bool>* stop = nullptr;
};

// Runs one check. Pure function of the task and the network: testable alone.
v1::ProbeResult CheckOpenAiTarget(const v1::ProbeTask& task);

// Loops until `options.stop` is set; returns 0.
int RunProbeAgent(v1::DecisionService::StubInterface* stub, const ConnectionOptions& connection,
                  const ProbeAgentOptions& options);

}  // namespace failover::client
