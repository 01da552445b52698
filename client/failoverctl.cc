// failoverctl: the command-line client of failoverd.
//
// Exit codes, stable for scripts: 0 success, 1 failoverd refused or failed
// (its message on stderr), 2 usage error, 3 failoverd cannot be reached.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "client/connection.h"
#include "client/format.h"
#include "client/probe_agent.h"
#include "client/upstream_failure.h"
#include "common/trailers.h"
#include "failover/v1/admin.grpc.pb.h"
#include "failover/v1/decision.grpc.pb.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpc/support/log.h"
#include "proto/model_convert.h"
#include "server/config/check.h"
#include "server/config/config_file.h"
#include "server/config/config_writer.h"

namespace {

namespace v1 = ::failover::v1;
using failover::client::Ago;
using failover::client::OutputFormat;
using failover::client::Table;

constexpr int kExitOk = 0;
constexpr int kExitRefused = 1;
constexpr int kExitUsage = 2;
constexpr int kExitUnreachable = 3;

// The context of the last call made (failoverctl makes one call at a time).
const grpc::ClientContext* g_last_call = nullptr;

// Only the transport's failures mean failoverd is unreachable (exit 3): its own
// refusals (UNAVAILABLE while the data dir takes no writes, say) carry the
// failoverd-answered trailer and exit 1.
bool Unreachable(const grpc::Status& s) {
  if (s.error_code() != grpc::StatusCode::UNAVAILABLE && s.error_code() != grpc::StatusCode::DEADLINE_EXCEEDED) {
    return false;
  }
  return g_last_call == nullptr || g_last_call->GetServerTrailingMetadata().count(failover::kAnsweredTrailer) == 0;
}

// Where failoverctl connects and whether with TLS, for the hints below.
std::string g_server;
bool g_tls = false;

// What to try when failoverd cannot be reached, from gRPC's message.
std::string Hint(const grpc::Status& s) {
  const std::string m = absl::AsciiStrToLower(s.error_message());
  if (absl::StrContains(m, "ssl") || absl::StrContains(m, "handshake") || absl::StrContains(m, "certificate")) {
    return g_tls ? "the TLS handshake failed: check that --tls-ca is the CA that signed failoverd's certificate "
                   "(and --tls-cert/--tls-key if it requires client certificates)"
                 : "the TLS handshake failed: failoverd may serve TLS; pass --tls-ca";
  }
  if (s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
    return absl::StrCat("no answer from ", g_server, " within --timeout: is it the right address, and is failoverd ",
                        "running there?", g_tls ? "" : " If it serves TLS, pass --tls-ca.");
  }
  return absl::StrCat("is failoverd running at ", g_server, "? Set the address with --server or FAILOVERD_ADDR",
                      g_tls ? "." : "; if it serves TLS, pass --tls-ca.");
}

int ExitFor(const grpc::Status& s) {
  if (s.ok()) return kExitOk;
  if (!Unreachable(s)) {
    std::fprintf(stderr, "failoverctl: %s\n", s.error_message().c_str());
    return kExitRefused;
  }
  std::fprintf(stderr, "failoverctl: cannot reach failoverd at %s (%s)\n  hint: %s\n", g_server.c_str(),
               s.error_message().c_str(), Hint(s).c_str());
  return kExitUnreachable;
}

int Usage(const std::string& message) {
  std::fprintf(stderr, "failoverctl: %s\n", message.c_str());
  return kExitUsage;
}

std::string Lower(const std::string& enum_name, const std::string& prefix) {
  std::string s = enum_name.rfind(prefix, 0) == 0 ? enum_name.substr(prefix.size()) : enum_name;
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}
std::string Health(v1::HealthState h) { return Lower(v1::HealthState_Name(h), "HEALTH_STATE_"); }
std::string State(v1::ChainState s) { return Lower(v1::ChainState_Name(s), "CHAIN_STATE_"); }

// When an event happened, in full, in this machine's time zone.
std::string EventTime(const v1::Event& e) {
  if (!e.has_time()) return "-";
  return absl::FormatTime("%Y-%m-%d %H:%M:%S %Z",
                          absl::FromUnixSeconds(e.time().seconds()) + absl::Nanoseconds(e.time().nanos()),
                          absl::LocalTimeZone());
}

// One line per event, as in failoverd's log: its sequence and time first.
std::string DescribeWhat(const v1::Event& e, int64_t snapshot_chains, int64_t snapshot_targets) {
  // A shadow event has no sequence: its policy's name stands in its place.
  const std::string head =
      absl::StrCat(e.shadow().empty() ? absl::StrCat(e.sequence()) : "shadow " + e.shadow(), "  ", EventTime(e), "  ");
  if (e.has_chain_switched()) {
    const auto& s = e.chain_switched();
    return absl::StrCat(head, "chain ", s.chain(), ": ", s.from_target().empty() ? "(none)" : s.from_target(),
                        " -> ", s.to_target(), " (", Lower(v1::SwitchReason_Name(s.reason()), "SWITCH_REASON_"),
                        s.detail().empty() ? "" : ": ", s.detail(), ") state ", State(s.from_state()), " -> ",
                        State(s.to_state()));
  }
  if (e.has_target_state()) {
    const auto& s = e.target_state();
    return absl::StrCat(head, "target ", s.target(), ": ", Health(s.from_state()), " -> ", Health(s.to_state()),
                        " (", Lower(v1::TransitionSource_Name(s.source()), "TRANSITION_SOURCE_"),
                        s.reason().empty() ? "" : ": ", s.reason(), ")");
  }
  if (e.has_config_changed()) {
    const auto& s = e.config_changed();
    return absl::StrCat(head, "config: ", Lower(v1::ConfigObjectKind_Name(s.what()), "CONFIG_OBJECT_KIND_"), " ",
                        s.name(), " ", Lower(v1::ConfigChange_Name(s.change()), "CONFIG_CHANGE_"), " (generation ",
                        s.generation(), ")");
  }
  if (e.has_snapshot()) {
    return absl::StrCat(head, "snapshot", e.snapshot().resync() ? " (resync)" : "", ": ",
                        snapshot_chains >= 0 ? snapshot_chains : e.snapshot().chains_size(), " chains, ",
                        snapshot_targets >= 0 ? snapshot_targets : e.snapshot().targets_size(), " targets");
  }
  return head + "event";
}

// One line per event, as in failoverd's log, with who caused it.
// `snapshot_chains` / `snapshot_targets`: the totals of a snapshot sent in parts.
std::string DescribeEvent(const v1::Event& e, int64_t snapshot_chains = -1, int64_t snapshot_targets = -1) {
  std::string line = DescribeWhat(e, snapshot_chains, snapshot_targets);
  if (!e.actor().empty()) absl::StrAppend(&line, " by ", e.actor());
  return line;
}

absl::Time Now() { return absl::Now(); }

std::string ChainsTable(const std::vector<v1::ChainStatus>& chains) {
  std::vector<std::vector<std::string>> rows;
  for (const auto& c : chains) {
    std::vector<std::string> targets;
    for (const auto& t : c.targets()) targets.push_back(absl::StrCat(t.name(), ":", Health(t.health())));
    rows.push_back({c.name(), State(c.state()), c.active_target(), Ago(c.last_switch(), Now()),
                    absl::StrJoin(targets, " ")});
  }
  return Table({"CHAIN", "STATE", "ACTIVE", "LAST SWITCH", "TARGETS"}, rows, 30);
}

std::string TargetsTable(const std::vector<v1::TargetStatus>& targets) {
  std::vector<std::vector<std::string>> rows;
  for (const auto& t : targets) {
    // When the last check ran and what it found.
    std::string check = Ago(t.last_probe(), Now());
    if (!t.last_check().empty()) absl::StrAppend(&check, ": ", t.last_check());
    rows.push_back({t.name(), Health(t.health()), check, t.last_error().empty() ? "-" : t.last_error()});
  }
  return Table({"TARGET", "HEALTH", "LAST CHECK", "LAST ERROR"}, rows, 28);
}

struct Ctl {
  failover::client::ConnectionOptions conn;
  std::string output = "table";
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::AdminService::Stub> admin;
  std::unique_ptr<v1::DecisionService::Stub> decide;

