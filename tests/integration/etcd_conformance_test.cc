// The in-memory etcd of the cluster simulator against a real etcd: the same
// checks on both, each a rule of etcd's a replica relies on (revisions, ranges
// at a revision, transactions, leases, watches, compaction). A simulator seed
// is only worth what its etcd is; this keeps it honest. The real etcd is
// Debian's etcd-server, one member on loopback; without it those cases skip.
// The faults only the in-memory etcd makes (time, cuts, lost answers) are
// checked on it alone, at the end.
#include <future>
#include <thread>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "grpcpp/grpcpp.h"
#include "server/cluster/etcd_client.h"
#include "tests/sim/mem_etcd.h"
#include "tests/support/etcd_cluster.h"

namespace failover {
namespace {

namespace etcdpb = ::etcdserverpb;
using cluster::Etcd;

// One real etcd for the whole run (the cases use their own keys), killed at exit.
testing::EtcdCluster* RealEtcd(std::string* error) {
  static const std::unique_ptr<testing::EtcdCluster> etcd = [&] {
    auto started = std::make_unique<testing::EtcdCluster>(1);
    if (!started->Start(error)) started.reset();
    return started;
  }();
  return etcd.get();
}

class EtcdConformanceTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    const std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    if (GetParam() == "memory") {
      mem_ = std::make_unique<sim::MemEtcd>(&clock_);
      etcd_ = mem_->Connect();
      prefix_ = "/conformance/";
      return;
    }
    if (!testing::EtcdCluster::Installed()) GTEST_SKIP() << "etcd is not installed";
    std::string error;
    testing::EtcdCluster* real = RealEtcd(&error);
    ASSERT_NE(real, nullptr) << error;
    endpoint_ = real->Endpoints();
    cluster::EtcdOptions options;
    options.endpoints = {endpoint_};
    absl::StatusOr<std::unique_ptr<cluster::EtcdClient>> client = cluster::EtcdClient::Create(options);
    ASSERT_TRUE(client.ok()) << client.status();
    etcd_ = std::move(client).value();
    prefix_ = absl::StrCat("/conformance/", name.substr(0, name.find('/')), "/");
  }

  std::string Key(const std::string& k) const { return prefix_ + k; }

  int64_t Revision() {
    etcdpb::RangeRequest any;
    any.set_key(Key("none"));
    absl::StatusOr<etcdpb::RangeResponse> read = etcd_->Range(any);
    EXPECT_TRUE(read.ok()) << read.status();
    return read.ok() ? read->header().revision() : -1;
  }

  etcdpb::PutResponse Put(const std::string& k, const std::string& value, int64_t lease = 0) {
    etcdpb::PutRequest put;
    put.set_key(Key(k));
    put.set_value(value);
    put.set_lease(lease);
    absl::StatusOr<etcdpb::PutResponse> done = etcd_->Put(put);
    EXPECT_TRUE(done.ok()) << done.status();
    return done.ok() ? *done : etcdpb::PutResponse();
  }

  absl::StatusOr<etcdpb::RangeResponse> Get(const std::string& k, int64_t revision = 0) {
    etcdpb::RangeRequest get;
    get.set_key(Key(k));
    get.set_revision(revision);
    return etcd_->Range(get);
  }

  // A watch on every key under `dir` ("w" watches w/...) from `start`.
  absl::StatusOr<std::unique_ptr<Etcd::Watch>> WatchDir(const std::string& dir, int64_t start) {
    etcdpb::WatchCreateRequest create;
    create.set_key(Key(dir + "/"));
    create.set_range_end(Key(dir + "0"));  // '0' follows '/'
    create.set_start_revision(start);
    return etcd_->StartWatch(create);
  }

  absl::Status Compact(int64_t revision) {
    if (mem_) return mem_->Compact(revision);
    auto kv = etcdpb::KV::NewStub(grpc::CreateChannel(endpoint_, grpc::InsecureChannelCredentials()));
    etcdpb::CompactionRequest request;
    request.set_revision(revision);
    request.set_physical(true);
    etcdpb::CompactionResponse response;
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    const grpc::Status s = kv->Compact(&context, request, &response);
    return s.ok() ? absl::OkStatus() : absl::UnknownError(s.error_message());
  }

