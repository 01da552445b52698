#include "tests/sim/mem_etcd.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace failover::sim {
namespace {

// etcd's range rule: no end is the key alone, "\0" every key from `key` on.
bool InRange(const std::string& key, const std::string& from, const std::string& end) {
  if (end.empty()) return key == from;
  if (end == std::string(1, '\0')) return key >= from;
  return key >= from && key < end;
}

template <class T>
bool Holds(etcdpb::Compare::CompareResult result, const T& have, const T& want) {
  switch (result) {
    case etcdpb::Compare::EQUAL: return have == want;
    case etcdpb::Compare::GREATER: return have > want;
    case etcdpb::Compare::LESS: return have < want;
    case etcdpb::Compare::NOT_EQUAL: return have != want;
    default: return false;
  }
}

}  // namespace

std::unique_ptr<MemEtcd::Client> MemEtcd::Connect() { return std::make_unique<Client>(this); }

int64_t MemEtcd::revision() const {
  std::lock_guard<std::mutex> lock(mu_);
  return revision_;
}

absl::Status MemEtcd::Compact(int64_t revision) {
  std::lock_guard<std::mutex> lock(mu_);
  if (revision > revision_) return absl::OutOfRangeError("etcdserver: mvcc: required revision is a future revision");
  if (revision <= compacted_) return absl::OutOfRangeError("etcdserver: mvcc: required revision has been compacted");
  // A watch with nothing to deliver before `revision` is caught up, and
  // etcd's compaction does not touch it; one still behind loses its start.
  for (MemWatch* watch : watches_) {
    const bool behind = std::any_of(changes_.begin(), changes_.end(), [&](const Change& c) {
      return c.revision >= watch->next_revision_ && c.revision < revision && watch->Covers(c.event.kv().key());
    });
    if (!behind) watch->next_revision_ = std::max(watch->next_revision_, revision);
  }
  compacted_ = revision;
  for (auto it = keys_.begin(); it != keys_.end();) {
    std::vector<Version>& versions = it->second;
    // Keep the version that was current at `revision`, and every later one.
    size_t first_kept = 0;
    for (size_t i = 0; i < versions.size(); ++i) {
      if (versions[i].revision <= revision) first_kept = i;
    }
    versions.erase(versions.begin(), versions.begin() + static_cast<std::ptrdiff_t>(first_kept));
    if (versions.size() == 1 && versions[0].deleted) {
      it = keys_.erase(it);
    } else {
      ++it;
    }
  }
  changes_.erase(changes_.begin(), std::find_if(changes_.begin(), changes_.end(),
                                                [&](const Change& c) { return c.revision >= revision; }));
  changed_.NotifyAll();
  return absl::OkStatus();
}

void MemEtcd::ExpireLeases() {
  std::lock_guard<std::mutex> lock(mu_);
  ExpireLocked();
}

bool MemEtcd::LeaseAlive(int64_t lease) const {
  std::lock_guard<std::mutex> lock(mu_);
  return leases_.count(lease) > 0;
}

size_t MemEtcd::OpenWatches() const {
  std::lock_guard<std::mutex> lock(mu_);
  return watches_.size();
}

void MemEtcd::ExpireLocked() {
  const absl::Time now = clock_->Now();
  std::vector<int64_t> ended;
  for (const auto& [id, lease] : leases_) {
    if (lease.expires <= now) ended.push_back(id);
  }
  for (int64_t id : ended) RevokeLocked(id);
}

absl::Status MemEtcd::CheckRevisionLocked(int64_t revision) const {
  if (revision > revision_) return absl::OutOfRangeError("etcdserver: mvcc: required revision is a future revision");
  if (revision != 0 && revision < compacted_) {
    return absl::OutOfRangeError("etcdserver: mvcc: required revision has been compacted");
  }
  return absl::OkStatus();
}

const mvccpb::KeyValue* MemEtcd::AtLocked(const std::string& key, int64_t revision) const {
  const auto it = keys_.find(key);
  if (it == keys_.end()) return nullptr;
  const Version* at = nullptr;
  for (const Version& v : it->second) {
    if (revision == 0 || v.revision <= revision) at = &v;
  }
  return at == nullptr || at->deleted ? nullptr : &at->kv;
}

