// Cluster faults searched from seeds (DESIGN 3.14, #30): real replicas (the
// replica, its engine, committer and change feed, wired as server/daemon.cc
// wires them) over the in-memory etcd, each with a data dir in memory. A seed
// draws a schedule of admin changes on the leader, reports relayed to the
// leader by their ids (answers lost, so they are sent again, to whichever
// replica leads by then; some sent twice at once), and faults: a replica cut
// off from etcd, answers lost, garbage written at the next log entry, a leader
// key written over on no lease or by an impostor on a lease of its own, etcd
// compacted, a data dir that refuses writes, a replica paused (its threads
// get no turn for up to three leases), a replica restarted from its data dir.
// After every step, and once the faults heal:
//   3 one history: each replica publishes event sequences that only rise, and
//     every replica names the same event with the same sequence;
//   4 no replica leads on a key that is not its own: while an impostor holds
//     the leader key (on a lease of its own), every replica comes to follow;
//     and no report is counted twice: no two Changes name the same report;
//   7 the cluster agrees: once healed and quiet there is one leader, every
//     replica has applied the whole log, and every replica's state is the
//     leader's, field for field; and the cluster still takes a change.
// The replicas' threads and this one take turns, one at a time, on a
// simulated clock (tests/sim/sim_pacer.h): the seed draws the schedule and
// the interleaving both, so a failure replays from its seed, and leases of a
// second cost no second of real time. --replay runs each seed twice and fails
// when the second run takes different turns.
//
//   cluster_sim --seed N [--steps K] [-v]
//   cluster_sim --seeds A-B [--steps K] [--replay]
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/clock.h"
#include "server/cluster/log_entry.h"
#include "server/cluster/replica.h"
#include "server/committer/committer.h"
#include "server/engine/engine.h"
#include "server/log/log.h"
#include "tests/sim/mem_etcd.h"
#include "tests/sim/sim_replica.h"
#include "tests/sim/rng.h"

namespace failover::sim {
namespace {

class ClusterSim {
 public:
  ClusterSim(uint64_t seed, int steps, bool verbose)
      : seed_(seed), steps_(steps), verbose_(verbose), rng_(seed), pacer_(&clock_, rng_.Next()),
        etcd_(&clock_, &pacer_), keys_(kPrefix), admin_(etcd_.Connect()) {
    pacer_.Adopt();  // this thread takes turns with the replicas'
    const int n = 2 + static_cast<int>(rng_.Below(4));  // two to five replicas
    for (int i = 0; i < n; ++i) {
      replicas_.push_back(std::make_unique<SimReplica>(i, &etcd_, &clock_, &history_, &pacer_));
    }
  }

  // Simulated time since the start, turns the replicas' threads and this
  // one took, and a digest of them: equal for two runs of one seed.
  absl::Duration simulated() const { return clock_.Now() - started_; }
  uint64_t turns() const { return pacer_.turns(); }
  uint64_t digest() const { return pacer_.digest(); }

  // The failure, or "" when every invariant held.
  std::string Run() {
    for (auto& r : replicas_) r->Start();
    if (!AwaitLeader()) return "no leader elected at the start";
    for (step_ = 0; step_ < steps_; ++step_) {
      Step();
      Relay();
      Settle(absl::Milliseconds(150));
      if (std::string e = history_.error(); !e.empty()) return At(e);
      if (!impostor_error_.empty()) return At(impostor_error_);
    }
    return Heal();
  }

 private:
  std::string At(const std::string& what) const {
    return absl::StrCat("seed ", seed_, ", step ", step_, ": ", what);
  }
  void Say(const std::string& what) const {
    if (verbose_) std::fprintf(stderr, "[%d] %s\n", step_, what.c_str());
  }

  // The one replica that says it leads (null when none or, for the moment a
  // deposed leader takes to notice, two do).
  SimReplica* Leader() {
    SimReplica* leader = nullptr;
    for (auto& r : replicas_) {
      if (!r->leader()) continue;
      if (leader != nullptr) return nullptr;
      leader = r.get();
    }
    return leader;
  }

