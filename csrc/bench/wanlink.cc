// wanlink: a wide-area link between network namespaces, in user space, for kernels without
// netem. Each emulated machine gets a TUN device in its namespace; this one process forwards
// every IPv4 packet between them through the machine's uplink (RATE, a drop-tail queue), a
// one-way DELAY with random LOSS, and the receiver's downlink (RATE, a drop-tail queue): the
// veth + tbf + netem topology of ringzip.bench.netem, with the delay and loss that need netem.
//
//   wanlink [--rate BITS] [--delay SECONDS] [--loss P] [--queue SECONDS] [--seed N] [--no-gso]
//           NETNS:IFNAME:ADDR ...
//
// It creates each device inside its namespace (setns), sets ADDR/24 and brings it up, prints
// "ready" and forwards until stdin closes or "quit" arrives; "rate BITS" on stdin changes the
// rate. At exit it prints one JSON line of counters and its own CPU time. The devices vanish
// with the process.
//
// Why the pieces are as they are:
// - IFF_VNET_HDR with TSO: TCP hands the device 64 KB segments whole, so a stream at 1 Gbit/s
//   costs this process a few percent of a core instead of most of one (per 1500-byte packet).
//   Every stage charges a segment's wire bytes as the MTU-sized packets it stands for
//   (headers and 14 bytes of Ethernet each, as tbf on a veth counts), and loss is drawn per
//   such packet: a large segment that loses some is split here into the packets that survive.
// - Real-time priority where permitted: the ranks load every core, and a forwarder that waits
//   for one would add its wait to the link's delay.
#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/if_tun.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <queue>
#include <string>
#include <vector>

namespace {

// The virtio-net header a TUN device with IFF_VNET_HDR puts before each packet (the kernel's
// <linux/virtio_net.h> does not compile as C++: a field is named `class`).
struct virtio_net_hdr {
  uint8_t flags;
  uint8_t gso_type;
  uint16_t hdr_len, gso_size, csum_start, csum_offset;
};
constexpr uint8_t VIRTIO_NET_HDR_GSO_NONE = 0;

constexpr size_t kHdr = sizeof(virtio_net_hdr);
constexpr size_t kMaxPacket = 65536 + 256;
constexpr int kEthernet = 14;

[[noreturn]] void die(const std::string& what) {
  fprintf(stderr, "wanlink: %s: %s\n", what.c_str(), errno ? strerror(errno) : "invalid");
  exit(1);
}

int64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

struct Config {
  double rate_bits = 0;  // 0: unlimited
  double delay_s = 0;
  double loss = 0;
  double queue_s = 0.02;
  uint64_t seed = 1;
  bool gso = true;
};

struct Machine {
  std::string netns, ifname;
  uint32_t addr = 0;  // network order
  int fd = -1;
  int64_t up_free = 0, down_free = 0;  // when the uplink / downlink next falls idle
};

// One packet as read from a device: the virtio header (when GSO is on), then the IP packet.
struct Packet {
  std::vector<uint8_t> buf;
  size_t len = 0;  // bytes in buf
  int dst = -1;
  int64_t wire = 0;  // bytes the packet stands for on an Ethernet link
  size_t segs = 1;   // the MTU-sized packets it stands for (>1: a TCP segment that can be split)
};

struct Event {
  int64_t at;
  uint64_t order;  // FIFO among events at the same instant
  Packet* pkt;
  bool delivered;  // false: reaches the receiver's downlink; true: leaves it
  bool operator>(const Event& o) const { return at != o.at ? at > o.at : order > o.order; }
};

struct Counters {
  uint64_t packets = 0, bytes = 0, wire_bytes = 0, lost = 0, queue_drops = 0, split = 0, unroutable = 0,
           write_errors = 0;
};

class Rng {  // xorshift64*: per-packet loss draws, reproducible by seed
 public:
  explicit Rng(uint64_t seed) : s_(seed ? seed : 0x9E3779B97F4A7C15ull) {}
  double uniform() {
    s_ ^= s_ >> 12;
    s_ ^= s_ << 25;
    s_ ^= s_ >> 27;
    return double((s_ * 0x2545F4914F6CDD1Dull) >> 11) * 0x1.0p-53;
  }

