// The extension's own arc4random, so that the wheel's manylinux tag is not glibc 2.36's.
//
// The extension links libstdc++ statically (CMakeLists.txt), and libstdc++'s random.o
// (std::random_device) calls arc4random when the toolchain's glibc has it: built on glibc >= 2.36
// (Debian 12) the .so then needs arc4random@GLIBC_2.36, and auditwheel tags the wheel
// manylinux_2_36, which glibc 2.35 (Ubuntu 22.04) refuses. Defined here, hidden, the linker binds
// libstdc++'s reference to this copy instead, and the highest glibc version left is 2.34's (the
// pthread and dl functions that moved into libc). Nothing in ringzip calls it; on an older glibc
// nothing references it at all.
//
// Same contract as glibc's: 32 random bits from the kernel's CSPRNG, never fails (aborts when no
// randomness can be had). getrandom(2) through syscall(): the libc wrapper is GLIBC_2.25 and the
// syscall exists from Linux 3.17; /dev/urandom where the kernel lacks it or seccomp forbids it.
#include <errno.h>
#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>

namespace {

bool fill_getrandom(unsigned char* p, size_t n) {
#ifdef SYS_getrandom
  while (n > 0) {
    long got = syscall(SYS_getrandom, p, n, 0);
    if (got < 0) {
      if (errno == EINTR) continue;
      return false;  // ENOSYS (kernel < 3.17) or EPERM (seccomp): try the device
    }
    p += got;
    n -= static_cast<size_t>(got);
  }
  return true;
#else
  return false;
#endif
}

bool fill_urandom(unsigned char* p, size_t n) {
  int fd;
  do {
    fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) return false;
  while (n > 0) {
    ssize_t got = read(fd, p, n);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;
    p += got;
    n -= static_cast<size_t>(got);
  }
  close(fd);
  return n == 0;
}

}  // namespace

extern "C" __attribute__((visibility("hidden"))) uint32_t arc4random() noexcept {
  uint32_t v;
  auto* p = reinterpret_cast<unsigned char*>(&v);
  if (!fill_getrandom(p, sizeof v) && !fill_urandom(p, sizeof v)) std::abort();
  return v;
}
