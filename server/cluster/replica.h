// One failoverd replica of a cluster on etcd (DESIGN 3.12).
//
// etcd holds the Change log under the cluster's prefix. Exactly one replica,
// the leader (it holds <prefix>/leader on its lease), makes Changes: its engine
// accepts them, and each one is written to the log in a transaction that only
// succeeds while the leader key is still the one it created, so a deposed or
// paused leader writes nothing. Every replica applies the log, in order, from
// an etcd watch with Engine::ApplyChange, and stores and publishes those
// Changes as its own committer would: the same state and the same event
// numbers everywhere. Followers answer plans and verdicts themselves, relay
// the outcomes to the leader (which counts them), and pass admin writes and
// probe calls to it.
//
// A leader that loses its lease or a write stops accepting changes; the ones it
// made and could not write are dropped and its engine goes back to the state
// the log adds up to, then follows the new leader.
//
// A replica that cannot apply the next log entry (it does not parse, or the
// engine refuses it) keeps what it applied, says which entry in its status and
// reports itself unfit to serve until it gets past it. A newly elected leader
// stuck that way overwrites the entry with an empty one under its fence, so
// one bad key never stops every election.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/change.h"
#include "common/clock.h"
#include "common/pacer.h"
#include "prometheus/collectable.h"
#include "server/api/change_feed.h"
#include "server/api/leader_link.h"
#include "server/cluster/etcd_client.h"
#include "server/cluster/log_cursor.h"
#include "server/cluster/log_entry.h"
#include "server/engine/rpm_budgets.h"
#include "server/committer/committer.h"
#include "server/engine/engine.h"

namespace failover::cluster {

struct ReplicaOptions {
  EtcdOptions etcd;
  std::string prefix = "/failoverd/default";
  absl::Duration lease = absl::Seconds(5);
  // Calls between replicas: TLS when `peer_ca` or `peer_cert` is set.
  std::string peer_ca;
  std::string peer_cert;
  std::string peer_key;
  // Log entries kept in etcd: every this many the leader writes a snapshot
  // and deletes the entries before the last this many (0: keep every entry).
  uint64_t log_keep = 10000;
  // etcd's --max-request-bytes: log entries go in transactions of up to two
  // thirds of it (a single larger entry alone), snapshot parts of a third.
  size_t max_request_bytes = 1536 << 10;
  // Outcomes waiting for the leader beyond this are dropped, oldest first.
  size_t relay_limit = 100000;
  // What this replica's card under <prefix>/replicas/ says it runs.
  std::string version;
  // Where the replica's threads run, wait and read the time (the cluster
  // simulator's; failoverd passes none).
  Pacer* pacer = nullptr;
};

class Replica final : public api::LeaderLink {
 public:
  // Writes Changes to this replica's own store (RocksDB).
  using LocalWrite = std::function<absl::Status(const std::vector<const Change*>&)>;

  Replica(ReplicaOptions options, std::unique_ptr<Etcd> etcd, Engine* engine, const Clock* clock);
  ~Replica() override;

  // The committer's write step in cluster mode: the leader's new Changes go to
  // the log first (fenced), then everything to `local`.
  [[nodiscard]] absl::Status Write(const std::vector<const Change*>& changes, const LocalWrite& local);
  // Gives a Change the engine made its place in the log (the engine's sink,
  // under its writer lock).
  void Stamp(Change* change);
  // The committer's health callback: whether writes (to etcd, then the data
  // dir) go through.
  void OnWrites(const absl::Status& status);

  // Called with false when this replica gets stuck on a log entry it cannot
  // apply, and with true once it is past it (the daemon's health status).
  // Set before Prepare.
  void SetLogHealthHook(std::function<void(bool applies)> hook) { on_log_health_ = std::move(hook); }
  // Hears of the reports each log entry applied here was counted from (set
  // before Run): they count nothing again if this replica leads next.
  void SetCountedReportsHook(std::function<void(const std::vector<CountedReport>&)> hook) {
    on_counted_reports_ = std::move(hook);
  }
  // Applies the log from `restored_index` (what the data dir holds) as far as
  // etcd has it, waiting up to `catch_up` for etcd: before serving.
  void Prepare(uint64_t restored_index, Committer* committer, api::ChangeFeed* feed, absl::Duration catch_up);
  // Once serving: keeps following the log and campaigns for leadership in
  // the background. `advertise`: how the other replicas reach this one
  // (host:port). `peer_token`: what relayed outcomes carry (a decide token
  // of the tokens file the replicas share). `on_leader` runs each time this
  // replica becomes the leader (it applies the config files).
  void Run(std::string advertise, std::string peer_token, std::function<void()> on_leader);
  // Gives up leadership (so another replica takes over at once) and stops.
  void Stop();

