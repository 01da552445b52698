// Each handler has the same shape: check, convert, call the engine, publish
// the events it returns, convert back. Decisions live in the engine.
#include "server/api/admin_service.h"

#include <set>

#include "absl/cleanup/cleanup.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "server/api/convert.h"
#include "server/api/paging.h"
#include "server/api/release_memory.h"
#include "server/api/status_convert.h"
#include "server/api/wire.h"
#include "common/status_macros.h"
#include "server/engine/replay.h"
#include "server/engine/validate.h"

namespace failover::api {

using failover::v1::ApplyRequest;
using failover::v1::ApplyResponse;
using failover::v1::GetTargetRequest;
using failover::v1::ListTargetsRequest;
using failover::v1::ListTargetsResponse;
using failover::v1::DeleteTargetRequest;
using failover::v1::DeleteResponse;
using failover::v1::GetChainRequest;
using failover::v1::ListChainsRequest;
using failover::v1::ListChainsResponse;
using failover::v1::DeleteChainRequest;
using failover::v1::PinChainRequest;
using failover::v1::UnpinChainRequest;
using failover::v1::TriggerFailoverRequest;
using failover::v1::CancelFailoverRequest;
using failover::v1::SetTargetEnabledRequest;
using failover::v1::ProbeNowRequest;
using failover::v1::ProbeNowResponse;
using failover::v1::ListEventsRequest;
using failover::v1::ListEventsResponse;
using failover::v1::GetStatusRequest;
using failover::v1::StatusResponse;

grpc::ServerUnaryReactor* AdminService::Apply(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* in,
    grpc::ByteBuffer* out) {
  return ServeUnary(ctx_, Role::kAdmin, ctx, in, out, this, &AdminService::DoApply,
                    Route::kLeader);
}

grpc::ServerUnaryReactor* AdminService::GetTarget(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* in,
    grpc::ByteBuffer* out) {
  return ServeUnary(ctx_, Role::kAdmin, ctx, in, out, this, &AdminService::DoGetTarget);
}

grpc::ServerUnaryReactor* AdminService::ListTargets(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* in,
    grpc::ByteBuffer* out) {
  return ServeUnary(ctx_, Role::kAdmin, ctx, in, out, this, &AdminService::DoListTargets);
}

grpc::ServerUnaryReactor* AdminService::DeleteTarget(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* in,
    grpc::ByteBuffer* out) {
  return ServeUnary(ctx_, Role::kAdmin, ctx, in, out, this, &AdminService::DoDeleteTarget,
                    Route::kLeader);
}

grpc::ServerUnaryReactor* AdminService::GetChain(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* in,
    grpc::ByteBuffer* out) {
  return ServeUnary(ctx_, Role::kAdmin, ctx, in, out, this, &AdminService::DoGetChain);
}

grpc::ServerUnaryReactor* AdminService::ListChains(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* in,
    grpc::ByteBuffer* out) {
  return ServeUnary(ctx_, Role::kAdmin, ctx, in, out, this, &AdminService::DoListChains);
}

grpc::ServerUnaryReactor* AdminService::DeleteChain(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* in,
    grpc::ByteBuffer* out) {
  return ServeUnary(ctx_, Role::kAdmin, ctx, in, out, this, &AdminService::DoDeleteChain,
                    Route::kLeader);
}

grpc::ServerUnaryReactor* AdminService::PinChain(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* in,
    grpc::ByteBuffer* out) {
  return ServeUnary(ctx_, Role::kAdmin, ctx, in, out, this, &AdminService::DoPinChain,
                    Route::kLeader);
}

grpc::ServerUnaryReactor* AdminService::UnpinChain(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* in,
    grpc::ByteBuffer* out) {
  return ServeUnary(ctx_, Role::kAdmin, ctx, in, out, this, &AdminService::DoUnpinChain,
                    Route::kLeader);
}

grpc::ServerUnaryReactor* AdminService::TriggerFailover(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* in,
    grpc::ByteBuffer* out) {
  return ServeUnary(ctx_, Role::kAdmin, ctx, in, out, this, &AdminService::DoTriggerFailover,
                    Route::kLeader);
}

grpc::ServerUnaryReactor* AdminService::CancelFailover(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* in,
    grpc::ByteBuffer* out) {
  return ServeUnary(ctx_, Role::kAdmin, ctx, in, out, this, &AdminService::DoCancelFailover,
                    Route::kLeader);
}

grpc::ServerUnaryReactor* AdminService::SetTargetEnabled(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* in,
    grpc::ByteBuffer* out) {
  return ServeUnary(ctx_, Role::kAdmin, ctx, in, out, this, &AdminService::DoSetTargetEnabled,
                    Route::kLeader);
}

grpc::ServerUnaryReactor* AdminService::ProbeNow(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* in,
    grpc::ByteBuffer* out) {
  return ServeUnary(ctx_, Role::kAdmin, ctx, in, out, this, &AdminService::DoProbeNow,
                    Route::kLeader);
}

absl::Status AdminService::DoProbeNow(const ProbeNowRequest& req, ProbeNowResponse* resp) {
  if (!req.target().empty()) RETURN_IF_ERROR(ValidateName(req.target(), "target"));
  ASSIGN_OR_RETURN(std::vector<std::string> due, ctx_.engine->ProbeNow(req.target()));
  for (const std::string& t : due) resp->add_targets(t);
  return absl::OkStatus();
}

grpc::ServerUnaryReactor* AdminService::ListEvents(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* in,
    grpc::ByteBuffer* out) {
  // Reads of what WatchEvents streams to decide tokens anyway (the status page needs them).
  return ServeUnary(ctx_, Role::kDecide, ctx, in, out, this, &AdminService::DoListEvents);
}

grpc::ServerUnaryReactor* AdminService::GetStatus(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* in,
    grpc::ByteBuffer* out) {
  return ServeUnary(ctx_, Role::kDecide, ctx, in, out, this, &AdminService::DoGetStatus);
}

grpc::ServerUnaryReactor* AdminService::ListTrace(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* in,
    grpc::ByteBuffer* out) {
  // Admin only: the trace holds callers' error messages. The leader's trace.
  return ServeUnary(ctx_, Role::kAdmin, ctx, in, out, this, &AdminService::DoListTrace, Route::kLeader);
}

absl::Status AdminService::DoListTrace(const failover::v1::ListTraceRequest& req,
                                       failover::v1::ListTraceResponse* resp) {
  if (!ctx_.read_trace) return absl::UnimplementedError("this failoverd keeps no outcome trace");
  constexpr uint32_t kDefaultLimit = 1000;
  constexpr uint32_t kMaxLimit = 5000;
  if (req.limit() > kMaxLimit) {
    return absl::InvalidArgumentError(absl::StrCat("limit: at most ", kMaxLimit, ", got ", req.limit()));
  }
  if (!req.chain().empty()) RETURN_IF_ERROR(ValidateName(req.chain(), "chain"));
  const absl::Time from = req.has_from() ? TimeFromProto(req.from()) : absl::InfinitePast();
  const absl::Time to = req.has_to() ? TimeFromProto(req.to()) : absl::InfiniteFuture();
  if (to <= from) {
    return absl::InvalidArgumentError(
        absl::StrCat("to: must be after from (", absl::FormatTime(from), "), got ", absl::FormatTime(to)));
  }
  const size_t limit = req.limit() == 0 ? kDefaultLimit : req.limit();
  ASSIGN_OR_RETURN(std::vector<TraceEntry> entries, ctx_.read_trace(from, to, req.chain(), limit + 1, req.after_number()));
  resp->set_more(entries.size() > limit);
  if (entries.size() > limit) entries.resize(limit);
  for (const TraceEntry& e : entries) TraceEntryToProto(e, resp->add_entries());
  return absl::OkStatus();
}
namespace {

// The chain, its targets and the window's trace entries of those targets.
absl::StatusOr<ReplayInput> ReplayInputOf(const ServiceContext& ctx, const failover::v1::SimulateRequest& req) {
  ASSIGN_OR_RETURN(const failover::ChainView chain, ctx.engine->GetChain(req.chain()));
  ReplayInput input;
  input.chain = chain.config;
  for (const std::string& name : chain.config.targets) {
    ASSIGN_OR_RETURN(const failover::TargetView target, ctx.engine->GetTarget(name));
    input.targets.push_back(target.config);
  }
  input.to = req.has_to() ? TimeFromProto(req.to()) : ctx.clock->Now();
  input.from = req.has_from() ? TimeFromProto(req.from()) : input.to - absl::Hours(1);
  RETURN_IF_ERROR(CheckReplayWindow(input.from, input.to));
  input.flap_window = chain.config.policy->recovery_min_dwell;
  if (req.has_flap_window()) {
    ASSIGN_OR_RETURN(input.flap_window, DurationFromProto(req.flap_window(), "flap_window"));
    if (input.flap_window < absl::ZeroDuration()) {
      return absl::InvalidArgumentError(
          absl::StrCat("flap_window: must not be negative, got ", absl::FormatDuration(input.flap_window)));
    }
  }
  // Health belongs to the target, so its outcomes in every chain count.
  const std::set<std::string> targets(chain.config.targets.begin(), chain.config.targets.end());
  constexpr size_t kPage = 5000;
  // Bounds what one call holds in memory (a few hundred bytes an entry).
  constexpr size_t kMaxEntries = 300'000;
  uint64_t after = 0;
  for (;;) {
    ASSIGN_OR_RETURN(std::vector<TraceEntry> page, ctx.read_trace(input.from, input.to, "", kPage, after));
    for (TraceEntry& e : page) {
      if (targets.count(e.target) != 0) input.entries.push_back(std::move(e));
    }
    if (input.entries.size() > kMaxEntries) {
      return absl::ResourceExhaustedError(absl::StrCat("from: the window holds more than ", kMaxEntries,
                                                       " trace entries for this chain; replay a shorter one"));
    }
    if (page.size() < kPage) break;
    after = page.back().number;
  }
  return input;
}

}  // namespace

grpc::ServerUnaryReactor* AdminService::Simulate(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* in,
    grpc::ByteBuffer* out) {
  // As ListTrace: admin only, the leader's trace.
  return ServeUnary(ctx_, Role::kAdmin, ctx, in, out, this, &AdminService::DoSimulate, Route::kLeader);
}

absl::Status AdminService::DoSimulate(const failover::v1::SimulateRequest& req,
                                      failover::v1::SimulateResponse* resp) {
  if (!ctx_.read_trace) return absl::UnimplementedError("this failoverd keeps no outcome trace (--trace-keep=0)");
  RETURN_IF_ERROR(ValidateName(req.chain(), "chain"));
  if (!req.has_policy()) return absl::InvalidArgumentError("policy: required (the candidate policy to replay)");
  ASSIGN_OR_RETURN(const Policy candidate, PolicyFromProto(req.policy(), "policy"));
  RETURN_IF_ERROR(ValidatePolicy(candidate, "policy"));
  // A slot among the simulations allowed at once, held until this one answers.
  struct Slot {
    std::atomic<int>& running;
    ~Slot() { running.fetch_sub(1, std::memory_order_relaxed); }
  } slot{simulating_};
  if (slot.running.fetch_add(1, std::memory_order_relaxed) >= kMaxConcurrentSimulations) {
    return absl::ResourceExhaustedError(absl::StrCat(kMaxConcurrentSimulations,
                                                     " simulations are running already; try again when one has "
                                                     "answered"));
  }
  ASSIGN_OR_RETURN(ReplayInput input, ReplayInputOf(ctx_, req));
  // Both columns run on this thread: a replay does the counting the live
  // engine did over the window once more, and only admins can ask.
  ASSIGN_OR_RETURN(const ReplaySummary live, Replay(input));
  TimeToProto(input.from, resp->mutable_from());
  TimeToProto(input.to, resp->mutable_to());
  DurationToProto(input.flap_window, resp->mutable_flap_window());
  resp->set_trace_entries(input.entries.size());
  SimulatedRunToProto(live, input.chain.policy, resp->mutable_live());
  // Moved, not copied: the entries may be a few hundred thousand.
  ASSIGN_OR_RETURN(const ReplaySummary replayed, Replay(WithPolicy(std::move(input), candidate)));
  SimulatedRunToProto(replayed, candidate, resp->mutable_candidate());
  return absl::OkStatus();
}

namespace {

void FillTargetView(const failover::TargetView& v, failover::v1::TargetView* out) {
  TargetToProto(v.config, out->mutable_config());
  TargetStatusToProto(v.status, out->mutable_status());
}

void FillChainView(const failover::ChainView& v, failover::v1::ChainView* out) {
  ChainToProto(v.config, out->mutable_config());
  ChainStatusToProto(v.status, out->mutable_status());
}

}  // namespace

absl::Status AdminService::TargetViewOf(const std::string& name, failover::v1::TargetView* resp) {
  ASSIGN_OR_RETURN(failover::TargetView view, ctx_.engine->GetTarget(name));
  FillTargetView(view, resp);
  return absl::OkStatus();
}

absl::Status AdminService::ChainViewOf(const std::string& name, failover::v1::ChainView* resp) {
  ASSIGN_OR_RETURN(failover::ChainView view, ctx_.engine->GetChain(name));
  FillChainView(view, resp);
  return absl::OkStatus();
}

absl::Status AdminService::DoApply(const ApplyRequest& req, ApplyResponse* resp) {
  absl::Cleanup release = [] { ReleaseFreedMemorySoon(); };  // asked once the temporaries below are freed
  ASSIGN_OR_RETURN(ConfigChange change, ConfigChangeFromProto(req));
  ApplyOptions options;
  options.dry_run = req.dry_run();
  options.actor = CallerScope::Current();
  Committer::Scope changes(ctx_.committer);
  ASSIGN_OR_RETURN(ApplyResult result, ctx_.engine->Apply(change, options, ctx_.clock->Now()));
  RETURN_IF_ERROR(req.dry_run() ? changes.Await() : changes.AwaitWithEarlier());
  resp->set_generation(result.generation);
  resp->set_dry_run(req.dry_run());
  for (const ConfigDiff& d : result.changes) DiffToProto(d, resp->add_changes());
  for (const std::string& w : result.warnings) resp->add_warnings(w);
  return absl::OkStatus();
}

absl::Status AdminService::DoGetTarget(const GetTargetRequest& req, failover::v1::TargetView* resp) {
  RETURN_IF_ERROR(ValidateName(req.name(), "name"));
  return TargetViewOf(req.name(), resp);
}

absl::Status AdminService::DoListTargets(const ListTargetsRequest& req, ListTargetsResponse* resp) {
  if (!req.page_token().empty()) RETURN_IF_ERROR(ValidateName(req.page_token(), "page_token"));
  Page page(req.page_size());
  ctx_.engine->VisitTargets(req.page_token(), [&](const failover::TargetView& v) {
    if (page.full()) {
      resp->set_next_page_token(resp->targets(resp->targets_size() - 1).config().name());
      return false;
    }
    auto* out = resp->add_targets();
    FillTargetView(v, out);
    page.Add(out->ByteSizeLong());
    return true;
  });
  resp->set_generation(ctx_.engine->generation());
  return absl::OkStatus();
}

absl::Status AdminService::DoDeleteTarget(const DeleteTargetRequest& req, DeleteResponse* resp) {
  RETURN_IF_ERROR(ValidateName(req.name(), "name"));
  Committer::Scope changes(ctx_.committer);
  RETURN_IF_ERROR(ctx_.engine->DeleteTarget(req.name(), ctx_.clock->Now(), CallerScope::Current()).status());
  RETURN_IF_ERROR(changes.AwaitWithEarlier());
  resp->set_generation(ctx_.engine->generation());
  return absl::OkStatus();
}

absl::Status AdminService::DoGetChain(const GetChainRequest& req, failover::v1::ChainView* resp) {
  RETURN_IF_ERROR(ValidateName(req.name(), "name"));
  return ChainViewOf(req.name(), resp);
}

absl::Status AdminService::DoListChains(const ListChainsRequest& req, ListChainsResponse* resp) {
  if (!req.page_token().empty()) RETURN_IF_ERROR(ValidateName(req.page_token(), "page_token"));
  Page page(req.page_size());
  ctx_.engine->VisitChains(req.page_token(), [&](const failover::ChainView& v) {
    if (page.full()) {
      resp->set_next_page_token(resp->chains(resp->chains_size() - 1).config().name());
      return false;
    }
    auto* out = resp->add_chains();
    FillChainView(v, out);
    page.Add(out->ByteSizeLong());
    return true;
  });
  resp->set_generation(ctx_.engine->generation());
  return absl::OkStatus();
}

absl::Status AdminService::DoDeleteChain(const DeleteChainRequest& req, DeleteResponse* resp) {
  RETURN_IF_ERROR(ValidateName(req.name(), "name"));
  Committer::Scope changes(ctx_.committer);
  RETURN_IF_ERROR(ctx_.engine->DeleteChain(req.name(), ctx_.clock->Now(), CallerScope::Current()).status());
  RETURN_IF_ERROR(changes.AwaitWithEarlier());
  resp->set_generation(ctx_.engine->generation());
  return absl::OkStatus();
}

absl::Status AdminService::DoPinChain(const PinChainRequest& req, failover::v1::ChainView* resp) {
  RETURN_IF_ERROR(ValidateName(req.chain(), "chain"));
  RETURN_IF_ERROR(ValidateName(req.target(), "target"));
  Committer::Scope changes(ctx_.committer);
  RETURN_IF_ERROR(ctx_.engine->Pin(req.chain(), req.target(), ctx_.clock->Now(), CallerScope::Current()).status());
  RETURN_IF_ERROR(changes.AwaitWithEarlier());
  return ChainViewOf(req.chain(), resp);
}

absl::Status AdminService::DoUnpinChain(const UnpinChainRequest& req, failover::v1::ChainView* resp) {
  RETURN_IF_ERROR(ValidateName(req.chain(), "chain"));
  Committer::Scope changes(ctx_.committer);
  RETURN_IF_ERROR(ctx_.engine->Unpin(req.chain(), ctx_.clock->Now(), CallerScope::Current()).status());
  RETURN_IF_ERROR(changes.AwaitWithEarlier());
  return ChainViewOf(req.chain(), resp);
}

absl::Status AdminService::DoTriggerFailover(const TriggerFailoverRequest& req, failover::v1::TargetView* resp) {
  RETURN_IF_ERROR(ValidateName(req.target(), "target"));
  if (req.reason().size() > 1024) return absl::InvalidArgumentError("reason: at most 1024 bytes");
  Committer::Scope changes(ctx_.committer);
  RETURN_IF_ERROR(ctx_.engine->TriggerManualFailover(req.target(), req.reason(), ctx_.clock->Now(),
                                                     CallerScope::Current()).status());
  RETURN_IF_ERROR(changes.AwaitWithEarlier());
  return TargetViewOf(req.target(), resp);
}

absl::Status AdminService::DoCancelFailover(const CancelFailoverRequest& req, failover::v1::TargetView* resp) {
  RETURN_IF_ERROR(ValidateName(req.target(), "target"));
  Committer::Scope changes(ctx_.committer);
  RETURN_IF_ERROR(ctx_.engine->CancelManualFailover(req.target(), ctx_.clock->Now(), CallerScope::Current()).status());
  RETURN_IF_ERROR(changes.AwaitWithEarlier());
  return TargetViewOf(req.target(), resp);
}

absl::Status AdminService::DoSetTargetEnabled(const SetTargetEnabledRequest& req, failover::v1::TargetView* resp) {
  RETURN_IF_ERROR(ValidateName(req.target(), "target"));
  Committer::Scope changes(ctx_.committer);
  RETURN_IF_ERROR(ctx_.engine->SetTargetEnabled(req.target(), req.enabled(), ctx_.clock->Now(), CallerScope::Current()).status());
  RETURN_IF_ERROR(changes.AwaitWithEarlier());
  return TargetViewOf(req.target(), resp);
}

absl::Status AdminService::DoListEvents(const ListEventsRequest& req, ListEventsResponse* resp) {
  // The events of a call that was just answered are listed too.
  if (ctx_.committer != nullptr) ctx_.committer->AwaitPublished(absl::Seconds(2));
  constexpr uint32_t kDefaultLimit = 20;
  constexpr uint32_t kMaxLimit = 1000;
  if (req.limit() > kMaxLimit) {
    return absl::InvalidArgumentError(absl::StrCat("limit: at most ", kMaxLimit, ", got ", req.limit()));
  }
  for (int i = 0; i < req.chains_size(); ++i) {
    RETURN_IF_ERROR(ValidateName(req.chains(i), absl::StrCat("chains[", i, "]")));
  }
  for (int i = 0; i < req.targets_size(); ++i) {
    RETURN_IF_ERROR(ValidateName(req.targets(i), absl::StrCat("targets[", i, "]")));
  }
  // A chain filter also passes the target events of the chain's targets.
  absl::flat_hash_set<std::string> chains(req.chains().begin(), req.chains().end());
  absl::flat_hash_set<std::string> targets(req.targets().begin(), req.targets().end());
  auto snap = ctx_.engine->snapshot();
  for (const std::string& c : chains) {
    if (const ChainEntry* entry = snap->FindChain(c)) {
      for (const std::string& t : entry->config->targets) targets.insert(t);
    }
  }
  std::set<EventKind> kinds;
  for (int i = 0; i < req.kinds_size(); ++i) {
    switch (req.kinds(i)) {
      case failover::v1::EVENT_KIND_CHAIN_SWITCHED: kinds.insert(EventKind::kChainSwitched); break;
      case failover::v1::EVENT_KIND_TARGET_STATE: kinds.insert(EventKind::kTargetState); break;
      case failover::v1::EVENT_KIND_CONFIG_CHANGED: kinds.insert(EventKind::kConfigChanged); break;
      default:
        return absl::InvalidArgumentError(absl::StrCat(
            "kinds[", i, "]: set CHAIN_SWITCHED, TARGET_STATE or CONFIG_CHANGED, got ", req.kinds(i)));
    }
  }
  const absl::Time since = req.has_since() ? TimeFromProto(req.since()) : absl::InfinitePast();
  const bool all = chains.empty() && targets.empty();
  auto match = [&](const failover::Event& e) {
    if (e.time < since || (!kinds.empty() && kinds.count(e.kind) == 0)) return false;
    if (all) return true;
    switch (e.kind) {
      case EventKind::kChainSwitched: return chains.contains(e.chain);
      case EventKind::kTargetState: return targets.contains(e.target);
      case EventKind::kConfigChanged: return chains.contains(e.object_name) || targets.contains(e.object_name);
    }
    return false;
  };
  const size_t limit = req.limit() == 0 ? kDefaultLimit : req.limit();
  std::vector<failover::Event> events;
  if (req.has_after_sequence()) {
    ASSIGN_OR_RETURN(events, ctx_.events->After(req.after_sequence(), limit, match));
  } else {
    events = ctx_.events->Recent(limit, match);
  }
  for (const auto& e : events) EventToProto(e, resp->add_events());
  return absl::OkStatus();
}

// GetStatus pages run through the chains, then the targets; a token names
// the list and the last name sent ("chain/NAME", "target/NAME", or "target/"
// when the targets start on the next page).
absl::Status AdminService::DoGetStatus(const GetStatusRequest& req, StatusResponse* resp) {
  const std::string& token = req.page_token();
  const bool targets_only = absl::StartsWith(token, "target/");
  if (!token.empty()) {
    const bool known = absl::StartsWith(token, "chain/") || targets_only;
    const absl::string_view after = known ? absl::string_view(token).substr(token.find('/') + 1) : "";
    if (!known || (!after.empty() && !ValidateName(after, "page_token").ok()) ||
        (after.empty() && !targets_only)) {
      return absl::InvalidArgumentError(absl::StrCat("page_token: \"", absl::CHexEscape(token.substr(0, 64)),
                                                     "\" is not a next_page_token from a GetStatus response"));
    }
  }
  Page page(req.page_size());
  if (!targets_only) {
    const absl::string_view after = token.empty() ? "" : absl::string_view(token).substr(6);
    ctx_.engine->VisitChains(after, [&](const failover::ChainView& v) {
      if (page.full()) {
        resp->set_next_page_token(absl::StrCat("chain/", resp->chains(resp->chains_size() - 1).name()));
        return false;
      }
      auto* out = resp->add_chains();
      ChainStatusToProto(v.status, out);
      page.Add(out->ByteSizeLong());
      return true;
    });
  }
  if (resp->next_page_token().empty()) {
    const absl::string_view after = targets_only ? absl::string_view(token).substr(7) : "";
    ctx_.engine->VisitTargets(after, [&](const failover::TargetView& v) {
      if (page.full()) {
        resp->set_next_page_token(
            resp->targets_size() == 0 ? "target/" : absl::StrCat("target/", resp->targets(resp->targets_size() - 1).name()));
        return false;
      }
      auto* out = resp->add_targets();
      TargetStatusToProto(v.status, out);
      page.Add(out->ByteSizeLong());
      return true;
    });
  }
  resp->set_config_generation(ctx_.engine->generation());
  const absl::Time now = ctx_.clock->Now();
  TimeToProto(now, resp->mutable_server_time());
  DurationToProto(now - ctx_.started, resp->mutable_uptime());
  resp->set_version(ctx_.version);
  if (ctx_.leader != nullptr) ctx_.leader->Describe(resp->mutable_cluster());
  return absl::OkStatus();
}

}  // namespace failover::api
