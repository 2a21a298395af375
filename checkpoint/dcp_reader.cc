#include "checkpoint/dcp_reader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "checkpoint/pickle.h"
#include "common/open_beneath.h"
#include "common/status_macros.h"

namespace shardline::checkpoint {
namespace {

constexpr char kMetaModule[] = "torch.distributed.checkpoint.metadata.";

absl::Status Bad(const std::string& what, absl::string_view why) {
  return absl::DataLossError(absl::StrCat(what, ": ", why));
}

// A dataclass object's field: its BUILD state is a dict of fields, or (slots) a tuple whose
// second element is that dict.
int Field(const Pickle& p, int object, absl::string_view name) {
  if (object < 0 || p.node(object).kind != PickleKind::kObject) return -1;
  int state = p.node(object).state;
  if (state >= 0 && p.node(state).kind == PickleKind::kTuple && p.node(state).items.size() == 2) {
    const int slots = p.node(state).items[1];
    const int v = p.DictGet(slots, name);
    if (v >= 0) return v;
    state = p.node(state).items[0];
  }
  return p.DictGet(state, name);
}

// TensorProperties' dtype: its state is the tuple (dtype, layout, requires_grad, memory_format,
// pin_memory) (its __getstate__), or a field dict in older releases.
absl::Status DtypeOf(const Pickle& p, int props, const std::string& what, TorchDtype* out) {
  int dtype = -1;
  if (props >= 0 && p.node(props).kind == PickleKind::kObject) {
    const int state = p.node(props).state;
    if (state >= 0 && p.node(state).kind == PickleKind::kTuple && !p.node(state).items.empty()) {
      dtype = p.node(state).items[0];
    } else {
      dtype = Field(p, props, "dtype");
    }
  }
  const std::string name = p.ClassName(dtype);
  if (name.empty()) return Bad(what, "no dtype in its properties");
  if (!TorchDtypeFromName(name, out)) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": dtype ", name, " (read: float32, float64, float16, bfloat16)"));
  }
  return absl::OkStatus();
}

absl::Status ParseTensorEntry(const Pickle& p, int meta, const std::string& what, DcpTensor* t) {
  RETURN_IF_ERROR(DtypeOf(p, Field(p, meta, "properties"), what, &t->dtype));
  if (!p.IntTuple(Field(p, meta, "size"), &t->shape)) return Bad(what, "no size");
  for (int64_t d : t->shape) {
    if (d < 0 || d > (int64_t{1} << 40)) return Bad(what, absl::StrCat("size ", d));
  }
  const int chunks = Field(p, meta, "chunks");
  if (chunks < 0 || p.node(chunks).kind != PickleKind::kList) return Bad(what, "no chunk list");
  for (int c : p.node(chunks).items) {
    DcpChunk chunk;
    if (p.ClassName(c) != absl::StrCat(kMetaModule, "ChunkStorageMetadata") ||
        !p.IntTuple(Field(p, c, "offsets"), &chunk.offsets) ||
        !p.IntTuple(Field(p, c, "sizes"), &chunk.sizes)) {
      return Bad(what, "a chunk that is not ChunkStorageMetadata(offsets, sizes)");
    }
    if (chunk.offsets.size() != t->shape.size() || chunk.sizes.size() != t->shape.size()) {
      return Bad(what, "a chunk of another rank than the tensor");
    }
    for (size_t d = 0; d < t->shape.size(); ++d) {
      if (chunk.offsets[d] < 0 || chunk.sizes[d] < 0 || chunk.offsets[d] > t->shape[d] ||
          chunk.sizes[d] > t->shape[d] - chunk.offsets[d]) {
        return Bad(what, absl::StrCat("chunk at [", absl::StrJoin(chunk.offsets, ", "),
                                      "] of sizes [", absl::StrJoin(chunk.sizes, ", "),
                                      "] lies outside size [", absl::StrJoin(t->shape, ", "), "]"));
      }
    }
    t->chunks.push_back(std::move(chunk));
  }
  return absl::OkStatus();
}

// A chunk's file must be a plain name in the directory: the metadata may come from anyone.
bool PlainFileName(const std::string& name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos &&
         name.find('\0') == std::string::npos;
}