  // LeaderLink
  bool IsLeader() const override { return leader_.load(std::memory_order_acquire); }
  grpc::Status Forward(const std::string& method, const grpc::ServerContextBase& call,
                       const grpc::ByteBuffer& request, grpc::ByteBuffer* response) override;
  void Relay(failover::v1::ReportOutcomeRequest report) override;
  void RelayAndWait(failover::v1::ReportOutcomeRequest report, absl::Duration timeout) override;
  uint64_t LogIndex() const override { return cursor_.applied(); }
  void Describe(failover::v1::ClusterStatus* out) const override;
  absl::Status LeaseRpm(const failover::v1::LeaseRpmRequest& request,
                        failover::v1::LeaseRpmResponse* response) override;

  // Waits until this replica has applied log entry `index` (tests, start).
  bool WaitApplied(uint64_t index, absl::Duration timeout);

  // The failover_cluster_* series, read when Prometheus scrapes (so a scrape
  // right after an election already shows the new leader).
  std::vector<prometheus::MetricFamily> CollectMetrics() const;

 private:
  void RunLog();      // applies the log: a range to catch up, then a watch
  void RunSession();  // the lease, the campaign, leadership
  void RunRelay();    // outcomes to the leader
  void RunRpmLeases();  // this replica's shares of the rpm caps, from the leader
  // One batch of RunRelay's to the leader, counted there in order.
  grpc::Status SendToLeader(const std::shared_ptr<grpc::Channel>& channel, const std::string& address,
                            const failover::v1::ReportOutcomesRequest& batch,
                            failover::v1::StreamOutcomesResponse* summary);
  void DropOldestRelayedLocked();  // mu_ held: the queue is full
  void StampRelayed(failover::v1::ReportOutcomeRequest* report);
  // A call to the leader of this replica's own (relayed outcomes, rpm
  // leases): a peer token, marked as passed on, a short deadline.
  void PrepareLeaderCall(grpc::ClientContext* context) const;
  // Applies what one range or watch brought. False: start over (a gap, a
  // conflict, a reset to do).
  bool ApplyEntry(uint64_t index, const mvccpb::KeyValue& kv);
  absl::Status CatchUp(int64_t* revision);
  // The leader key as the log thread read it (null: there is none). A leader
  // whose key is gone or another's steps down. False when the key is vacant.
  bool SawLeaderKey(const mvccpb::KeyValue* kv);
  // The log is stuck at `index` (the value written at etcd `revision`, `why`),
  // or has got past where it was stuck.
  void NoteStuck(uint64_t index, int64_t revision, const absl::Status& why);
  void NoteApplied();
  // Waits for the log up to this term's leader key to be applied.
  bool AwaitLogAt(int64_t term);
  // A new leader stuck on the entry after its applied one: writes an empty
  // entry there under its fence. False when that is not the case or etcd refused.
  bool OverwriteStuckEntry(int64_t term);
  void BecomeLeader(int64_t term);
  void StepDown(const std::string& why);
  // The log thread, after a step-down with unwritten Changes. False when the
  // replica is stopping: it waits for the committer no more and changes nothing.
  bool ResetToLog();
  // The leader: a snapshot of the published state, then the log before it trimmed.
  void Compact();
  // Starts from the snapshot when the log no longer reaches back to this replica.
  absl::Status InstallSnapshot(int64_t revision);
  void NoteEtcd(const absl::Status& status);
  // The session thread: this replica's card on its lease, then every card.
  void ListReplicas();
  void SetLeaderAddress(std::string address);
  std::shared_ptr<grpc::Channel> LeaderChannel(std::string* address) const;
  bool SleepFor(absl::Duration d);  // false: stopping
  absl::Time Now() const { return PacedNow(options_.pacer); }  // for spans and deadlines

