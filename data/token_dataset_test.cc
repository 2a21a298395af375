#include "data/token_dataset.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "data/byte_tokenizer.h"

namespace shardline::data {
namespace {

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir != nullptr ? dir : "/tmp") + "/" + name;
}

std::string WriteFile(const std::string& name, const std::string& bytes) {
  const std::string path = TempPath(name);
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

TEST(ByteTokenizer, RoundTripsAnyBytes) {
  ByteTokenizer tok;
  const std::string text("Hi\xff\x00!", 5);
  EXPECT_EQ(tok.Encode(text), (std::vector<int64_t>{72, 105, 255, 0, 33}));
  EXPECT_EQ(tok.Decode(tok.Encode(text)), text);
  EXPECT_EQ(tok.Decode({72, 300}), "H?");
}

TEST(ByteTokenizer, DisplayDecodingIsValidUtf8WithoutControlCharacters) {
  ByteTokenizer tok;
  // "é" (valid 2-byte UTF-8), a lone continuation byte, ESC, a truncated 3-byte sequence.
  const std::vector<int64_t> ids = {'a', 0xC3, 0xA9, 0x80, 0x1B, '\n', 0xE2, 0x82};
  EXPECT_EQ(tok.DecodeForDisplay(ids),
            "a\xC3\xA9\xEF\xBF\xBD\xEF\xBF\xBD\n\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(tok.DecodeForDisplay(tok.Encode("ROMEO:\tgood")), "ROMEO:\tgood");
}

TEST(TokenDataset, ShakespeareSplitsIntoTrainAndValidation) {
  auto ds = TokenDataset::Open({"data/tinyshakespeare.txt", TokenFormat::kText, 0.1, 64, 256});
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_EQ((*ds)->num_tokens(), 1115394);
  const int64_t val_tokens = 111539;  // floor(1115394 * 0.1)
  EXPECT_EQ((*ds)->num_samples(Split::kTrain), (1115394 - val_tokens - 1) / 64);
  EXPECT_EQ((*ds)->num_samples(Split::kVal), (val_tokens - 1) / 64);
  std::vector<int64_t> seq(65);
  ASSERT_TRUE((*ds)->Read(Split::kTrain, 0, seq.data()).ok());
  EXPECT_EQ(ByteTokenizer().Decode(seq).substr(0, 14), "First Citizen:");
}

TEST(TokenDataset, ReadsLittleEndianU16AndU32) {
  const std::string u16 = WriteFile("t.u16", std::string("\x01\x00\x00\x01\x05\x00\xff\xff", 8));
  auto ds16 = TokenDataset::Open({u16, TokenFormat::kU16, 0.0, 2, 65536});
  ASSERT_TRUE(ds16.ok()) << ds16.status();
  std::vector<int64_t> seq(3);
  ASSERT_TRUE((*ds16)->Read(Split::kTrain, 0, seq.data()).ok());
  EXPECT_EQ(seq, (std::vector<int64_t>{1, 256, 5}));
  EXPECT_EQ((*ds16)->num_samples(Split::kTrain), 1);  // 4 tokens: one sequence of 2 + 1.

  const std::string u32 = WriteFile("t.u32", std::string("\x01\x00\x01\x00\x02\x00\x00\x00", 8));
  auto ds32 = TokenDataset::Open({u32, TokenFormat::kU32, 0.0, 1, 70000});
  ASSERT_TRUE(ds32.ok()) << ds32.status();
  ASSERT_TRUE((*ds32)->Read(Split::kTrain, 0, seq.data()).ok());
  EXPECT_EQ(seq[0], 65537);
  EXPECT_EQ(seq[1], 2);
}

TEST(TokenDataset, RejectsBadFiles) {
  auto missing = TokenDataset::Open({"/no/such.bin", TokenFormat::kU16, 0.1, 4, 256});
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("/no/such.bin"), absl::string_view::npos);

  const std::string odd = WriteFile("odd.u16", "abc");
  auto ragged = TokenDataset::Open({odd, TokenFormat::kU16, 0.0, 1, 65536});
  EXPECT_EQ(ragged.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(ragged.status().message().find("3 bytes is not a multiple of the token width 2"),
            absl::string_view::npos)
      << ragged.status();

  const std::string big = WriteFile("big.u16", std::string("\x00\x01\x02\x00\x03\x00", 6));
  auto vocab = TokenDataset::Open({big, TokenFormat::kU16, 0.0, 1, 100});
  EXPECT_EQ(vocab.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(vocab.status().message().find("token id 256 is >= model.vocab_size 100"),
            absl::string_view::npos)
      << vocab.status();

  const std::string tiny = WriteFile("tiny.txt", "hello world");
  auto short_seq = TokenDataset::Open({tiny, TokenFormat::kText, 0.0, 64, 256});
  EXPECT_EQ(short_seq.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(short_seq.status().message().find("hold no sequence of data.seq_len 64 + 1"),
            absl::string_view::npos)
      << short_seq.status();
}

// A data file truncated (or rewritten shorter) while a run reads it: the reads that reach past
// the new end fail naming the file, instead of the SIGBUS a mapping of it gave.
TEST(TokenFile, TruncatedAfterOpenIsDataLossNamingTheFile) {
  std::string bytes;
  for (int i = 0; i < 1000; ++i) bytes += std::string{static_cast<char>(i), '\0'};
  const std::string path = WriteFile("shrinks.u16", bytes);
  auto file = TokenFile::Open(path, TokenFormat::kU16);
  ASSERT_TRUE(file.ok()) << file.status();
  std::vector<int64_t> out(10);
  ASSERT_TRUE((*file)->Read(990, 10, out.data()).ok());
  EXPECT_EQ(out[9], 999 % 256);
  ASSERT_EQ(::truncate(path.c_str(), 1000), 0);          // 500 tokens left.
  ASSERT_TRUE((*file)->Read(490, 10, out.data()).ok());  // Still inside.
  absl::Status s = (*file)->Read(495, 10, out.data());
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_NE(s.message().find("data file \"" + path +
                             "\": truncated while in use: tokens [495, "
                             "505) end past its end at byte 1000 (it had 2000 bytes when opened)"),
            absl::string_view::npos)
      << s;
  auto max = (*file)->MaxToken();
  EXPECT_EQ(max.status().code(), absl::StatusCode::kDataLoss) << max.status();
  EXPECT_NE(max.status().message().find(path), absl::string_view::npos) << max.status();
}

TEST(TokenDataset, SequenceReadAfterTheFileWasTruncatedIsDataLossNamingTheFile) {
  const std::string path = WriteFile("shrinks.txt", std::string(4096, 'a'));
  auto ds = TokenDataset::Open({path, TokenFormat::kText, 0.0, 64, 256});
  ASSERT_TRUE(ds.ok()) << ds.status();
  std::vector<int64_t> seq(65);
  ASSERT_TRUE((*ds)->Read(Split::kTrain, 62, seq.data()).ok());
  ASSERT_EQ(::truncate(path.c_str(), 100), 0);
  absl::Status s = (*ds)->Read(Split::kTrain, 62, seq.data());
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_NE(s.message().find("data file \"" + path + "\": truncated while in use"),
            absl::string_view::npos)
      << s;
}

TEST(TokenDataset, TrainingFilesAreOneStreamAndValPathIsTheValidationPart) {
  // Two U16 training files (ids 0..9 and 10..15) and a validation file (ids 20..26).
  auto u16 = [](int from, int to) {
    std::string bytes;
    for (int i = from; i < to; ++i) bytes += std::string{static_cast<char>(i), '\0'};
    return bytes;
  };
  TokenDataset::Options o{"", TokenFormat::kU16, 0.0, 4, 64};
  o.paths = {WriteFile("a.u16", u16(0, 10)), WriteFile("b.u16", u16(10, 16))};
  o.val_path = WriteFile("v.u16", u16(20, 27));
  auto ds = TokenDataset::Open(o);
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_EQ((*ds)->num_tokens(), 16);
  EXPECT_EQ((*ds)->num_samples(Split::kTrain), 3);  // (16 - 1) / 4
  EXPECT_EQ((*ds)->num_samples(Split::kVal), 1);    // (7 - 1) / 4
  std::vector<int64_t> seq(5);
  ASSERT_TRUE((*ds)->Read(Split::kTrain, 2, seq.data()).ok());  // spans both files
  EXPECT_EQ(seq, (std::vector<int64_t>{8, 9, 10, 11, 12}));
  ASSERT_TRUE((*ds)->Read(Split::kVal, 0, seq.data()).ok());
  EXPECT_EQ(seq, (std::vector<int64_t>{20, 21, 22, 23, 24}));

  o.val_fraction = 0.1;
  auto both = TokenDataset::Open(o);
  EXPECT_EQ(both.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(both.status().message().find("must be 0 with data.val_path"), std::string::npos);
  o.val_fraction = 0;
  o.vocab_size = 25;
  auto big_id = TokenDataset::Open(o);
  EXPECT_EQ(big_id.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(big_id.status().message().find("v.u16\": token id 26 is >= model.vocab_size 25"),
            std::string::npos)
      << big_id.status();
}

}  // namespace
}  // namespace shardline::data