  // A context for the next call, kept until the one after so that its
  // trailers can still be read when the call fails.
  grpc::ClientContext* Ctx() const {
    last_call = std::make_unique<grpc::ClientContext>();
    failover::client::PrepareContext(conn, last_call.get());
    g_last_call = last_call.get();
    return last_call.get();
  }
  mutable std::unique_ptr<grpc::ClientContext> last_call;
  // A context for a stream, owned by the caller: calls made while the stream
  // runs (status --watch) must not replace it.
  std::unique_ptr<grpc::ClientContext> StreamCtx() const {
    auto ctx = std::make_unique<grpc::ClientContext>();
    failover::client::ConnectionOptions o = conn;
    o.timeout_seconds = 0;
    failover::client::PrepareContext(o, ctx.get());
    g_last_call = ctx.get();
    return ctx;
  }
  OutputFormat Format() const {
    return output == "json" ? OutputFormat::kJson : output == "yaml" ? OutputFormat::kYaml : OutputFormat::kTable;
  }
  // Prints `m` as JSON or YAML; false for table output (the caller prints a table).
  bool PrintStructured(const google::protobuf::Message& m) const {
    if (Format() == OutputFormat::kJson) {
      std::cout << failover::client::ToJson(m) << "\n";
      return true;
    }
    if (Format() == OutputFormat::kYaml) {
      std::cout << failover::client::ToYaml(m);
      return true;
    }
    return false;
  }
};

// ---------------------------------------------------------------------------

// Every page of a ListChains / ListTargets / GetStatus call, merged into one
// response (a large state comes in several).
template <typename Request, typename Response, typename Call>
grpc::Status AllPages(const Ctl& ctl, Request req, Response* out, Call call) {
  for (;;) {
    Response page;
    const grpc::Status s = call(ctl.Ctx(), req, &page);
    if (!s.ok()) return s;
    std::string next = page.next_page_token();
    page.clear_next_page_token();
    out->MergeFrom(page);
    if (next.empty() || next == req.page_token()) return s;
    req.set_page_token(std::move(next));
  }
}

// Offline: exit 0 when the files are valid together, 1 (with file:line) when not.
int Validate(const std::vector<std::string>& paths) {
  const absl::StatusOr<failover::config::CheckSummary> checked = failover::config::CheckConfigPaths(paths);
  if (!checked.ok()) {
    std::fprintf(stderr, "failoverctl: %s\n", std::string(checked.status().message()).c_str());
    return kExitRefused;
  }
  std::cout << absl::StrJoin(paths, ", ") << ": valid (" << checked->files << " files, " << checked->targets << " targets, "
            << checked->chains << " chains)\n";
  return kExitOk;
}

int Apply(Ctl& ctl, const std::vector<std::string>& paths, bool dry_run) {
  auto loaded = failover::config::LoadConfigPaths(paths);
  if (!loaded.ok()) return Usage(std::string(loaded.status().message()));
  v1::ApplyRequest req;
  req.set_dry_run(dry_run);
  for (const auto& t : loaded->change.targets) failover::api::TargetToProto(t, req.add_targets());
  for (const auto& c : loaded->change.chains) failover::api::ChainToProto(c, req.add_chains());
  for (auto& t : *req.mutable_targets()) t.clear_managed_by();
  for (auto& c : *req.mutable_chains()) c.clear_managed_by();
  v1::ApplyResponse resp;
  const grpc::Status s = ctl.admin->Apply(ctl.Ctx(), req, &resp);
  if (!s.ok()) {
    // Point at the file and line that declared the object the server names.
    const absl::Status located = failover::config::Locate(
        *loaded, absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message()));
    return ExitFor(grpc::Status(s.error_code(), std::string(located.message())));
  }
  for (const auto& w : resp.warnings()) std::fprintf(stderr, "warning: %s\n", w.c_str());
  if (ctl.PrintStructured(resp)) return kExitOk;
  for (const auto& d : resp.changes()) {
    std::string line = absl::StrCat(Lower(v1::ConfigObjectKind_Name(d.what()), "CONFIG_OBJECT_KIND_"), " ", d.name(),
                                     ": ", Lower(v1::ConfigChange_Name(d.change()), "CONFIG_CHANGE_"));
    if (d.details_size() > 0) {
      absl::StrAppend(&line, ": ", absl::StrJoin(d.details(), "; "));
    } else if (d.changed_fields_size() > 0) {
      absl::StrAppend(&line, " (", absl::StrJoin(d.changed_fields(), ", "), ")");
    }
    std::cout << line << "\n";
  }
  std::cout << (dry_run ? "dry run: nothing was saved\n" : absl::StrCat("generation ", resp.generation(), "\n"));
  return kExitOk;
}

// `get -o yaml` writes the objects as a config file, which applies back as it
// is (the live state is in -o json, status and events).
bool PrintConfig(const Ctl& ctl, const std::vector<v1::Target>& targets, const std::vector<v1::Chain>& chains) {
  if (ctl.Format() != OutputFormat::kYaml) return false;
  std::vector<failover::TargetConfig> ts;
  std::vector<failover::ChainConfig> cs;
  for (const v1::Target& t : targets) {
    auto converted = failover::api::TargetFromProto(t, "target");
    if (converted.ok()) ts.push_back(*std::move(converted));
  }
  for (const v1::Chain& c : chains) {
    auto converted = failover::api::ChainFromProto(c, "chain");
    if (converted.ok()) cs.push_back(*std::move(converted));
  }
  std::cout << failover::config::WriteConfig(ts, cs);
  return true;
}

int Get(Ctl& ctl, const std::string& what, const std::string& name) {
  if (what == "chains" || what == "chain") {
    if (!name.empty()) {
      v1::GetChainRequest req;
      req.set_name(name);
      v1::ChainView view;
      const grpc::Status s = ctl.admin->GetChain(ctl.Ctx(), req, &view);
      if (!s.ok()) return ExitFor(s);
      if (PrintConfig(ctl, {}, {view.config()})) return kExitOk;
      if (!ctl.PrintStructured(view)) std::cout << ChainsTable({view.status()}) << "\n" << TargetsTable({view.status().targets().begin(), view.status().targets().end()});
      return kExitOk;
    }
    v1::ListChainsResponse resp;
    const grpc::Status s =
        AllPages(ctl, v1::ListChainsRequest(), &resp, [&](auto* c, const auto& r, auto* p) { return ctl.admin->ListChains(c, r, p); });
    if (!s.ok()) return ExitFor(s);
    std::vector<v1::Chain> configs;
    for (const auto& c : resp.chains()) configs.push_back(c.config());
    if (PrintConfig(ctl, {}, configs)) return kExitOk;
    if (ctl.PrintStructured(resp)) return kExitOk;
    std::vector<v1::ChainStatus> chains;
    for (const auto& c : resp.chains()) chains.push_back(c.status());
    std::cout << ChainsTable(chains);
    return kExitOk;
  }
  if (what == "targets" || what == "target") {
    std::vector<v1::TargetStatus> targets;
    if (!name.empty()) {
      v1::GetTargetRequest req;
      req.set_name(name);
      v1::TargetView view;
      const grpc::Status s = ctl.admin->GetTarget(ctl.Ctx(), req, &view);
      if (!s.ok()) return ExitFor(s);
      if (PrintConfig(ctl, {view.config()}, {})) return kExitOk;
      if (ctl.PrintStructured(view)) return kExitOk;
      targets.push_back(view.status());
    } else {
      v1::ListTargetsResponse resp;
      const grpc::Status s = AllPages(ctl, v1::ListTargetsRequest(), &resp,
                                      [&](auto* c, const auto& r, auto* p) { return ctl.admin->ListTargets(c, r, p); });
      if (!s.ok()) return ExitFor(s);
      std::vector<v1::Target> configs;
      for (const auto& t : resp.targets()) configs.push_back(t.config());
      if (PrintConfig(ctl, configs, {})) return kExitOk;
      if (ctl.PrintStructured(resp)) return kExitOk;
      for (const auto& t : resp.targets()) targets.push_back(t.status());
    }
    std::cout << TargetsTable(targets);
    return kExitOk;
  }
  return Usage(absl::StrCat("get: expected chains or targets, got \"", what, "\""));
}