absl::Status ParseStorageEntry(const Pickle& p, int index, int info, const std::string& file_what,
                               std::map<std::string, DcpTensor>* tensors) {
  const std::string* fqn = p.String(Field(p, index, "fqn"));
  if (p.ClassName(index) != absl::StrCat(kMetaModule, "MetadataIndex") || fqn == nullptr) {
    return Bad(file_what, "a storage_data key that is not MetadataIndex(fqn, ...)");
  }
  auto it = tensors->find(*fqn);
  if (it == tensors->end()) return absl::OkStatus();  // A byte entry: never read.
  const std::string what = absl::StrCat(file_what, ": ", *fqn);
  std::vector<int64_t> offset;
  if (!p.IntTuple(Field(p, index, "offset"), &offset)) return Bad(what, "no chunk offset");
  const std::string* path = p.String(Field(p, info, "relative_path"));
  int64_t at = 0, length = 0;
  if (path == nullptr || !p.Int(Field(p, info, "offset"), &at) ||
      !p.Int(Field(p, info, "length"), &length) || at < 0 || length < 0) {
    return Bad(what, "storage info without relative_path, offset and length");
  }
  if (!PlainFileName(*path)) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": relative_path \"", *path,
                                                   "\" is not a plain file name in the directory"));
  }
  const int transforms = Field(p, info, "transform_descriptors");
  if (transforms >= 0 && p.node(transforms).kind != PickleKind::kNone &&
      !p.node(transforms).items.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what,
                     ": stored with transform_descriptors (compression or another "
                     "extension), which this reader does not undo"));
  }
  for (DcpChunk& c : it->second.chunks) {
    if (c.offsets == offset) {
      if (!c.file.empty()) return Bad(what, "two storage entries for one chunk");
      c.file = *path;
      c.offset = at;
      c.length = length;
      return absl::OkStatus();
    }
  }
  return Bad(what, absl::StrCat("storage entry for a chunk at [", absl::StrJoin(offset, ", "),
                                "] that state_dict_metadata does not list"));
}

absl::Status ReadRange(const std::string& path, int64_t at, int64_t length, std::string* out) {
  ASSIGN_OR_RETURN(int fd, OpenForRead(path, "DCP data file"));
  struct stat st;
  if (::fstat(fd, &st) != 0 || st.st_size < at || st.st_size - at < length) {
    ::close(fd);
    return absl::DataLossError(absl::StrCat(path, ": shorter than the byte range [", at, ", ",
                                            at + length, ") its .metadata gives"));
  }
  out->resize(length);
  int64_t done = 0;
  while (done < length) {
    const ssize_t n = ::pread(fd, out->data() + done, length - done, at + done);
    if (n <= 0) {
      const int err = errno;
      ::close(fd);
      return absl::DataLossError(absl::StrCat(path, ": read failed at ", at + done, ": ",
                                              n < 0 ? std::strerror(err) : "end of file"));
    }
    done += n;
  }
  ::close(fd);
  return absl::OkStatus();
}

}  // namespace

int64_t DcpTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

absl::StatusOr<std::map<std::string, DcpTensor>> ParseDcpMetadata(
    const std::string& bytes, const std::string& what, std::vector<std::string>* byte_entries) {
  ASSIGN_OR_RETURN(Pickle p, Pickle::Parse(bytes, what));
  const int root = p.root();
  if (p.ClassName(root) != absl::StrCat(kMetaModule, "Metadata")) {
    return Bad(what, absl::StrCat("the pickle holds \"", p.ClassName(root),
                                  "\", not torch.distributed.checkpoint.metadata.Metadata"));
  }
  const int sdm = Field(p, root, "state_dict_metadata");
  const int storage = Field(p, root, "storage_data");
  if (sdm < 0 || p.node(sdm).kind != PickleKind::kDict) return Bad(what, "no state_dict_metadata");
  if (storage < 0 || p.node(storage).kind != PickleKind::kDict) return Bad(what, "no storage_data");
  std::map<std::string, DcpTensor> tensors;
  const std::vector<int>& entries = p.node(sdm).items;
  for (size_t i = 0; i + 1 < entries.size(); i += 2) {
    const std::string* fqn = p.String(entries[i]);
    if (fqn == nullptr) return Bad(what, "a state_dict_metadata key that is not a string");
    const std::string cls = p.ClassName(entries[i + 1]);
    if (cls == absl::StrCat(kMetaModule, "BytesStorageMetadata")) {
      if (byte_entries != nullptr) byte_entries->push_back(*fqn);
      continue;
    }
    if (cls != absl::StrCat(kMetaModule, "TensorStorageMetadata")) {
      return Bad(what, absl::StrCat(*fqn, ": entry of class \"", cls, "\""));
    }
    DcpTensor t;
    RETURN_IF_ERROR(ParseTensorEntry(p, entries[i + 1], absl::StrCat(what, ": ", *fqn), &t));
    if (!tensors.emplace(*fqn, std::move(t)).second) return Bad(what, *fqn + ": listed twice");
  }
  const std::vector<int>& infos = p.node(storage).items;
  for (size_t i = 0; i + 1 < infos.size(); i += 2) {
    RETURN_IF_ERROR(ParseStorageEntry(p, infos[i], infos[i + 1], what, &tensors));
  }
  for (const auto& [fqn, t] : tensors) {
    for (const DcpChunk& c : t.chunks) {
      if (c.file.empty()) {
        return Bad(what, absl::StrCat(fqn, ": no storage entry for its chunk at [",
                                      absl::StrJoin(c.offsets, ", "), "]"));
      }
    }
  }
  return tensors;
}