  const ReplicaOptions options_;
  const Keys keys_;
  std::unique_ptr<Etcd> etcd_;
  Engine* const engine_;
  const Clock* const clock_;
  Committer* committer_ = nullptr;
  api::ChangeFeed* feed_ = nullptr;
  std::function<void()> on_leader_;
  std::function<void(bool)> on_log_health_;
  std::function<void(const std::vector<CountedReport>&)> on_counted_reports_;
  std::string advertise_;   // set by Run, before the threads
  std::string peer_token_;  // set by Run, before the threads
  std::shared_ptr<grpc::ChannelCredentials> peer_credentials_;

  std::atomic<bool> leader_{false};
  std::atomic<bool> stopping_{false};
  std::atomic<bool> reset_wanted_{false};
  std::atomic<bool> writes_ok_{true};
  std::atomic<int64_t> term_{0};          // the leader key's create revision while leading
  std::atomic<int64_t> left_term_{0};     // the term this replica last stepped down from
  LogCursor cursor_;  // every log index this replica keeps
  std::atomic<int64_t> lease_{0};
  int64_t card_lease_ = 0;  // the session thread's: the lease its card is on
  absl::Time started_ = absl::Now();
  std::atomic<uint64_t> leader_changes_{0};

  mutable std::mutex mu_;  // guards what follows
  PacedCondition changed_{options_.pacer};      // applied entries, leadership, stopping
  PacedCondition relay_ready_{options_.pacer};  // outcomes queued for the leader
  std::string leader_address_;
  std::string etcd_error_;
  std::string log_error_;  // why the log is stuck at cursor_.stuck(), naming it; empty while it applies
  int64_t stuck_revision_ = 0;  // the etcd revision of the value it is stuck on
  absl::Time etcd_answered_ = Now();
  std::shared_ptr<Etcd::Watch> watch_;  // the log thread's, to cancel it
  bool campaign_now_ = false;
  std::vector<ReplicaCard> replicas_;  // every replica's card, as last read
  // An outcome on its way to the leader; `acked` (when set) hears of its arrival.
  struct Acked {
    bool done = false;
    uint64_t log_index = 0;  // the leader's log entry after counting it
  };
  struct Relayed {
    failover::v1::ReportOutcomeRequest report;
    std::shared_ptr<Acked> acked;
  };
  std::deque<Relayed> relay_;
  size_t relay_waited_ = 0;  // entries of relay_ someone waits for
  std::atomic<bool> leader_reachable_{true};
  uint64_t relay_dropped_ = 0;
  // The relay thread's: each relayed report gets an id (this process's sender,
  // a rising sequence) before it is first sent and keeps it when sent again,
  // so a batch whose answer was lost counts once at the leader.
  const std::string relay_sender_;
  uint64_t relay_sequence_ = 0;
  size_t relay_batch_ = 0;  // reports per call: halved when a call runs out of time, grown back after
  // The relay thread's: a leader that answered ReportOutcomes with
  // UNIMPLEMENTED, sent streams until then.
  std::string relay_streams_to_;
  absl::Time relay_streams_until_;
  mutable std::map<std::string, std::shared_ptr<grpc::Channel>> channels_;

  std::mutex rpm_mu_;
  RpmLedger rpm_ledger_;  // guarded by rpm_mu_: the shares this replica granted while leading


  std::thread log_thread_;
  std::thread session_thread_;
  std::thread relay_thread_;
  std::thread rpm_thread_;
};

// Hands a replica's CollectMetrics to the metrics exposer (which keeps only a
// weak pointer: the daemon owns this and outlives the exposer).
class ReplicaCollector final : public prometheus::Collectable {
 public:
  explicit ReplicaCollector(const Replica* replica) : replica_(replica) {}
  std::vector<prometheus::MetricFamily> Collect() const override { return replica_->CollectMetrics(); }

 private:
  const Replica* replica_;
};

}  // namespace failover::cluster