// One line on the replica that answered, in cluster mode.
std::string ClusterLine(const v1::ClusterStatus& c) {
  std::string line = absl::StrCat(
      "cluster: this replica (", c.self(), ") is ", c.role() == v1::ClusterStatus::ROLE_LEADER ? "the leader" : "a follower",
      "; leader ", c.leader().empty() ? "none" : c.leader(), "; applied log entry ", c.applied_index(), " (etcd revision ",
      c.applied_revision(), "), lag ", c.lag(), "; leader changes ", c.leader_changes(), "\n");
  if (c.replicas_size() > 0) {
    absl::StrAppend(&line, "replicas (", c.replicas_size(), "): ");
    for (int i = 0; i < c.replicas_size(); ++i) {
      const v1::ClusterStatus::Replica& r = c.replicas(i);
      absl::StrAppend(&line, i > 0 ? ", " : "", r.address(), " (", r.leader() ? "leader, " : "",
                      r.version().empty() ? "version unknown" : r.version(),
                      r.has_started() ? absl::StrCat(", started ", Ago(r.started(), Now())) : "", ")");
    }
    absl::StrAppend(&line, "\n");
  }
  if (c.rpm_replicas() > 1) {
    absl::StrAppend(&line, "rpm caps: leased from the leader as callers use them; 1/", c.rpm_replicas(), " (rank ",
                    c.rpm_rank(), ") of each in a minute without a lease\n");
  }
  if (!c.etcd_error().empty()) absl::StrAppend(&line, "etcd: ", c.etcd_error(), "\n");
  if (!c.log_error().empty()) absl::StrAppend(&line, "log: ", c.log_error(), " (NOT_SERVING)\n");
  return line;
}

int Status(Ctl& ctl, bool watch) {
  // A terminal gets the view redrawn in place; a pipe or file gets each view
  // in turn under a dated line, and no escape codes.
  const bool terminal = isatty(STDOUT_FILENO) != 0;
  auto print = [&]() -> int {
    v1::StatusResponse resp;
    const grpc::Status s =
        AllPages(ctl, v1::GetStatusRequest(), &resp, [&](auto* c, const auto& r, auto* p) { return ctl.admin->GetStatus(c, r, p); });
    if (!s.ok()) return ExitFor(s);
    if (ctl.PrintStructured(resp)) return kExitOk;
    if (watch && terminal) std::cout << "\033[H\033[2J";  // redraw from the top
    if (watch && !terminal) {
      std::cout << "--- " << absl::FormatTime("%Y-%m-%d %H:%M:%S %Z", absl::Now(), absl::LocalTimeZone()) << "\n";
    }
    if (resp.has_cluster()) std::cout << ClusterLine(resp.cluster()) << "\n";
    std::cout << ChainsTable({resp.chains().begin(), resp.chains().end()}) << "\n"
              << TargetsTable({resp.targets().begin(), resp.targets().end()}) << std::flush;
    return kExitOk;
  };
  if (const int rc = print(); rc != kExitOk || !watch) return rc;
  // Redraw at once on every change, and every second besides so the ages
  // tick; the events come on a thread of their own, which reconnects when the
  // stream drops. Runs until the process is stopped.
  struct Shared {
    std::mutex mu;
    std::condition_variable changed_cv;
    bool changed = false;
  };
  auto shared = std::make_shared<Shared>();
  std::thread([&ctl, shared] {
    for (;;) {
      auto ctx = ctl.StreamCtx();
      auto reader = ctl.decide->WatchEvents(ctx.get(), v1::WatchEventsRequest());
      v1::Event e;
      while (reader->Read(&e)) {
        if (e.has_snapshot() && e.snapshot().more()) continue;
        std::lock_guard<std::mutex> lock(shared->mu);
        shared->changed = true;
        shared->changed_cv.notify_one();
      }
      reader->Finish();
      std::this_thread::sleep_for(std::chrono::seconds(1));
    }
  }).detach();
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(shared->mu);
      shared->changed_cv.wait_for(lock, std::chrono::seconds(1), [&] { return shared->changed; });
      shared->changed = false;
    }
    print();
    // The reader went away (a pipe closed): done. Exits at once, as the
    // events thread is still blocked in its stream.
    if (!std::cout.good()) std::_Exit(kExitOk);
  }
}

// --kind values: chain, target, config.
bool KindsFromFlags(const std::vector<std::string>& names, std::vector<v1::EventKind>* kinds) {
  for (const std::string& name : names) {
    if (name == "chain") {
      kinds->push_back(v1::EVENT_KIND_CHAIN_SWITCHED);
    } else if (name == "target") {
      kinds->push_back(v1::EVENT_KIND_TARGET_STATE);
    } else if (name == "config") {
      kinds->push_back(v1::EVENT_KIND_CONFIG_CHANGED);
    } else {
      Usage(absl::StrCat("--kind: expected chain, target or config, got \"", name, "\""));
      return false;
    }
  }
  return true;
}

bool IsKind(const v1::Event& e, const std::vector<v1::EventKind>& kinds) {
  if (kinds.empty() || e.has_snapshot()) return true;
  const v1::EventKind kind = e.has_chain_switched() ? v1::EVENT_KIND_CHAIN_SWITCHED
                             : e.has_target_state() ? v1::EVENT_KIND_TARGET_STATE
                                                    : v1::EVENT_KIND_CONFIG_CHANGED;
  return std::find(kinds.begin(), kinds.end(), kind) != kinds.end();
}

// --since D: sets `from` to D before now, and `to` (when given) to now, so
// the window is D long however late the server answers; false (after a
// usage message) when D is not a duration.
bool SinceFlag(const std::string& since, google::protobuf::Timestamp* from,
               google::protobuf::Timestamp* to = nullptr) {
  absl::Duration back;
  if (!absl::ParseDuration(since, &back) || back <= absl::ZeroDuration()) {
    Usage(absl::StrCat("--since: expected a duration such as 30m or 2h, got \"", since, "\""));
    return false;
  }
  const absl::Time now = absl::Now();
  if (to == nullptr) {
    from->set_seconds(absl::ToUnixSeconds(now - back));
    return true;
  }
  failover::api::TimeToProto(now - back, from);
  failover::api::TimeToProto(now, to);
  return true;
}

int Events(Ctl& ctl, uint32_t limit, const std::vector<std::string>& chains, const std::vector<std::string>& targets,
           const std::string& since, const std::vector<std::string>& kind_names) {
  v1::ListEventsRequest req;
  req.set_limit(limit);
  for (const auto& c : chains) req.add_chains(c);
  for (const auto& t : targets) req.add_targets(t);
  std::vector<v1::EventKind> kinds;
  if (!KindsFromFlags(kind_names, &kinds)) return kExitUsage;
  for (v1::EventKind k : kinds) req.add_kinds(k);
  if (!since.empty() && !SinceFlag(since, req.mutable_since())) return kExitUsage;
  v1::ListEventsResponse resp;
  const grpc::Status s = ctl.admin->ListEvents(ctl.Ctx(), req, &resp);
  if (!s.ok()) return ExitFor(s);
  if (ctl.PrintStructured(resp)) return kExitOk;
  const absl::Time now = absl::Now();
  for (const auto& e : resp.events()) {
    std::cout << DescribeEvent(e) << "  (" << failover::client::Ago(e.time(), now) << ")\n";
  }
  return kExitOk;
}

