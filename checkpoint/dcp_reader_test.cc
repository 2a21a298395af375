// DcpReader on a real PyTorch DCP checkpoint (testdata/dcp_fsdp2_w2, written by
// testdata/make_dcp_fixture.py under torchrun: FSDP2 at W = 2 with AdamW, bf16, f16, a
// transposed view, a 0-d tensor) against the tensors torch itself gathered (expected.json), and
// on hostile variants of it: a path out of the directory, a truncated or corrupted data file,
// every truncation of the pickle, a pickle that names os.system.
#include "checkpoint/dcp_reader.h"

#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "checkpoint/pickle.h"
#include "common/testing/temp_dir.h"
#include "gtest/gtest.h"

namespace shardline::checkpoint {
namespace {

namespace fs = std::filesystem;
constexpr char kFixture[] = "checkpoint/testdata/dcp_fsdp2_w2";

std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void Spit(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

// The bytes of a string literal, NULs included.
template <size_t N>
std::string Bytes(const char (&s)[N]) {
  return std::string(s, N - 1);
}

// A copy of the fixture to damage.
std::string CopyFixture(const std::string& name) {
  const std::string dir = FreshTempDir(name);
  for (const auto& e : fs::directory_iterator(kFixture)) {
    fs::copy_file(e.path(), dir + "/" + e.path().filename().string());
  }
  return dir;
}

TEST(DcpReaderTest, ReadsEveryTensorOfARealFsdp2CheckpointAsTorchGatheredIt) {
  absl::StatusOr<DcpReader> r = DcpReader::Open(kFixture);
  ASSERT_TRUE(r.ok()) << r.status();
  google::protobuf::Struct expected;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(
                  Slurp(absl::StrCat(kFixture, "/expected.json")), &expected)
                  .ok());
  ASSERT_GE(expected.fields().size(), 12u);
  for (const auto& [fqn, values] : expected.fields()) {
    SCOPED_TRACE(fqn);
    absl::StatusOr<std::vector<float>> got = r->ReadFloat32(fqn);
    ASSERT_TRUE(got.ok()) << got.status();
    ASSERT_EQ(got->size(), static_cast<size_t>(values.list_value().values_size()));
    for (int i = 0; i < values.list_value().values_size(); ++i) {
      EXPECT_EQ((*got)[i], static_cast<float>(values.list_value().values(i).number_value()))
          << "element " << i;
    }
  }
  // The sharding is FSDP2's: 7 rows over two ranks as 4 + 3.
  const DcpTensor& w = r->tensors().at("model.0.weight");
  EXPECT_EQ(w.shape, (std::vector<int64_t>{7, 5}));
  ASSERT_EQ(w.chunks.size(), 2u);
  EXPECT_EQ(w.chunks[1].offsets, (std::vector<int64_t>{4, 0}));
  EXPECT_EQ(r->tensors().at("extra.bf16").dtype, TorchDtype::kBFloat16);
  EXPECT_EQ(r->tensors().at("extra.scalar").shape, std::vector<int64_t>{});
  bool saw_lr = false;
  for (const std::string& b : r->byte_entries()) saw_lr |= b == "optimizer.param_groups.0.lr";
  EXPECT_TRUE(saw_lr);
  EXPECT_EQ(r->ReadFloat32("no.such").status().code(), absl::StatusCode::kNotFound);
}

// A rank's range of a tensor: only the chunks it overlaps are read, so a range inside rank 0's
// rows reads nothing of __1_0.distcp (here: even with that file gone).
TEST(DcpReaderTest, ARangeReadsOnlyTheChunksItOverlaps) {
  const std::string dir =
      CopyFixture(::testing::UnitTest::GetInstance()->current_test_info()->name());
  absl::StatusOr<DcpReader> r = DcpReader::Open(dir);
  ASSERT_TRUE(r.ok()) << r.status();
  absl::StatusOr<std::vector<float>> whole = r->ReadFloat32("model.0.weight");  // 7 x 5
  ASSERT_TRUE(whole.ok()) << whole.status();
  // Rows 0-3 are rank 0's chunk, rows 4-6 rank 1's: elements [3, 23) span both.
  absl::StatusOr<std::vector<float>> mid = r->ReadFloat32Range("model.0.weight", 3, 23);
  ASSERT_TRUE(mid.ok()) << mid.status();
  EXPECT_EQ(*mid, std::vector<float>(whole->begin() + 3, whole->begin() + 23));
  fs::remove(dir + "/__1_0.distcp");
  absl::StatusOr<std::vector<float>> head = r->ReadFloat32Range("model.0.weight", 2, 19);
  ASSERT_TRUE(head.ok()) << head.status();
  EXPECT_EQ(*head, std::vector<float>(whole->begin() + 2, whole->begin() + 19));
  EXPECT_EQ(r->ReadFloat32Range("model.0.weight", 19, 21).status().code(),
            absl::StatusCode::kNotFound);  // row 4 is in the removed file
  EXPECT_EQ(r->ReadFloat32Range("model.0.weight", 30, 36).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(DcpReaderTest, RefusesAChunkFileOutsideTheDirectory) {
  const std::string dir =
      CopyFixture(::testing::UnitTest::GetInstance()->current_test_info()->name());
  std::string meta = Slurp(dir + "/.metadata");
  // Same length, so the pickle stays well formed: only the name changes.
  const size_t at = meta.find("__0_0.distcp");
  ASSERT_NE(at, std::string::npos);
  meta.replace(at, 12, "../../x.dcp.");
  Spit(dir + "/.metadata", meta);
  absl::StatusOr<DcpReader> r = DcpReader::Open(dir);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
  EXPECT_TRUE(absl::StrContains(r.status().message(), "\"../../x.dcp.\" is not a plain file"))
      << r.status();
}

TEST(DcpReaderTest, ATruncatedOrCorruptedDataFileIsDataLossNamingIt) {
  const std::string dir =
      CopyFixture(::testing::UnitTest::GetInstance()->current_test_info()->name());
  const std::string data = Slurp(dir + "/__1_0.distcp");
  Spit(dir + "/__1_0.distcp", data.substr(0, 100));  // Rank 1's chunks start in the cut part.
  absl::StatusOr<DcpReader> r = DcpReader::Open(dir);
  ASSERT_TRUE(r.ok()) << r.status();
  absl::Status s = r->ReadFloat32("model.0.weight").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "__1_0.distcp")) << s;

  // Every byte of the file flipped in turn: an error or the right shape, never a crash.
  std::string flipped = data;
  for (size_t i = 0; i < flipped.size(); i += 7) {
    flipped[i] ^= 0x5A;
    Spit(dir + "/__1_0.distcp", flipped);
    absl::StatusOr<std::vector<float>> v = r->ReadFloat32("model.0.weight");
    if (v.ok()) {
      EXPECT_EQ(v->size(), 35u);
    }
    flipped[i] ^= 0x5A;
  }
}

TEST(DcpReaderTest, EveryTruncationOfTheMetadataIsAnErrorNamingTheFile) {
  const std::string meta = Slurp(absl::StrCat(kFixture, "/.metadata"));
  for (size_t n = 0; n < meta.size(); n += 3) {
    absl::StatusOr<std::map<std::string, DcpTensor>> t =
        ParseDcpMetadata(meta.substr(0, n), "m/.metadata", nullptr);
    ASSERT_FALSE(t.ok()) << n;
    EXPECT_EQ(t.status().code(), absl::StatusCode::kDataLoss) << n;
    EXPECT_TRUE(absl::StartsWith(t.status().message(), "m/.metadata")) << t.status();
  }
}

TEST(DcpReaderTest, APickleThatWouldRunCodeIsOnlyDescribedAndRefused) {
  // pickle.dumps of os.system("touch /tmp/x") reduced by hand: protocol 2, GLOBAL, REDUCE.
  const std::string evil = Bytes(
      "\x80\x02"
      "cos\nsystem\n"
      "X\x0c\x00\x00\x00"
      "touch /tmp/x"
      "\x85"
      "R.");
  absl::StatusOr<Pickle> p = Pickle::Parse(evil, "evil");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->ClassName(p->root()), "os.system");
  absl::StatusOr<std::map<std::string, DcpTensor>> t = ParseDcpMetadata(evil, "evil", nullptr);
  EXPECT_TRUE(absl::StrContains(t.status().message(), "holds \"os.system\"")) << t.status();
}

TEST(PickleTest, AListThatHoldsItselfIsACycleOfIndicesNotALeak) {
  // EMPTY_LIST MEMOIZE BINGET 0 APPEND STOP: l = []; l.append(l)
  absl::StatusOr<Pickle> p = Pickle::Parse(Bytes("\x80\x04]\x94h\x00"
                                                 "a."),
                                           "cycle");
  ASSERT_TRUE(p.ok()) << p.status();
  const PickleNode& root = p->node(p->root());
  ASSERT_EQ(root.items.size(), 1u);
  EXPECT_EQ(root.items[0], p->root());
}

TEST(PickleTest, MalformedInputsNameTheOffsetAndOpcode) {
  struct Case {
    std::string bytes;
    std::string message;
  };
  const Case cases[] = {
      {Bytes("\x80\x02"), "without STOP"},
      {Bytes("\x80\x02h\x05."), "memo index 5 was never stored"},
      {Bytes("\x80\x02t."), "no MARK"},
      {Bytes("\x80\x02"
             "a."),
       "stack underflow"},
      {Bytes("\x80\x02\xff."), "opcode 0xff"},
      {Bytes("\x80\x02\x8a\x09"
             "123456789."),
       "more than 64 bits"},
      {Bytes("\x80\x02X\xff\xff\xff\x7f"
             "ab."),
       "truncated"},
      {Bytes("\x80\x02NN."), "2 values on the stack"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<Pickle> p = Pickle::Parse(c.bytes, "bad");
    ASSERT_FALSE(p.ok()) << c.message;
    EXPECT_EQ(p.status().code(), absl::StatusCode::kDataLoss);
    EXPECT_TRUE(absl::StrContains(p.status().message(), c.message)) << p.status();
    EXPECT_TRUE(absl::StartsWith(p.status().message(), "bad: pickle offset")) << p.status();
  }
}

TEST(PickleTest, IntegersOfEveryWidthAndSign) {
  // LONG1 of -2 (one byte 0xfe), BININT of -1, BININT2 of 513, in a tuple.
  absl::StatusOr<Pickle> p =
      Pickle::Parse(Bytes("\x80\x02(\x8a\x01\xfeJ\xff\xff\xff\xffM\x01\x02t."), "ints");
  ASSERT_TRUE(p.ok()) << p.status();
  std::vector<int64_t> v;
  ASSERT_TRUE(p->IntTuple(p->root(), &v));
  EXPECT_EQ(v, (std::vector<int64_t>{-2, -1, 513}));
}

}  // namespace
}  // namespace shardline::checkpoint
