// One failoverd of a simulated cluster (cluster_sim, and tests that drive
// one replica through a fault): the replica, its engine, committer and change
// feed, wired as server/daemon.cc wires them, over the in-memory etcd, with a
// data dir in memory; and the history every replica's published events are
// held to.
#pragma once

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/clock.h"
#include "proto/state_convert.h"
#include "server/api/change_feed.h"
#include "server/api/report_ids.h"
#include "server/cluster/replica.h"
#include "server/committer/committer.h"
#include "server/engine/engine.h"
#include "storage/state_mirror.h"
#include "tests/sim/mem_etcd.h"
#include "tests/sim/sim_pacer.h"

namespace failover::sim {

inline constexpr char kPrefix[] = "/sim";
inline const std::vector<std::string> kTargets = {"t0", "t1", "t2", "t3"};
inline const std::vector<std::string> kChains = {"c0", "c1"};

// A replica's data dir: what its committer wrote, as storage would read it
// back, and the reports its Changes were counted from (Store::CountedReports).
struct Disk {
  std::mutex mu;
  StateMirror written;
  std::vector<CountedReport> counted;
  bool refusing = false;
};

// A report a follower judged and relays to the leader, by its id.
struct RelayedReport {
  std::string chain;
  std::string target;
  bool failed = true;
  CountedReport id;
};

// What every replica published, to hold them to one history.
class History {
 public:
  // One event `replica` published in its `life`-th process; the first break
  // of the history is kept in error().
  // `log_index`: the entry of the Change that carried it (what a failure
  // prints, with the replica's recent publications, to tell how it came).
  void Published(int replica, uint64_t life, uint64_t log_index, const Event& e) {
    const std::string summary =
        absl::StrCat(static_cast<int>(e.kind), "|", e.target, "|", e.chain, "|", static_cast<int>(e.to_health), "|",
                     e.to_target, "|", static_cast<int>(e.to_chain_state), "|", e.generation, "|", e.object_name);
    std::lock_guard<std::mutex> lock(mu_);
    auto [it, added] = events_.emplace(e.sequence, summary);
    ++counts_[{replica, life}];
    uint64_t& last = last_[{replica, life}];
    std::deque<std::string>& recent = recent_[{replica, life}];
    recent.push_back(absl::StrCat(e.sequence, "@", log_index));
    if (recent.size() > 40) recent.pop_front();
    if (e.sequence <= last && error_.empty()) {
      error_ = absl::StrCat("replica ", replica, " published event ", e.sequence, " (", summary, ") after ", last,
                            it->second == summary ? ": the same event again" : "", "; its life ", life,
                            " published (sequence@log index): ", absl::StrJoin(recent, " "));
    }
    last = e.sequence;
    if (!added && it->second != summary && error_.empty()) {
      error_ = absl::StrCat("event ", e.sequence, " differs between replicas: ", it->second, " and, at replica ",
                            replica, ", ", summary);
    }
  }
  // The reports a published Change was counted from: a report named by two
  // Changes was counted twice (DESIGN 3.14, invariant 4).
  void Counted(int replica, const Change& c) {
    std::lock_guard<std::mutex> lock(mu_);
    for (const CountedReport& id : c.counted_reports) {
      auto [it, added] = counted_.emplace(std::make_pair(id.sender, id.sequence), c.log_index);
      if (!added && it->second != c.log_index && error_.empty()) {
        error_ = absl::StrCat("report ", id.sender, "/", id.sequence, " counted twice: log entries ", it->second,
                              " and ", c.log_index, " (published by replica ", replica, ")");
      }
    }
  }
  std::string error() const {
    std::lock_guard<std::mutex> lock(mu_);
    return error_;
  }
  // How many events `replica` published in its `life`-th process.
  size_t Count(int replica, uint64_t life) const {
    std::lock_guard<std::mutex> lock(mu_);
    const auto it = counts_.find({replica, life});
    return it == counts_.end() ? 0 : it->second;
  }

 private:
  mutable std::mutex mu_;
  std::map<std::pair<int, uint64_t>, uint64_t> last_;  // (replica, its life) -> last sequence published
  std::map<std::pair<int, uint64_t>, std::deque<std::string>> recent_;  // ... -> its last publications
  std::map<std::pair<int, uint64_t>, size_t> counts_;  // ... -> how many it published
  std::map<uint64_t, std::string> events_;
  std::map<std::pair<std::string, uint64_t>, uint64_t> counted_;  // report id -> the log entry counting it
  std::string error_;
};

// One failoverd of the cluster, as server/daemon.cc wires one in cluster mode.
class SimReplica {
 public:
  // `pacer`: the simulation's, which runs this replica's threads by turns
  // (none: they run on their own, on `clock`, which is then the real one).
  SimReplica(int id, MemEtcd* etcd, const Clock* clock, History* history, SimPacer* pacer = nullptr)
      : id_(id), etcd_(etcd), clock_(clock), history_(history), pacer_(pacer) {}
  ~SimReplica() { Stop(); }