 private:
  uint64_t s_;
};

uint32_t csum_add(uint32_t sum, const uint8_t* p, size_t n) {
  for (; n > 1; p += 2, n -= 2) sum += uint32_t(p[0]) << 8 | p[1];
  if (n) sum += uint32_t(p[0]) << 8;
  return sum;
}

uint16_t csum_fold(uint32_t sum) {
  while (sum >> 16) sum = (sum & 0xFFFF) + (sum >> 16);
  return htons(uint16_t(~sum));
}

// The TCP/IPv4 packet's header lengths, or false when it is something else.
bool tcp4_headers(const uint8_t* ip, size_t len, size_t* ihl, size_t* thl) {
  if (len < 20 || (ip[0] >> 4) != 4 || ip[9] != IPPROTO_TCP) return false;
  *ihl = size_t(ip[0] & 0xF) * 4;
  if (*ihl < 20 || len < *ihl + 20) return false;
  *thl = size_t(ip[*ihl + 12] >> 4) * 4;
  return *thl >= 20 && len >= *ihl + *thl;
}

class Link {
 public:
  Link(Config cfg, std::vector<Machine> machines) : cfg_(cfg), m_(std::move(machines)), rng_(cfg.seed) {}

  void open_devices();
  void run();
  void report(int64_t started) const;

 private:
  int route(const uint8_t* ip, size_t len) const;
  int64_t wire_time(int64_t wire) const {
    return cfg_.rate_bits > 0 ? int64_t(double(wire) * 8e9 / cfg_.rate_bits) : 0;
  }
  template <class Leave>
  void enqueue(int64_t* free, int64_t at, Packet* p, Leave&& leave);
  void read_device(int src, int64_t now);
  void admit(int src, Packet* p, int64_t now);
  void uplink(int src, Packet* p, int64_t now);
  std::vector<Packet*> split(Packet* p, const std::vector<bool>& keep);
  void process(const Event& e, int64_t now);
  void command(const char* line);
  Packet* take();
  void give(Packet* p) { free_.push_back(p); }

  Config cfg_;
  std::vector<Machine> m_;
  Rng rng_;
  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> events_;
  std::vector<Packet*> free_;
  uint64_t order_ = 0;
  Counters c_;
  bool quit_ = false;
  std::string stdin_buf_;
};

void Link::open_devices() {
  int home = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
  if (home < 0) die("open /proc/self/ns/net");
  for (auto& m : m_) {
    std::string path = "/var/run/netns/" + m.netns;
    int ns = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (ns < 0) die("open " + path);
    if (setns(ns, CLONE_NEWNET) != 0) die("setns " + m.netns);
    close(ns);
    m.fd = open("/dev/net/tun", O_RDWR | O_NONBLOCK | O_CLOEXEC);
    if (m.fd < 0) die("open /dev/net/tun");
    ifreq ifr{};
    snprintf(ifr.ifr_name, IFNAMSIZ, "%s", m.ifname.c_str());
    ifr.ifr_flags = IFF_TUN | IFF_NO_PI | (cfg_.gso ? IFF_VNET_HDR : 0);
    if (ioctl(m.fd, TUNSETIFF, &ifr) != 0) die("TUNSETIFF " + m.ifname);
    if (cfg_.gso && ioctl(m.fd, TUNSETOFFLOAD, TUN_F_CSUM | TUN_F_TSO4 | TUN_F_TSO6 | TUN_F_TSO_ECN) != 0)
      die("TUNSETOFFLOAD " + m.ifname);
    int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);  // configures the device in this namespace
    if (s < 0) die("socket");
    auto* sin = reinterpret_cast<sockaddr_in*>(&ifr.ifr_addr);
    sin->sin_family = AF_INET;
    sin->sin_addr.s_addr = m.addr;
    if (ioctl(s, SIOCSIFADDR, &ifr) != 0) die("SIOCSIFADDR " + m.ifname);
    sin->sin_addr.s_addr = htonl(0xFFFFFF00u);
    if (ioctl(s, SIOCSIFNETMASK, &ifr) != 0) die("SIOCSIFNETMASK " + m.ifname);
    ifr.ifr_qlen = 10000;  // the kernel's queue toward us: bursts wait here, not drop
    if (ioctl(s, SIOCSIFTXQLEN, &ifr) != 0) die("SIOCSIFTXQLEN " + m.ifname);
    if (ioctl(s, SIOCGIFFLAGS, &ifr) != 0) die("SIOCGIFFLAGS " + m.ifname);
    ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
    if (ioctl(s, SIOCSIFFLAGS, &ifr) != 0) die("SIOCSIFFLAGS " + m.ifname);
    close(s);
  }
  if (setns(home, CLONE_NEWNET) != 0) die("setns back");
  close(home);
}

