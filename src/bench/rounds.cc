#include "bench/rounds.h"

#include <algorithm>

#include "bench/keygen.h"

namespace pmhash::bench {

std::string Cell::Label() const { return engine + " t" + std::to_string(threads); }

std::vector<Cell> MatrixCells(const BenchConfig& config) {
  std::vector<Cell> cells;
  for (const std::string& engine : config.engines) {
    for (int threads : config.threads) cells.push_back({engine, threads});
  }
  if (config.floor) {
    for (int threads : config.threads) cells.push_back({kFloorCell, threads});
  }
  return cells;
}

std::vector<std::vector<Cell>> RoundOrders(const std::vector<Cell>& cells, uint64_t seed,
                                           int rounds) {
  std::vector<std::vector<Cell>> orders;
  for (int round = 0; round < rounds; ++round) {
    std::vector<Cell> order = cells;
    if (round > 0) {
      Rng rng(Mix64(seed ^ (0x526f756e64ull * static_cast<uint64_t>(round))));  // "Round"
      for (size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[rng.Below(i)]);
      if (order == orders.back()) order.assign(orders.back().rbegin(), orders.back().rend());
    }
    orders.push_back(std::move(order));
  }
  return orders;
}

RunOutcome RunRounds(const BenchConfig& config, const BenchEnv& env) {
  RunOutcome out;
  out.orders = RoundOrders(MatrixCells(config), config.seed, config.repeat);
  for (int round = 0; round < config.repeat; ++round) {
    BenchEnv round_env = env;
    if (config.repeat > 1 && env.progress) {
      const std::string prefix =
          "r" + std::to_string(round + 1) + "/" + std::to_string(config.repeat) + " ";
      round_env.progress = [&env, prefix](const std::string& what, uint64_t done,
                                          uint64_t total) {
        env.progress(prefix + what, done, total);
      };
    }
    const std::vector<Cell>& order = out.orders[round];
    for (size_t position = 0; position < order.size(); ++position) {
      const Cell& cell = order[position];
      SetupTime setup;
      setup.run = config.label;
      setup.engine = cell.engine;
      setup.threads = cell.threads;
      setup.round = round;
      Status s;
      if (cell.engine == kFloorCell) {
        FloorResult floor;
        s = MeasureFloor(config, round_env, cell.threads, &floor);
        if (s.ok()) {
          floor.round = round;
          floor.position = static_cast<int>(position);
          setup.create_ms = floor.create_ms;
          setup.populate_ms = floor.populate_ms;
          out.floors.push_back(std::move(floor));
        }
      } else {
        const size_t first = out.rows.size();
        EngineSetup engine_setup;
        s = RunEngine(config, round_env, cell.engine, cell.threads, &out.rows, &engine_setup);
        for (size_t i = first; i < out.rows.size(); ++i) {
          out.rows[i].round = round;
          out.rows[i].position = static_cast<int>(position);
        }
        setup.create_ms = engine_setup.create_ms;
        setup.populate_ms = engine_setup.populate_ms;
      }
      if (s.ok()) {
        out.setups.push_back(std::move(setup));
      } else {
        std::string where = std::to_string(cell.threads) + " thread" +
                            (cell.threads == 1 ? "" : "s") + ", run " + config.label;
        if (config.repeat > 1) where += ", round " + std::to_string(round + 1);
        env.err("pmhash bench: " + cell.engine + " (" + where + "): " + s.ToString());
        ++out.failures;
      }
    }
  }
  return out;
}

}  // namespace pmhash::bench
