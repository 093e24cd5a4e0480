#include "backend/device_path.h"

#include <map>
#include <mutex>

namespace ringzip {
namespace {

struct Registry {
  std::mutex mu;
  std::map<c10::DeviceType, DevicePathFactory> factories;
};

Registry& registry() {
  static Registry r;  // first use may come from another file's static initializer
  return r;
}

}  // namespace

bool register_device_path(c10::DeviceType type, DevicePathFactory make) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.factories[type] = std::move(make);
  return true;
}

const DevicePathFactory* device_path_factory(c10::DeviceType type) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.factories.find(type);
  return it == r.factories.end() ? nullptr : &it->second;
}

}  // namespace ringzip
