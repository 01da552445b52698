#include "server/cluster/replica.h"

#include <algorithm>
#include <iterator>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "log_entry.pb.h"  // generated from server/cluster/log_entry.proto
#include "common/utf8.h"
#include "server/cluster/replica_internal.h"
#include "server/log/log.h"

namespace failover::cluster {

// --- leadership ---

void Replica::RunSession() {
  const absl::Duration renew_every = options_.lease / 3;
  absl::Time renewed = absl::InfinitePast();
  while (!stopping_.load()) {
    if (lease_.load() == 0) {
      absl::StatusOr<int64_t> granted = etcd_->Grant(options_.lease);
      if (!granted.ok()) {
        NoteEtcd(granted.status());
        if (!SleepFor(absl::Milliseconds(250))) break;
        continue;
      }
      lease_ = *granted;
      renewed = Now();
    }
    if (!IsLeader() && !reset_wanted_.load() && writes_ok_.load()) {
      // Stand: create the leader key, on this replica's lease, if nobody holds it.
      etcdpb::TxnRequest txn;
      RequireKeyCreatedAt(&txn, keys_.Leader(), 0);  // 0: no such key
      etcdpb::PutRequest* put = txn.add_success()->mutable_request_put();
      put->set_key(keys_.Leader());
      put->set_value(advertise_);
      put->set_lease(lease_.load());
      txn.add_failure()->mutable_request_range()->set_key(keys_.Leader());
      absl::StatusOr<etcdpb::TxnResponse> stood = etcd_->Txn(txn);
      if (!stood.ok()) {
        NoteEtcd(stood.status());
      } else if (stood->succeeded()) {
        BecomeLeader(stood->header().revision());
      } else if (!stood->responses().empty() && stood->responses(0).response_range().kvs_size() > 0) {
        const mvccpb::KeyValue& held = stood->responses(0).response_range().kvs(0);
        if (!HeldByALease(held)) {
          // Every replica writes its key on its lease, so etcd drops it when
          // the replica dies; this one would never go. Clear exactly it
          // (unchanged since read) and stand again.
          log::Warn("the leader key is on no lease, so no replica holds it: clearing it and standing",
                    {{"key", keys_.Leader()}, {"value", SanitizeUtf8(held.value(), 64)}});
          etcdpb::TxnRequest clear;
          etcdpb::Compare* same = clear.add_compare();
          same->set_key(keys_.Leader());
          same->set_target(etcdpb::Compare::MOD);
          same->set_result(etcdpb::Compare::EQUAL);
          same->set_mod_revision(held.mod_revision());
          clear.add_success()->mutable_request_delete_range()->set_key(keys_.Leader());
          absl::StatusOr<etcdpb::TxnResponse> cleared = etcd_->Txn(clear);
          if (cleared.ok()) continue;
          NoteEtcd(cleared.status());  // tried again after the wait below
        } else {
          SetLeaderAddress(held.value());
          if (held.lease() == lease_.load() && held.create_revision() != left_term_.load()) {
            // This replica's own campaign: etcd carried it out, its answer
            // was lost and the client asked again elsewhere. Won.
            BecomeLeader(held.create_revision());
          } else if (held.lease() == lease_.load()) {
            // This replica's own key from the term it has left: give it up so
            // a clean election follows.
            etcd_->Revoke(lease_.exchange(0));
            continue;
          }
        }
      }
    }
    ListReplicas();
    {
      std::unique_lock<std::mutex> lock(mu_);
      changed_.WaitFor(lock, renew_every,
                       [&] { return stopping_.load() || (campaign_now_ && !leader_.load()); });
      campaign_now_ = false;
    }
    if (stopping_.load()) break;
    absl::StatusOr<int64_t> ttl = etcd_->KeepAlive(lease_.load());
    if (ttl.ok() && *ttl > 0) {
      renewed = Now();
      NoteEtcd(absl::OkStatus());
    } else if (ttl.ok()) {
      lease_ = 0;
      StepDown("its etcd lease expired");
    } else {
      NoteEtcd(ttl.status());
      if (Now() - renewed >= options_.lease) {
        lease_ = 0;
        StepDown(absl::StrCat("its etcd lease could not be renewed: ", ttl.status().message()));
      }
    }
    Compact();
  }
}

void Replica::ListReplicas() {
  constexpr int kMostListed = 64;
  const int64_t lease = lease_.load();
  if (lease == 0) return;
  if (card_lease_ != lease) {
    etcdpb::PutRequest put;
    put.set_key(keys_.Replica(advertise_));
    put.set_value(EncodeCard({advertise_, options_.version, started_}));
    put.set_lease(lease);
    absl::StatusOr<etcdpb::PutResponse> written = etcd_->Put(put);
    if (!written.ok()) return NoteEtcd(written.status());
    card_lease_ = lease;
  }
  etcdpb::RangeRequest every;
  every.set_key(keys_.ReplicasPrefix());
  every.set_range_end(keys_.ReplicasEnd());
  every.set_limit(kMostListed);
  absl::StatusOr<etcdpb::RangeResponse> read = etcd_->Range(every);
  if (!read.ok()) return NoteEtcd(read.status());
  std::vector<ReplicaCard> replicas;
  std::set<std::string> addresses = {advertise_};
  for (const mvccpb::KeyValue& kv : read->kvs()) {
    if (!HeldByALease(kv)) continue;
    replicas.push_back(DecodeCard(keys_, kv.key(), kv.value()));
    addresses.insert(replicas.back().address);
  }
  // Every replica ranks the same cards alike, so their parts of an rpm cap add
  // up to the cap (for a moment after one joins or leaves, the ranks may
  // disagree until each has listed again).
  const auto rank = static_cast<uint32_t>(std::distance(addresses.begin(), addresses.find(advertise_)));
  engine_->SetRpmShare(rank, static_cast<uint32_t>(addresses.size()));
  std::lock_guard<std::mutex> lock(mu_);
  replicas_ = std::move(replicas);
}

bool Replica::AwaitLogAt(int64_t term) {
  // Up to a lease, renewing it every third of one: the wait must not cost the
  // lease the new key is on (a stuck entry makes this wait twice).
  const absl::Time give_up = Now() + options_.lease;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      const absl::Duration slice = std::min(options_.lease / 3, std::max(give_up - Now(), absl::ZeroDuration()));
      if (changed_.WaitFor(lock, slice, [&] {
            return stopping_.load() || (cursor_.applied_revision() >= term && !reset_wanted_.load());
          })) {
        return !stopping_.load();
      }
    }
    if (Now() >= give_up) return false;
    const absl::StatusOr<int64_t> ttl = etcd_->KeepAlive(lease_.load());
    if (ttl.ok() && *ttl <= 0) return false;  // the lease, and the key on it, are gone
  }
}

