#include "weights/torch_pickle.h"

#include <cstring>
#include <limits>
#include <unordered_map>
#include <utility>

namespace deepool::weights {
namespace {

// Far above any state_dict (a few nodes per tensor, thousands of tensors), and small enough
// that a hostile pickle cannot make the coordinator hold more than some hundreds of MiB.
constexpr size_t kMaxNodes = size_t{1} << 20;
constexpr size_t kMaxStack = size_t{1} << 20;
constexpr size_t kMaxMemo = size_t{1} << 20;
constexpr int64_t kMaxElements = int64_t{1} << 60;

enum class Kind {
  kNone,
  kBool,
  kInt,
  kFloat,
  kString,
  kTuple,
  kList,
  kDict,
  kGlobal,
  kStorage,
  kTensor
};

// One pickled value. Containers refer to other nodes by index, so values the memo shares stay
// shared, as in Python.
struct Node {
  Kind kind = Kind::kNone;
  int64_t number = 0;      // bool, int; a storage's elements; a tensor's elements reached
  std::string text;        // str; a global's "module.name"; a storage's key
  std::vector<int> items;  // tuple and list elements; a dict's keys and values, alternating
  std::string dtype;       // storage, tensor
  std::vector<int64_t> shape;
  int storage = -1;    // a tensor's storage node
  int64_t offset = 0;  // a tensor's storage offset
  std::vector<int64_t> stride;
};

const char* StorageDtype(std::string_view global) {
  static const std::pair<const char*, const char*> kStorages[] = {
      {"torch.FloatStorage", "float32"}, {"torch.DoubleStorage", "float64"},
      {"torch.HalfStorage", "float16"},  {"torch.BFloat16Storage", "bfloat16"},
      {"torch.LongStorage", "int64"},    {"torch.IntStorage", "int32"},
      {"torch.ShortStorage", "int16"},   {"torch.CharStorage", "int8"},
      {"torch.ByteStorage", "uint8"},    {"torch.BoolStorage", "bool"}};
  for (const auto& [name, dtype] : kStorages) {
    if (global == name) return dtype;
  }
  return nullptr;
}

constexpr const char kOrderedDict[] = "collections.OrderedDict";
constexpr const char kRebuildTensor[] = "torch._utils._rebuild_tensor_v2";
constexpr const char kRebuildParameter[] = "torch._utils._rebuild_parameter";

class Machine {
 public:
  explicit Machine(std::string_view bytes) : in_(bytes) {}

  // The pickle's value: the index of its node.
  StatusOr<int> Run();
  const Node& node(int id) const { return nodes_[static_cast<size_t>(id)]; }

 private:
  Status Step(unsigned char op, bool* stop);
  Status Error(const std::string& what) const {
    return DataLossError("data.pkl at byte " + std::to_string(op_at_) + ": " + what);
  }
  Status Unsupported(const std::string& what) const {
    return UnimplementedError("data.pkl at byte " + std::to_string(op_at_) + ": " + what +
                              ", which a state_dict file does not hold");
  }

  // Reading the opcode's argument.
  Status Take(size_t n, std::string_view* out);
  StatusOr<uint64_t> Unsigned(size_t width);
  StatusOr<std::string> Line();

  // The stack, marks, memo and nodes.
  StatusOr<int> Add(Node node);
  Status Push(int id);
  StatusOr<int> Pop();
  StatusOr<std::vector<int>> PopToMark();
  StatusOr<int> Top() const;
  Status Memoize(uint64_t index);

  Status Global(std::string module, std::string name);
  Status Reduce();
  StatusOr<int> RebuildTensor(const std::vector<int>& args);
  Status PersistentId();
  Status SetItems(int dict, const std::vector<int>& pairs);
  StatusOr<std::vector<int64_t>> Ints(int tuple, const char* what) const;

