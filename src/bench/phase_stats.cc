#include "bench/phase_stats.h"

#include "pm/stats.h"

namespace pmhash::bench {

namespace {

uint64_t CounterOr0(const IndexStats& s, const char* name) {
  const auto it = s.engine_counters.find(name);
  return it == s.engine_counters.end() ? 0 : it->second;
}

}  // namespace

void FillFromMeasured(const Measured& m, PhaseResult* r) {
  r->ops = m.ops;
  r->seconds = m.seconds;
  r->samples = m.lat.count();
  r->sample_every = m.sample_every;
  r->p50 = m.lat.Percentile(0.50);
  r->p90 = m.lat.Percentile(0.90);
  r->p99 = m.lat.Percentile(0.99);
  r->p999 = m.lat.Percentile(0.999);
  r->p9999 = m.lat.Percentile(0.9999);
  r->mean = m.lat.Mean();
  r->max = m.lat.Max();
  r->cdf = m.lat.Cdf();
  r->errors = m.errors;
  r->first_error = m.first_error;
  r->checksum = m.checksum;
  r->pinned_cpus = m.pinned;
}

void FillFromStats(const BenchConfig& config, const IndexStats& before, const IndexStats& after,
                   PhaseResult* r) {
  r->delta = pm::CountersMinus(after.persist, before.persist);
  // The media model runs in adr (fed by flushes) and eadr (by stores, through the cache
  // model); none has no media. Reads: an engine that reports them has noted some since
  // it opened (every registered engine does; a test engine may not).
  r->counters_known = config.count_stats;
  r->media_known =
      config.count_stats && config.persist != PersistMode::kNone && config.media_model;
  r->redundancy_known = config.redundancy;
  r->lines_read_known = config.count_stats && after.persist.lines_read > 0;
  r->write_latency_ns = config.write_latency_ns;
  r->read_latency_ns = config.read_latency_ns;
  r->count = after.count;
  r->key_slots = after.key_slots;
  r->load_factor_known = after.key_slots > 0;
  r->load_factor = after.load_factor;
  r->pm_bytes = after.pm_bytes;
  r->dram_bytes = after.dram_bytes;
  r->mapping = after.mapping;
  r->engine_counters = after.engine_counters;
  // A filtered engine (smartht) counts the absent keys its filter answered and those it
  // let through to PM: in a phase of absent keys that is the filter's false-positive rate.
  if (r->phase == "negative" && after.engine_counters.count("filter_negatives") != 0 &&
      after.engine_counters.count("filter_false_positives") != 0) {
    const uint64_t neg = CounterOr0(after, "filter_negatives") -
                         CounterOr0(before, "filter_negatives");
    const uint64_t fp = CounterOr0(after, "filter_false_positives") -
                        CounterOr0(before, "filter_false_positives");
    if (neg + fp > 0) r->false_positive_rate = static_cast<double>(fp) / (neg + fp);
  }
}

}  // namespace pmhash::bench