  // Reads a watch until it has delivered `n` events (a watchdog cancels it
  // after 20 s, so a missing event fails the case instead of hanging it).
  std::vector<mvccpb::Event> Read(Etcd::Watch* watch, size_t n, int64_t* header_revision = nullptr) {
    std::vector<mvccpb::Event> events;
    std::mutex mu;
    std::condition_variable done;
    bool finished = false;
    std::thread watchdog([&] {
      std::unique_lock<std::mutex> lock(mu);
      if (!done.wait_for(lock, std::chrono::seconds(20), [&] { return finished; })) watch->Cancel();
    });
    etcdpb::WatchResponse response;
    while (events.size() < n && watch->Next(&response)) {
      for (const mvccpb::Event& e : response.events()) events.push_back(e);
      if (header_revision != nullptr) *header_revision = response.header().revision();
    }
    {
      std::lock_guard<std::mutex> lock(mu);
      finished = true;
    }
    done.notify_all();
    watchdog.join();
    return events;
  }

  SimulatedClock clock_;
  std::unique_ptr<sim::MemEtcd> mem_;
  std::unique_ptr<Etcd> etcd_;
  std::string endpoint_;
  std::string prefix_;
};

TEST_P(EtcdConformanceTest, EachWriteIsTheNextRevisionAndAKeyKeepsItsCreateRevisionAndCountsVersions) {
  const int64_t r0 = Revision();
  EXPECT_EQ(Put("a", "one").header().revision(), r0 + 1);
  absl::StatusOr<etcdpb::RangeResponse> read = Get("a");
  ASSERT_TRUE(read.ok()) << read.status();
  ASSERT_EQ(read->kvs_size(), 1);
  EXPECT_EQ(read->kvs(0).value(), "one");
  EXPECT_EQ(read->kvs(0).create_revision(), r0 + 1);
  EXPECT_EQ(read->kvs(0).mod_revision(), r0 + 1);
  EXPECT_EQ(read->kvs(0).version(), 1);

  EXPECT_EQ(Put("a", "two").header().revision(), r0 + 2);
  read = Get("a");
  ASSERT_TRUE(read.ok() && read->kvs_size() == 1);
  EXPECT_EQ(read->kvs(0).create_revision(), r0 + 1);
  EXPECT_EQ(read->kvs(0).mod_revision(), r0 + 2);
  EXPECT_EQ(read->kvs(0).version(), 2);

  // A range at a revision sees the key as it was then; a read writes nothing.
  read = Get("a", r0 + 1);
  ASSERT_TRUE(read.ok() && read->kvs_size() == 1);
  EXPECT_EQ(read->kvs(0).value(), "one");
  EXPECT_EQ(read->header().revision(), r0 + 2);
  read = Get("a", r0);
  ASSERT_TRUE(read.ok());
  EXPECT_EQ(read->kvs_size(), 0);
  EXPECT_EQ(Get("a", r0 + 100).status().code(), absl::StatusCode::kOutOfRange);
}

TEST_P(EtcdConformanceTest, ARangePagesByLimitCountsEveryMatchAndADeleteOfManyIsOneRevision) {
  for (int i = 1; i <= 5; ++i) Put(absl::StrCat("k/", i), "v");
  etcdpb::RangeRequest page;
  page.set_key(Key("k/"));
  page.set_range_end(Key("k0"));  // '0' follows '/': every k/...
  page.set_limit(2);
  absl::StatusOr<etcdpb::RangeResponse> read = etcd_->Range(page);
  ASSERT_TRUE(read.ok()) << read.status();
  ASSERT_EQ(read->kvs_size(), 2);
  EXPECT_EQ(read->kvs(0).key(), Key("k/1"));
  EXPECT_EQ(read->kvs(1).key(), Key("k/2"));
  EXPECT_TRUE(read->more());
  EXPECT_EQ(read->count(), 5);
  page.set_limit(0);
  page.set_count_only(true);
  read = etcd_->Range(page);
  ASSERT_TRUE(read.ok());
  EXPECT_EQ(read->kvs_size(), 0);
  EXPECT_EQ(read->count(), 5);

  const int64_t before = Revision();
  etcdpb::DeleteRangeRequest remove;
  remove.set_key(Key("k/2"));
  remove.set_range_end(Key("k/5"));
  absl::StatusOr<etcdpb::DeleteRangeResponse> removed = etcd_->DeleteRange(remove);
  ASSERT_TRUE(removed.ok()) << removed.status();
  EXPECT_EQ(removed->deleted(), 3);
  EXPECT_EQ(removed->header().revision(), before + 1);
  removed = etcd_->DeleteRange(remove);
  ASSERT_TRUE(removed.ok());
  EXPECT_EQ(removed->deleted(), 0);
  EXPECT_EQ(Revision(), before + 1) << "deleting nothing writes nothing";
}

