#include "bench/phase_stats.h"

namespace pmhash::bench {

PersistCounters Minus(const PersistCounters& a, const PersistCounters& b) {
  PersistCounters d;
  d.flushes = a.flushes - b.flushes;
  d.fences = a.fences - b.fences;
  d.bytes_stored = a.bytes_stored - b.bytes_stored;
  d.media_writes = a.media_writes - b.media_writes;
  d.lines_read = a.lines_read - b.lines_read;
  d.redundant_flushes = a.redundant_flushes - b.redundant_flushes;
  d.redundant_fences = a.redundant_fences - b.redundant_fences;
  d.write_backs = a.write_backs - b.write_backs;
  d.lines_written = a.lines_written - b.lines_written;
  d.media_reads = a.media_reads - b.media_reads;
  d.media_rmw_reads = a.media_rmw_reads - b.media_rmw_reads;
  d.user_bytes = a.user_bytes - b.user_bytes;
  d.ops = a.ops - b.ops;
  d.emulated_write_waits = a.emulated_write_waits - b.emulated_write_waits;
  d.emulated_read_waits = a.emulated_read_waits - b.emulated_read_waits;
  d.emulated_reads_hidden = a.emulated_reads_hidden - b.emulated_reads_hidden;
  return d;
}

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
  r->delta = Minus(after.persist, before.persist);
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
