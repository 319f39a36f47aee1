// `pmhash serve` as a user runs it: the tool (PMHASH_TOOL, set by ctest) in a child
// process, driven by the real redis-cli and redis-benchmark (Debian's redis-tools, which
// scripts/install-deps.sh installs) and by a raw client that records every acknowledged
// write before the server is killed with SIGKILL.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bench/keygen.h"
#include "support/engine_tests.h"
#include "support/resp_client.h"

namespace pmhash::serve {
namespace {

using namespace std::chrono_literals;
using test::Client;
using test::Request;

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Starts argv[0] with its stdout and stderr into `out`; the pid.
pid_t Spawn(std::vector<std::string> argv, const std::string& out) {
  const pid_t pid = fork();
  if (pid == 0) {
    const int o = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    const int in = ::open("/dev/null", O_RDONLY);
    if (o < 0 || in < 0 || dup2(o, 1) < 0 || dup2(o, 2) < 0 || dup2(in, 0) < 0) _exit(126);
    std::vector<char*> args;
    for (std::string& a : argv) args.push_back(a.data());
    args.push_back(nullptr);
    alarm(300);  // a hang fails the test instead of hanging it (survives exec)
    execv(args[0], args.data());
    _exit(127);
  }
  return pid;
}

// The exit code (128 + signal if killed), or -1 if it is still running after `timeout`.
int WaitExit(pid_t pid, std::chrono::milliseconds timeout) {
  const auto end = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    int status = 0;
    const pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (std::chrono::steady_clock::now() > end) return -1;
    std::this_thread::sleep_for(10ms);
  }
}

// Runs a program to its end; its stdout and stderr.
std::string RunToEnd(std::vector<std::string> argv, const pmhash::testing::TempDir& dir, int* code) {
  const std::string out = dir.File("run.out");
  const pid_t pid = Spawn(std::move(argv), out);
  *code = WaitExit(pid, 120000ms);
  return ReadAll(out);
}

// A port nothing listens on now (bound to 0, read, closed; a race with other programs is
// possible but unlikely on a test machine).
uint16_t FreePort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  socklen_t len = sizeof(a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

// The keys of a server, through redis-cli --scan.
std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  std::string line;
  for (std::istringstream in(text); std::getline(in, line);) lines.push_back(line);
  return lines;
}

class ServeProcess : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* tool = std::getenv("PMHASH_TOOL");
    if (tool == nullptr) GTEST_SKIP() << "*** PMHASH_TOOL is not set: the serve process tests DID NOT RUN ***";
    tool_ = tool;
    // redis-tools is a dependency (scripts/install-deps.sh): missing, the test fails.
    ASSERT_EQ(::access("/usr/bin/redis-cli", X_OK), 0) << "redis-cli missing: run scripts/install-deps.sh";
    ASSERT_EQ(::access("/usr/bin/redis-benchmark", X_OK), 0);
    ASSERT_EQ(::access("/usr/sbin/nutcracker", X_OK), 0) << "nutcracker missing: run scripts/install-deps.sh";
    pool_ = dir_.File("serve.pool");
  }
  void TearDown() override {
    for (pid_t p : {pid_, other_pid_, proxy_pid_}) {
      if (p > 0) {
        ::kill(p, SIGKILL);
        WaitExit(p, 10000ms);
      }
    }
  }

  // Starts the server on a free port and waits for its "ready on" line.
  void StartServer(std::vector<std::string> extra = {}) {
    Launch(pool_, extra, &pid_, &port_, &out_);
  }

  // Starts `pmhash serve pool` with --port 0; its pid, the port of its ready line and
  // the file of its output.
  void Launch(const std::string& pool, const std::vector<std::string>& extra, pid_t* pid,
              uint16_t* port, std::string* out, const std::string& engine = "wophi") {
    std::vector<std::string> argv = {tool_, "serve", pool, "--port", "0", "--create",
                                     "--engine", engine, "--size", "64M"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    *out = dir_.File("serve" + std::to_string(++starts_) + ".out");
    *pid = Spawn(argv, *out);
    const auto end = std::chrono::steady_clock::now() + 30s;
    while (std::chrono::steady_clock::now() < end) {
      const std::string text = ReadAll(*out);
      const size_t at = text.find("ready on 127.0.0.1:");
      if (at != std::string::npos && text.find('\n', at) != std::string::npos) {
        *port = static_cast<uint16_t>(std::stoi(text.substr(at + 19)));
        return;
      }
      ASSERT_EQ(WaitExit(*pid, 0ms), -1) << "pmhash serve exited: " << text;
      std::this_thread::sleep_for(20ms);
    }
    FAIL() << "pmhash serve did not get ready: " << ReadAll(*out);
  }

  std::string Cli(std::vector<std::string> args, uint16_t port = 0) {
    std::vector<std::string> argv = {"/usr/bin/redis-cli", "-p",
                                     std::to_string(port == 0 ? port_ : port)};
    argv.insert(argv.end(), args.begin(), args.end());
    int code = 0;
    std::string out = RunToEnd(argv, dir_, &code);
    EXPECT_EQ(code, 0) << out;
    return out;
  }

  pmhash::testing::TempDir dir_{"serve"};
  std::string tool_, pool_, out_;
  pid_t pid_ = -1, other_pid_ = -1, proxy_pid_ = -1;
  uint16_t port_ = 0;
  int starts_ = 0;
};

