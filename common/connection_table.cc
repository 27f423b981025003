#include "common/connection_table.h"

namespace deepool {

ConnectionTable::ConnectionTable(ConnectionLimits limits, StillOpen still_open, const Clock* clock,
                                 Clock::Duration sweep_interval)
    : limits_(limits),
      still_open_(std::move(still_open)),
      clock_(clock),
      sweep_interval_(sweep_interval) {}

int ConnectionTable::open_from(const std::string& peer) const {
  auto it = per_peer_.find(peer);
  return it == per_peer_.end() ? 0 : it->second;
}

bool ConnectionTable::AtBound(const std::string& peer) const {
  return open() >= limits_.max_total || open_from(peer) >= limits_.max_per_peer;
}

ConnectionTable::Verdict ConnectionTable::Check(const std::string& peer) {
  if (AtBound(peer) && (!swept_ || clock_->Now() - last_sweep_ >= sweep_interval_)) Sweep();
  if (open() >= limits_.max_total) return Verdict::kRefuseTotal;
  if (open_from(peer) >= limits_.max_per_peer) return Verdict::kRefusePeer;
  return Verdict::kKeep;
}

void ConnectionTable::Add(int fd, const SocketIdentity& identity, const std::string& peer) {
  if (auto old = by_fd_.find(fd); old != by_fd_.end()) Forget(old);
  by_fd_.emplace(fd, Entry{identity, peer});
  ++per_peer_[peer];
}

void ConnectionTable::Sweep() {
  swept_ = true;
  last_sweep_ = clock_->Now();
  for (auto it = by_fd_.begin(); it != by_fd_.end();) {
    auto next = std::next(it);
    if (!still_open_(it->first, it->second.identity)) Forget(it);
    it = next;
  }
}

void ConnectionTable::Forget(std::unordered_map<int, Entry>::iterator entry) {
  auto peer = per_peer_.find(entry->second.peer);
  if (peer != per_peer_.end() && --peer->second <= 0) per_peer_.erase(peer);
  by_fd_.erase(entry);
}

}  // namespace deepool
