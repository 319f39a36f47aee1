#include "serve/server.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "pmhash/options.h"
#include "serve/resp.h"
#include "support/resp_client.h"

namespace pmhash::serve {
namespace {

using namespace std::chrono_literals;
using test::Client;
using test::Request;

class ServerTest : public ::testing::Test {
 protected:
  void Start(ServerOptions so = {}, CommandOptions co = {}) {
    Options o;
    o.engine = "linear";
    o.pool_size = 64ull << 20;
    ASSERT_TRUE(Open(o, &index_).ok());
    handler_ = std::make_unique<CommandHandler>(index_.get(), co);
    so.port = 0;
    so.bind = "127.0.0.1";
    server_ = std::make_unique<Server>(handler_.get(), so);
    ASSERT_TRUE(server_->Listen().ok());
    thread_ = std::thread([this] { server_->Run(); });
  }
  void TearDown() override {
    if (server_ != nullptr) {
      server_->Stop();
      thread_.join();
    }
  }
  uint16_t port() const { return server_->port(); }
  // A fresh connection's answer to PING: the server still serves.
  bool Serves() {
    Client c(port());
    return c.connected() && c.Send(Request({"PING"})) && c.Read(7) == "+PONG\r\n";
  }

  std::unique_ptr<Index> index_;
  std::unique_ptr<CommandHandler> handler_;
  std::unique_ptr<Server> server_;
  std::thread thread_;
};

TEST_F(ServerTest, PipelinedRequestsAreAnsweredInOrder) {
  Start();
  Client c(port());
  ASSERT_TRUE(c.connected());
  std::string batch, want;
  for (int i = 0; i < 5000; ++i) {
    batch += Request({"SET", "k" + std::to_string(i), std::to_string(i)});
    want += "+OK\r\n";
  }
  for (int i = 0; i < 5000; i += 7) {
    batch += Request({"GET", "k" + std::to_string(i)});
    want += "$" + std::to_string(std::to_string(i).size()) + "\r\n" + std::to_string(i) + "\r\n";
  }
  ASSERT_TRUE(c.Send(batch));
  EXPECT_EQ(c.Read(want.size()), want);
  EXPECT_EQ(index_->Count(), 5000u);
}

TEST_F(ServerTest, MalformedRequestGetsAnErrorAndACloseOthersGoOn) {
  Start();
  Client other(port());
  ASSERT_TRUE(other.Send(Request({"SET", "keep", "1"})));
  ASSERT_EQ(other.Read(5), "+OK\r\n");
  const std::vector<std::string> bad = {"*1\r\n$x\r\n", "*2\r\n$3\r\nGET\r\n:1\r\n",
                                        "*1\r\n$99999999999999\r\n", "*-5\r\n",
                                        "*1\r\n$3\r\nSETxx"};
  for (const std::string& b : bad) {
    Client c(port());
    // The SET before the bad request runs; nothing after it does.
    ASSERT_TRUE(c.Send(Request({"SET", "before", "1"}) + b + Request({"SET", "after", "1"})));
    const std::string reply = c.Read(1 << 16);
    EXPECT_EQ(reply.substr(0, 5), "+OK\r\n") << b;
    EXPECT_NE(reply.find("-ERR Protocol error"), std::string::npos) << b;
    EXPECT_TRUE(c.closed() || c.WaitClosed()) << b;
  }
  std::string v;
  EXPECT_TRUE(index_->Get("after", &v).IsNotFound());
  EXPECT_EQ(index_->Count(), 2u);
  ASSERT_TRUE(other.Send(Request({"GET", "keep"})));
  EXPECT_EQ(other.Read(7), "$1\r\n1\r\n");
}

TEST_F(ServerTest, RequestOverTheLimitClosesTheConnection) {
  ServerOptions so;
  so.max_request_bytes = 4096;
  Start(so);
  Client c(port());
  // A bulk string longer than the limit: refused from its length alone.
  ASSERT_TRUE(c.Send("*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$100000\r\n"));
  EXPECT_NE(c.Read(1 << 16).find("-ERR Protocol error"), std::string::npos);
  EXPECT_TRUE(c.closed() || c.WaitClosed());
  // Many small arguments adding up past the limit.
  Client d(port());
  std::string many = "*1000\r\n";
  for (int i = 0; i < 999; ++i) many += "$8\r\nxxxxxxxx\r\n";
  d.Send(many);
  EXPECT_NE(d.Read(1 << 16).find("request larger than 4096"), std::string::npos);
  EXPECT_EQ(index_->Count(), 0u);
  EXPECT_TRUE(Serves());
}

TEST_F(ServerTest, HalfClosedClientGetsItsRepliesThenTheClose) {
  Start();
  Client c(port());
  ASSERT_TRUE(c.Send(Request({"SET", "a", "1"}) + Request({"GET", "a"}) + "*2\r\n$3\r\nGET"));
  c.ShutdownWrite();
  EXPECT_EQ(c.Read(1 << 16), "+OK\r\n$1\r\n1\r\n");
  EXPECT_TRUE(c.closed() || c.WaitClosed());
  EXPECT_TRUE(Serves());
}

// A client that sends and never reads: its loop stops reading it once its replies back
// up (the socket's flow control then stops its sends), and serves the others meanwhile.
TEST_F(ServerTest, ClientThatNeverReadsIsHeldBackAndOthersAreServed) {
  Start();
  ASSERT_TRUE(index_->Put("big", std::string(100000, 'v')).ok());
  Client slow(port());
  std::string gets;
  for (int i = 0; i < 1000; ++i) gets += Request({"GET", "big"});
  std::atomic<int> sent{0};
  std::thread sender([&] {
    for (int i = 0; i < 2000 && slow.Send(gets); ++i) sent.fetch_add(1);
  });
  std::this_thread::sleep_for(500ms);
  EXPECT_TRUE(Serves());
  EXPECT_LT(sent.load(), 2000);  // held back: 44 MB of requests did not all go in
  slow.Abort();
  sender.join();
  EXPECT_TRUE(Serves());
}

// One request whose replies exceed the output limit at once: the connection is closed.
TEST_F(ServerTest, RepliesBeyondTheOutputLimitCloseTheConnection) {
  ServerOptions so;
  so.max_output_bytes = 1u << 20;
  Start(so);
  ASSERT_TRUE(index_->Put("big", std::string(100000, 'v')).ok());
  Client c(port());
  std::vector<std::string> mget = {"MGET"};
  for (int i = 0; i < 300; ++i) mget.push_back("big");  // 30 MB of reply
  ASSERT_TRUE(c.Send(Request(mget)));
  std::this_thread::sleep_for(200ms);  // not reading: the reply backs up
  EXPECT_TRUE(c.WaitClosed(10000ms));
  EXPECT_TRUE(Serves());
}

TEST_F(ServerTest, IdleConnectionIsClosedAfterTheTimeout) {
  ServerOptions so;
  so.idle_timeout_seconds = 1;
  Start(so);
  Client c(port());
  ASSERT_TRUE(c.Send(Request({"PING"})));
  ASSERT_EQ(c.Read(7), "+PONG\r\n");
  EXPECT_TRUE(c.WaitClosed(5000ms));
}

TEST_F(ServerTest, ConnectionsBeyondMaxClientsAreRefused) {
  ServerOptions so;
  so.max_clients = 2;
  Start(so);
  Client a(port()), b(port());
  ASSERT_TRUE(a.Send(Request({"PING"})) && b.Send(Request({"PING"})));
  ASSERT_EQ(a.Read(7), "+PONG\r\n");
  ASSERT_EQ(b.Read(7), "+PONG\r\n");
  Client c(port());
  EXPECT_EQ(c.Read(1 << 10), "-ERR max number of clients reached\r\n");
  EXPECT_TRUE(c.closed() || c.WaitClosed());
}

TEST_F(ServerTest, ShutdownRequestEndsRun) {
  Start();
  Client c(port());
  ASSERT_TRUE(c.Send(Request({"SHUTDOWN"})));
  EXPECT_TRUE(c.WaitClosed());
  thread_.join();
  EXPECT_TRUE(server_->shutdown_requested());
  server_.reset();
}

// Random and mutated requests, bounded in count: every one is answered or closed, the
// server keeps serving, and the keys written before are untouched.
TEST_F(ServerTest, FuzzedRequestsNeverCrashOrChangeOtherKeys) {
  ServerOptions so;
  so.max_request_bytes = 1 << 16;
  so.max_args = 64;
  Start(so);
  std::vector<std::pair<std::string, std::string>> kept;
  for (int i = 0; i < 200; ++i) {
    kept.emplace_back("kept-key-" + std::to_string(i) + "-long-enough-not-to-be-guessed",
                      "value-" + std::to_string(i));
    ASSERT_TRUE(index_->Put(kept.back().first, kept.back().second).ok());
  }
  const std::vector<std::string> seeds = {
      Request({"SET", "fz", "1"}),     Request({"GET", "fz"}),
      Request({"MSET", "fa", "1", "fb", "2"}), Request({"DEL", "fa", "fb"}),
      Request({"SCAN", "0", "COUNT", "5"}),    Request({"INFO"}),
      "PING\r\n",                              Request({"EXISTS", "fz"})};
  std::mt19937_64 rng(20261129);
  for (int round = 0; round < 1500; ++round) {
    std::string bytes;
    const int pieces = 1 + static_cast<int>(rng() % 4);
    for (int p = 0; p < pieces; ++p) {
      std::string s = seeds[rng() % seeds.size()];
      switch (rng() % 4) {
        case 0:  // random bytes
          s.assign(rng() % 64, '\0');
          for (char& ch : s) ch = static_cast<char>(rng());
          break;
        case 1:  // flip bytes
          for (int k = 0; k < 3; ++k) s[rng() % s.size()] = static_cast<char>(rng());
          break;
        case 2:  // cut short
          s.resize(rng() % s.size());
          break;
        default:  // as is
          break;
      }
      bytes += s;
    }
    Client c(port());
    ASSERT_TRUE(c.connected()) << round;
    c.Send(bytes);
    c.ShutdownWrite();
    c.WaitClosed(5000ms);
  }
  EXPECT_TRUE(Serves());
  for (const auto& [k, v] : kept) {
    std::string got;
    ASSERT_TRUE(index_->Get(k, &got).ok()) << k;
    EXPECT_EQ(got, v);
  }
  uint64_t seen = 0;
  ASSERT_TRUE(index_->ForEach([&](std::string_view, std::string_view) {
                      ++seen;
                      return true;
                    }).ok());
  EXPECT_EQ(seen, index_->Count());
}

}  // namespace
}  // namespace pmhash::serve
