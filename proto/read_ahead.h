// A streamed gRPC call whose responses are read one ahead on gRPC's callback
// threads and handed to a thread of the caller's that waits for them: the
// etcd watch of a cluster replica, and the client library's FollowState.
//
// Why not a synchronous reader: a thread blocked inside a synchronous call
// polls for its whole process, so it picks up whatever else arrives (calls to
// a gRPC server in the same process among them) and hands each to gRPC's
// callback threads, a wake-up and a hand-off per call. Waiting on a condition
// variable leaves the polling to the callback threads.
//
// Read and Finish block, so they must never run on a gRPC callback thread.
#pragma once

#include <condition_variable>
#include <mutex>
#include <utility>

#include "grpcpp/client_context.h"
#include "grpcpp/support/client_callback.h"
#include "grpcpp/support/status.h"

namespace failover {

// `Reactor`: grpc::ClientReadReactor<Response> or
// grpc::ClientBidiReactor<Request, Response>. The owner starts the call on
// the stub's async() interface with this object, makes any writes, then calls
// StartReading; and calls Finish before `context` goes (its own destructor is
// the place: this class cannot, its owner's members are gone by then).
template <class Reactor, class Response>
class ReadAhead : public Reactor {
 public:
  // Reads the first response ahead and starts the call.
  void StartReading(grpc::ClientContext* context) {
    context_ = context;
    reading_ = true;
    this->StartRead(&incoming_);
    holding_ = true;  // released when reads end, or by Finish
    this->AddHold();
    this->StartCall();
  }

  // The next response as the server sent it; false once the stream is over.
  bool Read(Response* response) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      changed_.wait(lock, [&] { return arrived_ || reads_over_; });
      if (!arrived_) return false;
      *response = std::move(incoming_);
      arrived_ = false;
      reading_ = true;
    }
    this->StartRead(&incoming_);
    return true;
  }

  // Ends the call (cancelling it if still open), waits until gRPC is done
  // with this object, and returns the call's status. Safe to call again.
  grpc::Status Finish() {
    context_->TryCancel();
    std::unique_lock<std::mutex> lock(mu_);
    // A read in flight ends (cancelled) and releases the hold itself.
    changed_.wait(lock, [&] { return !reading_; });
    if (std::exchange(holding_, false)) {
      lock.unlock();
      this->RemoveHold();
      lock.lock();
    }
    changed_.wait(lock, [&] { return done_; });
    return final_;
  }

 private:
  void OnReadDone(bool ok) override {
    bool release = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      reading_ = false;
      if (ok) {
        arrived_ = true;
      } else {
        reads_over_ = true;
        release = std::exchange(holding_, false);
      }
      changed_.notify_all();
    }
    if (release) this->RemoveHold();
  }

  void OnDone(const grpc::Status& status) override {
    // Notified under the lock: once it is released, this object may be gone.
    std::lock_guard<std::mutex> lock(mu_);
    final_ = status;
    done_ = true;
    changed_.notify_all();
  }

  grpc::ClientContext* context_ = nullptr;
  Response incoming_;  // the read in flight writes here
  std::mutex mu_;
  std::condition_variable changed_;
  bool reading_ = false;     // a read is in flight
  bool arrived_ = false;     // incoming_ holds a response Read has not taken
  bool reads_over_ = false;  // a read failed: nothing more will arrive
  bool holding_ = false;     // the hold that lets Read start the next read
  bool done_ = false;        // OnDone ran: gRPC is finished with this object
  grpc::Status final_;
};

}  // namespace failover
