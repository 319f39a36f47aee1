// A blocking RESP client for the tests of `pmhash serve` (src/serve/server_test.cc, the
// process tests in src/tools/serve_process_test.cc): raw bytes on a loopback socket, so
// a test can send what no client library would (malformed, half-closed, never read).
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace pmhash::serve::test {

using namespace std::chrono_literals;

// A blocking test client on loopback.
class Client {
 public:
  explicit Client(uint16_t port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
  }
  ~Client() { ::close(fd_); }
  bool connected() const { return connected_; }

  // False if the server closed the connection first.
  bool Send(std::string_view bytes) {
    while (!bytes.empty()) {
      const ssize_t n = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
      if (n <= 0) return false;
      bytes.remove_prefix(static_cast<size_t>(n));
    }
    return true;
  }
  void ShutdownWrite() { ::shutdown(fd_, SHUT_WR); }
  void Abort() { ::shutdown(fd_, SHUT_RDWR); }

  // Reads until `bytes` bytes came, the peer closed (closed() then says so) or the
  // deadline passed.
  std::string Read(size_t bytes, std::chrono::milliseconds timeout = 5000ms) {
    std::string got;
    const auto end = std::chrono::steady_clock::now() + timeout;
    char buf[65536];
    while (got.size() < bytes) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          end - std::chrono::steady_clock::now());
      if (left <= 0ms) break;
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) break;
      const ssize_t n = ::recv(fd_, buf, std::min(sizeof(buf), bytes - got.size()), 0);
      if (n <= 0) {
        closed_ = true;
        break;
      }
      got.append(buf, static_cast<size_t>(n));
    }
    return got;
  }
  // Waits for the server to close the connection (reading and dropping what it sends).
  bool WaitClosed(std::chrono::milliseconds timeout = 5000ms) {
    while (!closed_) {
      const std::string s = Read(1 << 20, timeout);
      if (s.empty() && !closed_) return false;
    }
    return true;
  }
  bool closed() const { return closed_; }

 private:
  int fd_ = -1;
  bool connected_ = false;
  bool closed_ = false;
};

inline std::string Request(const std::vector<std::string>& words) {
  std::string r = "*" + std::to_string(words.size()) + "\r\n";
  for (const std::string& w : words) r += "$" + std::to_string(w.size()) + "\r\n" + w + "\r\n";
  return r;
}

}  // namespace pmhash::serve::test