  std::string_view in_;
  size_t at_ = 0;
  size_t op_at_ = 0;
  std::vector<Node> nodes_;
  std::vector<int> stack_;
  std::vector<size_t> marks_;
  std::unordered_map<uint64_t, int> memo_;
  // A dict's str keys -> the index of the key in its items, so a key set twice replaces.
  std::unordered_map<int, std::unordered_map<std::string, size_t>> dict_keys_;
};

Status Machine::Take(size_t n, std::string_view* out) {
  if (n > in_.size() - at_) return Error("the pickle ends inside an opcode's argument");
  *out = in_.substr(at_, n);
  at_ += n;
  return Status::Ok();
}

StatusOr<uint64_t> Machine::Unsigned(size_t width) {
  std::string_view bytes;
  RETURN_IF_ERROR(Take(width, &bytes));
  uint64_t value = 0;
  for (size_t i = width; i-- > 0;) value = (value << 8) | static_cast<unsigned char>(bytes[i]);
  return value;
}

StatusOr<std::string> Machine::Line() {
  const size_t end = in_.find('\n', at_);
  if (end == std::string_view::npos) return Error("a GLOBAL's name has no end of line");
  std::string line(in_.substr(at_, end - at_));
  at_ = end + 1;
  return line;
}

StatusOr<int> Machine::Add(Node node) {
  if (nodes_.size() >= kMaxNodes) {
    return ResourceExhaustedError("data.pkl holds more than " + std::to_string(kMaxNodes) +
                                  " values");
  }
  nodes_.push_back(std::move(node));
  return static_cast<int>(nodes_.size() - 1);
}

Status Machine::Push(int id) {
  if (stack_.size() >= kMaxStack) return ResourceExhaustedError("data.pkl's stack grows too deep");
  stack_.push_back(id);
  return Status::Ok();
}

StatusOr<int> Machine::Pop() {
  const size_t floor = marks_.empty() ? 0 : marks_.back();
  if (stack_.size() <= floor) return Error("an opcode pops from an empty stack");
  const int id = stack_.back();
  stack_.pop_back();
  return id;
}

StatusOr<int> Machine::Top() const {
  const size_t floor = marks_.empty() ? 0 : marks_.back();
  if (stack_.size() <= floor) return Error("an opcode reads an empty stack");
  return stack_.back();
}

StatusOr<std::vector<int>> Machine::PopToMark() {
  if (marks_.empty()) return Error("an opcode needs a MARK and there is none");
  std::vector<int> items(stack_.begin() + static_cast<std::ptrdiff_t>(marks_.back()), stack_.end());
  stack_.resize(marks_.back());
  marks_.pop_back();
  return items;
}

Status Machine::Memoize(uint64_t index) {
  ASSIGN_OR_RETURN(const int top, Top());
  if (memo_.size() >= kMaxMemo && memo_.count(index) == 0) {
    return ResourceExhaustedError("data.pkl memoizes too many values");
  }
  memo_[index] = top;
  return Status::Ok();
}

Status Machine::Global(std::string module, std::string name) {
  const std::string global = module + "." + name;
  if (global != kOrderedDict && global != kRebuildTensor && global != kRebuildParameter &&
      StorageDtype(global) == nullptr) {
    return Unsupported("the pickle names " + global);
  }
  Node node;
  node.kind = Kind::kGlobal;
  node.text = global;
  ASSIGN_OR_RETURN(const int id, Add(std::move(node)));
  return Push(id);
}

StatusOr<std::vector<int64_t>> Machine::Ints(int tuple, const char* what) const {
  if (node(tuple).kind != Kind::kTuple)
    return Error(std::string("a tensor's ") + what + " is not a tuple");
  std::vector<int64_t> values;
  for (int item : node(tuple).items) {
    if (node(item).kind != Kind::kInt || node(item).number < 0) {
      return Error(std::string("a tensor's ") + what + " holds something not a count");
    }
    values.push_back(node(item).number);
  }
  return values;
}

StatusOr<int> Machine::RebuildTensor(const std::vector<int>& args) {
  if (args.size() != 6 && args.size() != 7) {
    return Error("_rebuild_tensor_v2 takes 6 or 7 arguments, not " + std::to_string(args.size()));
  }
  const Node& storage = node(args[0]);
  if (storage.kind != Kind::kStorage) return Error("a tensor's storage is not a persistent id");
  if (node(args[1]).kind != Kind::kInt || node(args[1]).number < 0 ||
      node(args[1]).number > kMaxElements) {
    return Error("a tensor's storage offset is not a count");
  }
  ASSIGN_OR_RETURN(std::vector<int64_t> shape, Ints(args[2], "size"));
  ASSIGN_OR_RETURN(std::vector<int64_t> stride, Ints(args[3], "stride"));
  if (stride.size() != shape.size()) return Error("a tensor's size and stride differ in length");
  // The furthest element the tensor reaches: offset + sum((size - 1) * stride) + 1, when any.
  int64_t reached = node(args[1]).number;
  bool empty = false;
  for (int64_t size : shape) empty = empty || size == 0;
  if (!empty) {
    reached += 1;
    for (size_t d = 0; d < shape.size(); ++d) {
      if (stride[d] != 0 && shape[d] - 1 > (kMaxElements - reached) / stride[d]) {
        return Error("a tensor's size and stride reach past any storage");
      }
      reached += (shape[d] - 1) * stride[d];
    }
  }
  if (reached > storage.number) {
    return Error("a tensor reaches element " + std::to_string(reached) + " of a storage of " +
                 std::to_string(storage.number));
  }
  Node tensor;
  tensor.kind = Kind::kTensor;
  tensor.dtype = storage.dtype;
  tensor.shape = std::move(shape);
  tensor.storage = args[0];
  tensor.number = reached;
  tensor.offset = node(args[1]).number;
  tensor.stride = std::move(stride);
  return Add(std::move(tensor));
}

Status Machine::Reduce() {
  ASSIGN_OR_RETURN(const int args_id, Pop());
  ASSIGN_OR_RETURN(const int callable, Pop());
  if (node(callable).kind != Kind::kGlobal)
    return Unsupported("REDUCE calls something not a global");
  if (node(args_id).kind != Kind::kTuple) return Error("REDUCE's arguments are not a tuple");
  const std::string& function = node(callable).text;
  const std::vector<int> args = node(args_id).items;
  int result = -1;
  if (function == kOrderedDict) {
    if (!args.empty()) return Unsupported("OrderedDict called with arguments");
    Node dict;
    dict.kind = Kind::kDict;
    ASSIGN_OR_RETURN(result, Add(std::move(dict)));
  } else if (function == kRebuildTensor) {
    ASSIGN_OR_RETURN(result, RebuildTensor(args));
  } else if (function == kRebuildParameter) {
    if (args.size() != 3 || node(args[0]).kind != Kind::kTensor) {
      return Error("_rebuild_parameter takes a tensor, requires_grad and hooks");
    }
    result = args[0];
  } else {
    return Unsupported("REDUCE calls " + function);
  }
  return Push(result);
}

Status Machine::PersistentId() {
  ASSIGN_OR_RETURN(const int pid, Pop());
  const Node& id = node(pid);
  if (id.kind != Kind::kTuple || id.items.size() != 5 || node(id.items[0]).text != "storage" ||
      node(id.items[0]).kind != Kind::kString) {
    return Unsupported("a persistent id that is not ('storage', type, key, location, elements)");
  }
  const Node& type = node(id.items[1]);
  const Node& key = node(id.items[2]);
  const Node& elements = node(id.items[4]);
  if (type.kind != Kind::kGlobal || StorageDtype(type.text) == nullptr) {
    return Unsupported("a storage of type " + type.text);
  }
  if (key.kind != Kind::kString || elements.kind != Kind::kInt || elements.number < 0) {
    return Error("a storage's key or size is malformed");
  }
  Node storage;
  storage.kind = Kind::kStorage;
  storage.dtype = StorageDtype(type.text);
  storage.text = key.text;
  storage.number = elements.number;
  ASSIGN_OR_RETURN(const int result, Add(std::move(storage)));
  return Push(result);
}

Status Machine::SetItems(int dict, const std::vector<int>& pairs) {
  if (node(dict).kind != Kind::kDict) return Error("SETITEM on something not a dict");
  if (pairs.size() % 2 != 0) return Error("SETITEMS with a key and no value");
  auto& keys = dict_keys_[dict];
  for (size_t k = 0; k < pairs.size(); k += 2) {
    Node& target = nodes_[static_cast<size_t>(dict)];
    if (node(pairs[k]).kind == Kind::kString) {
      auto [it, fresh] = keys.try_emplace(node(pairs[k]).text, target.items.size());
      if (!fresh) {
        target.items[it->second + 1] = pairs[k + 1];
        continue;
      }
    }
    target.items.push_back(pairs[k]);
    target.items.push_back(pairs[k + 1]);
  }
  return Status::Ok();
}

Status Machine::Step(unsigned char op, bool* stop) {
  auto push_new = [&](Node n) -> Status {
    ASSIGN_OR_RETURN(const int id, Add(std::move(n)));
    return Push(id);
  };
  auto scalar = [](Kind kind, int64_t number) {
    Node n;
    n.kind = kind;
    n.number = number;
    return n;
  };
  auto container = [](Kind kind, std::vector<int> items) {
    Node n;
    n.kind = kind;
    n.items = std::move(items);
    return n;
  };
  auto string = [&](size_t length_bytes) -> Status {
    ASSIGN_OR_RETURN(const uint64_t length, Unsigned(length_bytes));
    std::string_view text;
    if (length > in_.size() - at_) return Error("a string runs past the end of the pickle");
    RETURN_IF_ERROR(Take(static_cast<size_t>(length), &text));
    Node n;
    n.kind = Kind::kString;
    n.text = std::string(text);
    return push_new(std::move(n));
  };
  switch (op) {
    case 0x80: {  // PROTO
      ASSIGN_OR_RETURN(const uint64_t version, Unsigned(1));
      if (version > 5) return Unsupported("pickle protocol " + std::to_string(version));
      return Status::Ok();
    }
    case 0x95: {  // FRAME: a length we do not need, the bytes follow inline
      return Unsigned(8).status();
    }
    case '(':  // MARK
      if (marks_.size() >= kMaxStack) return ResourceExhaustedError("data.pkl nests too deep");
      marks_.push_back(stack_.size());
      return Status::Ok();
    case '.':  // STOP
      *stop = true;
      return Status::Ok();
    case 'c': {  // GLOBAL
      ASSIGN_OR_RETURN(std::string module, Line());
      ASSIGN_OR_RETURN(std::string name, Line());
      return Global(std::move(module), std::move(name));
    }
    case 0x93: {  // STACK_GLOBAL
      ASSIGN_OR_RETURN(const int name, Pop());
      ASSIGN_OR_RETURN(const int module, Pop());
      if (node(name).kind != Kind::kString || node(module).kind != Kind::kString) {
        return Error("STACK_GLOBAL's module and name are not strings");
      }
      return Global(node(module).text, node(name).text);
    }
    case 'X':  // BINUNICODE
      return string(4);
    case 0x8c:  // SHORT_BINUNICODE
      return string(1);
    case 0x8d:  // BINUNICODE8
      return string(8);
    case 'K': {  // BININT1
      ASSIGN_OR_RETURN(const uint64_t v, Unsigned(1));
      return push_new(scalar(Kind::kInt, static_cast<int64_t>(v)));
    }
    case 'M': {  // BININT2
      ASSIGN_OR_RETURN(const uint64_t v, Unsigned(2));
      return push_new(scalar(Kind::kInt, static_cast<int64_t>(v)));
    }
    case 'J': {  // BININT: signed 32 bits
      ASSIGN_OR_RETURN(const uint64_t v, Unsigned(4));
      return push_new(scalar(Kind::kInt, static_cast<int32_t>(static_cast<uint32_t>(v))));
    }
    case 0x8a: {  // LONG1: n bytes of two's complement, little-endian
      ASSIGN_OR_RETURN(const uint64_t n, Unsigned(1));
      if (n > 8) return Unsupported("an integer of " + std::to_string(n) + " bytes");
      ASSIGN_OR_RETURN(uint64_t v, Unsigned(static_cast<size_t>(n)));
      if (n > 0 && n < 8 && (v >> (8 * n - 1)) != 0) v |= ~uint64_t{0} << (8 * n);  // negative
      int64_t value;
      std::memcpy(&value, &v, sizeof value);
      return push_new(scalar(Kind::kInt, value));
    }
    case 'G': {  // BINFLOAT: big-endian double
      std::string_view bytes;
      RETURN_IF_ERROR(Take(8, &bytes));
      uint64_t bits = 0;
      for (char c : bytes) bits = (bits << 8) | static_cast<unsigned char>(c);
      Node n;
      n.kind = Kind::kFloat;
      std::memcpy(&n.number, &bits, sizeof bits);  // kept as bits; only ever skipped
      return push_new(std::move(n));
    }
    case 'N':  // NONE
      return push_new(scalar(Kind::kNone, 0));
    case 0x88:  // NEWTRUE
      return push_new(scalar(Kind::kBool, 1));
    case 0x89:  // NEWFALSE
      return push_new(scalar(Kind::kBool, 0));
    case '}':  // EMPTY_DICT
      return push_new(container(Kind::kDict, {}));
    case ']':  // EMPTY_LIST
      return push_new(container(Kind::kList, {}));
    case ')':  // EMPTY_TUPLE
      return push_new(container(Kind::kTuple, {}));
    case 0x85:    // TUPLE1
    case 0x86:    // TUPLE2
    case 0x87: {  // TUPLE3
      std::vector<int> items(static_cast<size_t>(op - 0x84));
      for (size_t k = items.size(); k-- > 0;) {
        ASSIGN_OR_RETURN(items[k], Pop());
      }
      return push_new(container(Kind::kTuple, std::move(items)));
    }
    case 't': {  // TUPLE
      ASSIGN_OR_RETURN(std::vector<int> items, PopToMark());
      return push_new(container(Kind::kTuple, std::move(items)));
    }
    case 'a': {  // APPEND
      ASSIGN_OR_RETURN(const int item, Pop());
      ASSIGN_OR_RETURN(const int list, Top());
      if (node(list).kind != Kind::kList) return Error("APPEND to something not a list");
      nodes_[static_cast<size_t>(list)].items.push_back(item);
      return Status::Ok();
    }
    case 'e': {  // APPENDS
      ASSIGN_OR_RETURN(const std::vector<int> items, PopToMark());
      ASSIGN_OR_RETURN(const int list, Top());
      if (node(list).kind != Kind::kList) return Error("APPENDS to something not a list");
      auto& target = nodes_[static_cast<size_t>(list)].items;
      target.insert(target.end(), items.begin(), items.end());
      return Status::Ok();
    }
    case 's': {  // SETITEM
      ASSIGN_OR_RETURN(const int value, Pop());
      ASSIGN_OR_RETURN(const int key, Pop());
      ASSIGN_OR_RETURN(const int dict, Top());
      return SetItems(dict, {key, value});
    }
    case 'u': {  // SETITEMS
      ASSIGN_OR_RETURN(const std::vector<int> pairs, PopToMark());
      ASSIGN_OR_RETURN(const int dict, Top());
      return SetItems(dict, pairs);
    }
    case 'R':  // REDUCE
      return Reduce();
    case 'b': {  // BUILD: a state_dict's _metadata, set on the dict; not part of the index
      ASSIGN_OR_RETURN(const int state, Pop());
      (void)state;
      return Top().status();
    }
    case 'Q':  // BINPERSID
      return PersistentId();
    case 'q': {  // BINPUT
      ASSIGN_OR_RETURN(const uint64_t index, Unsigned(1));
      return Memoize(index);
    }
    case 'r': {  // LONG_BINPUT
      ASSIGN_OR_RETURN(const uint64_t index, Unsigned(4));
      return Memoize(index);
    }
    case 0x94:  // MEMOIZE
      return Memoize(memo_.size());
    case 'h':    // BINGET
    case 'j': {  // LONG_BINGET
      ASSIGN_OR_RETURN(const uint64_t index, Unsigned(op == 'h' ? 1 : 4));
      auto it = memo_.find(index);
      if (it == memo_.end())
        return Error("BINGET of memo " + std::to_string(index) + ", never put");
      return Push(it->second);
    }
    default: {
      char hex[8];
      std::snprintf(hex, sizeof hex, "0x%02x", op);
      return Unsupported(std::string("pickle opcode ") + hex);
    }
  }
}

StatusOr<int> Machine::Run() {
  bool stop = false;
  while (!stop) {
    if (at_ >= in_.size()) return Error("the pickle ends without STOP");
    op_at_ = at_;
    const auto op = static_cast<unsigned char>(in_[at_++]);
    RETURN_IF_ERROR(Step(op, &stop));
  }
  if (stack_.size() != 1 || !marks_.empty()) {
    return Error("the pickle leaves " + std::to_string(stack_.size()) + " values, not one");
  }
  return stack_.back();
}

}  // namespace

StatusOr<std::vector<PickledTensor>> ReadStateDictPickle(std::string_view pickle) {
  Machine machine(pickle);
  ASSIGN_OR_RETURN(const int root, machine.Run());
  const Node& dict = machine.node(root);
  if (dict.kind != Kind::kDict) {
    return InvalidArgumentError(
        "data.pkl holds no dict of tensors (from Python, save a "
        "model's state_dict())");
  }
  std::vector<PickledTensor> tensors;
  for (size_t k = 0; k + 1 < dict.items.size(); k += 2) {
    const Node& key = machine.node(dict.items[k]);
    const Node& value = machine.node(dict.items[k + 1]);
    if (key.kind != Kind::kString)
      return InvalidArgumentError("data.pkl has a key that is not a str");
    if (value.kind != Kind::kTensor) {
      return InvalidArgumentError("data.pkl's entry '" + key.text + "' is not a tensor");
    }
    const Node& storage = machine.node(value.storage);
    tensors.push_back(PickledTensor{key.text, value.dtype, value.shape, storage.text,
                                    storage.number, value.number, value.offset, value.stride});
  }
  return tensors;
}

}  // namespace deepool::weights
