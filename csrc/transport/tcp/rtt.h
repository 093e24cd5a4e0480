#pragma once
// The round trip the kernel measured on a TCP connection: on a new connection its handshake's,
// later the least of its samples (TCP_INFO's minimum RTT, which queues do not inflate).
#include <cstdint>

namespace ringzip::tcp {

// Microseconds; 0 where the kernel cannot tell (no sample yet, or a kernel without the field).
uint32_t min_rtt_us(int fd);

}  // namespace ringzip::tcp
