#include "models/torchscript_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <utility>

#include <ATen/ATen.h>
#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/autograd/grad_mode.h>
#include <torch/csrc/jit/serialization/import.h>
#include <torch/csrc/jit/serialization/import_read.h>
#include <torch/csrc/jit/serialization/storage_context.h>
#include <torch/csrc/jit/serialization/unpickler.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/torch_status.h"

namespace shardline::models {
namespace {

constexpr int64_t kElementBytes = 4;  // float32, the only parameter dtype TorchScriptModel takes.
constexpr char kDataDir[] = "data/";

// Thrown out of the unpickler's object loader when the file needs torch::jit::load's own path.
// Not a std::exception, so no handler between here and SplitLoad takes it for an error.
struct NeedsWholeLoad {
  std::string reason;
};

// Every tensor reachable from `v` (object slots, lists, tuples, dicts), each container once.
void CollectTensors(const c10::IValue& v, std::set<const void*>* seen,
                    std::vector<at::Tensor>* out) {
  if (v.isTensor()) {
    out->push_back(v.toTensor());
    return;
  }
  if (v.isPtrType() && !seen->insert(v.internalToPointer()).second) return;
  if (v.isObject()) {
    const auto obj = v.toObject();
    for (size_t i = 0; i < obj->slots().size(); ++i) CollectTensors(obj->getSlot(i), seen, out);
  } else if (v.isList()) {
    for (const c10::IValue& e : v.toListRef()) CollectTensors(e, seen, out);
  } else if (v.isTuple()) {
    for (const c10::IValue& e : v.toTupleRef().elements()) CollectTensors(e, seen, out);
  } else if (v.isGenericDict()) {
    for (const auto& kv : v.toGenericDict()) {
      CollectTensors(kv.key(), seen, out);
      CollectTensors(kv.value(), seen, out);
    }
  }
}

void PreadExactly(int fd, char* dst, int64_t n, int64_t offset, const std::string& path) {
  while (n > 0) {
    const ssize_t got = ::pread(fd, dst, static_cast<size_t>(n), static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR) continue;
    TORCH_CHECK(got > 0, "read ", path, " at byte ", offset, ": ",
                got == 0 ? "unexpected end of file" : std::strerror(errno));
    dst += got;
    n -= got;
    offset += got;
  }
}

// Elements from a view's storage offset to the last one it touches, inclusive (its sizes are
// not empty).
int64_t SpanElements(const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides) {
  int64_t span = 1;
  for (size_t d = 0; d < sizes.size(); ++d) span += (sizes[d] - 1) * strides[d];
  return span;
}

bool IsRowMajor(const ScriptFileParam& p) {
  int64_t expected = 1;
  for (size_t d = p.sizes.size(); d-- > 0;) {
    if (p.sizes[d] != 1 && p.strides[d] != expected) return false;
    expected *= p.sizes[d];
  }
  return true;
}

// Elements [start, end) of `p`'s row-major flattening into `dst`. A row-major parameter reads
// just those elements; another layout (a transposed weight) reads its whole span once.
void ReadRange(int fd, const std::string& path, const ScriptFileParam& p, int64_t start,
               int64_t end, const at::Tensor& dst) {
  at::NoGradGuard no_grad;
  const auto f32 = at::TensorOptions().dtype(at::kFloat);
  if (IsRowMajor(p)) {
    at::Tensor host = at::empty({end - start}, f32);
    PreadExactly(fd, static_cast<char*>(host.data_ptr()), (end - start) * kElementBytes,
                 p.file_offset + (p.storage_offset + start) * kElementBytes, path);
    dst.copy_(host);
    return;
  }
  const int64_t span = SpanElements(p.sizes, p.strides);
  at::Tensor host = at::empty({span}, f32);
  PreadExactly(fd, static_cast<char*>(host.data_ptr()), span * kElementBytes,
               p.file_offset + p.storage_offset * kElementBytes, path);
  dst.copy_(
      host.as_strided(p.sizes, p.strides).contiguous().view({-1}).narrow(0, start, end - start));
}

// The compression method of a zip record from its local file header (0: stored).
uint16_t CompressionMethod(int fd, const std::string& path, int64_t header_offset) {
  unsigned char method[2];
  PreadExactly(fd, reinterpret_cast<char*>(method), 2, header_offset + 8, path);
  return static_cast<uint16_t>(method[0] | (method[1] << 8));
}

// The storage made for each data/ record (without memory), and the record's key.
using StorageKeys = std::map<const c10::StorageImpl*, std::string>;

// Step 2, first half: every data/ storage made without memory, with the record's size, into
// `context` (which keeps them alive): the unpickler takes storages from the context instead of
// reading the records. Returns "" or why the file must be loaded whole.
std::string AddStoragesWithoutData(caffe2::serialize::PyTorchStreamReader& reader,
                                   torch::jit::DeserializationStorageContext* context,
                                   StorageKeys* key_of) {
  for (const std::string& record : reader.getAllRecords()) {
    if (absl::StartsWith(record, "constants/")) return "its code has tensor constants";
    if (!absl::StartsWith(record, kDataDir)) continue;
    const std::string key = record.substr(std::strlen(kDataDir));
    c10::Storage storage(c10::Storage::use_byte_size_t(), reader.getRecordSize(record),
                         at::DataPtr(nullptr, at::Device(at::kCPU)), /*allocator=*/nullptr,
                         /*resizable=*/false);
    (*key_of)[storage.unsafeGetStorageImpl()] = key;
    context->addStorage(key, std::move(storage));
  }
  return "";
}

// Step 2, second half: data.pkl unpickled into objects of the classes in `cu`, its tensors on
// the storages of `context`. Throws NeedsWholeLoad for a class with __setstate__.
c10::IValue UnpickleOntoStorages(
    const std::shared_ptr<torch::jit::CompilationUnit>& cu,
    caffe2::serialize::PyTorchStreamReader& reader,
    const std::shared_ptr<torch::jit::DeserializationStorageContext>& context) {
  auto type_resolver = [cu](const c10::QualifiedName& name) {
    c10::TypePtr type = cu->get_type(name);
    TORCH_CHECK(type != nullptr, "unknown type ", name.qualifiedName(), " in data.pkl");
    return c10::StrongTypePtr(cu, type);
  };
  // As torch::jit::load builds objects from their pickled attribute dicts, except that a class
  // with __setstate__ is not run on storage-less tensors.
  auto obj_loader = [](const at::StrongTypePtr& type, c10::IValue state) {
    auto cls = type.type_->expect<c10::ClassType>();
    if (cls->findMethod("__setstate__") != nullptr) {
      throw NeedsWholeLoad{absl::StrCat("class ", cls->name()->qualifiedName(),
                                        " restores itself with __setstate__")};
    }
    auto dict = std::move(state).toGenericDict();
    const size_t n = cls->numAttributes();
    auto obj = c10::ivalue::Object::create(type, n);
    for (size_t i = 0; i < n; ++i) obj->setSlot(i, dict.at(cls->getAttributeName(i)));
    return obj;
  };
  return torch::jit::readArchiveAndTensors("data", /*pickle_prefix=*/"", /*tensor_prefix=*/"",
                                           type_resolver, obj_loader, at::Device(at::kCPU), reader,
                                           torch::jit::Unpickler::defaultTypeParser, context);
}

// The module's parameters, each tensor once (under its first name), and the storages they use.
struct SplitParams {
  std::set<const c10::TensorImpl*> tensors;
  std::set<const c10::StorageImpl*> storages;
  std::vector<at::Tensor> params;
  std::vector<ScriptFileParam> entries;  // Where each of `params` lies in the file.
};

// Step 4's table: where each parameter lies in the file; their records must be stored, not
// compressed, to be read by offset. Returns "" with `out` filled, or why the file must be loaded
// whole. Throws on a short or unreadable file.
std::string LocateParams(const std::string& path, caffe2::serialize::PyTorchStreamReader& reader,
                         const torch::jit::Module& module, const StorageKeys& key_of,
                         SplitParams* out) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  TORCH_CHECK(fd >= 0, "open ", path, ": ", std::strerror(errno));
  struct CloseOnExit {  // PreadExactly throws on a short file.
    int fd;
    ~CloseOnExit() { ::close(fd); }
  } close_on_exit{fd};
  for (const auto& named : module.named_parameters(/*recurse=*/true)) {
    const at::Tensor& p = named.value;
    if (!out->tensors.insert(p.unsafeGetTensorImpl()).second) continue;  // Tied: seen.
    if (p.scalar_type() != at::kFloat) {
      return absl::StrCat("parameter ", named.name, " is not float32");
    }
    auto key = key_of.find(p.storage().unsafeGetStorageImpl());
    if (key == key_of.end()) return absl::StrCat("parameter ", named.name, " has no data record");
    out->storages.insert(key->first);
    const std::string record = absl::StrCat(kDataDir, key->second);
    if (CompressionMethod(fd, path, static_cast<int64_t>(reader.getRecordHeaderOffset(record))) !=
        0) {
      return absl::StrCat("its record ", record, " is compressed");
    }
    ScriptFileParam e;
    e.name = named.name;
    e.sizes = p.sizes().vec();
    e.strides = p.strides().vec();
    e.storage_offset = p.storage_offset();
    e.file_offset = static_cast<int64_t>(reader.getRecordOffset(record));
    e.record_bytes = static_cast<int64_t>(reader.getRecordSize(record));
    TORCH_CHECK(
        p.numel() == 0 ||
            (e.storage_offset + SpanElements(e.sizes, e.strides)) * kElementBytes <= e.record_bytes,
        "parameter ", named.name, " reaches past its record ", record, " (", e.record_bytes,
        " bytes)");
    out->entries.push_back(std::move(e));
    out->params.push_back(p);
  }
  return "";
}

// Step 3: every tensor reachable from `root` that is not a parameter gets its storage read
// whole; one sharing a parameter's storage would need the parameter whole too (returns why).
std::string ReadOtherStorages(const c10::IValue& root,
                              caffe2::serialize::PyTorchStreamReader& reader,
                              const StorageKeys& key_of, const SplitParams& params) {
  std::vector<at::Tensor> all;
  std::set<const void*> seen;
  CollectTensors(root, &seen, &all);
  std::set<const c10::StorageImpl*> read;
  for (const at::Tensor& t : all) {
    if (!t.defined() || params.tensors.count(t.unsafeGetTensorImpl()) > 0) continue;
    const c10::StorageImpl* impl = t.storage().unsafeGetStorageImpl();
    if (params.storages.count(impl) > 0) {
      return "a parameter shares its memory with a tensor that is not a parameter";
    }
    auto key = key_of.find(impl);
    if (key == key_of.end() || !read.insert(impl).second) continue;
    auto [data, n] = reader.getRecord(absl::StrCat(kDataDir, key->second));
    t.storage().set_data_ptr_noswap(std::move(data));
  }
  return "";
}

// The split load (steps 1-4 of the header). Returns "" with `out` filled, or why the file must
// be loaded whole. Throws what LibTorch throws, and NeedsWholeLoad.
std::string SplitLoad(const std::string& path, LoadedScript* out) {
  // 1. Classes and methods, no tensor data.
  torch::jit::Module meta = torch::jit::load(path, at::Device(at::kMeta));
  auto reader = std::make_shared<caffe2::serialize::PyTorchStreamReader>(path);
  if (reader->hasRecord("byteorder")) {
    auto [bytes, n] = reader->getRecord("byteorder");
    if (std::string(static_cast<const char*>(bytes.get()), n) != "little") {
      return "its tensors are stored big-endian";
    }
  }
  // 2. data.pkl into objects of those classes, on storages without memory.
  auto context = std::make_shared<torch::jit::DeserializationStorageContext>();
  StorageKeys key_of;  // The context keeps the storages alive.
  std::string why = AddStoragesWithoutData(*reader, context.get(), &key_of);
  if (!why.empty()) return why;
  c10::IValue root = UnpickleOntoStorages(meta._ivalue()->compilation_unit(), *reader, context);
  torch::jit::Module module(root.toObject());
  // 4. (located first: step 3 must know which tensors are parameters), then 3.
  SplitParams params;
  why = LocateParams(path, *reader, module, key_of, &params);
  if (!why.empty()) return why;
  why = ReadOtherStorages(root, *reader, key_of, params);
  if (!why.empty()) return why;
  for (at::Tensor& p : params.params) fsdp::ReleaseTensorStorage(p);
  out->module = std::move(module);
  out->init = std::make_unique<ScriptFileInit>(path, std::move(params.entries));
  return "";
}

}  // namespace

