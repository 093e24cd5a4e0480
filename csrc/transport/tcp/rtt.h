#pragma once
// What the kernel knows of a TCP connection (TCP_INFO): the round trip it measured -- on a new
// connection its handshake's, later the least of its samples (the minimum RTT, which queues do
// not inflate) -- and its congestion window.
#include <cstdint>

namespace ringzip::tcp {

// Microseconds; 0 where the kernel cannot tell (no sample yet, or a kernel without the field).
uint32_t min_rtt_us(int fd);
// The bytes the connection's congestion window lets it send now (TCP_INFO: its window in
// segments times their size); 0 where the kernel cannot tell.
uint64_t window_now(int fd);

}  // namespace ringzip::tcp
