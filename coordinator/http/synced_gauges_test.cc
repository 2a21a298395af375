// SyncedGauges: label sets follow the rounds of Set() calls.
#include "coordinator/http/synced_gauges.h"

#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include <string>

#include "gtest/gtest.h"

namespace shardline::coordinator {
namespace {

std::string Text(const prometheus::Registry& registry) {
  return prometheus::TextSerializer().Serialize(registry.Collect());
}

TEST(SyncedGauges, LabelSetsNotSetInARoundAreRemoved) {
  prometheus::Registry registry;
  auto& family = prometheus::BuildGauge().Name("g").Help("A gauge.").Register(registry);
  SyncedGauges gauges(family);
  gauges.Set({{"job", "a"}}, 1);
  gauges.Set({{"job", "b"}}, 2);
  gauges.RemoveUnset();
  EXPECT_EQ(gauges.size(), 2u);
  EXPECT_TRUE(family.Has({{"job", "a"}}));
  EXPECT_NE(Text(registry).find("g{job=\"b\"} 2\n"), std::string::npos) << Text(registry);

  gauges.Set({{"job", "b"}}, 3);
  gauges.RemoveUnset();
  EXPECT_EQ(gauges.size(), 1u);
  EXPECT_FALSE(family.Has({{"job", "a"}}));
  const std::string text = Text(registry);
  EXPECT_EQ(text.find("job=\"a\""), std::string::npos) << text;
  EXPECT_NE(text.find("g{job=\"b\"} 3\n"), std::string::npos) << text;
}

TEST(SyncedGauges, ARoundWithNothingSetEmptiesTheFamily) {
  prometheus::Registry registry;
  auto& family = prometheus::BuildGauge().Name("g").Help("A gauge.").Register(registry);
  SyncedGauges gauges(family);
  gauges.Set({{"worker", "w1"}, {"node", "n1"}}, 0.5);
  gauges.RemoveUnset();
  gauges.RemoveUnset();
  EXPECT_EQ(gauges.size(), 0u);
  EXPECT_FALSE(family.Has({{"worker", "w1"}, {"node", "n1"}}));
  EXPECT_EQ(Text(registry).find("w1"), std::string::npos) << Text(registry);
  // The same label set can come back.
  gauges.Set({{"worker", "w1"}, {"node", "n1"}}, 1.5);
  gauges.RemoveUnset();
  EXPECT_NE(Text(registry).find("g{node=\"n1\",worker=\"w1\"} 1.5\n"), std::string::npos)
      << Text(registry);
}

}  // namespace
}  // namespace shardline::coordinator
