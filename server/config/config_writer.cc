#include "server/config/config_writer.h"

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "yaml-cpp/yaml.h"

namespace failover::config {
namespace {

std::string Duration(absl::Duration d) { return absl::FormatDuration(d); }

// Writes `key: value` when the value differs from the default.
template <typename T, typename Show>
void Setting(YAML::Emitter& out, const char* key, const T& value, const T& default_value, Show show) {
  if (value == default_value) return;
  out << YAML::Key << key << YAML::Value << show(value);
}
template <typename T>
void Setting(YAML::Emitter& out, const char* key, const T& value, const T& default_value) {
  Setting(out, key, value, default_value, [](const T& v) { return v; });
}
void DurationSetting(YAML::Emitter& out, const char* key, absl::Duration value, absl::Duration default_value) {
  Setting(out, key, value, default_value, Duration);
}

// A group of settings (`trip:`), written only when one of them is not the default.
template <typename F>
void Group(YAML::Emitter& out, const char* key, bool any, F write) {
  if (!any) return;
  out << YAML::Key << key << YAML::Value << YAML::BeginMap;
  write();
  out << YAML::EndMap;
}

// The health part of a policy (probe, trip, recovery, backoff, rate_limit hold).
void WriteHealth(YAML::Emitter& out, const Policy& p, bool with_rate_limit_mode) {
  const Policy d;
  Group(out, "probe", p.probe_interval != d.probe_interval || p.probe_timeout != d.probe_timeout, [&] {
    DurationSetting(out, "interval", p.probe_interval, d.probe_interval);
    DurationSetting(out, "timeout", p.probe_timeout, d.probe_timeout);
  });
  // With a rate set, errors unset means "off": write it whenever it is not
  // what the parser would assume.
  const uint32_t assumed_errors = p.HasRateTrip() ? 0 : d.trip_errors;
  Group(out, "trip",
        p.trip_errors != assumed_errors || p.trip_window != d.trip_window || p.HasRateTrip() ||
            p.trip_min_calls != d.trip_min_calls,
        [&] {
          Setting(out, "errors", p.trip_errors, assumed_errors);
          DurationSetting(out, "window", p.trip_window, d.trip_window);
          Setting(out, "failure_rate", p.trip_failure_rate, d.trip_failure_rate);
          Setting(out, "min_calls", p.trip_min_calls, d.trip_min_calls);
          Group(out, "slow_call", p.trip_slow_call_rate > 0 || p.trip_slow_call_duration > absl::ZeroDuration(), [&] {
            out << YAML::Key << "duration" << YAML::Value << Duration(p.trip_slow_call_duration);
            out << YAML::Key << "rate" << YAML::Value << p.trip_slow_call_rate;
          });
        });
  Group(out, "recovery", p.recovery_probes != d.recovery_probes || p.recovery_min_dwell != d.recovery_min_dwell, [&] {
    Setting(out, "probes", p.recovery_probes, d.recovery_probes);
    DurationSetting(out, "min_dwell", p.recovery_min_dwell, d.recovery_min_dwell);
  });
  Group(out, "backoff",
        p.backoff_factor != d.backoff_factor || p.backoff_steps != d.backoff_steps || p.backoff_max != d.backoff_max ||
            p.backoff_reset_after != d.backoff_reset_after,
        [&] {
          Setting(out, "factor", p.backoff_factor, d.backoff_factor);
          Setting(out, "steps", p.backoff_steps, d.backoff_steps);
          DurationSetting(out, "max", p.backoff_max, d.backoff_max);
          DurationSetting(out, "reset_after", p.backoff_reset_after, d.backoff_reset_after);
        });
  const bool mode = with_rate_limit_mode && p.rate_limit_on != d.rate_limit_on;
  Group(out, "rate_limit",
        mode || p.rate_limit_hold != d.rate_limit_hold || p.rate_limit_max_hold != d.rate_limit_max_hold, [&] {
          if (mode) out << YAML::Key << "on" << YAML::Value << "wait";
          DurationSetting(out, "hold", p.rate_limit_hold, d.rate_limit_hold);
          DurationSetting(out, "max_hold", p.rate_limit_max_hold, d.rate_limit_max_hold);
        });
}

void WritePolicy(YAML::Emitter& out, const Policy& p) {
  const Policy d;
  WriteHealth(out, p, /*with_rate_limit_mode=*/true);
  Setting(out, "max_attempts", p.max_attempts, d.max_attempts);
  Setting(out, "max_replay_bytes", p.max_replay_bytes, d.max_replay_bytes);
  if (!p.retry_on_statuses.empty()) {
    out << YAML::Key << "retry_on_statuses" << YAML::Value << YAML::Flow << p.retry_on_statuses;
  }
  if (!p.retry_on_errors.empty()) out << YAML::Key << "retry_on_errors" << YAML::Value << p.retry_on_errors;
  Group(out, "same_target_retries", !p.same_target_retries.empty(), [&] {
    for (const auto& [reason, n] : p.same_target_retries) out << YAML::Key << ReasonName(reason) << YAML::Value << n;
  });
  Group(out, "least_latency", p.latency_explore != d.latency_explore,
        [&] { out << YAML::Key << "explore" << YAML::Value << p.latency_explore; });
  Group(out, "retry_budget", p.retry_budget_ratio > 0, [&] {
    out << YAML::Key << "ratio" << YAML::Value << p.retry_budget_ratio;
    out << YAML::Key << "min_per_second" << YAML::Value << p.retry_budget_min_per_second;
  });
  Group(out, "hedge", p.hedge_after > absl::ZeroDuration(),
        [&] { out << YAML::Key << "after" << YAML::Value << Duration(p.hedge_after); });
}

bool PolicyIsDefault(const Policy& p) { return p == Policy(); }

}  // namespace

std::string WriteConfig(const std::vector<TargetConfig>& targets, const std::vector<ChainConfig>& chains) {
  YAML::Emitter out;
  out.SetDoublePrecision(15);  // 0.2, not 0.20000000000000001
  out << YAML::BeginMap;
  if (!targets.empty()) {
    out << YAML::Key << "targets" << YAML::Value << YAML::BeginSeq;
    const TargetConfig d;
    for (const TargetConfig& t : targets) {
      out << YAML::BeginMap << YAML::Key << "name" << YAML::Value << t.name;
      if (t.kind == TargetKind::kLocal) out << YAML::Key << "kind" << YAML::Value << "local";
      if (!t.upstream_model.empty()) {
        out << YAML::Key << "upstream_model" << YAML::Value << YAML::DoubleQuoted << t.upstream_model;
      }
      Setting(out, "warm", t.warm, d.warm);
      Setting(out, "weight", t.weight, d.weight);
      Setting(out, "cost", t.cost, d.cost);
      DurationSetting(out, "timeout", t.timeout, d.timeout);
      Setting(out, "max_retries", t.max_retries, d.max_retries);
      Group(out, "limits", t.limit_rpm != 0, [&] { out << YAML::Key << "rpm" << YAML::Value << t.limit_rpm; });
      Group(out, "labels", !t.labels.empty(), [&] {
        // Quoted, so a value such as "true" or "8080" stays a string to every reader.
        for (const auto& [k, v] : t.labels) out << YAML::Key << k << YAML::Value << YAML::DoubleQuoted << v;
      });
      Setting(out, "enabled", t.enabled, d.enabled);
      if (t.health) {
        out << YAML::Key << "health" << YAML::Value << YAML::BeginMap;
        WriteHealth(out, t.health->AsPolicy(), /*with_rate_limit_mode=*/false);
        out << YAML::EndMap;
      }
      out << YAML::EndMap;
    }
    out << YAML::EndSeq;
  }
  if (!chains.empty()) {
    out << YAML::Key << "chains" << YAML::Value << YAML::BeginSeq;
    for (const ChainConfig& c : chains) {
      out << YAML::BeginMap << YAML::Key << "name" << YAML::Value << c.name;
      out << YAML::Key << "targets" << YAML::Value << YAML::Flow << c.targets;
      if (c.strategy != Strategy::kFailover) out << YAML::Key << "strategy" << YAML::Value << StrategyName(c.strategy);
      if (!PolicyIsDefault(c.policy)) {
        out << YAML::Key << "policy" << YAML::Value << YAML::BeginMap;
        WritePolicy(out, c.policy);
        out << YAML::EndMap;
      }
      if (!c.failover_enabled) out << YAML::Key << "failover_enabled" << YAML::Value << false;
      if (!c.shadows.empty()) {
        out << YAML::Key << "shadow" << YAML::Value << YAML::BeginSeq;
        for (const ShadowPolicy& s : c.shadows) {
          out << YAML::BeginMap << YAML::Key << "name" << YAML::Value << s.name;
          out << YAML::Key << "policy" << YAML::Value << YAML::BeginMap;
          WritePolicy(out, s.policy);
          out << YAML::EndMap << YAML::EndMap;
        }
        out << YAML::EndSeq;
      }
      out << YAML::EndMap;
    }
    out << YAML::EndSeq;
  }
  out << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

}  // namespace failover::config