// One line per traced outcome: number, time, chain and target, what the
// caller saw, and how the live policy classified it.
std::string DescribeTraceEntry(const v1::TraceEntry& e) {
  const absl::Time at = absl::FromUnixSeconds(e.time().seconds()) + absl::Nanoseconds(e.time().nanos());
  std::string line = absl::StrCat(e.number(), "  ", absl::FormatTime("%Y-%m-%d %H:%M:%E3S %Z", at, absl::LocalTimeZone()),
                                  "  ", e.chain().empty() ? "-" : e.chain(), "  ", e.target(), "  ");
  if (e.probe_outcome() != v1::PROBE_OUTCOME_UNSPECIFIED) {
    absl::StrAppend(&line, Lower(v1::ProbeKind_Name(e.probe_kind()), "PROBE_KIND_"), " check ",
                    Lower(v1::ProbeOutcome_Name(e.probe_outcome()), "PROBE_OUTCOME_"));
    if (e.has_failure() && !e.failure().message().empty()) absl::StrAppend(&line, " \"", e.failure().message(), "\"");
  } else if (e.has_success()) {
    absl::StrAppend(&line, "ok");
    if (e.count() > 1) absl::StrAppend(&line, " x", e.count());
  } else {
    const v1::Failure& f = e.failure();
    std::vector<std::string> seen;
    if (f.http_status() != 0) seen.push_back(absl::StrCat(f.http_status()));
    if (f.grpc_code() != 0) seen.push_back(absl::StrCat("grpc ", f.grpc_code()));
    if (f.transport_error() != v1::TRANSPORT_ERROR_UNSPECIFIED) {
      seen.push_back(Lower(v1::TransportError_Name(f.transport_error()), "TRANSPORT_ERROR_"));
    }
    if (f.cancelled()) seen.push_back("cancelled");
    if (f.admission_rejected()) seen.push_back("admission rejected");
    if (!f.error_code().empty()) seen.push_back(f.error_code());
    if (!f.message().empty()) seen.push_back(absl::StrCat("\"", f.message(), "\""));
    absl::StrAppend(&line, seen.empty() ? "failure" : absl::StrJoin(seen, " "), " -> ",
                    Lower(v1::FailureReason_Name(e.reason()), "FAILURE_REASON_"));
  }
  if (e.has_latency()) {
    absl::StrAppend(&line, "  ",
                    absl::FormatDuration(absl::Seconds(e.latency().seconds()) + absl::Nanoseconds(e.latency().nanos())));
  }
  return line;
}

int Trace(Ctl& ctl, const std::string& chain, const std::string& since, uint32_t limit) {
  v1::ListTraceRequest req;
  req.set_chain(chain);
  if (!since.empty() && !SinceFlag(since, req.mutable_from())) return kExitUsage;
  // Page by number until the window or --limit is done.
  v1::ListTraceResponse all;
  for (;;) {
    constexpr uint32_t kPage = 1000;
    const uint32_t left = limit - static_cast<uint32_t>(all.entries_size());
    req.set_limit(std::min(kPage, left));
    v1::ListTraceResponse page;
    const grpc::Status s = ctl.admin->ListTrace(ctl.Ctx(), req, &page);
    if (!s.ok()) return ExitFor(s);
    for (auto& e : *page.mutable_entries()) *all.add_entries() = std::move(e);
    all.set_more(page.more());
    if (!page.more() || all.entries_size() == 0 || static_cast<uint32_t>(all.entries_size()) >= limit) break;
    req.set_after_number(all.entries(all.entries_size() - 1).number());
  }
  if (ctl.PrintStructured(all)) return kExitOk;
  for (const auto& e : all.entries()) std::cout << DescribeTraceEntry(e) << "\n";
  if (all.more()) std::cout << "(more in the trace: raise --limit or narrow --since)\n";
  return kExitOk;
}

struct SimulateFlags {
  std::string chain;
  std::string policy_file;
  std::string since;
  std::string from;
  std::string to;
  std::string flap_window;
};

// --from / --to: RFC 3339, as `failoverctl trace -o json` prints times.
bool TimeFlag(const char* flag, const std::string& value, google::protobuf::Timestamp* out) {
  absl::Time t;
  std::string error;
  if (!absl::ParseTime(absl::RFC3339_full, value, &t, &error)) {
    Usage(absl::StrCat(flag, ": expected a time such as 2026-12-04T10:00:00Z, got \"", value, "\""));
    return false;
  }
  out->set_seconds(absl::ToUnixSeconds(t));
  return true;
}

// A duration as a column shows it: to the millisecond under a minute, else to the second.
std::string Span(const google::protobuf::Duration& proto) {
  const absl::Duration d = absl::Seconds(proto.seconds()) + absl::Nanoseconds(proto.nanos());
  return absl::FormatDuration(absl::Trunc(d, d < absl::Minutes(1) ? absl::Milliseconds(1) : absl::Seconds(1)));
}

// "6s / 41s": the median and the longest time to detect, or "-" without trips.
std::string Detection(const v1::SimulatedRun& run) {
  if (run.trip_count() == 0) return "-";
  return absl::StrCat(Span(run.detection_median()), " / ", Span(run.detection_max()));
}

