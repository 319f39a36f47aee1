#include "bench/threads.h"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <thread>

namespace pmhash::bench {

std::vector<int> PinCpus(bool pin, size_t n) {
  std::vector<int> cpus;
  if (!pin || n == 0) return cpus;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof(set), &set) != 0) return cpus;
  std::vector<int> allowed;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &set)) allowed.push_back(c);
  }
  if (allowed.empty()) return cpus;
  for (size_t i = 0; i < n; ++i) cpus.push_back(allowed[i % allowed.size()]);
  return cpus;
}

TogetherRun RunTogether(size_t n, const std::vector<int>& cpus,
                        const std::function<void(size_t)>& body,
                        const std::function<bool()>& poll) {
  using Clock = std::chrono::steady_clock;
  std::vector<Clock::time_point> ends(n);
  std::atomic<size_t> ready{0}, finished{0};
  std::atomic<bool> go{false};
  std::mutex error_mu;
  std::string pin_error;
  std::vector<std::thread> threads;
  threads.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    threads.emplace_back([&, i] {
      if (!cpus.empty()) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(cpus[i], &set);
        const int rc = ::pthread_setaffinity_np(::pthread_self(), sizeof(set), &set);
        if (rc != 0) {
          std::lock_guard<std::mutex> lock(error_mu);
          pin_error = "pinning a thread to CPU " + std::to_string(cpus[i]) +
                      " failed: " + std::strerror(rc);
        }
      }
      ready.fetch_add(1);
      while (!go.load(std::memory_order_acquire)) {
      }
      body(i);
      ends[i] = Clock::now();
      finished.fetch_add(1, std::memory_order_release);
    });
  }
  while (ready.load() < n) std::this_thread::yield();
  const Clock::time_point start = Clock::now();
  go.store(true, std::memory_order_release);
  while (poll && finished.load(std::memory_order_acquire) < n && poll()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  for (std::thread& t : threads) t.join();
  TogetherRun run;
  Clock::time_point end = start;
  for (const Clock::time_point& e : ends) end = std::max(end, e);
  run.seconds = std::chrono::duration<double>(end - start).count();
  run.pin_error = pin_error;
  if (pin_error.empty()) run.pinned = cpus;
  return run;
}

}  // namespace pmhash::bench