  bool AwaitLeader(absl::Duration timeout = absl::Seconds(15)) {
    const absl::Time give_up = pacer_.Now() + timeout;
    while (pacer_.Now() < give_up) {
      if (SimReplica* leader = Leader()) {
        if (leader->engine().generation() != 0) return true;
        // The config, once: as the leader's config reloader would. (Until
        // acknowledged it may be dropped with a leader that loses its term.)
        Committer::Scope settled(leader->committer());
        if (leader->engine().Apply(Config(), ApplyOptions(), clock_.Now()).ok() && settled.Await().ok()) return true;
      }
      pacer_.Sleep(absl::Milliseconds(10));
    }
    return false;
  }

  // The highest log index in etcd (0: none).
  uint64_t LastLogIndex() {
    etcdpb::RangeRequest log;
    log.set_key(keys_.LogPrefix());
    log.set_range_end(keys_.LogEnd());
    log.set_keys_only(true);
    absl::StatusOr<etcdpb::RangeResponse> read = admin_->Range(log);
    if (!read.ok() || read->kvs_size() == 0) return 0;
    return keys_.IndexOf(read->kvs(read->kvs_size() - 1).key()).value_or(0);
  }

  // Waits (up to `timeout`) until every running replica that reaches etcd
  // has applied the whole log: the pace of the schedule.
  void Settle(absl::Duration timeout) {
    const absl::Time give_up = pacer_.Now() + timeout;
    while (pacer_.Now() < give_up) {
      const uint64_t last = LastLogIndex();
      bool settled = true;
      for (size_t i = 0; i < replicas_.size(); ++i) {
        if (replicas_[i]->running() && !cut_[i] && replicas_[i]->applied() < last) settled = false;
      }
      if (settled) return;
      pacer_.Sleep(absl::Milliseconds(5));
    }
  }

  void Step() {
    const size_t kind = rng_.Below(100);
    SimReplica& any = *replicas_[rng_.Below(replicas_.size())];
    const size_t i = static_cast<size_t>(any.id());
    if (kind < 50) return Admin();
    if (kind < 55) {
      // A process stopped for a while (SIGSTOP, a long pause): the leader,
      // more often than not, whose lease may run out meanwhile.
      SimReplica* leader = Leader();
      SimReplica& paused = leader != nullptr && rng_.Chance(0.6) ? *leader : any;
      const absl::Duration d = absl::Milliseconds(100 + static_cast<int64_t>(rng_.Below(2900)));
      Say(absl::StrCat("replica ", paused.id(), " paused for ", absl::FormatDuration(d)));
      return pacer_.Pause(paused.id(), d);
    }
    if (kind < 63) {
      if (!any.running()) return;
      cut_[i] = !cut_[i];
      Say(absl::StrCat(cut_[i] ? "cut off " : "reconnect ", "replica ", i));
      return any.client()->SetReachable(!cut_[i]);
    }
    if (kind < 70) {
      if (!any.running()) return;
      Say(absl::StrCat("replica ", i, " loses its next answers"));
      return any.client()->LoseAnswers(1 + static_cast<int>(rng_.Below(2)));
    }
    if (kind < 74) {
      const uint64_t next = LastLogIndex() + 1;
      Say(absl::StrCat("garbage at log entry ", next));
      // Only where no leader wrote yet: garbage over an applied entry loses
      // what followers need, which they must report, not get past.
      etcdpb::TxnRequest txn;
      etcdpb::Compare* absent = txn.add_compare();
      absent->set_key(keys_.Log(next));
      absent->set_target(etcdpb::Compare::CREATE);
      absent->set_result(etcdpb::Compare::EQUAL);
      absent->set_create_revision(0);
      etcdpb::PutRequest* put = txn.add_success()->mutable_request_put();
      put->set_key(keys_.Log(next));
      put->set_value("garbage");
      (void)admin_->Txn(txn);
      return;
    }
    if (kind < 77) {
      // Written over in place: the key keeps its create revision, so only
      // its value and lease say it is no replica's any more.
      const bool impostor = rng_.Chance(0.5);
      Say(impostor ? "the leader key taken by an impostor on a lease of its own" : "the leader key rewritten on no lease");
      etcdpb::PutRequest put;
      put.set_key(keys_.Leader());
      put.set_value("garbage:1");
      int64_t lease = 0;
      if (impostor) {
        absl::StatusOr<int64_t> granted = admin_->Grant(absl::Seconds(60));
        if (!granted.ok()) return;
        lease = *granted;
        put.set_lease(lease);
      }
      (void)admin_->Put(put);
      if (!impostor) return;
      // The impostor holds the key until it goes; meanwhile nobody may lead.
      impostor_error_ = AwaitNoneLeads();
      admin_->Revoke(lease);
      return;
    }
    if (kind < 82) {
      Say("etcd compacted");
      (void)etcd_.Compact(etcd_.revision());
      return;
    }
    if (kind < 90) {
      refusing_[i] = !refusing_[i];
      Say(absl::StrCat("replica ", i, "'s data dir ", refusing_[i] ? "refuses writes" : "takes writes again"));
      return any.SetDiskRefusing(refusing_[i]);
    }
    if (!any.running()) return;
    Say(absl::StrCat("replica ", i, " restarts"));
    any.Stop();
    cut_[i] = false;
    any.Start();
  }

