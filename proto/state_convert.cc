#include "proto/state_convert.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "proto/model_convert.h"

namespace failover::api {

namespace {

// An API enum value to the engine's (which starts after UNSPECIFIED), refusing
// UNSPECIFIED and values past `max`.
template <typename EngineEnum>
absl::StatusOr<EngineEnum> EnumFromProto(int value, int max, absl::string_view path) {
  if (value < 1 || value > max) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": unknown value ", value));
  }
  return static_cast<EngineEnum>(value - 1);
}

void HealthRecordToProto(const TargetStateRecord& r, v1::TargetHealthRecord* out) {
  out->set_name(r.name);
  out->set_automatic(HealthToProto(r.automatic));
  TimeToProto(r.since, out->mutable_since());
  out->set_trips(r.trips);
  out->set_recovery_passes(r.recovery_passes);
  out->set_source(SourceToProto(r.source));
  out->set_reason(r.reason);
  out->set_last_error(r.last_error);
  TimeToProto(r.last_error_time, out->mutable_last_error_time());
  TimeToProto(r.last_probe, out->mutable_last_probe());
  out->set_last_check(r.last_check);
  if (r.held_until != absl::InfinitePast()) TimeToProto(r.held_until, out->mutable_held_until());
}

absl::StatusOr<TargetStateRecord> HealthRecordFromProto(const v1::TargetHealthRecord& in, const std::string& path) {
  TargetStateRecord r;
  r.name = in.name();
  ASSIGN_OR_RETURN(r.automatic, EnumFromProto<HealthState>(in.automatic(), v1::HEALTH_STATE_RECOVERING,
                                                           absl::StrCat(path, ".automatic")));
  r.since = TimeFromProto(in.since());
  r.trips = in.trips();
  r.recovery_passes = in.recovery_passes();
  ASSIGN_OR_RETURN(r.source, EnumFromProto<Source>(in.source(), v1::TransitionSource_MAX, absl::StrCat(path, ".source")));
  r.reason = in.reason();
  r.last_error = in.last_error();
  r.last_error_time = TimeFromProto(in.last_error_time());
  r.last_probe = TimeFromProto(in.last_probe());
  r.last_check = in.last_check();
  r.held_until = in.has_held_until() ? TimeFromProto(in.held_until()) : absl::InfinitePast();
  return r;
}

void ChainRecordToProto(const ChainStateRecord& r, v1::ChainStateRecord* out) {
  out->set_name(r.name);
  out->set_active_target(r.active);
  out->set_state(ChainStateToProto(r.state));
  TimeToProto(r.active_since, out->mutable_active_since());
  TimeToProto(r.last_switch, out->mutable_last_switch());
}

absl::StatusOr<ChainStateRecord> ChainRecordFromProto(const v1::ChainStateRecord& in, const std::string& path) {
  ChainStateRecord r;
  r.name = in.name();
  r.active = in.active_target();
  ASSIGN_OR_RETURN(r.state, EnumFromProto<ChainState>(in.state(), v1::ChainState_MAX, absl::StrCat(path, ".state")));
  r.active_since = TimeFromProto(in.active_since());
  r.last_switch = TimeFromProto(in.last_switch());
  return r;
}

void ManualToProto(const ManualFailoverRecord& m, v1::ManualFailoverRecord* out) {
  out->set_target(m.target);
  out->set_active(m.active);
  out->set_reason(m.reason);
  TimeToProto(m.since, out->mutable_since());
}

ManualFailoverRecord ManualFromProto(const v1::ManualFailoverRecord& in) {
  return ManualFailoverRecord{in.target(), in.active(), in.reason(), TimeFromProto(in.since())};
}

}  // namespace

void ChangeToProto(const Change& c, v1::StateChange* out) {
  out->set_config_generation(c.config_generation);
  for (const TargetConfig& t : c.put_targets) TargetToProto(t, out->add_put_targets());
  for (const std::string& name : c.deleted_targets) out->add_deleted_targets(name);
  for (const ChainConfig& ch : c.put_chains) ChainToProto(ch, out->add_put_chains());
  for (const std::string& name : c.deleted_chains) out->add_deleted_chains(name);
  for (const PinRecord& p : c.pins) {
    v1::PinRecord* pin = out->add_pins();
    pin->set_chain(p.chain);
    pin->set_target(p.target);
  }
  for (const ManualFailoverRecord& m : c.manual) ManualToProto(m, out->add_manual());
  for (const TargetStateRecord& r : c.targets) HealthRecordToProto(r, out->add_targets());
  for (const ChainStateRecord& r : c.chains) ChainRecordToProto(r, out->add_chains());
  out->set_next_sequence(c.next_sequence);
}