TEST_F(ServeProcess, RedisCliCommandsAndACleanShutdown) {
  StartServer();
  EXPECT_EQ(Cli({"PING"}), "PONG\n");
  EXPECT_EQ(Cli({"SET", "greeting", "hello world"}), "OK\n");
  EXPECT_EQ(Cli({"GET", "greeting"}), "hello world\n");
  EXPECT_EQ(Cli({"SET", "greeting", "again", "NX"}), "\n");  // nil: not set
  EXPECT_EQ(Cli({"MSET", "a", "1", "b", "2", "c", "3"}), "OK\n");
  EXPECT_EQ(Cli({"MGET", "a", "nope", "c"}), "1\n\n3\n");
  EXPECT_EQ(Cli({"DEL", "b", "nope"}), "1\n");
  EXPECT_EQ(Cli({"EXISTS", "a", "b"}), "1\n");
  EXPECT_EQ(Cli({"DBSIZE"}), "3\n");
  EXPECT_NE(Cli({"SET", "k", "v", "EX", "5"}).find("ERR"), std::string::npos);
  EXPECT_NE(Cli({"INFO", "keyspace"}).find("db0:keys=3"), std::string::npos);
  // Counting is off without --counters: INFO says so (its counters stay 0).
  const std::string persistence = Cli({"INFO", "persistence"});
  EXPECT_NE(persistence.find("counters:off"), std::string::npos) << persistence;
  EXPECT_NE(persistence.find("flushes:0"), std::string::npos) << persistence;
  // redis-cli --scan pages through SCAN (10 keys a page) to the cursor 0.
  std::vector<std::string> mset = {"MSET"}, want = {"a", "c", "greeting"};
  for (int i = 0; i < 40; ++i) {
    mset.push_back("s" + std::to_string(i));
    mset.push_back("v");
    want.push_back("s" + std::to_string(i));
  }
  EXPECT_EQ(Cli(mset), "OK\n");
  std::vector<std::string> keys = Lines(Cli({"--scan"}));
  std::sort(keys.begin(), keys.end());
  std::sort(want.begin(), want.end());
  EXPECT_EQ(keys, want);
  // redis-benchmark's own workload, pipelined, then the keys it wrote are there.
  int code = 0;
  const std::string bench = RunToEnd({"/usr/bin/redis-benchmark", "-p", std::to_string(port_),
                                      "-t", "set,get,mset", "-n", "2000", "-r", "100", "-P",
                                      "16", "-c", "4", "-q"},
                                     dir_, &code);
  EXPECT_EQ(code, 0) << bench;
  EXPECT_NE(bench.find("SET:"), std::string::npos) << bench;
  Cli({"SHUTDOWN"});  // redis-cli reports the closed connection; its exit code varies
  EXPECT_EQ(WaitExit(pid_, 30000ms), 0) << ReadAll(out_);
  pid_ = -1;
  EXPECT_NE(ReadAll(out_).find("closed cleanly (SHUTDOWN)"), std::string::npos);
  // The pool was closed cleanly and holds the keys.
  const std::string info = RunToEnd({tool_, "pool", "info", pool_}, dir_, &code);
  EXPECT_EQ(code, 0) << info;
  EXPECT_NE(info.find("clean"), std::string::npos) << info;
  EXPECT_EQ(RunToEnd({tool_, "get", pool_, "greeting"}, dir_, &code), "hello world\n");
}

