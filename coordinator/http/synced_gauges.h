// SyncedGauges: a prometheus-cpp gauge family whose label sets mirror state read at scrape time
// (the running jobs, the live workers), so that a job or worker that is gone leaves the
// exposition instead of keeping its last value.
//
// Each scrape is one round: Set() every label set that exists now, then RemoveUnset() removes
// from the family every label set that was not set in this round (prometheus-cpp's
// Family::Remove).
//
// Thread safety: none; the owner serialises rounds (one scrape at a time). The family itself may
// be collected concurrently, as prometheus-cpp's families lock themselves.
#ifndef SHARDLINE_COORDINATOR_HTTP_SYNCED_GAUGES_H_
#define SHARDLINE_COORDINATOR_HTTP_SYNCED_GAUGES_H_

#include <cstdint>
#include <map>

#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/labels.h>

namespace shardline::coordinator {

class SyncedGauges {
 public:
  // `family` must outlive this object (the registry that owns it is kept beside it).
  explicit SyncedGauges(prometheus::Family<prometheus::Gauge>& family) : family_(family) {}
  SyncedGauges(const SyncedGauges&) = delete;
  SyncedGauges& operator=(const SyncedGauges&) = delete;

  // Sets the gauge of `labels` (adding it to the family if new) and keeps it this round.
  void Set(const prometheus::Labels& labels, double value);
  // Ends the round: removes the gauges not Set() since the last call.
  void RemoveUnset();

  size_t size() const { return live_.size(); }

 private:
  struct Live {
    prometheus::Gauge* gauge;
    uint64_t round;  // the last round that set it
  };
  prometheus::Family<prometheus::Gauge>& family_;
  std::map<prometheus::Labels, Live> live_;
  uint64_t round_ = 0;
};

}  // namespace shardline::coordinator

#endif  // SHARDLINE_COORDINATOR_HTTP_SYNCED_GAUGES_H_