TEST_P(EtcdConformanceTest, ATransactionComparesThenWritesAtOneRevisionOrChecksWholeAndWritesNothing) {
  const int64_t r0 = Revision();
  auto stand = [&] {
    etcdpb::TxnRequest txn;
    etcdpb::Compare* absent = txn.add_compare();
    absent->set_key(Key("leader"));
    absent->set_target(etcdpb::Compare::CREATE);
    absent->set_result(etcdpb::Compare::EQUAL);
    absent->set_create_revision(0);  // no such key
    etcdpb::PutRequest* put = txn.add_success()->mutable_request_put();
    put->set_key(Key("leader"));
    put->set_value("me");
    txn.add_success()->mutable_request_put()->set_key(Key("card"));
    txn.add_failure()->mutable_request_range()->set_key(Key("leader"));
    return etcd_->Txn(txn);
  };
  absl::StatusOr<etcdpb::TxnResponse> stood = stand();
  ASSERT_TRUE(stood.ok()) << stood.status();
  EXPECT_TRUE(stood->succeeded());
  EXPECT_EQ(stood->header().revision(), r0 + 1);
  EXPECT_EQ(Get("card")->kvs(0).mod_revision(), r0 + 1) << "both puts at the transaction's one revision";

  stood = stand();
  ASSERT_TRUE(stood.ok());
  EXPECT_FALSE(stood->succeeded());
  ASSERT_EQ(stood->responses_size(), 1);
  ASSERT_EQ(stood->responses(0).response_range().kvs_size(), 1);
  EXPECT_EQ(stood->responses(0).response_range().kvs(0).create_revision(), r0 + 1);
  EXPECT_EQ(stood->header().revision(), r0 + 1) << "a transaction that only reads writes nothing";

  auto holds = [&](const std::string& k, etcdpb::Compare::CompareTarget target, etcdpb::Compare::CompareResult result,
                   auto set) {
    etcdpb::TxnRequest txn;
    etcdpb::Compare* c = txn.add_compare();
    c->set_key(Key(k));
    c->set_target(target);
    c->set_result(result);
    set(c);
    absl::StatusOr<etcdpb::TxnResponse> answered = etcd_->Txn(txn);
    EXPECT_TRUE(answered.ok()) << answered.status();
    return answered.ok() && answered->succeeded();
  };
  using C = etcdpb::Compare;
  EXPECT_TRUE(holds("leader", C::MOD, C::EQUAL, [&](C* c) { c->set_mod_revision(r0 + 1); }));
  EXPECT_TRUE(holds("leader", C::VALUE, C::EQUAL, [](C* c) { c->set_value("me"); }));
  EXPECT_TRUE(holds("leader", C::VERSION, C::GREATER, [](C* c) { c->set_version(0); }));
  EXPECT_TRUE(holds("leader", C::LEASE, C::EQUAL, [](C* c) { c->set_lease(0); }));
  EXPECT_FALSE(holds("leader", C::CREATE, C::LESS, [&](C* c) { c->set_create_revision(r0 + 1); }));
  // A value compare on a missing key fails whatever it asks; the others see zeros.
  EXPECT_FALSE(holds("missing", C::VALUE, C::EQUAL, [](C* c) { c->set_value(""); }));
  EXPECT_FALSE(holds("missing", C::VALUE, C::NOT_EQUAL, [](C* c) { c->set_value("x"); }));
  EXPECT_TRUE(holds("missing", C::VERSION, C::EQUAL, [](C* c) { c->set_version(0); }));
  EXPECT_TRUE(holds("missing", C::MOD, C::LESS, [](C* c) { c->set_mod_revision(1); }));

  // A put on a lease that does not exist fails the whole transaction.
  etcdpb::TxnRequest bad;
  bad.add_success()->mutable_request_put()->set_key(Key("first"));
  etcdpb::PutRequest* orphan = bad.add_success()->mutable_request_put();
  orphan->set_key(Key("second"));
  orphan->set_lease(0x7fff0001);
  absl::StatusOr<etcdpb::TxnResponse> refused = etcd_->Txn(bad);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kNotFound) << refused.status();
  EXPECT_EQ(Get("first")->kvs_size(), 0);
  EXPECT_EQ(Revision(), r0 + 1);
}