absl::StatusOr<Change> ChangeFromProto(const v1::StateChange& in) {
  Change c;
  c.config_generation = in.config_generation();
  for (int i = 0; i < in.put_targets_size(); ++i) {
    ASSIGN_OR_RETURN(TargetConfig t, TargetFromProto(in.put_targets(i), absl::StrCat("put_targets[", i, "]")));
    c.put_targets.push_back(std::move(t));
  }
  c.deleted_targets.assign(in.deleted_targets().begin(), in.deleted_targets().end());
  for (int i = 0; i < in.put_chains_size(); ++i) {
    ASSIGN_OR_RETURN(ChainConfig ch, ChainFromProto(in.put_chains(i), absl::StrCat("put_chains[", i, "]")));
    c.put_chains.push_back(std::move(ch));
  }
  c.deleted_chains.assign(in.deleted_chains().begin(), in.deleted_chains().end());
  for (const v1::PinRecord& p : in.pins()) c.pins.push_back(PinRecord{p.chain(), p.target()});
  for (const v1::ManualFailoverRecord& m : in.manual()) c.manual.push_back(ManualFromProto(m));
  for (int i = 0; i < in.targets_size(); ++i) {
    ASSIGN_OR_RETURN(TargetStateRecord r, HealthRecordFromProto(in.targets(i), absl::StrCat("targets[", i, "]")));
    c.targets.push_back(std::move(r));
  }
  for (int i = 0; i < in.chains_size(); ++i) {
    ASSIGN_OR_RETURN(ChainStateRecord r, ChainRecordFromProto(in.chains(i), absl::StrCat("chains[", i, "]")));
    c.chains.push_back(std::move(r));
  }
  c.next_sequence = in.next_sequence();
  return c;
}

std::vector<v1::FollowedState> StateToProto(const RestoredState& state, size_t part_bytes) {
  std::vector<v1::FollowedState> parts(1);
  // Starts a new part once the current one has reached the bound.
  auto part = [&]() -> v1::FollowedState& {
    if (parts.back().ByteSizeLong() >= part_bytes) parts.emplace_back();
    return parts.back();
  };
  for (const TargetConfig& t : state.targets) TargetToProto(t, part().add_targets());
  for (const ChainConfig& c : state.chains) ChainToProto(c, part().add_chains());
  for (const auto& [chain, target] : state.pins) {
    v1::PinRecord* pin = part().add_pins();
    pin->set_chain(chain);
    pin->set_target(target);
  }
  for (const auto& [target, manual] : state.manual) {
    ManualToProto(ManualFailoverRecord{target, true, manual.reason, manual.since}, part().add_manual());
  }
  for (const TargetStateRecord& r : state.health) HealthRecordToProto(r, part().add_health());
  for (const ChainStateRecord& r : state.chain_states) ChainRecordToProto(r, part().add_chain_states());
  for (size_t i = 0; i < parts.size(); ++i) {
    parts[i].set_config_generation(state.generation);
    parts[i].set_next_sequence(state.next_sequence);
    parts[i].set_more(i + 1 < parts.size());
  }
  return parts;
}

absl::Status AddStatePart(const v1::FollowedState& part, size_t index, RestoredState* state) {
  const std::string path = absl::StrCat("state[", index, "]");
  state->generation = part.config_generation();
  state->next_sequence = part.next_sequence();
  for (int i = 0; i < part.targets_size(); ++i) {
    ASSIGN_OR_RETURN(TargetConfig t, TargetFromProto(part.targets(i), absl::StrCat(path, ".targets[", i, "]")));
    state->targets.push_back(std::move(t));
  }
  for (int i = 0; i < part.chains_size(); ++i) {
    ASSIGN_OR_RETURN(ChainConfig c, ChainFromProto(part.chains(i), absl::StrCat(path, ".chains[", i, "]")));
    state->chains.push_back(std::move(c));
  }
  for (const v1::PinRecord& p : part.pins()) state->pins[p.chain()] = p.target();
  for (const v1::ManualFailoverRecord& m : part.manual()) {
    state->manual[m.target()] = RestoredManual{m.reason(), TimeFromProto(m.since())};
  }
  for (int i = 0; i < part.health_size(); ++i) {
    ASSIGN_OR_RETURN(TargetStateRecord r,
                     HealthRecordFromProto(part.health(i), absl::StrCat(path, ".health[", i, "]")));
    state->health.push_back(std::move(r));
  }
  for (int i = 0; i < part.chain_states_size(); ++i) {
    ASSIGN_OR_RETURN(ChainStateRecord r,
                     ChainRecordFromProto(part.chain_states(i), absl::StrCat(path, ".chain_states[", i, "]")));
    state->chain_states.push_back(std::move(r));
  }
  return absl::OkStatus();
}

}  // namespace failover::api
