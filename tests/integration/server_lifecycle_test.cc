// The real failoverd binary: it serves health and reflection, refuses a data
// dir another process holds, and shuts down cleanly on SIGTERM.
#include <signal.h>
#include <sys/wait.h>

#include <set>
#include <string>

#include "gmock/gmock.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpc/reflection/v1alpha/reflection.grpc.pb.h"
#include "gtest/gtest.h"
#include "tests/support/failoverd_process.h"

namespace failover::testing {
namespace {

using grpc::health::v1::HealthCheckRequest;
using grpc::health::v1::HealthCheckResponse;
using ::testing::IsSupersetOf;

std::chrono::system_clock::time_point Deadline() {
  return std::chrono::system_clock::now() + std::chrono::seconds(10);
}

HealthCheckResponse::ServingStatus Health(const FailoverdProcess& p, const std::string& service) {
  auto stub = grpc::health::v1::Health::NewStub(p.Channel());
  grpc::ClientContext ctx;
  ctx.set_deadline(Deadline());
  HealthCheckRequest req;
  req.set_service(service);
  HealthCheckResponse resp;
  grpc::Status s = stub->Check(&ctx, req, &resp);
  EXPECT_TRUE(s.ok()) << s.error_message();
  return resp.status();
}

std::set<std::string> ReflectedServices(const FailoverdProcess& p) {
  auto stub = grpc::reflection::v1alpha::ServerReflection::NewStub(p.Channel());
  grpc::ClientContext ctx;
  ctx.set_deadline(Deadline());
  auto stream = stub->ServerReflectionInfo(&ctx);
  grpc::reflection::v1alpha::ServerReflectionRequest req;
  req.set_list_services("");
  EXPECT_TRUE(stream->Write(req));
  stream->WritesDone();
  grpc::reflection::v1alpha::ServerReflectionResponse resp;
  std::set<std::string> names;
  while (stream->Read(&resp)) {
    for (const auto& s : resp.list_services_response().service()) names.insert(s.name());
  }
  EXPECT_TRUE(stream->Finish().ok());
  return names;
}

TEST(ServerLifecycleTest, ServesHealthAndReflectionThenStopsCleanlyOnSigterm) {
  TempDir data;
  FailoverdProcess proc({data.path(), {}});
  std::string error;
  ASSERT_TRUE(proc.Start(&error)) << error;

  EXPECT_EQ(Health(proc, ""), HealthCheckResponse::SERVING);
  EXPECT_EQ(Health(proc, "failover.v1.DecisionService"), HealthCheckResponse::SERVING);
  EXPECT_EQ(Health(proc, "failover.v1.AdminService"), HealthCheckResponse::SERVING);
  EXPECT_THAT(ReflectedServices(proc),
              IsSupersetOf({"failover.v1.DecisionService", "failover.v1.AdminService",
                            "grpc.health.v1.Health"}));

  const int status = proc.Stop(SIGTERM);
  ASSERT_NE(status, -1) << "failoverd did not exit after SIGTERM";
  ASSERT_TRUE(WIFEXITED(status)) << proc.Stderr();
  EXPECT_EQ(WEXITSTATUS(status), 0) << proc.Stderr();
  EXPECT_THAT(proc.Stderr(), ::testing::HasSubstr("stopped cleanly"));
}

TEST(ServerLifecycleTest, SigintAlsoStopsCleanly) {
  TempDir data;
  FailoverdProcess proc({data.path(), {}});
  std::string error;
  ASSERT_TRUE(proc.Start(&error)) << error;
  const int status = proc.Stop(SIGINT);
  ASSERT_TRUE(WIFEXITED(status)) << proc.Stderr();
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

TEST(ServerLifecycleTest, SecondProcessOnTheSameDataDirIsRefusedAndNamesTheDir) {
  TempDir data;
  FailoverdProcess first({data.path(), {}});
  std::string error;
  ASSERT_TRUE(first.Start(&error)) << error;

  FailoverdProcess second({data.path(), {}});
  EXPECT_FALSE(second.Start(&error));
  EXPECT_THAT(error, ::testing::HasSubstr(data.path()));
  EXPECT_THAT(error, ::testing::HasSubstr("in use by another failoverd"));
  // The first one is unharmed.
  EXPECT_EQ(Health(first, ""), HealthCheckResponse::SERVING);
}

TEST(ServerLifecycleTest, FailoverctlHealthReportsServingAndExit3WhenUnreachable) {
  TempDir data;
  FailoverdProcess proc({data.path(), {}});
  std::string error;
  ASSERT_TRUE(proc.Start(&error)) << error;
  CommandResult ok = RunCommand({FailoverctlBinary(), "--server", proc.address(), "health"});
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_EQ(ok.out, "SERVING\n");

  const std::string addr = proc.address();
  ASSERT_NE(proc.Stop(SIGTERM), -1);
  CommandResult down = RunCommand({FailoverctlBinary(), "--server", addr, "--timeout", "1", "health"});
  EXPECT_EQ(down.exit_code, 3) << down.err;
}

TEST(ServerLifecycleTest, BadFlagIsAUsageErrorNamingTheFlag) {
  CommandResult r = RunCommand({FailoverdBinary(), "--log-level", "loud"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.err + r.out, ::testing::HasSubstr("--log-level"));
}

}  // namespace
}  // namespace failover::testing