bool Replica::OverwriteStuckEntry(int64_t term) {
  if (!cursor_.StuckOnNext()) return false;
  const uint64_t stuck = cursor_.stuck();
  std::string why;
  int64_t revision = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    why = log_error_;
    revision = stuck_revision_;
  }
  // Nobody applied it (this replica, the most up to date, could not), so the
  // cluster loses nothing it acted on; left there it would stop every election.
  // Only the very value this replica could not apply is overwritten: one
  // written there since (a late write of the leader that made the entry) may
  // be applied elsewhere, and this replica will read it.
  Change empty;
  empty.log_index = stuck;
  empty.next_sequence = engine_->next_sequence();
  etcdpb::TxnRequest txn;
  RequireLeaderKey(&txn, keys_.Leader(), term, lease_.load());
  etcdpb::Compare* same = txn.add_compare();
  same->set_key(keys_.Log(stuck));
  same->set_target(etcdpb::Compare::MOD);
  same->set_result(etcdpb::Compare::EQUAL);
  same->set_mod_revision(revision);
  etcdpb::PutRequest* put = txn.add_success()->mutable_request_put();
  put->set_key(keys_.Log(stuck));
  put->set_value(EncodeEntry(empty, term));
  absl::StatusOr<etcdpb::TxnResponse> written = etcd_->Txn(txn);
  if (!written.ok()) NoteEtcd(written.status());
  if (!written.ok() || !written->succeeded()) return false;
  log::Error(absl::StrCat("elected, but ", why, "; overwrote the entry with an empty one so the cluster goes on"),
             {{"index", stuck}, {"term", term}, {"revision", revision}});
  return true;
}

void Replica::BecomeLeader(int64_t term) {
  // Everything written before this term is applied first: the watch passes
  // this replica's own leader key only after every earlier log entry.
  bool ready = AwaitLogAt(term);
  if (!ready && !stopping_.load() && OverwriteStuckEntry(term)) ready = AwaitLogAt(term);
  if (!ready) {
    if (!stopping_.load()) log::Warn("won the election but could not read the change log in time; standing down");
    etcd_->Revoke(lease_.exchange(0));
    return;
  }
  term_ = term;
  cursor_.Lead();
  leader_.store(true, std::memory_order_release);
  leader_changes_.fetch_add(1);
  if (writes_ok_.load()) engine_->SetAcceptingChanges(true);
  SetLeaderAddress(advertise_);
  log::Info("this replica is the cluster's leader", {{"term", term}, {"applied_index", cursor_.applied()}});
  // The watch steps a leader down when its key is taken, but what it showed
  // before this replica took office went by unchecked: read the key once now.
  // Its writes are fenced on the key either way; this is so it does not stay
  // in office, writing nothing, on a key that is no longer its own. (Read
  // after taking office in full, so a caller that sees this replica lead is
  // never refused as a replica still taking office.)
  etcdpb::RangeRequest own;
  own.set_key(keys_.Leader());
  if (absl::StatusOr<etcdpb::RangeResponse> read = etcd_->Range(own); read.ok()) {
    SawLeaderKey(read->kvs_size() > 0 ? &read->kvs(0) : nullptr);
    if (!IsLeader()) return;
  }
  if (on_leader_) on_leader_();
}

void Replica::StepDown(const std::string& why) {
  cursor_.Depose();  // first: no Change made from here on takes a place in the log
  if (leader_.exchange(false)) {
    left_term_ = term_.load();
    engine_->SetAcceptingChanges(false, absl::StrCat("this replica stopped being the cluster's leader: ", why));
    leader_changes_.fetch_add(1);
    log::Warn(absl::StrCat("this replica is no longer the cluster's leader: ", why));
  }
  reset_wanted_ = true;
  std::lock_guard<std::mutex> lock(mu_);
  if (watch_) watch_->Cancel();
  changed_.NotifyAll();
}

}  // namespace failover::cluster
