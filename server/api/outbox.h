// What a server-streaming call has yet to send, in order, one write at a time
// (DESIGN 3.14, invariant 3). Shared by WatchEvents and FollowState streams:
// both queue an opening (a snapshot, a replay, a starting state) and live
// entries that may arrive before the opening is in place. Nothing is handed
// to gRPC before Open(): a live entry delivered meanwhile waits behind the
// opening, which goes to the front. Live entries count against a byte bound;
// opening entries do not (they are the stream's base).
//
// Not thread-safe: the owning stream calls it with its own lock held.
#pragma once

#include <cstddef>
#include <deque>
#include <utility>

#include "grpcpp/support/byte_buffer.h"

namespace failover::api {

template <typename Meta>
class Outbox {
 public:
  struct Entry {
    grpc::ByteBuffer wire;
    size_t bytes = 0;  // counted against the bound; 0 for opening entries
    Meta meta{};
  };

  // From now on entries may be written.
  void Open() { opened_ = true; }
  bool opened() const { return opened_; }

  // A live entry, after everything queued.
  void PushBack(Entry e) {
    live_bytes_ += e.bytes;
    queue_.push_back(std::move(e));
  }
  // Opening entries, in order, before everything queued (live entries that
  // came first included).
  template <typename It>
  void PushFront(It first, It last) {
    queue_.insert(queue_.begin(), std::make_move_iterator(first), std::make_move_iterator(last));
  }
  void PushFront(Entry e) { queue_.push_front(std::move(e)); }

  // Drops queued entries from the front while `drop(meta)` holds.
  template <typename Pred>
  void DropFrontWhile(Pred drop) {
    while (!queue_.empty() && drop(queue_.front().meta)) {
      live_bytes_ -= queue_.front().bytes;
      queue_.pop_front();
    }
  }
  // Drops the live entries at the back (the opening entries before them stay).
  void DropLive() {
    while (!queue_.empty() && queue_.back().bytes > 0) queue_.pop_back();
    live_bytes_ = 0;
  }
  void Clear() {
    queue_.clear();
    live_bytes_ = 0;
  }

  size_t size() const { return queue_.size(); }
  bool empty() const { return queue_.empty(); }
  size_t live_bytes() const { return live_bytes_; }
  bool writing() const { return writing_; }

  // The next entry to write, moved out of the queue, or null: nothing queued,
  // a write in flight, or not open yet. Pass it to StartWrite; it stays valid
  // until WriteDone.
  const grpc::ByteBuffer* Next() {
    if (!opened_ || writing_ || queue_.empty()) return nullptr;
    current_ = std::move(queue_.front());
    live_bytes_ -= current_.bytes;
    queue_.pop_front();
    writing_ = true;
    return &current_.wire;
  }
  // The write of the entry Next gave has completed; returns its meta.
  Meta WriteDone() {
    writing_ = false;
    current_.wire.Clear();
    return current_.meta;
  }

 private:
  std::deque<Entry> queue_;
  size_t live_bytes_ = 0;
  Entry current_;
  bool opened_ = false;
  bool writing_ = false;
};

}  // namespace failover::api
