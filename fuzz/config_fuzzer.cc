// libFuzzer target: any bytes as a YAML config file, loaded and applied the
// way failoverd applies its --config, then every chain picked once. A config
// that is accepted holds only UTF-8 strings (failoverd sends them all). The
// same bytes as a `failoverctl simulate` policy file: one that parses and
// validates must replay (the engine takes what validation passed), and every
// shadow policy of an accepted config must get its live run.
#include <cstddef>
#include <cstdint>
#include <string>

#include "common/utf8.h"
#include "server/config/config_file.h"
#include "server/engine/engine.h"
#include "server/engine/replay.h"
#include "server/engine/shadows.h"
#include "server/engine/validate.h"

namespace {

void CheckPolicyFile(const std::string& text) {
  auto policy = failover::config::ParsePolicyText(text, "fuzz.yaml", failover::Policy());
  if (!policy.ok()) return;
  for (const std::string& phrase : policy->retry_on_errors) {
    if (!failover::IsValidUtf8(phrase)) __builtin_trap();
  }
  if (!failover::ValidatePolicy(*policy, "policy").ok()) return;
  failover::ReplayInput input;
  input.chain.name = "c";
  input.chain.targets = {"a", "b"};
  input.targets.resize(2);
  input.targets[0].name = "a";
  input.targets[1].name = "b";
  input.from = absl::FromUnixSeconds(1'800'000'000);
  input.to = input.from + absl::Minutes(1);
  if (!failover::Replay(failover::WithPolicy(input, *policy)).ok()) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  CheckPolicyFile(text);
  auto loaded = failover::config::ParseConfigText(text, "fuzz.yaml");
  if (!loaded.ok()) return 0;
  for (const failover::TargetConfig& t : loaded->change.targets) {
    if (!failover::IsValidUtf8(t.upstream_model)) __builtin_trap();
    for (const auto& [k, v] : t.labels) {
      if (!failover::IsValidUtf8(k) || !failover::IsValidUtf8(v)) __builtin_trap();
    }
  }
  failover::Engine engine;
  failover::ApplyOptions options;
  options.from_files = true;
  const absl::Time now = absl::FromUnixSeconds(1'800'000'000);
  auto applied = engine.Apply(loaded->change, options, now);
  if (!applied.ok()) {
    const absl::Status located = failover::config::Locate(*loaded, applied.status());
    if (located.ok() || engine.generation() != 0) __builtin_trap();  // refused must stay refused, and change nothing
    return 0;
  }
  failover::ShadowPolicies shadows;
  shadows.Configure(*engine.snapshot(), now);
  size_t declared = 0;
  for (const failover::ChainConfig& chain : loaded->change.chains) declared += chain.shadows.size();
  if (shadows.Status().size() != declared) __builtin_trap();
  for (const failover::ChainConfig& chain : loaded->change.chains) {
    failover::PickRequest pick;
    pick.chain = chain.name;
    failover::Plan plan;
    failover::Events events;
    (void)engine.Pick(pick, now, &plan, &events);
  }
  return 0;
}
