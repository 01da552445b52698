// The cluster's log cursor (server/cluster/log_cursor.h): the indexes a
// replica keeps and the steps that move them.
#include "server/cluster/log_cursor.h"

#include <atomic>
#include <thread>

#include "gtest/gtest.h"

namespace failover::cluster {
namespace {

using Place = LogCursor::Place;

TEST(LogCursorTest, ALeaderStampsThePlacesAfterWhatItAppliedAndADeposedOneNone) {
  LogCursor cursor;
  cursor.Start(5);
  EXPECT_EQ(cursor.Stamp(), kNotInTheLog);  // a follower places nothing
  EXPECT_EQ(cursor.applied(), 5u);
  cursor.Lead();
  EXPECT_EQ(cursor.Stamp(), 6u);
  EXPECT_EQ(cursor.Stamp(), 7u);
  cursor.Depose();
  EXPECT_EQ(cursor.Stamp(), kNotInTheLog);
  EXPECT_EQ(cursor.applied(), 7u);
  // Only 6 was written: back to the log, whose next entry is 7 again.
  cursor.Written(6);
  cursor.Reset(6);
  EXPECT_EQ(cursor.applied(), 6u);
  EXPECT_EQ(cursor.in_etcd(), 6u);
  EXPECT_EQ(cursor.PlaceOf(7), Place::kNext);
  EXPECT_EQ(cursor.Stamp(), kNotInTheLog);  // a reset does not lead again
}

TEST(LogCursorTest, EntriesAreHeldMadeThisTermNextOrPastAGap) {
  LogCursor cursor;
  cursor.Start(3);
  EXPECT_EQ(cursor.PlaceOf(2), Place::kHeld);
  EXPECT_EQ(cursor.PlaceOf(3), Place::kHeld);
  EXPECT_EQ(cursor.PlaceOf(4), Place::kNext);
  EXPECT_EQ(cursor.PlaceOf(6), Place::kGap);
  cursor.Lead();
  EXPECT_EQ(cursor.Stamp(), 4u);
  EXPECT_EQ(cursor.PlaceOf(3), Place::kHeld);  // before the term
  EXPECT_EQ(cursor.PlaceOf(4), Place::kMadeThisTerm);
  EXPECT_EQ(cursor.PlaceOf(5), Place::kNext);
  cursor.Depose();
  cursor.Reset(3);
  EXPECT_EQ(cursor.PlaceOf(4), Place::kNext);  // another leader's entry 4 is applied, not taken as this one's
}

TEST(LogCursorTest, AStampRacingADeposeNeverLeavesTheCursorPastTheLog) {
  // The engine's writer stamps while the session steps down and the log
  // thread resets: once Depose has returned, nothing moves the cursor again,
  // so the reset's index stands and the next real entry is applied, not skipped.
  for (int round = 0; round < 200; ++round) {
    LogCursor cursor;
    cursor.Start(10);
    cursor.Lead();
    std::atomic<bool> deposed{false};
    std::atomic<int> stamped_after{0};
    std::thread writer([&] {
      for (int i = 0; i < 50; ++i) {
        const bool was_deposed = deposed.load();
        if (cursor.Stamp() != kNotInTheLog && was_deposed) stamped_after.fetch_add(1);
      }
    });
    cursor.Depose();
    deposed = true;
    cursor.Reset(10);
    writer.join();
    EXPECT_EQ(stamped_after.load(), 0) << "round " << round;
    EXPECT_EQ(cursor.applied(), 10u) << "round " << round;
    EXPECT_EQ(cursor.PlaceOf(11), Place::kNext) << "round " << round;
  }
}

TEST(LogCursorTest, AStuckEntryIsPassedOnceTheCursorGetsBeyondIt) {
  LogCursor cursor;
  cursor.Start(3);
  EXPECT_FALSE(cursor.StuckOnNext());
  cursor.Stuck(4);
  EXPECT_TRUE(cursor.StuckOnNext());
  EXPECT_FALSE(cursor.PassedStuck());
  cursor.AppliedThrough(9);  // a snapshot past it
  EXPECT_FALSE(cursor.StuckOnNext());
  EXPECT_TRUE(cursor.PassedStuck());
  EXPECT_FALSE(cursor.PassedStuck());  // said once
  EXPECT_EQ(cursor.stuck(), 0u);
}

TEST(LogCursorTest, WhatWasSeenWrittenAndSnapshottedOnlyRises) {
  LogCursor cursor;
  cursor.Start(3);
  cursor.Saw(9);
  cursor.Saw(5);  // a catch-up page after the watch saw more
  EXPECT_EQ(cursor.seen(), 9u);
  EXPECT_EQ(cursor.lag(), 6u);
  cursor.AppliedThrough(9);
  EXPECT_EQ(cursor.lag(), 0u);
  EXPECT_EQ(cursor.in_etcd(), 9u);
  cursor.Written(12);
  cursor.Written(10);
  EXPECT_EQ(cursor.in_etcd(), 12u);
  cursor.DeliveredThrough(40);
  cursor.DeliveredThrough(30);
  EXPECT_EQ(cursor.applied_revision(), 40);
  cursor.KnowSnapshot(100);
  cursor.KnowSnapshot(50);
  EXPECT_EQ(cursor.snapshot(), 100u);
  EXPECT_FALSE(cursor.DueForSnapshot(150, 100));
  EXPECT_TRUE(cursor.DueForSnapshot(200, 100));
}

}  // namespace
}  // namespace failover::cluster
