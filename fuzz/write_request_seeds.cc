// Writes the request fuzzer's seed corpus: one valid request per RPC, aimed
// at the names of the fuzz world, each prefixed by its method's index.
//   write_request_seeds <dir>
#include <fstream>
#include <iostream>

#include "failover/v1/admin.pb.h"
#include "failover/v1/decision.pb.h"
#include "fuzz/request_world.h"

namespace v1 = ::failover::v1;

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: write_request_seeds <dir>\n";
    return 2;
  }
  v1::PickTargetRequest pick;
  pick.set_chain("ch");
  pick.add_exclude_targets("a");
  v1::ReportOutcomeRequest report;
  report.set_chain("ch2");
  report.set_target("b");
  report.mutable_failure()->set_http_status(503);
  report.mutable_failure()->set_message("overloaded");
  // A long upstream error in Japanese, as a caller relays it.
  v1::ReportOutcomeRequest report_long = report;
  std::string long_message = "x";
  for (int i = 0; i < 150; ++i) long_message += "\xe3\x82\xa8";
  report_long.mutable_failure()->set_message(long_message);
  report_long.set_target("a");
  report_long.set_chain("ch");
  // An upstream's raw reply, as the client helpers relay it.
  v1::ReportOutcomeRequest report_raw = report_long;
  report_raw.mutable_failure()->clear_message();
  report_raw.mutable_failure()->set_http_status(429);
  (*report_raw.mutable_failure()->mutable_response()->mutable_headers())["x-ratelimit-reset-requests"] = "6m0s";
  (*report_raw.mutable_failure()->mutable_response()->mutable_headers())["retry-after"] = "Wed, 02 Dec 2026 12:00:00 GMT";
  report_raw.mutable_failure()->mutable_response()->set_body(
      R"([{"error":{"code":429,"message":"exceeded your current quota","status":"RESOURCE_EXHAUSTED",)"
      R"("details":[{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"38s"}]}}])");
  v1::ProbeRequest probe;
  probe.set_prober_id("agent");
  probe.set_max_tasks(4);
  v1::ProbeResult* result = probe.add_results();
  result->set_lease_id("lease");
  result->set_outcome(v1::PROBE_OUTCOME_FAIL);
  result->mutable_failure()->set_transport_error(v1::TRANSPORT_ERROR_CONNECT_REFUSED);
  v1::WatchEventsRequest watch;
  watch.add_chains("ch");
  v1::ApplyRequest apply;
  apply.add_targets()->set_name("d");
  v1::Chain* chain = apply.add_chains();
  chain->set_name("ch3");
  chain->add_targets("a");
  chain->add_targets("d");
  chain->set_strategy(v1::STRATEGY_ROUND_ROBIN);
  chain->mutable_policy()->add_retry_on_statuses("5xx");
  v1::GetTargetRequest get_target;
  get_target.set_name("a");
  v1::ListTargetsRequest list_targets;
  v1::DeleteTargetRequest delete_target;
  delete_target.set_name("a");
  v1::GetChainRequest get_chain;
  get_chain.set_name("ch");
  v1::ListChainsRequest list_chains;
  v1::DeleteChainRequest delete_chain;
  delete_chain.set_name("ch2");
  v1::PinChainRequest pin;
  pin.set_chain("ch");
  pin.set_target("b");
  v1::UnpinChainRequest unpin;
  unpin.set_chain("ch");
  v1::TriggerFailoverRequest trigger;
  trigger.set_target("a");
  trigger.set_reason("maintenance");
  v1::CancelFailoverRequest cancel;
  cancel.set_target("a");
  v1::SetTargetEnabledRequest disable;
  disable.set_target("c");
  v1::ProbeNowRequest probe_now;
  probe_now.set_target("c");
  v1::ListEventsRequest list_events;
  list_events.set_limit(10);
  v1::GetStatusRequest status;

  const std::pair<std::string, const google::protobuf::Message*> seeds[] = {
      {"PickTarget", &pick},       {"ReportOutcome", &report},     {"ReportOutcome-long-utf8", &report_long},
      {"ReportOutcome-raw-reply", &report_raw},
      {"Probe", &probe},
      {"WatchEvents", &watch},     {"Apply", &apply},              {"GetTarget", &get_target},
      {"ListTargets", &list_targets}, {"DeleteTarget", &delete_target}, {"GetChain", &get_chain},
      {"ListChains", &list_chains}, {"DeleteChain", &delete_chain}, {"PinChain", &pin},
      {"UnpinChain", &unpin},      {"TriggerFailover", &trigger},  {"CancelFailover", &cancel},
      {"SetTargetEnabled", &disable}, {"ProbeNow", &probe_now},   {"ListEvents", &list_events},
      {"GetStatus", &status},
  };
  const auto& methods = failover::fuzz::Methods();
  for (const auto& [name, message] : seeds) {
    size_t index = 0;
    const std::string method = name.substr(0, name.find('-'));  // "Method-variant" seeds
    while (index < methods.size() && methods[index].name != method) ++index;
    if (index == methods.size()) {
      std::cerr << "no method " << name << "\n";
      return 1;
    }
    std::ofstream out(std::string(argv[1]) + "/" + name, std::ios::binary);
    out << static_cast<char>(index) << message->SerializeAsString();
  }
  return 0;
}