etcdpb::RangeResponse MemEtcd::RangeLocked(const etcdpb::RangeRequest& request) const {
  etcdpb::RangeResponse response;
  HeaderLocked(response.mutable_header());
  int64_t count = 0;
  for (auto it = keys_.lower_bound(request.key()); it != keys_.end(); ++it) {
    if (!InRange(it->first, request.key(), request.range_end())) break;  // sorted: past the end
    const mvccpb::KeyValue* kv = AtLocked(it->first, request.revision());
    if (kv == nullptr) continue;
    ++count;
    if (request.count_only()) continue;
    if (request.limit() > 0 && response.kvs_size() >= request.limit()) {
      response.set_more(true);
      continue;
    }
    mvccpb::KeyValue* out = response.add_kvs();
    *out = *kv;
    if (request.keys_only()) out->clear_value();
  }
  response.set_count(count);
  return response;
}

bool MemEtcd::CompareLocked(const etcdpb::Compare& compare) const {
  std::vector<const mvccpb::KeyValue*> kvs;
  for (auto it = keys_.lower_bound(compare.key()); it != keys_.end(); ++it) {
    if (!InRange(it->first, compare.key(), compare.range_end())) break;
    if (const mvccpb::KeyValue* kv = AtLocked(it->first, 0)) kvs.push_back(kv);
  }
  const mvccpb::KeyValue none;
  if (kvs.empty()) {
    // etcd: a value compare on no key fails; the others compare with zeros.
    if (compare.target() == etcdpb::Compare::VALUE) return false;
    kvs.push_back(&none);
  }
  for (const mvccpb::KeyValue* kv : kvs) {
    bool holds = false;
    switch (compare.target()) {
      case etcdpb::Compare::VERSION: holds = Holds(compare.result(), kv->version(), compare.version()); break;
      case etcdpb::Compare::CREATE:
        holds = Holds(compare.result(), kv->create_revision(), compare.create_revision());
        break;
      case etcdpb::Compare::MOD: holds = Holds(compare.result(), kv->mod_revision(), compare.mod_revision()); break;
      case etcdpb::Compare::VALUE: holds = Holds(compare.result(), kv->value(), compare.value()); break;
      case etcdpb::Compare::LEASE: holds = Holds(compare.result(), kv->lease(), compare.lease()); break;
      default: return false;
    }
    if (!holds) return false;
  }
  return true;
}

absl::Status MemEtcd::PutLocked(const etcdpb::PutRequest& request, etcdpb::PutResponse* response, bool* wrote) {
  if (request.ignore_value() || request.ignore_lease()) {
    return absl::UnimplementedError("the in-memory etcd does not take ignore_value or ignore_lease");
  }
  if (request.lease() != 0 && leases_.count(request.lease()) == 0) {
    return absl::NotFoundError("etcdserver: requested lease not found");
  }
  const int64_t at = revision_ + 1;
  const mvccpb::KeyValue* before = AtLocked(request.key(), 0);
  if (before != nullptr && request.prev_kv()) *response->mutable_prev_kv() = *before;
  if (before != nullptr && before->lease() != 0 && before->lease() != request.lease()) {
    if (auto old = leases_.find(before->lease()); old != leases_.end()) old->second.keys.erase(request.key());
  }
  Version version;
  version.revision = at;
  mvccpb::KeyValue& kv = version.kv;
  kv.set_key(request.key());
  kv.set_value(request.value());
  kv.set_lease(request.lease());
  kv.set_mod_revision(at);
  kv.set_create_revision(before != nullptr ? before->create_revision() : at);
  kv.set_version(before != nullptr ? before->version() + 1 : 1);
  if (request.lease() != 0) leases_[request.lease()].keys.insert(request.key());
  Change& change = changes_.emplace_back();
  change.revision = at;
  change.event.set_type(mvccpb::Event::PUT);
  *change.event.mutable_kv() = kv;
  keys_[request.key()].push_back(std::move(version));
  *wrote = true;
  return absl::OkStatus();
}