TEST_F(ServeProcess, SigtermClosesCleanly) {
  StartServer();
  EXPECT_EQ(Cli({"SET", "a", "1"}), "OK\n");
  ASSERT_EQ(::kill(pid_, SIGTERM), 0);
  EXPECT_EQ(WaitExit(pid_, 30000ms), 0) << ReadAll(out_);
  pid_ = -1;
  EXPECT_NE(ReadAll(out_).find("closed cleanly (signal)"), std::string::npos);
  int code = 0;
  EXPECT_EQ(RunToEnd({tool_, "get", pool_, "a"}, dir_, &code), "1\n");
}

// SIGKILL under redis-benchmark load: every SET the server acknowledged is in the pool
// after the restart, and the pool checks clean.
TEST_F(ServeProcess, KillDashNineLosesNoAcknowledgedWrite) {
  StartServer({"--threads", "2"});
  const pid_t bench = Spawn({"/usr/bin/redis-benchmark", "-p", std::to_string(port_), "-t",
                             "set", "-n", "100000000", "-r", "50000", "-c", "8", "-P", "8",
                             "-q"},
                            dir_.File("bench.out"));
  Client c(port_);
  ASSERT_TRUE(c.connected());
  std::atomic<int> acked{0};
  const pid_t server = pid_;
  std::thread killer([&] {  // mid-stream: a SET is on its way or being written
    while (acked.load() < 3000) std::this_thread::sleep_for(1ms);
    ::kill(server, SIGKILL);
  });
  for (int i = 0; i < 1000000; ++i) {
    if (!c.Send(Request({"SET", "ack-" + std::to_string(i), "value-" + std::to_string(i)}))) {
      break;
    }
    if (c.Read(5, 10000ms) != "+OK\r\n") break;
    acked.store(i + 1);
  }
  killer.join();
  EXPECT_EQ(WaitExit(pid_, 10000ms), 128 + SIGKILL);
  pid_ = -1;
  ::kill(bench, SIGKILL);
  WaitExit(bench, 10000ms);
  ASSERT_GE(acked, 3000);
  StartServer();
  EXPECT_NE(ReadAll(out_).find("recovered in"), std::string::npos) << ReadAll(out_);
  Client check(port_);
  std::string batch, want;
  for (int i = 0; i < acked.load(); ++i) {
    batch += Request({"GET", "ack-" + std::to_string(i)});
    const std::string v = "value-" + std::to_string(i);
    want += "$" + std::to_string(v.size()) + "\r\n" + v + "\r\n";
  }
  ASSERT_TRUE(check.Send(batch));
  EXPECT_EQ(check.Read(want.size(), 30000ms), want);
  Cli({"SHUTDOWN"});
  EXPECT_EQ(WaitExit(pid_, 30000ms), 0);
  pid_ = -1;
  int code = 0;
  const std::string pool_check = RunToEnd({tool_, "pool", "check", pool_}, dir_, &code);
  EXPECT_EQ(code, 0) << pool_check;
}