int Link::route(const uint8_t* ip, size_t len) const {
  if (len < 20 || (ip[0] >> 4) != 4) return -1;
  uint32_t dst;
  memcpy(&dst, ip + 16, 4);
  for (size_t i = 0; i < m_.size(); ++i)
    if (m_[i].addr == dst) return int(i);
  return -1;
}

Packet* Link::take() {
  if (free_.empty()) {
    auto* p = new Packet;
    p->buf.resize(kMaxPacket);
    return p;
  }
  Packet* p = free_.back();
  free_.pop_back();
  return p;
}

void Link::read_device(int src, int64_t now) {
  const size_t off = cfg_.gso ? kHdr : 0;
  for (int burst = 0; burst < 256; ++burst) {
    Packet* p = take();
    ssize_t n = read(m_[src].fd, p->buf.data(), p->buf.size());
    if (n <= 0) {
      give(p);
      if (n < 0 && errno != EAGAIN && errno != EINTR) die("read " + m_[src].ifname);
      return;
    }
    p->len = size_t(n);
    const uint8_t* ip = p->buf.data() + off;
    p->dst = size_t(n) > off ? route(ip, p->len - off) : -1;
    if (p->dst < 0 || p->dst == src) {
      ++c_.unroutable;
      give(p);
      continue;
    }
    admit(src, p, now);
  }
}

// Counts the packet, draws its loss per MTU-sized packet it stands for, and starts it on the
// sender's uplink.
void Link::admit(int src, Packet* p, int64_t now) {
  const size_t off = cfg_.gso ? kHdr : 0;
  const uint8_t* ip = p->buf.data() + off;
  size_t ip_len = p->len - off, ihl = 0, thl = 0, segs = 1;
  virtio_net_hdr vh{};
  if (cfg_.gso) memcpy(&vh, p->buf.data(), kHdr);
  const bool gso = cfg_.gso && vh.gso_type != VIRTIO_NET_HDR_GSO_NONE && vh.gso_size > 0;
  if (gso && tcp4_headers(ip, ip_len, &ihl, &thl)) {
    size_t payload = ip_len - ihl - thl;
    segs = std::max<size_t>(1, (payload + vh.gso_size - 1) / vh.gso_size);
    p->wire = int64_t(payload + segs * (ihl + thl + kEthernet));
  } else {
    p->wire = int64_t(ip_len + kEthernet);
  }
  p->segs = segs;
  ++c_.packets;
  c_.bytes += ip_len;
  if (cfg_.loss > 0) {
    std::vector<bool> keep(segs);
    size_t nlost = 0;
    for (size_t i = 0; i < segs; ++i) nlost += !(keep[i] = rng_.uniform() >= cfg_.loss);
    c_.lost += nlost;
    if (nlost == segs) {
      give(p);
      return;
    }
    if (nlost) {
      for (Packet* q : split(p, keep)) uplink(src, q, now);
      return;
    }
  }
  uplink(src, p, now);
}

// A drop-tail queue that drains at the rate from *free on: a packet enters when it would start
// within queue_s of arriving, and leaves when its bytes are through. Where a large TCP segment's
// tail would wait longer, that tail is dropped and its head goes on (what the queue does to
// the MTU-sized packets it stands for); a packet whose first would wait longer is dropped.
template <class Leave>
void Link::enqueue(int64_t* free, int64_t at, Packet* p, Leave&& leave) {
  const int64_t start = std::max(at, *free), room = int64_t(cfg_.queue_s * 1e9) - (start - at);
  const int64_t seg_time = std::max<int64_t>(1, wire_time(p->wire / int64_t(p->segs)));
  const size_t fit = room < 0 ? 0 : std::min(p->segs, size_t(room / seg_time) + 1);
  if (fit == 0) {
    c_.queue_drops += p->segs;
    give(p);
    return;
  }
  std::vector<Packet*> parts{p};
  if (fit < p->segs) {
    c_.queue_drops += p->segs - fit;
    std::vector<bool> keep(p->segs);
    std::fill(keep.begin(), keep.begin() + std::ptrdiff_t(fit), true);
    parts = split(p, keep);
  }
  for (Packet* q : parts) {
    *free = std::max(at, *free) + wire_time(q->wire);
    leave(q, *free);
  }
}

// The sender's uplink, then the delay: the packet reaches the receiver's downlink.
void Link::uplink(int src, Packet* p, int64_t now) {
  enqueue(&m_[src].up_free, now, p, [&](Packet* q, int64_t leaves) {
    c_.wire_bytes += q->wire;
    events_.push({leaves + int64_t(cfg_.delay_s * 1e9), order_++, q, false});
  });
}

