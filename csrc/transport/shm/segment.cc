#include "transport/shm/segment.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <random>
#include <stdexcept>

namespace ringzip::shm {
namespace {

constexpr const char* kPrefix = "ringzip-";

std::string errno_text(int err) { return std::string(std::strerror(err)); }

[[noreturn]] void fail(const std::string& what, int err) {
  throw std::runtime_error("ringzip shm transport: " + what + ": " + errno_text(err));
}

size_t page_size() {
  const long p = sysconf(_SC_PAGESIZE);
  return p > 0 ? static_cast<size_t>(p) : 4096;
}

// The inode of this process's pid namespace: pids mean the same thing only inside one, so the
// sweep leaves other namespaces' segments alone (a container sharing /dev/shm).
unsigned long long pid_namespace() {
  struct stat st{};
  return stat("/proc/self/ns/pid", &st) == 0 ? static_cast<unsigned long long>(st.st_ino) : 0ull;
}

}  // namespace

size_t Layout::data() const {
  const size_t p = page_size();
  const size_t end = sizeof(SegmentHeader) + static_cast<size_t>(size) * sizeof(RingControl);
  return (end + p - 1) / p * p;
}

Mapping& Mapping::operator=(Mapping&& o) noexcept {
  if (this != &o) {
    reset();
    base_ = o.base_;
    bytes_ = o.bytes_;
    o.base_ = nullptr;
  }
  return *this;
}

void Mapping::reset() {
  if (base_) munmap(base_, bytes_);
  base_ = nullptr;
  bytes_ = 0;
}

std::string new_segment_name() {
  std::random_device rd;
  const unsigned long long r = (static_cast<unsigned long long>(rd()) << 32) ^ rd();
  char buf[96];
  std::snprintf(buf, sizeof buf, "/%s%d-%llx-%016llx", kPrefix, static_cast<int>(getpid()), pid_namespace(), r);
  return buf;
}

Mapping create_segment(const std::string& name, size_t bytes) {
  const int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) fail("cannot create the shared-memory segment " + name, errno);
  int err = ftruncate(fd, static_cast<off_t>(bytes)) == 0 ? 0 : errno;
  // posix_fallocate returns the error number instead of setting errno.
  if (!err) err = posix_fallocate(fd, 0, static_cast<off_t>(bytes));
  void* base = err ? MAP_FAILED : mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (!err && base == MAP_FAILED) err = errno;
  close(fd);
  if (err) {
    shm_unlink(name.c_str());
    fail("cannot reserve " + std::to_string(bytes >> 10) + " KiB of shared memory for " + name +
             " (is /dev/shm large enough? docker: --shm-size)",
         err);
  }
  return Mapping(base, bytes);
}

namespace {

std::string mode_text(mode_t m) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "0%03o", static_cast<unsigned>(m & 0777));
  return buf;
}

}  // namespace

Mapping open_segment(const std::string& name) {
  const int fd = shm_open(name.c_str(), O_RDWR, 0);
  if (fd < 0) {
    const int err = errno;
    fail("cannot open the shared-memory segment " + name +
             (err == ENOENT ? " (is that rank on another host, or did it exit?)" : ""),
         err);
  }
  struct stat st{};
  int err = fstat(fd, &st) == 0 ? 0 : errno;
  // Ours are created by this user, readable and writable by it alone: a segment of another
  // user, or one others may write, could be fed to this job by anyone (its frames are read as data).
  if (!err && (st.st_uid != geteuid() || (st.st_mode & 077) != 0)) {
    close(fd);
    throw std::runtime_error("ringzip shm transport: refusing the shared-memory segment " + name + " (owner uid " +
                             std::to_string(st.st_uid) + ", mode " + mode_text(st.st_mode) +
                             "): a peer's segment must belong to this user (uid " + std::to_string(geteuid()) +
                             ") with mode 0600");
  }
  if (!err && static_cast<size_t>(st.st_size) < sizeof(SegmentHeader)) err = EINVAL;
  void* base = err ? MAP_FAILED : mmap(nullptr, st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (!err && base == MAP_FAILED) err = errno;
  close(fd);
  if (err) fail("cannot map the shared-memory segment " + name, err);
  return Mapping(base, static_cast<size_t>(st.st_size));
}

void unlink_segment(const std::string& name) noexcept { shm_unlink(name.c_str()); }

int sweep_stale_segments() noexcept {
  DIR* d = opendir("/dev/shm");
  if (!d) return 0;
  const unsigned long long ns = pid_namespace();
  int removed = 0;
  while (const dirent* e = readdir(d)) {
    int pid = 0;
    unsigned long long their_ns = 0;
    int used = 0;
    if (std::strncmp(e->d_name, kPrefix, std::strlen(kPrefix)) != 0) continue;
    if (std::sscanf(e->d_name + std::strlen(kPrefix), "%d-%llx-%n", &pid, &their_ns, &used) != 2 || used == 0) continue;
    if (pid <= 0 || their_ns != ns || !(kill(pid, 0) != 0 && errno == ESRCH)) continue;
    if (shm_unlink((std::string("/") + e->d_name).c_str()) == 0) ++removed;
  }
  closedir(d);
  return removed;
}

namespace {

// State letter and start time of /proc/<pid>/stat; false when unreadable.
bool read_stat(pid_t pid, char& state, uint64_t& start) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/stat", static_cast<int>(pid));
  FILE* f = std::fopen(path, "r");
  if (!f) return false;
  char buf[1024];
  const size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  buf[n] = 0;
  const char* p = std::strrchr(buf, ')');  // the command name may hold spaces and ')'
  if (!p) return false;
  // After ") ": field 3 (state), then fields 4..21, then 22 (starttime).
  unsigned long long st = 0;
  if (std::sscanf(p + 1, " %c %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %llu", &state,
                  &st) != 2)
    return false;
  start = st;
  return true;
}

}  // namespace

uint64_t process_start_time(pid_t pid) noexcept {
  char state = 0;
  uint64_t start = 0;
  return read_stat(pid, state, start) ? start : 0;
}

bool process_gone(pid_t pid, uint64_t start_time) noexcept {
  if (kill(pid, 0) != 0 && errno == ESRCH) return true;
  char state = 0;
  uint64_t start = 0;
  if (!read_stat(pid, state, start)) return false;  // no /proc: kill() is all we know
  return state == 'Z' || state == 'X' || (start_time != 0 && start != start_time);
}

void futex_wait(std::atomic<uint32_t>* word, uint32_t expected, std::chrono::nanoseconds timeout) noexcept {
  if (timeout.count() <= 0) return;
  timespec ts{};
  ts.tv_sec = static_cast<time_t>(timeout.count() / 1000000000);
  ts.tv_nsec = static_cast<long>(timeout.count() % 1000000000);
  // Not FUTEX_PRIVATE_FLAG: the word is shared between processes.
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, expected, &ts, nullptr, 0);
}

void futex_wake_all(std::atomic<uint32_t>* word) noexcept {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT32_MAX, nullptr, nullptr, 0);
}

}  // namespace ringzip::shm