// Beyond one machine: two servers behind twemproxy (Debian's nutcracker), as users shard
// a Redis-protocol store. redis-benchmark and a client write through the proxy; every
// key the client wrote is on exactly one shard, and reads through the proxy find them.
TEST_F(ServeProcess, TwoShardsBehindTwemproxy) {
  StartServer();
  std::string other_out;
  uint16_t other_port = 0;
  Launch(dir_.File("other.pool"), {}, &other_pid_, &other_port, &other_out);
  const uint16_t proxy_port = FreePort(), stats_port = FreePort();
  const std::string conf = dir_.File("nutcracker.yml");
  std::ofstream(conf) << "pmhash:\n"
                      << "  listen: 127.0.0.1:" << proxy_port << "\n"
                      << "  hash: fnv1a_64\n  distribution: ketama\n  redis: true\n"
                      << "  auto_eject_hosts: false\n  servers:\n"
                      << "   - 127.0.0.1:" << port_ << ":1 shard1\n"
                      << "   - 127.0.0.1:" << other_port << ":1 shard2\n";
  proxy_pid_ = Spawn({"/usr/sbin/nutcracker", "-c", conf, "-s", std::to_string(stats_port)},
                     dir_.File("nutcracker.out"));
  std::unique_ptr<Client> via;
  for (int i = 0; i < 300 && (via == nullptr || !via->connected()); ++i) {
    std::this_thread::sleep_for(20ms);
    via = std::make_unique<Client>(proxy_port);
  }
  ASSERT_TRUE(via->connected()) << ReadAll(dir_.File("nutcracker.out"));
  constexpr int kKeys = 2000;
  std::string batch, want;
  for (int i = 0; i < kKeys; ++i) {
    batch += Request({"SET", "key-" + std::to_string(i), "v" + std::to_string(i)});
    want += "+OK\r\n";
  }
  ASSERT_TRUE(via->Send(batch));
  ASSERT_EQ(via->Read(want.size(), 30000ms), want);
  // MGET through the proxy: split over the shards, answered in order.
  ASSERT_TRUE(via->Send(Request({"MGET", "key-0", "key-1", "key-1999", "absent"})));
  const std::string mget = "*4\r\n$2\r\nv0\r\n$2\r\nv1\r\n$5\r\nv1999\r\n$-1\r\n";
  EXPECT_EQ(via->Read(mget.size(), 10000ms), mget);
  int code = 0;
  const std::string bench =
      RunToEnd({"/usr/bin/redis-benchmark", "-p", std::to_string(proxy_port), "-t", "set,get",
                "-n", "5000", "-r", "1000", "-c", "4", "-q"},
               dir_, &code);
  EXPECT_EQ(code, 0) << bench;
  std::set<std::string> shard1, shard2;
  for (const std::string& k : Lines(Cli({"--scan"}, port_))) {
    if (k.rfind("key-", 0) == 0) shard1.insert(k);
  }
  for (const std::string& k : Lines(Cli({"--scan"}, other_port))) {
    if (k.rfind("key-", 0) == 0) shard2.insert(k);
  }
  EXPECT_GT(shard1.size(), kKeys / 4u);  // ketama spreads them: neither shard holds all
  EXPECT_GT(shard2.size(), kKeys / 4u);
  EXPECT_EQ(shard1.size() + shard2.size(), static_cast<size_t>(kKeys));
  for (int i = 0; i < kKeys; ++i) {
    const std::string k = "key-" + std::to_string(i);
    EXPECT_EQ(shard1.count(k) + shard2.count(k), 1u) << k;
  }
}

