// libFuzzer target: any bytes as the request of any RPC. The first byte picks
// the RPC; the rest is its request as it would arrive on the wire. Beyond not
// crashing, a refused request must leave the config as it was, and whatever
// it did, everything failoverd then sends (the status of every target and
// chain, the event log) must still be a valid message: UTF-8 strings.
#include <cstddef>
#include <cstdint>

#include "fuzz/request_world.h"
#include "google/protobuf/stubs/logging.h"
#include "server/log/log.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  grpc_init();  // ByteBuffer and Slice need gRPC's core
  failover::log::Configure(failover::log::Level::kError, /*json=*/false);  // events are logged at info
  google::protobuf::SetLogHandler(nullptr);  // libprotobuf's complaint about each invalid UTF-8 input
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using failover::fuzz::Methods;
  if (size == 0) return 0;
  const failover::fuzz::Method& method = Methods()[data[0] % Methods().size()];
  grpc::Slice slice(data + 1, size - 1);
  const grpc::ByteBuffer request(&slice, 1);
  failover::fuzz::World world;  // fresh for every input, so a crash reproduces from its input alone
  const uint64_t generation = world.engine.generation();
  const absl::Status status = method.run(world, request, nullptr);
  if (!status.ok() && world.engine.generation() != generation) __builtin_trap();
  if (!failover::fuzz::EverythingSentIsValid(world)) __builtin_trap();
  return 0;
}
