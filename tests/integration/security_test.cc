// Bearer tokens with two roles, and TLS, through the real binaries.
#include <signal.h>

#include <cstdio>
#include <fstream>

#include "absl/strings/str_split.h"
#include "client/connection.h"
#include "gmock/gmock.h"
#include "tests/support/api_test.h"

namespace failover::testing {
namespace {

using ::testing::HasSubstr;

TEST(SecurityTest, TokensHaveTwoRolesAndHealthStaysOpen) {
  TempDir data, secrets;
  const std::string tokens = secrets.path() + "/tokens";
  std::ofstream(tokens) << "# role token\nadmin adm-secret\ndecide dec-secret\npeer peer-secret\n";
  FailoverdProcess proc({data.path(), {"--tokens-file", tokens}});
  std::string error;
  ASSERT_TRUE(proc.Start(&error)) << error;
  auto ctl = [&](std::vector<std::string> args, std::vector<std::string> env = {}) {
    args.insert(args.begin(), {FailoverctlBinary(), "--server", proc.address()});
    return RunCommand(args, env);
  };
  CommandResult none = ctl({"get", "chains"});
  EXPECT_EQ(none.exit_code, 1);
  EXPECT_THAT(none.err, HasSubstr("missing bearer token"));
  CommandResult wrong = ctl({"--token", "guess", "get", "chains"});
  EXPECT_THAT(wrong.err, HasSubstr("unknown bearer token"));
  CommandResult decide_on_admin = ctl({"--token", "dec-secret", "get", "chains"});
  EXPECT_EQ(decide_on_admin.exit_code, 1);
  EXPECT_THAT(decide_on_admin.err, HasSubstr("admin calls need an admin token"));
  CommandResult decide_ok = ctl({"pick", "nope"}, {"FAILOVERD_TOKEN=dec-secret"});
  EXPECT_THAT(decide_ok.err, HasSubstr("chain \"nope\" not found"));  // authorized, then refused on its merits
  EXPECT_EQ(ctl({"get", "chains"}, {"FAILOVERD_TOKEN=adm-secret"}).exit_code, 0);
  EXPECT_EQ(ctl({"pick", "nope"}, {"FAILOVERD_TOKEN=adm-secret"}).exit_code, 1);  // admin may decide too
  // A peer token (cluster replicas relay with it) decides, and is no admin.
  EXPECT_THAT(ctl({"pick", "nope"}, {"FAILOVERD_TOKEN=peer-secret"}).err, HasSubstr("chain \"nope\" not found"));
  EXPECT_THAT(ctl({"get", "chains"}, {"FAILOVERD_TOKEN=peer-secret"}).err, HasSubstr("admin calls need an admin token"));
  EXPECT_EQ(ctl({"health"}).out, "SERVING\n");
  CommandResult watch = ctl({"watch", "--max-events", "1"});
  EXPECT_EQ(watch.exit_code, 1);
  EXPECT_THAT(watch.err, HasSubstr("missing bearer token"));
}

// Admin events and logs say who did it: a named token's name, else the
// caller's address; kept across a restart.
TEST(SecurityTest, NamedTokensAreRecordedOnTheEventsTheirCallsCause) {
  TempDir data, secrets;
  const std::string tokens = secrets.path() + "/tokens";
  std::ofstream(tokens) << "admin alice alice-secret\nadmin unnamed-secret\ndecide gateway gw-secret\n";
  const std::string config = secrets.path() + "/chains.yaml";
  std::ofstream(config) << "targets:\n  - name: a\n  - name: b\nchains:\n  - name: ch\n    targets: [a, b]\n";
  auto start = [&](FailoverdProcess* proc) {
    std::string error;
    ASSERT_TRUE(proc->Start(&error)) << error;
  };
  auto proc = std::make_unique<FailoverdProcess>(FailoverdProcess::Options{data.path(), {"--tokens-file", tokens}});
  ASSERT_NO_FATAL_FAILURE(start(proc.get()));
  auto ctl = [&](const std::string& token, std::vector<std::string> args) {
    args.insert(args.begin(), {FailoverctlBinary(), "--server", proc->address(), "--token", token});
    return RunCommand(args);
  };
  ASSERT_EQ(ctl("alice-secret", {"apply", "-f", config}).exit_code, 0);
  ASSERT_EQ(ctl("unnamed-secret", {"pin", "ch", "b"}).exit_code, 0);
  CommandResult events = ctl("gw-secret", {"events"});  // a decide token may read events
  ASSERT_EQ(events.exit_code, 0) << events.err;
  EXPECT_THAT(events.out, HasSubstr("config: chain ch created (generation 1) by alice"));
  EXPECT_THAT(events.out, ::testing::ContainsRegex("pinned to b\\) state primary -> pinned by ipv4:127\\.0\\.0\\.1:[0-9]+"));
  EXPECT_THAT(proc->Stderr(), HasSubstr("config: chain ch created (generation 1) seq=3 by=alice"));
  EXPECT_THAT(proc->Stderr(), ::testing::Not(HasSubstr("alice-secret")));

  ASSERT_EQ(proc->Stop(SIGTERM), 0);
  proc = std::make_unique<FailoverdProcess>(FailoverdProcess::Options{data.path(), {"--tokens-file", tokens}});
  ASSERT_NO_FATAL_FAILURE(start(proc.get()));
  EXPECT_THAT(ctl("alice-secret", {"events"}).out, HasSubstr("config: chain ch created (generation 1) by alice"));
}

TEST(SecurityTest, ATokenNameMustBeSimple) {
  TempDir data, secrets;
  const std::string tokens = secrets.path() + "/tokens";
  std::ofstream(tokens) << "admin alice alice-secret\nadmin al!ce x-secret\n";
  FailoverdProcess proc({data.path(), {"--tokens-file", tokens}});
  std::string error;
  EXPECT_FALSE(proc.Start(&error));
  EXPECT_THAT(error, HasSubstr(tokens + ":2: a token's name is 1..64 characters of A-Za-z0-9._@-"));
}

TEST(SecurityTest, ABadTokensFileStopsFailoverd) {
  TempDir data, secrets;
  const std::string tokens = secrets.path() + "/tokens";
  std::ofstream(tokens) << "root hunter2\n";
  FailoverdProcess proc({data.path(), {"--tokens-file", tokens}});
  std::string error;
  EXPECT_FALSE(proc.Start(&error));
  EXPECT_THAT(error, HasSubstr(tokens + ":1: expected"));
}

TEST(SecurityTest, TokensReloadOnSighupAndNeverReachTheLog) {
  TempDir data, secrets;
  const std::string tokens = secrets.path() + "/tokens";
  std::ofstream(tokens) << "admin first-secret\n";
  FailoverdProcess proc({data.path(), {"--tokens-file", tokens, "--log-level", "debug"}});
  std::string error;
  ASSERT_TRUE(proc.Start(&error)) << error;
  auto status_with = [&](const std::string& token) {
    return RunCommand({FailoverctlBinary(), "--server", proc.address(), "--token", token, "status"}).exit_code;
  };
  EXPECT_EQ(status_with("first-secret"), 0);
  EXPECT_EQ(status_with("second-secret"), 1);

  // Rotate: write the new file whole, then SIGHUP.
  std::ofstream(tokens + ".new") << "admin second-secret\n";
  ASSERT_EQ(std::rename((tokens + ".new").c_str(), tokens.c_str()), 0);
  ASSERT_EQ(kill(proc.pid(), SIGHUP), 0);
  ASSERT_TRUE(Eventually([&] { return status_with("second-secret") == 0; }));
  EXPECT_EQ(status_with("first-secret"), 1);

  // A broken file keeps the tokens in use.
  std::ofstream(tokens) << "superuser third-secret\n";
  ASSERT_EQ(kill(proc.pid(), SIGHUP), 0);
  ASSERT_TRUE(Eventually([&] { return proc.Stderr().find("tokens not reloaded") != std::string::npos; }));
  EXPECT_EQ(status_with("second-secret"), 0);
  EXPECT_EQ(status_with("third-secret"), 1);

  for (const std::string secret : {"first-secret", "second-secret", "third-secret"}) {
    EXPECT_THAT(proc.Stderr(), ::testing::Not(HasSubstr(secret)));
  }
  EXPECT_THAT(proc.Stderr(), ::testing::Not(HasSubstr("no --tokens-file")));
}

TEST(SecurityTest, AnOpenServerWarnsOnceAtStart) {
  TempDir data;
  FailoverdProcess proc({data.path(), {}});
  std::string error;
  ASSERT_TRUE(proc.Start(&error)) << error;
  const std::string log = proc.Stderr();
  const size_t first = log.find("no --tokens-file");
  ASSERT_NE(first, std::string::npos) << log;
  EXPECT_EQ(log.find("no --tokens-file", first + 1), std::string::npos);
}

TEST(SecurityTest, CertificatesThatCannotBeReadStopFailoverd) {
  TempDir data, pki;
  const std::string garbage = pki.path() + "/garbage.pem";
  std::ofstream(garbage) << "this is not a certificate\n";
  struct Case {
    std::vector<std::string> args;
    std::string expected;
  } cases[] = {
      {{"--tls-cert", pki.path() + "/missing.pem", "--tls-key", garbage}, "missing.pem"},
      {{"--tls-cert", garbage, "--tls-key", garbage}, "garbage.pem"},
      {{"--tls-client-ca", garbage}, "--tls-client-ca needs --tls-cert and --tls-key"},
  };
  for (const Case& c : cases) {
    FailoverdProcess proc({data.path(), c.args});
    std::string error;
    EXPECT_FALSE(proc.Start(&error));
    EXPECT_THAT(error, HasSubstr(c.expected));
  }
}

TEST(SecurityTest, TlsServesClientsThatTrustItsCertificate) {
  TempDir data, pki;
  const std::string cert = pki.path() + "/cert.pem", key = pki.path() + "/key.pem";
  CommandResult made = RunCommand({"/usr/bin/openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key,
                                   "-out", cert, "-days", "1", "-subj", "/CN=localhost", "-addext",
                                   "subjectAltName=IP:127.0.0.1,DNS:localhost"});
  ASSERT_EQ(made.exit_code, 0) << made.err;
  FailoverdProcess proc({data.path(), {"--tls-cert", cert, "--tls-key", key, "--log-format", "json"}});
  std::string error;
  ASSERT_TRUE(proc.Start(&error)) << error;
  CommandResult secure =
      RunCommand({FailoverctlBinary(), "--server", proc.address(), "--tls-ca", cert, "status"});
  EXPECT_EQ(secure.exit_code, 0) << secure.err;
  CommandResult plain = RunCommand({FailoverctlBinary(), "--server", proc.address(), "--timeout", "1", "status"});
  EXPECT_EQ(plain.exit_code, 3);
  EXPECT_THAT(plain.err, HasSubstr("if it serves TLS, pass --tls-ca"));
  EXPECT_THAT(plain.err, ::testing::Not(HasSubstr("E12"))) << "gRPC's own log line reached the user";
  // gRPC core's complaint about the plaintext client is a JSON line of
  // failoverd's log, like every other line on stderr.
  EXPECT_TRUE(Eventually([&] { return proc.Stderr().find("\"msg\":\"grpc: ") != std::string::npos; }))
      << proc.Stderr();
  const std::string err = proc.Stderr();
  for (absl::string_view line : absl::StrSplit(err, '\n', absl::SkipEmpty())) {
    EXPECT_EQ(line.front(), '{') << line;
  }
}

TEST(SecurityTest, MutualTlsRequiresAClientCertificateFromTheCa) {
  TempDir data, pki;
  const std::string dir = pki.path();
  auto openssl = [](std::vector<std::string> args) {
    args.insert(args.begin(), "/usr/bin/openssl");
    CommandResult r = RunCommand(args);
    EXPECT_EQ(r.exit_code, 0) << r.err;
  };
  std::ofstream(dir + "/server.ext") << "subjectAltName=IP:127.0.0.1,DNS:localhost\n";
  openssl({"req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", dir + "/ca.key", "-out", dir + "/ca.crt",
           "-days", "1", "-subj", "/CN=test-ca"});
  for (const std::string who : {"server", "client"}) {
    openssl({"req", "-newkey", "rsa:2048", "-nodes", "-keyout", dir + "/" + who + ".key", "-out",
             dir + "/" + who + ".csr", "-subj", "/CN=" + who});
    std::vector<std::string> sign = {"x509", "-req", "-in", dir + "/" + who + ".csr", "-CA", dir + "/ca.crt", "-CAkey",
                                     dir + "/ca.key", "-CAcreateserial", "-out", dir + "/" + who + ".crt", "-days", "1"};
    if (who == "server") sign.insert(sign.end(), {"-extfile", dir + "/server.ext"});
    openssl(sign);
  }
  FailoverdProcess proc({data.path(),
                         {"--tls-cert", dir + "/server.crt", "--tls-key", dir + "/server.key", "--tls-client-ca",
                          dir + "/ca.crt"}});
  std::string error;
  ASSERT_TRUE(proc.Start(&error)) << error;
  CommandResult with_cert = RunCommand({FailoverctlBinary(), "--server", proc.address(), "--tls-ca", dir + "/ca.crt",
                                        "--tls-cert", dir + "/client.crt", "--tls-key", dir + "/client.key", "status"});
  EXPECT_EQ(with_cert.exit_code, 0) << with_cert.err;
  // The certificate's subject is who did it.
  std::ofstream(dir + "/chains.yaml") << "targets:\n  - name: a\n  - name: b\nchains:\n  - name: ch\n    targets: [a, b]\n";
  const std::vector<std::string> client_tls = {FailoverctlBinary(), "--server", proc.address(), "--tls-ca",
                                               dir + "/ca.crt", "--tls-cert", dir + "/client.crt", "--tls-key",
                                               dir + "/client.key"};
  std::vector<std::string> apply = client_tls;
  apply.insert(apply.end(), {"apply", "-f", dir + "/chains.yaml"});
  ASSERT_EQ(RunCommand(apply).exit_code, 0);
  std::vector<std::string> events = client_tls;
  events.push_back("events");
  EXPECT_THAT(RunCommand(events).out, HasSubstr("chain ch created (generation 1) by cn=client"));
  CommandResult without = RunCommand(
      {FailoverctlBinary(), "--server", proc.address(), "--tls-ca", dir + "/ca.crt", "--timeout", "2", "status"});
  EXPECT_NE(without.exit_code, 0);

  // The client library connects the same way.
  client::ConnectionOptions options;
  options.server = proc.address();
  options.tls_ca = dir + "/ca.crt";
  options.tls_cert = dir + "/client.crt";
  options.tls_key = dir + "/client.key";
  auto channel = client::OpenChannel(options);
  ASSERT_TRUE(channel.ok()) << channel.status();
  auto stub = v1::DecisionService::NewStub(*channel);
  grpc::ClientContext ctx;
  client::PrepareContext(options, &ctx);
  v1::PickTargetRequest pick;
  pick.set_chain("nope");
  v1::PickTargetResponse plan;
  EXPECT_EQ(stub->PickTarget(&ctx, pick, &plan).error_code(), grpc::StatusCode::NOT_FOUND);
}

}  // namespace
}  // namespace failover::testing