etcdpb::DeleteRangeResponse MemEtcd::DeleteLocked(const std::string& key, const std::string& range_end, bool prev_kv,
                                                  bool* wrote) {
  etcdpb::DeleteRangeResponse response;
  const int64_t at = revision_ + 1;
  int64_t deleted = 0;
  for (auto it = keys_.lower_bound(key); it != keys_.end(); ++it) {
    if (!InRange(it->first, key, range_end)) break;
    const mvccpb::KeyValue* kv = AtLocked(it->first, 0);
    if (kv == nullptr) continue;
    ++deleted;
    if (prev_kv) *response.add_prev_kvs() = *kv;
    if (kv->lease() != 0) {
      if (auto lease = leases_.find(kv->lease()); lease != leases_.end()) lease->second.keys.erase(it->first);
    }
    Change& change = changes_.emplace_back();
    change.revision = at;
    change.event.set_type(mvccpb::Event::DELETE);
    change.event.mutable_kv()->set_key(it->first);
    change.event.mutable_kv()->set_mod_revision(at);
    Version gone;
    gone.revision = at;
    gone.deleted = true;
    it->second.push_back(std::move(gone));
  }
  response.set_deleted(deleted);
  if (deleted > 0) *wrote = true;
  return response;
}

absl::StatusOr<etcdpb::TxnResponse> MemEtcd::TxnLocked(const etcdpb::TxnRequest& request) {
  etcdpb::TxnResponse response;
  bool succeeded = true;
  for (const etcdpb::Compare& compare : request.compare()) succeeded = succeeded && CompareLocked(compare);
  response.set_succeeded(succeeded);
  const auto& ops = succeeded ? request.success() : request.failure();
  // etcd checks a transaction whole before it writes anything.
  for (const etcdpb::RequestOp& op : ops) {
    if (op.has_request_put() && op.request_put().lease() != 0 && leases_.count(op.request_put().lease()) == 0) {
      return absl::NotFoundError("etcdserver: requested lease not found");
    }
    if (op.has_request_range()) {
      if (absl::Status s = CheckRevisionLocked(op.request_range().revision()); !s.ok()) return s;
    }
  }
  bool wrote = false;
  for (const etcdpb::RequestOp& op : ops) {
    etcdpb::ResponseOp* out = response.add_responses();
    switch (op.request_case()) {
      case etcdpb::RequestOp::kRequestRange: *out->mutable_response_range() = RangeLocked(op.request_range()); break;
      case etcdpb::RequestOp::kRequestPut:
        if (absl::Status s = PutLocked(op.request_put(), out->mutable_response_put(), &wrote); !s.ok()) return s;
        break;
      case etcdpb::RequestOp::kRequestDeleteRange: {
        const etcdpb::DeleteRangeRequest& d = op.request_delete_range();
        *out->mutable_response_delete_range() = DeleteLocked(d.key(), d.range_end(), d.prev_kv(), &wrote);
        break;
      }
      default: return absl::UnimplementedError("the in-memory etcd does not take nested transactions");
    }
  }
  if (wrote) ++revision_;
  HeaderLocked(response.mutable_header());
  for (etcdpb::ResponseOp& op : *response.mutable_responses()) {
    if (op.has_response_range()) continue;  // a read keeps the revision it read at
    if (op.has_response_put()) HeaderLocked(op.mutable_response_put()->mutable_header());
    if (op.has_response_delete_range()) HeaderLocked(op.mutable_response_delete_range()->mutable_header());
  }
  if (wrote) changed_.NotifyAll();
  return response;
}

void MemEtcd::RevokeLocked(int64_t lease) {
  const auto it = leases_.find(lease);
  if (it == leases_.end()) return;
  const std::set<std::string> keys = std::move(it->second.keys);
  leases_.erase(it);
  bool wrote = false;
  for (const std::string& key : keys) DeleteLocked(key, "", false, &wrote);
  if (wrote) {
    ++revision_;
    changed_.NotifyAll();
  }
}

// --- a replica's connection ---

