// The tokens file as the service reads it.
#include "server/api/auth.h"

#include <fstream>

#include "gtest/gtest.h"
#include "tests/support/failoverd_process.h"

namespace failover::api {
namespace {

std::unique_ptr<Authorizer> FromLines(const testing::TempDir& dir, const std::string& lines) {
  const std::string path = dir.path() + "/tokens";
  std::ofstream(path) << lines;
  auto auth = Authorizer::FromFile(path);
  EXPECT_TRUE(auth.ok()) << auth.status();
  return auth.ok() ? std::move(auth).value() : nullptr;
}

// Replicas relay reports with the least powerful token that will do.
TEST(AuthorizerTest, ThePeerTokenIsADecideTokenWhenTheFileHasOne) {
  testing::TempDir dir;
  auto auth = FromLines(dir, "admin root-secret\ndecide gateways decide-secret\n");
  ASSERT_NE(auth, nullptr);
  EXPECT_EQ(auth->TokenFor(Role::kDecide), "decide-secret");
  EXPECT_EQ(auth->TokenFor(Role::kAdmin), "root-secret");
}

TEST(AuthorizerTest, AnAdminTokenServesWhenThereIsNoDecideToken) {
  testing::TempDir dir;
  auto auth = FromLines(dir, "admin root-secret\n");
  ASSERT_NE(auth, nullptr);
  EXPECT_EQ(auth->TokenFor(Role::kDecide), "root-secret");
}

}  // namespace
}  // namespace failover::api
