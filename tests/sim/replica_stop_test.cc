// A replica stopped while its data dir refuses Changes it already applied
// (cluster_sim found it: seeds 108 and 113 published an entry's events twice
// in one process life). The log thread, waiting for the committer so it can go
// back to the log's state, gave up waiting on the stop and went back anyway:
// to the change feed's state, behind the engine, so it applied those entries
// again, queued them twice, and the committer's last try published them twice.
#include "absl/time/time.h"
#include "common/clock.h"
#include "gtest/gtest.h"
#include "server/committer/committer.h"
#include "tests/sim/mem_etcd.h"
#include "tests/sim/sim_replica.h"
#include "tests/support/failoverd_process.h"

namespace failover::sim {
namespace {

TEST(ReplicaStopTest, AStopWithAppliedChangesStillQueuedPublishesEachOnce) {
  RealClock clock;
  MemEtcd etcd(&clock);
  History history;
  SimReplica replica(0, &etcd, &clock, &history);
  replica.Start();
  ASSERT_TRUE(testing::WaitUntil(10, [&] { return replica.leader(); }));
  {
    Committer::Scope settled(replica.committer());
    ASSERT_TRUE(replica.engine().Apply(Config(), ApplyOptions(), clock.Now()).ok());
    ASSERT_TRUE(settled.Await().ok());
  }
  ASSERT_TRUE(replica.committer()->AwaitIdle(absl::Seconds(10)));  // published, not only saved
  const size_t before = history.Count(0, 1);
  // The change reaches etcd but not the data dir: the leader steps down, and
  // its log thread waits for the committer before going back to the log.
  replica.SetDiskRefusing(true);
  ASSERT_TRUE(replica.engine().SetTargetEnabled("t1", false, clock.Now(), "test").ok());
  ASSERT_TRUE(testing::WaitUntil(10, [&] { return !replica.leader() && etcd.OpenWatches() == 0; }))
      << "the leader did not step down, or its log thread did not leave its watch";
  // Stopped while it waits; the data dir takes writes again for the
  // committer's last try.
  replica.Stop([&] { replica.SetDiskRefusing(false); });
  // Published (its events follow the config's), and once: a repeat is a
  // sequence that does not rise.
  EXPECT_GT(history.Count(0, 1), before) << "the change was never published";
  EXPECT_EQ(history.error(), "");
}

}  // namespace
}  // namespace failover::sim
