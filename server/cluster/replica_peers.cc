#include "server/cluster/replica.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/trailers.h"
#include "failover/v1/decision.grpc.pb.h"
#include "grpcpp/generic/generic_stub.h"
#include "server/cluster/await_call.h"
#include "server/cluster/replica_internal.h"
#include "server/log/log.h"

namespace failover::cluster {

// --- the way to the leader ---

void Replica::SetLeaderAddress(std::string address) {
  std::lock_guard<std::mutex> lock(mu_);
  leader_address_ = std::move(address);
}

std::shared_ptr<grpc::Channel> Replica::LeaderChannel(std::string* address) const {
  std::lock_guard<std::mutex> lock(mu_);
  *address = leader_address_;
  if (leader_address_.empty()) return nullptr;
  auto& channel = channels_[leader_address_];
  if (!channel) {
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
    args.SetMaxReceiveMessageSize(-1);
    channel = grpc::CreateCustomChannel(leader_address_, peer_credentials_, args);
  }
  return channel;
}

grpc::Status Replica::Forward(const std::string& method, const grpc::ServerContextBase& call,
                              const grpc::ByteBuffer& request, grpc::ByteBuffer* response) {
  {
    // Cut off from etcd (nothing answered for a lease), this replica could
    // not show the change it asked for: it refuses, as the leader would. One
    // failed call that the next endpoint answered is not that.
    std::lock_guard<std::mutex> lock(mu_);
    if (!etcd_error_.empty() && Now() - etcd_answered_ > options_.lease) {
      return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                          absl::StrCat("this replica cannot reach etcd, so it makes no changes until it can: ",
                                       etcd_error_));
    }
  }
  std::string address;
  std::shared_ptr<grpc::Channel> channel = LeaderChannel(&address);
  if (address == advertise_) {
    // The leader key still names this replica, which has just stepped down
    // (or not yet taken up its term): a call to itself would only be refused.
    return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                        "this replica is not the cluster's leader (leadership is moving); try again");
  }
  if (!channel) {
    std::lock_guard<std::mutex> lock(mu_);
    return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                        absl::StrCat("the cluster has no leader right now, so changes cannot be made",
                                     etcd_error_.empty() ? "" : absl::StrCat(" (etcd: ", etcd_error_, ")")));
  }
  grpc::GenericStub stub(channel);
  grpc::ClientContext context;
  for (const auto& [key, value] : call.client_metadata()) {
    if (key == "authorization") context.AddMetadata("authorization", std::string(value.data(), value.size()));
  }
  context.AddMetadata(api::kForwardedHeader, "1");
  const auto cap = DeadlineIn(absl::Seconds(30));
  context.set_deadline(std::min(call.deadline(), cap));
  // On a completion queue of its own, on this thread: waiting in a gRPC
  // callback for a callback of the client API could take the last thread
  // gRPC's callbacks run on.
  grpc::CompletionQueue queue;
  grpc::Status result;
  std::unique_ptr<grpc::GenericClientAsyncResponseReader> pending =
      stub.PrepareUnaryCall(&context, method, request, &queue);
  pending->StartCall();
  pending->Finish(response, &result, &queue);
  void* tag = nullptr;
  bool ok = false;
  queue.Next(&tag, &ok);
  queue.Shutdown();
  while (queue.Next(&tag, &ok)) {
  }
  // Read your writes: answer once this replica has applied what the call changed.
  const auto& trailers = context.GetServerTrailingMetadata();
  if (auto index = trailers.find(api::kLogIndexTrailer); index != trailers.end()) {
    uint64_t needed = 0;
    if (absl::SimpleAtoi(absl::string_view(index->second.data(), index->second.size()), &needed)) {
      const auto left = std::chrono::duration_cast<std::chrono::nanoseconds>(call.deadline() -
                                                                             std::chrono::system_clock::now());
      WaitApplied(needed, std::min(absl::FromChrono(left), absl::Seconds(5)));
    }
  }
  if (result.error_code() == grpc::StatusCode::UNAVAILABLE &&
      context.GetServerTrailingMetadata().count(kAnsweredTrailer) == 0) {
    return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                        absl::StrCat("the cluster's leader at ", address, " did not answer: ", result.error_message()));
  }
  return result;
}

