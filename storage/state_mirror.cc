#include "storage/state_mirror.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "storage/records.h"

namespace failover {
namespace {

// A kept part (an object's config or state record) is one byte that says
// what follows, then the record in storage's encoding; "" keeps none. (A
// record can encode to no bytes at all.) A chain whose policy is the default
// leaves it out: a third of a chain's record, and most chains have it.
constexpr char kRecord = 'r';
constexpr char kChainWithDefaultPolicy = 'd';

template <typename Record>
std::string Tagged(char tag, const Record& r) {
  std::string out(1, tag);
  r.AppendToString(&out);
  return out;
}

template <typename Record, typename Model>
std::string Encode(const Model& in, void (*encode)(const Model&, Record*)) {
  Record r;
  encode(in, &r);
  return Tagged(kRecord, r);
}

std::string EncodeChainConfig(const ChainConfig& c) {
  storage::ChainRecord r;
  storage::EncodeChain(c, &r);
  if (c.policy != Shared<Policy>()) return Tagged(kRecord, r);
  r.clear_policy();
  return Tagged(kChainWithDefaultPolicy, r);
}

// What a part tagged kChainWithDefaultPolicy left out.
void PutBackDefaultPolicy(ChainConfig* c) { c->policy = Shared<Policy>(); }
template <typename Model>
void PutBackDefaultPolicy(Model*) {}

// Entry::packed is: varint name length, name, varint config-part length,
// config part, state part. The mirror packs every entry itself, so reading one
// back needs no checks.
void AppendVarint(uint64_t v, std::string* out) {
  for (; v >= 0x80; v >>= 7) out->push_back(static_cast<char>(v | 0x80));
  out->push_back(static_cast<char>(v));
}
size_t VarintSize(uint64_t v) {
  size_t n = 1;
  for (; v >= 0x80; v >>= 7) ++n;
  return n;
}
absl::string_view TakeLengthPrefixed(absl::string_view* in) {
  uint64_t n = 0;
  for (int shift = 0;; shift += 7) {
    const auto byte = static_cast<uint8_t>(in->front());
    in->remove_prefix(1);
    n |= static_cast<uint64_t>(byte & 0x7f) << shift;
    if (byte < 0x80) break;
  }
  absl::string_view taken = in->substr(0, n);
  in->remove_prefix(n);
  return taken;
}

struct Unpacked {
  absl::string_view name, config, state;
};
Unpacked Unpack(absl::string_view packed) {
  Unpacked u;
  u.name = TakeLengthPrefixed(&packed);
  u.config = TakeLengthPrefixed(&packed);
  u.state = packed;
  return u;
}
std::string Pack(absl::string_view name, absl::string_view config, absl::string_view state) {
  std::string out;
  out.reserve(VarintSize(name.size()) + name.size() + VarintSize(config.size()) + config.size() + state.size());
  AppendVarint(name.size(), &out);
  out.append(name.data(), name.size());
  AppendVarint(config.size(), &out);
  out.append(config.data(), config.size());
  out.append(state.data(), state.size());
  return out;
}

}  // namespace

absl::string_view StateMirror::NameOf(const Entry& e) {
  absl::string_view packed = e.packed;
  return TakeLengthPrefixed(&packed);
}

void StateMirror::SetPart(Entries* entries, absl::string_view name, Part part, std::string bytes) {
  auto it = entries->lower_bound(name);
  if (it == entries->end() || NameOf(*it) != name) {
    entries->insert(it, Entry{part == Part::kConfig ? Pack(name, bytes, "") : Pack(name, "", bytes)});
    return;
  }
  const Unpacked u = Unpack(it->packed);
  it->packed = part == Part::kConfig ? Pack(u.name, bytes, u.state) : Pack(u.name, u.config, bytes);
}

// Decodes the `part` (config or state) of every entry of `from` that has one
// onto `out`. A record this mirror encoded itself always decodes; one that
// does not is a bug in records.cc, and a state missing it would be served as
// exact: stop.
template <typename Record, typename Model>
void StateMirror::DecodeAll(const Entries& from, Part part, bool (*decode)(const Record&, Model*), const char* what,
                            std::vector<Model>* out) {
  out->reserve(from.size());
  for (const Entry& entry : from) {
    const Unpacked u = Unpack(entry.packed);
    const absl::string_view bytes = part == Part::kConfig ? u.config : u.state;
    if (bytes.empty()) continue;
    Record r;
    out->emplace_back();
    if (!r.ParseFromArray(bytes.data() + 1, static_cast<int>(bytes.size() - 1)) || !decode(r, &out->back())) {
      fprintf(stderr, "state mirror: the %s record of \"%.*s\" does not decode\n", what,
              static_cast<int>(u.name.size()), u.name.data());
      abort();
    }
    if (bytes[0] == kChainWithDefaultPolicy) PutBackDefaultPolicy(&out->back());
    out->back().name = std::string(u.name);  // keyed by name, as in the data dir
  }
}

StateMirror::StateMirror(const RestoredState& start)
    : generation_(start.generation),
      pins_(start.pins),
      manual_(start.manual),
      next_sequence_(start.next_sequence),
      log_index_(start.log_index) {
  Put(start.targets, start.chains, start.health, start.chain_states);
}

void StateMirror::Put(const std::vector<TargetConfig>& targets, const std::vector<ChainConfig>& chains,
                      const std::vector<TargetStateRecord>& health,
                      const std::vector<ChainStateRecord>& chain_states) {
  for (const TargetConfig& t : targets) SetPart(&targets_, t.name, Part::kConfig, Encode(t, storage::EncodeTarget));
  for (const ChainConfig& c : chains) SetPart(&chains_, c.name, Part::kConfig, EncodeChainConfig(c));
  for (const TargetStateRecord& r : health) {
    SetPart(&targets_, r.name, Part::kState, Encode(r, storage::EncodeHealth));
  }
  for (const ChainStateRecord& r : chain_states) {
    SetPart(&chains_, r.name, Part::kState, Encode(r, storage::EncodeChainState));
  }
}

void StateMirror::Apply(const Change& change) {
  if (change.config_generation != 0) {
    Put(change.put_targets, change.put_chains, {}, {});
    for (const std::string& name : change.deleted_targets) {
      targets_.erase(name);
      manual_.erase(name);
    }
    for (const std::string& name : change.deleted_chains) {
      chains_.erase(name);
      pins_.erase(name);
    }
    generation_ = change.config_generation;
  }
  for (const PinRecord& p : change.pins) {
    if (p.target.empty()) {
      pins_.erase(p.chain);
    } else {
      pins_[p.chain] = p.target;
    }
  }
  for (const ManualFailoverRecord& m : change.manual) {
    if (m.active) {
      manual_[m.target] = RestoredManual{m.reason, m.since};
    } else {
      manual_.erase(m.target);
    }
  }
  Put({}, {}, change.targets, change.chains);
  next_sequence_ = std::max(next_sequence_, change.next_sequence);
  log_index_ = std::max(log_index_, change.log_index);
}

RestoredState StateMirror::State() const {
  RestoredState s;
  s.generation = generation_;
  DecodeAll(targets_, Part::kConfig, storage::DecodeTarget, "target", &s.targets);
  DecodeAll(chains_, Part::kConfig, storage::DecodeChain, "chain", &s.chains);
  s.pins = pins_;
  s.manual = manual_;
  DecodeAll(targets_, Part::kState, storage::DecodeHealth, "health", &s.health);
  DecodeAll(chains_, Part::kState, storage::DecodeChainState, "chain state", &s.chain_states);
  s.next_sequence = next_sequence_;
  s.log_index = log_index_;
  return s;
}

}  // namespace failover
