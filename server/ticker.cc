#include "server/ticker.h"

#include "absl/strings/str_cat.h"
#include "server/log/log.h"

namespace failover {

Ticker::Ticker(Engine* engine, const Clock* clock, storage::Store* store, size_t events_keep,
               absl::Duration events_max_age, std::function<void()> every_tick)
    : engine_(engine),
      clock_(clock),
      store_(store),
      events_keep_(events_keep),
      events_max_age_(events_max_age),
      every_tick_(std::move(every_tick)),
      thread_([this] { Run(); }) {}

Ticker::~Ticker() { Stop(); }

void Ticker::Stop() {
  {
    absl::MutexLock lock(&mu_);
    if (stop_ && !thread_.joinable()) return;
    stop_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

void Ticker::Run() {
  absl::MutexLock lock(&mu_);
  for (int tick = 1; !mu_.AwaitWithTimeout(absl::Condition(&stop_), absl::Seconds(1)); ++tick) {
    mu_.Unlock();
    Events events;
    engine_->Tick(clock_->Now(), &events);
    if (every_tick_) every_tick_();
    if (tick % 60 == 0) {
      const absl::Status trimmed = store_->TrimEvents(events_keep_, events_max_age_, clock_->Now());
      if (!trimmed.ok()) log::Error(absl::StrCat("event retention failed: ", trimmed.message()));
    }
    mu_.Lock();
  }
}

}  // namespace failover
