#pragma once
// Connection set-up of the TCP transport, torch-free: a listening socket on this rank's address,
// then a pool of sockets from every rank to every lower rank, each greeted with who it is and
// the pool's size -- taken over from a group before between the same processes where one was
// kept (kept.h), new otherwise. The pool holds `connections` sockets, or, with connections 0,
// as many as the pair's round trip asks for, which the rank that connects reads from its first
// connection's handshake (TCP's minimum RTT): from Transport::kLongRoundTrip on, as many send
// windows as the pair's rate (`pair_rate`, bytes/s, where the link's rate is known) keeps in
// flight over that round trip; one below it or where the rate is not known.
// Its greeting tells the other end, so both cut messages alike (stripes.h).
// Ranks meet through callbacks that publish and look up an address (the transport passes its
// store), so this file knows no store.
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace ringzip::tcp {

struct Meeting {
  std::function<void(const std::string& address)> publish;  // this rank's "host port process group"
  std::function<std::string(int rank)> lookup;              // another rank's, waiting for it
};

struct Connected {
  // sockets[p][m]: connection m of the pool to peer p (none for this rank), non-blocking, TCP_NODELAY, with
  // send and receive buffers as large as the kernel lets a socket ask for.
  std::vector<std::vector<int>> sockets;
  std::vector<uint64_t> processes;  // [p]: peer p's process_key()
  // What one of these connections keeps in flight at most: the lesser of its send and receive
  // buffers' ceilings (asked for, or autotuning's maximum), of which TCP fills about 70 % with
  // payload (one connection at RTT 100 ms carried 5.9 MB per round trip with 8 MiB asked).
  double window_bytes = 0;
};

// Throws std::runtime_error naming the rank that could not be reached.
Connected connect_all(int rank, int size, int connections, double pair_rate, const std::string& address,
                      const Meeting& meeting, std::chrono::milliseconds timeout);

}  // namespace ringzip::tcp