// Keys from the network: a client that crafts keys whose seed-0 hashes share their top
// 12 bits (bench --dist crafted) floods a pool of seed 0, but not a pool of its own random
// seed (pmhash pool create's default). The work each request does shows it, as PM lines
// read per request (INFO's pm_lines_read): a count, not a time, so the test is exact.
TEST_F(ServeProcess, CraftedKeysFloodOnlyAPoolOfTheSeedTheyWereCraftedFor) {
  bench::DistSpec crafted;
  crafted.kind = bench::DistSpec::Kind::kCrafted;
  crafted.param = 12;
  const bench::KeySpace keys(16, crafted);
  constexpr int kKeys = 1500;
  std::string sets, gets, want_sets;
  for (int i = 0; i < kKeys; ++i) {
    sets += Request({"SET", keys.Key(i), "v"});
    gets += Request({"GET", keys.Key(i)});
    want_sets += "+OK\r\n";
  }
  double lines_per_request[2] = {0, 0};
  for (int seeded = 0; seeded < 2; ++seeded) {
    const std::string pool = dir_.File(seeded ? "seeded.pool" : "seed0.pool");
    int code = 0;
    const std::string made = RunToEnd({tool_, "pool", "create", pool, "--engine", "linear",
                                       "--size", "64M", "--hash-seed", seeded ? "random" : "0"},
                                      dir_, &code);
    ASSERT_EQ(code, 0) << made;
    pid_t pid = -1;
    uint16_t port = 0;
    std::string out;
    Launch(pool, {"--counters"}, &pid, &port, &out, "linear");  // INFO's pm_lines_read
    (seeded ? other_pid_ : pid_) = pid;
    Client c(port);
    ASSERT_TRUE(c.Send(sets));
    ASSERT_EQ(c.Read(want_sets.size(), 120000ms), want_sets);
    ASSERT_TRUE(c.Send(gets));
    ASSERT_EQ(c.Read(kKeys * 7, 120000ms).size(), kKeys * 7u);  // "$1\r\nv\r\n" each
    const std::string info = Cli({"INFO", "persistence"}, port);
    EXPECT_NE(info.find("counters:on"), std::string::npos) << info;
    const size_t at = info.find("pm_lines_read:");
    ASSERT_NE(at, std::string::npos) << info;
    lines_per_request[seeded] = std::stod(info.substr(at + 14)) / (2.0 * kKeys);
  }
  // Seeded: about one line a request. Seed 0: every key probes past the others of its
  // crowded run of homes, hundreds of lines a request.
  std::printf("lines per request: seed 0 %.1f, seeded %.2f\n", lines_per_request[0], lines_per_request[1]);
  EXPECT_LT(lines_per_request[1], 3.0);
  EXPECT_GT(lines_per_request[0], 100.0);
}

// Bad command lines and pools: one line of error and an exit code, never a server.
TEST_F(ServeProcess, BadArgumentsAreClearErrors) {
  struct Case {
    std::vector<std::string> args;
    int code;
    std::string says;
  };
  const std::string missing = dir_.File("missing.pool");
  const std::vector<Case> cases = {
      {{"serve", missing}, 1, "does not exist (use --create"},
      {{"serve", pool_, "--create", "--engine", "wophi", "--bind", "not-an-address"}, 1,
       "not an IPv4 or IPv6 address"},
      {{"serve", pool_, "--create", "--engine", "wophi", "--threads", "0"}, 2, "--threads"},
      {{"serve", pool_, "--create", "--engine", "wophi", "--max-request", "10"}, 2,
       "--max-request"},
      {{"serve", pool_, "--create", "--engine", "no-such-engine"}, 1, "no-such-engine"},
      {{"serve", pool_, "--create", "--engine", "wophi", "--counters=maybe"}, 2, "--counters"},
      {{"bench", "--trace", missing}, 1, "cannot read"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> argv = {tool_};
    argv.insert(argv.end(), c.args.begin(), c.args.end());
    int code = 0;
    const std::string out = RunToEnd(argv, dir_, &code);
    EXPECT_EQ(code, c.code) << out;
    EXPECT_NE(out.find(c.says), std::string::npos) << out;
    EXPECT_EQ(out.find("ready on"), std::string::npos) << out;
  }
}

}  // namespace
}  // namespace pmhash::serve
