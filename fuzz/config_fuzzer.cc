// libFuzzer target: any bytes as a YAML config file, loaded and applied the
// way failoverd applies its --config, then every chain picked once.
#include <cstddef>
#include <cstdint>
#include <string>

#include "server/config/config_file.h"
#include "server/engine/engine.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto loaded = failover::config::ParseConfigText(text, "fuzz.yaml");
  if (!loaded.ok()) return 0;
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
  for (const failover::ChainConfig& chain : loaded->change.chains) {
    failover::PickRequest pick;
    pick.chain = chain.name;
    failover::Plan plan;
    failover::Events events;
    (void)engine.Pick(pick, now, &plan, &events);
  }
  return 0;
}