absl::Status MemEtcd::Client::ReachLocked(const char* what) {
  etcd_->ExpireLocked();
  if (reachable_) return absl::OkStatus();
  ++errors_;
  return absl::UnavailableError(absl::StrCat("in-memory etcd: ", what, ": cut off"));
}

bool MemEtcd::Client::LoseAnswerLocked(const char* what, absl::Status* lost) {
  if (lose_answers_ == 0) return false;
  --lose_answers_;
  ++errors_;
  *lost = absl::UnavailableError(absl::StrCat("in-memory etcd: ", what, ": the answer was lost"));
  return true;
}

void MemEtcd::Client::SetReachable(bool reachable) {
  std::lock_guard<std::mutex> lock(etcd_->mu_);
  if (reachable_ && !reachable) ++cuts_;
  reachable_ = reachable;
  etcd_->changed_.NotifyAll();
}

void MemEtcd::Client::LoseAnswers(int n) {
  std::lock_guard<std::mutex> lock(etcd_->mu_);
  lose_answers_ = n;
}

uint64_t MemEtcd::Client::errors() const {
  std::lock_guard<std::mutex> lock(etcd_->mu_);
  return errors_;
}

absl::StatusOr<etcdpb::RangeResponse> MemEtcd::Client::Range(const etcdpb::RangeRequest& request) {
  OnTheWay();
  std::lock_guard<std::mutex> lock(etcd_->mu_);
  if (absl::Status s = ReachLocked("range"); !s.ok()) return s;
  if (absl::Status s = etcd_->CheckRevisionLocked(request.revision()); !s.ok()) return s;
  return etcd_->RangeLocked(request);
}

absl::StatusOr<etcdpb::TxnResponse> MemEtcd::Client::Txn(const etcdpb::TxnRequest& request) {
  OnTheWay();
  std::lock_guard<std::mutex> lock(etcd_->mu_);
  if (absl::Status s = ReachLocked("txn"); !s.ok()) return s;
  absl::StatusOr<etcdpb::TxnResponse> response = etcd_->TxnLocked(request);
  absl::Status lost;
  if (response.ok() && LoseAnswerLocked("txn", &lost)) return lost;
  return response;
}

absl::StatusOr<etcdpb::PutResponse> MemEtcd::Client::Put(const etcdpb::PutRequest& request) {
  etcdpb::TxnRequest txn;
  *txn.add_success()->mutable_request_put() = request;
  absl::StatusOr<etcdpb::TxnResponse> done = Txn(txn);
  if (!done.ok()) return done.status();
  return done->responses(0).response_put();
}

absl::StatusOr<etcdpb::DeleteRangeResponse> MemEtcd::Client::DeleteRange(const etcdpb::DeleteRangeRequest& request) {
  etcdpb::TxnRequest txn;
  *txn.add_success()->mutable_request_delete_range() = request;
  absl::StatusOr<etcdpb::TxnResponse> done = Txn(txn);
  if (!done.ok()) return done.status();
  return done->responses(0).response_delete_range();
}

absl::StatusOr<int64_t> MemEtcd::Client::Grant(absl::Duration ttl) {
  OnTheWay();
  std::lock_guard<std::mutex> lock(etcd_->mu_);
  if (absl::Status s = ReachLocked("lease grant"); !s.ok()) return s;
  const int64_t seconds = std::max<int64_t>(1, static_cast<int64_t>(std::ceil(absl::ToDoubleSeconds(ttl))));
  const int64_t id = etcd_->next_lease_++;
  Lease& lease = etcd_->leases_[id];
  lease.ttl_seconds = seconds;
  lease.expires = etcd_->clock_->Now() + absl::Seconds(seconds);
  absl::Status lost;
  if (LoseAnswerLocked("lease grant", &lost)) return lost;
  return id;
}

absl::StatusOr<int64_t> MemEtcd::Client::KeepAlive(int64_t lease) {
  OnTheWay();
  std::lock_guard<std::mutex> lock(etcd_->mu_);
  if (absl::Status s = ReachLocked("lease keepalive"); !s.ok()) return s;
  const auto it = etcd_->leases_.find(lease);
  if (it == etcd_->leases_.end()) return 0;
  it->second.expires = etcd_->clock_->Now() + absl::Seconds(it->second.ttl_seconds);
  absl::Status lost;
  if (LoseAnswerLocked("lease keepalive", &lost)) return lost;
  return it->second.ttl_seconds;
}

