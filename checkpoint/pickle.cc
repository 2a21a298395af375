#include "checkpoint/pickle.h"

#include <cstring>
#include <optional>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace shardline::checkpoint {
namespace {

// One parse: the input, the arena and the unpickler's stack, memo and marks.
class Parser {
 public:
  Parser(absl::string_view in, absl::string_view what) : in_(in), what_(what) {}

  absl::StatusOr<int> Run(std::vector<PickleNode>* nodes) {
    nodes_ = nodes;
    while (true) {
      if (pos_ >= in_.size()) return Error("the pickle ends without STOP");
      op_at_ = pos_;
      op_ = static_cast<unsigned char>(in_[pos_++]);
      if (op_ == '.') break;  // STOP
      if (absl::Status s = Step(); !s.ok()) return s;
    }
    if (stack_.size() != 1) {
      return Error(absl::StrCat("STOP with ", stack_.size(), " values on the stack, not 1"));
    }
    return stack_.back();
  }

 private:
  absl::Status Error(absl::string_view why) const {
    return absl::DataLossError(
        absl::StrFormat("%s: pickle offset %d (opcode 0x%02x): %s", what_, op_at_, op_, why));
  }
  // Reads n bytes; false at the end of the input.
  bool Take(uint64_t n, absl::string_view* out) {
    if (n > in_.size() - pos_) return false;
    *out = in_.substr(pos_, n);
    pos_ += n;
    return true;
  }
  bool TakeUint(int bytes, uint64_t* out) {
    absl::string_view b;
    if (!Take(bytes, &b)) return false;
    *out = 0;
    for (int i = bytes - 1; i >= 0; --i) *out = (*out << 8) | static_cast<unsigned char>(b[i]);
    return true;
  }
  bool TakeLine(absl::string_view* out) {
    const size_t nl = in_.find('\n', pos_);
    if (nl == absl::string_view::npos) return false;
    *out = in_.substr(pos_, nl - pos_);
    pos_ = nl + 1;
    return true;
  }
  int Add(PickleNode n) {
    nodes_->push_back(std::move(n));
    return static_cast<int>(nodes_->size()) - 1;
  }
  int AddKind(PickleKind k) {
    PickleNode n;
    n.kind = k;
    return Add(std::move(n));
  }
  void Push(int node) { stack_.push_back(node); }
  // Pushes a new container-like node (tuple, list, dict, object, persistent id) of `items`.
  absl::Status PushItems(PickleKind kind, std::vector<int> items) {
    PickleNode n;
    n.kind = kind;
    n.items = std::move(items);
    Push(Add(std::move(n)));
    return absl::OkStatus();
  }
  absl::StatusOr<int> Pop() {
    if (stack_.size() <= (marks_.empty() ? 0 : marks_.back())) {
      return Error("stack underflow");
    }
    const int v = stack_.back();
    stack_.pop_back();
    return v;
  }
  // The values above the newest MARK, which is removed.
  absl::StatusOr<std::vector<int>> PopMark() {
    if (marks_.empty()) return Error("no MARK to pop to");
    const size_t m = marks_.back();
    marks_.pop_back();
    std::vector<int> v(stack_.begin() + m, stack_.end());
    stack_.resize(m);
    return v;
  }
  absl::StatusOr<int> Top() {
    if (stack_.size() <= (marks_.empty() ? 0 : marks_.back())) return Error("stack underflow");
    return stack_.back();
  }
  absl::Status PushString(PickleKind kind, int len_bytes) {
    uint64_t len = 0;
    absl::string_view s;
    if (!TakeUint(len_bytes, &len) || !Take(len, &s)) return Error("truncated string or bytes");
    PickleNode n;
    n.kind = kind;
    n.text = std::string(s);
    Push(Add(std::move(n)));
    return absl::OkStatus();
  }
  absl::Status PushInt(int64_t v) {
    PickleNode n;
    n.kind = PickleKind::kInt;
    n.int_value = v;
    Push(Add(std::move(n)));
    return absl::OkStatus();
  }
  // LONG1 / LONG4: little-endian two's complement of n bytes; at most 8 here.
  absl::Status PushLong(int len_bytes) {
    uint64_t n = 0;
    absl::string_view b;
    if (!TakeUint(len_bytes, &n) || !Take(n, &b)) return Error("truncated LONG");
    if (n > 8) return Error(absl::StrCat("an integer of ", n, " bytes (more than 64 bits)"));
    uint64_t v = 0;
    for (int i = static_cast<int>(n) - 1; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(b[i]);
    if (n > 0 && n < 8 && (static_cast<uint8_t>(b[n - 1]) & 0x80) != 0)
      v |= ~uint64_t{0} << (8 * n);
    return PushInt(static_cast<int64_t>(v));
  }
  absl::Status Memoize(uint64_t index) {
    absl::StatusOr<int> top = Top();
    if (!top.ok()) return top.status();
    memo_[index] = *top;
    return absl::OkStatus();
  }
  absl::Status Get(uint64_t index) {
    auto it = memo_.find(index);
    if (it == memo_.end()) return Error(absl::StrCat("memo index ", index, " was never stored"));
    Push(it->second);
    return absl::OkStatus();
  }
  absl::Status Tuple(std::vector<int> items) {
    return PushItems(PickleKind::kTuple, std::move(items));
  }
  absl::Status TupleN(int count) {
    std::vector<int> items(count);
    for (int i = count - 1; i >= 0; --i) {
      absl::StatusOr<int> v = Pop();
      if (!v.ok()) return v.status();
      items[i] = *v;
    }
    return Tuple(std::move(items));
  }
  // APPEND(S) / ADDITEMS onto the list below; SETITEM(S) onto the dict below.
  absl::Status Extend(std::vector<int> values, PickleKind want) {
    absl::StatusOr<int> target = Top();
    if (!target.ok()) return target.status();
    PickleNode& t = (*nodes_)[*target];
    if (t.kind != want) return Error("appending to a value of the wrong kind");
    if (want == PickleKind::kDict && values.size() % 2 != 0) return Error("odd key/value count");
    t.items.insert(t.items.end(), values.begin(), values.end());
    return absl::OkStatus();
  }
  absl::Status Object(int callable, int args) {
    if ((*nodes_)[args].kind != PickleKind::kTuple) return Error("arguments are not a tuple");
    return PushItems(PickleKind::kObject, {callable, args});
  }
  absl::Status Global(absl::string_view module, absl::string_view name) {
    PickleNode n;
    n.kind = PickleKind::kGlobal;
    n.module = std::string(module);
    n.text = std::string(name);
    Push(Add(std::move(n)));
    return absl::OkStatus();
  }

  absl::Status Step();
  std::optional<absl::Status> StepStack();
  std::optional<absl::Status> StepContainer();
  std::optional<absl::Status> StepObject();
  std::optional<absl::Status> StepMemo();

  absl::string_view in_;
  absl::string_view what_;
  size_t pos_ = 0;
  size_t op_at_ = 0;
  unsigned char op_ = 0;
  std::vector<PickleNode>* nodes_ = nullptr;
  std::vector<int> stack_;
  std::vector<size_t> marks_;
  absl::flat_hash_map<uint64_t, int> memo_;
};

// Stack and scalar opcodes: PROTO, FRAME, MARK, POP, DUP, None, bools, integers, floats, strings,
// bytes. nullopt: not one of them.
std::optional<absl::Status> Parser::StepStack() {
  uint64_t u = 0;
  absl::string_view b;
  switch (op_) {
    case 0x80:  // PROTO
      if (!Take(1, &b)) return Error("truncated PROTO");
      if (static_cast<uint8_t>(b[0]) > 5) return Error("protocol above 5");
      return absl::OkStatus();
    case 0x95:  // FRAME: a length hint only
      if (!TakeUint(8, &u)) return Error("truncated FRAME");
      return absl::OkStatus();
    case '(':
      marks_.push_back(stack_.size());
      return absl::OkStatus();
    case '0':
      return Pop().status();
    case '1':
      return PopMark().status();
    case '2': {
      absl::StatusOr<int> t = Top();
      if (!t.ok()) return t.status();
      Push(*t);
      return absl::OkStatus();
    }
    case 'N':
      Push(AddKind(PickleKind::kNone));
      return absl::OkStatus();
    case 0x88:
    case 0x89: {
      PickleNode n;
      n.kind = PickleKind::kBool;
      n.int_value = op_ == 0x88 ? 1 : 0;
      Push(Add(std::move(n)));
      return absl::OkStatus();
    }
    case 'I': {  // INT: protocol 0 writes True / False as I01 / I00
      if (!TakeLine(&b)) return Error("truncated INT");
      int64_t v = 0;
      if (!absl::SimpleAtoi(b, &v)) return Error("INT is not a decimal integer");
      return PushInt(v);
    }
    case 'J':
      if (!TakeUint(4, &u)) return Error("truncated BININT");
      return PushInt(static_cast<int32_t>(static_cast<uint32_t>(u)));
    case 'K':
      if (!TakeUint(1, &u)) return Error("truncated BININT1");
      return PushInt(static_cast<int64_t>(u));
    case 'M':
      if (!TakeUint(2, &u)) return Error("truncated BININT2");
      return PushInt(static_cast<int64_t>(u));
    case 0x8a:
      return PushLong(1);
    case 0x8b:
      return PushLong(4);
    case 'G': {
      if (!Take(8, &b)) return Error("truncated BINFLOAT");
      uint64_t bits = 0;
      for (int i = 0; i < 8; ++i) bits = (bits << 8) | static_cast<uint8_t>(b[i]);  // big-endian
      PickleNode n;
      n.kind = PickleKind::kFloat;
      std::memcpy(&n.float_value, &bits, sizeof bits);
      Push(Add(std::move(n)));
      return absl::OkStatus();
    }
    case 0x8c:
      return PushString(PickleKind::kString, 1);
    case 'X':
      return PushString(PickleKind::kString, 4);
    case 0x8d:
      return PushString(PickleKind::kString, 8);
    case 'U':
      return PushString(PickleKind::kString, 1);
    case 'T':
      return PushString(PickleKind::kString, 4);
    case 'C':
      return PushString(PickleKind::kBytes, 1);
    case 'B':
      return PushString(PickleKind::kBytes, 4);
    case 0x8e:
    case 0x96:
      return PushString(PickleKind::kBytes, 8);
    default:
      return std::nullopt;
  }
}

// Tuples, lists, sets and dicts. nullopt: not one of them.
std::optional<absl::Status> Parser::StepContainer() {
  switch (op_) {
    case ')':
      return Tuple({});
    case 't': {
      absl::StatusOr<std::vector<int>> v = PopMark();
      if (!v.ok()) return v.status();
      return Tuple(*std::move(v));
    }
    case 0x85:
      return TupleN(1);
    case 0x86:
      return TupleN(2);
    case 0x87:
      return TupleN(3);
    case ']':
    case 0x8f:  // EMPTY_SET
      Push(AddKind(PickleKind::kList));
      return absl::OkStatus();
    case '}':
      Push(AddKind(PickleKind::kDict));
      return absl::OkStatus();
    case 'l':
    case 'd':
    case 0x91: {  // LIST, DICT, FROZENSET
      absl::StatusOr<std::vector<int>> v = PopMark();
      if (!v.ok()) return v.status();
      if (op_ == 'd' && v->size() % 2 != 0) return Error("odd key/value count");
      return PushItems(op_ == 'd' ? PickleKind::kDict : PickleKind::kList, *std::move(v));
    }
    case 'a': {
      absl::StatusOr<int> v = Pop();
      if (!v.ok()) return v.status();
      return Extend({*v}, PickleKind::kList);
    }
    case 'e':
    case 0x90: {  // APPENDS, ADDITEMS
      absl::StatusOr<std::vector<int>> v = PopMark();
      if (!v.ok()) return v.status();
      return Extend(*std::move(v), PickleKind::kList);
    }
    case 's': {
      absl::StatusOr<int> value = Pop();
      if (!value.ok()) return value.status();
      absl::StatusOr<int> key = Pop();
      if (!key.ok()) return key.status();
      return Extend({*key, *value}, PickleKind::kDict);
    }
    case 'u': {
      absl::StatusOr<std::vector<int>> v = PopMark();
      if (!v.ok()) return v.status();
      return Extend(*std::move(v), PickleKind::kDict);
    }
    default:
      return std::nullopt;
  }
}

// Globals and what builds objects from them (REDUCE, NEWOBJ, BUILD): nothing is called. nullopt:
// not one of them.
std::optional<absl::Status> Parser::StepObject() {
  switch (op_) {
    case 'c': {
      absl::string_view module, name;
      if (!TakeLine(&module) || !TakeLine(&name)) return Error("truncated GLOBAL");
      return Global(module, name);
    }
    case 0x93: {  // STACK_GLOBAL
      absl::StatusOr<int> name = Pop();
      if (!name.ok()) return name.status();
      absl::StatusOr<int> module = Pop();
      if (!module.ok()) return module.status();
      const PickleNode& m = (*nodes_)[*module];
      const PickleNode& n = (*nodes_)[*name];
      if (m.kind != PickleKind::kString || n.kind != PickleKind::kString) {
        return Error("STACK_GLOBAL of values that are not strings");
      }
      std::string ms = m.text, ns = n.text;
      return Global(ms, ns);
    }
    case 'R':
    case 0x81: {  // REDUCE, NEWOBJ: (callable, args)
      absl::StatusOr<int> args = Pop();
      if (!args.ok()) return args.status();
      absl::StatusOr<int> callable = Pop();
      if (!callable.ok()) return callable.status();
      return Object(*callable, *args);
    }
    case 0x92: {  // NEWOBJ_EX: (cls, args, kwargs); keyword arguments are not kept
      absl::StatusOr<int> kwargs = Pop();
      if (!kwargs.ok()) return kwargs.status();
      absl::StatusOr<int> args = Pop();
      if (!args.ok()) return args.status();
      absl::StatusOr<int> cls = Pop();
      if (!cls.ok()) return cls.status();
      return Object(*cls, *args);
    }
    case 'b': {
      absl::StatusOr<int> state = Pop();
      if (!state.ok()) return state.status();
      absl::StatusOr<int> obj = Top();
      if (!obj.ok()) return obj.status();
      PickleNode& o = (*nodes_)[*obj];
      if (o.kind != PickleKind::kObject) return Error("BUILD on a value that is not an object");
      o.state = *state;
      return absl::OkStatus();
    }
    default:
      return std::nullopt;
  }
}

// The memo and persistent ids. nullopt: not one of them.
std::optional<absl::Status> Parser::StepMemo() {
  uint64_t u = 0;
  absl::string_view b;
  switch (op_) {
    case 0x94:  // MEMOIZE
      return Memoize(memo_.size());
    case 'p': {
      if (!TakeLine(&b) || !absl::SimpleAtoi(b, &u)) return Error("bad PUT");
      return Memoize(u);
    }
    case 'q':
      if (!TakeUint(1, &u)) return Error("truncated BINPUT");
      return Memoize(u);
    case 'r':
      if (!TakeUint(4, &u)) return Error("truncated LONG_BINPUT");
      return Memoize(u);
    case 'g': {
      if (!TakeLine(&b) || !absl::SimpleAtoi(b, &u)) return Error("bad GET");
      return Get(u);
    }
    case 'h':
      if (!TakeUint(1, &u)) return Error("truncated BINGET");
      return Get(u);
    case 'j':
      if (!TakeUint(4, &u)) return Error("truncated LONG_BINGET");
      return Get(u);
    case 'P': {
      if (!TakeLine(&b)) return Error("truncated PERSID");
      PickleNode id;
      id.kind = PickleKind::kString;
      id.text = std::string(b);
      return PushItems(PickleKind::kPersistentId, {Add(std::move(id))});
    }
    case 'Q': {
      absl::StatusOr<int> id = Pop();
      if (!id.ok()) return id.status();
      return PushItems(PickleKind::kPersistentId, {*id});
    }
    default:
      return std::nullopt;
  }
}

absl::Status Parser::Step() {
  for (auto handler :
       {&Parser::StepStack, &Parser::StepContainer, &Parser::StepObject, &Parser::StepMemo}) {
    if (std::optional<absl::Status> s = (this->*handler)(); s.has_value()) return *s;
  }
  return Error("an opcode this reader does not accept");
}

}  // namespace

absl::StatusOr<Pickle> Pickle::Parse(absl::string_view bytes, absl::string_view what) {
  Pickle p;
  Parser parser(bytes, what);
  absl::StatusOr<int> root = parser.Run(&p.nodes_);
  if (!root.ok()) return root.status();
  p.root_ = *root;
  return p;
}

int Pickle::DictGet(int dict, absl::string_view key) const {
  if (dict < 0 || nodes_[dict].kind != PickleKind::kDict) return -1;
  const std::vector<int>& it = nodes_[dict].items;
  for (size_t i = 0; i + 1 < it.size(); i += 2) {
    const std::string* k = String(it[i]);
    if (k != nullptr && *k == key) return it[i + 1];
  }
  return -1;
}

std::string Pickle::ClassName(int index) const {
  if (index < 0) return "";
  const PickleNode* n = &nodes_[index];
  if (n->kind == PickleKind::kObject) n = &nodes_[n->items[0]];
  if (n->kind != PickleKind::kGlobal) return "";
  return absl::StrCat(n->module, ".", n->text);
}

const std::string* Pickle::String(int index) const {
  if (index < 0 || nodes_[index].kind != PickleKind::kString) return nullptr;
  return &nodes_[index].text;
}

bool Pickle::Int(int index, int64_t* out) const {
  if (index < 0) return false;
  const PickleNode& n = nodes_[index];
  if (n.kind != PickleKind::kInt && n.kind != PickleKind::kBool) return false;
  *out = n.int_value;
  return true;
}

bool Pickle::IntTuple(int index, std::vector<int64_t>* out) const {
  if (index < 0) return false;
  const PickleNode* n = &nodes_[index];
  if (n->kind == PickleKind::kObject && ClassName(index) == "torch.Size") {
    const PickleNode& args = nodes_[n->items[1]];
    if (args.items.size() != 1) return false;
    n = &nodes_[args.items[0]];
  }
  if (n->kind != PickleKind::kTuple && n->kind != PickleKind::kList) return false;
  out->clear();
  for (int i : n->items) {
    int64_t v = 0;
    if (nodes_[i].kind != PickleKind::kInt || !Int(i, &v)) return false;
    out->push_back(v);
  }
  return true;
}

}  // namespace shardline::checkpoint