int Simulate(Ctl& ctl, const SimulateFlags& f) {
  // The flags first, so a usage error needs no server.
  if (!f.since.empty() && (!f.from.empty() || !f.to.empty())) {
    return Usage("simulate: give --since or --from/--to, not both");
  }
  v1::SimulateRequest req;
  req.set_chain(f.chain);
  if (!f.since.empty() && !SinceFlag(f.since, req.mutable_from(), req.mutable_to())) return kExitUsage;
  if (!f.from.empty() && !TimeFlag("--from", f.from, req.mutable_from())) return kExitUsage;
  if (!f.to.empty() && !TimeFlag("--to", f.to, req.mutable_to())) return kExitUsage;
  if (!f.flap_window.empty()) {
    absl::Duration window;
    if (!absl::ParseDuration(f.flap_window, &window) || window < absl::ZeroDuration()) {
      return Usage(absl::StrCat("--flap-window: expected a duration such as 60s, got \"", f.flap_window, "\""));
    }
    failover::api::DurationToProto(window, req.mutable_flap_window());
  }
  std::ifstream in(f.policy_file);
  if (!in) return Usage(absl::StrCat("--policy: cannot read \"", f.policy_file, "\""));
  std::stringstream text;
  text << in.rdbuf();
  // The file says what to change: what it leaves out stays as the chain has it.
  v1::GetChainRequest get;
  get.set_name(f.chain);
  v1::ChainView chain;
  if (const grpc::Status s = ctl.admin->GetChain(ctl.Ctx(), get, &chain); !s.ok()) return ExitFor(s);
  const absl::StatusOr<failover::Policy> live = failover::api::PolicyFromProto(chain.config().policy(), "policy");
  if (!live.ok()) return Usage(std::string(live.status().message()));
  const absl::StatusOr<failover::Policy> candidate =
      failover::config::ParsePolicyText(text.str(), f.policy_file, *live);
  if (!candidate.ok()) return Usage(std::string(candidate.status().message()));
  failover::api::PolicyToProto(*candidate, req.mutable_policy());
  v1::SimulateResponse resp;
  const grpc::Status s = ctl.admin->Simulate(ctl.Ctx(), req, &resp);
  if (!s.ok()) return ExitFor(s);
  if (ctl.PrintStructured(resp)) return kExitOk;

  const absl::Time from = absl::FromUnixSeconds(resp.from().seconds());
  const absl::Time to = absl::FromUnixSeconds(resp.to().seconds());
  std::cout << "chain " << f.chain << ", " << absl::FormatTime("%Y-%m-%d %H:%M:%S", from, absl::UTCTimeZone())
            << " to " << absl::FormatTime("%H:%M:%S UTC", to, absl::UTCTimeZone()) << " ("
            << absl::FormatDuration(to - from) << "), " << resp.trace_entries() << " trace entries\n";
  std::vector<std::string> changed;
  for (const auto& d : live->Differences(*candidate)) changed.push_back(absl::StrCat(d.field, " ", d.mine, " -> ", d.theirs));
  std::cout << "candidate: " << (changed.empty() ? "the same as the live policy" : absl::StrJoin(changed, ", "))
            << "\n\n";
  const v1::SimulatedRun& a = resp.live();
  const v1::SimulatedRun& b = resp.candidate();
  std::vector<std::vector<std::string>> rows = {
      {"", "live", "candidate"},
      {"trips", absl::StrCat(a.trip_count()), absl::StrCat(b.trip_count())},
      {"recoveries", absl::StrCat(a.recoveries()), absl::StrCat(b.recoveries())},
      {"switches", absl::StrCat(a.switches()), absl::StrCat(b.switches())},
      {absl::StrCat("flaps (back and away within ", Span(resp.flap_window()), ")"),
       absl::StrCat(a.flaps()), absl::StrCat(b.flaps())},
      {"time to detect (median / longest)", Detection(a), Detection(b)},
      {"failures on the target tried first", absl::StrCat(a.requests_to_failing()),
       absl::StrCat(b.requests_to_failing())},
      {"time in FALLBACK", Span(a.in_fallback()), Span(b.in_fallback())},
      {"time in DEGRADED", Span(a.in_degraded()), Span(b.in_degraded())},
      {"outcomes replayed", absl::StrCat(a.outcomes()), absl::StrCat(b.outcomes())},
      {"  on a target not tried first", absl::StrCat(a.elsewhere()), absl::StrCat(b.elsewhere())},
      {"checks used / unused", absl::StrCat(a.checks_used(), " / ", a.checks_unused()),
       absl::StrCat(b.checks_used(), " / ", b.checks_unused())},
  };
  size_t width[3] = {0, 0, 0};
  for (const auto& row : rows) {
    for (size_t i = 0; i < 3; ++i) width[i] = std::max(width[i], row[i].size());
  }
  for (const auto& row : rows) {
    std::cout << row[0] << std::string(width[0] - row[0].size() + 2, ' ') << row[1]
              << std::string(width[1] - row[1].size() + 2, ' ') << row[2] << "\n";
  }
  return kExitOk;
}

int Watch(Ctl& ctl, const std::vector<std::string>& chains, const std::vector<std::string>& targets,
          int64_t max_events, int64_t after, const std::vector<std::string>& kind_names, bool shadow) {
  std::vector<v1::EventKind> kinds;
  if (!KindsFromFlags(kind_names, &kinds)) return kExitUsage;
  v1::WatchEventsRequest req;
  req.set_include_shadow(shadow);
  for (const auto& c : chains) req.add_chains(c);
  for (const auto& t : targets) req.add_targets(t);
  if (after >= 0) req.set_after_sequence(static_cast<uint64_t>(after));
  int64_t printed = 0;
  double backoff = 0.2;
  bool ever_connected = false;
  for (;;) {
    auto ctx = ctl.StreamCtx();
    auto reader = ctl.decide->WatchEvents(ctx.get(), req);
    v1::Event e;
    bool got_any = false;
    // A large snapshot comes in parts (Snapshot.more); text output sums them into one line.
    int64_t part_chains = 0;
    int64_t part_targets = 0;
    while (reader->Read(&e)) {
      got_any = true;
      ever_connected = true;
      backoff = 0.2;
      const bool partial = e.has_snapshot() && e.snapshot().more();
      if (!IsKind(e, kinds)) {
        if (e.sequence() > 0) req.set_after_sequence(e.sequence());
        continue;
      }
      if (ctl.output == "json") {
        std::cout << failover::client::ToJson(e, false) << std::endl;
      } else if (e.has_snapshot()) {
        part_chains += e.snapshot().chains_size();
        part_targets += e.snapshot().targets_size();
        if (partial) continue;
        std::cout << DescribeEvent(e, part_chains, part_targets) << std::endl;
        part_chains = part_targets = 0;
      } else {
        std::cout << DescribeEvent(e) << std::endl;
      }
      if (partial) continue;  // resuming after a part would skip the rest of the state
      if (e.sequence() > 0) req.set_after_sequence(e.sequence());
      if (max_events > 0 && ++printed >= max_events) {
        ctx->TryCancel();
        return kExitOk;
      }
    }
    const grpc::Status s = reader->Finish();
    // Refused, or never reached at all (a wrong address): exit; a stream that
    // worked and dropped is resumed.
    if ((!Unreachable(s) && !got_any) || !ever_connected) return ExitFor(s);
    std::fprintf(stderr, "failoverctl: watch interrupted (%s); resuming after sequence %llu\n",
                 s.error_message().c_str(), static_cast<unsigned long long>(req.after_sequence()));
    std::this_thread::sleep_for(std::chrono::milliseconds(static_cast<int64_t>(backoff * 1000)));
    backoff = std::min(backoff * 2, 5.0);
  }
}

int Pick(Ctl& ctl, const std::string& chain, uint64_t body_bytes, const std::vector<std::string>& exclude,
         const std::string& session) {
  v1::PickTargetRequest req;
  req.set_chain(chain);
  req.set_body_bytes(body_bytes);
  for (const auto& t : exclude) req.add_exclude_targets(t);
  req.set_session_key(session);
  v1::PickTargetResponse resp;
  const grpc::Status s = ctl.decide->PickTarget(ctl.Ctx(), req, &resp);
  if (!s.ok()) return ExitFor(s);
  if (ctl.PrintStructured(resp)) return kExitOk;
  std::cout << "decision " << resp.decision_id() << "\nchain state " << State(resp.chain_state()) << ", active "
            << resp.active_target() << "\n";
  std::vector<std::vector<std::string>> rows;
  for (int i = 0; i < resp.attempts_size(); ++i) {
    const auto& a = resp.attempts(i);
    rows.push_back({std::to_string(i + 1), a.target(), a.upstream_model(), Health(a.health())});
  }
  std::cout << Table({"#", "TARGET", "UPSTREAM MODEL", "HEALTH"}, rows);
  return kExitOk;
}

struct ReportFlags {
  std::string decision, chain, target, message, error_code, transport, phase = "before_response", body;
  std::string latency;  // "850ms"
  std::vector<std::string> headers;  // "Name: value"
  uint32_t attempt = 1, http_status = 0;
  int grpc_code = 0;
  double retry_after = 0;
  bool success = false;
};