ScriptFileInit::ScriptFileInit(std::string path, std::vector<ScriptFileParam> params)
    : path_(std::move(path)), params_(std::move(params)) {}

absl::Status ScriptFileInit::ForEach(const Visitor& visit) const {
  const int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return absl::NotFoundError(absl::StrCat("model.torchscript_path: cannot reopen \"", path_,
                                            "\": ", std::strerror(errno)));
  }
  absl::Status status;
  for (const ScriptFileParam& p : params_) {
    status = visit(p.name,
                   fsdp::InitialValue::Read(
                       p.sizes, [fd, this, &p](int64_t start, int64_t end, const at::Tensor& dst) {
                         ReadRange(fd, path_, p, start, end, dst);
                       }));
    if (!status.ok()) break;
  }
  ::close(fd);
  return status;
}

absl::StatusOr<LoadedScript> LoadScriptForShardedInit(const std::string& path) {
  LoadedScript out;
  std::string whole_reason;
  RETURN_IF_ERROR(TorchCall("read TorchScript module", [&] {
    try {
      whole_reason = SplitLoad(path, &out);
    } catch (const NeedsWholeLoad& n) {
      whole_reason = n.reason;
    }
  }));
  if (whole_reason.empty()) return out;
  out = LoadedScript();
  RETURN_IF_ERROR(TorchCall("load TorchScript module",
                            [&] { out.module = torch::jit::load(path, at::Device(at::kCPU)); }));
  out.whole_reason = std::move(whole_reason);
  return out;
}

}  // namespace shardline::models
