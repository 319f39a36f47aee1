// PhaseResult::ToJson: one row of the JSON results (the contract's fields, then those
// beyond it).
#include "bench/runner.h"

namespace pmhash::bench {

std::optional<double> PhaseResult::MediaWriteAmp() const {
  if (!media_known || delta.user_bytes == 0) return std::nullopt;
  return static_cast<double>(delta.media_writes) * 256 / static_cast<double>(delta.user_bytes);
}

std::optional<double> PhaseResult::MediaWriteAmpStored() const {
  if (!media_known || delta.bytes_stored == 0) return std::nullopt;
  return static_cast<double>(delta.media_writes) * 256 / static_cast<double>(delta.bytes_stored);
}

namespace {
Json Optional(const std::optional<double>& v) { return v ? Json(*v) : Json(); }
}  // namespace

Json PhaseResult::ToJson() const {
  const double n = ops > 0 ? static_cast<double>(ops) : 1;
  Json j = Json::Object();
  j.Set("run", run);
  j.Set("engine", engine);
  j.Set("threads", threads);
  j.Set("phase", phase);
  j.Set("phase_index", phase_index);
  j.Set("batch", uint64_t{batch});
  j.Set("ops", ops);
  j.Set("seconds", seconds);
  j.Set("mops", mops());
  Json lat = Json::Object();
  const bool have = samples > 0;
  lat.Set("p50", NumberOrNull(have, p50));
  lat.Set("p90", NumberOrNull(have, p90));
  lat.Set("p99", NumberOrNull(have, p99));
  lat.Set("p999", NumberOrNull(have, p999));
  lat.Set("p9999", NumberOrNull(have, p9999));
  lat.Set("mean", NumberOrNull(have, mean));
  lat.Set("max", NumberOrNull(have, max));
  lat.Set("samples", samples);
  lat.Set("sample_every", uint64_t{sample_every});
  j.Set("latency_ns", lat);
  const bool any = ops > 0;
  const bool counted = any && counters_known;
  j.Set("flushes_per_op", NumberOrNull(counted, delta.flushes / n));
  j.Set("fences_per_op", NumberOrNull(counted, delta.fences / n));
  j.Set("pm_bytes_written_per_op", NumberOrNull(counted, delta.bytes_stored / n));
  j.Set("media_writes_per_op", NumberOrNull(any && media_known, delta.media_writes / n));
  j.Set("media_write_amp", Optional(MediaWriteAmp()));
  j.Set("pm_lines_read_per_op", NumberOrNull(any && lines_read_known, delta.lines_read / n));
  j.Set("load_factor", NumberOrNull(load_factor_known, load_factor));
  j.Set("pm_bytes", pm_bytes);
  j.Set("dram_bytes", dram_bytes);
  j.Set("recovery_ms", recovery_ms ? Json(*recovery_ms) : Json());
  // Beyond the contract: the media model's figures per operation (bench/README.md,
  // "Counting rules"), then what a reader needs to trust the figures.
  j.Set("media_reads_per_op", NumberOrNull(any && lines_read_known, delta.media_reads / n));
  j.Set("pm_lines_written_per_op", NumberOrNull(any && media_known, delta.lines_written / n));
  j.Set("media_rmw_reads_per_op", NumberOrNull(any && media_known, delta.media_rmw_reads / n));
  j.Set("write_backs_per_op", NumberOrNull(counted, delta.write_backs / n));
  j.Set("user_bytes_per_op", NumberOrNull(counted, delta.user_bytes / n));
  j.Set("media_write_amp_stored", Optional(MediaWriteAmpStored()));
  j.Set("emulated_write_waits_per_op",
        NumberOrNull(any && write_latency_ns > 0, delta.emulated_write_waits / n));
  j.Set("emulated_read_waits_per_op",
        NumberOrNull(any && read_latency_ns > 0, delta.emulated_read_waits / n));
  j.Set("emulated_reads_hidden_per_op",
        NumberOrNull(any && read_latency_ns > 0, delta.emulated_reads_hidden / n));
  j.Set("count", count);
  j.Set("key_slots", key_slots);
  j.Set("redundant_flushes_per_op",
        NumberOrNull(any && redundancy_known, delta.redundant_flushes / n));
  j.Set("redundant_fences_per_op",
        NumberOrNull(any && redundancy_known, delta.redundant_fences / n));
  j.Set("recovery_open_ms", recovery_open_ms ? Json(*recovery_open_ms) : Json());
  j.Set("reopen_ms", reopen_ms ? Json(*reopen_ms) : Json());
  j.Set("false_positive_rate", false_positive_rate ? Json(*false_positive_rate) : Json());
  Json counters = Json::Object();
  for (const auto& [name, value] : engine_counters) counters.Set(name, value);
  j.Set("engine_counters", counters);
  if (cdf.empty()) {
    j.Set("latency_cdf", Json());
  } else {
    Json cq = Json::Array(), cns = Json::Array();
    for (const auto& [q, ns] : cdf) {
      cq.Push(q);
      cns.Push(ns);
    }
    Json c = Json::Object();
    c.Set("quantiles", cq);
    c.Set("ns", cns);
    j.Set("latency_cdf", c);
  }
  j.Set("errors", errors);
  j.Set("first_error", first_error.empty() ? Json() : Json(first_error));
  j.Set("checksum", checksum);
  j.Set("mapping", mapping);
  Json cpus = Json::Array();
  for (int c : pinned_cpus) cpus.Push(c);
  j.Set("pinned_cpus", pinned_cpus.empty() ? Json() : cpus);
  j.Set("note", note.empty() ? Json() : Json(note));
  return j;
}

}  // namespace pmhash::bench
