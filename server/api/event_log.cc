#include "server/api/event_log.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "server/api/convert.h"
#include "server/api/wire.h"
#include "server/log/log.h"

namespace failover::api {
namespace {

const char* ChangeName(ConfigChangeKind c) {
  switch (c) {
    case ConfigChangeKind::kCreated: return "created";
    case ConfigChangeKind::kUpdated: return "updated";
    case ConfigChangeKind::kDeleted: return "deleted";
    case ConfigChangeKind::kUnchanged: return "unchanged";
  }
  return "changed";
}

const char* ObjectName(ConfigObject o) {
  switch (o) {
    case ConfigObject::kTarget: return "target";
    case ConfigObject::kChain: return "chain";
    case ConfigObject::kPin: return "pin";
  }
  return "object";
}

}  // namespace

EventLog::EventLog(size_t keep_recent, uint64_t last_sequence)
    : keep_recent_(keep_recent), last_sequence_(last_sequence) {}

std::string EventLog::Describe(const Event& e) {
  switch (e.kind) {
    case EventKind::kChainSwitched: {
      std::string line = absl::StrCat("chain ", e.chain, ": ", e.from_target.empty() ? "(none)" : e.from_target,
                                      " -> ", e.to_target, " (", SwitchReasonName(e.switch_reason));
      if (!e.detail.empty()) absl::StrAppend(&line, ": ", e.detail);
      absl::StrAppend(&line, ") state ", ChainStateName(e.from_chain_state), " -> ", ChainStateName(e.to_chain_state));
      return line;
    }
    case EventKind::kTargetState:
      return absl::StrCat("target ", e.target, ": ", HealthStateName(e.from_health), " -> ",
                          HealthStateName(e.to_health), " (", SourceName(e.source),
                          e.reason.empty() ? "" : ": ", e.reason, ")");
    case EventKind::kConfigChanged:
      return absl::StrCat("config: ", ObjectName(e.what), " ", e.object_name, " ", ChangeName(e.change),
                          " (generation ", e.generation, ")");
  }
  return "event";
}

log::Fields EventLog::JsonFields(const Event& e) {
  // The Event message's field names (snake_case, as the rest of the log), its
  // oneof's name as "event", and enum values in the short form the text uses.
  log::Fields f = {{"seq", e.sequence}};
  switch (e.kind) {
    case EventKind::kChainSwitched:
      f.insert(f.end(), {{"event", "chain_switched"},
                         {"chain", e.chain},
                         {"from_target", e.from_target},
                         {"to_target", e.to_target},
                         {"from_state", ChainStateName(e.from_chain_state)},
                         {"to_state", ChainStateName(e.to_chain_state)},
                         {"reason", SwitchReasonName(e.switch_reason)}});
      if (!e.detail.empty()) f.emplace_back("detail", e.detail);
      break;
    case EventKind::kTargetState:
      f.insert(f.end(), {{"event", "target_state"},
                         {"target", e.target},
                         {"from_state", HealthStateName(e.from_health)},
                         {"to_state", HealthStateName(e.to_health)},
                         {"source", SourceName(e.source)}});
      if (!e.reason.empty()) f.emplace_back("reason", e.reason);
      if (!e.last_error.empty()) f.emplace_back("last_error", e.last_error);
      break;
    case EventKind::kConfigChanged:
      f.insert(f.end(), {{"event", "config_changed"},
                         {"what", ObjectName(e.what)},
                         {"name", e.object_name},
                         {"change", ChangeName(e.change)},
                         {"generation", e.generation}});
      break;
  }
  if (!e.actor.empty()) f.emplace_back("actor", e.actor);
  return f;
}

void EventLog::Preload(Events events) {
  std::lock_guard<std::mutex> lock(mu_);
  for (Event& e : events) {
    recent_.push_back(std::move(e));
    if (recent_.size() > keep_recent_) recent_.pop_front();
  }
}

void EventLog::SkipTo(uint64_t next_sequence) {
  std::lock_guard<std::mutex> lock(mu_);
  if (next_sequence <= last_sequence_ + 1) return;
  log::Info("events skipped: this replica took the cluster's state in their place; watchers get it whole",
            {{"from", last_sequence_ + 1}, {"to", next_sequence - 1}});
  last_sequence_ = next_sequence - 1;
  for (Watcher* w : watchers_) w->Resync();
}

void EventLog::Publish(const Events& events) {
  if (events.empty()) return;
  std::lock_guard<std::mutex> lock(mu_);
  const bool logged = log::Enabled(log::Level::kInfo);
  for (const Event& e : events) {
    last_sequence_ = e.sequence;
    if (logged) {
      if (log::JsonLines()) {
        log::Info(Describe(e), JsonFields(e));
      } else if (e.actor.empty()) {
        log::Info(Describe(e), {{"seq", e.sequence}});
      } else {
        log::Info(Describe(e), {{"seq", e.sequence}, {"by", e.actor}});
      }
    }
  }
  if (!watchers_.empty()) {
    // One conversion and serialization per event, however many watchers.
    std::vector<grpc::ByteBuffer> wire(events.size());
    for (size_t i = 0; i < events.size(); ++i) {
      v1::Event proto;
      EventToProto(events[i], &proto);
      (void)SerializeMessage(proto, &wire[i]);
    }
    for (Watcher* w : watchers_) w->Deliver(events, wire);
  }
  for (const Event& e : events) {
    recent_.push_back(e);
    if (recent_.size() > keep_recent_) recent_.pop_front();
  }
}

void EventLog::PublishShadow(const std::vector<ShadowEvent>& events) {
  if (events.empty()) return;
  for (const ShadowEvent& s : events) log::Info(absl::StrCat("shadow ", s.shadow, ": ", Describe(s.event)));
  std::lock_guard<std::mutex> lock(mu_);
  if (watchers_.empty()) return;
  std::vector<grpc::ByteBuffer> wire(events.size());
  for (size_t i = 0; i < events.size(); ++i) {
    v1::Event proto;
    EventToProto(events[i].event, &proto);
    proto.set_shadow(events[i].shadow);
    (void)SerializeMessage(proto, &wire[i]);
  }
  for (Watcher* w : watchers_) w->DeliverShadow(events, wire);
}

std::vector<Event> EventLog::Recent(size_t limit, const std::function<bool(const Event&)>& match) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<Event> out;
  for (auto it = recent_.rbegin(); it != recent_.rend() && out.size() < limit; ++it) {
    if (match(*it)) out.push_back(*it);
  }
  return std::vector<Event>(out.rbegin(), out.rend());
}