int Report(Ctl& ctl, const ReportFlags& f) {
  v1::ReportOutcomeRequest req;
  req.set_decision_id(f.decision);
  req.set_chain(f.chain);
  req.set_target(f.target);
  req.set_attempt(f.attempt);
  if (!f.latency.empty()) {
    absl::Duration latency;
    if (!absl::ParseDuration(f.latency, &latency) || latency < absl::ZeroDuration() ||
        latency == absl::InfiniteDuration()) {
      return Usage(absl::StrCat("--latency: expected a duration such as \"850ms\", got \"", f.latency, "\""));
    }
    req.mutable_latency()->set_seconds(absl::IDivDuration(latency, absl::Seconds(1), &latency));
    req.mutable_latency()->set_nanos(static_cast<int32_t>(absl::ToInt64Nanoseconds(latency)));
  }
  if (f.success) {
    req.mutable_success();
  } else {
    v1::Failure* fail = req.mutable_failure();
    if (!f.headers.empty() || !f.body.empty()) {
      // The raw reply, as a caller's helper sends it: failoverd reads it.
      std::vector<std::pair<std::string, std::string>> headers;
      for (const std::string& h : f.headers) {
        const size_t colon = h.find(':');
        if (colon == std::string::npos || colon == 0) {
          return Usage(absl::StrCat("--header: expected \"Name: value\", got \"", h, "\""));
        }
        headers.emplace_back(h.substr(0, colon), std::string(absl::StripAsciiWhitespace(h.substr(colon + 1))));
      }
      *fail = failover::client::FailureFromResponse(f.http_status, headers, f.body);
    }
    fail->set_http_status(f.http_status);
    fail->set_grpc_code(f.grpc_code);
    fail->set_message(f.message);
    fail->set_error_code(f.error_code);
    if (!f.transport.empty()) {
      v1::TransportError t;
      if (!v1::TransportError_Parse("TRANSPORT_ERROR_" + absl::AsciiStrToUpper(f.transport), &t)) {
        return Usage("--transport: expected connect_refused, dns, reset, tls or timeout");
      }
      fail->set_transport_error(t);
    }
    v1::Phase p;
    if (!v1::Phase_Parse("PHASE_" + absl::AsciiStrToUpper(f.phase), &p)) {
      return Usage("--phase: expected before_response, after_first_byte or after_side_effect");
    }
    fail->set_phase(p);
    if (f.retry_after > 0) failover::api::DurationToProto(absl::Seconds(f.retry_after), fail->mutable_retry_after());
  }
  v1::ReportOutcomeResponse resp;
  const grpc::Status s = ctl.decide->ReportOutcome(ctl.Ctx(), req, &resp);
  if (!s.ok()) return ExitFor(s);
  if (ctl.PrintStructured(resp)) return kExitOk;
  std::cout << "verdict " << Lower(v1::Verdict_Name(resp.verdict()), "VERDICT_") << ", reason "
            << Lower(v1::FailureReason_Name(resp.reason()), "FAILURE_REASON_") << "\n";
  if (resp.has_next_attempt()) std::cout << "next " << resp.next_attempt().target() << "\n";
  if (resp.has_retry_delay()) std::cout << "retry after " << resp.retry_delay().seconds() << "." << resp.retry_delay().nanos() / 1000000 << "s\n";
  if (!resp.error().empty()) std::cout << "error " << resp.error() << "\n";
  std::cout << "target " << f.target << " " << Health(resp.target_health()) << "\n";
  return kExitOk;
}

// Edits (insert, delete, replace one letter) from `a` to `b`.
size_t EditDistance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

// When the command line names a command `app` does not have ("gett",
// "failover trigerr"), a message naming the closest one; "" otherwise (CLI11's
// own message says what else is wrong). Walks past flags and their values.
std::string UnknownCommand(CLI::App* app, int argc, char** argv) {
  std::string path = "failoverctl";
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--") return "";
    if (arg.size() > 1 && arg[0] == '-') {
      const CLI::Option* opt = app->get_option_no_throw(arg.substr(0, arg.find('=')));
      if (opt != nullptr && arg.find('=') == std::string::npos && opt->get_type_size_max() > 0) ++i;  // its value
      continue;
    }
    std::vector<CLI::App*> commands = app->get_subcommands([](CLI::App*) { return true; });
    if (commands.empty()) return "";  // a positional argument of the command
    auto named = std::find_if(commands.begin(), commands.end(), [&](CLI::App* c) { return c->check_name(arg); });
    if (named != commands.end()) {
      app = *named;
      path += " " + arg;
      continue;
    }
    std::string best;
    size_t best_distance = std::string::npos;
    for (CLI::App* c : commands) {
      const size_t d = c->get_name().rfind(arg, 0) == 0 ? 0 : EditDistance(arg, c->get_name());
      if (d < best_distance) {
        best = c->get_name();
        best_distance = d;
      }
    }
    std::string message = absl::StrCat(path, ": unknown command \"", arg, "\"");
    if (best_distance <= std::max<size_t>(2, arg.size() / 3)) absl::StrAppend(&message, "; did you mean \"", best, "\"?");
    return absl::StrCat(message, " (", path, " --help lists the commands)");
  }
  return "";
}

// CLI11 shows a command's own flags in its --help; the global ones work there
// too (before or after the command), so each command's help lists them.
void ListGlobalFlags(CLI::App* app, const std::string& globals) {
  for (CLI::App* sub : app->get_subcommands([](CLI::App*) { return true; })) {
    sub->footer(absl::StrCat(sub->get_footer(), sub->get_footer().empty() ? "" : "\n\n", globals));
    ListGlobalFlags(sub, globals);
  }
}

}  // namespace

