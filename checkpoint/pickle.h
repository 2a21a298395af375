// A Python pickle read as data, never run: the subset of the format that PyTorch's
// torch.distributed.checkpoint metadata (.metadata) and torch.save archives (data.pkl) use, so the
// trainer can read checkpoints written by PyTorch without a Python interpreter.
//
//   ASSIGN_OR_RETURN(Pickle p, Pickle::Parse(bytes, "ck/.metadata"));
//   const PickleNode& root = p.node(p.root());
//
// Python's unpickler calls the classes and functions a pickle names (GLOBAL / STACK_GLOBAL, then
// REDUCE, NEWOBJ, BUILD); that is how a pickle runs code. This reader calls nothing: a global
// is a kGlobal node holding its module and name, REDUCE / NEWOBJ make a kObject node holding the
// callable and its argument tuple, BUILD attaches the state to it. The caller then reads the
// tree, checking each class name it relies on (dcp_metadata.cc, torch_archive.cc), so a hostile
// pickle can at worst describe a tree the caller refuses.
//
// Opcodes (protocols 0 to 5, binary forms; pickletools names): PROTO FRAME STOP MARK POP
// POP_MARK DUP NONE NEWTRUE NEWFALSE INT(only 00/01) BININT BININT1 BININT2 LONG1 LONG4(<= 8
// bytes) BINFLOAT SHORT_BINUNICODE BINUNICODE BINUNICODE8 SHORT_BINSTRING BINSTRING
// SHORT_BINBYTES BINBYTES BINBYTES8 BYTEARRAY8 EMPTY_TUPLE TUPLE TUPLE1 TUPLE2 TUPLE3 EMPTY_LIST
// APPEND APPENDS LIST EMPTY_DICT SETITEM SETITEMS DICT EMPTY_SET ADDITEMS FROZENSET GLOBAL
// STACK_GLOBAL REDUCE NEWOBJ NEWOBJ_EX BUILD MEMOIZE PUT BINPUT LONG_BINPUT GET BINGET
// LONG_BINGET PERSID BINPERSID. Anything else (EXT1.., INST, OBJ, out-of-band buffers, integers
// wider than 64 bits) is refused with its offset.
//
// Nodes live in one arena and refer to each other by index, so a pickle whose memo makes a list
// contain itself is a cycle of indices, not of owners: nothing leaks, and readers that follow a
// fixed path through the tree never loop. Generic walkers must bound their depth.
//
// Errors: DATA_LOSS naming `what`, the byte offset and the opcode for anything malformed
// (truncation, an unknown opcode, a stack underflow, a missing MARK, a memo index never stored,
// a DICT with an odd count, an over-long length). Thread safety: immutable after Parse.
#ifndef SHARDLINE_CHECKPOINT_PICKLE_H_
#define SHARDLINE_CHECKPOINT_PICKLE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace shardline::checkpoint {

enum class PickleKind {
  kNone,
  kBool,          // int_value 0 or 1
  kInt,           // int_value
  kFloat,         // float_value
  kString,        // text (UTF-8 as written)
  kBytes,         // text (raw bytes)
  kTuple,         // items
  kList,          // items (also sets and frozensets)
  kDict,          // items: key, value, key, value, ... in insertion order
  kGlobal,        // module, text = name
  kObject,        // items[0] the callable, items[1] its argument tuple; state (or -1) from BUILD
  kPersistentId,  // items[0] the id (torch.save: a tuple naming a storage)
};

struct PickleNode {
  PickleKind kind = PickleKind::kNone;
  int64_t int_value = 0;
  double float_value = 0;
  std::string text;
  std::string module;
  std::vector<int> items;
  int state = -1;
};

class Pickle {
 public:
  // `what` names the input in errors (a file, or a file and an entry).
  static absl::StatusOr<Pickle> Parse(absl::string_view bytes, absl::string_view what);

  int root() const { return root_; }
  const PickleNode& node(int index) const { return nodes_[index]; }
  int size() const { return static_cast<int>(nodes_.size()); }

  // Conveniences for readers of a fixed layout; each returns nullptr / -1 / false when the node
  // is not of the kind asked for.
  // The value of string key `key` in dict `dict`, or -1.
  int DictGet(int dict, absl::string_view key) const;
  // "module.name" of a kGlobal node, or of the callable of a kObject node; "" otherwise.
  std::string ClassName(int index) const;
  // The string of a kString node, or nullptr.
  const std::string* String(int index) const;
  // The integer of a kInt or kBool node.
  bool Int(int index, int64_t* out) const;
  // The integers of a tuple or list of kInt nodes, or of a torch.Size(tuple) object.
  bool IntTuple(int index, std::vector<int64_t>* out) const;

 private:
  std::vector<PickleNode> nodes_;
  int root_ = -1;
};

}  // namespace shardline::checkpoint

#endif  // SHARDLINE_CHECKPOINT_PICKLE_H_
