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

// A peer token: what replicas relay outcomes with (their mark is trusted
// only from it); it may make decide calls and nothing more.
TEST(AuthorizerTest, APeerTokenIsPreferredForRelaysAndMayOnlyDecide) {
  testing::TempDir dir;
  auto auth = FromLines(dir, "admin root-secret\ndecide gateways decide-secret\npeer replicas peer-secret\n");
  ASSERT_NE(auth, nullptr);
  EXPECT_EQ(auth->TokenFor(Role::kPeer), "peer-secret");
  EXPECT_EQ(auth->TokenFor(Role::kDecide), "decide-secret");
  auto without_peer = FromLines(dir, "admin root-secret\ndecide gateways decide-secret\n");
  ASSERT_NE(without_peer, nullptr);
  EXPECT_EQ(without_peer->TokenFor(Role::kPeer), "decide-secret");  // then a decide token, then an admin one
  auto admin_only = FromLines(dir, "admin root-secret\n");
  ASSERT_NE(admin_only, nullptr);
  EXPECT_EQ(admin_only->TokenFor(Role::kPeer), "root-secret");
}

TEST(AuthorizerTest, AnUnknownRoleIsRefusedNamingTheLine) {
  testing::TempDir dir;
  const std::string path = dir.path() + "/tokens";
  std::ofstream(path) << "decide a-secret\nrelay b-secret\n";
  auto auth = Authorizer::FromFile(path);
  ASSERT_FALSE(auth.ok());
  EXPECT_NE(auth.status().message().find(":2: expected \"<decide|admin|peer> <token>\""), std::string::npos)
      << auth.status();
}

}  // namespace
}  // namespace failover::api