void Replica::PrepareLeaderCall(grpc::ClientContext* context) const {
  // Short: while a leader does not answer, followers must stop waiting on it soon.
  context->set_deadline(DeadlineIn(absl::Seconds(1)));
  if (!peer_token_.empty()) context->AddMetadata("authorization", "Bearer " + peer_token_);
  context->AddMetadata(api::kForwardedHeader, "1");
}

void Replica::DropOldestRelayedLocked() {
  if (relay_.front().acked) --relay_waited_;  // its caller stops waiting at its deadline
  relay_.pop_front();
  ++relay_dropped_;
}

void Replica::Relay(failover::v1::ReportOutcomeRequest report) {
  std::lock_guard<std::mutex> lock(mu_);
  if (relay_.size() >= options_.relay_limit) DropOldestRelayedLocked();
  relay_.push_back(Relayed{std::move(report), nullptr});
  if (relay_.size() == 1) relay_ready_.NotifyOne();
}

void Replica::RelayAndWait(failover::v1::ReportOutcomeRequest report, absl::Duration timeout) {
  if (!leader_reachable_.load()) return Relay(std::move(report));  // fail-static: no waiting on a lost leader
  const absl::Time deadline = Now() + timeout;
  auto acked = std::make_shared<Acked>();
  std::unique_lock<std::mutex> lock(mu_);
  if (relay_.size() >= options_.relay_limit) DropOldestRelayedLocked();
  relay_.push_back(Relayed{std::move(report), acked});
  ++relay_waited_;
  relay_ready_.NotifyOne();
  if (!changed_.WaitUntil(lock, deadline, [&] { return acked->done || stopping_.load(); })) return;
  changed_.WaitUntil(lock, deadline, [&] { return cursor_.applied() >= acked->log_index || stopping_.load(); });
}

void Replica::StampRelayed(failover::v1::ReportOutcomeRequest* report) {
  if (report->has_report_id()) return;
  report->mutable_report_id()->set_sender(relay_sender_);
  report->mutable_report_id()->set_sequence(++relay_sequence_);
}

grpc::Status Replica::SendToLeader(const std::shared_ptr<grpc::Channel>& channel, const std::string& address,
                                   const failover::v1::ReportOutcomesRequest& batch,
                                   failover::v1::StreamOutcomesResponse* summary) {
  auto stub = failover::v1::DecisionService::NewStub(channel);
  // One message for the batch: a stream would cost a write and a read a report
  // on both sides.
  const absl::Time now = Now();
  if (address != relay_streams_to_ || now >= relay_streams_until_) {
    grpc::ClientContext context;
    PrepareLeaderCall(&context);
    grpc::Status sent =
        AwaitCall([&](auto done) { stub->async()->ReportOutcomes(&context, &batch, summary, std::move(done)); });
    if (sent.error_code() != grpc::StatusCode::UNIMPLEMENTED) return sent;
    // A leader from before ReportOutcomes (a rolling upgrade) gets streams
    // for a while, not a refused call before each batch; asked again later,
    // as it may have been upgraded in place. The refusal counted nothing.
    relay_streams_to_ = address;
    relay_streams_until_ = now + kAskForBatchesAgain;
  }
  grpc::ClientContext context;
  PrepareLeaderCall(&context);
  auto writer = stub->StreamOutcomes(&context, summary);
  for (const failover::v1::ReportOutcomeRequest& report : batch.outcomes()) {
    if (!writer->Write(report)) break;
  }
  writer->WritesDone();
  return writer->Finish();
}