bool DcpReader::LooksLikeDcp(const std::string& dir) {
  struct stat st;
  return ::stat(absl::StrCat(dir, "/", kDcpMetadataFile).c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

absl::StatusOr<DcpReader> DcpReader::Open(const std::string& dir) {
  const std::string path = absl::StrCat(dir, "/", kDcpMetadataFile);
  struct stat st;
  if (::stat(path.c_str(), &st) == 0 && st.st_size > kMaxMetadataBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": ", st.st_size, " bytes, more than the ", kMaxMetadataBytes, " read"));
  }
  ASSIGN_OR_RETURN(std::string bytes, ReadFileBeneath(path, "DCP metadata"));
  DcpReader r;
  r.dir_ = dir;
  ASSIGN_OR_RETURN(r.tensors_, ParseDcpMetadata(bytes, path, &r.byte_entries_));
  return r;
}

absl::StatusOr<std::vector<float>> DcpReader::ReadFloat32(const std::string& fqn) const {
  auto it = tensors_.find(fqn);
  if (it == tensors_.end()) {
    return absl::NotFoundError(absl::StrCat(dir_, ": no tensor \"", fqn, "\" in its .metadata"));
  }
  return ReadFloat32Range(fqn, 0, it->second.numel());
}

absl::StatusOr<std::vector<float>> DcpReader::ReadFloat32Range(const std::string& fqn,
                                                               int64_t start, int64_t end) const {
  auto it = tensors_.find(fqn);
  if (it == tensors_.end()) {
    return absl::NotFoundError(absl::StrCat(dir_, ": no tensor \"", fqn, "\" in its .metadata"));
  }
  const DcpTensor& t = it->second;
  if (start < 0 || end < start || end > t.numel()) {
    return absl::InvalidArgumentError(
        absl::StrCat(fqn, ": range [", start, ", ", end, ") outside its ", t.numel(), " elements"));
  }
  const int rank = static_cast<int>(t.shape.size());
  // Row-major strides of the whole tensor.
  std::vector<int64_t> full_stride(rank, 1);
  for (int d = rank - 2; d >= 0; --d) full_stride[d] = full_stride[d + 1] * t.shape[d + 1];
  std::vector<float> out(end - start);
  std::vector<uint8_t> covered(end - start, 0);
  std::string bytes;
  for (const DcpChunk& c : t.chunks) {
    // The chunk's first and last element in the whole tensor: a chunk wholly outside the range
    // is not read at all (each rank reads the chunks its shard overlaps).
    int64_t first = 0, last = 0, count = 1;
    for (int d = 0; d < rank; ++d) {
      first += c.offsets[d] * full_stride[d];
      last += (c.offsets[d] + c.sizes[d] - 1) * full_stride[d];
      count *= c.sizes[d];
    }
    if (count == 0 || last < start || first >= end) continue;
    const std::string file = absl::StrCat(dir_, "/", c.file);
    const std::string what = absl::StrCat(file, " at ", c.offset, " (", fqn, ")");
    RETURN_IF_ERROR(ReadRange(file, c.offset, c.length, &bytes));
    ASSIGN_OR_RETURN(TorchSavedTensor saved, ReadTorchSavedTensor(bytes, what));
    if (saved.shape != c.sizes) {
      return Bad(what, absl::StrCat("holds a tensor of size [", absl::StrJoin(saved.shape, ", "),
                                    "], not the chunk's [", absl::StrJoin(c.sizes, ", "), "]"));
    }
    // Walk the chunk's elements in row-major order with an index counter.
    std::vector<int64_t> idx(rank, 0);
    for (int64_t e = 0; e < count; ++e) {
      int64_t src = saved.storage_offset, dst = 0;
      for (int d = 0; d < rank; ++d) {
        src += idx[d] * saved.strides[d];
        dst += (c.offsets[d] + idx[d]) * full_stride[d];
      }
      if (dst >= start && dst < end) {
        if (covered[dst - start]) {
          return Bad(what, absl::StrCat("overlaps another chunk at element ", dst));
        }
        covered[dst - start] = 1;
        out[dst - start] = TorchElementAsFloat(saved, src);
      }
      for (int d = rank - 1; d >= 0; --d) {
        if (++idx[d] < c.sizes[d]) break;
        idx[d] = 0;
      }
    }
  }
  for (int64_t e = 0; e < end - start; ++e) {
    if (!covered[e]) {
      return Bad(absl::StrCat(dir_, ": ", fqn), absl::StrCat("its chunks leave element ", start + e,
                                                             " of ", t.numel(), " unwritten"));
    }
  }
  return out;
}

}  // namespace shardline::checkpoint