int main(int argc, char** argv) {
  Ctl ctl;
  if (const char* env = std::getenv("FAILOVERD_ADDR")) ctl.conn.server = env;
  if (const char* env = std::getenv("FAILOVERD_TOKEN")) ctl.conn.token = env;

  CLI::App app{"failoverctl: administer and inspect failoverd.\n"
               "Exit codes: 0 success, 1 failoverd refused or failed, 2 usage error, 3 cannot reach failoverd."};
  app.require_subcommand(1);
  app.footer("Examples:\n  failoverctl status\n  FAILOVERD_ADDR=failoverd:50051 failoverctl get chains -o yaml\n"
             "  failoverctl <command> --help");
  app.set_version_flag("--version",
                       "failoverctl " FAILOVERD_VERSION " (commit " FAILOVERD_COMMIT ", built " FAILOVERD_BUILD_DATE ")",
                       "Print the version, commit and build date, and exit");
  app.fallthrough();
  app.add_option("--server", ctl.conn.server, "failoverd address host:port (env FAILOVERD_ADDR)")->capture_default_str();
  app.add_option("--token", ctl.conn.token, "Bearer token (env FAILOVERD_TOKEN)");
  app.add_option("--tls-ca", ctl.conn.tls_ca, "CA certificate (PEM) to verify failoverd; enables TLS");
  app.add_option("--tls-cert", ctl.conn.tls_cert, "Client certificate (PEM) for mTLS");
  app.add_option("--tls-key", ctl.conn.tls_key, "Client key (PEM) for mTLS");
  app.add_option("--timeout", ctl.conn.timeout_seconds, "Seconds to wait for each call")->capture_default_str();
  app.add_option("-o,--output", ctl.output, "table, json or yaml")
      ->check(CLI::IsMember({"table", "json", "yaml"}))
      ->capture_default_str();

  std::vector<std::string> paths;
  bool dry_run = false;
  CLI::App* apply = app.add_subcommand("apply", "Create or replace the targets and chains declared in YAML files")
                        ->footer("Examples:\n  failoverctl apply -f examples/config/\n  failoverctl apply -f chains.yaml --dry-run\n"
                                 "  failoverctl apply -f targets.yaml -f chains.yaml");
  apply->add_option("-f,--file", paths, "A YAML file or a directory of *.yaml files; repeatable (read as one config)")
      ->required();
  apply->add_flag("--dry-run", dry_run, "Show what would change; save nothing");

  std::vector<std::string> validate_paths;
  CLI::App* validate =
      app.add_subcommand("validate", "Check YAML config files offline, as failoverd would apply them (no server)")
          ->footer("Examples:\n  failoverctl validate -f examples/config/\n  failoverctl validate -f chains.yaml");
  validate->add_option("-f,--file", validate_paths, "A YAML file or a directory of *.yaml files; repeatable")
      ->required();

  std::string what, name;
  CLI::App* get = app.add_subcommand("get", "Show chains or targets with their live state")
                      ->footer("Examples:\n  failoverctl get chains\n  failoverctl get chain assistant-llm -o yaml\n  failoverctl get targets -o json");
  get->add_option("kind", what, "chains or targets")->required();
  get->add_option("name", name, "One object's name");

  CLI::App* del = app.add_subcommand("delete", "Delete a chain or a target")
                      ->footer("Examples:\n  failoverctl delete chain old-chain\n  failoverctl delete target old-model");
  del->add_option("kind", what, "chain or target")->required();
  del->add_option("name", name, "Name")->required();

  std::string chain, target, reason;
  CLI::App* pin = app.add_subcommand("pin", "Force a chain onto one of its targets (health checks go on)")
                      ->footer("Example:\n  failoverctl pin assistant-llm gemma-local");
  pin->add_option("chain", chain)->required();
  pin->add_option("target", target)->required();
  CLI::App* unpin = app.add_subcommand("unpin", "Release a pinned chain")->footer("Example:\n  failoverctl unpin assistant-llm");
  unpin->add_option("chain", chain)->required();

  CLI::App* failover = app.add_subcommand("failover", "Manual failover of a target: trigger or cancel")
                           ->footer("Examples:\n  failoverctl failover trigger llm-a --reason \"provider maintenance\"\n"
                                    "  failoverctl failover cancel llm-a");
  failover->require_subcommand(1);
  CLI::App* trigger = failover->add_subcommand("trigger", "Take a target out until cancelled")
                          ->footer("Example:\n  failoverctl failover trigger llm-a --reason \"provider maintenance\"");
  trigger->add_option("target", target)->required();
  trigger->add_option("--reason", reason, "Why (recorded in the event)");
  CLI::App* cancel = failover->add_subcommand("cancel", "Put a manually failed-over target back")
                         ->footer("Example:\n  failoverctl failover cancel llm-a");
  cancel->add_option("target", target)->required();

  CLI::App* enable = app.add_subcommand("enable", "Enable a target")->footer("Example:\n  failoverctl enable gemma-local");
  enable->add_option("target", target)->required();
  CLI::App* disable = app.add_subcommand("disable", "Disable a target (skipped, never counted)")
                          ->footer("Example:\n  failoverctl disable gemma-local");
  disable->add_option("target", target)->required();

  CLI::App* probe = app.add_subcommand("probe", "Health checks")
                        ->footer("Examples:\n  failoverctl probe now argus-llm\n  failoverctl probe now");
  probe->require_subcommand(1);
  CLI::App* probe_now = probe->add_subcommand("now", "Make health checks due at once (one target or all)")
                            ->footer("Examples:\n  failoverctl probe now\n  failoverctl probe now argus-llm");
  probe_now->add_option("target", target);

  uint32_t limit = 20;
  std::vector<std::string> chains, targets;
  CLI::App* events = app.add_subcommand("events", "Recent events, oldest first")
                         ->footer("Examples:\n  failoverctl events\n  failoverctl events --limit 100 --chain assistant-llm");
  events->add_option("--limit", limit, "How many")->capture_default_str();
  events->add_option("--chain", chains, "Only this chain (and its targets); repeatable");
  events->add_option("--target", targets, "Only this target; repeatable");
  std::string since;
  std::vector<std::string> kinds;
  events->add_option("--since", since, "Only events this recent: a duration such as 30m or 2h");
  events->add_option("--kind", kinds, "Only this kind: chain (switches), target (health), config; repeatable");

  std::string trace_chain, trace_since;
  uint32_t trace_limit = 1000;
  CLI::App* trace = app.add_subcommand("trace", "Counted outcomes from failoverd's outcome trace, oldest first")
                        ->footer("Examples:\n  failoverctl trace --since 10m\n  failoverctl trace --chain assistant-llm -o json");
  trace->add_option("--chain", trace_chain, "Only this chain's outcomes");
  trace->add_option("--since", trace_since, "Only outcomes this recent: a duration such as 30m or 2h");
  trace->add_option("--limit", trace_limit, "At most this many, the oldest first")
      ->check(CLI::Range(1u, 1000000u))
      ->capture_default_str();

  SimulateFlags sim;
  CLI::App* simulate =
      app.add_subcommand("simulate", "Replay the outcome trace against a candidate policy, beside the live one")
          ->footer("Examples:\n  failoverctl simulate --chain assistant-llm --policy rate.yaml --since 1h\n"
                   "  failoverctl simulate --chain assistant-llm --policy rate.yaml --from 2026-12-04T09:00:00Z "
                   "--to 2026-12-04T10:00:00Z -o json");
  simulate->add_option("--chain", sim.chain, "The chain to replay")->required();
  simulate->add_option("--policy", sim.policy_file,
                       "YAML file with the candidate policy (what a chain's policy: holds)")->required();
  simulate->add_option("--since", sim.since, "Replay the last this long: a duration such as 30m (default 1h)");
  simulate->add_option("--from", sim.from, "Start of the window (RFC 3339)");
  simulate->add_option("--to", sim.to, "End of the window (RFC 3339; default now)");
  simulate->add_option("--flap-window", sim.flap_window,
                       "Leaving a target this soon after switching to it is a flap (default: the live recovery.min_dwell)");

  int64_t max_events = 0;
  int64_t after = -1;
  CLI::App* watch = app.add_subcommand("watch", "Follow events live until interrupted; resumes after a dropped connection")
                        ->footer("Examples:\n  failoverctl watch\n  failoverctl watch --chain assistant-llm -o json");
  watch->add_option("--chain", chains, "Only this chain (and its targets); repeatable");
  watch->add_option("--target", targets, "Only this target; repeatable");
  watch->add_option("--max-events", max_events, "Exit after this many events (0 = never)");
  watch->add_option("--after", after, "Start after this sequence (replay) instead of a snapshot");
  watch->add_option("--kind", kinds, "Only this kind: chain (switches), target (health), config; repeatable");
  bool watch_shadow = false;
  watch->add_flag("--shadow", watch_shadow,
                  "Also what the chains' shadow policies would have done, marked \"shadow NAME\" (live only)");

  bool status_watch = false;
  CLI::App* status = app.add_subcommand("status", "Every chain and target at a glance")
                         ->footer("Examples:\n  failoverctl status\n  failoverctl status --watch");
  status->add_flag("--watch", status_watch, "Redraw on every change");

  uint64_t body_bytes = 0;
  std::vector<std::string> exclude;
  std::string session;
  CLI::App* pick = app.add_subcommand("pick", "Ask for a plan, as a caller would (debugging)")
                       ->footer("Example:\n  failoverctl pick assistant-llm");
  pick->add_option("chain", chain)->required();
  pick->add_option("--body-bytes", body_bytes, "Request size");
  pick->add_option("--exclude", exclude, "Targets already tried; repeatable");
  pick->add_option("--session", session, "Session key (round_robin stickiness)");

  ReportFlags rf;
  CLI::App* report = app.add_subcommand("report", "Report an attempt's outcome, as a caller would (debugging)")
                         ->footer("Examples:\n  failoverctl report --decision D --target argus-llm --http-status 503 --message overloaded\n"
                                  "  failoverctl report --chain assistant-llm --target argus-llm --success\n"
                                  "  failoverctl report --chain chat --target openai/gpt-4o --status 429 \\\n"
                                  "    --header 'x-ratelimit-reset-requests: 20s' \\\n"
                                  "    --body '{\"error\":{\"code\":\"insufficient_quota\",\"message\":\"You exceeded your current quota\"}}'");
  report->add_option("--decision", rf.decision, "Decision id from pick");
  report->add_option("--chain", rf.chain, "Chain (when there is no decision id)");
  report->add_option("--target", rf.target, "Target that was tried")->required();
  report->add_option("--attempt", rf.attempt, "Attempt number")->capture_default_str();
  report->add_flag("--success", rf.success, "The attempt succeeded");
  report->add_option("--http-status,--status", rf.http_status, "HTTP status of the failure");
  report->add_option("--grpc-code", rf.grpc_code, "gRPC code of the failure (1..16)");
  report->add_option("--transport", rf.transport, "connect_refused, dns, reset, tls or timeout");
  report->add_option("--message", rf.message, "Upstream error message");
  report->add_option("--latency", rf.latency, "How long the attempt took, as a duration (\"850ms\")");
  report->add_option("--error-code", rf.error_code, "Upstream error code");
  report->add_option("--retry-after", rf.retry_after, "Seconds from Retry-After");
  report->add_option("--phase", rf.phase, "before_response, after_first_byte or after_side_effect")->capture_default_str();
  report->add_option("--header", rf.headers, "A header of the upstream's reply, \"Name: value\" (repeat it)");
  report->add_option("--body", rf.body, "The upstream's reply body, as received (failoverd reads its error)");

  failover::client::ProbeAgentOptions agent;
  CLI::App* probe_agent =
      app.add_subcommand("probe-agent", "Run health checks for OpenAI-compatible upstreams until interrupted")
          ->footer("Uses each target's labels: base_url (required), api_key_env (name of an env variable holding the\n"
                   "API key), header.NAME (extra headers). Several agents may run at once.\n"
                   "Example:\n  OPENAI_KEY=... failoverctl probe-agent --id agent-1");
  probe_agent->add_option("--id", agent.id, "Prober id, shown in failoverd's logs")->capture_default_str();
  probe_agent->add_option("--max-tasks", agent.max_tasks, "Checks run at once")->capture_default_str();
  probe_agent->add_option("--max-wait", agent.max_wait_seconds, "Longest pause between Probe calls, seconds")
      ->capture_default_str();

  CLI::App* health = app.add_subcommand("health", "Check that failoverd is serving (gRPC health)")
                         ->footer("Example:\n  failoverctl health && echo ready   # exit 0 SERVING, 1 NOT_SERVING, 3 "
                                  "unreachable");

  std::string globals = "Global flags (before or after the command):";
  for (const CLI::Option* opt : app.get_options()) {
    const std::string names = opt->get_name(false, true);
    if (names.find("--help") != std::string::npos || names.find("--version") != std::string::npos) continue;
    absl::StrAppend(&globals, "\n  ", names, std::string(names.size() < 14 ? 14 - names.size() : 1, ' '),
                    opt->get_description());
  }
  ListGlobalFlags(&app, globals);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (const std::string unknown = UnknownCommand(&app, argc, argv); !unknown.empty() && e.get_exit_code() != 0) {
      std::fprintf(stderr, "%s\n", unknown.c_str());
      return kExitUsage;
    }
    const int code = app.exit(e);
    return code == 0 ? kExitOk : kExitUsage;
  }

  if (*validate) return Validate(validate_paths);

  // gRPC's own log lines ("E1203 ... Handshake failed") would only repeat,
  // less clearly, what the error and its hint say.
  gpr_set_log_function([](gpr_log_func_args*) {});
  g_server = ctl.conn.server;
  g_tls = !ctl.conn.tls_ca.empty() || !ctl.conn.tls_cert.empty() || !ctl.conn.tls_key.empty();
  auto channel = failover::client::OpenChannel(ctl.conn);
  if (!channel.ok()) return Usage(std::string(channel.status().message()));
  ctl.channel = *channel;
  ctl.admin = v1::AdminService::NewStub(ctl.channel);
  ctl.decide = v1::DecisionService::NewStub(ctl.channel);

  if (*apply) return Apply(ctl, paths, dry_run);
  if (*probe_agent) return failover::client::RunProbeAgent(ctl.decide.get(), ctl.conn, agent);
  if (*get) return Get(ctl, what, name);
  if (*status) return Status(ctl, status_watch);
  if (*events) return Events(ctl, limit, chains, targets, since, kinds);
  if (*trace) return Trace(ctl, trace_chain, trace_since, trace_limit);
  if (*simulate) return Simulate(ctl, sim);
  if (*watch) return Watch(ctl, chains, targets, max_events, after, kinds, watch_shadow);
  if (*pick) return Pick(ctl, chain, body_bytes, exclude, session);
  if (*report) {
    if (!rf.success && rf.http_status == 0 && rf.grpc_code == 0 && rf.transport.empty() && rf.message.empty() &&
        rf.body.empty()) {
      return Usage("report: give --success or the facts of the failure (--status, --header, --body, or --grpc-code, "
                   "--transport, --message)");
    }
    return Report(ctl, rf);
  }
  if (*del) {
    v1::DeleteResponse resp;
    grpc::Status s;
    if (what == "chain" || what == "chains") {
      v1::DeleteChainRequest req;
      req.set_name(name);
      s = ctl.admin->DeleteChain(ctl.Ctx(), req, &resp);
    } else if (what == "target" || what == "targets") {
      v1::DeleteTargetRequest req;
      req.set_name(name);
      s = ctl.admin->DeleteTarget(ctl.Ctx(), req, &resp);
    } else {
      return Usage(absl::StrCat("delete: expected chain or target, got \"", what, "\""));
    }
    if (!s.ok()) return ExitFor(s);
    std::cout << what << " " << name << " deleted (generation " << resp.generation() << ")\n";
    return kExitOk;
  }
  if (*pin || *unpin) {
    v1::ChainView view;
    grpc::Status s;
    if (*pin) {
      v1::PinChainRequest req;
      req.set_chain(chain);
      req.set_target(target);
      s = ctl.admin->PinChain(ctl.Ctx(), req, &view);
    } else {
      v1::UnpinChainRequest req;
      req.set_chain(chain);
      s = ctl.admin->UnpinChain(ctl.Ctx(), req, &view);
    }
    if (!s.ok()) return ExitFor(s);
    if (!ctl.PrintStructured(view)) std::cout << ChainsTable({view.status()});
    return kExitOk;
  }
  if (*trigger || *cancel || *enable || *disable) {
    v1::TargetView view;
    grpc::Status s;
    if (*trigger) {
      v1::TriggerFailoverRequest req;
      req.set_target(target);
      req.set_reason(reason);
      s = ctl.admin->TriggerFailover(ctl.Ctx(), req, &view);
    } else if (*cancel) {
      v1::CancelFailoverRequest req;
      req.set_target(target);
      s = ctl.admin->CancelFailover(ctl.Ctx(), req, &view);
    } else {
      v1::SetTargetEnabledRequest req;
      req.set_target(target);
      req.set_enabled(enable->parsed());
      s = ctl.admin->SetTargetEnabled(ctl.Ctx(), req, &view);
    }
    if (!s.ok()) return ExitFor(s);
    if (!ctl.PrintStructured(view)) std::cout << TargetsTable({view.status()});
    return kExitOk;
  }
  if (*probe_now) {
    v1::ProbeNowRequest req;
    req.set_target(target);
    v1::ProbeNowResponse resp;
    const grpc::Status s = ctl.admin->ProbeNow(ctl.Ctx(), req, &resp);
    if (!s.ok()) return ExitFor(s);
    if (!ctl.PrintStructured(resp)) std::cout << "probes due now: " << absl::StrJoin(resp.targets(), ", ") << "\n";
    return kExitOk;
  }
  if (*health) {
    auto stub = grpc::health::v1::Health::NewStub(ctl.channel);
    grpc::health::v1::HealthCheckResponse resp;
    const grpc::Status s = stub->Check(ctl.Ctx(), grpc::health::v1::HealthCheckRequest(), &resp);
    if (!s.ok()) return ExitFor(s);
    const bool serving = resp.status() == grpc::health::v1::HealthCheckResponse::SERVING;
    std::printf("%s\n", serving ? "SERVING" : "NOT_SERVING");
    return serving ? kExitOk : kExitRefused;
  }
  return kExitUsage;
}