  // An admin change on the leader, as its AdminService would make it.
  void Admin() {
    SimReplica* leader = Leader();
    if (leader == nullptr) return;
    Engine& engine = leader->engine();
    const absl::Time now = clock_.Now();
    const std::string& chain = rng_.Pick(kChains);
    const std::string& target = rng_.Pick(kTargets);
    switch (rng_.Below(5)) {
      case 0: (void)engine.Pin(chain, chain == "c0" ? "t1" : "t3", now, "sim"); break;
      case 1: (void)engine.Unpin(chain, now, "sim"); break;
      case 2: (void)engine.TriggerManualFailover(target, "sim", now, "sim"); break;
      case 3: (void)engine.CancelManualFailover(target, now, "sim"); break;
      default: (void)engine.SetTargetEnabled(target, rng_.Chance(0.5), now, "sim"); break;
    }
  }

  // Traffic, beside every step: a follower judged an outcome and relays it,
  // and relayed reports go to the leader of the moment: answered, or their
  // answer lost (so they stay, to be sent again), or sent twice at once.
  // Failures trip targets and successes bring them back, so a report counted
  // again shows as a second Change that names it.
  void Relay() {
    if (rng_.Chance(0.7) || relays_.empty()) {
      RelayedReport r;
      r.target = rng_.Pick(kTargets);
      r.chain = r.target == "t0" ? "c0" : "c1";
      r.failed = rng_.Chance(0.4);
      r.id = CountedReport{"follower", ++relayed_};
      relays_.push_back(r);
      if (relays_.size() > 32) relays_.pop_front();  // the relay's bound: the oldest is given up
    }
    SimReplica* leader = Leader();
    for (int n = 1 + static_cast<int>(rng_.Below(3)); leader != nullptr && n > 0 && !relays_.empty(); --n) {
      const size_t pick = rng_.Below(relays_.size());
      const RelayedReport r = relays_[pick];
      const int sends = rng_.Chance(0.2) ? 2 : 1;
      bool answered = false;
      for (int i = 0; i < sends; ++i) answered = leader->Count(r).ok() || answered;
      const bool lost = rng_.Chance(0.3);
      Say(absl::StrCat("report ", r.id.sequence, " (", r.failed ? "failure" : "success", " on ", r.target,
                       ") to replica ", leader->id(), sends == 2 ? " twice" : "", answered ? "" : ", refused",
                       answered && lost ? ", its answer lost" : ""));
      if (answered && !lost) relays_.erase(relays_.begin() + static_cast<std::ptrdiff_t>(pick));
    }
  }