// The packets of a TCP segment that `keep` names, each with its own headers and checksums
// (what the sender's NIC would have sent); the segment itself is given back.
std::vector<Packet*> Link::split(Packet* p, const std::vector<bool>& keep) {
  std::vector<Packet*> out;
  virtio_net_hdr vh;
  memcpy(&vh, p->buf.data(), kHdr);
  const uint8_t* ip = p->buf.data() + kHdr;
  size_t ip_len = p->len - kHdr, ihl, thl;
  tcp4_headers(ip, ip_len, &ihl, &thl);
  const size_t hl = ihl + thl, mss = vh.gso_size, payload = ip_len - hl;
  uint32_t seq0;
  memcpy(&seq0, ip + ihl + 4, 4);
  seq0 = ntohl(seq0);
  uint16_t id0 = uint16_t(ip[4] << 8 | ip[5]);
  ++c_.split;
  for (size_t i = 0, off = 0; off < payload; ++i, off += mss) {
    if (!keep[i]) continue;
    size_t n = std::min(mss, payload - off);
    bool last = off + n == payload;
    Packet* q = take();
    virtio_net_hdr plain{};
    memcpy(q->buf.data(), &plain, kHdr);
    uint8_t* h = q->buf.data() + kHdr;
    memcpy(h, ip, hl);
    memcpy(h + hl, ip + hl + off, n);
    uint16_t tot = htons(uint16_t(hl + n)), id = htons(uint16_t(id0 + i));
    memcpy(h + 2, &tot, 2);
    memcpy(h + 4, &id, 2);
    h[10] = h[11] = 0;
    uint16_t ipsum = csum_fold(csum_add(0, h, ihl));
    memcpy(h + 10, &ipsum, 2);
    uint8_t* t = h + ihl;
    uint32_t seq = htonl(seq0 + uint32_t(off));
    memcpy(t + 4, &seq, 4);
    if (!last) t[13] &= uint8_t(~0x09);  // FIN and PSH belong to the last packet only
    if (i) t[13] &= uint8_t(~0x80);      // CWR to the first
    t[16] = t[17] = 0;
    uint8_t pseudo[12];
    memcpy(pseudo, h + 12, 8);
    pseudo[8] = 0;
    pseudo[9] = IPPROTO_TCP;
    pseudo[10] = uint8_t((thl + n) >> 8);
    pseudo[11] = uint8_t(thl + n);
    uint16_t tsum = csum_fold(csum_add(csum_add(0, pseudo, 12), t, thl + n));
    memcpy(t + 16, &tsum, 2);
    q->len = kHdr + hl + n;
    q->dst = p->dst;
    q->wire = int64_t(hl + n + kEthernet);
    q->segs = 1;
    out.push_back(q);
  }
  give(p);
  return out;
}

void Link::process(const Event& e, int64_t now) {
  Packet* p = e.pkt;
  Machine& dst = m_[p->dst];
  if (!e.delivered) {  // reached the receiver's downlink
    enqueue(&dst.down_free, e.at, p, [&](Packet* q, int64_t leaves) { events_.push({leaves, order_++, q, true}); });
    return;
  }
  if (write(dst.fd, p->buf.data(), p->len) < 0) ++c_.write_errors;
  give(p);
}

void Link::command(const char* line) {
  double v;
  if (!strcmp(line, "quit")) {
    quit_ = true;
  } else if (sscanf(line, "rate %lf", &v) == 1 && v >= 0) {
    cfg_.rate_bits = v;
    printf("ok\n");
    fflush(stdout);
  } else if (*line) {
    fprintf(stderr, "wanlink: unknown command '%s' (quit, rate BITS)\n", line);
  }
}

