// Keeps gRPC's listener alive when the process runs out of descriptors.
//
// gRPC 1.51's TCP listener treats any accept4() error other than EAGAIN as
// fatal and stops listening for good: one moment at the descriptor limit
// leaves failoverd running but unreachable. failoverd defines accept4() itself
// (the executable's definition wins over libc's for libgrpc): on EMFILE or
// ENFILE it frees a descriptor held in reserve, accepts and closes each
// pending connection (the client sees a reset and retries instead of hanging
// in the backlog), takes the reserve back, and tells gRPC to wait for the next
// connection (EAGAIN). Once descriptors are free again, connections are
// accepted as before.
#pragma once

namespace failover {

// Takes the reserve descriptor and turns the guard on. Call once at start,
// before the server listens.
void InstallAcceptGuard();

}  // namespace failover