  // While an impostor's key (on a live lease) is the leader key, no replica
  // may go on leading: its writes are fenced on its own lease, and it must
  // notice and step down, not stay in office beside the impostor. "" once
  // none leads.
  std::string AwaitNoneLeads() {
    const absl::Time give_up = pacer_.Now() + absl::Seconds(10);
    for (;;) {
      std::string leading;
      for (auto& r : replicas_) {
        if (r->leader()) absl::StrAppend(&leading, " ", r->id());
      }
      if (leading.empty()) return "";
      if (pacer_.Now() >= give_up) {
        return absl::StrCat("replica(s)", leading, " still lead 10 s after an impostor took the leader key", Replicas());
      }
      pacer_.Sleep(absl::Milliseconds(10));
    }
  }

  // Every fault healed, then the cluster must agree and still take a change.
  std::string Heal() {
    Say("healing every fault");
    for (size_t i = 0; i < replicas_.size(); ++i) {
      if (!replicas_[i]->running()) replicas_[i]->Start();
      replicas_[i]->client()->SetReachable(true);
      replicas_[i]->client()->LoseAnswers(0);
      replicas_[i]->SetDiskRefusing(false);
      cut_[i] = refusing_[i] = false;
    }
    if (!AwaitLeader(absl::Seconds(30))) return At("no leader within 30 s of healing");
    if (std::string e = AwaitAgreement(); !e.empty()) return At(e);
    // Still deciding: a change the leader acknowledges is in the log, and on
    // every replica. (A leader deposed just now refuses it: ask the next.)
    const absl::Time give_up = pacer_.Now() + absl::Seconds(30);
    std::string refused;
    bool enable = false;
    for (bool acknowledged = false; !acknowledged;) {
      if (pacer_.Now() > give_up) {
        return At(absl::StrCat("no leader acknowledged a change within 30 s of healing (", refused, ")", Replicas()));
      }
      SimReplica* leader = Leader();
      if (leader == nullptr) {
        pacer_.Sleep(absl::Milliseconds(10));
        continue;
      }
      const uint64_t before = LastLogIndex();
      Committer::Scope settled(leader->committer());
      enable = !enable;  // one of the two is a change
      const absl::Status made = leader->engine().SetTargetEnabled("t3", enable, clock_.Now(), "sim").status();
      if (!made.ok()) refused = std::string(made.message());
      const absl::Status awaited = settled.Await();
      acknowledged = made.ok() && settled.changed() && awaited.ok();
      if (acknowledged && LastLogIndex() <= before) return At("an acknowledged change is not in the log");
      if (!acknowledged) {
        if (made.ok() && settled.changed()) {
          Say(absl::StrCat("not acknowledged at replica ", leader->id(), ": ", awaited.ToString()));
        }
        pacer_.Sleep(absl::Milliseconds(10));
      }
    }
    if (std::string e = AwaitAgreement(); !e.empty()) return At(e);
    return history_.error().empty() ? "" : At(history_.error());
  }

  // Where each replica stands, for a failure's message.
  std::string Replicas() {
    std::string out;
    for (auto& r : replicas_) {
      absl::StrAppend(&out, "\n  replica ", r->id(), ": ", r->leader() ? "leader" : "follower", ", applied ",
                      r->applied(), ", ", r->engine().accepting_changes() ? "accepting changes" : "refusing changes");
    }
    return out;
  }

  std::string AwaitAgreement() {
    const absl::Time give_up = pacer_.Now() + absl::Seconds(30);
    std::string why;
    while (pacer_.Now() < give_up) {
      why = Disagreement();
      if (why.empty()) return "";
      pacer_.Sleep(absl::Milliseconds(20));
    }
    return absl::StrCat("no agreement within 30 s of healing: ", why, Replicas());
  }

  std::string Disagreement() {
    SimReplica* leader = Leader();
    if (leader == nullptr) return "no leader";
    const uint64_t last = LastLogIndex();
    const std::string state = leader->State();
    for (auto& r : replicas_) {
      if (r->applied() != last) return absl::StrCat("replica ", r->id(), " applied ", r->applied(), " of ", last);
      if (r->State() != state) return absl::StrCat("replica ", r->id(), "'s state differs from the leader's");
    }
    return "";
  }