  void Start() {
    ++life_;
    RestoredState state;
    // As failoverd restarts: the stored Changes' reports count nothing again.
    report_ids_ = std::make_unique<api::ReportIdWindow>();
    {
      std::lock_guard<std::mutex> lock(disk_.mu);
      state = disk_.written.State();
      report_ids_->Note(disk_.counted);
    }
    engine_ = std::make_unique<Engine>();
    feed_ = std::make_unique<api::ChangeFeed>(state);
    if (pacer_ != nullptr) pacer_->SetGroup(id_);  // the threads of this process
    committer_ = std::make_unique<Committer>(
        [this](const std::vector<const Change*>& changes) {
          return replica_->Write(changes, [this](const std::vector<const Change*>& written) {
            std::lock_guard<std::mutex> lock(disk_.mu);
            if (disk_.refusing) return absl::UnavailableError("cannot write to the data dir: No space left on device");
            for (const Change* c : written) {
              disk_.written.Apply(*c);
              disk_.counted.insert(disk_.counted.end(), c->counted_reports.begin(), c->counted_reports.end());
            }
            return absl::OkStatus();
          });
        },
        [this](const Change& c) {
          feed_->Publish(c);
          for (const Event& e : c.events) history_->Published(id_, life_, c.log_index, e);
          history_->Counted(id_, c);
        },
        [this](const absl::Status& s) { replica_->OnWrites(s); }, absl::Seconds(1), Committer::Mode::kThread,
        pacer_);
    committer_->set_max_batch(64);
    engine_->SetChangeSink([this](Change&& c) {
      replica_->Stamp(&c);
      committer_->Submit(std::move(c));
    });
    std::unique_ptr<MemEtcd::Client> client = etcd_->Connect();
    client_ = client.get();
    cluster::ReplicaOptions options;
    options.prefix = kPrefix;
    options.lease = absl::Seconds(1);
    options.log_keep = 16;  // snapshots and a trimmed log within a seed
    options.pacer = pacer_;
    replica_ = std::make_unique<cluster::Replica>(std::move(options), std::move(client), engine_.get(), clock_);
    engine_->SetAcceptingChanges(false, "this replica is not the cluster's leader yet");
    replica_->SetCountedReportsHook(
        [ids = report_ids_.get()](const std::vector<CountedReport>& counted) { ids->Note(counted); });
    {
      Committer::Scope settled(committer_.get());
      (void)engine_->Restore(state, clock_->Now());
      (void)settled.Await();
    }
    replica_->Prepare(state.log_index, committer_.get(), feed_.get(), absl::Seconds(1));
    replica_->Run(absl::StrCat("replica-", id_, ":1"), "", nullptr);
    if (pacer_ != nullptr) pacer_->SetGroup(-1);
  }

  // `between`, if given, runs once the replica has stopped and before its
  // committer's last try.
  void Stop(const std::function<void()>& between = nullptr) {
    if (!replica_) return;
    replica_->Stop();
    if (between) between();
    committer_->Stop();
    replica_.reset();
    committer_.reset();
    feed_.reset();
    engine_.reset();
    report_ids_.reset();
    client_ = nullptr;
  }

  // A relayed report arriving here, as DecisionService counts one at the
  // leader: an id seen before (here, in the data dir or in the log) decides
  // but counts nothing. OK once what it changed is acknowledged.
  absl::Status Count(const RelayedReport& relayed) {
    ReportRequest report;
    report.chain = relayed.chain;
    report.target = relayed.target;
    report.facts.success = !relayed.failed;
    if (relayed.failed) report.facts.http_status = 503;
    report.id = relayed.id;
    report.count = report_ids_->FirstTime(relayed.id.sender, relayed.id.sequence);
    Committer::Scope settled(committer_.get());
    ReportResult result;
    Events events;
    if (absl::Status s = engine_->Report(report, clock_->Now(), &result, &events); !s.ok()) return s;
    return settled.Await();
  }

  bool running() const { return replica_ != nullptr; }
  bool leader() const { return replica_ && replica_->IsLeader(); }
  uint64_t applied() const { return replica_ ? replica_->LogIndex() : 0; }
  Engine& engine() { return *engine_; }
  Committer* committer() { return committer_.get(); }
  MemEtcd::Client* client() { return client_; }
  void SetDiskRefusing(bool refusing) {
    std::lock_guard<std::mutex> lock(disk_.mu);
    disk_.refusing = refusing;
  }
  // The state its published Changes add up to, in the form a follower is sent.
  std::string State() const {
    std::string out;
    for (const v1::FollowedState& part : api::StateToProto(feed_->State(), 1 << 20)) out += part.SerializeAsString();
    return out;
  }
  int id() const { return id_; }

 private:
  const int id_;
  MemEtcd* const etcd_;
  const Clock* const clock_;
  History* const history_;
  SimPacer* const pacer_;
  uint64_t life_ = 0;
  Disk disk_;
  std::unique_ptr<api::ReportIdWindow> report_ids_;
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<api::ChangeFeed> feed_;
  std::unique_ptr<Committer> committer_;
  std::unique_ptr<cluster::Replica> replica_;
  MemEtcd::Client* client_ = nullptr;
};

// Four targets in two chains. One counted failure takes a target down and one
// success brings it back, so each report that counts makes a Change (and
// names itself in it): a report counted twice shows.
inline ConfigChange Config() {
  ConfigChange c;
  for (const std::string& name : kTargets) {
    TargetConfig t;
    t.name = name;
    c.targets.push_back(t);
  }
  ChainConfig c0;
  c0.name = "c0";
  c0.targets = {"t0", "t1"};
  ChainConfig c1;
  c1.name = "c1";
  c1.targets = {"t2", "t3", "t1"};
  for (ChainConfig* chain : {&c0, &c1}) chain->policy.Mutable().recovery_probes = 1;
  c.chains = {c0, c1};
  return c;
}

}  // namespace failover::sim