TEST_P(EtcdConformanceTest, AKeyOnALeaseGoesWithItAndARenewalOfAnEndedLeaseSaysZero) {
  etcdpb::PutRequest orphan;
  orphan.set_key(Key("orphan"));
  orphan.set_lease(0x7fff0002);
  EXPECT_EQ(etcd_->Put(orphan).status().code(), absl::StatusCode::kNotFound);

  absl::StatusOr<int64_t> lease = etcd_->Grant(absl::Seconds(30));
  ASSERT_TRUE(lease.ok()) << lease.status();
  Put("held", "x", *lease);
  Put("kept", "y");
  ASSERT_EQ(Get("held")->kvs_size(), 1);
  EXPECT_EQ(Get("held")->kvs(0).lease(), *lease);
  absl::StatusOr<int64_t> ttl = etcd_->KeepAlive(*lease);
  ASSERT_TRUE(ttl.ok()) << ttl.status();
  EXPECT_GT(*ttl, 0);

  const int64_t before = Revision();
  etcd_->Revoke(*lease);
  EXPECT_EQ(Get("held")->kvs_size(), 0);
  EXPECT_EQ(Get("kept")->kvs_size(), 1);
  EXPECT_EQ(Revision(), before + 1);
  ttl = etcd_->KeepAlive(*lease);
  ASSERT_TRUE(ttl.ok()) << ttl.status();
  EXPECT_EQ(*ttl, 0);
}

TEST_P(EtcdConformanceTest, AWatchDeliversEveryChangeInItsRangeFromItsStartInRevisionOrder) {
  const int64_t r0 = Revision();
  Put("w/a", "1");  // r0+1: before the watch is opened, replayed from its start
  absl::StatusOr<std::unique_ptr<Etcd::Watch>> watch = WatchDir("w", r0 + 1);
  ASSERT_TRUE(watch.ok()) << watch.status();
  Put("elsewhere", "x");  // r0+2: outside the range
  Put("w/b", "2");        // r0+3
  etcdpb::DeleteRangeRequest remove;
  remove.set_key(Key("w/a"));
  ASSERT_TRUE(etcd_->DeleteRange(remove).ok());  // r0+4

  int64_t header = 0;
  const std::vector<mvccpb::Event> events = Read(watch->get(), 3, &header);
  ASSERT_EQ(events.size(), 3u) << (*watch)->status();
  EXPECT_EQ(events[0].type(), mvccpb::Event::PUT);
  EXPECT_EQ(events[0].kv().key(), Key("w/a"));
  EXPECT_EQ(events[0].kv().mod_revision(), r0 + 1);
  EXPECT_EQ(events[1].kv().key(), Key("w/b"));
  EXPECT_EQ(events[1].kv().value(), "2");
  EXPECT_EQ(events[1].kv().create_revision(), r0 + 3);
  EXPECT_EQ(events[2].type(), mvccpb::Event::DELETE);
  EXPECT_EQ(events[2].kv().key(), Key("w/a"));
  EXPECT_EQ(events[2].kv().mod_revision(), r0 + 4);
  EXPECT_GE(header, r0 + 4);

  // Cancelled from another thread, a waiting Next returns false.
  std::thread cancel([&] { (*watch)->Cancel(); });
  etcdpb::WatchResponse response;
  EXPECT_FALSE((*watch)->Next(&response));
  cancel.join();
}

// A replica lets a watch go (a new leader, a reset, a stop) whether or not
// etcd has sent something it has not read yet; letting go must not wait on
// etcd to send more.
TEST_P(EtcdConformanceTest, AWatchLetGoWithAnAnswerUnreadEndsAtOnce) {
  const int64_t r0 = Revision();
  absl::StatusOr<std::unique_ptr<Etcd::Watch>> unread = WatchDir("d", r0 + 1);
  ASSERT_TRUE(unread.ok()) << unread.status();
  absl::StatusOr<std::unique_ptr<Etcd::Watch>> witness = WatchDir("d", r0 + 1);
  ASSERT_TRUE(witness.ok()) << witness.status();
  Put("d/a", "1");
  // Once the witness has the change, the other watch has it waiting too (the
  // same member sends both).
  ASSERT_EQ(Read(witness->get(), 1).size(), 1u) << (*witness)->status();

  auto gone = std::make_shared<std::promise<void>>();
  std::future<void> let_go = gone->get_future();
  std::thread([watch = std::move(unread).value(), gone]() mutable {
    watch.reset();
    gone->set_value();
  }).detach();
  EXPECT_EQ(let_go.wait_for(std::chrono::seconds(20)), std::future_status::ready)
      << "letting go of a watch with an answer unread hangs";
}

