#include "transport/tcp/rtt.h"

#include <linux/tcp.h>  // struct tcp_info with tcpi_min_rtt (glibc's lacks it)
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstddef>

namespace ringzip::tcp {

uint32_t min_rtt_us(int fd) {
  tcp_info info{};
  socklen_t len = sizeof info;
  if (::getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &len) != 0) return 0;
  if (len < offsetof(tcp_info, tcpi_min_rtt) + sizeof info.tcpi_min_rtt) return 0;
  return info.tcpi_min_rtt == ~0u ? 0 : info.tcpi_min_rtt;
}

uint64_t window_now(int fd) {
  tcp_info info{};
  socklen_t len = sizeof info;
  if (::getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &len) != 0) return 0;
  if (len < offsetof(tcp_info, tcpi_snd_cwnd) + sizeof info.tcpi_snd_cwnd) return 0;
  return static_cast<uint64_t>(info.tcpi_snd_cwnd) * info.tcpi_snd_mss;
}

}  // namespace ringzip::tcp