void Link::run() {
  int ep = epoll_create1(EPOLL_CLOEXEC);
  int tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
  if (ep < 0 || tfd < 0) die("epoll/timerfd");
  auto watch = [&](int fd, uint64_t tag) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = tag;
    if (epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) != 0) die("epoll_ctl");
  };
  for (size_t i = 0; i < m_.size(); ++i) watch(m_[i].fd, i);
  watch(tfd, m_.size());
  watch(STDIN_FILENO, m_.size() + 1);
  epoll_event evs[64];
  int64_t armed = -1;
  while (!quit_) {
    int64_t now = now_ns();
    while (!events_.empty() && events_.top().at <= now) {
      Event e = events_.top();
      events_.pop();
      process(e, now);
    }
    int64_t next = events_.empty() ? -1 : events_.top().at;
    if (next != armed) {
      itimerspec its{};
      if (next >= 0) {
        its.it_value.tv_sec = next / 1000000000;
        its.it_value.tv_nsec = next % 1000000000;
      }
      timerfd_settime(tfd, TFD_TIMER_ABSTIME, &its, nullptr);
      armed = next;
    }
    int n = epoll_wait(ep, evs, 64, -1);
    if (n < 0 && errno != EINTR) die("epoll_wait");
    now = now_ns();
    for (int i = 0; i < n; ++i) {
      uint64_t tag = evs[i].data.u64;
      if (tag < m_.size()) {
        read_device(int(tag), now);
      } else if (tag == m_.size()) {
        uint64_t ticks;
        if (read(tfd, &ticks, sizeof ticks) < 0) {
        }
        armed = -1;
      } else {
        char buf[256];
        ssize_t r = read(STDIN_FILENO, buf, sizeof buf);
        if (r <= 0) {
          quit_ = true;  // our parent is gone: so are we, and with us the devices
          break;
        }
        stdin_buf_.append(buf, size_t(r));
        for (size_t nl; (nl = stdin_buf_.find('\n')) != std::string::npos;) {
          command(stdin_buf_.substr(0, nl).c_str());
          stdin_buf_.erase(0, nl + 1);
        }
      }
    }
  }
}

void Link::report(int64_t started) const {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  double cpu = double(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) + double(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-6;
  printf(
      "{\"packets\": %llu, \"bytes\": %llu, \"wire_bytes\": %llu, \"lost\": %llu, \"queue_drops\": %llu, "
      "\"split\": %llu, \"unroutable\": %llu, \"write_errors\": %llu, \"cpu_s\": %.3f, \"wall_s\": %.3f}\n",
      (unsigned long long)c_.packets, (unsigned long long)c_.bytes, (unsigned long long)c_.wire_bytes,
      (unsigned long long)c_.lost, (unsigned long long)c_.queue_drops, (unsigned long long)c_.split,
      (unsigned long long)c_.unroutable, (unsigned long long)c_.write_errors, cpu, double(now_ns() - started) * 1e-9);
  fflush(stdout);
}

double number(const char* flag, const char* text, double lo, double hi) {
  char* end;
  errno = 0;
  double v = strtod(text, &end);
  if (*text == 0 || *end != 0 || !std::isfinite(v) || v < lo || v > hi) {
    errno = 0;
    die(std::string(flag) + " " + text + " (expected a number in [" + std::to_string(lo) + ", " + std::to_string(hi) + "])");
  }
  return v;
}

void usage() {
  fprintf(stderr,
          "usage: wanlink [--rate BITS] [--delay SECONDS] [--loss P] [--queue SECONDS] [--seed N] [--no-gso] "
          "NETNS:IFNAME:ADDR ...\n");
  exit(2);
}

}  // namespace

int main(int argc, char** argv) {
  Config cfg;
  std::vector<Machine> machines;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    bool has_value = i + 1 < argc;
    if (a == "--rate" && has_value) cfg.rate_bits = number("--rate", argv[++i], 0, 1e12);
    else if (a == "--delay" && has_value) cfg.delay_s = number("--delay", argv[++i], 0, 10);
    else if (a == "--loss" && has_value) cfg.loss = number("--loss", argv[++i], 0, 1);
    else if (a == "--queue" && has_value) cfg.queue_s = number("--queue", argv[++i], 0, 10);
    else if (a == "--seed" && has_value) cfg.seed = uint64_t(number("--seed", argv[++i], 0, 1e18));
    else if (a == "--no-gso") cfg.gso = false;
    else if (a.rfind("--", 0) == 0) usage();
    else {
      size_t c1 = a.find(':'), c2 = a.rfind(':');
      Machine m;
      in_addr addr;
      if (c1 == std::string::npos || c1 == c2 || inet_pton(AF_INET, a.substr(c2 + 1).c_str(), &addr) != 1) usage();
      m.netns = a.substr(0, c1);
      m.ifname = a.substr(c1 + 1, c2 - c1 - 1);
      m.addr = addr.s_addr;
      if (m.ifname.empty() || m.ifname.size() >= IFNAMSIZ) usage();
      machines.push_back(m);
    }
  }
  if (machines.size() < 2) usage();
  int64_t started = now_ns();
  Link link(cfg, std::move(machines));
  link.open_devices();
  sched_param sp{};
  sp.sched_priority = 10;
  bool realtime = sched_setscheduler(0, SCHED_FIFO, &sp) == 0;
  printf("ready%s\n", realtime ? "" : " (no real-time priority)");
  fflush(stdout);
  link.run();
  link.report(started);
  return 0;
}