void MemEtcd::Client::Revoke(int64_t lease) {
  OnTheWay();
  std::lock_guard<std::mutex> lock(etcd_->mu_);
  if (!ReachLocked("lease revoke").ok()) return;
  etcd_->RevokeLocked(lease);
}

absl::StatusOr<std::unique_ptr<cluster::Etcd::Watch>> MemEtcd::Client::StartWatch(
    const etcdpb::WatchCreateRequest& request) {
  OnTheWay();
  {
    std::lock_guard<std::mutex> lock(etcd_->mu_);
    if (absl::Status s = ReachLocked("watch"); !s.ok()) return s;
  }
  return std::unique_ptr<cluster::Etcd::Watch>(new MemWatch(etcd_, this, request));
}

// --- watches ---

MemEtcd::MemWatch::MemWatch(MemEtcd* etcd, Client* client, const etcdpb::WatchCreateRequest& request)
    : etcd_(etcd), client_(client), key_(request.key()), range_end_(request.range_end()),
      cuts_at_start_(client->cuts_) {
  std::lock_guard<std::mutex> lock(etcd_->mu_);
  // As etcd does: created first; a start compacted away ends it at the first Next.
  next_revision_ = request.start_revision() > 0 ? request.start_revision() : etcd_->revision_ + 1;
  etcd_->watches_.insert(this);
}

MemEtcd::MemWatch::~MemWatch() {
  std::lock_guard<std::mutex> lock(etcd_->mu_);
  etcd_->watches_.erase(this);
}

bool MemEtcd::MemWatch::Covers(const std::string& key) const { return InRange(key, key_, range_end_); }

bool MemEtcd::MemWatch::AliveLocked() {
  if (!status_.ok()) return false;
  if (cancelled_) {
    status_ = absl::CancelledError("in-memory etcd: watch cancelled");
  } else if (client_->cuts_ != cuts_at_start_ || !client_->reachable_) {
    status_ = absl::UnavailableError("in-memory etcd: watch ended: cut off");
  } else if (next_revision_ < etcd_->compacted_) {
    status_ = absl::OutOfRangeError(
        absl::StrCat("in-memory etcd: watch start compacted away (revision ", etcd_->compacted_, ")"));
  }
  return status_.ok();
}

bool MemEtcd::MemWatch::TakeLocked(etcdpb::WatchResponse* response) {
  response->Clear();
  const auto from = std::lower_bound(etcd_->changes_.begin(), etcd_->changes_.end(), next_revision_,
                                     [](const Change& c, int64_t revision) { return c.revision < revision; });
  for (auto it = from; it != etcd_->changes_.end(); ++it) {
    if (Covers(it->event.kv().key())) *response->add_events() = it->event;
  }
  next_revision_ = std::max(next_revision_, etcd_->revision_ + 1);
  if (response->events_size() == 0) return false;
  etcd_->HeaderLocked(response->mutable_header());
  return true;
}

bool MemEtcd::MemWatch::Next(etcdpb::WatchResponse* response) {
  std::unique_lock<std::mutex> lock(etcd_->mu_);
  etcd_->changed_.Wait(lock, [&] { return !AliveLocked() || TakeLocked(response); });
  return status_.ok();
}

bool MemEtcd::MemWatch::Ready() const {
  std::lock_guard<std::mutex> lock(etcd_->mu_);
  if (!status_.ok() || cancelled_ || client_->cuts_ != cuts_at_start_ || !client_->reachable_ ||
      next_revision_ < etcd_->compacted_) {
    return true;
  }
  return std::any_of(etcd_->changes_.begin(), etcd_->changes_.end(), [&](const Change& c) {
    return c.revision >= next_revision_ && Covers(c.event.kv().key());
  });
}

void MemEtcd::MemWatch::Cancel() {
  std::lock_guard<std::mutex> lock(etcd_->mu_);
  cancelled_ = true;
  etcd_->changed_.NotifyAll();
}

}  // namespace failover::sim