TEST_P(EtcdConformanceTest, CompactionRefusesReadsAndWatchesFromBeforeItAndKeepsTheValueAtIt) {
  Put("c", "old");
  const int64_t r1 = Revision();
  Put("c", "new");
  const int64_t r2 = Revision();
  ASSERT_TRUE(Compact(r2).ok());
  EXPECT_EQ(Get("c", r1).status().code(), absl::StatusCode::kOutOfRange);
  absl::StatusOr<etcdpb::RangeResponse> at = Get("c", r2);
  ASSERT_TRUE(at.ok()) << at.status();
  ASSERT_EQ(at->kvs_size(), 1);
  EXPECT_EQ(at->kvs(0).value(), "new");
  EXPECT_EQ(at->kvs(0).create_revision(), r1);

  etcdpb::WatchCreateRequest create;
  create.set_key(Key("c"));
  create.set_start_revision(r1);
  absl::StatusOr<std::unique_ptr<Etcd::Watch>> watch = etcd_->StartWatch(create);
  if (watch.ok()) {
    // etcd creates the watch, then ends it saying where the history now starts.
    EXPECT_TRUE(Read(watch->get(), 1).empty());
    EXPECT_EQ((*watch)->status().code(), absl::StatusCode::kOutOfRange) << (*watch)->status();
  } else {
    EXPECT_EQ(watch.status().code(), absl::StatusCode::kOutOfRange) << watch.status();
  }
}

INSTANTIATE_TEST_SUITE_P(Etcds, EtcdConformanceTest, ::testing::Values("memory", "etcd"),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

// --- what only the in-memory etcd does: the simulator's faults ---

TEST(MemEtcdTest, ALeaseEndsWhenTheSimulatedClockPassesItsTtlAndItsKeysGoWithADeleteEvent) {
  SimulatedClock clock;
  sim::MemEtcd etcd(&clock);
  auto client = etcd.Connect();
  absl::StatusOr<int64_t> lease = client->Grant(absl::Seconds(2));
  ASSERT_TRUE(lease.ok());
  etcdpb::PutRequest put;
  put.set_key("/k");
  put.set_lease(*lease);
  ASSERT_TRUE(client->Put(put).ok());
  etcdpb::WatchCreateRequest create;
  create.set_key("/k");
  auto watch = client->StartWatch(create);
  ASSERT_TRUE(watch.ok());
  auto* mem_watch = static_cast<sim::MemEtcd::MemWatch*>(watch->get());

  clock.Advance(absl::Milliseconds(1500));
  ASSERT_TRUE(client->KeepAlive(*lease).ok());  // renewed: two seconds from now
  clock.Advance(absl::Milliseconds(1500));
  etcd.ExpireLeases();
  EXPECT_TRUE(etcd.LeaseAlive(*lease));
  EXPECT_FALSE(mem_watch->Ready());
  clock.Advance(absl::Milliseconds(600));
  etcd.ExpireLeases();
  EXPECT_FALSE(etcd.LeaseAlive(*lease));
  ASSERT_TRUE(mem_watch->Ready());
  etcdpb::WatchResponse response;
  ASSERT_TRUE((*watch)->Next(&response));
  ASSERT_EQ(response.events_size(), 1);
  EXPECT_EQ(response.events(0).type(), mvccpb::Event::DELETE);
  EXPECT_EQ(*client->KeepAlive(*lease), 0);
}

TEST(MemEtcdTest, ACutOffClientFailsItsCallsAndLosesItsWatchesAndALostAnswerWasStillCarriedOut) {
  SimulatedClock clock;
  sim::MemEtcd etcd(&clock);
  auto a = etcd.Connect();
  auto b = etcd.Connect();
  etcdpb::WatchCreateRequest create;
  create.set_key("/k");
  auto watch = a->StartWatch(create);
  ASSERT_TRUE(watch.ok());

  a->SetReachable(false);
  etcdpb::RangeRequest get;
  get.set_key("/k");
  EXPECT_EQ(a->Range(get).status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(a->errors(), 1u);
  etcdpb::WatchResponse response;
  EXPECT_FALSE((*watch)->Next(&response));
  EXPECT_EQ((*watch)->status().code(), absl::StatusCode::kUnavailable);
  a->SetReachable(true);
  EXPECT_FALSE((*watch)->Next(&response)) << "a watch cut off stays ended";
  EXPECT_TRUE(a->Range(get).ok());

  b->LoseAnswers(1);
  etcdpb::PutRequest put;
  put.set_key("/k");
  put.set_value("v");
  EXPECT_EQ(b->Put(put).status().code(), absl::StatusCode::kUnavailable);
  absl::StatusOr<etcdpb::RangeResponse> read = a->Range(get);
  ASSERT_TRUE(read.ok());
  ASSERT_EQ(read->kvs_size(), 1) << "the put whose answer was lost was carried out";
  EXPECT_TRUE(b->Put(put).ok()) << "only the next answer is lost";
}

}  // namespace
}  // namespace failover