  const uint64_t seed_;
  const int steps_;
  const bool verbose_;
  Rng rng_;
  SimulatedClock clock_;
  SimPacer pacer_;  // before the replicas, whose threads it runs, and after them
  const absl::Time started_ = clock_.Now();
  MemEtcd etcd_;
  const cluster::Keys keys_;
  std::unique_ptr<MemEtcd::Client> admin_;  // an operator's etcdctl
  History history_;
  std::vector<std::unique_ptr<SimReplica>> replicas_;
  std::map<size_t, bool> cut_;
  std::map<size_t, bool> refusing_;
  std::string impostor_error_;  // a replica that led beside an impostor
  std::deque<RelayedReport> relays_;  // relayed and not answered yet
  uint64_t relayed_ = 0;
  int step_ = 0;
};

// One seed's run: its failure ("" when it held), the simulated time it took,
// and its turns and their digest.
struct SeedRun {
  std::string error;
  absl::Duration simulated;
  uint64_t turns = 0;
  uint64_t digest = 0;
};

SeedRun RunSeed(uint64_t seed, int steps, bool verbose) {
  ClusterSim sim(seed, steps, verbose);
  SeedRun run;
  run.error = sim.Run();
  run.simulated = sim.simulated();
  run.turns = sim.turns();
  run.digest = sim.digest();
  return run;
}

int Main(int argc, char** argv) {
  uint64_t first = 1;
  uint64_t last = 1;
  int steps = 40;
  bool verbose = false;
  bool replay = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "-v") {
      verbose = true;
    } else if ((arg == "--seed" || arg == "--seeds") && i + 1 < argc) {
      std::vector<std::string> range = absl::StrSplit(argv[++i], '-');
      if (!absl::SimpleAtoi(range[0], &first) || !absl::SimpleAtoi(range.back(), &last) || last < first) {
        std::fprintf(stderr, "cluster_sim: %s: not a seed or a range A-B\n", argv[i]);
        return 2;
      }
    } else if (arg == "--replay") {
      replay = true;
    } else if (arg == "--steps" && i + 1 < argc) {
      if (!absl::SimpleAtoi(argv[++i], &steps) || steps < 1) {
        std::fprintf(stderr, "cluster_sim: --steps %s: not a positive number\n", argv[i]);
        return 2;
      }
    } else {
      std::fprintf(stderr, "usage: cluster_sim --seed N | --seeds A-B [--steps K] [--replay] [-v]\n");
      return 2;
    }
  }
  // The replicas' own log says what they did: with -v, beside the steps.
  log::Configure(verbose ? log::Level::kInfo : log::Level::kError, false);
  int failed = 0;
  for (uint64_t seed = first; seed <= last; ++seed) {
    const absl::Time start = absl::Now();
    const SeedRun run = RunSeed(seed, steps, verbose);
    std::string error = run.error;
    if (error.empty() && replay) {
      // The same seed again must take the same turns at the same times.
      const SeedRun again = RunSeed(seed, steps, false);
      if (!again.error.empty()) {
        error = absl::StrCat("seed ", seed, " held, and failed when run again: ", again.error);
      } else if (again.turns != run.turns || again.digest != run.digest) {
        error = absl::StrCat("seed ", seed, " ran differently the second time: ", run.turns, " turns (digest ",
                             absl::Hex(run.digest), "), then ", again.turns, " (digest ", absl::Hex(again.digest),
                             ")");
      }
    }
    if (!error.empty()) {
      ++failed;
      std::fprintf(stderr, "cluster_sim: FAILED %s\n  again with: cluster_sim --seed %lu --steps %d -v\n",
                   error.c_str(), static_cast<unsigned long>(seed), steps);
    } else {
      std::fprintf(stderr, "cluster_sim: seed %lu held (%s simulated in %s, %lu turns, digest %016lx)\n",
                   static_cast<unsigned long>(seed), absl::FormatDuration(run.simulated).c_str(),
                   absl::FormatDuration(absl::Now() - start).c_str(), static_cast<unsigned long>(run.turns),
                   static_cast<unsigned long>(run.digest));
    }
  }
  return failed == 0 ? 0 : 1;
}

}  // namespace
}  // namespace failover::sim

int main(int argc, char** argv) { return failover::sim::Main(argc, argv); }
