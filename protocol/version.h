// The executor protocol's one version: the contract between the coordinator, the worker daemon,
// the launcher and deepool-executor (run specs, executor commands, executor events;
// docs/formats.md). Run specs carry it in their "version" field and executors refuse any other;
// it goes up whenever one side would misread a document or a line the other writes.
#pragma once

namespace deepool::protocol {

inline constexpr int kProtocolVersion = 1;

}  // namespace deepool::protocol
