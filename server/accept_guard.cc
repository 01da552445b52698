#include "server/accept_guard.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <mutex>

#include "server/log/log.h"

namespace failover {
namespace {

std::mutex reserve_mu;
int reserve_fd = -1;             // guarded by reserve_mu
uint64_t closed_at_limit = 0;    // guarded by reserve_mu: connections closed in this episode
std::atomic<bool> installed{false};
std::atomic<bool> at_limit{false};  // an episode at the limit is going on (logged once)

int RawAccept4(int fd, sockaddr* addr, socklen_t* len, int flags) {
  return static_cast<int>(syscall(SYS_accept4, fd, addr, len, flags));
}

uint64_t DescriptorLimit() {
  rlimit limit{};
  return getrlimit(RLIMIT_NOFILE, &limit) == 0 ? limit.rlim_cur : 0;
}

// At the limit: drain the listener's backlog through the reserve descriptor.
// Returns how many connections were closed.
uint64_t ShedPending(int listener) {
  uint64_t shed = 0;
  while (reserve_fd >= 0) {
    close(reserve_fd);
    reserve_fd = -1;
    const int fd = RawAccept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
    const int accept_errno = errno;
    if (fd >= 0) {
      close(fd);
      ++shed;
    }
    reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (fd < 0 && accept_errno != EINTR) break;  // the backlog is empty (or the reserve was too few)
  }
  return shed;
}

}  // namespace

void InstallAcceptGuard() {
  std::lock_guard<std::mutex> lock(reserve_mu);
  if (reserve_fd < 0) reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  installed = true;
}

}  // namespace failover

// Interposes libc's accept4 for every caller in the process (gRPC is the only
// one); behaves exactly like it unless descriptors run out.
extern "C" __attribute__((visibility("default"))) int accept4(int fd, sockaddr* addr, socklen_t* len, int flags) {
  using namespace failover;
  const int accepted = RawAccept4(fd, addr, len, flags);
  if (accepted >= 0) {
    if (at_limit.load(std::memory_order_relaxed)) {
      std::lock_guard<std::mutex> lock(reserve_mu);
      if (at_limit.exchange(false)) {
        log::Info("accepting connections again: descriptors are free", {{"connections_closed", closed_at_limit}});
        closed_at_limit = 0;
      }
    }
    return accepted;
  }
  if ((errno != EMFILE && errno != ENFILE) || !installed) return accepted;
  const int cause = errno;
  std::lock_guard<std::mutex> lock(reserve_mu);
  const uint64_t closed = ShedPending(fd);
  closed_at_limit += closed;
  if (!at_limit.exchange(true)) {
    log::Error(cause == EMFILE ? "out of file descriptors: closing new connections until some are free"
                               : "the system is out of file descriptors: closing new connections until some are free",
               {{"nofile", DescriptorLimit()}, {"closed", closed}});
  }
  errno = EAGAIN;  // gRPC waits for the next connection instead of closing its listener
  return -1;
}
