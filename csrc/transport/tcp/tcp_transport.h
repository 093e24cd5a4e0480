#pragma once
// CPU transport between machines over TCP sockets of ringzip's own: a pool of connections to
// every peer, one I/O thread per group (engine.h: framing, matching, failures), connected
// through the group's store when the group is created (connect.h). Semantics are the Transport
// interface's, as on Gloo: isend/irecv by (peer, 32-bit tag), receives from any source, one
// (peer, tag) matches in order, sizes must be equal. A collective's large message to a peer
// with more than one connection travels striped over them (stripes.h), so that a long link is
// not held to one connection's send window per round trip (docs/design.md, "Filling a long
// link").
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <memory>
#include <string>

#include "transport/transport.h"

namespace ringzip {

struct TcpOptions {
  // The address this rank listens on and its peers connect to (a host name or a numeric
  // address of one of this machine's interfaces).
  std::string address;
  // Connections to each peer (rank 0's count: every rank must pass the same); 0: chosen per
  // pair of ranks by their round trip and, where given, the link's rate (connect.h).
  int connections = 0;
  double link_gbit = 0;  // Options.link_gbit when the group is created; 0: not known
};

// `store`: private to this transport (the caller passes a PrefixStore), used only to exchange
// addresses at construction. Throws a clear std::runtime_error when a peer cannot be reached
// within `timeout`.
std::unique_ptr<Transport> make_tcp_transport(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                              std::chrono::milliseconds timeout, const TcpOptions& options);

}  // namespace ringzip
