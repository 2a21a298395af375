#include "coordinator/http/synced_gauges.h"

namespace shardline::coordinator {

void SyncedGauges::Set(const prometheus::Labels& labels, double value) {
  auto it = live_.find(labels);
  if (it == live_.end()) it = live_.emplace(labels, Live{&family_.Add(labels), round_}).first;
  it->second.gauge->Set(value);
  it->second.round = round_;
}

void SyncedGauges::RemoveUnset() {
  for (auto it = live_.begin(); it != live_.end();) {
    if (it->second.round == round_) {
      ++it;
      continue;
    }
    family_.Remove(it->second.gauge);
    it = live_.erase(it);
  }
  ++round_;
}

}  // namespace shardline::coordinator