void Replica::RunRelay() {
  while (!stopping_.load()) {
    // The batch is built as the message that carries it; acked[i] (when set)
    // hears of outcome i's arrival.
    failover::v1::ReportOutcomesRequest batch;
    std::vector<std::shared_ptr<Acked>> acked;
    {
      std::unique_lock<std::mutex> lock(mu_);
      relay_ready_.WaitFor(lock, absl::Milliseconds(200), [&] { return stopping_.load() || !relay_.empty(); });
      // Background successes wait a moment for company (a call per outcome
      // would cost more than the outcome); one that is waited for goes at once.
      relay_ready_.WaitFor(lock, kRelayGather,
                           [&] { return stopping_.load() || relay_waited_ > 0 || relay_.size() >= relay_batch_; });
      // Background successes (ones that change nothing at the leader) on the
      // same target and chain travel as one report with a count; never across
      // an outcome that is waited for, so the order that matters is kept.
      std::map<std::pair<std::string, std::string>, int> merged;
      while (!relay_.empty() && acked.size() < relay_batch_) {
        Relayed next = std::move(relay_.front());
        relay_.pop_front();
        if (next.acked) --relay_waited_;
        const int size = batch.outcomes_size();
        // One with an id (sent before, or the caller's) keeps what the id stands for.
        if (next.acked || !next.report.has_success() || next.report.has_report_id()) {
          merged.clear();
        } else {
          auto [at, fresh] = merged.try_emplace({next.report.target(), next.report.chain()}, size);
          if (!fresh) {  // (a fresh entry's index is one past the end of the batch)
            failover::v1::ReportOutcomeRequest& into = *batch.mutable_outcomes(at->second);
            if (!into.has_report_id() && std::max<uint32_t>(into.count(), 1) < kMaxCount) {
              into.set_count(std::max<uint32_t>(into.count(), 1) + std::max<uint32_t>(next.report.count(), 1));
              continue;
            }
          }
          at->second = size;
        }
        *batch.add_outcomes() = std::move(next.report);
        acked.push_back(std::move(next.acked));
      }
    }
    if (acked.empty()) continue;
    for (failover::v1::ReportOutcomeRequest& report : *batch.mutable_outcomes()) StampRelayed(&report);
    std::string address;
    std::shared_ptr<grpc::Channel> channel = LeaderChannel(&address);
    grpc::Status sent(grpc::StatusCode::UNAVAILABLE, "no leader");
    if (channel) {
      failover::v1::StreamOutcomesResponse summary;
      sent = SendToLeader(channel, address, batch, &summary);
      if (sent.ok()) {
        std::lock_guard<std::mutex> lock(mu_);
        for (const std::shared_ptr<Acked>& waiting : acked) {
          if (!waiting) continue;
          waiting->done = true;
          waiting->log_index = summary.cluster_log_index();
        }
        changed_.NotifyAll();
      }
    }
    leader_reachable_ = sent.ok();
    // A batch the leader could not take within the deadline is sent again
    // smaller, or it would time out again and again while the leader counts it.
    if (sent.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
      relay_batch_ = std::max<size_t>(kRelayMinBatch, relay_batch_ / 2);
    } else if (sent.ok()) {
      relay_batch_ = std::min(kRelayBatch, relay_batch_ * 2);
    }
    if (!sent.ok()) {
      // Kept for the next leader (oldest first), up to the limit.
      std::lock_guard<std::mutex> lock(mu_);
      for (int i = batch.outcomes_size() - 1; i >= 0; --i) {
        if (acked[i]) ++relay_waited_;
        relay_.push_front(Relayed{std::move(*batch.mutable_outcomes(i)), std::move(acked[i])});
      }
      while (relay_.size() > options_.relay_limit) DropOldestRelayedLocked();
    }
    if (!sent.ok() && !SleepFor(absl::Milliseconds(200))) break;
  }
}

}  // namespace failover::cluster