absl::StatusOr<std::vector<Event>> EventLog::After(uint64_t after, size_t limit,
                                                   const std::function<bool(const Event&)>& match) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<Event> out;
  uint64_t expect = after + 1;  // every number up to the last one answered must be here
  auto missing = [&] {
    return absl::OutOfRangeError(absl::StrCat(
        "after_sequence: event ", expect, " is not kept here (",
        recent_.empty() ? std::string("no events are kept in memory")
                        : absl::StrCat("the recent events in memory run from ", recent_.front().sequence, " to ",
                                       recent_.back().sequence, " with gaps where a cluster snapshot was installed"),
        "); WatchEvents with after_sequence replays the stored log, or resyncs"));
  };
  for (auto it = recent_.begin(); it != recent_.end() && out.size() < limit; ++it) {
    if (it->sequence <= after) continue;
    if (it->sequence != expect) return missing();
    ++expect;
    if (match(*it)) out.push_back(*it);
  }
  if (out.size() < limit && expect <= last_sequence_) return missing();
  return out;
}

absl::StatusOr<uint64_t> EventLog::Subscribe(Watcher* w, size_t max_watchers) {
  std::lock_guard<std::mutex> lock(mu_);
  if (closed_) return absl::UnavailableError("failoverd is shutting down; watch again once it is back");
  if (watchers_.size() >= max_watchers) {
    return absl::ResourceExhaustedError(
        absl::StrCat("watchers: at most ", max_watchers, " WatchEvents streams at once (--max-watchers)"));
  }
  watchers_.push_back(w);
  return last_sequence_;
}

void EventLog::Unsubscribe(Watcher* w) {
  std::lock_guard<std::mutex> lock(mu_);
  watchers_.erase(std::remove(watchers_.begin(), watchers_.end(), w), watchers_.end());
}

void EventLog::CloseWatchers() {
  std::lock_guard<std::mutex> lock(mu_);
  closed_ = true;
  for (Watcher* w : watchers_) w->Close();
}

void EventLog::DropStalled() {
  std::vector<std::function<void()>> drops;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (Watcher* w : watchers_) {
      if (auto drop = w->StalledDrop()) drops.push_back(std::move(drop));
    }
  }
  // Outside the lock: ending a stream can run its OnDone, which unsubscribes.
  for (auto& drop : drops) drop();
}

size_t EventLog::watcher_count() const {
  std::lock_guard<std::mutex> lock(mu_);
  return watchers_.size();
}

uint64_t EventLog::last_sequence() const {
  std::lock_guard<std::mutex> lock(mu_);
  return last_sequence_;
}

}  // namespace failover::api
